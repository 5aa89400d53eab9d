//! Durable batches' device flushes, started by the completion of their pages (mode `sync`).
//!
//! A durable batch is acknowledged once its pages are on the device *and* a device flush
//! that started after they completed has ended (until then they may sit in the device's
//! volatile write cache). Its writer used to wait for its pages, then wait a while for other
//! batches' pages so that one flush would cover them (`flush_companions`), then run or join
//! a flush ([`FlushGate`]): three sleeps and wake-ups per batch, each a futex and, on a
//! virtual machine, an inter-processor interrupt, and a flush that could start only once the
//! writer was awake again.
//!
//! Here the flush is started on the poller thread, by the completion of a batch's last page
//! (the batch's [`GroupDone`] hook), and the writer sleeps once:
//! - **The mark.** On its last page the batch's [`DurableMark`] takes the number of the
//!   first flush that starts after that moment: `started + 1`. That is the flush started
//!   right then when none is running, or, when one is, the next one, which starts as soon as
//!   the running one ends (`wanted`).
//! - **Why that flush covers the batch.** One flush runs at a time and they start in number
//!   order, so flush `e` starts after the moment its batches were marked `e` (it is started
//!   either by that mark itself, under the same lock, or by the end of flush `e - 1`, which
//!   was running at that moment), hence after every page of theirs completed.
//! - **The writer** waits, under the chain's lock, until its mark is set and flush `mark`
//!   has ended (or its pages failed: no flush is needed to learn that), then takes that
//!   flush's outcome. The mark is set and flushes end under the same lock the writer
//!   waits under, so no wake-up is lost.
//! - **Coalescing** is the same as the gate's: every batch whose pages complete while a
//!   flush runs shares the next one. Nothing waits on purpose for companions: the first
//!   batch's flush starts at once, and the batches completing during it share the next,
//!   which starts the moment it ends, so the device flushes back to back while writers keep
//!   it busy.
//! - **A flush the device cannot take** (every command tag held) is recorded as refused,
//!   and each writer it was to cover runs one itself through the [`FlushGate`], as before.
//!   A flush that fails, or that the device refuses for any other reason, fails the
//!   batches it was to cover (their outcome is unknown: the pages did land).
//!
//! Lock order: the chain's lock is taken alone, or after the engine lock (a page refused at
//! submission finishes its group on the submitting thread); it is released before a flush is
//! submitted, so it is never held with the poller's registry lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use hwftl_sim::{Command, DeviceError};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::io::{FailureMemory, GroupHook, Poller, Recalled};

/// Failed or refused flushes remembered for the writers they covered. A writer looks its
/// flush up as soon as it ends; one descheduled while more than this many flushes failed
/// finds its flush's outcome forgotten and is told to flush again itself
/// ([`Covered::Refused`]), never that it succeeded.
const REMEMBERED_FAILURES: usize = 1024;

/// A mark's value while its batch's pages are out.
const PAGES_OUT: u64 = 0;
/// A mark's value once a page of its batch failed (no flush then covers it).
const PAGES_FAILED: u64 = u64::MAX;

/// Which flush covers one durable batch (see the module docs): [`PAGES_OUT`] while its pages
/// are out, [`PAGES_FAILED`] when one failed, else the flush's number (from 1).
#[derive(Debug, Default)]
pub(in crate::engine) struct DurableMark(AtomicU64);

/// Starts durable batches' flushes as their pages complete (see the module docs).
pub(in crate::engine) struct FlushChain {
    state: Mutex<ChainState>,
    ended: Condvar,
    /// Where flushes are submitted.
    device: Box<dyn SubmitFlush>,
    /// What a device flush has recently cost, in nanoseconds (an average over about the last
    /// eight, the chain's and the writers' own; 0 before the first): see
    /// [`FlushChain::cheap`].
    cost_ns: AtomicU64,
}

/// Where a [`FlushChain`] sends its flushes: the device poller, or a test's hand-driven
/// device.
pub(in crate::engine) trait SubmitFlush: Send + Sync {
    /// Submits one device flush; `ended` runs with its outcome when it ends (not when it is
    /// refused).
    ///
    /// # Errors
    /// The device's refusal.
    fn submit_flush(&self, ended: FlushEnded) -> Result<(), DeviceError>;
}

/// What a submitted flush calls when it ends.
pub(in crate::engine) type FlushEnded = Box<dyn FnOnce(Result<(), DeviceError>) + Send>;

/// The poller, held weakly: its callbacks hold the chain.
struct PollerFlushes(Weak<Poller>);

impl SubmitFlush for PollerFlushes {
    fn submit_flush(&self, ended: FlushEnded) -> Result<(), DeviceError> {
        let poller = self.0.upgrade().ok_or(DeviceError::PoweredOff)?;
        poller
            .submit(
                Command::Flush,
                Box::new(move |r| ended(r.and_then(|c| c.result))),
            )
            .map_err(|rejected| rejected.error)
    }
}

#[derive(Default)]
struct ChainState {
    /// Flushes started (the number of the latest).
    started: u64,
    /// The latest flush that ended (they end in order: one runs at a time).
    finished: u64,
    /// A flush is running.
    running: bool,
    /// A batch was marked for the flush after the running one: start it when that ends.
    wanted: bool,
    /// Recent flushes that did not succeed, by number.
    failures: FailureMemory<ChainFailure, REMEMBERED_FAILURES>,
}

#[derive(Clone, Debug)]
enum ChainFailure {
    /// The device had no free tag for it (it never ran).
    Refused,
    /// The flush failed.
    Failed(DeviceError),
}

/// What covers a durable batch once [`FlushChain::wait`] returns.
#[derive(Debug)]
pub(in crate::engine) enum Covered {
    /// A page of the batch failed; no flush was started for it.
    PagesFailed,
    /// The flush that started after its pages completed ended with this outcome.
    Flushed(Result<(), DeviceError>),
    /// The device had no tag for that flush: the writer must flush itself.
    Refused,
}

impl FlushChain {
    /// A chain submitting its flushes through `poller`.
    pub(in crate::engine) fn new(poller: &Arc<Poller>) -> Arc<FlushChain> {
        Self::with_device(Box::new(PollerFlushes(Arc::downgrade(poller))))
    }

    /// A chain submitting its flushes to `device`.
    pub(in crate::engine) fn with_device(device: Box<dyn SubmitFlush>) -> Arc<FlushChain> {
        Arc::new(FlushChain {
            state: Mutex::new(ChainState::default()),
            ended: Condvar::new(),
            device,
            cost_ns: AtomicU64::new(0),
        })
    }

    /// Whether flushes are cheap on this device: under `threshold` recently
    /// ([`crate::EngineConfig::cheap_flush`]), or none measured yet. A durable batch then
    /// flushes on its writer's thread, timed with [`FlushChain::timed`], instead of through
    /// the chain.
    pub(in crate::engine) fn cheap(&self, threshold: Duration) -> bool {
        self.cost_ns.load(Ordering::Relaxed)
            < u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Runs one device flush on this thread and counts what it cost.
    ///
    /// # Errors
    /// The flush's.
    pub(in crate::engine) fn timed(
        &self,
        flush: impl FnOnce() -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let started = Instant::now();
        let r = flush();
        self.note_cost(started.elapsed());
        r
    }

    fn note_cost(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        // A racing update may be lost: an estimate, not a count.
        let old = self.cost_ns.load(Ordering::Relaxed);
        let avg = if old == 0 {
            took
        } else {
            old - old / 8 + took / 8
        };
        self.cost_ns.store(avg.max(1), Ordering::Relaxed);
    }

    /// Flushes this chain started.
    pub(in crate::engine) fn issued(&self) -> u64 {
        self.state.lock().started
    }

    /// The hook of a durable batch's [`crate::io::GroupDone`]: marks the batch once its last
    /// page is in, starting a flush when none is running.
    pub(in crate::engine) fn hook(self: &Arc<Self>, mark: Arc<DurableMark>) -> GroupHook {
        let chain = self.clone();
        Arc::new(move |failed| chain.pages_in(&mark, failed))
    }

    /// A batch's pages are all in (`failed`: one of them failed).
    pub(in crate::engine) fn pages_in(self: &Arc<Self>, mark: &DurableMark, failed: bool) {
        let mut st = self.state.lock();
        if failed {
            mark.0.store(PAGES_FAILED, Ordering::Release);
            self.ended.notify_all();
            return;
        }
        mark.0.store(st.started + 1, Ordering::Release);
        if st.running {
            st.wanted = true;
        } else {
            self.start(st);
        }
    }

    /// Starts flush `started + 1` (none is running).
    fn start(self: &Arc<Self>, mut st: MutexGuard<'_, ChainState>) {
        st.running = true;
        st.started += 1;
        let number = st.started;
        // Submitted without the chain's lock (the order in the module docs); a batch
        // completing meanwhile sees `running` and waits for the next flush.
        drop(st);
        let chain = self.clone();
        let started = Instant::now();
        let submitted = self.device.submit_flush(Box::new(move |r| {
            chain.note_cost(started.elapsed());
            chain.end(number, r.map_err(ChainFailure::Failed));
        }));
        if let Err(error) = submitted {
            // Every tag held: the writers retry it themselves, patiently, as they would have
            // run it. Any other refusal is the flush's failure.
            let failure = match error {
                DeviceError::QueueFull { .. } => ChainFailure::Refused,
                error => ChainFailure::Failed(error),
            };
            self.end(number, Err(failure));
        }
    }

    /// Flush `number` ended: wakes the writers it covers and starts the next one if a batch
    /// is waiting for it.
    fn end(self: &Arc<Self>, number: u64, outcome: Result<(), ChainFailure>) {
        let mut st = self.state.lock();
        st.running = false;
        st.finished = number;
        if let Err(f) = outcome {
            st.failures.record(number, f);
        }
        self.ended.notify_all();
        if std::mem::take(&mut st.wanted) {
            self.start(st);
        }
    }

    /// Waits until the batch marked `mark` is covered: its pages failed, or the flush that
    /// started after they completed ended.
    pub(in crate::engine) fn wait(&self, mark: &DurableMark) -> Covered {
        let mut st = self.state.lock();
        loop {
            match mark.0.load(Ordering::Acquire) {
                PAGES_FAILED => return Covered::PagesFailed,
                PAGES_OUT => {}
                number if st.finished >= number => {
                    return match st.failures.recall(number) {
                        Recalled::Succeeded => Covered::Flushed(Ok(())),
                        // A forgotten outcome may have been a failure: flush again rather
                        // than guess.
                        Recalled::Failed(ChainFailure::Refused) | Recalled::Forgotten => {
                            Covered::Refused
                        }
                        Recalled::Failed(ChainFailure::Failed(e)) => {
                            Covered::Flushed(Err(e.clone()))
                        }
                    };
                }
                _ => {}
            }
            self.ended.wait(&mut st);
        }
    }
}

impl DurableMark {
    /// A mark for a batch whose pages are out.
    pub(in crate::engine) fn new() -> Arc<DurableMark> {
        Arc::new(DurableMark::default())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use std::collections::VecDeque;
    use std::time::Duration;

    /// A device whose flushes end when the test says, in order.
    #[derive(Default)]
    struct HandFlushes {
        running: std::sync::Mutex<VecDeque<FlushEnded>>,
        submitted: AtomicU64,
        refuse_next: std::sync::Mutex<Option<DeviceError>>,
    }

    impl SubmitFlush for Arc<HandFlushes> {
        fn submit_flush(&self, ended: FlushEnded) -> Result<(), DeviceError> {
            if let Some(e) = self.refuse_next.lock().unwrap().take() {
                return Err(e);
            }
            self.submitted.fetch_add(1, Ordering::SeqCst);
            self.running.lock().unwrap().push_back(ended);
            Ok(())
        }
    }

    impl HandFlushes {
        /// Ends the oldest running flush with `r`.
        fn end_one(&self, r: Result<(), DeviceError>) {
            let ended = self
                .running
                .lock()
                .unwrap()
                .pop_front()
                .expect("a flush runs");
            ended(r);
        }
    }

    fn chain() -> (Arc<FlushChain>, Arc<HandFlushes>) {
        let hand = Arc::new(HandFlushes::default());
        (FlushChain::with_device(Box::new(hand.clone())), hand)
    }

    /// What `wait` for `mark` returns within `limit`, if it returns (run on another thread).
    fn covered_within(
        chain: &Arc<FlushChain>,
        mark: &Arc<DurableMark>,
        limit: Duration,
    ) -> Option<Covered> {
        let (chain, mark) = (chain.clone(), mark.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || drop(tx.send(chain.wait(&mark))));
        rx.recv_timeout(limit).ok()
    }

    /// Whether `wait` for `mark` returns within a short time: for a batch that must still
    /// be waiting.
    fn covered_soon(chain: &Arc<FlushChain>, mark: &Arc<DurableMark>) -> Option<Covered> {
        covered_within(chain, mark, Duration::from_millis(200))
    }

    /// What `wait` for `mark` returns, given ample time (a loaded test host may be slow to
    /// run the waiting thread): for a batch that must be covered.
    fn covered(chain: &Arc<FlushChain>, mark: &Arc<DurableMark>) -> Option<Covered> {
        covered_within(chain, mark, Duration::from_secs(10))
    }

    /// A batch whose pages complete while a flush runs is not covered by it: it waits for
    /// the next, which starts the moment the running one ends and covers every batch that
    /// completed meanwhile.
    #[test]
    fn batches_completing_during_a_flush_share_the_next_one() {
        let (chain, hand) = chain();
        let (a, b, c) = (DurableMark::new(), DurableMark::new(), DurableMark::new());
        chain.pages_in(&a, false);
        assert_eq!(
            hand.submitted.load(Ordering::SeqCst),
            1,
            "a's flush starts at once"
        );
        chain.pages_in(&b, false);
        chain.pages_in(&c, false);
        assert_eq!(
            hand.submitted.load(Ordering::SeqCst),
            1,
            "one flush at a time"
        );
        assert!(covered_soon(&chain, &a).is_none(), "a waits for its flush");
        hand.end_one(Ok(()));
        assert!(matches!(
            covered(&chain, &a),
            Some(Covered::Flushed(Ok(())))
        ));
        assert_eq!(
            hand.submitted.load(Ordering::SeqCst),
            2,
            "the next starts at once"
        );
        assert!(
            covered_soon(&chain, &b).is_none(),
            "b completed during flush 1: flush 1 does not cover it"
        );
        hand.end_one(Ok(()));
        for m in [&b, &c] {
            assert!(matches!(covered(&chain, m), Some(Covered::Flushed(Ok(())))));
        }
        assert_eq!(
            hand.submitted.load(Ordering::SeqCst),
            2,
            "nobody waits: no flush"
        );
        assert_eq!(chain.issued(), 2);
    }

    /// A flush's failure reaches exactly the batches it was to cover; a batch whose page
    /// failed needs no flush; a flush the device has no tag for is left to its writers.
    #[test]
    fn failures_reach_the_batches_they_cover() {
        let (chain, hand) = chain();
        let (a, b) = (DurableMark::new(), DurableMark::new());
        chain.pages_in(&a, false);
        chain.pages_in(&b, false);
        hand.end_one(Err(DeviceError::PoweredOff));
        assert!(matches!(
            covered(&chain, &a),
            Some(Covered::Flushed(Err(DeviceError::PoweredOff)))
        ));
        hand.end_one(Ok(()));
        assert!(matches!(
            covered(&chain, &b),
            Some(Covered::Flushed(Ok(())))
        ));

        let failed = DurableMark::new();
        chain.pages_in(&failed, true);
        assert!(matches!(
            covered(&chain, &failed),
            Some(Covered::PagesFailed)
        ));
        assert_eq!(chain.issued(), 2, "a failed batch starts no flush");

        *hand.refuse_next.lock().unwrap() = Some(DeviceError::QueueFull { depth: 256 });
        let refused = DurableMark::new();
        chain.pages_in(&refused, false);
        assert!(matches!(covered(&chain, &refused), Some(Covered::Refused)));
        // The chain is free again: the next batch's flush starts.
        let next = DurableMark::new();
        chain.pages_in(&next, false);
        hand.end_one(Ok(()));
        assert!(matches!(
            covered(&chain, &next),
            Some(Covered::Flushed(Ok(())))
        ));
    }

    /// A writer that looks its flush up only after more failures than the chain remembers
    /// is told to flush again, not that its flush succeeded.
    #[test]
    fn a_forgotten_failure_is_never_taken_for_success() {
        let (chain, hand) = chain();
        let first = DurableMark::new();
        chain.pages_in(&first, false);
        hand.end_one(Err(DeviceError::PoweredOff));
        for _ in 0..REMEMBERED_FAILURES {
            let m = DurableMark::new();
            chain.pages_in(&m, false);
            hand.end_one(Err(DeviceError::PoweredOff));
        }
        assert!(matches!(covered(&chain, &first), Some(Covered::Refused)));
        // A flush still remembered keeps its own outcome.
        let last = DurableMark::new();
        chain.pages_in(&last, false);
        hand.end_one(Err(DeviceError::PoweredOff));
        assert!(matches!(
            covered(&chain, &last),
            Some(Covered::Flushed(Err(DeviceError::PoweredOff)))
        ));
    }
}

#[cfg(test)]
mod cost_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Flushes count as cheap until one is measured slow, and again once they are fast.
    #[test]
    fn the_flush_cost_decides_who_flushes() {
        let chain = FlushChain::with_device(Box::new(Refuses));
        let limit = crate::config::DEFAULT_CHEAP_FLUSH;
        assert!(chain.cheap(limit), "nothing measured yet");
        chain.timed(|| Ok(())).unwrap();
        assert!(chain.cheap(limit));
        assert!(!chain.cheap(Duration::ZERO), "zero: never cheap");
        chain.note_cost(Duration::from_micros(800));
        assert!(!chain.cheap(limit), "an fdatasync-like flush");
        for _ in 0..40 {
            chain.note_cost(Duration::from_micros(1));
        }
        assert!(chain.cheap(limit));
    }

    struct Refuses;

    impl SubmitFlush for Refuses {
        fn submit_flush(&self, _ended: FlushEnded) -> Result<(), DeviceError> {
            Err(DeviceError::PoweredOff)
        }
    }
}
