//! The shape of the keytable levels, and the queries on it that lookups, merges and
//! compaction share.
//!
//! **The invariant.** L0 holds whole flushed runs, newest first; they may overlap one
//! another. Every deeper level is *partitioned*: a set of non-empty runs (keytable files of
//! about `EngineConfig::keytable_bytes` each) whose key ranges do not overlap, ordered by
//! key. So a key has at most one candidate run per deeper level, found by a binary search on
//! the runs' last keys, and a compaction can take one run and only the runs of the next level
//! it overlaps (see `compaction.rs`), never a whole level.
//!
//! Who keeps it: only the maintenance lock's holder changes levels (flush adds to L0;
//! compaction replaces inputs with outputs that lie inside the inputs' key hull, which no
//! other run of the output level overlaps, see [`overlapping`]); recovery checks it with
//! [`check_partitioned`] and refuses a manifest that breaks it.

use std::ops::Range;
use std::sync::Arc;

use crate::keytable::KeyTable;

/// One level's runs.
pub(super) type Level = Vec<Arc<KeyTable>>;

/// The first key of a run (empty for an empty run, which deeper levels never hold).
fn first(r: &KeyTable) -> &[u8] {
    r.range().map_or(&[][..], |(f, _)| f)
}

/// The last key of a run (empty for an empty run).
fn last(r: &KeyTable) -> &[u8] {
    r.range().map_or(&[][..], |(_, l)| l)
}

/// The run of a partitioned level whose range holds `key`, if any.
pub(super) fn run_covering<'a>(level: &'a [Arc<KeyTable>], key: &[u8]) -> Option<&'a KeyTable> {
    let i = level.partition_point(|r| last(r) < key);
    let r = level.get(i)?;
    (first(r) <= key).then_some(r.as_ref())
}

/// The runs that may hold `key`, newest first: every L0 run, then at most one run per
/// deeper level.
pub(super) fn runs_for_key<'a>(
    levels: &'a [Level],
    key: &'a [u8],
) -> impl Iterator<Item = &'a KeyTable> + 'a {
    let (l0, deeper): (&[Level], &[Level]) = match levels.split_first() {
        Some((l0, deeper)) => (std::slice::from_ref(l0), deeper),
        None => (&[], &[]),
    };
    l0.iter()
        .flatten()
        .map(AsRef::as_ref)
        .chain(deeper.iter().filter_map(move |l| run_covering(l, key)))
}

/// The runs of a partitioned level that overlap `[lo, hi]`, as an index range.
pub(super) fn overlapping(level: &[Arc<KeyTable>], lo: &[u8], hi: &[u8]) -> Range<usize> {
    let start = level.partition_point(|r| last(r) < lo);
    let end = level.partition_point(|r| first(r) <= hi);
    start..end.max(start)
}

/// The smallest and largest key over `runs` (`None` if all are empty).
pub(super) fn hull<'a>(
    runs: impl IntoIterator<Item = &'a Arc<KeyTable>>,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut out: Option<(&[u8], &[u8])> = None;
    for (f, l) in runs.into_iter().filter_map(|r| r.range()) {
        out = Some(match out {
            None => (f, l),
            Some((of, ol)) => (of.min(f), ol.max(l)),
        });
    }
    out.map(|(f, l)| (f.to_vec(), l.to_vec()))
}

/// Where run `t` goes in a partitioned level (by its first key).
pub(super) fn insert_position(level: &[Arc<KeyTable>], t: &KeyTable) -> usize {
    level.partition_point(|r| first(r) < first(t))
}

/// Whether runs `a` and `b` share a key range.
pub(super) fn ranges_overlap(a: &KeyTable, b: &KeyTable) -> bool {
    match (a.range(), b.range()) {
        (Some((af, al)), Some((bf, bl))) => af <= bl && bf <= al,
        _ => false,
    }
}

/// Checks that a deeper level is partitioned: no empty run, ordered by key, no overlap.
///
/// # Errors
/// A description of the first violation.
pub(super) fn check_partitioned(level: &[Arc<KeyTable>]) -> std::result::Result<(), String> {
    if let Some(r) = level.iter().find(|r| r.is_empty()) {
        return Err(format!("run {} is empty", r.id()));
    }
    for w in level.windows(2) {
        if last(&w[0]) >= first(&w[1]) {
            return Err(format!(
                "runs {} and {} overlap or are out of order",
                w[0].id(),
                w[1].id()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keytable::{KeyTableBuilder, Slot};

    fn run(id: u64, keys: &[&str]) -> Arc<KeyTable> {
        let mut b = KeyTableBuilder::new(id);
        for k in keys {
            b.push(k.as_bytes(), &Slot::Tombstone, None);
        }
        Arc::new(b.finish(0.01))
    }

    #[test]
    fn a_key_has_one_candidate_per_partitioned_level() {
        let level = vec![run(1, &["b", "d"]), run(2, &["f", "h"]), run(3, &["k"])];
        assert!(check_partitioned(&level).is_ok());
        let id = |k: &str| run_covering(&level, k.as_bytes()).map(|r| r.id());
        assert_eq!(id("a"), None);
        assert_eq!(id("b"), Some(1));
        assert_eq!(id("c"), Some(1));
        assert_eq!(id("e"), None, "between runs");
        assert_eq!(id("h"), Some(2));
        assert_eq!(id("k"), Some(3));
        assert_eq!(id("z"), None);
        let levels = vec![vec![run(9, &["a", "z"]), run(8, &["c"])], level];
        let ids: Vec<u64> = runs_for_key(&levels, b"g").map(KeyTable::id).collect();
        assert_eq!(
            ids,
            vec![9, 8, 2],
            "all of L0, newest first, then the covering run"
        );
    }

    #[test]
    fn overlapping_takes_exactly_the_runs_a_range_touches() {
        let level = vec![
            run(1, &["b", "d"]),
            run(2, &["f", "h"]),
            run(3, &["k", "m"]),
        ];
        assert_eq!(overlapping(&level, b"a", b"a"), 0..0);
        assert_eq!(overlapping(&level, b"a", b"b"), 0..1);
        assert_eq!(overlapping(&level, b"e", b"e"), 1..1);
        assert_eq!(overlapping(&level, b"c", b"g"), 0..2);
        assert_eq!(overlapping(&level, b"i", b"z"), 2..3);
        assert_eq!(overlapping(&level, b"n", b"z"), 3..3);
        assert_eq!(hull(&level[1..]), Some((b"f".to_vec(), b"m".to_vec())));
        assert_eq!(insert_position(&level, &run(4, &["e"])), 1);
    }

    #[test]
    fn overlapping_or_unordered_runs_are_refused() {
        assert!(check_partitioned(&[run(1, &["b", "d"]), run(2, &["d", "e"])]).is_err());
        assert!(check_partitioned(&[run(1, &["f"]), run(2, &["a"])]).is_err());
        assert!(check_partitioned(&[run(1, &[])]).is_err());
        assert!(ranges_overlap(&run(1, &["a", "c"]), &run(2, &["c"])));
        assert!(!ranges_overlap(&run(1, &["a", "b"]), &run(2, &["c"])));
    }
}
