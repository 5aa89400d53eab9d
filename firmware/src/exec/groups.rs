//! The writer's bookkeeping of its write groups: which user keys a group changed and how
//! ([`KeyChange`], [`GroupKeys`]), the groups whose batches are on the device
//! ([`InFlightGroups`]: a command touching a key one of them wrote waits for it, unless both
//! are plain SETs), and telling WATCH about a group's keys once it is applied.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use foldhash::{HashMap, HashMapExt};
use kvproto::command::Collection;
use kvproto::{Command, Reply};

use super::{group_replies, ReplySink};
use crate::info::Metrics;
use crate::store::{self, PendingCommit, Store, WriteGroup};

/// Whether a write reads nothing but the key's type: a plain SET or MSET (no NX/XX/GET/
/// KEEPTTL/expiry). Those may follow in-flight writes to the same keys that were also plain.
pub(super) fn is_plain_write(cmd: &Command) -> bool {
    match cmd {
        Command::Set {
            expire,
            condition,
            keep_ttl,
            get,
            ..
        } => expire.is_none() && condition.is_none() && !keep_ttl && !get,
        Command::MSet(_) => true,
        _ => false,
    }
}

/// One group's replies: (connection, sequence number, reply).
pub(super) type GroupReplies = Vec<(u64, u64, Reply)>;

/// The writer's groups whose batches are on the device, oldest first.
///
/// A group is built by reading the engine's applied state (types, old values, counts), which
/// does not yet include the groups in flight. So a command touching a key an in-flight group
/// wrote waits until they are finished, unless both are plain writes (whose outcome does not
/// depend on what the in-flight write left).
pub(super) struct InFlightGroups {
    /// Each group with its replies and the user keys it wrote.
    pub(super) groups: VecDeque<(PendingCommit, GroupReplies, GroupKeys)>,
    /// User keys the groups in flight wrote: (groups writing it, groups writing it not plainly).
    keys: HashMap<Vec<u8>, (u32, u32)>,
}

/// The user keys one group wrote, and how.
pub(super) type GroupKeys = HashMap<Vec<u8>, KeyChange>;

/// How a group changed one user key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyChange {
    /// Plain SETs only (see [`is_plain_write`]).
    Plain,
    /// Deleted because its deadline had passed, and nothing else: a WATCH taken while it
    /// was already expired stays intact (see [`store::Watches`]).
    Expired,
    /// Any other write.
    Other,
}

impl KeyChange {
    /// Two changes of one key in one group as one.
    pub(super) fn and(self, next: KeyChange) -> KeyChange {
        if self == next {
            self
        } else {
            KeyChange::Other
        }
    }
}

/// Tells WATCH about a group's keys once the group is applied (or failed).
pub(super) fn touch_group_keys(store: &Store, keys: &GroupKeys) {
    store.touch_watched(
        keys.iter()
            .filter(|(_, &c)| c != KeyChange::Expired)
            .map(|(k, _)| k.as_slice()),
    );
    store.touch_expired(
        keys.iter()
            .filter(|(_, &c)| c == KeyChange::Expired)
            .map(|(k, _)| k.as_slice()),
    );
}

/// Deletes the expired keys among `keys` before a command writes them, and records them.
///
/// # Errors
/// Engine errors.
pub(super) fn purge_noting(
    group: &mut WriteGroup<'_>,
    group_keys: &mut GroupKeys,
    keys: &[&[u8]],
) -> store::Result<()> {
    let purged = group.purge_expired(keys)?;
    group
        .store_counters()
        .expired_keys
        .fetch_add(purged.len() as u64, Ordering::Relaxed);
    for k in purged {
        let e = group_keys.entry(k).or_insert(KeyChange::Expired);
        *e = e.and(KeyChange::Expired);
    }
    Ok(())
}

impl InFlightGroups {
    pub(super) fn new() -> Self {
        Self {
            groups: VecDeque::new(),
            keys: HashMap::new(),
        }
    }

    pub(super) fn conflicts(&self, cmd: &Command) -> bool {
        if self.keys.is_empty() {
            return false;
        }
        let plain = is_plain_write(cmd);
        cmd.keys().iter().any(|k| {
            self.keys
                .get(*k)
                .is_some_and(|&(_, not_plain)| !(plain && not_plain == 0))
        })
    }

    /// Tells `group` which keys of `cmd` (a plain write that does not conflict) groups in
    /// flight wrote: they wrote them plainly, so they are strings once those groups are
    /// applied ([`WriteGroup::assume_string`], for the key count).
    pub(super) fn assume_plain_writes(&self, group: &mut WriteGroup<'_>, cmd: &Command) {
        if self.keys.is_empty() {
            return;
        }
        for k in cmd.keys() {
            if self.keys.contains_key(k) {
                group.assume_string(k);
            }
        }
    }

    /// Whether a group in flight writes `key` (a write that may bring it into existence
    /// once applied).
    pub(super) fn writes(&self, key: &[u8]) -> bool {
        self.keys.contains_key(key)
    }

    pub(super) fn push(&mut self, commit: PendingCommit, replies: GroupReplies, keys: GroupKeys) {
        for (k, change) in &keys {
            let e = self.keys.entry(k.clone()).or_insert((0, 0));
            e.0 += 1;
            if *change != KeyChange::Plain {
                e.1 += 1;
            }
        }
        self.groups.push_back((commit, replies, keys));
    }

    /// Waits for the oldest group and sends its replies; false when none was in flight.
    pub(super) fn finish_oldest(
        &mut self,
        store: &Store,
        metrics: &Metrics,
        sink: &ReplySink,
    ) -> bool {
        let Some((mut commit, replies, keys)) = self.groups.pop_front() else {
            return false;
        };
        let doorbell = commit.take_doorbell();
        let result = commit.finish(store);
        // The group is applied (or failed): WATCHers of its keys must see a change before
        // the writers are answered.
        touch_group_keys(store, &keys);
        sink.send_all(group_replies(metrics, result, replies));
        // Acknowledged from DRAM (plp): the replies went first, the pages follow.
        drop(doorbell);
        // Forget the group's keys (the map stays as small as what is in flight).
        for (k, change) in keys {
            if let Some(e) = self.keys.get_mut(&k) {
                e.0 = e.0.saturating_sub(1);
                if change != KeyChange::Plain {
                    e.1 = e.1.saturating_sub(1);
                }
                if e.0 == 0 {
                    self.keys.remove(&k);
                }
            }
        }
        true
    }

    pub(super) fn drain(&mut self, store: &Store, metrics: &Metrics, sink: &ReplySink) {
        while self.finish_oldest(store, metrics, sink) {}
    }
}

/// Records `keys` as written (not plainly) in the group's key set.
pub(super) fn note_written(group_keys: &mut GroupKeys, keys: &[Bytes]) {
    for k in keys {
        group_keys.insert(k.to_vec(), KeyChange::Other);
    }
}

/// Records the user keys `cmd` writes in its group's key set (`KeyChange::Plain` while every
/// write to the key was plain). Called only for a command that wrote something: one that changed
/// nothing (DEL of a missing key, a WRONGTYPE error, EXPIRE NX refused) neither makes later
/// commands wait for its group nor breaks a WATCH, as in Redis. Other than DEL (see
/// [`super::apply_noting_keys`]), a command over several keys changes all of them (MSET, RENAME).
pub(super) fn note_keys(group_keys: &mut GroupKeys, cmd: &Command) {
    let plain = is_plain_write(cmd);
    // SINTERSTORE and its twins, and COPY, only read their sources: the destination is the
    // one change.
    let written = match cmd {
        Command::Collection(Collection::SCombineStore { dst, .. }) => vec![&dst[..]],
        Command::Copy { destination, .. } => vec![&destination[..]],
        _ => cmd.keys(),
    };
    let change = if plain {
        KeyChange::Plain
    } else {
        KeyChange::Other
    };
    for k in written {
        let e = group_keys.entry(k.to_vec()).or_insert(change);
        *e = e.and(change);
    }
}
