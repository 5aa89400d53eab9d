//! Values larger than a value-log segment (the 512 MiB default maximum is far above the
//! segment size of most devices): they span consecutive log segments and own them. Reads of
//! every kind, flushes, compactions, reopen, overwrites past the device's capacity (garbage
//! collection reclaiming and moving them) and a full drive all see them exactly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore, PAGE_SIZE};
use lsm::{Engine, EngineConfig, EngineError, WriteOp};

mod common;

/// 64-page (512 KiB) segments, 62 of them for data.
fn geometry() -> Geometry {
    common::small_geometry()
}

fn segment_bytes() -> usize {
    geometry().pages_per_segment() as usize * PAGE_SIZE
}

fn config() -> EngineConfig {
    EngineConfig {
        memtable_bytes: 64 << 10,
        l0_runs: 2,
        l1_bytes: 128 << 10,
        level_ratio: 2,
        gc_window_pages: 8,
        ..EngineConfig::default()
    }
}

fn format() -> Backend {
    let backend = Backend::Ram(RamStore::new());
    drop(Ftl::format(&backend, DeviceConfig::new(geometry())).unwrap());
    backend
}

fn open(backend: &Backend, cfg: EngineConfig) -> Engine {
    let dev: Arc<dyn AppendDevice> =
        Arc::new(Ftl::open(backend, DeviceConfig::new(geometry())).unwrap());
    Engine::open(dev, cfg).unwrap()
}

/// The offline check on the device as it is now finds nothing wrong.
fn fsck_clean(backend: &Backend) {
    let ro = Arc::new(Ftl::open_read_only(backend, DeviceConfig::new(geometry())).unwrap());
    let report = Engine::fsck(ro, config()).unwrap();
    assert!(report.is_clean(), "fsck:\n{report}");
}

fn value(id: u32, version: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13 ^ id ^ version << 3) as u8)
        .collect()
}

/// A short key, and a long one (its pages go into the value's first segment too).
fn keys() -> Vec<Vec<u8>> {
    let mut long = b"long-".to_vec();
    long.extend((0..5000u32).map(|i| (i * 7) as u8));
    vec![b"big-a".to_vec(), long, b"big-c".to_vec()]
}

fn check(db: &Engine, expected: &[(Vec<u8>, Vec<u8>)]) {
    for (k, v) in expected {
        let got = db.get(k).unwrap().expect("value present");
        assert_eq!(got.len(), v.len());
        assert!(
            got == *v,
            "value of {} differs",
            String::from_utf8_lossy(&k[..5])
        );
    }
    let ks: Vec<&[u8]> = expected.iter().map(|(k, _)| k.as_slice()).collect();
    let got = db.multi_get(&ks).unwrap();
    for ((_, v), g) in expected.iter().zip(got) {
        assert!(g.as_deref() == Some(v.as_slice()));
    }
    let lens = db.value_lens(&ks).unwrap();
    for ((_, v), l) in expected.iter().zip(lens) {
        assert_eq!(l, Some(v.len() as u32));
    }
    let all = db.range(b"", None, usize::MAX).unwrap();
    for (k, v) in expected {
        let found = all.iter().find(|(rk, _)| rk == k).expect("in range");
        assert!(found.1 == *v);
    }
}

#[test]
fn values_spanning_segments_read_back_after_flush_compaction_and_reopen() {
    let backend = format();
    let seg = segment_bytes();
    let sizes = [seg + 1, 3 * seg - 3 * PAGE_SIZE, 5 * seg / 2 + 17];
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = keys()
        .into_iter()
        .zip(sizes)
        .enumerate()
        .map(|(i, (k, len))| (k, value(i as u32, 0, len)))
        .collect();
    // Small values around the large ones, in the same batches.
    expected.push((b"small-1".to_vec(), b"one".to_vec()));
    expected.push((b"small-2".to_vec(), vec![9u8; 20_000]));
    {
        let db = open(&backend, config());
        let before = db.stats().free_segments;
        let ops: Vec<WriteOp<'_>> = [3, 0, 4, 1]
            .iter()
            .map(|&i| WriteOp::Put(&expected[i].0, &expected[i].1))
            .collect();
        db.write(&ops).unwrap();
        // Last in its batch: the batch ends in the value's last segment.
        db.put(&expected[2].0, &expected[2].1).unwrap();
        check(&db, &expected);
        let stats = db.stats();
        // 2 + 3 + 3 segments of their own, at least.
        assert!(
            before - stats.free_segments >= 8,
            "{before} free before, {} after",
            stats.free_segments
        );
        let big: u64 = sizes.iter().map(|&s| s as u64).sum();
        assert!(stats.live_bytes >= big);
        db.flush().unwrap();
        db.compact_all().unwrap();
        check(&db, &expected);
        db.close().unwrap();
    }
    // Reopened twice: after a clean close, and after replaying a tail that holds one.
    let db = open(&backend, config());
    check(&db, &expected);
    let again = value(9, 9, 2 * seg + 5);
    db.put(&expected[0].0, &again).unwrap();
    expected[0].1 = again;
    drop(db);
    let db = open(&backend, config());
    assert!(db.stats().replayed_records >= 1);
    check(&db, &expected);
    db.close().unwrap();
}

#[test]
fn overwriting_large_values_past_the_device_capacity_reclaims_their_segments() {
    let backend = format();
    let seg = segment_bytes();
    for policy in [
        Arc::new(lsm::LeastLive) as Arc<dyn lsm::GcPolicy>,
        Arc::new(lsm::Oldest),
    ] {
        let db = open(
            &backend,
            EngineConfig {
                gc_policy: policy,
                ..config()
            },
        );
        let keys = keys();
        let mut expected: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let capacity = u64::from(geometry().segments()) * seg as u64;
        let mut written = 0u64;
        let mut round = 0u32;
        // About three times the device through, in values of 1 to 3 segments, with small
        // overwrites in between.
        while written < 3 * capacity {
            for (i, k) in keys.iter().enumerate() {
                let len = seg / 2 + (round as usize * 77_777 + i * 300_001) % (5 * seg / 2);
                let v = value(i as u32, round, len);
                db.put(k, &v).unwrap();
                db.put(format!("small-{}", round % 50).as_bytes(), &v[..3000])
                    .unwrap();
                written += len as u64;
                match expected.iter_mut().find(|(ek, _)| ek == k) {
                    Some(e) => e.1 = v,
                    None => expected.push((k.clone(), v)),
                }
            }
            round += 1;
        }
        check(&db, &expected);
        let stats = db.stats();
        assert!(stats.gc_segments > 0, "{stats:#?}");
        db.close().unwrap();
        let db = open(&backend, config());
        check(&db, &expected);
        db.close().unwrap();
    }
}

/// Overwrites small values until garbage collection has reclaimed as many segments as the
/// device has; returns how many puts that took.
fn churn_until_collected(db: &Engine) -> u32 {
    let mut i = 0u32;
    while db.stats().gc_segments < u64::from(geometry().segments()) {
        let v = value(2, i, 30_000);
        db.put(format!("churn-{}", i % 40).as_bytes(), &v).unwrap();
        i += 1;
        assert!(
            i < 100_000,
            "garbage collection never ran: {:#?}",
            db.stats()
        );
    }
    i
}

/// The segments of a value spanning them hold nothing else and are counted as written whole,
/// also across a reopen that replays the value: garbage collection never takes the unwritten
/// rest of the last one for free space (it would move the whole value to win it back, and a
/// value spanning more segments than are free could not be moved at all, stopping every
/// write).
#[test]
fn a_spanning_value_keeps_its_segments_across_a_reopen() {
    let backend = format();
    let seg = segment_bytes();
    let keys = keys();
    let big = value(1, 1, 10 * seg - 5 * PAGE_SIZE);
    {
        let db = open(&backend, config());
        db.put(&keys[0], &big).unwrap();
        // Dropped without a flush: recovery replays the value.
        drop(db);
    }
    let fifo = EngineConfig {
        gc_policy: Arc::new(lsm::Oldest),
        ..config()
    };
    let db = open(&backend, fifo);
    assert_eq!(db.get(&keys[0]).unwrap().as_deref(), Some(big.as_slice()));
    churn_until_collected(&db);
    let stats = db.stats();
    assert!(
        stats.gc_bytes_moved < big.len() as u64,
        "the large value was moved: {stats:#?}"
    );
    assert_eq!(db.get(&keys[0]).unwrap().as_deref(), Some(big.as_slice()));
}

/// Reclaims the oldest candidate whatever it holds, live spanning values included.
#[derive(Debug)]
struct OldestEvenIfLive;

impl lsm::GcPolicy for OldestEvenIfLive {
    fn pick(&self, candidates: &[lsm::GcCandidate]) -> Option<u32> {
        candidates.iter().map(|c| c.log_seg).min()
    }
}

/// A live spanning value in a victim is read whole and moved, and reads back exactly after.
#[test]
fn a_live_spanning_value_in_a_victim_is_moved_whole() {
    let backend = format();
    let seg = segment_bytes();
    let keys = keys();
    let big = value(1, 1, 2 * seg + 4321);
    let long_big = value(3, 1, seg + 99);
    {
        let db = open(&backend, config());
        db.put(&keys[0], &big).unwrap();
        db.put(&keys[1], &long_big).unwrap();
        db.close().unwrap();
    }
    let db = open(
        &backend,
        EngineConfig {
            gc_policy: Arc::new(OldestEvenIfLive),
            ..config()
        },
    );
    churn_until_collected(&db);
    let stats = db.stats();
    assert!(
        stats.gc_bytes_moved >= (big.len() + long_big.len()) as u64,
        "the large values were not moved: {stats:#?}"
    );
    assert_eq!(db.get(&keys[0]).unwrap().as_deref(), Some(big.as_slice()));
    assert_eq!(
        db.get(&keys[1]).unwrap().as_deref(),
        Some(long_big.as_slice())
    );
    db.close().unwrap();
    fsck_clean(&backend);
    let db = open(&backend, config());
    assert_eq!(db.get(&keys[0]).unwrap().as_deref(), Some(big.as_slice()));
    assert_eq!(
        db.get(&keys[1]).unwrap().as_deref(),
        Some(long_big.as_slice())
    );
}

#[test]
fn a_value_above_the_maximum_or_the_free_space_is_refused_and_nothing_is_lost() {
    let backend = format();
    let seg = segment_bytes();
    let db = open(
        &backend,
        EngineConfig {
            max_value: 4 * seg as u64,
            ..config()
        },
    );
    let keep = value(3, 3, 2 * seg);
    db.put(b"keep", &keep).unwrap();
    let over = vec![1u8; 4 * seg + 1];
    assert!(matches!(
        db.put(b"over", &over),
        Err(EngineError::ValueTooLarge { .. })
    ));
    db.close().unwrap();
    // With the default maximum, a value larger than the whole device is refused as full.
    let db = open(&backend, config());
    let huge = vec![2u8; 70 * seg];
    let err = db.put(b"huge", &huge).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::CapacityFull { .. } | EngineError::DeviceFull { .. }
        ),
        "{err}"
    );
    assert_eq!(db.get(b"huge").unwrap(), None);
    assert_eq!(db.get(b"keep").unwrap().as_deref(), Some(keep.as_slice()));
    // Everything still works.
    let fits = value(4, 4, 3 * seg);
    db.put(b"fits", &fits).unwrap();
    db.delete(b"keep").unwrap();
    assert_eq!(db.get(b"fits").unwrap().as_deref(), Some(fits.as_slice()));
    db.close().unwrap();
    let db = open(&backend, config());
    assert_eq!(db.get(b"fits").unwrap().as_deref(), Some(fits.as_slice()));
    assert_eq!(db.get(b"keep").unwrap(), None);
}

/// A batch that runs out of free segments halfway through its layout (seventy values of just
/// over half a segment each, which fit the user capacity but need a segment apiece) fails
/// with nothing of it visible, and the segments it had opened are garbage: garbage
/// collection wins them back for the writes after it, and a crash after those loses none
/// of them.
#[test]
fn a_batch_that_runs_out_of_segments_halfway_leaves_no_space_behind() {
    let backend = format();
    let seg = segment_bytes();
    let db = open(&backend, config());
    let free_before = db.stats().free_segments;
    let values: Vec<(Vec<u8>, Vec<u8>)> = (0..70u32)
        .map(|i| {
            (
                format!("half-{i:02}").into_bytes(),
                value(i, 1, seg * 55 / 100),
            )
        })
        .collect();
    assert!(
        values.len() as u64 > free_before,
        "the batch must need more segments than are free ({free_before})"
    );
    let ops: Vec<WriteOp<'_>> = values.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
    let err = db.write(&ops).unwrap_err();
    assert!(matches!(err, EngineError::DeviceFull { .. }), "{err}");
    for (k, _) in &values {
        assert_eq!(db.get(k).unwrap(), None);
    }
    // The space comes back: values worth several times the device's free space go in one
    // after another, each overwriting the last.
    let mut acked = Vec::new();
    for i in 0..40u32 {
        let v = value(i, 2, 2 * seg);
        db.put(b"after", &v)
            .unwrap_or_else(|e| panic!("put {i} after the failed batch: {e}"));
        let small = format!("small-{i}").into_bytes();
        db.put(&small, &v[..100]).unwrap();
        acked.push((small, v[..100].to_vec()));
        if i == 39 {
            acked.push((b"after".to_vec(), v));
        }
    }
    // A crash (no close): every acknowledged write is there after the reopen, and the
    // offline check finds the failed batch's claimed segments accounted for.
    drop(db);
    fsck_clean(&backend);
    let db = open(&backend, config());
    for (k, v) in &acked {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    for (k, _) in &values {
        assert_eq!(db.get(k).unwrap(), None);
    }
    assert!(db.stats().free_segments > 4, "{:?}", db.stats());
}
