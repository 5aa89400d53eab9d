//! Laying a batch out in value-log pages at the head: packed records, raw pages, long keys
//! and values spanning segments.

use super::*;

/// Where a batch's layout started: the head's log segment with its written, dead and tail
/// garbage bytes, and the first log segment number the layout may open.
pub(super) struct LayoutStart {
    head: Option<(u32, u64, u64, u64)>,
    first_new: u32,
}

/// The current value-log segment being appended to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Head {
    pub(super) log_seg: u32,
    pub(super) segment: u32,
    /// Next page index to hand out.
    pub(super) next_page: u32,
}

/// A batch's pages in the order they must be written.
pub(super) struct BatchPages {
    pages: Vec<(Lba, PageBuf)>,
    /// The open packed page and its position.
    open: PageBuilder,
    open_at: Option<(u32, u32)>,
    /// Raw pages that follow the open page.
    raws: Vec<(Lba, PageBuf)>,
    raw_after: u32,
    batch: u64,
    /// Laid out into the shared open page (see `open_page`): must not open another.
    joined: bool,
}

impl BatchPages {
    /// Raw pages that follow the open packed page.
    pub(super) fn raw_after(&self) -> u32 {
        self.raw_after
    }

    /// Whether a packed page is open.
    pub(super) fn has_open(&self) -> bool {
        self.open_at.is_some()
    }

    /// Bytes free in the open packed page.
    pub(super) fn open_free(&self) -> usize {
        self.open.free()
    }
}

/// A laid-out batch.
pub(super) struct LaidOut<'a> {
    /// The pages to write, in order.
    pub(super) pages: Vec<(Lba, PageBuf)>,
    /// The keytable updates to apply once they are durable.
    pub(super) updates: Vec<(&'a [u8], u64, Slot)>,
    /// The values the batch writes (key length and address): garbage if the batch fails. A
    /// retime's update points at a value written before, not among them.
    pub(super) fresh: Vec<Invalidated>,
    /// Whether an update retimes a value written before the batch: the batches after it
    /// must not be inserted before it (see [`InFlight`]'s `retimes`).
    pub(super) retimes: bool,
    /// The small values the batch writes (at most `EngineConfig::entry_value_max` bytes), by
    /// address: the memtable keeps a copy of each ([`MemTable::hold`]) before it takes the
    /// versions, and a flush puts it into the keytable entry.
    pub(super) held: Vec<(ValuePtr, &'a [u8])>,
    /// Whether its last packed page is the shared open page (opened or joined), which is
    /// not among `pages` (see `open_page`).
    pub(super) sharing: Sharing,
}

impl Inner {
    /// Raw pages a put lays out after its packed page (a long key's pages, then the
    /// value's), or 0 for a value packed into the page.
    pub(super) fn put_raw_pages(key_len: usize, value_len: usize) -> u64 {
        if is_long_key(key_len) {
            key_pages(key_len) + raw_pages(value_len as u64)
        } else if fits_inline(key_len, value_len) {
            0
        } else {
            raw_pages(value_len as u64)
        }
    }

    /// Whether a put is too large for one segment: its value then spans segments.
    pub(super) fn put_spans(&self, key_len: usize, value_len: usize) -> bool {
        Self::put_raw_pages(key_len, value_len) > u64::from(self.g.pages_per_segment() - 1)
    }

    /// Log segments a put spanning segments takes (0 for one that does not span).
    pub(super) fn spanning_segments(&self, key_len: usize, value_len: usize) -> usize {
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
    pub(super) fn batch_spanning_segments(&self, ops: &[WriteOp<'_>]) -> usize {
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

    /// Makes sure the head segment has `pages` free pages, opening a new log segment if not.
    pub(super) fn ensure_room(&mut self, pages: u32, reserve: usize) -> Result<()> {
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
        // Readers must find the segment before any pointer into it reaches a memtable.
        self.publish_segs();
        // The manifest must know the segment before data lands in it.
        self.persist()
    }

    /// Seals the open page of a batch into the list of pages to write.
    pub(super) fn seal_open(&mut self, b: &mut BatchPages, last: bool) -> Result<()> {
        let Some((log_seg, page)) = b.open_at.take() else {
            return Ok(());
        };
        // Sealed straight into the device's buffer (`seal_into` writes every byte of it).
        let mut sealed = PageBuf::for_read();
        b.open
            .seal_into(&mut sealed, log_seg, page, b.batch, last, b.raw_after);
        if let Some(m) = self.log_segs.get_mut(&log_seg) {
            m.written += PAGE_SIZE as u64;
        }
        self.count_tail_dead(log_seg, unused_bytes(b.open.bytes().len()));
        let lba = self.g.lba(SegmentId(self.segment_of(log_seg)?), page);
        b.pages.push((lba, sealed));
        b.pages.append(&mut b.raws);
        b.open.clear();
        b.raw_after = 0;
        Ok(())
    }

    /// Opens a packed page with room for `raw` raw pages after it.
    pub(super) fn open_page(&mut self, b: &mut BatchPages, raw: u32, reserve: usize) -> Result<()> {
        if b.joined {
            // `fits_open_page` admitted it whole: nothing was sealed or claimed.
            return Err(corrupt("a batch joining the open page outgrew it"));
        }
        self.seal_open(b, false)?;
        self.ensure_room(1 + raw, reserve)?;
        let h = self.head.as_mut().ok_or(EngineError::Closed)?;
        b.open_at = Some((h.log_seg, h.next_page));
        h.next_page += 1;
        Ok(())
    }

    /// Lays out a batch in value-log pages at the head: the pages to write, in order, and
    /// the keytable updates to apply once they are durable. On error the head is abandoned.
    /// Reserves raw pages after the batch's open packed page for a long key (and a value, for
    /// a put) and queues them: the key zero-padded to whole pages, then the value's pages.
    /// The open page keeps room for the long record, whose payload is `payload` bytes.
    /// Returns the log segment and the first raw page.
    pub(super) fn lay_out_long(
        &mut self,
        b: &mut BatchPages,
        key: &[u8],
        value: Option<&[u8]>,
        payload: usize,
        reserve: usize,
    ) -> Result<(u32, u32)> {
        let kp = key_pages(key.len()) as u32;
        let vp = value.map_or(0, |v| raw_pages(v.len() as u64) as u32);
        let n = kp + vp;
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
    pub(super) fn lay_out_spanning(
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

    /// The update a retime of `k` at `seq` makes, and the value it is for: the key's value
    /// where the write order has it at this point, with the new deadline. A put earlier in
    /// the same batch takes the deadline into its own update (one memtable version, as the
    /// client wrote one); else the newest version in a batch still on the device, or in
    /// the applied state. A key without a value gets no update (and `None`).
    fn retime_update<'a>(
        &mut self,
        updates: &mut Vec<(&'a [u8], u64, Slot)>,
        retimes: &mut Vec<usize>,
        k: &'a [u8],
        seq: u64,
        deadline: Deadline,
    ) -> Option<ValuePtr> {
        if let Some(i) = updates.iter().rposition(|(uk, _, _)| *uk == k) {
            return match &mut updates[i] {
                (_, _, Slot::Value(p, d)) => {
                    *d = deadline;
                    Some(*p)
                }
                (_, _, Slot::Tombstone) => None,
            };
        }
        let Some(Slot::Value(p, _)) = self.pending_slot(k) else {
            return None;
        };
        retimes.push(updates.len());
        updates.push((k, seq, Slot::Value(p, deadline)));
        // Batches in flight go into the current memtable (a rotation waits for them).
        self.mem.note_retime();
        Some(p)
    }

    /// The newest slot of `k` counting batches still on the device: the newest batch not
    /// yet claimed for insertion that writes it; else, once every claimed batch's insert
    /// has finished (an inserter runs without the write lock, so one may be halfway),
    /// the applied state.
    fn pending_slot(&mut self, k: &[u8]) -> Option<Slot> {
        for b in self.pipeline.values().rev() {
            if let Some((_, _, s)) = b.updates().iter().rev().find(|(uk, _, _)| &**uk == k) {
                return Some(*s);
            }
        }
        while self.pipeline.values().any(InFlight::inserting) {
            std::thread::yield_now();
        }
        self.lookup(k)
    }

    /// The deadline op `i` of `ops`, a put, takes into its own record: that of a retime of the
    /// same key right after it (a put with a deadline, expanded), unless the value spans
    /// segments or the 8 bytes would move it out of its packed page.
    fn folded(&self, ops: &[WriteOp<'_>], i: usize) -> Deadline {
        let (WriteOp::Put(k, v), Some(WriteOp::Retime(rk, Some(d)))) = (ops[i], ops.get(i + 1))
        else {
            return None;
        };
        let same_form =
            fits_inline(k.len(), v.len()) == fits_inline(k.len(), v.len() + DEADLINE_SUFFIX);
        (k == *rk && !self.put_spans(k.len(), v.len()) && same_form).then_some(*d)
    }

    /// Counts the deadline after a put record as garbage at once (see
    /// [`crate::vlog_format::DEADLINE_FLAG`]).
    fn count_deadline_suffix(&mut self, log_seg: u32, until: Deadline) {
        if until.is_some() {
            self.count_tail_dead(log_seg, DEADLINE_SUFFIX as u64);
        }
    }

    /// The oldest version of `k` not yet in a keytable: in the oldest frozen memtable that holds one, else in the
    /// active one (once every claimed batch's insert has finished), else in the oldest batch
    /// still on the device that writes it. What a flush will compare with the levels.
    pub(super) fn oldest_unflushed(&mut self, k: &[u8]) -> Option<Slot> {
        if let Some(s) = self.frozen.iter().find_map(|f| f.mem.oldest(k)) {
            return Some(s);
        }
        while self.pipeline.values().any(InFlight::inserting) {
            std::thread::yield_now();
        }
        if let Some(s) = self.mem.oldest(k) {
            return Some(s);
        }
        self.pipeline
            .values()
            .find_map(|b| b.updates().iter().find(|(uk, _, _)| &**uk == k))
            .map(|(_, _, s)| *s)
    }

    /// Most value-log pages a batch can take (at least two): its packed pages (bounded by
    /// the bytes of its records, below), its raw pages, a packed page more for each segment
    /// boundary its raw pages may cross, and one more; a put spanning segments takes them
    /// whole (such a batch is never pipelined).
    pub(super) fn page_bound(&self, ops: &[WriteOp<'_>]) -> u64 {
        let pps = u64::from(self.g.pages_per_segment());
        // Bytes of the records that go into packed pages, and the pages everything else
        // takes: each raw value its own pages (its record goes into the open packed page,
        // which stays open across raw values), each long key its pages and a packed page.
        let mut packed_bytes = 0u64;
        let mut raw = 0u64;
        let mut other = 0u64;
        for op in ops {
            match op {
                WriteOp::Put(k, v) if self.put_spans(k.len(), v.len()) => {
                    other += (self.spanning_segments(k.len(), v.len()) as u64 * pps)
                        .max(super::write::PIPELINE_MAX_BATCH_PAGES + 1);
                }
                WriteOp::Put(k, v) if !is_long_key(k.len()) && fits_inline(k.len(), v.len()) => {
                    packed_bytes += (RECORD_HEADER + k.len() + v.len()) as u64;
                }
                WriteOp::Put(k, v) if is_long_key(k.len()) => {
                    packed_bytes += (RECORD_HEADER + k.len() + INDIRECT_PAYLOAD) as u64;
                    other += 1 + Self::put_raw_pages(k.len(), v.len());
                }
                WriteOp::Put(k, v) => {
                    packed_bytes += (RECORD_HEADER + k.len() + INDIRECT_PAYLOAD) as u64;
                    raw += Self::put_raw_pages(k.len(), v.len());
                }
                WriteOp::Delete(k) | WriteOp::Retime(k, _) if is_long_key(k.len()) => {
                    other += 1 + key_pages(k.len());
                }
                WriteOp::Delete(k) => packed_bytes += (RECORD_HEADER + k.len()) as u64,
                WriteOp::Retime(k, _) => {
                    packed_bytes += (RECORD_HEADER + k.len() + RETIME_PAYLOAD) as u64;
                }
                // Expanded before the layout (`WriteOp::expand`): bounded as its two parts.
                WriteOp::PutUntil(k, v, _) => {
                    packed_bytes += (RECORD_HEADER + k.len() + RETIME_PAYLOAD) as u64;
                    if !is_long_key(k.len()) && fits_inline(k.len(), v.len()) {
                        packed_bytes += (RECORD_HEADER + k.len() + v.len()) as u64;
                    } else {
                        packed_bytes += (RECORD_HEADER + k.len() + INDIRECT_PAYLOAD) as u64;
                        raw += Self::put_raw_pages(k.len(), v.len());
                    }
                }
            }
        }
        // A small record opens a packed page only when the page before it had no room for
        // it, so each page it opens and the page before hold more than a page's capacity
        // between them: such pages number fewer than 2 x packed_bytes / capacity. Plus the
        // batch's first page. (Counting a page per record, as before, sent every write
        // group of more than 64 small values down the synchronous path.)
        let capacity = crate::vlog_format::PAGE_CAPACITY as u64;
        let packed = if packed_bytes == 0 {
            0
        } else {
            (2 * packed_bytes).div_ceil(capacity) + 1
        };
        // A raw value that does not fit the head segment closes the packed page and opens
        // one in the next segment: once per boundary its pages reach. (Counting a packed
        // page per raw value, as before, sent every write group of 32 or more 8 KiB values
        // down the synchronous path, alone on the device.)
        let crossings = if raw == 0 { 0 } else { raw.div_ceil(pps) + 1 };
        packed + raw + crossings + other + 1
    }

    /// Lays out a batch (see the module docs). With `share` (an early client batch, see
    /// `open_page`), a batch whose records all fit the open page joins it, and a batch that
    /// ends in a packed page with room left leaves that page open; without it, or when the
    /// batch does not fit, the open page is sealed and queued first, so it keeps its place
    /// before every page laid out after it.
    pub(super) fn build_batch<'a>(
        &mut self,
        ops: &[WriteOp<'a>],
        reserve: usize,
        share: bool,
        prepared: &mut super::write::Prepared<'a>,
    ) -> Result<LaidOut<'a>> {
        let join = share && self.fits_open_page(ops);
        if !join {
            // Queued now, ahead of this batch's pages (the caller rings the doorbell). A page
            // the device refused leaves a hole at the head: nothing may be laid out behind
            // it (its members are failed, the head abandoned); this batch is not applied.
            self.seal_open_page()
                .map_err(EngineError::WriteNotApplied)?;
        }
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
        let mut b = match self.open_page.as_ref().filter(|_| join) {
            // Its records go after those already in the open page, in that page's device
            // batch; the page itself changes only once the layout succeeded.
            Some(open) => BatchPages {
                pages: Vec::new(),
                open: open.builder.clone(),
                open_at: Some((open.log_seg, open.page)),
                raws: Vec::new(),
                raw_after: 0,
                batch: open.batch,
                joined: true,
            },
            None => {
                let batch = self.next_batch;
                self.next_batch += 1;
                BatchPages {
                    pages: Vec::new(),
                    open: PageBuilder::new(),
                    open_at: None,
                    raws: Vec::new(),
                    raw_after: 0,
                    batch,
                    joined: false,
                }
            }
        };
        let mut updates: Vec<(&'a [u8], u64, Slot)> = Vec::with_capacity(ops.len());
        // Indexes of the updates that retime a value written before this batch.
        let mut retimes: Vec<usize> = Vec::new();
        let mut held: Vec<(ValuePtr, &'a [u8])> = Vec::new();
        let hold_max = self.cfg.entry_value_max.min(MAX_HELD_VALUE);
        let result = (|| -> Result<()> {
            // Set when a put took the deadline of the retime after it (see `folded`).
            let mut skip = false;
            for (i, op) in ops.iter().enumerate() {
                if std::mem::take(&mut skip) {
                    continue;
                }
                let seq = self.next_seq;
                self.next_seq += 1;
                // A put followed by a retime of its key (a put with a deadline, as
                // `WriteOp::expand` lays it out) writes the deadline into its own record.
                let until = self.folded(ops, i);
                skip = until.is_some();
                let suffix = if until.is_some() { DEADLINE_SUFFIX } else { 0 };
                let pushed = updates.len();
                match *op {
                    WriteOp::Put(k, v) if self.put_spans(k.len(), v.len()) => {
                        let last = i + 1 == ops.len();
                        let ptr = self.lay_out_spanning(&mut b, k, v, seq, reserve, last)?;
                        updates.push((k, seq, Slot::value(ptr)));
                    }
                    WriteOp::Put(k, v) if is_long_key(k.len()) => {
                        let (log_seg, first) = self.lay_out_long(
                            &mut b,
                            k,
                            Some(v),
                            LONG_PUT_PAYLOAD + suffix,
                            reserve,
                        )?;
                        let value_first = first + key_pages(k.len()) as u32;
                        let crc = crc32c::crc32c(v);
                        let payload = long_put_payload(first, k, crc);
                        b.open
                            .add_long_until(
                                RecordKind::LongPut,
                                seq,
                                k.len(),
                                v.len() as u32,
                                &payload,
                                until,
                            )
                            .ok_or_else(|| corrupt("long record does not fit"))?;
                        self.count_deadline_suffix(log_seg, until);
                        updates.push((
                            k,
                            seq,
                            Slot::Value(
                                ValuePtr {
                                    log_seg,
                                    loc: ValueLoc::Raw {
                                        page: value_first,
                                        crc,
                                    },
                                    len: v.len() as u32,
                                },
                                until,
                            ),
                        ));
                    }
                    WriteOp::Delete(k) if is_long_key(k.len()) => {
                        let (log_seg, first) =
                            self.lay_out_long(&mut b, k, None, LONG_DELETE_PAYLOAD, reserve)?;
                        let mut payload = [0u8; LONG_DELETE_PAYLOAD];
                        payload[..4].copy_from_slice(&first.to_le_bytes());
                        payload[4..].copy_from_slice(&crc32c::crc32c(k).to_le_bytes());
                        b.open
                            .add_long(RecordKind::LongDelete, seq, k.len(), 0, &payload)
                            .ok_or_else(|| corrupt("long record does not fit"))?;
                        // Needed only until the next flush: dead at once, as any delete.
                        self.count_tail_dead(log_seg, delete_record_bytes(k.len()));
                        updates.push((k, seq, Slot::Tombstone));
                    }
                    WriteOp::Put(k, v) if fits_inline(k.len(), v.len()) => {
                        let need = RECORD_HEADER + k.len() + v.len() + suffix;
                        if b.open_at.is_none() || b.open.free() < need {
                            self.open_page(&mut b, 0, reserve)?;
                        }
                        let Some((log_seg, page)) = b.open_at else {
                            return Err(EngineError::Closed);
                        };
                        let offset = b
                            .open
                            .add_until(RecordKind::Put, seq, k, v.len() as u32, v, until)
                            .ok_or_else(|| corrupt("record does not fit a fresh page"))?;
                        self.count_deadline_suffix(log_seg, until);
                        updates.push((
                            k,
                            seq,
                            Slot::Value(
                                ValuePtr {
                                    log_seg,
                                    loc: ValueLoc::Inline { page, offset },
                                    len: v.len() as u32,
                                },
                                until,
                            ),
                        ));
                    }
                    WriteOp::Put(k, v) => {
                        let n = raw_pages(v.len() as u64) as u32;
                        let need = RECORD_HEADER + k.len() + INDIRECT_PAYLOAD + suffix;
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
                        // Made before the write lock when the writer prepared it.
                        let raw = prepared
                            .take(v)
                            .unwrap_or_else(|| super::write::RawValue::of(v));
                        let crc = raw.crc;
                        for (i, page) in raw.pages.into_iter().enumerate() {
                            let lba = self.g.lba(SegmentId(segment), first + i as u32);
                            b.raws.push((lba, page));
                        }
                        b.raw_after += n;
                        if let Some(m) = self.log_segs.get_mut(&log_seg) {
                            m.written += u64::from(n) * PAGE_SIZE as u64;
                        }
                        b.open
                            .add_until(
                                RecordKind::Indirect,
                                seq,
                                k,
                                v.len() as u32,
                                &indirect_payload(first, crc),
                                until,
                            )
                            .ok_or_else(|| corrupt("indirect record does not fit"))?;
                        self.count_deadline_suffix(log_seg, until);
                        updates.push((
                            k,
                            seq,
                            Slot::Value(
                                ValuePtr {
                                    log_seg,
                                    loc: ValueLoc::Raw { page: first, crc },
                                    len: v.len() as u32,
                                },
                                until,
                            ),
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
                        updates.push((k, seq, Slot::Tombstone));
                    }
                    WriteOp::Retime(k, deadline) => {
                        // A key without a value: nothing to retime, nothing written.
                        let Some(ptr) =
                            self.retime_update(&mut updates, &mut retimes, k, seq, deadline)
                        else {
                            continue;
                        };
                        // Needed only until the next flush, as a delete record.
                        let log_seg = if is_long_key(k.len()) {
                            let (log_seg, first) =
                                self.lay_out_long(&mut b, k, None, LONG_RETIME_PAYLOAD, reserve)?;
                            let payload = long_retime_payload(first, k, deadline, &ptr);
                            b.open
                                .add_long(RecordKind::LongRetime, seq, k.len(), 0, &payload)
                                .ok_or_else(|| corrupt("long record does not fit"))?;
                            Some(log_seg)
                        } else {
                            let need = RECORD_HEADER + k.len() + RETIME_PAYLOAD;
                            if b.open_at.is_none() || b.open.free() < need {
                                self.open_page(&mut b, 0, reserve)?;
                            }
                            b.open
                                .add(
                                    RecordKind::Retime,
                                    seq,
                                    k,
                                    0,
                                    &retime_payload(deadline, &ptr),
                                )
                                .ok_or_else(|| corrupt("retime record does not fit"))?;
                            b.open_at.map(|(log_seg, _)| log_seg)
                        };
                        if let Some(log_seg) = log_seg {
                            self.count_tail_dead(log_seg, retime_record_bytes(k.len()));
                        }
                    }
                    // `WriteOp::expand` turned it into a put and a retime.
                    WriteOp::PutUntil(..) => {
                        return Err(corrupt("a put with a deadline reached the layout whole"));
                    }
                }
                // A small value packed into its page is also kept in DRAM with its version (see
                // `LaidOut::held`; replay rebuilds the copies of those records, so only those).
                if let (WriteOp::Put(_, v), Some((_, _, Slot::Value(p, _)))) =
                    (*op, updates.get(pushed))
                {
                    if v.len() <= hold_max && matches!(p.loc, ValueLoc::Inline { .. }) {
                        held.push((*p, v));
                    }
                }
            }
            Ok(())
        })();
        // The last packed page: kept open for the batches after it, or sealed as the batch's
        // last.
        let result = result.and_then(|()| {
            if b.joined {
                if let (Some(open), Some(_)) = (self.open_page.as_mut(), b.open_at) {
                    open.builder = std::mem::take(&mut b.open);
                }
                Ok(Sharing::Joined)
            } else if share && Self::may_leave_open(&b) {
                let at = b.open_at.take().ok_or(EngineError::Closed)?;
                self.keep_open(std::mem::take(&mut b.open), at, b.batch);
                Ok(Sharing::Opened)
            } else {
                self.seal_open(&mut b, true).map(|()| Sharing::None)
            }
        });
        let sharing = match result {
            Ok(s) => s,
            // A joiner changed nothing of the page or the head (it works on a copy).
            Err(e) if b.joined => return Err(e),
            Err(e) => {
                self.abandon_head();
                self.forget_layout(claimed_from);
                return Err(e);
            }
        };
        // Every update but a retime's points at a value this batch wrote (a put followed by
        // a retime in the batch was folded into one update with the put's value).
        let fresh = updates
            .iter()
            .enumerate()
            .filter(|(i, _)| retimes.binary_search(i).is_err())
            .filter_map(|(_, (k, _, s))| s.ptr().map(|p| (k.len(), p)))
            .collect();
        Ok(LaidOut {
            pages: b.pages,
            updates,
            fresh,
            retimes: !retimes.is_empty(),
            held,
            sharing,
        })
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
    pub(super) fn forget_layout(&mut self, start: LayoutStart) {
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

    pub(super) fn head_position(&self) -> (u32, u32) {
        match self.head {
            Some(h) => (h.log_seg, h.next_page),
            None => (self.next_log_seg, 0),
        }
    }
}
