//! How Redis data types map onto the engine's single ordered key space.
//!
//! Every engine key starts with a one-byte tag, so each kind of record lives in its own
//! contiguous key range (SCAN and DBSIZE walk the three "top-level" ranges):
//!
//! | tag | engine key | value |
//! |---|---|---|
//! | `s` | `s` key | the string's bytes, as stored (no header: a GET reads exactly the value) |
//! | `h` | `h` key | hash: field count, u64 LE |
//! | `f` | `f` len(key) u32 BE, key, field | the field's value |
//! | `z` | `z` key | sorted set: member count, u64 LE |
//! | `m` | `m` len(key) u32 BE, key, member | the member's score, f64 LE |
//! | `o` | `o` len(key) u32 BE, key, sortable score (8 bytes BE), member | empty: the score order |
//! | `x` | `x` key | written by older builds only: the deadline of `key`, unix ms u64 LE (moved into the type record's entry at open) |
//! | `t` | `t` key | set: member count, u64 LE |
//! | `e` | `e` len(key) u32 BE, key, member | empty: the member (so set reads walk DRAM keytables only) |
//! | `l` | `l` key | list: item count u64 LE, then the head position and the position after the tail, i64 LE each |
//! | `i` | `i` len(key) u32 BE, key, position (i64 with its sign bit flipped, 8 bytes BE) | the item's value |
//!
//! A list's items sit at consecutive positions `head .. tail`: LPUSH writes `head - 1`,
//! RPUSH `tail`, so pushes and pops at either end touch one item and the header. Removing
//! from the middle (LREM, LINSERT, LSET keeps positions) renumbers the items on one side.
//!
//! The length prefix keeps one key's sub-records contiguous and apart from a longer key
//! that shares its prefix.
//!
//! A key's expiry deadline is not a record: it rides in the keytable entry of its type record
//! (`s`, `h`, `z`, `t` or `l`; see `store::expiry`).

use bytes::Bytes;

/// Tag of string records.
pub const STRING: u8 = b's';
/// Tag of hash headers.
pub const HASH: u8 = b'h';
/// Tag of hash fields.
pub const HASH_FIELD: u8 = b'f';
/// Tag of sorted-set headers.
pub const ZSET: u8 = b'z';
/// Tag of sorted-set member -> score records.
pub const ZSET_MEMBER: u8 = b'm';
/// Tag of sorted-set score-order records.
pub const ZSET_ORDER: u8 = b'o';
/// Tag of the deadline records older builds wrote (see `store::expiry::move_legacy_deadlines`).
pub const EXPIRY: u8 = b'x';
/// Tag of set headers.
pub const SET: u8 = b't';
/// Tag of set member records.
pub const SET_MEMBER: u8 = b'e';
/// Tag of list headers.
pub const LIST: u8 = b'l';
/// Tag of list item records.
pub const LIST_ITEM: u8 = b'i';

/// The tags of user-visible keys, in SCAN order.
pub const TOP_LEVEL: [u8; 5] = [STRING, HASH, ZSET, SET, LIST];

/// The sub-record tags a key of type `kind` owns (removed and renamed with it).
pub fn sub_tags(kind: u8) -> &'static [u8] {
    match kind {
        HASH => &[HASH_FIELD],
        ZSET => &[ZSET_MEMBER, ZSET_ORDER],
        SET => &[SET_MEMBER],
        LIST => &[LIST_ITEM],
        _ => &[],
    }
}

/// The type a sub-record tag belongs to.
pub fn owner_of(sub_tag: u8) -> u8 {
    match sub_tag {
        ZSET_MEMBER | ZSET_ORDER => ZSET,
        SET_MEMBER => SET,
        LIST_ITEM => LIST,
        _ => HASH,
    }
}

/// Position bytes of a list item that sort as the signed positions do.
pub fn list_position(pos: i64) -> [u8; 8] {
    ((pos as u64) ^ (1 << 63)).to_be_bytes()
}

/// Inverse of [`list_position`]; `None` when the bytes are not 8 long.
#[cfg(test)]
pub fn position_from(b: &[u8]) -> Option<i64> {
    let b: [u8; 8] = b.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

/// A list header: (item count, head position, position after the tail).
pub fn decode_list_header(v: &[u8]) -> (u64, i64, i64) {
    let word = |i: usize| {
        v.get(i * 8..i * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    (word(0), word(1) as i64, word(2) as i64)
}

/// Encodes a list header (see [`decode_list_header`]).
pub fn encode_list_header(count: u64, head: i64, tail: i64) -> Vec<u8> {
    let mut v = Vec::with_capacity(24);
    v.extend_from_slice(&count.to_le_bytes());
    v.extend_from_slice(&head.to_le_bytes());
    v.extend_from_slice(&tail.to_le_bytes());
    v
}

/// Redis type of a top-level tag, as TYPE and SCAN TYPE name it.
pub fn type_name(tag: u8) -> &'static str {
    match tag {
        STRING => "string",
        HASH => "hash",
        ZSET => "zset",
        SET => "set",
        LIST => "list",
        _ => "none",
    }
}

/// The five type records a key may have ([`TOP_LEVEL`]'s order), in one allocation: a
/// type lookup on the write path builds them for every command.
pub struct TopKeys {
    buf: Vec<u8>,
    stride: usize,
}

impl TopKeys {
    /// The type records of `key`.
    pub fn new(key: &[u8]) -> TopKeys {
        let stride = 1 + key.len();
        let mut buf = Vec::with_capacity(TOP_LEVEL.len() * stride);
        for tag in TOP_LEVEL {
            buf.push(tag);
            buf.extend_from_slice(key);
        }
        TopKeys { buf, stride }
    }

    /// The type records back to back (each a tag and the key), in [`TOP_LEVEL`]'s order.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Every type record, in [`TOP_LEVEL`]'s order.
    pub fn all(&self) -> [&[u8]; TOP_LEVEL.len()] {
        std::array::from_fn(|i| &self.buf[i * self.stride..(i + 1) * self.stride])
    }
}

/// The type a command (by its lowercase name) works on, when its name says so: the hash
/// commands (`h...`), the sorted-set commands (`z...`), the set and list writes. A hint for
/// the order of type lookups only (`Store::type_entry_hinted`): a wrong or missing answer
/// costs a few lookups more, never a wrong type. Strings need no hint: theirs is the first
/// record probed anyway.
pub fn hinted_type(command: &str) -> Option<u8> {
    match command.as_bytes().first()? {
        b'h' => Some(HASH),
        b'z' => Some(ZSET),
        _ => match command {
            "sadd" | "srem" | "spop" | "smove" | "sinterstore" | "sunionstore" | "sdiffstore" => {
                Some(SET)
            }
            "lpush" | "rpush" | "lpushx" | "rpushx" | "lpop" | "rpop" | "lset" | "linsert"
            | "lrem" | "ltrim" | "lmove" | "rpoplpush" | "blpop" | "brpop" | "blmove"
            | "brpoplpush" | "lmpop" | "blmpop" => Some(LIST),
            _ => None,
        },
    }
}

/// `tag` followed by `key`: the record of a top-level key.
pub fn top(tag: u8, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(tag);
    k.extend_from_slice(key);
    k
}

/// [`top`] appended to `arena`; returns where it lies in it.
pub fn push_top(arena: &mut Vec<u8>, tag: u8, key: &[u8]) -> std::ops::Range<usize> {
    let start = arena.len();
    arena.push(tag);
    arena.extend_from_slice(key);
    start..arena.len()
}

/// The prefix shared by every sub-record of `key` under `tag`.
pub fn sub_prefix(tag: u8, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + key.len());
    k.push(tag);
    // Keys are bounded by the engine's key limit, far below 4 GiB.
    k.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// A sub-record key: the prefix, then `rest`.
pub fn sub(tag: u8, key: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut k = sub_prefix(tag, key);
    k.extend_from_slice(rest);
    k
}

/// The first key after every key that starts with `prefix` (`None`: no such key).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Score bits that sort as the scores do (negative scores flipped entirely, positive ones
/// with the sign bit set).
pub fn sortable_score(score: f64) -> [u8; 8] {
    // -0.0 and 0.0 are the same score.
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    let key = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    key.to_be_bytes()
}

/// Inverse of [`sortable_score`].
pub fn score_from_sortable(b: [u8; 8]) -> f64 {
    let key = u64::from_be_bytes(b);
    let bits = if key >> 63 == 1 {
        key & !(1 << 63)
    } else {
        !key
    };
    f64::from_bits(bits)
}

/// Splits an `o` record key of `key` into (score, member).
pub fn parse_order(prefix_len: usize, k: &[u8]) -> Option<(f64, Bytes)> {
    let rest = k.get(prefix_len..)?;
    let score: [u8; 8] = rest.get(..8)?.try_into().ok()?;
    Some((
        score_from_sortable(score),
        Bytes::copy_from_slice(rest.get(8..)?),
    ))
}

/// A stored count (hash fields, set members); a malformed record counts as zero.
pub fn decode_count(v: &[u8]) -> u64 {
    v.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

/// A stored score; `None` when the record is malformed.
pub fn decode_score(v: &[u8]) -> Option<f64> {
    v.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(f64::from_le_bytes)
}

/// A stored deadline; `None` when the record is malformed.
pub fn decode_deadline(v: &[u8]) -> Option<u64> {
    v.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_sort_as_numbers() {
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -1.0,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            2.5,
            1e300,
            f64::INFINITY,
        ];
        for w in scores.windows(2) {
            assert!(sortable_score(w[0]) < sortable_score(w[1]), "{w:?}");
        }
        for s in scores {
            assert_eq!(score_from_sortable(sortable_score(s)), s);
        }
        assert_eq!(sortable_score(-0.0), sortable_score(0.0));
    }

    #[test]
    fn sub_records_of_a_key_are_contiguous_and_apart_from_longer_keys() {
        let a = sub(HASH_FIELD, b"ab", b"zzz");
        let b = sub(HASH_FIELD, b"abc", b"");
        let p = sub_prefix(HASH_FIELD, b"ab");
        let end = prefix_end(&p);
        assert!(a.starts_with(&p));
        assert!(!b.starts_with(&p));
        assert!(end.as_deref().is_some_and(|e| a.as_slice() < e));
        assert_eq!(prefix_end(&[1, 255, 255]), Some(vec![2]));
        assert_eq!(prefix_end(&[255]), None);
    }

    #[test]
    fn list_positions_sort_as_signed_numbers() {
        let ps = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ps.windows(2) {
            assert!(list_position(w[0]) < list_position(w[1]), "{w:?}");
        }
        for p in ps {
            assert_eq!(position_from(&list_position(p)), Some(p));
        }
        let h = encode_list_header(3, -2, 1);
        assert_eq!(decode_list_header(&h), (3, -2, 1));
    }
}
