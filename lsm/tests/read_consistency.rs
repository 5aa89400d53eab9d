//! Many writers, many readers and maintenance (flushes, compactions, garbage collection) at
//! once, checked against what the writers had acknowledged: every read returns a state that
//! was the latest acknowledged one at some instant during the read, or one being written
//! then (never an older one), whole (never torn), and a batch is seen all or nothing. A
//! deleted key never comes back.
//!
//! Each *pair* of keys belongs to one writer, which writes both keys in one batch with the
//! same version `n` (every fifth version deletes both). Before a write it publishes
//! `started = n`, after the engine acknowledged it `acked = n`. A reader loads `acked`
//! (`lo`), reads, then loads `started` (`hi`): the state it read must be a version in
//! `lo..=hi`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;

use hwftl_sim::{
    AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore, Release, TimingModel,
};
use lsm::{Engine, EngineConfig, WriteOp};

const WRITERS: u32 = 4;
const READERS: u32 = 3;
const PAIRS: u32 = 32;

fn is_delete(version: u32) -> bool {
    version % 5 == 0
}

fn key(pair: u32, side: u8) -> Vec<u8> {
    format!("pair{pair:04}-{}", side as char).into_bytes()
}

/// A value that names its key and version in its first and last bytes; sizes vary so some
/// are packed, some take a raw page and some span two.
fn value(pair: u32, side: u8, version: u32) -> Vec<u8> {
    let len = [60, 700, 8192, 9000][((pair + version) % 4) as usize];
    let mut v = vec![side; len];
    v[..4].copy_from_slice(&pair.to_le_bytes());
    v[4..8].copy_from_slice(&version.to_le_bytes());
    let tail = v.len() - 4;
    v[tail..].copy_from_slice(&(pair ^ version ^ u32::from(side)).to_le_bytes());
    v
}

/// The version a value holds, checking it is whole and of the right key.
fn version_of(pair: u32, side: u8, v: &[u8]) -> u32 {
    let version = u32::from_le_bytes(v[4..8].try_into().unwrap());
    assert_eq!(
        v,
        &value(pair, side, version)[..],
        "torn or foreign value for pair {pair}"
    );
    version
}

struct Pairs {
    started: Vec<AtomicU32>,
    acked: Vec<AtomicU32>,
}

impl Pairs {
    /// Checks a state read between loading `lo` and `hi` for `pair`: `Some(n)` a version,
    /// `None` the keys absent.
    fn check(&self, pair: u32, lo: u32, hi: u32, state: Option<u32>, what: &str) {
        match state {
            Some(n) => assert!(
                lo <= n && n <= hi && !is_delete(n),
                "{what}: pair {pair} read version {n}, acknowledged {lo}, started {hi}"
            ),
            None => assert!(
                (lo..=hi).any(is_delete),
                "{what}: pair {pair} read as absent, acknowledged {lo}, started {hi}"
            ),
        }
    }
}

/// When a batch is acknowledged.
#[derive(Clone, Copy)]
enum Ack {
    /// Durable: its pages complete, then a device flush.
    Durable,
    /// Its pages complete (a power-protected device cache).
    PagesComplete,
    /// In the memtable, before its pages land (`ack_from_dram`): reads of pages not yet on
    /// the device come from the landing buffer.
    Dram,
}

fn engine(release: Release, ack: Ack) -> Arc<Engine> {
    let g = Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 48,
        pages_per_block: 8,
        spare_blocks_per_chip: 2,
    };
    let mut dc = DeviceConfig::new(g);
    if release == Release::WallClock {
        // Every command takes the paper card's time: reads are in flight while writes,
        // flushes and garbage collection go on.
        dc.timing = TimingModel::PaperCard;
        dc.release = release;
    }
    let dev: Arc<dyn AppendDevice> =
        Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), dc).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 4096,
        l0_runs: 2,
        l1_bytes: 8192,
        keytable_bytes: 1024,
        level_ratio: 2,
        gc_window_pages: 4,
        flush_writes: matches!(ack, Ack::Durable),
        ack_from_dram: matches!(ack, Ack::Dram),
        ..EngineConfig::default()
    };
    Arc::new(Engine::open(dev, cfg).unwrap())
}

fn run(release: Release, batches_per_writer: u32, ack: Ack) {
    let db = engine(release, ack);
    let pairs = Arc::new(Pairs {
        started: (0..PAIRS).map(|_| AtomicU32::new(1)).collect(),
        acked: (0..PAIRS).map(|_| AtomicU32::new(1)).collect(),
    });
    for p in 0..PAIRS {
        let (a, b) = (key(p, b'a'), key(p, b'b'));
        let (va, vb) = (value(p, b'a', 1), value(p, b'b', 1));
        db.write(&[WriteOp::Put(&a, &va), WriteOp::Put(&b, &vb)])
            .unwrap();
    }
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (db, pairs) = (db.clone(), pairs.clone());
            std::thread::spawn(move || {
                let mine: Vec<u32> = (0..PAIRS).filter(|p| p % WRITERS == w).collect();
                for i in 0..batches_per_writer {
                    let p = mine[(i as usize * 7 + w as usize) % mine.len()];
                    let n = pairs.started[p as usize].load(SeqCst) + 1;
                    pairs.started[p as usize].store(n, SeqCst);
                    let (a, b) = (key(p, b'a'), key(p, b'b'));
                    let (va, vb) = (value(p, b'a', n), value(p, b'b', n));
                    let ops = if is_delete(n) {
                        vec![WriteOp::Delete(&a), WriteOp::Delete(&b)]
                    } else {
                        vec![WriteOp::Put(&a, &va), WriteOp::Put(&b, &vb)]
                    };
                    db.write(&ops).unwrap();
                    pairs.acked[p as usize].store(n, SeqCst);
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (db, pairs) = (db.clone(), pairs.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut i = r;
                loop {
                    let done = pairs
                        .acked
                        .iter()
                        .zip(&pairs.started)
                        .all(|(a, s)| a.load(SeqCst) == s.load(SeqCst))
                        && reads > 0
                        && i % 64 == 0;
                    let p = i % PAIRS;
                    i += 1;
                    let (a, b) = (key(p, b'a'), key(p, b'b'));
                    let lo = pairs.acked[p as usize].load(SeqCst);
                    let state = match i % 3 {
                        // One key.
                        0 => db.get(&a).unwrap().map(|v| version_of(p, b'a', &v)),
                        // Both keys of the batch at one instant: the same version or none.
                        1 => {
                            let v = db.multi_get(&[&a, &b]).unwrap();
                            let va = v[0].as_ref().map(|v| version_of(p, b'a', v));
                            let vb = v[1].as_ref().map(|v| version_of(p, b'b', v));
                            assert_eq!(va, vb, "multi_get saw half a batch of pair {p}");
                            va
                        }
                        // A range over the pair.
                        _ => {
                            let end = key(p, b'c');
                            let got = db.range(&a, Some(&end), 10).unwrap();
                            let versions: Vec<u32> = got
                                .iter()
                                .map(|(k, v)| version_of(p, *k.last().unwrap(), v))
                                .collect();
                            match versions.as_slice() {
                                [] => None,
                                [x, y] if x == y => Some(*x),
                                other => panic!("range saw half a batch of pair {p}: {other:?}"),
                            }
                        }
                    };
                    let hi = pairs.started[p as usize].load(SeqCst);
                    pairs.check(p, lo, hi, state, "read");
                    reads += 1;
                    if done {
                        return reads;
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads > 0);
    let s = db.stats();
    assert!(s.flushes > 0 && s.compactions > 0, "maintenance ran: {s:?}");
    assert!(s.gc_segments > 0, "garbage collection ran: {s:?}");
    if matches!(ack, Ack::Dram) {
        // Readers did meet pages that were not on the device yet.
        assert!(
            s.landing_hits > 0,
            "no read was served from the landing buffer: {s:?}"
        );
    }
    // The final state is each pair's last acknowledged version.
    for p in 0..PAIRS {
        let n = pairs.acked[p as usize].load(SeqCst);
        let got = db.get(&key(p, b'a')).unwrap();
        pairs.check(p, n, n, got.map(|v| version_of(p, b'a', &v)), "final");
    }
}

#[test]
fn reads_see_acknowledged_states_while_writers_and_maintenance_run() {
    run(Release::Virtual, 1500, Ack::Durable);
}

/// plp mode: a batch is applied as soon as its pages complete, with no device flush, so
/// batches overtake each other on the device more often.
#[test]
fn plp_reads_see_acknowledged_states_while_writers_and_maintenance_run() {
    run(Release::Virtual, 1500, Ack::PagesComplete);
}

/// The drive's plp mode: a batch is acknowledged and visible before its pages land.
#[test]
fn dram_acks_reads_see_acknowledged_states_while_writers_and_maintenance_run() {
    run(Release::Virtual, 1500, Ack::Dram);
}

#[test]
fn dram_acks_reads_in_flight_on_a_slow_device_see_acknowledged_states() {
    // More batches than the other modes: small batches share packed pages in this mode
    // (the engine's `open_page`), so it takes more of them to fill segments enough for
    // garbage collection to run.
    run(Release::WallClock, 500, Ack::Dram);
}

#[test]
fn plp_reads_in_flight_on_a_slow_device_see_acknowledged_states() {
    run(Release::WallClock, 150, Ack::PagesComplete);
}

#[test]
fn reads_in_flight_on_a_slow_device_see_acknowledged_states() {
    run(Release::WallClock, 150, Ack::Durable);
}
