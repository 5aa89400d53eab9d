//! The memtable (L0 in the paper): recent writes as a sorted map from key to the pointer of
//! the value already placed in the value log, so values are never copied into it.
//!
//! **Concurrency.** Any number of inserters and any number of readers, none of which takes
//! a lock of the table's own beyond a hash-map shard's for a moment. The engine inserts the
//! batches it applies from several threads at once, each batch's versions under sequence
//! numbers of its own (distinct, and in the order the batches were laid out), and publishes
//! a sequence number only once every batch numbered up to it is wholly in (see
//! `engine::write`). The map is a lock-free skip list (`crossbeam-skiplist`) that is
//! *insert-only*: every version of a key is its own entry, ordered by key and then newest
//! sequence number first, and nothing is removed until the whole memtable is dropped (after
//! it was flushed and the last reader that could see it let go of its `Arc`). So:
//!
//! - a reader never sees a half-written entry (the skip list publishes a node whole);
//! - a reader reading at sequence number `s` ([`MemTable::get`], [`MemCursor`]) ignores
//!   every version newer than `s`. Since `s` is published only after every batch numbered
//!   up to it is in, a reader sees a batch all or nothing, and two reads with the same `s`
//!   see the same memtable state, whatever else is being inserted meanwhile;
//! - garbage accounting stays exact whatever order inserts run in: the table's
//!   [`NewestIndex`] (a hash map of each key's newest version) decides what an insert
//!   shadows, comparing sequence numbers under the map's shard lock: the previous newest
//!   version when the new one is newer, else the new version itself (a later batch's insert
//!   of the key ran first). Each version but a key's newest is reported exactly once;
//! - a point lookup first asks the [`NewestIndex`], so it costs one hash probe, not a
//!   skip-list descent. An inserter records a version there and then in the skip list, both
//!   before its batch's sequence number is published (a release store); a reader loads
//!   that number `s` (acquire) before it looks. So every version numbered `s` or older is
//!   in both when the reader looks (the map's shard lock orders the reader's probe after
//!   the update), and the index's entry for a key is numbered at least as new as the newest
//!   version the reader may see: an entry numbered `s` or older *is* that version; a key
//!   absent from the index has no version the reader may see; only an entry newer than `s`
//!   (a batch not yet published to the reader) sends the reader to the skip list, which
//!   finds the newest version numbered `s` or older.

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
/// misses, in a table of tens of thousands of versions). Inserters change it before they
/// insert the version into the skip list; see the module docs for why a reader
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

    /// Records version `seq` of `key`, which becomes the key's newest unless a newer one is
    /// already recorded (another batch's insert that ran first: inserts of different batches
    /// may run at the same time, in any order). Returns the key's shared copy (every version
    /// of a key in the table shares one allocation with the index), whether the key is new
    /// to the table, and what the new version shadows: the newest version recorded before
    /// it when it is newer, or the new version itself when a newer one came first.
    ///
    /// The comparison and the update are one step under the map's shard lock, so of any
    /// set of versions of a key, each one but the newest is reported shadowed exactly once,
    /// whatever the order the inserts run in.
    fn record(&self, key: Box<[u8]>, seq: u64, slot: Slot) -> (Arc<[u8]>, bool, Option<Slot>) {
        let update = |newest: &mut (u64, Slot)| {
            if newest.0 < seq {
                let old = newest.1;
                *newest = (seq, slot);
                Some(old)
            } else {
                Some(slot)
            }
        };
        if let Some(mut e) = self.map.get_mut(&*key) {
            let shadowed = update(e.value_mut());
            return (e.key().clone(), false, shadowed);
        }
        let shared: Arc<[u8]> = Arc::from(key);
        match self.map.entry(shared.clone()) {
            dashmap::Entry::Occupied(mut e) => {
                // Another insert of the key got in between: share its copy.
                let shadowed = update(e.get_mut());
                (e.key().clone(), false, shadowed)
            }
            dashmap::Entry::Vacant(e) => {
                e.insert((seq, slot));
                (shared, true, None)
            }
        }
    }

    /// The key's newest version, if the table holds one.
    fn newest(&self, key: &[u8]) -> Option<(u64, Slot)> {
        self.map.get(key).map(|e| *e)
    }
}

/// Sequence number that sees every version (the writer's own view).
pub const LATEST: u64 = u64::MAX;

/// A key's first 16 bytes as two big-endian words (zero-padded): comparing them orders keys
/// as their bytes do, except that a tie (equal words) needs the whole keys compared. Kept in
/// each entry, so most comparisons of a skip-list search touch no key allocation.
pub type KeyPrefix = [u64; 2];

/// The [`KeyPrefix`] of `key`.
pub fn key_prefix(key: &[u8]) -> KeyPrefix {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        if let Some(rest) = key.get(at..) {
            let n = rest.len().min(8);
            w[..n].copy_from_slice(&rest[..n]);
        }
        u64::from_be_bytes(w)
    };
    [word(0), word(8)]
}

/// A key version: ordered by key, then by sequence number, newest first.
#[derive(Debug, PartialEq, Eq)]
pub struct VersionKey {
    prefix: KeyPrefix,
    key: Arc<[u8]>,
    seq: u64,
}

/// A borrowed view of a key version, so lookups need no allocation (the skip list is
/// searched with `&dyn KeyVersion`, which every stored [`VersionKey`] can be borrowed as).
pub trait KeyVersion {
    /// The key's [`KeyPrefix`].
    fn prefix(&self) -> KeyPrefix;
    /// The user key.
    fn user_key(&self) -> &[u8];
    /// The sequence number.
    fn seq(&self) -> u64;
}

impl KeyVersion for VersionKey {
    fn prefix(&self) -> KeyPrefix {
        self.prefix
    }
    fn user_key(&self) -> &[u8] {
        &self.key
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// A search key: a borrowed key, its prefix (computed once per search) and a sequence number.
struct Probe<'a> {
    prefix: KeyPrefix,
    key: &'a [u8],
    seq: u64,
}

impl<'a> Probe<'a> {
    fn new(key: &'a [u8], seq: u64) -> Probe<'a> {
        Probe {
            prefix: key_prefix(key),
            key,
            seq,
        }
    }
}

impl KeyVersion for Probe<'_> {
    fn prefix(&self) -> KeyPrefix {
        self.prefix
    }
    fn user_key(&self) -> &[u8] {
        self.key
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

impl Ord for dyn KeyVersion + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix()
            .cmp(&other.prefix())
            .then_with(|| self.user_key().cmp(other.user_key()))
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
    /// Distinct keys (counted by the insert that brought each key in).
    keys: AtomicUsize,
    /// [`MemTable::key_index`]: the distinct keys in order when it was built, and how many
    /// the table held then. Built only when a sampler asks.
    key_index: parking_lot::Mutex<Option<(usize, KeyIndex)>>,
}

/// A memtable's distinct keys in order, sharing the table's key allocations
/// ([`MemTable::key_index`]).
pub type KeyIndex = Arc<Vec<Arc<[u8]>>>;

/// Versions a memtable may gain before its [`MemTable::key_index`] is rebuilt, on top of an
/// eighth of what it held (so a small table is not walked again for every new key).
pub const KEY_INDEX_SLACK: usize = 64;

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
            key_index: parking_lot::Mutex::new(None),
        }
    }

    /// Adds version `seq` of `key` and returns the version it shadows (see
    /// [`MemTable::insert_owned`]).
    #[cfg(test)]
    pub fn insert(&self, key: &[u8], seq: u64, slot: Slot) -> Option<Slot> {
        self.insert_owned(key.into(), seq, slot)
    }

    /// Adds version `seq` of `key` (no version of the key with that number is in the table),
    /// taking the key's allocation (the write path hands over the copy it made when the
    /// batch was laid out), and returns the version that is now shadowed: the key's newest
    /// version before this one, or this one itself when a newer version is already in (a
    /// later batch whose insert ran first). Callers may run concurrently (see the module
    /// docs): the [`NewestIndex`] decides what is shadowed, one key at a time, and the skip
    /// list takes concurrent inserts of distinct entries.
    pub fn insert_owned(&self, key: Box<[u8]>, seq: u64, slot: Slot) -> Option<Slot> {
        let len = key.len();
        // Index first, then the skip list; both before the batch is published (see the
        // module docs).
        let (key, new_key, shadowed) = self.newest.record(key, seq, slot);
        self.map.insert(
            VersionKey {
                prefix: key_prefix(&key),
                key,
                seq,
            },
            slot,
        );
        let mut bytes = ENTRY_OVERHEAD;
        if new_key {
            bytes += len + INDEX_OVERHEAD;
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
        let probe = Probe::new(key, seq);
        let probe: &dyn KeyVersion = &probe;
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
        let probe = Probe::new(start, LATEST);
        let probe: &dyn KeyVersion = &probe;
        let mut c = MemCursor {
            cur: self.map.lower_bound(Bound::Included(probe)),
            seq,
        };
        c.settle();
        c
    }

    /// The table's distinct keys in order (deleted ones too: a tombstone is a key here), so
    /// a sampler can draw one uniformly by index ([`crate::Engine::sample_key`]). It is a
    /// snapshot, rebuilt (one walk over the versions, the keys' allocations shared, not
    /// copied) once the table holds more than an eighth more versions (and at least
    /// [`KEY_INDEX_SLACK`] more) than at the last build: built only when asked for, and
    /// O(1) amortised per version inserted after that; keys inserted since are not in it.
    /// It takes about 16 bytes per key, not counted in [`MemTable::bytes`].
    pub fn key_index(&self) -> KeyIndex {
        let n = self.map.len();
        let mut index = self.key_index.lock();
        if let Some((at, keys)) = index.as_ref() {
            if n <= at + at / 8 + KEY_INDEX_SLACK {
                return keys.clone();
            }
        }
        let mut keys: Vec<Arc<[u8]>> = Vec::with_capacity(n);
        for e in self.map.iter() {
            let k = &e.key().key;
            if keys.last().is_none_or(|last| last != k) {
                keys.push(k.clone());
            }
        }
        let keys = Arc::new(keys);
        *index = Some((n, keys.clone()));
        keys
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
    fn the_key_index_lists_each_key_once_in_order_and_follows_growth() {
        let m = MemTable::new();
        for (i, k) in [b"b", b"a", b"c"].iter().enumerate() {
            m.insert(*k, i as u64 + 1, v(1));
        }
        m.insert(b"a", 9, Slot::Tombstone);
        let index = m.key_index();
        let keys: Vec<&[u8]> = index.iter().map(|k| &**k).collect();
        assert_eq!(keys, vec![&b"a"[..], b"b", b"c"]);
        // Grown by less than the slack: the same snapshot.
        m.insert(b"d", 10, v(1));
        assert_eq!(m.key_index().len(), 3);
        // Grown past it: rebuilt.
        for i in 0..KEY_INDEX_SLACK as u64 {
            m.insert(b"e", 11 + i, v(1));
        }
        assert_eq!(m.key_index().len(), 5);
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

    proptest::proptest! {
        /// The prefix words order keys as their bytes do, and the entries' order is the
        /// keys' byte order (zero bytes and keys that are prefixes of others included).
        #[test]
        fn entries_order_as_key_bytes(
            a in proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(0u8), proptest::strategy::Just(1u8), proptest::num::u8::ANY], 0..24),
            b in proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(0u8), proptest::strategy::Just(1u8), proptest::num::u8::ANY], 0..24),
        ) {
            let (pa, pb) = (key_prefix(&a), key_prefix(&b));
            if pa != pb {
                proptest::prop_assert_eq!(pa.cmp(&pb), a.cmp(&b));
            }
            let (x, y) = (Probe::new(&a, 1), Probe::new(&b, 1));
            let (x, y): (&dyn KeyVersion, &dyn KeyVersion) = (&x, &y);
            proptest::prop_assert_eq!(x.cmp(y), a.cmp(&b));
        }
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

    /// Inserts of different batches run at once and in any order: every version but each
    /// key's newest is reported shadowed exactly once, the newest is what reads see, and
    /// each key is counted once.
    #[test]
    fn concurrent_inserts_report_each_shadowed_version_once() {
        const THREADS: u64 = 4;
        const PER_THREAD: u64 = 5_000;
        const KEYS: u64 = 64;
        for round in 0..4u64 {
            let m = std::sync::Arc::new(MemTable::with_budget(1 << 20));
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        let mut shadowed = Vec::new();
                        for i in 0..PER_THREAD {
                            // Distinct sequence numbers, interleaved across threads.
                            let seq = 1 + i * THREADS + t;
                            let k = ((seq * 7 + round) % KEYS).to_be_bytes();
                            if let Some(s) = m.insert(&k, seq, v(seq as u32)) {
                                shadowed.push(s);
                            }
                        }
                        shadowed
                    })
                })
                .collect();
            let mut shadowed: Vec<Slot> = handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect();
            let total = THREADS * PER_THREAD;
            let mut newest = std::collections::BTreeMap::new();
            for seq in 1..=total {
                newest.insert((seq * 7 + round) % KEYS, seq);
            }
            let mut expected: Vec<Slot> = (1..=total)
                .filter(|seq| newest.get(&((seq * 7 + round) % KEYS)) != Some(seq))
                .map(|seq| v(seq as u32))
                .collect();
            let order = |s: &Slot| match s {
                Slot::Value(p) => p.len,
                _ => u32::MAX,
            };
            shadowed.sort_by_key(order);
            expected.sort_by_key(order);
            assert_eq!(shadowed, expected, "round {round}");
            assert_eq!(m.len() as u64, KEYS);
            for (k, seq) in &newest {
                assert_eq!(m.latest(&k.to_be_bytes()), Some(v(*seq as u32)));
                // An older view still finds the newest version at or before it.
                assert_eq!(m.get(&k.to_be_bytes(), *seq - 1).is_some(), *seq > KEYS);
            }
        }
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
