//! # hwftl-sim — LightStore's append-only flash translation layer
//!
//! The device the LightStore engine writes to, modelled on the paper's hardware FTL (section
//! 4.1, after AMF): an array of append-only 8 KiB logical blocks grouped in segments, with
//!
//! - READ of any written page, WRITE only at a segment's write pointer (or APPEND, which
//!   returns the address it got), TRIM of a whole segment, and FLUSH;
//! - submission and completion queues with a fixed tag pool, completions reaped by a poller
//!   that blocks or spins ([`AppendDevice`]);
//! - a block mapping table and a block status table (free/used/bad, P/E count), persisted
//!   with a crc32c in two alternating slots on the device itself ([`Ftl`]);
//! - bad-block retirement on program/erase failure and least-worn-first allocation;
//! - a NAND timing model in virtual time, with the `paper-card` preset ([`TimingModel`]);
//! - RAM and file/block-device (io_uring, O_DIRECT) backends ([`Backend`]);
//! - fault injection: failed read/program/erase, corrupt page, power cut, optionally with a
//!   volatile write cache ([`DeviceConfig::volatile_cache`]).
//!
//! ## Power cuts and durability
//!
//! [`Ftl::power_cut`] loses every command whose completion was not yet delivered. By default
//! a delivered write is durable, like a device whose write cache survives power loss. With
//! [`DeviceConfig::volatile_cache`] (RAM backend) a delivered page program is durable only
//! once a [`Command::Flush`] submitted after its delivery has been delivered, as on a disk
//! with a write-back cache (the file backend on such a disk behaves so for real): the cut
//! also loses every uncovered program. TRIM and the FTL's own tables are durable when they
//! complete either way. A lost program is undone: after [`Ftl::open`] its page reads as
//! [`DeviceError::Unwritten`] (a hole below the recovered write pointer) or lies above the
//! write pointer, exactly as if it had never been written.
//!
//! ```
//! use hwftl_sim::{AppendDevice, Backend, Command, DeviceConfig, Ftl, Geometry, PageBuf, RamStore, SegmentId};
//! # fn main() -> Result<(), hwftl_sim::DeviceError> {
//! let geometry = Geometry { channels: 2, ways: 2, blocks_per_chip: 8, pages_per_block: 4, spare_blocks_per_chip: 1 };
//! let dev = Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(geometry))?;
//! let done = dev.execute(Command::Append { segment: SegmentId(0), buf: PageBuf::from_slice(b"hello") })?;
//! let lba = done.lba.expect("appends report their address");
//! let page = dev.execute(Command::Read { lba, buf: PageBuf::zeroed() })?.into_buf()?.expect("a read returns its buffer");
//! assert_eq!(&page[..5], b"hello");
//! # Ok(()) }
//! ```

mod buffer;
mod device;
mod error;
mod faults;
mod ftl;
mod geometry;
pub mod loadgen;
mod media;
mod scramble;
mod tables;
mod timing;

pub use buffer::{pool_stats, PageBuf, BUFFER_ALIGN, POOL_PAGES};
pub use device::{
    AppendDevice, Command, CommandKind, Completion, DeviceStats, ReadRing, Rejected, SegmentInfo,
    Tag, Wait, DEFAULT_QUEUE_DEPTH,
};
pub use error::{DeviceError, Result};
pub use faults::{FaultInjector, FaultTarget};
pub use ftl::{Backend, DeviceConfig, Ftl};
pub use geometry::{Geometry, Lba, SegmentId, PAGE_SIZE};
pub use media::{RamStore, IOWQ_MAX_BOUNDED_WORKERS};
pub use tables::{BlockState, SegmentState};
pub use timing::{NandTiming, Release, TimingModel};
