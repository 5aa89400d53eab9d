//! Batches that fail halfway through their layout (the drive runs out of free segments):
//! the hole their claimed pages leave in the value log must be behind the replay checkpoint
//! before anything else is written after it (garbage collection's moves included), and the
//! garbage they leave must be counted once, and only as the tail's until the checkpoint moves.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, Command, DeviceConfig, Ftl, Geometry, RamStore, PAGE_SIZE};
use lsm::{Engine, EngineConfig, EngineError, WriteOp};

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 64,
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
        ..EngineConfig::default()
    }
}

mod common;
use common::CutDevice;

/// A batch fails halfway through its layout (hole in the log, needs_checkpoint set). The next
/// put runs garbage collection (reclaim_stepwise) *before* Inner::write moves the checkpoint:
/// the moves land after the hole, the manifest drops the victims, and a power cut before the
/// checkpoint moves loses the moved values (replay stops at the hole and drops what follows).
#[test]
fn gc_moves_after_a_failed_layout_survive_a_power_cut() {
    let backend = Backend::Ram(RamStore::new());
    drop(Ftl::format(&backend, DeviceConfig::new(geometry())).unwrap());
    let seg = geometry().pages_per_segment() as usize * PAGE_SIZE;
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
    let seg = geometry().pages_per_segment() as usize * PAGE_SIZE;
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
    let after = db.stats().live_bytes;
    assert!(
        after >= live,
        "live_bytes {after} < live records {live} after the failed batch"
    );
    drop(db); // crash
    let db = open();
    let s = db.stats();
    assert!(
        s.live_bytes >= live,
        "live_bytes {} < live records {live}",
        s.live_bytes
    );
}
