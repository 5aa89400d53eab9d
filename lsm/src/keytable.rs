//! Keytables: immutable sorted runs of (key -> value pointer or tombstone), fully cached in
//! DRAM in a compact form, with a bloom filter; and their 8 KiB on-device pages.
//!
//! DRAM layout: all keys back to back in one arena, a `u32` end offset per key, and a
//! 16-byte packed slot per key (log segment, page/offset or raw flag, length, checksum), so
//! a key costs its length + 20 bytes + ~1.2 bytes of bloom filter.
//!
//! Page layout: `crc32c u32 | magic u16 | count u16 | run u64 | page u32 | 0 u32` then
//! `count` entries of `key_len u16 | key | slot (16 bytes)`.

use bloomfilter::Bloom;
use hwftl_sim::PAGE_SIZE;

use crate::vlog_format::{ValueLoc, ValuePtr};

/// What a key maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The key's value.
    Value(ValuePtr),
    /// The key was deleted.
    Tombstone,
}

const TOMBSTONE_LEN: u32 = u32::MAX;
const RAW_FLAG: u32 = 1 << 31;
/// Largest page number an inline pointer can hold (18 bits).
pub const MAX_INLINE_PAGE: u32 = (1 << 18) - 1;
const PAGE_MAGIC: u16 = 0x544b; // "KT"
const PAGE_HEADER: usize = 24;
const SLOT_BYTES: usize = 16;
const BLOOM_SEED: [u8; 32] = *b"LightStore keytable bloom seed!!";

/// A slot packed into 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedSlot {
    log_seg: u32,
    loc: u32,
    len: u32,
    crc: u32,
}

impl PackedSlot {
    fn pack(s: &Slot) -> Self {
        match s {
            Slot::Tombstone => PackedSlot {
                log_seg: 0,
                loc: 0,
                len: TOMBSTONE_LEN,
                crc: 0,
            },
            Slot::Value(p) => match p.loc {
                ValueLoc::Inline { page, offset } => PackedSlot {
                    log_seg: p.log_seg,
                    loc: (page.min(MAX_INLINE_PAGE) << 13) | u32::from(offset & 0x1fff),
                    len: p.len,
                    crc: 0,
                },
                ValueLoc::Raw { page, crc } => PackedSlot {
                    log_seg: p.log_seg,
                    loc: page | RAW_FLAG,
                    len: p.len,
                    crc,
                },
            },
        }
    }

    fn unpack(&self) -> Slot {
        if self.len == TOMBSTONE_LEN {
            return Slot::Tombstone;
        }
        let loc = if self.loc & RAW_FLAG != 0 {
            ValueLoc::Raw {
                page: self.loc & !RAW_FLAG,
                crc: self.crc,
            }
        } else {
            ValueLoc::Inline {
                page: self.loc >> 13,
                offset: (self.loc & 0x1fff) as u16,
            }
        };
        Slot::Value(ValuePtr {
            log_seg: self.log_seg,
            loc,
            len: self.len,
        })
    }

    fn to_bytes(self) -> [u8; SLOT_BYTES] {
        let mut b = [0u8; SLOT_BYTES];
        b[0..4].copy_from_slice(&self.log_seg.to_le_bytes());
        b[4..8].copy_from_slice(&self.loc.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.crc.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Self {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        PackedSlot {
            log_seg: w(0),
            loc: w(4),
            len: w(8),
            crc: w(12),
        }
    }
}

/// An immutable sorted run.
pub struct KeyTable {
    id: u64,
    keys: Vec<u8>,
    ends: Vec<u32>,
    slots: Vec<PackedSlot>,
    bloom: Option<Bloom<[u8]>>,
}

impl std::fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyTable(run {}, {} keys)", self.id, self.len())
    }
}

/// Builds a [`KeyTable`] from keys in strictly ascending order.
pub struct KeyTableBuilder {
    id: u64,
    keys: Vec<u8>,
    ends: Vec<u32>,
    slots: Vec<PackedSlot>,
}

impl KeyTableBuilder {
    /// A builder for run `id`.
    pub fn new(id: u64) -> Self {
        KeyTableBuilder {
            id,
            keys: Vec::new(),
            ends: Vec::new(),
            slots: Vec::new(),
        }
    }

    /// Appends the next key (must sort after the previous one).
    pub fn push(&mut self, key: &[u8], slot: &Slot) {
        debug_assert!(self.last_key().is_none_or(|k| k < key), "keys out of order");
        self.keys.extend_from_slice(key);
        self.ends.push(self.keys.len() as u32);
        self.slots.push(PackedSlot::pack(slot));
    }

    fn last_key(&self) -> Option<&[u8]> {
        let n = self.ends.len();
        (n > 0).then(|| {
            let start = if n == 1 { 0 } else { self.ends[n - 2] as usize };
            &self.keys[start..self.ends[n - 1] as usize]
        })
    }

    /// Keys added so far.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when no key was added.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Finishes the run, building its bloom filter.
    pub fn finish(mut self, fp_rate: f64) -> KeyTable {
        self.keys.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.slots.shrink_to_fit();
        let mut t = KeyTable {
            id: self.id,
            keys: self.keys,
            ends: self.ends,
            slots: self.slots,
            bloom: None,
        };
        if !t.ends.is_empty() {
            let fp = fp_rate.clamp(1e-6, 0.5);
            if let Ok(mut b) = Bloom::new_for_fp_rate_with_seed(t.ends.len(), fp, &BLOOM_SEED) {
                for i in 0..t.len() {
                    b.set(t.key(i));
                }
                t.bloom = Some(b);
            }
        }
        t
    }
}

impl KeyTable {
    /// The run's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when the run holds no key.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.keys[start..self.ends[i] as usize]
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> Slot {
        self.slots[i].unpack()
    }

    /// Smallest and largest key.
    pub fn range(&self) -> Option<(&[u8], &[u8])> {
        (!self.is_empty()).then(|| (self.key(0), self.key(self.len() - 1)))
    }

    /// Index of the first key >= `key`.
    pub fn seek(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0usize, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The slot of `key`, if the run has it (bloom filter first).
    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        if let Some(b) = &self.bloom {
            if !b.check(key) {
                return None;
            }
        }
        let i = self.seek(key);
        (i < self.len() && self.key(i) == key).then(|| self.slot(i))
    }

    /// DRAM bytes held (keys, offsets, slots, bloom filter).
    pub fn dram_bytes(&self) -> usize {
        self.keys.capacity()
            + self.ends.capacity() * 4
            + self.slots.capacity() * SLOT_BYTES
            + self.bloom.as_ref().map_or(0, |b| b.as_slice().len())
    }

    /// Bytes of the run's metadata (keys and slots), the level-size measure.
    pub fn data_bytes(&self) -> usize {
        self.keys.len() + self.len() * (SLOT_BYTES + 2)
    }

    /// Encodes the run as 8 KiB pages.
    pub fn encode_pages(&self) -> Vec<Vec<u8>> {
        let mut pages = Vec::new();
        let mut cur: Vec<u8> = Vec::with_capacity(PAGE_SIZE);
        let mut count: u16 = 0;
        let finish = |cur: &mut Vec<u8>, count: u16, page_no: u32, pages: &mut Vec<Vec<u8>>| {
            let mut p = std::mem::take(cur);
            p.resize(PAGE_SIZE, 0);
            p[4..6].copy_from_slice(&PAGE_MAGIC.to_le_bytes());
            p[6..8].copy_from_slice(&count.to_le_bytes());
            p[8..16].copy_from_slice(&self.id.to_le_bytes());
            p[16..20].copy_from_slice(&page_no.to_le_bytes());
            let crc = crc32c::crc32c(&p[4..]);
            p[0..4].copy_from_slice(&crc.to_le_bytes());
            pages.push(p);
        };
        cur.resize(PAGE_HEADER, 0);
        for i in 0..self.len() {
            let k = self.key(i);
            let need = 2 + k.len() + SLOT_BYTES;
            if cur.len() + need > PAGE_SIZE {
                finish(&mut cur, count, pages.len() as u32, &mut pages);
                cur.resize(PAGE_HEADER, 0);
                count = 0;
            }
            cur.extend_from_slice(&(k.len() as u16).to_le_bytes());
            cur.extend_from_slice(k);
            cur.extend_from_slice(&self.slots[i].to_bytes());
            count += 1;
        }
        if count > 0 || pages.is_empty() {
            finish(&mut cur, count, pages.len() as u32, &mut pages);
        }
        pages
    }

    /// Decodes a run from its pages, checking each page's checksum and identity.
    ///
    /// # Errors
    /// A description of the first bad page.
    pub fn decode_pages(id: u64, pages: &[&[u8]], fp_rate: f64) -> Result<KeyTable, String> {
        let mut b = KeyTableBuilder::new(id);
        for (n, p) in pages.iter().enumerate() {
            if p.len() != PAGE_SIZE {
                return Err(format!("keytable page of {} bytes", p.len()));
            }
            let crc = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            if crc32c::crc32c(&p[4..]) != crc {
                return Err(format!("run {id} page {n}: checksum mismatch"));
            }
            if u16::from_le_bytes([p[4], p[5]]) != PAGE_MAGIC {
                return Err(format!("run {id} page {n}: not a keytable page"));
            }
            let mut run = [0u8; 8];
            run.copy_from_slice(&p[8..16]);
            let page_no = u32::from_le_bytes([p[16], p[17], p[18], p[19]]);
            if u64::from_le_bytes(run) != id || page_no as usize != n {
                return Err(format!(
                    "run {id} page {n}: belongs to another run or place"
                ));
            }
            let count = u16::from_le_bytes([p[6], p[7]]);
            let mut at = PAGE_HEADER;
            for _ in 0..count {
                let Some(kl) = p.get(at..at + 2) else {
                    return Err(format!("run {id} page {n}: truncated"));
                };
                let kl = usize::from(u16::from_le_bytes([kl[0], kl[1]]));
                let Some(key) = p.get(at + 2..at + 2 + kl) else {
                    return Err(format!("run {id} page {n}: truncated key"));
                };
                let Some(slot) = p.get(at + 2 + kl..at + 2 + kl + SLOT_BYTES) else {
                    return Err(format!("run {id} page {n}: truncated slot"));
                };
                if b.last_key().is_some_and(|last| last >= key) {
                    return Err(format!("run {id} page {n}: keys out of order"));
                }
                b.keys.extend_from_slice(key);
                b.ends.push(b.keys.len() as u32);
                b.slots.push(PackedSlot::from_bytes(slot));
                at += 2 + kl + SLOT_BYTES;
            }
        }
        Ok(b.finish(fp_rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(i: u32) -> Slot {
        if i % 3 == 0 {
            Slot::Tombstone
        } else if i % 3 == 1 {
            Slot::Value(ValuePtr {
                log_seg: i,
                loc: ValueLoc::Inline {
                    page: i * 7 % MAX_INLINE_PAGE,
                    offset: (i % 8000) as u16,
                },
                len: i * 3,
            })
        } else {
            Slot::Value(ValuePtr {
                log_seg: i,
                loc: ValueLoc::Raw {
                    page: i * 11,
                    crc: i ^ 0xabcd,
                },
                len: 8192 + i,
            })
        }
    }

    fn table(n: u32) -> KeyTable {
        let mut b = KeyTableBuilder::new(5);
        for i in 0..n {
            b.push(format!("key{i:08}").as_bytes(), &ptr(i));
        }
        b.finish(0.01)
    }

    #[test]
    fn lookup_seek_and_slots_round_trip() {
        let t = table(1000);
        assert_eq!(t.len(), 1000);
        for i in [0u32, 1, 2, 500, 999] {
            assert_eq!(t.get(format!("key{i:08}").as_bytes()), Some(ptr(i)));
        }
        assert_eq!(t.get(b"key"), None);
        assert_eq!(t.get(b"zzz"), None);
        assert_eq!(t.seek(b"key00000500"), 500);
        assert_eq!(t.seek(b"a"), 0);
        assert_eq!(t.seek(b"z"), 1000);
        assert!(t.dram_bytes() < 1000 * (11 + 24));
    }

    #[test]
    fn pages_round_trip_and_detect_damage() {
        let t = table(3000);
        let pages = t.encode_pages();
        assert!(pages.len() > 1);
        let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
        let back = KeyTable::decode_pages(5, &refs, 0.01).expect("decode");
        assert_eq!(back.len(), t.len());
        for i in 0..t.len() {
            assert_eq!(back.key(i), t.key(i));
            assert_eq!(back.slot(i), t.slot(i));
        }
        let mut bad = pages.clone();
        bad[1][200] ^= 4;
        let refs: Vec<&[u8]> = bad.iter().map(|p| p.as_slice()).collect();
        assert!(KeyTable::decode_pages(5, &refs, 0.01).is_err());
        let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
        assert!(
            KeyTable::decode_pages(6, &refs, 0.01).is_err(),
            "wrong run id"
        );
    }

    #[test]
    fn empty_run_encodes_to_one_page() {
        let t = KeyTableBuilder::new(1).finish(0.01);
        let pages = t.encode_pages();
        assert_eq!(pages.len(), 1);
        let back = KeyTable::decode_pages(1, &[pages[0].as_slice()], 0.01).expect("decode");
        assert!(back.is_empty());
        assert_eq!(back.get(b"x"), None);
    }
}
