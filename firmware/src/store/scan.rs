//! Walks of the whole keyspace: SCAN (cursors remembered on the drive), KEYS and DBSIZE.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{now_ms, Result, Store, StoreError, DELETE_CHUNK};
use crate::keyspace as ks;

/// Scan cursors remembered at once (the oldest is forgotten first).
const MAX_SCAN_CURSORS: usize = 16_384;

/// Position of a SCAN: which top-level range, and the last key returned in it.
#[derive(Debug, Clone)]
pub(super) struct ScanPosition {
    pub(super) tag_index: usize,
    pub(super) after: Option<Vec<u8>>,
}

/// SCAN cursors handed out, by number.
#[derive(Default)]
pub(super) struct Cursors {
    pub(super) next: u64,
    pub(super) by_id: BTreeMap<u64, ScanPosition>,
}

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
        let n = super::count_type_records(&self.db)?;
        self.keys.set(n);
        tracing::info!(keys = n, "key count recomputed after a failed write group");
        Ok(())
    }

    /// Whether `key` has not passed its deadline (as of now), for [`Store::random_key`].
    pub fn is_live(&self, key: &[u8]) -> bool {
        !self.expired(key, now_ms())
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
        let n = match self.keys.get() {
            Some(n) => n,
            None => super::count_type_records(&self.db)?,
        };
        let expired = self.expiries.read().due_count(now) as u64;
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
                if self.expired(user, now) {
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

/// The bytes of a glob pattern before its first special character (every key it matches
/// starts with them).
pub(super) fn literal_prefix(pattern: &[u8]) -> Vec<u8> {
    pattern
        .iter()
        .take_while(|b| !matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .copied()
        .collect()
}
