//! Garbage collection's moves are on the device with the engine's write lock free: while the
//! pages of a move batch are held back at the device, a client's `try_submit_write` and
//! `stats` return (with the moves written under the lock, as before, both waited for the
//! held pages), a read returns its value, and once the pages are let go every write is there.
//!
//! The device wrapper holds writes back *before* they reach the simulator (from the first
//! raw page of a move batch on, every later write to that segment waits its turn, so each
//! segment is still written in order), with tags of its own, so no completion is ever
//! delivered under a tag the simulator has since reused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hwftl_sim::{
    AppendDevice, Backend, Command, Completion, DeviceConfig, DeviceError, DeviceStats, Ftl,
    Geometry, Lba, RamStore, Rejected, SegmentId, SegmentInfo, Tag, Wait,
};
use lsm::{Engine, EngineConfig, Oldest, WriteOp};

use common::{assert_fsck_clean, small_geometry};

/// First bytes of every value the test writes: a page starting with them, written by the
/// maintenance thread, is a raw page of a garbage-collection move.
const MARK: &[u8; 8] = b"gc-move!";
const KEYS: u32 = 1024;

fn value(k: u32, round: u32) -> Vec<u8> {
    let mut v = vec![(k ^ round) as u8; 8192];
    v[..8].copy_from_slice(MARK);
    v[8..16].copy_from_slice(&(u64::from(k) << 32 | u64::from(round)).to_le_bytes());
    v
}

fn key(k: u32) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

#[derive(Default)]
struct HoldState {
    /// Segments whose writes are held: a write to one of them queues here (with its outer
    /// tag) instead of reaching the device, so each segment's writes stay in order.
    held_segments: HashSet<u64>,
    queued: VecDeque<(u32, Lba, Command)>,
    /// Device tag -> the tag handed out for it.
    outer: HashMap<u32, u32>,
}

/// Passes commands to the simulator under tags of its own; once armed, holds back the first
/// raw page of a move batch and every later write to its segment, until released.
struct HoldDevice {
    inner: Arc<Ftl>,
    armed: AtomicBool,
    /// Set once a move page was held.
    seen: AtomicBool,
    next_tag: AtomicU32,
    state: Mutex<HoldState>,
}

impl HoldDevice {
    fn new(inner: Arc<Ftl>) -> Self {
        HoldDevice {
            inner,
            armed: AtomicBool::new(false),
            seen: AtomicBool::new(false),
            next_tag: AtomicU32::new(1 << 20),
            state: Mutex::new(HoldState::default()),
        }
    }

    fn segment(&self, lba: Lba) -> u64 {
        lba.0 / u64::from(self.inner.geometry().pages_per_segment())
    }

    /// Lets the held writes reach the device, in order, and stops holding. The state lock is
    /// not held while waiting for a free tag (the poller needs it to translate completions).
    fn release(&self) {
        self.armed.store(false, SeqCst);
        loop {
            let mut s = self.state.lock().unwrap();
            let Some((outer, lba, cmd)) = s.queued.pop_front() else {
                s.held_segments.clear();
                return;
            };
            match self.inner.submit(cmd) {
                Ok(tag) => {
                    s.outer.insert(tag.0, outer);
                }
                Err(r) => match r.buf {
                    Some(buf) if matches!(r.error, DeviceError::QueueFull { .. }) => {
                        s.queued
                            .push_front((outer, lba, Command::Write { lba, buf }));
                        drop(s);
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    _ => panic!("a held write was refused: {}", r.error),
                },
            }
        }
    }
}

impl AppendDevice for HoldDevice {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn submit(&self, cmd: Command) -> Result<Tag, Rejected> {
        let outer = self.next_tag.fetch_add(1, SeqCst);
        let mut s = self.state.lock().unwrap();
        if let Command::Write { lba, buf } = &cmd {
            let lba = *lba;
            let is_move_page =
                buf[..8] == MARK[..] && std::thread::current().name() == Some("lsm-maint");
            if s.held_segments.is_empty() && self.armed.load(SeqCst) && is_move_page {
                s.held_segments.insert(self.segment(lba));
                self.seen.store(true, SeqCst);
            }
            if s.held_segments.contains(&self.segment(lba)) {
                s.queued.push_back((outer, lba, cmd));
                return Ok(Tag(outer));
            }
        }
        let tag = self.inner.submit(cmd)?;
        s.outer.insert(tag.0, outer);
        Ok(Tag(outer))
    }
    fn submit_many(&self, cmds: Vec<Command>) -> Vec<Result<Tag, Rejected>> {
        cmds.into_iter().map(|c| self.submit(c)).collect()
    }
    fn submit_and_reap(
        &self,
        cmds: Vec<Command>,
        out: &mut Vec<Completion>,
        max: usize,
        wait: Wait,
    ) -> (Vec<Result<Tag, Rejected>>, hwftl_sim::Result<usize>) {
        let tags = self.submit_many(cmds);
        (tags, self.reap(out, max, wait))
    }
    fn reap(&self, out: &mut Vec<Completion>, max: usize, wait: Wait) -> hwftl_sim::Result<usize> {
        // Reaped and translated under the state lock, so a device tag freed by this reap is
        // not handed to a new command (and mapped again) before its completion is translated;
        // waiting is a poll outside the lock.
        loop {
            let from = out.len();
            let mut s = self.state.lock().unwrap();
            let n = self.inner.reap(out, max, Wait::NoWait)?;
            for c in &mut out[from..] {
                let outer = s
                    .outer
                    .remove(&c.tag.0)
                    .expect("a completion of a command not submitted");
                c.tag = Tag(outer);
            }
            drop(s);
            if n > 0 || matches!(wait, Wait::NoWait) || self.inner.in_flight() == 0 {
                return Ok(n);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    fn execute(&self, cmd: Command) -> Result<Completion, Rejected> {
        if let Command::Write { lba, .. } = &cmd {
            // A synchronous write to a held segment waits for the held writes (append order).
            let segment = self.segment(*lba);
            while self.state.lock().unwrap().held_segments.contains(&segment) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.inner.execute(cmd)
    }
    fn segment_info(&self, segment: SegmentId) -> hwftl_sim::Result<SegmentInfo> {
        self.inner.segment_info(segment)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.state.lock().unwrap().queued.len()
    }
}

/// Runs `f` on a thread of its own and reports whether it returned within `limit`.
fn returns_within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (bool, std::thread::JoinHandle<T>) {
    let h = std::thread::spawn(f);
    let since = Instant::now();
    while !h.is_finished() && since.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(5));
    }
    (h.is_finished(), h)
}

#[test]
fn clients_go_on_while_garbage_collection_moves_are_on_the_device() {
    let g = small_geometry();
    let backend = Backend::Ram(RamStore::new());
    let ftl = Arc::new(Ftl::format(&backend, DeviceConfig::new(g)).unwrap());
    let hold = Arc::new(HoldDevice::new(ftl.clone()));
    let cfg = EngineConfig {
        memtable_bytes: 64 << 10,
        // The oldest segments first: they hold the half of the keys never overwritten, so
        // every reclaim moves values (the least-live policy would take segments of only
        // overwritten values and move nothing).
        gc_policy: Arc::new(Oldest),
        ..EngineConfig::default()
    };
    let db = Arc::new(Engine::open(hold.clone() as Arc<dyn AppendDevice>, cfg.clone()).unwrap());
    let write_round = |db: &Engine, round: u32, keys: std::ops::Range<u32>| {
        let vals: Vec<(Vec<u8>, Vec<u8>)> = keys.map(|k| (key(k), value(k, round))).collect();
        for chunk in vals.chunks(16) {
            let ops: Vec<WriteOp<'_>> = chunk.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
            db.write(&ops).unwrap();
        }
    };
    write_round(&db, 0, 0..KEYS);
    db.settle().unwrap();

    // Overwrite half the keys, round after round, until a move batch is held (the other
    // half's values are live in every victim, so every reclaim moves some).
    hold.armed.store(true, SeqCst);
    let last_round = Arc::new(AtomicU32::new(0));
    let writer = {
        let (db, last_round, hold) = (db.clone(), last_round.clone(), hold.clone());
        std::thread::spawn(move || {
            for round in 1..=40u32 {
                let vals: Vec<(Vec<u8>, Vec<u8>)> =
                    (0..KEYS / 2).map(|k| (key(k), value(k, round))).collect();
                for chunk in vals.chunks(16) {
                    let ops: Vec<WriteOp<'_>> =
                        chunk.iter().map(|(k, v)| WriteOp::Put(k, v)).collect();
                    db.write(&ops).unwrap();
                }
                last_round.store(round, SeqCst);
                if !hold.armed.load(SeqCst) && round >= 4 {
                    return round;
                }
            }
            40
        })
    };
    let since = Instant::now();
    while !hold.seen.load(SeqCst) {
        assert!(
            since.elapsed() < Duration::from_secs(60) && !writer.is_finished(),
            "garbage collection never moved a value: {:#?}",
            db.stats()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // Moves are held at the device. The write lock must be free.
    let (stats_back, stats) = {
        let db = db.clone();
        returns_within(Duration::from_secs(3), move || db.stats())
    };
    let (submit_back, submit) = {
        let db = db.clone();
        returns_within(Duration::from_secs(3), move || {
            let (k, v) = (key(KEYS - 1), value(KEYS - 1, 99));
            // Finished only after the release: it is applied after the moves before it.
            db.try_submit_write(&[WriteOp::Put(&k, &v)]).unwrap()
        })
    };
    let (read_back, read) = {
        let db = db.clone();
        returns_within(Duration::from_secs(3), move || {
            db.get(&key(KEYS - 2)).unwrap()
        })
    };
    hold.release();
    let stats = stats.join().unwrap();
    let submitted = submit.join().unwrap();
    let read = read.join().unwrap();
    let rounds = writer.join().unwrap();
    assert!(
        stats_back,
        "stats waited for garbage collection's moves on the device"
    );
    assert!(
        submit_back,
        "a client's try_submit_write waited for garbage collection's moves on the device"
    );
    assert!(read_back, "a read waited for garbage collection's moves");
    assert_eq!(read.as_deref(), Some(&value(KEYS - 2, 0)[..]));
    assert!(stats.gc_steps > 0, "{stats:#?}");
    let admitted = submitted.is_some();
    if let Some(p) = submitted {
        db.finish_write(p).unwrap();
    }

    db.settle().unwrap();
    let last = last_round.load(SeqCst);
    assert_eq!(last, rounds);
    let expect = |k: u32| {
        if k == KEYS - 1 && admitted {
            value(k, 99)
        } else if k < KEYS / 2 {
            value(k, last)
        } else {
            value(k, 0)
        }
    };
    for k in 0..KEYS {
        assert_eq!(db.get(&key(k)).unwrap(), Some(expect(k)), "key {k}");
    }
    let s = db.stats();
    assert!(s.gc_segments > 0, "{s:#?}");
    drop(db);
    // Everything survives a reopen, and the device checks clean.
    let ftl = Arc::new(Ftl::open(&backend, DeviceConfig::new(g)).unwrap());
    let db = Engine::open(ftl as Arc<dyn AppendDevice>, cfg.clone()).unwrap();
    for k in 0..KEYS {
        assert_eq!(
            db.get(&key(k)).unwrap(),
            Some(expect(k)),
            "key {k} after reopen"
        );
    }
    db.close().unwrap();
    assert_fsck_clean(&backend, DeviceConfig::new(g), cfg);
}
