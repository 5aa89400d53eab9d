//! The [`WriteGroup`] core: the overlay that gives a group's commands read-your-writes, the
//! type lookup and record walks as the group sees them, removal of a key of any type, DEL,
//! RENAME, and the commit (synchronous, or started and finished as a [`PendingCommit`]).

use std::cell::RefCell;
use std::collections::BTreeMap;

use bytes::Bytes;
use foldhash::{HashMap, HashMapExt};
use lsm::WriteOp;

use super::expiry::{entry_deadline, DeadlineChange};
use super::{now_ms, Result, Store, StoreError};
use crate::keyspace as ks;

/// A group whose engine batch is on the device ([`WriteGroup::try_submit`]).
pub struct PendingCommit {
    write: Option<lsm::PendingWrite>,
    deadlines: HashMap<Vec<u8>, DeadlineChange>,
    /// Expired strings the group let go of ([`WriteGroup::forget_expired`]).
    forgotten: Vec<Vec<u8>>,
    /// Index entries found stale ([`WriteGroup::unindex_stale`]).
    stale: Vec<(Vec<u8>, Option<u64>)>,
    value_bytes: u64,
    /// Keys the group creates minus keys it removes (see `store::count`).
    key_delta: i64,
}

/// Publishes a durable, applied group's deadline changes to the index.
fn publish_deadlines(
    store: &Store,
    deadlines: HashMap<Vec<u8>, DeadlineChange>,
    forgotten: &[Vec<u8>],
    stale: &[(Vec<u8>, Option<u64>)],
) {
    if deadlines.is_empty() && forgotten.is_empty() && stale.is_empty() {
        return;
    }
    let mut ex = store.expiries.write();
    // Let go of first: a command may give the name a new deadline after.
    for k in forgotten {
        ex.remove(k);
    }
    for (k, entry) in stale {
        ex.remove(k);
        if let Some(d) = entry {
            ex.insert(k.clone(), *d);
        }
    }
    for (k, c) in deadlines {
        match c {
            DeadlineChange::Set(d) => ex.insert(k, d),
            DeadlineChange::Clear => ex.remove(&k),
        }
    }
    store.note_deadlines(&ex);
}

impl PendingCommit {
    /// Takes the engine's doorbell for this group's pages when the engine left it unrung
    /// (plp mode: the group is acknowledged once applied); the writer rings it after
    /// sending the group's replies, so the submission's system call is off their path.
    pub fn take_doorbell(&mut self) -> Option<lsm::Doorbell> {
        self.write
            .as_mut()
            .and_then(lsm::PendingWrite::take_doorbell)
    }

    /// Waits until the group is durable and applied, then publishes its expiry changes;
    /// returns the value bytes it wrote.
    ///
    /// # Errors
    /// The engine's failure: nothing of the group is applied.
    pub fn finish(self, store: &Store) -> Result<u64> {
        if let Some(w) = self.write {
            if let Err(e) = store.db.finish_write(w) {
                store.keys.mark_stale();
                return Err(e.into());
            }
        }
        store.keys.add(self.key_delta);
        publish_deadlines(store, self.deadlines, &self.forgotten, &self.stale);
        Ok(self.value_bytes)
    }
}

/// Many commands' writes gathered for one atomic engine batch, with read-your-writes.
pub struct WriteGroup<'s> {
    pub(super) store: &'s Store,
    /// Latest state of every engine key this group wrote (`None`: deleted).
    pub(super) overlay: BTreeMap<Vec<u8>, Option<Bytes>>,
    pub(super) deadlines: HashMap<Vec<u8>, DeadlineChange>,
    /// Expired strings the group lets go of ([`WriteGroup::forget_expired`]).
    forgotten: Vec<Vec<u8>>,
    /// Index entries that disagree with the key's entry, with the entry's deadline
    /// ([`WriteGroup::unindex_stale`]).
    stale: Vec<(Vec<u8>, Option<u64>)>,
    pub(super) bytes: usize,
    /// The type of each user key this group looked up, in the applied state, with the
    /// deadline its entry carries (expired or not; `None`: no type record). Looked up once
    /// per key: the type checks, the deadlines and the key count (`store::count`) share it.
    base_entries: RefCell<HashMap<Vec<u8>, super::TypeEntry>>,
    /// Keys a group in flight wrote plainly ([`WriteGroup::assume_string`]).
    assumed_strings: foldhash::HashSet<Vec<u8>>,
    /// The instant expiry is judged at (unix ms), fixed per command or per EXEC by
    /// [`WriteGroup::fix_clock`] so a key cannot expire between two looks of one command
    /// (Redis's fixed command time); `None`: the current time.
    clock: Option<u64>,
    /// The type the command being applied works on, if it names one
    /// ([`WriteGroup::hint_type`]): probed first when a key's type is looked up.
    type_hint: Option<u8>,
}

impl<'s> WriteGroup<'s> {
    /// An empty group over `store`.
    pub fn new(store: &'s Store) -> WriteGroup<'s> {
        WriteGroup {
            store,
            overlay: BTreeMap::new(),
            deadlines: HashMap::new(),
            forgotten: Vec::new(),
            stale: Vec::new(),
            bytes: 0,
            base_entries: RefCell::new(HashMap::new()),
            assumed_strings: foldhash::HashSet::default(),
            clock: None,
            type_hint: None,
        }
    }

    /// Tells the group the type the next command works on (`None`: no one type), so its
    /// type lookups probe that type's record first ([`Store::type_entry_hinted`]: the hint
    /// changes what a lookup costs, never what it finds).
    pub fn hint_type(&mut self, kind: Option<u8>) {
        self.type_hint = kind;
    }

    /// Counts `key` as existing before this group: a group still in flight (not yet in the
    /// applied state this group reads) wrote it with a plain SET or MSET, and only plain
    /// writes may follow such a group without waiting for it (the writer's
    /// `InFlightGroups`). A plain write leaves a string whatever was there, so once that
    /// group is applied the key exists. Only the key count uses this; type checks read the
    /// applied state as before (a plain write looks at the type only to remove another
    /// type's records, which is harmless to do twice).
    pub fn assume_string(&mut self, key: &[u8]) {
        if !self.assumed_strings.contains(key) {
            self.assumed_strings.insert(key.to_vec());
        }
    }

    /// The type of `key` in the applied state and its entry's deadline, expired or not
    /// (cached per group).
    fn base_entry(&self, key: &[u8]) -> Result<super::TypeEntry> {
        if let Some(&e) = self.base_entries.borrow().get(key) {
            return Ok(e);
        }
        let entry = self.store.type_entry_hinted(key, self.type_hint)?;
        self.base_entries.borrow_mut().insert(key.to_vec(), entry);
        Ok(entry)
    }

    /// The type of `key` in the applied state, expired or not.
    fn base_kind(&self, key: &[u8]) -> Result<Option<u8>> {
        Ok(self.base_entry(key)?.map(|(tag, _)| tag))
    }

    /// Whether the key count holds `key` before this group (see `store::count`): it has a
    /// type record, and either no deadline or one the index still holds (an expired
    /// string the sweep let go is no longer counted, though compaction has not yet dropped
    /// its entry).
    fn counted_before(&self, key: &[u8]) -> Result<bool> {
        if self.assumed_strings.contains(key) {
            return Ok(true);
        }
        Ok(match self.base_entry(key)? {
            None => false,
            Some((_, None)) => true,
            Some((_, Some(_))) => self.store.indexed(key),
        })
    }

    /// Keys this group creates minus keys it removes: every user key whose type records it
    /// wrote, compared with the applied state (see `store::count`).
    fn key_delta(&self) -> Result<i64> {
        let mut delta = 0i64;
        // A key whose type changed has records under two tags: counted once.
        let mut seen: foldhash::HashSet<&[u8]> = foldhash::HashSet::default();
        for k in self.overlay.keys() {
            let Some((tag, user)) = k.split_first() else {
                continue;
            };
            if !ks::TOP_LEVEL.contains(tag) || !seen.insert(user) {
                continue;
            }
            let before = self.counted_before(user)?;
            let after = self.type_record(user)?.is_some();
            delta += i64::from(after) - i64::from(before);
        }
        Ok(delta - self.forgotten.len() as i64)
    }

    /// Fixes the instant every expiry decision of the group uses from now on (the writer
    /// calls it as each command, or each EXEC, begins): a command's purge of expired keys
    /// and its own type checks then agree, so a key whose deadline falls while a command
    /// runs is either expired for all of it or for none of it.
    pub fn fix_clock(&mut self, now: u64) {
        self.clock = Some(now);
    }

    /// The instant expiry is judged at (see [`WriteGroup::fix_clock`]).
    pub fn clock(&self) -> u64 {
        self.clock.unwrap_or_else(now_ms)
    }

    /// The store's keyspace counters.
    pub fn store_counters(&self) -> &super::KeyspaceCounters {
        &self.store.counters
    }

    /// Bytes of keys and values gathered so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn put(&mut self, key: Vec<u8>, value: Bytes) {
        self.bytes += key.len() + value.len();
        self.overlay.insert(key, Some(value));
    }

    /// Deletes engine key `key`. Deleting a type record (the key ceases to exist, or changes
    /// type) also removes the key's deadline, so a deadline never outlives its key: a key
    /// created later under the name starts without one, as in Redis.
    pub(super) fn del(&mut self, key: Vec<u8>) {
        if let Some(user) = key
            .split_first()
            .filter(|(tag, _)| ks::TOP_LEVEL.contains(tag))
            .map(|(_, user)| user)
        {
            if self.deadline(user).is_some() {
                self.set_deadline(user, DeadlineChange::Clear);
            }
        }
        self.bytes += key.len();
        self.overlay.insert(key, None);
    }

    /// The record `key` as this group sees it. Expired or not: the group judges expiry
    /// itself, at its fixed instant ([`WriteGroup::fix_clock`]), and the engine's own
    /// hiding (at the time of the read) must not make a key it judged live read as empty.
    pub(super) fn read(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.overlay.get(key) {
            Some(v) => Ok(v.clone()),
            None => Ok(self.store.db.get_written(key)?.map(Bytes::from)),
        }
    }

    /// Whether the record `key` exists as this group sees it (expired or not, as
    /// [`WriteGroup::read`]).
    pub(super) fn present(&self, key: &[u8]) -> Result<bool> {
        match self.overlay.get(key) {
            Some(v) => Ok(v.is_some()),
            None => Ok(self.store.db.first_written(&[key])?.is_some()),
        }
    }

    /// The deadline of `key` as this group sees it: its own change, else the one the
    /// type record's entry carries in the applied state (an engine error reads as none:
    /// the type lookup that comes with every use reports it).
    pub(super) fn deadline(&self, key: &[u8]) -> Option<u64> {
        match self.deadlines.get(key) {
            Some(DeadlineChange::Set(d)) => Some(*d),
            Some(DeadlineChange::Clear) => None,
            None => self.base_entry(key).ok().flatten().and_then(|(_, d)| d),
        }
    }

    /// Changes `key`'s deadline: written into its type record's entry at commit (with the
    /// record, if the group writes it, else as a retime of the entry).
    pub(super) fn set_deadline(&mut self, key: &[u8], change: DeadlineChange) {
        if matches!(change, DeadlineChange::Clear) && self.deadline(key).is_none() {
            return;
        }
        // What the change costs in the batch (a retime: the key and its deadline); the
        // writer also reads a change in `bytes` as "the command wrote something".
        self.bytes += key.len() + 8;
        self.deadlines.insert(key.to_vec(), change);
    }

    /// Lets go of an expired string (the sweep): it leaves the key count and the index,
    /// with no engine write; reads already hide it, and compaction drops its entry.
    pub(super) fn forget_expired(&mut self, key: &[u8]) {
        self.forgotten.push(key.to_vec());
    }

    /// Sets the index right for `key`, which it holds as due though the key's entry says it
    /// is not expired (no path is known to leave that; the sweep must not stall on one):
    /// the entry's deadline replaces the index's, and the key count is left alone.
    ///
    /// # Errors
    /// Engine errors.
    pub(super) fn unindex_stale(&mut self, key: &[u8]) -> Result<()> {
        let entry = self.base_entry(key)?.and_then(|(_, d)| d);
        self.stale.push((key.to_vec(), entry));
        Ok(())
    }

    /// Whether the index still holds `key` though compaction has dropped its expired entry
    /// (the sweep, 1,024 keys per 100 ms, had not reached it yet): the key is counted and
    /// indexed, and has no record left. The group lets go of it as of an expired string.
    pub(super) fn dropped_under_index(&self, key: &[u8]) -> Result<bool> {
        Ok(!self.deadlines.contains_key(key)
            && !self.forgotten.iter().any(|k| k == key)
            && self.store.indexed(key)
            && self.base_entry(key)?.is_none())
    }

    /// The deadline changes the group's own records do not carry: for each key whose
    /// deadline it changed without writing its type record, that record's engine key and
    /// the new deadline (a retime). A key the group deleted needs none.
    fn retimes(&self) -> Result<Vec<(Vec<u8>, lsm::Deadline)>> {
        let mut out = Vec::new();
        for (user, change) in &self.deadlines {
            let Some(tag) = self.type_record(user)? else {
                continue;
            };
            let top = ks::top(tag, user);
            if matches!(self.overlay.get(&top), Some(Some(_))) {
                continue;
            }
            let d = match change {
                DeadlineChange::Set(d) => Some(entry_deadline(*d)),
                DeadlineChange::Clear => None,
            };
            out.push((top, d));
        }
        Ok(out)
    }

    /// The group as engine operations: its records (a type record with the key's deadline
    /// in its entry), then the retimes; and the value bytes they hand over.
    fn engine_ops<'a>(
        &'a self,
        retimes: &'a [(Vec<u8>, lsm::Deadline)],
    ) -> (Vec<WriteOp<'a>>, u64) {
        let mut value_bytes = 0u64;
        let mut ops: Vec<WriteOp<'a>> = Vec::with_capacity(self.overlay.len() + retimes.len());
        for (k, v) in &self.overlay {
            let Some(v) = v else {
                ops.push(WriteOp::Delete(k));
                continue;
            };
            value_bytes += v.len() as u64;
            let deadline = k
                .split_first()
                .filter(|(tag, _)| ks::TOP_LEVEL.contains(tag))
                .and_then(|(_, user)| self.deadline(user));
            ops.push(match deadline {
                Some(d) => WriteOp::PutUntil(k, v, entry_deadline(d)),
                None => WriteOp::Put(k, v),
            });
        }
        ops.extend(retimes.iter().map(|(k, d)| WriteOp::Retime(k, *d)));
        (ops, value_bytes)
    }

    /// Writes a hash's or sorted set's header (its member count); a count of 0 deletes it.
    pub(super) fn write_count(&mut self, tag: u8, key: &[u8], count: u64) {
        if count == 0 {
            self.del(ks::top(tag, key));
        } else {
            self.put(
                ks::top(tag, key),
                Bytes::copy_from_slice(&count.to_le_bytes()),
            );
        }
    }

    /// Whether `key` has a deadline that has passed (as this group sees it): the key is
    /// gone, whatever its type, though its records stay until [`WriteGroup::purge_expired`]
    /// or the sweep removes them.
    pub(super) fn expired(&self, key: &[u8]) -> bool {
        self.deadline(key).is_some_and(|d| d < self.clock())
    }

    /// The type of `key` as this group sees it (`None`: no such key, or its deadline passed).
    pub(super) fn kind(&self, key: &[u8]) -> Result<Option<u8>> {
        if self.expired(key) {
            return Ok(None);
        }
        self.type_record(key)
    }

    /// The tag of `key`'s type record as this group leaves it, expired or not: the group's
    /// own record where it wrote one, else the applied state's (a key has one type record).
    pub(super) fn type_record(&self, key: &[u8]) -> Result<Option<u8>> {
        let base = self.base_kind(key)?;
        let tops = ks::TopKeys::new(key);
        for (&tag, top) in ks::TOP_LEVEL.iter().zip(tops.all()) {
            match self.overlay.get(top) {
                Some(v) => {
                    if v.is_some() {
                        return Ok(Some(tag));
                    }
                }
                None => {
                    if base == Some(tag) {
                        return Ok(Some(tag));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Every engine key in `[prefix, prefix_end)` as this group sees it.
    pub(super) fn keys_under(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let end = ks::prefix_end(prefix);
        let mut keys: std::collections::BTreeSet<Vec<u8>> = self
            .store
            .db
            .range_keys(prefix, end.as_deref(), usize::MAX)?
            .into_iter()
            .collect();
        let upper = match &end {
            Some(e) => std::ops::Bound::Excluded(e.clone()),
            None => std::ops::Bound::Unbounded,
        };
        for (k, v) in self
            .overlay
            .range((std::ops::Bound::Included(prefix.to_vec()), upper))
        {
            if v.is_some() {
                keys.insert(k.clone());
            } else {
                keys.remove(k);
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// Removes `key` whatever its type; whether it existed (a key whose deadline passed did
    /// not, but its records go too).
    pub(super) fn remove_any(&mut self, key: &[u8]) -> Result<bool> {
        match self.kind(key)? {
            None => {
                if self.deadline(key).is_some() {
                    self.purge(key)?;
                }
                Ok(false)
            }
            Some(kind) => {
                self.remove_records(kind, key)?;
                Ok(true)
            }
        }
    }

    /// Deletes every record of `key` as a key of type `kind` (its deadline goes with its
    /// type record, see [`WriteGroup::del`]).
    fn remove_records(&mut self, kind: u8, key: &[u8]) -> Result<()> {
        for &tag in ks::sub_tags(kind) {
            for k in self.keys_under(&ks::sub_prefix(tag, key))? {
                self.del(k);
            }
        }
        self.del(ks::top(kind, key));
        Ok(())
    }

    /// Deletes whatever records `key` has, of any type, expired or not, and its deadline.
    pub(super) fn purge(&mut self, key: &[u8]) -> Result<()> {
        for tag in ks::TOP_LEVEL {
            let top = ks::top(tag, key);
            let written = match self.overlay.get(&top) {
                Some(v) => v.is_some(),
                // The engine hides an expired entry from reads: ask for entries.
                None => self.store.db.first_written(&[&top])?.is_some(),
            };
            if written {
                self.remove_records(tag, key)?;
            }
        }
        self.set_deadline(key, DeadlineChange::Clear);
        Ok(())
    }

    /// Deletes each of `keys` whose deadline has passed, with all its records (Redis's
    /// expire-on-write-access): the writer runs this before a command writes its keys, so
    /// a key created under an expired name never meets the old key's records (HSET on an
    /// expired hash starts an empty hash). Returns the keys it deleted.
    ///
    /// # Errors
    /// Engine errors.
    pub fn purge_expired(&mut self, keys: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        // Every key is looked up, index or not: an expired string the sweep let go is in
        // no index, and its entry must go before a key of another type takes the name.
        // (The lookup is the group's cached type lookup the command makes anyway.)
        let mut purged = Vec::new();
        for key in keys {
            if self.dropped_under_index(key)? {
                self.forget_expired(key);
                continue;
            }
            if self.expired(key) {
                // One the sweep let go of was reported then.
                let reported = self.deadlines.contains_key(*key) || self.store.indexed(key);
                self.purge(key)?;
                if reported {
                    purged.push(key.to_vec());
                }
            }
        }
        Ok(purged)
    }

    /// DEL: how many keys existed.
    ///
    /// # Errors
    /// Engine errors.
    pub fn delete(&mut self, keys: &[Bytes]) -> Result<i64> {
        let mut n = 0;
        for k in keys {
            if self.remove_any(k)? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The type of `key` as this group sees it (for reads inside a transaction).
    ///
    /// # Errors
    /// Engine errors.
    pub fn key_type(&self, key: &[u8]) -> Result<Option<u8>> {
        self.kind(key)
    }

    /// The record `engine_key` as this group sees it.
    ///
    /// # Errors
    /// Engine errors.
    pub fn record(&self, engine_key: &[u8]) -> Result<Option<Bytes>> {
        self.read(engine_key)
    }

    /// Every record under `prefix`, with its engine key, as this group sees them.
    ///
    /// # Errors
    /// Engine errors.
    pub fn records_under(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Bytes)>> {
        let mut out = Vec::new();
        for k in self.keys_under(prefix)? {
            if let Some(v) = self.read(&k)? {
                out.push((k, v));
            }
        }
        Ok(out)
    }

    /// The engine keys under `prefix` as this group sees them.
    ///
    /// # Errors
    /// Engine errors.
    pub fn engine_keys_under(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.keys_under(prefix)
    }

    /// The user keys of the top-level records (strings, hashes, sorted sets) this group wrote
    /// or deleted.
    pub fn written_top_keys(&self) -> Vec<Vec<u8>> {
        self.overlay
            .keys()
            .filter(|k| k.first().is_some_and(|t| ks::TOP_LEVEL.contains(t)))
            .map(|k| k[1..].to_vec())
            .collect()
    }

    /// The deadline of `key` as this group sees it.
    pub fn deadline_of(&self, key: &[u8]) -> Option<u64> {
        self.deadline(key)
    }

    /// COPY: writes a copy of every record of `source` (and its deadline) under
    /// `destination`; `false` when `source` does not exist, or `destination` does and
    /// `replace` is not set. (The parser refuses a copy of a key onto itself.)
    ///
    /// # Errors
    /// Engine errors.
    pub fn copy(&mut self, source: &[u8], destination: &[u8], replace: bool) -> Result<bool> {
        let Some(kind) = self.kind(source)? else {
            return Ok(false);
        };
        if self.kind(destination)?.is_some() && !replace {
            return Ok(false);
        }
        // The destination's old records (of any type, or an expired key's).
        self.remove_any(destination)?;
        self.write_copy(kind, source, destination)?;
        Ok(true)
    }

    /// Writes every record of `source` (a key of type `kind`) under `destination`, and its
    /// deadline with it; `destination` holds nothing (its records were removed).
    fn write_copy(&mut self, kind: u8, source: &[u8], destination: &[u8]) -> Result<()> {
        for &tag in ks::sub_tags(kind) {
            let from = ks::sub_prefix(tag, source);
            let to = ks::sub_prefix(tag, destination);
            for (k, v) in self.records_under(&from)? {
                let mut nk = to.clone();
                nk.extend_from_slice(&k[from.len()..]);
                self.put(nk, v);
            }
        }
        let top = self.read(&ks::top(kind, source))?.unwrap_or_default();
        self.put(ks::top(kind, destination), top);
        match self.deadline(source) {
            Some(d) => self.set_deadline(destination, DeadlineChange::Set(d)),
            None => self.set_deadline(destination, DeadlineChange::Clear),
        }
        Ok(())
    }

    /// RENAME / RENAMENX: moves every record of `key` (and its deadline) to `new_key`.
    /// Returns false when `nx` and `new_key` exists (or both names are the same key).
    ///
    /// # Errors
    /// `NoSuchKey`, engine errors.
    pub fn rename(&mut self, key: &[u8], new_key: &[u8], nx: bool) -> Result<bool> {
        let Some(kind) = self.kind(key)? else {
            return Err(StoreError::NoSuchKey);
        };
        if key == new_key {
            return Ok(!nx);
        }
        if self.kind(new_key)?.is_some() {
            if nx {
                return Ok(false);
            }
            self.remove_any(new_key)?;
        } else {
            // The records of an expired key under the new name go first.
            self.remove_any(new_key)?;
        }
        self.write_copy(kind, key, new_key)?;
        self.remove_any(key)?;
        Ok(true)
    }

    /// Commits the group as one atomic engine batch; on success the group's deadline
    /// changes take effect. Returns the value bytes handed to the engine.
    ///
    /// # Errors
    /// The engine's refusal or failure: nothing of the group is applied.
    pub fn commit(self) -> Result<u64> {
        if self.overlay.is_empty()
            && self.deadlines.is_empty()
            && self.forgotten.is_empty()
            && self.stale.is_empty()
        {
            return Ok(0);
        }
        let key_delta = self.key_delta()?;
        let retimes = self.retimes()?;
        let (ops, value_bytes) = self.engine_ops(&retimes);
        if !ops.is_empty() {
            if let Err(e) = self.store.db.write(&ops) {
                // Nothing of the group is applied; a group built meanwhile may have assumed
                // it was (see `store::count`).
                self.store.keys.mark_stale();
                return Err(e.into());
            }
        }
        drop(ops);
        self.store.keys.add(key_delta);
        publish_deadlines(self.store, self.deadlines, &self.forgotten, &self.stale);
        Ok(value_bytes)
    }

    /// Starts the group's engine batch without waiting for it (see
    /// [`lsm::Engine::try_submit_write`]); [`PendingCommit::finish`] waits and publishes its
    /// expiry changes. `Ok(None)`: the engine cannot start it now (finish an earlier group,
    /// or [`WriteGroup::commit`] when none is in flight). Once started, the group is spent.
    ///
    /// # Errors
    /// The engine's refusal: nothing of the group is applied.
    pub fn try_submit(&mut self) -> Result<Option<PendingCommit>> {
        self.submit_with(lsm::Engine::try_submit_write)
    }

    /// As [`WriteGroup::try_submit`], but `Ok(Some(_))` only when neither this nor
    /// [`PendingCommit::finish`] will wait for the device (see
    /// [`lsm::Engine::try_submit_write_now`]: plp mode, nothing ahead that is not
    /// acknowledged from DRAM). `Ok(None)` leaves the group unstarted: nothing of it is
    /// applied, and it may be dropped.
    ///
    /// # Errors
    /// The engine's refusal: nothing of the group is applied.
    pub fn try_submit_now(&mut self) -> Result<Option<PendingCommit>> {
        self.submit_with(lsm::Engine::try_submit_write_now)
    }

    fn submit_with(
        &mut self,
        submit: impl FnOnce(&lsm::Engine, &[WriteOp<'_>]) -> lsm::Result<Option<lsm::PendingWrite>>,
    ) -> Result<Option<PendingCommit>> {
        let key_delta = self.key_delta()?;
        let retimes = self.retimes()?;
        let (ops, value_bytes) = self.engine_ops(&retimes);
        let write = if ops.is_empty() {
            None
        } else {
            match submit(&self.store.db, &ops)? {
                Some(w) => Some(w),
                None => return Ok(None),
            }
        };
        drop(ops);
        Ok(Some(PendingCommit {
            write,
            deadlines: std::mem::take(&mut self.deadlines),
            forgotten: std::mem::take(&mut self.forgotten),
            stale: std::mem::take(&mut self.stale),
            value_bytes,
            key_delta,
        }))
    }
}
