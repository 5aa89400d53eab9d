//! The asynchronous read path's bookkeeping: the window that bounds value pages in flight,
//! the callback types of the asynchronous reads, and device pages as `Bytes`.
//!
//! (Which segments a read may still fetch from, so that they are not trimmed under it, is
//! [`crate::epoch`]'s business: a read resolves its pointers in a pinned view, and trims wait
//! for earlier pins. Reads never need to retry, and a page that fails its checks is
//! corruption, not a race.)

use bytes::Bytes;
use hwftl_sim::PageBuf;
use parking_lot::{Condvar, Mutex};

use crate::error::Result;

/// Most value pages asynchronous reads keep on the device at once; the rest of the device's
/// command tags stay free for writes.
pub const ASYNC_READ_WINDOW: usize = 64;

/// Receives the values of [`crate::Engine::multi_get_async`], in key order.
pub type OnValues = Box<dyn FnOnce(Result<Vec<Option<Bytes>>>) + Send>;

/// Receives the pairs of [`crate::Engine::range_async`].
pub type OnRange = Box<dyn FnOnce(Result<Vec<(Vec<u8>, Bytes)>>) + Send>;

/// Which keys a lookup checks for existence besides the values it reads (DRAM only).
#[derive(Debug, Clone, Copy)]
pub enum Probes<'a> {
    /// Whether each exists.
    Each(&'a [&'a [u8]]),
    /// For keys of which at most one can exist (a key's type records): in order, up to the
    /// first that exists; the ones after it answer `false` without a lookup.
    FirstOf(&'a [&'a [u8]]),
    /// As `FirstOf`, and only when a key read by value was not found (every probe answers
    /// `false` when all were): a read of a key's own record asks no more when it is there.
    FirstOfUnlessFound(&'a [&'a [u8]]),
    /// Groups of `per` probes, group `g` belonging to the key read at index `owners[g]`
    /// (a key's other type records, of which at most one can exist, and none while the key
    /// read exists): a group is looked up only when its owner's value was not found, in
    /// order up to the first that exists (as `FirstOf`); every probe of a group whose owner
    /// was found answers `false` without a lookup. Many GETs' WRONGTYPE checks, one
    /// lookup each for the GETs that find their string.
    GroupsUnlessFound {
        /// The probes, `per` to a group.
        keys: &'a [&'a [u8]],
        /// Probes per group.
        per: usize,
        /// Per group, the index of its owner among the keys read.
        owners: &'a [usize],
    },
}

impl Probes<'_> {
    /// No probes.
    pub const NONE: Probes<'static> = Probes::Each(&[]);
}

/// What [`crate::Engine::lookup_async`] found, all as of one instant.
#[derive(Debug, Default)]
pub struct Lookup {
    /// The value of each key asked for, in order (`None`: no such key).
    pub values: Vec<Option<Bytes>>,
    /// Whether each probe exists (from DRAM only; see [`Probes`] for which are looked up).
    pub present: Vec<bool>,
    /// The live pairs of the range asked for, in key order.
    pub pairs: Vec<(Vec<u8>, Bytes)>,
}

/// Receives the result of [`crate::Engine::lookup_async`].
pub type OnLookup = Box<dyn FnOnce(Result<Lookup>) + Send>;

/// Receives the values of [`crate::Engine::multi_get_async_probed`] and one presence flag
/// per probe.
pub type OnProbedValues = Box<dyn FnOnce(Result<Vec<Option<Bytes>>>, Vec<bool>) + Send>;

/// Value pages of asynchronous reads on the device.
#[derive(Default)]
pub(crate) struct ReadWindow {
    pages: Mutex<usize>,
    changed: Condvar,
}

/// Whether `n` more pages fit beside `pages` in flight: within the window, or anything
/// when nothing is in flight (so a read larger than the window still goes, alone).
fn room_for(pages: usize, n: usize) -> bool {
    pages == 0 || pages + n <= ASYNC_READ_WINDOW
}

impl ReadWindow {
    /// Waits until `n` more pages fit in the window (or nothing is in flight).
    pub(crate) fn acquire_pages(&self, n: usize) {
        let mut pages = self.pages.lock();
        while !room_for(*pages, n) {
            self.changed.wait(&mut pages);
        }
        *pages += n;
    }

    /// Takes room for `n` more pages if it is there now (as [`ReadWindow::acquire_pages`]
    /// would without waiting); `false`: nothing was taken.
    pub(crate) fn try_acquire_pages(&self, n: usize) -> bool {
        let mut pages = self.pages.lock();
        if !room_for(*pages, n) {
            return false;
        }
        *pages += n;
        true
    }

    /// Whether `n` more pages would fit now (a hint: another caller may take the room
    /// before this one asks for it).
    pub(crate) fn fits(&self, n: usize) -> bool {
        room_for(*self.pages.lock(), n)
    }

    /// One page read finished.
    pub(crate) fn release_page(&self) {
        let mut pages = self.pages.lock();
        *pages = pages.saturating_sub(1);
        self.changed.notify_all();
    }
}

/// A device page as the owner of `Bytes` that slice it (no copy).
struct PageOwner(PageBuf);

impl AsRef<[u8]> for PageOwner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Turns a page read into shareable bytes without copying it.
pub(crate) fn page_bytes(p: PageBuf) -> Bytes {
    Bytes::from_owner(PageOwner(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn window_blocks_until_pages_return() {
        let w = Arc::new(ReadWindow::default());
        w.acquire_pages(ASYNC_READ_WINDOW);
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            w2.acquire_pages(1);
            w2.release_page();
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished(), "a full window must block");
        w.release_page();
        assert!(t.join().is_ok());
    }

    #[test]
    fn try_acquire_takes_room_only_when_it_is_there() {
        let w = ReadWindow::default();
        // An empty window takes any request, as `acquire_pages` does.
        assert!(w.try_acquire_pages(ASYNC_READ_WINDOW + 3));
        assert!(!w.try_acquire_pages(1));
        for _ in 0..ASYNC_READ_WINDOW + 3 {
            w.release_page();
        }
        assert!(w.try_acquire_pages(ASYNC_READ_WINDOW - 1));
        assert!(w.try_acquire_pages(1));
        assert!(
            !w.try_acquire_pages(1),
            "a full window refuses without waiting"
        );
    }

    #[test]
    fn an_oversized_request_runs_alone() {
        let w = ReadWindow::default();
        w.acquire_pages(ASYNC_READ_WINDOW * 2);
        for _ in 0..ASYNC_READ_WINDOW * 2 {
            w.release_page();
        }
    }

    #[test]
    fn pages_become_bytes_without_a_copy() {
        let p = PageBuf::zeroed();
        let addr = p.as_ptr();
        let b = page_bytes(p);
        assert_eq!(b.as_ptr(), addr);
        assert_eq!(b.slice(10..20).as_ptr(), addr.wrapping_add(10));
    }
}
