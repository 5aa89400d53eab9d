//! What readers see, published without a lock: the [`Version`] (memtables and keytable
//! levels), the map from log segments to device segments, and the sequence number up to
//! which batches are complete.
//!
//! **The read protocol** ([`ReadSide::view`]): a reader pins its epoch (so nothing it can
//! reach is trimmed until it lets go, see [`crate::epoch`]), loads the current `Version`,
//! then the visible sequence number `s`, and resolves keys in the version's memtables
//! (versions newer than `s` ignored) and runs. It loads the segment map only after resolving,
//! to turn value pointers into device addresses. Nothing here waits for a writer, a flush, a
//! compaction or garbage collection.
//!
//! **Why a reader sees a consistent state.** The writer side (the engine's write lock)
//! changes this state only in these ways, each ordered so that a reader at any instant
//! finds a state that some prefix of the applied batches produced:
//! - *a batch applied*: its entries go into the active memtable (shared by the current
//!   version), then `visible_seq` moves to its last sequence number (release). Sequence
//!   numbers are taken in the order batches are applied, so a reader at `s` sees exactly the
//!   batches up to `s`, each whole;
//! - *a flush or compaction*: a new version (a fresh memtable and the new run, or the merged
//!   run in place of its inputs) is swapped in whole. A run holds every batch up to some
//!   sequence number `x`, and a version is loaded before `s`, so `x <= s`: the reader sees
//!   the state at `s`, from the run and the memtables together;
//! - *a log segment opened*: it enters the segment map before any page of it is written, so
//!   before any pointer into it reaches a memtable;
//! - *a segment trimmed*: the state without any pointer into it is published first (garbage
//!   collection's moves are applied, a compaction's output replaced its inputs), then the
//!   trimmer waits for every reader pinned before that (`ReadEpochs::synchronize`), and only
//!   then leaves the segment out of the map and trims it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use hwftl_sim::{AppendDevice, Geometry, Lba};

use crate::cache::ValueCache;
use crate::epoch::{ReadEpochs, ReadPin};
use crate::error::{EngineError, Result};
use crate::expiry::LazyClock;
use crate::io::Poller;
use crate::keytable::{KeyHash, KeyTable, Slot};
use crate::memtable::MemTable;
use crate::merge::{run_source, LevelCursor, Merge, Source};
use crate::read::ReadWindow;

use super::levels::{self, Level};
use super::read::{ReadPlan, Resolved};
use super::{corrupt, Inner};

/// The sparse page index and extents of a run, for the keytable-caching ablation (lookups
/// read the keytable page from the device).
#[derive(Debug)]
pub(super) struct RunPages {
    /// First key of each page, by page number.
    pub(super) index: Vec<(u32, Vec<u8>)>,
    /// Where the run's pages are.
    pub(super) extents: Vec<(u64, u32)>,
}

/// An immutable view of the keyspace's structure, swapped in whole.
#[derive(Debug, Default)]
pub(super) struct Version {
    /// Memtables, newest first: the active one (the writer inserts into it) first.
    pub(super) mems: Vec<Arc<MemTable>>,
    /// Keytable runs per level; L0 newest first.
    pub(super) levels: Vec<Level>,
    /// Per run id, its page index (only with the keytable-caching ablation).
    pub(super) run_pages: HashMap<u64, Arc<RunPages>>,
}

/// Reads of values that failed: counted for INFO (see [`super::EngineStats`]); the read
/// returns an error, never the data.
#[derive(Debug, Default)]
pub(super) struct ReadFaults {
    /// Value pages the device could not read.
    pub(super) unreadable_pages: AtomicU64,
    /// Values or packed pages that failed their checksums.
    pub(super) checksum_failures: AtomicU64,
    /// Value-log pages garbage collection read again after a read error.
    pub(super) gc_read_retries: AtomicU64,
}

/// Log segment number -> device segment, for every log segment a pointer may lead into.
pub(super) type SegMap = HashMap<u32, u32>;

/// The read side: everything a read needs, none of it behind the engine's write lock.
pub(super) struct ReadSide {
    pub(super) dev: Arc<dyn AppendDevice>,
    pub(super) g: Geometry,
    pub(super) version: ArcSwap<Version>,
    pub(super) segs: ArcSwap<SegMap>,
    /// Every batch with sequence numbers up to this one is applied whole.
    pub(super) visible_seq: AtomicU64,
    pub(super) epochs: Arc<ReadEpochs>,
    /// Bounds the pages asynchronous reads keep on the device.
    pub(super) window: Arc<ReadWindow>,
    /// Value bytes copied on the read path.
    pub(super) read_copied: Arc<AtomicU64>,
    /// Value pages reads found unreadable or failing their checksums.
    pub(super) read_faults: Arc<ReadFaults>,
    pub(super) poller: Arc<Poller>,
    pub(super) closed: AtomicBool,
    /// The keytable-caching ablation (see `EngineConfig::uncached_keytables`).
    pub(super) uncached_keytables: bool,
    /// Verified value pages in DRAM (see [`crate::cache`]); `None` when configured off.
    pub(super) cache: Option<Arc<ValueCache>>,
    /// Pages of batches acknowledged before they landed ([`EngineConfig::ack_from_dram`];
    /// `None` otherwise): reads look here first (see `landing`).
    pub(super) landing: Option<Arc<super::landing::Landing>>,
}

/// A pinned, consistent view for one read (see the module docs).
pub(super) struct ReadView {
    pub(super) pin: ReadPin,
    version: Arc<Version>,
    seq: u64,
}

impl ReadSide {
    /// Pins and takes a view; `Closed` once the engine is closed.
    pub(super) fn view(&self) -> Result<ReadView> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        let pin = self.epochs.pin();
        let version = self.version.load_full();
        let seq = self.visible_seq.load(Ordering::Acquire);
        Ok(ReadView { pin, version, seq })
    }

    /// Which device pages hold these values (the segment map is loaded now, after the
    /// pointers were resolved).
    pub(super) fn plan_reads(&self, values: Resolved) -> Result<ReadPlan> {
        let segs = self.segs.load();
        // The keytable-caching ablation measures reads that go to the device.
        let held = if self.uncached_keytables {
            Vec::new()
        } else {
            values.held
        };
        let plan = ReadPlan::new(&values.ptrs, held, self.g, |log_seg| {
            segs.get(&log_seg).copied().ok_or_else(|| {
                corrupt(format!(
                    "value in log segment {log_seg}, which no longer exists"
                ))
            })
        })?;
        Ok(plan.with_dram(self.cache.clone(), self.landing.clone()))
    }

    /// The ablation of keytable caching: after the run's bloom filter, the page that may hold
    /// `key` is found in the run's sparse page index and read from the device, and the key is
    /// searched in that page. A page the search cannot answer alone (an entry running on into
    /// the next page: keys of 8 KiB or more) or cannot read is answered from DRAM.
    fn lookup_on_device(&self, view: &ReadView, run: &KeyTable, key: &[u8]) -> Option<Slot> {
        if !run.may_contain(key) {
            return None;
        }
        let Some(pages) = view.version.run_pages.get(&run.id()) else {
            return run.get(key);
        };
        let pos = pages
            .index
            .partition_point(|(_, first)| first.as_slice() <= key);
        // Before the run's first key: not in it.
        let &(page_no, _) = pages.index.get(pos.checked_sub(1)?)?;
        let mut skip = u64::from(page_no);
        let lba = pages.extents.iter().find_map(|&(first, n)| {
            if skip < u64::from(n) {
                Some(Lba(first + skip))
            } else {
                skip -= u64::from(n);
                None
            }
        })?;
        let page = crate::io::execute_patiently(
            self.dev.as_ref(),
            hwftl_sim::Command::Read {
                lba,
                buf: hwftl_sim::PageBuf::for_read(),
            },
        )
        .ok()
        .and_then(|c| c.into_buf().ok().flatten());
        match page {
            Some(page) => KeyTable::search_page(run.id(), page_no, &page, key)
                .unwrap_or_else(|_| run.get(key)),
            None => run.get(key),
        }
    }

    /// The slot of `key` in `view`: memtables newest first, then runs newest first.
    pub(super) fn lookup(&self, view: &ReadView, key: &[u8]) -> Option<Slot> {
        self.lookup_entry(view, key)
            .map(|s| s.visible(&mut LazyClock::new()))
    }

    /// [`ReadSide::lookup`], with the copy of the value DRAM holds, if any (see
    /// [`ReadSide::lookup_entry_held`]).
    pub(super) fn lookup_held(&self, view: &ReadView, key: &[u8]) -> Option<(Slot, Option<Bytes>)> {
        let (slot, held) = self.lookup_entry_held(view, key)?;
        match slot.visible(&mut LazyClock::new()) {
            Slot::Tombstone => Some((Slot::Tombstone, None)),
            s => Some((s, held)),
        }
    }

    /// [`ReadSide::lookup_entry`], with the copy of the value DRAM holds: the keytable
    /// entry's held value, or a memtable's copy (a version that retimes a value flushed
    /// before has none until it is flushed beside it: its value is read as any other).
    pub(super) fn lookup_entry_held(
        &self,
        view: &ReadView,
        key: &[u8],
    ) -> Option<(Slot, Option<Bytes>)> {
        for m in &view.version.mems {
            if let Some(s) = m.get(key, view.seq) {
                let held = s
                    .ptr()
                    .and_then(|p| view.version.mems.iter().find_map(|m| m.held(&p)));
                return Some((s, held));
            }
        }
        let mut runs = levels::runs_for_key(&view.version.levels, key);
        if self.uncached_keytables {
            return runs
                .find_map(|run| self.lookup_on_device(view, run, key))
                .map(|s| (s, None));
        }
        // Hashed once for every run's filter on the key's path.
        let h = KeyHash::of(key);
        runs.find_map(|run| run.get_held_hashed(key, h))
    }

    /// The newest entry of `key` in `view`, expired or not.
    pub(super) fn lookup_entry(&self, view: &ReadView, key: &[u8]) -> Option<Slot> {
        for m in &view.version.mems {
            if let Some(s) = m.get(key, view.seq) {
                return Some(s);
            }
        }
        let mut runs = levels::runs_for_key(&view.version.levels, key);
        if self.uncached_keytables {
            return runs.find_map(|run| self.lookup_on_device(view, run, key));
        }
        let h = KeyHash::of(key);
        runs.find_map(|run| run.get_hashed(key, h))
    }
}

impl ReadView {
    /// The view's memtables, newest first (the active one, then the frozen ones not yet
    /// flushed).
    pub(super) fn mems(&self) -> &[Arc<MemTable>] {
        &self.version.mems
    }

    /// Every keytable run of the view's levels (memtables not included).
    pub(super) fn runs(&self) -> impl Iterator<Item = &Arc<KeyTable>> {
        self.version.levels.iter().flatten()
    }

    /// The newest slot of each key from `start` on, in key order.
    pub(super) fn merge_from(&self, start: &[u8]) -> Merge<'_> {
        self.merge_between(start, None)
    }

    /// [`ReadView::merge_from`] for a reader that stops before `end` (exclusive): a source
    /// (a memtable's layer, a run, a level) with no key in `start <= key < end` is left
    /// out, so each step compares the keys of the sources that hold some of the range
    /// only. It may still yield keys at or past `end`; the reader stops there.
    pub(super) fn merge_between(&self, start: &[u8], end: Option<&[u8]>) -> Merge<'_> {
        let mut sources: Vec<Source<'_>> = self
            .version
            .mems
            .iter()
            .map(|m| Box::new(m.cursor_between(start, end, self.seq)) as Source<'_>)
            .collect();
        let mut levels = self.version.levels.iter();
        // L0's runs may overlap: one source each. A deeper level's do not: one source for
        // the whole level.
        for run in levels.next().into_iter().flatten() {
            let i = run.seek(start);
            sources.push(run_source(run, i));
        }
        for level in levels {
            sources.push(Box::new(LevelCursor::new(level, start)));
        }
        sources.retain(|s| s.current().is_some_and(|(k, _)| end.is_none_or(|e| k < e)));
        Merge::new(sources)
    }

    /// Keeps only the pin (the version's memory can go while pages are read).
    pub(super) fn into_pin(self) -> ReadPin {
        self.pin
    }
}

/// Publishing, from the writer side (called under the write lock).
impl Inner {
    /// Swaps in a version of the current memtable and levels.
    pub(super) fn publish_version(&self) {
        self.debt
            .store(self.compaction_debt(), std::sync::atomic::Ordering::Relaxed);
        let run_pages = if self.cfg.uncached_keytables {
            self.kt_index
                .iter()
                .filter_map(|(&id, index)| {
                    let meta = self.runs.get(&id)?;
                    Some((
                        id,
                        Arc::new(RunPages {
                            index: index.clone(),
                            extents: meta.extents.clone(),
                        }),
                    ))
                })
                .collect()
        } else {
            HashMap::new()
        };
        self.side.version.store(Arc::new(Version {
            mems: std::iter::once(self.mem.clone())
                .chain(self.frozen.iter().rev().map(|f| f.mem.clone()))
                .collect(),
            levels: self.levels.clone(),
            run_pages,
        }));
    }

    /// Publishes the segment map: every log segment a pointer may lead into (the log's, and
    /// reclaimed ones not yet released).
    pub(super) fn publish_segs(&self) {
        let map: SegMap = self
            .log_segs
            .values()
            .chain(self.gc_reclaimed.iter())
            .map(|m| (m.log_seg, m.segment))
            // Released victims stay mapped until the readers pinned before are gone.
            .chain(
                self.unlinked
                    .iter()
                    .filter_map(|u| u.log_seg.map(|l| (l, u.segment))),
            )
            .collect();
        self.side.segs.store(Arc::new(map));
    }

    /// Makes every batch applied so far visible to reads.
    pub(super) fn publish_seq(&self) {
        self.side
            .visible_seq
            .store(self.applied_seq, Ordering::Release);
    }
}
