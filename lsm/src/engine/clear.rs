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
//! first; a read that loaded the old version pinned its epoch before it did, and resolves its
//! pointers through the segment map it loads after. So the old segment map stays published,
//! and nothing is trimmed, until every such pin is released ([`crate::epoch`]); then the
//! empty map is published and the segments trimmed, as garbage collection's release waits
//! before it trims. Log
//! segment numbers are never reused, so a value-cache page of an old segment can never be
//! taken for a new one; the cache is emptied after the wait, to give its DRAM back.

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
            // Released before and not yet trimmed (no trim runs: this caller holds the
            // maintenance lock, see `trim`).
            .chain(self.unlinked.iter().map(|u| u.segment))
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
        // The empty version first: a read that loads it resolves no pointer. The segment
        // map stays the old one until the wait below, because a read that loaded the old
        // version may still resolve its pointers through it (garbage collection's release
        // waits for the readers the same way before it trims and unmaps).
        self.publish_version();
        if let Err(e) = self.persist() {
            // Reads already see the empty store, but the device may still hold the old
            // manifest: what the next open finds is not known.
            return Err(EngineError::OutcomeUnknown {
                reason: format!("the manifest write that empties the store failed: {e}"),
            });
        }
        // Reads that loaded the old version finish before its segments leave the map and
        // are trimmed, and before the cache is emptied (so none of them puts an old page
        // back into it).
        self.side.epochs.synchronize();
        self.unlinked.clear();
        self.publish_segs();
        if let Some(cache) = &self.side.cache {
            cache.clear();
        }
        for segment in log.into_iter().chain(keytables) {
            self.trim_to_free(segment)?;
        }
        self.stats.clears += 1;
        Ok(())
    }
}
