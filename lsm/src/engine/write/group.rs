//! Group commit across callers of [`Engine::write`]: a batch that arrives while another
//! caller holds the write lock waits in a queue, and the next holder lays it out and submits
//! it together with its own batch, as one batch (RocksDB's write groups, without a designated
//! leader: whoever holds the lock leads).
//!
//! Why: a caller's batch otherwise shares pages only within itself. Its small records close a
//! packed page of their own, a raw value brings a packed page for its header record, and each
//! batch is its own device submission and, in durable mode, waits for a flush of its own
//! unless it happens to overlap another. Four threads writing batches of eight 8 KiB values
//! wrote nine pages per batch; written together they write 33 pages for 32 values.
//!
//! The protocol, and why it is safe:
//! - A caller first tries the write lock. Free: it leads at once with its own batch
//!   (borrowed, no copy), taking along whatever is queued.
//! - Busy: it copies its batch into a [`Joiner`] (one byte arena: the holder cannot borrow
//!   from another thread's stack) and queues it. Joiners are taken only by a thread holding
//!   the write lock, so once this caller holds it, nobody else can be taking its batch:
//!   either a holder took it before (the caller releases the lock and waits for the shared
//!   outcome) or nobody did (it takes itself out of the queue and leads with its own batch).
//!   A batch is written exactly once.
//! - *Waiting in the queue.* A queued caller does not block on the write lock: it sleeps on
//!   its own joiner until a holder answers it (taken along), a leaving holder hands it the
//!   lead ([`Joiners::hand_on`], the oldest queued caller), or [`QUEUED_WAIT`] passes; only
//!   then does it take the lock. Why: blocked on the lock, every caller taken along had to
//!   get the lock once more after its group (only to find it taken: two sleeps and wake-ups
//!   per member instead of one, and each a turn of the lock against the next leader), and the
//!   lock's spinning waiters yield the CPU in a loop, which on a two-core virtual machine is
//!   a context switch each. Why no caller waits for ever: a holder that leads hands the lead
//!   on after it let go of the lock, and a caller queues before it looks at the lock (it
//!   leads at once if the lock is free then), so a lock held when it looked has a release to
//!   come that either hands on or, when its holder does not lead (maintenance, `sync`, the
//!   drive's writer), is found by the patience bound.
//! - The group is one batch: one ticket, consecutive sequence numbers in queue order (the
//!   holder's own batch first), atomic as a whole, so each member is atomic and members
//!   are ordered as if written one after another. Each member is validated alone first: an
//!   invalid batch (an empty key, a value too large) is refused alone and not merged.
//! - Members are taken only while the group stays a pipelined batch (its page bound at most
//!   `PIPELINE_MAX_BATCH_PAGES`), so joining never turns a batch into one written alone;
//!   those left queued are led by their own callers, who wait on the lock.
//! - Every member gets the group's outcome (errors are `Clone`). A holder that unwinds
//!   before answering hands its members `Closed` instead of leaving them waiting
//!   ([`Taken`]'s drop).
//!
//! - Only where each member would be admitted as it is alone: not near full (see
//!   `take_joiners`), and never deletes with puts.
//!
//! [`Engine::try_submit_write`] does not join (its caller, the drive's writer thread,
//! gathers its own groups), except through its fallback to [`Engine::write`] when nothing
//! is in flight. Write stalls are counted once per group (`EngineStats::write_stalls`), not
//! per member.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::super::*;
use super::{Prepared, RawValues, PIPELINE_MAX_BATCH_PAGES};

/// Most operations one group takes along from the queue (its holder's batch not counted):
/// bounds what one holder lays out under the lock.
const MAX_JOINED_OPS: usize = 4096;

/// Key and value bytes past which a batch cannot be taken along (its pages alone would pass
/// `PIPELINE_MAX_BATCH_PAGES`), so its caller waits for the lock without copying it.
const JOINABLE_BYTES: usize = PIPELINE_MAX_BATCH_PAGES as usize * PAGE_SIZE;

fn batch_bytes(ops: &[WriteOp<'_>]) -> usize {
    ops.iter()
        .map(|op| match *op {
            WriteOp::Put(k, v) | WriteOp::PutUntil(k, v, _) => k.len() + v.len(),
            WriteOp::Delete(k) | WriteOp::Retime(k, _) => k.len(),
        })
        .sum()
}

/// Batches waiting for a write-lock holder to take them along.
pub(in crate::engine) struct Joiners {
    queue: Mutex<VecDeque<Arc<Joiner>>>,
    /// Holders waiting for room in the write pipeline (`Admission::PipelineFull`), the write
    /// lock released meanwhile. While there is one, arriving callers queue instead of taking
    /// the free lock to lead a batch of their own: see [`Joiners::room_wait`].
    room_waiters: AtomicUsize,
    /// [`CROWDED_WAIT`] in microseconds (a test may lengthen it).
    crowded_wait_us: AtomicU64,
    /// Batches written in another caller's group ([`EngineStats::joined_batches`]).
    joined: AtomicU64,
}

impl Default for Joiners {
    fn default() -> Self {
        Joiners {
            queue: Mutex::default(),
            room_waiters: AtomicUsize::new(0),
            crowded_wait_us: AtomicU64::new(CROWDED_WAIT.as_micros() as u64),
            joined: AtomicU64::new(0),
        }
    }
}

/// Longest a caller queued behind a holder waiting for pipeline room waits to be taken along
/// or handed the lead before it takes the write lock itself (a safety net: a holder hands
/// the lead on as it leaves).
const CROWDED_WAIT: Duration = Duration::from_millis(2);

/// Longest a caller queued behind a busy write lock waits to be taken along or handed the
/// lead before it blocks on the lock itself: a safety net for a lock held by someone who
/// does not hand the lead on as it leaves (the maintenance thread, `sync`, the drive's
/// writer), whose release the queued caller would otherwise only see when the next caller
/// arrives.
const QUEUED_WAIT: Duration = Duration::from_micros(500);

impl Joiners {
    /// Runs `wait` (a wait for room in the pipeline, the write lock released inside) counted
    /// in `room_waiters`.
    ///
    /// Why: once the pipeline is full, every writer waits for room. A writer that then found
    /// the lock free (the waiting holder released it) led a batch of its own, so batches
    /// never met in a group: four threads writing eight 8 KiB values each wrote nine pages
    /// per batch (a packed page for the eight headers), write amplification 1.125 at the
    /// device's pace. Queued instead, they are taken along by the holder that waits, or led
    /// together by the first of them (see [`Joiners::hand_on`]).
    pub(in crate::engine) fn room_wait(&self, wait: impl FnOnce()) {
        self.room_waiters.fetch_add(1, Ordering::SeqCst);
        wait();
        self.room_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Batches written in another caller's group so far.
    pub(in crate::engine) fn joined(&self) -> u64 {
        self.joined.load(Ordering::Relaxed)
    }

    /// Whether a holder waits for pipeline room.
    fn crowded(&self) -> bool {
        self.room_waiters.load(Ordering::SeqCst) > 0
    }

    /// Hands the lead to the oldest queued caller (called by a holder that has started its
    /// batch and let go of the write lock): it takes the lock and leads the queue's batches
    /// as one group, unless a holder takes it along first.
    pub(in crate::engine) fn hand_on(&self) {
        let first = self.queue.lock().front().cloned();
        if let Some(j) = first {
            // Under the joiner's state lock, which its wait holds from its look at the flag
            // until it sleeps: the notification cannot fall between the two.
            let s = j.state.lock();
            if matches!(*s, JoinState::Queued) {
                j.lead_offered.store(true, Ordering::SeqCst);
                j.answered.notify_one();
            }
        }
    }
}

/// One caller's batch, copied so that another thread can write it.
struct Joiner {
    batch: OwnedBatch,
    /// Its raw values' pages, made before it queued (taken by whoever writes it).
    raws: Mutex<RawValues>,
    state: Mutex<JoinState>,
    answered: Condvar,
    /// A holder leaving handed this caller the lead ([`Joiners::hand_on`]).
    lead_offered: AtomicBool,
}

enum JoinState {
    /// In the queue.
    Queued,
    /// A holder took it into its group (or its own caller took it back to lead).
    Taken,
    /// The group's outcome.
    Done(Result<()>),
}

/// A batch's keys and values in one arena, with its operations as ranges into it.
struct OwnedBatch {
    bytes: Vec<u8>,
    ops: Vec<OwnedOp>,
}

enum OwnedOp {
    Put(Range<usize>, Range<usize>),
    Delete(Range<usize>),
    Retime(Range<usize>, Deadline),
}

impl OwnedBatch {
    /// Copies an expanded batch (no `PutUntil`: [`WriteOp::expand`] split them).
    fn copy(ops: &[WriteOp<'_>]) -> OwnedBatch {
        let mut bytes = Vec::with_capacity(batch_bytes(ops));
        let mut push = |b: &[u8]| {
            let start = bytes.len();
            bytes.extend_from_slice(b);
            start..bytes.len()
        };
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            match *op {
                WriteOp::Put(k, v) => out.push(OwnedOp::Put(push(k), push(v))),
                WriteOp::PutUntil(k, v, d) => {
                    // Not after `expand`; kept whole should a caller pass one anyway.
                    let (k, v) = (push(k), push(v));
                    out.push(OwnedOp::Put(k.clone(), v));
                    out.push(OwnedOp::Retime(k, Some(d)));
                }
                WriteOp::Delete(k) => out.push(OwnedOp::Delete(push(k))),
                WriteOp::Retime(k, d) => out.push(OwnedOp::Retime(push(k), d)),
            }
        }
        OwnedBatch { bytes, ops: out }
    }

    fn ops(&self) -> impl Iterator<Item = WriteOp<'_>> {
        self.ops.iter().map(|op| match op {
            OwnedOp::Put(k, v) => WriteOp::Put(&self.bytes[k.clone()], &self.bytes[v.clone()]),
            OwnedOp::Delete(k) => WriteOp::Delete(&self.bytes[k.clone()]),
            OwnedOp::Retime(k, d) => WriteOp::Retime(&self.bytes[k.clone()], *d),
        })
    }
}

impl Joiner {
    fn answer(&self, outcome: Result<()>) {
        *self.state.lock() = JoinState::Done(outcome);
        self.answered.notify_one();
    }

    /// Waits while queued (behind a busy write lock, or a holder that waits for pipeline
    /// room): the group's outcome once a holder took the batch along, or `None` (still
    /// queued) once the lead was handed to this caller or `patience` ran out.
    fn wait_queued(&self, patience: Duration) -> Option<Result<()>> {
        let deadline = Instant::now() + patience;
        let mut s = self.state.lock();
        loop {
            match std::mem::replace(&mut *s, JoinState::Taken) {
                JoinState::Done(r) => return Some(r),
                // Taken along by a holder (only this caller takes itself back, and it is
                // here): its outcome comes.
                JoinState::Taken => {
                    self.answered.wait(&mut s);
                }
                JoinState::Queued => {
                    *s = JoinState::Queued;
                    if self.lead_offered.load(Ordering::SeqCst) || Instant::now() >= deadline {
                        return None;
                    }
                    self.answered.wait_until(&mut s, deadline);
                }
            }
        }
    }

    fn wait(&self) -> Result<()> {
        let mut s = self.state.lock();
        loop {
            match std::mem::replace(&mut *s, JoinState::Taken) {
                JoinState::Done(r) => return r,
                waiting => *s = waiting,
            }
            self.answered.wait(&mut s);
        }
    }
}

/// The members a holder took into its group: answered together; dropped unanswered (the
/// holder unwound), they learn `Closed`.
struct Taken(Vec<Arc<Joiner>>);

impl Taken {
    fn answer(mut self, outcome: &Result<()>) {
        for j in self.0.drain(..) {
            j.answer(outcome.clone());
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        for j in self.0.drain(..) {
            j.answer(Err(EngineError::Closed));
        }
    }
}

impl Engine {
    /// Applies a batch atomically and durably: after a power cut either all of it is there
    /// or none. Batches from callers that arrive while another's is being laid out are
    /// written together with it (group commit, see the module docs).
    ///
    /// The batch never runs maintenance: when a watermark is reached (see
    /// the engine's `maintain` module) it waits for the maintenance thread (a write stall,
    /// counted in [`EngineStats::write_stalls`]).
    ///
    /// # Errors
    /// As [`Engine::put`]; `CapacityFull` at the user capacity; `MaintenanceFailed` when
    /// the maintenance it waited for failed; `ReadOnly` on a read-only engine
    /// ([`EngineConfig::read_only_recovery`]). Nothing of a failed batch is applied; a
    /// batch written with others fails with them (the group is one batch).
    pub fn write(&self, ops: &[WriteOp<'_>]) -> Result<()> {
        let ops = &*WriteOp::expand(ops);
        // Made before the lock, whoever then writes the batch (`raw_values`).
        let raws = RawValues::prepare(ops, &self.side.g);
        // While a holder waits for pipeline room, a free lock does not make this caller a
        // leader: it queues, to be written in a group (see `Joiners::room_wait`).
        let crowded = self.core.joiners.crowded();
        if !crowded {
            if let Some(g) = self.core.inner.try_lock() {
                return self.lead(g, ops, raws);
            }
        }
        if batch_bytes(ops) > JOINABLE_BYTES {
            // Too large to be taken along: not worth the copy.
            let g = self.core.inner.lock();
            return self.lead(g, ops, raws);
        }
        let me = Arc::new(Joiner {
            batch: OwnedBatch::copy(ops),
            // The copy holds the same values in the same order.
            raws: Mutex::new(raws),
            state: Mutex::new(JoinState::Queued),
            answered: Condvar::new(),
            lead_offered: AtomicBool::new(false),
        });
        self.core.joiners.queue.lock().push_back(me.clone());
        // Queued: wait to be taken along or handed the lead, not on the write lock (see
        // "Waiting in the queue" in the module docs). A lock that is free now has no holder
        // that would hand on to this caller: lead at once.
        let free = if crowded {
            None
        } else {
            self.core.inner.try_lock()
        };
        let g = match free {
            Some(g) => g,
            None => {
                let patience = if crowded {
                    Duration::from_micros(self.core.joiners.crowded_wait_us.load(Ordering::Relaxed))
                } else {
                    QUEUED_WAIT
                };
                if let Some(outcome) = me.wait_queued(patience) {
                    return outcome;
                }
                self.core.inner.lock()
            }
        };
        // Only a write-lock holder takes joiners, so this look cannot race with one.
        let mine = {
            let mut s = me.state.lock();
            if matches!(*s, JoinState::Queued) {
                *s = JoinState::Taken;
                true
            } else {
                false
            }
        };
        if mine {
            self.core
                .joiners
                .queue
                .lock()
                .retain(|j| !Arc::ptr_eq(j, &me));
            let raws = std::mem::take(&mut *me.raws.lock());
            return self.lead(g, ops, raws);
        }
        drop(g);
        me.wait()
    }

    /// Writes `own` with the queued batches that fit, as one batch, and answers their
    /// callers with its outcome. However it ends, it then hands the lead to the oldest caller
    /// still queued ([`Joiners::hand_on`]).
    fn lead(&self, g: MutexGuard<'_, Inner>, own: &[WriteOp<'_>], raws: RawValues) -> Result<()> {
        let r = self.lead_group(g, own, raws);
        self.core.joiners.hand_on();
        r
    }

    /// `raws`: the raw values prepared from `own` ([`RawValues::prepare`]).
    fn lead_group(
        &self,
        mut g: MutexGuard<'_, Inner>,
        own: &[WriteOp<'_>],
        mut raws: RawValues,
    ) -> Result<()> {
        // Refused: queued batches stay for their own callers, who meet the same refusal.
        g.check_writable()?;
        if own.is_empty() {
            return Ok(());
        }
        let shape = g.shape(own)?;
        let taken = self.take_joiners(&mut g, &shape);
        let geometry = self.side.g;
        if taken.0.is_empty() {
            let prepared = Prepared::pair(own, raws, &geometry);
            return self.write_locked(g, own, shape, prepared);
        }
        let mut ops: Vec<WriteOp<'_>> = own.to_vec();
        for j in &taken.0 {
            ops.extend(j.batch.ops());
            // In the group's order: the members' values follow this caller's.
            raws.append(std::mem::take(&mut *j.raws.lock()));
        }
        let joined = taken.0.len() as u64;
        let prepared = Prepared::pair(&ops, raws, &geometry);
        let r = g
            .shape(&ops)
            .and_then(|shape| self.write_locked(g, &ops, shape, prepared));
        taken.answer(&r);
        if r.is_ok() {
            // Counted beside the write lock, not under it: one more hold per group only to
            // count it made the lock's queue longer.
            self.core
                .joiners
                .joined
                .fetch_add(joined, Ordering::Relaxed);
        }
        r
    }

    /// Takes queued batches into the group of `own` (its shape) while the group stays a
    /// pipelined batch; a queued batch that fails validation is answered at once.
    ///
    /// Only where the group is admitted as each member would be: never near full (free
    /// segments at the garbage-collection low-water mark, or the members' puts together past
    /// the user capacity), where a batch's own size and kind decide whether it may use the
    /// reserve or is refused, and never a batch of deletes with one of puts (deletes may use
    /// the reserve, puts may not). A batch left out keeps its place in the queue.
    fn take_joiners(&self, g: &mut Inner, own: &super::BatchShape) -> Taken {
        let mut taken = Taken(Vec::new());
        if own.spanning > 0
            || own.bound > PIPELINE_MAX_BATCH_PAGES
            || g.free.len() <= g.gc_low_water()
        {
            return taken;
        }
        let puts = own.put_bytes > 0;
        let mut q = self.core.joiners.queue.lock();
        let (mut bound, mut put_bytes, mut n) = (own.bound, own.put_bytes, 0usize);
        let mut left = VecDeque::new();
        while let Some(j) = q.pop_front() {
            let ops: Vec<WriteOp<'_>> = j.batch.ops().collect();
            let shape = match g.shape(&ops) {
                Ok(s) => s,
                Err(e) => {
                    *j.state.lock() = JoinState::Taken;
                    j.answer(Err(e));
                    continue;
                }
            };
            let fits = shape.spanning == 0
                && (shape.put_bytes > 0) == puts
                && bound + shape.bound <= PIPELINE_MAX_BATCH_PAGES
                && n + ops.len() <= MAX_JOINED_OPS
                && g.fits_user_capacity(put_bytes + shape.put_bytes);
            drop(ops);
            if !fits {
                // Left for its own caller, in its place.
                left.push_back(j);
                continue;
            }
            bound += shape.bound;
            put_bytes += shape.put_bytes;
            n += j.batch.ops.len();
            *j.state.lock() = JoinState::Taken;
            taken.0.push(j);
        }
        *q = left;
        taken
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn engine() -> Engine {
        super::super::tests::ram_engine(EngineConfig::default())
    }

    /// Writer `w`'s eight keys (`w{w}-{i}`) and their values.
    fn writer_batch(w: usize, value: impl Fn(usize) -> Vec<u8>) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let keys = (0..8).map(|i| format!("w{w}-{i}").into_bytes()).collect();
        (keys, (0..8).map(value).collect())
    }

    /// A put of each key with its value.
    fn puts<'a>(keys: &'a [Vec<u8>], values: &'a [Vec<u8>]) -> Vec<WriteOp<'a>> {
        keys.iter()
            .zip(values)
            .map(|(k, v)| WriteOp::Put(k, v))
            .collect()
    }

    /// Writers that find the write lock held queue their batches, and the next holder
    /// writes them with its own as one batch: four batches of eight 8 KiB values, each with
    /// a packed page of its own when written alone (nine pages), take 4 x 8 raw pages and
    /// one packed page together. Every value reads back, an invalid batch among them is
    /// refused alone, and a key every batch writes holds one whole value.
    #[test]
    fn batches_queued_behind_the_lock_are_written_as_one() {
        let db = engine();
        let value = |w: usize, i: usize| vec![(w * 16 + i) as u8; 8192];
        // A first write opens the log (its manifest write is not the group's).
        db.put(b"warm", b"up").unwrap();
        let before = db.stats();
        let writers = 4;
        std::thread::scope(|s| {
            let held = db.core.inner.lock();
            let mut handles = Vec::new();
            for w in 0..writers {
                let db = &db;
                handles.push(s.spawn(move || {
                    let (keys, values) = writer_batch(w, |i| value(w, i));
                    let mut ops = puts(&keys, &values);
                    // Every writer also writes the shared key; the last in the group wins.
                    let shared = vec![w as u8; 100];
                    ops.push(WriteOp::Put(b"shared", &shared));
                    db.write(&ops)
                }));
            }
            let bad = s.spawn(|| {
                // Queued too, but empty keys are refused: alone, not failing the group.
                db.write(&[WriteOp::Put(b"", b"x")])
            });
            // Wait until every writer is queued behind the held lock.
            while db.core.joiners.queue.lock().len() < writers + 1 {
                std::thread::yield_now();
            }
            drop(held);
            for h in handles {
                h.join().unwrap().unwrap();
            }
            assert!(matches!(bad.join().unwrap(), Err(EngineError::EmptyKey)));
        });
        let after = db.stats();
        // One caller led (its own batch taken back from the queue), the others joined it.
        assert_eq!(
            after.joined_batches - before.joined_batches,
            writers as u64 - 1
        );
        let pages = (after.device_bytes_written - before.device_bytes_written) / PAGE_SIZE as u64;
        assert_eq!(
            pages,
            writers as u64 * 8 + 1,
            "one packed page for the whole group"
        );
        for w in 0..writers {
            for i in 0..8 {
                let got = db.get(format!("w{w}-{i}").as_bytes()).unwrap();
                assert_eq!(got.as_deref(), Some(&value(w, i)[..]));
            }
        }
        // The shared key holds one writer's value whole (whichever was last in the group).
        let shared = db.get(b"shared").unwrap().unwrap();
        assert_eq!(shared.len(), 100);
        assert!(
            (shared[0] as usize) < writers && shared.iter().all(|&b| b == shared[0]),
            "{shared:?}"
        );
    }

    /// While a holder waits for room in the write pipeline (the write lock free meanwhile),
    /// arriving writers queue instead of leading batches of their own, and the first of them
    /// leads them all as one group once the holder hands the lead on: four batches of eight
    /// 8 KiB values, one packed page for all their headers.
    #[test]
    fn writers_arriving_during_a_room_wait_are_written_as_one_group() {
        let db = engine();
        // Long enough that only the hand-on, never the safety net, can start the group.
        db.core
            .joiners
            .crowded_wait_us
            .store(60_000_000, Ordering::Relaxed);
        db.put(b"warm", b"up").unwrap();
        let before = db.stats();
        let writers = 4;
        let (release, released) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let core = &db.core;
            let holder = s.spawn(move || core.joiners.room_wait(|| released.recv().unwrap()));
            while !db.core.joiners.crowded() {
                std::thread::yield_now();
            }
            let mut handles = Vec::new();
            for w in 0..writers {
                let db = &db;
                handles.push(s.spawn(move || {
                    let (keys, values) = writer_batch(w, |i| vec![w as u8; 8192 - i]);
                    db.write(&puts(&keys, &values))
                }));
            }
            while db.core.joiners.queue.lock().len() < writers {
                std::thread::yield_now();
            }
            // All queued though the lock is free.
            assert!(db.core.inner.try_lock().is_some());
            release.send(()).unwrap();
            holder.join().unwrap();
            // The holder, having written its batch, hands the lead on.
            db.core.joiners.hand_on();
            for h in handles {
                h.join().unwrap().unwrap();
            }
        });
        let after = db.stats();
        assert_eq!(
            after.joined_batches - before.joined_batches,
            writers as u64 - 1
        );
        let pages = (after.device_bytes_written - before.device_bytes_written) / PAGE_SIZE as u64;
        assert_eq!(pages, writers as u64 * 8 + 1);
        for w in 0..writers {
            for i in 0..8 {
                let got = db.get(format!("w{w}-{i}").as_bytes()).unwrap().unwrap();
                assert_eq!(got, vec![w as u8; 8192 - i]);
            }
        }
    }

    /// A batch of deletes is never written with a batch of puts (deletes may use the
    /// reserved segments, puts may not): queued together behind the lock, each is written
    /// alone.
    #[test]
    fn deletes_do_not_join_puts() {
        let db = engine();
        db.put(b"gone", b"soon").unwrap();
        let before = db.stats().joined_batches;
        std::thread::scope(|s| {
            let held = db.core.inner.lock();
            let put = s.spawn(|| db.write(&[WriteOp::Put(b"kept", b"value")]));
            let del = s.spawn(|| db.write(&[WriteOp::Delete(b"gone")]));
            while db.core.joiners.queue.lock().len() < 2 {
                std::thread::yield_now();
            }
            drop(held);
            put.join().unwrap().unwrap();
            del.join().unwrap().unwrap();
        });
        assert_eq!(db.stats().joined_batches, before);
        assert_eq!(db.get(b"kept").unwrap().as_deref(), Some(&b"value"[..]));
        assert_eq!(db.get(b"gone").unwrap(), None);
    }
}
