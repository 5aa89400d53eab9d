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

/// Reads running while `clear` empties the store see the old store or the new one, never an
/// error: a read that loaded the version before the clear resolves its pointers through the
/// segment map, which must still be the old one until its pin is released (the clear waits
/// for it before it unmaps and trims). Before that order was fixed, a range read whose
/// pointers were resolved across the clear's publication failed with `Corrupt("value in log
/// segment N, which no longer exists")`.
#[test]
fn reads_during_a_clear_see_the_old_store_or_the_empty_one() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const KEYS: u32 = 400;
    const CLEARS: u32 = 30;
    let (backend, cfg) = setup();
    let ecfg = EngineConfig {
        memtable_bytes: 256 << 10,
        ..EngineConfig::default()
    };
    let db = Arc::new(open(&backend, cfg, &ecfg));
    let value = |i: u32| vec![u8::try_from(i % 251).unwrap(); 3000];
    let fill = |db: &Engine| {
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(16) {
            let keys: Vec<Vec<u8>> = chunk.iter().map(|&i| key(i)).collect();
            let values: Vec<Vec<u8>> = chunk.iter().map(|&i| value(i)).collect();
            let ops: Vec<WriteOp<'_>> = keys
                .iter()
                .zip(&values)
                .map(|(k, v)| WriteOp::Put(k, v))
                .collect();
            db.write(&ops).unwrap();
        }
    };
    fill(&db);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, stop, reads) = (db.clone(), stop.clone(), reads.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let all = db
                        .range(b"", None, usize::MAX)
                        .expect("a range read during clears");
                    for (k, v) in &all {
                        let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
                        assert_eq!(v, &value(i), "key {i}");
                    }
                    let keys: Vec<Vec<u8>> = (0..KEYS).step_by(7).map(key).collect();
                    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                    for (k, v) in refs.iter().zip(db.multi_get(&refs).expect("a multi_get")) {
                        if let Some(v) = v {
                            let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
                            assert_eq!(v, value(i), "key {i}");
                        }
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for _ in 0..CLEARS {
        db.clear().unwrap();
        fill(&db);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert_eq!(
        db.range(b"", None, usize::MAX).unwrap().len(),
        KEYS as usize
    );
}
