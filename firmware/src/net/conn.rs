//! One client connection's state: its buffers, its framer, its order of replies, and the
//! output queue written with vectored I/O.

use std::collections::{BTreeMap, VecDeque};
use std::io::{IoSlice, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use kvproto::{Protocol, Reply, RequestParser};
use mio::net::TcpStream;

use super::limits::request_cost;
use super::pubsub::Subscriptions;
use super::route::Route;
use super::transport::Transport;
use super::MAX_QUEUED_PER_CONN;
use crate::acl::Classes;
use crate::cluster::ConnMode;
use crate::exec::{Job, TxItem};
use crate::info::{CommandStats, Metrics};
use crate::store::WatchedKey;

/// Most segments handed to one vectored write.
const MAX_IOV: usize = 64;
/// A connection's pending output: large values queued as their own segments (written with
/// vectored I/O straight from the buffers the device read into) and the buffer of framing
/// and small replies after them. Wire order: `segs` front to back, then `tail`.
#[derive(Default)]
pub(super) struct Outbox {
    segs: VecDeque<Bytes>,
    seg_bytes: usize,
    tail: BytesMut,
}

impl Outbox {
    /// Queues a reply (values of [`kvproto::VECTORED_MIN_PAYLOAD`] bytes or more are not
    /// copied).
    pub(super) fn push(&mut self, reply: &Reply, proto: Protocol) {
        let before = self.segs.len();
        reply.encode_vectored(proto, &mut self.tail, &mut self.segs);
        self.seg_bytes += self.segs.iter().skip(before).map(Bytes::len).sum::<usize>();
    }

    /// Bytes waiting to be written.
    pub(super) fn len(&self) -> usize {
        self.seg_bytes + self.tail.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One write of what is queued; returns how many bytes the socket took.
    pub(super) fn write_to(&mut self, w: &mut impl Write) -> std::io::Result<usize> {
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

/// Bookkeeping bytes counted per held pub/sub message on top of its payload.
const HELD_PUSH_OVERHEAD: usize = 64;

/// Who a new connection runs as before any AUTH.
pub(super) struct ConnAuth {
    /// Whether it may run commands already (no password for the default user).
    pub(super) authed: bool,
    /// The user's name.
    pub(super) user: Arc<str>,
    /// The command classes that user may not run.
    pub(super) denied: Classes,
    /// Whether that user may use pub/sub channels (`&*`).
    pub(super) all_channels: bool,
}

/// A command sent to another thread, kept until its reply arrives (INFO commandstats and
/// SLOWLOG measure it from dispatch to reply).
pub(super) struct InFlight {
    /// Its row of the command table (`None`: not counted, e.g. cluster admin commands).
    pub(super) row: Option<usize>,
    /// When it left `ls-net`.
    pub(super) started: Instant,
    /// The request, for SLOWLOG.
    pub(super) args: Vec<Bytes>,
}

pub(super) struct Conn {
    pub(super) id: u64,
    /// The socket, plain or under TLS.
    pub(super) transport: Transport,
    pub(super) peer: SocketAddr,
    pub(super) rbuf: BytesMut,
    pub(super) out: Outbox,
    pub(super) parser: RequestParser,
    pub(super) proto: Protocol,
    pub(super) authed: bool,
    /// The user the connection runs as (`default` until AUTH names another).
    pub(super) user: Arc<str>,
    /// The command classes that user may not run (empty for `+@all`).
    pub(super) denied: Classes,
    pub(super) name: Option<Bytes>,
    pub(super) lib_name: Option<Bytes>,
    pub(super) lib_ver: Option<Bytes>,
    /// Commands sent to a worker and not answered yet, and which worker.
    pub(super) in_flight: usize,
    pub(super) in_flight_to: Route,
    /// Sequence number of the next command sent to a worker.
    pub(super) next_seq: u64,
    /// Sequence number of the next reply to deliver.
    pub(super) next_reply: u64,
    /// Sequence number of the last command handed to a worker thread as a job (`None`:
    /// none yet). A read runs on the network thread only once that job is answered
    /// ([`Conn::resolves_in_order_here`]).
    pub(super) last_job: Option<u64>,
    /// Replies that arrived before an earlier one (workers answer out of order).
    pub(super) early: BTreeMap<u64, Reply>,
    /// Parsed requests waiting for their turn.
    pub(super) backlog: VecDeque<Vec<Bytes>>,
    /// Close once the write buffer is flushed (QUIT, protocol error, peer closed).
    pub(super) closing: bool,
    /// The peer closed its side: no more reads.
    pub(super) eof: bool,
    /// Cluster mode flags (READONLY, LS.REPLICA).
    pub(super) cluster_mode: ConnMode,
    /// Reading stopped because too many requests wait (resumed as they are answered).
    pub(super) paused: bool,
    /// Inside MULTI: the queued commands.
    pub(super) multi: Option<Vec<TxItem>>,
    /// A command queued inside MULTI was refused (unknown, wrong arity): EXEC aborts.
    pub(super) multi_dirty: bool,
    /// The keys this connection WATCHes.
    pub(super) watched: Vec<WatchedKey>,
    /// When it last sent or took bytes (the idle `timeout`).
    pub(super) last_active: Instant,
    /// Bytes of framed requests not answered yet (backlog and in flight; see
    /// `limits::request_cost`).
    pub(super) pending_bytes: usize,
    /// The cost of each request in flight, in order (released as replies arrive).
    pub(super) inflight_costs: VecDeque<usize>,
    /// What the drive-wide budget counts for this connection now.
    pub(super) held: usize,
    /// Requests framed since it connected.
    pub(super) framed: u64,
    /// Jobs its worker's queue had no room for, in order (counted in flight; nothing else
    /// runs before they leave).
    pub(super) stalled: Option<(Route, VecDeque<Job>)>,
    /// Its latest commands wait in this turn's inline write group (`Net::inline_batch`):
    /// nothing else of it runs until the group has answered them or passed them on.
    pub(super) in_batch: bool,
    /// A blocking command in flight (its sequence number and cancellation handle): nothing
    /// more of this connection runs until it is answered, and closing cancels it.
    pub(super) blocked: Option<(u64, Arc<crate::blocking::BlockHandle>)>,
    /// Since when its output has been over the soft limit.
    pub(super) soft_since: Option<Instant>,
    /// Reading waits for the drive-wide budget.
    pub(super) budget_paused: bool,
    /// Whether the user may use pub/sub channels (`&*`).
    pub(super) all_channels: bool,
    /// Channels and patterns it is subscribed to.
    pub(super) subs: Subscriptions,
    /// `CLIENT NO-EVICT on` (accepted and shown; the drive evicts no client for memory).
    pub(super) no_evict: bool,
    /// `CLIENT NO-TOUCH on` (accepted and shown; the drive keeps no access times).
    pub(super) no_touch: bool,
    /// When it connected (CLIENT LIST `age`).
    pub(super) created: Instant,
    /// The commandstats row of the last command it ran (CLIENT LIST `cmd`).
    pub(super) last_cmd: Option<usize>,
    /// The commands in flight, in order (see [`InFlight`]).
    pub(super) inflight_meta: VecDeque<InFlight>,
    /// Pub/sub messages waiting for the replies of the commands sent before their PUBLISH
    /// ran (RESP3 lets a subscriber have commands in flight): each with the sequence number
    /// of the first command sent after it.
    pub(super) held_pushes: VecDeque<(u64, Reply)>,
    /// Bytes of `held_pushes` (counted against the output limit).
    pub(super) held_bytes: usize,
}

impl Conn {
    /// A connection just accepted.
    /// A new connection's state (`auth`: who it runs as until AUTH).
    pub(super) fn new(
        id: u64,
        transport: Transport,
        peer: SocketAddr,
        parser: RequestParser,
        auth: ConnAuth,
        now: Instant,
    ) -> Conn {
        Conn {
            id,
            transport,
            peer,
            // Allocated at the first read: an idle client holds no buffer.
            rbuf: BytesMut::new(),
            out: Outbox::default(),
            parser,
            proto: Protocol::Resp2,
            authed: auth.authed,
            user: auth.user,
            denied: auth.denied,
            name: None,
            lib_name: None,
            lib_ver: None,
            in_flight: 0,
            in_flight_to: Route::Here,
            next_seq: 0,
            next_reply: 0,
            last_job: None,
            early: BTreeMap::new(),
            backlog: VecDeque::new(),
            closing: false,
            eof: false,
            cluster_mode: ConnMode::default(),
            paused: false,
            multi: None,
            multi_dirty: false,
            watched: Vec::new(),
            last_active: now,
            pending_bytes: 0,
            inflight_costs: VecDeque::new(),
            held: 0,
            framed: 0,
            stalled: None,
            in_batch: false,
            blocked: None,
            soft_since: None,
            budget_paused: false,
            all_channels: auth.all_channels,
            subs: Subscriptions::default(),
            no_evict: false,
            no_touch: false,
            created: now,
            last_cmd: None,
            inflight_meta: VecDeque::new(),
            held_pushes: VecDeque::new(),
            held_bytes: 0,
        }
    }

    /// Takes the next request off the backlog, with its cost (no longer pending).
    pub(super) fn take_request(&mut self) -> (Vec<Bytes>, usize) {
        let args = self.backlog.pop_front().unwrap_or_default();
        let cost = request_cost(&args);
        self.pending_bytes = self.pending_bytes.saturating_sub(cost);
        (args, cost)
    }

    /// Counts a request whose reply the cluster map's saver thread sends once the map file
    /// is durable (a map push, `CLUSTER SETSLOT NODE`): the next sequence number is its.
    pub(super) fn defer_to_saver(&mut self, cost: usize, row: Option<usize>, now: Instant) {
        self.next_seq += 1;
        self.hand_off(
            Route::Admin,
            cost,
            InFlight {
                row,
                started: now,
                args: Vec::new(),
            },
        );
    }

    /// Counts a request handed to `route` (a worker's queue, or the network thread's write
    /// group): in flight until its reply arrives, its bytes held, its timing kept.
    /// Whether a read resolved on the network thread now comes after every earlier command
    /// of this connection took its view: true unless a job handed to a worker thread is
    /// still unanswered (a worker resolves its reads when it gets to them, maybe after a
    /// later read resolved here, and a pipeline of reads must not see the store go back in
    /// time). Reads started here resolve at once, in order, so they do not count.
    pub(super) fn resolves_in_order_here(&self) -> bool {
        self.last_job.is_none_or(|s| self.next_reply > s)
    }

    /// Takes the next sequence number for a request whose reply comes later (from `route`,
    /// or held in [`Conn::early`] until the replies before it are out): counted in flight.
    pub(super) fn next_in_flight(&mut self, route: Route, cost: usize, meta: InFlight) -> u64 {
        self.hand_off(route, cost, meta);
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    pub(super) fn hand_off(&mut self, route: Route, cost: usize, meta: InFlight) {
        self.in_flight += 1;
        self.in_flight_to = route;
        self.hold_in_flight(cost);
        self.inflight_meta.push_back(meta);
    }

    /// A request of `cost` went to a worker: pending until its reply arrives.
    pub(super) fn hold_in_flight(&mut self, cost: usize) {
        self.pending_bytes += cost;
        self.inflight_costs.push_back(cost);
    }

    /// Delivers a pub/sub message: after the replies of every command sent so far (held
    /// until they are written, if some are in flight), before the replies of any sent later.
    pub(super) fn deliver_push(&mut self, push: Reply) {
        if self.next_reply >= self.next_seq {
            self.out.push(&push, self.proto);
        } else {
            self.held_bytes += push.payload_len() + HELD_PUSH_OVERHEAD;
            self.held_pushes.push_back((self.next_seq, push));
        }
    }

    /// Writes the held messages whose earlier replies have all been written.
    pub(super) fn release_pushes(&mut self) {
        while self
            .held_pushes
            .front()
            .is_some_and(|(mark, _)| *mark <= self.next_reply)
        {
            if let Some((_, push)) = self.held_pushes.pop_front() {
                self.held_bytes = self
                    .held_bytes
                    .saturating_sub(push.payload_len() + HELD_PUSH_OVERHEAD);
                self.out.push(&push, self.proto);
            }
        }
    }

    /// Output bytes waiting: the output buffer and held messages.
    pub(super) fn output_len(&self) -> usize {
        self.out.len() + self.held_bytes
    }

    /// The oldest request in flight was answered.
    pub(super) fn answered(&mut self) {
        let cost = self.inflight_costs.pop_front().unwrap_or(0);
        self.pending_bytes = self.pending_bytes.saturating_sub(cost);
    }
}

/// Marks a protocol error queued behind earlier requests (never a real command name: it
/// cannot come out of the parser, which only yields what the client sent after framing, and
/// is checked before parsing).
pub(super) const PROTOCOL_ERROR_MARK: &[u8] = b"\0protocol-error";

/// Frames the complete requests in `c.rbuf` into the backlog (up to the backlog limit).
/// A protocol error is queued as a marker: Redis answers it after what came before it and
/// then closes, so nothing after it is framed.
///
/// Before AUTH (a password set), requests are framed one at a time under Redis 7.2's caps
/// for unauthenticated clients, so an AUTH lifts the caps for the requests after it.
pub(super) fn frame_requests(c: &mut Conn, metrics: &Metrics) {
    while c.backlog.len() < MAX_QUEUED_PER_CONN && !c.closing && (c.authed || c.backlog.is_empty())
    {
        if c.backlog
            .back()
            .is_some_and(|a| a.first().is_some_and(|m| m.as_ref() == PROTOCOL_ERROR_MARK))
        {
            c.rbuf.clear();
            return;
        }
        c.parser.set_unauthenticated(!c.authed);
        match c.parser.parse(&mut c.rbuf) {
            Ok(Some(args)) => {
                if !args.is_empty() {
                    c.pending_bytes += request_cost(&args);
                    c.framed += 1;
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

/// Reads from `stream` into up to `room` bytes of `buf`'s spare capacity without zeroing them
/// first (`Read::read` needs an initialised slice; zeroing up to [`super::MAX_READ`] bytes before
/// every read cost about 6% of the drive's CPU under a GET load).
pub(super) fn read_into_spare(
    stream: &TcpStream,
    buf: &mut BytesMut,
    room: usize,
) -> std::io::Result<usize> {
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

pub(super) fn valid_client_name(n: &[u8]) -> bool {
    n.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// The drive's address a client connected to (CLIENT LIST `laddr`, CLIENT KILL LADDR).
pub(super) fn local_addr(c: &Conn) -> String {
    c.transport
        .tcp()
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// CLIENT LIST `flags`: `P` subscribed, `x` in MULTI, `e` no-evict, `T` no-touch, `N` none.
fn client_flags(c: &Conn) -> String {
    let mut f = String::new();
    if c.subs.count() > 0 {
        f.push('P');
    }
    if c.multi.is_some() {
        f.push('x');
    }
    if c.blocked.is_some() {
        f.push('b');
    }
    if c.no_evict {
        f.push('e');
    }
    if c.no_touch {
        f.push('T');
    }
    if f.is_empty() {
        f.push('N');
    }
    f
}

/// One line of CLIENT LIST / CLIENT INFO, with Redis 7.2's fields in its order. `fd` is the
/// socket's descriptor; the memory fields count the drive's own buffers (`argv-mem`: the
/// bytes of requests framed and not answered; `multi-mem`: 0; `tot-mem`: buffers plus
/// pending requests), `redir` is always -1 (no client-side caching).
pub(super) fn client_line(c: &Conn, now: Instant) -> String {
    let name = c
        .name
        .as_deref()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    let age = now.saturating_duration_since(c.created).as_secs();
    let idle = now.saturating_duration_since(c.last_active).as_secs();
    let multi = c
        .multi
        .as_ref()
        .map_or(-1, |q| i64::try_from(q.len()).unwrap_or(i64::MAX));
    let qbuf_free = c.rbuf.capacity() - c.rbuf.len();
    let tot_mem = c.rbuf.capacity() + c.output_len() + c.pending_bytes;
    format!(
        "id={} addr={} laddr={} fd={} name={} age={age} idle={idle} flags={} db=0 sub={} psub={} ssub=0 multi={multi} qbuf={} qbuf-free={qbuf_free} argv-mem={} multi-mem=0 rbs={} rbp=0 obl={} oll=0 omem={} tot-mem={tot_mem} events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={}\n",
        c.id,
        c.peer,
        local_addr(c),
        c.transport.tcp().as_raw_fd(),
        name,
        client_flags(c),
        c.subs.channels.len(),
        c.subs.patterns.len(),
        c.rbuf.len(),
        c.pending_bytes,
        c.rbuf.capacity(),
        c.out.len(),
        c.output_len(),
        c.last_cmd
            .map_or_else(|| "NULL".to_owned(), CommandStats::row_name),
        c.user,
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
    fn client_names_refuse_spaces_and_control_bytes() {
        assert!(valid_client_name(b"bench-1"));
        assert!(!valid_client_name(b"a b"));
        assert!(!valid_client_name(b"a\nb"));
    }
}
