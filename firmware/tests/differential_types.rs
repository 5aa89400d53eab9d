//! Compatibility by difference for the collection commands of issue 17: sets, the hash
//! commands beyond HSET/HGET/HDEL, the sorted-set range, rank and pop commands, and lists. Each
//! family has a scripted test (error cases, wrong types, edge arguments, empty and binary
//! names); its seeded random sequences are in `differential_random.rs`. Every reply is
//! compared with redis-server's.
//!
//! Replies are compared in full (errors by code and text), except where Redis itself gives
//! no order or picks at random (`common::compare`): SMEMBERS, SINTER/SUNION/SDIFF, HKEYS,
//! HVALS, HGETALL and the SCAN-family pages are compared sorted; SRANDMEMBER, HRANDFIELD and
//! SPOP of fewer than all members by size only (the random sequences pop whole sets, so
//! both servers keep the same state). redis-server must be installed (`cargo xtask test`
//! installs it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::compare::{argv, compare, run_both, script, send, ttls_a_second_apart};
use common::{Drive, RedisServer};

#[test]
fn ttls_a_second_apart_are_the_same_deadline_read_at_two_instants() {
    assert!(ttls_a_second_apart(
        "ttl",
        "int(98203783413)",
        "int(98203783412)"
    ));
    assert!(ttls_a_second_apart("ttl", "int(100)", "int(99)"));
    assert!(!ttls_a_second_apart("ttl", "int(100)", "int(98)"));
    // No deadline, no key: exact.
    assert!(!ttls_a_second_apart("ttl", "int(-1)", "int(-2)"));
    assert!(!ttls_a_second_apart("ttl", "int(1)", "int(-1)"));
    assert!(!ttls_a_second_apart("scard", "int(3)", "int(2)"));
}

#[test]
fn set_commands_answer_as_redis_server_does() {
    let lines = script(&[
        "SADD s1 a b c d",
        "SADD s1 a e <empty>",
        "SADD s1 <binary>",
        "SCARD s1",
        "SMEMBERS s1",
        "SISMEMBER s1 a",
        "SISMEMBER s1 zz",
        "SISMEMBER missing a",
        "SMISMEMBER s1 a zz <empty> <binary>",
        "SMISMEMBER missing a b",
        "SADD s2 c d e f",
        "SADD s3 d e g",
        "SINTER s1 s2",
        "SINTER s1 s2 s3",
        "SINTER s1 missing",
        "SUNION s1 s2 s3",
        "SUNION missing",
        "SDIFF s1 s2",
        "SDIFF s1 s2 s3",
        "SDIFF missing s1",
        "SINTERCARD 2 s1 s2",
        "SINTERCARD 3 s1 s2 s3 LIMIT 1",
        "SINTERCARD 2 s1 s2 LIMIT 0",
        "SINTERCARD 0 s1",
        "SINTERCARD 3 s1 s2",
        "SINTERCARD 1 s1 LIMIT -1",
        "SINTERCARD 1 s1 BOGUS 1",
        "SINTERCARD x s1",
        "SINTERSTORE d1 s1 s2",
        "SMEMBERS d1",
        "SUNIONSTORE d2 s1 s2 s3",
        "SCARD d2",
        "SDIFFSTORE d3 s1 s2",
        "SMEMBERS d3",
        "SINTERSTORE d3 s1 missing",
        "EXISTS d3",
        "SET str v",
        "SINTERSTORE str s1 s2",
        "TYPE str",
        "SMEMBERS str",
        "SET str v",
        "SINTER s1 str",
        "SINTER missing str",
        "SUNION s1 str",
        "SDIFF str s1",
        "SDIFF missing str",
        "SINTERSTORE d4 s1 str",
        "SINTERCARD 2 s1 str",
        "SADD str a",
        "SREM str a",
        "SMEMBERS str",
        "SCARD str",
        "SISMEMBER str a",
        "SMISMEMBER str a",
        "SRANDMEMBER str",
        "SPOP str",
        "SREM s1 a zz b",
        "SREM s1 zz",
        "SREM missing a",
        "SMEMBERS s1",
        "SMOVE s1 s2 c",
        "SMOVE s1 s2 c",
        "SMOVE s1 newset d",
        "SMEMBERS newset",
        "SMOVE missing s2 a",
        "SMOVE s1 str e",
        "SMOVE str s1 a",
        "SMOVE missing str a",
        "SMOVE s2 s2 c",
        "SMOVE s2 s2 zz",
        "SMEMBERS s1",
        "SMEMBERS s2",
        "SADD one x",
        "SMOVE one two x",
        "EXISTS one",
        "SMEMBERS two",
        "SRANDMEMBER missing",
        "SRANDMEMBER missing 3",
        "SRANDMEMBER s2 100",
        "SRANDMEMBER s2 0",
        "SRANDMEMBER s2 2",
        "SRANDMEMBER s2 -7",
        "SRANDMEMBER s2",
        "SRANDMEMBER s2 x",
        "SRANDMEMBER s2 1 2",
        "SRANDMEMBER s2 -9223372036854775808",
        "SPOP missing",
        "SPOP missing 2",
        "SPOP s2 -1",
        "SPOP s2 x",
        "SPOP s2 1 2",
        "SPOP s2 0",
        "SADD single only",
        "SPOP single 1",
        "EXISTS single",
        "SCARD s2",
        "SPOP s2 100",
        "EXISTS s2",
        "SADD p only",
        "SPOP p",
        "EXISTS p",
        "SSCAN s3 0",
        "SSCAN s3 0 MATCH d*",
        "SSCAN s3 0 COUNT 0",
        "SSCAN s3 0 BOGUS",
        "SSCAN missing 0 COUNT 0",
        "SSCAN s3 x",
        "SSCAN str 0",
        "SADD",
        "SADD s1",
        "SCARD",
        "SMOVE a b",
        "DEL s3",
        "SCARD s3",
        "SADD <binary> <empty>",
        "SMEMBERS <binary>",
        "RENAME <binary> <empty>",
        "SMEMBERS <empty>",
        "TYPE <empty>",
        "MULTI",
        "SADD t1 a b",
        "SCARD t1",
        "SMEMBERS t1",
        "SPOP t1 100",
        "EXISTS t1",
        "EXEC",
        "KEYS *",
        "DBSIZE",
    ]);
    let mut differ = run_both(&lines, "sets");
    differ.extend(watch_sees_only_the_destination_change());
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// A WATCH on a source of SINTERSTORE survives it (only the destination changes), one on
/// its destination does not, as in Redis: two connections, compared with redis-server.
fn watch_sees_only_the_destination_change() -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let mut differ = Vec::new();
    for watched in ["src", "dst"] {
        let mut outcome = Vec::new();
        for (mut watcher, mut writer) in
            [(redis.conn(), redis.conn()), (drive.conn(), drive.conn())]
        {
            let q = |c: &mut redis::Connection, line: &str| send(c, &argv(line));
            let _ = q(&mut writer, "SADD src a b");
            let _ = q(&mut watcher, &format!("WATCH {watched}"));
            let _ = q(&mut writer, "SINTERSTORE dst src");
            let _ = q(&mut watcher, "MULTI");
            let _ = q(&mut watcher, "SCARD dst");
            outcome.push(format!("{:?}", q(&mut watcher, "EXEC")));
            let _ = q(&mut writer, "DEL src dst");
        }
        if outcome[0] != outcome[1] {
            differ.push(format!(
                "WATCH {watched} then SINTERSTORE dst src by another client:\n  redis-server: {}\n  drive:        {}",
                outcome[0], outcome[1]
            ));
        }
    }
    differ
}

#[test]
fn hash_commands_answer_as_redis_server_does() {
    let lines = script(&[
        "HSET h f1 10 f2 x f3 1.5 <empty> empty",
        // Overwrites only (the header is not read or rewritten), a new field beside an old
        // one, and a field named twice in one command.
        "HSET h f2 y",
        "HLEN h",
        "HSET h f2 x f8 eight f8 again",
        "HLEN h",
        "HGET h f8",
        "HDEL h f8",
        "HLEN h",
        "HINCRBY h f1 5",
        "HINCRBY h f1 -20",
        "HINCRBY h new 7",
        "HLEN h",
        "HINCRBY h f2 1",
        "HINCRBY h f1 x",
        "HINCRBY h f1 9223372036854775807",
        "HINCRBY missing f 1",
        "HGETALL missing",
        "DEL missing",
        "HINCRBYFLOAT h f3 0.1",
        "HINCRBYFLOAT h f3 -2.25",
        "HINCRBYFLOAT h f3 1e1",
        "HINCRBYFLOAT h fl 3.0e-2",
        "HINCRBYFLOAT h fl 10.5",
        "HINCRBYFLOAT h f1 1.5",
        "HINCRBYFLOAT h f2 1",
        "HINCRBYFLOAT h f3 x",
        "HINCRBYFLOAT h f3 inf",
        "HINCRBYFLOAT h f3 nan",
        "HGET h f3",
        "HGET h fl",
        "HSETNX h f1 no",
        "HSETNX h f9 yes",
        "HSETNX fresh f v",
        "HGETALL fresh",
        "HSTRLEN h f2",
        "HSTRLEN h f9",
        "HSTRLEN h nope",
        "HSTRLEN missing f",
        "HKEYS h",
        "HVALS h",
        "HKEYS missing",
        "HVALS missing",
        "HLEN h",
        "HGETALL h",
        "SET str v",
        "HINCRBY str f 1",
        "HINCRBYFLOAT str f 1",
        "HSETNX str f v",
        "HSTRLEN str f",
        "HKEYS str",
        "HVALS str",
        "HRANDFIELD str",
        "HSCAN str 0",
        "SADD set a",
        "HKEYS set",
        "HRANDFIELD missing",
        "HRANDFIELD missing 2",
        "HRANDFIELD missing 2 WITHVALUES",
        "HRANDFIELD h",
        "HRANDFIELD h 0",
        "HRANDFIELD h 2",
        "HRANDFIELD h 100",
        "HRANDFIELD h -9",
        "HRANDFIELD h 3 WITHVALUES",
        "HRANDFIELD h -3 WITHVALUES",
        "HRANDFIELD h 2 BOGUS",
        "HRANDFIELD h 2 WITHVALUES x",
        "HRANDFIELD h x",
        "HSCAN h 0",
        "HSCAN h 0 MATCH f*",
        "HSCAN h 0 COUNT 2",
        "HSCAN h 0 COUNT -1",
        "HSCAN missing 0 BOGUS",
        "HSCAN h x",
        "HINCRBY",
        "HINCRBY h f",
        "HSETNX h f",
        "HKEYS h extra",
        "HSET <binary> <binary> <empty>",
        "HSTRLEN <binary> <binary>",
        "HINCRBY <binary> <empty> 3",
        "HGETALL <binary>",
        "MULTI",
        "HINCRBY m c 1",
        "HINCRBYFLOAT m d 0.5",
        "HSETNX m c 9",
        "HKEYS m",
        "HVALS m",
        "EXEC",
    ]);
    let differ = run_both(&lines, "hashes");
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn sorted_set_commands_answer_as_redis_server_does() {
    let lines = script(&[
        "ZADD z 1 a 2 b 3 c 4 d 5 e -inf lo +inf hi 2.5 bb",
        "ZRANGE z 0 -1",
        "ZRANGE z 0 -1 WITHSCORES",
        "ZRANGE z 2 4",
        "ZRANGE z -3 -1 WITHSCORES",
        "ZRANGE z 5 2",
        "ZRANGE z 100 200",
        "ZRANGE z -100 1",
        "ZRANGE z 0 -1 REV",
        "ZRANGE z 1 3 REV WITHSCORES",
        "ZRANGE z 2 4 BYSCORE",
        "ZRANGE z (2 4 BYSCORE WITHSCORES",
        "ZRANGE z -inf +inf BYSCORE LIMIT 1 3",
        "ZRANGE z -inf +inf BYSCORE LIMIT 1 -1",
        "ZRANGE z -inf +inf BYSCORE LIMIT -1 3",
        "ZRANGE z +inf -inf BYSCORE REV",
        "ZRANGE z 4 (2 BYSCORE REV WITHSCORES",
        "ZRANGE z +inf -inf BYSCORE REV LIMIT 1 2",
        "ZRANGE z 0 1 LIMIT 0 1",
        "ZRANGE z 0 1 LIMIT 0 -1",
        "ZRANGE z - + BYLEX",
        "ZRANGE z - + BYLEX WITHSCORES",
        "ZRANGE z x y BYSCORE",
        "ZRANGE z a b BYLEX",
        "ZRANGE z 0 1 BYSCORE BYLEX",
        "ZRANGE z 0 1 REV REV",
        "ZRANGE z x 1",
        "ZRANGE z 0 1 BOGUS",
        "ZRANGE missing 0 -1",
        "ZREVRANGE z 0 2",
        "ZREVRANGE z 0 -1 WITHSCORES",
        "ZREVRANGE z 0 1 REV",
        "ZREVRANGE missing 0 1",
        "ZREVRANGEBYSCORE z +inf -inf",
        "ZREVRANGEBYSCORE z 4 2 WITHSCORES",
        "ZREVRANGEBYSCORE z (4 (2 LIMIT 0 1",
        "ZREVRANGEBYSCORE z 2 4",
        "ZREVRANGEBYSCORE z x 1",
        "ZRANK z a",
        "ZRANK z hi",
        "ZRANK z nope",
        "ZRANK missing a",
        "ZREVRANK z a",
        "ZREVRANK z hi",
        "ZMSCORE z a bb nope hi lo",
        "ZMSCORE missing a b",
        "ZINCRBY z 2 a",
        "ZINCRBY z -0.5 newm",
        "ZINCRBY z x a",
        "ZINCRBY z 1 hi",
        "ZSCORE z a",
        "ZINCRBY fresh 1.5 m",
        "ZRANGE fresh 0 -1 WITHSCORES",
        "ZCOUNT z -inf +inf",
        "ZCOUNT z 2 (4",
        "ZCOUNT z (2 2",
        "ZCOUNT z x 1",
        "ZCOUNT missing 0 1",
        "ZPOPMIN z",
        "ZPOPMAX z",
        "ZPOPMIN z 2",
        "ZPOPMAX z 2",
        "ZPOPMIN z 0",
        "ZPOPMIN z -1",
        "ZPOPMIN z x",
        "ZPOPMIN z 1 2",
        "ZPOPMIN missing",
        "ZPOPMIN missing 3",
        "ZCARD z",
        "ZRANGE z 0 -1 WITHSCORES",
        "ZADD y 1 a 2 b 3 c 4 d 5 e",
        "ZREMRANGEBYSCORE y 2 (4",
        "ZRANGE y 0 -1",
        "ZREMRANGEBYSCORE y x 1",
        "ZREMRANGEBYSCORE missing 0 1",
        "ZREMRANGEBYRANK y 0 0",
        "ZRANGE y 0 -1",
        "ZREMRANGEBYRANK y -1 -1",
        "ZREMRANGEBYRANK y 0 -1",
        "EXISTS y",
        "ZADD lex 0 a 0 b 0 c 0 d 0 e 0 <empty>",
        "ZRANGEBYLEX lex - +",
        "ZRANGEBYLEX lex [b (d",
        "ZRANGEBYLEX lex (b +",
        "ZRANGEBYLEX lex - + LIMIT 1 2",
        "ZRANGEBYLEX lex [d [b",
        "ZRANGEBYLEX lex b +",
        "ZREVRANGEBYLEX lex + -",
        "ZREVRANGEBYLEX lex [d (a LIMIT 1 5",
        "ZLEXCOUNT lex - +",
        "ZLEXCOUNT lex [b [d",
        "ZLEXCOUNT lex x +",
        "ZREMRANGEBYLEX lex [b (d",
        "ZRANGE lex 0 -1",
        "ZSCAN lex 0",
        "ZSCAN z 0 MATCH *b*",
        "ZSCAN missing 0",
        "SET str v",
        "ZRANGE str 0 1",
        "ZREVRANGE str 0 1",
        "ZRANK str a",
        "ZMSCORE str a",
        "ZINCRBY str 1 a",
        "ZCOUNT str 0 1",
        "ZPOPMIN str",
        "ZPOPMIN str 0",
        "ZREMRANGEBYSCORE str 0 1",
        "ZRANGEBYLEX str - +",
        "ZSCAN str 0",
        "ZRANGE",
        "ZRANGE z 0",
        "ZRANK z",
        "ZINCRBY z 1",
        "ZADD <binary> 1 <empty> 2 <binary>",
        "ZRANGE <binary> 0 -1 WITHSCORES",
        "ZRANK <binary> <binary>",
        "MULTI",
        "ZADD t 1 a 2 b 3 c",
        "ZRANGE t 0 -1 WITHSCORES",
        "ZPOPMAX t",
        "ZRANK t b",
        "ZINCRBY t 10 a",
        "ZREVRANGE t 0 0",
        "EXEC",
    ]);
    let differ = run_both(&lines, "sorted sets");
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn list_commands_answer_as_redis_server_does() {
    let lines = script(&[
        "RPUSH l a b c",
        "LPUSH l z y",
        "LRANGE l 0 -1",
        "LLEN l",
        "LINDEX l 0",
        "LINDEX l -1",
        "LINDEX l 5",
        "LINDEX l -6",
        "LINDEX l x",
        "LRANGE l 1 2",
        "LRANGE l -2 100",
        "LRANGE l 3 1",
        "LRANGE l x 1",
        "LRANGE missing 0 -1",
        "LPUSHX missing a",
        "RPUSHX missing a",
        "EXISTS missing",
        "LPUSHX l x1 x2",
        "RPUSHX l <empty> <binary>",
        "LRANGE l 0 -1",
        "LSET l 0 first",
        "LSET l -1 last",
        "LSET l 100 v",
        "LSET missing 0 v",
        "LSET l x v",
        "LRANGE l 0 -1",
        "LPOP l",
        "RPOP l",
        "LPOP l 2",
        "RPOP l 0",
        "LPOP l -1",
        "LPOP l 1 2",
        "LPOP missing",
        "LPOP missing 2",
        "RPOP missing 0",
        "LRANGE l 0 -1",
        "RPUSH r a b a c a d",
        "LREM r 2 a",
        "LRANGE r 0 -1",
        "RPUSH r a a",
        "LREM r -2 a",
        "LRANGE r 0 -1",
        "LREM r 0 a",
        "LREM r 0 zz",
        "LREM missing 0 a",
        "LRANGE r 0 -1",
        "LINSERT r BEFORE c new",
        "LINSERT r AFTER d tail",
        "LINSERT r AFTER nope x",
        "LINSERT r MIDDLE c x",
        "LINSERT missing BEFORE a b",
        "LRANGE r 0 -1",
        "RPUSH p a b c a b c a",
        "LPOS p a",
        "LPOS p b RANK 2",
        "LPOS p a RANK -1",
        "LPOS p a RANK -2 COUNT 0",
        "LPOS p a COUNT 2",
        "LPOS p a COUNT 0 MAXLEN 4",
        "LPOS p c RANK -1 MAXLEN 2",
        "LPOS p zz",
        "LPOS p zz COUNT 3",
        "LPOS missing a",
        "LPOS missing a COUNT 1",
        "LPOS p a RANK 0",
        "LPOS p a COUNT -1",
        "LPOS p a MAXLEN -1",
        "LPOS p a RANK x",
        "LPOS p a BOGUS 1",
        "LPOS p a RANK",
        "RPUSH t 1 2 3 4 5 6",
        "LTRIM t 1 -2",
        "LRANGE t 0 -1",
        "LTRIM t 2 1",
        "EXISTS t",
        "LTRIM missing 0 1",
        "RPUSH m1 a b c",
        "LMOVE m1 m2 LEFT RIGHT",
        "LMOVE m1 m2 RIGHT LEFT",
        "LRANGE m1 0 -1",
        "LRANGE m2 0 -1",
        "LMOVE m1 m1 LEFT RIGHT",
        "LMOVE m1 m2 UP LEFT",
        "LMOVE missing m2 LEFT LEFT",
        "RPOPLPUSH m2 m1",
        "LRANGE m1 0 -1",
        "LPOP m1 10",
        "EXISTS m1",
        "SET str v",
        "LPUSH str a",
        "RPUSHX str a",
        "LPOP str",
        "LRANGE str 0 1",
        "LLEN str",
        "LINDEX str 0",
        "LSET str 0 a",
        "LREM str 0 a",
        "LTRIM str 0 1",
        "LINSERT str BEFORE a b",
        "LMOVE str m2 LEFT LEFT",
        "LMOVE m2 str LEFT LEFT",
        "RPOPLPUSH missing str",
        "TYPE m2",
        "LPUSH",
        "LLEN",
        "LRANGE l 0",
        "LPUSH <binary> <empty>",
        "LRANGE <binary> 0 -1",
        "MULTI",
        "RPUSH q a b",
        "LPUSH q z",
        "LRANGE q 0 -1",
        "LPOP q 5",
        "EXISTS q",
        "EXEC",
    ]);
    let differ = run_both(&lines, "lists");
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// Collections larger than one engine walk step (4,096 keys) and than the SCAN-whole size:
/// walks cross chunk boundaries (also through a transaction's overlay), and SSCAN, HSCAN
/// and ZSCAN page with their cursors and still return every member once.
#[test]
fn large_collections_answer_as_redis_server_does() {
    const N: usize = 5000;
    let members: Vec<String> = (0..N).map(|i| format!("m{i:05}")).collect();
    let half = members[..N / 2].join(" ");
    let mut lines = vec![
        format!("SADD big {}", members.join(" ")),
        format!("SADD other {half}"),
        format!(
            "ZADD zbig {}",
            members
                .iter()
                .enumerate()
                .map(|(i, m)| format!("{} {m}", i % 97))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        format!("RPUSH lbig {}", members.join(" ")),
        format!(
            "HSET hbig {}",
            members
                .iter()
                .map(|m| format!("{m} v{m}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ];
    for l in [
        "SCARD big",
        "SMEMBERS big",
        "SINTER big other",
        "SINTERCARD 2 big other",
        "SDIFF big other",
        "SISMEMBER big m04999",
        "ZCARD zbig",
        "ZRANGE zbig 4990 -1 WITHSCORES",
        "ZREVRANGE zbig 0 9 WITHSCORES",
        "ZRANK zbig m04999",
        "ZREVRANK zbig m00000",
        "ZCOUNT zbig 50 (60",
        "ZRANGE zbig +inf 90 BYSCORE REV LIMIT 3 5",
        "LLEN lbig",
        "LRANGE lbig 4095 4100",
        "LINDEX lbig -4097",
        "HLEN hbig",
        "HKEYS hbig",
        "HSTRLEN hbig m04097",
        "MULTI",
        "SADD big zzz",
        "SREM big m00001",
        "SCARD big",
        "SMEMBERS big",
        "ZPOPMAX zbig 3",
        "ZREMRANGEBYRANK zbig 0 4095",
        "ZRANGE zbig 0 -1",
        "EXEC",
        "SPOP big 100000",
        "EXISTS big",
    ] {
        lines.push(l.to_string());
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let mut differ = compare(&redis, &drive, &lines, "large");
    // The SCAN family pages through the whole collection, each member once.
    let mut d = drive.conn();
    for (cmd, key, per_item) in [
        ("SSCAN", "other", 1),
        ("HSCAN", "hbig", 2),
        ("ZSCAN", "zbig", 2),
    ] {
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = "0".to_string();
        loop {
            let (next, items): (String, Vec<Vec<u8>>) = redis::cmd(cmd)
                .arg(key)
                .arg(&cursor)
                .arg("COUNT")
                .arg(300)
                .query(&mut d)
                .unwrap();
            for m in items.chunks(per_item) {
                if !seen.insert(m[0].clone()) {
                    differ.push(format!("{cmd} returned {:?} twice", m[0]));
                }
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        let want: i64 = redis::cmd(match cmd {
            "SSCAN" => "SCARD",
            "HSCAN" => "HLEN",
            _ => "ZCARD",
        })
        .arg(key)
        .query(&mut d)
        .unwrap();
        if seen.len() as i64 != want {
            differ.push(format!("{cmd} saw {} of {want} members", seen.len()));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The RESP3 shapes (sets, doubles, nested score pairs, null arrays) of the collection
/// replies, byte for byte, after `HELLO 3` on a raw connection. Collections with one member
/// keep the order-free replies comparable.
#[test]
fn resp3_replies_match_redis_server_byte_for_byte() {
    use std::time::Duration;
    let commands: &[&[&str]] = &[
        &["SADD", "s", "only"],
        &["SMEMBERS", "s"],
        &["SINTER", "s", "s"],
        &["SMISMEMBER", "s", "only", "no"],
        &["SRANDMEMBER", "s", "-2"],
        &["ZADD", "z", "1.5", "a", "2", "b", "-inf", "c"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        &["ZRANGE", "z", "0", "-1"],
        &["ZREVRANGEBYSCORE", "z", "+inf", "-inf", "WITHSCORES"],
        &["ZMSCORE", "z", "a", "nope", "c"],
        &["ZINCRBY", "z", "0.25", "a"],
        &["ZPOPMIN", "z"],
        &["ZPOPMAX", "z", "1"],
        &["ZPOPMIN", "missing", "2"],
        &["HSET", "h", "f", "v"],
        &["HRANDFIELD", "h", "1", "WITHVALUES"],
        &["HKEYS", "h"],
        &["HSCAN", "h", "0"],
        &["RPUSH", "l", "x", "y"],
        &["LPOP", "l", "5"],
        &["LPOP", "l", "5"],
        &["RPOP", "missing"],
        &["SPOP", "s", "5"],
        &["SPOP", "missing", "5"],
    ];
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let (mut r, mut d) = (redis.raw(), drive.raw());
    // HELLO alone (its server fields differ), then every command pipelined in one write:
    // the two reply streams are compared whole once neither has sent anything for a while.
    let hello = b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n";
    common::exchange(&mut r, hello, Duration::from_millis(500));
    common::exchange(&mut d, hello, Duration::from_millis(500));
    let mut req = Vec::new();
    for cmd in commands {
        req.extend_from_slice(format!("*{}\r\n", cmd.len()).as_bytes());
        for a in *cmd {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    let settle = Duration::from_secs(2);
    let (want, _) = common::exchange(&mut r, &req, settle);
    let (got, _) = common::exchange(&mut d, &req, settle);
    assert!(
        want.windows(4).any(|w| w == b"~1\r\n") && want.ends_with(b"~0\r\n"),
        "redis-server did not answer every command in RESP3: {:?}",
        String::from_utf8_lossy(&want)
    );
    let mut differ = Vec::new();
    if want != got {
        differ.push(format!(
            "RESP3 replies to {commands:?}:\n  redis-server: {:?}\n  drive:        {:?}",
            String::from_utf8_lossy(&want),
            String::from_utf8_lossy(&got)
        ));
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// Whole SCAN, SSCAN, HSCAN and ZSCAN walks (redis-rs's iterators, COUNT 50 / 20) over
/// 9,003 keys of four shapes and collections of 700 members return the same keys and members
/// from both servers, each once, and the drive's SCAN pages stay at COUNT, as
/// redis-server's do (within a few keys).
#[test]
fn scan_walks_return_what_redis_server_returns() {
    use redis::Commands;
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let mut results = Vec::new();
    for mut c in [redis.conn(), drive.conn()] {
        let mut p = redis::pipe();
        for i in 0..3000 {
            p.set(format!("key:{i:012}"), i).ignore();
            p.set(format!("user:{i}"), i).ignore();
            p.set(format!("user:{i}:sessions"), i).ignore();
        }
        for i in 0..700 {
            p.hset("bighash", format!("field-{i}"), i).ignore();
            p.sadd("bigset", format!("m{i}")).ignore();
            p.zadd("bigzset", format!("z{i}"), i % 17).ignore();
        }
        p.query::<()>(&mut c).unwrap();
        let (mut cursor, mut keys, mut pages, mut largest) = (0u64, Vec::new(), 0, 0);
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(50)
                .query(&mut c)
                .unwrap();
            pages += 1;
            largest = largest.max(page.len());
            keys.extend(page);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "a key came twice");
        let mut fields: Vec<(String, i64)> = c.hscan("bighash").unwrap().collect();
        let mut members: Vec<String> = c.sscan("bigset").unwrap().collect();
        let mut scored: Vec<(String, f64)> = c.zscan("bigzset").unwrap().collect();
        let mut matched: Vec<String> = c.scan_match("key:00000000001*").unwrap().collect();
        fields.sort();
        members.sort();
        scored.sort_by(|a, b| a.0.cmp(&b.0));
        matched.sort();
        let scored: Vec<(String, i64)> = scored.into_iter().map(|(m, s)| (m, s as i64)).collect();
        results.push((keys, fields, members, scored, matched, pages, largest));
    }
    let (ours, theirs) = (&results[1], &results[0]);
    assert_eq!(ours.0.len(), 9003);
    assert_eq!(ours.0, theirs.0, "SCAN");
    assert_eq!(ours.1, theirs.1, "HSCAN");
    assert_eq!(ours.2, theirs.2, "SSCAN");
    assert_eq!(ours.3, theirs.3, "ZSCAN");
    assert_eq!(ours.4, theirs.4, "SCAN MATCH");
    assert!(ours.6 <= 50, "a SCAN page of {} keys for COUNT 50", ours.6);
    assert!(
        ours.5 <= theirs.5 + theirs.5 / 10,
        "{} pages against redis-server's {}",
        ours.5,
        theirs.5
    );
}
