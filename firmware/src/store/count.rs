//! DBSIZE in O(1): the number of keys the drive holds, kept by the writer as its groups are
//! applied, instead of a walk over every keytable per DBSIZE (or per INFO).
//!
//! **What is counted.** User keys with a type record (`s`, `h`, `z`, `t` or `l`), expired or
//! not; [`super::Store::dbsize`] subtracts the keys whose deadline has passed and that are
//! not yet purged, so DBSIZE counts live keys only.
//!
//! **Who changes it.** Only the writer thread (`ls-writer`). A [`super::WriteGroup`] knows,
//! for every user key whose type records it writes, whether the key existed before the group
//! (the applied state, looked up once per key and cached; see
//! [`super::WriteGroup::assume_string`] for keys a group still in flight wrote) and whether it
//! exists after (its own records over that state). The difference is added when the group is
//! durable and applied, before its clients are answered: a client that has its SET's reply
//! and then sends DBSIZE counts its key. FLUSHALL sets it to zero.
//!
//! **When it is recomputed.** At open (one walk over the DRAM keytables, as start-up already
//! walks the deadlines), and after a group fails on the device: a later group may have
//! assumed what the failed one would have left (a plain SET over a key in flight counts the
//! key as existing). The count is then *stale*: DBSIZE walks the keytables as before, and the
//! writer recounts as soon as none of its groups is in flight.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The writer-kept number of keys (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct KeyCount {
    keys: AtomicU64,
    stale: AtomicBool,
}

impl KeyCount {
    /// A count of `keys`.
    pub(crate) fn new(keys: u64) -> KeyCount {
        KeyCount {
            keys: AtomicU64::new(keys),
            stale: AtomicBool::new(false),
        }
    }

    /// The count, `None` while it is stale.
    pub(crate) fn get(&self) -> Option<u64> {
        // Acquire pairs with `set`'s release: a reader that sees the flag down sees the count
        // stored before it.
        if self.stale.load(Ordering::Acquire) {
            return None;
        }
        Some(self.keys.load(Ordering::Relaxed))
    }

    /// Adds one applied group's change.
    pub(crate) fn add(&self, delta: i64) {
        if delta >= 0 {
            self.keys.fetch_add(delta.unsigned_abs(), Ordering::Relaxed);
        } else {
            // A count never goes below zero, even one that is wrong (and then stale).
            let down = delta.unsigned_abs();
            let _ = self
                .keys
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_sub(down))
                });
        }
    }

    /// Replaces the count with `keys` (a fresh walk, or zero after FLUSHALL) and clears the
    /// stale flag.
    pub(crate) fn set(&self, keys: u64) {
        self.keys.store(keys, Ordering::Relaxed);
        self.stale.store(false, Ordering::Release);
    }

    /// Marks the count as not to be trusted until [`KeyCount::set`].
    pub(crate) fn mark_stale(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// Whether the count waits for a recount.
    pub(crate) fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::KeyCount;

    #[test]
    fn a_stale_count_is_not_served_until_set_again() {
        let c = KeyCount::new(3);
        c.add(2);
        c.add(-1);
        assert_eq!(c.get(), Some(4));
        c.add(-10);
        assert_eq!(c.get(), Some(0), "never below zero");
        c.mark_stale();
        assert!(c.is_stale());
        assert_eq!(c.get(), None);
        c.set(7);
        assert_eq!((c.get(), c.is_stale()), (Some(7), false));
    }
}
