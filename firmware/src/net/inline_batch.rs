//! plp: the writes `ls-net` runs itself, one group per turn of its loop. Requests gather in
//! an [`InlineBatch`] as connections are served; at the end of the turn (and again after
//! the replies and the housekeeping that let more requests run) the batch runs as one write
//! group on this thread when `ls-writer` is idle (`exec::try_write_batch_now`, where the
//! concurrency argument is), or goes to the writer's queue in the same order.
//!
//! Per connection: a write joins only while nothing else of the connection is in flight, or
//! when its earlier writes are in the same batch; while a connection has writes in the
//! batch (`Conn::in_batch`) nothing else of it runs. So its replies keep request order, and
//! a read after its write sees the write.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kvproto::Command;

use super::conn::{Conn, InFlight};
use super::route::Route;
use super::Net;
use crate::exec::{self, InlineWrite, Job};
use crate::queue::TrySendError;
use crate::store::Store;

/// Groups run here hand their pages to the device together once this many groups (each
/// writes one packed page at most when its records fit the engine's shared open page, else
/// one at least) ...
const RING_GROUPS: usize = 32;
/// ... or this many request bytes are held back ([`HeldRings`]) ...
const RING_BYTES: usize = 32 << 10;
/// ... or once the oldest has waited this long (the default of `plp-ring-after-ms`). A ring
/// costs the whole drive 50-80 us of CPU on a virtual disk (the submission's system call and
/// the disk's notification, waking the poller on another core, the completion's interrupt
/// and its reaping), so at a few thousand
/// small writes a second the time bound sets how often it is paid. Against 1 ms, 4 ms (with
/// the engine's open page lingering 5 ms, so this ring seals it first) cost 4 connections of
/// 100-byte HSETs 0.75-0.86x the drive's CPU per operation in six pairs (21.1-25.6 us before)
/// (`benches/results/ring-after-2026-12-01`). Replies never wait for it (plp acknowledges
/// from DRAM); what it widens is what a process crash loses (decisions/0039), which is why
/// an operator may shorten it (0: every group rings at once).
pub const DEFAULT_RING_AFTER: Duration = Duration::from_millis(4);

/// Largest `plp-ring-after-ms` accepted: the engine's poller hands queued pages to the device
/// at its next wait at the latest ([`lsm::POLLER_IDLE_PARK`], 20 ms), so a longer bound would
/// change nothing.
pub const MAX_RING_AFTER_MS: u64 = lsm::POLLER_IDLE_PARK.as_millis() as u64;

/// The doorbells of groups run on `ls-net` that have not been rung. A group is acknowledged
/// once it is in the memtable and the engine's landing buffer (plp), so when its pages go to
/// the device changes no reply: ringing for several groups at once costs one submission and
/// one wake-up of the device poller where each group would cost its own (at one client, the
/// submission and the poller were half of the drive's CPU per SET). Ringing also seals the
/// engine's shared open page, so the groups held write as few pages as their records fill
/// (YCSB A: 32 groups instead of 8 took the drive's CPU per SET at one connection from 35 to
/// 27.5 CPU-s per million). The bounds, checked after every group, keep the pages held back
/// inside the pipeline's 192: 31 groups under [`RING_BYTES`] together write at most 35 pages,
/// and the group that makes the ring due at most 33 (256 KiB), 68 in all (the engine admits
/// no group past the pipeline: such a group goes to the writer, after a ring). A waiter for the pipeline (maintenance, SIGPWR's sync)
/// is handed the pages by the poller's own wait within 20 ms at worst, by this within
/// the time bound and a poll's rounding.
pub(super) struct HeldRings {
    bells: Vec<lsm::Doorbell>,
    bytes: usize,
    since: Option<Instant>,
    /// The time bound ([`DEFAULT_RING_AFTER`] unless configured).
    after: Duration,
}

impl HeldRings {
    /// Nothing held; held doorbells ring at the latest `after` after the oldest was held.
    pub(super) fn new(after: Duration) -> HeldRings {
        HeldRings {
            bells: Vec::new(),
            bytes: 0,
            since: None,
            after,
        }
    }

    /// Holds a group's doorbell (its request bytes count toward [`RING_BYTES`]).
    fn hold(&mut self, bell: lsm::Doorbell, bytes: usize, now: Instant) {
        self.bells.push(bell);
        self.bytes += bytes;
        self.since.get_or_insert(now);
    }

    /// Rings the held doorbells if they are due: [`RING_GROUPS`] or [`RING_BYTES`] held, or
    /// the oldest held for the time bound.
    pub(super) fn ring_if_due(&mut self, now: Instant) {
        let due = self.bells.len() >= RING_GROUPS
            || self.bytes >= RING_BYTES
            || self
                .since
                .is_some_and(|t| now.saturating_duration_since(t) >= self.after);
        if due {
            self.ring();
        }
    }

    /// Rings every held doorbell (dropping one rings it).
    pub(super) fn ring(&mut self) {
        self.bells.clear();
        self.bytes = 0;
        self.since = None;
    }

    /// When the held doorbells are due at the latest (the loop's poll waits no longer).
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.since.map(|t| t + self.after)
    }
}

/// Groups one call of `settle_inline_batch` runs at most (the writes the last one's replies
/// let gather wait for the next turn, which then polls without waiting), so a client
/// streaming a long pipeline does not keep the loop from other connections, the workers'
/// replies and the housekeeping.
const SETTLE_ROUNDS: usize = 4;

/// The writes gathered since the last group ran on `ls-net`.
pub(super) struct InlineBatch {
    /// plp, and not ablated (`--ablate inline-writes`).
    enabled: bool,
    /// The writes, in the order they were taken.
    writes: Vec<InlineWrite>,
    /// Their request bytes: a batch is capped as the writer caps its groups.
    bytes: usize,
    /// Connections whose next command waits for the batch to be settled (it was full, or
    /// the command is CLIENT PAUSE): served again once it is.
    waiters: Vec<u64>,
}

/// What connection `c`'s next command does about the batch ([`InlineBatch::admits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// It joins the batch.
    Join,
    /// It waits until the batch is settled (then runs, or joins the next one).
    Wait,
    /// It runs as it would without the batch.
    Pass,
}

impl InlineBatch {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            writes: Vec::new(),
            bytes: 0,
            waiters: Vec::new(),
        }
    }

    /// Whether writes wait to be run (the loop then polls without waiting).
    pub(super) fn pending(&self) -> bool {
        !self.writes.is_empty()
    }

    /// Notes that connection `id` waits for the batch to be settled.
    pub(super) fn wait(&mut self, id: u64) {
        if self.waiters.last() != Some(&id) {
            self.waiters.push(id);
        }
    }

    /// Whether connection `c`'s next command `cmd` (routed to `to_writer` or not) joins the
    /// batch: a write that may run on `ls-net` ([`exec::writes_inline`]), from a connection
    /// with nothing in flight or only writes in this batch, while no slot is being handed
    /// over (cluster: those writes get the writer's second look); it waits while the batch
    /// is full. CLIENT PAUSE waits for a batch to be settled: the writes gathered before it
    /// run before its reply, as Redis ran them.
    pub(super) fn admits(
        &self,
        c: &Conn,
        cmd: &Command,
        to_writer: bool,
        store: &Store,
    ) -> Admission {
        if matches!(cmd, Command::ClientPause { .. }) && self.pending() {
            return Admission::Wait;
        }
        let eligible = to_writer
            && self.enabled
            && (c.in_flight == 0 || c.in_batch)
            && c.stalled.is_none()
            && exec::writes_inline(cmd)
            && !store.migrations.any();
        if !eligible {
            Admission::Pass
        } else if self.writes.len() < exec::MAX_BATCH && self.bytes < exec::GROUP_BYTES {
            Admission::Join
        } else {
            Admission::Wait
        }
    }
}

impl Net {
    /// Takes connection `id`'s write into the batch: counted in flight (to the writer, where
    /// it goes if the batch cannot run here) with the next sequence number.
    pub(super) fn join_inline_batch(
        &mut self,
        id: u64,
        cmd: Command,
        cost: usize,
        row: Option<usize>,
        args: Vec<Bytes>,
    ) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let seq = c.next_seq;
        c.next_seq += 1;
        c.in_batch = true;
        c.hand_off(
            Route::Writer,
            cost,
            InFlight {
                row,
                started: self.now,
                args,
            },
        );
        self.inline.bytes += cost;
        self.inline.writes.push(InlineWrite {
            conn: id,
            seq,
            proto: c.proto,
            cmd,
        });
    }

    /// Runs the gathered writes as one group here, or passes them to the writer; then lets
    /// their connections, and those that waited for the batch, go on (which may gather a new
    /// batch: repeated up to [`SETTLE_ROUNDS`] times, the rest left to the next turn).
    pub(super) fn settle_inline_batch(&mut self) {
        for _ in 0..SETTLE_ROUNDS {
            if !self.inline.pending() {
                break;
            }
            let writes = std::mem::take(&mut self.inline.writes);
            let bytes = std::mem::take(&mut self.inline.bytes);
            let mut conns: Vec<u64> = writes.iter().map(|w| w.conn).collect();
            conns.sort_unstable();
            conns.dedup();
            for id in &conns {
                if let Some(c) = self.conns.get_mut(id) {
                    c.in_batch = false;
                }
            }
            match exec::try_write_batch_now(&self.store, &self.metrics, &writes) {
                Some((done, doorbell)) => {
                    self.metrics
                        .writes_run_inline
                        .fetch_add(writes.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    self.now = Instant::now();
                    // Rung once the replies are written, with other groups' (`HeldRings`).
                    if let Some(bell) = doorbell {
                        self.rings.hold(bell, bytes, self.now);
                    }
                    let mut touched = Vec::new();
                    for d in done {
                        self.deliver(d, &mut touched);
                    }
                    touched.sort_unstable();
                    touched.dedup();
                    for id in touched {
                        self.run_backlog(id);
                        self.resume(id);
                    }
                    self.rings.ring_if_due(Instant::now());
                }
                None => {
                    // The engine may have refused for want of pipeline room: the pages held
                    // back go now, or the writer would wait for them.
                    self.rings.ring();
                    for w in writes {
                        self.pass_to_writer(w);
                    }
                    // Their later commands may follow them to the writer.
                    for id in conns {
                        self.run_backlog(id);
                    }
                }
            }
            for id in std::mem::take(&mut self.inline.waiters) {
                self.run_backlog(id);
                self.resume(id);
            }
        }
    }

    /// At shutdown: the writes still gathered go to the writer, which runs its queue before
    /// the engine closes.
    pub(super) fn pass_inline_batch_on(&mut self) {
        for w in std::mem::take(&mut self.inline.writes) {
            self.pass_to_writer(w);
        }
    }

    /// Sends a gathered write to the writer's queue, behind the connection's stalled jobs if
    /// it has any (its order is kept: nothing of it ran since the write was taken).
    fn pass_to_writer(&mut self, w: InlineWrite) {
        let job = Job {
            conn: w.conn,
            proto: w.proto,
            cmd: w.cmd,
            seq: w.seq,
            tx: None,
            block: None,
        };
        if let Some(c) = self.conns.get_mut(&w.conn) {
            if let Some((route, jobs)) = c.stalled.as_mut() {
                // Only jobs of the batch stall behind one another here: a connection with
                // a stalled job joins no batch.
                debug_assert_eq!(*route, Route::Writer);
                jobs.push_back(job);
                return;
            }
        }
        match self.writer_tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => {
                if let Some(c) = self.conns.get_mut(&w.conn) {
                    c.stalled = Some((Route::Writer, VecDeque::from([job])));
                    self.stall(w.conn);
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                // Workers gone: the drive is shutting down (the last of the connection's
                // commands in flight is this one: later ones of its are not sent yet).
                if let Some(c) = self.conns.get_mut(&w.conn) {
                    c.in_flight = c.in_flight.saturating_sub(1);
                    c.inflight_meta.pop_back();
                    if let Some(cost) = c.inflight_costs.pop_back() {
                        c.pending_bytes = c.pending_bytes.saturating_sub(cost);
                    }
                    c.closing = true;
                }
            }
        }
    }
}
