//! Memory limits of the network thread: how much a client may make the drive buffer, and a
//! drive-wide budget for buffered requests.
//!
//! What a client holds in the drive's DRAM on the way in is its query buffer (bytes read and
//! not yet framed into requests: [`Conn::rbuf`]'s allocation) and its *pending* requests
//! (framed and not yet answered: waiting in the backlog or in flight to a worker, counted by
//! [`request_cost`]). On the way out it holds its output buffer.
//!
//! - the query buffer is read in bounded steps ([`read_reserve`]): a `$536870912` header
//!   reserves nothing until the bytes arrive, and the buffer grows at most by what it
//!   already holds (or [`GROW_AHEAD`]) per step; past `client-query-buffer-limit` the
//!   client is disconnected, as Redis does;
//! - pending requests past `client-pending-limit` stop reading that client (back-pressure,
//!   resumed as replies go out); one request may exceed it;
//! - the [`Budget`] sums every client's buffered bytes (query buffer contents and pending
//!   requests); over `client-query-budget`, a client holding more than [`BUDGET_FLOOR`] is
//!   not read until the total drops (paused clients resume in FIFO order), and one holding
//!   less reads only up to the floor, so small requests (PING, AUTH, GET) are never stuck
//!   behind large ones. So that a request larger than what is free still gets through, the
//!   client paused longest may read past the budget after [`EXEMPT_AFTER`], one client at a
//!   time, until it has framed a request (or [`EXEMPT_FOR`] passes). The bound is the
//!   budget, plus [`BUDGET_FLOOR`] per client, plus one request;
//! - the output buffer past the hard limit, or past the soft limit for the soft seconds,
//!   disconnects the client (`client-output-buffer-limit normal`, as Redis);
//! - before AUTH (when a password is set) requests are capped as Redis 7.2 caps them (the
//!   framer's [`kvproto::limits::UNAUTHENTICATED_MAX_ARGS`] and `_MAX_BULK_LEN`), at most
//!   [`UNAUTH_READ_AHEAD`] bytes are read ahead, requests are framed one at a time (AUTH
//!   lifts the caps for what follows it in the same pipeline), and more than
//!   [`UNAUTH_OUTPUT_LIMIT`] of unread replies disconnects.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::conn::Conn;

/// Largest query buffer a client may hold before it is disconnected (Redis's
/// `client-query-buffer-limit` default, 1 GiB).
pub const DEFAULT_QUERY_BUFFER_LIMIT: usize = 1 << 30;
/// Bytes of a client's framed, unanswered requests above which it is not read (64 MiB).
pub const DEFAULT_PENDING_LIMIT: usize = 64 << 20;
/// Drive-wide bytes of query buffers and pending requests above which no socket is read
/// (256 MiB).
pub const DEFAULT_QUERY_BUDGET: usize = 256 << 20;
/// Output buffer hard limit of a normal client (1 GiB: above the largest value, 512 MiB).
pub const DEFAULT_OUTPUT_HARD: usize = 1 << 30;
/// Output buffer soft limit of a normal client (256 MiB).
pub const DEFAULT_OUTPUT_SOFT: usize = 256 << 20;
/// Seconds a normal client may stay over the soft limit.
pub const DEFAULT_OUTPUT_SOFT_SECONDS: u64 = 60;
/// Output buffer hard limit of a subscribed client (Redis's `pubsub` class: 32 MiB).
pub const DEFAULT_PUBSUB_OUTPUT_HARD: usize = 32 << 20;
/// Output buffer soft limit of a subscribed client (8 MiB).
pub const DEFAULT_PUBSUB_OUTPUT_SOFT: usize = 8 << 20;
/// Seconds a subscribed client may stay over the soft limit.
pub const DEFAULT_PUBSUB_OUTPUT_SOFT_SECONDS: u64 = 60;
/// How far past what it holds the query buffer may be grown before bytes arrive.
pub const GROW_AHEAD: usize = 256 << 10;
/// Bytes read ahead of framing for a client that has not authenticated (10 arguments of
/// 16 KiB and their headers fit).
pub const UNAUTH_READ_AHEAD: usize = 256 << 10;
/// Bytes any client may hold whatever the budget says (a few small requests).
pub const BUDGET_FLOOR: usize = 64 << 10;
/// How long the client paused longest waits before it may read past a full budget.
pub const EXEMPT_AFTER: Duration = Duration::from_millis(100);
/// How long one client keeps that exemption without framing a request before another may
/// have it (a client that stops sending mid-request cannot hold it).
pub const EXEMPT_FOR: Duration = Duration::from_secs(1);
/// Output a client that has not authenticated may hold before it is disconnected (its
/// replies are errors, AUTH and HELLO: a client not reading them is flooding).
pub const UNAUTH_OUTPUT_LIMIT: usize = 1 << 20;
/// Bookkeeping bytes counted per pending request on top of its arguments.
const REQUEST_OVERHEAD: usize = 64;
/// Bookkeeping bytes counted per argument.
const ARG_OVERHEAD: usize = 32;

/// The output buffer limit of a client class (`client-output-buffer-limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimit {
    /// Disconnect at once above this many bytes (0: no hard limit).
    pub hard: usize,
    /// Disconnect when above this many bytes for `soft_seconds` (0: no soft limit).
    pub soft: usize,
    /// How long the soft limit may be exceeded.
    pub soft_seconds: u64,
}

impl Default for OutputLimit {
    fn default() -> Self {
        OutputLimit {
            hard: DEFAULT_OUTPUT_HARD,
            soft: DEFAULT_OUTPUT_SOFT,
            soft_seconds: DEFAULT_OUTPUT_SOFT_SECONDS,
        }
    }
}

impl OutputLimit {
    /// Whether a client with `len` bytes of output must be disconnected now; tracks since
    /// when it has been over the soft limit in `soft_since`.
    pub(super) fn exceeded(
        &self,
        len: usize,
        soft_since: &mut Option<Instant>,
        now: Instant,
    ) -> bool {
        if self.hard > 0 && len > self.hard {
            return true;
        }
        if self.soft == 0 || len <= self.soft {
            *soft_since = None;
            return false;
        }
        let since = *soft_since.get_or_insert(now);
        now.duration_since(since) >= Duration::from_secs(self.soft_seconds)
    }

    /// Redis's default for the `pubsub` class: `32mb 8mb 60`.
    #[must_use]
    pub fn pubsub_default() -> OutputLimit {
        OutputLimit {
            hard: DEFAULT_PUBSUB_OUTPUT_HARD,
            soft: DEFAULT_PUBSUB_OUTPUT_SOFT,
            soft_seconds: DEFAULT_PUBSUB_OUTPUT_SOFT_SECONDS,
        }
    }

    /// One class of the setting as CONFIG GET shows it (Redis's `class hard soft seconds`).
    #[must_use]
    pub fn reported(&self, class: &str) -> String {
        format!("{class} {} {} {}", self.hard, self.soft, self.soft_seconds)
    }
}

/// The buffer limits of the network thread (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferLimits {
    /// `client-query-buffer-limit`: unframed bytes a client may hold (over: disconnected).
    pub query_buffer: usize,
    /// `client-pending-limit`: framed, unanswered request bytes a client may hold before it
    /// is no longer read.
    pub pending: usize,
    /// `client-query-budget`: drive-wide query buffers and pending requests.
    pub budget: usize,
    /// `client-output-buffer-limit normal ...`.
    pub output: OutputLimit,
    /// `client-output-buffer-limit pubsub ...`: clients subscribed to a channel or pattern.
    pub output_pubsub: OutputLimit,
}

impl BufferLimits {
    /// The output limit of `c`'s class (`pubsub` while it holds a subscription).
    pub(super) fn output_of(&self, c: &Conn) -> OutputLimit {
        if c.subs.count() > 0 {
            self.output_pubsub
        } else {
            self.output
        }
    }

    /// The setting as CONFIG GET shows it (both classes).
    #[must_use]
    pub fn output_reported(&self) -> String {
        format!(
            "{} {}",
            self.output.reported("normal"),
            self.output_pubsub.reported("pubsub")
        )
    }
}

impl Default for BufferLimits {
    fn default() -> Self {
        BufferLimits {
            query_buffer: DEFAULT_QUERY_BUFFER_LIMIT,
            pending: DEFAULT_PENDING_LIMIT,
            budget: DEFAULT_QUERY_BUDGET,
            output: OutputLimit::default(),
            output_pubsub: OutputLimit::pubsub_default(),
        }
    }
}

/// Bytes a pending request is counted for: its arguments and some bookkeeping.
pub(super) fn request_cost(args: &[Bytes]) -> usize {
    REQUEST_OVERHEAD + args.iter().map(|a| a.len() + ARG_OVERHEAD).sum::<usize>()
}

/// How many free bytes the query buffer should have before the next read: what the request
/// being read still needs (`hint`), at least `min`, but never more than [`GROW_AHEAD`] or
/// what the buffer already holds, whichever is larger. So memory follows the bytes that
/// actually arrive: a header announcing 512 MiB costs nothing, and a large value's buffer
/// doubles as it fills.
pub(super) fn read_reserve(hint: Option<usize>, min: usize, buffered: usize) -> usize {
    let cap = GROW_AHEAD.max(buffered).max(min);
    hint.unwrap_or(0).clamp(min, cap)
}

/// Why a connection may not be read now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// It may be read.
    None,
    /// Its own requests wait (backlog count, pending bytes, a job for a full worker queue,
    /// unauthenticated read-ahead): replies or serving lift it.
    Client,
    /// The drive-wide budget is used up.
    Budget,
}

/// The drive-wide budget of buffered requests and the clients it paused.
#[derive(Debug)]
pub(super) struct Budget {
    limit: usize,
    used: usize,
    /// Clients not read because the budget was used up, in the order they were paused.
    paused: VecDeque<(u64, Instant)>,
    /// The client allowed past the budget, its framed-request count when it was let, and
    /// when.
    exempt: Option<(u64, u64, Instant)>,
}

impl Budget {
    pub(super) fn new(limit: usize) -> Budget {
        Budget {
            limit,
            used: 0,
            paused: VecDeque::new(),
            exempt: None,
        }
    }

    /// Bytes of buffered requests now.
    pub(super) fn used(&self) -> usize {
        self.used
    }

    /// Clients paused by the budget now.
    pub(super) fn paused(&self) -> usize {
        self.paused.len()
    }

    /// What a connection holds: bytes received and not framed, and pending requests (the
    /// buffer's spare capacity is not counted: its pages are not touched until bytes come).
    fn held(c: &Conn) -> usize {
        c.rbuf.len() + c.pending_bytes
    }

    /// Brings the total up to date with what `c` holds now.
    pub(super) fn update(&mut self, c: &mut Conn) {
        let h = Self::held(c);
        self.used = self.used.saturating_sub(c.held) + h;
        c.held = h;
        if self
            .exempt
            .is_some_and(|(id, framed, _)| id == c.id && c.framed > framed)
        {
            self.exempt = None;
        }
    }

    /// Forgets a closed connection.
    pub(super) fn release(&mut self, c: &Conn) {
        self.used = self.used.saturating_sub(c.held);
        if self.exempt.is_some_and(|(id, _, _)| id == c.id) {
            self.exempt = None;
        }
    }

    /// How many bytes `c` may read now: what keeps the total within the budget, but at
    /// least what keeps `c` within [`BUDGET_FLOOR`]; unlimited for the exempt client.
    pub(super) fn allowance(&self, c: &Conn) -> usize {
        if self.exempt.is_some_and(|(id, _, _)| id == c.id) {
            return usize::MAX;
        }
        let mine = Self::held(c);
        let total = self.used.saturating_sub(c.held) + mine;
        self.limit
            .saturating_sub(total)
            .max(BUDGET_FLOOR.saturating_sub(mine))
    }

    /// Records that `c` was paused by the budget.
    pub(super) fn pause(&mut self, c: &mut Conn, now: Instant) {
        if !c.budget_paused {
            c.budget_paused = true;
            self.paused.push_back((c.id, now));
        }
    }

    /// The next paused client to read again, if the budget has room (or the one paused
    /// longest has waited [`EXEMPT_AFTER`] and may read past it).
    pub(super) fn next_to_resume(
        &mut self,
        now: Instant,
        is_paused: impl Fn(u64) -> Option<u64>,
    ) -> Option<u64> {
        if self
            .exempt
            .is_some_and(|(_, _, since)| now.duration_since(since) >= EXEMPT_FOR)
        {
            self.exempt = None;
        }
        loop {
            let &(id, since) = self.paused.front()?;
            let Some(framed) = is_paused(id) else {
                // Closed, or resumed another way.
                self.paused.pop_front();
                continue;
            };
            if self.used <= self.limit {
                self.paused.pop_front();
                return Some(id);
            }
            if self.exempt.is_none() && now.duration_since(since) >= EXEMPT_AFTER {
                self.exempt = Some((id, framed, now));
                self.paused.pop_front();
                return Some(id);
            }
            return None;
        }
    }
}

/// Whether `c` must be disconnected for its output: over the `client-output-buffer-limit`
/// (hard, or soft for its seconds), or over [`UNAUTH_OUTPUT_LIMIT`] before AUTH.
pub(super) fn output_exceeded(c: &mut Conn, limit: &OutputLimit, now: Instant) -> bool {
    let len = c.output_len();
    limit.exceeded(len, &mut c.soft_since, now) || (!c.authed && len > UNAUTH_OUTPUT_LIMIT)
}

/// Whether `c` may be read now, and if not why (see [`Hold`]).
pub(super) fn hold(c: &Conn, limits: &BufferLimits, max_queued: usize, budget: &Budget) -> Hold {
    if c.stalled.is_some()
        || c.backlog.len() >= max_queued
        || c.pending_bytes > limits.pending
        || (!c.authed && (!c.backlog.is_empty() || c.rbuf.len() >= UNAUTH_READ_AHEAD))
    {
        Hold::Client
    } else if budget.allowance(c) == 0 {
        Hold::Budget
    } else {
        Hold::None
    }
}

/// The file descriptors the drive keeps for itself besides clients (device, rings, log,
/// listener, poll, waker; Redis keeps 32).
pub const RESERVED_FDS: u64 = 64;

/// What [`fit_open_files`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// Clients the drive can serve (`maxclients`, or fewer when the limit could not be
    /// raised).
    pub maxclients: usize,
    /// The soft RLIMIT_NOFILE now.
    pub nofile: u64,
}

/// Raises the soft RLIMIT_NOFILE (up to the hard limit, or past it with the privilege to)
/// to fit `maxclients` clients plus [`RESERVED_FDS`]; when it cannot, lowers maxclients to
/// what fits and logs it, as Redis does.
///
/// # Errors
/// The limit leaves no room for a single client.
pub fn fit_open_files(maxclients: usize) -> Result<FdLimit, String> {
    let want = maxclients as u64 + RESERVED_FDS;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`, a valid, exclusively borrowed struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(format!(
            "reading RLIMIT_NOFILE: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut have = lim.rlim_cur;
    if have < want {
        // Past the hard limit needs privileges: try that, then settle for the hard limit.
        for (cur, max) in [
            (want, want.max(lim.rlim_max)),
            (want.min(lim.rlim_max), lim.rlim_max),
        ] {
            let new = libc::rlimit {
                rlim_cur: cur,
                rlim_max: max,
            };
            // SAFETY: setrlimit reads one valid rlimit.
            if cur > have && unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } == 0 {
                have = cur;
                break;
            }
        }
    }
    if have >= want {
        return Ok(FdLimit {
            maxclients,
            nofile: have,
        });
    }
    let fit = have.saturating_sub(RESERVED_FDS);
    if fit == 0 {
        return Err(format!(
            "the open files limit ({have}, 'ulimit -n') leaves no room for clients: raise it to at least {want}"
        ));
    }
    tracing::warn!(
        "maxclients {maxclients} needs {want} open files but the limit is {have} (hard limit {}): \
         maxclients lowered to {fit}; raise 'ulimit -n' for more",
        lim.rlim_max
    );
    Ok(FdLimit {
        maxclients: usize::try_from(fit).unwrap_or(maxclients),
        nofile: have,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_big_header_reserves_nothing_ahead() {
        // A $536870912 header with 20 bytes of it buffered: at most GROW_AHEAD.
        assert_eq!(read_reserve(Some(512 << 20), 16 << 10, 20), GROW_AHEAD);
        // Then the buffer at most doubles.
        assert_eq!(read_reserve(Some(400 << 20), 16 << 10, 8 << 20), 8 << 20);
        // Small requests read a chunk.
        assert_eq!(read_reserve(None, 16 << 10, 0), 16 << 10);
        assert_eq!(read_reserve(Some(100), 16 << 10, 0), 16 << 10);
        assert_eq!(read_reserve(Some(100 << 10), 16 << 10, 0), 100 << 10);
    }

    #[test]
    fn output_soft_limit_needs_time_hard_limit_does_not() {
        let l = OutputLimit {
            hard: 100,
            soft: 50,
            soft_seconds: 2,
        };
        let t0 = Instant::now();
        let mut since = None;
        assert!(!l.exceeded(40, &mut since, t0));
        assert!(!l.exceeded(60, &mut since, t0));
        assert!(!l.exceeded(60, &mut since, t0 + Duration::from_secs(1)));
        assert!(l.exceeded(60, &mut since, t0 + Duration::from_secs(2)));
        // Back under the soft limit resets the clock.
        assert!(!l.exceeded(10, &mut since, t0 + Duration::from_secs(3)));
        assert!(!l.exceeded(60, &mut since, t0 + Duration::from_secs(4)));
        assert!(l.exceeded(101, &mut None, t0));
        let off = OutputLimit {
            hard: 0,
            soft: 0,
            soft_seconds: 0,
        };
        assert!(!off.exceeded(usize::MAX, &mut None, t0));
    }

    #[test]
    fn request_cost_counts_arguments() {
        let args = [Bytes::from_static(b"SET"), Bytes::from(vec![0u8; 1000])];
        assert_eq!(request_cost(&args), 64 + 3 + 1000 + 2 * 32);
    }
}
