//! File and raw block device media through io_uring, with O_DIRECT and 4 KiB-aligned buffers:
//! the real data path on this host. Page data is scrambled on the way down (see
//! [`crate::scramble`]) so erased pages (punched holes / zeroed ranges) are recognisable.
//! Reads and programs of adjacent pages started together go down as one vectored entry
//! (`StagedRun`, up to [`MAX_RUN_PAGES`]), each page still completing on its own tag.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use io_uring::{opcode, squeue, types, IoUring};
use parking_lot::Mutex;

use super::{runs, DirectRead, Media, MediaDone, MediaLayout, MediaOp, MediaReadRing, StartError};
use crate::buffer::{AlignedBuf, PageBuf, BUFFER_ALIGN};
use crate::error::{DeviceError, Result};
use crate::geometry::{Ppa, PAGE_SIZE};
use crate::scramble::{is_erased, scramble};

/// `BLKGETSIZE64`: size of a block device in bytes.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `BLKZEROOUT`: zero a byte range of a block device.
const BLKZEROOUT: libc::c_ulong = 0x127f;
/// Most kernel io-wq workers (`iou-wrk-*` threads) a ring may use for work the kernel
/// cannot do inline (fsync, writes that allocate blocks). They are kernel threads in the
/// drive's thread group; the bound keeps the drive's thread set small and fixed.
pub const IOWQ_MAX_BOUNDED_WORKERS: u32 = 2;
/// `IORING_ENTER_GETEVENTS` (linux/io_uring.h): wait for completions in `io_uring_enter`.
const IORING_ENTER_GETEVENTS: u32 = 1;

#[derive(Clone, Copy, PartialEq, Eq)]
enum IoKind {
    Read,
    Program,
    Flush,
}

/// An entry pushed to the submission queue and not yet handed to the kernel: what it is and
/// where it goes, so that [`FileMedia::submit_queued`] can group it with its neighbours.
#[derive(Clone, Copy)]
struct Queued {
    kind: IoKind,
    /// The entry's first page.
    ppa: Ppa,
    /// Its last page (a vectored entry covers `ppa..=last`).
    last: Ppa,
}

/// How many of the oldest queued entries go to the kernel in one `io_uring_enter`: programs
/// (and flushes) together, reads only with reads of the following pages.
///
/// A group of three or more entries is submitted under one block-layer plug: adjacent pages
/// merge into one request, and the batch reaches the disk in one go. That is what writes and
/// sequential reads want. Random reads submitted as a batch wait for each other: on this
/// host's virtio disk, 8 KiB random reads at depth 32 ran at 0.82-0.87x fio when each poller
/// turn submitted its reads together, and at 0.95-0.99x when each went down on its own
/// (`cargo xtask bench device --quick --only randread`).
fn group_len(queue: &VecDeque<Queued>) -> usize {
    let Some(first) = queue.front() else {
        return 0;
    };
    let mut prev = *first;
    let mut n = 1;
    for q in queue.iter().skip(1) {
        let joins = match (prev.kind, q.kind) {
            (IoKind::Read, IoKind::Read) => q.ppa == prev.last + 1,
            (IoKind::Read, _) | (_, IoKind::Read) => false,
            _ => true,
        };
        if !joins {
            break;
        }
        prev = *q;
        n += 1;
    }
    n
}

/// Most pages one vectored read or write carries: 64 x 8 KiB = 512 KiB, far under the
/// kernel's 1,024 vectors per call.
///
/// One system-call entry per page made the kernel's direct-I/O path (`iomap_dio_rw`, one
/// bio each) the cost of every write: on this host's virtio disk `fio --rw=write --direct=1
/// --ioengine=io_uring --iodepth=32` ran 916 MB/s at 60% of a core in the kernel with 8 KiB
/// requests, and 2,714 MB/s at 24% with 64 KiB ones.
const MAX_RUN_PAGES: usize = 64;

/// Reads, or programs, of consecutive pages started and not yet pushed to the submission
/// queue: they go down together as one vectored read or write
/// ([`FileMedia::push_staged`]). Their buffers are in their slots meanwhile. Guarded by
/// `sq_lock`; a page that does not extend the run pushes it first, so ring order stays
/// start order.
struct StagedRun {
    /// Reads or programs.
    kind: IoKind,
    /// Tags in page order; the first names the run's entry in the ring.
    ids: Vec<u32>,
    /// The run's first page.
    first: Ppa,
}

impl Default for StagedRun {
    fn default() -> Self {
        StagedRun {
            kind: IoKind::Program,
            ids: Vec::with_capacity(MAX_RUN_PAGES),
            first: 0,
        }
    }
}

impl StagedRun {
    /// Whether a `kind` of `ppa` extends the run (an empty run takes anything).
    fn extends(&self, kind: IoKind, ppa: Ppa) -> bool {
        self.ids.is_empty()
            || (kind == self.kind
                && self.ids.len() < MAX_RUN_PAGES
                && ppa == self.first + self.ids.len() as u64)
    }
}

/// The vectors of a run's read or write, pointing into the page buffers of the run's slots.
struct IoVecs(Box<[libc::iovec]>);

// SAFETY: the vectors only point into page buffers owned by the slots of the same run, which
// outlive them (a run's slots are emptied together, when its completion is reaped); nothing
// dereferences them in user space, so moving them to another thread cannot race.
unsafe impl Send for IoVecs {}

/// The other pages of a vectored read or write, kept in the slot of its first page.
struct RunTail {
    /// The run's first page.
    first: Ppa,
    /// Tags of the second and later pages, in page order.
    followers: Vec<u32>,
    /// Kept alive here while the kernel uses them.
    _iovecs: IoVecs,
}

struct IoSlot {
    kind: IoKind,
    /// Kept alive here while the kernel owns its memory.
    buf: Option<PageBuf>,
    /// For the first page of a vectored read or write: the rest of it.
    run: Option<RunTail>,
}

pub(crate) struct FileMedia {
    path: PathBuf,
    file: File,
    /// A second open of the file holding an exclusive `flock`: one owner per device. The
    /// kernel drops it when the process ends, however it ends; a power cut drops it too.
    owner: Mutex<Option<File>>,
    block_device: bool,
    ring: IoUring,
    /// Serialises use of the submission queue, and holds the programs staged for it.
    sq_lock: Mutex<StagedRun>,
    /// Serialises use of the completion queue.
    cq_lock: Mutex<()>,
    slots: Mutex<Vec<Option<IoSlot>>>,
    in_flight: AtomicUsize,
    /// Entries of this ring the kernel took whose completions have not been drained yet
    /// ([`Media::doorbell_if_idle`]). Added after the system call that handed them over, so a
    /// completion drained first makes it dip below zero for a moment: read as "none", which
    /// only makes that doorbell ring.
    in_kernel: AtomicIsize,
    /// Entries pushed to the submission queue and not yet handed to the kernel, oldest
    /// first (in ring order). Lock order: `sq_lock` or `cq_lock` before this.
    unsubmitted: Mutex<VecDeque<Queued>>,
    /// Completions made up in user space: the pages of a staged run the submission queue
    /// refused (it cannot happen while every entry holds a tag of its own and the ring has
    /// an entry per tag, but a refusal must not lose a page).
    refused: Mutex<Vec<MediaDone>>,
    data_offset: u64,
}

/// Opens `path` once more and takes an exclusive, non-blocking `flock` on it: the owner
/// lock of the device. Locks of separate opens conflict even within one process.
///
/// # Errors
/// `InUse` when another open holds the lock; `Io` when the file cannot be opened or locked.
pub(crate) fn lock_owner(path: &Path) -> Result<File> {
    let f = File::open(path)
        .map_err(|e| DeviceError::io(format!("opening {} to lock it", path.display()), e))?;
    // A lock just released can stay held a moment longer: a child this process forks
    // (any thread spawning a program) shares the lock's open file until it execs, so a
    // refused lock is tried again for a short while before the device counts as in use.
    let deadline = std::time::Instant::now() + OWNER_LOCK_PATIENCE;
    loop {
        // SAFETY: `f` owns a valid open file descriptor for the duration of the call; flock
        // takes no pointers.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(f);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(DeviceError::io(format!("locking {}", path.display()), e));
        }
        if std::time::Instant::now() >= deadline {
            return Err(DeviceError::InUse {
                path: path.display().to_string(),
                holder: lock_holder(&f).unwrap_or_else(|| "holder unknown".into()),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// How long a refused owner lock is tried again before the device counts as in use.
const OWNER_LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// The pid holding a `flock` on the file `f` is open on, from `/proc/locks` (Linux).
fn lock_holder(f: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata().ok()?;
    let dev = m.dev();
    let want = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        m.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let me = std::process::id().to_string();
    locks.lines().find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        let (kind, pid, id) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        (*kind == "FLOCK" && *id == want).then(|| {
            if *pid == me {
                format!("pid {pid}: this process")
            } else {
                format!("pid {pid}")
            }
        })
    })
}

impl FileMedia {
    /// Opens (or, with `create`, creates) the file or block device with O_DIRECT.
    pub(crate) fn open(path: &Path, create: bool, queue_depth: u32) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .map_err(|e| {
                let hint = if e.raw_os_error() == Some(libc::EINVAL) {
                    " (the file system does not support O_DIRECT)"
                } else {
                    ""
                };
                DeviceError::io(format!("opening {}{hint}", path.display()), e)
            })?;
        let owner = lock_owner(path)?;
        let block_device = file
            .metadata()
            .map_err(|e| DeviceError::io(format!("stat {}", path.display()), e))?
            .file_type()
            .is_block_device();
        let entries = queue_depth.max(2).next_power_of_two();
        let ring = IoUring::new(entries).map_err(|e| DeviceError::io("setting up io_uring", e))?;
        // Kernels before 5.15 lack the limit; the ring works without it.
        let _ = ring
            .submitter()
            .register_iowq_max_workers(&mut [IOWQ_MAX_BOUNDED_WORKERS, IOWQ_MAX_BOUNDED_WORKERS]);
        Ok(FileMedia {
            path: path.to_path_buf(),
            file,
            owner: Mutex::new(Some(owner)),
            block_device,
            ring,
            sq_lock: Mutex::new(StagedRun::default()),
            cq_lock: Mutex::new(()),
            slots: Mutex::new((0..queue_depth).map(|_| None).collect()),
            in_flight: AtomicUsize::new(0),
            in_kernel: AtomicIsize::new(0),
            unsubmitted: Mutex::new(VecDeque::new()),
            refused: Mutex::new(Vec::new()),
            data_offset: 0,
        })
    }

    fn size(&self) -> Result<u64> {
        if self.block_device {
            let mut size: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid.
            let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), BLKGETSIZE64, &mut size) };
            if rc != 0 {
                return Err(DeviceError::io("BLKGETSIZE64", io::Error::last_os_error()));
            }
            Ok(size)
        } else {
            Ok(self
                .file
                .metadata()
                .map_err(|e| DeviceError::io(format!("stat {}", self.path.display()), e))?
                .len())
        }
    }

    fn page_offset(&self, ppa: Ppa) -> u64 {
        self.data_offset + ppa * PAGE_SIZE as u64
    }

    fn read_raw(&self, offset: u64, len: usize) -> Result<AlignedBuf> {
        let mut buf = AlignedBuf::zeroed(len);
        self.file.read_exact_at(&mut buf, offset).map_err(|e| {
            DeviceError::io(format!("reading {} at {offset}", self.path.display()), e)
        })?;
        Ok(buf)
    }

    fn write_raw(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| DeviceError::io(format!("writing {} at {offset}", self.path.display()), e))
    }

    fn zero_range(&self, offset: u64, len: u64) -> Result<()> {
        if self.block_device {
            let range: [u64; 2] = [offset, len];
            // SAFETY: BLKZEROOUT reads two u64 (start, length) through the pointer.
            let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), BLKZEROOUT, range.as_ptr()) };
            if rc != 0 {
                return Err(DeviceError::io("BLKZEROOUT", io::Error::last_os_error()));
            }
            return Ok(());
        }
        let (off, n) = match (i64::try_from(offset), i64::try_from(len)) {
            (Ok(o), Ok(n)) => (o, n),
            _ => {
                return Err(DeviceError::io(
                    "erase",
                    io::Error::other("range too large"),
                ))
            }
        };
        // Zeroing the range keeps its blocks allocated (as unwritten extents): the next
        // program of the block then skips the file system's block allocation, which on ext4
        // is the difference between ~38K and ~59K random 8 KiB O_DIRECT writes per second on
        // this host. Hole punching is the fallback.
        for (mode, what) in [
            (
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                "zeroing a range to erase",
            ),
            (
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                "punching a hole to erase",
            ),
        ] {
            // SAFETY: plain syscall on an owned descriptor; no memory is passed.
            let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off, n) };
            if rc == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(DeviceError::io(what, err));
            }
        }
        // File systems without hole punching: write zeroes.
        let zeros = AlignedBuf::zeroed(1 << 20);
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64) as usize;
            self.write_raw(offset + at, &zeros[..n])?;
            at += n as u64;
        }
        Ok(())
    }

    /// One `io_uring_enter`: hands over up to `to_submit` queued entries and, with `wait`,
    /// waits for at least one completion. Returns how many entries the kernel took.
    fn enter(&self, to_submit: usize, wait: bool) -> Result<usize> {
        let (min_complete, flags) = if wait {
            (1, IORING_ENTER_GETEVENTS)
        } else {
            (0, 0)
        };
        // SAFETY: no argument is passed. The kernel only consumes entries published by a tail
        // sync, each fully written under sq_lock; `to_submit` may count entries not yet
        // published (they are queued first), and then the kernel submits fewer.
        let r = unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(
                u32::try_from(to_submit).unwrap_or(u32::MAX),
                min_complete,
                flags,
                None,
            )
        };
        match r {
            Ok(n) => {
                self.in_kernel
                    .fetch_add(isize::try_from(n).unwrap_or(isize::MAX), Ordering::SeqCst);
                Ok(n)
            }
            // A signal came first: nothing was handed over (the caller's loop tries again).
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(DeviceError::io("io_uring_enter", e)),
        }
    }

    /// Hands every queued entry to the kernel, one `io_uring_enter` per group (see
    /// [`group_len`]); with `wait`, the last of them also waits for a completion (one that
    /// only waits when nothing is queued).
    ///
    /// The kernel takes entries in ring order, so forgetting the first `n` queued entries
    /// when it reports `n` taken keeps the queue's length equal to the entries it holds,
    /// even when two threads hand over at once (only the grouping can then differ).
    fn submit_queued(&self, wait: bool) -> Result<()> {
        self.push_staged(&mut self.sq_lock.lock());
        let mut queue = self.unsubmitted.lock();
        loop {
            let n = group_len(&queue);
            if n == 0 || (wait && n == queue.len()) {
                // The last group goes down with the wait, without holding the queue (a
                // submitter must not stall behind a sleeping poller).
                let group: Vec<Queued> = queue.drain(..n).collect();
                drop(queue);
                if n == 0 && !wait {
                    return Ok(());
                }
                // An entry counted but not yet published (its submitter is between counting
                // and the tail sync) is not taken, and then the kernel returns without waiting
                // (`io_uring_enter` waits only when it submitted all it was asked to), so the
                // entry goes back on the queue below instead of being waited for.
                let taken = self.enter(n, wait);
                let left = n - taken.as_ref().map_or(0, |&t| t.min(n));
                if left > 0 {
                    let mut queue = self.unsubmitted.lock();
                    for q in group[n - left..].iter().rev() {
                        queue.push_front(*q);
                    }
                }
                return taken.map(drop);
            }
            let taken = self.enter(n, false)?;
            queue.drain(..taken.min(n));
            if taken < n {
                // Entries counted but not yet published (their submitter holds `sq_lock` and
                // publishes them next, then rings), or a signal: they stay queued, and the
                // caller does not wait with them unsubmitted. The poller's loop comes straight
                // back; the next doorbell or poll hands them over.
                return Ok(());
            }
        }
    }

    /// Moves finished entries out of the completion queue (cq_lock held by the caller).
    fn drain_completions(&self, out: &mut Vec<MediaDone>) {
        let mut retry = Vec::new();
        {
            let mut refused = self.refused.lock();
            if !refused.is_empty() {
                self.in_flight.fetch_sub(refused.len(), Ordering::AcqRel);
                out.append(&mut refused);
            }
        }
        // SAFETY: the caller holds cq_lock, so no other CompletionQueue exists.
        let cq = unsafe { self.ring.completion_shared() };
        for cqe in cq {
            self.in_kernel.fetch_sub(1, Ordering::SeqCst);
            let id = cqe.user_data() as u32;
            let res = cqe.result();
            let Some(slot) = self.take_slot(id) else {
                tracing::error!("io_uring completion for unknown tag {id}");
                continue;
            };
            let (first, followers) = slot.run.map_or((0, Vec::new()), |r| (r.first, r.followers));
            let run = !followers.is_empty();
            let kind = slot.kind;
            let pages = std::iter::once((id, slot.buf)).chain(
                followers
                    .iter()
                    .map(|&f| (f, self.take_slot(f).and_then(|s| s.buf))),
            );
            for (at, (id, mut buf)) in pages.enumerate() {
                // Page `at` of a vectored transfer made it if the transfer reached its end.
                let reached = res >= 0 && (res as usize) >= (at + 1) * PAGE_SIZE;
                if run && !reached {
                    // One bad sector must not fail its whole run: the page goes down again
                    // on its own and reports its own result.
                    if let Some(b) = buf.take() {
                        retry.push((id, kind, first + at as u64, b));
                        continue;
                    }
                }
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                let result = self.page_result(res, at, kind != IoKind::Flush);
                if let Some(b) = buf.as_mut() {
                    // Reads come back scrambled; programs get the caller's bytes back.
                    scramble(b);
                }
                out.push(MediaDone { id, result, buf });
            }
        }
        for (id, kind, ppa, buf) in retry {
            self.push_alone(id, kind, ppa, buf);
        }
    }

    /// The result of page `at` of a transfer that returned `res`: the kernel's error, a
    /// short transfer that stopped before the page's end (when the entry moves pages), or
    /// success.
    fn page_result(&self, res: i32, at: usize, moves_pages: bool) -> Result<()> {
        if res < 0 {
            Err(DeviceError::io(
                format!("io_uring I/O on {}", self.path.display()),
                io::Error::from_raw_os_error(-res),
            ))
        } else if moves_pages && (res as usize) < (at + 1) * PAGE_SIZE {
            Err(DeviceError::io(
                format!("io_uring I/O on {}", self.path.display()),
                io::Error::other(format!("short transfer of {res} bytes")),
            ))
        } else {
            Ok(())
        }
    }

    /// Sends one page of a failed run down again on its own entry (`buf` as the run had it:
    /// scrambled for a program). A refusal fails it without the kernel.
    fn push_alone(&self, id: u32, kind: IoKind, ppa: Ppa, mut buf: PageBuf) {
        let entry = self
            .page_entry(kind, buf.as_mut_ptr(), ppa)
            .user_data(u64::from(id));
        if let Err((e, buf)) = self.fill_slot(id, kind, Some(buf)) {
            // Not reachable: the tag's slot held the page a moment ago.
            self.refused.lock().push(MediaDone {
                id,
                result: Err(e),
                buf,
            });
            return;
        }
        let queued = Queued {
            kind,
            ppa,
            last: ppa,
        };
        // SAFETY: the entry points into the PageBuf now owned by `slots[id]` (a heap
        // allocation that stays there, unmoved, until this entry's completion is reaped).
        let pushed = unsafe { self.push_entry(&mut self.sq_lock.lock(), &entry, queued) };
        if !pushed {
            self.refuse(&[id], "io_uring submission queue full");
        }
    }

    /// One page's plain read or write entry, into or from the buffer at `at`.
    fn page_entry(&self, kind: IoKind, at: *mut u8, ppa: Ppa) -> squeue::Entry {
        let fd = types::Fd(self.file.as_raw_fd());
        let (len, offset) = (PAGE_SIZE as u32, self.page_offset(ppa));
        match kind {
            IoKind::Read => opcode::Read::new(fd, at, len).offset(offset).build(),
            _ => opcode::Write::new(fd, at, len).offset(offset).build(),
        }
    }

    /// Pushes one entry to the submission queue, records it as queued and publishes it (the
    /// tail sync); `false` when the queue refused it (nothing was published). `_held` is
    /// `sq_lock`'s guard: only its holder may use the queue. The entry is recorded before
    /// the tail sync publishes it: a poller enters the ring without sq_lock and may submit
    /// the entry and reap its completion as soon as it is published, so recording it (and
    /// counting it in flight, which the callers do before this) afterwards could let
    /// `in_flight` underflow (and a poller sleep for a completion that never comes) or
    /// `unsubmitted` lag behind.
    ///
    /// # Safety
    /// Every buffer the entry points into must stay alive and unmoved until its completion
    /// is reaped.
    unsafe fn push_entry(
        &self,
        _held: &mut StagedRun,
        entry: &squeue::Entry,
        queued: Queued,
    ) -> bool {
        // SAFETY: the caller holds sq_lock (`_held`), so no other SubmissionQueue exists
        // while this one lives.
        let mut sq = unsafe { self.ring.submission_shared() };
        // SAFETY: the caller's promise about the entry's buffers.
        if unsafe { sq.push(entry) }.is_err() {
            return false;
        }
        self.unsubmitted.lock().push_back(queued);
        sq.sync();
        true
    }

    /// Pushes the staged run to the submission queue as one entry: a plain read or write for
    /// one page, a vectored one for several. `staged` is `sq_lock`'s guard.
    fn push_staged(&self, staged: &mut StagedRun) {
        if staged.ids.is_empty() {
            return;
        }
        let ids = std::mem::replace(&mut staged.ids, Vec::with_capacity(MAX_RUN_PAGES));
        let kind = staged.kind;
        let entry = {
            let mut slots = self.slots.lock();
            let mut iovecs = Vec::with_capacity(ids.len());
            for &id in &ids {
                if let Some(buf) = slots
                    .get_mut(id as usize)
                    .and_then(Option::as_mut)
                    .and_then(|s| s.buf.as_mut())
                {
                    iovecs.push(libc::iovec {
                        iov_base: buf.as_mut_ptr().cast(),
                        iov_len: PAGE_SIZE,
                    });
                }
            }
            if iovecs.len() != ids.len() {
                // `start` put every staged page's buffer in its slot, and only a reaped
                // completion takes it out: not reachable, but not worth a panic either.
                drop(slots);
                self.refuse(&ids, "a staged page lost its buffer");
                return;
            }
            let entry = if let [one] = iovecs[..] {
                self.page_entry(kind, one.iov_base.cast(), staged.first)
            } else {
                let fd = types::Fd(self.file.as_raw_fd());
                let offset = self.page_offset(staged.first);
                let iovecs = IoVecs(iovecs.into_boxed_slice());
                let (at, n) = (iovecs.0.as_ptr(), iovecs.0.len() as u32);
                let e = match kind {
                    IoKind::Read => opcode::Readv::new(fd, at, n).offset(offset).build(),
                    _ => opcode::Writev::new(fd, at, n).offset(offset).build(),
                };
                if let Some(slot) = slots.get_mut(ids[0] as usize).and_then(Option::as_mut) {
                    slot.run = Some(RunTail {
                        first: staged.first,
                        followers: ids[1..].to_vec(),
                        _iovecs: iovecs,
                    });
                }
                e
            };
            entry.user_data(u64::from(ids[0]))
        };
        // The pages were counted in flight when they were staged.
        let queued = Queued {
            kind,
            ppa: staged.first,
            last: staged.first + ids.len() as u64 - 1,
        };
        // SAFETY: the entry points into PageBufs owned by the run's slots (and, for several
        // pages, into the vectors kept in the first page's slot), which stay there, alive and
        // unmoved (heap allocations), until the entry's completion is reaped.
        if !unsafe { self.push_entry(staged, &entry, queued) } {
            if let Some(slot) = self
                .slots
                .lock()
                .get_mut(ids[0] as usize)
                .and_then(Option::as_mut)
            {
                slot.run = None;
            }
            self.refuse(&ids, "io_uring submission queue full");
        }
    }

    /// Starts a read or a program (its buffer already scrambled): the page joins the staged
    /// run when it is of the same kind and follows the run's last page; otherwise the run
    /// goes down and a new one starts with it. Nothing reaches the kernel before the next
    /// doorbell or poll.
    fn stage(
        &self,
        id: u32,
        kind: IoKind,
        ppa: Ppa,
        buf: PageBuf,
    ) -> std::result::Result<(), StartError> {
        self.fill_slot(id, kind, Some(buf))?;
        let mut staged = self.sq_lock.lock();
        if !staged.extends(kind, ppa) {
            self.push_staged(&mut staged);
        }
        if staged.ids.is_empty() {
            staged.kind = kind;
            staged.first = ppa;
        }
        staged.ids.push(id);
        // Counted under sq_lock, before any poller can hand the page over (see `push_entry`).
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Starts a flush of the device's write cache. It goes into the ring at once, after the
    /// staged run (ring order is start order).
    fn start_flush(&self, id: u32) -> std::result::Result<(), StartError> {
        self.fill_slot(id, IoKind::Flush, None)?;
        let entry = opcode::Fsync::new(types::Fd(self.file.as_raw_fd()))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(u64::from(id));
        let mut staged = self.sq_lock.lock();
        self.push_staged(&mut staged);
        let queued = Queued {
            kind: IoKind::Flush,
            ppa: 0,
            last: 0,
        };
        // Counted before it is published (see `push_entry`).
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        // SAFETY: a flush points into no memory.
        if !unsafe { self.push_entry(&mut staged, &entry, queued) } {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.take_slot(id);
            let e = io::Error::other("io_uring submission queue full");
            return Err((DeviceError::io("io_uring submit", e), None));
        }
        Ok(())
    }

    /// Puts a started operation's buffer in its tag's slot, where it stays until its
    /// completion is reaped.
    fn fill_slot(
        &self,
        id: u32,
        kind: IoKind,
        buf: Option<PageBuf>,
    ) -> std::result::Result<(), StartError> {
        let mut slots = self.slots.lock();
        let Some(slot) = slots.get_mut(id as usize) else {
            let e = DeviceError::io("io_uring submit", io::Error::other("tag out of range"));
            return Err((e, buf));
        };
        *slot = Some(IoSlot {
            kind,
            buf,
            run: None,
        });
        Ok(())
    }

    /// Fails staged pages without the kernel: their completions come out of the next poll.
    fn refuse(&self, ids: &[u32], why: &str) {
        let done: Vec<MediaDone> = ids
            .iter()
            .map(|&id| MediaDone {
                id,
                result: Err(DeviceError::io("io_uring submit", io::Error::other(why))),
                buf: self.take_slot(id).and_then(|s| s.buf).map(|mut b| {
                    scramble(&mut b);
                    b
                }),
            })
            .collect();
        self.refused.lock().extend(done);
    }

    /// Reserves every block of a new device file (as unwritten extents, which read as
    /// zeroes): like a real drive, the device then never runs out of space mid-write
    /// (a sparse file could fail a program with ENOSPC), and programs skip the file
    /// system's block allocation. A file system without `fallocate` keeps the file sparse.
    fn preallocate(&self, len: u64) -> Result<()> {
        let Ok(n) = i64::try_from(len) else {
            return Err(DeviceError::io(
                "preallocating",
                io::Error::other("device too large"),
            ));
        };
        // SAFETY: plain syscall on an owned descriptor; no memory is passed.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, n) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
            return Ok(());
        }
        Err(DeviceError::io(
            format!("reserving {} MiB for {}", len >> 20, self.path.display()),
            err,
        ))
    }

    fn take_slot(&self, id: u32) -> Option<IoSlot> {
        self.slots
            .lock()
            .get_mut(id as usize)
            .and_then(Option::take)
    }
}

impl Media for FileMedia {
    fn release_owner(&self) {
        self.owner.lock().take();
    }

    fn prepare(&mut self, layout: MediaLayout, format: bool) -> Result<()> {
        self.data_offset = layout.meta_bytes;
        let expected = layout.total_bytes();
        // A file that already has the device's size is erased in place (below), like a block
        // device: it keeps its blocks, and so do the layers under the file system (a thin or
        // discarding virtual disk frees what a truncate gives back, and pays to allocate it
        // again on the next write of each page).
        if format && !self.block_device && self.size()? != expected {
            // Truncate to zero first so every page starts out erased (a hole).
            self.file
                .set_len(0)
                .and_then(|()| self.file.set_len(expected))
                .map_err(|e| DeviceError::io(format!("sizing {}", self.path.display()), e))?;
            self.preallocate(expected)?;
            return Ok(());
        }
        let actual = self.size()?;
        let fits = if self.block_device {
            actual >= expected
        } else {
            actual == expected
        };
        if !fits {
            return Err(DeviceError::WrongSize {
                path: self.path.clone(),
                expected,
                actual,
            });
        }
        if format {
            self.zero_range(0, expected)?;
            if !self.block_device {
                self.preallocate(expected)?;
            }
        }
        Ok(())
    }

    /// # Errors
    /// `NotFormatted` when the file or device ends before `offset + len` (an empty or
    /// truncated file holds no device); `Io` on a read error.
    fn read_meta(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let size = self.size()?;
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            // Checked before reading: O_DIRECT reads past the end fail in several ways
            // (EOF, or EINVAL when the file size is not a multiple of the alignment).
            return Err(DeviceError::NotFormatted);
        }
        let start = offset - offset % BUFFER_ALIGN as u64;
        let skip = (offset - start) as usize;
        let buf = self.read_raw(start, skip + len)?;
        Ok(buf[skip..skip + len].to_vec())
    }

    fn write_meta(&self, offset: u64, data: &[u8]) -> Result<()> {
        if offset % BUFFER_ALIGN as u64 != 0 {
            return Err(DeviceError::io(
                "metadata write",
                io::Error::other("unaligned metadata offset"),
            ));
        }
        let mut buf = AlignedBuf::zeroed(data.len());
        buf[..data.len()].copy_from_slice(data);
        self.write_raw(offset, &buf)?;
        self.file
            .sync_data()
            .map_err(|e| DeviceError::io(format!("fdatasync {}", self.path.display()), e))
    }

    fn start(&self, id: u32, op: MediaOp) -> std::result::Result<(), StartError> {
        match op {
            MediaOp::Read { ppa, buf } => self.stage(id, IoKind::Read, ppa, buf),
            MediaOp::Program { ppa, mut buf } => {
                scramble(&mut buf);
                self.stage(id, IoKind::Program, ppa, buf)
            }
            MediaOp::Flush => self.start_flush(id),
        }
    }

    /// Without `sq_lock`, as a poller's hand-over: the system call (a VM exit on a virtio
    /// disk, 50-100 µs on the host this was measured on) must not hold up the submitters
    /// pushing entries meanwhile, which run under the engine's write lock. An entry counted
    /// but not yet published is left queued; its submitter rings once it has published it.
    fn doorbell(&self) -> Result<()> {
        self.submit_queued(false)
    }

    /// Why a queued entry is not stranded: it is staged (under `sq_lock`) before its
    /// submitter looks at `in_kernel`, and every turn of [`Media::poll`] begins by handing
    /// over what is staged and ends, when it waits, with a system call that hands over what
    /// is queued. An entry the look finds in the kernel completes, and the poller blocked on
    /// it (it holds `cq_lock` while it waits, so it is the one to drain it) returns and
    /// polls again: the engine's poller loops, and the caller wakes it besides. A look that
    /// finds none rings as [`Media::doorbell`].
    fn doorbell_if_idle(&self) -> Result<bool> {
        if self.in_kernel.load(Ordering::SeqCst) > 0 {
            return Ok(false);
        }
        self.submit_queued(false).map(|()| true)
    }

    fn has_direct_reads(&self) -> bool {
        true
    }

    fn read_direct(&self, reads: Vec<DirectRead>) -> Vec<MediaDone> {
        self.read_on_caller_ring(reads)
    }

    fn read_ring(&self) -> Option<Result<Box<dyn MediaReadRing>>> {
        Some(
            self.new_read_ring()
                .map(|r| Box::new(r) as Box<dyn MediaReadRing>),
        )
    }

    fn poll(&self, out: &mut Vec<MediaDone>, block: bool) -> Result<()> {
        let _cq = self.cq_lock.lock();
        loop {
            let before = out.len();
            // Staged first: a run the ring refused completes in this drain, not after a wait.
            self.push_staged(&mut self.sq_lock.lock());
            self.drain_completions(out);
            let wait = block
                && out.len() == before
                && self.refused.lock().is_empty()
                && self.in_flight.load(Ordering::Acquire) > 0;
            if !wait && self.unsubmitted.lock().is_empty() {
                return Ok(());
            }
            // Hands over what is queued and, if asked, waits (in the last system call).
            self.submit_queued(wait)?;
            if !wait {
                return Ok(());
            }
        }
    }

    fn quiesce(&self) -> Result<()> {
        let mut sink = Vec::new();
        while self.in_flight.load(Ordering::Acquire) > 0 {
            self.poll(&mut sink, true)?;
            sink.clear();
        }
        Ok(())
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    fn erase(&self, ppas: &[Ppa]) -> Result<()> {
        for (first, count) in runs(ppas) {
            self.zero_range(self.page_offset(first), count * PAGE_SIZE as u64)?;
        }
        Ok(())
    }

    fn is_programmed(&self, ppa: Ppa) -> Result<bool> {
        Ok(!is_erased(
            &self.read_raw(self.page_offset(ppa), PAGE_SIZE)?,
        ))
    }

    fn scan_programmed(&self, ppas: &[Ppa]) -> Result<Vec<bool>> {
        const CHUNK_PAGES: u64 = 128;
        let mut programmed = std::collections::HashSet::new();
        for (first, count) in runs(ppas) {
            let mut at = 0;
            while at < count {
                let n = (count - at).min(CHUNK_PAGES);
                let raw = self.read_raw(self.page_offset(first + at), n as usize * PAGE_SIZE)?;
                for (i, page) in raw.chunks_exact(PAGE_SIZE).enumerate() {
                    if !is_erased(page) {
                        programmed.insert(first + at + i as u64);
                    }
                }
                at += n;
            }
        }
        Ok(ppas.iter().map(|p| programmed.contains(p)).collect())
    }

    fn revert_program(&self, _ppa: Ppa) {
        // What the kernel wrote stays written: a real power cut decides, not us.
    }

    fn corrupt(&self, ppa: Ppa, byte: usize) -> Result<()> {
        let at = self.page_offset(ppa);
        let mut page = self.read_raw(at, PAGE_SIZE)?;
        page[byte % PAGE_SIZE] ^= 0x01;
        self.write_raw(at, &page)
    }

    fn describe(&self) -> String {
        let kind = if self.block_device {
            "block device"
        } else {
            "file"
        };
        format!("{kind} {} (io_uring, O_DIRECT)", self.path.display())
    }
}

impl Drop for FileMedia {
    fn drop(&mut self) {
        // Buffers must outlive the kernel's use of them: wait for everything in flight.
        if let Err(e) = self.quiesce() {
            tracing::error!("cannot drain io_uring before closing: {e}; leaking its buffers");
            std::mem::forget(std::mem::take(&mut *self.slots.lock()));
        }
    }
}

mod caller_ring;
mod read_ring;
#[cfg(test)]
mod tests;
