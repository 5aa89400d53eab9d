//! Keys up to the 64 KiB default limit: written with their own raw pages in the value log and
//! spanning keytable pages. Reads, deletes, ranges, flushes, compactions, reopen, replay after
//! a power cut and garbage collection all see them exactly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};
use lsm::{Engine, EngineConfig, EngineError, WriteOp};

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 48,
        pages_per_block: 16,
        spare_blocks_per_chip: 2,
    }
}

fn config() -> EngineConfig {
    EngineConfig {
        memtable_bytes: 64 << 10,
        l0_runs: 2,
        l1_bytes: 128 << 10,
        level_ratio: 2,
        gc_window_pages: 8,
        gc_policy: Arc::new(lsm::Oldest),
        ..EngineConfig::default()
    }
}

/// A key of `len` bytes, distinct per `id`, sorting by `id` first.
fn key(id: u32, len: usize) -> Vec<u8> {
    let mut k = id.to_be_bytes().to_vec();
    k.extend((0..len.saturating_sub(4)).map(|i| (i as u32 * 31 + id) as u8));
    k.truncate(len);
    k
}

fn value(id: u32, version: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 ^ id ^ version) as u8).collect()
}

const LENS: [usize; 6] = [4, 4097, 8200, 20_000, 65_536, 65_600];

#[test]
fn long_keys_everywhere() {
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig::new(geometry());
    let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::format(&backend, cfg).unwrap());
    let db = Engine::open(dev, config()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    // Too long for the limit: refused, nothing stored.
    let too_long = key(999, (64 << 10) + 65);
    assert!(matches!(
        db.put(&too_long, b"x"),
        Err(EngineError::KeyTooLarge { .. })
    ));
    // Several rounds of overwrites and deletes so flushes, compactions and GC all run.
    for round in 0..150u32 {
        let mut batch: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for id in 0..12u32 {
            let len = LENS[(id as usize + round as usize) % LENS.len()].max(4);
            let k = key(
                id,
                if id % 2 == 0 {
                    len
                } else {
                    LENS[id as usize % LENS.len()]
                },
            );
            let v = (round + id) % 7 != 0;
            let value_len = [0, 10, 3000, 8192, 9000][(id + round) as usize % 5];
            batch.push((k, v.then(|| value(id, round, value_len))));
        }
        batch.sort_by(|a, b| a.0.cmp(&b.0));
        batch.dedup_by(|a, b| a.0 == b.0);
        let ops: Vec<WriteOp<'_>> = batch
            .iter()
            .map(|(k, v)| match v {
                Some(v) => WriteOp::Put(k, v),
                None => WriteOp::Delete(k),
            })
            .collect();
        db.write(&ops).unwrap();
        for (k, v) in batch {
            match v {
                Some(v) => model.insert(k, v),
                None => model.remove(&k),
            };
        }
        if round % 5 == 4 {
            db.flush().unwrap();
        }
        if round % 11 == 10 {
            db.compact_all().unwrap();
        }
    }
    let check = |db: &Engine, model: &BTreeMap<Vec<u8>, Vec<u8>>, when: &str| {
        for (k, v) in model {
            assert_eq!(
                db.get(k).unwrap().as_ref(),
                Some(v),
                "{when}: key of {} bytes",
                k.len()
            );
        }
        let all = db.range(b"", None, usize::MAX).unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(all, want, "{when}: range");
    };
    check(&db, &model, "live");
    assert!(db.stats().gc_segments > 0, "garbage collection ran");
    // Unflushed long-key writes, then a power cut: replay must find them.
    let k = key(500, 30_000);
    let v = value(500, 1, 9000);
    db.put(&k, &v).unwrap();
    model.insert(k.clone(), v);
    let gone = key(3, LENS[3]);
    db.delete(&gone).unwrap();
    model.remove(&gone);
    drop(db);
    let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(dev, config()).unwrap();
    assert!(db.stats().replayed_records > 0);
    check(&db, &model, "after reopen");
    db.close().unwrap();
}

/// Keytable runs of long keys are larger than a segment, and a run's pages that continue from
/// the end of one keytable segment into the next (adjacent) one are one extent: a
/// compaction that releases keytable segments must keep every segment such an extent covers.
/// Reopening after each round loads every run from the device, so a segment released (and
/// trimmed) under a live run fails the reopen.
#[test]
fn keytable_runs_spanning_segments_survive_compactions_and_reopen() {
    // 16-page (128 KiB) segments; a key of 5000 bytes fills a keytable page of its own.
    let g = Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 64,
        pages_per_block: 4,
        spare_blocks_per_chip: 2,
    };
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig::new(g);
    drop(Ftl::format(&backend, cfg).unwrap());
    let engine = EngineConfig {
        memtable_bytes: 256 << 10,
        l0_runs: 2,
        l1_bytes: 512 << 10,
        level_ratio: 2,
        ..EngineConfig::default()
    };
    let open = || {
        let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::open(&backend, cfg).unwrap());
        Engine::open(dev, engine.clone()).unwrap()
    };
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for round in 0..8u32 {
        let db = open();
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "round {round}");
        }
        // 24 to 40 keys per run: runs of 24 to 40 pages, across segment boundaries.
        let n = 24 + round * 2;
        for id in 0..n {
            let k = key(id * 3 + round % 3, 5000);
            let v = value(id, round, 50);
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.flush().unwrap();
        if round % 2 == 1 {
            db.compact_all().unwrap();
        }
        let s = db.stats();
        assert_eq!(
            s.free_segments
                + s.log_segments
                + s.keytable_segments
                + s.reclaimed_segments
                + lsm::manifest::MANIFEST_SEGMENTS.len() as u64,
            u64::from(g.segments()),
            "round {round}: segments unaccounted for: {s:#?}"
        );
        db.close().unwrap();
    }
    let db = open();
    let all = db.range(b"", None, usize::MAX).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    assert_eq!(all, want);
}
