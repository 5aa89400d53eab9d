//! Readers on several threads while a writer overwrites (forcing garbage collection, flushes
//! and compactions): every read returns a complete value of the right key, never older than
//! one the reader already saw.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};
use lsm::{Engine, EngineConfig, WriteOp};

const KEYS: u32 = 64;

fn value(key: u32, version: u32) -> Vec<u8> {
    let len = if key % 2 == 0 { 100 } else { 9000 };
    let mut v = vec![0u8; len];
    v[..4].copy_from_slice(&key.to_le_bytes());
    v[4..8].copy_from_slice(&version.to_le_bytes());
    let tail = v.len() - 4;
    v[tail..].copy_from_slice(&(key ^ version).to_le_bytes());
    v
}

#[test]
fn reads_stay_correct_while_writes_flush_compact_and_collect() {
    let g = Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 40,
        pages_per_block: 8,
        spare_blocks_per_chip: 2,
    };
    let dev: Arc<dyn AppendDevice> =
        Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 2048,
        l0_runs: 2,
        l1_bytes: 4096,
        level_ratio: 2,
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(dev, cfg).unwrap());
    for k in 0..KEYS {
        db.put(&k.to_le_bytes(), &value(k, 0)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let db = db.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = vec![0u32; KEYS as usize];
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = (reads as u32 * 7 + t) % KEYS;
                    let v = db.get(&k.to_le_bytes()).unwrap().expect("key present");
                    let version = u32::from_le_bytes(v[4..8].try_into().unwrap());
                    assert_eq!(v, value(k, version), "torn or foreign value for key {k}");
                    assert!(version >= seen[k as usize], "key {k} went back in time");
                    seen[k as usize] = version;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for round in 1..=300u32 {
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..4)
            .map(|i| {
                let k = (round * 13 + i * 5) % KEYS;
                (k.to_le_bytes().to_vec(), value(k, round))
            })
            .collect();
        let ops: Vec<WriteOp<'_>> = batch.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
        db.write(&ops).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let s = db.stats();
    assert!(reads > 100, "{reads} reads");
    assert!(s.gc_segments > 0 && s.compactions > 0, "{s:#?}");
}
