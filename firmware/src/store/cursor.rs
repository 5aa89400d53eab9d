//! Scan cursors: SCAN, SSCAN, HSCAN and ZSCAN carry where their walk stands in the 64-bit
//! cursor itself, so a cursor stays valid across reconnects, restarts and clients, and the
//! drive keeps no state for it, except in one case (a *remembered* cursor, below).
//!
//! A walk goes over a key-ordered range (the user keys, or one collection's member names).
//! A cursor names the key it resumes at, `next`, by three parts:
//!
//! - `head`: the first `h` bytes of `next` (0 to 6): the walk's *subrange* is the keys that
//!   start with them.
//! - `shared`: a length `L >= h` such that every key live in the subrange when the cursor
//!   was made starts with the same `L` bytes `P`: the common prefix of the subrange's first
//!   live key and an upper bound of its keys ([`lsm::Engine::range_bounds`]). `P` itself is
//!   not carried: the next step reads it off the subrange's first live key then.
//! - `carried`: the `6 - h` bytes of `next` after `P`.
//!
//! It resumes at `R = P' ++ carried` (trailing zero bytes dropped), where `P'` is the first
//! `L` bytes of the subrange's first live key at the next step (the head itself when the
//! subrange is empty now or that key is shorter than `L`). Why no key is skipped that is
//! live for the whole scan: let `u` be such a key not yet returned, so `u >= next`. If `u`
//! is past the subrange, it is past `R`, which lies inside it. Otherwise `u` was live in the
//! subrange when the cursor was made, so it starts with `P`; it is live now, so the
//! subrange's first live key `f` is at most `u` and `f`'s first `L` bytes are at most `P`.
//! If they equal `P`, `R` is a prefix of `next`, so `R <= next <= u`; if smaller, `R < P <=
//! u`. Keys returned twice are allowed, as in Redis.
//!
//! The encoder picks the head length whose `R` is longest (the subrange whose keys share the
//! longest prefix, against the head bytes that prefix costs), and a step ends only before a
//! key whose `R` is above every key the step returned, so the walk always moves on. A step
//! visits COUNT keys and then goes on while the next key's `R` is not above the last one
//! visited (keys agreeing in their first `L + 6 - h` bytes). When that goes on for
//! [`GROUP_SLACK`] more keys, or to the end of the range, the step is cut back to the first
//! of those keys and ends there with a *remembered* cursor: the drive keeps that exact
//! resume key in a bounded table (see [`Remembered`]), so replies stay near COUNT. A
//! remembered cursor that a restart (or 16,384 newer ones) made the drive forget starts its
//! range over, which repeats keys but skips none.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

/// Bytes of key material a stateless cursor carries: the head and the bytes after the
/// shared prefix.
pub const CARRIED: usize = 6;

/// Longest shared prefix a cursor names (6 bits).
pub const MAX_SHARED: usize = 63;

/// Keys a step may visit past COUNT to end where a stateless cursor can resume; past it the
/// step ends with a remembered cursor.
pub const GROUP_SLACK: usize = 1024;

/// Remembered cursors kept at once (the oldest is forgotten first).
const MAX_REMEMBERED: usize = 16_384;

/// Set in every cursor but 0 (the start and the end of a walk), so no resume point encodes
/// as 0. The top bit stays clear: every cursor is below 2^63, for clients that parse
/// cursors as signed 64-bit integers.
const MARK: u64 = 1 << 62;

/// Set in a remembered cursor (the rest is its number in [`Remembered`]).
const REMEMBERED: u64 = 1 << 61;

/// The first live key and an upper bound of the keys of one subrange (the keys starting
/// with the head given), relative to the walk's range; `None`: no live key.
pub type Bounds<'a> = dyn FnMut(&[u8]) -> crate::store::Result<SubrangeBounds> + 'a;

/// A stateless resume point (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stateless {
    head: usize,
    shared: usize,
    /// The head, then the bytes after the shared prefix.
    bytes: [u8; CARRIED],
}

impl Stateless {
    fn encode(&self) -> u64 {
        let mut word = [0u8; 8];
        word[2..].copy_from_slice(&self.bytes);
        let shared = u64::try_from(self.shared.min(MAX_SHARED)).unwrap_or(0);
        let head = u64::try_from(self.head.min(CARRIED)).unwrap_or(0);
        u64::from_be_bytes(word) | (shared << 48) | (head << 54) | MARK
    }

    fn decode(cursor: u64) -> Stateless {
        let word = cursor.to_be_bytes();
        let mut bytes = [0u8; CARRIED];
        bytes.copy_from_slice(&word[2..]);
        Stateless {
            head: usize::try_from((cursor >> 54) & 0x7)
                .unwrap_or(0)
                .min(CARRIED),
            shared: usize::try_from((cursor >> 48) & 0x3f).unwrap_or(0),
            bytes,
        }
    }

    /// The resume point for `next` with a head of `head` bytes in a subrange whose keys
    /// share `shared` bytes (`shared >= head`).
    fn at(next: &[u8], head: usize, shared: usize) -> Stateless {
        let head = head.min(next.len()).min(CARRIED);
        let shared = shared.clamp(head, MAX_SHARED).min(next.len());
        let mut bytes = [0u8; CARRIED];
        bytes[..head].copy_from_slice(&next[..head]);
        let rest = &next[shared..];
        let n = rest.len().min(CARRIED - head);
        bytes[head..head + n].copy_from_slice(&rest[..n]);
        Stateless {
            head,
            shared,
            bytes,
        }
    }

    /// The carried bytes after the shared prefix, trailing zero bytes dropped.
    fn carried(&self) -> &[u8] {
        let tail = &self.bytes[self.head..];
        let used = tail.len() - tail.iter().rev().take_while(|&&b| b == 0).count();
        &tail[..used]
    }

    /// The key to resume at, given the subrange's first live key now.
    fn resume(&self, first: Option<&[u8]>) -> Vec<u8> {
        let head = &self.bytes[..self.head];
        match first.and_then(|f| f.get(..self.shared)) {
            Some(prefix) if prefix.starts_with(head) => [prefix, self.carried()].concat(),
            // The subrange is empty now, or changed under the walk: from its start.
            _ => head.to_vec(),
        }
    }
}

/// A subrange's first live key and an upper bound of its keys (see [`Bounds`]).
pub type SubrangeBounds = lsm::RangeBounds;

/// `bounds` asked once per head: a step asks for the same subranges key after key.
pub fn cached<'a>(
    mut bounds: impl FnMut(&[u8]) -> crate::store::Result<SubrangeBounds> + 'a,
) -> impl FnMut(&[u8]) -> crate::store::Result<SubrangeBounds> + 'a {
    let mut known: HashMap<Vec<u8>, SubrangeBounds> = HashMap::new();
    move |head| {
        if let Some(b) = known.get(head) {
            return Ok(b.clone());
        }
        let b = bounds(head)?;
        known.insert(head.to_vec(), b.clone());
        Ok(b)
    }
}

/// Where a walk resumes: the cursor's key (relative to the walk's range), or the start.
///
/// # Errors
/// `bounds`' errors.
pub fn resume_key(
    cursor: u64,
    range: &[u8],
    remembered: &Remembered,
    bounds: &mut Bounds<'_>,
) -> crate::store::Result<Vec<u8>> {
    if cursor == 0 {
        return Ok(Vec::new());
    }
    if cursor & REMEMBERED != 0 && cursor & MARK != 0 {
        return Ok(remembered.recall(cursor & !(MARK | REMEMBERED), range));
    }
    let s = Stateless::decode(cursor);
    let first = bounds(&s.bytes[..s.head])?.map(|(f, _)| f);
    Ok(s.resume(first.as_deref()))
}

/// The stateless cursor that resumes at `next` and the key it resumes at (a prefix of
/// `next`): of the head lengths 0 to 6, the one whose resume key is longest.
///
/// # Errors
/// `bounds`' errors.
pub fn stateless_at(next: &[u8], bounds: &mut Bounds<'_>) -> crate::store::Result<(u64, Vec<u8>)> {
    let mut best: Option<(Stateless, Vec<u8>)> = None;
    for head in 0..=CARRIED.min(next.len()) {
        let Some((first, last)) = bounds(&next[..head])? else {
            continue;
        };
        let shared = common_len(&first, &last).min(common_len(&first, next));
        if shared < head {
            continue;
        }
        let s = Stateless::at(next, head, shared);
        let r = [&next[..s.shared], s.carried()].concat();
        let whole = r.len() == next.len();
        if best.as_ref().is_none_or(|(_, b)| r.len() > b.len()) {
            best = Some((s, r));
        }
        if whole {
            // The resume key is `next` itself: no longer head can do better.
            break;
        }
    }
    let (s, r) = best.unwrap_or_else(|| {
        let s = Stateless::at(next, 0, 0);
        let r = s.carried().to_vec();
        (s, r)
    });
    Ok((s.encode(), r))
}

/// Where a step of a walk ends (see the module docs): asked before each key is visited.
pub struct StepEnd {
    count: usize,
    visited: usize,
    last: Option<Vec<u8>>,
    /// The first key past COUNT that no stateless cursor could resume at, and the length
    /// of the reply before it.
    fallback: Option<(usize, Vec<u8>)>,
}

/// What a step does with the next key.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Visit it.
    Visit,
    /// End the step before it with this cursor.
    Stop(u64),
    /// End the step with a remembered cursor at `at`, the reply cut back to `keep` items.
    Remember {
        /// Items of the reply to keep.
        keep: usize,
        /// The key the remembered cursor resumes at.
        at: Vec<u8>,
    },
}

impl StepEnd {
    /// A step that visits at least `count` keys.
    pub fn new(count: usize) -> StepEnd {
        StepEnd {
            count: count.max(1),
            visited: 0,
            last: None,
            fallback: None,
        }
    }

    /// What to do with `key`, the reply holding `reply_len` items so far.
    ///
    /// # Errors
    /// `bounds`' errors.
    pub fn before(
        &mut self,
        key: &[u8],
        reply_len: usize,
        bounds: &mut Bounds<'_>,
    ) -> crate::store::Result<Verdict> {
        let Some(last) = self.last.as_deref().filter(|_| self.visited >= self.count) else {
            return Ok(Verdict::Visit);
        };
        let (cursor, resume) = stateless_at(key, bounds)?;
        if resume.as_slice() > last {
            return Ok(Verdict::Stop(cursor));
        }
        let fallback = self
            .fallback
            .get_or_insert_with(|| (reply_len, key.to_vec()));
        if self.visited >= self.count.saturating_add(GROUP_SLACK) {
            return Ok(Verdict::Remember {
                keep: fallback.0,
                at: fallback.1.clone(),
            });
        }
        Ok(Verdict::Visit)
    }

    /// At the end of the range: `Some((keep, at))` when the step passed a key no stateless
    /// cursor could resume at, where it ends with a remembered cursor instead (replies stay
    /// near COUNT up to the last key), `None` when the walk is done.
    pub fn at_end(self) -> Option<(usize, Vec<u8>)> {
        self.fallback
    }

    /// Counts `key` visited.
    pub fn visited(&mut self, key: &[u8]) {
        self.visited += 1;
        self.last = Some(key.to_vec());
    }
}

/// The length of the common prefix of `a` and `b`.
fn common_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Resume keys of walks whose stateless cursor would have ended far past COUNT (see the
/// module docs), by number: bounded, lost at a restart.
#[derive(Default)]
pub struct Remembered {
    inner: Mutex<RememberedTable>,
}

/// [`Remembered`]'s table: the last number given, and each cursor's range and resume key.
#[derive(Default)]
struct RememberedTable {
    last: u64,
    by_id: BTreeMap<u64, (Vec<u8>, Vec<u8>)>,
}

impl Remembered {
    /// A cursor that resumes the walk over `range` exactly at `next`.
    pub fn remember(&self, range: &[u8], next: &[u8]) -> u64 {
        let mut t = self.inner.lock();
        t.last = (t.last + 1) & (REMEMBERED - 1);
        let id = t.last;
        t.by_id.insert(id, (range.to_vec(), next.to_vec()));
        while t.by_id.len() > MAX_REMEMBERED {
            t.by_id.pop_first();
        }
        id | REMEMBERED | MARK
    }

    /// Where remembered cursor `id` resumes over `range`: its key, or the start when the
    /// drive forgot it (a restart, newer cursors) or it belongs to another range.
    fn recall(&self, id: u64, range: &[u8]) -> Vec<u8> {
        match self.inner.lock().by_id.get(&id) {
            Some((r, next)) if r == range => next.clone(),
            _ => Vec::new(),
        }
    }

    /// Forgets every cursor (FLUSHALL).
    pub fn clear(&self) {
        self.inner.lock().by_id.clear();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// Bounds over a fixed sorted key list.
    fn over<'k>(
        keys: &'k [&'k str],
    ) -> impl FnMut(&[u8]) -> crate::store::Result<SubrangeBounds> + 'k {
        move |head| {
            let inside: Vec<&[u8]> = keys
                .iter()
                .map(|k| k.as_bytes())
                .filter(|k| k.starts_with(head))
                .collect();
            Ok(inside
                .first()
                .map(|f| (f.to_vec(), inside.last().unwrap_or(f).to_vec())))
        }
    }

    #[test]
    fn cursors_round_trip_are_never_zero_and_fit_a_signed_integer() {
        for (next, head, shared) in [
            (&b""[..], 0, 0),
            (b"\0", 0, 0),
            (b"user:000123", 5, 8),
            (b"a-very-long-key-whose-tail-is-cut", 3, 200),
        ] {
            let s = Stateless::at(next, head, shared);
            let c = s.encode();
            assert_ne!(c, 0);
            assert!(i64::try_from(c).is_ok());
            assert_eq!(c & REMEMBERED, 0);
            assert_eq!(Stateless::decode(c), s);
        }
    }

    #[test]
    fn an_outlier_key_costs_a_head_not_the_resolution() {
        // Three keys unlike the rest: the whole range shares no prefix, the `k` subrange
        // shares `key:00000000`.
        let mut keys: Vec<String> = vec!["bighash".into(), "bigset".into(), "bigzset".into()];
        keys.extend((0..3000).map(|i| format!("key:{i:012}")));
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut b = over(&refs);
        let next = b"key:000000001234";
        let (c, r) = stateless_at(next, &mut b).unwrap();
        assert!(next.starts_with(&r));
        assert!(
            r.len() >= 15,
            "resume key {:?}",
            String::from_utf8_lossy(&r)
        );
        assert!(b"key:000000001233".as_slice() < r.as_slice());
        let back = resume_key(c, b"", &Remembered::default(), &mut b).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn a_resume_key_never_passes_a_key_that_stayed() {
        let keys = ["aa1", "ab5", "b2", "b7"];
        let mut b = over(&keys);
        let (c, r) = stateless_at(b"ab5", &mut b).unwrap();
        assert!(r.as_slice() <= b"ab5".as_slice());
        // "aa1" and "ab5" go; "b2" stayed and was not returned yet.
        let now = ["b2", "b7"];
        let mut b = over(&now);
        let back = resume_key(c, b"", &Remembered::default(), &mut b).unwrap();
        assert!(back.as_slice() <= b"b2".as_slice(), "{back:?}");
    }

    #[test]
    fn remembered_cursors_resume_exactly_and_start_over_once_forgotten() {
        let r = Remembered::default();
        let c = r.remember(b"range", b"key-42");
        assert_ne!(c & REMEMBERED, 0);
        let mut none = |_: &[u8]| Ok(None);
        assert_eq!(resume_key(c, b"range", &r, &mut none).unwrap(), b"key-42");
        assert_eq!(resume_key(c, b"other", &r, &mut none).unwrap(), b"");
        let forgot = Remembered::default();
        assert_eq!(resume_key(c, b"range", &forgot, &mut none).unwrap(), b"");
    }
}
