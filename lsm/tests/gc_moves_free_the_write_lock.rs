//! Garbage collection's moves are on the device with the engine's write lock free: while the
//! pages of a move batch are held back at the device, a client's `try_submit_write` and
//! `stats` return (with the moves written under the lock, as before, both waited for the
//! held pages), a read returns its value, and once the pages are let go every write is there.
//!
//! The device wrapper (`common::HoldDevice`) holds writes back *before* they reach the
//! simulator (from the first raw page of a move batch on, every later write to that segment
//! waits its turn, so each segment is still written in order), with tags of its own, so no
//! completion is ever delivered under a tag the simulator has since reused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, Oldest, WriteOp};

use common::{assert_fsck_clean, small_geometry, HoldDevice};

/// First bytes of every value the test writes: a page starting with them, written by the
/// maintenance thread, is a raw page of a garbage-collection move.
const MARK: &[u8; 8] = b"gc-move!";
const KEYS: u32 = 1024;

fn value(k: u32, round: u32) -> Vec<u8> {
    let mut v = vec![(k ^ round) as u8; 8192];
    v[..8].copy_from_slice(MARK);
    v[8..16].copy_from_slice(&(u64::from(k) << 32 | u64::from(round)).to_le_bytes());
    v
}

fn key(k: u32) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

/// Runs `f` on a thread of its own and reports whether it returned within `limit`.
fn returns_within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (bool, std::thread::JoinHandle<T>) {
    let h = std::thread::spawn(f);
    let since = Instant::now();
    while !h.is_finished() && since.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(5));
    }
    (h.is_finished(), h)
}

#[test]
fn clients_go_on_while_garbage_collection_moves_are_on_the_device() {
    let g = small_geometry();
    let backend = Backend::Ram(RamStore::new());
    let ftl = Arc::new(Ftl::format(&backend, DeviceConfig::new(g)).unwrap());
    // Holds the first raw page of a move batch (written by the maintenance thread) and
    // every later write to its segment.
    let hold = Arc::new(HoldDevice::new(
        ftl.clone(),
        true,
        Box::new(|page| {
            page[..8] == MARK[..] && std::thread::current().name() == Some("lsm-maint")
        }),
    ));
    let cfg = EngineConfig {
        memtable_bytes: 64 << 10,
        // The oldest segments first: they hold the half of the keys never overwritten, so
        // every reclaim moves values (the least-live policy would take segments of only
        // overwritten values and move nothing).
        gc_policy: Arc::new(Oldest),
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(hold.clone() as Arc<dyn AppendDevice>, cfg.clone()).unwrap());
    let write_round = |db: &Engine, round: u32, keys: std::ops::Range<u32>| {
        let vals: Vec<(Vec<u8>, Vec<u8>)> = keys.map(|k| (key(k), value(k, round))).collect();
        for chunk in vals.chunks(16) {
            let ops: Vec<WriteOp<'_>> = chunk.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
            db.write(&ops).unwrap();
        }
    };
    write_round(&db, 0, 0..KEYS);
    db.settle().unwrap();

    // Overwrite half the keys, round after round, until a move batch is held (the other
    // half's values are live in every victim, so every reclaim moves some).
    hold.armed.store(true, SeqCst);
    let last_round = Arc::new(AtomicU32::new(0));
    let writer = {
        let (db, last_round, hold) = (db.clone(), last_round.clone(), hold.clone());
        std::thread::spawn(move || {
            for round in 1..=40u32 {
                let vals: Vec<(Vec<u8>, Vec<u8>)> =
                    (0..KEYS / 2).map(|k| (key(k), value(k, round))).collect();
                for chunk in vals.chunks(16) {
                    let ops: Vec<WriteOp<'_>> =
                        chunk.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
                    db.write(&ops).unwrap();
                }
                last_round.store(round, SeqCst);
                if !hold.armed.load(SeqCst) && round >= 4 {
                    return round;
                }
            }
            40
        })
    };
    let since = Instant::now();
    while !hold.seen.load(SeqCst) {
        assert!(
            since.elapsed() < Duration::from_secs(60) && !writer.is_finished(),
            "garbage collection never moved a value: {:#?}",
            db.stats()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // Moves are held at the device. The write lock must be free.
    let (stats_back, stats) = {
        let db = db.clone();
        returns_within(Duration::from_secs(3), move || db.stats())
    };
    let (submit_back, submit) = {
        let db = db.clone();
        returns_within(Duration::from_secs(3), move || {
            let (k, v) = (key(KEYS - 1), value(KEYS - 1, 99));
            // Finished only after the release: it is applied after the moves before it.
            db.try_submit_write(&[WriteOp::Put(&k, &v)]).unwrap()
        })
    };
    let (read_back, read) = {
        let db = db.clone();
        returns_within(Duration::from_secs(3), move || {
            db.get(&key(KEYS - 2)).unwrap()
        })
    };
    hold.release(false);
    let stats = stats.join().unwrap();
    let submitted = submit.join().unwrap();
    let read = read.join().unwrap();
    let rounds = writer.join().unwrap();
    assert!(
        stats_back,
        "stats waited for garbage collection's moves on the device"
    );
    assert!(
        submit_back,
        "a client's try_submit_write waited for garbage collection's moves on the device"
    );
    assert!(read_back, "a read waited for garbage collection's moves");
    assert_eq!(read.as_deref(), Some(&value(KEYS - 2, 0)[..]));
    assert!(stats.gc_steps > 0, "{stats:#?}");
    let admitted = submitted.is_some();
    if let Some(p) = submitted {
        db.finish_write(p).unwrap();
    }

    db.settle().unwrap();
    let last = last_round.load(SeqCst);
    assert_eq!(last, rounds);
    let expect = |k: u32| {
        if k == KEYS - 1 && admitted {
            value(k, 99)
        } else if k < KEYS / 2 {
            value(k, last)
        } else {
            value(k, 0)
        }
    };
    for k in 0..KEYS {
        assert_eq!(db.get(&key(k)).unwrap(), Some(expect(k)), "key {k}");
    }
    let s = db.stats();
    assert!(s.gc_segments > 0, "{s:#?}");
    drop(db);
    // Everything survives a reopen, and the device checks clean.
    let ftl = Arc::new(Ftl::open(&backend, DeviceConfig::new(g)).unwrap());
    let db = Engine::open(ftl as Arc<dyn AppendDevice>, cfg.clone()).unwrap();
    for k in 0..KEYS {
        assert_eq!(
            db.get(&key(k)).unwrap(),
            Some(expect(k)),
            "key {k} after reopen"
        );
    }
    db.close().unwrap();
    assert_fsck_clean(&backend, DeviceConfig::new(g), cfg);
}
