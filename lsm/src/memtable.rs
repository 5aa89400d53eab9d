//! The memtable (L0 in the paper): recent writes as a sorted map from key to the pointer of
//! the value already placed in the value log, so values are never copied into it.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::keytable::Slot;

/// Recent writes, newest version of each key.
#[derive(Debug, Default)]
pub struct MemTable {
    map: BTreeMap<Vec<u8>, Slot>,
    bytes: usize,
}

/// Rough DRAM cost of one entry beyond its key (map node share and slot).
const ENTRY_OVERHEAD: usize = 48;

impl MemTable {
    /// Sets `key`; returns the slot it replaced.
    pub fn insert(&mut self, key: &[u8], slot: Slot) -> Option<Slot> {
        match self.map.get_mut(key) {
            Some(s) => Some(std::mem::replace(s, slot)),
            None => {
                self.bytes += key.len() + ENTRY_OVERHEAD;
                self.map.insert(key.to_vec(), slot);
                None
            }
        }
    }

    /// The slot of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        self.map.get(key).copied()
    }

    /// Approximate DRAM bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries from `start` on, in key order.
    pub fn range_from<'a>(&'a self, start: &[u8]) -> impl Iterator<Item = (&'a [u8], Slot)> + 'a {
        self.map
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .map(|(k, s)| (k.as_slice(), *s))
    }

    /// All entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Slot)> {
        self.map.iter().map(|(k, s)| (k.as_slice(), *s))
    }

    /// Empties the table.
    pub fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}
