//! Volume I/O over the router: byte ranges of a volume to block keys and back.
//!
//! This module owns the data path of the block adapter: reads (`LS.RANGE` over the blocks
//! of an extent for runs of [`RANGE_MIN_BLOCKS`] or more, MGET otherwise; a block without a
//! key reads as zeroes), writes (whole blocks stored as they are, a partial block read,
//! patched and written back; a block that ends up all zero is deleted instead of stored),
//! and zeroing (TRIM and WRITE_ZEROES delete whole blocks and zero the covered part of a
//! partial one). Every write and zeroing holds a lock on each block it touches for its
//! whole read-modify-write, so overlapping requests in flight (on one connection or
//! several) never interleave inside a block; reads take no lock.
//!
//! Durability: a request is answered only after the router's write returned, i.e. after
//! the primary drive and every replica acknowledged; the drive acknowledges a write once it
//! is out of its device's volatile cache (`--durability sync`, the default) or held by a
//! power-protected cache (`--durability plp`). So every acknowledged write is already on
//! stable storage: FLUSH has nothing left to do and FUA needs nothing extra.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use super::layout::{self, EXTENT_BLOCKS};
use super::proto::{EIO, ENOSPC};
use super::Volume;
use crate::routing::{join_all, RouteError, Router};

/// Reads covering at least this many blocks (256 KiB) of one extent use `LS.RANGE`, one
/// ordered scan; shorter ones MGET. The drive serves MGET with pipelined device reads but
/// reads a range's values one after another on its engine thread, so below this size MGET
/// was measured faster (64 KiB reads: 155-174 MB/s with MGET against 112 with LS.RANGE).
pub const RANGE_MIN_BLOCKS: u64 = 32;

/// Blocks one write or zeroing sends at a time (32 MiB); longer TRIMs go in steps.
const BLOCKS_PER_STEP: u64 = 4096;

/// Why a volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The router could not complete the operation.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A stored block has the wrong length.
    #[error("block {block} of volume {volume} holds {len} bytes, not {block_size}")]
    Corrupt {
        /// The volume.
        volume: String,
        /// The block.
        block: u64,
        /// Its stored length.
        len: usize,
        /// The volume's block size.
        block_size: u32,
    },
    /// A range read returned a key that is not a block of the extent asked for.
    #[error("a range read of volume {volume} returned a foreign key {key:?}")]
    ForeignKey {
        /// The volume.
        volume: String,
        /// The key, lossily printed.
        key: String,
    },
    /// The request is outside the volume (callers validate first).
    #[error("bytes {offset}..+{len} are outside volume {volume} of {size} bytes")]
    OutOfRange {
        /// The volume.
        volume: String,
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The volume's size.
        size: u64,
    },
}

impl StoreError {
    /// The NBD error number to answer with: `ENOSPC` when a drive is full, `EIO` otherwise.
    #[must_use]
    pub fn errno(&self) -> u32 {
        let full = |e: &RouteError| match e {
            RouteError::Server { message, .. } => message.contains("drive is full"),
            _ => false,
        };
        match self {
            Self::Route(RouteError::WriteFailed { source, .. }) if full(source) => ENOSPC,
            Self::Route(e) if full(e) => ENOSPC,
            Self::OutOfRange { .. } => super::proto::EINVAL,
            _ => EIO,
        }
    }
}

/// A block of a volume: (volume key id, block number).
type BlockId = (Arc<str>, u64);

/// Per-block locks, created on demand and dropped when no request holds or awaits them.
#[derive(Debug, Default)]
struct BlockLocks {
    map: parking_lot::Mutex<HashMap<BlockId, Arc<AsyncMutex<()>>>>,
}

/// Locks held on a run of blocks; released (and unused entries removed) on drop.
struct BlockGuard<'a> {
    locks: &'a BlockLocks,
    keys: Vec<BlockId>,
    guards: Vec<OwnedMutexGuard<()>>,
}

impl Drop for BlockGuard<'_> {
    fn drop(&mut self) {
        self.guards.clear();
        let mut map = self.locks.map.lock();
        for k in &self.keys {
            if map.get(k).is_some_and(|m| Arc::strong_count(m) == 1) {
                map.remove(k);
            }
        }
    }
}

impl BlockLocks {
    /// Locks blocks `first..=last` of volume `vol`, in ascending order (every request locks
    /// one volume's blocks in that order, so two requests cannot deadlock).
    async fn lock(&self, vol: &Arc<str>, first: u64, last: u64) -> BlockGuard<'_> {
        let mut guard = BlockGuard {
            locks: self,
            keys: Vec::new(),
            guards: Vec::new(),
        };
        for b in first..=last {
            let m = self.map.lock().entry((vol.clone(), b)).or_default().clone();
            guard.keys.push((vol.clone(), b));
            guard.guards.push(m.lock_owned().await);
        }
        guard
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().len()
    }
}

/// Volume I/O over a [`Router`]; the volume is given with each call.
#[derive(Debug)]
pub struct BlockStore {
    router: Arc<Router>,
    locks: BlockLocks,
}

/// Where a block sits relative to a byte range.
fn block_span(bs: u64, block: u64) -> (u64, u64) {
    (block * bs, (block + 1) * bs)
}

/// Which blocks of a read were stored: `(first block, one flag per block)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The first block the read touched.
    pub first: u64,
    /// Whether each block from `first` on has a key (data) or not (a hole, reads as zeroes).
    pub present: Vec<bool>,
}

impl BlockStore {
    /// A store on the drives behind `router`.
    #[must_use]
    pub fn new(router: Arc<Router>) -> Self {
        Self {
            router,
            locks: BlockLocks::default(),
        }
    }

    /// The router the store uses.
    #[must_use]
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    fn volume<'v>(&self, v: &'v Volume, offset: u64, len: u64) -> Result<&'v Volume, StoreError> {
        match offset.checked_add(len) {
            Some(end) if end <= v.size => Ok(v),
            _ => Err(StoreError::OutOfRange {
                volume: v.name.clone(),
                offset,
                len,
                size: v.size,
            }),
        }
    }

    /// Reads `len` bytes at `offset` of volume `v`.
    ///
    /// # Errors
    /// [`StoreError::OutOfRange`] past the end; routing errors; a stored block of the
    /// wrong length ([`StoreError::Corrupt`]).
    pub async fn read(&self, v: &Volume, offset: u64, len: u32) -> Result<BytesMut, StoreError> {
        Ok(self.read_allocated(v, offset, len).await?.0)
    }

    /// Reads `len` bytes at `offset` of volume `v`, and which of the blocks it touched are
    /// stored (the rest are holes that read as zeroes).
    ///
    /// # Errors
    /// As [`BlockStore::read`].
    pub async fn read_allocated(
        &self,
        v: &Volume,
        offset: u64,
        len: u32,
    ) -> Result<(BytesMut, Allocation), StoreError> {
        let v = self.volume(v, offset, u64::from(len))?;
        let bs = u64::from(v.block_size);
        let mut out = BytesMut::zeroed(len as usize);
        if len == 0 {
            return Ok((
                out,
                Allocation {
                    first: offset / bs,
                    present: Vec::new(),
                },
            ));
        }
        let end = offset + u64::from(len);
        let first = offset / bs;
        let last = (end - 1) / bs;
        let mut present = vec![false; (last - first + 1) as usize];
        let mut segments = Vec::new();
        let mut s = first;
        while s <= last {
            let e = last.min((layout::extent_of(s) + 1) * EXTENT_BLOCKS - 1);
            segments.push((s, e));
            s = e + 1;
        }
        let reads = segments.iter().map(|&(s, e)| self.read_blocks(v, s, e));
        for blocks in join_all(reads.collect()).await {
            for (block, data) in blocks? {
                if data.len() != v.block_size as usize {
                    return Err(StoreError::Corrupt {
                        volume: v.name.clone(),
                        block,
                        len: data.len(),
                        block_size: v.block_size,
                    });
                }
                present[(block - first) as usize] = true;
                let (bs0, be) = block_span(bs, block);
                let (from, to) = (bs0.max(offset), be.min(end));
                if from < to {
                    out[(from - offset) as usize..(to - offset) as usize]
                        .copy_from_slice(&data[(from - bs0) as usize..(to - bs0) as usize]);
                }
            }
        }
        Ok((out, Allocation { first, present }))
    }

    /// Which blocks `first..=last` of `v` are stored: one pipelined single-key `EXISTS`
    /// per block, one round trip per drive (see [`Router::exists_each`]).
    ///
    /// # Errors
    /// Routing errors.
    pub async fn allocated(
        &self,
        v: &Volume,
        first: u64,
        last: u64,
    ) -> Result<Vec<bool>, StoreError> {
        let keys: Vec<Bytes> = (first..=last)
            .map(|b| Bytes::from(layout::block_key(&v.key_id, b)))
            .collect();
        Ok(self.router.exists_each(&keys).await?)
    }

    /// The stored blocks among `first..=last` (all in one extent), with their contents.
    async fn read_blocks(
        &self,
        v: &Volume,
        first: u64,
        last: u64,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        let n = last - first + 1;
        if n >= RANGE_MIN_BLOCKS {
            // At most 256 blocks: far below what one LS.RANGE reply may carry, so one
            // reply holds every stored block of the run (a drive cuts a reply short only
            // past many MiB; see `Router::range`).
            let extent = layout::extent_of(first);
            let pairs = self
                .router
                .range(
                    &layout::block_key(&v.key_id, first),
                    &layout::range_end_key(&v.key_id, last),
                    u32::try_from(n).unwrap_or(u32::MAX),
                )
                .await?;
            pairs
                .into_iter()
                .map(
                    |(k, data)| match layout::parse_block_key(&v.key_id, extent, &k) {
                        Some(b) if (first..=last).contains(&b) => Ok((b, data)),
                        _ => Err(StoreError::ForeignKey {
                            volume: v.name.clone(),
                            key: String::from_utf8_lossy(&k).into_owned(),
                        }),
                    },
                )
                .collect()
        } else {
            let keys: Vec<Bytes> = (first..=last)
                .map(|b| Bytes::from(layout::block_key(&v.key_id, b)))
                .collect();
            let values = self.router.mget(&keys).await?;
            Ok((first..=last)
                .zip(values)
                .filter_map(|(b, v)| v.map(|d| (b, d)))
                .collect())
        }
    }

    /// Writes `data` at `offset` of volume `v`; answers once every drive holding the
    /// blocks acknowledged.
    ///
    /// # Errors
    /// As [`BlockStore::read`]; a write refused or not acknowledged by a drive.
    pub async fn write(&self, v: &Volume, offset: u64, data: Bytes) -> Result<(), StoreError> {
        self.volume(v, offset, data.len() as u64)?;
        self.apply(v, offset, data.len() as u64, Some(data)).await
    }

    /// Zeroes `len` bytes at `offset` (TRIM and WRITE_ZEROES): whole blocks are deleted,
    /// partial ones zeroed in place.
    ///
    /// # Errors
    /// As [`BlockStore::write`].
    pub async fn zero(&self, v: &Volume, offset: u64, len: u64) -> Result<(), StoreError> {
        self.volume(v, offset, len)?;
        self.apply(v, offset, len, None).await
    }

    /// Writes `data` (or zeroes) over `[offset, offset + len)` in steps of at most
    /// [`BLOCKS_PER_STEP`] blocks.
    async fn apply(
        &self,
        v: &Volume,
        offset: u64,
        len: u64,
        data: Option<Bytes>,
    ) -> Result<(), StoreError> {
        let v = self.volume(v, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let bs = u64::from(v.block_size);
        let lock_id: Arc<str> = Arc::from(v.key_id.as_str());
        let end = offset + len;
        let mut step_start = offset;
        while step_start < end {
            let first = step_start / bs;
            let step_end = end.min((first + BLOCKS_PER_STEP) * bs);
            let last = (step_end - 1) / bs;
            let _locks = self.locks.lock(&lock_id, first, last).await;
            // Blocks only partly covered keep the rest of their bytes: read them first.
            let partial: Vec<u64> = [first, last]
                .into_iter()
                .filter(|&b| {
                    let (b0, be) = block_span(bs, b);
                    step_start > b0 || step_end < be
                })
                .collect::<std::collections::BTreeSet<u64>>()
                .into_iter()
                .collect();
            let old: HashMap<u64, Bytes> = if partial.is_empty() {
                HashMap::new()
            } else {
                let keys: Vec<Bytes> = partial
                    .iter()
                    .map(|&b| Bytes::from(layout::block_key(&v.key_id, b)))
                    .collect();
                let values = self.router.mget(&keys).await?;
                let mut old = HashMap::new();
                for (&b, value) in partial.iter().zip(values) {
                    if let Some(value) = value {
                        if value.len() != v.block_size as usize {
                            return Err(StoreError::Corrupt {
                                volume: v.name.clone(),
                                block: b,
                                len: value.len(),
                                block_size: v.block_size,
                            });
                        }
                        old.insert(b, value);
                    }
                }
                old
            };
            let mut puts = Vec::new();
            // Blocks to delete, by extent; `true` when the key is known to exist.
            let mut dels: BTreeMap<u64, Vec<(Bytes, bool)>> = BTreeMap::new();
            for b in first..=last {
                let key = Bytes::from(layout::block_key(&v.key_id, b));
                let (b0, be) = block_span(bs, b);
                let (from, to) = (b0.max(step_start), be.min(step_end));
                let slice = |d: &Bytes| d.slice((from - offset) as usize..(to - offset) as usize);
                let whole = from == b0 && to == be;
                let content: Option<Bytes> = if whole {
                    data.as_ref().map(slice)
                } else {
                    let mut block = match old.get(&b) {
                        Some(o) => BytesMut::from(&o[..]),
                        None => BytesMut::zeroed(v.block_size as usize),
                    };
                    let range = (from - b0) as usize..(to - b0) as usize;
                    match &data {
                        Some(d) => block[range].copy_from_slice(&slice(d)),
                        None => block[range].fill(0),
                    }
                    Some(block.freeze())
                };
                match content {
                    Some(c) if c.iter().any(|&x| x != 0) => puts.push((key, c)),
                    // A partial block read as absent stays absent.
                    _ if !whole && !old.contains_key(&b) => {}
                    _ => dels
                        .entry(layout::extent_of(b))
                        .or_default()
                        .push((key, !whole)),
                }
            }
            let dels = self.existing(dels).await?;
            self.router.write(&puts, &dels).await?;
            step_start = step_end;
        }
        Ok(())
    }

    /// The keys among `dels` worth deleting: a DEL costs the drive a write group even for
    /// keys it does not have, while EXISTS is answered from DRAM, so each extent's keys are
    /// first counted and extents without any are skipped (the caller holds the blocks'
    /// locks, so none can appear meanwhile).
    async fn existing(
        &self,
        dels: BTreeMap<u64, Vec<(Bytes, bool)>>,
    ) -> Result<Vec<Bytes>, StoreError> {
        let groups: Vec<Vec<(Bytes, bool)>> = dels.into_values().collect();
        let checks = groups.iter().map(|g| async move {
            if g.iter().any(|(_, known)| *known) {
                return Ok(true);
            }
            let keys: Vec<Bytes> = g.iter().map(|(k, _)| k.clone()).collect();
            Ok::<_, RouteError>(self.router.exists(&keys).await? > 0)
        });
        let mut out = Vec::new();
        for (group, any) in groups.iter().zip(join_all(checks.collect()).await) {
            if any? {
                out.extend(group.iter().map(|(k, _)| k.clone()));
            }
        }
        Ok(out)
    }

    /// Block locks currently held or awaited (0 when idle).
    #[cfg(test)]
    fn locks_in_use(&self) -> usize {
        self.locks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn locks_serialize_and_clean_up() {
        let locks = Arc::new(BlockLocks::default());
        let (v0, v1): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let g = locks.lock(&v0, 10, 12).await;
        assert_eq!(locks.len(), 3);
        let l2 = locks.clone();
        let w0 = v0.clone();
        let waiter = tokio::spawn(async move {
            let _g = l2.lock(&w0, 12, 13).await;
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        // Other blocks and other volumes are free.
        drop(locks.lock(&v1, 12, 12).await);
        drop(locks.lock(&v0, 14, 20).await);
        drop(g);
        waiter.await.unwrap();
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn cancelled_waiter_leaves_no_lock() {
        let locks = BlockLocks::default();
        let v: Arc<str> = Arc::from("v");
        let g = locks.lock(&v, 1, 1).await;
        let r = tokio::time::timeout(Duration::from_millis(20), locks.lock(&v, 0, 1)).await;
        assert!(r.is_err());
        drop(g);
        assert_eq!(locks.len(), 0);
    }

    #[test]
    fn full_drive_is_enospc() {
        let addr = "127.0.0.1:1".parse().unwrap();
        let full = RouteError::Server {
            addr,
            command: "MSET".into(),
            message: "ERR the drive is full: 1 bytes are live".into(),
        };
        let e = StoreError::Route(RouteError::WriteFailed {
            slot: 0,
            addr,
            replica: false,
            source: Box::new(full),
        });
        assert_eq!(e.errno(), ENOSPC);
        let down = StoreError::Route(RouteError::Timeout {
            addr,
            timeout: Duration::from_secs(1),
        });
        assert_eq!(down.errno(), EIO);
    }

    #[tokio::test]
    async fn bounds_are_checked_before_any_io() {
        // The router points nowhere: an out-of-range request must fail without touching it.
        let router =
            Arc::new(Router::single("127.0.0.1:1".parse().unwrap(), Default::default()).unwrap());
        let store = BlockStore::new(router);
        let v = Volume::new("v", 10_000);
        assert!(matches!(
            store.read(&v, 9_999, 2).await,
            Err(StoreError::OutOfRange { .. })
        ));
        assert!(matches!(
            store.write(&v, u64::MAX, Bytes::from_static(b"xx")).await,
            Err(StoreError::OutOfRange { .. })
        ));
        assert!(matches!(
            store.zero(&v, 10_000, 1).await,
            Err(StoreError::OutOfRange { .. })
        ));
        assert_eq!(store.read(&v, 10_000, 0).await.unwrap().len(), 0);
        assert_eq!(store.locks_in_use(), 0);
    }
}
