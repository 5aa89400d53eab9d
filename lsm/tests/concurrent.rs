//! Readers on several threads while a writer overwrites (forcing garbage collection, flushes
//! and compactions): every read returns a complete value of the right key, never older than
//! one the reader already saw.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hwftl_sim::{
    AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore, Release, TimingModel,
};
use lsm::{Engine, EngineConfig, WriteOp};

const KEYS: u32 = 64;

fn value(key: u32, version: u32) -> Vec<u8> {
    // Packed in a page, exactly one raw page, and spanning two pages.
    let len = [100, 8192, 9000][key as usize % 3];
    let mut v = vec![0u8; len];
    v[..4].copy_from_slice(&key.to_le_bytes());
    v[4..8].copy_from_slice(&version.to_le_bytes());
    let tail = v.len() - 4;
    v[tail..].copy_from_slice(&(key ^ version).to_le_bytes());
    v
}

fn small_engine() -> Arc<Engine> {
    small_engine_with(Release::Virtual)
}

/// With `Release::WallClock` reads take the paper card's time, so a read is still in flight
/// when garbage collection gets to its segment.
fn small_engine_with(release: Release) -> Arc<Engine> {
    let g = Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 40,
        pages_per_block: 8,
        spare_blocks_per_chip: 2,
    };
    let mut dc = DeviceConfig::new(g);
    if release == Release::WallClock {
        dc.timing = TimingModel::PaperCard;
        dc.release = release;
    }
    let dev: Arc<dyn AppendDevice> =
        Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), dc).unwrap());
    let cfg = EngineConfig {
        memtable_bytes: 2048,
        l0_runs: 2,
        l1_bytes: 4096,
        keytable_bytes: 1024,
        level_ratio: 2,
        // Garbage collection in small steps, so moves interleave with everything else.
        gc_window_pages: 4,
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(dev, cfg).unwrap());
    for k in 0..KEYS {
        db.put(&k.to_le_bytes(), &value(k, 0)).unwrap();
    }
    db
}

/// Overwrites keys in batches until `rounds` batches are written.
fn overwrite(db: &Engine, rounds: u32) {
    for round in 1..=rounds {
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..4)
            .map(|i| {
                let k = (round * 13 + i * 5) % KEYS;
                (k.to_le_bytes().to_vec(), value(k, round))
            })
            .collect();
        let ops: Vec<WriteOp<'_>> = batch.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
        db.write(&ops).unwrap();
    }
}

#[test]
fn reads_stay_correct_while_writes_flush_compact_and_collect() {
    let db = small_engine();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let db = db.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = vec![0u32; KEYS as usize];
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = (reads as u32 * 7 + t) % KEYS;
                    let v = db.get(&k.to_le_bytes()).unwrap().expect("key present");
                    let version = u32::from_le_bytes(v[4..8].try_into().unwrap());
                    assert_eq!(v, value(k, version), "torn or foreign value for key {k}");
                    assert!(version >= seen[k as usize], "key {k} went back in time");
                    seen[k as usize] = version;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    overwrite(&db, 300);
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let s = db.stats();
    assert!(reads > 100, "{reads} reads");
    assert!(s.gc_segments > 0 && s.compactions > 0, "{s:#?}");
}

/// The asynchronous path under the same churn: many keys per call, several calls in flight
/// from each reader, values checked when the poller delivers them. Garbage collection must
/// never trim a segment under a read that resolved a pointer into it, so no read fails.
#[test]
fn async_reads_stay_correct_while_values_move() {
    let db = small_engine_with(Release::WallClock);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let db = db.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (tx, rx) = std::sync::mpsc::channel();
                let mut calls = 0u64;
                let mut pending = 0;
                while !stop.load(Ordering::Relaxed) || pending > 0 {
                    if !stop.load(Ordering::Relaxed) && pending < 4 {
                        let first = (calls as u32 * 11 + t) % KEYS;
                        let keys: Vec<u32> = (0..9).map(|i| (first + i * 3) % KEYS).collect();
                        let raw: Vec<[u8; 4]> = keys.iter().map(|k| k.to_le_bytes()).collect();
                        let refs: Vec<&[u8]> = raw.iter().map(|k| &k[..]).collect();
                        let tx = tx.clone();
                        db.multi_get_async(&refs, Box::new(move |r| drop(tx.send((keys, r)))));
                        pending += 1;
                        calls += 1;
                        continue;
                    }
                    let (keys, r) = rx.recv().unwrap();
                    pending -= 1;
                    let values = r.expect("an asynchronous read failed");
                    assert_eq!(values.len(), keys.len());
                    for (k, v) in keys.iter().zip(values) {
                        let v = v.expect("key present");
                        let version = u32::from_le_bytes(v[4..8].try_into().unwrap());
                        assert_eq!(
                            &v[..],
                            &value(*k, version)[..],
                            "torn or foreign value for key {k}"
                        );
                    }
                }
                calls
            })
        })
        .collect();
    overwrite(&db, 300);
    stop.store(true, Ordering::Relaxed);
    let calls: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let s = db.stats();
    assert!(calls > 50, "{calls} calls");
    assert!(s.gc_segments > 0, "{s:#?}");
    // Values of 9000 bytes span two pages and are joined (copied); the others are slices.
    assert!(db.read_copy_bytes() > 0);
}

#[test]
fn async_reads_of_missing_keys_answer_none() {
    let db = small_engine();
    let (tx, rx) = std::sync::mpsc::channel();
    let missing = 9999u32.to_le_bytes();
    let present = 1u32.to_le_bytes();
    let t = tx.clone();
    db.multi_get_async(
        &[&missing[..], &present[..]],
        Box::new(move |r| drop(t.send(r))),
    );
    let got = rx.recv().unwrap().unwrap();
    assert_eq!(got[0], None);
    assert_eq!(got[1].as_deref(), Some(&value(1, 0)[..]));
    let db = Arc::try_unwrap(db).ok().unwrap();
    db.close().unwrap();
}

/// Batches started without waiting are applied in the order they were started, each whole,
/// and the pipeline refuses (rather than blocks) when it is full or maintenance is due.
#[test]
fn started_batches_apply_in_order() {
    let db = small_engine();
    let mut pending = std::collections::VecDeque::new();
    let mut refused = 0;
    for round in 1..=400u32 {
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..3)
            .map(|i| {
                let k = (round * 7 + i) % KEYS;
                (k.to_le_bytes().to_vec(), value(k, round))
            })
            .collect();
        let ops: Vec<WriteOp<'_>> = batch.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
        loop {
            match db.try_submit_write(&ops).unwrap() {
                Some(p) => {
                    pending.push_back(p);
                    break;
                }
                None => {
                    refused += 1;
                    match pending.pop_front() {
                        Some(p) => db.finish_write(p).unwrap(),
                        None => {
                            db.write(&ops).unwrap();
                            break;
                        }
                    }
                }
            }
        }
        if pending.len() > 3 {
            db.finish_write(pending.pop_front().unwrap()).unwrap();
        }
    }
    for p in pending {
        db.finish_write(p).unwrap();
    }
    // The last round that wrote each key wins.
    for k in 0..KEYS {
        let last = (1..=400u32)
            .rev()
            .find(|r| (0..3).any(|i| (r * 7 + i) % KEYS == k))
            .unwrap_or(0);
        let v = db.get(&k.to_le_bytes()).unwrap().expect("key present");
        assert_eq!(v, value(k, last), "key {k}");
    }
    assert!(refused > 0, "maintenance never made a start wait");
    let s = db.stats();
    assert!(s.flushes > 0 && s.gc_segments > 0, "{s:#?}");
}

#[test]
fn probes_are_answered_with_the_values() {
    let db = small_engine();
    let (tx, rx) = std::sync::mpsc::channel();
    let missing = 9999u32.to_le_bytes();
    let present = 2u32.to_le_bytes();
    db.multi_get_async_probed(
        &[&present[..], &missing[..]],
        &[&missing[..], &present[..]],
        Box::new(move |r, probes| drop(tx.send((r, probes)))),
    );
    let (values, probes) = rx.recv().unwrap();
    let values = values.unwrap();
    assert_eq!(values[0].as_deref(), Some(&value(2, 0)[..]));
    assert_eq!(values[1], None);
    assert_eq!(probes, vec![false, true]);
}

/// `range_async` under overwrites and garbage collection (reads in flight on the paper card's
/// timing): every page it returns is in key order, complete values of the right keys, and
/// honours `limit`, `max_bytes` and `skip`.
#[test]
fn async_range_reads_under_overwrites() {
    let db = small_engine_with(Release::WallClock);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) && round < 400 {
                overwrite(&db, 1);
                round += 1;
            }
        })
    };
    // Keys are little-endian numbers: skip those whose first byte is odd.
    let skip = |k: &[u8]| k[0] % 2 == 1;
    for i in 0..60u32 {
        let start = (i % KEYS).to_le_bytes();
        let (limit, max_bytes) = [(5, u64::MAX), (64, 9000), (64, u64::MAX)][i as usize % 3];
        let (tx, rx) = std::sync::mpsc::channel();
        db.range_async(
            &lsm::RangeRead {
                start: &start,
                end: None,
                limit,
                max_bytes,
                skip: Some(&skip),
            },
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        let pairs = rx.recv().unwrap().unwrap();
        assert!(!pairs.is_empty() || i % KEYS > KEYS - 2);
        assert!(pairs.len() <= limit);
        let bytes: usize = pairs.iter().map(|(_, v)| v.len()).sum();
        if max_bytes != u64::MAX && pairs.len() > 1 {
            let before_last = bytes - pairs[pairs.len() - 1].1.len();
            assert!(
                (before_last as u64) < max_bytes,
                "{bytes} bytes in {} pairs",
                pairs.len()
            );
        }
        let mut last: Option<Vec<u8>> = None;
        for (k, v) in &pairs {
            assert!(k.as_slice() >= start.as_slice());
            assert!(!skip(k), "a skipped key was returned");
            assert!(last.as_ref().is_none_or(|l| l < k), "out of order");
            let key = u32::from_le_bytes(k[..4].try_into().unwrap());
            let version = u32::from_le_bytes(v[4..8].try_into().unwrap());
            assert_eq!(v.as_ref(), value(key, version).as_slice(), "key {key}");
            last = Some(k.clone());
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

/// A read of hundreds of pages (a long range) must not take every device tag: writes and
/// their flushes, running meanwhile, keep working (they failed with `QueueFull` when one
/// asynchronous read submitted more pages than the tag pool holds).
#[test]
fn large_async_reads_leave_tags_for_writes() {
    let db = small_engine_with(Release::WallClock);
    for k in 1000..1300u32 {
        db.put(&k.to_be_bytes(), &value(k, 0)[..]).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(Ordering::Relaxed) && rounds < 40 {
                let (tx, rx) = std::sync::mpsc::channel();
                let start = 1000u32.to_be_bytes();
                db.range_async(
                    &lsm::RangeRead {
                        start: &start,
                        end: None,
                        limit: 400,
                        max_bytes: u64::MAX,
                        skip: None,
                    },
                    Box::new(move |r| {
                        let _ = tx.send(r.map(|p| p.len()));
                    }),
                );
                assert!(rx.recv().unwrap().unwrap() >= 300);
                rounds += 1;
            }
        })
    };
    for round in 0..60u32 {
        let k = 2000 + round % 7;
        db.put(&k.to_be_bytes(), &value(k, round)[..])
            .unwrap_or_else(|e| panic!("write {round} failed while reads ran: {e}"));
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
}

/// Small values written in key order share packed pages; a range or multi-get over them
/// reads each page once, not once per value.
#[test]
fn small_values_read_in_key_order_share_page_reads() {
    let db = small_engine();
    let keys: Vec<Vec<u8>> = (0..60u32)
        .map(|i| format!("s{i:04}").into_bytes())
        .collect();
    let values: Vec<Vec<u8>> = (0..60u32).map(|i| vec![i as u8; 100]).collect();
    let ops: Vec<WriteOp<'_>> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| WriteOp::Put(k, v))
        .collect();
    db.write(&ops).unwrap();
    let before = db.device_stats().reads;
    let all = db.range(b"s", Some(b"t"), usize::MAX).unwrap();
    assert_eq!(all.len(), 60);
    for ((k, v), (ek, ev)) in all.iter().zip(keys.iter().zip(&values)) {
        assert_eq!((k, v), (ek, ev));
    }
    let range_reads = db.device_stats().reads - before;
    // 60 records of 120 bytes fill one page (two if the batch began in a page's tail).
    assert!(
        range_reads <= 2,
        "{range_reads} page reads for 60 small values"
    );
    let before = db.device_stats().reads;
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let got = db.multi_get(&refs).unwrap();
    assert!(got
        .iter()
        .zip(&values)
        .all(|(g, v)| g.as_deref() == Some(v.as_slice())));
    assert!(db.device_stats().reads - before <= 2);
}

/// Values asked for out of page order (a client's HMGET names a hash's fields in its own
/// order) still cost one read per packed page: a multi-get alternating between the values
/// of two batches reads each batch's pages once, not once per value.
#[test]
fn small_values_read_out_of_order_share_page_reads() {
    let db = small_engine();
    let batch = |tag: char| -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let keys = (0..40u32)
            .map(|i| format!("{tag}{i:04}").into_bytes())
            .collect();
        let values = (0..40u32)
            .map(|i| vec![(i as u8).wrapping_add(tag as u8); 100])
            .collect();
        (keys, values)
    };
    let (a_keys, a_values) = batch('a');
    let (b_keys, b_values) = batch('b');
    for (keys, values) in [(&a_keys, &a_values), (&b_keys, &b_values)] {
        let ops: Vec<WriteOp<'_>> = keys
            .iter()
            .zip(values.iter())
            .map(|(k, v)| WriteOp::Put(k, v))
            .collect();
        db.write(&ops).unwrap();
    }
    // a0 b0 a1 b1 ...: every value's page differs from the one asked for before it.
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut want: Vec<&[u8]> = Vec::new();
    for i in 0..40 {
        keys.extend([a_keys[i].as_slice(), b_keys[i].as_slice()]);
        want.extend([a_values[i].as_slice(), b_values[i].as_slice()]);
    }
    let before = db.device_stats().reads;
    let got = db.multi_get(&keys).unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.as_deref(), Some(*w));
    }
    let reads = db.device_stats().reads - before;
    // Two batches of 40 records of 105 bytes: at most four pages between them.
    assert!(reads <= 4, "{reads} page reads for 80 small values");
}
