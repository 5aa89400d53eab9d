//! Crash test: the drive under pipelined SET load from four clients (each sends 16 SETs
//! before it reads their replies) is killed with SIGKILL at a random moment and restarted on
//! the same data; after every restart every SET whose OK reached a client reads back with its
//! exact bytes, and a SET that was not acknowledged is either absent or whole. A quarter of
//! the keys get a deadline with the SET (`EX`), a quarter one from a PEXPIRE after it, and a
//! quarter one that a PERSIST takes away again: every acknowledged key keeps exactly the
//! deadline it was acknowledged with (deadlines live in keytable entries and retime records). Ten rounds on
//! the simulated device and ten on a `file:` device; after every kill `lightstore fsck` must
//! find the device clean. `CRASH_SIGKILL_ROUNDS` overrides the rounds per device.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Drive;
use rand::{Rng, SeedableRng};

const CLIENTS: u64 = 4;
const PIPELINE: u64 = 16;
/// Kills per device unless `CRASH_SIGKILL_ROUNDS` says otherwise.
const ROUNDS_PER_BACKEND: u64 = 10;
/// The drive's capacity here: every round's keys stay live, so ten rounds at
/// [`ROUND_BYTES`] each must fit with room to spare (at `TEST_CAPACITY`, 1 GiB, a fast run
/// filled the drive by round 7 and its SETs were refused as "the drive is full").
const CRASH_CAPACITY: &str = "4GiB";
/// Value bytes the clients of one round send at most (together): a round on a fast machine
/// stops there, and the kill then finds it idle.
const ROUND_BYTES: u64 = 256 << 20;

fn rounds() -> u64 {
    std::env::var("CRASH_SIGKILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS_PER_BACKEND)
}

fn value_len(seq: u64) -> usize {
    [100usize, 1000, 8192, 20_000][(seq % 4) as usize]
}

fn value(round: u64, client: u64, seq: u64) -> Vec<u8> {
    let len = value_len(seq);
    let tag = format!("{round}/{client}/{seq}|");
    // The tag over and over (`repeat` copies in doubling runs, not a byte at a time).
    let mut v = tag.as_bytes().repeat(len.div_ceil(tag.len()));
    v.truncate(len);
    v
}

fn key(round: u64, client: u64, seq: u64) -> String {
    format!("r{round}:c{client}:{seq}")
}

/// Seconds far ahead: a deadline that does not pass during the test.
const FAR: u64 = 10_000_000;

/// Whether key `seq` ends with a deadline (`SET EX`, or `SET` then `PEXPIRE`); the others
/// end without one (plain `SET`, or `SET EX` then `PERSIST`).
fn has_deadline(seq: u64) -> bool {
    matches!(seq % 4, 1 | 2)
}

/// Adds key `seq`'s commands to `pipe`: a SET, maybe with EX, maybe followed by PEXPIRE or
/// PERSIST.
fn add_commands(pipe: &mut redis::Pipeline, round: u64, client: u64, seq: u64) {
    let k = key(round, client, seq);
    let set = pipe.cmd("SET").arg(&k).arg(value(round, client, seq));
    if seq % 4 == 1 || seq % 4 == 3 {
        set.arg("EX").arg(FAR);
    }
    match seq % 4 {
        2 => {
            pipe.cmd("PEXPIRE").arg(&k).arg(FAR * 1000);
        }
        3 => {
            pipe.cmd("PERSIST").arg(&k);
        }
        _ => {}
    }
}

/// Keys acknowledged and keys sent without an acknowledgement, per client.
#[derive(Default)]
struct Ledger {
    acked: Vec<(u64, u64, u64)>,
    unacked: Vec<(u64, u64, u64)>,
}

fn load(
    d: &Drive,
    round: u64,
    stop: &Arc<AtomicBool>,
    ledger: &Arc<Mutex<Ledger>>,
) -> Vec<std::thread::JoinHandle<()>> {
    let sent_bytes = Arc::new(AtomicU64::new(0));
    (0..CLIENTS)
        .map(|client| {
            let url = format!("redis://{}/", d.addr);
            let stop = stop.clone();
            let sent_bytes = sent_bytes.clone();
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                let Ok(mut con) = redis::Client::open(url).unwrap().get_connection() else {
                    return;
                };
                let mut seq = 0;
                while !stop.load(Ordering::Relaxed)
                    && sent_bytes.load(Ordering::Relaxed) < ROUND_BYTES
                {
                    let mut pipe = redis::pipe();
                    for s in seq..seq + PIPELINE {
                        add_commands(&mut pipe, round, client, s);
                    }
                    let sent: Vec<(u64, u64, u64)> =
                        (seq..seq + PIPELINE).map(|s| (round, client, s)).collect();
                    let bytes: usize = sent.iter().map(|&(_, _, s)| value_len(s)).sum();
                    sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                    seq += PIPELINE;
                    // SET answers OK, PEXPIRE and PERSIST 1.
                    let ok = |v: &redis::Value| {
                        matches!(v, redis::Value::Okay | redis::Value::Int(1))
                            || matches!(v, redis::Value::SimpleString(s) if s == "OK")
                    };
                    match pipe.query::<Vec<redis::Value>>(&mut con) {
                        Ok(replies) if replies.iter().all(ok) => {
                            ledger.lock().unwrap().acked.extend(sent);
                        }
                        _ => {
                            ledger.lock().unwrap().unacked.extend(sent);
                            return;
                        }
                    }
                }
            })
        })
        .collect()
}

/// Every acknowledged SET reads back exactly; an unacknowledged one is absent or whole. The
/// GETs go in pipelines of 256.
fn verify(d: &Drive, l: &Ledger, when: &str) {
    let mut con = d.conn();
    let all: Vec<(bool, (u64, u64, u64))> = l
        .acked
        .iter()
        .map(|&k| (true, k))
        .chain(l.unacked.iter().map(|&k| (false, k)))
        .collect();
    for chunk in all.chunks(256) {
        let mut pipe = redis::pipe();
        for &(_, (r, c, s)) in chunk {
            pipe.cmd("GET").arg(key(r, c, s));
            pipe.cmd("PTTL").arg(key(r, c, s));
        }
        let got: Vec<(Option<Vec<u8>>, i64)> = pipe.query(&mut con).unwrap();
        for (&(acked, (r, c, s)), (got, pttl)) in chunk.iter().zip(got) {
            if acked {
                assert_eq!(
                    got.as_deref(),
                    Some(&value(r, c, s)[..]),
                    "{when}: acknowledged {} lost or changed",
                    key(r, c, s)
                );
                // A deadline FAR seconds ahead, or none, as acknowledged.
                if has_deadline(s) {
                    assert!(
                        pttl > (FAR as i64 - 3_600) * 1000,
                        "{when}: {} lost its deadline (PTTL {pttl})",
                        key(r, c, s)
                    );
                } else {
                    assert_eq!(pttl, -1, "{when}: {} has a deadline", key(r, c, s));
                }
            } else if let Some(v) = got {
                assert_eq!(
                    v,
                    value(r, c, s),
                    "{when}: unacknowledged {} is torn",
                    key(r, c, s)
                );
            }
        }
    }
}

fn run_rounds(extra: &[&str], data: &std::path::Path, seed: u64) {
    let started = std::time::Instant::now();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let rounds = rounds();
    let drive_args = [extra, &["--capacity", CRASH_CAPACITY]].concat();
    for round in 0..rounds {
        let d = Drive::start(data, &drive_args);
        // Everything acknowledged in earlier rounds is still there.
        verify(&d, &ledger.lock().unwrap(), &format!("round {round}"));
        let acked_before = ledger.lock().unwrap().acked.len();
        let stop = Arc::new(AtomicBool::new(false));
        let clients = load(&d, round, &stop, &ledger);
        // The kill comes a random moment after the round's first acknowledgement (a slow
        // disk's first flushes can take longer than the window alone).
        let started = std::time::Instant::now();
        while ledger.lock().unwrap().acked.len() <= acked_before
            && started.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(150..700)));
        d.kill9();
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            c.join().unwrap();
        }
        // The device as the kill left it passes the offline check (which changes nothing).
        let f = common::fsck(data, extra);
        assert_eq!(
            f.code,
            Some(0),
            "round {round}: fsck after SIGKILL:\n{}\n{}",
            f.stdout,
            f.stderr
        );
        assert!(f.stdout.contains("fsck: clean"), "{}", f.stdout);
        assert!(
            ledger.lock().unwrap().acked.len() > acked_before,
            "no SET was acknowledged in round {round}"
        );
    }
    // Final check after the last kill.
    let d = Drive::start(data, &drive_args);
    let l = ledger.lock().unwrap();
    verify(&d, &l, "after the last kill");
    // Every client's pipelines were acknowledged (four clients really wrote at once).
    for client in 0..CLIENTS {
        assert!(
            l.acked.iter().any(|&(_, c, _)| c == client),
            "client {client} had no SET acknowledged"
        );
    }
    eprintln!(
        "{} acknowledged SETs ({} unacknowledged) verified across {rounds} kills in {:.1}s",
        l.acked.len(),
        l.unacked.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn acknowledged_sets_survive_sigkill_on_the_simulated_device() {
    let dir = tempfile::tempdir().unwrap();
    run_rounds(&[], &dir.path().join("data"), 1);
}

#[test]
fn acknowledged_sets_survive_sigkill_on_a_file_device() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("drive.img");
    let spec = format!("file:{}", img.display());
    run_rounds(&["--device", &spec], dir.path(), 2);
}
