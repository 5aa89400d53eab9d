//! The keytable's bloom filter: a split-block bloom filter (the layout of Parquet's SBBF and
//! of RocksDB's cache-local filters), built in DRAM when a run is finished or loaded.
//!
//! **Why not a classic filter.** A classic bloom filter at 1% sets ~7 bits anywhere in the
//! run's bitmap, so a negative probe of a large run costs up to 7 cache misses, and the
//! `bloomfilter` crate hashed each key twice with SipHash per run probed. A point lookup
//! asks every level's run on the key's path (all of L0, one partition per deeper level), so
//! that cost was paid several times per key: on YCSB-shaped hash writes the type probe
//! alone was ~9% of `ls-net`'s time (`benches/results/cpu-per-op-2026-11-30b`).
//!
//! **Shape.** The filter is an array of 256-bit blocks (eight `u32` words, 32 bytes, half a
//! cache line). A key's 64-bit [`KeyHash`] picks one block with its high half and sets one
//! bit in each of the block's eight words from its low half (eight odd multipliers, the top
//! five bits of each product). So a probe reads one block: one cache miss at most. The hash
//! is XXH3-64, computed once per lookup and reused for every run the lookup asks
//! ([`KeyHash::of`], [`KeyTable::get_held_hashed`](super::KeyTable::get_held_hashed)).
//!
//! **Size.** For a false-positive rate `p` a filter of `n` keys gets
//! `8 n / -ln(1 - p^(1/8))` bits (9.7 bits per key at 1%), rounded up to whole blocks; a
//! test checks the rate it gives.

/// Bits each key sets, one per word of its block.
const WORDS: usize = 8;

/// The odd multipliers that spread a key's low 32 hash bits over the eight words (the
/// constants Parquet's split-block filter specifies).
const SALT: [u32; WORDS] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

/// Seed of the key hash (any fixed value: filters are rebuilt at every load, never stored).
const SEED: u64 = 0x4c53_6b74_626c_6f6d;

/// A key's 64-bit hash, as every run's filter reads it: computed once per lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    /// The hash of `key`.
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(xxhash_rust::xxh3::xxh3_64_with_seed(key, SEED))
    }

    /// The bit of each word the key sets in its block.
    fn masks(self) -> [u32; WORDS] {
        let low = self.0 as u32;
        SALT.map(|s| 1u32 << (low.wrapping_mul(s) >> 27))
    }
}

/// A split-block bloom filter over a run's keys (see the module docs).
pub struct BlockBloom {
    blocks: Box<[[u32; WORDS]]>,
}

impl BlockBloom {
    /// An empty filter sized for `keys` keys at false-positive rate `fp` (clamped to
    /// `1e-6 ..= 0.5`).
    pub fn new(keys: usize, fp: f64) -> BlockBloom {
        let fp = fp.clamp(1e-6, 0.5);
        let per_key = -(WORDS as f64) / (1.0 - fp.powf(1.0 / WORDS as f64)).ln();
        let bits = (keys.max(1) as f64 * per_key).ceil();
        let blocks = ((bits / 256.0).ceil() as usize).max(1);
        BlockBloom {
            blocks: vec![[0u32; WORDS]; blocks].into_boxed_slice(),
        }
    }

    /// The block `h` falls in (the high half of the hash, scaled to the block count).
    fn block(&self, h: KeyHash) -> usize {
        (((h.0 >> 32) * self.blocks.len() as u64) >> 32) as usize
    }

    /// Adds the key whose hash is `h`.
    pub fn insert(&mut self, h: KeyHash) {
        let b = self.block(h);
        for (word, mask) in self.blocks[b].iter_mut().zip(h.masks()) {
            *word |= mask;
        }
    }

    /// Whether the key whose hash is `h` may have been added (never `false` for one that
    /// was).
    pub fn may_contain(&self, h: KeyHash) -> bool {
        let block = &self.blocks[self.block(h)];
        block
            .iter()
            .zip(h.masks())
            .all(|(word, mask)| word & mask != 0)
    }

    /// DRAM bytes of the filter.
    pub fn dram_bytes(&self) -> usize {
        self.blocks.len() * WORDS * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Vec<u8> {
        format!("f\0\0\0\x10user{i:012}field{}", i % 10).into_bytes()
    }

    #[test]
    fn every_key_added_is_found() {
        for n in [0u64, 1, 7, 1000, 50_000] {
            let mut b = BlockBloom::new(n as usize, 0.01);
            for i in 0..n {
                b.insert(KeyHash::of(&key(i)));
            }
            assert!(
                (0..n).all(|i| b.may_contain(KeyHash::of(&key(i)))),
                "n = {n}"
            );
        }
    }

    #[test]
    fn false_positive_rate_is_near_the_one_asked() {
        let n = 100_000u64;
        for fp in [0.01, 0.05] {
            let mut b = BlockBloom::new(n as usize, fp);
            for i in 0..n {
                b.insert(KeyHash::of(&key(i)));
            }
            let probes = 200_000u64;
            let hits = (n..n + probes)
                .filter(|&i| b.may_contain(KeyHash::of(&key(i))))
                .count() as f64;
            let rate = hits / probes as f64;
            // The block layout costs a little accuracy over a classic filter of the same
            // size; more than 1.6x the rate asked would mean a broken hash or sizing.
            assert!(rate < fp * 1.6, "fp {fp}: measured {rate}");
            assert!(
                rate > fp / 4.0,
                "fp {fp}: measured {rate}: the filter is oversized"
            );
        }
    }

    #[test]
    fn size_follows_the_rate() {
        let b = BlockBloom::new(100_000, 0.01);
        let bits_per_key = b.dram_bytes() as f64 * 8.0 / 100_000.0;
        assert!((9.0..11.0).contains(&bits_per_key), "{bits_per_key}");
        assert_eq!(BlockBloom::new(0, 0.01).dram_bytes(), 32);
    }
}
