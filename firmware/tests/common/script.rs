//! Scripted comparison of the drive with redis-server for the string, keyspace, expiry and
//! transaction suites (`differential`, `differential_sequences`): a reply made comparable
//! ([`strict`]: errors in full, unordered parts sorted, instant-dependent times cut to
//! whether there is one), a command on both servers with what MULTI queued
//! ([`both`]), and a script of `conn: command` lines on two connections each
//! ([`run_script`]).

use std::time::Duration;

use redis::Value;

use super::{Drive, RedisServer};

/// A reply made comparable: errors in full (code and text), the parts Redis leaves unordered
/// (HGETALL's pairs, KEYS) sorted, and times that depend on the instant a command ran
/// (PTTL, EXPIRETIME, PEXPIRETIME of a relative deadline) cut to whether there is one.
pub fn strict(cmd: &[String], v: redis::RedisResult<Value>) -> String {
    match v {
        Err(e) => format!(
            "error {} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or("")
        ),
        Ok(v) => strict_value(cmd, v),
    }
}

/// A flat array of (field, value) pairs, in pair order (HGETALL's, which Redis leaves
/// unordered).
pub fn sorted_pairs(items: &[Value]) -> String {
    let mut pairs: Vec<String> = items
        .chunks(2)
        .map(|p| format!("{:?}", p.to_vec()))
        .collect();
    pairs.sort();
    format!("{pairs:?}")
}

pub fn strict_value(cmd: &[String], v: Value) -> String {
    let name = cmd[0].to_ascii_lowercase();
    match v {
        Value::ServerError(e) => format!("error {} {}", e.code(), e.details().unwrap_or("")),
        Value::Array(items) if name == "hgetall" => sorted_pairs(&items),
        Value::Array(mut items) if name == "keys" => {
            items.sort_by_key(|i| format!("{i:?}"));
            format!("{items:?}")
        }
        Value::Int(n)
            if n >= 0 && matches!(name.as_str(), "pttl" | "expiretime" | "pexpiretime") =>
        {
            "a deadline".to_string()
        }
        // A TTL of a far absolute deadline depends on the millisecond it was asked in.
        Value::Int(n) if n > FAR_TTL && name == "ttl" => "a far deadline".to_string(),
        v => format!("{v:?}"),
    }
}

/// TTLs above this many seconds come from absolute deadlines in the far future.
pub const FAR_TTL: i64 = 1_000_000;

pub fn query(c: &mut redis::Connection, cmd: &[String]) -> redis::RedisResult<Value> {
    let mut q = redis::cmd(&cmd[0]);
    for a in &cmd[1..] {
        q.arg(a.as_bytes());
    }
    q.query::<Value>(c)
}

/// Runs `cmd` on both and returns both normalised replies; an EXEC's items are normalised as
/// the commands queued since MULTI (`queued`).
pub fn both(
    r: &mut redis::Connection,
    d: &mut redis::Connection,
    cmd: &[String],
    queued: &[Vec<String>],
) -> (String, String) {
    let (want, got) = (query(r, cmd), query(d, cmd));
    if cmd[0].eq_ignore_ascii_case("exec") {
        let norm = |v: redis::RedisResult<Value>| match v {
            Ok(Value::Array(items)) if items.len() == queued.len() => items
                .into_iter()
                .zip(queued)
                .map(|(i, c)| strict_value(c, i))
                .collect::<Vec<_>>()
                .join(" | "),
            other => strict(cmd, other),
        };
        return (norm(want), norm(got));
    }
    (strict(cmd, want), strict(cmd, got))
}

pub fn words(line: &str) -> Vec<String> {
    line.split(' ')
        .map(|w| match w {
            "<empty>" => String::new(),
            "<binary>" => "k\u{0}\u{ff}x".to_string(),
            w => w.to_string(),
        })
        .collect()
}

/// Runs a script of `conn: command` lines (connection 1 or 2) on both servers; returns the
/// differences.
pub fn run_script(
    redis: &RedisServer,
    drive: &Drive,
    script: &[&str],
    settle: Duration,
) -> Vec<String> {
    let mut r = [redis.conn(), redis.conn()];
    let mut d = [drive.conn(), drive.conn()];
    let mut queued: [Vec<Vec<String>>; 2] = [Vec::new(), Vec::new()];
    let mut differ = Vec::new();
    for line in script {
        let (who, text) = line.split_once(": ").unwrap_or(("1", line));
        let i = usize::from(who == "2");
        let cmd = words(text);
        let name = cmd[0].to_ascii_lowercase();
        let (want, got) = both(&mut r[i], &mut d[i], &cmd, &queued[i]);
        match name.as_str() {
            "multi" => queued[i].clear(),
            "exec" | "discard" => queued[i].clear(),
            _ if want == "simple-string(\"QUEUED\")" || want.contains("QUEUED") => {
                queued[i].push(cmd.clone())
            }
            _ => {}
        }
        if want != got {
            differ.push(format!(
                "{line}:\n  redis-server: {want}\n  drive:        {got}"
            ));
        }
        if name == "sleep" {
            std::thread::sleep(settle);
        }
    }
    differ
}
