use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn ptr(i: u32) -> Slot {
    if i % 3 == 0 {
        Slot::Tombstone
    } else if i % 3 == 1 {
        Slot::value(ValuePtr {
            log_seg: i,
            loc: ValueLoc::Inline {
                page: i * 7 % MAX_INLINE_PAGE,
                offset: (i % 8000) as u16,
            },
            len: i * 3,
        })
    } else {
        Slot::value(ValuePtr {
            log_seg: i,
            loc: ValueLoc::Raw {
                page: i * 11,
                crc: i ^ 0xabcd,
            },
            len: 8192 + i,
        })
    }
}

fn table(n: u32) -> KeyTable {
    let mut b = KeyTableBuilder::new(5);
    for i in 0..n {
        b.push(format!("key{i:08}").as_bytes(), &ptr(i), None);
    }
    b.finish(0.01)
}

fn inline(log_seg: u32, page: u32, offset: u16, len: u32) -> Slot {
    Slot::value(ValuePtr {
        log_seg,
        loc: ValueLoc::Inline { page, offset },
        len,
    })
}

fn raw(log_seg: u32, page: u32, crc: u32, len: u32) -> Slot {
    Slot::value(ValuePtr {
        log_seg,
        loc: ValueLoc::Raw { page, crc },
        len,
    })
}

/// A run of `slots` under keys "k000000", "k000001", ...
fn run_of(slots: &[Slot]) -> KeyTable {
    let mut b = KeyTableBuilder::new(9);
    for (i, s) in slots.iter().enumerate() {
        b.push(format!("k{i:06}").as_bytes(), s, None);
    }
    b.finish(0.01)
}

fn decode(t: &KeyTable) -> KeyTable {
    let pages = t.encode_pages();
    let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
    KeyTable::decode_pages(t.id(), &refs, 0.01).expect("decode")
}

fn shift_of(t: &KeyTable) -> Option<u32> {
    match &t.index {
        KeyIndex::Narrow { shift, .. } => Some(*shift),
        KeyIndex::Wide(_) => None,
    }
}

#[test]
fn lookup_seek_and_slots_round_trip() {
    let t = table(1000);
    assert_eq!(t.len(), 1000);
    for i in [0u32, 1, 2, 500, 999] {
        assert_eq!(t.get(format!("key{i:08}").as_bytes()), Some(ptr(i)));
    }
    assert_eq!(t.get(b"key"), None);
    assert_eq!(t.get(b"zzz"), None);
    assert_eq!(t.seek(b"key00000500"), 500);
    assert_eq!(t.seek(b"a"), 0);
    assert_eq!(t.seek(b"z"), 1000);
    assert!(t.dram_bytes() < 1000 * (11 + 24));
}

#[test]
fn every_narrow_slot_kind_round_trips_exactly() {
    let max_page = MAX_INLINE_PAGE;
    let slots = [
        Slot::Tombstone,
        inline(0, 0, 0, 0),
        inline(u32::MAX, max_page, 8191, u32::MAX - 1),
        inline(7, max_page, 0, 1),
        inline(u32::MAX - 1, 0, 8191, 8144),
        inline(3, 12345, 4321, u32::MAX),
        raw(0, 0, 0, 1),
        raw(u32::MAX, max_page, u32::MAX, MAX_NARROW_RAW_LEN),
        raw(5, max_page, 0, 8193),
        raw(u32::MAX, 1, 0xdead_beef, MAX_NARROW_RAW_LEN - 1),
        Slot::Tombstone,
    ];
    let t = run_of(&slots);
    assert!(t.slots.escaped.is_empty(), "all fit 12 bytes");
    assert_eq!(std::mem::size_of::<DramSlot>(), 12);
    for (i, s) in slots.iter().enumerate() {
        assert_eq!(t.slot(i), *s, "slot {i}");
        assert_eq!(t.get(format!("k{i:06}").as_bytes()), Some(*s));
    }
    // On the device an inline length of u32::MAX reads as a tombstone (the page format);
    // everything else comes back as it went in.
    let back = decode(&t);
    for (i, s) in slots.iter().enumerate() {
        let want = if i == 5 { Slot::Tombstone } else { *s };
        assert_eq!(back.slot(i), want, "slot {i} after the pages");
    }
}

#[test]
fn oversized_fields_escape_and_round_trip_exactly() {
    let slots = [
        inline(1, MAX_INLINE_PAGE + 1, 0, 10),
        inline(1, u32::MAX, u16::MAX, 10),
        inline(1, 0, 8192, 10),
        raw(1, MAX_INLINE_PAGE + 1, 5, 9000),
        raw(1, u32::MAX >> 1, u32::MAX, 9000),
        raw(1, 0, 5, 0),
        raw(1, 0, 5, MAX_NARROW_RAW_LEN + 1),
        raw(u32::MAX, 0, 5, u32::MAX),
        inline(2, 3, 4, 5),
        raw(2, 3, 4, 5),
        Slot::Tombstone,
    ];
    let t = run_of(&slots);
    assert_eq!(t.slots.escaped.len(), 8);
    for (i, s) in slots.iter().enumerate() {
        assert_eq!(t.slot(i), *s, "slot {i}");
        assert_eq!(t.get(format!("k{i:06}").as_bytes()), Some(*s));
    }
    let back = decode(&t);
    for (i, s) in slots.iter().enumerate() {
        // What the page format keeps of it (it clamps inline pages and offsets).
        assert_eq!(
            back.slot(i),
            PackedSlot::pack(s).unpack(s.deadline()),
            "slot {i}"
        );
    }
    assert_eq!(
        back.slot(4),
        slots[4],
        "raw pages below 2^31 survive the pages"
    );
}

#[test]
fn more_than_65536_log_segments_in_a_run() {
    let n = 70_000u32;
    let slots: Vec<Slot> = (0..n)
        .map(|i| {
            let seg = u32::MAX - i * 3;
            if i % 2 == 0 {
                inline(seg, i % 1000, (i % 8000) as u16, i)
            } else {
                raw(seg, i % 1000, i.wrapping_mul(2_654_435_761), 8192 + i)
            }
        })
        .collect();
    let t = run_of(&slots);
    assert_eq!(t.slots.segs.len(), 65536);
    assert_eq!(t.slots.escaped.len(), (n - 65536) as usize);
    for (i, s) in slots.iter().enumerate() {
        assert_eq!(t.slot(i), *s, "slot {i}");
    }
    for i in [0usize, 65535, 65536, 69_999] {
        assert_eq!(t.get(format!("k{i:06}").as_bytes()), Some(slots[i]));
    }
    let back = decode(&t);
    assert_eq!(back.len(), t.len());
    for (i, s) in slots.iter().enumerate() {
        assert_eq!(back.slot(i), *s, "slot {i} after the pages");
        assert_eq!(back.key(i), t.key(i));
    }
    // A segment seen again reuses its dictionary entry.
    let again: Vec<Slot> = (0..1000).map(|i| inline(42, i, 0, 1)).collect();
    let t = run_of(&again);
    assert_eq!(t.slots.segs, vec![42]);
}

#[test]
fn long_keys_shrink_blocks_and_very_long_keys_go_wide() {
    // 64 keys of 2 KiB do not fit a block of 64 under a u16 offset: blocks shrink to 16.
    let mut b = KeyTableBuilder::new(1);
    let keys: Vec<Vec<u8>> = (0..300u32)
        .map(|i| {
            let mut k = format!("{i:05}").into_bytes();
            k.resize(if i % 7 == 0 { 4000 } else { 2048 }, b'x');
            k
        })
        .collect();
    for (i, k) in keys.iter().enumerate() {
        b.push(k, &inline(1, i as u32, 0, 1), None);
    }
    let t = b.finish(0.01);
    assert_eq!(shift_of(&t), Some(4));
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(t.key(i), k.as_slice());
        assert_eq!(t.get(k), Some(inline(1, i as u32, 0, 1)));
        assert_eq!(t.seek(k), i);
    }
    let back = decode(&t);
    assert_eq!(shift_of(&back), Some(4));
    assert!((0..t.len()).all(|i| back.key(i) == t.key(i)));

    // One maximal key: one key per anchor.
    let mut b = KeyTableBuilder::new(1);
    b.push(b"a", &Slot::Tombstone, None);
    b.push(&vec![b'b'; 65535], &Slot::Tombstone, None);
    b.push(b"c", &Slot::Tombstone, None);
    let t = b.finish(0.01);
    assert_eq!(shift_of(&t), Some(0));
    assert_eq!(t.key(1).len(), 65535);
    assert_eq!(t.key(2), b"c");
    assert_eq!(t.seek(b"bb"), 1);

    // A key past u16: plain offsets.
    let mut b = KeyTableBuilder::new(1);
    let big = vec![b'm'; 70_000];
    for i in 0..200u32 {
        let k = format!("a{i:05}");
        b.push(k.as_bytes(), &inline(1, i, 0, 1), None);
    }
    b.push(&big, &inline(2, 0, 0, 2), None);
    b.push(b"z", &inline(3, 0, 0, 3), None);
    let t = b.finish(0.01);
    assert_eq!(shift_of(&t), None);
    assert_eq!(t.len(), 202);
    assert_eq!(t.get(b"a00123"), Some(inline(1, 123, 0, 1)));
    assert_eq!(t.get(&big), Some(inline(2, 0, 0, 2)));
    assert_eq!(t.get(b"z"), Some(inline(3, 0, 0, 3)));
    assert_eq!(t.seek(b"n"), 201);
}

#[test]
fn arena_past_4_gib_goes_wide() {
    // Index only (no arena): 70000 keys of 65535 bytes end past u32::MAX.
    let ends: Vec<usize> = (1..=70_000usize).map(|i| i * 65535).collect();
    let idx = KeyIndex::from_ends(ends.clone(), MAX_BLOCK_SHIFT);
    assert!(matches!(idx, KeyIndex::Wide(_)));
    let mut idx = KeyIndex::new();
    let mut start = 0;
    for (i, &end) in ends.iter().enumerate() {
        idx.push(start, end);
        start = end;
        let narrow = matches!(idx, KeyIndex::Narrow { .. });
        // Narrow while every anchor fits u32 (the last key starting below 2^32 can end
        // past it).
        assert_eq!(narrow, i * 65535 <= u32::MAX as usize, "key {i}");
    }
    for (i, &end) in ends.iter().enumerate() {
        assert_eq!(idx.bounds(i), (i * 65535, end));
    }
    let idx = KeyIndex::from_ends(vec![10, 20, 30], MAX_BLOCK_SHIFT);
    assert!(matches!(idx, KeyIndex::Narrow { shift: 6, .. }));
    assert_eq!(idx.bounds(0), (0, 10));
    assert_eq!(idx.bounds(2), (20, 30));
}

#[test]
fn pages_round_trip_and_detect_damage() {
    let t = table(3000);
    let pages = t.encode_pages();
    assert!(pages.len() > 1);
    let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
    let back = KeyTable::decode_pages(5, &refs, 0.01).expect("decode");
    assert_eq!(back.len(), t.len());
    for i in 0..t.len() {
        assert_eq!(back.key(i), t.key(i));
        assert_eq!(back.slot(i), t.slot(i));
    }
    assert_eq!(back.encode_pages(), pages, "pages are stable");
    let mut bad = pages.clone();
    bad[1][200] ^= 4;
    let refs: Vec<&[u8]> = bad.iter().map(|p| p.as_slice()).collect();
    assert!(KeyTable::decode_pages(5, &refs, 0.01).is_err());
    let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
    assert!(
        KeyTable::decode_pages(6, &refs, 0.01).is_err(),
        "wrong run id"
    );
}

#[test]
fn empty_run_encodes_to_one_page() {
    let t = KeyTableBuilder::new(1).finish(0.01);
    let pages = t.encode_pages();
    assert_eq!(pages.len(), 1);
    let back = KeyTable::decode_pages(1, &[pages[0].as_slice()], 0.01).expect("decode");
    assert!(back.is_empty());
    assert_eq!(back.get(b"x"), None);
    assert_eq!(back.seek(b"x"), 0);
    assert_eq!(back.range(), None);
}

fn edge_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => 0u32..64,
        2 => any::<u32>(),
        1 => Just(u32::MAX),
        1 => (MAX_INLINE_PAGE - 2)..=(MAX_INLINE_PAGE + 2),
        1 => (MAX_NARROW_RAW_LEN - 1)..=(MAX_NARROW_RAW_LEN + 1),
    ]
}

fn any_slot() -> impl Strategy<Value = Slot> {
    prop_oneof![
        1 => Just(Slot::Tombstone),
        2 => (0u32..4, 0u16..8192, 0u32..80, prop_oneof![Just(0u64), 1u64..u64::MAX])
            .prop_map(|(s, o, l, d)| match inline(s, 5, o, l) {
                Slot::Value(p, _) => Slot::Value(p, std::num::NonZeroU64::new(d)),
                t => t,
            }),
        3 => (edge_u32(), edge_u32(), prop_oneof![0u16..8192, any::<u16>()], edge_u32())
            .prop_map(|(s, p, o, l)| inline(s, p, o, l)),
        3 => (edge_u32(), edge_u32(), any::<u32>(), edge_u32())
            .prop_map(|(s, p, c, l)| raw(s, p, c, l)),
    ]
}

fn any_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        10 => proptest::collection::vec(any::<u8>(), 0..24),
        10 => proptest::collection::vec(b'a'..=b'd', 0..8),
        1 => proptest::collection::vec(any::<u8>(), 2000..5000),
    ]
}

/// Keys long enough that blocks of 64 overflow a `u16` offset.
fn long_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(b'a'..=b'c', 0..4),
        proptest::collection::vec(any::<u8>(), 0..6000),
    ]
}

/// The value the model's entry for `k` holds: one of the right length for about half the
/// values of at most 80 bytes.
fn held_of(k: &[u8], s: &Slot) -> Option<Vec<u8>> {
    let p = s.ptr()?;
    (p.len <= 80 && k.len() % 2 == 0).then(|| vec![k.len() as u8 ^ 0x5c; p.len as usize])
}

fn check_model(
    model: &BTreeMap<Vec<u8>, Slot>,
    probes: &[Vec<u8>],
    ranges: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), TestCaseError> {
    let mut b = KeyTableBuilder::new(3);
    for (k, s) in model {
        // A held value of the wrong length is refused.
        let wrong = s.ptr().map(|p| vec![0u8; p.len as usize + 1]);
        let held = held_of(k, s).or(if k.len() % 3 == 0 { wrong } else { None });
        b.push(k, s, held.as_deref());
    }
    prop_assert_eq!(b.len(), model.len());
    let t = b.finish(0.01);
    prop_assert_eq!(t.len(), model.len());
    for (i, (k, s)) in model.iter().enumerate() {
        prop_assert_eq!(t.key(i), k.as_slice());
        prop_assert_eq!(t.slot(i), *s);
        prop_assert_eq!(t.get(k), Some(*s));
        prop_assert_eq!(t.held(i).map(|v| v.to_vec()), held_of(k, s));
    }
    let held: Vec<Vec<u8>> = model.iter().filter_map(|(k, s)| held_of(k, s)).collect();
    prop_assert_eq!(
        t.held_values(),
        (held.len(), held.iter().map(Vec::len).sum::<usize>())
    );
    for p in probes {
        prop_assert_eq!(t.get(p), model.get(p).copied());
        prop_assert_eq!(t.seek(p), model.range(..p.clone()).count());
    }
    for (lo, hi) in ranges {
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
        let want: Vec<(&[u8], Slot)> = model
            .range(lo.clone()..hi.clone())
            .map(|(k, s)| (k.as_slice(), *s))
            .collect();
        let got: Vec<(&[u8], Slot)> = (t.seek(lo)..t.len())
            .map(|i| (t.key(i), t.slot(i)))
            .take_while(|(k, _)| *k < hi.as_slice())
            .collect();
        prop_assert_eq!(got, want);
    }
    let first = model.keys().next().map(|k| k.as_slice());
    let last = model.keys().next_back().map(|k| k.as_slice());
    prop_assert_eq!(t.range(), first.zip(last));

    let back = decode(&t);
    prop_assert_eq!(back.len(), model.len());
    for (i, (k, s)) in model.iter().enumerate() {
        let on_device = PackedSlot::pack(s).unpack(s.deadline());
        prop_assert_eq!(back.key(i), k.as_slice());
        prop_assert_eq!(back.slot(i), on_device);
        prop_assert_eq!(back.get(k), Some(on_device));
        prop_assert_eq!(back.held(i).map(|v| v.to_vec()), held_of(k, s));
        prop_assert_eq!(
            back.get_held(k).map(|(_, h)| h.map(|v| v.to_vec())),
            Some(held_of(k, s))
        );
    }
    prop_assert_eq!(back.data_bytes(), t.data_bytes());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_a_btreemap(
        model in proptest::collection::btree_map(any_key(), any_slot(), 0..400),
        probes in proptest::collection::vec(any_key(), 0..40),
        ranges in proptest::collection::vec((any_key(), any_key()), 0..10),
    ) {
        check_model(&model, &probes, &ranges)?;
    }

    #[test]
    fn matches_a_btreemap_with_long_keys(
        model in proptest::collection::btree_map(long_key(), any_slot(), 0..200),
        probes in proptest::collection::vec(long_key(), 0..20),
        ranges in proptest::collection::vec((long_key(), long_key()), 0..5),
    ) {
        check_model(&model, &probes, &ranges)?;
    }
}
