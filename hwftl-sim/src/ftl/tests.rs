#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;
use crate::faults::FaultTarget;

/// Switches and records shared between a test and its [`HookedMedia`].
#[derive(Default)]
struct Hooks {
    /// Metadata writes fail, after tearing (zeroing) the range they were to write.
    fail_meta: AtomicBool,
    /// Offsets of the metadata writes that succeeded.
    meta_offsets: Mutex<Vec<u64>>,
    /// An erase touching any of these pages fails (the other pages are erased).
    bad_erase: Mutex<Vec<Ppa>>,
    /// `poll` collects nothing: completions stay in the media.
    hold: AtomicBool,
    /// Polls that returned at least one completion.
    polls_done: AtomicUsize,
}

/// RAM media with failures and hooks a test controls.
struct HookedMedia {
    inner: RamMedia,
    hooks: Arc<Hooks>,
}

fn injected(what: &str) -> DeviceError {
    DeviceError::io(what, std::io::Error::other("injected by the test"))
}

impl Media for HookedMedia {
    fn prepare(&mut self, layout: MediaLayout, format: bool) -> Result<()> {
        self.inner.prepare(layout, format)
    }
    fn read_meta(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.inner.read_meta(offset, len)
    }
    fn write_meta(&self, offset: u64, data: &[u8]) -> Result<()> {
        if self.hooks.fail_meta.load(Ordering::SeqCst) {
            self.inner.write_meta(offset, &vec![0; data.len()])?;
            return Err(injected("metadata write"));
        }
        self.inner.write_meta(offset, data)?;
        self.hooks.meta_offsets.lock().push(offset);
        Ok(())
    }
    fn start(&self, id: u32, op: MediaOp) -> std::result::Result<(), crate::media::StartError> {
        self.inner.start(id, op)
    }
    fn doorbell(&self) -> Result<()> {
        self.inner.doorbell()
    }
    fn poll(&self, out: &mut Vec<MediaDone>, block: bool) -> Result<()> {
        if self.hooks.hold.load(Ordering::SeqCst) {
            return Ok(());
        }
        let before = out.len();
        self.inner.poll(out, block)?;
        if out.len() > before {
            self.hooks.polls_done.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
    fn erase(&self, ppas: &[Ppa]) -> Result<()> {
        let bad = self.hooks.bad_erase.lock().clone();
        let (fail, ok): (Vec<Ppa>, Vec<Ppa>) = ppas.iter().partition(|p| bad.contains(p));
        self.inner.erase(&ok)?;
        if fail.is_empty() {
            Ok(())
        } else {
            Err(injected("erase"))
        }
    }
    fn is_programmed(&self, ppa: Ppa) -> Result<bool> {
        self.inner.is_programmed(ppa)
    }
    fn revert_program(&self, ppa: Ppa) {
        self.inner.revert_program(ppa);
    }
    fn simulates_write_cache(&self) -> bool {
        self.inner.simulates_write_cache()
    }
    fn corrupt(&self, ppa: Ppa, byte: usize) -> Result<()> {
        self.inner.corrupt(ppa, byte)
    }
    fn describe(&self) -> String {
        "hooked ram".into()
    }
}

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 8,
        pages_per_block: 4,
        spare_blocks_per_chip: 1,
    }
}

fn cfg() -> DeviceConfig {
    DeviceConfig::new(geometry())
}

/// A freshly formatted device on hooked RAM media, and the store behind it.
fn hooked() -> (Arc<Hooks>, RamStore, Ftl) {
    let store = RamStore::new();
    let hooks = Arc::new(Hooks::default());
    let media = HookedMedia {
        inner: RamMedia::new(store.clone()),
        hooks: hooks.clone(),
    };
    let dev = Ftl::format_media(Box::new(media), cfg()).unwrap();
    (hooks, store, dev)
}

fn append(segment: u32) -> Command {
    Command::Append {
        segment: SegmentId(segment),
        buf: PageBuf::zeroed(),
    }
}

fn assert_tags_free_once(dev: &Ftl) {
    let st = dev.state.lock();
    let mut tags = st.free_tags.clone();
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(tags.len(), st.free_tags.len(), "a tag is free twice");
}

/// Finishes a reapable command the way `close` does, leaving its ready entry behind.
fn finish_behind_the_heap(dev: &Ftl, tag: Tag) {
    dev.pump(false, None).unwrap();
    let mut st = dev.state.lock();
    assert_eq!(st.ready.len(), 1);
    dev.finish(&mut st, tag.0, Instant::now()).result.unwrap();
}

#[test]
fn stale_ready_entry_of_a_finished_command_is_dropped() {
    let (_hooks, _store, dev) = hooked();
    let tag = dev.submit(append(0)).unwrap();
    finish_behind_the_heap(&dev, tag);
    let mut out = Vec::new();
    assert_eq!(dev.reap(&mut out, 8, Wait::NoWait).unwrap(), 0, "{out:?}");
    assert!(dev.state.lock().ready.is_empty());
    assert_tags_free_once(&dev);
    assert_eq!(
        dev.state.lock().free_tags.len(),
        DEFAULT_QUEUE_DEPTH as usize
    );
}

#[test]
fn stale_ready_entry_does_not_deliver_the_command_reusing_its_tag() {
    let (hooks, _store, dev) = hooked();
    let old = dev.submit(append(0)).unwrap();
    finish_behind_the_heap(&dev, old);
    hooks.hold.store(true, Ordering::SeqCst);
    let new = dev.submit(append(0)).unwrap();
    assert_eq!(new, old, "the tag is reused");
    let mut out = Vec::new();
    // The new command has not finished on the media: nothing may be delivered.
    assert_eq!(dev.reap(&mut out, 8, Wait::NoWait).unwrap(), 0, "{out:?}");
    hooks.hold.store(false, Ordering::SeqCst);
    assert_eq!(dev.reap(&mut out, 8, Wait::NoWait).unwrap(), 1);
    assert_eq!(out[0].lba, Some(Lba(1)));
    assert!(out[0].result.is_ok() && out[0].buf.is_some());
    assert_tags_free_once(&dev);
}

#[test]
fn failed_persist_while_opening_a_segment_leaves_it_free() {
    let (hooks, _store, dev) = hooked();
    let g = dev.geometry();
    hooks.fail_meta.store(true, Ordering::SeqCst);
    let err = dev.execute(append(1)).unwrap_err().error;
    assert!(matches!(err, DeviceError::Io { .. }), "{err}");
    {
        let st = dev.state.lock();
        assert_eq!(st.tables.seg_state[1], SegmentState::Free);
        assert!((0..g.chips()).all(|c| st.tables.mapped(SegmentId(1), c) == UNMAPPED));
        assert!(st.tables.block_state.iter().all(|&b| b == BlockState::Free));
    }
    hooks.fail_meta.store(false, Ordering::SeqCst);
    let before = hooks.meta_offsets.lock().len();
    let c = dev.execute(append(1)).unwrap();
    c.result.unwrap();
    assert_eq!(c.lba, Some(g.lba(SegmentId(1), 0)));
    // This time opening the segment was persisted.
    assert_eq!(hooks.meta_offsets.lock().len(), before + 1);
}

#[test]
fn failed_persist_does_not_advance_the_generation() {
    let (hooks, store, dev) = hooked();
    dev.execute(append(0)).unwrap().result.unwrap();
    let generation = dev.state.lock().tables.generation;
    hooks.fail_meta.store(true, Ordering::SeqCst);
    // Two persists fail in a row, each tearing the slot it was writing.
    for seg in [1, 2] {
        let err = dev.execute(append(seg)).unwrap_err().error;
        assert!(matches!(err, DeviceError::Io { .. }), "{err}");
        assert_eq!(dev.state.lock().tables.generation, generation);
    }
    hooks.fail_meta.store(false, Ordering::SeqCst);
    dev.power_cut();
    drop(dev);
    // Both went to the same slot: the other kept the last good copy of the tables.
    let dev = Ftl::open(&Backend::Ram(store), cfg()).unwrap();
    let info = dev.segment_info(SegmentId(0)).unwrap();
    assert_eq!((info.state, info.write_pointer), (SegmentState::Open, 1));
    dev.execute(Command::Read {
        lba: Lba(0),
        buf: PageBuf::zeroed(),
    })
    .unwrap()
    .result
    .unwrap();
}

#[test]
fn failed_media_erase_retires_the_block_and_leaves_the_tables_consistent() {
    let (hooks, store, dev) = hooked();
    let g = dev.geometry();
    for _ in 0..5 {
        dev.execute(append(0)).unwrap().result.unwrap();
    }
    let blocks: Vec<(u32, u32)> = {
        let st = dev.state.lock();
        (0..g.chips())
            .map(|c| (c, st.tables.mapped(SegmentId(0), c)))
            .collect()
    };
    let bad = blocks[1];
    hooks.bad_erase.lock().push(g.ppa(bad.0, bad.1, 0));
    let err = dev
        .execute(Command::Trim {
            segment: SegmentId(0),
        })
        .unwrap()
        .result
        .unwrap_err();
    assert!(
        matches!(err, DeviceError::EraseFailed { chip: 1, block, .. } if block == bad.1),
        "{err}"
    );
    {
        let st = dev.state.lock();
        assert_eq!(st.tables.seg_state[0], SegmentState::Free);
        for &(chip, block) in &blocks {
            assert_eq!(st.tables.mapped(SegmentId(0), chip), UNMAPPED);
            let i = st.tables.block_index(chip, block);
            if (chip, block) == bad {
                assert_eq!(
                    (st.tables.block_state[i], st.tables.pe[i]),
                    (BlockState::Bad, 0)
                );
            } else {
                assert_eq!(
                    (st.tables.block_state[i], st.tables.pe[i]),
                    (BlockState::Free, 1)
                );
                for p in 0..g.pages_per_block {
                    assert!(!dev.media.is_programmed(g.ppa(chip, block, p)).unwrap());
                }
            }
        }
    }
    dev.close().unwrap();
    let dev = Ftl::open(&Backend::Ram(store), cfg()).unwrap();
    let stats = dev.stats();
    assert_eq!((stats.bad_blocks, stats.free_segments), (1, g.segments()));
}

#[test]
fn power_cut_on_a_file_waits_for_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::File(dir.path().join("device.img"));
    let dev = Ftl::format(&backend, cfg()).unwrap();
    for _ in 0..8 {
        dev.submit(append(0)).unwrap();
    }
    dev.power_cut();
    assert_eq!(
        dev.media.pending(),
        0,
        "io_uring operations outlive the cut"
    );
    drop(dev);
    let dev = Ftl::open(&backend, cfg()).unwrap();
    assert!(dev.segment_info(SegmentId(0)).unwrap().write_pointer <= 8);
}

#[test]
fn a_device_file_has_one_owner_until_it_closes_or_loses_power() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.img");
    let backend = Backend::File(path.clone());
    let dev = Ftl::format(&backend, cfg()).unwrap();
    // A second open (a separate open file description, as another process's would be)
    // fails at once, and so does a second format (before it could truncate anything).
    for second in [Ftl::open(&backend, cfg()), Ftl::format(&backend, cfg())] {
        match second {
            Err(DeviceError::InUse { path: p, holder }) => {
                assert_eq!(p, path.display().to_string());
                assert!(holder.contains("this process"), "{holder}");
            }
            Err(e) => panic!("a second open failed otherwise: {e}"),
            Ok(_) => panic!("a second open of a device in use succeeded"),
        }
    }
    dev.close().unwrap();
    let dev = Ftl::open(&backend, cfg()).unwrap();
    dev.power_cut();
    // The cut process is gone: its lock with it.
    drop(Ftl::open(&backend, cfg()).unwrap());
    drop(dev);
}

#[test]
fn pump_marks_completions_done_before_releasing_the_poll_lock() {
    let (hooks, _store, dev) = hooked();
    let dev = Arc::new(dev);
    dev.submit(append(0)).unwrap();
    // Holding the state lock stalls the pump right after it took the completion.
    let st = dev.state.lock();
    let pumper = {
        let dev = dev.clone();
        std::thread::spawn(move || dev.pump(false, None))
    };
    while hooks.polls_done.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    // The completion left the media but is not marked done yet: a waiter must not be able
    // to poll in between.
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut window = false;
    while Instant::now() < deadline && !window {
        window = dev.poll_lock.try_lock().is_some();
        std::thread::yield_now();
    }
    drop(st);
    pumper.join().unwrap().unwrap();
    assert!(
        !window,
        "the poll lock was free while a completion was taken but not marked"
    );
    assert!(dev
        .state
        .lock()
        .cmds
        .iter()
        .flatten()
        .all(|c| c.done.is_some()));
}

#[test]
fn segment_turns_full_when_a_read_outlasts_its_last_write() {
    let (_hooks, _store, dev) = hooked();
    let pages = dev.geometry().pages_per_segment();
    for _ in 1..pages {
        dev.execute(append(0)).unwrap().result.unwrap();
    }
    dev.submit(append(0)).unwrap();
    dev.submit(Command::Read {
        lba: Lba(0),
        buf: PageBuf::zeroed(),
    })
    .unwrap();
    let mut out = Vec::new();
    assert_eq!(dev.reap(&mut out, 1, Wait::Block).unwrap(), 1);
    assert_eq!(out[0].kind, CommandKind::Write);
    // The read is still in flight on the segment.
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::Open
    );
    assert_eq!(dev.reap(&mut out, 1, Wait::Block).unwrap(), 1);
    assert_eq!(out[1].kind, CommandKind::Read);
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::Full
    );
}

/// Waits (up to 10 s) until `dev` is writing the tables of a segment it opens
/// (`open_ahead`'s step 2).
fn wait_for_opening(dev: &Ftl) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while dev.state.lock().opening.is_none() {
        assert!(std::time::Instant::now() < until, "no open began");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A slow write of the tables while a segment opens (a disk whose flush takes long) holds
/// up no other command: a read of another segment completes meanwhile; the opening append
/// completes only after the tables are written.
#[test]
fn a_segment_open_writes_its_tables_without_stopping_other_commands() {
    use std::time::{Duration, Instant};
    let (hooks, _store, dev) = hooked();
    let dev = Arc::new(dev);
    let g = dev.geometry();
    dev.execute(append(0)).unwrap();
    let tables_before = hooks.meta_offsets.lock().len();
    let pause = Duration::from_millis(500);
    dev.faults().pause_table_writes(Some(pause));
    let opener = {
        let dev = dev.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            dev.execute(append(1)).unwrap();
            t.elapsed()
        })
    };
    wait_for_opening(&dev);
    let t = Instant::now();
    let read = dev.execute(Command::Read {
        lba: g.lba(SegmentId(0), 0),
        buf: PageBuf::zeroed(),
    });
    let read_took = t.elapsed();
    let opening_still = dev.state.lock().opening.is_some();
    assert!(
        read.is_ok() && opening_still,
        "the read ended after the open"
    );
    assert!(read_took < pause / 2, "the read waited {read_took:?}");
    assert!(opener.join().unwrap() >= pause);
    assert_eq!(hooks.meta_offsets.lock().len(), tables_before + 1);
}

/// A table change made while an open's tables are out (a TRIM) is deferred to the opener,
/// which writes it before it returns: both reach the media, in one more generation.
#[test]
fn a_table_change_during_an_open_is_written_before_the_open_returns() {
    use std::time::Duration;
    let (hooks, store, dev) = hooked();
    let dev = Arc::new(dev);
    dev.execute(append(0)).unwrap();
    let tables_before = hooks.meta_offsets.lock().len();
    dev.faults()
        .pause_table_writes(Some(Duration::from_millis(200)));
    let opener = {
        let dev = dev.clone();
        std::thread::spawn(move || dev.execute(append(1)).map(|_| ()))
    };
    wait_for_opening(&dev);
    dev.execute(Command::Trim {
        segment: SegmentId(0),
    })
    .unwrap();
    assert!(
        dev.state.lock().tables_dirty,
        "the trim's write was deferred"
    );
    assert!(opener.join().unwrap().is_ok());
    {
        let st = dev.state.lock();
        assert!(!st.tables_dirty && st.opening.is_none());
    }
    assert_eq!(hooks.meta_offsets.lock().len(), tables_before + 2);
    dev.faults().pause_table_writes(None);
    dev.power_cut();
    drop(dev);
    let dev = Ftl::open(&Backend::Ram(store), cfg()).unwrap();
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::Free
    );
    assert_eq!(
        dev.segment_info(SegmentId(1)).unwrap().state,
        SegmentState::Open
    );
}

/// A failed write of an open's tables undoes the open: the append fails, the segment is
/// free again, and the next open succeeds.
#[test]
fn a_failed_table_write_undoes_the_open() {
    let (hooks, _store, dev) = hooked();
    hooks.fail_meta.store(true, Ordering::SeqCst);
    assert!(dev.execute(append(2)).is_err());
    assert_eq!(
        dev.segment_info(SegmentId(2)).unwrap().state,
        SegmentState::Free
    );
    assert!(dev.state.lock().opening.is_none());
    hooks.fail_meta.store(false, Ordering::SeqCst);
    dev.execute(append(2)).unwrap();
    assert_eq!(
        dev.segment_info(SegmentId(2)).unwrap().state,
        SegmentState::Open
    );
}

/// A write off a free segment's write pointer is refused and opens nothing: the segment
/// stays free and no table is written, as before writes opened segments ahead.
#[test]
fn a_write_off_the_write_pointer_opens_nothing() {
    let (hooks, _store, dev) = hooked();
    let g = dev.geometry();
    let tables_before = hooks.meta_offsets.lock().len();
    let r = dev.execute(Command::Write {
        lba: g.lba(SegmentId(3), 1),
        buf: PageBuf::zeroed(),
    });
    assert!(
        matches!(
            r,
            Err(Rejected {
                error: DeviceError::NotAtWritePointer { .. },
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        dev.segment_info(SegmentId(3)).unwrap().state,
        SegmentState::Free
    );
    assert_eq!(hooks.meta_offsets.lock().len(), tables_before);
}

/// Threads waiting for their own reads while another polls (the media holding completions
/// back for a while): each waiter either polls itself or sleeps until the poller reports,
/// and every one gets its own completion once the media lets them through.
#[test]
fn waiters_behind_a_poller_all_get_their_completions() {
    use std::time::Duration;
    let (hooks, _store, dev) = hooked();
    let dev = Arc::new(dev);
    dev.execute(append(0)).unwrap();
    let g = dev.geometry();
    hooks.hold.store(true, Ordering::SeqCst);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let reads = (0..4)
                        .map(|_| Command::Read {
                            lba: g.lba(SegmentId(0), 0),
                            buf: PageBuf::zeroed(),
                        })
                        .collect();
                    for done in dev.execute_many(reads) {
                        let done = done.unwrap();
                        assert!(done.result.is_ok(), "{:?}", done.result);
                        assert!(done.buf.is_some());
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    hooks.hold.store(false, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(dev.followers.load(Ordering::SeqCst), 0);
}

/// A file device with pages 0..n of segment 0 written, page `i` filled with byte `i`.
fn file_device_with_pages(dir: &Path, cfg: DeviceConfig, n: u8) -> (Ftl, Vec<Lba>) {
    let backend = Backend::File(dir.join("device.img"));
    let dev = Ftl::format(&backend, cfg).unwrap();
    let cmds = (0..n)
        .map(|i| Command::Append {
            segment: SegmentId(0),
            buf: PageBuf::from_slice(&[i; crate::PAGE_SIZE]),
        })
        .collect();
    let lbas = dev
        .execute_many(cmds)
        .into_iter()
        .map(|c| c.map_err(|r| r.error).unwrap().lba.unwrap())
        .collect();
    (dev, lbas)
}

fn read(lba: Lba) -> Command {
    Command::Read {
        lba,
        buf: PageBuf::for_read(),
    }
}

/// What each read of a batch returned: its first byte, or the error.
fn first_bytes(dev: &Ftl, lbas: &[Lba]) -> Vec<std::result::Result<u8, String>> {
    dev.execute_many(lbas.iter().map(|&l| read(l)).collect())
        .into_iter()
        .map(|c| match c {
            Ok(c) => match c.result {
                Ok(()) => {
                    let buf = c.buf.unwrap();
                    assert!(buf.iter().all(|&b| b == buf[0]), "a page came back torn");
                    Ok(buf[0])
                }
                Err(e) => Err(e.to_string()),
            },
            Err(r) => Err(r.error.to_string()),
        })
        .collect()
}

#[test]
fn caller_ring_reads_return_what_the_shared_ring_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, lbas) = file_device_with_pages(dir.path(), cfg(), 12);
    assert!(dev.direct_reads);
    // Runs of adjacent pages, pages out of order, and one page twice, in one batch.
    let order: Vec<Lba> = [0, 1, 2, 3, 9, 8, 5, 5, 11, 10, 6, 7]
        .iter()
        .map(|&i| lbas[i])
        .collect();
    let want: Vec<std::result::Result<u8, String>> = [0, 1, 2, 3, 9, 8, 5, 5, 11, 10, 6, 7]
        .iter()
        .map(|&i| Ok(i))
        .collect();
    let reads_before = dev.stats().reads;
    assert_eq!(first_bytes(&dev, &order), want);
    assert_eq!(dev.stats().reads, reads_before + 12);
    assert_eq!(dev.in_flight(), 0);
    assert_eq!(dev.free_tags(), Some(dev.config.queue_depth as usize));
    assert_tags_free_once(&dev);
    drop(dev);
    let shared = DeviceConfig {
        caller_ring_reads: false,
        ..cfg()
    };
    let dev = Ftl::open(&Backend::File(dir.path().join("device.img")), shared).unwrap();
    assert!(!dev.direct_reads);
    assert_eq!(first_bytes(&dev, &order), want);
}

#[test]
fn a_caller_ring_batch_larger_than_the_tag_pool_runs_in_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let small = DeviceConfig {
        queue_depth: 4,
        ..cfg()
    };
    let (dev, lbas) = file_device_with_pages(dir.path(), small, 10);
    let batch: Vec<Lba> = (0..30).map(|i| lbas[(i * 7) % 10]).collect();
    let got = first_bytes(&dev, &batch);
    let want: Vec<std::result::Result<u8, String>> =
        (0..30).map(|i| Ok(((i * 7) % 10) as u8)).collect();
    assert_eq!(got, want);
    assert_eq!(dev.free_tags(), Some(4));
}

#[test]
fn a_read_fault_on_the_caller_ring_fails_that_read_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, lbas) = file_device_with_pages(dir.path(), cfg(), 4);
    dev.faults().fail_next_read(FaultTarget::Lba(lbas[2]));
    let got = first_bytes(&dev, &lbas);
    assert_eq!(got[..2], [Ok(0), Ok(1)]);
    assert!(got[2].is_err(), "{got:?}");
    assert_eq!(got[3], Ok(3));
    // An unwritten page is refused at admission, the others read.
    let got = first_bytes(&dev, &[lbas[0], Lba(lbas[3].0 + 1)]);
    assert_eq!(got[0], Ok(0));
    assert!(got[1].is_err());
    assert_eq!(dev.free_tags(), Some(dev.config.queue_depth as usize));
}

#[test]
fn caller_ring_readers_meet_writers_trims_and_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, lbas) = file_device_with_pages(dir.path(), cfg(), 8);
    let dev = Arc::new(dev);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|t| {
            let (dev, lbas, stop) = (dev.clone(), lbas.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rounds = 0u32;
                let mut after_cut = 0u32;
                while after_cut < 3 {
                    let batch: Vec<Lba> = (0..8).map(|i| lbas[(i + t) % 8]).collect();
                    for (i, r) in first_bytes(&dev, &batch).into_iter().enumerate() {
                        match r {
                            Ok(b) => assert_eq!(usize::from(b), (i + t) % 8),
                            Err(e) => assert!(
                                stop.load(Ordering::SeqCst),
                                "a read failed before the cut: {e}"
                            ),
                        }
                    }
                    rounds += 1;
                    if stop.load(Ordering::SeqCst) {
                        after_cut += 1;
                    }
                }
                rounds
            })
        })
        .collect();
    // A writer in segment 1, and a trim of segment 1 (which no reader touches) meanwhile.
    for _ in 0..12 {
        dev.execute(append(1)).map_err(|r| r.error).unwrap();
    }
    dev.execute(Command::Trim {
        segment: SegmentId(1),
    })
    .map_err(|r| r.error)
    .unwrap()
    .result
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::SeqCst);
    dev.power_cut();
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert_eq!(dev.in_flight(), 0);
}

/// Reaps `ring` until `n` completions are in, sleeping on its eventfd between looks (a read
/// whose completion never signals it would hang here, and fail the test at the deadline).
fn reap_all(ring: &mut dyn crate::device::ReadRing, n: usize) -> Vec<Completion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < n {
        ring.reap(&mut out);
        if out.len() >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} reads came back",
            out.len()
        );
        let mut pfd = libc::pollfd {
            fd: ring.event_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the length given.
        unsafe { libc::poll(&mut pfd, 1, 1000) };
        let mut count = 0u64;
        // SAFETY: reads eight bytes into a u64 (the eventfd is non-blocking).
        unsafe { libc::read(pfd.fd, (&mut count as *mut u64).cast(), 8) };
    }
    out
}

/// First byte (or error) of each read by its tag, from completions.
fn first_bytes_by_tag(done: Vec<Completion>) -> HashMap<u32, std::result::Result<u8, String>> {
    done.into_iter()
        .map(|c| {
            let r = match c.result {
                Ok(()) => {
                    let buf = c.buf.unwrap();
                    assert!(buf.iter().all(|&b| b == buf[0]), "a page came back torn");
                    Ok(buf[0])
                }
                Err(e) => Err(e.to_string()),
            };
            (c.tag.0, r)
        })
        .collect()
}

#[test]
fn a_read_ring_returns_what_was_written_and_gives_every_tag_back() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, lbas) = file_device_with_pages(dir.path(), cfg(), 12);
    let dev = Arc::new(dev);
    let mut ring = dev
        .clone()
        .read_ring()
        .expect("the file backend has read rings");
    // Runs of adjacent pages (vectored entries), pages out of order, one page twice.
    let order = [0usize, 1, 2, 3, 9, 8, 5, 5, 11, 10, 6, 7];
    let tags: Vec<u32> = ring
        .submit(order.iter().map(|&i| read(lbas[i])).collect())
        .into_iter()
        .map(|r| r.map_err(|r| r.error).unwrap().0)
        .collect();
    assert_eq!(ring.in_flight(), 12);
    // The kernel signals the ring's eventfd as it posts the completions.
    let mut pfd = libc::pollfd {
        fd: ring.event_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given.
    let ready = unsafe { libc::poll(&mut pfd, 1, 5000) };
    assert_eq!(ready, 1, "no signal on the eventfd");
    let reads_before = dev.stats().reads;
    let got = first_bytes_by_tag(reap_all(ring.as_mut(), 12));
    for (&i, tag) in order.iter().zip(&tags) {
        assert_eq!(got[tag], Ok(i as u8), "page {i}");
    }
    assert_eq!(ring.in_flight(), 0);
    assert_eq!(dev.stats().reads, reads_before + 12);
    assert_eq!(dev.free_tags(), Some(dev.config.queue_depth as usize));
    assert_tags_free_once(&dev);
    // Nothing of the ring's reaches the shared completion queue.
    let mut out = Vec::new();
    assert_eq!(dev.reap(&mut out, 64, Wait::NoWait).unwrap(), 0);
}

#[test]
fn a_read_ring_refuses_other_commands_and_fails_a_faulty_page_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, lbas) = file_device_with_pages(dir.path(), cfg(), 4);
    let dev = Arc::new(dev);
    let mut ring = dev.clone().read_ring().unwrap();
    let refused = ring.submit(vec![append(0), Command::Flush]);
    assert!(refused.iter().all(|r| matches!(
        r,
        Err(Rejected {
            error: DeviceError::NotARead,
            ..
        })
    )));
    dev.faults().fail_next_read(FaultTarget::Lba(lbas[2]));
    let mut cmds: Vec<Command> = lbas.iter().map(|&l| read(l)).collect();
    // Never written: refused at submission, the others still go.
    cmds.push(read(Lba(lbas[3].0 + 1)));
    let results = ring.submit(cmds);
    assert!(results[4].is_err());
    let tags: Vec<u32> = results[..4].iter().map(|r| r.as_ref().unwrap().0).collect();
    let got = first_bytes_by_tag(reap_all(ring.as_mut(), 4));
    assert_eq!(got[&tags[0]], Ok(0));
    assert_eq!(got[&tags[1]], Ok(1));
    assert!(got[&tags[2]].is_err(), "{got:?}");
    assert_eq!(got[&tags[3]], Ok(3));
    assert_eq!(dev.free_tags(), Some(dev.config.queue_depth as usize));
}

#[test]
fn a_read_ring_read_holds_off_a_trim_of_its_segment_until_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, lbas) = file_device_with_pages(dir.path(), cfg(), 2);
    let dev = Arc::new(dev);
    let mut ring = dev.clone().read_ring().unwrap();
    let tag = ring.submit(vec![read(lbas[0])]).pop().unwrap().unwrap();
    // Finished on the media or not, the read counts on its segment until it is reaped.
    std::thread::sleep(Duration::from_millis(20));
    let trim = || {
        dev.execute(Command::Trim {
            segment: SegmentId(0),
        })
    };
    assert!(matches!(
        trim(),
        Err(Rejected {
            error: DeviceError::SegmentBusy { .. },
            ..
        })
    ));
    let got = first_bytes_by_tag(reap_all(ring.as_mut(), 1));
    assert_eq!(got[&tag.0], Ok(0));
    trim().map_err(|r| r.error).unwrap().result.unwrap();
}

#[test]
fn a_read_ring_past_the_tag_pool_refuses_the_rest_and_a_dropped_ring_gives_tags_back() {
    let dir = tempfile::tempdir().unwrap();
    let small = DeviceConfig {
        queue_depth: 4,
        ..cfg()
    };
    let (dev, lbas) = file_device_with_pages(dir.path(), small, 6);
    let dev = Arc::new(dev);
    let mut ring = dev.clone().read_ring().unwrap();
    let results = ring.submit(lbas.iter().map(|&l| read(l)).collect());
    assert!(results[..4].iter().all(Result::is_ok));
    for r in &results[4..] {
        let Err(r) = r else {
            panic!("a fifth read took a tag of four")
        };
        assert!(matches!(r.error, DeviceError::QueueFull { .. }));
        assert!(r.buf.is_some(), "the buffer comes back with the refusal");
    }
    assert_eq!(dev.free_tags(), Some(0));
    // Dropped with its reads out: it waits for them and finishes them.
    drop(ring);
    assert_eq!(dev.free_tags(), Some(4));
    assert_tags_free_once(&dev);
    dev.execute(Command::Trim {
        segment: SegmentId(0),
    })
    .map_err(|r| r.error)
    .unwrap()
    .result
    .unwrap();
}

#[test]
fn a_read_ring_read_out_at_a_power_cut_completes_powered_off() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, lbas) = file_device_with_pages(dir.path(), cfg(), 8);
    let dev = Arc::new(dev);
    let mut ring = dev.clone().read_ring().unwrap();
    let results = ring.submit(lbas.iter().map(|&l| read(l)).collect());
    assert!(results.iter().all(Result::is_ok));
    dev.power_cut();
    let done = reap_all(ring.as_mut(), 8);
    assert!(done
        .iter()
        .all(|c| matches!(c.result, Err(DeviceError::PoweredOff))));
    // A dead device refuses new reads at submission.
    assert!(ring.submit(vec![read(lbas[0])])[0].is_err());
}

#[test]
fn ram_media_has_no_read_ring() {
    let (_hooks, _store, dev) = hooked();
    assert!(Arc::new(dev).read_ring().is_none());
}

#[test]
fn a_read_failed_at_admission_still_wakes_the_ring_owner() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, lbas) = file_device_with_pages(dir.path(), cfg(), 2);
    let dev = Arc::new(dev);
    let mut ring = dev.clone().read_ring().unwrap();
    dev.faults().fail_next_read(FaultTarget::Lba(lbas[1]));
    // Nothing reaches the kernel: the fault finishes the read at admission.
    let tag = ring.submit(vec![read(lbas[1])]).pop().unwrap().unwrap();
    let mut pfd = libc::pollfd {
        fd: ring.event_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given.
    let ready = unsafe { libc::poll(&mut pfd, 1, 2000) };
    assert_eq!(
        ready, 1,
        "an owner asleep on the eventfd would never reap it"
    );
    let got = first_bytes_by_tag(reap_all(ring.as_mut(), 1));
    assert!(got[&tag.0].is_err());
    assert_eq!(dev.free_tags(), Some(dev.config.queue_depth as usize));
}
