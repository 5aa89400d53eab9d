//! The reading side of the worker threads: `ls-engine`'s loop (GET and MGET batches, key
//! reads and ranges started without waiting for the device), the reads `ls-net` answers from
//! DRAM or starts itself ([`read_here`]), and reads inside a transaction against its write
//! group.

use super::*;

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

/// What one GET / MGET of a batch waits for.
#[derive(Clone, Copy)]
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
    let mut typed: Vec<usize> = Vec::new();
    let mut shapes: Vec<(u64, u64, GetShape)> = Vec::with_capacity(gets.len());
    for j in &gets {
        let shape = match &j.cmd {
            Command::Get(k) => {
                typed.push(keys.len());
                keys.push(k);
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

/// What [`read_here`] did with a command.
pub enum ReadHere {
    /// Answered from DRAM (or refused: an error reply).
    Answered(Reply),
    /// Its read is reserved and pushed onto `reads`: once the caller submits them
    /// ([`lsm::Engine::submit_reads`], all of a turn's at once), the reply reaches the sink
    /// as `Done { conn, seq }` from the engine's poller thread.
    Started,
    /// Not a read started here (another command, or no room in the engine's window of
    /// asynchronous reads): it goes to the engine thread.
    Elsewhere,
    /// A GET or MGET to join its connection's [`GetBatch`] (a cold GET with more requests
    /// queued behind it, an MGET that needs the device, or either while the batch is open).
    Batch,
}

/// What a GET's connection has around it, which decides where its read goes when DRAM
/// cannot answer it (see [`read_here`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetBatching {
    /// Nothing parsed behind it and no batch open: a cold GET starts its read alone.
    Alone,
    /// More requests of its connection are parsed behind it: a cold GET opens a batch.
    Queued,
    /// Its connection has a batch open: every GET and MGET joins it, hot or cold, so none
    /// resolves in an earlier view than one before it.
    Open,
}

/// The GETs and MGETs of one connection's pipeline, gathered on the network thread and
/// resolved together in one view ([`start_get_batch`]) once a request of another command
/// comes, the batch holds [`GET_BATCH_KEYS`] keys, or the connection's parsed requests run
/// out. One lookup, one reservation in the
/// read window and one reply callback serve them all, as a batch on the engine thread would,
/// without handing them to another thread (and without sending the rest of the pipeline,
/// hot reads included, after them).
pub struct GetBatch {
    conn: u64,
    /// Every key read, the requests' in order.
    keys: Vec<Bytes>,
    /// Per request: its number on the connection and how many keys it read (GET: one, and
    /// its type is checked too; MGET: its keys').
    requests: Vec<(u64, GetShape)>,
    /// Indexes in `keys` of the GETs' keys (their WRONGTYPE check).
    typed: Vec<usize>,
}

/// Keys a [`GetBatch`] takes at most (the window of asynchronous reads: a larger batch
/// could not start at once); an MGET of more goes to the engine thread.
pub const GET_BATCH_KEYS: usize = lsm::ASYNC_READ_WINDOW;

impl GetBatch {
    /// Whether a request of `keys` more keys may join (see [`GET_BATCH_KEYS`]).
    pub fn has_room(&self, keys: usize) -> bool {
        self.keys.len() + keys <= GET_BATCH_KEYS
    }

    /// An empty batch for connection `conn`.
    pub fn new(conn: u64) -> Self {
        Self {
            conn,
            keys: Vec::new(),
            requests: Vec::new(),
            typed: Vec::new(),
        }
    }

    /// The connection the batch belongs to.
    pub fn conn(&self) -> u64 {
        self.conn
    }

    /// Adds the GET of `key`, request number `seq` of the connection.
    pub fn push_get(&mut self, seq: u64, key: Bytes) {
        self.typed.push(self.keys.len());
        self.keys.push(key);
        self.requests.push((seq, GetShape::One));
    }

    /// Adds the MGET of `keys`, request number `seq` of the connection.
    pub fn push_mget(&mut self, seq: u64, keys: Vec<Bytes>) {
        self.requests.push((seq, GetShape::Many(keys.len())));
        self.keys.extend(keys);
    }

    /// The requests as jobs for the engine thread, in order.
    fn into_jobs(self, proto: Protocol) -> Vec<Job> {
        let conn = self.conn;
        let mut keys = self.keys.into_iter();
        self.requests
            .into_iter()
            .map(|(seq, shape)| {
                let cmd = match shape {
                    GetShape::One => Command::Get(keys.next().unwrap_or_default()),
                    GetShape::Many(n) => Command::MGet(keys.by_ref().take(n).collect()),
                };
                Job {
                    conn,
                    proto,
                    cmd,
                    seq,
                    tx: None,
                    block: None,
                }
            })
            .collect()
    }
}

/// What [`start_get_batch`] did.
pub enum GetBatchStart {
    /// DRAM held every value: the replies, in request order.
    Answered(Vec<Done>),
    /// The page reads are reserved and pushed onto the caller's reads (submitted with the
    /// turn's others); the replies of this many requests reach the sink once their pages are
    /// in (from the network thread's own read queue, or the engine's poller).
    Started(usize),
    /// No room in the window of asynchronous reads: the requests as jobs for the engine
    /// thread.
    Elsewhere(Vec<Job>),
}

/// Resolves a connection's [`GetBatch`] now, in one view of the engine: answered from DRAM,
/// or its page reads reserved for the caller to submit, or (read window full) handed back as
/// jobs for the engine thread.
pub fn start_get_batch(
    store: &Store,
    metrics: &Arc<Metrics>,
    batch: GetBatch,
    proto: Protocol,
    sink: &ReplySink,
    reads: &mut Vec<lsm::ReservedRead>,
) -> GetBatchStart {
    // A value of up to a page (the common one) is one page read: a batch the window cannot
    // take goes to the engine thread, which waits for room, without being resolved here
    // first.
    if !store.engine().read_window_fits(batch.keys.len()) {
        return GetBatchStart::Elsewhere(batch.into_jobs(proto));
    }
    let conn = batch.conn;
    let shapes: Vec<(u64, u64, GetShape)> = batch
        .requests
        .iter()
        .map(|&(seq, shape)| (conn, seq, shape))
        .collect();
    let keys: Vec<&[u8]> = batch.keys.iter().map(|k| &k[..]).collect();
    match store.get_strings_here(&keys, &batch.typed) {
        Err(e) => GetBatchStart::Answered(answer_gets(shapes, Err(e), &[], metrics)),
        Ok(Here::Answered((values, other_type))) => {
            GetBatchStart::Answered(answer_gets(shapes, Ok(values), &other_type, metrics))
        }
        Ok(Here::Pending(p)) => {
            let n = shapes.len();
            let (metrics, sink) = (metrics.clone(), sink.clone());
            let done: crate::store::read::OnStrings = Box::new(move |values, other_type| {
                sink.send_all(answer_gets(shapes, values, &other_type, &metrics));
            });
            match p.reserve(done) {
                Ok(read) => {
                    reads.push(read);
                    GetBatchStart::Started(n)
                }
                Err(lsm::ReadWindowFull) => GetBatchStart::Elsewhere(batch.into_jobs(proto)),
            }
        }
    }
}

/// Runs a reading command on the network thread when it can without waiting: answered from
/// DRAM when DRAM holds all it needs (its keys' records in the keytables and memtables,
/// its value pages in the value cache or the landing buffer), including the short commands
/// answered from DRAM alone (STRLEN, EXISTS, HEXISTS, ZRANGEBYSCORE, TTL family, TYPE);
/// otherwise, for the one-key reads of [`key_read_plan`] (GET, HGET, HMGET, HGETALL, ZSCORE,
/// ...), resolved here once and its page reads reserved for the caller to submit, the reply
/// following once its pages are in (the caller's own read queue, or the poller). So a hot read costs no hand-off to another thread, as
/// in redis-server, and a cold one neither a hand-off nor a second resolution.
/// [`ReadHere::Batch`] for a GET or MGET that joins its connection's [`GetBatch`]
/// (`batching`: a cold GET with more requests queued behind it, an MGET that needs the
/// device, or any GET or MGET while the batch is open; one lookup for a pipeline's GETs is
/// cheaper per GET than one each). [`ReadHere::Elsewhere`] for other commands (SCAN,
/// DBSIZE, INFO, LS.RANGE), and when the read window is full.
pub fn read_here(
    store: &Store,
    metrics: &Arc<Metrics>,
    cmd: &Command,
    (conn, seq, proto): (u64, u64, Protocol),
    batching: GetBatching,
    sink: &ReplySink,
    reads: &mut Vec<lsm::ReservedRead>,
) -> ReadHere {
    let answered = |reply: Reply| {
        count_reply_copy(metrics, &reply);
        ReadHere::Answered(reply)
    };
    if matches!(
        cmd,
        Command::Strlen(_)
            | Command::Exists(_)
            | Command::HExists { .. }
            | Command::ZRangeByScore { .. }
            | Command::Ttl { .. }
            | Command::Type(_)
    ) {
        return answered(read_one(store, metrics, cmd, proto));
    }
    let is_get = matches!(cmd, Command::Get(_) | Command::MGet(_));
    // A GET's plan is made only once its key proved cold (below).
    let plan = if is_get { None } else { key_read_plan(cmd) };
    if !is_get && plan.is_none() {
        return ReadHere::Elsewhere;
    }
    // A key of a slot being handed over may have left: asked of the drive taking it.
    if let Some(reply) = store
        .migrations
        .redirect(cmd, |k| store.kind(k).ok().flatten().is_some())
    {
        return ReadHere::Answered(reply);
    }
    let reply_to = move |reply: Reply, metrics: &Metrics, sink: &ReplySink| {
        count_reply_copy(metrics, &reply);
        sink.send_all(vec![Done { conn, seq, reply }]);
    };
    let plan = match (cmd, plan) {
        // A GET joins its connection's open batch, hot or cold. Otherwise a cold GET starts
        // here alone when it is its connection's last request so far (a client waiting
        // for each reply), or opens a batch when more requests are queued behind it.
        (Command::Get(_), _) if batching == GetBatching::Open => return ReadHere::Batch,
        // Resolved once: a cold GET's read starts from this resolution.
        (Command::Get(key), _) => match store.get_string_now(key) {
            Err(e) => return answered(err(&e)),
            Ok(crate::store::StringGet::Hot(v)) => return answered(Reply::Bulk(v)),
            Ok(crate::store::StringGet::Missing { other_type }) => {
                return answered(get_reply(None, &[other_type]))
            }
            Ok(_) if batching == GetBatching::Queued => return ReadHere::Batch,
            Ok(crate::store::StringGet::Cold(p)) => {
                let Some(plan) = key_read_plan(cmd) else {
                    return ReadHere::Elsewhere;
                };
                let (metrics, sink) = (metrics.clone(), sink.clone());
                let (finish, tag) = (plan.finish, plan.tag);
                let started = p.reserve(Box::new(move |r| {
                    reply_to(KeyReadPlan::reply(finish, tag, r), &metrics, &sink);
                }));
                return started_here(started, reads);
            }
            Ok(crate::store::StringGet::Other) => key_read_plan(cmd),
        },
        // An MGET joins its connection's open batch; one that needs the device opens one.
        (Command::MGet(keys), _)
            if batching == GetBatching::Open && keys.len() <= GET_BATCH_KEYS =>
        {
            return ReadHere::Batch
        }
        (Command::MGet(keys), _) => {
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            return match store.get_strings_cached(&refs, &[]) {
                Err(e) => answered(err(&e)),
                Ok(Some((values, _))) => {
                    answered(Reply::Array(values.into_iter().map(bulk_or_null).collect()))
                }
                Ok(None) if keys.len() <= GET_BATCH_KEYS => ReadHere::Batch,
                Ok(None) => ReadHere::Elsewhere,
            };
        }
        (_, plan) => plan,
    };
    let Some(plan) = plan else {
        return ReadHere::Elsewhere;
    };
    let what = KeyReadPlan::what(plan.read, &plan.names);
    let started = match store.read_key_here(plan.key, &what) {
        Err(e) => return answered(KeyReadPlan::reply(plan.finish, plan.tag, Err(e))),
        Ok(Here::Answered(found)) => {
            return answered(KeyReadPlan::reply(plan.finish, plan.tag, Ok(found)));
        }
        Ok(Here::Pending(p)) => {
            let (metrics, sink) = (metrics.clone(), sink.clone());
            let (finish, tag) = (plan.finish, plan.tag);
            p.reserve(Box::new(move |r| {
                reply_to(KeyReadPlan::reply(finish, tag, r), &metrics, &sink);
            }))
        }
    };
    started_here(started, reads)
}

/// A read reserved here: collected to be submitted with the others, or, with the read
/// window full, left to the engine thread (which may wait for room).
fn started_here(
    started: std::result::Result<lsm::ReservedRead, lsm::ReadWindowFull>,
    reads: &mut Vec<lsm::ReservedRead>,
) -> ReadHere {
    match started {
        Ok(read) => {
            reads.push(read);
            ReadHere::Started
        }
        Err(lsm::ReadWindowFull) => ReadHere::Elsewhere,
    }
}

/// GET's reply: the value, else WRONGTYPE when the key holds another type, else nil.
fn get_reply(value: Option<Bytes>, other_type: &[bool]) -> Reply {
    match value {
        Some(v) => Reply::Bulk(v),
        None if other_type.first().copied().unwrap_or(false) => err(&StoreError::WrongType),
        None => Reply::Null,
    }
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
                    get_reply(vals.next().flatten(), &[wrong])
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

pub(super) fn read_one(store: &Store, metrics: &Metrics, cmd: &Command, proto: Protocol) -> Reply {
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
pub(super) fn read_in_group(
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
    crate::collections::scored(found, withscores, proto == Protocol::Resp3)
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
