#![allow(clippy::unwrap_used)]

use super::*;

fn raw(i: u32) -> Slot {
    Slot::value(ValuePtr {
        log_seg: i,
        loc: ValueLoc::Raw {
            page: i,
            crc: i ^ 0x5a5a,
        },
        len: 9000 + i,
    })
}

/// The sparse page index and a page search answer as the DRAM run does.
#[test]
fn page_index_and_page_search_agree_with_the_run() {
    let mut b = KeyTableBuilder::new(4);
    let keys: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| format!("key{i:06}").into_bytes())
        .collect();
    for (i, k) in keys.iter().enumerate() {
        b.push(k, &raw(i as u32), None);
    }
    let t = b.finish(0.01);
    let pages = t.encode_pages();
    let index = t.page_index();
    assert!(index.len() > 5);
    for (i, k) in keys.iter().enumerate().step_by(7) {
        let pos = index.partition_point(|(_, first)| first.as_slice() <= k.as_slice()) - 1;
        let (n, _) = index[pos];
        let got = KeyTable::search_page(4, n, &pages[n as usize], k).unwrap();
        assert_eq!(got, Some(raw(i as u32)));
    }
    let (n, _) = index[0];
    assert_eq!(
        KeyTable::search_page(4, n, &pages[n as usize], b"key0000005x").unwrap(),
        None
    );
    assert!(KeyTable::search_page(5, n, &pages[n as usize], b"key").is_err());
}

/// Keys from 1 byte to 70,000 bytes (pages of their own, continued on the next ones,
/// with short entries after them on the same page), some holding small values, survive the
/// pages exactly (65,533, 65,534 and 65,535 are the special `key_len`s: those keys take the
/// long form).
#[test]
fn long_entries_span_pages() {
    let sizes = [
        1usize, 5000, 8100, 8200, 20_000, 65_533, 65_534, 65_535, 65_536, 70_000, 3, 16_360,
    ];
    let mut keys: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut k = vec![b'a' + i as u8; n];
            k[0] = i as u8;
            k
        })
        .collect();
    keys.sort();
    let mut b = KeyTableBuilder::new(9);
    let held = |i: usize| vec![i as u8; 9000 + i];
    for (i, k) in keys.iter().enumerate() {
        let slot = match i % 4 {
            3 => Slot::Tombstone,
            // Held values longer than MAX_HELD_VALUE are not kept: a short one instead.
            1 => Slot::value(ValuePtr {
                log_seg: 1,
                loc: ValueLoc::Inline { page: 2, offset: 3 },
                len: 40,
            }),
            _ => raw(i as u32),
        };
        let v = if i % 4 == 1 {
            vec![i as u8; 40]
        } else {
            held(i)
        };
        b.push(k, &slot, Some(&v));
    }
    let t = b.finish(0.01);
    let pages = t.encode_pages();
    let refs: Vec<&[u8]> = pages.iter().map(Vec::as_slice).collect();
    let back = KeyTable::decode_pages(9, &refs, 0.01).unwrap();
    assert_eq!(back.len(), keys.len());
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(back.key(i), k.as_slice());
        assert_eq!(back.slot(i), t.slot(i));
        let want = (i % 4 == 1).then(|| vec![i as u8; 40]);
        assert_eq!(t.held(i).as_deref(), want.as_deref(), "entry {i}");
        assert_eq!(
            back.held(i).as_deref(),
            want.as_deref(),
            "entry {i} decoded"
        );
    }
    assert_eq!(back.data_bytes(), t.data_bytes());
    // Cut short: the last long entry is missing its end.
    let cut: Vec<&[u8]> = refs[..refs.len() - 1].to_vec();
    assert!(KeyTable::decode_pages(9, &cut, 0.01).is_err() || cut.is_empty());
    // Short keys only: pages as before (no continuation).
    let mut b = KeyTableBuilder::new(1);
    b.push(b"k", &raw(1), None);
    let p = b.finish(0.01).encode_pages();
    assert_eq!(&p[0][20..24], &[0, 0, 0, 0]);
}
