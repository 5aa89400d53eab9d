//! The memtable's newest-version index ([`NewestIndex`]): each key's newest version by hash,
//! and the garbage accounting of inserts that run in any order.

use dashmap::DashMap;

use super::key::MemKey;
use crate::keytable::Slot;

/// Each key's newest version in one memtable, by hash: a point lookup costs one hash probe
/// instead of a skip-list descent (which visits a few dozen nodes, most of them cache
/// misses, in a table of tens of thousands of versions). A short key sits in its bucket
/// ([`MemKey`]), so a probe that finds it loads no other memory. Inserters change the index
/// before they insert the version into the skip list; see the memtable's module docs for
/// why a reader at sequence number `s` may trust what it finds here whenever the entry's
/// sequence number is `s` or older.
#[derive(Debug)]
pub(super) struct NewestIndex {
    map: DashMap<MemKey, (u64, Slot), foldhash::fast::RandomState>,
}

impl NewestIndex {
    /// An empty index with room for `keys` keys before it grows.
    pub(super) fn with_capacity(keys: usize) -> NewestIndex {
        NewestIndex {
            map: DashMap::with_capacity_and_hasher(keys, foldhash::fast::RandomState::default()),
        }
    }

    /// Records version `seq` of `key`, which becomes the key's newest unless a newer one is
    /// already recorded (another batch's insert that ran first: inserts of different batches
    /// may run at the same time, in any order). Returns the key's copy for the table's other
    /// structures (a long key's one allocation, shared by every version of it in the
    /// table), whether the key is new to the table, and what the new version shadows: the
    /// newest version recorded before it when it is newer, or the new version itself when a
    /// newer one came first.
    ///
    /// The comparison and the update are one step under the map's shard lock, so of any
    /// set of versions of a key, each one but the newest is reported shadowed exactly once,
    /// whatever the order the inserts run in — except a version that points at the same
    /// value as the one that shadows it (a retime: only the deadline changed), which is not
    /// reported: its value is still live. The write path never lets a retime and the
    /// versions of its key trade places (`ApplyJob::after`), or a value would be reported
    /// twice: once through the retime, once by the version it overtook or that overtook it.
    ///
    /// `copy` makes the table's copy of the key, called only for a key new to the table.
    pub(super) fn record(
        &self,
        key: &[u8],
        copy: impl FnOnce() -> MemKey,
        seq: u64,
        slot: Slot,
    ) -> (MemKey, bool, Option<Slot>) {
        let update = |newest: &mut (u64, Slot)| {
            let (older, newer) = if newest.0 < seq {
                let old = newest.1;
                *newest = (seq, slot);
                (old, slot)
            } else {
                (slot, newest.1)
            };
            (older.ptr().is_none() || older.ptr() != newer.ptr()).then_some(older)
        };
        if let Some(mut e) = self.map.get_mut(key) {
            let shadowed = update(e.value_mut());
            return (e.key().clone(), false, shadowed);
        }
        let copy = copy();
        match self.map.entry(copy.clone()) {
            dashmap::Entry::Occupied(mut e) => {
                // Another insert of the key got in between: share its copy.
                let shadowed = update(e.get_mut());
                (e.key().clone(), false, shadowed)
            }
            dashmap::Entry::Vacant(e) => {
                e.insert((seq, slot));
                (copy, true, None)
            }
        }
    }

    /// The table's copy of `key`, if it holds the key.
    pub(super) fn key_copy(&self, key: &[u8]) -> Option<MemKey> {
        self.map.get(key).map(|e| e.key().clone())
    }

    /// The key's newest version, if the table holds one.
    pub(super) fn newest(&self, key: &[u8]) -> Option<(u64, Slot)> {
        self.map.get(key).map(|e| *e)
    }
}
