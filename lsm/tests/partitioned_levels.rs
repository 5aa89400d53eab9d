//! Partitioned keytable levels: below L0 each level is a set of key-range runs of about
//! `keytable_bytes`, a compaction takes one run and the runs of the next level it overlaps
//! (never a whole level), and a sequential load only moves runs down.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, EngineStats, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::small_geometry;

fn config() -> EngineConfig {
    EngineConfig {
        memtable_bytes: 16 << 10,
        l0_runs: 2,
        l1_bytes: 32 << 10,
        level_ratio: 4,
        keytable_bytes: 4 << 10,
        ..EngineConfig::default()
    }
}

fn key(k: u32) -> Vec<u8> {
    format!("key{k:07}").into_bytes()
}

fn value(k: u32, version: u32) -> Vec<u8> {
    format!("{k}:{version}:").into_bytes().repeat(4)
}

/// Keys in the levels below L0 must each be in one run: checked from the outside by reading
/// every key back (a lookup probes one run per level) and by a full range scan.
fn check(db: &Engine, model: &BTreeMap<u32, Option<u32>>) {
    for (&k, v) in model {
        let want = v.map(|version| value(k, version));
        assert_eq!(db.get(&key(k)).unwrap(), want, "key {k}");
    }
    let live: Vec<Vec<u8>> = model
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(&k, _)| key(k))
        .collect();
    let scanned = db.range_keys(b"", None, usize::MAX).unwrap();
    assert_eq!(
        scanned, live,
        "a full scan returns every live key once, in order"
    );
    // A range starting inside the keyspace (a seek into the middle of a level).
    let (lo, hi) = (key(2_500), key(2_800));
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .range(2_500..2_800)
        .filter_map(|(&k, v)| v.map(|version| (key(k), value(k, version))))
        .collect();
    assert_eq!(db.range(&lo, Some(&hi), usize::MAX).unwrap(), want);
}

fn deeper_runs(s: &EngineStats) -> u64 {
    s.levels.iter().skip(1).map(|l| l.runs).sum()
}

/// Random overwrites and deletes: levels below L0 hold many runs; on average a merging
/// compaction rewrites far less than the level it goes into; every key reads back with its
/// last value, before and after a reopen.
#[test]
fn compactions_take_a_run_not_a_level_and_lose_nothing() {
    let backend = Backend::Ram(RamStore::new());
    let dcfg = DeviceConfig::new(small_geometry());
    let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::format(&backend, dcfg).unwrap());
    let db = Engine::open(dev, config()).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model: BTreeMap<u32, Option<u32>> = BTreeMap::new();
    for version in 0..30_000u32 {
        let k = rng.gen_range(0..6_000);
        if rng.gen_range(0..10) == 0 {
            db.delete(&key(k)).unwrap();
            model.insert(k, None);
        } else {
            db.put(&key(k), &value(k, version)).unwrap();
            model.insert(k, Some(version));
        }
    }
    // Flushed (and settled) first, so that close has nothing left to flush or compact.
    // Garbage collection may move values into the memtable while the engine settles (and
    // close would flush them, and a compaction could follow): flush and settle again until
    // the memtables are empty. (A reopen once found the runs changed under a loaded host.)
    for _ in 0..20 {
        db.flush().unwrap();
        db.settle().unwrap();
        if db.stats().memtable_keys == 0 {
            break;
        }
    }
    let s = db.stats();
    assert_eq!(s.memtable_keys, 0, "the memtables never emptied");
    assert!(s.compactions > 5, "{s:#?}");
    let widest = s.levels.iter().skip(1).map(|l| l.runs).max().unwrap_or(0);
    assert!(
        widest >= 4,
        "a level below L0 holds several runs: {:#?}",
        s.levels
    );
    // (Below L1: a compaction from L0 takes every L0 run, whose random keys span the
    // whole keyspace, so it rewrites all of L1, as in any leveled LSM.)
    for (l, ls) in s.levels.iter().enumerate().skip(2) {
        if ls.compactions > 0 && ls.runs > 4 {
            let per_compaction = ls.bytes_rewritten / ls.compactions;
            assert!(
                per_compaction < ls.bytes / 2,
                "L{l}: a compaction rewrote {per_compaction} of {} bytes on average",
                ls.bytes
            );
        }
    }
    check(&db, &model);
    // After a reopen the levels are as they were; a full compaction leaves exactly the
    // live keys (tombstones dropped at the bottom).
    db.close().unwrap();
    let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::open(&backend, dcfg).unwrap());
    let db = Engine::open(dev, config()).unwrap();
    assert_eq!(
        deeper_runs(&db.stats()),
        deeper_runs(&s),
        "the runs come back as they were"
    );
    check(&db, &model);
    db.compact_all().unwrap();
    let after = db.stats();
    let live = model.values().filter(|v| v.is_some()).count() as u64;
    assert_eq!(after.keys_per_level.iter().sum::<u64>(), live, "{after:#?}");
    check(&db, &model);
}

/// Keys written in ascending order make L0 runs that overlap nothing below them: they move
/// down as they are, and no compaction writes a keytable page.
#[test]
fn a_sequential_load_only_moves_runs_down() {
    let dev: Arc<dyn AppendDevice> = Arc::new(
        Ftl::format(
            &Backend::Ram(RamStore::new()),
            DeviceConfig::new(small_geometry()),
        )
        .unwrap(),
    );
    let db = Engine::open(dev, config()).unwrap();
    let mut model = BTreeMap::new();
    // In batches of 100, so that the value log stays small and garbage collection (whose
    // moves re-insert old keys) never runs.
    for batch in 0..200u32 {
        let kv: Vec<(Vec<u8>, Vec<u8>)> = (batch * 100..(batch + 1) * 100)
            .map(|k| (key(k), value(k, 0)))
            .collect();
        let ops: Vec<WriteOp<'_>> = kv.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
        db.write(&ops).unwrap();
        model.extend((batch * 100..(batch + 1) * 100).map(|k| (k, Some(0))));
    }
    db.settle().unwrap();
    let s = db.stats();
    let moves: u64 = s.levels.iter().map(|l| l.trivial_moves).sum();
    assert!(moves > 3, "{:#?}", s.levels);
    assert_eq!(s.gc_segments, 0, "{s:#?}");
    assert_eq!(s.compactions, 0, "no merging compaction: {s:#?}");
    for ls in s.levels.iter().skip(1) {
        assert_eq!(ls.bytes_written, 0, "{:#?}", s.levels);
    }
    check(&db, &model);
}
