//! Telling written pages from erased ones on a file backend. Erased flash there reads as
//! zeroes (punched holes or zeroed ranges), and a client may well write a page of zeroes, so
//! the first 8 bytes of every page are XORed with a fixed 64-bit pattern on the way down and
//! back. Only the one page whose first word equals the pattern and whose other bytes are zero
//! is stored as zeroes — the same odds as a full-page data randomizer, at the cost of one
//! XOR per page.

/// The pattern: part of the on-media format (it spells "LightSto").
const PATTERN: u64 = 0x4c69_6768_7453_746f;

/// XORs the page's first word with the pattern; applying it twice restores the page.
pub(crate) fn scramble(page: &mut [u8]) {
    if let Some(head) = page.first_chunk_mut::<8>() {
        *head = (u64::from_le_bytes(*head) ^ PATTERN).to_le_bytes();
    }
}

/// True when a raw (still scrambled) page is in the erased state.
pub(crate) fn is_erased(raw: &[u8]) -> bool {
    raw.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::PAGE_SIZE;

    #[test]
    fn scramble_is_an_involution_and_zero_pages_do_not_look_erased() {
        let mut page = vec![0u8; PAGE_SIZE];
        scramble(&mut page);
        assert!(!is_erased(&page));
        scramble(&mut page);
        assert!(is_erased(&page));
    }
}
