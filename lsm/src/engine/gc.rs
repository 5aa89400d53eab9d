//! Value-log garbage collection: picking victims, reading them a window at a time, moving
//! live values to the head, and releasing reclaimed segments.

use super::recovery::READ_ATTEMPTS;
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

/// Live values relocated per write batch during garbage collection.
pub(super) const GC_BATCH_BYTES: usize = 1 << 20;

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
    pub(super) reads: crate::io::InFlight,
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

    /// One step of reclaiming a value-log segment: picks a victim when none is in progress,
    /// then reads the next window of its pages (`gc_window_pages`, more when a
    /// raw value runs past the window), rewrites the values in it that are still live at
    /// the head through the write path, and when the whole segment is done, trims it.
    /// Liveness is judged and the moves are written in the same call, under the engine
    /// lock, so no write can slip in between; between steps the lock is free for readers.
    pub(super) fn gc_step(&mut self) -> Result<GcStep> {
        let r = self.gc_step_inner();
        if let Err(e) = &r {
            if let (Some(c), EngineError::GcRefused { .. } | EngineError::Corrupt(_)) =
                (self.gc_cursor, e)
            {
                // A page of the victim cannot be read or fails its checksum: what it holds
                // is not known, so the victim is not reclaimed (nothing is guessed empty).
                // It stays in the log, and garbage collection takes other victims.
                tracing::error!(
                    log_seg = c.log_seg,
                    "garbage collection refused a victim and will not pick it again: {e}"
                );
                self.gc_refused.insert(c.log_seg);
                self.stats.gc_steps_refused += 1;
                self.gc_cursor = None;
                self.gc_pending.clear();
                self.gc_pending_bytes = 0;
                if let Some(ahead) = self.gc_read_ahead.take() {
                    ahead.reads.wait();
                }
                // Not a maintenance failure: writers waiting for free segments are not failed
                // for it, and the next step takes another victim.
                return Ok(GcStep::Progress);
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
        }
        r
    }

    pub(super) fn gc_step_inner(&mut self) -> Result<GcStep> {
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
                    in_sync: true,
                }
            }
        };
        // Known to `gc_step` if this step fails.
        self.gc_cursor = Some(cursor);
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
        // Pages never written (claimed by a batch that failed, see `forget_layout`) hold
        // nothing live; a page that cannot be read fails the step (`read_log_pages`).
        let mut pages = match self.take_read_ahead(log_seg, first..last) {
            Some(mut p) => {
                let rest = first + p.len() as u32..last;
                if !rest.is_empty() {
                    p.extend(self.read_log_pages(log_seg, seg, rest)?);
                }
                p
            }
            None => self.read_log_pages(log_seg, seg, first..last)?,
        };
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
            in_sync,
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
        let tail = self.tail_dead.remove(&log_seg).unwrap_or(0)
            + self
                .frozen
                .as_mut()
                .and_then(|f| f.tail_dead.remove(&log_seg))
                .unwrap_or(0);
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
    pub(super) fn take_read_ahead(
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
        let cmds = lbas
            .iter()
            .map(|&lba| Command::Read {
                lba,
                buf: PageBuf::for_read(),
            })
            .collect();
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

    /// Writes the pending moves whose values are still live (a client may have overwritten
    /// or deleted a key since its value was read: that move is dropped), a group commit per
    /// ~[`GC_BATCH_BYTES`]; returns the value bytes moved.
    pub(super) fn write_gc_moves(&mut self) -> Result<u64> {
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
}
