//! Garbage collection's read-ahead and its move writes share the device's command tags with
//! clients' asynchronous reads: the moves must find tags (waiting for them) rather than fail
//! with `QueueFull`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore, Release, TimingModel};
use lsm::{Engine, EngineConfig, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;

/// The tag budget (read.rs: async reads keep at most ASYNC_READ_WINDOW = 64 pages on the
/// device, "the rest of the device's command tags stay free for writes"): GC's read-ahead
/// keeps another gc_window_pages (64) reads on the device while the moves are written through
/// `Poller::run`, which does not wait for a free tag. With clients reading at the same time,
/// the default 128 tags run out and the GC move write (and the client write that ran GC)
/// fails with QueueFull.
#[test]
fn gc_moves_find_tags_while_the_read_ahead_and_client_reads_are_in_flight() {
    let g = common::small_geometry();
    let cfg = DeviceConfig {
        timing: TimingModel::PaperCard,
        release: Release::WallClock,
        ..DeviceConfig::new(g)
    };
    let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), cfg).unwrap());
    let ecfg = EngineConfig {
        memtable_bytes: 64 << 10,
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(dev as Arc<dyn AppendDevice>, ecfg).unwrap());
    let user_capacity = db.stats().user_capacity_bytes;
    let keys = (user_capacity * 70 / 100 / 8300) as u32;
    for k in 0..keys {
        db.put(format!("key{k:06}").as_bytes(), &vec![k as u8; 8192])
            .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let read_errors = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (db, stop, errs) = (db.clone(), stop.clone(), read_errors.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                while !stop.load(Ordering::Relaxed) {
                    let ks: Vec<Vec<u8>> = (0..64)
                        .map(|_| format!("key{:06}", rng.gen_range(0..keys)).into_bytes())
                        .collect();
                    let refs: Vec<&[u8]> = ks.iter().map(Vec::as_slice).collect();
                    let (tx, rx) = std::sync::mpsc::channel();
                    let errs2 = errs.clone();
                    db.multi_get_async(
                        &refs,
                        Box::new(move |r| {
                            if r.is_err() {
                                errs2.fetch_add(1, Ordering::Relaxed);
                            }
                            let _ = tx.send(());
                        }),
                    );
                    let _ = rx.recv();
                }
            })
        })
        .collect();
    let mut rng = SmallRng::seed_from_u64(3);
    let overwrites = g.capacity_bytes() * 2 / 8192;
    let mut i = 0;
    let mut failure = None;
    while i < overwrites {
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..16)
            .map(|_| {
                let k = rng.gen_range(0..keys);
                (
                    format!("key{k:06}").into_bytes(),
                    vec![(k ^ i as u32) as u8; 8192],
                )
            })
            .collect();
        let ops: Vec<WriteOp<'_>> = batch.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
        if let Err(e) = db.write(&ops) {
            failure = Some(format!("overwrite batch {i}: {e}; {:?}", db.stats()));
            break;
        }
        i += 16;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(read_errors.load(Ordering::Relaxed), 0, "{:?}", db.stats());
    assert!(failure.is_none(), "{}", failure.unwrap());
}
