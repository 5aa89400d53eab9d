//! The store's tests: the key count, types, expiry, scans and WATCH over a RAM device.
#![allow(clippy::unwrap_used)]
use super::*;
use std::sync::Arc;

use bytes::Bytes;
use hwftl_sim::{Backend, DeviceConfig, Ftl, Geometry, RamStore};
use lsm::{EngineConfig, WriteOp};

use crate::keyspace::{HASH, HASH_FIELD, STRING, ZSET, ZSET_MEMBER};

#[test]
fn failed_writes_say_which_outcome_they_had() {
    let not_applied = StoreError::Engine(EngineError::WriteNotApplied(
        hwftl_sim::DeviceError::PoweredOff,
    ));
    let text = not_applied.reply_text();
    assert!(text.starts_with("ERR write not applied"), "{text}");
    assert!(text.contains("safe to retry"), "{text}");
    let unknown = StoreError::Engine(EngineError::OutcomeUnknown {
        reason: "the device flush after its pages failed".into(),
    });
    let text = unknown.reply_text();
    assert!(text.starts_with("ERR write outcome unknown"), "{text}");
    assert!(text.contains("may or may not be durable"), "{text}");
}

fn store() -> Store {
    let g = Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 32,
        pages_per_block: 8,
        spare_blocks_per_chip: 1,
    };
    let dev = Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap());
    Store::open(Engine::open(dev, super::engine_config(EngineConfig::default())).unwrap()).unwrap()
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// SET `key` with a deadline long past, in a group of its own.
fn set_expired(s: &Store, key: &[u8]) {
    let mut g = WriteGroup::new(s);
    let past = SetOptions {
        deadline: Some(1),
        ..SetOptions::default()
    };
    g.set(key, b("v"), past).unwrap();
    g.commit().unwrap();
}

/// The writer-kept key count against a walk of the type records.
fn assert_count_exact(s: &Store, when: &str) {
    let walked = count_type_records(&s.db, &s.expiries.read(), now_ms()).unwrap();
    assert_eq!(s.keys.get(), Some(walked), "after {when}");
}

#[test]
fn the_key_count_follows_every_kind_of_write() {
    let s = store();
    assert_count_exact(&s, "open");
    let set = SetOptions::default();
    type Step = Box<dyn Fn(&mut WriteGroup<'_>)>;
    let steps: Vec<(&str, Step)> = vec![
        (
            "new strings and an overwrite in one group",
            Box::new(move |g| {
                for k in ["a", "b", "a"] {
                    g.set(k.as_bytes(), b("v"), set).unwrap();
                }
            }),
        ),
        (
            "a hash, a list and a set beside them",
            Box::new(move |g| {
                g.hash_set(b"h", &[(b("f"), b("1"))]).unwrap();
                g.list_push(b"l", &[b("x"), b("y")], true, false).unwrap();
                g.set_add(b"t", &[b("m")]).unwrap();
            }),
        ),
        (
            "SET over the hash (a type change)",
            Box::new(move |g| {
                g.set(b"h", b("now a string"), set).unwrap();
            }),
        ),
        (
            "popping the list empty",
            Box::new(move |g| {
                g.list_pop(b"l", true, 5).unwrap();
            }),
        ),
        (
            "RENAME over an existing key, COPY to a new one",
            Box::new(move |g| {
                assert!(g.rename(b"a", b"b", false).unwrap());
                assert!(g.copy(b"b", b"c", false).unwrap());
            }),
        ),
        (
            "DEL of a present and a missing key",
            Box::new(move |g| {
                assert_eq!(g.delete(&[b("c"), b("nope")]).unwrap(), 1);
            }),
        ),
        (
            "a key created and deleted in one group",
            Box::new(move |g| {
                g.set(b"brief", b("v"), set).unwrap();
                g.delete(&[b("brief")]).unwrap();
            }),
        ),
    ];
    for (what, step) in steps {
        let mut g = WriteGroup::new(&s);
        step(&mut g);
        g.commit().unwrap();
        assert_count_exact(&s, what);
    }
    assert_eq!(
        s.dbsize().unwrap(),
        3,
        "b, h and t: a renamed, c deleted, l emptied"
    );
    // An expired key: counted until purged, but never by DBSIZE.
    set_expired(&s, b"old");
    assert_count_exact(&s, "an expired SET");
    assert_eq!(s.dbsize().unwrap(), 3);
    let mut g = WriteGroup::new(&s);
    assert_eq!(g.purge_expired(&[b"old"]).unwrap().len(), 1);
    g.commit().unwrap();
    assert_count_exact(&s, "the purge");
    assert_eq!(s.dbsize().unwrap(), 3);
    flush_all(&s).unwrap();
    assert_count_exact(&s, "FLUSHALL");
    assert_eq!(s.dbsize().unwrap(), 0);
}

#[test]
fn a_key_expires_after_its_deadline_millisecond_not_at_it() {
    let s = store();
    let deadline = now_ms() + 60_000;
    let mut g = WriteGroup::new(&s);
    let o = SetOptions {
        deadline: Some(deadline),
        ..SetOptions::default()
    };
    g.set(b"k", b("v"), o).unwrap();
    g.commit().unwrap();
    // Redis: expired when now > when; at the deadline itself PTTL is 0.
    assert_eq!(s.kind_at(b"k", deadline).unwrap(), Some(STRING));
    assert_eq!(s.kind_at(b"k", deadline + 1).unwrap(), None);
    assert_eq!(s.dbsize_at(deadline).unwrap(), 1);
    assert_eq!(s.dbsize_at(deadline + 1).unwrap(), 0);
}

#[test]
fn a_plain_set_over_a_key_in_flight_counts_it_once() {
    let s = store();
    // Group 1 creates `k` and is on the device, not yet applied.
    let mut g1 = WriteGroup::new(&s);
    g1.set(b"k", b("1"), SetOptions::default()).unwrap();
    let p1 = g1
        .try_submit()
        .unwrap()
        .expect("the engine takes the batch");
    // Group 2 SETs it again before group 1 is applied: it must not count it as new.
    let mut g2 = WriteGroup::new(&s);
    g2.assume_string(b"k");
    g2.set(b"k", b("2"), SetOptions::default()).unwrap();
    g2.set(b"j", b("3"), SetOptions::default()).unwrap();
    let p2 = g2
        .try_submit()
        .unwrap()
        .expect("the engine takes the batch");
    p1.finish(&s).unwrap();
    p2.finish(&s).unwrap();
    assert_count_exact(&s, "two groups in flight");
    assert_eq!(s.dbsize().unwrap(), 2);
}

#[test]
fn types_exclude_each_other_and_set_replaces_any_type() {
    let s = store();
    let mut g = WriteGroup::new(&s);
    g.hash_set(b"h", &[(b("f1"), b("v1")), (b("f2"), b("v2"))])
        .unwrap();
    assert!(matches!(g.incr_by(b"h", 1), Err(StoreError::WrongType)));
    g.commit().unwrap();
    let as_string = s.read_key(b"h", &KeyRead::Record { tag: STRING }).unwrap();
    assert_eq!(
        (as_string.kind, &as_string.values[..]),
        (Some(HASH), &[None][..])
    );
    let h = s.read_key(b"h", &KeyRead::Record { tag: HASH }).unwrap();
    assert_eq!(h.kind, Some(HASH));
    assert_eq!(h.values[0].as_deref().map(ks::decode_count), Some(2));
    let all = s
        .read_key(
            b"h",
            &KeyRead::AllSubs {
                sub_tag: HASH_FIELD,
            },
        )
        .unwrap();
    assert_eq!(all.pairs, vec![(b("f1"), b("v1")), (b("f2"), b("v2"))]);
    let mut g = WriteGroup::new(&s);
    g.set(b"h", b("str"), SetOptions::default()).unwrap();
    g.commit().unwrap();
    assert_eq!(s.kind(b"h").unwrap(), Some(STRING));
    let now = s
        .read_key(
            b"h",
            &KeyRead::AllSubs {
                sub_tag: HASH_FIELD,
            },
        )
        .unwrap();
    assert_eq!((now.kind, now.pairs.len()), (Some(STRING), 0));
    assert_eq!(
        s.engine()
            .count_keys(&[HASH_FIELD], Some(&[HASH_FIELD + 1]))
            .unwrap(),
        0
    );
}

#[test]
fn zset_orders_by_score_and_moves_members() {
    let s = store();
    let mut g = WriteGroup::new(&s);
    let o = kvproto::ZAddOptions::default();
    g.zadd(b"z", &o, &[(3.0, b("c")), (1.0, b("a")), (-2.0, b("b"))])
        .unwrap();
    g.zadd(b"z", &o, &[(5.0, b("a"))]).unwrap();
    g.commit().unwrap();
    let all = s
        .zrange_by_score(
            b"z",
            (f64::NEG_INFINITY, true),
            (f64::INFINITY, true),
            0,
            None,
        )
        .unwrap();
    let names: Vec<&[u8]> = all.iter().map(|(m, _)| &m[..]).collect();
    assert_eq!(names, vec![&b"b"[..], b"c", b"a"]);
    let some = s
        .zrange_by_score(b"z", (-2.0, false), (5.0, true), 1, Some(5))
        .unwrap();
    assert_eq!(some.len(), 1);
    let z = s.read_key(b"z", &KeyRead::Record { tag: ZSET }).unwrap();
    assert_eq!(z.values[0].as_deref().map(ks::decode_count), Some(3));
    let mut g = WriteGroup::new(&s);
    assert_eq!(g.zrem(b"z", &[b("a"), b("nope")]).unwrap(), 1);
    g.commit().unwrap();
    let names = [b("a"), b("c")];
    let scores = s
        .read_key(
            b"z",
            &KeyRead::Subs {
                sub_tag: ZSET_MEMBER,
                names: &names,
            },
        )
        .unwrap();
    let scores: Vec<Option<f64>> = scores
        .values
        .iter()
        .map(|v| v.as_deref().and_then(ks::decode_score))
        .collect();
    assert_eq!(scores, vec![None, Some(3.0)]);
    // No such key: nothing, and no type.
    let none = s.read_key(b"nope", &KeyRead::Record { tag: ZSET }).unwrap();
    assert_eq!(
        none,
        KeyFound {
            kind: None,
            values: vec![None],
            pairs: vec![]
        }
    );
}

#[test]
fn scan_returns_every_key_across_types_once() {
    let s = store();
    let mut g = WriteGroup::new(&s);
    for i in 0..50 {
        g.set(format!("s{i}").as_bytes(), b("v"), SetOptions::default())
            .unwrap();
        g.hash_set(format!("h{i}").as_bytes(), &[(b("f"), b("v"))])
            .unwrap();
    }
    g.commit().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = 0;
    loop {
        let (next, keys) = s.scan(cursor, None, 7, None).unwrap();
        for k in keys {
            assert!(seen.insert(k));
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 100);
    assert_eq!(s.dbsize().unwrap(), 100);
    // A made-up cursor resumes somewhere in the keyspace.
    assert!(s.scan(999_999, None, 10, None).is_ok());
}

#[test]
fn watch_versions_track_only_watched_keys_and_break_on_applied_writes() {
    let s = store();
    let w = vec![s.watch(b"a"), s.watch(b"b")];
    let again = s.watch(b"a");
    assert!(!s.watch_broken(&w));
    s.touch_watched([&b"c"[..]]);
    assert!(
        !s.watch_broken(&w),
        "an unwatched key's write breaks nothing"
    );
    s.touch_watched([&b"b"[..]]);
    assert!(s.watch_broken(&w));
    assert!(!s.watch_broken(std::slice::from_ref(&again)));
    s.unwatch(&w);
    assert_eq!(s.watches.keys.lock().len(), 1, "a still watched by `again`");
    s.unwatch(std::slice::from_ref(&again));
    assert!(
        s.watches.keys.lock().is_empty(),
        "the table holds only watched keys"
    );
    let mut g = WriteGroup::new(&s);
    g.set(b"x", b("v"), SetOptions::default()).unwrap();
    g.commit().unwrap();
    let f = vec![s.watch(b"x"), s.watch(b"never")];
    flush_all(&s).unwrap();
    assert!(
        s.watch_broken(&f[..1]),
        "FLUSHALL breaks the watch of a key it deletes"
    );
    assert!(
        !s.watch_broken(&f[1..]),
        "but not of a key that was not there (as Redis)"
    );
    s.unwatch(&f);
    // A watched string whose deadline passes breaks the watch before any sweep.
    let mut g = WriteGroup::new(&s);
    g.set(b"e", b("v"), SetOptions::default()).unwrap();
    g.commit().unwrap();
    let e = vec![s.watch(b"e")];
    let mut g = WriteGroup::new(&s);
    g.expire_key(b"e", 1, false, None, "pexpire").unwrap();
    g.commit().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(s.watch_broken(&e));
}

#[test]
fn sets_and_lists_keep_counts_and_types() {
    let s = store();
    let mut g = WriteGroup::new(&s);
    assert_eq!(g.set_add(b"s", &[b("a"), b("b"), b("a")]).unwrap(), 2);
    assert_eq!(
        g.list_push(b"l", &[b("x"), b("y")], false, false).unwrap(),
        2
    );
    assert_eq!(g.list_push(b"l", &[b("w")], true, false).unwrap(), 3);
    assert!(matches!(
        g.set_add(b"l", &[b("a")]),
        Err(StoreError::WrongType)
    ));
    // Read-your-writes inside the group.
    assert_eq!(set::members(&g, b"s").unwrap(), vec![b("a"), b("b")]);
    g.commit().unwrap();
    assert_eq!(s.kind(b"s").unwrap(), Some(ks::SET));
    assert_eq!(s.kind(b"l").unwrap(), Some(ks::LIST));
    assert_eq!(set::card(&s, b"s").unwrap(), 2);
    assert_eq!(
        list::range(&s, b"l", 0, -1).unwrap(),
        vec![b("w"), b("x"), b("y")]
    );
    let mut g = WriteGroup::new(&s);
    assert_eq!(
        g.list_pop(b"l", false, 5).unwrap(),
        Some(vec![b("y"), b("x"), b("w")])
    );
    assert_eq!(g.set_pop(b"s", 10).unwrap().map(|m| m.len()), Some(2));
    g.commit().unwrap();
    assert_eq!(s.dbsize().unwrap(), 0, "emptied collections leave no key");
    assert_eq!(
        s.engine().count_keys(&[], None).unwrap(),
        0,
        "nor any record"
    );
}

/// Commits one group built by `f` (each write purging its expired keys first, as the
/// writer does).
fn write(s: &Store, keys: &[&[u8]], f: impl FnOnce(&mut WriteGroup<'_>)) {
    let mut g = WriteGroup::new(s);
    g.purge_expired(keys).unwrap();
    f(&mut g);
    g.commit().unwrap();
}

fn ttl(s: &Store, key: &[u8]) -> i64 {
    s.ttl(key, kvproto::TtlKind::Pttl).unwrap()
}

/// `key`'s hash fields, read as a client read does.
fn fields(s: &Store, key: &[u8]) -> KeyFound {
    s.read_key(
        key,
        &KeyRead::AllSubs {
            sub_tag: HASH_FIELD,
        },
    )
    .unwrap()
}

fn records(s: &Store) -> u64 {
    s.engine().count_keys(&[], None).unwrap()
}

#[test]
fn collections_expire_and_a_new_key_under_the_name_starts_empty() {
    let s = store();
    write(&s, &[b"h"], |g| {
        g.hash_set(b"h", &[(b("f1"), b("v1")), (b("f2"), b("v2"))])
            .unwrap();
        assert!(g.expire_key(b"h", 300, false, None, "pexpire").unwrap());
    });
    // A margin a loaded host does not eat between the write and the check.
    assert!((1..=300).contains(&ttl(&s, b"h")));
    std::thread::sleep(std::time::Duration::from_millis(320));
    assert_eq!((s.kind(b"h").unwrap(), ttl(&s, b"h")), (None, -2));
    let gone = fields(&s, b"h");
    assert_eq!((gone.kind, gone.pairs.len()), (None, 0));
    assert_eq!(s.dbsize().unwrap(), 0, "an expired hash is not counted");
    // HSET on the expired name: a new hash with only the new field, and no deadline.
    write(&s, &[b"h"], |g| {
        assert_eq!(g.hash_set(b"h", &[(b("f3"), b("v3"))]).unwrap(), 1);
    });
    assert_eq!(fields(&s, b"h").pairs, vec![(b("f3"), b("v3"))]);
    assert_eq!(ttl(&s, b"h"), -1);
    assert_eq!(
        records(&s),
        2,
        "the header and one field, no deadline record"
    );
}

#[test]
fn a_deadline_never_outlives_its_key() {
    let s = store();
    write(&s, &[b"l"], |g| {
        g.list_push(b"l", &[b("a"), b("b")], false, false).unwrap();
        g.expire_key(b"l", 100_000, false, None, "pexpire").unwrap();
    });
    assert!(ttl(&s, b"l") > 0);
    // Popping the last item deletes the list, and its deadline with it.
    write(&s, &[b"l"], |g| {
        g.list_pop(b"l", true, 2).unwrap();
    });
    assert_eq!((ttl(&s, b"l"), s.expiring_keys(), records(&s)), (-2, 0, 0));
    write(&s, &[b"l"], |g| {
        g.list_push(b"l", &[b("c")], false, false).unwrap();
    });
    assert_eq!(
        ttl(&s, b"l"),
        -1,
        "a new list under the name has no deadline"
    );
    // SET KEEPTTL over a hash keeps the hash's deadline (as Redis); plain SET drops it.
    write(&s, &[b"k"], |g| {
        g.hash_set(b"k", &[(b("f"), b("v"))]).unwrap();
        g.expire_key(b"k", 100_000, false, None, "pexpire").unwrap();
    });
    let keep = SetOptions {
        keep_ttl: true,
        ..SetOptions::default()
    };
    write(&s, &[b"k"], |g| {
        g.set(b"k", b("s"), keep).unwrap();
    });
    assert_eq!(s.kind(b"k").unwrap(), Some(STRING));
    assert!(ttl(&s, b"k") > 0);
    write(&s, &[b"k"], |g| {
        g.set(b"k", b("s"), SetOptions::default()).unwrap();
    });
    assert_eq!(ttl(&s, b"k"), -1);
    // RENAME carries a collection's deadline; PERSIST removes it.
    write(&s, &[b"z", b"z2"], |g| {
        g.zadd(b"z", &Default::default(), &[(1.0, b("m"))]).unwrap();
        g.expire_key(b"z", 100_000, false, None, "pexpire").unwrap();
        g.rename(b"z", b"z2", false).unwrap();
    });
    assert_eq!(ttl(&s, b"z"), -2);
    assert!(ttl(&s, b"z2") > 0);
    write(&s, &[b"z2"], |g| assert!(g.persist(b"z2").unwrap()));
    assert_eq!((ttl(&s, b"z2"), s.expiring_keys()), (-1, 0));
}

#[test]
fn a_deadline_falling_while_a_command_runs_is_judged_at_one_instant() {
    let s = store();
    // The instant the command below begins: before the deadline however late this thread
    // runs (a clock read after the PEXPIRE could already be past it on a loaded host).
    let began = now_ms();
    write(&s, &[b"h"], |g| {
        g.hash_set(b"h", &[(b("f"), b("v"))]).unwrap();
        g.expire_key(b"h", 10, false, None, "pexpire").unwrap();
    });
    // The command begins (its clock fixed, its purge finding nothing due), then the
    // deadline passes before it writes: SET must still replace the hash, not write a
    // string beside its records.
    let mut g = WriteGroup::new(&s);
    g.fix_clock(began);
    assert!(g.purge_expired(&[b"h"]).unwrap().is_empty());
    std::thread::sleep(std::time::Duration::from_millis(20));
    g.set(b"h", b("s"), SetOptions::default()).unwrap();
    g.commit().unwrap();
    assert_eq!((s.kind(b"h").unwrap(), ttl(&s, b"h")), (Some(STRING), -1));
    assert_eq!(
        records(&s),
        1,
        "the string only: the hash went with its deadline"
    );
}

#[test]
fn randomkey_draws_every_type_and_never_an_expired_key() {
    let s = store();
    assert_eq!(s.random_key(|k| Ok(s.is_live(k))).unwrap(), None);
    write(&s, &[], |g| {
        g.set(b"s", b("v"), SetOptions::default()).unwrap();
        g.hash_set(b"h", &[(b("f"), b("v"))]).unwrap();
        g.set_add(b"t", &[b("m")]).unwrap();
        g.list_push(b"l", &[b("i")], false, false).unwrap();
        g.set(b"gone", b("v"), SetOptions::default()).unwrap();
        g.expire_key(b"gone", 1, false, None, "pexpire").unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(5));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..400 {
        seen.insert(s.random_key(|k| Ok(s.is_live(k))).unwrap().unwrap());
    }
    let want: std::collections::BTreeSet<Bytes> = ["h", "l", "s", "t"].into_iter().map(b).collect();
    assert_eq!(
        seen, want,
        "every live key of every type, and no expired one"
    );
    assert_eq!(
        s.random_key(|k| Ok(k == b"t")).unwrap(),
        Some(b("t")),
        "a refused key is passed over"
    );
}

#[test]
fn the_sweep_deletes_every_record_of_an_expired_collection() {
    let s = store();
    write(&s, &[b"t"], |g| {
        g.set_add(b"t", &[b("a"), b("b"), b("c")]).unwrap();
        g.expire_key(b"t", 10, false, None, "pexpire").unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(20));
    let due = s.due_expiries(10);
    assert_eq!(due, vec![b"t".to_vec()]);
    let mut g = WriteGroup::new(&s);
    assert_eq!(g.expire(&due).unwrap(), 1);
    g.commit().unwrap();
    assert_eq!((records(&s), s.expiring_keys()), (0, 0));
}

#[test]
fn an_expired_string_an_older_build_left_beside_a_hash_does_not_hide_it() {
    let s = store();
    write(&s, &[b"k"], |g| {
        g.hash_set(b"k", &[(b("f"), b("v"))]).unwrap();
    });
    // The older layout: the string's record and its passed deadline beside the hash.
    let (string, deadline) = (ks::top(STRING, b"k"), ks::top(ks::EXPIRY, b"k"));
    let past = 1u64.to_le_bytes();
    s.engine()
        .write(&[
            WriteOp::Put(&string, b"old"),
            WriteOp::Put(&deadline, &past),
        ])
        .unwrap();
    let s = Store::open(s.into_engine()).unwrap();
    assert_eq!((s.kind(b"k").unwrap(), ttl(&s, b"k")), (Some(HASH), -1));
    assert_eq!(records(&s), 2, "the hash's header and field only");
}

#[test]
fn the_sweep_lets_expired_strings_go_without_a_write_and_the_name_is_free() {
    let s = store();
    write(&s, &[b"a", b"b", b"c"], |g| {
        for k in [b"a", b"b", b"c"] {
            g.set(k, b("v"), SetOptions::default()).unwrap();
            g.expire_key(k, 300, false, None, "pexpire").unwrap();
        }
    });
    // Counted until the deadline (a margin a loaded host does not eat), not after.
    assert_eq!((s.dbsize().unwrap(), s.expiring_keys()), (3, 3));
    std::thread::sleep(std::time::Duration::from_millis(320));
    assert_eq!(s.dbsize().unwrap(), 0);
    let device_writes = s.engine().device_stats().writes;
    let due = s.due_expiries(10);
    let mut g = WriteGroup::new(&s);
    assert_eq!(g.expire(&due).unwrap(), 3);
    g.commit().unwrap();
    assert_eq!(
        s.engine().device_stats().writes,
        device_writes,
        "letting expired strings go writes nothing"
    );
    assert_eq!((s.dbsize().unwrap(), s.expiring_keys()), (0, 0));
    assert_count_exact(&s, "the sweep");
    // Their entries are still there (compaction drops them), hidden from every read.
    assert_eq!(
        (s.kind(b"a").unwrap(), ttl(&s, b"a"), records(&s)),
        (None, -2, 0)
    );
    // A key of another type takes a name: the expired string goes first, so it can
    // never hide the new key.
    write(&s, &[b"a"], |g| {
        g.hash_set(b"a", &[(b("f"), b("v"))]).unwrap();
    });
    assert_eq!((s.kind(b"a").unwrap(), ttl(&s, b"a")), (Some(HASH), -1));
    assert_eq!(s.dbsize().unwrap(), 1);
    assert_count_exact(&s, "a hash over an expired string");
    // A restart finds the others' entries (expired) and counts them until the sweep.
    let s = Store::open(s.into_engine()).unwrap();
    assert_eq!((s.dbsize().unwrap(), s.expiring_keys()), (1, 2));
    assert_count_exact(&s, "reopen");
}

/// Compaction may drop an expired string's entry before the sweep reaches its index
/// entry (a review found the sweep then stalled on it, and a new key under the name
/// stayed hidden behind the stale deadline). The sweep and a write to the name both let
/// it go, and the name is free.
#[test]
fn a_string_compaction_dropped_before_the_sweep_frees_its_name() {
    let s = store();
    let long_ago = SetOptions {
        deadline: Some(now_ms() - 20_000),
        ..SetOptions::default()
    };
    write(&s, &[b"a", b"b"], |g| {
        g.set(b"a", b("v"), long_ago).unwrap();
        g.set(b"b", b("v"), long_ago).unwrap();
    });
    s.engine().compact_all().unwrap();
    assert_eq!(
        s.engine().stats().expired_dropped,
        2,
        "past the grace: dropped"
    );
    assert_eq!((s.expiring_keys(), s.dbsize().unwrap()), (2, 0));
    // The sweep lets go of `a` though no entry is left.
    let mut g = WriteGroup::new(&s);
    assert_eq!(g.expire(&[b"a".to_vec()]).unwrap(), 1);
    g.commit().unwrap();
    assert_count_exact(&s, "the sweep");
    // A write to `b` lets go of it first; the new key is visible to every read.
    write(&s, &[b"b"], |g| {
        g.set(b"b", b("new"), SetOptions::default()).unwrap();
    });
    assert_eq!(s.expiring_keys(), 0);
    assert_eq!((s.kind(b"b").unwrap(), ttl(&s, b"b")), (Some(STRING), -1));
    assert!(!s.expired(b"b", now_ms()), "no stale deadline hides it");
    assert_eq!(s.dbsize().unwrap(), 1);
    assert_count_exact(&s, "a new key over a dropped one");
}

/// A command (an EXEC) judges expiry at the instant it began: a key live then reads
/// whole, though its deadline passes before the read and the engine hides it from
/// other reads by then (a review found INCR failing on such a key).
#[test]
fn a_group_reads_what_its_fixed_instant_sees() {
    let s = store();
    let began = now_ms();
    write(&s, &[b"n"], |g| {
        let o = SetOptions {
            deadline: Some(began + 30),
            ..SetOptions::default()
        };
        g.set(b"n", b("10"), o).unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(60));
    assert_eq!(s.kind(b"n").unwrap(), None, "expired now");
    let mut g = WriteGroup::new(&s);
    g.fix_clock(began);
    assert_eq!(
        g.incr_by(b"n", 1).unwrap(),
        11,
        "live at the group's instant"
    );
}

#[test]
fn deadline_records_of_an_older_build_move_into_the_entries() {
    let s = store();
    write(&s, &[b"h", b"s"], |g| {
        g.hash_set(b"h", &[(b("f"), b("v"))]).unwrap();
        g.set(b"s", b("v"), SetOptions::default()).unwrap();
    });
    // The older layout: a deadline record per key, far ahead and long past.
    let far = (now_ms() + 3_600_000).to_le_bytes();
    let past = 5u64.to_le_bytes();
    let (xh, xs, xgone) = (
        ks::top(ks::EXPIRY, b"h"),
        ks::top(ks::EXPIRY, b"s"),
        ks::top(ks::EXPIRY, b"gone"),
    );
    s.engine()
        .write(&[
            WriteOp::Put(&xh, &far),
            WriteOp::Put(&xs, &past),
            WriteOp::Put(&xgone, &far),
        ])
        .unwrap();
    let s = Store::open(s.into_engine()).unwrap();
    assert!(
        (3_590..=3_600).contains(&(ttl(&s, b"h") / 1000)),
        "{}",
        ttl(&s, b"h")
    );
    assert_eq!(s.kind(b"s").unwrap(), None, "expired");
    let end = ks::prefix_end(&[ks::EXPIRY]);
    assert!(
        s.engine()
            .deadlines_in(&[ks::EXPIRY], end.as_deref())
            .unwrap()
            .0
            == 0,
        "no deadline record is left"
    );
    assert_eq!(s.expiring_keys(), 2, "h, and s until the sweep lets it go");
    assert_eq!(s.dbsize().unwrap(), 1);
}

#[test]
fn integers_parse_strictly() {
    assert_eq!(parse_i64(b"-12"), Some(-12));
    assert_eq!(parse_i64(b"0"), Some(0));
    for bad in [
        &b""[..],
        b"+1",
        b"01",
        b" 1",
        b"1.0",
        b"99999999999999999999",
        b"-0",
    ] {
        assert_eq!(parse_i64(bad), None, "{bad:?}");
    }
}

#[test]
fn a_type_hint_changes_what_a_lookup_costs_never_what_it_finds() {
    let s = store();
    let past = std::num::NonZeroU64::new(1).unwrap();
    let far = std::num::NonZeroU64::new(u64::MAX / 2).unwrap();
    let hints = std::iter::once(None).chain(ks::TOP_LEVEL.into_iter().map(Some));
    let hints: Vec<Option<u8>> = hints.collect();
    let mut keys: Vec<Vec<u8>> = vec![b"absent".to_vec()];
    // A live key of each type, with and without a deadline; an expired one of each type;
    // and an expired record of each type beside a live one of each other type (a state
    // no write leaves, which the lookup must still answer as before: the live key wins).
    for (i, &tag) in ks::TOP_LEVEL.iter().enumerate() {
        let (live, dated, expired) = (
            format!("live{i}").into_bytes(),
            format!("dated{i}").into_bytes(),
            format!("expired{i}").into_bytes(),
        );
        let ops = [
            WriteOp::Put(&ks::top(tag, &live), b"1"),
            WriteOp::PutUntil(&ks::top(tag, &dated), b"1", far),
            WriteOp::PutUntil(&ks::top(tag, &expired), b"1", past),
        ];
        s.engine().write(&ops).unwrap();
        keys.extend([live, dated, expired]);
        for (j, &other) in ks::TOP_LEVEL.iter().enumerate().filter(|&(j, _)| j != i) {
            let both = format!("both{i}{j}").into_bytes();
            let (old, new) = (ks::top(tag, &both), ks::top(other, &both));
            let ops = [
                WriteOp::PutUntil(&old, b"1", past),
                WriteOp::Put(&new, b"1"),
            ];
            s.engine().write(&ops).unwrap();
            keys.push(both);
        }
    }
    for key in &keys {
        let plain = s.type_entry(key).unwrap();
        for &hint in &hints {
            assert_eq!(
                s.type_entry_hinted(key, hint).unwrap(),
                plain,
                "{} with hint {hint:?}",
                String::from_utf8_lossy(key)
            );
        }
    }
    assert_eq!(s.type_entry(b"live1").unwrap(), Some((HASH, None)));
    assert_eq!(s.type_entry(b"both01").unwrap(), Some((HASH, None)));
}

#[test]
fn get_string_now_tells_a_missing_key_from_one_of_another_type() {
    let s = store();
    let long = vec![b'k'; 300];
    let mut g = WriteGroup::new(&s);
    let set = SetOptions::default();
    g.set(b"s", b("v"), set).unwrap();
    g.hash_set(b"h", &[(b("f"), b("1"))]).unwrap();
    g.set_add(b"t", &[b("m")]).unwrap();
    g.hash_set(&long, &[(b("f"), b("1"))]).unwrap();
    g.set(b"gone", b("v"), set).unwrap();
    g.commit().unwrap();
    let mut g = WriteGroup::new(&s);
    g.delete(&[b("gone")]).unwrap();
    g.commit().unwrap();
    let counts = |s: &Store| {
        (
            s.counters.keyspace_hits.load(Ordering::Relaxed),
            s.counters.keyspace_misses.load(Ordering::Relaxed),
        )
    };
    let before = counts(&s);
    assert!(matches!(s.get_string_now(b"s").unwrap(), StringGet::Hot(v) if &v[..] == b"v"));
    for (k, other) in [
        (&b"h"[..], true),
        (b"t", true),
        (&long[..], true),
        (b"nope", false),
        (b"gone", false),
        (&[b'n'; 200][..], false),
    ] {
        assert!(
            matches!(s.get_string_now(k).unwrap(), StringGet::Missing { other_type } if other_type == other),
            "{k:?}"
        );
    }
    // A key of another type counts a hit (Redis finds it, then refuses its type).
    assert_eq!(counts(&s), (before.0 + 4, before.1 + 3));
}

#[test]
fn the_no_deadline_fast_path_follows_the_index() {
    let s = store();
    assert!(!s.may_have_deadlines());
    let mut g = WriteGroup::new(&s);
    g.set(b"plain", b("v"), SetOptions::default()).unwrap();
    g.commit().unwrap();
    assert!(
        !s.may_have_deadlines(),
        "a key without a deadline adds none"
    );
    set_expired(&s, b"old");
    assert!(s.may_have_deadlines());
    assert!(s.expired_now(b"old") && s.indexed(b"old"));
    assert!(!s.expired_now(b"plain"));
    // Purged: the index is empty again, and the fast path says so.
    let mut g = WriteGroup::new(&s);
    assert_eq!(g.purge_expired(&[b"old"]).unwrap().len(), 1);
    g.commit().unwrap();
    assert!(!s.may_have_deadlines());
    set_expired(&s, b"old");
    assert!(s.may_have_deadlines());
    flush_all(&s).unwrap();
    assert!(!s.may_have_deadlines(), "FLUSHALL empties the index");
}
