//! Deleting every key at once ([`Engine::clear`]): one manifest write that lists no run and
//! no log segment, then trims, instead of a tombstone per key.
//!
//! **Why it is atomic.** Until the new manifest is durable, the device's manifest is the old
//! one: a cut before then opens the store as it was (the caller was not answered). Once it
//! is durable, it lists nothing, and its replay checkpoint is a log segment not yet opened:
//! an open finds no run, replays nothing, and trims every segment the manifest does not
//! account for (the old log and keytable segments, whether or not this call trimmed them).
//!
//! **Why readers are safe.** The empty version (a fresh memtable, no level) is published
//! before anything is trimmed; a read that loaded the old version pinned its epoch first, and
//! the trims wait for every such pin ([`crate::epoch`]), as garbage collection's do. Log
//! segment numbers are never reused, so a value-cache page of an old segment can never be
//! taken for a new one (the cache is emptied anyway, to give its DRAM back).

use super::*;

impl Engine {
    /// Deletes every key: the engine is left empty, as if just formatted, in one atomic
    /// step whose cost does not grow with the keys (a manifest write and a trim per segment
    /// that was in use), and its segments are free again. Waits for the batches on the device
    /// and for the maintenance thread's current task.
    ///
    /// # Errors
    /// `ReadOnly`; `Closed`; `OutcomeUnknown` when the manifest write fails (reads then see
    /// an empty store, and the next open finds the old one or an empty one); trimming (the
    /// segments are taken back at the next open).
    pub fn clear(&self) -> Result<()> {
        let _m = self.core.maint.lock();
        let mut inner = self.core.inner.lock();
        self.core.quiesce(&mut inner);
        inner.check_writable()?;
        let r = inner.clear();
        self.core.applied.notify_all();
        r
    }
}

impl Inner {
    /// See [`Engine::clear`]. Called with the maintenance lock and the write lock held and
    /// the pipeline empty: no batch, flush, compaction or garbage-collection step is running.
    fn clear(&mut self) -> Result<()> {
        // Garbage collection's step state goes (a read ahead still on the device is waited
        // for: nothing may read a segment about to be trimmed).
        self.drop_read_ahead();
        self.gc_cursor = None;
        self.gc_carry = None;
        self.gc_pending.clear();
        self.gc_pending_bytes = 0;
        self.gc_refused.clear();
        // Everything the old state holds on the device.
        let log: Vec<u32> = self
            .log_segs
            .values()
            .chain(self.gc_reclaimed.iter())
            .map(|m| m.segment)
            .collect();
        let keytables = std::mem::take(&mut self.kt_segments);
        self.log_segs.clear();
        self.gc_reclaimed.clear();
        self.tail_dead.clear();
        self.dead_raw.clear();
        self.head = None;
        self.kt_pending_segments = 0;
        // L0 is always there, empty or not.
        self.levels = vec![Vec::new()];
        self.runs.clear();
        self.kt_index.clear();
        self.frozen = None;
        self.mem = Arc::new(MemTable::with_budget(self.cfg.memtable_bytes));
        // Nothing before the next log segment is ever replayed.
        self.needs_checkpoint = false;
        self.checkpoint = (self.next_log_seg, 0);
        self.pages_since_checkpoint = 0;
        self.publish_version();
        self.publish_segs();
        if let Err(e) = self.persist() {
            // Reads already see the empty store, but the device may still hold the old
            // manifest: what the next open finds is not known.
            return Err(EngineError::OutcomeUnknown {
                reason: format!("the manifest write that empties the store failed: {e}"),
            });
        }
        if let Some(cache) = &self.side.cache {
            cache.clear();
        }
        // Reads that loaded the old version finish before its segments go.
        self.side.epochs.synchronize();
        for segment in log.into_iter().chain(keytables) {
            self.trim_to_free(segment)?;
        }
        self.stats.clears += 1;
        Ok(())
    }
}
