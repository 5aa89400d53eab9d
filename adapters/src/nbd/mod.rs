//! The block adapter: an NBD server exporting volumes whose 8 KiB blocks are keys on the
//! drive(s).
//!
//! - [`layout`]: block -> key (`{v:<volume>:<extent>}` + big-endian block number);
//! - [`proto`]: the NBD wire format;
//! - [`store`]: reads, writes (read-modify-write of partial blocks), trims, over the
//!   [`crate::routing::Router`];
//! - [`server`]: connections, handshake, transmission;
//! - [`volumes`]: volumes stored on the drive(s) (metadata records under a reserved key
//!   prefix; create, list, resize, delete).
//!
//! The binary `lightstore-nbd` puts them together. This module owns the volume
//! description ([`Volume`]; `name:SIZE` on the command line).

pub mod layout;
pub mod proto;
pub mod server;
pub mod store;
pub mod volumes;

pub use server::NbdServer;
pub use store::{BlockStore, StoreError};

/// One exported volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// Export name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Bytes per block (one key each).
    pub block_size: u32,
    /// The id in its block keys (see [`layout`]): the name for a command-line volume,
    /// `name@generation` for one stored on the drive.
    pub key_id: String,
}

/// Why a volume specification was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VolumeError {
    /// Not `name:SIZE`.
    #[error("volume {0:?} is not NAME:SIZE")]
    Syntax(String),
    /// The name has characters outside `[A-Za-z0-9._-]` or is too long.
    #[error("volume name {0:?} must be 1 to 64 of A-Z a-z 0-9 . _ -")]
    BadName(String),
    /// The size does not parse or is out of range.
    #[error("volume size {0:?} must be a number of bytes with an optional K/M/G/T (binary) suffix, between 1 byte and 8 PiB")]
    BadSize(String),
    /// Two volumes have the same name.
    #[error("volume {0:?} is given twice")]
    Duplicate(String),
}

/// Parses a size: bytes, or a number with `K`, `M`, `G`, `T` (optionally followed by `iB`
/// or `B`), all powers of 1024.
///
/// # Errors
/// [`VolumeError::BadSize`] for anything else, zero, or more than
/// [`layout::MAX_VOLUME_SIZE`].
pub fn parse_size(text: &str) -> Result<u64, VolumeError> {
    let bad = || VolumeError::BadSize(text.to_string());
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let size = n.checked_mul(1u64 << shift).ok_or_else(bad)?;
    if size == 0 || size > layout::MAX_VOLUME_SIZE {
        return Err(bad());
    }
    Ok(size)
}

impl Volume {
    /// A command-line volume: 8 KiB blocks, keyed by its name.
    #[must_use]
    pub fn new(name: &str, size: u64) -> Volume {
        Volume {
            name: name.to_string(),
            size,
            block_size: layout::BLOCK_SIZE as u32,
            key_id: name.to_string(),
        }
    }

    /// Parses `name:SIZE`.
    ///
    /// # Errors
    /// [`VolumeError`] for a missing colon, a bad name or a bad size.
    pub fn parse(spec: &str) -> Result<Volume, VolumeError> {
        let (name, size) = spec
            .rsplit_once(':')
            .ok_or_else(|| VolumeError::Syntax(spec.to_string()))?;
        if !layout::valid_name(name) {
            return Err(VolumeError::BadName(name.to_string()));
        }
        Ok(Volume::new(name, parse_size(size)?))
    }

    /// Checks a list of volumes for duplicate names.
    ///
    /// # Errors
    /// [`VolumeError::Duplicate`] naming the first repeated volume.
    pub fn check_unique(volumes: &[Volume]) -> Result<(), VolumeError> {
        let mut seen = std::collections::HashSet::new();
        for v in volumes {
            if !seen.insert(v.name.as_str()) {
                return Err(VolumeError::Duplicate(v.name.clone()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2t"), Ok(2 << 40));
        assert_eq!(parse_size("10kb"), Ok(10 << 10));
        for bad in [
            "",
            "0",
            "1.5G",
            "G",
            "-1",
            "1X",
            "99999999999T",
            "18446744073709551616",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn volumes() {
        assert_eq!(
            Volume::parse("disk0:1GiB"),
            Ok(Volume::new("disk0", 1 << 30))
        );
        assert!(matches!(
            Volume::parse("disk0"),
            Err(VolumeError::Syntax(_))
        ));
        assert!(matches!(
            Volume::parse("a:b:1G"),
            Err(VolumeError::BadName(_))
        ));
        assert!(matches!(Volume::parse(":1G"), Err(VolumeError::BadName(_))));
        assert!(matches!(Volume::parse("x:0"), Err(VolumeError::BadSize(_))));
        let v = vec![
            Volume::parse("a:1M").unwrap(),
            Volume::parse("a:2M").unwrap(),
        ];
        assert_eq!(
            Volume::check_unique(&v),
            Err(VolumeError::Duplicate("a".into()))
        );
    }
}
