//! `Engine::lookup_async` / `lookup_cached` / `lookup_now` / `get_now`: values, probes and a range as of one instant, and
//! which probes each `Probes` mode looks up.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, Lookup, LookupNow, Probes, RangeRead, ReadWindowFull};

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

    // GroupsUnlessFound: a group is looked up (as FirstOf) only when its owner was not
    // found. Keys read: a (found), x (not found); groups of two: a's [b, x] skipped, x's
    // [x, b] looked up, and a second group of x's [b, a] stopping after b.
    let groups = wait(
        &db,
        &[a, x],
        Probes::GroupsUnlessFound {
            keys: &[b, x, x, b, b, a],
            per: 2,
            owners: &[0, 1, 1],
        },
        None,
    );
    assert_eq!(groups.values[0].as_deref(), Some(a));
    assert_eq!(groups.values[1], None);
    assert_eq!(groups.present, vec![false, false, false, true, true, false]);

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
fn lookup_now_answers_from_dram_or_leaves_a_read_to_start() {
    let db = engine(0);
    let big = vec![b'v'; lsm::DEFAULT_ENTRY_VALUE_MAX + 1];
    db.put(b"k", &big).unwrap();
    db.put(b"small", b"v").unwrap();
    // DRAM holds all it needs: answered here.
    let LookupNow::Answered(l) = db
        .lookup_now(&[b"small", b"nope"], Probes::Each(&[b"k"]), None)
        .unwrap()
    else {
        panic!("a held value and a missing key need no page");
    };
    assert_eq!(
        (l.values, l.present),
        (
            vec![Some(bytes::Bytes::from_static(b"v")), None],
            vec![true]
        )
    );
    // The big value's page must come from the device (no cache).
    let LookupNow::Pending(p) = db
        .lookup_now(&[b"k", b"small"], Probes::NONE, None)
        .unwrap()
    else {
        panic!("an uncached page must be read");
    };
    assert_eq!(p.pages_to_read(), 1);
    let (tx, rx) = std::sync::mpsc::channel();
    let read = p
        .reserve(Box::new(move |r| tx.send(r.unwrap()).unwrap()))
        .unwrap();
    db.submit_reads(vec![read]);
    let l = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the read completes");
    assert_eq!(l.values[0].as_deref(), Some(&big[..]));
    assert_eq!(l.values[1].as_deref(), Some(&b"v"[..]));
}

/// Starts a pending lookup and waits for it.
fn finish(db: &Engine, p: lsm::PendingLookup) -> Lookup {
    let (tx, rx) = std::sync::mpsc::channel();
    let read = p
        .reserve(Box::new(move |r| tx.send(r.unwrap()).unwrap()))
        .unwrap();
    db.submit_reads(vec![read]);
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the read completes")
}

#[test]
fn get_now_answers_hot_values_and_resolves_cold_ones_once() {
    let one_page = vec![b'p'; lsm::DEFAULT_ENTRY_VALUE_MAX + 1];
    let spanning = vec![b's'; 3 * hwftl_sim::PAGE_SIZE];
    let fill = |db: &Engine| {
        db.put(b"one", &one_page).unwrap();
        db.put(b"span", &spanning).unwrap();
        db.put(b"small", b"v").unwrap();
        db.put(b"gone", b"x").unwrap();
        db.delete(b"gone").unwrap();
    };
    // No value cache: every page comes from the device.
    let db = engine(0);
    fill(&db);
    // Missing and deleted keys: no value, nothing to read; the other keys asked about are
    // probed (in order, up to the first that holds a value).
    let others: [&[u8]; 4] = [b"o1", b"o2", b"small", b"gone"];
    for k in [&b"nope"[..], b"gone"] {
        assert!(matches!(
            db.get_now(k, &others[..2]).unwrap(),
            lsm::GetNow::NoValue {
                other_exists: false
            }
        ));
        assert!(matches!(
            db.get_now(k, &others).unwrap(),
            lsm::GetNow::NoValue { other_exists: true }
        ));
        // A deleted other is not one that exists.
        assert!(matches!(
            db.get_now(k, &[b"gone", b"nope"]).unwrap(),
            lsm::GetNow::NoValue {
                other_exists: false
            }
        ));
    }
    let others: [&[u8]; 4] = [b"o1", b"o2", b"o3", b"o4"];
    // A held small value is hot without any cache.
    let lsm::GetNow::Hot(v) = db.get_now(b"small", &others).unwrap() else {
        panic!("a held value needs no page");
    };
    assert_eq!(&v[..], b"v");
    // The others are cold reads whose lookup has the value first and the probes'
    // presences all false.
    for (k, want) in [(&b"one"[..], &one_page), (b"span", &spanning)] {
        let lsm::GetNow::Cold(p) = db.get_now(k, &others).unwrap() else {
            panic!("an uncached value must be read");
        };
        let l = finish(&db, *p);
        assert_eq!(l.values.len(), 1);
        assert_eq!(l.values[0].as_deref(), Some(&want[..]));
        assert_eq!(l.present, vec![false; 4]);
    }
    // With a cache, once read (or written) a value is hot, over several pages too.
    let db = engine(1 << 20);
    fill(&db);
    for (k, want) in [(&b"one"[..], &one_page), (b"span", &spanning)] {
        if let lsm::GetNow::Cold(p) = db.get_now(k, &others).unwrap() {
            assert_eq!(finish(&db, *p).values[0].as_deref(), Some(&want[..]));
        }
        let lsm::GetNow::Hot(v) = db.get_now(k, &others).unwrap() else {
            panic!("a value read once is in the cache");
        };
        assert_eq!(&v[..], &want[..]);
    }
}

#[test]
fn a_full_read_window_refuses_to_queue_without_waiting() {
    let db = engine(0);
    let big = vec![b'w'; lsm::DEFAULT_ENTRY_VALUE_MAX + 1];
    let keys: Vec<Vec<u8>> = (0..=lsm::ASYNC_READ_WINDOW)
        .map(|i| format!("k{i:03}").into_bytes())
        .collect();
    for k in &keys {
        db.put(k, &big).unwrap();
    }
    // Fill the window with reserved reads not yet submitted ...
    let (tx, rx) = std::sync::mpsc::channel();
    let mut reserved = Vec::new();
    for k in &keys[..lsm::ASYNC_READ_WINDOW] {
        let LookupNow::Pending(p) = db.lookup_now(&[k], Probes::NONE, None).unwrap() else {
            panic!("no cache: the page must be read");
        };
        let tx = tx.clone();
        reserved.push(
            p.reserve(Box::new(move |r| tx.send(r.unwrap()).unwrap()))
                .unwrap(),
        );
    }
    // ... then one more is refused at once, its callback dropped uncalled.
    let LookupNow::Pending(p) = db
        .lookup_now(&[&keys[lsm::ASYNC_READ_WINDOW]], Probes::NONE, None)
        .unwrap()
    else {
        panic!("no cache: the page must be read");
    };
    let started = std::time::Instant::now();
    assert!(matches!(
        p.reserve(Box::new(|_| panic!("not started"))),
        Err(ReadWindowFull)
    ));
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // The refused read goes the waiting way; the reserved ones complete once submitted.
    db.submit_reads(reserved);
    for _ in 0..lsm::ASYNC_READ_WINDOW {
        let l = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(l.values[0].as_deref(), Some(&big[..]));
    }
    let last = wait(&db, &[&keys[lsm::ASYNC_READ_WINDOW]], Probes::NONE, None);
    assert_eq!(last.values[0].as_deref(), Some(&big[..]));
}

#[test]
fn reads_the_device_refuses_for_want_of_tags_are_retried_by_the_poller() {
    // A device with 8 command tags: 24 queued page reads cannot all take one.
    let mut cfg = DeviceConfig::new(common::small_geometry());
    cfg.queue_depth = 8;
    let ftl = Ftl::format(&Backend::Ram(RamStore::new()), cfg).unwrap();
    let db = Engine::open(
        Arc::new(ftl) as Arc<dyn AppendDevice>,
        EngineConfig {
            value_cache_bytes: 0,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let keys: Vec<Vec<u8>> = (0..24).map(|i| format!("k{i:02}").into_bytes()).collect();
    for (i, k) in keys.iter().enumerate() {
        db.put(k, &[i as u8; lsm::DEFAULT_ENTRY_VALUE_MAX + 1])
            .unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let mut reserved = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let LookupNow::Pending(p) = db.lookup_now(&[k], Probes::NONE, None).unwrap() else {
            panic!("no cache: the page must be read");
        };
        let tx = tx.clone();
        reserved.push(
            p.reserve(Box::new(move |r| tx.send((i, r)).unwrap()))
                .unwrap(),
        );
    }
    // One submission of 24 pages: 16 are refused for want of a tag and deferred.
    db.submit_reads(reserved);
    let mut seen = vec![false; keys.len()];
    for _ in 0..keys.len() {
        let (i, r) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("every queued read completes");
        let l = r.expect("no read fails for want of a tag");
        assert_eq!(
            l.values[0].as_deref(),
            Some(&vec![i as u8; lsm::DEFAULT_ENTRY_VALUE_MAX + 1][..])
        );
        seen[i] = true;
    }
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn a_reserved_read_dropped_unsubmitted_fails_and_gives_its_room_back() {
    let db = engine(0);
    let big = vec![b'd'; lsm::DEFAULT_ENTRY_VALUE_MAX + 1];
    db.put(b"k", &big).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..3 * lsm::ASYNC_READ_WINDOW {
        let LookupNow::Pending(p) = db.lookup_now(&[b"k"], Probes::NONE, None).unwrap() else {
            panic!("no cache: the page must be read");
        };
        let tx = tx.clone();
        // Room is taken and given back each time: the window never fills.
        drop(
            p.reserve(Box::new(move |r| tx.send(r.is_err()).unwrap()))
                .unwrap(),
        );
    }
    for _ in 0..3 * lsm::ASYNC_READ_WINDOW {
        assert!(rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap());
    }
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
