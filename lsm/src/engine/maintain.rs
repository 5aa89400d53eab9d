//! Background maintenance: the `lsm-maint` thread, which flushes frozen memtables, compacts
//! keytable runs and collects garbage, so that no client call ever does.
//!
//! **Locks.** Two mutexes, always taken in this order: the maintenance lock (`Core::maint`:
//! whoever holds it is the only one that flushes, compacts, collects garbage or writes
//! keytable segments) and the write lock (`Core::inner`). The thread holds the maintenance
//! lock for one task and the write lock only for the parts of it that read or change shared
//! state:
//!
//! | task | under the write lock | with the write lock free |
//! |---|---|---|
//! | memtable merge | take the active memtable | merge its runs (the memtable's own locks only) |
//! | flush | take the oldest frozen memtable and the levels; claim keytable pages; install the run, move the checkpoint, write the manifest | build the run and the garbage it makes; write its pages |
//! | compaction | take the input runs; claim pages; install, write the manifest, unlink the segments no run uses | merge the runs; write the pages; wait for readers and trim what was unlinked (`trim`) |
//! | GC step | take the victim's window, queue the next window's reads, judge liveness, lay out and queue the moves (durable mode: with no batch in flight, applied later in ticket order; plp mode: beside client batches, applied at once, `gc::moves`); release reclaimed segments: a manifest without them, then unlinked (drained) | wait for the window's reads; ring the doorbell; durable mode: the moves' pages and a flush on the device while client batches are laid out behind them; between steps; wait for readers and trim what was unlinked (`trim`) |
//!
//! **Why a GC step's moves may be on the device with the write lock free (durable mode).**
//! They are judged live and laid out with the pipeline empty, so every batch before them is applied
//! and a key still pointing into the victim is live. A client batch admitted while they are
//! in flight is laid out after them: later in the log and in sequence numbers, applied after
//! them (ticket order) and replayed after them, so its overwrite wins in memory and after a
//! restart alike. The victim leaves the log only once its last moves are applied, and its
//! segment is trimmed only by the release (pipeline drained, manifest written, readers'
//! epochs waited for). In durable mode the moves are flushed before they are applied: a
//! client batch behind them is acknowledged only after them, and a move left in the
//! device's write cache at a power cut would be a hole that stops replay before it. A move
//! batch that fails fails the batches behind it (as any failed batch) and restarts the
//! victim from its first page. While moves are in flight they count at most
//! `GC_PIPELINE_SHARE` (half) of the pipeline's pages. In plp mode the moves are judged and
//! laid out beside client batches in flight, under the rule in `gc::moves`, and applied
//! under the same hold of the lock.
//!
//! **Why the lock-free parts are safe.** A frozen memtable is immutable once rotated out
//! (writers insert only into the active one), and the levels change only by flush and
//! compaction, which only the maintenance lock's holder runs: what the thread read under
//! the write lock is still current when it installs the result. Keytable segments are
//! written only by that holder, into pages claimed under the write lock, so no writer's
//! layout (value-log segments only) can touch them. Readers see a frozen memtable until
//! the run replaces it in one version swap.
//!
//! **Rotation** (see [`Inner::rotate`]) happens with no batch in flight: a writer that
//! finds the active memtable full and fewer than `max_frozen_memtables` (default 2) frozen
//! drains the pipeline and rotates (cheap: a pointer swap and a version publish), then goes
//! on; the flush itself is the thread's, oldest frozen memtable first.
//!
//! **Watermarks** (the writer side's admission, `write.rs`): a batch waits (a *write
//! stall*, counted in [`super::WriteStalls`]) while the active memtable is full and
//! `max_frozen_memtables` frozen ones wait for their flush, while free segments are at the garbage-collection
//! low-water mark (garbage collection starts 1/[`GC_HEADROOM_DIVISOR`] of the segments
//! earlier, so steady writes rarely reach it), while a hole a failed batch left is not yet closed, at the
//! user capacity until a flush has made the garbage count exact, while L0 holds
//! `l0_stop_runs` runs (default 12, never below the `l0_runs` trigger, so a compaction is
//! due), and while the compaction debt passes `compaction_debt_stop_bytes` (default
//! 256 MiB of keytables; any debt means a compaction is due). The maintenance thread
//! flushes a frozen memtable before it starts a compaction unless L0 holds twice `l0_runs`
//! runs, when the compaction goes first (writers then fill the next memtable, and wait once
//! every frozen slot is taken).

use std::time::Duration;

use super::compaction::Pick;
use super::gc::{GcStep, GcWait};
use super::write::PIPELINE_PAGES;
use super::*;

/// Garbage collection starts this share of the device's segments (1/128, rounded down)
/// above its low-water mark, so that writers seldom reach the mark itself and stall. Kept
/// small: collecting earlier keeps more segments free, so the rest hold more live data and
/// each reclaim moves more (on the benchmark's 192 MiB device of 24 segments, starting two
/// segments early raised random-overwrite write amplification from 1.56 to 1.88).
pub(super) const GC_HEADROOM_DIVISOR: u32 = 128;

/// How long the maintenance thread sleeps when idle before looking again (it is also woken
/// whenever a writer finds work due).
const IDLE_POLL: Duration = Duration::from_millis(200);

/// The pause after a failed maintenance task before it is tried again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A stalled writer re-checks at least this often (a safety net against a missed wake-up).
pub(super) const STALL_POLL: Duration = Duration::from_millis(50);

/// A memtable rotated out of the write path, waiting for its flush or being flushed (the
/// queue's front).
pub(super) struct Frozen {
    /// The memtable (immutable from rotation on; readers still read it).
    pub(super) mem: Arc<MemTable>,
    /// The head position at rotation: the replay checkpoint once it is flushed.
    pub(super) end: (u32, u32),
    /// `pages_since_checkpoint` at rotation (pages of this generation and older ones).
    pub(super) pages: u64,
    /// Garbage this generation's records made (see `Inner::tail_dead`): left out of the
    /// manifest until the checkpoint passes `end`.
    pub(super) tail_dead: BTreeMap<u32, u64>,
    /// A hole a failed batch left in this generation.
    pub(super) hole: bool,
}

/// What writers ask of maintenance and what it reports back (under the write lock).
#[derive(Debug, Default)]
pub(super) struct MaintenanceShared {
    /// The engine is closing: the thread exits.
    pub(super) shutdown: bool,
    /// A writer at the user capacity wants every memtable flushed (an exact garbage count).
    pub(super) full_flush_requested: bool,
    /// When a full flush last compacted every level for expired entries and dropped none
    /// (see `Inner::expiry_compaction_due`).
    pub(super) futile_expiry_compaction: Option<std::time::Instant>,
    /// Full flushes done (a writer waits for this to pass the value it saw).
    pub(super) full_flushes: u64,
    /// A writer of a value spanning segments wants this many free segments.
    pub(super) gc_target: usize,
    /// Garbage collection found nothing worth reclaiming (or failed) since garbage was last
    /// counted: writers waiting for free segments go on (and may get `DeviceFull`).
    pub(super) gc_idle: bool,
    /// The thread is running a task (taken under the write lock, cleared after it).
    pub(super) running: bool,
    /// Maintenance tasks that failed, and the last failure.
    pub(super) failures: u64,
    pub(super) last_failure: Option<Arc<EngineError>>,
    /// The thread sleeps for [`IDLE_POLL`]: a batch that opens a shared page wakes it, so
    /// that the page is sealed within
    /// [`EngineConfig::open_page_linger`] while the thread is idle
    /// (a task it runs seals the page first; a page opened during the task waits for its
    /// end, a member's doorbell, the next batch that does not join it, or a wait for the
    /// pipeline).
    pub(super) napping: bool,
}

/// A unit of maintenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    /// Flush every memtable under the lock (a writer at the user capacity asked).
    FullFlush,
    /// Close a hole a failed batch left (flush, checkpoint past it).
    CloseHole,
    /// Rotate the full active memtable out (nothing frozen: with a frozen one due the
    /// thread flushes first; writers rotate while a slot is free).
    Rotate,
    /// Merge the active memtable's sorted runs (its inserters froze tails and left the
    /// merging here: `MemTable::merge_runs`).
    MergeMemtableRuns,
    /// Flush the oldest frozen memtable.
    FlushFrozen,
    /// Merge level `.0` into level `.1`.
    Compact(usize, usize),
    /// One garbage-collection step.
    Gc,
    /// Release the segments garbage collection reclaimed, when collection stopped being due
    /// before it released them (another task freed segments meanwhile: a compaction that
    /// emptied keytable segments). Without it they would wait for the next collection, and
    /// the manifest would list them as log segments until then.
    ReleaseReclaimed,
    /// Trim segments released outside a maintenance task and not yet trimmed (every task
    /// trims what it released itself; this is the net under any other releaser).
    TrimUnlinked,
}

/// Least time after a compaction of every level for expired entries that dropped none
/// before the next (the entries it met were a policy's to keep, say).
const EXPIRY_COMPACTION_PAUSE: Duration = Duration::from_millis(crate::merge::EXPIRY_GRACE_MS);

impl Inner {
    /// Whether compacting every level may give back room that expired entries hold: a
    /// memtable or a run holds an entry expired past the grace; and no such compaction in
    /// the last [`EXPIRY_COMPACTION_PAUSE`] dropped nothing (a write refused for capacity
    /// asks for one, and must not start a futile one per refusal).
    pub(super) fn expiry_compaction_due(&self) -> bool {
        if self
            .maint
            .futile_expiry_compaction
            .is_some_and(|t| t.elapsed() < EXPIRY_COMPACTION_PAUSE)
        {
            return false;
        }
        let horizon = crate::expiry::now_ms().saturating_sub(crate::merge::EXPIRY_GRACE_MS);
        let past = |d: Option<u64>| d.is_some_and(|d| d < horizon);
        past(self.mem.earliest_deadline())
            || self.frozen.iter().any(|f| past(f.mem.earliest_deadline()))
            || self
                .levels
                .iter()
                .flatten()
                .any(|r| past(r.earliest_deadline()))
    }

    /// Whether the maintenance thread should collect garbage now.
    pub(super) fn gc_due(&self) -> bool {
        !self.closed
            && !self.maint.gc_idle
            && (self.free.len()
                <= self.gc_low_water() + (self.g.segments() / GC_HEADROOM_DIVISOR) as usize
                || self.free.len() < self.maint.gc_target)
    }

    /// The most urgent task, if any.
    fn due_task(&self) -> Option<Task> {
        // After an acknowledged write was lost nothing more is written (see `landing`).
        if self.closed || self.ack_lost.is_some() {
            return None;
        }
        if self.maint.full_flush_requested {
            return Some(Task::FullFlush);
        }
        if self.needs_checkpoint {
            return Some(Task::CloseHole);
        }
        // First of the routine tasks: it takes a few milliseconds at most, and every range
        // read searches each run it leaves unmerged.
        if self.mem.merge_due() {
            return Some(Task::MergeMemtableRuns);
        }
        let l0_deep = self.levels[0].len() >= 2 * self.cfg.l0_runs.max(1);
        if l0_deep {
            if let Some(c) = self.compaction_due() {
                return Some(Task::Compact(c.0, c.1));
            }
        }
        if !self.frozen.is_empty() {
            return Some(Task::FlushFrozen);
        }
        if self.mem_full() {
            return Some(Task::Rotate);
        }
        if let Some(c) = self.compaction_due() {
            return Some(Task::Compact(c.0, c.1));
        }
        if self.gc_due() {
            return Some(Task::Gc);
        }
        if !self.gc_reclaimed.is_empty() && self.gc_cursor.is_none() {
            return Some(Task::ReleaseReclaimed);
        }
        if !self.unlinked.is_empty() {
            return Some(Task::TrimUnlinked);
        }
        None
    }
}

impl Core {
    /// Waits until no maintenance task is due (see [`Engine::settle`]).
    pub(super) fn settle(&self) -> Result<()> {
        let mut g = self.inner.lock();
        let failures = g.maint.failures;
        loop {
            g.check_open()?;
            if g.maint.failures != failures {
                let e = g.maint.last_failure.clone();
                return Err(e.map_or(EngineError::Closed, EngineError::MaintenanceFailed));
            }
            if g.due_task().is_none() && !g.maint.running {
                return Ok(());
            }
            self.work.notify_one();
            self.applied.wait_for(&mut g, STALL_POLL);
        }
    }

    /// Waits until no pipelined batch is on the device; while waiting, no new batch enters
    /// the pipeline (writers see `quiescers` and wait).
    pub(super) fn quiesce(&self, g: &mut MutexGuard<'_, Inner>) {
        g.quiescers += 1;
        while !g.pipeline.is_empty() {
            self.wait_for_batches(g);
        }
        g.quiescers -= 1;
    }

    /// The `lsm-maint` thread: waits for work, runs the most urgent task, repeats until the
    /// engine closes.
    pub(super) fn maintenance_loop(&self) {
        loop {
            let task = {
                let mut g = self.inner.lock();
                loop {
                    if g.maint.shutdown || g.closed {
                        return;
                    }
                    // The shared open page: sealed once it lingered long enough or a
                    // member's doorbell could not seal it, and before a task (which may run
                    // long without looking here).
                    let now = std::time::Instant::now();
                    let asked = self.seal_wanted.swap(false, Ordering::AcqRel);
                    let task = g.due_task();
                    if g.open_page_deadline()
                        .is_some_and(|d| asked || d <= now || task.is_some())
                        && g.seal_open_page().unwrap_or(false)
                    {
                        g.poller.doorbell();
                    }
                    if let Some(t) = task {
                        g.maint.running = true;
                        break t;
                    }
                    match g.open_page_deadline() {
                        Some(d) => {
                            self.work.wait_until(&mut g, d);
                        }
                        None => {
                            g.maint.napping = true;
                            self.work.wait_for(&mut g, IDLE_POLL);
                            g.maint.napping = false;
                        }
                    }
                }
            };
            let r = {
                let _m = self.maint.lock();
                self.run_task(task)
            };
            let mut g = self.inner.lock();
            g.maint.running = false;
            if let Err(e) = r {
                tracing::warn!(?task, error = %e, "maintenance task failed");
                g.stats.maintenance_errors += 1;
                g.maint.failures += 1;
                g.maint.last_failure = Some(Arc::new(e));
                if task == Task::Gc {
                    g.maint.gc_idle = true;
                }
                self.applied.notify_all();
                if !g.maint.shutdown {
                    self.work.wait_for(&mut g, RETRY_PAUSE);
                }
            } else {
                self.applied.notify_all();
            }
        }
    }

    /// Runs one task, then trims what it released (with the write lock free, see `trim`);
    /// the caller holds the maintenance lock.
    fn run_task(&self, task: Task) -> Result<()> {
        let r = self.run_task_body(task);
        let trimmed = self.trim_unlinked();
        r.and(trimmed)
    }

    /// The task itself.
    fn run_task_body(&self, task: Task) -> Result<()> {
        match task {
            Task::FullFlush => {
                let mut g = self.inner.lock();
                g.maint.full_flush_requested = false;
                self.quiesce(&mut g);
                let mut r = g.flush();
                if r.is_ok() && g.expiry_compaction_due() {
                    // A write waits for room that expired entries hold: compacting every
                    // level drops them (and counts their values as garbage).
                    let dropped = g.stats.expired_dropped;
                    g.stats.expiry_compactions += 1;
                    r = g.compact_all();
                    g.maint.futile_expiry_compaction =
                        (g.stats.expired_dropped == dropped).then(std::time::Instant::now);
                }
                g.maint.full_flushes += 1;
                r
            }
            Task::CloseHole => {
                let mut g = self.inner.lock();
                self.quiesce(&mut g);
                g.close_hole()
            }
            Task::Rotate => {
                let mut g = self.inner.lock();
                self.quiesce(&mut g);
                if g.may_rotate() && g.mem_full() {
                    g.rotate();
                }
                Ok(())
            }
            Task::MergeMemtableRuns => {
                // With the write lock free: a merge takes only the memtable's own locks.
                let mem = self.inner.lock().mem.clone();
                mem.merge_runs();
                Ok(())
            }
            Task::FlushFrozen => self.flush_frozen(),
            Task::Compact(from, to) => self.compact(from, to),
            Task::Gc => self.gc_step(),
            Task::ReleaseReclaimed => {
                let mut g = self.inner.lock();
                self.quiesce(&mut g);
                g.release_reclaimed()
            }
            // `run_task` trims after every task.
            Task::TrimUnlinked => Ok(()),
        }
    }

    /// Flushes the oldest frozen memtable, building and writing its run with the write lock
    /// free. Frozen memtables leave only under the maintenance lock, which the caller holds,
    /// and only from the front, so the one taken is still the oldest when its run is
    /// installed; writers meanwhile only push younger ones at the back.
    fn flush_frozen(&self) -> Result<()> {
        let (mem, levels, id, fp) = {
            let mut g = self.inner.lock();
            let Some(mem) = g.frozen.front().map(|f| f.mem.clone()) else {
                return Ok(());
            };
            let id = g.take_run_id();
            (mem, g.levels.clone(), id, g.cfg.bloom_fp_rate)
        };
        let (t, dead) = flush::build_flush_run(&mem, &levels, id, fp);
        drop(levels);
        let extents = self.write_new_run(&t)?;
        let mut g = self.inner.lock();
        g.install_flush(t, extents, dead)
    }

    /// Claims keytable pages for a new run (under the write lock) and writes them (with it
    /// free); returns the run's extents.
    fn write_new_run(&self, t: &KeyTable) -> Result<Vec<(u64, u32)>> {
        let pages = t.encode_pages();
        let (chunks, poller) = {
            let mut g = self.inner.lock();
            (g.plan_run_pages(pages.len())?, g.poller.clone())
        };
        flush::write_run_pages(&poller, flush::RunWrite { pages, chunks })
    }

    /// Merges what level `from` gives (one run, or all of L0) into `to`, with the write
    /// lock free while merging and writing (a trivial move, and the compaction ablation,
    /// which rewrites values at the head, run under the lock).
    fn compact(&self, from: usize, to: usize) -> Result<()> {
        let c = {
            let mut g = self.inner.lock();
            if g.cfg.compaction_moves_values {
                self.quiesce(&mut g);
                return g.compact_into(from, to, Pick::One);
            }
            let Some(c) = g.compaction_inputs(from, to, Pick::One) else {
                return Ok(());
            };
            if c.trivial_move {
                return g.install_move(&c);
            }
            c
        };
        let (outputs, dead, expired) = compact(c.sources(), &c.spec);
        let mut written = Vec::with_capacity(outputs.len());
        for t in outputs {
            let extents = self.write_new_run(&t)?;
            written.push((t, extents));
        }
        let mut g = self.inner.lock();
        g.install_compaction(&c, written, dead.len() as u64, expired)
    }

    /// One garbage-collection step. Under the write lock: read the victim's window (mostly
    /// read ahead in the previous step), judge liveness, lay out and queue the moves.
    ///
    /// - Acknowledged from DRAM ([`EngineConfig::ack_from_dram`]), with no drain of the
    ///   pipeline: the moves are judged on what is applied and laid out only when no batch in
    ///   flight writes a moved key (`Inner::submit_gc_moves`); they are applied under the same
    ///   hold of the lock, and their pages land while the next step runs.
    /// - Otherwise with the pipeline drained, as the moves' own pages must be waited for
    ///   (and flushed, in durable mode) before they are applied: then, with the write lock
    ///   free, wait for them while client batches are laid out behind them and readers go
    ///   on; then, under the lock again, apply them (and the clients' batches ready behind
    ///   them) in ticket order.
    ///
    /// A step that starts a victim drains the pipeline first (it may flush the memtable).
    /// The queued reads and pages go down with one doorbell once the lock is free. Releases
    /// what was reclaimed (with the pipeline drained again) when enough has gathered or
    /// collection is no longer due.
    fn gc_step(&self) -> Result<()> {
        let mut g = self.inner.lock();
        let poller = g.poller.clone();
        self.land_read_ahead(&mut g);
        if g.side.landing.is_none() || g.gc_starts_victim() {
            self.quiesce(&mut g);
        }
        let mut started = g.gc_step();
        while let Ok(s) = &mut started {
            let Some(wait) = s.blocked.take() else {
                break;
            };
            match wait {
                GcWait::Quiet | GcWait::Clients => self.quiesce(&mut g),
                GcWait::Room(pages) => self.wait_for_room(&mut g, pages),
            }
            if let Err(e) = g.gc_resubmit(s) {
                started = Err(e);
            }
        }
        let started = match started {
            Ok(s) => s,
            Err(e) => {
                // The failed step's state is reset (none of its moves is in flight); free
                // what was already reclaimed, with the pipeline drained as every release is
                // (client batches may be in flight: a plp step does not drain first, and the
                // release may flush to close a hole). The step's error is the one reported.
                self.quiesce(&mut g);
                if let Err(r) = g.release_reclaimed() {
                    tracing::warn!(error = %r, "releasing reclaimed segments failed");
                }
                drop(g);
                poller.doorbell();
                return Err(e);
            }
        };
        let step = if started.writes.batches.is_empty() || started.writes.early {
            // Nothing to wait for: no moves, or moves claimable at once.
            let r = g.gc_step_done(started, Vec::new());
            // Clients whose batches were applied with the moves.
            self.applied.notify_all();
            r
        } else {
            let flush = g.gc_flush();
            drop(g);
            poller.doorbell();
            let pages = started.writes.wait(flush.as_ref());
            g = self.inner.lock();
            let r = g.gc_step_done(started, pages);
            // Clients whose batches were applied behind the moves.
            self.applied.notify_all();
            r
        };
        let (done, release) = match &step {
            Ok((GcStep::Idle, _)) => {
                g.maint.gc_idle = true;
                (true, false)
            }
            Ok((_, release)) => (!g.gc_due(), *release),
            Err(_) => (true, false),
        };
        let r = if done || release {
            self.quiesce(&mut g);
            let released = g.release_reclaimed();
            step.and(released).map(|_| ())
        } else {
            step.map(|_| ())
        };
        drop(g);
        // The moves and the next window's read-ahead were queued under the lock.
        poller.doorbell();
        r
    }

    /// Waits until the pipeline has room for `pages` more pages (or is empty); while waiting,
    /// no new batch enters it (writers see `quiescers` and wait).
    fn wait_for_room(&self, g: &mut MutexGuard<'_, Inner>, pages: u64) {
        g.quiescers += 1;
        while !g.pipeline.is_empty() && g.pipeline_pages + pages > PIPELINE_PAGES {
            self.wait_for_batches(g);
        }
        g.quiescers -= 1;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// With the maintenance lock held (the thread cannot flush), a writer fills the active
    /// memtable, rotates it, fills the next ones until every frozen slot is taken and must
    /// then stall (counted as a memtable stall) rather than flush itself; once maintenance may run again, the writer goes on
    /// and every write is there.
    #[test]
    fn a_writer_stalls_on_a_full_memtable_until_maintenance_flushes() {
        let dev = crate::engine::test_device::small_ram_device(16);
        let cfg = EngineConfig {
            memtable_bytes: 2 << 10,
            ..EngineConfig::default()
        };
        let db = Arc::new(Engine::open(dev, cfg).unwrap());
        let key = |i: u32| format!("key{i:04}").into_bytes();
        let hold = db.core.maint.lock();
        let writer = {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    db.put(&key(i), &[i as u8; 100]).unwrap();
                }
            })
        };
        let since = std::time::Instant::now();
        while db.stats().write_stalls.memtable == 0 {
            assert!(
                since.elapsed() < Duration::from_secs(20),
                "the writer never stalled: {:#?}",
                db.stats()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Stalled, not done, and nothing flushed while the lock is held.
        std::thread::sleep(Duration::from_millis(50));
        assert!(!writer.is_finished());
        assert_eq!(db.stats().flushes, 0);
        assert_eq!(
            db.stats().frozen_memtables,
            crate::config::DEFAULT_MAX_FROZEN_MEMTABLES as u64
        );
        drop(hold);
        writer.join().unwrap();
        db.settle().unwrap();
        let s = db.stats();
        assert!(s.flushes > 1, "{s:#?}");
        assert!(s.write_stalls.stalled_micros > 0, "{s:#?}");
        for i in 0..200u32 {
            assert_eq!(
                db.get(&key(i)).unwrap(),
                Some(vec![i as u8; 100]),
                "key {i}"
            );
        }
    }

    /// With the maintenance lock held, a writer rotates full memtables out without a stall
    /// until `max_frozen_memtables` wait (readers see every version in them meanwhile,
    /// newest first, and the writer side's lookups find the newest and the oldest unflushed
    /// version by generation); once maintenance runs, they are flushed oldest first, so a key
    /// overwritten across generations keeps its newest value in the runs, in memory and
    /// after a reopen.
    #[test]
    fn frozen_memtables_wait_newest_first_and_flush_oldest_first() {
        let dev = crate::engine::test_device::small_ram_device(16);
        let cfg = EngineConfig {
            memtable_bytes: 2 << 10,
            max_frozen_memtables: 3,
            ..EngineConfig::default()
        };
        let db = Engine::open(dev.clone(), cfg.clone()).unwrap();
        // 32 keys written in turn (a memtable holds about a dozen): each generation
        // overwrites keys of the older ones, and none holds every key.
        let key = |i: u32| format!("key{:04}", i % 32).into_bytes();
        let value = |i: u32| vec![(i % 251) as u8; 100];
        // Each key's newest value among the first `n` writes.
        let newest = |db: &Engine, n: u32| {
            for i in n.saturating_sub(32)..n {
                assert_eq!(db.get(&key(i)).unwrap(), Some(value(i)), "write {i} of {n}");
            }
        };
        let hold = db.core.maint.lock();
        let mut n = 0u32;
        while db.stats().frozen_memtables < 3 {
            assert!(n < 1000, "{:#?}", db.stats());
            db.put(&key(n), &value(n)).unwrap();
            n += 1;
        }
        let s = db.stats();
        assert_eq!(s.write_stalls.memtable, 0, "{s:#?}");
        assert_eq!(s.flushes, 0, "{s:#?}");
        assert!(n > 36, "{n} writes");
        newest(&db, n);
        // The writer side's lookups (garbage collection's liveness, retimes, expiry drops):
        // the newest version is the youngest generation's that has one, the oldest
        // unflushed one the oldest generation's.
        {
            let mut g = db.core.inner.lock();
            for i in n.saturating_sub(32)..n {
                let k = key(i);
                let gens: Vec<Arc<MemTable>> = g
                    .frozen
                    .iter()
                    .map(|f| f.mem.clone())
                    .chain(std::iter::once(g.mem.clone()))
                    .collect();
                let newest = gens.iter().rev().find_map(|m| m.latest(&k));
                let oldest = gens.iter().find_map(|m| m.oldest(&k));
                assert!(newest.is_some(), "write {i}");
                // Written before at `i - 32`, in an older generation.
                assert!(i < 32 || newest != oldest, "write {i}");
                assert_eq!(g.lookup(&k), newest, "write {i}");
                assert_eq!(g.oldest_unflushed(&k), oldest, "write {i}");
            }
        }
        drop(hold);
        db.settle().unwrap();
        let s = db.stats();
        assert!(s.flushes >= 3, "{s:#?}");
        assert_eq!(s.frozen_memtables, 0, "{s:#?}");
        newest(&db, n);
        db.flush().unwrap();
        newest(&db, n);
        drop(db);
        let db = Engine::open(dev, cfg).unwrap();
        newest(&db, n);
    }
}
