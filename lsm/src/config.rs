//! Engine configuration with defaults sensible for a laptop-sized drive.

use std::sync::Arc;

use crate::expiry::{DropExpired, ExpiryPolicy};
use crate::gc::{GcPolicy, LeastLive};

/// Default maximum key length (bytes): 64 KiB, plus 64 bytes of room for a caller's own
/// framing (the drive prefixes a type tag). Keys over 4 KiB are written with their own raw
/// pages in the value log and span keytable pages (see `vlog_format` and `keytable`).
pub const DEFAULT_MAX_KEY: usize = (64 << 10) + 64;
/// Default maximum value length (bytes), further bounded by one segment (see
/// [`EngineConfig::max_value`]).
pub const DEFAULT_MAX_VALUE: u64 = 512 << 20;
/// Default [`EngineConfig::cheap_flush`]: 50 us. A device without a volatile write cache
/// answers a flush at once, and a round trip through the poller then costs more than the
/// flush: the in-process 100-byte durable S-SET on the paper-card preset ran at 0.80-0.93x
/// with every flush started by the completions (`benches/results/durable-flush-chain-2026-12-01`).
/// An fdatasync on an SSD or a virtual disk takes hundreds of microseconds.
pub const DEFAULT_CHEAP_FLUSH: std::time::Duration = std::time::Duration::from_micros(50);

/// Default [`EngineConfig::open_page_linger`]: 5 ms, a little above the drive's network
/// thread's doorbell bound (4 ms), so that thread's ring seals the page and the maintenance
/// thread's wake is the fallback (why: decisions/0039 in the repository's docs).
pub const DEFAULT_OPEN_PAGE_LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// Default [`EngineConfig::entry_value_max`]: values up to this many bytes are held in
/// their keytable entries (as BlobDB's `min_blob_size`).
pub const DEFAULT_ENTRY_VALUE_MAX: usize = 64;
/// Default memtable size before it is flushed to a keytable run (bytes of keys + pointers).
pub const DEFAULT_MEMTABLE_BYTES: usize = 32 << 20;
/// Default [`EngineConfig::max_frozen_memtables`]: two memtables may wait for their flush
/// while writers fill a third (RocksDB's `max_write_buffer_number` of 3), so a flush queued
/// behind a long compaction does not stop writes at once.
pub const DEFAULT_MAX_FROZEN_MEMTABLES: usize = 2;
/// Default number of L0 runs that triggers a compaction into L1.
pub const DEFAULT_L0_RUNS: usize = 4;
/// Default size ratio between adjacent levels.
pub const DEFAULT_LEVEL_RATIO: usize = 10;
/// Default target size of L1 (keytable bytes).
pub const DEFAULT_L1_BYTES: usize = 64 << 20;
/// Default size of a keytable run a compaction writes into L1 and below (keytable bytes:
/// keys and value pointers). Levels are partitioned into runs of about this size, so a
/// compaction rewrites a few MiB, never a whole level.
pub const DEFAULT_KEYTABLE_BYTES: usize = 4 << 20;

/// Default share of the value space (percent) kept back from clients as over-provisioning,
/// as an SSD keeps spare flash: garbage collection always finds garbage to reclaim, which
/// bounds write amplification when the drive is nearly full (see [`EngineConfig::overprovision_percent`]).
pub const DEFAULT_OVERPROVISION_PERCENT: u8 = 20;

/// Default L0 runs at which client writes stop until a compaction takes L0 down (RocksDB's
/// `level0_stop_writes_trigger`): three times the compaction trigger.
pub const DEFAULT_L0_STOP_RUNS: usize = 3 * DEFAULT_L0_RUNS;

/// Default keytable bytes of compaction debt at which client writes stop until compaction
/// catches up (RocksDB's `hard_pending_compaction_bytes_limit`): four times L1's target.
pub const DEFAULT_COMPACTION_DEBT_STOP_BYTES: u64 = 4 * DEFAULT_L1_BYTES as u64;

/// Default value-log pages garbage collection handles per step (see
/// [`EngineConfig::gc_window_pages`]).
pub const DEFAULT_GC_WINDOW_PAGES: u32 = 128;

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Chooses the value-log segment to reclaim when free segments run low.
    pub gc_policy: Arc<dyn GcPolicy>,
    /// Longest key accepted.
    pub max_key: usize,
    /// Longest value accepted (also bounded by what one segment holds).
    pub max_value: u64,
    /// Memtable budget before a flush.
    pub memtable_bytes: usize,
    /// Full memtables that may wait for their flush (at least 1): a writer that finds the
    /// active memtable full rotates it out while fewer wait, and waits (a memtable write
    /// stall) otherwise. The maintenance thread flushes them oldest first, one at a time,
    /// so while a compaction runs writers go on into the next memtable. The memtables' DRAM
    /// is at most `(1 + max_frozen_memtables) * memtable_bytes`, and recovery replays at
    /// most that many generations of the log. Default [`DEFAULT_MAX_FROZEN_MEMTABLES`].
    pub max_frozen_memtables: usize,
    /// L0 runs that trigger a compaction.
    pub l0_runs: usize,
    /// L0 runs at which client writes wait for a compaction (a write stall, counted in
    /// `WriteStalls::l0_runs`).
    pub l0_stop_runs: usize,
    /// Compaction debt (keytable bytes over the levels' targets, see
    /// `EngineStats::compaction_debt_bytes`) at which client writes wait for compaction (a
    /// write stall, counted in `WriteStalls::compaction_debt`).
    pub compaction_debt_stop_bytes: u64,
    /// Size ratio between levels.
    pub level_ratio: usize,
    /// Target size of L1.
    pub l1_bytes: usize,
    /// Size at which a compaction closes an output run and starts the next: levels below
    /// L0 are partitioned into runs of about this size (see `engine::levels`).
    pub keytable_bytes: usize,
    /// Bloom filter false-positive rate per run.
    pub bloom_fp_rate: f64,
    /// Empty the device's write cache (`FLUSH`, fdatasync on files) before a client batch is
    /// acknowledged. `false` is for a device whose write cache survives power loss
    /// (capacitors: the paper's PLP card): a batch is then acknowledged when the device
    /// completes its pages. Manifest writes are flushed either way.
    pub flush_writes: bool,
    /// Acknowledge a pipelined client batch as soon as it is laid out and in the memtable,
    /// before its pages reach the device: the paper's mode for a drive whose DRAM is
    /// power-protected (capacitors), where the write buffer itself is the durability point.
    /// Until a page lands, reads are served from the engine's copy of it (the landing
    /// buffer, bounded by the write pipeline); [`crate::Engine::sync`] lands every
    /// acknowledged write and flushes the device (what the drive's power-fail handler
    /// runs). A process crash (not a power cut) can lose what had not landed; a page that
    /// fails on the device after it was acknowledged stops writes
    /// ([`crate::EngineError::AcknowledgedWriteLost`]). Implies no flush per batch:
    /// `flush_writes` then applies only to batches written synchronously (large or
    /// spanning ones, which are acknowledged when durable). Default `false`.
    pub ack_from_dram: bool,
    /// With [`EngineConfig::ack_from_dram`]: longest the maintenance thread leaves a shared
    /// open page unsealed while it is idle (small batches add their records to the page the
    /// batch before them left open, see the engine's `open_page`; a member's doorbell, a
    /// batch that does not fit, and any wait for the pipeline seal it sooner). A longer
    /// linger lets more batches share a page and widens what a process crash loses. Default
    /// [`DEFAULT_OPEN_PAGE_LINGER`].
    pub open_page_linger: std::time::Duration,
    /// With [`EngineConfig::flush_writes`]: device flushes that took less than this on
    /// average recently are run by the writers once their pages are in; slower ones are
    /// started by the pages' completion on the engine's poller thread, and the writer sleeps
    /// once (see docs/decisions/0038). `Duration::ZERO`: always by the completion. Default
    /// [`DEFAULT_CHEAP_FLUSH`].
    pub cheap_flush: std::time::Duration,
    /// Percent of the device's value space clients cannot fill (0..=90): puts are refused
    /// with `CapacityFull` once live values would pass the rest, the *user capacity*.
    /// Uniform random overwrites at 80% of the user capacity then run with write
    /// amplification near 2 (greedy garbage collection); at 0 they approach 4-5 at 80%
    /// of the raw space.
    pub overprovision_percent: u8,
    /// Value-log pages garbage collection reads and relocates per step; the engine lock is
    /// free for readers between steps, so this bounds how long a read can wait behind GC
    /// (a raw value longer than the window is handled in one step).
    pub gc_window_pages: u32,
    /// The ablation of metadata-only compaction, for benchmarks: compaction reads the values
    /// of the entries it keeps and writes them again, as an LSM without key-value separation
    /// does (`false`, the default: compaction moves keytable entries only).
    pub compaction_moves_values: bool,
    /// The ablation of keytable caching, for benchmarks: a lookup reads the keytable page
    /// that may hold the key from the device (after the bloom filter, with a sparse page
    /// index in DRAM) instead of searching the cached keytable (`false`, the default).
    pub uncached_keytables: bool,
    /// Open the store read-only, for copying data off a damaged device: recovery skips a
    /// damaged write batch (see [`crate::EngineError::LogDamaged`]) and replays the batches
    /// after it, nothing on the device is written or trimmed, no maintenance runs, and
    /// writes, flushes and compactions fail with [`crate::EngineError::ReadOnly`].
    pub read_only_recovery: bool,
    /// DRAM for the value cache ([`crate::cache`]): verified value-log pages that client
    /// reads find there instead of on the device. 0 turns it off (the default: the engine
    /// alone does not know the host's DRAM budget; the drive sets it).
    pub value_cache_bytes: u64,
    /// Which expired entries compaction drops where nothing older of the key lies below (see
    /// [`crate::expiry`]); the default drops every one.
    pub expiry_policy: Arc<dyn ExpiryPolicy>,
    /// Values of at most this many bytes are also held in their memtable version and
    /// keytable entry, in DRAM, so reading one costs no device read (see
    /// [`crate::keytable`]'s held values); 0 holds none. At most
    /// [`crate::keytable::MAX_HELD_VALUE`] (larger settings act as that). Each held value
    /// costs its length + ~4 bytes of DRAM in a keytable (INFO `entry_value_bytes`).
    pub entry_value_max: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            gc_policy: Arc::new(LeastLive),
            max_key: DEFAULT_MAX_KEY,
            max_value: DEFAULT_MAX_VALUE,
            memtable_bytes: DEFAULT_MEMTABLE_BYTES,
            max_frozen_memtables: DEFAULT_MAX_FROZEN_MEMTABLES,
            l0_runs: DEFAULT_L0_RUNS,
            l0_stop_runs: DEFAULT_L0_STOP_RUNS,
            compaction_debt_stop_bytes: DEFAULT_COMPACTION_DEBT_STOP_BYTES,
            level_ratio: DEFAULT_LEVEL_RATIO,
            l1_bytes: DEFAULT_L1_BYTES,
            keytable_bytes: DEFAULT_KEYTABLE_BYTES,
            bloom_fp_rate: 0.01,
            flush_writes: true,
            ack_from_dram: false,
            open_page_linger: DEFAULT_OPEN_PAGE_LINGER,
            cheap_flush: DEFAULT_CHEAP_FLUSH,
            overprovision_percent: DEFAULT_OVERPROVISION_PERCENT,
            gc_window_pages: DEFAULT_GC_WINDOW_PAGES,
            compaction_moves_values: false,
            uncached_keytables: false,
            read_only_recovery: false,
            value_cache_bytes: 0,
            expiry_policy: Arc::new(DropExpired),
            entry_value_max: DEFAULT_ENTRY_VALUE_MAX,
        }
    }
}
