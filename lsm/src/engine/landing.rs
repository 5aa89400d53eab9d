//! The landing buffer of [`EngineConfig::ack_from_dram`]: the value-log pages of batches
//! (clients' and garbage collection's moves) that were acknowledged, or applied, before
//! their pages reached the device, kept in DRAM until they land, and the bookkeeping that
//! retires such a batch once they have.
//!
//! **What changes in that mode, and what does not.** A pipelined client batch is laid out
//! and submitted as always, in ticket order under the write lock ([`Inner::start_batch`]),
//! and stays in `pipeline` until its pages complete, so every argument that rests on "the
//! pipeline is empty" still holds: a memtable is rotated out (and so flushed, and the replay
//! checkpoint moved) only with every page it points into on the device; garbage collection
//! trims victims only with the pipeline drained (`quiesce`), so only once their moves have
//! landed; recovery's bound on batches in flight is unchanged (the same page budget).
//! Garbage collection's moves are judged with batches in flight in this mode, under a rule
//! of their own (`gc::moves`), and applied at once; a move's page failing after that is an
//! acknowledged write lost (below), where in durable mode it only restarts its victim. What changes is only when
//! the batch is *claimed*: its outcome is decided at submission (`io` is set then, unless a
//! page was refused), so its writer inserts it and is answered at once ([`Inner::claim_ready`]
//! and [`Inner::settle_applied`] as for any batch), and the batch is *retired* from the
//! pipeline later, by whoever next holds the lock after its last page completed
//! ([`Inner::retire_landed`]).
//!
//! **Why a read never sees a page that is not there.** A batch's page copies enter the buffer
//! under the write lock before its pages are queued and before its versions enter the
//! memtable; a reader can name a page only through a version it found in the memtable (or a
//! run flushed from it), so it finds the copy. A copy leaves only when its batch is retired,
//! after the device completed the page: a reader that misses it reads the device, which
//! then holds the page. Reads check the buffer before the value cache and the device
//! (`ReadPlan`, `Engine::get_now`).
//!
//! **Bounds.** A batch counts against the pipeline's page budget
//! ([`super::write::PIPELINE_PAGES`], 1.5 MiB) until it is retired; a batch of moves counts at
//! most [`super::write::GC_PIPELINE_SHARE`] pages of it and holds about 61 (`GC_BATCH_BYTES`),
//! more when it moves a raw value longer than that, so the buffer holds about 2 MiB, more
//! while such a value's move lands.
//!
//! **Failure.** A page that fails after its batch was acknowledged cannot be un-applied:
//! [`Inner::retire_landed`] records it (only for a batch that was applied and answered: a
//! batch poisoned by an earlier failure was told its outcome is unknown, and its hole was
//! handled when it was claimed), and from then on the engine writes nothing at all:
//! admission refuses every batch (a stalled one too) with
//! [`EngineError::AcknowledgedWriteLost`], no maintenance task is due, and a task already
//! running is refused where it would write (`start_batch`, `write_pages`, `plan_run_pages`,
//! `flush`, `persist`), as is `close`'s flush: moving the replay checkpoint past the hole, or
//! installing keytables that point into it, would turn a lost write into a corrupt one. The
//! value cache, which took the batch's pages when it was applied, is emptied. Reads go on; a
//! read of a lost value fails (unreadable page or checksum). A restart recovers the log up to
//! the failed page, so writes acknowledged after it are lost too.
//!
//! **Waiting.** The poller thread must never take the engine lock, so a batch's last page
//! bumps the buffer's epoch instead ([`Landing::hook`]); a caller waiting for the pipeline to
//! drain reads the epoch, retires what has landed, and sleeps until the epoch moves
//! ([`Core::wait_for_batches`]), with the engine lock released.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use parking_lot::RwLock;

use super::*;
use crate::io::GroupHook;

/// Longest a caller waiting for the pipeline sleeps before it looks again (every landing
/// and every settled batch wakes it sooner; this only bounds a missed wakeup).
const LANDING_POLL: Duration = Duration::from_millis(2);

/// Page copies of acknowledged batches whose pages have not all landed (see the module docs).
#[derive(Default)]
pub(super) struct Landing {
    pages: RwLock<HashMap<PageAddr, Bytes>>,
    /// Pages held (the readers' fast path: nothing to look up when 0).
    held: AtomicUsize,
    /// Bumped when a batch's last page completes or a batch settles.
    epoch: Mutex<u64>,
    moved: Condvar,
    /// Page lookups the buffer answered.
    hits: AtomicU64,
}

impl Landing {
    /// Holds copies of a batch's pages until [`Landing::release`].
    pub(super) fn hold(&self, pages: &[(PageAddr, Bytes)]) {
        if pages.is_empty() {
            return;
        }
        let mut m = self.pages.write();
        for (addr, page) in pages {
            m.insert(*addr, page.clone());
        }
        self.held.store(m.len(), Ordering::Release);
    }

    /// Lets go of the copies of a batch whose pages landed.
    pub(super) fn release(&self, addrs: &[PageAddr]) {
        if addrs.is_empty() {
            return;
        }
        let mut m = self.pages.write();
        for a in addrs {
            m.remove(a);
        }
        self.held.store(m.len(), Ordering::Release);
    }

    /// The copy of the page at `addr`, if it has not landed yet.
    pub(super) fn get(&self, addr: PageAddr) -> Option<Bytes> {
        if self.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        let page = self.pages.read().get(&addr).cloned();
        if page.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        page
    }

    /// Pages held now.
    pub(super) fn held_pages(&self) -> u64 {
        self.held.load(Ordering::Relaxed) as u64
    }

    /// Page lookups answered from the buffer since open.
    pub(super) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The current epoch: read it before looking at the pipeline, then
    /// [`Landing::wait_past`] it.
    pub(super) fn epoch(&self) -> u64 {
        *self.epoch.lock()
    }

    /// Something a waiter may be waiting for happened.
    pub(super) fn bump(&self) {
        let mut e = self.epoch.lock();
        *e = e.wrapping_add(1);
        self.moved.notify_all();
    }

    /// Sleeps until the epoch is past `seen` (or [`LANDING_POLL`] passed).
    pub(super) fn wait_past(&self, seen: u64) {
        let mut e = self.epoch.lock();
        if *e == seen {
            let _ = self.moved.wait_for(&mut e, LANDING_POLL);
        }
    }

    /// The hook a batch's [`crate::io::GroupDone`] runs when its last page completes.
    pub(super) fn hook(self: &Arc<Self>) -> GroupHook {
        let me = self.clone();
        Arc::new(move |_failed| me.bump())
    }
}

impl Inner {
    /// Takes out of the pipeline every batch acknowledged early whose pages have all
    /// completed (it has settled: its writer was answered), releasing its page copies. A page
    /// that failed stops writes (see the module docs).
    pub(super) fn retire_landed(&mut self) {
        let Some(landing) = self.side.landing.clone() else {
            return;
        };
        let mut retired = Vec::new();
        for (&t, b) in self.pipeline.range(..=self.applied_upto) {
            if !b.early {
                continue;
            }
            if let Some(r) = b.done.try_take() {
                retired.push((t, r));
            }
        }
        for (t, r) in retired {
            let Some(b) = self.pipeline.remove(&t) else {
                continue;
            };
            self.pipeline_pages = self.pipeline_pages.saturating_sub(b.pages);
            landing.release(&b.landing);
            // A poisoned batch was never acknowledged (its writer was told the outcome is
            // unknown) and its hole was handled when it was claimed.
            if let (Err(e), true) = (r, b.acked) {
                tracing::error!(
                    error = %e,
                    "a page of an acknowledged write failed on the device: writes stop"
                );
                self.ack_lost.get_or_insert_with(|| e.to_string());
                // The value cache took the batch's pages when it was applied: a read of a
                // lost value must not be answered from there.
                if let Some(cache) = &self.side.cache {
                    cache.clear();
                }
            }
        }
    }
}

impl Core {
    /// Waits once for the pipeline to move (a batch applied, settled or landed), the write
    /// lock released meanwhile. The caller looks again on return.
    pub(super) fn wait_for_batches(&self, g: &mut MutexGuard<'_, Inner>) {
        // A shared open page holds its members in the pipeline until it is written
        // (`open_page`, invariant 2).
        // Whatever is queued goes down first (pages queued under the lock wait for a
        // doorbell: garbage collection's moves, a sealed page), or the wait could outlast it.
        drop(g.seal_open_page());
        g.poller.doorbell();
        let Some(landing) = g.side.landing.clone() else {
            self.applied.wait(g);
            return;
        };
        // The epoch first: a page landing after this look wakes the wait below.
        let seen = landing.epoch();
        let before = g.pipeline.len();
        g.retire_landed();
        if g.pipeline.len() < before {
            self.applied.notify_all();
            return;
        }
        MutexGuard::unlocked(g, || landing.wait_past(seen));
    }
}
