//! Reads on the calling thread's own io_uring ring ([`Media::read_direct`]): a thread that
//! waits for its own reads (an in-process `multi_get`, a synchronous value read) submits
//! them and sleeps for their completions on a ring no other thread uses, as an NVMe driver
//! gives each core its own submission and completion queue pair.
//!
//! Why not the shared ring: io_uring posts a read's completion from the task that
//! *submitted* it (task work). On the shared ring a waiting thread was woken for that task
//! work, the poller then for the completion, and the waiter once more by the poller; and
//! submitters spun on the ring's kernel mutex behind one another's doorbell (a VM exit on a
//! virtio disk). Here one `io_uring_enter` submits a thread's whole batch and sleeps until
//! all of it is done, the completions posted by the thread that waits for them.
//! (`benches/results/caller-ring-2026-11-30` has the profile and the paired runs.)
//!
//! Adjacent pages still go down as one vectored read, as on the shared ring; a run the
//! kernel cut short is read again page by page, so one bad page fails only itself.

use std::cell::RefCell;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

use io_uring::{opcode, types, IoUring};

use super::{FileMedia, IOWQ_MAX_BOUNDED_WORKERS, MAX_RUN_PAGES};
use crate::buffer::PageBuf;
use crate::error::DeviceError;
use crate::geometry::{Ppa, PAGE_SIZE};
use crate::media::{DirectRead, MediaDone};
use crate::scramble::scramble;

/// Entries of a thread's own ring: the most read entries one round keeps in the kernel (a
/// vectored entry counts once). The FTL's tag pool bounds the pages in flight anyway.
pub(crate) const CALLER_RING_ENTRIES: u32 = 64;

/// `IORING_ENTER_GETEVENTS` (linux/io_uring.h).
const ENTER_GETEVENTS: u32 = 1;

thread_local! {
    /// This thread's ring, made at its first direct read. It holds nothing between calls
    /// (each call waits for every entry it submitted), so dropping it at thread exit is safe.
    static CALLER_RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Logged once: a thread could not have a ring of its own (its reads then go down as
/// blocking `pread`s, slower but correct).
static RING_REFUSED_LOGGED: AtomicBool = AtomicBool::new(false);

/// One entry of a round: pages `first..first + len` of the call's list, consecutive on the
/// media from `ppa`.
pub(super) struct Entry {
    pub(super) first: usize,
    pub(super) len: usize,
    ppa: Ppa,
}

impl FileMedia {
    /// [`Media::read_direct`] for the file backend: on the calling thread's ring.
    pub(super) fn read_on_caller_ring(&self, reads: Vec<DirectRead>) -> Vec<MediaDone> {
        CALLER_RING.with(|cell| {
            let Ok(mut cell) = cell.try_borrow_mut() else {
                // Not reachable (nothing here calls back in), but a nested call must not
                // share a ring with the call it interrupted.
                return self.read_blocking(reads);
            };
            if cell.is_none() {
                match IoUring::new(CALLER_RING_ENTRIES) {
                    Ok(ring) => {
                        // The same bound on kernel workers as the shared ring's (a read the
                        // kernel cannot do inline goes to one); kernels before 5.15 lack it.
                        let _ = ring.submitter().register_iowq_max_workers(&mut [
                            IOWQ_MAX_BOUNDED_WORKERS,
                            IOWQ_MAX_BOUNDED_WORKERS,
                        ]);
                        *cell = Some(ring);
                    }
                    Err(e) => {
                        if !RING_REFUSED_LOGGED.swap(true, Ordering::Relaxed) {
                            tracing::warn!(
                                "no io_uring ring for a reading thread ({e}): its reads use pread"
                            );
                        }
                        return self.read_blocking(reads);
                    }
                }
            }
            let Some(ring) = cell.as_mut() else {
                return self.read_blocking(reads);
            };
            let (done, broken) = self.read_rounds(ring, reads);
            if broken {
                // Nothing of ours is left in the kernel (see `read_round`): a new ring next
                // time, in case this one is wedged.
                *cell = None;
            }
            done
        })
    }

    /// Reads every page, in rounds of at most [`CALLER_RING_ENTRIES`] entries; pages of a
    /// vectored entry the kernel cut short go again on their own. Returns the completions
    /// and whether the ring failed.
    fn read_rounds(&self, ring: &mut IoUring, reads: Vec<DirectRead>) -> (Vec<MediaDone>, bool) {
        let mut out = Vec::with_capacity(reads.len());
        let mut pages: Vec<(u32, Ppa, Option<PageBuf>)> = reads
            .into_iter()
            .map(|r| (r.id, r.ppa, Some(r.buf)))
            .collect();
        let entries = entries_of(&pages, MAX_RUN_PAGES);
        let mut again = Vec::new();
        let mut broken = self.read_all(ring, &mut pages, &entries, &mut out, &mut again, false);
        if !again.is_empty() {
            // One page per entry now: each reports its own result (none comes back short).
            let singles: Vec<Entry> = again
                .iter()
                .map(|&i| Entry {
                    first: i,
                    len: 1,
                    ppa: pages[i].1,
                })
                .collect();
            let mut none = Vec::new();
            broken = self.read_all(ring, &mut pages, &singles, &mut out, &mut none, broken);
        }
        (out, broken)
    }

    /// [`FileMedia::read_round`] over `entries` in rounds that fit the ring; once the ring
    /// has failed (`broken`, on entry or in a round) the rest fail without it. Returns
    /// whether it failed.
    fn read_all(
        &self,
        ring: &mut IoUring,
        pages: &mut [(u32, Ppa, Option<PageBuf>)],
        entries: &[Entry],
        out: &mut Vec<MediaDone>,
        again: &mut Vec<usize>,
        mut broken: bool,
    ) -> bool {
        for round in entries.chunks(CALLER_RING_ENTRIES as usize) {
            if broken {
                fail(pages, round, out, "the reading thread's io_uring failed");
            } else {
                broken = self.read_round(ring, pages, round, out, again);
            }
        }
        broken
    }

    /// Submits one round's entries and waits for all of them in the same system call.
    /// Pages of a multi-page entry that came back short are put in `again`; every other page
    /// gets its completion in `out`. Returns true when the ring failed: the entries the
    /// kernel never took are failed without it, and the call has waited for every entry it
    /// did take, so no buffer is still the kernel's.
    fn read_round(
        &self,
        ring: &mut IoUring,
        pages: &mut [(u32, Ppa, Option<PageBuf>)],
        round: &[Entry],
        out: &mut Vec<MediaDone>,
        again: &mut Vec<usize>,
    ) -> bool {
        let fd = types::Fd(self.file.as_raw_fd());
        // The vectors of multi-page entries; they live until this round's end.
        let mut vectors: Vec<Box<[libc::iovec]>> = Vec::new();
        let mut pushed = 0usize;
        {
            let mut sq = ring.submission();
            for (n, e) in round.iter().enumerate() {
                let offset = self.page_offset(e.ppa);
                let sqe = if e.len == 1 {
                    let Some(buf) = pages[e.first].2.as_mut() else {
                        continue;
                    };
                    opcode::Read::new(fd, buf.as_mut_ptr(), PAGE_SIZE as u32)
                        .offset(offset)
                        .build()
                } else {
                    let iov: Box<[libc::iovec]> = pages[e.first..e.first + e.len]
                        .iter_mut()
                        .filter_map(|p| p.2.as_mut())
                        .map(|b| libc::iovec {
                            iov_base: b.as_mut_ptr().cast(),
                            iov_len: PAGE_SIZE,
                        })
                        .collect();
                    let sqe = opcode::Readv::new(fd, iov.as_ptr(), iov.len() as u32)
                        .offset(offset)
                        .build();
                    vectors.push(iov);
                    sqe
                };
                // SAFETY: the entry points into page buffers held in `pages` (heap
                // allocations, not moved or dropped before this function has reaped the
                // entry's completion or seen the kernel never take it) and, for a vectored
                // entry, into the boxed vectors in `vectors`, kept to the end of this round.
                // The ring has room for the round (at most its entry count).
                if unsafe { sq.push(&sqe.user_data(n as u64)) }.is_err() {
                    break;
                }
                pushed += 1;
            }
            sq.sync();
        }
        let mut reaped = 0usize;
        let mut finished = vec![false; round.len()];
        let mut broken = false;
        while reaped < pushed {
            let untaken = ring.submission().len();
            let in_kernel = pushed - reaped - untaken;
            let r = if broken {
                // Only wait for what the kernel holds; the untaken entries are never submitted.
                // SAFETY: no argument is passed.
                unsafe {
                    ring.submitter().enter::<libc::sigset_t>(
                        0,
                        in_kernel as u32,
                        ENTER_GETEVENTS,
                        None,
                    )
                }
            } else {
                ring.submit_and_wait(pushed - reaped)
            };
            if let Err(e) = r {
                let transient = matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                );
                if !transient {
                    if !broken {
                        tracing::error!("io_uring_enter on a reading thread's ring: {e}");
                        broken = true;
                    } else {
                        // Still failing while the kernel holds our reads: do not spin hot.
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            }
            for cqe in ring.completion() {
                let n = cqe.user_data() as usize;
                let Some(e) = round.get(n) else { continue };
                finished[n] = true;
                reaped += 1;
                self.complete(pages, e, cqe.result(), out, again);
            }
            if broken && ring.submission().len() + reaped == pushed {
                // Everything the kernel took is reaped; the rest it never will take.
                break;
            }
        }
        for (n, e) in round.iter().enumerate() {
            if !finished[n] {
                fail(
                    pages,
                    std::slice::from_ref(e),
                    out,
                    "not submitted: the reading thread's io_uring failed",
                );
            }
        }
        drop(vectors);
        broken
    }

    /// One entry's completion: each page reached is read, a short multi-page entry sends its
    /// other pages to `again`.
    fn complete(
        &self,
        pages: &mut [(u32, Ppa, Option<PageBuf>)],
        e: &Entry,
        res: i32,
        out: &mut Vec<MediaDone>,
        again: &mut Vec<usize>,
    ) {
        for at in 0..e.len {
            let i = e.first + at;
            let reached = res >= 0 && (res as usize) >= (at + 1) * PAGE_SIZE;
            if e.len > 1 && !reached {
                again.push(i);
                continue;
            }
            out.push(done(&mut pages[i], self.page_result(res, at, true)));
        }
    }

    /// The fallback of a thread without a ring of its own: one blocking `pread` per page.
    fn read_blocking(&self, reads: Vec<DirectRead>) -> Vec<MediaDone> {
        reads
            .into_iter()
            .map(|mut r| {
                let result = self
                    .file
                    .read_exact_at(&mut r.buf[..PAGE_SIZE], self.page_offset(r.ppa))
                    .map_err(|e| DeviceError::io(format!("pread on {}", self.path.display()), e));
                scramble(&mut r.buf);
                MediaDone {
                    id: r.id,
                    result,
                    buf: Some(r.buf),
                }
            })
            .collect()
    }
}

/// Groups the pages, in the order given, into entries: a page joins the entry before it when
/// it is the next page on the media, up to `max_run` pages.
pub(super) fn entries_of(pages: &[(u32, Ppa, Option<PageBuf>)], max_run: usize) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    for (i, &(_, ppa, _)) in pages.iter().enumerate() {
        match entries.last_mut() {
            Some(e) if e.len < max_run && e.ppa + e.len as u64 == ppa => e.len += 1,
            _ => entries.push(Entry {
                first: i,
                len: 1,
                ppa,
            }),
        }
    }
    entries
}

/// A page's completion: its buffer back, descrambled (as every read from the media).
fn done(page: &mut (u32, Ppa, Option<PageBuf>), result: crate::error::Result<()>) -> MediaDone {
    let buf = page.2.take().map(|mut b| {
        scramble(&mut b);
        b
    });
    MediaDone {
        id: page.0,
        result,
        buf,
    }
}

/// Fails every page of `entries` without the kernel.
fn fail(
    pages: &mut [(u32, Ppa, Option<PageBuf>)],
    entries: &[Entry],
    out: &mut Vec<MediaDone>,
    why: &str,
) {
    for e in entries {
        for page in &mut pages[e.first..e.first + e.len] {
            let err = DeviceError::io("io_uring read", io::Error::other(why.to_string()));
            out.push(done(page, Err(err)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_list(ppas: &[Ppa]) -> Vec<(u32, Ppa, Option<PageBuf>)> {
        ppas.iter()
            .enumerate()
            .map(|(i, &p)| (i as u32, p, None))
            .collect()
    }

    #[test]
    fn adjacent_pages_in_order_form_one_entry_up_to_the_run_limit() {
        let e = entries_of(&page_list(&[4, 5, 6, 9, 8, 10, 11]), 64);
        let shape: Vec<(usize, usize, Ppa)> = e.iter().map(|e| (e.first, e.len, e.ppa)).collect();
        // 9 then 8 is not ascending: 8 starts its own entry, which 10 does not extend.
        assert_eq!(shape, vec![(0, 3, 4), (3, 1, 9), (4, 1, 8), (5, 2, 10)]);
        let e = entries_of(&page_list(&[1, 2, 3, 4, 5]), 2);
        assert_eq!(e.iter().map(|e| e.len).collect::<Vec<_>>(), vec![2, 2, 1]);
    }
}
