//! Client write batches: validation, the pipeline of batches on the device, the synchronous
//! path, and applying updates to the memtable.
//!
//! A pipelined batch is applied in three steps once durable: *claimed* under the write lock
//! in ticket order ([`Inner::claim_ready`]: its outcome decided, its updates handed to the
//! claiming thread), *inserted* into the memtable with no lock ([`ApplyJob::run`]: several
//! finishers at once), and *settled* under the lock in ticket order
//! ([`Inner::settle_applied`]: garbage counted, out of the pipeline, its sequence number
//! published). Why that is safe is in docs/ARCHITECTURE.md (*Concurrency*) and the
//! memtable's module docs.

use super::gc::GC_MOVE_RESERVE;
use super::layout::LaidOut;
use super::maintain::STALL_POLL;
use super::*;

mod admission;
mod apply;
mod doorbell;
mod flush_chain;
pub(super) mod flush_pacing;
mod group;
mod raw_values;
mod submit;

pub(super) use admission::{Admission, BatchShape, StallReason, Waits};
pub use doorbell::Doorbell;
pub(super) use flush_chain::FlushChain;
use flush_chain::{Covered, DurableMark};
pub(super) use group::Joiners;

pub(super) use apply::{ApplyJob, Insertion};
pub(super) use raw_values::{Prepared, RawValue, RawValues};

/// Value-log pages of client batches on the device at once (the write pipeline's depth):
/// 1.5 MiB. With the asynchronous reads' window ([`crate::ASYNC_READ_WINDOW`], 64 pages) that
/// makes the device's 256 command tags (pages past the tags wait in the poller's queue). A
/// batch stays in the pipeline from its layout until the device poller has reaped its pages
/// and it is applied, which on two cores shared with the clients takes far longer than the
/// device's own write latency: at 96 pages, paired runs of the in-process 8 KiB plp S-SET and
/// R-SET waited for room and ran 10-20% slower (`docs/decisions/0037`).
pub(super) const PIPELINE_PAGES: u64 = 192;
const _: () = assert!(
    PIPELINE_PAGES + crate::ASYNC_READ_WINDOW as u64 <= hwftl_sim::DEFAULT_QUEUE_DEPTH as u64
);

/// Larger batches are written synchronously, alone.
pub(super) const PIPELINE_MAX_BATCH_PAGES: u64 = 64;

/// Pipeline pages a batch of garbage collection's moves counts at most, whatever its size:
/// clients keep the rest of [`PIPELINE_PAGES`] while it is on the device. Recovery's bound on
/// batches in flight ([`super::recovery::MAX_IN_FLIGHT_BATCHES`], `PIPELINE_PAGES / 2 + 1`)
/// holds because every device batch counts two pages or more (a move batch its bound, two
/// or more, or `GC_PIPELINE_SHARE` when that is smaller; a batch that joined the shared open
/// page counts one, but it is no device batch: it takes no batch number, see `open_page`)
/// and batches enter only while the pipeline's count stays within `PIPELINE_PAGES` (clients
/// by admission, move batches beside them by [`super::gc::GcWait::Room`]), so then at most
/// `PIPELINE_PAGES / 2` are in flight. The one exception, move batches submitted with the
/// pipeline empty, may take the count past it; no batch enters then until it is back within,
/// and a submission holds a few batches (`GC_BATCH_BYTES` each).
pub(super) const GC_PIPELINE_SHARE: u64 = PIPELINE_PAGES / 2;

/// Who a pipelined batch is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BatchKind {
    /// A client's: counted as user bytes, fills the value cache, leaves the client reserve.
    Client,
    /// Garbage collection's moves (see [`Inner::start_batch`]).
    GcMoves,
}

/// How long a submission waits for a free device tag before giving up.
pub(super) const QUEUE_FULL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// A batch started by [`Engine::try_submit_write`]; pass it to [`Engine::finish_write`].
///
/// Finish it to learn its outcome. A batch not acknowledged from DRAM (durable mode)
/// records its outcome only when it is finished, and batches are claimed in ticket order,
/// so one left unfinished would hold every later batch, and every `flush`, `sync` and
/// `close` (which wait for the pipeline to drain), back. Dropping one unfinished therefore
/// finishes it in the drop (waiting for its pages and, in durable mode, a device flush) and
/// discards the outcome; a drop during a panic's unwinding does not (the thread may hold
/// the write lock), and leaves the pipeline waiting as described. A batch acknowledged from
/// DRAM was decided at submission and is claimed by whoever finishes next.
#[must_use = "a started batch must be finished to learn whether it is durable"]
pub struct PendingWrite {
    state: PendingState,
    /// The doorbell its pages still wait for: only a batch acknowledged from DRAM leaves it
    /// unrung at submission ([`Engine::try_submit_write`]).
    doorbell: Option<Doorbell>,
    /// The engine it was started on, to finish it if it is dropped unfinished.
    core: std::sync::Weak<Core>,
}

impl PendingWrite {
    /// Its ticket, if it is a pipelined batch acknowledged from DRAM (decided at
    /// submission, so claimable at once).
    fn early_ticket(&self) -> Option<u64> {
        match self.state {
            PendingState::OnDevice {
                ticket,
                early: true,
                ..
            } if self.doorbell.is_none() => Some(ticket),
            _ => None,
        }
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if matches!(self.state, PendingState::Done(_)) || std::thread::panicking() {
            return;
        }
        if let Some(core) = self.core.upgrade() {
            let pending = PendingWrite {
                state: std::mem::replace(&mut self.state, PendingState::Done(Ok(()))),
                doorbell: self.doorbell.take(),
                core: std::sync::Weak::new(),
            };
            if let Err(e) = core.finish_write(pending) {
                tracing::warn!(error = %e, "a batch dropped unfinished failed");
            }
        }
    }
}

impl PendingWrite {
    fn done(r: Result<()>) -> PendingWrite {
        PendingWrite {
            state: PendingState::Done(r),
            doorbell: None,
            core: std::sync::Weak::new(),
        }
    }

    /// Takes the doorbell this batch's pages wait for, if it was left unrung (a batch
    /// acknowledged from DRAM); ring it once the batch's replies are out. Without this,
    /// [`Engine::finish_write`] rings it first thing.
    pub fn take_doorbell(&mut self) -> Option<Doorbell> {
        self.doorbell.take()
    }
}

pub(super) enum PendingState {
    /// Already written (synchronously) or refused.
    Done(Result<()>),
    /// Pages on the device.
    OnDevice {
        ticket: u64,
        /// Completion of its pages.
        pages: Arc<GroupDone>,
        dev: Arc<dyn AppendDevice>,
        /// Flush the device's write cache before acknowledging: the flush its pages'
        /// completion started ([`FlushChain`]), or, if the device refused that one, one
        /// through the gate, which shares a flush among the batches that wait at once.
        flush: Option<DurableFlush>,
        /// Acknowledged once applied, without waiting for its pages
        /// ([`EngineConfig::ack_from_dram`]).
        early: bool,
    },
}

/// How a durable batch learns that it is durable.
pub(super) enum DurableFlush {
    /// Its pages' completion starts its flush ([`FlushChain`]); the gate serves when the
    /// device had no tag for that flush.
    Chained {
        chain: Arc<FlushChain>,
        mark: Arc<DurableMark>,
        gate: Arc<FlushGate>,
    },
    /// Its writer flushes once its pages are in, through the gate (which shares one flush
    /// among the batches that wait at once): where flushes are cheap
    /// ([`FlushChain::cheap`]).
    ByWriter {
        chain: Arc<FlushChain>,
        gate: Arc<FlushGate>,
    },
}

/// A pipelined batch between submission and application.
pub(super) struct InFlight {
    /// Keys with their sequence numbers and new slots.
    updates: Vec<(MemKey, u64, Slot)>,
    /// Copies of the small values it writes, by address (`LaidOut::held`).
    held: Vec<(ValuePtr, Bytes)>,
    /// It is a batch of garbage collection's moves.
    moves: bool,
    /// A client batch acknowledged before its pages land ([`EngineConfig::ack_from_dram`]):
    /// claimable from submission on, and retired from the pipeline only once its pages have
    /// completed ([`Inner::retire_landed`]).
    pub(super) early: bool,
    /// Its pages' copies in the landing buffer (released when it is retired).
    pub(super) landing: Vec<PageAddr>,
    /// An early batch that was applied and its writer answered (not poisoned): a page of it
    /// failing loses an acknowledged write.
    pub(super) acked: bool,
    /// The values it writes (garbage if it fails).
    fresh: Vec<Invalidated>,
    /// It retimes a value written before it: a later batch's insert must wait for its
    /// insert (see [`ApplyJob::after`]).
    retimes: bool,
    user_bytes: u64,
    /// Pipeline pages it counts.
    pub(super) pages: u64,
    /// Set when all its pages completed (or one failed).
    io: Option<std::result::Result<(), BatchFailure>>,
    /// Its pages for the value cache, put in once it is applied.
    cache_fill: Vec<(PageAddr, Bytes)>,
    /// Completion of its pages.
    pub(super) done: Arc<GroupDone>,
    /// Its newest sequence number (what reads may see once it is applied).
    max_seq: u64,
    /// Set when [`Inner::claim_ready`] handed its updates to an inserter (its outcome is
    /// then decided); it leaves the pipeline when the insert is done and every batch before
    /// it left ([`Inner::settle_applied`]).
    insertion: Option<Arc<Insertion>>,
}

impl InFlight {
    /// Its updates, while not yet claimed for insertion (empty after).
    pub(super) fn updates(&self) -> &[(MemKey, u64, Slot)] {
        &self.updates
    }

    /// Whether it was claimed, or can be claimed as soon as the batches before it are: its
    /// outcome is decided (acknowledged from DRAM, refused, or its pages reported).
    pub(super) fn decided(&self) -> bool {
        self.io.is_some() || self.insertion.is_some()
    }

    /// Whether a thread is inserting its updates into the memtable right now.
    pub(super) fn inserting(&self) -> bool {
        self.insertion
            .as_ref()
            .is_some_and(|i| !i.done.load(Ordering::Acquire))
    }
}

/// How a batch failed on the device, which decides what its writer is told (see
/// [`Inner::write_outcome`]).
#[derive(Debug)]
pub(super) enum BatchFailure {
    /// A page of it was refused or failed: the device never holds it whole.
    Page(DeviceError),
    /// Its pages completed, but the flush that was to make them durable failed.
    Flush(DeviceError),
}

impl Inner {
    /// What the writer of a batch that was not applied is told. Contract (also in
    /// docs/ARCHITECTURE.md, *Write outcomes*): `Ok` only once durable and applied;
    /// [`EngineError::WriteNotApplied`] only when the batch can never be applied (a page of
    /// it is missing on the device, so no replay finds it whole); otherwise
    /// [`EngineError::OutcomeUnknown`]: its pages may be on the device (a failed flush does
    /// not say they are not), and a restart before the checkpoint moves past them replays
    /// them. `aborted`: the batch was failed because an earlier one failed.
    pub(super) fn write_outcome(failure: Option<BatchFailure>, aborted: bool) -> EngineError {
        match failure {
            Some(BatchFailure::Page(e)) => EngineError::WriteNotApplied(e),
            Some(BatchFailure::Flush(e)) => EngineError::OutcomeUnknown {
                reason: format!("the device flush after its pages failed: {e}"),
            },
            None if aborted => EngineError::OutcomeUnknown {
                reason: "an earlier write batch failed on the device while this one was on it"
                    .into(),
            },
            None => EngineError::OutcomeUnknown {
                reason: "its pages were never confirmed".into(),
            },
        }
    }
}

impl Engine {
    /// Sets `key` to `value`; durable on return.
    ///
    /// # Errors
    /// `EmptyKey`, `KeyTooLarge`, `ValueTooLarge`, `DeviceFull`, device errors.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(&[WriteOp::Put(key, value)])
    }

    /// Deletes `key` (deleting a missing key is not an error); durable on return.
    ///
    /// # Errors
    /// `EmptyKey`, `KeyTooLarge`, `DeviceFull`, device errors.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.write(&[WriteOp::Delete(key)])
    }

    /// The body of [`Engine::write`] for a batch (or a group of batches) already validated
    /// (`shape`), with the write lock held: admission, then the pipeline or the synchronous
    /// path.
    fn write_locked<'a>(
        &self,
        mut g: MutexGuard<'_, Inner>,
        ops: &[WriteOp<'a>],
        shape: BatchShape,
        mut prepared: Prepared<'a>,
    ) -> Result<()> {
        let mut waits = Waits::new(&g);
        loop {
            match g.admission(&shape, &mut waits) {
                Admission::Refuse(e) => {
                    waits.finish(&mut g);
                    return Err(e);
                }
                Admission::Wait(reason) => self.stall(&mut g, &mut waits, reason)?,
                Admission::Rotate => {
                    if g.pipeline.is_empty() {
                        g.rotate();
                        self.core.work.notify_one();
                    } else {
                        self.core.quiesce(&mut g);
                    }
                }
                Admission::PipelineFull => {
                    let core = &self.core;
                    core.joiners.room_wait(|| core.wait_for_batches(&mut g));
                }
                Admission::Sync => {
                    if !g.pipeline.is_empty() {
                        // Alone on the device: drain, then decide again.
                        self.core.quiesce(&mut g);
                        continue;
                    }
                    waits.finish(&mut g);
                    let r = g.write(ops);
                    self.core.applied.notify_all();
                    if g.mem_full() || g.gc_due() {
                        self.core.work.notify_one();
                    }
                    return r;
                }
                Admission::Pipeline => {
                    waits.finish(&mut g);
                    let started = g
                        .start_pending(ops, shape.bound, &mut prepared)
                        .map(|mut p| {
                            p.core = Arc::downgrade(&self.core);
                            p
                        });
                    self.core.watch_open_page(&mut g);
                    // A batch acknowledged from DRAM was decided at submission: it (and any
                    // decided batch before it) is claimed in this same hold of the lock, as
                    // `Core::finish_write` would claim it after taking the lock again.
                    let early = started.as_ref().ok().and_then(PendingWrite::early_ticket);
                    let claimed = early
                        .map(|ticket| (ticket, g.claim_ready(), g.mem.clone(), g.side.clone()));
                    let poller = g.poller.clone();
                    drop(g);
                    if claimed.is_some() {
                        // Acknowledged from DRAM: its pages may go down with the next
                        // completion's turn of the poller, with every batch queued until then.
                        poller.doorbell_if_idle();
                    } else {
                        poller.doorbell();
                    }
                    // Callers that queued while this one waited for room: one leads them now
                    // (before this caller waits for its batch to finish).
                    self.core.joiners.hand_on();
                    let mut pending = started?;
                    let Some((ticket, jobs, mem, side)) = claimed else {
                        return self.finish_write(pending);
                    };
                    // As in `Core::finish_write`: the inserts run with the lock free.
                    for job in jobs {
                        job.run(&mem, side.cache.as_deref());
                    }
                    pending.state = PendingState::Done(Ok(()));
                    return self.core.settle_and_wait(self.core.inner.lock(), ticket);
                }
            }
        }
    }

    /// Waits for the maintenance thread once (woken when it finishes a task or a batch is
    /// applied), counting the stall.
    fn stall(
        &self,
        g: &mut MutexGuard<'_, Inner>,
        waits: &mut Waits,
        reason: Option<StallReason>,
    ) -> Result<()> {
        if let Some(r) = reason {
            waits.count(g, r);
            self.core.work.notify_one();
        }
        self.core.applied.wait_for(g, STALL_POLL);
        if g.maint.failures != waits.failures_at_start && reason.is_some() {
            let cause = g.maint.last_failure.clone();
            waits.finish(g);
            return Err(cause.map_or(EngineError::Closed, EngineError::MaintenanceFailed));
        }
        Ok(())
    }

    /// Waits until a batch from [`Engine::try_submit_write`] is durable and applied (and so
    /// visible to reads), and returns its outcome.
    ///
    /// # Errors
    /// As [`Engine::write`]; a batch fails when one started before it failed.
    pub fn finish_write(&self, pending: PendingWrite) -> Result<()> {
        self.core.finish_write(pending)
    }
}

impl Core {
    /// See [`Engine::finish_write`].
    fn finish_write(&self, mut pending: PendingWrite) -> Result<()> {
        if let Some(bell) = pending.doorbell.take() {
            bell.ring();
        }
        let state = std::mem::replace(&mut pending.state, PendingState::Done(Ok(())));
        let (ticket, pages, dev, flush, early) = match state {
            PendingState::Done(r) => return r,
            PendingState::OnDevice {
                ticket,
                pages,
                dev,
                flush,
                early,
            } => (ticket, pages, dev, flush, early),
        };
        let mut g = if early {
            // Its outcome was decided at submission: apply it now (see `landing`).
            self.inner.lock()
        } else {
            // Wait outside the lock (woken once, by the last page): other batches are laid
            // out and submitted meanwhile.
            // Durable before acknowledged: the pages may still be in the write cache.
            let by_writer = |chain: &FlushChain, gate: &FlushGate| {
                gate.flush(|| chain.timed(|| device_flush(dev.as_ref())))
                    .map_err(BatchFailure::Flush)
            };
            let io = match flush {
                None => pages.wait().map_err(BatchFailure::Page),
                Some(DurableFlush::ByWriter { chain, gate }) => pages
                    .wait()
                    .map_err(BatchFailure::Page)
                    .and_then(|()| by_writer(&chain, &gate)),
                // One wait for both: the pages' completion started the flush.
                Some(DurableFlush::Chained { chain, mark, gate }) => match chain.wait(&mark) {
                    Covered::PagesFailed => match pages.wait() {
                        Err(e) => Err(BatchFailure::Page(e)),
                        // The group's error is reported once, and to this writer alone.
                        Ok(()) => Err(BatchFailure::Page(DeviceError::PoweredOff)),
                    },
                    Covered::Flushed(r) => r.map_err(BatchFailure::Flush),
                    Covered::Refused => by_writer(&chain, &gate),
                },
            };
            let mut g = self.inner.lock();
            g.record_io(ticket, io);
            g
        };
        let jobs = g.claim_ready();
        if !jobs.is_empty() {
            // The memtable inserts run with the write lock free: other batches are laid
            // out, and other finishers insert theirs, meanwhile. The active memtable cannot
            // be rotated away before these batches settle (rotation drains the pipeline).
            let (mem, side) = (g.mem.clone(), g.side.clone());
            drop(g);
            for job in jobs {
                job.run(&mem, side.cache.as_deref());
            }
            g = self.inner.lock();
        }
        self.settle_and_wait(g, ticket)
    }

    /// The end of every pipelined write, its batch claimed (by this caller or another):
    /// settles what is applied, then waits until batch `ticket` is, and returns its outcome.
    fn settle_and_wait(&self, mut g: MutexGuard<'_, Inner>, ticket: u64) -> Result<()> {
        g.settle_applied(false);
        self.applied.notify_all();
        while g.applied_upto < ticket {
            self.applied.wait(&mut g);
        }
        if g.mem_full() || g.gc_due() || g.mem.merge_due() {
            self.work.notify_one();
        }
        g.outcomes.remove(&ticket).unwrap_or(Ok(()))
    }
}

impl Inner {
    pub(super) fn validate_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(EngineError::EmptyKey);
        }
        let max = self.cfg.max_key.min(LONG_KEY_MAX);
        if key.len() > max {
            return Err(EngineError::KeyTooLarge {
                len: key.len(),
                max,
            });
        }
        Ok(())
    }

    /// Validates a client batch and measures what admission needs of it.
    pub(super) fn shape(&self, ops: &[WriteOp<'_>]) -> Result<BatchShape> {
        let any_put = self.validate_batch(ops)?;
        Ok(BatchShape {
            bound: self.page_bound(ops),
            put_bytes: if any_put { self.put_bytes(ops) } else { 0 },
            spanning: self.batch_spanning_segments(ops),
        })
    }

    /// Starts a client batch down the pipeline ([`Inner::start_batch`]) and returns what
    /// [`Engine::finish_write`] waits on.
    pub(super) fn start_pending<'a>(
        &mut self,
        ops: &[WriteOp<'a>],
        bound: u64,
        prepared: &mut Prepared<'a>,
    ) -> Result<PendingWrite> {
        let (ticket, pages, mark) = self.start_batch(ops, bound, BatchKind::Client, prepared)?;
        let early = self.pipeline.get(&ticket).is_some_and(|b| b.early);
        Ok(PendingWrite {
            state: PendingState::OnDevice {
                ticket,
                pages,
                dev: self.dev.clone(),
                flush: match mark {
                    Some(mark) => Some(DurableFlush::Chained {
                        chain: self.flush_chain.clone(),
                        mark,
                        gate: self.flush_gate.clone(),
                    }),
                    None => (self.cfg.flush_writes && !early).then(|| DurableFlush::ByWriter {
                        chain: self.flush_chain.clone(),
                        gate: self.flush_gate.clone(),
                    }),
                },
                early,
            },
            doorbell: None,
            core: std::sync::Weak::new(),
        })
    }

    /// Lays out a batch and submits its pages in order (the lock held, so batches reach
    /// each segment's write pointer in order). Returns its ticket, the completion its pages
    /// report to, and, for a durable client batch (a device flush before it is
    /// acknowledged), the mark its flush is known by ([`FlushChain`]).
    ///
    /// A [`BatchKind::GcMoves`] batch is laid out as garbage collection's synchronous moves
    /// were (the GC reserve, no value-cache fill, no user bytes; acknowledged from DRAM as a
    /// client's batch is, in that mode) and counts at most half the pipeline's pages, so
    /// clients keep the other half while it is on the device (see [`GC_PIPELINE_SHARE`]).
    pub(super) fn start_batch<'a>(
        &mut self,
        ops: &[WriteOp<'a>],
        bound: u64,
        kind: BatchKind,
        prepared: &mut Prepared<'a>,
    ) -> Result<(u64, Arc<GroupDone>, Option<Arc<DurableMark>>)> {
        self.check_not_lost()?;
        let gc = kind == BatchKind::GcMoves;
        let any_put = ops
            .iter()
            .any(|op| matches!(op, WriteOp::Put(..) | WriteOp::PutUntil(..)));
        let reserve = match (gc, any_put) {
            (true, _) => GC_MOVE_RESERVE,
            (false, true) => RESERVED_SEGMENTS,
            (false, false) => 0,
        };
        self.in_gc = gc;
        // Only a client batch acknowledged from DRAM shares the open page (see `open_page`).
        let share = !gc && self.side.landing.is_some();
        let built = self.build_batch(ops, reserve, share, prepared);
        self.in_gc = false;
        let LaidOut {
            pages,
            updates,
            fresh,
            retimes,
            held,
            sharing,
        } = built?;
        // Acknowledged from DRAM: its pages' copies wait in the landing buffer, where reads
        // find them until they are on the device (see `landing`). Garbage collection's moves
        // too: they are applied at once, and the victim is released only once they landed.
        let landing = self.side.landing.clone();
        let (cache_fill, mut landing_addrs) = match &landing {
            Some(l) => {
                let copies = self.page_copies(&pages);
                l.hold(&copies);
                let addrs = copies.iter().map(|(a, _)| *a).collect();
                // Moves do not fill the value cache (they are not what clients just wrote).
                let fill = if self.side.cache.is_some() && !gc {
                    copies
                } else {
                    Vec::new()
                };
                (fill, addrs)
            }
            None if gc => (Vec::new(), Vec::new()),
            None => (self.cache_copies(&pages), Vec::new()),
        };
        let bound = if gc {
            bound.min(GC_PIPELINE_SHARE)
        } else {
            bound
        };
        let bound = if sharing == Sharing::Joined {
            // No page of its own, and no device batch: it adds no page to the pipeline.
            1
        } else {
            bound
        };
        // Its pages, and the shared open page it has records in (which its completion then
        // waits for too: `open_page`, invariant 2).
        let n = pages.len() + usize::from(sharing != Sharing::None);
        // Every batch's last page wakes those who wait for the pipeline in that mode; a
        // durable client batch's starts its flush.
        let durable = (kind == BatchKind::Client
            && self.cfg.flush_writes
            && landing.is_none()
            && !self.flush_chain.cheap(self.cfg.cheap_flush))
        .then(DurableMark::new);
        let group = match (&self.side.landing, &durable) {
            (Some(l), _) => GroupDone::with_hook(n, l.hook()),
            (None, Some(mark)) => GroupDone::with_hook(n, self.flush_chain.hook(mark.clone())),
            (None, None) => GroupDone::new(n),
        };
        if let (0, Some(mark)) = (n, &durable) {
            // No page: nothing to wait for but a flush (a group of none calls no hook).
            self.flush_chain.pages_in(mark, false);
        }
        if sharing != Sharing::None {
            // The page as it now stands replaces its copy in the landing buffer before any
            // of this batch's versions can enter the memtable (invariant 3).
            let ticket = self.next_ticket;
            if let (Some(l), Some((addr, copy))) = (&landing, self.join_open_page(&group, ticket)) {
                l.hold(&[(addr, copy)]);
                landing_addrs.push(addr);
            }
        }
        // All pages with one doorbell; from the first refusal on (a full queue: the later
        // pages are then refused too, being past the write pointer) one at a time.
        let lbas: Vec<Lba> = pages.iter().map(|(lba, _)| *lba).collect();
        let cmds: Vec<Command> = pages
            .into_iter()
            .map(|(lba, buf)| Command::Write { lba, buf })
            .collect();
        let callbacks = (0..n).map(|_| group.callback()).collect();
        let mut refused: Option<DeviceError> = None;
        // Queued only: the caller rings the doorbell (a system call) once it has released
        // the write lock; the kernel takes the pages in queue order, which is write-pointer
        // order, whoever rings.
        for (i, r) in self
            .poller
            .queue_many(cmds, callbacks)
            .into_iter()
            .enumerate()
        {
            let Err(r) = r else {
                continue;
            };
            if refused.is_some() {
                group.finish_one(Ok(()));
                continue;
            }
            let Some(buf) = r.buf else {
                refused = Some(r.error);
                group.finish_one(Ok(()));
                continue;
            };
            if let Err(e) = self.submit_refused_page(lbas[i], buf, || group.callback()) {
                refused = Some(e);
                group.finish_one(Ok(()));
            }
        }
        if landing.is_some() {
            // plp: queued behind these pages, rung with their doorbell (`flush_pacing`).
            self.flush_pacer.after_pages(lbas.len(), &self.poller);
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        // Its own pages; the shared page counts once, when it is sealed (`seal_open_page`).
        self.pages_since_checkpoint += lbas.len() as u64;
        self.pipeline_pages += bound;
        let max_seq = updates.iter().map(|(_, seq, _)| *seq).max().unwrap_or(0);
        // Early only when every page was taken: a refused page fails the batch as always
        // (its writer learns it; nothing is applied).
        let early = landing.is_some() && refused.is_none() && n > 0;
        if refused.is_some() && sharing == Sharing::Opened {
            // The page it opened holds only its own records: it fails with them.
            self.discard_open_page();
        }
        if landing.is_some() && !early {
            // Never applied: its copies go now (`retire_landed` only sees early batches).
            if let Some(l) = &landing {
                l.release(&landing_addrs);
            }
        }
        self.pipeline.insert(
            ticket,
            InFlight {
                updates: updates
                    .into_iter()
                    .map(|(k, seq, s)| (MemKey::new(k), seq, s))
                    .collect(),
                held: held
                    .into_iter()
                    .map(|(p, v)| (p, Bytes::copy_from_slice(v)))
                    .collect(),
                moves: gc,
                early,
                landing: if early { landing_addrs } else { Vec::new() },
                acked: false,
                fresh,
                retimes,
                user_bytes: if gc { 0 } else { Self::user_bytes(ops) },
                pages: bound,
                io: match refused {
                    Some(e) => Some(Err(BatchFailure::Page(e))),
                    // Decided now: claimable at once.
                    None if early => Some(Ok(())),
                    None => None,
                },
                cache_fill,
                done: group.clone(),
                max_seq,
                insertion: None,
            },
        );
        Ok((ticket, group, durable))
    }

    /// Hands a page the device refused when it was queued (its buffer back) to the device
    /// again, one submission at a time: once whatever the refusal was (a page after a refused
    /// one is refused as past the write pointer, and goes once the one before it went), then
    /// again while the device's queue is full (reads hold the tags: they are let finish), for
    /// at most [`QUEUE_FULL_PATIENCE`]. `on_done` makes the page's completion callback for
    /// each try (a refused try drops its own). `Err`: why the page was refused for good.
    pub(super) fn submit_refused_page(
        &self,
        lba: Lba,
        mut buf: PageBuf,
        on_done: impl Fn() -> crate::io::OnDone,
    ) -> std::result::Result<(), DeviceError> {
        let since = std::time::Instant::now();
        loop {
            match self.poller.submit(Command::Write { lba, buf }, on_done()) {
                Ok(()) => return Ok(()),
                Err(r)
                    if matches!(r.error, DeviceError::QueueFull { .. })
                        && since.elapsed() < QUEUE_FULL_PATIENCE =>
                {
                    buf = r.buf.ok_or(r.error)?;
                    std::thread::yield_now();
                }
                Err(r) => return Err(r.error),
            }
        }
    }

    /// Records how a pipelined batch's pages (and its flush, if any) went, making it ready to
    /// apply. A page refused at submission already failed the batch.
    pub(super) fn record_io(&mut self, ticket: u64, io: std::result::Result<(), BatchFailure>) {
        if let Some(b) = self.pipeline.get_mut(&ticket) {
            b.io = Some(match b.io.take() {
                Some(Err(e)) => Err(e),
                _ => io,
            });
        }
    }

    /// Applies, in ticket order, every pipelined batch whose pages have all completed, with
    /// the write lock held (garbage collection's path): claims them ([`Inner::claim_ready`]),
    /// inserts them here, and waits for every batch claimed before them by other threads to
    /// be inserted too, so that on return every claimed batch has settled
    /// ([`Inner::settle_applied`]) and its outcome is in `outcomes`.
    pub(super) fn apply_ready(&mut self) {
        let jobs = self.claim_ready();
        let (mem, side) = (self.mem.clone(), self.side.clone());
        for job in jobs {
            job.run(&mem, side.cache.as_deref());
        }
        self.settle_applied(true);
    }

    /// Claims, in ticket order, every pipelined batch whose pages have all completed (and
    /// every batch before it): decides its outcome (a failed batch fails those after it too:
    /// they may sit behind its hole) and returns the updates of those that succeeded, for
    /// the caller to insert, with or without the write lock ([`ApplyJob::run`]). They stay
    /// in the pipeline until they settle.
    ///
    /// Why claiming is in ticket order: a batch's updates may go into the memtable only
    /// once every batch before it is known to have succeeded (a failure poisons the batches
    /// after it, which must then never be inserted).
    pub(super) fn claim_ready(&mut self) -> Vec<ApplyJob> {
        let mut jobs = Vec::new();
        loop {
            let t = self.claimed_upto + 1;
            // A batch that retimes may point at the value of an earlier batch whose insert
            // is still running (`Inner::pending_slot`): it waits for every earlier insert.
            let earlier: Vec<Arc<Insertion>> = match self.pipeline.get(&t) {
                Some(b) if b.retimes => self
                    .pipeline
                    .range(..t)
                    .filter_map(|(_, e)| e.insertion.clone())
                    .filter(|i| !i.done.load(Ordering::Acquire))
                    .collect(),
                _ => Vec::new(),
            };
            let Some(b) = self.pipeline.get_mut(&t) else {
                break;
            };
            if b.io.is_none() {
                break;
            }
            self.claimed_upto = t;
            let outcome = match b.io {
                Some(Ok(())) if t >= self.poisoned_below => {
                    self.stats.user_bytes_written += b.user_bytes;
                    b.acked = b.early;
                    let insertion = Arc::new(Insertion::default());
                    b.insertion = Some(insertion.clone());
                    let last_retime = self
                        .last_retime_insertion
                        .take()
                        .filter(|i| !i.done.load(Ordering::Acquire));
                    if b.retimes {
                        self.last_retime_insertion = Some(insertion.clone());
                    } else {
                        self.last_retime_insertion = last_retime.clone();
                    }
                    let mut after = earlier;
                    after.extend(last_retime);
                    jobs.push(ApplyJob {
                        updates: std::mem::take(&mut b.updates),
                        held: std::mem::take(&mut b.held),
                        moves: b.moves,
                        cache_fill: std::mem::take(&mut b.cache_fill),
                        insertion,
                        after,
                    });
                    Ok(())
                }
                _ => {
                    b.insertion = Some(Insertion::finished());
                    b.max_seq = 0;
                    b.updates.clear();
                    b.held.clear();
                    let fresh = std::mem::take(&mut b.fresh);
                    let failure = match b.io.take() {
                        Some(Err(f)) => Some(f),
                        _ => None,
                    };
                    // Its records are garbage; the head may hold a hole.
                    self.mark_dead(&fresh);
                    self.abandon_head_after_failure();
                    self.poisoned_below = self.poisoned_below.max(self.next_ticket);
                    let aborted = failure.is_none();
                    Err(Self::write_outcome(failure, aborted))
                }
            };
            self.outcomes.insert(t, outcome);
        }
        jobs
    }

    /// Takes out of the pipeline, in ticket order, every claimed batch whose insert is done,
    /// counts the values their updates shadowed as garbage, and publishes the newest
    /// sequence number of the settled prefix: a batch becomes visible to reads only when it
    /// and every batch before it are wholly in the memtable. With `wait`, waits for inserts
    /// other threads are running (they need no lock to finish), so every claimed batch
    /// settles.
    pub(super) fn settle_applied(&mut self, wait: bool) {
        let mut settled = false;
        loop {
            let t = self.applied_upto + 1;
            let Some(b) = self.pipeline.get(&t) else {
                break;
            };
            let Some(insertion) = b.insertion.clone() else {
                break;
            };
            if !insertion.done.load(Ordering::Acquire) {
                if wait {
                    std::thread::yield_now();
                    continue;
                }
                break;
            }
            let (early, max_seq, pages) = (b.early, b.max_seq, b.pages);
            if !early {
                self.pipeline.remove(&t);
                self.pipeline_pages = self.pipeline_pages.saturating_sub(pages);
            }
            // (An early batch stays until its pages land: `retire_landed`.)
            let shadowed = std::mem::take(&mut *insertion.shadowed.lock());
            self.mark_dead(&shadowed);
            self.applied_seq = self.applied_seq.max(max_seq);
            self.applied_upto = t;
            settled = true;
        }
        // The whole settled prefix is in: reads may see it.
        self.publish_seq();
        if let Some(l) = self.side.landing.clone() {
            self.retire_landed();
            if settled {
                l.bump();
            }
        }
    }

    /// Checks a batch's keys and value sizes; returns whether it holds a put.
    pub(super) fn validate_batch(&self, ops: &[WriteOp<'_>]) -> Result<bool> {
        let max_value = self.max_value();
        let mut any_put = false;
        for op in ops {
            match op {
                WriteOp::Put(k, v) | WriteOp::PutUntil(k, v, _) => {
                    self.validate_key(k)?;
                    if v.len() as u64 > max_value {
                        return Err(EngineError::ValueTooLarge {
                            len: v.len() as u64,
                            max: max_value,
                        });
                    }
                    any_put = true;
                }
                WriteOp::Delete(k) | WriteOp::Retime(k, _) => self.validate_key(k)?,
            }
        }
        Ok(any_put)
    }

    /// Ends the head segment where it stands (after a failed or abandoned batch it may hold
    /// holes or a torn batch); the next write opens a new one.
    /// A batch failed on the device: its segment may hold a hole, and recovery's replay
    /// stops at a hole. Batches written after it (in a new segment) would be acknowledged
    /// yet not replayed, so the next batch first moves the checkpoint past the hole.
    pub(super) fn abandon_head_after_failure(&mut self) {
        self.abandon_head();
        self.needs_checkpoint = true;
    }

    pub(super) fn abandon_head(&mut self) {
        if let Some(h) = self.head.take() {
            if let Some(m) = self.log_segs.get_mut(&h.log_seg) {
                m.sealed_end = Some(h.next_page);
            }
        }
    }

    /// Moves the replay checkpoint past the hole a failed batch left (see
    /// `abandon_head_after_failure` and `forget_layout`), if there is one: recovery's replay
    /// stops at a hole, so nothing written after it counts until the checkpoint is past it.
    /// A client batch waits for this; garbage collection may move values past a hole, but
    /// its victims leave the manifest only after this (`release_reclaimed`).
    ///
    /// # Errors
    /// The flush's, or writing the manifest.
    pub(super) fn close_hole(&mut self) -> Result<()> {
        if !self.needs_checkpoint {
            return Ok(());
        }
        self.flush()?;
        if self.needs_checkpoint {
            // Nothing to flush, but the hole is still after the checkpoint.
            self.move_checkpoint();
            self.persist()?;
        }
        Ok(())
    }

    /// Counts a durable batch's user bytes and applies its updates to the memtable.
    /// Gives the memtable copies of a batch's small values before its versions go in.
    pub(super) fn hold_values(&self, held: Vec<(ValuePtr, &[u8])>) {
        for (p, v) in held {
            self.mem.hold(p, Bytes::copy_from_slice(v));
        }
    }

    pub(super) fn commit_updates(&mut self, user_bytes: u64, updates: Vec<(&[u8], u64, Slot)>) {
        if !self.in_gc {
            self.stats.user_bytes_written += user_bytes;
        }
        for (k, seq, slot) in updates {
            self.apply(k, seq, slot);
        }
        self.publish_seq();
    }

    pub(super) fn user_bytes(ops: &[WriteOp<'_>]) -> u64 {
        ops.iter()
            .map(|op| match op {
                WriteOp::Put(k, v) | WriteOp::PutUntil(k, v, _) => (k.len() + v.len()) as u64,
                WriteOp::Delete(k) => k.len() as u64,
                // A deadline is metadata (and a put with one was expanded into a put and a
                // retime: its key counts once).
                WriteOp::Retime(..) => 0,
            })
            .sum()
    }

    /// Writes a batch and waits for it (the synchronous path: garbage collection's moves,
    /// and client batches that [`Inner::admission`] sent here, with nothing in flight).
    /// Runs no maintenance: admission waited for what the batch needs.
    pub(super) fn write(&mut self, ops: &[WriteOp<'_>]) -> Result<()> {
        self.check_open()?;
        if ops.is_empty() {
            return Ok(());
        }
        let any_put = self.validate_batch(ops)?;
        // Deletes may dip into the reserve and client puts may not. Garbage collection's
        // moves leave one segment, so that the flush which closes a hole one of its batches
        // may leave (see `forget_layout`) still finds room for its keytables.
        let reserve = if self.in_gc {
            GC_MOVE_RESERVE
        } else if any_put {
            RESERVED_SEGMENTS
        } else {
            0
        };
        let LaidOut {
            pages,
            updates,
            fresh,
            held,
            ..
        } = self.build_batch(ops, reserve, false, &mut Prepared::none())?;
        let cache_fill = if self.in_gc {
            Vec::new()
        } else {
            self.cache_copies(&pages)
        };
        let n = pages.len() as u64;
        let mut written = self.write_pages(pages).map_err(|e| match e {
            EngineError::Device(d) => EngineError::WriteNotApplied(d),
            other => other,
        });
        // A client batch is acknowledged only once the device's write cache holds none of
        // it (garbage collection's moves are made durable by the manifest write after them).
        if written.is_ok() && !self.in_gc && self.cfg.flush_writes {
            written = self.sync_device().map_err(|e| match e {
                EngineError::Device(d) => Self::write_outcome(Some(BatchFailure::Flush(d)), false),
                other => other,
            });
        }
        if let Err(e) = written {
            // Its records are garbage, as a failed pipelined batch's (`claim_ready`).
            self.mark_dead(&fresh);
            self.abandon_head_after_failure();
            return Err(e);
        }
        self.pages_since_checkpoint += n;
        self.hold_values(held);
        self.commit_updates(Self::user_bytes(ops), updates);
        self.fill_cache(cache_fill);
        Ok(())
    }

    /// Copies of a client batch's pages for the value cache, by log address (none without
    /// a cache). Writes fill the cache so a value read soon after it was written costs no
    /// device read; the copies go in only once the batch is durable and applied
    /// ([`Inner::fill_cache`]), so a failed batch's pages never do.
    fn cache_copies(&self, pages: &[(Lba, PageBuf)]) -> Vec<(PageAddr, Bytes)> {
        if self.side.cache.is_none() {
            return Vec::new();
        }
        self.page_copies(pages)
    }

    /// Copies of a batch's pages by log address. The pages come as the layout seals them: a
    /// packed page, then the raw pages its header says follow it (`raw_after`), and so on; a
    /// packed page is copied only up to its records when that saves room
    /// (`cache::copy_packed_for_cache`), a raw page whole.
    fn page_copies(&self, pages: &[(Lba, PageBuf)]) -> Vec<(PageAddr, Bytes)> {
        let mut out = Vec::with_capacity(pages.len());
        // A batch's pages lie in the newest log segments: search those first.
        let mut last: Option<(u32, u32)> = None;
        let mut raw_left = 0u32;
        for (lba, buf) in pages {
            let copy = if raw_left > 0 {
                raw_left -= 1;
                Bytes::copy_from_slice(buf)
            } else {
                match crate::vlog_format::packed_shape(buf) {
                    Some((_, raw_after)) => {
                        raw_left = raw_after;
                        crate::cache::copy_packed_for_cache(buf)
                    }
                    // Not where a packed page should be: keep it whole.
                    None => Bytes::copy_from_slice(buf),
                }
            };
            let Ok((seg, page)) = self.g.locate(*lba) else {
                continue;
            };
            let log_seg = match last {
                Some((s, l)) if s == seg.0 => Some(l),
                _ => self
                    .log_segs
                    .values()
                    .rev()
                    .find(|m| m.segment == seg.0)
                    .map(|m| m.log_seg),
            };
            let Some(log_seg) = log_seg else { continue };
            last = Some((seg.0, log_seg));
            out.push((PageAddr { log_seg, page }, copy));
        }
        out
    }

    /// Puts an applied client batch's pages into the value cache.
    fn fill_cache(&self, pages: Vec<(PageAddr, Bytes)>) {
        if let Some(cache) = &self.side.cache {
            for (addr, page) in pages {
                cache.insert(addr, page);
            }
        }
    }

    /// Value-log pages of one memtable generation that rotate it out (and so lead to its
    /// flush): bounded for recovery time, and to a sixteenth of the device so garbage
    /// collection always has sealed, flushed segments to choose from. The log after the
    /// checkpoint holds the active generation and the frozen ones: at most
    /// `1 + max_frozen_memtables` budgets (3/16 of a small device at the default).
    pub(super) fn replay_budget_pages(&self) -> u64 {
        let device = u64::from(self.g.segments()) * u64::from(self.g.pages_per_segment());
        REPLAY_BUDGET_PAGES
            .min(device / 16)
            .max(u64::from(self.g.pages_per_segment()))
    }

    /// Puts a slot into the memtable, counting the value it replaces as garbage.
    pub(super) fn apply(&mut self, key: &[u8], seq: u64, slot: Slot) {
        self.applied_seq = self.applied_seq.max(seq);
        let len = key.len();
        match self.mem.insert(key, seq, slot) {
            Some(Slot::Value(old, _)) => self.mark_dead(&[(len, old)]),
            // Garbage collection's synchronous move of a key the table had no version of.
            None if self.in_gc => {
                if let Some(p) = slot.ptr() {
                    self.mem
                        .note_moved_from_below(stored_record_bytes(len, p.len as usize));
                }
            }
            _ => {}
        }
    }

    /// The checkpoint moves to the head: the log before it is never replayed again, so the
    /// garbage its records made is final and goes into the manifest from now on.
    pub(super) fn move_checkpoint(&mut self) {
        debug_assert!(
            self.frozen.is_empty(),
            "checkpoint at the head past a frozen memtable"
        );
        self.needs_checkpoint = false;
        self.checkpoint = self.head_position();
        self.pages_since_checkpoint = 0;
        self.tail_dead.clear();
    }
}

#[cfg(test)]
mod tests;
