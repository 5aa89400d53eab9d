//! The value cache: value-log pages in DRAM, so hot values cost no device read.
//!
//! **What it holds.** Whole 8 KiB value-log pages, keyed by their *log address*
//! ([`PageAddr`]: log segment number and page), under a scan-resistant S3-FIFO policy
//! (`quick_cache`): a page read once (a range read, a scan, a write never read again) stays
//! in the small probationary queue and leaves first; a page read again moves to the main
//! queue. The capacity is in pages ([`ValueCache::new`] takes bytes).
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
use quick_cache::{DefaultHashBuilder, Lifecycle, UnitWeighter};

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
    /// Capacity in bytes (whole pages).
    pub capacity_bytes: u64,
    /// Bytes held now.
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
    pages: Cache<PageAddr, Bytes, UnitWeighter, DefaultHashBuilder, CountEvictions>,
    capacity_pages: u64,
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
    /// A cache of `bytes / 8 KiB` pages; `None` when that is zero (caching off).
    pub fn new(bytes: u64) -> Option<ValueCache> {
        let capacity_pages = bytes / PAGE_SIZE as u64;
        if capacity_pages == 0 {
            return None;
        }
        let evictions = Arc::new(AtomicU64::new(0));
        let items = usize::try_from(capacity_pages).unwrap_or(usize::MAX);
        Some(ValueCache {
            pages: Cache::with(
                items,
                capacity_pages,
                UnitWeighter,
                DefaultHashBuilder::default(),
                CountEvictions(evictions.clone()),
            ),
            capacity_pages,
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

    /// Puts a verified page in (replacing any copy: the same bytes, by the module's
    /// argument).
    pub fn insert(&self, addr: PageAddr, page: Bytes) {
        self.inserts.fetch_add(1, Ordering::Relaxed);
        self.pages.insert(addr, page);
    }

    /// The counters now.
    pub fn stats(&self) -> ValueCacheStats {
        let page = PAGE_SIZE as u64;
        ValueCacheStats {
            capacity_bytes: self.capacity_pages * page,
            used_bytes: self.pages.len() as u64 * page,
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

    #[test]
    fn counts_hits_misses_and_evictions() {
        let c = ValueCache::new(4 * PAGE_SIZE as u64).expect("cache");
        assert!(c.get(addr(1, 0)).is_none());
        c.insert(addr(1, 0), Bytes::from_static(b"page"));
        assert_eq!(c.get(addr(1, 0)).as_deref(), Some(&b"page"[..]));
        for p in 1..64 {
            c.insert(addr(2, p), Bytes::from_static(b"x"));
        }
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.inserts), (1, 1, 64));
        assert!(s.used_bytes <= s.capacity_bytes, "{s:?}");
        assert!(s.evictions >= 60, "{s:?}");
    }

    #[test]
    fn a_page_read_again_survives_a_scan() {
        let c = ValueCache::new(64 * PAGE_SIZE as u64).expect("cache");
        c.insert(addr(1, 0), Bytes::from_static(b"hot"));
        for _ in 0..3 {
            assert!(c.get(addr(1, 0)).is_some());
        }
        // A scan of pages each read once, four times the cache.
        for p in 0..256 {
            c.insert(addr(9, p), Bytes::from_static(b"cold"));
        }
        assert!(c.get(addr(1, 0)).is_some(), "{:?}", c.stats());
    }
}
