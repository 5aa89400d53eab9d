//! OBJECT: what redis-server 7.2 would report about a key's representation. The drive keeps
//! every type as records in its LSM (see `crate::keyspace`), so ENCODING names the encoding
//! Redis would pick for the same value built afresh by writes (Redis's thresholds at their
//! defaults), from the key's type, its member count and the lengths of its members (from
//! DRAM: no value is read from the device except a string's own, and a collection is walked
//! only when it is small enough for a compact encoding). Redis's encodings also depend on a
//! value's history (APPEND makes a string `raw`, a hash that once grew past 512 fields stays
//! a `hashtable`); the drive keeps no history. REFCOUNT is 2147483647 for the integers Redis
//! shares (0-9999) and 1 otherwise; IDLETIME is 0 (the drive keeps no access times); FREQ
//! answers Redis's error for a server without an LFU eviction policy.

use bytes::Bytes;
use kvproto::command::types::ObjectOf;
use kvproto::Reply;

use crate::keyspace::{
    self as ks, HASH, HASH_FIELD, LIST, LIST_ITEM, SET, SET_MEMBER, STRING, ZSET, ZSET_MEMBER,
};
use crate::store::view::{count_of, walk, View};
use crate::store::{parse_i64, Result};

/// Strings up to this long are `embstr` (`OBJ_ENCODING_EMBSTR_SIZE_LIMIT`).
const EMBSTR_MAX: usize = 44;
/// Integers Redis keeps as shared objects (`OBJ_SHARED_INTEGERS`).
const SHARED_INTEGERS: i64 = 10_000;
/// A shared object's reference count (`OBJ_SHARED_REFCOUNT`).
const SHARED_REFCOUNT: i64 = i32::MAX as i64;
/// `hash-max-listpack-entries`.
const HASH_LISTPACK_ENTRIES: u64 = 512;
/// `zset-max-listpack-entries`, `set-max-listpack-entries`.
const LISTPACK_ENTRIES: u64 = 128;
/// `hash-max-listpack-value`, `zset-max-listpack-value`, `set-max-listpack-value`.
const LISTPACK_VALUE: usize = 64;
/// `set-max-intset-entries`.
const INTSET_ENTRIES: u64 = 512;
/// `list-max-listpack-size -2`: a list is one listpack of at most 8 KiB.
const LIST_LISTPACK_BYTES: usize = 8192;
/// A listpack's header (total bytes, count) and end byte.
const LISTPACK_OVERHEAD: usize = 7;

/// The lines of `OBJECT HELP`, as Redis 7 prints them.
const HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

/// `OBJECT HELP`.
pub fn help() -> Reply {
    Reply::Array(
        HELP.iter()
            .map(|l| Reply::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
    )
}

/// `OBJECT <of> key` against `v`; a missing key answers nil.
///
/// # Errors
/// Engine errors.
pub fn reply<V: View + ?Sized>(v: &V, of: ObjectOf, key: &[u8]) -> Result<Reply> {
    let Some(kind) = v.key_kind(key)? else {
        return Ok(Reply::Null);
    };
    Ok(match of {
        ObjectOf::Encoding => Reply::Bulk(Bytes::from_static(encoding(v, kind, key)?.as_bytes())),
        ObjectOf::RefCount => {
            let shared = kind == STRING
                && v.value(&ks::top(STRING, key))?
                    .and_then(|s| parse_i64(&s))
                    .is_some_and(|n| (0..SHARED_INTEGERS).contains(&n));
            Reply::Integer(if shared { SHARED_REFCOUNT } else { 1 })
        }
        ObjectOf::IdleTime => Reply::Integer(0),
        ObjectOf::Freq => Reply::error(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. \
             Please note that when switching between policies at runtime LRU and LFU data \
             will take some time to adjust.",
        ),
    })
}

/// The encoding Redis 7.2 would give a value of type `kind` stored at `key`.
fn encoding<V: View + ?Sized>(v: &V, kind: u8, key: &[u8]) -> Result<&'static str> {
    Ok(match kind {
        STRING => {
            let s = v.value(&ks::top(STRING, key))?.unwrap_or_default();
            if parse_i64(&s).is_some() {
                "int"
            } else if s.len() <= EMBSTR_MAX {
                "embstr"
            } else {
                "raw"
            }
        }
        HASH => {
            let small = count_of(v, HASH, key)? <= HASH_LISTPACK_ENTRIES
                && every_sub(v, key, HASH_FIELD, |field, len| {
                    field.len() <= LISTPACK_VALUE && len <= LISTPACK_VALUE
                })?;
            if small {
                "listpack"
            } else {
                "hashtable"
            }
        }
        ZSET => {
            let small = count_of(v, ZSET, key)? <= LISTPACK_ENTRIES
                && every_sub(v, key, ZSET_MEMBER, |m, _| m.len() <= LISTPACK_VALUE)?;
            if small {
                "listpack"
            } else {
                "skiplist"
            }
        }
        SET => {
            let n = count_of(v, SET, key)?;
            if n <= INTSET_ENTRIES && every_sub(v, key, SET_MEMBER, |m, _| parse_i64(m).is_some())?
            {
                "intset"
            } else if n <= LISTPACK_ENTRIES
                && every_sub(v, key, SET_MEMBER, |m, _| m.len() <= LISTPACK_VALUE)?
            {
                "listpack"
            } else {
                "hashtable"
            }
        }
        LIST => {
            // Every entry takes at least two bytes: a longer list cannot fit.
            let n = crate::store::list::len(v, key)?;
            let mut bytes = LISTPACK_OVERHEAD;
            let fits = u64::try_from(n).is_ok_and(|n| n <= (LIST_LISTPACK_BYTES / 2) as u64)
                && every_sub(v, key, LIST_ITEM, |_, len| {
                    bytes += listpack_entry_bytes(len);
                    bytes <= LIST_LISTPACK_BYTES
                })?;
            if fits {
                "listpack"
            } else {
                "quicklist"
            }
        }
        _ => "raw",
    })
}

/// Whether `ok(name, value length)` holds for every record of `sub_tag` under `key`
/// (stops at the first that fails). Lengths come from DRAM.
fn every_sub<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    sub_tag: u8,
    mut ok: impl FnMut(&[u8], usize) -> bool,
) -> Result<bool> {
    let prefix = ks::sub_prefix(sub_tag, key);
    let mut all = true;
    walk(v, &prefix, None, |k| {
        let len = v.value_len(k)?.unwrap_or(0);
        all = ok(&k[prefix.len()..], len);
        Ok(all)
    })?;
    Ok(all)
}

/// Bytes a string entry of `len` bytes takes in a listpack: its encoding byte(s), the data
/// and the back-length. (Redis stores small integers more compactly; a list of them fits
/// at least as well as this says.)
fn listpack_entry_bytes(len: usize) -> usize {
    let head = match len {
        0..=63 => 1,
        64..=4095 => 2,
        _ => 5,
    };
    let entry = head + len;
    let back = match entry {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        2_097_152..=268_435_455 => 4,
        _ => 5,
    };
    entry + back
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listpack_entries_grow_with_their_headers() {
        assert_eq!(listpack_entry_bytes(0), 2);
        assert_eq!(listpack_entry_bytes(10), 12);
        assert_eq!(listpack_entry_bytes(100), 103);
        assert_eq!(listpack_entry_bytes(5000), 5007);
    }
}
