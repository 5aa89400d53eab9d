//! Blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN, BZPOPMAX, BLMPOP, BZMPOP, and
//! LMPOP/ZMPOP), proved by difference: each scenario runs with several raw connections against redis-server and against the drive,
//! and the two transcripts (every reply's bytes, in the order the scenario read them) must
//! be equal. A scenario waits until the server reports its clients blocked (INFO
//! `blocked_clients`) before it pushes, so both servers see the same interleaving.
//!
//! CLIENT UNBLOCK (TIMEOUT and ERROR) is one of the scenarios.
//!
//! Beyond the transcripts: a client that disconnects while blocked loses no item, a blocked
//! client's pipelined commands wait for its reply, timeouts fire in time, and a blocked
//! client does not hold anyone else up. redis-server must be installed (`cargo xtask test`
//! installs it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::io::{ErrorKind, Read as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{ask, read_frame, send, Drive, RedisServer};

/// A connection with a generous read timeout (a blocked reply is awaited, not polled).
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn words(cmd: &str) -> Vec<&[u8]> {
    cmd.split(' ').map(str::as_bytes).collect()
}

/// Several commands as one write (RESP arrays of bulk strings), for a pipeline.
fn pipelined(cmds: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for cmd in cmds {
        let w = words(cmd);
        out.extend_from_slice(format!("*{}\r\n", w.len()).as_bytes());
        for x in w {
            out.extend_from_slice(format!("${}\r\n", x.len()).as_bytes());
            out.extend_from_slice(x);
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// Waits until the server counts `n` blocked clients (INFO clients).
fn wait_blocked(probe: &mut TcpStream, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = String::from_utf8_lossy(&ask(probe, "INFO clients")).into_owned();
        let now: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO clients has blocked_clients");
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "blocked_clients stayed {now}, wanted {n}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// True when nothing arrives on `s` for `wait`.
fn silent(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 1];
    let quiet = match s.peek(&mut b) {
        Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        Ok(_) => false,
    };
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    quiet
}

/// What one scenario read, step by step.
#[derive(Default)]
struct Transcript(Vec<(String, String)>);

impl Transcript {
    fn note(&mut self, step: &str, reply: &[u8]) {
        self.0.push((
            step.to_string(),
            String::from_utf8_lossy(reply).into_owned(),
        ));
    }

    /// Sends `cmd` on `s` and notes its reply.
    fn ask(&mut self, s: &mut TcpStream, cmd: &str) {
        let r = ask(s, cmd);
        self.note(cmd, &r);
    }

    /// Reads the reply of a command sent earlier on `s` (a blocked one).
    fn reply(&mut self, s: &mut TcpStream, step: &str) {
        let r = read_frame(s);
        self.note(step, &r);
    }
}

/// Every scenario against one server; the transcripts in order.
fn scenarios(addr: SocketAddr) -> Vec<(&'static str, Transcript)> {
    let mut out = Vec::new();
    let mut probe = connect(addr);
    ask(&mut probe, "FLUSHALL");

    // Arguments and types: answered at once, never blocking.
    let mut t = Transcript::default();
    let mut a = connect(addr);
    for cmd in [
        "BLPOP",
        "BLPOP k",
        "BLPOP k notafloat",
        "BLPOP k -1",
        // (`inf` and `1e400`: redis-server 7.0 casts them to a negative number and says
        // "timeout is negative"; the drive answers 7.2's "timeout is out of range", pinned
        // by kvproto's parser test.)
        "BLPOP k nan",
        "BLMOVE s d UP LEFT 0",
        "BLMOVE s d LEFT RIGHT x",
        "BLMOVE s d LEFT",
        "BRPOPLPUSH s d -5",
        "SET str v",
        "BLPOP str 0",
        "BLPOP empty1 str 0",
        "RPUSH l1 a b c",
        "BLPOP empty1 l1 str 0",
        "BRPOP l1 0",
        "BLMOVE str d LEFT LEFT 0",
        "BLMOVE l1 str LEFT LEFT 0",
        "BLMOVE l1 l2 LEFT RIGHT 0",
        "BRPOPLPUSH l2 l1 0",
        "LRANGE l1 0 -1",
        "LRANGE l2 0 -1",
        "EXISTS l2",
        "MULTI",
        "BLPOP nothing 0",
        "BLMOVE nothing d LEFT LEFT 0",
        "RPUSH l3 x",
        "BLPOP nothing l3 0",
        "EXEC",
    ] {
        t.ask(&mut a, cmd);
    }
    out.push(("arguments, types and MULTI", t));

    // A push wakes the client blocked first; the pusher's reply counts the item.
    let mut t = Transcript::default();
    let (mut a, mut b, mut c) = (connect(addr), connect(addr), connect(addr));
    send(&mut a, &words("BLPOP q1 q2 0"));
    wait_blocked(&mut probe, 1);
    send(&mut b, &words("BRPOP q2 0"));
    wait_blocked(&mut probe, 2);
    t.ask(&mut c, "RPUSH q2 x y z");
    t.reply(&mut a, "a: BLPOP q1 q2 0");
    t.reply(&mut b, "b: BRPOP q2 0");
    t.ask(&mut c, "LRANGE q2 0 -1");
    // Both served by one push of two: in the order they blocked.
    send(&mut a, &words("BRPOP q3 0"));
    wait_blocked(&mut probe, 1);
    send(&mut b, &words("BLPOP q3 0"));
    wait_blocked(&mut probe, 2);
    t.ask(&mut c, "LPUSH q3 1 2");
    t.reply(&mut a, "a: BRPOP q3 0");
    t.reply(&mut b, "b: BLPOP q3 0");
    t.ask(&mut c, "EXISTS q3");
    out.push(("push wakes waiters in order", t));

    // BLMOVE served by a push, and a chain: the move fills a list another client waits on.
    let mut t = Transcript::default();
    let (mut a, mut b, mut c) = (connect(addr), connect(addr), connect(addr));
    send(&mut a, &words("BLPOP chain-dst 0"));
    wait_blocked(&mut probe, 1);
    send(&mut b, &words("BLMOVE chain-src chain-dst RIGHT LEFT 0"));
    wait_blocked(&mut probe, 2);
    t.ask(&mut c, "RPUSH chain-src v1 v2");
    t.reply(&mut b, "b: BLMOVE");
    t.reply(&mut a, "a: BLPOP chain-dst");
    t.ask(&mut c, "LRANGE chain-src 0 -1");
    t.ask(&mut c, "EXISTS chain-dst");
    out.push(("blmove and a chain", t));

    // A key that becomes another type wakes nobody; a list made by another command does.
    let mut t = Transcript::default();
    let (mut a, mut c) = (connect(addr), connect(addr));
    send(&mut a, &words("BLPOP morph 0"));
    wait_blocked(&mut probe, 1);
    t.ask(&mut c, "SET morph string");
    t.ask(&mut c, "DEL morph");
    t.ask(&mut c, "RPUSH other item");
    t.ask(&mut c, "RENAME other morph");
    t.reply(&mut a, "a: BLPOP morph");
    t.ask(&mut c, "EXISTS morph");
    out.push(("other types and renames", t));

    // Sorted sets: BZPOPMIN/BZPOPMAX answer at once, wake on ZADD in the order they
    // blocked, and a list at the key wakes no one.
    let mut t = Transcript::default();
    let (mut a, mut b, mut c) = (connect(addr), connect(addr), connect(addr));
    for cmd in [
        "BZPOPMIN",
        "BZPOPMIN z x",
        "BZPOPMAX z -1",
        "ZADD z1 1 one 2 two 3 three",
        "BZPOPMIN nothing z1 0",
        "BZPOPMAX z1 0",
        "RPUSH zl item",
        "BZPOPMIN zl 0",
        "BZPOPMIN missing zl z1 0",
        "BLPOP z1 0",
        "MULTI",
        "BZPOPMAX nothing 0",
        "BZPOPMIN z1 0",
        "EXEC",
        "EXISTS z1",
    ] {
        t.ask(&mut c, cmd);
    }
    send(&mut a, &words("BZPOPMAX zq 0"));
    wait_blocked(&mut probe, 1);
    send(&mut b, &words("BZPOPMIN zq 0"));
    wait_blocked(&mut probe, 2);
    t.ask(&mut c, "RPUSH zq not-a-zset");
    t.ask(&mut c, "DEL zq");
    t.ask(&mut c, "ZADD zq 1.5 a 2.5 b 3.5 c");
    t.reply(&mut a, "a: BZPOPMAX zq");
    t.reply(&mut b, "b: BZPOPMIN zq");
    t.ask(&mut c, "ZRANGE zq 0 -1 WITHSCORES");
    // Waiters of both types on one key: a push serves the list waiter behind the sorted-set
    // one, which waits on for a ZADD.
    send(&mut a, &words("BZPOPMIN mixed 0"));
    wait_blocked(&mut probe, 1);
    send(&mut b, &words("BLPOP mixed 0"));
    wait_blocked(&mut probe, 2);
    t.ask(&mut c, "RPUSH mixed item");
    t.reply(&mut b, "b: BLPOP mixed");
    wait_blocked(&mut probe, 1);
    t.ask(&mut c, "ZADD mixed 7 member");
    t.reply(&mut a, "a: BZPOPMIN mixed");
    t.ask(&mut c, "HELLO 3");
    t.0.pop();
    t.ask(&mut c, "BZPOPMIN zq 0");
    t.ask(&mut c, "BZPOPMIN zq 0.05");
    out.push(("sorted sets", t));

    // LMPOP and ZMPOP, and their blocking forms BLMPOP and BZMPOP (Redis 7): arguments,
    // types, counts, MULTI, wake-ups and timeouts.
    let mut t = Transcript::default();
    let (mut a, mut b, mut c) = (connect(addr), connect(addr), connect(addr));
    for cmd in [
        "LMPOP",
        "LMPOP 0 k LEFT",
        "LMPOP 2 k LEFT",
        "LMPOP 1 k UP",
        "LMPOP 1 k LEFT COUNT 0",
        "LMPOP 1 k LEFT COUNT",
        "LMPOP 1 k LEFT COUNT 1 COUNT 1",
        "LMPOP 1 nothing LEFT",
        "RPUSH ml a b c d",
        "SET mstr v",
        "LMPOP 2 nothing ml RIGHT COUNT 2",
        "LMPOP 2 mstr ml LEFT",
        "LMPOP 3 nothing ml mstr LEFT COUNT 100",
        "EXISTS ml",
        "BLMPOP x 1 k LEFT",
        "BLMPOP 0 1 k UP",
        "BLMPOP -1 1 k LEFT",
        "ZADD mz 1 a 2 b 3 c",
        "ZMPOP 1 mz MAX COUNT 2",
        "ZMPOP 1 mz LEFT",
        "ZMPOP 2 nothing mz MIN COUNT 5",
        "ZMPOP 1 nothing MIN",
        "BZMPOP 0 1 mstr MIN",
        "MULTI",
        "BLMPOP 0 1 nothing LEFT",
        "BZMPOP 0 1 nothing MAX",
        "EXEC",
    ] {
        t.ask(&mut c, cmd);
    }
    send(&mut a, &words("BLMPOP 0 2 mq1 mq2 LEFT COUNT 5"));
    wait_blocked(&mut probe, 1);
    send(&mut b, &words("BZMPOP 0 1 mzq MAX COUNT 2"));
    wait_blocked(&mut probe, 2);
    t.ask(&mut c, "RPUSH mq2 x y");
    t.reply(&mut a, "a: BLMPOP");
    t.ask(&mut c, "ZADD mzq 1 a 2 b 3 c");
    t.reply(&mut b, "b: BZMPOP");
    t.ask(&mut c, "ZRANGE mzq 0 -1 WITHSCORES");
    t.ask(&mut c, "HELLO 3");
    t.0.pop();
    t.ask(&mut c, "ZMPOP 1 mzq MIN");
    t.ask(&mut c, "BZMPOP 0.05 1 none MIN");
    t.ask(&mut c, "BLMPOP 0.05 1 none LEFT");
    out.push(("multi-key pops", t));

    // Inside a transaction: the pops run after EXEC, in the same step.
    let mut t = Transcript::default();
    let (mut a, mut c) = (connect(addr), connect(addr));
    send(&mut a, &words("BRPOP txq 0"));
    wait_blocked(&mut probe, 1);
    t.ask(&mut c, "MULTI");
    t.ask(&mut c, "RPUSH txq one two");
    t.ask(&mut c, "LLEN txq");
    t.ask(&mut c, "EXEC");
    t.reply(&mut a, "a: BRPOP txq");
    t.ask(&mut c, "LRANGE txq 0 -1");
    out.push(("transaction", t));

    // Timeouts: nil of each shape, in RESP2 and RESP3.
    let mut t = Transcript::default();
    let mut a = connect(addr);
    t.ask(&mut a, "BLPOP none 0.05");
    t.ask(&mut a, "BLMOVE none d LEFT LEFT 0.05");
    // (HELLO's reply names the server: not compared.)
    assert!(!ask(&mut a, "HELLO 3").is_empty());
    t.ask(&mut a, "BRPOP none 0.05");
    t.ask(&mut a, "BRPOPLPUSH none d 0.05");
    out.push(("timeouts", t));

    // A blocked client's pipelined commands wait for it.
    let mut t = Transcript::default();
    let (mut a, mut c) = (connect(addr), connect(addr));
    let pipeline = pipelined(&["BLPOP pipe 0", "LLEN pipe", "PING"]);
    std::io::Write::write_all(&mut a, &pipeline).unwrap();
    wait_blocked(&mut probe, 1);
    assert!(
        silent(&mut a, Duration::from_millis(200)),
        "a blocked client's later commands must wait"
    );
    t.ask(&mut c, "RPUSH pipe p1 p2");
    t.reply(&mut a, "a: BLPOP pipe");
    t.reply(&mut a, "a: LLEN pipe");
    t.reply(&mut a, "a: PING");
    out.push(("pipelined after a block", t));

    // CLIENT UNBLOCK: nil (TIMEOUT, the default) or -UNBLOCKED (ERROR) for a blocked
    // client, of every blocking shape; 0 for one that is not blocked; argument errors (the
    // reason is checked before the id).
    let mut t = Transcript::default();
    let (mut a, mut c) = (connect(addr), connect(addr));
    let id = String::from_utf8_lossy(&ask(&mut a, "CLIENT ID"))
        .trim_start_matches(':')
        .trim()
        .to_string();
    let unblock = |t: &mut Transcript, c: &mut TcpStream, how: &str| {
        let cmd = format!("CLIENT UNBLOCK {id}{how}");
        let r = ask(c, &cmd);
        t.note(&format!("CLIENT UNBLOCK <a>{how}"), &r);
    };
    for (block, how) in [
        ("BLPOP ub 0", ""),
        ("BZPOPMIN ubz 0", " ERROR"),
        ("BLMOVE ub d LEFT LEFT 0", " TIMEOUT"),
        ("BLMPOP 0 2 ub ub2 RIGHT COUNT 2", " error"),
        ("BRPOP ub 30", " timeout"),
    ] {
        send(&mut a, &words(block));
        wait_blocked(&mut probe, 1);
        unblock(&mut t, &mut c, how);
        t.reply(&mut a, &format!("a: {block}"));
        wait_blocked(&mut probe, 0);
    }
    unblock(&mut t, &mut c, "");
    // An unblocked client is served as before; a push does not reach it any more.
    t.ask(&mut c, "RPUSH ub x");
    t.ask(&mut a, "LPOP ub");
    for cmd in [
        "CLIENT UNBLOCK 999999",
        "CLIENT UNBLOCK -1",
        "CLIENT UNBLOCK x",
        "CLIENT UNBLOCK 1 BOGUS",
        "CLIENT UNBLOCK x BOGUS",
        "CLIENT UNBLOCK",
        "CLIENT UNBLOCK 1 ERROR extra",
    ] {
        t.ask(&mut c, cmd);
    }
    // In RESP3 the nil is RESP3's.
    assert!(!ask(&mut a, "HELLO 3").is_empty());
    send(&mut a, &words("BLPOP ub 0"));
    wait_blocked(&mut probe, 1);
    unblock(&mut t, &mut c, "");
    t.reply(&mut a, "a: BLPOP ub (RESP3)");
    out.push(("client unblock", t));

    drop(probe);
    out
}

#[test]
fn blocking_pops_match_redis_server() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(redis_dir.path(), &[]);
    let want = scenarios(SocketAddr::from(([127, 0, 0, 1], redis.port)));
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let got = scenarios(drive.addr);
    assert_eq!(want.len(), got.len());
    for ((name, w), (_, g)) in want.iter().zip(&got) {
        for (i, (ws, wr)) in w.0.iter().enumerate() {
            let Some((gs, gr)) = g.0.get(i) else {
                panic!("{name}: the drive's transcript ends before step {ws}");
            };
            assert_eq!(ws, gs);
            assert_eq!(wr, gr, "{name}: step `{ws}`: redis-server vs the drive");
        }
        assert_eq!(w.0.len(), g.0.len(), "{name}: transcript lengths");
    }
}

#[test]
fn a_client_that_leaves_while_blocked_loses_no_item() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let mut probe = connect(drive.addr);
    // Closed outright, and half-closed (the peer's end of stream): both must be cancelled.
    let mut gone = connect(drive.addr);
    send(&mut gone, &words("BLPOP jobs 0"));
    let mut half = connect(drive.addr);
    send(&mut half, &words("BRPOP jobs 0"));
    wait_blocked(&mut probe, 2);
    let list = String::from_utf8_lossy(&ask(&mut probe, "CLIENT LIST")).into_owned();
    assert_eq!(list.matches("flags=b ").count(), 2, "{list}");
    drop(gone);
    half.shutdown(std::net::Shutdown::Write).unwrap();
    wait_blocked(&mut probe, 0);
    assert_eq!(ask(&mut probe, "RPUSH jobs j1"), b":1\r\n");
    assert_eq!(ask(&mut probe, "LRANGE jobs 0 -1"), b"*1\r\n$2\r\nj1\r\n");
    // The half-closed client got nil, not the item, and then the drive closed it (end of
    // stream, not the 20 s read timeout).
    let mut rest = Vec::new();
    assert!(
        half.read_to_end(&mut rest).is_ok(),
        "the drive closes a client that went while blocked"
    );
    assert_eq!(rest, b"*-1\r\n", "{}", String::from_utf8_lossy(&rest));
    // Half-closed right after a push and a pop that has an item: the replies it is owed
    // still come, and the item is either in its reply or still in the list, never lost.
    let mut quick = connect(drive.addr);
    let both = pipelined(&["RPUSH jobs3 j3", "BLPOP jobs3 0"]);
    std::io::Write::write_all(&mut quick, &both).unwrap();
    quick.shutdown(std::net::Shutdown::Write).unwrap();
    let mut replies = Vec::new();
    assert!(quick.read_to_end(&mut replies).is_ok());
    let replies = String::from_utf8_lossy(&replies).into_owned();
    let left = ask(&mut probe, "LLEN jobs3");
    match replies.as_str() {
        ":1\r\n*2\r\n$5\r\njobs3\r\n$2\r\nj3\r\n" => assert_eq!(left, b":0\r\n"),
        ":1\r\n*-1\r\n" => assert_eq!(left, b":1\r\n"),
        other => panic!("unexpected replies {other:?}"),
    }
    // A live waiter still gets the next one.
    let mut live = connect(drive.addr);
    send(&mut live, &words("BLPOP jobs2 0"));
    wait_blocked(&mut probe, 1);
    assert_eq!(ask(&mut probe, "RPUSH jobs2 j2"), b":1\r\n");
    assert_eq!(read_frame(&mut live), b"*2\r\n$5\r\njobs2\r\n$2\r\nj2\r\n");
}

#[test]
fn blocked_clients_hold_up_no_one_and_time_out_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let mut probe = connect(drive.addr);
    let mut waiters: Vec<TcpStream> = (0..50)
        .map(|i| {
            let mut s = connect(drive.addr);
            send(&mut s, &words(&format!("BLPOP idle{i} 0")));
            s
        })
        .collect();
    wait_blocked(&mut probe, 50);
    // Writes and reads of other clients go on.
    let started = Instant::now();
    for i in 0..200 {
        assert_eq!(ask(&mut probe, &format!("SET k{i} v")), b"+OK\r\n");
        assert_eq!(ask(&mut probe, &format!("GET k{i}")), b"$1\r\nv\r\n");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // A timeout is answered about when it is due, whatever else waits.
    let mut t = connect(drive.addr);
    let started = Instant::now();
    assert_eq!(ask(&mut t, "BLPOP none 0.3"), b"*-1\r\n");
    let took = started.elapsed();
    // Deadlines are whole milliseconds (as Redis's): the drive's clock may round the
    // start down by up to one.
    assert!(
        took >= Duration::from_millis(299) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // The wait is not run time: no SLOWLOG entry (threshold 10 ms), yet a counted call.
    let slow = String::from_utf8_lossy(&ask(&mut probe, "SLOWLOG GET 128")).to_lowercase();
    assert!(!slow.contains("blpop"), "{slow}");
    let stats = String::from_utf8_lossy(&ask(&mut probe, "INFO commandstats")).into_owned();
    assert!(stats.contains("cmdstat_blpop:calls="), "{stats}");
    // Every waiter is served by one push each.
    for (i, w) in waiters.iter_mut().enumerate() {
        assert_eq!(ask(&mut probe, &format!("RPUSH idle{i} x")), b":1\r\n");
        let want = format!(
            "*2\r\n${}\r\nidle{i}\r\n$1\r\nx\r\n",
            format!("idle{i}").len()
        );
        assert_eq!(read_frame(w), want.as_bytes());
    }
    wait_blocked(&mut probe, 0);
}

#[test]
fn producers_and_blocked_consumers_see_every_item_exactly_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    const PRODUCERS: usize = 4;
    const PER_PRODUCER: usize = 300;
    const CONSUMERS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let addr = drive.addr;
    let total = PRODUCERS * PER_PRODUCER;
    let taken = Arc::new(AtomicUsize::new(0));
    let got = Arc::new(Mutex::new(Vec::<String>::new()));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|i| {
            let (taken, got) = (taken.clone(), got.clone());
            std::thread::spawn(move || {
                let mut s = connect(addr);
                while taken.load(Ordering::SeqCst) < total {
                    // Short timeouts: consumers time out and block again all the time.
                    // Half of them move the item through a list of their own first.
                    let item = if i % 2 == 0 {
                        let r = ask(&mut s, "BLPOP q0 q1 q2 0.02");
                        if r == b"*-1\r\n" {
                            continue;
                        }
                        let text = String::from_utf8_lossy(&r).into_owned();
                        text.lines().nth(4).unwrap().to_string()
                    } else {
                        let q = format!("q{}", i % 3);
                        let mine = format!("mine{i}");
                        let r = ask(&mut s, &format!("BLMOVE {q} {mine} LEFT RIGHT 0.02"));
                        if r == b"*-1\r\n" {
                            continue;
                        }
                        let moved = String::from_utf8_lossy(&r)
                            .lines()
                            .nth(1)
                            .unwrap()
                            .to_string();
                        let back = ask(&mut s, &format!("RPOP {mine}"));
                        assert_eq!(
                            String::from_utf8_lossy(&back).lines().nth(1).unwrap(),
                            moved
                        );
                        moved
                    };
                    got.lock().unwrap().push(item);
                    taken.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            std::thread::spawn(move || {
                let mut s = connect(addr);
                let mut n = 0;
                while n < PER_PRODUCER {
                    let batch = (1 + (n + p) % 3).min(PER_PRODUCER - n);
                    let items: Vec<String> = (n..n + batch).map(|k| format!("p{p}-{k}")).collect();
                    let q = format!("q{}", (n / 3 + p) % 3);
                    let r = ask(&mut s, &format!("RPUSH {q} {}", items.join(" ")));
                    assert_eq!(r[0], b':', "{}", String::from_utf8_lossy(&r));
                    n += batch;
                }
            })
        })
        .collect();
    for t in producers {
        t.join().unwrap();
    }
    for t in consumers {
        t.join().unwrap();
    }
    let mut got = got.lock().unwrap().clone();
    got.sort();
    let mut want: Vec<String> = (0..PRODUCERS)
        .flat_map(|p| (0..PER_PRODUCER).map(move |k| format!("p{p}-{k}")))
        .collect();
    want.sort();
    assert_eq!(got.len(), want.len(), "items lost or taken twice");
    assert_eq!(got, want);
    let mut probe = connect(addr);
    assert_eq!(ask(&mut probe, "DBSIZE"), b":0\r\n");
}
