//! Device geometry and address arithmetic: channels x ways x blocks x pages, segments striped
//! across channels, and where each logical page lives physically.

use std::fmt;

use crate::error::{DeviceError, Result};

/// Size of one flash page and of every logical block: 8 KiB.
pub const PAGE_SIZE: usize = 8192;

/// A logical block address: one 8 KiB page of the append-only address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lba(pub u64);

impl fmt::Display for Lba {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A segment: one erase block on every chip, the unit of TRIM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentId(pub u32);

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Physical page number on the media (chip, block and page folded into one index).
pub(crate) type Ppa = u64;

/// The shape of the flash array.
///
/// Chips are numbered channel-first (`chip = way * channels + channel`), and page `o` of a
/// segment lives on chip `o % chips`, page `o / chips` of that chip's block, so consecutive
/// LBAs land on different channels (the paper maps consecutive LBAs to different channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Independent channels (buses) to the flash chips.
    pub channels: u32,
    /// Chips (ways) on each channel.
    pub ways: u32,
    /// Erase blocks on each chip.
    pub blocks_per_chip: u32,
    /// Pages in each erase block.
    pub pages_per_block: u32,
    /// Blocks on each chip kept out of the logical address space, to replace bad blocks.
    pub spare_blocks_per_chip: u32,
}

impl fmt::Display for Geometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} channels x {} ways x {} blocks ({} spare) x {} pages of 8 KiB",
            self.channels,
            self.ways,
            self.blocks_per_chip,
            self.spare_blocks_per_chip,
            self.pages_per_block
        )
    }
}

impl Geometry {
    /// The paper's card shape (8 channels x 8 ways, 256 pages per block, 128 MiB segments),
    /// sized to hold at least `capacity_bytes` of logical space plus 2% spare blocks.
    ///
    /// # Errors
    /// `InvalidGeometry` when the capacity is below one segment.
    pub fn paper_card(capacity_bytes: u64) -> Result<Self> {
        Self::with_capacity(8, 8, 256, capacity_bytes)
    }

    /// The geometry a drive formats a new device with: the paper card's 8 channels x 8 ways,
    /// with erase blocks of 16 to 256 pages (the card's) chosen so the device has at least
    /// [`Geometry::DRIVE_MIN_SEGMENTS`] segments where its capacity allows. Garbage
    /// collection reclaims whole segments: with the card's 128 MiB segments a small device
    /// has a dozen of them, and every reclaim moves a large share of the data (a 1.5 GiB
    /// drive ran random 8 KiB SETs at ~800/s that way).
    ///
    /// # Errors
    /// `InvalidGeometry` when the capacity cannot be addressed.
    pub fn for_drive(capacity_bytes: u64) -> Result<Self> {
        let chips = 64u64;
        let mut pages_per_block: u32 = 256;
        while pages_per_block > 16
            && capacity_bytes / (chips * u64::from(pages_per_block) * PAGE_SIZE as u64)
                < Self::DRIVE_MIN_SEGMENTS
        {
            pages_per_block /= 2;
        }
        Self::with_capacity(8, 8, pages_per_block, capacity_bytes)
    }

    /// Segments [`Geometry::for_drive`] gives a device at least, where its capacity allows.
    pub const DRIVE_MIN_SEGMENTS: u64 = 256;

    /// A geometry with the given channels, ways and pages per block that holds at least
    /// `capacity_bytes` of logical space, with 2% of blocks (at least one) kept as spares.
    ///
    /// # Errors
    /// `InvalidGeometry` when the result would be empty or too large to address.
    pub fn with_capacity(
        channels: u32,
        ways: u32,
        pages_per_block: u32,
        capacity_bytes: u64,
    ) -> Result<Self> {
        let segment_bytes = u64::from(channels)
            .saturating_mul(u64::from(ways))
            .saturating_mul(u64::from(pages_per_block))
            .saturating_mul(PAGE_SIZE as u64);
        if segment_bytes == 0 {
            return Err(DeviceError::InvalidGeometry(
                "channels, ways and pages per block must be non-zero".into(),
            ));
        }
        let segments = capacity_bytes.div_ceil(segment_bytes).max(1);
        let spare = (segments / 50).max(1);
        let blocks = u32::try_from(segments + spare).map_err(|_| {
            DeviceError::InvalidGeometry(format!("{capacity_bytes} bytes needs too many blocks"))
        })?;
        let g = Geometry {
            channels,
            ways,
            blocks_per_chip: blocks,
            pages_per_block,
            spare_blocks_per_chip: u32::try_from(spare).unwrap_or(u32::MAX),
        };
        g.validate()?;
        Ok(g)
    }

    /// Checks that the geometry is usable. Every size derived from it (chips, pages, bytes
    /// of the media including the metadata area) is computed with checked arithmetic, so a
    /// geometry that passes never overflows in the address arithmetic of this crate.
    ///
    /// # Errors
    /// `InvalidGeometry` with the reason.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(DeviceError::InvalidGeometry(format!("{m} ({self})")));
        if self.channels == 0 || self.ways == 0 || self.pages_per_block == 0 {
            return bad("channels, ways and pages per block must be non-zero");
        }
        if self.spare_blocks_per_chip >= self.blocks_per_chip {
            return bad("there must be more blocks per chip than spare blocks");
        }
        let Some(chips) = self.channels.checked_mul(self.ways) else {
            return bad("channels x ways overflows");
        };
        if chips > 65_536 {
            return bad("more than 65536 chips");
        }
        // Both factors are below 2^32, so the product fits in a u64.
        if u64::from(chips) * u64::from(self.pages_per_block) > u64::from(u32::MAX) {
            return bad("a segment would have more than 2^32 pages");
        }
        let media_bytes = u64::from(chips)
            .checked_mul(u64::from(self.blocks_per_chip))
            .and_then(|blocks| blocks.checked_mul(u64::from(self.pages_per_block)))
            .and_then(|pages| pages.checked_mul(PAGE_SIZE as u64))
            .and_then(|bytes| bytes.checked_add(crate::tables::meta_bytes_checked(self)?));
        if media_bytes.is_none() {
            return bad("the media would be larger than 2^64 bytes");
        }
        Ok(())
    }

    /// Number of flash chips (channels x ways).
    pub fn chips(&self) -> u32 {
        self.channels * self.ways
    }

    /// Pages in one segment (one block on every chip).
    pub fn pages_per_segment(&self) -> u32 {
        self.chips() * self.pages_per_block
    }

    /// Bytes in one segment.
    pub fn segment_bytes(&self) -> u64 {
        u64::from(self.pages_per_segment()) * PAGE_SIZE as u64
    }

    /// Number of logical segments (blocks per chip minus the spares).
    pub fn segments(&self) -> u32 {
        self.blocks_per_chip - self.spare_blocks_per_chip
    }

    /// Number of logical blocks (8 KiB pages) in the address space.
    pub fn lbas(&self) -> u64 {
        u64::from(self.segments()) * u64::from(self.pages_per_segment())
    }

    /// Logical capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.lbas() * PAGE_SIZE as u64
    }

    /// Physical pages on the media, spares included.
    pub fn physical_pages(&self) -> u64 {
        u64::from(self.chips()) * u64::from(self.blocks_per_chip) * u64::from(self.pages_per_block)
    }

    /// First LBA of a segment.
    pub fn segment_start(&self, segment: SegmentId) -> Lba {
        Lba(u64::from(segment.0) * u64::from(self.pages_per_segment()))
    }

    /// The LBA of page `offset` of `segment`.
    pub fn lba(&self, segment: SegmentId, offset: u32) -> Lba {
        Lba(self.segment_start(segment).0 + u64::from(offset))
    }

    /// Splits an LBA into its segment and page offset.
    ///
    /// # Errors
    /// `OutOfRange` past the end of the device.
    pub fn locate(&self, lba: Lba) -> Result<(SegmentId, u32)> {
        if lba.0 >= self.lbas() {
            return Err(DeviceError::OutOfRange {
                lba,
                capacity: self.lbas(),
            });
        }
        let pps = u64::from(self.pages_per_segment());
        // Both fit: lba < segments * pps and offset < pps <= u32::MAX.
        Ok((SegmentId((lba.0 / pps) as u32), (lba.0 % pps) as u32))
    }

    /// Checks a segment number.
    ///
    /// # Errors
    /// `SegmentOutOfRange` past the last segment.
    pub fn check_segment(&self, segment: SegmentId) -> Result<()> {
        if segment.0 >= self.segments() {
            return Err(DeviceError::SegmentOutOfRange {
                segment,
                segments: self.segments(),
            });
        }
        Ok(())
    }

    /// The chip and page-in-block of page `offset` of a segment.
    pub fn stripe(&self, offset: u32) -> (u32, u32) {
        (offset % self.chips(), offset / self.chips())
    }

    /// The channel a chip sits on.
    pub fn channel_of(&self, chip: u32) -> u32 {
        chip % self.channels
    }

    /// Physical page number of (chip, block, page). Pages with the same block and page index
    /// are adjacent across chips, so a segment whose blocks share one index on every chip is one
    /// contiguous run on a file backend.
    pub(crate) fn ppa(&self, chip: u32, block: u32, page: u32) -> Ppa {
        (u64::from(block) * u64::from(self.pages_per_block) + u64::from(page))
            * u64::from(self.chips())
            + u64::from(chip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drive_gets_256_segments_where_its_capacity_allows() {
        let gib = 1u64 << 30;
        let seg = |g: &Geometry| (g.segment_bytes() >> 20, g.pages_per_block);
        let big = Geometry::for_drive(8 * gib).unwrap();
        assert_eq!(seg(&big), (32, 64));
        assert!(u64::from(big.segments()) >= Geometry::DRIVE_MIN_SEGMENTS);
        let huge = Geometry::for_drive(512 * gib).unwrap();
        assert_eq!(seg(&huge), (128, 256), "the card's own blocks");
        // Below 256 x 8 MiB the blocks stay at 16 pages: fewer, 8 MiB segments.
        let small = Geometry::for_drive(gib).unwrap();
        assert_eq!(seg(&small), (8, 16));
        assert!(small.capacity_bytes() >= gib);
    }

    fn small() -> Geometry {
        Geometry {
            channels: 2,
            ways: 2,
            blocks_per_chip: 8,
            pages_per_block: 4,
            spare_blocks_per_chip: 1,
        }
    }

    #[test]
    fn consecutive_lbas_stripe_across_channels() {
        let g = small();
        let chans: Vec<u32> = (0..4).map(|o| g.channel_of(g.stripe(o).0)).collect();
        assert_eq!(chans, vec![0, 1, 0, 1]);
        assert_eq!(g.stripe(5), (1, 1));
    }

    #[test]
    fn locate_round_trips_and_rejects_out_of_range() {
        let g = small();
        assert_eq!(g.segments(), 7);
        assert_eq!(g.pages_per_segment(), 16);
        let lba = g.lba(SegmentId(3), 9);
        assert_eq!(g.locate(lba).ok(), Some((SegmentId(3), 9)));
        assert!(matches!(
            g.locate(Lba(g.lbas())),
            Err(DeviceError::OutOfRange { .. })
        ));
    }

    #[test]
    fn ppa_is_dense_and_unique() {
        let g = small();
        let mut seen = std::collections::HashSet::new();
        for chip in 0..g.chips() {
            for block in 0..g.blocks_per_chip {
                for page in 0..g.pages_per_block {
                    let p = g.ppa(chip, block, page);
                    assert!(p < g.physical_pages());
                    assert!(seen.insert(p));
                }
            }
        }
    }

    #[test]
    fn paper_card_has_128_mib_segments() {
        let g = Geometry::paper_card(1 << 30).expect("geometry");
        assert_eq!(g.segment_bytes(), 128 << 20);
        assert!(g.capacity_bytes() >= 1 << 30);
    }

    #[test]
    fn overflowing_geometry_is_refused_not_wrapped() {
        // channels x ways overflows a u32.
        let g = Geometry {
            channels: 1 << 16,
            ways: 1 << 16,
            blocks_per_chip: 2,
            pages_per_block: 1,
            spare_blocks_per_chip: 1,
        };
        assert!(matches!(g.validate(), Err(DeviceError::InvalidGeometry(_))));
        // chips x blocks x pages x 8 KiB overflows a u64.
        let g = Geometry {
            channels: 1,
            ways: 1,
            blocks_per_chip: u32::MAX,
            pages_per_block: u32::MAX,
            spare_blocks_per_chip: 1,
        };
        assert!(matches!(g.validate(), Err(DeviceError::InvalidGeometry(_))));
        // A large geometry that fits is accepted, and its sizes do not overflow.
        let g = Geometry {
            channels: 1,
            ways: 1,
            blocks_per_chip: 1 << 20,
            pages_per_block: 1 << 20,
            spare_blocks_per_chip: 1,
        };
        assert!(g.validate().is_ok());
        assert_eq!(g.capacity_bytes(), ((1u64 << 20) - 1) * (1 << 20) * 8192);
    }

    #[test]
    fn invalid_geometry_is_refused() {
        let mut g = small();
        g.spare_blocks_per_chip = 8;
        assert!(matches!(g.validate(), Err(DeviceError::InvalidGeometry(_))));
        g.channels = 0;
        assert!(g.validate().is_err());
    }
}
