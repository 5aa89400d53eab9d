//! The network thread's cold reads on the device: each turn's reads submitted together
//! (`ring_reads`), on the thread's own device read queue when the device gives it one
//! (`open_thread_reads`), and finished on the thread's own turns (`reap_reads`; why:
//! decisions/0040).

use std::sync::atomic::Ordering;

use mio::Interest;

use super::{Net, DEVICE_READS};

impl Net {
    /// Submits the reads started on this thread since the last call: all their pages in one
    /// submission (one system call).
    pub(super) fn ring_reads(&mut self) {
        if self.reads.is_empty() {
            return;
        }
        let reads = std::mem::take(&mut self.reads);
        match self.thread_reads.as_mut() {
            Some(q) => q.submit(reads),
            None => self.store.engine().submit_reads(reads),
        }
    }

    /// Takes this thread's device read queue, its eventfd in the poll; without one (a
    /// device that has none, or a registration refused) the reads go through the engine's
    /// poller.
    pub(super) fn open_thread_reads(&mut self) {
        let Some(q) = self.store.engine().thread_reads() else {
            return;
        };
        let fd = q.event_fd();
        match self.poll.registry().register(
            &mut mio::unix::SourceFd(&fd),
            DEVICE_READS,
            Interest::READABLE,
        ) {
            Ok(()) => self.thread_reads = Some(q),
            Err(e) => {
                tracing::warn!("the network thread's reads use the engine's poller: {e}");
            }
        }
    }

    /// Finishes the reads of this thread's queue whose pages are in (no system call as a
    /// rule: the completion queue is shared memory; one only to retry a short vectored read
    /// or hand over entries a refused submission left); their replies are queued for `drain_replies`,
    /// which runs next. The eventfd is never read: each completion the kernel posts wakes
    /// the edge-triggered poll anew, and its 64-bit counter does not fill.
    pub(super) fn reap_reads(&mut self) {
        let Some(q) = self.thread_reads.as_mut() else {
            return;
        };
        if q.in_flight() == 0 {
            return;
        }
        // The replies these reads queue are drained right after: no wake-up of this thread
        // is owed for them (`drain_replies` re-arms before it drains).
        self.sink.woken.store(true, Ordering::Release);
        let pages = q.reap();
        if pages > 0 {
            self.metrics
                .pages_read_on_net_queue
                .fetch_add(pages as u64, Ordering::Relaxed);
        }
    }
}
