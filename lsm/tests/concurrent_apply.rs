//! Batches of different writers are inserted into the memtable at the same time, with the
//! write lock free, and in any order (`engine::write`: claimed in ticket order, inserted by
//! their finishers, published in ticket order). Writers here overwrite the *same* keys, so
//! inserts of one key race: the garbage each insert reports (the version it shadows) must
//! still be counted exactly once, which the offline check verifies against the live
//! pointers after a clean close, and each key must end with the value of its newest
//! acknowledged write. Puts with deadlines and retimes race with the rest (a retime must
//! not be overtaken by a later batch's version of its key, nor overtake the version whose
//! value it retimes: `ApplyJob::after`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::{Arc, Mutex};

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;

const WRITERS: u64 = 4;
const KEYS: u32 = 96;
const BATCHES: u32 = 1000;

/// A deadline far ahead (2100).
fn far() -> std::num::NonZeroU64 {
    std::num::NonZeroU64::new(4_102_444_800_000).unwrap()
}

fn key(k: u32) -> Vec<u8> {
    format!("shared-{k:03}").into_bytes()
}

/// A value that names its writer, batch and key, of a length that varies with them.
fn value(writer: u64, batch: u32, k: u32) -> Vec<u8> {
    let tag = format!("{writer}:{batch}:{k};");
    let len = 40 + ((writer as usize * 131 + batch as usize * 17 + k as usize * 7) % 1500);
    tag.bytes().cycle().take(len).collect()
}

#[test]
fn racing_inserts_of_shared_keys_count_garbage_once() {
    race(EngineConfig {
        // Several memtables per run: flushes (which store the garbage counts) happen while
        // the writers race.
        memtable_bytes: 96 << 10,
        ..EngineConfig::default()
    });
}

/// The same race acknowledged from DRAM: the writers' small batches share open packed
/// pages (deletes, retimes and puts with deadlines among them), and the garbage counts
/// still come out exact.
#[test]
fn racing_inserts_acknowledged_from_dram_sharing_pages_count_garbage_once() {
    race(EngineConfig {
        memtable_bytes: 96 << 10,
        ack_from_dram: true,
        flush_writes: false,
        ..EngineConfig::default()
    });
}

/// Retimes of a few keys, often of a value a batch still being inserted wrote: a retime
/// inserted before that version would let the value be counted as garbage twice (once
/// through the retime when a later version shadows it, once by the overtaken version).
#[test]
fn retimes_of_values_still_being_inserted_count_garbage_once() {
    race_with(
        EngineConfig {
            memtable_bytes: 96 << 10,
            ..EngineConfig::default()
        },
        8,
        3,
    );
}

/// The same, acknowledged from DRAM: early batches share open pages and stay in the pipeline
/// until their pages land.
#[test]
fn retimes_of_values_still_being_inserted_acknowledged_from_dram_count_garbage_once() {
    race_with(
        EngineConfig {
            memtable_bytes: 96 << 10,
            ack_from_dram: true,
            flush_writes: false,
            ..EngineConfig::default()
        },
        8,
        3,
    );
}

fn race(cfg: EngineConfig) {
    race_with(cfg, KEYS, 9);
}

/// `writers` race over `keys` keys; of a batch's ops, one in `every` is a delete and one a
/// retime.
fn race_with(cfg: EngineConfig, keys: u32, every: u32) {
    let g = common::small_geometry();
    let backend = Backend::Ram(RamStore::new());
    drop(Ftl::format(&backend, DeviceConfig::new(g)).unwrap());
    let dev: Arc<dyn AppendDevice> = Arc::new(Ftl::open(&backend, DeviceConfig::new(g)).unwrap());
    let db = Arc::new(Engine::open(dev, cfg.clone()).unwrap());
    // Per key, the (sequence of acknowledgement, value) of the newest acknowledged write.
    // A writer's acknowledgement and its entry here are not one step, so the final check
    // allows any value acknowledged by a write that was in flight with the last one.
    let acked: Arc<Mutex<Vec<Vec<Vec<u8>>>>> =
        Arc::new(Mutex::new(vec![Vec::new(); keys as usize]));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (db, acked) = (db.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x5eed + w);
                for b in 0..BATCHES {
                    let n = rng.gen_range(1..12);
                    let mut ks: Vec<u32> = (0..n).map(|_| rng.gen_range(0..keys)).collect();
                    ks.sort_unstable();
                    ks.dedup();
                    let kv: Vec<(Vec<u8>, Vec<u8>)> =
                        ks.iter().map(|&k| (key(k), value(w, b, k))).collect();
                    let ops: Vec<WriteOp<'_>> = kv
                        .iter()
                        .enumerate()
                        .map(|(i, (k, v))| match (b + i as u32) % every {
                            0 => WriteOp::Delete(k),
                            // Retimes race with other writers' versions of the key.
                            r if r == every / 2 + 1 => WriteOp::Retime(k, Some(far())),
                            r if r == every / 2 + 2 => WriteOp::PutUntil(k, v, far()),
                            _ => WriteOp::Put(k, v),
                        })
                        .collect();
                    db.write(&ops).unwrap();
                    let mut a = acked.lock().unwrap();
                    for (op, k) in ops.iter().zip(&ks) {
                        let v = match op {
                            WriteOp::Put(_, v) | WriteOp::PutUntil(_, v, _) => v.to_vec(),
                            WriteOp::Delete(_) => Vec::new(),
                            // The value stays what it was.
                            WriteOp::Retime(..) => continue,
                        };
                        let versions = &mut a[*k as usize];
                        versions.push(v);
                        // The last few acknowledged: one of them is the key's final value.
                        if versions.len() > (WRITERS as usize) * 2 {
                            versions.remove(0);
                        }
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let s = db.stats();
    assert!(
        s.flushes > 2,
        "the memtable was flushed while writers ran: {s:?}"
    );
    if cfg.ack_from_dram {
        assert!(s.shared_page_joins > 0, "no batch shared a page: {s:?}");
    }
    let acked = acked.lock().unwrap();
    for k in 0..keys {
        let got = db.get(&key(k)).unwrap().unwrap_or_default();
        let versions = &acked[k as usize];
        if versions.is_empty() {
            assert!(got.is_empty(), "key {k} was never written");
            continue;
        }
        assert!(
            versions.contains(&got),
            "key {k}: {:?} is none of the last acknowledged values",
            String::from_utf8_lossy(&got[..got.len().min(16)])
        );
    }
    // A clean close stores the garbage counts; the offline check recounts them from the
    // live pointers and must agree to the byte.
    Arc::try_unwrap(db)
        .ok()
        .expect("the writers let go of the engine")
        .close()
        .unwrap();
    common::assert_fsck_clean(&backend, DeviceConfig::new(g), cfg);
}
