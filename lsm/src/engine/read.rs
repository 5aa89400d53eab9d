//! The read path: keys to value pointers (memtable, then keytable runs newest first), then
//! the value pages, synchronously or through the poller.

use super::landing::Landing;
use super::version::ReadView;
use super::*;
use crate::epoch::ReadPin;
use crate::expiry::LazyClock;
use crate::keytable::KeyHash;
use crate::read::{Lookup, OnLookup, Probes};

mod pending;
mod queue;
pub use pending::{GetNow, LookupNow, PendingLookup, ReadWindowFull, ReservedRead};
pub use queue::ThreadReads;

/// The bounds of an [`Engine::range_async`]: `start <= key < end` (no `end`: to the last
/// key), at most `limit` pairs, and no more pairs once their values pass `max_bytes` (at
/// least one pair is returned when there is one), skipping keys `skip` rejects (judged in
/// the same instant as the keys are taken; skipped keys do not count).
pub struct RangeRead<'a> {
    /// First key (inclusive).
    pub start: &'a [u8],
    /// End key (exclusive); `None`: unbounded.
    pub end: Option<&'a [u8]>,
    /// Most pairs.
    pub limit: usize,
    /// Value bytes after which no further pair is taken.
    pub max_bytes: u64,
    /// Keys to leave out (e.g. expired ones), called under the engine lock: it must be quick
    /// and must not call into the engine.
    pub skip: Option<&'a KeyFilter<'a>>,
}

/// A predicate over keys (see [`RangeRead::skip`]).
pub type KeyFilter<'a> = dyn Fn(&[u8]) -> bool + Sync + 'a;

/// Page reads that resolve a list of value pointers.
pub(super) struct ReadPlan {
    ptrs: Vec<Option<ValuePtr>>,
    /// Per pointer: the value's copy held in DRAM, if resolved with one (read from nowhere).
    held: Vec<Option<Bytes>>,
    lbas: Vec<Lba>,
    /// The log address of each of `lbas` (the value cache's key).
    addrs: Vec<PageAddr>,
    /// A client read's value cache: pages are looked up in it before they go to the device,
    /// and pages read from the device enter it once verified (`fill`).
    cache: Option<Arc<ValueCache>>,
    /// Pages acknowledged but not yet on the device (see `landing`): looked up first.
    landing: Option<Arc<Landing>>,
    /// Per page: read from the device for this plan, so it enters the cache once verified.
    fill: Vec<bool>,
    /// Per pointer: first index into `lbas` and page count (pointers into one packed page
    /// may share its index).
    spans: Vec<Option<(usize, u32)>>,
}

/// Packed pages a plan looks back over for one it already reads (see [`RecentPages`]).
const RECENT_PAGES: usize = 8;

/// The last [`RECENT_PAGES`] distinct packed pages added to a plan, with their index in it:
/// a bounded look-back, so a plan of thousands of values (a range over a large hash) costs
/// no more per value than a short one, while the values of one record, asked in any order,
/// find their page.
#[derive(Default)]
struct RecentPages {
    pages: [Option<(PageAddr, usize)>; RECENT_PAGES],
    next: usize,
}

impl RecentPages {
    fn find(&self, addr: PageAddr) -> Option<usize> {
        self.pages
            .iter()
            .flatten()
            .find(|(a, _)| *a == addr)
            .map(|&(_, at)| at)
    }

    fn note(&mut self, addr: PageAddr, at: usize) {
        self.pages[self.next % RECENT_PAGES] = Some((addr, at));
        self.next = self.next.wrapping_add(1);
    }
}

/// Times an asynchronous read retries a submission the device refused as full.
pub(super) const QUEUE_FULL_RETRIES: u32 = 10_000;

/// Pause between those retries.
pub(super) const QUEUE_FULL_BACKOFF: std::time::Duration = std::time::Duration::from_micros(50);

/// The pages of one [`Engine::multi_get_async`] call as they arrive.
pub(super) struct AsyncRead {
    pages: Vec<Option<Result<Bytes>>>,
    remaining: usize,
    plan: Option<ReadPlan>,
    done: Option<OnValues>,
    /// Keeps the segments read from untrimmed until the last page is in.
    pin: Option<ReadPin>,
}

/// The poller callback for page `i` of an asynchronous read.
pub(super) fn page_done(
    i: usize,
    acc: Arc<Mutex<AsyncRead>>,
    window: Arc<ReadWindow>,
    copied: Arc<AtomicU64>,
    faults: Arc<ReadFaults>,
) -> crate::io::OnDone {
    Box::new(move |r: std::result::Result<Completion, DeviceError>| {
        let page = r
            .and_then(Completion::into_buf)
            .map_err(EngineError::from)
            .and_then(|b| {
                b.map(page_bytes)
                    .ok_or_else(|| corrupt("a read returned no buffer"))
            });
        finish_page(i, &acc, &window, (&copied, &faults), page);
    })
}

/// Records page `i`; the last page assembles the values and calls the caller back.
pub(super) fn finish_page(
    i: usize,
    acc: &Mutex<AsyncRead>,
    window: &ReadWindow,
    (copied, faults): (&AtomicU64, &ReadFaults),
    page: Result<Bytes>,
) {
    window.release_page();
    let (plan, done, pages, pin) = {
        let mut a = acc.lock();
        if let Some(slot) = a.pages.get_mut(i) {
            *slot = Some(page);
        }
        a.remaining = a.remaining.saturating_sub(1);
        if a.remaining > 0 {
            return;
        }
        let pages: Vec<Result<Bytes>> = a
            .pages
            .drain(..)
            .map(|p| p.unwrap_or_else(|| Err(corrupt("value page missing"))))
            .collect();
        (a.plan.take(), a.done.take(), pages, a.pin.take())
    };
    let result = match plan {
        Some(plan) => plan.assemble(&pages, copied, faults),
        None => Err(corrupt("read plan missing")),
    };
    // The values are slices of pages already read: the segments may go.
    drop(pages);
    drop(pin);
    if let Some(done) = done {
        done(result);
    }
}

impl ReadPlan {
    /// The pages that hold these values, but those whose copy `held` has (it may be shorter
    /// than `ptrs`: the rest have none); `segment_of` maps a log segment to its device
    /// segment.
    pub(super) fn new(
        ptrs: &[Option<ValuePtr>],
        held: Vec<Option<Bytes>>,
        g: Geometry,
        segment_of: impl Fn(u32) -> Result<u32>,
    ) -> Result<ReadPlan> {
        let mut plan = ReadPlan {
            ptrs: ptrs.to_vec(),
            held,
            lbas: Vec::new(),
            addrs: Vec::new(),
            cache: None,
            landing: None,
            fill: Vec::new(),
            spans: Vec::with_capacity(ptrs.len()),
        };
        // Small values often share a packed page: a range or sequential multi-get reads
        // neighbours, and a hash's fields were written in one batch. A page already in the
        // plan is read (and probed in DRAM) once, whatever the order the values are asked
        // in (HMGET names fields in the client's order, not the page's).
        let mut inline_pages = RecentPages::default();
        for (i, p) in ptrs.iter().enumerate() {
            let Some(p) = p else {
                plan.spans.push(None);
                continue;
            };
            if plan.held.get(i).is_some_and(Option::is_some) {
                plan.spans.push(None);
                continue;
            }
            if let ValueLoc::Inline { page, .. } = p.loc {
                let addr = PageAddr {
                    log_seg: p.log_seg,
                    page,
                };
                if let Some(at) = inline_pages.find(addr) {
                    plan.spans.push(Some((at, 1)));
                    continue;
                }
                inline_pages.note(addr, plan.lbas.len());
            }
            let at = plan.lbas.len();
            for run in p.runs(g.pages_per_segment()) {
                let seg = SegmentId(segment_of(run.log_seg)?);
                for pg in run.first..run.first + run.count {
                    plan.lbas.push(g.lba(seg, pg));
                    plan.addrs.push(PageAddr {
                        log_seg: run.log_seg,
                        page: pg,
                    });
                }
            }
            plan.spans.push(Some((at, (plan.lbas.len() - at) as u32)));
        }
        Ok(plan)
    }

    /// Serves the plan to a client read from DRAM where it can: the landing buffer (pages
    /// acknowledged but not yet on the device), then the value cache, which the pages read
    /// from the device then fill.
    pub(super) fn with_dram(
        mut self,
        cache: Option<Arc<ValueCache>>,
        landing: Option<Arc<Landing>>,
    ) -> ReadPlan {
        self.cache = cache;
        self.landing = landing;
        self
    }

    /// The page at `a` if DRAM holds it (the landing buffer, then the value cache), and
    /// whether the cache gave it; `counted`: a cache lookup counts its hit or miss.
    fn dram_page(&self, a: PageAddr, counted: bool) -> Option<(Bytes, bool)> {
        if let Some(page) = self.landing.as_ref().and_then(|l| l.get(a)) {
            return Some((page, false));
        }
        let cache = self.cache.as_ref()?;
        let page = if counted {
            cache.get(a)
        } else {
            cache.get_uncounted(a)
        };
        page.map(|p| (p, true))
    }

    /// The pages DRAM holds (`None` for the others, which are then marked to enter the
    /// value cache once read and verified). Without a cache or landing buffer every page
    /// is `None`.
    fn cached_pages(&mut self) -> Vec<Option<Bytes>> {
        if self.cache.is_none() && self.landing.is_none() {
            return vec![None; self.lbas.len()];
        }
        let hits: Vec<Option<Bytes>> = self
            .addrs
            .iter()
            .map(|&a| self.dram_page(a, true).map(|(p, _)| p))
            .collect();
        self.fill = hits.iter().map(Option::is_none).collect();
        hits
    }

    /// Every page of the plan from DRAM, or `None` when one is not there (or there is
    /// neither a cache nor a landing buffer and something must be read). Counted as cache
    /// hits only when all are there: a miss here is counted by the device read that follows.
    fn all_cached(&mut self) -> Option<Vec<Result<Bytes>>> {
        if self.lbas.is_empty() {
            return Some(Vec::new());
        }
        if self.cache.is_none() && self.landing.is_none() {
            return None;
        }
        let mut pages = Vec::with_capacity(self.addrs.len());
        let mut from_cache = 0;
        for &a in &self.addrs {
            let (page, cached) = self.dram_page(a, false)?;
            from_cache += u64::from(cached);
            pages.push(Ok(page));
        }
        if let Some(cache) = &self.cache {
            cache.count_hits(from_cache);
        }
        self.fill = vec![false; pages.len()];
        Some(pages)
    }

    /// Reads the pages (those the value cache does not hold) straight from the device,
    /// concurrently with other callers (no engine lock held).
    pub(super) fn fetch(&mut self, dev: &dyn AppendDevice) -> Vec<Result<Bytes>> {
        let cached = self.cached_pages();
        // All in DRAM: no call into the device at all (not even an empty one, which would
        // cost a doorbell that hands over pages other writers held back on purpose).
        if cached.iter().all(Option::is_some) {
            return cached.into_iter().flatten().map(Ok).collect();
        }
        let cmds: Vec<Command> = self
            .lbas
            .iter()
            .zip(&cached)
            .filter(|(_, hit)| hit.is_none())
            .map(|(&lba, _)| Command::Read {
                lba,
                buf: PageBuf::for_read(),
            })
            .collect();
        let mut read = dev.execute_many(cmds).into_iter().map(|r| {
            r.map_err(EngineError::from)?
                .into_buf()?
                .map(page_bytes)
                .ok_or_else(|| corrupt("a read returned no buffer"))
        });
        cached
            .into_iter()
            .map(|hit| match hit {
                Some(page) => Ok(page),
                None => read
                    .next()
                    .unwrap_or_else(|| Err(corrupt("a page read went missing"))),
            })
            .collect()
    }

    /// Records that page `i` passed its check, and puts it into the value cache if this plan
    /// read it from the device (`packed`: a packed page, which the cache may cut to its
    /// records; a raw value's page goes in whole).
    fn verified(&self, i: usize, page: &Bytes, packed: bool, verified: &mut [bool]) {
        if let Some(v) = verified.get_mut(i) {
            *v = true;
        }
        if let (Some(cache), Some(true)) = (&self.cache, self.fill.get(i)) {
            let kept = if packed {
                crate::cache::cut_to_records(page.clone())
            } else {
                page.clone()
            };
            cache.insert(self.addrs[i], kept);
        }
    }

    /// Checks the pages and cuts the values out of them: a value within one page is a slice
    /// of that page (no copy); a value spanning pages is joined into one buffer, and the
    /// bytes joined are added to `copied`. Each page is checked once per plan (a packed
    /// page's values share its check), and a page the value cache served is not checked
    /// again: it entered the cache verified, and DRAM is trusted as the keytables are.
    pub(super) fn assemble(
        &self,
        pages: &[Result<Bytes>],
        copied: &AtomicU64,
        faults: &ReadFaults,
    ) -> Result<Vec<Option<Bytes>>> {
        let page = |i: usize| -> Result<&Bytes> {
            match pages.get(i) {
                Some(Ok(p)) => Ok(p),
                Some(Err(e)) => {
                    faults.unreadable_pages.fetch_add(1, Ordering::Relaxed);
                    Err(corrupt(format!("value page unreadable: {e}")))
                }
                None => Err(corrupt("value page missing")),
            }
        };
        // Pages known good: those DRAM served (`fill` false), then those checked here.
        let dram = self.cache.is_some() || self.landing.is_some();
        let mut verified: Vec<bool> = (0..pages.len())
            .map(|i| dram && self.fill.get(i) == Some(&false))
            .collect();
        let mut out = Vec::with_capacity(self.ptrs.len());
        for (i, (p, span)) in self.ptrs.iter().zip(&self.spans).enumerate() {
            if let Some(Some(v)) = self.held.get(i) {
                // A copy of its own: a run's copy is a slice of the run's whole arena, which
                // a client's reply must not keep alive.
                out.push(Some(Bytes::copy_from_slice(v)));
                continue;
            }
            let (Some(p), Some((at, n))) = (p, span) else {
                out.push(None);
                continue;
            };
            let len = p.len as usize;
            let value = match p.loc {
                ValueLoc::Inline { page: pg, offset } => {
                    let buf = page(*at)?;
                    if verified.get(*at) != Some(&true) {
                        check_page(buf, p.log_seg, pg).map_err(|e| {
                            faults.checksum_failures.fetch_add(1, Ordering::Relaxed);
                            corrupt(format!("value page {pg} of log segment {}: {e}", p.log_seg))
                        })?;
                        self.verified(*at, buf, true, &mut verified);
                    }
                    let start = usize::from(offset);
                    if start + len > buf.len() {
                        return Err(corrupt("value runs past its page"));
                    }
                    buf.slice(start..start + len)
                }
                ValueLoc::Raw { page: pg, crc } => {
                    let v = if *n == 1 {
                        let buf = page(*at)?;
                        if len > buf.len() {
                            return Err(corrupt("value runs past its page"));
                        }
                        buf.slice(..len)
                    } else {
                        let mut v = BytesMut::with_capacity(*n as usize * PAGE_SIZE);
                        for i in *at..*at + *n as usize {
                            v.extend_from_slice(page(i)?);
                        }
                        v.truncate(len);
                        copied.fetch_add(len as u64, Ordering::Relaxed);
                        v.freeze()
                    };
                    let span = *at..*at + *n as usize;
                    if !span.clone().all(|i| verified.get(i) == Some(&true)) {
                        if crc32c::crc32c(&v) != crc {
                            faults.checksum_failures.fetch_add(1, Ordering::Relaxed);
                            return Err(corrupt(format!(
                                "value at page {pg} of log segment {} fails its checksum",
                                p.log_seg
                            )));
                        }
                        for i in span {
                            self.verified(i, page(i)?, false, &mut verified);
                        }
                    }
                    v
                }
            };
            out.push(Some(value));
        }
        Ok(out)
    }
}

/// The values a read resolved: a pointer per value (`None`: no such key), and, where the
/// value has a copy in DRAM (a small value held by its keytable entry or memtable version),
/// that copy, which the read then takes instead of the pages.
#[derive(Default)]
pub(super) struct Resolved {
    pub(super) ptrs: Vec<Option<ValuePtr>>,
    pub(super) held: Vec<Option<Bytes>>,
}

impl Resolved {
    /// Adds a value: a slot's pointer (none for a tombstone) and its copy.
    pub(super) fn push(&mut self, ptr: Option<ValuePtr>, held: Option<Bytes>) {
        self.ptrs.push(ptr);
        self.held.push(held.filter(|_| ptr.is_some()));
    }

    /// Adds a looked-up slot and its copy.
    pub(super) fn push_slot(&mut self, found: Option<(Slot, Option<Bytes>)>) {
        match found {
            Some((s, held)) => self.push(s.ptr(), held),
            None => self.push(None, None),
        }
    }
}

/// What a lookup resolved besides its value pointers: how many were asked for by key, the
/// probes' answers and the range's keys (their pointers follow the keys' in the plan).
#[derive(Default)]
pub(super) struct LookupShape {
    keys: usize,
    present: Vec<bool>,
    range_keys: Vec<Vec<u8>>,
}

impl LookupShape {
    /// The lookup's result from the values read, in pointer order.
    fn finish(self, mut values: Vec<Option<Bytes>>) -> Lookup {
        let in_range = values.split_off(self.keys.min(values.len()));
        Lookup {
            values,
            present: self.present,
            pairs: self
                .range_keys
                .into_iter()
                .zip(in_range)
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect(),
        }
    }
}

/// Probes of keys of which at most one can exist, in order up to the first that does (the
/// ones after it answer `false` without a lookup; all of them when `found` already): onto
/// `present`.
fn first_of(ks: &[&[u8]], found: bool, exists: &dyn Fn(&[u8]) -> bool, present: &mut Vec<bool>) {
    let mut done = found;
    for k in ks {
        if done {
            present.push(false);
        } else {
            done = exists(k);
            present.push(done);
        }
    }
}

impl ReadSide {
    /// Resolves a lookup in `view` (DRAM only): the pointers of `keys`, then of the range's
    /// live pairs, and the probes' answers.
    fn resolve_lookup(
        &self,
        view: &ReadView,
        keys: &[&[u8]],
        probes: Probes<'_>,
        range: Option<&RangeRead<'_>>,
    ) -> (Resolved, LookupShape) {
        let mut values = Resolved::default();
        for k in keys {
            values.push_slot(self.lookup_held(view, k));
        }
        let exists = |k: &[u8]| matches!(self.lookup(view, k), Some(Slot::Value(..)));
        let present: Vec<bool> = match probes {
            Probes::Each(ks) => ks.iter().map(|k| exists(k)).collect(),
            Probes::FirstOfUnlessFound(ks) if values.ptrs.iter().all(Option::is_some) => {
                vec![false; ks.len()]
            }
            Probes::GroupsUnlessFound { keys, per, owners } => {
                let mut present = Vec::with_capacity(keys.len());
                for (group, owner) in keys.chunks(per.max(1)).zip(owners) {
                    let found = values.ptrs.get(*owner).is_some_and(Option::is_some);
                    first_of(group, found, &exists, &mut present);
                }
                present
            }
            Probes::FirstOf(ks) | Probes::FirstOfUnlessFound(ks) => {
                let mut present = Vec::with_capacity(ks.len());
                first_of(ks, false, &exists, &mut present);
                present
            }
        };
        let mut range_keys = Vec::new();
        if let Some(range) = range {
            let mut bytes = 0u64;
            let mut clock = LazyClock::new();
            let mut merge = view.merge_between(range.start, range.end);
            while range_keys.len() < range.limit
                && (range_keys.is_empty() || bytes < range.max_bytes)
            {
                let Some((k, slot, held)) = merge.next_held() else {
                    break;
                };
                if range.end.is_some_and(|e| k >= e) {
                    break;
                }
                if let Slot::Value(p, _) = slot.visible(&mut clock) {
                    if range.skip.is_some_and(|skip| skip(k)) {
                        continue;
                    }
                    bytes += u64::from(p.len);
                    range_keys.push(k.to_vec());
                    values.push(Some(p), held);
                }
            }
        }
        let shape = LookupShape {
            keys: keys.len(),
            present,
            range_keys,
        };
        (values, shape)
    }

    /// The value `p` points at, from DRAM alone: the copy `held` (unless keytables are read
    /// from the device), else its one page from the landing buffer or the value cache (the
    /// hit is counted). `None` when it lies over several pages or its page is not in DRAM.
    fn dram_value(&self, p: ValuePtr, held: Option<Bytes>) -> Option<Bytes> {
        if let Some(v) = held.filter(|_| !self.uncached_keytables) {
            // Its own copy, as `ReadPlan::assemble` gives.
            return Some(Bytes::copy_from_slice(&v));
        }
        let len = p.len as usize;
        // Cached pages were verified when they entered the cache; a landing page is the
        // engine's own copy of what it wrote.
        let page = |page: u32| {
            let addr = PageAddr {
                log_seg: p.log_seg,
                page,
            };
            if let Some(buf) = self.landing.as_ref().and_then(|l| l.get(addr)) {
                return Some((buf, None));
            }
            let cache = self.cache.as_ref()?;
            cache.get_uncounted(addr).map(|buf| (buf, Some(cache)))
        };
        let (value, cache) = match p.loc {
            ValueLoc::Inline { page: pg, offset } => {
                let (buf, cache) = page(pg)?;
                let start = usize::from(offset);
                let v = (start + len <= buf.len()).then(|| buf.slice(start..start + len))?;
                (v, cache)
            }
            ValueLoc::Raw { page: pg, .. } if len <= PAGE_SIZE => {
                let (buf, cache) = page(pg)?;
                ((len <= buf.len()).then(|| buf.slice(..len))?, cache)
            }
            ValueLoc::Raw { .. } => return None,
        };
        if let Some(cache) = cache {
            cache.count_hits(1);
        }
        Some(value)
    }
}

impl Engine {
    /// The value of `key`.
    ///
    /// # Errors
    /// `Corrupt` when the value fails its checksum; device errors.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut v = self.multi_get(&[key])?;
        Ok(v.pop().flatten())
    }

    /// The value of `key`, expired or not: for an application that judges deadlines at an
    /// instant of its own (a transaction's fixed clock) and must not have a read hide what
    /// it judged live.
    ///
    /// # Errors
    /// As [`Engine::get`].
    pub fn get_written(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut v = self.multi_get_with(&[key], true)?;
        Ok(v.pop().flatten())
    }

    /// The values of several keys, read from the device in parallel, all as of one instant.
    ///
    /// # Errors
    /// As [`Engine::get`].
    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.multi_get_with(keys, false)
    }

    fn multi_get_with(&self, keys: &[&[u8]], expired_too: bool) -> Result<Vec<Option<Vec<u8>>>> {
        let side = &self.side;
        let view = side.view()?;
        let mut values = Resolved::default();
        for k in keys {
            values.push_slot(if expired_too {
                side.lookup_entry_held(&view, k)
            } else {
                side.lookup_held(&view, k)
            });
        }
        let mut plan = side.plan_reads(values)?;
        let pages = plan.fetch(side.dev.as_ref());
        let values = plan.assemble(&pages, &side.read_copied, &side.read_faults)?;
        drop(view);
        Ok(values
            .into_iter()
            .map(|b| {
                b.map(|b| {
                    side.read_copied
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                    b.to_vec()
                })
            })
            .collect())
    }

    /// The values of several keys without waiting: the value pages are submitted to the
    /// device and `done` runs on the engine's poller thread once they are all read, with
    /// the values in key order. Values within one page are slices of the page read (no
    /// copy). At most [`crate::ASYNC_READ_WINDOW`] pages are in flight: a caller beyond it
    /// waits here for earlier reads to finish. `done` must be short and must not call back
    /// into the engine; it runs on the calling thread when nothing needs reading or the
    /// engine is closed.
    pub fn multi_get_async(&self, keys: &[&[u8]], done: OnValues) {
        self.multi_get_async_probed(keys, &[], Box::new(move |r, _| done(r)));
    }

    /// [`Engine::multi_get_async`], and as of the same instant whether each of `probes`
    /// exists, from DRAM only: a caller can judge a missing value by keys read at the same
    /// point in time (e.g. a GET telling "no such key" from "the key holds another type").
    /// `done` gets the values and one flag per probe.
    pub fn multi_get_async_probed(&self, keys: &[&[u8]], probes: &[&[u8]], done: OnProbedValues) {
        self.lookup_async(
            keys,
            Probes::Each(probes),
            None,
            Box::new(move |r| match r {
                Ok(found) => done(Ok(found.values), found.present),
                Err(e) => done(Err(e), Vec::new()),
            }),
        );
    }

    /// The live pairs of `range` in key order, without waiting: the keys and their value
    /// pointers are taken as of one instant, the value pages are read as in
    /// [`Engine::multi_get_async`], and `done` runs on the engine's poller thread with the
    /// pairs. See [`RangeRead`] for the bounds.
    pub fn range_async(&self, range: &RangeRead<'_>, done: OnRange) {
        self.lookup_async(
            &[],
            Probes::NONE,
            Some(range),
            Box::new(move |r| done(r.map(|f| f.pairs))),
        );
    }

    /// The general asynchronous read, everything as of one instant: the values of `keys`,
    /// whether each of `probes` exists (DRAM only), and the live pairs of `range`. The value
    /// pages go to the device (those the value cache does not hold) and `done` runs on the
    /// engine's poller thread once they are in, as in [`Engine::multi_get_async`]. A caller
    /// composes one command's whole read from it (a hash field with its key's type, or a
    /// hash's fields with its type), so the reply is consistent.
    pub fn lookup_async(
        &self,
        keys: &[&[u8]],
        probes: Probes<'_>,
        range: Option<&RangeRead<'_>>,
        done: OnLookup,
    ) {
        match self.lookup_now(keys, probes, range) {
            Err(e) => done(Err(e)),
            Ok(LookupNow::Answered(found)) => done(Ok(found)),
            Ok(LookupNow::Pending(pending)) => pending.start_waiting(done),
        }
    }

    /// The lookup of [`Engine::lookup_async`] resolved here and now, answered at once when
    /// DRAM holds every value page it needs (the value cache, the landing buffer), else
    /// returned as a [`PendingLookup`] whose page reads the caller starts
    /// ([`PendingLookup::reserve`], [`Engine::submit_reads`]) or drops. One resolution serves both outcomes: a caller
    /// that must not wait (the drive's network thread) answers a hot read where it stands
    /// and starts a cold one without handing it to another thread to be resolved again.
    ///
    /// # Errors
    /// `Closed`; `Corrupt` as in [`Engine::get`].
    pub fn lookup_now(
        &self,
        keys: &[&[u8]],
        probes: Probes<'_>,
        range: Option<&RangeRead<'_>>,
    ) -> Result<LookupNow> {
        let view = self.side.view()?;
        let (values, shape) = self.side.resolve_lookup(&view, keys, probes, range);
        self.finish_lookup(view, values, shape)
    }

    /// The end of [`Engine::lookup_now`] once its values are resolved in `view`: answered
    /// from DRAM, or the page reads still to start.
    fn finish_lookup(
        &self,
        view: ReadView,
        values: Resolved,
        shape: LookupShape,
    ) -> Result<LookupNow> {
        let side = &self.side;
        let mut plan = side.plan_reads(values)?;
        let cached = plan.cached_pages();
        if cached.iter().all(Option::is_some) {
            drop(view);
            let pages: Vec<Result<Bytes>> = cached.into_iter().flatten().map(Ok).collect();
            let values = plan.assemble(&pages, &side.read_copied, &side.read_faults)?;
            return Ok(LookupNow::Answered(shape.finish(values)));
        }
        Ok(LookupNow::Pending(PendingLookup {
            side: side.clone(),
            plan,
            cached,
            shape,
            pin: view.into_pin(),
        }))
    }

    /// [`Engine::lookup_async`] answered at once when DRAM holds all of it (the keytables and
    /// memtables always do; every value page must be in the value cache): `Ok(None)` when a
    /// page would have to come from the device (nothing is read then; the caller goes the
    /// asynchronous way). Lets a caller answer a hot read where it stands, without handing
    /// it to another thread.
    ///
    /// # Errors
    /// `Closed`; `Corrupt` as in [`Engine::get`].
    pub fn lookup_cached(
        &self,
        keys: &[&[u8]],
        probes: Probes<'_>,
        range: Option<&RangeRead<'_>>,
    ) -> Result<Option<Lookup>> {
        let side = &self.side;
        let view = side.view()?;
        let (values, shape) = side.resolve_lookup(&view, keys, probes, range);
        let mut plan = side.plan_reads(values)?;
        let Some(pages) = plan.all_cached() else {
            return Ok(None);
        };
        let values = plan.assemble(&pages, &side.read_copied, &side.read_faults)?;
        drop(view);
        Ok(Some(shape.finish(values)))
    }

    /// One key's value resolved once, whether DRAM holds it or not: the value when it does
    /// (a held copy, the landing buffer, the value cache), else the read of its
    /// pages, resolved and ready to start ([`PendingLookup::reserve`], then
    /// [`Engine::submit_reads`]), whose [`Lookup`] holds the value first and one presence
    /// per key of `others`, all `false` (the answer of [`Probes::FirstOfUnlessFound`] for a
    /// key found). With no live value under `key`, `others` (keys of which at most one
    /// can exist beside it, as a user key's records of other types) are probed in the
    /// same view, in order up to the first that holds a value, so the caller answers a
    /// missing key as of one instant without a second lookup.
    /// The drive's GET: a hot value costs no per-call vectors (a value in one page is a
    /// slice of it), and a cold one is not looked up again to start its read, as trying
    /// DRAM first and then [`Engine::lookup_now`] would.
    ///
    /// # Errors
    /// `Closed`; `Corrupt` as in [`Engine::get`] (a value assembled from DRAM).
    pub fn get_now(&self, key: &[u8], others: &[&[u8]]) -> Result<GetNow> {
        let side = &self.side;
        let view = side.view()?;
        let Some((slot @ Slot::Value(p, _), held)) = side.lookup_held(&view, key) else {
            let other_exists = others
                .iter()
                .any(|k| matches!(side.lookup(&view, k), Some(Slot::Value(..))));
            return Ok(GetNow::NoValue { other_exists });
        };
        if let Some(v) = side.dram_value(p, held.clone()) {
            return Ok(GetNow::Hot(v));
        }
        let mut values = Resolved::default();
        values.push_slot(Some((slot, held)));
        let shape = LookupShape {
            keys: 1,
            present: vec![false; others.len()],
            range_keys: Vec::new(),
        };
        Ok(match self.finish_lookup(view, values, shape)? {
            LookupNow::Answered(mut found) => match found.values.pop().flatten() {
                Some(v) => GetNow::Hot(v),
                // The key's record exists, so none of `others` does (as the probes of
                // a key found answer).
                None => GetNow::NoValue {
                    other_exists: false,
                },
            },
            LookupNow::Pending(pending) => GetNow::Cold(Box::new(pending)),
        })
    }

    /// Value bytes the read path copied since open (values spanning pages are joined; the
    /// `Vec` results of [`Engine::get`] and [`Engine::multi_get`] are copies).
    pub fn read_copy_bytes(&self) -> u64 {
        self.side.read_copied.load(Ordering::Relaxed)
    }

    /// The counter behind [`Engine::read_copy_bytes`], for callers that report it.
    pub fn read_copy_counter(&self) -> Arc<AtomicU64> {
        self.side.read_copied.clone()
    }

    /// Up to `limit` live pairs with `start <= key < end` (no `end`: to the last key), in
    /// key order, as of one instant.
    ///
    /// # Errors
    /// As [`Engine::get`].
    pub fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let side = &self.side;
        let view = side.view()?;
        let mut keys = Vec::new();
        let mut values = Resolved::default();
        let mut clock = LazyClock::new();
        let mut merge = view.merge_between(start, end);
        while keys.len() < limit {
            let Some((k, slot, held)) = merge.next_held() else {
                break;
            };
            if end.is_some_and(|e| k >= e) {
                break;
            }
            if let Slot::Value(p, _) = slot.visible(&mut clock) {
                keys.push(k.to_vec());
                values.push(Some(p), held);
            }
        }
        drop(merge);
        let mut plan = side.plan_reads(values)?;
        let pages = plan.fetch(side.dev.as_ref());
        let values = plan.assemble(&pages, &side.read_copied, &side.read_faults)?;
        drop(view);
        Ok(keys
            .into_iter()
            .zip(values)
            .filter_map(|(k, v)| {
                v.map(|v| {
                    side.read_copied
                        .fetch_add(v.len() as u64, Ordering::Relaxed);
                    (k, v.to_vec())
                })
            })
            .collect())
    }

    /// How many keys have a value entry in `start <= key < end`, expired or not, and those
    /// of them whose entry carries a deadline, with it, in key order, from DRAM only: what
    /// an application that keeps its own index of deadlines loads at start (see
    /// [`crate::ExpiryPolicy`]). Only the keys with a deadline are copied.
    ///
    /// # Errors
    /// `Closed`.
    pub fn deadlines_in(&self, start: &[u8], end: Option<&[u8]>) -> Result<(u64, KeyDeadlines)> {
        let view = self.side.view()?;
        let (mut entries, mut out) = (0u64, Vec::new());
        let mut merge = view.merge_between(start, end);
        while let Some((k, slot)) = merge.next() {
            if end.is_some_and(|e| k >= e) {
                break;
            }
            if let Slot::Value(_, d) = slot {
                entries += 1;
                if let Some(d) = d {
                    out.push((k.to_vec(), d));
                }
            }
        }
        Ok((entries, out))
    }

    /// Up to `limit` live keys with `start <= key < end` (no `end`: to the last key), in key
    /// order, from the DRAM-cached keytables and memtables only (no device read).
    ///
    /// # Errors
    /// `Closed`.
    pub fn range_keys(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        let view = self.side.view()?;
        let mut keys = Vec::new();
        let mut clock = LazyClock::new();
        let mut merge = view.merge_between(start, end);
        while keys.len() < limit {
            let Some((k, slot)) = merge.next() else { break };
            if end.is_some_and(|e| k >= e) {
                break;
            }
            if matches!(slot.visible(&mut clock), Slot::Value(..)) {
                keys.push(k.to_vec());
            }
        }
        Ok(keys)
    }

    /// How many live keys lie in `start <= key < end`, from DRAM only.
    ///
    /// # Errors
    /// `Closed`.
    pub fn count_keys(&self, start: &[u8], end: Option<&[u8]>) -> Result<u64> {
        self.count_keys_with(start, end, LazyClock::new())
    }

    /// As [`Engine::count_keys`], judging deadlines at `now` (unix ms), so a caller can
    /// pair the count with its own view of what expired at that instant.
    ///
    /// # Errors
    /// `Closed`.
    pub fn count_keys_at(&self, start: &[u8], end: Option<&[u8]>, now: u64) -> Result<u64> {
        self.count_keys_with(start, end, LazyClock::at(now))
    }

    fn count_keys_with(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        mut clock: LazyClock,
    ) -> Result<u64> {
        let view = self.side.view()?;
        let mut n = 0;
        let mut merge = view.merge_between(start, end);
        while let Some((k, slot)) = merge.next() {
            if end.is_some_and(|e| k >= e) {
                break;
            }
            if matches!(slot.visible(&mut clock), Slot::Value(..)) {
                n += 1;
            }
        }
        Ok(n)
    }

    /// For each range `start <= key < end` (`end` `None`: no upper end), its first live
    /// key and the greatest key with an entry anywhere in the current version (a memtable
    /// version of any age, a tombstone, a keytable entry); `None` for a range with no live
    /// key. Every key live in the range lies between the two, so all of them share the
    /// two's common prefix (what SCAN's stateless cursors are built on). From DRAM only, in
    /// one view: a merge step per range and one search per memtable layer and run.
    ///
    /// # Errors
    /// `Closed`.
    pub fn range_bounds(&self, ranges: &[(&[u8], Option<&[u8]>)]) -> Result<Vec<RangeBounds>> {
        let view = self.side.view()?;
        let mut clock = LazyClock::new();
        Ok(ranges
            .iter()
            .map(|&(start, end)| {
                // No entry at all (binary searches only): no merge to set up.
                let last = last_key_in(&view, start, end)?;
                let mut merge = view.merge_between(start, end);
                loop {
                    let (k, slot) = merge.next()?;
                    if end.is_some_and(|e| k >= e) {
                        return None;
                    }
                    if matches!(slot.visible(&mut clock), Slot::Value(..)) {
                        return Some((k.to_vec(), last));
                    }
                }
            })
            .collect())
    }

    /// The index of the first of `keys` that holds a value (`None`: none does), from DRAM
    /// only, looking no further than that key: for keys that exclude one another (a Redis
    /// key's type records) the one that exists, found in as few lookups as its place in
    /// the list.
    ///
    /// # Errors
    /// `Closed`.
    pub fn first_present(&self, keys: &[&[u8]]) -> Result<Option<usize>> {
        let side = &self.side;
        let view = side.view()?;
        Ok(keys
            .iter()
            .position(|k| matches!(side.lookup(&view, k), Some(Slot::Value(..)))))
    }

    /// As [`Engine::first_present`], with the deadline of the key found.
    ///
    /// # Errors
    /// `Closed`.
    pub fn first_present_until(&self, keys: &[&[u8]]) -> Result<Option<(usize, Deadline)>> {
        let side = &self.side;
        let view = side.view()?;
        Ok(keys
            .iter()
            .enumerate()
            .find_map(|(i, k)| match side.lookup(&view, k) {
                Some(Slot::Value(_, d)) => Some((i, d)),
                _ => None,
            }))
    }

    /// As [`Engine::first_present_until`], counting a key whose deadline has passed as
    /// present (its entry is still there): what an application whose keys own other records
    /// needs to remove those too (see [`crate::ExpiryPolicy`]).
    ///
    /// # Errors
    /// `Closed`.
    pub fn first_written(&self, keys: &[&[u8]]) -> Result<Option<(usize, Deadline)>> {
        let side = &self.side;
        let view = side.view()?;
        Ok(keys
            .iter()
            .enumerate()
            .find_map(|(i, k)| match side.lookup_entry(&view, k) {
                Some(Slot::Value(_, d)) => Some((i, d)),
                _ => None,
            }))
    }

    /// The value length of each key, `None` for a missing key, from DRAM only (no device
    /// read): existence and length checks cost no I/O.
    ///
    /// # Errors
    /// `Closed`.
    pub fn value_lens(&self, keys: &[&[u8]]) -> Result<Vec<Option<u32>>> {
        let side = &self.side;
        let view = side.view()?;
        Ok(keys
            .iter()
            .map(|k| side.lookup(&view, k).and_then(|s| s.ptr()).map(|p| p.len))
            .collect())
    }
}

/// The writer side's reads (garbage collection, flushes, recovery), under the write lock:
/// the newest version of everything.
impl Inner {
    /// The newest slot of `key`.
    pub(super) fn lookup(&self, key: &[u8]) -> Option<Slot> {
        if let Some(s) = self.mem.latest(key) {
            return Some(s);
        }
        if let Some(s) = self.frozen.iter().rev().find_map(|f| f.mem.latest(key)) {
            return Some(s);
        }
        let h = KeyHash::of(key);
        levels::runs_for_key(&self.levels, key).find_map(|run| run.get_hashed(key, h))
    }

    /// Reads values under the write lock (recovery and garbage collection).
    pub(super) fn read_values(&self, ptrs: &[Option<ValuePtr>]) -> Result<Vec<Option<Bytes>>> {
        let plan = self.plan_reads(ptrs)?;
        let pages = self.read_pages(&plan.lbas)?;
        let pages: Vec<Result<Bytes>> = pages.into_iter().map(|p| Ok(page_bytes(p))).collect();
        plan.assemble(&pages, &AtomicU64::new(0), &self.side.read_faults)
    }

    /// Which pages hold these values.
    pub(super) fn plan_reads(&self, ptrs: &[Option<ValuePtr>]) -> Result<ReadPlan> {
        ReadPlan::new(ptrs, Vec::new(), self.g, |log_seg| self.segment_of(log_seg))
    }
}

/// The greatest key in `start <= key < end` with an entry in `view`'s memtables (any
/// version) or runs.
fn last_key_in(view: &ReadView, start: &[u8], end: Option<&[u8]>) -> Option<Vec<u8>> {
    let mut best: Option<Vec<u8>> = None;
    let mut offer = |k: &[u8]| {
        if k >= start && best.as_deref().is_none_or(|b| k > b) {
            best = Some(k.to_vec());
        }
    };
    for m in view.mems() {
        if let Some(k) = m.last_key_in(start, end) {
            offer(&k);
        }
    }
    for run in view.runs() {
        let below = end.map_or(run.len(), |e| run.seek(e));
        if let Some(i) = below.checked_sub(1) {
            offer(run.key(i));
        }
    }
    best
}
