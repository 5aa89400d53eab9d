//! `Engine::lookup_async` / `lookup_cached`: values, probes and a range as of one instant, and
//! which probes each `Probes` mode looks up.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, Lookup, Probes, RangeRead};

fn engine(cache: u64) -> Engine {
    let ftl = Ftl::format(
        &Backend::Ram(RamStore::new()),
        DeviceConfig::new(common::small_geometry()),
    )
    .unwrap();
    Engine::open(
        Arc::new(ftl) as Arc<dyn AppendDevice>,
        EngineConfig {
            value_cache_bytes: cache,
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

fn wait(db: &Engine, keys: &[&[u8]], probes: Probes<'_>, range: Option<&RangeRead<'_>>) -> Lookup {
    let (tx, rx) = std::sync::mpsc::channel();
    db.lookup_async(
        keys,
        probes,
        range,
        Box::new(move |r| tx.send(r.unwrap()).unwrap()),
    );
    rx.recv().unwrap()
}

#[test]
fn probe_modes_answer_as_documented() {
    let db = engine(1 << 20);
    for k in [&b"a"[..], b"b", b"r1", b"r2", b"s"] {
        db.put(k, k).unwrap();
    }
    let (a, b, x): (&[u8], &[u8], &[u8]) = (b"a", b"b", b"x");
    let each = wait(&db, &[], Probes::Each(&[x, b, a]), None);
    assert_eq!(each.present, vec![false, true, true]);
    // FirstOf stops at the first that exists.
    let first = wait(&db, &[], Probes::FirstOf(&[x, b, a]), None);
    assert_eq!(first.present, vec![false, true, false]);
    // UnlessFound: nothing looked up when every key read was found ...
    let found = wait(&db, &[a], Probes::FirstOfUnlessFound(&[b]), None);
    assert_eq!(
        (found.values[0].as_deref(), &found.present[..]),
        (Some(a), &[false][..])
    );
    // ... and as FirstOf when one was not.
    let missing = wait(&db, &[x], Probes::FirstOfUnlessFound(&[x, b]), None);
    assert_eq!(
        (missing.values[0].as_deref(), &missing.present[..]),
        (None, &[false, true][..])
    );

    // A range with keys and probes in the same view.
    let range = RangeRead {
        start: b"r",
        end: Some(b"s"),
        limit: usize::MAX,
        max_bytes: u64::MAX,
        skip: None,
    };
    let all = wait(&db, &[b], Probes::Each(&[a]), Some(&range));
    let pairs: Vec<(&[u8], &[u8])> = all.pairs.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    assert_eq!(pairs, vec![(&b"r1"[..], &b"r1"[..]), (b"r2", b"r2")]);
    assert_eq!(
        (all.values[0].as_deref(), &all.present[..]),
        (Some(b), &[true][..])
    );

    // The same from DRAM alone: the values were written, so the cache holds their pages.
    let cached = db
        .lookup_cached(&[b], Probes::Each(&[a]), Some(&range))
        .unwrap()
        .expect("every page is cached");
    assert_eq!(cached.pairs, all.pairs);
}

#[test]
fn lookup_cached_declines_what_needs_the_device() {
    let db = engine(0);
    let big = vec![b'v'; lsm::DEFAULT_ENTRY_VALUE_MAX + 1];
    db.put(b"k", &big).unwrap();
    // No cache: the value must come from the device, so the DRAM-only lookup declines ...
    assert!(db
        .lookup_cached(&[b"k"], Probes::NONE, None)
        .unwrap()
        .is_none());
    // ... but not a small value: DRAM holds a copy of it with its entry.
    db.put(b"small", b"v").unwrap();
    let held = db
        .lookup_cached(&[b"small"], Probes::NONE, None)
        .unwrap()
        .expect("a held value needs no page");
    assert_eq!(held.values[0].as_deref(), Some(&b"v"[..]));
    // ... but answers what needs no page: a missing key and probes.
    let l = db
        .lookup_cached(&[b"nope"], Probes::Each(&[b"k"]), None)
        .unwrap()
        .expect("nothing to read");
    assert_eq!((l.values, l.present), (vec![None], vec![true]));
}

#[test]
fn first_present_finds_the_first_live_key_through_memtable_and_keytables() {
    let db = engine(0);
    let (a, b, c, x): (&[u8], &[u8], &[u8], &[u8]) = (b"a", b"b", b"c", b"x");
    db.put(b, b"1").unwrap();
    db.put(c, b"2").unwrap();
    assert_eq!(db.first_present(&[x, a, b, c]).unwrap(), Some(2));
    assert_eq!(db.first_present(&[]).unwrap(), None);
    // A deleted key does not count, in the memtable and once flushed to a keytable.
    db.delete(b).unwrap();
    assert_eq!(db.first_present(&[a, b, c]).unwrap(), Some(2));
    db.flush().unwrap();
    assert_eq!(db.first_present(&[a, b, c]).unwrap(), Some(2));
    assert_eq!(db.first_present(&[x, a, b]).unwrap(), None);
}

/// `range_bounds` gives each range's first live key and an upper bound of its live keys,
/// whatever mix of memtable versions, tombstones, flushed and compacted runs holds them, and
/// the bound names a key that was written in the range. Checked against a model over random
/// writes, deletes, flushes and compactions, for random ranges, several per call.
#[test]
fn range_bounds_hold_every_live_key_of_each_range() {
    use std::collections::{BTreeMap, BTreeSet};
    let db = engine(0);
    let mut live: BTreeMap<Vec<u8>, ()> = BTreeMap::new();
    let mut written: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let key = |i: u64| format!("k{:03}", i).into_bytes();
    for round in 0..40 {
        for _ in 0..25 {
            let k = key(next(300));
            if next(4) == 0 {
                db.delete(&k).unwrap();
                live.remove(&k);
            } else {
                db.put(&k, b"v").unwrap();
                live.insert(k.clone(), ());
            }
            written.insert(k);
        }
        match round % 10 {
            3 => db.flush().unwrap(),
            7 => db.compact_all().unwrap(),
            _ => {}
        }
        let ranges: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..20)
            .map(|_| {
                let (a, b) = (next(320), next(320));
                (key(a.min(b)), (next(5) != 0).then(|| key(a.max(b))))
            })
            .collect();
        let refs: Vec<(&[u8], Option<&[u8]>)> = ranges
            .iter()
            .map(|(s, e)| (s.as_slice(), e.as_deref()))
            .collect();
        let got = db.range_bounds(&refs).unwrap();
        for ((start, end), got) in ranges.iter().zip(got) {
            let in_range = |k: &[u8]| k >= &start[..] && end.as_deref().is_none_or(|e| k < e);
            let first_live = live.keys().find(|k| in_range(k)).cloned();
            let top_live = live.keys().rev().find(|k| in_range(k)).cloned();
            match (&got, &first_live, &top_live) {
                (Some((f, l)), Some(want_f), Some(t)) => {
                    assert_eq!(f, want_f);
                    assert!(l >= t, "{l:?} is below live key {t:?}");
                    assert!(in_range(l), "{l:?} out of range");
                    assert!(written.contains(l), "{l:?} was never written");
                }
                (None, None, None) => {}
                other => panic!("{start:?}..{end:?}: {other:?}"),
            }
        }
    }
    let none: &[(&[u8], Option<&[u8]>)] = &[(b"k100", Some(b"k100")), (b"z", None)];
    assert_eq!(db.range_bounds(none).unwrap(), vec![None, None]);
}
