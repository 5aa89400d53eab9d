//! Volumes stored on the drive(s): their metadata records and the catalogue operations.
//!
//! This module owns the volume metadata record and what `lightstore-nbd volume
//! create|list|resize|delete` and `serve` do with it. The record of volume `NAME` is the
//! string key `{ls-vol}NAME` ([`layout::meta_key`]; the reserved prefix and why it cannot
//! meet a block key are in [`layout`]), written with SET and read with GET / `LS.RANGE`
//! through the [`Router`] (one drive, or a cluster: the `{ls-vol}` hash tag keeps every
//! record on one slot). Its value is text, one `field value` per line:
//!
//! ```text
//! lightstore-volume 1
//! name disk0
//! size 10737418240
//! block-size 8192
//! created 1764088000
//! generation 9f3c1d22a07b5e41
//! crc32c 1a2b3c4d
//! ```
//!
//! The first line is the format and its version; `created` is seconds since the Unix epoch;
//! `generation` is a random 64-bit number chosen at create and kept by resize, part of the
//! volume's block key id (`NAME@generation`), so blocks of a deleted volume can never show
//! up in a new volume of the same name; `crc32c` is the CRC-32C of every byte before that
//! line. A record that does not parse or check is an error naming the volume, never a
//! guess.
//!
//! Delete and shrink find the blocks to remove with `SCAN 0 MATCH {v:<id>:* COUNT ..` on
//! every primary (keys only, from the drives' key tables), delete them in batches, scan
//! again, and fail naming how many keys are left rather than drop the record of a volume
//! whose blocks are still there: a delete that fails can be run again. Block keys of
//! stored volumes that no record names (written by an adapter that still had a deleted
//! volume open) are listed and removed by [`Catalog::orphans`] /
//! [`Catalog::delete_orphans`] (`volume orphans [--delete]`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::layout;
use super::store::{BlockStore, StoreError};
use super::Volume;
use crate::routing::{RouteError, Router, RANGE_MAX_COUNT};

/// The first word of a record.
pub const RECORD_MAGIC: &str = "lightstore-volume";

/// The record format this code writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// Block sizes a volume may have: powers of two in this range.
pub const BLOCK_SIZES: std::ops::RangeInclusive<u32> = 4096..=65536;

/// Keys one DEL batch of a delete or shrink carries.
const DELETE_BATCH: usize = 4096;

/// Why a volume metadata record was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    /// Not UTF-8 text.
    #[error("the record is not UTF-8 text")]
    NotText,
    /// The first line is not `lightstore-volume <version>`.
    #[error("the record does not start with `{RECORD_MAGIC} <version>`")]
    NotARecord,
    /// A version this code does not read.
    #[error("record format version {0} is not supported (this build reads {RECORD_VERSION})")]
    Version(u32),
    /// A field is missing or does not parse.
    #[error("field {0:?} is missing or malformed")]
    Field(&'static str),
    /// The checksum does not match.
    #[error("checksum mismatch: stored {stored:08x}, computed {computed:08x}")]
    Checksum {
        /// The `crc32c` line.
        stored: u32,
        /// What the bytes before it hash to.
        computed: u32,
    },
    /// The fields are inconsistent (bad name, size or block size).
    #[error("inconsistent record: {0}")]
    Invalid(String),
}

/// Why a catalogue operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The drive(s) could not be reached or refused.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// Zeroing the tail of a shrunk volume failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored record is damaged or of an unknown format.
    #[error("the metadata record of volume {name:?} ({key}) is unusable: {source}")]
    Record {
        /// The volume (from the key).
        name: String,
        /// The record's key, printable.
        key: String,
        /// What is wrong.
        source: RecordError,
    },
    /// A volume of this name exists already.
    #[error("volume {0:?} already exists")]
    Exists(String),
    /// No volume of this name.
    #[error("no volume named {0:?}")]
    NotFound(String),
    /// Bad name.
    #[error("volume name {0:?} must be 1 to 64 of A-Z a-z 0-9 . _ -")]
    BadName(String),
    /// Bad size for the block size.
    #[error("volume size {size} must be between 1 byte and {max} bytes")]
    BadSize {
        /// Asked for.
        size: u64,
        /// Largest allowed with the block size.
        max: u64,
    },
    /// Bad block size.
    #[error("block size {0} must be a power of two from 4096 to 65536")]
    BadBlockSize(u64),
    /// A resize that shrinks without permission.
    #[error("volume {name:?} is {from} bytes: shrinking it to {to} deletes data beyond the new end; pass --allow-shrink")]
    Shrink {
        /// The volume.
        name: String,
        /// Current size.
        from: u64,
        /// Size asked for.
        to: u64,
    },
    /// Blocks still on the drive after deleting them.
    #[error("{left} block keys of volume {name:?} are still on the drive(s) after deleting them; the record is kept, run the command again")]
    Leftover {
        /// The volume.
        name: String,
        /// Keys found by the second scan.
        left: usize,
    },
}

/// A volume's metadata record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecord {
    /// Name (also the export name).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Bytes per block.
    pub block_size: u32,
    /// Creation time, seconds since the Unix epoch.
    pub created: u64,
    /// Random id chosen at create, part of the block keys.
    pub generation: u64,
}

fn check_shape(name: &str, size: u64, block_size: u64) -> Result<(), CatalogError> {
    if !layout::valid_name(name) {
        return Err(CatalogError::BadName(name.to_string()));
    }
    let bs = u32::try_from(block_size).map_err(|_| CatalogError::BadBlockSize(block_size))?;
    if !bs.is_power_of_two() || !BLOCK_SIZES.contains(&bs) {
        return Err(CatalogError::BadBlockSize(block_size));
    }
    let max = layout::max_volume_size(bs);
    if size == 0 || size > max {
        return Err(CatalogError::BadSize { size, max });
    }
    Ok(())
}

impl VolumeRecord {
    /// The record's bytes (see the module documentation).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let body = format!(
            "{RECORD_MAGIC} {RECORD_VERSION}\nname {}\nsize {}\nblock-size {}\ncreated {}\ngeneration {:016x}\n",
            self.name, self.size, self.block_size, self.created, self.generation
        );
        let crc = crc32c::crc32c(body.as_bytes());
        let mut out = body.into_bytes();
        out.extend_from_slice(format!("crc32c {crc:08x}\n").as_bytes());
        out
    }

    /// Parses and checks a record.
    ///
    /// # Errors
    /// [`RecordError`] for anything but a well-formed record of version
    /// [`RECORD_VERSION`] with a matching checksum and valid fields.
    pub fn decode(bytes: &[u8]) -> Result<VolumeRecord, RecordError> {
        let text = std::str::from_utf8(bytes).map_err(|_| RecordError::NotText)?;
        let crc_at = text.rfind("crc32c ").ok_or(RecordError::Field("crc32c"))?;
        let (body, crc_line) = text.split_at(crc_at);
        let mut lines = body.lines();
        let first = lines.next().ok_or(RecordError::NotARecord)?;
        let version = first
            .strip_prefix(RECORD_MAGIC)
            .and_then(|r| r.strip_prefix(' '))
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or(RecordError::NotARecord)?;
        if version != RECORD_VERSION {
            return Err(RecordError::Version(version));
        }
        let stored = crc_line
            .trim_end_matches('\n')
            .strip_prefix("crc32c ")
            .filter(|h| h.len() == 8)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or(RecordError::Field("crc32c"))?;
        let computed = crc32c::crc32c(body.as_bytes());
        if stored != computed {
            return Err(RecordError::Checksum { stored, computed });
        }
        let mut fields = std::collections::HashMap::new();
        for line in lines {
            let (k, v) = line.split_once(' ').ok_or(RecordError::Field("line"))?;
            if fields.insert(k, v).is_some() {
                return Err(RecordError::Invalid(format!("field {k:?} appears twice")));
            }
        }
        let get = |k: &'static str| fields.get(k).copied().ok_or(RecordError::Field(k));
        let num = |k: &'static str| get(k)?.parse::<u64>().map_err(|_| RecordError::Field(k));
        let rec = VolumeRecord {
            name: get("name")?.to_string(),
            size: num("size")?,
            block_size: u32::try_from(num("block-size")?)
                .map_err(|_| RecordError::Field("block-size"))?,
            created: num("created")?,
            generation: u64::from_str_radix(get("generation")?, 16)
                .map_err(|_| RecordError::Field("generation"))?,
        };
        check_shape(&rec.name, rec.size, u64::from(rec.block_size))
            .map_err(|e| RecordError::Invalid(e.to_string()))?;
        Ok(rec)
    }

    /// The id in the volume's block keys.
    #[must_use]
    pub fn key_id(&self) -> String {
        layout::stored_key_id(&self.name, self.generation)
    }

    /// The volume to export.
    #[must_use]
    pub fn volume(&self) -> Volume {
        Volume {
            name: self.name.clone(),
            size: self.size,
            block_size: self.block_size,
            key_id: self.key_id(),
        }
    }
}

/// A random 64-bit generation (std's randomly keyed hasher over the time and the pid).
fn random_generation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// The volumes stored on the drives behind a router.
#[derive(Debug, Clone)]
pub struct Catalog {
    router: Arc<Router>,
}

impl Catalog {
    /// The catalogue on the drives behind `router`.
    #[must_use]
    pub fn new(router: Arc<Router>) -> Self {
        Self { router }
    }

    fn decode(key: &[u8], value: &[u8]) -> Result<VolumeRecord, CatalogError> {
        let name = String::from_utf8_lossy(key.strip_prefix(layout::META_PREFIX).unwrap_or(key))
            .into_owned();
        let record = |source| CatalogError::Record {
            name: name.clone(),
            key: String::from_utf8_lossy(key).into_owned(),
            source,
        };
        let rec = VolumeRecord::decode(value).map_err(record)?;
        if rec.name != name {
            return Err(record(RecordError::Invalid(format!(
                "it names volume {:?}",
                rec.name
            ))));
        }
        Ok(rec)
    }

    /// Every volume, by name.
    ///
    /// # Errors
    /// Routing errors; [`CatalogError::Record`] for a damaged record.
    pub async fn list(&self) -> Result<Vec<VolumeRecord>, CatalogError> {
        let end = layout::meta_range_end();
        let mut from = layout::META_PREFIX.to_vec();
        let mut out = Vec::new();
        loop {
            let page = self.router.range(&from, &end, RANGE_MAX_COUNT).await?;
            let Some((last, _)) = page.last() else {
                break;
            };
            from = last.to_vec();
            from.push(0);
            for (k, v) in &page {
                out.push(Self::decode(k, v)?);
            }
        }
        Ok(out)
    }

    /// The volume called `name`, if any.
    ///
    /// # Errors
    /// As [`Catalog::list`].
    pub async fn get(&self, name: &str) -> Result<Option<VolumeRecord>, CatalogError> {
        if !layout::valid_name(name) {
            return Ok(None);
        }
        let key = layout::meta_key(name);
        match self.router.get(&key).await? {
            None => Ok(None),
            Some(v) => Self::decode(&key, &v).map(Some),
        }
    }

    async fn put(&self, rec: &VolumeRecord) -> Result<(), CatalogError> {
        self.router
            .set(
                Bytes::from(layout::meta_key(&rec.name)),
                Bytes::from(rec.encode()),
            )
            .await?;
        Ok(())
    }

    /// Creates a volume (no block is written: it reads as zeroes). The record is written
    /// with `SET NX`, so of two `create`s of one name at the same instant one fails.
    ///
    /// # Errors
    /// [`CatalogError::Exists`], a bad name, size or block size; routing errors.
    pub async fn create(
        &self,
        name: &str,
        size: u64,
        block_size: u64,
    ) -> Result<VolumeRecord, CatalogError> {
        check_shape(name, size, block_size)?;
        if self.get(name).await?.is_some() {
            return Err(CatalogError::Exists(name.to_string()));
        }
        let rec = VolumeRecord {
            name: name.to_string(),
            size,
            block_size: u32::try_from(block_size).unwrap_or(layout::BLOCK_SIZE as u32),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            generation: random_generation(),
        };
        let stored = self
            .router
            .set_nx(
                Bytes::from(layout::meta_key(&rec.name)),
                Bytes::from(rec.encode()),
            )
            .await?;
        if !stored {
            return Err(CatalogError::Exists(name.to_string()));
        }
        Ok(rec)
    }

    /// The block keys of `rec` now on the drives, with their block numbers.
    ///
    /// # Errors
    /// Routing errors.
    pub async fn block_keys(&self, rec: &VolumeRecord) -> Result<Vec<(Bytes, u64)>, CatalogError> {
        let id = rec.key_id();
        let keys = self
            .router
            .scan_keys(&layout::block_key_pattern(&id))
            .await?;
        Ok(keys
            .into_iter()
            .filter_map(|k| layout::parse_any_block_key(&id, &k).map(|b| (k, b)))
            .collect())
    }

    /// Deletes the blocks of `rec` numbered `from` and above; scans again and fails when
    /// any is left. Returns how many keys were deleted.
    async fn delete_blocks_from(&self, rec: &VolumeRecord, from: u64) -> Result<u64, CatalogError> {
        let doomed: Vec<Bytes> = self
            .block_keys(rec)
            .await?
            .into_iter()
            .filter(|&(_, b)| b >= from)
            .map(|(k, _)| k)
            .collect();
        let mut deleted = 0;
        for batch in doomed.chunks(DELETE_BATCH) {
            deleted += self.router.del(batch).await?;
        }
        let left = self
            .block_keys(rec)
            .await?
            .into_iter()
            .filter(|&(_, b)| b >= from)
            .count();
        if left > 0 {
            return Err(CatalogError::Leftover {
                name: rec.name.clone(),
                left,
            });
        }
        Ok(deleted)
    }

    /// Changes a volume's size. Growing only rewrites the record (the new space reads as
    /// zeroes). Shrinking needs `allow_shrink`: the blocks past the new end are deleted and
    /// the bytes of the last block past it zeroed before the record changes. Returns the
    /// old record, the new one and the block keys deleted.
    ///
    /// # Errors
    /// [`CatalogError::NotFound`], [`CatalogError::Shrink`], a bad size, routing errors,
    /// [`CatalogError::Leftover`].
    pub async fn resize(
        &self,
        name: &str,
        size: u64,
        allow_shrink: bool,
    ) -> Result<(VolumeRecord, VolumeRecord, u64), CatalogError> {
        let old = self
            .get(name)
            .await?
            .ok_or_else(|| CatalogError::NotFound(name.to_string()))?;
        check_shape(name, size, u64::from(old.block_size))?;
        let mut deleted = 0;
        if size < old.size {
            if !allow_shrink {
                return Err(CatalogError::Shrink {
                    name: name.to_string(),
                    from: old.size,
                    to: size,
                });
            }
            let bs = u64::from(old.block_size);
            // The tail of the new last block reads as zeroes if the volume grows again.
            let tail_end = old.size.min(size.div_ceil(bs) * bs);
            if tail_end > size {
                let store = BlockStore::new(self.router.clone());
                store.zero(&old.volume(), size, tail_end - size).await?;
            }
            deleted = self.delete_blocks_from(&old, size.div_ceil(bs)).await?;
        }
        let new = VolumeRecord {
            size,
            ..old.clone()
        };
        self.put(&new).await?;
        Ok((old, new, deleted))
    }

    /// Block keys of stored volumes that no record names (left by a volume deleted while
    /// an adapter still wrote to it, or by an interrupted delete of a record already gone):
    /// each orphaned key id with its keys, by id.
    ///
    /// # Errors
    /// Routing errors; a damaged record ([`CatalogError::Record`]).
    pub async fn orphans(&self) -> Result<Vec<(String, Vec<Bytes>)>, CatalogError> {
        let live: std::collections::HashSet<String> = self
            .list()
            .await?
            .iter()
            .map(VolumeRecord::key_id)
            .collect();
        let keys = self.router.scan_keys(layout::STORED_BLOCK_PATTERN).await?;
        let mut out: std::collections::BTreeMap<String, Vec<Bytes>> = Default::default();
        for k in keys {
            if let Some(id) = layout::stored_id_of(&k) {
                if !live.contains(id) {
                    out.entry(id.to_string()).or_default().push(k.clone());
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Deletes every orphaned block key ([`Catalog::orphans`]); returns how many were
    /// deleted.
    ///
    /// # Errors
    /// As [`Catalog::orphans`]; [`CatalogError::Leftover`] when a scan afterwards still
    /// finds some.
    pub async fn delete_orphans(&self) -> Result<u64, CatalogError> {
        let keys: Vec<Bytes> = self
            .orphans()
            .await?
            .into_iter()
            .flat_map(|(_, k)| k)
            .collect();
        let mut deleted = 0;
        for batch in keys.chunks(DELETE_BATCH) {
            deleted += self.router.del(batch).await?;
        }
        let left: usize = self.orphans().await?.iter().map(|(_, k)| k.len()).sum();
        if left > 0 {
            return Err(CatalogError::Leftover {
                name: "(orphaned blocks)".into(),
                left,
            });
        }
        Ok(deleted)
    }

    /// Deletes a volume: every block key (found by scanning, deleted in batches, then
    /// checked gone), then the record. Returns the block keys deleted.
    ///
    /// # Errors
    /// [`CatalogError::NotFound`]; routing errors; [`CatalogError::Leftover`] (the record
    /// is kept: run it again).
    pub async fn delete(&self, name: &str) -> Result<u64, CatalogError> {
        let rec = self
            .get(name)
            .await?
            .ok_or_else(|| CatalogError::NotFound(name.to_string()))?;
        let deleted = self.delete_blocks_from(&rec, 0).await?;
        self.router
            .del(&[Bytes::from(layout::meta_key(name))])
            .await?;
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> VolumeRecord {
        VolumeRecord {
            name: "disk0".into(),
            size: 10 << 30,
            block_size: 8192,
            created: 1_764_088_000,
            generation: 0x9f3c_1d22_a07b_5e41,
        }
    }

    #[test]
    fn record_round_trip() {
        let r = rec();
        let bytes = r.encode();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.starts_with("lightstore-volume 1\nname disk0\n"),
            "{text}"
        );
        assert!(text.contains("generation 9f3c1d22a07b5e41\n"));
        assert_eq!(VolumeRecord::decode(&bytes), Ok(r.clone()));
        assert_eq!(r.key_id(), "disk0@9f3c1d22a07b5e41");
        let v = r.volume();
        assert_eq!((v.size, v.block_size), (10 << 30, 8192));
    }

    #[test]
    fn damaged_records_are_refused() {
        let good = rec().encode();
        // Any flipped byte before the checksum line is caught.
        for i in 0..good.len() - 16 {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            assert!(VolumeRecord::decode(&bad).is_err(), "byte {i}");
        }
        let text = String::from_utf8(good).unwrap();
        let v2 = text.replace("lightstore-volume 1", "lightstore-volume 2");
        assert_eq!(
            VolumeRecord::decode(v2.as_bytes()),
            Err(RecordError::Version(2))
        );
        assert_eq!(
            VolumeRecord::decode(b"hello"),
            Err(RecordError::Field("crc32c"))
        );
        assert_eq!(
            VolumeRecord::decode(&[0xff, 0xfe]),
            Err(RecordError::NotText)
        );
        // A well-checksummed record with a bad block size.
        let mut r = rec();
        r.block_size = 1000;
        assert!(matches!(
            VolumeRecord::decode(&r.encode()),
            Err(RecordError::Invalid(_))
        ));
    }

    #[test]
    fn shapes() {
        assert!(check_shape("a", 1, 8192).is_ok());
        assert!(check_shape("a", 1, 4096).is_ok());
        assert!(check_shape("a", 1, 65536).is_ok());
        assert!(matches!(
            check_shape("a", 1, 8000),
            Err(CatalogError::BadBlockSize(8000))
        ));
        assert!(matches!(
            check_shape("a", 1, 2048),
            Err(CatalogError::BadBlockSize(_))
        ));
        assert!(matches!(
            check_shape("a", 0, 8192),
            Err(CatalogError::BadSize { .. })
        ));
        assert!(matches!(
            check_shape("a:b", 1, 8192),
            Err(CatalogError::BadName(_))
        ));
        assert_ne!(random_generation(), random_generation());
    }
}
