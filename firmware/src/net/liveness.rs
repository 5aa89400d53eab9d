//! Liveness of the network thread: what keeps one client, one worker or the file
//! descriptor limit from stopping the loop, and what closes clients that went away.
//!
//! - **Full worker queues**: a job whose queue is full stays in its connection (counted in
//!   flight, so nothing overtakes it) and the connection is not read; [`Net::housekeeping`]
//!   retries such jobs every [`STALL_RETRY`] in the order they stalled.
//! - **Accept back-off**: when `accept` fails for want of file descriptors or memory
//!   (EMFILE, ENFILE, ENOBUFS, ENOMEM), connected clients are served as usual and accepting
//!   is retried every [`ACCEPT_RETRY`] (the listener is edge-triggered: the clients waiting
//!   in the kernel's queue would raise no new event). Logged once per episode.
//! - **Idle `timeout`** (seconds, 0 = never, Redis's default): a client that sent and took
//!   nothing for that long, with nothing in flight, is closed by the sweep, which runs every
//!   [`SWEEP_EVERY`]. The sweep also applies the output soft limit to clients that have
//!   stopped reading, and frees the empty query buffers of clients idle for
//!   [`SHRINK_IDLE_AFTER`].
//! - **`tcp-keepalive`** (seconds, default 300 as Redis): SO_KEEPALIVE with the first probe
//!   after that long, then every third of it, three probes (Redis's `anetKeepAlive`), so a
//!   half-open peer is found and closed by the kernel.
//! - The drive-wide budget's paused clients are resumed here as it frees (see [`super::limits`]).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

use super::route::Route;
use super::{Net, POLL_TIMEOUT};
use crate::queue::TrySendError;

/// Idle clients are never closed by default (Redis's `timeout 0`).
pub const DEFAULT_TIMEOUT_SECS: u64 = 0;
/// TCP keepalive interval by default (Redis's `tcp-keepalive 300`).
pub const DEFAULT_TCP_KEEPALIVE_SECS: u32 = 300;
/// How often accepting is retried after running out of file descriptors.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// How often jobs stalled on a full worker queue are retried.
pub const STALL_RETRY: Duration = Duration::from_millis(1);
/// How often every client is visited (idle timeout, output soft limit, buffer shrink).
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// An idle client's empty query buffer is freed after this long.
pub const SHRINK_IDLE_AFTER: Duration = Duration::from_secs(2);

/// Idle timeout and keepalive settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LivenessConfig {
    /// `timeout`: close a client idle this many seconds (0: never).
    pub timeout_secs: u64,
    /// `tcp-keepalive`: keepalive interval in seconds (0: off).
    pub tcp_keepalive_secs: u32,
}

impl Default for LivenessConfig {
    fn default() -> Self {
        LivenessConfig {
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            tcp_keepalive_secs: DEFAULT_TCP_KEEPALIVE_SECS,
        }
    }
}

/// The loop's timers.
#[derive(Debug)]
pub(super) struct Liveness {
    /// Accepting failed for want of descriptors: retry at this time.
    accept_retry_at: Option<Instant>,
    /// When the next sweep runs.
    next_sweep: Instant,
    /// Connections holding a job their worker's queue had no room for, oldest first.
    stalled: Vec<u64>,
}

impl Liveness {
    pub(super) fn new(now: Instant) -> Liveness {
        Liveness {
            accept_retry_at: None,
            next_sweep: now + SWEEP_EVERY,
            stalled: Vec::new(),
        }
    }
}

/// Whether an accept error means the process or system is out of descriptors or memory
/// (worth retrying later rather than at the next event).
fn out_of_resources(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Turns TCP keepalive on with probes after `secs` idle, every `secs / 3`, three of them.
fn set_keepalive(stream: &TcpStream, secs: u32) -> std::io::Result<()> {
    let fd = stream.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| {
        // SAFETY: `fd` is an open socket owned by `stream` for the duration of the call, and
        // the option value is a valid c_int whose size is passed with it.
        let r = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                std::ptr::from_ref(&value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let idle = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, (idle / 3).max(1))?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)
}

impl Net {
    /// Sets TCP keepalive on a client socket (when configured).
    pub(super) fn keepalive(&self, stream: &TcpStream) {
        let secs = self.cfg.liveness.tcp_keepalive_secs;
        if secs > 0 {
            if let Err(e) = set_keepalive(stream, secs) {
                tracing::debug!("setting TCP keepalive failed: {e}");
            }
        }
    }

    /// `accept` failed: back off if it is for want of resources.
    pub(super) fn accept_failed(&mut self, e: &std::io::Error) {
        if !out_of_resources(e) {
            tracing::warn!("accept failed: {e}");
            return;
        }
        if self.live.accept_retry_at.is_none() {
            self.metrics.accept_backoffs.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                clients = self.conns.len(),
                "accepting clients failed: {e}; serving the connected clients and retrying every {} ms",
                ACCEPT_RETRY.as_millis()
            );
        }
        self.live.accept_retry_at = Some(self.now + ACCEPT_RETRY);
    }

    /// `accept` emptied the kernel's queue: a back-off episode, if any, is over.
    pub(super) fn accept_caught_up(&mut self) {
        if self.live.accept_retry_at.take().is_some() {
            tracing::info!(clients = self.conns.len(), "accepting clients again");
        }
    }

    /// A connection's job waits for room in its worker's queue.
    pub(super) fn stall(&mut self, id: u64) {
        self.metrics
            .worker_queue_full
            .fetch_add(1, Ordering::Relaxed);
        self.live.stalled.push(id);
    }

    /// How long the next poll may wait.
    pub(super) fn poll_timeout(&self) -> Duration {
        if self.inline.pending() {
            // Writes gathered in the last turn wait to run (`settle_inline_batch`).
            return Duration::ZERO;
        }
        let base = if !self.live.stalled.is_empty() || self.budget.paused() > 0 {
            STALL_RETRY
        } else {
            POLL_TIMEOUT
        };
        // A CLIENT PAUSE ends on time, and held doorbells are rung on time.
        [self.pause_deadline(), self.rings.deadline()]
            .into_iter()
            .flatten()
            .fold(base, |wait, t| {
                wait.min(t.saturating_duration_since(Instant::now()))
            })
    }

    /// Once per turn of the loop: retries stalled jobs, resumes clients the budget paused,
    /// retries accepting, and runs the sweep when due.
    pub(super) fn housekeeping(&mut self) {
        self.end_pause_if_due();
        if !self.live.stalled.is_empty() {
            self.retry_stalled();
        }
        if self.budget.paused() > 0 {
            self.resume_budget();
        }
        if self.live.accept_retry_at.is_some_and(|t| self.now >= t) {
            self.accept(false);
            self.accept(true);
        }
        if self.now >= self.live.next_sweep {
            self.live.next_sweep = self.now + SWEEP_EVERY;
            self.sweep();
        }
        self.metrics
            .buffered_request_bytes
            .store(self.budget.used() as u64, Ordering::Relaxed);
        self.metrics
            .clients_paused_budget
            .store(self.budget.paused() as u64, Ordering::Relaxed);
    }

    fn retry_stalled(&mut self) {
        let ids = std::mem::take(&mut self.live.stalled);
        let mut full_engine = false;
        let mut full_writer = false;
        let mut resumed = Vec::new();
        for id in ids {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            let Some((route, mut jobs)) = c.stalled.take() else {
                continue;
            };
            // Keep the order of stalls per queue: once one does not fit, later ones wait.
            let (tx, full) = match route {
                Route::Writer => (&self.writer_tx, &mut full_writer),
                _ => (&self.engine_tx, &mut full_engine),
            };
            while !*full {
                let Some(job) = jobs.pop_front() else {
                    break;
                };
                match tx.try_send(job) {
                    Ok(()) => {}
                    Err(TrySendError::Full(job)) => {
                        *full = true;
                        jobs.push_front(job);
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        // Shutting down: nothing will answer them.
                        let gone = jobs.len() + 1;
                        jobs.clear();
                        c.in_flight = c.in_flight.saturating_sub(gone);
                        for _ in 0..gone {
                            c.inflight_meta.pop_back();
                        }
                        c.closing = true;
                    }
                }
            }
            if jobs.is_empty() {
                resumed.push(id);
            } else {
                c.stalled = Some((route, jobs));
                self.live.stalled.push(id);
            }
        }
        for id in resumed {
            self.run_backlog(id);
            self.resume(id);
        }
    }

    fn resume_budget(&mut self) {
        loop {
            let now = self.now;
            let conns = &self.conns;
            let next = self.budget.next_to_resume(now, |id| {
                conns.get(&id).filter(|c| c.budget_paused).map(|c| c.framed)
            });
            let Some(id) = next else {
                return;
            };
            if let Some(c) = self.conns.get_mut(&id) {
                c.budget_paused = false;
            }
            self.on_readable(id, false);
            // Paused again at once: the budget is used up, wait for more replies.
            if self.conns.get(&id).is_some_and(|c| c.budget_paused) {
                return;
            }
        }
    }

    /// Visits every client: the idle timeout, the output soft limit of clients that stopped
    /// reading, and idle clients' empty query buffers.
    fn sweep(&mut self) {
        let now = self.now;
        let timeout = match self.cfg.liveness.timeout_secs {
            0 => None,
            s => Some(Duration::from_secs(s)),
        };
        let limits = self.cfg.buffers;
        let mut idle = Vec::new();
        let mut over = Vec::new();
        for (&id, c) in &mut self.conns {
            let quiet = now.saturating_duration_since(c.last_active);
            // Not idle: waiting for a worker, or not read because of a limit.
            let waiting = c.in_flight > 0 || !c.backlog.is_empty() || c.paused || c.budget_paused;
            if !waiting && !c.closing {
                if timeout.is_some_and(|t| quiet >= t) {
                    idle.push(id);
                    continue;
                }
                if c.rbuf.is_empty() && c.rbuf.capacity() > 0 && quiet >= SHRINK_IDLE_AFTER {
                    c.rbuf = bytes::BytesMut::new();
                    self.budget.update(c);
                }
            }
            if c.soft_since.is_some()
                && limits
                    .output_of(c)
                    .exceeded(c.output_len(), &mut c.soft_since, now)
            {
                over.push(id);
            }
        }
        for id in idle {
            tracing::debug!(client = id, "closing an idle client (timeout)");
            self.metrics
                .timeout_disconnects
                .fetch_add(1, Ordering::Relaxed);
            self.close(id);
        }
        for id in over {
            tracing::info!(
                client = id,
                "closing a client over the output buffer soft limit"
            );
            self.metrics
                .output_buffer_disconnects
                .fetch_add(1, Ordering::Relaxed);
            self.close(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_exhaustion_is_told_from_other_errors() {
        assert!(out_of_resources(&std::io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(out_of_resources(&std::io::Error::from_raw_os_error(
            libc::ENFILE
        )));
        assert!(!out_of_resources(&std::io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
        assert!(!out_of_resources(&std::io::Error::other("x")));
    }
}
