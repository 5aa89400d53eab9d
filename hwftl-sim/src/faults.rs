//! Fault injection for tests: make the next read, program or erase fail (anywhere, at one
//! LBA, or in one segment). Power cut and page corruption are methods of [`crate::Ftl`].

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::geometry::{Lba, SegmentId};

/// Where an armed fault fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultTarget {
    /// The next operation of the kind, wherever it goes.
    Any,
    /// The next operation of the kind on this LBA.
    Lba(Lba),
    /// The next operation of the kind in this segment.
    Segment(SegmentId),
}

impl FaultTarget {
    fn hits(self, lba: Option<Lba>, segment: SegmentId) -> bool {
        match self {
            FaultTarget::Any => true,
            FaultTarget::Lba(l) => Some(l) == lba,
            FaultTarget::Segment(s) => s == segment,
        }
    }
}

/// Armed one-shot faults. Each armed fault fires once, on the first matching operation.
#[derive(Debug, Default)]
pub struct FaultInjector {
    /// Faults armed in all lists: lets the I/O path skip the locks when none is.
    armed: AtomicUsize,
    reads: Mutex<Vec<FaultTarget>>,
    programs: Mutex<Vec<FaultTarget>>,
    erases: Mutex<Vec<FaultTarget>>,
    /// Every write of the tables first sleeps this long (a slow device flush).
    table_write_pause: Mutex<Option<std::time::Duration>>,
}

fn take(
    armed: &AtomicUsize,
    list: &Mutex<Vec<FaultTarget>>,
    lba: Option<Lba>,
    segment: SegmentId,
) -> bool {
    if armed.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let mut l = list.lock();
    match l.iter().position(|t| t.hits(lba, segment)) {
        Some(i) => {
            l.remove(i);
            armed.fetch_sub(1, Ordering::Relaxed);
            true
        }
        None => false,
    }
}

impl FaultInjector {
    /// The next matching read fails with `ReadFailed` (uncorrectable).
    pub fn fail_next_read(&self, target: FaultTarget) {
        self.reads.lock().push(target);
        self.armed.fetch_add(1, Ordering::Relaxed);
    }

    /// The next matching program fails: its block is retired and its segment turns read-only.
    pub fn fail_next_program(&self, target: FaultTarget) {
        self.programs.lock().push(target);
        self.armed.fetch_add(1, Ordering::Relaxed);
    }

    /// The next matching TRIM fails to erase one block (the segment's lowest mapped chip),
    /// which is retired.
    pub fn fail_next_erase(&self, target: FaultTarget) {
        self.erases.lock().push(target);
        self.armed.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes every later write of the device's tables sleep `pause` first, as on a disk
    /// whose cache flush is slow (`None`: no pause). Shows which locks a table write holds.
    pub fn pause_table_writes(&self, pause: Option<std::time::Duration>) {
        *self.table_write_pause.lock() = pause;
    }

    pub(crate) fn table_write_pause(&self) {
        let pause = *self.table_write_pause.lock();
        if let Some(d) = pause {
            std::thread::sleep(d);
        }
    }

    pub(crate) fn take_read(&self, lba: Lba, segment: SegmentId) -> bool {
        take(&self.armed, &self.reads, Some(lba), segment)
    }

    pub(crate) fn take_program(&self, lba: Lba, segment: SegmentId) -> bool {
        take(&self.armed, &self.programs, Some(lba), segment)
    }

    pub(crate) fn take_erase(&self, segment: SegmentId) -> bool {
        take(&self.armed, &self.erases, None, segment)
    }
}
