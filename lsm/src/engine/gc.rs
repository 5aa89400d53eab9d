//! Value-log garbage collection: picking victims, reading them a window at a time, moving
//! live values to the head, and releasing reclaimed segments.

use super::recovery::READ_ATTEMPTS;
use super::write::{BatchFailure, BatchKind};
use super::*;

/// The error of a garbage-collection step that found a victim page it cannot use.
fn gc_refused(log_seg: u32, segment: u32, page: u32, reason: impl Into<String>) -> EngineError {
    EngineError::GcRefused {
        log_seg,
        segment,
        page,
        reason: reason.into(),
    }
}

/// Free segments garbage collection's moves leave: room for a flush's keytables.
pub(super) const GC_MOVE_RESERVE: usize = 1;

/// Free segments at or below which writers stall for garbage collection (the low-water
/// mark, before the keytables' headroom is added).
pub(super) const GC_LOW_WATER: usize = RESERVED_SEGMENTS + 2;

/// Live values relocated per write batch during garbage collection: 60 values of 8 KiB
/// share one packed page of indirect records, and the batch's pages (61), the next window's
/// read-ahead ([`GC_READ_AHEAD_PAGES`], 128) and clients' asynchronous reads
/// ([`crate::ASYNC_READ_WINDOW`], 64) fit the device's 256 tags together, so the batch's
/// submission does not wait for tags with the write lock held.
pub(super) const GC_BATCH_BYTES: usize = 480 << 10;

/// Most victim pages read ahead while a step's moves are written: the whole next window at
/// the default [`crate::DEFAULT_GC_WINDOW_PAGES`]. Sustained overwrites at 80% full
/// (`lightstore-bench run-overwrite --system lightstore-local/plp --device-mib 512
/// --fill-percent 80`, two runs each, WA 2.33): 14.6-14.8K ops/s reading 32 of a 64-page
/// window ahead (the rest was read with the write lock held and the pipeline drained, once
/// per step); 17.4-18.0K with the whole window ahead and these batches; 21.0-21.3K with
/// 128-page windows on a 256-tag device (19.5-19.7K at 64 pages there); 256-page windows on
/// 512 tags were within the noise of 128 (21.3-23.9K).
pub(super) const GC_READ_AHEAD_PAGES: u32 = 128;

/// Pages of reclaimed segments released together: one manifest write (and one wait for
/// reads in flight) for all of them, not one per segment. On small segments the manifest
/// write per reclaimed segment was about a tenth of a sustained overwrite's time; with
/// releases of 256 pages (4 such segments) it ran 5.6-5.7K -> 6.7-6.8K overwrites/s, p99
/// 25-28 ms -> 20-24 ms (`lightstore-bench run-overwrite --device-mib 256`; 512 pages: 6.3-6.7K,
/// p99 38 ms).
pub(super) const GC_RELEASE_PAGES: u64 = 256;

/// Where a reclaim in progress stands.
#[derive(Debug, Clone, Copy)]
pub(super) struct GcCursor {
    /// The victim.
    log_seg: u32,
    /// Its first page not yet looked at.
    next_page: u32,
    /// Value bytes moved so far.
    moved: u64,
    /// `next_page` is where a packed page must be (the page before it ended a group, or it
    /// is the first): not right after a page that was never written, whose raw pages (if
    /// any were written) cannot be told from a packed page.
    in_sync: bool,
}

/// A live value garbage collection read, waiting to be rewritten at the head.
#[derive(Debug)]
pub(super) struct GcMove {
    key: Vec<u8>,
    value: Vec<u8>,
    /// Where it was read: the move is written only if the key still points there.
    from: ValuePtr,
}

/// Pages of a victim whose reads are on the device while garbage collection writes the
/// moves of the window before them.
pub(super) struct GcReadAhead {
    pub(super) log_seg: u32,
    pub(super) pages: std::ops::Range<u32>,
    /// The pages of `pages` read, in order: the others are raw pages of dead values
    /// ([`DeadRawPages`](super::dead_pages::DeadRawPages)).
    pub(super) read: Vec<u32>,
    pub(super) reads: crate::io::InFlight,
}

/// The moves of a garbage-collection step on their way to the device: pipelined batches
/// (submitted with the write lock held and the pipeline empty, then on the device while the
/// lock is free) and the value bytes they move.
#[derive(Default)]
pub(super) struct GcWrites {
    /// Tickets of the pipelined batches and their page completions, in ticket order.
    pub(super) batches: Vec<(u64, Arc<GroupDone>)>,
    /// Value bytes moved by all of them.
    pub(super) bytes: u64,
}

/// The device flush that makes garbage collection's moves durable before they are applied,
/// when client batches are acknowledged only once durable: a client batch laid out after a
/// move batch is applied (and acknowledged) only after it, and a move batch whose pages
/// were still in the device's write cache at a power cut would leave a hole that stops
/// recovery's replay before the client's batch. Shared with clients' flushes through the
/// [`FlushGate`].
pub(super) struct GcFlush {
    pub(super) gate: Arc<FlushGate>,
    pub(super) dev: Arc<dyn AppendDevice>,
}

impl GcWrites {
    /// Waits for every page of every batch and, with `flush`, for a device flush after
    /// them: one result per batch, in order.
    pub(super) fn wait(
        &self,
        flush: Option<&GcFlush>,
    ) -> Vec<std::result::Result<(), BatchFailure>> {
        let mut out: Vec<std::result::Result<(), BatchFailure>> = self
            .batches
            .iter()
            .map(|(_, done)| done.wait().map_err(BatchFailure::Page))
            .collect();
        if let Some(f) = flush {
            if !out.is_empty() && out.iter().all(std::result::Result::is_ok) {
                if let Err(e) = f.gate.flush(|| device_flush(f.dev.as_ref())) {
                    // The first batch fails with it, and every batch after it with that one
                    // (`claim_ready`).
                    out[0] = Err(BatchFailure::Flush(e));
                }
            }
        }
        out
    }
}

/// A garbage-collection step whose moves were submitted but are not yet applied:
/// [`Inner::gc_step`] returns it, and [`Inner::gc_step_done`] finishes it once the moves'
/// pages are back.
pub(super) struct GcStarted {
    /// The moves in flight (none when the step wrote nothing).
    pub(super) writes: GcWrites,
    /// What the step did, once its moves are applied.
    step: GcStep,
    /// The victim, when this step reached its end: it leaves the log only after its last
    /// moves are applied.
    finished: Option<GcCursor>,
}

impl GcStarted {
    fn no_writes(step: GcStep) -> GcStarted {
        GcStarted {
            writes: GcWrites::default(),
            step,
            finished: None,
        }
    }
}

/// What one garbage-collection step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GcStep {
    /// Nothing worth reclaiming.
    Idle,
    /// Part of a segment done.
    Progress,
    /// A segment finished and trimmed.
    Reclaimed,
}

impl Inner {
    /// Free segments below which garbage collection runs: the fixed reserve plus room for a
    /// compaction's output, which is written before its inputs' segments are released (with
    /// long keys or many keys the keytables take many segments, and a compaction that found
    /// no free segment left the values none either).
    pub(super) fn gc_low_water(&self) -> usize {
        GC_LOW_WATER + self.keytable_headroom()
    }

    pub(super) fn gc_candidates(&self) -> Vec<GcCandidate> {
        let capacity = u64::from(self.g.pages_per_segment()) * PAGE_SIZE as u64;
        self.log_segs
            .values()
            .filter(|m| m.sealed_end.is_some() && m.log_seg < self.checkpoint.0)
            .filter(|m| !self.gc_refused.contains(&m.log_seg))
            .filter(|m| self.head.is_none_or(|h| h.log_seg != m.log_seg))
            .map(|m| GcCandidate {
                log_seg: m.log_seg,
                live_bytes: m.written.saturating_sub(m.dead),
                written_bytes: m.written,
                capacity_bytes: capacity,
            })
            .collect()
    }

    /// One step of reclaiming a value-log segment, called with the write lock held and the
    /// pipeline empty: picks a victim when none is in progress, then reads the next window of
    /// its pages (`gc_window_pages`, more when a raw value runs past the window), judges
    /// which values in it are still live and submits their moves to the head as pipelined
    /// batches. The caller then frees the write lock while the moves are on the device (client
    /// batches are laid out after them, so a client's overwrite is newer than a move in the log,
    /// in sequence numbers and in replay order) and hands their outcome to
    /// [`Inner::gc_step_done`], which applies them and, at the victim's end, takes the victim
    /// out of the log. Liveness is judged with nothing in flight, so no write can slip in
    /// between the judgement and the layout.
    pub(super) fn gc_step(&mut self) -> Result<GcStarted> {
        match self.gc_step_inner() {
            Ok(started) => Ok(started),
            // Not a maintenance failure: writers waiting for free segments are not failed
            // for a refused victim, and the next step takes another one.
            Err(e) if self.gc_step_failed(&e) => Ok(GcStarted::no_writes(GcStep::Progress)),
            Err(e) => Err(e),
        }
    }

    /// Finishes a step from [`Inner::gc_step`] once its moves' pages are back (`pages`: one
    /// result per batch, in order): records each batch's outcome, applies every batch ready
    /// (the moves and any client batches behind them, in ticket order) and, when every move
    /// was applied and the step reached its victim's end, takes the victim out of the log.
    /// Returns the step and whether reclaimed segments should be released now (the caller
    /// releases them with the pipeline empty).
    ///
    /// # Errors
    /// A move batch that failed on the device: the victim starts again at its first page in
    /// a later step (liveness is judged afresh, so nothing is moved twice or missed).
    pub(super) fn gc_step_done(
        &mut self,
        started: GcStarted,
        pages: Vec<std::result::Result<(), BatchFailure>>,
    ) -> Result<(GcStep, bool)> {
        if let Err(e) = self.apply_gc_batches(&started.writes.batches, pages) {
            self.gc_step_failed(&e);
            return Err(e);
        }
        if let Some(c) = self.gc_cursor.as_mut() {
            c.moved += started.writes.bytes;
        }
        let Some(victim) = started.finished else {
            return Ok((started.step, false));
        };
        let moved = victim.moved + started.writes.bytes;
        let log_seg = victim.log_seg;
        let Some(meta) = self.log_segs.get(&log_seg).cloned() else {
            return Ok((started.step, false));
        };
        tracing::debug!(
            log_seg,
            written = meta.written,
            dead = meta.dead,
            moved,
            "reclaimed a value-log segment"
        );
        let tail = self.tail_dead.remove(&log_seg).unwrap_or(0)
            + self
                .frozen
                .as_mut()
                .and_then(|f| f.tail_dead.remove(&log_seg))
                .unwrap_or(0);
        self.dead_raw.forget(log_seg);
        if let Some(mut m) = self.log_segs.remove(&log_seg) {
            m.dead = m.dead.saturating_sub(tail);
            self.gc_reclaimed.push(m);
        }
        // Every move noted in the memtables came out of this victim or an earlier one (one
        // victim at a time, its moves all applied by now): their old copies have just left
        // the live count with the segment, so admission must not subtract them any more.
        self.mem.forget_moved_from_below();
        if let Some(f) = &self.frozen {
            f.mem.forget_moved_from_below();
        }
        self.stats.gc_segments += 1;
        self.stats.gc_bytes_moved += moved;
        let pages = self.gc_reclaimed.len() as u64 * u64::from(self.g.pages_per_segment());
        // Released now when enough has gathered, or when the moves of one more victim might
        // not find a free segment.
        let release = pages >= GC_RELEASE_PAGES || self.free.len() <= RESERVED_SEGMENTS + 1;
        Ok((started.step, release))
    }

    /// After a failed step: a victim that cannot be read is refused for good (returns
    /// `true`); otherwise the moves read so far are dropped and the victim starts again from
    /// its first page.
    fn gc_step_failed(&mut self, e: &EngineError) -> bool {
        let mut refused = false;
        if let (Some(c), EngineError::GcRefused { .. } | EngineError::Corrupt(_)) =
            (self.gc_cursor, e)
        {
            // A page of the victim cannot be read or fails its checksum: what it holds is
            // not known, so the victim is not reclaimed (nothing is guessed empty). It stays
            // in the log, and garbage collection takes other victims.
            tracing::error!(
                log_seg = c.log_seg,
                "garbage collection refused a victim and will not pick it again: {e}"
            );
            self.gc_refused.insert(c.log_seg);
            self.stats.gc_steps_refused += 1;
            refused = true;
        }
        // Moves read in earlier steps may be lost with the error, and the cursor is past
        // their pages: the victim starts again from its first page (liveness is judged
        // afresh, so nothing is moved twice or missed).
        self.gc_cursor = None;
        self.gc_pending.clear();
        self.gc_pending_bytes = 0;
        if let Some(ahead) = self.gc_read_ahead.take() {
            ahead.reads.wait();
        }
        refused
    }

    fn gc_step_inner(&mut self) -> Result<GcStarted> {
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
                    return Ok(GcStarted::no_writes(GcStep::Idle));
                };
                GcCursor {
                    log_seg,
                    next_page: 0,
                    moved: 0,
                    in_sync: true,
                }
            }
        };
        // Known to `gc_step` if this step fails.
        self.gc_cursor = Some(cursor);
        let log_seg = cursor.log_seg;
        let Some(meta) = self.log_segs.get(&log_seg).cloned() else {
            self.gc_cursor = None;
            return Ok(GcStarted::no_writes(GcStep::Idle));
        };
        let seg = SegmentId(meta.segment);
        let end = meta.sealed_end.unwrap_or(0);
        let first = cursor.next_page.min(end);
        let mut last = first
            .saturating_add(self.cfg.gc_window_pages.max(1))
            .min(end);
        // Pages never written (claimed by a batch that failed, see `forget_layout`) hold
        // nothing live; a page that cannot be read fails the step (`read_log_pages`).
        let mut pages = self.window_pages(log_seg, seg, first, last)?;
        let mut page = first;
        let mut in_sync = cursor.in_sync;
        while page < last {
            let Some(buf) = pages[(page - first) as usize].as_ref() else {
                page += 1;
                in_sync = false;
                continue;
            };
            let info = match check_page(buf, log_seg, page) {
                Ok(info) => info,
                // Where a packed page must be, a page that fails its checks is damage: its
                // live values (if any) cannot be known.
                Err(e) if in_sync => {
                    return Err(gc_refused(log_seg, meta.segment, page, e));
                }
                // After a page never written: a raw page of that failed batch.
                Err(_) => {
                    page += 1;
                    continue;
                }
            };
            in_sync = true;
            let group_end = page.saturating_add(1 + info.raw_after).min(end);
            if group_end > last {
                if page > first {
                    // The next step starts with this page and its raw values.
                    break;
                }
                // One value larger than the window: read up to its end.
                let more = self.read_log_pages(log_seg, seg, last..group_end)?;
                pages.extend(more);
                last = group_end;
            }
            let Some(buf) = pages[(page - first) as usize].as_ref() else {
                page += 1;
                continue;
            };
            let records = parse_records(buf, &info)
                .map_err(|e| gc_refused(log_seg, meta.segment, page, e))?;
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
                        // A delete's or a retime's key is not needed: neither holds a value.
                        (None, RecordKind::LongDelete | RecordKind::LongRetime) => continue,
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
                if self.lookup(&r.key).and_then(|s| s.ptr()) != Some(ptr) {
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
                            let held = p
                                .checked_sub(first)
                                .and_then(|i| pages.get(i as usize))
                                .and_then(Option::as_ref);
                            if let Some(raw) = held {
                                v.extend_from_slice(raw);
                                continue;
                            }
                            if !self.dead_raw.is_dead(log_seg, p) {
                                return Err(corrupt("a live raw value page is unreadable"));
                            }
                            // Skipped as a dead value's page, yet a live value is on it:
                            // read it now (the marks are a hint; never expected).
                            self.stats.gc_skipped_pages_reread += 1;
                            tracing::warn!(log_seg, page = p, "a skipped page holds a live value");
                            let again = self.read_log_pages(log_seg, seg, p..p + 1)?;
                            let raw = again
                                .first()
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
        let writes = if page >= end || self.gc_pending_bytes >= GC_BATCH_BYTES {
            self.submit_gc_moves()?
        } else {
            GcWrites::default()
        };
        self.stats.gc_steps += 1;
        let cursor = GcCursor {
            log_seg,
            next_page: page,
            moved: cursor.moved,
            in_sync,
        };
        if page < end {
            self.gc_cursor = Some(cursor);
            return Ok(GcStarted {
                writes,
                step: GcStep::Progress,
                finished: None,
            });
        }
        // The victim leaves the log once these last moves are applied (`gc_step_done`).
        self.gc_cursor = None;
        Ok(GcStarted {
            writes,
            step: GcStep::Reclaimed,
            finished: Some(cursor),
        })
    }

    /// Frees the segments garbage collection reclaimed: one manifest write without their log
    /// segments (the moves written before it become durable with it), then, once no read
    /// still fetches from them, a trim each. Every loop that runs garbage collection ends
    /// with it, so free space never waits for the next reclaim.
    ///
    /// # Errors
    /// Writing the manifest or trimming (a segment not trimmed stays out of the free list
    /// until the next open, which trims what the manifest does not account for).
    pub(super) fn release_reclaimed(&mut self) -> Result<()> {
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
        // A read that resolved a pointer into one of them may still be fetching from it; a
        // read that starts now finds the moved values instead (they are in the memtable).
        self.side.epochs.synchronize();
        for m in released {
            self.trim_to_free(m.segment)?;
        }
        self.publish_segs();
        Ok(())
    }

    /// The move of a value spanning segments that a Continued record in a victim belongs to,
    /// read whole, if the value is still live: its head record (found by sequence number in
    /// the packed page the Continued record names) must still be what the key maps to. A
    /// head segment already reclaimed means the value was moved or died.
    pub(super) fn spanning_move(&self, r: &Record) -> Result<Option<GcMove>> {
        let Some((head_seg, head_page)) = r.continues else {
            return Ok(None);
        };
        let Some(meta) = self.log_segs.get(&head_seg) else {
            return Ok(None);
        };
        let seg = SegmentId(meta.segment);
        let mut pages = self.read_log_pages(head_seg, seg, head_page..head_page + 1)?;
        let Some(buf) = pages.pop().flatten() else {
            // Never written: the head's batch failed, and the value was never live.
            return Ok(None);
        };
        // The head page of a value that may be live must be readable.
        let refuse = |e: String| gc_refused(head_seg, meta.segment, head_page, e);
        let info = check_page(&buf, head_seg, head_page).map_err(refuse)?;
        let records = parse_records(&buf, &info).map_err(refuse)?;
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
                let kp =
                    self.read_log_pages(head_seg, seg, lk.first_page..lk.first_page + lk.pages())?;
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
        if self.lookup(&key).and_then(|s| s.ptr()) != Some(ptr) {
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
    pub(super) fn read_ahead(&mut self, log_seg: u32, page: u32, end: u32) {
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
        // A read refused for want of a tag (client reads may hold up to
        // `ASYNC_READ_WINDOW` of them) is read again when the step needs it.
        let ahead = self.cfg.gc_window_pages.clamp(1, GC_READ_AHEAD_PAGES);
        let pages = from..from.saturating_add(ahead).min(end);
        if pages.is_empty() {
            return;
        }
        // Raw pages of values already counted dead are not read (about two fifths of a
        // victim's value pages at 80% full).
        let read: Vec<u32> = pages
            .clone()
            .filter(|&p| !self.dead_raw.is_dead(victim, p))
            .collect();
        let cmds = read
            .iter()
            .map(|&p| Command::Read {
                lba: self.g.lba(seg, p),
                buf: PageBuf::for_read(),
            })
            .collect();
        self.gc_read_ahead = Some(GcReadAhead {
            log_seg: victim,
            pages,
            read,
            reads: self.poller.start_all(cmds),
        });
    }

    /// The pages read ahead, when they are the first of `pages` of `log_seg`: one entry per
    /// page of the read-ahead's range, `None` for a read that did not come back as reads do
    /// (refused for want of a tag, say, or failed: the caller reads it again the usual way),
    /// `Some(None)` for a page never written or not read (a dead value's raw page); the
    /// caller reads the rest of `pages`. A read ahead of other pages is waited for and
    /// dropped: nothing may still read a segment garbage collection is done with.
    pub(super) fn take_read_ahead(
        &mut self,
        log_seg: u32,
        pages: std::ops::Range<u32>,
    ) -> Option<Vec<Option<Option<PageBuf>>>> {
        let ahead = self.gc_read_ahead.take()?;
        let wanted = ahead.log_seg == log_seg
            && ahead.pages.start == pages.start
            && ahead.pages.end <= pages.end;
        let results = ahead.reads.wait();
        if !wanted {
            return None;
        }
        let mut got: Vec<Option<Option<PageBuf>>> =
            ahead.pages.clone().map(|_| Some(None)).collect();
        for (page, r) in ahead.read.iter().zip(results) {
            got[(page - ahead.pages.start) as usize] = match r.and_then(Completion::into_buf) {
                Ok(buf) => Some(buf),
                Err(DeviceError::Unwritten { .. }) => Some(None),
                Err(_) => None,
            };
        }
        self.stats.gc_pages_skipped += (ahead.pages.len() - ahead.read.len()) as u64;
        Some(got)
    }

    /// Pages `first..last` of victim `log_seg` (device segment `seg`): what was read ahead,
    /// with the pages whose read-ahead did not come back read again, and the rest read now.
    fn window_pages(
        &mut self,
        log_seg: u32,
        seg: SegmentId,
        first: u32,
        last: u32,
    ) -> Result<Vec<Option<PageBuf>>> {
        let Some(ahead) = self.take_read_ahead(log_seg, first..last) else {
            return self.read_log_pages(log_seg, seg, first..last);
        };
        let mut pages = Vec::with_capacity((last - first) as usize);
        for (page, got) in (first..).zip(ahead) {
            match got {
                Some(buf) => pages.push(buf),
                None => pages.extend(self.read_log_pages(log_seg, seg, page..page + 1)?),
            }
        }
        let rest = first + pages.len() as u32..last;
        if !rest.is_empty() {
            pages.extend(self.read_log_pages(log_seg, seg, rest)?);
        }
        Ok(pages)
    }

    /// Reads pages `range` of value-log segment `log_seg` (device segment `seg`), all in
    /// flight at once; a page never written is `None` (claimed by a batch that failed before
    /// writing it, see `forget_layout`). A page whose read fails is read again on its own,
    /// up to [`READ_ATTEMPTS`] reads, so a transient error costs nothing.
    ///
    /// # Errors
    /// `GcRefused` for a page that fails every read: it may hold live values, so the
    /// victim must not be reclaimed. Device errors (out of tags, powered off, ...).
    pub(super) fn read_log_pages(
        &self,
        log_seg: u32,
        seg: SegmentId,
        range: std::ops::Range<u32>,
    ) -> Result<Vec<Option<PageBuf>>> {
        let first = range.start;
        let lbas: Vec<Lba> = range.map(|p| self.g.lba(seg, p)).collect();
        let cmds = crate::io::page_reads(&lbas);
        let results = self.poller.run(cmds, IO_WINDOW);
        let mut pages = Vec::with_capacity(results.len());
        for (i, (r, lba)) in results.into_iter().zip(lbas).enumerate() {
            let read =
                |r: std::result::Result<Completion, DeviceError>| r.and_then(Completion::into_buf);
            let mut result = read(r);
            let mut attempts = 1;
            while matches!(result, Err(DeviceError::ReadFailed { .. })) && attempts < READ_ATTEMPTS
            {
                attempts += 1;
                self.side
                    .read_faults
                    .gc_read_retries
                    .fetch_add(1, Ordering::Relaxed);
                let again = crate::io::execute_patiently(
                    self.dev.as_ref(),
                    Command::Read {
                        lba,
                        buf: PageBuf::for_read(),
                    },
                );
                result = read(again.map_err(|r| r.error));
            }
            let page = match result {
                Ok(buf) => buf,
                Err(DeviceError::Unwritten { .. }) => None,
                Err(e @ DeviceError::ReadFailed { .. }) => {
                    return Err(gc_refused(
                        log_seg,
                        seg.0,
                        first + i as u32,
                        format!("{e} ({attempts} attempts)"),
                    ))
                }
                Err(e) => return Err(EngineError::Device(e)),
            };
            pages.push(page);
        }
        Ok(pages)
    }

    /// Submits the pending moves whose values are still live (a client may have overwritten
    /// or deleted a key since its value was read: that move is dropped), a group commit per
    /// ~[`GC_BATCH_BYTES`], down the write pipeline ([`BatchKind::GcMoves`]); a batch that
    /// cannot be pipelined (a value spanning segments) is written synchronously here, as
    /// before. Called with the pipeline empty, so every earlier write is applied and the
    /// liveness judgement is exact.
    pub(super) fn submit_gc_moves(&mut self) -> Result<GcWrites> {
        debug_assert!(
            self.pipeline.is_empty(),
            "moves judged with batches in flight"
        );
        let pending = std::mem::take(&mut self.gc_pending);
        self.gc_pending_bytes = 0;
        // A live value keeps the deadline its key has now (a put and a retime, as
        // `WriteOp::expand` writes a put with a deadline).
        let live: Vec<(Vec<u8>, Vec<u8>, Deadline)> = pending
            .into_iter()
            .filter_map(|m| match self.lookup(&m.key) {
                Some(Slot::Value(p, d)) if p == m.from => Some((m.key, m.value, d)),
                _ => None,
            })
            .collect();
        let mut writes = GcWrites::default();
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
                .flat_map(|(k, v, d)| {
                    std::iter::once(WriteOp::Put(k, v))
                        .chain(d.is_some().then_some(WriteOp::Retime(k, *d)))
                })
                .collect();
            let spans = live[start..end]
                .iter()
                .any(|(k, v, _)| self.put_spans(k.len(), v.len()));
            let submitted = if spans {
                // Alone and synchronously: nothing of this step may be in flight before it.
                self.wait_gc_batches(&mut writes).and_then(|()| {
                    self.in_gc = true;
                    let r = self.write(&ops);
                    self.in_gc = false;
                    r
                })
            } else {
                let bound = self.page_bound(&ops);
                let started = self.start_batch(&ops, bound, BatchKind::GcMoves);
                // A GC batch is rare and large: its doorbell is rung under the lock.
                self.poller.doorbell();
                started.map(|batch| writes.batches.push(batch))
            };
            if let Err(e) = submitted {
                // Nothing of a failed step stays in flight: the batches already submitted
                // are waited for and applied (they moved live values; they are correct).
                self.wait_gc_batches(&mut writes)?;
                return Err(e);
            }
            writes.bytes += live[start..end]
                .iter()
                .map(|(_, v, _)| v.len() as u64)
                .sum::<u64>();
            start = end;
        }
        Ok(writes)
    }

    /// The flush move batches need before they are applied (see [`GcFlush`]), if any.
    pub(super) fn gc_flush(&self) -> Option<GcFlush> {
        self.cfg.flush_writes.then(|| GcFlush {
            gate: self.flush_gate.clone(),
            dev: self.dev.clone(),
        })
    }

    /// Waits (the write lock held) for move batches already submitted and applies them, so a
    /// synchronous write can follow with the pipeline empty.
    fn wait_gc_batches(&mut self, writes: &mut GcWrites) -> Result<()> {
        if writes.batches.is_empty() {
            return Ok(());
        }
        let flush = self.gc_flush();
        let pages = writes.wait(flush.as_ref());
        let batches = std::mem::take(&mut writes.batches);
        self.apply_gc_batches(&batches, pages)
    }

    /// Records the page outcome of each move batch (`pages`, in the same order), applies
    /// every batch ready in ticket order, and takes the move batches' outcomes: the first
    /// failure, if any.
    fn apply_gc_batches(
        &mut self,
        batches: &[(u64, Arc<GroupDone>)],
        pages: Vec<std::result::Result<(), BatchFailure>>,
    ) -> Result<()> {
        for ((ticket, _), io) in batches.iter().zip(pages) {
            self.record_io(*ticket, io);
        }
        self.apply_ready();
        let mut failure = None;
        for (ticket, _) in batches {
            let outcome = self.outcomes.remove(ticket).unwrap_or_else(|| {
                Err(EngineError::OutcomeUnknown {
                    reason: "a garbage-collection batch was not applied".into(),
                })
            });
            if let Err(e) = outcome {
                failure.get_or_insert(e);
            }
        }
        failure.map_or(Ok(()), Err)
    }
}
