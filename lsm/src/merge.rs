//! Merging sorted sources (the memtable and keytable runs) in key order, newest version
//! first: the basis of range reads and of compaction.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::keytable::{KeyTable, KeyTableBuilder, Slot};
use crate::vlog_format::ValuePtr;

/// A sorted source of (key, slot).
pub type Source<'a> = Box<dyn Iterator<Item = (&'a [u8], Slot)> + 'a>;

/// Entries of a run from index `from` on.
pub fn run_source(t: &KeyTable, from: usize) -> Source<'_> {
    Box::new((from..t.len()).map(move |i| (t.key(i), t.slot(i))))
}

/// Merges sources; `sources[0]` is the newest. Yields each key once with its newest slot, and
/// hands every older, shadowed slot of it to `shadowed`.
pub struct Merge<'a> {
    sources: Vec<Source<'a>>,
    heads: Vec<Option<(&'a [u8], Slot)>>,
    heap: BinaryHeap<Reverse<(&'a [u8], usize)>>,
}

impl<'a> Merge<'a> {
    /// A merge over `sources`, newest first.
    pub fn new(mut sources: Vec<Source<'a>>) -> Self {
        let mut heads = Vec::with_capacity(sources.len());
        let mut heap = BinaryHeap::new();
        for (rank, s) in sources.iter_mut().enumerate() {
            let h = s.next();
            if let Some((k, _)) = h {
                heap.push(Reverse((k, rank)));
            }
            heads.push(h);
        }
        Merge {
            sources,
            heads,
            heap,
        }
    }

    fn advance(&mut self, rank: usize) -> Option<(&'a [u8], Slot)> {
        let cur = self.heads[rank].take();
        let next = self.sources[rank].next();
        if let Some((k, _)) = next {
            self.heap.push(Reverse((k, rank)));
        }
        self.heads[rank] = next;
        cur
    }

    /// The next key with its newest slot; older versions go to `shadowed`.
    pub fn next_with(
        &mut self,
        mut shadowed: impl FnMut(&'a [u8], Slot),
    ) -> Option<(&'a [u8], Slot)> {
        let Reverse((key, rank)) = self.heap.pop()?;
        let newest = self.advance(rank)?;
        while let Some(Reverse((k, r))) = self.heap.peek().copied() {
            if k != key {
                break;
            }
            self.heap.pop();
            if let Some((k, s)) = self.advance(r) {
                shadowed(k, s);
            }
        }
        Some(newest)
    }
}

impl<'a> Iterator for Merge<'a> {
    type Item = (&'a [u8], Slot);
    fn next(&mut self) -> Option<Self::Item> {
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
        let keys: Vec<&[u8]> = Merge::new(vec![run_source(&a, 0), run_source(&b, 0)])
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, vec![&b"a"[..], b"b", b"c", b"d", b"e"]);
    }
}
