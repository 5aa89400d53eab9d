//! Property checks of the RESP request framer (`kvproto::RequestParser`) and the command
//! parser (`kvproto::Command::parse`).
//!
//! This module owns the properties; it is shared, by `#[path]`, between the fuzz targets
//! (`fuzz/fuzz_targets/framer.rs`, `command.rs`) and the stable-toolchain replay of the
//! seed corpus (`kvproto/tests/fuzz_corpus.rs`). A check panics when a property fails,
//! which is how both libFuzzer and `cargo test` see a finding.

#![allow(dead_code, clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use kvproto::command::check_arity;
use kvproto::request::MIN_BYTES_HINT;
use kvproto::{Command, Limits, Protocol, ProtocolError, Reply, RequestParser};

/// Limits small enough for a fuzzer to reach every limit error quickly.
pub const SMALL_LIMITS: Limits = Limits {
    max_bulk_len: 64,
    max_args: 8,
    max_inline_len: 32,
};

/// Most cut points a framer input carries.
const MAX_CUTS: usize = 7;

/// Inputs up to this length are also framed one byte at a time.
const BYTEWISE_MAX: usize = 1024;

/// A framer input decoded from fuzz bytes (see [`decode_framer_input`]).
#[derive(Debug)]
pub struct FramerInput<'a> {
    /// The limits to frame with.
    pub limits: Limits,
    /// Where the wire bytes are split into reads (positions, any order, may be past the end).
    pub cuts: Vec<usize>,
    /// The bytes a client sent.
    pub wire: &'a [u8],
}

/// Decodes fuzz bytes: byte 0 holds the limits choice (bit 0: [`SMALL_LIMITS`], else the
/// defaults) and the number of cuts `n` (bits 1-3); then `n` little-endian `u16` cut
/// positions; the rest is the wire. Short inputs are all wire.
pub fn decode_framer_input(data: &[u8]) -> FramerInput<'_> {
    let Some((&head, rest)) = data.split_first() else {
        return FramerInput {
            limits: Limits::default(),
            cuts: Vec::new(),
            wire: data,
        };
    };
    let limits = if head & 1 == 1 {
        SMALL_LIMITS
    } else {
        Limits::default()
    };
    let n = usize::from((head >> 1) & 7).min(MAX_CUTS);
    let n = n.min(rest.len() / 2);
    let (cut_bytes, wire) = rest.split_at(2 * n);
    let cuts = cut_bytes
        .chunks_exact(2)
        .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])))
        .collect();
    FramerInput { limits, cuts, wire }
}

/// Encodes a framer input (the inverse of [`decode_framer_input`]), for seeds.
pub fn encode_framer_input(small: bool, cuts: &[u16], wire: &[u8]) -> Vec<u8> {
    let n = cuts.len().min(MAX_CUTS);
    let mut out = vec![u8::from(small) | (u8::try_from(n).unwrap_or(0) << 1)];
    for c in &cuts[..n] {
        out.extend_from_slice(&c.to_le_bytes());
    }
    out.extend_from_slice(wire);
    out
}

/// What framing a whole stream gives: its requests, then the error that ended it, if any.
type Outcome = (Vec<Vec<Bytes>>, Option<ProtocolError>);

/// Frames `wire` delivered in reads ending at `cuts` (then the rest), checking the
/// per-call properties on the way.
fn frame(limits: Limits, wire: &[u8], cuts: &[usize]) -> Outcome {
    let mut ends: Vec<usize> = cuts.iter().map(|&c| c.min(wire.len())).collect();
    ends.push(wire.len());
    ends.sort_unstable();
    ends.dedup();
    let mut p = RequestParser::new(limits);
    let mut buf = BytesMut::new();
    let mut reqs = Vec::new();
    let mut start = 0;
    for end in ends {
        buf.extend_from_slice(&wire[start..end]);
        start = end;
        loop {
            let before = buf.len();
            match p.parse(&mut buf) {
                Ok(Some(args)) => {
                    assert!(
                        buf.len() < before,
                        "a request was returned without consuming input"
                    );
                    check_request(limits, &args);
                    reqs.push(args);
                }
                Ok(None) => {
                    check_waiting(&p, limits, &buf);
                    break;
                }
                Err(e) => return (reqs, Some(e)),
            }
        }
    }
    (reqs, None)
}

/// A framed request stays inside the limits.
fn check_request(limits: Limits, args: &[Bytes]) {
    assert!(
        args.len() <= limits.max_args.max(limits.max_inline_len),
        "{} arguments framed with max_args {}",
        args.len(),
        limits.max_args
    );
    let longest = limits.max_bulk_len.max(limits.max_inline_len);
    for a in args {
        assert!(
            a.len() <= longest,
            "a {}-byte argument passed the limits",
            a.len()
        );
    }
}

/// While the framer waits for more bytes, what it keeps buffered is bounded by the limits,
/// and the read size it asks for is bounded by what has arrived (a header alone must not
/// make the connection reserve the whole announced bulk).
fn check_waiting(p: &RequestParser, limits: Limits, buf: &[u8]) {
    match p.bytes_hint(buf) {
        None => assert!(
            buf.len() <= limits.max_inline_len,
            "{} bytes buffered waiting for a line (max_inline_len {})",
            buf.len(),
            limits.max_inline_len
        ),
        Some(hint) => {
            assert!(
                buf.len() + hint <= limits.max_bulk_len + 2,
                "{} buffered + {hint} asked for passes max_bulk_len {}",
                buf.len(),
                limits.max_bulk_len
            );
            assert!(
                hint <= buf.len().max(MIN_BYTES_HINT),
                "asked for {hint} more bytes with only {} received",
                buf.len()
            );
        }
    }
}

/// Framer properties for one fuzz input: no panic, nothing buffered or requested past the
/// limits, and the same requests and final error whether the bytes arrive whole, in the
/// input's chunks, or (short inputs) one byte at a time.
pub fn check_framer(data: &[u8]) {
    let input = decode_framer_input(data);
    let whole = frame(input.limits, input.wire, &[]);
    let chunked = frame(input.limits, input.wire, &input.cuts);
    assert_eq!(
        whole, chunked,
        "chunked framing differs (cuts {:?})",
        input.cuts
    );
    if input.wire.len() <= BYTEWISE_MAX {
        let every: Vec<usize> = (1..input.wire.len()).collect();
        let bytewise = frame(input.limits, input.wire, &every);
        assert_eq!(whole, bytewise, "byte-at-a-time framing differs");
    }
    if let Some(e) = &whole.1 {
        check_error_reply(&e.to_string());
    }
}

/// An error text sent to a client encodes as exactly one RESP error line.
fn check_error_reply(text: &str) {
    assert!(!text.is_empty(), "empty error text");
    for proto in [Protocol::Resp2, Protocol::Resp3] {
        let wire = Reply::error(text).to_bytes(proto);
        assert_eq!(
            wire.first(),
            Some(&b'-'),
            "error reply does not start with '-'"
        );
        let body = &wire[1..];
        let line_end = body.iter().position(|&b| b == b'\r' || b == b'\n');
        assert_eq!(
            line_end,
            Some(body.len() - 2),
            "error reply {wire:?} is not one line"
        );
        assert!(
            wire.ends_with(b"\r\n"),
            "error reply {wire:?} lacks its CRLF"
        );
    }
}

/// Command-parser properties for one fuzz input: the bytes are framed as a client's
/// stream (default limits) and every request goes through `Command::parse`. No panic; a
/// parsed command passed the arity check, names itself, and its keys are arguments of the
/// request; an error's text encodes as one RESP error line.
pub fn check_command(data: &[u8]) {
    let (reqs, _) = frame(Limits::default(), data, &[]);
    for args in reqs {
        if args.is_empty() {
            continue;
        }
        check_argv(&args);
    }
}

/// [`check_command`] for one argument vector.
pub fn check_argv(args: &[Bytes]) {
    match Command::parse(args) {
        Ok(cmd) => {
            assert!(
                check_arity(args).is_ok(),
                "parsed despite a failed arity check"
            );
            assert!(
                kvproto::command::lookup(cmd.name().as_bytes()).is_some(),
                "{} is not in the command table",
                cmd.name()
            );
            let _ = cmd.is_write();
            for k in cmd.keys() {
                assert!(
                    args[1..].iter().any(|a| a[..] == *k),
                    "key {k:?} is not an argument"
                );
            }
        }
        Err(e) => check_error_reply(&e.to_string()),
    }
}
