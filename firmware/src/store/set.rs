//! Sets: a header `t`+key holding the member count (SCARD reads it, O(1)) and one
//! empty-valued `e` record per member ([`crate::keyspace`]), so membership tests and member
//! walks use the DRAM keytables only and a set of millions is walked in chunks, never held.
//!
//! The reads are generic over [`View`] (the applied state on the engine thread, a group's
//! state inside EXEC); the writes are [`WriteGroup`] methods.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::view::{count_of, holds, pick_at, random_names, sub_names, walk, Picker, View};
use super::{Result, WriteGroup};
use crate::keyspace::{self as ks, SET, SET_MEMBER};

pub use kvproto::SetOp;

/// Every member of set `key`, in byte order (empty: no key).
///
/// # Errors
/// `WrongType`, engine errors.
pub fn members<V: View + ?Sized>(v: &V, key: &[u8]) -> Result<Vec<Bytes>> {
    sub_names(v, key, SET, SET_MEMBER)
}

/// SISMEMBER / SMISMEMBER: whether each of `names` is a member.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn contains<V: View + ?Sized>(v: &V, key: &[u8], names: &[Bytes]) -> Result<Vec<bool>> {
    if !holds(v, key, SET)? {
        return Ok(vec![false; names.len()]);
    }
    names
        .iter()
        .map(|m| v.has(&ks::sub(SET_MEMBER, key, m)))
        .collect()
}

/// SCARD.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn card<V: View + ?Sized>(v: &V, key: &[u8]) -> Result<i64> {
    if !holds(v, key, SET)? {
        return Ok(0);
    }
    Ok(count_of(v, SET, key)? as i64)
}

/// SINTER, SUNION, SDIFF (and SINTERCARD with `limit`: stop after that many; 0 = no
/// limit). A missing key is an empty set; any key of another type answers WRONGTYPE.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn combine<V: View + ?Sized>(
    v: &V,
    op: SetOp,
    keys: &[Bytes],
    limit: usize,
) -> Result<Vec<Bytes>> {
    let mut present = Vec::with_capacity(keys.len());
    for k in keys {
        present.push(holds(v, k, SET)?);
    }
    let full = |out: &Vec<Bytes>| limit > 0 && out.len() >= limit;
    let mut out = Vec::new();
    match op {
        SetOp::Inter => {
            if present.iter().any(|p| !p) || keys.is_empty() {
                return Ok(out);
            }
            // Walk the smallest set; test the others' membership from DRAM.
            let mut smallest = 0;
            let mut size = u64::MAX;
            for (i, k) in keys.iter().enumerate() {
                let n = count_of(v, SET, k)?;
                if n < size {
                    (smallest, size) = (i, n);
                }
            }
            let prefix = ks::sub_prefix(SET_MEMBER, &keys[smallest]);
            walk(v, &prefix, None, |mk| {
                let m = &mk[prefix.len()..];
                for (i, k) in keys.iter().enumerate() {
                    if i != smallest && !v.has(&ks::sub(SET_MEMBER, k, m))? {
                        return Ok(true);
                    }
                }
                out.push(Bytes::copy_from_slice(m));
                Ok(!full(&out))
            })?;
        }
        SetOp::Union => {
            let mut all = BTreeSet::new();
            for (k, p) in keys.iter().zip(&present) {
                if *p {
                    all.extend(members(v, k)?);
                }
            }
            out = all.into_iter().collect();
        }
        SetOp::Diff => {
            if !present.first().copied().unwrap_or(false) {
                return Ok(out);
            }
            let prefix = ks::sub_prefix(SET_MEMBER, &keys[0]);
            walk(v, &prefix, None, |mk| {
                let m = &mk[prefix.len()..];
                for (k, p) in keys.iter().zip(&present).skip(1) {
                    if *p && v.has(&ks::sub(SET_MEMBER, k, m))? {
                        return Ok(true);
                    }
                }
                out.push(Bytes::copy_from_slice(m));
                Ok(true)
            })?;
        }
    }
    Ok(out)
}

/// SRANDMEMBER with a count (`None`: the key does not exist): distinct members for a
/// positive count, `|count|` draws with repeats for a negative one.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn random_members<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    count: i64,
) -> Result<Option<Vec<Bytes>>> {
    random_names(v, SET, SET_MEMBER, key, count)
}

impl WriteGroup<'_> {
    /// SADD: how many members were new.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn set_add(&mut self, key: &[u8], names: &[Bytes]) -> Result<i64> {
        let existed = holds(self, key, SET)?;
        let mut count = if existed {
            count_of(self, SET, key)?
        } else {
            0
        };
        let mut added = 0;
        for m in names {
            let mk = ks::sub(SET_MEMBER, key, m);
            // A new set has no members in the engine: only this group's writes can hold one.
            let present = if existed {
                self.present(&mk)?
            } else {
                self.overlay.get(&mk).is_some_and(Option::is_some)
            };
            if !present {
                self.put(mk, Bytes::new());
                added += 1;
                count += 1;
            }
        }
        if added > 0 || !existed {
            self.write_count(SET, key, count);
        }
        Ok(added)
    }

    /// SREM: how many members were removed (the key goes with its last member).
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn set_remove(&mut self, key: &[u8], names: &[Bytes]) -> Result<i64> {
        if !holds(self, key, SET)? {
            return Ok(0);
        }
        let mut count = count_of(self, SET, key)?;
        let mut removed = 0;
        for m in names {
            let mk = ks::sub(SET_MEMBER, key, m);
            if self.present(&mk)? {
                self.del(mk);
                removed += 1;
                count = count.saturating_sub(1);
            }
        }
        if removed > 0 {
            self.write_count(SET, key, count);
        }
        Ok(removed)
    }

    /// SPOP: up to `count` random distinct members removed (`None` count: one). `None`:
    /// the key does not exist.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn set_pop(&mut self, key: &[u8], count: u64) -> Result<Option<Vec<Bytes>>> {
        if !holds(self, key, SET)? {
            return Ok(None);
        }
        let n = count_of(self, SET, key)?;
        let prefix = ks::sub_prefix(SET_MEMBER, key);
        let picked = if count >= n {
            members(self, key)?
        } else {
            let positions = Picker::new().distinct(count, n);
            pick_at(self, &prefix, &positions)?
        };
        let mut left = n;
        for m in &picked {
            self.del(ks::sub(SET_MEMBER, key, m));
            left = left.saturating_sub(1);
        }
        // SPOP key 0 pops nothing and changes nothing.
        if !picked.is_empty() {
            self.write_count(SET, key, left);
        }
        Ok(Some(picked))
    }

    /// SMOVE: whether `member` moved from `src` to `dst`.
    ///
    /// # Errors
    /// `WrongType` (either key of another type), engine errors.
    pub fn set_move(&mut self, src: &[u8], dst: &[u8], member: &Bytes) -> Result<bool> {
        if !holds(self, src, SET)? {
            return Ok(false);
        }
        holds(self, dst, SET)?;
        let mk = ks::sub(SET_MEMBER, src, member);
        if src == dst {
            return self.present(&mk);
        }
        if self.set_remove(src, std::slice::from_ref(member))? == 0 {
            return Ok(false);
        }
        self.set_add(dst, std::slice::from_ref(member))?;
        Ok(true)
    }

    /// SINTERSTORE / SUNIONSTORE / SDIFFSTORE: `dst` replaced (whatever its type) by the
    /// result; its size. An empty result deletes `dst`.
    ///
    /// # Errors
    /// `WrongType` (a source of another type), engine errors.
    pub fn set_store(&mut self, dst: &[u8], op: SetOp, keys: &[Bytes]) -> Result<i64> {
        let result = combine(self, op, keys, 0)?;
        self.remove_any(dst)?;
        if result.is_empty() {
            return Ok(0);
        }
        for m in &result {
            self.put(ks::sub(SET_MEMBER, dst, m), Bytes::new());
        }
        self.write_count(SET, dst, result.len() as u64);
        Ok(result.len() as i64)
    }
}
