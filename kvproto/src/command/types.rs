//! The collection commands added for issue 17 (sets, lists, the rest of hashes and sorted
//! sets):
//! [`Collection`], held by [`super::Command::Collection`], and their parsers, with the error
//! texts and the order of checks of redis-server 7.
//!
//! Kept apart from `command.rs` so that file only dispatches to [`parse`] by name.

use bytes::Bytes;

use super::{err, int, lower, parse_f64, score_bound, CommandError, ScoreBound, NOT_FLOAT, SYNTAX};

/// Which combination SINTER, SUNION and SDIFF (and their STORE forms) compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    /// Members in every set.
    Inter,
    /// Members in any set.
    Union,
    /// Members of the first set in none of the others.
    Diff,
}

/// One end of a lexicographic range (`ZRANGEBYLEX`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LexBound {
    /// `-`: before every member.
    NegInf,
    /// `+`: after every member.
    PosInf,
    /// `[m`: `m` included.
    Inclusive(Bytes),
    /// `(m`: `m` excluded.
    Exclusive(Bytes),
}

/// What a ZRANGE-like command selects.
#[derive(Debug, Clone, PartialEq)]
pub enum ZRangeBy {
    /// Ranks `start ..= stop` (negative from the end).
    Rank(i64, i64),
    /// Scores from `min` to `max`.
    Score(ScoreBound, ScoreBound),
    /// Members from `min` to `max` in byte order.
    Lex(LexBound, LexBound),
}

/// Which collection SSCAN, HSCAN and ZSCAN walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOf {
    /// SSCAN.
    Set,
    /// HSCAN.
    Hash,
    /// ZSCAN.
    ZSet,
}

/// A collection command (see the module header).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // Variants are the Redis commands of the same name.
pub enum Collection {
    SAdd {
        key: Bytes,
        members: Vec<Bytes>,
    },
    SRem {
        key: Bytes,
        members: Vec<Bytes>,
    },
    SMembers(Bytes),
    /// SISMEMBER (`many == false`, one member) and SMISMEMBER.
    SIsMember {
        key: Bytes,
        members: Vec<Bytes>,
        many: bool,
    },
    SCard(Bytes),
    /// `SPOP key [count]`.
    SPop {
        key: Bytes,
        count: Option<u64>,
    },
    /// `SRANDMEMBER key [count]`.
    SRandMember {
        key: Bytes,
        count: Option<i64>,
    },
    /// SINTER, SUNION and SDIFF.
    SCombine {
        op: SetOp,
        keys: Vec<Bytes>,
    },
    /// SINTERSTORE, SUNIONSTORE and SDIFFSTORE.
    SCombineStore {
        op: SetOp,
        dst: Bytes,
        keys: Vec<Bytes>,
    },
    /// `OBJECT ENCODING | FREQ | IDLETIME | REFCOUNT key`.
    Object {
        of: ObjectOf,
        key: Bytes,
    },
    /// `OBJECT HELP`.
    ObjectHelp,
    /// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`: the options are kept as
    /// given and parsed when the command runs ([`LcsOptions::parse`]), after the keys'
    /// types are checked, as Redis does.
    Lcs {
        a: Bytes,
        b: Bytes,
        options: Vec<Bytes>,
    },
    /// `SINTERCARD numkeys key... [LIMIT n]` (0: no limit).
    SInterCard {
        keys: Vec<Bytes>,
        limit: u64,
    },
    SMove {
        src: Bytes,
        dst: Bytes,
        member: Bytes,
    },
    /// SSCAN, HSCAN and ZSCAN. Redis checks the options only when the key exists, so a bad
    /// option is kept in `bad_option` for the drive to report then.
    CollScan {
        of: ScanOf,
        key: Bytes,
        cursor: u64,
        pattern: Option<Bytes>,
        count: u64,
        bad_option: Option<CommandError>,
    },
    HIncrBy {
        key: Bytes,
        field: Bytes,
        delta: i64,
    },
    HIncrByFloat {
        key: Bytes,
        field: Bytes,
        delta: Bytes,
    },
    HKeys(Bytes),
    HVals(Bytes),
    HSetNx {
        key: Bytes,
        field: Bytes,
        value: Bytes,
    },
    HStrlen {
        key: Bytes,
        field: Bytes,
    },
    /// `HRANDFIELD key [count [WITHVALUES]]`.
    HRandField {
        key: Bytes,
        count: Option<i64>,
        withvalues: bool,
    },
    /// ZRANGE and its older forms (ZREVRANGE, Z\[REV\]RANGEBYSCORE, Z\[REV\]RANGEBYLEX).
    ZRange {
        key: Bytes,
        by: ZRangeBy,
        rev: bool,
        /// LIMIT offset count (a negative count: no bound).
        limit: Option<(i64, i64)>,
        withscores: bool,
        name: &'static str,
    },
    /// ZRANK and ZREVRANK (`WITHSCORE` as in Redis 7.2).
    ZRank {
        key: Bytes,
        member: Bytes,
        rev: bool,
        withscore: bool,
    },
    ZMScore {
        key: Bytes,
        members: Vec<Bytes>,
    },
    ZIncrBy {
        key: Bytes,
        delta: f64,
        member: Bytes,
    },
    /// ZCOUNT (`Score`) and ZLEXCOUNT (`Lex`).
    ZCount {
        key: Bytes,
        by: ZRangeBy,
    },
    /// ZPOPMIN and ZPOPMAX.
    ZPop {
        key: Bytes,
        max: bool,
        count: Option<u64>,
    },
    /// ZREMRANGEBYSCORE, ZREMRANGEBYRANK and ZREMRANGEBYLEX.
    ZRemRange {
        key: Bytes,
        by: ZRangeBy,
        name: &'static str,
    },
    /// LPUSH, RPUSH, LPUSHX and RPUSHX.
    Push {
        key: Bytes,
        values: Vec<Bytes>,
        left: bool,
        only_existing: bool,
        name: &'static str,
    },
    /// `LPOP key [count]` and `RPOP key [count]`.
    Pop {
        key: Bytes,
        left: bool,
        count: Option<u64>,
    },
    LRange {
        key: Bytes,
        start: i64,
        stop: i64,
    },
    LLen(Bytes),
    LIndex {
        key: Bytes,
        index: i64,
    },
    LSet {
        key: Bytes,
        index: i64,
        value: Bytes,
    },
    LRem {
        key: Bytes,
        count: i64,
        value: Bytes,
    },
    LTrim {
        key: Bytes,
        start: i64,
        stop: i64,
    },
    LInsert {
        key: Bytes,
        before: bool,
        pivot: Bytes,
        value: Bytes,
    },
    /// `LPOS key element [RANK r] [COUNT n] [MAXLEN m]` (`count`: `None` without COUNT).
    LPos {
        key: Bytes,
        element: Bytes,
        rank: i64,
        count: Option<u64>,
        maxlen: u64,
    },
    /// LMOVE and RPOPLPUSH.
    LMove {
        src: Bytes,
        dst: Bytes,
        from_left: bool,
        to_left: bool,
        name: &'static str,
    },
    /// `BLPOP key [key ...] timeout` and BRPOP: the first non-empty list's end, or wait for
    /// one (`timeout_ms` 0: for ever).
    BPop {
        keys: Vec<Bytes>,
        left: bool,
        timeout_ms: u64,
    },
    /// `BZPOPMIN key [key ...] timeout` and BZPOPMAX: the first non-empty sorted set's
    /// lowest (highest) member, or wait for one (`timeout_ms` 0: for ever).
    BZPop {
        keys: Vec<Bytes>,
        max: bool,
        timeout_ms: u64,
    },
    /// `LMPOP numkeys key... LEFT|RIGHT [COUNT n]` and `BLMPOP timeout numkeys ...`: up to
    /// `count` items from one end of the first non-empty list (BLMPOP: or wait for one;
    /// `timeout_ms` `Some(0)`: for ever).
    MPop {
        keys: Vec<Bytes>,
        left: bool,
        count: u64,
        timeout_ms: Option<u64>,
    },
    /// `ZMPOP numkeys key... MIN|MAX [COUNT n]` and `BZMPOP timeout numkeys ...`: up to
    /// `count` lowest (highest) members of the first non-empty sorted set (BZMPOP: or wait
    /// for one).
    ZMPop {
        keys: Vec<Bytes>,
        max: bool,
        count: u64,
        timeout_ms: Option<u64>,
    },
    /// `BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout` and `BRPOPLPUSH src dst timeout`: LMOVE,
    /// or wait for `src` to have an item (`timeout_ms` 0: for ever).
    BLMove {
        src: Bytes,
        dst: Bytes,
        from_left: bool,
        to_left: bool,
        timeout_ms: u64,
        name: &'static str,
    },
}

/// A blocking command's timeout in seconds (a float, as Redis 7 reads it: rounded up to the
/// millisecond), with Redis's errors.
fn block_timeout(v: &[u8]) -> Result<u64, CommandError> {
    let secs =
        super::parse_f64(v).ok_or_else(|| err("ERR timeout is not a float or out of range"))?;
    let ms = (secs * 1000.0).ceil();
    if ms > i64::MAX as f64 {
        return Err(err("ERR timeout is out of range"));
    }
    if ms < 0.0 {
        return Err(err("ERR timeout is negative"));
    }
    // Below i64::MAX and not negative: the cast is exact up to f64's precision.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(ms as u64)
}

/// `ERR value is out of range, must be positive`.
fn not_positive() -> CommandError {
    err("ERR value is out of range, must be positive")
}

/// A count Redis reads with `getRangeLong(-LONG_MAX, LONG_MAX)`.
fn symmetric_count(v: &[u8]) -> Result<i64, CommandError> {
    let n = int(v)?;
    if n == i64::MIN {
        return Err(CommandError(format!(
            "ERR value is out of range, value must between {} and {}",
            -i64::MAX,
            i64::MAX
        )));
    }
    Ok(n)
}

/// A count Redis reads with `getPositiveLong` (0 allowed; anything else, a non-number too,
/// answers the same error).
fn positive_count(v: &[u8]) -> Result<u64, CommandError> {
    super::parse_i64(v)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(not_positive)
}

/// A lexicographic range end.
fn lex_bound(s: &[u8]) -> Result<LexBound, CommandError> {
    let bad = || err("ERR min or max not valid string range item");
    match s.split_first() {
        Some((b'+', [])) => Ok(LexBound::PosInf),
        Some((b'-', [])) => Ok(LexBound::NegInf),
        Some((b'[', rest)) => Ok(LexBound::Inclusive(Bytes::copy_from_slice(rest))),
        Some((b'(', rest)) => Ok(LexBound::Exclusive(Bytes::copy_from_slice(rest))),
        _ => Err(bad()),
    }
}

/// How a ZRANGE-like command reads its range: by rank unless fixed by its name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeKind {
    Auto,
    Rank,
    Score,
    Lex,
}

/// Redis's `zrangeGenericCommand` option parsing: `a` is the arguments after the name
/// (key, min, max, options); `kind` and `rev` are fixed by the command's name.
fn parse_zrange(
    a: &[Bytes],
    name: &'static str,
    mut kind: RangeKind,
    rev_fixed: bool,
) -> Result<Collection, CommandError> {
    let (mut withscores, mut limit, mut rev) = (false, None, rev_fixed);
    let mut rev_set = rev_fixed;
    let mut j = 3;
    while j < a.len() {
        let left = a.len() - j - 1;
        match lower(&a[j]).as_slice() {
            b"withscores" => withscores = true,
            b"limit" if left >= 2 => {
                limit = Some((int(&a[j + 1])?, int(&a[j + 2])?));
                j += 2;
            }
            b"rev" if !rev_set => {
                rev = true;
                rev_set = true;
            }
            b"bylex" if kind == RangeKind::Auto => kind = RangeKind::Lex,
            b"byscore" if kind == RangeKind::Auto => kind = RangeKind::Score,
            _ => return Err(err(SYNTAX)),
        }
        j += 1;
    }
    if kind == RangeKind::Auto {
        kind = RangeKind::Rank;
    }
    // Redis's "no LIMIT" is a count of -1, so `LIMIT 0 -1` passes this check.
    if limit.is_some_and(|(_, c)| c != -1) && kind == RangeKind::Rank {
        return Err(err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && kind == RangeKind::Lex {
        return Err(err(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    let (lo, hi) = if rev && kind != RangeKind::Rank {
        (&a[2], &a[1])
    } else {
        (&a[1], &a[2])
    };
    let by = match kind {
        RangeKind::Score => ZRangeBy::Score(score_bound(lo)?, score_bound(hi)?),
        RangeKind::Lex => ZRangeBy::Lex(lex_bound(lo)?, lex_bound(hi)?),
        _ => ZRangeBy::Rank(int(lo)?, int(hi)?),
    };
    Ok(Collection::ZRange {
        key: a[0].clone(),
        by,
        rev,
        limit: limit.filter(|_| kind != RangeKind::Rank),
        withscores,
        name,
    })
}

/// `SSCAN key cursor [MATCH p] [COUNT n]` and its hash and sorted-set twins.
fn parse_coll_scan(a: &[Bytes], of: ScanOf) -> Result<Collection, CommandError> {
    let cursor = std::str::from_utf8(&a[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| err("ERR invalid cursor"))?;
    let (mut pattern, mut count, mut bad_option) = (None, 10u64, None);
    let mut i = 2;
    while i < a.len() && bad_option.is_none() {
        let Some(v) = a.get(i + 1) else {
            bad_option = Some(err(SYNTAX));
            break;
        };
        match lower(&a[i]).as_slice() {
            b"match" => pattern = Some(v.clone()),
            b"count" => match int(v) {
                Ok(n) if n >= 1 => count = n.unsigned_abs(),
                Ok(_) => bad_option = Some(err(SYNTAX)),
                Err(e) => bad_option = Some(e),
            },
            _ => bad_option = Some(err(SYNTAX)),
        }
        i += 2;
    }
    Ok(Collection::CollScan {
        of,
        key: a[0].clone(),
        cursor,
        pattern,
        count,
        bad_option,
    })
}

fn parse_lpos(a: &[Bytes]) -> Result<Collection, CommandError> {
    let (mut rank, mut count, mut maxlen) = (1, None, 0);
    let mut j = 2;
    while j < a.len() {
        let Some(v) = a.get(j + 1) else {
            return Err(err(SYNTAX));
        };
        match lower(&a[j]).as_slice() {
            b"rank" => {
                rank = symmetric_count(v)?;
                if rank == 0 {
                    return Err(err(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                    ));
                }
            }
            b"count" => {
                count =
                    Some(u64::try_from(int(v)?).map_err(|_| err("ERR COUNT can't be negative"))?);
            }
            b"maxlen" => {
                maxlen = u64::try_from(int(v)?).map_err(|_| err("ERR MAXLEN can't be negative"))?;
            }
            _ => return Err(err(SYNTAX)),
        }
        j += 2;
    }
    Ok(Collection::LPos {
        key: a[0].clone(),
        element: a[1].clone(),
        rank,
        count,
        maxlen,
    })
}

/// LMPOP, BLMPOP, ZMPOP and BZMPOP after the command name, in Redis 7's order: numkeys, the
/// keys, the end (`LEFT`/`RIGHT`, or `MIN`/`MAX` for `zset`), `COUNT`, and only then a
/// blocking command's timeout (`a[0]`).
fn parse_mpop(a: &[Bytes], zset: bool, blocking: bool) -> Result<Collection, CommandError> {
    let (timeout, a) = if blocking {
        let (t, rest) = a.split_first().ok_or_else(|| err(SYNTAX))?;
        (Some(t), rest)
    } else {
        (None, a)
    };
    let numkeys = a
        .first()
        .and_then(|n| super::parse_i64(n))
        .filter(|&n| n >= 1)
        .ok_or_else(|| err("ERR numkeys should be greater than 0"))?;
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    let end_at = numkeys.checked_add(1).filter(|&i| i < a.len());
    let Some(end_at) = end_at else {
        return Err(err(SYNTAX));
    };
    let first = match (zset, lower(&a[end_at]).as_slice()) {
        (false, b"left") | (true, b"min") => true,
        (false, b"right") | (true, b"max") => false,
        _ => return Err(err(SYNTAX)),
    };
    let mut count = None;
    let mut j = end_at + 1;
    while j < a.len() {
        let more = a.len() - 1 - j;
        if count.is_none() && lower(&a[j]) == b"count" && more > 0 {
            j += 1;
            count = Some(
                super::parse_i64(&a[j])
                    .filter(|&c| c >= 1)
                    .and_then(|c| u64::try_from(c).ok())
                    .ok_or_else(|| err("ERR count should be greater than 0"))?,
            );
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    let timeout_ms = timeout.map(|t| block_timeout(t)).transpose()?;
    let keys = a[1..=numkeys].to_vec();
    let count = count.unwrap_or(1);
    Ok(if zset {
        Collection::ZMPop {
            keys,
            max: !first,
            count,
            timeout_ms,
        }
    } else {
        Collection::MPop {
            keys,
            left: first,
            count,
            timeout_ms,
        }
    })
}

/// What `OBJECT` asks about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectOf {
    /// `ENCODING`: the internal representation's name.
    Encoding,
    /// `FREQ`: the LFU counter.
    Freq,
    /// `IDLETIME`: seconds since the last access.
    IdleTime,
    /// `REFCOUNT`: references to the value.
    RefCount,
}

fn parse_object(a: &[Bytes]) -> Result<Collection, CommandError> {
    let sub = lower(&a[0]);
    let of = match sub.as_slice() {
        b"help" if a.len() == 1 => return Ok(Collection::ObjectHelp),
        b"help" => return Err(super::wrong_args("object|help")),
        b"encoding" => ObjectOf::Encoding,
        b"freq" => ObjectOf::Freq,
        b"idletime" => ObjectOf::IdleTime,
        b"refcount" => ObjectOf::RefCount,
        _ => return Err(super::unknown_subcommand(&a[0], "OBJECT")),
    };
    if a.len() != 2 {
        let name = String::from_utf8_lossy(&sub).into_owned();
        return Err(super::wrong_args(&format!("object|{name}")));
    }
    Ok(Collection::Object {
        of,
        key: a[1].clone(),
    })
}

/// LCS's options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LcsOptions {
    /// `LEN`: the length only.
    pub len: bool,
    /// `IDX`: the matching ranges and the length.
    pub idx: bool,
    /// `MINMATCHLEN n`: ranges shorter than this are left out of IDX's reply (0: none).
    pub min_match_len: u64,
    /// `WITHMATCHLEN`: each IDX range with its length.
    pub with_match_len: bool,
}

impl LcsOptions {
    /// Parses LCS's options (the arguments after the two keys).
    ///
    /// # Errors
    /// Redis's: a syntax error for an unknown option or MINMATCHLEN without its number, the
    /// integer error for a bad number, and the LEN-with-IDX refusal.
    pub fn parse(options: &[Bytes]) -> Result<LcsOptions, CommandError> {
        let mut o = LcsOptions::default();
        let mut j = 0;
        while j < options.len() {
            match lower(&options[j]).as_slice() {
                b"idx" => o.idx = true,
                b"len" => o.len = true,
                b"withmatchlen" => o.with_match_len = true,
                b"minmatchlen" if j + 1 < options.len() => {
                    // Negative counts as 0, as in Redis.
                    o.min_match_len = u64::try_from(int(&options[j + 1])?).unwrap_or(0);
                    j += 1;
                }
                _ => return Err(err(SYNTAX)),
            }
            j += 1;
        }
        if o.idx && o.len {
            return Err(err(
                "ERR If you want both the length and indexes, please just use IDX.",
            ));
        }
        Ok(o)
    }
}

fn parse_sintercard(a: &[Bytes]) -> Result<Collection, CommandError> {
    let numkeys_err = || err("ERR numkeys should be greater than 0");
    let n = super::parse_i64(&a[0])
        .filter(|&n| n >= 1)
        .ok_or_else(numkeys_err)?;
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if n > a.len() - 1 {
        return Err(err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let keys = a[1..=n].to_vec();
    let mut limit = 0;
    let mut j = n + 1;
    while j < a.len() {
        let more = a.len() - 1 - j;
        if lower(&a[j]) == b"limit" && more > 0 {
            j += 1;
            limit = super::parse_i64(&a[j])
                .and_then(|l| u64::try_from(l).ok())
                .ok_or_else(|| err("ERR LIMIT can't be negative"))?;
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    Ok(Collection::SInterCard { keys, limit })
}

/// Parses the collection command `name` (a row of the command table) from `a`, the
/// arguments after the name; `None`: not a collection command. Arity is already checked.
///
/// # Errors
/// Redis's error for a bad option or number.
pub fn parse(name: &str, a: &[Bytes]) -> Option<Result<Collection, CommandError>> {
    use Collection as C;
    let key = || a[0].clone();
    let rest = || a[1..].to_vec();
    let parsed = (|| -> Result<Option<Collection>, CommandError> {
        Ok(Some(match name {
            "sadd" => C::SAdd {
                key: key(),
                members: rest(),
            },
            "srem" => C::SRem {
                key: key(),
                members: rest(),
            },
            "smembers" => C::SMembers(key()),
            "sismember" | "smismember" => C::SIsMember {
                key: key(),
                members: rest(),
                many: name == "smismember",
            },
            "scard" => C::SCard(key()),
            "spop" if a.len() > 2 => return Err(err(SYNTAX)),
            "spop" => C::SPop {
                key: key(),
                count: a.get(1).map(|c| positive_count(c)).transpose()?,
            },
            "srandmember" if a.len() > 2 => return Err(err(SYNTAX)),
            "srandmember" => C::SRandMember {
                key: key(),
                count: a.get(1).map(|c| symmetric_count(c)).transpose()?,
            },
            "sinter" | "sunion" | "sdiff" => C::SCombine {
                op: set_op(name),
                keys: a.to_vec(),
            },
            "sinterstore" | "sunionstore" | "sdiffstore" => C::SCombineStore {
                op: set_op(name),
                dst: key(),
                keys: rest(),
            },
            "sintercard" => parse_sintercard(a)?,
            "object" => parse_object(a)?,
            "lcs" => C::Lcs {
                a: key(),
                b: a[1].clone(),
                options: a[2..].to_vec(),
            },
            "smove" => C::SMove {
                src: key(),
                dst: a[1].clone(),
                member: a[2].clone(),
            },
            "sscan" => parse_coll_scan(a, ScanOf::Set)?,
            "hscan" => parse_coll_scan(a, ScanOf::Hash)?,
            "zscan" => parse_coll_scan(a, ScanOf::ZSet)?,
            "hincrby" => C::HIncrBy {
                key: key(),
                field: a[1].clone(),
                delta: int(&a[2])?,
            },
            "hincrbyfloat" => {
                let d = parse_f64(&a[2]).ok_or_else(|| err(NOT_FLOAT))?;
                if d.is_infinite() {
                    return Err(err("ERR value is NaN or Infinity"));
                }
                C::HIncrByFloat {
                    key: key(),
                    field: a[1].clone(),
                    delta: a[2].clone(),
                }
            }
            "hkeys" => C::HKeys(key()),
            "hvals" => C::HVals(key()),
            "hsetnx" => C::HSetNx {
                key: key(),
                field: a[1].clone(),
                value: a[2].clone(),
            },
            "hstrlen" => C::HStrlen {
                key: key(),
                field: a[1].clone(),
            },
            "hrandfield" => {
                let count = a.get(1).map(|c| symmetric_count(c)).transpose()?;
                let withvalues = match a.get(2) {
                    None => false,
                    Some(w) if a.len() == 3 && lower(w) == b"withvalues" => true,
                    Some(_) => return Err(err(SYNTAX)),
                };
                if withvalues && count.is_some_and(|c| !(-i64::MAX / 2..=i64::MAX / 2).contains(&c))
                {
                    return Err(err("ERR value is out of range"));
                }
                C::HRandField {
                    key: key(),
                    count,
                    withvalues,
                }
            }
            "zrange" => parse_zrange(a, "zrange", RangeKind::Auto, false)?,
            "zrevrange" => parse_zrange(a, "zrevrange", RangeKind::Rank, true)?,
            "zrevrangebyscore" => parse_zrange(a, "zrevrangebyscore", RangeKind::Score, true)?,
            "zrangebylex" => parse_zrange(a, "zrangebylex", RangeKind::Lex, false)?,
            "zrevrangebylex" => parse_zrange(a, "zrevrangebylex", RangeKind::Lex, true)?,
            "zrank" | "zrevrank" => C::ZRank {
                key: key(),
                member: a[1].clone(),
                rev: name == "zrevrank",
                withscore: match a.get(2) {
                    None => false,
                    Some(w) if a.len() == 3 && lower(w) == b"withscore" => true,
                    Some(_) => return Err(err(SYNTAX)),
                },
            },
            "zmscore" => C::ZMScore {
                key: key(),
                members: rest(),
            },
            "zincrby" => C::ZIncrBy {
                key: key(),
                delta: parse_f64(&a[1]).ok_or_else(|| err(NOT_FLOAT))?,
                member: a[2].clone(),
            },
            "zcount" => C::ZCount {
                key: key(),
                by: ZRangeBy::Score(score_bound(&a[1])?, score_bound(&a[2])?),
            },
            "zlexcount" => C::ZCount {
                key: key(),
                by: ZRangeBy::Lex(lex_bound(&a[1])?, lex_bound(&a[2])?),
            },
            "zpopmin" | "zpopmax" if a.len() > 2 => return Err(err(SYNTAX)),
            "zpopmin" | "zpopmax" => C::ZPop {
                key: key(),
                max: name == "zpopmax",
                count: a.get(1).map(|c| positive_count(c)).transpose()?,
            },
            "bzpopmin" | "bzpopmax" => {
                let (timeout, keys) = a.split_last().ok_or_else(|| super::wrong_args(name))?;
                C::BZPop {
                    timeout_ms: block_timeout(timeout)?,
                    keys: keys.to_vec(),
                    max: name == "bzpopmax",
                }
            }
            "zremrangebyscore" => C::ZRemRange {
                key: key(),
                by: ZRangeBy::Score(score_bound(&a[1])?, score_bound(&a[2])?),
                name: "zremrangebyscore",
            },
            "zremrangebyrank" => C::ZRemRange {
                key: key(),
                by: ZRangeBy::Rank(int(&a[1])?, int(&a[2])?),
                name: "zremrangebyrank",
            },
            "zremrangebylex" => C::ZRemRange {
                key: key(),
                by: ZRangeBy::Lex(lex_bound(&a[1])?, lex_bound(&a[2])?),
                name: "zremrangebylex",
            },
            "lpush" | "rpush" | "lpushx" | "rpushx" => C::Push {
                key: key(),
                values: rest(),
                left: name.starts_with('l'),
                only_existing: name.ends_with('x'),
                name: match name {
                    "lpush" => "lpush",
                    "rpush" => "rpush",
                    "lpushx" => "lpushx",
                    _ => "rpushx",
                },
            },
            "lpop" | "rpop" if a.len() > 2 => return Err(super::wrong_args(name)),
            "lpop" | "rpop" => C::Pop {
                key: key(),
                left: name == "lpop",
                count: a.get(1).map(|c| positive_count(c)).transpose()?,
            },
            "lrange" => C::LRange {
                key: key(),
                start: int(&a[1])?,
                stop: int(&a[2])?,
            },
            "llen" => C::LLen(key()),
            "lindex" => C::LIndex {
                key: key(),
                index: int(&a[1])?,
            },
            "lset" => C::LSet {
                key: key(),
                index: int(&a[1])?,
                value: a[2].clone(),
            },
            "lrem" => C::LRem {
                key: key(),
                count: int(&a[1])?,
                value: a[2].clone(),
            },
            "ltrim" => C::LTrim {
                key: key(),
                start: int(&a[1])?,
                stop: int(&a[2])?,
            },
            "linsert" => C::LInsert {
                key: key(),
                before: match lower(&a[1]).as_slice() {
                    b"before" => true,
                    b"after" => false,
                    _ => return Err(err(SYNTAX)),
                },
                pivot: a[2].clone(),
                value: a[3].clone(),
            },
            "lmove" => {
                let side = |s: &[u8]| match lower(s).as_slice() {
                    b"left" => Ok(true),
                    b"right" => Ok(false),
                    _ => Err(err(SYNTAX)),
                };
                C::LMove {
                    src: key(),
                    dst: a[1].clone(),
                    from_left: side(&a[2])?,
                    to_left: side(&a[3])?,
                    name: "lmove",
                }
            }
            "lpos" => parse_lpos(a)?,
            "rpoplpush" => C::LMove {
                src: key(),
                dst: a[1].clone(),
                from_left: false,
                to_left: true,
                name: "rpoplpush",
            },
            // The timeout is read first, as Redis does (a bad timeout wins over a bad key).
            "blpop" | "brpop" => {
                let (timeout, keys) = a.split_last().ok_or_else(|| super::wrong_args(name))?;
                C::BPop {
                    timeout_ms: block_timeout(timeout)?,
                    keys: keys.to_vec(),
                    left: name == "blpop",
                }
            }
            "blmove" => {
                // The ends are read before the timeout, as Redis does.
                let side = |s: &[u8]| match lower(s).as_slice() {
                    b"left" => Ok(true),
                    b"right" => Ok(false),
                    _ => Err(err(SYNTAX)),
                };
                let (from_left, to_left) = (side(&a[2])?, side(&a[3])?);
                C::BLMove {
                    src: key(),
                    dst: a[1].clone(),
                    from_left,
                    to_left,
                    timeout_ms: block_timeout(&a[4])?,
                    name: "blmove",
                }
            }
            "lmpop" => parse_mpop(a, false, false)?,
            "blmpop" => parse_mpop(a, false, true)?,
            "zmpop" => parse_mpop(a, true, false)?,
            "bzmpop" => parse_mpop(a, true, true)?,
            "brpoplpush" => C::BLMove {
                timeout_ms: block_timeout(&a[2])?,
                src: key(),
                dst: a[1].clone(),
                from_left: false,
                to_left: true,
                name: "brpoplpush",
            },
            _ => return Ok(None),
        }))
    })();
    parsed.transpose()
}

fn set_op(name: &str) -> SetOp {
    if name.starts_with("sinter") {
        SetOp::Inter
    } else if name.starts_with("sunion") {
        SetOp::Union
    } else {
        SetOp::Diff
    }
}

impl Collection {
    /// How long a blocking command (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN, BZPOPMAX,
    /// BLMPOP, BZMPOP) may wait, in milliseconds (0: for ever); `None` for every other
    /// command.
    #[must_use]
    pub fn block_timeout_ms(&self) -> Option<u64> {
        match self {
            Collection::BPop { timeout_ms, .. }
            | Collection::BZPop { timeout_ms, .. }
            | Collection::BLMove { timeout_ms, .. } => Some(*timeout_ms),
            Collection::MPop { timeout_ms, .. } | Collection::ZMPop { timeout_ms, .. } => {
                *timeout_ms
            }
            _ => None,
        }
    }

    /// The command's name as in the command table.
    #[must_use]
    pub fn name(&self) -> &'static str {
        use Collection as C;
        match self {
            C::SAdd { .. } => "sadd",
            C::SRem { .. } => "srem",
            C::SMembers(_) => "smembers",
            C::SIsMember { many: false, .. } => "sismember",
            C::SIsMember { .. } => "smismember",
            C::SCard(_) => "scard",
            C::SPop { .. } => "spop",
            C::SRandMember { .. } => "srandmember",
            C::SCombine { op, .. } => match op {
                SetOp::Inter => "sinter",
                SetOp::Union => "sunion",
                SetOp::Diff => "sdiff",
            },
            C::SCombineStore { op, .. } => match op {
                SetOp::Inter => "sinterstore",
                SetOp::Union => "sunionstore",
                SetOp::Diff => "sdiffstore",
            },
            C::SInterCard { .. } => "sintercard",
            C::Lcs { .. } => "lcs",
            C::Object { .. } | C::ObjectHelp => "object",
            C::SMove { .. } => "smove",
            C::CollScan { of, .. } => match of {
                ScanOf::Set => "sscan",
                ScanOf::Hash => "hscan",
                ScanOf::ZSet => "zscan",
            },
            C::HIncrBy { .. } => "hincrby",
            C::HIncrByFloat { .. } => "hincrbyfloat",
            C::HKeys(_) => "hkeys",
            C::HVals(_) => "hvals",
            C::HSetNx { .. } => "hsetnx",
            C::HStrlen { .. } => "hstrlen",
            C::HRandField { .. } => "hrandfield",
            C::ZRange { name, .. }
            | C::ZRemRange { name, .. }
            | C::Push { name, .. }
            | C::LMove { name, .. }
            | C::BLMove { name, .. } => name,
            C::BPop { left: true, .. } => "blpop",
            C::BPop { .. } => "brpop",
            C::BZPop { max: false, .. } => "bzpopmin",
            C::BZPop { .. } => "bzpopmax",
            C::Pop { left: true, .. } => "lpop",
            C::Pop { .. } => "rpop",
            C::LRange { .. } => "lrange",
            C::LLen(_) => "llen",
            C::LIndex { .. } => "lindex",
            C::LSet { .. } => "lset",
            C::LRem { .. } => "lrem",
            C::LTrim { .. } => "ltrim",
            C::LInsert { .. } => "linsert",
            C::LPos { .. } => "lpos",
            C::ZRank { rev: false, .. } => "zrank",
            C::ZRank { .. } => "zrevrank",
            C::ZMScore { .. } => "zmscore",
            C::ZIncrBy { .. } => "zincrby",
            C::ZCount {
                by: ZRangeBy::Lex(..),
                ..
            } => "zlexcount",
            C::ZCount { .. } => "zcount",
            C::ZPop { max: false, .. } => "zpopmin",
            C::ZPop { .. } => "zpopmax",
            C::MPop {
                timeout_ms: None, ..
            } => "lmpop",
            C::MPop { .. } => "blmpop",
            C::ZMPop {
                timeout_ms: None, ..
            } => "zmpop",
            C::ZMPop { .. } => "bzmpop",
        }
    }

    /// The keys the command touches, in argument order.
    #[must_use]
    pub fn keys(&self) -> Vec<&[u8]> {
        use Collection as C;
        match self {
            C::SCombine { keys, .. } | C::SInterCard { keys, .. } => {
                keys.iter().map(|k| &k[..]).collect()
            }
            C::SCombineStore { dst, keys, .. } => std::iter::once(&dst[..])
                .chain(keys.iter().map(|k| &k[..]))
                .collect(),
            C::SMove { src, dst, .. } | C::LMove { src, dst, .. } | C::BLMove { src, dst, .. } => {
                vec![&src[..], &dst[..]]
            }
            C::Lcs { a, b, .. } => vec![&a[..], &b[..]],
            C::Object { key, .. } => vec![&key[..]],
            C::ObjectHelp => Vec::new(),
            C::BPop { keys, .. }
            | C::BZPop { keys, .. }
            | C::MPop { keys, .. }
            | C::ZMPop { keys, .. } => keys.iter().map(|k| &k[..]).collect(),
            C::SAdd { key, .. }
            | C::SRem { key, .. }
            | C::SMembers(key)
            | C::SIsMember { key, .. }
            | C::SCard(key)
            | C::SPop { key, .. }
            | C::SRandMember { key, .. }
            | C::CollScan { key, .. }
            | C::HIncrBy { key, .. }
            | C::HIncrByFloat { key, .. }
            | C::HKeys(key)
            | C::HVals(key)
            | C::HSetNx { key, .. }
            | C::HStrlen { key, .. }
            | C::HRandField { key, .. }
            | C::ZRange { key, .. }
            | C::ZRank { key, .. }
            | C::ZMScore { key, .. }
            | C::ZIncrBy { key, .. }
            | C::ZCount { key, .. }
            | C::ZPop { key, .. }
            | C::ZRemRange { key, .. }
            | C::Push { key, .. }
            | C::Pop { key, .. }
            | C::LRange { key, .. }
            | C::LLen(key)
            | C::LIndex { key, .. }
            | C::LSet { key, .. }
            | C::LRem { key, .. }
            | C::LTrim { key, .. }
            | C::LInsert { key, .. }
            | C::LPos { key, .. } => vec![&key[..]],
        }
    }
}

#[cfg(test)]
mod tests;
