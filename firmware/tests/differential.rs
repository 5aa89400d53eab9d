//! Compatibility by difference: the same commands against redis-server and the drive, reply
//! for reply. Covers the reading commands (which run asynchronously on the drive, or on its
//! network thread when cached) with present, missing, expired and wrongly typed keys.
//! redis-server must be installed (`cargo xtask test` installs it): the test fails without it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Drive;
use redis::Value;

/// An in-memory redis-server on a free loopback port; killed on drop.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start(dir: &std::path::Path) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (cargo xtask test installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        while Instant::now() < deadline {
            if let Ok(mut c) = client.get_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return RedisServer { child, port };
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server did not start");
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A reply with the parts Redis leaves unordered put in order (HGETALL's pairs) and error
/// texts cut to their code (the drive's messages may differ in wording).
fn normal(cmd: &[&str], v: redis::RedisResult<Value>) -> String {
    match v {
        Err(e) => format!("error {}", e.code().unwrap_or("?")),
        Ok(Value::Array(items)) if cmd[0].eq_ignore_ascii_case("hgetall") => {
            let mut pairs: Vec<String> = items
                .chunks(2)
                .map(|p| format!("{:?}", p.to_vec()))
                .collect();
            pairs.sort();
            format!("{pairs:?}")
        }
        Ok(v) => format!("{v:?}"),
    }
}

fn run(c: &mut redis::Connection, cmd: &[&str]) -> String {
    let mut q = redis::cmd(cmd[0]);
    for a in &cmd[1..] {
        q.arg(*a);
    }
    normal(cmd, q.query::<Value>(c))
}

#[test]
fn reading_commands_answer_as_redis_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let (mut r, mut d) = (redis.conn(), drive.conn());
    let setup: &[&[&str]] = &[
        &["SET", "s", "hello world"],
        &["SET", "n", "12345"],
        &["SET", "gone", "x", "PX", "1"],
        &["HSET", "h", "f1", "v1", "f2", "", "f3", "v3"],
        &["ZADD", "z", "1", "a", "2.5", "b", "-3", "c"],
        &["INCRBY", "n", "5"],
    ];
    for cmd in setup {
        assert_eq!(run(&mut r, cmd), run(&mut d, cmd), "{cmd:?}");
    }
    std::thread::sleep(Duration::from_millis(20));
    let reads: &[&[&str]] = &[
        &["GET", "s"],
        &["GET", "n"],
        &["GET", "h"],
        &["GET", "missing"],
        &["GET", "gone"],
        &["MGET", "s", "h", "missing", "z", "n", "gone"],
        &["STRLEN", "s"],
        &["STRLEN", "h"],
        &["STRLEN", "missing"],
        &["EXISTS", "s", "h", "z", "missing", "s", "gone"],
        &["GETRANGE", "s", "0", "4"],
        &["GETRANGE", "s", "-5", "-1"],
        &["GETRANGE", "s", "6", "100"],
        &["GETRANGE", "s", "5", "2"],
        &["GETRANGE", "s", "-100", "2"],
        &["GETRANGE", "missing", "0", "3"],
        &["GETRANGE", "h", "0", "3"],
        &["HGET", "h", "f1"],
        &["HGET", "h", "f2"],
        &["HGET", "h", "nope"],
        &["HGET", "missing", "f1"],
        &["HGET", "s", "f1"],
        &["HMGET", "h", "f3", "nope", "f1"],
        &["HMGET", "missing", "a", "b"],
        &["HMGET", "z", "a"],
        &["HGETALL", "h"],
        &["HGETALL", "missing"],
        &["HGETALL", "s"],
        &["HLEN", "h"],
        &["HLEN", "missing"],
        &["HLEN", "z"],
        &["HEXISTS", "h", "f2"],
        &["HEXISTS", "h", "nope"],
        &["HEXISTS", "s", "f"],
        &["ZSCORE", "z", "b"],
        &["ZSCORE", "z", "c"],
        &["ZSCORE", "z", "nope"],
        &["ZSCORE", "missing", "a"],
        &["ZSCORE", "h", "a"],
        &["ZCARD", "z"],
        &["ZCARD", "missing"],
        &["ZCARD", "s"],
        &["ZRANGEBYSCORE", "z", "-inf", "+inf"],
        &["ZRANGEBYSCORE", "z", "(-3", "2.5", "WITHSCORES"],
        &["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "1"],
        &["ZRANGEBYSCORE", "h", "0", "1"],
    ];
    // Twice: the first read of a value may go to the device, the second comes from the
    // value cache (on the drive's network thread); both must answer as redis-server does.
    let mut differ = Vec::new();
    for round in 0..2 {
        for cmd in reads {
            let (want, got) = (run(&mut r, cmd), run(&mut d, cmd));
            if want != got {
                differ.push(format!(
                    "round {round} {cmd:?}:\n  redis-server: {want}\n  drive:        {got}"
                ));
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
