//! Reads that never wait on the engine thread: one key's type and records as of one
//! instant ([`KeyRequest`], [`Store::read_key_async`], and [`Store::read_key_here`] that
//! answers from DRAM or leaves the caller a [`PendingKeyRead`] to start), GET and MGET
//! ([`Store::get_strings_async`], [`Store::get_strings_cached`]), `LS.RANGE`, and the
//! DRAM-only STRLEN and EXISTS.

use std::sync::Arc;

use bytes::Bytes;
use lsm::{LookupNow, PendingLookup, Probes, RangeRead, ReadWindowFull, ReservedRead};

use super::{now_ms, KeyspaceCounters, Result, Store, StoreError};
use crate::keyspace::{self as ks, STRING};

/// Value bytes after which an `LS.RANGE` reply stops early (the client continues from its
/// last key), so one command cannot make the drive buffer gigabytes.
pub const RANGE_REPLY_BYTES: u64 = 64 << 20;

/// Receives the pairs of [`Store::range_strings_async`].
pub type OnPairs = Box<dyn FnOnce(Result<Vec<(Bytes, Bytes)>>) + Send>;

/// Receives the values of [`Store::get_strings_async`] in key order (`None`: missing or
/// expired), and for each key named in `typed` whether it holds another type.
pub type OnStrings = Box<dyn FnOnce(Result<Vec<Option<Bytes>>>, Vec<bool>) + Send>;

/// What one key's read asks for (see [`Store::read_key_async`]).
#[derive(Debug, Clone, Copy)]
pub enum KeyRead<'a> {
    /// The key's own record under `tag`: a string's value, a hash's or sorted set's count.
    Record {
        /// `s` (string), `h` (hash) or `z` (sorted set): see [`crate::keyspace`].
        tag: u8,
    },
    /// Records under the key by name: hash fields (`f`) or sorted-set members'
    /// scores (`m`).
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
    /// The key's type (a tag of [`ks::TOP_LEVEL`]); `None`: no such key (or expired).
    pub kind: Option<u8>,
    /// [`KeyRead::Record`] and [`KeyRead::Subs`]: the values in order (all `None` when the
    /// key does not exist).
    pub values: Vec<Option<Bytes>>,
    /// [`KeyRead::AllSubs`]: (name, value) pairs in name order.
    pub pairs: Vec<(Bytes, Bytes)>,
}

/// Receives the result of [`Store::read_key_async`].
pub type OnKey = Box<dyn FnOnce(Result<KeyFound>) + Send>;

/// A read started where it stands ([`Store::read_key_here`]):
/// answered from DRAM, or resolved and waiting for its value pages to be read.
pub enum Here<T, P> {
    /// DRAM held all of it.
    Answered(T),
    /// A page must come from the device: reserve the read (the pending read's `reserve`)
    /// and submit it, or drop it.
    Pending(P),
}

/// What [`Store::get_string_now`] found.
pub enum StringGet {
    /// The value, from DRAM.
    Hot(Bytes),
    /// A live string whose value must be read from the device: its read, to start.
    Cold(PendingKeyRead),
    /// No live string under the key (none, deleted, or a key of another type when
    /// `other_type`): nil, or WRONGTYPE.
    Missing {
        /// The key holds another type.
        other_type: bool,
    },
    /// Past its deadline: the general path tells which reply it gets.
    Other,
}

/// A key's read resolved by [`Store::read_key_here`] whose pages must be read.
pub struct PendingKeyRead {
    lookup: Box<PendingLookup>,
    finish: KeyFinish,
    counters: Arc<KeyspaceCounters>,
}

impl PendingKeyRead {
    /// Takes room for the page reads without waiting and binds `done`, which runs on the
    /// engine's poller thread once they are in; the caller starts the read with
    /// [`lsm::Engine::submit_reads`] (with the others it reserved).
    ///
    /// # Errors
    /// [`ReadWindowFull`]: nothing was started (`done` is dropped); read it the waiting
    /// way ([`Store::read_key_async`]).
    pub fn reserve(self, done: OnKey) -> std::result::Result<ReservedRead, ReadWindowFull> {
        let (finish, counters) = (self.finish, self.counters);
        self.lookup.reserve(Box::new(move |r| {
            done(
                r.map_err(StoreError::from)
                    .map(|l| finish.finish(l, &counters)),
            )
        }))
    }
}

/// GET reads resolved together by [`Store::get_strings_here`] whose pages must be read.
pub struct PendingStrings {
    lookup: PendingLookup,
    finish: StringsFinish,
}

impl PendingStrings {
    /// Takes room for the page reads without waiting and binds `done`, which runs on the
    /// engine's poller thread once they are in; the caller starts the read with
    /// [`lsm::Engine::submit_reads`] (with the others it reserved).
    ///
    /// # Errors
    /// [`ReadWindowFull`]: nothing was started (`done` is dropped).
    pub fn reserve(self, done: OnStrings) -> std::result::Result<ReservedRead, ReadWindowFull> {
        let finish = self.finish;
        self.lookup.reserve(Box::new(move |r| {
            let (values, other_type) = finish.finish(r);
            done(values, other_type);
        }))
    }
}

/// The probes of GET's WRONGTYPE check: each typed key's other type records, looked up
/// only when its string is not found.
fn strings_probes<'a>(probes: &'a [&'a [u8]], typed: &'a [usize]) -> Probes<'a> {
    Probes::GroupsUnlessFound {
        keys: probes,
        per: ks::TOP_LEVEL.len() - 1,
        owners: typed,
    }
}

/// [`Store::get_strings_cached`]'s answer: the values in key order (`None`: missing or
/// expired), and per key asked for its type whether it holds another type.
pub type CachedStrings = (Vec<Option<Bytes>>, Vec<bool>);

/// Turns GET's and MGET's lookup into string values and type flags.
struct StringsFinish {
    /// Per key read: past its deadline when the read was resolved.
    expired: Vec<bool>,
    /// Per key whose type is asked: past its deadline.
    typed_expired: Vec<bool>,
    counters: Arc<KeyspaceCounters>,
}

impl StringsFinish {
    fn finish(self, r: lsm::Result<lsm::Lookup>) -> (Result<Vec<Option<Bytes>>>, Vec<bool>) {
        let (values, present) = match r {
            Ok(found) => (Ok(found.values), found.present),
            Err(e) => (Err(e), Vec::new()),
        };
        let other_type: Vec<bool> = present
            .chunks(ks::TOP_LEVEL.len() - 1)
            .zip(self.typed_expired)
            .map(|(p, gone)| !gone && p.iter().any(|&b| b))
            .collect();
        let counters = self.counters;
        let out = values.map_err(StoreError::from).map(|values| {
            values
                .into_iter()
                .zip(self.expired)
                .map(|(v, exp)| {
                    let v = if exp { None } else { v };
                    counters.count_hit(v.is_some());
                    v
                })
                .collect()
        });
        (out, other_type)
    }
}

/// The engine keys of one key's read (see [`Store::read_key_async`]), in one byte arena:
/// an HMGET of ten fields built fifteen vectors of its own before (one per field and per
/// type probe), on the path of every hot read.
pub(super) struct KeyRequest {
    /// Every key below, end to end.
    arena: Vec<u8>,
    /// Records read by name (or the key's own record): ranges of `arena`.
    keys: Vec<std::ops::Range<usize>>,
    /// Type records of the key, the command's own type first: at most one exists, so the
    /// engine stops at the first it finds (and, for a read of the key's own record, asks
    /// only when that record is missing). Ranges of `arena`.
    probes: Vec<std::ops::Range<usize>>,
    finish: KeyFinish,
    /// `AllSubs`: the records' prefix and its end.
    range: Option<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Turns what the engine found into a [`KeyFound`].
#[derive(Clone)]
pub(super) struct KeyFinish {
    /// The key is past its deadline: it is no key, whatever records it still has.
    expired: bool,
    names: usize,
    prefix_len: usize,
    /// `Record`: the type whose record was read (found means the key has that type).
    record: Option<u8>,
    /// The type of each probe, in order.
    probe_tags: Vec<u8>,
}

/// The type a record tag belongs to: hash fields to hashes, members to sorted sets.
pub(super) fn owner_type(sub_tag: u8) -> u8 {
    ks::owner_of(sub_tag)
}

impl KeyRequest {
    fn new(key: &[u8], what: &KeyRead<'_>, expired: bool) -> KeyRequest {
        let mut arena = Vec::new();
        let mut keys = Vec::new();
        let mut range = None;
        let (own, record) = match what {
            KeyRead::Record { tag } => {
                arena.reserve(ks::TOP_LEVEL.len() * (1 + key.len()));
                keys.push(ks::push_top(&mut arena, *tag, key));
                (*tag, Some(*tag))
            }
            KeyRead::Subs { sub_tag, names } => {
                let prefix = ks::sub_prefix(*sub_tag, key);
                let names_len: usize = names.iter().map(|n| prefix.len() + n.len()).sum();
                arena.reserve(names_len + ks::TOP_LEVEL.len() * (1 + key.len()));
                for n in names.iter() {
                    let start = arena.len();
                    arena.extend_from_slice(&prefix);
                    arena.extend_from_slice(n);
                    keys.push(start..arena.len());
                }
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
        let probes = probe_tags
            .iter()
            .map(|&t| ks::push_top(&mut arena, t, key))
            .collect();
        KeyRequest {
            arena,
            probes,
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
        self.keys.iter().map(|r| &self.arena[r.clone()]).collect()
    }

    fn probe_refs(&self) -> Vec<&[u8]> {
        self.probes.iter().map(|r| &self.arena[r.clone()]).collect()
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
    /// The finish of a `Record { tag: STRING }` read whose string the engine found live (the
    /// probes of the other types are then not asked).
    fn string_found() -> KeyFinish {
        KeyFinish {
            expired: false,
            names: 1,
            prefix_len: 0,
            record: Some(STRING),
            probe_tags: ks::TOP_LEVEL.into_iter().filter(|&t| t != STRING).collect(),
        }
    }

    /// The key's type (a key past its deadline counts as missing) and its records; a
    /// missing key shows none.
    fn finish(self, found: lsm::Lookup, counters: &KeyspaceCounters) -> KeyFound {
        let kind = match self.record {
            _ if self.expired => None,
            Some(tag) if found.values.first().is_some_and(Option::is_some) => Some(tag),
            _ => self
                .probe_tags
                .iter()
                .zip(&found.present)
                .find(|(_, &p)| p)
                .map(|(&t, _)| t),
        };
        counters.count_hit(kind.is_some());
        if kind.is_none() {
            // The records of an expired key (until they are deleted) are not shown.
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
    /// GET's read of one key, resolved once: the value when the key is a live, unexpired
    /// string whose value DRAM holds whole; the read of its pages, ready to start, when it
    /// is such a string on the device; [`StringGet::Missing`] when no string is there,
    /// with whether the key holds another type (its other type records probed in the same
    /// view of the engine, so nil or WRONGTYPE is the answer of one instant, and a
    /// missing key costs no second lookup); [`StringGet::Other`] when the key has expired,
    /// which the general path ([`Store::read_key_here`]) answers.
    ///
    /// # Errors
    /// Engine errors.
    pub fn get_string_now(&self, key: &[u8]) -> Result<StringGet> {
        /// Keys shorter than this are tagged on the stack (no allocation).
        const STACK_KEY: usize = 128;
        /// Type records of a key probed: the string's, then the others'.
        const TYPES: usize = ks::TOP_LEVEL.len();
        // The string's record is the first of `TOP_LEVEL`'s order (`tagged` below).
        const _: () = assert!(ks::TOP_LEVEL[0] == STRING);
        if self.expired_now(key) {
            return Ok(StringGet::Other);
        }
        // The key's type records, back to back: STRING's first (`TOP_LEVEL`'s order).
        let mut stack = [0u8; TYPES * STACK_KEY];
        let heap;
        let records: &[u8] = if key.len() < STACK_KEY {
            let stride = key.len() + 1;
            for (i, tag) in ks::TOP_LEVEL.iter().enumerate() {
                stack[i * stride] = *tag;
                stack[i * stride + 1..(i + 1) * stride].copy_from_slice(key);
            }
            &stack[..TYPES * stride]
        } else {
            heap = ks::TopKeys::new(key);
            heap.bytes()
        };
        let all: [&[u8]; TYPES] = std::array::from_fn(|i| {
            let stride = key.len() + 1;
            records
                .get(i * stride..(i + 1) * stride)
                .unwrap_or_default()
        });
        let [tagged, others @ ..] = all;
        Ok(match self.db.get_now(tagged, &others)? {
            lsm::GetNow::Hot(v) => {
                self.counters.count_hit(true);
                StringGet::Hot(v)
            }
            // Its finish is built only here: a hot GET allocates nothing for it.
            lsm::GetNow::Cold(lookup) => StringGet::Cold(PendingKeyRead {
                lookup,
                finish: KeyFinish::string_found(),
                counters: self.counters.clone(),
            }),
            lsm::GetNow::NoValue { other_exists } => {
                // As the general path counts: a key of another type is a hit (Redis finds
                // the key, then refuses its type).
                self.counters.count_hit(other_exists);
                StringGet::Missing {
                    other_type: other_exists,
                }
            }
        })
    }

    /// Which of `keys` have passed their deadline (one lock, nothing to look up when no key
    /// has a deadline).
    pub(super) fn expired_mask(&self, keys: &[&[u8]], now: u64) -> Vec<bool> {
        if !self.may_have_deadlines() {
            return vec![false; keys.len()];
        }
        let ex = self.expiries.read();
        if ex.is_empty() {
            return vec![false; keys.len()];
        }
        keys.iter()
            .map(|k| ex.get(k).is_some_and(|&d| d < now))
            .collect()
    }

    /// String values of many keys without waiting for the device: the reads are submitted
    /// and `done` runs on the engine's poller thread once they are all in (or here, when
    /// nothing needs reading). A value within one device page arrives as a slice of the
    /// page read, without a copy. Expiry is judged when the reads are issued. For each key
    /// whose index in `keys` is in `typed`, `done` also learns whether it holds another
    /// type, looked up at the same instant as the values (so a GET answers nil or WRONGTYPE
    /// consistently); only a key whose string is not found is looked up for the others.
    /// `done` must be short and must not call into the store.
    pub fn get_strings_async(&self, keys: &[&[u8]], typed: &[usize], done: OnStrings) {
        self.strings_lookup(keys, typed, |refs, probes, finish| {
            self.db.lookup_async(
                refs,
                probes,
                None,
                Box::new(move |r| {
                    let (values, other_type) = finish.finish(r);
                    done(values, other_type);
                }),
            );
        });
    }

    /// [`Store::get_strings_async`] answered at once when DRAM holds every value page it
    /// needs; `Ok(None)` when a page must come from the device (nothing is read then, and no
    /// cache miss is counted: the engine thread, which reads GETs and MGETs in batches, see
    /// `exec::engine_loop`, counts it when it reads).
    ///
    /// # Errors
    /// Engine errors.
    pub fn get_strings_cached(
        &self,
        keys: &[&[u8]],
        typed: &[usize],
    ) -> Result<Option<CachedStrings>> {
        self.strings_lookup(keys, typed, |refs, probes, finish| {
            match self.db.lookup_cached(refs, probes, None)? {
                Some(found) => {
                    let (values, other_type) = finish.finish(Ok(found));
                    Ok(Some((values?, other_type)))
                }
                None => Ok(None),
            }
        })
    }

    /// [`Store::get_strings_async`] resolved here and now, in one view: answered at once
    /// when DRAM holds every value page it needs, else pending, its page reads for the
    /// caller to reserve and submit (a caller that must not wait: the network thread).
    ///
    /// # Errors
    /// Engine errors.
    pub fn get_strings_here(
        &self,
        keys: &[&[u8]],
        typed: &[usize],
    ) -> Result<Here<CachedStrings, PendingStrings>> {
        self.strings_lookup(keys, typed, |refs, probes, finish| {
            Ok(match self.db.lookup_now(refs, probes, None)? {
                LookupNow::Answered(found) => {
                    let (values, other_type) = finish.finish(Ok(found));
                    Here::Answered((values?, other_type))
                }
                LookupNow::Pending(lookup) => Here::Pending(PendingStrings { lookup, finish }),
            })
        })
    }

    /// Runs `lookup` on GET's and MGET's engine keys ([`Store::strings_request`]): the
    /// string records of `keys`, the probes of the typed ones' WRONGTYPE check, and what
    /// turns the lookup into the reply's values. The one place the three ways of reading
    /// them (waiting, from DRAM only, started here) share.
    fn strings_lookup<R>(
        &self,
        keys: &[&[u8]],
        typed: &[usize],
        lookup: impl FnOnce(&[&[u8]], Probes<'_>, StringsFinish) -> R,
    ) -> R {
        let (engine_keys, probe_keys, finish) = self.strings_request(keys, typed);
        let refs: Vec<&[u8]> = engine_keys.iter().map(Vec::as_slice).collect();
        let probes: Vec<&[u8]> = probe_keys.iter().map(Vec::as_slice).collect();
        lookup(&refs, strings_probes(&probes, typed), finish)
    }

    /// The engine keys of GET's and MGET's read: the string records of `keys`, the other
    /// types' records of each of `typed`, and what turns the lookup into the reply's values.
    fn strings_request(
        &self,
        keys: &[&[u8]],
        typed: &[usize],
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, StringsFinish) {
        let now = now_ms();
        let expired = self.expired_mask(keys, now);
        // An expired key of another type is no key: nil, not WRONGTYPE.
        let typed_expired: Vec<bool> = typed
            .iter()
            .map(|&i| expired.get(i).copied().unwrap_or(false))
            .collect();
        let engine_keys: Vec<Vec<u8>> = keys.iter().map(|k| ks::top(STRING, k)).collect();
        let probe_keys: Vec<Vec<u8>> = typed
            .iter()
            .filter_map(|&i| keys.get(i))
            .flat_map(|k| {
                ks::TOP_LEVEL
                    .iter()
                    .filter(|&&t| t != STRING)
                    .map(|&t| ks::top(t, k))
            })
            .collect();
        let finish = StringsFinish {
            expired,
            typed_expired,
            counters: self.counters.clone(),
        };
        (engine_keys, probe_keys, finish)
    }

    /// One key's read without waiting (the reading commands other than GET, MGET and the
    /// DRAM-only ones): the key's type is judged from DRAM and its records are read, all as
    /// of one instant, so the reply is consistent (a type check and a value read never
    /// straddle a write). The value pages go to the device and `done` runs on the engine's
    /// poller thread once they are in (or here when nothing needs reading). A key past its
    /// deadline counts as missing. `done` must be short and must not call into the
    /// store.
    pub fn read_key_async(&self, key: &[u8], what: &KeyRead<'_>, done: OnKey) {
        let req = KeyRequest::new(key, what, self.expired_now(key));
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

    /// [`Store::read_key_async`] resolved on the calling thread: answered when DRAM holds
    /// every value page it needs, else pending (the caller starts it, see [`Here`]), with
    /// one resolution either way.
    ///
    /// # Errors
    /// Engine errors.
    pub fn read_key_here(
        &self,
        key: &[u8],
        what: &KeyRead<'_>,
    ) -> Result<Here<KeyFound, PendingKeyRead>> {
        let req = KeyRequest::new(key, what, self.expired_now(key));
        let (keys, probe_refs) = (req.key_refs(), req.probe_refs());
        let range = req.range();
        Ok(
            match self
                .db
                .lookup_now(&keys, req.probes(&probe_refs), range.as_ref())?
            {
                LookupNow::Answered(found) => {
                    Here::Answered(req.finish.finish(found, &self.counters))
                }
                LookupNow::Pending(lookup) => Here::Pending(PendingKeyRead {
                    lookup: Box::new(lookup),
                    finish: req.finish,
                    counters: self.counters.clone(),
                }),
            },
        )
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
            .map_err(|_| StoreError::Engine(lsm::EngineError::Closed))?
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
            |k: &[u8]| !expiries.is_empty() && expiries.get(&k[1..]).is_some_and(|&d| d < now);
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
}
