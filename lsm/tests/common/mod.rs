//! Helpers shared by the engine's integration tests.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hwftl_sim::{
    AppendDevice, Backend, Command, Completion, DeviceConfig, DeviceError, DeviceStats, Ftl,
    Geometry, Rejected, SegmentId, SegmentInfo, Tag, Wait,
};

/// 2 x 2 chips of 64 blocks of 16 pages (2 spares per chip): 62 segments of 64 pages
/// (512 KiB), small enough for garbage collection to run after a few MiB of writes.
pub fn small_geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 64,
        pages_per_block: 16,
        spare_blocks_per_chip: 2,
    }
}

/// A freshly formatted RAM device on [`small_geometry`], closed again.
pub fn formatted_ram() -> (Backend, DeviceConfig) {
    let backend = Backend::Ram(hwftl_sim::RamStore::new());
    let cfg = DeviceConfig::new(small_geometry());
    drop(Ftl::format(&backend, cfg).unwrap());
    (backend, cfg)
}

/// The engine on the device `backend` holds, opened (again).
pub fn open_engine(backend: &Backend, cfg: DeviceConfig, ecfg: &lsm::EngineConfig) -> lsm::Engine {
    lsm::Engine::open(Arc::new(Ftl::open(backend, cfg).unwrap()), ecfg.clone()).unwrap()
}

/// Runs the offline check on the device as it is now (opened read-only; nothing may hold it),
/// asserts it is clean and wrote nothing, and returns its report.
pub fn assert_fsck_clean(
    backend: &Backend,
    cfg: DeviceConfig,
    ecfg: lsm::EngineConfig,
) -> lsm::FsckReport {
    let ro = Arc::new(Ftl::open_read_only(backend, cfg).unwrap());
    let report = lsm::Engine::fsck(ro.clone(), ecfg).unwrap();
    assert!(report.is_clean(), "fsck:\n{report}");
    let s = ro.stats();
    assert_eq!(
        (s.writes, s.trims, s.table_writes),
        (0, 0, 0),
        "fsck changed the device (writes, trims, table writes)"
    );
    report
}

/// Decides, before each command reaches the device, whether the power goes first.
pub type CutBefore = Box<dyn Fn(&Command) -> bool + Send + Sync>;

/// A device that cuts its own power (everything not yet completed is lost) when `cut_before`
/// says so for the command about to be submitted, and can refuse the next page write as a
/// failed program; otherwise it passes commands through.
pub struct CutDevice {
    inner: Arc<Ftl>,
    cut_before: CutBefore,
    refuse_write: AtomicBool,
    fail_flush: AtomicBool,
}

impl CutDevice {
    /// Wraps `inner`.
    pub fn new(inner: Arc<Ftl>, cut_before: CutBefore) -> Self {
        CutDevice {
            inner,
            cut_before,
            refuse_write: AtomicBool::new(false),
            fail_flush: AtomicBool::new(false),
        }
    }

    /// The next `Flush` command fails with an I/O error, as a disk's FLUSH CACHE may; the
    /// pages written before it stay as they are (on this device, durable once completed
    /// unless it models a volatile write cache).
    pub fn fail_next_flush(&self) {
        self.fail_flush.store(true, Ordering::SeqCst);
    }

    /// The next `Write` command is refused with `ProgramFailed` (the device is unchanged):
    /// the batch it belongs to fails and leaves a hole in the value log.
    pub fn refuse_next_write(&self) {
        self.refuse_write.store(true, Ordering::SeqCst);
    }

    fn check(&self, cmd: &Command) -> Result<(), Rejected> {
        if (self.cut_before)(cmd) {
            self.inner.power_cut();
        }
        if matches!(cmd, Command::Flush) && self.fail_flush.swap(false, Ordering::SeqCst) {
            let error = DeviceError::Io {
                context: "FLUSH".into(),
                source: std::sync::Arc::new(std::io::Error::other("injected flush failure")),
            };
            return Err(Rejected { error, buf: None });
        }
        if let Command::Write { lba, .. } = cmd {
            if self.refuse_write.swap(false, Ordering::SeqCst) {
                let pps = u64::from(self.inner.geometry().pages_per_segment());
                let segment = SegmentId(u32::try_from(lba.0 / pps).unwrap_or(u32::MAX));
                let error = DeviceError::ProgramFailed {
                    lba: *lba,
                    segment,
                    chip: 0,
                    block: 0,
                };
                return Err(Rejected { error, buf: None });
            }
        }
        Ok(())
    }
}

impl AppendDevice for CutDevice {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn submit(&self, cmd: Command) -> Result<Tag, Rejected> {
        self.check(&cmd)?;
        self.inner.submit(cmd)
    }
    fn submit_many(&self, cmds: Vec<Command>) -> Vec<Result<Tag, Rejected>> {
        cmds.into_iter().map(|c| self.submit(c)).collect()
    }
    fn submit_and_reap(
        &self,
        cmds: Vec<Command>,
        out: &mut Vec<Completion>,
        max: usize,
        wait: Wait,
    ) -> (Vec<Result<Tag, Rejected>>, hwftl_sim::Result<usize>) {
        let tags = self.submit_many(cmds);
        (tags, self.inner.reap(out, max, wait))
    }
    fn reap(&self, out: &mut Vec<Completion>, max: usize, wait: Wait) -> hwftl_sim::Result<usize> {
        self.inner.reap(out, max, wait)
    }
    fn execute(&self, cmd: Command) -> Result<Completion, Rejected> {
        self.check(&cmd)?;
        self.inner.execute(cmd)
    }
    fn segment_info(&self, segment: SegmentId) -> hwftl_sim::Result<SegmentInfo> {
        self.inner.segment_info(segment)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
}

/// Where a key's record is in the value log: the packed page holding it, as the manifest's
/// log segments and their pages say (the first record of `key` found).
pub struct RecordAt {
    /// The device segment and the page within it.
    pub segment: SegmentId,
    pub page: u32,
    /// Raw pages that follow the packed page.
    pub raw_after: u32,
    /// The record.
    pub record: lsm::vlog_format::Record,
}

/// Finds `key`'s record by reading the value-log segments the manifest lists, page by page.
/// Panics when there is none.
pub fn record_of(dev: &dyn AppendDevice, key: &[u8]) -> RecordAt {
    use lsm::vlog_format::{check_page, parse_records};
    let (_, snap) = lsm::manifest::ManifestStore::load(dev).unwrap();
    for m in snap.unwrap().log_segs {
        let segment = SegmentId(m.segment);
        let wp = dev.segment_info(segment).unwrap().write_pointer;
        for page in 0..wp {
            let Ok(c) = dev.execute(Command::Read {
                lba: dev.geometry().lba(segment, page),
                buf: hwftl_sim::PageBuf::for_read(),
            }) else {
                continue;
            };
            let Ok(Some(buf)) = c.into_buf() else {
                continue;
            };
            let Ok(info) = check_page(&buf, m.log_seg, page) else {
                continue;
            };
            let recs = parse_records(&buf, &info).unwrap();
            if let Some(record) = recs.into_iter().find(|r| r.key == key) {
                return RecordAt {
                    segment,
                    page,
                    raw_after: info.raw_after,
                    record,
                };
            }
        }
    }
    panic!("no record of the key")
}

/// Prints a note (a seed, how to rerun) when the test fails while it is alive: a panic in
/// the test's thread, or one propagated from a joined worker, drops it while panicking.
pub struct FailureNote {
    note: String,
    armed: bool,
}

impl FailureNote {
    /// Arms the note.
    pub fn new(note: String) -> Self {
        FailureNote { note, armed: true }
    }

    /// The work it guarded succeeded: nothing to print.
    pub fn passed(mut self) {
        self.armed = false;
    }
}

impl Drop for FailureNote {
    fn drop(&mut self) {
        if self.armed && std::thread::panicking() {
            eprintln!("{}", self.note);
        }
    }
}

/// The LBA of page `page` of the oldest log segment in the device's manifest (the pages the
/// first writes to a fresh engine land in).
pub fn first_log_page(ftl: &Ftl, page: u32) -> hwftl_sim::Lba {
    let (_, snap) = lsm::manifest::ManifestStore::load(ftl).unwrap();
    let (_, segment) = snap
        .unwrap()
        .log_segs
        .iter()
        .map(|m| (m.log_seg, m.segment))
        .min()
        .unwrap();
    ftl.geometry().lba(SegmentId(segment), page)
}

/// `len` bytes of the 256-byte period `byte(0..=255)`, copied a period at a time (a byte at
/// a time cost seconds per case in a debug build: values reach hundreds of KiB).
pub fn repeat_period(len: usize, byte: impl Fn(u8) -> u8) -> Vec<u8> {
    let period: Vec<u8> = (0..=255u8).map(byte).collect();
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let n = (len - v.len()).min(period.len());
        v.extend_from_slice(&period[..n]);
    }
    v
}

/// A value of `len` bytes for version `version` of key number `key`: a stamp (key, version,
/// block) at the head of every 512-byte block over a fill byte of the pair, so a value of
/// another key or version, or a misplaced page, cannot compare equal. (Stamping every 8
/// bytes cost a third of a suite's time in a debug build.)
pub fn stamped_value(key: u32, version: u32, len: usize) -> Vec<u8> {
    let fill = (key as u8) ^ (version as u8).rotate_left(3) ^ 0x5a;
    let mut v = vec![fill; len];
    for (i, block) in v.chunks_mut(512).enumerate() {
        let stamp = (u64::from(key) << 40 | u64::from(version) << 16 | i as u64).to_le_bytes();
        let n = block.len().min(stamp.len());
        block[..n].copy_from_slice(&stamp[..n]);
    }
    v
}

/// Decides, for a write submitted through the queue while a [`HoldDevice`] is armed, from
/// its page bytes, whether to start holding its segment's writes back.
pub type HoldWhen = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

#[derive(Default)]
struct HoldState {
    /// Segments whose writes are held: a write to one of them queues here (with its outer
    /// tag) instead of reaching the device, so each segment's writes stay in order.
    held_segments: std::collections::HashSet<u64>,
    queued: std::collections::VecDeque<(u32, hwftl_sim::Lba, Command)>,
    /// Completions made up for held writes that were failed, delivered by the next reap.
    failed: Vec<Completion>,
    /// Device tag -> the tag handed out for it.
    outer: std::collections::HashMap<u32, u32>,
}

/// Passes commands to the simulator under tags of its own (so no completion is ever
/// delivered under a tag the simulator has since reused); once armed, holds writes back
/// *before* they reach the simulator: from a write `hold_when` picks on, every later write to
/// its segment waits its turn (each segment is still written in order), until
/// [`HoldDevice::release`] lets them go or fails them.
pub struct HoldDevice {
    /// The simulator behind it.
    pub inner: Arc<Ftl>,
    /// Holding is on.
    pub armed: AtomicBool,
    /// Set once a write was held.
    pub seen: AtomicBool,
    /// Hold one segment at most (the first write picked), or every segment picked.
    one_segment: bool,
    hold_when: HoldWhen,
    next_tag: std::sync::atomic::AtomicU32,
    state: std::sync::Mutex<HoldState>,
}

impl HoldDevice {
    /// A holder in front of `inner`, unarmed.
    pub fn new(inner: Arc<Ftl>, one_segment: bool, hold_when: HoldWhen) -> Self {
        HoldDevice {
            inner,
            armed: AtomicBool::new(false),
            seen: AtomicBool::new(false),
            one_segment,
            hold_when,
            next_tag: std::sync::atomic::AtomicU32::new(1 << 20),
            state: std::sync::Mutex::new(HoldState::default()),
        }
    }

    fn segment(&self, lba: hwftl_sim::Lba) -> u64 {
        lba.0 / u64::from(self.inner.geometry().pages_per_segment())
    }

    /// Writes held now.
    pub fn held(&self) -> usize {
        self.state.lock().unwrap().queued.len()
    }

    /// Stops holding and lets the held writes reach the device in order, or with `fail`
    /// completes each with a program failure (the device unchanged). The state lock is not
    /// held while waiting for a free tag (the poller needs it to translate completions).
    pub fn release(&self, fail: bool) {
        self.armed.store(false, Ordering::SeqCst);
        self.drain(None, fail);
    }

    /// Lets the `n` writes held longest reach the device, in order, and goes on holding:
    /// the writes queued behind them, and later writes to a held segment, stay held.
    pub fn release_first(&self, n: usize) {
        self.drain(Some(n), false);
    }

    /// Sends (or with `fail` fails) held writes in order: `left` of them, or all and then
    /// stops holding their segments.
    fn drain(&self, mut left: Option<usize>, fail: bool) {
        loop {
            if left == Some(0) {
                return;
            }
            let mut s = self.state.lock().unwrap();
            let Some((outer, lba, cmd)) = s.queued.pop_front() else {
                if left.is_none() {
                    s.held_segments.clear();
                }
                return;
            };
            left = left.map(|n| n - 1);
            if fail {
                let Command::Write { buf, .. } = cmd else {
                    unreachable!("only writes are held")
                };
                s.failed.push(Completion {
                    tag: Tag(outer),
                    kind: hwftl_sim::CommandKind::Write,
                    lba: Some(lba),
                    segment: None,
                    result: Err(DeviceError::ProgramFailed {
                        lba,
                        segment: SegmentId(0),
                        chip: 0,
                        block: 0,
                    }),
                    buf: Some(buf),
                    latency_ns: 0,
                });
                continue;
            }
            match self.inner.submit(cmd) {
                Ok(tag) => {
                    s.outer.insert(tag.0, outer);
                }
                Err(r) => match r.buf {
                    Some(buf) if matches!(r.error, DeviceError::QueueFull { .. }) => {
                        s.queued
                            .push_front((outer, lba, Command::Write { lba, buf }));
                        left = left.map(|n| n + 1);
                        drop(s);
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                    _ => panic!("a held write was refused: {}", r.error),
                },
            }
        }
    }
}

impl AppendDevice for HoldDevice {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn submit(&self, cmd: Command) -> Result<Tag, Rejected> {
        let outer = self.next_tag.fetch_add(1, Ordering::SeqCst);
        let mut s = self.state.lock().unwrap();
        if let Command::Write { lba, buf } = &cmd {
            let (lba, segment) = (*lba, self.segment(*lba));
            let free = !self.one_segment || s.held_segments.is_empty();
            if self.armed.load(Ordering::SeqCst) && free && (self.hold_when)(&buf[..]) {
                s.held_segments.insert(segment);
                self.seen.store(true, Ordering::SeqCst);
            }
            if s.held_segments.contains(&segment) {
                s.queued.push_back((outer, lba, cmd));
                return Ok(Tag(outer));
            }
        }
        let tag = self.inner.submit(cmd)?;
        s.outer.insert(tag.0, outer);
        Ok(Tag(outer))
    }
    fn submit_many(&self, cmds: Vec<Command>) -> Vec<Result<Tag, Rejected>> {
        cmds.into_iter().map(|c| self.submit(c)).collect()
    }
    fn submit_and_reap(
        &self,
        cmds: Vec<Command>,
        out: &mut Vec<Completion>,
        max: usize,
        wait: Wait,
    ) -> (Vec<Result<Tag, Rejected>>, hwftl_sim::Result<usize>) {
        let tags = self.submit_many(cmds);
        (tags, self.reap(out, max, wait))
    }
    fn reap(&self, out: &mut Vec<Completion>, max: usize, wait: Wait) -> hwftl_sim::Result<usize> {
        // Reaped and translated under the state lock, so a device tag freed by this reap is
        // not handed to a new command (and mapped again) before its completion is translated;
        // waiting is a poll outside the lock.
        loop {
            let mut s = self.state.lock().unwrap();
            let failed = std::mem::take(&mut s.failed);
            let made_up = failed.len();
            out.extend(failed);
            let from = out.len();
            let n = match self.inner.reap(out, max, Wait::NoWait) {
                Ok(n) => n,
                // The made-up completions are delivered first (the device may be powered off
                // by now: the error comes with the next reap).
                Err(_) if made_up > 0 => 0,
                Err(e) => return Err(e),
            };
            for c in &mut out[from..] {
                let outer = s
                    .outer
                    .remove(&c.tag.0)
                    .expect("a completion of a command not submitted");
                c.tag = Tag(outer);
            }
            drop(s);
            let n = n + made_up;
            if n > 0 || matches!(wait, Wait::NoWait) || self.inner.in_flight() == 0 {
                return Ok(n);
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
    fn execute(&self, cmd: Command) -> Result<Completion, Rejected> {
        if let Command::Write { lba, .. } = &cmd {
            // A synchronous write to a held segment waits for the held writes (append order).
            let segment = self.segment(*lba);
            while self.state.lock().unwrap().held_segments.contains(&segment) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        self.inner.execute(cmd)
    }
    fn segment_info(&self, segment: SegmentId) -> hwftl_sim::Result<SegmentInfo> {
        self.inner.segment_info(segment)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
    fn in_flight(&self) -> usize {
        let s = self.state.lock().unwrap();
        self.inner.in_flight() + s.queued.len() + s.failed.len()
    }
}
