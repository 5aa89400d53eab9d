//! The physical side of the device: where flash pages are actually kept. The FTL
//! ([`crate::Ftl`]) translates logical commands to physical page numbers and drives a
//! [`Media`]; the media moves bytes (RAM, or a file/block device through io_uring).

use crate::buffer::PageBuf;
use crate::error::{DeviceError, Result};
use crate::geometry::Ppa;

pub(crate) mod ram;
pub(crate) mod uring;

pub use ram::RamStore;
pub use uring::IOWQ_MAX_BOUNDED_WORKERS;

/// Sizes of the regions of the media: the metadata area (superblock and two table slots)
/// followed by the page array.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MediaLayout {
    pub meta_bytes: u64,
    pub physical_pages: u64,
}

impl MediaLayout {
    pub(crate) fn total_bytes(&self) -> u64 {
        self.meta_bytes + self.physical_pages * crate::PAGE_SIZE as u64
    }
}

/// One physical operation, identified by the FTL's tag.
pub(crate) enum MediaOp {
    Read { ppa: Ppa, buf: PageBuf },
    Program { ppa: Ppa, buf: PageBuf },
    Flush,
}

/// A finished physical operation.
pub(crate) struct MediaDone {
    pub id: u32,
    pub result: Result<()>,
    pub buf: Option<PageBuf>,
}

/// A page read that the caller waits for on its own thread ([`Media::read_direct`]).
pub(crate) struct DirectRead {
    /// The FTL's tag, returned in the read's [`MediaDone`].
    pub id: u32,
    pub ppa: Ppa,
    pub buf: PageBuf,
}

/// Page reads one thread starts without waiting and reaps when it likes, on a queue of its
/// own ([`Media::read_ring`]). Dropping it waits until the backend holds none of its
/// buffers.
pub(crate) trait MediaReadRing: Send {
    /// Starts the reads (one system call for all of them). Never refuses: a read that
    /// cannot start comes back failed from [`MediaReadRing::reap`].
    fn start(&mut self, reads: Vec<DirectRead>);
    /// Moves the finished reads' completions to `out`, each with its id and its buffer
    /// (descrambled). Never waits.
    fn reap(&mut self, out: &mut Vec<MediaDone>);
    /// A descriptor that turns readable when a read finishes (for the owner's `epoll`).
    fn event_fd(&self) -> std::os::fd::RawFd;
    /// Whether the ring failed for good: whatever is started from now on fails.
    fn broken(&self) -> bool;
    /// Makes [`MediaReadRing::event_fd`] readable, as a finished read does: for completions
    /// its user makes without the media.
    fn notify(&self);
}

/// A refused start: the error and the buffer, handed back.
pub(crate) type StartError = (DeviceError, Option<PageBuf>);

/// Physical page storage.
pub(crate) trait Media: Send + Sync {
    /// Attaches the layout; with `format`, sizes fresh media for it.
    ///
    /// # Errors
    /// `WrongSize` when existing media does not fit the layout; `Io` from the backend.
    fn prepare(&mut self, layout: MediaLayout, format: bool) -> Result<()>;
    /// Reads `len` bytes of the metadata area at `offset` (synchronous).
    fn read_meta(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// Writes into the metadata area and makes it durable before returning.
    fn write_meta(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// Queues an operation; its completion comes out of [`Media::poll`] with the same id.
    /// The backend may hold queued operations until [`Media::doorbell`].
    fn start(&self, id: u32, op: MediaOp) -> std::result::Result<(), StartError>;
    /// Hands every queued operation to the backend at once (one system call for a batch).
    fn doorbell(&self) -> Result<()>;
    /// As [`Media::doorbell`], unless an operation the backend already holds is still
    /// running: then the queued ones wait for whoever polls for that operation's completion
    /// (a poll hands over what is queued before it waits), and go down together with every
    /// operation queued meanwhile. Returns whether it rang.
    ///
    /// # Errors
    /// As [`Media::doorbell`].
    fn doorbell_if_idle(&self) -> Result<bool> {
        self.doorbell().map(|()| true)
    }
    /// Collects finished operations; with `block`, waits for at least one if any is running.
    fn poll(&self, out: &mut Vec<MediaDone>, block: bool) -> Result<()>;
    /// Whether [`Media::read_direct`] is this backend's own path (the FTL sends batches of
    /// reads its caller waits for there), rather than the default.
    fn has_direct_reads(&self) -> bool {
        false
    }
    /// Reads the pages on the calling thread and returns once every one has finished, each
    /// completion with its id and buffer (in any order). Not through [`Media::start`]: these
    /// reads are never in [`Media::poll`]'s completions nor in [`Media::quiesce`]'s wait (the
    /// caller is waiting for them). The default reads nothing and fails each page.
    fn read_direct(&self, reads: Vec<DirectRead>) -> Vec<MediaDone> {
        reads
            .into_iter()
            .map(|r| MediaDone {
                id: r.id,
                result: Err(DeviceError::io(
                    "direct read",
                    std::io::Error::other("not supported by this media"),
                )),
                buf: Some(r.buf),
            })
            .collect()
    }
    /// A ring of page reads for the calling thread alone, started without waiting and
    /// reaped by that thread ([`MediaReadRing`]); `None`: this backend has none. Like
    /// [`Media::read_direct`]'s, these reads never pass through [`Media::start`],
    /// [`Media::poll`] or [`Media::quiesce`].
    fn read_ring(&self) -> Option<Result<Box<dyn MediaReadRing>>> {
        None
    }
    /// Waits until the backend holds no operation any more: queued ones are handed over,
    /// and every completion is collected and dropped. A power cut calls it so that nothing
    /// still owned by the kernel lands after the cut.
    fn quiesce(&self) -> Result<()> {
        Ok(())
    }
    /// Gives up the ownership of the device (the file backend's owner lock), as a process
    /// that lost power would: after a power cut the device may be opened again.
    fn release_owner(&self) {}
    /// Operations started and not yet collected by [`Media::poll`] or [`Media::quiesce`].
    #[cfg(test)]
    fn pending(&self) -> usize {
        0
    }
    /// Erases physical pages (synchronous); afterwards they read as erased.
    fn erase(&self, ppas: &[Ppa]) -> Result<()>;
    /// True when the page holds programmed data (used by recovery after a power cut).
    fn is_programmed(&self, ppa: Ppa) -> Result<bool>;
    /// Forgets a program lost in a power cut: its completion was never delivered, or (with a
    /// volatile write cache) it was never flushed. Afterwards the page reads as erased.
    fn revert_program(&self, ppa: Ppa);
    /// Whether [`Media::revert_program`] can undo a completed program, so that the FTL can
    /// model a volatile write cache on this media (RAM). A file's cache is the real disk's.
    fn simulates_write_cache(&self) -> bool {
        false
    }
    /// For each page, whether it holds programmed data (recovery scan after a power cut).
    fn scan_programmed(&self, ppas: &[Ppa]) -> Result<Vec<bool>> {
        ppas.iter().map(|&p| self.is_programmed(p)).collect()
    }
    /// Flips a bit of a stored page (fault injection).
    fn corrupt(&self, ppa: Ppa, byte: usize) -> Result<()>;
    /// What and where the media is, for logs and INFO.
    fn describe(&self) -> String;
}

/// Groups sorted page numbers into runs of consecutive pages: `(first, count)`.
pub(crate) fn runs(ppas: &[Ppa]) -> Vec<(Ppa, u64)> {
    let mut sorted = ppas.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<(Ppa, u64)> = Vec::new();
    for p in sorted {
        match out.last_mut() {
            Some((first, n)) if *first + *n == p => *n += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_coalesce() {
        assert_eq!(super::runs(&[5, 1, 2, 3, 7, 6]), vec![(1, 3), (5, 3)]);
        assert!(super::runs(&[]).is_empty());
    }
}
