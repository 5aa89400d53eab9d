//! The grace-period protocol itself (see the parent module for the argument).
//!
//! This file names no atomic or lock type of its own: it takes them from `super::sync`.
//! It is compiled twice: in [`super`] with `std::sync`'s, as the engine runs it, and in
//! `super::shuttle_check` (tests only) with shuttle's, whose randomised scheduler then
//! explores the interleavings of the very same code.

use super::sync::{
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
