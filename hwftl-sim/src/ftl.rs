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
}

/// The append-only FTL over a media backend.
pub struct Ftl {
    geometry: Geometry,
    config: DeviceConfig,
    media: Box<dyn Media>,
    state: Mutex<State>,
    /// Held by the thread polling the media.
    poll_lock: Mutex<()>,
    /// Signalled when commands finish on the media.
    finished: Condvar,
    faults: FaultInjector,
    epoch: Instant,
    /// Whether the volatile write cache is modelled (the option is on and the media can undo
    /// a completed program).
    cache: bool,
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

impl Ftl {
    /// Formats the backend as a new, empty device with `config.geometry` (a file is created
    /// or truncated) and opens it.
    ///
    /// # Errors
    /// `InvalidGeometry`, or the backend's I/O error.
    pub fn format(backend: &Backend, config: DeviceConfig) -> Result<Ftl> {
        config.geometry.validate()?;
        Self::check_queue_depth(config.queue_depth)?;
        let media = media_for(backend, true, config.queue_depth)?;
        Self::format_media(media, config)
    }

    /// Formats `media` (sized for `config.geometry`) and opens the device on it.
    fn format_media(mut media: Box<dyn Media>, config: DeviceConfig) -> Result<Ftl> {
        let g = config.geometry;
        media.prepare(layout(&g), true)?;
        media.write_meta(0, &encode_superblock(&g))?;
        let mut tables = Tables::new(g);
        tables.generation = 1;
        tables.clean = true;
        media.write_meta(slot_offset(&g, 1), &tables.encode())?;
        tracing::info!("formatted {} as {g}", media.describe());
        Self::start(media, config, tables)
    }

    /// Reads the geometry recorded on a formatted backend.
    ///
    /// # Errors
    /// `NotFormatted`, `TableCorrupt`, or the backend's I/O error (a missing file included).
    pub fn probe(backend: &Backend) -> Result<Geometry> {
        let media = media_for(backend, false, 2)?;
        decode_superblock(&media.read_meta(0, SUPERBLOCK_BYTES)?)
    }

    /// Opens an existing device. Its recorded geometry must equal `config.geometry`. After an
    /// unclean stop (power cut, kill) the write pointers of open segments are recovered by
    /// scanning them; pages lost in flight read as unwritten. With
    /// [`DeviceConfig::volatile_cache`], segments recorded as full are scanned too (a cut may
    /// have lost their last pages from the cache).
    ///
    /// # Errors
    /// `NotFormatted`, `GeometryMismatch`, `WrongSize`, `TableCorrupt` (superblock or both
    /// table copies bad), or the backend's I/O error.
    pub fn open(backend: &Backend, config: DeviceConfig) -> Result<Ftl> {
        Self::open_inner(backend, config, false)
    }

    /// Opens an existing device without changing it, for an offline check (`lightstore
    /// fsck`): the owner lock is taken as by [`Ftl::open`] (so a running drive and the check
    /// exclude each other), write pointers after an unclean stop are recovered in memory
    /// only, the tables are never written (the next [`Ftl::open`] recovers as if this open
    /// never happened), and `Write`, `Append` and `Trim` are refused with
    /// [`DeviceError::ReadOnlyDevice`]. Reads and `Flush` work.
    ///
    /// # Errors
    /// As [`Ftl::open`] (`InUse` when a drive holds the device).
    pub fn open_read_only(backend: &Backend, config: DeviceConfig) -> Result<Ftl> {
        Self::open_inner(backend, config, true)
    }

    fn open_inner(backend: &Backend, config: DeviceConfig, read_only: bool) -> Result<Ftl> {
        Self::check_queue_depth(config.queue_depth)?;
        let mut media = media_for(backend, false, config.queue_depth)?;
        let stored = decode_superblock(&media.read_meta(0, SUPERBLOCK_BYTES)?)?;
        if stored != config.geometry {
            return Err(DeviceError::GeometryMismatch {
                stored: stored.to_string(),
                requested: config.geometry.to_string(),
            });
        }
        let g = stored;
        media.prepare(layout(&g), false)?;
        let slot_len = slot_bytes(&g) as usize;
        let mut best: Option<Tables> = None;
        let mut errors = Vec::new();
        for slot in 0..2u64 {
            let bytes = media.read_meta(slot_offset(&g, slot), slot_len)?;
            match Tables::decode(g, &bytes) {
                Ok(t) if best.as_ref().is_none_or(|b| t.generation > b.generation) => {
                    best = Some(t)
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("slot {slot}: {e}")),
            }
        }
        let Some(mut tables) = best else {
            return Err(DeviceError::TableCorrupt(format!(
                "no valid copy of the tables ({})",
                errors.join("; ")
            )));
        };
        for e in &errors {
            tracing::warn!("ignoring a bad table copy: {e}");
        }
        let holes = if tables.clean {
            HashMap::new()
        } else {
            let scan_full = config.volatile_cache && media.simulates_write_cache();
            Self::recover_write_pointers(media.as_ref(), &mut tables, scan_full)?
        };
        let ftl = Self::start_mode(media, config, tables, read_only)?;
        ftl.state.lock().holes = holes;
        Ok(ftl)
    }

    /// Opens the device on `backend`, formatting it first if it holds none (a missing file
    /// or an unformatted one).
    ///
    /// # Errors
    /// As [`Ftl::open`] and [`Ftl::format`].
    pub fn open_or_format(backend: &Backend, config: DeviceConfig) -> Result<Ftl> {
        let missing = match backend {
            Backend::File(p) => !p.exists(),
            Backend::Ram(_) => false,
        };
        if missing {
            return Self::format(backend, config);
        }
        match Self::open(backend, config) {
            Err(DeviceError::NotFormatted) => Self::format(backend, config),
            // A RAM store never formatted has no metadata at all.
            Err(DeviceError::WrongSize { actual: 0, .. }) if matches!(backend, Backend::Ram(_)) => {
                Self::format(backend, config)
            }
            other => other,
        }
    }

    fn check_queue_depth(depth: u32) -> Result<()> {
        if depth == 0 || depth > 4096 {
            return Err(DeviceError::InvalidGeometry(format!(
                "queue depth {depth} must be between 1 and 4096"
            )));
        }
        Ok(())
    }

    /// Finds the write pointer of every open or read-only segment from what the media holds,
    /// and the pages below it that hold nothing. With `scan_full`, full segments too: one that
    /// lost any page (from a volatile write cache) is open again, as if the lost programs had
    /// never happened.
    fn recover_write_pointers(
        media: &dyn Media,
        tables: &mut Tables,
        scan_full: bool,
    ) -> Result<HashMap<u32, BTreeSet<u32>>> {
        let g = tables.geometry;
        let mut holes = HashMap::new();
        for s in 0..g.segments() {
            let state = tables.seg_state[s as usize];
            let limit = match state {
                SegmentState::Open => g.pages_per_segment(),
                SegmentState::Full if scan_full => g.pages_per_segment(),
                SegmentState::ReadOnly => tables.seg_wp[s as usize],
                SegmentState::Free | SegmentState::Full => continue,
            };
            let seg = SegmentId(s);
            let ppas: Vec<Ppa> = (0..limit)
                .map(|off| {
                    let (chip, page) = g.stripe(off);
                    let block = tables.mapped(seg, chip);
                    if block == UNMAPPED {
                        u64::MAX
                    } else {
                        g.ppa(chip, block, page)
                    }
                })
                .collect();
            let mapped: Vec<Ppa> = ppas.iter().copied().filter(|&p| p != u64::MAX).collect();
            let scanned = media.scan_programmed(&mapped)?;
            let programmed: std::collections::HashSet<Ppa> = mapped
                .iter()
                .zip(scanned)
                .filter_map(|(p, yes)| yes.then_some(*p))
                .collect();
            let is_prog = |off: u32| programmed.contains(&ppas[off as usize]);
            let wp = match state {
                SegmentState::Open | SegmentState::Full => {
                    (0..limit).rev().find(|&o| is_prog(o)).map_or(0, |o| o + 1)
                }
                _ => limit,
            };
            let missing: BTreeSet<u32> = (0..wp).filter(|&o| !is_prog(o)).collect();
            if state == SegmentState::Full {
                if wp == limit && missing.is_empty() {
                    continue;
                }
                tracing::warn!(
                    "segment {s}: full, but lost {} page(s) from the write cache: open again",
                    limit - wp + missing.len() as u32
                );
                tables.seg_state[s as usize] = SegmentState::Open;
            }
            if !missing.is_empty() {
                tracing::warn!(
                    "segment {s}: {} page(s) below the write pointer {wp} were lost",
                    missing.len()
                );
                holes.insert(s, missing);
            } else if state == SegmentState::Open && wp == limit {
                // Filled whole before the stop: its full record (kept in memory until the
                // next table write, see `maybe_mark_full`) had not reached the media.
                tables.seg_state[s as usize] = SegmentState::Full;
            }
            tables.seg_wp[s as usize] = wp;
        }
        Ok(holes)
    }

    fn start(media: Box<dyn Media>, config: DeviceConfig, tables: Tables) -> Result<Ftl> {
        Self::start_mode(media, config, tables, false)
    }

    fn start_mode(
        media: Box<dyn Media>,
        config: DeviceConfig,
        mut tables: Tables,
        read_only: bool,
    ) -> Result<Ftl> {
        let g = tables.geometry;
        let cache = config.volatile_cache && media.simulates_write_cache();
        if !read_only {
            // Mark the tables in use: a stop without `close` is then recognised as unclean.
            tables.clean = false;
            tables.generation += 1;
            media.write_meta(slot_offset(&g, tables.generation), &tables.encode())?;
        }
        let depth = config.queue_depth;
        let wp = tables.seg_wp.clone();
        let state = State {
            wp,
            holes: HashMap::new(),
            seg_busy: vec![0; g.segments() as usize],
            free_tags: (0..depth).rev().collect(),
            cmds: (0..depth).map(|_| None).collect(),
            ready: BinaryHeap::new(),
            sched: config.timing.nand().map(|t| NandScheduler::new(t, &g)),
            reapable: 0,
            vnow: 0,
            seq: 0,
            counters: Counters {
                table_writes: u64::from(!read_only),
                ..Counters::default()
            },
            powered: true,
            unflushed: HashMap::new(),
            programs_delivered: 0,
            tables,
        };
        Ok(Ftl {
            geometry: g,
            config,
            media,
            state: Mutex::new(state),
            poll_lock: Mutex::new(()),
            finished: Condvar::new(),
            faults: FaultInjector::default(),
            epoch: Instant::now(),
            cache,
            read_only,
        })
    }

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
    fn persist(&self, st: &mut State) -> Result<()> {
        let next = st.tables.generation + 1;
        let bytes = st.tables.encode_as(next);
        self.media
            .write_meta(slot_offset(&self.geometry, next), &bytes)?;
        st.tables.generation = next;
        st.counters.table_writes += 1;
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
    fn open_segment(&self, st: &mut State, seg: SegmentId) -> Result<()> {
        let g = self.geometry;
        let s = seg.0 as usize;
        let before = (st.tables.seg_state[s], st.tables.seg_wp[s], st.wp[s]);
        let mut taken = Vec::with_capacity(g.chips() as usize);
        let mut result = Ok(());
        for chip in 0..g.chips() {
            let Some(block) = st.tables.least_worn_free(chip) else {
                result = Err(DeviceError::NoSpareBlocks { chip, segment: seg });
                break;
            };
            let i = st.tables.block_index(chip, block);
            st.tables.block_state[i] = BlockState::Used;
            st.tables.set_mapped(seg, chip, block);
            taken.push((chip, block));
        }
        if result.is_ok() {
            st.tables.seg_state[s] = SegmentState::Open;
            st.tables.seg_wp[s] = 0;
            st.wp[s] = 0;
            result = self.persist(st);
        }
        if result.is_err() {
            for (c, b) in taken {
                let i = st.tables.block_index(c, b);
                st.tables.block_state[i] = BlockState::Free;
                st.tables.set_mapped(seg, c, UNMAPPED);
            }
            (st.tables.seg_state[s], st.tables.seg_wp[s], st.wp[s]) = before;
        }
        result
    }

    fn alloc_tag(&self, st: &mut State) -> Result<u32> {
        if !st.powered {
            return Err(DeviceError::PoweredOff);
        }
        st.free_tags.pop().ok_or(DeviceError::QueueFull {
            depth: self.config.queue_depth,
        })
    }

    /// `now` stamps the command for its latency (callers submitting many take one stamp:
    /// reading the clock per command cost ~13% of a queue-depth-32 read loop on this host).
    fn submit_inner(
        &self,
        cmd: Command,
        awaited: bool,
        now: Instant,
    ) -> std::result::Result<Tag, Rejected> {
        let g = self.geometry;
        let mut st = self.state.lock();
        let buf_of = |c: Command| match c {
            Command::Read { buf, .. }
            | Command::Write { buf, .. }
            | Command::Append { buf, .. } => Some(buf),
            Command::Trim { .. } | Command::Flush => None,
        };
        let tag = match self.alloc_tag(&mut st) {
            Ok(t) => t,
            Err(e) => return Err(reject(e, buf_of(cmd))),
        };
        let start = self.now(&st);
        st.seq += 1;
        let mut inflight = InFlight {
            kind: CommandKind::Flush,
            lba: None,
            segment: None,
            program_ppa: None,
            start,
            due: start,
            seq: st.seq,
            submitted: now,
            preset: None,
            done: None,
            awaited,
            on_media: false,
            flush_covers: st.programs_delivered,
        };
        let mut media_op = None;
        let mut spare_buf = None;
        let outcome: Result<()> = (|| {
            if self.read_only {
                let refused = match &cmd {
                    Command::Write { .. } => Some("WRITE"),
                    Command::Append { .. } => Some("APPEND"),
                    Command::Trim { .. } => Some("TRIM"),
                    Command::Read { .. } | Command::Flush => None,
                };
                if let Some(command) = refused {
                    spare_buf = buf_of(cmd);
                    return Err(DeviceError::ReadOnlyDevice { command });
                }
            }
            match cmd {
                Command::Read { lba, buf } => {
                    inflight.kind = CommandKind::Read;
                    inflight.lba = Some(lba);
                    let ppa = match self.readable_ppa(&st, lba) {
                        Ok(p) => p,
                        Err(e) => {
                            spare_buf = Some(buf);
                            return Err(e);
                        }
                    };
                    let (seg, off) = g.locate(lba)?;
                    inflight.segment = Some(seg);
                    let chip = g.stripe(off).0;
                    if let Some(s) = st.sched.as_mut() {
                        inflight.due = s.read(start, chip);
                    }
                    if self.faults.take_read(lba, seg) {
                        inflight.preset = Some(Err(DeviceError::ReadFailed { lba }));
                        spare_buf = Some(buf);
                    } else {
                        media_op = Some(MediaOp::Read { ppa, buf });
                    }
                }
                Command::Write { lba, buf } => {
                    let (seg, off) = match g.locate(lba) {
                        Ok(x) => x,
                        Err(e) => {
                            spare_buf = Some(buf);
                            return Err(e);
                        }
                    };
                    self.prepare_write(
                        &mut st,
                        &mut inflight,
                        seg,
                        Some(off),
                        buf,
                        &mut media_op,
                        &mut spare_buf,
                    )?;
                }
                Command::Append { segment, buf } => {
                    if let Err(e) = g.check_segment(segment) {
                        spare_buf = Some(buf);
                        return Err(e);
                    }
                    self.prepare_write(
                        &mut st,
                        &mut inflight,
                        segment,
                        None,
                        buf,
                        &mut media_op,
                        &mut spare_buf,
                    )?;
                }
                Command::Trim { segment } => {
                    inflight.kind = CommandKind::Trim;
                    inflight.segment = Some(segment);
                    g.check_segment(segment)?;
                    let busy = st.seg_busy[segment.0 as usize];
                    if busy > 0 {
                        return Err(DeviceError::SegmentBusy {
                            segment,
                            in_flight: busy,
                        });
                    }
                    inflight.preset = Some(self.trim(&mut st, segment, start, &mut inflight.due));
                }
                Command::Flush => {
                    inflight.kind = CommandKind::Flush;
                    media_op = Some(MediaOp::Flush);
                }
            }
            Ok(())
        })();
        if let Err(e) = outcome {
            st.free_tags.push(tag);
            return Err(reject(e, spare_buf));
        }
        if let Some(seg) = inflight.segment {
            if inflight.kind != CommandKind::Trim {
                st.seg_busy[seg.0 as usize] += 1;
            }
        }
        match media_op {
            Some(op) => {
                inflight.on_media = true;
                if let Err((e, buf)) = self.media.start(tag, op) {
                    // Undo: the command never reached the media.
                    if let Some(seg) = inflight.segment {
                        st.seg_busy[seg.0 as usize] -= 1;
                        if inflight.kind == CommandKind::Write {
                            st.wp[seg.0 as usize] -= 1;
                        }
                    }
                    st.free_tags.push(tag);
                    return Err(reject(e, buf));
                }
            }
            None => {
                // Finished at submission (fault or TRIM): ready at its due time.
                inflight.done = Some(MediaDone {
                    id: tag,
                    result: Ok(()),
                    buf: spare_buf,
                });
                if !inflight.awaited {
                    st.ready.push(Reverse((inflight.due, inflight.seq, tag)));
                }
            }
        }
        if !inflight.awaited {
            st.reapable += 1;
        }
        st.cmds[tag as usize] = Some(inflight);
        Ok(Tag(tag))
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare_write(
        &self,
        st: &mut State,
        inflight: &mut InFlight,
        seg: SegmentId,
        at: Option<u32>,
        buf: PageBuf,
        media_op: &mut Option<MediaOp>,
        spare_buf: &mut Option<PageBuf>,
    ) -> Result<()> {
        let g = self.geometry;
        inflight.kind = CommandKind::Write;
        inflight.segment = Some(seg);
        let s = seg.0 as usize;
        let check = (|| {
            match st.tables.seg_state[s] {
                SegmentState::ReadOnly => {
                    return Err(DeviceError::SegmentReadOnly { segment: seg })
                }
                SegmentState::Full => return Err(DeviceError::SegmentFull { segment: seg }),
                SegmentState::Free | SegmentState::Open => {}
            }
            let wp = st.wp[s];
            if wp >= g.pages_per_segment() {
                return Err(DeviceError::SegmentFull { segment: seg });
            }
            if let Some(off) = at {
                if off != wp {
                    return Err(DeviceError::NotAtWritePointer {
                        lba: g.lba(seg, off),
                        segment: seg,
                        write_pointer: wp,
                    });
                }
            }
            if st.tables.seg_state[s] == SegmentState::Free {
                self.open_segment(st, seg)?;
            }
            Ok(wp)
        })();
        let off = match check {
            Ok(o) => o,
            Err(e) => {
                *spare_buf = Some(buf);
                return Err(e);
            }
        };
        let lba = g.lba(seg, off);
        inflight.lba = Some(lba);
        let (chip, page) = g.stripe(off);
        let block = st.tables.mapped(seg, chip);
        if let Some(sched) = st.sched.as_mut() {
            inflight.due = sched.program(inflight.start, chip);
        }
        if self.faults.take_program(lba, seg) {
            let i = st.tables.block_index(chip, block);
            st.tables.block_state[i] = BlockState::Bad;
            st.tables.seg_state[s] = SegmentState::ReadOnly;
            st.tables.seg_wp[s] = off;
            st.wp[s] = off;
            tracing::warn!(
                "program failure: retired block {block} of chip {chip}; segment {seg} read-only"
            );
            inflight.preset = Some(match self.persist(st) {
                Ok(()) => Err(DeviceError::ProgramFailed {
                    lba,
                    segment: seg,
                    chip,
                    block,
                }),
                Err(e) => Err(e),
            });
            *spare_buf = Some(buf);
            return Ok(());
        }
        st.wp[s] = off + 1;
        let ppa = g.ppa(chip, block, page);
        inflight.program_ppa = Some(ppa);
        *media_op = Some(MediaOp::Program { ppa, buf });
        Ok(())
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
            drop(st);
            drop(guard);
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
            }
            if let Err(e) = self.pump(true, Some(tag)) {
                return Err(reject(e, None));
            }
        }
    }

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

    fn execute_many(&self, cmds: Vec<Command>) -> Vec<std::result::Result<Completion, Rejected>> {
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Switches and records shared between a test and its [`HookedMedia`].
    #[derive(Default)]
    struct Hooks {
        /// Metadata writes fail, after tearing (zeroing) the range they were to write.
        fail_meta: AtomicBool,
        /// Offsets of the metadata writes that succeeded.
        meta_offsets: Mutex<Vec<u64>>,
        /// An erase touching any of these pages fails (the other pages are erased).
        bad_erase: Mutex<Vec<Ppa>>,
        /// `poll` collects nothing: completions stay in the media.
        hold: AtomicBool,
        /// Polls that returned at least one completion.
        polls_done: AtomicUsize,
    }

    /// RAM media with failures and hooks a test controls.
    struct HookedMedia {
        inner: RamMedia,
        hooks: Arc<Hooks>,
    }

    fn injected(what: &str) -> DeviceError {
        DeviceError::io(what, std::io::Error::other("injected by the test"))
    }

    impl Media for HookedMedia {
        fn prepare(&mut self, layout: MediaLayout, format: bool) -> Result<()> {
            self.inner.prepare(layout, format)
        }
        fn read_meta(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
            self.inner.read_meta(offset, len)
        }
        fn write_meta(&self, offset: u64, data: &[u8]) -> Result<()> {
            if self.hooks.fail_meta.load(Ordering::SeqCst) {
                self.inner.write_meta(offset, &vec![0; data.len()])?;
                return Err(injected("metadata write"));
            }
            self.inner.write_meta(offset, data)?;
            self.hooks.meta_offsets.lock().push(offset);
            Ok(())
        }
        fn start(&self, id: u32, op: MediaOp) -> std::result::Result<(), crate::media::StartError> {
            self.inner.start(id, op)
        }
        fn doorbell(&self) -> Result<()> {
            self.inner.doorbell()
        }
        fn poll(&self, out: &mut Vec<MediaDone>, block: bool) -> Result<()> {
            if self.hooks.hold.load(Ordering::SeqCst) {
                return Ok(());
            }
            let before = out.len();
            self.inner.poll(out, block)?;
            if out.len() > before {
                self.hooks.polls_done.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }
        fn erase(&self, ppas: &[Ppa]) -> Result<()> {
            let bad = self.hooks.bad_erase.lock().clone();
            let (fail, ok): (Vec<Ppa>, Vec<Ppa>) = ppas.iter().partition(|p| bad.contains(p));
            self.inner.erase(&ok)?;
            if fail.is_empty() {
                Ok(())
            } else {
                Err(injected("erase"))
            }
        }
        fn is_programmed(&self, ppa: Ppa) -> Result<bool> {
            self.inner.is_programmed(ppa)
        }
        fn revert_program(&self, ppa: Ppa) {
            self.inner.revert_program(ppa);
        }
        fn simulates_write_cache(&self) -> bool {
            self.inner.simulates_write_cache()
        }
        fn corrupt(&self, ppa: Ppa, byte: usize) -> Result<()> {
            self.inner.corrupt(ppa, byte)
        }
        fn describe(&self) -> String {
            "hooked ram".into()
        }
    }

    fn geometry() -> Geometry {
        Geometry {
            channels: 2,
            ways: 2,
            blocks_per_chip: 8,
            pages_per_block: 4,
            spare_blocks_per_chip: 1,
        }
    }

    fn cfg() -> DeviceConfig {
        DeviceConfig::new(geometry())
    }

    /// A freshly formatted device on hooked RAM media, and the store behind it.
    fn hooked() -> (Arc<Hooks>, RamStore, Ftl) {
        let store = RamStore::new();
        let hooks = Arc::new(Hooks::default());
        let media = HookedMedia {
            inner: RamMedia::new(store.clone()),
            hooks: hooks.clone(),
        };
        let dev = Ftl::format_media(Box::new(media), cfg()).unwrap();
        (hooks, store, dev)
    }

    fn append(segment: u32) -> Command {
        Command::Append {
            segment: SegmentId(segment),
            buf: PageBuf::zeroed(),
        }
    }

    fn assert_tags_free_once(dev: &Ftl) {
        let st = dev.state.lock();
        let mut tags = st.free_tags.clone();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), st.free_tags.len(), "a tag is free twice");
    }

    /// Finishes a reapable command the way `close` does, leaving its ready entry behind.
    fn finish_behind_the_heap(dev: &Ftl, tag: Tag) {
        dev.pump(false, None).unwrap();
        let mut st = dev.state.lock();
        assert_eq!(st.ready.len(), 1);
        dev.finish(&mut st, tag.0, Instant::now()).result.unwrap();
    }

    #[test]
    fn stale_ready_entry_of_a_finished_command_is_dropped() {
        let (_hooks, _store, dev) = hooked();
        let tag = dev.submit(append(0)).unwrap();
        finish_behind_the_heap(&dev, tag);
        let mut out = Vec::new();
        assert_eq!(dev.reap(&mut out, 8, Wait::NoWait).unwrap(), 0, "{out:?}");
        assert!(dev.state.lock().ready.is_empty());
        assert_tags_free_once(&dev);
        assert_eq!(
            dev.state.lock().free_tags.len(),
            DEFAULT_QUEUE_DEPTH as usize
        );
    }

    #[test]
    fn stale_ready_entry_does_not_deliver_the_command_reusing_its_tag() {
        let (hooks, _store, dev) = hooked();
        let old = dev.submit(append(0)).unwrap();
        finish_behind_the_heap(&dev, old);
        hooks.hold.store(true, Ordering::SeqCst);
        let new = dev.submit(append(0)).unwrap();
        assert_eq!(new, old, "the tag is reused");
        let mut out = Vec::new();
        // The new command has not finished on the media: nothing may be delivered.
        assert_eq!(dev.reap(&mut out, 8, Wait::NoWait).unwrap(), 0, "{out:?}");
        hooks.hold.store(false, Ordering::SeqCst);
        assert_eq!(dev.reap(&mut out, 8, Wait::NoWait).unwrap(), 1);
        assert_eq!(out[0].lba, Some(Lba(1)));
        assert!(out[0].result.is_ok() && out[0].buf.is_some());
        assert_tags_free_once(&dev);
    }

    #[test]
    fn failed_persist_while_opening_a_segment_leaves_it_free() {
        let (hooks, _store, dev) = hooked();
        let g = dev.geometry();
        hooks.fail_meta.store(true, Ordering::SeqCst);
        let err = dev.execute(append(1)).unwrap_err().error;
        assert!(matches!(err, DeviceError::Io { .. }), "{err}");
        {
            let st = dev.state.lock();
            assert_eq!(st.tables.seg_state[1], SegmentState::Free);
            assert!((0..g.chips()).all(|c| st.tables.mapped(SegmentId(1), c) == UNMAPPED));
            assert!(st.tables.block_state.iter().all(|&b| b == BlockState::Free));
        }
        hooks.fail_meta.store(false, Ordering::SeqCst);
        let before = hooks.meta_offsets.lock().len();
        let c = dev.execute(append(1)).unwrap();
        c.result.unwrap();
        assert_eq!(c.lba, Some(g.lba(SegmentId(1), 0)));
        // This time opening the segment was persisted.
        assert_eq!(hooks.meta_offsets.lock().len(), before + 1);
    }

    #[test]
    fn failed_persist_does_not_advance_the_generation() {
        let (hooks, store, dev) = hooked();
        dev.execute(append(0)).unwrap().result.unwrap();
        let generation = dev.state.lock().tables.generation;
        hooks.fail_meta.store(true, Ordering::SeqCst);
        // Two persists fail in a row, each tearing the slot it was writing.
        for seg in [1, 2] {
            let err = dev.execute(append(seg)).unwrap_err().error;
            assert!(matches!(err, DeviceError::Io { .. }), "{err}");
            assert_eq!(dev.state.lock().tables.generation, generation);
        }
        hooks.fail_meta.store(false, Ordering::SeqCst);
        dev.power_cut();
        drop(dev);
        // Both went to the same slot: the other kept the last good copy of the tables.
        let dev = Ftl::open(&Backend::Ram(store), cfg()).unwrap();
        let info = dev.segment_info(SegmentId(0)).unwrap();
        assert_eq!((info.state, info.write_pointer), (SegmentState::Open, 1));
        dev.execute(Command::Read {
            lba: Lba(0),
            buf: PageBuf::zeroed(),
        })
        .unwrap()
        .result
        .unwrap();
    }

    #[test]
    fn failed_media_erase_retires_the_block_and_leaves_the_tables_consistent() {
        let (hooks, store, dev) = hooked();
        let g = dev.geometry();
        for _ in 0..5 {
            dev.execute(append(0)).unwrap().result.unwrap();
        }
        let blocks: Vec<(u32, u32)> = {
            let st = dev.state.lock();
            (0..g.chips())
                .map(|c| (c, st.tables.mapped(SegmentId(0), c)))
                .collect()
        };
        let bad = blocks[1];
        hooks.bad_erase.lock().push(g.ppa(bad.0, bad.1, 0));
        let err = dev
            .execute(Command::Trim {
                segment: SegmentId(0),
            })
            .unwrap()
            .result
            .unwrap_err();
        assert!(
            matches!(err, DeviceError::EraseFailed { chip: 1, block, .. } if block == bad.1),
            "{err}"
        );
        {
            let st = dev.state.lock();
            assert_eq!(st.tables.seg_state[0], SegmentState::Free);
            for &(chip, block) in &blocks {
                assert_eq!(st.tables.mapped(SegmentId(0), chip), UNMAPPED);
                let i = st.tables.block_index(chip, block);
                if (chip, block) == bad {
                    assert_eq!(
                        (st.tables.block_state[i], st.tables.pe[i]),
                        (BlockState::Bad, 0)
                    );
                } else {
                    assert_eq!(
                        (st.tables.block_state[i], st.tables.pe[i]),
                        (BlockState::Free, 1)
                    );
                    for p in 0..g.pages_per_block {
                        assert!(!dev.media.is_programmed(g.ppa(chip, block, p)).unwrap());
                    }
                }
            }
        }
        dev.close().unwrap();
        let dev = Ftl::open(&Backend::Ram(store), cfg()).unwrap();
        let stats = dev.stats();
        assert_eq!((stats.bad_blocks, stats.free_segments), (1, g.segments()));
    }

    #[test]
    fn power_cut_on_a_file_waits_for_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::File(dir.path().join("device.img"));
        let dev = Ftl::format(&backend, cfg()).unwrap();
        for _ in 0..8 {
            dev.submit(append(0)).unwrap();
        }
        dev.power_cut();
        assert_eq!(
            dev.media.pending(),
            0,
            "io_uring operations outlive the cut"
        );
        drop(dev);
        let dev = Ftl::open(&backend, cfg()).unwrap();
        assert!(dev.segment_info(SegmentId(0)).unwrap().write_pointer <= 8);
    }

    #[test]
    fn a_device_file_has_one_owner_until_it_closes_or_loses_power() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("device.img");
        let backend = Backend::File(path.clone());
        let dev = Ftl::format(&backend, cfg()).unwrap();
        // A second open (a separate open file description, as another process's would be)
        // fails at once, and so does a second format (before it could truncate anything).
        for second in [Ftl::open(&backend, cfg()), Ftl::format(&backend, cfg())] {
            match second {
                Err(DeviceError::InUse { path: p, holder }) => {
                    assert_eq!(p, path.display().to_string());
                    assert!(holder.contains("this process"), "{holder}");
                }
                Err(e) => panic!("a second open failed otherwise: {e}"),
                Ok(_) => panic!("a second open of a device in use succeeded"),
            }
        }
        dev.close().unwrap();
        let dev = Ftl::open(&backend, cfg()).unwrap();
        dev.power_cut();
        // The cut process is gone: its lock with it.
        drop(Ftl::open(&backend, cfg()).unwrap());
        drop(dev);
    }

    #[test]
    fn pump_marks_completions_done_before_releasing_the_poll_lock() {
        let (hooks, _store, dev) = hooked();
        let dev = Arc::new(dev);
        dev.submit(append(0)).unwrap();
        // Holding the state lock stalls the pump right after it took the completion.
        let st = dev.state.lock();
        let pumper = {
            let dev = dev.clone();
            std::thread::spawn(move || dev.pump(false, None))
        };
        while hooks.polls_done.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        // The completion left the media but is not marked done yet: a waiter must not be able
        // to poll in between.
        let deadline = Instant::now() + Duration::from_millis(200);
        let mut window = false;
        while Instant::now() < deadline && !window {
            window = dev.poll_lock.try_lock().is_some();
            std::thread::yield_now();
        }
        drop(st);
        pumper.join().unwrap().unwrap();
        assert!(
            !window,
            "the poll lock was free while a completion was taken but not marked"
        );
        assert!(dev
            .state
            .lock()
            .cmds
            .iter()
            .flatten()
            .all(|c| c.done.is_some()));
    }

    #[test]
    fn segment_turns_full_when_a_read_outlasts_its_last_write() {
        let (_hooks, _store, dev) = hooked();
        let pages = dev.geometry().pages_per_segment();
        for _ in 1..pages {
            dev.execute(append(0)).unwrap().result.unwrap();
        }
        dev.submit(append(0)).unwrap();
        dev.submit(Command::Read {
            lba: Lba(0),
            buf: PageBuf::zeroed(),
        })
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(dev.reap(&mut out, 1, Wait::Block).unwrap(), 1);
        assert_eq!(out[0].kind, CommandKind::Write);
        // The read is still in flight on the segment.
        assert_eq!(
            dev.segment_info(SegmentId(0)).unwrap().state,
            SegmentState::Open
        );
        assert_eq!(dev.reap(&mut out, 1, Wait::Block).unwrap(), 1);
        assert_eq!(out[1].kind, CommandKind::Read);
        assert_eq!(
            dev.segment_info(SegmentId(0)).unwrap().state,
            SegmentState::Full
        );
    }
}
