//! Admission: what a client batch waits for before it is laid out (the engine's watermarks:
//! memtables, L0 runs, compaction debt, free segments, the user capacity, the pipeline's
//! pages), the stall counters, and which path it then takes (pipeline, alone, rotate).

use super::super::*;
use super::PIPELINE_MAX_BATCH_PAGES;
use super::PIPELINE_PAGES;

/// What admission needs to know of a batch.
pub(in crate::engine) struct BatchShape {
    /// Most value-log pages it can take.
    pub(in crate::engine) bound: u64,
    /// Value-log bytes its puts hold live (0 for a batch of deletes).
    pub(in crate::engine) put_bytes: u64,
    /// Segments its spanning values take whole.
    pub(in crate::engine) spanning: usize,
}

/// What a batch waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum StallReason {
    Memtable,
    FreeSegments,
    Hole,
    Capacity,
    L0Runs,
    CompactionDebt,
}

/// What admission decided for a batch.
pub(in crate::engine) enum Admission {
    /// Lay it out and submit it down the pipeline now.
    Pipeline,
    /// Write it synchronously, alone on the device (large, spanning, or past the
    /// low-water mark with garbage collection idle: it may then use the reserve or fail).
    Sync,
    /// Rotate the full active memtable out (a frozen slot is free, `Inner::may_rotate`),
    /// then decide again.
    Rotate,
    /// The pipeline is full: wait for a batch to be applied.
    PipelineFull,
    /// Wait for maintenance (a stall, with its reason) or for a quiescer (no reason).
    Wait(Option<StallReason>),
    /// Refuse it.
    Refuse(EngineError),
}

/// One batch's waiting: reasons already counted, when it began, and what it asked for.
pub(in crate::engine) struct Waits {
    counted: Vec<StallReason>,
    since: Option<std::time::Instant>,
    /// Maintenance failures when the batch arrived (a new one fails a stalled batch).
    pub(in crate::engine) failures_at_start: u64,
    /// The full flush this batch asked for at the user capacity: done once
    /// `full_flushes` passes this.
    capacity_flush: Option<u64>,
    /// Garbage collection was asked to run for this batch (once).
    asked_gc: bool,
}

impl Waits {
    pub(in crate::engine) fn new(g: &Inner) -> Waits {
        Waits {
            counted: Vec::new(),
            since: None,
            failures_at_start: g.maint.failures,
            capacity_flush: None,
            asked_gc: false,
        }
    }

    pub(in crate::engine) fn count(&mut self, g: &mut Inner, reason: StallReason) {
        self.since.get_or_insert_with(std::time::Instant::now);
        if self.counted.contains(&reason) {
            return;
        }
        self.counted.push(reason);
        let s = &mut g.stats.write_stalls;
        match reason {
            StallReason::Memtable => s.memtable += 1,
            StallReason::FreeSegments => s.free_segments += 1,
            StallReason::Hole => s.hole += 1,
            StallReason::Capacity => s.capacity += 1,
            StallReason::L0Runs => s.l0_runs += 1,
            StallReason::CompactionDebt => s.compaction_debt += 1,
        }
    }

    /// Adds the time stalled to the stats.
    pub(in crate::engine) fn finish(&mut self, g: &mut Inner) {
        if let Some(t) = self.since.take() {
            g.stats.write_stalls.stalled_micros += t.elapsed().as_micros() as u64;
        }
        if self.asked_gc {
            g.maint.gc_target = 0;
            self.asked_gc = false;
        }
    }
}

impl Inner {
    /// Decides what a client batch does now (see [`super::maintain`] for the watermarks).
    /// Checks run from what must hold for any batch (open, a closed hole, the capacity)
    /// to what decides its path; a `Wait` asks the maintenance thread for what it waits
    /// for.
    pub(in crate::engine) fn admission(&mut self, b: &BatchShape, waits: &mut Waits) -> Admission {
        if self.closed {
            return Admission::Refuse(EngineError::Closed);
        }
        // Also ends a stall: maintenance will not run again (see `landing`).
        if let Err(e) = self.check_not_lost() {
            return Admission::Refuse(e);
        }
        if self.quiescers > 0 {
            return Admission::Wait(None);
        }
        if self.hole_pending() {
            return Admission::Wait(Some(StallReason::Hole));
        }
        // Keytable watermarks: compaction must keep up (the maintenance thread compacts L0
        // first once it holds twice its trigger, and whatever is due after a flush).
        // (Never below the compaction trigger: a stall must leave a compaction due.)
        if self.levels[0].len() >= self.cfg.l0_stop_runs.max(self.cfg.l0_runs).max(1) {
            return Admission::Wait(Some(StallReason::L0Runs));
        }
        if self.debt.load(Ordering::Relaxed) > self.cfg.compaction_debt_stop_bytes {
            return Admission::Wait(Some(StallReason::CompactionDebt));
        }
        if !self.fits_user_capacity(b.put_bytes) {
            // Garbage the memtables shadow in the runs is counted when they are flushed:
            // flush once before refusing.
            // And expired entries hold room until compaction drops them: the full flush then
            // compacts every level (at most once per grace period).
            let unflushed = !self.mem.is_empty() || !self.frozen.is_empty();
            let expired = self.expiry_compaction_due();
            match waits.capacity_flush {
                None if unflushed || expired => {
                    waits.capacity_flush = Some(self.maint.full_flushes);
                    self.maint.full_flush_requested = true;
                    return Admission::Wait(Some(StallReason::Capacity));
                }
                Some(at) if at == self.maint.full_flushes => {
                    return Admission::Wait(Some(StallReason::Capacity));
                }
                _ => return Admission::Refuse(self.capacity_full(b.put_bytes)),
            }
        }
        let reserve = if b.put_bytes > 0 {
            RESERVED_SEGMENTS
        } else {
            0
        };
        let low = self.free.len() <= self.gc_low_water();
        let short_for_spanning = b.spanning > 0 && self.free.len() < b.spanning + reserve;
        if low || short_for_spanning {
            if !waits.asked_gc {
                waits.asked_gc = true;
                // Ask again even if garbage collection found nothing last time.
                self.maint.gc_idle = false;
                if short_for_spanning {
                    self.maint.gc_target = self.maint.gc_target.max(b.spanning + reserve);
                }
            }
            if !self.maint.gc_idle {
                return Admission::Wait(Some(StallReason::FreeSegments));
            }
            // Nothing to reclaim: written alone, on the reserve, or refused with
            // `DeviceFull` before anything is written.
        }
        if self.mem_full() {
            return if self.may_rotate() {
                Admission::Rotate
            } else {
                Admission::Wait(Some(StallReason::Memtable))
            };
        }
        if low || b.spanning > 0 || b.bound > PIPELINE_MAX_BATCH_PAGES {
            return Admission::Sync;
        }
        if !self.pipeline.is_empty() && self.pipeline_pages + b.bound > PIPELINE_PAGES {
            return Admission::PipelineFull;
        }
        Admission::Pipeline
    }
}
