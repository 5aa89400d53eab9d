//! Crash test with concurrent writers: four threads write pipelined batches, with flushes,
//! compactions and garbage collection running on the maintenance thread, until a power cut
//! armed at a random device command hits. After each recovery every write any thread saw
//! acknowledged is there with its exact bytes, and each thread's batch that the cut failed is
//! there whole or not at all. Run in both durability modes: `sync` (a device flush before each
//! acknowledgement) on devices with and without a volatile write cache, and `plp`
//! (acknowledged at device completion) on a device whose completed writes survive the cut
//! (its premise: a power-protected cache). Before each recovery the offline check
//! (`Engine::fsck`) must find the device clean.
//!
//! `CRASH_MT_ITERATIONS` overrides the cuts per mode, `CRASH_MT_SEED` the seed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use hwftl_sim::{Backend, DeviceConfig, DeviceError, Ftl, Geometry, RamStore};
use lsm::{Engine, EngineConfig, EngineError, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::CutDevice;

const WRITERS: u64 = 4;
/// Keys per writer (each writer owns the keys `k % WRITERS == writer`).
const KEYS_PER_WRITER: u64 = 40;

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 48,
        pages_per_block: 8,
        spare_blocks_per_chip: 2,
    }
}

fn config(flush_writes: bool) -> EngineConfig {
    EngineConfig {
        memtable_bytes: 3000,
        l0_runs: 3,
        l1_bytes: 6000,
        keytable_bytes: 1500,
        level_ratio: 3,
        gc_window_pages: 4,
        flush_writes,
        ..EngineConfig::default()
    }
}

fn key(writer: u64, i: u64) -> Vec<u8> {
    format!("w{writer}:{:03}", i * WRITERS + writer).into_bytes()
}

fn value(rng: &mut SmallRng) -> Vec<u8> {
    let len = match rng.gen_range(0..10) {
        0..=6 => rng.gen_range(1..400),
        7..=8 => rng.gen_range(1000..6000),
        _ => rng.gen_range(8192..20000),
    };
    let seed: u8 = rng.gen();
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ seed)
        .collect()
}

type Batch = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// What one writer knows: its acknowledged state, and the batch the cut failed.
#[derive(Default, Clone)]
struct Ledger {
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    cut: Option<Batch>,
}

/// A failure the power cut explains: the device is off (the batch was not applied), or the
/// outcome is unknown (its flush failed, or a batch before it in the pipeline failed).
/// Either way the batch is checked as "whole or not at all" after recovery.
fn caused_by_cut(e: &EngineError) -> bool {
    matches!(
        e.root(),
        EngineError::Device(DeviceError::PoweredOff)
            | EngineError::WriteNotApplied(DeviceError::PoweredOff)
            | EngineError::OutcomeUnknown { .. }
    )
}

/// Checks a writer's keys after recovery and returns its new acknowledged state.
fn check(
    round: u32,
    writer: u64,
    all: &BTreeMap<Vec<u8>, Vec<u8>>,
    ledger: &Ledger,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut expected = ledger.acked.clone();
    if let Some(batch) = &ledger.cut {
        let applied = batch.iter().all(|(k, v)| all.get(k) == v.as_ref());
        let kept = batch.iter().all(|(k, _)| all.get(k) == ledger.acked.get(k));
        assert!(
            applied || kept,
            "round {round}, writer {writer}: the cut batch is half there"
        );
        if applied {
            for (k, v) in batch {
                match v {
                    Some(v) => expected.insert(k.clone(), v.clone()),
                    None => expected.remove(k),
                };
            }
        }
    }
    let prefix = format!("w{writer}:");
    let mine: BTreeMap<&Vec<u8>, &Vec<u8>> = all
        .iter()
        .filter(|(k, _)| k.starts_with(prefix.as_bytes()))
        .collect();
    assert_eq!(
        mine.len(),
        expected.len(),
        "round {round}, writer {writer}: key count (a lost or resurrected key)"
    );
    for (k, v) in &expected {
        assert_eq!(
            mine.get(k).copied(),
            Some(v),
            "round {round}, writer {writer}: key {}",
            String::from_utf8_lossy(k)
        );
    }
    expected
}

/// One writer's load until the cut fails one of its batches (or it has written enough).
fn load(db: &Engine, writer: u64, seed: u64, mut ledger: Ledger) -> Ledger {
    let mut rng = SmallRng::seed_from_u64(seed);
    ledger.cut = None;
    for _ in 0..150 {
        let mut batch: Batch = (0..rng.gen_range(1..4))
            .map(|_| {
                let k = key(writer, rng.gen_range(0..KEYS_PER_WRITER));
                let v = (rng.gen_range(0..6) != 0).then(|| value(&mut rng));
                (k, v)
            })
            .collect();
        batch.sort_by(|a, b| a.0.cmp(&b.0));
        batch.dedup_by(|a, b| a.0 == b.0);
        let ops: Vec<WriteOp<'_>> = batch
            .iter()
            .map(|(k, v)| match v {
                Some(v) => WriteOp::Put(k, v),
                None => WriteOp::Delete(k),
            })
            .collect();
        let result = if writer == 0 && rng.gen_range(0..30) == 0 {
            db.flush().and_then(|()| db.write(&ops))
        } else {
            db.write(&ops)
        };
        match result {
            Ok(()) => {
                for (k, v) in batch {
                    match v {
                        Some(v) => ledger.acked.insert(k, v),
                        None => ledger.acked.remove(&k),
                    };
                }
            }
            Err(e) => {
                assert!(
                    caused_by_cut(&e),
                    "writer {writer}: a write failed for another reason than the cut: {e}"
                );
                ledger.cut = Some(batch);
                break;
            }
        }
    }
    ledger
}

fn run(volatile_cache: bool, flush_writes: bool, seed: u64) {
    let iterations: u32 = std::env::var("CRASH_MT_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let seed = std::env::var("CRASH_MT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(seed);
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig {
        volatile_cache,
        ..DeviceConfig::new(geometry())
    };
    drop(Ftl::format(&backend, cfg).unwrap());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ledgers: Vec<Ledger> = vec![Ledger::default(); WRITERS as usize];
    let (mut cuts, mut gc_segments, mut compactions) = (0u32, 0u64, 0u64);
    for round in 0..iterations {
        // The offline check first: the device as the cut left it is consistent.
        common::assert_fsck_clean(&backend, cfg, config(flush_writes));
        let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
        let remaining = Arc::new(AtomicI64::new(i64::MAX));
        let armed = remaining.clone();
        let dev = Arc::new(CutDevice::new(
            ftl.clone(),
            Box::new(move |_| {
                let before = armed.fetch_sub(1, Ordering::SeqCst);
                before > 0 && before - 1 <= 0
            }),
        ));
        let db = Arc::new(Engine::open(dev, config(flush_writes)).unwrap());
        let all: BTreeMap<Vec<u8>, Vec<u8>> = db
            .range(b"", None, usize::MAX)
            .unwrap()
            .into_iter()
            .collect();
        for (w, ledger) in ledgers.iter_mut().enumerate() {
            ledger.acked = check(round, w as u64, &all, ledger);
            ledger.cut = None;
        }
        assert!(
            all.keys().all(|k| k.starts_with(b"w")),
            "round {round}: a key nobody wrote"
        );

        remaining.store(rng.gen_range(20..400), Ordering::SeqCst);
        let threads: Vec<_> = ledgers
            .iter()
            .cloned()
            .enumerate()
            .map(|(w, ledger)| {
                let db = db.clone();
                let seed: u64 = rng.gen();
                std::thread::spawn(move || load(&db, w as u64, seed, ledger))
            })
            .collect();
        ledgers = threads.into_iter().map(|t| t.join().unwrap()).collect();
        if ledgers.iter().any(|l| l.cut.is_some()) {
            cuts += 1;
        }
        let s = db.stats();
        gc_segments += s.gc_segments;
        compactions += s.compactions + s.flushes;
        ftl.power_cut();
        drop(db);
    }
    assert!(
        cuts >= iterations * 8 / 10,
        "only {cuts} of {iterations} cuts hit a write"
    );
    assert!(
        gc_segments > 10,
        "garbage collection hardly ran: {gc_segments}"
    );
    assert!(compactions > 50, "flushes and compactions: {compactions}");
    println!(
        "volatile cache {volatile_cache}, flush_writes {flush_writes}: {cuts} cuts, \
         {gc_segments} segments reclaimed, {compactions} flushes and compactions"
    );
}

#[test]
fn concurrent_writers_lose_nothing_acknowledged_in_sync_mode() {
    run(false, true, 0x3a11);
}

#[test]
fn concurrent_writers_lose_nothing_acknowledged_in_sync_mode_with_a_volatile_cache() {
    run(true, true, 0x3a12);
}

#[test]
fn concurrent_writers_lose_nothing_acknowledged_in_plp_mode() {
    run(false, false, 0x3a13);
}
