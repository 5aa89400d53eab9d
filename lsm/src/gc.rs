//! Value-space reclamation policy. The engine counts garbage per value-log segment exactly
//! (from overwrites, deletes and compactions), so a policy only has to choose among counted
//! candidates; relocation itself is the engine's (live values are rewritten at the head
//! through the normal write path, then the segment is trimmed).

use std::fmt::Debug;

/// A sealed value-log segment that may be reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcCandidate {
    /// Its log segment number (older segments have lower numbers).
    pub log_seg: u32,
    /// Bytes still referenced.
    pub live_bytes: u64,
    /// Bytes written into it.
    pub written_bytes: u64,
    /// Bytes it could hold.
    pub capacity_bytes: u64,
}

/// Chooses which segment to reclaim next.
pub trait GcPolicy: Debug + Send + Sync {
    /// The log segment to reclaim, or `None` when no candidate is worth it.
    fn pick(&self, candidates: &[GcCandidate]) -> Option<u32>;
}

/// A reclaim must free at least this fraction of a segment (1/n): relocating a segment that
/// is almost all live costs a whole segment of writes to win back a sliver, and on a full
/// drive it would only move the same data around.
pub const MIN_GAIN_DIVISOR: u64 = 16;

/// Greedy: the candidate with the least live data, if reclaiming it frees at least
/// 1/[`MIN_GAIN_DIVISOR`] of a segment.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastLive;

impl GcPolicy for LeastLive {
    fn pick(&self, candidates: &[GcCandidate]) -> Option<u32> {
        candidates
            .iter()
            .filter(|c| c.live_bytes + c.capacity_bytes / MIN_GAIN_DIVISOR <= c.capacity_bytes)
            .min_by_key(|c| (c.live_bytes, c.log_seg))
            .map(|c| c.log_seg)
    }
}

/// FIFO cleaning: the oldest candidate that frees at least 1/[`MIN_GAIN_DIVISOR`] of a
/// segment. It moves more data than [`LeastLive`] under skewed overwrites, but ages every
/// segment out in order (even wear, a bounded age for cold data, predictable work); the
/// crash test uses it so that live data is moved under power cuts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Oldest;

impl GcPolicy for Oldest {
    fn pick(&self, candidates: &[GcCandidate]) -> Option<u32> {
        candidates
            .iter()
            .filter(|c| c.live_bytes + c.capacity_bytes / MIN_GAIN_DIVISOR <= c.capacity_bytes)
            .map(|c| c.log_seg)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_live_picks_the_emptiest_useful_segment() {
        let c = |log_seg, live| GcCandidate {
            log_seg,
            live_bytes: live,
            written_bytes: 100,
            capacity_bytes: 100,
        };
        assert_eq!(LeastLive.pick(&[c(1, 50), c(2, 10), c(3, 10)]), Some(2));
        assert_eq!(LeastLive.pick(&[c(1, 100)]), None);
        // Almost all live: not worth a segment of writes.
        assert_eq!(LeastLive.pick(&[c(1, 97)]), None);
        assert_eq!(LeastLive.pick(&[c(1, 93)]), Some(1));
        assert_eq!(LeastLive.pick(&[]), None);
    }

    #[test]
    fn oldest_picks_the_oldest_useful_segment() {
        let c = |log_seg, live| GcCandidate {
            log_seg,
            live_bytes: live,
            written_bytes: 100,
            capacity_bytes: 100,
        };
        assert_eq!(Oldest.pick(&[c(3, 10), c(1, 50), c(2, 0)]), Some(1));
        assert_eq!(Oldest.pick(&[c(1, 97), c(2, 90)]), Some(2));
        assert_eq!(Oldest.pick(&[]), None);
    }
}
