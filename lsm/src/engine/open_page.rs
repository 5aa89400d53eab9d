//! The shared open page of [`EngineConfig::ack_from_dram`]: the head's last packed page, left
//! open by a client batch so that the small batches after it add their records to it instead
//! of writing a page each, and sealed (queued for the device) when a batch cannot join, when
//! anyone waits for the pipeline, when a member's doorbell rings, or after
//! [`EngineConfig::open_page_linger`].
//!
//! **Why.** A batch acknowledged from DRAM is as durable as its page copies in the landing
//! buffer until its pages land (see `landing`). Without sharing, every group of small writes
//! (one HSET of 100 bytes) wrote an 8 KiB page of its own: 50 times the bytes, a device page
//! to program, to complete and to collect again per group. With it, a page holds as many
//! groups as fit.
//!
//! **Format: unchanged.** The open page belongs to the device batch of the client batch that
//! opened it (its header names that batch, is marked the batch's last page, and has no raw
//! page after it), exactly as if that batch had written every record in it. A batch joins
//! only when all its records fit the open page whole, so every client batch still lies inside
//! one device batch and recovery applies it all or nothing. Joiners take no batch number.
//!
//! **Invariants** (each argued where it is kept):
//! 1. *NAND order.* Nothing is laid out after the open page while it is open: every layout
//!    that does not join it seals it first ([`Inner::build_batch`]), so the page is queued
//!    before any later page of its segment.
//! 2. *A member's completion waits for the page.* Every batch with records in the page (its
//!    *members*) counts the page in its [`GroupDone`], which the page's completion finishes
//!    for all of them; a member therefore stays in the pipeline until the page has landed,
//!    so the pipeline is never empty while a page is open, and every wait for the pipeline
//!    seals it first ([`Core::wait_for_batches`]). Rotation, `sync`, `close` and the
//!    synchronous write path, which all run with the pipeline drained, never see an open
//!    page. Garbage collection's moves, laid out beside client batches in plp mode, seal it
//!    first as any layout that does not join it does (invariant 1).
//! 3. *Readers find every record.* The page's copy in the landing buffer is replaced, under
//!    the write lock, each time a batch joins, before that batch's versions can enter the
//!    memtable; copies only grow, so a reader holding an older copy was never shown a version
//!    that points past it. The value cache takes only the sealed page.
//! 4. *Only early client batches share.* Members are acknowledged from DRAM; garbage
//!    collection's moves, durable writes and the synchronous path never leave a page open
//!    or join one.
//!
//! Losing an open page in a crash (`kill -9`) loses what the landing buffer held, which is
//! within what [`EngineConfig::ack_from_dram`] states: it relies on the device's power-loss
//! protection (and `SIGPWR`'s sync, which seals) for durability.
//!
//! [`EngineConfig::ack_from_dram`]: crate::EngineConfig::ack_from_dram

use std::time::Instant;

use super::*;
use crate::io::OnDone;

/// A batch leaves its last page open only with at least this many bytes free in it (a page
/// nearly full is sealed at once: few records could join it).
const OPEN_PAGE_MIN_FREE: usize = 512;

/// A member's doorbell seals the page itself only while the device has more free command
/// tags than this (the asynchronous client reads that may take tags meanwhile, as for a
/// batch started on the network thread); else it leaves the page to `lsm-maint`, since a
/// page refused for want of a tag is retried under the write lock.
pub(super) const SEAL_NOW_SPARE_TAGS: usize = 64;

/// The head's open packed page (see the module docs).
pub(super) struct OpenPage {
    /// Its records so far (header not yet filled in).
    pub(super) builder: PageBuilder,
    pub(super) log_seg: u32,
    pub(super) page: u32,
    /// The device batch it belongs to: its opener's.
    pub(super) batch: u64,
    /// The completions of the batches with records in it, and their tickets.
    members: Vec<(u64, Arc<GroupDone>)>,
    /// When it was opened.
    since: Instant,
}

impl OpenPage {
    /// Its address in the log.
    pub(super) fn addr(&self) -> PageAddr {
        PageAddr {
            log_seg: self.log_seg,
            page: self.page,
        }
    }
}

/// How a batch's layout met the open page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sharing {
    /// Its pages are all its own and sealed.
    None,
    /// It left its last packed page open for the batches after it.
    Opened,
    /// Its records all went into the page already open.
    Joined,
}

impl Inner {
    /// Whether every record of `ops` fits the open page whole (see the module docs): small
    /// puts packed into the page, deletes and retimes of short keys, and their bytes at most
    /// the page's free room (counted generously: a deadline suffix for every put).
    pub(super) fn fits_open_page(&self, ops: &[WriteOp<'_>]) -> bool {
        let Some(open) = &self.open_page else {
            return false;
        };
        let mut need = 0usize;
        for op in ops {
            need += match *op {
                WriteOp::Put(k, v) if !is_long_key(k.len()) && fits_inline(k.len(), v.len()) => {
                    RECORD_HEADER + k.len() + v.len() + DEADLINE_SUFFIX
                }
                WriteOp::Delete(k) if !is_long_key(k.len()) => RECORD_HEADER + k.len(),
                WriteOp::Retime(k, _) if !is_long_key(k.len()) => {
                    RECORD_HEADER + k.len() + RETIME_PAYLOAD
                }
                _ => return false,
            };
        }
        need <= open.builder.free()
    }

    /// Whether a batch whose layout ends in `b`'s open packed page may leave it open.
    pub(super) fn may_leave_open(b: &layout::BatchPages) -> bool {
        b.raw_after() == 0 && b.has_open() && b.open_free() >= OPEN_PAGE_MIN_FREE
    }

    /// Opens the shared page from a batch's last packed page (its records so far).
    pub(super) fn keep_open(&mut self, builder: PageBuilder, at: (u32, u32), batch: u64) {
        self.open_page = Some(OpenPage {
            builder,
            log_seg: at.0,
            page: at.1,
            batch,
            members: Vec::new(),
            since: Instant::now(),
        });
        self.stats.shared_pages_opened += 1;
        self.open_page_news = true;
    }

    /// Registers a batch laid out into the open page as one of its members, and returns the
    /// page's address and a copy of it as it now stands (for the landing buffer).
    pub(super) fn join_open_page(
        &mut self,
        group: &Arc<GroupDone>,
        ticket: u64,
    ) -> Option<(PageAddr, Bytes)> {
        let open = self.open_page.as_mut()?;
        if !open.members.is_empty() {
            self.stats.shared_page_joins += 1;
        }
        open.members.push((ticket, group.clone()));
        Some((open.addr(), Bytes::copy_from_slice(open.builder.bytes())))
    }

    /// Drops the open page a batch opened but could not submit (a page of it refused): its
    /// only member is that batch, which fails, and the page stays unwritten (the hole the
    /// failure handles). The page counts as written and its unused room as garbage, as a
    /// refused sealed page does (the failure counts the batch's values dead). The batch's
    /// completion counts the page as done.
    pub(super) fn discard_open_page(&mut self) {
        if let Some(open) = self.open_page.take() {
            if let Some(m) = self.log_segs.get_mut(&open.log_seg) {
                m.written += PAGE_SIZE as u64;
            }
            self.count_tail_dead(open.log_seg, unused_bytes(open.builder.bytes().len()));
            for (_, m) in open.members {
                m.finish_one(Ok(()));
            }
        }
    }

    /// When the open page is due to be sealed, if one is open.
    pub(super) fn open_page_deadline(&self) -> Option<Instant> {
        self.open_page
            .as_ref()
            .map(|o| o.since + self.cfg.open_page_linger)
    }

    /// Seals the open page, if any, and queues it for the device (the caller rings the
    /// doorbell): its header names its opener's batch as that batch's last page, its unused
    /// room is garbage, its final copy replaces the partial one in the landing buffer (and
    /// enters the value cache once queued), and its completion finishes every member's.
    /// Returns whether a page was queued.
    ///
    /// # Errors
    /// The device refused the page (after waiting, as for a batch's page): every member
    /// fails. Those not yet claimed are never applied (their writers learn it); those
    /// already acknowledged are lost, which stops writes when they retire
    /// (`AcknowledgedWriteLost`). The head is abandoned: nothing may follow the hole.
    pub(super) fn seal_open_page(&mut self) -> std::result::Result<bool, DeviceError> {
        let Some(open) = self.open_page.take() else {
            return Ok(false);
        };
        let addr = open.addr();
        // Sealed straight into the device's buffer (`seal_into` writes every byte of it).
        let mut sealed = PageBuf::for_read();
        open.builder
            .seal_into(&mut sealed, open.log_seg, open.page, open.batch, true, 0);
        if let Some(m) = self.log_segs.get_mut(&open.log_seg) {
            m.written += PAGE_SIZE as u64;
        }
        self.count_tail_dead(open.log_seg, unused_bytes(open.builder.bytes().len()));
        self.pages_since_checkpoint += 1;
        if let Some(l) = &self.side.landing {
            l.hold(&[(addr, Bytes::copy_from_slice(&sealed))]);
        }
        let tickets: Vec<u64> = open.members.iter().map(|(t, _)| *t).collect();
        let members: Arc<Vec<Arc<GroupDone>>> =
            Arc::new(open.members.into_iter().map(|(_, m)| m).collect());
        let fan_out = |members: &Arc<Vec<Arc<GroupDone>>>| -> OnDone {
            let members = members.clone();
            Box::new(move |r: std::result::Result<Completion, DeviceError>| {
                let r = r.and_then(|c| c.result);
                for m in members.iter() {
                    m.finish_one(r.clone());
                }
            })
        };
        let segment = match self.segment_of(open.log_seg) {
            Ok(s) => s,
            // (Cannot happen: the head's segment is in the map while it is the head.)
            Err(_) => return Err(self.fail_open_page(&members, &tickets, DeviceError::PoweredOff)),
        };
        let lba = self.g.lba(SegmentId(segment), open.page);
        let cache_copy = self
            .side
            .cache
            .as_ref()
            .map(|_| crate::cache::copy_packed_for_cache(&sealed));
        let cmd = Command::Write { lba, buf: sealed };
        let queued = match self
            .poller
            .queue_many(vec![cmd], vec![fan_out(&members)])
            .pop()
        {
            Some(Err(r)) => match r.buf {
                // As a batch's refused page: again while the queue is full.
                Some(buf) => self.submit_refused_page(lba, buf, || fan_out(&members)),
                None => Err(r.error),
            },
            _ => Ok(()),
        };
        match queued {
            Ok(()) => {
                if let (Some(cache), Some(copy)) = (&self.side.cache, cache_copy) {
                    cache.insert(addr, copy);
                }
                Ok(true)
            }
            Err(e) => {
                tracing::error!(error = %e, "the device refused a shared page");
                Err(self.fail_open_page(&members, &tickets, e))
            }
        }
    }

    /// A sealed shared page that never reaches the device: its members not yet claimed fail
    /// as a batch with a refused page does (claimed in ticket order, poisoning those after
    /// them); every member's completion gets the error (an acknowledged one then stops
    /// writes when it retires); the head is abandoned, so nothing is laid out behind the
    /// hole. Returns the error.
    fn fail_open_page(
        &mut self,
        members: &[Arc<GroupDone>],
        tickets: &[u64],
        error: DeviceError,
    ) -> DeviceError {
        let claimed = self.claimed_upto;
        for &t in tickets.iter().filter(|&&t| t > claimed) {
            self.record_io(t, Err(super::write::BatchFailure::Page(error.clone())));
        }
        for m in members {
            m.finish_one(Err(error.clone()));
        }
        self.abandon_head_after_failure();
        error
    }
}
