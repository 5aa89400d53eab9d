//! The NBD server: accepting connections, the handshake, and the transmission phase.
//!
//! This module owns connection handling. Each connection runs on its own task: the fixed
//! newstyle handshake (bounded by [`HANDSHAKE_TIMEOUT`]), then a reader loop that parses
//! requests and starts one task per request (so a connection has many requests in flight,
//! bounded by [`INFLIGHT_BYTES`] of payload), and a writer task that sends replies in
//! completion order (NBD replies carry the request's handle, so order is free). A protocol
//! violation (bad magic, unknown client flags) or a client that goes away mid-request ends
//! that connection only; requests already started still finish, their replies dropped.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

use super::proto::{self, Request};
use super::store::BlockStore;
use super::Volume;

/// Longest a client may take over the whole handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Payload bytes one connection may have in flight (WRITE data held and READ data to send).
pub const INFLIGHT_BYTES: u32 = 64 << 20;

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

/// How a handshake ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Negotiated {
    /// Enter transmission on the volume with this index.
    Transmit(usize),
    /// The client aborted (`NBD_OPT_ABORT`) or closed the connection.
    Closed,
}

/// The volume a name selects: the empty name is the first (default) export.
fn find(volumes: &[Volume], name: &str) -> Option<usize> {
    if name.is_empty() && !volumes.is_empty() {
        return Some(0);
    }
    volumes.iter().position(|v| v.name == name)
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

/// Runs the fixed newstyle handshake on `s` for `volumes`.
///
/// # Errors
/// [`ConnError::Io`] when the socket fails or closes mid-message, [`ConnError::Protocol`]
/// for a wrong magic, unknown client flags, an oversized option, or an unknown export
/// named by `NBD_OPT_EXPORT_NAME` (which cannot be refused any other way).
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    volumes: &[Volume],
) -> Result<Negotiated, ConnError> {
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
                let Some(i) = find(volumes, &name) else {
                    return Err(ConnError::Protocol(format!(
                        "NBD_OPT_EXPORT_NAME for unknown export {name:?}"
                    )));
                };
                let v = &volumes[i];
                s.write_all(&proto::export_name_reply(
                    v.size,
                    TRANSMISSION_FLAGS,
                    no_zeroes,
                ))
                .await?;
                s.flush().await?;
                return Ok(Negotiated::Transmit(i));
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
                    for v in volumes {
                        s.write_all(&reply(proto::REP_SERVER, &proto::rep_server(&v.name)))
                            .await?;
                    }
                    s.write_all(&reply(proto::REP_ACK, &[])).await?;
                }
            }
            proto::OPT_INFO | proto::OPT_GO => match proto::parse_info_request(&data) {
                Err(why) => {
                    s.write_all(&reply(proto::REP_ERR_INVALID, why.as_bytes()))
                        .await?;
                }
                Ok(req) => match find(volumes, &req.name) {
                    None => {
                        let msg = format!("no export named {:?}", req.name);
                        s.write_all(&reply(proto::REP_ERR_UNKNOWN, msg.as_bytes()))
                            .await?;
                    }
                    Some(i) => {
                        let v = &volumes[i];
                        let info = proto::info_export(v.size, TRANSMISSION_FLAGS);
                        s.write_all(&reply(proto::REP_INFO, &info)).await?;
                        if req.items.contains(&proto::INFO_NAME) {
                            s.write_all(&reply(proto::REP_INFO, &proto::info_name(&v.name)))
                                .await?;
                        }
                        if req.items.contains(&proto::INFO_BLOCK_SIZE) {
                            let sizes = proto::info_block_size(
                                1,
                                super::layout::BLOCK_SIZE as u32,
                                proto::MAX_PAYLOAD,
                            );
                            s.write_all(&reply(proto::REP_INFO, &sizes)).await?;
                        }
                        s.write_all(&reply(proto::REP_ACK, &[])).await?;
                        if option == proto::OPT_GO {
                            s.flush().await?;
                            return Ok(Negotiated::Transmit(i));
                        }
                    }
                },
            },
            // STARTTLS, STRUCTURED_REPLY, meta contexts, extended headers, unknown options.
            _ => {
                let msg = format!("option {option} is not supported");
                s.write_all(&reply(proto::REP_ERR_UNSUP, msg.as_bytes()))
                    .await?;
            }
        }
        s.flush().await?;
    }
}

/// One reply to send: a header and, for a successful READ, its data.
struct Outgoing {
    header: [u8; 16],
    data: Option<BytesMut>,
}

/// Sends replies until every sender is gone or the socket fails.
async fn write_replies<W: AsyncWrite + Unpin>(w: W, mut rx: mpsc::Receiver<Outgoing>) {
    let mut w = BufWriter::with_capacity(256 << 10, w);
    'outer: while let Some(mut msg) = rx.recv().await {
        loop {
            if w.write_all(&msg.header).await.is_err() {
                break 'outer;
            }
            if let Some(d) = &msg.data {
                if w.write_all(d).await.is_err() {
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

/// The NBD server: volumes and the store behind them.
#[derive(Debug)]
pub struct NbdServer {
    store: BlockStore,
}

impl NbdServer {
    /// A server exporting the store's volumes.
    #[must_use]
    pub fn new(store: BlockStore) -> Self {
        Self { store }
    }

    /// The exported volumes.
    #[must_use]
    pub fn volumes(&self) -> &[Volume] {
        self.store.volumes()
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
            tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&mut stream, self.volumes()))
                .await
                .map_err(|_| ConnError::Timeout(HANDSHAKE_TIMEOUT))??;
        let Negotiated::Transmit(vol) = negotiated else {
            return Ok(());
        };
        self.transmit(stream, vol).await
    }

    async fn transmit(self: Arc<Self>, stream: TcpStream, vol: usize) -> Result<(), ConnError> {
        let size = self.volumes().get(vol).map_or(0, |v| v.size);
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
            let checked = proto::validate(&req, size);
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
                    .send(Outgoing {
                        header: proto::simple_reply(errno, req.handle),
                        data: None,
                    })
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
            tokio::spawn(async move {
                let out = me.execute(vol, req, payload).await;
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

    /// Runs one validated request and builds its reply.
    async fn execute(&self, vol: usize, req: Request, payload: Bytes) -> Outgoing {
        let done = |errno: u32| Outgoing {
            header: proto::simple_reply(errno, req.handle),
            data: None,
        };
        let result = match req.kind {
            proto::CMD_READ => match self.store.read(vol, req.offset, req.length).await {
                Ok(data) => {
                    return Outgoing {
                        header: proto::simple_reply(0, req.handle),
                        data: Some(data),
                    }
                }
                Err(e) => Err(e),
            },
            proto::CMD_WRITE => self.store.write(vol, req.offset, payload).await,
            proto::CMD_TRIM | proto::CMD_WRITE_ZEROES => {
                self.store
                    .zero(vol, req.offset, u64::from(req.length))
                    .await
            }
            // Every acknowledged write is already durable on the drives (see `store`).
            proto::CMD_FLUSH => Ok(()),
            _ => return done(proto::EINVAL),
        };
        match result {
            Ok(()) => done(0),
            Err(e) => {
                tracing::warn!(?req, "request failed: {e}");
                done(e.errno())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    fn vols() -> Vec<Volume> {
        vec![
            Volume {
                name: "disk0".into(),
                size: 1 << 20,
            },
            Volume {
                name: "disk1".into(),
                size: 8192,
            },
        ]
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
        let h = tokio::spawn(async move { handshake(&mut server, &vols()).await });
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
        option(&mut c, 8, &[]).await;
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
        assert_eq!(h.await.unwrap().unwrap(), Negotiated::Transmit(0));
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
            assert_eq!(h.await.unwrap().unwrap(), Negotiated::Transmit(1));
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
