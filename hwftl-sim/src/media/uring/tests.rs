//! Tests of the io_uring media: grouping, vectored runs, short runs, counters.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::{Backend, DeviceConfig, Ftl, Geometry};

fn cfg() -> DeviceConfig {
    DeviceConfig::new(Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 8,
        pages_per_block: 4,
        spare_blocks_per_chip: 1,
    })
}

#[test]
fn reads_go_down_alone_unless_adjacent_and_writes_together() {
    let q = |items: &[(IoKind, Ppa)]| -> VecDeque<Queued> {
        items
            .iter()
            .map(|&(kind, ppa)| Queued {
                kind,
                ppa,
                last: ppa,
            })
            .collect()
    };
    use IoKind::{Flush, Program, Read};
    assert_eq!(group_len(&q(&[])), 0);
    assert_eq!(group_len(&q(&[(Read, 5), (Read, 9)])), 1);
    assert_eq!(
        group_len(&q(&[(Read, 5), (Read, 6), (Read, 7), (Read, 9)])),
        3
    );
    assert_eq!(group_len(&q(&[(Read, 5), (Program, 6)])), 1);
    assert_eq!(
        group_len(&q(&[(Program, 40), (Program, 3), (Flush, 0), (Read, 1)])),
        3
    );
}

#[test]
fn empty_or_short_files_are_not_formatted() {
    let dir = tempfile::tempdir().unwrap();
    for len in [0usize, 100, 5000, 8191] {
        let path = dir.path().join(format!("short-{len}.img"));
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let backend = Backend::File(path);
        let err = Ftl::open(&backend, cfg()).err().unwrap();
        assert!(
            matches!(err, DeviceError::NotFormatted),
            "{len} bytes: {err}"
        );
        let err = Ftl::probe(&backend).err().unwrap();
        assert!(
            matches!(err, DeviceError::NotFormatted),
            "{len} bytes: {err}"
        );
    }
    // An existing empty file holds no device: open_or_format formats it.
    let path = dir.path().join("empty.img");
    std::fs::File::create(&path).unwrap();
    Ftl::open_or_format(&Backend::File(path), cfg())
        .unwrap()
        .close()
        .unwrap();
}

fn media(dir: &Path, tags: u32, pages: u64) -> FileMedia {
    let mut media = FileMedia::open(&dir.join("runs.img"), true, tags).unwrap();
    media
        .prepare(
            MediaLayout {
                meta_bytes: 8192,
                physical_pages: pages,
            },
            true,
        )
        .unwrap();
    media
}

/// Polls until `n` completions came back; returns them by tag.
fn collect(media: &FileMedia, n: usize) -> Vec<(u32, Result<()>, Option<PageBuf>)> {
    let mut out = Vec::new();
    while out.len() < n {
        media.poll(&mut out, true).unwrap();
    }
    let mut got: Vec<_> = out.into_iter().map(|d| (d.id, d.result, d.buf)).collect();
    got.sort_by_key(|d| d.0);
    got
}

/// Consecutive pages started before a doorbell go down as one vectored entry per run
/// (a run ends at a gap, at a change between reads and programs, and at
/// `MAX_RUN_PAGES`), every page completes on its own tag, and what the runs wrote
/// reads back page for page through runs of reads.
#[test]
fn consecutive_pages_go_down_as_one_vectored_entry_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let n = MAX_RUN_PAGES as u32 + 3;
    let media = media(dir.path(), 2 * n, 4 * u64::from(n));
    let page = |i: u32| PageBuf::from_slice(&[i as u8 + 1; PAGE_SIZE]);
    // Pages 0..n, then page 2n (a gap): three runs, the first MAX_RUN_PAGES long.
    for i in 0..n {
        let op = MediaOp::Program {
            ppa: u64::from(i),
            buf: page(i),
        };
        assert!(media.start(i, op).is_ok());
    }
    assert_eq!(
        media.unsubmitted.lock().len(),
        1,
        "the first full run went down"
    );
    let op = MediaOp::Program {
        ppa: 2 * u64::from(n),
        buf: page(n),
    };
    assert!(media.start(n, op).is_ok());
    assert_eq!(media.unsubmitted.lock().len(), 2, "a gap ends a run");
    assert_eq!(media.sq_lock.lock().ids.len(), 1);
    assert_eq!(media.in_flight.load(Ordering::Acquire), n as usize + 1);
    media.doorbell().unwrap();
    for (id, result, buf) in collect(&media, n as usize + 1) {
        result.unwrap();
        assert_eq!(
            buf.unwrap()[0],
            id as u8 + 1,
            "tag {id} got its own bytes back"
        );
    }
    assert_eq!(media.in_flight.load(Ordering::Acquire), 0);
    // Read back in one pass: runs of reads, the gap page on its own.
    let ppas: Vec<Ppa> = (0..n).map(u64::from).chain([2 * u64::from(n)]).collect();
    for (id, &ppa) in ppas.iter().enumerate() {
        let op = MediaOp::Read {
            ppa,
            buf: PageBuf::for_read(),
        };
        assert!(media.start(id as u32, op).is_ok());
    }
    media.doorbell().unwrap();
    for (id, result, buf) in collect(&media, ppas.len()) {
        result.unwrap();
        let buf = buf.unwrap();
        assert!(buf.iter().all(|&b| b == id as u8 + 1), "page of tag {id}");
    }
    assert!(media.unsubmitted.lock().is_empty());
}

/// A run the kernel transfers only in part fails only the pages it did not reach: they go
/// down again one by one and report their own results (here a read run crossing the end
/// of the file: the pages before the end read back, the pages past it fail alone).
#[test]
fn a_short_run_fails_only_the_pages_it_did_not_reach() {
    let dir = tempfile::tempdir().unwrap();
    let media = media(dir.path(), 8, 8);
    for i in 0..8u32 {
        let op = MediaOp::Program {
            ppa: u64::from(i),
            buf: PageBuf::from_slice(&[i as u8 + 1; PAGE_SIZE]),
        };
        assert!(media.start(i, op).is_ok());
    }
    media.doorbell().unwrap();
    for (_, result, _) in collect(&media, 8) {
        result.unwrap();
    }
    let size = media.size().unwrap();
    let pages_in_file = (size - 8192) / PAGE_SIZE as u64;
    let from = pages_in_file - 2;
    for i in 0..4u32 {
        let op = MediaOp::Read {
            ppa: from + u64::from(i),
            buf: PageBuf::for_read(),
        };
        assert!(media.start(i, op).is_ok());
    }
    media.doorbell().unwrap();
    let got = collect(&media, 4);
    assert!(
        got[0].1.is_ok() && got[1].1.is_ok(),
        "pages before the end read"
    );
    for (id, result, _) in &got[2..] {
        // Failed by their own read (nothing transferred), not by the run's 16 KiB.
        let e = result
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(e.contains("short transfer of 0 bytes"), "tag {id}: {e}");
    }
    assert_eq!(media.in_flight.load(Ordering::Acquire), 0);
    assert!(media.unsubmitted.lock().is_empty());
}

/// A read or a flush started after staged programs pushes them first: ring order stays
/// start order, and a page read right after its program (once that completed) holds it.
#[test]
fn a_read_or_flush_pushes_the_staged_run_first() {
    let dir = tempfile::tempdir().unwrap();
    let media = media(dir.path(), 8, 16);
    for i in 0..3u32 {
        let op = MediaOp::Program {
            ppa: u64::from(i),
            buf: PageBuf::from_slice(&[7; PAGE_SIZE]),
        };
        assert!(media.start(i, op).is_ok());
    }
    assert!(media.unsubmitted.lock().is_empty());
    assert!(media.start(3, MediaOp::Flush).is_ok());
    let kinds: Vec<IoKind> = media.unsubmitted.lock().iter().map(|q| q.kind).collect();
    assert!(kinds == [IoKind::Program, IoKind::Flush]);
    let op = MediaOp::Read {
        ppa: 9,
        buf: PageBuf::for_read(),
    };
    assert!(media.start(4, op).is_ok());
    // Nothing is handed to the kernel without a doorbell or a poll, and a poll hands
    // the staged read over too.
    for (_, result, _) in collect(&media, 5) {
        result.unwrap();
    }
    assert!(media.sq_lock.lock().ids.is_empty());
}

/// One "operation in flight" flag per submitter, all clear.
fn idle_flags(threads: u32) -> Arc<Vec<AtomicBool>> {
    Arc::new((0..threads).map(|_| AtomicBool::new(false)).collect())
}

/// One thread per flag in `busy`, each starting `ops` operations on its own tag with `step`
/// (given the media, its tag and the operation's number), one at a time: it waits until the
/// poller cleared its flag before the next.
fn submitters(
    media: &Arc<FileMedia>,
    busy: &Arc<Vec<AtomicBool>>,
    ops: u32,
    step: fn(&FileMedia, u32, u32),
) -> Vec<std::thread::JoinHandle<()>> {
    (0..busy.len() as u32)
        .map(|id| {
            let (media, busy) = (media.clone(), busy.clone());
            std::thread::spawn(move || {
                for i in 0..ops {
                    while busy[id as usize].load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    busy[id as usize].store(true, Ordering::Release);
                    step(&media, id, i);
                }
            })
        })
        .collect()
}

/// Submitters push and ring while a poller enters the ring without `sq_lock`: the counters
/// must never go below zero (a wrapped `in_flight`) and must end at zero.
#[test]
fn counters_stay_exact_under_concurrent_submit_and_poll() {
    const THREADS: u32 = 4;
    const OPS: u32 = 300;
    let dir = tempfile::tempdir().unwrap();
    let mut media = FileMedia::open(&dir.path().join("ring.img"), true, THREADS).unwrap();
    media
        .prepare(
            MediaLayout {
                meta_bytes: 8192,
                physical_pages: u64::from(THREADS),
            },
            true,
        )
        .unwrap();
    let media = Arc::new(media);
    let busy = idle_flags(THREADS);
    let submitters = submitters(&media, &busy, OPS, |media, id, i| {
        let op = MediaOp::Read {
            ppa: u64::from(id),
            buf: PageBuf::zeroed(),
        };
        assert!(media.start(id, op).is_ok());
        // Every other entry is left for the poller to hand over.
        if i % 2 == 0 {
            media.doorbell().unwrap();
        }
    });
    let mut done = 0;
    let mut out = Vec::new();
    while done < THREADS * OPS {
        media.poll(&mut out, false).unwrap();
        let in_flight = media.in_flight.load(Ordering::Acquire);
        assert!(
            in_flight <= THREADS as usize,
            "in_flight wrapped: {in_flight}"
        );
        for d in out.drain(..) {
            d.result.unwrap();
            busy[d.id as usize].store(false, Ordering::Release);
            done += 1;
        }
        std::thread::yield_now();
    }
    for s in submitters {
        s.join().unwrap();
    }
    assert_eq!(media.in_flight.load(Ordering::Acquire), 0);
    assert!(media.unsubmitted.lock().is_empty());
}

/// `doorbell_if_idle` rings only while the kernel holds none of the ring's entries: with
/// one handed over and not yet drained, a later program stays queued (no system call), and
/// the next blocking poll hands it over before it waits, so both complete; once everything
/// is drained the count is back to zero and the doorbell rings again.
#[test]
fn a_doorbell_while_busy_leaves_the_entry_to_the_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let media = media(dir.path(), 8, 16);
    let program = |id: u32, ppa: Ppa| MediaOp::Program {
        ppa,
        buf: PageBuf::from_slice(&[id as u8 + 1; PAGE_SIZE]),
    };
    assert!(media.start(0, program(0, 0)).is_ok());
    assert!(media.doorbell_if_idle().unwrap(), "an idle ring rings");
    assert_eq!(media.in_kernel.load(Ordering::SeqCst), 1);
    // Not adjacent to page 0: an entry of its own.
    assert!(media.start(1, program(1, 5)).is_ok());
    assert!(
        !media.doorbell_if_idle().unwrap(),
        "an entry still in the kernel: no ring"
    );
    assert_eq!(
        media.sq_lock.lock().ids.len(),
        1,
        "the program is still staged"
    );
    assert_eq!(media.in_kernel.load(Ordering::SeqCst), 1);
    for (id, result, buf) in collect(&media, 2) {
        result.unwrap();
        assert_eq!(buf.unwrap()[0], id as u8 + 1);
    }
    assert_eq!(media.in_kernel.load(Ordering::SeqCst), 0);
    assert_eq!(media.in_flight.load(Ordering::Acquire), 0);
    assert!(media.unsubmitted.lock().is_empty());
    assert!(media.start(2, program(2, 9)).is_ok());
    assert!(media.doorbell_if_idle().unwrap(), "drained: it rings again");
    let done = collect(&media, 1);
    assert_eq!(done[0].0, 2);
}

/// Submitters that ring only when idle, beside a poller that loops as the engine's does:
/// every program completes (none is stranded by a doorbell that found the ring busy) and
/// the counts end at zero.
#[test]
fn doorbells_only_when_idle_strand_nothing_beside_a_looping_poller() {
    const THREADS: u32 = 4;
    const OPS: u32 = 300;
    let dir = tempfile::tempdir().unwrap();
    let media = Arc::new(media(dir.path(), THREADS, u64::from(THREADS) * 4));
    let busy = idle_flags(THREADS);
    let submitters = submitters(&media, &busy, OPS, |media, id, _| {
        // Pages far apart: each program is an entry of its own.
        let op = MediaOp::Program {
            ppa: u64::from(id) * 4,
            buf: PageBuf::from_slice(&[id as u8; PAGE_SIZE]),
        };
        assert!(media.start(id, op).is_ok());
        media.doorbell_if_idle().unwrap();
    });
    let mut done = 0;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < THREADS * OPS {
        assert!(
            Instant::now() < deadline,
            "stranded: {done} of {} completed",
            THREADS * OPS
        );
        // A blocking poll returns at once when nothing is in flight.
        media.poll(&mut out, true).unwrap();
        for d in out.drain(..) {
            d.result.unwrap();
            busy[d.id as usize].store(false, Ordering::Release);
            done += 1;
        }
    }
    for s in submitters {
        s.join().unwrap();
    }
    assert_eq!(media.in_kernel.load(Ordering::SeqCst), 0);
    assert_eq!(media.in_flight.load(Ordering::Acquire), 0);
    assert!(media.unsubmitted.lock().is_empty());
    assert!(media.sq_lock.lock().ids.is_empty());
}
