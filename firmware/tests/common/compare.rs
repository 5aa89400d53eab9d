//! Comparing the drive's replies with redis-server's, command by command, for the
//! collection suites (`differential_types`, `differential_random`): a command line's words,
//! how each reply is compared ([`Shape`]: in full, sorted where Redis gives no order, by
//! size where it picks at random), and a run of lines on both servers that returns the
//! differences.

use redis::Value;

use super::{Drive, RedisServer};

/// A command line's words, with `<empty>` for an empty argument and `<binary>` for a name
/// with a NUL and a high byte.
pub fn argv(line: &str) -> Vec<Vec<u8>> {
    line.split(' ')
        .map(|w| match w {
            "<empty>" => Vec::new(),
            "<binary>" => b"b\x00\xffn".to_vec(),
            w => w.as_bytes().to_vec(),
        })
        .collect()
}

pub fn send(c: &mut redis::Connection, args: &[Vec<u8>]) -> redis::RedisResult<Value> {
    let mut q = redis::cmd(std::str::from_utf8(&args[0]).unwrap_or("?"));
    for a in &args[1..] {
        q.arg(&a[..]);
    }
    q.query::<Value>(c)
}

/// How a command's reply is compared.
#[derive(Clone, Copy, PartialEq)]
pub enum Shape {
    /// Byte for byte.
    Exact,
    /// An array whose order Redis does not define: sorted.
    Unordered,
    /// Pairs in an array (field, value) whose order Redis does not define.
    UnorderedPairs,
    /// A random pick: only its size.
    Random,
    /// A SCAN-family page: the cursor, and the items sorted (in pairs for HSCAN/ZSCAN).
    ScanPage { pairs: bool },
}

pub fn shape(args: &[Vec<u8>]) -> Shape {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    match name.as_str() {
        "smembers" | "sinter" | "sunion" | "sdiff" | "hkeys" | "hvals" | "keys" => Shape::Unordered,
        "hgetall" => Shape::UnorderedPairs,
        // A count at least the size returns every member (SPOP: removes them all).
        "spop" | "srandmember" if args.len() == 3 && args[2] == b"100" => Shape::Unordered,
        "spop" | "srandmember" | "hrandfield" => Shape::Random,
        "sscan" => Shape::ScanPage { pairs: false },
        "hscan" | "zscan" => Shape::ScanPage { pairs: true },
        _ => Shape::Exact,
    }
}

pub fn sorted(items: Vec<Value>, pairs: bool) -> String {
    let mut parts: Vec<String> = if pairs {
        items
            .chunks(2)
            .map(|p| format!("{:?}", p.to_vec()))
            .collect()
    } else {
        items.iter().map(|v| format!("{v:?}")).collect()
    };
    parts.sort();
    format!("{parts:?}")
}

/// A reply made comparable (see [`Shape`]).
pub fn normal(shape: Shape, v: redis::RedisResult<Value>) -> String {
    let v = match v {
        Err(e) => {
            return format!(
                "error {} {}",
                e.code().unwrap_or("?"),
                e.detail().unwrap_or("")
            )
        }
        Ok(v) => v,
    };
    match (shape, v) {
        (_, Value::ServerError(e)) => format!("error {} {}", e.code(), e.details().unwrap_or("")),
        (Shape::Unordered, Value::Array(items) | Value::Set(items)) => sorted(items, false),
        (Shape::UnorderedPairs, Value::Array(items)) => sorted(items, true),
        (Shape::Random, Value::Array(items) | Value::Set(items)) => {
            format!("{} items", items.len())
        }
        (Shape::Random, Value::BulkString(_)) => "one item".into(),
        (Shape::ScanPage { pairs }, Value::Array(mut page)) if page.len() == 2 => {
            let items = match page.pop() {
                Some(Value::Array(items)) => items,
                other => return format!("bad page {other:?}"),
            };
            format!("{:?} {}", page[0], sorted(items, pairs))
        }
        (_, v) => format!("{v:?}"),
    }
}

/// Runs `lines` on both servers over one connection each; EXEC's items are compared by
/// the shapes of the commands queued since MULTI. Returns the differences.
pub fn compare(redis: &RedisServer, drive: &Drive, lines: &[String], label: &str) -> Vec<String> {
    let (mut r, mut d) = (redis.conn(), drive.conn());
    let mut queued: Vec<Shape> = Vec::new();
    let mut in_multi = false;
    let mut differ = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let args = argv(line);
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let (want, got) = (send(&mut r, &args), send(&mut d, &args));
        let (want, got) = if name == "exec" {
            let items = |v: redis::RedisResult<Value>| match v {
                Ok(Value::Array(items)) if items.len() == queued.len() => items
                    .into_iter()
                    .zip(&queued)
                    .map(|(v, s)| normal(*s, Ok(v)))
                    .collect::<Vec<_>>()
                    .join(" | "),
                other => normal(Shape::Exact, other),
            };
            (items(want), items(got))
        } else {
            let s = shape(&args);
            if in_multi && matches!(&want, Ok(Value::SimpleString(q)) if q == "QUEUED") {
                queued.push(s);
            }
            (normal(s, want), normal(s, got))
        };
        match name.as_str() {
            "multi" => {
                in_multi = true;
                queued.clear();
            }
            "exec" | "discard" => in_multi = false,
            _ => {}
        }
        if want != got && !ttls_a_second_apart(&name, &want, &got) {
            let from = i.saturating_sub(8);
            differ.push(format!(
                "{label} step {i} `{line}`:\n  redis-server: {want}\n  drive:        {got}\n  after: {:?}",
                &lines[from..i]
            ));
            if differ.len() >= 8 {
                break;
            }
        }
    }
    differ
}

/// Two positive TTL replies at most a second apart. Each server reads its clock when it is
/// asked, the drive a few milliseconds after redis-server, and Redis rounds the
/// milliseconds left to the nearest second: a deadline whose remainder is near a half
/// second rounds to the next second on one of them (seen in CI: 98203783413 against
/// 98203783412 for the same `EXPIREAT` deadline, on a loaded host).
pub fn ttls_a_second_apart(name: &str, want: &str, got: &str) -> bool {
    let secs = |s: &str| {
        s.strip_prefix("int(")
            .and_then(|s| s.strip_suffix(')'))
            .and_then(|n| n.parse::<i64>().ok())
    };
    name == "ttl"
        && matches!((secs(want), secs(got)), (Some(a), Some(b)) if a > 0 && b > 0 && (a - b).abs() <= 1)
}

pub fn script(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|l| (*l).to_string()).collect()
}

pub fn run_both(lines: &[String], label: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    compare(&redis, &drive, lines, label)
}
