//! The drive binary against real clients: redis-rs, redis-cli, redis-benchmark and raw
//! sockets; every command family, restart durability, the thread set, and bad input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use common::{exchange, have_tool, info_field, read_for, Drive};
use redis::{Commands, RedisResult, Value};

fn drive() -> (tempfile::TempDir, Drive) {
    let dir = tempfile::tempdir().unwrap();
    let d = Drive::start(&dir.path().join("data"), &[]);
    (dir, d)
}

#[test]
fn strings_through_redis_rs() {
    let (_dir, d) = drive();
    let mut c = d.conn();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    let _: () = c.set("k", "v1").unwrap();
    assert_eq!(c.get::<_, String>("k").unwrap(), "v1");
    assert_eq!(c.get::<_, Option<String>>("missing").unwrap(), None);
    // Binary-safe keys and values with CR, LF and NUL.
    let key = b"bin\r\n\0key".to_vec();
    let value: Vec<u8> = (0..=255u8).cycle().take(20_000).collect();
    let _: () = c.set(&key, &value).unwrap();
    assert_eq!(c.get::<_, Vec<u8>>(&key).unwrap(), value);
    assert_eq!(c.strlen::<_, i64>(&key).unwrap(), 20_000);
    // SET options.
    let r: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("v2")
        .arg("NX")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None);
    let r: Option<String> = redis::cmd("SET")
        .arg("new")
        .arg("n")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None);
    let old: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("v3")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert_eq!(old.as_deref(), Some("v1"));
    // MSET / MGET / DEL / EXISTS / GETRANGE / INCR.
    let _: () = redis::cmd("MSET")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query(&mut c)
        .unwrap();
    let got: Vec<Option<String>> = c.mget(&["a", "zz", "b"]).unwrap();
    assert_eq!(got, vec![Some("1".into()), None, Some("2".into())]);
    assert_eq!(c.exists::<_, i64>(&["a", "b", "zz", "a"]).unwrap(), 3);
    assert_eq!(c.incr::<_, _, i64>("a", 41).unwrap(), 42);
    assert_eq!(
        redis::cmd("DECR").arg("a").query::<i64>(&mut c).unwrap(),
        41
    );
    let e: RedisResult<i64> = redis::cmd("INCR").arg("k").query(&mut c);
    assert!(e.unwrap_err().to_string().contains("not an integer"));
    let _: () = c.set("s", "This is a string").unwrap();
    assert_eq!(c.getrange::<_, String>("s", -3, -1).unwrap(), "ing");
    assert_eq!(c.del::<_, i64>(&["a", "b", "zz"]).unwrap(), 2);
    assert_eq!(c.get::<_, Option<String>>("a").unwrap(), None);
    // Expiry.
    let _: () = redis::cmd("SET")
        .arg("t")
        .arg("x")
        .arg("PX")
        .arg(150)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        c.get::<_, Option<String>>("t").unwrap().as_deref(),
        Some("x")
    );
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(c.get::<_, Option<String>>("t").unwrap(), None);
    assert_eq!(c.exists::<_, i64>("t").unwrap(), 0);
}

#[test]
fn hashes_sorted_sets_scan_and_flushall() {
    let (_dir, d) = drive();
    let mut c = d.conn();
    assert_eq!(
        c.hset_multiple::<_, _, _, String>("h", &[("f1", "a"), ("f2", "b")])
            .unwrap(),
        "OK"
    );
    assert_eq!(c.hset::<_, _, _, i64>("h", "f3", "c").unwrap(), 1);
    assert_eq!(c.hset::<_, _, _, i64>("h", "f3", "C").unwrap(), 0);
    assert_eq!(c.hget::<_, _, String>("h", "f3").unwrap(), "C");
    let all: HashMap<String, String> = c.hgetall("h").unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(c.hlen::<_, i64>("h").unwrap(), 3);
    assert!(c.hexists::<_, _, bool>("h", "f1").unwrap());
    assert_eq!(c.hdel::<_, _, i64>("h", &["f1", "nope"]).unwrap(), 1);
    let got: Vec<Option<String>> = redis::cmd("HMGET")
        .arg("h")
        .arg("f1")
        .arg("f2")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![None, Some("b".into())]);
    // Wrong types.
    let e: RedisResult<String> = c.get("h");
    assert!(e.unwrap_err().to_string().contains("WRONGTYPE"));
    let _: () = c.set("str", "v").unwrap();
    let e: RedisResult<i64> = c.hset("str", "f", "v");
    assert!(e.unwrap_err().to_string().contains("WRONGTYPE"));
    // Sorted sets.
    let n: i64 = redis::cmd("ZADD")
        .arg("z")
        .arg(3)
        .arg("c")
        .arg(1)
        .arg("a")
        .arg(2)
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3);
    let r: Vec<String> = c.zrangebyscore("z", "-inf", "+inf").unwrap();
    assert_eq!(r, vec!["a", "b", "c"]);
    let r: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg("z")
        .arg("(1")
        .arg(3)
        .arg("LIMIT")
        .arg(1)
        .arg(5)
        .query(&mut c)
        .unwrap();
    assert_eq!(r, vec!["c"]);
    let r: Vec<(String, f64)> = c.zrangebyscore_withscores("z", 2, 3).unwrap();
    assert_eq!(r, vec![("b".into(), 2.0), ("c".into(), 3.0)]);
    assert_eq!(c.zscore::<_, _, Option<f64>>("z", "b").unwrap(), Some(2.0));
    assert_eq!(c.zcard::<_, i64>("z").unwrap(), 3);
    assert_eq!(c.zrem::<_, _, i64>("z", "a").unwrap(), 1);
    // SCAN sees every key once; DBSIZE agrees.
    for i in 0..200 {
        let _: () = c.set(format!("scan:{i}"), i).unwrap();
    }
    let keys: Vec<String> = c.scan_match("scan:*").unwrap().collect();
    let unique: std::collections::BTreeSet<_> = keys.iter().collect();
    assert_eq!((keys.len(), unique.len()), (200, 200));
    let total: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(total, 203);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(c.get::<_, Option<String>>("str").unwrap(), None);
}

#[test]
fn connection_commands_and_info() {
    let (_dir, d) = drive();
    let mut c = d.conn();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("tester")
        .query(&mut c)
        .unwrap();
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(&mut c).unwrap();
    assert_eq!(name, "tester");
    let _: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).unwrap();
    let n: i64 = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    assert!(n > 40);
    let v: Value = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query(&mut c)
        .unwrap();
    assert!(matches!(v, Value::Array(ref a) if a.len() == 2), "{v:?}");
    let e: RedisResult<String> = redis::cmd("SELECT").arg(1).query(&mut c);
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("DB index is out of range"));
    let _: () = c.set("k", "v").unwrap();
    let text: String = redis::cmd("INFO").query(&mut c).unwrap();
    for section in [
        "# Server",
        "# Clients",
        "# Stats",
        "# Keyspace",
        "# Lsm",
        "# Ftl",
    ] {
        assert!(text.contains(section), "INFO lacks {section}");
    }
    assert!(text.contains("db0:keys=1"));
    assert!(info_field(&mut c, "lsm", "user_bytes_written") > 0);
    // RESP3 through HELLO.
    let mut s = d.raw();
    let (out, _) = exchange(&mut s, b"HELLO 3\r\n", Duration::from_millis(500));
    assert!(
        out.starts_with(b"%7\r\n"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let (out, _) = exchange(
        &mut s,
        b"HGETALL nothing\r\nGET nothing\r\n",
        Duration::from_millis(500),
    );
    assert_eq!(out, b"%0\r\n_\r\n");
}

#[test]
fn data_survives_shutdown_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Drive::start(&data, &[]);
    let mut c = d.conn();
    for i in 0..500 {
        let _: () = c.set(format!("key{i}"), vec![i as u8; 1000 + i]).unwrap();
    }
    let _: () = c.hset("h", "f", "v").unwrap();
    let _: () = redis::cmd("SET")
        .arg("ttl")
        .arg("v")
        .arg("EX")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    drop(c);
    assert!(d.shutdown(), "SHUTDOWN must exit cleanly");
    let d = Drive::start(&data, &[]);
    let mut c = d.conn();
    for i in (0..500).step_by(7) {
        assert_eq!(
            c.get::<_, Vec<u8>>(format!("key{i}")).unwrap(),
            vec![i as u8; 1000 + i]
        );
    }
    assert_eq!(c.hget::<_, _, String>("h", "f").unwrap(), "v");
    assert_eq!(c.get::<_, String>("ttl").unwrap(), "v");
    // SIGTERM also flushes and exits cleanly.
    drop(c);
    let pid = d.pid();
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    assert!(d.wait_exit(), "SIGTERM must exit cleanly");
}

#[test]
fn the_thread_set_is_fixed() {
    let (_dir, d) = drive();
    // Load from many connections: the set must not grow with them.
    let mut conns: Vec<redis::Connection> = (0..20).map(|_| d.conn()).collect();
    let v = vec![3u8; 8192];
    for (i, c) in conns.iter_mut().enumerate() {
        for j in 0..20 {
            let _: () = c.set(format!("t{i}:{j}"), &v).unwrap();
        }
    }
    let names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", d.pid()))
        .unwrap()
        .map(|t| {
            std::fs::read_to_string(t.unwrap().path().join("comm"))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    // io_uring's kernel workers (`iou-wrk-<tid>`, for fsync and block-allocating writes)
    // live in the process's thread group; the device bounds how many there may be.
    let (kernel, mut ours): (Vec<String>, Vec<String>) = names
        .iter()
        .cloned()
        .partition(|n| n.starts_with("iou-wrk-"));
    ours.sort();
    assert_eq!(
        ours,
        vec![
            "lightstore",
            "ls-engine",
            "ls-net",
            "ls-writer",
            "lsm-maint",
            "lsm-poller"
        ],
        "threads: {names:?}"
    );
    assert!(
        kernel.len() <= 2 * hwftl_sim::IOWQ_MAX_BOUNDED_WORKERS as usize,
        "io_uring workers not bounded: {names:?}"
    );
    drop(conns);
}

#[test]
fn copied_value_bytes_are_counted() {
    let (_dir, d) = drive();
    let mut c = d.conn();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    let v = vec![7u8; 8192];
    for i in 0..200 {
        let _: () = c.set(format!("k{i}"), &v).unwrap();
    }
    for i in 0..200 {
        assert_eq!(c.get::<_, Vec<u8>>(format!("k{i}")).unwrap().len(), 8192);
    }
    let moved = info_field(&mut c, "stats", "value_bytes_moved");
    let copied = info_field(&mut c, "stats", "value_bytes_copied");
    assert_eq!(moved, 2 * 200 * 8192);
    // docs/ARCHITECTURE.md, "Copies": a SET's value is copied once (into the device page);
    // a GET's 8 KiB value is a slice of the page the device read into and goes to the
    // socket with a vectored write, so it is never copied; framing requests adds none.
    let sets = moved / 2;
    assert!(copied >= sets, "copies not counted: {copied}");
    assert!(
        copied <= sets + 64 * 1024,
        "copied {copied} of {moved} moved"
    );
}

/// `--ablate` (benchmarks only) turns design features off: the drive still answers
/// correctly, the zero-copy ablation shows in the copy counter, and an unknown name is
/// refused at start.
#[test]
fn ablations_keep_answers_and_show_their_cost() {
    let dir = tempfile::tempdir().unwrap();
    let d = Drive::start(
        &dir.path().join("data"),
        &[
            "--ablate",
            "zero-copy,lock-free-queues,metadata-compaction,keytable-cache",
        ],
    );
    let mut c = d.conn();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    let v: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    for i in 0..200 {
        let _: () = c.set(format!("k{i}"), &v).unwrap();
    }
    let _: () = redis::cmd("MSET")
        .arg("m1")
        .arg(&v)
        .arg("m2")
        .arg("small")
        .query(&mut c)
        .unwrap();
    for i in 0..200 {
        assert_eq!(c.get::<_, Vec<u8>>(format!("k{i}")).unwrap(), v);
    }
    let got: Vec<Vec<u8>> = redis::cmd("MGET")
        .arg("m1")
        .arg("m2")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![v.clone(), b"small".to_vec()]);
    let copied = info_field(&mut c, "stats", "value_bytes_copied");
    // Each SET's value: the extra copy and the copy into the device page; each GET's: one.
    let values = 201 * 8192;
    assert!(copied >= 3 * values, "copied {copied}");
    drop(c);
    assert!(d.shutdown());

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .args(["--port", "0", "--ablate", "bloom-filters", "--data-dir"])
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ablate `bloom-filters`"));
}

#[test]
fn malformed_and_hostile_input_gets_redis_errors_and_the_drive_survives() {
    let (_dir, d) = drive();
    let mut keeper = d.conn();
    let _: () = keeper.set("stable", "value").unwrap();
    let rss_before = info_field(&mut keeper, "memory", "used_memory_rss");
    let cases: &[(&[u8], &str)] = &[
        (
            b"*1\r\n$4\r\nPING\r\n*x\r\n",
            "-ERR Protocol error: invalid multibulk length",
        ),
        (
            b"*2000000\r\n",
            "-ERR Protocol error: invalid multibulk length",
        ),
        (
            b"*1\r\n$1099511627776\r\n",
            "-ERR Protocol error: invalid bulk length",
        ),
        (
            b"*1\r\n+PING\r\n",
            "-ERR Protocol error: expected '$', got '+'",
        ),
    ];
    for (bytes, want) in cases {
        let mut s = d.raw();
        let (out, closed) = exchange(&mut s, bytes, Duration::from_secs(2));
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains(want), "{bytes:?}: got {text:?}");
        assert!(closed, "{bytes:?}: a protocol error closes the connection");
    }
    // A 1 GiB inline command: refused after 64 KiB.
    let mut s = d.raw();
    let chunk = vec![b'a'; 1 << 20];
    let mut sent = 0;
    while sent < 8 << 20 {
        if s.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    let (out, _) = read_for(&mut s, Duration::from_secs(2));
    assert!(String::from_utf8_lossy(&out).contains("too big inline request"));
    // Unknown command, wrong arity, wrong type.
    let mut s = d.raw();
    let (out, _) = exchange(
        &mut s,
        b"FOO a b\r\nGET\r\nSET k\r\n",
        Duration::from_millis(500),
    );
    assert_eq!(
        String::from_utf8_lossy(&out),
        "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n\
         -ERR wrong number of arguments for 'get' command\r\n\
         -ERR wrong number of arguments for 'set' command\r\n"
    );
    // Half a command, then silence: others are served meanwhile.
    let mut half = d.raw();
    half.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\nabc")
        .unwrap();
    assert_eq!(keeper.get::<_, String>("stable").unwrap(), "value");
    // A client that disconnects mid-value stores nothing.
    let mut gone = d.raw();
    gone.write_all(b"*3\r\n$3\r\nSET\r\n$4\r\ncut!\r\n$100000\r\nxyz")
        .unwrap();
    drop(gone);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(keeper.get::<_, Option<String>>("cut!").unwrap(), None);
    drop(half);
    // Ten thousand connections opened and dropped.
    for _ in 0..10_000 {
        drop(std::net::TcpStream::connect(d.addr).unwrap());
    }
    assert_eq!(keeper.get::<_, String>("stable").unwrap(), "value");
    let clients = info_field(&mut keeper, "clients", "connected_clients");
    assert!(clients < 50, "{clients} clients still registered");
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut keeper).unwrap(), 1);
    // Memory returns to its level: nothing of the hostile clients is kept.
    std::thread::sleep(Duration::from_millis(200));
    let rss_after = info_field(&mut keeper, "memory", "used_memory_rss");
    assert!(
        rss_after < rss_before + (48 << 20),
        "RSS grew from {rss_before} to {rss_after}"
    );
}

#[test]
fn auth_is_required_when_a_password_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let d = Drive::start(&dir.path().join("data"), &["--requirepass", "s3cret"]);
    let mut s = d.raw();
    let (out, _) = exchange(
        &mut s,
        b"GET k\r\nAUTH wrong\r\nAUTH s3cret\r\nGET k\r\n",
        Duration::from_millis(500),
    );
    assert_eq!(
        String::from_utf8_lossy(&out),
        "-NOAUTH Authentication required.\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n\
         +OK\r\n$-1\r\n"
    );
    let ok = redis::Client::open(format!("redis://:s3cret@{}/", d.addr))
        .unwrap()
        .get_connection()
        .and_then(|mut c| c.set::<_, _, ()>("a", "b"));
    assert!(ok.is_ok());
    // Without a password configured, AUTH is an error.
    let (_dir2, open) = drive();
    let mut s = open.raw();
    let (out, _) = exchange(&mut s, b"AUTH x\r\n", Duration::from_millis(500));
    assert!(String::from_utf8_lossy(&out)
        .starts_with("-ERR AUTH <password> called without any password configured"));
}

#[test]
fn maxclients_turns_extra_clients_away() {
    let dir = tempfile::tempdir().unwrap();
    let d = Drive::start(&dir.path().join("data"), &["--maxclients", "2"]);
    let _a = d.conn();
    let _b = d.conn();
    let mut s = d.raw();
    let (out, closed) = read_for(&mut s, Duration::from_secs(2));
    assert_eq!(out, b"-ERR max number of clients reached\r\n");
    assert!(closed);
}

#[test]
fn redis_cli_and_redis_benchmark_work() {
    if !have_tool("redis-cli") || !have_tool("redis-benchmark") {
        return;
    }
    let (_dir, d) = drive();
    let port = d.addr.port().to_string();
    let cli = |args: &[&str]| {
        let o = std::process::Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(cli(&["PING"]), "PONG");
    assert_eq!(cli(&["SET", "from-cli", "hello world"]), "OK");
    assert_eq!(cli(&["GET", "from-cli"]), "hello world");
    assert_eq!(
        cli(&["NOSUCH"]),
        // Redis ends this text with a space; the trim above removes it.
        "ERR unknown command 'NOSUCH', with args beginning with:"
    );
    let o = std::process::Command::new("redis-benchmark")
        .args([
            "-p", &port, "-t", "set,get", "-n", "4000", "-c", "8", "-P", "4", "-d", "1024", "-q",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
    assert!(!text.to_lowercase().contains("error"), "{text}");
    let mut c = d.conn();
    let v: Vec<u8> = c.get("key:__rand_int__").unwrap();
    assert_eq!(v.len(), 1024);
}

/// GETs and MGETs are answered from the device poller thread, other reads from the engine
/// thread, writes from the writer: a long pipeline mixing them must come back in order.
#[test]
fn pipelined_replies_keep_request_order() {
    let (_dir, d) = drive();
    let mut c = d.conn();
    for i in 0..50 {
        let v = vec![b'a' + (i % 26) as u8; 100 + i * 170];
        let _: () = c.set(format!("o{i}"), v).unwrap();
    }
    let mut p = redis::pipe();
    for round in 0..4 {
        for i in 0..50 {
            p.get(format!("o{i}"));
            p.strlen(format!("o{i}"));
            p.get(format!("missing{i}"));
            p.mget(vec![format!("o{i}"), format!("o{}", (i + 1) % 50)]);
            p.exists(format!("o{i}"));
            if i % 10 == 0 {
                p.set(format!("w{round}:{i}"), i);
                p.get(format!("w{round}:{i}"));
            }
        }
    }
    let replies: Vec<Value> = p.query(&mut c).unwrap();
    let mut it = replies.into_iter();
    let bulk = |v: Value| match v {
        Value::BulkString(b) => b,
        other => panic!("expected a bulk string, got {other:?}"),
    };
    let expect = |i: usize| vec![b'a' + (i % 26) as u8; 100 + i * 170];
    for _round in 0..4 {
        for i in 0..50 {
            assert_eq!(bulk(it.next().unwrap()), expect(i), "GET o{i}");
            assert_eq!(
                it.next(),
                Some(Value::Int((100 + i * 170) as i64)),
                "STRLEN o{i}"
            );
            assert_eq!(it.next(), Some(Value::Nil), "GET missing{i}");
            match it.next() {
                Some(Value::Array(a)) => {
                    assert_eq!(a.len(), 2);
                    let mut a = a.into_iter();
                    assert_eq!(bulk(a.next().unwrap()), expect(i));
                    assert_eq!(bulk(a.next().unwrap()), expect((i + 1) % 50));
                }
                other => panic!("MGET: {other:?}"),
            }
            assert_eq!(it.next(), Some(Value::Int(1)), "EXISTS o{i}");
            if i % 10 == 0 {
                assert_eq!(it.next(), Some(Value::Okay));
                assert_eq!(bulk(it.next().unwrap()), i.to_string().into_bytes());
            }
        }
    }
    assert_eq!(it.next(), None);
}

/// Writes that depend on earlier writes to the same key (INCR after INCR, a type change
/// after HSET, HSET after DEL) in long runs of writes from several connections, with large
/// values in between so the writer's groups split mid-run: each group must see the groups
/// still on the device.
#[test]
fn dependent_pipelined_writes_see_earlier_ones() {
    let (_dir, d) = drive();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let mut c = d.conn();
            std::thread::spawn(move || {
                let big = vec![b'z'; 30_000];
                let counter = format!("n{t}");
                let h = format!("h{t}");
                let mut p = redis::pipe();
                for i in 0..300 {
                    p.set(format!("big{t}:{}", i % 3), &big[..]).ignore();
                    p.incr(&counter, 1).ignore();
                    p.hset(&h, "f", i).ignore();
                    p.set(&h, "now a string").ignore();
                    p.del(&h).ignore();
                    p.hset(&h, "g", i).ignore();
                }
                p.get(&counter);
                p.cmd("HLEN").arg(&h);
                p.strlen(format!("big{t}:0"));
                let out: Vec<Value> = p.query(&mut c).unwrap();
                assert_eq!(
                    out[0],
                    Value::BulkString(b"300".to_vec()),
                    "lost increments"
                );
                assert_eq!(out[1], Value::Int(1), "HLEN after DEL and HSET");
                assert_eq!(out[2], Value::Int(30_000));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// `--durability plp` (the drive's DRAM and the device's cache power-protected): writes are
/// acknowledged from DRAM and read back at once, CONFIG and INFO say so, and the power-fail
/// signal lands what is in DRAM, flushes and stops the drive with every acknowledged write
/// kept.
#[test]
fn plp_mode_flushes_on_the_power_fail_signal() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Drive::start(&data, &["--durability", "plp"]);
    let mut c = d.conn();
    let settings: HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("durability")
        .query(&mut c)
        .unwrap();
    assert_eq!(settings.get("durability").map(String::as_str), Some("plp"));
    for i in 0..300 {
        let _: () = c.set(format!("p{i}"), vec![i as u8; 3000]).unwrap();
        // Acknowledged from DRAM, and read back at once (from the write buffer while the
        // page is still on its way).
        assert_eq!(
            c.get::<_, Vec<u8>>(format!("p{i}")).unwrap(),
            vec![i as u8; 3000]
        );
    }
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    assert!(info.contains("landing_pages:"), "{info}");
    assert!(info.contains("landing_hits:"), "{info}");
    drop(c);
    let _ = std::process::Command::new("kill")
        .arg("-PWR")
        .arg(d.pid().to_string())
        .status();
    assert!(d.wait_exit(), "SIGPWR must flush and exit cleanly");
    let d = Drive::start(&data, &[]);
    let mut c = d.conn();
    for i in 0..300 {
        assert_eq!(
            c.get::<_, Vec<u8>>(format!("p{i}")).unwrap(),
            vec![i as u8; 3000]
        );
    }
}

/// A full device: SETs get an error saying the drive is full, reads and deletes keep
/// working, and deleting frees space for new writes.
#[test]
fn a_full_drive_refuses_writes_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    // The smallest device the engine accepts (8 segments of 128 MiB).
    let d = Drive::start(&dir.path().join("data"), &["--capacity", "1GiB"]);
    let mut c = d.conn();
    let value = vec![0x5au8; 1 << 20];
    let mut stored = 0;
    let full_error = loop {
        let mut p = redis::pipe();
        for i in stored..stored + 16 {
            p.set(format!("big{i}"), &value[..]);
        }
        match p.query::<Vec<Value>>(&mut c) {
            Ok(_) => stored += 16,
            Err(e) => break e,
        }
        assert!(stored < 2048, "a 1 GiB drive took {stored} MiB");
    };
    assert!(
        full_error.to_string().contains("the drive is full"),
        "{full_error}"
    );
    assert!(stored > 300, "full after only {stored} MiB");
    // Reads still work, including the last value acknowledged.
    assert_eq!(c.get::<_, Vec<u8>>("big0").unwrap(), value);
    assert_eq!(
        c.get::<_, Vec<u8>>(format!("big{}", stored - 1)).unwrap(),
        value
    );
    // Deletes work and give space back (garbage collection reclaims it).
    let keys: Vec<String> = (0..stored).step_by(2).map(|i| format!("big{i}")).collect();
    let deleted: i64 = c.del(&keys).unwrap();
    assert_eq!(deleted as usize, keys.len());
    for i in 0..64 {
        let _: () = c.set(format!("again{i}"), &value[..]).unwrap();
    }
    assert_eq!(c.get::<_, Vec<u8>>("big1").unwrap(), value);
    assert_eq!(c.get::<_, Vec<u8>>("again63").unwrap(), value);
}

/// A client that sends far more pipelined commands than a connection may queue (4096) in
/// one burst, with nothing in flight yet, gets every reply (`redis-cli --pipe` does this).
#[test]
fn a_pipeline_larger_than_the_backlog_is_answered_in_full() {
    let (_dir, d) = drive();
    let mut s = d.raw();
    let n = 12_000;
    let mut burst = Vec::new();
    for i in 0..n {
        let k = format!("bulk{i}");
        burst.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n$1\r\nv\r\n", k.len()).as_bytes(),
        );
    }
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(&burst).unwrap())
    };
    let want = b"+OK\r\n".len() * n;
    let mut got = Vec::with_capacity(want);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = vec![0u8; 64 << 10];
    while got.len() < want && std::time::Instant::now() < deadline {
        match std::io::Read::read(&mut s, &mut buf) {
            Ok(0) => break,
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(_) => {}
        }
    }
    writer.join().unwrap();
    assert_eq!(got.len(), want, "{} of {n} replies", got.len() / 5);
    let mut c = d.conn();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), n as i64);
}

#[test]
fn ls_range_reads_string_keys_in_order() {
    let (_dir, d) = drive();
    let mut c = d.conn();
    // Keys out of order, one large value spanning pages, binary keys, other types nearby.
    let big: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    for i in (0..300u32).rev() {
        let _: () = c.set(format!("blk:{i:05}"), format!("v{i}")).unwrap();
    }
    let _: () = c.set("blk:00007", &big).unwrap();
    let _: () = c.set(b"blk:\x00bin", "zero").unwrap();
    let _: () = c.hset("blk:00010h", "f", "hash").unwrap();
    let _: () = c.set("blk:00020", "gone").unwrap();
    let _: () = c.del("blk:00020").unwrap();
    let _: () = redis::cmd("SET")
        .arg("blk:00030")
        .arg("short-lived")
        .arg("PX")
        .arg(1)
        .query(&mut c)
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));

    let range = |c: &mut redis::Connection, start: &[u8], end: &[u8], count: Option<u64>| {
        let mut cmd = redis::cmd("LS.RANGE");
        cmd.arg(start).arg(end);
        if let Some(n) = count {
            cmd.arg("COUNT").arg(n);
        }
        let flat: Vec<Vec<u8>> = cmd.query(c).unwrap();
        flat.chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect::<Vec<_>>()
    };

    // Default count: 100 pairs from the start, in byte order, the binary key first.
    let r = range(&mut c, b"blk:", b"", None);
    assert_eq!(r.len(), 100);
    assert_eq!(r[0], (b"blk:\x00bin".to_vec(), b"zero".to_vec()));
    assert_eq!(r[1], (b"blk:00000".to_vec(), b"v0".to_vec()));
    assert_eq!(r[8], (b"blk:00007".to_vec(), big.clone()));
    let keys: Vec<Vec<u8>> = r.iter().map(|(k, _)| k.clone()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    // The hash, the deleted key and the expired key are not there.
    assert!(!keys.contains(&b"blk:00010h".to_vec()));
    assert!(!keys.contains(&b"blk:00020".to_vec()));
    assert!(!keys.contains(&b"blk:00030".to_vec()));

    // End bound is exclusive; a continuation from the last key + NUL sees the rest.
    let r = range(&mut c, b"blk:00100", b"blk:00105", Some(50));
    let keys: Vec<String> = r
        .iter()
        .map(|(k, _)| String::from_utf8(k.clone()).unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "blk:00100",
            "blk:00101",
            "blk:00102",
            "blk:00103",
            "blk:00104"
        ]
    );
    let mut all = Vec::new();
    let mut from = b"blk:".to_vec();
    loop {
        let page = range(&mut c, &from, b"blk;", Some(64));
        let Some((last, _)) = page.last().cloned() else {
            break;
        };
        all.extend(page);
        from = last;
        from.push(0);
    }
    // 300 keys + the binary one, minus the deleted and the expired.
    assert_eq!(all.len(), 299);
    // Empty and reversed ranges.
    assert!(range(&mut c, b"zzz", b"", None).is_empty());
    assert!(range(&mut c, b"blk:5", b"blk:1", None).is_empty());

    // Expired keys do not count against COUNT: a page is never empty while live keys follow.
    for k in ["exp:a", "exp:b", "exp:c", "exp:d"] {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg("x")
            .arg("PX")
            .arg(1)
            .query(&mut c)
            .unwrap();
    }
    let _: () = c.set("exp:e", "live-e").unwrap();
    let _: () = c.set("exp:f", "live-f").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let r = range(&mut c, b"exp:", b"exp;", Some(1));
    assert_eq!(r, vec![(b"exp:e".to_vec(), b"live-e".to_vec())]);

    // Many ranges pipelined on one connection come back in order, each complete.
    let mut pipe = redis::pipe();
    for i in 0..20 {
        pipe.cmd("LS.RANGE")
            .arg(format!("blk:{:05}", i * 10))
            .arg(format!("blk:{:05}", i * 10 + 3));
    }
    let pages: Vec<Vec<Vec<u8>>> = pipe.query(&mut c).unwrap();
    for (i, page) in pages.iter().enumerate() {
        let want: Vec<Vec<u8>> = (i * 10..i * 10 + 3)
            .filter(|&n| n != 20 && n != 30)
            .flat_map(|n| {
                let v = if n == 7 {
                    big.clone()
                } else {
                    format!("v{n}").into_bytes()
                };
                [format!("blk:{n:05}").into_bytes(), v]
            })
            .collect();
        assert_eq!(page, &want, "page {i}");
    }

    // Bad arguments get errors and the connection keeps working.
    let e: RedisResult<Value> = redis::cmd("LS.RANGE").arg("a").query(&mut c);
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("wrong number of arguments"));
    let e: RedisResult<Value> = redis::cmd("LS.RANGE")
        .arg("a")
        .arg("b")
        .arg("COUNT")
        .arg(100_000)
        .query(&mut c);
    assert!(e.unwrap_err().to_string().contains("COUNT must be between"));
    assert_eq!(c.get::<_, String>("blk:00001").unwrap(), "v1");
}

/// Keys up to 64 KiB are stored, read, scanned and deleted, and survive a restart; a longer
/// one gets an error and changes nothing.
#[test]
fn keys_up_to_64_kib() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Drive::start(&data, &[]);
    let mut c = d.conn();
    let key = |n: usize, tag: u8| -> Vec<u8> {
        let mut k = vec![tag; n];
        k[n - 1] = b'!';
        k
    };
    let big = key(64 << 10, b'a');
    let mid = key(20_000, b'b');
    let _: () = c.set(&big, "value of the biggest key").unwrap();
    let _: () = c.set(&mid, vec![9u8; 9000]).unwrap();
    let _: () = c.hset(&mid, "f", "v").unwrap_or(());
    let e: RedisResult<()> = c.set(key((64 << 10) + 1, b'c'), "x");
    assert!(e.is_err(), "a key over 64 KiB is refused");
    assert_eq!(
        c.get::<_, String>(&big).unwrap(),
        "value of the biggest key"
    );
    let r: Vec<Vec<u8>> = redis::cmd("LS.RANGE")
        .arg("a")
        .arg("c")
        .query(&mut c)
        .unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(r[0], big);
    assert_eq!(r[2], mid);
    drop(c);
    assert!(d.shutdown());
    let d = Drive::start(&data, &[]);
    let mut c = d.conn();
    assert_eq!(
        c.get::<_, String>(&big).unwrap(),
        "value of the biggest key"
    );
    assert_eq!(c.get::<_, Vec<u8>>(&mid).unwrap(), vec![9u8; 9000]);
    assert_eq!(c.del::<_, i64>(&big).unwrap(), 1);
    assert_eq!(c.exists::<_, i64>(&big).unwrap(), 0);
}

/// Values larger than a segment (a 1 GiB drive has 8 MiB segments) span segments: stored,
/// read back exactly, overwritten and deleted, across a restart.
#[test]
fn values_larger_than_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Drive::start(&data, &[]);
    let mut c = d.conn();
    let value = |len: usize, salt: u8| -> Vec<u8> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 11) as u8 ^ salt)
            .collect()
    };
    let twenty = value(20 << 20, 1);
    let nine = value((9 << 20) + 123, 2);
    let _: () = c.set("twenty", &twenty).unwrap();
    let _: () = c.set("nine", &nine).unwrap();
    assert!(c.get::<_, Vec<u8>>("twenty").unwrap() == twenty);
    assert_eq!(c.strlen::<_, usize>("nine").unwrap(), nine.len());
    drop(c);
    assert!(d.shutdown());
    let d = Drive::start(&data, &[]);
    let mut c = d.conn();
    assert!(c.get::<_, Vec<u8>>("twenty").unwrap() == twenty);
    assert!(c.get::<_, Vec<u8>>("nine").unwrap() == nine);
    let smaller = value(12 << 20, 3);
    let _: () = c.set("twenty", &smaller).unwrap();
    assert_eq!(c.del::<_, i64>("nine").unwrap(), 1);
    assert!(c.get::<_, Vec<u8>>("twenty").unwrap() == smaller);
    assert_eq!(c.exists::<_, i64>("nine").unwrap(), 0);
}

/// Expired keys are removed while writes keep the writer busy (it is never idle for a whole
/// sweep period): the sweep runs between groups too, as Redis's active expiry runs whatever
/// the load, so expired keys do not pile up in the deadline index and on the device.
#[test]
fn expired_keys_are_swept_under_steady_writes() {
    const EXPIRING: usize = 200;
    let (_dir, d) = drive();
    let mut c = d.conn();
    for i in 0..EXPIRING {
        let _: () = redis::cmd("SET")
            .arg(format!("short:{i}"))
            .arg("v")
            .arg("PX")
            .arg(50)
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("HSET")
        .arg("short:hash")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("short:hash")
        .arg(50)
        .query(&mut c)
        .unwrap();
    // A write every few milliseconds for well over the deadline and a few sweep periods;
    // no read or write touches the expiring keys.
    let started = std::time::Instant::now();
    let mut n = 0u64;
    while started.elapsed() < Duration::from_millis(1_500) {
        let _: () = c.set("busy", n).unwrap();
        n += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let expired = info_field(&mut c, "stats", "expired_keys");
    assert_eq!(
        expired,
        EXPIRING as u64 + 1,
        "every expired key (and the hash) removed during {n} SETs"
    );
    let keyspace: String = redis::cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert!(
        keyspace.contains("db0:keys=1,expires=0"),
        "only `busy` left: {keyspace}"
    );
}
