//! A connection's byte stream: plain TCP, or TLS (`rustls`) over TCP, behind one interface
//! for the non-blocking, edge-triggered loop.
//!
//! Plain TCP keeps the zero-copy receive path (`recv` straight into the receive buffer's spare
//! capacity, [`read_into_spare`]) and vectored writes straight from the reply segments; the
//! only added cost is the match on the variant. TLS decrypts into the session's buffer and is
//! copied once into the receive buffer; replies are encrypted into the session's record
//! buffer and written to the socket from there. Because the loop is edge-triggered, a TLS
//! read keeps pulling records off the socket until the socket would block or plaintext is
//! ready, and records the session still holds (handshake messages, replies the socket did
//! not take) are pushed out by [`Transport::flush_pending`] whenever the socket is writable.

use std::io::{self, BufRead, ErrorKind, IoSlice, Write};
use std::sync::Arc;

use bytes::BytesMut;
use mio::net::TcpStream;
use rustls::{ServerConfig, ServerConnection};

use super::conn::read_into_spare;

/// A TLS session over its socket.
pub(super) struct TlsStream {
    session: ServerConnection,
    sock: TcpStream,
    /// The socket reached end of file (no more records will come).
    sock_eof: bool,
}

/// A connection's byte stream.
pub(super) enum Transport {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream>),
}

impl Transport {
    /// A TLS server session on an accepted socket.
    ///
    /// # Errors
    /// The configuration is unusable for a session (rustls refuses it).
    pub(super) fn tls(
        sock: TcpStream,
        config: Arc<ServerConfig>,
    ) -> Result<Transport, rustls::Error> {
        let session = ServerConnection::new(config)?;
        Ok(Transport::Tls(Box::new(TlsStream {
            session,
            sock,
            sock_eof: false,
        })))
    }

    /// The socket (addresses, registration with the poll).
    pub(super) fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.sock,
        }
    }

    /// The socket, mutably (registration with the poll).
    pub(super) fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &mut t.sock,
        }
    }

    /// Whether this is plain TCP (a short read then means the socket is drained).
    #[inline]
    pub(super) fn is_plain(&self) -> bool {
        matches!(self, Transport::Plain(_))
    }

    /// Reads received bytes into up to `room` bytes of `buf`'s spare capacity: `Ok(0)` at
    /// end of stream, `WouldBlock` when nothing more can be read now.
    #[inline]
    pub(super) fn read_into(&mut self, buf: &mut BytesMut, room: usize) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => read_into_spare(s, buf, room),
            Transport::Tls(t) => t.read_into(buf, room),
        }
    }

    /// Writes out what a TLS session still holds (handshake messages, encrypted replies);
    /// returns whether some is still held (the socket would block). Plain TCP holds nothing.
    ///
    /// # Errors
    /// The socket failed.
    #[inline]
    pub(super) fn flush_pending(&mut self) -> io::Result<bool> {
        match self {
            Transport::Plain(_) => Ok(false),
            Transport::Tls(t) => t.write_pending(),
        }
    }

    /// Before closing: a TLS session says `close_notify` (best effort, never blocks).
    pub(super) fn close_notify(&mut self) {
        if let Transport::Tls(t) = self {
            t.session.send_close_notify();
            let _ = t.write_pending();
        }
    }
}

impl Write for Transport {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(t) => t.write_with(|w| w.write(buf)),
        }
    }

    #[inline]
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write_vectored(bufs),
            Transport::Tls(t) => t.write_with(|w| w.write_vectored(bufs)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(t) => t.write_pending().map(|_| ()),
        }
    }
}

impl TlsStream {
    fn read_into(&mut self, buf: &mut BytesMut, room: usize) -> io::Result<usize> {
        loop {
            // Plaintext the session already decrypted comes first.
            match self.session.reader().fill_buf() {
                Ok(data) if !data.is_empty() => {
                    let n = data.len().min(room);
                    buf.extend_from_slice(&data[..n]);
                    self.session.reader().consume(n);
                    return Ok(n);
                }
                // A clean close_notify.
                Ok(_) => return Ok(0),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // The socket closed without close_notify: end of stream all the same.
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if self.sock_eof {
                return Ok(0);
            }
            match self.session.read_tls(&mut self.sock) {
                Ok(0) => self.sock_eof = true,
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = self.session.process_new_packets() {
                // The session queued an alert saying why: send it, then give up.
                let _ = self.write_pending();
                return Err(io::Error::new(ErrorKind::InvalidData, e));
            }
            // Handshake messages to answer with; a full socket is retried when writable.
            self.write_pending()?;
        }
    }

    /// Hands plaintext to the session (encrypted into records), then writes records out.
    fn write_with(
        &mut self,
        put: impl FnOnce(&mut rustls::Writer<'_>) -> io::Result<usize>,
    ) -> io::Result<usize> {
        // Keep at most one buffer of records inside the session: a socket that does not take
        // them stops the loop like a plain socket would.
        if self.write_pending()? {
            return Err(ErrorKind::WouldBlock.into());
        }
        let n = put(&mut self.session.writer())?;
        if n == 0 {
            // The session's buffer is full (it took nothing): retry when writable.
            return Err(ErrorKind::WouldBlock.into());
        }
        self.write_pending()?;
        Ok(n)
    }

    fn write_pending(&mut self) -> io::Result<bool> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut self.sock) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }
}
