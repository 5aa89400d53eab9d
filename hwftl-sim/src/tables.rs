//! The FTL's persistent state: the superblock, the block mapping table (logical block ->
//! physical block) and the block status table (free/used/bad and P/E count), with their
//! checksummed on-media encoding and the least-worn-first allocator.

use crate::error::{DeviceError, Result};
use crate::geometry::{Geometry, SegmentId};

/// Marks a logical block with no physical block behind it.
pub(crate) const UNMAPPED: u32 = u32::MAX;

const SUPER_MAGIC: &[u8; 8] = b"LSHWFTL\0";
const TABLE_MAGIC: &[u8; 8] = b"LSFTLTAB";
const FORMAT_VERSION: u32 = 1;
const TABLE_HEADER: usize = 24;
/// Bytes of the superblock at the start of the media.
pub(crate) const SUPERBLOCK_BYTES: usize = 8192;

/// Lifecycle of a logical segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentState {
    /// No blocks mapped; the next write (at page 0) opens it.
    Free,
    /// Blocks mapped; appends go at the write pointer until it is full.
    Open,
    /// Every page written and completed (recorded when the last write completes).
    Full,
    /// A program failure closed it: written pages readable, no further writes.
    ReadOnly,
}

impl SegmentState {
    fn code(self) -> u8 {
        match self {
            SegmentState::Free => 0,
            SegmentState::Open => 1,
            SegmentState::ReadOnly => 2,
            SegmentState::Full => 3,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => SegmentState::Free,
            1 => SegmentState::Open,
            2 => SegmentState::ReadOnly,
            3 => SegmentState::Full,
            _ => return None,
        })
    }
}

/// State of one physical erase block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Erased and allocatable.
    Free,
    /// Mapped to a logical segment.
    Used,
    /// Retired after a program or erase failure; never allocated again.
    Bad,
}

impl BlockState {
    fn code(self) -> u8 {
        match self {
            BlockState::Free => 0,
            BlockState::Used => 1,
            BlockState::Bad => 2,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => BlockState::Free,
            1 => BlockState::Used,
            2 => BlockState::Bad,
            _ => return None,
        })
    }
}

/// Size in bytes of one encoded copy of the tables for a geometry.
pub(crate) fn table_bytes(g: &Geometry) -> usize {
    let segs = g.segments() as usize;
    let chips = g.chips() as usize;
    let blocks = chips * g.blocks_per_chip as usize;
    TABLE_HEADER + 12 + segs * chips * 4 + segs * 5 + blocks * 5
}

/// Bytes reserved on the media for one table slot (two slots alternate).
pub(crate) fn slot_bytes(g: &Geometry) -> u64 {
    (table_bytes(g) as u64).next_multiple_of(8192)
}

/// Bytes of the metadata area (superblock and both table slots) computed with checked
/// arithmetic, or `None` when they do not fit in a `u64`. Equals
/// `SUPERBLOCK_BYTES + 2 * slot_bytes(g)` whenever that does not overflow.
pub(crate) fn meta_bytes_checked(g: &Geometry) -> Option<u64> {
    let segs = u64::from(g.segments());
    let chips = u64::from(g.chips());
    let blocks = chips.checked_mul(u64::from(g.blocks_per_chip))?;
    let table = segs
        .checked_mul(chips)?
        .checked_mul(4)?
        .checked_add(segs.checked_mul(5)?)?
        .checked_add(blocks.checked_mul(5)?)?
        .checked_add((TABLE_HEADER + 12) as u64)?;
    table
        .checked_next_multiple_of(8192)?
        .checked_mul(2)?
        .checked_add(SUPERBLOCK_BYTES as u64)
}

/// Encodes the superblock: format version and geometry.
pub(crate) fn encode_superblock(g: &Geometry) -> Vec<u8> {
    let mut b = Vec::with_capacity(SUPERBLOCK_BYTES);
    b.extend_from_slice(SUPER_MAGIC);
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    for v in [
        g.channels,
        g.ways,
        g.blocks_per_chip,
        g.pages_per_block,
        g.spare_blocks_per_chip,
    ] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b.resize(SUPERBLOCK_BYTES, 0);
    b
}

/// Decodes a superblock into the geometry it records.
///
/// # Errors
/// `NotFormatted` when the magic is missing, `TableCorrupt` on a bad checksum or version.
pub(crate) fn decode_superblock(b: &[u8]) -> Result<Geometry> {
    if b.len() < 36 || &b[..8] != SUPER_MAGIC {
        return Err(DeviceError::NotFormatted);
    }
    let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if crc32c::crc32c(&b[..32]) != word(32) {
        return Err(DeviceError::TableCorrupt(
            "superblock checksum mismatch".into(),
        ));
    }
    if word(8) != FORMAT_VERSION {
        return Err(DeviceError::TableCorrupt(format!(
            "superblock format version {} (this build reads {FORMAT_VERSION})",
            word(8)
        )));
    }
    let g = Geometry {
        channels: word(12),
        ways: word(16),
        blocks_per_chip: word(20),
        pages_per_block: word(24),
        spare_blocks_per_chip: word(28),
    };
    g.validate()
        .map_err(|e| DeviceError::TableCorrupt(format!("superblock geometry: {e}")))?;
    Ok(g)
}

/// The block mapping table and block status table, with per-segment state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tables {
    pub geometry: Geometry,
    /// Incremented on every persist; the higher valid slot wins on open.
    pub generation: u64,
    /// Set only by a clean close; then `seg_wp` is exact.
    pub clean: bool,
    /// `[segment * chips + chip]` -> physical block, or [`UNMAPPED`].
    pub map: Vec<u32>,
    pub seg_state: Vec<SegmentState>,
    /// Write pointers: exact after a clean close, else a lower bound of completed pages.
    pub seg_wp: Vec<u32>,
    /// `[chip * blocks_per_chip + block]`.
    pub block_state: Vec<BlockState>,
    /// Program/erase cycles, same indexing as `block_state`.
    pub pe: Vec<u32>,
}

impl Tables {
    /// Fresh tables: nothing mapped, every block free with zero wear.
    pub(crate) fn new(geometry: Geometry) -> Self {
        let segs = geometry.segments() as usize;
        let chips = geometry.chips() as usize;
        let blocks = chips * geometry.blocks_per_chip as usize;
        Tables {
            geometry,
            generation: 0,
            clean: true,
            map: vec![UNMAPPED; segs * chips],
            seg_state: vec![SegmentState::Free; segs],
            seg_wp: vec![0; segs],
            block_state: vec![BlockState::Free; blocks],
            pe: vec![0; blocks],
        }
    }

    pub(crate) fn block_index(&self, chip: u32, block: u32) -> usize {
        chip as usize * self.geometry.blocks_per_chip as usize + block as usize
    }

    /// The physical block behind (segment, chip).
    pub(crate) fn mapped(&self, segment: SegmentId, chip: u32) -> u32 {
        self.map[segment.0 as usize * self.geometry.chips() as usize + chip as usize]
    }

    pub(crate) fn set_mapped(&mut self, segment: SegmentId, chip: u32, block: u32) {
        let i = segment.0 as usize * self.geometry.chips() as usize + chip as usize;
        self.map[i] = block;
    }

    /// The least-worn free good block of a chip (wear-levelling), if any.
    pub(crate) fn least_worn_free(&self, chip: u32) -> Option<u32> {
        let base = self.block_index(chip, 0);
        (0..self.geometry.blocks_per_chip)
            .filter(|&b| self.block_state[base + b as usize] == BlockState::Free)
            .min_by_key(|&b| (self.pe[base + b as usize], b))
    }

    /// Encodes one slot's worth of tables with a crc32c over the body.
    pub(crate) fn encode(&self) -> Vec<u8> {
        self.encode_as(self.generation)
    }

    /// Encodes the tables as generation `generation` (the in-memory generation is left as it
    /// is, so a persist that fails does not advance it).
    pub(crate) fn encode_as(&self, generation: u64) -> Vec<u8> {
        let mut body = Vec::with_capacity(table_bytes(&self.geometry));
        body.extend_from_slice(&generation.to_le_bytes());
        body.extend_from_slice(&u32::from(self.clean).to_le_bytes());
        for v in &self.map {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend(self.seg_state.iter().map(|s| s.code()));
        for v in &self.seg_wp {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend(self.block_state.iter().map(|s| s.code()));
        for v in &self.pe {
            body.extend_from_slice(&v.to_le_bytes());
        }
        let mut out = Vec::with_capacity(TABLE_HEADER + body.len());
        out.extend_from_slice(TABLE_MAGIC);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a slot written by [`Tables::encode`] for this geometry.
    ///
    /// # Errors
    /// `TableCorrupt` naming what is wrong (magic, length, checksum, a bad value).
    pub(crate) fn decode(geometry: Geometry, b: &[u8]) -> Result<Self> {
        let corrupt = |m: &str| DeviceError::TableCorrupt(m.to_string());
        if b.len() < TABLE_HEADER || &b[..8] != TABLE_MAGIC {
            return Err(corrupt("table slot has no table magic"));
        }
        let mut r = Reader { b, at: 8 };
        let len = r.u64()?;
        let crc = r.u32()?;
        r.u32()?;
        let expected = (table_bytes(&geometry) - TABLE_HEADER) as u64;
        if len != expected {
            return Err(DeviceError::TableCorrupt(format!(
                "table length {len} does not match the geometry ({expected})"
            )));
        }
        let body = b
            .get(TABLE_HEADER..TABLE_HEADER + expected as usize)
            .ok_or_else(|| corrupt("table slot is truncated"))?;
        if crc32c::crc32c(body) != crc {
            return Err(corrupt("table checksum mismatch"));
        }
        let mut t = Tables::new(geometry);
        t.generation = r.u64()?;
        t.clean = r.u32()? != 0;
        for v in t.map.iter_mut() {
            *v = r.u32()?;
            if *v != UNMAPPED && *v >= geometry.blocks_per_chip {
                return Err(corrupt("mapping points past the last block"));
            }
        }
        for s in t.seg_state.iter_mut() {
            *s = SegmentState::from_code(r.u8()?).ok_or_else(|| corrupt("bad segment state"))?;
        }
        for v in t.seg_wp.iter_mut() {
            *v = r.u32()?;
            if *v > geometry.pages_per_segment() {
                return Err(corrupt("write pointer past the segment end"));
            }
        }
        for s in t.block_state.iter_mut() {
            *s = BlockState::from_code(r.u8()?).ok_or_else(|| corrupt("bad block state"))?;
        }
        for v in t.pe.iter_mut() {
            *v = r.u32()?;
        }
        Ok(t)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self
            .b
            .get(self.at..self.at + N)
            .ok_or_else(|| DeviceError::TableCorrupt("table slot is truncated".into()))?;
        self.at += N;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g() -> Geometry {
        Geometry {
            channels: 2,
            ways: 2,
            blocks_per_chip: 6,
            pages_per_block: 4,
            spare_blocks_per_chip: 1,
        }
    }

    #[test]
    fn tables_round_trip() {
        let mut t = Tables::new(g());
        t.generation = 42;
        t.clean = false;
        t.set_mapped(SegmentId(2), 3, 5);
        t.seg_state[2] = SegmentState::Open;
        t.seg_wp[2] = 7;
        let i = t.block_index(3, 5);
        t.block_state[i] = BlockState::Used;
        t.pe[i] = 9;
        t.block_state[0] = BlockState::Bad;
        let b = t.encode();
        assert_eq!(b.len(), table_bytes(&g()));
        assert_eq!(Tables::decode(g(), &b).ok(), Some(t));
    }

    #[test]
    fn flipped_bit_is_detected() {
        let t = Tables::new(g());
        let mut b = t.encode();
        let last = b.len() - 1;
        b[last] ^= 1;
        assert!(matches!(
            Tables::decode(g(), &b),
            Err(DeviceError::TableCorrupt(_))
        ));
        assert!(Tables::decode(g(), &b[..10]).is_err());
    }

    #[test]
    fn superblock_round_trip_and_corruption() {
        let mut sb = encode_superblock(&g());
        assert_eq!(decode_superblock(&sb).ok(), Some(g()));
        sb[13] ^= 0x40;
        assert!(matches!(
            decode_superblock(&sb),
            Err(DeviceError::TableCorrupt(_))
        ));
        assert!(matches!(
            decode_superblock(&[0u8; 64]),
            Err(DeviceError::NotFormatted)
        ));
    }

    #[test]
    fn checked_meta_size_matches_the_slot_layout() {
        let g = g();
        assert_eq!(
            meta_bytes_checked(&g),
            Some(SUPERBLOCK_BYTES as u64 + 2 * slot_bytes(&g))
        );
    }

    #[test]
    fn allocator_prefers_least_worn_and_skips_bad() {
        let mut t = Tables::new(g());
        let b0 = t.block_index(1, 0);
        t.pe[b0] = 3;
        let b1 = t.block_index(1, 1);
        t.block_state[b1] = BlockState::Bad;
        for b in 2..6 {
            let i = t.block_index(1, b);
            t.pe[i] = 2;
        }
        let i = t.block_index(1, 4);
        t.pe[i] = 1;
        assert_eq!(t.least_worn_free(1), Some(4));
        for b in 0..6 {
            let i = t.block_index(1, b);
            t.block_state[i] = BlockState::Used;
        }
        assert_eq!(t.least_worn_free(1), None);
    }
}
