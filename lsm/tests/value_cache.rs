//! The value cache (`EngineConfig::value_cache_bytes`): writes fill it, reads served from it
//! touch no device page, a corrupt page never enters it, and it stays coherent while
//! garbage collection moves values and segments are trimmed and reused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, EngineError};
use rand::{Rng, SeedableRng};

use common::small_geometry;

const MIB: u64 = 1 << 20;

fn cached(bytes: u64) -> EngineConfig {
    EngineConfig {
        value_cache_bytes: bytes,
        ..EngineConfig::default()
    }
}

fn device() -> Arc<Ftl> {
    Arc::new(
        Ftl::format(
            &Backend::Ram(RamStore::new()),
            DeviceConfig::new(small_geometry()),
        )
        .unwrap(),
    )
}

#[test]
fn written_values_read_back_from_dram() {
    let ftl = device();
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(4 * MIB)).unwrap();
    for i in 0..200u32 {
        db.put(
            format!("k{i}").as_bytes(),
            &vec![i as u8; 100 + i as usize * 40],
        )
        .unwrap();
    }
    let reads_before = ftl.stats().reads;
    for i in 0..200u32 {
        let v = db.get(format!("k{i}").as_bytes()).unwrap().unwrap();
        assert_eq!(v, vec![i as u8; 100 + i as usize * 40]);
    }
    assert_eq!(
        ftl.stats().reads,
        reads_before,
        "values just written were read from the device"
    );
    let c = db.value_cache_stats().unwrap();
    assert!(c.hits >= 200 && c.misses == 0, "{c:?}");

    // Without a cache the same reads go to the device.
    drop(db);
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(0)).unwrap();
    assert!(db.value_cache_stats().is_none());
    let reads_before = ftl.stats().reads;
    assert!(db.get(b"k7").unwrap().is_some());
    assert!(ftl.stats().reads > reads_before);
}

#[test]
fn reads_fill_the_cache_and_the_second_read_is_free() {
    let ftl = device();
    {
        let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(0)).unwrap();
        db.put(b"small", b"tiny value").unwrap();
        db.put(b"big", &vec![0xab; 20_000]).unwrap();
        db.close().unwrap();
    }
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(4 * MIB)).unwrap();
    let keys: [&[u8]; 2] = [b"small", b"big"];
    let first = db.multi_get(&keys).unwrap();
    let reads = ftl.stats().reads;
    let second = db.multi_get(&keys).unwrap();
    assert_eq!(first, second);
    assert_eq!(second[1].as_deref(), Some(&vec![0xab; 20_000][..]));
    assert_eq!(
        ftl.stats().reads,
        reads,
        "the second read went to the device"
    );

    // The asynchronous path uses the same cache.
    let (tx, rx) = std::sync::mpsc::channel();
    db.multi_get_async(
        &keys,
        Box::new(move |r| {
            tx.send(r.map(|v| {
                v.into_iter()
                    .map(|b| b.map(|b| b.to_vec()))
                    .collect::<Vec<_>>()
            }))
            .unwrap();
        }),
    );
    assert_eq!(rx.recv().unwrap().unwrap(), second);
    assert_eq!(ftl.stats().reads, reads);
}

#[test]
fn a_corrupt_page_never_enters_the_cache() {
    let ftl = device();
    {
        let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(0)).unwrap();
        db.put(b"small", &[7u8; 100]).unwrap();
        db.put(b"big", &vec![0x5a; 8192]).unwrap();
        db.close().unwrap();
    }
    let lba = |page| common::first_log_page(&ftl, page);
    // The packed page of "small" and the raw page of "big" (see read_faults.rs).
    ftl.corrupt_page(lba(0), 200).unwrap();
    ftl.corrupt_page(lba(2), 4000).unwrap();
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(4 * MIB)).unwrap();
    for _ in 0..3 {
        assert!(matches!(db.get(b"small"), Err(EngineError::Corrupt(_))));
        assert!(matches!(db.get(b"big"), Err(EngineError::Corrupt(_))));
    }
    let c = db.value_cache_stats().unwrap();
    assert_eq!(
        c.inserts, 0,
        "a page that failed its check was cached: {c:?}"
    );
    assert_eq!(db.stats().read_checksum_failures, 6);
}

#[test]
fn the_cache_stays_coherent_while_gc_moves_values_and_reuses_segments() {
    let ftl = device();
    // A cache larger than every page this test writes: nothing is ever evicted, so the
    // pages of reclaimed and reused segments stay cached, and a stale one would be found
    // if the addressing argument (see `lsm::cache`) were wrong.
    let db = Engine::open(
        ftl.clone() as Arc<dyn AppendDevice>,
        EngineConfig {
            memtable_bytes: 16 << 10,
            ..cached(320 * MIB)
        },
    )
    .unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(20_261_125);
    let capacity = db.stats().user_capacity_bytes;
    let keys = 64u32;
    // Cold keys, written once among the hot ones (so most segments hold one): garbage
    // collection moves them into reused segments, where a cache keyed by device address
    // would still hold the segment's earlier pages.
    let cold_all: Vec<(Vec<u8>, Vec<u8>)> = (0..400u32)
        .map(|i| (format!("cold{i:03}").into_bytes(), vec![i as u8; 700]))
        .collect();
    let mut cold = 0;
    // Overwrite a small keyspace many times over the device's size, reading as we go.
    let mut written = 0u64;
    let mut round = 0u32;
    while written < capacity * 2 {
        round += 1;
        if round % 8 == 0 && cold < cold_all.len() {
            let (k, v) = &cold_all[cold];
            db.put(k, v).unwrap();
            cold += 1;
        }
        if round % 64 == 0 {
            for (k, v) in &cold_all[..cold] {
                assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "round {round}");
            }
        }
        let k = format!("key{:03}", rng.gen_range(0..keys)).into_bytes();
        if rng.gen_bool(0.1) {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let len = rng.gen_range(16..3000);
            let v: Vec<u8> = (0..len).map(|i| (round as usize + i) as u8).collect();
            db.put(&k, &v).unwrap();
            written += v.len() as u64;
            model.insert(k, v);
        }
        let probe = format!("key{:03}", rng.gen_range(0..keys)).into_bytes();
        assert_eq!(
            db.get(&probe).unwrap(),
            model.get(&probe).cloned(),
            "round {round}"
        );
    }
    db.settle().unwrap();
    for i in 0..keys {
        let k = format!("key{i:03}").into_bytes();
        assert_eq!(db.get(&k).unwrap(), model.get(&k).cloned(), "key {i}");
    }
    let s = db.stats();
    assert!(s.gc_segments > 0, "garbage collection never ran: {s:?}");
    let c = db.value_cache_stats().unwrap();
    assert!(c.hits > 1000 && c.evictions == 0, "{c:?}");
}

/// The value a cold [`lsm::GetNow`] reads from the device.
fn read_cold(db: &Engine, p: lsm::PendingLookup) -> Option<bytes::Bytes> {
    let (tx, rx) = std::sync::mpsc::channel();
    let read = p
        .reserve(Box::new(move |r| tx.send(r.unwrap()).unwrap()))
        .unwrap();
    db.submit_reads(vec![read]);
    let mut found = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the read completes");
    assert_eq!(found.values.len(), 1);
    found.values.pop().flatten()
}

/// `Engine::get_now` (the drive's GET) answers exactly what `get` answers: a value DRAM
/// holds at once (every value here, one page or several, as nothing is evicted), a missing
/// or deleted key as having no value; without a cache, only held values at once and the
/// others by the read it resolved.
#[test]
fn get_now_agrees_with_get_hot_or_cold() {
    let ftl = device();
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(64 * MIB)).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for round in 0..2_000u32 {
        let k = format!("k{}", rng.gen_range(0..300u32)).into_bytes();
        if rng.gen_bool(0.1) {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            // Mostly packed and one-page values, some spanning pages.
            let len = if rng.gen_bool(0.1) {
                9_000
            } else {
                rng.gen_range(1..5_000)
            };
            let v = vec![(round % 251) as u8; len];
            db.put(&k, &v).unwrap();
            model.insert(k.clone(), v);
        }
        let probe = format!("k{}", rng.gen_range(0..300u32)).into_bytes();
        match (db.get_now(&probe, &[]).unwrap(), model.get(&probe)) {
            (lsm::GetNow::Hot(got), Some(want)) => assert_eq!(&got[..], &want[..]),
            (lsm::GetNow::NoValue { .. }, None) => {}
            (lsm::GetNow::Cold(_), Some(want)) => panic!(
                "a value of {} bytes was not found in DRAM: {:?}",
                want.len(),
                db.value_cache_stats()
            ),
            (_, want) => panic!("get_now disagrees with the model ({want:?})"),
        }
    }
    // Without a cache only the values held with their entries are hot; the others are
    // read, from the lookup get_now resolved.
    drop(db);
    let db = Engine::open(ftl as Arc<dyn AppendDevice>, cached(0)).unwrap();
    for (k, v) in &model {
        match db.get_now(k, &[]).unwrap() {
            lsm::GetNow::Hot(got) => {
                assert!(got[..] == v[..] && v.len() <= lsm::DEFAULT_ENTRY_VALUE_MAX);
            }
            lsm::GetNow::Cold(p) => {
                assert!(v.len() > lsm::DEFAULT_ENTRY_VALUE_MAX);
                assert_eq!(read_cold(&db, *p).as_deref(), Some(&v[..]));
            }
            lsm::GetNow::NoValue { .. } => panic!("a live key has no value"),
        }
    }
}

/// Small writes fill the cache with their packed pages cut to the records (not 8 KiB of
/// padding each), so a cache of a few pages keeps thousands of them; a raw value's page is
/// never cut, even when its bytes look like a packed page's header.
#[test]
fn packed_pages_are_cut_and_raw_pages_kept_whole() {
    let ftl = device();
    // A value whose first page starts like a packed page: the magic "VL" at bytes 4..6 and
    // a small `used` at 6..8.
    let mut lookalike = vec![0x5a; 3 * 8192 + 100];
    lookalike[4..6].copy_from_slice(&0x4c56u16.to_le_bytes());
    lookalike[6..8].copy_from_slice(&64u16.to_le_bytes());
    let single = lookalike[..5000].to_vec();
    {
        let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(64 * 8192)).unwrap();
        for i in 0..2000u32 {
            db.put(format!("small{i}").as_bytes(), format!("v{i}").as_bytes())
                .unwrap();
        }
        let c = db.value_cache_stats().unwrap();
        assert!(
            c.evictions < 200,
            "2,000 one-record pages fit 64 pages' worth: {c:?}"
        );
        let reads = ftl.stats().reads;
        for i in 0..2000u32 {
            let v = db.get(format!("small{i}").as_bytes()).unwrap().unwrap();
            assert_eq!(v, format!("v{i}").as_bytes());
        }
        assert!(
            ftl.stats().reads - reads < 200,
            "{:?}",
            db.value_cache_stats()
        );
        // Written (the write fills the cache) and read back from it.
        db.put(b"lookalike", &lookalike).unwrap();
        db.put(b"single", &single).unwrap();
        assert_eq!(db.get(b"lookalike").unwrap().unwrap(), lookalike);
        assert_eq!(db.get(b"single").unwrap().unwrap(), single);
        db.close().unwrap();
    }
    // Read from the device (the read fills the cache), then from the cache.
    let db = Engine::open(ftl.clone() as Arc<dyn AppendDevice>, cached(64 * 8192)).unwrap();
    for _ in 0..2 {
        assert_eq!(db.get(b"lookalike").unwrap().unwrap(), lookalike);
        assert_eq!(db.get(b"single").unwrap().unwrap(), single);
        let Ok(lsm::GetNow::Hot(v)) = db.get_now(b"single", &[]) else {
            panic!("a value read once is answered from the cache");
        };
        assert_eq!(&v[..], &single[..]);
    }
}

/// A device that counts the calls the engine makes into it, and passes them on.
struct CallCounting {
    inner: Arc<Ftl>,
    calls: std::sync::atomic::AtomicU64,
}

impl CallCounting {
    fn count(&self) {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    fn calls(&self) -> u64 {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl AppendDevice for CallCounting {
    fn geometry(&self) -> hwftl_sim::Geometry {
        self.inner.geometry()
    }
    fn submit(&self, cmd: hwftl_sim::Command) -> Result<hwftl_sim::Tag, hwftl_sim::Rejected> {
        self.count();
        self.inner.submit(cmd)
    }
    fn submit_many(
        &self,
        cmds: Vec<hwftl_sim::Command>,
    ) -> Vec<Result<hwftl_sim::Tag, hwftl_sim::Rejected>> {
        self.count();
        self.inner.submit_many(cmds)
    }
    fn queue_many(
        &self,
        cmds: Vec<hwftl_sim::Command>,
    ) -> Vec<Result<hwftl_sim::Tag, hwftl_sim::Rejected>> {
        self.count();
        self.inner.queue_many(cmds)
    }
    fn doorbell(&self) {
        self.count();
        self.inner.doorbell();
    }
    fn submit_and_reap(
        &self,
        cmds: Vec<hwftl_sim::Command>,
        out: &mut Vec<hwftl_sim::Completion>,
        max: usize,
        wait: hwftl_sim::Wait,
    ) -> (
        Vec<Result<hwftl_sim::Tag, hwftl_sim::Rejected>>,
        hwftl_sim::Result<usize>,
    ) {
        self.inner.submit_and_reap(cmds, out, max, wait)
    }
    fn reap(
        &self,
        out: &mut Vec<hwftl_sim::Completion>,
        max: usize,
        wait: hwftl_sim::Wait,
    ) -> hwftl_sim::Result<usize> {
        self.inner.reap(out, max, wait)
    }
    fn execute(
        &self,
        cmd: hwftl_sim::Command,
    ) -> Result<hwftl_sim::Completion, hwftl_sim::Rejected> {
        self.count();
        self.inner.execute(cmd)
    }
    fn execute_many(
        &self,
        cmds: Vec<hwftl_sim::Command>,
    ) -> Vec<Result<hwftl_sim::Completion, hwftl_sim::Rejected>> {
        self.count();
        self.inner.execute_many(cmds)
    }
    fn segment_info(
        &self,
        segment: hwftl_sim::SegmentId,
    ) -> hwftl_sim::Result<hwftl_sim::SegmentInfo> {
        self.inner.segment_info(segment)
    }
    fn stats(&self) -> hwftl_sim::DeviceStats {
        self.inner.stats()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
    fn free_tags(&self) -> Option<usize> {
        self.inner.free_tags()
    }
}

/// A read that DRAM answers whole makes no call into the device at all: not even an empty
/// one, which would ring the doorbell and hand over pages that writers (the network thread's
/// groups, plp) hold back on purpose to submit together.
#[test]
fn reads_that_dram_answers_make_no_device_call() {
    let dev = Arc::new(CallCounting {
        inner: device(),
        calls: Default::default(),
    });
    let db = Engine::open(dev.clone() as Arc<dyn AppendDevice>, cached(4 * MIB)).unwrap();
    for i in 0..50u32 {
        db.put(format!("k{i}").as_bytes(), &vec![i as u8; 300])
            .unwrap();
    }
    db.put(b"big", &vec![7u8; 20_000]).unwrap();
    let before = dev.calls();
    for i in 0..50u32 {
        let k = format!("k{i}");
        assert_eq!(
            db.get_written(k.as_bytes()).unwrap(),
            Some(vec![i as u8; 300])
        );
    }
    let keys: Vec<&[u8]> = vec![b"k1", b"big", b"k2", b"missing"];
    let got = db.multi_get(&keys).unwrap();
    assert_eq!(got[1].as_deref(), Some(&vec![7u8; 20_000][..]));
    assert!(got[3].is_none());
    assert_eq!(
        dev.calls(),
        before,
        "reads served from the value cache called into the device"
    );
    // A read the cache cannot serve still goes to the device (the counter sees calls).
    drop(db);
    let db = Engine::open(dev.clone() as Arc<dyn AppendDevice>, cached(0)).unwrap();
    let before = dev.calls();
    assert!(db.get_written(b"k3").unwrap().is_some());
    assert!(dev.calls() > before);
}
