//! Garbage collection's moves on their way to the log: judged live again, laid out as
//! pipelined batches (beside client batches in flight when that is safe), and applied.
//!
//! **Why a move never overwrites a newer write.** A move of key `k` copies the value at
//! `from` to the head; it is correct only if, when it is laid out, `from` is `k`'s newest
//! version anywhere in the log, so that the move becomes the newest (later writes of `k` are
//! laid out after it, in ticket and log order). Under the write lock (nothing is laid out
//! meanwhile) `submit_gc_moves` establishes that in one of two ways:
//! 1. The pipeline is empty: every earlier batch is applied, and `lookup(k) == from`.
//! 2. Acknowledged from DRAM, with batches in flight: every batch in the pipeline is
//!    claimable or claimed (`moves_may_pass`); claimed ones are waited for until their
//!    inserts are done (they take no lock), so `lookup` sees them; then `lookup(k) == from`
//!    and no batch not yet claimed writes `k` (a put, a delete or a retime: its updates are
//!    still in the batch, and are searched). A batch that left the pipeline was applied.
//!    So every batch laid out before the move either is applied (seen by `lookup`) or does
//!    not touch `k`. Otherwise the moves wait for the pipeline to drain and are judged
//!    again ([`GcWait::Clients`]).
//!
//! In case 2 every batch before the moves is claimable, so they are applied under the same
//! hold of the lock, in ticket order, right behind those batches. Their pages land later,
//! from the landing buffer, as a client's do; a victim is released (trimmed) only once the
//! pipeline has drained (on every path, the error path of `Core::gc_step` too). A move's
//! page failing after it was applied is an acknowledged write lost, as a client's would be:
//! writes stop (see `landing`); in durable mode a failed move batch only restarts its
//! victim. While another thread drains the pipeline (`quiescers`), moves wait for it.

use std::collections::HashSet;

use super::*;
use crate::engine::write::{InFlight, Prepared, GC_PIPELINE_SHARE, PIPELINE_PAGES};

/// What garbage collection's pending moves wait for before they may be laid out with client
/// batches in flight (see [`Inner::submit_gc_moves`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum GcWait {
    /// The pipeline to drain: a batch in flight cannot be claimed yet, or a value spans
    /// segments (written synchronously), or the moves need more than the whole pipeline.
    Quiet,
    /// The pipeline to drain because a client batch in flight, not yet applied, writes a
    /// moved key (counted in [`EngineStats::gc_waits_for_clients`]).
    Clients,
    /// Room for this many pipeline pages.
    Room(u64),
}

/// The moves of a garbage-collection step on their way to the device: pipelined batches
/// (submitted with the write lock held; in durable mode with the pipeline empty, then on the
/// device while the lock is free; in plp mode applied at once, see the module docs) and the
/// value bytes they move.
#[derive(Default)]
pub(in crate::engine) struct GcWrites {
    /// Tickets of the pipelined batches and their page completions, in ticket order.
    pub(in crate::engine) batches: Vec<(u64, Arc<GroupDone>)>,
    /// Value bytes moved by all of them.
    pub(in crate::engine) bytes: u64,
    /// Acknowledged from DRAM ([`EngineConfig::ack_from_dram`]): claimable at submission,
    /// so they are applied at once, and their pages land while garbage collection goes on
    /// (a victim is released only once the pipeline has drained: `release_reclaimed`).
    pub(in crate::engine) early: bool,
}

/// The device flush that makes garbage collection's moves durable before they are applied,
/// when client batches are acknowledged only once durable: a client batch laid out after a
/// move batch is applied (and acknowledged) only after it, and a move batch whose pages
/// were still in the device's write cache at a power cut would leave a hole that stops
/// recovery's replay before the client's batch. Shared with clients' flushes through the
/// [`FlushGate`].
pub(in crate::engine) struct GcFlush {
    pub(in crate::engine) gate: Arc<FlushGate>,
    pub(in crate::engine) dev: Arc<dyn AppendDevice>,
}

impl GcWrites {
    /// Waits for every page of every batch and, with `flush`, for a device flush after
    /// them: one result per batch, in order.
    pub(in crate::engine) fn wait(
        &self,
        flush: Option<&GcFlush>,
    ) -> Vec<std::result::Result<(), BatchFailure>> {
        let mut out: Vec<std::result::Result<(), BatchFailure>> = self
            .batches
            .iter()
            .map(|(_, done)| done.wait().map_err(BatchFailure::Page))
            .collect();
        if let Some(f) = flush {
            if !out.is_empty() && out.iter().all(std::result::Result::is_ok) {
                if let Err(e) = f.gate.flush(|| device_flush(f.dev.as_ref())) {
                    // The first batch fails with it, and every batch after it with that one
                    // (`claim_ready`).
                    out[0] = Err(BatchFailure::Flush(e));
                }
            }
        }
        out
    }
}

impl Inner {
    /// Submits the pending moves whose values are still live (a client may have overwritten
    /// or deleted a key since its value was read: that move is dropped), a group commit per
    /// ~[`GC_BATCH_BYTES`], down the write pipeline ([`BatchKind::GcMoves`]), appending the
    /// batches to `writes`; a batch that cannot be pipelined (a value spanning segments) is
    /// written synchronously here, with the pipeline empty.
    ///
    /// Liveness is judged on what is applied. With the pipeline empty that is every earlier
    /// write. With client batches in flight ([`Inner::moves_may_pass`]) the moves are laid
    /// out only when none of those batches writes a moved key; otherwise nothing is laid
    /// out, the moves stay pending and the returned [`GcWait`] says what the caller must wait
    /// for before calling again (with the pipeline empty nothing waits).
    ///
    /// # Errors
    /// A batch that cannot be laid out or submitted (the batches submitted before it are
    /// waited for and applied first: they moved live values).
    pub(in crate::engine) fn submit_gc_moves(
        &mut self,
        writes: &mut GcWrites,
    ) -> Result<Option<GcWait>> {
        let in_flight = !self.pipeline.is_empty();
        if in_flight {
            // Someone drains the pipeline (`sync`, a rotation): moves would lengthen it.
            if self.quiescers > 0 || !self.moves_may_pass() {
                return Ok(Some(GcWait::Quiet));
            }
            // A claimed batch is being inserted by its writer (with no lock): once it is in
            // the memtable, `lookup` sees it. The inserts take no lock, so this ends.
            while self.pipeline.values().any(InFlight::inserting) {
                std::thread::yield_now();
            }
        }
        let pending = std::mem::take(&mut self.gc_pending);
        let pending_bytes = std::mem::replace(&mut self.gc_pending_bytes, 0);
        // A live value keeps the deadline its key has now (a put and a retime, as
        // `WriteOp::expand` writes a put with a deadline).
        let live: Vec<(GcMove, Deadline)> = pending
            .into_iter()
            .filter_map(|m| match self.lookup(&m.key) {
                Some(Slot::Value(p, d)) if p == m.from => Some((m, d)),
                _ => None,
            })
            .collect();
        let mut batches = Vec::new();
        let mut start = 0;
        while start < live.len() {
            let mut end = start;
            let mut batch_bytes = 0;
            while end < live.len() && (end == start || batch_bytes < GC_BATCH_BYTES) {
                batch_bytes += live[end].0.key.len() + live[end].0.value.len() + RECORD_HEADER;
                end += 1;
            }
            batches.push(start..end);
            start = end;
        }
        // Each batch's ops and page bound, once.
        let laid: Vec<(Vec<WriteOp<'_>>, u64)> = batches
            .iter()
            .map(|r| {
                let ops: Vec<WriteOp<'_>> = live[r.clone()]
                    .iter()
                    .flat_map(|(m, d)| {
                        std::iter::once(WriteOp::Put(&m.key, &m.value))
                            .chain(d.is_some().then_some(WriteOp::Retime(&m.key, *d)))
                    })
                    .collect();
                let bound = self.page_bound(&ops);
                (ops, bound)
            })
            .collect();
        if in_flight && !live.is_empty() {
            let bounds: Vec<u64> = laid.iter().map(|(_, b)| *b).collect();
            let wait = self.moves_wait(&live, &bounds);
            if wait.is_some() {
                if wait == Some(GcWait::Clients) {
                    self.stats.gc_waits_for_clients += 1;
                }
                // Nothing laid out: the moves wait, and are judged again, for the next call.
                drop(laid);
                self.gc_pending = live.into_iter().map(|(m, _)| m).collect();
                self.gc_pending_bytes = pending_bytes;
                return Ok(wait);
            }
        }
        for (range, (ops, bound)) in batches.iter().zip(&laid) {
            let spans = live[range.clone()]
                .iter()
                .any(|(m, _)| self.put_spans(m.key.len(), m.value.len()));
            let submitted = if spans {
                // Alone and synchronously: nothing of this step may be in flight before it.
                self.wait_gc_batches(writes).and_then(|()| {
                    self.in_gc = true;
                    let r = self.write(ops);
                    self.in_gc = false;
                    r
                })
            } else {
                // Queued only: the maintenance thread rings the doorbell once it has
                // released the write lock (`Core::gc_step`).
                self.start_batch(ops, *bound, BatchKind::GcMoves, &mut Prepared::none())
                    .map(|(ticket, done, _)| writes.batches.push((ticket, done)))
            };
            if let Err(e) = submitted {
                // Nothing of a failed step stays in flight: the batches already submitted
                // are waited for and applied (they moved live values; they are correct).
                self.wait_gc_batches(writes)?;
                return Err(e);
            }
            writes.bytes += live[range.clone()]
                .iter()
                .map(|(m, _)| m.value.len() as u64)
                .sum::<u64>();
        }
        if in_flight && !writes.batches.is_empty() {
            self.stats.gc_batches_beside_clients += writes.batches.len() as u64;
        }
        // Acknowledged from DRAM as clients' batches are: claimable at once (see `landing`).
        writes.early = self.side.landing.is_some();
        Ok(None)
    }

    /// Whether moves may be laid out with the batches now in the pipeline in flight: only
    /// when every one of them can be claimed now or already was (acknowledged from DRAM, or
    /// refused), so the moves are applied under this same hold of the write lock, in ticket
    /// order behind them, and no batch that could still change what is applied waits
    /// unclaimed in front of them with its outcome unknown.
    fn moves_may_pass(&self) -> bool {
        self.side.landing.is_some() && self.pipeline.values().all(InFlight::decided)
    }

    /// With client batches in flight (every one of them claimable or inserted, see
    /// [`Inner::moves_may_pass`]): what the moves `live`, split into batches of page bounds
    /// `bounds`, must wait for before they may be laid out, if anything.
    ///
    /// - A batch not yet claimed that writes one of the moved keys (a put, a delete or a
    ///   retime): the move's judgement does not see it; wait for the pipeline to drain and
    ///   judge again.
    /// - A value spanning segments is written synchronously: the same.
    /// - Room: the moves count their pipeline pages as always ([`GC_PIPELINE_SHARE`] at
    ///   most per batch), and the pipeline's total stays within [`PIPELINE_PAGES`] (which
    ///   bounds the batches recovery may find in flight).
    fn moves_wait(&self, live: &[(GcMove, Deadline)], bounds: &[u64]) -> Option<GcWait> {
        if live
            .iter()
            .any(|(m, _)| self.put_spans(m.key.len(), m.value.len()))
        {
            return Some(GcWait::Quiet);
        }
        let keys: HashSet<&[u8]> = live.iter().map(|(m, _)| &m.key[..]).collect();
        let touched = self
            .pipeline
            .values()
            // A claimed batch's updates are gone from it: inserted by now (see the caller).
            .flat_map(InFlight::updates)
            .any(|(k, _, _)| keys.contains(&k[..]));
        if touched {
            return Some(GcWait::Clients);
        }
        let need: u64 = bounds.iter().map(|b| (*b).min(GC_PIPELINE_SHARE)).sum();
        if need > PIPELINE_PAGES {
            return Some(GcWait::Quiet);
        }
        (self.pipeline_pages + need > PIPELINE_PAGES).then_some(GcWait::Room(need))
    }

    /// The flush move batches need before they are applied (see [`GcFlush`]), if any.
    pub(in crate::engine) fn gc_flush(&self) -> Option<GcFlush> {
        self.cfg.flush_writes.then(|| GcFlush {
            gate: self.flush_gate.clone(),
            dev: self.dev.clone(),
        })
    }

    /// Waits (the write lock held) for move batches already submitted and applies them, so a
    /// synchronous write can follow with the pipeline empty.
    fn wait_gc_batches(&mut self, writes: &mut GcWrites) -> Result<()> {
        if writes.batches.is_empty() {
            return Ok(());
        }
        let flush = self.gc_flush();
        // Their pages may still be queued (see `submit_gc_moves`).
        self.poller.doorbell();
        let pages = writes.wait(flush.as_ref());
        let batches = std::mem::take(&mut writes.batches);
        self.apply_gc_batches(&batches, pages)
    }

    /// Records the page outcome of each move batch (`pages`, in the same order), applies
    /// every batch ready in ticket order, and takes the move batches' outcomes: the first
    /// failure, if any.
    pub(super) fn apply_gc_batches(
        &mut self,
        batches: &[(u64, Arc<GroupDone>)],
        pages: Vec<std::result::Result<(), BatchFailure>>,
    ) -> Result<()> {
        for ((ticket, _), io) in batches.iter().zip(pages) {
            self.record_io(*ticket, io);
        }
        self.apply_ready();
        let mut failure = None;
        for (ticket, _) in batches {
            let outcome = self.outcomes.remove(ticket).unwrap_or_else(|| {
                Err(EngineError::OutcomeUnknown {
                    reason: "a garbage-collection batch was not applied".into(),
                })
            });
            if let Err(e) = outcome {
                failure.get_or_insert(e);
            }
        }
        failure.map_or(Ok(()), Err)
    }
}
