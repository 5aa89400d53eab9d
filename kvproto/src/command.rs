//! The typed [`Command`] enum (`parse` -> apply in the firmware) and the command table.
//!
//! Parsing checks arity, options and numbers and produces Redis 7's error texts, so a
//! client sees the same `-ERR ...` lines it would from `redis-server`. Arguments stay
//! [`Bytes`] views of the request buffer.

use bytes::Bytes;

mod table;
pub mod types;

pub use table::{lookup, CommandSpec, COMMANDS};
pub use types::Collection;

/// A request that is not a valid command. `Display` is the full error reply text
/// (`ERR ...`, `WRONGTYPE ...`), ready for [`crate::Reply::error`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CommandError(pub String);

fn err(text: &str) -> CommandError {
    CommandError(text.to_owned())
}

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const SYNTAX: &str = "ERR syntax error";

/// When a SET expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expire {
    /// `EX seconds` from now.
    Ex(u64),
    /// `PX milliseconds` from now.
    Px(u64),
    /// `EXAT unix-seconds`.
    ExAt(u64),
    /// `PXAT unix-milliseconds`.
    PxAt(u64),
}

/// SET's `NX` / `XX` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCondition {
    /// Only if the key does not exist.
    Nx,
    /// Only if the key exists.
    Xx,
}

/// EXPIRE's `NX` / `XX` / `GT` / `LT` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireCondition {
    /// Only if the key has no deadline.
    Nx,
    /// Only if the key has a deadline.
    Xx,
    /// Only if the new deadline is later (a key without one counts as never expiring).
    Gt,
    /// Only if the new deadline is earlier (a key without one counts as never expiring).
    Lt,
}

/// What TTL-like command asks for a key's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlKind {
    /// `TTL`: seconds left (rounded).
    Ttl,
    /// `PTTL`: milliseconds left.
    Pttl,
    /// `EXPIRETIME`: the deadline in unix seconds.
    ExpireTime,
    /// `PEXPIRETIME`: the deadline in unix milliseconds.
    PExpireTime,
}

/// One end of a `ZRANGEBYSCORE` interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScoreBound {
    /// `-inf`.
    NegInf,
    /// `+inf`.
    PosInf,
    /// `score`: the bound is included.
    Inclusive(f64),
    /// `(score`: the bound is excluded.
    Exclusive(f64),
}

/// MIGRATE's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrate {
    /// Target host, as given.
    pub host: Bytes,
    /// Target port, as given (checked when connecting, as Redis does).
    pub port: Bytes,
    /// The keys to move (one, or the KEYS list).
    pub keys: Vec<Bytes>,
    /// The target's database.
    pub db: i64,
    /// Connect and I/O timeout, milliseconds (1000 when not above 0, as in Redis).
    pub timeout_ms: u64,
    /// Keep the keys here.
    pub copy: bool,
    /// Overwrite keys that exist on the target.
    pub replace: bool,
    /// AUTH password or AUTH2 username and password for the target.
    pub auth: Option<(Option<Bytes>, Bytes)>,
    /// `REPLICA host port`, repeatable (a LightStore extension, not in Redis): drives that
    /// replicate the target. Each gets a copy of the keys (always replacing) before the
    /// target does, in the same step, so a slot moved between drives with client-side
    /// replication arrives on the target's replicas too (docs/CLUSTER.md).
    pub replicas: Vec<(Bytes, Bytes)>,
}

/// ZADD's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(clippy::struct_excessive_bools)]
pub struct ZAddOptions {
    /// Only add new members.
    pub nx: bool,
    /// Only update existing members.
    pub xx: bool,
    /// Only update when the new score is greater.
    pub gt: bool,
    /// Only update when the new score is less.
    pub lt: bool,
    /// Reply with added + changed instead of added.
    pub ch: bool,
    /// Increment the score (ZINCRBY semantics); reply with the new score.
    pub incr: bool,
}

/// A client class, as `CLIENT KILL TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientType {
    /// `normal`: a client that is not subscribed.
    Normal,
    /// `master`: a replication primary (the drive has none).
    Master,
    /// `replica` / `slave`: a replica (the drive has none).
    Replica,
    /// `pubsub`: a client subscribed to a channel or pattern.
    PubSub,
}

/// Which clients `CLIENT KILL` closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientKill {
    /// The old form `CLIENT KILL ip:port`: replies `+OK`, or an error when no client has
    /// that address.
    Addr(Bytes),
    /// The filter form: replies the number of clients closed.
    Filters(ClientKillFilters),
}

/// The filters of `CLIENT KILL <filter> <value> ...` (every given filter must match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientKillFilters {
    /// `ID n`.
    pub id: Option<u64>,
    /// `TYPE normal|master|replica|slave|pubsub`.
    pub kind: Option<ClientType>,
    /// `ADDR ip:port`: the client's address.
    pub addr: Option<Bytes>,
    /// `LADDR ip:port`: the drive's address the client connected to.
    pub laddr: Option<Bytes>,
    /// `USER name` (checked against the users by the drive).
    pub user: Option<Bytes>,
    /// `SKIPME yes|no` (default yes): leave the calling client alone.
    pub skipme: bool,
}

/// A parsed command.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // Variants are the Redis commands of the same name.
pub enum Command {
    Ping(Option<Bytes>),
    Echo(Bytes),
    Hello {
        protover: Option<i64>,
        auth: Option<(Bytes, Bytes)>,
        setname: Option<Bytes>,
    },
    Auth {
        username: Option<Bytes>,
        password: Bytes,
    },
    Select(i64),
    Quit,
    /// `ACL WHOAMI`: the connection's user.
    AclWhoami,
    /// `ACL USERS`: every user's name.
    AclUsers,
    /// `ACL LIST`: every user's rules.
    AclList,
    Get(Bytes),
    Set {
        key: Bytes,
        value: Bytes,
        expire: Option<Expire>,
        condition: Option<SetCondition>,
        keep_ttl: bool,
        get: bool,
    },
    MGet(Vec<Bytes>),
    MSet(Vec<(Bytes, Bytes)>),
    Del(Vec<Bytes>),
    Exists(Vec<Bytes>),
    Strlen(Bytes),
    GetRange {
        key: Bytes,
        start: i64,
        end: i64,
    },
    /// INCR, DECR, INCRBY and DECRBY.
    IncrBy {
        key: Bytes,
        delta: i64,
    },
    Scan {
        cursor: u64,
        pattern: Option<Bytes>,
        count: Option<u64>,
        kind: Option<Bytes>,
    },
    DbSize,
    /// RANDOMKEY: a live key drawn at random (nil: no key).
    RandomKey,
    FlushAll,
    Info(Vec<Bytes>),
    ConfigGet(Vec<Bytes>),
    ConfigSet(Vec<(Bytes, Bytes)>),
    ConfigResetStat,
    CommandCount,
    CommandDocs(Vec<Bytes>),
    /// `COMMAND` (empty list: every command) and `COMMAND INFO`.
    CommandInfo(Vec<Bytes>),
    CommandList,
    /// `COMMAND GETKEYS command arg...`: the keys that command names (see
    /// [`command_keys`]).
    CommandGetKeys(Vec<Bytes>),
    ClientSetName(Bytes),
    ClientGetName,
    ClientSetInfo {
        attr: Bytes,
        value: Bytes,
    },
    ClientId,
    ClientInfo,
    ClientList,
    // Pub/sub, RESET, CLIENT KILL / NO-EVICT / NO-TOUCH and SLOWLOG (served on `ls-net`).
    /// `SUBSCRIBE channel...`.
    Subscribe(Vec<Bytes>),
    /// `UNSUBSCRIBE [channel...]` (none: every channel).
    Unsubscribe(Vec<Bytes>),
    /// `PSUBSCRIBE pattern...`.
    PSubscribe(Vec<Bytes>),
    /// `PUNSUBSCRIBE [pattern...]` (none: every pattern).
    PUnsubscribe(Vec<Bytes>),
    /// `PUBLISH channel message`.
    Publish {
        channel: Bytes,
        message: Bytes,
    },
    /// `PUBSUB CHANNELS [pattern]`.
    PubSubChannels(Option<Bytes>),
    /// `PUBSUB NUMSUB [channel...]`.
    PubSubNumSub(Vec<Bytes>),
    /// `PUBSUB NUMPAT`.
    PubSubNumPat,
    /// `RESET`: the connection back to its state at connect.
    Reset,
    /// `CLIENT KILL ...`.
    ClientKill(ClientKill),
    /// `CLIENT NO-EVICT on|off`.
    ClientNoEvict(bool),
    /// `CLIENT NO-TOUCH on|off`.
    ClientNoTouch(bool),
    /// `CLIENT PAUSE milliseconds [WRITE|ALL]` (`all`: ALL, the default).
    ClientPause {
        millis: u64,
        all: bool,
    },
    /// `CLIENT UNPAUSE`.
    ClientUnpause,
    /// `CLIENT UNBLOCK id [TIMEOUT | ERROR]`: ends a blocking command's wait with nil (as
    /// its timeout would) or with `-UNBLOCKED` (`error`).
    ClientUnblock {
        /// The blocked client's id.
        id: i64,
        /// ERROR rather than TIMEOUT.
        error: bool,
    },
    /// `SLOWLOG GET [count]` (`None`: Redis's default of 10; `-1`: every entry).
    SlowlogGet(Option<i64>),
    /// `SLOWLOG LEN`.
    SlowlogLen,
    /// `SLOWLOG RESET`.
    SlowlogReset,
    /// `LATENCY LATEST`.
    LatencyLatest,
    /// `LATENCY HISTORY event`.
    LatencyHistory(Bytes),
    /// `LATENCY RESET [event...]` (none: every event).
    LatencyReset(Vec<Bytes>),
    Shutdown {
        nosave: bool,
    },
    /// HSET and HMSET (`hmset` replies `+OK`).
    HSet {
        key: Bytes,
        pairs: Vec<(Bytes, Bytes)>,
        hmset: bool,
    },
    HGet {
        key: Bytes,
        field: Bytes,
    },
    HMGet {
        key: Bytes,
        fields: Vec<Bytes>,
    },
    HGetAll(Bytes),
    HDel {
        key: Bytes,
        fields: Vec<Bytes>,
    },
    HLen(Bytes),
    HExists {
        key: Bytes,
        field: Bytes,
    },
    ZAdd {
        key: Bytes,
        options: ZAddOptions,
        members: Vec<(f64, Bytes)>,
    },
    ZRem {
        key: Bytes,
        members: Vec<Bytes>,
    },
    ZScore {
        key: Bytes,
        member: Bytes,
    },
    ZCard(Bytes),
    ZRangeByScore {
        key: Bytes,
        min: ScoreBound,
        max: ScoreBound,
        withscores: bool,
        limit: Option<(i64, i64)>,
    },
    /// `CLUSTER <args>`: the arguments after `CLUSTER`.
    Cluster(Vec<Bytes>),
    /// `LS.RANGE start end [COUNT n]`: the drive's ordered range read over string keys,
    /// `start <= key < end` in byte order (an empty `end` means no upper bound), at most
    /// `count` pairs.
    Range {
        start: Bytes,
        end: Bytes,
        count: u64,
    },
    Readonly,
    Readwrite,
    /// `MULTI`: starts queueing the connection's commands.
    Multi,
    /// `EXEC`: runs the queued commands as one atomic batch.
    Exec,
    /// `DISCARD`: drops the queued commands.
    Discard,
    /// `WATCH key...`: EXEC aborts if another write changes one of them first.
    Watch(Vec<Bytes>),
    /// `UNWATCH`.
    Unwatch,
    /// EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT.
    Expire {
        key: Bytes,
        /// Milliseconds: from now (`absolute == false`) or since the epoch.
        when: i64,
        absolute: bool,
        condition: Option<ExpireCondition>,
        /// The command's name, for its `invalid expire time` error.
        name: &'static str,
    },
    /// TTL, PTTL, EXPIRETIME and PEXPIRETIME.
    Ttl {
        key: Bytes,
        kind: TtlKind,
    },
    Persist(Bytes),
    /// `GETEX key [EX|PX|EXAT|PXAT n | PERSIST]`.
    GetEx {
        key: Bytes,
        expire: Option<Expire>,
        persist: bool,
        /// An expiry amount that is not a valid time: Redis reports it only for a key that
        /// exists and holds a string, so it is kept for the writer to answer.
        expire_error: Option<CommandError>,
    },
    /// `SETNX key value` (replies 1 or 0).
    SetNx {
        key: Bytes,
        value: Bytes,
    },
    GetDel(Bytes),
    Append {
        key: Bytes,
        value: Bytes,
    },
    /// `SETRANGE key offset value` (the offset checked: an integer, not negative).
    SetRange {
        key: Bytes,
        offset: u64,
        value: Bytes,
    },
    /// `MSETNX key value [key value ...]`: all or none, only when no key exists.
    MSetNx(Vec<(Bytes, Bytes)>),
    /// `INCRBYFLOAT key increment` (the increment is checked where Redis checks it: after
    /// the key's type and value, so it travels as text).
    IncrByFloat {
        key: Bytes,
        delta: Bytes,
    },
    /// `DUMP key`: the value as a Redis payload.
    Dump(Bytes),
    /// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]` (and
    /// RESTORE-ASKING, which MIGRATE sends in cluster mode). The TTL travels as text: Redis
    /// checks it after the key's existence. IDLETIME and FREQ are checked and ignored (the
    /// drive keeps no LRU or LFU state).
    Restore {
        key: Bytes,
        ttl: Bytes,
        payload: Bytes,
        replace: bool,
        absttl: bool,
        /// RESTORE-ASKING: served on a slot this drive is importing without ASKING.
        asking: bool,
    },
    /// `ASKING`: the connection's next command may touch a slot this drive is importing.
    Asking,
    /// `MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw]
    /// [KEYS key ...]`: moves keys to another server with RESTORE-ASKING.
    Migrate(Box<Migrate>),
    /// `CLUSTER COUNTKEYSINSLOT slot` (`count` is `None`) and `CLUSTER GETKEYSINSLOT slot
    /// count`: answered from the keyspace on the engine thread, not from the cluster map.
    KeysInSlot {
        slot: u16,
        count: Option<u64>,
    },
    /// `COPY source destination [DB 0] [REPLACE]`.
    Copy {
        source: Bytes,
        destination: Bytes,
        replace: bool,
    },
    Type(Bytes),
    /// RENAME (`nx == false`) and RENAMENX.
    Rename {
        key: Bytes,
        new_key: Bytes,
        nx: bool,
    },
    /// `KEYS pattern`.
    Keys(Bytes),
    /// The set commands and the rest of the hash and sorted-set commands ([`types`]).
    Collection(Collection),
}

/// Parses a Redis integer as `string2ll` does: optional `-`, no `+`, no leading zeros.
#[must_use]
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if neg {
        if v == 1 << 63 {
            Some(i64::MIN)
        } else {
            i64::try_from(v).ok().map(|v| -v)
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// Parses a Redis float (`strtod` without spaces); `inf` is accepted, NaN is not.
#[must_use]
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(s).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

fn int(s: &[u8]) -> Result<i64, CommandError> {
    parse_i64(s).ok_or_else(|| err(NOT_INTEGER))
}

fn lower(s: &[u8]) -> Vec<u8> {
    s.to_ascii_lowercase()
}

/// `ERR wrong number of arguments for 'name' command`.
/// `COPY source destination [DB index] [REPLACE]`: the drive has database 0 only.
fn parse_copy(a: &[Bytes]) -> Result<Command, CommandError> {
    let mut replace = false;
    let mut i = 2;
    while i < a.len() {
        let opt = lower(&a[i]);
        if opt == b"replace" {
            replace = true;
            i += 1;
        } else if opt == b"db" && i + 1 < a.len() {
            // Any database but 0 is out of the drive's range (it has one).
            if int(&a[i + 1])? != 0 {
                return Err(err("ERR DB index is out of range"));
            }
            i += 2;
        } else {
            return Err(err(SYNTAX));
        }
    }
    if a[0] == a[1] {
        return Err(err("ERR source and destination objects are the same"));
    }
    Ok(Command::Copy {
        source: a[0].clone(),
        destination: a[1].clone(),
        replace,
    })
}

/// MIGRATE's arguments, checked as Redis checks them.
fn parse_migrate(a: &[Bytes]) -> Result<Command, CommandError> {
    let (mut copy, mut replace, mut auth) = (false, false, None);
    let mut replicas = Vec::new();
    let mut keys = if a[2].is_empty() {
        Vec::new()
    } else {
        vec![a[2].clone()]
    };
    let mut j = 5;
    while j < a.len() {
        let opt = lower(&a[j]);
        let more = a.len() - j - 1;
        if opt == b"copy" {
            copy = true;
        } else if opt == b"replace" {
            replace = true;
        } else if opt == b"auth" && more >= 1 {
            auth = Some((None, a[j + 1].clone()));
            j += 1;
        } else if opt == b"auth2" && more >= 2 {
            auth = Some((Some(a[j + 1].clone()), a[j + 2].clone()));
            j += 2;
        } else if opt == b"replica" && more >= 2 {
            replicas.push((a[j + 1].clone(), a[j + 2].clone()));
            j += 2;
        } else if opt == b"keys" {
            if !a[2].is_empty() {
                return Err(err(
                    "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            keys = a[j + 1..].to_vec();
            break;
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    let timeout = int(&a[4])?;
    let db = int(&a[3])?;
    Ok(Command::Migrate(Box::new(Migrate {
        host: a[0].clone(),
        port: a[1].clone(),
        keys,
        db,
        timeout_ms: if timeout <= 0 { 1000 } else { timeout as u64 },
        copy,
        replace,
        auth,
        replicas,
    })))
}

/// RESTORE's options, checked as Redis checks them (before the key, the TTL and the payload).
fn parse_restore(a: &[Bytes], asking: bool) -> Result<Command, CommandError> {
    let (mut replace, mut absttl) = (false, false);
    let (mut idletime, mut freq) = (false, false);
    let mut i = 3;
    while i < a.len() {
        let opt = lower(&a[i]);
        let more = i + 1 < a.len();
        if opt == b"replace" {
            replace = true;
        } else if opt == b"absttl" {
            absttl = true;
        } else if opt == b"idletime" && more && !freq {
            if int(&a[i + 1])? < 0 {
                return Err(err("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idletime = true;
            i += 1;
        } else if opt == b"freq" && more && !idletime {
            if !(0..=255).contains(&int(&a[i + 1])?) {
                return Err(err("ERR Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = true;
            i += 1;
        } else {
            return Err(err(SYNTAX));
        }
        i += 1;
    }
    Ok(Command::Restore {
        key: a[0].clone(),
        ttl: a[1].clone(),
        payload: a[2].clone(),
        replace,
        absttl,
        asking,
    })
}

/// `CLUSTER COUNTKEYSINSLOT slot` and `CLUSTER GETKEYSINSLOT slot count`, with Redis's
/// checks; `None` for any other CLUSTER subcommand.
fn parse_keys_in_slot(a: &[Bytes]) -> Option<Result<Command, CommandError>> {
    let sub = lower(a.first()?);
    let get = match sub.as_slice() {
        b"countkeysinslot" => false,
        b"getkeysinslot" => true,
        _ => return None,
    };
    Some((|| {
        let want = if get { 3 } else { 2 };
        if a.len() != want {
            let name = String::from_utf8_lossy(&sub).into_owned();
            return Err(CommandError(format!(
                "ERR wrong number of arguments for 'cluster|{name}' command"
            )));
        }
        let slot = int(&a[1])?;
        let count = if get { Some(int(&a[2])?) } else { None };
        let slot = u16::try_from(slot)
            .ok()
            .filter(|s| *s < crate::cluster::SLOT_COUNT);
        match (slot, count) {
            (Some(slot), None) => Ok(Command::KeysInSlot { slot, count: None }),
            (Some(slot), Some(n)) if n >= 0 => Ok(Command::KeysInSlot {
                slot,
                count: Some(n as u64),
            }),
            _ if get => Err(err("ERR Invalid slot or number of keys")),
            _ => Err(err("ERR Invalid slot")),
        }
    })())
}

fn wrong_args(name: &str) -> CommandError {
    CommandError(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn unknown_subcommand(sub: &[u8], container: &str) -> CommandError {
    CommandError(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)]),
        container
    ))
}

/// Redis 7's unknown-command text, with up to 128 bytes of the first arguments.
fn unknown_command(args: &[Bytes]) -> CommandError {
    let name = args.first().map_or(&b""[..], |n| &n[..]);
    let mut shown = String::new();
    for a in args.iter().skip(1) {
        if shown.len() >= 128 {
            break;
        }
        let room = 128 - shown.len();
        shown.push('\'');
        shown.push_str(&String::from_utf8_lossy(&a[..a.len().min(room)]));
        shown.push_str("' ");
    }
    CommandError(format!(
        "ERR unknown command '{}', with args beginning with: {}",
        String::from_utf8_lossy(&name[..name.len().min(128)]),
        shown
    ))
}

fn pairs(a: &[Bytes]) -> Vec<(Bytes, Bytes)> {
    a.chunks_exact(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

fn score_bound(s: &[u8]) -> Result<ScoreBound, CommandError> {
    let bad = || err("ERR min or max is not a float");
    if let Some(rest) = s.strip_prefix(b"(") {
        let v = parse_f64(rest).ok_or_else(bad)?;
        return Ok(ScoreBound::Exclusive(v));
    }
    match lower(s).as_slice() {
        b"-inf" => Ok(ScoreBound::NegInf),
        b"+inf" | b"inf" => Ok(ScoreBound::PosInf),
        _ => parse_f64(s).map(ScoreBound::Inclusive).ok_or_else(bad),
    }
}

fn parse_set(a: &[Bytes]) -> Result<Command, CommandError> {
    let mut expire = None;
    let mut condition = None;
    let mut keep_ttl = false;
    let mut get = false;
    let mut i = 2;
    while i < a.len() {
        let opt = lower(&a[i]);
        let next = a.get(i + 1);
        match opt.as_slice() {
            b"nx" if condition.is_none() => condition = Some(SetCondition::Nx),
            b"xx" if condition.is_none() => condition = Some(SetCondition::Xx),
            b"get" => get = true,
            b"keepttl" if expire.is_none() => keep_ttl = true,
            b"ex" | b"px" | b"exat" | b"pxat" if expire.is_none() && !keep_ttl => {
                let Some(v) = next else {
                    return Err(err(SYNTAX));
                };
                let seconds = matches!(opt.as_slice(), b"ex" | b"exat");
                let relative = matches!(opt.as_slice(), b"ex" | b"px");
                let n = expire_amount(v, seconds, relative, "set")?;
                expire = Some(match opt.as_slice() {
                    b"ex" => Expire::Ex(n),
                    b"px" => Expire::Px(n),
                    b"exat" => Expire::ExAt(n),
                    _ => Expire::PxAt(n),
                });
                i += 1;
            }
            _ => return Err(err(SYNTAX)),
        }
        i += 1;
    }
    Ok(Command::Set {
        key: a[0].clone(),
        value: a[1].clone(),
        expire,
        condition,
        keep_ttl,
        get,
    })
}

fn parse_scan(a: &[Bytes]) -> Result<Command, CommandError> {
    let cursor = std::str::from_utf8(&a[0])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| err("ERR invalid cursor"))?;
    let (mut pattern, mut count, mut kind) = (None, None, None);
    let mut i = 1;
    while i < a.len() {
        let Some(v) = a.get(i + 1) else {
            return Err(err(SYNTAX));
        };
        match lower(&a[i]).as_slice() {
            b"match" => pattern = Some(v.clone()),
            b"count" => {
                let n = int(v)?;
                count = Some(
                    u64::try_from(n)
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| err(SYNTAX))?,
                );
            }
            b"type" => kind = Some(v.clone()),
            _ => return Err(err(SYNTAX)),
        }
        i += 2;
    }
    Ok(Command::Scan {
        cursor,
        pattern,
        count,
        kind,
    })
}

/// Pairs `LS.RANGE` returns when COUNT is not given.
pub const RANGE_DEFAULT_COUNT: u64 = 100;
/// The most pairs one `LS.RANGE` may ask for.
pub const RANGE_MAX_COUNT: u64 = 10_000;

fn parse_range(a: &[Bytes]) -> Result<Command, CommandError> {
    let mut count = RANGE_DEFAULT_COUNT;
    match &a[2..] {
        [] => {}
        [opt, n] if lower(opt) == b"count" => {
            count = u64::try_from(int(n)?)
                .ok()
                .filter(|n| (1..=RANGE_MAX_COUNT).contains(n))
                .ok_or_else(|| {
                    CommandError(format!("ERR COUNT must be between 1 and {RANGE_MAX_COUNT}"))
                })?;
        }
        _ => return Err(err(SYNTAX)),
    }
    Ok(Command::Range {
        start: a[0].clone(),
        end: a[1].clone(),
        count,
    })
}

fn parse_hello(a: &[Bytes]) -> Result<Command, CommandError> {
    let Some(v) = a.first() else {
        return Ok(Command::Hello {
            protover: None,
            auth: None,
            setname: None,
        });
    };
    let protover = parse_i64(v)
        .ok_or_else(|| err("ERR Protocol version is not an integer or out of range"))?;
    let (mut auth, mut setname) = (None, None);
    let mut i = 1;
    while i < a.len() {
        let opt = lower(&a[i]);
        match opt.as_slice() {
            b"auth" if i + 2 < a.len() => {
                auth = Some((a[i + 1].clone(), a[i + 2].clone()));
                i += 3;
            }
            b"setname" if i + 1 < a.len() => {
                setname = Some(a[i + 1].clone());
                i += 2;
            }
            _ => {
                return Err(CommandError(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&a[i])
                )))
            }
        }
    }
    Ok(Command::Hello {
        protover: Some(protover),
        auth,
        setname,
    })
}

fn parse_zadd(a: &[Bytes]) -> Result<Command, CommandError> {
    let mut o = ZAddOptions::default();
    let mut i = 1;
    while i < a.len() {
        match lower(&a[i]).as_slice() {
            b"nx" => o.nx = true,
            b"xx" => o.xx = true,
            b"gt" => o.gt = true,
            b"lt" => o.lt = true,
            b"ch" => o.ch = true,
            b"incr" => o.incr = true,
            _ => break,
        }
        i += 1;
    }
    let rest = &a[i..];
    if rest.is_empty() || rest.len() % 2 != 0 {
        return Err(err(SYNTAX));
    }
    if o.nx && o.xx {
        return Err(err(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if ((o.gt || o.lt) && o.nx) || (o.gt && o.lt) {
        return Err(err(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if o.incr && rest.len() > 2 {
        return Err(err(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let mut members = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks_exact(2) {
        let score = parse_f64(&p[0]).ok_or_else(|| err(NOT_FLOAT))?;
        members.push((score, p[1].clone()));
    }
    Ok(Command::ZAdd {
        key: a[0].clone(),
        options: o,
        members,
    })
}

fn parse_zrangebyscore(a: &[Bytes]) -> Result<Command, CommandError> {
    let min = score_bound(&a[1])?;
    let max = score_bound(&a[2])?;
    let (mut withscores, mut limit) = (false, None);
    let mut i = 3;
    while i < a.len() {
        match lower(&a[i]).as_slice() {
            b"withscores" => i += 1,
            b"limit" if i + 2 < a.len() => {
                limit = Some((int(&a[i + 1])?, int(&a[i + 2])?));
                i += 3;
                continue;
            }
            _ => return Err(err(SYNTAX)),
        }
        withscores = true;
    }
    Ok(Command::ZRangeByScore {
        key: a[0].clone(),
        min,
        max,
        withscores,
        limit,
    })
}

fn parse_config(a: &[Bytes]) -> Result<Command, CommandError> {
    let sub = lower(&a[0]);
    let rest = &a[1..];
    match sub.as_slice() {
        b"get" if rest.is_empty() => Err(wrong_args("config|get")),
        b"get" => Ok(Command::ConfigGet(rest.to_vec())),
        b"set" if rest.len() < 2 || rest.len() % 2 != 0 => Err(wrong_args("config|set")),
        b"set" => Ok(Command::ConfigSet(pairs(rest))),
        b"resetstat" if !rest.is_empty() => Err(wrong_args("config|resetstat")),
        b"resetstat" => Ok(Command::ConfigResetStat),
        _ => Err(unknown_subcommand(&a[0], "CONFIG")),
    }
}

/// `ACL` subcommands the drive serves (WHOAMI, USERS, LIST); others answer Redis's
/// unknown-subcommand error.
fn parse_acl(a: &[Bytes]) -> Result<Command, CommandError> {
    let sub = lower(&a[0]);
    let rest = &a[1..];
    match sub.as_slice() {
        b"whoami" if !rest.is_empty() => Err(wrong_args("acl|whoami")),
        b"whoami" => Ok(Command::AclWhoami),
        b"users" if !rest.is_empty() => Err(wrong_args("acl|users")),
        b"users" => Ok(Command::AclUsers),
        b"list" if !rest.is_empty() => Err(wrong_args("acl|list")),
        b"list" => Ok(Command::AclList),
        _ => Err(unknown_subcommand(&a[0], "ACL")),
    }
}

/// COMMAND GETKEYS: the keys `args` (a command and its arguments) names, with Redis 7's
/// errors in its order: an unknown command, a command without key arguments, a wrong
/// number of arguments, then arguments the keys cannot be found in. A command this drive
/// parses gives the keys it would touch (numkeys commands included); one it refuses but
/// whose keys sit at fixed positions gives those positions' arguments, as Redis's key
/// ranges do.
///
/// # Errors
/// Redis's replies for the cases above.
pub fn command_keys(args: &[Bytes]) -> Result<Vec<Bytes>, CommandError> {
    let spec = args
        .first()
        .and_then(|n| lookup(n))
        .ok_or_else(|| err("ERR Invalid command specified"))?;
    if spec.first_key == 0 && !spec.flags.contains(&"movablekeys") {
        return Err(err("ERR The command has no key arguments"));
    }
    let n = i64::try_from(args.len()).unwrap_or(i64::MAX);
    if (spec.arity > 0 && spec.arity != n) || (spec.arity < 0 && n < -spec.arity) {
        return Err(err("ERR Invalid number of arguments specified for command"));
    }
    if let Ok(cmd) = Command::parse(args) {
        let keys: Vec<Bytes> = cmd.keys().into_iter().map(Bytes::copy_from_slice).collect();
        if !keys.is_empty() {
            return Ok(keys);
        }
    }
    if spec.first_key > 0 {
        let last = if spec.last_key < 0 {
            n + spec.last_key
        } else {
            spec.last_key.min(n - 1)
        };
        let step = usize::try_from(spec.step.max(1)).unwrap_or(1);
        let (first, last) = (
            usize::try_from(spec.first_key).unwrap_or(usize::MAX),
            usize::try_from(last).unwrap_or(0),
        );
        let keys: Vec<Bytes> = args
            .iter()
            .enumerate()
            .skip(first)
            .take(last.saturating_add(1).saturating_sub(first))
            .step_by(step)
            .map(|(_, a)| a.clone())
            .collect();
        if !keys.is_empty() {
            return Ok(keys);
        }
    }
    Err(err("ERR Invalid arguments specified for command"))
}

fn parse_command(a: &[Bytes]) -> Result<Command, CommandError> {
    let Some(sub) = a.first() else {
        return Ok(Command::CommandInfo(Vec::new()));
    };
    let rest = &a[1..];
    match lower(sub).as_slice() {
        b"count" if !rest.is_empty() => Err(wrong_args("command|count")),
        b"count" => Ok(Command::CommandCount),
        b"docs" => Ok(Command::CommandDocs(rest.to_vec())),
        b"info" => Ok(Command::CommandInfo(rest.to_vec())),
        b"list" if !rest.is_empty() => Err(err(SYNTAX)),
        b"list" => Ok(Command::CommandList),
        b"getkeys" if rest.len() < 2 => Err(wrong_args("command|getkeys")),
        b"getkeys" => Ok(Command::CommandGetKeys(rest.to_vec())),
        _ => Err(unknown_subcommand(sub, "COMMAND")),
    }
}

fn parse_client(a: &[Bytes]) -> Result<Command, CommandError> {
    let sub = lower(&a[0]);
    let rest = &a[1..];
    let exact = |n: usize, name: &str| {
        if rest.len() == n {
            Ok(())
        } else {
            Err(wrong_args(name))
        }
    };
    match sub.as_slice() {
        b"setname" => exact(1, "client|setname").map(|()| Command::ClientSetName(rest[0].clone())),
        b"getname" => exact(0, "client|getname").map(|()| Command::ClientGetName),
        b"setinfo" => exact(2, "client|setinfo").map(|()| Command::ClientSetInfo {
            attr: rest[0].clone(),
            value: rest[1].clone(),
        }),
        b"id" => exact(0, "client|id").map(|()| Command::ClientId),
        b"info" => exact(0, "client|info").map(|()| Command::ClientInfo),
        b"list" if !rest.is_empty() => Err(err(SYNTAX)),
        b"list" => Ok(Command::ClientList),
        b"kill" if rest.is_empty() => Err(wrong_args("client|kill")),
        b"kill" => parse_client_kill(rest).map(Command::ClientKill),
        b"no-evict" => exact(1, "client|no-evict")
            .and_then(|()| on_off(&rest[0]))
            .map(Command::ClientNoEvict),
        b"no-touch" => exact(1, "client|no-touch")
            .and_then(|()| on_off(&rest[0]))
            .map(Command::ClientNoTouch),
        b"pause" => parse_client_pause(rest),
        b"unpause" => exact(0, "client|unpause").map(|()| Command::ClientUnpause),
        b"unblock" if rest.is_empty() => Err(wrong_args("client|unblock")),
        b"unblock" if rest.len() > 2 => Err(CommandError(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&a[0])
        ))),
        b"unblock" => {
            // The reason is checked before the id, as Redis does.
            let error = match rest.get(1).map(|r| lower(r)) {
                None => false,
                Some(r) if r == b"timeout" => false,
                Some(r) if r == b"error" => true,
                Some(_) => return Err(err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")),
            };
            Ok(Command::ClientUnblock {
                id: int(&rest[0])?,
                error,
            })
        }
        _ => Err(unknown_subcommand(&a[0], "CLIENT")),
    }
}

/// `CLIENT PAUSE`'s arguments: a timeout in milliseconds and an optional mode.
fn parse_client_pause(a: &[Bytes]) -> Result<Command, CommandError> {
    let Some(timeout) = a.first() else {
        return Err(wrong_args("client|pause"));
    };
    let millis =
        parse_i64(timeout).ok_or_else(|| err("ERR timeout is not an integer or out of range"))?;
    if millis < 0 {
        return Err(err("ERR timeout is negative"));
    }
    if a.len() > 2 {
        return Err(CommandError(
            "ERR unknown subcommand or wrong number of arguments for 'PAUSE'. Try CLIENT HELP."
                .to_owned(),
        ));
    }
    let all = match a.get(1).map(|m| lower(m)) {
        None => true,
        Some(m) if m == b"all" => true,
        Some(m) if m == b"write" => false,
        Some(_) => return Err(err("ERR CLIENT PAUSE mode must be WRITE or ALL")),
    };
    Ok(Command::ClientPause {
        millis: millis.unsigned_abs(),
        all,
    })
}

/// `on` / `off` (any case), else Redis's syntax error.
fn on_off(v: &[u8]) -> Result<bool, CommandError> {
    match lower(v).as_slice() {
        b"on" => Ok(true),
        b"off" => Ok(false),
        _ => Err(err(SYNTAX)),
    }
}

/// `CLIENT KILL`'s arguments: one address (the old form) or filter-value pairs.
fn parse_client_kill(a: &[Bytes]) -> Result<ClientKill, CommandError> {
    if let [addr] = a {
        return Ok(ClientKill::Addr(addr.clone()));
    }
    let mut f = ClientKillFilters {
        id: None,
        kind: None,
        addr: None,
        laddr: None,
        user: None,
        skipme: true,
    };
    let mut i = 0;
    while i < a.len() {
        let Some(value) = a.get(i + 1) else {
            return Err(err(SYNTAX));
        };
        match lower(&a[i]).as_slice() {
            b"id" => {
                let id = parse_i64(value)
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| err("ERR client-id should be greater than 0"))?;
                f.id = Some(id.unsigned_abs());
            }
            b"type" => {
                f.kind = Some(match lower(value).as_slice() {
                    b"normal" => ClientType::Normal,
                    b"master" => ClientType::Master,
                    b"replica" | b"slave" => ClientType::Replica,
                    b"pubsub" => ClientType::PubSub,
                    _ => {
                        return Err(CommandError(format!(
                            "ERR Unknown client type '{}'",
                            String::from_utf8_lossy(value)
                        )))
                    }
                });
            }
            b"addr" => f.addr = Some(value.clone()),
            b"laddr" => f.laddr = Some(value.clone()),
            b"user" => f.user = Some(value.clone()),
            b"skipme" => {
                f.skipme = match lower(value).as_slice() {
                    b"yes" => true,
                    b"no" => false,
                    _ => return Err(err(SYNTAX)),
                };
            }
            _ => return Err(err(SYNTAX)),
        }
        i += 2;
    }
    Ok(ClientKill::Filters(f))
}

/// `PUBSUB <subcommand> ...`.
fn parse_pubsub(a: &[Bytes]) -> Result<Command, CommandError> {
    let rest = &a[1..];
    match lower(&a[0]).as_slice() {
        b"channels" => Ok(Command::PubSubChannels(rest.first().cloned())),
        b"numsub" => Ok(Command::PubSubNumSub(rest.to_vec())),
        b"numpat" if !rest.is_empty() => Err(wrong_args("pubsub|numpat")),
        b"numpat" => Ok(Command::PubSubNumPat),
        _ => Err(unknown_subcommand(&a[0], "PUBSUB")),
    }
}

/// `LATENCY <subcommand> ...` (LATEST, HISTORY, RESET).
fn parse_latency(a: &[Bytes]) -> Result<Command, CommandError> {
    let rest = &a[1..];
    match (lower(&a[0]).as_slice(), rest) {
        (b"latest", []) => Ok(Command::LatencyLatest),
        (b"latest", _) => Err(wrong_args("latency|latest")),
        (b"history", [event]) => Ok(Command::LatencyHistory(event.clone())),
        (b"history", _) => Err(wrong_args("latency|history")),
        (b"reset", events) => Ok(Command::LatencyReset(events.to_vec())),
        _ => Err(unknown_subcommand(&a[0], "LATENCY")),
    }
}

/// `SLOWLOG <subcommand> ...`.
fn parse_slowlog(a: &[Bytes]) -> Result<Command, CommandError> {
    let rest = &a[1..];
    let sub = lower(&a[0]);
    match (sub.as_slice(), rest) {
        (b"get", []) => Ok(Command::SlowlogGet(None)),
        (b"get", [count]) => parse_i64(count)
            .filter(|&n| n >= -1)
            .map(|n| Command::SlowlogGet(Some(n)))
            .ok_or_else(|| err("ERR count should be greater than or equal to -1")),
        (b"len", []) => Ok(Command::SlowlogLen),
        (b"reset", []) => Ok(Command::SlowlogReset),
        (b"len", _) => Err(wrong_args("slowlog|len")),
        (b"reset", _) => Err(wrong_args("slowlog|reset")),
        (b"get", _) => Err(CommandError(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try SLOWLOG HELP.",
            String::from_utf8_lossy(&a[0])
        ))),
        _ => Err(unknown_subcommand(&a[0], "SLOWLOG")),
    }
}

fn parse_shutdown(a: &[Bytes]) -> Result<Command, CommandError> {
    let mut nosave = false;
    for opt in a {
        match lower(opt).as_slice() {
            b"nosave" => nosave = true,
            b"save" | b"now" | b"force" => {}
            b"abort" => return Err(err("ERR No shutdown in progress.")),
            _ => return Err(err(SYNTAX)),
        }
    }
    Ok(Command::Shutdown { nosave })
}

/// EXPIRE's options after the time (all of them are read before the time is checked, as
/// Redis does).
fn parse_expire_condition(a: &[Bytes]) -> Result<Option<ExpireCondition>, CommandError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in a {
        match lower(opt).as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                return Err(CommandError(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                )))
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(if nx {
        Some(ExpireCondition::Nx)
    } else if gt {
        Some(ExpireCondition::Gt)
    } else if lt {
        Some(ExpireCondition::Lt)
    } else if xx {
        Some(ExpireCondition::Xx)
    } else {
        None
    })
}

/// `invalid expire time in 'name' command`.
#[must_use]
pub fn invalid_expire(name: &str) -> CommandError {
    CommandError(format!("ERR invalid expire time in '{name}' command"))
}

fn parse_expire(a: &[Bytes], name: &'static str) -> Result<Command, CommandError> {
    let condition = parse_expire_condition(&a[2..])?;
    let n = int(&a[1])?;
    let seconds = matches!(name, "expire" | "expireat");
    let when = if seconds {
        n.checked_mul(MS_PER_SECOND)
            .ok_or_else(|| invalid_expire(name))?
    } else {
        n
    };
    Ok(Command::Expire {
        key: a[0].clone(),
        when,
        absolute: name.ends_with("at"),
        condition,
        name,
    })
}

/// Milliseconds in a second.
pub const MS_PER_SECOND: i64 = 1000;

/// An expiry amount of SET, SETEX, PSETEX and GETEX: positive, and in seconds small enough
/// to be counted in milliseconds.
/// A relative amount (EX, PX) must also leave room for the current time to be added, as
/// Redis checks (the deadline is a signed 64-bit count of milliseconds).
fn expire_amount(v: &[u8], seconds: bool, relative: bool, name: &str) -> Result<u64, CommandError> {
    let n = int(v)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    u64::try_from(n)
        .ok()
        .filter(|&n| n > 0 && (!seconds || n <= i64::MAX as u64 / 1000))
        .filter(|&n| {
            let ms = if seconds { n * 1000 } else { n };
            !relative || ms <= (i64::MAX as u64).saturating_sub(now)
        })
        .ok_or_else(|| invalid_expire(name))
}

fn parse_getex(a: &[Bytes]) -> Result<Command, CommandError> {
    let (mut expire, mut persist, mut expire_error) = (None, false, None);
    let mut i = 1;
    while i < a.len() {
        let opt = lower(&a[i]);
        match opt.as_slice() {
            b"persist" if expire.is_none() => persist = true,
            b"ex" | b"px" | b"exat" | b"pxat" if expire.is_none() && !persist => {
                let Some(v) = a.get(i + 1) else {
                    return Err(err(SYNTAX));
                };
                let seconds = matches!(opt.as_slice(), b"ex" | b"exat");
                let relative = matches!(opt.as_slice(), b"ex" | b"px");
                let n = match expire_amount(v, seconds, relative, "getex") {
                    Ok(n) => n,
                    Err(e) => {
                        expire_error = Some(e);
                        1
                    }
                };
                expire = Some(match opt.as_slice() {
                    b"ex" => Expire::Ex(n),
                    b"px" => Expire::Px(n),
                    b"exat" => Expire::ExAt(n),
                    _ => Expire::PxAt(n),
                });
                i += 1;
            }
            _ => return Err(err(SYNTAX)),
        }
        i += 1;
    }
    Ok(Command::GetEx {
        key: a[0].clone(),
        expire,
        persist,
        expire_error,
    })
}

/// Checks only what Redis checks before it queues a command inside MULTI: that the command
/// exists and has an allowed number of arguments. A request that passes but fails
/// [`Command::parse`] is queued and answers its error inside EXEC's reply.
///
/// # Errors
/// The unknown-command or wrong-arity error.
pub fn check_arity(args: &[Bytes]) -> Result<(), CommandError> {
    let Some(spec) = args.first().and_then(|n| lookup(n)) else {
        return Err(unknown_command(args));
    };
    let argc = i64::try_from(args.len()).unwrap_or(i64::MAX);
    if (spec.arity >= 0 && argc != spec.arity) || (spec.arity < 0 && argc < -spec.arity) {
        return Err(wrong_args(spec.name));
    }
    Ok(())
}

impl Command {
    /// Parses a framed request (`args[0]` is the command name, any case).
    ///
    /// # Errors
    ///
    /// A [`CommandError`] with Redis 7's text for an unknown command, a wrong argument
    /// count, a bad option or a malformed number.
    pub fn parse(args: &[Bytes]) -> Result<Self, CommandError> {
        check_arity(args)?;
        let Some(spec) = args.first().and_then(|n| lookup(n)) else {
            return Err(unknown_command(args));
        };
        let a = &args[1..];
        let key = || a[0].clone();
        Ok(match spec.name {
            "ping" if a.len() > 1 => return Err(wrong_args("ping")),
            "ping" => Self::Ping(a.first().cloned()),
            "echo" => Self::Echo(key()),
            "hello" => parse_hello(a)?,
            "auth" if a.len() > 2 => return Err(err(SYNTAX)),
            "auth" if a.len() == 2 => Self::Auth {
                username: Some(a[0].clone()),
                password: a[1].clone(),
            },
            "auth" => Self::Auth {
                username: None,
                password: key(),
            },
            "select" => Self::Select(int(&a[0])?),
            "quit" => Self::Quit,
            "acl" => parse_acl(a)?,
            "get" => Self::Get(key()),
            "set" => parse_set(a)?,
            "mget" => Self::MGet(a.to_vec()),
            "mset" if a.len() % 2 != 0 => return Err(wrong_args("mset")),
            "mset" => Self::MSet(pairs(a)),
            "del" => Self::Del(a.to_vec()),
            "exists" => Self::Exists(a.to_vec()),
            "strlen" => Self::Strlen(key()),
            "getrange" => Self::GetRange {
                key: key(),
                start: int(&a[1])?,
                end: int(&a[2])?,
            },
            "incr" => Self::IncrBy {
                key: key(),
                delta: 1,
            },
            "decr" => Self::IncrBy {
                key: key(),
                delta: -1,
            },
            "incrby" => Self::IncrBy {
                key: key(),
                delta: int(&a[1])?,
            },
            "decrby" => Self::IncrBy {
                key: key(),
                delta: int(&a[1])?
                    .checked_neg()
                    .ok_or_else(|| err("ERR decrement would overflow"))?,
            },
            "scan" => parse_scan(a)?,
            "dbsize" => Self::DbSize,
            "randomkey" => Self::RandomKey,
            "flushall" if a.len() > 1 => return Err(err(SYNTAX)),
            "flushall" => match a.first().map(|m| lower(m)) {
                None => Self::FlushAll,
                Some(m) if m == b"async" || m == b"sync" => Self::FlushAll,
                Some(_) => return Err(err(SYNTAX)),
            },
            "info" => Self::Info(a.to_vec()),
            "config" => parse_config(a)?,
            "command" => parse_command(a)?,
            "client" => parse_client(a)?,
            "shutdown" => parse_shutdown(a)?,
            "subscribe" => Self::Subscribe(a.to_vec()),
            "unsubscribe" => Self::Unsubscribe(a.to_vec()),
            "psubscribe" => Self::PSubscribe(a.to_vec()),
            "punsubscribe" => Self::PUnsubscribe(a.to_vec()),
            "publish" => Self::Publish {
                channel: a[0].clone(),
                message: a[1].clone(),
            },
            "pubsub" => parse_pubsub(a)?,
            "reset" => Self::Reset,
            "slowlog" => parse_slowlog(a)?,
            "latency" => parse_latency(a)?,
            "hset" | "hmset" if a.len() % 2 == 0 => return Err(wrong_args(spec.name)),
            "hset" | "hmset" => Self::HSet {
                key: key(),
                pairs: pairs(&a[1..]),
                hmset: spec.name == "hmset",
            },
            "hget" => Self::HGet {
                key: key(),
                field: a[1].clone(),
            },
            "hmget" => Self::HMGet {
                key: key(),
                fields: a[1..].to_vec(),
            },
            "hgetall" => Self::HGetAll(key()),
            "hdel" => Self::HDel {
                key: key(),
                fields: a[1..].to_vec(),
            },
            "hlen" => Self::HLen(key()),
            "hexists" => Self::HExists {
                key: key(),
                field: a[1].clone(),
            },
            "zadd" => parse_zadd(a)?,
            "zrem" => Self::ZRem {
                key: key(),
                members: a[1..].to_vec(),
            },
            "zscore" => Self::ZScore {
                key: key(),
                member: a[1].clone(),
            },
            "zcard" => Self::ZCard(key()),
            "zrangebyscore" => parse_zrangebyscore(a)?,
            "cluster" => match parse_keys_in_slot(a) {
                Some(c) => c?,
                None => Self::Cluster(a.to_vec()),
            },
            "ls.range" => parse_range(a)?,
            "readonly" => Self::Readonly,
            "readwrite" => Self::Readwrite,
            "multi" => Self::Multi,
            "exec" => Self::Exec,
            "discard" => Self::Discard,
            "watch" => Self::Watch(a.to_vec()),
            "unwatch" => Self::Unwatch,
            "expire" | "pexpire" | "expireat" | "pexpireat" => parse_expire(a, spec.name)?,
            "ttl" | "pttl" | "expiretime" | "pexpiretime" => Self::Ttl {
                key: key(),
                kind: match spec.name {
                    "ttl" => TtlKind::Ttl,
                    "pttl" => TtlKind::Pttl,
                    "expiretime" => TtlKind::ExpireTime,
                    _ => TtlKind::PExpireTime,
                },
            },
            "persist" => Self::Persist(key()),
            "getex" => parse_getex(a)?,
            "setex" | "psetex" => {
                let seconds = spec.name == "setex";
                let n = expire_amount(&a[1], seconds, true, spec.name)?;
                Self::Set {
                    key: key(),
                    value: a[2].clone(),
                    expire: Some(if seconds {
                        Expire::Ex(n)
                    } else {
                        Expire::Px(n)
                    }),
                    condition: None,
                    keep_ttl: false,
                    get: false,
                }
            }
            "setnx" => Self::SetNx {
                key: key(),
                value: a[1].clone(),
            },
            "getset" => Self::Set {
                key: key(),
                value: a[1].clone(),
                expire: None,
                condition: None,
                keep_ttl: false,
                get: true,
            },
            "getdel" => Self::GetDel(key()),
            "append" => Self::Append {
                key: key(),
                value: a[1].clone(),
            },
            "setrange" => {
                let offset = int(&a[1])?;
                Self::SetRange {
                    key: key(),
                    offset: u64::try_from(offset).map_err(|_| err("ERR offset is out of range"))?,
                    value: a[2].clone(),
                }
            }
            "msetnx" if a.len() % 2 != 0 => return Err(wrong_args("msetnx")),
            "msetnx" => Self::MSetNx(pairs(a)),
            "incrbyfloat" => Self::IncrByFloat {
                key: key(),
                delta: a[1].clone(),
            },
            "copy" => parse_copy(a)?,
            "dump" => Self::Dump(key()),
            "restore" | "restore-asking" => parse_restore(a, spec.name == "restore-asking")?,
            "asking" => Self::Asking,
            "migrate" => parse_migrate(a)?,
            "type" => Self::Type(key()),
            "unlink" => Self::Del(a.to_vec()),
            "touch" => Self::Exists(a.to_vec()),
            "flushdb" if a.len() > 1 => return Err(err(SYNTAX)),
            "flushdb" => match a.first().map(|m| lower(m)) {
                None => Self::FlushAll,
                Some(m) if m == b"async" || m == b"sync" => Self::FlushAll,
                Some(_) => return Err(err(SYNTAX)),
            },
            "rename" | "renamenx" => Self::Rename {
                key: key(),
                new_key: a[1].clone(),
                nx: spec.name == "renamenx",
            },
            "keys" => Self::Keys(key()),
            _ => match types::parse(spec.name, a) {
                Some(c) => Self::Collection(c?),
                None => return Err(unknown_command(args)),
            },
        })
    }

    /// The command's name as in the command table (lowercase).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ping(_) => "ping",
            Self::Echo(_) => "echo",
            Self::Hello { .. } => "hello",
            Self::Auth { .. } => "auth",
            Self::Select(_) => "select",
            Self::Quit => "quit",
            Self::AclWhoami | Self::AclUsers | Self::AclList => "acl",
            Self::Get(_) => "get",
            Self::Set { .. } => "set",
            Self::MGet(_) => "mget",
            Self::MSet(_) => "mset",
            Self::Del(_) => "del",
            Self::Exists(_) => "exists",
            Self::Strlen(_) => "strlen",
            Self::GetRange { .. } => "getrange",
            Self::IncrBy { .. } => "incrby",
            Self::Scan { .. } => "scan",
            Self::DbSize => "dbsize",
            Self::RandomKey => "randomkey",
            Self::FlushAll => "flushall",
            Self::Info(_) => "info",
            Self::ConfigGet(_) | Self::ConfigSet(_) | Self::ConfigResetStat => "config",
            Self::CommandCount
            | Self::CommandDocs(_)
            | Self::CommandInfo(_)
            | Self::CommandList
            | Self::CommandGetKeys(_) => "command",
            Self::ClientSetName(_)
            | Self::ClientGetName
            | Self::ClientSetInfo { .. }
            | Self::ClientId
            | Self::ClientInfo
            | Self::ClientList
            | Self::ClientKill(_)
            | Self::ClientNoEvict(_)
            | Self::ClientNoTouch(_)
            | Self::ClientPause { .. }
            | Self::ClientUnpause
            | Self::ClientUnblock { .. } => "client",
            Self::Subscribe(_) => "subscribe",
            Self::Unsubscribe(_) => "unsubscribe",
            Self::PSubscribe(_) => "psubscribe",
            Self::PUnsubscribe(_) => "punsubscribe",
            Self::Publish { .. } => "publish",
            Self::PubSubChannels(_) | Self::PubSubNumSub(_) | Self::PubSubNumPat => "pubsub",
            Self::Reset => "reset",
            Self::SlowlogGet(_) | Self::SlowlogLen | Self::SlowlogReset => "slowlog",
            Self::LatencyLatest | Self::LatencyHistory(_) | Self::LatencyReset(_) => "latency",
            Self::Shutdown { .. } => "shutdown",
            Self::HSet { hmset: true, .. } => "hmset",
            Self::HSet { .. } => "hset",
            Self::HGet { .. } => "hget",
            Self::HMGet { .. } => "hmget",
            Self::HGetAll(_) => "hgetall",
            Self::HDel { .. } => "hdel",
            Self::HLen(_) => "hlen",
            Self::HExists { .. } => "hexists",
            Self::ZAdd { .. } => "zadd",
            Self::ZRem { .. } => "zrem",
            Self::ZScore { .. } => "zscore",
            Self::ZCard(_) => "zcard",
            Self::ZRangeByScore { .. } => "zrangebyscore",
            Self::Cluster(_) => "cluster",
            Self::Readonly => "readonly",
            Self::Readwrite => "readwrite",
            Self::Range { .. } => "ls.range",
            Self::Multi => "multi",
            Self::Exec => "exec",
            Self::Discard => "discard",
            Self::Watch(_) => "watch",
            Self::Unwatch => "unwatch",
            Self::Expire { name, .. } => name,
            Self::Ttl { kind, .. } => match kind {
                TtlKind::Ttl => "ttl",
                TtlKind::Pttl => "pttl",
                TtlKind::ExpireTime => "expiretime",
                TtlKind::PExpireTime => "pexpiretime",
            },
            Self::Persist(_) => "persist",
            Self::GetEx { .. } => "getex",
            Self::SetNx { .. } => "setnx",
            Self::GetDel(_) => "getdel",
            Self::Append { .. } => "append",
            Self::SetRange { .. } => "setrange",
            Self::MSetNx(_) => "msetnx",
            Self::IncrByFloat { .. } => "incrbyfloat",
            Self::Copy { .. } => "copy",
            Self::Dump(_) => "dump",
            Self::Restore { asking: false, .. } => "restore",
            Self::Restore { asking: true, .. } => "restore-asking",
            Self::Asking => "asking",
            Self::Migrate(_) => "migrate",
            Self::KeysInSlot { .. } => "cluster",
            Self::Type(_) => "type",
            Self::Rename { nx: false, .. } => "rename",
            Self::Rename { nx: true, .. } => "renamenx",
            Self::Keys(_) => "keys",
            Self::Collection(c) => c.name(),
        }
    }

    /// Whether the command changes stored data.
    #[must_use]
    pub fn is_write(&self) -> bool {
        lookup(self.name().as_bytes()).is_some_and(|s| s.flags.contains(&"write"))
    }

    /// The keys the command touches, in argument order (for slot routing).
    #[must_use]
    pub fn keys(&self) -> Vec<&[u8]> {
        match self {
            Self::Get(k)
            | Self::Strlen(k)
            | Self::HGetAll(k)
            | Self::HLen(k)
            | Self::ZCard(k)
            | Self::Set { key: k, .. }
            | Self::GetRange { key: k, .. }
            | Self::IncrBy { key: k, .. }
            | Self::HSet { key: k, .. }
            | Self::HGet { key: k, .. }
            | Self::HMGet { key: k, .. }
            | Self::HDel { key: k, .. }
            | Self::HExists { key: k, .. }
            | Self::ZAdd { key: k, .. }
            | Self::ZRem { key: k, .. }
            | Self::ZScore { key: k, .. }
            | Self::ZRangeByScore { key: k, .. }
            | Self::Expire { key: k, .. }
            | Self::Ttl { key: k, .. }
            | Self::Persist(k)
            | Self::GetEx { key: k, .. }
            | Self::SetNx { key: k, .. }
            | Self::GetDel(k)
            | Self::Append { key: k, .. }
            | Self::SetRange { key: k, .. }
            | Self::IncrByFloat { key: k, .. }
            | Self::Dump(k)
            | Self::Restore { key: k, .. }
            | Self::Type(k) => vec![&k[..]],
            Self::Rename { key, new_key, .. } => vec![&key[..], &new_key[..]],
            Self::Copy {
                source,
                destination,
                ..
            } => vec![&source[..], &destination[..]],
            Self::MGet(ks) | Self::Del(ks) | Self::Exists(ks) | Self::Watch(ks) => {
                ks.iter().map(|k| &k[..]).collect()
            }
            Self::MSet(pairs) | Self::MSetNx(pairs) => pairs.iter().map(|(k, _)| &k[..]).collect(),
            Self::Collection(c) => c.keys(),
            Self::Migrate(m) => m.keys.iter().map(|k| &k[..]).collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(parts: &[&str]) -> Result<Command, CommandError> {
        let args: Vec<Bytes> = parts.iter().map(|p| Bytes::from(p.to_string())).collect();
        Command::parse(&args)
    }

    fn err_text(parts: &[&str]) -> String {
        match cmd(parts) {
            Ok(c) => format!("parsed as {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    #[allow(clippy::panic)]
    fn migrate_takes_replicas_of_the_target() {
        let Ok(Command::Migrate(m)) = cmd(&[
            "MIGRATE", "h", "1", "", "0", "50", "REPLICA", "r1", "2", "REPLACE", "REPLICA", "r2",
            "3", "KEYS", "a", "b",
        ]) else {
            panic!("{}", err_text(&["MIGRATE"]));
        };
        assert_eq!(m.keys, vec![Bytes::from("a"), Bytes::from("b")]);
        assert!(m.replace && !m.copy);
        assert_eq!(
            m.replicas,
            vec![
                (Bytes::from("r1"), Bytes::from("2")),
                (Bytes::from("r2"), Bytes::from("3"))
            ]
        );
        // A REPLICA without its port is a syntax error, as any short option.
        assert_eq!(
            err_text(&["MIGRATE", "h", "1", "k", "0", "50", "REPLICA", "r1"]),
            "ERR syntax error"
        );
    }

    #[test]
    fn redis_error_texts() {
        assert_eq!(
            err_text(&["FOO", "a", "b"]),
            "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "
        );
        assert_eq!(
            err_text(&["get"]),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(
            err_text(&["GET", "a", "b"]),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(err_text(&["set", "k", "v", "bogus"]), "ERR syntax error");
        assert_eq!(err_text(&["set", "k", "v", "ex", "x"]), NOT_INTEGER);
        assert_eq!(
            err_text(&["set", "k", "v", "ex", "0"]),
            "ERR invalid expire time in 'set' command"
        );
        assert_eq!(err_text(&["set", "k", "v", "nx", "xx"]), "ERR syntax error");
        assert_eq!(err_text(&["incrby", "k", "1.5"]), NOT_INTEGER);
        assert_eq!(err_text(&["setrange", "k", "x", "v"]), NOT_INTEGER);
        assert_eq!(
            err_text(&["setrange", "k", "-1", "v"]),
            "ERR offset is out of range"
        );
        assert_eq!(
            err_text(&["msetnx", "a", "1", "b"]),
            "ERR wrong number of arguments for 'msetnx' command"
        );
        assert_eq!(
            err_text(&["copy", "a", "a"]),
            "ERR source and destination objects are the same"
        );
        assert_eq!(
            err_text(&["copy", "a", "b", "db", "1"]),
            "ERR DB index is out of range"
        );
        assert_eq!(err_text(&["copy", "a", "b", "db", "x"]), NOT_INTEGER);
        assert_eq!(err_text(&["copy", "a", "b", "db"]), SYNTAX);
        assert_eq!(err_text(&["copy", "a", "b", "bogus"]), SYNTAX);
        assert!(matches!(
            cmd(&["copy", "a", "b", "DB", "0", "REPLACE"]),
            Ok(Command::Copy { replace: true, .. })
        ));
        // INCRBYFLOAT's increment is judged after the key's type, as Redis does.
        assert!(cmd(&["incrbyfloat", "k", "x"]).is_ok_and(|c| c.is_write()));
        assert_eq!(
            err_text(&["mset", "a", "1", "b"]),
            "ERR wrong number of arguments for 'mset' command"
        );
        assert_eq!(err_text(&["zadd", "z", "x", "m"]), NOT_FLOAT);
        assert_eq!(
            err_text(&["zadd", "z", "nx", "xx", "1", "m"]),
            "ERR XX and NX options at the same time are not compatible"
        );
        assert_eq!(
            err_text(&["zadd", "z", "gt", "lt", "1", "m"]),
            "ERR GT, LT, and/or NX options at the same time are not compatible"
        );
        assert_eq!(
            err_text(&["zrangebyscore", "z", "a", "1"]),
            "ERR min or max is not a float"
        );
        assert_eq!(err_text(&["scan", "x"]), "ERR invalid cursor");
        assert_eq!(
            err_text(&["ls.range", "a"]),
            "ERR wrong number of arguments for 'ls.range' command"
        );
        assert_eq!(
            err_text(&["ls.range", "a", "b", "count"]),
            "ERR syntax error"
        );
        assert_eq!(
            err_text(&["LS.RANGE", "a", "b", "COUNT", "0"]),
            "ERR COUNT must be between 1 and 10000"
        );
        assert_eq!(
            err_text(&["ls.range", "a", "b", "count", "x"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            err_text(&["config", "bogus"]),
            "ERR unknown subcommand 'bogus'. Try CONFIG HELP."
        );
        assert_eq!(
            err_text(&["config", "get"]),
            "ERR wrong number of arguments for 'config|get' command"
        );
        assert_eq!(
            err_text(&["hset", "h", "f"]),
            "ERR wrong number of arguments for 'hset' command"
        );
    }

    #[test]
    fn expiry_and_transaction_commands_parse_as_redis_does() {
        assert_eq!(
            err_text(&["expire", "k", "10", "nx", "xx"]),
            "ERR NX and XX, GT or LT options at the same time are not compatible"
        );
        assert_eq!(
            err_text(&["expire", "k", "10", "gt", "lt"]),
            "ERR GT and LT options at the same time are not compatible"
        );
        // Options are checked before the time, as Redis does.
        assert_eq!(
            err_text(&["expire", "k", "x", "bogus"]),
            "ERR Unsupported option bogus"
        );
        assert_eq!(err_text(&["expire", "k", "x"]), NOT_INTEGER);
        assert_eq!(
            err_text(&["expire", "k", "9223372036854775807"]),
            "ERR invalid expire time in 'expire' command"
        );
        assert_eq!(
            cmd(&["PEXPIREAT", "k", "5", "GT"]).ok(),
            Some(Command::Expire {
                key: Bytes::from("k"),
                when: 5,
                absolute: true,
                condition: Some(ExpireCondition::Gt),
                name: "pexpireat",
            })
        );
        assert_eq!(
            err_text(&["setex", "k", "0", "v"]),
            "ERR invalid expire time in 'setex' command"
        );
        assert_eq!(
            err_text(&["psetex", "k", "-1", "v"]),
            "ERR invalid expire time in 'psetex' command"
        );
        assert_eq!(err_text(&["getex", "k", "ex", "1", "persist"]), SYNTAX);
        // GETEX's bad time is kept: Redis reports it only for an existing string key.
        assert!(matches!(
            cmd(&["getex", "k", "ex", "0"]),
            Ok(Command::GetEx {
                expire_error: Some(_),
                ..
            })
        ));
        assert_eq!(
            check_arity(&[Bytes::from("exec"), Bytes::from("x")]).map_err(|e| e.0),
            Err("ERR wrong number of arguments for 'exec' command".to_owned())
        );
        // A syntax error passes the arity check: inside MULTI it is queued.
        assert!(check_arity(&[
            Bytes::from("set"),
            Bytes::from("k"),
            Bytes::from("v"),
            Bytes::from("bogus")
        ])
        .is_ok());
        assert_eq!(
            cmd(&["rename", "a", "b"]).ok().map(|c| c.keys().len()),
            Some(2)
        );
        assert!(cmd(&["multi"]).is_ok_and(|c| !c.is_write()));
        assert!(cmd(&["getdel", "k"]).is_ok_and(|c| c.is_write()));
    }

    #[test]
    fn parses_options() {
        assert_eq!(
            cmd(&["SET", "k", "v", "PX", "100", "NX", "GET"]).ok(),
            Some(Command::Set {
                key: Bytes::from("k"),
                value: Bytes::from("v"),
                expire: Some(Expire::Px(100)),
                condition: Some(SetCondition::Nx),
                keep_ttl: false,
                get: true,
            })
        );
        assert_eq!(
            cmd(&[
                "zrangebyscore",
                "z",
                "(1",
                "+inf",
                "WITHSCORES",
                "LIMIT",
                "0",
                "10"
            ])
            .ok(),
            Some(Command::ZRangeByScore {
                key: Bytes::from("z"),
                min: ScoreBound::Exclusive(1.0),
                max: ScoreBound::PosInf,
                withscores: true,
                limit: Some((0, 10)),
            })
        );
        assert_eq!(
            cmd(&["ls.range", "a", "", "COUNT", "7"]).ok(),
            Some(Command::Range {
                start: Bytes::from_static(b"a"),
                end: Bytes::new(),
                count: 7,
            })
        );
        assert_eq!(
            cmd(&["LS.Range", "a", "b"]).ok(),
            Some(Command::Range {
                start: Bytes::from_static(b"a"),
                end: Bytes::from_static(b"b"),
                count: RANGE_DEFAULT_COUNT,
            })
        );
        assert_eq!(
            cmd(&["scan", "0", "match", "a*", "count", "5"]).ok(),
            Some(Command::Scan {
                cursor: 0,
                pattern: Some(Bytes::from("a*")),
                count: Some(5),
                kind: None,
            })
        );
        assert_eq!(
            cmd(&["decrby", "k", "-9223372036854775808"])
                .err()
                .map(|e| e.0),
            Some("ERR decrement would overflow".to_owned())
        );
        assert!(cmd(&["hello", "3", "auth", "u", "p", "setname", "n"]).is_ok());
    }

    #[test]
    fn integers_like_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"01"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b" 1"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b""), None);
    }

    #[test]
    fn pubsub_client_and_slowlog_commands_parse_as_redis_does() {
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert_eq!(
            cmd(&["SUBSCRIBE", "a", "b"]),
            Ok(Command::Subscribe(vec![b("a"), b("b")]))
        );
        assert_eq!(cmd(&["unsubscribe"]), Ok(Command::Unsubscribe(Vec::new())));
        assert_eq!(
            err_text(&["subscribe"]),
            "ERR wrong number of arguments for 'subscribe' command"
        );
        assert_eq!(
            err_text(&["publish", "c"]),
            "ERR wrong number of arguments for 'publish' command"
        );
        assert_eq!(cmd(&["pubsub", "NUMPAT"]), Ok(Command::PubSubNumPat));
        assert_eq!(
            err_text(&["pubsub", "numpat", "x"]),
            "ERR wrong number of arguments for 'pubsub|numpat' command"
        );
        assert_eq!(
            err_text(&["pubsub", "nope"]),
            "ERR unknown subcommand 'nope'. Try PUBSUB HELP."
        );
        assert_eq!(
            cmd(&["pubsub", "channels", "a*", "extra"]),
            Ok(Command::PubSubChannels(Some(b("a*"))))
        );
        assert_eq!(cmd(&["RESET"]), Ok(Command::Reset));
        assert_eq!(
            err_text(&["reset", "x"]),
            "ERR wrong number of arguments for 'reset' command"
        );
        assert_eq!(
            cmd(&["client", "kill", "1.2.3.4:5"]),
            Ok(Command::ClientKill(ClientKill::Addr(b("1.2.3.4:5"))))
        );
        assert_eq!(
            cmd(&["client", "kill", "id", "7", "skipme", "NO", "type", "pubsub"]),
            Ok(Command::ClientKill(ClientKill::Filters(
                ClientKillFilters {
                    id: Some(7),
                    kind: Some(ClientType::PubSub),
                    addr: None,
                    laddr: None,
                    user: None,
                    skipme: false,
                }
            )))
        );
        assert_eq!(
            err_text(&["client", "kill", "id", "0"]),
            "ERR client-id should be greater than 0"
        );
        assert_eq!(
            err_text(&["client", "kill", "type", "x"]),
            "ERR Unknown client type 'x'"
        );
        assert_eq!(
            err_text(&["client", "kill", "id", "5", "skipme"]),
            "ERR syntax error"
        );
        assert_eq!(
            err_text(&["client", "kill"]),
            "ERR wrong number of arguments for 'client|kill' command"
        );
        assert_eq!(
            cmd(&["client", "no-evict", "ON"]),
            Ok(Command::ClientNoEvict(true))
        );
        assert_eq!(
            err_text(&["client", "no-touch", "maybe"]),
            "ERR syntax error"
        );
        assert_eq!(
            cmd(&["client", "pause", "100", "write"]),
            Ok(Command::ClientPause {
                millis: 100,
                all: false
            })
        );
        assert_eq!(
            cmd(&["client", "pause", "0"]),
            Ok(Command::ClientPause {
                millis: 0,
                all: true
            })
        );
        assert_eq!(
            err_text(&["client", "pause", "-1"]),
            "ERR timeout is negative"
        );
        assert_eq!(
            err_text(&["client", "pause", "x"]),
            "ERR timeout is not an integer or out of range"
        );
        assert_eq!(
            err_text(&["client", "pause", "1", "both"]),
            "ERR CLIENT PAUSE mode must be WRITE or ALL"
        );
        assert_eq!(cmd(&["slowlog", "get"]), Ok(Command::SlowlogGet(None)));
        assert_eq!(
            cmd(&["slowlog", "get", "-1"]),
            Ok(Command::SlowlogGet(Some(-1)))
        );
        assert_eq!(
            err_text(&["slowlog", "get", "-2"]),
            "ERR count should be greater than or equal to -1"
        );
        assert_eq!(
            err_text(&["slowlog", "len", "x"]),
            "ERR wrong number of arguments for 'slowlog|len' command"
        );
        assert_eq!(
            err_text(&["slowlog", "get", "1", "2"]),
            "ERR unknown subcommand or wrong number of arguments for 'get'. Try SLOWLOG HELP."
        );
    }

    #[test]
    fn table_is_consistent() {
        for s in COMMANDS {
            assert_eq!(
                lookup(s.name.to_uppercase().as_bytes()).map(|x| x.name),
                Some(s.name)
            );
        }
        assert!(cmd(&["set", "k", "v"]).is_ok_and(|c| c.is_write()));
        assert!(cmd(&["get", "k"]).is_ok_and(|c| !c.is_write()));
        assert_eq!(
            cmd(&["mset", "a", "1", "b", "2"])
                .ok()
                .map(|c| c.keys().len()),
            Some(2)
        );
    }
}
