//! WATCH's change detection: a version per watched key ([`Watches`]).

use foldhash::HashMap;
use parking_lot::Mutex;

use super::{now_ms, Store};

/// What a connection noted when it WATCHed a key (see [`Watches`]).
#[derive(Debug, Clone)]
pub struct WatchedKey {
    /// The user key.
    pub key: Vec<u8>,
    /// The key's write version in the watch table when it was watched.
    version: u64,
    /// The key's expiry version then (see [`Watches`]).
    expiry_version: u64,
    /// Whether the key was already expired then (a deadline passing afterwards aborts EXEC,
    /// as in Redis, even before the expiry sweep removes the key).
    expired_then: bool,
}

/// WATCH's change detection: a version per *watched* key, bumped by the writer thread after
/// every engine batch that wrote the key is applied (visible to reads).
///
/// Deleting a key because its deadline passed (the sweep, or a write to the expired name)
/// bumps a second version instead, the expiry version, which breaks only the watches taken
/// while the key was live, as in Redis 7: for a client that watched an already expired key,
/// deleting it changes nothing it could have seen. (A live key that passes its deadline
/// breaks its watchers at once, before anything deletes it: [`Store::watch_broken`].)
///
/// Why this is enough: a connection snapshots the version under the table's lock when it
/// WATCHes; EXEC (on the writer thread, after every earlier group is applied and bumped)
/// compares. A write the connection could not see when it watched (its group not yet
/// applied) is bumped after the snapshot, so EXEC aborts; a write applied before the
/// snapshot is visible to the connection's reads after WATCH, so it need not abort. A bump
/// may also follow a write the watcher did see (bumps come after visibility): that aborts
/// an EXEC Redis would run, never the reverse. Only watched keys have entries (the entry
/// lives while some connection watches it), so the table is bounded by the WATCHes of the
/// connected clients, not by the keyspace.
#[derive(Default)]
pub struct Watches {
    /// key -> (connections watching it, write version, expiry version).
    pub(super) keys: Mutex<HashMap<Vec<u8>, (u32, u64, u64)>>,
}

impl Store {
    /// WATCH: registers the connection's interest in `key` and snapshots its version.
    pub fn watch(&self, key: &[u8]) -> WatchedKey {
        let expired_then = self.expired_now(key);
        let mut w = self.watches.keys.lock();
        let e = w.entry(key.to_vec()).or_insert((0, 0, 0));
        e.0 += 1;
        WatchedKey {
            key: key.to_vec(),
            version: e.1,
            expiry_version: e.2,
            expired_then,
        }
    }

    /// Forgets WATCHes (UNWATCH, EXEC, DISCARD, a closed connection).
    pub fn unwatch(&self, keys: &[WatchedKey]) {
        if keys.is_empty() {
            return;
        }
        let mut w = self.watches.keys.lock();
        for k in keys {
            if let Some(e) = w.get_mut(&k.key) {
                e.0 = e.0.saturating_sub(1);
                if e.0 == 0 {
                    w.remove(&k.key);
                }
            }
        }
    }

    /// Whether any watched key was written since it was watched, or, if it was live then,
    /// has passed its deadline or been deleted for it.
    pub fn watch_broken(&self, keys: &[WatchedKey]) -> bool {
        let now = now_ms();
        let w = self.watches.keys.lock();
        keys.iter().any(|k| {
            let Some(&(_, version, expiry_version)) = w.get(&k.key) else {
                return true;
            };
            version != k.version
                || (!k.expired_then
                    && (expiry_version != k.expiry_version || self.expired(&k.key, now)))
        })
    }

    /// Bumps the versions of the watched keys among `keys` (called once the batch that
    /// wrote them is applied).
    pub fn touch_watched<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        self.bump(keys, |e| e.1 += 1);
    }

    /// Bumps the expiry versions of the watched keys among `keys`: they were deleted because
    /// their deadline had passed, and nothing else wrote them (called once that batch is
    /// applied).
    pub fn touch_expired<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        self.bump(keys, |e| e.2 += 1);
    }

    /// Applies `bump` to the table entry of each watched key among `keys`.
    fn bump<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        bump: impl Fn(&mut (u32, u64, u64)),
    ) {
        let mut w = self.watches.keys.lock();
        if w.is_empty() {
            return;
        }
        for k in keys {
            if let Some(e) = w.get_mut(k) {
                bump(e);
            }
        }
    }

    /// The keys some connection watches.
    pub(super) fn watched_keys(&self) -> Vec<Vec<u8>> {
        self.watches.keys.lock().keys().cloned().collect()
    }
}
