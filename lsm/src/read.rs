//! The asynchronous read path's bookkeeping: the window that bounds value pages in flight,
//! the count of reads that hold resolved value pointers, and the page accumulator of one
//! [`crate::Engine::multi_get_async`] call.
//!
//! A read resolves its value pointers under the engine lock and then reads the pages without
//! it. A value-log segment must not be trimmed (and reused) while such a read may still
//! fetch from it: the engine counts resolved reads here, and the paths that trim value-log
//! segments wait for the count to reach zero first ([`ReadWindow::wait_idle`]). Reads then
//! never need to retry, and a page that fails its checks is corruption, not a race.

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

/// Receives the values of [`crate::Engine::multi_get_async_probed`] and one presence flag
/// per probe.
pub type OnProbedValues = Box<dyn FnOnce(Result<Vec<Option<Bytes>>>, Vec<bool>) + Send>;

#[derive(Default)]
struct Counts {
    pages: usize,
    reads: usize,
}

/// Pages in flight and reads holding resolved pointers (see the module docs).
#[derive(Default)]
pub(crate) struct ReadWindow {
    counts: Mutex<Counts>,
    changed: Condvar,
}

impl ReadWindow {
    /// Registers a read that holds resolved pointers (called under the engine lock).
    pub(crate) fn begin_read(&self) {
        self.counts.lock().reads += 1;
    }

    /// The read finished with every page it fetched.
    pub(crate) fn end_read(&self) {
        let mut c = self.counts.lock();
        c.reads = c.reads.saturating_sub(1);
        self.changed.notify_all();
    }

    /// Waits until `n` more pages fit in the window (or nothing is in flight).
    pub(crate) fn acquire_pages(&self, n: usize) {
        let mut c = self.counts.lock();
        while c.pages > 0 && c.pages + n > ASYNC_READ_WINDOW {
            self.changed.wait(&mut c);
        }
        c.pages += n;
    }

    /// One page read finished.
    pub(crate) fn release_page(&self) {
        let mut c = self.counts.lock();
        c.pages = c.pages.saturating_sub(1);
        self.changed.notify_all();
    }

    /// Waits until no read holds resolved pointers (before a value-log segment is trimmed).
    /// Reads only finish on the poller thread, which never takes the engine lock, so waiting
    /// under the engine lock cannot deadlock; and no new read can resolve meanwhile.
    pub(crate) fn wait_idle(&self) {
        let mut c = self.counts.lock();
        while c.reads > 0 {
            self.changed.wait(&mut c);
        }
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
    fn an_oversized_request_runs_alone() {
        let w = ReadWindow::default();
        w.acquire_pages(ASYNC_READ_WINDOW * 2);
        for _ in 0..ASYNC_READ_WINDOW * 2 {
            w.release_page();
        }
    }

    #[test]
    fn wait_idle_waits_for_reads() {
        let w = Arc::new(ReadWindow::default());
        w.begin_read();
        let w2 = w.clone();
        let t = std::thread::spawn(move || w2.wait_idle());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished());
        w.end_read();
        assert!(t.join().is_ok());
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
