//! The network thread (`ls-net`): one `mio` poll loop that accepts clients, reads and frames
//! their requests, answers connection-level commands itself, hands data commands to the
//! engine or writer thread through lock-free queues, and writes the replies those threads
//! send back (woken by a `mio::Waker`).
//!
//! Per-connection order: a connection's commands may be in flight to one worker thread at a
//! time (each worker answers in order); a command for the other worker, or one answered here,
//! waits in the connection's backlog until the in-flight ones are answered. Pipelines of one
//! kind (all GETs, all SETs) therefore flow without stalls.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{ErrorKind, IoSlice, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::exec;
use crate::queue::{Receiver, Sender};
use crate::store::Store;
use bytes::{Buf, Bytes, BytesMut};
use kvproto::command::COMMANDS;
use kvproto::{Command, Limits, Protocol, Reply, RequestParser};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::cluster::{self, Admin, ConnMode, Gate};
use crate::exec::{Done, Job, Transaction, TxItem};
use crate::info::Metrics;
use crate::store::WatchedKey;

/// Token of the listening socket.
const LISTENER: Token = Token(0);
/// Token of the waker the worker threads ring.
pub const WAKER: Token = Token(1);
/// First connection id (ids are never reused).
const FIRST_CONN: u64 = 2;
/// How long a poll waits before looking at the shutdown flag.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// Bytes read per `read` call at least.
const READ_CHUNK: usize = 16 << 10;
/// Bytes read per `read` call at most.
const MAX_READ: usize = 256 << 10;
/// A connection stops reading while this many of its commands wait (back-pressure).
const MAX_QUEUED_PER_CONN: usize = 4096;

/// Redis's reply to a non-loopback client in protected mode.
pub const PROTECTED_MODE_ERROR: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Set up an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";
/// Redis's reply when maxclients is reached.
pub const MAX_CLIENTS_ERROR: &str = "-ERR max number of clients reached\r\n";

/// Settings of the network thread.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// AUTH password.
    pub requirepass: Option<String>,
    /// Client limit.
    pub maxclients: usize,
    /// Refuse non-loopback clients without a password.
    pub protected_mode: bool,
    /// Query buffer limit per client.
    pub query_buffer_limit: usize,
    /// Output buffer limit per client.
    pub output_buffer_limit: usize,
    /// Request framing limits.
    pub limits: Limits,
    /// Settings CONFIG GET reports.
    pub reported: Vec<(String, String)>,
    /// Cluster mode: the map and this node (`None`: standalone).
    pub cluster: Option<Arc<cluster::Cluster>>,
    /// The zero-copy ablation (`--ablate zero-copy`): SET values are copied once more
    /// before they go to the writer.
    pub copy_values: bool,
}

/// Whether protected mode turns `peer` away.
pub fn protected_refuses(protected_mode: bool, has_password: bool, peer: &SocketAddr) -> bool {
    protected_mode && !has_password && !peer.ip().is_loopback() && !is_mapped_loopback(peer)
}

fn is_mapped_loopback(peer: &SocketAddr) -> bool {
    match peer {
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        SocketAddr::V4(_) => false,
    }
}

/// Which thread answers a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Here,
    Engine,
    Writer,
}

/// Most segments handed to one vectored write.
const MAX_IOV: usize = 64;
/// Longest key a client may use (the engine keeps 64 bytes more for the type tag and
/// sub-key framing of `keyspace`).
pub const MAX_KEY_BYTES: usize = 64 << 10;

/// A connection's pending output: large values queued as their own segments (written with
/// vectored I/O straight from the buffers the device read into) and the buffer of framing
/// and small replies after them. Wire order: `segs` front to back, then `tail`.
#[derive(Default)]
struct Outbox {
    segs: VecDeque<Bytes>,
    seg_bytes: usize,
    tail: BytesMut,
}

impl Outbox {
    /// Queues a reply (values of [`kvproto::VECTORED_MIN_PAYLOAD`] bytes or more are not
    /// copied).
    fn push(&mut self, reply: &Reply, proto: Protocol) {
        let before = self.segs.len();
        reply.encode_vectored(proto, &mut self.tail, &mut self.segs);
        self.seg_bytes += self.segs.iter().skip(before).map(Bytes::len).sum::<usize>();
    }

    /// Bytes waiting to be written.
    fn len(&self) -> usize {
        self.seg_bytes + self.tail.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One write of what is queued; returns how many bytes the socket took.
    fn write_to(&mut self, w: &mut impl Write) -> std::io::Result<usize> {
        let n = if self.segs.is_empty() {
            w.write(&self.tail)?
        } else {
            let mut slices: Vec<IoSlice<'_>> = self
                .segs
                .iter()
                .take(MAX_IOV)
                .map(|s| IoSlice::new(s))
                .collect();
            if self.segs.len() < MAX_IOV && !self.tail.is_empty() {
                slices.push(IoSlice::new(&self.tail));
            }
            w.write_vectored(&slices)?
        };
        self.consume(n);
        Ok(n)
    }

    fn consume(&mut self, mut n: usize) {
        while n > 0 {
            match self.segs.front_mut() {
                Some(front) if n >= front.len() => {
                    n -= front.len();
                    self.seg_bytes -= front.len();
                    self.segs.pop_front();
                }
                Some(front) => {
                    front.advance(n);
                    self.seg_bytes -= n;
                    n = 0;
                }
                None => {
                    let k = n.min(self.tail.len());
                    let _ = self.tail.split_to(k);
                    n = 0;
                }
            }
        }
    }
}

struct Conn {
    id: u64,
    stream: TcpStream,
    peer: SocketAddr,
    rbuf: BytesMut,
    out: Outbox,
    parser: RequestParser,
    proto: Protocol,
    authed: bool,
    name: Option<Bytes>,
    lib_name: Option<Bytes>,
    lib_ver: Option<Bytes>,
    /// Commands sent to a worker and not answered yet, and which worker.
    in_flight: usize,
    in_flight_to: Route,
    /// Sequence number of the next command sent to a worker.
    next_seq: u64,
    /// Sequence number of the next reply to deliver.
    next_reply: u64,
    /// Replies that arrived before an earlier one (workers answer out of order).
    early: BTreeMap<u64, Reply>,
    /// Parsed requests waiting for their turn.
    backlog: VecDeque<Vec<Bytes>>,
    /// Close once the write buffer is flushed (QUIT, protocol error, peer closed).
    closing: bool,
    /// The peer closed its side: no more reads.
    eof: bool,
    /// Cluster mode flags (READONLY, LS.REPLICA).
    cluster_mode: ConnMode,
    /// Reading stopped because too many requests wait (resumed as they are answered).
    paused: bool,
    /// Inside MULTI: the queued commands.
    multi: Option<Vec<TxItem>>,
    /// A command queued inside MULTI was refused (unknown, wrong arity): EXEC aborts.
    multi_dirty: bool,
    /// The keys this connection WATCHes.
    watched: Vec<WatchedKey>,
}

/// The network thread's state.
pub struct Net {
    poll: Poll,
    listener: TcpListener,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    engine_tx: Sender<Job>,
    writer_tx: Sender<Job>,
    replies: Receiver<Done>,
    /// Reads DRAM answers whole are served here (see [`exec::try_read_now`]).
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    shutdown: Arc<AtomicBool>,
    cfg: NetConfig,
    /// Cluster mode: slot checks, CLUSTER commands, map pushes.
    cluster: Option<Gate>,
}

/// What running a connection-level command asks of the loop.
struct Local {
    reply: Option<Reply>,
    close: bool,
}

impl Net {
    /// Builds the loop around a bound listener and a poll (whose registry the waker uses).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        poll: Poll,
        mut listener: TcpListener,
        engine_tx: Sender<Job>,
        writer_tx: Sender<Job>,
        replies: Receiver<Done>,
        store: Arc<Store>,
        metrics: Arc<Metrics>,
        shutdown: Arc<AtomicBool>,
        cfg: NetConfig,
    ) -> std::io::Result<Net> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Net {
            poll,
            listener,
            conns: HashMap::new(),
            next_id: FIRST_CONN,
            engine_tx,
            writer_tx,
            replies,
            store,
            metrics,
            shutdown,
            cluster: cfg.cluster.clone().map(Gate::new),
            cfg,
        })
    }

    /// Runs until the shutdown flag is raised (SIGTERM, SHUTDOWN).
    ///
    /// # Errors
    /// A failing poll.
    pub fn run(mut self) -> std::io::Result<()> {
        let mut events = Events::with_capacity(1024);
        while !self.shutdown.load(Ordering::Acquire) {
            match self.poll.poll(&mut events, Some(POLL_TIMEOUT)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(t) => {
                        let id = t as u64;
                        if ev.is_readable() || ev.is_read_closed() {
                            self.on_readable(id);
                        }
                        if ev.is_writable() {
                            self.flush(id);
                        }
                    }
                }
            }
            self.drain_replies();
        }
        // Last words to clients still connected are not owed: their in-flight writes finish
        // in the writer thread before the engine closes.
        Ok(())
    }

    fn accept(&mut self) {
        loop {
            let (mut stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    // Out of file descriptors and the like: try again on the next event.
                    tracing::warn!("accept failed: {e}");
                    return;
                }
            };
            if protected_refuses(
                self.cfg.protected_mode,
                self.cfg.requirepass.is_some(),
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
            self.metrics
                .total_connections
                .fetch_add(1, Ordering::Relaxed);
            self.metrics
                .connected_clients
                .fetch_add(1, Ordering::Relaxed);
            self.conns.insert(
                id,
                Conn {
                    id,
                    stream,
                    peer,
                    rbuf: BytesMut::with_capacity(READ_CHUNK),
                    out: Outbox::default(),
                    parser: RequestParser::new(self.cfg.limits),
                    proto: Protocol::Resp2,
                    authed: self.cfg.requirepass.is_none(),
                    name: None,
                    lib_name: None,
                    lib_ver: None,
                    in_flight: 0,
                    in_flight_to: Route::Here,
                    next_seq: 0,
                    next_reply: 0,
                    early: BTreeMap::new(),
                    backlog: VecDeque::new(),
                    closing: false,
                    eof: false,
                    cluster_mode: ConnMode::default(),
                    paused: false,
                    multi: None,
                    multi_dirty: false,
                    watched: Vec::new(),
                },
            );
        }
    }

    fn close(&mut self, id: u64) {
        if let Some(mut c) = self.conns.remove(&id) {
            self.store.unwatch(&c.watched);
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.metrics
                .connected_clients
                .fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Reads what the socket has (unless back-pressured), then serves the requests.
    fn on_readable(&mut self, id: u64) {
        let limit = self.cfg.query_buffer_limit;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let mut over_limit = false;
        while !c.eof && !c.closing && c.backlog.len() < MAX_QUEUED_PER_CONN {
            let want = c
                .parser
                .bytes_hint(&c.rbuf)
                .unwrap_or(0)
                .clamp(READ_CHUNK, 64 << 20);
            if c.rbuf.capacity() - c.rbuf.len() < want {
                // Frame what is complete first: those bytes leave as arguments that share
                // this buffer, so growing moves only the unfinished tail.
                frame_requests(c, &self.metrics);
                let want = c
                    .parser
                    .bytes_hint(&c.rbuf)
                    .unwrap_or(0)
                    .clamp(READ_CHUNK, 64 << 20);
                // Growing may move what is still buffered: count it as copied.
                let before = c.rbuf.as_ptr();
                c.rbuf.reserve(want);
                if c.rbuf.as_ptr() != before {
                    self.metrics
                        .value_bytes_copied
                        .fetch_add(c.rbuf.len() as u64, Ordering::Relaxed);
                }
            }
            let room = (c.rbuf.capacity() - c.rbuf.len()).min(MAX_READ);
            match read_into_spare(&c.stream, &mut c.rbuf, room) {
                Ok(0) => {
                    c.eof = true;
                }
                Ok(n) => {
                    self.metrics
                        .net_input_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                    if c.rbuf.len() > limit {
                        over_limit = true;
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
        if c.backlog.len() >= MAX_QUEUED_PER_CONN {
            c.paused = true;
        }
        if over_limit {
            tracing::info!(client = id, "closing a client over the query buffer limit");
            self.metrics
                .buffer_limit_disconnects
                .fetch_add(1, Ordering::Relaxed);
            self.close(id);
            return;
        }
        self.serve(id);
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
        self.flush(id);
    }

    /// Runs backlog entries in order while each may run now.
    fn run_backlog(&mut self, id: u64) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            if c.closing {
                c.backlog.clear();
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
            if c.multi.is_some() && !is_transaction_control(&parsed) {
                // Inside MULTI nothing is in flight (MULTI waited for it): queue and answer.
                let args = c.backlog.pop_front().unwrap_or_default();
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
                    redirect = self
                        .cluster
                        .as_ref()
                        .and_then(|g| g.check(cmd, route == Route::Writer, c.cluster_mode));
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
                    } else {
                        route
                    }
                }
                _ => Route::Here,
            };
            if c.in_flight > 0 && (route == Route::Here || route != c.in_flight_to) {
                return;
            }
            let args = c.backlog.pop_front().unwrap_or_default();
            self.metrics
                .commands_processed
                .fetch_add(1, Ordering::Relaxed);
            let mut cmd = match parsed {
                Ok(cmd) => cmd,
                Err(e) => {
                    // Cluster mode's admin commands are not in kvproto's table.
                    let r = match (Admin::of(&args), &mut self.cluster) {
                        (None, _) => Reply::error(e.to_string()),
                        (Some(_), _) if !c.authed => {
                            Reply::error("NOAUTH Authentication required.")
                        }
                        (Some(_), None) => Reply::error(cluster::DISABLED_ERROR),
                        (Some(a), Some(g)) => g.admin(a, &args, &mut c.cluster_mode),
                    };
                    c.out.push(&r, c.proto);
                    continue;
                }
            };
            if let Some(r) = redirect {
                c.out.push(&r, c.proto);
                continue;
            }
            if route == Route::Here {
                if !c.authed && !allowed_before_auth(&cmd) {
                    c.out
                        .push(&Reply::error("NOAUTH Authentication required."), c.proto);
                    continue;
                }
                let out = self.local(id, cmd);
                let Some(c) = self.conns.get_mut(&id) else {
                    return;
                };
                if let Some(r) = out.reply {
                    c.out.push(&r, c.proto);
                }
                if out.close {
                    c.closing = true;
                    c.backlog.clear();
                    return;
                }
                continue;
            }
            // A read DRAM answers whole is served here when it overtakes nothing (the
            // connection has no request in flight): no hand-off to the engine thread.
            if route == Route::Engine && c.in_flight == 0 && !self.cfg.copy_values {
                if let Some(r) = exec::try_read_now(&self.store, &self.metrics, &cmd, c.proto) {
                    self.metrics
                        .value_bytes_moved
                        .fetch_add(r.payload_len() as u64, Ordering::Relaxed);
                    self.metrics
                        .reads_answered_inline
                        .fetch_add(1, Ordering::Relaxed);
                    c.out.push(&r, c.proto);
                    continue;
                }
            }
            if let Command::Set { value, .. } = &cmd {
                self.metrics
                    .value_bytes_moved
                    .fetch_add(value.len() as u64, Ordering::Relaxed);
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
            let job = Job {
                conn: id,
                proto: c.proto,
                cmd,
                seq: c.next_seq,
                tx,
            };
            c.next_seq += 1;
            let sent = match route {
                Route::Writer => self.writer_tx.send(job),
                _ => self.engine_tx.send(job),
            };
            if sent.is_err() {
                // Workers gone: the drive is shutting down.
                c.out
                    .push(&Reply::error("ERR the drive is shutting down"), c.proto);
                c.closing = true;
                return;
            }
            c.in_flight += 1;
            c.in_flight_to = route;
        }
    }

    fn drain_replies(&mut self) {
        let mut touched = Vec::new();
        while let Ok(d) = self.replies.try_recv() {
            let Some(c) = self.conns.get_mut(&d.conn) else {
                continue;
            };
            if d.seq != c.next_reply {
                c.early.insert(d.seq, d.reply);
                continue;
            }
            let mut reply = Some(d.reply);
            while let Some(r) = reply {
                c.in_flight = c.in_flight.saturating_sub(1);
                c.next_reply += 1;
                self.metrics
                    .value_bytes_moved
                    .fetch_add(r.payload_len() as u64, Ordering::Relaxed);
                c.out.push(&r, c.proto);
                reply = c.early.remove(&c.next_reply);
            }
            if touched.last() != Some(&d.conn) {
                touched.push(d.conn);
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for id in touched {
            self.run_backlog(id);
            let paused = self.conns.get_mut(&id).is_some_and(|c| {
                let p = c.paused && c.backlog.len() < MAX_QUEUED_PER_CONN;
                if p {
                    c.paused = false;
                }
                p
            });
            if paused {
                // It stopped reading under back-pressure: read (and serve) again.
                self.on_readable(id);
            } else {
                self.serve(id);
            }
        }
    }

    /// Once the peer closed and nothing is pending, close (after the last replies).
    fn finish_if_done(&mut self, id: u64) {
        if let Some(c) = self.conns.get_mut(&id) {
            if c.eof && c.in_flight == 0 && c.backlog.is_empty() {
                c.closing = true;
            }
        }
    }

    /// Writes what the socket takes; closes a closing connection once flushed.
    fn flush(&mut self, id: u64) {
        let limit = self.cfg.output_buffer_limit;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let mut dead = false;
        while !c.out.is_empty() {
            match c.out.write_to(&mut c.stream) {
                Ok(0) => {
                    dead = true;
                    break;
                }
                Ok(n) => {
                    self.metrics
                        .net_output_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    dead = true;
                    break;
                }
            }
        }
        if c.out.len() > limit {
            tracing::info!(client = id, "closing a client over the output buffer limit");
            self.metrics
                .buffer_limit_disconnects
                .fetch_add(1, Ordering::Relaxed);
            dead = true;
        }
        let done = c.closing && c.out.is_empty() && c.in_flight == 0;
        if dead || done {
            self.close(id);
        }
    }

    /// Queues a request inside MULTI and returns the reply to send now: `+QUEUED`, or the
    /// error of a request Redis refuses before queueing (unknown command, wrong arity, no
    /// authentication, another node's slot), which also makes EXEC abort. A request that
    /// fails to parse otherwise is queued and answers its error inside EXEC's reply.
    fn queue_in_multi(
        &mut self,
        id: u64,
        args: &[Bytes],
        parsed: Result<Command, kvproto::CommandError>,
    ) -> Reply {
        let Some(c) = self.conns.get_mut(&id) else {
            return Reply::ok();
        };
        let refuse = |c: &mut Conn, r: Reply| {
            c.multi_dirty = true;
            r
        };
        if let Err(e) = kvproto::command::check_arity(args) {
            if args
                .first()
                .is_some_and(|n| n.eq_ignore_ascii_case(b"exec"))
            {
                // A malformed EXEC discards the transaction at once, as Redis does.
                c.multi = None;
                c.multi_dirty = false;
                self.store.unwatch(&std::mem::take(&mut c.watched));
                let why = e.0.strip_prefix("ERR ").unwrap_or(&e.0);
                return Reply::error(format!("EXECABORT Transaction discarded because of: {why}"));
            }
            return refuse(c, Reply::error(e.to_string()));
        }
        if !c.authed {
            return refuse(c, Reply::error("NOAUTH Authentication required."));
        }
        let item = match parsed {
            Err(e) => TxItem::Answer(Reply::error(e.to_string())),
            Ok(cmd) => match route_of(&cmd) {
                Route::Here => TxItem::Answer(match cmd {
                    Command::Ping(None) => Reply::Simple(Bytes::from_static(b"PONG")),
                    Command::Ping(Some(m)) | Command::Echo(m) => Reply::Bulk(m),
                    // EXEC forgets the watches anyway.
                    Command::Unwatch => Reply::ok(),
                    other => Reply::error(format!(
                        "ERR '{}' is not allowed inside MULTI on this drive",
                        other.name()
                    )),
                }),
                route => {
                    let redirect = self
                        .cluster
                        .as_ref()
                        .and_then(|g| g.check(&cmd, route == Route::Writer, c.cluster_mode));
                    if let Some(r) = redirect {
                        return refuse(c, r);
                    }
                    match key_too_long(&cmd) {
                        Some(r) => TxItem::Answer(r),
                        None => TxItem::Run(cmd),
                    }
                }
            },
        };
        if let Some(q) = c.multi.as_mut() {
            q.push(item);
        }
        Reply::Simple(Bytes::from_static(b"QUEUED"))
    }

    /// Connection-level commands, answered on this thread.
    fn local(&mut self, id: u64, cmd: Command) -> Local {
        let reply = |r: Reply| Local {
            reply: Some(r),
            close: false,
        };
        let password = self.cfg.requirepass.clone();
        let nconns = self.conns.len();
        let Some(c) = self.conns.get_mut(&id) else {
            return Local {
                reply: None,
                close: true,
            };
        };
        match cmd {
            Command::Ping(None) => reply(Reply::Simple(Bytes::from_static(b"PONG"))),
            Command::Ping(Some(m)) | Command::Echo(m) => reply(Reply::Bulk(m)),
            Command::Quit => Local {
                reply: Some(Reply::ok()),
                close: true,
            },
            Command::Select(0) => reply(Reply::ok()),
            Command::Select(_) if self.cluster.is_some() => {
                reply(Reply::error("ERR SELECT is not allowed in cluster mode"))
            }
            Command::Select(_) => reply(Reply::error("ERR DB index is out of range")),
            Command::Auth {
                username,
                password: given,
            } => {
                let Some(pw) = password else {
                    return reply(Reply::error(
                        "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
                    ));
                };
                let user_ok = username.as_deref().is_none_or(|u| u == b"default");
                if user_ok && given.as_ref() == pw.as_bytes() {
                    c.authed = true;
                    reply(Reply::ok())
                } else {
                    reply(Reply::error(
                        "WRONGPASS invalid username-password pair or user is disabled.",
                    ))
                }
            }
            Command::Hello {
                protover,
                auth,
                setname,
            } => {
                let proto = match protover {
                    None => c.proto,
                    Some(2) => Protocol::Resp2,
                    Some(3) => Protocol::Resp3,
                    Some(_) => {
                        return reply(Reply::error("NOPROTO unsupported protocol version"));
                    }
                };
                if let Some((user, given)) = auth {
                    let ok = password.as_deref().is_some_and(|pw| {
                        user.as_ref() == b"default" && given.as_ref() == pw.as_bytes()
                    });
                    if !ok {
                        return reply(Reply::error(
                            "WRONGPASS invalid username-password pair or user is disabled.",
                        ));
                    }
                    c.authed = true;
                }
                if !c.authed {
                    return reply(Reply::error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"));
                }
                if let Some(n) = setname {
                    if !valid_client_name(&n) {
                        return reply(Reply::error("ERR Client names cannot contain spaces, newlines or special characters."));
                    }
                    c.name = Some(n);
                }
                c.proto = proto;
                let s = |v: &'static str| Reply::Bulk(Bytes::from_static(v.as_bytes()));
                reply(Reply::Map(vec![
                    (s("server"), s("redis")),
                    (s("version"), s("7.2.0")),
                    (
                        s("proto"),
                        Reply::Integer(if proto == Protocol::Resp3 { 3 } else { 2 }),
                    ),
                    (s("id"), Reply::Integer(c.id as i64)),
                    (
                        s("mode"),
                        s(if self.cluster.is_some() {
                            "cluster"
                        } else {
                            "standalone"
                        }),
                    ),
                    (s("role"), s("master")),
                    (s("modules"), Reply::Array(Vec::new())),
                ]))
            }
            Command::ClientSetName(n) => {
                if !valid_client_name(&n) {
                    return reply(Reply::error(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    ));
                }
                c.name = if n.is_empty() { None } else { Some(n) };
                reply(Reply::ok())
            }
            Command::ClientGetName => reply(c.name.clone().map_or(Reply::Null, Reply::Bulk)),
            Command::ClientSetInfo { attr, value } => {
                match attr.to_ascii_lowercase().as_slice() {
                    b"lib-name" => c.lib_name = Some(value),
                    b"lib-ver" => c.lib_ver = Some(value),
                    _ => {
                        return reply(Reply::error(format!(
                            "ERR Unrecognized option '{}'",
                            String::from_utf8_lossy(&attr)
                        )))
                    }
                }
                reply(Reply::ok())
            }
            Command::ClientId => reply(Reply::Integer(c.id as i64)),
            Command::ClientInfo => reply(Reply::Verbatim(Bytes::from(client_line(c)))),
            Command::ClientList => {
                let mut text = String::new();
                let mut ids: Vec<&u64> = self.conns.keys().collect();
                ids.sort_unstable();
                for i in ids {
                    if let Some(other) = self.conns.get(i) {
                        text.push_str(&client_line(other));
                    }
                }
                reply(Reply::Verbatim(Bytes::from(text)))
            }
            Command::CommandCount => reply(Reply::Integer(COMMANDS.len() as i64)),
            Command::CommandList => reply(Reply::Array(
                COMMANDS
                    .iter()
                    .map(|s| Reply::Bulk(Bytes::from_static(s.name.as_bytes())))
                    .collect(),
            )),
            Command::CommandInfo(names) => {
                if names.is_empty() {
                    reply(Reply::Array(
                        COMMANDS.iter().map(|s| s.info_reply()).collect(),
                    ))
                } else {
                    reply(Reply::Array(
                        names
                            .iter()
                            .map(|n| {
                                kvproto::command::lookup(n)
                                    .map_or(Reply::NullArray, |s| s.info_reply())
                            })
                            .collect(),
                    ))
                }
            }
            Command::CommandDocs(names) => {
                let specs: Vec<_> = if names.is_empty() {
                    COMMANDS.iter().collect()
                } else {
                    names
                        .iter()
                        .filter_map(|n| kvproto::command::lookup(n))
                        .collect()
                };
                reply(Reply::Map(
                    specs
                        .into_iter()
                        .map(|s| {
                            (
                                Reply::Bulk(Bytes::from_static(s.name.as_bytes())),
                                s.docs_reply(),
                            )
                        })
                        .collect(),
                ))
            }
            Command::ConfigGet(patterns) => {
                let mut pairs = Vec::new();
                for (k, v) in &self.cfg.reported {
                    if patterns
                        .iter()
                        .any(|p| kvproto::glob::glob_match(&p.to_ascii_lowercase(), k.as_bytes()))
                    {
                        pairs.push((
                            Reply::Bulk(Bytes::copy_from_slice(k.as_bytes())),
                            Reply::Bulk(Bytes::copy_from_slice(v.as_bytes())),
                        ));
                    }
                }
                reply(Reply::Map(pairs))
            }
            Command::ConfigSet(pairs) => {
                let name = pairs
                    .first()
                    .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                    .unwrap_or_default();
                reply(Reply::error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - this drive's settings are fixed at start (flags or --config)"
                )))
            }
            Command::ConfigResetStat => {
                self.metrics.reset();
                reply(Reply::ok())
            }
            Command::Shutdown { .. } => {
                tracing::info!(clients = nconns, "SHUTDOWN received");
                self.shutdown.store(true, Ordering::Release);
                Local {
                    reply: None,
                    close: true,
                }
            }
            Command::Cluster(args) => reply(match &self.cluster {
                Some(g) => g.cluster_command(&args),
                None => Reply::error(cluster::DISABLED_ERROR),
            }),
            Command::Readonly | Command::Readwrite if self.cluster.is_none() => {
                reply(Reply::error(cluster::DISABLED_ERROR))
            }
            Command::Multi if c.multi.is_some() => {
                reply(Reply::error("ERR MULTI calls can not be nested"))
            }
            Command::Multi => {
                c.multi = Some(Vec::new());
                c.multi_dirty = false;
                reply(Reply::ok())
            }
            Command::Exec if c.multi.is_none() => reply(Reply::error("ERR EXEC without MULTI")),
            Command::Exec => {
                // Only a transaction with a refused command is answered here.
                c.multi = None;
                c.multi_dirty = false;
                self.store.unwatch(&std::mem::take(&mut c.watched));
                reply(Reply::error(
                    "EXECABORT Transaction discarded because of previous errors.",
                ))
            }
            Command::Discard if c.multi.is_none() => {
                reply(Reply::error("ERR DISCARD without MULTI"))
            }
            Command::Discard => {
                c.multi = None;
                c.multi_dirty = false;
                self.store.unwatch(&std::mem::take(&mut c.watched));
                reply(Reply::ok())
            }
            Command::Watch(_) if c.multi.is_some() => {
                reply(Reply::error("ERR WATCH inside MULTI is not allowed"))
            }
            Command::Watch(keys) => {
                for k in &keys {
                    c.watched.push(self.store.watch(k));
                }
                reply(Reply::ok())
            }
            Command::Unwatch => {
                self.store.unwatch(&std::mem::take(&mut c.watched));
                reply(Reply::ok())
            }
            Command::Readonly => {
                c.cluster_mode.readonly = true;
                reply(Reply::ok())
            }
            Command::Readwrite => {
                c.cluster_mode.readonly = false;
                reply(Reply::ok())
            }
            other => reply(Reply::error(format!(
                "ERR internal: '{}' is not a connection command",
                other.name()
            ))),
        }
    }
}

/// Marks a protocol error queued behind earlier requests (never a real command name: it
/// cannot come out of the parser, which only yields what the client sent after framing, and
/// is checked before parsing).
const PROTOCOL_ERROR_MARK: &[u8] = b"\0protocol-error";

/// The commands that run at once inside MULTI instead of being queued.
fn is_transaction_control(parsed: &Result<Command, kvproto::CommandError>) -> bool {
    matches!(
        parsed,
        Ok(Command::Multi | Command::Exec | Command::Discard | Command::Watch(_) | Command::Quit)
    )
}

/// Commands a client may send before it has authenticated.
fn allowed_before_auth(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Auth { .. } | Command::Hello { .. } | Command::Quit
    )
}

/// Frames the complete requests in `c.rbuf` into the backlog (up to the backlog limit).
/// A protocol error is queued as a marker: Redis answers it after what came before it and
/// then closes, so nothing after it is framed.
fn frame_requests(c: &mut Conn, metrics: &Metrics) {
    while c.backlog.len() < MAX_QUEUED_PER_CONN && !c.closing {
        if c.backlog
            .back()
            .is_some_and(|a| a.first().is_some_and(|m| m.as_ref() == PROTOCOL_ERROR_MARK))
        {
            c.rbuf.clear();
            return;
        }
        match c.parser.parse(&mut c.rbuf) {
            Ok(Some(args)) => {
                if !args.is_empty() {
                    c.backlog.push_back(args);
                }
            }
            Ok(None) => return,
            Err(e) => {
                metrics.protocol_errors.fetch_add(1, Ordering::Relaxed);
                c.backlog.push_back(vec![
                    Bytes::from_static(PROTOCOL_ERROR_MARK),
                    Bytes::from(e.to_string()),
                ]);
                c.rbuf.clear();
                return;
            }
        }
    }
}

fn valid_client_name(n: &[u8]) -> bool {
    n.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn client_line(c: &Conn) -> String {
    let name = c
        .name
        .as_deref()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    format!(
        "id={} addr={} laddr={} fd=0 name={} db=0 qbuf={} obl={} resp={} lib-name={} lib-ver={}\n",
        c.id,
        c.peer,
        c.stream
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default(),
        name,
        c.rbuf.len(),
        c.out.len(),
        if c.proto == Protocol::Resp3 { 3 } else { 2 },
        c.lib_name
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default(),
        c.lib_ver
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default(),
    )
}

/// The error for a command with a key over [`MAX_KEY_BYTES`], if it has one.
fn key_too_long(cmd: &Command) -> Option<Reply> {
    cmd.keys()
        .iter()
        .find(|k| k.len() > MAX_KEY_BYTES)
        .map(|k| {
            Reply::error(format!(
                "ERR key of {} bytes is longer than the drive's limit of {MAX_KEY_BYTES} bytes",
                k.len()
            ))
        })
}

/// The zero-copy ablation: SET and MSET values copied into fresh buffers (counted).
fn copy_values(cmd: &mut Command, metrics: &Metrics) {
    let mut copied = 0usize;
    let mut copy = |v: &mut Bytes| {
        *v = Bytes::copy_from_slice(v);
        copied += v.len();
    };
    match cmd {
        Command::Set { value, .. } => copy(value),
        Command::MSet(pairs) => pairs.iter_mut().for_each(|(_, v)| copy(v)),
        _ => {}
    }
    metrics
        .value_bytes_copied
        .fetch_add(copied as u64, Ordering::Relaxed);
}

/// Reads from `stream` into up to `room` bytes of `buf`'s spare capacity without zeroing them
/// first (`Read::read` needs an initialised slice; zeroing up to [`MAX_READ`] bytes before
/// every read cost about 6% of the drive's CPU under a GET load).
fn read_into_spare(stream: &TcpStream, buf: &mut BytesMut, room: usize) -> std::io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    let room = room.min(spare.len());
    // SAFETY: `spare` is the buffer's spare capacity, valid for writes of `room` bytes;
    // recv writes at most `room` bytes there.
    let n = unsafe { libc::recv(stream.as_raw_fd(), spare.as_mut_ptr().cast(), room, 0) };
    let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    // SAFETY: recv initialised the `n <= room` bytes after the buffer's length.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// The thread that answers `cmd`.
fn route_of(cmd: &Command) -> Route {
    match cmd {
        Command::Get(_)
        | Command::MGet(_)
        | Command::Strlen(_)
        | Command::Exists(_)
        | Command::GetRange { .. }
        | Command::HGet { .. }
        | Command::HMGet { .. }
        | Command::HGetAll(_)
        | Command::HLen(_)
        | Command::HExists { .. }
        | Command::ZScore { .. }
        | Command::ZCard(_)
        | Command::ZRangeByScore { .. }
        | Command::Scan { .. }
        | Command::Range { .. }
        | Command::DbSize
        | Command::Ttl { .. }
        | Command::Type(_)
        | Command::Keys(_)
        | Command::Info(_) => Route::Engine,
        Command::Set { .. }
        | Command::MSet(_)
        | Command::Del(_)
        | Command::IncrBy { .. }
        | Command::FlushAll
        | Command::HSet { .. }
        | Command::HDel { .. }
        | Command::ZAdd { .. }
        | Command::ZRem { .. }
        | Command::Expire { .. }
        | Command::Persist(_)
        | Command::GetEx { .. }
        | Command::SetNx { .. }
        | Command::GetDel(_)
        | Command::Append { .. }
        | Command::Rename { .. } => Route::Writer,
        _ => Route::Here,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that takes at most `step` bytes per write, across all slices.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.step);
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
            let mut left = self.step;
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(left);
                self.got.extend_from_slice(&b[..k]);
                n += k;
                left -= k;
                if left == 0 {
                    break;
                }
            }
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn outbox_writes_replies_in_order_through_partial_writes() {
        let big = Bytes::from((0..20_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let replies = [
            Reply::ok(),
            Reply::Bulk(big.clone()),
            Reply::Array(vec![
                Reply::bulk("x"),
                Reply::Bulk(big.clone()),
                Reply::Null,
            ]),
            Reply::Integer(7),
        ];
        for step in [1, 7, 4096, 1 << 20] {
            let mut out = Outbox::default();
            let mut want = BytesMut::new();
            for r in &replies {
                out.push(r, Protocol::Resp2);
                r.encode(Protocol::Resp2, &mut want);
            }
            assert_eq!(out.len(), want.len());
            let mut sock = Trickle {
                got: Vec::new(),
                step,
            };
            while !out.is_empty() {
                let n = out.write_to(&mut sock).unwrap_or(0);
                assert!(n > 0);
            }
            assert_eq!(sock.got, want.to_vec(), "step {step}");
        }
    }

    #[test]
    fn protected_mode_refuses_only_remote_clients_without_a_password() {
        let remote: SocketAddr = "10.0.0.5:5000".parse().unwrap_or_else(|_| unreachable!());
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap_or_else(|_| unreachable!());
        let local6: SocketAddr = "[::1]:5000".parse().unwrap_or_else(|_| unreachable!());
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000"
            .parse()
            .unwrap_or_else(|_| unreachable!());
        assert!(protected_refuses(true, false, &remote));
        assert!(!protected_refuses(true, true, &remote));
        assert!(!protected_refuses(false, false, &remote));
        assert!(!protected_refuses(true, false, &local));
        assert!(!protected_refuses(true, false, &local6));
        assert!(!protected_refuses(true, false, &mapped));
    }

    #[test]
    fn client_names_refuse_spaces_and_control_bytes() {
        assert!(valid_client_name(b"bench-1"));
        assert!(!valid_client_name(b"a b"));
        assert!(!valid_client_name(b"a\nb"));
    }
}
