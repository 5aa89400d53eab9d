//! Which raw value pages of each log segment hold only garbage, so garbage collection need
//! not read them: the one part of a victim's liveness known without reading its packed
//! pages.
//!
//! A raw value's pages are marked when the engine counts the value dead (the same
//! invalidations that keep each segment's `dead` bytes: a flush or compaction shadowing
//! it, a batch that failed, a value replaced in the memtable). Nothing else is ever
//! marked: packed pages, a long key's pages and the pages of a value spanning segments are
//! always read. The marks are a hint, kept in DRAM only (an engine reopened after a stop
//! reads its old segments whole): garbage collection still judges every record it finds
//! against the index, and reads a page it skipped if a value there turns out live
//! (`EngineStats::gc_skipped_pages_reread`, never expected).
//!
//! Cost: one bit per page of a segment that has a dead raw value (128 bytes per 8 MiB
//! segment of 8 KiB pages, 2 KiB per 128 MiB segment), dropped with the segment.

use std::collections::HashMap;

use crate::vlog_format::{raw_pages, ValueLoc, ValuePtr};

/// Dead raw pages, per log segment.
#[derive(Debug, Default)]
pub(super) struct DeadRawPages {
    by_seg: HashMap<u32, Vec<u64>>,
}

impl DeadRawPages {
    /// Marks the pages of `p`, a value just counted dead, if it is a raw value within one
    /// segment of `pages_per_segment` pages.
    pub(super) fn mark(&mut self, p: &ValuePtr, pages_per_segment: u32) {
        let ValueLoc::Raw { page, .. } = p.loc else {
            return;
        };
        if p.spans(pages_per_segment) {
            return;
        }
        let n = raw_pages(u64::from(p.len)) as u32;
        let end = page.saturating_add(n).min(pages_per_segment);
        if page >= end {
            return;
        }
        let words = (pages_per_segment as usize).div_ceil(64);
        let bits = self
            .by_seg
            .entry(p.log_seg)
            .or_insert_with(|| vec![0; words]);
        for pg in page..end {
            if let Some(w) = bits.get_mut(pg as usize / 64) {
                *w |= 1 << (pg % 64);
            }
        }
    }

    /// Whether page `page` of log segment `log_seg` is a raw page of a dead value.
    pub(super) fn is_dead(&self, log_seg: u32, page: u32) -> bool {
        self.by_seg
            .get(&log_seg)
            .and_then(|bits| bits.get(page as usize / 64))
            .is_some_and(|w| w & (1 << (page % 64)) != 0)
    }

    /// Forgets a log segment (reclaimed, or cleared).
    pub(super) fn forget(&mut self, log_seg: u32) {
        self.by_seg.remove(&log_seg);
    }

    /// Forgets every segment.
    pub(super) fn clear(&mut self) {
        self.by_seg.clear();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn raw(log_seg: u32, page: u32, len: u32) -> ValuePtr {
        ValuePtr {
            log_seg,
            loc: ValueLoc::Raw { page, crc: 0 },
            len,
        }
    }

    #[test]
    fn marks_only_the_pages_of_dead_raw_values_within_a_segment() {
        let mut d = DeadRawPages::default();
        d.mark(&raw(3, 10, 8192), 128);
        d.mark(&raw(3, 20, 20_000), 128);
        // Inline values and values spanning segments are never marked.
        d.mark(
            &ValuePtr {
                log_seg: 3,
                loc: ValueLoc::Inline {
                    page: 30,
                    offset: 32,
                },
                len: 100,
            },
            128,
        );
        d.mark(&raw(3, 100, 200 * 8192), 128);
        let dead: Vec<u32> = (0..128).filter(|&p| d.is_dead(3, p)).collect();
        assert_eq!(dead, vec![10, 20, 21, 22]);
        assert!(!d.is_dead(4, 10));
        d.forget(3);
        assert!(!d.is_dead(3, 10));
    }
}

#[cfg(test)]
mod engine_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use crate::engine::{Engine, Slot};
    use crate::EngineConfig;

    fn key(k: u32) -> Vec<u8> {
        format!("key{k:06}").into_bytes()
    }

    fn value(k: u32, version: u32) -> Vec<u8> {
        let mut v = format!("{k}/{version}|").into_bytes().repeat(8192 / 8);
        v.resize(8192, b'.');
        v
    }

    /// The marks are a hint: with every live value's pages wrongly marked dead, garbage
    /// collection skips them in its read-ahead, finds the values live when it judges their
    /// records, reads those pages then (counted), and loses nothing.
    #[test]
    fn a_wrong_mark_costs_a_read_and_loses_nothing() {
        let db = Engine::open(
            crate::engine::test_device::small_ram_device(16),
            EngineConfig {
                memtable_bytes: 64 << 10,
                gc_window_pages: 16,
                ..EngineConfig::default()
            },
        )
        .unwrap();
        let keys = (db.stats().user_capacity_bytes * 60 / 100 / 8300) as u32;
        for k in 0..keys {
            db.put(&key(k), &value(k, 0)).unwrap();
        }
        {
            let mut inner = db.core.inner.lock();
            let pps = inner.g.pages_per_segment();
            for k in 0..keys {
                if let Some(Slot::Value(p, _)) = inner.lookup(&key(k)) {
                    inner.dead_raw.mark(&p, pps);
                }
            }
        }
        // Overwrites of the even keys make garbage beside the odd ones, still live.
        let mut version = vec![0u32; keys as usize];
        for round in 1..=4 {
            for k in (0..keys).step_by(2) {
                db.put(&key(k), &value(k, round)).unwrap();
                version[k as usize] = round;
            }
        }
        db.settle().unwrap();
        let s = db.stats();
        assert!(s.gc_segments > 0, "{s:#?}");
        assert!(s.gc_skipped_pages_reread > 0, "{s:#?}");
        for k in 0..keys {
            assert_eq!(
                db.get(&key(k)).unwrap().as_deref(),
                Some(&value(k, version[k as usize])[..]),
                "key {k}"
            );
        }
    }
}
