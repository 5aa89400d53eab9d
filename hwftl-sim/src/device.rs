//! The append-only device interface: commands, completions, and the [`AppendDevice`] trait
//! the engine writes to. A real FPGA or ZNS backend would implement the same trait.

use std::sync::Arc;

use crate::buffer::PageBuf;
use crate::error::{DeviceError, Result};
use crate::geometry::{Geometry, Lba, SegmentId};
use crate::tables::SegmentState;

/// Default size of the tag pool (commands in flight at once).
pub const DEFAULT_QUEUE_DEPTH: u32 = 256;

/// A command for the device. Buffers are moved in and come back in the completion.
#[derive(Debug)]
pub enum Command {
    /// Read one page into `buf`.
    Read {
        /// Page to read.
        lba: Lba,
        /// Buffer to fill.
        buf: PageBuf,
    },
    /// Write one page at `lba`, which must be its segment's write pointer.
    Write {
        /// Page to write: the segment's write pointer.
        lba: Lba,
        /// Data.
        buf: PageBuf,
    },
    /// Write one page at the segment's write pointer, whatever it is; the completion says
    /// which LBA it got (ZNS zone-append style).
    Append {
        /// Segment to append to.
        segment: SegmentId,
        /// Data.
        buf: PageBuf,
    },
    /// Erase a segment and free its blocks; its pages read as unwritten afterwards.
    Trim {
        /// Segment to trim.
        segment: SegmentId,
    },
    /// Make every write completed before its submission durable (fdatasync on a file
    /// backend). Needed for durability on a device with a volatile write cache
    /// ([`crate::DeviceConfig::volatile_cache`] on the RAM backend).
    Flush,
}

/// What a completion is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    /// A read.
    Read,
    /// A write or append.
    Write,
    /// A TRIM.
    Trim,
    /// A flush.
    Flush,
}

/// Identifies a command in flight; unique among commands in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tag(pub u32);

/// A finished command.
#[derive(Debug)]
pub struct Completion {
    /// The tag `submit` returned.
    pub tag: Tag,
    /// What the command was.
    pub kind: CommandKind,
    /// The page read or written (for appends, the one assigned).
    pub lba: Option<Lba>,
    /// The segment it touched, if any.
    pub segment: Option<SegmentId>,
    /// Success, or the media error.
    pub result: Result<()>,
    /// The buffer handed in with the command (filled, for a successful read).
    pub buf: Option<PageBuf>,
    /// Service time: the model's (virtual) latency when a timing model runs in virtual
    /// release, otherwise wall-clock time from submission to delivery.
    pub latency_ns: u64,
}

impl Completion {
    /// The buffer on success, the error otherwise.
    ///
    /// # Errors
    /// The command's media error.
    pub fn into_buf(self) -> Result<Option<PageBuf>> {
        self.result.map(|()| self.buf)
    }
}

/// A command the device refused at submission; the buffer comes back to the caller.
#[derive(Debug)]
pub struct Rejected {
    /// Why.
    pub error: DeviceError,
    /// The command's buffer, if it had one.
    pub buf: Option<PageBuf>,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "command refused: {}", self.error)
    }
}

impl std::error::Error for Rejected {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<Rejected> for DeviceError {
    fn from(r: Rejected) -> Self {
        r.error
    }
}

/// How [`AppendDevice::reap`] waits when nothing is ready yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Return at once.
    NoWait,
    /// Sleep in the kernel until at least one completion (returns 0 if nothing is in flight).
    Block,
    /// Busy-poll until at least one completion (returns 0 if nothing is in flight).
    Spin,
}

/// State of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The segment.
    pub segment: SegmentId,
    /// Its lifecycle state.
    pub state: SegmentState,
    /// Next page offset to write (pages below it were written, bar power-cut holes).
    pub write_pointer: u32,
    /// Pages in the segment.
    pub pages: u32,
}

/// Counters and table summaries for INFO and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Pages read.
    pub reads: u64,
    /// Pages written.
    pub writes: u64,
    /// Segments trimmed.
    pub trims: u64,
    /// Flushes.
    pub flushes: u64,
    /// Blocks erased.
    pub erases: u64,
    /// Table persists (mapping and status tables written to the metadata area).
    pub table_writes: u64,
    /// Completions that carried an error.
    pub errors: u64,
    /// Logical segments.
    pub segments: u32,
    /// Segments with no blocks mapped.
    pub free_segments: u32,
    /// Segments open for appends.
    pub open_segments: u32,
    /// Full segments.
    pub full_segments: u32,
    /// Segments closed by a program failure.
    pub read_only_segments: u32,
    /// Fewest program/erase cycles of any good block.
    pub pe_min: u32,
    /// Most program/erase cycles of any good block.
    pub pe_max: u32,
    /// Retired blocks.
    pub bad_blocks: u32,
    /// Time on the device's clock (virtual, or wall since open), in nanoseconds.
    pub clock_ns: u64,
}

/// The append-only block device: READ any written page, WRITE only at a segment's write
/// pointer, TRIM whole segments; submission and completion queues with a fixed tag pool.
///
/// Any thread may submit. Completions are collected with [`AppendDevice::reap`], typically by
/// one poller thread; [`AppendDevice::execute`] runs one command synchronously without
/// stealing other commands' completions.
pub trait AppendDevice: Send + Sync {
    /// The device's shape.
    fn geometry(&self) -> Geometry;

    /// Queues a command and returns its tag.
    ///
    /// # Errors
    /// A [`Rejected`] with the reason (append-only rule, range, full queue, ...) and the
    /// buffer back; the device is unchanged.
    fn submit(&self, cmd: Command) -> std::result::Result<Tag, Rejected>;

    /// Queues several commands and hands them to the backend together (one doorbell), so
    /// adjacent pages can be merged on the way down. Returns one result per command, in order.
    fn submit_many(&self, cmds: Vec<Command>) -> Vec<std::result::Result<Tag, Rejected>>;

    /// Queues several commands as [`AppendDevice::submit_many`] does but leaves them with
    /// the device's submission queue: they reach the backend at the next
    /// [`AppendDevice::doorbell`] (or with the next submission or blocking reap of anyone).
    /// A caller that must queue under a lock (to keep its writes in write-pointer order) can
    /// then ring the doorbell, a system call, after releasing it.
    ///
    /// The default hands them over at once.
    fn queue_many(&self, cmds: Vec<Command>) -> Vec<std::result::Result<Tag, Rejected>> {
        self.submit_many(cmds)
    }

    /// Hands every queued command to the backend (one system call on the file backend).
    /// A failure is logged by the device and the commands stay queued for the next one.
    fn doorbell(&self) {}

    /// As [`AppendDevice::doorbell`] while the backend holds no command still running;
    /// otherwise leaves the queued commands to the next blocking reap, which hands them over
    /// before it waits for that running command (one system call for every command queued
    /// until then, where each caller's own doorbell would be one each). For a caller that
    /// does not wait for its commands, beside a poller that reaps: the commands go down at
    /// the next completion instead of at once. The default rings.
    fn doorbell_if_idle(&self) {
        self.doorbell();
    }

    /// Queues `cmds` and reaps as [`AppendDevice::reap`] does, handing the commands to the
    /// backend in the same system call as the wait (a poller's loop: one kernel entry per turn
    /// instead of two). Returns each command's submission result and the reap's.
    fn submit_and_reap(
        &self,
        cmds: Vec<Command>,
        out: &mut Vec<Completion>,
        max: usize,
        wait: Wait,
    ) -> (Vec<std::result::Result<Tag, Rejected>>, Result<usize>);

    /// Moves up to `max` completions into `out`, waiting as `wait` says. Returns how many.
    ///
    /// # Errors
    /// An I/O error from the backend's completion machinery (not a command's error, which is
    /// in its completion).
    fn reap(&self, out: &mut Vec<Completion>, max: usize, wait: Wait) -> Result<usize>;

    /// Submits one command and waits for its own completion.
    ///
    /// # Errors
    /// A [`Rejected`] when the command is refused at submission, or when the completion
    /// machinery fails.
    fn execute(&self, cmd: Command) -> std::result::Result<Completion, Rejected>;

    /// Runs several commands together (all in flight at once, as the queue allows) and
    /// waits for each one's own completion, without taking other commands' completions.
    /// Results come in command order.
    fn execute_many(&self, cmds: Vec<Command>) -> Vec<std::result::Result<Completion, Rejected>> {
        cmds.into_iter().map(|c| self.execute(c)).collect()
    }

    /// State and write pointer of a segment.
    ///
    /// # Errors
    /// `SegmentOutOfRange`, or `PoweredOff`.
    fn segment_info(&self, segment: SegmentId) -> Result<SegmentInfo>;

    /// Counters and table summaries.
    fn stats(&self) -> DeviceStats;

    /// Commands submitted and not yet delivered.
    fn in_flight(&self) -> usize;

    /// Command tags free now: how many commands a submission would take before one is
    /// refused with `QueueFull` (`None`: the device does not say). A hint: other threads
    /// may take tags the next moment.
    fn free_tags(&self) -> Option<usize> {
        None
    }

    /// A queue of page reads for one thread that must never wait: it submits reads and
    /// later reaps their completions itself, on a queue no other thread uses (as an NVMe
    /// driver gives each core its own queue pair). `None`: the device has none (the default;
    /// use [`AppendDevice::submit`] and a poller).
    fn read_ring(self: Arc<Self>) -> Option<Box<dyn ReadRing>> {
        None
    }
}

/// One thread's own queue of page reads ([`AppendDevice::read_ring`]). Each read takes a
/// command tag and is checked and counted like any command (a TRIM of its segment is
/// refused while it runs); only its completion comes back here instead of through
/// [`AppendDevice::reap`]. Dropping the queue waits (boundedly) for the reads still on the
/// device and finishes them.
pub trait ReadRing: Send {
    /// Starts page reads, all in one submission, without waiting. Only
    /// [`Command::Read`] is taken; any other command is refused with
    /// [`DeviceError::NotARead`]. Returns one result per command, in order.
    fn submit(&mut self, cmds: Vec<Command>) -> Vec<std::result::Result<Tag, Rejected>>;

    /// Moves the completions of finished reads to `out` and returns how many. Never waits.
    fn reap(&mut self, out: &mut Vec<Completion>) -> usize;

    /// A descriptor that turns readable when a read may have finished: for the owner's
    /// `epoll` (edge-triggered), so that it sleeps on its sockets and its reads at once.
    fn event_fd(&self) -> std::os::fd::RawFd;

    /// Reads submitted and not yet reaped.
    fn in_flight(&self) -> usize;

    /// Whether the queue failed for good (its kernel ring refused submissions): every read
    /// submitted from now on fails, so its owner should go back to [`AppendDevice::submit`]
    /// and a poller. The reads it holds still complete.
    fn broken(&self) -> bool;
}
