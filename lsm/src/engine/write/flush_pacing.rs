//! plp: device flushes paced by the pages written, so the device's write cache never holds
//! much.
//!
//! With acknowledgements from DRAM the engine flushes the device only when it persists its
//! manifest: once per log segment opened, per memtable flushed, per compaction or reclaim
//! step. On a disk with a volatile write cache, a flush then drains everything written since
//! the last one, and reads queue behind it. On the virtual disk this project is measured on,
//! 8 MiB drained took 13.6 ms at the median and held random reads up for as long (fio alone,
//! `benches/results/tail-2026-11-30/`). Flushing every [`FLUSH_PACE_PAGES`] pages keeps each
//! drain short, and with it the manifest's own flushes.
//!
//! A paced flush is queued with the batch that crosses the mark, so it is rung with that
//! batch's doorbell, and nobody waits for it. It only makes pages durable sooner: no
//! acknowledgement and no ordering depends on it (the manifest's flushes stay where they
//! were). At most one is on the device at a time; a failed one is counted in the stats, and
//! the next persist's flush reports the device's state as before.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use hwftl_sim::Command;

use crate::io::{OnDone, Poller};

/// Pages (8 KiB) written between two paced flushes: 1 MiB.
pub(in crate::engine) const FLUSH_PACE_PAGES: usize = 128;

/// Counts the pages written since the last paced flush and queues the next one.
#[derive(Debug, Default)]
pub(in crate::engine) struct FlushPacer {
    pages: usize,
    /// A paced flush is on the device.
    in_flight: Arc<AtomicBool>,
    /// Paced flushes that failed.
    failed: Arc<AtomicU64>,
    /// Paced flushes queued.
    issued: u64,
}

impl FlushPacer {
    /// Counts `pages` just queued and, past [`FLUSH_PACE_PAGES`], queues a flush behind them
    /// (rung with their doorbell) unless one is still on the device.
    pub(in crate::engine) fn after_pages(&mut self, pages: usize, poller: &Poller) {
        self.pages += pages;
        if self.pages < FLUSH_PACE_PAGES || self.in_flight.load(Ordering::Acquire) {
            return;
        }
        self.pages = 0;
        self.in_flight.store(true, Ordering::Release);
        let (in_flight, failed) = (self.in_flight.clone(), self.failed.clone());
        let done: OnDone = Box::new(move |r| {
            if r.and_then(|c| c.result).is_err() {
                failed.fetch_add(1, Ordering::Relaxed);
            }
            in_flight.store(false, Ordering::Release);
        });
        let queued = poller.queue_many(vec![Command::Flush], vec![done]);
        if queued.into_iter().any(|r| r.is_err()) {
            // Refused (a full queue): the next batch tries again.
            self.in_flight.store(false, Ordering::Release);
            return;
        }
        self.issued += 1;
    }

    /// Paced flushes queued and, of them, failed.
    pub(in crate::engine) fn counts(&self) -> (u64, u64) {
        (self.issued, self.failed.load(Ordering::Relaxed))
    }
}
