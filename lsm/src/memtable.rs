//! The memtable (L0 in the paper): recent writes as a sorted map from key to the pointer of
//! the value already placed in the value log, so values are never copied into it.
//!
//! **Concurrency.** One writer at a time (the engine's write lock serialises callers of
//! [`MemTable::insert`]) and any number of readers that take no lock at all. The map is a
//! lock-free skip list (`crossbeam-skiplist`) that is *insert-only*: every version of a key is
//! its own entry, ordered by key and then newest sequence number first, and nothing is
//! removed until the whole memtable is dropped (after it was flushed and the last reader that
//! could see it let go of its `Arc`). So:
//!
//! - a reader never sees a half-written entry (the skip list publishes a node whole);
//! - a reader reading at sequence number `s` ([`MemTable::get`], [`MemCursor`]) ignores
//!   every version newer than `s`. The engine publishes `s` only after a whole batch is in
//!   (batches take their sequence numbers in the order they are applied), so a reader sees a
//!   batch all or nothing, and two reads with the same `s` see the same memtable state;
//! - garbage accounting stays exact: the writer learns the version an insert shadows from
//!   the entry that follows the new one (no other writer can slip in between);
//! - a point lookup first asks the table's [`NewestIndex`] (a hash map of each key's newest
//!   version, changed only by the writer), so it costs one hash probe, not a skip-list
//!   descent. The writer records a version there and in the skip list, and publishes the
//!   batch's sequence number (a release store) after both; a reader loads
//!   that number `s` (acquire) before it looks. So every version numbered `s` or older is
//!   in the index when the reader looks (the map's shard lock orders the reader's probe
//!   after the writer's update), and the index's entry for a key is numbered at least as
//!   new as the newest version the reader may see: an entry numbered `s` or older *is* that
//!   version; a key absent from the index has no version the reader may see; only an entry
//!   newer than `s` (a batch applied after the reader's view was taken) sends the reader to
//!   the skip list, which finds the newest version numbered `s` or older.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use crossbeam_skiplist::map::Entry;
use crossbeam_skiplist::SkipMap;
use dashmap::DashMap;

use crate::keytable::Slot;
use crate::merge::Cursor;

/// Rough DRAM cost of one version (skip-list node share, sequence and slot; its key is
/// shared with the key's other versions and counted once, with the [`NewestIndex`] entry).
const ENTRY_OVERHEAD: usize = 64;

/// Bytes of memtable budget per key the [`NewestIndex`] is sized for up front (the cost of a
/// key with two versions and a short key; a table with more keys grows its index).
const INDEX_SIZING_BYTES_PER_KEY: usize = 2 * ENTRY_OVERHEAD + INDEX_OVERHEAD + 32;

/// Rough DRAM cost of one [`NewestIndex`] entry beyond its key copy (hash slot, sequence
/// number and slot).
const INDEX_OVERHEAD: usize = 48;

/// Each key's newest version in one memtable, by hash: a point lookup costs one hash probe
/// instead of a skip-list descent (which visits a few dozen nodes, most of them cache
/// misses, in a table of tens of thousands of versions). Only the single writer changes it,
/// after it inserted the version into the skip list; see the module docs for why a reader
/// at sequence number `s` may trust what it finds here whenever the entry's sequence
/// number is `s` or older.
#[derive(Debug)]
struct NewestIndex {
    map: DashMap<Arc<[u8]>, (u64, Slot), foldhash::fast::RandomState>,
}

impl NewestIndex {
    fn with_capacity(keys: usize) -> NewestIndex {
        NewestIndex {
            map: DashMap::with_capacity_and_hasher(keys, foldhash::fast::RandomState::default()),
        }
    }

    /// Records version `seq` of `key` as its newest. Returns the key's shared copy (every
    /// version of a key in the table shares one allocation with the index) and whether the
    /// key is new to the table.
    fn record(&self, key: Box<[u8]>, seq: u64, slot: Slot) -> (Arc<[u8]>, bool) {
        if let Some(mut e) = self.map.get_mut(&*key) {
            *e.value_mut() = (seq, slot);
            return (e.key().clone(), false);
        }
        let shared: Arc<[u8]> = Arc::from(key);
        self.map.insert(shared.clone(), (seq, slot));
        (shared, true)
    }

    /// The key's newest version, if the table holds one.
    fn newest(&self, key: &[u8]) -> Option<(u64, Slot)> {
        self.map.get(key).map(|e| *e)
    }
}

/// Sequence number that sees every version (the writer's own view).
pub const LATEST: u64 = u64::MAX;

/// A key version: ordered by key, then by sequence number, newest first.
#[derive(Debug, PartialEq, Eq)]
pub struct VersionKey {
    key: Arc<[u8]>,
    seq: u64,
}

/// A borrowed view of a key version, so lookups need no allocation (the skip list is
/// searched with `&dyn KeyVersion`, which every stored [`VersionKey`] can be borrowed as).
pub trait KeyVersion {
    /// The user key.
    fn user_key(&self) -> &[u8];
    /// The sequence number.
    fn seq(&self) -> u64;
}

impl KeyVersion for VersionKey {
    fn user_key(&self) -> &[u8] {
        &self.key
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

impl KeyVersion for (&[u8], u64) {
    fn user_key(&self) -> &[u8] {
        self.0
    }
    fn seq(&self) -> u64 {
        self.1
    }
}

impl Ord for dyn KeyVersion + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.user_key()
            .cmp(other.user_key())
            .then_with(|| other.seq().cmp(&self.seq()))
    }
}

impl PartialOrd for dyn KeyVersion + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn KeyVersion + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for dyn KeyVersion + '_ {}

impl Ord for VersionKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self as &dyn KeyVersion).cmp(other as &dyn KeyVersion)
    }
}

impl PartialOrd for VersionKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<'a> Borrow<dyn KeyVersion + 'a> for VersionKey {
    fn borrow(&self) -> &(dyn KeyVersion + 'a) {
        self
    }
}

/// Recent writes, every version of each key until the table is flushed and dropped.
#[derive(Debug)]
pub struct MemTable {
    map: SkipMap<VersionKey, Slot>,
    newest: NewestIndex,
    bytes: AtomicUsize,
    /// Distinct keys (counted by the single writer).
    keys: AtomicUsize,
}

impl Default for MemTable {
    fn default() -> Self {
        Self::new()
    }
}

impl MemTable {
    /// An empty table sized for the default memtable budget.
    pub fn new() -> Self {
        Self::with_budget(crate::config::DEFAULT_MEMTABLE_BYTES)
    }

    /// An empty table whose newest-version index is sized for `bytes` of entries (the
    /// engine's `memtable_bytes`).
    pub fn with_budget(bytes: usize) -> Self {
        MemTable {
            map: SkipMap::new(),
            newest: NewestIndex::with_capacity(bytes / INDEX_SIZING_BYTES_PER_KEY),
            bytes: AtomicUsize::new(0),
            keys: AtomicUsize::new(0),
        }
    }

    /// Adds version `seq` of `key` (newer than every version already in the table) and
    /// returns the version it shadows. Callers are serialised by the engine's write lock;
    /// readers may run concurrently.
    #[cfg(test)]
    pub fn insert(&self, key: &[u8], seq: u64, slot: Slot) -> Option<Slot> {
        self.insert_owned(key.into(), seq, slot)
    }

    /// As [`MemTable::insert`], taking the key's allocation (the write path hands over the
    /// copy it made when the batch was laid out: one allocation per key, not two).
    ///
    /// One skip-list search: versions are ordered newest first within a key and `seq` is
    /// newer than every version in the table, so the entry right after the new one is the
    /// version it shadows, if it is of the same key (no other writer inserts in between, and
    /// nothing is ever removed).
    pub fn insert_owned(&self, key: Box<[u8]>, seq: u64, slot: Slot) -> Option<Slot> {
        let len = key.len();
        // Index first, then the skip list; both before the batch is published (see the
        // module docs).
        let (key, new_key) = self.newest.record(key, seq, slot);
        let e = self.map.insert(VersionKey { key, seq }, slot);
        let shadowed = e
            .next()
            .filter(|n| n.key().user_key() == e.key().user_key())
            .map(|n| *n.value());
        let mut bytes = ENTRY_OVERHEAD;
        if new_key {
            bytes += len + INDEX_OVERHEAD;
        }
        if shadowed.is_none() {
            self.keys.fetch_add(1, AtomicOrdering::Relaxed);
        }
        self.bytes.fetch_add(bytes, AtomicOrdering::Relaxed);
        shadowed
    }

    /// The newest version of `key` at sequence number `seq` or before.
    pub fn get(&self, key: &[u8], seq: u64) -> Option<Slot> {
        let (newest_seq, slot) = self.newest.newest(key)?;
        if newest_seq <= seq {
            return Some(slot);
        }
        // A version newer than the reader's view came in since it was taken: find the
        // newest one it may see in the skip list.
        let probe: &dyn KeyVersion = &(key, seq);
        let e = self.map.lower_bound(Bound::Included(probe))?;
        (e.key().user_key() == key).then(|| *e.value())
    }

    /// The newest version of `key` (the writer's view).
    pub fn latest(&self, key: &[u8]) -> Option<Slot> {
        self.get(key, LATEST)
    }

    /// Approximate DRAM bytes.
    pub fn bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.keys.load(AtomicOrdering::Relaxed)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// A cursor over the newest version of each key at `seq` or before, from `start` on.
    pub fn cursor_from(&self, start: &[u8], seq: u64) -> MemCursor<'_> {
        let probe: &dyn KeyVersion = &(start, LATEST);
        let mut c = MemCursor {
            cur: self.map.lower_bound(Bound::Included(probe)),
            seq,
        };
        c.settle();
        c
    }

    /// Every key's newest version, in key order (for a flush: the table no longer changes).
    pub fn cursor(&self) -> MemCursor<'_> {
        let mut c = MemCursor {
            cur: self.map.front(),
            seq: LATEST,
        };
        c.settle();
        c
    }
}

/// A position in a [`MemTable`]: the newest version of one key visible at its sequence
/// number. It holds the skip-list entry it stands on (reference-counted), so the key it lends
/// stays valid while the cursor does not move.
pub struct MemCursor<'a> {
    cur: Option<Entry<'a, VersionKey, Slot>>,
    seq: u64,
}

impl MemCursor<'_> {
    /// Skips versions newer than the cursor's sequence number: it then stands on the newest
    /// visible version of its key (versions of a key are adjacent, newest first).
    fn settle(&mut self) {
        while let Some(e) = &self.cur {
            if e.key().seq <= self.seq {
                return;
            }
            self.cur = e.next();
        }
    }
}

impl Cursor for MemCursor<'_> {
    fn current(&self) -> Option<(&[u8], Slot)> {
        self.cur.as_ref().map(|e| (&*e.key().key, *e.value()))
    }

    fn advance(&mut self) {
        let Some(at) = self.cur.take() else {
            return;
        };
        // Past the older versions of the same key.
        let mut next = at.next();
        while let Some(e) = &next {
            if e.key().key != at.key().key {
                break;
            }
            next = e.next();
        }
        self.cur = next;
        self.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vlog_format::{ValueLoc, ValuePtr};

    fn v(n: u32) -> Slot {
        Slot::Value(ValuePtr {
            log_seg: n,
            loc: ValueLoc::Inline { page: 0, offset: 0 },
            len: n,
        })
    }

    fn keys_at(m: &MemTable, start: &[u8], seq: u64) -> Vec<(Vec<u8>, Slot)> {
        let mut c = m.cursor_from(start, seq);
        let mut out = Vec::new();
        while let Some((k, s)) = c.current() {
            out.push((k.to_vec(), s));
            c.advance();
        }
        out
    }

    #[test]
    fn reads_see_the_newest_version_at_their_sequence_number() {
        let m = MemTable::new();
        assert_eq!(m.insert(b"a", 1, v(1)), None);
        assert_eq!(m.insert(b"b", 2, v(2)), None);
        assert_eq!(
            m.insert(b"a", 3, v(3)),
            Some(v(1)),
            "the version it shadows"
        );
        assert_eq!(
            m.insert(b"ab", 4, Slot::Tombstone),
            None,
            "a longer key is another key"
        );
        assert_eq!(m.insert(b"a", 5, Slot::Tombstone), Some(v(3)));
        assert_eq!(m.insert(b"a", 6, v(6)), Some(Slot::Tombstone));
        assert_eq!(m.get(b"a", 1), Some(v(1)));
        assert_eq!(m.get(b"a", 2), Some(v(1)));
        assert_eq!(m.get(b"a", 3), Some(v(3)));
        assert_eq!(m.get(b"a", 5), Some(Slot::Tombstone));
        assert_eq!(m.get(b"a", LATEST), Some(v(6)));
        assert_eq!(m.get(b"a", 0), None);
        assert_eq!(m.get(b"b", 1), None);
        assert_eq!(m.get(b"c", LATEST), None);
        assert_eq!(m.len(), 3);
        assert_eq!(
            keys_at(&m, b"", LATEST),
            vec![
                (b"a".to_vec(), v(6)),
                (b"ab".to_vec(), Slot::Tombstone),
                (b"b".to_vec(), v(2))
            ]
        );
        assert_eq!(
            keys_at(&m, b"", 2),
            vec![(b"a".to_vec(), v(1)), (b"b".to_vec(), v(2))]
        );
        assert_eq!(keys_at(&m, b"aa", 3), vec![(b"b".to_vec(), v(2))]);
        assert_eq!(keys_at(&m, b"a", 0), vec![]);
    }

    #[test]
    fn point_lookups_see_the_newest_version_at_their_sequence_number() {
        let m = MemTable::with_budget(64 << 10);
        for i in 0..1000u32 {
            m.insert(format!("key{i}").as_bytes(), u64::from(i) + 1, v(i));
        }
        // A second version of every even key, newer than all the first ones.
        for i in (0..1000u32).step_by(2) {
            m.insert(
                format!("key{i}").as_bytes(),
                2000 + u64::from(i),
                v(i + 5000),
            );
        }
        for i in 0..1000u32 {
            let k = format!("key{i}");
            let newest = if i % 2 == 0 { v(i + 5000) } else { v(i) };
            assert_eq!(m.latest(k.as_bytes()), Some(newest));
            // A reader whose view predates the second versions sees the first ones (the
            // index holds the newer entry: the skip list answers).
            assert_eq!(m.get(k.as_bytes(), 1999), Some(v(i)));
            // Before the key's first version it sees nothing.
            assert_eq!(m.get(k.as_bytes(), u64::from(i)), None);
        }
        assert!((0..1000u32).all(|i| m.latest(format!("other{i}").as_bytes()).is_none()));
    }

    #[test]
    fn readers_run_while_the_writer_inserts() {
        let m = std::sync::Arc::new(MemTable::new());
        let w = m.clone();
        let writer = std::thread::spawn(move || {
            for seq in 1..=20_000u64 {
                let k = (seq % 100).to_be_bytes();
                w.insert(&k, seq, v(seq as u32));
            }
        });
        // Every read at a sequence number sees a version no newer than it, and the newest
        // key order never breaks.
        while !writer.is_finished() {
            let mut c = m.cursor_from(b"", 5_000);
            let mut last: Option<Vec<u8>> = None;
            while let Some((k, s)) = c.current() {
                assert!(last.as_deref() < Some(k));
                if let Slot::Value(p) = s {
                    assert!(p.len <= 5_000);
                }
                last = Some(k.to_vec());
                c.advance();
            }
        }
        assert!(writer.join().is_ok());
        assert_eq!(m.len(), 100);
    }
}
