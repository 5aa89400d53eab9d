//! Lists: a header `l`+key (item count, head position, position after the tail) and one
//! `i` record per item under its signed position ([`crate::keyspace`]). Items always sit at
//! the consecutive positions `head .. tail`, so item `i` is at `head + i`: LINDEX, LSET and
//! LRANGE read exactly the records they need; pushes and pops at either end write one item
//! and the header (LPUSH takes `head - 1`, RPUSH `tail`). LTRIM deletes the cut ends without
//! moving anything; LREM and LINSERT renumber the items after the change (O(N), as their
//! Redis counterparts are).

use bytes::Bytes;

use super::view::{holds, rank_window, View};
use super::{Result, StoreError, WriteGroup};
use crate::keyspace::{self as ks, LIST, LIST_ITEM};

/// A list's header: (count, head, tail).
type Header = (u64, i64, i64);

fn item_key(key: &[u8], pos: i64) -> Vec<u8> {
    ks::sub(LIST_ITEM, key, &ks::list_position(pos))
}

fn header<V: View + ?Sized>(v: &V, key: &[u8]) -> Result<Header> {
    Ok(v.value(&ks::top(LIST, key))?
        .map_or((0, 0, 0), |h| ks::decode_list_header(&h)))
}

/// Index `i` (negative from the end) of a list of `n` items, if inside it.
fn index_of(i: i64, n: u64) -> Option<u64> {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let i = if i < 0 { i.saturating_add(n) } else { i };
    (0..n).contains(&i).then(|| i.unsigned_abs())
}

/// LLEN.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn len<V: View + ?Sized>(v: &V, key: &[u8]) -> Result<i64> {
    if !holds(v, key, LIST)? {
        return Ok(0);
    }
    Ok(header(v, key)?.0 as i64)
}

/// LRANGE.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn range<V: View + ?Sized>(v: &V, key: &[u8], start: i64, stop: i64) -> Result<Vec<Bytes>> {
    if !holds(v, key, LIST)? {
        return Ok(Vec::new());
    }
    let (n, head, _) = header(v, key)?;
    let Some((first, last)) = rank_window(start, stop, n) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity((last - first + 1) as usize);
    for i in first..=last {
        if let Some(val) = v.value(&item_key(key, head + i as i64))? {
            out.push(val);
        }
    }
    Ok(out)
}

/// LINDEX.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn index<V: View + ?Sized>(v: &V, key: &[u8], i: i64) -> Result<Option<Bytes>> {
    if !holds(v, key, LIST)? {
        return Ok(None);
    }
    let (n, head, _) = header(v, key)?;
    match index_of(i, n) {
        Some(i) => v.value(&item_key(key, head + i as i64)),
        None => Ok(None),
    }
}

/// LPOS: the indexes of items equal to `element`, from the head (`rank > 0`) or the tail
/// (`rank < 0`), skipping the first `|rank| - 1` matches, at most `count` of them (0: all),
/// looking at most at `maxlen` items (0: all). `None`: no list.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn positions<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    element: &[u8],
    rank: i64,
    count: u64,
    maxlen: u64,
) -> Result<Option<Vec<i64>>> {
    if !holds(v, key, LIST)? {
        return Ok(None);
    }
    let (n, head, _) = header(v, key)?;
    let looked = if maxlen == 0 { n } else { maxlen.min(n) };
    let mut skip = rank.unsigned_abs() - 1;
    let mut out = Vec::new();
    for step in 0..looked {
        let i = if rank > 0 { step } else { n - 1 - step };
        let matches = v
            .value(&item_key(key, head + i as i64))?
            .is_some_and(|val| val[..] == *element);
        if !matches {
            continue;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        out.push(i as i64);
        if count != 0 && out.len() as u64 >= count {
            break;
        }
    }
    Ok(Some(out))
}

impl WriteGroup<'_> {
    fn write_list_header(&mut self, key: &[u8], (n, head, tail): Header) {
        if n == 0 {
            self.del(ks::top(LIST, key));
        } else {
            self.put(
                ks::top(LIST, key),
                Bytes::from(ks::encode_list_header(n, head, tail)),
            );
        }
    }

    /// LPUSH / RPUSH (and the X forms with `only_existing`): the new length (0 when an X
    /// form found no list).
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn list_push(
        &mut self,
        key: &[u8],
        values: &[Bytes],
        left: bool,
        only_existing: bool,
    ) -> Result<i64> {
        let exists = holds(self, key, LIST)?;
        if !exists && only_existing {
            return Ok(0);
        }
        let (mut n, mut head, mut tail) = if exists {
            header(self, key)?
        } else {
            (0, 0, 0)
        };
        for v in values {
            if left {
                head -= 1;
                self.put(item_key(key, head), v.clone());
            } else {
                self.put(item_key(key, tail), v.clone());
                tail += 1;
            }
            n += 1;
        }
        self.write_list_header(key, (n, head, tail));
        Ok(n as i64)
    }

    /// LPOP / RPOP: up to `count` items from one end (`None`: no list).
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn list_pop(&mut self, key: &[u8], left: bool, count: u64) -> Result<Option<Vec<Bytes>>> {
        if !holds(self, key, LIST)? {
            return Ok(None);
        }
        let (mut n, mut head, mut tail) = header(self, key)?;
        let mut out = Vec::new();
        while n > 0 && (out.len() as u64) < count {
            let pos = if left { head } else { tail - 1 };
            let k = item_key(key, pos);
            if let Some(v) = self.read(&k)? {
                out.push(v);
            }
            self.del(k);
            if left {
                head += 1;
            } else {
                tail -= 1;
            }
            n -= 1;
        }
        if !out.is_empty() {
            self.write_list_header(key, (n, head, tail));
        }
        Ok(Some(out))
    }

    /// LSET.
    ///
    /// # Errors
    /// `NoSuchKey`, index out of range, `WrongType`, engine errors.
    pub fn list_set(&mut self, key: &[u8], i: i64, value: &Bytes) -> Result<()> {
        if !holds(self, key, LIST)? {
            return Err(StoreError::NoSuchKey);
        }
        let (n, head, _) = header(self, key)?;
        let i =
            index_of(i, n).ok_or_else(|| StoreError::Refused("ERR index out of range".into()))?;
        self.put(item_key(key, head + i as i64), value.clone());
        Ok(())
    }

    /// LTRIM: keeps ranks `start ..= stop`.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn list_trim(&mut self, key: &[u8], start: i64, stop: i64) -> Result<()> {
        if !holds(self, key, LIST)? {
            return Ok(());
        }
        let (n, head, tail) = header(self, key)?;
        let (first, last) = rank_window(start, stop, n).map_or((0, None), |(f, l)| (f, Some(l)));
        let keep_from = head + first as i64;
        let keep_to = last.map_or(keep_from, |l| head + l as i64 + 1);
        for pos in (head..keep_from).chain(keep_to.max(keep_from)..tail) {
            self.del(item_key(key, pos));
        }
        let kept = (keep_to - keep_from).max(0) as u64;
        self.write_list_header(key, (kept, keep_from, keep_from + kept as i64));
        Ok(())
    }

    /// Rewrites the items from index `from` on as `items` (renumbered from there), dropping
    /// positions the list no longer reaches.
    fn list_rewrite_tail(&mut self, key: &[u8], h: Header, from: u64, items: &[Bytes]) {
        let (_, head, tail) = h;
        let start = head + from as i64;
        for (i, v) in items.iter().enumerate() {
            self.put(item_key(key, start + i as i64), v.clone());
        }
        let new_tail = start + items.len() as i64;
        for pos in new_tail..tail {
            self.del(item_key(key, pos));
        }
        self.write_list_header(key, ((new_tail - head) as u64, head, new_tail));
    }

    /// The values of items `from ..` of the list.
    fn list_items_from(&self, key: &[u8], h: Header, from: u64) -> Result<Vec<Bytes>> {
        let (_, head, tail) = h;
        let mut out = Vec::new();
        for pos in head + from as i64..tail {
            if let Some(v) = self.read(&item_key(key, pos))? {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// LREM: removes up to `|count|` items equal to `value` (from the head for a positive
    /// count, from the tail for a negative one, all for 0); how many.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn list_remove(&mut self, key: &[u8], count: i64, value: &[u8]) -> Result<i64> {
        if !holds(self, key, LIST)? {
            return Ok(0);
        }
        let h = header(self, key)?;
        let mut items = self.list_items_from(key, h, 0)?;
        let limit = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        let mut removed = 0usize;
        if count >= 0 {
            items.retain(|v| {
                let drop = removed < limit && v[..] == *value;
                removed += usize::from(drop);
                !drop
            });
        } else {
            items.reverse();
            items.retain(|v| {
                let drop = removed < limit && v[..] == *value;
                removed += usize::from(drop);
                !drop
            });
            items.reverse();
        }
        if removed > 0 {
            self.list_rewrite_tail(key, h, 0, &items);
        }
        Ok(removed as i64)
    }

    /// LINSERT: the new length, -1 when `pivot` is not in the list, 0 when there is no list.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn list_insert(
        &mut self,
        key: &[u8],
        before: bool,
        pivot: &[u8],
        value: &Bytes,
    ) -> Result<i64> {
        if !holds(self, key, LIST)? {
            return Ok(0);
        }
        let h = header(self, key)?;
        let items = self.list_items_from(key, h, 0)?;
        let Some(at) = items.iter().position(|v| v[..] == *pivot) else {
            return Ok(-1);
        };
        let at = if before { at } else { at + 1 };
        let mut rest = Vec::with_capacity(items.len() - at + 1);
        rest.push(value.clone());
        rest.extend_from_slice(&items[at..]);
        self.list_rewrite_tail(key, h, at as u64, &rest);
        Ok(h.0 as i64 + 1)
    }

    /// LMOVE / RPOPLPUSH: the item moved (`None`: no source list).
    ///
    /// # Errors
    /// `WrongType` (either key), engine errors.
    pub fn list_move(
        &mut self,
        src: &[u8],
        dst: &[u8],
        from_left: bool,
        to_left: bool,
    ) -> Result<Option<Bytes>> {
        if !holds(self, src, LIST)? {
            return Ok(None);
        }
        holds(self, dst, LIST)?;
        // Moving the only item of a list onto itself empties the list for an instant, which
        // would delete its deadline with it: the list keeps it, as in Redis.
        let kept = if src == dst { self.deadline(src) } else { None };
        let Some(v) = self.list_pop(src, from_left, 1)?.and_then(|mut p| p.pop()) else {
            return Ok(None);
        };
        self.list_push(dst, std::slice::from_ref(&v), to_left, false)?;
        if let Some(d) = kept {
            self.set_deadline(dst, super::expiry::DeadlineChange::Set(d));
        }
        Ok(Some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::{index_of, rank_window};

    #[test]
    fn indexes_follow_redis() {
        assert_eq!(index_of(0, 3), Some(0));
        assert_eq!(index_of(-1, 3), Some(2));
        assert_eq!(index_of(3, 3), None);
        assert_eq!(index_of(-4, 3), None);
        assert_eq!(rank_window(0, -1, 3), Some((0, 2)));
        assert_eq!(rank_window(1, 0, 3), None);
        assert_eq!(rank_window(-10, 10, 3), Some((0, 2)));
        assert_eq!(rank_window(0, -1, 0), None);
    }
}
