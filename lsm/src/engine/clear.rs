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
//! pointers through the segment map it loads after. So the old segments go onto the unlinked
//! list (`trim`), which keeps the old log segments in the published segment map, and
//! nothing is trimmed until every such pin is released ([`crate::epoch`]); then the map
//! drops them and they are trimmed, with the write lock free, as every release of a
//! segment is. Log segment numbers are never reused, so a value-cache page of an old
//! segment can never be taken for a new one; the cache is emptied after the wait, to give
//! its DRAM back.

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
        drop(inner);
        r?;
        // With the write lock free: writers go on into the empty store while the old
        // segments wait for the readers of the old version and are trimmed.
        let trimmed = self.core.trim_unlinked();
        // After that wait: no read of the old version can put an old page back.
        if let Some(cache) = &self.side.cache {
            cache.clear();
        }
        trimmed
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
        // Everything the old state holds on the device (what was released before and not
        // yet trimmed stays on the unlinked list: no trim runs, this caller holds the
        // maintenance lock, see `trim`).
        let log: Vec<Unlinked> = self
            .log_segs
            .values()
            .chain(self.gc_reclaimed.iter())
            .map(|m| Unlinked {
                segment: m.segment,
                log_seg: Some(m.log_seg),
            })
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
        self.frozen.clear();
        self.mem = Arc::new(MemTable::with_budget(self.cfg.memtable_bytes));
        // Nothing before the next log segment is ever replayed.
        self.needs_checkpoint = false;
        self.checkpoint = (self.next_log_seg, 0);
        self.pages_since_checkpoint = 0;
        // The empty version first: a read that loads it resolves no pointer. The old
        // segments go onto the unlinked list, which keeps the old log segments in the
        // published segment map until the readers of the old version are gone (a read that
        // loaded the old version may still resolve its pointers through it); `Engine::clear`
        // then waits for them and trims with the write lock free (`trim`).
        self.publish_version();
        if let Err(e) = self.persist() {
            // Reads already see the empty store, but the device may still hold the old
            // manifest: what the next open finds is not known.
            return Err(EngineError::OutcomeUnknown {
                reason: format!("the manifest write that empties the store failed: {e}"),
            });
        }
        self.unlinked.extend(log);
        self.unlinked
            .extend(keytables.into_iter().map(|segment| Unlinked {
                segment,
                log_seg: None,
            }));
        self.publish_segs();
        self.stats.clears += 1;
        Ok(())
    }
}
