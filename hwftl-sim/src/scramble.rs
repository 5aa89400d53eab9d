//! The data randomizer: page data is XORed with a fixed pseudo-random pattern on its way to a
//! file backend, as real SSD controllers scramble data. Erased flash there reads as zeroes
//! (punched holes), so after scrambling a written page is told from an erased one with
//! certainty for any data but the pattern itself.

use std::sync::OnceLock;

use crate::geometry::PAGE_SIZE;

fn pattern() -> &'static [u64; PAGE_SIZE / 8] {
    static PATTERN: OnceLock<Box<[u64; PAGE_SIZE / 8]>> = OnceLock::new();
    PATTERN.get_or_init(|| {
        // splitmix64 with a fixed seed: the pattern is part of the on-media format.
        let mut state: u64 = 0x4c69_6768_7453_746f; // "LightSto"
        let mut out = Box::new([0u64; PAGE_SIZE / 8]);
        for w in out.iter_mut() {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            *w = z ^ (z >> 31);
        }
        out
    })
}

/// XORs a page with the pattern; applying it twice restores the page.
pub(crate) fn scramble(page: &mut [u8]) {
    let pat = pattern();
    for (chunk, p) in page.chunks_exact_mut(8).zip(pat.iter()) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_le_bytes(w) ^ p).to_le_bytes());
    }
}

/// True when a raw (still scrambled) page is in the erased state.
pub(crate) fn is_erased(raw: &[u8]) -> bool {
    raw.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scramble_is_an_involution_and_zero_pages_do_not_look_erased() {
        let mut page = vec![0u8; PAGE_SIZE];
        scramble(&mut page);
        assert!(!is_erased(&page));
        scramble(&mut page);
        assert!(is_erased(&page));
    }
}
