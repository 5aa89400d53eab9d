//! Reading victims: the window a step reads ahead (its reads go down under the write lock
//! and are waited for with it free), the pages a step carried over, and reads of victim
//! pages with their retries.

use super::*;

/// Pages of a victim whose reads are on the device while garbage collection writes the
/// moves of the window before them.
pub(in crate::engine) struct GcReadAhead {
    pub(in crate::engine) log_seg: u32,
    pub(in crate::engine) pages: std::ops::Range<u32>,
    /// The pages of `pages` read, in order: the others are raw pages of dead values
    /// ([`DeadRawPages`](super::dead_pages::DeadRawPages)).
    pub(in crate::engine) read: Vec<u32>,
    pub(in crate::engine) reads: AheadReads,
}

/// The reads of a [`GcReadAhead`]: on the device, or back (the maintenance thread waits for
/// them with the write lock free before a step: [`Core::land_read_ahead`]).
pub(in crate::engine) enum AheadReads {
    /// Queued or on the device.
    OnDevice(crate::io::InFlight),
    /// Completed, in the order of [`GcReadAhead::read`].
    Done(Vec<std::result::Result<Completion, DeviceError>>),
}

impl AheadReads {
    /// The completions, in order, once every read is back.
    pub(in crate::engine) fn wait(self) -> Vec<std::result::Result<Completion, DeviceError>> {
        match self {
            AheadReads::OnDevice(reads) => reads.wait(),
            AheadReads::Done(results) => results,
        }
    }
}

impl Core {
    /// Waits for the window garbage collection read ahead, with the write lock released
    /// meanwhile, so the step that uses it does not wait for the device with the lock held.
    /// Nothing else takes the read-ahead while it is out of `Inner`: only a garbage-collection
    /// step, `clear` and `close` touch it, and all three hold the maintenance lock.
    pub(in crate::engine) fn land_read_ahead(&self, g: &mut MutexGuard<'_, Inner>) {
        let Some(mut ahead) = g.gc_read_ahead.take() else {
            return;
        };
        if let AheadReads::OnDevice(_) = &ahead.reads {
            let reads = std::mem::replace(&mut ahead.reads, AheadReads::Done(Vec::new()));
            let poller = g.poller.clone();
            let results = MutexGuard::unlocked(g, || {
                // Queued by the step before; its doorbell may not have been rung yet.
                poller.doorbell();
                reads.wait()
            });
            ahead.reads = AheadReads::Done(results);
        }
        g.gc_read_ahead = Some(ahead);
    }
}

/// Pages of a victim a step read but stopped short of (a group of pages that runs past its
/// window): the next step starts with them, and the window read ahead follows them.
pub(in crate::engine) struct GcCarry {
    pub(super) log_seg: u32,
    /// The first of them.
    pub(super) first: u32,
    pub(super) pages: Vec<Option<PageBuf>>,
}

impl Inner {
    /// Waits for the window read ahead, if any, and lets it go (a step failed, or the engine
    /// clears or closes: nothing may read a segment about to be trimmed).
    pub(in crate::engine) fn drop_read_ahead(&mut self) {
        if let Some(ahead) = self.gc_read_ahead.take() {
            self.poller.doorbell();
            drop(ahead.reads.wait());
        }
    }

    /// Starts reading the window at `page` of victim `log_seg` (which ends at `end`), or,
    /// when the victim is done, the first window of the next victim the policy picks: the
    /// reads overlap the step's judgement and its moves. (A second window in flight was
    /// tried: the step then waited less for reads and more for room and tags, and overwrites
    /// ran no faster.)
    pub(in crate::engine) fn read_ahead(&mut self, log_seg: u32, page: u32, end: u32) {
        if self.gc_read_ahead.is_some() {
            // The next victim's first window, read ahead by a step before this one that
            // reached the victim's end too (a step may stop short of it and carry the rest).
            return;
        }
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
        let lbas: Vec<Lba> = read.iter().map(|&p| self.g.lba(seg, p)).collect();
        let cmds = crate::io::page_reads(&lbas);
        self.gc_read_ahead = Some(GcReadAhead {
            log_seg: victim,
            pages,
            read,
            // Rung by the maintenance thread once it has released the write lock (or by
            // anyone's doorbell before that): see `Core::gc_step`.
            reads: AheadReads::OnDevice(self.poller.queue_all(cmds)),
        });
    }

    /// The pages read ahead, when they are the first of `pages` of `log_seg`: one entry per
    /// page of the read-ahead's range, `None` for a read that did not come back as reads do
    /// (refused for want of a tag, say, or failed: the caller reads it again the usual way),
    /// `Some(None)` for a page never written or not read (a dead value's raw page); the
    /// caller reads the rest of `pages`. A read ahead of other pages is waited for and
    /// dropped: nothing may still read a segment garbage collection is done with.
    pub(in crate::engine) fn take_read_ahead(
        &mut self,
        log_seg: u32,
        start: u32,
    ) -> Option<(u32, Vec<Option<Option<PageBuf>>>)> {
        let wanted = self
            .gc_read_ahead
            .as_ref()
            .is_some_and(|a| a.log_seg == log_seg && a.pages.start == start);
        if !wanted {
            // Not where this step reads (a value longer than a window moved it on).
            self.drop_read_ahead();
            return None;
        }
        let ahead = self.gc_read_ahead.take()?;
        // Queued by a step before; its doorbell may not have been rung yet.
        self.poller.doorbell();
        let results = ahead.reads.wait();
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
        Some((ahead.pages.end, got))
    }

    /// Pages `first..last` of victim `log_seg` (device segment `seg`, which ends at `end`):
    /// those the step before carried over, then what was read ahead after them (`last` grows
    /// to the read-ahead's end), with the pages whose read-ahead did not come back read
    /// again, and the rest read now.
    pub(super) fn window_pages(
        &mut self,
        log_seg: u32,
        seg: SegmentId,
        first: u32,
        last: &mut u32,
        end: u32,
    ) -> Result<Vec<Option<PageBuf>>> {
        let mut pages = match self.gc_carry.take() {
            Some(c) if c.log_seg == log_seg && c.first == first => c.pages,
            _ => Vec::new(),
        };
        let at = first + pages.len() as u32;
        // Carried over to the victim's end: what is read ahead is the next victim's.
        let ahead = if at < end {
            self.take_read_ahead(log_seg, at)
        } else {
            None
        };
        if let Some((ahead_end, ahead)) = ahead {
            *last = (*last).max(ahead_end).min(end);
            for (page, got) in (at..*last).zip(ahead) {
                match got {
                    Some(buf) => pages.push(buf),
                    None => pages.extend(self.read_log_pages(log_seg, seg, page..page + 1)?),
                }
            }
        }
        let rest = first + pages.len() as u32..*last;
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
    pub(in crate::engine) fn read_log_pages(
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
}
