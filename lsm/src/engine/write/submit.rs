//! Starting a client batch without waiting for it: [`Engine::try_submit_write`] for a caller
//! that finishes it later, and [`Engine::try_submit_write_now`] for one that must never wait
//! (the drive's network thread).

use super::super::*;
use super::{Admission, PendingState, Prepared, RawValues, Waits};
use crate::engine::write::Doorbell;

/// Free device tags [`Engine::try_submit_write_now`] wants beyond its batch's pages: the
/// asynchronous client reads that may take tags meanwhile (the drive keeps at most 64 in
/// flight), so that none of the batch's pages is refused for want of a tag, which would be
/// retried under the engine lock on a thread that must not wait.
const TAGS_SPARE_FOR_NOW: Option<usize> = Some(64);

impl Engine {
    /// Starts a batch without waiting for it: its pages are laid out and submitted, and
    /// [`Engine::finish_write`] later waits until it is durable and applied. A caller may
    /// start several batches before finishing the first; they are applied in the order
    /// they were started, and each is atomic as with [`Engine::write`].
    ///
    /// Returns `Ok(None)` when the batch cannot start now without waiting for batches
    /// already on the device (the pipeline is full, maintenance must catch up, or a large
    /// batch must run alone): finish an earlier batch and try again, or call
    /// [`Engine::write`] when the caller has none in flight.
    ///
    /// # Errors
    /// As [`Engine::write`], for errors found before anything is submitted.
    pub fn try_submit_write(&self, ops: &[WriteOp<'_>]) -> Result<Option<PendingWrite>> {
        let ops = &*WriteOp::expand(ops);
        let g = &self.side.g;
        let prepared = Prepared::pair(ops, RawValues::prepare(ops, g), g);
        match Self::admit(&self.core, self.core.inner.lock(), ops, None, prepared)? {
            Ok(started) => Ok(Some(started)),
            Err(g) if !g.pipeline.is_empty() => Ok(None),
            Err(g) => {
                // Nothing in flight: wait here as `write` does.
                drop(g);
                Ok(Some(PendingWrite::done(self.write(ops))))
            }
        }
    }

    /// As [`Engine::try_submit_write`], but never waits, neither here nor in
    /// [`Engine::finish_write`] afterwards: `Ok(None)` unless the engine lock is free, the
    /// batch is acknowledged from DRAM ([`EngineConfig::ack_from_dram`]), can be laid out
    /// and submitted now, and has no batch ahead of it that its finish would wait for (a
    /// batch not acknowledged from DRAM: in durable mode, garbage collection's moves, which
    /// are applied only once their pages land), and the
    /// device has free command tags for its pages and `TAGS_SPARE_FOR_NOW` (64) more (a page
    /// refused for want of a tag would be retried here, under the engine lock). Finishing a
    /// batch started here takes the engine lock and its memtable inserts, no device wait. For
    /// a caller that must not block: the drive's network thread.
    ///
    /// # Errors
    /// As [`Engine::write`], for errors found before anything is submitted.
    pub fn try_submit_write_now(&self, ops: &[WriteOp<'_>]) -> Result<Option<PendingWrite>> {
        let ops = &*WriteOp::expand(ops);
        // Held by maintenance through device I/O (a full flush, a GC step's reads): not
        // waited for.
        let Some(g) = self.core.inner.try_lock() else {
            return Ok(None);
        };
        if g.side.landing.is_none() || g.pipeline.values().any(|b| !b.early) {
            return Ok(None);
        }
        Ok(Self::admit(&self.core, g, ops, TAGS_SPARE_FOR_NOW, Prepared::none())?.ok())
    }

    /// Admits a batch under `g`: started down the pipeline, or (`Err`) the lock back when
    /// admission wants anything else (a wait, a synchronous write, a rotation) or, with
    /// `spare_tags`, when the device has fewer free command tags than the batch's pages
    /// and that many more (a page refused for want of a tag is retried under the lock).
    ///
    /// # Errors
    /// The engine cannot take writes, the batch is malformed, or admission refuses it.
    fn admit<'a, 'o>(
        core: &Arc<Core>,
        mut g: MutexGuard<'a, Inner>,
        ops: &[WriteOp<'o>],
        spare_tags: Option<usize>,
        prepared: Prepared<'o>,
    ) -> Result<std::result::Result<PendingWrite, MutexGuard<'a, Inner>>> {
        g.check_writable()?;
        if ops.is_empty() {
            return Ok(Ok(PendingWrite::done(Ok(()))));
        }
        let shape = g.shape(ops)?;
        if let (Some(spare), Some(free)) = (spare_tags, g.poller.free_tags()) {
            if (free as u64) < shape.bound + spare as u64 {
                return Ok(Err(g));
            }
        }
        let mut waits = Waits::new(&g);
        match g.admission(&shape, &mut waits) {
            Admission::Refuse(e) => Err(e),
            Admission::Pipeline => {
                Self::start_pipelined(core, g, ops, shape.bound, prepared).map(Ok)
            }
            _ => Ok(Err(g)),
        }
    }

    /// Lays out and submits a batch the pipeline admitted; an early batch leaves its
    /// doorbell to the caller.
    fn start_pipelined<'o>(
        core: &Arc<Core>,
        mut g: MutexGuard<'_, Inner>,
        ops: &[WriteOp<'o>],
        bound: u64,
        mut prepared: Prepared<'o>,
    ) -> Result<PendingWrite> {
        let started = g.start_pending(ops, bound, &mut prepared).map(|mut p| {
            p.core = Arc::downgrade(core);
            p
        });
        core.watch_open_page(&mut g);
        let poller = g.poller.clone();
        drop(g);
        let mut started = match started {
            Ok(p) => p,
            Err(e) => {
                poller.doorbell();
                return Err(e);
            }
        };
        if matches!(started.state, PendingState::OnDevice { early: true, .. }) {
            // Acknowledged once applied: the caller may answer before it rings.
            // Its ring also seals the shared open page its records may be in.
            started.doorbell = Some(Doorbell::new(poller, Arc::downgrade(core)));
        } else {
            poller.doorbell();
        }
        Ok(started)
    }
}
