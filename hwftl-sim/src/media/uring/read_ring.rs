//! Reads a thread starts on an io_uring ring of its own and reaps when it likes
//! ([`Media::read_ring`]): the asynchronous twin of `caller_ring`, for a thread that must
//! never wait for the device (the drive's network thread).
//!
//! Why a ring per thread: io_uring posts a read's completion from the task that submitted
//! it (task work). On the shared ring a read started by the network thread woke that
//! thread for the task work, then the engine's poller for the completion, and the network
//! thread once more when the poller handed the reply back: three wake-ups of two threads
//! per cold read. Here the submitter is also the reaper: the task work it runs posts the
//! completion on its own ring, where it finds it on its next turn (the completion queue is
//! shared memory: looking costs no system call), and a registered eventfd wakes it from
//! `epoll` when it was idle.
//!
//! The ring owns every buffer the kernel may be reading into (each entry's slot holds its
//! pages until its completion is reaped), and dropping it waits for the kernel first.
//! Adjacent pages started together go down as one vectored entry, as on the shared ring;
//! pages of a vectored entry the kernel cut short go down again on their own.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

use super::caller_ring::entries_of;
use super::{FileMedia, IOWQ_MAX_BOUNDED_WORKERS, MAX_RUN_PAGES};
use crate::buffer::PageBuf;
use crate::error::{DeviceError, Result};
use crate::geometry::{Ppa, PAGE_SIZE};
use crate::media::{DirectRead, MediaDone, MediaReadRing};
use crate::scramble::scramble;

/// Submission-queue entries of a thread's read ring. More entries than this in flight is
/// fine: a full submission queue is handed to the kernel and refilled, and the completion
/// queue (twice as large) overflows into the kernel's backlog rather than dropping, which
/// `reap` flushes back when the ring flags it.
const READ_RING_ENTRIES: u32 = 256;

/// `IORING_ENTER_GETEVENTS` (linux/io_uring.h).
const ENTER_GETEVENTS: u32 = 1;

/// How long dropping the ring waits for the kernel to give back the buffers of reads
/// still in flight; past it they are leaked rather than freed under the kernel.
const DRAIN_PATIENCE: Duration = Duration::from_secs(10);

/// Submission attempts that failed in a row before the ring is declared broken and the
/// entries the kernel never took are failed.
const SUBMIT_FAILURES_TOLERATED: u32 = 1000;

/// One entry in the kernel: its pages (the FTL's tag, the page, its buffer), and for a
/// vectored entry the vectors the kernel reads through.
struct Slot {
    pages: Vec<(u32, Ppa, PageBuf)>,
    _vectors: Option<Box<[libc::iovec]>>,
}

// SAFETY: the vectors only point into the slot's own page buffers; the slot moves between
// threads whole (the ring it belongs to is `Send`), never shared.
unsafe impl Send for Slot {}

/// A thread's own ring of page reads on the file backend (see the module header).
pub(crate) struct FileReadRing {
    ring: IoUring,
    /// The media's file, opened once more for this ring (the same open file description's
    /// flags: O_DIRECT).
    file: File,
    path: PathBuf,
    data_offset: u64,
    /// Signalled by the kernel whenever it posts a completion on this ring.
    event: OwnedFd,
    /// Entries in the kernel (or pushed and not yet taken), by their `user_data`.
    slots: Vec<Option<Slot>>,
    free_slots: Vec<usize>,
    /// Pages the kernel read short in a vectored entry, to go down again alone.
    again: Vec<(u32, Ppa, PageBuf)>,
    /// Slots of entries pushed and not yet taken by the kernel, in push order (the order it
    /// takes them in).
    pending: VecDeque<usize>,
    /// Completions made without the kernel (the ring broke before it took them).
    failed: Vec<MediaDone>,
    /// Submission attempts failed in a row.
    submit_failures: u32,
    broken: bool,
}

impl FileMedia {
    /// [`Media::read_ring`] for the file backend.
    pub(super) fn new_read_ring(&self) -> Result<FileReadRing> {
        // Cooperative task running: a completion's task work does not interrupt the owner
        // while it runs (no inter-processor interrupt, a VM exit on a guest); it runs at the
        // owner's next system call, or wakes it if it sleeps (an `epoll_wait` then returns
        // EINTR, which the owner's loop takes as a turn with nothing new; the eventfd that
        // task work signals wakes the next one). Kernels before 5.19 lack it.
        let ring = match IoUring::builder()
            .setup_cqsize(READ_RING_ENTRIES * 2)
            .setup_coop_taskrun()
            .build(READ_RING_ENTRIES)
        {
            Ok(ring) => ring,
            Err(_) => IoUring::builder()
                .setup_cqsize(READ_RING_ENTRIES * 2)
                .build(READ_RING_ENTRIES)
                .map_err(|e| DeviceError::io("setting up a reading thread's io_uring", e))?,
        };
        // The same bound on kernel workers as the shared ring's; kernels before 5.15 lack it.
        let _ = ring
            .submitter()
            .register_iowq_max_workers(&mut [IOWQ_MAX_BOUNDED_WORKERS, IOWQ_MAX_BOUNDED_WORKERS]);
        // SAFETY: eventfd takes no pointer; a negative return is an error, checked below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(DeviceError::io("eventfd", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor this function owns from here on.
        let event = unsafe { OwnedFd::from_raw_fd(raw) };
        ring.submitter()
            .register_eventfd(event.as_raw_fd())
            .map_err(|e| DeviceError::io("registering an eventfd with io_uring", e))?;
        let file = self
            .file
            .try_clone()
            .map_err(|e| DeviceError::io(format!("dup of {}", self.path.display()), e))?;
        Ok(FileReadRing {
            ring,
            file,
            path: self.path.clone(),
            data_offset: self.data_offset,
            event,
            slots: Vec::new(),
            free_slots: Vec::new(),
            again: Vec::new(),
            pending: VecDeque::new(),
            failed: Vec::new(),
            submit_failures: 0,
            broken: false,
        })
    }
}

impl FileReadRing {
    fn slot_for(&mut self, slot: Slot) -> usize {
        match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    /// Pushes one entry for `pages` (consecutive on the media), handing the submission queue
    /// to the kernel first when it is full.
    fn push(&mut self, mut pages: Vec<(u32, Ppa, PageBuf)>) {
        if self.broken {
            self.fail_pages(pages, "the reading thread's io_uring failed");
            return;
        }
        let fd = types::Fd(self.file.as_raw_fd());
        let offset = self.data_offset + pages[0].1 * PAGE_SIZE as u64;
        let (entry, vectors): (squeue::Entry, Option<Box<[libc::iovec]>>) = if pages.len() == 1 {
            let ptr = pages[0].2.as_mut_ptr();
            (
                opcode::Read::new(fd, ptr, PAGE_SIZE as u32)
                    .offset(offset)
                    .build(),
                None,
            )
        } else {
            let iov: Box<[libc::iovec]> = pages
                .iter_mut()
                .map(|p| libc::iovec {
                    iov_base: p.2.as_mut_ptr().cast(),
                    iov_len: PAGE_SIZE,
                })
                .collect();
            let e = opcode::Readv::new(fd, iov.as_ptr(), iov.len() as u32)
                .offset(offset)
                .build();
            (e, Some(iov))
        };
        let id = self.slot_for(Slot {
            pages,
            _vectors: vectors,
        });
        let entry = entry.user_data(id as u64);
        loop {
            // SAFETY: the entry points into page buffers (heap allocations) and, for a
            // vectored entry, into boxed vectors, all held in `slots[id]` until the entry's
            // completion is reaped (`drain`) or the kernel is known never to take it
            // (`break_ring`); the ring is drained before it is dropped.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.pending.push_back(id);
                return;
            }
            // The submission queue is full: hand it to the kernel and push again.
            if !self.submit() {
                break;
            }
        }
        if let Some(slot) = self.slots[id].take() {
            self.free_slots.push(id);
            self.fail_pages(slot.pages, "the reading thread's io_uring failed");
        }
    }

    /// Hands the pushed entries to the kernel (one system call). A failure leaves them in
    /// the submission queue for the next attempt; after many in a row the ring is broken:
    /// the entries the kernel never took are failed. Returns whether the ring still works.
    fn submit(&mut self) -> bool {
        if self.broken {
            return false;
        }
        if self.pending.is_empty() {
            return true;
        }
        match self.ring.submit() {
            Ok(taken) => {
                // The kernel takes entries from the head of the queue, in order.
                let taken = taken.min(self.pending.len());
                self.pending.drain(..taken);
                if taken > 0 {
                    self.submit_failures = 0;
                    return true;
                }
                self.submit_failures += 1;
            }
            Err(e) => {
                self.submit_failures += 1;
                let transient = matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                );
                if !transient {
                    tracing::error!("io_uring_enter on a reading thread's ring: {e}");
                    self.break_ring();
                    return false;
                }
            }
        }
        if self.submit_failures >= SUBMIT_FAILURES_TOLERATED {
            tracing::error!(
                "io_uring on a reading thread took no entry {} times in a row",
                self.submit_failures
            );
            self.break_ring();
            return false;
        }
        true
    }

    /// Fails the entries the kernel never took and refuses anything new (they stay in the
    /// submission queue, never handed over again); what the kernel holds is still reaped
    /// as it finishes.
    fn break_ring(&mut self) {
        self.broken = true;
        for id in std::mem::take(&mut self.pending) {
            if let Some(slot) = self.slots.get_mut(id).and_then(Option::take) {
                self.free_slots.push(id);
                self.fail_pages(
                    slot.pages,
                    "not submitted: the reading thread's io_uring failed",
                );
            }
        }
    }

    /// Wakes the owner's poll as a completion from the kernel would: for completions made
    /// in user space (`failed`), which the kernel never signals.
    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes eight bytes from a live u64 to the ring's own eventfd. A full
        // counter (EAGAIN) means a wake-up is pending already.
        unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn fail_pages(&mut self, pages: Vec<(u32, Ppa, PageBuf)>, why: &str) {
        if !pages.is_empty() {
            self.signal();
        }
        for (id, _, buf) in pages {
            self.failed.push(MediaDone {
                id,
                result: Err(DeviceError::io(
                    "io_uring read",
                    io::Error::other(why.to_string()),
                )),
                buf: Some(buf),
            });
        }
    }

    /// Moves every posted completion to `out`; pages of a short vectored entry are queued
    /// in `again`.
    fn drain(&mut self, out: &mut Vec<MediaDone>) {
        let mut finished: Vec<(u64, i32)> = Vec::new();
        for cqe in self.ring.completion() {
            finished.push((cqe.user_data(), cqe.result()));
        }
        for (id, res) in finished {
            let Some(slot) = self.slots.get_mut(id as usize).and_then(Option::take) else {
                continue;
            };
            self.free_slots.push(id as usize);
            let multi = slot.pages.len() > 1;
            for (at, (tag, ppa, mut buf)) in slot.pages.into_iter().enumerate() {
                let reached = res >= 0 && (res as usize) >= (at + 1) * PAGE_SIZE;
                if multi && !reached {
                    // A vectored entry cut short or failed: each page it did not reach goes
                    // again alone, so one bad page fails only itself.
                    self.again.push((tag, ppa, buf));
                    continue;
                }
                let result = if res < 0 {
                    Err(DeviceError::io(
                        format!("io_uring read on {}", self.path.display()),
                        io::Error::from_raw_os_error(-res),
                    ))
                } else if !reached {
                    Err(DeviceError::io(
                        format!("io_uring read on {}", self.path.display()),
                        io::Error::other(format!("short transfer of {res} bytes")),
                    ))
                } else {
                    Ok(())
                };
                scramble(&mut buf);
                out.push(MediaDone {
                    id: tag,
                    result,
                    buf: Some(buf),
                });
            }
        }
    }

    /// Entries pushed and not yet reaped (in the kernel, or waiting to be handed to it).
    fn entries_out(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }
}

impl MediaReadRing for FileReadRing {
    fn start(&mut self, reads: Vec<DirectRead>) {
        if reads.is_empty() {
            return;
        }
        let pages: Vec<(u32, Ppa, Option<PageBuf>)> = reads
            .into_iter()
            .map(|r| (r.id, r.ppa, Some(r.buf)))
            .collect();
        let entries = entries_of(&pages, MAX_RUN_PAGES);
        let mut pages = pages;
        for e in entries {
            let run: Vec<(u32, Ppa, PageBuf)> = pages[e.first..e.first + e.len]
                .iter_mut()
                .filter_map(|p| p.2.take().map(|b| (p.0, p.1, b)))
                .collect();
            self.push(run);
        }
        self.submit();
    }

    fn reap(&mut self, out: &mut Vec<MediaDone>) {
        out.append(&mut self.failed);
        // Entries a failed attempt left behind.
        self.submit();
        if self.ring.submission().cq_overflow() {
            // Completions past the queue's size wait in the kernel's backlog until a kernel
            // entry flushes them.
            // SAFETY: no argument is passed.
            let _ = unsafe {
                self.ring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 0, ENTER_GETEVENTS, None)
            };
        }
        self.drain(out);
        if !self.again.is_empty() {
            for page in std::mem::take(&mut self.again) {
                self.push(vec![page]);
            }
            self.submit();
        }
        out.append(&mut self.failed);
    }

    fn event_fd(&self) -> RawFd {
        self.event.as_raw_fd()
    }

    fn broken(&self) -> bool {
        self.broken
    }

    fn notify(&self) {
        self.signal();
    }
}

impl Drop for FileReadRing {
    fn drop(&mut self) {
        // Buffers must outlive the kernel's use of them: wait for every entry it holds.
        let deadline = Instant::now() + DRAIN_PATIENCE;
        let mut sink = Vec::new();
        while self.entries_out() > 0 && Instant::now() < deadline {
            self.submit();
            if self.entries_out() == self.pending.len() {
                // Nothing in the kernel yet (a refused hand-over): try again shortly.
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            // SAFETY: no argument is passed; only completions are waited for (whatever was
            // pushed was handed over by `submit` above, or failed by `break_ring`).
            let r = unsafe {
                self.ring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 1, ENTER_GETEVENTS, None)
            };
            if r.is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.again.clear();
            self.drain(&mut sink);
            sink.clear();
            self.failed.clear();
        }
        if self.entries_out() > 0 {
            tracing::error!(
                "a reading thread's io_uring still holds {} read(s) at close; leaking their buffers",
                self.entries_out()
            );
            std::mem::forget(std::mem::take(&mut self.slots));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::media::{Media, MediaLayout};

    fn media(dir: &std::path::Path) -> FileMedia {
        let mut media = FileMedia::open(&dir.join("ring.img"), true, 8).unwrap();
        media
            .prepare(
                MediaLayout {
                    meta_bytes: 8192,
                    physical_pages: 16,
                },
                true,
            )
            .unwrap();
        media
    }

    #[test]
    fn a_broken_ring_fails_what_the_kernel_never_took_and_every_later_read() {
        let dir = tempfile::tempdir().unwrap();
        let media = media(dir.path());
        let mut ring = media.new_read_ring().unwrap();
        // Pushed, not yet handed to the kernel.
        ring.push(vec![(7, 3, PageBuf::for_read())]);
        assert_eq!(ring.pending.len(), 1);
        ring.break_ring();
        assert!(ring.broken());
        let mut out = Vec::new();
        ring.reap(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].id, 7);
        assert!(out[0].result.is_err());
        assert!(out[0].buf.is_some(), "the buffer comes back");
        out.clear();
        ring.start(vec![DirectRead {
            id: 8,
            ppa: 4,
            buf: PageBuf::for_read(),
        }]);
        ring.reap(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].id, 8);
        assert!(out[0].result.is_err());
        assert_eq!(ring.entries_out(), 0);
    }
}
