//! Background maintenance: flushes, compactions and garbage collection run on the engine's
//! `lsm-maint` thread, never in a client's write call; the engine's own threads are a small
//! fixed set. (The stall itself is tested in `engine/maintain.rs`, where the test can hold
//! the maintenance lock.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use hwftl_sim::{AppendDevice, Backend, Command, DeviceConfig, Ftl, RamStore};
use lsm::manifest::MANIFEST_SEGMENTS;
use lsm::{Engine, EngineConfig, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::{small_geometry, CutDevice};

/// The tests of this file open engines one at a time (the thread check counts them all).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Names of this process's threads that start with `prefix`, sorted.
fn threads_named(prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// Four writers overwrite a small drive several times over (memtable flushes, compactions
/// and garbage collection all due many times); a device wrapper records which thread
/// submits every TRIM outside the manifest's two segments (after open, only garbage
/// collection's releases and compaction's keytable releases trim those). Every one must come from `lsm-maint`: before maintenance had
/// its thread, they came from whichever writer found the work due. The values read back are
/// each key's last acknowledged one.
#[test]
fn maintenance_runs_on_its_own_thread_and_never_in_a_write_call() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let g = small_geometry();
    let ftl = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let trims: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let seen = trims.clone();
    let dev = Arc::new(CutDevice::new(
        ftl,
        Box::new(move |cmd| {
            // (A writer that opens a log segment writes the manifest, which may switch to
            // its other segment and trim the old one: those trims are the manifest's.)
            if matches!(cmd, Command::Trim { segment } if !MANIFEST_SEGMENTS.contains(&segment.0)) {
                let name = std::thread::current()
                    .name()
                    .unwrap_or("unnamed")
                    .to_string();
                *seen.lock().unwrap().entry(name).or_default() += 1;
            }
            false
        }),
    ));
    let cfg = EngineConfig {
        memtable_bytes: 64 << 10,
        l0_runs: 2,
        l1_bytes: 256 << 10,
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(dev as Arc<dyn AppendDevice>, cfg).unwrap());
    trims.lock().unwrap().clear();
    // The engine's threads: the poller and the maintenance thread, nothing per client (a
    // new thread names itself once it runs: give them a moment).
    let expected = vec!["lsm-maint".to_string(), "lsm-poller".to_string()];
    for _ in 0..100 {
        if threads_named("lsm-") == expected {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(threads_named("lsm-"), expected);

    const KEYS: u32 = 1500;
    const VALUE: usize = 2000;
    let key = |k: u32| format!("key{k:05}").into_bytes();
    let last: Arc<Mutex<BTreeMap<u32, u32>>> = Arc::default();
    let writers: Vec<_> = (0..4u32)
        .map(|t| {
            let (db, last) = (db.clone(), last.clone());
            std::thread::Builder::new()
                .name(format!("writer-{t}"))
                .spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(u64::from(t));
                    for round in 0..2500u32 {
                        // Each writer owns the keys k with k % 4 == t.
                        let k = rng.gen_range(0..KEYS / 4) * 4 + t;
                        let version = round + 1;
                        let v = vec![(k ^ version) as u8; VALUE];
                        db.write(&[WriteOp::Put(&key(k), &v)]).unwrap();
                        last.lock().unwrap().insert(k, version);
                    }
                })
                .unwrap()
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    db.settle().unwrap();
    let s = db.stats();
    assert!(s.flushes > 10, "flushes: {s:#?}");
    assert!(s.compactions > 2, "compactions: {s:#?}");
    assert!(s.gc_segments > 0, "garbage collection: {s:#?}");
    let trims = trims.lock().unwrap().clone();
    assert!(!trims.is_empty(), "no trim after open");
    assert_eq!(
        trims.keys().collect::<Vec<_>>(),
        vec!["lsm-maint"],
        "trims by thread: {trims:?}"
    );
    for (k, version) in last.lock().unwrap().iter() {
        assert_eq!(
            db.get(&key(*k)).unwrap(),
            Some(vec![(k ^ version) as u8; VALUE]),
            "key {k}"
        );
    }
    drop(db);
    // The threads go with the engine.
    assert!(
        threads_named("lsm-").is_empty(),
        "{:?}",
        threads_named("lsm-")
    );
}

/// The keytable watermarks: with compaction debt allowed to be zero and L0 stopped at its
/// trigger, writers stall (counted) while the maintenance thread compacts, and never
/// deadlock; every key reads back its last value.
#[test]
fn keytable_watermarks_stall_writers_until_compaction_catches_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ftl = Arc::new(
        Ftl::format(
            &Backend::Ram(RamStore::new()),
            DeviceConfig::new(small_geometry()),
        )
        .unwrap(),
    );
    let cfg = EngineConfig {
        memtable_bytes: 8 << 10,
        l0_runs: 2,
        l0_stop_runs: 1,
        l1_bytes: 16 << 10,
        compaction_debt_stop_bytes: 0,
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(ftl as Arc<dyn AppendDevice>, cfg).unwrap());
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..600u32 {
                    let k = format!("w{w}-k{:03}", i % 150);
                    db.put(k.as_bytes(), format!("{w}-{i}").as_bytes()).unwrap();
                }
            })
        })
        .collect();
    for t in writers {
        t.join().unwrap();
    }
    for w in 0..4u32 {
        for k in 0..150u32 {
            let last = 450 + k;
            assert_eq!(
                db.get(format!("w{w}-k{k:03}").as_bytes()).unwrap(),
                Some(format!("{w}-{last}").into_bytes())
            );
        }
    }
    let s = db.stats();
    assert!(s.compactions >= 5, "{s:?}");
    assert!(
        s.write_stalls.l0_runs + s.write_stalls.compaction_debt > 0,
        "no writer met a keytable watermark: {:?}",
        s.write_stalls
    );
}
