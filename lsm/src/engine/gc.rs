//! Value-log garbage collection: picking victims, reading them a window at a time, moving
//! live values to the head, and releasing reclaimed segments.

use super::recovery::READ_ATTEMPTS;
use super::write::{BatchFailure, BatchKind};
use super::*;

mod moves;
mod read_ahead;
#[cfg(test)]
mod tests;

pub(super) use moves::{GcWait, GcWrites};
pub(super) use read_ahead::{GcCarry, GcReadAhead};

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
/// submission does not wait for tags with the write lock held. In plp mode a batch laid out
/// beside client batches may meet up to 96 client pages more (`PIPELINE_PAGES` less
/// `GC_PIPELINE_SHARE`; 48 before decision 0037): a page refused for want of a tag is then
/// offered again under the lock (`Inner::submit_refused_page`) until reads free one; the
/// sustained-overwrite runs of decision 0032 were measured with 48.
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

/// A garbage-collection step whose moves were submitted but are not yet applied:
/// [`Inner::gc_step`] returns it, and [`Inner::gc_step_done`] finishes it once the moves'
/// pages are back.
pub(super) struct GcStarted {
    /// The moves in flight (none when the step wrote nothing).
    pub(super) writes: GcWrites,
    /// The step's moves are pending, not yet laid out: the caller waits for this and hands
    /// the step to [`Inner::gc_resubmit`].
    pub(super) blocked: Option<GcWait>,
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
            blocked: None,
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

    /// One step of reclaiming a value-log segment, called with the write lock held (and the
    /// pipeline empty, except in plp mode for a step that does not start a victim): picks a
    /// victim when none is in progress, then takes the next window of its pages
    /// (`gc_window_pages`, more when a raw value runs past the window), queues the reads of
    /// the window after it, judges which values are still live and submits their moves to the
    /// head as pipelined batches ([`Inner::submit_gc_moves`], which says when moves may be
    /// laid out beside batches in flight, and may leave them pending: `GcStarted::blocked`).
    /// Client batches are laid out after the moves, so a client's overwrite is newer than a
    /// move in the log, in sequence numbers and in replay order. The caller hands the moves'
    /// outcome to [`Inner::gc_step_done`], which applies them and, at the victim's end, takes
    /// the victim out of the log.
    pub(super) fn gc_step(&mut self) -> Result<GcStarted> {
        match self.gc_step_inner() {
            Ok(started) => Ok(started),
            // Not a maintenance failure: writers waiting for free segments are not failed
            // for a refused victim, and the next step takes another one.
            Err(e) if self.gc_step_failed(&e) => Ok(GcStarted::no_writes(GcStep::Progress)),
            Err(e) => Err(e),
        }
    }

    /// Lays out the moves of a step that [`Inner::gc_step`] left blocked, once the caller
    /// waited for what `started.blocked` said; may block again (on return,
    /// `started.blocked` says). A failure resets the step as [`Inner::gc_step`]'s do: the
    /// victim starts again from its first page, and the step then finishes nothing.
    ///
    /// # Errors
    /// As [`Inner::gc_step`].
    pub(super) fn gc_resubmit(&mut self, started: &mut GcStarted) -> Result<()> {
        match self.submit_gc_moves(&mut started.writes) {
            Ok(blocked) => {
                started.blocked = blocked;
                Ok(())
            }
            Err(e) => {
                let refused = self.gc_step_failed(&e);
                // Whatever was submitted before the failure was applied (`submit_gc_moves`).
                started.writes.batches.clear();
                started.finished = None;
                started.step = GcStep::Progress;
                if refused {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Whether the next step starts a victim: it may flush the memtable to make segments
    /// candidates, which wants the pipeline drained.
    pub(super) fn gc_starts_victim(&self) -> bool {
        self.gc_cursor.is_none()
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
                .iter_mut()
                .filter_map(|f| f.tail_dead.remove(&log_seg))
                .sum::<u64>();
        self.dead_raw.forget(log_seg);
        if let Some(mut m) = self.log_segs.remove(&log_seg) {
            m.dead = m.dead.saturating_sub(tail);
            self.gc_reclaimed.push(m);
        }
        // Every move noted in the memtables came out of this victim or an earlier one (one
        // victim at a time, its moves all applied by now): their old copies have just left
        // the live count with the segment, so admission must not subtract them any more.
        self.mem.forget_moved_from_below();
        for f in &self.frozen {
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
        self.gc_carry = None;
        self.drop_read_ahead();
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
        let mut pages = self.window_pages(log_seg, seg, first, &mut last, end)?;
        // The next window's reads go down now, to come back while this one is judged and its
        // moves are written (a step that stops short of `last` carries the rest over).
        self.read_ahead(log_seg, last, end);
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
            if self.gc_pending_bytes >= GC_BATCH_BYTES && self.side.landing.is_some() {
                // A batch's worth judged: it is written now, and the rest of the window is
                // carried over, so one step's moves never need more than a batch or two of
                // the pipeline (laid out beside the clients' batches, not after a drain).
                // Where every step drains the pipeline first (not acknowledged from DRAM),
                // fewer, larger steps drain less often.
                break;
            }
        }
        if page < last {
            // The pages this step stopped short of, read already: the next step starts with
            // them, and the window read ahead follows them.
            let from = (page - first) as usize;
            self.gc_carry = Some(GcCarry {
                log_seg,
                first: page,
                pages: pages.drain(from.min(pages.len())..).collect(),
            });
        }
        // Moves are written in large batches (a batch's indirect records share one packed
        // page), so they may wait for later steps; they are judged live again when written.
        let mut writes = GcWrites::default();
        let blocked = if page >= end || self.gc_pending_bytes >= GC_BATCH_BYTES {
            self.submit_gc_moves(&mut writes)?
        } else {
            None
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
                blocked,
                step: GcStep::Progress,
                finished: None,
            });
        }
        // The victim leaves the log once these last moves are applied (`gc_step_done`).
        self.gc_cursor = None;
        if self
            .gc_read_ahead
            .as_ref()
            .is_some_and(|a| a.log_seg == log_seg)
        {
            // Read ahead before a value longer than the window took the step to the
            // victim's end: nothing may still read a segment that is about to be trimmed.
            self.drop_read_ahead();
        }
        Ok(GcStarted {
            writes,
            blocked,
            step: GcStep::Reclaimed,
            finished: Some(cursor),
        })
    }

    /// Releases the segments garbage collection reclaimed: one manifest write without their
    /// log segments (the moves written before it become durable with it), then onto the
    /// unlinked list, whose trim (`Core::trim_unlinked`, at the end of the maintenance task)
    /// waits with the write lock free for the reads that may still fetch from them. Every
    /// loop that runs garbage collection ends with it, so free space never waits for the
    /// next reclaim.
    ///
    /// # Errors
    /// Closing a hole before it, or writing the manifest (the segments then stay reclaimed,
    /// listed by the next manifest too).
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
        self.unlinked.extend(released.into_iter().map(|m| Unlinked {
            segment: m.segment,
            log_seg: Some(m.log_seg),
        }));
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
}
