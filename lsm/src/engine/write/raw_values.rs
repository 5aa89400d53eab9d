//! Raw values' device pages and checksums, made before the write lock is taken.
//!
//! A put whose value does not fit a packed page writes the value as raw pages after its
//! record (an `Indirect` record holds the first page and the value's crc32c). Those pages and
//! that checksum depend on the value's bytes alone, not on where the layout puts them, so a
//! writer makes them ([`RawValues::prepare`]) before it takes the write lock, and the holder
//! only places them. Made under the lock, the checksum and the copy into the pages were 23%
//! of the lock's hold in a profile of the in-process 8 KiB SET (`perf`, `build_batch`:
//! `crc32c` 4.2% and `PageBuf::from_slice` 3.4% of the writers' samples, the hold 33%), and
//! the write lock is what bounds how fast writers go (see docs/ARCHITECTURE.md,
//! *Concurrency*). Made before it, paired in-process plp runs wrote 8 KiB values 1.095x
//! (S-SET) and 1.065x (R-SET) as fast, medians of 14 pairs
//! (`benches/results/raw-values-2026-12-01`).
//!
//! Why a prepared value cannot be placed for another: [`Prepared`] pairs each one with the
//! very slice it was made from (a borrow of the batch being laid out), and the layout takes
//! one only for that slice (same address and length, [`Prepared::take`]). A value with no
//! prepared pages (another caller's batch, garbage collection's moves) is made under the
//! lock as before, so nothing depends on every writer preparing.

use hwftl_sim::{Geometry, PageBuf, PAGE_SIZE};

use super::super::Inner;
use crate::vlog_format::{fits_inline, is_long_key};
use crate::WriteOp;

/// One raw value's pages, in order, and its crc32c.
pub(in crate::engine) struct RawValue {
    /// The value's length (a pairing check: the pages were made from this many bytes).
    len: usize,
    pub(in crate::engine) crc: u32,
    pub(in crate::engine) pages: Vec<PageBuf>,
}

impl RawValue {
    /// The pages of `v` (zero-padded to whole pages; an empty value still takes one) and its
    /// checksum.
    pub(in crate::engine) fn of(v: &[u8]) -> RawValue {
        let mut pages: Vec<PageBuf> = v.chunks(PAGE_SIZE).map(PageBuf::from_slice).collect();
        if pages.is_empty() {
            pages.push(PageBuf::zeroed());
        }
        RawValue {
            len: v.len(),
            crc: crc32c::crc32c(v),
            pages,
        }
    }
}

/// Whether the layout writes this put's value as raw pages behind an `Indirect` record
/// (the last case of `Inner::build_batch`: not spanning segments, not a long key, not
/// packed).
fn is_raw_put(key: &[u8], value: &[u8], g: &Geometry) -> bool {
    !is_long_key(key.len())
        && !fits_inline(key.len(), value.len())
        && Inner::put_raw_pages(key.len(), value.len()) <= u64::from(g.pages_per_segment() - 1)
}

/// The raw values of a batch's puts, in the batch's order.
#[derive(Default)]
pub(in crate::engine) struct RawValues(Vec<RawValue>);

impl RawValues {
    /// Makes the pages of every raw value in `ops` (an expanded batch: no `PutUntil`).
    pub(in crate::engine) fn prepare(ops: &[WriteOp<'_>], g: &Geometry) -> RawValues {
        RawValues(
            ops.iter()
                .filter_map(|op| match *op {
                    WriteOp::Put(k, v) if is_raw_put(k, v, g) => Some(RawValue::of(v)),
                    _ => None,
                })
                .collect(),
        )
    }

    /// Appends another batch's, for a group written as one batch (its ops after these).
    pub(in crate::engine) fn append(&mut self, mut other: RawValues) {
        self.0.append(&mut other.0);
    }
}

/// Prepared raw values paired with the slices of the batch they were made from, for the
/// layout to take ([`Prepared::take`]).
pub(in crate::engine) struct Prepared<'a> {
    entries: Vec<(&'a [u8], Option<RawValue>)>,
    /// Entries before this one were taken or passed.
    next: usize,
}

impl<'a> Prepared<'a> {
    /// Nothing prepared: the layout makes every raw value itself.
    pub(in crate::engine) fn none() -> Prepared<'a> {
        Prepared {
            entries: Vec::new(),
            next: 0,
        }
    }

    /// Pairs `raws` with the raw values of `ops`, in order: `raws` must have been prepared
    /// from a batch of the same operations in the same order (this batch, a copy of it, or
    /// batches whose concatenation it is). A length that disagrees ends the pairing there
    /// (what is left is made under the lock).
    pub(in crate::engine) fn pair(ops: &[WriteOp<'a>], raws: RawValues, g: &Geometry) -> Self {
        let mut raws = raws.0.into_iter();
        let mut entries = Vec::new();
        for op in ops {
            if let WriteOp::Put(k, v) = *op {
                if is_raw_put(k, v, g) {
                    match raws.next() {
                        Some(r) if r.len == v.len() => entries.push((v, Some(r))),
                        _ => break,
                    }
                }
            }
        }
        Prepared { entries, next: 0 }
    }

    /// The pages prepared from `v` itself (the same slice: address and length), if any.
    pub(in crate::engine) fn take(&mut self, v: &[u8]) -> Option<RawValue> {
        let at = self
            .entries
            .get(self.next..)?
            .iter()
            .position(|(s, _)| std::ptr::eq(*s, v))?
            + self.next;
        self.next = at + 1;
        self.entries.get_mut(at)?.1.take()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Segments of 64 pages.
    fn geometry() -> Geometry {
        crate::engine::test_device::small_geometry(16)
    }

    #[test]
    fn a_raw_value_is_its_pages_and_checksum() {
        let v: Vec<u8> = (0..PAGE_SIZE + 100).map(|i| (i % 251) as u8).collect();
        let r = RawValue::of(&v);
        assert_eq!(r.crc, crc32c::crc32c(&v));
        assert_eq!(r.pages.len(), 2);
        assert_eq!(&r.pages[0][..], &v[..PAGE_SIZE]);
        assert_eq!(&r.pages[1][..100], &v[PAGE_SIZE..]);
        assert!(r.pages[1][100..].iter().all(|&b| b == 0));
    }

    #[test]
    fn only_the_slice_it_was_made_from_takes_a_prepared_value() {
        let g = geometry();
        let big = vec![7u8; 3 * PAGE_SIZE];
        let twin = big.clone();
        let ops = [
            WriteOp::Put(b"a", &big),
            WriteOp::Put(b"small", b"v"),
            WriteOp::Delete(b"d"),
            WriteOp::Put(b"b", &big),
        ];
        let raws = RawValues::prepare(&ops, &g);
        // Packed values and deletes have none.
        assert_eq!(raws.0.len(), 2);
        let mut prepared = Prepared::pair(&ops, raws, &g);
        // The same bytes elsewhere are not the value it was made from.
        assert!(prepared.take(&twin).is_none());
        assert!(prepared.take(&big[..PAGE_SIZE]).is_none());
        // The value itself, once per put that names it, in order.
        assert!(prepared.take(&big).is_some());
        assert!(prepared.take(&big).is_some());
        assert!(prepared.take(&big).is_none());
    }

    #[test]
    fn pairing_stops_where_the_batches_disagree() {
        let g = geometry();
        let (x, y) = (vec![1u8; 2 * PAGE_SIZE], vec![2u8; 3 * PAGE_SIZE]);
        let made_from = [WriteOp::Put(b"k", &y[..]), WriteOp::Put(b"k", &x[..])];
        let ops = [WriteOp::Put(b"k", &x[..]), WriteOp::Put(b"k", &y[..])];
        // Prepared from another batch: the first length disagrees, nothing is paired.
        let mut prepared = Prepared::pair(&ops, RawValues::prepare(&made_from, &g), &g);
        assert!(prepared.take(&x).is_none());
        assert!(prepared.take(&y).is_none());
        // Prepared from a copy of the batch (as a queued caller's): paired in order.
        let copy = (x.clone(), y.clone());
        let copied = [
            WriteOp::Put(b"k", &copy.0[..]),
            WriteOp::Put(b"k", &copy.1[..]),
        ];
        let mut prepared = Prepared::pair(&ops, RawValues::prepare(&copied, &g), &g);
        assert_eq!(prepared.take(&x).map(|r| r.crc), Some(crc32c::crc32c(&x)));
        assert_eq!(prepared.take(&y).map(|r| r.crc), Some(crc32c::crc32c(&y)));
    }
}
