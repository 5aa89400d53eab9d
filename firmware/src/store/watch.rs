//! WATCH's change detection: a version per watched key ([`Watches`]).

use foldhash::HashMap;
use parking_lot::Mutex;

use super::{now_ms, Store};

/// What a connection noted when it WATCHed a key (see [`Watches`]).
#[derive(Debug, Clone)]
pub struct WatchedKey {
    /// The user key.
    pub key: Vec<u8>,
    /// The key's version in the watch table when it was watched.
    version: u64,
    /// Whether the key was already expired then (a deadline passing afterwards aborts EXEC,
    /// as in Redis, even before the expiry sweep removes the key).
    expired_then: bool,
}

/// WATCH's change detection: a version per *watched* key, bumped by the writer thread after
/// every engine batch that wrote the key is applied (visible to reads).
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
    /// key -> (connections watching it, version).
    pub(super) keys: Mutex<HashMap<Vec<u8>, (u32, u64)>>,
}

impl Store {
    /// WATCH: registers the connection's interest in `key` and snapshots its version.
    pub fn watch(&self, key: &[u8]) -> WatchedKey {
        let expired_then = self.expired(key, now_ms());
        let mut w = self.watches.keys.lock();
        let e = w.entry(key.to_vec()).or_insert((0, 0));
        e.0 += 1;
        WatchedKey {
            key: key.to_vec(),
            version: e.1,
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

    /// Whether any watched key was written (or passed its deadline) since it was watched.
    pub fn watch_broken(&self, keys: &[WatchedKey]) -> bool {
        let now = now_ms();
        let w = self.watches.keys.lock();
        keys.iter().any(|k| {
            let current = w.get(&k.key).map(|e| e.1);
            current != Some(k.version) || (!k.expired_then && self.expired(&k.key, now))
        })
    }

    /// Bumps the versions of the watched keys among `keys` (called once the batch that
    /// wrote them is applied).
    pub fn touch_watched<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        let mut w = self.watches.keys.lock();
        if w.is_empty() {
            return;
        }
        for k in keys {
            if let Some(e) = w.get_mut(k) {
                e.1 += 1;
            }
        }
    }

    /// Bumps every watched key (FLUSHALL).
    pub fn touch_all_watched(&self) {
        for e in self.watches.keys.lock().values_mut() {
            e.1 += 1;
        }
    }
}
