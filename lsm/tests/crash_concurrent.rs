//! The fault matrix: power cuts at device commands under a multi-writer workload. Four
//! threads write pipelined batches, with flushes, compactions and garbage collection running
//! on the maintenance thread, until a power cut armed at a random device command hits. After
//! each cut the offline check (`Engine::fsck`) must find the device clean, and after each
//! recovery every write any thread saw acknowledged is there with its exact bytes, nothing
//! else is (no lost or resurrected key), and each thread's batch that the cut failed is there
//! whole or not at all.
//!
//! The cases (see [`matrix`]):
//! - **media**: the RAM backend and the io_uring file backend (a real file, O_DIRECT);
//! - **durability**: `sync` (a device flush before each acknowledgement), on devices with
//!   and without a volatile write cache (RAM only: a file cannot undo a completed write), and
//!   `plp` (acknowledged at device completion, on a device whose completed writes survive
//!   the cut);
//! - **faults during garbage collection**, armed on the value-log segments garbage
//!   collection may pick before the load starts:
//!   - *read errors*: some pages fail a few reads (fewer than the engine's ten attempts:
//!     garbage collection must read them again and go on), some fail every read (the victim
//!     must be refused and left in place); the device forgets them at the cut;
//!   - *bit flips*: a bit of a page is flipped on the media (garbage collection must refuse
//!     a victim whose packed page or live value fails its checksum). Each flip is undone
//!     after the cut if its log segment is still in the log, so the model check and fsck
//!     see the original data: a victim reclaimed despite a damaged page with live values
//!     loses them, and the model check finds it. One flip on a page with live values is
//!     finally left in place: fsck must report exactly that page (its packed-page checksum
//!     and its live values), those values must read as `Corrupt` (never wrong data), and
//!     every other key must read back;
//!   - *device full*: a key space larger than the device, so live data sits at the user
//!     capacity: writes are refused with `CapacityFull` or `DeviceFull` (never applied),
//!     deletes make room, and garbage collection runs near full.
//!
//! Every case asserts that its machinery ran (cuts hit writes, flushes, compactions and
//! garbage-collection steps happened, faults were hit), so it cannot pass vacuously.
//!
//! Reproducing: the cut points and each writer's workload come from the case's seed
//! (printed when a case fails), the interleaving of the threads does not.
//! `CRASH_MT_SEED=N` overrides the seed of every case run, `CRASH_MT_ITERATIONS=N` the
//! rounds. The soak (`LIGHTSTORE_SOAK=1 cargo test --release -p lsm --test crash_concurrent
//! -- --ignored soak`) runs the whole matrix over `LIGHTSTORE_SOAK_SEEDS` seeds (default 8)
//! with four times the rounds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hwftl_sim::{
    AppendDevice, Backend, DeviceConfig, DeviceError, FaultTarget, Ftl, Geometry, RamStore,
    SegmentId,
};
use lsm::manifest::{LogSegMeta, ManifestStore};
use lsm::{Engine, EngineConfig, EngineError, FindingKind, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{CutDevice, FailureNote};

const WRITERS: u64 = 4;

/// Reads of a value-log page garbage collection makes before it believes a read error (the
/// engine's `READ_ATTEMPTS`).
const GC_READ_ATTEMPTS: u32 = 10;

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 48,
        pages_per_block: 8,
        spare_blocks_per_chip: 2,
    }
}

fn config(flush_writes: bool) -> EngineConfig {
    EngineConfig {
        memtable_bytes: 3000,
        l0_runs: 3,
        l1_bytes: 6000,
        keytable_bytes: 1500,
        level_ratio: 3,
        gc_window_pages: 4,
        flush_writes,
        // Every durable batch's flush started by its pages' completion (the flush chain),
        // whatever a flush costs: on the RAM device flushes are cheap, and its writers would
        // otherwise flush themselves (`crash.rs` keeps that path).
        cheap_flush: std::time::Duration::ZERO,
        ..EngineConfig::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Media {
    Ram,
    File,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Faults {
    None,
    GcReadErrors,
    GcBitFlips,
    DeviceFull,
}

/// One case of the matrix.
#[derive(Clone, Copy, Debug)]
struct Case {
    name: &'static str,
    media: Media,
    volatile_cache: bool,
    flush_writes: bool,
    faults: Faults,
    rounds: u32,
    seed: u64,
}

impl Case {
    /// Keys per writer (each writer owns the keys `k % WRITERS == writer`).
    fn keys_per_writer(&self) -> u64 {
        match self.faults {
            // ~2,400 keys of 5-12 KiB: about 1.5 times the user capacity.
            Faults::DeviceFull => 600,
            _ => 40,
        }
    }

    fn value(&self, rng: &mut SmallRng) -> Vec<u8> {
        let len = match self.faults {
            Faults::DeviceFull => rng.gen_range(5000..12_000),
            _ => match rng.gen_range(0..10) {
                0..=6 => rng.gen_range(1..400),
                7..=8 => rng.gen_range(1000..6000),
                _ => rng.gen_range(8192..20000),
            },
        };
        let seed: u8 = rng.gen();
        common::repeat_period(len, |i| i.wrapping_mul(29) ^ seed)
    }

    /// Device commands before the cut.
    fn cut_range(&self) -> std::ops::Range<i64> {
        match self.faults {
            Faults::DeviceFull => 100..900,
            _ => 20..400,
        }
    }
}

fn key(writer: u64, i: u64) -> Vec<u8> {
    format!("w{writer}:{:05}", i * WRITERS + writer).into_bytes()
}

type Batch = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// What one writer knows: its acknowledged state, the batch the cut failed, and what it saw.
#[derive(Default, Clone)]
struct Ledger {
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    cut: Option<Batch>,
    /// Batches refused because the drive was full (never applied).
    refused_full: u64,
}

/// A failure the power cut explains: the device is off (the batch was not applied), or the
/// outcome is unknown (its flush failed, or a batch before it in the pipeline failed).
/// Either way the batch is checked as "whole or not at all" after recovery.
fn caused_by_cut(e: &EngineError) -> bool {
    matches!(
        e.root(),
        EngineError::Device(DeviceError::PoweredOff)
            | EngineError::WriteNotApplied(DeviceError::PoweredOff)
            | EngineError::OutcomeUnknown { .. }
    )
}

/// A refusal for lack of space: nothing of the batch was applied.
fn refused_full(e: &EngineError) -> bool {
    matches!(
        e.root(),
        EngineError::CapacityFull { .. } | EngineError::DeviceFull { .. }
    )
}

/// Checks a writer's keys after recovery and returns its new acknowledged state.
fn check(
    round: u32,
    writer: u64,
    all: &BTreeMap<Vec<u8>, Vec<u8>>,
    ledger: &Ledger,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut expected = ledger.acked.clone();
    if let Some(batch) = &ledger.cut {
        let applied = batch.iter().all(|(k, v)| all.get(k) == v.as_ref());
        let kept = batch.iter().all(|(k, _)| all.get(k) == ledger.acked.get(k));
        assert!(
            applied || kept,
            "round {round}, writer {writer}: the cut batch is half there"
        );
        if applied {
            for (k, v) in batch {
                match v {
                    Some(v) => expected.insert(k.clone(), v.clone()),
                    None => expected.remove(k),
                };
            }
        }
    }
    let prefix = format!("w{writer}:");
    let mine: BTreeMap<&Vec<u8>, &Vec<u8>> = all
        .iter()
        .filter(|(k, _)| k.starts_with(prefix.as_bytes()))
        .collect();
    for (k, v) in &expected {
        assert_eq!(
            mine.get(k).copied(),
            Some(v),
            "round {round}, writer {writer}: acknowledged key {} lost or changed",
            String::from_utf8_lossy(k)
        );
    }
    assert_eq!(
        mine.len(),
        expected.len(),
        "round {round}, writer {writer}: a key that should not be there (resurrected, or a \
         refused write applied)"
    );
    expected
}

/// One writer's load until the cut fails one of its batches (or it has written enough).
fn load(case: Case, db: &Engine, writer: u64, seed: u64, mut ledger: Ledger) -> Ledger {
    let mut rng = SmallRng::seed_from_u64(seed);
    ledger.cut = None;
    for _ in 0..150 {
        let mut batch: Batch = (0..rng.gen_range(1..4))
            .map(|_| {
                let k = key(writer, rng.gen_range(0..case.keys_per_writer()));
                let v = (rng.gen_range(0..6) != 0).then(|| case.value(&mut rng));
                (k, v)
            })
            .collect();
        batch.sort_by(|a, b| a.0.cmp(&b.0));
        batch.dedup_by(|a, b| a.0 == b.0);
        let ops: Vec<WriteOp<'_>> = batch
            .iter()
            .map(|(k, v)| match v {
                Some(v) => WriteOp::Put(k, v),
                None => WriteOp::Delete(k),
            })
            .collect();
        let result = if writer == 0 && rng.gen_range(0..30) == 0 {
            db.flush().and_then(|()| db.write(&ops))
        } else {
            db.write(&ops)
        };
        match result {
            Ok(()) => {
                for (k, v) in batch {
                    match v {
                        Some(v) => ledger.acked.insert(k, v),
                        None => ledger.acked.remove(&k),
                    };
                }
            }
            Err(e) if case.faults == Faults::DeviceFull && refused_full(&e) => {
                ledger.refused_full += 1;
            }
            Err(e) => {
                assert!(
                    caused_by_cut(&e),
                    "writer {writer}: a write failed for another reason than the cut: {e}"
                );
                ledger.cut = Some(batch);
                break;
            }
        }
    }
    ledger
}

/// A bit flipped on the media: undone after the cut if its log segment is still in the log.
#[derive(Clone, Copy, Debug)]
struct Flip {
    log_seg: u32,
    segment: u32,
    page: u32,
    byte: usize,
}

/// Value-log segments garbage collection may pick: sealed and before the replay checkpoint
/// (their pages are durable).
fn gc_candidates(dev: &dyn AppendDevice) -> Vec<LogSegMeta> {
    let (_, snap) = ManifestStore::load(dev).unwrap();
    let Some(snap) = snap else { return Vec::new() };
    snap.log_segs
        .into_iter()
        .filter(|m| m.sealed_end.is_some_and(|e| e > 0) && m.log_seg < snap.checkpoint.0)
        .collect()
}

/// Undoes the flips whose log segments are still in the log (the same log segment in the
/// same device segment: its pages were not trimmed). Returns how many were undone.
fn undo_flips(backend: &Backend, cfg: DeviceConfig, flips: &mut Vec<Flip>) -> u64 {
    if flips.is_empty() {
        return 0;
    }
    let dev = Ftl::open_read_only(backend, cfg).unwrap();
    let (_, snap) = ManifestStore::load(&dev).unwrap();
    let log_segs = snap.map(|s| s.log_segs).unwrap_or_default();
    let mut undone = 0;
    for f in flips.drain(..) {
        if log_segs
            .iter()
            .any(|m| m.log_seg == f.log_seg && m.segment == f.segment)
        {
            let lba = dev.geometry().lba(SegmentId(f.segment), f.page);
            dev.corrupt_page(lba, f.byte).unwrap();
            undone += 1;
        }
    }
    undone
}

/// What a case did, summed over its rounds.
#[derive(Debug, Default)]
struct Totals {
    rounds: u32,
    /// Rounds asked for (`rounds` may be more: see [`CUTS_WANTED_PERCENT`]).
    planned: u32,
    cuts: u32,
    gc_steps: u64,
    gc_segments: u64,
    compactions: u64,
    gc_read_retries: u64,
    gc_steps_refused: u64,
    refused_full: u64,
    flips: u64,
    flips_undone: u64,
    max_live_percent: u64,
}

/// Share of a case's planned rounds whose cut must hit a client write. A cut lands after a
/// random number of device commands, and whether a writer's batch is among them depends on
/// how the threads are scheduled: on a loaded machine (the test run's other jobs on both
/// cores) more cuts land among maintenance commands while writers wait. So a case runs
/// extra rounds, up to as many again, until this share of its planned rounds hit a write.
const CUTS_WANTED_PERCENT: u32 = 70;

/// Runs one case: `rounds` power cuts (more if too few hit a write), each followed by fsck
/// and the model check.
fn run_case(case: Case, rounds: u32, seed: u64) -> Totals {
    let note = FailureNote::new(format!(
        "fault matrix case `{}` failed: seed {seed}, {rounds} rounds (rerun: CRASH_MT_SEED={seed} \
         CRASH_MT_ITERATIONS={rounds} cargo test -p lsm --test crash_concurrent {})",
        case.name, case.name
    ));
    let dir = tempfile::tempdir().unwrap();
    let backend = match case.media {
        Media::Ram => Backend::Ram(RamStore::new()),
        Media::File => Backend::File(dir.path().join("device.img")),
    };
    let cfg = DeviceConfig {
        volatile_cache: case.volatile_cache,
        ..DeviceConfig::new(geometry())
    };
    let ecfg = config(case.flush_writes);
    Ftl::format(&backend, cfg).unwrap().close().unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ledgers: Vec<Ledger> = vec![Ledger::default(); WRITERS as usize];
    let mut flips: Vec<Flip> = Vec::new();
    let mut t = Totals {
        planned: rounds,
        ..Totals::default()
    };
    let wanted_cuts = rounds * CUTS_WANTED_PERCENT / 100;
    let mut round = 0;
    while round < rounds || (t.cuts < wanted_cuts && round < 2 * rounds) {
        t.flips_undone += undo_flips(&backend, cfg, &mut flips);
        // The offline check first: the device as the cut left it is consistent.
        let report = common::assert_fsck_clean(&backend, cfg, ecfg.clone());
        let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
        // Not the segments the open releases (reclaimed victims the manifest still lists):
        // they may be reused at once.
        let candidates: Vec<LogSegMeta> = gc_candidates(ftl.as_ref())
            .into_iter()
            .filter(|m| !report.released_segments.contains(&m.segment))
            .collect();
        let remaining = Arc::new(AtomicI64::new(i64::MAX));
        let armed = remaining.clone();
        let dev = Arc::new(CutDevice::new(
            ftl.clone(),
            Box::new(move |_| {
                let before = armed.fetch_sub(1, Ordering::SeqCst);
                before > 0 && before - 1 <= 0
            }),
        ));
        let db = Arc::new(Engine::open(dev, ecfg.clone()).unwrap());
        let all: BTreeMap<Vec<u8>, Vec<u8>> = db
            .range(b"", None, usize::MAX)
            .unwrap_or_else(|e| panic!("round {round}: reading everything back: {e}"))
            .into_iter()
            .collect();
        for (w, ledger) in ledgers.iter_mut().enumerate() {
            ledger.acked = check(round, w as u64, &all, ledger);
            ledger.cut = None;
        }
        assert!(
            all.keys().all(|k| k.starts_with(b"w")),
            "round {round}: a key nobody wrote"
        );
        let s = db.stats();
        if let Some(percent) = (s.live_bytes * 100).checked_div(s.user_capacity_bytes) {
            t.max_live_percent = t.max_live_percent.max(percent);
        }
        t.flips += arm_faults(case, &ftl, &candidates, &mut rng, &mut flips);

        remaining.store(rng.gen_range(case.cut_range()), Ordering::SeqCst);
        let threads: Vec<_> = ledgers
            .iter()
            .cloned()
            .enumerate()
            .map(|(w, ledger)| {
                let db = db.clone();
                let seed: u64 = rng.gen();
                std::thread::spawn(move || load(case, &db, w as u64, seed, ledger))
            })
            .collect();
        ledgers = threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| panic!("round {round}: a writer failed"))
            })
            .collect();
        if ledgers.iter().any(|l| l.cut.is_some()) {
            t.cuts += 1;
        }
        let s = db.stats();
        t.gc_steps += s.gc_steps;
        t.gc_segments += s.gc_segments;
        t.compactions += s.compactions + s.flushes;
        t.gc_read_retries += s.gc_read_retries;
        t.gc_steps_refused += s.gc_steps_refused;
        t.rounds += 1;
        ftl.power_cut();
        drop(db);
        round += 1;
    }
    t.flips_undone += undo_flips(&backend, cfg, &mut flips);
    t.refused_full = ledgers.iter().map(|l| l.refused_full).sum();
    // After the last cut: fsck, and the model check (which settles the batches it failed).
    common::assert_fsck_clean(&backend, cfg, ecfg.clone());
    let db = Engine::open(Arc::new(Ftl::open(&backend, cfg).unwrap()), ecfg.clone()).unwrap();
    let all: BTreeMap<Vec<u8>, Vec<u8>> = db
        .range(b"", None, usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    for (w, ledger) in ledgers.iter_mut().enumerate() {
        ledger.acked = check(round, w as u64, &all, ledger);
        ledger.cut = None;
    }
    assert_eq!(
        all.len(),
        ledgers.iter().map(|l| l.acked.len()).sum::<usize>(),
        "after the last cut: a key nobody wrote"
    );
    db.close().unwrap();
    if case.faults == Faults::GcBitFlips {
        flip_left_in_place(&backend, cfg, &ecfg, &ledgers, &mut rng);
    }
    note.passed();
    t
}

/// Arms the case's faults for the coming load; returns the bits flipped.
fn arm_faults(
    case: Case,
    ftl: &Ftl,
    candidates: &[LogSegMeta],
    rng: &mut SmallRng,
    flips: &mut Vec<Flip>,
) -> u64 {
    let g = ftl.geometry();
    match case.faults {
        Faults::None | Faults::DeviceFull => 0,
        Faults::GcReadErrors => {
            for m in candidates {
                let end = m.sealed_end.unwrap_or(0);
                let lba = g.lba(SegmentId(m.segment), rng.gen_range(0..end));
                let reads = match rng.gen_range(0..6) {
                    // Transient: fewer failed reads than garbage collection makes.
                    0..=2 => rng.gen_range(1..GC_READ_ATTEMPTS),
                    // Persistent (until the cut): the victim must be refused.
                    3 => GC_READ_ATTEMPTS + 2,
                    _ => 0,
                };
                for _ in 0..reads {
                    ftl.faults().fail_next_read(FaultTarget::Lba(lba));
                }
            }
            0
        }
        Faults::GcBitFlips => {
            if candidates.is_empty() {
                return 0;
            }
            // The segment greedy GC is likely to pick next (the least live bytes), and one
            // at random every other round.
            let mut targets: Vec<&LogSegMeta> = candidates
                .iter()
                .min_by_key(|m| m.written.saturating_sub(m.dead))
                .into_iter()
                .collect();
            if rng.gen_range(0..2) == 0 {
                targets.push(&candidates[rng.gen_range(0..candidates.len())]);
            }
            let mut flipped = 0;
            for m in targets {
                let f = Flip {
                    log_seg: m.log_seg,
                    segment: m.segment,
                    page: rng.gen_range(0..m.sealed_end.unwrap_or(1)),
                    byte: rng.gen_range(0..hwftl_sim::PAGE_SIZE),
                };
                // A page never written (a failed batch's) cannot be flipped.
                if ftl
                    .corrupt_page(g.lba(SegmentId(f.segment), f.page), f.byte)
                    .is_ok()
                {
                    flips.push(f);
                    flipped += 1;
                }
            }
            flipped
        }
    }
}

/// The end of the bit-flip cases: a bit flipped in a packed page holding live values and
/// left there. fsck reports exactly that page (a checksum finding where the walk of the log
/// meets it, one for the live values in it, nothing else), those values read as `Corrupt`,
/// and every other acknowledged write reads back.
fn flip_left_in_place(
    backend: &Backend,
    cfg: DeviceConfig,
    ecfg: &EngineConfig,
    ledgers: &[Ledger],
    rng: &mut SmallRng,
) {
    use lsm::vlog_format::{check_page, parse_records, RecordKind};
    let acked: BTreeMap<Vec<u8>, Vec<u8>> = ledgers.iter().flat_map(|l| l.acked.clone()).collect();
    let dev = Arc::new(Ftl::open_read_only(backend, cfg).unwrap());
    let g = dev.geometry();
    let mut pages: Vec<(LogSegMeta, u32)> = gc_candidates(dev.as_ref())
        .into_iter()
        .flat_map(|m| (0..m.sealed_end.unwrap_or(0)).map(move |p| (m.clone(), p)))
        .collect();
    let mut found = None;
    let mut tries = 0;
    while found.is_none() && !pages.is_empty() && tries < 40 {
        let (m, page) = pages.swap_remove(rng.gen_range(0..pages.len()));
        let lba = g.lba(SegmentId(m.segment), page);
        let Ok(Some(buf)) = dev
            .execute(hwftl_sim::Command::Read {
                lba,
                buf: hwftl_sim::PageBuf::for_read(),
            })
            .and_then(|c| {
                c.into_buf()
                    .map_err(|error| hwftl_sim::Rejected { error, buf: None })
            })
        else {
            continue;
        };
        // A packed page with a put whose bytes are a live value (it may be an older version
        // with the same bytes: fsck tells).
        let Ok(info) = check_page(&buf, m.log_seg, page) else {
            continue;
        };
        let recs = parse_records(&buf, &info).unwrap();
        let Some(rec) = recs.iter().find(|r| {
            let at = usize::from(r.payload_offset);
            r.kind == RecordKind::Put
                && r.value_len > 0
                && acked
                    .get(&r.key)
                    .is_some_and(|v| buf.get(at..at + r.value_len as usize) == Some(&v[..]))
        }) else {
            continue;
        };
        tries += 1;
        // The live values on the page small enough to be held in their keytable entries:
        // their reads take the entry's intact copy, not the flipped page.
        // (Distinct keys: two records of one key with the same bytes are one live value.)
        let held_live = recs
            .iter()
            .filter(|r| {
                let at = usize::from(r.payload_offset);
                r.kind == RecordKind::Put
                    && r.value_len as usize <= ecfg.entry_value_max
                    && acked
                        .get(&r.key)
                        .is_some_and(|v| buf.get(at..at + r.value_len as usize) == Some(&v[..]))
            })
            .map(|r| r.key.clone())
            .collect::<std::collections::HashSet<_>>()
            .len();
        // A byte of that value: covered by the page's checksum.
        let byte = usize::from(rec.payload_offset);
        dev.corrupt_page(lba, byte).unwrap();
        let report = Engine::fsck(dev.clone(), ecfg.clone()).unwrap();
        let named = format!("page {page} of log segment {}", m.log_seg);
        let walked = format!(
            "log segment {} (device segment {}) page {page}",
            m.log_seg, m.segment
        );
        assert!(
            report
                .findings
                .iter()
                .all(|f| f.kind == FindingKind::Checksum
                    && (f.what.contains(&named) || f.what.contains(&walked))),
            "fsck found more than the flipped page ({named}):\n{report}"
        );
        let live_on_page: Option<usize> = report.findings.iter().find_map(|f| {
            let rest = f.what.split("holding ").nth(1)?;
            rest.split(' ').next()?.parse().ok()
        });
        match live_on_page {
            Some(n) => {
                assert_eq!(
                    report.count(FindingKind::Checksum),
                    2,
                    "fsck must report the flipped packed page and its live values:\n{report}"
                );
                found = Some((m, page, n, held_live));
            }
            None => {
                // Only an older version there: the walk alone reports the page. Undo.
                assert_eq!(report.count(FindingKind::Checksum), 1, "{report}");
                dev.corrupt_page(lba, byte).unwrap();
            }
        }
    }
    let (m, page, live_on_page, held_live) =
        found.expect("no packed page with live values in a sealed segment before the checkpoint");
    drop(dev);

    let db = Engine::open(Arc::new(Ftl::open(backend, cfg).unwrap()), ecfg.clone()).unwrap();
    let mut corrupt = 0;
    for (k, v) in &acked {
        match db.get(k) {
            Ok(got) => assert_eq!(
                got.as_deref(),
                Some(&v[..]),
                "key {} after the flip",
                String::from_utf8_lossy(k)
            ),
            Err(EngineError::Corrupt(_)) => corrupt += 1,
            Err(e) => panic!("key {}: {e}", String::from_utf8_lossy(k)),
        }
    }
    assert!(
        held_live <= live_on_page,
        "{held_live} held of {live_on_page} live"
    );
    assert_eq!(
        corrupt,
        live_on_page - held_live,
        "the keys that read as corrupt are not exactly the flipped page's live values (less \
         those read from their keytable entries' copies)"
    );
    println!(
        "flip left in place: log segment {} page {page}: {live_on_page} live values, {corrupt} \
         read as corrupt, {held_live} read from their entries' copies, {} other keys intact",
        m.log_seg,
        acked.len() - corrupt
    );
}

/// Asserts that the case's machinery ran, and prints what it did.
fn assert_ran(case: Case, t: &Totals, elapsed: std::time::Duration) {
    println!(
        "{}: {} rounds, {} cuts hit a write, {} GC steps, {} segments reclaimed, {} flushes \
         and compactions, {} GC read retries, {} GC steps refused, {} bit flips ({} undone), \
         {} writes refused as full, live data peaked at {}% of the user capacity; {:.1}s",
        case.name,
        t.rounds,
        t.cuts,
        t.gc_steps,
        t.gc_segments,
        t.compactions,
        t.gc_read_retries,
        t.gc_steps_refused,
        t.flips,
        t.flips_undone,
        t.refused_full,
        t.max_live_percent,
        elapsed.as_secs_f64()
    );
    assert!(
        t.cuts >= t.planned * CUTS_WANTED_PERCENT / 100,
        "{}: only {} cuts of {} rounds hit a write ({} planned)",
        case.name,
        t.cuts,
        t.rounds,
        t.planned
    );
    assert!(
        t.gc_steps > 0 && t.gc_segments > 0,
        "{}: garbage collection never ran",
        case.name
    );
    assert!(
        t.compactions > u64::from(t.rounds) / 10,
        "{}: flushes and compactions hardly ran: {}",
        case.name,
        t.compactions
    );
    match case.faults {
        Faults::None => {}
        Faults::GcReadErrors => {
            assert!(
                t.gc_read_retries > 0,
                "{}: no GC read was retried",
                case.name
            );
            assert!(
                t.gc_steps_refused > 0,
                "{}: no GC victim was refused",
                case.name
            );
        }
        Faults::GcBitFlips => {
            assert!(
                t.gc_steps_refused > 0,
                "{}: no GC victim was refused",
                case.name
            );
            assert!(t.flips_undone > 0, "{}: no flip was undone", case.name);
        }
        Faults::DeviceFull => {
            assert!(
                t.refused_full > 0,
                "{}: no write was refused as full",
                case.name
            );
            assert!(
                t.max_live_percent >= 80,
                "{}: live data never neared the user capacity",
                case.name
            );
        }
    }
}

/// Rounds for a case: `CRASH_MT_ITERATIONS`, or the case's own, times `factor`.
fn rounds(case: Case, factor: u32) -> u32 {
    std::env::var("CRASH_MT_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(case.rounds * factor)
}

fn seed_override() -> Option<u64> {
    std::env::var("CRASH_MT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// Runs one named case of the matrix with its default seed and rounds.
fn run(name: &str) {
    let case = matrix()
        .into_iter()
        .find(|c| c.name == name)
        .expect("a case of the matrix");
    let started = Instant::now();
    let t = run_case(case, rounds(case, 1), seed_override().unwrap_or(case.seed));
    assert_ran(case, &t, started.elapsed());
}

/// Durability modes: `sync` on a device without and with a volatile write cache, `plp`.
#[derive(Clone, Copy)]
enum Mode {
    Sync,
    SyncVolatileCache,
    Plp,
}

/// The matrix: (media, durability, faults) with the rounds each runs by default.
fn matrix() -> Vec<Case> {
    use Faults::*;
    use Media::*;
    use Mode::*;
    // A table: one case a line.
    #[rustfmt::skip]
    let rows: [(&'static str, Media, Mode, Faults, u32, u64); 12] = [
        ("ram_sync",                               Ram,  Sync,              None,         300, 0x3a11),
        ("ram_sync_volatile_cache",                Ram,  SyncVolatileCache, None,         300, 0x3a12),
        ("ram_plp",                                Ram,  Plp,               None,         300, 0x3a13),
        ("file_sync",                              File, Sync,              None,          80, 0x3a21),
        ("file_plp",                               File, Plp,               None,          80, 0x3a22),
        ("ram_sync_volatile_cache_gc_read_errors", Ram,  SyncVolatileCache, GcReadErrors, 210, 0x3a31),
        ("ram_plp_gc_read_errors",                 Ram,  Plp,               GcReadErrors, 200, 0x3a32),
        ("file_sync_gc_read_errors",               File, Sync,              GcReadErrors,  60, 0x3a33),
        ("ram_sync_gc_bit_flips",                  Ram,  Sync,              GcBitFlips,   200, 0x3a41),
        ("file_plp_gc_bit_flips",                  File, Plp,               GcBitFlips,    80, 0x3a42),
        ("ram_sync_device_full",                   Ram,  Sync,              DeviceFull,   150, 0x3a51),
        ("file_plp_device_full",                   File, Plp,               DeviceFull,    40, 0x3a52),
    ];
    rows.into_iter()
        .map(|(name, media, mode, faults, rounds, seed)| Case {
            name,
            media,
            volatile_cache: matches!(mode, SyncVolatileCache),
            flush_writes: !matches!(mode, Plp),
            faults,
            rounds,
            seed,
        })
        .collect()
}

#[test]
fn ram_sync() {
    run("ram_sync");
}

#[test]
fn ram_sync_volatile_cache() {
    run("ram_sync_volatile_cache");
}

#[test]
fn ram_plp() {
    run("ram_plp");
}

#[test]
fn file_sync() {
    run("file_sync");
}

#[test]
fn file_plp() {
    run("file_plp");
}

#[test]
fn ram_sync_volatile_cache_gc_read_errors() {
    run("ram_sync_volatile_cache_gc_read_errors");
}

#[test]
fn ram_plp_gc_read_errors() {
    run("ram_plp_gc_read_errors");
}

#[test]
fn file_sync_gc_read_errors() {
    run("file_sync_gc_read_errors");
}

#[test]
fn ram_sync_gc_bit_flips() {
    run("ram_sync_gc_bit_flips");
}

#[test]
fn file_plp_gc_bit_flips() {
    run("file_plp_gc_bit_flips");
}

#[test]
fn ram_sync_device_full() {
    run("ram_sync_device_full");
}

#[test]
fn file_plp_device_full() {
    run("file_plp_device_full");
}

/// The soak: every case of the matrix over `LIGHTSTORE_SOAK_SEEDS` seeds (default 8) with
/// four times its rounds. Runs only with `LIGHTSTORE_SOAK=1` and `--ignored`.
#[test]
#[ignore = "the soak: LIGHTSTORE_SOAK=1 cargo test --release -p lsm --test crash_concurrent -- --ignored soak"]
fn soak() {
    if std::env::var("LIGHTSTORE_SOAK").as_deref() != Ok("1") {
        eprintln!("SKIP: set LIGHTSTORE_SOAK=1 to run the soak");
        return;
    }
    let seeds: u64 = std::env::var("LIGHTSTORE_SOAK_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let started = Instant::now();
    let (mut rounds_total, mut cuts_total) = (0u64, 0u64);
    for i in 0..seeds {
        for case in matrix() {
            let seed = seed_override().unwrap_or(case.seed ^ (i + 1).wrapping_mul(0x9e37_79b9));
            let t0 = Instant::now();
            let t = run_case(case, rounds(case, 4), seed);
            assert_ran(case, &t, t0.elapsed());
            rounds_total += u64::from(t.rounds);
            cuts_total += u64::from(t.cuts);
        }
    }
    println!(
        "soak: {seeds} seeds x {} cases: {rounds_total} rounds, {cuts_total} cuts hit a write, \
         {:.0}s, all clean",
        matrix().len(),
        started.elapsed().as_secs_f64()
    );
}
