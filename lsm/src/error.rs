//! The engine's error type.

use hwftl_sim::DeviceError;

/// Everything the engine can refuse or fail at. `Clone`: the batches of one write group
/// share their outcome (see `engine::write::group`).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Keys must have at least one byte.
    #[error("empty key")]
    EmptyKey,
    /// The key is longer than the configured maximum.
    #[error("key of {len} bytes is longer than the maximum of {max} bytes")]
    KeyTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The value is longer than the configured maximum.
    #[error("value of {len} bytes is longer than the maximum of {max} bytes")]
    ValueTooLarge {
        /// Its length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// No free segment is left for values or keytables; reads and deletes still work.
    #[error("the drive is full: no free segment left for {purpose}")]
    DeviceFull {
        /// What needed the space.
        purpose: &'static str,
    },
    /// Live values fill the drive's user capacity (the value space less its
    /// over-provisioned share); deletes make room.
    #[error(
        "the drive is full: {live} bytes are live of a user capacity of {capacity} bytes \
         (delete keys to make room)"
    )]
    CapacityFull {
        /// Live value-log bytes, the batch included.
        live: u64,
        /// The user capacity.
        capacity: u64,
    },
    /// Stored data failed its checksum: reported, never returned as data.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The engine's metadata on the device cannot be used.
    #[error("cannot open the store: {0}")]
    Unrecoverable(String),
    /// A device command failed.
    #[error("device error: {0}")]
    Device(#[from] DeviceError),
    /// A write batch failed on the device before it was whole there (a page of it was
    /// refused or failed to program): it is not applied, not visible, and never will be
    /// (recovery only applies batches whose every page is on the device). Safe to retry.
    #[error("write not applied (a page of the batch failed on the device: {0}); safe to retry")]
    WriteNotApplied(DeviceError),
    /// A write batch's outcome is unknown: its pages reached the device, but the flush that
    /// was to make them durable failed (with a volatile write cache the pages may or may not
    /// survive a power cut), or an earlier batch failed while this one was on the device. It
    /// was not applied and is not visible now, but a restart before the engine moves its
    /// replay checkpoint past it (the next write or flush does) may find it whole and apply
    /// it. Read the keys back before retrying a write that is not idempotent.
    #[error(
        "write outcome unknown ({reason}): it is not visible now, but it may or may not be \
         durable and may reappear after a restart; read the keys back before retrying"
    )]
    OutcomeUnknown {
        /// What failed.
        reason: String,
    },
    /// The value log is damaged where a cut could not have torn it: acknowledged writes
    /// follow the damaged page, so recovery refused to end the log there and trimmed
    /// nothing. Open with [`crate::EngineConfig::read_only_recovery`] to copy the data off.
    #[error(
        "the value log is damaged at log segment {log_seg} (device segment {segment}, page \
         {page}): {reason}; nothing was trimmed: open the store read-only to copy its data off"
    )]
    LogDamaged {
        /// The log segment.
        log_seg: u32,
        /// The device segment holding it.
        segment: u32,
        /// The page within the segment.
        page: u32,
        /// What is wrong, and why it is not a torn last write.
        reason: String,
    },
    /// Garbage collection found a page of its victim that cannot be read or fails its
    /// checksum: the step failed, the victim stays in place (not reclaimed) and is not
    /// picked again (see `EngineStats::gc_steps_refused`).
    #[error(
        "garbage collection refused log segment {log_seg} (device segment {segment}): page \
         {page}: {reason}"
    )]
    GcRefused {
        /// The victim's log segment.
        log_seg: u32,
        /// The device segment holding it.
        segment: u32,
        /// The page within the segment.
        page: u32,
        /// What is wrong.
        reason: String,
    },
    /// The store was opened read-only ([`crate::EngineConfig::read_only_recovery`]).
    #[error("the store is open read-only (recovery mode): writes are refused")]
    ReadOnly,
    /// A value-log page of a write acknowledged from DRAM
    /// ([`crate::EngineConfig::ack_from_dram`]) failed on the device after its
    /// acknowledgement: that write may be lost, and the engine refuses writes from then on
    /// (reads go on). Restart it: recovery keeps what the device holds.
    #[error(
        "writes stopped: an acknowledged write's page failed on the device ({reason}); it is \
         lost: restart the drive (recovery keeps the log up to the failed page)"
    )]
    AcknowledgedWriteLost {
        /// The device's error.
        reason: String,
    },
    /// The engine was closed or hit a fatal device error; open it again.
    #[error("the engine is closed")]
    Closed,

    /// The write waited for background maintenance (a flush, compaction or garbage
    /// collection) that failed; nothing of the write was applied.
    #[error("write not applied: background maintenance failed: {0}")]
    MaintenanceFailed(#[source] std::sync::Arc<EngineError>),
}

impl From<hwftl_sim::Rejected> for EngineError {
    fn from(r: hwftl_sim::Rejected) -> Self {
        EngineError::Device(r.error)
    }
}

/// Result type of the engine.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

impl EngineError {
    /// The error underneath: for `MaintenanceFailed`, the maintenance task's error (itself
    /// unwrapped); otherwise `self`.
    pub fn root(&self) -> &EngineError {
        match self {
            EngineError::MaintenanceFailed(e) => e.root(),
            e => e,
        }
    }
}
