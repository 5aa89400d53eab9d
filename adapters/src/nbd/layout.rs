//! Where a volume's blocks and metadata live in the key space.
//!
//! This module owns the key layout of the block adapter. A volume is cut into blocks (8 KiB,
//! [`BLOCK_SIZE`], one drive page, unless the volume was created with another block size)
//! and the blocks into extents of [`EXTENT_BLOCKS`] (256 blocks, 2 MiB of 8 KiB blocks).
//! Block `b` of the volume with key id `id` is stored under
//!
//! ```text
//! {v:<id>:<extent as 8 lower-case hex digits>} <b as 8 bytes, big-endian>
//! ```
//!
//! e.g. block 300 of a command-line volume `disk0` (its id is its name) is
//! `{v:disk0:00000001}` followed by `00 00 00 00 00 00 01 2c`. A volume stored on the
//! drive (see [`super::volumes`]) has the id `<name>@<generation as 16 hex digits>`, so a
//! volume deleted and created again under the same name never sees the old one's blocks.
//! The braces are a Redis Cluster hash tag: every block of one extent hashes to the same
//! slot, so an extent lives on one drive (and its replicas) and a sequential read of up to
//! 2 MiB is one `LS.RANGE` on one drive, while consecutive extents spread over the cluster.
//! Within an extent the keys share their prefix and differ in the big-endian block number,
//! so byte order is block order; with fixed-width hex extents the same holds across the
//! whole volume, which is one ordered key range on a single drive. Volume names are 1 to 64
//! characters from `[A-Za-z0-9._-]` (no `:`, `@`, glob characters or braces), so no
//! volume's keys are a prefix of another's, and a name and a name with a generation never
//! collide. Never-written and zeroed blocks have no key.
//!
//! Volume metadata records live under the reserved prefix [`META_PREFIX`] (`{ls-vol}`):
//! the record of volume `NAME` is the key `{ls-vol}NAME`. The hash tag puts every record on
//! one slot (one drive and its replicas), so listing the volumes is one `LS.RANGE` from
//! `{ls-vol}` to `{ls-vol}\xff`. Block keys begin with `{v:`, so they never fall in it.

/// Bytes per block: one 8 KiB drive page.
pub const BLOCK_SIZE: usize = 8192;

/// Blocks per extent (2 MiB): the run of consecutive blocks that share a hash tag.
pub const EXTENT_BLOCKS: u64 = 256;

/// Longest volume name.
pub const MAX_NAME_LEN: usize = 64;

/// Largest volume: 2^32 extents of 2 MiB (8 PiB), what 8 hex digits of extent number hold.
pub const MAX_VOLUME_SIZE: u64 = (1u64 << 32) * EXTENT_BLOCKS * BLOCK_SIZE as u64;

/// The reserved prefix of volume metadata records (see the module documentation).
pub const META_PREFIX: &[u8] = b"{ls-vol}";

/// The key of the metadata record of volume `name`.
#[must_use]
pub fn meta_key(name: &str) -> Vec<u8> {
    let mut k = META_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

/// The exclusive end of the metadata range: every record key sorts below it (names are
/// ASCII).
#[must_use]
pub fn meta_range_end() -> Vec<u8> {
    let mut k = META_PREFIX.to_vec();
    k.push(0xff);
    k
}

/// The key id of a volume stored on the drive: `<name>@<generation as 16 hex digits>`.
#[must_use]
pub fn stored_key_id(name: &str, generation: u64) -> String {
    format!("{name}@{generation:016x}")
}

/// The `SCAN MATCH` glob selecting every block key of the volume with key id `id` (ids
/// hold no glob characters).
#[must_use]
pub fn block_key_pattern(id: &str) -> Vec<u8> {
    format!("{{v:{id}:*").into_bytes()
}

/// The block number of any block key of the volume with key id `id`, whatever its
/// extent; `None` for other keys.
#[must_use]
pub fn parse_any_block_key(id: &str, key: &[u8]) -> Option<u64> {
    let head = format!("{{v:{id}:");
    let rest = key.strip_prefix(head.as_bytes())?;
    // <8 hex>} <8 bytes>
    if rest.len() != 17 || rest[8] != b'}' {
        return None;
    }
    let extent = u64::from_str_radix(std::str::from_utf8(&rest[..8]).ok()?, 16).ok()?;
    parse_block_key(id, extent, key)
}

/// The glob selecting the block keys of every volume stored on the drive (ids with `@`;
/// may also match a command-line volume's key whose binary block number holds `@`, which
/// [`stored_id_of`] then rejects).
pub const STORED_BLOCK_PATTERN: &[u8] = b"{v:*@*";

/// The key id of a stored volume's block key (`name@16 hex`), or `None` for any other key.
#[must_use]
pub fn stored_id_of(key: &[u8]) -> Option<&str> {
    let rest = key.strip_prefix(b"{v:")?;
    // <id>:<8 hex>} <8 bytes>
    let tag_end = rest.len().checked_sub(9)?;
    if rest[tag_end] != b'}' {
        return None;
    }
    let tag = std::str::from_utf8(&rest[..tag_end]).ok()?;
    let (id, extent) = tag.rsplit_once(':')?;
    let (name, generation) = id.split_once('@')?;
    let hex = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_hexdigit());
    (valid_name(name) && hex(generation, 16) && hex(extent, 8)).then_some(id)
}

/// Largest volume with blocks of `block_size` bytes: 2^32 extents, what 8 hex digits of
/// extent number hold.
#[must_use]
pub fn max_volume_size(block_size: u32) -> u64 {
    (1u64 << 32) * EXTENT_BLOCKS * u64::from(block_size)
}

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

    #[test]
    fn stored_ids_metadata_and_patterns() {
        let id = stored_key_id("disk0", 0xabc);
        assert_eq!(id, "disk0@0000000000000abc");
        let k = block_key(&id, 70_000);
        assert_eq!(parse_any_block_key(&id, &k), Some(70_000));
        assert_eq!(parse_any_block_key("disk0", &k), None);
        assert_eq!(
            parse_any_block_key(&stored_key_id("disk0", 0xabd), &k),
            None
        );
        // The pattern is a literal prefix and `*`.
        let prefix = |p: Vec<u8>| p[..p.len() - 1].to_vec();
        assert_eq!(block_key_pattern(&id).last(), Some(&b'*'));
        assert!(k.starts_with(&prefix(block_key_pattern(&id))));
        // A command-line volume named like the stored one's prefix does not match.
        assert!(!k.starts_with(&prefix(block_key_pattern("disk0"))));
        // Metadata keys never look like block keys, and sort inside their range.
        let m = meta_key("disk0");
        assert!(!m.starts_with(b"{v:"));
        assert!(m.as_slice() > META_PREFIX && m < meta_range_end());
        assert_eq!(key_slot(&meta_key("a")), key_slot(&meta_key("zz")));
        assert_eq!(max_volume_size(8192), MAX_VOLUME_SIZE);
        assert_eq!(stored_id_of(&k), Some(id.as_str()));
        assert_eq!(stored_id_of(&block_key("disk0", 0x40)), None);
        assert_eq!(stored_id_of(&m), None);
        assert_eq!(stored_id_of(b"{v:a@1:00000000}12345678"), None);
    }
}
