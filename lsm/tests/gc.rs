//! Garbage collection under sustained random overwrites: 3x the device's capacity written
//! with 80% of the value space live. Every read stays correct, the drive never fills, space
//! is reclaimed, and write amplification is reported.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};
use lsm::{Engine, EngineConfig, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const VALUE: usize = 8192;

fn value(key: u32, version: u32) -> Vec<u8> {
    let mut v = vec![0u8; VALUE];
    for (i, chunk) in v.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(
            &(u64::from(key) << 40 | u64::from(version) << 16 | i as u64).to_le_bytes(),
        );
    }
    v
}

#[test]
fn sustained_overwrites_at_80_percent_live_are_reclaimed() {
    let g = Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 256,
        pages_per_block: 16,
        spare_blocks_per_chip: 2,
    };
    let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 64 << 10,
        ..EngineConfig::default()
    };
    let db = Engine::open(dev.clone() as Arc<dyn AppendDevice>, cfg).unwrap();
    let capacity = g.capacity_bytes();
    let keys = (capacity * 8 / 10 / VALUE as u64) as u32;
    let mut versions = vec![0u32; keys as usize];
    for k in 0..keys {
        db.put(format!("key{k:06}").as_bytes(), &value(k, 0))
            .unwrap();
    }
    let mut rng = SmallRng::seed_from_u64(3);
    // Overwrites arrive 16 at a time, as concurrent clients' writes are group-committed.
    let overwrites = capacity * 3 / VALUE as u64;
    let before = db.stats();
    let mut i = 0;
    while i < overwrites {
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..16)
            .map(|_| {
                let k = rng.gen_range(0..keys);
                versions[k as usize] += 1;
                (
                    format!("key{k:06}").into_bytes(),
                    value(k, versions[k as usize]),
                )
            })
            .collect();
        let ops: Vec<WriteOp<'_>> = batch.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
        db.write(&ops)
            .unwrap_or_else(|e| panic!("overwrite {i} of {overwrites}: {e}\n{:#?}", db.stats()));
        i += 16;
    }
    let after = db.stats();
    for k in 0..keys {
        let got = db.get(format!("key{k:06}").as_bytes()).unwrap();
        assert_eq!(got, Some(value(k, versions[k as usize])), "key {k}");
    }
    let user = after.user_bytes_written - before.user_bytes_written;
    let device = after.device_bytes_written - before.device_bytes_written;
    let wa = device as f64 / user as f64;
    println!(
        "capacity {} MiB, live {} MiB, overwrote {} MiB: device wrote {} MiB, write amplification {wa:.2}, {} segments reclaimed, {} MiB moved",
        capacity >> 20,
        (u64::from(keys) * VALUE as u64) >> 20,
        user >> 20,
        device >> 20,
        after.gc_segments,
        after.gc_bytes_moved >> 20
    );
    assert!(after.gc_segments > 0);
    assert!(wa < 6.0, "write amplification {wa:.2}");
    // Reopen: everything is still there.
    drop(db);
    let db = Engine::open(dev as Arc<dyn AppendDevice>, EngineConfig::default()).unwrap();
    for k in (0..keys).step_by(7) {
        let got = db.get(format!("key{k:06}").as_bytes()).unwrap();
        assert_eq!(
            got,
            Some(value(k, versions[k as usize])),
            "key {k} after reopen"
        );
    }
}
