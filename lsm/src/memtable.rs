//! The memtable (L0 in the paper): recent writes as a sorted map from key to the pointer of
//! the value already placed in the value log, so values are never copied into it.
//!
//! **Shape.** The table is *insert-only*: every version of a key is its own entry, ordered
//! by key and then newest sequence number first, and nothing is removed until the whole
//! memtable is dropped (after it was flushed and the last reader that could see it let go
//! of its `Arc`). The entries live in [`Layers`]: a small lock-free skip list, the *tail*
//! (`crossbeam-skiplist`, at most [`TAIL_VERSIONS`] versions, so a descent stays in the CPU's
//! caches), and sorted arrays, the *runs*, each an immutable tail frozen earlier or a merge
//! of two runs (a log-structured merge inside DRAM: each version is copied O(log n) times,
//! sequentially, instead of every insert descending a skip list of the whole table, which
//! cost ~2 µs of cache misses at 300K versions). Beside them, the [`NewestIndex`] (a hash
//! map) holds each key's newest version and the key's copy: a [`MemKey`], held inline when
//! short (so the index's probe, the tail's nodes and the runs' entries compare it without
//! following a pointer) and one allocation shared by all of them when long.
//!
//! **Concurrency.** Any number of inserters and any number of readers. Readers take no
//! lock of the table's own beyond a hash-map shard's for a moment; inserters share one
//! reader-writer lock (`inserting`), which only a freeze or a merge's swap takes exclusively,
//! for the time it takes to copy an 8K-version tail or swap a pointer. The engine inserts
//! the batches it applies from several threads at once, each batch's versions under
//! sequence numbers of its own (distinct, and in the order the batches were laid out), and
//! publishes a sequence number only once every batch numbered up to it is wholly in (see
//! `engine::write`). So:
//!
//! - a reader never sees a half-written entry: the skip list publishes a node whole, and
//!   runs are built before they are published, by an atomic swap of the [`Layers`]
//!   (`arc-swap`), and never change after;
//! - no version is ever out of a reader's sight: an insert goes into the tail of the
//!   layers current while it holds `inserting` shared; a freeze holds it exclusively, so
//!   no insert is half done, copies the whole tail into a new run, and publishes layers
//!   holding that run and a new empty tail; a merge publishes layers where two runs are
//!   replaced by one holding exactly their versions (the tail and other runs kept as they
//!   are *then*, so a freeze meanwhile is not undone). Every [`Layers`] ever published
//!   therefore holds every version inserted before it was published, and a reader keeps
//!   the layers it loaded alive (an `Arc`) while it reads them;
//! - a reader reading at sequence number `s` ([`MemTable::get`], [`MemCursor`]) ignores
//!   every version newer than `s`. Since `s` is published only after every batch numbered
//!   up to it is in, a reader sees a batch all or nothing, and two reads of one memtable
//!   with the same `s` see the same state, whatever else is being inserted, frozen or
//!   merged meanwhile. (Across a memtable rotation two reads with the same `s` may still
//!   differ: the engine's reader loads its `Version` before `s`, so one that loaded the
//!   version before the rotation does not see batches settled into the new memtable even
//!   when `s` covers them. What it sees is still a prefix of whole batches, the state at
//!   an earlier instant; loading `s` first instead would let a later run show versions
//!   newer than `s`.) Versions of one key may sit in several layers (a freeze between two of its
//!   inserts), and, since batches insert in any order, an older layer may hold a newer
//!   version: readers compare sequence numbers across layers, never layer ages;
//! - garbage accounting stays exact whatever order inserts run in: the [`NewestIndex`]
//!   decides what an insert shadows, comparing sequence numbers under the map's shard lock:
//!   the previous newest version when the new one is newer, else the new version itself (a
//!   later batch's insert of the key ran first). Each version but a key's newest is
//!   reported exactly once;
//! - a point lookup first asks the [`NewestIndex`], so it costs one hash probe. An inserter
//!   records a version there and then in the tail, both before its batch's sequence number
//!   is published (a release store); a reader loads that number `s` (acquire) before it
//!   looks. So every version numbered `s` or older is in both when the reader looks (the
//!   map's shard lock orders the reader's probe after the update), and the index's entry
//!   for a key is numbered at least as new as the newest version the reader may see: an
//!   entry numbered `s` or older *is* that version; a key absent from the index has no
//!   version the reader may see; only an entry newer than `s` (a batch not yet published
//!   to the reader) sends the reader to the layers, where each layer's newest version of
//!   the key numbered `s` or older is a candidate and the newest candidate wins.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use crossbeam_skiplist::map::Entry;
use crossbeam_skiplist::SkipMap;
use dashmap::DashMap;

use crate::keytable::Slot;
use crate::merge::Cursor;
use crate::vlog_format::ValuePtr;

mod key;
mod newest;

pub use key::MemKey;
use newest::NewestIndex;

/// Rough DRAM cost of one version: its [`RunEntry`] in a run (a version in the tail costs
/// more, a skip-list node, but the tail is small). A key is counted once beyond that, with
/// its [`NewestIndex`] entry and, when long, its shared copy.
const ENTRY_OVERHEAD: usize = std::mem::size_of::<RunEntry>();

/// Bytes of memtable budget per key the [`NewestIndex`] is sized for up front (the cost of a
/// key with two versions and a short key), up to [`INDEX_INITIAL_KEYS`].
const INDEX_SIZING_BYTES_PER_KEY: usize = 2 * ENTRY_OVERHEAD + INDEX_OVERHEAD + 32;

/// Most keys the [`NewestIndex`] is sized for up front; it grows (by doubling, one shard at a
/// time) as keys arrive. Sized for the whole budget (150K keys at 32 MiB), the table spread a
/// hot set of 20K keys over 14 MB, and every probe missed the caches and the TLB: a pipelined
/// GET of a hot key spent 17% of its CPU in the probe (`perf`, `redis-benchmark -t get -r
/// 20000 -c 50 -P 16`); sized to what it holds, GET's user CPU per op fell from 0.86-1.12 to
/// 0.76-0.85 us and SET's from 2.11-2.29 to 1.91-2.12 (`benches/results/cpu-per-op-2026-11-29`).
const INDEX_INITIAL_KEYS: usize = 1 << 12;

/// Rough DRAM cost of one [`NewestIndex`] entry: its bucket (the key's [`MemKey`], sequence
/// number and slot) and control byte, at the map's load factor (7/8).
const INDEX_OVERHEAD: usize = (std::mem::size_of::<(MemKey, (u64, Slot))>() + 1) * 8 / 7;

/// Rough DRAM cost of one held value beyond its bytes (hash slot, pointer, `Bytes` and its
/// allocation's header).
const HELD_OVERHEAD: usize = 64;

/// Sequence number that sees every version (the writer's own view).
pub const LATEST: u64 = u64::MAX;

/// A key's first 16 bytes as two big-endian words (zero-padded): comparing them orders keys
/// as their bytes do, except that a tie (equal words) needs the whole keys compared. Each entry's
/// [`MemKey`] gives it without loading anything else (its inline bytes, or the copy a long key
/// keeps), so most comparisons of a search touch no key allocation.
pub type KeyPrefix = [u64; 2];

/// The [`KeyPrefix`] of `key`.
pub fn key_prefix(key: &[u8]) -> KeyPrefix {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        if let Some(rest) = key.get(at..) {
            let n = rest.len().min(8);
            w[..n].copy_from_slice(&rest[..n]);
        }
        u64::from_be_bytes(w)
    };
    [word(0), word(8)]
}

/// A key version: ordered by key, then by sequence number, newest first.
#[derive(Debug, PartialEq, Eq)]
pub struct VersionKey {
    key: MemKey,
    seq: u64,
}

/// A borrowed view of a key version, so lookups need no allocation (the skip list is
/// searched with `&dyn KeyVersion`, which every stored [`VersionKey`] can be borrowed as).
pub trait KeyVersion {
    /// The key's [`KeyPrefix`].
    fn prefix(&self) -> KeyPrefix;
    /// The user key.
    fn user_key(&self) -> &[u8];
    /// The sequence number.
    fn seq(&self) -> u64;
}

impl KeyVersion for VersionKey {
    fn prefix(&self) -> KeyPrefix {
        self.key.prefix()
    }
    fn user_key(&self) -> &[u8] {
        &self.key
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// A borrowed key version: a search key (its prefix computed once per search), or where a
/// [`MemCursor`]'s layer stands.
struct Probe<'a> {
    prefix: KeyPrefix,
    key: &'a [u8],
    seq: u64,
}

impl<'a> Probe<'a> {
    fn new(key: &'a [u8], seq: u64) -> Probe<'a> {
        Probe {
            prefix: key_prefix(key),
            key,
            seq,
        }
    }
}

impl KeyVersion for Probe<'_> {
    fn prefix(&self) -> KeyPrefix {
        self.prefix
    }
    fn user_key(&self) -> &[u8] {
        self.key
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// The order of key versions: by key (its [`KeyPrefix`] first, which orders as the key's
/// first 16 bytes do), then newest first. Generic, so a search over a run's entries with
/// a [`Probe`] compiles to inline field compares (through `dyn KeyVersion` every compare
/// made six virtual calls: 5% of the drive's network thread in a profile of HGETALL).
#[inline]
fn version_order<A: KeyVersion + ?Sized, B: KeyVersion + ?Sized>(a: &A, b: &B) -> Ordering {
    a.prefix()
        .cmp(&b.prefix())
        .then_with(|| a.user_key().cmp(b.user_key()))
        .then_with(|| b.seq().cmp(&a.seq()))
}

impl Ord for dyn KeyVersion + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        version_order(self, other)
    }
}

impl PartialOrd for dyn KeyVersion + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn KeyVersion + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for dyn KeyVersion + '_ {}

impl Ord for VersionKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self as &dyn KeyVersion).cmp(other as &dyn KeyVersion)
    }
}

impl PartialOrd for VersionKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<'a> Borrow<dyn KeyVersion + 'a> for VersionKey {
    fn borrow(&self) -> &(dyn KeyVersion + 'a) {
        self
    }
}

/// Most versions the active skip list (the tail) takes before it is frozen into a sorted
/// run: small enough that the skip list stays in the CPU's caches (about 100 bytes a
/// version), large enough that freezing is rare. A table with a small budget freezes at
/// 1/[`TAIL_SHARE`] of it instead (so the engine's tests, which use small tables, freeze and
/// merge all the time), but not below [`MIN_TAIL_VERSIONS`].
const TAIL_VERSIONS: usize = 8192;

/// A table's tail takes at most this share of its budget.
const TAIL_SHARE: usize = 32;

/// Fewest versions a tail takes before it is frozen.
const MIN_TAIL_VERSIONS: usize = 4;

/// Largest run a merge makes, in tails. This bounds one merge to a few milliseconds
/// (131,072 versions at the full tail size, most of it the page faults of the new run's
/// memory), and a table of `n` versions to about `n / (16 * tail) + log2(16)` runs.
const MAX_RUN_TAILS: usize = 16;

/// Runs at which the insert that froze a tail merges runs itself. Below it, merging is left
/// to whoever calls [`MemTable::merge_runs`] (the engine's maintenance thread, woken when
/// [`MemTable::merge_due`]), so a client-facing inserter (the drive's network thread) does not
/// stall for a merge. A table at the default budget keeps about 8 runs when merges keep up;
/// this bound holds reads' cost (a cursor searches every run) when they do not, say while
/// the maintenance thread runs a long task.
const INLINE_MERGE_RUNS: usize = 16;

/// One version in a frozen [`Run`]: what a tail's skip-list entry held, in an array.
#[derive(Debug, Clone)]
struct RunEntry {
    key: MemKey,
    seq: u64,
    slot: Slot,
}

impl KeyVersion for RunEntry {
    fn prefix(&self) -> KeyPrefix {
        self.key.prefix()
    }
    fn user_key(&self) -> &[u8] {
        self.key.bytes()
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// Entries of a [`SortedRun`] per fence: every this-many-th entry is copied into a compact
/// array searched first.
const FENCE_STRIDE: usize = 16;

/// Versions in the skip list's order (key, then newest first), immutable once built, with
/// fences: a copy of every [`FENCE_STRIDE`]-th entry, in order.
///
/// A search bisects the fences first and then the at most [`FENCE_STRIDE`] entries between
/// two of them. Bisecting the entries alone touched a new cache line, usually out of DRAM,
/// at nearly every one of its ~17 steps per run of 100K versions; the fences are a
/// sixteenth of the size, so the steps that miss the caches are fewer.
/// (`benches/results/memtable-fences-2026-11-30`.) The fences are whole entries, not key
/// prefixes: keys commonly share their first 16 bytes (a hash's fields, numbered keys),
/// and prefixes alone then narrowed nothing.
#[derive(Debug)]
struct SortedRun {
    entries: Vec<RunEntry>,
    fences: Vec<RunEntry>,
}

impl SortedRun {
    fn new(entries: Vec<RunEntry>) -> SortedRun {
        let fences = entries.iter().step_by(FENCE_STRIDE).cloned().collect();
        SortedRun { entries, fences }
    }

    /// How many entries come first in the order, those `< probe` (`inclusive` false) or
    /// `<= probe` (true): `partition_point` over the entries. Fence `j` is entry
    /// `j * FENCE_STRIDE`, so if `b` fences pass, entry `(b - 1) * FENCE_STRIDE` passes and
    /// entry `b * FENCE_STRIDE` does not: the answer lies between the two.
    fn search(&self, probe: &Probe<'_>, inclusive: bool) -> usize {
        let passes = |e: &RunEntry| {
            let o = version_order(e, probe);
            if inclusive {
                o.is_le()
            } else {
                o.is_lt()
            }
        };
        let b = self.fences.partition_point(passes);
        let lo = b.saturating_sub(1) * FENCE_STRIDE;
        let hi = (b * FENCE_STRIDE).min(self.entries.len());
        let window = self.entries.get(lo..hi).unwrap_or_default();
        lo + window.partition_point(passes)
    }
}

impl std::ops::Deref for SortedRun {
    type Target = [RunEntry];
    fn deref(&self) -> &[RunEntry] {
        &self.entries
    }
}

type Run = Arc<SortedRun>;

/// What a reader searches: the tail the inserters add to and the runs frozen before it.
/// Replaced whole (never changed in place) when a tail is frozen or two runs are merged.
#[derive(Debug)]
struct Layers {
    tail: Arc<SkipMap<VersionKey, Slot>>,
    /// Oldest first. Two runs never hold the same version.
    runs: Vec<Run>,
}

/// Recent writes, every version of each key until the table is flushed and dropped.
#[derive(Debug)]
pub struct MemTable {
    layers: ArcSwap<Layers>,
    /// Held shared by each insert into the tail, exclusively to replace [`MemTable::layers`];
    /// readers never take it.
    inserting: parking_lot::RwLock<()>,
    /// Held by the thread merging runs (one at a time; an inserter finding it taken skips
    /// merging).
    merging: parking_lot::Mutex<()>,
    newest: NewestIndex,
    bytes: AtomicUsize,
    /// Distinct keys (counted by the insert that brought each key in).
    keys: AtomicUsize,
    /// Versions inserted.
    versions: AtomicUsize,
    /// Versions the tail takes before it is frozen.
    tail_versions: usize,
    /// Largest run a merge makes.
    max_run_versions: usize,
    /// [`MemTable::key_index`]: the distinct keys in order when it was built, and how many
    /// versions the table held then. Built only when a sampler asks.
    key_index: parking_lot::Mutex<Option<(usize, KeyIndex)>>,
    /// Set once a retime's version went in (see [`MemTable::note_retime`]).
    retimes: std::sync::atomic::AtomicBool,
    /// The earliest deadline a version inserted carries (`u64::MAX`: none).
    earliest_deadline: std::sync::atomic::AtomicU64,
    /// Copies of the small values versions point at, by their address, so a read of one
    /// costs no device read and a flush can put it into the keytable entry (see the
    /// keytable's held values). Filled before the version goes in ([`MemTable::hold`]), so a
    /// reader that sees the version finds the copy, by the same argument as the
    /// [`NewestIndex`]'s. An address names one value for good (a value is never rewritten in
    /// place), so a copy is right for every version pointing there.
    held: DashMap<ValuePtr, Bytes, foldhash::fast::RandomState>,
    /// How many values are held (`DashMap::is_empty` and `len` lock every shard: a lookup
    /// asks this first).
    held_count: AtomicUsize,
    /// The longest value held: a lookup of a longer one asks nothing (a table holding 8-byte
    /// collection counts beside 100-byte hash fields probed the map for every field read).
    held_max_len: AtomicUsize,
    /// Bytes of the held values.
    held_bytes: AtomicUsize,
    /// Log bytes of values below the table (in older frozen tables or the runs) that versions
    /// in it moved away from: garbage collection's moves, whose old copies the flush of this
    /// table will count as garbage ([`MemTable::note_moved_from_below`]).
    moved_from_below: std::sync::atomic::AtomicU64,
}

/// A memtable's distinct keys in order, as the table holds them (a long key shares the
/// table's allocation) ([`MemTable::key_index`]).
pub type KeyIndex = Arc<Vec<MemKey>>;

/// Versions a memtable may gain before its [`MemTable::key_index`] is rebuilt, on top of an
/// eighth of what it held (so a small table is not walked again for every new key).
pub const KEY_INDEX_SLACK: usize = 64;

impl Default for MemTable {
    fn default() -> Self {
        Self::new()
    }
}

impl MemTable {
    /// An empty table sized for the default memtable budget.
    pub fn new() -> Self {
        Self::with_budget(crate::config::DEFAULT_MEMTABLE_BYTES)
    }

    /// An empty table whose newest-version index is sized for `bytes` of entries (the
    /// engine's `memtable_bytes`).
    pub fn with_budget(bytes: usize) -> Self {
        let tail_versions =
            (bytes / (ENTRY_OVERHEAD * TAIL_SHARE)).clamp(MIN_TAIL_VERSIONS, TAIL_VERSIONS);
        MemTable {
            tail_versions,
            max_run_versions: tail_versions * MAX_RUN_TAILS,
            layers: ArcSwap::from_pointee(Layers {
                tail: Arc::new(SkipMap::new()),
                runs: Vec::new(),
            }),
            inserting: parking_lot::RwLock::new(()),
            merging: parking_lot::Mutex::new(()),
            newest: NewestIndex::with_capacity(
                (bytes / INDEX_SIZING_BYTES_PER_KEY).min(INDEX_INITIAL_KEYS),
            ),
            bytes: AtomicUsize::new(0),
            keys: AtomicUsize::new(0),
            versions: AtomicUsize::new(0),
            key_index: parking_lot::Mutex::new(None),
            retimes: std::sync::atomic::AtomicBool::new(false),
            earliest_deadline: std::sync::atomic::AtomicU64::new(u64::MAX),
            held: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            held_count: AtomicUsize::new(0),
            held_max_len: AtomicUsize::new(0),
            held_bytes: AtomicUsize::new(0),
            moved_from_below: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Records that a version just inserted, new to this table, moved a value of `bytes`
    /// log bytes (garbage collection): its old copy lies below the table, and this table's
    /// flush counts it as garbage. Until then the engine counts it live twice; admission
    /// against the user capacity subtracts this ([`MemTable::moved_from_below`]).
    pub fn note_moved_from_below(&self, bytes: u64) {
        self.moved_from_below
            .fetch_add(bytes, AtomicOrdering::Relaxed);
    }

    /// Log bytes of the old copies of values moved into this table, below it, not yet
    /// counted as garbage (see [`MemTable::note_moved_from_below`]).
    pub fn moved_from_below(&self) -> u64 {
        self.moved_from_below.load(AtomicOrdering::Relaxed)
    }

    /// Forgets the moves noted so far: their old copies' segment left the log, and with it
    /// the live count (garbage collection's victim, taken out once its last move was
    /// applied), so there is nothing left to subtract for them.
    ///
    /// `Relaxed` is enough because the notes and this reset never race: moves are noted by
    /// the inserts of garbage collection's move batches, and the reset runs under the write
    /// lock once the victim's last move batch was applied (its inserts done and settled), with
    /// the next victim's moves not yet laid out; the figure is only an admission estimate
    /// between those points. A change that lets move batches of two victims overlap must
    /// revisit this.
    pub fn forget_moved_from_below(&self) {
        self.moved_from_below.store(0, AtomicOrdering::Relaxed);
    }

    /// Keeps `value`, a copy of the small value at `ptr` (a copy of its own: not a slice of
    /// a larger buffer the table would keep alive). Called before the version pointing
    /// there is inserted.
    pub fn hold(&self, ptr: ValuePtr, value: Bytes) {
        let len = value.len();
        // Before the version is inserted, as the copy is: a reader that may see the version
        // sees this bound too (and one that reads it stale just reads the page).
        self.held_max_len.fetch_max(len, AtomicOrdering::Release);
        if self.held.insert(ptr, value).is_none() {
            // After the insert: a reader that sees the count also finds the copy (and one
            // that reads 0 just reads the page).
            self.held_count.fetch_add(1, AtomicOrdering::Release);
            self.held_bytes.fetch_add(len, AtomicOrdering::Relaxed);
            self.bytes
                .fetch_add(len + HELD_OVERHEAD, AtomicOrdering::Relaxed);
        }
    }

    /// The copy of the value at `ptr`, if the table holds one.
    pub fn held(&self, ptr: &ValuePtr) -> Option<Bytes> {
        // No probe for a value no table holds (the reads and flushes of large values).
        if self.held_count.load(AtomicOrdering::Acquire) == 0
            || ptr.len as usize > self.held_max_len.load(AtomicOrdering::Acquire)
        {
            return None;
        }
        self.held.get(ptr).map(|v| v.clone())
    }

    /// How many values the table holds copies of, and their bytes.
    pub fn held_values(&self) -> (usize, usize) {
        (
            self.held_count.load(AtomicOrdering::Relaxed),
            self.held_bytes.load(AtomicOrdering::Relaxed),
        )
    }

    /// Adds version `seq` of `key` (no version of the key with that number is in the table)
    /// and returns the version that is now shadowed: the key's newest
    /// version before this one, or this one itself when a newer version is already in (a
    /// later batch whose insert ran first). Callers may run concurrently (see the module
    /// docs): the [`NewestIndex`] decides what is shadowed, one key at a time, and the tail's
    /// skip list takes concurrent inserts of distinct entries. The insert that fills the
    /// tail freezes it into a run (a copy of at most [`TAIL_VERSIONS`] entries) on the
    /// calling thread; merging runs is left to [`MemTable::merge_runs`]'s caller unless the
    /// table holds [`INLINE_MERGE_RUNS`] runs.
    pub fn insert(&self, key: &[u8], seq: u64, slot: Slot) -> Option<Slot> {
        self.insert_with(key, || MemKey::new(key), seq, slot)
    }

    /// [`MemTable::insert`] of a key the caller already holds as a [`MemKey`] (a pipelined
    /// batch's updates): a key new to the table takes that copy (a clone: no allocation for
    /// a short key, a shared one for a long key) instead of a new one.
    pub fn insert_key(&self, key: &MemKey, seq: u64, slot: Slot) -> Option<Slot> {
        self.insert_with(key, || key.clone(), seq, slot)
    }

    /// [`MemTable::insert`], the key's copy made by `copy` if the key is new to the table.
    fn insert_with(
        &self,
        key: &[u8],
        copy: impl FnOnce() -> MemKey,
        seq: u64,
        slot: Slot,
    ) -> Option<Slot> {
        if let Some(d) = slot.deadline() {
            self.earliest_deadline
                .fetch_min(d.get(), AtomicOrdering::Relaxed);
        }
        // Index first, then the tail; both before the batch is published (see the module
        // docs).
        let (copy, new_key, shadowed) = self.newest.record(key, copy, seq, slot);
        let heap = copy.allocated();
        let tail_len = {
            let _inserting = self.inserting.read();
            let layers = self.layers.load();
            layers.tail.insert(VersionKey { key: copy, seq }, slot);
            layers.tail.len()
        };
        let mut bytes = ENTRY_OVERHEAD;
        if new_key {
            bytes += INDEX_OVERHEAD + heap;
            self.keys.fetch_add(1, AtomicOrdering::Relaxed);
        }
        self.versions.fetch_add(1, AtomicOrdering::Relaxed);
        self.bytes.fetch_add(bytes, AtomicOrdering::Relaxed);
        if tail_len >= self.tail_versions {
            self.freeze_tail();
        }
        shadowed
    }

    /// Turns a full tail into a run behind a new, empty tail. Inserts wait meanwhile (the
    /// tail is copied while none is half done, so the run holds all of it); readers keep
    /// reading whichever [`Layers`] they loaded, which hold the same versions.
    fn freeze_tail(&self) {
        {
            let _all = self.inserting.write();
            let layers = self.layers.load_full();
            if layers.tail.len() < self.tail_versions {
                // Another insert froze it first.
                return;
            }
            let run: Vec<RunEntry> = layers
                .tail
                .iter()
                .map(|e| RunEntry {
                    key: e.key().key.clone(),
                    seq: e.key().seq,
                    slot: *e.value(),
                })
                .collect();
            let mut runs = layers.runs.clone();
            runs.push(Arc::new(SortedRun::new(run)));
            let backstop = runs.len() >= INLINE_MERGE_RUNS;
            self.layers.store(Arc::new(Layers {
                tail: Arc::new(SkipMap::new()),
                runs,
            }));
            if !backstop {
                return;
            }
        }
        // Merging has fallen behind (see `INLINE_MERGE_RUNS`): this inserter catches up,
        // unless another thread is merging already.
        if let Some(merging) = self.merging.try_lock() {
            self.merge_due_runs(merging);
        }
    }

    /// Whether two runs are due to be merged ([`MemTable::merge_runs`] would merge).
    pub fn merge_due(&self) -> bool {
        self.next_merge(&self.layers.load()).is_some()
    }

    /// Merges runs while [`MemTable::merge_due`], so a table of `n` versions keeps O(log n)
    /// runs and each version is copied O(log n) times: the two newest runs, while the newer
    /// holds at least half as many versions as the older (and the result at most
    /// [`MAX_RUN_TAILS`] tails). Waits for a merge another thread is running, then looks
    /// again. Inserts and reads go on meanwhile: a merge holds no lock but
    /// [`MemTable::merging`] while it copies; only the swap of the layers waits for the
    /// inserts in progress (see the module docs for why no version is lost or doubled).
    pub fn merge_runs(&self) {
        self.merge_due_runs(self.merging.lock());
    }

    /// The two runs a merge would take now, oldest first.
    fn next_merge(&self, layers: &Layers) -> Option<(Run, Run)> {
        let n = layers.runs.len();
        let (older, newer) = (layers.runs.get(n.checked_sub(2)?)?, layers.runs.last()?);
        (newer.len() >= older.len() / 2 && older.len() + newer.len() <= self.max_run_versions)
            .then(|| (older.clone(), newer.clone()))
    }

    /// [`MemTable::merge_runs`]' loop, its caller holding [`MemTable::merging`].
    fn merge_due_runs(&self, _merging: parking_lot::MutexGuard<'_, ()>) {
        loop {
            let Some((older, newer)) = self.next_merge(&self.layers.load()) else {
                return;
            };
            let merged = Arc::new(SortedRun::new(merge_runs(&older, &newer)));
            let _all = self.inserting.write();
            let now = self.layers.load_full();
            // Only this thread removes runs (it holds `merging`) and a freeze only appends,
            // so both are still there, side by side.
            let Some(at) = now.runs.iter().position(|r| Arc::ptr_eq(r, &older)) else {
                return;
            };
            if !now.runs.get(at + 1).is_some_and(|r| Arc::ptr_eq(r, &newer)) {
                return;
            }
            let mut runs = now.runs.clone();
            runs.splice(at..at + 2, [merged]);
            self.layers.store(Arc::new(Layers {
                tail: now.tail.clone(),
                runs,
            }));
        }
    }

    /// The newest version of `key` at sequence number `seq` or before.
    pub fn get(&self, key: &[u8], seq: u64) -> Option<Slot> {
        let (newest_seq, slot) = self.newest.newest(key)?;
        if newest_seq <= seq {
            return Some(slot);
        }
        // A version newer than the reader's view came in since it was taken: find the
        // newest one it may see in the tail and the runs (each holds at most one candidate:
        // its newest version of the key at `seq` or before).
        let layers = self.layers.load();
        let probe = Probe::new(key, seq);
        let mut best: Option<(u64, Slot)> = None;
        let mut consider = |found: u64, slot: Slot| {
            if best.is_none_or(|(b, _)| b < found) {
                best = Some((found, slot));
            }
        };
        if let Some(e) = layers
            .tail
            .lower_bound(Bound::Included(&probe as &dyn KeyVersion))
        {
            if e.key().user_key() == key {
                consider(e.key().seq, *e.value());
            }
        }
        for run in &layers.runs {
            let i = run.search(&probe, false);
            if let Some(e) = run.get(i) {
                if e.key.bytes() == key {
                    consider(e.seq, e.slot);
                }
            }
        }
        best.map(|(_, slot)| slot)
    }

    /// The newest version of `key` (the writer's view).
    pub fn latest(&self, key: &[u8]) -> Option<Slot> {
        self.get(key, LATEST)
    }

    /// The oldest version of `key` in the table: the one that shadows what lies below the
    /// table (a flush counts that as garbage unless both point at the same value).
    pub fn oldest(&self, key: &[u8]) -> Option<Slot> {
        let layers = self.layers.load();
        // Versions of a key sort newest first: its oldest in a layer is the last entry
        // before (key, seq 0)'s successor.
        let probe = Probe::new(key, 0);
        let mut best: Option<(u64, Slot)> = None;
        let mut consider = |found: u64, slot: Slot| {
            if best.is_none_or(|(b, _)| found < b) {
                best = Some((found, slot));
            }
        };
        if let Some(e) = layers
            .tail
            .upper_bound(Bound::Included(&probe as &dyn KeyVersion))
        {
            if e.key().user_key() == key {
                consider(e.key().seq, *e.value());
            }
        }
        for run in &layers.runs {
            let i = run.search(&probe, true);
            if let Some(e) = i.checked_sub(1).and_then(|i| run.get(i)) {
                if e.key.bytes() == key {
                    consider(e.seq, e.slot);
                }
            }
        }
        best.map(|(_, slot)| slot)
    }

    /// Records that a retime's version is (about to be) inserted: a version pointing at a
    /// value it did not write, maybe one below the table, so a flush must compare what lies
    /// below with the key's [`MemTable::oldest`] version, not only its newest.
    pub fn note_retime(&self) {
        self.retimes.store(true, AtomicOrdering::Relaxed);
    }

    /// The earliest deadline a version inserted carries, if any has one.
    pub fn earliest_deadline(&self) -> Option<u64> {
        let d = self.earliest_deadline.load(AtomicOrdering::Relaxed);
        (d != u64::MAX).then_some(d)
    }

    /// Whether [`MemTable::note_retime`] was called.
    pub fn has_retimes(&self) -> bool {
        self.retimes.load(AtomicOrdering::Relaxed)
    }

    /// Whether the version of `key` right above `below` (an entry under the table) points
    /// at the same value, so a flush does not count it as garbage: the newest version
    /// does (nothing in the table changed the value), or, after a retime, the oldest.
    pub fn keeps_value(&self, key: &[u8], newest: &Slot, below: &ValuePtr) -> bool {
        newest.ptr() == Some(*below)
            || (self.has_retimes() && self.oldest(key).and_then(|s| s.ptr()) == Some(*below))
    }

    /// Approximate DRAM bytes.
    pub fn bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.keys.load(AtomicOrdering::Relaxed)
    }

    /// True when empty.
    ///
    /// The count is `Relaxed`, and the engine's flush trusts an "empty" here to move the
    /// replay checkpoint without writing the memtable out (a wrong "empty" would lose
    /// acknowledged writes at a crash). It cannot be wrong there: an inserter counts its
    /// version before its batch's `Insertion::done` (a `Release` store), the write lock's
    /// holder reads `done` with `Acquire` before it settles the batch, and a flush runs with
    /// the pipeline drained (every batch settled) under that lock; so every counted version
    /// happens-before the flush's read. Anywhere else the answer is a statistic.
    pub fn is_empty(&self) -> bool {
        self.versions.load(AtomicOrdering::Relaxed) == 0
    }

    /// Sorted runs the table keeps besides its tail (for tests and statistics).
    #[cfg(test)]
    fn runs(&self) -> Vec<usize> {
        self.layers.load().runs.iter().map(|r| r.len()).collect()
    }

    /// A cursor over the newest version of each key at `seq` or before, from `start` on.
    pub fn cursor_from(&self, start: &[u8], seq: u64) -> MemCursor<'_> {
        self.cursor_between(start, None, seq)
    }

    /// [`MemTable::cursor_from`] for a reader that stops before `end` (exclusive): a layer
    /// with no version in `start <= key < end` takes no further part, so stepping through
    /// a short range (a hash's fields, most often all in one layer) compares keys of the
    /// layers that hold some of it, not of every run. The cursor may still yield keys at
    /// or past `end` (from a layer that holds some of the range); the reader stops there.
    pub fn cursor_between(&self, start: &[u8], end: Option<&[u8]>, seq: u64) -> MemCursor<'_> {
        let layers = self.layers.load_full();
        let probe = Probe::new(start, LATEST);
        let before_end = |k: &[u8]| end.is_none_or(|e| k < e);
        let tail = layers
            .tail
            .lower_bound(Bound::Included(&probe as &dyn KeyVersion))
            .and_then(|e| visible_from(e, seq))
            .filter(|t| before_end(&t.key));
        // Each run on its first visible version from `start` on; one with none before `end` is out.
        let runs = layers
            .runs
            .iter()
            .enumerate()
            .filter_map(|(r, run)| {
                let i = first_visible(run, run.search(&probe, false), seq);
                run.get(i)
                    .is_some_and(|e| before_end(e.key.bytes()))
                    .then_some((r, i))
            })
            .collect();
        let mut c = MemCursor {
            seq,
            tail,
            runs,
            layers,
            current: None,
            table: self,
        };
        c.pick();
        c
    }

    /// The greatest key in `start <= key < end` (`end` `None`: no upper end) that has any
    /// version in the table, a tombstone or a version newer than any reader's view included:
    /// an upper bound of every key live in that range at any sequence number the table
    /// holds (SCAN's cursors are built on it, see `Engine::last_key_in`).
    pub fn last_key_in(&self, start: &[u8], end: Option<&[u8]>) -> Option<MemKey> {
        let layers = self.layers.load_full();
        let mut best: Option<MemKey> = None;
        let mut offer = |k: &MemKey| {
            if **k >= *start && best.as_deref().is_none_or(|b| **k > *b) {
                best = Some(k.clone());
            }
        };
        for run in &layers.runs {
            let below = match end {
                Some(e) => run.search(&Probe::new(e, LATEST), false),
                None => run.len(),
            };
            if let Some(e) = below.checked_sub(1).and_then(|i| run.get(i)) {
                offer(&e.key);
            }
        }
        let last = match end {
            Some(e) => {
                let probe = Probe::new(e, LATEST);
                let probe: &dyn KeyVersion = &probe;
                layers.tail.upper_bound(Bound::Excluded(probe))
            }
            None => layers.tail.back(),
        };
        if let Some(e) = last {
            offer(&e.key().key);
        }
        best
    }

    /// The table's distinct keys in order (deleted ones too: a tombstone is a key here), so
    /// a sampler can draw one uniformly by index ([`crate::Engine::sample_key`]). It is a
    /// snapshot, rebuilt (one walk over the keys, long keys' allocations shared, not copied) once
    /// the table holds more than an eighth more versions (and at least [`KEY_INDEX_SLACK`]
    /// more) than at the last build: built only when asked for, and O(1) amortised per
    /// version inserted after that; keys inserted since are not in it. It takes 40 bytes per
    /// key (a [`MemKey`]), not counted in [`MemTable::bytes`].
    pub fn key_index(&self) -> KeyIndex {
        let n = self.versions.load(AtomicOrdering::Relaxed);
        let mut index = self.key_index.lock();
        if let Some((at, keys)) = index.as_ref() {
            if n <= at + at / 8 + KEY_INDEX_SLACK {
                return keys.clone();
            }
        }
        let mut keys: Vec<MemKey> = Vec::with_capacity(self.len());
        let mut c = self.cursor();
        while let Some((k, _)) = c.current() {
            // The index holds every key's copy.
            if let Some(copy) = self.newest.key_copy(k) {
                keys.push(copy);
            }
            c.advance();
        }
        let keys = Arc::new(keys);
        *index = Some((n, keys.clone()));
        keys
    }

    /// Every key's newest version, in key order (for a flush: the table no longer changes).
    pub fn cursor(&self) -> MemCursor<'_> {
        self.cursor_from(b"", LATEST)
    }
}

/// The two runs' versions in one run, in order.
fn merge_runs(older: &[RunEntry], newer: &[RunEntry]) -> Vec<RunEntry> {
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let (mut a, mut b) = (older.iter().peekable(), newer.iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => (*x as &dyn KeyVersion) < (*y as &dyn KeyVersion),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_a { a.next() } else { b.next() };
        if let Some(e) = next {
            out.push(e.clone());
        }
    }
    out
}

/// The newest version at `seq` or before, from skip-list entry `e` on (versions of a key
/// are adjacent, newest first, so the first visible one is its key's newest visible one).
fn visible_from(mut e: Entry<'_, VersionKey, Slot>, seq: u64) -> Option<TailAt> {
    loop {
        if e.key().seq <= seq {
            return Some(TailAt {
                key: e.key().key.clone(),
                seq: e.key().seq,
                slot: *e.value(),
            });
        }
        e = e.next()?;
    }
}

/// The first position in `run` from `i` on holding a version at `seq` or before.
fn first_visible(run: &SortedRun, mut i: usize, seq: u64) -> usize {
    while run.get(i).is_some_and(|e| e.seq > seq) {
        i += 1;
    }
    i
}

/// Where a [`MemCursor`] stands in the tail: a copy of the entry (the cursor finds the next
/// one by searching past its key, so it borrows nothing from the skip list between calls).
struct TailAt {
    key: MemKey,
    seq: u64,
    slot: Slot,
}

/// One of the layers a [`MemCursor`] merges.
#[derive(Debug, Clone, Copy)]
enum Layer {
    Tail,
    Run(usize),
}

/// A position in a [`MemTable`]: the newest version of one key visible at its sequence
/// number, merged over the tail and the runs of the [`Layers`] it loaded when made (it keeps
/// them alive, so later freezes and merges do not disturb it).
pub struct MemCursor<'a> {
    layers: Arc<Layers>,
    seq: u64,
    tail: Option<TailAt>,
    /// The runs of `layers.runs` the cursor merges (all but those it knew to hold nothing
    /// of its range), each with its position: on a visible version, or past the end.
    runs: Vec<(usize, usize)>,
    /// The layer standing on the cursor's key with that key's newest visible version.
    current: Option<Layer>,
    /// The table (for its held values).
    table: &'a MemTable,
}

impl MemCursor<'_> {
    /// Moves run `r`'s position past versions newer than the cursor's sequence number.
    fn settle_run(&mut self, r: usize) {
        let Some((which, i)) = self.runs.get_mut(r) else {
            return;
        };
        if let Some(run) = self.layers.runs.get(*which) {
            *i = first_visible(run, *i, self.seq);
        }
    }

    /// The version layer `at` stands on.
    fn at(&self, at: Layer) -> Option<(Probe<'_>, Slot)> {
        match at {
            Layer::Tail => self.tail.as_ref().map(|t| {
                let v = Probe {
                    prefix: t.key.prefix(),
                    key: &t.key,
                    seq: t.seq,
                };
                (v, t.slot)
            }),
            Layer::Run(r) => {
                let e = self.run_entry(r)?;
                let v = Probe {
                    prefix: e.key.prefix(),
                    key: e.key.bytes(),
                    seq: e.seq,
                };
                Some((v, e.slot))
            }
        }
    }

    /// The entry run `r` of the cursor's (an index into `runs`) stands on.
    fn run_entry(&self, r: usize) -> Option<&RunEntry> {
        let &(which, i) = self.runs.get(r)?;
        self.layers.runs.get(which)?.get(i)
    }

    /// Sets `current` to the layer standing on the smallest key, the one with its newest
    /// version when several stand on it.
    fn pick(&mut self) {
        let mut best: Option<(Layer, Probe<'_>)> = None;
        let layers = std::iter::once(Layer::Tail).chain((0..self.runs.len()).map(Layer::Run));
        for layer in layers {
            let Some((v, _)) = self.at(layer) else {
                continue;
            };
            // The order puts a key's newer versions first, so the smallest version is the
            // smallest key's newest.
            if best
                .as_ref()
                .is_none_or(|(_, b)| version_order(&v, b).is_lt())
            {
                best = Some((layer, v));
            }
        }
        self.current = best.map(|(layer, _)| layer);
    }
}

impl KeyVersion for TailAt {
    fn prefix(&self) -> KeyPrefix {
        self.key.prefix()
    }
    fn user_key(&self) -> &[u8] {
        &self.key
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

impl Cursor for MemCursor<'_> {
    fn current(&self) -> Option<(&[u8], Slot)> {
        let (v, slot) = self.at(self.current?)?;
        Some((v.key, slot))
    }

    fn held(&self) -> Option<Bytes> {
        let (_, slot) = self.at(self.current?)?;
        self.table.held(&slot.ptr()?)
    }

    fn advance(&mut self) {
        let Some(at) = self.current.take() else {
            return;
        };
        // The key it stands on: a copy (a short key) or its shared allocation, so the
        // layers can move while it is compared.
        let at: MemKey = match at {
            Layer::Tail => match &self.tail {
                Some(t) => t.key.clone(),
                None => return,
            },
            Layer::Run(r) => match self.run_entry(r) {
                Some(e) => e.key.clone(),
                None => return,
            },
        };
        let at = at.bytes();
        // Every layer standing on the key moves past its older versions.
        if self.tail.as_ref().is_some_and(|t| &*t.key == at) {
            let past = Probe::new(at, 0);
            let past: &dyn KeyVersion = &past;
            self.tail = self
                .layers
                .tail
                .lower_bound(Bound::Excluded(past))
                .and_then(|e| visible_from(e, self.seq));
        }
        for r in 0..self.runs.len() {
            let Some((which, i)) = self.runs.get_mut(r) else {
                continue;
            };
            let Some(run) = self.layers.runs.get(*which) else {
                continue;
            };
            if run.get(*i).is_some_and(|e| e.key.bytes() == at) {
                while run.get(*i).is_some_and(|e| e.key.bytes() == at) {
                    *i += 1;
                }
                self.settle_run(r);
            }
        }
        self.pick();
    }
}

#[cfg(test)]
mod tests;
