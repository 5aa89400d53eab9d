//! Merging sorted sources (the memtable and keytable runs) in key order, newest version
//! first: the basis of range reads and of compaction.

use std::sync::Arc;

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
}

/// Entries of a run from index `from` on.
pub fn run_source(t: &KeyTable, from: usize) -> Source<'_> {
    Box::new(RunCursor { t, i: from })
}

/// Merges sources; `sources[0]` is the newest. Yields each key once with its newest slot, and
/// hands every older, shadowed slot of it to `shadowed`. The key yielded is lent from its
/// source until the next call. Sources are few (the memtables and a handful of runs per
/// level), so the smallest key is found by a scan rather than a heap.
pub struct Merge<'a> {
    sources: Vec<Source<'a>>,
    /// The source whose entry was yielded last: it moves on at the next call.
    yielded: Option<usize>,
}

impl<'a> Merge<'a> {
    /// A merge over `sources`, newest first.
    pub fn new(sources: Vec<Source<'a>>) -> Self {
        Merge {
            sources,
            yielded: None,
        }
    }

    /// The next key with its newest slot; older versions go to `shadowed`.
    pub fn next_with(&mut self, mut shadowed: impl FnMut(&[u8], Slot)) -> Option<(&[u8], Slot)> {
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
        for r in best + 1..self.sources.len() {
            while let (Some((k, s)), Some((bk, _))) =
                (self.sources[r].current(), self.sources[best].current())
            {
                if k != bk {
                    break;
                }
                shadowed(k, s);
                self.sources[r].advance();
            }
        }
        self.yielded = Some(best);
        self.sources[best].current()
    }

    /// The next key with its newest slot.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(&[u8], Slot)> {
        self.next_with(|_, _| {})
    }
}

/// A value made garbage by a compaction: its key length (for the record size) and pointer.
pub type Invalidated = (usize, ValuePtr);

/// Merges runs (newest first) into one run. Shadowed values are returned as invalidated;
/// with `bottom` (nothing older exists below) tombstones are dropped too.
pub fn compact(
    runs: &[Arc<KeyTable>],
    id: u64,
    bottom: bool,
    fp_rate: f64,
) -> (KeyTable, Vec<Invalidated>) {
    let sources = runs.iter().map(|r| run_source(r, 0)).collect();
    let mut merge = Merge::new(sources);
    let mut out = KeyTableBuilder::new(id);
    let mut dead = Vec::new();
    loop {
        let next = merge.next_with(|k, s| {
            if let Slot::Value(p) = s {
                dead.push((k.len(), p));
            }
        });
        let Some((key, slot)) = next else { break };
        if bottom && slot == Slot::Tombstone {
            continue;
        }
        out.push(key, &slot);
    }
    (out.finish(fp_rate), dead)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vlog_format::ValueLoc;

    fn v(n: u32) -> Slot {
        Slot::Value(ValuePtr {
            log_seg: n,
            loc: ValueLoc::Inline { page: 0, offset: 0 },
            len: n,
        })
    }

    fn run(id: u64, entries: &[(&str, Slot)]) -> Arc<KeyTable> {
        let mut b = KeyTableBuilder::new(id);
        for (k, s) in entries {
            b.push(k.as_bytes(), s);
        }
        Arc::new(b.finish(0.01))
    }

    #[test]
    fn newest_wins_and_shadowed_values_are_invalidated() {
        let new = run(2, &[("a", v(10)), ("c", Slot::Tombstone)]);
        let old = run(1, &[("a", v(1)), ("b", v(2)), ("c", v(3))]);
        let (t, dead) = compact(&[new.clone(), old.clone()], 3, false, 0.01);
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(b"a"), Some(v(10)));
        assert_eq!(t.get(b"c"), Some(Slot::Tombstone));
        let mut lens: Vec<u32> = dead.iter().map(|(_, p)| p.len).collect();
        lens.sort();
        assert_eq!(lens, vec![1, 3]);
        let (t, _) = compact(&[new, old], 4, true, 0.01);
        assert_eq!(t.len(), 2, "tombstone dropped at the bottom");
        assert_eq!(t.get(b"c"), None);
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
