//! Keytable DRAM per key (DESIGN section 8: at most the key's length + 16 bytes, bloom
//! filter included), on runs built directly, decoded from their pages and compacted.
//! Sizes only: deterministic, no timing.

use lsm::keytable::{KeyTable, KeyTableBuilder, Slot};
use lsm::merge::{compact, run_source, OutputSpec};
use lsm::vlog_format::{ValueLoc, ValuePtr};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const FP_RATE: f64 = 0.01;

/// `n` distinct sorted keys of 16-24 bytes, starting with `prefix`.
fn keys(n: usize, seed: u64, prefix: &[u8]) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut keys: Vec<Vec<u8>> = (0..n + n / 10)
        .map(|_| {
            let len = rng.gen_range(16..=24);
            let mut k = prefix.to_vec();
            k.extend((prefix.len()..len).map(|_| rng.gen::<u8>()));
            k
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys.truncate(n);
    keys
}

/// A realistic mix: small values packed in pages, large ones raw, some deletions, over a
/// few thousand log segments.
fn slot(rng: &mut SmallRng) -> Slot {
    let log_seg = rng.gen_range(10_000..13_000);
    match rng.gen_range(0..10) {
        0 => Slot::Tombstone,
        1..=2 => Slot::value(ValuePtr {
            log_seg,
            loc: ValueLoc::Raw {
                page: rng.gen_range(0..16_384),
                crc: rng.gen(),
            },
            len: rng.gen_range(8_000..1 << 20),
        }),
        _ => Slot::value(ValuePtr {
            log_seg,
            loc: ValueLoc::Inline {
                page: rng.gen_range(0..16_384),
                offset: rng.gen_range(32..8_000),
            },
            len: rng.gen_range(0..4_000),
        }),
    }
}

fn build(id: u64, keys: &[Vec<u8>], seed: u64) -> KeyTable {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut b = KeyTableBuilder::new(id);
    for k in keys {
        b.push(k, &slot(&mut rng), None);
    }
    b.finish(FP_RATE)
}

/// DRAM bytes per key above the average key length.
fn overhead(t: &KeyTable) -> f64 {
    let key_bytes: usize = (0..t.len()).map(|i| t.key(i).len()).sum();
    (t.dram_bytes() - key_bytes) as f64 / t.len() as f64
}

fn check(what: &str, t: &KeyTable) {
    let o = overhead(t);
    println!("{what}: {} keys, key + {o:.3} bytes each", t.len());
    assert!(
        o <= 16.0,
        "{what}: key + {o:.3} bytes per key, over key + 16"
    );
}

#[test]
fn dram_per_key_is_at_most_key_plus_16() {
    for (seed, prefix) in [(1u64, &b""[..]), (2, &b"suser:"[..])] {
        let keys = keys(100_000, seed, prefix);
        let t = build(1, &keys, seed);
        assert_eq!(t.len(), 100_000);
        check("built", &t);

        let pages = t.encode_pages();
        let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
        let back = KeyTable::decode_pages(1, &refs, FP_RATE).expect("decode");
        assert_eq!(back.len(), t.len());
        assert_eq!(back.dram_bytes(), t.dram_bytes());
        check("decoded", &back);

        // Compaction: half the keys overwritten by a newer run.
        let newer: Vec<Vec<u8>> = keys.iter().step_by(2).cloned().collect();
        let newer = build(2, &newer, seed + 100);
        let spec = OutputSpec {
            ids: 3..4,
            target_bytes: usize::MAX,
            bottom: false,
            fp_rate: FP_RATE,
            expiry: None,
        };
        let (mut merged, dead, _) = compact(vec![run_source(&newer, 0), run_source(&t, 0)], &spec);
        assert_eq!(merged.len(), 1, "one output run");
        let merged = merged.remove(0);
        assert_eq!(merged.len(), 100_000);
        assert!(dead.len() >= 40_000, "{} values shadowed", dead.len());
        check("compacted", &merged);
    }
}

#[test]
fn dram_per_key_with_longer_keys_and_one_segment() {
    // One log segment and 100-byte keys: the per-key cost does not depend on either.
    let keys: Vec<Vec<u8>> = (0..50_000u32)
        .map(|i| format!("{i:0100}").into_bytes())
        .collect();
    let mut b = KeyTableBuilder::new(1);
    for (i, k) in keys.iter().enumerate() {
        b.push(
            k,
            &Slot::value(ValuePtr {
                log_seg: 7,
                loc: ValueLoc::Inline {
                    page: i as u32 % 16_384,
                    offset: 100,
                },
                len: 100,
            }),
            None,
        );
    }
    check("100-byte keys", &b.finish(FP_RATE));
}
