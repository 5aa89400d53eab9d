//! Asynchronous reads a thread starts and finishes itself ([`ThreadReads`]): the device's
//! read queue for one thread ([`hwftl_sim::ReadRing`]) with the callbacks of the reads on
//! it. The drive's network thread starts its cold GETs here and reaps them on its own
//! turns, so a cold read wakes no other thread (see `hwftl-sim`'s `media/uring/read_ring`
//! for why: a read's completion is posted by the task that submitted it).
//!
//! Reads on the queue keep every rule of [`Engine::submit_reads`]: they hold their room in
//! the read window and their view's pin until their last page is in, a page is verified
//! (checksum, key) before its value is handed out, and a read the queue refuses for want of
//! a command tag goes to the poller's deferred reads, as there.
//!
//! A queue whose kernel ring fails for good ([`hwftl_sim::ReadRing::broken`]) fails the
//! pages it had not handed to the kernel yet. Those pages, and any other page that comes
//! back failed from a broken queue, are read once more on the device's shared queue (their
//! completions then run on the poller), so a ring's failure costs a detour, not a client's
//! read; reads started afterwards go to the shared queue directly.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::*;

/// How long dropping a [`ThreadReads`] waits for the reads still on the device.
const DROP_PATIENCE: Duration = Duration::from_secs(10);

/// One thread's own queue of asynchronous page reads (see the module docs). Not shared:
/// the thread that owns it submits ([`ThreadReads::submit`]) and reaps
/// ([`ThreadReads::reap`]); reaping runs the reads' `done` callbacks on that thread.
pub struct ThreadReads {
    side: Arc<ReadSide>,
    ring: Box<dyn hwftl_sim::ReadRing>,
    /// The pages on the queue, by command tag: where each reads from and its callback.
    waiting: HashMap<u32, (Lba, crate::io::OnDone)>,
    reaped: Vec<Completion>,
}

impl Engine {
    /// A read queue of its own for the calling thread, to start reads reserved by
    /// [`PendingLookup::reserve`] and finish them on its own turns; `None` when the
    /// device has none (then [`Engine::submit_reads`] and the poller serve it).
    pub fn thread_reads(&self) -> Option<ThreadReads> {
        let ring = self.side.dev.clone().read_ring()?;
        Some(ThreadReads {
            side: self.side.clone(),
            ring,
            waiting: HashMap::new(),
            reaped: Vec::new(),
        })
    }
}

impl ThreadReads {
    /// Starts reads reserved by [`PendingLookup::reserve`]: every page of all of them in
    /// one submission (one system call) on this queue. Never waits: a page the device
    /// refuses for want of a command tag is handed to the poller, which offers it again as
    /// tags free up (its completion then runs on the poller thread); any other refusal
    /// fails its read through the read's `done`, at once. Once the queue has failed for
    /// good ([`hwftl_sim::ReadRing::broken`]) the reads go as [`Engine::submit_reads`]
    /// sends them.
    pub fn submit(&mut self, mut reads: Vec<ReservedRead>) {
        if self.ring.broken() {
            // The queue's kernel ring failed for good: the shared ring and the poller serve.
            pending::submit_on_shared_ring(&self.side, reads);
            return;
        }
        let pending::PageReads {
            cmds,
            callbacks,
            owner,
        } = pending::page_reads(&reads);
        if cmds.is_empty() {
            return;
        }
        let results = self.ring.submit(cmds);
        let mut deferred = false;
        for (((r, j), result), callback) in owner.into_iter().zip(results).zip(callbacks) {
            let read = &reads[r];
            let rejected = match result {
                Ok(tag) => {
                    self.waiting.insert(tag.0, (read.lbas[j], callback));
                    continue;
                }
                Err(rejected) => rejected,
            };
            let Some(acc) = &read.acc else {
                continue;
            };
            if matches!(rejected.error, DeviceError::QueueFull { .. }) {
                let buf = rejected.buf.unwrap_or_else(PageBuf::zeroed);
                self.side.poller.defer_read(read.lbas[j], buf, callback);
                deferred = true;
            } else {
                drop(callback);
                read.fail_page(j, acc, rejected.error.into());
            }
        }
        // Every page is on the queue or with the poller now: nothing is left for `Drop`.
        for read in &mut reads {
            read.acc = None;
        }
        if deferred {
            self.side.poller.doorbell();
        }
    }

    /// Finishes the reads whose pages are in: runs each page's callback here (the last
    /// page of a read assembles its values and calls its `done`). A page that failed on a
    /// queue broken for good is not finished here but read again on the shared queue (see
    /// the module docs). Never waits. Returns how many pages came back.
    pub fn reap(&mut self) -> usize {
        self.ring.reap(&mut self.reaped);
        let n = self.reaped.len();
        let broken = n > 0 && self.ring.broken();
        let mut again = false;
        for mut c in self.reaped.drain(..) {
            let Some((lba, f)) = self.waiting.remove(&c.tag.0) else {
                tracing::warn!(tag = c.tag.0, "a read queue's completion without a waiter");
                continue;
            };
            if broken && retry_on_shared_queue(&c.result) {
                let buf = c.buf.take().unwrap_or_else(PageBuf::for_read);
                self.side.poller.defer_read(lba, buf, f);
                again = true;
                continue;
            }
            f(Ok(c));
        }
        if again {
            tracing::warn!("a thread's read queue failed: its reads go to the shared queue");
            self.side.poller.doorbell();
        }
        n
    }

    /// A descriptor that turns readable when a page may be in: register it with the
    /// thread's `epoll` (edge-triggered) and call [`ThreadReads::reap`] when it fires (and
    /// on any turn: reaping finds what is in without a system call).
    pub fn event_fd(&self) -> RawFd {
        self.ring.event_fd()
    }

    /// Pages on the queue and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.waiting.len()
    }
}

/// Whether a page that came back with `result` from a broken queue is worth a second read
/// on the shared queue: any failure but a device that powered off (a second read would
/// only fail the same way).
fn retry_on_shared_queue(result: &hwftl_sim::Result<()>) -> bool {
    matches!(result, Err(e) if !matches!(e, DeviceError::PoweredOff))
}

impl Drop for ThreadReads {
    /// Finishes the reads still on the device (their callbacks run here), waiting for them;
    /// any still out after ten seconds fail as lost with the device (`PoweredOff`).
    fn drop(&mut self) {
        let deadline = Instant::now() + DROP_PATIENCE;
        while !self.waiting.is_empty() && Instant::now() < deadline {
            if self.reap() == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        for (_, (_, f)) in self.waiting.drain() {
            f(Err(DeviceError::PoweredOff));
        }
    }
}
