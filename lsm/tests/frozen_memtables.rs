//! Full memtables queued for their flush (`EngineConfig::max_frozen_memtables`): with the
//! flushes held at the device, writers go on into the next memtables; a power cut then
//! loses no acknowledged write (recovery replays every unflushed generation into one
//! memtable), and the store it leaves is clean, whether the cut comes before the oldest
//! one's flush or after it, with younger ones still queued.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::vlog_format::stored_record_bytes;
use lsm::{Engine, EngineConfig};

use common::{assert_fsck_clean, small_geometry, HoldDevice};

/// A keytable page (magic `KV` after its checksum) written by the maintenance thread.
fn keytable_page(page: &[u8]) -> bool {
    page.len() > 6 && page[4..6] == *b"KV" && std::thread::current().name() == Some("lsm-maint")
}

/// Fails the held writes when a test unwinds: the engine's drop joins its maintenance
/// thread, which would wait for them for ever. Declared after the engine, so dropped
/// before it.
struct ReleaseOnPanic(Arc<HoldDevice>);

impl Drop for ReleaseOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.release(true);
        }
    }
}

/// Cuts the power (nothing held reaches the device), checks the device offline, reopens it
/// and checks that it holds exactly the acknowledged writes; returns the reopened engine.
fn cut_and_reopen(
    (ftl, hold, db): (Arc<Ftl>, Arc<HoldDevice>, Engine),
    backend: &Backend,
    dcfg: DeviceConfig,
    cfg: &EngineConfig,
    acked: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Engine {
    ftl.power_cut();
    hold.release(true);
    drop(db);
    drop(hold);
    drop(ftl);
    assert_fsck_clean(backend, dcfg, cfg.clone());
    let db = Engine::open(Arc::new(Ftl::open(backend, dcfg).unwrap()), cfg.clone()).unwrap();
    let all: BTreeMap<Vec<u8>, Vec<u8>> = db
        .range(b"", None, usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(&all, acked, "after the cut");
    db
}

#[test]
fn a_power_cut_with_two_frozen_memtables_queued_loses_no_acknowledged_write() {
    let g = small_geometry();
    let backend = Backend::Ram(RamStore::new());
    let dcfg = DeviceConfig::new(g);
    let ftl = Arc::new(Ftl::format(&backend, dcfg).unwrap());
    // Every keytable write of a flush is held (its segment's later writes with it), so
    // the flush of the first frozen memtable cannot finish.
    let hold = Arc::new(HoldDevice::new(ftl.clone(), false, Box::new(keytable_page)));
    let cfg = EngineConfig {
        memtable_bytes: 8 << 10,
        max_frozen_memtables: 2,
        ..EngineConfig::default()
    };
    let db = Engine::open(hold.clone() as Arc<dyn AppendDevice>, cfg.clone()).unwrap();
    let _unwinding = ReleaseOnPanic(hold.clone());
    let mut acked: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    // Flushed before the hold: the replay must lay the unflushed generations over runs.
    for i in 0..300u32 {
        let (k, v) = (
            format!("key{:04}", i % 200),
            vec![(i % 251) as u8; 2000 + (i as usize * 37) % 6000],
        );
        db.put(k.as_bytes(), &v).unwrap();
        acked.insert(k.into_bytes(), v);
    }
    db.settle().unwrap();
    assert!(db.stats().flushes > 0, "{:#?}", db.stats());

    hold.armed.store(true, SeqCst);
    // (Before the hold, a writer may stall while a slow flush fills both slots.)
    let stalls = db.stats().write_stalls.memtable;
    // Writes until two memtables wait; each one acknowledged before the next.
    write_until(&db, &mut acked, 300, |db| db.stats().frozen_memtables >= 2);
    // The writer may have filled both slots before the maintenance thread started the
    // first flush (it may have been merging a memtable's runs): wait for the flush to
    // reach the device and be held.
    wait_for(&db, "a held keytable write", |_| hold.seen.load(SeqCst));
    let s = db.stats();
    assert_eq!(
        s.write_stalls.memtable, stalls,
        "a stall with a frozen slot free: {s:#?}"
    );
    // Reads see every generation, newest first.
    for (k, v) in &acked {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "before the cut");
    }

    let db = cut_and_reopen((ftl, hold, db), &backend, dcfg, &cfg, &acked);
    assert!(db.stats().replayed_records > 0, "{:#?}", db.stats());
    // Garbage counted once: the generations' overwrites were left out of the manifest
    // while they could be replayed, and counted again by the replay.
    db.flush().unwrap();
    let live: u64 = acked
        .iter()
        .map(|(k, v)| stored_record_bytes(k.len(), v.len()))
        .sum();
    let s = db.stats();
    assert!(
        s.live_bytes >= live,
        "more garbage counted than there is: live bytes {} < {live}",
        s.live_bytes
    );
}

/// Waits up to 30 s for `done`.
fn wait_for(db: &Engine, what: &str, done: impl Fn(&Engine) -> bool) {
    let since = Instant::now();
    while !done(db) {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "{what} never happened: {:#?}",
            db.stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Writes `key{i % 200}` (every 17th a delete) from `from` on, until `until` holds,
/// noting each acknowledged write in `acked`; returns where it stopped.
fn write_until(
    db: &Engine,
    acked: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    from: u32,
    until: impl Fn(&Engine) -> bool,
) -> u32 {
    let mut i = from;
    while !until(db) {
        assert!(i < from + 100_000, "never got there: {:#?}", db.stats());
        let k = format!("key{:04}", i % 200);
        if i % 17 == 0 {
            db.delete(k.as_bytes()).unwrap();
            acked.remove(k.as_bytes());
        } else {
            let v = vec![(i % 251) as u8; 2000 + (i as usize * 37) % 6000];
            db.put(k.as_bytes(), &v).unwrap();
            acked.insert(k.into_bytes(), v);
        }
        i += 1;
    }
    i
}

/// The cut after the oldest frozen memtable's run is installed (the checkpoint moved to its
/// end) while two younger ones wait: the replay from that checkpoint brings both back, with
/// the active generation.
#[test]
fn a_power_cut_after_the_oldest_flush_with_younger_memtables_queued_loses_nothing() {
    let backend = Backend::Ram(RamStore::new());
    let dcfg = DeviceConfig::new(small_geometry());
    let ftl = Arc::new(Ftl::format(&backend, dcfg).unwrap());
    let hold = Arc::new(HoldDevice::new(ftl.clone(), false, Box::new(keytable_page)));
    let cfg = EngineConfig {
        memtable_bytes: 8 << 10,
        max_frozen_memtables: 2,
        // No compaction: every keytable write is a flush's.
        l0_runs: 1000,
        l0_stop_runs: 1000,
        ..EngineConfig::default()
    };
    let db = Engine::open(hold.clone() as Arc<dyn AppendDevice>, cfg.clone()).unwrap();
    let _unwinding = ReleaseOnPanic(hold.clone());
    let mut acked: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut i = write_until(&db, &mut acked, 0, |db| db.stats().flushes >= 2);
    db.settle().unwrap();

    // The next flush is held: two memtables wait.
    hold.armed.store(true, SeqCst);
    // (Before the hold, a writer may stall while a slow flush fills both slots.)
    let stalls = db.stats().write_stalls.memtable;
    let flushes = db.stats().flushes;
    i = write_until(&db, &mut acked, i, |db| db.stats().frozen_memtables == 2);
    wait_for(&db, "the first flush held", |_| hold.held() > 0);
    // Its run goes down and is installed; the next flush's writes stay held.
    hold.release_first(hold.held());
    wait_for(&db, "the first flush", |db| db.stats().flushes > flushes);
    // Two younger memtables wait again, the first of them being flushed, held.
    write_until(&db, &mut acked, i, |db| db.stats().frozen_memtables == 2);
    wait_for(&db, "the second flush held", |_| hold.held() > 0);
    let s = db.stats();
    assert_eq!(s.flushes, flushes + 1, "{s:#?}");
    assert_eq!(
        s.write_stalls.memtable, stalls,
        "a stall with a frozen slot free: {s:#?}"
    );

    cut_and_reopen((ftl, hold, db), &backend, dcfg, &cfg, &acked);
}
