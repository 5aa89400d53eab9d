//! The engine thread and the writer thread: each drains its lock-free queue in batches and
//! answers through the reply queue. The reading side (the engine thread's loop, the reads
//! `ls-net` answers from DRAM, reads inside a transaction) is in `read`; the writes `ls-net`
//! runs itself in plp mode in `inline_write`; the writer's groups in flight in `groups`.
//!
//! - **engine** (`ls-engine`): reads, none of which waits for the device here. The GETs and
//!   MGETs of a drained batch become one asynchronous multi-get; every other command that
//!   reads values (HGET, HMGET, HGETALL, HLEN, ZCARD, ZSCORE, GETRANGE, LS.RANGE) becomes
//!   one asynchronous lookup of its key (type and records as of one instant). The engine
//!   thread resolves the keys from DRAM and submits the page reads (those the value cache
//!   does not hold), and the engine's poller thread sends the replies when the pages are in,
//!   so many clients' commands are on the device at once, up to the engine's read window.
//!   Commands answered from DRAM alone (STRLEN, EXISTS, HEXISTS, ZRANGEBYSCORE, SCAN,
//!   DBSIZE, INFO) run here. Replies may thus leave out of order; each carries its
//!   request's sequence number and the network thread restores each connection's order.
//! - **writer** (`ls-writer`): every command that writes, and EXEC (`run_transaction`: the
//!   queued commands applied in order to one group, reads against its overlay). A drained
//!   batch is applied to one [`WriteGroup`] and started as one atomic engine batch (group commit) without waiting:
//!   up to two groups are on the device while the next is gathered, and each group's
//!   replies go out once it is durable and applied, in order. A command touching a key of
//!   a group still in flight waits for it (unless both are plain SETs), because groups are
//!   built from the engine's applied state. Between batches it removes expired keys.
//!   A blocking pop (BLPOP and the like) that finds nothing is parked in the table of
//!   [`crate::blocking`] and served, in the same group, right after the command that
//!   fills its key.
//!   Memtable flushes, compactions and GC never run here: they run on the engine's own
//!   `lsm-maint` thread, and a write that reaches one of the engine's watermarks waits
//!   for it (a write stall, counted in INFO).

use std::collections::VecDeque;

use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::queue::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use bytes::Bytes;
use kvproto::command::Collection;
use kvproto::{Command, Protocol, Reply, ScoreBound, SetCondition};

use crate::blocking::{BlockHandle, BlockHandles, Blocked};
use crate::info::{self, Metrics};
use crate::keyspace::{self as ks, HASH, HASH_FIELD, LIST, SET, STRING, ZSET, ZSET_MEMBER};
use crate::store::view::View as _;
use crate::store::{
    self, now_ms, Here, KeyFound, KeyRead, SetOptions, Store, StoreError, WriteGroup,
};

/// Most jobs taken off a queue per batch.
mod groups;
mod inline_write;
mod read;
pub use inline_write::{try_write_batch_now, writes_inline, InlineWrite};
pub use read::{
    engine_loop, read_here, start_get_batch, GetBatch, GetBatchStart, GetBatching, ReadHere,
};
use read::{read_in_group, read_one};

use groups::{
    note_keys, note_written, purge_noting, touch_group_keys, GroupKeys, GroupReplies,
    InFlightGroups, KeyChange,
};

/// Commands the writer takes into one group at most (the network thread's groups too).
pub const MAX_BATCH: usize = 512;
/// A write group is started once it holds this many bytes (small enough that several fit
/// in the engine's write pipeline at once).
pub const GROUP_BYTES: usize = 256 << 10;
/// Write groups the writer keeps unanswered at once (started on the device, or in plp mode
/// applied and awaiting their replies) before it finishes the oldest. Two, not four: while
/// the writer waits for the oldest, requests gather into a larger next group, so fewer
/// groups share the device's flushes. `redis-benchmark`, 2026-11-28, one binary with the
/// limit from the environment, 4 -> 2: durable SET 8 KiB at 50 connections 20-21K ->
/// 35-36K/s (device flushes halved), SET 8 KiB pipelined 16 41K -> 49K/s, 100 B 0.98-1.06x;
/// plp 1.00-1.05x.
const MAX_GROUPS_IN_FLIGHT: usize = 2;
/// How often the writer looks for expired keys (when idle, and between groups under load).
const EXPIRY_SWEEP: Duration = Duration::from_millis(100);
/// Expired keys removed per sweep.
const EXPIRY_SWEEP_KEYS: usize = 1024;
/// While clients are blocked, the writer looks at least this often for waits their clients
/// ended (a closed connection, CLIENT UNBLOCK), so those are answered within this time.
const BLOCKED_POLL: Duration = Duration::from_millis(5);
/// How long the engine thread waits at shutdown for reads still on the device.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// One command queued inside MULTI.
#[derive(Debug)]
pub enum TxItem {
    /// Runs at EXEC (on the writer thread, against the transaction's group).
    Run(Command),
    /// Answered as it was queued: a request that failed to parse (Redis reports those inside
    /// EXEC's reply), or a connection command whose answer cannot change.
    Answer(Reply),
}

/// A transaction handed to the writer thread by EXEC.
#[derive(Debug, Default)]
pub struct Transaction {
    /// The queued commands, in order.
    pub items: Vec<TxItem>,
    /// The connection's WATCHed keys (released by the writer once checked).
    pub watched: Vec<store::WatchedKey>,
}

/// A command for the engine or writer thread, from connection `conn`.
pub struct Job {
    /// Connection id.
    pub conn: u64,
    /// The connection's protocol (replies differ in RESP3).
    pub proto: Protocol,
    /// The command.
    pub cmd: Command,
    /// The request's number on its connection (replies are delivered in this order).
    pub seq: u64,
    /// EXEC's transaction (`cmd` is then [`Command::Exec`]).
    pub tx: Option<Box<Transaction>>,
    /// A blocking command's cancellation handle (BLPOP and the like outside MULTI: the
    /// writer may park it, see [`crate::blocking`]).
    pub block: Option<Arc<BlockHandle>>,
}

/// A reply for connection `conn`.
pub struct Done {
    /// Connection id.
    pub conn: u64,
    /// The number of the request it answers.
    pub seq: u64,
    /// The reply.
    pub reply: Reply,
}

/// Where replies go: a queue to the network thread and the waker of its poll loop.
///
/// A wake is a system call (an eventfd write), and completions arrive in bursts (a page
/// read answers each GET of a pipeline from the poller thread, one callback each), so
/// senders wake the network thread only when no wake is owed already: `woken` is set by the
/// sender that wakes it and cleared by the network thread ([`ReplySink::rearm`]) before it
/// drains the queue. A reply queued while the flag is set is drained by that coming drain:
/// the sender's swap (release) precedes the network thread's clearing swap (acquire) in the
/// flag's order, so the drain after it sees the reply.
#[derive(Clone)]
pub struct ReplySink {
    /// The queue.
    pub tx: Sender<Done>,
    /// Wakes the network thread.
    pub waker: Arc<mio::Waker>,
    /// A wake is owed: the network thread has not drained since the last one.
    pub woken: Arc<AtomicBool>,
    /// The zero-copy ablation (`--ablate zero-copy`): value payloads are copied into fresh
    /// buffers before they leave, and counted here.
    pub copy_values: Option<Arc<Metrics>>,
}

impl ReplySink {
    /// Queues replies for the network thread and wakes it.
    pub fn send_all(&self, mut replies: Vec<Done>) {
        if replies.is_empty() {
            return;
        }
        if let Some(m) = &self.copy_values {
            let copied: usize = replies
                .iter_mut()
                .map(|d| copy_payloads(&mut d.reply))
                .sum();
            m.value_bytes_copied
                .fetch_add(copied as u64, Ordering::Relaxed);
        }
        for d in replies {
            // The network thread gone means shutdown: nothing to answer.
            let _ = self.tx.send(d);
        }
        if self.woken.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(e) = self.waker.wake() {
            tracing::warn!("waking the network thread failed: {e}");
        }
    }

    /// The network thread is about to drain the queue: the next reply queued wakes it
    /// again. Call before every drain.
    pub fn rearm(&self) {
        self.woken.swap(false, Ordering::AcqRel);
    }
}

/// Replaces every value payload the reply would send from its own buffer (see
/// [`kvproto::VECTORED_MIN_PAYLOAD`]) with a copy; returns the bytes copied.
fn copy_payloads(reply: &mut Reply) -> usize {
    match reply {
        Reply::Bulk(v) | Reply::Verbatim(v) if v.len() >= kvproto::VECTORED_MIN_PAYLOAD => {
            *v = Bytes::copy_from_slice(v);
            v.len()
        }
        Reply::Array(items) | Reply::Set(items) => items.iter_mut().map(copy_payloads).sum(),
        Reply::Map(pairs) => pairs
            .iter_mut()
            .map(|(k, v)| copy_payloads(k) + copy_payloads(v))
            .sum(),
        _ => 0,
    }
}

fn err(e: &StoreError) -> Reply {
    Reply::error(e.reply_text())
}

fn bulk_or_null(v: Option<Bytes>) -> Reply {
    v.map_or(Reply::Null, Reply::Bulk)
}

/// Resolves a score bound to (value, inclusive).
fn bound(b: &ScoreBound) -> (f64, bool) {
    match b {
        ScoreBound::NegInf => (f64::NEG_INFINITY, true),
        ScoreBound::PosInf => (f64::INFINITY, true),
        ScoreBound::Inclusive(v) => (*v, true),
        ScoreBound::Exclusive(v) => (*v, false),
    }
}

/// Replies are encoded into the connection's write buffer: values shorter than
/// [`kvproto::VECTORED_MIN_PAYLOAD`] are copied there; longer ones are written from their
/// own buffers with vectored I/O.
fn count_reply_copy(metrics: &Metrics, reply: &Reply) {
    metrics
        .value_bytes_copied
        .fetch_add(reply.vectored_copy_len() as u64, Ordering::Relaxed);
}

/// The writer thread's loop: returns when the queue closes (after the last group is
/// committed). Up to [`MAX_GROUPS_IN_FLIGHT`] groups are on the device at once; the next is
/// gathered while they are written.
pub fn writer_loop(
    store: &Store,
    metrics: &Metrics,
    jobs: &Receiver<Job>,
    sink: &ReplySink,
    handles: &BlockHandles,
) {
    let mut in_flight = InFlightGroups::new();
    let mut blocked = Blocked::new(handles);
    let mut last_sweep = Instant::now();
    // Held whenever this thread has work (see `try_write_batch_now`).
    let mut gate = store.writer_gate.lock();
    loop {
        // Blocked clients whose timeout ran out get their nil (and cancelled ones leave).
        if !blocked.is_empty() {
            let timed_out = blocked.expire(now_ms());
            sink.send_all(
                timed_out
                    .into_iter()
                    .map(|(conn, seq, reply)| Done { conn, seq, reply })
                    .collect(),
            );
            metrics
                .blocked_clients
                .store(blocked.len() as u64, Ordering::Relaxed);
        }
        if store.key_count_stale() {
            // A group failed: with nothing in flight the applied state holds still for a
            // recount (see `store::count`).
            in_flight.drain(store, metrics, sink);
            if let Err(e) = store.recount_keys() {
                tracing::warn!("recounting keys failed: {e}");
            }
        }
        if last_sweep.elapsed() >= EXPIRY_SWEEP {
            // Under steady writes the writer is never idle for a whole sweep period (the
            // idle sweep below): sweep anyway, as Redis's active expiry runs whatever the
            // load, so expired keys do not pile up on the device and in the deadline index.
            // The sweep commits alone, after the groups in flight.
            if store.has_due_expiry() {
                in_flight.drain(store, metrics, sink);
                sweep_expired(store);
            }
            last_sweep = Instant::now();
        }
        let first = if in_flight.groups.is_empty() {
            // Asleep no longer than the next blocked client's deadline, and only briefly
            // while any client is blocked.
            let most = if blocked.is_empty() {
                EXPIRY_SWEEP
            } else {
                BLOCKED_POLL
            };
            let wait = blocked.next_deadline().map_or(most, |d| {
                Duration::from_millis(d.saturating_sub(now_ms())).min(most)
            });
            // Idle (nothing in flight): the network thread may run writes itself while
            // this waits (see `try_write_batch_now`); the gate is held again before anything
            // below runs.
            let next = parking_lot::MutexGuard::unlocked(&mut gate, || jobs.recv_timeout(wait));
            match next {
                Ok(j) => j,
                Err(RecvTimeoutError::Timeout) => {
                    if last_sweep.elapsed() >= EXPIRY_SWEEP {
                        sweep_expired(store);
                        last_sweep = Instant::now();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match jobs.try_recv() {
                Ok(j) => j,
                Err(TryRecvError::Empty) => {
                    // Nothing new: answer the oldest group once it is durable.
                    in_flight.finish_oldest(store, metrics, sink);
                    continue;
                }
                Err(TryRecvError::Disconnected) => break,
            }
        };
        let mut group = WriteGroup::new(store);
        let mut pending: GroupReplies = Vec::new();
        let mut group_keys: GroupKeys = HashMap::new();
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(mut job) = next.take() {
            taken += 1;
            if matches!(job.cmd, Command::FlushAll | Command::KeysInSlot { .. }) || job.tx.is_some()
            {
                // FLUSHALL, EXEC and CLUSTER GETKEYSINSLOT / COUNTKEYSINSLOT run after
                // everything before them is applied: the groups in flight are finished and
                // this group is committed first. So an EXEC's WATCH check sees every earlier
                // write bumped, and its reads (on this thread, against its own group) see
                // every earlier write; and a reshard's last look at a slot (redis-cli loops
                // GETKEYSINSLOT + MIGRATE until it is empty, then gives the slot away)
                // cannot miss a key whose write passed the migration check (`redirect`
                // below) just before the slot started migrating but was not applied yet:
                // such a key would stay behind, acknowledged, on a drive that no longer
                // serves its slot.
                in_flight.drain(store, metrics, sink);
                let replies = commit(
                    store,
                    metrics,
                    std::mem::replace(&mut group, WriteGroup::new(store)),
                    std::mem::take(&mut pending),
                );
                touch_group_keys(store, &group_keys);
                group_keys.clear();
                sink.send_all(replies);
            }
            // One instant for every expiry decision of this command (of the whole EXEC).
            group.fix_clock(now_ms());
            let mut wrote: Vec<Bytes> = Vec::new();
            if let Some(tx) = job.tx.take() {
                // The transaction's writes join this (fresh) group: one atomic batch.
                let reply =
                    run_transaction(&mut group, &mut group_keys, store, metrics, &tx, job.proto);
                pending.push((job.conn, job.seq, reply));
                if !blocked.is_empty() {
                    wrote = group_keys
                        .keys()
                        .map(|k| Bytes::copy_from_slice(k))
                        .collect();
                }
            } else if let (Command::Collection(c), Some(handle)) = (&job.cmd, job.block.take()) {
                // BLPOP and the like: answered now if a list has an item, else parked.
                if in_flight.conflicts(&job.cmd) {
                    in_flight.drain(store, metrics, sink);
                }
                // Its client went before it ran: nothing is popped for it. Bytes the purge
                // of expired keys writes are not the command's (they are noted as expiries).
                let mut before = group.bytes();
                // Claimed while it runs, so CLIENT UNBLOCK cannot end it meanwhile; one that
                // came first is answered as it asked (nil or -UNBLOCKED).
                let attempt = if !handle.claim() {
                    Some(handle.ended_reply())
                } else if let Some(r) = store.migrations.redirect(&job.cmd, |k| {
                    in_flight.writes(k) || group.key_type(k).ok().flatten().is_some()
                }) {
                    // A key of a slot being handed over may have left since ls-net checked.
                    Some(r)
                } else if let Err(e) = purge_noting(&mut group, &mut group_keys, &c.keys()) {
                    Some(err(&e))
                } else {
                    before = group.bytes();
                    crate::collections::try_unblocked(&mut group, c)
                };
                if attempt.is_none() {
                    handle.release();
                }
                match attempt {
                    Some(reply) => {
                        if group.bytes() != before {
                            wrote = served_keys(c, &reply);
                            note_written(&mut group_keys, &wrote);
                        }
                        pending.push((job.conn, job.seq, reply));
                    }
                    None => {
                        blocked.park(job.conn, job.seq, c.clone(), handle, now_ms());
                    }
                }
            } else if matches!(job.cmd, Command::KeysInSlot { .. }) {
                // Everything before it is applied (above): read as ls-engine would.
                let reply = read_one(store, metrics, &job.cmd, job.proto);
                sink.send_all(vec![Done {
                    conn: job.conn,
                    seq: job.seq,
                    reply,
                }]);
            } else if matches!(job.cmd, Command::FlushAll) {
                let reply = match store::flush_all(store) {
                    Ok(()) => Reply::ok(),
                    Err(e) => err(&e),
                };
                sink.send_all(vec![Done {
                    conn: job.conn,
                    seq: job.seq,
                    reply,
                }]);
            } else {
                if in_flight.conflicts(&job.cmd) {
                    in_flight.drain(store, metrics, sink);
                } else {
                    // A plain write over keys a group in flight wrote plainly.
                    in_flight.assume_plain_writes(&mut group, &job.cmd);
                }
                let before = group.bytes();
                // A key of a slot being handed over may have left since ls-net checked. A
                // key a group in flight writes counts as here: sent on, this write could
                // land on the drive taking the slot before that group lands here (CLUSTER
                // GETKEYSINSLOT, which runs behind it, then hands the older value over too).
                let moved = store.migrations.redirect(&job.cmd, |k| {
                    in_flight.writes(k) || group.key_type(k).ok().flatten().is_some()
                });
                let reply = match moved {
                    Some(r) => r,
                    None => apply_noting_keys(&mut group, &mut group_keys, &job.cmd, job.proto),
                };
                pending.push((job.conn, job.seq, reply));
                if !blocked.is_empty() && group.bytes() != before {
                    wrote = job
                        .cmd
                        .keys()
                        .into_iter()
                        .map(Bytes::copy_from_slice)
                        .collect();
                }
            }
            // Clients blocked on a list this command filled are served now, in this group,
            // before the next command (Redis serves them right after the command).
            if !blocked.is_empty() && !wrote.is_empty() {
                let mut batch = Serving {
                    group: &mut group,
                    group_keys: &mut group_keys,
                    pending: &mut pending,
                    in_flight: &mut in_flight,
                };
                batch.serve_ready(&mut blocked, wrote, store, metrics, sink);
            }
            if taken < MAX_BATCH && group.bytes() < GROUP_BYTES {
                next = jobs.try_recv().ok();
            }
        }
        loop {
            match group.try_submit() {
                Ok(Some(commit)) => {
                    in_flight.push(commit, pending, group_keys);
                    break;
                }
                Ok(None) => {
                    // The engine wants the device to itself (maintenance, a large group).
                    if !in_flight.finish_oldest(store, metrics, sink) {
                        let replies = commit(store, metrics, group, pending);
                        touch_group_keys(store, &group_keys);
                        sink.send_all(replies);
                        break;
                    }
                }
                Err(e) => {
                    touch_group_keys(store, &group_keys);
                    sink.send_all(group_replies(metrics, Err(e), pending));
                    break;
                }
            }
        }
        while in_flight.groups.len() > MAX_GROUPS_IN_FLIGHT {
            in_flight.finish_oldest(store, metrics, sink);
        }
    }
    in_flight.drain(store, metrics, sink);
}

/// The group being built, as serving blocked clients needs it.
struct Serving<'a, 'g> {
    group: &'a mut WriteGroup<'g>,
    group_keys: &'a mut GroupKeys,
    pending: &'a mut GroupReplies,
    in_flight: &'a mut InFlightGroups,
}

impl Serving<'_, '_> {
    /// Serves the clients blocked on `ready` (keys just written): for each key, its live
    /// waiters in the order they blocked, each while the key still holds the type it waits
    /// for: the command runs again without blocking in this group and its reply joins the
    /// group's (see [`crate::blocking`]). A served BLMOVE's destination becomes ready in
    /// turn.
    fn serve_ready(
        &mut self,
        blocked: &mut Blocked,
        ready: Vec<Bytes>,
        store: &Store,
        metrics: &Metrics,
        sink: &ReplySink,
    ) {
        let mut ready: VecDeque<Bytes> =
            ready.into_iter().filter(|k| blocked.waits_on(k)).collect();
        while let Some(key) = ready.pop_front() {
            for id in blocked.queue(&key) {
                // Only the type it waits for wakes a waiter: one waiting for another type
                // is passed over (as in Redis); a missing key wakes no one (the drive keeps
                // no empty collection).
                let Ok(Some(now)) = self.group.key_kind(&key) else {
                    break;
                };
                let Some(w) = blocked.wakeup(id) else {
                    continue;
                };
                let wanted = match w.cmd {
                    Collection::BZPop { .. } | Collection::ZMPop { .. } => ZSET,
                    _ => LIST,
                };
                if now != wanted {
                    continue;
                }
                let cmd = Command::Collection(w.cmd);
                if self.in_flight.conflicts(&cmd) {
                    self.in_flight.drain(store, metrics, sink);
                }
                let Command::Collection(c) = &cmd else {
                    continue;
                };
                // Claimed while it runs again, so CLIENT UNBLOCK cannot end it meanwhile
                // (see `BlockHandle::claim`).
                if !w.handle.claim() {
                    continue;
                }
                let before = self.group.bytes();
                self.group.fix_clock(now_ms());
                let reply = match purge_noting(self.group, self.group_keys, &c.keys()) {
                    Ok(()) => crate::collections::try_unblocked(self.group, c),
                    Err(e) => Some(err(&e)),
                };
                let Some(reply) = reply else {
                    w.handle.release();
                    continue;
                };
                if self.group.bytes() != before {
                    let wrote = served_keys(c, &reply);
                    note_written(self.group_keys, &wrote);
                    for k in wrote {
                        if k != key && blocked.waits_on(&k) && !ready.contains(&k) {
                            ready.push_back(k);
                        }
                    }
                }
                if let Some((conn, seq)) = blocked.served(w.id) {
                    self.pending.push((conn, seq, reply));
                }
            }
        }
        metrics
            .blocked_clients
            .store(blocked.len() as u64, Ordering::Relaxed);
    }
}

/// The keys a blocking command that got its answer wrote: BLPOP's and BZPOPMIN's the key it
/// popped (named in its reply), BLMOVE's both lists.
fn served_keys(cmd: &Collection, reply: &Reply) -> Vec<Bytes> {
    match (cmd, reply) {
        (Collection::BLMove { src, dst, .. }, _) => vec![src.clone(), dst.clone()],
        (
            Collection::BPop { .. }
            | Collection::BZPop { .. }
            | Collection::MPop { .. }
            | Collection::ZMPop { .. },
            Reply::Array(kv),
        ) => match kv.first() {
            Some(Reply::Bulk(k)) => vec![k.clone()],
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Applies a write and records the keys it changed in its group's key set (see
/// [`note_keys`]). DEL and UNLINK are applied key by key, so only the keys they removed count.
fn apply_noting_keys(
    group: &mut WriteGroup<'_>,
    group_keys: &mut GroupKeys,
    cmd: &Command,
    proto: Protocol,
) -> Reply {
    group.hint_type(ks::hinted_type(cmd.name()));
    // A key whose deadline passed is deleted before a command writes it (docs/ARCHITECTURE.md,
    // *Expiry*); that deletion is recorded apart from the command's own change.
    if let Err(e) = purge_noting(group, group_keys, &cmd.keys()) {
        return err(&e);
    }
    if let Command::Del(keys) = cmd {
        let mut removed = 0;
        for k in keys {
            let before = group.bytes();
            match group.delete(std::slice::from_ref(k)) {
                Ok(n) => removed += n,
                Err(e) => return err(&e),
            }
            if group.bytes() != before {
                group_keys.insert(k.to_vec(), KeyChange::Other);
            }
        }
        return Reply::Integer(removed);
    }
    let before = group.bytes();
    let reply = apply_write(group, cmd, proto);
    if group.bytes() != before {
        note_keys(group_keys, cmd);
    }
    reply
}

/// EXEC: nil when a WATCHed key changed since it was watched; otherwise every queued command
/// applied to `group` in order (writes join the group's atomic batch, reads see the
/// transaction's earlier writes) and their replies as one array. Releases the watches.
fn run_transaction(
    group: &mut WriteGroup<'_>,
    group_keys: &mut GroupKeys,
    store: &Store,
    metrics: &Metrics,
    tx: &Transaction,
    proto: Protocol,
) -> Reply {
    let broken = store.watch_broken(&tx.watched);
    store.unwatch(&tx.watched);
    if broken {
        return Reply::NullArray;
    }
    // A key of a slot being handed over may have left since ls-net checked the command
    // when it was queued: the whole EXEC is redirected, as Redis Cluster checks a
    // transaction's keys again at EXEC (nothing in flight here: EXEC drained the groups).
    for item in &tx.items {
        if let TxItem::Run(cmd) = item {
            if let Some(r) = store
                .migrations
                .redirect(cmd, |k| group.key_type(k).ok().flatten().is_some())
            {
                return r;
            }
        }
    }
    let mut replies = Vec::with_capacity(tx.items.len());
    for item in &tx.items {
        replies.push(match item {
            TxItem::Answer(r) => r.clone(),
            TxItem::Run(Command::FlushAll) => {
                Reply::error("ERR FLUSHALL and FLUSHDB are not allowed inside MULTI on this drive")
            }
            TxItem::Run(cmd) if cmd.is_write() => apply_noting_keys(group, group_keys, cmd, proto),
            TxItem::Run(cmd) => read_in_group(group, store, metrics, cmd, proto),
        });
    }
    Reply::Array(replies)
}

/// Commits a group synchronously (nothing of the writer's may be in flight).
fn commit(
    store: &Store,
    metrics: &Metrics,
    group: WriteGroup<'_>,
    pending: GroupReplies,
) -> Vec<Done> {
    let _ = store;
    group_replies(metrics, group.commit(), pending)
}

/// The replies of a committed group; on failure every reply that reported success becomes
/// the error.
fn group_replies(
    metrics: &Metrics,
    result: store::Result<u64>,
    pending: GroupReplies,
) -> Vec<Done> {
    match result {
        Ok(value_bytes) => {
            // The engine copies each value into its device pages.
            metrics
                .value_bytes_copied
                .fetch_add(value_bytes, Ordering::Relaxed);
            pending
                .into_iter()
                .map(|(conn, seq, reply)| {
                    // Old values (SET ... GET) are encoded into the write buffer like GET's;
                    // the engine counts its own read copies.
                    count_reply_copy(metrics, &reply);
                    Done { conn, seq, reply }
                })
                .collect()
        }
        Err(e) => {
            tracing::warn!("write group failed: {e}");
            pending
                .into_iter()
                .map(|(conn, seq, reply)| Done {
                    conn,
                    seq,
                    reply: match reply {
                        Reply::Error(m) => Reply::Error(m),
                        _ => err(&e),
                    },
                })
                .collect()
        }
    }
}

fn sweep_expired(store: &Store) {
    let due = store.due_expiries(EXPIRY_SWEEP_KEYS);
    if due.is_empty() {
        return;
    }
    let mut g = WriteGroup::new(store);
    let r = g.expire(&due).and_then(|n| g.commit().map(|_| n));
    store.touch_expired(due.iter().map(Vec::as_slice));
    match r {
        Ok(n) => {
            store.counters.expired_keys.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => tracing::warn!("removing expired keys failed: {e}"),
    }
}

fn deadline_of(e: &kvproto::Expire) -> u64 {
    let now = now_ms();
    match *e {
        kvproto::Expire::Ex(s) => now.saturating_add(s.saturating_mul(1000)),
        kvproto::Expire::Px(ms) => now.saturating_add(ms),
        kvproto::Expire::ExAt(s) => s.saturating_mul(1000),
        kvproto::Expire::PxAt(ms) => ms,
    }
}

/// Applies one write command to the group and returns its reply (sent once committed).
fn apply_write(g: &mut WriteGroup<'_>, cmd: &Command, proto: Protocol) -> Reply {
    let r: store::Result<Reply> = (|| {
        Ok(match cmd {
            Command::Set {
                key,
                value,
                expire,
                condition,
                keep_ttl,
                get,
            } => {
                let o = SetOptions {
                    deadline: expire.as_ref().map(deadline_of),
                    nx: matches!(condition, Some(SetCondition::Nx)),
                    xx: matches!(condition, Some(SetCondition::Xx)),
                    keep_ttl: *keep_ttl,
                    get: *get,
                };
                let out = g.set(key, value.clone(), o)?;
                if *get {
                    bulk_or_null(out.old)
                } else if out.applied {
                    Reply::ok()
                } else {
                    Reply::Null
                }
            }
            Command::MSet(pairs) => {
                for (k, v) in pairs {
                    g.set(k, v.clone(), SetOptions::default())?;
                }
                Reply::ok()
            }
            Command::Del(keys) => Reply::Integer(g.delete(keys)?),
            Command::IncrBy { key, delta } => Reply::Integer(g.incr_by(key, *delta)?),
            Command::HSet { key, pairs, hmset } => {
                let added = g.hash_set(key, pairs)?;
                if *hmset {
                    Reply::ok()
                } else {
                    Reply::Integer(added)
                }
            }
            Command::HDel { key, fields } => Reply::Integer(g.hash_del(key, fields)?),
            Command::ZAdd {
                key,
                options,
                members,
            } => {
                let out = g.zadd(key, options, members)?;
                if options.incr {
                    match out.score {
                        Some(s) => Reply::Double(s),
                        None => Reply::Null,
                    }
                } else if options.ch {
                    Reply::Integer(out.added + out.changed)
                } else {
                    Reply::Integer(out.added)
                }
            }
            Command::ZRem { key, members } => Reply::Integer(g.zrem(key, members)?),
            Command::Expire {
                key,
                when,
                absolute,
                condition,
                name,
            } => Reply::Integer(i64::from(
                g.expire_key(key, *when, *absolute, *condition, name)?,
            )),
            Command::Persist(key) => Reply::Integer(i64::from(g.persist(key)?)),
            Command::GetEx {
                key,
                expire,
                persist,
                expire_error,
            } => bulk_or_null(g.get_ex(
                key,
                expire.as_ref().map(deadline_of),
                *persist,
                expire_error.as_ref(),
            )?),
            Command::SetNx { key, value } => {
                let o = SetOptions {
                    nx: true,
                    ..SetOptions::default()
                };
                Reply::Integer(i64::from(g.set(key, value.clone(), o)?.applied))
            }
            Command::GetDel(key) => bulk_or_null(g.get_del(key)?),
            Command::Append { key, value } => Reply::Integer(g.append(key, value)?),
            Command::SetRange { key, offset, value } => {
                Reply::Integer(g.set_range(key, *offset, value)?)
            }
            Command::MSetNx(pairs) => Reply::Integer(i64::from(g.mset_nx(pairs)?)),
            Command::IncrByFloat { key, delta } => Reply::Bulk(g.incr_by_float(key, delta)?),
            Command::Copy {
                source,
                destination,
                replace,
            } => Reply::Integer(i64::from(g.copy(source, destination, *replace)?)),
            Command::Migrate(m) => crate::migrate::migrate(g, m)?,
            Command::Dump(key) => match g.dump(key)? {
                Some(payload) => Reply::Bulk(Bytes::from(payload)),
                None => Reply::Null,
            },
            Command::Restore {
                key,
                ttl,
                payload,
                replace,
                absttl,
                ..
            } => {
                g.restore(key, ttl, payload, *replace, *absttl)?;
                Reply::ok()
            }
            Command::Rename { key, new_key, nx } => {
                let done = g.rename(key, new_key, *nx)?;
                if *nx {
                    Reply::Integer(i64::from(done))
                } else {
                    Reply::ok()
                }
            }
            Command::Collection(c) => crate::collections::write(g, c, proto),
            other => Reply::error(format!(
                "ERR internal: '{}' was routed to the writer thread",
                other.name()
            )),
        })
    })();
    r.unwrap_or_else(|e| err(&e))
}
