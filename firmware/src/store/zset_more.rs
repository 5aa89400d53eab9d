//! The sorted-set commands beyond ZADD/ZREM/ZSCORE/ZCARD/ZRANGEBYSCORE: range reads by
//! rank, score or name in either direction (ZRANGE and its older forms), ZRANK, ZMSCORE,
//! ZCOUNT/ZLEXCOUNT over a [`View`], and ZPOPMIN/ZPOPMAX and the ZREMRANGEBY* writes.
//!
//! Every range walks the `o` (score order) records in ascending order from the DRAM
//! keytables, a chunk at a time, holding only the reply. A reverse range is the forward
//! window it mirrors, reversed: by rank it needs the count (the header), by score or name
//! one more walk that counts the range. Rank lookups therefore cost O(rank) key visits in
//! DRAM, not Redis's O(log N).

use bytes::Bytes;
use kvproto::{LexBound, ScoreBound, ZRangeBy};

use super::view::{count_of, holds, rank_window, walk, View};
use super::{Result, WriteGroup};
use crate::keyspace::{self as ks, ZSET, ZSET_MEMBER, ZSET_ORDER};

/// A member and its score.
pub type Scored = (Bytes, f64);

fn above_min(score: f64, min: &ScoreBound) -> bool {
    match *min {
        ScoreBound::NegInf => true,
        ScoreBound::PosInf => false,
        ScoreBound::Inclusive(m) => score >= m,
        ScoreBound::Exclusive(m) => score > m,
    }
}

fn below_max(score: f64, max: &ScoreBound) -> bool {
    match *max {
        ScoreBound::NegInf => false,
        ScoreBound::PosInf => true,
        ScoreBound::Inclusive(m) => score <= m,
        ScoreBound::Exclusive(m) => score < m,
    }
}

fn lex_above_min(m: &[u8], min: &LexBound) -> bool {
    match min {
        LexBound::NegInf => true,
        LexBound::PosInf => false,
        LexBound::Inclusive(b) => m >= &b[..],
        LexBound::Exclusive(b) => m > &b[..],
    }
}

fn lex_below_max(m: &[u8], max: &LexBound) -> bool {
    match max {
        LexBound::NegInf => false,
        LexBound::PosInf => true,
        LexBound::Inclusive(b) => m <= &b[..],
        LexBound::Exclusive(b) => m < &b[..],
    }
}

/// Walks the entries of sorted set `key` in score order from the first one a score range
/// can hold; `f` gets (score, member) and returns `false` to stop.
fn walk_entries<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    from_score: Option<f64>,
    mut f: impl FnMut(f64, &[u8]) -> Result<bool>,
) -> Result<()> {
    let prefix = ks::sub_prefix(ZSET_ORDER, key);
    let start = from_score.map(|s| {
        let mut k = prefix.clone();
        k.extend_from_slice(&ks::sortable_score(s));
        k
    });
    walk(v, &prefix, start, |k| {
        let rest = &k[prefix.len()..];
        let Some(score) = rest
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(ks::score_from_sortable)
        else {
            return Ok(true);
        };
        f(score, &rest[8..])
    })
}

/// Walks the entries a score or name range holds, in ascending order (a rank range is
/// walked by the caller); `f` returns `false` to stop.
fn walk_range<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    by: &ZRangeBy,
    mut f: impl FnMut(f64, &[u8]) -> Result<bool>,
) -> Result<()> {
    match by {
        ZRangeBy::Score(min, max) => {
            let from = match *min {
                ScoreBound::Inclusive(m) | ScoreBound::Exclusive(m) => Some(m),
                _ => None,
            };
            walk_entries(v, key, from, |s, m| {
                if !above_min(s, min) {
                    return Ok(true);
                }
                if !below_max(s, max) {
                    return Ok(false);
                }
                f(s, m)
            })
        }
        ZRangeBy::Lex(min, max) => {
            // As Redis: nothing unless the last member is at or past `min` and the first
            // within `max`; then from the first member at or past `min`, while members stay
            // within `max` (exact when all scores are equal, as ZRANGEBYLEX requires).
            let (mut first, mut last) = (None, None);
            walk_entries(v, key, None, |_, m| {
                if first.is_none() {
                    first = Some(m.to_vec());
                }
                last = Some(m.to_vec());
                Ok(true)
            })?;
            let in_range = first.is_some_and(|f| lex_below_max(&f, max))
                && last.is_some_and(|l| lex_above_min(&l, min));
            if !in_range {
                return Ok(());
            }
            let mut started = false;
            walk_entries(v, key, None, |s, m| {
                if !started {
                    if !lex_above_min(m, min) {
                        return Ok(true);
                    }
                    started = true;
                }
                if !lex_below_max(m, max) {
                    return Ok(false);
                }
                f(s, m)
            })
        }
        ZRangeBy::Rank(..) => Ok(()),
    }
}

/// The entries at forward positions `first ..= last` of the walk of `by` (all entries for
/// a rank range).
fn window<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    by: &ZRangeBy,
    first: u64,
    last: Option<u64>,
) -> Result<Vec<Scored>> {
    let mut out = Vec::new();
    let mut i = 0u64;
    let mut take = |s: f64, m: &[u8]| -> Result<bool> {
        if last.is_some_and(|l| i > l) {
            return Ok(false);
        }
        if i >= first {
            out.push((Bytes::copy_from_slice(m), s));
        }
        i += 1;
        Ok(true)
    };
    match by {
        ZRangeBy::Rank(..) => walk_entries(v, key, None, &mut take)?,
        _ => walk_range(v, key, by, &mut take)?,
    }
    Ok(out)
}

/// ZRANGE and its older forms: the entries `by` selects, highest first when `rev`, after
/// LIMIT's offset and count (score and name ranges only; a negative count: no bound, a
/// negative offset: nothing).
///
/// # Errors
/// `WrongType`, engine errors.
pub fn range<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    by: &ZRangeBy,
    rev: bool,
    limit: Option<(i64, i64)>,
) -> Result<Vec<Scored>> {
    if !holds(v, key, ZSET)? {
        return Ok(Vec::new());
    }
    if let ZRangeBy::Rank(start, stop) = *by {
        let n = count_of(v, ZSET, key)?;
        let Some((a, b)) = rank_window(start, stop, n) else {
            return Ok(Vec::new());
        };
        let (first, last) = if rev { (n - 1 - b, n - 1 - a) } else { (a, b) };
        let mut out = window(v, key, by, first, Some(last))?;
        if rev {
            out.reverse();
        }
        return Ok(out);
    }
    let (offset, count) = match limit {
        Some((o, _)) if o < 0 => return Ok(Vec::new()),
        Some((o, c)) => (o.unsigned_abs(), u64::try_from(c).ok()),
        None => (0, None),
    };
    if count == Some(0) {
        return Ok(Vec::new());
    }
    if !rev {
        let last = count.map(|c| offset.saturating_add(c) - 1);
        return window(v, key, by, offset, last);
    }
    let mut m = 0u64;
    walk_range(v, key, by, |_, _| {
        m += 1;
        Ok(true)
    })?;
    if offset >= m {
        return Ok(Vec::new());
    }
    let end = m - offset;
    let first = count.map_or(0, |c| end.saturating_sub(c));
    let mut out = window(v, key, by, first, Some(end - 1))?;
    out.reverse();
    Ok(out)
}

/// ZCOUNT / ZLEXCOUNT.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn count_in<V: View + ?Sized>(v: &V, key: &[u8], by: &ZRangeBy) -> Result<i64> {
    if !holds(v, key, ZSET)? {
        return Ok(0);
    }
    let mut n = 0i64;
    walk_range(v, key, by, |_, _| {
        n += 1;
        Ok(true)
    })?;
    Ok(n)
}

/// ZRANK / ZREVRANK: the member's rank and score (`None`: no such member or key).
///
/// # Errors
/// `WrongType`, engine errors.
pub fn rank<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    member: &[u8],
    rev: bool,
) -> Result<Option<(i64, f64)>> {
    if !holds(v, key, ZSET)? || !v.has(&ks::sub(ZSET_MEMBER, key, member))? {
        return Ok(None);
    }
    let mut i = 0i64;
    let mut found = None;
    walk_entries(v, key, None, |s, m| {
        if m == member {
            found = Some((i, s));
            return Ok(false);
        }
        i += 1;
        Ok(true)
    })?;
    if rev {
        let n = count_of(v, ZSET, key)? as i64;
        return Ok(found.map(|(r, s)| (n - 1 - r, s)));
    }
    Ok(found)
}

/// ZMSCORE: each member's score.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn scores<V: View + ?Sized>(v: &V, key: &[u8], members: &[Bytes]) -> Result<Vec<Option<f64>>> {
    if !holds(v, key, ZSET)? {
        return Ok(vec![None; members.len()]);
    }
    members
        .iter()
        .map(|m| {
            Ok(v.value(&ks::sub(ZSET_MEMBER, key, m))?
                .and_then(|s| ks::decode_score(&s)))
        })
        .collect()
}

impl WriteGroup<'_> {
    /// Removes entries of sorted set `key` (known to exist with `n` members) and rewrites
    /// its count; the key goes with its last member.
    fn zset_drop(&mut self, key: &[u8], n: u64, entries: &[Scored]) {
        for (m, s) in entries {
            let mut ok = ks::sub_prefix(ZSET_ORDER, key);
            ok.extend_from_slice(&ks::sortable_score(*s));
            ok.extend_from_slice(m);
            self.del(ok);
            self.del(ks::sub(ZSET_MEMBER, key, m));
        }
        if !entries.is_empty() {
            self.write_count(ZSET, key, n.saturating_sub(entries.len() as u64));
        }
    }

    /// ZPOPMIN / ZPOPMAX: up to `count` lowest (highest with `max`) entries removed, in
    /// pop order.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn zset_pop(&mut self, key: &[u8], max: bool, count: u64) -> Result<Vec<Scored>> {
        if !holds(self, key, ZSET)? || count == 0 {
            return Ok(Vec::new());
        }
        let n = count_of(self, ZSET, key)?;
        let last = i64::try_from(count.min(n)).unwrap_or(i64::MAX) - 1;
        let popped = range(self, key, &ZRangeBy::Rank(0, last), max, None)?;
        self.zset_drop(key, n, &popped);
        Ok(popped)
    }

    /// ZREMRANGEBYSCORE / BYRANK / BYLEX: how many entries were removed.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn zset_remove_range(&mut self, key: &[u8], by: &ZRangeBy) -> Result<i64> {
        if !holds(self, key, ZSET)? {
            return Ok(0);
        }
        let n = count_of(self, ZSET, key)?;
        let gone = range(self, key, by, false, None)?;
        self.zset_drop(key, n, &gone);
        Ok(gone.len() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::rank_window;

    #[test]
    fn rank_windows_follow_redis() {
        assert_eq!(rank_window(0, -1, 3), Some((0, 2)));
        assert_eq!(rank_window(-2, -1, 3), Some((1, 2)));
        assert_eq!(rank_window(-100, 1, 3), Some((0, 1)));
        assert_eq!(rank_window(2, 1, 3), None);
        assert_eq!(rank_window(3, 10, 3), None);
        assert_eq!(rank_window(0, -1, 0), None);
        assert_eq!(rank_window(1, 100, 3), Some((1, 2)));
    }
}
