//! The offline check (`Engine::fsck`): clean on a healthy store (closed, or cut with an
//! unflushed tail), and it names a flipped bit in a keytable page, in a packed value page
//! and in a raw value page, without writing anything to the device.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, Lba, RamStore};
use lsm::manifest::ManifestStore;
use lsm::vlog_format::RecordKind;
use lsm::{Engine, EngineConfig, FindingKind, FsckReport};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 48,
        pages_per_block: 8,
        spare_blocks_per_chip: 2,
    }
}

fn engine_config() -> EngineConfig {
    EngineConfig {
        memtable_bytes: 3000,
        l0_runs: 3,
        l1_bytes: 6000,
        keytable_bytes: 1500,
        level_ratio: 3,
        gc_window_pages: 4,
        ..EngineConfig::default()
    }
}

fn setup() -> (Backend, DeviceConfig) {
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig::new(geometry());
    drop(Ftl::format(&backend, cfg).unwrap());
    (backend, cfg)
}

/// Runs fsck on the device as it is now (opened read-only), and checks it wrote nothing.
fn fsck(backend: &Backend, cfg: DeviceConfig) -> FsckReport {
    let ftl = Arc::new(Ftl::open_read_only(backend, cfg).unwrap());
    let report = Engine::fsck(ftl.clone(), engine_config()).unwrap();
    let stats = ftl.stats();
    assert_eq!(stats.writes, 0, "fsck wrote pages");
    assert_eq!(stats.trims, 0, "fsck trimmed");
    assert_eq!(
        stats.table_writes, 0,
        "the read-only device wrote its tables"
    );
    report
}

/// A mixed load: small, page-sized and multi-page values (some spanning segments),
/// overwrites and deletes, with flushes and compactions, so garbage collection runs.
fn load(db: &Engine, rng: &mut SmallRng, batches: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    for _ in 0..batches {
        let k = format!("k{:03}", rng.gen_range(0..120)).into_bytes();
        if rng.gen_range(0..5) == 0 {
            db.delete(&k).unwrap();
            model.remove(&k);
            continue;
        }
        let len = match rng.gen_range(0..10) {
            0..=5 => rng.gen_range(0..300),
            6..=7 => rng.gen_range(1000..5000),
            8 => 8192,
            _ if rng.gen_range(0..8) == 0 => rng.gen_range(300_000..500_000),
            _ => rng.gen_range(8193..24000),
        };
        let v: Vec<u8> = (0..len).map(|i| (i as u8) ^ rng.gen::<u8>()).collect();
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    model
}

#[test]
fn fsck_is_clean_after_a_mixed_load_closed_and_cut() {
    let (backend, cfg) = setup();
    let mut rng = SmallRng::seed_from_u64(21);
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), engine_config()).unwrap();
    let model = load(&db, &mut rng, 1500);
    db.settle().unwrap();
    assert!(db.stats().gc_segments > 0, "garbage collection never ran");
    db.close().unwrap();
    drop(ftl);

    let report = fsck(&backend, cfg);
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.live_keys, model.len() as u64);
    assert_eq!(report.values_checked, model.len() as u64);
    assert!(report.packed_pages > 0 && report.keytable_pages > 0);

    // An unflushed tail cut mid-way: fsck replays it in memory as an open would.
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), engine_config()).unwrap();
    let _ = load(&db, &mut rng, 200);
    ftl.power_cut();
    drop(db);
    drop(ftl);
    let report = fsck(&backend, cfg);
    assert!(report.is_clean(), "{report}");
    // And the check left the device as the next open needs it.
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl, engine_config()).unwrap();
    assert_eq!(
        db.range(b"", None, usize::MAX).unwrap().len() as u64,
        report.live_keys
    );
    db.close().unwrap();
}

/// Writes 300 small values and one raw value, flushes (so they are in keytables), closes.
fn flushed_store() -> (Backend, DeviceConfig) {
    let (backend, cfg) = setup();
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl, EngineConfig::default()).unwrap();
    for i in 0..300u32 {
        db.put(format!("key{i:04}").as_bytes(), &[i as u8; 100])
            .unwrap();
    }
    db.put(b"raw", &[9u8; 20_000]).unwrap();
    db.close().unwrap();
    (backend, cfg)
}

/// The first LBA of the first keytable run the manifest lists.
fn keytable_lba(dev: &dyn AppendDevice) -> Lba {
    let (_, snap) = ManifestStore::load(dev).unwrap();
    let snap = snap.unwrap();
    Lba(snap.runs[0].extents[0].0)
}

/// The packed page holding the record of `key`, and the first raw page after it (if any).
fn record_page(dev: &dyn AppendDevice, key: &[u8]) -> (Lba, Option<Lba>) {
    let at = common::record_of(dev, key);
    let g = dev.geometry();
    let raw = (at.record.kind == RecordKind::Indirect).then(|| {
        g.lba(
            at.segment,
            at.record.raw.map_or(at.page + 1, |(first, _)| first),
        )
    });
    (g.lba(at.segment, at.page), raw)
}

#[test]
fn fsck_reports_a_flipped_bit_in_a_keytable_page() {
    let (backend, cfg) = flushed_store();
    assert!(fsck(&backend, cfg).is_clean());
    let ftl = Ftl::open(&backend, cfg).unwrap();
    ftl.corrupt_page(keytable_lba(&ftl), 200).unwrap();
    ftl.close().unwrap();
    let report = fsck(&backend, cfg);
    println!("{report}");
    assert!(!report.is_clean());
    assert!(report.count(FindingKind::Checksum) >= 1, "{report}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.what.contains("keytable run") && f.what.contains("checksum")),
        "{report}"
    );
}

#[test]
fn fsck_reports_a_flipped_bit_in_a_packed_value_page() {
    let (backend, cfg) = flushed_store();
    let ftl = Ftl::open(&backend, cfg).unwrap();
    let (page, _) = record_page(&ftl, b"key0150");
    ftl.corrupt_page(page, 300).unwrap();
    ftl.close().unwrap();
    let report = fsck(&backend, cfg);
    println!("{report}");
    // Once as a page of the log, once as the page live values point into.
    assert!(report.count(FindingKind::Checksum) >= 2, "{report}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.what.contains("live values")),
        "{report}"
    );
}

#[test]
fn fsck_reports_a_flipped_bit_in_a_raw_value_page() {
    let (backend, cfg) = flushed_store();
    let ftl = Ftl::open(&backend, cfg).unwrap();
    let (_, raw) = record_page(&ftl, b"raw");
    ftl.corrupt_page(raw.expect("a raw value"), 5000).unwrap();
    ftl.close().unwrap();
    let report = fsck(&backend, cfg);
    println!("{report}");
    assert_eq!(report.count(FindingKind::Checksum), 1, "{report}");
    assert!(
        report.findings[0].what.contains("\"raw\"") && report.findings[0].what.contains("checksum"),
        "{report}"
    );
}

/// A flipped bit mid-tail (damage a writable open refuses): fsck reports it as log damage,
/// and the device is left as it was (a writable open still refuses it, trimming nothing).
#[test]
fn fsck_reports_damage_in_the_tail_and_changes_nothing() {
    let (backend, cfg) = setup();
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(
        ftl.clone(),
        EngineConfig {
            memtable_bytes: 4 << 20,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    for i in 0..40u32 {
        db.put(format!("key{i:04}").as_bytes(), &[i as u8; 100])
            .unwrap();
    }
    db.flush().unwrap();
    for i in 40..200u32 {
        db.put(format!("key{i:04}").as_bytes(), &[i as u8; 100])
            .unwrap();
    }
    ftl.power_cut();
    drop(db);
    drop(ftl);
    let ftl = Ftl::open(&backend, cfg).unwrap();
    let (_, snap) = ManifestStore::load(&ftl).unwrap();
    let snap = snap.unwrap();
    let (log_seg, page) = snap.checkpoint;
    let meta = snap.log_segs.iter().find(|m| m.log_seg == log_seg).unwrap();
    let lba = ftl
        .geometry()
        .lba(hwftl_sim::SegmentId(meta.segment), page + 3);
    ftl.corrupt_page(lba, 100).unwrap();
    ftl.power_cut();
    drop(ftl);
    let report = fsck(&backend, cfg);
    println!("{report}");
    assert!(report.count(FindingKind::LogDamage) >= 1, "{report}");
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    assert!(matches!(
        Engine::open(ftl, EngineConfig::default()),
        Err(lsm::EngineError::LogDamaged { .. })
    ));
}
