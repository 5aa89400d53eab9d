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

use hwftl_sim::{AppendDevice, Command, Completion, DeviceError, Rejected, Wait};
use parking_lot::Mutex;

/// Called with a command's completion, or with the error that lost it.
pub(crate) type OnDone = Box<dyn FnOnce(Result<Completion, DeviceError>) + Send>;

/// Completions reaped per turn.
const REAP_BATCH: usize = 64;
/// How long the poller sleeps when nothing is in flight (a submission wakes it sooner).
const IDLE_PARK: Duration = Duration::from_millis(20);
/// Back-off after the device's completion machinery failed (e.g. powered off).
const ERROR_BACKOFF: Duration = Duration::from_millis(1);

/// Callbacks of commands in flight, by tag. A tag is reused only after its command was
/// reaped, and a command is registered under the same lock as its submission, so the
/// callbacks of one tag complete in the order they were registered: a queue per tag keeps a
/// reaped completion from reaching the callback of the next command that got the same tag.
#[derive(Default)]
struct Waiters {
    by_tag: HashMap<u32, VecDeque<OnDone>>,
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
        self.by_tag.drain().flat_map(|(_, q)| q).collect()
    }
}

struct Shared {
    dev: Arc<dyn AppendDevice>,
    waiters: Mutex<Waiters>,
    stop: AtomicBool,
}

/// The poller thread and its registry of callbacks.
pub(crate) struct Poller {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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

    /// Runs `cmds` with at most `window` in flight and returns their completions in order.
    /// Commands refused at submission come back as `Err` in their place; so do commands lost
    /// with the device.
    pub(crate) fn run(
        &self,
        cmds: Vec<Command>,
        window: usize,
    ) -> Vec<Result<Completion, DeviceError>> {
        let n = cmds.len();
        let mut out: Vec<Option<Result<Completion, DeviceError>>> = (0..n).map(|_| None).collect();
        let (tx, rx) = mpsc::channel();
        let mut in_flight = 0usize;
        for (i, cmd) in cmds.into_iter().enumerate() {
            while in_flight >= window.max(1) {
                match rx.recv() {
                    Ok((j, r)) => {
                        out[j] = Some(r);
                        in_flight -= 1;
                    }
                    Err(_) => break,
                }
            }
            let tx = tx.clone();
            match self.submit(cmd, Box::new(move |r| drop(tx.send((i, r))))) {
                Ok(()) => in_flight += 1,
                Err(r) => out[i] = Some(Err(r.error)),
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

impl Drop for Poller {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
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
        let idle = {
            let mut w = s.waiters.lock();
            for c in reaped.drain(..) {
                match w.take(c.tag.0) {
                    Some(f) => ready.push((f, Ok(c))),
                    // Every command goes through `submit`; a stray completion has no owner.
                    None => tracing::warn!(tag = c.tag.0, "completion without a waiter dropped"),
                }
            }
            if result.is_err() {
                // The device lost its commands (power cut): fail every waiter.
                for f in w.drain() {
                    ready.push((f, Err(DeviceError::PoweredOff)));
                }
            }
            matches!(result, Ok(0))
        };
        for (f, r) in ready {
            f(r);
        }
        if result.is_err() {
            std::thread::sleep(ERROR_BACKOFF);
        } else if idle {
            std::thread::park_timeout(IDLE_PARK);
        }
    }
}
