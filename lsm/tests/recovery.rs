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
        drop(ftl);
        common::assert_fsck_clean(&backend, cfg, ecfg.clone());
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
            matches!(failed, Err(lsm::EngineError::WriteNotApplied(_))),
            "the injected program failure must reach the caller as not applied: {failed:?}"
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
        common::assert_fsck_clean(&backend, cfg, EngineConfig::default());
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

/// A device large enough that a few hundred one-page batches stay under the replay budget,
/// and an engine whose memtable holds them all: only explicit flushes move the checkpoint.
fn tail_setup() -> (Backend, DeviceConfig, EngineConfig) {
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig::new(Geometry {
        blocks_per_chip: 160,
        pages_per_block: 16,
        ..geometry()
    });
    drop(Ftl::format(&backend, cfg).unwrap());
    let ecfg = EngineConfig {
        memtable_bytes: 4 << 20,
        ..EngineConfig::default()
    };
    (backend, cfg, ecfg)
}

fn small_value(i: u32) -> Vec<u8> {
    (0..100 + i % 50).map(|j| (i ^ j) as u8).collect()
}

/// Writes `flushed` keys and flushes, then `tail` more one-page batches (acknowledged, in
/// the unflushed tail), and cuts the power. Returns the model of acknowledged writes.
fn write_then_cut(
    backend: &Backend,
    cfg: DeviceConfig,
    ecfg: &EngineConfig,
    flushed: u32,
    tail: u32,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let ftl = Arc::new(Ftl::open(backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..flushed + tail {
        if i == flushed {
            db.flush().unwrap();
        }
        let k = format!("key{i:05}").into_bytes();
        db.put(&k, &small_value(i)).unwrap();
        model.insert(k, small_value(i));
    }
    assert_eq!(db.stats().flushes, 1, "the tail must not have been flushed");
    ftl.power_cut();
    drop(db);
    model
}

/// The device LBA of page `page_after_checkpoint` pages after the replay checkpoint.
fn tail_lba(dev: &dyn AppendDevice, page_after_checkpoint: u32) -> (u32, u32, u32, hwftl_sim::Lba) {
    let (_, snap) = ManifestStore::load(dev).unwrap();
    let snap = snap.unwrap();
    let (log_seg, page) = snap.checkpoint;
    let page = page + page_after_checkpoint;
    let meta = snap
        .log_segs
        .iter()
        .find(|m| m.log_seg == log_seg)
        .expect("the checkpoint's log segment");
    assert!(page < dev.geometry().pages_per_segment());
    let lba = dev.geometry().lba(hwftl_sim::SegmentId(meta.segment), page);
    (log_seg, meta.segment, page, lba)
}

/// The LBA of the last raw page of the value `key` was written with, found by reading the
/// value-log segments the manifest lists.
fn last_raw_page_of(dev: &dyn AppendDevice, key: &[u8]) -> hwftl_sim::Lba {
    let at = common::record_of(dev, key);
    assert!(at.raw_after > 0);
    dev.geometry().lba(at.segment, at.page + at.raw_after)
}

fn assert_all_there(db: &Engine, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let all: BTreeMap<Vec<u8>, Vec<u8>> = db
        .range(b"", None, usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    let missing = model.keys().filter(|k| !all.contains_key(*k)).count();
    assert_eq!(missing, 0, "{missing} acknowledged keys are missing");
    assert_eq!(&all, model);
}

/// One flipped bit in an early page of the unflushed tail, with hundreds of acknowledged
/// batches after it: not a torn write. The open must fail naming the page and trim nothing,
/// a read-only open must show everything but the damaged batch, and once the bit is
/// restored every acknowledged write must be there.
#[test]
fn a_bit_flip_mid_tail_stops_the_open_and_trims_nothing() {
    let (backend, cfg, ecfg) = tail_setup();
    let model = write_then_cut(&backend, cfg, &ecfg, 100, 300);
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let (log_seg, segment, page, lba) = tail_lba(ftl.as_ref(), 3);
    let free_before = ftl.stats().free_segments;
    ftl.corrupt_page(lba, 100).unwrap();
    match Engine::open(ftl.clone(), ecfg.clone()) {
        Err(lsm::EngineError::LogDamaged {
            log_seg: l,
            segment: s,
            page: p,
            reason,
        }) => {
            assert_eq!((l, s, p), (log_seg, segment, page), "{reason}");
            assert!(reason.contains("checksum"), "{reason}");
        }
        Err(e) => panic!("the open failed with another error: {e}"),
        Ok(_) => panic!("a damaged tail was opened as if torn"),
    }
    assert_eq!(
        ftl.stats().free_segments,
        free_before,
        "the failed open trimmed segments"
    );

    // Read-only: everything but the damaged batch (one key) can be copied off.
    {
        let ro = EngineConfig {
            read_only_recovery: true,
            ..ecfg.clone()
        };
        let db = Engine::open(ftl.clone(), ro).unwrap();
        let all: BTreeMap<Vec<u8>, Vec<u8>> = db
            .range(b"", None, usize::MAX)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(
            all.len(),
            model.len() - 1,
            "only the damaged batch is missing"
        );
        assert!(all.iter().all(|(k, v)| model.get(k) == Some(v)));
        assert_eq!(db.stats().recovery_damage, 1);
        assert!(matches!(
            db.put(b"x", b"y"),
            Err(lsm::EngineError::ReadOnly)
        ));
        assert!(matches!(db.flush(), Err(lsm::EngineError::ReadOnly)));
        db.settle().unwrap();
        db.close().unwrap();
    }
    assert_eq!(ftl.stats().free_segments, free_before);

    // The bit restored: nothing was lost.
    ftl.corrupt_page(lba, 100).unwrap();
    let db = Engine::open(ftl.clone(), ecfg).unwrap();
    assert_all_there(&db, &model);
    db.close().unwrap();
}

/// A read error that goes away when read again is not the end of the log.
#[test]
fn a_transient_read_error_in_the_tail_is_read_again() {
    let (backend, cfg, ecfg) = tail_setup();
    let model = write_then_cut(&backend, cfg, &ecfg, 50, 100);
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let (_, _, _, lba) = tail_lba(ftl.as_ref(), 2);
    ftl.faults()
        .fail_next_read(hwftl_sim::FaultTarget::Lba(lba));
    let db = Engine::open(ftl.clone(), ecfg).unwrap();
    assert!(db.stats().recovery_read_retries >= 1);
    assert_all_there(&db, &model);
    db.close().unwrap();
}

/// A cut in the middle of the last batch (its raw pages never written) and a garbled last
/// page of the last batch are torn writes: the open succeeds and drops only that batch.
#[test]
fn a_torn_last_batch_still_opens_and_drops_only_that_batch() {
    use std::sync::atomic::{AtomicI64, Ordering};
    // 1. Cut before the second page of the last batch reaches the device.
    let (backend, cfg, ecfg) = tail_setup();
    let model = write_then_cut(&backend, cfg, &ecfg, 20, 60);
    {
        let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
        let writes = Arc::new(AtomicI64::new(i64::MAX));
        let countdown = writes.clone();
        let dev = Arc::new(common::CutDevice::new(
            ftl.clone(),
            Box::new(move |cmd| {
                matches!(cmd, Command::Write { .. })
                    && countdown.fetch_sub(1, Ordering::SeqCst) == 1
            }),
        ));
        let db = Engine::open(dev, ecfg.clone()).unwrap();
        assert_all_there(&db, &model);
        writes.store(2, Ordering::SeqCst);
        let big = vec![9u8; 20_000];
        let r = db.write(&[
            WriteOp::Put(b"torn-a", &big),
            WriteOp::Put(b"torn-b", b"small"),
        ]);
        assert!(r.is_err(), "the cut must fail the batch");
        ftl.power_cut();
    }
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
    assert_all_there(&db, &model);
    db.close().unwrap();

    // 2. A garbled last page (the last raw page of the last batch, as a torn program on a
    //    real disk leaves it).
    let (backend, cfg, ecfg) = tail_setup();
    let mut model = write_then_cut(&backend, cfg, &ecfg, 20, 60);
    let last_batch_pages = {
        let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
        let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
        let before = ftl.stats().writes;
        db.put(b"last", &vec![5u8; 20_000]).unwrap();
        let pages = ftl.stats().writes - before;
        ftl.power_cut();
        pages
    };
    assert!(last_batch_pages >= 2, "{last_batch_pages}");
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    // The last raw page of the last batch.
    let lba = last_raw_page_of(ftl.as_ref(), b"last");
    ftl.corrupt_page(lba, 100).unwrap();
    let db = Engine::open(ftl.clone(), ecfg).unwrap();
    assert!(
        db.get(b"last").unwrap().is_none(),
        "the torn batch was applied"
    );
    model.remove(b"last".as_slice());
    assert_all_there(&db, &model);
    db.close().unwrap();
}
