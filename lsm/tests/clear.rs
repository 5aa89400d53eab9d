//! `Engine::clear` (FLUSHALL): the store emptied in one atomic step whose cost does not
//! grow with the keys.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::num::NonZeroU64;
use std::sync::Arc;

use common::{formatted_ram as setup, open_engine as open};
use hwftl_sim::Ftl;
use lsm::{Engine, EngineConfig, WriteOp};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Far ahead (2100).
fn future() -> NonZeroU64 {
    NonZeroU64::new(4_102_444_800_000).unwrap()
}

/// `Engine::clear` empties the store in one step: nothing written before it reads back,
/// before or after a power cut, writes after it survive, every segment it freed is free,
/// and the device checks clean.
#[test]
fn clear_empties_the_store_at_once_and_survives_a_power_cut() {
    let (backend, cfg) = setup();
    let ecfg = EngineConfig {
        memtable_bytes: 64 << 10,
        ..EngineConfig::default()
    };
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
    let free_at_start = db.stats().free_segments;
    let value = vec![9u8; 3000];
    // Runs at several levels, a memtable, deadlines, a value past a page.
    for i in 0..600 {
        db.write(&[WriteOp::PutUntil(&key(i), &value, future())])
            .unwrap();
    }
    db.compact_all().unwrap();
    for i in 600..900 {
        db.put(&key(i), &value).unwrap();
    }
    db.put(b"big", &vec![1u8; 40_000]).unwrap();
    assert!(db.stats().free_segments < free_at_start);
    let writes = db.device_stats().writes;
    db.clear().unwrap();
    assert!(
        db.device_stats().writes - writes < 16,
        "a clear writes a manifest, not a tombstone per key"
    );
    assert_eq!(db.range(b"", None, usize::MAX).unwrap(), Vec::new());
    assert_eq!(
        (db.get(&key(5)).unwrap(), db.get(b"big").unwrap()),
        (None, None)
    );
    assert_eq!(db.stats().live_bytes, 0);
    db.put(b"after", b"1").unwrap();
    ftl.power_cut();
    drop(db);
    drop(ftl);
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
    assert_eq!(
        db.range(b"", None, usize::MAX).unwrap(),
        vec![(b"after".to_vec(), b"1".to_vec())]
    );
    // Only the new write's log segment and the manifest's are in use.
    assert!(db.stats().free_segments + 2 >= free_at_start);
    db.clear().unwrap();
    ftl.power_cut();
    drop(db);
    drop(ftl);
    let db = open(&backend, cfg, &ecfg);
    assert_eq!(db.range(b"", None, usize::MAX).unwrap(), Vec::new());
    db.close().unwrap();
    common::assert_fsck_clean(&backend, cfg, ecfg);
}
