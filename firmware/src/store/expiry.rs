//! Deadlines of keys of every type: kept in the keytable entry of the key's type record
//! (`lsm::expiry`: [`lsm::WriteOp::PutUntil`], [`lsm::WriteOp::Retime`]), so they cost no
//! record of their own and are exact after a restart; the DRAM index of the deadlines not
//! yet acted on ([`Deadlines`], by key and by time); TTL and its family, EXPIRE/PERSIST in a
//! group; and the sweep.
//!
//! **Reads.** A key whose deadline has passed is no key to every read: the engine hides an
//! expired entry from every read path (GET's asynchronous read, ranges, SCAN, KEYS,
//! counts), and the store judges a type lookup against the entry's deadline at the
//! command's fixed instant ([`Store::kind_at`]); reads that go straight to the engine also
//! ask the index first (one hash lookup, none when no key has a deadline).
//!
//! **Strings cost no sweep.** An expired string's entry is dropped by compaction when it
//! meets nothing older below it ([`StringsExpire`], the engine's expiry policy), and its value
//! becomes garbage that garbage collection takes back. The writer's sweep only lets go of
//! it ([`WriteGroup::forget_expired`]: the key count and the index, no engine write), so a
//! million expiring strings cost no deletes. **Collections** own other records (a hash's
//! fields): their header stays until the sweep ([`WriteGroup::expire`]) or the next command
//! that writes the name ([`WriteGroup::purge_expired`]) deletes every record, so a key
//! created under an expired name never sees the old key's fields, members or items.
//!
//! A deadline never outlives its key: deleting a key's type record deletes its entry, and
//! with it the deadline ([`WriteGroup::del`]); writing a type record again writes the key's
//! deadline into its new entry (HSET keeps a hash's deadline, as in Redis).

use std::collections::BTreeSet;
use std::num::NonZeroU64;

use foldhash::{HashMap, HashMapExt};
use lsm::{Engine, WriteOp};

use super::{now_ms, Result, Store, StoreError, WriteGroup, DELETE_CHUNK};
use crate::keyspace::{self as ks, EXPIRY};

/// The drive's expiry policy for the engine: an expired string's entry may be dropped by
/// compaction (the string owns nothing else); a collection's header stays until the
/// writer has deleted its members with it.
#[derive(Debug, Default, Clone, Copy)]
pub struct StringsExpire;

impl lsm::ExpiryPolicy for StringsExpire {
    fn may_drop(&self, key: &[u8]) -> bool {
        key.first() == Some(&ks::STRING)
    }
}

/// `deadline` as an entry's deadline (0 is never written: unix ms 0 is long past, and 1
/// stands in for it).
pub(super) fn entry_deadline(deadline: u64) -> NonZeroU64 {
    NonZeroU64::new(deadline).unwrap_or(NonZeroU64::MIN)
}

/// The deadlines in DRAM: each key's (for the lazy check on every read, one hash lookup)
/// and the same ordered by time, so the sweep and DBSIZE find the keys that are due in
/// O(due) instead of visiting every key that has a deadline.
#[derive(Default)]
pub(super) struct Deadlines {
    by_key: HashMap<Vec<u8>, u64>,
    by_time: BTreeSet<(u64, Vec<u8>)>,
}

impl Deadlines {
    /// An empty index.
    pub(super) fn new() -> Deadlines {
        Deadlines {
            by_key: HashMap::new(),
            by_time: BTreeSet::new(),
        }
    }

    /// `key`'s deadline (unix ms), if it has one.
    pub(super) fn get(&self, key: &[u8]) -> Option<&u64> {
        self.by_key.get(key)
    }

    /// Sets `key`'s deadline (replacing the one it had).
    pub(super) fn insert(&mut self, key: Vec<u8>, deadline: u64) {
        if let Some(old) = self.by_key.insert(key.clone(), deadline) {
            self.by_time.remove(&(old, key.clone()));
        }
        self.by_time.insert((deadline, key));
    }

    /// Forgets `key`'s deadline.
    pub(super) fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.by_key.remove(key) {
            self.by_time.remove(&(old, key.to_vec()));
        }
    }

    /// Keys with a deadline.
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key has a deadline.
    pub(super) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Forgets every deadline (FLUSHALL).
    pub(super) fn clear(&mut self) {
        self.by_key.clear();
        self.by_time.clear();
    }

    /// Keys whose deadline is before `now`, earliest first, at most `limit`. A key expires
    /// after its deadline's millisecond, not at it (Redis's `now > when`): at the deadline
    /// itself PTTL is 0 and the key is still there.
    pub(super) fn due(&self, now: u64, limit: usize) -> Vec<Vec<u8>> {
        self.by_time
            .iter()
            .take_while(|(d, _)| *d < now)
            .take(limit)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// How many keys are due at `now` (passed their deadline, not yet removed).
    pub(super) fn due_count(&self, now: u64) -> usize {
        self.by_time.iter().take_while(|(d, _)| *d < now).count()
    }

    /// As [`Deadlines::due_count`], counting no further than `limit`.
    pub(super) fn due_count_at_most(&self, now: u64, limit: usize) -> usize {
        self.by_time
            .iter()
            .take(limit)
            .take_while(|(d, _)| *d < now)
            .count()
    }
}

impl Store {
    /// The deadline (unix ms) of `key`, if it has one: its type record's entry, from DRAM.
    pub fn deadline(&self, key: &[u8]) -> Option<u64> {
        self.type_entry(key).ok().flatten().and_then(|(_, d)| d)
    }

    /// TTL, PTTL, EXPIRETIME and PEXPIRETIME, from DRAM only.
    ///
    /// # Errors
    /// Engine errors.
    pub fn ttl(&self, key: &[u8], kind: kvproto::TtlKind) -> Result<i64> {
        let found = self.kind(key)?;
        Ok(ttl_reply(found, self.deadline(key), kind, now_ms()))
    }

    /// Keys with a deadline.
    pub fn expiring_keys(&self) -> usize {
        self.expiries.read().len()
    }

    /// Keys whose deadline has passed, at most `limit`, earliest first (O(due): the index
    /// is ordered by deadline).
    pub fn due_expiries(&self, limit: usize) -> Vec<Vec<u8>> {
        self.expiries.read().due(now_ms(), limit)
    }

    /// Whether some key's deadline has passed (O(1): the earliest deadline).
    pub fn has_due_expiry(&self) -> bool {
        self.expiries.read().due_count_at_most(now_ms(), 1) > 0
    }
}

/// What a write command decided about one key's deadline.
#[derive(Debug, Clone, Copy)]
pub(super) enum DeadlineChange {
    Set(u64),
    Clear,
}

/// The reply of TTL, PTTL, EXPIRETIME or PEXPIRETIME for a key of type `found` with
/// `deadline`: -2 no key, -1 no deadline; TTL rounds to the nearest second as Redis does.
pub fn ttl_reply(
    found: Option<u8>,
    deadline: Option<u64>,
    kind: kvproto::TtlKind,
    now: u64,
) -> i64 {
    use kvproto::TtlKind;
    const MS: i64 = kvproto::command::MS_PER_SECOND;
    if found.is_none() {
        return -2;
    }
    let Some(d) = deadline else {
        return -1;
    };
    let d = i64::try_from(d).unwrap_or(i64::MAX);
    let left = d
        .saturating_sub(i64::try_from(now).unwrap_or(i64::MAX))
        .max(0);
    match kind {
        TtlKind::Ttl => (left + MS / 2) / MS,
        TtlKind::Pttl => left,
        TtlKind::ExpireTime => d / MS,
        TtlKind::PExpireTime => d,
    }
}

impl WriteGroup<'_> {
    /// EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT: `when` in ms (from now unless `absolute`).
    /// Whether the deadline was set (or the key deleted, for a deadline already past).
    ///
    /// # Errors
    /// `InvalidExpire` (overflow), engine errors.
    pub fn expire_key(
        &mut self,
        key: &[u8],
        when: i64,
        absolute: bool,
        condition: Option<kvproto::ExpireCondition>,
        name: &'static str,
    ) -> Result<bool> {
        use kvproto::ExpireCondition as C;
        let now = i64::try_from(self.clock()).unwrap_or(i64::MAX);
        let when = if absolute {
            when
        } else {
            when.checked_add(now)
                .ok_or(StoreError::InvalidExpire(name))?
        };
        if self.kind(key)?.is_none() {
            return Ok(false);
        }
        let current = self
            .deadline(key)
            .map(|d| i64::try_from(d).unwrap_or(i64::MAX));
        let allowed = match condition {
            None => true,
            Some(C::Nx) => current.is_none(),
            Some(C::Xx) => current.is_some(),
            Some(C::Gt) => current.is_some_and(|c| when > c),
            Some(C::Lt) => current.is_none_or(|c| when < c),
        };
        if !allowed {
            return Ok(false);
        }
        if when <= now {
            self.remove_any(key)?;
        } else {
            let d = u64::try_from(when).map_err(|_| StoreError::InvalidExpire(name))?;
            self.set_deadline(key, DeadlineChange::Set(d));
        }
        Ok(true)
    }

    /// PERSIST: whether a deadline was removed.
    ///
    /// # Errors
    /// Engine errors.
    pub fn persist(&mut self, key: &[u8]) -> Result<bool> {
        if self.kind(key)?.is_none() || self.deadline(key).is_none() {
            return Ok(false);
        }
        self.set_deadline(key, DeadlineChange::Clear);
        Ok(true)
    }

    /// The expiry sweep over keys whose deadline passed: a collection is deleted with all
    /// its records; a string is let go ([`WriteGroup::forget_expired`]: compaction drops
    /// its entry). How many.
    ///
    /// # Errors
    /// Engine errors.
    pub fn expire(&mut self, keys: &[Vec<u8>]) -> Result<u64> {
        let mut n = 0;
        for key in keys {
            if self.dropped_under_index(key)? {
                // Compaction was first: only the index and the count still hold it.
                self.forget_expired(key);
                n += 1;
                continue;
            }
            if !self.expired(key) {
                if !self.deadlines.contains_key(key) {
                    self.unindex_stale(key)?;
                }
                continue;
            }
            if self.type_record(key)? == Some(ks::STRING) {
                self.forget_expired(key);
            } else {
                self.purge(key)?;
            }
            n += 1;
        }
        Ok(n)
    }
}

/// Moves the deadline records (`x` key) of an older build into the type records' entries
/// (a retime each) and deletes them, in batches; nothing when there are none. Before
/// that, the leftovers of a build that kept deadlines for strings only are removed (see
/// [`drop_string_only_deadlines`]).
///
/// # Errors
/// Engine errors (the next open goes on where this one stopped).
pub(super) fn move_legacy_deadlines(db: &Engine) -> Result<()> {
    let mut legacy = legacy_deadlines(db)?;
    if legacy.is_empty() {
        return Ok(());
    }
    drop_string_only_deadlines(db, &mut legacy)?;
    let moved: Vec<(Vec<u8>, u64)> = legacy.by_key.into_iter().collect();
    for chunk in moved.chunks(DELETE_CHUNK) {
        let mut names: Vec<(Vec<u8>, Option<Vec<u8>>, NonZeroU64)> = Vec::new();
        for (key, d) in chunk {
            let tops = ks::TopKeys::new(key);
            let top = db
                .first_written(&tops.all())?
                .map(|(i, _)| ks::top(ks::TOP_LEVEL[i], key));
            names.push((ks::top(EXPIRY, key), top, entry_deadline(*d)));
        }
        let mut ops: Vec<WriteOp<'_>> = Vec::with_capacity(2 * names.len());
        for (x, top, d) in &names {
            if let Some(top) = top {
                ops.push(WriteOp::Retime(top, Some(*d)));
            }
            ops.push(WriteOp::Delete(x));
        }
        db.write(&ops)?;
    }
    // Older x records of keys long gone (none above): the range is empty now.
    tracing::info!(
        keys = moved.len(),
        "moved deadline records of an older build into the keytable entries"
    );
    Ok(())
}

/// The deadline records (`x` key) of an older build, as an index.
///
/// # Errors
/// Engine errors.
pub(super) fn legacy_deadlines(db: &Engine) -> Result<Deadlines> {
    let end = ks::prefix_end(&[EXPIRY]);
    let mut legacy = Deadlines::new();
    for (k, v) in db.range(&[EXPIRY], end.as_deref(), usize::MAX)? {
        if let (Some(key), Some(deadline)) = (k.get(1..), ks::decode_deadline(&v)) {
            legacy.insert(key.to_vec(), deadline);
        }
    }
    Ok(legacy)
}

/// Drives written before every type could expire kept deadlines for strings only, and an
/// expired string's records could stay beside a live key of another type written over its
/// name (HSET on the expired name) until the sweep ran. Today a passed deadline hides the
/// key whatever its type, so such a leftover would hide that live key: at open, the expired
/// string and its deadline are deleted wherever a key of another type shares the name.
/// Only deadlines already due at open are looked at (a leftover's deadline had passed when
/// the older build wrote the other key); a clock set back across the restart could leave
/// one, which then hides the key until that time. Checking every deadline instead would
/// cost five keytable lookups per expiring key at every start.
fn drop_string_only_deadlines(db: &Engine, expiries: &mut Deadlines) -> Result<()> {
    let due = expiries.due(now_ms(), usize::MAX);
    let mut doomed = Vec::new();
    for key in due {
        let tops: Vec<Vec<u8>> = ks::TOP_LEVEL.iter().map(|&t| ks::top(t, &key)).collect();
        let refs: Vec<&[u8]> = tops.iter().map(Vec::as_slice).collect();
        let lens = db.value_lens(&refs)?;
        let (mut string, mut other) = (false, false);
        for (&tag, len) in ks::TOP_LEVEL.iter().zip(&lens) {
            if len.is_some() {
                *(if tag == ks::STRING {
                    &mut string
                } else {
                    &mut other
                }) = true;
            }
        }
        if string && other {
            doomed.push(key);
        }
    }
    if doomed.is_empty() {
        return Ok(());
    }
    let names: Vec<[Vec<u8>; 2]> = doomed
        .iter()
        .map(|k| [ks::top(ks::STRING, k), ks::top(EXPIRY, k)])
        .collect();
    let ops: Vec<WriteOp<'_>> = names.iter().flatten().map(|k| WriteOp::Delete(k)).collect();
    db.write(&ops)?;
    for k in &doomed {
        expiries.remove(k);
    }
    tracing::info!(
        keys = doomed.len(),
        "removed expired strings left beside live keys of another type by an older build"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Deadlines;

    #[test]
    fn the_index_by_time_follows_every_change_by_key() {
        let mut d = Deadlines::new();
        d.insert(b"a".to_vec(), 30);
        d.insert(b"b".to_vec(), 10);
        d.insert(b"c".to_vec(), 20);
        // Moved later: due no more at 20.
        d.insert(b"b".to_vec(), 40);
        assert_eq!(d.due(21, 10), vec![b"c".to_vec()]);
        assert!(
            d.due(20, 10).is_empty(),
            "due after its millisecond, not at it"
        );
        assert_eq!(d.due_count(35), 2);
        assert_eq!(d.due(100, 2), vec![b"c".to_vec(), b"a".to_vec()]);
        d.remove(b"c");
        d.remove(b"missing");
        assert_eq!(d.due(100, 10), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!((d.len(), d.get(b"b").copied()), (2, Some(40)));
        d.clear();
        assert!(d.is_empty() && d.due(u64::MAX, 10).is_empty());
    }
}
