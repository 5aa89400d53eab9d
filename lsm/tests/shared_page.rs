//! The shared open page of `EngineConfig::ack_from_dram` (the engine's `open_page` module):
//! small batches acknowledged from DRAM add their records to the page the batch before them
//! left open instead of writing a page each. These tests check that it saves the device
//! writes it is for, and that it changes nothing a client can see:
//! - every acknowledged write reads back before and after its page is sealed, and after a
//!   `sync` and a power cut;
//! - a batch that does not fit (a raw value, too many records) seals the page first, and the
//!   log still recovers whole;
//! - a shared page, once sealed and landed, is read whole from the value cache;
//! - a power cut with a page open loses a suffix of the unsynced batches, never a batch in
//!   part, and leaves a store the offline check passes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl};
use lsm::{Engine, EngineConfig, WriteOp};

use common::{assert_fsck_clean, formatted_ram};

fn config(cache: u64) -> EngineConfig {
    EngineConfig {
        flush_writes: false,
        ack_from_dram: true,
        value_cache_bytes: cache,
        // No copies of small values with their versions: a read needs the page.
        entry_value_max: 0,
        ..EngineConfig::default()
    }
}

fn key(k: u32) -> Vec<u8> {
    format!("user:{k:06}").into_bytes()
}

fn value(k: u32, len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i * 13 + k * 7) as u8).collect()
}

fn open(backend: &Backend, cfg: DeviceConfig, ecfg: EngineConfig) -> (Arc<Ftl>, Engine) {
    let ftl = Arc::new(Ftl::open(backend, cfg).unwrap());
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, ecfg).unwrap();
    (ftl, db)
}

#[test]
fn small_batches_share_pages_and_survive_sync_and_a_power_cut() {
    let (backend, cfg) = formatted_ram();
    let (ftl, db) = open(&backend, cfg, config(0));
    let before = ftl.stats().writes;
    for k in 0..400 {
        db.put(&key(k), &value(k, 100)).unwrap();
        // Read back at once: from the open page's copy in the landing buffer.
        assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 100)), "key {k}");
    }
    db.sync().unwrap();
    let pages = ftl.stats().writes - before;
    let s = db.stats();
    assert!(s.shared_page_joins >= 300, "{s:?}");
    // 400 records of ~120 bytes are ~6 pages' worth; one page per put would be 400.
    assert!(
        pages < 60,
        "{pages} device writes for 400 small puts (log pages and any keytable or manifest)"
    );
    assert_eq!(s.landing_pages, 0, "sync landed everything");
    for k in 0..400 {
        assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 100)), "key {k}");
    }
    ftl.power_cut();
    drop(db);
    let (_ftl, db) = open(&backend, cfg, config(0));
    for k in 0..400 {
        assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 100)), "key {k}");
    }
    db.close().unwrap();
    assert_fsck_clean(&backend, cfg, config(0));
}

#[test]
fn a_batch_that_does_not_fit_seals_the_open_page_first() {
    let (backend, cfg) = formatted_ram();
    let (ftl, db) = open(&backend, cfg, config(0));
    let mut expect: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut k = 0u32;
    for round in 0..30 {
        // Small puts that share a page...
        for _ in 0..5 {
            db.put(&key(k), &value(k, 80)).unwrap();
            expect.push((key(k), value(k, 80)));
            k += 1;
        }
        // ... then a raw value (its own pages after the sealed page), a delete, a batch too
        // large for any open page, and a value spanning nothing but several pages.
        let big = value(k, 20_000 + round * 100);
        db.put(&key(k), &big).unwrap();
        expect.push((key(k), big));
        k += 1;
        db.delete(&key(k - 3)).unwrap();
        expect.retain(|(kk, _)| *kk != key(k - 3));
        let many: Vec<(Vec<u8>, Vec<u8>)> =
            (0..90).map(|i| (key(k + i), value(k + i, 100))).collect();
        let ops: Vec<WriteOp<'_>> = many.iter().map(|(a, b)| WriteOp::Put(a, b)).collect();
        db.write(&ops).unwrap();
        expect.extend(many);
        k += 90;
    }
    for (kk, v) in &expect {
        assert_eq!(db.get(kk).unwrap().as_ref(), Some(v));
    }
    db.sync().unwrap();
    ftl.power_cut();
    drop(db);
    let (_ftl, db) = open(&backend, cfg, config(0));
    for (kk, v) in &expect {
        assert_eq!(db.get(kk).unwrap().as_ref(), Some(v));
    }
    db.close().unwrap();
    assert_fsck_clean(&backend, cfg, config(0));
}

#[test]
fn pages_shared_then_sealed_are_read_from_the_value_cache() {
    let (backend, cfg) = formatted_ram();
    let (ftl, db) = open(&backend, cfg, config(4 << 20));
    // The first opens a page; the rest join it, each after the one before was applied.
    for k in 0..20 {
        db.put(&key(k), &value(k, 150)).unwrap();
    }
    assert!(db.stats().shared_page_joins >= 15, "{:?}", db.stats());
    db.sync().unwrap();
    assert_eq!(db.stats().landing_pages, 0);
    let reads = ftl.stats().reads;
    for k in 0..20 {
        assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 150)), "key {k}");
        let Ok(lsm::GetNow::Hot(v)) = db.get_now(&key(k), &[]) else {
            panic!("key {k}: not answered from DRAM");
        };
        assert_eq!(&v[..], &value(k, 150)[..], "key {k}");
    }
    assert_eq!(
        ftl.stats().reads,
        reads,
        "the sealed page was read from the device instead of the cache"
    );
}

#[test]
fn a_power_cut_with_a_page_open_loses_a_suffix_of_unsynced_batches_only() {
    for cut_after in [0u32, 1, 3, 7, 20] {
        let (backend, cfg) = formatted_ram();
        let (ftl, db) = open(&backend, cfg, config(0));
        for k in 0..50 {
            db.put(&key(k), &value(k, 100)).unwrap();
        }
        db.sync().unwrap();
        // Batches of two keys each, acknowledged from DRAM, then the power goes.
        for b in 0..cut_after {
            let (k1, k2) = (1000 + 2 * b, 1001 + 2 * b);
            let (v1, v2) = (value(k1, 100), value(k2, 100));
            db.write(&[WriteOp::Put(&key(k1), &v1), WriteOp::Put(&key(k2), &v2)])
                .unwrap();
        }
        ftl.power_cut();
        drop(db);
        let (_ftl, db) = open(&backend, cfg, config(0));
        for k in 0..50 {
            assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 100)), "key {k}");
        }
        let mut lost = false;
        for b in 0..cut_after {
            let (k1, k2) = (1000 + 2 * b, 1001 + 2 * b);
            let (v1, v2) = (db.get(&key(k1)).unwrap(), db.get(&key(k2)).unwrap());
            assert_eq!(v1.is_some(), v2.is_some(), "batch {b} recovered in part");
            match v1 {
                Some(v) => {
                    assert!(!lost, "batch {b} recovered after a lost one");
                    assert_eq!(v, value(k1, 100));
                    assert_eq!(v2, Some(value(k2, 100)));
                }
                None => lost = true,
            }
        }
        db.close().unwrap();
        assert_fsck_clean(&backend, cfg, config(0));
    }
}

/// The engine on a device that can refuse a write; open pages linger until something seals
/// them (not the maintenance thread's clock), so the test decides which page is refused.
fn on_cut_device(backend: &Backend, cfg: DeviceConfig) -> (Arc<common::CutDevice>, Engine) {
    let ftl = Arc::new(Ftl::open(backend, cfg).unwrap());
    let dev = Arc::new(common::CutDevice::new(ftl, Box::new(|_| false)));
    let ecfg = EngineConfig {
        open_page_linger: std::time::Duration::from_secs(3600),
        ..config(0)
    };
    let db = Engine::open(dev.clone() as Arc<dyn AppendDevice>, ecfg).unwrap();
    (dev, db)
}

/// A batch whose first page is refused at submission fails, and the page it would have left
/// open is dropped with it: the garbage counts stay exact (the offline check recounts them).
#[test]
fn a_refused_opener_drops_its_open_page_and_the_counts_stay_exact() {
    let (backend, cfg) = formatted_ram();
    let (dev, db) = on_cut_device(&backend, cfg);
    db.put(b"before", &value(1, 100)).unwrap();
    db.sync().unwrap();
    // ~13 KiB of small records: one sealed page and one left open.
    let many: Vec<(Vec<u8>, Vec<u8>)> = (0..100).map(|i| (key(i), value(i, 100))).collect();
    let ops: Vec<WriteOp<'_>> = many.iter().map(|(a, b)| WriteOp::Put(a, b)).collect();
    dev.refuse_next_write();
    let err = db.write(&ops).unwrap_err();
    assert!(matches!(err, lsm::EngineError::WriteNotApplied(_)), "{err}");
    assert_eq!(db.get(&key(5)).unwrap(), None);
    // Writes go on (past the hole) and share pages again.
    for k in 200..260 {
        db.put(&key(k), &value(k, 100)).unwrap();
    }
    db.close().unwrap();
    drop(dev);
    assert_fsck_clean(&backend, cfg, config(0));
    let (_ftl, db) = open(&backend, cfg, config(0));
    assert_eq!(db.get(b"before").unwrap(), Some(value(1, 100)));
    assert_eq!(db.get(&key(5)).unwrap(), None);
    for k in 200..260 {
        assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 100)), "key {k}");
    }
}

/// The device refuses the shared page when it is sealed: the batch that sealed it is not
/// applied, the members already acknowledged are lost, so writes stop
/// (`AcknowledgedWriteLost`), and a restart recovers the log up to the hole, whole.
#[test]
fn a_refused_shared_page_fails_its_members_and_stops_writes() {
    let (backend, cfg) = formatted_ram();
    let (dev, db) = on_cut_device(&backend, cfg);
    db.put(b"before", &value(1, 100)).unwrap();
    db.sync().unwrap();
    db.put(&key(1), &value(1, 100)).unwrap();
    db.put(&key(2), &value(2, 100)).unwrap();
    assert!(db.stats().shared_page_joins >= 1, "{:?}", db.stats());
    // A raw value does not fit the open page: sealing it comes first, and is refused.
    dev.refuse_next_write();
    let err = db.put(&key(3), &value(3, 20_000)).unwrap_err();
    assert!(matches!(err, lsm::EngineError::WriteNotApplied(_)), "{err}");
    let err = db.sync().unwrap_err();
    assert!(
        matches!(err, lsm::EngineError::AcknowledgedWriteLost { .. }),
        "{err}"
    );
    let err = db.put(&key(4), &value(4, 100)).unwrap_err();
    assert!(
        matches!(err, lsm::EngineError::AcknowledgedWriteLost { .. }),
        "{err}"
    );
    drop(db);
    drop(dev);
    let (_ftl, db) = open(&backend, cfg, config(0));
    assert_eq!(db.get(b"before").unwrap(), Some(value(1, 100)));
    for k in 1..=4 {
        assert_eq!(db.get(&key(k)).unwrap(), None, "key {k}");
    }
    db.close().unwrap();
    assert_fsck_clean(&backend, cfg, config(0));
}
