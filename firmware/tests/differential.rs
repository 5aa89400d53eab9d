//! Compatibility by difference: the same commands against redis-server and the drive, reply
//! for reply. Covers the reading commands (which run asynchronously on the drive, or on its
//! network thread when cached) with present, missing, expired and wrongly typed keys.
//! Also the transaction commands (MULTI/EXEC/DISCARD/WATCH), the expiry commands and the
//! keyspace and string commands added with them, scripted (with error cases, wrong types and
//! edge arguments; `common::script` compares); their seeded random sequences are in
//! `differential_sequences.rs`.
//! redis-server must be installed (`cargo xtask test` installs it): the test fails without it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::script::{both, run_script, sorted_pairs};
use common::{Drive, RedisServer};
use redis::Value;

/// A reply with the parts Redis leaves unordered put in order (HGETALL's pairs) and error
/// texts cut to their code (the drive's messages may differ in wording).
fn normal(cmd: &[&str], v: redis::RedisResult<Value>) -> String {
    match v {
        Err(e) => format!("error {}", e.code().unwrap_or("?")),
        Ok(Value::Array(items)) if cmd[0].eq_ignore_ascii_case("hgetall") => sorted_pairs(&items),
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
    let redis = RedisServer::start(dir.path(), &[]);
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

#[test]
fn transactions_answer_as_redis_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let script: &[&str] = &[
        "1: EXEC",
        "1: DISCARD",
        "1: MULTI",
        "1: MULTI",
        "1: SET a 1",
        "1: INCR a",
        "1: GET a",
        "1: HSET a f v",
        "1: INCRBY a x",
        "1: SET b v bogus",
        "1: PING",
        "1: ECHO hi",
        "1: HSET h f1 v1 f2 v2",
        "1: HGETALL h",
        "1: HLEN h",
        "1: HEXISTS h f1",
        "1: HMGET h f1 nope",
        "1: ZADD z 1 m 2 n",
        "1: ZRANGEBYSCORE z -inf +inf WITHSCORES",
        "1: ZSCORE z n",
        "1: ZCARD z",
        "1: MGET a h missing",
        "1: STRLEN a",
        "1: EXISTS a h z missing",
        "1: TYPE h",
        "1: DEL h",
        "1: TYPE h",
        "1: EXPIRE a 100",
        "1: TTL a",
        "1: GETRANGE a 0 0",
        "1: EXEC",
        "1: GET a",
        "1: TTL a",
        // A refused command (unknown, wrong arity) aborts the whole transaction.
        "1: MULTI",
        "1: SET c 1",
        "1: GET",
        "1: NOSUCHCOMMAND x",
        "1: EXEC",
        "1: GET c",
        "1: MULTI",
        "1: SET c 2",
        "1: DISCARD",
        "1: GET c",
        "1: MULTI",
        "1: EXEC",
        // WATCH: another client's write aborts; no write, or UNWATCH, lets EXEC run.
        "1: WATCH w",
        "2: SET w other",
        "1: MULTI",
        "1: SET w mine",
        "1: EXEC",
        "1: GET w",
        "1: WATCH w",
        "1: MULTI",
        "1: SET w mine",
        "1: EXEC",
        "1: GET w",
        "1: WATCH w",
        "1: UNWATCH",
        "2: SET w again",
        "1: MULTI",
        "1: GET w",
        "1: EXEC",
        // The watcher's own write counts too.
        "1: WATCH w",
        "1: SET w self",
        "1: MULTI",
        "1: GET w",
        "1: EXEC",
        // A watched key that did not exist and is created; deleted; expired by EXPIRE.
        "1: WATCH fresh",
        "2: SET fresh 1",
        "1: MULTI",
        "1: GET fresh",
        "1: EXEC",
        "1: WATCH fresh",
        "2: DEL fresh",
        "1: MULTI",
        "1: EXEC",
        "1: WATCH nothing",
        "2: DEL nothing",
        "1: MULTI",
        "1: EXEC",
        "1: SET e 1",
        "1: WATCH e w",
        "2: PEXPIREAT e 1",
        "1: MULTI",
        "1: GET e",
        "1: EXEC",
        "1: WATCH w",
        "2: HSET w f v",
        "1: MULTI",
        "1: EXEC",
        "1: WATCH w",
        "2: RENAME w w2",
        "1: MULTI",
        "1: EXEC",
        // WATCH inside MULTI, MULTI nested: errors that do not abort.
        "1: MULTI",
        "1: WATCH x",
        "1: SET x 1",
        "1: EXEC",
        "1: WATCH a b c",
        "1: WATCH",
        "1: MULTI",
        "1: UNWATCH",
        "1: EXEC",
        "1: MULTI",
        "1: EXEC extra",
        "1: DISCARD",
        // Reads after writes inside one transaction, several keys, wrong types.
        "1: MULTI",
        "1: SET s1 hello",
        "1: APPEND s1 -world",
        "1: STRLEN s1",
        "1: RENAME s1 s2",
        "1: GET s1",
        "1: GET s2",
        "1: GETDEL s2",
        "1: EXISTS s2",
        "1: ZADD s3 1 x",
        "1: GET s3",
        "1: SETNX s3 v",
        "1: TYPE s3",
        "1: EXEC",
    ];
    let differ = run_script(&redis, &drive, script, Duration::from_millis(0));
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn redis_rs_atomic_pipeline_works_as_on_redis_server() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let mut outcomes = Vec::new();
    for mut c in [redis.conn(), drive.conn()] {
        let got: (String, i64, i64, Option<String>) = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("p")
            .arg("1")
            .cmd("INCRBY")
            .arg("p")
            .arg(41)
            .cmd("EXPIRE")
            .arg("p")
            .arg(100)
            .cmd("GET")
            .arg("p")
            .query(&mut c)
            .unwrap();
        outcomes.push(got);
    }
    assert_eq!(outcomes[0], outcomes[1]);
    assert_eq!(outcomes[1].3.as_deref(), Some("42"));
}

/// Deadlines on hashes, sorted sets, lists and sets: every read sees an expired collection
/// as gone, a write under its name starts a new, empty one without a deadline, and the
/// commands that keep, carry or drop a deadline do as in Redis. `SLEEP` waits 60 ms (past
/// the 30 ms deadlines).
#[test]
fn collections_expire_as_on_redis_server() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let script: &[&str] = &[
        "1: HSET h f1 v1 f2 v2",
        "1: EXPIRE h 100",
        "1: TTL h",
        "1: EXPIRETIME h",
        "1: PEXPIRE h 30",
        "1: ZADD z 1 a 2 b",
        "1: PEXPIRE z 30",
        "1: RPUSH l a b c",
        "1: PEXPIRE l 30",
        "1: SADD s a b",
        "1: PEXPIRE s 30",
        "1: SET str v",
        "1: PEXPIRE str 30",
        "1: HSET hw f v",
        "1: PEXPIRE hw 30",
        "1: WATCH hw",
        "1: RPUSH src a",
        "1: RPUSH dst old",
        "1: PEXPIRE dst 30",
        "1: SLEEP",
        // Gone to every read.
        "1: HGETALL h",
        "1: HLEN h",
        "1: HGET h f1",
        "1: GET h",
        "1: TTL h",
        "1: PTTL z",
        "1: EXISTS h z l s str",
        "1: TYPE z",
        "1: ZRANGE z 0 -1",
        "1: LRANGE l 0 -1",
        "1: LLEN l",
        "1: SMEMBERS s",
        "1: SCARD s",
        "1: KEYS *",
        "1: PERSIST z",
        "1: EXPIRE z 100",
        // A watched key that expired aborts the transaction.
        "1: MULTI",
        "1: HGET hw f",
        "1: EXEC",
        // New keys under the expired names: empty, no deadline.
        "1: HSET h f3 v3",
        "1: HGETALL h",
        "1: TTL h",
        "1: ZADD z 5 c",
        "1: ZRANGE z 0 -1 WITHSCORES",
        "1: LPUSH l x",
        "1: LRANGE l 0 -1",
        "1: SADD s c",
        "1: SMEMBERS s",
        "1: HSET str f v",
        "1: HGETALL str",
        "1: LMOVE src dst LEFT RIGHT",
        "1: LRANGE dst 0 -1",
        "1: TTL dst",
        // Emptying a collection deletes it with its deadline.
        "1: RPUSH q a",
        "1: EXPIRE q 100",
        "1: LPOP q",
        "1: RPUSH q b",
        "1: TTL q",
        "1: HSET hq f v",
        "1: EXPIRE hq 100",
        "1: HDEL hq f",
        "1: HSET hq g v",
        "1: TTL hq",
        // Moving a list's only item onto itself keeps the list, and its deadline.
        "1: RPUSH one a",
        "1: EXPIRE one 100",
        "1: LMOVE one one LEFT RIGHT",
        "1: TTL one",
        "1: RPOPLPUSH one one",
        "1: TTL one",
        // SET KEEPTTL over a hash keeps its deadline; SET drops it.
        "1: HSET hk f v",
        "1: EXPIRE hk 100",
        "1: SET hk s KEEPTTL",
        "1: TTL hk",
        "1: TYPE hk",
        "1: SET hk s",
        "1: TTL hk",
        // RENAME and COPY carry it; a STORE destination loses it.
        "1: ZADD zr 1 a",
        "1: EXPIRE zr 100",
        "1: RENAME zr zr2",
        "1: TTL zr",
        "1: TTL zr2",
        "1: COPY zr2 zr3",
        "1: TTL zr3",
        "1: SADD sa a",
        "1: SADD sd x",
        "1: EXPIRE sd 100",
        "1: SUNIONSTORE sd sa",
        "1: TTL sd",
        // The conditions, PERSIST, and a past deadline.
        "1: HSET hx f v",
        "1: EXPIRE hx 100 XX",
        "1: EXPIRE hx 100 NX",
        "1: EXPIRE hx 50 GT",
        "1: EXPIRE hx 200 GT",
        "1: EXPIRE hx 150 LT",
        "1: TTL hx",
        "1: PERSIST hx",
        "1: TTL hx",
        "1: PERSIST hx",
        "1: EXPIRE hx -1",
        "1: EXISTS hx",
        "1: SADD sx a",
        "1: PEXPIREAT sx 1",
        "1: SCARD sx",
        // Inside a transaction.
        "1: MULTI",
        "1: HSET hm f v",
        "1: EXPIRE hm 100",
        "1: TTL hm",
        "1: PEXPIRE hm 0",
        "1: HGETALL hm",
        "1: EXEC",
        "1: EXISTS hm",
        // FLUSHALL breaks the watch of a key it deletes, not of a missing or expired one.
        "1: WATCH nothere",
        "2: FLUSHALL",
        "1: MULTI",
        "1: PING",
        "1: EXEC",
        "1: SET w v",
        "1: WATCH w",
        "2: FLUSHALL",
        "1: MULTI",
        "1: PING",
        "1: EXEC",
        "1: SADD we a",
        "1: PEXPIRE we 30",
        "1: SLEEP",
        "1: WATCH we",
        "2: FLUSHALL",
        "1: MULTI",
        "1: PING",
        "1: EXEC",
        // RANDOMKEY: nil without keys, the one key there is, nil once it expired.
        "1: RANDOMKEY",
        "1: RANDOMKEY extra",
        "1: MULTI",
        "1: SET fresh v",
        "1: RANDOMKEY",
        "1: DEL fresh",
        "1: EXEC",
        "1: HSET only f v",
        "1: RANDOMKEY",
        "1: MULTI",
        "1: RANDOMKEY",
        "1: DEL only",
        "1: RANDOMKEY",
        "1: EXEC",
        "1: ZADD only 1 m",
        "1: PEXPIRE only 30",
        "1: SLEEP",
        "1: RANDOMKEY",
        // COMMAND GETKEYS, for the numkeys commands among others.
        "1: COMMAND GETKEYS",
        "1: COMMAND GETKEYS nosuch a",
        "1: COMMAND GETKEYS PING",
        "1: COMMAND GETKEYS GET",
        "1: COMMAND GETKEYS GET k",
        "1: COMMAND GETKEYS MSET a 1 b 2",
        "1: COMMAND GETKEYS LMPOP 2 l1 l2 LEFT",
        "1: COMMAND GETKEYS ZMPOP 1 z MIN COUNT 3",
        "1: COMMAND GETKEYS BLMPOP 0 1 l RIGHT",
        "1: COMMAND GETKEYS SINTERCARD 2 a b",
        "1: COMMAND GETKEYS SINTERSTORE d a b",
        "1: COMMAND GETKEYS LMPOP 0 l LEFT",
        "1: COMMAND GETKEYS SET k v BOGUS",
        "1: COMMAND GETKEYS RENAME a b",
        "1: COMMAND GETKEYS BLPOP a b 0",
        "1: COMMAND GETKEYS EXISTS a b c",
    ];
    let differ = run_script(&redis, &drive, script, Duration::from_millis(60));
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn expiry_keyspace_and_string_commands_answer_as_redis_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let script: &[&str] = &[
        "1: SET s v",
        "1: HSET h f v",
        "1: ZADD z 1 m",
        // SET's expiry options and SETEX / PSETEX.
        "1: SET e1 v EX 100",
        "1: TTL e1",
        "1: SET e1 v2 KEEPTTL",
        "1: TTL e1",
        "1: SET e1 v3",
        "1: TTL e1",
        "1: SET e2 v PXAT 99999999999000",
        "1: PEXPIRETIME e2",
        "1: EXPIRETIME e2",
        "1: SET e3 v EXAT 99999999999",
        "1: EXPIRETIME e3",
        "1: SET e4 v EXAT 1",
        "1: GET e4",
        "1: EXISTS e4",
        "1: SET e5 v EX 0",
        "1: SET e5 v EX -1",
        "1: SET e5 v PX x",
        "1: SET e5 v EX 10 PX 10",
        "1: SET e5 v EX 10 KEEPTTL",
        "1: SET e5 v EX",
        "1: SET e5 v EX 9223372036854775807",
        "1: SET e5 v EX 9223372036854775",
        "1: SET e5 v PX 9223372036854775807",
        "1: SET e5 v PXAT 9223372036854775807",
        "1: PTTL e5",
        "1: SETEX e5 9223372036854775 v",
        "1: PSETEX e5 9223372036854775807 v",
        "1: GETEX e5 PX 9223372036854775807",
        "1: GETEX e5 EX 9223372036854775",
        "1: GETEX e5 PXAT 9223372036854775807",
        "1: PEXPIRETIME e5",
        "1: SETEX e6 100 v",
        "1: TTL e6",
        "1: GET e6",
        "1: SETEX e6 0 v",
        "1: SETEX e6 -5 v",
        "1: SETEX e6 x v",
        "1: SETEX e6 10",
        "1: PSETEX e7 100000 v",
        "1: TTL e7",
        "1: PSETEX e7 0 v",
        "1: SETEX h 100 v",
        "1: TYPE h",
        "1: HSET h f v",
        // EXPIRE family with its conditions.
        "1: EXPIRE missing 10",
        "1: EXPIRE s 100",
        "1: TTL s",
        "1: EXPIRE s 50 NX",
        "1: EXPIRE s 50 XX",
        "1: TTL s",
        "1: EXPIRE s 40 GT",
        "1: EXPIRE s 60 GT",
        "1: TTL s",
        "1: EXPIRE s 70 LT",
        "1: EXPIRE s 30 LT",
        "1: TTL s",
        "1: PERSIST s",
        "1: PERSIST s",
        "1: TTL s",
        "1: EXPIRE s 10 XX",
        "1: EXPIRE s 10 GT",
        "1: EXPIRE s 10 LT",
        "1: TTL s",
        "1: PERSIST s",
        "1: EXPIRE s 10 NX",
        "1: EXPIRE s 10 NX XX",
        "1: EXPIRE s 10 GT LT",
        "1: EXPIRE s 10 NX GT",
        "1: EXPIRE s 10 bogus",
        "1: EXPIRE s x",
        "1: EXPIRE s x bogus",
        "1: EXPIRE s 9223372036854775807",
        "1: PEXPIRE s 9223372036854775807",
        "1: EXPIRE s",
        "1: PEXPIRE s 100000",
        "1: TTL s",
        "1: EXPIREAT s 99999999999",
        "1: EXPIRETIME s",
        "1: PEXPIREAT s 99999999999123",
        "1: PEXPIRETIME s",
        "1: EXPIRETIME s",
        "1: TTL missing",
        "1: PTTL missing",
        "1: EXPIRETIME missing",
        "1: PEXPIRETIME missing",
        "1: TTL h",
        "1: PTTL z",
        "1: PERSIST h",
        "1: PERSIST missing",
        "1: SET gone v",
        "1: EXPIRE gone -1",
        "1: EXISTS gone",
        "1: SET gone v",
        "1: EXPIREAT gone 1",
        "1: GET gone",
        "1: SET gone v",
        "1: PEXPIRE gone 0",
        "1: GET gone",
        // GETEX.
        "1: SET g v",
        "1: GETEX g",
        "1: GETEX g EX 100",
        "1: TTL g",
        "1: GETEX g PERSIST",
        "1: TTL g",
        "1: GETEX g PXAT 99999999999000",
        "1: PEXPIRETIME g",
        "1: GETEX g EXAT 99999999998",
        "1: EXPIRETIME g",
        "1: GETEX g EX 0",
        "1: GETEX g EX -1",
        "1: GETEX g EX 10 PX 10",
        "1: GETEX g EX 10 PERSIST",
        "1: GETEX g PERSIST EX 10",
        "1: GETEX g bogus",
        "1: GETEX g EX",
        "1: GETEX missing EX 10",
        "1: GETEX h",
        "1: GETEX g PXAT 1",
        "1: EXISTS g",
        // Strings.
        "1: SETNX n1 v",
        "1: SETNX n1 w",
        "1: GET n1",
        "1: SETNX h v",
        "1: SETNX n1",
        "1: GETSET n1 new",
        "1: GETSET missing2 v",
        "1: GET missing2",
        "1: GETSET h v",
        "1: SET t1 v EX 100",
        "1: GETSET t1 w",
        "1: TTL t1",
        "1: GETDEL t1",
        "1: GETDEL t1",
        "1: GETDEL h",
        "1: APPEND a1 hello",
        "1: APPEND a1 <empty>",
        "1: APPEND a1 world",
        "1: GET a1",
        "1: STRLEN a1",
        "1: APPEND h x",
        "1: SET a2 v EX 100",
        "1: APPEND a2 w",
        "1: TTL a2",
        "1: APPEND <empty> x",
        "1: GET <empty>",
        "1: STRLEN h",
        "1: STRLEN missing",
        // A hash written over a string already past its deadline (whose record the drive
        // keeps until its sweep): every read sees the hash.
        "1: SET xh v EXAT 1",
        "1: HSET xh f v",
        "1: GETRANGE xh 0 5",
        "1: GET xh",
        "1: STRLEN xh",
        "1: TYPE xh",
        "1: HGETALL xh",
        "1: APPEND xh x",
        "1: ZCARD xh",
        "1: ZSCORE xh m",
        "1: SET xz v EXAT 1",
        "1: ZADD xz 1 m",
        "1: HLEN xz",
        "1: HGET xz f",
        "1: HGETALL xz",
        "1: ZCARD xz",
        "1: GET xz",
        // SETRANGE: padding, overwrite, empty values, bad offsets, the size limit, types.
        "1: SETRANGE sr 5 hello",
        "1: GET sr",
        "1: SETRANGE sr 0 HE",
        "1: SETRANGE sr 8 world",
        "1: GET sr",
        "1: SETRANGE sr 3 <empty>",
        "1: SETRANGE srmissing 5 <empty>",
        "1: EXISTS srmissing",
        "1: SETRANGE sr -1 x",
        "1: SETRANGE sr x y",
        "1: SETRANGE sr 536870911 ab",
        "1: SETRANGE sr 9223372036854775807 ab",
        "1: SETRANGE sr 1",
        "1: SETRANGE h 0 x",
        "1: SETRANGE h -1 x",
        "1: SETRANGE h 0 <empty>",
        "1: SET srt abc EX 100",
        "1: SETRANGE srt 1 B",
        "1: TTL srt",
        "1: GET srt",
        // MSETNX: all or nothing, any type counts as existing.
        "1: MSETNX mn1 1 mn2 2",
        "1: MSETNX mn1 x mn3 3",
        "1: MGET mn1 mn2 mn3",
        "1: MSETNX h 1 mn4 4",
        "1: EXISTS mn4",
        "1: MSETNX mn5 a mn5 b",
        "1: GET mn5",
        "1: MSETNX mn6",
        "1: MSETNX mn6 1 mn7",
        // INCRBYFLOAT (increments exact in binary, so long double and the drive agree).
        "1: INCRBYFLOAT fl 10.5",
        "1: INCRBYFLOAT fl 0.25",
        "1: INCRBYFLOAT fl -20",
        "1: INCRBYFLOAT fl 5.0e3",
        "1: INCRBYFLOAT fl 1.25e-1",
        "1: GET fl",
        "1: INCRBYFLOAT fl x",
        "1: INCRBYFLOAT fl inf",
        "1: INCRBYFLOAT fl nan",
        "1: INCRBYFLOAT fl",
        "1: INCRBYFLOAT h 1",
        "1: INCRBYFLOAT h x",
        "1: INCRBYFLOAT sr 1",
        "1: SET fl2 3 EX 100",
        "1: INCRBYFLOAT fl2 1.5",
        "1: TTL fl2",
        "1: SET fl3 7",
        "1: INCRBYFLOAT fl3 3",
        "1: INCR fl3",
        "1: INCRBYFLOAT fl3 0.5",
        "1: INCR fl3",
        "1: INCRBYFLOAT missingf -0",
        // COPY: strings with their deadline, collections, REPLACE, DB 0, errors.
        "1: SET c1 v EX 100",
        "1: COPY c1 c2",
        "1: GET c2",
        "1: TTL c2",
        "1: COPY c1 c1",
        "1: COPY c1 c2",
        "1: SET c3 other",
        "1: COPY c3 c2 REPLACE",
        "1: GET c2",
        "1: TTL c2",
        "1: COPY missing c9",
        "1: COPY c1 c4 DB 0",
        "1: COPY c1 c4 DB 0 REPLACE",
        "1: COPY c1 c4 DB x",
        "1: COPY c1 c4 DB",
        "1: COPY c1 c4 BOGUS",
        "1: COPY c1 c4 DB 99",
        "1: COPY c1",
        "1: COPY h hc",
        "1: HGETALL hc",
        "1: HSET hc f2 v2",
        "1: HLEN h",
        "1: COPY z zc",
        "1: ZRANGEBYSCORE zc -inf +inf WITHSCORES",
        "1: COPY z hc",
        "1: COPY z hc REPLACE",
        "1: TYPE hc",
        "1: ZRANGEBYSCORE hc -inf +inf WITHSCORES",
        "1: HGETALL hc",
        "1: COPY c1 z REPLACE",
        "1: TYPE z",
        "1: GET z",
        "1: COPY hc z REPLACE",
        "1: TYPE z",
        "1: ZCARD z",
        // Keyspace.
        "1: TYPE s",
        "1: TYPE h",
        "1: TYPE z",
        "1: TYPE missing",
        "1: EXISTS s h z missing s",
        "1: TOUCH s h z missing s",
        "1: UNLINK a1 missing a1",
        "1: SET r1 v EX 100",
        "1: RENAME r1 r2",
        "1: GET r1",
        "1: GET r2",
        "1: TTL r2",
        "1: RENAME r2 r2",
        "1: RENAMENX r2 r2",
        "1: RENAME missing r3",
        "1: RENAMENX missing r3",
        "1: RENAMENX r2 s",
        "1: RENAME r2 s",
        "1: GET s",
        "1: TTL s",
        "1: RENAME h h2",
        "1: HGETALL h2",
        "1: HGET h2 f",
        "1: TYPE h",
        "1: RENAME z s",
        "1: TYPE s",
        "1: ZSCORE s m",
        "1: ZRANGEBYSCORE s -inf +inf WITHSCORES",
        "1: RENAME s h2",
        "1: TYPE h2",
        "1: ZCARD h2",
        "1: RENAME <binary> x",
        "1: SET <binary> bin",
        "1: RENAME <binary> <empty>",
        "1: GET <empty>",
        "1: RENAME",
        "1: HSET hh f1 v1 f2 v2",
        "1: RENAMENX hh h2",
        "1: RENAMENX hh h3",
        "1: HGETALL h3",
        "1: HLEN h3",
        "1: KEYS *",
        "1: KEYS h*",
        "1: KEYS ?2",
        "1: KEYS [a-h]*",
        "1: KEYS nomatch*",
        "1: KEYS",
        "1: DBSIZE",
        "1: FLUSHDB bogus",
        "1: FLUSHDB",
        "1: DBSIZE",
        "1: KEYS *",
        "1: SET after v",
        "1: FLUSHDB ASYNC",
        "1: KEYS *",
    ];
    let differ = run_script(&redis, &drive, script, Duration::from_millis(0));
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// LCS: the string, LEN, IDX with MINMATCHLEN and WITHMATCHLEN, missing and empty keys,
/// wrong types (checked before the options, as Redis does), bad options, inside MULTI; then
/// random strings over a small alphabet (many equally long answers: the drive must pick
/// Redis's), compared with every option.
#[test]
fn lcs_answers_as_redis_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let script: &[&str] = &[
        "1: SET a ohmytext",
        "1: SET b mynewtext",
        "1: LCS a b",
        "1: LCS a b LEN",
        "1: LCS a b IDX",
        "1: LCS a b IDX MINMATCHLEN 4",
        "1: LCS a b IDX MINMATCHLEN 4 WITHMATCHLEN",
        "1: LCS a b IDX WITHMATCHLEN MINMATCHLEN -3",
        "1: LCS a b withmatchlen",
        "1: LCS a b MINMATCHLEN 2",
        "1: LCS a b LEN IDX",
        "1: LCS a b IDX LEN",
        "1: LCS a b MINMATCHLEN",
        "1: LCS a b MINMATCHLEN x",
        "1: LCS a b BOGUS",
        "1: LCS a missing",
        "1: LCS missing a IDX",
        "1: LCS missing other LEN",
        "1: SET e <empty>",
        "1: LCS e a",
        "1: LCS a a",
        "1: LCS a a IDX WITHMATCHLEN",
        "1: HSET h f v",
        "1: LCS a h",
        "1: LCS h a BOGUS",
        "1: LCS a",
        "1: SET n 1234567890",
        "1: SET m 9876543210",
        "1: LCS n m IDX WITHMATCHLEN",
        "1: MULTI",
        "1: SET a abcbdab",
        "1: SET b bdcaba",
        "1: LCS a b",
        "1: LCS a b IDX WITHMATCHLEN",
        "1: EXEC",
        "1: LCS a b LEN",
    ];
    let differ = run_script(&redis, &drive, script, Duration::from_millis(0));
    assert!(differ.is_empty(), "{}", differ.join("\n"));

    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(17);
    let (mut r, mut d) = (redis.conn(), drive.conn());
    let mut differ = Vec::new();
    for round in 0..150 {
        let word = |rng: &mut rand::rngs::SmallRng| -> String {
            let n = rng.gen_range(0..40);
            (0..n)
                .map(|_| ['a', 'b', 'c'][rng.gen_range(0..3)])
                .collect()
        };
        let (x, y) = (word(&mut rng), word(&mut rng));
        for (k, v) in [("x", &x), ("y", &y)] {
            let set = vec!["SET".to_string(), k.to_string(), v.clone()];
            let _ = both(&mut r, &mut d, &set, &[]);
        }
        let opts: &[&str] = match round % 4 {
            0 => &[],
            1 => &["LEN"],
            2 => &["IDX"],
            _ => &["IDX", "MINMATCHLEN", "2", "WITHMATCHLEN"],
        };
        let mut cmd = vec!["LCS".to_string(), "x".into(), "y".into()];
        cmd.extend(opts.iter().map(|o| o.to_string()));
        let (want, got) = both(&mut r, &mut d, &cmd, &[]);
        if want != got {
            differ.push(format!(
                "LCS {x:?} {y:?} {opts:?}:\n  redis-server: {want}\n  drive:        {got}"
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// OBJECT against redis-server 7.0 where 7.0 and 7.2 agree: strings (int, embstr, raw, the
/// shared integers' REFCOUNT), hashes and sorted sets on both sides of their listpack
/// limits, sets of integers (intset), missing keys, FREQ's error, HELP and the argument
/// errors. (7.2 keeps small lists and small sets of strings as listpacks where 7.0 has
/// quicklist and hashtable: `object_encodings_follow_redis_7_2` checks those on the drive.)
#[test]
fn object_answers_as_redis_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let long = "x".repeat(45);
    let at_limit = "y".repeat(44);
    let wide = "w".repeat(65);
    let mut script: Vec<String> = [
        "SET i 123",
        "SET big 99999",
        "SET neg -5",
        "SET zero 0123",
        "SET minus -0",
        "SET max 9223372036854775807",
        "SET over 12345678901234567890",
        "SET s hello",
        "SET e <empty>",
        "HSET h f v",
        "ZADD z 1 m",
        "SADD ints 1 2 3 -7",
        "OBJECT ENCODING i",
        "OBJECT REFCOUNT i",
        "OBJECT ENCODING big",
        "OBJECT REFCOUNT big",
        "OBJECT ENCODING neg",
        "OBJECT ENCODING zero",
        "OBJECT ENCODING minus",
        "OBJECT ENCODING max",
        "OBJECT ENCODING over",
        "OBJECT ENCODING s",
        "OBJECT REFCOUNT s",
        "OBJECT ENCODING e",
        "OBJECT ENCODING h",
        "OBJECT ENCODING z",
        "OBJECT ENCODING ints",
        "OBJECT REFCOUNT h",
        "OBJECT ENCODING missing",
        "OBJECT REFCOUNT missing",
        "OBJECT IDLETIME missing",
        "OBJECT FREQ missing",
        "OBJECT FREQ s",
        // (`OBJECT IDLETIME s` is left out: redis-server answers 1 when its one-second LRU
        // clock ticks between the SET and the OBJECT, a flake once in a dozen runs.)
        "OBJECT HELP",
        "OBJECT help extra",
        "OBJECT",
        "OBJECT ENCODING",
        "OBJECT ENCODING s extra",
        "OBJECT BOGUS s",
        "object encoding S",
        "INCR i",
        "OBJECT ENCODING i",
        "OBJECT REFCOUNT i",
        "SET i 10000",
        "OBJECT REFCOUNT i",
        "MULTI",
        "SET t 42",
        "OBJECT ENCODING t",
        "EXEC",
    ]
    .iter()
    .map(|l| format!("1: {l}"))
    .collect();
    script.extend([
        format!("1: SET long {long}"),
        "1: OBJECT ENCODING long".into(),
        format!("1: SET edge {at_limit}"),
        "1: OBJECT ENCODING edge".into(),
        format!("1: HSET hw f {wide}"),
        "1: OBJECT ENCODING hw".into(),
        format!("1: HSET hf {wide} v"),
        "1: OBJECT ENCODING hf".into(),
        format!("1: ZADD zw 1 {wide}"),
        "1: OBJECT ENCODING zw".into(),
        "1: SADD ints2 1 x".into(),
        "1: SADD ints3 0123".into(),
    ]);
    // Sorted sets: 128 members still compact, 129 not.
    for n in [128, 129] {
        let mut zadd = format!("1: ZADD z{n}");
        for i in 0..n {
            zadd.push_str(&format!(" {i} m{i}"));
        }
        script.extend([zadd, format!("1: OBJECT ENCODING z{n}")]);
    }
    // Hashes: 512 fields still compact, 513 not; sets: 512 integers an intset, 513 not (a
    // hashtable in 7.0 and 7.2 alike).
    for n in [512, 513] {
        let mut hset = format!("1: HSET h{n}");
        let mut sadd = format!("1: SADD si{n}");
        for i in 0..n {
            hset.push_str(&format!(" f{i} v"));
            sadd.push_str(&format!(" {i}"));
        }
        script.extend([
            hset,
            format!("1: OBJECT ENCODING h{n}"),
            sadd,
            format!("1: OBJECT ENCODING si{n}"),
        ]);
    }
    let script: Vec<&str> = script.iter().map(String::as_str).collect();
    let differ = run_script(&redis, &drive, &script, Duration::from_millis(0));
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The encodings where Redis 7.2 (which the drive answers as) differs from the 7.0 used as
/// the reference above: small lists and small sets of strings are listpacks.
#[test]
fn object_encodings_follow_redis_7_2() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(&dir.path().join("data"), &[]);
    let mut c = drive.conn();
    let enc = |c: &mut redis::Connection, k: &str| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(k)
            .query(c)
            .unwrap()
    };
    let _: () = redis::cmd("RPUSH")
        .arg("l")
        .arg("a")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(enc(&mut c, "l"), "listpack");
    // About 8 KiB of items: past the listpack's size limit.
    let item = "i".repeat(100);
    for _ in 0..80 {
        let _: () = redis::cmd("RPUSH")
            .arg("big")
            .arg(&item)
            .query(&mut c)
            .unwrap();
    }
    assert_eq!(enc(&mut c, "big"), "quicklist");
    let _: () = redis::cmd("SADD")
        .arg("s")
        .arg("a")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert_eq!(enc(&mut c, "s"), "listpack");
    let _: () = redis::cmd("SADD")
        .arg("sw")
        .arg("w".repeat(65))
        .query(&mut c)
        .unwrap();
    assert_eq!(enc(&mut c, "sw"), "hashtable");
}

/// A transaction is one atomic batch: a concurrent MGET never sees half of one, and after a
/// kill -9 every acknowledged transaction is there whole. WATCH-based optimistic increments
/// from two clients lose no update.
#[test]
fn transactions_are_atomic_durable_and_watch_loses_no_update() {
    const MOVES: i64 = 200;
    const INCREMENTS: i64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let drive = Drive::start(&data, &[]);
    let mut c = drive.conn();
    let _: () = redis::cmd("MSET")
        .arg("x")
        .arg(1000)
        .arg("y")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let client = drive.client();
    let mover = std::thread::spawn(move || {
        let mut c = client.get_connection().unwrap();
        for _ in 0..MOVES {
            let _: (i64, i64) = redis::pipe()
                .atomic()
                .cmd("DECRBY")
                .arg("x")
                .arg(1)
                .cmd("INCRBY")
                .arg("y")
                .arg(1)
                .query(&mut c)
                .unwrap();
        }
    });
    let mut incrementers = Vec::new();
    for _ in 0..2 {
        let client = drive.client();
        incrementers.push(std::thread::spawn(move || {
            let mut c = client.get_connection().unwrap();
            common::watch_increments(&mut c, "counter", INCREMENTS);
        }));
    }
    while !mover.is_finished() {
        let (x, y): (i64, i64) = redis::cmd("MGET").arg("x").arg("y").query(&mut c).unwrap();
        assert_eq!(x + y, 1000, "a transaction seen half-applied: x={x} y={y}");
    }
    mover.join().unwrap();
    for t in incrementers {
        t.join().unwrap();
    }
    let counter: i64 = redis::cmd("GET").arg("counter").query(&mut c).unwrap();
    assert_eq!(counter, 2 * INCREMENTS);
    drive.kill9();
    let drive = Drive::start(&data, &[]);
    let mut c = drive.conn();
    let (x, y): (i64, i64) = redis::cmd("MGET").arg("x").arg("y").query(&mut c).unwrap();
    assert_eq!((x, y), (1000 - MOVES, MOVES));
}
