//! Replies of the collection commands ([`kvproto::command::Collection`]: sets, lists, and the hash
//! and sorted-set commands added for issue 17), in Redis's reply shapes for RESP2 and RESP3.
//!
//! Reads run over a [`View`]: the applied state ([`crate::store::Store`], on the engine thread or on the
//! network thread for a connection with nothing in flight) or a transaction's group (inside
//! EXEC, so they see its earlier writes). Writes run on the writer thread's [`WriteGroup`].
//! The data model and the walks are in `store::set`, `store::list`, `store::hash_more` and
//! `store::zset_more`; this module only shapes replies.

use bytes::Bytes;
use kvproto::command::types::ScanOf;
use kvproto::command::Collection;
use kvproto::{Protocol, Reply, ZAddOptions};

use crate::keyspace::{self as ks, HASH, HASH_FIELD, SET, SET_MEMBER, ZSET, ZSET_MEMBER};
use crate::store::cursor as scan_cursor;
use crate::store::view::{count_of, holds, walk, View};
use crate::store::{hash_more, list, set, zset_more, Result, StoreError, WriteGroup};

/// Collections up to this size answer a SCAN-family call whole (cursor 0), as redis-server
/// does for its compact encodings.
const SCAN_WHOLE: u64 = 128;

fn err(e: &StoreError) -> Reply {
    Reply::error(e.reply_text())
}

fn bulks(items: Vec<Bytes>) -> Vec<Reply> {
    items.into_iter().map(Reply::Bulk).collect()
}

/// Members with their scores after each (RESP2, or RESP3 without `nested`) or as pairs.
pub(crate) fn scored(
    found: impl IntoIterator<Item = zset_more::Scored>,
    withscores: bool,
    nested: bool,
) -> Reply {
    let found = found.into_iter();
    let mut items = Vec::with_capacity(found.size_hint().0 * 2);
    for (m, s) in found {
        if withscores && nested {
            items.push(Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)]));
        } else {
            items.push(Reply::Bulk(m));
            if withscores {
                items.push(Reply::Double(s));
            }
        }
    }
    Reply::Array(items)
}

/// Runs a reading collection command against `v`.
pub fn read<V: View + ?Sized>(v: &V, cmd: &Collection, proto: Protocol) -> Reply {
    read_result(v, cmd, proto).unwrap_or_else(|e| err(&e))
}

fn read_result<V: View + ?Sized>(v: &V, cmd: &Collection, proto: Protocol) -> Result<Reply> {
    use Collection as C;
    let resp3 = proto == Protocol::Resp3;
    Ok(match cmd {
        C::SMembers(key) => Reply::Set(bulks(set::members(v, key)?)),
        C::SIsMember { key, members, many } => {
            let found = set::contains(v, key, members)?;
            if *many {
                Reply::Array(
                    found
                        .into_iter()
                        .map(|b| Reply::Integer(i64::from(b)))
                        .collect(),
                )
            } else {
                Reply::Integer(i64::from(found.first().copied().unwrap_or(false)))
            }
        }
        C::SCard(key) => Reply::Integer(set::card(v, key)?),
        C::Object { of, key } => crate::object::reply(v, *of, key)?,
        C::ObjectHelp => crate::object::help(),
        C::Lcs { a, b, options } => {
            // Both types first, then the options, as Redis checks them.
            let (ka, kb) = (v.key_kind(a)?, v.key_kind(b)?);
            if [ka, kb].iter().any(|k| k.is_some_and(|k| k != ks::STRING)) {
                return Ok(Reply::error(
                    "ERR The specified keys must contain string values",
                ));
            }
            let o = match kvproto::command::types::LcsOptions::parse(options) {
                Ok(o) => o,
                Err(e) => return Ok(Reply::error(e.to_string())),
            };
            let read = |k: &Bytes, kind: Option<u8>| -> Result<Bytes> {
                Ok(match kind {
                    Some(_) => v.value(&ks::top(ks::STRING, k))?.unwrap_or_default(),
                    None => Bytes::new(),
                })
            };
            crate::lcs::reply(&read(a, ka)?, &read(b, kb)?, o)
        }
        C::SRandMember { key, count: None } => {
            let one = set::random_members(v, key, 1)?.and_then(|m| m.into_iter().next());
            one.map_or(Reply::Null, Reply::Bulk)
        }
        C::SRandMember {
            key,
            count: Some(n),
        } => Reply::Array(bulks(set::random_members(v, key, *n)?.unwrap_or_default())),
        C::SCombine { op, keys } => Reply::Set(bulks(set::combine(v, *op, keys, 0)?)),
        C::SInterCard { keys, limit } => {
            let limit = usize::try_from(*limit).unwrap_or(usize::MAX);
            let n = set::combine(v, kvproto::SetOp::Inter, keys, limit)?.len();
            Reply::Integer(n as i64)
        }
        C::CollScan {
            of,
            key,
            cursor,
            pattern,
            count,
            bad_option,
        } => coll_scan(v, *of, key, *cursor, pattern.as_deref(), *count, bad_option)?,
        C::HKeys(key) => Reply::Array(bulks(hash_more::fields(v, key)?)),
        C::HVals(key) => {
            let names = hash_more::fields(v, key)?;
            let values = hash_more::values_of(v, key, &names)?;
            Reply::Array(values.into_iter().flatten().map(Reply::Bulk).collect())
        }
        C::HStrlen { key, field } => Reply::Integer(hash_more::field_len(v, key, field)?),
        C::HRandField {
            key, count: None, ..
        } => {
            let one = hash_more::random_fields(v, key, 1)?.and_then(|f| f.into_iter().next());
            one.map_or(Reply::Null, Reply::Bulk)
        }
        C::HRandField {
            key,
            count: Some(n),
            withvalues,
        } => {
            let names = hash_more::random_fields(v, key, *n)?.unwrap_or_default();
            if !*withvalues {
                return Ok(Reply::Array(bulks(names)));
            }
            let values = hash_more::values_of(v, key, &names)?;
            let mut items = Vec::with_capacity(names.len() * 2);
            for (f, val) in names.into_iter().zip(values) {
                let val = val.map_or(Reply::Null, Reply::Bulk);
                if resp3 {
                    items.push(Reply::Array(vec![Reply::Bulk(f), val]));
                } else {
                    items.push(Reply::Bulk(f));
                    items.push(val);
                }
            }
            Reply::Array(items)
        }
        C::ZRange {
            key,
            by,
            rev,
            limit,
            withscores,
            ..
        } => scored(
            zset_more::range(v, key, by, *rev, *limit)?,
            *withscores,
            resp3,
        ),
        C::ZRank {
            key,
            member,
            rev,
            withscore,
        } => match (zset_more::rank(v, key, member, *rev)?, withscore) {
            (None, false) => Reply::Null,
            (None, true) => Reply::NullArray,
            (Some((r, _)), false) => Reply::Integer(r),
            (Some((r, s)), true) => Reply::Array(vec![Reply::Integer(r), Reply::Double(s)]),
        },
        C::ZMScore { key, members } => Reply::Array(
            zset_more::scores(v, key, members)?
                .into_iter()
                .map(|s| s.map_or(Reply::Null, Reply::Double))
                .collect(),
        ),
        C::ZCount { key, by } => Reply::Integer(zset_more::count_in(v, key, by)?),
        C::LRange { key, start, stop } => Reply::Array(bulks(list::range(v, key, *start, *stop)?)),
        C::LLen(key) => Reply::Integer(list::len(v, key)?),
        C::LPos {
            key,
            element,
            rank,
            count,
            maxlen,
        } => {
            let found = list::positions(v, key, element, *rank, count.unwrap_or(1), *maxlen)?;
            match (found, count) {
                (None, None) => Reply::Null,
                (None, Some(_)) => Reply::Array(Vec::new()),
                (Some(p), None) => p.first().map_or(Reply::Null, |&i| Reply::Integer(i)),
                (Some(p), Some(_)) => Reply::Array(p.into_iter().map(Reply::Integer).collect()),
            }
        }
        C::LIndex { key, index } => list::index(v, key, *index)?.map_or(Reply::Null, Reply::Bulk),
        other => Reply::error(format!(
            "ERR internal: '{}' was routed to a reading thread",
            other.name()
        )),
    })
}

/// SSCAN, HSCAN and ZSCAN: members in name order (a sorted set's too, not by score, so a
/// score changed during the scan moves nothing), with a stateless cursor (`store::cursor`):
/// valid across reconnects and restarts, and a member present for the whole scan is
/// returned at least once, whatever was added or removed meanwhile. A collection of at
/// most [`SCAN_WHOLE`] members is answered whole. Member names come from DRAM; a hash's
/// values and a sorted set's scores are read for the matching members only.
fn coll_scan<V: View + ?Sized>(
    v: &V,
    of: ScanOf,
    key: &[u8],
    cursor: u64,
    pattern: Option<&[u8]>,
    count: u64,
    bad_option: &Option<kvproto::CommandError>,
) -> Result<Reply> {
    let (tag, sub) = match of {
        ScanOf::Set => (SET, SET_MEMBER),
        ScanOf::Hash => (HASH, HASH_FIELD),
        ScanOf::ZSet => (ZSET, ZSET_MEMBER),
    };
    let empty = || {
        Reply::Array(vec![
            Reply::Bulk(Bytes::from_static(b"0")),
            Reply::Array(Vec::new()),
        ])
    };
    if !holds(v, key, tag)? {
        return Ok(empty());
    }
    if let Some(e) = bad_option {
        return Err(StoreError::Refused(e.0.clone()));
    }
    let whole = cursor == 0 && count_of(v, tag, key)? <= SCAN_WHOLE;
    let prefix = ks::sub_prefix(sub, key);
    let mut bounds = scan_cursor::cached(|head: &[u8]| member_bounds(v, &prefix, head));
    let mut start = prefix.clone();
    start.extend_from_slice(&scan_cursor::resume_key(
        cursor,
        &prefix,
        v.remembered(),
        &mut bounds,
    )?);
    let matches = |m: &[u8]| pattern.is_none_or(|p| kvproto::glob::glob_match(p, m));
    let mut names = Vec::new();
    let mut end = scan_cursor::StepEnd::new(if whole {
        usize::MAX
    } else {
        usize::try_from(count).unwrap_or(usize::MAX)
    });
    let mut next = 0u64;
    let mut failed = None;
    walk(v, &prefix, Some(start), |k| {
        let m = k.get(prefix.len()..).unwrap_or_default();
        match end.before(m, names.len(), &mut bounds) {
            Ok(scan_cursor::Verdict::Visit) => {}
            Ok(scan_cursor::Verdict::Stop(c)) => {
                next = c;
                return Ok(false);
            }
            Ok(scan_cursor::Verdict::Remember { keep, at }) => {
                names.truncate(keep);
                next = v.remembered().remember(&prefix, &at);
                return Ok(false);
            }
            Err(e) => {
                failed = Some(e);
                return Ok(false);
            }
        }
        end.visited(m);
        if matches(m) {
            names.push(Bytes::copy_from_slice(m));
        }
        Ok(true)
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    if next == 0 {
        if let Some((keep, at)) = end.at_end() {
            names.truncate(keep);
            next = v.remembered().remember(&prefix, &at);
        }
    }
    let mut items = Vec::new();
    match of {
        ScanOf::Set => items.extend(names.into_iter().map(Reply::Bulk)),
        ScanOf::Hash => {
            let values = hash_more::values_of(v, key, &names)?;
            for (f, val) in names.into_iter().zip(values) {
                items.push(Reply::Bulk(f));
                items.push(val.map_or(Reply::Null, Reply::Bulk));
            }
        }
        ScanOf::ZSet => {
            let scores = zset_more::scores(v, key, &names)?;
            for (member, score) in names.into_iter().zip(scores) {
                // A member removed between the walk and the read is left out.
                if let Some(score) = score {
                    items.push(Reply::Bulk(member));
                    items.push(Reply::Bulk(Bytes::from(kvproto::reply::format_double(
                        score,
                    ))));
                }
            }
        }
    }
    Ok(Reply::Array(vec![
        Reply::Bulk(Bytes::from(next.to_string())),
        Reply::Array(items),
    ]))
}

/// The first live member of the collection under `prefix` that starts with `head`, and an
/// upper bound of every such member (`store::cursor`'s bounds); `None` when there is none.
fn member_bounds<V: View + ?Sized>(
    v: &V,
    prefix: &[u8],
    head: &[u8],
) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let start = [prefix, head].concat();
    let end = ks::prefix_end(&start);
    let name = |k: &[u8]| k.get(prefix.len()..).unwrap_or_default().to_vec();
    Ok(v.range_bounds(&start, end.as_deref())?
        .map(|(first, last)| (name(&first), name(&last))))
}

/// A blocking command (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN, BZPOPMAX, BLMPOP,
/// BZMPOP; LMPOP and ZMPOP are their non-blocking forms) run without waiting against the
/// group: `Some(reply)` when it has its answer now (an item, or an
/// error such as WRONGTYPE), `None` when every list (sorted set) it waits on is missing and
/// it would block. Keys are
/// tried in argument order, as Redis does: the first non-empty one answers, and a key of
/// another type met before it is a WRONGTYPE error. The caller purges the command's
/// expired keys first ([`WriteGroup::purge_expired`]).
pub fn try_unblocked(g: &mut WriteGroup<'_>, cmd: &Collection) -> Option<Reply> {
    let mut attempt = || -> Result<Option<Reply>> {
        match cmd {
            Collection::BPop { keys, left, .. } => {
                for key in keys {
                    if let Some(v) = g.list_pop(key, *left, 1)?.and_then(|mut p| p.pop()) {
                        return Ok(Some(Reply::Array(vec![
                            Reply::Bulk(key.clone()),
                            Reply::Bulk(v),
                        ])));
                    }
                }
                Ok(None)
            }
            Collection::BZPop { keys, max, .. } => {
                for key in keys {
                    if let Some((member, score)) = g.zset_pop(key, *max, 1)?.into_iter().next() {
                        return Ok(Some(Reply::Array(vec![
                            Reply::Bulk(key.clone()),
                            Reply::Bulk(member),
                            Reply::Double(score),
                        ])));
                    }
                }
                Ok(None)
            }
            Collection::BLMove {
                src,
                dst,
                from_left,
                to_left,
                ..
            } => Ok(g
                .list_move(src, dst, *from_left, *to_left)?
                .map(Reply::Bulk)),
            Collection::MPop {
                keys, left, count, ..
            } => {
                for key in keys {
                    let items = g.list_pop(key, *left, *count)?.unwrap_or_default();
                    if !items.is_empty() {
                        return Ok(Some(Reply::Array(vec![
                            Reply::Bulk(key.clone()),
                            Reply::Array(bulks(items)),
                        ])));
                    }
                }
                Ok(None)
            }
            Collection::ZMPop {
                keys, max, count, ..
            } => {
                for key in keys {
                    let found = g.zset_pop(key, *max, *count)?;
                    if !found.is_empty() {
                        return Ok(Some(Reply::Array(vec![
                            Reply::Bulk(key.clone()),
                            scored(found, true, true),
                        ])));
                    }
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    };
    attempt().unwrap_or_else(|e| Some(err(&e)))
}

/// Applies a writing collection command to the group; its reply (sent once committed).
pub fn write(g: &mut WriteGroup<'_>, cmd: &Collection, proto: Protocol) -> Reply {
    write_result(g, cmd, proto).unwrap_or_else(|e| err(&e))
}

fn write_result(g: &mut WriteGroup<'_>, cmd: &Collection, proto: Protocol) -> Result<Reply> {
    use Collection as C;
    let resp3 = proto == Protocol::Resp3;
    Ok(match cmd {
        C::SAdd { key, members } => Reply::Integer(g.set_add(key, members)?),
        C::SRem { key, members } => Reply::Integer(g.set_remove(key, members)?),
        C::SPop { key, count: None } => {
            let one = g.set_pop(key, 1)?.and_then(|m| m.into_iter().next());
            one.map_or(Reply::Null, Reply::Bulk)
        }
        C::SPop {
            key,
            count: Some(n),
        } => Reply::Set(bulks(g.set_pop(key, *n)?.unwrap_or_default())),
        C::SCombineStore { op, dst, keys } => Reply::Integer(g.set_store(dst, *op, keys)?),
        C::SMove { src, dst, member } => Reply::Integer(i64::from(g.set_move(src, dst, member)?)),
        C::HIncrBy { key, field, delta } => Reply::Integer(g.hash_incr_by(key, field, *delta)?),
        C::HIncrByFloat { key, field, delta } => {
            Reply::Bulk(g.hash_incr_by_float(key, field, delta)?)
        }
        C::HSetNx { key, field, value } => {
            Reply::Integer(i64::from(g.hash_set_nx(key, field, value)?))
        }
        C::ZIncrBy { key, delta, member } => {
            let o = ZAddOptions {
                incr: true,
                ..ZAddOptions::default()
            };
            let out = g.zadd(key, &o, &[(*delta, member.clone())])?;
            out.score.map_or(Reply::Null, Reply::Double)
        }
        C::ZPop { key, max, count } => {
            let popped = g.zset_pop(key, *max, count.unwrap_or(1))?;
            scored(popped, true, resp3 && count.is_some())
        }
        C::ZRemRange { key, by, .. } => Reply::Integer(g.zset_remove_range(key, by)?),
        C::Push {
            key,
            values,
            left,
            only_existing,
            ..
        } => Reply::Integer(g.list_push(key, values, *left, *only_existing)?),
        C::Pop {
            key,
            left,
            count: None,
        } => {
            let one = g.list_pop(key, *left, 1)?.and_then(|mut p| p.pop());
            one.map_or(Reply::Null, Reply::Bulk)
        }
        C::Pop {
            key,
            left,
            count: Some(n),
        } => match g.list_pop(key, *left, *n)? {
            None => Reply::NullArray,
            Some(items) => Reply::Array(bulks(items)),
        },
        C::LSet { key, index, value } => {
            g.list_set(key, *index, value)?;
            Reply::ok()
        }
        C::LRem { key, count, value } => Reply::Integer(g.list_remove(key, *count, value)?),
        C::LTrim { key, start, stop } => {
            g.list_trim(key, *start, *stop)?;
            Reply::ok()
        }
        C::LInsert {
            key,
            before,
            pivot,
            value,
        } => Reply::Integer(g.list_insert(key, *before, pivot, value)?),
        C::LMove {
            src,
            dst,
            from_left,
            to_left,
            ..
        } => g
            .list_move(src, dst, *from_left, *to_left)?
            .map_or(Reply::Null, Reply::Bulk),
        // Inside MULTI a blocking command does not block (Redis): nil when empty.
        // LMPOP and ZMPOP are BLMPOP and BZMPOP that never block.
        C::BPop { .. } | C::BZPop { .. } | C::MPop { .. } | C::ZMPop { .. } => {
            try_unblocked(g, cmd).unwrap_or(Reply::NullArray)
        }
        C::BLMove { .. } => try_unblocked(g, cmd).unwrap_or(Reply::Null),
        other => read(&*g, other, proto),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::BTreeSet;

    use bytes::Bytes;
    use hwftl_sim::RamStore;
    use kvproto::{Reply, ScanOf};

    use super::coll_scan;
    use crate::store::testing::{open, write};
    use crate::store::Store;

    /// One SSCAN/HSCAN/ZSCAN step: the next cursor and the member names.
    fn step(s: &Store, of: ScanOf, key: &[u8], cursor: u64) -> (u64, Vec<Bytes>) {
        let Reply::Array(parts) = coll_scan(s, of, key, cursor, None, 15, &None).unwrap() else {
            panic!("not an array");
        };
        let (Some(Reply::Bulk(c)), Some(Reply::Array(items))) = (parts.first(), parts.get(1))
        else {
            panic!("not a scan reply: {parts:?}");
        };
        let stride = if of == ScanOf::Set { 1 } else { 2 };
        let names = items
            .iter()
            .step_by(stride)
            .map(|r| match r {
                Reply::Bulk(b) => b.clone(),
                other => panic!("not a name: {other:?}"),
            })
            .collect();
        (std::str::from_utf8(c).unwrap().parse().unwrap(), names)
    }

    /// Each collection of 400 members is scanned 15 at a time while, between steps,
    /// members already returned and members not yet returned are removed (and sorted-set
    /// scores change): every member present for the whole scan is returned. A cursor that
    /// counted positions skipped members whenever ones before it were removed.
    #[test]
    fn collection_scans_skip_no_member_that_lives_throughout() {
        let s = open(&RamStore::new(), true);
        let m = |i: u32| Bytes::from(format!("member-{i:04}"));
        for of in [ScanOf::Set, ScanOf::Hash, ScanOf::ZSet] {
            let key = format!("{of:?}").into_bytes();
            write(&s, |g| {
                let names: Vec<Bytes> = (0..400).map(m).collect();
                match of {
                    ScanOf::Set => drop(g.set_add(&key, &names).unwrap()),
                    ScanOf::Hash => {
                        let pairs: Vec<(Bytes, Bytes)> =
                            names.iter().map(|n| (n.clone(), n.clone())).collect();
                        g.hash_set(&key, &pairs).unwrap();
                    }
                    ScanOf::ZSet => {
                        let scored: Vec<(f64, Bytes)> = names
                            .iter()
                            .enumerate()
                            .map(|(i, n)| (i as f64, n.clone()))
                            .collect();
                        g.zadd(&key, &kvproto::ZAddOptions::default(), &scored)
                            .unwrap();
                    }
                }
            });
            let mut stable: BTreeSet<Bytes> = (0..400).map(m).collect();
            let mut seen = BTreeSet::new();
            let (mut cursor, mut steps, mut round) = (0u64, 0, 0u32);
            loop {
                let (c, names) = step(&s, of, &key, cursor);
                seen.extend(names);
                steps += 1;
                assert!(steps < 100, "{of:?}: the scan does not end");
                if c == 0 {
                    break;
                }
                cursor = c;
                round += 1;
                // Remove two members behind the cursor's walk and one ahead of it.
                let doomed = [m(round * 7 % 400), m(round * 13 % 400), m(399 - round)];
                write(&s, |g| match of {
                    ScanOf::Set => drop(g.set_remove(&key, &doomed).unwrap()),
                    ScanOf::Hash => drop(g.hash_del(&key, &doomed).unwrap()),
                    ScanOf::ZSet => {
                        g.zrem(&key, &doomed).unwrap();
                        // A score change moves nothing: members walk by name.
                        let again = [(-f64::from(round), m((round * 31 + 5) % 400))];
                        g.zadd(&key, &kvproto::ZAddOptions::default(), &again)
                            .unwrap();
                    }
                });
                for d in &doomed {
                    stable.remove(d);
                }
            }
            let missed: Vec<&Bytes> = stable.difference(&seen).collect();
            assert!(missed.is_empty(), "{of:?}: missed {missed:?}");
        }
    }
}
