//! The engine's device poller: one thread that reaps every completion of the commands the
//! engine submits without waiting (value-log batches, keytable and recovery I/O) and hands
//! each to the callback registered for its tag.
//!
//! With completions delivered by a thread of their own, a writer can submit its batch under
//! the engine lock and wait for it outside, so several batches are on the device at once
//! (the paper's device-poller thread). Reads that wait in place use the device's awaited
//! commands ([`AppendDevice::execute_many`]) and never pass through here.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hwftl_sim::{AppendDevice, Command, Completion, DeviceError, Lba, PageBuf, Rejected, Wait};
use parking_lot::{Condvar, Mutex};

/// Called with a command's completion, or with the error that lost it.
pub(crate) type OnDone = Box<dyn FnOnce(Result<Completion, DeviceError>) + Send>;

/// Completions reaped per turn.
const REAP_BATCH: usize = 64;
/// How long the poller sleeps when nothing is in flight (a submission wakes it sooner). Its
/// next wait hands the device whatever pages were queued and not rung for meanwhile, so a
/// caller holding doorbells back ([`crate::Doorbell`]) delays pages at most this long.
pub const POLLER_IDLE_PARK: Duration = Duration::from_millis(20);
/// Pause before deferred reads are offered again when nothing completed meanwhile.
const DEFERRED_RETRY: Duration = Duration::from_micros(50);
/// Back-off after the device's completion machinery failed (e.g. powered off).
const ERROR_BACKOFF: Duration = Duration::from_millis(1);

/// Callbacks of commands in flight, by tag. A tag is reused only after its command was
/// reaped, and a command is registered under the same lock as its submission, so the
/// callbacks of one tag complete in the order they were registered: a queue per tag keeps a
/// reaped completion from reaching the callback of the next command that got the same tag.
///
/// `deferred` holds page reads the device refused for want of a free tag, from callers that
/// must not wait (see [`Poller::defer_read`]): the poller offers them again, in order, each
/// time it has reaped completions (which free tags).
#[derive(Default)]
struct Waiters {
    by_tag: HashMap<u32, VecDeque<OnDone>>,
    deferred: VecDeque<(Lba, PageBuf, OnDone)>,
}

impl Waiters {
    fn take(&mut self, tag: u32) -> Option<OnDone> {
        let q = self.by_tag.get_mut(&tag)?;
        let f = q.pop_front();
        if q.is_empty() {
            self.by_tag.remove(&tag);
        }
        f
    }

    fn drain(&mut self) -> Vec<OnDone> {
        let deferred = self.deferred.drain(..).map(|(_, _, f)| f);
        let mut all: Vec<OnDone> = deferred.collect();
        all.extend(self.by_tag.drain().flat_map(|(_, q)| q));
        all
    }

    /// Offers the deferred reads to `dev` again, in order, until it refuses one for want
    /// of a tag (that one and the rest stay deferred). Returns how many went to the device
    /// and the callbacks of reads refused for another reason (to be failed with it).
    fn resubmit_deferred(&mut self, dev: &dyn AppendDevice) -> (usize, Vec<(OnDone, DeviceError)>) {
        let mut queued = 0;
        let mut failed = Vec::new();
        while let Some((lba, buf, f)) = self.deferred.pop_front() {
            match dev.queue_many(vec![Command::Read { lba, buf }]).pop() {
                Some(Ok(tag)) => {
                    self.by_tag.entry(tag.0).or_default().push_back(f);
                    queued += 1;
                }
                Some(Err(r)) if matches!(r.error, DeviceError::QueueFull { .. }) => {
                    let buf = r.buf.unwrap_or_else(PageBuf::zeroed);
                    self.deferred.push_front((lba, buf, f));
                    break;
                }
                Some(Err(r)) => failed.push((f, r.error)),
                None => failed.push((f, DeviceError::PoweredOff)),
            }
        }
        (queued, failed)
    }
}

struct Shared {
    dev: Arc<dyn AppendDevice>,
    waiters: Mutex<Waiters>,
    stop: AtomicBool,
}

/// The completion of a group of commands (a batch's pages): each command's callback counts
/// down, and the waiter wakes once, when the last one is in — not once per page.
#[derive(Default)]
pub(crate) struct GroupDone {
    state: Mutex<GroupState>,
    all_in: Condvar,
    /// Runs once, on the thread that finished the last command, after the waiters were
    /// woken (see [`GroupDone::with_hook`]).
    hook: Option<GroupHook>,
}

/// What a [`GroupDone`] calls when its last command is in, told whether one of them
/// failed: short, and never the engine lock.
pub(crate) type GroupHook = Arc<dyn Fn(bool) + Send + Sync>;

#[derive(Default)]
struct GroupState {
    remaining: usize,
    error: Option<DeviceError>,
}

impl GroupDone {
    /// A group expecting `n` completions.
    pub(crate) fn new(n: usize) -> Arc<GroupDone> {
        Self::build(n, None)
    }

    /// A group expecting `n` completions that calls `hook` when the last is in (on the
    /// poller thread, or on the submitter's for a command refused at submission; with
    /// `n == 0`, never). The hook must be short and must not take the engine lock.
    pub(crate) fn with_hook(n: usize, hook: GroupHook) -> Arc<GroupDone> {
        Self::build(n, Some(hook))
    }

    fn build(n: usize, hook: Option<GroupHook>) -> Arc<GroupDone> {
        Arc::new(GroupDone {
            state: Mutex::new(GroupState {
                remaining: n,
                error: None,
            }),
            all_in: Condvar::new(),
            hook,
        })
    }

    /// Counts one command as finished, with its outcome (the first error is kept).
    pub(crate) fn finish_one(&self, result: Result<(), DeviceError>) {
        let (last, failed) = {
            let mut s = self.state.lock();
            if let Err(e) = result {
                s.error.get_or_insert(e);
            }
            let was = s.remaining;
            s.remaining = s.remaining.saturating_sub(1);
            if s.remaining == 0 {
                self.all_in.notify_all();
            }
            (was == 1, s.error.is_some())
        };
        if let (true, Some(hook)) = (last, &self.hook) {
            hook(failed);
        }
    }

    /// Without waiting: `None` while a command is still out; then the first error, if any
    /// (reported once, as [`GroupDone::wait`] does).
    pub(crate) fn try_take(&self) -> Option<Result<(), DeviceError>> {
        let mut s = self.state.lock();
        if s.remaining > 0 {
            return None;
        }
        Some(s.error.take().map_or(Ok(()), Err))
    }

    /// The callback for one command of the group.
    pub(crate) fn callback(self: &Arc<Self>) -> OnDone {
        let g = self.clone();
        Box::new(move |r| g.finish_one(r.and_then(|c| c.result)))
    }

    /// Waits for every command; the first error, if any (reported to one waiter).
    pub(crate) fn wait(&self) -> Result<(), DeviceError> {
        let mut s = self.state.lock();
        while s.remaining > 0 {
            self.all_in.wait(&mut s);
        }
        s.error.take().map_or(Ok(()), Err)
    }
}

/// The poller thread and its registry of callbacks.
pub(crate) struct Poller {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// One page read per LBA, each into a fresh buffer (for [`Poller::run`]).
pub(crate) fn page_reads(lbas: &[Lba]) -> Vec<Command> {
    lbas.iter()
        .map(|&lba| Command::Read {
            lba,
            buf: PageBuf::for_read(),
        })
        .collect()
}

impl Poller {
    /// Starts the poller thread for `dev`.
    ///
    /// # Errors
    /// When the thread cannot be spawned.
    pub(crate) fn start(dev: Arc<dyn AppendDevice>) -> std::io::Result<Poller> {
        let shared = Arc::new(Shared {
            dev,
            waiters: Mutex::new(Waiters::default()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("lsm-poller".into())
            .spawn(move || poll_loop(&s))?;
        Ok(Poller {
            shared,
            thread: Some(thread),
        })
    }

    /// Submits `cmd`; `on_done` runs on the poller thread with its completion. Callbacks must be short and must not take the engine
    /// lock.
    ///
    /// # Errors
    /// The device's refusal; `on_done` is then not called.
    pub(crate) fn submit(&self, cmd: Command, on_done: OnDone) -> Result<(), Rejected> {
        {
            // Submission and registration are one step (see `Waiters`).
            let mut w = self.shared.waiters.lock();
            let tag = self.shared.dev.submit(cmd)?;
            w.by_tag.entry(tag.0).or_default().push_back(on_done);
        }
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        Ok(())
    }

    /// Submits `cmds` in order with one doorbell (one kernel entry on the io_uring
    /// backend) and registers `on_done[i]` for the command `i`. Returns the device's answer
    /// per command; a refused command's callback is not called (its buffer comes back in
    /// the `Rejected`). Callbacks must be short and must not take the engine lock.
    pub(crate) fn submit_many(
        &self,
        cmds: Vec<Command>,
        on_done: Vec<OnDone>,
    ) -> Vec<Result<(), Rejected>> {
        let out = self.queue_many(cmds, on_done);
        self.doorbell();
        out
    }

    /// As [`Poller::submit_many`], but the commands stay in the device's submission queue
    /// until [`Poller::doorbell`] (anyone's): the write path queues a batch's pages under
    /// the engine lock, which keeps them in write-pointer order, and rings the doorbell, a
    /// system call (a VM exit on a virtio disk), after releasing it.
    pub(crate) fn queue_many(
        &self,
        cmds: Vec<Command>,
        on_done: Vec<OnDone>,
    ) -> Vec<Result<(), Rejected>> {
        // Submission and registration are one step (see `Waiters`).
        let mut w = self.shared.waiters.lock();
        let tags = self.shared.dev.queue_many(cmds);
        tags.into_iter()
            .zip(on_done)
            .map(|(t, f)| {
                t.map(|tag| {
                    w.by_tag.entry(tag.0).or_default().push_back(f);
                })
            })
            .collect()
    }

    /// A page read the device refused for want of a free command tag, from a caller that
    /// must not wait: the poller submits it once completions have freed tags, and `on_done`
    /// runs with its completion as for [`Poller::submit`] (or with the error that lost it).
    pub(crate) fn defer_read(&self, lba: Lba, buf: PageBuf, on_done: OnDone) {
        self.shared
            .waiters
            .lock()
            .deferred
            .push_back((lba, buf, on_done));
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// The device's free command tags, if it says ([`AppendDevice::free_tags`]).
    pub(crate) fn free_tags(&self) -> Option<usize> {
        self.shared.dev.free_tags()
    }

    /// Hands every queued command to the device and wakes the poller to collect them.
    pub(crate) fn doorbell(&self) {
        self.shared.dev.doorbell();
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// As [`Poller::doorbell`], but while the device still runs a command it was handed
    /// before, the queued ones go down with the poller's next turn, which that command's
    /// completion starts ([`AppendDevice::doorbell_if_idle`]): for commands nobody waits
    /// on at once (a batch acknowledged from DRAM), so that batches queued while the device
    /// is busy share one submission (on a virtual disk, one VM exit) instead of one each.
    pub(crate) fn doorbell_if_idle(&self) {
        self.shared.dev.doorbell_if_idle();
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Queues `cmds` and returns at once; [`InFlight::wait`] collects their completions in
    /// order (a command refused at submission comes back as its `Err`). The commands stay in
    /// the device's submission queue until a [`Poller::doorbell`] (anyone's): garbage collection queues its read-ahead under the
    /// engine lock and rings once it has released it, so the system call (which, on the file
    /// backend, pins every buffer and builds every bio) does not hold up writers.
    pub(crate) fn queue_all(&self, cmds: Vec<Command>) -> InFlight {
        let n = cmds.len();
        let (tx, rx) = mpsc::channel();
        let callbacks: Vec<OnDone> = (0..n)
            .map(|i| {
                let tx = tx.clone();
                Box::new(move |r| drop(tx.send((i, r)))) as OnDone
            })
            .collect();
        let mut out: Vec<Option<Result<Completion, DeviceError>>> = (0..n).map(|_| None).collect();
        let mut pending = 0;
        for (i, r) in self.queue_many(cmds, callbacks).into_iter().enumerate() {
            match r {
                Ok(()) => pending += 1,
                Err(rej) => out[i] = Some(Err(rej.error)),
            }
        }
        InFlight { rx, out, pending }
    }

    /// Runs `cmds` with at most `window` in flight and returns their completions in order.
    /// A command refused because every device tag is taken (by other users' reads, say) is
    /// offered again once one of these commands finishes, or after a pause, for up to
    /// [`PATIENCE`]. Commands refused otherwise come back as `Err` in their place; so do
    /// commands lost with the device.
    pub(crate) fn run(
        &self,
        cmds: Vec<Command>,
        window: usize,
    ) -> Vec<Result<Completion, DeviceError>> {
        let n = cmds.len();
        let mut out: Vec<Option<Result<Completion, DeviceError>>> = (0..n).map(|_| None).collect();
        let (tx, rx) = mpsc::channel();
        let mut in_flight = 0usize;
        let collect_one = |out: &mut Vec<Option<_>>, in_flight: &mut usize| match rx.recv() {
            Ok((j, r)) => {
                out[j] = Some(r);
                *in_flight -= 1;
                true
            }
            Err(_) => false,
        };
        // Once one command ran out of patience, the rest do not wait again.
        let mut gave_up = false;
        for (i, cmd) in cmds.into_iter().enumerate() {
            let rebuild = rebuilder(&cmd);
            let since = std::time::Instant::now();
            let mut cmd = cmd;
            loop {
                while in_flight >= window.max(1) {
                    if !collect_one(&mut out, &mut in_flight) {
                        break;
                    }
                }
                let tx = tx.clone();
                match self.submit(cmd, Box::new(move |r| drop(tx.send((i, r))))) {
                    Ok(()) => in_flight += 1,
                    Err(r)
                        if matches!(r.error, DeviceError::QueueFull { .. })
                            && !gave_up
                            && since.elapsed() < PATIENCE =>
                    {
                        let error = r.error;
                        let Some(again) = rebuild(r.buf) else {
                            out[i] = Some(Err(error));
                            break;
                        };
                        cmd = again;
                        // One of ours finishing frees a tag; with none in flight, wait for
                        // other users' commands to finish.
                        if in_flight == 0 || !collect_one(&mut out, &mut in_flight) {
                            std::thread::sleep(QUEUE_FULL_BACKOFF);
                        }
                        continue;
                    }
                    Err(r) => {
                        gave_up |= matches!(r.error, DeviceError::QueueFull { .. });
                        out[i] = Some(Err(r.error));
                    }
                }
                break;
            }
        }
        drop(tx);
        while in_flight > 0 {
            match rx.recv() {
                Ok((j, r)) => {
                    out[j] = Some(r);
                    in_flight -= 1;
                }
                Err(_) => break,
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or(Err(DeviceError::PoweredOff)))
            .collect()
    }
}

/// Commands queued by [`Poller::queue_all`] whose completions are still to be collected.
pub(crate) struct InFlight {
    rx: mpsc::Receiver<(usize, Result<Completion, DeviceError>)>,
    out: Vec<Option<Result<Completion, DeviceError>>>,
    pending: usize,
}

impl InFlight {
    /// Waits for every command and returns the completions in command order (a command
    /// lost with the device is `PoweredOff`).
    pub(crate) fn wait(mut self) -> Vec<Result<Completion, DeviceError>> {
        while self.pending > 0 {
            match self.rx.recv() {
                Ok((i, r)) => {
                    self.out[i] = Some(r);
                    self.pending -= 1;
                }
                Err(_) => break,
            }
        }
        self.out
            .into_iter()
            .map(|r| r.unwrap_or(Err(DeviceError::PoweredOff)))
            .collect()
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // A completion's callback may drop the last handle on the engine, and with it
            // this poller, on the poller thread itself: that thread then sees `stop` and
            // ends after the callback, without being joined.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        // Nothing reaps any more: whoever still waits learns the command is lost.
        let lost = self.shared.waiters.lock().drain();
        for f in lost {
            f(Err(DeviceError::PoweredOff));
        }
    }
}

fn poll_loop(s: &Shared) {
    let mut reaped = Vec::with_capacity(REAP_BATCH);
    while !s.stop.load(Ordering::Acquire) {
        reaped.clear();
        let result = s.dev.reap(&mut reaped, REAP_BATCH, Wait::Block);
        let mut ready: Vec<(OnDone, Result<Completion, DeviceError>)> = Vec::new();
        let (idle, resubmitted, deferred) = {
            let mut w = s.waiters.lock();
            for c in reaped.drain(..) {
                match w.take(c.tag.0) {
                    Some(f) => ready.push((f, Ok(c))),
                    // Every command goes through `submit`; a stray completion has no owner.
                    None => tracing::warn!(tag = c.tag.0, "completion without a waiter dropped"),
                }
            }
            let mut resubmitted = 0;
            if result.is_err() {
                // The device lost its commands (power cut): fail every waiter.
                for f in w.drain() {
                    ready.push((f, Err(DeviceError::PoweredOff)));
                }
            } else if !w.deferred.is_empty() {
                // Completions just freed tags (or a pause passed): deferred reads go now.
                let (queued, failed) = w.resubmit_deferred(s.dev.as_ref());
                resubmitted = queued;
                ready.extend(failed.into_iter().map(|(f, e)| (f, Err(e))));
            }
            (matches!(result, Ok(0)), resubmitted, !w.deferred.is_empty())
        };
        if resubmitted > 0 {
            s.dev.doorbell();
        }
        for (f, r) in ready {
            f(r);
        }
        if result.is_err() {
            std::thread::sleep(ERROR_BACKOFF);
        } else if idle && deferred {
            // Tags are held by commands someone queued and has not rung for yet.
            std::thread::sleep(DEFERRED_RETRY);
        } else if idle && resubmitted == 0 {
            std::thread::park_timeout(POLLER_IDLE_PARK);
        }
    }
}

/// How long a synchronous command waits for a free device tag before it gives up.
const PATIENCE: Duration = Duration::from_secs(10);

/// `dev.execute(cmd)`, waiting while the device's tag pool is full (other users' reads and
/// writes hold every tag) instead of failing at once; any other refusal is returned.
///
/// # Errors
/// The refusal (`QueueFull` after [`PATIENCE`], or another reason).
pub(crate) fn execute_patiently(
    dev: &dyn AppendDevice,
    cmd: Command,
) -> Result<Completion, Rejected> {
    let rebuild = rebuilder(&cmd);
    let since = std::time::Instant::now();
    let mut cmd = cmd;
    loop {
        match dev.execute(cmd) {
            Err(r)
                if matches!(r.error, DeviceError::QueueFull { .. })
                    && since.elapsed() < PATIENCE =>
            {
                let Some(again) = rebuild(r.buf) else {
                    return Err(Rejected {
                        error: r.error,
                        buf: None,
                    });
                };
                cmd = again;
                std::thread::sleep(QUEUE_FULL_BACKOFF);
            }
            other => return other,
        }
    }
}

/// Pause before a command refused for want of a free tag is offered again.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_micros(50);

/// Rebuilds `cmd` around the buffer a refusal handed back (`None` when a command that
/// carries a buffer got none back).
type Rebuild = Box<dyn Fn(Option<hwftl_sim::PageBuf>) -> Option<Command> + Send>;

fn rebuilder(cmd: &Command) -> Rebuild {
    match cmd {
        Command::Read { lba, .. } => {
            let lba = *lba;
            Box::new(move |b| b.map(|buf| Command::Read { lba, buf }))
        }
        Command::Write { lba, .. } => {
            let lba = *lba;
            Box::new(move |b| b.map(|buf| Command::Write { lba, buf }))
        }
        Command::Append { segment, .. } => {
            let segment = *segment;
            Box::new(move |b| b.map(|buf| Command::Append { segment, buf }))
        }
        Command::Trim { segment } => {
            let segment = *segment;
            Box::new(move |_| Some(Command::Trim { segment }))
        }
        Command::Flush => Box::new(|_| Some(Command::Flush)),
    }
}

/// Coalesces device flushes: a caller needs a flush that *starts* after it arrived (its
/// writes have completed by then, so that flush covers them). While one flush is running,
/// every caller that arrives waits for it to end and then shares the next one, so N
/// concurrent groups cost about two flushes (fdatasync on the file backend), not N.
#[derive(Debug, Default)]
pub(crate) struct FlushGate {
    state: Mutex<GateState>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    /// Flushes started so far (the epoch of the latest).
    started: u64,
    /// Flushes finished so far (they finish in order: one runs at a time).
    finished: u64,
    /// A flush is running.
    running: bool,
    /// Recent flushes that failed: epoch and error.
    failed: FailureMemory<SharedFlushError, GATE_REMEMBERED_FAILURES>,
}

/// The failures of numbered operations (device flushes, numbered from 1 in the order they
/// end), the newest `CAP` of them, and how far back failures have been forgotten: an
/// operation not remembered as failed is known to have succeeded only while it is newer
/// than every failure forgotten.
#[derive(Debug)]
pub(crate) struct FailureMemory<E, const CAP: usize> {
    failed: VecDeque<(u64, E)>,
    /// The newest failure dropped from `failed`.
    forgotten: u64,
}

impl<E, const CAP: usize> Default for FailureMemory<E, CAP> {
    fn default() -> Self {
        FailureMemory {
            failed: VecDeque::new(),
            forgotten: 0,
        }
    }
}

/// What a [`FailureMemory`] knows of one ended operation.
#[derive(Debug)]
pub(crate) enum Recalled<'a, E> {
    /// It succeeded.
    Succeeded,
    /// It failed with this.
    Failed(&'a E),
    /// It ended so long ago that a failure of it may have been forgotten.
    Forgotten,
}

impl<E, const CAP: usize> FailureMemory<E, CAP> {
    /// Notes that operation `number` failed (numbers come in increasing order).
    pub(crate) fn record(&mut self, number: u64, failure: E) {
        self.failed.push_back((number, failure));
        while self.failed.len() > CAP {
            if let Some((n, _)) = self.failed.pop_front() {
                self.forgotten = n;
            }
        }
    }

    /// What is known of operation `number`, which has ended.
    pub(crate) fn recall(&self, number: u64) -> Recalled<'_, E> {
        if number <= self.forgotten {
            return Recalled::Forgotten;
        }
        match self.failed.iter().find(|(n, _)| *n == number) {
            Some((_, e)) => Recalled::Failed(e),
            None => Recalled::Succeeded,
        }
    }
}

/// Failed flushes a [`FlushGate`] remembers for the callers they covered. A caller
/// descheduled while more failed than this finds its flush's outcome forgotten and waits
/// for a new flush instead, never taking the forgotten one for a success.
const GATE_REMEMBERED_FAILURES: usize = 64;

/// A failed flush's error as every caller it covered gets it: a power loss stays
/// `PoweredOff` (so each caller knows the device is gone, not that some I/O failed), any
/// other error is passed on as its text.
#[derive(Debug)]
enum SharedFlushError {
    PoweredOff,
    Other(String),
}

impl SharedFlushError {
    fn of(e: &DeviceError) -> Self {
        match e {
            DeviceError::PoweredOff => SharedFlushError::PoweredOff,
            other => SharedFlushError::Other(other.to_string()),
        }
    }

    fn to_error(&self) -> DeviceError {
        match self {
            SharedFlushError::PoweredOff => DeviceError::PoweredOff,
            SharedFlushError::Other(text) => DeviceError::Io {
                context: "the device flush covering this write failed".into(),
                source: std::sync::Arc::new(std::io::Error::other(text.clone())),
            },
        }
    }
}

/// What a caller waiting at a [`FlushGate`] for flush `need` learns from the gate's state.
#[derive(Debug)]
enum GateOutcome {
    /// That flush has not ended yet.
    Running,
    /// It ended, with this outcome.
    Ended(Result<(), DeviceError>),
    /// It ended, but whether it failed is no longer remembered.
    Forgotten,
}

impl GateState {
    fn outcome(&self, need: u64) -> GateOutcome {
        if self.finished < need {
            return GateOutcome::Running;
        }
        match self.failed.recall(need) {
            Recalled::Succeeded => GateOutcome::Ended(Ok(())),
            Recalled::Failed(e) => GateOutcome::Ended(Err(e.to_error())),
            Recalled::Forgotten => GateOutcome::Forgotten,
        }
    }
}

impl FlushGate {
    /// Returns once a flush that started after this call began has finished; runs it when
    /// no flush is running. `flush` performs one device flush.
    ///
    /// # Errors
    /// The error of the flush that covered this caller.
    pub(crate) fn flush(
        &self,
        flush: impl Fn() -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let mut s = self.state.lock();
        let mut need = s.started + 1;
        loop {
            match s.outcome(need) {
                GateOutcome::Ended(r) => return r,
                // Whether the flush that covered this caller failed is forgotten: any flush
                // that starts from now on covers it as well.
                GateOutcome::Forgotten => need = s.started + 1,
                GateOutcome::Running => {}
            }
            if !s.running {
                s.running = true;
                s.started += 1;
                let epoch = s.started;
                drop(s);
                let r = flush();
                s = self.state.lock();
                s.running = false;
                s.finished = epoch;
                if let Err(e) = &r {
                    s.failed.record(epoch, SharedFlushError::of(e));
                }
                self.done.notify_all();
                if epoch >= need {
                    // It started after this caller arrived: it covers it.
                    return r;
                }
                continue;
            }
            self.done.wait(&mut s);
        }
    }

    /// Flushes actually issued.
    pub(crate) fn issued(&self) -> u64 {
        self.state.lock().finished
    }
}

#[cfg(test)]
mod gate_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn concurrent_callers_share_flushes() {
        let gate = Arc::new(FlushGate::default());
        let calls = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gate, calls) = (gate.clone(), calls.clone());
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        gate.flush(|| {
                            calls.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(2));
                            Ok(())
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = calls.load(Ordering::SeqCst);
        assert_eq!(n, gate.issued());
        // 160 requests; serialised they would be 160 flushes.
        assert!(n < 120, "{n} flushes for 160 requests");
    }

    #[test]
    fn a_failed_flush_fails_the_callers_it_covered_only() {
        let gate = FlushGate::default();
        let r = gate.flush(|| Err(DeviceError::PoweredOff));
        assert!(matches!(r, Err(DeviceError::PoweredOff)));
        // Callers covered by a failed flush all see it fail.
        let gate = Arc::new(FlushGate::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    gate.flush(|| {
                        std::thread::sleep(Duration::from_millis(5));
                        Err(DeviceError::PoweredOff)
                    })
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().unwrap().is_err());
        }
        assert!(gate.flush(|| Ok(())).is_ok(), "a later flush starts afresh");
    }

    /// A caller whose flush ended so long ago that its failure may have been dropped from
    /// the gate's memory is sent to a new flush, never told the old one succeeded.
    #[test]
    fn a_forgotten_failure_is_never_taken_for_success() {
        let gate = FlushGate::default();
        for _ in 0..=GATE_REMEMBERED_FAILURES {
            assert!(gate.flush(|| Err(DeviceError::PoweredOff)).is_err());
        }
        let s = gate.state.lock();
        assert_eq!(s.failed.failed.len(), GATE_REMEMBERED_FAILURES);
        assert_eq!(s.failed.forgotten, 1, "the first failure was dropped");
        assert!(matches!(s.outcome(1), GateOutcome::Forgotten));
        assert!(matches!(s.outcome(2), GateOutcome::Ended(Err(_))));
        let last = s.finished;
        assert!(matches!(s.outcome(last + 1), GateOutcome::Running));
        drop(s);
        // After a success, its epoch reads as one.
        assert!(gate.flush(|| Ok(())).is_ok());
        let s = gate.state.lock();
        assert!(matches!(s.outcome(last + 1), GateOutcome::Ended(Ok(()))));
    }
}
