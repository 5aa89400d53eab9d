//! Property tests: random puts (small, page-sized and multi-page values), deletes, batches,
//! puts with deadlines and retimes, range reads, flushes, compactions, reopens and power
//! cuts, checked against a `BTreeMap`, on the RAM backend and on the io_uring file backend.
//!
//! Deadlines are either long past ([`PAST`]: expired beyond compaction's grace, so
//! compaction may drop the entry) or far ahead ([`FUTURE`]), so what a read sees does not
//! depend on when it runs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};
use lsm::{Deadline, Engine, EngineConfig, WriteOp};
use proptest::prelude::*;

mod common;

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

/// A deadline long past (1970).
const PAST: u64 = 1;
/// A deadline far ahead (the year 2100).
const FUTURE: u64 = 4_102_444_800_000;

fn deadline(past: bool) -> NonZeroU64 {
    NonZeroU64::new(if past { PAST } else { FUTURE }).unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, usize, u8),
    /// A put whose deadline is past (`true`) or ahead.
    PutUntil(u16, usize, u8, bool),
    /// A new deadline for a key: none, past or ahead.
    Retime(u16, Option<bool>),
    Delete(u16),
    Batch(Vec<(u16, Option<usize>)>),
    Get(u16),
    Range(u16, u16, usize),
    Flush,
    Compact,
    Reopen,
    PowerCut,
    /// Every key deleted at once.
    Clear,
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
        3 => (k.clone(), value_len(), any::<u8>(), any::<bool>())
            .prop_map(|(k, l, s, p)| Op::PutUntil(k, l, s, p)),
        3 => (k.clone(), proptest::option::of(any::<bool>())).prop_map(|(k, d)| Op::Retime(k, d)),
        3 => k.clone().prop_map(Op::Delete),
        2 => proptest::collection::vec((k.clone(), proptest::option::of(0usize..300)), 1..6)
            .prop_map(Op::Batch),
        4 => k.clone().prop_map(Op::Get),
        2 => (k.clone(), k.clone(), 1usize..20).prop_map(|(a, b, l)| Op::Range(a, b, l)),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::PowerCut),
        1 => Just(Op::Clear),
    ]
}

fn run(ops: Vec<Op>, backend: Backend) -> Result<(), TestCaseError> {
    run_with(ops, backend, &small_config())
}

/// A key's value and deadline in the model.
type Entry = (Vec<u8>, Deadline);

/// Whether the model entry is visible to reads (its deadline, if any, is ahead).
fn live(e: &Entry) -> bool {
    e.1.is_none_or(|d| d.get() > PAST)
}

fn run_with(ops: Vec<Op>, backend: Backend, ecfg: &EngineConfig) -> Result<(), TestCaseError> {
    let cfg = DeviceConfig::new(geometry());
    let ftl = Arc::new(Ftl::format(&backend, cfg).unwrap());
    // The device handle, for power cuts (dropped before each reopen: a file device is
    // locked by its holder).
    let mut ftl_now = Some(ftl.clone());
    let dev: Arc<dyn AppendDevice> = ftl;
    let mut db = Some(Engine::open(dev, ecfg.clone()).unwrap());
    // Expired entries stay in the model (a retime may still find them: see `Op::Retime`).
    let mut model: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
    for op in ops {
        let e = db.as_ref().unwrap();
        match op {
            Op::Put(k, len, salt) => {
                let v = value(k, len, salt);
                e.put(&key(k), &v).unwrap();
                model.insert(key(k), (v, None));
            }
            Op::PutUntil(k, len, salt, past) => {
                let v = value(k, len, salt);
                let d = deadline(past);
                e.write(&[WriteOp::PutUntil(&key(k), &v, d)]).unwrap();
                model.insert(key(k), (v, Some(d)));
            }
            Op::Retime(k, d) => {
                // An expired entry may be gone already (compaction drops it): whether a
                // retime finds it is not the model's to say, so retime only live keys or
                // missing ones.
                if model.get(&key(k)).is_some_and(|e| !live(e)) {
                    continue;
                }
                let d = d.map(deadline);
                e.write(&[WriteOp::Retime(&key(k), d)]).unwrap();
                if let Some(entry) = model.get_mut(&key(k)) {
                    entry.1 = d;
                }
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
                // Every third put has a deadline ahead, then loses it to a retime in the
                // same batch when the next item is the same key.
                let ops: Vec<WriteOp<'_>> = owned
                    .iter()
                    .enumerate()
                    .map(|(i, (k, v))| match v {
                        Some(v) if i % 3 == 1 => WriteOp::PutUntil(k, v, deadline(false)),
                        Some(v) => WriteOp::Put(k, v),
                        None => WriteOp::Delete(k),
                    })
                    .collect();
                e.write(&ops).unwrap();
                for (i, (k, v)) in owned.into_iter().enumerate() {
                    match v {
                        Some(v) => {
                            let d = (i % 3 == 1).then(|| deadline(false));
                            model.insert(k, (v, d))
                        }
                        None => model.remove(&k),
                    };
                }
            }
            Op::Get(k) => {
                let want = model.get(&key(k)).filter(|e| live(e));
                prop_assert_eq!(e.get(&key(k)).unwrap(), want.map(|e| e.0.clone()));
                let found = e.first_present_until(&[&key(k)]).unwrap();
                prop_assert_eq!(found, want.map(|e| (0, e.1)));
            }
            Op::Range(a, b, limit) => {
                let (lo, hi) = (key(a.min(b)), key(a.max(b)));
                let got = e.range(&lo, Some(&hi), limit).unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(lo.clone()..hi.clone())
                    .filter(|(_, e)| live(e))
                    .take(limit)
                    .map(|(k, e)| (k.clone(), e.0.clone()))
                    .collect();
                prop_assert_eq!(got, want);
            }
            Op::Clear => {
                e.clear().unwrap();
                model.clear();
            }
            Op::Flush => e.flush().unwrap(),
            Op::Compact => e.compact_all().unwrap(),
            Op::Reopen => {
                db.take().unwrap().close().unwrap();
                drop(ftl_now.take());
                let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
                ftl_now = Some(ftl.clone());
                db = Some(Engine::open(ftl, ecfg.clone()).unwrap());
            }
            Op::PowerCut => {
                // Every acknowledged batch is durable; nothing was closed: the reopen
                // replays the log's tail, retimes included. Acknowledged from DRAM, a batch
                // is durable once landed: the power-fail warning's `sync` comes first (what
                // the drive's SIGPWR handler runs).
                if ecfg.ack_from_dram {
                    e.sync().unwrap();
                }
                if let Some(f) = ftl_now.take() {
                    f.power_cut();
                }
                drop(db.take());
                let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
                ftl_now = Some(ftl.clone());
                db = Some(Engine::open(ftl, ecfg.clone()).unwrap());
            }
        }
    }
    // Everything, in order, at the end; and again once compaction has had every entry.
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .into_iter()
        .filter(|(_, e)| live(e))
        .map(|(k, e)| (k, e.0))
        .collect();
    let e = db.as_ref().unwrap();
    prop_assert_eq!(&e.range(b"", None, usize::MAX).unwrap(), &want);
    e.compact_all().unwrap();
    prop_assert_eq!(&e.range(b"", None, usize::MAX).unwrap(), &want);
    // And the books balance: garbage counted once, retimes and dropped entries included.
    db.take().unwrap().close().unwrap();
    drop(ftl_now.take());
    common::assert_fsck_clean(&backend, cfg, ecfg.clone());
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

    /// Acknowledged from DRAM: small batches share open packed pages (sealed by the next
    /// batch that does not fit, a flush's wait for the pipeline, or the clock), and every
    /// answer stays the model's.
    #[test]
    fn acknowledged_from_dram_matches_btreemap(ops in proptest::collection::vec(op(), 1..120)) {
        let cfg = EngineConfig {
            ack_from_dram: true,
            flush_writes: false,
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
                // The compactions the flush made due (the maintenance thread's), before
                // more is written: each flush's run is merged as it lands.
                db.settle().unwrap();
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
