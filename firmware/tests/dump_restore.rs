//! DUMP, RESTORE and MIGRATE against redis-server, proved by difference: payloads redis-server
//! writes (its compact encodings: listpacks, intsets, quicklists, LZF-compressed and
//! integer-encoded strings) restore on the drive, the drive's payloads restore on
//! redis-server, every key reads back the same on both, RESTORE's errors are Redis's, and
//! redis-server's MIGRATE moves keys into the drive. redis-server must be installed
//! (`cargo xtask test` installs it): the test fails without it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{Drive, RedisServer};
use rand::{Rng, SeedableRng};
use redis::Value;

/// A key's type and whole content as one comparable text (unordered types sorted).
fn content(c: &mut redis::Connection, key: &str) -> String {
    let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
    let body = match kind.as_str() {
        "string" => format!(
            "{:?}",
            redis::cmd("GET").arg(key).query::<Vec<u8>>(c).unwrap()
        ),
        "list" => format!(
            "{:?}",
            redis::cmd("LRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .query::<Vec<Vec<u8>>>(c)
                .unwrap()
        ),
        "set" => {
            let mut m: Vec<Vec<u8>> = redis::cmd("SMEMBERS").arg(key).query(c).unwrap();
            m.sort();
            format!("{m:?}")
        }
        "hash" => {
            let mut m: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(key).query(c).unwrap();
            m.sort();
            format!("{m:?}")
        }
        // Scores compared as numbers: the drive prints them as Redis 7.2 does, redis-server
        // 7.0 with `%.17g` (docs/COMPATIBILITY.md).
        "zset" => {
            let m: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(c)
                .unwrap();
            format!("{m:?}")
        }
        "none" => String::new(),
        other => panic!("unexpected type {other}"),
    };
    format!("{kind} {body}")
}

/// Binary-safe random bytes, sometimes a number (stored as an integer encoding by Redis).
fn word(rng: &mut rand::rngs::StdRng, long: bool) -> Vec<u8> {
    match rng.gen_range(0..5) {
        0 => rng.gen_range(-100_000i64..100_000).to_string().into_bytes(),
        1 => rng.gen::<i64>().to_string().into_bytes(),
        2 if long => {
            // Compressible: redis-server writes it LZF-compressed.
            let unit = format!("chunk-{}-", rng.gen_range(0..10));
            unit.repeat(rng.gen_range(5..400)).into_bytes()
        }
        _ => (0..rng.gen_range(0..24)).map(|_| rng.gen::<u8>()).collect(),
    }
}

/// Fills redis-server with keys of every type in small (compact encodings) and large sizes.
fn fill(c: &mut redis::Connection, rng: &mut rand::rngs::StdRng) -> Vec<String> {
    let mut keys = Vec::new();
    for i in 0..40 {
        let n = if i % 4 == 0 {
            rng.gen_range(130..600)
        } else {
            rng.gen_range(1..20)
        };
        let long = i % 3 == 0;
        let key = format!("k{i}");
        match i % 6 {
            0 => {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(word(rng, true))
                    .query(c)
                    .unwrap();
            }
            1 => {
                let items: Vec<Vec<u8>> = (0..n).map(|_| word(rng, long)).collect();
                let _: () = redis::cmd("RPUSH").arg(&key).arg(items).query(c).unwrap();
            }
            2 => {
                // Integers only (an intset while small) or any members.
                let ints = rng.gen_bool(0.5);
                let items: Vec<Vec<u8>> = (0..n)
                    .map(|_| {
                        if ints {
                            rng.gen_range(-(1i64 << 40)..(1 << 40))
                                .to_string()
                                .into_bytes()
                        } else {
                            word(rng, long)
                        }
                    })
                    .collect();
                let _: () = redis::cmd("SADD").arg(&key).arg(items).query(c).unwrap();
            }
            3 => {
                let mut q = redis::cmd("HSET");
                q.arg(&key);
                for _ in 0..n {
                    q.arg(word(rng, false)).arg(word(rng, long));
                }
                let _: () = q.query(c).unwrap();
            }
            4 => {
                let mut q = redis::cmd("ZADD");
                q.arg(&key);
                for _ in 0..n {
                    let score = match rng.gen_range(0..4) {
                        0 => rng.gen_range(-1000i64..1000).to_string(),
                        1 => "inf".to_string(),
                        _ => format!("{}", rng.gen::<f64>() * 1e6 - 5e5),
                    };
                    q.arg(score).arg(word(rng, false));
                }
                let _: () = q.query(c).unwrap();
            }
            _ => {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(rng.gen::<i32>())
                    .query(c)
                    .unwrap();
            }
        }
        keys.push(key);
    }
    keys
}

#[test]
fn payloads_move_both_ways_between_redis_server_and_the_drive() {
    let dir = tempfile::tempdir().unwrap();
    let redis_server = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("drive"), &[]);
    let mut r = redis::Client::open(format!("redis://127.0.0.1:{}/", redis_server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut d = drive.conn();
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let keys = fill(&mut r, &mut rng);
    for key in &keys {
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut r).unwrap();
        let ok: String = redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(&payload)
            .query(&mut d)
            .unwrap_or_else(|e| panic!("RESTORE of redis-server's {key} on the drive: {e}"));
        assert_eq!(ok, "OK");
        let want = content(&mut r, key);
        assert_eq!(content(&mut d, key), want, "{key} restored on the drive");
        // And back: the drive's payload restores on redis-server under another name.
        let back: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut d).unwrap();
        let copy = format!("{key}:back");
        let ok: String = redis::cmd("RESTORE")
            .arg(&copy)
            .arg(0)
            .arg(&back)
            .query(&mut r)
            .unwrap_or_else(|e| panic!("RESTORE of the drive's {key} on redis-server: {e}"));
        assert_eq!(ok, "OK");
        assert_eq!(
            content(&mut r, &copy)
                .split_once(' ')
                .map(|x| x.1.to_string()),
            want.split_once(' ').map(|x| x.1.to_string()),
            "{key} restored back on redis-server"
        );
        // Strings are written exactly as redis-server writes them (when it does not
        // compress or integer-encode them).
        let kind: String = redis::cmd("TYPE").arg(key).query(&mut r).unwrap();
        let raw: Vec<u8> = redis::cmd("GET").arg(key).query(&mut d).unwrap_or_default();
        if kind == "string"
            && raw.len() < 20
            && std::str::from_utf8(&raw).map_or(true, |s| s.parse::<i64>().is_err())
        {
            assert_eq!(back, payload, "{key}: the same payload as redis-server's");
        }
    }
    // A TTL travels with RESTORE on both, relative and absolute.
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k1").query(&mut r).unwrap();
    for c in [&mut r, &mut d] {
        let _: () = redis::cmd("RESTORE")
            .arg("ttl")
            .arg(50_000)
            .arg(&payload)
            .query(c)
            .unwrap();
        let pttl: i64 = redis::cmd("PTTL").arg("ttl").query(c).unwrap();
        assert!((45_000..=50_000).contains(&pttl), "{pttl}");
    }
}

/// The reply as comparable text; a DUMP payload only as "a payload" (the drive writes the
/// plain encodings, redis-server its compact ones: both restore on either server, which the
/// test above proves).
fn reply(c: &mut redis::Connection, args: &[Vec<u8>]) -> String {
    let mut q = redis::cmd(std::str::from_utf8(&args[0]).unwrap());
    for a in &args[1..] {
        q.arg(&a[..]);
    }
    match q.query::<Value>(c) {
        Ok(Value::BulkString(_)) if args[0].eq_ignore_ascii_case(b"dump") => "a payload".into(),
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("error {:?} {:?}", e.code(), e.detail()),
    }
}

#[test]
fn restore_and_dump_answer_as_redis_server() {
    let dir = tempfile::tempdir().unwrap();
    let redis_server = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("drive"), &[]);
    let mut r = redis::Client::open(format!("redis://127.0.0.1:{}/", redis_server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut d = drive.conn();
    let _: () = redis::cmd("RPUSH")
        .arg("src")
        .arg("a")
        .arg("b")
        .query(&mut r)
        .unwrap();
    let list: Vec<u8> = redis::cmd("DUMP").arg("src").query(&mut r).unwrap();
    let mut truncated = list.clone();
    truncated.truncate(list.len() - 3);
    let mut flipped = list.clone();
    flipped[2] ^= 0x40;
    // An empty list's payload (type 1, no items) with a valid footer: Redis loads no empty
    // collection.
    let empty = {
        let mut p = vec![1u8, 0, 10, 0];
        let crc = crc::Crc::<u64>::new(&crc::CRC_64_REDIS).checksum(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    };
    let past = b"1000".to_vec();
    let w = |s: &str| s.as_bytes().to_vec();
    let script: Vec<Vec<Vec<u8>>> = vec![
        vec![w("DUMP"), w("missing")],
        vec![w("DUMP")],
        vec![w("DUMP"), w("a"), w("b")],
        vec![w("RESTORE"), w("k")],
        vec![w("RESTORE"), w("k"), w("0")],
        vec![w("RESTORE"), w("k"), w("0"), list.clone()],
        vec![w("DUMP"), w("k")],
        vec![w("LRANGE"), w("k"), w("0"), w("-1")],
        vec![w("RESTORE"), w("k"), w("0"), list.clone()],
        vec![w("RESTORE"), w("k"), w("x"), list.clone()],
        vec![w("RESTORE"), w("k"), w("0"), list.clone(), w("REPLACE")],
        vec![w("RESTORE"), w("n"), w("-1"), list.clone()],
        vec![w("RESTORE"), w("n"), w("x"), list.clone()],
        vec![w("RESTORE"), w("n"), w("0"), truncated],
        vec![w("RESTORE"), w("n"), w("0"), flipped],
        vec![w("RESTORE"), w("n"), w("0"), w("")],
        vec![w("RESTORE"), w("n"), w("0"), empty],
        vec![w("RESTORE"), w("n"), w("0"), list.clone(), w("BOGUS")],
        vec![w("RESTORE"), w("n"), w("0"), list.clone(), w("IDLETIME")],
        vec![
            w("RESTORE"),
            w("n"),
            w("0"),
            list.clone(),
            w("IDLETIME"),
            w("-1"),
        ],
        vec![
            w("RESTORE"),
            w("n"),
            w("0"),
            list.clone(),
            w("IDLETIME"),
            w("x"),
        ],
        vec![
            w("RESTORE"),
            w("n"),
            w("0"),
            list.clone(),
            w("FREQ"),
            w("256"),
        ],
        vec![
            w("RESTORE"),
            w("n"),
            w("0"),
            list.clone(),
            w("FREQ"),
            w("1"),
            w("IDLETIME"),
            w("1"),
        ],
        vec![
            w("RESTORE"),
            w("n"),
            w("0"),
            list.clone(),
            w("IDLETIME"),
            w("5"),
            w("ABSTTL"),
        ],
        vec![w("EXISTS"), w("n")],
        vec![
            w("RESTORE"),
            w("p"),
            past.clone(),
            list.clone(),
            w("ABSTTL"),
        ],
        vec![w("EXISTS"), w("p")],
        // REPLACE with a past deadline: the old key goes, nothing is created.
        vec![w("SET"), w("s"), w("v")],
        vec![
            w("RESTORE"),
            w("s"),
            past,
            list.clone(),
            w("ABSTTL"),
            w("REPLACE"),
        ],
        vec![w("EXISTS"), w("s")],
        // REPLACE over another type.
        vec![w("HSET"), w("h"), w("f"), w("v")],
        vec![w("RESTORE"), w("h"), w("0"), list.clone(), w("replace")],
        vec![w("TYPE"), w("h")],
        vec![w("LRANGE"), w("h"), w("0"), w("-1")],
        // A key whose deadline passed is not in the way.
        vec![w("SET"), w("gone"), w("v"), w("PX"), w("1")],
        vec![w("DEBUG-SLEEP")],
        vec![w("RESTORE"), w("gone"), w("0"), list.clone()],
        vec![w("TYPE"), w("gone")],
        vec![w("DUMP"), w("gone")],
    ];
    for args in &script {
        if args[0] == b"DEBUG-SLEEP" {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        let want = reply(&mut r, args);
        let got = reply(&mut d, args);
        let line: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(&a[..a.len().min(12)]).to_string())
            .collect();
        assert_eq!(got, want, "{line:?}");
    }
}

#[test]
fn redis_server_migrates_keys_into_the_drive() {
    let dir = tempfile::tempdir().unwrap();
    let redis_server = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("drive"), &[]);
    let mut r = redis::Client::open(format!("redis://127.0.0.1:{}/", redis_server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut d = drive.conn();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let keys = fill(&mut r, &mut rng);
    let _: () = redis::cmd("PEXPIRE")
        .arg("k0")
        .arg(600_000)
        .query(&mut r)
        .unwrap();
    let want: Vec<String> = keys.iter().map(|k| content(&mut r, k)).collect();
    let host = drive.addr.ip().to_string();
    let port = drive.addr.port();
    // One key, then the rest with KEYS (MIGRATE's pipelined form).
    let one: String = redis::cmd("MIGRATE")
        .arg(&host)
        .arg(port)
        .arg(&keys[0])
        .arg(0)
        .arg(5000)
        .query(&mut r)
        .unwrap();
    assert_eq!(one, "OK");
    let rest: String = redis::cmd("MIGRATE")
        .arg(&host)
        .arg(port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&keys[1..])
        .query(&mut r)
        .unwrap();
    assert_eq!(rest, "OK");
    let left: i64 = redis::cmd("DBSIZE").query(&mut r).unwrap();
    assert_eq!(left, 0, "MIGRATE removes what it moved");
    for (k, w) in keys.iter().zip(&want) {
        assert_eq!(&content(&mut d, k), w, "{k} after MIGRATE");
    }
    let pttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut d).unwrap();
    assert!(
        (590_000..=600_000).contains(&pttl),
        "the TTL moved too: {pttl}"
    );
    // A key that exists on the drive: Redis's BUSYKEY comes back through MIGRATE, and COPY
    // REPLACE overwrites it and keeps the source.
    let _: () = redis::cmd("SET")
        .arg(&keys[1])
        .arg("again")
        .query(&mut r)
        .unwrap();
    let busy = redis::cmd("MIGRATE")
        .arg(&host)
        .arg(port)
        .arg(&keys[1])
        .arg(0)
        .arg(5000)
        .query::<String>(&mut r)
        .unwrap_err();
    assert!(busy.to_string().contains("BUSYKEY"), "{busy}");
    let ok: String = redis::cmd("MIGRATE")
        .arg(&host)
        .arg(port)
        .arg(&keys[1])
        .arg(0)
        .arg(5000)
        .arg("COPY")
        .arg("REPLACE")
        .query(&mut r)
        .unwrap();
    assert_eq!(ok, "OK");
    let v: String = redis::cmd("GET").arg(&keys[1]).query(&mut d).unwrap();
    assert_eq!(v, "again");
    let kept: i64 = redis::cmd("EXISTS").arg(&keys[1]).query(&mut r).unwrap();
    assert_eq!(kept, 1);
}

/// The drive's MIGRATE moves keys to redis-server (and to another drive) as redis-server's
/// MIGRATE does: the same replies for one key, KEYS, COPY, REPLACE, NOKEY, a BUSYKEY target,
/// an unreachable target and bad arguments; the keys arrive whole with their TTL and leave
/// the source unless COPY.
#[test]
fn the_drive_migrates_keys_like_redis_server() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["a", "t"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let source_redis = RedisServer::start(&dir.path().join("a"), &[]);
    let target = RedisServer::start(&dir.path().join("t"), &[]);
    let drive = Drive::start(&dir.path().join("drive"), &[]);
    let other_drive = Drive::start(&dir.path().join("drive2"), &[]);
    let conn = |port: u16| {
        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap()
    };
    let mut a = conn(source_redis.port);
    let mut t = conn(target.port);
    let mut d = drive.conn();
    let tport = target.port.to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    // The same keys on both sources.
    let keys = fill(&mut a, &mut rng);
    for k in &keys {
        let p: Vec<u8> = redis::cmd("DUMP").arg(k).query(&mut a).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg(k)
            .arg(0)
            .arg(p)
            .query(&mut d)
            .unwrap();
    }
    for c in [&mut a, &mut d] {
        let _: () = redis::cmd("PEXPIRE")
            .arg(&keys[0])
            .arg(900_000)
            .query(c)
            .unwrap();
    }
    let want: Vec<String> = keys.iter().map(|k| content(&mut a, k)).collect();
    let w = |s: &str| s.as_bytes().to_vec();
    // Each step runs from redis-server to the target, the target is emptied, then from the
    // drive; the replies must match.
    let steps: Vec<Vec<Vec<u8>>> = vec![
        vec![
            w("MIGRATE"),
            w("127.0.0.1"),
            w(&tport),
            w(&keys[0]),
            w("0"),
            w("5000"),
        ],
        vec![
            w("MIGRATE"),
            w("127.0.0.1"),
            w(&tport),
            w("missing"),
            w("0"),
            w("5000"),
        ],
        vec![
            w("MIGRATE"),
            w("127.0.0.1"),
            w(&tport),
            w(""),
            w("0"),
            w("5000"),
            w("COPY"),
            w("KEYS"),
            w(&keys[1]),
            w(&keys[2]),
            w("missing"),
        ],
        vec![
            w("MIGRATE"),
            w("127.0.0.1"),
            w(&tport),
            w(&keys[3]),
            w("0"),
            w("5000"),
            w("KEYS"),
            w(&keys[4]),
        ],
        vec![
            w("MIGRATE"),
            w("127.0.0.1"),
            w(&tport),
            w(&keys[3]),
            w("0"),
            w("5000"),
            w("BOGUS"),
        ],
        vec![
            w("MIGRATE"),
            w("127.0.0.1"),
            w(&tport),
            w(&keys[3]),
            w("x"),
            w("5000"),
        ],
        vec![
            w("MIGRATE"),
            w("127.0.0.1"),
            w("1"),
            w(&keys[3]),
            w("0"),
            w("200"),
        ],
    ];
    for step in &steps {
        let _: () = redis::cmd("FLUSHALL").query(&mut t).unwrap();
        let from_redis = reply(&mut a, step);
        let on_target_redis: Vec<String> = keys.iter().map(|k| content(&mut t, k)).collect();
        let _: () = redis::cmd("FLUSHALL").query(&mut t).unwrap();
        let from_drive = reply(&mut d, step);
        let on_target_drive: Vec<String> = keys.iter().map(|k| content(&mut t, k)).collect();
        let line: Vec<String> = step
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(from_drive, from_redis, "{line:?}");
        assert_eq!(
            on_target_drive, on_target_redis,
            "{line:?}: what reached the target"
        );
    }
    // What left and what stayed: the same on both sources.
    for (k, wanted) in keys.iter().zip(&want).take(5) {
        assert_eq!(content(&mut d, k), content(&mut a, k), "{k} on the sources");
        let _ = wanted;
    }
    // The TTL travelled (the first step moved keys[0]; move it again to check).
    let _: () = redis::cmd("FLUSHALL").query(&mut t).unwrap();
    let _: () = redis::cmd("SET")
        .arg("ttl")
        .arg("v")
        .arg("PX")
        .arg(800_000)
        .query(&mut d)
        .unwrap();
    let ok: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("ttl")
        .arg(0)
        .arg(5000)
        .query(&mut d)
        .unwrap();
    assert_eq!(ok, "OK");
    let pttl: i64 = redis::cmd("PTTL").arg("ttl").query(&mut t).unwrap();
    assert!((790_000..=800_000).contains(&pttl), "{pttl}");
    // A BUSYKEY target: redis-server's error through both, and REPLACE overwrites.
    let _: () = redis::cmd("SET")
        .arg("busy")
        .arg("source")
        .query(&mut d)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("busy")
        .arg("source")
        .query(&mut a)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("busy")
        .arg("there")
        .query(&mut t)
        .unwrap();
    let step = vec![
        w("MIGRATE"),
        w("127.0.0.1"),
        w(&tport),
        w("busy"),
        w("0"),
        w("5000"),
    ];
    assert_eq!(reply(&mut d, &step), reply(&mut a, &step));
    let mut with_replace = step.clone();
    with_replace.push(w("REPLACE"));
    let from_redis = reply(&mut a, &with_replace);
    let _: () = redis::cmd("SET")
        .arg("busy")
        .arg("there")
        .query(&mut t)
        .unwrap();
    assert_eq!(reply(&mut d, &with_replace), from_redis);
    let v: String = redis::cmd("GET").arg("busy").query(&mut t).unwrap();
    assert_eq!(v, "source");
    // Drive to drive, every key of the drive.
    let rest: Vec<String> = keys[5..].to_vec();
    let ok: String = redis::cmd("MIGRATE")
        .arg(other_drive.addr.ip().to_string())
        .arg(other_drive.addr.port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&rest)
        .query(&mut d)
        .unwrap();
    assert_eq!(ok, "OK");
    let mut d2 = other_drive.conn();
    for (k, wanted) in keys.iter().zip(&want).skip(5) {
        assert_eq!(&content(&mut d2, k), wanted, "{k} on the second drive");
        let gone: i64 = redis::cmd("EXISTS").arg(k).query(&mut d).unwrap();
        assert_eq!(gone, 0, "{k} left the first drive");
    }
}

/// MIGRATE's `REPLICA host port` option (the reshard tool's way to carry a target's replicas
/// along): the keys reach every replica and the target and leave the source; a key the target
/// refuses (BUSYKEY) stays on the source and its copy on the replica is deleted again; a
/// replica that cannot be reached stops the command with nothing moved.
#[test]
fn migrate_copies_to_the_targets_replicas_and_takes_back_what_did_not_move() {
    let dir = tempfile::tempdir().unwrap();
    let source = Drive::start(&dir.path().join("source"), &[]);
    let replica = Drive::start(&dir.path().join("replica"), &[]);
    let target = Drive::start(&dir.path().join("target"), &[]);
    let (mut s, mut r, mut t) = (source.conn(), replica.conn(), target.conn());
    let migrate = |s: &mut redis::Connection, replica_port: u16, keys: &[&str]| {
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1")
            .arg(target.addr.port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("REPLICA")
            .arg("127.0.0.1")
            .arg(replica_port)
            .arg("KEYS")
            .arg(keys);
        cmd.query::<String>(s)
    };
    let get = |c: &mut redis::Connection, k: &str| -> Option<String> {
        redis::cmd("GET").arg(k).query(c).unwrap()
    };
    let _: () = redis::cmd("MSET")
        .arg(&["a", "1", "b", "2", "busy", "mine"])
        .query(&mut s)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("busy")
        .arg("theirs")
        .query(&mut t)
        .unwrap();
    // Two keys move: on the replica and the target, gone from the source.
    assert_eq!(
        migrate(&mut s, replica.addr.port(), &["a", "b"]).unwrap(),
        "OK"
    );
    for k in ["a", "b"] {
        assert_eq!(get(&mut s, k), None);
        assert_eq!(get(&mut r, k), get(&mut t, k));
        assert!(get(&mut r, k).is_some());
    }
    // The target refuses `busy`: it stays here, and the replica's copy is taken back.
    let err = migrate(&mut s, replica.addr.port(), &["busy"]).unwrap_err();
    assert!(err.to_string().contains("BUSYKEY"), "{err}");
    assert_eq!(get(&mut s, "busy").as_deref(), Some("mine"));
    assert_eq!(
        get(&mut r, "busy"),
        None,
        "the replica's copy is deleted again"
    );
    assert_eq!(get(&mut t, "busy").as_deref(), Some("theirs"));
    // A replica that cannot be reached: nothing moves.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _: () = redis::cmd("SET").arg("c").arg("3").query(&mut s).unwrap();
    let err = migrate(&mut s, closed, &["c"]).unwrap_err();
    assert!(err.to_string().contains("Replica"), "{err}");
    assert_eq!(get(&mut s, "c").as_deref(), Some("3"));
    assert_eq!(get(&mut t, "c"), None);
}
