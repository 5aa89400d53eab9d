//! The network thread (`ls-net`): one `mio` poll loop that accepts clients (on the plain port
//! and the TLS port, `transport`), reads and frames their requests, checks them against the
//! connection's user (`auth`), answers connection-level commands itself, hands data commands to the
//! engine or writer thread through lock-free queues, and writes the replies those threads
//! send back (woken by a `mio::Waker`).
//!
//! Per-connection order: a connection's commands may be in flight to one worker thread at a
//! time (each worker answers in order); a command for the other worker, or one answered here,
//! waits in the connection's backlog until the in-flight ones are answered. Pipelines of one
//! kind (all GETs, all SETs) therefore flow without stalls.
//!
//! Nothing here blocks: jobs go to the workers with `try_send` (a full queue keeps the job in
//! the connection and stops reading it, see [`liveness`]), buffers are bounded (see
//! [`limits`]), and the cluster map file is written on its own thread.

mod admission;
mod auth;
mod conn;
mod device_reads;
mod get_batch;
mod inline_batch;
mod latency;
pub mod limits;
pub mod liveness;
mod local;
mod pubsub;
mod route;
mod session;
mod slowlog;
mod transport;

pub use admission::{protected_refuses, MAX_CLIENTS_ERROR, PROTECTED_MODE_ERROR};
pub use inline_batch::{DEFAULT_RING_AFTER, MAX_RING_AFTER_MS};
pub use limits::BufferLimits;
pub use liveness::LivenessConfig;
pub use route::MAX_KEY_BYTES;
pub use slowlog::{DEFAULT_MAX_LEN as DEFAULT_SLOWLOG_MAX_LEN, DEFAULT_SLOWER_THAN_USEC};

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvproto::{Command, Limits, Reply, RequestParser};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};

use self::conn::{frame_requests, Conn, ConnAuth, InFlight, PROTOCOL_ERROR_MARK};
use self::inline_batch::{Admission, HeldRings, InlineBatch};
use self::limits::{read_reserve, Budget, Hold};
use self::liveness::Liveness;
use self::local::{allowed_before_auth, is_transaction_control};
use self::pubsub::{in_subscribed_mode, refused_when_subscribed, PubSub};
use self::route::{copy_values, key_too_long, route_of, Route};
use self::slowlog::{Caller, Slowlog};
use self::transport::Transport;
use crate::acl::Users;
use crate::cluster::{self, Admin, AdminOutcome, Gate};
use crate::exec::{self, Done, GetBatching, Job, ReadHere, ReplySink, Transaction};
use crate::info::{CommandStats, Metrics};
use crate::queue::{Receiver, Sender, TrySendError};
use crate::store::Store;

/// Token of the listening socket.
const LISTENER: Token = Token(0);
/// Token of the waker the worker threads ring.
pub const WAKER: Token = Token(1);
/// Token of the TLS listening socket.
const TLS_LISTENER: Token = Token(2);
/// Token of this thread's device read queue (its eventfd): beyond any connection id.
const DEVICE_READS: Token = Token(usize::MAX - 1);
/// First connection id (ids are never reused).
const FIRST_CONN: u64 = 3;
/// How long a poll waits before looking at the shutdown flag and the timers.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// Bytes read per `read` call at least.
const READ_CHUNK: usize = 16 << 10;
/// Bytes read per `read` call at most.
const MAX_READ: usize = 256 << 10;
/// A connection stops reading while this many of its commands wait (back-pressure).
const MAX_QUEUED_PER_CONN: usize = 4096;

/// Settings of the network thread.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// The users (the default user's password, an ACL file's users).
    pub users: Arc<Users>,
    /// TLS: the server configuration for connections accepted on the TLS port.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Client limit.
    pub maxclients: usize,
    /// Refuse non-loopback clients without a password.
    pub protected_mode: bool,
    /// Buffer limits (query, pending, drive-wide budget, output).
    pub buffers: BufferLimits,
    /// Idle timeout and TCP keepalive.
    pub liveness: LivenessConfig,
    /// Request framing limits.
    pub limits: Limits,
    /// Settings CONFIG GET reports.
    pub reported: Vec<(String, String)>,
    /// Cluster mode: the map and this node (`None`: standalone).
    pub cluster: Option<Arc<cluster::Cluster>>,
    /// The zero-copy ablation (`--ablate zero-copy`): SET values are copied once more
    /// before they go to the writer.
    pub copy_values: bool,
    /// plp mode: a write from a connection with nothing in flight runs on this thread when
    /// the writer is idle ([`exec::try_write_batch_now`]).
    pub inline_writes: bool,
    /// Longest the pages of those writes are held back before they go to the device
    /// together (`plp-ring-after-ms`, [`DEFAULT_RING_AFTER`]).
    pub ring_after: Duration,
    /// `slowlog-log-slower-than` (microseconds; negative: off).
    pub slowlog_slower_than_usec: i64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: usize,
    /// `latency-monitor-threshold` in milliseconds (0: off).
    pub latency_monitor_threshold_ms: u64,
    /// Makes the cancellation handles of blocking commands (shared with the writer's table).
    pub block_handles: crate::blocking::BlockHandles,
}

/// The network thread's state.
pub struct Net {
    poll: Poll,
    /// Plain TCP (`None`: turned off with port 0 beside a TLS port).
    listener: Option<TcpListener>,
    /// TLS (`None`: no TLS port).
    tls_listener: Option<TcpListener>,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    engine_tx: Sender<Job>,
    writer_tx: Sender<Job>,
    replies: Receiver<Done>,
    /// Reads are answered or started here when they can be (see [`exec::read_here`]).
    store: Arc<Store>,
    /// Where replies of reads started here arrive: from this thread's own read queue
    /// (`reap_reads`), or from the engine's poller for pages that queue refused.
    sink: ReplySink,
    /// Reads started this turn, submitted together at its end (`ring_reads`).
    reads: Vec<lsm::ReservedRead>,
    /// This thread's own device read queue (`None` where the device has none): the reads
    /// above go down it and are finished on this thread's turns (`reap_reads`), so a cold
    /// read wakes no other thread. Made when the loop starts, on its thread.
    thread_reads: Option<lsm::ThreadReads>,
    /// GETs of one connection's pipeline gathered this turn, resolved together before
    /// anything else of that connection runs (`flush_gets`; see [`exec::GetBatch`]).
    gets: Option<exec::GetBatch>,
    metrics: Arc<Metrics>,
    shutdown: Arc<AtomicBool>,
    cfg: NetConfig,
    /// Cluster mode: slot checks, CLUSTER commands, map pushes.
    cluster: Option<Gate>,
    /// The drive-wide budget of buffered requests.
    budget: Budget,
    /// Timers: accept back-off, stalled jobs, the idle sweep.
    live: Liveness,
    /// The time, read once per turn of the loop.
    now: Instant,
    /// Channel and pattern subscriptions.
    pubsub: PubSub,
    /// Connections given output by another's command (PUBLISH): written at the end of the
    /// loop turn.
    to_flush: Vec<u64>,
    /// Doorbells of write groups run on this thread (`inline_batch`), rung after the turn's
    /// replies are written (the device submission's system call stays off the reply path),
    /// several groups' at once.
    rings: HeldRings,
    /// plp: the writes gathered since the last group ran on this thread (see
    /// `inline_batch` and `exec::try_write_batch_now`).
    inline: InlineBatch,
    /// Slow commands (SLOWLOG).
    slowlog: Slowlog,
    /// CLIENT PAUSE in force.
    pause: Option<session::Pause>,
    /// The latency monitor (LATENCY).
    latency: latency::Latency,
}

impl Net {
    /// Builds the loop around a bound listener and a poll (whose registry the waker uses).
    /// `sink` answers cluster map pushes (run on a thread of their own).
    ///
    /// # Errors
    /// Registering the listener, or starting the cluster map thread.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        poll: Poll,
        mut listener: Option<TcpListener>,
        mut tls_listener: Option<TcpListener>,
        engine_tx: Sender<Job>,
        writer_tx: Sender<Job>,
        replies: Receiver<Done>,
        store: Arc<Store>,
        metrics: Arc<Metrics>,
        shutdown: Arc<AtomicBool>,
        cfg: NetConfig,
        sink: ReplySink,
    ) -> std::io::Result<Net> {
        if let Some(l) = listener.as_mut() {
            poll.registry().register(l, LISTENER, Interest::READABLE)?;
        }
        if let Some(l) = tls_listener.as_mut() {
            poll.registry()
                .register(l, TLS_LISTENER, Interest::READABLE)?;
        }
        let cluster = match cfg.cluster.clone() {
            Some(c) => Some(Gate::with_saver(c, sink.clone())?),
            None => None,
        };
        let now = Instant::now();
        Ok(Net {
            poll,
            listener,
            tls_listener,
            conns: HashMap::new(),
            next_id: FIRST_CONN,
            engine_tx,
            writer_tx,
            replies,
            store,
            sink,
            reads: Vec::new(),
            thread_reads: None,
            gets: None,
            metrics,
            shutdown,
            cluster,
            budget: Budget::new(cfg.buffers.budget),
            live: Liveness::new(now),
            now,
            pubsub: PubSub::default(),
            to_flush: Vec::new(),
            rings: HeldRings::new(cfg.ring_after),
            inline: InlineBatch::new(cfg.inline_writes),
            slowlog: Slowlog::new(cfg.slowlog_slower_than_usec, cfg.slowlog_max_len),
            pause: None,
            latency: latency::Latency::new(cfg.latency_monitor_threshold_ms),
            cfg,
        })
    }

    /// Runs until the shutdown flag is raised (SIGTERM, SHUTDOWN).
    ///
    /// # Errors
    /// A failing poll.
    pub fn run(mut self) -> std::io::Result<()> {
        let mut events = Events::with_capacity(1024);
        self.open_thread_reads();
        while !self.shutdown.load(Ordering::Acquire) {
            match self.poll.poll(&mut events, Some(self.poll_timeout())) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            self.now = Instant::now();
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(false),
                    TLS_LISTENER => self.accept(true),
                    // Reaped below, as on every turn.
                    WAKER | DEVICE_READS => {}
                    Token(t) => {
                        let id = t as u64;
                        if ev.is_readable() || ev.is_read_closed() {
                            // Without a hang-up in the event, a short read means drained.
                            self.on_readable(id, !ev.is_read_closed());
                        }
                        if ev.is_writable() {
                            self.flush(id);
                        }
                    }
                }
            }
            // The reads this turn's requests started go to the device first.
            self.ring_reads();
            // The writes this turn's requests gathered run as one group (plp), and so do
            // those that the replies below let run; nothing gathered outlives the turn.
            self.settle_inline_batch();
            self.reap_reads();
            self.drain_replies();
            self.settle_inline_batch();
            for id in std::mem::take(&mut self.to_flush) {
                self.flush(id);
            }
            self.housekeeping();
            // And the writes housekeeping let run (a client let go after CLIENT PAUSE), and
            // what their replies published.
            self.settle_inline_batch();
            for id in std::mem::take(&mut self.to_flush) {
                self.flush(id);
            }
            // The pages of groups run here go to the device when enough are held or the
            // oldest has waited long enough (`HeldRings`); reads started since at once.
            self.rings.ring_if_due(Instant::now());
            self.ring_reads();
        }
        self.pass_inline_batch_on();
        self.rings.ring();
        // Last words to clients still connected are not owed: their in-flight writes finish
        // in the writer thread before the engine closes. Their blocked commands are
        // cancelled first, so the writes still queued pop nothing for a reply no one reads.
        for c in self.conns.values_mut() {
            if let Some((_, h)) = c.blocked.take() {
                h.cancel();
            }
        }
        Ok(())
    }

    fn accept(&mut self, tls: bool) {
        loop {
            let listener = if tls {
                &self.tls_listener
            } else {
                &self.listener
            };
            let Some(listener) = listener else {
                return;
            };
            let (mut stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.accept_caught_up();
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors and the like: the clients waiting stay in the
                    // kernel's queue and are accepted on a timer (edge-triggered: no new
                    // event would come for them).
                    self.accept_failed(&e);
                    return;
                }
            };
            if protected_refuses(
                self.cfg.protected_mode,
                self.cfg.users.default_has_password(),
                &peer,
            ) {
                self.metrics
                    .rejected_connections
                    .fetch_add(1, Ordering::Relaxed);
                let _ = stream.write(PROTECTED_MODE_ERROR.as_bytes());
                continue;
            }
            if self.conns.len() >= self.cfg.maxclients {
                self.metrics
                    .rejected_connections
                    .fetch_add(1, Ordering::Relaxed);
                let _ = stream.write(MAX_CLIENTS_ERROR.as_bytes());
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.keepalive(&stream);
            let id = self.next_id;
            self.next_id += 1;
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                Token(id as usize),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                tracing::warn!("registering a client failed: {e}");
                continue;
            }
            let transport = match (tls, &self.cfg.tls) {
                (true, Some(config)) => match Transport::tls(stream, config.clone()) {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::warn!("starting a TLS session failed: {e}");
                        continue;
                    }
                },
                _ => Transport::Plain(stream),
            };
            let user = self.cfg.users.default_user().clone();
            self.metrics
                .total_connections
                .fetch_add(1, Ordering::Relaxed);
            self.metrics
                .connected_clients
                .fetch_add(1, Ordering::Relaxed);
            self.conns.insert(
                id,
                Conn::new(
                    id,
                    transport,
                    peer,
                    RequestParser::new(self.cfg.limits),
                    ConnAuth {
                        authed: self.cfg.users.open_by_default(),
                        denied: user.denied(),
                        user: user.name.clone(),
                        all_channels: user.all_channels(),
                    },
                    self.now,
                ),
            );
        }
    }

    fn close(&mut self, id: u64) {
        self.unsubscribe_all(id);
        if let Some(mut c) = self.conns.remove(&id) {
            if let Some((_, h)) = c.blocked.take() {
                // Never served now: no item is popped for a client that is gone.
                h.cancel();
            }
            self.budget.release(&c);
            self.store.unwatch(&c.watched);
            c.transport.close_notify();
            let _ = self.poll.registry().deregister(c.transport.tcp_mut());
            self.metrics
                .connected_clients
                .fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Reads what the socket has (unless a limit holds it back, see [`limits::hold`]), then
    /// serves the requests; again while serving lifted the hold (requests answered here).
    ///
    /// `short_read_drains`: a read that returns less than it asked for ends the reads (the
    /// socket had no more; more bytes raise a new edge). Only for an edge without a hang-up:
    /// a peer's close that came with this edge raises no other, so then the reads go on
    /// until the socket answers `WouldBlock` or end-of-stream.
    fn on_readable(&mut self, id: u64, short_read_drains: bool) {
        let limit = self.cfg.buffers.query_buffer;
        let now = self.now;
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            let mut over_limit = false;
            let mut hold = Hold::None;
            while !c.eof && !c.closing {
                hold = limits::hold(c, &self.cfg.buffers, MAX_QUEUED_PER_CONN, &self.budget);
                if hold != Hold::None {
                    break;
                }
                let want = read_reserve(c.parser.bytes_hint(&c.rbuf), READ_CHUNK, c.rbuf.len());
                if c.rbuf.capacity() - c.rbuf.len() < want {
                    // Frame what is complete first: those bytes leave as arguments that share
                    // this buffer, so growing moves only the unfinished tail.
                    frame_requests(c, &self.metrics);
                    let want = read_reserve(c.parser.bytes_hint(&c.rbuf), READ_CHUNK, c.rbuf.len());
                    // Growing may move what is still buffered: count it as copied.
                    let before = c.rbuf.as_ptr();
                    c.rbuf.reserve(want);
                    if c.rbuf.as_ptr() != before {
                        self.metrics
                            .value_bytes_copied
                            .fetch_add(c.rbuf.len() as u64, Ordering::Relaxed);
                    }
                    continue;
                }
                let room = (c.rbuf.capacity() - c.rbuf.len())
                    .min(MAX_READ)
                    .min(self.budget.allowance(c));
                match c.transport.read_into(&mut c.rbuf, room) {
                    Ok(0) => {
                        c.eof = true;
                    }
                    Ok(n) => {
                        self.metrics
                            .net_input_bytes
                            .fetch_add(n as u64, Ordering::Relaxed);
                        c.last_active = now;
                        if c.rbuf.len() > limit {
                            over_limit = true;
                            break;
                        }
                        // (Not under TLS: a read hands over one record's plaintext at a time
                        // while more records may wait in the socket.)
                        if short_read_drains && n < room && c.transport.is_plain() {
                            // The socket is drained: bytes that arrive later raise a new
                            // edge, so the read that would answer `WouldBlock` is skipped
                            // (one system call per request less for a client that waits
                            // for each reply).
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        c.eof = true;
                        c.closing = true;
                    }
                }
            }
            if over_limit {
                tracing::info!(client = id, "closing a client over the query buffer limit");
                self.metrics
                    .query_buffer_disconnects
                    .fetch_add(1, Ordering::Relaxed);
                self.close(id);
                return;
            }
            match hold {
                Hold::None => {}
                Hold::Client => c.paused = true,
                Hold::Budget => {
                    self.metrics.budget_pauses.fetch_add(1, Ordering::Relaxed);
                    self.budget.pause(c, now);
                }
            }
            self.serve(id);
            // Requests answered here lift a hold no reply will lift: read on.
            let again = hold == Hold::Client
                && self.conns.get_mut(&id).is_some_and(|c| {
                    let lifted = c.paused
                        && limits::hold(c, &self.cfg.buffers, MAX_QUEUED_PER_CONN, &self.budget)
                            != Hold::Client;
                    if lifted {
                        c.paused = false;
                    }
                    lifted
                });
            if !again {
                return;
            }
        }
    }

    /// Frames requests from the read buffer and runs what may run now.
    fn serve(&mut self, id: u64) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            if c.closing {
                break;
            }
            let before = c.backlog.len();
            frame_requests(c, &self.metrics);
            let framed = c.backlog.len() > before;
            // Run what may run before judging the backlog full: a connection with nothing
            // in flight would otherwise wait for a reply that never comes.
            self.run_backlog(id);
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            if c.backlog.len() >= MAX_QUEUED_PER_CONN {
                // Commands are in flight (run_backlog sent some): their replies resume it.
                c.paused = true;
                break;
            }
            if !framed {
                break;
            }
        }
        self.finish_if_done(id);
        if let Some(c) = self.conns.get_mut(&id) {
            self.budget.update(c);
        }
        self.flush(id);
    }

    /// Runs backlog entries in order while each may run now. GETs of a pipeline gathered
    /// on the way ([`exec::GetBatch`]) are resolved before this returns; when DRAM answered
    /// them, the connection may go on at once.
    fn run_backlog(&mut self, id: u64) {
        loop {
            self.run_backlog_in_order(id);
            if !self.flush_gets() {
                return;
            }
        }
    }

    /// [`Net::run_backlog`]'s loop: runs backlog entries in order while each may run now.
    fn run_backlog_in_order(&mut self, id: u64) {
        loop {
            // An open batch of GETs takes its view before any other request of its
            // connection runs (and before another connection's batch opens).
            if let Some(b) = &self.gets {
                let joins = b.conn() == id
                    && self
                        .conns
                        .get(&id)
                        .and_then(|c| c.backlog.front())
                        .and_then(|args| get_batch::keys_read(args))
                        .is_some_and(|keys| b.has_room(keys));
                if !joins {
                    self.flush_gets();
                }
            }
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            if c.closing {
                c.backlog.clear();
                return;
            }
            if c.stalled.is_some() {
                // Its worker's queue was full: nothing may overtake that job.
                return;
            }
            if c.blocked.is_some() {
                // A blocking command waits for its list: the client's later commands wait
                // for its reply (Redis runs nothing of a blocked client).
                return;
            }
            let Some(args) = c.backlog.front() else {
                return;
            };
            if args
                .first()
                .is_some_and(|a| a.as_ref() == PROTOCOL_ERROR_MARK)
            {
                if c.in_flight > 0 {
                    return;
                }
                let msg = args.get(1).cloned().unwrap_or_default();
                c.backlog.clear();
                c.out.push(&Reply::Error(msg), c.proto);
                c.closing = true;
                return;
            }
            let parsed = Command::parse(args);
            // RESP2's subscribed mode: only the subscription commands, PING, QUIT and RESET.
            // (After the unknown-command, arity and unknown-subcommand errors, which Redis
            // gives first; before the command's own argument errors.)
            let lookup_error = matches!(
                &parsed,
                Err(e) if e.0.starts_with("ERR unknown subcommand '")
                    || e.0.starts_with("ERR wrong number of arguments")
            );
            if !lookup_error && in_subscribed_mode(c.proto, &c.subs) {
                if let Some(r) = refused_when_subscribed(args) {
                    if c.in_flight > 0 {
                        return;
                    }
                    let (args, _) = c.take_request();
                    if let Some(row) = CommandStats::row_of(&args) {
                        self.metrics.command_stats.rejected(row);
                    }
                    c.out.push(&r, c.proto);
                    continue;
                }
            }
            // CLIENT PAUSE: the command waits at the front of the backlog until the pause
            // ends (nothing after it overtakes it).
            if c.authed {
                if let Ok(cmd) = &parsed {
                    if self.paused(id, cmd) {
                        return;
                    }
                }
            }
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            let Some(args) = c.backlog.front() else {
                return;
            };
            if c.multi.is_some() && !is_transaction_control(&parsed) {
                // Inside MULTI nothing is in flight (MULTI waited for it): queue and answer.
                let (args, _) = c.take_request();
                self.metrics
                    .commands_processed
                    .fetch_add(1, Ordering::Relaxed);
                let reply = self.queue_in_multi(id, &args, parsed);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.out.push(&reply, c.proto);
                }
                continue;
            }
            // Cluster mode: MOVED / CROSSSLOT are answered here, before anything runs.
            let mut redirect = None;
            let route = match &parsed {
                Ok(cmd) if c.authed || allowed_before_auth(cmd) => {
                    let route = match cmd {
                        // EXEC of a transaction that may run goes to the writer thread.
                        Command::Exec if c.multi.is_some() && !c.multi_dirty => Route::Writer,
                        _ => route_of(cmd),
                    };
                    // ACL: only a user short of some command class pays for the check.
                    if !c.denied.is_empty() {
                        redirect = auth::refuse(c, cmd, args);
                    }
                    if redirect.is_none() {
                        let mode = c.cluster_mode;
                        let store = &self.store;
                        redirect = match &self.cluster {
                            Some(g) => g.check(cmd, route == Route::Writer, mode, |k| {
                                store.kind(k).ok().flatten().is_some()
                            }),
                            // CLUSTER COUNTKEYSINSLOT / GETKEYSINSLOT outside cluster mode.
                            None if matches!(cmd, Command::KeysInSlot { .. }) => {
                                Some(Reply::error(cluster::DISABLED_ERROR))
                            }
                            None => None,
                        };
                    }
                    // Only a request with an argument that long can have such a key: the
                    // common case skips collecting the command's keys.
                    if redirect.is_none()
                        && route != Route::Here
                        && args.iter().skip(1).any(|a| a.len() > MAX_KEY_BYTES)
                    {
                        redirect = key_too_long(cmd);
                    }
                    if redirect.is_some() {
                        Route::Here
                    } else if matches!(cmd, Command::KeysInSlot { .. }) {
                        // A reshard's "which keys are left in this slot" must see every
                        // write the writer let through before the slot started migrating,
                        // so it runs there, behind them (see `exec::writer_loop`).
                        Route::Writer
                    } else {
                        route
                    }
                }
                _ => Route::Here,
            };
            // plp: a write joins this turn's group on this thread (`inline_batch`).
            let admission = match &parsed {
                Ok(cmd) => self
                    .inline
                    .admits(c, cmd, route == Route::Writer, &self.store),
                Err(_) => Admission::Pass,
            };
            let batched = admission == Admission::Join;
            if admission == Admission::Wait && !c.in_batch {
                // Settling the batch serves it again.
                self.inline.wait(id);
                return;
            }
            if c.in_batch && !batched {
                // Waits for the group its earlier writes are in.
                return;
            }
            if c.in_flight > 0 && (route == Route::Here || route != c.in_flight_to) {
                return;
            }
            let (args, cost) = c.take_request();
            // ASKING lasts for the one command after it.
            if !matches!(parsed, Ok(Command::Asking)) {
                c.cluster_mode.asking = false;
            }
            self.metrics
                .commands_processed
                .fetch_add(1, Ordering::Relaxed);
            let row = CommandStats::row_of(&args);
            let mut cmd = match parsed {
                Ok(cmd) => cmd,
                Err(e) => {
                    if let Some(row) = row {
                        // Arity is checked before a command runs; other argument errors
                        // are the command's own (Redis counts them as failed calls).
                        if kvproto::command::check_arity(&args).is_err() {
                            self.metrics.command_stats.rejected(row);
                        } else {
                            self.metrics.command_stats.called(row, 0, true);
                        }
                    }
                    // Cluster mode's admin commands are not in kvproto's table.
                    let r = match Admin::of(&args) {
                        None => Reply::error(e.to_string()),
                        Some(_) if !c.authed => Reply::error("NOAUTH Authentication required."),
                        Some(a) => match (auth::refuse_admin(c, &a, &args), &mut self.cluster) {
                            (Some(refused), _) => refused,
                            (None, None) => Reply::error(cluster::DISABLED_ERROR),
                            (None, Some(g)) => {
                                match g.admin(a, &args, &mut c.cluster_mode, id, c.next_seq) {
                                    AdminOutcome::Reply(r) => r,
                                    AdminOutcome::Deferred => {
                                        // Answered by the map's saver thread once the file
                                        // is durable.
                                        c.defer_to_saver(cost, None, self.now);
                                        continue;
                                    }
                                }
                            }
                        },
                    };
                    c.out.push(&r, c.proto);
                    continue;
                }
            };
            if let Some(r) = redirect {
                if let Some(row) = row {
                    self.metrics.command_stats.rejected(row);
                }
                c.out.push(&r, c.proto);
                continue;
            }
            c.last_cmd = row;
            if route == Route::Here {
                if !c.authed && !allowed_before_auth(&cmd) {
                    if let Some(row) = row {
                        self.metrics.command_stats.rejected(row);
                    }
                    c.out
                        .push(&Reply::error("NOAUTH Authentication required."), c.proto);
                    continue;
                }
                let started = Instant::now();
                let out = self.local(id, cmd);
                let took = started.elapsed();
                let failed = out.reply.as_ref().is_some_and(Reply::is_error);
                self.timed(id, row, &args, took, failed);
                let Some(c) = self.conns.get_mut(&id) else {
                    return;
                };
                if let Some(r) = out.reply {
                    c.out.push(&r, c.proto);
                }
                if out.deferred {
                    c.defer_to_saver(cost, None, self.now);
                    continue;
                }
                if out.close {
                    c.closing = true;
                    c.backlog.clear();
                    return;
                }
                continue;
            }
            // A read is answered here from DRAM, or resolved here and its pages queued
            // (`exec::read_here`): no hand-off to the engine thread either way.
            if route == Route::Engine && !self.cfg.copy_values && c.resolves_in_order_here() {
                let started = Instant::now();
                let to = (id, c.next_seq, c.proto);
                let batching = if self.gets.is_some() {
                    GetBatching::Open
                } else if c.backlog.is_empty() {
                    GetBatching::Alone
                } else {
                    GetBatching::Queued
                };
                let (store, sink) = (&self.store, &self.sink);
                match exec::read_here(
                    store,
                    &self.metrics,
                    &cmd,
                    to,
                    batching,
                    sink,
                    &mut self.reads,
                ) {
                    ReadHere::Answered(r) => {
                        self.metrics
                            .reads_answered_inline
                            .fetch_add(1, Ordering::Relaxed);
                        if c.in_flight == 0 {
                            self.metrics
                                .value_bytes_moved
                                .fetch_add(r.payload_len() as u64, Ordering::Relaxed);
                            c.out.push(&r, c.proto);
                            let failed = r.is_error();
                            self.timed(id, row, &args, started.elapsed(), failed);
                        } else {
                            // Behind replies still in flight: it waits its turn, as a
                            // reply from a worker that came early does (`deliver`).
                            let meta = InFlight {
                                row,
                                started: self.now,
                                args,
                            };
                            let seq = c.next_in_flight(route, cost, meta);
                            c.early.insert(seq, r);
                        }
                        continue;
                    }
                    ReadHere::Started => {
                        self.metrics
                            .reads_started_inline
                            .fetch_add(1, Ordering::Relaxed);
                        let meta = InFlight {
                            row,
                            started: self.now,
                            args,
                        };
                        c.next_in_flight(route, cost, meta);
                        continue;
                    }
                    // `read_here` batches nothing but GET and MGET; any other command
                    // goes on to the engine thread below.
                    ReadHere::Batch if matches!(cmd, Command::Get(_) | Command::MGet(_)) => {
                        // An open batch is this connection's: the loop's top resolved any
                        // other before this request ran.
                        debug_assert!(self.gets.as_ref().is_none_or(|b| b.conn() == id));
                        let meta = InFlight {
                            row,
                            started: self.now,
                            args,
                        };
                        let seq = c.next_in_flight(route, cost, meta);
                        let batch = self.gets.get_or_insert_with(|| exec::GetBatch::new(id));
                        match cmd {
                            Command::Get(key) => batch.push_get(seq, key),
                            Command::MGet(keys) => batch.push_mget(seq, keys),
                            _ => {}
                        }
                        continue;
                    }
                    ReadHere::Batch | ReadHere::Elsewhere => {}
                }
            }
            if let Command::Set { value, .. } = &cmd {
                self.metrics
                    .value_bytes_moved
                    .fetch_add(value.len() as u64, Ordering::Relaxed);
            }
            if batched {
                self.join_inline_batch(id, cmd, cost, row, args);
                continue;
            }
            if self.cfg.copy_values {
                copy_values(&mut cmd, &self.metrics);
            }
            let tx = if matches!(cmd, Command::Exec) {
                Some(Box::new(Transaction {
                    items: c.multi.take().unwrap_or_default(),
                    watched: std::mem::take(&mut c.watched),
                }))
            } else {
                None
            };
            // BLPOP and the like may wait in the writer: the handle lets a close cancel it.
            let block = match &cmd {
                Command::Collection(b) if b.block_timeout_ms().is_some() => {
                    let h = self.cfg.block_handles.handle();
                    c.blocked = Some((c.next_seq, h.clone()));
                    Some(h)
                }
                _ => None,
            };
            let job = Job {
                conn: id,
                proto: c.proto,
                cmd,
                seq: c.next_seq,
                tx,
                block,
            };
            c.last_job = Some(c.next_seq);
            c.next_seq += 1;
            let sent = match route {
                Route::Writer => self.writer_tx.try_send(job),
                _ => self.engine_tx.try_send(job),
            };
            let stalled = match sent {
                Ok(()) => None,
                Err(TrySendError::Full(job)) => Some(job),
                Err(TrySendError::Disconnected(_)) => {
                    // Workers gone: the drive is shutting down.
                    c.out
                        .push(&Reply::error("ERR the drive is shutting down"), c.proto);
                    c.closing = true;
                    return;
                }
            };
            c.hand_off(
                route,
                cost,
                InFlight {
                    row,
                    started: self.now,
                    args,
                },
            );
            if let Some(job) = stalled {
                // The worker is behind: keep the job here, stop reading this client, and
                // retry on a timer (`liveness`), so the loop never waits on a queue.
                c.stalled = Some((route, VecDeque::from([job])));
                self.stall(id);
                return;
            }
        }
    }

    /// Counts a command answered on this thread (commandstats, SLOWLOG).
    fn timed(
        &mut self,
        id: u64,
        row: Option<usize>,
        args: &[bytes::Bytes],
        took: Duration,
        failed: bool,
    ) {
        let Some(row) = row else {
            return;
        };
        self.metrics
            .command_stats
            .called(row, slowlog::micros(took), failed);
        self.latency.record(row, took);
        if self.slowlog.wants(took) {
            let (peer, name) = self
                .conns
                .get(&id)
                .map(|c| (Some(c.peer), c.name.clone().unwrap_or_default()))
                .unwrap_or_default();
            self.slowlog
                .record(CommandStats::row_command(row), args, took, || Caller {
                    peer,
                    name,
                });
        }
    }

    fn drain_replies(&mut self) {
        let mut touched = Vec::new();
        self.sink.rearm();
        while let Ok(d) = self.replies.try_recv() {
            self.deliver(d, &mut touched);
        }
        touched.sort_unstable();
        touched.dedup();
        // A finished map push swapped the view: load it before anything runs after it.
        if let Some(g) = self.cluster.as_mut() {
            if g.refresh() {
                // The workers' copy of the slots being handed over.
                self.store.migrations.set(g.migrating_targets());
            }
        }
        for id in touched {
            self.run_backlog(id);
            self.resume(id);
        }
    }

    /// Puts a worker's reply in its connection's output in request order (held while an
    /// earlier one is missing), counts the command (commandstats, SLOWLOG, latency), and
    /// notes the connection in `touched` (it may run more of its backlog now).
    fn deliver(&mut self, d: Done, touched: &mut Vec<u64>) {
        let Some(c) = self.conns.get_mut(&d.conn) else {
            return;
        };
        if d.seq != c.next_reply {
            c.early.insert(d.seq, d.reply);
            return;
        }
        let mut reply = Some(d.reply);
        while let Some(r) = reply {
            c.in_flight = c.in_flight.saturating_sub(1);
            c.answered();
            // A blocking command's wait is not its run time: as in Redis, it counts as a
            // call without time and never enters SLOWLOG or the latency monitor.
            let was_blocking = c
                .blocked
                .as_ref()
                .is_some_and(|(seq, _)| *seq == c.next_reply);
            let meta = c.inflight_meta.pop_front();
            if was_blocking {
                if let Some(row) = meta.as_ref().and_then(|f| f.row) {
                    self.metrics.command_stats.called(row, 0, r.is_error());
                }
            } else if let Some(f) = meta {
                let took = self.now.saturating_duration_since(f.started);
                if let Some(row) = f.row {
                    self.metrics
                        .command_stats
                        .called(row, slowlog::micros(took), r.is_error());
                    self.latency.record(row, took);
                    if self.slowlog.wants(took) {
                        let (peer, name) = (c.peer, c.name.clone());
                        self.slowlog
                            .record(CommandStats::row_command(row), &f.args, took, || Caller {
                                peer: Some(peer),
                                name: name.unwrap_or_default(),
                            });
                    }
                }
            }
            if was_blocking {
                c.blocked = None;
            }
            c.next_reply += 1;
            self.metrics
                .value_bytes_moved
                .fetch_add(r.payload_len() as u64, Ordering::Relaxed);
            c.out.push(&r, c.proto);
            c.release_pushes();
            reply = c.early.remove(&c.next_reply);
        }
        if touched.last() != Some(&d.conn) {
            touched.push(d.conn);
        }
    }

    /// After replies or a stalled job left: reads again if reading had stopped and the
    /// hold is lifted, else serves what may run now.
    fn resume(&mut self, id: u64) {
        let paused = self.conns.get_mut(&id).is_some_and(|c| {
            let p = c.paused
                && limits::hold(c, &self.cfg.buffers, MAX_QUEUED_PER_CONN, &self.budget)
                    != Hold::Client;
            if p {
                c.paused = false;
            }
            p
        });
        if paused {
            // It stopped reading under back-pressure: read (and serve) again.
            self.on_readable(id, false);
        } else {
            self.serve(id);
        }
    }

    /// Once the peer closed and nothing is pending, close (after the last replies).
    fn finish_if_done(&mut self, id: u64) {
        if let Some(c) = self.conns.get_mut(&id) {
            if c.eof && c.in_flight == 0 && c.backlog.is_empty() {
                c.closing = true;
            }
            if c.eof {
                if let Some((_, h)) = &c.blocked {
                    // The peer went while blocked: the wait is cancelled, so no item is
                    // popped for it; the writer answers a cancelled command nil at once (or
                    // at its next turn), and the connection closes as usual when nothing is
                    // in flight (replies to its earlier commands still go out).
                    h.cancel();
                    c.backlog.clear();
                }
            }
        }
    }

    /// Writes what the socket takes; closes a closing connection once flushed.
    fn flush(&mut self, id: u64) {
        let now = self.now;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let limit = self.cfg.buffers.output_of(c);
        let mut dead = false;
        while !c.out.is_empty() {
            match c.out.write_to(&mut c.transport) {
                Ok(0) => {
                    dead = true;
                    break;
                }
                Ok(n) => {
                    self.metrics
                        .net_output_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                    c.last_active = now;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    dead = true;
                    break;
                }
            }
        }
        // TLS records the session still holds (handshake messages, replies the socket did
        // not take); a plain socket holds none.
        let held = c.transport.flush_pending().unwrap_or_else(|_| {
            dead = true;
            false
        });
        if limits::output_exceeded(c, &limit, now) {
            tracing::info!(
                client = id,
                bytes = c.output_len(),
                "closing a client over the output buffer limit"
            );
            self.metrics
                .output_buffer_disconnects
                .fetch_add(1, Ordering::Relaxed);
            dead = true;
        }
        let done = c.closing && c.out.is_empty() && !held && c.in_flight == 0;
        if dead || done {
            self.close(id);
        }
    }
}
