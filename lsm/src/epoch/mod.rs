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
//! [`shuttle_check`] (an ordinary unit test: `cargo test -p lsm --lib epoch`) runs the
//! protocol's own source under shuttle's randomised scheduler, and checks that the same
//! scenario fails when the trimmer skips the wait.

/// The atomics and locks the protocol is built on: the standard library's.
mod sync {
    pub(super) use std::sync::{atomic, Condvar, Mutex};
}

mod protocol;
#[cfg(test)]
mod shuttle_check;

pub(crate) use protocol::{ReadEpochs, ReadPin};

#[cfg(test)]
mod tests {
    use super::ReadEpochs;
    use std::sync::Arc;
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
