//! `Engine::thread_reads`: a thread's own device read queue. Reads reserved by
//! `PendingLookup::reserve` go down it and finish on the thread that reaps them; pages the
//! device refuses for want of a tag go to the poller; a queue dropped with reads out
//! finishes them and gives their room in the read window back; the pages of a queue that
//! broke are read again on the shared queue.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hwftl_sim::{
    AppendDevice, Backend, Command, Completion, DeviceConfig, DeviceError, Ftl, RamStore, ReadRing,
    Rejected, Tag,
};
use lsm::{Engine, EngineConfig, Lookup, LookupNow, Probes, ThreadReads};

/// An engine without a value cache on a file device (`queue_depth` command tags), and
/// `n` keys whose values live on value pages (past the held-value limit): `k00` holds
/// bytes `0`, `k01` bytes `1`, ...
fn file_engine(dir: &std::path::Path, queue_depth: u32, n: usize) -> (Engine, Vec<Vec<u8>>) {
    let mut cfg = DeviceConfig::new(common::small_geometry());
    cfg.queue_depth = queue_depth;
    let ftl = Ftl::format(&Backend::File(dir.join("device.img")), cfg).unwrap();
    engine_with_keys(Arc::new(ftl), n)
}

/// An engine without a value cache on `dev`, and `n` keys as [`file_engine`] writes them.
fn engine_with_keys(dev: Arc<dyn AppendDevice>, n: usize) -> (Engine, Vec<Vec<u8>>) {
    let db = Engine::open(
        dev,
        EngineConfig {
            value_cache_bytes: 0,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("k{i:02}").into_bytes()).collect();
    for (i, k) in keys.iter().enumerate() {
        db.put(k, &value(i)).unwrap();
    }
    (db, keys)
}

fn value(i: usize) -> Vec<u8> {
    vec![i as u8; lsm::DEFAULT_ENTRY_VALUE_MAX + 1]
}

type Finished = (usize, std::thread::ThreadId, lsm::Result<Lookup>);

/// Reserves a cold read of every key, each reporting its index, the thread it finished
/// on and its result.
fn reserve_all(
    db: &Engine,
    keys: &[Vec<u8>],
    tx: &mpsc::Sender<Finished>,
) -> Vec<lsm::ReservedRead> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            let LookupNow::Pending(p) = db.lookup_now(&[k], Probes::NONE, None).unwrap() else {
                panic!("no cache: the page must be read");
            };
            let tx = tx.clone();
            p.reserve(Box::new(move |r| {
                tx.send((i, std::thread::current().id(), r)).unwrap()
            }))
            .unwrap()
        })
        .collect()
}

/// Reaps `q` until `n` reads have reported (some may finish on the poller).
fn collect(q: &mut ThreadReads, rx: &mpsc::Receiver<Finished>, n: usize) -> Vec<Finished> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} reads finished",
            got.len()
        );
        if q.reap() == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        got.extend(rx.try_iter());
    }
    got
}

#[test]
fn reads_on_a_thread_queue_finish_on_the_thread_that_reaps_them() {
    let dir = tempfile::tempdir().unwrap();
    let (db, keys) = file_engine(dir.path(), 256, 24);
    let mut q = db
        .thread_reads()
        .expect("a file device gives each thread a read queue");
    let (tx, rx) = mpsc::channel();
    q.submit(reserve_all(&db, &keys, &tx));
    assert_eq!(q.in_flight(), 24);
    let me = std::thread::current().id();
    for (i, thread, r) in collect(&mut q, &rx, keys.len()) {
        assert_eq!(thread, me, "read {i} finished on another thread");
        assert_eq!(r.unwrap().values[0].as_deref(), Some(&value(i)[..]));
    }
    assert_eq!(q.in_flight(), 0);
    assert!(db.read_window_fits(lsm::ASYNC_READ_WINDOW));
}

#[test]
fn pages_refused_for_want_of_a_tag_go_to_the_poller_and_still_finish() {
    let dir = tempfile::tempdir().unwrap();
    let (db, keys) = file_engine(dir.path(), 8, 24);
    let mut q = db.thread_reads().unwrap();
    let (tx, rx) = mpsc::channel();
    // 24 pages, 8 tags: 16 are refused by the queue and deferred to the poller.
    q.submit(reserve_all(&db, &keys, &tx));
    assert!(q.in_flight() <= 8);
    let mut seen = vec![false; keys.len()];
    for (i, _, r) in collect(&mut q, &rx, keys.len()) {
        let l = r.expect("no read fails for want of a tag");
        assert_eq!(l.values[0].as_deref(), Some(&value(i)[..]));
        seen[i] = true;
    }
    assert!(seen.iter().all(|&s| s));
    assert!(db.read_window_fits(lsm::ASYNC_READ_WINDOW));
}

#[test]
fn a_queue_dropped_with_reads_out_finishes_them_and_gives_the_window_back() {
    let dir = tempfile::tempdir().unwrap();
    let (db, keys) = file_engine(dir.path(), 256, 16);
    let (tx, rx) = mpsc::channel();
    {
        let mut q = db.thread_reads().unwrap();
        q.submit(reserve_all(&db, &keys, &tx));
    }
    for _ in 0..keys.len() {
        let (i, _, r) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(r.unwrap().values[0].as_deref(), Some(&value(i)[..]));
    }
    assert!(db.read_window_fits(lsm::ASYNC_READ_WINDOW));
}

#[test]
fn a_ram_device_has_no_thread_queue() {
    let ftl = Ftl::format(
        &Backend::Ram(RamStore::new()),
        DeviceConfig::new(common::small_geometry()),
    )
    .unwrap();
    let db = Engine::open(
        Arc::new(ftl) as Arc<dyn AppendDevice>,
        EngineConfig::default(),
    )
    .unwrap();
    assert!(db.thread_reads().is_none());
}

/// A file device whose threads' read queues break when `broken` is set: from then on each
/// says it is broken and every page it gives back has failed, as a kernel ring that failed
/// for good fails the pages it had not taken.
struct BreakingDevice {
    inner: Arc<Ftl>,
    broken: Arc<AtomicBool>,
}

struct BreakingRing {
    inner: Box<dyn ReadRing>,
    broken: Arc<AtomicBool>,
}

impl ReadRing for BreakingRing {
    fn submit(&mut self, cmds: Vec<Command>) -> Vec<Result<Tag, Rejected>> {
        assert!(
            !self.broken(),
            "nothing is submitted to a queue that says it broke"
        );
        self.inner.submit(cmds)
    }
    fn reap(&mut self, out: &mut Vec<Completion>) -> usize {
        let from = out.len();
        let n = self.inner.reap(out);
        if self.broken() {
            for c in &mut out[from..] {
                c.result = Err(DeviceError::Io {
                    context: "io_uring read".into(),
                    source: Arc::new(std::io::Error::other("the test broke the ring")),
                });
            }
        }
        n
    }
    fn event_fd(&self) -> std::os::fd::RawFd {
        self.inner.event_fd()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
    fn broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }
}

impl AppendDevice for BreakingDevice {
    fn geometry(&self) -> hwftl_sim::Geometry {
        self.inner.geometry()
    }
    fn submit(&self, cmd: Command) -> Result<Tag, Rejected> {
        self.inner.submit(cmd)
    }
    fn submit_many(&self, cmds: Vec<Command>) -> Vec<Result<Tag, Rejected>> {
        self.inner.submit_many(cmds)
    }
    fn queue_many(&self, cmds: Vec<Command>) -> Vec<Result<Tag, Rejected>> {
        self.inner.queue_many(cmds)
    }
    fn doorbell(&self) {
        self.inner.doorbell();
    }
    fn submit_and_reap(
        &self,
        cmds: Vec<Command>,
        out: &mut Vec<Completion>,
        max: usize,
        wait: hwftl_sim::Wait,
    ) -> (Vec<Result<Tag, Rejected>>, hwftl_sim::Result<usize>) {
        self.inner.submit_and_reap(cmds, out, max, wait)
    }
    fn reap(
        &self,
        out: &mut Vec<Completion>,
        max: usize,
        wait: hwftl_sim::Wait,
    ) -> hwftl_sim::Result<usize> {
        self.inner.reap(out, max, wait)
    }
    fn execute(&self, cmd: Command) -> Result<Completion, Rejected> {
        self.inner.execute(cmd)
    }
    fn execute_many(&self, cmds: Vec<Command>) -> Vec<Result<Completion, Rejected>> {
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
    fn read_ring(self: Arc<Self>) -> Option<Box<dyn ReadRing>> {
        let inner = self.inner.clone().read_ring()?;
        Some(Box::new(BreakingRing {
            inner,
            broken: self.broken.clone(),
        }))
    }
}

#[test]
fn the_pages_of_a_queue_that_broke_are_read_again_on_the_shared_queue() {
    let dir = tempfile::tempdir().unwrap();
    let ftl = Ftl::format(
        &Backend::File(dir.path().join("device.img")),
        DeviceConfig::new(common::small_geometry()),
    )
    .unwrap();
    let broken = Arc::new(AtomicBool::new(false));
    let dev = Arc::new(BreakingDevice {
        inner: Arc::new(ftl),
        broken: broken.clone(),
    });
    let (db, keys) = engine_with_keys(dev, 24);
    let mut q = db.thread_reads().unwrap();
    let (tx, rx) = mpsc::channel();
    q.submit(reserve_all(&db, &keys, &tx));
    assert_eq!(q.in_flight(), 24);
    // Every page on the queue comes back failed from here on.
    broken.store(true, Ordering::SeqCst);
    let me = std::thread::current().id();
    let mut seen = vec![false; keys.len()];
    for (i, thread, r) in collect(&mut q, &rx, keys.len()) {
        let l = r.unwrap_or_else(|e| panic!("read {i} failed with its queue: {e}"));
        assert_eq!(l.values[0].as_deref(), Some(&value(i)[..]));
        assert_ne!(thread, me, "read {i} was read again by the poller");
        seen[i] = true;
    }
    assert!(seen.iter().all(|&s| s));
    assert_eq!(q.in_flight(), 0);
    // Reads started after the break go to the shared queue directly.
    q.submit(reserve_all(&db, &keys, &tx));
    assert_eq!(q.in_flight(), 0);
    for (i, _, r) in collect(&mut q, &rx, keys.len()) {
        assert_eq!(r.unwrap().values[0].as_deref(), Some(&value(i)[..]));
    }
    assert!(db.read_window_fits(lsm::ASYNC_READ_WINDOW));
}
