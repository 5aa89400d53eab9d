//! Replies of the collection commands ([`kvproto::Collection`]: sets, lists, and the hash
//! and sorted-set commands added for issue 17), in Redis's reply shapes for RESP2 and RESP3.
//!
//! Reads run over a [`View`]: the applied state ([`Store`], on the engine thread or on the
//! network thread for a connection with nothing in flight) or a transaction's group (inside
//! EXEC, so they see its earlier writes). Writes run on the writer thread's [`WriteGroup`].
//! The data model and the walks are in `store::set`, `store::list`, `store::hash_more` and
//! `store::zset_more`; this module only shapes replies.

use bytes::Bytes;
use kvproto::command::types::ScanOf;
use kvproto::command::Collection;
use kvproto::{Protocol, Reply, ZAddOptions};

use crate::keyspace::{self as ks, HASH, HASH_FIELD, SET, SET_MEMBER, ZSET, ZSET_ORDER};
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
fn scored(found: Vec<zset_more::Scored>, withscores: bool, nested: bool) -> Reply {
    let mut items = Vec::with_capacity(found.len() * 2);
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

/// SSCAN, HSCAN and ZSCAN: a cursor that is the position of the next member in the
/// collection's order (stateless: valid across reconnects and restarts; a member removed
/// before the position meanwhile can make one later member be skipped). A collection of
/// at most [`SCAN_WHOLE`] members is answered whole.
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
        ScanOf::ZSet => (ZSET, ZSET_ORDER),
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
    let n = count_of(v, tag, key)?;
    let take = if cursor == 0 && n <= SCAN_WHOLE {
        n
    } else {
        count
    };
    let prefix = ks::sub_prefix(sub, key);
    let mut names = Vec::new();
    let mut i = 0u64;
    let mut more = false;
    walk(v, &prefix, None, |k| {
        if i >= cursor.saturating_add(take) {
            more = true;
            return Ok(false);
        }
        if i >= cursor {
            names.push(Bytes::copy_from_slice(&k[prefix.len()..]));
        }
        i += 1;
        Ok(true)
    })?;
    let next = if more { cursor + take } else { 0 };
    let matches = |m: &[u8]| pattern.is_none_or(|p| kvproto::glob::glob_match(p, m));
    let mut items = Vec::new();
    match of {
        ScanOf::Set => items.extend(names.into_iter().filter(|m| matches(m)).map(Reply::Bulk)),
        ScanOf::Hash => {
            let names: Vec<Bytes> = names.into_iter().filter(|m| matches(m)).collect();
            let values = hash_more::values_of(v, key, &names)?;
            for (f, val) in names.into_iter().zip(values) {
                items.push(Reply::Bulk(f));
                items.push(val.map_or(Reply::Null, Reply::Bulk));
            }
        }
        ScanOf::ZSet => {
            for rest in names {
                let Some((score, member)) = ks::parse_order(0, &rest) else {
                    continue;
                };
                if matches(&member) {
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
