//! The engine thread and the writer thread: each drains its lock-free queue in batches and
//! answers through the reply queue.
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
//!   up to four groups are on the device while the next is gathered, and each group's
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
use std::sync::atomic::{AtomicUsize, Ordering};
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
use crate::store::{self, now_ms, KeyFound, KeyRead, SetOptions, Store, StoreError, WriteGroup};

/// Most jobs taken off a queue per batch.
mod groups;
mod inline_write;
pub use inline_write::try_write_now;

use groups::{
    note_keys, note_written, purge_noting, touch_group_keys, GroupKeys, GroupReplies,
    InFlightGroups, KeyChange,
};

const MAX_BATCH: usize = 512;
/// A write group is started once it holds this many bytes (small enough that several fit
/// in the engine's write pipeline at once).
const GROUP_BYTES: usize = 256 << 10;
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
#[derive(Clone)]
pub struct ReplySink {
    /// The queue.
    pub tx: Sender<Done>,
    /// Wakes the network thread.
    pub waker: Arc<mio::Waker>,
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
        if let Err(e) = self.waker.wake() {
            tracing::warn!("waking the network thread failed: {e}");
        }
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

/// The engine thread's loop: returns when the queue closes and every read it started has
/// been answered.
pub fn engine_loop(store: &Store, metrics: &Arc<Metrics>, jobs: &Receiver<Job>, sink: &ReplySink) {
    let outstanding = Arc::new(AtomicUsize::new(0));
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        // A key of a slot being handed over may have left since ls-net checked: asked of
        // the drive taking the slot, not answered missing.
        let mut moved = Vec::new();
        batch.retain(|j| {
            match store
                .migrations
                .redirect(&j.cmd, |k| store.kind(k).ok().flatten().is_some())
            {
                Some(reply) => {
                    moved.push(Done {
                        conn: j.conn,
                        seq: j.seq,
                        reply,
                    });
                    false
                }
                None => true,
            }
        });
        if !moved.is_empty() {
            sink.send_all(moved);
        }
        let (gets, others): (Vec<Job>, Vec<Job>) = batch
            .into_iter()
            .partition(|j| matches!(j.cmd, Command::Get(_) | Command::MGet(_)));
        if !gets.is_empty() {
            start_gets(store, metrics, gets, sink, &outstanding);
        }
        let (ranges, others): (Vec<Job>, Vec<Job>) = others
            .into_iter()
            .partition(|j| matches!(j.cmd, Command::Range { .. }));
        for j in ranges {
            start_range(store, metrics, j, sink, &outstanding);
        }
        let others: Vec<Job> = others
            .into_iter()
            .filter_map(|j| start_key_read(store, metrics, j, sink, &outstanding))
            .collect();
        let replies: Vec<Done> = others
            .into_iter()
            .map(|j| {
                let reply = read_one(store, metrics, &j.cmd, j.proto);
                count_reply_copy(metrics, &reply);
                Done {
                    conn: j.conn,
                    seq: j.seq,
                    reply,
                }
            })
            .collect();
        sink.send_all(replies);
    }
    // Reads on the device still hold replies (and the engine's poller delivers them).
    let deadline = std::time::Instant::now() + DRAIN_TIMEOUT;
    while outstanding.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
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

/// What one GET / MGET of a batch waits for.
enum GetShape {
    /// The next value read; the next type flag says whether the key holds another type.
    One,
    /// The next `n` values read.
    Many(usize),
}

/// Starts the reads of a batch of GETs and MGETs; the replies are sent from the engine's
/// poller thread once the pages are in. A GET's key is also checked for another type in
/// the same engine-lock hold as its value is looked up, so it answers nil or WRONGTYPE
/// consistently.
fn start_gets(
    store: &Store,
    metrics: &Arc<Metrics>,
    gets: Vec<Job>,
    sink: &ReplySink,
    outstanding: &Arc<AtomicUsize>,
) {
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut typed: Vec<&[u8]> = Vec::new();
    let mut shapes: Vec<(u64, u64, GetShape)> = Vec::with_capacity(gets.len());
    for j in &gets {
        let shape = match &j.cmd {
            Command::Get(k) => {
                keys.push(k);
                typed.push(k);
                GetShape::One
            }
            Command::MGet(ks) => {
                keys.extend(ks.iter().map(|k| &k[..]));
                GetShape::Many(ks.len())
            }
            _ => GetShape::Many(0),
        };
        shapes.push((j.conn, j.seq, shape));
    }
    let (metrics, sink, outstanding) = (metrics.clone(), sink.clone(), outstanding.clone());
    outstanding.fetch_add(1, Ordering::AcqRel);
    store.get_strings_async(
        &keys,
        &typed,
        Box::new(move |r, other_type| {
            let replies = answer_gets(shapes, r, &other_type, &metrics);
            sink.send_all(replies);
            outstanding.fetch_sub(1, Ordering::AcqRel);
        }),
    );
}

/// Starts an `LS.RANGE`: its keys are taken and its value pages submitted now; the reply is
/// sent from the engine's poller thread once they are read (the engine thread goes on).
fn start_range(
    store: &Store,
    metrics: &Arc<Metrics>,
    job: Job,
    sink: &ReplySink,
    outstanding: &Arc<AtomicUsize>,
) {
    let Command::Range { start, end, count } = &job.cmd else {
        return;
    };
    let count = usize::try_from(*count).unwrap_or(usize::MAX);
    let (conn, seq) = (job.conn, job.seq);
    let (metrics, sink, outstanding) = (metrics.clone(), sink.clone(), outstanding.clone());
    outstanding.fetch_add(1, Ordering::AcqRel);
    store.range_strings_async(
        start,
        end,
        count,
        Box::new(move |r| {
            let reply = match r {
                Ok(pairs) => {
                    let mut items = Vec::with_capacity(pairs.len() * 2);
                    for (k, v) in pairs {
                        items.push(Reply::Bulk(k));
                        items.push(Reply::Bulk(v));
                    }
                    Reply::Array(items)
                }
                Err(e) => err(&e),
            };
            count_reply_copy(&metrics, &reply);
            sink.send_all(vec![Done { conn, seq, reply }]);
            outstanding.fetch_sub(1, Ordering::AcqRel);
        }),
    );
}

/// Builds a key read's reply from what was found (the key exists and has the command's
/// type, or does not exist: then every value is `None` and there are no pairs).
type FinishKeyRead = Box<dyn FnOnce(KeyFound) -> Reply + Send>;

/// One reading command on one key, ready to run: what to read and how to reply.
struct KeyReadPlan<'c> {
    key: &'c Bytes,
    names: Vec<Bytes>,
    read: Read,
    /// The type the command works on (another type answers WRONGTYPE).
    tag: u8,
    finish: FinishKeyRead,
}

impl KeyReadPlan<'_> {
    /// What the store reads for a plan of shape `read` on `names`.
    fn what(read: Read, names: &[Bytes]) -> KeyRead<'_> {
        match read {
            Read::Record(tag) => KeyRead::Record { tag },
            Read::Subs(sub_tag) => KeyRead::Subs { sub_tag, names },
            Read::All(sub_tag) => KeyRead::AllSubs { sub_tag },
        }
    }

    /// The reply from what was found.
    fn reply(finish: FinishKeyRead, tag: u8, found: store::Result<KeyFound>) -> Reply {
        match found {
            Ok(f) if f.kind.is_none() || f.kind == Some(tag) => finish(f),
            Ok(_) => err(&StoreError::WrongType),
            Err(e) => err(&e),
        }
    }
}

/// The plan of a reading command on one key whose records may be on the device (GET, HGET,
/// HMGET, HGETALL, HLEN, ZCARD, ZSCORE, GETRANGE); `None` for any other command.
fn key_read_plan(cmd: &Command) -> Option<KeyReadPlan<'_>> {
    let one = |c: &Bytes| vec![c.clone()];
    let (key, names, read, tag, finish): (&Bytes, Vec<Bytes>, Read, u8, FinishKeyRead) = match cmd {
        Command::Get(key) => (
            key,
            Vec::new(),
            Read::Record(STRING),
            STRING,
            Box::new(|f| bulk_or_null(f.values.into_iter().next().flatten())),
        ),
        Command::HGet { key, field } => (
            key,
            one(field),
            Read::Subs(HASH_FIELD),
            HASH,
            Box::new(|f| bulk_or_null(f.values.into_iter().next().flatten())),
        ),
        Command::HMGet { key, fields } => (
            key,
            fields.clone(),
            Read::Subs(HASH_FIELD),
            HASH,
            Box::new(|f| Reply::Array(f.values.into_iter().map(bulk_or_null).collect())),
        ),
        Command::HGetAll(key) => (
            key,
            Vec::new(),
            Read::All(HASH_FIELD),
            HASH,
            Box::new(|f| {
                Reply::Map(
                    f.pairs
                        .into_iter()
                        .map(|(k, v)| (Reply::Bulk(k), Reply::Bulk(v)))
                        .collect(),
                )
            }),
        ),
        Command::HLen(key) | Command::ZCard(key) => {
            let tag = if matches!(cmd, Command::HLen(_)) {
                HASH
            } else {
                ZSET
            };
            (
                key,
                Vec::new(),
                Read::Record(tag),
                tag,
                Box::new(|f| {
                    let n = f.values.first().and_then(Option::as_deref);
                    Reply::Integer(n.map_or(0, |v| ks::decode_count(v) as i64))
                }),
            )
        }
        Command::ZScore { key, member } => (
            key,
            one(member),
            Read::Subs(ZSET_MEMBER),
            ZSET,
            Box::new(|f| {
                let v = f.values.first().and_then(Option::as_deref);
                v.and_then(ks::decode_score)
                    .map_or(Reply::Null, Reply::Double)
            }),
        ),
        // Collection reads whose records are known by name: read like HLEN and HMGET, so
        // they never wait on the engine thread and are answered inline when cached.
        Command::Collection(Collection::SCard(key) | Collection::LLen(key)) => {
            let tag = if matches!(cmd, Command::Collection(Collection::SCard(_))) {
                SET
            } else {
                LIST
            };
            (
                key,
                Vec::new(),
                Read::Record(tag),
                tag,
                // A list header starts with its count, as the other headers are.
                Box::new(|f| {
                    let n = f.values.first().and_then(Option::as_deref);
                    Reply::Integer(n.map_or(0, |v| ks::decode_count(v) as i64))
                }),
            )
        }
        Command::Collection(Collection::HVals(key)) => (
            key,
            Vec::new(),
            Read::All(HASH_FIELD),
            HASH,
            Box::new(|f| Reply::Array(f.pairs.into_iter().map(|(_, v)| Reply::Bulk(v)).collect())),
        ),
        Command::Collection(Collection::ZMScore { key, members }) => (
            key,
            members.clone(),
            Read::Subs(ZSET_MEMBER),
            ZSET,
            Box::new(|f| {
                Reply::Array(
                    f.values
                        .iter()
                        .map(|v| {
                            v.as_deref()
                                .and_then(ks::decode_score)
                                .map_or(Reply::Null, Reply::Double)
                        })
                        .collect(),
                )
            }),
        ),
        Command::GetRange { key, start, end } => {
            let (start, end) = (*start, *end);
            (
                key,
                Vec::new(),
                Read::Record(STRING),
                STRING,
                Box::new(move |f| {
                    let v = f.values.into_iter().next().flatten();
                    Reply::Bulk(get_range(v.unwrap_or_default(), start, end))
                }),
            )
        }
        _ => return None,
    };
    Some(KeyReadPlan {
        key,
        names,
        read,
        tag,
        finish,
    })
}

/// Answers a reading command at once when DRAM holds all it needs (its keys' records in the
/// keytables and memtables, its value pages in the value cache), and the short commands
/// answered from DRAM alone (STRLEN, EXISTS, HEXISTS, ZRANGEBYSCORE, TTL family, TYPE): the network thread
/// calls this for a connection with nothing in flight, so a hot read costs no hand-off to
/// another thread, as in redis-server. MGET likewise when every value is cached. `None`: the
/// command goes to the engine thread (a page must come from the device, or it is another
/// command: SCAN, DBSIZE, INFO, LS.RANGE).
pub fn try_read_now(
    store: &Store,
    metrics: &Metrics,
    cmd: &Command,
    proto: Protocol,
) -> Option<Reply> {
    if matches!(
        cmd,
        Command::Strlen(_)
            | Command::Exists(_)
            | Command::HExists { .. }
            | Command::ZRangeByScore { .. }
            | Command::Ttl { .. }
            | Command::Type(_)
    ) {
        let reply = read_one(store, metrics, cmd, proto);
        count_reply_copy(metrics, &reply);
        return Some(reply);
    }
    if let Command::Get(key) = cmd {
        if let Some(v) = store.get_string_cached(key) {
            let reply = Reply::Bulk(v);
            count_reply_copy(metrics, &reply);
            return Some(reply);
        }
    }
    if let Command::MGet(keys) = cmd {
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let values = store.get_strings_now(&refs)?;
        let reply = Reply::Array(values.into_iter().map(bulk_or_null).collect());
        count_reply_copy(metrics, &reply);
        return Some(reply);
    }
    let plan = key_read_plan(cmd)?;
    let found = store.read_key_now(plan.key, &KeyReadPlan::what(plan.read, &plan.names))?;
    let reply = KeyReadPlan::reply(plan.finish, plan.tag, Ok(found));
    count_reply_copy(metrics, &reply);
    Some(reply)
}

/// Starts a reading command on one key whose records may be on the device (see
/// [`key_read_plan`]): the engine thread resolves its keys and submits the page reads, and
/// the engine's poller thread sends the reply once they are in, so other clients' commands
/// go on meanwhile (the command runs at the device's queue depth, not one at a time).
/// Returns the job unstarted when it is not such a command.
fn start_key_read(
    store: &Store,
    metrics: &Arc<Metrics>,
    job: Job,
    sink: &ReplySink,
    outstanding: &Arc<AtomicUsize>,
) -> Option<Job> {
    let Some(KeyReadPlan {
        key,
        names,
        read,
        tag,
        finish,
    }) = key_read_plan(&job.cmd)
    else {
        return Some(job);
    };
    let what = KeyReadPlan::what(read, &names);
    let (conn, seq) = (job.conn, job.seq);
    let (metrics, sink2, outstanding2) = (metrics.clone(), sink.clone(), outstanding.clone());
    outstanding.fetch_add(1, Ordering::AcqRel);
    store.read_key_async(
        key,
        &what,
        Box::new(move |r| {
            let reply = KeyReadPlan::reply(finish, tag, r);
            count_reply_copy(&metrics, &reply);
            sink2.send_all(vec![Done { conn, seq, reply }]);
            outstanding2.fetch_sub(1, Ordering::AcqRel);
        }),
    );
    None
}

/// The shape of a key read, before its names are borrowed.
#[derive(Clone, Copy)]
enum Read {
    Record(u8),
    Subs(u8),
    All(u8),
}

/// Builds the replies of a batch of GETs and MGETs from the values read.
fn answer_gets(
    shapes: Vec<(u64, u64, GetShape)>,
    values: store::Result<Vec<Option<Bytes>>>,
    other_type: &[bool],
    metrics: &Metrics,
) -> Vec<Done> {
    let mut values = match values {
        Ok(v) => Ok(v.into_iter()),
        Err(e) => Err(err(&e)),
    };
    let mut other_type = other_type.iter();
    shapes
        .into_iter()
        .map(|(conn, seq, shape)| {
            let reply = match (shape, &mut values) {
                (_, Err(e)) => e.clone(),
                (GetShape::One, Ok(vals)) => {
                    let wrong = other_type.next().copied().unwrap_or(false);
                    match vals.next().flatten() {
                        Some(v) => Reply::Bulk(v),
                        None if wrong => err(&StoreError::WrongType),
                        None => Reply::Null,
                    }
                }
                (GetShape::Many(n), Ok(vals)) => Reply::Array(
                    (0..n)
                        .map(|_| bulk_or_null(vals.next().flatten()))
                        .collect(),
                ),
            };
            count_reply_copy(metrics, &reply);
            Done { conn, seq, reply }
        })
        .collect()
}

fn read_one(store: &Store, metrics: &Metrics, cmd: &Command, proto: Protocol) -> Reply {
    let r: store::Result<Reply> = (|| {
        Ok(match cmd {
            Command::Strlen(k) => Reply::Integer(store.strlen(k)?),
            Command::Exists(keys) => {
                let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                Reply::Integer(store.exists(&refs)?)
            }
            Command::HExists { key, field } => {
                Reply::Integer(i64::from(store.hash_exists(key, field)?))
            }
            Command::ZRangeByScore {
                key,
                min,
                max,
                withscores,
                limit,
            } => {
                let Some((offset, count)) = limit_window(*limit) else {
                    // A negative offset answers nothing, after the type check.
                    return match store.kind(key)? {
                        Some(ZSET) | None => Ok(Reply::Array(Vec::new())),
                        Some(_) => Err(StoreError::WrongType),
                    };
                };
                let found = store.zrange_by_score(key, bound(min), bound(max), offset, count)?;
                scored_members(found, *withscores, proto)
            }
            Command::Scan {
                cursor,
                pattern,
                count,
                kind,
            } => {
                let count = count.map_or(10, |c| usize::try_from(c).unwrap_or(usize::MAX));
                let (next, keys) =
                    store.scan(*cursor, pattern.as_deref(), count, kind.as_deref())?;
                Reply::Array(vec![
                    Reply::Bulk(Bytes::from(next.to_string())),
                    Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
                ])
            }
            Command::DbSize => Reply::Integer(store.dbsize()?),
            Command::RandomKey => bulk_or_null(store.random_key(|k| Ok(store.is_live(k)))?),
            Command::Ttl { key, kind } => Reply::Integer(store.ttl(key, *kind)?),
            Command::Type(key) => type_reply(store.kind(key)?),
            Command::Keys(pattern) => {
                Reply::Array(store.keys(pattern)?.into_iter().map(Reply::Bulk).collect())
            }
            Command::KeysInSlot { slot, count: None } => {
                Reply::Integer(store.keys_in_slot(*slot, usize::MAX)?.len() as i64)
            }
            Command::KeysInSlot {
                slot,
                count: Some(n),
            } => Reply::Array(
                store
                    .keys_in_slot(*slot, usize::try_from(*n).unwrap_or(usize::MAX))?
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            ),
            Command::Info(sections) => {
                Reply::Verbatim(Bytes::from(info::render(store, metrics, sections)))
            }
            Command::Collection(c) => crate::collections::read(store, c, proto),
            other => Reply::error(format!(
                "ERR internal: '{}' was routed to the engine thread",
                other.name()
            )),
        })
    })();
    r.unwrap_or_else(|e| err(&e))
}

/// TYPE's reply for a key of type `kind`.
fn type_reply(kind: Option<u8>) -> Reply {
    Reply::Simple(Bytes::from_static(
        kind.map_or("none", ks::type_name).as_bytes(),
    ))
}

/// A reading command inside EXEC: run on the writer thread against the transaction's group,
/// so it sees the transaction's own earlier writes (KEYS and DBSIZE too: the applied state
/// corrected by the group's written keys). SCAN and INFO read the applied state, without the
/// transaction's own writes.
fn read_in_group(
    g: &WriteGroup<'_>,
    store: &Store,
    metrics: &Metrics,
    cmd: &Command,
    proto: Protocol,
) -> Reply {
    let r: store::Result<Reply> = (|| {
        if let Some(plan) = key_read_plan(cmd) {
            let kind = g.key_type(plan.key)?;
            let mut found = KeyFound {
                kind,
                values: Vec::new(),
                pairs: Vec::new(),
            };
            match plan.read {
                Read::Record(tag) => found.values.push(match kind {
                    Some(k) if k == tag => g.record(&ks::top(tag, plan.key))?,
                    _ => None,
                }),
                Read::Subs(sub_tag) => {
                    for n in &plan.names {
                        found.values.push(match kind {
                            Some(k) if k == plan.tag => g.record(&ks::sub(sub_tag, plan.key, n))?,
                            _ => None,
                        });
                    }
                }
                Read::All(sub_tag) => {
                    if kind == Some(plan.tag) {
                        let prefix = ks::sub_prefix(sub_tag, plan.key);
                        for (k, v) in g.records_under(&prefix)? {
                            found
                                .pairs
                                .push((Bytes::copy_from_slice(&k[prefix.len()..]), v));
                        }
                    }
                }
            }
            return Ok(KeyReadPlan::reply(plan.finish, plan.tag, Ok(found)));
        }
        let string = |k: &[u8]| -> store::Result<Option<Bytes>> {
            Ok(match g.key_type(k)? {
                Some(STRING) => g.record(&ks::top(STRING, k))?,
                _ => None,
            })
        };
        Ok(match cmd {
            Command::MGet(keys) => {
                let mut items = Vec::with_capacity(keys.len());
                for k in keys {
                    items.push(bulk_or_null(string(k)?));
                }
                Reply::Array(items)
            }
            Command::Strlen(k) => match g.key_type(k)? {
                None => Reply::Integer(0),
                Some(STRING) => Reply::Integer(string(k)?.map_or(0, |v| v.len() as i64)),
                Some(_) => return Err(StoreError::WrongType),
            },
            Command::Exists(keys) => {
                let mut n = 0;
                for k in keys {
                    n += i64::from(g.key_type(k)?.is_some());
                }
                Reply::Integer(n)
            }
            Command::HExists { key, field } => match g.key_type(key)? {
                None => Reply::Integer(0),
                Some(HASH) => Reply::Integer(i64::from(
                    g.record(&ks::sub(HASH_FIELD, key, field))?.is_some(),
                )),
                Some(_) => return Err(StoreError::WrongType),
            },
            Command::Ttl { key, kind } => Reply::Integer(store::ttl_reply(
                g.key_type(key)?,
                g.deadline_of(key),
                *kind,
                g.clock(),
            )),
            Command::Type(key) => type_reply(g.key_type(key)?),
            Command::ZRangeByScore {
                key,
                min,
                max,
                withscores,
                limit,
            } => {
                match g.key_type(key)? {
                    None => return Ok(Reply::Array(Vec::new())),
                    Some(ZSET) => {}
                    Some(_) => return Err(StoreError::WrongType),
                }
                let Some((offset, count)) = limit_window(*limit) else {
                    return Ok(Reply::Array(Vec::new()));
                };
                let ((lo, lo_in), (hi, hi_in)) = (bound(min), bound(max));
                let prefix = ks::sub_prefix(ks::ZSET_ORDER, key);
                let in_range = g
                    .engine_keys_under(&prefix)?
                    .into_iter()
                    .filter_map(|k| ks::parse_order(prefix.len(), &k))
                    .filter(|(s, _)| {
                        (*s > lo || (lo_in && *s == lo)) && (*s < hi || (hi_in && *s == hi))
                    })
                    .skip(offset)
                    .take(count.unwrap_or(usize::MAX));
                scored_members(in_range.map(|(s, m)| (m, s)), *withscores, proto)
            }
            Command::Range { .. } => Reply::error("ERR LS.RANGE is not allowed inside MULTI"),
            // KEYS and DBSIZE: the applied state, corrected by the keys this group wrote,
            // with expiry judged at the transaction's one instant.
            Command::Keys(pattern) => {
                let mut keys: std::collections::BTreeSet<Bytes> =
                    store.keys_at(pattern, g.clock())?.into_iter().collect();
                for k in g.written_top_keys() {
                    if kvproto::glob::glob_match(pattern, &k) {
                        let k = Bytes::from(k);
                        if g.key_type(&k)?.is_some() {
                            keys.insert(k);
                        } else {
                            keys.remove(&k);
                        }
                    }
                }
                Reply::Array(keys.into_iter().map(Reply::Bulk).collect())
            }
            Command::DbSize => {
                let mut n = store.dbsize_at(g.clock())?;
                let mut seen = std::collections::HashSet::new();
                for k in g.written_top_keys() {
                    if seen.insert(k.clone()) {
                        n += i64::from(g.key_type(&k)?.is_some())
                            - i64::from(store.kind_at(&k, g.clock())?.is_some());
                    }
                }
                Reply::Integer(n)
            }
            // A draw from the applied state among the keys live as this group sees them
            // (its deletions and deadlines count); when there is none, one of the keys
            // this group wrote that are live (the transaction's own writes, or earlier
            // commands' of the same group), picked at random.
            Command::RandomKey => {
                let live = |k: &[u8]| Ok(g.key_type(k)?.is_some());
                match store.random_key(live)? {
                    Some(k) => Reply::Bulk(k),
                    None => {
                        let mut written = Vec::new();
                        for k in g.written_top_keys() {
                            if live(&k)? {
                                written.push(k);
                            }
                        }
                        if written.is_empty() {
                            Reply::Null
                        } else {
                            let i = store::Picker::new().below(written.len() as u64) as usize;
                            Reply::Bulk(Bytes::from(written.swap_remove(i)))
                        }
                    }
                }
            }
            Command::Collection(c) => crate::collections::read(g, c, proto),
            other => read_one(store, metrics, other, proto),
        })
    })();
    r.unwrap_or_else(|e| err(&e))
}

/// ZRANGEBYSCORE's LIMIT as (offset, most members; `None`: no bound); `None` when the
/// offset is negative (Redis then answers an empty array).
fn limit_window(limit: Option<(i64, i64)>) -> Option<(usize, Option<usize>)> {
    match limit {
        Some((o, _)) if o < 0 => None,
        Some((o, c)) => Some((usize::try_from(o).ok()?, usize::try_from(c).ok())),
        None => Some((0, None)),
    }
}

/// ZRANGEBYSCORE's reply: members, with their scores after each (RESP2) or paired (RESP3)
/// when `withscores`.
fn scored_members(
    found: impl IntoIterator<Item = (Bytes, f64)>,
    withscores: bool,
    proto: Protocol,
) -> Reply {
    let mut items = Vec::new();
    for (m, s) in found {
        if withscores && proto == Protocol::Resp3 {
            items.push(Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)]));
        } else {
            items.push(Reply::Bulk(m));
            if withscores {
                items.push(Reply::Double(s));
            }
        }
    }
    Reply::Array(items)
}

/// GETRANGE's Redis semantics: negative offsets from the end, clamped, empty when crossed.
fn get_range(v: Bytes, start: i64, end: i64) -> Bytes {
    let len = v.len() as i64;
    if len == 0 {
        return Bytes::new();
    }
    let norm = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (s, e) = (norm(start), norm(end).min(len - 1));
    if start < 0 && end < 0 && start > end || s > e {
        return Bytes::new();
    }
    v.slice(s as usize..=e as usize)
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
    // Held whenever this thread has work (see `try_write_now`).
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
            // this waits (see `try_write_now`); the gate is held again before anything
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

#[cfg(test)]
mod tests {
    use super::get_range;
    use bytes::Bytes;

    #[test]
    fn get_range_follows_redis() {
        let v = Bytes::from_static(b"This is a string");
        assert_eq!(&get_range(v.clone(), 0, 3)[..], b"This");
        assert_eq!(&get_range(v.clone(), -3, -1)[..], b"ing");
        assert_eq!(&get_range(v.clone(), 0, -1)[..], b"This is a string");
        assert_eq!(&get_range(v.clone(), 10, 100)[..], b"string");
        assert_eq!(&get_range(v.clone(), 5, 3)[..], b"");
        assert_eq!(&get_range(v, -1, -5)[..], b"");
        assert_eq!(&get_range(Bytes::new(), 0, -1)[..], b"");
    }
}
