//! Read epochs: when a segment that readers may still be reading can be trimmed.
//!
//! Readers take no engine lock. A reader *pins* ([`ReadEpochs::pin`]) before it loads the
//! engine's published state (the version, the memtable, the segment map) and keeps the pin
//! until the last page it reads has come back (the pin travels with an asynchronous read to
//! the poller thread and is dropped there). A trimmer first makes the segment unreachable
//! (it publishes a state in which no key leads into it: garbage collection's moves are in
//! the memtable, a compaction's new run replaced its inputs), then calls
//! [`ReadEpochs::synchronize`], which returns once every reader that pinned before the call
//! has let go. A reader that pins after the call started reads the new state, so it cannot
//! reach the segment. Only then is the segment trimmed.
//!
//! **The protocol** (the classic two-phase grace period). A global epoch counter and one
//! reader count per epoch parity. `pin` reads the epoch `e`, counts itself in slot `e & 1`,
//! and reads the epoch again: if it moved, the count is undone and the pin retried, so a
//! pin that succeeds was counted while the epoch was still `e`. `synchronize` (one caller at
//! a time) moves the epoch from `e` to `e + 1` and waits for slot `e & 1` to drain. Why that
//! is enough:
//! - every reader that pinned before the bump sits in slot `e & 1` (the previous
//!   `synchronize` drained the other slot, and no pin can succeed into it while the epoch is
//!   `e`), so it is waited for;
//! - every pin that succeeds after the bump read the epoch `e + 1` with a sequentially
//!   consistent load, which synchronises with the bump, which comes after the trimmer
//!   published the new state: such a reader sees the segment unreachable;
//! - new readers go to the other slot, so a steady stream of reads cannot starve the
//!   trimmer.
//!
//! `tests::shuttle` (run with `--features shuttle`) checks the protocol under a randomised
//! scheduler, and checks that the same test fails when the trimmer skips the wait.

#[cfg(feature = "shuttle")]
use shuttle::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst},
    Condvar, Mutex,
};
#[cfg(not(feature = "shuttle"))]
use std::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst},
    Condvar, Mutex,
};
use std::sync::{Arc, PoisonError};

/// Readers in flight per epoch parity (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ReadEpochs {
    epoch: AtomicU64,
    active: [AtomicUsize; 2],
    /// One `synchronize` at a time.
    trimmer: Mutex<()>,
    /// Guards the wait for a slot to drain.
    wait: Mutex<()>,
    drained: Condvar,
    /// A trimmer is (about to be) waiting on `drained`: only then does the last reader of a
    /// slot take `wait` and notify (a notify is a futex system call even with no waiter,
    /// and a lone reader empties its slot on every read).
    trimmer_waiting: AtomicBool,
}

/// A pinned reader: while it lives, nothing it could reach when it pinned is trimmed.
#[derive(Debug)]
#[must_use = "a pin protects reads only while it is held"]
pub(crate) struct ReadPin {
    epochs: Arc<ReadEpochs>,
    slot: usize,
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        self.epochs.unpin(self.slot);
    }
}

impl ReadEpochs {
    /// Pins a reader; drop the pin when its reads are done.
    pub(crate) fn pin(self: &Arc<Self>) -> ReadPin {
        loop {
            let e = self.epoch.load(SeqCst);
            let slot = (e & 1) as usize;
            self.active[slot].fetch_add(1, SeqCst);
            if self.epoch.load(SeqCst) == e {
                return ReadPin {
                    epochs: self.clone(),
                    slot,
                };
            }
            // A trimmer moved the epoch between the two loads: count again in the new slot.
            self.unpin(slot);
        }
    }

    fn unpin(&self, slot: usize) {
        if self.active[slot].fetch_sub(1, SeqCst) == 1 && self.trimmer_waiting.load(SeqCst) {
            // The last reader of the slot wakes a trimmer waiting for it. Taking the lock
            // first means a trimmer that saw a non-zero count is already waiting. A trimmer
            // that saw a non-zero count had raised `trimmer_waiting` before it looked (all
            // SeqCst: of its flag store + count load and this count decrement + flag load,
            // one side sees the other's write), so a reader that skips this either left a
            // count the trimmer sees as zero or was not the one it waits for.
            let _g = self.wait.lock().unwrap_or_else(PoisonError::into_inner);
            self.drained.notify_all();
        }
    }

    /// Waits until every reader pinned before this call has unpinned. The caller has made
    /// what it is about to trim unreachable before calling.
    pub(crate) fn synchronize(&self) {
        let _one = self.trimmer.lock().unwrap_or_else(PoisonError::into_inner);
        let e = self.epoch.load(SeqCst);
        self.epoch.store(e + 1, SeqCst);
        let slot = (e & 1) as usize;
        let mut g = self.wait.lock().unwrap_or_else(PoisonError::into_inner);
        self.trimmer_waiting.store(true, SeqCst);
        while self.active[slot].load(SeqCst) != 0 {
            g = self.drained.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
        self.trimmer_waiting.store(false, SeqCst);
    }

    /// Readers pinned now.
    #[cfg(test)]
    pub(crate) fn pinned(&self) -> usize {
        self.active[0].load(SeqCst) + self.active[1].load(SeqCst)
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn synchronize_waits_for_earlier_readers_only() {
        let e = Arc::new(ReadEpochs::default());
        let early = e.pin();
        let e2 = e.clone();
        let t = std::thread::spawn(move || e2.synchronize());
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !t.is_finished(),
            "a reader pinned before must be waited for"
        );
        // Readers pinned after the trimmer started do not hold it up.
        let late = e.pin();
        drop(early);
        assert!(t.join().is_ok());
        assert_eq!(e.pinned(), 1);
        drop(late);
        e.synchronize();
        assert_eq!(e.pinned(), 0);
    }
}

#[cfg(all(test, feature = "shuttle"))]
mod tests {
    //! The grace-period protocol under shuttle's randomised scheduler: readers that find a
    //! segment reachable must never see it trimmed while they hold their pin.
    use super::*;
    use shuttle::sync::atomic::AtomicBool;
    use shuttle::thread;

    /// One segment: readers check it is not trimmed while they may read it.
    fn scenario(wait_for_readers: bool) {
        let epochs = Arc::new(ReadEpochs::default());
        let reachable = Arc::new(AtomicBool::new(true));
        let trimmed = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (epochs, reachable, trimmed) =
                    (epochs.clone(), reachable.clone(), trimmed.clone());
                thread::spawn(move || {
                    for _ in 0..2 {
                        let pin = epochs.pin();
                        if reachable.load(SeqCst) {
                            // The read is on the device: the segment must still be there.
                            thread::yield_now();
                            assert!(!trimmed.load(SeqCst), "read a trimmed segment");
                        }
                        drop(pin);
                    }
                })
            })
            .collect();
        let trimmer = {
            let (epochs, reachable, trimmed) = (epochs.clone(), reachable, trimmed);
            thread::spawn(move || {
                // A second synchronize in between exercises the other parity.
                epochs.synchronize();
                reachable.store(false, SeqCst);
                if wait_for_readers {
                    epochs.synchronize();
                }
                trimmed.store(true, SeqCst);
            })
        };
        for r in readers {
            assert!(r.join().is_ok());
        }
        assert!(trimmer.join().is_ok());
        assert_eq!(epochs.pinned(), 0);
    }

    #[test]
    fn no_reader_sees_a_trimmed_segment() {
        shuttle::check_random(|| scenario(true), 20_000);
    }

    #[test]
    #[should_panic(expected = "read a trimmed segment")]
    fn the_check_catches_a_trim_without_the_wait() {
        shuttle::check_random(|| scenario(false), 20_000);
    }
}
