//! The flash translation layer: validates commands against the append-only rule, maps
//! logical segments to physical blocks (block-level mapping, least-worn allocation, bad-block
//! retirement), persists its tables, schedules commands on the NAND timing model, and hands
//! completions back through the tag pool. Implements [`AppendDevice`].
//!
//! # Power cuts
//!
//! [`Ftl::power_cut`] loses every command not yet delivered. What else it loses depends on
//! [`DeviceConfig::volatile_cache`]:
//!
//! - off (the default): a delivered write is durable, as on a device whose write cache
//!   survives power loss; on the RAM backend FLUSH changes nothing.
//! - on (RAM backend; the file backend is exactly as durable as the disk under it): a
//!   delivered page program stays in a volatile write cache until a FLUSH submitted after its
//!   delivery is itself delivered; the cut loses every program not covered that way. TRIM
//!   (erased at submission) and the FTL's own table writes bypass the cache: they are durable
//!   once performed, as the file backend fdatasyncs its tables. An orderly close flushes the
//!   cache.
//!
//! A lost program is undone on the media: the page reads as erased, and reopening the device
//! recovers it exactly like a program that never happened (a lower write pointer, or a hole
//! below it that reads as [`DeviceError::Unwritten`]).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::buffer::PageBuf;
use crate::device::{
    AppendDevice, Command, CommandKind, Completion, DeviceStats, Rejected, SegmentInfo, Tag, Wait,
    DEFAULT_QUEUE_DEPTH,
};
use crate::error::{DeviceError, Result};
use crate::faults::FaultInjector;
use crate::geometry::{Geometry, Lba, Ppa, SegmentId};
use crate::media::ram::RamMedia;
use crate::media::uring::FileMedia;
use crate::media::{Media, MediaDone, MediaLayout, MediaOp, RamStore};
use crate::tables::{
    decode_superblock, encode_superblock, slot_bytes, BlockState, SegmentState, Tables,
    SUPERBLOCK_BYTES, UNMAPPED,
};
use crate::timing::{NandScheduler, Release, TimingModel};

/// Where the device keeps its pages.
#[derive(Clone)]
pub enum Backend {
    /// Process memory; keep a clone of the store to reopen after a power cut.
    Ram(RamStore),
    /// A regular file or a raw block device, through io_uring with O_DIRECT.
    File(PathBuf),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Ram(_) => f.write_str("ram"),
            Backend::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

/// How to run a device.
#[derive(Debug, Clone, Copy)]
pub struct DeviceConfig {
    /// Shape of the flash array (must match the media when opening an existing device).
    pub geometry: Geometry,
    /// NAND timing model.
    pub timing: TimingModel,
    /// When completions are released (virtual clock or wall clock).
    pub release: Release,
    /// Size of the tag pool.
    pub queue_depth: u32,
    /// Model a volatile write cache (RAM backend only; default off).
    ///
    /// Off, a page program is durable once its completion is delivered: a power cut loses
    /// only commands not yet delivered.
    ///
    /// On, a delivered program is durable only once a [`Command::Flush`] *submitted after it
    /// was delivered* has itself been delivered; a flush covers nothing delivered after its
    /// submission, and a flush cut before its delivery covers nothing. [`Ftl::power_cut`]
    /// then also undoes every delivered but uncovered program: the page reads as erased, and
    /// [`Ftl::open`] recovers it like a program that never happened (the segment's write
    /// pointer drops back to its last programmed page, lost pages below it read as
    /// [`DeviceError::Unwritten`]; a segment recorded as full that lost pages is open again).
    /// Not cached, i.e. durable when their command completes: TRIM (the erase and the freed
    /// blocks), and every write of the FTL's own tables (segment opened, full, read-only,
    /// trimmed), which the FTL makes durable itself. An orderly [`Ftl::close`] (or drop)
    /// flushes the cache.
    ///
    /// After a cut with the cache on, reopen the store with the cache on too: only then does
    /// recovery also scan the segments recorded as full. The file backend ignores the option:
    /// its durability is that of the real disk and its cache, which FLUSH (fdatasync) governs.
    pub volatile_cache: bool,
    /// Batches of reads a caller waits for ([`AppendDevice::execute_many`] of reads only) go
    /// down the calling thread's own io_uring ring, submitted and waited for in one system
    /// call (file backend without a NAND timing model; default on). Off, they share the
    /// device's ring with every other command. Either way each read holds a tag and counts
    /// on its segment like any command (`ftl::direct_read`).
    pub caller_ring_reads: bool,
}

impl DeviceConfig {
    /// A configuration with no timing delay and the default queue depth.
    pub fn new(geometry: Geometry) -> Self {
        DeviceConfig {
            geometry,
            timing: TimingModel::None,
            release: Release::Virtual,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            volatile_cache: false,
            caller_ring_reads: true,
        }
    }
}

/// A command between submission and delivery.
struct InFlight {
    kind: CommandKind,
    lba: Option<Lba>,
    segment: Option<SegmentId>,
    /// Physical page programmed (reverted on power cut).
    program_ppa: Option<Ppa>,
    start: u64,
    due: u64,
    seq: u64,
    submitted: Instant,
    /// Result decided at submission (an injected fault, a TRIM's outcome).
    preset: Option<Result<()>>,
    /// Set when the media finished it.
    done: Option<MediaDone>,
    /// A caller of `execute` is waiting for exactly this tag.
    awaited: bool,
    /// Whether the media holds an operation for it (else it is done at submission).
    on_media: bool,
    /// For a FLUSH: the programs delivered before its submission (it covers those).
    flush_covers: u64,
}

#[derive(Default)]
struct Counters {
    reads: u64,
    writes: u64,
    trims: u64,
    flushes: u64,
    erases: u64,
    table_writes: u64,
    errors: u64,
}

struct State {
    tables: Tables,
    /// Live write pointers (next page offset to write) per segment.
    wp: Vec<u32>,
    /// Pages below a write pointer that hold nothing (lost in a power cut or failed I/O).
    holes: HashMap<u32, BTreeSet<u32>>,
    /// Commands in flight per segment.
    seg_busy: Vec<u32>,
    free_tags: Vec<u32>,
    cmds: Vec<Option<InFlight>>,
    /// Media-finished commands waiting for delivery, by (due, seq).
    ready: BinaryHeap<Reverse<(u64, u64, u32)>>,
    sched: Option<NandScheduler>,
    /// Commands in flight that no `execute` caller waits for.
    reapable: usize,
    vnow: u64,
    seq: u64,
    counters: Counters,
    powered: bool,
    /// The volatile write cache (with [`DeviceConfig::volatile_cache`]): pages whose program
    /// was delivered and not yet covered by a delivered FLUSH, each with its delivery number.
    unflushed: HashMap<Ppa, u64>,
    /// Programs delivered so far (numbers the entries of `unflushed`).
    programs_delivered: u64,
    /// The segment [`Ftl::open_ahead`] is opening while it writes the tables outside this
    /// lock: no command is staged to it until they are durable.
    opening: Option<u32>,
    /// A table change made while `opening` was set, not yet written: the opener writes the
    /// tables again before it lets go ([`Ftl::persist`] defers to it).
    tables_dirty: bool,
}

/// The append-only FTL over a media backend.
pub struct Ftl {
    geometry: Geometry,
    config: DeviceConfig,
    media: Box<dyn Media>,
    state: Mutex<State>,
    /// Held by the thread polling the media.
    poll_lock: Mutex<()>,
    /// Held while the tables are written outside `state` ([`Ftl::open_ahead`]): one such
    /// write at a time. Taken before `state`, never while holding it.
    tables_lock: Mutex<()>,
    /// Signalled when commands finish on the media, for the waiters counted in
    /// `followers`.
    finished: Condvar,
    /// Waiters asleep on `finished` while another thread polls (`Ftl::wait_for`).
    followers: AtomicUsize,
    faults: FaultInjector,
    epoch: Instant,
    /// Whether the volatile write cache is modelled (the option is on and the media can undo
    /// a completed program).
    cache: bool,
    /// Awaited read batches go down the caller's own ring ([`DeviceConfig::caller_ring_reads`]
    /// and a media that has one, without a NAND timing model).
    direct_reads: bool,
    /// Opened with [`Ftl::open_read_only`]: writes, appends and trims are refused and the
    /// tables are never written (not at open, not at close).
    read_only: bool,
}

fn layout(g: &Geometry) -> MediaLayout {
    MediaLayout {
        meta_bytes: SUPERBLOCK_BYTES as u64 + 2 * slot_bytes(g),
        physical_pages: g.physical_pages(),
    }
}

fn slot_offset(g: &Geometry, generation: u64) -> u64 {
    SUPERBLOCK_BYTES as u64 + (generation % 2) * slot_bytes(g)
}

fn media_for(backend: &Backend, create: bool, queue_depth: u32) -> Result<Box<dyn Media>> {
    Ok(match backend {
        Backend::Ram(store) => Box::new(RamMedia::new(store.clone())),
        Backend::File(path) => Box::new(FileMedia::open(path, create, queue_depth)?),
    })
}

fn reject(error: DeviceError, buf: Option<PageBuf>) -> Rejected {
    Rejected { error, buf }
}

mod direct_read;
mod open;
mod open_ahead;
mod read_ring;
mod submit;

impl Ftl {
    /// The armed-fault controls of this device.
    pub fn faults(&self) -> &FaultInjector {
        &self.faults
    }

    /// The configuration the device runs with.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// What the backend is, for logs.
    pub fn describe(&self) -> String {
        self.media.describe()
    }

    /// Where a segment's pages lie in the backing file or block device, as `(offset, len)`
    /// in bytes, when its blocks share one index on every chip (then the segment is one
    /// contiguous run; a fresh device maps segment `k` to block `k` everywhere). `None` when
    /// the segment is unmapped or scattered. Benchmarks use it to point `fio` at the same bytes.
    pub fn segment_extent(&self, segment: SegmentId) -> Option<(u64, u64)> {
        self.geometry.check_segment(segment).ok()?;
        let st = self.state.lock();
        let block = st.tables.mapped(segment, 0);
        if block == UNMAPPED
            || (1..self.geometry.chips()).any(|c| st.tables.mapped(segment, c) != block)
        {
            return None;
        }
        let page = crate::PAGE_SIZE as u64;
        let offset = layout(&self.geometry).meta_bytes + self.geometry.ppa(0, block, 0) * page;
        Some((offset, self.geometry.segment_bytes()))
    }

    fn wall_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn now(&self, st: &State) -> u64 {
        match self.config.release {
            Release::Virtual => st.vnow,
            Release::WallClock => self.wall_ns(),
        }
    }

    /// Writes the tables as the next generation into that generation's slot. The in-memory
    /// generation advances only once the write succeeded: after a failed (possibly torn) write
    /// the next attempt goes to the same slot, so the other slot keeps the last good copy.
    ///
    /// While [`Ftl::open_ahead`] writes the tables outside `state`, this only marks them
    /// dirty: the opener writes them again, with this change, before it lets go, and so
    /// before any command is staged to its segment. (Two writers of the tables at once
    /// could otherwise land an older generation last in the same slot.)
    fn persist(&self, st: &mut State) -> Result<()> {
        if st.opening.is_some() {
            st.tables_dirty = true;
            return Ok(());
        }
        let next = st.tables.generation + 1;
        let bytes = st.tables.encode_as(next);
        self.faults.table_write_pause();
        self.media
            .write_meta(slot_offset(&self.geometry, next), &bytes)?;
        st.tables.generation = next;
        st.counters.table_writes += 1;
        st.tables_dirty = false;
        Ok(())
    }

    /// Flips a bit of a written page on the media (fault injection): reads return wrong data.
    ///
    /// # Errors
    /// `OutOfRange`, `Unwritten`, or the backend's I/O error.
    pub fn corrupt_page(&self, lba: Lba, byte: usize) -> Result<()> {
        let st = self.state.lock();
        let ppa = self.readable_ppa(&st, lba)?;
        self.media.corrupt(ppa, byte)
    }

    /// Simulates a power cut: every command not yet delivered is lost (its write undone on
    /// the RAM backend), nothing is persisted, and the handle refuses all further use. Open the
    /// backend again to recover. With [`DeviceConfig::volatile_cache`], every delivered page
    /// program not covered by a delivered FLUSH is undone as well.
    ///
    /// On the file backend, operations the kernel already holds may or may not land (as on a
    /// real cut), but they have all finished when this returns: nothing lands afterwards, on
    /// top of what a reopened device recovers.
    pub fn power_cut(&self) {
        // A table write in progress outside `state` (`open_ahead`) finishes first: nothing
        // lands after the cut.
        let _tables = self.tables_lock.lock();
        {
            let mut st = self.state.lock();
            st.powered = false;
            for slot in st.cmds.iter_mut() {
                if let Some(cmd) = slot.take() {
                    if let Some(ppa) = cmd.program_ppa {
                        self.media.revert_program(ppa);
                    }
                }
            }
            // The volatile write cache: delivered, never flushed.
            let lost = std::mem::take(&mut st.unflushed);
            if !lost.is_empty() {
                tracing::info!("power cut: {} unflushed page(s) lost", lost.len());
            }
            for ppa in lost.into_keys() {
                self.media.revert_program(ppa);
            }
            st.ready.clear();
            st.reapable = 0;
        }
        // Nothing new reaches the media once `powered` is false (submission checks it under
        // the state lock), so this waits for a fixed set of operations.
        if let Err(e) = self.media.quiesce() {
            tracing::error!("power cut: could not wait for the operations in flight: {e}");
        }
        self.media.release_owner();
    }

    /// Waits for every command in flight (their completions are dropped), then records the
    /// tables with exact write pointers so the next open needs no recovery scan.
    ///
    /// # Errors
    /// `PoweredOff`, or the backend's I/O error.
    pub fn close(self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&self) -> Result<()> {
        if !self.state.lock().powered {
            return Err(DeviceError::PoweredOff);
        }
        let mut sink = Vec::new();
        while self.in_flight() > 0 {
            self.pump(true, None)?;
            let mut st = self.state.lock();
            let tags: Vec<u32> = st
                .cmds
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.as_ref().filter(|c| c.done.is_some()).map(|_| i as u32))
                .collect();
            for t in tags {
                sink.push(self.finish(&mut st, t, Instant::now()));
            }
            sink.clear();
        }
        let mut st = self.state.lock();
        if self.read_only {
            // Nothing was written: the tables on the media stay as they were.
            st.powered = false;
            return Ok(());
        }
        // An orderly stop flushes the write cache.
        st.unflushed.clear();
        st.tables.seg_wp = st.wp.clone();
        st.tables.clean = st.holes.is_empty();
        self.persist(&mut st)?;
        st.powered = false;
        Ok(())
    }

    /// The physical page behind a written LBA.
    fn readable_ppa(&self, st: &State, lba: Lba) -> Result<Ppa> {
        let g = &self.geometry;
        let (seg, off) = g.locate(lba)?;
        let state = st.tables.seg_state[seg.0 as usize];
        if state == SegmentState::Free
            || off >= st.wp[seg.0 as usize]
            || st.holes.get(&seg.0).is_some_and(|h| h.contains(&off))
        {
            return Err(DeviceError::Unwritten { lba });
        }
        let (chip, page) = g.stripe(off);
        let block = st.tables.mapped(seg, chip);
        if block == UNMAPPED {
            return Err(DeviceError::Unwritten { lba });
        }
        Ok(g.ppa(chip, block, page))
    }

    /// Maps a free segment's blocks (least-worn free block on every chip) and persists it.
    /// On any failure (no spare block, or the tables could not be persisted) every change is
    /// undone, so the tables in memory stay those on the media.
    /// Writes normally go through [`Ftl::open_ahead`] instead, which writes the tables
    /// without holding `state`: `submit_inner` reaches this only on a powered-off device, which
    /// refuses the write before it.
    fn open_segment(&self, st: &mut State, seg: SegmentId) -> Result<()> {
        let s = seg.0 as usize;
        let before = (st.tables.seg_state[s], st.tables.seg_wp[s], st.wp[s]);
        let taken = self.map_blocks(st, seg)?;
        st.tables.seg_state[s] = SegmentState::Open;
        st.tables.seg_wp[s] = 0;
        st.wp[s] = 0;
        let result = self.persist(st);
        if result.is_err() {
            self.unmap_blocks(st, seg, &taken);
            (st.tables.seg_state[s], st.tables.seg_wp[s], st.wp[s]) = before;
        }
        result
    }

    /// Erases and unmaps a segment's blocks; returns the TRIM's result. The blocks are erased
    /// before the tables change; a block whose erase fails (injected, or a media error) is
    /// retired as bad instead of freed, and the segment is still freed (`EraseFailed`).
    fn trim(&self, st: &mut State, seg: SegmentId, start: u64, due: &mut u64) -> Result<()> {
        let g = self.geometry;
        let s = seg.0 as usize;
        if st.tables.seg_state[s] == SegmentState::Free {
            return Ok(());
        }
        let mut fail = self.faults.take_erase(seg);
        // (chip, block) of the segment's good blocks to erase, and of those that failed.
        let mut erase = Vec::with_capacity(g.chips() as usize);
        let mut failed = Vec::new();
        for chip in 0..g.chips() {
            let block = st.tables.mapped(seg, chip);
            if block == UNMAPPED {
                continue;
            }
            if let Some(sched) = st.sched.as_mut() {
                *due = (*due).max(sched.erase(start, chip));
            }
            if st.tables.block_state[st.tables.block_index(chip, block)] == BlockState::Bad {
                continue;
            }
            if fail {
                fail = false;
                failed.push((chip, block));
                continue;
            }
            erase.push((chip, block));
        }
        let pages_of = |&(chip, block): &(u32, u32)| -> Vec<Ppa> {
            (0..g.pages_per_block)
                .map(|p| g.ppa(chip, block, p))
                .collect()
        };
        let all: Vec<Ppa> = erase.iter().flat_map(pages_of).collect();
        if let Err(e) = self.media.erase(&all) {
            // Find out which blocks fail, one at a time; the others are erased.
            tracing::warn!("erase of segment {seg} failed ({e}); retrying block by block");
            erase.retain(|b| match self.media.erase(&pages_of(b)) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("erase of block {} of chip {} failed: {e}", b.1, b.0);
                    failed.push(*b);
                    false
                }
            });
        }
        // Every block is now erased or failed: only from here on do the tables change. An
        // erase is durable at once: what the cache held for these pages is gone with it.
        if !st.unflushed.is_empty() {
            for b in erase.iter().chain(&failed) {
                for p in pages_of(b) {
                    st.unflushed.remove(&p);
                }
            }
        }
        for chip in 0..g.chips() {
            st.tables.set_mapped(seg, chip, UNMAPPED);
        }
        for &(chip, block) in &erase {
            let i = st.tables.block_index(chip, block);
            st.tables.block_state[i] = BlockState::Free;
            st.tables.pe[i] += 1;
            st.counters.erases += 1;
        }
        failed.sort_unstable();
        for &(chip, block) in &failed {
            let i = st.tables.block_index(chip, block);
            st.tables.block_state[i] = BlockState::Bad;
            tracing::warn!("erase failure: retired block {block} of chip {chip}");
        }
        let failure = failed
            .first()
            .map(|&(chip, block)| DeviceError::EraseFailed {
                segment: seg,
                chip,
                block,
            });
        st.tables.seg_state[s] = SegmentState::Free;
        st.tables.seg_wp[s] = 0;
        st.wp[s] = 0;
        st.holes.remove(&seg.0);
        st.counters.trims += 1;
        self.persist(st)?;
        failure.map_or(Ok(()), Err)
    }

    /// Polls the media once and marks what finished. With `block`, sleeps in the kernel for
    /// at least one completion, unless `target` is already finished.
    fn pump(&self, block: bool, target: Option<u32>) -> Result<()> {
        let guard = if block {
            self.poll_lock.lock()
        } else {
            match self.poll_lock.try_lock() {
                Some(g) => g,
                None => return Ok(()),
            }
        };
        let block = block
            && !target.is_some_and(|t| {
                let st = self.state.lock();
                st.cmds[t as usize]
                    .as_ref()
                    .is_none_or(|c| c.done.is_some())
            });
        let mut dones = Vec::new();
        let polled = self.media.poll(&mut dones, block);
        // The commands are marked done before the poll lock is released: a waiter that takes
        // the lock next sees its command done, rather than neither done nor on the media (and
        // sleeping in the kernel for a completion that was already taken).
        if !dones.is_empty() {
            let mut st = self.state.lock();
            for d in dones {
                let id = d.id as usize;
                if let Some(cmd) = st.cmds.get_mut(id).and_then(Option::as_mut) {
                    let key = (cmd.due, cmd.seq, d.id);
                    let awaited = cmd.awaited;
                    cmd.done = Some(d);
                    // Awaited commands are delivered by their waiter, not by `reap`.
                    if !awaited {
                        st.ready.push(Reverse(key));
                    }
                }
                // Else: lost in a power cut.
            }
        }
        drop(guard);
        // Waiters that found the poll lock held sleep on `finished` (`wait_for`). Each counts
        // itself in `followers`, then looks at the lock, holding `state` from before the
        // count until its sleep releases it; this thread freed the lock and then reads the
        // count, a full fence between the two on each side. So either the waiter saw the
        // lock free (and polls itself), or the count read here includes it: taking `state`
        // then waits until it sleeps, and the wake-up reaches it.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.followers.load(Ordering::SeqCst) > 0 {
            drop(self.state.lock());
            self.finished.notify_all();
        }
        polled
    }

    /// Turns a finished command into its completion and frees its tag.
    fn finish(&self, st: &mut State, tag: u32, now: Instant) -> Completion {
        let Some(cmd) = st.cmds[tag as usize].take() else {
            // Unreachable by construction: only finished, present commands are finished. The
            // tag of an empty slot is already free: it must not be pushed a second time.
            return Completion {
                tag: Tag(tag),
                kind: CommandKind::Flush,
                lba: None,
                segment: None,
                result: Err(DeviceError::PoweredOff),
                buf: None,
                latency_ns: 0,
            };
        };
        st.free_tags.push(tag);
        if !cmd.awaited {
            st.reapable -= 1;
        }
        let done = cmd.done;
        let (media_result, buf) = match done {
            Some(d) => (d.result, d.buf),
            None => (Ok(()), None),
        };
        let result = match cmd.preset {
            Some(r) => r,
            None => media_result,
        };
        if self.config.release == Release::Virtual {
            st.vnow = st.vnow.max(cmd.due);
        }
        let latency_ns = if st.sched.is_some() && self.config.release == Release::Virtual {
            cmd.due - cmd.start
        } else {
            u64::try_from(now.saturating_duration_since(cmd.submitted).as_nanos())
                .unwrap_or(u64::MAX)
        };
        match cmd.kind {
            CommandKind::Read => st.counters.reads += 1,
            CommandKind::Write => st.counters.writes += 1,
            CommandKind::Flush => st.counters.flushes += 1,
            CommandKind::Trim => {}
        }
        if result.is_err() {
            st.counters.errors += 1;
        }
        if self.cache && result.is_ok() {
            match (cmd.kind, cmd.program_ppa) {
                (CommandKind::Write, Some(ppa)) if cmd.on_media => {
                    // Delivered: now in the write cache until a later FLUSH is delivered.
                    st.programs_delivered += 1;
                    let n = st.programs_delivered;
                    st.unflushed.insert(ppa, n);
                }
                (CommandKind::Flush, _) => {
                    let covered = cmd.flush_covers;
                    st.unflushed.retain(|_, &mut n| n > covered);
                }
                _ => {}
            }
        }
        if let (Some(seg), true) = (cmd.segment, cmd.kind != CommandKind::Trim) {
            let s = seg.0 as usize;
            st.seg_busy[s] -= 1;
            if cmd.kind == CommandKind::Write {
                if let (Err(e), Some(lba), true) = (&result, cmd.lba, cmd.on_media) {
                    // An I/O error on a program: the page holds nothing.
                    tracing::error!("write of LBA {lba} failed: {e}");
                    if let Ok((_, off)) = self.geometry.locate(lba) {
                        st.holes.entry(seg.0).or_default().insert(off);
                    }
                }
            }
            // Whatever command was last on the segment (a read may outlast its final write).
            self.maybe_mark_full(st, seg);
        }
        Completion {
            tag: Tag(tag),
            kind: cmd.kind,
            lba: cmd.lba,
            segment: cmd.segment,
            result,
            buf,
            latency_ns,
        }
    }

    /// Records a segment as full once its last write has completed and nothing else is in
    /// flight on it: in the tables in memory, which reach the media with the next table
    /// write (the next segment opened or trimmed, or the close). Until then the media's
    /// tables say open, and recovery scans the segment for its write pointer, which finds it
    /// full: the record only spares recovery that scan, so it need not cost a table write
    /// (a write and an fdatasync on the file backend) of its own. The log fills one segment
    /// and opens the next, so the open's table write carries it: one synchronous table
    /// write fewer per segment written (`Ftl::stats().table_writes`).
    fn maybe_mark_full(&self, st: &mut State, seg: SegmentId) {
        let s = seg.0 as usize;
        if st.seg_busy[s] == 0
            && st.wp[s] == self.geometry.pages_per_segment()
            && st.tables.seg_state[s] == SegmentState::Open
            && !st.holes.contains_key(&seg.0)
        {
            st.tables.seg_state[s] = SegmentState::Full;
            st.tables.seg_wp[s] = st.wp[s];
        }
    }

    /// Delivers ready completions (skipping those awaited by `execute`), up to `max`.
    fn deliver(&self, st: &mut State, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut n = 0;
        let mut skipped = Vec::new();
        let now = self.now(st);
        // One clock reading stamps every completion delivered here.
        let stamp = Instant::now();
        while n < max {
            let Some(&Reverse((due, seq, tag))) = st.ready.peek() else {
                break;
            };
            if self.config.release == Release::WallClock && due > now {
                break;
            }
            st.ready.pop();
            match st.cmds[tag as usize].as_ref() {
                // Stale: that command was already finished, and the tag may have been reused.
                None => continue,
                Some(c) if c.seq != seq => continue,
                Some(c) if c.awaited => {
                    skipped.push(Reverse((due, seq, tag)));
                    continue;
                }
                Some(_) => {}
            }
            out.push(self.finish(st, tag, stamp));
            n += 1;
        }
        st.ready.extend(skipped);
        n
    }

    /// Time until the earliest ready completion is due (wall-clock release only).
    fn wait_for_due(&self, st: &State) -> Option<Duration> {
        if self.config.release != Release::WallClock {
            return None;
        }
        let Reverse((due, _, _)) = st.ready.peek()?;
        let now = self.wall_ns();
        (*due > now).then(|| Duration::from_nanos(due - now))
    }

    /// Waits for the completion of a command submitted as awaited, and delivers it.
    fn wait_for(&self, tag: u32) -> std::result::Result<Completion, Rejected> {
        loop {
            {
                let mut st = self.state.lock();
                let Some(cmd) = st.cmds[tag as usize].as_ref() else {
                    return Err(reject(DeviceError::PoweredOff, None));
                };
                if cmd.done.is_some() {
                    let due = cmd.due;
                    let now = self.wall_ns();
                    if self.config.release == Release::WallClock && due > now {
                        drop(st);
                        pause(Duration::from_nanos(due - now));
                        continue;
                    }
                    return Ok(self.finish(&mut st, tag, Instant::now()));
                }
                // Another thread is in the media's poll: it reports to every waiter at once
                // (`pump`, where the argument is).
                self.followers.fetch_add(1, Ordering::SeqCst);
                std::sync::atomic::fence(Ordering::SeqCst);
                if self.poll_lock.is_locked() {
                    self.finished.wait_for(&mut st, Self::FOLLOWER_WAIT);
                    self.followers.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                self.followers.fetch_sub(1, Ordering::SeqCst);
            }
            if let Err(e) = self.pump(true, Some(tag)) {
                return Err(reject(e, None));
            }
        }
    }

    /// `wait_for`'s wait while another thread polls the media: that thread marks what
    /// finished and wakes every waiter at once (`pump`), so the waiters do not queue for the
    /// poll lock and wake one after another behind it. A bound only as a safety net.
    const FOLLOWER_WAIT: Duration = Duration::from_millis(1);

    /// Hands queued commands to the backend. A failure is logged: the commands stay queued
    /// and the next doorbell (or a blocking reap) hands them over.
    fn ring_doorbell(&self) {
        if let Err(e) = self.media.doorbell() {
            tracing::warn!("device doorbell failed, will retry: {e}");
        }
    }

    /// Commands in flight that a general reap can deliver (not awaited by `execute`).
    fn reapable(&self, st: &State) -> usize {
        st.reapable
    }
}

/// A command without its buffer, to rebuild it when the queue hands the buffer back.
#[derive(Clone, Copy)]
enum Shape {
    Read(Lba),
    Write(Lba),
    Append(SegmentId),
    Trim(SegmentId),
    Flush,
}

impl Shape {
    fn of(cmd: &Command) -> Shape {
        match cmd {
            Command::Read { lba, .. } => Shape::Read(*lba),
            Command::Write { lba, .. } => Shape::Write(*lba),
            Command::Append { segment, .. } => Shape::Append(*segment),
            Command::Trim { segment } => Shape::Trim(*segment),
            Command::Flush => Shape::Flush,
        }
    }

    fn rebuild(self, buf: Option<PageBuf>) -> Command {
        let buf = buf.unwrap_or_else(PageBuf::zeroed);
        match self {
            Shape::Read(lba) => Command::Read { lba, buf },
            Shape::Write(lba) => Command::Write { lba, buf },
            Shape::Append(segment) => Command::Append { segment, buf },
            Shape::Trim(segment) => Command::Trim { segment },
            Shape::Flush => Command::Flush,
        }
    }
}

/// Waits part of `d` (the caller checks the clock again): sleeps through long waits, and
/// through a short one yields the core rather than spin, so that on a small machine the
/// simulated device's waiting does not take CPU from the threads it is timing (the engine's
/// maintenance thread and its clients share the cores with it).
fn pause(d: Duration) {
    if d > Duration::from_micros(200) {
        std::thread::sleep(d - Duration::from_micros(100));
    } else {
        std::thread::yield_now();
    }
}

impl AppendDevice for Ftl {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&self, cmd: Command) -> std::result::Result<Tag, Rejected> {
        let tag = self.submit_inner(cmd, false, Instant::now())?;
        self.ring_doorbell();
        Ok(tag)
    }

    fn submit_many(&self, cmds: Vec<Command>) -> Vec<std::result::Result<Tag, Rejected>> {
        let now = Instant::now();
        let out = cmds
            .into_iter()
            .map(|c| self.submit_inner(c, false, now))
            .collect();
        self.ring_doorbell();
        out
    }

    fn queue_many(&self, cmds: Vec<Command>) -> Vec<std::result::Result<Tag, Rejected>> {
        let now = Instant::now();
        cmds.into_iter()
            .map(|c| self.submit_inner(c, false, now))
            .collect()
    }

    fn doorbell(&self) {
        self.ring_doorbell();
    }

    fn doorbell_if_idle(&self) {
        if let Err(e) = self.media.doorbell_if_idle() {
            tracing::warn!("device doorbell failed, will retry: {e}");
        }
    }

    fn submit_and_reap(
        &self,
        cmds: Vec<Command>,
        out: &mut Vec<Completion>,
        max: usize,
        wait: Wait,
    ) -> (Vec<std::result::Result<Tag, Rejected>>, Result<usize>) {
        // No doorbell here: the media poll inside `reap` hands the commands over.
        let now = Instant::now();
        let tags = cmds
            .into_iter()
            .map(|c| self.submit_inner(c, false, now))
            .collect();
        let reaped = self.reap(out, max, wait);
        (tags, reaped)
    }

    fn reap(&self, out: &mut Vec<Completion>, max: usize, wait: Wait) -> Result<usize> {
        loop {
            // With `Block` and nothing ready, one kernel entry both hands over queued
            // commands and sleeps until a completion arrives.
            let sleep = wait == Wait::Block && {
                let st = self.state.lock();
                st.ready.is_empty() && self.reapable(&st) > 0
            };
            self.pump(sleep, None)?;
            let due_in = {
                let mut st = self.state.lock();
                if !st.powered {
                    return Err(DeviceError::PoweredOff);
                }
                let n = self.deliver(&mut st, out, max);
                if n > 0 || wait == Wait::NoWait || max == 0 || self.reapable(&st) == 0 {
                    return Ok(n);
                }
                self.wait_for_due(&st)
            };
            match due_in {
                Some(d) => pause(d),
                None => std::hint::spin_loop(),
            }
        }
    }

    fn execute(&self, cmd: Command) -> std::result::Result<Completion, Rejected> {
        let tag = self.submit_inner(cmd, true, Instant::now())?.0;
        self.ring_doorbell();
        self.wait_for(tag)
    }

    fn read_ring(self: std::sync::Arc<Self>) -> Option<Box<dyn crate::device::ReadRing>> {
        self.new_read_ring()
    }

    fn execute_many(&self, cmds: Vec<Command>) -> Vec<std::result::Result<Completion, Rejected>> {
        // Nothing to run rings no doorbell: a ring would hand the device every page other
        // users queued and hold back on purpose (a caller whose reads DRAM served, say).
        if cmds.is_empty() {
            return Vec::new();
        }
        if self.direct_reads && cmds.iter().all(|c| matches!(c, Command::Read { .. })) {
            return self.read_many_direct(cmds);
        }
        let n = cmds.len();
        let mut results: Vec<Option<std::result::Result<Completion, Rejected>>> =
            (0..n).map(|_| None).collect();
        // (index, tag) of submitted commands not yet waited for, oldest first.
        let mut outstanding: std::collections::VecDeque<(usize, u32)> = Default::default();
        for (i, mut cmd) in cmds.into_iter().enumerate() {
            loop {
                let shape = Shape::of(&cmd);
                match self.submit_inner(cmd, true, Instant::now()) {
                    Ok(tag) => {
                        outstanding.push_back((i, tag.0));
                        break;
                    }
                    Err(r) if matches!(r.error, DeviceError::QueueFull { .. }) => {
                        // Make room: finish our oldest command, or let other users finish.
                        self.ring_doorbell();
                        cmd = shape.rebuild(r.buf);
                        match outstanding.pop_front() {
                            Some((j, t)) => results[j] = Some(self.wait_for(t)),
                            None => std::thread::yield_now(),
                        }
                    }
                    Err(r) => {
                        results[i] = Some(Err(r));
                        break;
                    }
                }
            }
        }
        self.ring_doorbell();
        for (j, t) in outstanding {
            results[j] = Some(self.wait_for(t));
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(reject(DeviceError::PoweredOff, None))))
            .collect()
    }

    fn segment_info(&self, segment: SegmentId) -> Result<SegmentInfo> {
        self.geometry.check_segment(segment)?;
        let st = self.state.lock();
        if !st.powered {
            return Err(DeviceError::PoweredOff);
        }
        Ok(SegmentInfo {
            segment,
            state: st.tables.seg_state[segment.0 as usize],
            write_pointer: st.wp[segment.0 as usize],
            pages: self.geometry.pages_per_segment(),
        })
    }

    fn stats(&self) -> DeviceStats {
        let st = self.state.lock();
        let c = &st.counters;
        let count =
            |want: SegmentState| st.tables.seg_state.iter().filter(|&&s| s == want).count() as u32;
        let good = st
            .tables
            .pe
            .iter()
            .zip(&st.tables.block_state)
            .filter(|(_, s)| **s != BlockState::Bad)
            .map(|(p, _)| *p);
        DeviceStats {
            reads: c.reads,
            writes: c.writes,
            trims: c.trims,
            flushes: c.flushes,
            erases: c.erases,
            table_writes: c.table_writes,
            errors: c.errors,
            segments: self.geometry.segments(),
            free_segments: count(SegmentState::Free),
            open_segments: count(SegmentState::Open),
            full_segments: count(SegmentState::Full),
            read_only_segments: count(SegmentState::ReadOnly),
            pe_min: good.clone().min().unwrap_or(0),
            pe_max: good.max().unwrap_or(0),
            bad_blocks: st
                .tables
                .block_state
                .iter()
                .filter(|&&s| s == BlockState::Bad)
                .count() as u32,
            clock_ns: self.now(&st),
        }
    }

    fn in_flight(&self) -> usize {
        let st = self.state.lock();
        st.cmds.iter().flatten().count()
    }

    fn free_tags(&self) -> Option<usize> {
        Some(self.state.lock().free_tags.len())
    }
}

impl Drop for Ftl {
    fn drop(&mut self) {
        if self.state.lock().powered {
            if let Err(e) = self.close_inner() {
                tracing::error!("closing the device on drop failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
