//! Space accounting: free segments, garbage per value-log segment (final and tail), live
//! bytes and the user capacity.

use super::*;

impl Inner {
    pub(super) fn alloc_segment(&mut self, purpose: &'static str, reserve: usize) -> Result<u32> {
        if self.free.len() <= reserve {
            return Err(EngineError::DeviceFull { purpose });
        }
        let seg = self
            .free
            .pop_first()
            .ok_or(EngineError::DeviceFull { purpose })?;
        Ok(seg)
    }

    /// Value-log bytes the batch's puts will hold live (a put spanning segments holds them
    /// whole).
    pub(super) fn put_bytes(&self, ops: &[WriteOp<'_>]) -> u64 {
        let segment = self.g.segment_bytes();
        ops.iter()
            .map(|op| match op {
                WriteOp::Put(k, v) if self.put_spans(k.len(), v.len()) => {
                    self.spanning_segments(k.len(), v.len()) as u64 * segment
                }
                WriteOp::Put(k, v) | WriteOp::PutUntil(k, v, _) => {
                    stored_record_bytes(k.len(), v.len())
                }
                WriteOp::Delete(_) | WriteOp::Retime(..) => 0,
            })
            .sum()
    }

    /// Value bytes clients may keep live: the segments values can use, less the
    /// over-provisioned share.
    pub(super) fn user_capacity(&self) -> u64 {
        // Keytables take segments too: the ones they hold and room for a compaction's output.
        let keytables = (self.kt_segments.len()
            - self.kt_pending_segments.min(self.kt_segments.len())
            + self.keytable_headroom()) as u64;
        let usable = u64::from(self.g.segments())
            .saturating_sub(MANIFEST_SEGMENTS.len() as u64 + RESERVED_SEGMENTS as u64 + keytables);
        let op = u64::from(self.cfg.overprovision_percent.min(90));
        usable * self.g.segment_bytes() / 100 * (100 - op)
    }

    /// Live value-log bytes (written minus known garbage; garbage the memtable shadows in
    /// the runs is known only once it is flushed, so this may over-count until then).
    pub(super) fn live_bytes(&self) -> u64 {
        self.log_segs
            .values()
            .map(|m| m.written.saturating_sub(m.dead))
            .sum()
    }

    /// Log bytes counted live that are garbage already: the old copies of the values garbage
    /// collection moved into the memtables out of the victim it is working on, which their
    /// flushes will count (see [`MemTable::note_moved_from_below`]; the notes are forgotten
    /// when the victim leaves the log, taking its bytes out of the live count itself). Without this, the moves of a collection running
    /// near a full store counted twice and refused writes the store had room for (a load to
    /// 95% of the user capacity failed with `CapacityFull` at 92.6%).
    pub(super) fn moved_from_below(&self) -> u64 {
        self.mem.moved_from_below()
            + self
                .frozen
                .iter()
                .map(|f| f.mem.moved_from_below())
                .sum::<u64>()
    }

    /// Whether `put_bytes` more live bytes stay within the user capacity by the current
    /// count, less the garbage already known ([`Inner::moved_from_below`]) (cheap while the
    /// log itself is smaller than the capacity).
    pub(super) fn fits_user_capacity(&self, put_bytes: u64) -> bool {
        if put_bytes == 0 || self.in_gc {
            return true;
        }
        let cap = self.user_capacity();
        let log_bound = self.log_segs.len() as u64 * self.g.segment_bytes();
        log_bound + put_bytes <= cap
            || self.live_bytes().saturating_sub(self.moved_from_below()) + put_bytes <= cap
    }

    /// The error for a put batch that would pass the user capacity.
    pub(super) fn capacity_full(&self, put_bytes: u64) -> EngineError {
        EngineError::CapacityFull {
            live: self.live_bytes() + put_bytes,
            capacity: self.user_capacity(),
        }
    }

    /// Garbage in `log_seg` that records after the replay checkpoint made (the active
    /// generation's and the frozen ones'): left out of the manifest.
    pub(super) fn tail_dead_of(&self, log_seg: u32) -> u64 {
        self.tail_dead.get(&log_seg).copied().unwrap_or(0)
            + self
                .frozen
                .iter()
                .filter_map(|f| f.tail_dead.get(&log_seg).copied())
                .sum::<u64>()
    }

    /// Counts values that records after the checkpoint made garbage.
    pub(super) fn mark_dead(&mut self, dead: &[Invalidated]) {
        let pps = self.g.pages_per_segment();
        for (klen, p) in dead {
            for (log_seg, bytes) in p.segment_shares(*klen, pps) {
                self.count_tail_dead(log_seg, bytes);
            }
            self.mark_dead_raw(p);
        }
    }

    /// Counts a dead value's garbage for good (not to be counted again by a replay).
    pub(super) fn count_dead(&mut self, key_len: usize, p: &ValuePtr) {
        for (log_seg, bytes) in p.segment_shares(key_len, self.g.pages_per_segment()) {
            if let Some(m) = self.log_segs.get_mut(&log_seg) {
                m.dead += bytes;
                self.maint.gc_idle = false;
            } else if let Some(m) = self.gc_reclaimed.iter_mut().find(|m| m.log_seg == log_seg) {
                // A reclaimed victim is still listed by every manifest written until it is
                // released, and a cut before then brings it back into the log with the
                // count written: the flush that shadows its moved values counts them here
                // (before this, such a victim came back counting them live; fsck found it).
                m.dead += bytes;
            }
        }
        self.mark_dead_raw(p);
    }

    /// Notes a dead value's raw pages (in a segment still in the log) for garbage
    /// collection to skip.
    fn mark_dead_raw(&mut self, p: &ValuePtr) {
        if self.log_segs.contains_key(&p.log_seg) {
            self.dead_raw.mark(p, self.g.pages_per_segment());
        }
    }

    /// Counts garbage that a record after the replay checkpoint made (see `tail_dead`).
    pub(super) fn count_tail_dead(&mut self, log_seg: u32, bytes: u64) {
        if let Some(m) = self.log_segs.get_mut(&log_seg) {
            m.dead += bytes;
            *self.tail_dead.entry(log_seg).or_default() += bytes;
            self.maint.gc_idle = false;
        }
    }

    /// Trims a device segment nothing refers to any more (the manifest on the device no
    /// longer lists it, and no read still fetches from it) and puts it on the free list.
    ///
    /// # Errors
    /// The trim's (the segment then stays off the free list until the next open, which trims
    /// whatever the manifest does not account for).
    pub(super) fn trim_to_free(&mut self, segment: u32) -> Result<()> {
        trim::trim_segment(self.dev.as_ref(), segment)?;
        self.free.insert(segment);
        Ok(())
    }
}
