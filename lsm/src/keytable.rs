//! Keytables: immutable sorted runs of (key -> value pointer or tombstone), fully cached in
//! DRAM in a compact form, with a bloom filter; and their 8 KiB on-device pages.
//!
//! # DRAM layout
//!
//! - **Keys**: all keys back to back in one arena, indexed in blocks of `2^s` keys: per
//!   block a `u32` *anchor* (the arena offset where the block's first key starts) and a
//!   `u64` *fence* (the first 8 bytes of that key after the prefix all keys of the run share,
//!   zero-padded, big-endian), and per key a `u16` (where it ends, relative to its block's
//!   anchor); key `i` starts where key `i - 1` ends, or at the anchor for the first key of a
//!   block. `s` is 6 (64 keys per block) unless some block would span 64 KiB of keys: the
//!   run then lowers `s` until every block fits (down to one key per block), and only a key
//!   of 64 KiB or more, or an arena past 4 GiB, turns the run to plain `usize` end offsets
//!   (no fences). Locating key `i` takes two loads.
//! - **Search** (`seek`, `get`): a binary search over the dense fence array picks the block
//!   (the key bytes are read only where fences tie), then a binary search over the block's
//!   keys, which lie together in the arena: O(log n) comparisons, no allocation, and fewer
//!   cache misses than a binary search over all keys.
//! - **Slots**: 12 bytes per key, a 64-bit word `lo` (stored as two `u32`, so the slot array
//!   is 4-byte aligned) and a 32-bit word `hi`:
//!
//!   ```text
//!   kind       lo bit 0   lo 1..17    lo 17..35   lo 35..64                  hi
//!   raw        1          seg index   first page  length - 1 (29 bits)       crc32c
//!   inline     0          seg index   page        offset (13 bits), then 0   length
//!   tombstone  0          0           0           bit 63 set                 0
//!   escaped    0          lo 1..62: index into the escape list, bit 62 set   0
//!   ```
//!
//!   The segment index points into the run's dictionary of the distinct log segments it
//!   references (the first 65536 it meets). A pointer that does not fit this form (a
//!   65537th log segment, a page above 2^18 - 1, an inline offset above 8191, a raw length
//!   of 0 or above 512 MiB) is *escaped*: its full [`Slot`] goes to a side list of the run,
//!   so every pointer round-trips exactly and only such a pointer costs more (12 + 20 bytes).
//! - **Bloom filter** ([`BlockBloom`], a split-block filter: one cache line's half per
//!   probe, the key hashed once per lookup for every run): ~9.7 bits per key at a 1%
//!   false-positive rate.
//!
//! - **Held values** (`HeldValues`): a small value (at most
//!   [`crate::EngineConfig::entry_value_max`] bytes, 64 by default) is also kept in its
//!   entry, as BlobDB's `min_blob_size` keeps small values in the SST: a read of it costs no
//!   device read, cold or hot, and is exact after a restart (the pages carry it). Its log
//!   record stays the value's address (the slot above), so garbage collection, garbage
//!   counting and retimes treat it as any other value; the entry holds a verified copy. In
//!   DRAM: the values back to back in one shared arena, one bit per entry (held or not), a
//!   `u32` count per 64 entries and a `u32` end offset per held value: a held value costs its
//!   length + 4 bytes, an entry without one 1/8 + 1/16 byte (and nothing in a run that holds
//!   none).
//!
//! So a key costs its length + 12 (slot) + 2 (end offset) + 12/64 (anchor and fence) + ~1.2
//! (bloom at 1%) = key + ~15.4 bytes, plus 4 bytes per distinct log segment and ~50 bytes
//! per run (`lsm/tests/keytable_dram.rs` checks key + 16), plus a held value's length + 4.
//! The previous layout (a `u32` end offset and a 16-byte slot per key) cost key + ~21.2.
//!
//! # Page layout
//!
//! `crc32c u32 | magic u16 | count u16 | run u64 | page u32 | carry u32` then `count` entries
//! of `key_len u16 | key | slot (16 bytes: log_seg u32 | loc u32 | len u32 | crc u32)` (a key of
//! 65535 bytes or more: `key_len` is 0xFFFF and a `u32` length follows), where
//! `loc` is `page << 13 | offset` for an inline value and `page | 1 << 31` for a raw one,
//! `crc` is 0 for an inline value, and a tombstone is `len` = `u32::MAX` with the rest 0. An
//! entry longer than a page body (a long key) starts a page of its own and runs on into the
//! next pages: their `carry` is how many of their first body bytes finish it (0 on pages
//! written before long keys existed, so those read as before).
//!
//! Pages written since deadlines exist carry the magic `KE` and one more entry form: an
//! entry whose value has a deadline is `0xFFFE | deadline u64 | key_len u32 | key | slot`,
//! and a key of exactly 65534 bytes takes the long form. Pages with the older magic `KT`
//! (no deadlines; a `key_len` of 0xFFFE is a key of that length) read as before.
//!
//! Pages written since entries hold small values carry the magic `KV` and one more form: an
//! entry holding its value is `0xFFFD | deadline u64 (0: none) | value_len u16 | key_len u32
//! | value | key | slot`; a key of exactly 65533 bytes takes the long form. `KE` pages (where a
//! `key_len` of 0xFFFD is a key of that length) read as before.

use std::collections::HashMap;

use bytes::Bytes;
use hwftl_sim::PAGE_SIZE;

use crate::expiry::{Deadline, LazyClock};
use crate::vlog_format::{ValueLoc, ValuePtr};

mod bloom;
mod entry;
mod held;

use entry::{
    entry_key_prefix, entry_len, split_entry, EntryForm, DEADLINE_ENTRY, HELD_ENTRY, LONG_ENTRY,
    PAGE_BODY,
};
use held::HeldValues;

pub use bloom::{BlockBloom, KeyHash};

/// What a key maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The key's value, and when it expires ([`crate::expiry`]).
    Value(ValuePtr, Deadline),
    /// The key was deleted.
    Tombstone,
}

impl Slot {
    /// A value that never expires.
    pub fn value(ptr: ValuePtr) -> Slot {
        Slot::Value(ptr, None)
    }

    /// The value's address, expired or not.
    pub fn ptr(&self) -> Option<ValuePtr> {
        match self {
            Slot::Value(p, _) => Some(*p),
            Slot::Tombstone => None,
        }
    }

    /// The value's deadline (`None` for a tombstone or a value that never expires).
    pub fn deadline(&self) -> Deadline {
        match self {
            Slot::Value(_, d) => *d,
            Slot::Tombstone => None,
        }
    }

    /// The slot as reads see it at `clock`'s instant: an expired value is a tombstone (it
    /// hides older versions of the key, as a deletion does).
    #[inline]
    pub(crate) fn visible(self, clock: &mut LazyClock) -> Slot {
        match self {
            Slot::Value(_, d) if clock.expired(d) => Slot::Tombstone,
            s => s,
        }
    }
}

const TOMBSTONE_LEN: u32 = u32::MAX;
const RAW_FLAG: u32 = 1 << 31;
/// Largest page number an inline pointer can hold (18 bits).
pub const MAX_INLINE_PAGE: u32 = (1 << 18) - 1;
/// Magic of pages written before deadlines existed (read only).
const PAGE_MAGIC_V1: u16 = 0x544b; // "KT"
/// Magic of pages that may hold entries with a deadline, but no held value (read only).
const PAGE_MAGIC_V2: u16 = 0x454b; // "KE"
/// Magic of pages that may hold entries with a deadline or a held value.
const PAGE_MAGIC: u16 = 0x564b; // "KV"
/// Longest value an entry holds: the page form's `u16` length, well above any sensible
/// [`crate::EngineConfig::entry_value_max`].
pub const MAX_HELD_VALUE: usize = 4096;
const PAGE_HEADER: usize = 24;
/// Bytes of a slot in a keytable page.
const SLOT_BYTES: usize = 16;

/// A slot as stored in a keytable page (16 bytes; see the module documentation).
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
            Slot::Value(p, _) => match p.loc {
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

    fn unpack(&self, deadline: Deadline) -> Slot {
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
        Slot::Value(
            ValuePtr {
                log_seg: self.log_seg,
                loc,
                len: self.len,
            },
            deadline,
        )
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

// DRAM slot fields (see the module documentation).
const RAW_BIT: u64 = 1;
const SEG_SHIFT: u32 = 1;
const SEG_MASK: u64 = 0xffff;
const PAGE_SHIFT: u32 = 17;
const PAGE_MASK: u64 = (1 << 18) - 1;
const LEN_SHIFT: u32 = 35;
/// Longest raw value the 12-byte slot holds (its length - 1 takes 29 bits).
const MAX_NARROW_RAW_LEN: u32 = 1 << 29;
const OFFSET_SHIFT: u32 = 35;
/// Largest inline offset the 12-byte slot holds (13 bits).
const MAX_NARROW_OFFSET: u16 = (1 << 13) - 1;
const TOMBSTONE_BIT: u64 = 1 << 63;
const ESCAPE_BIT: u64 = 1 << 62;
const ESCAPE_INDEX_MASK: u64 = (1 << 61) - 1;

/// A slot in DRAM: 12 bytes, 4-byte aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DramSlot {
    lo: [u32; 2],
    hi: u32,
}

impl DramSlot {
    const TOMBSTONE: DramSlot = DramSlot::new(TOMBSTONE_BIT, 0);

    const fn new(lo: u64, hi: u32) -> Self {
        DramSlot {
            lo: [lo as u32, (lo >> 32) as u32],
            hi,
        }
    }

    fn lo(&self) -> u64 {
        u64::from(self.lo[0]) | (u64::from(self.lo[1]) << 32)
    }
}

/// Hashes a log segment number for the builder's dictionary: one multiply (SipHash, the
/// default, doubled the cost of building a run).
#[derive(Default, Clone, Copy)]
struct SegHasher(u64);

impl std::hash::Hasher for SegHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        // The high bits pick the bucket group, the top 7 the tag: keep both well mixed.
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The builder's map from log segment number to dictionary index.
type SegDict = HashMap<u32, u16, std::hash::BuildHasherDefault<SegHasher>>;

/// The slots of a run: 12-byte slots, the log segment dictionary and escaped slots.
#[derive(Default)]
struct Slots {
    packed: Vec<DramSlot>,
    /// Log segment number by dictionary index.
    segs: Vec<u32>,
    /// Slots that do not fit the 12-byte form, in key order.
    escaped: Vec<Slot>,
    /// The earliest deadline of the slots (0: none).
    earliest_deadline: u64,
}

/// Bytes a page entry with a deadline takes beyond a short entry's: the deadline and the
/// `u32` key length.
const DEADLINE_ENTRY_EXTRA: usize = 12;

/// Bytes a page entry holding its value takes beyond a short entry's, besides the value:
/// the deadline, the value's `u16` length and the `u32` key length.
const HELD_ENTRY_EXTRA: usize = 14;

impl Slots {
    /// The 12-byte form of `p`, adding its log segment to the dictionary, or `None` if it
    /// does not fit.
    fn narrow(&mut self, p: &ValuePtr, dict: &mut SegDict) -> Option<DramSlot> {
        let (kind, fields, hi) = match p.loc {
            ValueLoc::Inline { page, offset } => {
                if page > MAX_INLINE_PAGE || offset > MAX_NARROW_OFFSET {
                    return None;
                }
                (
                    0,
                    (u64::from(page) << PAGE_SHIFT) | (u64::from(offset) << OFFSET_SHIFT),
                    p.len,
                )
            }
            ValueLoc::Raw { page, crc } => {
                if page > MAX_INLINE_PAGE || p.len == 0 || p.len > MAX_NARROW_RAW_LEN {
                    return None;
                }
                (
                    RAW_BIT,
                    (u64::from(page) << PAGE_SHIFT) | (u64::from(p.len - 1) << LEN_SHIFT),
                    crc,
                )
            }
        };
        let seg = match dict.get(&p.log_seg) {
            Some(&i) => i,
            None => {
                let i = u16::try_from(self.segs.len()).ok()?;
                self.segs.push(p.log_seg);
                dict.insert(p.log_seg, i);
                i
            }
        };
        Some(DramSlot::new(
            kind | (u64::from(seg) << SEG_SHIFT) | fields,
            hi,
        ))
    }

    fn push(&mut self, s: &Slot, dict: &mut SegDict) {
        let d = match s {
            Slot::Tombstone => DramSlot::TOMBSTONE,
            Slot::Value(p, None) => self.narrow(p, dict).unwrap_or_else(|| self.escape(s)),
            // An entry with a deadline keeps it beside its pointer in the side list: the
            // 12-byte form has no room, and few entries have one.
            Slot::Value(_, Some(d)) => {
                if self.earliest_deadline == 0 || d.get() < self.earliest_deadline {
                    self.earliest_deadline = d.get();
                }
                self.escape(s)
            }
        };
        self.packed.push(d);
    }

    /// Puts `s` on the side list and returns the slot that points there.
    fn escape(&mut self, s: &Slot) -> DramSlot {
        // A `Vec<Slot>` holds fewer than 2^59 elements (32 bytes each within `isize::MAX`
        // bytes), so the index fits its 61 bits.
        let idx = self.escaped.len() as u64 & ESCAPE_INDEX_MASK;
        self.escaped.push(*s);
        DramSlot::new(ESCAPE_BIT | (idx << 1), 0)
    }

    #[inline]
    fn get(&self, i: usize) -> Slot {
        let d = self.packed[i];
        let lo = d.lo();
        let seg = || self.segs[((lo >> SEG_SHIFT) & SEG_MASK) as usize];
        let page = ((lo >> PAGE_SHIFT) & PAGE_MASK) as u32;
        if lo & RAW_BIT != 0 {
            Slot::value(ValuePtr {
                log_seg: seg(),
                loc: ValueLoc::Raw { page, crc: d.hi },
                len: (lo >> LEN_SHIFT) as u32 + 1,
            })
        } else if lo & TOMBSTONE_BIT != 0 {
            Slot::Tombstone
        } else if lo & ESCAPE_BIT != 0 {
            self.escaped[((lo >> 1) & ESCAPE_INDEX_MASK) as usize]
        } else {
            Slot::value(ValuePtr {
                log_seg: seg(),
                loc: ValueLoc::Inline {
                    page,
                    offset: ((lo >> OFFSET_SHIFT) & u64::from(MAX_NARROW_OFFSET)) as u16,
                },
                len: d.hi,
            })
        }
    }

    fn shrink_to_fit(&mut self) {
        self.packed.shrink_to_fit();
        self.segs.shrink_to_fit();
        self.escaped.shrink_to_fit();
    }

    fn dram_bytes(&self) -> usize {
        self.packed.capacity() * std::mem::size_of::<DramSlot>()
            + self.segs.capacity() * 4
            + self.escaped.capacity() * std::mem::size_of::<Slot>()
    }
}

/// Keys per anchor of the key index (log 2), at most.
const MAX_BLOCK_SHIFT: u32 = 6;

/// Where each key of the arena ends (see the module documentation).
enum KeyIndex {
    /// Blocks of `2^shift` keys: `anchors[b]` is where block `b` starts, `rel[i]` where key
    /// `i` ends relative to its block's anchor.
    Narrow {
        shift: u32,
        anchors: Vec<u32>,
        rel: Vec<u16>,
    },
    /// End offset of every key.
    Wide(Vec<usize>),
}

impl KeyIndex {
    fn new() -> Self {
        KeyIndex::Narrow {
            shift: MAX_BLOCK_SHIFT,
            anchors: Vec::new(),
            rel: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        match self {
            KeyIndex::Narrow { rel, .. } => rel.len(),
            KeyIndex::Wide(ends) => ends.len(),
        }
    }

    /// Start and end of key `i` in the arena.
    #[inline]
    fn bounds(&self, i: usize) -> (usize, usize) {
        match self {
            KeyIndex::Narrow {
                shift,
                anchors,
                rel,
            } => narrow_bounds(*shift, anchors, rel, i),
            KeyIndex::Wide(ends) => wide_bounds(ends, i),
        }
    }

    /// Indexes the next key, which takes `start..end` of the arena (`start` is where the
    /// previous key ended).
    fn push(&mut self, start: usize, end: usize) {
        let shift = match self {
            KeyIndex::Wide(ends) => {
                ends.push(end);
                return;
            }
            KeyIndex::Narrow {
                shift,
                anchors,
                rel,
            } => {
                let i = rel.len();
                let anchor = if i & ((1 << *shift) - 1) == 0 {
                    u32::try_from(start).ok()
                } else {
                    anchors.last().copied()
                };
                if let Some(a) = anchor {
                    if let Ok(r) = u16::try_from(end - a as usize) {
                        if i & ((1 << *shift) - 1) == 0 {
                            anchors.push(a);
                        }
                        rel.push(r);
                        return;
                    }
                }
                *shift
            }
        };
        // The block does not fit: re-index with smaller blocks (rare: long keys).
        let mut ends: Vec<usize> = (0..self.len()).map(|j| self.bounds(j).1).collect();
        ends.push(end);
        *self = KeyIndex::from_ends(ends, shift.saturating_sub(1));
    }

    /// An index of keys ending at `ends`, with the largest blocks up to `2^max_shift` keys
    /// that fit.
    fn from_ends(ends: Vec<usize>, max_shift: u32) -> Self {
        for shift in (0..=max_shift).rev() {
            let block = 1usize << shift;
            let mut anchors = Vec::with_capacity(ends.len().div_ceil(block));
            let mut rel = Vec::with_capacity(ends.len());
            let fits = ends.iter().enumerate().all(|(i, &end)| {
                if i % block == 0 {
                    let start = if i == 0 { 0 } else { ends[i - 1] };
                    match u32::try_from(start) {
                        Ok(a) => anchors.push(a),
                        Err(_) => return false,
                    }
                }
                let a = anchors.last().map_or(0, |&a| a as usize);
                u16::try_from(end - a).map(|r| rel.push(r)).is_ok()
            });
            if fits {
                return KeyIndex::Narrow {
                    shift,
                    anchors,
                    rel,
                };
            }
        }
        KeyIndex::Wide(ends)
    }

    fn shrink_to_fit(&mut self) {
        match self {
            KeyIndex::Narrow { anchors, rel, .. } => {
                anchors.shrink_to_fit();
                rel.shrink_to_fit();
            }
            KeyIndex::Wide(ends) => ends.shrink_to_fit(),
        }
    }

    fn dram_bytes(&self) -> usize {
        match self {
            KeyIndex::Narrow { anchors, rel, .. } => anchors.capacity() * 4 + rel.capacity() * 2,
            KeyIndex::Wide(ends) => ends.capacity() * std::mem::size_of::<usize>(),
        }
    }
}

#[inline]
fn narrow_bounds(shift: u32, anchors: &[u32], rel: &[u16], i: usize) -> (usize, usize) {
    let a = anchors[i >> shift] as usize;
    let start = if i & ((1 << shift) - 1) == 0 {
        a
    } else {
        a + usize::from(rel[i - 1])
    };
    (start, a + usize::from(rel[i]))
}

#[inline]
fn wide_bounds(ends: &[usize], i: usize) -> (usize, usize) {
    (if i == 0 { 0 } else { ends[i - 1] }, ends[i])
}

/// The first of `0..n` for which `below` is false (`below` is true, then false).
#[inline]
fn partition(n: usize, mut below: impl FnMut(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The first 8 bytes of `k` (zero-padded) as a big-endian number: `a < b` implies
/// `fence(a) <= fence(b)`, so unequal fences order keys without reading them.
#[inline]
fn fence(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b)
}

/// An immutable sorted run.
pub struct KeyTable {
    id: u64,
    keys: Vec<u8>,
    index: KeyIndex,
    /// Length of the prefix all keys share.
    common: usize,
    /// Per block of a narrow index: the fence of its first key after the common prefix.
    fences: Vec<u64>,
    slots: Slots,
    held: HeldValues,
    /// Page bytes the entries take beyond the short form (deadlines, held values).
    extra_bytes: usize,
    bloom: Option<BlockBloom>,
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
    index: KeyIndex,
    slots: Slots,
    held: HeldValues,
    extra_bytes: usize,
    /// Dictionary index by log segment number.
    dict: SegDict,
}

impl KeyTableBuilder {
    /// A builder for run `id`.
    pub fn new(id: u64) -> Self {
        KeyTableBuilder {
            id,
            keys: Vec::new(),
            index: KeyIndex::new(),
            slots: Slots::default(),
            held: HeldValues::default(),
            extra_bytes: 0,
            dict: SegDict::default(),
        }
    }

    /// Appends the next key (must sort after the previous one), with the value its entry
    /// holds, if any: `held` is kept only for a value of at most [`MAX_HELD_VALUE`] bytes
    /// whose length is the slot's (the bytes the slot's pointer leads to).
    pub fn push(&mut self, key: &[u8], slot: &Slot, held: Option<&[u8]>) {
        debug_assert!(self.last_key().is_none_or(|k| k < key), "keys out of order");
        let i = self.index.len();
        let start = self.keys.len();
        self.keys.extend_from_slice(key);
        self.index.push(start, self.keys.len());
        self.slots.push(slot, &mut self.dict);
        let held = match (held, slot) {
            (Some(v), Slot::Value(p, _))
                if v.len() <= MAX_HELD_VALUE && v.len() == p.len as usize =>
            {
                self.held.push(i, v)
            }
            _ => false,
        };
        self.extra_bytes += match (held, slot.deadline()) {
            (true, _) => HELD_ENTRY_EXTRA + slot.ptr().map_or(0, |p| p.len as usize),
            (false, Some(_)) => DEADLINE_ENTRY_EXTRA,
            (false, None) => 0,
        };
    }

    fn last_key(&self) -> Option<&[u8]> {
        let n = self.index.len();
        (n > 0).then(|| {
            let (s, e) = self.index.bounds(n - 1);
            &self.keys[s..e]
        })
    }

    /// Keys added so far.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when no key was added.
    pub fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    /// Bytes of the run so far, measured as [`KeyTable::data_bytes`].
    pub fn data_bytes(&self) -> usize {
        self.keys.len() + self.len() * (SLOT_BYTES + 2) + self.extra_bytes
    }

    /// Finishes the run, building its bloom filter.
    pub fn finish(mut self, fp_rate: f64) -> KeyTable {
        self.keys.shrink_to_fit();
        self.index.shrink_to_fit();
        self.slots.shrink_to_fit();
        self.held.finish();
        drop(self.dict);
        let mut t = KeyTable {
            id: self.id,
            keys: self.keys,
            index: self.index,
            common: 0,
            fences: Vec::new(),
            slots: self.slots,
            held: self.held,
            extra_bytes: self.extra_bytes,
            bloom: None,
        };
        if let Some((first, last)) = t.range() {
            t.common = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        }
        if let KeyIndex::Narrow { shift, rel, .. } = &t.index {
            let fences: Vec<u64> = (0..rel.len())
                .step_by(1 << shift)
                .map(|i| fence(&t.key(i)[t.common..]))
                .collect();
            t.fences = fences;
        }
        if !t.is_empty() {
            let mut b = BlockBloom::new(t.len(), fp_rate);
            for i in 0..t.len() {
                b.insert(KeyHash::of(t.key(i)));
            }
            t.bloom = Some(b);
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
        self.index.len()
    }

    /// True when the run holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let (s, e) = self.index.bounds(i);
        &self.keys[s..e]
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> Slot {
        self.slots.get(i)
    }

    /// The value entry `i` holds, if it holds one: a slice of the run's arena, no copy (it
    /// keeps the whole arena alive: reads hand clients a copy, see `ReadPlan::assemble`).
    pub fn held(&self, i: usize) -> Option<Bytes> {
        self.held.get(i)
    }

    /// How many entries hold their value, and the bytes of those values.
    pub fn held_values(&self) -> (usize, usize) {
        (self.held.count(), self.held.value_bytes())
    }

    /// Smallest and largest key.
    pub fn range(&self) -> Option<(&[u8], &[u8])> {
        (!self.is_empty()).then(|| (self.key(0), self.key(self.len() - 1)))
    }

    /// Index of the first key >= `key`.
    pub fn seek(&self, key: &[u8]) -> usize {
        let keys = self.keys.as_slice();
        match &self.index {
            KeyIndex::Narrow {
                shift,
                anchors,
                rel,
            } => {
                let n = rel.len();
                let key_at = |i: usize| {
                    let (s, e) = narrow_bounds(*shift, anchors, rel, i);
                    &keys[s..e]
                };
                // Every key starts with `common`: a key that does not sorts before or
                // after all of them.
                let common = &keys[..self.common.min(keys.len())];
                let Some(rest) = key.strip_prefix(common) else {
                    return if key < common { 0 } else { n };
                };
                // Blocks whose first key is below `key`, from the dense fence array; the
                // keys themselves are read only on a tie.
                let f = fence(rest);
                let fences = self.fences.as_slice();
                let blocks = partition(fences.len(), |b| match fences[b].cmp(&f) {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Equal => key_at(b << shift) < key,
                });
                if blocks == 0 {
                    return 0;
                }
                // Then within the last of them.
                let lo = ((blocks - 1) << shift) + 1;
                let hi = (blocks << shift).min(n);
                lo + partition(hi - lo, |j| key_at(lo + j) < key)
            }
            KeyIndex::Wide(ends) => partition(ends.len(), |i| {
                let (s, e) = wide_bounds(ends, i);
                &keys[s..e] < key
            }),
        }
    }

    /// Whether the run may hold `key` (its bloom filter; `true` without one).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hashed(KeyHash::of(key))
    }

    /// [`KeyTable::may_contain`] for a key whose hash the caller computed once for all the
    /// runs it asks.
    pub fn may_contain_hashed(&self, h: KeyHash) -> bool {
        self.bloom.as_ref().is_none_or(|b| b.may_contain(h))
    }

    /// The run's sparse page index as [`KeyTable::encode_pages`] lays it out: for each page
    /// on which an entry starts, its number and the key of its first entry (what an LSM
    /// that does not cache its keytables keeps in DRAM to find the page to read).
    pub fn page_index(&self) -> Vec<(u32, Vec<u8>)> {
        let pages = self.encode_pages();
        let mut out = Vec::new();
        for (n, p) in pages.iter().enumerate() {
            let count = u16::from_le_bytes([p[6], p[7]]);
            let carry = u32::from_le_bytes([p[20], p[21], p[22], p[23]]) as usize;
            if count == 0 {
                continue;
            }
            let at = PAGE_HEADER + carry;
            if let Some(key) = entry_key_prefix(&p[at..], EntryForm::Held) {
                out.push((n as u32, key.to_vec()));
            }
        }
        out
    }

    /// Looks `key` up in one on-device page of run `id` (number `page_no`), as read from the
    /// device: `Ok(Some(slot))` when the page has it, `Ok(None)` when the page shows it is
    /// not in the run, `Err` when the page is damaged or the answer needs another page (an
    /// entry that runs on into the next page).
    ///
    /// # Errors
    /// A description of what is wrong.
    pub fn search_page(
        id: u64,
        page_no: u32,
        p: &[u8],
        key: &[u8],
    ) -> Result<Option<Slot>, String> {
        if p.len() != PAGE_SIZE
            || crc32c::crc32c(&p[4..]) != u32::from_le_bytes([p[0], p[1], p[2], p[3]])
        {
            return Err(format!("run {id} page {page_no}: checksum mismatch"));
        }
        let mut run = [0u8; 8];
        run.copy_from_slice(&p[8..16]);
        let form = EntryForm::of_magic(u16::from_le_bytes([p[4], p[5]]));
        if form.is_none()
            || u64::from_le_bytes(run) != id
            || u32::from_le_bytes([p[16], p[17], p[18], p[19]]) != page_no
        {
            return Err(format!("run {id} page {page_no}: not this run's page"));
        }
        let form = form.unwrap_or(EntryForm::Held);
        let count = u16::from_le_bytes([p[6], p[7]]);
        let mut at = PAGE_HEADER + u32::from_le_bytes([p[20], p[21], p[22], p[23]]) as usize;
        for _ in 0..count {
            let len = entry_len(p.get(at..).unwrap_or_default(), form)
                .ok_or_else(|| format!("run {id} page {page_no}: truncated"))?;
            if at + len > PAGE_SIZE {
                return Err(format!("run {id} page {page_no}: the entry runs on"));
            }
            let e = split_entry(&p[at..at + len], form)
                .ok_or_else(|| format!("run {id} page {page_no}: bad entry"))?;
            match e.key.cmp(key) {
                std::cmp::Ordering::Equal => {
                    return Ok(Some(PackedSlot::from_bytes(e.slot).unpack(e.deadline)));
                }
                std::cmp::Ordering::Greater => return Ok(None),
                std::cmp::Ordering::Less => at += len,
            }
        }
        Ok(None)
    }

    /// The slot of `key`, if the run has it (bloom filter first).
    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        self.get_hashed(key, KeyHash::of(key))
    }

    /// [`KeyTable::get`] with the key's hash computed by the caller (once for every run a
    /// lookup asks).
    pub fn get_hashed(&self, key: &[u8], h: KeyHash) -> Option<Slot> {
        self.find(key, h).map(|i| self.slot(i))
    }

    /// The slot of `key` and the value its entry holds, if the run has the key.
    pub fn get_held(&self, key: &[u8]) -> Option<(Slot, Option<Bytes>)> {
        self.get_held_hashed(key, KeyHash::of(key))
    }

    /// [`KeyTable::get_held`] with the key's hash computed by the caller.
    pub fn get_held_hashed(&self, key: &[u8], h: KeyHash) -> Option<(Slot, Option<Bytes>)> {
        self.find(key, h).map(|i| (self.slot(i), self.held(i)))
    }

    /// The index of `key` (whose hash is `h`)'s entry (bloom filter first).
    fn find(&self, key: &[u8], h: KeyHash) -> Option<usize> {
        if !self.may_contain_hashed(h) {
            return None;
        }
        let i = self.seek(key);
        (i < self.len() && self.key(i) == key).then_some(i)
    }

    /// DRAM bytes held (keys, key index, slots, held values, bloom filter).
    pub fn dram_bytes(&self) -> usize {
        self.keys.capacity()
            + self.index.dram_bytes()
            + self.fences.capacity() * 8
            + self.slots.dram_bytes()
            + self.held.dram_bytes()
            + self.bloom.as_ref().map_or(0, BlockBloom::dram_bytes)
    }

    /// The earliest deadline an entry of the run carries, if any has one.
    pub fn earliest_deadline(&self) -> Option<u64> {
        (self.slots.earliest_deadline != 0).then_some(self.slots.earliest_deadline)
    }

    /// Bytes of the run's metadata (keys and slots), the level-size measure.
    pub fn data_bytes(&self) -> usize {
        self.keys.len() + self.len() * (SLOT_BYTES + 2) + self.extra_bytes
    }

    /// Encodes the run as 8 KiB pages.
    pub fn encode_pages(&self) -> Vec<Vec<u8>> {
        let mut pages = Vec::new();
        let mut cur: Vec<u8> = Vec::with_capacity(PAGE_SIZE);
        let mut count: u16 = 0;
        let mut carry: u32 = 0;
        let finish =
            |cur: &mut Vec<u8>, count: u16, carry: u32, page_no: u32, pages: &mut Vec<Vec<u8>>| {
                let mut p = std::mem::take(cur);
                p.resize(PAGE_SIZE, 0);
                p[4..6].copy_from_slice(&PAGE_MAGIC.to_le_bytes());
                p[6..8].copy_from_slice(&count.to_le_bytes());
                p[8..16].copy_from_slice(&self.id.to_le_bytes());
                p[16..20].copy_from_slice(&page_no.to_le_bytes());
                p[20..24].copy_from_slice(&carry.to_le_bytes());
                let crc = crc32c::crc32c(&p[4..]);
                p[0..4].copy_from_slice(&crc.to_le_bytes());
                pages.push(p);
            };
        cur.resize(PAGE_HEADER, 0);
        let mut entry = Vec::new();
        for i in 0..self.len() {
            let k = self.key(i);
            let slot = self.slot(i);
            entry.clear();
            // Keys are bounded far below 4 GiB (the value log's 24-bit key length); a held
            // value by MAX_HELD_VALUE.
            if let Some(v) = self.held(i) {
                entry.extend_from_slice(&HELD_ENTRY.to_le_bytes());
                entry.extend_from_slice(&slot.deadline().map_or(0, |d| d.get()).to_le_bytes());
                entry.extend_from_slice(&(v.len() as u16).to_le_bytes());
                entry.extend_from_slice(&(k.len() as u32).to_le_bytes());
                entry.extend_from_slice(&v);
            } else if let Some(d) = slot.deadline() {
                entry.extend_from_slice(&DEADLINE_ENTRY.to_le_bytes());
                entry.extend_from_slice(&d.get().to_le_bytes());
                entry.extend_from_slice(&(k.len() as u32).to_le_bytes());
            } else if k.len() < usize::from(HELD_ENTRY) {
                entry.extend_from_slice(&(k.len() as u16).to_le_bytes());
            } else {
                entry.extend_from_slice(&LONG_ENTRY.to_le_bytes());
                entry.extend_from_slice(&(k.len() as u32).to_le_bytes());
            }
            entry.extend_from_slice(k);
            entry.extend_from_slice(&PackedSlot::pack(&slot).to_bytes());
            if cur.len() + entry.len() <= PAGE_SIZE {
                cur.extend_from_slice(&entry);
                count += 1;
                continue;
            }
            if count > 0 || carry > 0 {
                finish(&mut cur, count, carry, pages.len() as u32, &mut pages);
                cur.resize(PAGE_HEADER, 0);
                count = 0;
                carry = 0;
            }
            if entry.len() <= PAGE_BODY {
                cur.extend_from_slice(&entry);
                count = 1;
                continue;
            }
            // Longer than a page: it starts a page of its own and continues at the start
            // of the next ones (their `carry` says how many of their bytes are its).
            let mut rest = &entry[..];
            let (head, tail) = rest.split_at(PAGE_BODY);
            cur.extend_from_slice(head);
            finish(&mut cur, 1, 0, pages.len() as u32, &mut pages);
            rest = tail;
            while rest.len() > PAGE_BODY {
                let (head, tail) = rest.split_at(PAGE_BODY);
                cur.resize(PAGE_HEADER, 0);
                cur.extend_from_slice(head);
                finish(
                    &mut cur,
                    0,
                    PAGE_BODY as u32,
                    pages.len() as u32,
                    &mut pages,
                );
                rest = tail;
            }
            cur.resize(PAGE_HEADER, 0);
            cur.extend_from_slice(rest);
            carry = rest.len() as u32;
        }
        if count > 0 || carry > 0 || pages.is_empty() {
            finish(&mut cur, count, carry, pages.len() as u32, &mut pages);
        }
        pages
    }

    /// Decodes a run from its pages, checking each page's checksum and identity.
    ///
    /// # Errors
    /// A description of the first bad page.
    pub fn decode_pages(id: u64, pages: &[&[u8]], fp_rate: f64) -> Result<KeyTable, String> {
        let mut b = KeyTableBuilder::new(id);
        // An entry that runs on into the next page(s): its bytes so far, and its length.
        let mut spill: Vec<u8> = Vec::new();
        let mut spill_len = 0usize;
        let push = |b: &mut KeyTableBuilder, entry: &[u8], form: EntryForm, n: usize| {
            let e =
                split_entry(entry, form).ok_or_else(|| format!("run {id} page {n}: bad entry"))?;
            if b.last_key().is_some_and(|last| last >= e.key) {
                return Err(format!("run {id} page {n}: keys out of order"));
            }
            let slot = PackedSlot::from_bytes(e.slot).unpack(e.deadline);
            if let Some(v) = e.held {
                if slot.ptr().is_none_or(|p| p.len as usize != v.len()) {
                    return Err(format!("run {id} page {n}: a held value's length differs"));
                }
            }
            b.push(e.key, &slot, e.held);
            Ok(())
        };
        // The entry form of the page a spilled entry started on.
        let mut spill_form = EntryForm::Held;
        for (n, p) in pages.iter().enumerate() {
            if p.len() != PAGE_SIZE {
                return Err(format!("keytable page of {} bytes", p.len()));
            }
            let crc = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            if crc32c::crc32c(&p[4..]) != crc {
                return Err(format!("run {id} page {n}: checksum mismatch"));
            }
            let Some(form) = EntryForm::of_magic(u16::from_le_bytes([p[4], p[5]])) else {
                return Err(format!("run {id} page {n}: not a keytable page"));
            };
            let mut run = [0u8; 8];
            run.copy_from_slice(&p[8..16]);
            let page_no = u32::from_le_bytes([p[16], p[17], p[18], p[19]]);
            if u64::from_le_bytes(run) != id || page_no as usize != n {
                return Err(format!(
                    "run {id} page {n}: belongs to another run or place"
                ));
            }
            let count = u16::from_le_bytes([p[6], p[7]]);
            let carry = u32::from_le_bytes([p[20], p[21], p[22], p[23]]) as usize;
            let mut at = PAGE_HEADER;
            if carry > 0 || spill_len > 0 {
                let want = spill_len - spill.len().min(spill_len);
                if carry != want.min(PAGE_BODY) || spill_len == 0 {
                    return Err(format!("run {id} page {n}: continuation does not match"));
                }
                spill.extend_from_slice(&p[at..at + carry]);
                at += carry;
                if spill.len() == spill_len {
                    push(&mut b, &spill, spill_form, n)?;
                    spill.clear();
                    spill_len = 0;
                }
            }
            for _ in 0..count {
                let Some(len) = entry_len(&p[at..], form) else {
                    return Err(format!("run {id} page {n}: truncated"));
                };
                if at + len > PAGE_SIZE {
                    // The page's last entry, continued on the next page.
                    if spill_len > 0 || at != PAGE_HEADER {
                        return Err(format!("run {id} page {n}: misplaced long entry"));
                    }
                    spill.extend_from_slice(&p[at..]);
                    spill_len = len;
                    spill_form = form;
                    at = PAGE_SIZE;
                    continue;
                }
                push(&mut b, &p[at..at + len], form, n)?;
                at += len;
            }
        }
        if spill_len > 0 {
            return Err(format!("run {id}: the last entry is cut short"));
        }
        Ok(b.finish(fp_rate))
    }
}

#[cfg(test)]
mod long_entry_tests;

#[cfg(test)]
mod tests;
