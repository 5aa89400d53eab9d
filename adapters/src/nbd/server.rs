//! The NBD server: accepting connections, the handshake, and the transmission phase.
//!
//! This module owns connection handling. Each connection runs on its own task: the fixed
//! newstyle handshake (bounded by [`HANDSHAKE_TIMEOUT`]), then a reader loop that parses
//! requests and starts one task per request (so a connection has many requests in flight,
//! bounded by [`INFLIGHT_BYTES`] of payload), and a writer task that sends replies in
//! completion order (NBD replies carry the request's handle, so order is free). A protocol
//! violation (bad magic, unknown client flags) or a client that goes away mid-request ends
//! that connection only; requests already started still finish, their replies dropped.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

use super::proto::{self, Request};
use super::store::{Allocation, BlockStore};
use super::volumes::Catalog;
use super::Volume;

/// Longest a client may take over the whole handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Payload bytes one connection may have in flight (WRITE data held and READ data to send).
pub const INFLIGHT_BYTES: u32 = 64 << 20;

/// Most blocks one `NBD_CMD_BLOCK_STATUS` looks up (a longer request is answered for its
/// first this-many blocks; the protocol lets the client ask again from there).
pub const BLOCK_STATUS_MAX_BLOCKS: u64 = 8192;

/// Unit of the in-flight budget (permits are KiB).
const PERMIT_BYTES: u32 = 1024;

/// Transmission flags of every export: flush, FUA, trim and write-zeroes are supported,
/// and several connections may share an export (no server-side cache; every acknowledged
/// write is on the drives, visible to all connections).
pub const TRANSMISSION_FLAGS: u16 = proto::FLAG_HAS_FLAGS
    | proto::FLAG_SEND_FLUSH
    | proto::FLAG_SEND_FUA
    | proto::FLAG_SEND_TRIM
    | proto::FLAG_SEND_WRITE_ZEROES
    | proto::FLAG_CAN_MULTI_CONN;

/// Why a connection ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The socket failed or closed early.
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    /// The client broke the protocol; the connection was dropped.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The handshake took longer than [`HANDSHAKE_TIMEOUT`].
    #[error("handshake not finished within {0:?}")]
    Timeout(Duration),
}

/// What a handshake agreed on for transmission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The export (as it was when the client chose it).
    pub volume: Volume,
    /// Structured replies were negotiated.
    pub structured: bool,
    /// The id of `base:allocation` when the client selected it for this export.
    pub allocation_context: Option<u32>,
}

/// How a handshake ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Negotiated {
    /// Enter transmission.
    Transmit(Session),
    /// The client aborted (`NBD_OPT_ABORT`) or closed the connection.
    Closed,
}

/// Where the handshake finds exports: a fixed list (command-line volumes) or the volumes
/// stored on the drive(s), read at each `NBD_OPT_LIST` / `INFO` / `GO`.
pub trait Exports: Sync {
    /// Every export, in listing order (the first is the default export).
    ///
    /// # Errors
    /// A message for the client when the exports cannot be read.
    fn list(&self) -> impl Future<Output = Result<Vec<Volume>, String>> + Send;

    /// The export called `name` (the empty name: the first export).
    ///
    /// # Errors
    /// A message for the client when the export cannot be read.
    fn lookup(&self, name: &str) -> impl Future<Output = Result<Option<Volume>, String>> + Send;
}

impl Exports for [Volume] {
    fn list(&self) -> impl Future<Output = Result<Vec<Volume>, String>> + Send {
        std::future::ready(Ok(self.to_vec()))
    }

    fn lookup(&self, name: &str) -> impl Future<Output = Result<Option<Volume>, String>> + Send {
        let found = if name.is_empty() {
            self.first()
        } else {
            self.iter().find(|v| v.name == name)
        };
        std::future::ready(Ok(found.cloned()))
    }
}

impl Exports for Catalog {
    async fn list(&self) -> Result<Vec<Volume>, String> {
        let records = Catalog::list(self).await.map_err(|e| e.to_string())?;
        Ok(records.iter().map(|r| r.volume()).collect())
    }

    fn lookup(&self, name: &str) -> impl Future<Output = Result<Option<Volume>, String>> + Send {
        let name = name.to_string();
        async move {
            if name.is_empty() {
                return Ok(Exports::list(self).await?.into_iter().next());
            }
            Ok(self
                .get(&name)
                .await
                .map_err(|e| e.to_string())?
                .map(|r| r.volume()))
        }
    }
}

/// The exports a server offers.
#[derive(Debug)]
pub enum ExportSource {
    /// Volumes given on the command line.
    Fixed(Vec<Volume>),
    /// Volumes stored on the drive(s).
    Stored(Catalog),
}

impl Exports for ExportSource {
    async fn list(&self) -> Result<Vec<Volume>, String> {
        match self {
            Self::Fixed(v) => v.as_slice().list().await,
            Self::Stored(c) => Exports::list(c).await,
        }
    }

    async fn lookup(&self, name: &str) -> Result<Option<Volume>, String> {
        match self {
            Self::Fixed(v) => v.as_slice().lookup(name).await,
            Self::Stored(c) => c.lookup(name).await,
        }
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` when the peer closed before the first byte.
async fn read_or_eof<S: AsyncRead + Unpin>(s: &mut S, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let n = s.read(&mut buf[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(true)
}

/// Whether a meta context query selects `base:allocation` (for LIST, also the namespace
/// `base:` alone).
fn selects_allocation(query: &str, listing: bool) -> bool {
    query == proto::META_BASE_ALLOCATION || (listing && query == "base:")
}

/// Runs the fixed newstyle handshake on `s` for `exports`.
///
/// # Errors
/// [`ConnError::Io`] when the socket fails or closes mid-message, [`ConnError::Protocol`]
/// for a wrong magic, unknown client flags, an oversized option, or an unknown export
/// named by `NBD_OPT_EXPORT_NAME` (which cannot be refused any other way).
pub async fn handshake<S, E>(s: &mut S, exports: &E) -> Result<Negotiated, ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    E: Exports + ?Sized,
{
    s.write_all(&proto::greeting()).await?;
    s.flush().await?;
    let mut flags = [0u8; 4];
    if !read_or_eof(s, &mut flags).await? {
        return Ok(Negotiated::Closed);
    }
    let client_flags = u32::from_be_bytes(flags);
    if client_flags & !(proto::FLAG_C_FIXED_NEWSTYLE | proto::FLAG_C_NO_ZEROES) != 0 {
        return Err(ConnError::Protocol(format!(
            "unknown client flags {client_flags:#x}"
        )));
    }
    let no_zeroes = client_flags & proto::FLAG_C_NO_ZEROES != 0;
    let mut structured = false;
    // The export name `base:allocation` was selected for, as resolved then.
    let mut allocation_for: Option<String> = None;
    let session = |volume: Volume, structured: bool, allocation_for: &Option<String>| Session {
        allocation_context: (allocation_for.as_deref() == Some(volume.name.as_str()))
            .then_some(proto::META_BASE_ALLOCATION_ID),
        volume,
        structured,
    };
    loop {
        let mut header = [0u8; 16];
        if !read_or_eof(s, &mut header).await? {
            return Ok(Negotiated::Closed);
        }
        let Some((option, len)) = proto::parse_option_header(&header) else {
            return Err(ConnError::Protocol("option without IHAVEOPT magic".into()));
        };
        if len > proto::MAX_OPTION_LEN {
            return Err(ConnError::Protocol(format!(
                "option {option} carries {len} bytes (at most {} accepted)",
                proto::MAX_OPTION_LEN
            )));
        }
        let mut data = vec![0u8; len as usize];
        s.read_exact(&mut data).await?;
        let reply = |kind: u32, body: &[u8]| proto::option_reply(option, kind, body);
        match option {
            proto::OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&data);
                let found = exports.lookup(&name).await;
                let Ok(Some(v)) = found else {
                    return Err(ConnError::Protocol(format!(
                        "NBD_OPT_EXPORT_NAME for unknown or unreadable export {name:?}"
                    )));
                };
                s.write_all(&proto::export_name_reply(
                    v.size,
                    TRANSMISSION_FLAGS,
                    no_zeroes,
                ))
                .await?;
                s.flush().await?;
                return Ok(Negotiated::Transmit(session(
                    v,
                    structured,
                    &allocation_for,
                )));
            }
            proto::OPT_ABORT => {
                // The client may already be gone; that is fine.
                let _ = s.write_all(&reply(proto::REP_ACK, &[])).await;
                let _ = s.flush().await;
                return Ok(Negotiated::Closed);
            }
            proto::OPT_LIST => {
                if !data.is_empty() {
                    s.write_all(&reply(
                        proto::REP_ERR_INVALID,
                        b"NBD_OPT_LIST takes no data",
                    ))
                    .await?;
                } else {
                    match exports.list().await {
                        Ok(volumes) => {
                            for v in &volumes {
                                s.write_all(&reply(proto::REP_SERVER, &proto::rep_server(&v.name)))
                                    .await?;
                            }
                            s.write_all(&reply(proto::REP_ACK, &[])).await?;
                        }
                        Err(msg) => {
                            s.write_all(&reply(proto::REP_ERR_UNKNOWN, msg.as_bytes()))
                                .await?;
                        }
                    }
                }
            }
            proto::OPT_STRUCTURED_REPLY => {
                if data.is_empty() {
                    structured = true;
                    s.write_all(&reply(proto::REP_ACK, &[])).await?;
                } else {
                    s.write_all(&reply(
                        proto::REP_ERR_INVALID,
                        b"NBD_OPT_STRUCTURED_REPLY takes no data",
                    ))
                    .await?;
                }
            }
            proto::OPT_LIST_META_CONTEXT | proto::OPT_SET_META_CONTEXT => {
                let set = option == proto::OPT_SET_META_CONTEXT;
                if set {
                    // Replaces the previous selection, whatever happens next.
                    allocation_for = None;
                }
                match proto::parse_meta_request(&data) {
                    _ if !structured => {
                        s.write_all(&reply(
                            proto::REP_ERR_INVALID,
                            b"negotiate structured replies first",
                        ))
                        .await?;
                    }
                    Err(why) => {
                        s.write_all(&reply(proto::REP_ERR_INVALID, why.as_bytes()))
                            .await?;
                    }
                    Ok(req) => match exports.lookup(&req.export).await {
                        Ok(Some(v)) => {
                            let selected = if set {
                                req.queries.iter().any(|q| selects_allocation(q, false))
                            } else {
                                req.queries.is_empty()
                                    || req.queries.iter().any(|q| selects_allocation(q, true))
                            };
                            if selected {
                                let id = if set {
                                    proto::META_BASE_ALLOCATION_ID
                                } else {
                                    0
                                };
                                s.write_all(&reply(
                                    proto::REP_META_CONTEXT,
                                    &proto::rep_meta_context(id, proto::META_BASE_ALLOCATION),
                                ))
                                .await?;
                                if set {
                                    allocation_for = Some(v.name);
                                }
                            }
                            s.write_all(&reply(proto::REP_ACK, &[])).await?;
                        }
                        Ok(None) => {
                            let msg = format!("no export named {:?}", req.export);
                            s.write_all(&reply(proto::REP_ERR_UNKNOWN, msg.as_bytes()))
                                .await?;
                        }
                        Err(msg) => {
                            s.write_all(&reply(proto::REP_ERR_UNKNOWN, msg.as_bytes()))
                                .await?;
                        }
                    },
                }
            }
            proto::OPT_INFO | proto::OPT_GO => match proto::parse_info_request(&data) {
                Err(why) => {
                    s.write_all(&reply(proto::REP_ERR_INVALID, why.as_bytes()))
                        .await?;
                }
                Ok(req) => match exports.lookup(&req.name).await {
                    Ok(None) => {
                        let msg = format!("no export named {:?}", req.name);
                        s.write_all(&reply(proto::REP_ERR_UNKNOWN, msg.as_bytes()))
                            .await?;
                    }
                    Err(msg) => {
                        s.write_all(&reply(proto::REP_ERR_UNKNOWN, msg.as_bytes()))
                            .await?;
                    }
                    Ok(Some(v)) => {
                        let info = proto::info_export(v.size, TRANSMISSION_FLAGS);
                        s.write_all(&reply(proto::REP_INFO, &info)).await?;
                        if req.items.contains(&proto::INFO_NAME) {
                            s.write_all(&reply(proto::REP_INFO, &proto::info_name(&v.name)))
                                .await?;
                        }
                        if req.items.contains(&proto::INFO_BLOCK_SIZE) {
                            let sizes = proto::info_block_size(1, v.block_size, proto::MAX_PAYLOAD);
                            s.write_all(&reply(proto::REP_INFO, &sizes)).await?;
                        }
                        s.write_all(&reply(proto::REP_ACK, &[])).await?;
                        if option == proto::OPT_GO {
                            s.flush().await?;
                            return Ok(Negotiated::Transmit(session(
                                v,
                                structured,
                                &allocation_for,
                            )));
                        }
                    }
                },
            },
            // STARTTLS, extended headers, unknown options.
            _ => {
                let msg = format!("option {option} is not supported");
                s.write_all(&reply(proto::REP_ERR_UNSUP, msg.as_bytes()))
                    .await?;
            }
        }
        s.flush().await?;
    }
}

/// One reply to send: its parts in order (headers, data slices).
struct Outgoing {
    parts: Vec<Bytes>,
}

impl Outgoing {
    fn one(b: impl Into<Bytes>) -> Self {
        Self {
            parts: vec![b.into()],
        }
    }
}

/// Sends replies until every sender is gone or the socket fails.
async fn write_replies<W: AsyncWrite + Unpin>(w: W, mut rx: mpsc::Receiver<Outgoing>) {
    let mut w = BufWriter::with_capacity(256 << 10, w);
    'outer: while let Some(mut msg) = rx.recv().await {
        loop {
            for part in &msg.parts {
                if w.write_all(part).await.is_err() {
                    break 'outer;
                }
            }
            // Batch whatever is already queued into one flush.
            match rx.try_recv() {
                Ok(next) => msg = next,
                Err(_) => break,
            }
        }
        if w.flush().await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

/// Reads and throws away `len` bytes (the payload of a refused WRITE).
async fn discard<R: AsyncRead + Unpin>(r: &mut R, len: u64) -> io::Result<()> {
    let copied = tokio::io::copy(&mut r.take(len), &mut tokio::io::sink()).await?;
    if copied < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The reply to a request that carries no data: a simple reply, or a structured `NONE` /
/// `ERROR` chunk.
fn status_reply(structured: bool, handle: u64, errno: u32, message: &str) -> Outgoing {
    match (structured, errno) {
        (false, e) => Outgoing::one(proto::simple_reply(e, handle).to_vec()),
        (true, 0) => Outgoing::one(proto::chunk_done(handle).to_vec()),
        (true, e) => Outgoing::one(proto::chunk_error(handle, e, message)),
    }
}

/// Runs of equal flags: `(first index, count, flag)`.
fn runs(flags: &[bool]) -> Vec<(usize, usize, bool)> {
    let mut out: Vec<(usize, usize, bool)> = Vec::new();
    for (i, &f) in flags.iter().enumerate() {
        match out.last_mut() {
            Some((_, n, g)) if *g == f => *n += 1,
            _ => out.push((i, 1, f)),
        }
    }
    out
}

/// A structured READ reply: `OFFSET_HOLE` chunks for runs of unstored blocks and
/// `OFFSET_DATA` chunks for runs of stored ones, the last chunk flagged `DONE`.
fn structured_read(
    handle: u64,
    offset: u64,
    data: Bytes,
    alloc: &Allocation,
    block_size: u32,
) -> Outgoing {
    let bs = u64::from(block_size);
    let end = offset + data.len() as u64;
    if data.is_empty() {
        return Outgoing::one(proto::chunk_done(handle).to_vec());
    }
    let runs = runs(&alloc.present);
    let mut parts = Vec::with_capacity(2 * runs.len());
    for (i, &(start, n, present)) in runs.iter().enumerate() {
        let done = i + 1 == runs.len();
        let from = ((alloc.first + start as u64) * bs).max(offset);
        let to = ((alloc.first + (start + n) as u64) * bs).min(end);
        // Within one READ (at most MAX_PAYLOAD bytes): fits in u32.
        let len = u32::try_from(to - from).unwrap_or(u32::MAX);
        if present {
            parts.push(Bytes::from(proto::chunk_data_head(done, handle, from, len)));
            parts.push(data.slice((from - offset) as usize..(to - offset) as usize));
        } else {
            parts.push(Bytes::from(proto::chunk_hole(done, handle, from, len)));
        }
    }
    Outgoing { parts }
}

/// The NBD server: its exports and the store behind them.
#[derive(Debug)]
pub struct NbdServer {
    store: BlockStore,
    exports: ExportSource,
}

impl NbdServer {
    /// A server exporting `exports` through `store`.
    #[must_use]
    pub fn new(store: BlockStore, exports: ExportSource) -> Self {
        Self { store, exports }
    }

    /// Accepts connections forever, each on its own task.
    ///
    /// # Errors
    /// Never returns on its own; accept errors (e.g. out of file descriptors) are logged
    /// and retried after a pause.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> io::Result<()> {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let me = self.clone();
                    tokio::spawn(async move {
                        if let Err(e) = me.connection(stream).await {
                            tracing::info!(%peer, "connection ended: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Serves one connection: handshake, then transmission until DISC or the client leaves.
    ///
    /// # Errors
    /// [`ConnError`] when the handshake fails or times out, or the client breaks the
    /// protocol during transmission.
    pub async fn connection(self: Arc<Self>, mut stream: TcpStream) -> Result<(), ConnError> {
        stream.set_nodelay(true)?;
        let negotiated =
            tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&mut stream, &self.exports))
                .await
                .map_err(|_| ConnError::Timeout(HANDSHAKE_TIMEOUT))??;
        let Negotiated::Transmit(session) = negotiated else {
            return Ok(());
        };
        self.transmit(stream, Arc::new(session)).await
    }

    async fn transmit(
        self: Arc<Self>,
        stream: TcpStream,
        session: Arc<Session>,
    ) -> Result<(), ConnError> {
        let size = session.volume.size;
        let structured = session.structured;
        let (rd, wr) = stream.into_split();
        let mut rd = BufReader::with_capacity(256 << 10, rd);
        let (tx, rx) = mpsc::channel::<Outgoing>(1024);
        let writer = tokio::spawn(write_replies(wr, rx));
        let budget = Arc::new(Semaphore::new((INFLIGHT_BYTES / PERMIT_BYTES) as usize));
        let result = loop {
            let mut header = [0u8; proto::REQUEST_LEN];
            match read_or_eof(&mut rd, &mut header).await {
                Ok(true) => {}
                // Closed between requests: a hard disconnect, not an error of ours.
                Ok(false) => break Ok(()),
                Err(e) => break Err(ConnError::Io(e)),
            }
            let Some(req) = proto::parse_request(&header) else {
                break Err(ConnError::Protocol(
                    "request without NBD_REQUEST_MAGIC".into(),
                ));
            };
            if req.kind == proto::CMD_DISC {
                break Ok(());
            }
            if tx.is_closed() {
                break Ok(());
            }
            let checked = proto::validate(&req, size, session.allocation_context.is_some());
            let payload_len = if req.kind == proto::CMD_WRITE {
                req.length
            } else {
                0
            };
            if let Err(errno) = checked {
                if payload_len > 0 {
                    if let Err(e) = discard(&mut rd, u64::from(payload_len)).await {
                        break Err(ConnError::Io(e));
                    }
                }
                tracing::debug!(?req, errno, "request refused");
                let _ = tx
                    .send(status_reply(
                        structured,
                        req.handle,
                        errno,
                        "request refused",
                    ))
                    .await;
                continue;
            }
            let moved = if req.kind == proto::CMD_READ || req.kind == proto::CMD_WRITE {
                req.length
            } else {
                0
            };
            let cost = (moved / PERMIT_BYTES).max(1);
            let Ok(permit) = budget.clone().acquire_many_owned(cost).await else {
                break Ok(());
            };
            let payload = if payload_len > 0 {
                let mut buf = BytesMut::zeroed(payload_len as usize);
                if let Err(e) = rd.read_exact(&mut buf).await {
                    break Err(ConnError::Io(e));
                }
                buf.freeze()
            } else {
                Bytes::new()
            };
            let me = self.clone();
            let tx = tx.clone();
            let session = session.clone();
            tokio::spawn(async move {
                let out = me.execute(&session, req, payload).await;
                let _ = tx.send(out).await;
                drop(permit);
            });
        };
        // DISC (or the client left): let the requests in flight finish and be answered.
        let _ = budget.acquire_many(INFLIGHT_BYTES / PERMIT_BYTES).await;
        drop(tx);
        let _ = writer.await;
        result
    }

    /// `base:allocation` of `[offset, offset + length)`, at most
    /// [`BLOCK_STATUS_MAX_BLOCKS`] blocks of it: `(length, flags)` descriptors.
    async fn block_status(
        &self,
        v: &Volume,
        offset: u64,
        length: u32,
        one: bool,
    ) -> Result<Vec<(u32, u32)>, super::StoreError> {
        let bs = u64::from(v.block_size);
        let end = offset + u64::from(length);
        let first = offset / bs;
        let last = ((end - 1) / bs).min(first + BLOCK_STATUS_MAX_BLOCKS - 1);
        let present = self.store.allocated(v, first, last).await?;
        let mut out = Vec::new();
        for (start, n, stored) in runs(&present) {
            let from = ((first + start as u64) * bs).max(offset);
            let to = ((first + (start + n) as u64) * bs).min(end);
            let flags = if stored {
                0
            } else {
                proto::STATE_HOLE | proto::STATE_ZERO
            };
            out.push((u32::try_from(to - from).unwrap_or(u32::MAX), flags));
            if one {
                break;
            }
        }
        Ok(out)
    }

    /// Runs one validated request and builds its reply.
    async fn execute(&self, session: &Session, req: Request, payload: Bytes) -> Outgoing {
        let v = &session.volume;
        let structured = session.structured;
        let result = match req.kind {
            proto::CMD_READ if structured => {
                match self.store.read_allocated(v, req.offset, req.length).await {
                    Ok((data, alloc)) => {
                        return structured_read(
                            req.handle,
                            req.offset,
                            data.freeze(),
                            &alloc,
                            v.block_size,
                        )
                    }
                    Err(e) => Err(e),
                }
            }
            proto::CMD_READ => match self.store.read(v, req.offset, req.length).await {
                Ok(data) => {
                    return Outgoing {
                        parts: vec![
                            Bytes::from(proto::simple_reply(0, req.handle).to_vec()),
                            data.freeze(),
                        ],
                    }
                }
                Err(e) => Err(e),
            },
            proto::CMD_BLOCK_STATUS => {
                let one = req.flags & proto::CMD_FLAG_REQ_ONE != 0;
                match self.block_status(v, req.offset, req.length, one).await {
                    Ok(extents) => {
                        let id = session
                            .allocation_context
                            .unwrap_or(proto::META_BASE_ALLOCATION_ID);
                        return Outgoing::one(proto::chunk_block_status(req.handle, id, &extents));
                    }
                    Err(e) => Err(e),
                }
            }
            proto::CMD_WRITE => self.store.write(v, req.offset, payload).await,
            proto::CMD_TRIM | proto::CMD_WRITE_ZEROES => {
                self.store.zero(v, req.offset, u64::from(req.length)).await
            }
            // Every acknowledged write is already durable on the drives (see `store`).
            proto::CMD_FLUSH => Ok(()),
            _ => return status_reply(structured, req.handle, proto::EINVAL, "unknown command"),
        };
        match result {
            Ok(()) => status_reply(structured, req.handle, 0, ""),
            Err(e) => {
                tracing::warn!(?req, "request failed: {e}");
                status_reply(structured, req.handle, e.errno(), &e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    fn vols() -> Vec<Volume> {
        vec![Volume::new("disk0", 1 << 20), Volume::new("disk1", 8192)]
    }

    async fn option<C: AsyncWrite + Unpin>(c: &mut C, option: u32, data: &[u8]) {
        let mut b = Vec::new();
        b.extend_from_slice(&proto::IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        c.write_all(&b).await.unwrap();
    }

    /// Reads one option reply: (option, type, data).
    async fn reply<C: AsyncRead + Unpin>(c: &mut C) -> (u32, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        c.read_exact(&mut h).await.unwrap();
        assert_eq!(&h[..8], &proto::OPT_REPLY_MAGIC.to_be_bytes());
        let opt = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        c.read_exact(&mut d).await.unwrap();
        (opt, kind, d)
    }

    async fn start(
        flags: u32,
    ) -> (
        tokio::io::DuplexStream,
        tokio::task::JoinHandle<Result<Negotiated, ConnError>>,
    ) {
        let (mut client, mut server) = duplex(1 << 16);
        let h = tokio::spawn(async move { handshake(&mut server, vols().as_slice()).await });
        let mut g = [0u8; 18];
        client.read_exact(&mut g).await.unwrap();
        assert_eq!(g, proto::greeting());
        client.write_all(&flags.to_be_bytes()).await.unwrap();
        (client, h)
    }

    fn info_data(name: &str, items: &[u16]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(items.len() as u16).to_be_bytes());
        for i in items {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    #[tokio::test]
    async fn list_info_then_go() {
        let (mut c, h) = start(3).await;
        option(&mut c, proto::OPT_LIST, &[]).await;
        assert_eq!(reply(&mut c).await.2, proto::rep_server("disk0"));
        assert_eq!(reply(&mut c).await.2, proto::rep_server("disk1"));
        assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        // Unsupported options are refused, and negotiation goes on.
        option(&mut c, 11, &[]).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_UNSUP);
        option(&mut c, proto::OPT_STARTTLS, &[]).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_UNSUP);
        // A malformed INFO and an unknown export.
        option(&mut c, proto::OPT_INFO, &[0, 0, 0, 9]).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_INVALID);
        option(&mut c, proto::OPT_INFO, &info_data("nope", &[])).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_UNKNOWN);
        option(&mut c, proto::OPT_LIST, b"x").await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_INVALID);
        option(
            &mut c,
            proto::OPT_INFO,
            &info_data("disk1", &[proto::INFO_NAME, proto::INFO_BLOCK_SIZE]),
        )
        .await;
        let (opt, kind, d) = reply(&mut c).await;
        assert_eq!((opt, kind), (proto::OPT_INFO, proto::REP_INFO));
        assert_eq!(d, proto::info_export(8192, TRANSMISSION_FLAGS));
        assert_eq!(reply(&mut c).await.2, proto::info_name("disk1"));
        assert_eq!(
            reply(&mut c).await.2,
            proto::info_block_size(1, 8192, proto::MAX_PAYLOAD)
        );
        assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        // The empty name is the default (first) export.
        option(&mut c, proto::OPT_GO, &info_data("", &[])).await;
        assert_eq!(
            reply(&mut c).await.2,
            proto::info_export(1 << 20, TRANSMISSION_FLAGS)
        );
        assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        assert_eq!(
            h.await.unwrap().unwrap(),
            Negotiated::Transmit(Session {
                volume: vols()[0].clone(),
                structured: false,
                allocation_context: None
            })
        );
    }

    fn meta_data(export: &str, queries: &[&str]) -> Vec<u8> {
        let mut d = (export.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(export.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        d
    }

    #[tokio::test]
    async fn structured_replies_and_meta_contexts() {
        let (mut c, h) = start(3).await;
        // Meta contexts need structured replies first.
        option(
            &mut c,
            proto::OPT_SET_META_CONTEXT,
            &meta_data("disk1", &[]),
        )
        .await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_INVALID);
        option(&mut c, proto::OPT_STRUCTURED_REPLY, b"x").await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_INVALID);
        option(&mut c, proto::OPT_STRUCTURED_REPLY, &[]).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        // LIST with no query lists every context (id 0), with `base:` too; others none.
        for q in [&[][..], &["base:"][..]] {
            option(&mut c, proto::OPT_LIST_META_CONTEXT, &meta_data("disk1", q)).await;
            let (_, kind, d) = reply(&mut c).await;
            assert_eq!(kind, proto::REP_META_CONTEXT);
            assert_eq!(d, proto::rep_meta_context(0, proto::META_BASE_ALLOCATION));
            assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        }
        option(
            &mut c,
            proto::OPT_LIST_META_CONTEXT,
            &meta_data("disk1", &["x-y:z"]),
        )
        .await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        option(&mut c, proto::OPT_SET_META_CONTEXT, &meta_data("nope", &[])).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_UNKNOWN);
        option(&mut c, proto::OPT_SET_META_CONTEXT, &[1, 2]).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ERR_INVALID);
        option(
            &mut c,
            proto::OPT_SET_META_CONTEXT,
            &meta_data("disk1", &[proto::META_BASE_ALLOCATION]),
        )
        .await;
        let (_, kind, d) = reply(&mut c).await;
        assert_eq!(kind, proto::REP_META_CONTEXT);
        assert_eq!(
            d,
            proto::rep_meta_context(proto::META_BASE_ALLOCATION_ID, proto::META_BASE_ALLOCATION)
        );
        assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        option(&mut c, proto::OPT_GO, &info_data("disk1", &[])).await;
        reply(&mut c).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        let Negotiated::Transmit(sess) = h.await.unwrap().unwrap() else {
            panic!("not transmitting")
        };
        assert!(sess.structured);
        assert_eq!(
            sess.allocation_context,
            Some(proto::META_BASE_ALLOCATION_ID)
        );

        // A context set for another export does not carry over.
        let (mut c, h) = start(3).await;
        option(&mut c, proto::OPT_STRUCTURED_REPLY, &[]).await;
        reply(&mut c).await;
        option(
            &mut c,
            proto::OPT_SET_META_CONTEXT,
            &meta_data("disk1", &[proto::META_BASE_ALLOCATION]),
        )
        .await;
        reply(&mut c).await;
        reply(&mut c).await;
        option(&mut c, proto::OPT_GO, &info_data("disk0", &[])).await;
        reply(&mut c).await;
        reply(&mut c).await;
        let Negotiated::Transmit(sess) = h.await.unwrap().unwrap() else {
            panic!("not transmitting")
        };
        assert_eq!(sess.allocation_context, None);
    }

    #[test]
    fn structured_reads_split_holes_and_data() {
        let alloc = Allocation {
            first: 1,
            present: vec![false, true, true, false],
        };
        // Bytes 8192+100 .. 5*8192-50 of 8 KiB blocks 1..=4.
        let offset = 8192 + 100;
        let len = 4 * 8192 - 150;
        let data = Bytes::from(vec![7u8; len]);
        let out = structured_read(5, offset, data, &alloc, 8192);
        let chunks: Vec<&Bytes> = out.parts.iter().collect();
        // hole, data head + data, hole
        assert_eq!(chunks.len(), 4);
        assert_eq!(
            chunks[0][..],
            proto::chunk_hole(false, 5, offset, 8192 - 100)[..]
        );
        assert_eq!(
            chunks[1][..],
            proto::chunk_data_head(false, 5, 2 * 8192, 2 * 8192)[..]
        );
        assert_eq!(chunks[2].len(), 2 * 8192);
        assert_eq!(
            chunks[3][..],
            proto::chunk_hole(true, 5, 4 * 8192, 8192 - 50)[..]
        );
        assert_eq!(runs(&[]), vec![]);
    }

    #[tokio::test]
    async fn export_name_with_and_without_zeroes() {
        for (flags, len) in [(1u32, 134usize), (3, 10)] {
            let (mut c, h) = start(flags).await;
            option(&mut c, proto::OPT_EXPORT_NAME, b"disk1").await;
            let mut r = vec![0u8; len];
            c.read_exact(&mut r).await.unwrap();
            assert_eq!(&r[..8], &8192u64.to_be_bytes());
            assert_eq!(&r[8..10], &TRANSMISSION_FLAGS.to_be_bytes());
            let Negotiated::Transmit(sess) = h.await.unwrap().unwrap() else {
                panic!("not transmitting")
            };
            assert_eq!(sess.volume.name, "disk1");
        }
    }

    #[tokio::test]
    async fn bad_handshakes_end_the_connection_only() {
        // Unknown client flags.
        let (_c, h) = start(0x80).await;
        assert!(matches!(h.await.unwrap(), Err(ConnError::Protocol(_))));
        // Wrong option magic.
        let (mut c, h) = start(1).await;
        c.write_all(&[0u8; 16]).await.unwrap();
        assert!(matches!(h.await.unwrap(), Err(ConnError::Protocol(_))));
        // An option longer than allowed.
        let (mut c, h) = start(1).await;
        let mut b = proto::IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&proto::OPT_GO.to_be_bytes());
        b.extend_from_slice(&u32::MAX.to_be_bytes());
        c.write_all(&b).await.unwrap();
        assert!(matches!(h.await.unwrap(), Err(ConnError::Protocol(_))));
        // Unknown export through EXPORT_NAME: dropped.
        let (mut c, h) = start(1).await;
        option(&mut c, proto::OPT_EXPORT_NAME, b"zzz").await;
        assert!(matches!(h.await.unwrap(), Err(ConnError::Protocol(_))));
        // Closing mid-option header.
        let (mut c, h) = start(1).await;
        c.write_all(&proto::IHAVEOPT.to_be_bytes()).await.unwrap();
        drop(c);
        assert!(matches!(h.await.unwrap(), Err(ConnError::Io(_))));
        // Closing between options, and ABORT.
        let (c, h) = start(1).await;
        drop(c);
        assert_eq!(h.await.unwrap().unwrap(), Negotiated::Closed);
        let (mut c, h) = start(1).await;
        option(&mut c, proto::OPT_ABORT, &[]).await;
        assert_eq!(reply(&mut c).await.1, proto::REP_ACK);
        assert_eq!(h.await.unwrap().unwrap(), Negotiated::Closed);
    }
}
