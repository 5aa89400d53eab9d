//! Parsing a framed request into a [`Command`]: arity, options and numbers, with Redis 7's
//! error texts; the per-command parsers and the number helpers the other modules share.

use bytes::Bytes;

use super::*;

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

pub(super) fn int(s: &[u8]) -> Result<i64, CommandError> {
    parse_i64(s).ok_or_else(|| err(NOT_INTEGER))
}

pub(super) fn lower(s: &[u8]) -> Vec<u8> {
    s.to_ascii_lowercase()
}

/// `ERR wrong number of arguments for 'name' command`.
/// `COPY source destination [DB index] [REPLACE]`: the drive has database 0 only.
pub(super) fn parse_copy(a: &[Bytes]) -> Result<Command, CommandError> {
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
pub(super) fn parse_migrate(a: &[Bytes]) -> Result<Command, CommandError> {
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
pub(super) fn parse_restore(a: &[Bytes], asking: bool) -> Result<Command, CommandError> {
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
pub(super) fn parse_keys_in_slot(a: &[Bytes]) -> Option<Result<Command, CommandError>> {
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

pub(super) fn wrong_args(name: &str) -> CommandError {
    CommandError(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

pub(super) fn unknown_subcommand(sub: &[u8], container: &str) -> CommandError {
    CommandError(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)]),
        container
    ))
}

/// Redis 7's unknown-command text, with up to 128 bytes of the first arguments.
pub(super) fn unknown_command(args: &[Bytes]) -> CommandError {
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

pub(super) fn pairs(a: &[Bytes]) -> Vec<(Bytes, Bytes)> {
    a.chunks_exact(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

pub(super) fn score_bound(s: &[u8]) -> Result<ScoreBound, CommandError> {
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

pub(super) fn parse_set(a: &[Bytes]) -> Result<Command, CommandError> {
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
                expire = Some(expire_of(&opt, n));
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

pub(super) fn parse_scan(a: &[Bytes]) -> Result<Command, CommandError> {
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

pub(super) fn parse_range(a: &[Bytes]) -> Result<Command, CommandError> {
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

pub(super) fn parse_hello(a: &[Bytes]) -> Result<Command, CommandError> {
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

pub(super) fn parse_zadd(a: &[Bytes]) -> Result<Command, CommandError> {
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

pub(super) fn parse_zrangebyscore(a: &[Bytes]) -> Result<Command, CommandError> {
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

pub(super) fn parse_config(a: &[Bytes]) -> Result<Command, CommandError> {
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
pub(super) fn parse_acl(a: &[Bytes]) -> Result<Command, CommandError> {
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

pub(super) fn parse_command(a: &[Bytes]) -> Result<Command, CommandError> {
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

pub(super) fn parse_client(a: &[Bytes]) -> Result<Command, CommandError> {
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
pub(super) fn parse_client_pause(a: &[Bytes]) -> Result<Command, CommandError> {
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
pub(super) fn on_off(v: &[u8]) -> Result<bool, CommandError> {
    match lower(v).as_slice() {
        b"on" => Ok(true),
        b"off" => Ok(false),
        _ => Err(err(SYNTAX)),
    }
}

/// `CLIENT KILL`'s arguments: one address (the old form) or filter-value pairs.
pub(super) fn parse_client_kill(a: &[Bytes]) -> Result<ClientKill, CommandError> {
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
pub(super) fn parse_pubsub(a: &[Bytes]) -> Result<Command, CommandError> {
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
pub(super) fn parse_latency(a: &[Bytes]) -> Result<Command, CommandError> {
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
pub(super) fn parse_slowlog(a: &[Bytes]) -> Result<Command, CommandError> {
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

pub(super) fn parse_shutdown(a: &[Bytes]) -> Result<Command, CommandError> {
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
pub(super) fn parse_expire_condition(a: &[Bytes]) -> Result<Option<ExpireCondition>, CommandError> {
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

pub(super) fn parse_expire(a: &[Bytes], name: &'static str) -> Result<Command, CommandError> {
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
/// The deadline option of SET or GETEX (`ex`, `px`, `exat`, `pxat`, lowercase) with its amount.
pub(super) fn expire_of(opt: &[u8], n: u64) -> Expire {
    match opt {
        b"ex" => Expire::Ex(n),
        b"px" => Expire::Px(n),
        b"exat" => Expire::ExAt(n),
        _ => Expire::PxAt(n),
    }
}

pub(super) fn expire_amount(
    v: &[u8],
    seconds: bool,
    relative: bool,
    name: &str,
) -> Result<u64, CommandError> {
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

pub(super) fn parse_getex(a: &[Bytes]) -> Result<Command, CommandError> {
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
                expire = Some(expire_of(&opt, n));
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
}
