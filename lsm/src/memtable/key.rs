//! The memtable's copy of a key ([`MemKey`]): held inline when short, so the structures that
//! hold it (the newest-version index's buckets, the tail's nodes, the runs' entries) compare
//! it without following a pointer; shared by all of them when long.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::{key_prefix, KeyPrefix};

/// Keys up to this long are held inline in a [`MemKey`] (40 bytes with its tag and length:
/// the room the shared form, a pointer and a prefix copy, takes anyway). It covers the
/// drive's common shapes: a string key (`s` and the user key) up to 37 bytes, a hash field
/// of YCSB's records (`f`, the key's length, `user` and up to 19 digits, `field0`: 34
/// bytes).
pub const INLINE_KEY: usize = 38;

/// A key as the memtable holds it. A short key is copied inline: a lookup in the
/// newest-version index compares the bytes in the bucket it probes instead of loading a
/// separate allocation (a cache miss per probe: 260 ns per lookup of a 34-byte key in a
/// table of 60K keys when every key was shared, see `probe_cost` in the tests), and merging
/// runs copies it with its entry. A longer key is one shared allocation, however many
/// versions of it the table holds, beside a copy of its [`KeyPrefix`]. Either way the key's
/// prefix words come without loading anything else ([`MemKey::prefix`]), so the entries that
/// hold a `MemKey` keep no copy of their own.
///
/// Hashes, compares and borrows as its bytes, so maps keyed by it are probed with `&[u8]`.
#[derive(Clone)]
pub struct MemKey(Repr);

/// [`MemKey`]'s two forms (private, so an inline key's length is always its own).
#[derive(Clone)]
enum Repr {
    /// A key of at most [`INLINE_KEY`] bytes: its first `len` bytes.
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    /// A longer key, and its first 16 bytes as [`key_prefix`] gives them.
    Shared { prefix: KeyPrefix, key: Arc<[u8]> },
}

impl MemKey {
    /// A copy of `key`.
    pub fn new(key: &[u8]) -> MemKey {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE_KEY => {
                let mut bytes = [0u8; INLINE_KEY];
                bytes[..key.len()].copy_from_slice(key);
                MemKey(Repr::Inline { len, bytes })
            }
            _ => MemKey(Repr::Shared {
                prefix: key_prefix(key),
                key: Arc::from(key),
            }),
        }
    }

    /// Whether the key is held inline.
    #[cfg(test)]
    fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }

    /// Bytes it takes on the heap beside itself: a shared key's allocation (its bytes and
    /// the reference counts), none for an inline one.
    pub fn allocated(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Shared { key, .. } => key.len() + 2 * std::mem::size_of::<usize>(),
        }
    }

    /// The key's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(bytes),
            Repr::Shared { key, .. } => key,
        }
    }

    /// The key's [`KeyPrefix`]: read from the inline bytes (zero-padded, as [`key_prefix`]
    /// pads), or the copy a long key keeps.
    #[inline]
    pub fn prefix(&self) -> KeyPrefix {
        match &self.0 {
            Repr::Inline { bytes, .. } => {
                let word = |at: usize| {
                    let mut w = [0u8; 8];
                    if let Some(b) = bytes.get(at..at + 8) {
                        w.copy_from_slice(b);
                    }
                    u64::from_be_bytes(w)
                };
                [word(0), word(8)]
            }
            Repr::Shared { prefix, .. } => *prefix,
        }
    }
}

impl std::ops::Deref for MemKey {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Borrow<[u8]> for MemKey {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

impl Hash for MemKey {
    // As `[u8]` hashes, which `Borrow<[u8]>` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

impl PartialEq for MemKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for MemKey {}

impl std::fmt::Debug for MemKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.bytes().escape_ascii().to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;

    use super::*;

    fn hash_of<T: Hash + ?Sized>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn a_key_reads_hashes_and_compares_as_its_bytes_in_either_form() {
        for n in [0, 1, INLINE_KEY - 1, INLINE_KEY, INLINE_KEY + 1, 300] {
            let bytes: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let k = MemKey::new(&bytes);
            assert_eq!(k.is_inline(), n <= INLINE_KEY, "{n} bytes");
            assert_eq!(k.bytes(), &bytes[..]);
            assert_eq!(k.prefix(), key_prefix(&bytes));
            assert_eq!(hash_of(&k), hash_of(&bytes[..]));
            assert_eq!(k, MemKey::new(&bytes));
            assert_eq!(k.clone().bytes(), &bytes[..]);
        }
        assert_ne!(
            MemKey::new(b"ab"),
            MemKey::new(b"ab\0"),
            "trailing zeros count"
        );
        assert_eq!(std::mem::size_of::<MemKey>(), INLINE_KEY + 2);
    }
}
