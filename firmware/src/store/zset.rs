//! Sorted sets: a header `z`+key (member count), `m` records (member -> score) and `o`
//! records (score order, empty values, so range reads walk DRAM keytables only).

use bytes::Bytes;

use super::{Result, Store, StoreError, WriteGroup, DELETE_CHUNK};
use crate::keyspace::{self as ks, ZSET, ZSET_MEMBER, ZSET_ORDER};

impl Store {
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
}

impl WriteGroup<'_> {
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
        let count_before = count;
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
        // A ZADD that adds no member leaves the count as it was: rewriting it would be a
        // change to WATCH where Redis sees none.
        if count > 0 && count != count_before {
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
        // Nothing removed is no change (no WATCH abort, as Redis).
        if removed > 0 {
            self.write_count(ZSET, key, count);
        }
        Ok(removed)
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
