//! The drive's data model over the engine: strings, hashes and sorted sets as records in one
//! ordered key space ([`crate::keyspace`]), string expiry, and the reads and the write groups
//! the engine and writer threads run.
//!
//! Reads ([`Store`] methods) go straight to the engine; existence, type and length checks use
//! the DRAM-cached keytables only. Writes go through a [`WriteGroup`]: the writer thread
//! applies many clients' commands to one group (read-your-writes through its overlay), then
//! commits it as one atomic engine batch — a group commit.
//!
//! This module owns [`Store`] (the engine, the expiry index, the counters),
//! its errors, type lookup and FLUSHALL; the rest is split by concern:
//! [`read`] (one key's asynchronous read, GET/MGET, LS.RANGE), [`write`](mod@write) (the [`WriteGroup`]
//! core: overlay, commit, DEL, RENAME), [`string`], [`hash`], [`zset`] (each family's
//! commands), [`expiry`] (deadlines, TTL, the sweep), [`watch`] (WATCH's versions) and
//! [`scan`] (SCAN, KEYS, DBSIZE); [`set`] and [`list`] hold the set and list families, [`hash_more`] and [`zset_more`] the
//! commands added to hashes and sorted sets, and [`view`] the read
//! interface the collection reads share (applied state or a group's state).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use lsm::{Engine, EngineConfig, EngineError};
use parking_lot::RwLock;

use crate::keyspace as ks;

mod count;
pub mod cursor;
pub mod dump;
pub mod expiry;
pub mod hash;
pub mod hash_more;
pub mod list;
pub mod read;
pub mod scan;
pub mod set;
pub mod string;
pub mod view;
pub mod watch;
pub mod write;
pub mod zset;
pub mod zset_more;

pub use expiry::ttl_reply;
pub use read::{Here, KeyFound, KeyRead, StringGet};
pub use string::SetOptions;
pub use view::Picker;
pub use watch::{WatchedKey, Watches};
pub use write::{PendingCommit, WriteGroup};

/// Keys deleted per engine batch by FLUSHALL and large deletions (and keys walked per
/// engine call by the chunked range walks).
const DELETE_CHUNK: usize = 4096;

/// Why a data command failed; `reply_text` is what the client sees.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The key holds another type.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// INCR on a value that is not an integer.
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    /// INCR past i64.
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    /// ZADD INCR produced NaN.
    #[error("ERR resulting score is not a number (NaN)")]
    NanScore,
    /// RENAME of a key that does not exist.
    #[error("ERR no such key")]
    NoSuchKey,
    /// An expiry time that overflows (the command's name is in the text).
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpire(&'static str),
    /// A command error Redis reports only after looking at the key (its full text).
    #[error("{0}")]
    Refused(String),
    /// The engine refused or failed.
    #[error("ERR {0}")]
    Engine(#[from] EngineError),
}

impl StoreError {
    /// The error reply's text (without the leading `-`). A write to a drive opened
    /// read-only gets Redis's `READONLY` code, which clients know.
    ///
    /// A failed write says which outcome it had (docs/ARCHITECTURE.md, *Write outcomes*):
    /// "not applied" (it never will be: safe to retry), or "outcome unknown" (it may or may
    /// not be durable and may reappear after a restart: read back before retrying). Every
    /// other write error is refused before anything reached the device (not applied). The
    /// engine's messages say so themselves (`EngineError::WriteNotApplied`,
    /// `EngineError::OutcomeUnknown`).
    pub fn reply_text(&self) -> String {
        match self {
            StoreError::Engine(EngineError::ReadOnly) => {
                "READONLY the drive was opened read-only to recover a damaged device \
                 (--recover-read-only): writes are refused"
                    .into()
            }

            other => other.to_string(),
        }
    }
}

/// A key's type record as found in the applied state: its tag and the deadline its entry
/// carries (`None`: no type record).
pub(super) type TypeEntry = Option<(u8, Option<u64>)>;

/// Result of a store operation.
pub type Result<T> = std::result::Result<T, StoreError>;

/// The engine configuration the store needs on top of `base`: its expiry policy
/// ([`expiry::StringsExpire`]: compaction drops expired strings, never a collection's
/// header).
pub fn engine_config(base: EngineConfig) -> EngineConfig {
    EngineConfig {
        expiry_policy: Arc::new(expiry::StringsExpire),
        ..base
    }
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The data model over one engine.
pub struct Store {
    db: Engine,
    /// WATCH's per-key versions.
    pub watches: Watches,
    /// The deadlines not yet acted on, by key and by time: every key whose type record
    /// carries one, but for expired strings the sweep has already let go (see
    /// [`expiry`]). The deadlines themselves live in the type records' keytable entries.
    expiries: RwLock<expiry::Deadlines>,
    /// Whether `expiries` holds any deadline: set under its write lock after every change,
    /// so a read of a drive with no deadlines (the common case) skips the lock (a shared
    /// cache line the writer's and the readers' threads would bounce) and the clock. A
    /// reader that sees `false` while a deadline is being added reads as if just before
    /// that write, as one that took the lock first would.
    any_deadline: AtomicBool,
    /// The scan cursors the drive remembers (the exception to stateless cursors, see
    /// [`cursor`]).
    remembered: cursor::Remembered,
    /// Hit, miss and expiry counters (shared with asynchronous reads in flight).
    pub counters: Arc<KeyspaceCounters>,
    /// The number of keys, kept by the writer (DBSIZE in O(1); see [`count`]).
    keys: count::KeyCount,
    /// Cluster mode's slots being handed over, for the worker threads' second look.
    pub migrations: crate::cluster::Migrations,
    /// Held by `ls-writer` whenever it has work (a job, a group in flight, a sweep): the
    /// network thread runs a write group itself only while it can take it (see
    /// `exec::try_write_batch_now`), so the two never build groups at the same time. (While
    /// clients are blocked the writer still lets go in its waits; the network thread then
    /// declines on its own: `blocked_clients` is checked under the gate.)
    pub writer_gate: parking_lot::Mutex<()>,
}

/// Keyspace counters INFO reports.
#[derive(Debug, Default)]
pub struct KeyspaceCounters {
    /// Keys found expired and removed.
    pub expired_keys: AtomicU64,
    /// Reads that found their key.
    pub keyspace_hits: AtomicU64,
    /// Reads that did not.
    pub keyspace_misses: AtomicU64,
}

impl KeyspaceCounters {
    fn count_hit(&self, hit: bool) {
        if hit {
            self.keyspace_hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.keyspace_misses.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Store {
    /// Wraps an open engine (opened with [`expiry::StringsExpire`] as its expiry policy),
    /// loading the deadline index from the type records' entries (a walk over the DRAM
    /// keytables), after moving the deadline records of an older build into the entries.
    ///
    /// # Errors
    /// Engine read errors.
    pub fn open(db: Engine) -> Result<Store> {
        // A drive opened read-only to copy data off cannot move them: it reads them as an
        // older build did (the index, which `kind_at` consults too).
        let mut expiries = match expiry::move_legacy_deadlines(&db) {
            Err(StoreError::Engine(EngineError::ReadOnly)) => expiry::legacy_deadlines(&db)?,
            r => {
                r?;
                expiry::Deadlines::new()
            }
        };
        let mut keys = 0u64;
        for tag in ks::TOP_LEVEL {
            let end = ks::prefix_end(&[tag]);
            // Every entry counts, expired or not: each expired one is in the index until
            // the sweep lets it go (see `store::count`).
            let (entries, deadlines) = db.deadlines_in(&[tag], end.as_deref())?;
            keys += entries;
            for (k, d) in deadlines {
                if let Some(user) = k.get(1..) {
                    expiries.insert(user.to_vec(), d.get());
                }
            }
        }
        let keys = count::KeyCount::new(keys);
        Ok(Store {
            db,
            watches: Watches::default(),
            any_deadline: AtomicBool::new(!expiries.is_empty()),
            expiries: RwLock::new(expiries),
            remembered: cursor::Remembered::default(),
            counters: Arc::new(KeyspaceCounters::default()),
            keys,
            migrations: crate::cluster::Migrations::default(),
            writer_gate: parking_lot::Mutex::new(()),
        })
    }

    /// The engine underneath.
    pub fn engine(&self) -> &Engine {
        &self.db
    }

    /// Gives the engine back (for a clean close).
    pub fn into_engine(self) -> Engine {
        self.db
    }

    /// Whether the deadline index says `key` has passed its deadline (one hash lookup,
    /// none when no key has a deadline): the reads' early answer. A key the index no longer
    /// holds (an expired string the sweep let go) is hidden by the engine itself.
    pub(super) fn expired(&self, key: &[u8], now: u64) -> bool {
        if !self.may_have_deadlines() {
            return false;
        }
        let ex = self.expiries.read();
        !ex.is_empty() && ex.get(key).is_some_and(|&d| d < now)
    }

    /// Whether `key` has passed its deadline now (the clock is read only when some key has
    /// a deadline).
    pub(super) fn expired_now(&self, key: &[u8]) -> bool {
        self.may_have_deadlines() && self.expired(key, now_ms())
    }

    /// Whether the deadline index may hold any deadline (see `any_deadline`).
    pub(super) fn may_have_deadlines(&self) -> bool {
        self.any_deadline.load(Ordering::Acquire)
    }

    /// Notes whether the deadline index `ex` (write-locked by the caller) holds any
    /// deadline, after a change.
    fn note_deadlines(&self, ex: &expiry::Deadlines) {
        self.any_deadline.store(!ex.is_empty(), Ordering::Release);
    }

    /// Whether the deadline index still holds `key` (its deadline not yet acted on).
    pub(super) fn indexed(&self, key: &[u8]) -> bool {
        if !self.may_have_deadlines() {
            return false;
        }
        let ex = self.expiries.read();
        !ex.is_empty() && ex.get(key).is_some()
    }

    /// The type tag of `key` (one of [`ks::TOP_LEVEL`]; `None`: no key, or its deadline
    /// passed), from DRAM only.
    ///
    /// # Errors
    /// Engine errors.
    pub fn kind(&self, key: &[u8]) -> Result<Option<u8>> {
        self.kind_at(key, now_ms())
    }

    /// As [`Store::kind`], judging expiry at `now` (a transaction's fixed instant).
    ///
    /// # Errors
    /// Engine errors.
    pub fn kind_at(&self, key: &[u8], now: u64) -> Result<Option<u8>> {
        if self.expired(key, now) {
            return Ok(None);
        }
        Ok(self
            .type_entry(key)?
            .filter(|&(_, d)| d.is_none_or(|d| d >= now))
            .map(|(tag, _)| tag))
    }

    /// The tag of `key`'s type record in the applied state and the deadline its entry
    /// carries, expired or not: one engine call from DRAM, which stops at the record it
    /// finds (a key has one type; strings come first, so a string costs one lookup).
    ///
    /// # Errors
    /// Engine errors.
    pub(super) fn type_entry(&self, key: &[u8]) -> Result<TypeEntry> {
        self.type_entry_hinted(key, None)
    }

    /// [`Store::type_entry`], probing `hint`'s record first (the type the command works on),
    /// so a key of that type costs one engine lookup, not one per type ahead of it in
    /// [`ks::TOP_LEVEL`] (each a few hash probes and bloom checks: cache misses). Only the
    /// cost changes: a live record found first is the key's only one (a write to the name
    /// deletes the others in its batch), and an expired one sends the lookup back to
    /// [`ks::TOP_LEVEL`]'s order, as without a hint.
    ///
    /// # Errors
    /// Engine errors.
    pub(super) fn type_entry_hinted(&self, key: &[u8], hint: Option<u8>) -> Result<TypeEntry> {
        let tops = ks::TopKeys::new(key);
        let all = tops.all();
        let entry = |i: usize, d: lsm::Deadline| (ks::TOP_LEVEL[i], d.map(|d| d.get()));
        if let Some(h) = hint.and_then(|h| ks::TOP_LEVEL.iter().position(|&t| t == h)) {
            let mut order = [0usize; ks::TOP_LEVEL.len()];
            order[0] = h;
            for (slot, i) in order[1..]
                .iter_mut()
                .zip((0..ks::TOP_LEVEL.len()).filter(|&i| i != h))
            {
                *slot = i;
            }
            let keys: [&[u8]; ks::TOP_LEVEL.len()] = std::array::from_fn(|j| all[order[j]]);
            match self.db.first_written(&keys)? {
                None => return Ok(None),
                Some((j, d)) if d.is_none_or(|d| d.get() >= now_ms()) => {
                    return Ok(Some(entry(order[j], d)));
                }
                // Expired: judged below in the usual order.
                Some(_) => {}
            }
        }
        let Some((i, d)) = self.db.first_written(&all)? else {
            return Ok(None);
        };
        if d.is_some_and(|d| d.get() < now_ms()) {
            // An expired record never stands beside a live one of another type (a write
            // to the name deletes it first), but if one did, the live key wins.
            if let Some((j, d)) = self.db.first_present_until(&all[i + 1..])? {
                return Ok(Some(entry(i + 1 + j, d)));
            }
        }
        Ok(Some(entry(i, d)))
    }
}

/// The keys DBSIZE's count holds (see `store::count`) at `now`: the live ones (a walk over
/// the DRAM keytables judged at `now`, no device read) and the expired ones the deadline
/// index still holds.
fn count_type_records(db: &Engine, expiries: &expiry::Deadlines, now: u64) -> Result<u64> {
    let mut n = 0u64;
    for tag in ks::TOP_LEVEL {
        let end = ks::prefix_end(&[tag]);
        n += db.count_keys_at(&[tag], end.as_deref(), now)?;
    }
    Ok(n + expiries.due_count(now) as u64)
}

/// FLUSHALL: deletes every key at once ([`lsm::Engine::clear`]).
///
/// # Errors
/// Engine errors (the store is then as before, or, if the engine's manifest reached the
/// device, empty: the key count is recomputed either way).
pub fn flush_all(store: &Store) -> Result<()> {
    // The watched keys FLUSHALL deletes, judged before it: deleting a live key is a change
    // to every watcher, deleting an expired one only to those that watched it live, and a
    // missing key is no change (as Redis 7's `touchAllWatchedKeysInDb`). An engine error
    // counts as live (an extra abort, never a missed one). An expired key the sweep has let
    // go of is gone already, as Redis's would be.
    let (mut live, mut expired) = (Vec::new(), Vec::new());
    for k in store.watched_keys() {
        if store.kind(&k).map_or(true, |t| t.is_some()) {
            live.push(k);
        } else if store.indexed(&k) {
            expired.push(k);
        }
    }
    // Every record, expired or not, in one atomic step: the engine drops its runs and log
    // and frees their segments (a manifest write, not a tombstone per key).
    let r = store.db.clear();
    match &r {
        // Refused before anything changed.
        Err(EngineError::ReadOnly | EngineError::Closed) => {}
        Ok(()) => {
            let mut ex = store.expiries.write();
            ex.clear();
            store.note_deadlines(&ex);
            drop(ex);
            store.remembered.clear();
            store.keys.set(0);
        }
        Err(_) => {
            // The engine is empty now (a failed manifest write may leave the old state on
            // the device for the next open): the writer recounts.
            let mut ex = store.expiries.write();
            ex.clear();
            store.note_deadlines(&ex);
            drop(ex);
            store.remembered.clear();
            store.keys.mark_stale();
        }
    }
    let r = r.map_err(StoreError::from);
    // Even a failed FLUSHALL may have deleted some keys: WATCHers must see a change.
    store.touch_watched(live.iter().map(Vec::as_slice));
    store.touch_expired(expired.iter().map(Vec::as_slice));
    r
}

/// Parses a Redis integer string strictly (no spaces, no leading `+`, no leading zeros).
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty()
        || s.starts_with('+')
        || (s.len() > 1 && s.starts_with('0'))
        || s.starts_with("-0")
    {
        return None;
    }
    s.parse().ok()
}

/// A store on a small RAM device, for tests that need to close and open it again.
#[cfg(test)]
pub(crate) mod testing {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};

    use super::{Store, WriteGroup};

    /// Applies `f`'s commands to `s` as one committed group.
    pub fn write(s: &Store, f: impl FnOnce(&mut WriteGroup<'_>)) {
        let mut g = WriteGroup::new(s);
        f(&mut g);
        g.commit().unwrap();
    }

    /// Formats `ram` (or opens what it holds) and opens a store on it.
    pub fn open(ram: &RamStore, format: bool) -> Store {
        let g = Geometry {
            channels: 2,
            ways: 2,
            blocks_per_chip: 64,
            pages_per_block: 8,
            spare_blocks_per_chip: 1,
        };
        let backend = Backend::Ram(ram.clone());
        let cfg = DeviceConfig::new(g);
        let dev = if format {
            Ftl::format(&backend, cfg).unwrap()
        } else {
            Ftl::open(&backend, cfg).unwrap()
        };
        let engine = lsm::Engine::open(
            Arc::new(dev) as Arc<dyn AppendDevice>,
            super::engine_config(lsm::EngineConfig::default()),
        )
        .unwrap();
        Store::open(engine).unwrap()
    }
}

#[cfg(test)]
mod tests;
