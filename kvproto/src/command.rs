//! The typed [`Command`] enum (`parse` -> apply in the firmware) and the command table.
//!
//! Parsing checks arity, options and numbers and produces Redis 7's error texts, so a
//! client sees the same `-ERR ...` lines it would from `redis-server`. Arguments stay
//! [`Bytes`] views of the request buffer.

use bytes::Bytes;

mod parse;
mod table;
pub mod types;

use parse::*;
pub use parse::{
    check_arity, command_keys, invalid_expire, parse_f64, parse_i64, MS_PER_SECOND,
    RANGE_DEFAULT_COUNT, RANGE_MAX_COUNT,
};
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

impl Command {
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
mod tests;
