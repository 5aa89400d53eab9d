//! The values a keytable run's entries hold ([`super`]'s *Held values*): small values kept
//! beside their keys in DRAM, in one shared arena.

use bytes::Bytes;

/// The values a run's entries hold (see the module documentation): entry `i` holds one when
/// bit `i % 64` of `bits[i / 64]` is set; it is then the `n`th held value, `n` being
/// `before[i / 64]` plus the set bits below it in its word, and takes `arena[ends[n - 1]..
/// ends[n]]` (from 0 for the first).
#[derive(Default)]
pub(super) struct HeldValues {
    /// One bit per entry, as far as the last entry that holds a value.
    bits: Vec<u64>,
    /// Per word of `bits`: held values in the words before it.
    before: Vec<u32>,
    /// Per held value, in entry order: where it ends in the arena.
    ends: Vec<u32>,
    /// The values back to back (a `Vec` while the run is built; shared once finished, so a
    /// read takes a slice without a copy).
    building: Vec<u8>,
    arena: Bytes,
}

impl HeldValues {
    /// Records that entry `i` (entries are pushed in order) holds `v`; `false` (nothing
    /// recorded) when the arena would pass 4 GiB.
    pub(super) fn push(&mut self, i: usize, v: &[u8]) -> bool {
        let Ok(end) = u32::try_from(self.building.len() + v.len()) else {
            return false;
        };
        let word = i / 64;
        while self.bits.len() <= word {
            self.bits.push(0);
        }
        self.bits[word] |= 1 << (i % 64);
        self.building.extend_from_slice(v);
        self.ends.push(end);
        true
    }

    /// Freezes the arena and counts the values before each word.
    pub(super) fn finish(&mut self) {
        let mut n = 0u32;
        self.before = self
            .bits
            .iter()
            .map(|w| {
                let b = n;
                n += w.count_ones();
                b
            })
            .collect();
        self.bits.shrink_to_fit();
        self.ends.shrink_to_fit();
        // `Bytes::from` keeps a `Vec`'s whole allocation: trim it first, so `dram_bytes`
        // counts what is held.
        self.building.shrink_to_fit();
        self.arena = Bytes::from(std::mem::take(&mut self.building));
    }

    /// The value entry `i` holds.
    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<Bytes> {
        let w = *self.bits.get(i / 64)?;
        let bit = 1u64 << (i % 64);
        if w & bit == 0 {
            return None;
        }
        let n = *self.before.get(i / 64)? as usize + (w & (bit - 1)).count_ones() as usize;
        let start = n
            .checked_sub(1)
            .map_or(Some(0), |m| self.ends.get(m).copied())? as usize;
        let end = *self.ends.get(n)? as usize;
        (start <= end && end <= self.arena.len()).then(|| self.arena.slice(start..end))
    }

    /// How many values are held.
    pub(super) fn count(&self) -> usize {
        self.ends.len()
    }

    /// Their bytes.
    pub(super) fn value_bytes(&self) -> usize {
        self.arena.len().max(self.building.len())
    }

    pub(super) fn dram_bytes(&self) -> usize {
        self.bits.capacity() * 8
            + self.before.capacity() * 4
            + self.ends.capacity() * 4
            + self.value_bytes()
    }
}
