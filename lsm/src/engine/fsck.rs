//! The offline check ([`Engine::fsck`], `lightstore fsck`): owns the report, its findings,
//! and the walk over a store opened read-only.
//!
//! The store is opened as a read-only recovery would open it (the manifest, every keytable
//! run decoded and checked, the tail replayed into the memtable, the log sealed where it
//! ends, all in memory: nothing is written, trimmed or formatted; the device should be opened
//! with `Ftl::open_read_only`, which refuses writes and never writes its own tables).
//! What recovery finds wrong is recorded instead of failing the open, then the walk checks:
//!
//! - **segments**: no device segment has two owners (manifest, a log segment, keytables);
//!   every run's pages lie in a keytable
//!   segment below its write pointer and no two runs share a page; segments the free list
//!   has are referenced by nothing; segments neither free nor referenced are listed (a
//!   writable open trims them);
//! - **keytables**: every page's checksum and identity, key order within a run, and that
//!   every level below L0 is partitioned (in `load_runs`, `levels::check_partitioned`);
//! - **live pointers**: for every key's newest version (memtable, then runs newest first),
//!   the log segment exists, the pages lie below where the segment ends, and the value reads
//!   back: an inline value's packed page passes its checksum and holds a record of that key
//!   at that offset with that length; a raw value's pages match the crc in the pointer; a
//!   value held in its entry (a small value's DRAM copy, from the keytable page or the
//!   replayed record) equals its record's bytes (raw: matches the pointer's crc);
//! - **value-log pages**: every packed page of every log segment (checksum, identity,
//!   records), skipping the raw pages each announces; pages never written (a failed batch's)
//!   and the raw pages after them are passed over as garbage collection passes them;
//! - **garbage counts**: per log segment, `written - dead` against the live bytes the
//!   pointers give (plus the versions in runs that only the memtable shadows, whose garbage
//!   is counted when the memtable is flushed).
//!
//! Not checked: values that no live key points to (dead versions; a raw value's pages are
//! verified only through a live pointer's crc), the device's own tables beyond what opening
//! them checks, and the bloom filters (rebuilt from the keys at open).

use std::fmt;

use super::levels;
use super::recovery::{read_pages_patiently, ReadAhead, TailRead};
use super::*;
use crate::merge::{run_source, LevelCursor, Merge, Source};

/// Live values whose pointers are checked together.
const VALUE_BATCH: usize = 4096;

/// Pages of live values read together (8 KiB each) by the pointer check.
const PAGES_READ_TOGETHER: usize = 256;

/// What kind of problem a [`Finding`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FindingKind {
    /// A page or a value fails its checksum, or cannot be read.
    Checksum,
    /// A live key's value pointer leads nowhere valid: its log segment is not in the log,
    /// its pages lie past where the segment ends, or the record there is not its value.
    Dangling,
    /// A log segment's stored garbage count disagrees with what its live pointers give.
    CountMismatch,
    /// The value log is damaged where a cut could not have torn it: a writable open refuses
    /// the store ([`EngineError::LogDamaged`]).
    LogDamage,
    /// Metadata that contradicts itself or the device (segments with two owners, runs out of
    /// place, levels not partitioned, counters behind what they number).
    Structure,
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FindingKind::Checksum => "checksum",
            FindingKind::Dangling => "dangling pointer",
            FindingKind::CountMismatch => "count mismatch",
            FindingKind::LogDamage => "log damage",
            FindingKind::Structure => "structure",
        })
    }
}

/// One problem [`Engine::fsck`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What kind of problem.
    pub kind: FindingKind,
    /// Where and what, in words.
    pub what: String,
}

impl Finding {
    pub(super) fn new(kind: FindingKind, what: impl Into<String>) -> Self {
        Finding {
            kind,
            what: what.into(),
        }
    }

    /// A keytable run that cannot be read or decoded.
    pub(super) fn keytable(meta: &RunMeta, e: EngineError) -> Self {
        let what = e.to_string();
        let kind = if what.contains("checksum") || matches!(e, EngineError::Device(_)) {
            FindingKind::Checksum
        } else {
            FindingKind::Structure
        };
        Finding::new(
            kind,
            format!(
                "keytable run {} (level {}, pages {:?}): {what}",
                meta.id, meta.level, meta.extents
            ),
        )
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.kind, self.what)
    }
}

/// What [`Engine::fsck`] checked and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Keys whose newest version is a value.
    pub live_keys: u64,
    /// Keys whose newest version is a delete.
    pub tombstones: u64,
    /// Keys in the memtable after the replay of the tail.
    pub memtable_keys: u64,
    /// Records the replay of the tail applied.
    pub replayed_records: u64,
    /// Keytable runs per level, L0 first.
    pub runs_per_level: Vec<usize>,
    /// Entries in the keytable runs (every version, shadowed ones too).
    pub keytable_entries: u64,
    /// Keytable pages decoded.
    pub keytable_pages: u64,
    /// Value-log segments.
    pub log_segments: u64,
    /// Device segments holding keytable pages.
    pub keytable_segments: u64,
    /// Free device segments.
    pub free_segments: u64,
    /// Device segments neither free nor referenced (left by a cut; a writable open trims
    /// them). Not a problem.
    pub unreferenced_segments: Vec<u32>,
    /// Device segments of log segments a writable open would release (empty, or past where
    /// the log ends after a cut). Not a problem.
    pub released_segments: Vec<u32>,
    /// Packed value-log pages checked.
    pub packed_pages: u64,
    /// Raw value-log pages the packed pages announce (checked through live pointers).
    pub raw_pages: u64,
    /// Value-log pages never written (claimed by a batch that failed).
    pub unwritten_pages: u64,
    /// Log segments none of whose pages were written (all claimed by batches that failed):
    /// free on the device, kept in the log until garbage collection takes them. Not a
    /// problem.
    pub unwritten_log_segments: Vec<u32>,
    /// Live values read back and verified.
    pub values_checked: u64,
    /// Their bytes.
    pub value_bytes_checked: u64,
    /// Problems, in the order found.
    pub findings: Vec<Finding>,
}

impl FsckReport {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    /// Findings of one kind.
    pub fn count(&self, kind: FindingKind) -> usize {
        self.findings.iter().filter(|f| f.kind == kind).count()
    }
}

impl fmt::Display for FsckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "keys: {} live, {} deleted ({} in the memtable after replaying {} records)",
            self.live_keys, self.tombstones, self.memtable_keys, self.replayed_records
        )?;
        writeln!(
            f,
            "keytables: runs per level {:?}, {} entries, {} pages",
            self.runs_per_level, self.keytable_entries, self.keytable_pages
        )?;
        writeln!(
            f,
            "value log: {} segments, {} packed pages, {} raw pages, {} pages never written; \
             {} live values read back ({} bytes)",
            self.log_segments,
            self.packed_pages,
            self.raw_pages,
            self.unwritten_pages,
            self.values_checked,
            self.value_bytes_checked
        )?;
        writeln!(
            f,
            "segments: {} log ({} never written: {:?}), {} keytable, {} free, {} unreferenced \
             {:?} (an open trims them), {} the replay releases {:?}",
            self.log_segments,
            self.unwritten_log_segments.len(),
            self.unwritten_log_segments,
            self.keytable_segments,
            self.free_segments,
            self.unreferenced_segments.len(),
            self.unreferenced_segments,
            self.released_segments.len(),
            self.released_segments
        )?;
        writeln!(
            f,
            "checksum failures: {}, dangling pointers: {}, count mismatches: {}, log damage: {}, \
             structure: {}",
            self.count(FindingKind::Checksum),
            self.count(FindingKind::Dangling),
            self.count(FindingKind::CountMismatch),
            self.count(FindingKind::LogDamage),
            self.count(FindingKind::Structure)
        )?;
        for finding in &self.findings {
            writeln!(f, "  {finding}")?;
        }
        if self.is_clean() {
            write!(f, "fsck: clean")
        } else {
            write!(f, "fsck: {} problem(s)", self.findings.len())
        }
    }
}

/// A live inline value to find in its packed page: key, offset in the page, length, and the
/// copy its entry holds (if any), which must equal the record's bytes.
type InlineValue = (Vec<u8>, u16, u32, Option<Bytes>);

/// A live value whose pointer is checked: key, pointer, and the copy its entry holds.
type LiveValue = (Vec<u8>, ValuePtr, Option<Bytes>);

/// A page as the check read it.
/// A page as fsck read it (the tail replay's patient read, without a check).
type PageRead = TailRead;

/// A key for a message: printable, and short.
fn show(key: &[u8]) -> String {
    const MAX: usize = 48;
    let s = String::from_utf8_lossy(&key[..key.len().min(MAX)]).into_owned();
    if key.len() > MAX {
        format!("{s:?}... ({} bytes)", key.len())
    } else {
        format!("{s:?}")
    }
}

impl Engine {
    /// Checks the store on `dev` offline and reports what is wrong (see the module
    /// `engine/fsck.rs` for what is checked). The store is opened read-only
    /// ([`EngineConfig::read_only_recovery`] is forced): nothing is written, trimmed or
    /// formatted by the engine. Open the device with `hwftl_sim::Ftl::open_read_only` so the
    /// device does not write its own tables either (and a running drive's lock is honoured).
    ///
    /// # Errors
    /// When the store cannot be opened at all (no usable manifest, an unusable geometry) or
    /// the device fails a command other than a page read (a read that fails is a finding).
    pub fn fsck(dev: Arc<dyn AppendDevice>, mut cfg: EngineConfig) -> Result<FsckReport> {
        cfg.read_only_recovery = true;
        let db = Engine::open_mode(dev, cfg, true)?;
        let report = db.core.inner.lock().fsck_walk();
        db.close()?;
        report
    }
}

impl Inner {
    /// The walk of a store opened for fsck (read-only, recovered).
    fn fsck_walk(&mut self) -> Result<FsckReport> {
        let mut r = FsckReport {
            findings: self.fsck.take().unwrap_or_default(),
            replayed_records: self.stats.replayed_records,
            memtable_keys: self.mem.len() as u64,
            released_segments: self.released_read_only.clone(),
            ..FsckReport::default()
        };
        self.fsck_segments(&mut r)?;
        r.runs_per_level = self.levels.iter().map(Vec::len).collect();
        r.keytable_entries = self.levels.iter().flatten().map(|t| t.len() as u64).sum();
        r.keytable_pages = self
            .runs
            .values()
            .flat_map(|m| m.extents.iter().map(|e| u64::from(e.1)))
            .sum();
        let live = self.fsck_live(&mut r)?;
        let pending = self.fsck_memtable_shadowed();
        let metas: Vec<LogSegMeta> = self.log_segs.values().cloned().collect();
        for m in &metas {
            let wp = self.dev.segment_info(SegmentId(m.segment))?.write_pointer;
            self.fsck_log_segment(m, wp, &mut r)?;
        }
        self.fsck_counts(&live, &pending, &mut r);
        Ok(r)
    }

    /// Owners of device segments, the runs' pages, the free list, counters.
    fn fsck_segments(&self, r: &mut FsckReport) -> Result<()> {
        let mut owner: BTreeMap<u32, String> = BTreeMap::new();
        let mut claim = |r: &mut FsckReport, s: u32, who: String| {
            if let Some(prev) = owner.insert(s, who.clone()) {
                r.findings.push(Finding::new(
                    FindingKind::Structure,
                    format!("device segment {s} belongs to both {prev} and {who}"),
                ));
            }
        };
        for s in MANIFEST_SEGMENTS {
            claim(r, s, "the manifest".into());
        }
        for m in self.log_segs.values() {
            claim(r, m.segment, format!("log segment {}", m.log_seg));
        }
        for &s in &self.kt_segments {
            claim(r, s, "the keytables".into());
        }
        let kt: BTreeSet<u32> = self.kt_segments.iter().copied().collect();
        let mut extents: Vec<(u64, u64, u64)> = Vec::new();
        for meta in self.runs.values() {
            for &(first, n) in &meta.extents {
                let last = first + u64::from(n);
                extents.push((first, last, meta.id));
                // An extent may run on into the next device segment: each page is checked.
                let mut bad = None;
                for lba in first..last {
                    bad = match self.g.locate(Lba(lba)) {
                        Ok((seg, off)) if kt.contains(&seg.0) => {
                            let wp = self.dev.segment_info(seg)?.write_pointer;
                            (off >= wp).then(|| {
                                format!(
                                    "past the write pointer {wp} of device segment {} (LBA {lba})",
                                    seg.0
                                )
                            })
                        }
                        Ok((seg, _)) => Some(format!(
                            "in device segment {}, which is not a keytable segment (LBA {lba})",
                            seg.0
                        )),
                        Err(e) => Some(e.to_string()),
                    };
                    if bad.is_some() {
                        break;
                    }
                }
                if let Some(why) = bad {
                    r.findings.push(Finding::new(
                        FindingKind::Structure,
                        format!("keytable run {}: pages {first}+{n} lie {why}", meta.id),
                    ));
                }
            }
            if meta.id >= self.next_run {
                r.findings.push(Finding::new(
                    FindingKind::Structure,
                    format!(
                        "keytable run {} is numbered at or past the next run id {}",
                        meta.id, self.next_run
                    ),
                ));
            }
        }
        extents.sort_unstable();
        for w in extents.windows(2) {
            if w[1].0 < w[0].1 {
                r.findings.push(Finding::new(
                    FindingKind::Structure,
                    format!("keytable runs {} and {} share pages", w[0].2, w[1].2),
                ));
            }
        }
        for m in self.log_segs.values() {
            let info = self.dev.segment_info(SegmentId(m.segment))?;
            if info.state == SegmentState::Free {
                // Every page of it was claimed by batches that failed before writing (a live
                // pointer into it is reported by the pointer check); garbage collection reads
                // it as holding nothing and trims it.
                r.unwritten_log_segments.push(m.log_seg);
            }
            if m.log_seg >= self.next_log_seg {
                r.findings.push(Finding::new(
                    FindingKind::Structure,
                    format!(
                        "log segment {} is numbered at or past the next log segment number {}",
                        m.log_seg, self.next_log_seg
                    ),
                ));
            }
        }
        for s in 0..self.g.segments() {
            if self.free.contains(&s) {
                if let Some(who) = owner.get(&s) {
                    r.findings.push(Finding::new(
                        FindingKind::Structure,
                        format!("device segment {s} is on the free list and belongs to {who}"),
                    ));
                }
            } else if !owner.contains_key(&s)
                && !self.released_read_only.contains(&s)
                && self.dev.segment_info(SegmentId(s))?.state != SegmentState::Free
            {
                r.unreferenced_segments.push(s);
            }
        }
        r.free_segments = self.free.len() as u64;
        r.log_segments = self.log_segs.len() as u64;
        r.keytable_segments = self.kt_segments.len() as u64;
        Ok(())
    }

    /// Walks every key's newest version, verifies its value, and returns the live bytes per
    /// log segment the pointers give.
    fn fsck_live(&self, r: &mut FsckReport) -> Result<BTreeMap<u32, u64>> {
        let pps = self.g.pages_per_segment();
        let mem = self.mem.clone();
        let levels = self.levels.clone();
        let mut sources: Vec<Source<'_>> = Vec::new();
        sources.push(Box::new(mem.cursor()));
        if let Some(l0) = levels.first() {
            sources.extend(l0.iter().map(|run| run_source(run, 0)));
        }
        for level in levels.iter().skip(1) {
            sources.push(Box::new(LevelCursor::new(level, b"")));
        }
        let mut merge = Merge::new(sources);
        let mut live: BTreeMap<u32, u64> = BTreeMap::new();
        let mut batch: Vec<LiveValue> = Vec::new();
        while let Some((key, slot, held)) = merge.next_held() {
            match slot {
                Slot::Tombstone => r.tombstones += 1,
                Slot::Value(p, _) => {
                    r.live_keys += 1;
                    for (log_seg, bytes) in p.segment_shares(key.len(), pps) {
                        *live.entry(log_seg).or_default() += bytes;
                    }
                    batch.push((key.to_vec(), p, held));
                    if batch.len() >= VALUE_BATCH {
                        self.fsck_values(&mut batch, r)?;
                    }
                }
            }
        }
        self.fsck_values(&mut batch, r)?;
        Ok(live)
    }

    /// Garbage not yet counted: for each memtable key, the newest version in the runs (its
    /// garbage is counted when the memtable is flushed, as `build_flush_run` finds it).
    fn fsck_memtable_shadowed(&self) -> BTreeMap<u32, u64> {
        let pps = self.g.pages_per_segment();
        let mut pending: BTreeMap<u32, u64> = BTreeMap::new();
        let mut c = self.mem.cursor();
        while let Some((k, newest)) = c.current() {
            // (A retime shadows the value it points at too: that stays live.)
            if let Some(Slot::Value(old, _)) = levels::runs_for_key(&self.levels, k)
                .find_map(|run| run.get(k))
                .filter(|old| {
                    old.ptr()
                        .is_none_or(|p| !self.mem.keeps_value(k, &newest, &p))
                })
            {
                for (log_seg, bytes) in old.segment_shares(k.len(), pps) {
                    *pending.entry(log_seg).or_default() += bytes;
                }
            }
            c.advance();
        }
        pending
    }

    /// Where log segment `m` ends (pages that count).
    fn fsck_end(m: &LogSegMeta) -> u32 {
        m.sealed_end
            .unwrap_or((m.written / PAGE_SIZE as u64) as u32)
    }

    /// Verifies the values of `batch` (drained): pointers into the log, records, checksums.
    fn fsck_values(&self, batch: &mut Vec<LiveValue>, r: &mut FsckReport) -> Result<()> {
        let pps = self.g.pages_per_segment();
        // Inline values by their page, so each packed page is read once.
        let mut inline: BTreeMap<(u32, u32), Vec<InlineValue>> = BTreeMap::new();
        let mut raw: Vec<(Vec<u8>, ValuePtr)> = Vec::new();
        for (key, p, held) in batch.drain(..) {
            let mut dangling = None;
            for run in p.runs(pps) {
                match self.log_segs.get(&run.log_seg) {
                    None => {
                        dangling = Some(format!(
                            "its value is in log segment {}, which is not in the log",
                            run.log_seg
                        ));
                        break;
                    }
                    Some(m) => {
                        let end = Self::fsck_end(m);
                        if u64::from(run.first) + u64::from(run.count) > u64::from(end) {
                            dangling = Some(format!(
                                "its value's pages {}..{} of log segment {} lie past its end \
                                 (page {end})",
                                run.first,
                                u64::from(run.first) + u64::from(run.count),
                                run.log_seg
                            ));
                            break;
                        }
                    }
                }
            }
            if let Some(why) = dangling {
                r.findings.push(Finding::new(
                    FindingKind::Dangling,
                    format!("key {}: {why}", show(&key)),
                ));
                continue;
            }
            match p.loc {
                ValueLoc::Inline { page, offset } => inline
                    .entry((p.log_seg, page))
                    .or_default()
                    .push((key, offset, p.len, held)),
                ValueLoc::Raw { crc, .. } => {
                    if let Some(h) = held.filter(|h| crc32c::crc32c(h) != crc) {
                        r.findings.push(Finding::new(
                            FindingKind::Structure,
                            format!(
                                "key {}: the value its entry holds ({} bytes) does not match \
                                 its record's checksum",
                                show(&key),
                                h.len()
                            ),
                        ));
                    }
                    raw.push((key, p));
                }
            }
        }
        self.fsck_raw_values(&raw, r);
        // The packed pages in order, [`PAGES_READ_TOGETHER`] at a time with a window of reads
        // in flight (one page per device round trip made this check slow).
        let inline: Vec<_> = inline.into_iter().collect();
        let mut retries = 0;
        for chunk in inline.chunks(PAGES_READ_TOGETHER) {
            let mut lbas = Vec::with_capacity(chunk.len());
            for &((log_seg, page), _) in chunk {
                lbas.push(self.g.lba(SegmentId(self.segment_of(log_seg)?), page));
            }
            let reads = read_pages_patiently(&self.poller, &lbas, &mut retries)?;
            for (((log_seg, page), values), read) in chunk.iter().zip(reads) {
                self.fsck_inline_page((*log_seg, *page), values, read, r)?;
            }
        }
        Ok(())
    }

    /// Verifies raw values (their pages against the pointer's crc), about
    /// [`PAGES_READ_TOGETHER`] pages' worth at a time with a window of reads in flight; a
    /// group that fails is read again value by value, so each finding names its key.
    fn fsck_raw_values(&self, raw: &[(Vec<u8>, ValuePtr)], r: &mut FsckReport) {
        let pps = self.g.pages_per_segment();
        let mut rest = raw;
        while !rest.is_empty() {
            let mut pages = 0usize;
            let n = rest
                .iter()
                .take_while(|(_, p)| {
                    let fits = pages < PAGES_READ_TOGETHER;
                    pages += p
                        .runs(pps)
                        .iter()
                        .map(|run| run.count as usize)
                        .sum::<usize>();
                    fits
                })
                .count()
                .max(1);
            let (group, after) = rest.split_at(n);
            rest = after;
            let ptrs: Vec<Option<ValuePtr>> = group.iter().map(|(_, p)| Some(*p)).collect();
            if self.read_values(&ptrs).is_ok() {
                r.values_checked += group.len() as u64;
                r.value_bytes_checked += group.iter().map(|(_, p)| u64::from(p.len)).sum::<u64>();
                continue;
            }
            for (key, p) in group {
                match self.read_values(&[Some(*p)]) {
                    Ok(_) => {
                        r.values_checked += 1;
                        r.value_bytes_checked += u64::from(p.len);
                    }
                    Err(e) => r.findings.push(Finding::new(
                        FindingKind::Checksum,
                        format!(
                            "key {}: its value ({} bytes from page {} of log segment {}): {e}",
                            show(key),
                            p.len,
                            p.runs(pps).first().map_or(0, |run| run.first),
                            p.log_seg
                        ),
                    )),
                }
            }
        }
    }

    /// Checks that packed page `page` of log segment `log_seg` (as `read` returned it) holds
    /// the records `values` point to.
    fn fsck_inline_page(
        &self,
        (log_seg, page): (u32, u32),
        values: &[InlineValue],
        read: PageRead,
        r: &mut FsckReport,
    ) -> Result<()> {
        let segment = self.segment_of(log_seg)?;
        let buf = match read {
            PageRead::Page(b) => b,
            PageRead::Unwritten => {
                r.findings.push(Finding::new(
                    FindingKind::Dangling,
                    format!(
                        "page {page} of log segment {log_seg} was never written, and {} \
                         live values point into it (key {} first)",
                        values.len(),
                        show(&values[0].0)
                    ),
                ));
                return Ok(());
            }
            PageRead::Failed(why) => {
                r.findings.push(Finding::new(
                    FindingKind::Checksum,
                    format!(
                        "page {page} of log segment {log_seg} (device segment {segment}), \
                         holding {} live values (key {} first), cannot be read: {why}",
                        values.len(),
                        show(&values[0].0)
                    ),
                ));
                return Ok(());
            }
        };
        let records = check_page(&buf, log_seg, page).and_then(|info| parse_records(&buf, &info));
        let records = match records {
            Ok(recs) => recs,
            Err(e) => {
                r.findings.push(Finding::new(
                    FindingKind::Checksum,
                    format!(
                        "page {page} of log segment {log_seg} (device segment {segment}), \
                         holding {} live values (key {} first): {e}",
                        values.len(),
                        show(&values[0].0)
                    ),
                ));
                return Ok(());
            }
        };
        for (key, offset, len, held) in values {
            let found = records.iter().any(|rec| {
                matches!(rec.kind, RecordKind::Put)
                    && rec.payload_offset == *offset
                    && rec.value_len == *len
                    && rec.key == key.as_slice()
            });
            let at = usize::from(*offset);
            if let Some(h) = held {
                if found && buf.get(at..at + *len as usize) != Some(&h[..]) {
                    r.findings.push(Finding::new(
                        FindingKind::Structure,
                        format!(
                            "key {}: the value its entry holds differs from its record at \
                             offset {offset} of page {page} of log segment {log_seg}",
                            show(key)
                        ),
                    ));
                }
            }
            if found {
                r.values_checked += 1;
                r.value_bytes_checked += u64::from(*len);
            } else {
                r.findings.push(Finding::new(
                    FindingKind::Dangling,
                    format!(
                        "key {}: page {page} of log segment {log_seg} holds no record of it \
                         at offset {offset} ({len} bytes)",
                        show(key)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks every packed page of log segment `m` (device write pointer `wp`), as garbage
    /// collection walks a victim.
    fn fsck_log_segment(&self, m: &LogSegMeta, wp: u32, r: &mut FsckReport) -> Result<()> {
        let mut end = Self::fsck_end(m);
        if end > wp {
            // Pages a failed batch claimed at the end of the segment and never wrote (a live
            // pointer past the write pointer is reported by the pointer check).
            r.unwritten_pages += u64::from(end - wp);
            end = wp;
        }
        let seg = SegmentId(m.segment);
        // A packed page must stand here (the segment's first page, or right after a packed
        // page's raw pages); after a page never written, raw pages of that failed batch
        // cannot be told from a packed page, so a bad one is passed over.
        let mut in_sync = true;
        let mut page = 0u32;
        let mut ahead = ReadAhead::default();
        let mut retries = 0;
        while page < end {
            let read = ahead.read(
                &self.poller,
                &self.g,
                (seg, page, end),
                |_| Ok(()),
                &mut retries,
            )?;
            let buf = match read {
                PageRead::Page(b) => b,
                PageRead::Unwritten => {
                    r.unwritten_pages += 1;
                    in_sync = false;
                    page += 1;
                    continue;
                }
                PageRead::Failed(why) => {
                    if in_sync {
                        r.findings.push(Finding::new(
                            FindingKind::Checksum,
                            format!(
                                "log segment {} (device segment {}) page {page}: {why}",
                                m.log_seg, m.segment
                            ),
                        ));
                    }
                    in_sync = false;
                    page += 1;
                    continue;
                }
            };
            let checked = check_page(&buf, m.log_seg, page)
                .and_then(|info| parse_records(&buf, &info).map(|_| info));
            match checked {
                Ok(info) => {
                    in_sync = true;
                    r.packed_pages += 1;
                    let raw = info.raw_after.min(end - page - 1);
                    r.raw_pages += u64::from(raw);
                    page += 1 + raw;
                }
                Err(e) => {
                    if in_sync {
                        r.findings.push(Finding::new(
                            FindingKind::Checksum,
                            format!(
                                "log segment {} (device segment {}) page {page}, where a packed \
                                 page must be: {e}",
                                m.log_seg, m.segment
                            ),
                        ));
                    }
                    in_sync = false;
                    page += 1;
                }
            }
        }
        Ok(())
    }

    /// Compares each log segment's stored live bytes (`written - dead`) with the live bytes
    /// its pointers give plus the garbage only the memtable shadows (not yet counted).
    ///
    /// What a wrong count risks: garbage collection judges liveness by a lookup of each
    /// record it reads, never by the count, so no mismatch loses data. Counted live while it
    /// is garbage (stored above the pointers): the segment looks fuller than it is, garbage
    /// collection may never pick it (a space leak) and the user capacity check counts the
    /// garbage as live (`CapacityFull` early). Counted garbage while live (stored below): the
    /// user capacity check under-counts live data, so the drive can admit more than its
    /// capacity and reach `DeviceFull` with no garbage left to collect, and garbage collection
    /// picks the segment early and moves more than it expected.
    fn fsck_counts(
        &self,
        live: &BTreeMap<u32, u64>,
        pending: &BTreeMap<u32, u64>,
        r: &mut FsckReport,
    ) {
        for m in self.log_segs.values() {
            if m.dead > m.written {
                r.findings.push(Finding::new(
                    FindingKind::CountMismatch,
                    format!(
                        "log segment {}: {} bytes counted as garbage of {} written",
                        m.log_seg, m.dead, m.written
                    ),
                ));
                continue;
            }
            let stored = m.written - m.dead;
            let pointed = live.get(&m.log_seg).copied().unwrap_or(0);
            let shadowed = pending.get(&m.log_seg).copied().unwrap_or(0);
            let expected = pointed + shadowed;
            if stored == expected {
                continue;
            }
            let what = if stored > expected {
                format!(
                    "{} bytes of garbage are counted as live (a space leak: garbage \
                     collection ranks the segment fuller than it is, and the capacity check \
                     counts them)",
                    stored - expected
                )
            } else {
                format!(
                    "{} live bytes are counted as garbage (nothing is lost, garbage collection \
                     judges liveness by lookup, but the capacity check under-counts live data: \
                     the drive can admit more than its capacity and run out of segments)",
                    expected - stored
                )
            };
            r.findings.push(Finding::new(
                FindingKind::CountMismatch,
                format!(
                    "log segment {} (device segment {}): stored live bytes {stored} (written {}, \
                     dead {}), live pointers give {pointed} + {shadowed} shadowed only by the \
                     memtable: {what}",
                    m.log_seg, m.segment, m.written, m.dead
                ),
            ));
        }
    }
}
