//! Batches that fail (halfway through their layout, the drive out of free segments, or on
//! the device): the hole they leave in the value log must be behind the replay checkpoint
//! before anything written after it is the only copy of a value (a client batch, or garbage
//! collection's moves once their victims leave the manifest), and the garbage they leave
//! must be counted once, and only as the tail's until the checkpoint moves.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, Command, DeviceConfig, Ftl, Geometry, RamStore, PAGE_SIZE};
use lsm::manifest::MANIFEST_SEGMENTS;
use lsm::{Engine, EngineConfig, EngineError, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn geometry() -> Geometry {
    common::small_geometry()
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

mod common;
use common::CutDevice;

/// Keys read back per `multi_get` when a test checks every key.
const VERIFY_CHUNK: usize = 256;

/// Writes a batch of values of 0.55 of a segment each, five more than there are free
/// segments: it fails halfway through its layout with `DeviceFull`.
fn fail_a_layout(db: &Engine) {
    let seg = geometry().pages_per_segment() as usize * PAGE_SIZE;
    let free = db.stats().free_segments;
    let values: Vec<(Vec<u8>, Vec<u8>)> = (0..free as u32 + 5)
        .map(|i| {
            (
                format!("half-{i:02}").into_bytes(),
                vec![i as u8; seg * 55 / 100],
            )
        })
        .collect();
    let ops: Vec<WriteOp<'_>> = values.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
    let err = db.write(&ops).unwrap_err();
    assert!(matches!(err, EngineError::DeviceFull { .. }), "{err}");
}

/// A batch fails halfway through its layout (hole in the log, needs_checkpoint set). The next
/// put runs garbage collection (reclaim_stepwise) *before* Inner::write moves the checkpoint:
/// the moves land after the hole, the manifest drops the victims, and a power cut before the
/// checkpoint moves loses the moved values (replay stops at the hole and drops what follows).
#[test]
fn gc_moves_after_a_failed_layout_survive_a_power_cut() {
    let backend = Backend::Ram(RamStore::new());
    drop(Ftl::format(&backend, DeviceConfig::new(geometry())).unwrap());
    let ftl = Arc::new(Ftl::open(&backend, DeviceConfig::new(geometry())).unwrap());
    // Cuts the power at the first TRIM once armed.
    let armed = Arc::new(AtomicBool::new(false));
    let trip = armed.clone();
    let dev = Arc::new(CutDevice::new(
        ftl,
        Box::new(move |cmd| {
            matches!(cmd, Command::Trim { .. }) && trip.swap(false, Ordering::SeqCst)
        }),
    ));
    let db = Engine::open(dev.clone(), config()).unwrap();
    // Cold values sharing their segments with junk that dies at once.
    let mut keep = Vec::new();
    for i in 0..300u32 {
        let k = format!("keep-{i:03}").into_bytes();
        let v = vec![(i % 251) as u8; 500];
        db.put(&k, &v).unwrap();
        keep.push((k, v));
        db.put(b"junk", &vec![i as u8; 8192]).unwrap();
    }
    db.flush().unwrap();
    fail_a_layout(&db);
    armed.store(true, Ordering::SeqCst);
    // Runs garbage collection (free segments are low), which persists the manifest without
    // its victims and then trims them: the power goes at the first trim.
    let _ = db.put(b"next", b"x");
    drop(db);
    drop(dev);
    let ftl = Arc::new(Ftl::open(&backend, DeviceConfig::new(geometry())).unwrap());
    let db = Engine::open(ftl, config()).unwrap();
    let mut lost = 0;
    for (k, v) in &keep {
        match db.get(k) {
            Ok(Some(got)) if got == *v => {}
            other => {
                lost += 1;
                if lost < 3 {
                    eprintln!(
                        "{}: {:?}",
                        String::from_utf8_lossy(k),
                        other.map(|o| o.map(|v| v.len()))
                    );
                }
            }
        }
    }
    assert_eq!(lost, 0, "acknowledged cold values lost after the cut");
}

/// The garbage `forget_layout` counts is stored in the manifest as final (`dead`, not
/// `tail_dead`), but a crash before the checkpoint moves makes recovery cut the head's
/// `written` back to the hole: the live bytes then read less than the live records hold.
#[test]
fn live_bytes_never_undercount_after_a_failed_layout_and_a_crash() {
    let backend = Backend::Ram(RamStore::new());
    drop(Ftl::format(&backend, DeviceConfig::new(geometry())).unwrap());
    let open = || {
        let ftl: Arc<dyn AppendDevice> =
            Arc::new(Ftl::open(&backend, DeviceConfig::new(geometry())).unwrap());
        Engine::open(ftl, config()).unwrap()
    };
    let db = open();
    let mut live = 0u64;
    for i in 0..10u32 {
        let k = format!("keep-{i:03}").into_bytes();
        db.put(&k, &vec![i as u8; 3000]).unwrap();
        live += lsm::vlog_format::stored_record_bytes(k.len(), 3000);
    }
    fail_a_layout(&db);
    let after = db.stats().live_bytes;
    assert!(
        after >= live,
        "live_bytes {after} < live records {live} after the failed batch"
    );
    drop(db); // crash
    let ro = Arc::new(Ftl::open_read_only(&backend, DeviceConfig::new(geometry())).unwrap());
    let report = Engine::fsck(ro, config()).unwrap();
    assert!(report.is_clean(), "fsck:\n{report}");
    let db = open();
    let s = db.stats();
    assert!(
        s.live_bytes >= live,
        "live_bytes {} < live records {live}",
        s.live_bytes
    );
}

const VALUE: usize = 8192;

fn versioned(key: u32, version: u32) -> Vec<u8> {
    common::stamped_value(key, version, VALUE)
}

/// A client batch fails on the device (a hole), the next puts run garbage collection with
/// the hole still ahead of the checkpoint, and the power goes at the first to third manifest
/// write after that; 150 times over, at 80% of the user capacity. Every acknowledged value
/// must come back (the one in flight at the cut may be old or new). Victims used to leave the
/// manifest with any manifest write (a new head segment's, say) while their moved values
/// sat after the hole, and recovery then lost them.
#[test]
fn gc_after_a_failed_write_survives_cuts_at_manifest_writes() {
    let g = geometry();
    let backend = Backend::Ram(RamStore::new());
    drop(Ftl::format(&backend, DeviceConfig::new(g)).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 64 << 10,
        gc_window_pages: 16,
        ..EngineConfig::default()
    };
    let mut rng = SmallRng::seed_from_u64(7);
    let (mut acked, mut tried): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
    let mut keys = 0u32;
    let key = |k: u32| format!("key{k:06}").into_bytes();
    for cycle in 0..150 {
        // The device as the cut left it (a failed batch's hole in the log among it) passes
        // the offline check.
        {
            let ro = Arc::new(Ftl::open_read_only(&backend, DeviceConfig::new(g)).unwrap());
            let report = Engine::fsck(ro, cfg.clone()).unwrap();
            assert!(report.is_clean(), "cycle {cycle}: fsck:\n{report}");
        }
        let ftl = Arc::new(Ftl::open(&backend, DeviceConfig::new(g)).unwrap());
        // Counts down on manifest writes (appends to the manifest's segments).
        let left = Arc::new(AtomicI64::new(i64::MAX));
        let countdown = left.clone();
        let dev = Arc::new(CutDevice::new(
            ftl.clone(),
            Box::new(move |cmd| {
                matches!(cmd, Command::Append { segment, .. }
                    if MANIFEST_SEGMENTS.contains(&segment.0))
                    && countdown.fetch_sub(1, Ordering::SeqCst) == 1
            }),
        ));
        let db = Engine::open(dev.clone() as Arc<dyn AppendDevice>, cfg.clone()).unwrap();
        if keys == 0 {
            let record = lsm::vlog_format::stored_record_bytes(9, VALUE);
            keys = (db.stats().user_capacity_bytes * 80 / 100 / record) as u32;
            (acked, tried) = (vec![0; keys as usize], vec![0; keys as usize]);
            for k in 0..keys {
                db.put(&key(k), &versioned(k, 0)).unwrap();
            }
        } else {
            // Read back in chunks (one device round trip per chunk, not per key).
            let all: Vec<u32> = (0..keys).collect();
            for chunk in all.chunks(VERIFY_CHUNK) {
                let names: Vec<Vec<u8>> = chunk.iter().map(|&k| key(k)).collect();
                let refs: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
                let values = db.multi_get(&refs).unwrap_or_else(|e| {
                    panic!(
                        "cycle {cycle}, keys {}..={}: {e}",
                        chunk[0],
                        chunk[chunk.len() - 1]
                    )
                });
                for (&k, got) in chunk.iter().zip(values) {
                    let i = k as usize;
                    let got = got.unwrap_or_else(|| panic!("cycle {cycle}, key {k} is gone"));
                    if got == versioned(k, tried[i]) {
                        acked[i] = tried[i];
                    } else {
                        assert!(got == versioned(k, acked[i]), "cycle {cycle}, key {k}");
                    }
                    tried[i] = acked[i];
                }
            }
        }
        let mut put = |db: &Engine, rng: &mut SmallRng| {
            let k = rng.gen_range(0..keys) as usize;
            tried[k] = acked[k] + 1;
            let r = db.put(&key(k as u32), &versioned(k as u32, tried[k]));
            if r.is_ok() {
                acked[k] = tried[k];
            }
            r
        };
        // A random point of the garbage collection cycle.
        for _ in 0..rng.gen_range(0..200) {
            put(&db, &mut rng).unwrap();
        }
        // With background maintenance idle, the refused write is a client batch's.
        db.settle().unwrap();
        dev.refuse_next_write();
        assert!(
            (0..50).any(|_| put(&db, &mut rng).is_err()),
            "the refused write must fail a put"
        );
        left.store(rng.gen_range(1..4), Ordering::SeqCst);
        for _ in 0..100 {
            if put(&db, &mut rng).is_err() || left.load(Ordering::SeqCst) <= 0 {
                break;
            }
        }
        ftl.power_cut();
    }
}
