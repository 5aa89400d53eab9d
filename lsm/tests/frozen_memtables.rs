//! Full memtables queued for their flush (`EngineConfig::max_frozen_memtables`): with the
//! flushes held at the device, writers go on into the next memtables; a power cut then
//! loses no acknowledged write (recovery replays every unflushed generation into one
//! memtable), and the store it leaves is clean.

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
    let since = Instant::now();
    let mut i = 300u32;
    // Writes until two memtables wait; each one acknowledged before the next.
    while db.stats().frozen_memtables < 2 {
        assert!(
            since.elapsed() < Duration::from_secs(30) && i < 100_000,
            "two memtables never waited: {:#?}",
            db.stats()
        );
        let (k, v) = (
            format!("key{:04}", i % 200),
            vec![(i % 251) as u8; 2000 + (i as usize * 37) % 6000],
        );
        if i % 17 == 0 {
            db.delete(k.as_bytes()).unwrap();
            acked.remove(k.as_bytes());
        } else {
            db.put(k.as_bytes(), &v).unwrap();
            acked.insert(k.into_bytes(), v);
        }
        i += 1;
    }
    // The writer may have filled both slots before the maintenance thread started the
    // first flush (it may have been merging a memtable's runs): wait for the flush to
    // reach the device and be held. (A failure releases the hold first: otherwise the
    // engine's drop would wait for the held writes while the test unwinds.)
    let since = Instant::now();
    while !hold.seen.load(SeqCst) {
        if since.elapsed() > Duration::from_secs(30) {
            hold.release(true);
            panic!("no keytable write was held: {:#?}", db.stats());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = db.stats();
    assert_eq!(s.write_stalls.memtable, 0, "{s:#?}");
    // Reads see every generation, newest first.
    for (k, v) in &acked {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "before the cut");
    }

    // The power goes: nothing held reaches the device.
    ftl.power_cut();
    hold.release(true);
    drop(db);
    drop(hold);
    drop(ftl);

    assert_fsck_clean(&backend, dcfg, cfg.clone());
    let ftl = Arc::new(Ftl::open(&backend, dcfg).unwrap());
    let db = Engine::open(ftl, cfg).unwrap();
    assert!(db.stats().replayed_records > 0, "{:#?}", db.stats());
    let all: BTreeMap<Vec<u8>, Vec<u8>> = db
        .range(b"", None, usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(all, acked, "after the cut");
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
