//! Recovery bookkeeping: restarting the engine must neither lose device segments nor
//! change its garbage counts.
//!
//! - Every restart replays the same value-log tail (from the checkpoint of the last flush);
//!   the garbage that tail makes (tombstones, values replaced in the memtable, unused page
//!   bytes) must be counted once, not once more per restart.
//! - A log segment the manifest records but whose pages never reached the device (lost in
//!   a cut, or from a volatile write cache) holds nothing and must go back to the free list
//!   at recovery, not stay behind as an empty sealed segment.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, Command, DeviceConfig, Ftl, Geometry, RamStore};
use lsm::manifest::{LogSegMeta, ManifestStore};
use lsm::vlog_format::stored_record_bytes;
use lsm::{Engine, EngineConfig, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 40,
        pages_per_block: 8,
        spare_blocks_per_chip: 2,
    }
}

/// Value-log bytes the live pairs occupy (what `live_bytes` is once all garbage is counted).
fn live_record_bytes(model: &BTreeMap<Vec<u8>, Vec<u8>>) -> u64 {
    model
        .iter()
        .map(|(k, v)| stored_record_bytes(k.len(), v.len()))
        .sum()
}

/// The value-log segments as the manifest on the device stores them.
fn stored_log_segs(dev: &dyn AppendDevice) -> Vec<LogSegMeta> {
    let (_, snap) = ManifestStore::load(dev).unwrap();
    snap.expect("a manifest").log_segs
}

/// Random batches of puts (small, page-sized and multi-page values), overwrites and deletes
/// over a few keys, so most keys are overwritten or deleted while in the memtable.
fn load(db: &Engine, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, rng: &mut SmallRng, batches: usize) {
    for _ in 0..batches {
        let mut batch: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..rng.gen_range(1..4))
            .map(|_| {
                let k = format!("key{:02}", rng.gen_range(0..40)).into_bytes();
                let v = (rng.gen_range(0..4) != 0).then(|| {
                    let len = match rng.gen_range(0..6) {
                        0..=3 => rng.gen_range(0..400),
                        4 => 8192,
                        _ => rng.gen_range(8193..20000),
                    };
                    vec![rng.gen::<u8>(); len]
                });
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
        db.write(&ops).unwrap();
        for (k, v) in batch {
            match v {
                Some(v) => model.insert(k, v),
                None => model.remove(&k),
            };
        }
    }
}

#[test]
fn restarts_without_writes_keep_garbage_counts_exact() {
    let backend = Backend::Ram(RamStore::new());
    // Large enough that the tail stays under the replay budget (a sixteenth of the device).
    let cfg = DeviceConfig::new(Geometry {
        blocks_per_chip: 160,
        pages_per_block: 16,
        ..geometry()
    });
    let ftl = Arc::new(Ftl::format(&backend, cfg).unwrap());
    // A memtable large enough that only the explicit flush below moves the checkpoint.
    let ecfg = EngineConfig {
        memtable_bytes: 1 << 20,
        ..EngineConfig::default()
    };
    let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = SmallRng::seed_from_u64(7);
    // Garbage before the checkpoint (counted for good in the manifest) ...
    load(&db, &mut model, &mut rng, 100);
    db.flush().unwrap();
    // ... and after it, which every recovery replays.
    load(&db, &mut model, &mut rng, 100);
    let before = db.stats();
    assert_eq!(before.flushes, 1, "the tail must not have been flushed");
    assert_eq!(before.gc_segments, 0);
    assert!(
        before.live_bytes >= live_record_bytes(&model),
        "more garbage counted than there is: live {} < {}",
        before.live_bytes,
        live_record_bytes(&model)
    );

    let mut ftl = ftl;
    let mut db = db;
    let mut stored: Option<Vec<LogSegMeta>> = None;
    for restart in 1..=5 {
        // A power cut: every acknowledged batch is durable, nothing was closed.
        ftl.power_cut();
        drop(db);
        ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
        db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
        let s = db.stats();
        assert!(
            s.replayed_records > 0,
            "restart {restart}: nothing replayed"
        );
        assert_eq!(
            (s.live_bytes, s.total_bytes, s.log_segments),
            (before.live_bytes, before.total_bytes, before.log_segments),
            "restart {restart}: (live, total, log segments) changed"
        );
        let segs = stored_log_segs(ftl.as_ref());
        if let Some(prev) = &stored {
            assert_eq!(
                &segs, prev,
                "restart {restart}: stored segment counts changed"
            );
        }
        stored = Some(segs);
    }
    assert_eq!(
        db.range(b"", None, usize::MAX).unwrap(),
        model
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    );
    // A flush counts the versions the memtable shadows in the runs: all garbage is counted
    // then, exactly once.
    db.flush().unwrap();
    assert_eq!(db.stats().live_bytes, live_record_bytes(&model));
    db.close().unwrap();
}

#[test]
fn log_segments_lost_from_the_write_cache_are_released_at_recovery() {
    let g = Geometry {
        blocks_per_chip: 20,
        ..geometry()
    };
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig {
        volatile_cache: true,
        ..DeviceConfig::new(g)
    };
    drop(Ftl::format(&backend, cfg).unwrap());
    // Batches acknowledged without a FLUSH stay in the volatile cache, so the cut below
    // loses every page of the log segment the write opened, while the manifest (always
    // flushed) records that segment.
    let ecfg = EngineConfig {
        flush_writes: false,
        ..EngineConfig::default()
    };
    let mut baseline = None;
    // More cycles than the device has segments: a segment leaked per cut fills it.
    for cycle in 0..g.segments() + 6 {
        let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
        let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
        let s = db.stats();
        assert_eq!(
            s.free_segments + s.log_segments + s.keytable_segments + s.reclaimed_segments + 2,
            u64::from(g.segments()),
            "cycle {cycle}: segments unaccounted for"
        );
        assert!(
            stored_log_segs(ftl.as_ref())
                .iter()
                .all(|m| m.sealed_end != Some(0)),
            "cycle {cycle}: an empty log segment was kept"
        );
        let counts = (s.free_segments, s.log_segments);
        assert_eq!(
            *baseline.get_or_insert(counts),
            counts,
            "cycle {cycle}: (free, log) segments"
        );
        db.put(b"lost", &[7u8; 3000]).unwrap();
        ftl.power_cut();
        drop(db);
    }

    // A segment whose pages did reach the device is kept, with its value.
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
    db.put(b"kept", &[8u8; 3000]).unwrap();
    ftl.execute(Command::Flush).unwrap().result.unwrap();
    ftl.power_cut();
    drop(db);
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), ecfg).unwrap();
    let s = db.stats();
    let (free, log) = baseline.unwrap();
    assert_eq!((s.free_segments, s.log_segments), (free - 1, log + 1));
    assert_eq!(db.get(b"kept").unwrap(), Some(vec![8u8; 3000]));
    assert_eq!(db.get(b"lost").unwrap(), None);
}

/// A batch that fails on the device (a program error, not a power cut) leaves a hole in the
/// value log; the engine carries on in a new segment. Batches acknowledged after it must
/// survive a later power cut: recovery's replay stops at a hole, so the engine moves its
/// checkpoint past it before the next batch.
#[test]
fn writes_acknowledged_after_a_failed_batch_survive_a_power_cut() {
    for pipelined in [false, true] {
        let store = RamStore::new();
        let backend = Backend::Ram(store);
        let cfg = DeviceConfig::new(geometry());
        let ftl = Arc::new(Ftl::format(&backend, cfg).unwrap());
        let db = Engine::open(ftl.clone(), EngineConfig::default()).unwrap();
        let value = |i: u32| vec![(i % 251) as u8; 3000 + i as usize];
        for i in 0..20u32 {
            db.put(format!("before{i}").as_bytes(), &value(i)).unwrap();
        }
        ftl.faults().fail_next_program(hwftl_sim::FaultTarget::Any);
        let failed = db.put(b"doomed", &value(999));
        assert!(
            failed.is_err(),
            "the injected program failure must reach the caller"
        );
        for i in 0..20u32 {
            let k = format!("after{i}");
            if pipelined {
                let ops = [WriteOp::Put(k.as_bytes(), &value(i))];
                let p = db.try_submit_write(&ops).unwrap();
                match p {
                    Some(p) => db.finish_write(p).unwrap(),
                    None => db.write(&ops).unwrap(),
                }
            } else {
                db.put(k.as_bytes(), &value(i)).unwrap();
            }
        }
        ftl.power_cut();
        drop(db);
        drop(ftl);
        let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
        let db = Engine::open(ftl, EngineConfig::default()).unwrap();
        for i in 0..20u32 {
            let before = db.get(format!("before{i}").as_bytes()).unwrap();
            assert!(
                before == Some(value(i)),
                "before{i} (pipelined: {pipelined})"
            );
            let after = db.get(format!("after{i}").as_bytes()).unwrap();
            assert!(
                after == Some(value(i)),
                "after{i}, acknowledged after the failed batch, is {} (pipelined: {pipelined})",
                if after.is_some() { "wrong" } else { "lost" }
            );
        }
        assert_eq!(db.get(b"doomed").unwrap(), None);
    }
}
