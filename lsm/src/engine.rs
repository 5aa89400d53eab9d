//! The engine: the write path (value log + memtable, group-committed batches), the read path
//! (memtable, then keytable runs newest first, then one value read), flush, metadata-only
//! compaction, garbage accounting and recovery.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use hwftl_sim::{
    AppendDevice, Command, Completion, DeviceError, Geometry, Lba, PageBuf, SegmentId,
    SegmentState, PAGE_SIZE,
};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::config::EngineConfig;
use crate::error::{EngineError, Result};
use crate::gc::GcCandidate;
use crate::io::{FlushGate, GroupDone, Poller};
use crate::keytable::{KeyTable, KeyTableBuilder, Slot, MAX_INLINE_PAGE};
use crate::manifest::{LogSegMeta, ManifestStore, RunMeta, Snapshot, MANIFEST_SEGMENTS};
use crate::memtable::MemTable;
use crate::merge::{compact, run_source, Invalidated, Merge, Source};
use crate::read::{page_bytes, OnProbedValues, OnRange, OnValues, ReadWindow};
use crate::vlog_format::{
    check_page, delete_record_bytes, fits_inline, indirect_payload, is_long_key, key_pages,
    long_put_payload, parse_records, raw_pages, raw_runs, stored_record_bytes, unused_bytes,
    PageBuilder, Record, RecordKind, ValueLoc, ValuePtr, INDIRECT_PAYLOAD, LONG_DELETE_PAYLOAD,
    LONG_KEY_MAX, LONG_PUT_PAYLOAD, RECORD_HEADER,
};

/// Free segments kept back from puts so deletes, flushes and compactions can still run on a
/// full drive.
const RESERVED_SEGMENTS: usize = 2;
/// Free segments garbage collection's moves leave: room for a flush's keytables.
const GC_MOVE_RESERVE: usize = 1;
/// Value-log bytes written since the last flush that trigger a flush (bounds replay time).
const REPLAY_BUDGET_PAGES: u64 = 32 * 1024;
/// Device commands the engine keeps in flight at once.
const IO_WINDOW: usize = 32;
/// Free segments below which garbage collection runs before a write.
const GC_LOW_WATER: usize = RESERVED_SEGMENTS + 2;
/// Value-log pages of client batches on the device at once (the write pipeline's depth).
const PIPELINE_PAGES: u64 = 96;
/// Larger batches are written synchronously, alone.
const PIPELINE_MAX_BATCH_PAGES: u64 = 64;
/// How long a submission waits for a free device tag before giving up.
const QUEUE_FULL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);
/// Live values relocated per write batch during garbage collection.
const GC_BATCH_BYTES: usize = 1 << 20;
/// Pages of reclaimed segments released together: one manifest write (and one wait for
/// reads in flight) for all of them, not one per segment. On small segments the manifest
/// write per reclaimed segment was about a tenth of a sustained overwrite's time; with
/// releases of 256 pages (4 such segments) it ran 5.6-5.7K -> 6.7-6.8K overwrites/s, p99
/// 25-28 ms -> 20-24 ms (`lightstore-bench run-overwrite --device-mib 256`; 512 pages: 6.3-6.7K,
/// p99 38 ms).
const GC_RELEASE_PAGES: u64 = 256;
/// Where a reclaim in progress stands.
#[derive(Debug, Clone, Copy)]
struct GcCursor {
    /// The victim.
    log_seg: u32,
    /// Its first page not yet looked at.
    next_page: u32,
    /// Value bytes moved so far.
    moved: u64,
}

/// A live value garbage collection read, waiting to be rewritten at the head.
#[derive(Debug)]
struct GcMove {
    key: Vec<u8>,
    value: Vec<u8>,
    /// Where it was read: the move is written only if the key still points there.
    from: ValuePtr,
}

/// Where a batch's layout started: the head's log segment with its written, dead and tail
/// garbage bytes, and the first log segment number the layout may open.
struct LayoutStart {
    head: Option<(u32, u64, u64, u64)>,
    first_new: u32,
}

/// Pages of a victim whose reads are on the device while garbage collection writes the
/// moves of the window before them.
struct GcReadAhead {
    log_seg: u32,
    pages: std::ops::Range<u32>,
    reads: crate::io::InFlight,
}

/// What one garbage-collection step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GcStep {
    /// Nothing worth reclaiming.
    Idle,
    /// Part of a segment done.
    Progress,
    /// A segment finished and trimmed.
    Reclaimed,
}

/// The bounds of an [`Engine::range_async`]: `start <= key < end` (no `end`: to the last
/// key), at most `limit` pairs, and no more pairs once their values pass `max_bytes` (at
/// least one pair is returned when there is one), skipping keys `skip` rejects (judged in
/// the same instant as the keys are taken; skipped keys do not count).
pub struct RangeRead<'a> {
    /// First key (inclusive).
    pub start: &'a [u8],
    /// End key (exclusive); `None`: unbounded.
    pub end: Option<&'a [u8]>,
    /// Most pairs.
    pub limit: usize,
    /// Value bytes after which no further pair is taken.
    pub max_bytes: u64,
    /// Keys to leave out (e.g. expired ones), called under the engine lock: it must be quick
    /// and must not call into the engine.
    pub skip: Option<&'a KeyFilter<'a>>,
}

/// A predicate over keys (see [`RangeRead::skip`]).
pub type KeyFilter<'a> = dyn Fn(&[u8]) -> bool + Sync + 'a;

/// Receives values read and what was resolved with them (see `Engine::read_async`).
type OnValuesWith<T> = Box<dyn FnOnce(Result<Vec<Option<Bytes>>>, T) + Send>;

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
    /// Delete a key.
    Delete(&'a [u8]),
}

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
    /// DRAM held by keytable runs.
    pub keytable_dram_bytes: u64,
    /// Keys in the memtable.
    pub memtable_keys: u64,
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
    /// Value bytes garbage collection moved.
    pub gc_bytes_moved: u64,
    /// Device segments holding the value log.
    pub log_segments: u64,
    /// Device segments holding keytable pages.
    pub keytable_segments: u64,
    /// Value bytes clients may keep live (the value space less over-provisioning).
    pub user_capacity_bytes: u64,
    /// Device cache flushes issued by the engine (batches waiting at once share one).
    pub device_flushes: u64,
}

/// The current value-log segment being appended to.
#[derive(Debug, Clone, Copy)]
struct Head {
    log_seg: u32,
    segment: u32,
    /// Next page index to hand out.
    next_page: u32,
}

/// A batch's pages in the order they must be written.
struct BatchPages {
    pages: Vec<(Lba, PageBuf)>,
    /// The open packed page and its position.
    open: PageBuilder,
    open_at: Option<(u32, u32)>,
    /// Raw pages that follow the open page.
    raws: Vec<(Lba, PageBuf)>,
    raw_after: u32,
    batch: u64,
}

/// Page reads that resolve a list of value pointers.
struct ReadPlan {
    ptrs: Vec<Option<ValuePtr>>,
    lbas: Vec<Lba>,
    /// Per pointer: first index into `lbas` and page count (pointers into one packed page
    /// may share its index).
    spans: Vec<Option<(usize, u32)>>,
}

impl ReadPlan {
    /// Reads the pages straight from the device, concurrently with other callers (no engine
    /// lock held).
    fn fetch(&self, dev: &dyn AppendDevice) -> Vec<Result<Bytes>> {
        let cmds = self
            .lbas
            .iter()
            .map(|&lba| Command::Read {
                lba,
                buf: PageBuf::for_read(),
            })
            .collect();
        dev.execute_many(cmds)
            .into_iter()
            .map(|r| {
                r.map_err(EngineError::from)?
                    .into_buf()?
                    .map(page_bytes)
                    .ok_or_else(|| corrupt("a read returned no buffer"))
            })
            .collect()
    }

    /// Checks the pages and cuts the values out of them: a value within one page is a slice
    /// of that page (no copy); a value spanning pages is joined into one buffer, and the
    /// bytes joined are added to `copied`.
    fn assemble(&self, pages: &[Result<Bytes>], copied: &AtomicU64) -> Result<Vec<Option<Bytes>>> {
        let page = |i: usize| -> Result<&Bytes> {
            match pages.get(i) {
                Some(Ok(p)) => Ok(p),
                Some(Err(e)) => Err(corrupt(format!("value page unreadable: {e}"))),
                None => Err(corrupt("value page missing")),
            }
        };
        let mut out = Vec::with_capacity(self.ptrs.len());
        for (p, span) in self.ptrs.iter().zip(&self.spans) {
            let (Some(p), Some((at, n))) = (p, span) else {
                out.push(None);
                continue;
            };
            let len = p.len as usize;
            let value = match p.loc {
                ValueLoc::Inline { page: pg, offset } => {
                    let buf = page(*at)?;
                    check_page(buf, p.log_seg, pg).map_err(|e| {
                        corrupt(format!("value page {pg} of log segment {}: {e}", p.log_seg))
                    })?;
                    let start = usize::from(offset);
                    if start + len > buf.len() {
                        return Err(corrupt("value runs past its page"));
                    }
                    buf.slice(start..start + len)
                }
                ValueLoc::Raw { page: pg, crc } => {
                    let v = if *n == 1 {
                        let buf = page(*at)?;
                        if len > buf.len() {
                            return Err(corrupt("value runs past its page"));
                        }
                        buf.slice(..len)
                    } else {
                        let mut v = BytesMut::with_capacity(*n as usize * PAGE_SIZE);
                        for i in *at..*at + *n as usize {
                            v.extend_from_slice(page(i)?);
                        }
                        v.truncate(len);
                        copied.fetch_add(len as u64, Ordering::Relaxed);
                        v.freeze()
                    };
                    if crc32c::crc32c(&v) != crc {
                        return Err(corrupt(format!(
                            "value at page {pg} of log segment {} fails its checksum",
                            p.log_seg
                        )));
                    }
                    v
                }
            };
            out.push(Some(value));
        }
        Ok(out)
    }
}

/// Times an asynchronous read retries a submission the device refused as full.
const QUEUE_FULL_RETRIES: u32 = 10_000;
/// Pause between those retries.
const QUEUE_FULL_BACKOFF: std::time::Duration = std::time::Duration::from_micros(50);

/// The pages of one [`Engine::multi_get_async`] call as they arrive.
struct AsyncRead {
    pages: Vec<Option<Result<Bytes>>>,
    remaining: usize,
    plan: Option<ReadPlan>,
    done: Option<OnValues>,
}

/// The poller callback for page `i` of an asynchronous read.
fn page_done(
    i: usize,
    acc: Arc<Mutex<AsyncRead>>,
    reads: Arc<ReadWindow>,
    copied: Arc<AtomicU64>,
) -> crate::io::OnDone {
    Box::new(move |r: std::result::Result<Completion, DeviceError>| {
        let page = r
            .and_then(Completion::into_buf)
            .map_err(EngineError::from)
            .and_then(|b| {
                b.map(page_bytes)
                    .ok_or_else(|| corrupt("a read returned no buffer"))
            });
        finish_page(i, &acc, &reads, &copied, page);
    })
}

/// Records page `i`; the last page assembles the values and calls the caller back.
fn finish_page(
    i: usize,
    acc: &Mutex<AsyncRead>,
    reads: &ReadWindow,
    copied: &AtomicU64,
    page: Result<Bytes>,
) {
    reads.release_page();
    let (plan, done, pages) = {
        let mut a = acc.lock();
        if let Some(slot) = a.pages.get_mut(i) {
            *slot = Some(page);
        }
        a.remaining = a.remaining.saturating_sub(1);
        if a.remaining > 0 {
            return;
        }
        let pages: Vec<Result<Bytes>> = a
            .pages
            .drain(..)
            .map(|p| p.unwrap_or_else(|| Err(corrupt("value page missing"))))
            .collect();
        (a.plan.take(), a.done.take(), pages)
    };
    let result = match plan {
        Some(plan) => plan.assemble(&pages, copied),
        None => Err(corrupt("read plan missing")),
    };
    drop(pages);
    reads.end_read();
    if let Some(done) = done {
        done(result);
    }
}

/// A batch started by [`Engine::try_submit_write`]; pass it to [`Engine::finish_write`].
#[must_use = "a started batch must be finished to learn whether it is durable"]
pub struct PendingWrite {
    state: PendingState,
}

enum PendingState {
    /// Already written (synchronously) or refused.
    Done(Result<()>),
    /// Pages on the device.
    OnDevice {
        ticket: u64,
        /// Completion of its pages.
        pages: Arc<GroupDone>,
        dev: Arc<dyn AppendDevice>,
        /// Flush the device's write cache before acknowledging (through this gate, which
        /// shares one flush among the batches that wait at the same time).
        flush: Option<Arc<FlushGate>>,
    },
}

/// The LightStore engine over an append-only device.
pub struct Engine {
    inner: Mutex<Inner>,
    /// Asynchronous reads in flight (shared with `Inner`, which waits on it before trims).
    reads: Arc<ReadWindow>,
    /// Value bytes copied on the read path (joining multi-page values, `Vec` results).
    read_copied: Arc<AtomicU64>,
    /// Signalled whenever pipelined batches are applied.
    applied: Condvar,
}

struct Inner {
    dev: Arc<dyn AppendDevice>,
    g: Geometry,
    cfg: EngineConfig,
    manifest: ManifestStore,
    snap_seq: u64,
    mem: MemTable,
    /// L0 newest first; each deeper level has at most one run.
    levels: Vec<Vec<Arc<KeyTable>>>,
    runs: HashMap<u64, RunMeta>,
    log_segs: BTreeMap<u32, LogSegMeta>,
    /// The part of each log segment's `dead` that records after the replay checkpoint made
    /// (tombstones, unused page bytes, values replaced in the memtable, failed batches).
    /// Recovery replays those records and counts it again, so the manifest stores `dead`
    /// without it; it becomes part of the stored count when a flush moves the checkpoint.
    tail_dead: BTreeMap<u32, u64>,
    head: Option<Head>,
    kt_segments: Vec<u32>,
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
    /// Live values read by garbage collection and not yet rewritten.
    gc_pending: Vec<GcMove>,
    /// Their bytes as records.
    gc_pending_bytes: usize,
    /// Reclaimed log segments, dropped from `log_segs` but still listed by every manifest
    /// written until `release_reclaimed` (which first closes any hole), so not yet trimmed
    /// or free. Their garbage counts are as the manifest gives them (no tail garbage).
    gc_reclaimed: Vec<LogSegMeta>,
    /// The victim's next window, read while the current window's moves are written.
    gc_read_ahead: Option<GcReadAhead>,
    closed: bool,
    /// Delivers completions of the commands the engine does not wait for in place.
    poller: Arc<Poller>,
    /// Client batches on the device, not yet applied, by ticket (applied in ticket order).
    pipeline: BTreeMap<u64, InFlight>,
    /// Pages of the batches in `pipeline`.
    pipeline_pages: u64,
    /// Ticket of the next pipelined batch.
    next_ticket: u64,
    /// Every ticket up to this one has been applied or failed.
    applied_upto: u64,
    /// Tickets below this fail: they were on the device when an earlier batch failed.
    poisoned_below: u64,
    /// Outcomes of applied batches, until their writers collect them.
    outcomes: HashMap<u64, Result<()>>,
    /// Callers waiting for the pipeline to drain; no new batch enters it meanwhile.
    quiescers: usize,
    /// Reads holding resolved value pointers; value-log trims wait for them.
    reads: Arc<ReadWindow>,
    /// A batch failed after writing some pages: checkpoint before the next one.
    needs_checkpoint: bool,
}

/// A laid-out batch: the pages to write, in order, and the keytable updates to apply once
/// they are durable.
type LaidOut<'a> = (Vec<(Lba, PageBuf)>, Vec<(&'a [u8], Slot)>);

/// A pipelined batch between submission and application.
struct InFlight {
    updates: Vec<(Vec<u8>, Slot)>,
    user_bytes: u64,
    pages: u64,
    /// Set when all its pages completed (or one failed).
    io: Option<std::result::Result<(), DeviceError>>,
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
        let dev_for_poller = dev.clone();
        let mut inner = Inner {
            dev,
            g,
            cfg,
            manifest: if fresh {
                ManifestStore::fresh()
            } else {
                manifest
            },
            snap_seq: snap.seq,
            mem: MemTable::default(),
            levels: vec![Vec::new()],
            runs: HashMap::new(),
            log_segs: snap
                .log_segs
                .iter()
                .map(|l| (l.log_seg, l.clone()))
                .collect(),
            tail_dead: BTreeMap::new(),
            head: None,
            kt_segments: snap.kt_segments.clone(),
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
            gc_pending: Vec::new(),
            gc_pending_bytes: 0,
            gc_reclaimed: Vec::new(),
            gc_read_ahead: None,
            closed: false,
            poller: Arc::new(Poller::start(dev_for_poller).map_err(|e| {
                EngineError::Unrecoverable(format!("cannot start the device poller thread: {e}"))
            })?),
            pipeline: BTreeMap::new(),
            pipeline_pages: 0,
            next_ticket: 1,
            applied_upto: 0,
            poisoned_below: 0,
            outcomes: HashMap::new(),
            quiescers: 0,
            reads: Arc::new(ReadWindow::default()),
            needs_checkpoint: false,
        };
        inner.dev_writes_at_open = inner.dev.stats().writes;
        inner.load_runs(&snap.runs)?;
        inner.rebuild_free_list()?;
        let released = inner.replay()?;
        // The manifest drops the log segments recovery released before they are trimmed.
        inner.persist()?;
        inner.release_log_segments(&released)?;
        let reads = inner.reads.clone();
        Ok(Engine {
            inner: Mutex::new(inner),
            reads,
            read_copied: Arc::new(AtomicU64::new(0)),
            applied: Condvar::new(),
        })
    }

    /// Sets `key` to `value`; durable on return.
    ///
    /// # Errors
    /// `EmptyKey`, `KeyTooLarge`, `ValueTooLarge`, `DeviceFull`, device errors.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(&[WriteOp::Put(key, value)])
    }

    /// Deletes `key` (deleting a missing key is not an error); durable on return.
    ///
    /// # Errors
    /// `EmptyKey`, `KeyTooLarge`, `DeviceFull`, device errors.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.write(&[WriteOp::Delete(key)])
    }

    /// Applies a batch atomically and durably: after a power cut either all of it is there
    /// or none. Concurrent writers passing their operations in one batch share the page
    /// writes (group commit).
    ///
    /// # Errors
    /// As [`Engine::put`]; nothing of a failed batch is applied.
    pub fn write(&self, ops: &[WriteOp<'_>]) -> Result<()> {
        let mut g = self.inner.lock();
        g.check_open()?;
        if ops.is_empty() {
            return Ok(());
        }
        g.validate_batch(ops)?;
        let bound = g.page_bound(ops);
        let put_bytes = g.put_bytes(ops);
        // Several batches share the device: wait for room in the pipeline.
        while g.can_pipeline(bound, put_bytes)
            && !g.pipeline.is_empty()
            && g.pipeline_pages + bound > PIPELINE_PAGES
        {
            self.applied.wait(&mut g);
        }
        if !g.can_pipeline(bound, put_bytes) {
            // Maintenance (GC, flush) or a large batch: alone, with nothing else in flight.
            self.quiesce(&mut g);
            self.reclaim_stepwise(&mut g)?;
            // Other writers may have started batches while the lock was free.
            self.quiesce(&mut g);
            let r = g.write(ops);
            self.applied.notify_all();
            return r;
        }
        let (ticket, pages) = g.start_batch(ops, bound)?;
        let dev = g.dev.clone();
        let flush = g.cfg.flush_writes.then(|| g.flush_gate.clone());
        drop(g);
        self.finish_write(PendingWrite {
            state: PendingState::OnDevice {
                ticket,
                pages,
                dev,
                flush,
            },
        })
    }

    /// Starts a batch without waiting for it: its pages are laid out and submitted, and
    /// [`Engine::finish_write`] later waits until it is durable and applied. A caller may
    /// start several batches before finishing the first; they are applied in the order
    /// they were started, and each is atomic as with [`Engine::write`].
    ///
    /// Returns `Ok(None)` when the batch cannot start now without waiting for batches
    /// already on the device (the pipeline is full, or maintenance or a large batch must
    /// run alone): finish an earlier batch and try again, or call [`Engine::write`] when the
    /// caller has none in flight.
    ///
    /// # Errors
    /// As [`Engine::write`], for errors found before anything is submitted.
    pub fn try_submit_write(&self, ops: &[WriteOp<'_>]) -> Result<Option<PendingWrite>> {
        let mut g = self.inner.lock();
        g.check_open()?;
        if ops.is_empty() {
            return Ok(Some(PendingWrite {
                state: PendingState::Done(Ok(())),
            }));
        }
        g.validate_batch(ops)?;
        let bound = g.page_bound(ops);
        let put_bytes = g.put_bytes(ops);
        if !g.can_pipeline(bound, put_bytes) {
            if !g.pipeline.is_empty() {
                return Ok(None);
            }
            // Nothing in flight: the synchronous path runs now, alone.
            self.reclaim_stepwise(&mut g)?;
            if !g.pipeline.is_empty() {
                // Another writer started a batch while the lock was free between steps.
                return Ok(None);
            }
            let r = g.write(ops);
            self.applied.notify_all();
            return Ok(Some(PendingWrite {
                state: PendingState::Done(r),
            }));
        }
        if !g.pipeline.is_empty() && g.pipeline_pages + bound > PIPELINE_PAGES {
            return Ok(None);
        }
        let (ticket, pages) = g.start_batch(ops, bound)?;
        let dev = g.dev.clone();
        Ok(Some(PendingWrite {
            state: PendingState::OnDevice {
                ticket,
                pages,
                dev,
                flush: g.cfg.flush_writes.then(|| g.flush_gate.clone()),
            },
        }))
    }

    /// Waits until a batch from [`Engine::try_submit_write`] is durable and applied (and so
    /// visible to reads), and returns its outcome.
    ///
    /// # Errors
    /// As [`Engine::write`]; a batch fails when one started before it failed.
    pub fn finish_write(&self, pending: PendingWrite) -> Result<()> {
        let (ticket, pages, dev, flush) = match pending.state {
            PendingState::Done(r) => return r,
            PendingState::OnDevice {
                ticket,
                pages,
                dev,
                flush,
            } => (ticket, pages, dev, flush),
        };
        // Wait outside the lock (woken once, by the last page): other batches are laid out
        // and submitted meanwhile.
        let mut io = pages.wait();
        if let (true, Some(gate)) = (io.is_ok(), flush) {
            // Durable before acknowledged: the pages may still be in the write cache.
            io = gate.flush(|| device_flush(dev.as_ref()));
        }
        let mut g = self.inner.lock();
        if let Some(b) = g.pipeline.get_mut(&ticket) {
            // A page refused at submission already failed the batch.
            b.io = Some(match b.io.take() {
                Some(Err(e)) => Err(e),
                _ => io,
            });
        }
        g.apply_ready();
        self.applied.notify_all();
        while g.applied_upto < ticket {
            self.applied.wait(&mut g);
        }
        g.outcomes.remove(&ticket).unwrap_or(Ok(()))
    }

    /// Waits until no pipelined batch is on the device (maintenance needs a still head).
    /// Garbage collection a window at a time while free segments are scarce, with the
    /// engine lock yielded to waiting readers between windows (a read waits for one window's
    /// reads and moves, never for a whole segment). Returns with nothing in the pipeline
    /// unless another writer started a batch in a gap.
    ///
    /// # Errors
    /// Errors of the reads and moves.
    fn reclaim_stepwise(&self, g: &mut MutexGuard<'_, Inner>) -> Result<()> {
        let mut rounds = g.log_segs.len() + 1;
        let stepped = (|| {
            while g.gc_wanted() && rounds > 0 {
                self.quiesce(g);
                match g.gc_step()? {
                    GcStep::Idle => break,
                    GcStep::Reclaimed => rounds -= 1,
                    GcStep::Progress => {}
                }
                MutexGuard::bump(g);
            }
            Ok(())
        })();
        let released = g.release_reclaimed();
        stepped.and(released)
    }

    fn quiesce(&self, g: &mut MutexGuard<'_, Inner>) {
        g.quiescers += 1;
        while !g.pipeline.is_empty() {
            self.applied.wait(g);
        }
        g.quiescers -= 1;
    }

    /// The value of `key`.
    ///
    /// # Errors
    /// `Corrupt` when the value fails its checksum; device errors.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut v = self.multi_get(&[key])?;
        Ok(v.pop().flatten())
    }

    /// The values of several keys, read from the device in parallel.
    ///
    /// # Errors
    /// As [`Engine::get`].
    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.read_consistent(|inner| {
            Ok(keys
                .iter()
                .map(|k| match inner.lookup(k) {
                    Some(Slot::Value(p)) => Some(p),
                    _ => None,
                })
                .collect())
        })
    }

    /// The values of several keys without waiting: the value pages are submitted to the
    /// device and `done` runs on the engine's poller thread once they are all read, with
    /// the values in key order. Values within one page are slices of the page read (no
    /// copy). At most [`crate::ASYNC_READ_WINDOW`] pages are in flight: a caller beyond it
    /// waits here for earlier reads to finish. `done` must be short and must not call back
    /// into the engine; it runs on the calling thread when nothing needs reading or the
    /// engine is closed.
    pub fn multi_get_async(&self, keys: &[&[u8]], done: OnValues) {
        self.multi_get_async_probed(keys, &[], Box::new(move |r, _| done(r)));
    }

    /// [`Engine::multi_get_async`], and in the same instant (under the same engine lock
    /// hold) whether each of `probes` exists, from DRAM only: a caller can judge a missing
    /// value by keys read at the same point in time (e.g. a GET telling "no such key" from
    /// "the key holds another type"). `done` gets the values and one flag per probe.
    pub fn multi_get_async_probed(&self, keys: &[&[u8]], probes: &[&[u8]], done: OnProbedValues) {
        self.read_async(
            |inner| {
                let present: Vec<bool> = probes
                    .iter()
                    .map(|k| matches!(inner.lookup(k), Some(Slot::Value(_))))
                    .collect();
                let ptrs = keys
                    .iter()
                    .map(|k| match inner.lookup(k) {
                        Some(Slot::Value(p)) => Some(p),
                        _ => None,
                    })
                    .collect();
                Ok((ptrs, present))
            },
            done,
        );
    }

    /// The live pairs of `range` in key order, without waiting: the keys and their value
    /// pointers are taken in one engine-lock hold (one instant), the value pages are read as
    /// in [`Engine::multi_get_async`], and `done` runs on the engine's poller thread with the
    /// pairs. See [`RangeRead`] for the bounds.
    pub fn range_async(&self, range: &RangeRead<'_>, done: OnRange) {
        self.read_async(
            |inner| {
                let mut keys = Vec::new();
                let mut ptrs = Vec::new();
                let mut bytes = 0u64;
                let mut merge = inner.merge_from(range.start);
                while keys.len() < range.limit && (keys.is_empty() || bytes < range.max_bytes) {
                    let Some((k, slot)) = merge.next() else { break };
                    if range.end.is_some_and(|e| k >= e) {
                        break;
                    }
                    if let Slot::Value(p) = slot {
                        if range.skip.is_some_and(|skip| skip(k)) {
                            continue;
                        }
                        bytes += u64::from(p.len);
                        keys.push(k.to_vec());
                        ptrs.push(Some(p));
                    }
                }
                Ok((ptrs, keys))
            },
            Box::new(move |r, keys: Vec<Vec<u8>>| {
                done(r.map(|values| {
                    keys.into_iter()
                        .zip(values)
                        .filter_map(|(k, v)| v.map(|v| (k, v)))
                        .collect()
                }));
            }),
        );
    }

    /// Resolves value pointers (and something `done` needs, `T`) with `resolve` under the
    /// engine lock, then reads their pages without waiting; `done` gets the values in pointer
    /// order (see [`Engine::multi_get_async`]) and the `T` (its default when `resolve` failed).
    fn read_async<T: Default + Send + 'static>(
        &self,
        resolve: impl FnOnce(&Inner) -> Result<(Vec<Option<ValuePtr>>, T)>,
        done: OnValuesWith<T>,
    ) {
        let mut extra = T::default();
        let resolved = {
            let inner = self.inner.lock();
            inner.check_open().and_then(|()| {
                let (ptrs, t) = resolve(&inner)?;
                extra = t;
                let plan = inner.plan_reads(&ptrs)?;
                if !plan.lbas.is_empty() {
                    // From here until the pages are read, no value-log segment is trimmed.
                    self.reads.begin_read();
                }
                Ok((plan, inner.poller.clone()))
            })
        };
        let done: OnValues = Box::new(move |r| done(r, extra));
        let (plan, poller) = match resolved {
            Ok(r) => r,
            Err(e) => return done(Err(e)),
        };
        let n = plan.lbas.len();
        if n == 0 {
            return done(plan.assemble(&[], &self.read_copied));
        }
        let lbas = plan.lbas.clone();
        let acc = Arc::new(Mutex::new(AsyncRead {
            pages: (0..n).map(|_| None).collect(),
            remaining: n,
            plan: Some(plan),
            done: Some(done),
        }));
        let mut cmds: Vec<Command> = lbas
            .iter()
            .map(|&lba| Command::Read {
                lba,
                buf: PageBuf::for_read(),
            })
            .collect();
        let mut callbacks: Vec<crate::io::OnDone> = (0..n)
            .map(|i| page_done(i, acc.clone(), self.reads.clone(), self.read_copied.clone()))
            .collect();
        // At most ASYNC_READ_WINDOW pages of these reads are on the device at once, so writes
        // (and their flushes) always find free tags: a larger request goes a window at a
        // time, this thread waiting for earlier pages. Each window with one doorbell;
        // refused ones (a full queue) one at a time.
        let mut start = 0;
        while start < n {
            let len = (n - start).min(crate::ASYNC_READ_WINDOW);
            self.reads.acquire_pages(len);
            let window_cmds: Vec<Command> = cmds.drain(..len).collect();
            let window_cbs: Vec<crate::io::OnDone> = callbacks.drain(..len).collect();
            let results = poller.submit_many(window_cmds, window_cbs);
            for (j, r) in results.into_iter().enumerate() {
                let Err(r) = r else {
                    continue;
                };
                let i = start + j;
                let mut buf = r.buf.unwrap_or_else(PageBuf::zeroed);
                let mut tries = 0u32;
                loop {
                    let cb =
                        page_done(i, acc.clone(), self.reads.clone(), self.read_copied.clone());
                    match poller.submit(Command::Read { lba: lbas[i], buf }, cb) {
                        Ok(()) => break,
                        Err(r)
                            if matches!(r.error, DeviceError::QueueFull { .. })
                                && tries < QUEUE_FULL_RETRIES =>
                        {
                            // Writes hold the device's tags: let some complete.
                            tries += 1;
                            buf = r.buf.unwrap_or_else(PageBuf::zeroed);
                            std::thread::sleep(QUEUE_FULL_BACKOFF);
                        }
                        Err(r) => {
                            finish_page(
                                i,
                                &acc,
                                &self.reads,
                                &self.read_copied,
                                Err(r.error.into()),
                            );
                            break;
                        }
                    }
                }
            }
            start += len;
        }
    }

    /// Value bytes the read path copied since open (values spanning pages are joined; the
    /// `Vec` results of [`Engine::get`] and [`Engine::multi_get`] are copies).
    pub fn read_copy_bytes(&self) -> u64 {
        self.read_copied.load(Ordering::Relaxed)
    }

    /// The counter behind [`Engine::read_copy_bytes`], for callers that report it.
    pub fn read_copy_counter(&self) -> Arc<AtomicU64> {
        self.read_copied.clone()
    }

    /// Up to `limit` live pairs with `start <= key < end` (no `end`: to the last key), in
    /// key order.
    ///
    /// # Errors
    /// As [`Engine::get`].
    pub fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut keys = Vec::new();
        let values = self.read_consistent(|inner| {
            keys.clear();
            let mut ptrs = Vec::new();
            let mut merge = inner.merge_from(start);
            while keys.len() < limit {
                let Some((k, slot)) = merge.next() else { break };
                if end.is_some_and(|e| k >= e) {
                    break;
                }
                if let Slot::Value(p) = slot {
                    keys.push(k.to_vec());
                    ptrs.push(Some(p));
                }
            }
            Ok(ptrs)
        })?;
        Ok(keys
            .into_iter()
            .zip(values)
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    /// Up to `limit` live keys with `start <= key < end` (no `end`: to the last key), in key
    /// order, from the DRAM-cached keytables and memtable only (no device read).
    ///
    /// # Errors
    /// `Closed`.
    pub fn range_keys(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        let inner = self.inner.lock();
        inner.check_open()?;
        let mut keys = Vec::new();
        let mut merge = inner.merge_from(start);
        while keys.len() < limit {
            let Some((k, slot)) = merge.next() else { break };
            if end.is_some_and(|e| k >= e) {
                break;
            }
            if matches!(slot, Slot::Value(_)) {
                keys.push(k.to_vec());
            }
        }
        Ok(keys)
    }

    /// How many live keys lie in `start <= key < end`, from DRAM only.
    ///
    /// # Errors
    /// `Closed`.
    pub fn count_keys(&self, start: &[u8], end: Option<&[u8]>) -> Result<u64> {
        let inner = self.inner.lock();
        inner.check_open()?;
        let mut n = 0;
        let merge = inner.merge_from(start);
        for (k, slot) in merge {
            if end.is_some_and(|e| k >= e) {
                break;
            }
            if matches!(slot, Slot::Value(_)) {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The value length of each key, `None` for a missing key, from DRAM only (no device
    /// read): existence and length checks cost no I/O.
    ///
    /// # Errors
    /// `Closed`.
    pub fn value_lens(&self, keys: &[&[u8]]) -> Result<Vec<Option<u32>>> {
        let inner = self.inner.lock();
        inner.check_open()?;
        Ok(keys
            .iter()
            .map(|k| match inner.lookup(k) {
                Some(Slot::Value(p)) => Some(p.len),
                _ => None,
            })
            .collect())
    }

    /// Resolves pointers under the lock, then reads the device without it, so a read waiting
    /// on the device does not hold up other reads or writes. A value that garbage collection
    /// moved meanwhile fails its page checks; the lookup is then repeated.
    fn read_consistent(
        &self,
        mut resolve: impl FnMut(&Inner) -> Result<Vec<Option<ValuePtr>>>,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let to_vecs = |v: Vec<Option<Bytes>>| {
            v.into_iter()
                .map(|b| {
                    b.map(|b| {
                        self.read_copied
                            .fetch_add(b.len() as u64, Ordering::Relaxed);
                        b.to_vec()
                    })
                })
                .collect()
        };
        let mut attempts = 0;
        loop {
            let (ptrs, plan, dev) = {
                let inner = self.inner.lock();
                inner.check_open()?;
                let ptrs = resolve(&inner)?;
                let plan = inner.plan_reads(&ptrs)?;
                (ptrs, plan, inner.dev.clone())
            };
            let pages = plan.fetch(dev.as_ref());
            match plan.assemble(&pages, &self.read_copied) {
                Ok(v) => return Ok(to_vecs(v)),
                Err(e) => {
                    attempts += 1;
                    let moved = {
                        let inner = self.inner.lock();
                        resolve(&inner)? != ptrs
                    };
                    if !moved || attempts >= 3 {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Writes the memtable as a keytable run (then compacts if a level is over its budget).
    ///
    /// # Errors
    /// `DeviceFull`, device errors.
    pub fn flush(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        self.quiesce(&mut inner);
        inner.check_open()?;
        inner.flush()
    }

    /// Flushes, then merges every level into one bottom run.
    ///
    /// # Errors
    /// As [`Engine::flush`].
    pub fn compact_all(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        self.quiesce(&mut inner);
        inner.check_open()?;
        inner.flush()?;
        inner.compact_all()
    }

    /// The device's own counters (segments, wear, I/O).
    pub fn device_stats(&self) -> hwftl_sim::DeviceStats {
        let dev = self.inner.lock().dev.clone();
        dev.stats()
    }

    /// Counters and sizes.
    pub fn stats(&self) -> EngineStats {
        self.inner.lock().stats()
    }

    /// Flushes the memtable so the next open replays nothing, and closes the engine.
    ///
    /// # Errors
    /// As [`Engine::flush`].
    pub fn close(self) -> Result<()> {
        let mut inner = self.inner.lock();
        self.quiesce(&mut inner);
        inner.check_open()?;
        if let Some(ahead) = inner.gc_read_ahead.take() {
            ahead.reads.wait();
        }
        inner.flush()?;
        inner.closed = true;
        Ok(())
    }
}

impl Inner {
    fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(EngineError::Closed);
        }
        Ok(())
    }

    fn max_value(&self) -> u64 {
        // The value pointer's length field is 32 bits, and its all-ones value marks a
        // tombstone in a keytable page.
        self.cfg.max_value.min(u64::from(u32::MAX - 1))
    }

    /// Raw pages a put lays out after its packed page (a long key's pages, then the
    /// value's), or 0 for a value packed into the page.
    fn put_raw_pages(key_len: usize, value_len: usize) -> u64 {
        if is_long_key(key_len) {
            key_pages(key_len) + raw_pages(value_len as u64)
        } else if fits_inline(key_len, value_len) {
            0
        } else {
            raw_pages(value_len as u64)
        }
    }

    /// Whether a put is too large for one segment: its value then spans segments.
    fn put_spans(&self, key_len: usize, value_len: usize) -> bool {
        Self::put_raw_pages(key_len, value_len) > u64::from(self.g.pages_per_segment() - 1)
    }

    /// Log segments a put spanning segments takes (0 for one that does not span).
    fn spanning_segments(&self, key_len: usize, value_len: usize) -> usize {
        if !self.put_spans(key_len, value_len) {
            return 0;
        }
        let pps = self.g.pages_per_segment();
        let kp = if is_long_key(key_len) {
            key_pages(key_len) as u32
        } else {
            0
        };
        raw_runs(0, 1 + kp, raw_pages(value_len as u64), pps).len()
    }

    /// Fresh segments the batch's spanning puts take together, and one for the operations
    /// after each (the segment a spanning value ends in takes nothing else).
    fn batch_spanning_segments(&self, ops: &[WriteOp<'_>]) -> usize {
        ops.iter()
            .enumerate()
            .map(|(i, op)| match op {
                WriteOp::Put(k, v) if self.put_spans(k.len(), v.len()) => {
                    self.spanning_segments(k.len(), v.len()) + usize::from(i + 1 < ops.len())
                }
                _ => 0,
            })
            .sum()
    }

    fn validate_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(EngineError::EmptyKey);
        }
        let max = self.cfg.max_key.min(LONG_KEY_MAX);
        if key.len() > max {
            return Err(EngineError::KeyTooLarge {
                len: key.len(),
                max,
            });
        }
        Ok(())
    }

    // ---------------------------------------------------------------- device helpers

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
        let cmds = lbas
            .iter()
            .map(|&lba| Command::Read {
                lba,
                buf: PageBuf::for_read(),
            })
            .collect();
        self.run_io(cmds)?
            .into_iter()
            .map(|c| {
                c.into_buf()?
                    .ok_or_else(|| corrupt("a read returned no buffer"))
            })
            .collect()
    }

    fn write_pages(&mut self, pages: Vec<(Lba, PageBuf)>) -> Result<()> {
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

    // ---------------------------------------------------------------- write path

    fn alloc_segment(&mut self, purpose: &'static str, reserve: usize) -> Result<u32> {
        if self.free.len() <= reserve {
            return Err(EngineError::DeviceFull { purpose });
        }
        let seg = self
            .free
            .pop_first()
            .ok_or(EngineError::DeviceFull { purpose })?;
        Ok(seg)
    }

    /// Makes sure the head segment has `pages` free pages, opening a new log segment if not.
    fn ensure_room(&mut self, pages: u32, reserve: usize) -> Result<()> {
        let pps = self.g.pages_per_segment();
        if self.head.is_some_and(|h| h.next_page + pages <= pps) {
            return Ok(());
        }
        if let Some(h) = self.head.take() {
            if let Some(m) = self.log_segs.get_mut(&h.log_seg) {
                m.sealed_end = Some(h.next_page);
                m.written = u64::from(h.next_page) * PAGE_SIZE as u64;
            }
        }
        let segment = self.alloc_segment("values", reserve)?;
        let log_seg = self.next_log_seg;
        self.next_log_seg += 1;
        self.log_segs.insert(
            log_seg,
            LogSegMeta {
                log_seg,
                segment,
                sealed_end: None,
                written: 0,
                dead: 0,
            },
        );
        self.head = Some(Head {
            log_seg,
            segment,
            next_page: 0,
        });
        // The manifest must know the segment before data lands in it.
        self.persist()
    }

    /// Seals the open page of a batch into the list of pages to write.
    fn seal_open(&mut self, b: &mut BatchPages, last: bool) -> Result<()> {
        let Some((log_seg, page)) = b.open_at.take() else {
            return Ok(());
        };
        let sealed = b.open.seal(log_seg, page, b.batch, last, b.raw_after);
        if let Some(m) = self.log_segs.get_mut(&log_seg) {
            m.written += PAGE_SIZE as u64;
        }
        self.count_tail_dead(log_seg, unused_bytes(b.open.bytes().len()));
        let lba = self.g.lba(SegmentId(self.segment_of(log_seg)?), page);
        b.pages.push((lba, PageBuf::from_slice(&sealed)));
        b.pages.append(&mut b.raws);
        b.open = PageBuilder::new();
        b.raw_after = 0;
        Ok(())
    }

    /// Opens a packed page with room for `raw` raw pages after it.
    fn open_page(&mut self, b: &mut BatchPages, raw: u32, reserve: usize) -> Result<()> {
        self.seal_open(b, false)?;
        self.ensure_room(1 + raw, reserve)?;
        let h = self.head.as_mut().ok_or(EngineError::Closed)?;
        b.open_at = Some((h.log_seg, h.next_page));
        h.next_page += 1;
        Ok(())
    }

    /// Whether a client batch of at most `bound` pages can go down the pipeline: no
    /// maintenance is due and it is small.
    fn can_pipeline(&self, bound: u64, put_bytes: u64) -> bool {
        !self.closed
            && self.fits_user_capacity(put_bytes)
            && !self.needs_checkpoint
            && !self.in_gc
            && self.quiescers == 0
            && bound <= PIPELINE_MAX_BATCH_PAGES
            && self.free.len() > self.gc_low_water()
            && self.mem.bytes() < self.cfg.memtable_bytes
            && self.pages_since_checkpoint + self.pipeline_pages + bound
                < self.replay_budget_pages()
    }

    /// Lays out a client batch and submits its pages in order (the lock held, so batches
    /// reach each segment's write pointer in order). Returns its ticket, the channel its page
    /// completions arrive on and how many were submitted.
    #[allow(clippy::type_complexity)]
    fn start_batch(&mut self, ops: &[WriteOp<'_>], bound: u64) -> Result<(u64, Arc<GroupDone>)> {
        let any_put = ops.iter().any(|op| matches!(op, WriteOp::Put(..)));
        let reserve = if any_put { RESERVED_SEGMENTS } else { 0 };
        let (pages, updates) = self.build_batch(ops, reserve)?;
        let n = pages.len();
        let group = GroupDone::new(n);
        // All pages with one doorbell; from the first refusal on (a full queue: the later
        // pages are then refused too, being past the write pointer) one at a time.
        let lbas: Vec<Lba> = pages.iter().map(|(lba, _)| *lba).collect();
        let cmds: Vec<Command> = pages
            .into_iter()
            .map(|(lba, buf)| Command::Write { lba, buf })
            .collect();
        let callbacks = (0..n).map(|_| group.callback()).collect();
        let mut refused: Option<DeviceError> = None;
        for (i, r) in self
            .poller
            .submit_many(cmds, callbacks)
            .into_iter()
            .enumerate()
        {
            let Err(r) = r else {
                continue;
            };
            if refused.is_some() {
                group.finish_one(Ok(()));
                continue;
            }
            let Some(mut buf) = r.buf else {
                refused = Some(r.error);
                group.finish_one(Ok(()));
                continue;
            };
            let since = std::time::Instant::now();
            loop {
                match self
                    .poller
                    .submit(Command::Write { lba: lbas[i], buf }, group.callback())
                {
                    Ok(()) => break,
                    // Reads hold the tags: let them finish.
                    Err(r)
                        if matches!(r.error, DeviceError::QueueFull { .. })
                            && since.elapsed() < QUEUE_FULL_PATIENCE =>
                    {
                        let Some(b) = r.buf else {
                            refused = Some(r.error);
                            group.finish_one(Ok(()));
                            break;
                        };
                        buf = b;
                        std::thread::yield_now();
                    }
                    Err(r) => {
                        refused = Some(r.error);
                        group.finish_one(Ok(()));
                        break;
                    }
                }
            }
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.pages_since_checkpoint += n as u64;
        self.pipeline_pages += bound;
        self.pipeline.insert(
            ticket,
            InFlight {
                updates: updates.into_iter().map(|(k, s)| (k.to_vec(), s)).collect(),
                user_bytes: Self::user_bytes(ops),
                pages: bound,
                io: refused.map(Err),
            },
        );
        Ok((ticket, group))
    }

    /// Applies, in ticket order, every pipelined batch whose pages have all completed. A
    /// failed batch fails those submitted after it too (they may sit behind its hole).
    fn apply_ready(&mut self) {
        loop {
            let t = self.applied_upto + 1;
            let ready = self.pipeline.get(&t).is_some_and(|b| b.io.is_some());
            if !ready {
                return;
            }
            let Some(b) = self.pipeline.remove(&t) else {
                return;
            };
            self.pipeline_pages = self.pipeline_pages.saturating_sub(b.pages);
            let outcome = match b.io {
                Some(Ok(())) if t >= self.poisoned_below => {
                    self.stats.user_bytes_written += b.user_bytes;
                    for (k, slot) in b.updates {
                        self.apply(&k, slot);
                    }
                    Ok(())
                }
                other => {
                    // Its records are garbage; the head may hold a hole.
                    for (k, slot) in &b.updates {
                        if let Slot::Value(p) = slot {
                            self.mark_dead(&[(k.len(), *p)]);
                        }
                    }
                    self.abandon_head_after_failure();
                    self.poisoned_below = self.poisoned_below.max(self.next_ticket);
                    Err(match other {
                        Some(Err(e)) => EngineError::Device(e),
                        _ => EngineError::BatchAborted,
                    })
                }
            };
            self.outcomes.insert(t, outcome);
            self.applied_upto = t;
        }
    }

    /// Checks a batch's keys and value sizes; returns whether it holds a put.
    fn validate_batch(&self, ops: &[WriteOp<'_>]) -> Result<bool> {
        let max_value = self.max_value();
        let mut any_put = false;
        for op in ops {
            match op {
                WriteOp::Put(k, v) => {
                    self.validate_key(k)?;
                    if v.len() as u64 > max_value {
                        return Err(EngineError::ValueTooLarge {
                            len: v.len() as u64,
                            max: max_value,
                        });
                    }
                    any_put = true;
                }
                WriteOp::Delete(k) => self.validate_key(k)?,
            }
        }
        Ok(any_put)
    }

    /// Value-log bytes the batch's puts will hold live (a put spanning segments holds them
    /// whole).
    fn put_bytes(&self, ops: &[WriteOp<'_>]) -> u64 {
        let segment = self.g.segment_bytes();
        ops.iter()
            .map(|op| match op {
                WriteOp::Put(k, v) if self.put_spans(k.len(), v.len()) => {
                    self.spanning_segments(k.len(), v.len()) as u64 * segment
                }
                WriteOp::Put(k, v) => stored_record_bytes(k.len(), v.len()),
                WriteOp::Delete(_) => 0,
            })
            .sum()
    }

    /// Value bytes clients may keep live: the segments values can use, less the
    /// over-provisioned share.
    fn user_capacity(&self) -> u64 {
        // Keytables take segments too: the ones they hold and room for a compaction's output.
        let keytables = (self.kt_segments.len() + self.keytable_headroom()) as u64;
        let usable = u64::from(self.g.segments())
            .saturating_sub(MANIFEST_SEGMENTS.len() as u64 + RESERVED_SEGMENTS as u64 + keytables);
        let op = u64::from(self.cfg.overprovision_percent.min(90));
        usable * self.g.segment_bytes() / 100 * (100 - op)
    }

    /// Live value-log bytes (written minus known garbage; garbage the memtable shadows in
    /// the runs is known only once it is flushed, so this may over-count until then).
    fn live_bytes(&self) -> u64 {
        self.log_segs
            .values()
            .map(|m| m.written.saturating_sub(m.dead))
            .sum()
    }

    /// Whether `put_bytes` more live bytes stay within the user capacity by the current
    /// count (cheap while the log itself is smaller than the capacity).
    fn fits_user_capacity(&self, put_bytes: u64) -> bool {
        if put_bytes == 0 || self.in_gc {
            return true;
        }
        let cap = self.user_capacity();
        let log_bound = self.log_segs.len() as u64 * self.g.segment_bytes();
        log_bound + put_bytes <= cap || self.live_bytes() + put_bytes <= cap
    }

    /// Refuses a client put batch that would pass the user capacity, after flushing the
    /// memtable when that makes the garbage count exact.
    fn check_user_capacity(&mut self, put_bytes: u64) -> Result<()> {
        if self.fits_user_capacity(put_bytes) {
            return Ok(());
        }
        if !self.mem.is_empty() {
            self.flush()?;
            if self.fits_user_capacity(put_bytes) {
                return Ok(());
            }
        }
        Err(EngineError::CapacityFull {
            live: self.live_bytes() + put_bytes,
            capacity: self.user_capacity(),
        })
    }

    /// Most value-log pages a batch can take: one packed page per operation plus one, and
    /// every raw page; a put spanning segments takes them whole (such a batch is never
    /// pipelined: see [`Inner::can_pipeline`]).
    fn page_bound(&self, ops: &[WriteOp<'_>]) -> u64 {
        let pps = u64::from(self.g.pages_per_segment());
        ops.iter()
            .map(|op| match op {
                WriteOp::Put(k, v) if self.put_spans(k.len(), v.len()) => {
                    (self.spanning_segments(k.len(), v.len()) as u64 * pps)
                        .max(PIPELINE_MAX_BATCH_PAGES + 1)
                }
                WriteOp::Put(k, v) => 1 + Self::put_raw_pages(k.len(), v.len()),
                WriteOp::Delete(k) if is_long_key(k.len()) => 1 + key_pages(k.len()),
                WriteOp::Delete(_) => 1,
            })
            .sum::<u64>()
            + 1
    }

    /// Ends the head segment where it stands (after a failed or abandoned batch it may hold
    /// holes or a torn batch); the next write opens a new one.
    /// A batch failed on the device: its segment may hold a hole, and recovery's replay
    /// stops at a hole. Batches written after it (in a new segment) would be acknowledged
    /// yet not replayed, so the next batch first moves the checkpoint past the hole.
    fn abandon_head_after_failure(&mut self) {
        self.abandon_head();
        self.needs_checkpoint = true;
    }

    fn abandon_head(&mut self) {
        if let Some(h) = self.head.take() {
            if let Some(m) = self.log_segs.get_mut(&h.log_seg) {
                m.sealed_end = Some(h.next_page);
            }
        }
    }

    /// Lays out a batch in value-log pages at the head: the pages to write, in order, and
    /// the keytable updates to apply once they are durable. On error the head is abandoned.
    /// Reserves raw pages after the batch's open packed page for a long key (and a value, for
    /// a put) and queues them: the key zero-padded to whole pages, then the value's pages.
    /// Returns the log segment and the first raw page.
    fn lay_out_long(
        &mut self,
        b: &mut BatchPages,
        key: &[u8],
        value: Option<&[u8]>,
        reserve: usize,
    ) -> Result<(u32, u32)> {
        let kp = key_pages(key.len()) as u32;
        let vp = value.map_or(0, |v| raw_pages(v.len() as u64) as u32);
        let n = kp + vp;
        let payload = if value.is_some() {
            LONG_PUT_PAYLOAD
        } else {
            LONG_DELETE_PAYLOAD
        };
        let pps = self.g.pages_per_segment();
        let room = self.head.is_some_and(|h| h.next_page + n <= pps);
        if b.open_at.is_none() || b.open.free() < RECORD_HEADER + payload || !room {
            self.open_page(b, n, reserve)?;
        }
        let (Some((log_seg, _)), Some(h)) = (b.open_at, self.head.as_mut()) else {
            return Err(EngineError::Closed);
        };
        let first = h.next_page;
        h.next_page += n;
        let segment = h.segment;
        let lba = |g: &Geometry, i: u32| g.lba(SegmentId(segment), first + i);
        for (i, chunk) in key.chunks(PAGE_SIZE).enumerate() {
            b.raws
                .push((lba(&self.g, i as u32), PageBuf::from_slice(chunk)));
        }
        if let Some(v) = value {
            for (i, chunk) in v.chunks(PAGE_SIZE).enumerate() {
                b.raws
                    .push((lba(&self.g, kp + i as u32), PageBuf::from_slice(chunk)));
            }
            if v.is_empty() {
                b.raws.push((lba(&self.g, kp), PageBuf::zeroed()));
            }
        }
        b.raw_after += n;
        if let Some(m) = self.log_segs.get_mut(&log_seg) {
            m.written += u64::from(n) * PAGE_SIZE as u64;
        }
        Ok((log_seg, first))
    }

    /// Lays out a put too large for one segment (see [`crate::vlog_format`]): a fresh
    /// segment for its record, its long key's pages and the value's first pages, then as many
    /// continuation segments as the value needs, each opened with a Continued record. The
    /// last segment is closed after the value, and its packed page is sealed now (as the
    /// batch's last when `last_in_batch`), so nothing else shares the value's segments.
    ///
    /// Segments are checked up front only for the batch's spanning values (and one more
    /// after each); a batch whose other operations then find no free segment fails halfway,
    /// and what it claimed becomes garbage (see [`Inner::forget_layout`]).
    fn lay_out_spanning(
        &mut self,
        b: &mut BatchPages,
        key: &[u8],
        value: &[u8],
        seq: u64,
        reserve: usize,
        last_in_batch: bool,
    ) -> Result<ValuePtr> {
        let pps = self.g.pages_per_segment();
        let long = is_long_key(key.len());
        let kp = if long { key_pages(key.len()) as u32 } else { 0 };
        if kp + 2 > pps {
            return Err(EngineError::KeyTooLarge {
                len: key.len(),
                max: (pps as usize).saturating_sub(2) * PAGE_SIZE,
            });
        }
        // Every segment it takes must be free before anything is laid out.
        let segments = self.spanning_segments(key.len(), value.len());
        let fresh_head = self.head.is_some_and(|h| h.next_page == 0);
        // (The batch's operations after it need a segment of their own.)
        let more = usize::from(!last_in_batch);
        if self.free.len() < segments - usize::from(fresh_head) + more + reserve {
            return Err(EngineError::DeviceFull { purpose: "values" });
        }
        self.open_page(b, pps - 1, reserve)?;
        let (Some((head_seg, head_page)), Some(h)) = (b.open_at, self.head) else {
            return Err(EngineError::Closed);
        };
        let first = h.next_page + kp;
        let crc = crc32c::crc32c(value);
        if long {
            let payload = long_put_payload(h.next_page, key, crc);
            b.open
                .add_long(
                    RecordKind::LongPut,
                    seq,
                    key.len(),
                    value.len() as u32,
                    &payload,
                )
                .ok_or_else(|| corrupt("long record does not fit a fresh page"))?;
        } else {
            b.open
                .add(
                    RecordKind::Indirect,
                    seq,
                    key,
                    value.len() as u32,
                    &indirect_payload(first, crc),
                )
                .ok_or_else(|| corrupt("indirect record does not fit a fresh page"))?;
        }
        let key_chunks = if long {
            key.chunks(PAGE_SIZE)
        } else {
            [].chunks(PAGE_SIZE)
        };
        for chunk in key_chunks.chain(value.chunks(PAGE_SIZE)) {
            if self.head.is_some_and(|h| h.next_page == pps) {
                // On to the next segment, which the value's pointer expects to be the next
                // log segment (nothing else opens one while the batch is laid out).
                let expected = self.head.map(|h| h.log_seg + 1);
                self.seal_open(b, false)?;
                self.ensure_room(pps, reserve)?;
                let h = self.head.as_mut().ok_or(EngineError::Closed)?;
                if Some(h.log_seg) != expected {
                    return Err(corrupt("a spanning value's segments are not consecutive"));
                }
                b.open_at = Some((h.log_seg, h.next_page));
                h.next_page += 1;
                b.open
                    .add_continued(seq, value.len() as u32, head_seg, head_page)
                    .ok_or_else(|| corrupt("continuation record does not fit a fresh page"))?;
            }
            let h = self.head.as_mut().ok_or(EngineError::Closed)?;
            let lba = self.g.lba(SegmentId(h.segment), h.next_page);
            h.next_page += 1;
            let log_seg = h.log_seg;
            b.raws.push((lba, PageBuf::from_slice(chunk)));
            b.raw_after += 1;
            if let Some(m) = self.log_segs.get_mut(&log_seg) {
                m.written += PAGE_SIZE as u64;
            }
        }
        self.seal_open(b, last_in_batch)?;
        // The value owns the rest of its last segment (see `ValuePtr::segment_shares`): the
        // segment is sealed now, counted as written whole, and the manifest says so before
        // the data lands, so neither the next write nor a reopen takes its unwritten rest for
        // free space (garbage collection would then move the whole value to win it back).
        if let Some(h) = self.head.take() {
            if let Some(m) = self.log_segs.get_mut(&h.log_seg) {
                m.sealed_end = Some(h.next_page);
                m.written = u64::from(pps) * PAGE_SIZE as u64;
            }
        }
        self.persist()?;
        Ok(ValuePtr {
            log_seg: head_seg,
            loc: ValueLoc::Raw { page: first, crc },
            len: value.len() as u32,
        })
    }

    fn build_batch<'a>(&mut self, ops: &[WriteOp<'a>], reserve: usize) -> Result<LaidOut<'a>> {
        // Values spanning segments take theirs whole: all must be free before any is laid
        // out (a batch failing halfway costs a manifest write and a flush before the next
        // batch; see `forget_layout`).
        let spanning = self.batch_spanning_segments(ops);
        if spanning > 0 && self.free.len() < spanning + reserve {
            return Err(EngineError::DeviceFull { purpose: "values" });
        }
        // What the layout may claim: pages after the head's write pointer, and the log
        // segments it opens (see `forget_layout`).
        let claimed_from = LayoutStart {
            head: self.head.and_then(|h| {
                let m = self.log_segs.get(&h.log_seg)?;
                let tail = self.tail_dead.get(&h.log_seg).copied().unwrap_or(0);
                Some((h.log_seg, m.written, m.dead, tail))
            }),
            first_new: self.next_log_seg,
        };
        let batch = self.next_batch;
        self.next_batch += 1;
        let mut b = BatchPages {
            pages: Vec::new(),
            open: PageBuilder::new(),
            open_at: None,
            raws: Vec::new(),
            raw_after: 0,
            batch,
        };
        let mut updates: Vec<(&'a [u8], Slot)> = Vec::with_capacity(ops.len());
        let result = (|| -> Result<()> {
            for (i, op) in ops.iter().enumerate() {
                let seq = self.next_seq;
                self.next_seq += 1;
                match *op {
                    WriteOp::Put(k, v) if self.put_spans(k.len(), v.len()) => {
                        let last = i + 1 == ops.len();
                        let ptr = self.lay_out_spanning(&mut b, k, v, seq, reserve, last)?;
                        updates.push((k, Slot::Value(ptr)));
                    }
                    WriteOp::Put(k, v) if is_long_key(k.len()) => {
                        let (log_seg, first) = self.lay_out_long(&mut b, k, Some(v), reserve)?;
                        let value_first = first + key_pages(k.len()) as u32;
                        let crc = crc32c::crc32c(v);
                        let payload = long_put_payload(first, k, crc);
                        b.open
                            .add_long(RecordKind::LongPut, seq, k.len(), v.len() as u32, &payload)
                            .ok_or_else(|| corrupt("long record does not fit"))?;
                        updates.push((
                            k,
                            Slot::Value(ValuePtr {
                                log_seg,
                                loc: ValueLoc::Raw {
                                    page: value_first,
                                    crc,
                                },
                                len: v.len() as u32,
                            }),
                        ));
                    }
                    WriteOp::Delete(k) if is_long_key(k.len()) => {
                        let (log_seg, first) = self.lay_out_long(&mut b, k, None, reserve)?;
                        let mut payload = [0u8; LONG_DELETE_PAYLOAD];
                        payload[..4].copy_from_slice(&first.to_le_bytes());
                        payload[4..].copy_from_slice(&crc32c::crc32c(k).to_le_bytes());
                        b.open
                            .add_long(RecordKind::LongDelete, seq, k.len(), 0, &payload)
                            .ok_or_else(|| corrupt("long record does not fit"))?;
                        // Needed only until the next flush: dead at once, as any delete.
                        self.count_tail_dead(log_seg, delete_record_bytes(k.len()));
                        updates.push((k, Slot::Tombstone));
                    }
                    WriteOp::Put(k, v) if fits_inline(k.len(), v.len()) => {
                        let need = RECORD_HEADER + k.len() + v.len();
                        if b.open_at.is_none() || b.open.free() < need {
                            self.open_page(&mut b, 0, reserve)?;
                        }
                        let Some((log_seg, page)) = b.open_at else {
                            return Err(EngineError::Closed);
                        };
                        let offset = b
                            .open
                            .add(RecordKind::Put, seq, k, v.len() as u32, v)
                            .ok_or_else(|| corrupt("record does not fit a fresh page"))?;
                        updates.push((
                            k,
                            Slot::Value(ValuePtr {
                                log_seg,
                                loc: ValueLoc::Inline { page, offset },
                                len: v.len() as u32,
                            }),
                        ));
                    }
                    WriteOp::Put(k, v) => {
                        let n = raw_pages(v.len() as u64) as u32;
                        let need = RECORD_HEADER + k.len() + INDIRECT_PAYLOAD;
                        let pps = self.g.pages_per_segment();
                        let room = self.head.is_some_and(|h| h.next_page + n <= pps);
                        if b.open_at.is_none() || b.open.free() < need || !room {
                            self.open_page(&mut b, n, reserve)?;
                        }
                        let (Some((log_seg, _)), Some(h)) = (b.open_at, self.head.as_mut()) else {
                            return Err(EngineError::Closed);
                        };
                        let first = h.next_page;
                        h.next_page += n;
                        let segment = h.segment;
                        let crc = crc32c::crc32c(v);
                        for (i, chunk) in v.chunks(PAGE_SIZE).enumerate() {
                            let lba = self.g.lba(SegmentId(segment), first + i as u32);
                            b.raws.push((lba, PageBuf::from_slice(chunk)));
                        }
                        if v.is_empty() {
                            let lba = self.g.lba(SegmentId(segment), first);
                            b.raws.push((lba, PageBuf::zeroed()));
                        }
                        b.raw_after += n;
                        if let Some(m) = self.log_segs.get_mut(&log_seg) {
                            m.written += u64::from(n) * PAGE_SIZE as u64;
                        }
                        b.open
                            .add(
                                RecordKind::Indirect,
                                seq,
                                k,
                                v.len() as u32,
                                &indirect_payload(first, crc),
                            )
                            .ok_or_else(|| corrupt("indirect record does not fit"))?;
                        updates.push((
                            k,
                            Slot::Value(ValuePtr {
                                log_seg,
                                loc: ValueLoc::Raw { page: first, crc },
                                len: v.len() as u32,
                            }),
                        ));
                    }
                    WriteOp::Delete(k) => {
                        let need = RECORD_HEADER + k.len();
                        if b.open_at.is_none() || b.open.free() < need {
                            self.open_page(&mut b, 0, reserve)?;
                        }
                        b.open
                            .add(RecordKind::Delete, seq, k, 0, &[])
                            .ok_or_else(|| corrupt("delete record does not fit"))?;
                        // A delete record is needed only until the next flush: count it dead.
                        if let Some((log_seg, _)) = b.open_at {
                            self.count_tail_dead(log_seg, delete_record_bytes(k.len()));
                        }
                        updates.push((k, Slot::Tombstone));
                    }
                }
            }
            self.seal_open(&mut b, true)
        })();
        if let Err(e) = result {
            self.abandon_head();
            self.forget_layout(claimed_from);
            return Err(e);
        }
        Ok((b.pages, updates))
    }

    /// After a batch failed halfway through its layout (no free segment left for the rest),
    /// before anything of it was submitted: every page it claimed stays unwritten, so all of
    /// it is garbage (what the layout had counted as garbage in those pages is taken back
    /// first, so nothing counts twice). Otherwise the segments it opened would look full of
    /// live data, and garbage collection would never take them back (a drive left full for
    /// good). The claimed pages are a hole where recovery's replay stops: the garbage is
    /// counted as the tail's (left out of the manifest until the checkpoint moves, as a
    /// replay cuts the log back to the hole and never counts it), and the checkpoint is moved
    /// past it ([`Inner::close_hole`]) before the next client batch is laid out and before
    /// garbage collection's victims leave the manifest, as after a failed device write.
    fn forget_layout(&mut self, start: LayoutStart) {
        let mut claimed_any = false;
        for m in self.log_segs.values_mut() {
            let (written, dead, tail) = match start.head {
                Some((log_seg, written, dead, tail)) if log_seg == m.log_seg => {
                    (written, dead, tail)
                }
                _ if m.log_seg >= start.first_new => (0, 0, 0),
                _ => continue,
            };
            let claimed = m.written.saturating_sub(written);
            if claimed == 0 {
                continue;
            }
            claimed_any = true;
            m.dead = dead + claimed;
            self.tail_dead.insert(m.log_seg, tail + claimed);
        }
        if claimed_any {
            self.needs_checkpoint = true;
        }
    }

    /// Moves the replay checkpoint past the hole a failed batch left (see
    /// `abandon_head_after_failure` and `forget_layout`), if there is one: recovery's replay
    /// stops at a hole, so nothing written after it counts until the checkpoint is past it.
    /// A client batch waits for this; garbage collection may move values past a hole, but
    /// its victims leave the manifest only after this (`release_reclaimed`).
    ///
    /// # Errors
    /// The flush's, or writing the manifest.
    fn close_hole(&mut self) -> Result<()> {
        if !self.needs_checkpoint {
            return Ok(());
        }
        self.flush()?;
        if self.needs_checkpoint {
            // Nothing to flush, but the hole is still after the checkpoint.
            self.move_checkpoint();
            self.persist()?;
        }
        Ok(())
    }

    /// Counts a durable batch's user bytes and applies its updates to the memtable.
    fn commit_updates(&mut self, user_bytes: u64, updates: Vec<(&[u8], Slot)>) {
        if !self.in_gc {
            self.stats.user_bytes_written += user_bytes;
        }
        for (k, slot) in updates {
            self.apply(k, slot);
        }
    }

    fn user_bytes(ops: &[WriteOp<'_>]) -> u64 {
        ops.iter()
            .map(|op| match op {
                WriteOp::Put(k, v) => (k.len() + v.len()) as u64,
                WriteOp::Delete(k) => k.len() as u64,
            })
            .sum()
    }

    /// Writes a batch and waits for it (the synchronous path: garbage collection, and client
    /// batches that need maintenance first or are too large to pipeline).
    fn write(&mut self, ops: &[WriteOp<'_>]) -> Result<()> {
        self.check_open()?;
        if ops.is_empty() {
            return Ok(());
        }
        let any_put = self.validate_batch(ops)?;
        if any_put && !self.in_gc {
            self.check_user_capacity(self.put_bytes(ops))?;
        }
        if !self.in_gc {
            self.reclaim_if_low()?;
        }
        // Deletes may dip into the reserve and client puts may not. Garbage collection's
        // moves leave one segment, so that the flush which closes a hole one of its batches
        // may leave (see `forget_layout`) still finds room for its keytables.
        let reserve = if self.in_gc {
            GC_MOVE_RESERVE
        } else if any_put {
            RESERVED_SEGMENTS
        } else {
            0
        };
        let spanning = self.batch_spanning_segments(ops);
        if spanning > 0 && !self.in_gc {
            self.reclaim_for(spanning + reserve)?;
        }
        if !self.in_gc {
            // After garbage collection, which may write its moves past a hole (its victims
            // are released only once the hole is closed), before this batch.
            self.close_hole()?;
        }
        let (pages, updates) = self.build_batch(ops, reserve)?;
        let n = pages.len() as u64;
        let mut written = self.write_pages(pages);
        // A client batch is acknowledged only once the device's write cache holds none of
        // it (garbage collection's moves are made durable by the manifest write after them).
        if written.is_ok() && !self.in_gc && self.cfg.flush_writes {
            written = self.sync_device();
        }
        if let Err(e) = written {
            // Its records are garbage, as a failed pipelined batch's (`apply_ready`).
            for (k, slot) in &updates {
                if let Slot::Value(p) = slot {
                    self.mark_dead(&[(k.len(), *p)]);
                }
            }
            self.abandon_head_after_failure();
            return Err(e);
        }
        self.pages_since_checkpoint += n;
        self.commit_updates(Self::user_bytes(ops), updates);
        if self.mem.bytes() >= self.cfg.memtable_bytes
            || self.pages_since_checkpoint >= self.replay_budget_pages()
        {
            self.flush()?;
        }
        Ok(())
    }

    /// Value-log pages after the checkpoint that trigger a flush: bounded for recovery time,
    /// and to a sixteenth of the device so garbage collection always has sealed, flushed
    /// segments to choose from.
    fn replay_budget_pages(&self) -> u64 {
        let device = u64::from(self.g.segments()) * u64::from(self.g.pages_per_segment());
        REPLAY_BUDGET_PAGES
            .min(device / 16)
            .max(u64::from(self.g.pages_per_segment()))
    }

    /// Puts a slot into the memtable, counting the value it replaces as garbage.
    fn apply(&mut self, key: &[u8], slot: Slot) {
        if let Some(Slot::Value(old)) = self.mem.insert(key, slot) {
            self.mark_dead(&[(key.len(), old)]);
        }
    }

    /// Counts values that records after the checkpoint made garbage.
    fn mark_dead(&mut self, dead: &[Invalidated]) {
        let pps = self.g.pages_per_segment();
        for (klen, p) in dead {
            for (log_seg, bytes) in p.segment_shares(*klen, pps) {
                self.count_tail_dead(log_seg, bytes);
            }
        }
    }

    /// Counts a dead value's garbage for good (not to be counted again by a replay).
    fn count_dead(&mut self, key_len: usize, p: &ValuePtr) {
        for (log_seg, bytes) in p.segment_shares(key_len, self.g.pages_per_segment()) {
            if let Some(m) = self.log_segs.get_mut(&log_seg) {
                m.dead += bytes;
            }
        }
    }

    /// Counts garbage that a record after the replay checkpoint made (see `tail_dead`).
    fn count_tail_dead(&mut self, log_seg: u32, bytes: u64) {
        if let Some(m) = self.log_segs.get_mut(&log_seg) {
            m.dead += bytes;
            *self.tail_dead.entry(log_seg).or_default() += bytes;
        }
    }

    /// The checkpoint moves to the head: the log before it is never replayed again, so the
    /// garbage its records made is final and goes into the manifest from now on.
    fn move_checkpoint(&mut self) {
        self.needs_checkpoint = false;
        self.checkpoint = self.head_position();
        self.pages_since_checkpoint = 0;
        self.tail_dead.clear();
    }

    // ---------------------------------------------------------------- read path

    fn lookup(&self, key: &[u8]) -> Option<Slot> {
        if let Some(s) = self.mem.get(key) {
            return Some(s);
        }
        if self.cfg.uncached_keytables {
            return self
                .levels
                .iter()
                .flatten()
                .find_map(|run| self.lookup_on_device(run, key));
        }
        self.levels.iter().flatten().find_map(|run| run.get(key))
    }

    /// The ablation of keytable caching (`EngineConfig::uncached_keytables`): after the
    /// run's bloom filter, the page that may hold `key` is found in the run's sparse page
    /// index and read from the device, and the key is searched in that page. A page the
    /// search cannot answer alone (an entry running on into the next page: keys of 8 KiB or
    /// more) or cannot read is answered from DRAM.
    fn lookup_on_device(&self, run: &KeyTable, key: &[u8]) -> Option<Slot> {
        if !run.may_contain(key) {
            return None;
        }
        let (Some(index), Some(meta)) = (self.kt_index.get(&run.id()), self.runs.get(&run.id()))
        else {
            return run.get(key);
        };
        let pos = index.partition_point(|(_, first)| first.as_slice() <= key);
        // Before the run's first key: not in it.
        let &(page_no, _) = index.get(pos.checked_sub(1)?)?;
        let mut skip = u64::from(page_no);
        let lba = meta.extents.iter().find_map(|&(first, n)| {
            if skip < u64::from(n) {
                Some(Lba(first + skip))
            } else {
                skip -= u64::from(n);
                None
            }
        })?;
        match self.read_pages(&[lba]).ok().and_then(|mut v| v.pop()) {
            Some(page) => KeyTable::search_page(run.id(), page_no, &page, key)
                .unwrap_or_else(|_| run.get(key)),
            None => run.get(key),
        }
    }

    fn merge_from<'a>(&'a self, start: &[u8]) -> Merge<'a> {
        let mut sources: Vec<Source<'a>> = vec![Box::new(self.mem.range_from(start))];
        for run in self.levels.iter().flatten() {
            let i = run.seek(start);
            sources.push(run_source(run, i));
        }
        Merge::new(sources)
    }

    /// Reads values under the engine lock (recovery and garbage collection).
    fn read_values(&self, ptrs: &[Option<ValuePtr>]) -> Result<Vec<Option<Bytes>>> {
        let plan = self.plan_reads(ptrs)?;
        let pages = self.read_pages(&plan.lbas)?;
        let pages: Vec<Result<Bytes>> = pages.into_iter().map(|p| Ok(page_bytes(p))).collect();
        plan.assemble(&pages, &AtomicU64::new(0))
    }

    /// Which pages hold these values.
    fn plan_reads(&self, ptrs: &[Option<ValuePtr>]) -> Result<ReadPlan> {
        let mut plan = ReadPlan {
            ptrs: ptrs.to_vec(),
            lbas: Vec::new(),
            spans: Vec::with_capacity(ptrs.len()),
        };
        // Small values read in key order (ranges, sequential multi-gets) often share a packed
        // page with the one before: that page is read once.
        let mut last_inline: Option<(u32, u32, usize)> = None;
        for p in ptrs {
            let Some(p) = p else {
                plan.spans.push(None);
                continue;
            };
            if let ValueLoc::Inline { page, .. } = p.loc {
                match last_inline {
                    Some((log_seg, pg, at)) if log_seg == p.log_seg && pg == page => {
                        plan.spans.push(Some((at, 1)));
                        continue;
                    }
                    _ => last_inline = Some((p.log_seg, page, plan.lbas.len())),
                }
            }
            let at = plan.lbas.len();
            for run in p.runs(self.g.pages_per_segment()) {
                let seg = SegmentId(self.segment_of(run.log_seg)?);
                plan.lbas
                    .extend((run.first..run.first + run.count).map(|pg| self.g.lba(seg, pg)));
            }
            plan.spans.push(Some((at, (plan.lbas.len() - at) as u32)));
        }
        Ok(plan)
    }

    // ---------------------------------------------------------------- flush and compaction

    /// Writes a run's pages into keytable segments; returns its extents.
    fn write_run(&mut self, t: &KeyTable) -> Result<Vec<(u64, u32)>> {
        let pages = t.encode_pages();
        let mut extents: Vec<(u64, u32)> = Vec::new();
        let mut i = 0;
        while i < pages.len() {
            let cur = self.kt_segments.last().copied();
            let room = match cur {
                Some(s) => {
                    let info = self.dev.segment_info(SegmentId(s))?;
                    if info.state == SegmentState::Full || info.state == SegmentState::ReadOnly {
                        0
                    } else {
                        info.pages - info.write_pointer
                    }
                }
                None => 0,
            };
            if room == 0 {
                let s = self.alloc_segment("keytables", 0)?;
                self.kt_segments.push(s);
                continue;
            }
            let Some(seg) = cur else { continue };
            let n = (room as usize).min(pages.len() - i);
            let wp = self.dev.segment_info(SegmentId(seg))?.write_pointer;
            let chunk: Vec<(Lba, PageBuf)> = (0..n)
                .map(|j| {
                    (
                        self.g.lba(SegmentId(seg), wp + j as u32),
                        PageBuf::from_slice(&pages[i + j]),
                    )
                })
                .collect();
            let first = chunk[0].0;
            self.write_pages(chunk)?;
            match extents.last_mut() {
                Some((lba, cnt)) if *lba + u64::from(*cnt) == first.0 => *cnt += n as u32,
                _ => extents.push((first.0, n as u32)),
            }
            i += n;
        }
        Ok(extents)
    }

    fn add_run(&mut self, t: KeyTable, level: usize, extents: Vec<(u64, u32)>) {
        if self.cfg.uncached_keytables {
            self.kt_index.insert(t.id(), t.page_index());
        }
        let order = if level == 0 {
            let o = self.next_l0_order;
            self.next_l0_order += 1;
            o
        } else {
            0
        };
        self.runs.insert(
            t.id(),
            RunMeta {
                id: t.id(),
                level: level as u8,
                order,
                extents,
            },
        );
        while self.levels.len() <= level {
            self.levels.push(Vec::new());
        }
        if level == 0 {
            self.levels[0].insert(0, Arc::new(t));
        } else {
            self.levels[level] = vec![Arc::new(t)];
        }
    }

    fn flush(&mut self) -> Result<()> {
        if self.mem.is_empty() {
            if self.pages_since_checkpoint > 0 {
                self.move_checkpoint();
                self.persist()?;
            }
            return Ok(());
        }
        let id = self.next_run;
        self.next_run += 1;
        let mut b = KeyTableBuilder::new(id);
        // Garbage is counted here, exactly once per version: each flushed key shadows the
        // newest older version in the runs (found in DRAM, bloom filter first).
        let mut dead: Vec<Invalidated> = Vec::new();
        for (k, s) in self.mem.iter() {
            b.push(k, &s);
            if let Some(Slot::Value(old)) = self.levels.iter().flatten().find_map(|r| r.get(k)) {
                dead.push((k.len(), old));
            }
        }
        let t = b.finish(self.cfg.bloom_fp_rate);
        let extents = self.write_run(&t)?;
        self.add_run(t, 0, extents);
        // Counted once, for good: the flush is never replayed (the versions shadowed are in
        // runs, so before the checkpoint).
        for (klen, old) in &dead {
            self.count_dead(*klen, old);
        }
        // Everything in the memtable was written before the head's next page.
        self.move_checkpoint();
        self.persist()?;
        self.mem.clear();
        self.stats.flushes += 1;
        self.maybe_compact()
    }

    fn head_position(&self) -> (u32, u32) {
        match self.head {
            Some(h) => (h.log_seg, h.next_page),
            None => (self.next_log_seg, 0),
        }
    }

    fn level_target(&self, level: usize) -> usize {
        let mut t = self.cfg.l1_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.cfg.level_ratio);
        }
        t
    }

    fn level_bytes(&self, level: usize) -> usize {
        self.levels
            .get(level)
            .map_or(0, |l| l.iter().map(|r| r.data_bytes()).sum())
    }

    fn deepest_nonempty(&self) -> usize {
        (0..self.levels.len())
            .rev()
            .find(|&l| !self.levels[l].is_empty())
            .unwrap_or(0)
    }

    fn maybe_compact(&mut self) -> Result<()> {
        if self.levels[0].len() >= self.cfg.l0_runs.max(1) {
            self.compact_into(0, 1)?;
        }
        let mut level = 1;
        while level < self.levels.len() {
            if self.level_bytes(level) > self.level_target(level) {
                self.compact_into(level, level + 1)?;
            }
            level += 1;
        }
        Ok(())
    }

    fn compact_all(&mut self) -> Result<()> {
        let deepest = self.deepest_nonempty().max(1);
        for level in 0..deepest {
            if !self.levels[level].is_empty() {
                self.compact_into(level, level + 1)?;
            }
        }
        Ok(())
    }

    /// Merges level `from` into level `to` (metadata only: values stay where they are).
    fn compact_into(&mut self, from: usize, to: usize) -> Result<()> {
        while self.levels.len() <= to {
            self.levels.push(Vec::new());
        }
        let mut inputs: Vec<Arc<KeyTable>> = self.levels[from].clone();
        inputs.extend(self.levels[to].iter().cloned());
        if inputs.is_empty() {
            return Ok(());
        }
        let bottom = self.deepest_nonempty() <= to;
        let id = self.next_run;
        self.next_run += 1;
        let (mut t, dead) = compact(&inputs, id, bottom, self.cfg.bloom_fp_rate);
        // The ablation: values move with their keys, as in an LSM without key-value
        // separation. Only with an empty memtable (right after a flush): the moved records
        // then hold the newest versions, and the checkpoint moves past them below.
        let mut moved = self.cfg.compaction_moves_values && self.mem.is_empty() && !self.in_gc;
        if moved {
            // Every value is rewritten before the inputs' garbage can be reclaimed: an LSM
            // without key-value separation needs free space for its largest compaction. With
            // too little free, this compaction keeps the values where they are (counted).
            // (A value spanning segments takes them whole, and one more for what follows.)
            let (mut bytes, mut spanning) = (0u64, 0usize);
            for j in 0..t.len() {
                if let Slot::Value(p) = t.slot(j) {
                    let klen = t.key(j).len();
                    if p.spans(self.g.pages_per_segment()) {
                        spanning += self.spanning_segments(klen, p.len as usize) + 1;
                    } else {
                        bytes += p.record_bytes(klen);
                    }
                }
            }
            let need =
                bytes.div_ceil(self.g.segment_bytes()) as usize + spanning + self.gc_low_water();
            if self.free.len() < need {
                moved = false;
                self.stats.compactions_without_room_to_move += 1;
            }
        }
        if moved {
            t = self.move_run_values(&t)?;
        }
        let extents = self.write_run(&t)?;
        for r in &inputs {
            self.runs.remove(&r.id());
            self.kt_index.remove(&r.id());
        }
        self.levels[from].clear();
        self.levels[to].clear();
        self.add_run(t, to, extents);
        // Already counted as garbage when their successors were flushed.
        self.stats.compaction_invalidated += dead.len() as u64;
        if moved {
            // Everything written so far is in the runs: nothing before the head needs replay.
            self.move_checkpoint();
        }
        self.persist()?;
        self.stats.compactions += 1;
        self.release_keytable_segments()
    }

    /// The ablation of metadata-only compaction (`EngineConfig::compaction_moves_values`):
    /// reads every value `t` points to and writes it again at the head, ~1 MiB at a time;
    /// returns the run with the new pointers. The old copies become garbage.
    fn move_run_values(&mut self, t: &KeyTable) -> Result<KeyTable> {
        let mut out = KeyTableBuilder::new(t.id());
        let mut i = 0;
        while i < t.len() {
            let mut end = i;
            let mut bytes = 0usize;
            while end < t.len() && (end == i || bytes < GC_BATCH_BYTES) {
                if let Slot::Value(p) = t.slot(end) {
                    bytes += p.len as usize + t.key(end).len();
                }
                end += 1;
            }
            let ptrs: Vec<Option<ValuePtr>> = (i..end)
                .map(|j| match t.slot(j) {
                    Slot::Value(p) => Some(p),
                    Slot::Tombstone => None,
                })
                .collect();
            let plan = self.plan_reads(&ptrs)?;
            let pages = plan.fetch(self.dev.as_ref());
            let values = plan.assemble(&pages, &AtomicU64::new(0))?;
            let keys: Vec<Vec<u8>> = (i..end).map(|j| t.key(j).to_vec()).collect();
            let ops: Vec<WriteOp<'_>> = keys
                .iter()
                .zip(&values)
                .filter_map(|(k, v)| v.as_ref().map(|v| WriteOp::Put(k, v)))
                .collect();
            let mut new_slots: HashMap<Vec<u8>, Slot> = HashMap::new();
            if !ops.is_empty() {
                let (pages, updates) = self.build_batch(&ops, 0)?;
                let n = pages.len() as u64;
                if let Err(e) = self.write_pages(pages) {
                    self.abandon_head_after_failure();
                    return Err(e);
                }
                self.pages_since_checkpoint += n;
                new_slots = updates.into_iter().map(|(k, s)| (k.to_vec(), s)).collect();
            }
            for (j, key) in (i..end).zip(&keys) {
                let slot = match (t.slot(j), new_slots.get(key)) {
                    (Slot::Value(old), Some(&new)) => {
                        self.count_dead(key.len(), &old);
                        new
                    }
                    (slot, _) => slot,
                };
                out.push(key, &slot);
            }
            i = end;
        }
        Ok(out.finish(self.cfg.bloom_fp_rate))
    }

    /// Trims keytable segments no run uses any more (never the one being appended to).
    fn release_keytable_segments(&mut self) -> Result<()> {
        let pps = u64::from(self.g.pages_per_segment());
        let used: BTreeSet<u32> = self
            .runs
            .values()
            // An extent may run on from the end of one segment into the next (write_run
            // merges chunks whose LBAs touch): every segment it covers is in use.
            .flat_map(|r| {
                r.extents.iter().flat_map(move |&(lba, n)| {
                    let last = lba + u64::from(n.max(1)) - 1;
                    (lba / pps..=last / pps).map(|s| s as u32)
                })
            })
            .collect();
        let current = self.kt_segments.last().copied();
        let (keep, drop): (Vec<u32>, Vec<u32>) = self
            .kt_segments
            .iter()
            .partition(|s| used.contains(s) || Some(**s) == current);
        if drop.is_empty() {
            return Ok(());
        }
        self.kt_segments = keep;
        self.persist()?;
        for s in drop {
            self.trim_to_free(s)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- garbage collection

    /// Garbage collection until `free` segments are free: a value spanning segments takes
    /// them all at once. Stops when no victim is worth it (the write then fails with
    /// `DeviceFull` before anything is written).
    fn reclaim_for(&mut self, free: usize) -> Result<()> {
        self.reclaim_while(|inner| !inner.closed && inner.free.len() < free)
    }

    /// Reclaims value-log segments while free segments are scarce, all in this call (the
    /// engine lock held throughout). Writers normally get here with the work already done
    /// a window at a time by [`Engine::reclaim_stepwise`]; this is the fallback.
    fn reclaim_if_low(&mut self) -> Result<()> {
        self.reclaim_while(Inner::gc_wanted)
    }

    /// Garbage collection steps while `wanted`, then the release of what they reclaimed.
    /// Each victim must win space back; a bounded number of victims keeps a policy that
    /// picks badly from moving the same data around forever (the caller then sees
    /// `DeviceFull`, while reads and deletes go on).
    fn reclaim_while(&mut self, wanted: impl Fn(&Inner) -> bool) -> Result<()> {
        let mut rounds = self.log_segs.len() + 1;
        let stepped = (|| {
            while wanted(self) && rounds > 0 {
                match self.gc_step()? {
                    GcStep::Idle => break,
                    GcStep::Reclaimed => rounds -= 1,
                    GcStep::Progress => {}
                }
            }
            Ok(())
        })();
        stepped.and(self.release_reclaimed())
    }

    /// Free segments below which garbage collection runs: the fixed reserve plus room for a
    /// compaction's output, which is written before its inputs' segments are released (with
    /// long keys or many keys the keytables take many segments, and a compaction that found
    /// no free segment left the values none either).
    fn gc_low_water(&self) -> usize {
        GC_LOW_WATER + self.keytable_headroom()
    }

    /// Segments a compaction of every run may need for its output.
    fn keytable_headroom(&self) -> usize {
        let bytes: usize = self.levels.iter().flatten().map(|r| r.data_bytes()).sum();
        let per_segment = self.g.pages_per_segment() as usize * (PAGE_SIZE - 64);
        bytes.div_ceil(per_segment.max(1)) + 1
    }

    /// Whether garbage collection should run before a client write.
    fn gc_wanted(&self) -> bool {
        !self.closed && !self.in_gc && self.free.len() <= self.gc_low_water()
    }

    fn gc_candidates(&self) -> Vec<GcCandidate> {
        let capacity = u64::from(self.g.pages_per_segment()) * PAGE_SIZE as u64;
        self.log_segs
            .values()
            .filter(|m| m.sealed_end.is_some() && m.log_seg < self.checkpoint.0)
            .filter(|m| self.head.is_none_or(|h| h.log_seg != m.log_seg))
            .map(|m| GcCandidate {
                log_seg: m.log_seg,
                live_bytes: m.written.saturating_sub(m.dead),
                written_bytes: m.written,
                capacity_bytes: capacity,
            })
            .collect()
    }

    /// One step of reclaiming a value-log segment: picks a victim when none is in progress,
    /// then reads the next window of its pages (`gc_window_pages`, more when a
    /// raw value runs past the window), rewrites the values in it that are still live at
    /// the head through the write path, and when the whole segment is done, trims it.
    /// Liveness is judged and the moves are written in the same call, under the engine
    /// lock, so no write can slip in between; between steps the lock is free for readers.
    fn gc_step(&mut self) -> Result<GcStep> {
        let r = self.gc_step_inner();
        if r.is_err() {
            // Moves read in earlier steps may be lost with the error, and the cursor is past
            // their pages: the victim starts again from its first page (liveness is judged
            // afresh, so nothing is moved twice or missed).
            self.gc_cursor = None;
            self.gc_pending.clear();
            self.gc_pending_bytes = 0;
            if let Some(ahead) = self.gc_read_ahead.take() {
                ahead.reads.wait();
            }
        }
        r
    }

    fn gc_step_inner(&mut self) -> Result<GcStep> {
        let cursor = match self.gc_cursor {
            Some(c) => c,
            None => {
                let candidates = self.gc_candidates();
                // The victim picked when the last one ended, whose first window is read ahead.
                let mut victim = self
                    .gc_read_ahead
                    .as_ref()
                    .map(|a| a.log_seg)
                    .filter(|&v| candidates.iter().any(|c| c.log_seg == v))
                    .or_else(|| self.cfg.gc_policy.pick(&candidates));
                if victim.is_none()
                    && (self.needs_checkpoint
                        || !self.mem.is_empty()
                        || self.pages_since_checkpoint > 0)
                {
                    // Segments after the replay checkpoint are still needed by recovery:
                    // flush to move the checkpoint to the head, which makes them candidates
                    // (past a hole too: the segments a failed batch claimed).
                    self.flush()?;
                    self.close_hole()?;
                    victim = self.cfg.gc_policy.pick(&self.gc_candidates());
                }
                let Some(log_seg) = victim else {
                    return Ok(GcStep::Idle);
                };
                GcCursor {
                    log_seg,
                    next_page: 0,
                    moved: 0,
                }
            }
        };
        let log_seg = cursor.log_seg;
        let Some(meta) = self.log_segs.get(&log_seg).cloned() else {
            self.gc_cursor = None;
            return Ok(GcStep::Idle);
        };
        let seg = SegmentId(meta.segment);
        let end = meta.sealed_end.unwrap_or(0);
        let first = cursor.next_page.min(end);
        let mut last = first
            .saturating_add(self.cfg.gc_window_pages.max(1))
            .min(end);
        // Unreadable pages (never written, lost in a cut) hold nothing live.
        let mut pages = match self.take_read_ahead(log_seg, first..last) {
            Some(mut p) => {
                let rest = first + p.len() as u32..last;
                if !rest.is_empty() {
                    p.extend(self.read_log_pages(seg, rest)?);
                }
                p
            }
            None => self.read_log_pages(seg, first..last)?,
        };
        let mut page = first;
        while page < last {
            let Some(buf) = pages[(page - first) as usize].as_ref() else {
                page += 1;
                continue;
            };
            let Ok(info) = check_page(buf, log_seg, page) else {
                page += 1;
                continue;
            };
            let group_end = page.saturating_add(1 + info.raw_after).min(end);
            if group_end > last {
                if page > first {
                    // The next step starts with this page and its raw values.
                    break;
                }
                // One value larger than the window: read up to its end.
                let more = self.read_log_pages(seg, last..group_end)?;
                pages.extend(more);
                last = group_end;
            }
            let Some(buf) = pages[(page - first) as usize].as_ref() else {
                page += 1;
                continue;
            };
            let records = parse_records(buf, &info).unwrap_or_default();
            for mut r in records {
                if r.kind == RecordKind::Continued {
                    // Part of a value spanning segments: moved whole, if live.
                    if let Some(m) = self.spanning_move(&r)? {
                        self.gc_pending_bytes += m.key.len() + m.value.len() + RECORD_HEADER;
                        self.gc_pending.push(m);
                    }
                    continue;
                }
                if let Some(lk) = r.long_key {
                    // The key is in the group's raw pages, read with it.
                    let key_pages = (lk.first_page..lk.first_page.saturating_add(lk.pages()))
                        .map(|p| {
                            p.checked_sub(first)
                                .and_then(|i| pages.get(i as usize))
                                .and_then(Option::as_ref)
                                .map(|b| &b[..])
                        })
                        .collect::<Option<Vec<&[u8]>>>();
                    let key = key_pages.and_then(|kp| lk.assemble(kp));
                    match (key, r.kind) {
                        (Some(k), _) => r.key = k,
                        // A delete's key is not needed: tombstones are never moved.
                        (None, RecordKind::LongDelete) => continue,
                        (None, _) => {
                            return Err(corrupt(format!(
                                "a long key in log segment {log_seg} is unreadable"
                            )))
                        }
                    }
                }
                let ptr = match (r.kind, r.raw) {
                    (RecordKind::Put, _) => ValuePtr {
                        log_seg,
                        loc: ValueLoc::Inline {
                            page,
                            offset: r.payload_offset,
                        },
                        len: r.value_len,
                    },
                    (RecordKind::Indirect | RecordKind::LongPut, Some((first_raw, crc))) => {
                        ValuePtr {
                            log_seg,
                            loc: ValueLoc::Raw {
                                page: first_raw,
                                crc,
                            },
                            len: r.value_len,
                        }
                    }
                    _ => continue,
                };
                if self.lookup(&r.key) != Some(Slot::Value(ptr)) {
                    continue;
                }
                let value = match ptr.loc {
                    ValueLoc::Inline { offset, .. } => {
                        let at = usize::from(offset);
                        buf[at..at + r.value_len as usize].to_vec()
                    }
                    ValueLoc::Raw { .. } if ptr.spans(self.g.pages_per_segment()) => self
                        .read_values(&[Some(ptr)])?
                        .pop()
                        .flatten()
                        .ok_or_else(|| corrupt("a live spanning value is unreadable"))?
                        .to_vec(),
                    ValueLoc::Raw {
                        page: first_raw,
                        crc,
                    } => {
                        let n = raw_pages(u64::from(r.value_len)) as u32;
                        let mut v = Vec::with_capacity(n as usize * PAGE_SIZE);
                        for p in first_raw..first_raw + n {
                            let raw = p
                                .checked_sub(first)
                                .and_then(|i| pages.get(i as usize))
                                .and_then(Option::as_ref)
                                .ok_or_else(|| corrupt("a live raw value page is unreadable"))?;
                            v.extend_from_slice(raw);
                        }
                        v.truncate(r.value_len as usize);
                        if crc32c::crc32c(&v) != crc {
                            return Err(corrupt(format!(
                                "live value in log segment {log_seg} fails its checksum"
                            )));
                        }
                        v
                    }
                };
                self.gc_pending_bytes += r.key.len() + value.len() + RECORD_HEADER;
                self.gc_pending.push(GcMove {
                    key: r.key,
                    value,
                    from: ptr,
                });
            }
            page = group_end;
        }
        self.read_ahead(log_seg, page, end);
        // Moves are written in large batches (a batch's indirect records share one packed
        // page), so they may wait for later steps; they are judged live again when written.
        let moved = if page >= end || self.gc_pending_bytes >= GC_BATCH_BYTES {
            self.write_gc_moves()?
        } else {
            0
        };
        self.stats.gc_steps += 1;
        let cursor = GcCursor {
            log_seg,
            next_page: page,
            moved: cursor.moved + moved,
        };
        if page < end {
            self.gc_cursor = Some(cursor);
            return Ok(GcStep::Progress);
        }
        self.gc_cursor = None;
        tracing::debug!(
            log_seg,
            written = meta.written,
            dead = meta.dead,
            moved = cursor.moved,
            "reclaimed a value-log segment"
        );
        let tail = self.tail_dead.remove(&log_seg).unwrap_or(0);
        if let Some(mut m) = self.log_segs.remove(&log_seg) {
            m.dead = m.dead.saturating_sub(tail);
            self.gc_reclaimed.push(m);
        }
        self.stats.gc_segments += 1;
        self.stats.gc_bytes_moved += cursor.moved;
        let pages = self.gc_reclaimed.len() as u64 * u64::from(self.g.pages_per_segment());
        // Released now when enough has gathered, or when the moves of one more victim might
        // not find a free segment.
        if pages >= GC_RELEASE_PAGES || self.free.len() <= RESERVED_SEGMENTS + 1 {
            self.release_reclaimed()?;
        }
        Ok(GcStep::Reclaimed)
    }

    /// Frees the segments garbage collection reclaimed: one manifest write without their log
    /// segments (the moves written before it become durable with it), then, once no read
    /// still fetches from them, a trim each. Every loop that runs garbage collection ends
    /// with it, so free space never waits for the next reclaim.
    ///
    /// # Errors
    /// Writing the manifest or trimming (a segment not trimmed stays out of the free list
    /// until the next open, which trims what the manifest does not account for).
    fn release_reclaimed(&mut self) -> Result<()> {
        if self.gc_reclaimed.is_empty() {
            return Ok(());
        }
        // Moves written after a hole a failed batch left would not be replayed: the victims
        // stay in the manifest until the checkpoint is past it.
        self.close_hole()?;
        let released = std::mem::take(&mut self.gc_reclaimed);
        if let Err(e) = self.persist() {
            // The manifest on the device may still list them: so must the next one.
            self.gc_reclaimed = released;
            return Err(e);
        }
        // A read that resolved a pointer into one of them may still be fetching from it.
        self.reads.wait_idle();
        for m in released {
            self.trim_to_free(m.segment)?;
        }
        Ok(())
    }

    /// The move of a value spanning segments that a Continued record in a victim belongs to,
    /// read whole, if the value is still live: its head record (found by sequence number in
    /// the packed page the Continued record names) must still be what the key maps to. A
    /// head segment already reclaimed means the value was moved or died.
    fn spanning_move(&self, r: &Record) -> Result<Option<GcMove>> {
        let Some((head_seg, head_page)) = r.continues else {
            return Ok(None);
        };
        let Some(meta) = self.log_segs.get(&head_seg) else {
            return Ok(None);
        };
        let seg = SegmentId(meta.segment);
        let mut pages = self.read_log_pages(seg, head_page..head_page + 1)?;
        let Some(buf) = pages.pop().flatten() else {
            return Ok(None);
        };
        let Ok(info) = check_page(&buf, head_seg, head_page) else {
            return Ok(None);
        };
        let records = parse_records(&buf, &info).unwrap_or_default();
        let Some(head) = records.into_iter().find(|h| {
            h.seq == r.seq && matches!(h.kind, RecordKind::Indirect | RecordKind::LongPut)
        }) else {
            return Ok(None);
        };
        let Some((first, crc)) = head.raw else {
            return Ok(None);
        };
        let key = match head.long_key {
            None => head.key,
            Some(lk) => {
                let kp = self.read_log_pages(seg, lk.first_page..lk.first_page + lk.pages())?;
                let parts: Option<Vec<&[u8]>> =
                    kp.iter().map(|p| p.as_ref().map(|b| &b[..])).collect();
                parts.and_then(|p| lk.assemble(p)).ok_or_else(|| {
                    corrupt(format!(
                        "a long key in log segment {head_seg} is unreadable"
                    ))
                })?
            }
        };
        let ptr = ValuePtr {
            log_seg: head_seg,
            loc: ValueLoc::Raw { page: first, crc },
            len: head.value_len,
        };
        if self.lookup(&key) != Some(Slot::Value(ptr)) {
            return Ok(None);
        }
        let value = self
            .read_values(&[Some(ptr)])?
            .pop()
            .flatten()
            .ok_or_else(|| corrupt("a live spanning value is unreadable"))?;
        Ok(Some(GcMove {
            key,
            value: value.to_vec(),
            from: ptr,
        }))
    }

    /// Starts reading the window after `page` of victim `log_seg` (which ends at `end`), or,
    /// when the victim is done, the first window of the next victim the policy picks: the
    /// reads overlap the moves written now and the pause between steps.
    fn read_ahead(&mut self, log_seg: u32, page: u32, end: u32) {
        let (victim, from) = if page < end {
            (log_seg, page)
        } else {
            let candidates: Vec<GcCandidate> = self
                .gc_candidates()
                .into_iter()
                .filter(|c| c.log_seg != log_seg)
                .collect();
            match self.cfg.gc_policy.pick(&candidates) {
                Some(next) => (next, 0),
                None => return,
            }
        };
        let Some(meta) = self.log_segs.get(&victim) else {
            return;
        };
        let seg = SegmentId(meta.segment);
        let end = meta.sealed_end.unwrap_or(0);
        // At most an I/O window: client reads may hold up to `ASYNC_READ_WINDOW` tags, and
        // the moves written meanwhile need theirs.
        let ahead = self.cfg.gc_window_pages.clamp(1, IO_WINDOW as u32);
        let pages = from..from.saturating_add(ahead).min(end);
        if pages.is_empty() {
            return;
        }
        let cmds = pages
            .clone()
            .map(|p| Command::Read {
                lba: self.g.lba(seg, p),
                buf: PageBuf::for_read(),
            })
            .collect();
        self.gc_read_ahead = Some(GcReadAhead {
            log_seg: victim,
            pages,
            reads: self.poller.start_all(cmds),
        });
    }

    /// The pages read ahead, when they are the first of `pages` of `log_seg` and all came
    /// back as reads do (otherwise the caller reads them again); the caller reads the rest.
    /// A read ahead of other pages is waited for and dropped: nothing may still read a
    /// segment garbage collection is done with.
    fn take_read_ahead(
        &mut self,
        log_seg: u32,
        pages: std::ops::Range<u32>,
    ) -> Option<Vec<Option<PageBuf>>> {
        let ahead = self.gc_read_ahead.take()?;
        let wanted = ahead.log_seg == log_seg
            && ahead.pages.start == pages.start
            && ahead.pages.end <= pages.end;
        let results = ahead.reads.wait();
        if !wanted {
            return None;
        }
        results
            .into_iter()
            .map(|r| match r.and_then(Completion::into_buf) {
                Ok(buf) => Some(buf),
                Err(DeviceError::Unwritten { .. }) => Some(None),
                // Refused (no free tag, say) or failed: read again the usual way.
                Err(_) => None,
            })
            .collect()
    }

    /// Reads pages `range` of a value-log segment, all in flight at once; an unreadable
    /// page is `None`: never written (claimed by a batch that failed before writing it, see
    /// `forget_layout`, or lost in a cut), or failing twice in a row. A page whose read fails
    /// is read once more on its own, so a transient error costs nothing; one that fails again
    /// is logged and holds nothing live for garbage collection (its values could not be read
    /// by anyone, and the victim must still be reclaimable).
    fn read_log_pages(
        &self,
        seg: SegmentId,
        range: std::ops::Range<u32>,
    ) -> Result<Vec<Option<PageBuf>>> {
        let lbas: Vec<Lba> = range.map(|p| self.g.lba(seg, p)).collect();
        let cmds = lbas
            .iter()
            .map(|&lba| Command::Read {
                lba,
                buf: PageBuf::for_read(),
            })
            .collect();
        let results = self.poller.run(cmds, IO_WINDOW);
        let mut pages = Vec::with_capacity(results.len());
        for (r, lba) in results.into_iter().zip(lbas) {
            let read =
                |r: std::result::Result<Completion, DeviceError>| r.and_then(Completion::into_buf);
            let page = match read(r) {
                Ok(buf) => buf,
                Err(DeviceError::Unwritten { .. }) => None,
                Err(first) if matches!(first, DeviceError::ReadFailed { .. }) => {
                    let again = crate::io::execute_patiently(
                        self.dev.as_ref(),
                        Command::Read {
                            lba,
                            buf: PageBuf::for_read(),
                        },
                    );
                    match read(again.map_err(|r| r.error)) {
                        Ok(buf) => buf,
                        Err(
                            e @ (DeviceError::ReadFailed { .. } | DeviceError::Unwritten { .. }),
                        ) => {
                            tracing::error!(
                                lba = lba.0,
                                "a value-log page garbage collection reads failed twice \
                                 ({first}; then {e}); its values are lost"
                            );
                            None
                        }
                        // Out of tags, powered off, ...: the page may well hold live values.
                        Err(e) => return Err(EngineError::Device(e)),
                    }
                }
                Err(e) => return Err(EngineError::Device(e)),
            };
            pages.push(page);
        }
        Ok(pages)
    }

    /// Writes the pending moves whose values are still live (a client may have overwritten
    /// or deleted a key since its value was read: that move is dropped), a group commit per
    /// ~[`GC_BATCH_BYTES`]; returns the value bytes moved.
    fn write_gc_moves(&mut self) -> Result<u64> {
        let pending = std::mem::take(&mut self.gc_pending);
        self.gc_pending_bytes = 0;
        let live: Vec<(Vec<u8>, Vec<u8>)> = pending
            .into_iter()
            .filter(|m| self.lookup(&m.key) == Some(Slot::Value(m.from)))
            .map(|m| (m.key, m.value))
            .collect();
        self.in_gc = true;
        let moved: Result<u64> = (|| {
            let mut bytes = 0;
            let mut start = 0;
            while start < live.len() {
                let mut end = start;
                let mut batch_bytes = 0;
                while end < live.len() && (end == start || batch_bytes < GC_BATCH_BYTES) {
                    batch_bytes += live[end].0.len() + live[end].1.len() + RECORD_HEADER;
                    end += 1;
                }
                let ops: Vec<WriteOp<'_>> = live[start..end]
                    .iter()
                    .map(|(k, v)| WriteOp::Put(k, v))
                    .collect();
                self.write(&ops)?;
                bytes += live[start..end]
                    .iter()
                    .map(|(_, v)| v.len() as u64)
                    .sum::<u64>();
                start = end;
            }
            Ok(bytes)
        })();
        self.in_gc = false;
        moved
    }

    // ---------------------------------------------------------------- manifest and recovery

    fn snapshot(&self) -> Snapshot {
        let mut runs: Vec<RunMeta> = self.runs.values().cloned().collect();
        runs.sort_by_key(|r| r.id);
        Snapshot {
            seq: self.snap_seq,
            next_seq: self.next_seq,
            next_run: self.next_run,
            next_log_seg: self.next_log_seg,
            next_batch: self.next_batch,
            checkpoint: self.checkpoint,
            // Garbage the replay of the tail counts again is left out (see `tail_dead`).
            log_segs: self
                .log_segs
                .values()
                .map(|m| LogSegMeta {
                    dead: m
                        .dead
                        .saturating_sub(self.tail_dead.get(&m.log_seg).copied().unwrap_or(0)),
                    ..m.clone()
                })
                // Reclaimed victims stay listed until they are released (see `gc_reclaimed`).
                .chain(self.gc_reclaimed.iter().cloned())
                .collect(),
            kt_segments: self.kt_segments.clone(),
            runs,
        }
    }

    fn persist(&mut self) -> Result<()> {
        // What the manifest points at (keytable pages, moved values) is durable before it,
        // and the manifest is durable before anything it released is trimmed.
        self.sync_device()?;
        self.snap_seq += 1;
        let snap = self.snapshot();
        self.manifest.write(self.dev.as_ref(), &snap)?;
        self.sync_device()
    }

    /// Empties the device's volatile write cache (fdatasync on the file backend).
    fn sync_device(&self) -> Result<()> {
        let dev = self.dev.clone();
        self.flush_gate.flush(|| device_flush(dev.as_ref()))?;
        Ok(())
    }

    fn load_runs(&mut self, runs: &[RunMeta]) -> Result<()> {
        let mut sorted: Vec<&RunMeta> = runs.iter().collect();
        // L0 oldest first, so inserting each at the front leaves the newest first.
        sorted.sort_by_key(|r| (r.level, r.order));
        for meta in sorted {
            let lbas: Vec<Lba> = meta
                .extents
                .iter()
                .flat_map(|(first, n)| (0..u64::from(*n)).map(move |i| Lba(first + i)))
                .collect();
            let pages = self.read_pages(&lbas)?;
            let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
            let t = KeyTable::decode_pages(meta.id, &refs, self.cfg.bloom_fp_rate)
                .map_err(EngineError::Corrupt)?;
            if self.cfg.uncached_keytables {
                self.kt_index.insert(meta.id, t.page_index());
            }
            self.next_l0_order = self.next_l0_order.max(meta.order + 1);
            let level = usize::from(meta.level);
            while self.levels.len() <= level {
                self.levels.push(Vec::new());
            }
            if level == 0 {
                self.levels[0].insert(0, Arc::new(t));
            } else {
                self.levels[level].push(Arc::new(t));
            }
            self.runs.insert(meta.id, meta.clone());
        }
        Ok(())
    }

    /// Every segment the manifest does not account for is free; leftovers are trimmed.
    fn rebuild_free_list(&mut self) -> Result<()> {
        let mut used: BTreeSet<u32> = MANIFEST_SEGMENTS.into_iter().collect();
        used.extend(self.log_segs.values().map(|m| m.segment));
        used.extend(self.kt_segments.iter().copied());
        for s in 0..self.g.segments() {
            if used.contains(&s) {
                continue;
            }
            if self.dev.segment_info(SegmentId(s))?.state == SegmentState::Free {
                self.free.insert(s);
            } else {
                self.trim_to_free(s)?;
            }
        }
        Ok(())
    }

    /// Replays complete write batches from the checkpoint into the memtable; the value log
    /// ends at the first page or batch that did not fully reach the device. The garbage the
    /// replayed records make is counted as when they were first written (the manifest's
    /// counts leave it out). Returns the device segments of the log segments it dropped: the
    /// caller persists the manifest, then trims them with
    /// [`Inner::release_log_segments`].
    fn replay(&mut self) -> Result<Vec<u32>> {
        let start = self.checkpoint;
        let metas: Vec<LogSegMeta> = self
            .log_segs
            .values()
            .filter(|m| m.log_seg >= start.0)
            .cloned()
            .collect();
        // Records of the batch being collected, with their log segment (a batch may span two).
        let mut pending: Vec<(Vec<u8>, Slot, u64, u64, u32)> = Vec::new();
        // Unused bytes of the batch's packed pages, by log segment.
        let mut pending_waste: Vec<(u32, u64)> = Vec::new();
        let mut pending_batch: Option<u64> = None;
        // Where the batch being collected began: the log ends there if it never completes.
        let mut batch_start: (u32, u32) = start;
        let mut stop: Option<(u32, u32)> = None;
        let mut max_seq = 0;
        let mut max_batch = 0;
        let mut replayed = 0u64;
        'segs: for m in &metas {
            let seg = SegmentId(m.segment);
            let end = match m.sealed_end {
                Some(e) => e,
                None => self.dev.segment_info(seg)?.write_pointer,
            };
            let mut page = if m.log_seg == start.0 { start.1 } else { 0 };
            while page < end {
                let buf = match self.read_pages(&[self.g.lba(seg, page)]) {
                    Ok(mut v) => v.pop(),
                    Err(_) => None,
                };
                let parsed = buf.as_ref().and_then(|b| {
                    let info = check_page(b, m.log_seg, page).ok()?;
                    let recs = parse_records(b, &info).ok()?;
                    Some((info, recs))
                });
                if pending_batch.is_none() {
                    batch_start = (m.log_seg, page);
                }
                let Some((info, recs)) = parsed else {
                    stop = Some(batch_start);
                    break 'segs;
                };
                if pending_batch.is_some_and(|b| b != info.batch) {
                    // The previous batch never finished.
                    stop = Some(batch_start);
                    break 'segs;
                }
                pending_batch = Some(info.batch);
                let mut raw_ok = true;
                for r in &recs {
                    let key = match r.long_key {
                        None => r.key.clone(),
                        Some(lk) => {
                            // The key's raw pages must have reached the device whole.
                            let key = lk
                                .first_page
                                .checked_add(lk.pages())
                                .filter(|&last| last <= end)
                                .and_then(|last| {
                                    let lbas: Vec<Lba> =
                                        (lk.first_page..last).map(|p| self.g.lba(seg, p)).collect();
                                    let pages = self.read_pages(&lbas).ok()?;
                                    lk.assemble(pages.iter().map(|p| &p[..]))
                                });
                            match key {
                                Some(k) => k,
                                None => {
                                    raw_ok = false;
                                    break;
                                }
                            }
                        }
                    };
                    let slot = match r.kind {
                        RecordKind::Put => Slot::Value(ValuePtr {
                            log_seg: m.log_seg,
                            loc: ValueLoc::Inline {
                                page,
                                offset: r.payload_offset,
                            },
                            len: r.value_len,
                        }),
                        RecordKind::Indirect | RecordKind::LongPut => {
                            let (first, crc) = r.raw.unwrap_or((0, 0));
                            let p = ValuePtr {
                                log_seg: m.log_seg,
                                loc: ValueLoc::Raw { page: first, crc },
                                len: r.value_len,
                            };
                            let pps = self.g.pages_per_segment();
                            let within = if p.spans(pps) {
                                // Its other segments must be in the log (the read checks the
                                // pages and the checksum).
                                p.runs(pps)
                                    .iter()
                                    .all(|run| self.log_segs.contains_key(&run.log_seg))
                            } else {
                                first + raw_pages(u64::from(r.value_len)) as u32 <= end
                            };
                            if !within || self.read_values(&[Some(p)]).is_err() {
                                raw_ok = false;
                                break;
                            }
                            Slot::Value(p)
                        }
                        RecordKind::Delete | RecordKind::LongDelete => Slot::Tombstone,
                        // The head record carries the value.
                        RecordKind::Continued => continue,
                    };
                    pending.push((key, slot, r.seq, info.batch, m.log_seg));
                }
                if !raw_ok {
                    stop = Some(batch_start);
                    break 'segs;
                }
                pending_waste.push((m.log_seg, unused_bytes(usize::from(info.used))));
                if info.last_in_batch {
                    // Counted as the write path counts it: unused page bytes and tombstones
                    // at once, replaced values as the memtable drops them (`apply`).
                    for (log_seg, waste) in pending_waste.drain(..) {
                        self.count_tail_dead(log_seg, waste);
                    }
                    for (k, slot, seq, batch, log_seg) in pending.drain(..) {
                        max_seq = max_seq.max(seq);
                        max_batch = max_batch.max(batch);
                        if slot == Slot::Tombstone {
                            self.count_tail_dead(log_seg, delete_record_bytes(k.len()));
                        }
                        self.apply(&k, slot);
                        replayed += 1;
                    }
                    pending_batch = None;
                }
                page += 1 + info.raw_after;
                self.pages_since_checkpoint += 1 + u64::from(info.raw_after);
            }
        }
        if stop.is_none() && pending_batch.is_some() {
            // The log ended inside a batch.
            stop = Some(batch_start);
        }
        self.next_seq = self.next_seq.max(max_seq + 1);
        self.next_batch = self.next_batch.max(max_batch + 1);
        self.stats.replayed_records = replayed;
        // Seal where the log ends; drop log segments after the end (they hold only
        // unacknowledged data). New writes go to a fresh log segment.
        let mut to_trim = Vec::new();
        for m in metas.iter() {
            let Some(meta) = self.log_segs.get_mut(&m.log_seg) else {
                continue;
            };
            match stop {
                Some((s, p)) if m.log_seg == s => {
                    meta.sealed_end = Some(p);
                    meta.written = u64::from(p) * PAGE_SIZE as u64;
                }
                Some((s, _)) if m.log_seg > s => to_trim.push(m.log_seg),
                _ => {
                    if meta.sealed_end.is_none() {
                        let wp = self.dev.segment_info(SegmentId(m.segment))?.write_pointer;
                        meta.sealed_end = Some(wp);
                        meta.written = u64::from(wp) * PAGE_SIZE as u64;
                    }
                }
            }
        }
        // A log segment that ends at page 0 holds nothing: it was opened (and recorded in the
        // manifest) but none of its pages reached the device before the cut, or all were
        // lost from the volatile write cache. No pointer can lead into it and replay reads
        // nothing from it, so it is released now; kept, it would be sealed empty and wait
        // for garbage collection, which only takes segments before the checkpoint, and each
        // such cut would cost a segment until the next flush.
        let empty: Vec<u32> = self
            .log_segs
            .values()
            .filter(|m| m.sealed_end == Some(0) && !to_trim.contains(&m.log_seg))
            .map(|m| m.log_seg)
            .collect();
        to_trim.extend(empty);
        let mut released = Vec::new();
        for log_seg in to_trim {
            if let Some(meta) = self.log_segs.remove(&log_seg) {
                self.tail_dead.remove(&log_seg);
                released.push(meta.segment);
            }
        }
        Ok(released)
    }

    /// Trims device segments that held log segments the manifest no longer lists (it must
    /// already be persisted without them) and returns them to the free list.
    fn release_log_segments(&mut self, segments: &[u32]) -> Result<()> {
        if segments.is_empty() {
            return Ok(());
        }
        self.reads.wait_idle();
        for &segment in segments {
            self.trim_to_free(segment)?;
        }
        Ok(())
    }

    /// Trims a device segment nothing refers to any more (the manifest on the device no
    /// longer lists it, and no read still fetches from it) and puts it on the free list.
    ///
    /// # Errors
    /// The trim's (the segment then stays off the free list until the next open, which trims
    /// whatever the manifest does not account for).
    fn trim_to_free(&mut self, segment: u32) -> Result<()> {
        crate::io::execute_patiently(
            self.dev.as_ref(),
            Command::Trim {
                segment: SegmentId(segment),
            },
        )?
        .result?;
        self.free.insert(segment);
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        let mut s = self.stats.clone();
        s.device_bytes_written =
            (self.dev.stats().writes - self.dev_writes_at_open) * PAGE_SIZE as u64;
        s.total_bytes = self.log_segs.values().map(|m| m.written).sum();
        s.live_bytes = self.live_bytes();
        s.user_capacity_bytes = self.user_capacity();
        s.device_flushes = self.flush_gate.issued();
        s.keytable_dram_bytes = self
            .levels
            .iter()
            .flatten()
            .map(|r| r.dram_bytes() as u64)
            .sum();
        s.memtable_keys = self.mem.len() as u64;
        s.runs_per_level = self.levels.iter().map(Vec::len).collect();
        s.keys_per_level = self
            .levels
            .iter()
            .map(|l| l.iter().map(|r| r.len() as u64).sum())
            .collect();
        s.free_segments = self.free.len() as u64;
        s.log_segments = self.log_segs.len() as u64;
        s.keytable_segments = self.kt_segments.len() as u64;
        s
    }
}
