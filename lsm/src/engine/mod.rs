//! The engine: its public API ([`Engine`]), the state the writer and maintenance share
//! ([`Inner`]), and where each path lives:
//!
//! | module | owns |
//! |---|---|
//! | `write` | client batches: validation, the write pipeline (tickets; claimed and made visible in ticket order, inserted into the memtable concurrently by their finishers), group commit |
//! | `layout` | laying a batch out in value-log pages at the head (packed, raw, long keys, spanning values) |
//! | `read` | GET / multi-get / ranges: resolving keys to value pointers and reading the pages |
//! | `flush` | memtable -> L0 keytable run |
//! | `compaction` | merging keytable runs (metadata only) and releasing keytable segments |
//! | `gc` | value-log garbage collection: victims, moves, release of reclaimed segments |
//! | `space` | free segments, garbage counts, user capacity |
//! | `trim` | segments released from the manifest: the wait for their readers and their trim, with the write lock free |
//! | `recovery` | the manifest snapshot, opening: runs, free list, replay of the tail |
//! | `fsck` | the offline check: every checksum, pointer and garbage count of a store |

mod clear;
mod compaction;
mod dead_pages;
mod flush;
mod fsck;
mod gc;
mod landing;
mod layout;
mod levels;
mod maintain;
mod open_page;
mod read;
mod recovery;
mod sample;
mod space;
#[cfg(test)]
mod test_device;
mod trim;
mod version;
mod write;

pub use fsck::{Finding, FindingKind, FsckReport};
pub use read::{
    GetNow, KeyFilter, LookupNow, PendingLookup, RangeRead, ReadWindowFull, ReservedRead,
    ThreadReads,
};
pub use write::{Doorbell, PendingWrite};

use gc::{GcCarry, GcCursor, GcMove, GcReadAhead};
use landing::Landing;
use layout::Head;
use maintain::{Frozen, MaintenanceShared};
use open_page::{OpenPage, Sharing};
use trim::Unlinked;
use version::{ReadFaults, ReadSide, SegMap, Version};
use write::InFlight;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};

use hwftl_sim::{
    AppendDevice, Command, Completion, DeviceError, Geometry, Lba, PageBuf, SegmentId,
    SegmentState, PAGE_SIZE,
};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::cache::{PageAddr, ValueCache, ValueCacheStats};
use crate::config::EngineConfig;
use crate::epoch::ReadEpochs;
use crate::error::{EngineError, Result};
use crate::expiry::Deadline;
use crate::gc::GcCandidate;
use crate::io::{FlushGate, GroupDone, Poller};
use crate::keytable::{KeyTable, KeyTableBuilder, Slot, MAX_HELD_VALUE, MAX_INLINE_PAGE};
use crate::manifest::{LogSegMeta, ManifestStore, RunMeta, Snapshot, MANIFEST_SEGMENTS};
use crate::memtable::{MemKey, MemTable};
use crate::merge::{compact, Cursor, Invalidated};
use crate::read::{page_bytes, OnProbedValues, OnRange, OnValues, ReadWindow};
use crate::vlog_format::{
    check_page, delete_record_bytes, fits_inline, indirect_payload, is_long_key, key_pages,
    long_put_payload, long_retime_payload, parse_records, raw_pages, raw_runs, retime_payload,
    retime_record_bytes, stored_record_bytes, unused_bytes, PageBuilder, Record, RecordKind,
    ValueLoc, ValuePtr, DEADLINE_SUFFIX, INDIRECT_PAYLOAD, LONG_DELETE_PAYLOAD, LONG_KEY_MAX,
    LONG_PUT_PAYLOAD, LONG_RETIME_PAYLOAD, RECORD_HEADER, RETIME_PAYLOAD,
};
use levels::Level;

/// Free segments kept back from puts so deletes, flushes and compactions can still run on a
/// full drive.
const RESERVED_SEGMENTS: usize = 2;

/// Value-log pages of one memtable generation that rotate it out (bounds replay time; see
/// `Inner::replay_budget_pages`).
const REPLAY_BUDGET_PAGES: u64 = 32 * 1024;

/// Device commands the engine keeps in flight at once.
const IO_WINDOW: usize = 32;

/// One FLUSH of the device's write cache, waiting for a free tag if need be.
fn device_flush(dev: &dyn AppendDevice) -> std::result::Result<(), DeviceError> {
    crate::io::execute_patiently(dev, Command::Flush)
        .map_err(|r| r.error)
        .and_then(|c| c.result)
}

/// One operation of an atomic write batch.
#[derive(Debug, Clone, Copy)]
pub enum WriteOp<'a> {
    /// Set a key.
    Put(&'a [u8], &'a [u8]),
    /// Set a key whose value expires after the deadline (unix ms; see [`crate::expiry`]).
    PutUntil(&'a [u8], &'a [u8], NonZeroU64),
    /// Delete a key.
    Delete(&'a [u8]),
    /// Give the key's current value a new deadline (`None`: never expires), leaving the
    /// value where it is. The value is the one the key has when the operation takes its
    /// place in the write order, expired or not; a key without a value stays without one.
    Retime(&'a [u8], Deadline),
}

impl<'a> WriteOp<'a> {
    /// The key the operation writes.
    pub fn key(&self) -> &'a [u8] {
        match *self {
            WriteOp::Put(k, _)
            | WriteOp::PutUntil(k, _, _)
            | WriteOp::Delete(k)
            | WriteOp::Retime(k, _) => k,
        }
    }

    /// The batch as the layout sees it: a put with a deadline is a put followed by a
    /// retime of the same key (so value records have one format; see
    /// [`crate::vlog_format`]). Borrows the batch when it has no such put.
    pub(crate) fn expand<'b>(ops: &'b [WriteOp<'a>]) -> std::borrow::Cow<'b, [WriteOp<'a>]> {
        if !ops.iter().any(|op| matches!(op, WriteOp::PutUntil(..))) {
            return std::borrow::Cow::Borrowed(ops);
        }
        let mut out = Vec::with_capacity(ops.len() + 1);
        for op in ops {
            match *op {
                WriteOp::PutUntil(k, v, d) => {
                    out.push(WriteOp::Put(k, v));
                    out.push(WriteOp::Retime(k, Some(d)));
                }
                other => out.push(other),
            }
        }
        std::borrow::Cow::Owned(out)
    }
}

/// Keys with the deadlines their entries carry ([`Engine::deadlines_in`]).
pub type KeyDeadlines = Vec<(Vec<u8>, NonZeroU64)>;

/// A range's first live key and the greatest key with an entry in it
/// ([`Engine::range_bounds`]); `None`: no live key.
pub type RangeBounds = Option<(Vec<u8>, Vec<u8>)>;

/// Counters and sizes for INFO and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Key and value bytes accepted from clients.
    pub user_bytes_written: u64,
    /// Bytes the engine wrote to the device (value log, keytables, manifest).
    pub device_bytes_written: u64,
    /// Value-log bytes still referenced (written minus known garbage).
    pub live_bytes: u64,
    /// Value-log bytes in segments in use.
    pub total_bytes: u64,
    /// DRAM held by keytable runs (their held values included).
    pub keytable_dram_bytes: u64,
    /// Small values held in DRAM beside their keytable entries or memtable versions (see
    /// [`EngineConfig::entry_value_max`]), so reading one costs no device read.
    pub held_values: u64,
    /// Bytes of those values.
    pub held_value_bytes: u64,
    /// Keys in the memtables (the active one and the frozen ones).
    pub memtable_keys: u64,
    /// Full memtables waiting for their flush (at most
    /// [`EngineConfig::max_frozen_memtables`]; RocksDB's `num-immutable-mem-table`).
    pub frozen_memtables: u64,
    /// Runs per level, L0 first.
    pub runs_per_level: Vec<usize>,
    /// Keys per level, L0 first.
    pub keys_per_level: Vec<u64>,
    /// Flushes and compactions done since open.
    pub flushes: u64,
    /// Compactions done since open.
    pub compactions: u64,
    /// Value versions compactions dropped (shadowed by newer versions).
    pub compaction_invalidated: u64,
    /// Entries compaction dropped because their deadline had passed (see
    /// [`crate::expiry`]).
    pub expired_dropped: u64,
    /// Times every key was deleted at once ([`Engine::clear`]).
    pub clears: u64,
    /// Compactions of every level run to give back room expired entries held, for a write
    /// refused for capacity.
    pub expiry_compactions: u64,
    /// With the `compaction_moves_values` ablation: compactions that left the values in
    /// place because the free segments could not hold them all.
    pub compactions_without_room_to_move: u64,
    /// Free segments.
    pub free_segments: u64,
    /// Records replayed at open.
    pub replayed_records: u64,
    /// Value-log segments reclaimed by garbage collection.
    pub gc_segments: u64,
    /// Garbage-collection steps (windows of a segment handled with the lock held).
    pub gc_steps: u64,
    /// Garbage collection's move batches laid out while client batches were in flight (with
    /// [`EngineConfig::ack_from_dram`]: no drain of the pipeline first).
    pub gc_batches_beside_clients: u64,
    /// Times garbage collection's moves waited for the pipeline to drain because a client
    /// batch in flight, not yet applied, wrote one of the moved keys.
    pub gc_waits_for_clients: u64,
    /// Value bytes garbage collection moved.
    pub gc_bytes_moved: u64,
    /// Victim pages garbage collection did not read: raw pages of values already counted
    /// dead.
    pub gc_pages_skipped: u64,
    /// Of those, pages read after all because a value on them was still live (the hint was
    /// wrong; never expected).
    pub gc_skipped_pages_reread: u64,
    /// Device segments holding the value log.
    pub log_segments: u64,
    /// Device segments holding keytable pages.
    pub keytable_segments: u64,
    /// Value-log segments garbage collection reclaimed and has not yet released (trimmed
    /// and freed together, see `gc.rs`): neither free nor in the log.
    pub reclaimed_segments: u64,
    /// Device segments released from the manifest (reclaimed value-log segments, keytable
    /// segments no run uses) whose trim waits for the reads that began before their release
    /// (see `trim.rs`): neither free nor owned.
    pub unlinked_segments: u64,
    /// Segments trimmed and freed after such a wait, since open.
    pub released_segments: u64,
    /// Value bytes clients may keep live (the value space less over-provisioning).
    pub user_capacity_bytes: u64,
    /// Device cache flushes issued by the engine (batches waiting at once share one).
    pub device_flushes: u64,
    /// plp: flushes queued every 128 pages (1 MiB) written (`write::flush_pacing`), so
    /// the device's write cache never holds much (not counted in `device_flushes`).
    pub paced_flushes: u64,
    /// Of `paced_flushes`, those the device failed.
    pub paced_flush_errors: u64,
    /// Client batches written together with another caller's batch, as one batch (group
    /// commit across callers of [`Engine::write`]).
    pub joined_batches: u64,
    /// Write stalls: client batches that waited for maintenance, by reason (see
    /// `WriteStalls`).
    pub write_stalls: WriteStalls,
    /// Maintenance tasks (flush, compaction, GC step) that failed; the maintenance thread
    /// retries after a pause, and writers that wait for it get the error.
    pub maintenance_errors: u64,
    /// Per level, L0 first: its shape and the keytable bytes flushes and compactions moved
    /// into it (see [`LevelStats`]).
    pub levels: Vec<LevelStats>,
    /// Keytable bytes compaction still owes: L0's bytes once it reaches its trigger, and
    /// each deeper level's bytes over its target.
    pub compaction_debt_bytes: u64,
    /// Value-log pages recovery read again after a read error or a bad checksum.
    pub recovery_read_retries: u64,
    /// Damaged write batches a read-only recovery skipped (see
    /// [`EngineConfig::read_only_recovery`]).
    pub recovery_damage: u64,
    /// Value pages reads (GET, MGET, ranges; also compaction's and garbage collection's
    /// value reads) could not read from the device: the read failed with an error.
    pub read_unreadable_pages: u64,
    /// Values or value pages reads found failing their checksums: the read failed with a
    /// `Corrupt` error (never wrong data).
    pub read_checksum_failures: u64,
    /// Garbage-collection steps refused because a victim page could not be read or failed
    /// its checksum: the victim stays in place and is not picked again until the next open.
    pub gc_steps_refused: u64,
    /// Value-log pages garbage collection read again after a read error (up to ten reads
    /// of a page before its error is believed and the victim refused). Recovery's retries
    /// are [`EngineStats::recovery_read_retries`]; client reads are not retried (a failed
    /// read is reported, see [`EngineStats::read_unreadable_pages`]).
    pub gc_read_retries: u64,
    /// With [`EngineConfig::ack_from_dram`]: value pages of acknowledged writes not yet on
    /// the device, held in DRAM (at most the write pipeline's 192 pages).
    pub landing_pages: u64,
    /// Page lookups of reads those copies answered (the page was not on the device yet).
    pub landing_hits: u64,
    /// With [`EngineConfig::ack_from_dram`]: packed pages a client batch left open for the
    /// small batches after it to share.
    pub shared_pages_opened: u64,
    /// Client batches that wrote all their records into a page another batch had left open,
    /// instead of a page of their own.
    pub shared_page_joins: u64,
}

/// One keytable level: its shape now, and what flushes and compactions did to it since open
/// (bytes as [`KeyTable::data_bytes`] counts them: keys and value pointers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Runs in the level.
    pub runs: u64,
    /// Keytable bytes in the level.
    pub bytes: u64,
    /// The level's target size (0 for L0, whose trigger is a run count).
    pub target_bytes: u64,
    /// Bytes that came in from above: flushed memtables for L0, the upper level's runs a
    /// compaction took (or moved) for the others.
    pub bytes_in: u64,
    /// Bytes of this level's own runs that compactions into it rewrote.
    pub bytes_rewritten: u64,
    /// Bytes written into the level (flush or compaction output).
    pub bytes_written: u64,
    /// Compactions into the level that merged runs.
    pub compactions: u64,
    /// Compactions into the level that moved runs down as they were.
    pub trivial_moves: u64,
}

impl LevelStats {
    /// The level's keytable write amplification: bytes written per byte that came in.
    pub fn write_amplification(&self) -> f64 {
        if self.bytes_in == 0 {
            0.0
        } else {
            self.bytes_written as f64 / self.bytes_in as f64
        }
    }
}

/// Client batches that had to wait for the maintenance thread, by what they waited for
/// (RocksDB's write-stall counters, in the same spirit). A batch that waits for several
/// reasons in turn counts once per reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteStalls {
    /// The active memtable was full while as many frozen ones as allowed
    /// (`EngineConfig::max_frozen_memtables`) still waited for their flush.
    pub memtable: u64,
    /// Free segments were at the garbage-collection low-water mark.
    pub free_segments: u64,
    /// A hole a failed batch left had to be closed (a flush past it) first.
    pub hole: u64,
    /// The batch would pass the user capacity by the current count: a flush made the
    /// garbage count exact first.
    pub capacity: u64,
    /// L0 held `l0_stop_runs` runs: a compaction took it down first.
    pub l0_runs: u64,
    /// Compaction debt passed `compaction_debt_stop_bytes`: compaction caught up first.
    pub compaction_debt: u64,
    /// Time client batches spent stalled, in microseconds.
    pub stalled_micros: u64,
}

/// The LightStore engine over an append-only device.
///
/// Three kinds of synchronisation (the full argument is in `docs/ARCHITECTURE.md` and in
/// the `version` and `maintain` modules):
/// - **reads** go through `ReadSide` and take no lock: a pinned epoch, a `Version` and the
///   visible sequence number, all published with atomics (see the `version` module);
/// - **writes** lay out batches at the head under `Inner`'s mutex (the write lock), and
///   claim and settle them in ticket order under it; their memtable inserts run with it
///   free (`write::apply`);
/// - **maintenance** (memtable flush, compaction, garbage collection) runs on the engine's
///   `lsm-maint` thread, serialised by the maintenance lock (`Core::maint`, always taken
///   before the write lock). In its usual tasks it takes the write lock only to read what it
///   works on and to install its result; building and writing keytables happen with it
///   free. Writers never run maintenance: they wait for it (a write stall, counted) when a
///   watermark is reached. A released segment's wait for the readers pinned before its
///   release, and its trim, run with the write lock free (the `trim` module; GC,
///   compaction and `clear` alike). The exceptions, which hold the write lock across device
///   I/O, are listed in `docs/ARCHITECTURE.md` (*Maintenance*): `Inner::flush` with the
///   compactions it makes due (a writer at the user capacity, a hole to close, GC without a
///   victim, `flush`/`close`/`compact_all`), and manifest writes.
///
/// Every change a reader can see is published from under the write lock
/// (`Inner::publish_version`, `Inner::publish_segs`, the visible sequence number after
/// a batch is applied).
pub struct Engine {
    core: Arc<Core>,
    /// Everything a read needs (shared with `Inner`, which publishes into it).
    side: Arc<ReadSide>,
    /// The `lsm-maint` thread, joined on close or drop.
    maintainer: Option<std::thread::JoinHandle<()>>,
}

/// What the engine's callers and its maintenance thread share.
pub(super) struct Core {
    /// The writer side's state (the write lock).
    inner: Mutex<Inner>,
    /// Signalled whenever pipelined batches are applied or maintenance changed the state
    /// writers wait on (a flush installed, segments freed, a task failed).
    applied: Condvar,
    /// The maintenance thread waits here for work.
    work: Condvar,
    /// The maintenance lock: whoever holds it runs maintenance (the `lsm-maint` thread, or a
    /// caller of [`Engine::flush`], [`Engine::compact_all`], [`Engine::close`]). Taken
    /// before the write lock, never while holding it.
    maint: Mutex<()>,
    /// Batches waiting for a write-lock holder to write them with its own (group commit,
    /// `write/group.rs`).
    joiners: write::Joiners,
    /// A member's doorbell found the write lock taken and left the shared open page to the
    /// maintenance thread to seal (see `open_page`).
    seal_wanted: AtomicBool,
}

impl Core {
    /// Seals the shared open page now if the write lock is free, else asks the maintenance
    /// thread to (it looks at once). Never waits: a member's doorbell calls this on the
    /// drive's network thread.
    fn seal_open_page_soon(&self) {
        if let Some(mut g) = self.inner.try_lock() {
            // Sealed here only when the page surely gets a device tag: a page refused for
            // want of one is retried under the lock, which this caller must not wait for.
            if g.open_page.is_none() {
                return;
            }
            if g.poller
                .free_tags()
                .is_none_or(|f| f > open_page::SEAL_NOW_SPARE_TAGS)
            {
                // A refused page fails its members (see `seal_open_page`).
                let _ = g.seal_open_page();
                return;
            }
        }
        self.seal_wanted.store(true, Ordering::Release);
        self.work.notify_one();
    }

    /// After a batch was started: wakes the maintenance thread from its long sleep if the
    /// batch opened a shared page, so the page's linger bound holds.
    fn watch_open_page(&self, g: &mut Inner) {
        if std::mem::take(&mut g.open_page_news) && g.maint.napping {
            self.work.notify_one();
        }
    }
}

struct Inner {
    dev: Arc<dyn AppendDevice>,
    g: Geometry,
    cfg: EngineConfig,
    manifest: ManifestStore,
    snap_seq: u64,
    /// The newest sequence number applied to the memtable (see [`Inner::publish_seq`]).
    applied_seq: u64,
    /// The active memtable (also in the published version; readers read it concurrently).
    mem: Arc<MemTable>,
    /// L0 newest first; each deeper level has at most one run.
    levels: Vec<Level>,
    runs: HashMap<u64, RunMeta>,
    log_segs: BTreeMap<u32, LogSegMeta>,
    /// The part of each log segment's `dead` that records after the replay checkpoint made
    /// (tombstones, unused page bytes, values replaced in the memtable, failed batches).
    /// Recovery replays those records and counts it again, so the manifest stores `dead`
    /// without it; it becomes part of the stored count when a flush moves the checkpoint.
    tail_dead: BTreeMap<u32, u64>,
    /// Raw value pages known to hold only garbage: garbage collection does not read them.
    dead_raw: dead_pages::DeadRawPages,
    head: Option<Head>,
    /// The head's packed page shared by early client batches, until sealed (see `open_page`).
    open_page: Option<OpenPage>,
    /// A batch opened the shared page since [`Core::watch_open_page`] last looked.
    open_page_news: bool,
    kt_segments: Vec<u32>,
    /// Of `kt_segments`, those claimed for a run being written and not yet installed (a
    /// compaction's output comes out of the room `keytable_headroom` keeps, so the user
    /// capacity does not count them twice).
    kt_pending_segments: usize,
    free: BTreeSet<u32>,
    next_seq: u64,
    next_run: u64,
    next_log_seg: u32,
    next_batch: u64,
    next_l0_order: u64,
    checkpoint: (u32, u32),
    pages_since_checkpoint: u64,
    stats: EngineStats,
    /// Device page writes when the engine opened (write amplification baseline).
    dev_writes_at_open: u64,
    /// Garbage collection is relocating values (its writes must not start another).
    in_gc: bool,
    /// The reclaim in progress, if any (it goes on a window at a time).
    gc_cursor: Option<GcCursor>,
    /// Per run, its sparse page index (only for the keytable-caching ablation).
    kt_index: HashMap<u64, Vec<(u32, Vec<u8>)>>,
    /// Shares device flushes among batches that wait for one at the same time.
    flush_gate: Arc<FlushGate>,
    /// Durable client batches' flushes, started by their pages' completion.
    flush_chain: Arc<write::FlushChain>,
    /// plp: the device flushes paced by the pages written (`write::flush_pacing`).
    flush_pacer: write::flush_pacing::FlushPacer,
    /// Live values read by garbage collection and not yet rewritten.
    gc_pending: Vec<GcMove>,
    /// Their bytes as records.
    gc_pending_bytes: usize,
    /// Reclaimed log segments, dropped from `log_segs` but still listed by every manifest
    /// written until `release_reclaimed` (which first closes any hole), so not yet trimmed
    /// or free. Their garbage counts are as the manifest gives them (no tail garbage).
    gc_reclaimed: Vec<LogSegMeta>,
    /// Segments the manifest no longer lists and nothing published reaches, waiting for the
    /// readers pinned before their release and for their trim (`trim`).
    unlinked: Vec<Unlinked>,
    /// The victim's next window, read while the current window's moves are written.
    gc_read_ahead: Option<GcReadAhead>,
    /// Victim pages the last step read and did not judge, for the next.
    gc_carry: Option<GcCarry>,
    closed: bool,
    /// Opened with [`EngineConfig::read_only_recovery`]: nothing is written.
    read_only: bool,
    /// A page of a batch acknowledged from DRAM failed on the device (the device's error):
    /// writes and maintenance stop (see `landing`).
    ack_lost: Option<String>,
    /// Victims garbage collection refused (a page unreadable or corrupt): never picked again.
    gc_refused: BTreeSet<u32>,
    /// Opened by [`Engine::fsck`]: what recovery found wrong is recorded here (and the open
    /// goes on) instead of failing the open.
    fsck: Option<Vec<Finding>>,
    /// Read-only: device segments of log segments a writable open would release (empty
    /// after the tail, or after where it ends); they stay as they are.
    released_read_only: Vec<u32>,
    /// Delivers completions of the commands the engine does not wait for in place.
    poller: Arc<Poller>,
    /// Client batches on the device, not yet applied, by ticket (applied in ticket order).
    pipeline: BTreeMap<u64, InFlight>,
    /// Pages of the batches in `pipeline`.
    pipeline_pages: u64,
    /// Ticket of the next pipelined batch.
    next_ticket: u64,
    /// Every ticket up to this one has been applied (in the memtable and visible) or
    /// failed, and has left the pipeline (but a batch acknowledged from DRAM, which stays
    /// until its pages land: see `landing`).
    applied_upto: u64,
    /// Every ticket up to this one has its outcome decided and, if it succeeded, its
    /// updates handed to an inserter (see [`Inner::claim_ready`]); `applied_upto` follows.
    claimed_upto: u64,
    /// Tickets below this fail: they were on the device when an earlier batch failed.
    poisoned_below: u64,
    /// Outcomes of applied batches, until their writers collect them.
    outcomes: HashMap<u64, Result<()>>,
    /// Callers waiting for the pipeline to drain; no new batch enters it meanwhile.
    quiescers: usize,
    /// The read side this state is published to.
    side: Arc<ReadSide>,
    /// A batch failed after writing some pages: checkpoint before the next one.
    needs_checkpoint: bool,
    /// The memtables rotated out of `mem` and not yet flushed, oldest first (at most
    /// `cfg.max_frozen_memtables`; readers still read them).
    frozen: VecDeque<Frozen>,
    /// The insert of the last claimed batch that retimes a value, while it may still be
    /// running (see `ApplyJob::after`).
    last_retime_insertion: Option<Arc<write::Insertion>>,
    /// What writers asked of maintenance, and what it reports back.
    maint: MaintenanceShared,
    /// [`Inner::compaction_debt`] as of the last version published (levels change only
    /// then), so admission reads it without summing the levels per batch.
    debt: AtomicU64,
}

fn corrupt(msg: impl Into<String>) -> EngineError {
    EngineError::Corrupt(msg.into())
}

impl Engine {
    /// Opens the store on `dev`: an empty device is initialised; otherwise the manifest,
    /// keytable runs and the value-log tail are recovered.
    ///
    /// # Errors
    /// `Unrecoverable` for an unusable geometry or metadata, `Corrupt` for a damaged
    /// keytable, device errors.
    pub fn open(dev: Arc<dyn AppendDevice>, cfg: EngineConfig) -> Result<Engine> {
        Self::open_mode(dev, cfg, false)
    }

    /// [`Engine::open`]; with `fsck` (read-only), what recovery finds wrong is recorded in
    /// `Inner::fsck` instead of failing the open.
    fn open_mode(dev: Arc<dyn AppendDevice>, cfg: EngineConfig, fsck: bool) -> Result<Engine> {
        let g = dev.geometry();
        if g.pages_per_segment() > MAX_INLINE_PAGE + 1 {
            return Err(EngineError::Unrecoverable(format!(
                "segments of {} pages: the engine addresses at most {} pages per segment",
                g.pages_per_segment(),
                MAX_INLINE_PAGE + 1
            )));
        }
        if g.segments() < 6 {
            return Err(EngineError::Unrecoverable(format!(
                "{} segments: the engine needs at least 6",
                g.segments()
            )));
        }
        let (manifest, snap) = ManifestStore::load(dev.as_ref())?;
        let fresh = snap.is_none();
        let snap = snap.unwrap_or_else(|| Snapshot {
            next_seq: 1,
            next_run: 1,
            next_log_seg: 1,
            next_batch: 1,
            checkpoint: (1, 0),
            ..Snapshot::default()
        });
        let poller = Arc::new(Poller::start(dev.clone()).map_err(|e| {
            EngineError::Unrecoverable(format!("cannot start the device poller thread: {e}"))
        })?);
        let side = Arc::new(ReadSide {
            dev: dev.clone(),
            g,
            version: ArcSwap::from_pointee(Version::default()),
            segs: ArcSwap::from_pointee(SegMap::new()),
            visible_seq: AtomicU64::new(0),
            epochs: Arc::new(ReadEpochs::default()),
            window: Arc::new(ReadWindow::default()),
            read_copied: Arc::new(AtomicU64::new(0)),
            read_faults: Arc::default(),
            poller: poller.clone(),
            closed: AtomicBool::new(false),
            uncached_keytables: cfg.uncached_keytables,
            cache: ValueCache::new(cfg.value_cache_bytes).map(Arc::new),
            landing: (cfg.ack_from_dram && !cfg.read_only_recovery)
                .then(|| Arc::new(Landing::default())),
        });
        let mut inner = Inner {
            dev,
            g,
            cfg: cfg.clone(),
            manifest: if fresh {
                ManifestStore::fresh()
            } else {
                manifest
            },
            snap_seq: snap.seq,
            applied_seq: snap.next_seq.saturating_sub(1),
            mem: Arc::new(MemTable::with_budget(cfg.memtable_bytes)),
            levels: vec![Vec::new()],
            runs: HashMap::new(),
            log_segs: snap
                .log_segs
                .iter()
                .map(|l| (l.log_seg, l.clone()))
                .collect(),
            tail_dead: BTreeMap::new(),
            dead_raw: dead_pages::DeadRawPages::default(),
            head: None,
            open_page: None,
            open_page_news: false,
            kt_segments: snap.kt_segments.clone(),
            kt_pending_segments: 0,
            free: BTreeSet::new(),
            next_seq: snap.next_seq,
            next_run: snap.next_run,
            next_log_seg: snap.next_log_seg,
            next_batch: snap.next_batch,
            next_l0_order: 1,
            checkpoint: snap.checkpoint,
            pages_since_checkpoint: 0,
            stats: EngineStats::default(),
            dev_writes_at_open: 0,
            in_gc: false,
            gc_cursor: None,
            kt_index: HashMap::new(),
            flush_gate: Arc::new(FlushGate::default()),
            flush_chain: write::FlushChain::new(&poller),
            flush_pacer: write::flush_pacing::FlushPacer::default(),
            gc_pending: Vec::new(),
            gc_pending_bytes: 0,
            gc_reclaimed: Vec::new(),
            unlinked: Vec::new(),
            gc_read_ahead: None,
            gc_carry: None,
            closed: false,
            read_only: cfg.read_only_recovery,
            ack_lost: None,
            gc_refused: BTreeSet::new(),
            fsck: fsck.then(Vec::new),
            released_read_only: Vec::new(),
            poller,
            pipeline: BTreeMap::new(),
            pipeline_pages: 0,
            next_ticket: 1,
            applied_upto: 0,
            claimed_upto: 0,
            poisoned_below: 0,
            outcomes: HashMap::new(),
            quiescers: 0,
            side: side.clone(),
            needs_checkpoint: false,
            frozen: VecDeque::new(),
            last_retime_insertion: None,
            maint: MaintenanceShared::default(),
            debt: AtomicU64::new(0),
        };
        inner.dev_writes_at_open = inner.dev.stats().writes;
        inner.load_runs(&snap.runs)?;
        inner.rebuild_free_list()?;
        let released = inner.replay()?;
        if !inner.read_only {
            // The manifest drops the log segments recovery released before they are trimmed.
            inner.persist()?;
            inner.release_log_segments(&released)?;
        }
        inner.publish_segs();
        inner.publish_version();
        inner.publish_seq();
        let core = Arc::new(Core {
            inner: Mutex::new(inner),
            applied: Condvar::new(),
            work: Condvar::new(),
            maint: Mutex::new(()),
            joiners: write::Joiners::default(),
            seal_wanted: AtomicBool::new(false),
        });
        let read_only = cfg.read_only_recovery;
        let maintainer = if read_only {
            None
        } else {
            let core = core.clone();
            let maintainer = std::thread::Builder::new()
                .name("lsm-maint".into())
                .spawn(move || core.maintenance_loop())
                .map_err(|e| {
                    EngineError::Unrecoverable(format!("cannot start the maintenance thread: {e}"))
                })?;
            Some(maintainer)
        };
        Ok(Engine {
            core,
            side,
            maintainer,
        })
    }

    /// Writes the memtables as keytable runs, so the next open replays nothing written
    /// before this call. A compaction the new runs make due is left to the maintenance
    /// thread (woken here); [`Engine::compact_all`] compacts in the call.
    ///
    /// # Errors
    /// `DeviceFull`, device errors; `ReadOnly` on a read-only engine.
    pub fn flush(&self) -> Result<()> {
        let _m = self.core.maint.lock();
        let mut inner = self.core.inner.lock();
        self.core.quiesce(&mut inner);
        inner.check_writable()?;
        let r = inner.flush();
        self.core.applied.notify_all();
        self.core.work.notify_one();
        drop(inner);
        r.and(self.core.trim_unlinked())
    }

    /// Flushes, then merges every level into one bottom run.
    ///
    /// On a nearly full device the merge may find no free segment for its output while the
    /// segments its earlier levels' merges released still wait for their trim, which runs
    /// at the end of the call, or while garbage collection is behind. A merge refused for
    /// want of a segment is therefore tried once more, after those trims and after the
    /// maintenance thread has nothing due.
    ///
    /// # Errors
    /// As [`Engine::flush`]; `DeviceFull` when the second attempt finds no room either.
    pub fn compact_all(&self) -> Result<()> {
        match self.compact_all_once() {
            Err(EngineError::DeviceFull { .. }) => {
                self.settle()?;
                self.compact_all_once()
            }
            r => r,
        }
    }

    /// One attempt of [`Engine::compact_all`].
    fn compact_all_once(&self) -> Result<()> {
        let _m = self.core.maint.lock();
        let mut inner = self.core.inner.lock();
        self.core.quiesce(&mut inner);
        inner.check_writable()?;
        let r = inner.flush().and_then(|()| inner.compact_all());
        self.core.applied.notify_all();
        drop(inner);
        r.and(self.core.trim_unlinked())
    }

    /// Waits until the maintenance thread has nothing due (no memtable to flush, no
    /// compaction or garbage collection due) and is idle: with no writes meanwhile, the
    /// engine's state and its manifest then stay as they are.
    ///
    /// # Errors
    /// `MaintenanceFailed` when a maintenance task fails meanwhile; `Closed`.
    pub fn settle(&self) -> Result<()> {
        if self.core.inner.lock().read_only {
            // No maintenance runs on a read-only engine.
            return Ok(());
        }
        self.core.settle()
    }

    /// The device's own counters (segments, wear, I/O).
    pub fn device_stats(&self) -> hwftl_sim::DeviceStats {
        self.side.dev.stats()
    }

    /// The value cache's counters (`None`: configured off); takes no lock.
    pub fn value_cache_stats(&self) -> Option<ValueCacheStats> {
        self.side.cache.as_ref().map(|c| c.stats())
    }

    /// Counters and sizes.
    pub fn stats(&self) -> EngineStats {
        let mut stats = self.core.inner.lock().stats();
        stats.joined_batches = self.core.joiners.joined();
        stats
    }

    /// Makes every acknowledged write durable: waits until the pages of the batches in
    /// flight are on the device (with [`EngineConfig::ack_from_dram`], those acknowledged
    /// before they landed), then flushes the device's write cache. What a drive runs on a
    /// power-fail signal; new writes wait meanwhile.
    ///
    /// # Errors
    /// `Closed`; [`EngineError::AcknowledgedWriteLost`] when a page of an acknowledged write
    /// failed; the device's flush error.
    pub fn sync(&self) -> Result<()> {
        let mut inner = self.core.inner.lock();
        self.core.quiesce(&mut inner);
        inner.check_open()?;
        inner.check_not_lost()?;
        // Under the write lock: nothing is acknowledged between the drain and the flush.
        device_flush(inner.dev.as_ref())?;
        Ok(())
    }

    /// Stops the maintenance thread, flushes the memtables so the next open replays
    /// nothing, and closes the engine.
    ///
    /// # Errors
    /// As [`Engine::flush`].
    pub fn close(mut self) -> Result<()> {
        self.stop_maintenance();
        let _m = self.core.maint.lock();
        let mut inner = self.core.inner.lock();
        self.core.quiesce(&mut inner);
        inner.check_open()?;
        inner.drop_read_ahead();
        let flushed = if inner.read_only {
            Ok(())
        } else if let Err(e) = inner.check_not_lost() {
            // Nothing more is written: a restart recovers the log up to the failed page.
            Err(e)
        } else {
            inner.flush()
        };
        // Segments still unlinked (released and not yet trimmed) are trimmed here, not left to
        // the next open.
        drop(inner);
        let trimmed = if flushed.is_ok() {
            self.core.trim_unlinked()
        } else {
            Ok(())
        };
        let mut inner = self.core.inner.lock();
        inner.closed = true;
        self.side.closed.store(true, Ordering::Release);
        self.core.applied.notify_all();
        flushed.and(trimmed)
    }

    /// Asks the maintenance thread to stop after its current task and joins it.
    fn stop_maintenance(&mut self) {
        {
            let mut inner = self.core.inner.lock();
            inner.maint.shutdown = true;
            self.core.work.notify_all();
        }
        if let Some(t) = self.maintainer.take() {
            if t.join().is_err() {
                tracing::error!("the lsm-maint thread panicked");
            }
        }
    }
}

impl Drop for Engine {
    /// Stops the maintenance thread (a dropped engine that was not closed is recovered by
    /// the next open, as after a power cut).
    fn drop(&mut self) {
        self.stop_maintenance();
    }
}

impl Inner {
    fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(EngineError::Closed);
        }
        Ok(())
    }

    /// As [`Inner::check_open`], and refuses writes on a read-only engine.
    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(EngineError::ReadOnly);
        }
        self.check_not_lost()
    }

    /// Refuses once a page of an acknowledged write was lost (see `landing`): from then on
    /// the engine writes nothing at all — no batch, no keytable install, no manifest, no
    /// trim — so recovery finds the log as it was (up to the failed page).
    fn check_not_lost(&self) -> Result<()> {
        match &self.ack_lost {
            Some(reason) => Err(EngineError::AcknowledgedWriteLost {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn max_value(&self) -> u64 {
        // The value pointer's length field is 32 bits, and its all-ones value marks a
        // tombstone in a keytable page.
        self.cfg.max_value.min(u64::from(u32::MAX - 1))
    }

    /// Runs commands (windowed to the device's queue) and returns completions in command
    /// order.
    /// Runs commands through the poller, `IO_WINDOW` at a time, and returns their
    /// completions in order.
    fn run_io(&self, cmds: Vec<Command>) -> Result<Vec<Completion>> {
        self.poller
            .run(cmds, IO_WINDOW)
            .into_iter()
            .map(|r| r.map_err(EngineError::Device))
            .collect()
    }

    fn read_pages(&self, lbas: &[Lba]) -> Result<Vec<PageBuf>> {
        let cmds = crate::io::page_reads(lbas);
        self.run_io(cmds)?
            .into_iter()
            .map(|c| {
                c.into_buf()?
                    .ok_or_else(|| corrupt("a read returned no buffer"))
            })
            .collect()
    }

    fn write_pages(&mut self, pages: Vec<(Lba, PageBuf)>) -> Result<()> {
        self.check_not_lost()?;
        let cmds = pages
            .into_iter()
            .map(|(lba, buf)| Command::Write { lba, buf })
            .collect();
        for c in self.run_io(cmds)? {
            c.result?;
        }
        Ok(())
    }

    fn segment_of(&self, log_seg: u32) -> Result<u32> {
        self.log_segs
            .get(&log_seg)
            .map(|m| m.segment)
            .ok_or_else(|| {
                corrupt(format!(
                    "value in log segment {log_seg}, which no longer exists"
                ))
            })
    }

    fn stats(&self) -> EngineStats {
        let mut s = self.stats.clone();
        s.device_bytes_written =
            (self.dev.stats().writes - self.dev_writes_at_open) * PAGE_SIZE as u64;
        s.total_bytes = self.log_segs.values().map(|m| m.written).sum();
        s.live_bytes = self.live_bytes();
        s.user_capacity_bytes = self.user_capacity();
        s.device_flushes = self.flush_gate.issued() + self.flush_chain.issued();
        (s.paced_flushes, s.paced_flush_errors) = self.flush_pacer.counts();
        if let Some(l) = &self.side.landing {
            s.landing_pages = l.held_pages();
            s.landing_hits = l.hits();
        }
        s.keytable_dram_bytes = self
            .levels
            .iter()
            .flatten()
            .map(|r| r.dram_bytes() as u64)
            .sum();
        let mems = std::iter::once(&self.mem).chain(self.frozen.iter().map(|f| &f.mem));
        let held = self
            .levels
            .iter()
            .flatten()
            .map(|r| r.held_values())
            .chain(mems.map(|m| m.held_values()));
        for (n, bytes) in held {
            s.held_values += n as u64;
            s.held_value_bytes += bytes as u64;
        }
        s.memtable_keys =
            self.mem.len() as u64 + self.frozen.iter().map(|f| f.mem.len() as u64).sum::<u64>();
        s.frozen_memtables = self.frozen.len() as u64;
        s.runs_per_level = self.levels.iter().map(Vec::len).collect();
        while s.levels.len() < self.levels.len() {
            s.levels.push(LevelStats::default());
        }
        for (l, ls) in s.levels.iter_mut().enumerate() {
            ls.runs = self.levels.get(l).map_or(0, |r| r.len() as u64);
            ls.bytes = self.level_bytes(l) as u64;
            ls.target_bytes = if l == 0 {
                0
            } else {
                self.level_target(l) as u64
            };
        }
        s.compaction_debt_bytes = self.compaction_debt();
        s.read_unreadable_pages = self
            .side
            .read_faults
            .unreadable_pages
            .load(Ordering::Relaxed);
        s.read_checksum_failures = self
            .side
            .read_faults
            .checksum_failures
            .load(Ordering::Relaxed);
        s.gc_read_retries = self
            .side
            .read_faults
            .gc_read_retries
            .load(Ordering::Relaxed);
        s.keys_per_level = self
            .levels
            .iter()
            .map(|l| l.iter().map(|r| r.len() as u64).sum())
            .collect();
        s.free_segments = self.free.len() as u64;
        s.log_segments = self.log_segs.len() as u64;
        s.keytable_segments = self.kt_segments.len() as u64;
        s.reclaimed_segments = self.gc_reclaimed.len() as u64;
        s.unlinked_segments = self.unlinked.len() as u64;
        s
    }
}
