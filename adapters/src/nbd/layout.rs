//! Where a volume's blocks live in the key space.
//!
//! This module owns the key layout of the block adapter. A volume is cut into 8 KiB blocks
//! ([`BLOCK_SIZE`], one drive page) and the blocks into extents of [`EXTENT_BLOCKS`] (256
//! blocks, 2 MiB). Block `b` of volume `name` is stored under
//!
//! ```text
//! {v:<name>:<extent as 8 lower-case hex digits>} <b as 8 bytes, big-endian>
//! ```
//!
//! e.g. block 300 of `disk0` is `{v:disk0:00000001}` followed by `00 00 00 00 00 00 01 2c`.
//! The braces are a Redis Cluster hash tag: every block of one extent hashes to the same
//! slot, so an extent lives on one drive (and its replicas) and a sequential read of up to
//! 2 MiB is one `LS.RANGE` on one drive, while consecutive extents spread over the cluster.
//! Within an extent the keys share their prefix and differ in the big-endian block number,
//! so byte order is block order; with fixed-width hex extents the same holds across the
//! whole volume, which is one ordered key range on a single drive. Volume names are 1 to 64
//! characters from `[A-Za-z0-9._-]` (no `:` or braces), so no volume's keys are a prefix of
//! another's. Never-written and zeroed blocks have no key.

/// Bytes per block: one 8 KiB drive page.
pub const BLOCK_SIZE: usize = 8192;

/// Blocks per extent (2 MiB): the run of consecutive blocks that share a hash tag.
pub const EXTENT_BLOCKS: u64 = 256;

/// Longest volume name.
pub const MAX_NAME_LEN: usize = 64;

/// Largest volume: 2^32 extents of 2 MiB (8 PiB), what 8 hex digits of extent number hold.
pub const MAX_VOLUME_SIZE: u64 = (1u64 << 32) * EXTENT_BLOCKS * BLOCK_SIZE as u64;

/// Whether `name` may name a volume (1 to 64 of `[A-Za-z0-9._-]`).
#[must_use]
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The extent a block belongs to.
#[must_use]
pub fn extent_of(block: u64) -> u64 {
    block / EXTENT_BLOCKS
}

/// The hash-tagged prefix shared by every key of one extent of a volume.
#[must_use]
pub fn extent_prefix(volume: &str, extent: u64) -> Vec<u8> {
    format!("{{v:{volume}:{extent:08x}}}").into_bytes()
}

/// The key of block `block` of `volume`.
#[must_use]
pub fn block_key(volume: &str, block: u64) -> Vec<u8> {
    let mut key = extent_prefix(volume, extent_of(block));
    key.extend_from_slice(&block.to_be_bytes());
    key
}

/// The exclusive upper bound of a range read of blocks `first..=last` of one extent: the
/// key block `last + 1` would have with the same extent prefix (byte order is block order
/// within the prefix).
#[must_use]
pub fn range_end_key(volume: &str, last: u64) -> Vec<u8> {
    let mut key = extent_prefix(volume, extent_of(last));
    key.extend_from_slice(&last.saturating_add(1).to_be_bytes());
    key
}

/// The block number of `key` when it is a block key of `volume` in `extent`.
#[must_use]
pub fn parse_block_key(volume: &str, extent: u64, key: &[u8]) -> Option<u64> {
    let prefix = extent_prefix(volume, extent);
    let rest = key.strip_prefix(prefix.as_slice())?;
    let block = u64::from_be_bytes(rest.try_into().ok()?);
    (extent_of(block) == extent).then_some(block)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvproto::cluster::key_slot;

    #[test]
    fn key_shape() {
        let k = block_key("disk0", 300);
        let mut want = b"{v:disk0:00000001}".to_vec();
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 0x2c]);
        assert_eq!(k, want);
        assert_eq!(parse_block_key("disk0", 1, &k), Some(300));
        assert_eq!(parse_block_key("disk0", 0, &k), None);
        assert_eq!(parse_block_key("disk", 1, &k), None);
        assert_eq!(parse_block_key("disk0", 1, &k[..k.len() - 1]), None);
    }

    #[test]
    fn an_extent_is_one_slot_and_ordered() {
        let first = block_key("v1", 512);
        for b in 512..768 {
            assert_eq!(key_slot(&block_key("v1", b)), key_slot(&first));
        }
        // Consecutive extents spread over slots.
        let slots: std::collections::HashSet<u16> = (0..64)
            .map(|e| key_slot(&block_key("v1", e * EXTENT_BLOCKS)))
            .collect();
        assert!(slots.len() > 60);
        // Byte order is block order, within an extent and across the volume.
        let keys: Vec<Vec<u8>> = [0u64, 1, 255, 256, 257, 70_000, 1 << 33]
            .iter()
            .map(|&b| block_key("v1", b))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        // The range end of an extent's last block sorts after all of its keys and before
        // the next extent's.
        let end = range_end_key("v1", 767);
        assert!(block_key("v1", 767) < end);
        assert!(end < block_key("v1", 768));
    }

    #[test]
    fn names() {
        assert!(valid_name("disk-0.img_A"));
        for bad in ["", "a:b", "a{b", "a}b", "a b", &"x".repeat(65), "é"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        // No volume's keys start with another volume's prefix.
        assert!(!block_key("ab", 0).starts_with(b"{v:a:"));
    }
}
