//! The entry forms of keytable pages: which forms a page may hold by its magic, and how an
//! entry's header, key, slot, deadline and held value are found.

use hwftl_sim::PAGE_SIZE;

use super::{PAGE_HEADER, PAGE_MAGIC, PAGE_MAGIC_V1, PAGE_MAGIC_V2, SLOT_BYTES};
use crate::expiry::Deadline;

/// Bytes of a page's body (after its header).
pub(super) const PAGE_BODY: usize = PAGE_SIZE - PAGE_HEADER;
/// A page entry's `key_len` that means "a `u32` key length follows".
pub(super) const LONG_ENTRY: u16 = u16::MAX;

/// A page entry's `key_len` that means "a deadline and a `u32` key length follow" (pages
/// with [`PAGE_MAGIC_V2`] or [`PAGE_MAGIC`]).
pub(super) const DEADLINE_ENTRY: u16 = u16::MAX - 1;

/// A page entry's `key_len` that means "a deadline, a `u16` value length, a `u32` key length
/// and the value follow" (pages with [`PAGE_MAGIC`] only).
pub(super) const HELD_ENTRY: u16 = u16::MAX - 2;

/// Which entry forms a page may hold, by its magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EntryForm {
    /// [`PAGE_MAGIC_V1`]: short and long entries only.
    V1,
    /// [`PAGE_MAGIC_V2`]: short, long and deadline entries.
    Deadlines,
    /// [`PAGE_MAGIC`]: short, long, deadline and held-value entries.
    Held,
}

impl EntryForm {
    pub(super) fn of_magic(magic: u16) -> Option<EntryForm> {
        match magic {
            PAGE_MAGIC => Some(EntryForm::Held),
            PAGE_MAGIC_V2 => Some(EntryForm::Deadlines),
            PAGE_MAGIC_V1 => Some(EntryForm::V1),
            _ => None,
        }
    }
}

/// The header of a page entry: where its key starts and its length, its deadline, and the
/// place and length of the value it holds (if any).
struct EntryHead {
    key_at: usize,
    key_len: usize,
    deadline: Deadline,
    held: Option<(usize, usize)>,
}

/// The header of the entry starting `b` (the header must be there).
fn entry_head(b: &[u8], form: EntryForm) -> Option<EntryHead> {
    let kl = u16::from_le_bytes([*b.first()?, *b.get(1)?]);
    let u32_at = |i: usize| -> Option<usize> {
        let l = b.get(i..i + 4)?;
        Some(u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize)
    };
    let deadline_at = |i: usize| -> Option<Deadline> {
        let d = b.get(i..i + 8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(d);
        Some(std::num::NonZeroU64::new(u64::from_le_bytes(w)))
    };
    let plain = |key_at: usize, key_len: usize, deadline: Deadline| EntryHead {
        key_at,
        key_len,
        deadline,
        held: None,
    };
    match kl {
        LONG_ENTRY => Some(plain(6, u32_at(2)?, None)),
        DEADLINE_ENTRY if form != EntryForm::V1 => Some(plain(14, u32_at(10)?, deadline_at(2)?)),
        HELD_ENTRY if form == EntryForm::Held => {
            let vl = usize::from(u16::from_le_bytes([*b.get(10)?, *b.get(11)?]));
            Some(EntryHead {
                key_at: 16 + vl,
                key_len: u32_at(12)?,
                deadline: deadline_at(2)?,
                held: Some((16, vl)),
            })
        }
        _ => Some(plain(2, usize::from(kl), None)),
    }
}

/// The length of the page entry starting `b` (its header must be there).
pub(super) fn entry_len(b: &[u8], form: EntryForm) -> Option<usize> {
    let h = entry_head(b, form)?;
    Some(h.key_at + h.key_len + SLOT_BYTES)
}

/// The key of the entry at the start of `b`, as far as it is there (the key of a page's
/// first entry, even if it runs on into the next page).
pub(super) fn entry_key_prefix(b: &[u8], form: EntryForm) -> Option<&[u8]> {
    let h = entry_head(b, form)?;
    b.get(h.key_at..(h.key_at + h.key_len).min(b.len()))
}

/// A whole page entry's parts.
pub(super) struct PageEntry<'a> {
    pub(super) key: &'a [u8],
    pub(super) slot: &'a [u8],
    pub(super) deadline: Deadline,
    pub(super) held: Option<&'a [u8]>,
}

/// Splits a whole page entry.
pub(super) fn split_entry(e: &[u8], form: EntryForm) -> Option<PageEntry<'_>> {
    let h = entry_head(e, form)?;
    if e.len() != h.key_at + h.key_len + SLOT_BYTES {
        return None;
    }
    Some(PageEntry {
        key: &e[h.key_at..h.key_at + h.key_len],
        slot: &e[h.key_at + h.key_len..],
        deadline: h.deadline,
        held: match h.held {
            Some((at, len)) => Some(e.get(at..at + len)?),
            None => None,
        },
    })
}
