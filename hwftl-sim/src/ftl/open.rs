//! Formatting and opening a device: the superblock, the tables and the write pointers
//! recovered from the media, and starting the FTL on them.

use super::*;

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
    pub(super) fn format_media(mut media: Box<dyn Media>, config: DeviceConfig) -> Result<Ftl> {
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
            opening: None,
            tables_dirty: false,
            tables,
        };
        let direct_reads =
            config.caller_ring_reads && media.has_direct_reads() && config.timing.nand().is_none();
        Ok(Ftl {
            direct_reads,
            geometry: g,
            config,
            media,
            state: Mutex::new(state),
            poll_lock: Mutex::new(()),
            tables_lock: Mutex::new(()),
            finished: Condvar::new(),
            followers: std::sync::atomic::AtomicUsize::new(0),
            faults: FaultInjector::default(),
            epoch: Instant::now(),
            cache,
            read_only,
        })
    }
}
