//! The device's error type: every way a command, a table or a backend can fail.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::geometry::{Lba, SegmentId};

/// Everything the append-only device can refuse or fail at.
///
/// Validation errors (`OutOfRange`, `NotAtWritePointer`, ...) are returned at submission and
/// leave the device unchanged. Media errors (`ProgramFailed`, `ReadFailed`, `EraseFailed`)
/// arrive in a completion; what they did to the device is said on each variant.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The logical block address is past the end of the device.
    #[error("LBA {lba} is out of range: the device has {capacity} logical blocks")]
    OutOfRange {
        /// The address asked for.
        lba: Lba,
        /// Number of logical blocks on the device.
        capacity: u64,
    },
    /// The segment number is past the end of the device.
    #[error("segment {segment} is out of range: the device has {segments} segments")]
    SegmentOutOfRange {
        /// The segment asked for.
        segment: SegmentId,
        /// Number of segments on the device.
        segments: u32,
    },
    /// A write that is not at its segment's write pointer (append-only rule).
    #[error(
        "write to LBA {lba} refused: segment {segment} is append-only and its write pointer is at \
         page {write_pointer}"
    )]
    NotAtWritePointer {
        /// The address the write asked for.
        lba: Lba,
        /// The segment holding it.
        segment: SegmentId,
        /// Page offset within the segment where the next write must go.
        write_pointer: u32,
    },
    /// The segment has no unwritten page left.
    #[error("segment {segment} is full; TRIM it before writing again")]
    SegmentFull {
        /// The full segment.
        segment: SegmentId,
    },
    /// A program failure closed this segment: its written pages stay readable, no more writes.
    #[error("segment {segment} is read-only after a program failure; move its data and TRIM it")]
    SegmentReadOnly {
        /// The read-only segment.
        segment: SegmentId,
    },
    /// TRIM of a segment that still has commands in flight.
    #[error("segment {segment} has {in_flight} commands in flight; TRIM refused")]
    SegmentBusy {
        /// The busy segment.
        segment: SegmentId,
        /// Commands in flight on it.
        in_flight: u32,
    },
    /// A read of a page that was never written, was trimmed, or was lost in a power cut.
    #[error(
        "LBA {lba} holds no data: it was never written, was trimmed, or was lost in a power cut"
    )]
    Unwritten {
        /// The address read.
        lba: Lba,
    },
    /// No free, good block is left on a chip to open a segment with.
    #[error(
        "chip {chip} has no free good block left to open segment {segment} (spares exhausted)"
    )]
    NoSpareBlocks {
        /// The chip that ran out.
        chip: u32,
        /// The segment that could not be opened.
        segment: SegmentId,
    },
    /// The flash program failed. The block is retired as bad and the segment became read-only.
    #[error(
        "program of LBA {lba} failed: block {block} of chip {chip} was retired as bad and \
         segment {segment} is now read-only"
    )]
    ProgramFailed {
        /// The address whose write failed (it holds no data).
        lba: Lba,
        /// Its segment.
        segment: SegmentId,
        /// Chip of the failed block.
        chip: u32,
        /// Physical block retired.
        block: u32,
    },
    /// The flash read failed (uncorrectable); the buffer holds no data.
    #[error("read of LBA {lba} failed (uncorrectable media error)")]
    ReadFailed {
        /// The address read.
        lba: Lba,
    },
    /// An erase failed. The block is retired as bad; the segment is nevertheless trimmed and
    /// free, and a spare block replaces the retired one when the segment is next opened.
    #[error(
        "erase of block {block} on chip {chip} failed while trimming segment {segment}: the block \
         was retired as bad; the segment is trimmed and free"
    )]
    EraseFailed {
        /// The trimmed segment.
        segment: SegmentId,
        /// Chip of the failed block.
        chip: u32,
        /// Physical block retired.
        block: u32,
    },
    /// Every tag of the submission queue is in flight.
    #[error("submission queue full: all {depth} tags are in flight; reap completions first")]
    QueueFull {
        /// Queue depth (size of the tag pool).
        depth: u32,
    },
    /// The device was power-cut; it accepts nothing until it is opened again.
    #[error("the device was powered off; open it again")]
    PoweredOff,
    /// A command other than READ was handed to a thread's read queue
    /// ([`crate::ReadRing`]).
    #[error("a thread's read queue takes READ commands only")]
    NotARead,
    /// The geometry in the configuration is not a usable one.
    #[error("invalid geometry: {0}")]
    InvalidGeometry(String),
    /// The device on the media was formatted with another geometry than the one asked for.
    #[error("device was formatted as {stored}, but {requested} was asked for")]
    GeometryMismatch {
        /// What the media's superblock says.
        stored: String,
        /// What the configuration asked for.
        requested: String,
    },
    /// A device file whose size does not match its geometry.
    #[error("device file {path} is {actual} bytes, expected {expected} for its geometry")]
    WrongSize {
        /// The file.
        path: PathBuf,
        /// Size the geometry needs.
        expected: u64,
        /// Size found.
        actual: u64,
    },
    /// The media holds no formatted device (no superblock).
    #[error("no LightStore device found on the media (bad superblock magic); format it first")]
    NotFormatted,
    /// The superblock or both copies of the mapping/status tables fail their checksum.
    #[error("device tables are corrupt: {0}")]
    TableCorrupt(String),
    /// Another open device (another process, or another open of the same file in this
    /// one) holds the device file's owner lock: one drive per device.
    #[error("device {path} is in use by another process ({holder}); stop it first")]
    InUse {
        /// The device file or block device.
        path: String,
        /// Who holds it, as far as `/proc/locks` tells (a pid), or "holder unknown".
        holder: String,
    },
    /// A write, append or trim on a device opened with [`crate::Ftl::open_read_only`]
    /// (an offline check): refused at submission, the device is unchanged.
    #[error("the device is open read-only: {command} refused")]
    ReadOnlyDevice {
        /// The command refused.
        command: &'static str,
    },
    /// An operating-system I/O error from the backend.
    #[error("{context}: {source}")]
    Io {
        /// What the backend was doing.
        context: String,
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
}

impl DeviceError {
    /// Wraps an OS error with what the backend was doing.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        DeviceError::Io {
            context: context.into(),
            source: Arc::new(source),
        }
    }
}

/// Result type of this crate.
pub type Result<T, E = DeviceError> = std::result::Result<T, E>;
