//! Garbage collection with client batches in flight, acknowledged from DRAM
//! (`EngineConfig::ack_from_dram`): its moves are judged on what is applied and laid out
//! without draining the pipeline, unless a batch in flight writes a moved key, when they
//! wait for the drain and are judged again (`Inner::submit_gc_moves`). The test fills
//! about half the user capacity and overwrites random keys from several writers on a
//! device whose commands take real time, so that moves keep meeting batches in flight (and
//! now and then a batch that writes the very key being moved), and checks against each
//! writer's record of what it had acknowledged:
//! - every key reads back its last acknowledged value (an older copy moved over a newer
//!   write would show up here), before and after a `sync` and a power cut;
//! - deleted keys stay deleted;
//! - the offline check finds the garbage counts and the log exact;
//! - moves were laid out beside client batches.
//!
//! A move that meets a batch not yet claimed which writes its key is rare here (a writer
//! claims its batch right after laying it out); that case is the unit test
//! `engine::gc::tests::a_move_waits_for_a_client_batch_in_flight_that_writes_its_key`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::{Arc, Mutex};

use hwftl_sim::{
    AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore, Release, TimingModel,
};
use lsm::{Engine, EngineConfig, WriteOp};

use common::{assert_fsck_clean, stamped_value};

const WRITERS: u32 = 4;
/// Keys per writer. What a value occupies in the log is page-rounded: 500 and 3,000 bytes
/// pack into shared pages, 8,192 takes one raw 8 KiB page and 11,000 two (16 KiB), 7 KB per
/// key on average, so 4,000 keys hold about 28 MB live, half of the device's 52 MB user
/// capacity, and victims hold live values of keys that writers overwrite again. A writer's
/// keys all share one residue mod 4, so the size a key holds depends on its version and a
/// writer that runs ahead shifts the mix: at 1,500 keys per writer a run on a loaded machine
/// reached 52.6 MB live (8.8 KB per key, most at 11,000 bytes) and writes were refused with
/// `CapacityFull`, correctly (the engine's count matched the keytables' pointers exactly).
const KEYS_PER_WRITER: u32 = 1000;
/// Overwrite batches each writer issues (three keys each): about twice the device's user
/// capacity in all, with the initial fill.
const BATCHES: u32 = 1000;

fn config() -> EngineConfig {
    EngineConfig {
        flush_writes: false,
        ack_from_dram: true,
        memtable_bytes: 64 << 10,
        // Four steps per victim: the steps after a victim's first do not drain the pipeline.
        gc_window_pages: 4,
        ..EngineConfig::default()
    }
}

/// 512 segments of 16 pages (64 MiB): enough segments that garbage collection starts ahead
/// of the writers' low-water mark (1/128 of them early), so writers keep batches in flight
/// while it runs.
fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 514,
        pages_per_block: 4,
        spare_blocks_per_chip: 2,
    }
}

fn device_config() -> DeviceConfig {
    let mut dc = DeviceConfig::new(geometry());
    // Every command takes the paper card's time: batches stay in flight while garbage
    // collection judges and lays out its moves.
    dc.timing = TimingModel::PaperCard;
    dc.release = Release::WallClock;
    dc
}

fn key(k: u32) -> Vec<u8> {
    format!("key:{k:05}").into_bytes()
}

/// Sizes that make garbage quickly: raw pages and packed records both (5.7 KB on average).
fn value(k: u32, version: u32) -> Vec<u8> {
    let len = [3000, 8192, 500, 11000][((k + version) % 4) as usize];
    stamped_value(k, version, len)
}

/// What a key holds after `version` (every seventh version deletes it).
fn expected(k: u32, version: u32) -> Option<Vec<u8>> {
    (version % 7 != 0).then(|| value(k, version))
}

/// A write of a batch: the key, its new value (`None`: deleted), the key's index among the
/// writer's keys and its new version.
type Staged = (Vec<u8>, Option<Vec<u8>>, usize, u32);

fn check_all(db: &Engine, acked: &[u32], what: &str) {
    for (k, &v) in acked.iter().enumerate() {
        let k = k as u32;
        assert!(
            db.get(&key(k)).unwrap() == expected(k, v),
            "{what}: key {k} does not read back its last acknowledged version {v}"
        );
    }
}

#[test]
fn moves_beside_client_batches_never_overwrite_a_newer_write() {
    let backend = Backend::Ram(RamStore::new());
    let dc = device_config();
    let ftl = Arc::new(Ftl::format(&backend, dc).unwrap());
    let db = Arc::new(Engine::open(ftl.clone() as Arc<dyn AppendDevice>, config()).unwrap());
    let keys = WRITERS * KEYS_PER_WRITER;
    // Every key's last acknowledged version (0: never written).
    let acked = Arc::new(Mutex::new(vec![0u32; keys as usize]));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (db, acked) = (db.clone(), acked.clone());
            std::thread::spawn(move || {
                let mine: Vec<u32> = (0..keys).filter(|k| k % WRITERS == w).collect();
                let mut versions = vec![0u32; mine.len()];
                // Every key once, in batches of four.
                for chunk in (0..mine.len()).collect::<Vec<_>>().chunks(4) {
                    let vals: Vec<(Vec<u8>, Vec<u8>)> = chunk
                        .iter()
                        .map(|&i| (key(mine[i]), value(mine[i], 1)))
                        .collect();
                    let ops: Vec<WriteOp<'_>> =
                        vals.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
                    db.write(&ops).unwrap();
                    let mut a = acked.lock().unwrap();
                    for &i in chunk {
                        versions[i] = 1;
                        a[mine[i] as usize] = 1;
                    }
                }
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(w);
                for _ in 0..BATCHES {
                    // Three random keys of the writer's per batch.
                    let picks: Vec<usize> = (0..3)
                        .map(|_| {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            (rng % mine.len() as u64) as usize
                        })
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    let staged: Vec<Staged> = picks
                        .iter()
                        .map(|&i| {
                            let v = versions[i] + 1;
                            (key(mine[i]), expected(mine[i], v), i, v)
                        })
                        .collect();
                    let ops: Vec<WriteOp<'_>> = staged
                        .iter()
                        .map(|(k, v, _, _)| match v {
                            Some(v) => WriteOp::Put(k, v),
                            None => WriteOp::Delete(k),
                        })
                        .collect();
                    db.write(&ops).unwrap();
                    let mut a = acked.lock().unwrap();
                    for (_, _, i, v) in &staged {
                        versions[*i] = *v;
                        a[mine[*i] as usize] = *v;
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let s = db.stats();
    assert!(s.gc_segments > 0, "garbage collection ran: {s:?}");
    assert!(
        s.gc_batches_beside_clients > 0,
        "no move batch was laid out beside client batches: {s:?}"
    );
    let acked = acked.lock().unwrap().clone();
    check_all(&db, &acked, "while running");
    db.sync().unwrap();
    check_all(&db, &acked, "after sync");
    // The power goes: what `sync` made durable must all come back.
    ftl.power_cut();
    drop(db);
    let ftl = Arc::new(Ftl::open(&backend, dc).unwrap());
    let db = Engine::open(ftl as Arc<dyn AppendDevice>, config()).unwrap();
    check_all(&db, &acked, "after a power cut");
    db.close().unwrap();
    assert_fsck_clean(&backend, dc, config());
}
