//! `EngineConfig::ack_from_dram` (the drive's plp mode): a client write is acknowledged once
//! it is in the memtable and the landing buffer, before its pages reach the device.
//!
//! The device wrapper (`common::HoldDevice`) holds every page write submitted through the
//! queue (the write pipeline's path) back *before* it reaches the simulator, with tags of
//! its own, until the test lets the writes go, or fails them. So these tests see:
//! - a write acknowledged while its pages are nowhere on the device, and read back (point,
//!   multi-key, DRAM-only and asynchronous reads) from the landing buffer;
//! - `Engine::sync` landing everything, after which a power cut loses nothing;
//! - a page that fails after its write was acknowledged stopping writes with
//!   `AcknowledgedWriteLost`, while reads go on.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore, TimingModel};
use lsm::{Engine, EngineConfig, EngineError, Probes};

use common::{small_geometry, HoldDevice};

fn config() -> EngineConfig {
    EngineConfig {
        flush_writes: false,
        ack_from_dram: true,
        // No value cache: a page not on the device can only come from the landing buffer.
        value_cache_bytes: 0,
        // Values above the held-value limit: a read needs the page.
        entry_value_max: 0,
        ..EngineConfig::default()
    }
}

fn value(k: u32) -> Vec<u8> {
    (0..3000u32).map(|i| (i * 31 + k * 7) as u8).collect()
}

fn key(k: u32) -> Vec<u8> {
    format!("key{k:04}").into_bytes()
}

/// Runs `f` on a thread of its own and returns its result, or panics after `limit`.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not return within {limit:?}"))
}

fn open(backend: &Backend, cfg: DeviceConfig) -> (Arc<HoldDevice>, Arc<Engine>) {
    open_with(backend, cfg, config())
}

fn open_with(
    backend: &Backend,
    cfg: DeviceConfig,
    ecfg: EngineConfig,
) -> (Arc<HoldDevice>, Arc<Engine>) {
    // Once armed, every write submitted through the queue is held.
    let dev = Arc::new(HoldDevice::new(
        Arc::new(Ftl::open(backend, cfg).unwrap()),
        false,
        Box::new(|_| true),
    ));
    let engine = Engine::open(dev.clone() as Arc<dyn AppendDevice>, ecfg).unwrap();
    (dev, Arc::new(engine))
}

fn is_lost(r: lsm::Result<()>) -> bool {
    matches!(r, Err(EngineError::AcknowledgedWriteLost { .. }))
}

#[test]
fn writes_are_acknowledged_and_read_back_before_their_pages_land() {
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig::new(small_geometry());
    drop(Ftl::format(&backend, cfg).unwrap());
    let (dev, db) = open(&backend, cfg);
    db.put(b"before", &value(9999)).unwrap();
    db.sync().unwrap();

    dev.armed.store(true, SeqCst);
    let writer = db.clone();
    within(
        Duration::from_secs(10),
        "writes with their pages held",
        move || {
            for k in 0..20 {
                writer.put(&key(k), &value(k)).unwrap();
            }
        },
    );
    assert!(dev.held() > 0, "the pages must still be held at the device");
    let s = db.stats();
    assert!(s.landing_pages > 0, "{s:?}");

    // Every read path finds the values in DRAM.
    for k in 0..20 {
        assert_eq!(
            db.get(&key(k)).unwrap().as_deref(),
            Some(&value(k)[..]),
            "key {k}"
        );
        let Ok(lsm::GetNow::Hot(v)) = db.get_now(&key(k), &[]) else {
            panic!("key {k}: not answered from DRAM");
        };
        assert_eq!(&v[..], &value(k)[..], "key {k}");
    }
    let keys: Vec<Vec<u8>> = (0..20).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let got = db.multi_get(&refs).unwrap();
    for (k, v) in got.iter().enumerate() {
        assert_eq!(v.as_deref(), Some(&value(k as u32)[..]));
    }
    let cached = db
        .lookup_cached(&refs, Probes::NONE, None)
        .unwrap()
        .expect("every page is in DRAM");
    assert_eq!(cached.values.len(), 20);
    let (tx, rx) = mpsc::channel();
    db.multi_get_async(
        &refs,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(got[7].as_deref(), Some(&value(7)[..]));
    // A page that had landed before still comes from the device.
    assert_eq!(
        db.get(b"before").unwrap().as_deref(),
        Some(&value(9999)[..])
    );
    assert!(db.stats().landing_hits > 0);

    // `sync` waits for the pages: it cannot return while they are held.
    let syncer = db.clone();
    let sync = std::thread::spawn(move || syncer.sync());
    std::thread::sleep(Duration::from_millis(200));
    assert!(!sync.is_finished(), "sync returned with pages still held");
    dev.release(false);
    sync.join().unwrap().unwrap();
    assert_eq!(db.stats().landing_pages, 0);

    // Landed, then cut: everything acknowledged is there after recovery.
    dev.inner.power_cut();
    drop(db);
    let (_dev, db) = open(&backend, cfg);
    for k in 0..20 {
        assert_eq!(
            db.get(&key(k)).unwrap().as_deref(),
            Some(&value(k)[..]),
            "key {k}"
        );
    }
}

#[test]
fn a_page_failing_after_its_acknowledgement_stops_writes() {
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig::new(small_geometry());
    drop(Ftl::format(&backend, cfg).unwrap());
    // With the value cache on: it takes the batch's pages when the batch is applied.
    let ecfg = EngineConfig {
        value_cache_bytes: 1 << 20,
        ..config()
    };
    let (dev, db) = open_with(&backend, cfg, ecfg.clone());
    db.put(b"before", &value(1)).unwrap();
    db.sync().unwrap();

    dev.armed.store(true, SeqCst);
    let writer = db.clone();
    within(
        Duration::from_secs(10),
        "a write with its pages held",
        move || {
            writer.put(b"doomed", &value(2)).unwrap();
        },
    );
    assert_eq!(db.get(b"doomed").unwrap().as_deref(), Some(&value(2)[..]));
    // Its page may still be the shared open page: the maintenance thread seals it within
    // `OPEN_PAGE_LINGER`, and then the device holds it.
    within(Duration::from_secs(10), "the page reaching the device", {
        let dev = dev.clone();
        move || {
            while dev.held() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    dev.release(true);
    // The failure is found when the batch is retired (by the next writer, or a sync).
    let err = within(Duration::from_secs(10), "sync after a failed page", {
        let db = db.clone();
        move || db.sync()
    })
    .unwrap_err();
    assert!(
        matches!(err, EngineError::AcknowledgedWriteLost { .. }),
        "{err}"
    );
    let err = db.put(b"after", &value(3)).unwrap_err();
    assert!(
        matches!(err, EngineError::AcknowledgedWriteLost { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("restart"), "{err}");
    // Nothing more is written: no flush, no manifest (the checkpoint stays before the hole).
    assert!(is_lost(db.flush()));
    // Reads go on; the lost value is not served from the cache.
    assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&value(1)[..]));
    assert!(db.get(b"doomed").is_err(), "the lost value was served");
    let db = Arc::try_unwrap(db).ok().expect("one owner");
    assert!(is_lost(db.close()), "close must not flush past the hole");
    drop(dev);
    // The restart recovers the log up to the failed page: the write is gone, not corrupt.
    let (_dev, db) = open_with(&backend, cfg, ecfg);
    assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&value(1)[..]));
    assert_eq!(db.get(b"doomed").unwrap(), None);
    db.put(b"after", &value(3)).unwrap();
}

#[test]
fn sync_lands_concurrent_writers_on_a_slow_device_before_a_power_cut() {
    let backend = Backend::Ram(RamStore::new());
    let mut cfg = DeviceConfig::new(small_geometry());
    // Real page-program times: pages are in flight while writers are answered.
    cfg.timing = TimingModel::PaperCard;
    cfg.release = hwftl_sim::Release::WallClock;
    drop(Ftl::format(&backend, cfg).unwrap());
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Arc::new(Engine::open(ftl.clone() as Arc<dyn AppendDevice>, config()).unwrap());
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..150u32 {
                    let k = w * 1000 + i;
                    db.put(&key(k), &value(k)).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    db.sync().unwrap();
    ftl.power_cut();
    drop(db);
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl as Arc<dyn AppendDevice>, config()).unwrap();
    for w in 0..4u32 {
        for i in 0..150u32 {
            let k = w * 1000 + i;
            assert_eq!(
                db.get(&key(k)).unwrap().as_deref(),
                Some(&value(k)[..]),
                "key {k}"
            );
        }
    }
}
