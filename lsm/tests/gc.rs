//! Garbage collection under sustained random overwrites: 3x the device's capacity written
//! with 80% of the value space live. Every read stays correct, the drive never fills, space
//! is reclaimed, and write amplification is reported.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, FaultTarget, Ftl, Geometry, RamStore};
use lsm::{Engine, EngineConfig, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;

const VALUE: usize = 8192;

fn value(key: u32, version: u32) -> Vec<u8> {
    common::stamped_value(key, version, VALUE)
}

/// Overwrites 16 random keys (`key{k:06}`, one version counter each) in one batch, as
/// concurrent clients' writes are group-committed.
fn overwrite_batch(
    db: &Engine,
    rng: &mut SmallRng,
    versions: &mut [u32],
) -> Result<(), lsm::EngineError> {
    let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..16)
        .map(|_| {
            let k = rng.gen_range(0..versions.len() as u32);
            versions[k as usize] += 1;
            (
                format!("key{k:06}").into_bytes(),
                value(k, versions[k as usize]),
            )
        })
        .collect();
    let ops: Vec<WriteOp<'_>> = batch.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
    db.write(&ops)
}

/// Fills `fill_percent` of the engine's user capacity with 8 KiB values, overwrites 3x the
/// device capacity at random, checks every value and returns the write amplification.
fn overwrite_run(overprovision_percent: u8, fill_percent: u64) -> f64 {
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
        overprovision_percent,
        // A quarter of a segment per step: reads get the engine lock between steps.
        gc_window_pages: 16,
        ..EngineConfig::default()
    };
    let db = Engine::open(dev.clone() as Arc<dyn AppendDevice>, cfg.clone()).unwrap();
    let capacity = g.capacity_bytes();
    let user_capacity = db.stats().user_capacity_bytes;
    let record = lsm::vlog_format::stored_record_bytes(9, VALUE);
    let keys = (user_capacity * fill_percent / 100 / record) as u32;
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
        overwrite_batch(&db, &mut rng, &mut versions)
            .unwrap_or_else(|e| panic!("overwrite {i} of {overwrites}: {e}\n{:#?}", db.stats()));
        i += 16;
    }
    // The maintenance thread may be in the middle of a collection step when the last write
    // returns (a reclaimed segment between its release and its trim): the counts below are
    // of the settled state. (Without this the test failed about one run in eight.)
    db.settle().unwrap();
    let after = db.stats();
    // Every segment is accounted for, and no reclaimed one waits for its trim once the
    // writes are done: the engine's free segments are exactly the device's.
    let manifest = 2;
    assert_eq!(
        after.free_segments
            + after.log_segments
            + after.keytable_segments
            + after.reclaimed_segments
            + manifest,
        u64::from(g.segments()),
        "{after:#?}"
    );
    assert_eq!(
        after.free_segments,
        u64::from(dev.stats().free_segments),
        "{after:#?}"
    );
    for k in 0..keys {
        let got = db.get(format!("key{k:06}").as_bytes()).unwrap();
        assert_eq!(got, Some(value(k, versions[k as usize])), "key {k}");
    }
    let user = after.user_bytes_written - before.user_bytes_written;
    let device = after.device_bytes_written - before.device_bytes_written;
    let wa = device as f64 / user as f64;
    println!(
        "over-provisioning {overprovision_percent}%, {fill_percent}% of the user capacity ({} MiB) live: capacity {} MiB, live {} MiB, overwrote {} MiB: device wrote {} MiB, write amplification {wa:.2}, {} segments reclaimed, {} MiB moved",
        user_capacity >> 20,
        capacity >> 20,
        (u64::from(keys) * VALUE as u64) >> 20,
        user >> 20,
        device >> 20,
        after.gc_segments,
        after.gc_bytes_moved >> 20
    );
    assert!(after.gc_segments > 0);
    // Raw pages of values already counted dead were not read, and no value on a skipped
    // page was live (every key reads its latest version above and after the reopen below).
    assert!(after.gc_pages_skipped > 0, "{after:#?}");
    assert_eq!(after.gc_skipped_pages_reread, 0);
    assert!(
        after.gc_steps > after.gc_segments * 2,
        "{} steps for {} segments",
        after.gc_steps,
        after.gc_segments
    );
    // Reopen: everything is still there.
    drop(db);
    let db = Engine::open(dev as Arc<dyn AppendDevice>, cfg).unwrap();
    for k in (0..keys).step_by(7) {
        let got = db.get(format!("key{k:06}").as_bytes()).unwrap();
        assert_eq!(
            got,
            Some(value(k, versions[k as usize])),
            "key {k} after reopen"
        );
    }
    wa
}

/// DESIGN section 8: sustained random overwrite at 80% full, write amplification <= 2.5.
/// "Full" is the user capacity, which keeps the default over-provisioning back.
#[test]
fn sustained_overwrites_at_80_percent_of_user_capacity() {
    let wa = overwrite_run(lsm::DEFAULT_OVERPROVISION_PERCENT, 80);
    // Deterministic (RAM device, seeded keys): not a timing.
    assert!(wa <= 2.5, "write amplification {wa:.2}");
}

/// Without over-provisioning, 80% of the raw value space live: greedy reclaiming still keeps
/// up (no DeviceFull, every read correct), at the higher amplification theory predicts.
#[test]
fn sustained_overwrites_without_overprovisioning() {
    let wa = overwrite_run(0, 80);
    assert!(wa < 6.0, "write amplification {wa:.2}");
}

/// Puts stop at the user capacity with `CapacityFull` (not a device error, not a livelock);
/// everything stored stays readable, and deletes make room for new puts.
#[test]
fn puts_stop_at_the_user_capacity_and_deletes_make_room() {
    let g = common::small_geometry();
    let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 64 << 10,
        ..EngineConfig::default()
    };
    let db = Engine::open(dev as Arc<dyn AppendDevice>, cfg).unwrap();
    let cap = db.stats().user_capacity_bytes;
    assert!(cap > 0 && cap < g.capacity_bytes());
    let mut stored = 0u32;
    let err = loop {
        // Overwrites of earlier keys mixed in: they must not count twice.
        if stored % 5 == 4 {
            // An overwrite near the limit may be refused too (keytables grow with the keys,
            // and the user capacity leaves them room): then the drive is full.
            if let Err(e) = db.put(
                format!("key{:06}", stored / 2).as_bytes(),
                &value(stored / 2, 1),
            ) {
                break e;
            }
        }
        match db.put(format!("key{stored:06}").as_bytes(), &value(stored, 0)) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1_000_000, "never full");
    };
    assert!(
        matches!(err, lsm::EngineError::CapacityFull { .. }),
        "{err}"
    );
    assert!(err.to_string().starts_with("the drive is full"));
    let s = db.stats();
    assert!(s.live_bytes <= cap, "{s:?}");
    // Nearly all of the user capacity was usable.
    let record = lsm::vlog_format::stored_record_bytes(9, VALUE);
    assert!(u64::from(stored) * record > cap * 9 / 10, "{stored} stored");
    for k in (0..stored).step_by(11) {
        let got = db.get(format!("key{k:06}").as_bytes()).unwrap().unwrap();
        assert!(got == value(k, 0) || got == value(k, 1), "key {k}");
    }
    for k in 0..stored / 4 {
        db.delete(format!("key{k:06}").as_bytes()).unwrap();
    }
    for k in 0..stored / 8 {
        db.put(format!("new{k:06}").as_bytes(), &value(k, 7))
            .unwrap();
    }
    assert_eq!(db.get(b"new000000").unwrap(), Some(value(0, 7)));
}

/// A load of batches of 8 KiB values on a drive geometry (8 MiB segments) fills the user
/// capacity before it is refused. Near the top, garbage collection moves the live values
/// out of segments whose only garbage is packed-page slack; each move counts live twice
/// (the new copy, and the old one until the memtable's flush finds it shadowed). Before the
/// engine subtracted the moves it knows about (`Inner::moved_from_below`), this load was
/// refused at 98.0% of the capacity with 7.4 MB moved; now past 99%.
#[test]
fn a_load_fills_the_user_capacity_while_garbage_collection_moves() {
    let g = Geometry::for_drive(248 << 20).unwrap();
    let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let cfg = EngineConfig {
        flush_writes: false,
        ..EngineConfig::default()
    };
    let db = Engine::open(dev as Arc<dyn AppendDevice>, cfg).unwrap();
    let record = lsm::vlog_format::stored_record_bytes(16, VALUE);
    let v = vec![7u8; VALUE];
    let mut stored = 0u64;
    let err = loop {
        let keys: Vec<Vec<u8>> = (stored..stored + 8)
            .map(|i| format!("{i:016}").into_bytes())
            .collect();
        let ops: Vec<WriteOp<'_>> = keys.iter().map(|k| WriteOp::Put(k, &v)).collect();
        match db.write(&ops) {
            Ok(()) => stored += 8,
            Err(e) => break e,
        }
        assert!(stored < 1 << 20, "never full");
    };
    assert!(
        matches!(err, lsm::EngineError::CapacityFull { .. }),
        "{err}"
    );
    let s = db.stats();
    assert!(s.gc_bytes_moved > 0, "no garbage collection ran: {s:#?}");
    let filled = (stored * record) as f64 / s.user_capacity_bytes as f64;
    println!("refused at {:.2}% of the capacity", filled * 100.0);
    assert!(
        filled <= 1.0,
        "admitted past the capacity: {:.2}%",
        filled * 100.0
    );
    assert!(
        filled > 0.99,
        "refused at {:.1}% of the capacity: {s:#?}",
        filled * 100.0
    );
}

/// Concurrent writers (4 threads, 8-key batches, pipelined) overwriting near the user
/// capacity with keytables many segments large (long keys): compactions that rewrite the
/// keytables must not take the last free segments from the values ("the drive is full").
#[test]
fn concurrent_overwrites_with_large_keytables() {
    let g = Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 160,
        pages_per_block: 16,
        spare_blocks_per_chip: 2,
    };
    let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 1 << 20,
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(dev as Arc<dyn AppendDevice>, cfg).unwrap());
    const V: usize = 1000;
    let key = |k: u32| format!("{k:08}{}", "k".repeat(300)).into_bytes();
    let val = |k: u32, t: u32| vec![(k ^ t) as u8; V];
    // Load until values are 75% of the user capacity (which shrinks as keytables grow).
    let mut keys = 0u32;
    while {
        let s = db.stats();
        s.live_bytes < s.user_capacity_bytes * 75 / 100
    } {
        let batch: Vec<(Vec<u8>, Vec<u8>)> =
            (keys..keys + 64).map(|k| (key(k), val(k, 0))).collect();
        let ops: Vec<WriteOp<'_>> = batch.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
        db.write(&ops).unwrap();
        keys += 64;
    }
    let overwrites = g.capacity_bytes() * 2 / V as u64;
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(u64::from(t));
                let mut done = 0;
                while done < overwrites / 4 {
                    let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..8)
                        .map(|_| {
                            let k = rng.gen_range(0..keys);
                            (key(k), val(k, t + 1))
                        })
                        .collect();
                    let ops: Vec<WriteOp<'_>> =
                        batch.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
                    db.write(&ops).unwrap_or_else(|e| {
                        panic!("thread {t}, overwrite {done}: {e}\n{:#?}", db.stats())
                    });
                    done += 8;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(db.stats().gc_segments > 0);
}

/// Read errors while garbage collection reads its victims (eight reads fail at a time, ten
/// times over): each failed page is read again, so no live value is lost and no victim is
/// reclaimed with a value it could not read.
#[test]
fn failed_reads_of_victim_pages_are_retried_and_lose_nothing() {
    let g = common::small_geometry();
    let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 64 << 10,
        gc_window_pages: 16,
        ..EngineConfig::default()
    };
    let db = Engine::open(dev.clone() as Arc<dyn AppendDevice>, cfg).unwrap();
    let record = lsm::vlog_format::stored_record_bytes(9, VALUE);
    let keys = (db.stats().user_capacity_bytes * 60 / 100 / record) as u32;
    let mut versions = vec![0u32; keys as usize];
    for k in 0..keys {
        db.put(format!("key{k:06}").as_bytes(), &value(k, 0))
            .unwrap();
    }
    let mut rng = SmallRng::seed_from_u64(5);
    let mut overwrite = |n: u64| {
        for _ in 0..n {
            overwrite_batch(&db, &mut rng, &mut versions).unwrap();
        }
    };
    // Into steady state: garbage collection runs every few batches.
    let segment_batches = u64::from(g.pages_per_segment()) / 16;
    overwrite(u64::from(g.segments()) * segment_batches);
    let gc_before = db.stats().gc_segments;
    assert!(gc_before > 0);
    for _ in 0..10 {
        // No client reads here: the next reads are garbage collection's.
        for _ in 0..8 {
            dev.faults().fail_next_read(FaultTarget::Any);
        }
        overwrite(4 * segment_batches);
    }
    assert!(db.stats().gc_segments > gc_before + 10, "{:?}", db.stats());
    for k in 0..keys {
        let got = db
            .get(format!("key{k:06}").as_bytes())
            .unwrap_or_else(|e| panic!("key {k}: {e}"));
        assert!(got == Some(value(k, versions[k as usize])), "key {k}");
    }
}

/// The LBA of the packed page holding `key`'s record, found by reading the value-log
/// segments the manifest lists.
fn record_page_of(dev: &dyn AppendDevice, key: &[u8]) -> hwftl_sim::Lba {
    let at = common::record_of(dev, key);
    dev.geometry().lba(at.segment, at.page)
}

/// How a victim page is made unusable.
#[derive(Clone, Copy, Debug)]
enum VictimFault {
    /// Every read of it fails (more times than garbage collection reads it again).
    ReadErrors,
    /// One bit of it is flipped (its checksum fails).
    BitFlip,
}

/// A nearly empty segment (small live values beside deleted large ones) is garbage
/// collection's first victim; one of its pages with a live value cannot be used. GC must
/// refuse the victim (counted), leave it in place and go on with others: once the page is
/// good again every live value on it reads back.
fn gc_refuses_a_victim_it_cannot_read(fault: VictimFault) {
    let g = common::small_geometry();
    let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 64 << 10,
        ..EngineConfig::default()
    };
    let db = Engine::open(dev.clone() as Arc<dyn AppendDevice>, cfg).unwrap();
    let cold = |i: u32| -> Vec<u8> { (0..100 + i).map(|j| (i * 7 + j) as u8).collect() };
    for i in 0..8u32 {
        db.put(format!("cold{i}").as_bytes(), &cold(i)).unwrap();
        db.put(format!("junk{i}").as_bytes(), &[7u8; 20_000])
            .unwrap();
    }
    for i in 0..8u32 {
        db.delete(format!("junk{i}").as_bytes()).unwrap();
    }
    db.flush().unwrap();
    let lba = record_page_of(dev.as_ref(), b"cold3");
    match fault {
        VictimFault::ReadErrors => {
            for _ in 0..1000 {
                dev.faults().fail_next_read(FaultTarget::Lba(lba));
            }
        }
        VictimFault::BitFlip => dev.corrupt_page(lba, 40).unwrap(),
    }
    // Live values that are never overwritten: the victim's garbage is the only garbage, so
    // garbage collection must take it once free segments run low.
    let fill = vec![3u8; 4000];
    let mut n = 0u32;
    while db.stats().gc_steps_refused == 0 {
        if db.put(format!("fill{n:06}").as_bytes(), &fill).is_err() {
            break;
        }
        n += 1;
        assert!(
            n < 200_000,
            "garbage collection never ran: {:?}",
            db.stats()
        );
    }
    // Garbage collection goes on with other victims (none is left here) without failing.
    for i in 0..20 {
        let _ = db.put(format!("more{i}").as_bytes(), &fill);
    }
    let stats = db.stats();
    assert!(stats.gc_steps_refused >= 1, "{fault:?}: {stats:?}");
    // Good again: nothing on the refused victim was lost.
    match fault {
        VictimFault::ReadErrors => {
            let mut tries = 0;
            while db.get(b"cold3").is_err() {
                tries += 1;
                assert!(tries < 2000);
            }
        }
        VictimFault::BitFlip => dev.corrupt_page(lba, 40).unwrap(),
    }
    for i in 0..8u32 {
        let got = db.get(format!("cold{i}").as_bytes()).unwrap();
        assert!(got == Some(cold(i)), "{fault:?}: cold{i} lost");
    }
    for k in 0..n {
        assert!(db.get(format!("fill{k:06}").as_bytes()).unwrap() == Some(fill.clone()));
    }
    db.close().unwrap();
}

#[test]
fn gc_refuses_a_victim_page_with_read_errors_and_loses_nothing() {
    gc_refuses_a_victim_it_cannot_read(VictimFault::ReadErrors);
}

#[test]
fn gc_refuses_a_victim_page_with_a_bad_checksum_and_loses_nothing() {
    gc_refuses_a_victim_it_cannot_read(VictimFault::BitFlip);
}
