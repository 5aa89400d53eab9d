//! The grace-period protocol under shuttle's randomised scheduler: readers that find a
//! segment reachable must never see it trimmed while they hold their pin.
//!
//! `protocol.rs` is compiled here a second time, with shuttle's atomics and locks in place
//! of the standard library's (its only imports come from `super::sync`), so the code
//! checked is the code the engine runs, and no cargo feature (and no second build of the
//! crate and everything on it) is needed to check it.

/// Shuttle's atomics and locks: every operation on them is a scheduling point.
mod sync {
    pub(super) use shuttle::sync::{atomic, Condvar, Mutex};
}

#[path = "protocol.rs"]
#[allow(clippy::duplicate_mod)] // on purpose: the engine's protocol, with shuttle's `sync`
mod protocol;

use protocol::ReadEpochs;
use shuttle::sync::atomic::{AtomicBool, Ordering::SeqCst};
use shuttle::thread;
use std::sync::Arc;

/// One segment: readers check it is not trimmed while they may read it.
fn scenario(wait_for_readers: bool) {
    let epochs = Arc::new(ReadEpochs::default());
    let reachable = Arc::new(AtomicBool::new(true));
    let trimmed = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (epochs, reachable, trimmed) = (epochs.clone(), reachable.clone(), trimmed.clone());
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
