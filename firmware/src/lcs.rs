//! LCS: the longest common subsequence of two strings, by the same dynamic program as
//! redis-server (a table of `(|a|+1) x (|b|+1)` lengths, then a walk back from the end), so
//! that the string it picks among equally long ones, and the ranges IDX reports, are
//! Redis's byte for byte.

use bytes::Bytes;
use kvproto::command::types::LcsOptions;
use kvproto::limits::DEFAULT_MAX_BULK_LEN;
use kvproto::Reply;

/// Most bytes the table may take: Redis bounds it by `proto-max-bulk-len` (default
/// 512 MB); the drive uses that default.
const MAX_TABLE_BYTES: u64 = DEFAULT_MAX_BULK_LEN as u64;

/// LCS's reply for strings `a` and `b` (missing keys read as empty).
pub fn reply(a: &[u8], b: &[u8], o: LcsOptions) -> Reply {
    let (alen, blen) = (a.len(), b.len());
    if u32::try_from(alen).map_or(true, |n| n >= u32::MAX - 1)
        || u32::try_from(blen).map_or(true, |n| n >= u32::MAX - 1)
    {
        return Reply::error("ERR String too long for LCS");
    }
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells.saturating_mul(4) > MAX_TABLE_BYTES {
        return Reply::error(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    let width = blen + 1;
    // Both lengths fit in u32 and the table in MAX_TABLE_BYTES, so the casts below hold.
    let mut t = vec![0u32; (alen + 1) * width];
    for i in 1..=alen {
        for j in 1..=blen {
            t[i * width + j] = if a[i - 1] == b[j - 1] {
                t[(i - 1) * width + j - 1] + 1
            } else {
                t[(i - 1) * width + j].max(t[i * width + j - 1])
            };
        }
    }
    let total = t[alen * width + blen];
    if o.len {
        return Reply::Integer(i64::from(total));
    }
    // Walk back from the end, collecting the string and the contiguous ranges.
    let mut out = vec![0u8; total as usize];
    let mut matches = Vec::new();
    let (mut i, mut j, mut k) = (alen, blen, total as usize);
    // The open range: (a_start, a_end, b_start, b_end); `None` between ranges.
    let mut open: Option<(usize, usize, usize, usize)> = None;
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            out[k - 1] = a[i - 1];
            open = Some(match open {
                None => (i - 1, i - 1, j - 1, j - 1),
                Some((_, ae, _, be)) => (i - 1, ae, j - 1, be),
            });
            // A match at the first byte of either string ends the walk.
            if i == 1 || j == 1 {
                emit = true;
            }
            k -= 1;
            i -= 1;
            j -= 1;
        } else {
            if t[(i - 1) * width + j] > t[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = open.is_some();
        }
        if let (true, Some((a0, a1, b0, b1))) = (emit, open) {
            let len = (a1 - a0 + 1) as u64;
            if o.min_match_len == 0 || len >= o.min_match_len {
                let range = |x: usize, y: usize| {
                    Reply::Array(vec![Reply::Integer(x as i64), Reply::Integer(y as i64)])
                };
                let mut m = vec![range(a0, a1), range(b0, b1)];
                if o.with_match_len {
                    m.push(Reply::Integer(len as i64));
                }
                matches.push(Reply::Array(m));
            }
            open = None;
        }
    }
    if o.idx {
        return Reply::Map(vec![
            (
                Reply::Bulk(Bytes::from_static(b"matches")),
                Reply::Array(matches),
            ),
            (
                Reply::Bulk(Bytes::from_static(b"len")),
                Reply::Integer(i64::from(total)),
            ),
        ]);
    }
    Reply::Bulk(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn int_pair(r: &Reply) -> (i64, i64) {
        match r {
            Reply::Array(v) => match (&v[0], &v[1]) {
                (Reply::Integer(x), Reply::Integer(y)) => (*x, *y),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_example_of_the_redis_documentation() {
        let (a, b) = (b"ohmytext".as_slice(), b"mynewtext".as_slice());
        assert_eq!(
            reply(a, b, LcsOptions::default()),
            Reply::Bulk(Bytes::from_static(b"mytext"))
        );
        let len = LcsOptions {
            len: true,
            ..LcsOptions::default()
        };
        assert_eq!(reply(a, b, len), Reply::Integer(6));
        let idx = LcsOptions {
            idx: true,
            min_match_len: 4,
            with_match_len: true,
            ..LcsOptions::default()
        };
        let Reply::Map(pairs) = reply(a, b, idx) else {
            panic!("IDX answers a map")
        };
        assert_eq!(pairs[1].1, Reply::Integer(6));
        let Reply::Array(m) = &pairs[0].1 else {
            panic!("matches")
        };
        // Only "text" (4..7 in a, 5..8 in b) is at least 4 long.
        assert_eq!(m.len(), 1);
        let Reply::Array(first) = &m[0] else { panic!() };
        assert_eq!(int_pair(&first[0]), (4, 7));
        assert_eq!(int_pair(&first[1]), (5, 8));
        assert_eq!(first[2], Reply::Integer(4));
    }

    #[test]
    fn empty_and_disjoint_strings() {
        let o = LcsOptions::default();
        assert_eq!(reply(b"", b"abc", o), Reply::Bulk(Bytes::new()));
        assert_eq!(reply(b"abc", b"xyz", o), Reply::Bulk(Bytes::new()));
        assert_eq!(
            reply(b"abc", b"abc", o),
            Reply::Bulk(Bytes::from_static(b"abc"))
        );
    }
}
