//! Deadlines in keytable entries (`lsm::expiry`): expired keys are absent to every read at
//! once; compaction at the last level drops them (as the policy allows) and their values
//! become garbage that is counted exactly once — also when a retime made a newer version
//! point at the same value — so garbage collection takes the space back with no sweep.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::num::NonZeroU64;
use std::sync::Arc;

use common::{formatted_ram as setup, open_engine as open};
use hwftl_sim::Ftl;
use lsm::{Engine, EngineConfig, ExpiryPolicy, WriteOp};

/// Long past (1970): beyond compaction's grace.
fn past() -> NonZeroU64 {
    NonZeroU64::new(1).unwrap()
}

/// Far ahead (2100).
fn future() -> NonZeroU64 {
    NonZeroU64::new(4_102_444_800_000).unwrap()
}

fn config() -> EngineConfig {
    EngineConfig {
        memtable_bytes: 1 << 20,
        ..EngineConfig::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Keeps the entries of keys starting with `k` (as a hash header that owns fields).
#[derive(Debug)]
struct KeepK;

impl ExpiryPolicy for KeepK {
    fn may_drop(&self, key: &[u8]) -> bool {
        !key.starts_with(b"k")
    }
}

#[test]
fn expired_entries_are_hidden_then_dropped_and_their_space_counted_once() {
    let (backend, cfg) = setup();
    let ecfg = config();
    let db = open(&backend, cfg, &ecfg);
    let value = vec![7u8; 3000];
    let keys: Vec<Vec<u8>> = (0..200).map(key).collect();
    // Half expire long ago, a quarter far ahead, a quarter never.
    let ops: Vec<WriteOp<'_>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| match i % 4 {
            0 | 1 => WriteOp::PutUntil(k, &value, past()),
            2 => WriteOp::PutUntil(k, &value, future()),
            _ => WriteOp::Put(k, &value),
        })
        .collect();
    db.write(&ops).unwrap();
    // Hidden at once, before any flush: every read path agrees.
    let live = |i: usize| i % 4 >= 2;
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(db.get(k).unwrap().is_some(), live(i), "get {i}");
    }
    assert_eq!(db.count_keys(b"", None).unwrap(), 100);
    assert_eq!(db.range_keys(b"", None, usize::MAX).unwrap().len(), 100);
    assert_eq!(
        db.first_present_until(&[&keys[0], &keys[2]]).unwrap(),
        Some((1, Some(future())))
    );
    assert_eq!(
        db.first_written(&[&keys[0]]).unwrap(),
        Some((0, Some(past()))),
        "the entry of an expired key is still there"
    );
    let before = db.stats();
    db.flush().unwrap();
    db.compact_all().unwrap();
    let after = db.stats();
    assert_eq!(after.expired_dropped - before.expired_dropped, 100);
    assert_eq!(db.first_written(&[&keys[0]]).unwrap(), None, "dropped");
    // The dropped values are garbage: live bytes are the live keys' records.
    let record = lsm::vlog_format::stored_record_bytes(keys[0].len(), value.len());
    assert_eq!(
        after.live_bytes,
        100 * record,
        "garbage counted exactly once"
    );
    db.close().unwrap();
    common::assert_fsck_clean(&backend, cfg, ecfg.clone());
    let db = open(&backend, cfg, &ecfg);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(db.get(k).unwrap().is_some(), live(i), "after reopen {i}");
    }
    db.close().unwrap();
}

#[test]
fn a_retimed_value_outlives_its_expired_older_entry() {
    let (backend, cfg) = setup();
    let ecfg = config();
    let db = open(&backend, cfg, &ecfg);
    let value = vec![3u8; 5000];
    // Expired long ago, flushed and compacted down... but retimed (EXPIRE on a key the
    // caller saw live) before compaction reaches it: the memtable's version points at the
    // same value, which must stay live when the old entry goes.
    db.write(&[WriteOp::PutUntil(b"a", &value, past())])
        .unwrap();
    db.write(&[WriteOp::Put(b"b", &value)]).unwrap();
    db.flush().unwrap();
    db.write(&[WriteOp::Retime(b"a", Some(future()))]).unwrap();
    assert_eq!(
        db.get(b"a").unwrap().as_deref(),
        Some(&value[..]),
        "revived"
    );
    db.write(&[WriteOp::Retime(b"b", None)]).unwrap();
    db.write(&[WriteOp::Retime(b"missing", Some(future()))])
        .unwrap();
    assert_eq!(
        db.get(b"missing").unwrap(),
        None,
        "a retime creates nothing"
    );
    db.compact_all().unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    let record = lsm::vlog_format::stored_record_bytes(1, value.len());
    assert_eq!(
        db.stats().live_bytes,
        2 * record,
        "both values live, once each"
    );
    assert_eq!(
        db.first_present_until(&[b"a"]).unwrap(),
        Some((0, Some(future())))
    );
    // Overwritten: the value dies once, though two versions pointed at it.
    db.put(b"a", b"new").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    let small = lsm::vlog_format::stored_record_bytes(1, 3);
    assert_eq!(db.stats().live_bytes, record + small);
    db.close().unwrap();
    common::assert_fsck_clean(&backend, cfg, ecfg);
}

#[test]
fn the_policy_keeps_what_it_refuses_and_reads_still_hide_it() {
    let (backend, cfg) = setup();
    let ecfg = EngineConfig {
        expiry_policy: Arc::new(KeepK),
        ..config()
    };
    let db = open(&backend, cfg, &ecfg);
    db.write(&[
        WriteOp::PutUntil(b"kept", b"v", past()),
        WriteOp::PutUntil(b"gone", b"v", past()),
    ])
    .unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    assert_eq!(db.get(b"kept").unwrap(), None, "hidden");
    assert_eq!(
        db.first_written(&[b"kept"]).unwrap(),
        Some((0, Some(past())))
    );
    assert_eq!(db.first_written(&[b"gone"]).unwrap(), None);
    assert_eq!(db.stats().expired_dropped, 1);
    db.close().unwrap();
}

#[test]
fn retimes_survive_a_power_cut_before_any_flush() {
    let (backend, cfg) = setup();
    let ecfg = config();
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl.clone(), ecfg.clone()).unwrap();
    let long_key = vec![b'L'; 5000];
    db.put(b"a", b"1").unwrap();
    db.put(&long_key, b"2").unwrap();
    db.flush().unwrap();
    // Only in the log's tail: a retime of a flushed key (short and long), a put with a
    // deadline, and a deadline removed again.
    db.write(&[WriteOp::Retime(b"a", Some(future()))]).unwrap();
    db.write(&[WriteOp::Retime(&long_key, Some(past()))])
        .unwrap();
    db.write(&[WriteOp::PutUntil(b"c", b"3", future())])
        .unwrap();
    db.write(&[WriteOp::PutUntil(b"d", b"4", future())])
        .unwrap();
    db.write(&[WriteOp::Retime(b"d", None)]).unwrap();
    ftl.power_cut();
    drop(db);
    drop(ftl);
    let db = open(&backend, cfg, &ecfg);
    assert!(db.stats().replayed_records >= 5);
    assert_eq!(
        db.first_present_until(&[b"a"]).unwrap(),
        Some((0, Some(future())))
    );
    assert_eq!(db.get(&long_key).unwrap(), None, "expired by its retime");
    assert_eq!(
        db.first_present_until(&[b"c"]).unwrap(),
        Some((0, Some(future())))
    );
    assert_eq!(db.first_present_until(&[b"d"]).unwrap(), Some((0, None)));
    assert_eq!(db.get(b"d").unwrap().as_deref(), Some(&b"4"[..]));
    db.close().unwrap();
    common::assert_fsck_clean(&backend, cfg, ecfg);
}

/// A put with a deadline of a long key (its key in raw pages, its retime a long record)
/// wherever the packed page it starts on ends: the retime's larger record always finds
/// room (it once refused the batch as corrupt when the page had room for a delete's).
#[test]
fn long_keys_take_deadlines_wherever_the_page_ends() {
    let (backend, cfg) = setup();
    let ecfg = config();
    let db = open(&backend, cfg, &ecfg);
    let long = vec![b'L'; 5000];
    // A small put first fills the batch's packed page to within 40-100 bytes of its end.
    for filler in 8043..8104usize {
        let v = vec![1u8; filler];
        db.write(&[
            WriteOp::Put(b"s", &v),
            WriteOp::PutUntil(&long, b"value", future()),
        ])
        .unwrap_or_else(|e| panic!("filler {filler}: {e}"));
        assert_eq!(
            db.first_present_until(&[&long]).unwrap(),
            Some((0, Some(future()))),
            "filler {filler}"
        );
    }
    db.close().unwrap();
    common::assert_fsck_clean(&backend, cfg, ecfg);
}

/// A store full of expired values takes writes: a put refused for capacity first has the
/// maintenance thread compact every level, which drops the expired entries, and garbage
/// collection takes their space back. The same load without deadlines is refused.
#[test]
fn expired_values_never_hold_a_full_store_shut() {
    let run = |deadline: Option<NonZeroU64>| -> (Result<(), lsm::EngineError>, u64) {
        let (backend, cfg) = setup();
        let ecfg = EngineConfig {
            // Flushes pile up in L0 with no compaction due: the expired entries are all
            // still there when a put is first refused.
            l0_runs: 1_000,
            l0_stop_runs: 2_000,
            overprovision_percent: 50,
            ..EngineConfig::default()
        };
        let db = open(&backend, cfg, &ecfg);
        let value = vec![5u8; 3000];
        let mut result = Ok(());
        // About three times the user capacity (~14 MiB on this geometry).
        for i in 0..15_000 {
            let k = key(i);
            let op = match deadline {
                Some(d) => WriteOp::PutUntil(&k, &value, d),
                None => WriteOp::Put(&k, &value),
            };
            if let Err(e) = db.write(&[op]) {
                result = Err(e);
                break;
            }
        }
        let compactions = db.stats().expiry_compactions;
        let st = db.stats();
        eprintln!(
            "deadline {deadline:?}: {result:?}, capacity {}, live {}, flushes {}, compactions {}, expired_dropped {}, expiry_compactions {}, gc {}",
            st.user_capacity_bytes, st.live_bytes, st.flushes, st.compactions, st.expired_dropped, st.expiry_compactions, st.gc_segments
        );
        db.close().unwrap();
        common::assert_fsck_clean(&backend, cfg, ecfg);
        (result, compactions)
    };
    let (r, compactions) = run(Some(past()));
    assert!(r.is_ok(), "expired values held the store shut: {r:?}");
    assert!(compactions >= 1, "no compaction for expired entries ran");
    let (r, _) = run(None);
    assert!(
        matches!(r, Err(lsm::EngineError::CapacityFull { .. })),
        "the load is past the capacity: {r:?}"
    );
}
