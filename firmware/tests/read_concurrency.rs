//! Reading commands run at the device's queue depth: a command whose page is held at the
//! device does not hold up other clients. The drive runs on a timing model whose page reads
//! take 400 ms on the wall clock; one client's HGETALL waits on such a read while another
//! client's PING, its GET of a value in the value cache and its GET of a small value held in
//! its keytable entry come back at once (before the change that made every reading command
//! asynchronous, the HGETALL held the engine thread and the GET waited behind it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{info_field, Drive};
use redis::Commands;

/// Page reads of 400 ms; programs, erases and transfers of microseconds.
const SLOW_READS: &str = "custom:400000000,20000,20000,1000,1000";
const READ: Duration = Duration::from_millis(400);
/// A value past `entry-value-max` (64 B): the value cache serves it once read.
const HOT: &str = "a cached value, longer than the values the keytable entries hold themselves";

#[test]
fn a_read_held_at_the_device_does_not_stall_other_clients() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let fields: Vec<(String, String)> = (0..10)
        .map(|i| (format!("field{i}"), format!("value-{i}-{}", "x".repeat(90))))
        .collect();
    {
        let d = Drive::start(&data, &[]);
        let mut c = d.conn();
        let _: () = c.hset_multiple("user:1", &fields).unwrap();
        let _: () = c.set("hot", HOT).unwrap();
        let _: () = c.set("tiny", "held").unwrap();
        assert!(d.shutdown());
    }
    // Restarted on slow reads: the value cache starts empty.
    let d = Drive::start(&data, &["--timing", SLOW_READS]);
    let mut a = d.conn();
    let mut b = d.conn();
    // The first GET reads the page from the device and caches it.
    assert!(HOT.len() > 64);
    assert_eq!(b.get::<_, String>("hot").unwrap(), HOT);
    let reads_before = info_field(&mut b, "ftl", "page_reads");

    // Client a's HGETALL goes to the device (400 ms) ...
    let slow = std::thread::spawn(move || {
        let t = Instant::now();
        let all: HashMap<String, String> = a.hgetall("user:1").unwrap();
        (all, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    // ... while client b is answered at once.
    let t = Instant::now();
    let pong: String = redis::cmd("PING").query(&mut b).unwrap();
    let ping_took = t.elapsed();
    let t = Instant::now();
    let hot: String = b.get("hot").unwrap();
    let get_took = t.elapsed();
    // Never read before: its entry holds it.
    let t = Instant::now();
    let tiny: String = b.get("tiny").unwrap();
    let tiny_took = t.elapsed();
    let slow_still_waiting = !slow.is_finished();
    let (all, hgetall_took) = slow.join().unwrap();

    assert_eq!(pong, "PONG");
    assert_eq!(hot, HOT);
    assert_eq!(tiny, "held");
    let want: HashMap<String, String> = fields.into_iter().collect();
    assert_eq!(all, want);
    assert!(
        hgetall_took >= READ - Duration::from_millis(50),
        "the HGETALL did not wait on the device ({hgetall_took:?}): the test proves nothing"
    );
    assert!(
        info_field(&mut b, "ftl", "page_reads") > reads_before,
        "the HGETALL read nothing from the device"
    );
    assert!(
        slow_still_waiting,
        "the HGETALL finished before the other client's commands ({hgetall_took:?})"
    );
    assert!(
        ping_took < READ / 2 && get_took < READ / 2 && tiny_took < READ / 2,
        "another client waited behind a device read: PING {ping_took:?}, GET {get_took:?}, \
         GET of a held value {tiny_took:?}"
    );
    assert!(info_field(&mut b, "valuecache", "value_cache_hits") >= 1);
}

/// Reads DRAM answers whole (value pages in the value cache) are served on the network thread,
/// and never overtake the same connection's earlier writes.
#[test]
fn hot_reads_are_answered_inline_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = Drive::start(&dir.path().join("data"), &[]);
    let mut c = d.conn();
    let _: () = c.set("k", "v1").unwrap();
    let before = info_field(&mut c, "stats", "reads_answered_inline");
    for _ in 0..10 {
        assert_eq!(c.get::<_, String>("k").unwrap(), "v1");
    }
    let inline = info_field(&mut c, "stats", "reads_answered_inline") - before;
    assert!(
        inline >= 10,
        "only {inline} of 10 hot GETs were answered inline"
    );

    // A pipeline mixing writes and reads of the same keys: each read sees the writes before
    // it (a read waits while the connection has a write in flight).
    let mut p = redis::pipe();
    for i in 0..50 {
        p.set("k", format!("v{i}"))
            .get("k")
            .hset("h", "f", i)
            .hget("h", "f")
            .hgetall("h")
            .del("h")
            .hget("h", "f")
            .exists("h");
    }
    let replies: Vec<redis::Value> = p.query(&mut c).unwrap();
    for (i, r) in replies.chunks(8).enumerate() {
        let s = |v: &redis::Value| redis::from_redis_value::<Option<String>>(v).unwrap();
        assert_eq!(s(&r[1]), Some(format!("v{i}")), "GET after SET, round {i}");
        assert_eq!(s(&r[3]), Some(i.to_string()), "HGET after HSET, round {i}");
        let all: HashMap<String, String> = redis::from_redis_value(&r[4]).unwrap();
        assert_eq!(all.get("f"), Some(&i.to_string()));
        assert_eq!(s(&r[6]), None, "HGET after DEL, round {i}");
        assert_eq!(redis::from_redis_value::<i64>(&r[7]).unwrap(), 0);
    }
    let before = info_field(&mut c, "stats", "reads_answered_inline");
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg("k")
        .arg("nope")
        .arg("h")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![Some("v49".to_string()), None, None]);
    assert!(info_field(&mut c, "stats", "reads_answered_inline") > before);
    // Wrong types answer the same inline as from the engine thread.
    let e: redis::RedisResult<String> = redis::cmd("HGET").arg("k").arg("f").query(&mut c);
    assert!(e.unwrap_err().to_string().contains("WRONGTYPE"));
    assert_eq!(c.get::<_, Option<String>>("nope").unwrap(), None);
}

/// A pipeline of reads never sees the store go back in time: a read the network thread
/// could answer at once waits for an earlier read of its connection that went to the engine
/// thread (which takes its view only when it gets to it). Client b holds the engine thread
/// on a slow device read (LRANGE reads its values in place); client a pipelines an LRANGE of
/// another list (to the engine thread, behind b's) and an HGET DRAM answers; client c then
/// writes the hash and then the list. Once a's LRANGE sees c's second write, its HGET, sent
/// after the LRANGE, must see c's first: answering the HGET at once, while the LRANGE
/// waited, gave the LRANGE's new item beside the HGET's old value.
#[test]
fn a_pipeline_of_reads_never_sees_the_store_go_back_in_time() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let old_x = format!("old-{}", "x".repeat(100));
    let new_x = format!("new-{}", "x".repeat(100));
    {
        let d = Drive::start(&data, &[]);
        let mut c = d.conn();
        let _: () = c.rpush("x", &old_x).unwrap();
        let _: () = c.hset("h", "f", "1").unwrap();
        let _: () = c
            .rpush("list", format!("item-{}", "y".repeat(100)))
            .unwrap();
        assert!(d.shutdown());
    }
    // Restarted on slow reads: the value cache starts empty; `h`'s short value is held in
    // its keytable entry, so DRAM answers its HGET.
    let d = Drive::start(&data, &["--timing", SLOW_READS]);
    let mut b = d.conn();
    let mut c = d.conn();
    let mut a = d.raw();
    let hold = std::thread::spawn(move || {
        let items: Vec<String> = b.lrange("list", 0, -1).unwrap();
        items
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!hold.is_finished(), "the LRANGE did not wait on the device");
    a.write_all(
        b"*4\r\n$6\r\nLRANGE\r\n$1\r\nx\r\n$1\r\n0\r\n$2\r\n-1\r\n\
          *3\r\n$4\r\nHGET\r\n$1\r\nh\r\n$1\r\nf\r\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let _: () = c.hset("h", "f", "2").unwrap();
    let _: () = c.rpush("x", &new_x).unwrap();
    assert_eq!(hold.join().unwrap().len(), 1);
    let mut got = Vec::new();
    let want_end = b"\r\n$1\r\n";
    while !(got.ends_with(b"\r\n") && got.windows(want_end.len()).any(|w| w == want_end)) {
        let mut buf = [0u8; 512];
        let n = a.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_string();
    let (lrange, hget) = text
        .split_once("\r\n$1\r\n")
        .expect("two replies: the list's items, then the one-byte field value");
    assert!(
        lrange.ends_with(&new_x),
        "the LRANGE, resolved after c's writes, sees the new item: {lrange:?}"
    );
    assert_eq!(
        hget, "2\r\n",
        "the HGET, sent after the LRANGE, saw the hash before c's write, which came before \
         the write the LRANGE saw"
    );
}

/// Cold reads started on the network thread, from many clients at once, each pipelining
/// writes and reads of its own hashes and strings: with no value cache and values too long
/// to be held in their keytable entries, every read that finds a value goes to the device
/// (started on `ls-net`, a pipeline's GETs as one batch, or on `ls-engine` when the read
/// window is full or a job of the connection is unanswered). Every reply must match the
/// client's own model, in order.
#[test]
fn cold_reads_from_many_pipelining_clients_match_a_model() {
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 30;
    const HASHES: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let d = Drive::start(&dir.path().join("data"), &["--value-cache-size", "0"]);
    let page_reads_before = info_field(&mut d.conn(), "ftl", "page_reads");
    let workers: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let mut c = d.conn();
            std::thread::spawn(move || {
                let mut model: Vec<HashMap<String, String>> = vec![HashMap::new(); HASHES];
                let mut strings: Vec<Option<String>> = vec![None; HASHES];
                let key = |h: usize| format!("client{t}:hash{h}");
                let skey = |h: usize| format!("client{t}:string{h}");
                let value = |r: usize, h: usize, f: usize| {
                    format!("r{r}-h{h}-f{f}-{}", "v".repeat(80 + (r * 7 + f) % 50))
                };
                for r in 0..ROUNDS {
                    // Writes of this round, then a pipeline of reads of every hash.
                    let mut w = redis::pipe();
                    for (h, m) in model.iter_mut().enumerate() {
                        let f = (r + h) % 6;
                        if (r + h) % 11 == 5 {
                            w.del(key(h)).ignore();
                            m.clear();
                        } else {
                            w.hset(key(h), format!("f{f}"), value(r, h, f)).ignore();
                            m.insert(format!("f{f}"), value(r, h, f));
                        }
                        if (r + h) % 7 == 3 {
                            w.del(skey(h)).ignore();
                            strings[h] = None;
                        } else if (r + h) % 3 == 0 {
                            w.set(skey(h), value(r, h, 9)).ignore();
                            strings[h] = Some(value(r, h, 9));
                        }
                    }
                    let () = w.query(&mut c).unwrap();
                    // A run of GETs (one batch on `ls-net`), then each hash's reads with a
                    // GET among them.
                    let mut p = redis::pipe();
                    for h in 0..HASHES {
                        p.get(skey(h));
                    }
                    let got: Vec<Option<String>> = p.query(&mut c).unwrap();
                    assert_eq!(got, strings, "client {t} round {r} GETs");
                    let mut p = redis::pipe();
                    for h in 0..HASHES {
                        p.get(skey(h)).get(skey((h + 1) % HASHES));
                    }
                    let got: Vec<Option<String>> = p.query(&mut c).unwrap();
                    let want: Vec<Option<String>> = (0..HASHES)
                        .flat_map(|h| [strings[h].clone(), strings[(h + 1) % HASHES].clone()])
                        .collect();
                    assert_eq!(got, want, "client {t} round {r} GET pairs");
                    let mut p = redis::pipe();
                    for h in 0..HASHES {
                        p.hgetall(key(h))
                            .hget(key(h), "f1")
                            .hget(key(h), "f3")
                            .cmd("HMGET")
                            .arg(key(h))
                            .arg("f0")
                            .arg("f2")
                            .arg("f4")
                            .arg("f5")
                            .hlen(key(h));
                    }
                    let replies: Vec<redis::Value> = p.query(&mut c).unwrap();
                    for (h, r5) in replies.chunks(5).enumerate() {
                        let m = &model[h];
                        let all: HashMap<String, String> = redis::from_redis_value(&r5[0]).unwrap();
                        assert_eq!(&all, m, "client {t} round {r} HGETALL {}", key(h));
                        for (i, f) in ["f1", "f3"].iter().enumerate() {
                            let got: Option<String> = redis::from_redis_value(&r5[1 + i]).unwrap();
                            assert_eq!(got.as_ref(), m.get(*f), "client {t} round {r} HGET {f}");
                        }
                        let got: Vec<Option<String>> = redis::from_redis_value(&r5[3]).unwrap();
                        let want: Vec<Option<String>> = ["f0", "f2", "f4", "f5"]
                            .iter()
                            .map(|f| m.get(*f).cloned())
                            .collect();
                        assert_eq!(got, want, "client {t} round {r} HMGET");
                        let n: usize = redis::from_redis_value(&r5[4]).unwrap();
                        assert_eq!(n, m.len(), "client {t} round {r} HLEN");
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let mut c = d.conn();
    assert!(
        info_field(&mut c, "ftl", "page_reads") > page_reads_before + 1000,
        "the reads did not go to the device: the test proves nothing"
    );
    assert!(
        info_field(&mut c, "stats", "reads_started_inline") > 1000,
        "the cold reads were not started on the network thread"
    );
}

/// Cold GETs and MGETs start their page reads on the network thread (no hand-off to the
/// engine thread): a GET from a client that waits for each reply alone, the GETs and MGETs
/// of a pipeline together as one batch, hot ones among them included; a pipeline mixing hot
/// and cold GETs with other reads answers each in order.
#[test]
fn cold_gets_start_on_the_network_thread_alone_or_as_a_pipelines_batch() {
    use std::io::{Read, Write};
    const KEYS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let key = |i: usize| format!("cold:{i}");
    // Past `entry-value-max`, so a read needs the value's page.
    let value = |i: usize| format!("{i}-{}", "v".repeat(200));
    {
        let d = Drive::start(&data, &[]);
        let mut c = d.conn();
        for i in 0..KEYS {
            let () = c.set(key(i), value(i)).unwrap();
        }
        let () = c.hset("h", "f", "held").unwrap();
        assert!(d.shutdown());
    }
    // Restarted without a value cache: every GET reads its page from the device.
    let d = Drive::start(&data, &["--value-cache-size", "0"]);
    let mut c = d.conn();
    let started = |c: &mut redis::Connection| info_field(c, "stats", "reads_started_inline");
    let page_reads = |c: &mut redis::Connection| info_field(c, "ftl", "page_reads");
    let own_queue = |c: &mut redis::Connection| info_field(c, "stats", "pages_read_on_net_queue");
    let (started0, reads0, own0) = (started(&mut c), page_reads(&mut c), own_queue(&mut c));
    for i in 0..KEYS {
        assert_eq!(c.get::<_, String>(key(i)).unwrap(), value(i));
    }
    let (started1, reads1) = (started(&mut c), page_reads(&mut c));
    assert!(
        reads1 >= reads0 + KEYS as u64,
        "the GETs did not read the device"
    );
    assert_eq!(
        started1 - started0,
        KEYS as u64,
        "a lone cold GET was not started on the network thread"
    );
    // On this file device the network thread has a device read queue of its own: the
    // pages came back there, not through the engine's poller.
    assert_eq!(
        own_queue(&mut c) - own0,
        KEYS as u64,
        "the cold GETs' pages did not come back on the network thread's own queue"
    );
    let mut p = redis::pipe();
    for i in 0..KEYS {
        p.get(key(i));
    }
    let got: Vec<String> = p.query(&mut c).unwrap();
    assert_eq!(got, (0..KEYS).map(value).collect::<Vec<_>>());
    assert!(page_reads(&mut c) >= reads1 + KEYS as u64);
    assert_eq!(
        started(&mut c) - started1,
        KEYS as u64,
        "a pipeline's cold GETs were not started on the network thread"
    );
    // A pipeline longer than a batch takes (64 keys), and an MGET longer than one: split
    // into batches, or sent to the engine thread, every reply in order.
    let mut p = redis::pipe();
    for i in 0..150 {
        p.get(key(i % KEYS));
    }
    let got: Vec<String> = p.query(&mut c).unwrap();
    assert_eq!(got, (0..150).map(|i| value(i % KEYS)).collect::<Vec<_>>());
    let mut mget = redis::cmd("MGET");
    for i in 0..100 {
        mget.arg(key(i % KEYS));
    }
    let got: Vec<String> = mget.query(&mut c).unwrap();
    assert_eq!(got, (0..100).map(|i| value(i % KEYS)).collect::<Vec<_>>());
    // A cold MGET starts on the network thread too (one request, one batch).
    let started2 = started(&mut c);
    let got: Vec<String> = redis::cmd("MGET")
        .arg(key(5))
        .arg(key(6))
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![value(5), value(6)]);
    assert_eq!(
        started(&mut c) - started2,
        1,
        "a cold MGET was not started on the network thread"
    );
    // Hot and cold GETs, a missing key, a held value, an MGET and a wrong type, in order.
    let () = c.set("hot", "short").unwrap();
    let bulk = |v: &str| format!("${}\r\n{v}\r\n", v.len());
    let requests: Vec<Vec<String>> = [
        vec!["GET", "hot"],
        vec!["GET", &key(0)],
        vec!["GET", "hot"],
        vec!["GET", "missing"],
        vec!["GET", &key(1)],
        vec!["HGET", "h", "f"],
        vec!["GET", &key(2)],
        vec!["MGET", &key(3), "hot"],
        vec!["GET", "h"],
        vec!["GET", &key(4)],
    ]
    .iter()
    .map(|r| r.iter().map(|a| (*a).to_string()).collect())
    .collect();
    let want = [
        bulk("short"),
        bulk(&value(0)),
        bulk("short"),
        "$-1\r\n".to_string(),
        bulk(&value(1)),
        bulk("held"),
        bulk(&value(2)),
        format!("*2\r\n{}{}", bulk(&value(3)), bulk("short")),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n".to_string(),
        bulk(&value(4)),
    ]
    .concat();
    let mut raw = d.raw();
    let mut out = String::new();
    for r in &requests {
        out.push_str(&format!("*{}\r\n", r.len()));
        for a in r {
            out.push_str(&bulk(a));
        }
    }
    raw.write_all(out.as_bytes()).unwrap();
    let mut got = Vec::new();
    while got.len() < want.len() {
        let mut buf = [0u8; 4096];
        let n = raw.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "connection closed after {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(String::from_utf8_lossy(&got), want);
}
