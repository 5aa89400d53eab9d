//! An async RESP client (tokio) for adapters, tests and benchmarks.
//!
//! Requests are encoded with [`crate::encode_command`]; replies are decoded with the
//! `redis-protocol` crate (RESP2 by default, RESP3 after [`Client::hello3`]) into the same
//! [`Reply`] tree the drive encodes. Pipelining is explicit: [`Client::send`] buffers,
//! [`Client::flush`] writes, [`Client::read_reply`] reads one reply.

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::BytesFrame as Frame2;
use redis_protocol::resp3::types::BytesFrame as Frame3;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, ToSocketAddrs};

use crate::reply::{Protocol, Reply};
use crate::request::encode_command;
use crate::tls::TlsClient;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket failed.
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent bytes that are not RESP.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server closed the connection.
    #[error("connection closed by the server")]
    Closed,
    /// The server refused the credentials (its error reply).
    #[error("authentication refused: {0}")]
    Auth(String),
}

/// Environment variable an adapter reads its drive password from.
pub const PASSWORD_ENV: &str = "LIGHTSTORE_PASSWORD";

/// What a client sends with `AUTH`: an optional ACL user and the password. `Debug` never
/// shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// ACL user name (`None`: `AUTH password`, the default user).
    pub user: Option<String>,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// The password from, in order: a file (its first line; for secrets mounted as files),
    /// the [`PASSWORD_ENV`] environment variable, or a flag (visible in `ps`: the file or
    /// the variable are better). `None` when none is given.
    ///
    /// # Errors
    /// The file cannot be read, or is empty.
    pub fn from_sources(
        user: Option<String>,
        file: Option<&std::path::Path>,
        flag: Option<String>,
    ) -> std::io::Result<Option<Credentials>> {
        let password = if let Some(path) = file {
            let text = std::fs::read_to_string(path)?;
            let line = text.lines().next().unwrap_or_default().to_string();
            if line.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the password file {} is empty", path.display()),
                ));
            }
            Some(line)
        } else {
            std::env::var(PASSWORD_ENV)
                .ok()
                .filter(|p| !p.is_empty())
                .or(flag)
        };
        Ok(password.map(|password| Credentials { user, password }))
    }
}

/// The byte stream under a [`Client`]: plain TCP, or TLS over it.
#[derive(Debug)]
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One connection to a RESP server, over TCP or TLS.
#[derive(Debug)]
pub struct Client {
    stream: Stream,
    rbuf: BytesMut,
    wbuf: BytesMut,
    proto: Protocol,
}

/// Decodes one RESP2 reply from the front of `buf` (consuming it), `None` until a whole one
/// is there: for a caller with a blocking socket of its own (the drive's MIGRATE).
///
/// # Errors
/// [`ClientError::Protocol`] for bytes that are not RESP2.
pub fn decode_resp2_reply(buf: &mut BytesMut) -> Result<Option<Reply>, ClientError> {
    redis_protocol::resp2::decode::decode_bytes_mut(buf)
        .map(|o| o.map(|(f, _, _)| from_resp2(f)))
        .map_err(|e| ClientError::Protocol(e.to_string()))
}

fn from_resp2(f: Frame2) -> Reply {
    match f {
        Frame2::SimpleString(b) => Reply::Simple(b),
        Frame2::Error(s) => Reply::Error(Bytes::copy_from_slice(s.as_bytes())),
        Frame2::Integer(n) => Reply::Integer(n),
        Frame2::BulkString(b) => Reply::Bulk(b),
        Frame2::Array(items) => Reply::Array(items.into_iter().map(from_resp2).collect()),
        Frame2::Null => Reply::Null,
    }
}

fn from_resp3(f: Frame3) -> Reply {
    match f {
        Frame3::BlobString { data, .. }
        | Frame3::BigNumber { data, .. }
        | Frame3::ChunkedString(data) => Reply::Bulk(data),
        Frame3::SimpleString { data, .. } => Reply::Simple(data),
        Frame3::BlobError { data, .. } => Reply::Error(data),
        Frame3::SimpleError { data, .. } => Reply::Error(Bytes::copy_from_slice(data.as_bytes())),
        Frame3::Boolean { data, .. } => Reply::Integer(i64::from(data)),
        Frame3::Null => Reply::Null,
        Frame3::Number { data, .. } => Reply::Integer(data),
        Frame3::Double { data, .. } => Reply::Double(data),
        Frame3::VerbatimString { data, .. } => Reply::Verbatim(data),
        Frame3::Array { data, .. } | Frame3::Push { data, .. } => {
            Reply::Array(data.into_iter().map(from_resp3).collect())
        }
        Frame3::Map { data, .. } => Reply::Map(
            data.into_iter()
                .map(|(k, v)| (from_resp3(k), from_resp3(v)))
                .collect(),
        ),
        Frame3::Set { data, .. } => Reply::Set(data.into_iter().map(from_resp3).collect()),
        Frame3::Hello { .. } => Reply::Null,
    }
}

impl Client {
    /// Connects to `addr` (RESP2).
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`] when the connection cannot be made.
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Self, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self::over(Stream::Plain(stream)))
    }

    /// Connects to `addr` over TLS with `tls`, checking the server's certificate against
    /// `addr`'s IP address (the drive's certificate names the address it serves). With
    /// `tls` `None`, as [`Client::connect`].
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`] when the connection or the TLS handshake fails (a certificate the
    /// CA did not sign, or that does not name the address, fails the handshake).
    pub async fn connect_with(
        addr: SocketAddr,
        tls: Option<&TlsClient>,
    ) -> Result<Self, ClientError> {
        let Some(tls) = tls else {
            return Self::connect(addr).await;
        };
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        let stream = tokio_rustls::TlsConnector::from(tls.config.clone())
            .connect(name, tcp)
            .await?;
        Ok(Self::over(Stream::Tls(Box::new(stream))))
    }

    fn over(stream: Stream) -> Self {
        Self {
            stream,
            rbuf: BytesMut::with_capacity(64 << 10),
            wbuf: BytesMut::with_capacity(64 << 10),
            proto: Protocol::Resp2,
        }
    }

    /// Sends `AUTH [user] password`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Auth`] with the server's reply when it refuses; as [`Client::call`].
    pub async fn auth(&mut self, creds: &Credentials) -> Result<(), ClientError> {
        match &creds.user {
            Some(u) => self.send(&[&b"AUTH"[..], u.as_bytes(), creds.password.as_bytes()]),
            None => self.send(&[&b"AUTH"[..], creds.password.as_bytes()]),
        }
        self.flush().await?;
        match self.read_reply().await? {
            Reply::Error(e) => Err(ClientError::Auth(String::from_utf8_lossy(&e).into_owned())),
            _ => Ok(()),
        }
    }

    /// Switches the connection to RESP3 with `HELLO 3` and returns the server's reply.
    ///
    /// # Errors
    ///
    /// As [`Client::call`]; an error reply leaves the protocol unchanged.
    pub async fn hello3(&mut self) -> Result<Reply, ClientError> {
        self.send(&[&b"HELLO"[..], b"3"]);
        self.flush().await?;
        // The reply to HELLO 3 is already RESP3.
        self.proto = Protocol::Resp3;
        let r = self.read_reply().await?;
        if r.is_error() {
            self.proto = Protocol::Resp2;
        }
        Ok(r)
    }

    /// The protocol replies are decoded with.
    #[must_use]
    pub fn protocol(&self) -> Protocol {
        self.proto
    }

    /// Buffers one request; nothing is written until [`Client::flush`].
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        encode_command(args, &mut self.wbuf);
    }

    /// Writes every buffered request.
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`] when the write fails.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Reads the next reply (error replies are `Ok(Reply::Error(..))`).
    ///
    /// # Errors
    ///
    /// [`ClientError::Io`], [`ClientError::Closed`] when the server closes first, or
    /// [`ClientError::Protocol`] for bytes that are not RESP.
    pub async fn read_reply(&mut self) -> Result<Reply, ClientError> {
        loop {
            let decoded = match self.proto {
                Protocol::Resp2 => redis_protocol::resp2::decode::decode_bytes_mut(&mut self.rbuf)
                    .map(|o| o.map(|(f, _, _)| from_resp2(f))),
                Protocol::Resp3 => {
                    redis_protocol::resp3::decode::complete::decode_bytes_mut(&mut self.rbuf)
                        .map(|o| o.map(|(f, _, _)| from_resp3(f)))
                }
            };
            match decoded {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            }
            if self.rbuf.capacity() - self.rbuf.len() < 16 << 10 {
                self.rbuf.reserve(64 << 10);
            }
            if self.stream.read_buf(&mut self.rbuf).await? == 0 {
                return Err(ClientError::Closed);
            }
        }
    }

    /// Sends one request and reads its reply.
    ///
    /// # Errors
    ///
    /// As [`Client::flush`] and [`Client::read_reply`].
    pub async fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, ClientError> {
        self.send(args);
        self.flush().await?;
        self.read_reply().await
    }

    /// Sends every request in one write and reads their replies in order.
    ///
    /// # Errors
    ///
    /// As [`Client::flush`] and [`Client::read_reply`].
    pub async fn pipeline<A: AsRef<[u8]>>(
        &mut self,
        requests: &[Vec<A>],
    ) -> Result<Vec<Reply>, ClientError> {
        for r in requests {
            self.send(r);
        }
        self.flush().await?;
        let mut out = Vec::with_capacity(requests.len());
        for _ in requests {
            out.push(self.read_reply().await?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::request::RequestParser;
    use tokio::net::TcpListener;

    /// A one-connection echo server: replies to each request with its arguments as an array.
    #[tokio::test]
    async fn pipeline_roundtrip_against_a_framer() -> Result<(), Box<dyn std::error::Error>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await?;
            let mut parser = RequestParser::new(Limits::default());
            let mut buf = BytesMut::new();
            loop {
                while let Some(args) = parser
                    .parse(&mut buf)
                    .map_err(|e| std::io::Error::other(e.to_string()))?
                {
                    let r = Reply::Array(args.into_iter().map(Reply::Bulk).collect());
                    s.write_all(&r.to_bytes(Protocol::Resp2)).await?;
                }
                if s.read_buf(&mut buf).await? == 0 {
                    return Ok::<(), std::io::Error>(());
                }
            }
        });
        let mut c = Client::connect(addr).await?;
        let big = vec![7u8; 200_000];
        let replies = c.pipeline(&[vec![&b"a"[..], b"b"], vec![&big[..]]]).await?;
        assert_eq!(
            replies[0],
            Reply::Array(vec![Reply::bulk("a"), Reply::bulk("b")])
        );
        assert_eq!(
            replies[1],
            Reply::Array(vec![Reply::Bulk(Bytes::from(big))])
        );
        drop(c);
        server.await??;
        Ok(())
    }
}
