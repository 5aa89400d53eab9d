//! Walks of the whole keyspace: SCAN (stateless cursors, see `cursor`), KEYS and DBSIZE.

use std::collections::VecDeque;

use bytes::Bytes;
use lsm::Engine;

use super::cursor;
use super::{now_ms, Result, Store, DELETE_CHUNK};
use crate::keyspace as ks;

/// One reply of [`Store::scan`]: the next cursor (0 = done) and the keys.
pub type ScanPage = (u64, Vec<Bytes>);

impl Store {
    /// KEYS: every live key matching `pattern`, walked in key order in chunks (the keyspace
    /// is never held whole; only the matches are). A pattern with a literal prefix walks
    /// only the keys with that prefix.
    ///
    /// # Errors
    /// Engine errors.
    pub fn keys(&self, pattern: &[u8]) -> Result<Vec<Bytes>> {
        self.keys_at(pattern, now_ms())
    }

    /// As [`Store::keys`], judging expiry at `now` (a transaction's fixed instant).
    ///
    /// # Errors
    /// Engine errors.
    pub fn keys_at(&self, pattern: &[u8], now: u64) -> Result<Vec<Bytes>> {
        let mut out = Vec::new();
        self.walk_top_keys(&literal_prefix(pattern), |user| {
            if !self.expired(user, now) && kvproto::glob::glob_match(pattern, user) {
                out.push(Bytes::copy_from_slice(user));
            }
            true
        })?;
        Ok(out)
    }

    /// CLUSTER GETKEYSINSLOT / COUNTKEYSINSLOT: up to `limit` live keys whose hash slot is
    /// `slot`, in key order. The keyspace is ordered by key, not by slot, so this walks
    /// every key (in chunks, DRAM only): O(keys), where Redis keeps a per-slot index. A
    /// migration moving many slots should walk once (SCAN) and bucket keys by slot itself.
    ///
    /// # Errors
    /// Engine errors.
    pub fn keys_in_slot(&self, slot: u16, limit: usize) -> Result<Vec<Bytes>> {
        let now = now_ms();
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.walk_top_keys(&[], |user| {
            if kvproto::cluster::key_slot(user) == slot && !self.expired(user, now) {
                out.push(Bytes::copy_from_slice(user));
            }
            out.len() < limit
        })?;
        Ok(out)
    }

    /// Calls `visit` with every user key that has a type record and starts with `literal`,
    /// type by type in key order, walked in chunks of [`DELETE_CHUNK`] (the keyspace is
    /// never held whole), until `visit` returns false. Expired keys are visited too.
    fn walk_top_keys(&self, literal: &[u8], mut visit: impl FnMut(&[u8]) -> bool) -> Result<()> {
        for tag in ks::TOP_LEVEL {
            let prefix = ks::top(tag, literal);
            let end = ks::prefix_end(&prefix);
            let mut from = prefix.clone();
            loop {
                let keys = self.db.range_keys(&from, end.as_deref(), DELETE_CHUNK)?;
                for k in &keys {
                    if !visit(k.get(1..).unwrap_or_default()) {
                        return Ok(());
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
        Ok(())
    }

    /// RANDOMKEY: a key drawn at random from every type's key range (DRAM only; see
    /// [`lsm::Engine::sample_key`] for how uniform the draw is and what it costs) among
    /// those `live` takes: [`Store::random_key`]'s caller judges expiry (the applied state
    /// with [`Store::is_live`], a transaction through its group). `None` when no key
    /// qualifies (or, see `sample_key`, over a million entries in a row did not).
    ///
    /// # Errors
    /// Engine errors, and the first of `live`'s.
    pub fn random_key(&self, mut live: impl FnMut(&[u8]) -> Result<bool>) -> Result<Option<Bytes>> {
        let ends: Vec<Option<Vec<u8>>> = ks::TOP_LEVEL
            .iter()
            .map(|&t| ks::prefix_end(&[t]))
            .collect();
        let starts: Vec<[u8; 1]> = ks::TOP_LEVEL.iter().map(|&t| [t]).collect();
        let ranges: Vec<(&[u8], Option<&[u8]>)> = starts
            .iter()
            .zip(&ends)
            .map(|(s, e)| (&s[..], e.as_deref()))
            .collect();
        let mut failed = None;
        let mut accept = |k: &[u8]| {
            if failed.is_some() {
                return false;
            }
            match live(k.get(1..).unwrap_or_default()) {
                Ok(yes) => yes,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        };
        let seed = super::view::Picker::new().below(u64::MAX);
        let drawn = self.db.sample_key(&ranges, seed, &mut accept)?;
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(drawn.map(|k| Bytes::copy_from_slice(k.get(1..).unwrap_or_default())))
    }

    /// Whether the key count waits for [`Store::recount_keys`] (a group failed).
    pub fn key_count_stale(&self) -> bool {
        self.keys.is_stale()
    }

    /// Recounts the keys by a walk over the DRAM keytables. The writer calls it while none of
    /// its groups is in flight, so nothing changes the applied state during the walk.
    ///
    /// # Errors
    /// Engine errors: the count stays stale.
    pub fn recount_keys(&self) -> Result<()> {
        let now = now_ms();
        let n = super::count_type_records(&self.db, &self.expiries.read(), now)?;
        self.keys.set(n);
        tracing::info!(keys = n, "key count recomputed after a failed write group");
        Ok(())
    }

    /// Whether `key` has not passed its deadline (as of now), for [`Store::random_key`].
    pub fn is_live(&self, key: &[u8]) -> bool {
        !self.expired_now(key)
    }

    /// DBSIZE: the keys of every type whose deadline has not passed. O(1) from the
    /// writer-kept count (see `store::count`), minus the expired keys not yet purged; a walk
    /// over the DRAM keytables only while that count is stale (after a failed group).
    ///
    /// # Errors
    /// Engine errors (of the walk).
    pub fn dbsize(&self) -> Result<i64> {
        self.dbsize_at(now_ms())
    }

    /// As [`Store::dbsize`], judging expiry at `now` (a transaction's fixed instant).
    ///
    /// # Errors
    /// Engine errors (of the walk).
    pub fn dbsize_at(&self, now: u64) -> Result<i64> {
        let expiries = self.expiries.read();
        let n = match self.keys.get() {
            Some(n) => n,
            None => super::count_type_records(&self.db, &expiries, now)?,
        };
        let expired = expiries.due_count(now) as u64;
        Ok(n.saturating_sub(expired) as i64)
    }

    /// One SCAN step: at least `count` keys visited (fewer at the end) from where `cursor`
    /// left off, in user-key order across every type, and then up to where a cursor can
    /// resume past them; those matching `pattern` and `kind` are returned with the next
    /// cursor (0: the walk is done). The cursor is stateless but for one case (see
    /// `cursor`): a key live for the whole scan is returned at least once, whatever changed
    /// meanwhile, and a cursor works after a restart. DRAM only: the keys come from the
    /// keytables and memtables.
    ///
    /// # Errors
    /// Engine errors.
    pub fn scan(
        &self,
        cursor: u64,
        pattern: Option<&[u8]>,
        count: usize,
        kind: Option<&[u8]>,
    ) -> Result<ScanPage> {
        // Each type's bounds over the whole keyspace: which types a walk needs, and the
        // subrange of the empty head that cursors are usually made on.
        let whole = tag_bounds(&self.db, b"")?;
        let live_tags: Vec<u8> = ks::TOP_LEVEL
            .iter()
            .zip(&whole)
            .filter_map(|(&t, b)| b.as_ref().map(|_| t))
            .collect();
        let mut bounds = cursor::cached(|head: &[u8]| {
            if head.is_empty() {
                return Ok(combine(whole.clone()));
            }
            Ok(combine(tag_bounds(&self.db, head)?))
        });
        let from = cursor::resume_key(cursor, b"", &self.remembered, &mut bounds)?;
        let now = now_ms();
        let mut walk = TopWalk::new(
            &self.db,
            &live_tags,
            &from,
            (count + 1).clamp(16, DELETE_CHUNK),
        );
        let mut out = Vec::new();
        let mut end = cursor::StepEnd::new(count);
        while let Some(lane) = walk.head()? {
            match end.before(walk.user(lane), out.len(), &mut bounds)? {
                cursor::Verdict::Visit => {}
                cursor::Verdict::Stop(next) => return Ok((next, out)),
                cursor::Verdict::Remember { keep, at } => {
                    out.truncate(keep);
                    return Ok((self.remembered.remember(b"", &at), out));
                }
            }
            let (tag, user) = walk.pop(lane);
            end.visited(&user);
            let type_ok =
                kind.is_none_or(|t| t.eq_ignore_ascii_case(ks::type_name(tag).as_bytes()));
            if type_ok
                && !self.expired(&user, now)
                && pattern.is_none_or(|p| kvproto::glob::glob_match(p, &user))
            {
                out.push(Bytes::copy_from_slice(&user));
            }
        }
        Ok(match end.at_end() {
            Some((keep, at)) => {
                out.truncate(keep);
                (self.remembered.remember(b"", &at), out)
            }
            None => (0, out),
        })
    }
}

/// For each type ([`ks::TOP_LEVEL`]'s order), the first live user key starting with `head`
/// and an upper bound of such user keys ([`Engine::range_bounds`], one view).
fn tag_bounds(db: &Engine, head: &[u8]) -> Result<Vec<cursor::SubrangeBounds>> {
    let starts: Vec<Vec<u8>> = ks::TOP_LEVEL.iter().map(|&t| ks::top(t, head)).collect();
    let ends: Vec<Option<Vec<u8>>> = starts.iter().map(|s| ks::prefix_end(s)).collect();
    let ranges: Vec<(&[u8], Option<&[u8]>)> = starts
        .iter()
        .zip(&ends)
        .map(|(s, e)| (s.as_slice(), e.as_deref()))
        .collect();
    let user = |k: &[u8]| k.get(1..).unwrap_or_default().to_vec();
    Ok(db
        .range_bounds(&ranges)?
        .into_iter()
        .map(|b| b.map(|(f, l)| (user(&f), user(&l))))
        .collect())
}

/// The bounds of every type's user keys together: the least first key, the greatest bound.
fn combine(per_type: Vec<cursor::SubrangeBounds>) -> cursor::SubrangeBounds {
    per_type
        .into_iter()
        .flatten()
        .reduce(|(f, l), (g, m)| (f.min(g), l.max(m)))
}

/// One type's records in a [`TopWalk`]: a chunk of engine keys and where the next starts.
struct Lane {
    tag: u8,
    end: Option<Vec<u8>>,
    keys: VecDeque<Vec<u8>>,
    next_from: Option<Vec<u8>>,
}

/// The user keys of every type from a starting user key on, in key order: each type's
/// records walked in chunks (DRAM only) and merged. A name with records under two types (a
/// leftover of an older build, see `store::drop_string_only_deadlines`) comes once.
struct TopWalk<'e> {
    db: &'e Engine,
    chunk: usize,
    lanes: Vec<Lane>,
}

impl<'e> TopWalk<'e> {
    fn new(db: &'e Engine, tags: &[u8], from: &[u8], chunk: usize) -> TopWalk<'e> {
        let lanes = tags
            .iter()
            .map(|&tag| Lane {
                tag,
                end: ks::prefix_end(&[tag]),
                keys: VecDeque::new(),
                next_from: Some(ks::top(tag, from)),
            })
            .collect();
        TopWalk { db, chunk, lanes }
    }

    /// The lane holding the smallest next user key (`None`: the walk is over).
    fn head(&mut self) -> Result<Option<usize>> {
        for lane in &mut self.lanes {
            if !lane.keys.is_empty() {
                continue;
            }
            let Some(from) = lane.next_from.take() else {
                continue;
            };
            let keys = self.db.range_keys(&from, lane.end.as_deref(), self.chunk)?;
            if keys.len() >= self.chunk {
                lane.next_from = keys.last().map(|l| {
                    let mut n = l.clone();
                    n.push(0);
                    n
                });
            }
            lane.keys.extend(keys);
        }
        Ok((0..self.lanes.len())
            .filter(|&i| !self.lanes[i].keys.is_empty())
            .min_by(|&a, &b| self.user(a).cmp(self.user(b))))
    }

    /// The next user key of `lane` (which [`TopWalk::head`] found non-empty).
    fn user(&self, lane: usize) -> &[u8] {
        self.lanes[lane]
            .keys
            .front()
            .and_then(|k| k.get(1..))
            .unwrap_or_default()
    }

    /// Takes the head key (its type tag and user key), and the same name in other lanes.
    fn pop(&mut self, lane: usize) -> (u8, Vec<u8>) {
        let tag = self.lanes[lane].tag;
        let user = self.user(lane).to_vec();
        for l in &mut self.lanes {
            if l.keys.front().and_then(|k| k.get(1..)) == Some(&user[..]) {
                l.keys.pop_front();
            }
        }
        (tag, user)
    }
}

/// The bytes of a glob pattern before its first special character (every key it matches
/// starts with them).
pub(super) fn literal_prefix(pattern: &[u8]) -> Vec<u8> {
    pattern
        .iter()
        .take_while(|b| !matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::BTreeSet;

    use bytes::Bytes;
    use hwftl_sim::RamStore;

    use crate::store::testing::{open, write};
    use crate::store::SetOptions;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// Keys of two types are scanned with COUNT 25 while, between steps, keys already
    /// returned and keys not yet returned are deleted and new keys are added, and halfway
    /// the store is closed and opened again: the cursor goes on after the restart, every key
    /// present for the whole scan is returned, and nothing that never existed is.
    #[test]
    fn scan_cursors_survive_a_restart_and_skip_no_key_that_lives_throughout() {
        let ram = RamStore::new();
        let mut s = open(&ram, true);
        let name = |i: u32| format!("user:{i:06}");
        write(&s, |g| {
            for i in 0..400 {
                g.set(name(i).as_bytes(), b("v"), SetOptions::default())
                    .unwrap();
            }
            for i in 400..600 {
                g.hash_set(name(i).as_bytes(), &[(b("f"), b("v"))]).unwrap();
            }
        });
        let mut stable: BTreeSet<String> = (0..600).map(name).collect();
        let mut ever: BTreeSet<String> = stable.clone();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n) as u32
        };
        let (mut cursor, mut steps, mut restarted) = (0u64, 0, false);
        loop {
            let (c, keys) = s.scan(cursor, None, 25, None).unwrap();
            steps += 1;
            assert!(steps < 200, "the scan does not end");
            for k in keys {
                let k = String::from_utf8(k.to_vec()).unwrap();
                assert!(ever.contains(&k), "{k} never existed");
                seen.insert(k);
            }
            if c == 0 {
                break;
            }
            cursor = c;
            // Delete keys on both sides of the cursor and add new ones (some between
            // existing names, some past the end).
            let doomed: Vec<String> = (0..6).map(|_| name(next(600))).collect();
            let born: Vec<String> = (0..4).map(|_| format!("user:{:06}x", next(700))).collect();
            write(&s, |g| {
                let keys: Vec<Bytes> = doomed.iter().map(|k| b(k)).collect();
                g.delete(&keys).unwrap();
                for k in &born {
                    g.set(k.as_bytes(), b("n"), SetOptions::default()).unwrap();
                }
            });
            for k in &doomed {
                stable.remove(k);
            }
            ever.extend(born);
            if steps == 10 && !restarted {
                s.into_engine().close().unwrap();
                s = open(&ram, false);
                restarted = true;
            }
        }
        assert!(restarted);
        let missed: Vec<&String> = stable.difference(&seen).collect();
        assert!(
            missed.is_empty(),
            "keys present throughout but not returned: {missed:?}"
        );
    }

    /// Keys that share a long prefix (redis-benchmark's and memtier's names) still come
    /// COUNT at a time: the cursor names the bytes after the prefix every key shares.
    #[test]
    fn replies_stay_at_count_when_every_key_shares_a_long_prefix() {
        let s = open(&RamStore::new(), true);
        write(&s, |g| {
            for i in 0..3000 {
                g.set(
                    format!("memtier-{i:010}").as_bytes(),
                    b("v"),
                    SetOptions::default(),
                )
                .unwrap();
            }
        });
        let (mut cursor, mut seen, mut steps) = (0u64, BTreeSet::new(), 0);
        loop {
            let (c, keys) = s.scan(cursor, None, 10, None).unwrap();
            steps += 1;
            assert!(keys.len() <= 10, "a reply of {}", keys.len());
            for k in keys {
                assert!(seen.insert(k), "a key came twice in a stable keyspace");
            }
            if c == 0 {
                break;
            }
            cursor = c;
        }
        assert_eq!((seen.len(), steps), (3000, 300));
    }

    /// Keys that agree in every byte a cursor can carry (a 70-byte common prefix: past the
    /// 63 bytes a cursor can skip) get remembered cursors: replies stay at COUNT and every
    /// key comes once. After a restart such a cursor starts over: keys repeat, none is
    /// missed, and the walk ends.
    #[test]
    fn keys_no_cursor_tells_apart_get_remembered_cursors() {
        let ram = RamStore::new();
        let mut s = open(&ram, true);
        let name = |i: u32| format!("{}{i:05}", "x".repeat(70));
        write(&s, |g| {
            for i in 0..3000 {
                g.set(name(i).as_bytes(), b("v"), SetOptions::default())
                    .unwrap();
            }
        });
        let (mut cursor, mut seen, mut steps) = (0u64, BTreeSet::new(), 0);
        loop {
            let (c, keys) = s.scan(cursor, None, 10, None).unwrap();
            steps += 1;
            assert!(
                keys.len() <= 10,
                "a reply of {} at step {steps}, cursor {cursor:x} -> {c:x}",
                keys.len()
            );
            for k in keys {
                assert!(seen.insert(k), "a key came twice in a stable keyspace");
            }
            if c == 0 {
                break;
            }
            assert_ne!(c & (1 << 61), 0, "a stateless cursor cannot resume here");
            cursor = c;
            if steps == 150 {
                // Half way: a restart forgets the cursor, which then starts over.
                s.into_engine().close().unwrap();
                s = open(&ram, false);
                seen.clear();
            }
        }
        assert_eq!(seen.len(), 3000);
    }
}
