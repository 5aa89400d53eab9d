//! What is durable and how it is found again: manifest snapshots, loading runs, the free
//! list, and the replay of the value-log tail.

use super::fsck::{Finding, FindingKind};
use super::levels;
use super::*;

use super::write::PIPELINE_PAGES;

/// Reads of a value-log page (recovery's tail, garbage collection's victims) before its
/// read error or bad checksum is believed (a device's read-retry levels are of this order).
pub(super) const READ_ATTEMPTS: u32 = 10;

/// Most batches that can be on the device at once: the write pipeline holds at most
/// [`PIPELINE_PAGES`] pages and a batch takes at least two of them (a client batch that
/// joined the shared open page counts one, but takes no batch number: its records are in its
/// opener's device batch; garbage collection's move batches count their bound or
/// `GC_PIPELINE_SHARE`, two or more, and enter only within the budget or with the pipeline
/// empty: see `GC_PIPELINE_SHARE`); a synchronous batch (a large client batch, a move of a
/// value spanning segments) runs alone. One more for a batch number a failed layout used
/// without writing.
pub(super) const MAX_IN_FLIGHT_BATCHES: u64 = PIPELINE_PAGES / 2 + 1;

/// A value-log tail page as recovery read it.
pub(super) enum TailRead {
    /// Read, and it passed the caller's check.
    Page(PageBuf),
    /// Never written (or lost in a cut), as the device reports.
    Unwritten,
    /// Unreadable, or it failed the check, on every attempt.
    Failed(String),
}

/// What a replayed record does to its key.
enum Replayed {
    /// Sets this slot.
    Set(Slot),
    /// Sets this slot, written by a retime (its record is garbage once flushed).
    Retime(Slot),
}

/// What is wrong with the page replay stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
    /// Never written, below the write pointer: a program lost in a cut.
    Hole,
    /// Unreadable, or it fails its checksum or format.
    Bad,
}

/// Where and why replay stopped before the end of the written tail.
struct Fault {
    kind: FaultKind,
    reason: String,
    /// Index of the log segment in the replayed list.
    meta: usize,
    /// The page within it.
    page: u32,
    /// Where the batch it belongs to began: the log ends there if it is torn.
    batch_start: (u32, u32),
    /// That batch's number, when one of its pages was read.
    torn_batch: Option<u64>,
}

/// How a stretch of replay ended.
enum SpanEnd {
    /// At the end of what reached the device: the log ends at `Some(position)`, or after
    /// its last page (`None`).
    End(Option<(u32, u32)>),
    /// At a page that cannot be used (see [`Inner::judge_stop`]).
    Fault(Fault),
}

/// What replay gathers across its stretches.
#[derive(Default)]
struct ReplayAcc {
    max_seq: u64,
    max_batch: u64,
    replayed: u64,
    /// The last batch applied whole.
    last_complete: Option<u64>,
}

/// Reads page `lba`, again up to [`READ_ATTEMPTS`] times while the read fails or `check`
/// refuses what came back; counts the attempts after the first in `retries`. A page the
/// device reports never written is `Unwritten` at once.
///
/// # Errors
/// Device errors other than a failed read (out of tags, powered off, ...).
pub(super) fn read_page_patiently(
    poller: &Poller,
    lba: Lba,
    check: impl Fn(&[u8]) -> std::result::Result<(), String>,
    retries: &mut u64,
) -> Result<TailRead> {
    let mut why = String::new();
    for attempt in 0..READ_ATTEMPTS {
        if attempt > 0 {
            *retries += 1;
        }
        let read = poller
            .run(
                vec![Command::Read {
                    lba,
                    buf: PageBuf::for_read(),
                }],
                1,
            )
            .pop()
            .ok_or_else(|| corrupt("a read returned no completion"))?;
        match read.and_then(Completion::into_buf) {
            Ok(Some(buf)) => match check(&buf) {
                Ok(()) => return Ok(TailRead::Page(buf)),
                Err(e) => why = e,
            },
            Ok(None) => why = "a read returned no buffer".into(),
            Err(DeviceError::Unwritten { .. }) => return Ok(TailRead::Unwritten),
            Err(e @ (DeviceError::ReadFailed { .. } | DeviceError::Io { .. })) => {
                why = format!("read error: {e}")
            }
            Err(e) => return Err(EngineError::Device(e)),
        }
    }
    Ok(TailRead::Failed(format!(
        "{why} ({READ_ATTEMPTS} attempts)"
    )))
}

/// Reads `lbas` with up to [`IO_WINDOW`] reads in flight, and each read that failed again on
/// its own as [`read_page_patiently`] reads it; counts those second reads and their attempts
/// in `retries`. One result per LBA, in order. Reading the
/// pages of a walk one device round trip at a time made the offline check of a small test
/// device take over a second (a futex hand-off with the poller per page).
///
/// # Errors
/// Device errors other than a failed read (out of tags, powered off, ...).
pub(super) fn read_pages_patiently(
    poller: &Poller,
    lbas: &[Lba],
    retries: &mut u64,
) -> Result<Vec<TailRead>> {
    let cmds = crate::io::page_reads(lbas);
    let mut out = Vec::with_capacity(lbas.len());
    for (&lba, read) in lbas.iter().zip(poller.run(cmds, IO_WINDOW)) {
        out.push(match read.and_then(Completion::into_buf) {
            Ok(Some(buf)) => TailRead::Page(buf),
            Err(DeviceError::Unwritten { .. }) => TailRead::Unwritten,
            // Failed or refused: read again on its own, and that is a retry.
            _ => {
                *retries += 1;
                read_page_patiently(poller, lba, |_| Ok(()), retries)?
            }
        });
    }
    Ok(out)
}

/// Pages of one device segment read ahead in windows of [`IO_WINDOW`] for a walk that
/// goes forward through the segment, possibly skipping pages (replay, the offline check).
#[derive(Default)]
pub(super) struct ReadAhead {
    /// The device segment of the window, if any.
    seg: Option<u32>,
    /// Its first page.
    first: u32,
    /// What each read returned, taken when used.
    pages: Vec<Option<std::result::Result<Option<PageBuf>, DeviceError>>>,
}

impl ReadAhead {
    /// Page `page` of segment `seg` (whose readable pages end at `end`): from the window
    /// when its read came back usable; otherwise (or when the window is elsewhere: a new
    /// window of up to [`IO_WINDOW`] pages from `page` is read first, all in flight at once)
    /// as [`read_page_patiently`] reads it, which counts as a retry in `retries`, as do its
    /// own attempts after the first.
    ///
    /// # Errors
    /// Device errors other than a failed read (out of tags, powered off, ...).
    pub(super) fn read(
        &mut self,
        poller: &Poller,
        g: &Geometry,
        at: (SegmentId, u32, u32),
        check: impl Fn(&[u8]) -> std::result::Result<(), String>,
        retries: &mut u64,
    ) -> Result<TailRead> {
        let (seg, page, end) = at;
        let covered = self.seg == Some(seg.0)
            && page >= self.first
            && page - self.first < self.pages.len() as u32;
        if !covered {
            let last = end.min(page.saturating_add(IO_WINDOW as u32)).max(page + 1);
            let cmds = (page..last)
                .map(|p| Command::Read {
                    lba: g.lba(seg, p),
                    buf: PageBuf::for_read(),
                })
                .collect();
            self.pages = poller
                .run(cmds, IO_WINDOW)
                .into_iter()
                .map(|r| Some(r.and_then(Completion::into_buf)))
                .collect();
            self.seg = Some(seg.0);
            self.first = page;
        }
        let slot = self
            .pages
            .get_mut((page - self.first) as usize)
            .and_then(Option::take);
        match slot {
            Some(Ok(Some(buf))) if check(&buf).is_ok() => return Ok(TailRead::Page(buf)),
            Some(Err(DeviceError::Unwritten { .. })) => return Ok(TailRead::Unwritten),
            // Failed or refused: read again on its own, and that is a retry.
            Some(_) => *retries += 1,
            None => {}
        }
        read_page_patiently(poller, g.lba(seg, page), check, retries)
    }
}

impl Inner {
    pub(super) fn snapshot(&self) -> Snapshot {
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
                    dead: m.dead.saturating_sub(self.tail_dead_of(m.log_seg)),
                    ..m.clone()
                })
                // Reclaimed victims stay listed until they are released (see `gc_reclaimed`).
                .chain(self.gc_reclaimed.iter().cloned())
                .collect(),
            kt_segments: self.kt_segments.clone(),
            runs,
        }
    }

    pub(super) fn persist(&mut self) -> Result<()> {
        // After an acknowledged write was lost nothing moves the checkpoint or releases a
        // segment (see `landing`).
        self.check_not_lost()?;
        // What the manifest points at (keytable pages, moved values) is durable before it.
        // The manifest is durable before anything it released is trimmed: its write ends
        // with a device flush of its own (`ManifestStore::write`), so a second one here would
        // only cover client pages written meanwhile (it cost ~10% of a persist's time in
        // `lightstore-bench run-overwrite --device-mib 256`).
        self.sync_device()?;
        self.snap_seq += 1;
        let snap = self.snapshot();
        self.manifest.write(self.dev.as_ref(), &snap)
    }

    /// Empties the device's volatile write cache (fdatasync on the file backend).
    pub(super) fn sync_device(&self) -> Result<()> {
        let dev = self.dev.clone();
        self.flush_gate.flush(|| device_flush(dev.as_ref()))?;
        Ok(())
    }

    pub(super) fn load_runs(&mut self, runs: &[RunMeta]) -> Result<()> {
        let mut sorted: Vec<&RunMeta> = runs.iter().collect();
        // L0 oldest first, so inserting each at the front leaves the newest first.
        sorted.sort_by_key(|r| (r.level, r.order));
        for meta in sorted {
            let lbas: Vec<Lba> = meta
                .extents
                .iter()
                .flat_map(|(first, n)| (0..u64::from(*n)).map(move |i| Lba(first + i)))
                .collect();
            let decoded = self.read_pages(&lbas).and_then(|pages| {
                let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
                KeyTable::decode_pages(meta.id, &refs, self.cfg.bloom_fp_rate)
                    .map_err(EngineError::Corrupt)
            });
            let t = match (decoded, self.fsck.as_mut()) {
                (Ok(t), _) => t,
                (Err(e), Some(findings)) => {
                    // fsck: reported, and the run left out so the rest can be checked.
                    findings.push(Finding::keytable(meta, e));
                    continue;
                }
                (Err(e), None) => return Err(e),
            };
            let level = usize::from(meta.level);
            if level > 0 && t.is_empty() {
                // An empty run below L0 (an older version wrote them): left out, so the
                // next manifest drops it and its pages are released.
                continue;
            }
            if self.cfg.uncached_keytables {
                self.kt_index.insert(meta.id, t.page_index());
            }
            self.next_l0_order = self.next_l0_order.max(meta.order + 1);
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
        // Below L0, a level's runs are partitioned by key: order them so, and refuse a
        // manifest whose runs overlap (a lookup would miss keys).
        for (l, level) in self.levels.iter_mut().enumerate().skip(1) {
            level.sort_by(|a, b| a.range().map(|r| r.0).cmp(&b.range().map(|r| r.0)));
            if let Err(e) = levels::check_partitioned(level) {
                let e = format!("keytable level {l}: {e}");
                match self.fsck.as_mut() {
                    Some(findings) => findings.push(Finding::new(FindingKind::Structure, e)),
                    None => return Err(corrupt(e)),
                }
            }
        }
        Ok(())
    }

    /// Every segment the manifest does not account for is free; leftovers are trimmed.
    pub(super) fn rebuild_free_list(&mut self) -> Result<()> {
        let mut used: BTreeSet<u32> = MANIFEST_SEGMENTS.into_iter().collect();
        used.extend(self.log_segs.values().map(|m| m.segment));
        used.extend(self.kt_segments.iter().copied());
        for s in 0..self.g.segments() {
            if used.contains(&s) {
                continue;
            }
            if self.dev.segment_info(SegmentId(s))?.state == SegmentState::Free {
                self.free.insert(s);
            } else if !self.read_only {
                self.trim_to_free(s)?;
            }
            // Read-only: left as it is, off the free list (the next writable open trims it).
        }
        Ok(())
    }

    /// Replays complete write batches from the checkpoint into the memtable; the value log
    /// ends where the last write in flight at the cut was torn. The garbage the replayed
    /// records make is counted as when they were first written (the manifest's counts leave
    /// it out). Returns the device segments of the log segments it dropped: the caller
    /// persists the manifest, then trims them with [`Inner::release_log_segments`].
    ///
    /// A page that cannot be used stops the replay. Whether the log may end there is
    /// judged by [`Inner::judge_stop`] from what follows it: a torn tail ends the log,
    /// damage stops the open with [`EngineError::LogDamaged`] and trims nothing. Opened
    /// read-only ([`EngineConfig::read_only_recovery`]), the replay skips a damaged batch
    /// and goes on with the batches after it, and nothing is trimmed.
    ///
    /// # Errors
    /// `LogDamaged`; device errors other than an unwritten or unreadable page.
    pub(super) fn replay(&mut self) -> Result<Vec<u32>> {
        let start = self.checkpoint;
        let metas: Vec<LogSegMeta> = self
            .log_segs
            .values()
            .filter(|m| m.log_seg >= start.0)
            .cloned()
            .collect();
        let mut wps = Vec::with_capacity(metas.len());
        for m in &metas {
            wps.push(self.dev.segment_info(SegmentId(m.segment))?.write_pointer);
        }
        let mut acc = ReplayAcc::default();
        let first_page = match metas.first() {
            Some(m) if m.log_seg == start.0 => start.1,
            _ => 0,
        };
        let mut from = (0usize, first_page);
        let mut skip: Option<Option<u64>> = None;
        let stop = loop {
            match self.replay_span(&metas, &wps, from, skip, &mut acc)? {
                SpanEnd::End(stop) => break stop,
                SpanEnd::Fault(f) => {
                    let damage = self.judge_stop(&metas, &wps, &f, acc.last_complete)?;
                    let Some(why) = damage else {
                        break Some(f.batch_start);
                    };
                    let m = &metas[f.meta];
                    let err = EngineError::LogDamaged {
                        log_seg: m.log_seg,
                        segment: m.segment,
                        page: f.page,
                        reason: format!("{}; {why}", f.reason),
                    };
                    if !self.read_only {
                        tracing::error!("{err}");
                        return Err(err);
                    }
                    tracing::error!("{err}; read-only: the damaged batch is skipped");
                    self.stats.recovery_damage += 1;
                    if let Some(findings) = self.fsck.as_mut() {
                        findings.push(Finding::new(FindingKind::LogDamage, err.to_string()));
                    }
                    // Skip what is left of the damaged batch and go on after it. A bad first
                    // page is taken for the batch after the last one applied (numbers go up
                    // by one, bar a layout that failed before writing).
                    skip = Some(f.torn_batch.or(acc.last_complete.map(|c| c + 1)));
                    from = (f.meta, f.page + 1);
                }
            }
        };
        self.next_seq = self.next_seq.max(acc.max_seq + 1);
        self.next_batch = self.next_batch.max(acc.max_batch + 1);
        self.stats.replayed_records = acc.replayed;
        // Seal where the log ends; drop log segments after the end (they hold only
        // unacknowledged data). New writes go to a fresh log segment. Read-only, this
        // happens in memory only (the state a writable open would reach, which fsck checks);
        // nothing is trimmed.
        let mut to_trim = Vec::new();
        for (m, &wp) in metas.iter().zip(&wps) {
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
            self.dead_raw.forget(log_seg);
            if let Some(meta) = self.log_segs.remove(&log_seg) {
                self.tail_dead.remove(&log_seg);
                released.push(meta.segment);
            }
        }
        if self.read_only {
            // The device stays as it is.
            self.released_read_only = released;
            return Ok(Vec::new());
        }
        Ok(released)
    }

    /// Replays from page `from.1` of `metas[from.0]` until the log ends or a page cannot be
    /// used. With `skip` (read-only salvage after damage), pages are passed over until a
    /// valid packed page of a batch after the damaged one (`Some(batch)`), or after the
    /// first batch met (`None`: the damaged batch's number is unknown, and a batch whose
    /// first pages were lost must not be applied in part).
    fn replay_span(
        &mut self,
        metas: &[LogSegMeta],
        wps: &[u32],
        from: (usize, u32),
        mut skip: Option<Option<u64>>,
        acc: &mut ReplayAcc,
    ) -> Result<SpanEnd> {
        // Records of the batch being collected, with their log segment (a batch may span two).
        // Per record of the batch: key, slot, sequence number, batch, log segment, and the
        // copy of a small value the memtable keeps (as the write path's `LaidOut::held`).
        type Pending = (Vec<u8>, Replayed, u64, u64, u32, Option<Bytes>);
        let mut pending: Vec<Pending> = Vec::new();
        let hold_max = self.cfg.entry_value_max.min(MAX_HELD_VALUE);
        // Unused bytes of the batch's packed pages, by log segment.
        let mut pending_waste: Vec<(u32, u64)> = Vec::new();
        let mut pending_batch: Option<u64> = None;
        // Where the batch being collected began: the log ends there if it never completes.
        let mut batch_start: (u32, u32) = metas
            .get(from.0)
            .map_or(self.checkpoint, |m| (m.log_seg, from.1));
        let mut ahead = ReadAhead::default();
        for (mi, m) in metas.iter().enumerate().skip(from.0) {
            let seg = SegmentId(m.segment);
            let wp = wps[mi];
            let end = m.sealed_end.unwrap_or(wp);
            let mut page = if mi == from.0 { from.1 } else { 0 };
            while page < end {
                let fault = move |kind, reason: String, batch_start, torn_batch| {
                    SpanEnd::Fault(Fault {
                        kind,
                        reason,
                        meta: mi,
                        page,
                        batch_start,
                        torn_batch,
                    })
                };
                let read = self.read_tail_page_ahead(&mut ahead, seg, page, end, |b| {
                    check_page(b, m.log_seg, page)
                        .and_then(|info| parse_records(b, &info).map(|_| ()))
                        .map_err(|e| e.to_string())
                })?;
                if pending_batch.is_none() {
                    batch_start = (m.log_seg, page);
                }
                let buf = match read {
                    TailRead::Page(buf) => buf,
                    _ if skip.is_some() => {
                        page += 1;
                        continue;
                    }
                    // Never written: the end of what reached the device (a batch laid out
                    // and never written, or pages lost in the cut).
                    TailRead::Unwritten if page >= wp => {
                        return Ok(SpanEnd::End(Some(batch_start)))
                    }
                    TailRead::Unwritten => {
                        return Ok(fault(
                            FaultKind::Hole,
                            "a page below the write pointer was never written".into(),
                            batch_start,
                            pending_batch,
                        ))
                    }
                    TailRead::Failed(why) => {
                        return Ok(fault(FaultKind::Bad, why, batch_start, pending_batch))
                    }
                };
                let (info, recs) = match check_page(&buf, m.log_seg, page)
                    .and_then(|info| Ok((info, parse_records(&buf, &info)?)))
                {
                    Ok(p) => p,
                    Err(e) => return Ok(fault(FaultKind::Bad, e, batch_start, pending_batch)),
                };
                if let Some(s) = skip {
                    let past = match s {
                        Some(b) => info.batch > b,
                        None => {
                            skip = Some(Some(info.batch));
                            false
                        }
                    };
                    if !past {
                        page += 1 + info.raw_after;
                        continue;
                    }
                    skip = None;
                    batch_start = (m.log_seg, page);
                }
                if let Some(b) = pending_batch.filter(|&b| b != info.batch) {
                    if page == 0 {
                        // The previous batch ended with its segment and never went on: its
                        // layout failed (the head was abandoned), or its pages were lost.
                        return Ok(SpanEnd::End(Some(batch_start)));
                    }
                    return Ok(fault(
                        FaultKind::Bad,
                        format!("batch {b} is cut short by batch {}", info.batch),
                        batch_start,
                        Some(b),
                    ));
                }
                pending_batch = Some(info.batch);
                let mut bad: Option<(FaultKind, String)> = None;
                for r in &recs {
                    let key = match r.long_key {
                        None => r.key.clone(),
                        Some(lk) => {
                            // The key's raw pages must have reached the device whole.
                            let Some(last) = lk
                                .first_page
                                .checked_add(lk.pages())
                                .filter(|&l| l <= end && l <= wp)
                            else {
                                return Ok(SpanEnd::End(Some(batch_start)));
                            };
                            let check = |pages: &[PageBuf]| {
                                lk.assemble(pages.iter().map(|p| &p[..])).is_some()
                            };
                            match self.read_raw(seg, lk.first_page..last, check, "a long key")? {
                                Ok(pages) => lk
                                    .assemble(pages.iter().map(|p| &p[..]))
                                    .unwrap_or_default(),
                                Err(f) => {
                                    bad = Some(f);
                                    break;
                                }
                            }
                        }
                    };
                    let mut held = None;
                    let slot = match r.kind {
                        RecordKind::Put => Replayed::Set(Slot::Value(
                            ValuePtr {
                                log_seg: m.log_seg,
                                loc: ValueLoc::Inline {
                                    page,
                                    offset: r.payload_offset,
                                },
                                len: r.value_len,
                            },
                            r.deadline,
                        )),
                        RecordKind::Indirect | RecordKind::LongPut => {
                            let (first, crc) = r.raw.unwrap_or((0, 0));
                            let p = ValuePtr {
                                log_seg: m.log_seg,
                                loc: ValueLoc::Raw { page: first, crc },
                                len: r.value_len,
                            };
                            let pps = self.g.pages_per_segment();
                            if p.spans(pps) {
                                // Its other segments must be in the log (the read checks the
                                // pages and the checksum).
                                let within = p
                                    .runs(pps)
                                    .iter()
                                    .all(|run| self.log_segs.contains_key(&run.log_seg));
                                if !within {
                                    return Ok(SpanEnd::End(Some(batch_start)));
                                }
                                if let Err(e) = self.read_values(&[Some(p)]) {
                                    let kind = match e {
                                        EngineError::Device(DeviceError::Unwritten { .. }) => {
                                            FaultKind::Hole
                                        }
                                        _ => FaultKind::Bad,
                                    };
                                    bad = Some((kind, format!("a value spanning segments: {e}")));
                                    break;
                                }
                            } else {
                                let last =
                                    first.saturating_add(raw_pages(u64::from(r.value_len)) as u32);
                                if last > end || last > wp {
                                    return Ok(SpanEnd::End(Some(batch_start)));
                                }
                                let len = r.value_len as usize;
                                let check = |pages: &[PageBuf]| {
                                    let mut v: Vec<u8> =
                                        Vec::with_capacity(pages.len() * PAGE_SIZE);
                                    for p in pages {
                                        v.extend_from_slice(p);
                                    }
                                    v.truncate(len);
                                    crc32c::crc32c(&v) == crc
                                };
                                if let Err(f) =
                                    self.read_raw(seg, first..last, check, "a raw value")?
                                {
                                    bad = Some(f);
                                    break;
                                }
                            }
                            Replayed::Set(Slot::Value(p, r.deadline))
                        }
                        RecordKind::Delete | RecordKind::LongDelete => {
                            Replayed::Set(Slot::Tombstone)
                        }
                        // The value the write path found for it, with its new deadline.
                        RecordKind::Retime | RecordKind::LongRetime => match r.retime {
                            Some((deadline, p)) => Replayed::Retime(Slot::Value(p, deadline)),
                            None => continue,
                        },
                        // The head record carries the value.
                        RecordKind::Continued => continue,
                    };
                    if r.kind == RecordKind::Put && r.value_len as usize <= hold_max {
                        let at = usize::from(r.payload_offset);
                        held = buf
                            .get(at..at + r.value_len as usize)
                            .map(Bytes::copy_from_slice);
                    }
                    pending.push((key, slot, r.seq, info.batch, m.log_seg, held));
                }
                if let Some((kind, why)) = bad {
                    return Ok(fault(kind, why, batch_start, Some(info.batch)));
                }
                pending_waste.push((m.log_seg, unused_bytes(usize::from(info.used))));
                if info.last_in_batch {
                    // Counted as the write path counts it: unused page bytes and tombstones
                    // at once, replaced values as the memtable drops them (`apply`).
                    for (log_seg, waste) in pending_waste.drain(..) {
                        self.count_tail_dead(log_seg, waste);
                    }
                    for (k, replayed, seq, batch, log_seg, held) in pending.drain(..) {
                        acc.max_seq = acc.max_seq.max(seq);
                        acc.max_batch = acc.max_batch.max(batch);
                        acc.replayed += 1;
                        let slot = match replayed {
                            Replayed::Set(Slot::Tombstone) => {
                                self.count_tail_dead(log_seg, delete_record_bytes(k.len()));
                                Slot::Tombstone
                            }
                            // A put's deadline after its record: garbage at once, as the
                            // write path counted it.
                            Replayed::Set(slot) => {
                                if slot.deadline().is_some() {
                                    self.count_tail_dead(log_seg, DEADLINE_SUFFIX as u64);
                                }
                                slot
                            }
                            Replayed::Retime(slot) => {
                                self.count_tail_dead(log_seg, retime_record_bytes(k.len()));
                                self.mem.note_retime();
                                slot
                            }
                        };
                        if let (Some(p), Some(v)) = (slot.ptr(), held) {
                            self.mem.hold(p, v);
                        }
                        self.apply(&k, seq, slot);
                    }
                    acc.last_complete = Some(info.batch);
                    pending_batch = None;
                }
                page += 1 + info.raw_after;
                self.pages_since_checkpoint += 1 + u64::from(info.raw_after);
            }
        }
        // The log ended inside a batch, or at a batch's end.
        Ok(SpanEnd::End(pending_batch.map(|_| batch_start)))
    }

    /// Page `page` of tail segment `seg` (which ends at `end`) through the replay's
    /// read-ahead window (see [`ReadAhead::read`]). Replaying one page per device round trip
    /// made crash recovery of small single-write batches slow (1338 one-page batches took
    /// ~180 ms); the judgement of each page is unchanged.
    fn read_tail_page_ahead(
        &mut self,
        ahead: &mut ReadAhead,
        seg: SegmentId,
        page: u32,
        end: u32,
        check: impl Fn(&[u8]) -> std::result::Result<(), String>,
    ) -> Result<TailRead> {
        ahead.read(
            &self.poller,
            &self.g,
            (seg, page, end),
            check,
            &mut self.stats.recovery_read_retries,
        )
    }

    /// Reads one page of the value-log tail, again up to [`READ_ATTEMPTS`] times while the
    /// read fails or `check` refuses what came back (a transient error must not end the log).
    fn read_tail_page(
        &mut self,
        lba: Lba,
        check: impl Fn(&[u8]) -> std::result::Result<(), String>,
    ) -> Result<TailRead> {
        let mut retries = 0;
        let r = read_page_patiently(&self.poller, lba, check, &mut retries);
        self.stats.recovery_read_retries += retries;
        r
    }

    /// Reads raw pages `range` (below the write pointer) of a tail segment, again while
    /// `check` refuses them, up to [`READ_ATTEMPTS`] times. `Err` says why they cannot be
    /// used: a page never written (a hole) or one that fails.
    fn read_raw(
        &mut self,
        seg: SegmentId,
        range: std::ops::Range<u32>,
        check: impl Fn(&[PageBuf]) -> bool,
        what: &str,
    ) -> Result<std::result::Result<Vec<PageBuf>, (FaultKind, String)>> {
        for attempt in 0..READ_ATTEMPTS {
            if attempt > 0 {
                self.stats.recovery_read_retries += 1;
            }
            let mut pages = Vec::with_capacity(range.len());
            for p in range.clone() {
                match self.read_tail_page(self.g.lba(seg, p), |_| Ok(()))? {
                    TailRead::Page(b) => pages.push(b),
                    TailRead::Unwritten => {
                        return Ok(Err((
                            FaultKind::Hole,
                            format!("{what}: its page {p} was never written"),
                        )))
                    }
                    TailRead::Failed(why) => {
                        return Ok(Err((FaultKind::Bad, format!("{what}: page {p}: {why}"))))
                    }
                }
            }
            if check(&pages) {
                return Ok(Ok(pages));
            }
        }
        Ok(Err((
            FaultKind::Bad,
            format!("{what} fails its checksum ({READ_ATTEMPTS} attempts)"),
        )))
    }

    /// Decides whether the log may end at a page replay could not use. Returns why it is
    /// damage, or `None` for a torn tail.
    ///
    /// The write path gives the rule. Batches are laid out in the order of their batch
    /// numbers, one after another in the log, and a client batch is acknowledged only once
    /// it and every batch before it are durable (pipelined batches are applied in ticket
    /// order; a synchronous batch is alone on the device). So every batch before the first
    /// unacknowledged one is whole on the device, and what a cut can tear lies in the
    /// batches in flight at the cut, all numbered after it: at most [`MAX_IN_FLIGHT_BATCHES`]
    /// (the pipeline holds [`PIPELINE_PAGES`] pages, at least two per batch; the synchronous
    /// path runs with the pipeline empty).
    ///
    /// - A page that was never written below the write pointer (a program lost in the cut)
    ///   is torn when no batch numbered more than [`MAX_IN_FLIGHT_BATCHES`] after its own
    ///   follows it in the tail.
    /// - A page that is unreadable or fails its checksum after retries (what a cut leaves
    ///   only in a page being programmed) is torn only in the last batch: nothing after it
    ///   holds a later batch. When the bad page's batch is unknown (it was the first page of
    ///   one), at most one batch may follow (the bad page may be its first).
    /// - Pages past the write pointer never count: the device never took them.
    fn judge_stop(
        &mut self,
        metas: &[LogSegMeta],
        wps: &[u32],
        f: &Fault,
        last_complete: Option<u64>,
    ) -> Result<Option<String>> {
        let later = self.later_batches(metas, wps, f.meta, f.page)?;
        let (Some(&lo), Some(&hi)) = (later.first(), later.last()) else {
            return Ok(None);
        };
        Ok(match f.kind {
            FaultKind::Bad => match f.torn_batch {
                Some(b) if hi > b => Some(format!(
                    "batch {hi} follows it in the log, so batch {b} cannot be a torn last write"
                )),
                None if hi > lo => Some(format!(
                    "batches {lo}..={hi} follow it in the log, so it cannot be in a torn last write"
                )),
                _ => None,
            },
            FaultKind::Hole => {
                let t = f.torn_batch.or(last_complete.map(|c| c + 1)).unwrap_or(lo);
                (hi > t + MAX_IN_FLIGHT_BATCHES).then(|| {
                    format!(
                        "batch {hi} follows it in the log, more than {MAX_IN_FLIGHT_BATCHES} \
                         batches after batch {t}: more than a cut can leave in flight"
                    )
                })
            }
        })
    }

    /// Batch numbers of the valid packed pages from page `page` of `metas[meta]` to the end
    /// of the tail (below each segment's write pointer).
    fn later_batches(
        &mut self,
        metas: &[LogSegMeta],
        wps: &[u32],
        meta: usize,
        page: u32,
    ) -> Result<BTreeSet<u64>> {
        let mut batches = BTreeSet::new();
        for (mi, m) in metas.iter().enumerate().skip(meta) {
            let seg = SegmentId(m.segment);
            let end = m.sealed_end.unwrap_or(wps[mi]).min(wps[mi]);
            let first = if mi == meta { page } else { 0 };
            let mut p = first;
            while p < end {
                let window: Vec<u32> = (p..end.min(p.saturating_add(IO_WINDOW as u32))).collect();
                let cmds = window
                    .iter()
                    .map(|&q| Command::Read {
                        lba: self.g.lba(seg, q),
                        buf: PageBuf::for_read(),
                    })
                    .collect();
                let results = self.poller.run(cmds, IO_WINDOW);
                for (r, &q) in results.into_iter().zip(&window) {
                    let buf = match r.map(Completion::into_buf) {
                        Ok(Ok(Some(b))) => Some(b),
                        Ok(Err(DeviceError::ReadFailed { .. })) | Err(_) => {
                            // Once more, patiently: a later batch must not hide behind a
                            // transient error.
                            let check = |b: &[u8]| check_page(b, m.log_seg, q).map(|_| ());
                            match self.read_tail_page(self.g.lba(seg, q), check)? {
                                TailRead::Page(b) => Some(b),
                                _ => None,
                            }
                        }
                        _ => None,
                    };
                    if let Some(info) = buf.and_then(|b| check_page(&b, m.log_seg, q).ok()) {
                        batches.insert(info.batch);
                    }
                }
                p = window.last().map_or(end, |&q| q + 1);
            }
        }
        Ok(batches)
    }

    /// Trims device segments that held log segments the manifest no longer lists (it must
    /// already be persisted without them) and returns them to the free list.
    pub(super) fn release_log_segments(&mut self, segments: &[u32]) -> Result<()> {
        if segments.is_empty() {
            return Ok(());
        }
        self.side.epochs.synchronize();
        for &segment in segments {
            self.trim_to_free(segment)?;
        }
        Ok(())
    }
}
