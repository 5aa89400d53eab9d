//! `Engine::sample_key` (RANDOMKEY): a drawn key is always live and inside the ranges asked,
//! every live key can be drawn, and no key (or no live key) gives `None`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, WriteOp};

use common::small_geometry;

fn open() -> Engine {
    open_with_memtable(16 << 10)
}

fn open_with_memtable(memtable_bytes: usize) -> Engine {
    let backend = Backend::Ram(RamStore::new());
    let dev: Arc<dyn AppendDevice> =
        Arc::new(Ftl::format(&backend, DeviceConfig::new(small_geometry())).unwrap());
    let config = EngineConfig {
        memtable_bytes,
        l0_runs: 2,
        l1_bytes: 32 << 10,
        level_ratio: 4,
        keytable_bytes: 4 << 10,
        ..EngineConfig::default()
    };
    Engine::open(dev, config).unwrap()
}

fn key(tag: u8, k: u32) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(format!("key{k:06}").as_bytes());
    v
}

fn put_all(db: &Engine, keys: &[Vec<u8>]) {
    for chunk in keys.chunks(256) {
        let ops: Vec<WriteOp<'_>> = chunk.iter().map(|k| WriteOp::Put(k, b"value")).collect();
        db.write(&ops).unwrap();
    }
}

#[test]
fn nothing_to_draw_is_none() {
    let db = open();
    assert_eq!(
        db.sample_key(&[(b"a", Some(b"b"))], 1, &mut |_| true)
            .unwrap(),
        None
    );
    put_all(&db, &[key(b'a', 1)]);
    db.write(&[WriteOp::Delete(&key(b'a', 1))]).unwrap();
    assert_eq!(
        db.sample_key(&[(b"a", Some(b"b"))], 2, &mut |_| true)
            .unwrap(),
        None
    );
    // A key outside the range is never drawn.
    put_all(&db, &[key(b'c', 1)]);
    assert_eq!(
        db.sample_key(&[(b"a", Some(b"b"))], 3, &mut |_| true)
            .unwrap(),
        None
    );
    assert_eq!(
        db.sample_key(&[(b"a", Some(b"b")), (b"c", Some(b"d"))], 4, &mut |_| true)
            .unwrap(),
        Some(key(b'c', 1))
    );
}

/// Draws `n` keys; every one must be in `live`. Returns the distinct keys drawn and how
/// often each was.
fn draw_counting(
    db: &Engine,
    ranges: &[(&[u8], Option<&[u8]>)],
    live: &HashSet<Vec<u8>>,
    n: u64,
) -> (HashSet<Vec<u8>>, std::collections::HashMap<Vec<u8>, u64>) {
    let mut counts = std::collections::HashMap::new();
    for k in draw_all(db, ranges, live, n) {
        *counts.entry(k).or_insert(0) += 1;
    }
    (counts.keys().cloned().collect(), counts)
}

fn draw_all(
    db: &Engine,
    ranges: &[(&[u8], Option<&[u8]>)],
    live: &HashSet<Vec<u8>>,
    n: u64,
) -> Vec<Vec<u8>> {
    (0..n)
        .map(|seed| {
            let k = db
                .sample_key(ranges, seed, &mut |_| true)
                .unwrap()
                .expect("a live key");
            assert!(
                live.contains(&k),
                "drew {:?}, not a live key of the ranges",
                String::from_utf8_lossy(&k)
            );
            k
        })
        .collect()
}

/// Draws `n` keys; every one must be in `live`. Returns the distinct keys drawn.
fn draw(
    db: &Engine,
    ranges: &[(&[u8], Option<&[u8]>)],
    live: &HashSet<Vec<u8>>,
    n: u64,
) -> HashSet<Vec<u8>> {
    draw_all(db, ranges, live, n).into_iter().collect()
}

#[test]
fn a_small_keyspace_is_drawn_whole() {
    let db = open();
    let keys: Vec<Vec<u8>> = (0..50).map(|k| key(b'a', k)).collect();
    put_all(&db, &keys);
    let live: HashSet<Vec<u8>> = keys.into_iter().collect();
    let seen = draw(&db, &[(b"a", Some(b"b"))], &live, 2_000);
    assert_eq!(
        seen.len(),
        live.len(),
        "every key of a small keyspace is drawn"
    );
}

/// A keyspace of many keys still only in the memtable (no flush yet), in two ranges of very
/// different sizes: every key of both can be drawn, and a key refused by `accept` (as the
/// drive refuses an expired one) is passed over for the next.
#[test]
fn memtable_keys_and_a_small_range_beside_a_large_one_are_drawn() {
    let db = open_with_memtable(64 << 20);
    let many: Vec<Vec<u8>> = (0..20_000).map(|k| key(b'a', k)).collect();
    let few: Vec<Vec<u8>> = (0..5).map(|k| key(b'c', k)).collect();
    put_all(&db, &many);
    put_all(&db, &few);
    let live: HashSet<Vec<u8>> = many.iter().chain(&few).cloned().collect();
    let ranges: [(&[u8], Option<&[u8]>); 2] = [(b"a", Some(b"b")), (b"c", Some(b"d"))];
    // Uniform: 20,000 draws over 20,005 keys meet about 1 - 1/e of them (12,650), and the
    // small range about 5 times. (The draws are seeded: the outcome is repeatable.)
    let (seen, counts) = draw_counting(&db, &ranges, &live, 20_000);
    let from_small: u64 = few
        .iter()
        .map(|k| counts.get(k).copied().unwrap_or(0))
        .sum();
    assert!(
        (12_000..13_300).contains(&seen.len()),
        "{} distinct keys in 20,000 draws",
        seen.len()
    );
    assert!(
        (1..=15).contains(&from_small),
        "{from_small} draws from the small range"
    );
    let odd = |k: &[u8]| k.last().is_some_and(|b| b % 2 == 1);
    for seed in 0..200 {
        let k = db
            .sample_key(&ranges, seed, &mut |k| odd(k))
            .unwrap()
            .unwrap();
        assert!(odd(&k));
    }
    assert_eq!(
        db.sample_key(&ranges, 1, &mut |_| false).unwrap(),
        None,
        "nothing accepted: none"
    );
    // One key accepted among 20,005 (as after a mass expiry): the bounded draws miss it,
    // the last-resort walk finds it.
    let only = key(b'a', 12_345);
    for seed in 0..5 {
        assert_eq!(
            db.sample_key(&ranges, seed, &mut |k| k == only.as_slice())
                .unwrap(),
            Some(only.clone())
        );
    }
}

#[test]
fn a_large_keyspace_in_keytables_is_drawn_live_keys_only_and_widely() {
    let db = open();
    // Two ranges (as RANDOMKEY's type ranges), records between them that must never be
    // drawn, and half of each range's keys deleted after they reached the keytables.
    let a: Vec<Vec<u8>> = (0..6_000).map(|k| key(b'a', k)).collect();
    let b: Vec<Vec<u8>> = (0..4_000).map(|k| key(b'c', k)).collect();
    let between: Vec<Vec<u8>> = (0..3_000).map(|k| key(b'b', k)).collect();
    put_all(&db, &a);
    put_all(&db, &b);
    put_all(&db, &between);
    db.flush().unwrap();
    db.settle().unwrap();
    let dead: Vec<&Vec<u8>> = a.iter().chain(&b).step_by(2).collect();
    for chunk in dead.chunks(256) {
        let ops: Vec<WriteOp<'_>> = chunk.iter().map(|k| WriteOp::Delete(k)).collect();
        db.write(&ops).unwrap();
    }
    let live: HashSet<Vec<u8>> = a.iter().chain(&b).skip(1).step_by(2).cloned().collect();
    let ranges: [(&[u8], Option<&[u8]>); 2] = [(b"a", Some(b"b")), (b"c", Some(b"d"))];
    // The deletes still in the memtable, then flushed and compacted away.
    for round in 0..2 {
        let seen = draw(&db, &ranges, &live, 30_000);
        assert!(
            seen.len() * 10 >= live.len() * 9,
            "round {round}: {} of {} live keys drawn in 30,000 draws",
            seen.len(),
            live.len()
        );
        let from_c = seen.iter().filter(|k| k[0] == b'c').count();
        assert!(
            from_c > 1_000,
            "both ranges are drawn from ({from_c} from the second)"
        );
        db.flush().unwrap();
        db.settle().unwrap();
    }
}
