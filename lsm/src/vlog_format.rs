//! On-device format of the value log: packed pages of self-describing records, and raw value
//! pages.
//!
//! A *packed page* is 8 KiB: a 32-byte header, then records back to back.
//!
//! ```text
//! header: crc32c u32 (of bytes 4..8192) | magic u16 | used u16 | log_seg u32 | page u32 |
//!         batch u64 | flags u8 | 3 pad | raw_after u32
//! record: kind u8 | key_len_hi u8 | key_len u16 | value_len u32 | seq u64 | key | payload
//!         payload: Put = value bytes; Indirect = raw_page u32 + crc32c u32 of the value; Delete = none
//!         LongPut / LongDelete (keys over LONG_KEY_MIN bytes): no key bytes in the page;
//!         payload = key_page u32 + crc32c u32 of the key (+ crc32c u32 of the value, LongPut)
//!         Continued (no key): payload = head log_seg u32 + head page u32; seq = the head's
//!         Retime: payload = deadline u64 (unix ms, 0 = none) + the value's address (16 bytes)
//!         LongRetime: payload = key_page u32 + crc32c u32 of the key + the Retime payload
//! ```
//!
//! A *retime* gives the key's current value a new deadline (see [`crate::expiry`]) without
//! moving it. It names the value's address as the write path found it, so replay sets the
//! same slot without looking anything up (a lookup at replay could miss an entry that
//! compaction has dropped since). The address is `log_seg u32 | loc u32 | len u32 | word
//! u32`, `loc` being the page with bit 31 set for a raw value, `word` its crc32c (raw) or
//! its offset in the page (inline). A retime is garbage as soon as the next flush has it in
//! a keytable, as a delete is.
//!
//! A put with a deadline sets bit 7 of its `kind` byte ([`DEADLINE_FLAG`]): the deadline
//! (u64) follows the record's payload. Those 8 bytes are counted as garbage at once, as a
//! retime record is, so a value's garbage share stays what [`ValuePtr::record_bytes`]
//! says, deadline or not. (A put with a deadline that spans segments is a put and a retime.)
//!
//! A key longer than [`LONG_KEY_MIN`] does not go into the packed page: it fills raw pages of
//! its own (zero-padded to a page) right after the page, followed by the value's raw pages
//! (a LongPut's value is always raw), so keys up to 16 MiB fit the format; the record's
//! `key_len_hi` byte carries bits 16-23 of the key length.
//!
//! Values too large for a packed page are *raw*: page-aligned, without headers, in the
//! `raw_after` pages that follow the packed page describing them, so an 8 KiB value costs
//! exactly one page read. Their checksum lives in the indirect record (and in the keytable
//! entry). Every page of a write batch carries the batch number; the last one is flagged, so
//! recovery applies a batch only when all of it reached the device.
//!
//! A raw value too large for one segment *spans* segments (see [`raw_runs`]): it starts a
//! fresh segment, whose packed page holds its record, and fills the rest of it; each
//! following log segment (consecutive numbers, opened one after another by the same batch)
//! starts with a packed page holding a `Continued` record that names the head record, then
//! the value's next raw pages. The segments belong to the value alone: the last one is
//! closed after it, and the value's garbage share covers it whole (see
//! [`ValuePtr::segment_shares`]).

use std::num::NonZeroU64;

use hwftl_sim::PAGE_SIZE;

use crate::expiry::Deadline;

/// Bytes of a packed page's header.
pub const PAGE_HEADER: usize = 32;
/// Bytes of a record header.
pub const RECORD_HEADER: usize = 16;
/// Extra payload bytes of an indirect record (raw page and checksum).
pub const INDIRECT_PAYLOAD: usize = 8;
/// Record payload capacity of a packed page.
pub const PAGE_CAPACITY: usize = PAGE_SIZE - PAGE_HEADER;
/// Keys longer than this are written with long records: the key in raw pages of its own.
pub const LONG_KEY_MIN: usize = 4096;
/// The longest key the format can describe (24-bit length).
pub const LONG_KEY_MAX: usize = (1 << 24) - 1;
/// Payload bytes of a LongPut record (key page, key crc, value crc).
pub const LONG_PUT_PAYLOAD: usize = 12;
/// Payload bytes of a LongDelete record (key page, key crc).
pub const LONG_DELETE_PAYLOAD: usize = 8;
/// Payload bytes of a Continued record (head log segment, head page).
pub const CONTINUED_PAYLOAD: usize = 8;
/// Set in a put record's `kind` byte when the record's payload is followed by a deadline.
pub const DEADLINE_FLAG: u8 = 0x80;
/// Bytes a deadline adds after a flagged put record's payload.
pub const DEADLINE_SUFFIX: usize = 8;

/// Payload bytes of a Retime record (the deadline and the value's address).
pub const RETIME_PAYLOAD: usize = 24;
/// Payload bytes of a LongRetime record (key page, key crc, then a Retime payload).
pub const LONG_RETIME_PAYLOAD: usize = 8 + RETIME_PAYLOAD;
const RAW_LOC: u32 = 1 << 31;

/// The payload of an Indirect record: the value's first raw page and its crc32c.
pub fn indirect_payload(first_page: u32, value_crc: u32) -> [u8; INDIRECT_PAYLOAD] {
    let mut p = [0u8; INDIRECT_PAYLOAD];
    p[..4].copy_from_slice(&first_page.to_le_bytes());
    p[4..].copy_from_slice(&value_crc.to_le_bytes());
    p
}

/// The payload of a LongPut record: the key's first raw page, the key's crc32c and the
/// value's.
pub fn long_put_payload(key_page: u32, key: &[u8], value_crc: u32) -> [u8; LONG_PUT_PAYLOAD] {
    let mut p = [0u8; LONG_PUT_PAYLOAD];
    p[..4].copy_from_slice(&key_page.to_le_bytes());
    p[4..8].copy_from_slice(&crc32c::crc32c(key).to_le_bytes());
    p[8..].copy_from_slice(&value_crc.to_le_bytes());
    p
}

/// Whether a key of this length is written with a long record.
pub fn is_long_key(key_len: usize) -> bool {
    key_len > LONG_KEY_MIN
}

/// Raw pages a long key fills.
pub fn key_pages(key_len: usize) -> u64 {
    (key_len as u64).div_ceil(PAGE_SIZE as u64).max(1)
}

/// Where a long record's key is: its first raw page, its length and its crc32c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongKey {
    /// First raw page of the key (in the same log segment).
    pub first_page: u32,
    /// Key length in bytes.
    pub len: u32,
    /// crc32c of the key.
    pub crc: u32,
}

impl LongKey {
    /// Raw pages the key fills.
    pub fn pages(&self) -> u32 {
        key_pages(self.len as usize) as u32
    }

    /// The key, cut out of its raw pages (in order) and checked against its crc.
    pub fn assemble<'a>(&self, pages: impl IntoIterator<Item = &'a [u8]>) -> Option<Vec<u8>> {
        let mut key = Vec::with_capacity(self.pages() as usize * PAGE_SIZE);
        for p in pages.into_iter().take(self.pages() as usize) {
            key.extend_from_slice(p);
        }
        if key.len() < self.len as usize {
            return None;
        }
        key.truncate(self.len as usize);
        (crc32c::crc32c(&key) == self.crc).then_some(key)
    }
}

const MAGIC: u16 = 0x4c56; // "VL"
const FLAG_LAST_IN_BATCH: u8 = 1;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A value stored inside the packed page.
    Put,
    /// A value stored in raw pages after the packed page.
    Indirect,
    /// A deletion.
    Delete,
    /// A put whose key lives in raw pages (see [`LONG_KEY_MIN`]).
    LongPut,
    /// A deletion whose key lives in raw pages.
    LongDelete,
    /// The start of a segment that continues a value spanning segments (no key: it names
    /// the head record, which has the same sequence number).
    Continued,
    /// A new deadline for the key's current value.
    Retime,
    /// A retime whose key lives in raw pages.
    LongRetime,
}

impl RecordKind {
    fn code(self) -> u8 {
        match self {
            RecordKind::Put => 1,
            RecordKind::Indirect => 2,
            RecordKind::Delete => 3,
            RecordKind::LongPut => 4,
            RecordKind::LongDelete => 5,
            RecordKind::Continued => 6,
            RecordKind::Retime => 7,
            RecordKind::LongRetime => 8,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => RecordKind::Put,
            2 => RecordKind::Indirect,
            3 => RecordKind::Delete,
            4 => RecordKind::LongPut,
            5 => RecordKind::LongDelete,
            6 => RecordKind::Continued,
            7 => RecordKind::Retime,
            8 => RecordKind::LongRetime,
            _ => return None,
        })
    }
}

/// Where a value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueLoc {
    /// Inside packed page `page`, starting at byte `offset`.
    Inline {
        /// Page within the log segment.
        page: u32,
        /// Byte offset of the value within the page.
        offset: u16,
    },
    /// In raw pages starting at `page`, with this crc32c.
    Raw {
        /// First raw page within the log segment.
        page: u32,
        /// crc32c of the value.
        crc: u32,
    },
}

/// Address of a value in the value log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValuePtr {
    /// Log segment number (not the device segment: log segments are numbered as opened).
    pub log_seg: u32,
    /// Where in it.
    pub loc: ValueLoc,
    /// Value length in bytes.
    pub len: u32,
}

/// Consecutive raw pages of a value within one log segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRun {
    /// Log segment.
    pub log_seg: u32,
    /// First page within it.
    pub first: u32,
    /// Pages.
    pub count: u32,
}

/// Where the `pages` raw pages of a value starting at page `first` of log segment `log_seg`
/// are, in segments of `pages_per_segment` pages: to the end of that segment, then from page 1
/// of each following log segment (page 0 there is the continuation's packed page). A value
/// that fits in its segment is one run.
pub fn raw_runs(log_seg: u32, first: u32, pages: u64, pages_per_segment: u32) -> Vec<RawRun> {
    let mut runs = Vec::with_capacity(1);
    let in_first = u64::from(pages_per_segment.saturating_sub(first)).min(pages);
    runs.push(RawRun {
        log_seg,
        first,
        count: in_first as u32,
    });
    let per_segment = u64::from(pages_per_segment.saturating_sub(1)).max(1);
    let mut left = pages - in_first;
    let mut seg = log_seg;
    while left > 0 {
        seg = seg.wrapping_add(1);
        let n = left.min(per_segment);
        runs.push(RawRun {
            log_seg: seg,
            first: 1,
            count: n as u32,
        });
        left -= n;
    }
    runs
}

impl ValuePtr {
    /// Where this value's pages are (see [`raw_runs`]); an inline value is one page.
    pub fn runs(&self, pages_per_segment: u32) -> Vec<RawRun> {
        match self.loc {
            ValueLoc::Inline { page, .. } => vec![RawRun {
                log_seg: self.log_seg,
                first: page,
                count: 1,
            }],
            ValueLoc::Raw { page, .. } => raw_runs(
                self.log_seg,
                page,
                raw_pages(u64::from(self.len)),
                pages_per_segment,
            ),
        }
    }

    /// Whether the value spans log segments.
    pub fn spans(&self, pages_per_segment: u32) -> bool {
        match self.loc {
            ValueLoc::Inline { .. } => false,
            ValueLoc::Raw { page, .. } => {
                u64::from(page) + raw_pages(u64::from(self.len)) > u64::from(pages_per_segment)
            }
        }
    }

    /// The garbage this value becomes when it dies, per log segment. A value within one
    /// segment is its [`record_bytes`](Self::record_bytes) there. A value spanning segments
    /// owns them: the head segment's share is its record and pages, each continuation's is
    /// its Continued record and pages, and the last one's share runs to the end of the
    /// segment (the rest of it is never written, so the segment empties when the value dies).
    pub fn segment_shares(&self, key_len: usize, pages_per_segment: u32) -> Vec<(u32, u64)> {
        if !self.spans(pages_per_segment) {
            return vec![(self.log_seg, self.record_bytes(key_len))];
        }
        let runs = self.runs(pages_per_segment);
        let page = PAGE_SIZE as u64;
        let total_raw = raw_pages(u64::from(self.len)) * page;
        let last = runs.len() - 1;
        runs.iter()
            .enumerate()
            .map(|(i, r)| {
                let bytes = if i == 0 {
                    self.record_bytes(key_len) - total_raw + u64::from(r.count) * page
                } else if i == last {
                    (RECORD_HEADER + CONTINUED_PAYLOAD) as u64
                        + u64::from(pages_per_segment - r.first) * page
                } else {
                    (RECORD_HEADER + CONTINUED_PAYLOAD) as u64 + u64::from(r.count) * page
                };
                (r.log_seg, bytes)
            })
            .collect()
    }

    /// Bytes this value's record occupies in the log (header, key, payload, raw pages).
    pub fn record_bytes(&self, key_len: usize) -> u64 {
        if is_long_key(key_len) {
            return stored_record_bytes(key_len, self.len as usize);
        }
        match self.loc {
            ValueLoc::Inline { .. } => (RECORD_HEADER + key_len) as u64 + u64::from(self.len),
            ValueLoc::Raw { .. } => {
                (RECORD_HEADER + key_len + INDIRECT_PAYLOAD) as u64
                    + raw_pages(u64::from(self.len)) * PAGE_SIZE as u64
            }
        }
    }
}

/// Bytes a put of a `key_len`-byte key and a `value_len`-byte value occupies in the log
/// (packed in a page when it fits, else a header record plus raw pages): what it adds to
/// the live bytes of its segment.
pub fn stored_record_bytes(key_len: usize, value_len: usize) -> u64 {
    if is_long_key(key_len) {
        (RECORD_HEADER + LONG_PUT_PAYLOAD) as u64
            + (key_pages(key_len) + raw_pages(value_len as u64)) * PAGE_SIZE as u64
    } else if fits_inline(key_len, value_len) {
        (RECORD_HEADER + key_len + value_len) as u64
    } else {
        (RECORD_HEADER + key_len + INDIRECT_PAYLOAD) as u64
            + raw_pages(value_len as u64) * PAGE_SIZE as u64
    }
}

/// Bytes a delete of a `key_len`-byte key occupies in the log (garbage once flushed).
pub fn delete_record_bytes(key_len: usize) -> u64 {
    if is_long_key(key_len) {
        (RECORD_HEADER + LONG_DELETE_PAYLOAD) as u64 + key_pages(key_len) * PAGE_SIZE as u64
    } else {
        (RECORD_HEADER + key_len) as u64
    }
}

/// Bytes a retime of a `key_len`-byte key occupies in the log (garbage once flushed).
pub fn retime_record_bytes(key_len: usize) -> u64 {
    if is_long_key(key_len) {
        (RECORD_HEADER + LONG_RETIME_PAYLOAD) as u64 + key_pages(key_len) * PAGE_SIZE as u64
    } else {
        (RECORD_HEADER + key_len + RETIME_PAYLOAD) as u64
    }
}

/// The payload of a Retime record: the deadline, then the value's address.
pub fn retime_payload(deadline: Deadline, ptr: &ValuePtr) -> [u8; RETIME_PAYLOAD] {
    let mut p = [0u8; RETIME_PAYLOAD];
    p[..8].copy_from_slice(&deadline.map_or(0, NonZeroU64::get).to_le_bytes());
    let (loc, word) = match ptr.loc {
        ValueLoc::Inline { page, offset } => (page, u32::from(offset)),
        ValueLoc::Raw { page, crc } => (page | RAW_LOC, crc),
    };
    p[8..12].copy_from_slice(&ptr.log_seg.to_le_bytes());
    p[12..16].copy_from_slice(&loc.to_le_bytes());
    p[16..20].copy_from_slice(&ptr.len.to_le_bytes());
    p[20..24].copy_from_slice(&word.to_le_bytes());
    p
}

/// The deadline and the value's address a Retime payload at `at` holds.
fn parse_retime(p: &[u8], at: usize) -> Option<(Deadline, ValuePtr)> {
    let loc = u32_at(p, at + 12);
    let word = u32_at(p, at + 20);
    let page = loc & !RAW_LOC;
    let loc = if loc & RAW_LOC != 0 {
        ValueLoc::Raw { page, crc: word }
    } else {
        ValueLoc::Inline {
            page,
            offset: u16::try_from(word).ok()?,
        }
    };
    Some((
        NonZeroU64::new(u64_at(p, at)),
        ValuePtr {
            log_seg: u32_at(p, at + 8),
            loc,
            len: u32_at(p, at + 16),
        },
    ))
}

/// The payload of a LongRetime record: the key's first raw page, the key's crc32c, then a
/// Retime payload.
pub fn long_retime_payload(
    key_page: u32,
    key: &[u8],
    deadline: Deadline,
    ptr: &ValuePtr,
) -> [u8; LONG_RETIME_PAYLOAD] {
    let mut p = [0u8; LONG_RETIME_PAYLOAD];
    p[..4].copy_from_slice(&key_page.to_le_bytes());
    p[4..8].copy_from_slice(&crc32c::crc32c(key).to_le_bytes());
    p[8..].copy_from_slice(&retime_payload(deadline, ptr));
    p
}

/// Pages a raw value of `len` bytes takes.
pub fn raw_pages(len: u64) -> u64 {
    len.div_ceil(PAGE_SIZE as u64).max(1)
}

/// Bytes of a packed page that hold no record (its header and the free space after the
/// records), counted as garbage as soon as the page is written. `used` is where the records
/// end (the header's `used` field, [`PageInfo::used`], or the builder's length).
pub fn unused_bytes(used: usize) -> u64 {
    (PAGE_SIZE + PAGE_HEADER).saturating_sub(used.max(PAGE_HEADER)) as u64
}

/// True when a record of this key and value fits in a packed page.
pub fn fits_inline(key_len: usize, value_len: usize) -> bool {
    RECORD_HEADER + key_len + value_len <= PAGE_CAPACITY
}

/// A record read back from a packed page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// What it is.
    pub kind: RecordKind,
    /// Sequence number.
    pub seq: u64,
    /// The key.
    pub key: Vec<u8>,
    /// Value length.
    pub value_len: u32,
    /// Offset of the value in the page (Put) — or of the payload.
    pub payload_offset: u16,
    /// First raw page and crc of the value (Indirect, LongPut).
    pub raw: Option<(u32, u32)>,
    /// Where the key is (LongPut, LongDelete: `key` is then empty until read from there).
    pub long_key: Option<LongKey>,
    /// The head record's log segment and packed page (Continued).
    pub continues: Option<(u32, u32)>,
    /// The new deadline and the value it is for (Retime, LongRetime).
    pub retime: Option<(Deadline, ValuePtr)>,
    /// The deadline a put record carries ([`DEADLINE_FLAG`]).
    pub deadline: Deadline,
}

/// Builds a packed page in memory.
#[derive(Debug)]
pub struct PageBuilder {
    buf: Vec<u8>,
}

impl Clone for PageBuilder {
    /// A copy with a whole page's capacity, as [`PageBuilder::new`] gives: a derived clone
    /// would hold only the bytes so far, so the copy's next record would reallocate (the
    /// write path clones the shared open page for every group that joins it).
    fn clone(&self) -> Self {
        let mut buf = Vec::with_capacity(PAGE_SIZE.max(self.buf.len()));
        buf.extend_from_slice(&self.buf);
        PageBuilder { buf }
    }
}

impl Default for PageBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PageBuilder {
    /// An empty page.
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(PAGE_SIZE);
        buf.resize(PAGE_HEADER, 0);
        PageBuilder { buf }
    }

    /// True when no record was added.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == PAGE_HEADER
    }

    /// Bytes free for records.
    pub fn free(&self) -> usize {
        PAGE_SIZE - self.buf.len()
    }

    /// Bytes used by records.
    pub fn used_by_records(&self) -> usize {
        self.buf.len() - PAGE_HEADER
    }

    /// The page bytes so far (header not yet filled in).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Appends a record if it fits; returns the offset of its payload.
    pub fn add(
        &mut self,
        kind: RecordKind,
        seq: u64,
        key: &[u8],
        value_len: u32,
        payload: &[u8],
    ) -> Option<u16> {
        self.add_until(kind, seq, key, value_len, payload, None)
    }

    /// As [`PageBuilder::add`], for a put with `deadline` after its payload (see
    /// [`DEADLINE_FLAG`]; `None`: an ordinary record).
    pub fn add_until(
        &mut self,
        kind: RecordKind,
        seq: u64,
        key: &[u8],
        value_len: u32,
        payload: &[u8],
        deadline: Deadline,
    ) -> Option<u16> {
        if key.len() > usize::from(u16::MAX) {
            return None;
        }
        self.push_record(kind, seq, (key.len(), key), value_len, payload, deadline)
    }

    /// Appends a record: the header (`key_len` may run past 16 bits for a long record, whose
    /// key is not in the page: `key` is then empty), the key, the payload and the deadline;
    /// `None` (nothing appended) if it does not fit. Returns the offset of the payload.
    fn push_record(
        &mut self,
        kind: RecordKind,
        seq: u64,
        (key_len, key): (usize, &[u8]),
        value_len: u32,
        payload: &[u8],
        deadline: Deadline,
    ) -> Option<u16> {
        let (flag, suffix) = match deadline {
            Some(_) => (DEADLINE_FLAG, DEADLINE_SUFFIX),
            None => (0, 0),
        };
        if RECORD_HEADER + key.len() + payload.len() + suffix > self.free() {
            return None;
        }
        self.buf.push(kind.code() | flag);
        self.buf.push((key_len >> 16) as u8);
        self.buf
            .extend_from_slice(&((key_len & 0xffff) as u16).to_le_bytes());
        self.buf.extend_from_slice(&value_len.to_le_bytes());
        self.buf.extend_from_slice(&seq.to_le_bytes());
        self.buf.extend_from_slice(key);
        let at = self.buf.len() as u16;
        self.buf.extend_from_slice(payload);
        if let Some(d) = deadline {
            self.buf.extend_from_slice(&d.get().to_le_bytes());
        }
        Some(at)
    }

    /// Appends a long record (its key is in raw pages, not here) if it fits; returns the
    /// offset of its payload.
    pub fn add_long(
        &mut self,
        kind: RecordKind,
        seq: u64,
        key_len: usize,
        value_len: u32,
        payload: &[u8],
    ) -> Option<u16> {
        self.add_long_until(kind, seq, key_len, value_len, payload, None)
    }

    /// As [`PageBuilder::add_long`], for a put with `deadline` after its payload.
    pub fn add_long_until(
        &mut self,
        kind: RecordKind,
        seq: u64,
        key_len: usize,
        value_len: u32,
        payload: &[u8],
        deadline: Deadline,
    ) -> Option<u16> {
        if key_len > LONG_KEY_MAX {
            return None;
        }
        self.push_record(kind, seq, (key_len, &[]), value_len, payload, deadline)
    }

    /// Appends a Continued record naming the head record of a value that spans segments
    /// (its packed page `head_page` of log segment `head_log_seg`) if it fits; returns the
    /// offset of its payload.
    pub fn add_continued(
        &mut self,
        seq: u64,
        value_len: u32,
        head_log_seg: u32,
        head_page: u32,
    ) -> Option<u16> {
        let mut payload = [0u8; CONTINUED_PAYLOAD];
        payload[..4].copy_from_slice(&head_log_seg.to_le_bytes());
        payload[4..].copy_from_slice(&head_page.to_le_bytes());
        self.add(RecordKind::Continued, seq, &[], value_len, &payload)
    }

    /// Fills in the header and returns the finished 8 KiB page.
    pub fn seal(
        &self,
        log_seg: u32,
        page: u32,
        batch: u64,
        last_in_batch: bool,
        raw_after: u32,
    ) -> Vec<u8> {
        let mut p = vec![0; PAGE_SIZE];
        self.seal_into(&mut p, log_seg, page, batch, last_in_batch, raw_after);
        p
    }

    /// As [`PageBuilder::seal`], into `out` (whatever it held is overwritten: records, zero
    /// padding, header), so the engine seals straight into the device's page buffer
    /// without an allocation and a copy of its own.
    ///
    /// # Panics
    /// When `out` is not [`PAGE_SIZE`] bytes long (a caller's bug: the engine passes whole
    /// page buffers).
    pub fn seal_into(
        &self,
        out: &mut [u8],
        log_seg: u32,
        page: u32,
        batch: u64,
        last_in_batch: bool,
        raw_after: u32,
    ) {
        assert_eq!(out.len(), PAGE_SIZE, "a page buffer is {PAGE_SIZE} bytes");
        let used = self.buf.len();
        out[..used].copy_from_slice(&self.buf);
        out[used..].fill(0);
        out[4..6].copy_from_slice(&MAGIC.to_le_bytes());
        out[6..8].copy_from_slice(&(used as u16).to_le_bytes());
        out[8..12].copy_from_slice(&log_seg.to_le_bytes());
        out[12..16].copy_from_slice(&page.to_le_bytes());
        out[16..24].copy_from_slice(&batch.to_le_bytes());
        out[24] = if last_in_batch { FLAG_LAST_IN_BATCH } else { 0 };
        out[25..28].fill(0);
        out[28..32].copy_from_slice(&raw_after.to_le_bytes());
        let crc = crc32c::crc32c(&out[4..]);
        out[0..4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Empties the page for reuse, keeping its buffer.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.buf.resize(PAGE_HEADER, 0);
    }
}

/// Header fields of a packed page that passed its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageInfo {
    /// Write batch the page belongs to.
    pub batch: u64,
    /// Last page of its batch.
    pub last_in_batch: bool,
    /// Raw pages following this one.
    pub raw_after: u32,
    /// End of the records.
    pub used: u16,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

/// A sealed packed page's used length (header and records; the rest is padding) and the
/// number of raw pages that follow it, read from its header without checking the checksum
/// (for pages the engine itself built); `None` when `p` is not a packed page's header.
pub fn packed_shape(p: &[u8]) -> Option<(usize, u32)> {
    if p.len() < PAGE_HEADER || u16_at(p, 4) != MAGIC {
        return None;
    }
    let used = usize::from(u16_at(p, 6));
    (PAGE_HEADER..=PAGE_SIZE)
        .contains(&used)
        .then(|| (used, u32_at(p, 28)))
}

/// Checks a packed page's checksum and identity (it must be page `page` of log segment
/// `log_seg`, so a stale page of a reused segment is never taken for a current one).
///
/// # Errors
/// A description of what is wrong.
pub fn check_page(p: &[u8], log_seg: u32, page: u32) -> Result<PageInfo, String> {
    if p.len() != PAGE_SIZE {
        return Err(format!("page of {} bytes", p.len()));
    }
    if crc32c::crc32c(&p[4..]) != u32_at(p, 0) {
        return Err("page checksum mismatch".into());
    }
    if u16_at(p, 4) != MAGIC {
        return Err("not a value-log page".into());
    }
    if u32_at(p, 8) != log_seg || u32_at(p, 12) != page {
        return Err(format!(
            "page belongs to log segment {} page {}, expected {log_seg}/{page}",
            u32_at(p, 8),
            u32_at(p, 12)
        ));
    }
    let used = u16_at(p, 6);
    if usize::from(used) < PAGE_HEADER || usize::from(used) > PAGE_SIZE {
        return Err("bad used length".into());
    }
    Ok(PageInfo {
        batch: u64_at(p, 16),
        last_in_batch: p[24] & FLAG_LAST_IN_BATCH != 0,
        raw_after: u32_at(p, 28),
        used,
    })
}

/// Parses the records of a page that passed [`check_page`].
///
/// # Errors
/// A description of a malformed record.
pub fn parse_records(p: &[u8], info: &PageInfo) -> Result<Vec<Record>, String> {
    let end = usize::from(info.used);
    let mut at = PAGE_HEADER;
    let mut out = Vec::new();
    while at < end {
        if at + RECORD_HEADER > end {
            return Err("truncated record header".into());
        }
        let flagged = p[at] & DEADLINE_FLAG != 0;
        let kind = RecordKind::from_code(p[at] & !DEADLINE_FLAG).ok_or("unknown record kind")?;
        if flagged
            && !matches!(
                kind,
                RecordKind::Put | RecordKind::Indirect | RecordKind::LongPut
            )
        {
            return Err("a deadline on a record that is not a put".into());
        }
        let suffix = if flagged { DEADLINE_SUFFIX } else { 0 };
        let long = matches!(
            kind,
            RecordKind::LongPut | RecordKind::LongDelete | RecordKind::LongRetime
        );
        let key_len = usize::from(u16_at(p, at + 2)) | usize::from(p[at + 1]) << 16;
        let value_len = u32_at(p, at + 4);
        let seq = u64_at(p, at + 8);
        let key_start = at + RECORD_HEADER;
        let payload = if long { key_start } else { key_start + key_len };
        let payload_len = match kind {
            RecordKind::Put => value_len as usize,
            RecordKind::Indirect => INDIRECT_PAYLOAD,
            RecordKind::Delete => 0,
            RecordKind::LongPut => LONG_PUT_PAYLOAD,
            RecordKind::LongDelete => LONG_DELETE_PAYLOAD,
            RecordKind::Continued => CONTINUED_PAYLOAD,
            RecordKind::Retime => RETIME_PAYLOAD,
            RecordKind::LongRetime => LONG_RETIME_PAYLOAD,
        };
        if kind == RecordKind::Continued && key_len != 0 {
            return Err("continuation record with a key".into());
        }
        if payload + payload_len + suffix > end {
            return Err("record runs past the page".into());
        }
        let long_key = long.then(|| LongKey {
            first_page: u32_at(p, payload),
            len: key_len as u32,
            crc: u32_at(p, payload + 4),
        });
        let raw = match (kind, long_key) {
            (RecordKind::Indirect, _) => Some((u32_at(p, payload), u32_at(p, payload + 4))),
            (RecordKind::LongPut, Some(k)) => Some((
                k.first_page.saturating_add(k.pages()),
                u32_at(p, payload + 8),
            )),
            _ => None,
        };
        out.push(Record {
            kind,
            seq,
            key: if long {
                Vec::new()
            } else {
                p[key_start..payload].to_vec()
            },
            value_len,
            payload_offset: payload as u16,
            raw,
            long_key,
            continues: (kind == RecordKind::Continued)
                .then(|| (u32_at(p, payload), u32_at(p, payload + 4))),
            retime: match kind {
                RecordKind::Retime => {
                    Some(parse_retime(p, payload).ok_or("retime record with a bad address")?)
                }
                RecordKind::LongRetime => {
                    Some(parse_retime(p, payload + 8).ok_or("retime record with a bad address")?)
                }
                _ => None,
            },
            deadline: if flagged {
                NonZeroU64::new(u64_at(p, payload + payload_len))
            } else {
                None
            },
        });
        at = payload + payload_len + suffix;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clone is the same page so far, and takes records up to a whole page without
    /// growing its buffer (the write path clones the open page for each group joining it).
    #[test]
    fn a_cloned_page_keeps_its_bytes_and_a_whole_page_of_room() {
        let mut b = PageBuilder::new();
        b.add(RecordKind::Put, 1, b"k", 3, b"abc").expect("fits");
        let mut c = b.clone();
        assert_eq!((c.bytes(), c.free()), (b.bytes(), b.free()));
        let room = c.buf.capacity();
        assert!(room >= PAGE_SIZE, "{room}");
        while c.add(RecordKind::Put, 2, b"key", 100, &[7; 100]).is_some() {}
        assert_eq!(c.buf.capacity(), room, "no reallocation up to a full page");
        assert_eq!(
            b.bytes().len(),
            PAGE_HEADER + RECORD_HEADER + 1 + 3,
            "the original unchanged"
        );
    }

    /// A put's deadline rides after its payload, flagged in the kind byte; the records after
    /// it parse as before, and a flag on a record that is not a put is refused.
    #[test]
    fn a_put_carries_its_deadline_after_its_payload() {
        let d = NonZeroU64::new(1_700_000_000_000);
        let mut b = PageBuilder::new();
        let off = b
            .add_until(RecordKind::Put, 1, b"k", 3, b"abc", d)
            .expect("fits");
        b.add(RecordKind::Delete, 2, b"j", 0, &[]).expect("fits");
        let page = b.seal(0, 0, 1, true, 0);
        let info = check_page(&page, 0, 0).expect("valid");
        let recs = parse_records(&page, &info).expect("parse");
        assert_eq!((recs[0].deadline, recs[0].payload_offset), (d, off));
        assert_eq!(&page[usize::from(off)..usize::from(off) + 3], b"abc");
        assert_eq!((recs[1].kind, recs[1].deadline), (RecordKind::Delete, None));
        let mut bad = PageBuilder::new();
        bad.add(RecordKind::Delete, 3, b"j", 0, &[0; DEADLINE_SUFFIX])
            .expect("fits");
        let mut page = bad.seal(0, 0, 1, true, 0);
        page[PAGE_HEADER] |= DEADLINE_FLAG;
        let crc = crc32c::crc32c(&page[4..]);
        page[0..4].copy_from_slice(&crc.to_le_bytes());
        let info = check_page(&page, 0, 0).expect("valid");
        assert!(parse_records(&page, &info).is_err());
    }

    #[test]
    fn page_round_trip() {
        let mut b = PageBuilder::new();
        let off = b.add(RecordKind::Put, 7, b"k1", 3, b"abc").expect("fits");
        b.add(RecordKind::Delete, 8, b"k2", 0, &[]).expect("fits");
        let mut raw = Vec::new();
        raw.extend_from_slice(&5u32.to_le_bytes());
        raw.extend_from_slice(&0xdead_beefu32.to_le_bytes());
        b.add(RecordKind::Indirect, 9, b"k3", 9000, &raw)
            .expect("fits");
        let page = b.seal(3, 4, 11, true, 2);
        let info = check_page(&page, 3, 4).expect("valid");
        assert_eq!(info.batch, 11);
        assert!(info.last_in_batch);
        assert_eq!(info.raw_after, 2);
        let recs = parse_records(&page, &info).expect("parse");
        assert_eq!(recs.len(), 3);
        assert_eq!(&page[usize::from(off)..usize::from(off) + 3], b"abc");
        assert_eq!(recs[0].key, b"k1");
        assert_eq!(recs[1].kind, RecordKind::Delete);
        assert_eq!(recs[2].raw, Some((5, 0xdead_beef)));
        assert_eq!(recs[2].value_len, 9000);
        // Every byte of the page is either a record's or unused (garbage from the start),
        // whether counted from the builder or from the page read back.
        let records: u64 = [(2, 3), (2, 0), (2, INDIRECT_PAYLOAD)]
            .iter()
            .map(|(k, p)| (RECORD_HEADER + k + p) as u64)
            .sum();
        assert_eq!(unused_bytes(b.bytes().len()), PAGE_SIZE as u64 - records);
        assert_eq!(
            unused_bytes(usize::from(info.used)),
            PAGE_SIZE as u64 - records
        );
        assert_eq!(
            unused_bytes(PageBuilder::new().bytes().len()),
            PAGE_SIZE as u64
        );
    }

    #[test]
    fn long_records_round_trip() {
        let key: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
        let kcrc = crc32c::crc32c(&key);
        let mut b = PageBuilder::new();
        let mut payload = Vec::new();
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.extend_from_slice(&kcrc.to_le_bytes());
        payload.extend_from_slice(&0x1234u32.to_le_bytes());
        b.add_long(RecordKind::LongPut, 5, key.len(), 100, &payload)
            .expect("fits");
        b.add_long(RecordKind::LongDelete, 6, 70_000, 0, &payload[..8])
            .expect("fits");
        b.add(RecordKind::Put, 7, b"short", 1, b"x").expect("fits");
        let page = b.seal(1, 0, 1, true, 4);
        let info = check_page(&page, 1, 0).expect("valid");
        let recs = parse_records(&page, &info).expect("parse");
        assert_eq!(recs.len(), 3);
        let lk = recs[0].long_key.expect("long key");
        assert_eq!((lk.first_page, lk.len, lk.crc), (1, 20_000, kcrc));
        assert_eq!(lk.pages(), 3);
        assert_eq!(recs[0].raw, Some((4, 0x1234)));
        assert!(recs[0].key.is_empty());
        assert_eq!(recs[1].kind, RecordKind::LongDelete);
        assert_eq!(recs[1].long_key.map(|k| k.len), Some(70_000));
        assert_eq!(recs[2].key, b"short");
        // The key is cut from its pages and checked.
        let pages: Vec<Vec<u8>> = key
            .chunks(PAGE_SIZE)
            .map(|c| {
                let mut p = c.to_vec();
                p.resize(PAGE_SIZE, 0);
                p
            })
            .collect();
        assert_eq!(
            lk.assemble(pages.iter().map(Vec::as_slice)),
            Some(key.clone())
        );
        let mut bad = pages.clone();
        bad[2][5] ^= 1;
        assert_eq!(lk.assemble(bad.iter().map(Vec::as_slice)), None);
        assert_eq!(lk.assemble(pages[..2].iter().map(Vec::as_slice)), None);
        assert_eq!(
            stored_record_bytes(20_000, 100),
            (RECORD_HEADER + LONG_PUT_PAYLOAD + 4 * PAGE_SIZE) as u64
        );
        assert_eq!(delete_record_bytes(5), (RECORD_HEADER + 5) as u64);
    }

    #[test]
    fn damaged_or_misplaced_pages_are_refused() {
        let mut b = PageBuilder::new();
        b.add(RecordKind::Put, 1, b"k", 1, b"v").expect("fits");
        let mut page = b.seal(1, 2, 3, false, 0);
        assert!(check_page(&page, 1, 3).is_err(), "wrong page number");
        assert!(check_page(&page, 2, 2).is_err(), "wrong log segment");
        page[100] ^= 1;
        assert!(check_page(&page, 1, 2).is_err(), "bit flip");
        assert!(check_page(&[0u8; PAGE_SIZE], 0, 0).is_err(), "erased");
    }

    #[test]
    fn a_full_page_refuses_more() {
        let mut b = PageBuilder::new();
        let v = vec![1u8; PAGE_CAPACITY - RECORD_HEADER - 1];
        assert!(fits_inline(1, v.len()));
        assert!(b
            .add(RecordKind::Put, 1, b"k", v.len() as u32, &v)
            .is_some());
        assert_eq!(b.free(), 0);
        assert!(b.add(RecordKind::Delete, 2, b"k", 0, &[]).is_none());
        assert!(!fits_inline(2, v.len()));
    }
}
