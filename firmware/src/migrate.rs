//! MIGRATE: moves keys to another server (a drive or redis-server) in one step on the
//! writer thread, as Redis does on its one thread. The keys are serialized inside the
//! writer's current group (DUMP, with their remaining TTL), sent to the target as one
//! pipeline of RESTORE-ASKING over a blocking connection (connect and each read bounded by
//! the command's timeout), and, unless COPY, deleted in the same group once the target
//! accepted them. No other command runs on the writer meanwhile, so no write can land between
//! the copy and the delete; the writer is stalled for the round trip (as Redis's main thread
//! is), which is why MIGRATE is for moving slots, not for everyday traffic. Connections are
//! kept per target and reused while they are used at least every [`IDLE_CLOSE`] (Redis keeps
//! them 10 s), so moving a slot's keys one MIGRATE at a time does not open a connection each
//! time; a kept connection that fails is replaced once, as Redis retries once. With the
//! `REPLICA host port` extension the keys go to the target's replicas first, in the same
//! stall (see [`migrate`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kvproto::command::Migrate;
use kvproto::Reply;

use crate::store::{Result, WriteGroup};

/// Tries of a connect that a signal interrupts.
const CONNECT_ATTEMPTS: usize = 3;

/// Redis's reply when the target cannot be reached in time.
const CONNECT_ERROR: &str = "IOERR error or timeout connecting to the client";
/// Redis's reply when the target does not answer in time.
const READ_ERROR: &str = "IOERR error or timeout reading to target instance";
/// Redis's reply when the target cannot be written to in time.
const WRITE_ERROR: &str = "IOERR error or timeout writing to target instance";

/// A kept connection unused this long is closed rather than reused.
const IDLE_CLOSE: Duration = Duration::from_secs(10);

/// A kept connection to a target: the database it last selected and when it was last used.
struct Kept {
    conn: TcpStream,
    db: Option<i64>,
    used: Instant,
}

thread_local! {
    /// The writer thread's connections, by target (`host:port` as given).
    static KEPT: RefCell<HashMap<(Bytes, Bytes), Kept>> = RefCell::new(HashMap::new());
}

/// Runs MIGRATE in `g`: `+OK`, `+NOKEY` when none of the keys exists, or an error reply.
///
/// With `REPLICA host port` options (a LightStore extension), each replica of the target gets
/// the keys first, always replacing what it holds: while a key is still here, this drive is
/// its authority, so nothing newer can be on a replica of the target. Then the target gets
/// them, as without the option. A key that does not move (a replica or the target refused
/// it, or could not be reached) is deleted again from every destination that may hold a copy
/// ([`undo`]), before this returns and while the writer is still stalled: no client write
/// can change the key meanwhile, so no copy is left behind to come back after a later
/// delete here.
///
/// # Errors
/// Engine errors of the group (reading or deleting the keys).
pub fn migrate(g: &mut WriteGroup<'_>, m: &Migrate) -> Result<Reply> {
    let mut moving: Vec<(&Bytes, Vec<u8>, u64)> = Vec::new();
    for k in &m.keys {
        if let Some((payload, ttl)) = g.dump_with_ttl(k)? {
            moving.push((k, payload, ttl));
        }
    }
    if moving.is_empty() {
        return Ok(Reply::Simple(Bytes::from_static(b"NOKEY")));
    }
    let timeout = Duration::from_millis(m.timeout_ms);
    let all: Vec<&Bytes> = moving.iter().map(|(k, _, _)| *k).collect();
    // Destinations that may hold copies of the keys so far.
    let mut copied: Vec<Destination<'_>> = Vec::new();
    // Every replica gets the same commands (always replacing): encoded once.
    let (replica_body, n) = if m.replicas.is_empty() {
        (BytesMut::new(), 0)
    } else {
        restore_body(&moving, true)
    };
    for (host, port) in &m.replicas {
        let to = Destination { host, port };
        let (refused, reached) = match send(&to, m, &replica_body, n, timeout) {
            Ok((replies, _)) => (
                replies.iter().find(|r| r.is_error()).map(|r| match r {
                    Reply::Error(e) => e.to_vec(),
                    _ => Vec::new(),
                }),
                true,
            ),
            Err(e) => (Some(e.text.as_bytes().to_vec()), e.reached),
        };
        let reply = refused.map(|e| replica_error(&to, &e));
        if reached {
            copied.push(to);
        }
        if let Some(reply) = reply {
            return Ok(undo(&copied, m, &all, timeout).unwrap_or(reply));
        }
    }
    let to = Destination {
        host: &m.host,
        port: &m.port,
    };
    let (body, n) = restore_body(&moving, m.replace);
    let (replies, preamble) = match send(&to, m, &body, n, timeout) {
        Ok(done) => done,
        Err(e) => {
            // The target may have restored some keys before the connection failed.
            if e.reached {
                copied.push(to);
            }
            return Ok(undo(&copied, m, &all, timeout).unwrap_or_else(|| Reply::error(e.text)));
        }
    };
    // AUTH and SELECT first: an error there moved nothing.
    for r in &replies[..preamble] {
        if let Reply::Error(e) = r {
            let reply = target_error(e);
            return Ok(undo(&copied, m, &all, timeout).unwrap_or(reply));
        }
    }
    let mut first_error = None;
    let mut moved: Vec<Bytes> = Vec::new();
    let mut stayed: Vec<&Bytes> = Vec::new();
    for ((k, _, _), r) in moving.iter().zip(&replies[preamble..]) {
        match r {
            Reply::Error(e) => {
                first_error.get_or_insert_with(|| target_error(e));
                stayed.push(k);
            }
            _ => moved.push((*k).clone()),
        }
    }
    if !stayed.is_empty() {
        if let Some(failed) = undo(&copied, m, &stayed, timeout) {
            first_error = Some(failed);
        }
    }
    if !m.copy && !moved.is_empty() {
        g.delete(&moved)?;
    }
    Ok(first_error.unwrap_or_else(Reply::ok))
}

/// Deletes `keys` again from every destination in `copied` (after ASKING: they import the
/// slot), the keys having stayed here. `None` when every destination answered; otherwise the
/// error to return, which names the destinations that may still hold copies (logged too).
fn undo(
    copied: &[Destination<'_>],
    m: &Migrate,
    keys: &[&Bytes],
    timeout: Duration,
) -> Option<Reply> {
    let mut body = BytesMut::new();
    for k in keys {
        kvproto::encode_command(&[&b"ASKING"[..]], &mut body);
        kvproto::encode_command(&[&b"DEL"[..], k], &mut body);
    }
    let mut left: Vec<String> = Vec::new();
    for to in copied {
        // Only the DELs count: ASKING is refused by a server not in cluster mode (a plain
        // drive or redis-server as MIGRATE's target), where the DEL needs no ASKING.
        let ok = send(to, m, &body, 2 * keys.len(), timeout).is_ok_and(|(replies, preamble)| {
            !replies[preamble..]
                .iter()
                .skip(1)
                .step_by(2)
                .any(Reply::is_error)
        });
        if !ok {
            left.push(format!(
                "{}:{}",
                String::from_utf8_lossy(to.host),
                String::from_utf8_lossy(to.port)
            ));
        }
    }
    if left.is_empty() {
        return None;
    }
    tracing::error!(
        destinations = %left.join(" "),
        keys = keys.len(),
        "MIGRATE failed and could not delete the copies it made: those destinations may hold stale keys"
    );
    Some(Reply::error(format!(
        "ERR MIGRATE failed, and copies of {} key(s) it made may remain on {} (delete them there)",
        keys.len(),
        left.join(", ")
    )))
}

/// The RESTORE-ASKING commands that carry `moving` (with REPLACE when `replace`), encoded,
/// and how many there are.
fn restore_body(moving: &[(&Bytes, Vec<u8>, u64)], replace: bool) -> (BytesMut, usize) {
    let mut out = BytesMut::new();
    for (k, payload, ttl) in moving {
        let ttl = ttl.to_string();
        let mut args: Vec<&[u8]> = vec![b"RESTORE-ASKING", k, ttl.as_bytes(), payload];
        if replace {
            args.push(b"REPLACE");
        }
        kvproto::encode_command(&args, &mut out);
    }
    (out, moving.len())
}

/// Where one MIGRATE sends its keys: the target, or one of the target's replicas.
struct Destination<'a> {
    host: &'a Bytes,
    port: &'a Bytes,
}

/// Sends `body` (`n` encoded commands) to `to` over its kept connection (or a fresh one),
/// after AUTH and SELECT as needed, and keeps the connection for the next call: the replies
/// and how many came before the body's, or Redis's I/O error text.
fn send(
    to: &Destination<'_>,
    m: &Migrate,
    body: &BytesMut,
    n: usize,
    timeout: Duration,
) -> std::result::Result<(Vec<Reply>, usize), SendError> {
    let target = (to.host.clone(), to.port.clone());
    let kept = KEPT.with(|k| {
        let mut k = k.borrow_mut();
        k.retain(|_, c| c.used.elapsed() < IDLE_CLOSE);
        k.remove(&target)
    });
    // A kept connection the target closed meanwhile is dropped before use. One that fails
    // while the request is being written is replaced once; one that fails later is not
    // (the target may have restored the keys: a second try would meet them), as in Redis.
    let kept = kept.filter(|c| still_open(&c.conn));
    let (replies, preamble, kept) = match kept {
        Some(c) => match exchange(c, m, body, n, timeout) {
            Ok(done) => done,
            Err(WRITE_ERROR) => {
                tracing::warn!("MIGRATE: a kept connection failed; trying a fresh one");
                fresh(to, m, body, n, timeout)?
            }
            Err(text) => {
                return Err(SendError {
                    text,
                    reached: true,
                })
            }
        },
        None => fresh(to, m, body, n, timeout)?,
    };
    KEPT.with(|k| k.borrow_mut().insert(target, kept));
    Ok((replies, preamble))
}

/// Why [`send`] failed: Redis's I/O error text, and whether the destination may have taken
/// some of the commands (false only when no connection could be made).
#[derive(Debug)]
struct SendError {
    text: &'static str,
    reached: bool,
}

/// Whether a kept connection is still open: nothing to read and no end of stream.
fn still_open(conn: &TcpStream) -> bool {
    if conn.set_nonblocking(true).is_err() {
        return false;
    }
    let mut one = [0u8; 1];
    let open = matches!(conn.peek(&mut one), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    conn.set_nonblocking(false).is_ok() && open
}

/// A new connection, then [`exchange`].
fn fresh(
    to: &Destination<'_>,
    m: &Migrate,
    body: &BytesMut,
    n: usize,
    timeout: Duration,
) -> std::result::Result<(Vec<Reply>, usize, Kept), SendError> {
    let conn = connect(to.host, to.port, timeout).map_err(|text| SendError {
        text,
        reached: false,
    })?;
    exchange(
        Kept {
            conn,
            db: None,
            used: Instant::now(),
        },
        m,
        body,
        n,
        timeout,
    )
    .map_err(|text| SendError {
        text,
        reached: true,
    })
}

/// Sends the AUTH (if any), the SELECT (when the connection has another database
/// selected) and `body` (`n` commands) as one pipeline and reads their replies: the replies,
/// how many came before the body's, and the connection to keep.
fn exchange(
    mut kept: Kept,
    m: &Migrate,
    body: &BytesMut,
    n: usize,
    timeout: Duration,
) -> std::result::Result<(Vec<Reply>, usize, Kept), &'static str> {
    let ready = kept.conn.set_read_timeout(Some(timeout)).is_ok()
        && kept.conn.set_write_timeout(Some(timeout)).is_ok();
    if !ready {
        return Err(WRITE_ERROR);
    }
    let mut out = BytesMut::new();
    let mut preamble = 0usize;
    if let Some((user, pass)) = &m.auth {
        match user {
            Some(u) => kvproto::encode_command(&[&b"AUTH"[..], u, pass], &mut out),
            None => kvproto::encode_command(&[&b"AUTH"[..], pass], &mut out),
        }
        preamble += 1;
    }
    if kept.db != Some(m.db) {
        let db = m.db.to_string();
        kvproto::encode_command(&[&b"SELECT"[..], db.as_bytes()], &mut out);
        preamble += 1;
    }
    out.extend_from_slice(body);
    if kept.conn.write_all(&out).is_err() {
        return Err(WRITE_ERROR);
    }
    let replies = read_replies(&mut kept.conn, preamble + n).ok_or(READ_ERROR)?;
    if !replies[..preamble].iter().any(Reply::is_error) {
        kept.db = Some(m.db);
    }
    kept.used = Instant::now();
    Ok((replies, preamble, kept))
}

/// The error when a replica of the target could not take the keys (nothing moved).
fn replica_error(to: &Destination<'_>, e: &[u8]) -> Reply {
    Reply::error(format!(
        "ERR Replica {}:{} of the target replied with error: {}",
        String::from_utf8_lossy(to.host),
        String::from_utf8_lossy(to.port),
        String::from_utf8_lossy(e)
    ))
}

/// The error Redis replies with when the target refused a step.
fn target_error(e: &[u8]) -> Reply {
    Reply::error(format!(
        "ERR Target instance replied with error: {}",
        String::from_utf8_lossy(e)
    ))
}

/// A blocking connection to `host:port` with `timeout` on connect, reads and writes; the
/// error is Redis's reply: an address that does not resolve or a connect that times out is
/// "connecting", a refused connection "writing" (redis-server 7.0 connects without waiting
/// and meets the refusal when it writes).
fn connect(
    host: &[u8],
    port: &[u8],
    timeout: Duration,
) -> std::result::Result<TcpStream, &'static str> {
    let addrs: Vec<SocketAddr> = std::str::from_utf8(host)
        .ok()
        .zip(
            std::str::from_utf8(port)
                .ok()
                .and_then(|p| p.parse::<u16>().ok()),
        )
        .and_then(|(h, p)| (h, p).to_socket_addrs().ok())
        .map(Iterator::collect)
        .unwrap_or_default();
    let mut reply = CONNECT_ERROR;
    // A signal to the process interrupts a connect as it does a read: try again.
    let attempts = addrs
        .iter()
        .flat_map(|a| std::iter::repeat_n(a, CONNECT_ATTEMPTS));
    for a in attempts {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(conn) => {
                let ready = conn.set_read_timeout(Some(timeout)).is_ok()
                    && conn.set_write_timeout(Some(timeout)).is_ok();
                if !ready {
                    return Err(WRITE_ERROR);
                }
                let _ = conn.set_nodelay(true);
                return Ok(conn);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                reply = CONNECT_ERROR;
                break;
            }
            Err(_) => {
                reply = WRITE_ERROR;
                break;
            }
        }
    }
    Err(reply)
}

/// Reads `n` RESP2 replies; `None` on a timeout, a closed connection or bytes that are not
/// RESP.
fn read_replies(conn: &mut TcpStream, n: usize) -> Option<Vec<Reply>> {
    let mut buf = BytesMut::with_capacity(4096);
    let mut out = Vec::with_capacity(n);
    let mut chunk = [0u8; 16 << 10];
    while out.len() < n {
        match kvproto::client::decode_resp2_reply(&mut buf) {
            Ok(Some(r)) => {
                out.push(r);
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, got = out.len(), of = n, "MIGRATE: the target's reply is not RESP");
                return None;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) => {
                tracing::warn!(
                    got = out.len(),
                    of = n,
                    "MIGRATE: the target closed the connection"
                );
                return None;
            }
            // A signal to the process (the drive handles some) interrupts the read: read on.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, got = out.len(), of = n, "MIGRATE: reading the target's replies failed");
                return None;
            }
            Ok(got) => buf.extend_from_slice(&chunk[..got]),
        }
    }
    Some(out)
}
