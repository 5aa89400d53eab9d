//! The drive's data model over the engine: strings, hashes and sorted sets as records in one
//! ordered key space ([`crate::keyspace`]), string expiry, and the reads and the write groups
//! the engine and writer threads run.
//!
//! Reads ([`Store`] methods) go straight to the engine; existence, type and length checks use
//! the DRAM-cached keytables only. Writes go through a [`WriteGroup`]: the writer thread
//! applies many clients' commands to one group (read-your-writes through its overlay), then
//! commits it as one atomic engine batch — a group commit.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use lsm::{Engine, EngineError, Probes, RangeRead, WriteOp};
use parking_lot::{Mutex, RwLock};

use crate::keyspace::{
    self as ks, EXPIRY, HASH, HASH_FIELD, STRING, ZSET, ZSET_MEMBER, ZSET_ORDER,
};

/// Value bytes after which an `LS.RANGE` reply stops early (the client continues from its
/// last key), so one command cannot make the drive buffer gigabytes.
pub const RANGE_REPLY_BYTES: u64 = 64 << 20;

/// Receives the pairs of [`Store::range_strings_async`].
pub type OnPairs = Box<dyn FnOnce(Result<Vec<(Bytes, Bytes)>>) + Send>;

/// Scan cursors remembered at once (the oldest is forgotten first).
const MAX_SCAN_CURSORS: usize = 16_384;
/// Keys deleted per engine batch by FLUSHALL and large deletions.
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
    /// SCAN with a cursor this drive did not hand out (or forgot).
    #[error("ERR invalid cursor")]
    InvalidCursor,
    /// RENAME of a key that does not exist.
    #[error("ERR no such key")]
    NoSuchKey,
    /// An expiry time that overflows (the command's name is in the text).
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpire(&'static str),
    /// EXPIRE and friends on a hash or sorted set: only strings carry deadlines so far.
    #[error("ERR this drive keeps expiry times for string keys only (hashes and sorted sets cannot expire yet)")]
    ExpiryUnsupported,
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

/// Result of a store operation.
pub type Result<T> = std::result::Result<T, StoreError>;

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Position of a SCAN: which top-level range, and the last key returned in it.
#[derive(Debug, Clone)]
struct ScanPosition {
    tag_index: usize,
    after: Option<Vec<u8>>,
}

/// SCAN cursors handed out, by number.
#[derive(Default)]
struct Cursors {
    next: u64,
    by_id: BTreeMap<u64, ScanPosition>,
}

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
    keys: Mutex<HashMap<Vec<u8>, (u32, u64)>>,
}

/// The data model over one engine.
pub struct Store {
    db: Engine,
    /// WATCH's per-key versions.
    pub watches: Watches,
    /// Deadline (unix ms) of every string key that has one.
    expiries: RwLock<HashMap<Vec<u8>, u64>>,
    cursors: Mutex<Cursors>,
    /// Hit, miss and expiry counters (shared with asynchronous reads in flight).
    pub counters: Arc<KeyspaceCounters>,
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

/// Receives the values of [`Store::get_strings_async`] in key order (`None`: missing or
/// expired), and for each key named in `typed` whether it holds another type.
pub type OnStrings = Box<dyn FnOnce(Result<Vec<Option<Bytes>>>, Vec<bool>) + Send>;

/// What one key's read asks for (see [`Store::read_key_async`]).
#[derive(Debug, Clone, Copy)]
pub enum KeyRead<'a> {
    /// The key's own record under `tag`: a string's value, a hash's or sorted set's count.
    Record {
        /// [`STRING`], [`HASH`] or [`ZSET`].
        tag: u8,
    },
    /// Records under the key by name: hash fields ([`HASH_FIELD`]) or sorted-set members'
    /// scores ([`ZSET_MEMBER`]).
    Subs {
        /// The records' tag.
        sub_tag: u8,
        /// Field or member names.
        names: &'a [Bytes],
    },
    /// Every record under the key with `sub_tag`, in name order (HGETALL).
    AllSubs {
        /// The records' tag.
        sub_tag: u8,
    },
}

/// What [`Store::read_key_async`] found, as of one instant.
#[derive(Debug, Default, PartialEq)]
pub struct KeyFound {
    /// The key's type ([`STRING`], [`HASH`], [`ZSET`]); `None`: no such key (or expired).
    pub kind: Option<u8>,
    /// [`KeyRead::Record`] and [`KeyRead::Subs`]: the values in order (all `None` when the
    /// key does not exist).
    pub values: Vec<Option<Bytes>>,
    /// [`KeyRead::AllSubs`]: (name, value) pairs in name order.
    pub pairs: Vec<(Bytes, Bytes)>,
}

/// Receives the result of [`Store::read_key_async`].
pub type OnKey = Box<dyn FnOnce(Result<KeyFound>) + Send>;

/// One reply of [`Store::scan`]: the next cursor (0 = done) and the keys.
pub type ScanPage = (u64, Vec<Bytes>);

/// The engine keys of one key's read (see [`Store::read_key_async`]).
struct KeyRequest {
    /// Records read by name (or the key's own record).
    keys: Vec<Vec<u8>>,
    /// Type records of the key, the command's own type first: at most one exists, so the
    /// engine stops at the first it finds (and, for a read of the key's own record, asks
    /// only when that record is missing).
    probes: Vec<Vec<u8>>,
    finish: KeyFinish,
    /// `AllSubs`: the records' prefix and its end.
    range: Option<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Turns what the engine found into a [`KeyFound`].
#[derive(Clone)]
struct KeyFinish {
    /// The key is a string past its deadline.
    expired: bool,
    names: usize,
    prefix_len: usize,
    /// `Record`: the type whose record was read (found means the key has that type).
    record: Option<u8>,
    /// The type of each probe, in order.
    probe_tags: Vec<u8>,
}

/// The type a record tag belongs to: hash fields to hashes, members to sorted sets.
fn owner_type(sub_tag: u8) -> u8 {
    if sub_tag == ZSET_MEMBER || sub_tag == ZSET_ORDER {
        ZSET
    } else {
        HASH
    }
}

impl KeyRequest {
    fn new(key: &[u8], what: &KeyRead<'_>, expired: bool) -> KeyRequest {
        let mut keys = Vec::new();
        let mut range = None;
        let (own, record) = match what {
            KeyRead::Record { tag } => {
                keys.push(ks::top(*tag, key));
                (*tag, Some(*tag))
            }
            KeyRead::Subs { sub_tag, names } => {
                keys.extend(names.iter().map(|n| ks::sub(*sub_tag, key, n)));
                (owner_type(*sub_tag), None)
            }
            KeyRead::AllSubs { sub_tag } => {
                let prefix = ks::sub_prefix(*sub_tag, key);
                let end = ks::prefix_end(&prefix);
                range = Some((prefix, end));
                (owner_type(*sub_tag), None)
            }
        };
        // The own record is among the keys read by a `Record` read: not probed again.
        let probe_tags: Vec<u8> = std::iter::once(own)
            .filter(|_| record.is_none())
            .chain(ks::TOP_LEVEL.into_iter().filter(|&t| t != own))
            .collect();
        KeyRequest {
            probes: probe_tags.iter().map(|&t| ks::top(t, key)).collect(),
            finish: KeyFinish {
                expired,
                names: keys.len(),
                prefix_len: range.as_ref().map_or(0, |(p, _): &(Vec<u8>, _)| p.len()),
                record,
                probe_tags,
            },
            keys,
            range,
        }
    }

    fn key_refs(&self) -> Vec<&[u8]> {
        self.keys.iter().map(Vec::as_slice).collect()
    }

    fn probe_refs(&self) -> Vec<&[u8]> {
        self.probes.iter().map(Vec::as_slice).collect()
    }

    /// How the engine answers the probes (see [`KeyRequest::probes`]).
    fn probes<'a>(&self, refs: &'a [&'a [u8]]) -> Probes<'a> {
        if self.finish.record.is_some() {
            Probes::FirstOfUnlessFound(refs)
        } else {
            Probes::FirstOf(refs)
        }
    }

    fn range(&self) -> Option<RangeRead<'_>> {
        self.range.as_ref().map(|(prefix, end)| RangeRead {
            start: prefix,
            end: end.as_deref(),
            limit: usize::MAX,
            max_bytes: u64::MAX,
            skip: None,
        })
    }
}

impl KeyFinish {
    /// The key's type (a string past its deadline counts as missing) and its records; a
    /// missing key shows none.
    fn finish(self, found: lsm::Lookup, counters: &KeyspaceCounters) -> KeyFound {
        let kind = match self.record {
            Some(tag) if found.values.first().is_some_and(Option::is_some) => Some(tag),
            _ => self
                .probe_tags
                .iter()
                .zip(&found.present)
                .find(|(_, &p)| p)
                .map(|(&t, _)| t),
        };
        let kind = kind.filter(|&t| !(t == STRING && self.expired));
        counters.count_hit(kind.is_some());
        if kind.is_none() {
            // Leftovers of no live key (an expired string) are not shown.
            return KeyFound {
                kind,
                values: vec![None; self.names],
                pairs: Vec::new(),
            };
        }
        let skip = self.prefix_len;
        KeyFound {
            kind,
            values: found.values,
            pairs: found
                .pairs
                .into_iter()
                .map(|(k, v)| (Bytes::from(k).slice(skip..), v))
                .collect(),
        }
    }
}

impl Store {
    /// Wraps an open engine, loading the expiry index.
    ///
    /// # Errors
    /// Engine read errors.
    pub fn open(db: Engine) -> Result<Store> {
        let mut expiries = HashMap::new();
        let end = ks::prefix_end(&[EXPIRY]);
        for (k, v) in db.range(&[EXPIRY], end.as_deref(), usize::MAX)? {
            if let (Some(key), Some(deadline)) = (k.get(1..), ks::decode_deadline(&v)) {
                expiries.insert(key.to_vec(), deadline);
            }
        }
        Ok(Store {
            db,
            watches: Watches::default(),
            expiries: RwLock::new(expiries),
            cursors: Mutex::new(Cursors {
                next: 1,
                by_id: BTreeMap::new(),
            }),
            counters: Arc::new(KeyspaceCounters::default()),
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

    /// Whether string `key` has passed its deadline.
    fn expired(&self, key: &[u8], now: u64) -> bool {
        let ex = self.expiries.read();
        !ex.is_empty() && ex.get(key).is_some_and(|&d| d <= now)
    }

    /// GET answered from DRAM alone when it can be: the string value of `key` if the key is
    /// a live, unexpired string whose value the value cache holds whole. `None` otherwise
    /// (missing, expired, another type, not cached): the general path answers those.
    pub fn get_string_cached(&self, key: &[u8]) -> Option<Bytes> {
        /// Keys up to this long are tagged on the stack (no allocation).
        const STACK_KEY: usize = 128;
        if self.expired(key, now_ms()) {
            return None;
        }
        let mut stack = [0u8; STACK_KEY];
        let heap;
        let tagged: &[u8] = if key.len() < STACK_KEY {
            stack[0] = STRING;
            stack[1..=key.len()].copy_from_slice(key);
            &stack[..=key.len()]
        } else {
            heap = ks::top(STRING, key);
            &heap
        };
        let v = self.db.get_cached(tagged)?;
        self.counters.count_hit(true);
        Some(v)
    }

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

    /// The deadline (unix ms) of string `key`, if it has one.
    pub fn deadline(&self, key: &[u8]) -> Option<u64> {
        self.expiries.read().get(key).copied()
    }

    /// TTL, PTTL, EXPIRETIME and PEXPIRETIME, from DRAM only.
    ///
    /// # Errors
    /// Engine errors.
    pub fn ttl(&self, key: &[u8], kind: kvproto::TtlKind) -> Result<i64> {
        let found = self.kind(key)?;
        Ok(ttl_reply(found, self.deadline(key), kind, now_ms()))
    }

    /// KEYS: every live key matching `pattern`, walked in key order in chunks (the keyspace
    /// is never held whole; only the matches are). A pattern with a literal prefix walks
    /// only the keys with that prefix.
    ///
    /// # Errors
    /// Engine errors.
    pub fn keys(&self, pattern: &[u8]) -> Result<Vec<Bytes>> {
        let literal = literal_prefix(pattern);
        let now = now_ms();
        let mut out = Vec::new();
        for tag in ks::TOP_LEVEL {
            let prefix = ks::top(tag, &literal);
            let end = ks::prefix_end(&prefix);
            let mut from = prefix.clone();
            loop {
                let keys = self.db.range_keys(&from, end.as_deref(), DELETE_CHUNK)?;
                for k in &keys {
                    let user = k.get(1..).unwrap_or_default();
                    if tag == STRING && self.expired(user, now) {
                        continue;
                    }
                    if kvproto::glob::glob_match(pattern, user) {
                        out.push(Bytes::copy_from_slice(user));
                    }
                }
                match keys.last() {
                    Some(l) if keys.len() == DELETE_CHUNK => {
                        from = l.clone();
                        from.push(0);
                    }
                    _ => break,
                }
            }
        }
        Ok(out)
    }

    /// Keys with a deadline.
    pub fn expiring_keys(&self) -> usize {
        self.expiries.read().len()
    }

    /// Keys whose deadline has passed, at most `limit`.
    pub fn due_expiries(&self, limit: usize) -> Vec<Vec<u8>> {
        let now = now_ms();
        self.expiries
            .read()
            .iter()
            .filter(|(_, &d)| d <= now)
            .take(limit)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The type tag of `key` ([`STRING`], [`HASH`], [`ZSET`]), from DRAM only.
    ///
    /// # Errors
    /// Engine errors.
    pub fn kind(&self, key: &[u8]) -> Result<Option<u8>> {
        let keys = [ks::top(STRING, key), ks::top(HASH, key), ks::top(ZSET, key)];
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let lens = self.db.value_lens(&refs)?;
        if lens[0].is_some() && !self.expired(key, now_ms()) {
            return Ok(Some(STRING));
        }
        if lens[1].is_some() {
            return Ok(Some(HASH));
        }
        if lens[2].is_some() {
            return Ok(Some(ZSET));
        }
        Ok(None)
    }

    /// Which of `keys` have passed their deadline (one lock, nothing to look up when no key
    /// has a deadline).
    fn expired_mask(&self, keys: &[&[u8]], now: u64) -> Vec<bool> {
        let ex = self.expiries.read();
        if ex.is_empty() {
            return vec![false; keys.len()];
        }
        keys.iter()
            .map(|k| ex.get(*k).is_some_and(|&d| d <= now))
            .collect()
    }

    /// MGET answered at once when DRAM holds all of it (the value pages in the value cache):
    /// the string values of `keys` (`None`: missing, expired or of another type); `None`
    /// when a page would have to come from the device, or the engine failed.
    pub fn get_strings_now(&self, keys: &[&[u8]]) -> Option<Vec<Option<Bytes>>> {
        let expired = self.expired_mask(keys, now_ms());
        let engine_keys: Vec<Vec<u8>> = keys.iter().map(|k| ks::top(STRING, k)).collect();
        let refs: Vec<&[u8]> = engine_keys.iter().map(Vec::as_slice).collect();
        let found = self
            .db
            .lookup_cached(&refs, Probes::NONE, None)
            .ok()
            .flatten()?;
        Some(
            found
                .values
                .into_iter()
                .zip(expired)
                .map(|(v, exp)| {
                    let v = if exp { None } else { v };
                    self.counters.count_hit(v.is_some());
                    v
                })
                .collect(),
        )
    }

    /// String values of many keys without waiting for the device: the reads are submitted
    /// and `done` runs on the engine's poller thread once they are all in (or here, when
    /// nothing needs reading). A value within one device page arrives as a slice of the
    /// page read, without a copy. Expiry is judged when the reads are issued. For each key
    /// in `typed`, `done` also learns whether it holds a hash or a sorted set, looked up at
    /// the same instant as the values (so a GET answers nil or WRONGTYPE consistently).
    /// `done` must be short and must not call into the store.
    pub fn get_strings_async(&self, keys: &[&[u8]], typed: &[&[u8]], done: OnStrings) {
        let expired = self.expired_mask(keys, now_ms());
        let engine_keys: Vec<Vec<u8>> = keys.iter().map(|k| ks::top(STRING, k)).collect();
        let refs: Vec<&[u8]> = engine_keys.iter().map(Vec::as_slice).collect();
        let probe_keys: Vec<Vec<u8>> = typed
            .iter()
            .flat_map(|k| [ks::top(HASH, k), ks::top(ZSET, k)])
            .collect();
        let probes: Vec<&[u8]> = probe_keys.iter().map(Vec::as_slice).collect();
        let counters = self.counters.clone();
        self.db.multi_get_async_probed(
            &refs,
            &probes,
            Box::new(move |r, present| {
                let other_type: Vec<bool> =
                    present.chunks(2).map(|p| p.iter().any(|&b| b)).collect();
                let out = r.map_err(StoreError::from).map(|values| {
                    values
                        .into_iter()
                        .zip(expired)
                        .map(|(v, exp)| {
                            let v = if exp { None } else { v };
                            counters.count_hit(v.is_some());
                            v
                        })
                        .collect()
                });
                done(out, other_type);
            }),
        );
    }

    /// One key's read without waiting (the reading commands other than GET, MGET and the
    /// DRAM-only ones): the key's type is judged from DRAM and its records are read, all as
    /// of one instant, so the reply is consistent (a type check and a value read never
    /// straddle a write). The value pages go to the device and `done` runs on the engine's
    /// poller thread once they are in (or here when nothing needs reading). A string past
    /// its deadline counts as missing. `done` must be short and must not call into the
    /// store.
    pub fn read_key_async(&self, key: &[u8], what: &KeyRead<'_>, done: OnKey) {
        let req = KeyRequest::new(key, what, self.expired(key, now_ms()));
        let (keys, probe_refs) = (req.key_refs(), req.probe_refs());
        let range = req.range();
        let counters = self.counters.clone();
        let finish = req.finish.clone();
        self.db.lookup_async(
            &keys,
            req.probes(&probe_refs),
            range.as_ref(),
            Box::new(move |r| {
                done(
                    r.map_err(StoreError::from)
                        .map(|l| finish.finish(l, &counters)),
                )
            }),
        );
    }

    /// [`Store::read_key_async`] answered at once when DRAM holds everything it needs (the
    /// value pages in the value cache); `None` when a page would have to come from the
    /// device, or the engine failed (the asynchronous read then reports it).
    pub fn read_key_now(&self, key: &[u8], what: &KeyRead<'_>) -> Option<KeyFound> {
        let req = KeyRequest::new(key, what, self.expired(key, now_ms()));
        let (keys, probe_refs) = (req.key_refs(), req.probe_refs());
        let range = req.range();
        let found = self
            .db
            .lookup_cached(&keys, req.probes(&probe_refs), range.as_ref())
            .ok()
            .flatten()?;
        Some(req.finish.finish(found, &self.counters))
    }

    /// [`Store::read_key_async`], waiting for the result.
    ///
    /// # Errors
    /// Engine errors.
    #[cfg(test)]
    pub fn read_key(&self, key: &[u8], what: &KeyRead<'_>) -> Result<KeyFound> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.read_key_async(
            key,
            what,
            Box::new(move |r| {
                // The caller is waiting on the other end.
                let _ = tx.send(r);
            }),
        );
        rx.recv()
            .map_err(|_| StoreError::Engine(EngineError::Closed))?
    }

    /// STRLEN, from DRAM only.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn strlen(&self, key: &[u8]) -> Result<i64> {
        match self.kind(key)? {
            None => Ok(0),
            Some(STRING) => {
                let k = ks::top(STRING, key);
                Ok(self.db.value_lens(&[&k])?[0].map_or(0, i64::from))
            }
            Some(_) => Err(StoreError::WrongType),
        }
    }

    /// How many of `keys` exist (a key named twice counts twice), from DRAM only.
    ///
    /// # Errors
    /// Engine errors.
    pub fn exists(&self, keys: &[&[u8]]) -> Result<i64> {
        let mut n = 0;
        for k in keys {
            if self.kind(k)?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// HEXISTS, from DRAM only.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn hash_exists(&self, key: &[u8], field: &[u8]) -> Result<bool> {
        match self.kind(key)? {
            None => Ok(false),
            Some(HASH) => {
                let k = ks::sub(HASH_FIELD, key, field);
                Ok(self.db.value_lens(&[&k])?[0].is_some())
            }
            Some(_) => Err(StoreError::WrongType),
        }
    }

    /// ZRANGEBYSCORE over the score-order records (DRAM only): members with `min <= score
    /// <= max` as bounded by the inclusive flags, skipping `offset`, at most `count`.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn zrange_by_score(
        &self,
        key: &[u8],
        min: (f64, bool),
        max: (f64, bool),
        offset: usize,
        count: Option<usize>,
    ) -> Result<Vec<(Bytes, f64)>> {
        match self.kind(key)? {
            None => return Ok(Vec::new()),
            Some(ZSET) => {}
            Some(_) => return Err(StoreError::WrongType),
        }
        let prefix = ks::sub_prefix(ZSET_ORDER, key);
        let mut start = prefix.clone();
        start.extend_from_slice(&ks::sortable_score(min.0));
        let end = ks::prefix_end(&prefix);
        let mut out = Vec::new();
        let mut skipped = 0;
        let mut from = start;
        loop {
            let keys = self.db.range_keys(&from, end.as_deref(), DELETE_CHUNK)?;
            let last = keys.last().cloned();
            for k in &keys {
                let Some((score, member)) = ks::parse_order(prefix.len(), k) else {
                    continue;
                };
                if score < min.0 || (!min.1 && score == min.0) {
                    continue;
                }
                if score > max.0 || (!max.1 && score == max.0) {
                    return Ok(out);
                }
                if skipped < offset {
                    skipped += 1;
                    continue;
                }
                if count.is_some_and(|c| out.len() >= c) {
                    return Ok(out);
                }
                out.push((member, score));
            }
            match last {
                Some(mut l) if keys.len() == DELETE_CHUNK => {
                    l.push(0);
                    from = l;
                }
                _ => return Ok(out),
            }
        }
    }

    /// `LS.RANGE` without waiting: up to `count` string keys with `start <= key < end` (an
    /// empty `end`: no upper bound) and their values, in key order, expired keys left out.
    /// Keys and values are taken at one instant; `done` runs on the engine's poller thread.
    /// The reply stops early after the pair whose values pass [`RANGE_REPLY_BYTES`], so a
    /// client continues from its last key; only an empty reply means the range is done.
    pub fn range_strings_async(&self, start: &[u8], end: &[u8], count: usize, done: OnPairs) {
        let from = ks::top(STRING, start);
        let to = if end.is_empty() {
            ks::prefix_end(&[STRING])
        } else {
            Some(ks::top(STRING, end))
        };
        if to.as_deref().is_some_and(|t| t <= from.as_slice()) {
            return done(Ok(Vec::new()));
        }
        let now = now_ms();
        let expiries = self.expiries.read();
        // Judged under the engine lock as the keys are taken. The expiry read lock is held
        // across the engine call; no code waits for the expiry lock while it holds the
        // engine lock, so the order cannot deadlock.
        let skip =
            |k: &[u8]| !expiries.is_empty() && expiries.get(&k[1..]).is_some_and(|&d| d <= now);
        let range = RangeRead {
            start: &from,
            end: to.as_deref(),
            limit: count,
            max_bytes: RANGE_REPLY_BYTES,
            skip: Some(&skip),
        };
        self.db.range_async(
            &range,
            Box::new(move |r| {
                done(r.map_err(StoreError::from).map(|pairs| {
                    pairs
                        .into_iter()
                        .map(|(k, v)| (Bytes::from(k).slice(1..), v))
                        .collect()
                }));
            }),
        );
        drop(expiries);
    }

    /// Keys across strings, hashes and sorted sets (DRAM only), for DBSIZE.
    ///
    /// # Errors
    /// Engine errors.
    pub fn dbsize(&self) -> Result<i64> {
        let mut n = 0u64;
        for tag in ks::TOP_LEVEL {
            let end = ks::prefix_end(&[tag]);
            n += self.db.count_keys(&[tag], end.as_deref())?;
        }
        let now = now_ms();
        let expired = self.expiries.read().values().filter(|&&d| d <= now).count() as u64;
        Ok(n.saturating_sub(expired) as i64)
    }

    /// One SCAN step: up to about `count` keys from where `cursor` left off, matching
    /// `pattern` and `kind`. A key present for the whole scan is returned (keys are walked
    /// in order and the cursor remembers the last one).
    ///
    /// # Errors
    /// `InvalidCursor`, engine errors.
    pub fn scan(
        &self,
        cursor: u64,
        pattern: Option<&[u8]>,
        count: usize,
        kind: Option<&[u8]>,
    ) -> Result<ScanPage> {
        let mut pos = if cursor == 0 {
            ScanPosition {
                tag_index: 0,
                after: None,
            }
        } else {
            self.cursors
                .lock()
                .by_id
                .get(&cursor)
                .cloned()
                .ok_or(StoreError::InvalidCursor)?
        };
        let count = count.max(1);
        let now = now_ms();
        let mut out = Vec::new();
        let mut visited = 0;
        while pos.tag_index < ks::TOP_LEVEL.len() && visited < count {
            let tag = ks::TOP_LEVEL[pos.tag_index];
            let start = match &pos.after {
                Some(a) => {
                    let mut s = a.clone();
                    s.push(0);
                    s
                }
                None => vec![tag],
            };
            let end = ks::prefix_end(&[tag]);
            let keys = self
                .db
                .range_keys(&start, end.as_deref(), count - visited)?;
            if keys.len() < count - visited {
                pos.tag_index += 1;
                pos.after = None;
            } else {
                pos.after = keys.last().cloned();
            }
            visited += keys.len();
            let type_ok =
                kind.is_none_or(|t| t.eq_ignore_ascii_case(ks::type_name(tag).as_bytes()));
            for k in keys {
                let user = k.get(1..).unwrap_or_default();
                if tag == STRING && self.expired(user, now) {
                    continue;
                }
                if type_ok && pattern.is_none_or(|p| kvproto::glob::glob_match(p, user)) {
                    out.push(Bytes::copy_from_slice(user));
                }
            }
        }
        if pos.tag_index >= ks::TOP_LEVEL.len() {
            return Ok((0, out));
        }
        let mut c = self.cursors.lock();
        let id = c.next;
        c.next += 1;
        c.by_id.insert(id, pos);
        while c.by_id.len() > MAX_SCAN_CURSORS {
            c.by_id.pop_first();
        }
        Ok((id, out))
    }
}

/// What a write command decided about one string key's deadline.
#[derive(Debug, Clone, Copy)]
enum DeadlineChange {
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
    let Some(found) = found else {
        return -2;
    };
    let Some(d) = deadline.filter(|_| found == STRING) else {
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

/// The bytes of a glob pattern before its first special character (every key it matches
/// starts with them).
fn literal_prefix(pattern: &[u8]) -> Vec<u8> {
    pattern
        .iter()
        .take_while(|b| !matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .copied()
        .collect()
}

/// A group whose engine batch is on the device ([`WriteGroup::try_submit`]).
pub struct PendingCommit {
    write: Option<lsm::PendingWrite>,
    deadlines: HashMap<Vec<u8>, DeadlineChange>,
    value_bytes: u64,
}

impl PendingCommit {
    /// Waits until the group is durable and applied, then publishes its expiry changes;
    /// returns the value bytes it wrote.
    ///
    /// # Errors
    /// The engine's failure: nothing of the group is applied.
    pub fn finish(self, store: &Store) -> Result<u64> {
        if let Some(w) = self.write {
            store.db.finish_write(w)?;
        }
        let mut ex = store.expiries.write();
        for (k, c) in self.deadlines {
            match c {
                DeadlineChange::Set(d) => {
                    ex.insert(k, d);
                }
                DeadlineChange::Clear => {
                    ex.remove(&k);
                }
            }
        }
        Ok(self.value_bytes)
    }
}

/// Many commands' writes gathered for one atomic engine batch, with read-your-writes.
pub struct WriteGroup<'s> {
    store: &'s Store,
    /// Latest state of every engine key this group wrote (`None`: deleted).
    overlay: BTreeMap<Vec<u8>, Option<Bytes>>,
    deadlines: HashMap<Vec<u8>, DeadlineChange>,
    bytes: usize,
}

/// The SET command's options, resolved.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetOptions {
    /// Absolute deadline (unix ms).
    pub deadline: Option<u64>,
    /// Only if the key does not exist.
    pub nx: bool,
    /// Only if it exists.
    pub xx: bool,
    /// Keep the key's current deadline.
    pub keep_ttl: bool,
    /// Return the old value.
    pub get: bool,
}

/// Outcome of SET: whether it was applied, and the old value when asked for.
#[derive(Debug, Clone)]
pub struct SetOutcome {
    /// Whether the value was written (NX/XX).
    pub applied: bool,
    /// The previous string value (SET ... GET).
    pub old: Option<Bytes>,
}

impl<'s> WriteGroup<'s> {
    /// An empty group over `store`.
    pub fn new(store: &'s Store) -> WriteGroup<'s> {
        WriteGroup {
            store,
            overlay: BTreeMap::new(),
            deadlines: HashMap::new(),
            bytes: 0,
        }
    }

    /// Bytes of keys and values gathered so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn put(&mut self, key: Vec<u8>, value: Bytes) {
        self.bytes += key.len() + value.len();
        self.overlay.insert(key, Some(value));
    }

    fn del(&mut self, key: Vec<u8>) {
        self.bytes += key.len();
        self.overlay.insert(key, None);
    }

    fn read(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.overlay.get(key) {
            Some(v) => Ok(v.clone()),
            None => Ok(self.store.db.get(key)?.map(Bytes::from)),
        }
    }

    fn present(&self, key: &[u8]) -> Result<bool> {
        match self.overlay.get(key) {
            Some(v) => Ok(v.is_some()),
            None => Ok(self.store.db.value_lens(&[key])?[0].is_some()),
        }
    }

    fn deadline(&self, key: &[u8]) -> Option<u64> {
        match self.deadlines.get(key) {
            Some(DeadlineChange::Set(d)) => Some(*d),
            Some(DeadlineChange::Clear) => None,
            None => self.store.expiries.read().get(key).copied(),
        }
    }

    fn set_deadline(&mut self, key: &[u8], change: DeadlineChange) {
        let x = ks::top(EXPIRY, key);
        match change {
            DeadlineChange::Set(d) => self.put(x, Bytes::copy_from_slice(&d.to_le_bytes())),
            DeadlineChange::Clear => {
                if self.deadline(key).is_none() {
                    return;
                }
                self.del(x);
            }
        }
        self.deadlines.insert(key.to_vec(), change);
    }

    /// Writes a hash's or sorted set's header (its member count); a count of 0 deletes it.
    fn write_count(&mut self, tag: u8, key: &[u8], count: u64) {
        if count == 0 {
            self.del(ks::top(tag, key));
        } else {
            self.put(
                ks::top(tag, key),
                Bytes::copy_from_slice(&count.to_le_bytes()),
            );
        }
    }

    /// The type of `key` as this group sees it.
    fn kind(&self, key: &[u8]) -> Result<Option<u8>> {
        let tops = [ks::top(STRING, key), ks::top(HASH, key), ks::top(ZSET, key)];
        if tops.iter().all(|t| !self.overlay.contains_key(t)) {
            // Untouched by this group: one engine call for the three type records.
            let refs: Vec<&[u8]> = tops.iter().map(Vec::as_slice).collect();
            let lens = self.store.db.value_lens(&refs)?;
            if lens[0].is_some() && self.deadline(key).is_none_or(|d| d > now_ms()) {
                return Ok(Some(STRING));
            }
            return Ok(if lens[1].is_some() {
                Some(HASH)
            } else if lens[2].is_some() {
                Some(ZSET)
            } else {
                None
            });
        }
        if self.present(&ks::top(STRING, key))? {
            let live = self.deadline(key).is_none_or(|d| d > now_ms());
            if live {
                return Ok(Some(STRING));
            }
        }
        if self.present(&ks::top(HASH, key))? {
            return Ok(Some(HASH));
        }
        if self.present(&ks::top(ZSET, key))? {
            return Ok(Some(ZSET));
        }
        Ok(None)
    }

    /// Every engine key in `[prefix, prefix_end)` as this group sees it.
    fn keys_under(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
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

    /// Removes `key` whatever its type; whether it existed.
    fn remove_any(&mut self, key: &[u8]) -> Result<bool> {
        let Some(kind) = self.kind(key)? else {
            // An expired string still has records: drop them quietly.
            if self.present(&ks::top(STRING, key))? {
                self.del(ks::top(STRING, key));
                self.set_deadline(key, DeadlineChange::Clear);
            }
            return Ok(false);
        };
        match kind {
            STRING => {
                self.del(ks::top(STRING, key));
                self.set_deadline(key, DeadlineChange::Clear);
            }
            HASH => {
                for k in self.keys_under(&ks::sub_prefix(HASH_FIELD, key))? {
                    self.del(k);
                }
                self.del(ks::top(HASH, key));
            }
            _ => {
                for tag in [ZSET_MEMBER, ZSET_ORDER] {
                    for k in self.keys_under(&ks::sub_prefix(tag, key))? {
                        self.del(k);
                    }
                }
                self.del(ks::top(ZSET, key));
            }
        }
        Ok(true)
    }

    /// SET with its options.
    ///
    /// # Errors
    /// `WrongType` (only with GET), engine errors.
    pub fn set(&mut self, key: &[u8], value: Bytes, o: SetOptions) -> Result<SetOutcome> {
        let kind = self.kind(key)?;
        let old = if o.get {
            match kind {
                None => None,
                Some(STRING) => self.read(&ks::top(STRING, key))?,
                Some(_) => return Err(StoreError::WrongType),
            }
        } else {
            None
        };
        if (o.nx && kind.is_some()) || (o.xx && kind.is_none()) {
            return Ok(SetOutcome {
                applied: false,
                old,
            });
        }
        if kind.is_some_and(|k| k != STRING) {
            self.remove_any(key)?;
        }
        self.put(ks::top(STRING, key), value);
        match o.deadline {
            Some(d) => self.set_deadline(key, DeadlineChange::Set(d)),
            None if o.keep_ttl && kind == Some(STRING) => {}
            None => self.set_deadline(key, DeadlineChange::Clear),
        }
        Ok(SetOutcome { applied: true, old })
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

    /// INCRBY: the new value.
    ///
    /// # Errors
    /// `WrongType`, `NotInteger`, `Overflow`, engine errors.
    pub fn incr_by(&mut self, key: &[u8], delta: i64) -> Result<i64> {
        let current = match self.kind(key)? {
            None => 0,
            Some(STRING) => {
                let v = self.read(&ks::top(STRING, key))?.unwrap_or_default();
                parse_i64(&v).ok_or(StoreError::NotInteger)?
            }
            Some(_) => return Err(StoreError::WrongType),
        };
        let next = current.checked_add(delta).ok_or(StoreError::Overflow)?;
        let was_string = self.kind(key)? == Some(STRING);
        self.put(ks::top(STRING, key), Bytes::from(next.to_string()));
        if !was_string {
            self.set_deadline(key, DeadlineChange::Clear);
        }
        Ok(next)
    }

    /// HSET: how many fields were new.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn hash_set(&mut self, key: &[u8], pairs: &[(Bytes, Bytes)]) -> Result<i64> {
        let kind = self.kind(key)?;
        let mut count = match kind {
            None => 0,
            Some(HASH) => ks::decode_count(&self.read(&ks::top(HASH, key))?.unwrap_or_default()),
            Some(_) => return Err(StoreError::WrongType),
        };
        // A new hash has no fields in the engine (DEL removes them with the header): only
        // this group's own writes can hold one, so the engine is not asked per field.
        let new_hash = kind.is_none();
        let mut added = 0;
        for (field, value) in pairs {
            let fk = ks::sub(HASH_FIELD, key, field);
            let present = if new_hash {
                self.overlay.get(&fk).is_some_and(Option::is_some)
            } else {
                self.present(&fk)?
            };
            if !present {
                added += 1;
                count += 1;
            }
            self.put(fk, value.clone());
        }
        self.write_count(HASH, key, count);
        Ok(added)
    }

    /// HDEL: how many fields were removed.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn hash_del(&mut self, key: &[u8], fields: &[Bytes]) -> Result<i64> {
        let mut count = match self.kind(key)? {
            None => return Ok(0),
            Some(HASH) => ks::decode_count(&self.read(&ks::top(HASH, key))?.unwrap_or_default()),
            Some(_) => return Err(StoreError::WrongType),
        };
        let mut removed = 0;
        for field in fields {
            let fk = ks::sub(HASH_FIELD, key, field);
            if self.present(&fk)? {
                self.del(fk);
                removed += 1;
                count = count.saturating_sub(1);
            }
        }
        self.write_count(HASH, key, count);
        Ok(removed)
    }

    /// ZADD. Returns the reply value: the count of added (or changed, with CH) members, or
    /// with INCR the new score (`None` when NX/XX/GT/LT stopped it).
    ///
    /// # Errors
    /// `WrongType`, `NanScore`, engine errors.
    pub fn zadd(
        &mut self,
        key: &[u8],
        o: &kvproto::ZAddOptions,
        members: &[(f64, Bytes)],
    ) -> Result<ZAddOutcome> {
        let mut count = match self.kind(key)? {
            None => 0,
            Some(ZSET) => ks::decode_count(&self.read(&ks::top(ZSET, key))?.unwrap_or_default()),
            Some(_) => return Err(StoreError::WrongType),
        };
        let mut added = 0;
        let mut changed = 0;
        let mut last_score = None;
        for (score, member) in members {
            let mk = ks::sub(ZSET_MEMBER, key, member);
            let old = self.read(&mk)?.and_then(|v| ks::decode_score(&v));
            let mut new = *score;
            if o.incr {
                new += old.unwrap_or(0.0);
                if new.is_nan() {
                    return Err(StoreError::NanScore);
                }
            }
            let allowed = match old {
                None => !o.xx,
                Some(prev) => !o.nx && (!o.gt || new > prev) && (!o.lt || new < prev),
            };
            if !allowed {
                last_score = None;
                continue;
            }
            last_score = Some(new);
            match old {
                Some(prev) if prev == new => {}
                Some(prev) => {
                    let mut ok = ks::sub_prefix(ZSET_ORDER, key);
                    ok.extend_from_slice(&ks::sortable_score(prev));
                    ok.extend_from_slice(member);
                    self.del(ok);
                    changed += 1;
                }
                None => {
                    added += 1;
                    count += 1;
                }
            }
            if old != Some(new) {
                let mut ok = ks::sub_prefix(ZSET_ORDER, key);
                ok.extend_from_slice(&ks::sortable_score(new));
                ok.extend_from_slice(member);
                self.put(ok, Bytes::new());
                self.put(mk, Bytes::copy_from_slice(&new.to_le_bytes()));
            }
        }
        if count > 0 {
            self.write_count(ZSET, key, count);
        }
        Ok(ZAddOutcome {
            added,
            changed,
            score: last_score,
        })
    }

    /// ZREM: how many members were removed.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn zrem(&mut self, key: &[u8], members: &[Bytes]) -> Result<i64> {
        let mut count = match self.kind(key)? {
            None => return Ok(0),
            Some(ZSET) => ks::decode_count(&self.read(&ks::top(ZSET, key))?.unwrap_or_default()),
            Some(_) => return Err(StoreError::WrongType),
        };
        let mut removed = 0;
        for member in members {
            let mk = ks::sub(ZSET_MEMBER, key, member);
            let Some(score) = self.read(&mk)?.and_then(|v| ks::decode_score(&v)) else {
                continue;
            };
            let mut ok = ks::sub_prefix(ZSET_ORDER, key);
            ok.extend_from_slice(&ks::sortable_score(score));
            ok.extend_from_slice(member);
            self.del(ok);
            self.del(mk);
            removed += 1;
            count = count.saturating_sub(1);
        }
        self.write_count(ZSET, key, count);
        Ok(removed)
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

    /// The deadline of string `key` as this group sees it.
    pub fn deadline_of(&self, key: &[u8]) -> Option<u64> {
        self.deadline(key)
    }

    /// EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT: `when` in ms (from now unless `absolute`).
    /// Whether the deadline was set (or the key deleted, for a deadline already past).
    ///
    /// # Errors
    /// `InvalidExpire` (overflow), `ExpiryUnsupported` (a hash or sorted set), engine errors.
    pub fn expire_key(
        &mut self,
        key: &[u8],
        when: i64,
        absolute: bool,
        condition: Option<kvproto::ExpireCondition>,
        name: &'static str,
    ) -> Result<bool> {
        use kvproto::ExpireCondition as C;
        let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
        let when = if absolute {
            when
        } else {
            when.checked_add(now)
                .ok_or(StoreError::InvalidExpire(name))?
        };
        match self.kind(key)? {
            None => return Ok(false),
            Some(STRING) => {}
            Some(_) => return Err(StoreError::ExpiryUnsupported),
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
        if self.kind(key)? != Some(STRING) || self.deadline(key).is_none() {
            return Ok(false);
        }
        self.set_deadline(key, DeadlineChange::Clear);
        Ok(true)
    }

    /// The live string value of `key` (`None`: no key), WRONGTYPE for another type.
    fn string_value(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.kind(key)? {
            None => Ok(None),
            Some(STRING) => Ok(Some(self.read(&ks::top(STRING, key))?.unwrap_or_default())),
            Some(_) => Err(StoreError::WrongType),
        }
    }

    /// GETEX: the value; its deadline set to `deadline` (a deadline already past deletes the
    /// key) or removed (`persist`).
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn get_ex(
        &mut self,
        key: &[u8],
        deadline: Option<u64>,
        persist: bool,
        expire_error: Option<&kvproto::CommandError>,
    ) -> Result<Option<Bytes>> {
        let Some(v) = self.string_value(key)? else {
            return Ok(None);
        };
        if let Some(e) = expire_error {
            return Err(StoreError::Refused(e.0.clone()));
        }
        match deadline {
            Some(d) if d <= now_ms() => {
                self.remove_any(key)?;
            }
            Some(d) => self.set_deadline(key, DeadlineChange::Set(d)),
            None if persist => self.set_deadline(key, DeadlineChange::Clear),
            None => {}
        }
        Ok(Some(v))
    }

    /// GETDEL: the value, and the key deleted.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn get_del(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        let v = self.string_value(key)?;
        if v.is_some() {
            self.remove_any(key)?;
        }
        Ok(v)
    }

    /// APPEND: the new length (a new key is created; the deadline is kept).
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn append(&mut self, key: &[u8], value: &Bytes) -> Result<i64> {
        match self.string_value(key)? {
            None => {
                self.set(key, value.clone(), SetOptions::default())?;
                Ok(value.len() as i64)
            }
            Some(old) => {
                let mut joined = Vec::with_capacity(old.len() + value.len());
                joined.extend_from_slice(&old);
                joined.extend_from_slice(value);
                let n = joined.len() as i64;
                self.put(ks::top(STRING, key), Bytes::from(joined));
                Ok(n)
            }
        }
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
            // Leftovers of an expired string under the new name go first.
            self.remove_any(new_key)?;
        }
        let subs: &[u8] = match kind {
            STRING => &[],
            HASH => &[HASH_FIELD],
            _ => &[ZSET_MEMBER, ZSET_ORDER],
        };
        for &tag in subs {
            let from = ks::sub_prefix(tag, key);
            let to = ks::sub_prefix(tag, new_key);
            for (k, v) in self.records_under(&from)? {
                let mut nk = to.clone();
                nk.extend_from_slice(&k[from.len()..]);
                self.put(nk, v);
            }
        }
        let top = self.read(&ks::top(kind, key))?.unwrap_or_default();
        let deadline = self.deadline(key);
        self.remove_any(key)?;
        self.put(ks::top(kind, new_key), top);
        if kind == STRING {
            match deadline {
                Some(d) => self.set_deadline(new_key, DeadlineChange::Set(d)),
                None => self.set_deadline(new_key, DeadlineChange::Clear),
            }
        }
        Ok(true)
    }

    /// Removes string keys whose deadline passed (the expiry sweep).
    ///
    /// # Errors
    /// Engine errors.
    pub fn expire(&mut self, keys: &[Vec<u8>]) -> Result<u64> {
        let now = now_ms();
        let mut n = 0;
        for key in keys {
            if self.deadline(key).is_some_and(|d| d <= now) {
                self.del(ks::top(STRING, key));
                self.set_deadline(key, DeadlineChange::Clear);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Commits the group as one atomic engine batch; on success the group's deadline
    /// changes take effect. Returns the value bytes handed to the engine.
    ///
    /// # Errors
    /// The engine's refusal or failure: nothing of the group is applied.
    pub fn commit(self) -> Result<u64> {
        if self.overlay.is_empty() {
            return Ok(0);
        }
        let mut value_bytes = 0u64;
        let ops: Vec<WriteOp<'_>> = self
            .overlay
            .iter()
            .map(|(k, v)| match v {
                Some(v) => {
                    value_bytes += v.len() as u64;
                    WriteOp::Put(k, v)
                }
                None => WriteOp::Delete(k),
            })
            .collect();
        self.store.db.write(&ops)?;
        let mut ex = self.store.expiries.write();
        for (k, c) in self.deadlines {
            match c {
                DeadlineChange::Set(d) => {
                    ex.insert(k, d);
                }
                DeadlineChange::Clear => {
                    ex.remove(&k);
                }
            }
        }
        Ok(value_bytes)
    }

    /// Starts the group's engine batch without waiting for it (see
    /// [`Engine::try_submit_write`]); [`PendingCommit::finish`] waits and publishes its
    /// expiry changes. `Ok(None)`: the engine cannot start it now (finish an earlier group,
    /// or [`WriteGroup::commit`] when none is in flight). Once started, the group is spent.
    ///
    /// # Errors
    /// The engine's refusal: nothing of the group is applied.
    pub fn try_submit(&mut self) -> Result<Option<PendingCommit>> {
        let mut value_bytes = 0u64;
        let ops: Vec<WriteOp<'_>> = self
            .overlay
            .iter()
            .map(|(k, v)| match v {
                Some(v) => {
                    value_bytes += v.len() as u64;
                    WriteOp::Put(k, v)
                }
                None => WriteOp::Delete(k),
            })
            .collect();
        let write = if ops.is_empty() {
            None
        } else {
            match self.store.db.try_submit_write(&ops)? {
                Some(w) => Some(w),
                None => return Ok(None),
            }
        };
        Ok(Some(PendingCommit {
            write,
            deadlines: std::mem::take(&mut self.deadlines),
            value_bytes,
        }))
    }
}

/// What ZADD did.
#[derive(Debug, Clone, Copy)]
pub struct ZAddOutcome {
    /// Members added.
    pub added: i64,
    /// Members whose score changed.
    pub changed: i64,
    /// With INCR: the member's new score (`None`: not applied).
    pub score: Option<f64>,
}

/// FLUSHALL: deletes every key, in batches.
///
/// # Errors
/// Engine errors (keys deleted before the failure stay deleted).
pub fn flush_all(store: &Store) -> Result<()> {
    let r = (|| {
        loop {
            let keys = store.db.range_keys(&[], None, DELETE_CHUNK)?;
            if keys.is_empty() {
                break;
            }
            let ops: Vec<WriteOp<'_>> = keys.iter().map(|k| WriteOp::Delete(k)).collect();
            store.db.write(&ops)?;
        }
        store.expiries.write().clear();
        store.cursors.lock().by_id.clear();
        Ok(())
    })();
    // Even a failed FLUSHALL may have deleted some keys: WATCHers must see a change.
    store.touch_all_watched();
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    use hwftl_sim::{Backend, DeviceConfig, Ftl, Geometry, RamStore};
    use lsm::EngineConfig;

    #[test]
    fn failed_writes_say_which_outcome_they_had() {
        let not_applied = StoreError::Engine(EngineError::WriteNotApplied(
            hwftl_sim::DeviceError::PoweredOff,
        ));
        let text = not_applied.reply_text();
        assert!(text.starts_with("ERR write not applied"), "{text}");
        assert!(text.contains("safe to retry"), "{text}");
        let unknown = StoreError::Engine(EngineError::OutcomeUnknown {
            reason: "the device flush after its pages failed".into(),
        });
        let text = unknown.reply_text();
        assert!(text.starts_with("ERR write outcome unknown"), "{text}");
        assert!(text.contains("may or may not be durable"), "{text}");
    }

    fn store() -> Store {
        let g = Geometry {
            channels: 2,
            ways: 2,
            blocks_per_chip: 32,
            pages_per_block: 8,
            spare_blocks_per_chip: 1,
        };
        let dev =
            Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
        Store::open(Engine::open(dev, EngineConfig::default()).unwrap()).unwrap()
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn types_exclude_each_other_and_set_replaces_any_type() {
        let s = store();
        let mut g = WriteGroup::new(&s);
        g.hash_set(b"h", &[(b("f1"), b("v1")), (b("f2"), b("v2"))])
            .unwrap();
        assert!(matches!(g.incr_by(b"h", 1), Err(StoreError::WrongType)));
        g.commit().unwrap();
        let as_string = s.read_key(b"h", &KeyRead::Record { tag: STRING }).unwrap();
        assert_eq!(
            (as_string.kind, &as_string.values[..]),
            (Some(HASH), &[None][..])
        );
        let h = s.read_key(b"h", &KeyRead::Record { tag: HASH }).unwrap();
        assert_eq!(h.kind, Some(HASH));
        assert_eq!(h.values[0].as_deref().map(ks::decode_count), Some(2));
        let all = s
            .read_key(
                b"h",
                &KeyRead::AllSubs {
                    sub_tag: HASH_FIELD,
                },
            )
            .unwrap();
        assert_eq!(all.pairs, vec![(b("f1"), b("v1")), (b("f2"), b("v2"))]);
        let mut g = WriteGroup::new(&s);
        g.set(b"h", b("str"), SetOptions::default()).unwrap();
        g.commit().unwrap();
        assert_eq!(s.kind(b"h").unwrap(), Some(STRING));
        let now = s
            .read_key(
                b"h",
                &KeyRead::AllSubs {
                    sub_tag: HASH_FIELD,
                },
            )
            .unwrap();
        assert_eq!((now.kind, now.pairs.len()), (Some(STRING), 0));
        assert_eq!(
            s.engine()
                .count_keys(&[HASH_FIELD], Some(&[HASH_FIELD + 1]))
                .unwrap(),
            0
        );
    }

    #[test]
    fn zset_orders_by_score_and_moves_members() {
        let s = store();
        let mut g = WriteGroup::new(&s);
        let o = kvproto::ZAddOptions::default();
        g.zadd(b"z", &o, &[(3.0, b("c")), (1.0, b("a")), (-2.0, b("b"))])
            .unwrap();
        g.zadd(b"z", &o, &[(5.0, b("a"))]).unwrap();
        g.commit().unwrap();
        let all = s
            .zrange_by_score(
                b"z",
                (f64::NEG_INFINITY, true),
                (f64::INFINITY, true),
                0,
                None,
            )
            .unwrap();
        let names: Vec<&[u8]> = all.iter().map(|(m, _)| &m[..]).collect();
        assert_eq!(names, vec![&b"b"[..], b"c", b"a"]);
        let some = s
            .zrange_by_score(b"z", (-2.0, false), (5.0, true), 1, Some(5))
            .unwrap();
        assert_eq!(some.len(), 1);
        let z = s.read_key(b"z", &KeyRead::Record { tag: ZSET }).unwrap();
        assert_eq!(z.values[0].as_deref().map(ks::decode_count), Some(3));
        let mut g = WriteGroup::new(&s);
        assert_eq!(g.zrem(b"z", &[b("a"), b("nope")]).unwrap(), 1);
        g.commit().unwrap();
        let names = [b("a"), b("c")];
        let scores = s
            .read_key(
                b"z",
                &KeyRead::Subs {
                    sub_tag: ZSET_MEMBER,
                    names: &names,
                },
            )
            .unwrap();
        let scores: Vec<Option<f64>> = scores
            .values
            .iter()
            .map(|v| v.as_deref().and_then(ks::decode_score))
            .collect();
        assert_eq!(scores, vec![None, Some(3.0)]);
        // No such key: nothing, and no type.
        let none = s.read_key(b"nope", &KeyRead::Record { tag: ZSET }).unwrap();
        assert_eq!(
            none,
            KeyFound {
                kind: None,
                values: vec![None],
                pairs: vec![]
            }
        );
    }

    #[test]
    fn scan_returns_every_key_across_types_once() {
        let s = store();
        let mut g = WriteGroup::new(&s);
        for i in 0..50 {
            g.set(format!("s{i}").as_bytes(), b("v"), SetOptions::default())
                .unwrap();
            g.hash_set(format!("h{i}").as_bytes(), &[(b("f"), b("v"))])
                .unwrap();
        }
        g.commit().unwrap();
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = 0;
        loop {
            let (next, keys) = s.scan(cursor, None, 7, None).unwrap();
            for k in keys {
                assert!(seen.insert(k));
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        assert_eq!(seen.len(), 100);
        assert_eq!(s.dbsize().unwrap(), 100);
        assert!(matches!(
            s.scan(999_999, None, 10, None),
            Err(StoreError::InvalidCursor)
        ));
    }

    #[test]
    fn watch_versions_track_only_watched_keys_and_break_on_applied_writes() {
        let s = store();
        let w = vec![s.watch(b"a"), s.watch(b"b")];
        let again = s.watch(b"a");
        assert!(!s.watch_broken(&w));
        s.touch_watched([&b"c"[..]]);
        assert!(
            !s.watch_broken(&w),
            "an unwatched key's write breaks nothing"
        );
        s.touch_watched([&b"b"[..]]);
        assert!(s.watch_broken(&w));
        assert!(!s.watch_broken(std::slice::from_ref(&again)));
        s.unwatch(&w);
        assert_eq!(s.watches.keys.lock().len(), 1, "a still watched by `again`");
        s.unwatch(std::slice::from_ref(&again));
        assert!(
            s.watches.keys.lock().is_empty(),
            "the table holds only watched keys"
        );
        let f = vec![s.watch(b"x")];
        flush_all(&s).unwrap();
        assert!(s.watch_broken(&f), "FLUSHALL breaks every watch");
        s.unwatch(&f);
        // A watched string whose deadline passes breaks the watch before any sweep.
        let mut g = WriteGroup::new(&s);
        g.set(b"e", b("v"), SetOptions::default()).unwrap();
        g.commit().unwrap();
        let e = vec![s.watch(b"e")];
        let mut g = WriteGroup::new(&s);
        g.expire_key(b"e", 1, false, None, "pexpire").unwrap();
        g.commit().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(s.watch_broken(&e));
    }

    #[test]
    fn integers_parse_strictly() {
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"0"), Some(0));
        for bad in [
            &b""[..],
            b"+1",
            b"01",
            b" 1",
            b"1.0",
            b"99999999999999999999",
            b"-0",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }
}
