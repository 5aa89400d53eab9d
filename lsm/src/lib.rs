//! # lsm — the LightStore engine
//!
//! A key-value store over the append-only device of `hwftl-sim`, after LightStore
//! (ASPLOS'19, section 4.2.2) and WiscKey:
//!
//! - **Key-value separation**: values are appended to a value log of self-describing
//!   records ([`vlog_format`]); small values are packed many to a page, large ones take whole
//!   pages so an 8 KiB value costs one page read.
//! - **Keytables** ([`keytable`]): sorted runs of key -> value pointer, persisted as 8 KiB
//!   pages and fully cached in DRAM with a bloom filter per run.
//! - **Metadata-only compaction** ([`merge`]): runs are merged, values never move; every
//!   compaction reports the values it made garbage, counted per log segment.
//! - **Durability**: a write batch returns once its pages are on the device; recovery
//!   replays complete batches after the last flush ([`Engine::open`]); the
//!   [`manifest`] records the durable state.
//! - **Value cache** ([`cache`]): verified value-log pages in DRAM under S3-FIFO, keyed by
//!   their log address, which never names two different pages.
//!
//! ```
//! use std::sync::Arc;
//! use hwftl_sim::{Backend, DeviceConfig, Ftl, Geometry, RamStore};
//! use lsm::{Engine, EngineConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = Geometry { channels: 2, ways: 2, blocks_per_chip: 16, pages_per_block: 8, spare_blocks_per_chip: 1 };
//! let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g))?);
//! let db = Engine::open(dev, EngineConfig::default())?;
//! db.put(b"hello", b"world")?;
//! assert_eq!(db.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! # Ok(()) }
//! ```

pub mod cache;
mod config;
mod engine;
mod epoch;
mod error;
pub mod expiry;
pub mod gc;
mod io;
pub mod keytable;
pub mod manifest;
mod memtable;
pub mod merge;
mod read;
pub mod vlog_format;

pub use cache::ValueCacheStats;
pub use config::{
    EngineConfig, DEFAULT_CHEAP_FLUSH, DEFAULT_COMPACTION_DEBT_STOP_BYTES, DEFAULT_ENTRY_VALUE_MAX,
    DEFAULT_GC_WINDOW_PAGES, DEFAULT_KEYTABLE_BYTES, DEFAULT_L0_RUNS, DEFAULT_L0_STOP_RUNS,
    DEFAULT_L1_BYTES, DEFAULT_LEVEL_RATIO, DEFAULT_MAX_FROZEN_MEMTABLES, DEFAULT_MAX_KEY,
    DEFAULT_MAX_VALUE, DEFAULT_MEMTABLE_BYTES, DEFAULT_OPEN_PAGE_LINGER,
    DEFAULT_OVERPROVISION_PERCENT,
};
pub use engine::{
    Doorbell, Engine, EngineStats, Finding, FindingKind, FsckReport, GetNow, KeyFilter, LevelStats,
    LookupNow, PendingLookup, PendingWrite, RangeBounds, RangeRead, ReadWindowFull, ReservedRead,
    ThreadReads, WriteOp,
};
pub use error::{EngineError, Result};
pub use expiry::{Deadline, DropExpired, ExpiryPolicy};
pub use gc::{GcCandidate, GcPolicy, LeastLive, Oldest};
pub use io::POLLER_IDLE_PARK;
pub use read::{Lookup, OnLookup, OnProbedValues, OnRange, OnValues, Probes, ASYNC_READ_WINDOW};
