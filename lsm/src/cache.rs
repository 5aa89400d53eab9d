//! The value cache: value-log pages in DRAM, so hot values cost no device read.
//!
//! **What it holds.** Value-log pages, keyed by their *log address* ([`PageAddr`]: log
//! segment number and page), under a scan-resistant S3-FIFO policy (`quick_cache`): a page
//! read once (a range read, a scan, a write never read again) stays in the small
//! probationary queue and leaves first; a page read again moves to the main queue. A packed
//! page is kept only up to the end of its records when that saves room ([`cut_to_records`]):
//! a batch of one small write fills an 8 KiB page with a few hundred bytes, and caching the
//! padding would let a stream of small writes push every useful page out. The capacity is
//! in bytes: each page weighs its length plus [`ENTRY_OVERHEAD`].
//!
//! **Why it is never stale.** The value log is append-only and a log address names one
//! page for the life of the process:
//! - a page is programmed once; a batch that failed leaves its pages unused and the next
//!   batch opens a new log segment (`abandon_head`), so no address is laid out twice;
//! - log segment numbers only grow (`next_log_seg`); a segment that garbage collection
//!   reclaims is reused on the device under a *new* log segment number;
//! - values that GC moves get new addresses, and the pointers to the old ones leave the
//!   keytables before the old segment is trimmed.
//!
//! So an entry can become unreachable (nothing points at it any more; it ages out) but
//! never wrong, and neither GC nor trims need to invalidate anything.
//!
//! **What enters it.** Pages a client read verified (a packed page's checksum, or the
//! checksum of the raw value spanning the pages), and the pages of client batches once they
//! are applied (durable, or with `EngineConfig::ack_from_dram` acknowledged: the engine's own
//! copy of what it wrote). A page that fails its check never enters, and one read by
//! garbage collection or fsck does not either (a background sweep would evict hot pages).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use hwftl_sim::PAGE_SIZE;
use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, Weighter};

use crate::vlog_format::packed_shape;

/// What an entry costs besides its bytes (its key, the `Bytes` handle, the cache's slot),
/// counted in its weight.
pub const ENTRY_OVERHEAD: u64 = 64;

/// Pages of at most this many used bytes are cut to them when cached; fuller ones are kept
/// whole (the copy would save little).
const CUT_BELOW: usize = PAGE_SIZE / 2;

/// Weighs an entry by its bytes.
#[derive(Clone, Copy, Default)]
struct ByteWeighter;

impl Weighter<PageAddr, Bytes> for ByteWeighter {
    fn weight(&self, _key: &PageAddr, page: &Bytes) -> u64 {
        page.len() as u64 + ENTRY_OVERHEAD
    }
}

/// A packed page as the cache keeps it: cut (copied) to its records when they end below half
/// the page, else as it is. Only for pages known to be packed pages (checked by
/// `check_page`, or laid out by the engine): a raw value's page could look like one. A
/// reader finds every record of a cut page inside it, and checks each value's bounds.
pub fn cut_to_records(page: Bytes) -> Bytes {
    match packed_shape(&page) {
        Some((used, _)) if used <= CUT_BELOW && used < page.len() => {
            Bytes::copy_from_slice(&page[..used])
        }
        _ => page,
    }
}

/// A copy of a packed page as the cache keeps it (see [`cut_to_records`]), copying only
/// what is kept. Only for packed pages.
pub fn copy_packed_for_cache(page: &[u8]) -> Bytes {
    match packed_shape(page) {
        Some((used, _)) if used <= CUT_BELOW => Bytes::copy_from_slice(&page[..used]),
        _ => Bytes::copy_from_slice(page),
    }
}

/// Where a value-log page lives in the log (not on the device): immutable for the life of
/// the process (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageAddr {
    /// Log segment number.
    pub log_seg: u32,
    /// Page within the log segment.
    pub page: u32,
}

/// The cache's counters (see [`ValueCache::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ValueCacheStats {
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// Bytes held now (pages and their entries' overhead).
    pub used_bytes: u64,
    /// Page lookups that found the page.
    pub hits: u64,
    /// Page lookups that went to the device.
    pub misses: u64,
    /// Pages put in (read fills and write fills).
    pub inserts: u64,
    /// Pages evicted to make room.
    pub evictions: u64,
}

/// Counts evictions for INFO.
#[derive(Clone, Default)]
struct CountEvictions(Arc<AtomicU64>);

impl Lifecycle<PageAddr, Bytes> for CountEvictions {
    type RequestState = ();

    fn on_evict(&self, _state: &mut (), _key: PageAddr, _val: Bytes) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A DRAM cache of verified value-log pages (see the module docs).
pub struct ValueCache {
    pages: Cache<PageAddr, Bytes, ByteWeighter, DefaultHashBuilder, CountEvictions>,
    capacity_bytes: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    inserts: AtomicU64,
    evictions: Arc<AtomicU64>,
}

impl std::fmt::Debug for ValueCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueCache")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl ValueCache {
    /// A cache of `bytes`; `None` below one whole page (caching off).
    pub fn new(bytes: u64) -> Option<ValueCache> {
        if bytes < PAGE_SIZE as u64 {
            return None;
        }
        let evictions = Arc::new(AtomicU64::new(0));
        // The table is sized for whole pages (its shards follow from it); it takes more cut
        // pages than that, within the weight.
        let items = usize::try_from(bytes / PAGE_SIZE as u64).unwrap_or(usize::MAX);
        Some(ValueCache {
            pages: Cache::with(
                items,
                bytes,
                ByteWeighter,
                DefaultHashBuilder::default(),
                CountEvictions(evictions.clone()),
            ),
            capacity_bytes: bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
            evictions,
        })
    }

    /// Drops every cached page (after [`crate::Engine::clear`]: they name segments gone).
    pub fn clear(&self) {
        self.pages.clear();
    }

    /// The page at `addr`, if cached (counted as a hit or a miss).
    pub fn get(&self, addr: PageAddr) -> Option<Bytes> {
        let page = self.pages.get(&addr);
        let counter = if page.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        page
    }

    /// The page at `addr`, if cached, without counting a hit or a miss (see
    /// [`ValueCache::count_hits`]).
    pub fn get_uncounted(&self, addr: PageAddr) -> Option<Bytes> {
        self.pages.get(&addr)
    }

    /// Counts `n` hits of [`ValueCache::get_uncounted`] lookups that were used.
    pub fn count_hits(&self, n: u64) {
        self.hits.fetch_add(n, Ordering::Relaxed);
    }

    /// Puts a verified page in as it is given (replacing any copy: the same bytes, by the
    /// module's argument). A caller that knows the page is a packed page cuts it first
    /// ([`cut_to_records`]); a raw value's page must never be cut (its bytes are the value's,
    /// whatever they look like).
    pub fn insert(&self, addr: PageAddr, page: Bytes) {
        self.inserts.fetch_add(1, Ordering::Relaxed);
        self.pages.insert(addr, page);
    }

    /// The counters now.
    pub fn stats(&self) -> ValueCacheStats {
        ValueCacheStats {
            capacity_bytes: self.capacity_bytes,
            used_bytes: self.pages.weight(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            inserts: self.inserts.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(log_seg: u32, page: u32) -> PageAddr {
        PageAddr { log_seg, page }
    }

    #[test]
    fn a_zero_capacity_means_no_cache() {
        assert!(ValueCache::new(0).is_none());
        assert!(ValueCache::new(PAGE_SIZE as u64 - 1).is_none());
    }

    fn page(fill: u8) -> Bytes {
        Bytes::from(vec![fill; PAGE_SIZE])
    }

    #[test]
    fn counts_hits_misses_and_evictions() {
        let c = ValueCache::new(4 * PAGE_SIZE as u64).expect("cache");
        assert!(c.get(addr(1, 0)).is_none());
        c.insert(addr(1, 0), page(1));
        assert_eq!(c.get(addr(1, 0)), Some(page(1)));
        for p in 1..64 {
            c.insert(addr(2, p), page(2));
        }
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.inserts), (1, 1, 64));
        assert!(s.used_bytes <= s.capacity_bytes, "{s:?}");
        assert!(s.evictions >= 60, "{s:?}");
    }

    #[test]
    fn a_page_read_again_survives_a_scan() {
        let c = ValueCache::new(2048 * PAGE_SIZE as u64).expect("cache");
        c.insert(addr(1, 0), page(1));
        for _ in 0..3 {
            assert!(c.get(addr(1, 0)).is_some());
        }
        // A scan of pages each read once, four times the cache.
        for p in 0..8192 {
            c.insert(addr(9, p), page(9));
        }
        assert!(c.get(addr(1, 0)).is_some(), "{:?}", c.stats());
    }

    #[test]
    fn a_page_read_again_survives_a_scan_in_a_small_cache() {
        let c = ValueCache::new(64 * PAGE_SIZE as u64).expect("cache");
        c.insert(addr(1, 0), page(1));
        for _ in 0..3 {
            assert!(c.get(addr(1, 0)).is_some());
        }
        for p in 0..256 {
            c.insert(addr(9, p), page(9));
        }
        assert!(c.get(addr(1, 0)).is_some(), "{:?}", c.stats());
    }

    #[test]
    fn packed_pages_are_cut_to_their_records() {
        use crate::vlog_format::{PageBuilder, PAGE_HEADER};
        let mut b = PageBuilder::new();
        let v = b"a small value";
        b.add(
            crate::vlog_format::RecordKind::Put,
            1,
            b"key",
            v.len() as u32,
            v,
        )
        .expect("room");
        let sealed = Bytes::from(b.seal(7, 3, 1, true, 0));
        assert_eq!(sealed.len(), PAGE_SIZE);
        let cut = cut_to_records(sealed.clone());
        assert!(cut.len() > PAGE_HEADER && cut.len() < 100, "{}", cut.len());
        assert_eq!(&cut[..], &sealed[..cut.len()]);
        // A full page, or one that is not a packed page (a raw value's), stays whole.
        assert_eq!(cut_to_records(page(0)).len(), PAGE_SIZE);
        // A 64-page cache holds thousands of cut pages.
        let c = ValueCache::new(64 * PAGE_SIZE as u64).expect("cache");
        for p in 0..4000 {
            c.insert(addr(1, p), cut_to_records(sealed.clone()));
        }
        let s = c.stats();
        assert!(s.evictions < 100, "{s:?}");
        assert!(s.used_bytes <= s.capacity_bytes, "{s:?}");
    }
}
