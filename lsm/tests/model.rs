//! Property tests: random puts (small, page-sized and multi-page values), deletes, batches,
//! range reads, flushes, compactions and reopens, checked against a `BTreeMap`, on the RAM
//! backend and on the io_uring file backend.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};
use lsm::{Engine, EngineConfig, WriteOp};
use proptest::prelude::*;

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 40,
        pages_per_block: 8,
        spare_blocks_per_chip: 2,
    }
}

fn small_config() -> EngineConfig {
    EngineConfig {
        memtable_bytes: 4096,
        l0_runs: 3,
        l1_bytes: 8192,
        // Runs of ~1 KiB below L0: levels hold many runs, compactions take a few.
        keytable_bytes: 1024,
        level_ratio: 3,
        // Garbage collection in small steps, so moves interleave with everything else.
        gc_window_pages: 4,
        ..EngineConfig::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, usize, u8),
    Delete(u16),
    Batch(Vec<(u16, Option<usize>)>),
    Get(u16),
    Range(u16, u16, usize),
    Flush,
    Compact,
    Reopen,
}

fn key(k: u16) -> Vec<u8> {
    format!("key-{k:05}").into_bytes()
}

fn value(k: u16, len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8) ^ (k as u8) ^ salt).collect()
}

fn value_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        60 => 0usize..200,
        20 => 1000usize..3000,
        10 => Just(8192usize),
        10 => 8193usize..20000,
        // Larger than a 256 KiB segment: spans two or three.
        2 => 300_000usize..600_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..60;
    prop_oneof![
        8 => (k.clone(), value_len(), any::<u8>()).prop_map(|(k, l, s)| Op::Put(k, l, s)),
        3 => k.clone().prop_map(Op::Delete),
        2 => proptest::collection::vec((k.clone(), proptest::option::of(0usize..300)), 1..6)
            .prop_map(Op::Batch),
        4 => k.clone().prop_map(Op::Get),
        2 => (k.clone(), k.clone(), 1usize..20).prop_map(|(a, b, l)| Op::Range(a, b, l)),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

fn run(ops: Vec<Op>, backend: Backend) -> Result<(), TestCaseError> {
    run_with(ops, backend, &small_config())
}

fn run_with(ops: Vec<Op>, backend: Backend, ecfg: &EngineConfig) -> Result<(), TestCaseError> {
    let cfg = DeviceConfig::new(geometry());
    let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::format(&backend, cfg).unwrap());
    let mut db = Some(Engine::open(dev, ecfg.clone()).unwrap());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in ops {
        let e = db.as_ref().unwrap();
        match op {
            Op::Put(k, len, salt) => {
                let v = value(k, len, salt);
                e.put(&key(k), &v).unwrap();
                model.insert(key(k), v);
            }
            Op::Delete(k) => {
                e.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Batch(items) => {
                let owned: Vec<(Vec<u8>, Option<Vec<u8>>)> = items
                    .iter()
                    .map(|(k, v)| (key(*k), v.map(|l| value(*k, l, 7))))
                    .collect();
                let ops: Vec<WriteOp<'_>> = owned
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => WriteOp::Put(k, v),
                        None => WriteOp::Delete(k),
                    })
                    .collect();
                e.write(&ops).unwrap();
                for (k, v) in owned {
                    match v {
                        Some(v) => model.insert(k, v),
                        None => model.remove(&k),
                    };
                }
            }
            Op::Get(k) => {
                prop_assert_eq!(e.get(&key(k)).unwrap(), model.get(&key(k)).cloned());
            }
            Op::Range(a, b, limit) => {
                let (lo, hi) = (key(a.min(b)), key(a.max(b)));
                let got = e.range(&lo, Some(&hi), limit).unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(lo.clone()..hi.clone())
                    .take(limit)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                prop_assert_eq!(got, want);
            }
            Op::Flush => e.flush().unwrap(),
            Op::Compact => e.compact_all().unwrap(),
            Op::Reopen => {
                db.take().unwrap().close().unwrap();
                let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::open(&backend, cfg).unwrap());
                db = Some(Engine::open(dev, ecfg.clone()).unwrap());
            }
        }
    }
    // Everything, in order, at the end.
    let e = db.as_ref().unwrap();
    let all = e.range(b"", None, usize::MAX).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    prop_assert_eq!(all, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_btreemap_on_ram(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops, Backend::Ram(RamStore::new()))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The ablation that reads keytable pages from the device (benchmarks only) keeps every
    /// answer.
    #[test]
    fn uncached_keytables_match_btreemap(ops in proptest::collection::vec(op(), 1..120)) {
        let cfg = EngineConfig {
            uncached_keytables: true,
            ..small_config()
        };
        run_with(ops, Backend::Ram(RamStore::new()), &cfg)?;
    }

    /// The ablation that moves values at compaction (benchmarks only) keeps every answer.
    #[test]
    fn value_moving_compaction_matches_btreemap(ops in proptest::collection::vec(op(), 1..120)) {
        let cfg = EngineConfig {
            compaction_moves_values: true,
            ..small_config()
        };
        run_with(ops, Backend::Ram(RamStore::new()), &cfg)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_btreemap_on_file(ops in proptest::collection::vec(op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        run(ops, Backend::File(dir.path().join("dev.img")))?;
    }
}

/// The ablation really moves values: the same load writes clearly more device bytes, and
/// every value reads back after a reopen.
#[test]
fn value_moving_compaction_rewrites_values() {
    let mut written = Vec::new();
    for moves in [false, true] {
        let backend = Backend::Ram(RamStore::new());
        let cfg = DeviceConfig::new(geometry());
        let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::format(&backend, cfg).unwrap());
        let ecfg = EngineConfig {
            compaction_moves_values: moves,
            ..small_config()
        };
        let db = Engine::open(dev, ecfg.clone()).unwrap();
        // Keys in a scattered order, so that runs overlap and compactions merge (a
        // sequential load only moves runs down, writing nothing).
        for i in 0..120u16 {
            let k = (i * 37) % 120;
            db.put(&key(k), &value(k, 1500, 1)).unwrap();
            if i % 10 == 9 {
                db.flush().unwrap();
            }
        }
        let s = db.stats();
        assert!(s.compactions > 0);
        written.push(s.device_bytes_written);
        db.close().unwrap();
        let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::open(&backend, cfg).unwrap());
        let db = Engine::open(dev, ecfg).unwrap();
        for k in 0..120u16 {
            assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 1500, 1)), "key {k}");
        }
    }
    assert!(
        written[1] > written[0] * 13 / 10,
        "device bytes without / with the ablation: {written:?}"
    );
}

/// The keytable-caching ablation really goes to the device: each lookup that passes the
/// bloom filter reads a keytable page besides the value's page.
#[test]
fn uncached_keytables_read_keytable_pages() {
    let mut reads = Vec::new();
    for uncached in [false, true] {
        let cfg = DeviceConfig::new(geometry());
        let ftl = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), cfg).unwrap());
        let ecfg = EngineConfig {
            uncached_keytables: uncached,
            ..small_config()
        };
        let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, ecfg).unwrap();
        for k in 0..200u16 {
            db.put(&key(k), &value(k, 100, 1)).unwrap();
        }
        db.flush().unwrap();
        let before = ftl.stats().reads;
        for k in 0..200u16 {
            assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 100, 1)));
        }
        assert_eq!(db.get(&key(9999)).unwrap(), None);
        reads.push(ftl.stats().reads - before);
    }
    assert!(
        reads[1] >= reads[0] + 200,
        "device reads cached / uncached: {reads:?}"
    );
}
