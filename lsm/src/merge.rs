//! Merging sorted sources (the memtable and keytable runs) in key order, newest version
//! first: the basis of range reads and of compaction.

use std::sync::Arc;

use bytes::Bytes;

use crate::expiry::ExpiryPolicy;
use crate::keytable::{KeyTable, KeyTableBuilder, Slot};
use crate::vlog_format::ValuePtr;

/// A sorted source of (key, slot) read in place: the entry it stands on is lent, not copied,
/// so a source may hold what keeps its key alive (a memtable cursor holds its skip-list
/// entry).
pub trait Cursor {
    /// The entry the cursor stands on, or `None` past the end.
    fn current(&self) -> Option<(&[u8], Slot)>;
    /// Moves to the next key.
    fn advance(&mut self);
    /// The value the entry the cursor stands on holds (a keytable entry's held value, a
    /// memtable version's copy of a small value), if any.
    fn held(&self) -> Option<Bytes> {
        None
    }
}

/// A boxed [`Cursor`].
pub type Source<'a> = Box<dyn Cursor + 'a>;

/// Entries of a keytable run from index `i` on.
pub struct RunCursor<'a> {
    t: &'a KeyTable,
    i: usize,
}

impl Cursor for RunCursor<'_> {
    fn current(&self) -> Option<(&[u8], Slot)> {
        (self.i < self.t.len()).then(|| (self.t.key(self.i), self.t.slot(self.i)))
    }

    fn advance(&mut self) {
        self.i += 1;
    }

    fn held(&self) -> Option<Bytes> {
        self.t.held(self.i)
    }
}

/// Entries of a run from index `from` on.
pub fn run_source(t: &KeyTable, from: usize) -> Source<'_> {
    Box::new(RunCursor { t, i: from })
}

/// Merges sources; `sources[0]` is the newest. Yields each key once with its newest slot, and
/// hands every older, shadowed slot of it to `shadowed` — but for a value that the version
/// just above it points at too (a retime changed only its deadline: the value is still
/// live, and counted once when the last version pointing at it goes). The key yielded is lent from its
/// source until the next call. Sources are few (the memtables and a handful of runs per
/// level), so the smallest key is found by a scan rather than a heap.
pub struct Merge<'a> {
    sources: Vec<Source<'a>>,
    /// The source whose entry was yielded last: it moves on at the next call.
    yielded: Option<usize>,
    /// The value an older version of the key yielded last holds, when that version points
    /// at the same value (a retime above a held value: see [`Merge::held`]).
    held_below: Option<Bytes>,
}

impl<'a> Merge<'a> {
    /// A merge over `sources`, newest first.
    pub fn new(sources: Vec<Source<'a>>) -> Self {
        Merge {
            sources,
            yielded: None,
            held_below: None,
        }
    }

    /// The next key with its newest slot; older versions go to `shadowed`.
    pub fn next_with(&mut self, shadowed: impl FnMut(&[u8], Slot)) -> Option<(&[u8], Slot)> {
        let y = self.step(shadowed)?;
        self.sources[y].current()
    }

    /// [`Merge::next_with`], with the value the key's entry holds: its newest version's copy, else
    /// that of an older version pointing at the same value.
    pub fn next_held_with(
        &mut self,
        shadowed: impl FnMut(&[u8], Slot),
    ) -> Option<(&[u8], Slot, Option<Bytes>)> {
        let y = self.step(shadowed)?;
        let held = self.held();
        let (k, s) = self.sources[y].current()?;
        Some((k, s, held))
    }

    /// [`Merge::next`], with the value the key's entry holds.
    pub fn next_held(&mut self) -> Option<(&[u8], Slot, Option<Bytes>)> {
        self.next_held_with(|_, _| {})
    }

    /// Moves to the next key and returns the source standing on it.
    fn step(&mut self, mut shadowed: impl FnMut(&[u8], Slot)) -> Option<usize> {
        if let Some(r) = self.yielded.take() {
            self.sources[r].advance();
        }
        // The smallest key; among equal keys the newest source (lowest rank) wins.
        let mut best: Option<usize> = None;
        for r in 0..self.sources.len() {
            let Some((k, _)) = self.sources[r].current() else {
                continue;
            };
            match best.and_then(|b| self.sources[b].current()) {
                Some((bk, _)) if bk <= k => {}
                _ => best = Some(r),
            }
        }
        let best = best?;
        // Older versions of the same key: shadowed, and skipped.
        let mut above = self.sources[best].current().and_then(|(_, s)| s.ptr());
        let newest = above;
        self.held_below = None;
        for r in best + 1..self.sources.len() {
            while let (Some((k, s)), Some((bk, _))) =
                (self.sources[r].current(), self.sources[best].current())
            {
                if k != bk {
                    break;
                }
                let ptr = s.ptr();
                if ptr.is_none() || ptr != above {
                    shadowed(k, s);
                }
                if ptr.is_some() && ptr == newest && self.held_below.is_none() {
                    self.held_below = self.sources[r].held();
                }
                above = ptr;
                self.sources[r].advance();
            }
        }
        self.yielded = Some(best);
        Some(best)
    }

    /// The value the key yielded last holds: its newest version's copy, else that of an
    /// older version pointing at the same value (a retime's version holds none of its own
    /// until it is flushed beside the value it retimes).
    fn held(&self) -> Option<Bytes> {
        let y = self.yielded?;
        self.sources[y].held().or_else(|| self.held_below.clone())
    }

    /// The next key with its newest slot.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(&[u8], Slot)> {
        self.next_with(|_, _| {})
    }
}

/// A value made garbage by a compaction: its key length (for the record size) and pointer.
pub type Invalidated = (usize, ValuePtr);

/// The runs of a partitioned level (ordered by key, not overlapping) read as one source,
/// from the first key `>= start` on.
pub struct LevelCursor<'a> {
    runs: &'a [Arc<KeyTable>],
    /// The run the cursor is in, and the entry in it.
    r: usize,
    i: usize,
}

impl<'a> LevelCursor<'a> {
    /// A cursor over `runs` from the first key `>= start`.
    pub fn new(runs: &'a [Arc<KeyTable>], start: &[u8]) -> Self {
        let r = runs.partition_point(|t| t.range().is_some_and(|(_, last)| last < start));
        let i = runs.get(r).map_or(0, |t| t.seek(start));
        let mut c = LevelCursor { runs, r, i };
        c.skip_exhausted();
        c
    }

    fn skip_exhausted(&mut self) {
        while self.runs.get(self.r).is_some_and(|t| self.i >= t.len()) {
            self.r += 1;
            self.i = 0;
        }
    }
}

impl Cursor for LevelCursor<'_> {
    fn current(&self) -> Option<(&[u8], Slot)> {
        let t = self.runs.get(self.r)?;
        (self.i < t.len()).then(|| (t.key(self.i), t.slot(self.i)))
    }

    fn advance(&mut self) {
        self.i += 1;
        self.skip_exhausted();
    }

    fn held(&self) -> Option<Bytes> {
        self.runs.get(self.r)?.held(self.i)
    }
}

/// How a compaction lays out its output.
#[derive(Debug, Clone)]
pub struct OutputSpec {
    /// Ids for the output runs, taken in key order (reserved by the caller: at least
    /// `input bytes / target_bytes + 1`; should they run out, the last run grows).
    pub ids: std::ops::Range<u64>,
    /// An output run is closed once it holds this many bytes ([`KeyTable::data_bytes`]).
    pub target_bytes: usize,
    /// Nothing older exists below the output: tombstones are dropped.
    pub bottom: bool,
    /// Bloom filter false-positive rate of the output runs.
    pub fp_rate: f64,
    /// The clock and the policy by which expired entries are dropped (`None`: kept). An
    /// expired entry goes only where nothing older of its key lies below the output: at the
    /// bottom, or where no deeper run holds the key (`ExpiryDrop::below`). Otherwise it is
    /// kept as it is (reads hide it): dropping it would bare the older version, and a
    /// tombstone in its place would count its value as garbage twice (again when it meets
    /// that version).
    pub expiry: Option<ExpiryDrop>,
}

/// When compaction drops expired entries (see [`OutputSpec::expiry`]): only entries whose
/// deadline is [`EXPIRY_GRACE_MS`] behind `now`.
#[derive(Debug, Clone)]
pub struct ExpiryDrop {
    /// The instant (unix ms) deadlines are judged at.
    pub now: u64,
    /// Which expired keys may go.
    pub policy: Arc<dyn ExpiryPolicy>,
    /// The runs of the levels below the output (empty at the bottom): an expired entry
    /// whose key one of them holds stays (bloom filter first, then a DRAM search).
    pub below: Vec<Arc<KeyTable>>,
}

impl ExpiryDrop {
    /// Whether `key`'s entry, expired at `deadline`, may be dropped.
    fn drops(&self, key: &[u8], deadline: u64) -> bool {
        deadline.saturating_add(EXPIRY_GRACE_MS) < self.now
            && self.policy.may_drop(key)
            && !self.below.iter().any(|t| t.get(key).is_some())
    }
}

/// How long after its deadline an expired entry may be dropped by compaction. Reads hide it
/// from its deadline on; the grace lets a writer that saw the key live a moment before
/// (and retimes it: EXPIRE on a key about to expire) still find its entry, whatever the
/// compactions in between.
pub const EXPIRY_GRACE_MS: u64 = 10_000;

/// Entries compaction dropped because they expired: key and value. Whether the value is
/// garbage depends on what lies above the compaction (a newer version in a memtable may
/// point at it: a retime), so the caller decides, under the write lock.
pub type Expired = Vec<(Vec<u8>, ValuePtr)>;

/// Merges sources (newest first) into runs of about `spec.target_bytes` each, in key order
/// and not overlapping (a key is never split across runs: the merge yields each key once).
/// Shadowed values are returned as invalidated; with `spec.bottom` tombstones are dropped
/// too, and entries expired per `spec.expiry` (returned apart). Empty runs are never
/// returned.
pub fn compact(
    sources: Vec<Source<'_>>,
    spec: &OutputSpec,
) -> (Vec<KeyTable>, Vec<Invalidated>, Expired) {
    let mut merge = Merge::new(sources);
    let mut ids = spec.ids.clone();
    let mut outputs = Vec::new();
    let mut out: Option<KeyTableBuilder> = None;
    let mut dead = Vec::new();
    let mut expired = Vec::new();
    loop {
        let next = merge.next_held_with(|k, s| {
            if let Slot::Value(p, _) = s {
                dead.push((k.len(), p));
            }
        });
        let Some((key, slot, held)) = next else { break };
        if spec.bottom && slot == Slot::Tombstone {
            continue;
        }
        if let (Some(x), Slot::Value(p, Some(d))) = (&spec.expiry, slot) {
            // Every older version of the key was merged here, or there is none below.
            if x.drops(key, d.get()) {
                expired.push((key.to_vec(), p));
                continue;
            }
        }
        let full = out
            .as_ref()
            .is_some_and(|b| b.data_bytes() >= spec.target_bytes && !ids.is_empty());
        if full {
            if let Some(b) = out.take() {
                outputs.push(b.finish(spec.fp_rate));
            }
        }
        let b = match &mut out {
            Some(b) => b,
            None => out.insert(KeyTableBuilder::new(ids.next().unwrap_or(spec.ids.end))),
        };
        b.push(key, &slot, held.as_deref());
    }
    outputs.extend(out.map(|b| b.finish(spec.fp_rate)));
    (outputs, dead, expired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vlog_format::ValueLoc;

    fn v(n: u32) -> Slot {
        Slot::value(ValuePtr {
            log_seg: n,
            loc: ValueLoc::Inline { page: 0, offset: 0 },
            len: n,
        })
    }

    fn run(id: u64, entries: &[(&str, Slot)]) -> Arc<KeyTable> {
        let mut b = KeyTableBuilder::new(id);
        for (k, s) in entries {
            b.push(k.as_bytes(), s, None);
        }
        Arc::new(b.finish(0.01))
    }

    #[test]
    fn newest_wins_and_shadowed_values_are_invalidated() {
        let new = run(2, &[("a", v(10)), ("c", Slot::Tombstone)]);
        let old = run(1, &[("a", v(1)), ("b", v(2)), ("c", v(3))]);
        let spec = |bottom| OutputSpec {
            ids: 3..4,
            target_bytes: usize::MAX,
            bottom,
            fp_rate: 0.01,
            expiry: None,
        };
        let sources = || vec![run_source(&new, 0), run_source(&old, 0)];
        let (mut out, dead, _) = compact(sources(), &spec(false));
        let t = out.remove(0);
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(b"a"), Some(v(10)));
        assert_eq!(t.get(b"c"), Some(Slot::Tombstone));
        let mut lens: Vec<u32> = dead.iter().map(|(_, p)| p.len).collect();
        lens.sort();
        assert_eq!(lens, vec![1, 3]);
        let (mut out, _, _) = compact(sources(), &spec(true));
        let t = out.remove(0);
        assert_eq!(t.len(), 2, "tombstone dropped at the bottom");
        assert_eq!(t.get(b"c"), None);
    }

    /// An expired entry goes where nothing older of its key lies below the output, and
    /// not before its grace is over; one with an older version below stays (reads hide it).
    #[test]
    fn expired_entries_go_only_where_nothing_older_lies_below() {
        let until = |n: u32, d: u64| match v(n) {
            Slot::Value(p, _) => Slot::Value(p, std::num::NonZeroU64::new(d)),
            s => s,
        };
        let now = 1_000_000;
        let input = run(
            2,
            &[
                ("a", until(1, 5)),
                ("b", until(2, 5)),
                ("c", until(3, now - 1)),
                ("d", v(4)),
            ],
        );
        let below = run(1, &[("b", v(9))]);
        let spec = OutputSpec {
            ids: 3..4,
            target_bytes: usize::MAX,
            bottom: false,
            fp_rate: 0.01,
            expiry: Some(ExpiryDrop {
                now,
                policy: Arc::new(crate::expiry::DropExpired),
                below: vec![below],
            }),
        };
        let (mut out, dead, expired) = compact(vec![run_source(&input, 0)], &spec);
        let t = out.remove(0);
        let keys: Vec<&[u8]> = (0..t.len()).map(|i| t.key(i)).collect();
        assert_eq!(
            keys,
            vec![&b"b"[..], b"c", b"d"],
            "a dropped; b has b below; c in grace"
        );
        assert!(dead.is_empty());
        assert_eq!(expired.len(), 1);
        assert_eq!((expired[0].0.as_slice(), expired[0].1.len), (&b"a"[..], 1));
    }

    #[test]
    fn output_is_cut_into_runs_of_the_target_size_in_key_order() {
        let keys: Vec<String> = (0..100).map(|i| format!("key{i:03}")).collect();
        let entries: Vec<(&str, Slot)> = keys.iter().map(|k| (k.as_str(), v(1))).collect();
        let all = run(1, &entries);
        let per_run = all.data_bytes() / 10;
        let spec = OutputSpec {
            ids: 10..30,
            target_bytes: per_run,
            bottom: false,
            fp_rate: 0.01,
            expiry: None,
        };
        let (out, dead, _) = compact(vec![run_source(&all, 0)], &spec);
        assert!(dead.is_empty());
        assert!((9..=11).contains(&out.len()), "{} runs", out.len());
        let ids: Vec<u64> = out.iter().map(KeyTable::id).collect();
        assert_eq!(ids, (10..10 + out.len() as u64).collect::<Vec<_>>());
        // Read back as one level: every key once, in order.
        let level: Vec<Arc<KeyTable>> = out.into_iter().map(Arc::new).collect();
        let mut c = LevelCursor::new(&level, b"");
        let mut seen = Vec::new();
        while let Some((k, _)) = c.current() {
            seen.push(String::from_utf8(k.to_vec()).unwrap_or_default());
            c.advance();
        }
        assert_eq!(seen, keys);
        // Seeking lands on the first key at or after the start, across run boundaries.
        let c = LevelCursor::new(&level, b"key0505");
        assert_eq!(
            c.current().map(|(k, _)| k.to_vec()),
            Some(b"key051".to_vec())
        );
        assert!(LevelCursor::new(&level, b"zzz").current().is_none());
        // With too few ids, the last run takes the rest.
        let few = OutputSpec { ids: 0..2, ..spec };
        let (out, _, _) = compact(vec![run_source(&all, 0)], &few);
        assert_eq!(out.len(), 2);
        assert_eq!(out.iter().map(KeyTable::len).sum::<usize>(), 100);
    }

    #[test]
    fn merge_interleaves_in_key_order() {
        let a = run(1, &[("b", v(1)), ("d", v(2))]);
        let b = run(2, &[("a", v(3)), ("c", v(4)), ("e", v(5))]);
        let mut m = Merge::new(vec![run_source(&a, 0), run_source(&b, 0)]);
        let mut keys: Vec<Vec<u8>> = Vec::new();
        while let Some((k, _)) = m.next() {
            keys.push(k.to_vec());
        }
        assert_eq!(keys, vec![&b"a"[..], b"b", b"c", b"d", b"e"]);
    }
}
