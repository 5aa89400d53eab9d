//! One read interface over two states of the keyspace, so each collection read is written
//! once: the applied state ([`Store`], read on the engine thread) and a write group's state
//! ([`WriteGroup`]: the applied state plus the group's overlay, for EXEC and for the writes
//! that read first). Also the chunked key walk every collection read uses, so a read never
//! holds more of a collection than its reply, and the random picks of SPOP, SRANDMEMBER and
//! HRANDFIELD.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::cursor::{Remembered, SubrangeBounds};
use super::{now_ms, Result, Store, StoreError, WriteGroup, DELETE_CHUNK};
use crate::keyspace as ks;

/// A state of the keyspace that collection reads run against.
pub trait View {
    /// The type tag of `key` (`None`: no such key, or its deadline passed).
    ///
    /// # Errors
    /// Engine errors.
    fn key_kind(&self, key: &[u8]) -> Result<Option<u8>>;

    /// The value of one engine record.
    ///
    /// # Errors
    /// Engine errors.
    fn value(&self, engine_key: &[u8]) -> Result<Option<Bytes>>;

    /// Whether one engine record exists (from DRAM for the applied state).
    ///
    /// # Errors
    /// Engine errors.
    fn has(&self, engine_key: &[u8]) -> Result<bool>;

    /// The length of one record's value (from DRAM for the applied state).
    ///
    /// # Errors
    /// Engine errors.
    fn value_len(&self, engine_key: &[u8]) -> Result<Option<usize>> {
        Ok(self.value(engine_key)?.map(|v| v.len()))
    }

    /// Up to about `limit` engine keys from `from` (inclusive) to `end` (exclusive) in
    /// order, and where the next call starts (`None`: the range is done).
    ///
    /// # Errors
    /// Engine errors.
    fn keys_from(&self, from: &[u8], end: Option<&[u8]>, limit: usize) -> Result<KeyChunk>;

    /// The first engine key live in `from <= key < end` and an upper bound of the keys live
    /// there (`None`: none is), from DRAM: what a scan cursor's shared prefix is judged on
    /// (`store::cursor`).
    ///
    /// # Errors
    /// Engine errors.
    fn range_bounds(&self, from: &[u8], end: Option<&[u8]>) -> Result<SubrangeBounds>;

    /// The scan cursors the drive remembers (`store::cursor`).
    fn remembered(&self) -> &Remembered;
}

/// One step of a key walk: the keys, and where the next step starts (`None`: done).
pub type KeyChunk = (Vec<Vec<u8>>, Option<Vec<u8>>);

impl View for Store {
    fn key_kind(&self, key: &[u8]) -> Result<Option<u8>> {
        self.kind(key)
    }

    fn value(&self, engine_key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.db.get(engine_key)?.map(Bytes::from))
    }

    fn has(&self, engine_key: &[u8]) -> Result<bool> {
        Ok(self.db.value_lens(&[engine_key])?[0].is_some())
    }

    fn value_len(&self, engine_key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.value_lens(&[engine_key])?[0].map(|n| n as usize))
    }

    fn keys_from(&self, from: &[u8], end: Option<&[u8]>, limit: usize) -> Result<KeyChunk> {
        let keys = self.db.range_keys(from, end, limit)?;
        let next = match keys.last() {
            Some(l) if keys.len() >= limit => {
                let mut n = l.clone();
                n.push(0);
                Some(n)
            }
            _ => None,
        };
        Ok((keys, next))
    }

    fn range_bounds(&self, from: &[u8], end: Option<&[u8]>) -> Result<SubrangeBounds> {
        Ok(self.db.range_bounds(&[(from, end)])?.pop().flatten())
    }

    fn remembered(&self) -> &Remembered {
        &self.remembered
    }
}

impl View for WriteGroup<'_> {
    fn key_kind(&self, key: &[u8]) -> Result<Option<u8>> {
        self.kind(key)
    }

    fn value(&self, engine_key: &[u8]) -> Result<Option<Bytes>> {
        self.read(engine_key)
    }

    fn has(&self, engine_key: &[u8]) -> Result<bool> {
        self.present(engine_key)
    }

    fn keys_from(&self, from: &[u8], end: Option<&[u8]>, limit: usize) -> Result<KeyChunk> {
        use std::ops::Bound;
        let engine = self.store.db.range_keys(from, end, limit)?;
        // The overlay is merged over the same interval the engine's chunk covers.
        let (upper, next) = match engine.last() {
            Some(l) if engine.len() >= limit => {
                let mut n = l.clone();
                n.push(0);
                (Bound::Included(l.clone()), Some(n))
            }
            _ => (
                end.map_or(Bound::Unbounded, |e| Bound::Excluded(e.to_vec())),
                None,
            ),
        };
        let mut keys: std::collections::BTreeSet<Vec<u8>> = engine.into_iter().collect();
        for (k, v) in self.overlay.range((Bound::Included(from.to_vec()), upper)) {
            if v.is_some() {
                keys.insert(k.clone());
            } else {
                keys.remove(k);
            }
        }
        Ok((keys.into_iter().collect(), next))
    }

    fn range_bounds(&self, from: &[u8], end: Option<&[u8]>) -> Result<SubrangeBounds> {
        // The group's records over the applied state: the first live key from a one-key
        // walk of the merged view; the bound raised by the group's own records (its
        // deletions too: a bound may be loose).
        let Some(first) = self.keys_from(from, end, 1)?.0.into_iter().next() else {
            return Ok(None);
        };
        let engine = self.store.db.range_bounds(&[(from, end)])?.pop().flatten();
        let upper = end.map_or(Bound::Unbounded, |e| Bound::Excluded(e.to_vec()));
        let own = self
            .overlay
            .range((Bound::Included(from.to_vec()), upper))
            .next_back()
            .map(|(k, _)| k.clone());
        let last = engine
            .map(|(_, l)| l)
            .into_iter()
            .chain(own)
            .chain([first.clone()])
            .max()
            .unwrap_or_else(|| first.clone());
        Ok(Some((first, last)))
    }

    fn remembered(&self) -> &Remembered {
        &self.store.remembered
    }
}

/// Walks the engine keys under `prefix` in order, starting at `start` (or the prefix),
/// [`DELETE_CHUNK`] keys per engine call; `f` returns `false` to stop.
///
/// # Errors
/// Engine errors, or `f`'s.
pub fn walk<V: View + ?Sized>(
    v: &V,
    prefix: &[u8],
    start: Option<Vec<u8>>,
    mut f: impl FnMut(&[u8]) -> Result<bool>,
) -> Result<()> {
    let end = ks::prefix_end(prefix);
    let mut from = start.unwrap_or_else(|| prefix.to_vec());
    loop {
        let (keys, next) = v.keys_from(&from, end.as_deref(), DELETE_CHUNK)?;
        for k in &keys {
            if !f(k)? {
                return Ok(());
            }
        }
        match next {
            Some(n) => from = n,
            None => return Ok(()),
        }
    }
}

/// The names under `key`'s records of `sub_tag` (a hash's fields, a set's members), in byte
/// order; empty when `key` does not exist.
///
/// # Errors
/// `WrongType` when `key` holds another type than `type_tag`; engine errors.
pub fn sub_names<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    type_tag: u8,
    sub_tag: u8,
) -> Result<Vec<Bytes>> {
    if !holds(v, key, type_tag)? {
        return Ok(Vec::new());
    }
    let prefix = ks::sub_prefix(sub_tag, key);
    let mut out = Vec::new();
    walk(v, &prefix, None, |k| {
        out.push(Bytes::copy_from_slice(&k[prefix.len()..]));
        Ok(true)
    })?;
    Ok(out)
}

/// Ranks `start ..= stop` (negative from the end) of `n` ordered items (a list, a
/// sorted set) as a forward window
/// (first, last); `None` when empty.
pub fn rank_window(start: i64, stop: i64, n: u64) -> Option<(u64, u64)> {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let start = if start < 0 {
        start.saturating_add(n)
    } else {
        start
    }
    .max(0);
    let stop = if stop < 0 {
        stop.saturating_add(n)
    } else {
        stop
    };
    let stop = stop.min(n - 1);
    if start > stop || start >= n {
        return None;
    }
    Some((start.unsigned_abs(), stop.unsigned_abs()))
}

/// Whether `key` holds type `want`: `Ok(false)` when it does not exist, `WrongType` when it
/// holds another type.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn holds<V: View + ?Sized>(v: &V, key: &[u8], want: u8) -> Result<bool> {
    match v.key_kind(key)? {
        None => Ok(false),
        Some(k) if k == want => Ok(true),
        Some(_) => Err(StoreError::WrongType),
    }
}

/// The member count kept in the header of collection `key` of type `tag` (0: no key).
///
/// # Errors
/// Engine errors.
pub fn count_of<V: View + ?Sized>(v: &V, tag: u8, key: &[u8]) -> Result<u64> {
    Ok(v.value(&ks::top(tag, key))?
        .map_or(0, |c| ks::decode_count(&c)))
}

/// A small random number source for SPOP, SRANDMEMBER and HRANDFIELD (not cryptographic:
/// splitmix64 seeded from the clock and a global counter).
pub struct Picker {
    state: u64,
}

impl Picker {
    /// A new source, seeded differently from every other.
    pub fn new() -> Picker {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let n = CALLS.fetch_add(1, Ordering::Relaxed);
        Picker {
            state: now_ms() ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d,
        }
    }

    /// A number below `bound` (which must be > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        z % bound.max(1)
    }

    /// `k` distinct positions below `n`, sorted (Floyd's sampling; `k` is capped at `n`).
    pub fn distinct(&mut self, k: u64, n: u64) -> Vec<u64> {
        let k = k.min(n);
        let mut chosen = std::collections::BTreeSet::new();
        for j in (n - k)..n {
            let t = self.below(j + 1);
            if !chosen.insert(t) {
                chosen.insert(j);
            }
        }
        chosen.into_iter().collect()
    }

    /// `k` positions below `n`, repeats allowed, in the order drawn.
    pub fn repeated(&mut self, k: u64, n: u64) -> Vec<u64> {
        (0..k).map(|_| self.below(n)).collect()
    }
}

impl Default for Picker {
    fn default() -> Self {
        Picker::new()
    }
}

/// The members at `positions` (sorted, repeats allowed) of the walk under `prefix`, each
/// cut to the part after the prefix, in position order.
///
/// # Errors
/// Engine errors.
pub fn pick_at<V: View + ?Sized>(v: &V, prefix: &[u8], positions: &[u64]) -> Result<Vec<Bytes>> {
    let mut out = Vec::with_capacity(positions.len());
    let mut i = 0u64;
    let mut p = positions.iter().peekable();
    walk(v, prefix, None, |k| {
        while p.peek().is_some_and(|&&want| want == i) {
            out.push(Bytes::copy_from_slice(&k[prefix.len()..]));
            p.next();
        }
        i += 1;
        Ok(p.peek().is_some())
    })?;
    Ok(out)
}

/// SRANDMEMBER and HRANDFIELD with a count over collection `key` of type `tag` whose
/// names are the `sub_tag` records: distinct names for a positive count (all of them when
/// it is at least the size), `|count|` draws with repeats for a negative one, in the order
/// drawn. `None`: no such key.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn random_names<V: View + ?Sized>(
    v: &V,
    tag: u8,
    sub_tag: u8,
    key: &[u8],
    count: i64,
) -> Result<Option<Vec<Bytes>>> {
    if !holds(v, key, tag)? {
        return Ok(None);
    }
    let n = count_of(v, tag, key)?;
    let prefix = ks::sub_prefix(sub_tag, key);
    let k = count.unsigned_abs();
    let mut picker = Picker::new();
    if count >= 0 {
        let positions = if k >= n {
            (0..n).collect()
        } else {
            picker.distinct(k, n)
        };
        return pick_at(v, &prefix, &positions).map(Some);
    }
    let draws = picker.repeated(k, n);
    let mut sorted = draws.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let found = pick_at(v, &prefix, &sorted)?;
    Ok(Some(
        draws
            .iter()
            .filter_map(|d| sorted.binary_search(d).ok().and_then(|i| found.get(i)))
            .cloned()
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_in_range_and_distinct_when_asked() {
        let mut p = Picker::new();
        for n in [1u64, 2, 5, 100] {
            for k in [0u64, 1, 3, 200] {
                let d = p.distinct(k, n);
                assert_eq!(d.len() as u64, k.min(n));
                assert!(d.windows(2).all(|w| w[0] < w[1]));
                assert!(d.iter().all(|&x| x < n));
            }
        }
        assert!(p.repeated(50, 3).iter().all(|&x| x < 3));
    }
}
