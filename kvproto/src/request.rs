//! The server-side request framer: multibulk (`*n` / `$len`) and inline requests.
//!
//! The framer keeps its position between calls, so a large value arriving over many reads
//! is scanned once. Limits are checked on the `*` and `$` headers, before anything is
//! buffered for them, and each argument is split off the socket buffer as a [`Bytes`] that
//! shares its memory: a SET value travels from the read buffer to the engine without a copy.
//!
//! Why not `redis-protocol`'s decoder here: it decodes a whole frame from a contiguous
//! buffer, so it cannot refuse a 2^40-byte bulk header before the bytes arrive, and it
//! rescans a partial 512 MiB value on every read. The client side ([`crate::client`]) uses it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::limits::{Limits, UNAUTHENTICATED_MAX_ARGS, UNAUTHENTICATED_MAX_BULK_LEN};

/// The floor of [`RequestParser::bytes_hint`]: a connection may size its next read this
/// large before any byte of a bulk argument has arrived.
pub const MIN_BYTES_HINT: usize = 64 << 10;

/// A request that cannot be framed. The connection must be closed after the error reply,
/// as Redis does. `Display` gives Redis 7's reply text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The `*n` count is not a number or exceeds [`Limits::max_args`].
    #[error("ERR Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// The `$len` is not a number, negative, or exceeds [`Limits::max_bulk_len`].
    #[error("ERR Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// A `*n` header line longer than [`Limits::max_inline_len`] without its CRLF.
    #[error("ERR Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    /// A `$len` header line longer than [`Limits::max_inline_len`] without its CRLF.
    #[error("ERR Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// An inline request longer than [`Limits::max_inline_len`].
    #[error("ERR Protocol error: too big inline request")]
    TooBigInline,
    /// More than [`crate::limits::UNAUTHENTICATED_MAX_ARGS`] arguments from a client that
    /// must authenticate first.
    #[error("ERR Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    /// A bulk longer than [`crate::limits::UNAUTHENTICATED_MAX_BULK_LEN`] from a client that
    /// must authenticate first.
    #[error("ERR Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
    /// An inline request with an unterminated quote.
    #[error("ERR Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// Something other than `$` where a bulk argument should start.
    #[error("ERR Protocol error: expected '$', got '{0}'")]
    ExpectedDollar(char),
}

/// The multibulk request being read.
#[derive(Debug)]
struct Pending {
    want: usize,
    args: Vec<Bytes>,
    bulk_len: Option<usize>,
}

/// Frames requests out of a connection's read buffer (see the module docs).
#[derive(Debug)]
pub struct RequestParser {
    limits: Limits,
    pending: Option<Pending>,
    /// The client must authenticate first: Redis 7.2's small caps apply on top of `limits`.
    unauthenticated: bool,
}

/// Position of the `\n` ending the first line of `buf`, if it has one.
fn line_end(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

/// Parses the number in a header line (`*12\r\n` without the kind byte and line end).
fn header_number(line: &[u8]) -> Option<i64> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let s = std::str::from_utf8(line).ok()?;
    if s.is_empty() || s.starts_with('+') || s.len() > 20 {
        return None;
    }
    s.parse::<i64>().ok()
}

impl RequestParser {
    /// A framer enforcing `limits`.
    #[must_use]
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            pending: None,
            unauthenticated: false,
        }
    }

    /// Whether the client still has to authenticate (a password is set and AUTH has not
    /// succeeded): requests are then capped at [`UNAUTHENTICATED_MAX_ARGS`] arguments of at
    /// most [`UNAUTHENTICATED_MAX_BULK_LEN`] bytes, as Redis 7.2 caps them. Takes effect at
    /// the next header read.
    pub fn set_unauthenticated(&mut self, unauthenticated: bool) {
        self.unauthenticated = unauthenticated;
    }

    /// The limits this framer enforces.
    #[must_use]
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// How many more bytes the connection may make room for while a bulk argument is being
    /// read (`None` otherwise): the rest of the bulk, but at most as many bytes as have
    /// arrived of it (and at least [`MIN_BYTES_HINT`]). A buffer sized by the hint grows
    /// geometrically to hold a large value, while a client that sends only a header such as
    /// `$536870912` gets no more than [`MIN_BYTES_HINT`] reserved for it.
    #[must_use]
    pub fn bytes_hint(&self, buf: &[u8]) -> Option<usize> {
        let len = self.pending.as_ref()?.bulk_len?;
        let rest = (len + 2).saturating_sub(buf.len());
        Some(rest.min(buf.len().max(MIN_BYTES_HINT)))
    }

    /// Takes the next complete request off the front of `buf`.
    ///
    /// Returns `Ok(None)` when more bytes are needed and `Ok(Some(args))` for a request;
    /// `args` is empty for an empty inline line or `*0`, which callers skip.
    ///
    /// # Errors
    ///
    /// A [`ProtocolError`] when the bytes are not a valid request or exceed the limits.
    /// The framer is reset; the caller replies with the error and closes the connection.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let r = self.parse_inner(buf);
        if r.is_err() {
            self.pending = None;
        }
        r
    }

    fn parse_inner(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        if self.pending.is_none() {
            let Some(&first) = buf.first() else {
                return Ok(None);
            };
            if first != b'*' {
                return self.parse_inline(buf);
            }
            // A header line too long is refused alike whether or not its line end has
            // arrived, so the outcome does not depend on how the bytes were split into reads.
            let Some(end) = line_end(buf) else {
                if buf.len() > self.limits.max_inline_len {
                    return Err(ProtocolError::TooBigMultibulkCount);
                }
                return Ok(None);
            };
            if end > self.limits.max_inline_len {
                return Err(ProtocolError::TooBigMultibulkCount);
            }
            let n = header_number(&buf[1..end]).ok_or(ProtocolError::InvalidMultibulkLength)?;
            let max = i64::try_from(self.limits.max_args).unwrap_or(i64::MAX);
            if n > max {
                return Err(ProtocolError::InvalidMultibulkLength);
            }
            if self.unauthenticated && n > UNAUTHENTICATED_MAX_ARGS as i64 {
                return Err(ProtocolError::UnauthenticatedMultibulkLength);
            }
            buf.advance(end + 1);
            let Ok(want) = usize::try_from(n) else {
                // `*0` and `*-1` are empty requests.
                return Ok(Some(Vec::new()));
            };
            if want == 0 {
                return Ok(Some(Vec::new()));
            }
            self.pending = Some(Pending {
                want,
                // Grow as arguments arrive: a header alone must not reserve memory.
                args: Vec::with_capacity(want.min(16)),
                bulk_len: None,
            });
        }
        let Some(p) = self.pending.as_mut() else {
            return Ok(None);
        };
        while p.args.len() < p.want {
            let len = match p.bulk_len {
                Some(len) => len,
                None => {
                    let Some(&first) = buf.first() else {
                        return Ok(None);
                    };
                    if first != b'$' {
                        return Err(ProtocolError::ExpectedDollar(char::from(first)));
                    }
                    let Some(end) = line_end(buf) else {
                        if buf.len() > self.limits.max_inline_len {
                            return Err(ProtocolError::TooBigBulkCount);
                        }
                        return Ok(None);
                    };
                    if end > self.limits.max_inline_len {
                        return Err(ProtocolError::TooBigBulkCount);
                    }
                    let n = header_number(&buf[1..end]).ok_or(ProtocolError::InvalidBulkLength)?;
                    let len = usize::try_from(n).map_err(|_| ProtocolError::InvalidBulkLength)?;
                    if len > self.limits.max_bulk_len {
                        return Err(ProtocolError::InvalidBulkLength);
                    }
                    if self.unauthenticated && len > UNAUTHENTICATED_MAX_BULK_LEN {
                        return Err(ProtocolError::UnauthenticatedBulkLength);
                    }
                    buf.advance(end + 1);
                    p.bulk_len = Some(len);
                    len
                }
            };
            if buf.len() < len + 2 {
                return Ok(None);
            }
            let arg = buf.split_to(len).freeze();
            buf.advance(2);
            p.args.push(arg);
            p.bulk_len = None;
        }
        Ok(self.pending.take().map(|p| p.args))
    }

    fn parse_inline(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let Some(end) = line_end(buf) else {
            if buf.len() > self.limits.max_inline_len {
                return Err(ProtocolError::TooBigInline);
            }
            return Ok(None);
        };
        if end > self.limits.max_inline_len {
            return Err(ProtocolError::TooBigInline);
        }
        let line = buf.split_to(end + 1);
        let line = &line[..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        split_inline(line).map(Some)
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits an inline request into arguments as Redis's `sdssplitargs` does: spaces separate,
/// `"..."` takes `\n \r \t \b \a \\ \" \xHH` escapes, `'...'` takes `\'`, and a closing quote
/// must be followed by a space or the end.
fn split_inline(line: &[u8]) -> Result<Vec<Bytes>, ProtocolError> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Ok(args);
        }
        let mut cur = Vec::new();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            let c = line.get(i).copied();
            if in_double {
                match c {
                    None => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'x') => {
                        match (
                            line.get(i + 2).copied().and_then(hex_value),
                            line.get(i + 3).copied().and_then(hex_value),
                        ) {
                            (Some(h), Some(l)) => {
                                cur.push(h * 16 + l);
                                i += 3;
                            }
                            _ => cur.push(b'\\'),
                        }
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        i += 1;
                        cur.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(b) => cur.push(b),
                }
            } else if in_single {
                match c {
                    None => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        cur.push(b'\'');
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(b) => cur.push(b),
                }
            } else {
                match c {
                    None => break,
                    Some(b) if b.is_ascii_whitespace() => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(b) => cur.push(b),
                }
            }
            i += 1;
        }
        args.push(Bytes::from(cur));
    }
}

/// Appends `args` to `out` as one multibulk request (what clients send).
pub fn encode_command<A: AsRef<[u8]>>(args: &[A], out: &mut BytesMut) {
    let total: usize = args.iter().map(|a| a.as_ref().len() + 16).sum();
    out.reserve(total + 16);
    out.put_u8(b'*');
    out.put_slice(args.len().to_string().as_bytes());
    out.put_slice(b"\r\n");
    for a in args {
        let a = a.as_ref();
        out.put_u8(b'$');
        out.put_slice(a.len().to_string().as_bytes());
        out.put_slice(b"\r\n");
        out.put_slice(a);
        out.put_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        let mut p = RequestParser::new(Limits::default());
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(args) = p.parse(&mut buf)? {
            out.push(args);
        }
        Ok(out)
    }

    #[test]
    fn multibulk_and_inline() {
        let got =
            parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\nset a \"b c\\x41\" 'it\\'s'\r\n");
        assert_eq!(
            got,
            Ok(vec![
                vec![Bytes::from("GET"), Bytes::from("k")],
                vec![Bytes::from("PING")],
                vec![
                    Bytes::from("set"),
                    Bytes::from("a"),
                    Bytes::from("b cA"),
                    Bytes::from("it's")
                ],
            ])
        );
    }

    #[test]
    fn errors_have_redis_texts() {
        let e = parse_all(b"*abc\r\n").err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some("ERR Protocol error: invalid multibulk length".into())
        );
        let e = parse_all(b"*1\r\n$1099511627776\r\n").err();
        assert_eq!(e, Some(ProtocolError::InvalidBulkLength));
        let e = parse_all(b"*1\r\n$-5\r\n").err();
        assert_eq!(e, Some(ProtocolError::InvalidBulkLength));
        let e = parse_all(b"*2000000\r\n").err();
        assert_eq!(e, Some(ProtocolError::InvalidMultibulkLength));
        let e = parse_all(b"*1\r\nfoo\r\n").err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some("ERR Protocol error: expected '$', got 'f'".into())
        );
        assert_eq!(
            parse_all(b"set \"a\r\n").err(),
            Some(ProtocolError::UnbalancedQuotes)
        );
        assert_eq!(
            parse_all(b"set \"a\"b\r\n").err(),
            Some(ProtocolError::UnbalancedQuotes)
        );
        let long = vec![b'a'; 70 << 10];
        assert_eq!(parse_all(&long).err(), Some(ProtocolError::TooBigInline));
    }

    /// A header line longer than `max_inline_len` gives the same error whether its line end
    /// arrives with it or later (fuzz seeds `framer/regress-long-*-header`).
    #[test]
    fn long_header_lines_fail_alike_however_split() {
        let limits = Limits {
            max_bulk_len: 64,
            max_args: 8,
            max_inline_len: 32,
        };
        for (wire, want) in [
            (
                format!("*1{}\r\n", "0".repeat(40)),
                ProtocolError::TooBigMultibulkCount,
            ),
            (
                format!("*1\r\n$1{}\r\n", "0".repeat(40)),
                ProtocolError::TooBigBulkCount,
            ),
        ] {
            let mut p = RequestParser::new(limits);
            let mut whole = BytesMut::from(wire.as_bytes());
            assert_eq!(p.parse(&mut whole), Err(want.clone()));
            let mut p = RequestParser::new(limits);
            let mut buf = BytesMut::new();
            let mut got = Ok(None);
            for b in wire.bytes() {
                buf.extend_from_slice(&[b]);
                got = p.parse(&mut buf);
                if got.is_err() {
                    break;
                }
            }
            assert_eq!(got, Err(want));
        }
    }

    #[test]
    fn unauthenticated_clients_get_redis_caps() {
        let mut p = RequestParser::new(Limits::default());
        p.set_unauthenticated(true);
        let mut buf = BytesMut::from(&b"*11\r\n"[..]);
        let e = p.parse(&mut buf).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("ERR Protocol error: unauthenticated multibulk length")
        );
        let mut buf = BytesMut::from(&b"*1\r\n$16385\r\n"[..]);
        let e = p.parse(&mut buf).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("ERR Protocol error: unauthenticated bulk length")
        );
        // The absolute limit is checked first, as Redis does.
        let mut buf = BytesMut::from(&b"*1\r\n$1099511627776\r\n"[..]);
        assert_eq!(p.parse(&mut buf), Err(ProtocolError::InvalidBulkLength));
        // At the caps: accepted; after AUTH the caps go.
        let mut wire = BytesMut::new();
        let ten: Vec<Vec<u8>> = (0..10).map(|_| vec![b'x'; 16_384]).collect();
        encode_command(&ten, &mut wire);
        assert_eq!(p.parse(&mut wire).ok().flatten().map(|a| a.len()), Some(10));
        p.set_unauthenticated(false);
        let mut buf = BytesMut::from(&b"*11\r\n$3\r\nabc\r\n"[..]);
        assert_eq!(p.parse(&mut buf), Ok(None));
    }

    #[test]
    fn empty_requests() {
        assert_eq!(parse_all(b"*0\r\n\r\n").ok(), Some(vec![vec![], vec![]]));
    }

    #[test]
    fn bytes_hint_reports_the_rest_of_a_bulk() {
        let mut p = RequestParser::new(Limits::default());
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nSET\r\n$100\r\nabc"[..]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        assert_eq!(p.bytes_hint(&buf), Some(99));
    }

    /// A huge bulk header alone asks for [`MIN_BYTES_HINT`], not the announced length; the
    /// hint then grows with what has arrived (fuzz seed `framer/huge-bulk`).
    #[test]
    fn bytes_hint_is_bounded_by_what_arrived() {
        let mut p = RequestParser::new(Limits::default());
        let mut buf = BytesMut::from(&b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10000000\r\nabc"[..]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        assert_eq!(p.bytes_hint(&buf), Some(MIN_BYTES_HINT));
        buf.extend_from_slice(&vec![b'x'; 1 << 20]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        assert_eq!(p.bytes_hint(&buf), Some(buf.len()));
        let rest = 10_000_000 + 2 - buf.len();
        buf.extend_from_slice(&vec![b'x'; rest - 10]);
        assert_eq!(p.bytes_hint(&buf), Some(10));
    }

    proptest! {
        /// Any split of any encoded request sequence frames back to the same arguments,
        /// and the encoding agrees with redis-protocol's decoder.
        #[test]
        fn roundtrip_any_split(
            reqs in prop::collection::vec(
                prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6), 1..6),
            cut in 0usize..400,
        ) {
            let mut wire = BytesMut::new();
            for r in &reqs {
                encode_command(r, &mut wire);
            }
            let check = wire.clone();
            let decoded = redis_protocol::resp2::decode::decode_bytes(&check.freeze());
            prop_assert!(matches!(decoded, Ok(Some(_))));
            let cut = cut.min(wire.len());
            let mut p = RequestParser::new(Limits::default());
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut got = Vec::new();
            while let Some(a) = p.parse(&mut buf).map_err(|e| TestCaseError::fail(e.to_string()))? {
                got.push(a);
            }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(a) = p.parse(&mut buf).map_err(|e| TestCaseError::fail(e.to_string()))? {
                got.push(a);
            }
            let want: Vec<Vec<Bytes>> = reqs
                .iter()
                .map(|r| r.iter().map(|a| Bytes::from(a.clone())).collect())
                .collect();
            prop_assert_eq!(got, want);
        }

        /// Arbitrary bytes never panic the framer.
        #[test]
        fn garbage_never_panics(data in prop::collection::vec(any::<u8>(), 0..300)) {
            let mut p = RequestParser::new(Limits { max_bulk_len: 64, max_args: 8, max_inline_len: 32 });
            let mut buf = BytesMut::from(&data[..]);
            while let Ok(Some(_)) = p.parse(&mut buf) {}
        }
    }
}
