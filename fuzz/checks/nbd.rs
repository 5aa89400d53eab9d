//! Property checks of the NBD block adapter's request parsing: the fixed newstyle
//! handshake (`adapters::nbd::server::handshake`, with the option parsers of
//! `adapters::nbd::proto`) and the transmission request headers (`parse_request`,
//! `validate`).
//!
//! This module owns the properties; it is shared, by `#[path]`, between the fuzz target
//! `fuzz/fuzz_targets/nbd.rs` and the seed replay in `adapters/tests/fuzz_corpus.rs`. A
//! check panics when a property fails.

#![allow(dead_code, clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use adapters::nbd::proto::{self, Request, REQUEST_LEN};
use adapters::nbd::server::{handshake, Negotiated};
use adapters::nbd::Volume;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The exports the handshake is run against.
pub fn volumes() -> Vec<Volume> {
    vec![
        Volume::new("disk0", 1 << 30),
        Volume::new("scratch", (64 << 20) + 4097),
    ]
}

/// A client connection in memory: reads come from `input` at most `chunk` bytes at a time
/// (so the handshake's read loops see short reads), writes go to `output`.
struct Mock<'a> {
    input: &'a [u8],
    chunk: usize,
    output: Vec<u8>,
}

impl AsyncRead for Mock<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = buf.remaining().min(self.input.len()).min(self.chunk);
        let (now, rest) = self.input.split_at(n);
        buf.put_slice(now);
        self.input = rest;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Mock<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.output.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Runs a future that never waits (all its I/O is in memory) to completion.
fn run_ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the handshake waited on an in-memory stream"),
    }
}

/// What the server sent during the handshake parses as NBD: the greeting, then option
/// replies (magic, option, type, length, data), then, after `NBD_OPT_EXPORT_NAME`, its
/// export reply (10 or 134 bytes).
fn check_server_output(out: &[u8], exported: bool) {
    assert_eq!(out.get(..18), Some(&proto::greeting()[..]), "no greeting");
    let mut rest = &out[18..];
    while rest.len() >= 20 && rest[..8] == proto::OPT_REPLY_MAGIC.to_be_bytes() {
        let len = u32::from_be_bytes([rest[16], rest[17], rest[18], rest[19]]) as usize;
        assert!(
            rest.len() >= 20 + len,
            "option reply shorter than its length"
        );
        rest = &rest[20 + len..];
    }
    if exported {
        assert!(
            rest.len() == 10 || rest.len() == 134,
            "export reply of {} bytes",
            rest.len()
        );
    } else {
        assert!(
            rest.is_empty(),
            "{} bytes after the option replies",
            rest.len()
        );
    }
}

/// Transmission-phase checks on the bytes after the handshake: every 28-byte header
/// parses or is refused for its magic, encodes back to itself, and a request `validate`
/// accepts fits the export and the payload limit. WRITE payloads are skipped.
fn check_requests(mut input: &[u8], size: u64, block_status: bool) {
    while input.len() >= REQUEST_LEN {
        let mut header = [0u8; REQUEST_LEN];
        header.copy_from_slice(&input[..REQUEST_LEN]);
        input = &input[REQUEST_LEN..];
        let Some(req) = proto::parse_request(&header) else {
            return;
        };
        assert_eq!(
            proto::encode_request(&req),
            header,
            "header does not round-trip"
        );
        if req.kind == proto::CMD_DISC {
            return;
        }
        check_validate(&req, size, block_status);
        if req.kind == proto::CMD_WRITE {
            let skip = usize::try_from(req.length).unwrap_or(usize::MAX);
            input = input.get(skip..).unwrap_or(&[]);
        }
    }
}

/// A request `validate` accepts is a known command with allowed flags, inside the export,
/// and moves at most `MAX_PAYLOAD` bytes; BLOCK_STATUS only when a metadata context was
/// selected, and never of length 0.
fn check_validate(req: &Request, size: u64, block_status: bool) {
    if proto::validate(req, size, block_status).is_err() {
        return;
    }
    let known = [
        proto::CMD_READ,
        proto::CMD_WRITE,
        proto::CMD_FLUSH,
        proto::CMD_TRIM,
        proto::CMD_WRITE_ZEROES,
        proto::CMD_BLOCK_STATUS,
    ];
    assert!(known.contains(&req.kind), "command {} accepted", req.kind);
    if req.kind == proto::CMD_BLOCK_STATUS {
        assert!(block_status, "BLOCK_STATUS accepted without a context");
        assert!(req.length > 0, "empty BLOCK_STATUS accepted");
    }
    assert_eq!(
        req.flags & !(proto::CMD_FLAG_FUA | proto::CMD_FLAG_NO_HOLE | proto::CMD_FLAG_REQ_ONE),
        0,
        "flags {:#x} accepted",
        req.flags
    );
    if req.kind == proto::CMD_FLUSH {
        return;
    }
    let end = req.offset.checked_add(u64::from(req.length));
    assert!(
        end.is_some_and(|e| e <= size),
        "request past the end accepted"
    );
    if matches!(req.kind, proto::CMD_READ | proto::CMD_WRITE) {
        assert!(
            req.length <= proto::MAX_PAYLOAD,
            "oversized payload accepted"
        );
    }
}

/// NBD properties for one fuzz input (the bytes a client sends; the first byte also sets
/// the read size, 1 to 32 bytes). No panic; the handshake ends (in memory it never
/// waits), answers in well-formed NBD, and picks an existing export; the option-data
/// parser agrees with its own encoding; then every request header that follows passes the
/// transmission checks.
pub fn check_nbd(data: &[u8]) {
    let chunk = usize::from(data.first().copied().unwrap_or(0) % 32) + 1;
    let vols = volumes();
    let mut mock = Mock {
        input: data,
        chunk,
        output: Vec::new(),
    };
    let result = run_ready(handshake(&mut mock, vols.as_slice()));
    let rest = mock.input;
    match result {
        Ok(Negotiated::Transmit(session)) => {
            let vol = vols
                .iter()
                .find(|v| **v == session.volume)
                .expect("the negotiated export exists");
            assert!(
                session.allocation_context.is_none() || session.structured,
                "a metadata context without structured replies"
            );
            // EXPORT_NAME ends with its own reply; GO ends with an ACK option reply.
            let exported = mock.output.len() >= 10
                && !mock
                    .output
                    .ends_with(&proto::option_reply(proto::OPT_GO, proto::REP_ACK, &[]));
            check_server_output(&mock.output, exported);
            check_requests(rest, vol.size, session.allocation_context.is_some());
        }
        Ok(Negotiated::Closed) | Err(_) => {
            check_server_output_prefix(&mock.output);
        }
    }
    // The option-data parser on the raw bytes, whatever the handshake made of them.
    if let Ok(info) = proto::parse_info_request(data) {
        let mut enc = Vec::new();
        enc.extend_from_slice(&u32::try_from(info.name.len()).unwrap_or(0).to_be_bytes());
        enc.extend_from_slice(info.name.as_bytes());
        enc.extend_from_slice(&u16::try_from(info.items.len()).unwrap_or(0).to_be_bytes());
        for i in &info.items {
            enc.extend_from_slice(&i.to_be_bytes());
        }
        assert_eq!(enc, data, "an info request does not re-encode to its bytes");
    }
}

/// A handshake that ended early still sent only whole, well-formed messages.
fn check_server_output_prefix(out: &[u8]) {
    check_server_output(out, false);
}
