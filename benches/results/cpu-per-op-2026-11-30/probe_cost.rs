//! What one hash probe costs on this host: the memtable's newest-version index is a
//! `DashMap<Arc<[u8]>, ..>` with foldhash; this times `get` on 55,000 keys shaped like the
//! drive's hash-field records (`f`, length, `user` + 19 digits, `fieldN`), hits in random
//! order, against a plain `HashMap<Box<[u8]>>` and one with the key bytes inline.
//!
//! Not part of the workspace. To run: `cargo new probe-cost`, add `dashmap = "6"` and
//! `foldhash = "0.2"` to its dependencies, replace `src/main.rs` with this file, then
//! `cargo run --release`.
use std::sync::Arc;
use std::time::Instant;

fn key(i: u64) -> Vec<u8> {
    let mut k = b"f\0\0\0\x17user".to_vec();
    let n = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 10_000_000_000_000_000_000;
    k.extend_from_slice(format!("{n:019}").as_bytes());
    k.extend_from_slice(format!("field{}", i % 10).as_bytes());
    k
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Inline {
    len: u8,
    b: [u8; 47],
}

impl Inline {
    fn new(k: &[u8]) -> Inline {
        let mut b = [0u8; 47];
        b[..k.len()].copy_from_slice(k);
        Inline { len: k.len() as u8, b }
    }
}

type Value = (u64, [u64; 3]);

fn main() {
    let n = 55_000u64;
    let keys: Vec<Vec<u8>> = (0..n).map(key).collect();
    let mut order: Vec<usize> = (0..n as usize).collect();
    let mut x = 12345u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let dash: dashmap::DashMap<Arc<[u8]>, Value, foldhash::fast::RandomState> =
        dashmap::DashMap::with_capacity_and_hasher(4096, Default::default());
    let mut boxed: std::collections::HashMap<Box<[u8]>, Value, foldhash::fast::RandomState> =
        Default::default();
    let mut inline: std::collections::HashMap<Inline, Value, foldhash::fast::RandomState> =
        Default::default();
    // Other allocations in between, as on a real heap.
    let mut other = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        dash.insert(Arc::from(k.clone().into_boxed_slice()), (i as u64, [0; 3]));
        boxed.insert(k.clone().into_boxed_slice(), (i as u64, [0; 3]));
        inline.insert(Inline::new(k), (i as u64, [0; 3]));
        other.push(vec![0u8; 200]);
    }
    let per_get = |f: &dyn Fn(&[u8]) -> u64| {
        let t = Instant::now();
        let mut s = 0u64;
        for _ in 0..10 {
            for &i in &order {
                s = s.wrapping_add(f(&keys[i]));
            }
        }
        (t.elapsed().as_nanos() as f64 / (10.0 * n as f64), s)
    };
    for round in 0..3 {
        let (d, _) = per_get(&|k| dash.get(k).map_or(0, |e| e.0));
        let (b, _) = per_get(&|k| boxed.get(k).map_or(0, |e| e.0));
        let (i, _) = per_get(&|k| inline.get(&Inline::new(k)).map_or(0, |e| e.0));
        println!("round {round}: dashmap {d:.0} ns, hashmap (boxed keys) {b:.0} ns, hashmap (inline keys) {i:.0} ns per hit");
    }
    drop(other);
}
