//! A value-log segment is not trimmed while a read that resolved a pointer into it is still
//! reading: a read is held at the device (its page read blocked in a gate) while writes make
//! garbage collection reclaim the segment it reads from. The trim must wait until the read is
//! let go, and the read must return its value.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hwftl_sim::{AppendDevice, Backend, Command, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, Oldest, WriteOp};

use common::{small_geometry, CutDevice};

const READER: &str = "gated-reader";

#[derive(Default)]
struct Gate {
    /// The reader's page read is waiting at the device.
    held: AtomicBool,
    open: AtomicBool,
    /// The device segment the held read is for.
    segment: AtomicU64,
    trims: Mutex<Vec<(u32, Instant)>>,
}

fn value(k: u32, round: u32) -> Vec<u8> {
    let mut v = vec![(k ^ round) as u8; 8192];
    v[..8].copy_from_slice(&(u64::from(k) << 32 | u64::from(round)).to_le_bytes());
    v
}

/// Overwrites 1,024 keys of 8 KiB (8 MiB) in batches of 64.
fn overwrite(db: &Engine, round: u32) {
    for chunk in 0..16u32 {
        let vals: Vec<(Vec<u8>, Vec<u8>)> = (chunk * 64..chunk * 64 + 64)
            .map(|k| (k.to_be_bytes().to_vec(), value(k, round)))
            .collect();
        let ops: Vec<WriteOp<'_>> = vals.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
        db.write(&ops).unwrap();
    }
}

#[test]
fn a_reclaimed_segment_is_trimmed_only_after_reads_into_it_finish() {
    let g = small_geometry();
    let pps = u64::from(g.pages_per_segment());
    let ftl = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    let gate = Arc::new(Gate::default());
    let gate_in = gate.clone();
    let dev: Arc<dyn AppendDevice> = Arc::new(CutDevice::new(
        ftl,
        Box::new(move |cmd: &Command| {
            match cmd {
                Command::Read { lba, .. }
                    if std::thread::current().name() == Some(READER)
                        && !gate_in.open.load(SeqCst) =>
                {
                    gate_in.segment.store(lba.0 / pps, SeqCst);
                    gate_in.held.store(true, SeqCst);
                    while !gate_in.open.load(SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                Command::Trim { segment } => {
                    gate_in
                        .trims
                        .lock()
                        .unwrap()
                        .push((segment.0, Instant::now()));
                }
                _ => {}
            }
            false
        }),
    ));
    let cfg = EngineConfig {
        // The oldest segment is reclaimed first: the one the held read is in.
        gc_policy: Arc::new(Oldest),
        memtable_bytes: 16 << 10,
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(dev, cfg).unwrap());
    // The read's key is written first (the oldest segment), and stays live.
    db.put(b"held", &value(u32::MAX, 0)).unwrap();
    overwrite(&db, 0);
    db.flush().unwrap();

    let reader = {
        let db = db.clone();
        std::thread::Builder::new()
            .name(READER.into())
            .spawn(move || db.get(b"held").unwrap())
            .unwrap()
    };
    while !gate.held.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let segment = gate.segment.load(SeqCst) as u32;
    // Overwrites until garbage collection has reclaimed the oldest segments (moving the held
    // key's value) and wants to trim them.
    let progress = Arc::new(AtomicU64::new(0));
    let writer = {
        let (db, progress) = (db.clone(), progress.clone());
        std::thread::spawn(move || {
            for round in 1..=12 {
                overwrite(&db, round);
                progress.fetch_add(1, SeqCst);
            }
        })
    };
    // Wait until the writer is stuck (waiting for the read) or done.
    let mut last = (u64::MAX, Instant::now());
    while !writer.is_finished() {
        let p = progress.load(SeqCst);
        if p != last.0 {
            last = (p, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let opened = Instant::now();
    let early: Vec<u32> = gate
        .trims
        .lock()
        .unwrap()
        .iter()
        .filter(|(s, _)| *s == segment)
        .map(|(s, _)| *s)
        .collect();
    gate.open.store(true, SeqCst);
    let got = reader.join().unwrap();
    writer.join().unwrap();
    assert!(
        early.is_empty(),
        "segment {segment} was trimmed while a read into it was on the device"
    );
    assert_eq!(got.as_deref(), Some(&value(u32::MAX, 0)[..]));
    let trims = gate.trims.lock().unwrap();
    assert!(
        trims.iter().any(|(s, at)| *s == segment && *at >= opened),
        "garbage collection never reclaimed segment {segment} (the test did not reach the trim)"
    );
    assert_eq!(
        db.get(b"held").unwrap().as_deref(),
        Some(&value(u32::MAX, 0)[..])
    );
}
