//! Small values held in their keytable entries (`EngineConfig::entry_value_max`): reading
//! one costs no device read, in the memtable, after a flush, after compactions, after a
//! restart, after a retime and after garbage collection moved its log record; a value above
//! the limit is read from the device; the copies always equal what was written.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl};
use lsm::{Engine, EngineConfig, RangeRead, WriteOp};

fn small(i: u32) -> Vec<u8> {
    format!("v{i:05}-{}", "s".repeat((i % 40) as usize)).into_bytes()
}

fn big(i: u32) -> Vec<u8> {
    vec![(i % 251) as u8; 65 + (i % 300) as usize]
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// No value cache: every value not held is read from the device.
fn cfg() -> EngineConfig {
    EngineConfig {
        memtable_bytes: 256 << 10,
        ..EngineConfig::default()
    }
}

fn open(backend: &Backend, dcfg: DeviceConfig) -> (Engine, Arc<Ftl>) {
    open_with(backend, dcfg, cfg())
}

fn open_with(backend: &Backend, dcfg: DeviceConfig, ecfg: EngineConfig) -> (Engine, Arc<Ftl>) {
    let ftl = Arc::new(Ftl::open(backend, dcfg).unwrap());
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, ecfg).unwrap();
    (db, ftl)
}

/// Reads every small key three ways (get, multi_get, range) and asserts no device page was
/// read and every value is right.
fn read_small_without_device(db: &Engine, ftl: &Ftl, n: u32, why: &str) {
    let before = ftl.stats().reads;
    for i in 0..n {
        assert_eq!(db.get(&key(i)).unwrap(), Some(small(i)), "{why}: key {i}");
    }
    let keys: Vec<Vec<u8>> = (0..n).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let got = db.multi_get(&refs).unwrap();
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, v)| v.as_deref() == Some(&small(i as u32)[..])),
        "{why}: multi_get"
    );
    let pairs = db.range(b"key", Some(b"kez"), usize::MAX).unwrap();
    assert_eq!(pairs.len(), n as usize, "{why}: range");
    assert!(
        pairs
            .iter()
            .enumerate()
            .all(|(i, (k, v))| *k == key(i as u32) && *v == small(i as u32)),
        "{why}: range values"
    );
    assert!(
        matches!(db.get_now(&key(0), &[]), Ok(lsm::GetNow::Hot(_))),
        "{why}: get_now"
    );
    assert_eq!(
        ftl.stats().reads,
        before,
        "{why}: held values were read from the device"
    );
}

#[test]
fn small_values_are_read_from_dram_in_every_state() {
    let (backend, dcfg) = common::formatted_ram();
    let n = 2000u32;
    {
        let (db, ftl) = open(&backend, dcfg);
        for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
            let vals: Vec<(Vec<u8>, Vec<u8>)> = chunk.iter().map(|&i| (key(i), small(i))).collect();
            let ops: Vec<WriteOp<'_>> = vals.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
            db.write(&ops).unwrap();
        }
        read_small_without_device(&db, &ftl, n, "in the memtable");
        let s = db.stats();
        assert_eq!(s.held_values, u64::from(n), "{s:#?}");
        db.flush().unwrap();
        read_small_without_device(&db, &ftl, n, "after a flush");
        db.compact_all().unwrap();
        read_small_without_device(&db, &ftl, n, "after compaction");
        let s = db.stats();
        assert_eq!(s.held_values, u64::from(n), "{s:#?}");
        let bytes: u64 = (0..n).map(|i| small(i).len() as u64).sum();
        assert_eq!(s.held_value_bytes, bytes);
        assert!(s.keytable_dram_bytes > bytes);
        db.close().unwrap();
    }
    // After a restart the keytable pages bring the copies back: still no device read.
    let (db, ftl) = open(&backend, dcfg);
    read_small_without_device(&db, &ftl, n, "after a restart");
    db.close().unwrap();
    drop(ftl);
    common::assert_fsck_clean(&backend, dcfg, cfg());
}

#[test]
fn a_value_past_the_limit_is_read_from_the_device() {
    let (backend, dcfg) = common::formatted_ram();
    let (db, ftl) = open(&backend, dcfg);
    for i in 0..200 {
        db.put(&key(i), &big(i)).unwrap();
    }
    db.flush().unwrap();
    assert_eq!(db.stats().held_values, 0);
    let before = ftl.stats().reads;
    for i in 0..200 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(big(i)));
    }
    assert!(
        ftl.stats().reads > before,
        "values past the limit were not read"
    );

    // With the limit at 0 nothing is held.
    drop(db);
    let none = EngineConfig {
        entry_value_max: 0,
        ..cfg()
    };
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, none).unwrap();
    db.put(b"tiny", b"x").unwrap();
    db.flush().unwrap();
    assert_eq!(db.stats().held_values, 0);
    let before = ftl.stats().reads;
    assert_eq!(db.get(b"tiny").unwrap().as_deref(), Some(&b"x"[..]));
    assert!(ftl.stats().reads > before);
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn a_retimed_value_keeps_its_copy() {
    let (backend, dcfg) = common::formatted_ram();
    let n = 300u32;
    {
        let (db, ftl) = open(&backend, dcfg);
        for i in 0..n {
            db.put(&key(i), &small(i)).unwrap();
        }
        db.flush().unwrap();
        // A deadline set on values already in a keytable: the retimes' versions point at
        // them; their flush takes the copies from the entries below.
        let later = std::num::NonZeroU64::new(now_ms() + 3_600_000);
        let keys: Vec<Vec<u8>> = (0..n).map(key).collect();
        let ops: Vec<WriteOp<'_>> = keys.iter().map(|k| WriteOp::Retime(k, later)).collect();
        db.write(&ops).unwrap();
        db.flush().unwrap();
        db.compact_all().unwrap();
        read_small_without_device(&db, &ftl, n, "after retimes");
        assert_eq!(db.stats().held_values, u64::from(n));
        db.close().unwrap();
    }
    let (db, ftl) = open(&backend, dcfg);
    read_small_without_device(&db, &ftl, n, "after retimes and a restart");
    let (_, deadlines) = db.deadlines_in(b"", None).unwrap();
    assert_eq!(deadlines.len(), n as usize);
}

#[test]
fn garbage_collection_moves_keep_the_copies_right() {
    let (backend, dcfg) = common::formatted_ram();
    // The oldest segment first: the segments holding the small values are victims although
    // segments with nothing live are there too.
    let oldest = EngineConfig {
        gc_policy: Arc::new(lsm::Oldest),
        ..cfg()
    };
    let (db, ftl) = open_with(&backend, dcfg, oldest.clone());
    let n = 200u32;
    // Each small value between overwrites of 8 KiB fillers, so every segment holds a few live
    // small values among garbage: garbage collection must move them.
    let filler = vec![7u8; 8192];
    for i in 0..n {
        db.put(&key(i), &small(i)).unwrap();
        for j in 0..4u32 {
            db.put(format!("filler{j:03}").as_bytes(), &filler).unwrap();
        }
    }
    let mut round = 0u32;
    while db.stats().gc_bytes_moved == 0 || db.stats().gc_segments < 16 {
        for j in 0..64u32 {
            db.put(format!("filler{j:03}").as_bytes(), &filler).unwrap();
        }
        round += 1;
        assert!(round < 2_000, "no garbage collection: {:#?}", db.stats());
    }
    // Garbage collection due in the background would read pages meanwhile.
    db.settle().unwrap();
    read_small_without_device(&db, &ftl, n, "after garbage collection");
    // The range also held the fillers; read just the small keys again after a restart.
    db.close().unwrap();
    drop(ftl);
    let (db, ftl) = open_with(&backend, dcfg, oldest);
    read_small_without_device(&db, &ftl, n, "after garbage collection and a restart");
    db.close().unwrap();
    drop(ftl);
    common::assert_fsck_clean(&backend, dcfg, cfg());
}

#[test]
fn async_reads_and_ranges_take_the_copies() {
    let (backend, dcfg) = common::formatted_ram();
    let (db, ftl) = open(&backend, dcfg);
    for i in 0..100 {
        db.put(&key(i), &small(i)).unwrap();
    }
    db.flush().unwrap();
    let before = ftl.stats().reads;
    let (tx, rx) = std::sync::mpsc::channel();
    let k5 = key(5);
    db.multi_get_async(
        &[&k5],
        Box::new(move |r| {
            tx.send(r.unwrap()).unwrap();
        }),
    );
    let got = rx.recv().unwrap();
    assert_eq!(got[0].as_deref(), Some(&small(5)[..]));
    let (tx, rx) = std::sync::mpsc::channel();
    db.range_async(
        &RangeRead {
            start: b"key",
            end: None,
            limit: 1000,
            max_bytes: u64::MAX,
            skip: None,
        },
        Box::new(move |r| {
            tx.send(r.unwrap()).unwrap();
        }),
    );
    let pairs = rx.recv().unwrap();
    assert_eq!(pairs.len(), 100);
    assert!(pairs
        .iter()
        .enumerate()
        .all(|(i, (k, v))| *k == key(i as u32) && v[..] == small(i as u32)[..]));
    assert_eq!(ftl.stats().reads, before);
}
