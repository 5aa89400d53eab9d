//! The reply tree a command produces and its RESP2 / RESP3 encoding.
//!
//! Replies own their payloads as [`Bytes`], so a value read from the device is written to
//! the socket buffer once, at encoding, and never copied on the way there.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};

/// Bulk payloads at least this long are not copied by [`Reply::encode_vectored`]: they are
/// queued as segments of their own, to be written with vectored I/O.
pub const VECTORED_MIN_PAYLOAD: usize = 4096;

/// The protocol a connection speaks (`HELLO 2` / `HELLO 3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, the default for a new connection.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

/// One reply, in the RESP3 data model; encoding folds it into RESP2 where needed.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+text`.
    Simple(Bytes),
    /// `-CODE text`; the text includes its code (`ERR`, `WRONGTYPE`, `NOAUTH`, ...).
    Error(Bytes),
    /// `:n`.
    Integer(i64),
    /// `$len` and the bytes.
    Bulk(Bytes),
    /// The null bulk string (`$-1` in RESP2, `_` in RESP3).
    Null,
    /// The null array (`*-1` in RESP2, `_` in RESP3).
    NullArray,
    /// `*n` and the items.
    Array(Vec<Reply>),
    /// `%n` key-value pairs in RESP3, a flat array of `2n` items in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// `~n` in RESP3, an array in RESP2.
    Set(Vec<Reply>),
    /// `,d` in RESP3, a bulk string in Redis's number format in RESP2.
    Double(f64),
    /// `=len` with `txt:` in RESP3, a bulk string in RESP2.
    Verbatim(Bytes),
    /// `>n` out-of-band push in RESP3 (pub/sub messages and subscription replies), an array
    /// in RESP2.
    Push(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    #[must_use]
    pub fn ok() -> Self {
        Self::Simple(Bytes::from_static(b"OK"))
    }

    /// An error reply; `text` starts with its code, e.g. `"ERR syntax error"`.
    #[must_use]
    pub fn error(text: impl Into<String>) -> Self {
        Self::Error(Bytes::from(text.into()))
    }

    /// A bulk string holding `data`.
    #[must_use]
    pub fn bulk(data: impl Into<Bytes>) -> Self {
        Self::Bulk(data.into())
    }

    /// A bulk string of static text (names, fixed words).
    #[must_use]
    pub fn text(s: &'static str) -> Self {
        Self::Bulk(Bytes::from_static(s.as_bytes()))
    }

    /// A RESP3 set (`~`, an array in RESP2) of bulk strings, for SMEMBERS-style replies.
    #[must_use]
    pub fn bulk_set(members: impl IntoIterator<Item = Bytes>) -> Self {
        Self::Set(members.into_iter().map(Self::Bulk).collect())
    }

    /// A RESP3 map (`%`, a flat array in RESP2) of bulk-string pairs, for HGETALL-style
    /// replies.
    #[must_use]
    pub fn bulk_map(pairs: impl IntoIterator<Item = (Bytes, Bytes)>) -> Self {
        Self::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (Self::Bulk(k), Self::Bulk(v)))
                .collect(),
        )
    }

    /// Members with their scores as Redis 7 answers `WITHSCORES`: in RESP3 an array of
    /// `[member, double]` pairs, in RESP2 a flat array of member and score bulk strings.
    /// (The encoding depends on the protocol, so the reply is built for one.)
    #[must_use]
    pub fn with_scores(pairs: impl IntoIterator<Item = (Bytes, f64)>, proto: Protocol) -> Self {
        let mut items = Vec::new();
        for (member, score) in pairs {
            if proto == Protocol::Resp3 {
                items.push(Self::Array(vec![Self::Bulk(member), Self::Double(score)]));
            } else {
                items.push(Self::Bulk(member));
                items.push(Self::Double(score));
            }
        }
        Self::Array(items)
    }

    /// A score or a missing one (ZSCORE, ZINCRBY, ZMSCORE items): a double (`,` in RESP3, a
    /// bulk string in RESP2) or the null (`_` in RESP3, `$-1` in RESP2).
    #[must_use]
    pub fn score(score: Option<f64>) -> Self {
        score.map_or(Self::Null, Self::Double)
    }

    /// Whether this is an error reply.
    #[must_use]
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Error(_))
    }

    /// Bytes of bulk-string payload this reply carries (values sent to the client),
    /// recursively; verbatim text (INFO, CLIENT LIST) is not counted.
    #[must_use]
    pub fn payload_len(&self) -> usize {
        match self {
            Self::Bulk(b) => b.len(),
            Self::Array(items) | Self::Set(items) | Self::Push(items) => {
                items.iter().map(Self::payload_len).sum()
            }
            Self::Map(pairs) => pairs
                .iter()
                .map(|(k, v)| k.payload_len() + v.payload_len())
                .sum(),
            _ => 0,
        }
    }

    /// Appends the encoding of this reply in `proto` to `out`.
    pub fn encode(&self, proto: Protocol, out: &mut BytesMut) {
        self.encode_inner(proto, out, None);
    }

    /// Encodes without copying large values: the reply's framing goes into `tail`, and each
    /// bulk payload of at least [`VECTORED_MIN_PAYLOAD`] bytes is queued in `segments` as the
    /// payload's own `Bytes` (after what `tail` held before it, split off without a copy).
    /// The wire order is `segments`, front to back, then `tail`.
    pub fn encode_vectored(
        &self,
        proto: Protocol,
        tail: &mut BytesMut,
        segments: &mut VecDeque<Bytes>,
    ) {
        self.encode_inner(proto, tail, Some(segments));
    }

    /// Payload bytes [`Reply::encode_vectored`] copies (bulk payloads shorter than
    /// [`VECTORED_MIN_PAYLOAD`]).
    #[must_use]
    pub fn vectored_copy_len(&self) -> usize {
        match self {
            Self::Bulk(b) if b.len() < VECTORED_MIN_PAYLOAD => b.len(),
            Self::Array(items) | Self::Set(items) | Self::Push(items) => {
                items.iter().map(Self::vectored_copy_len).sum()
            }
            Self::Map(pairs) => pairs
                .iter()
                .map(|(k, v)| k.vectored_copy_len() + v.vectored_copy_len())
                .sum(),
            _ => 0,
        }
    }

    fn encode_inner(
        &self,
        proto: Protocol,
        out: &mut BytesMut,
        mut segments: Option<&mut VecDeque<Bytes>>,
    ) {
        let resp3 = proto == Protocol::Resp3;
        match self {
            Self::Simple(s) => {
                out.put_u8(b'+');
                put_line_safe(out, s);
            }
            Self::Error(s) => {
                out.put_u8(b'-');
                put_line_safe(out, s);
            }
            Self::Integer(n) => header(out, b':', *n),
            Self::Bulk(b) => match segments {
                Some(segs) if b.len() >= VECTORED_MIN_PAYLOAD => {
                    header(out, b'$', len_i64(b.len()));
                    let head = out.split();
                    if !head.is_empty() {
                        segs.push_back(head.freeze());
                    }
                    segs.push_back(b.clone());
                    out.put_slice(b"\r\n");
                }
                _ => bulk(out, b'$', b"", b),
            },
            Self::Null if resp3 => out.put_slice(b"_\r\n"),
            Self::Null => out.put_slice(b"$-1\r\n"),
            Self::NullArray if resp3 => out.put_slice(b"_\r\n"),
            Self::NullArray => out.put_slice(b"*-1\r\n"),
            Self::Array(items) => {
                header(out, b'*', len_i64(items.len()));
                for item in items {
                    item.encode_inner(proto, out, segments.as_deref_mut());
                }
            }
            Self::Push(items) => {
                header(out, if resp3 { b'>' } else { b'*' }, len_i64(items.len()));
                for item in items {
                    item.encode_inner(proto, out, segments.as_deref_mut());
                }
            }
            Self::Set(items) => {
                header(out, if resp3 { b'~' } else { b'*' }, len_i64(items.len()));
                for item in items {
                    item.encode_inner(proto, out, segments.as_deref_mut());
                }
            }
            Self::Map(pairs) => {
                if resp3 {
                    header(out, b'%', len_i64(pairs.len()));
                } else {
                    header(out, b'*', len_i64(pairs.len()).saturating_mul(2));
                }
                for (k, v) in pairs {
                    k.encode_inner(proto, out, segments.as_deref_mut());
                    v.encode_inner(proto, out, segments.as_deref_mut());
                }
            }
            Self::Double(d) => {
                let text = format_double(*d);
                if resp3 {
                    out.put_u8(b',');
                    out.put_slice(text.as_bytes());
                    out.put_slice(b"\r\n");
                } else {
                    bulk(out, b'$', b"", text.as_bytes());
                }
            }
            Self::Verbatim(b) if resp3 => bulk(out, b'=', b"txt:", b),
            Self::Verbatim(b) => bulk(out, b'$', b"", b),
        }
    }

    /// The encoding of this reply as a new buffer.
    #[must_use]
    pub fn to_bytes(&self, proto: Protocol) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(proto, &mut out);
        out.freeze()
    }
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `<kind><n>\r\n` without going through `fmt`.
fn header(out: &mut BytesMut, kind: u8, n: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut v = n.unsigned_abs();
    loop {
        at -= 1;
        // `v % 10` is below 10, so the cast cannot truncate.
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.reserve(24);
    out.put_u8(kind);
    if n < 0 {
        out.put_u8(b'-');
    }
    out.put_slice(&digits[at..]);
    out.put_slice(b"\r\n");
}

fn bulk(out: &mut BytesMut, kind: u8, prefix: &[u8], data: &[u8]) {
    header(out, kind, len_i64(prefix.len() + data.len()));
    out.reserve(prefix.len() + data.len() + 2);
    out.put_slice(prefix);
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// Simple strings and errors cannot hold CR or LF: Redis replaces them with spaces.
fn put_line_safe(out: &mut BytesMut, s: &[u8]) {
    out.reserve(s.len() + 2);
    for &b in s {
        out.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
    }
    out.put_slice(b"\r\n");
}

/// Formats a double as Redis 7 does for replies: the shortest text that reads back to the
/// same value, integers without a fraction, exponent form outside `1e-5 .. 1e17`, and
/// `inf` / `-inf` / `nan`.
#[must_use]
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".to_owned();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let exp = d.abs().log10().floor();
    if !(-5.0..17.0).contains(&exp) {
        let sci = format!("{d:e}");
        return match sci.split_once('e') {
            Some((mantissa, e)) => {
                let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |rest| ("-", rest));
                let pad = if digits.len() < 2 { "0" } else { "" };
                format!("{mantissa}e{sign}{pad}{digits}")
            }
            None => sci,
        };
    }
    format!("{d}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, p: Protocol) -> Vec<u8> {
        r.to_bytes(p).to_vec()
    }

    #[test]
    fn resp2_encodings() {
        let p = Protocol::Resp2;
        assert_eq!(enc(&Reply::ok(), p), b"+OK\r\n");
        assert_eq!(
            enc(&Reply::error("ERR bad\r\nthing"), p),
            b"-ERR bad  thing\r\n"
        );
        assert_eq!(enc(&Reply::Integer(-42), p), b":-42\r\n");
        assert_eq!(
            enc(&Reply::Integer(i64::MIN), p),
            b":-9223372036854775808\r\n"
        );
        assert_eq!(enc(&Reply::bulk("ab"), p), b"$2\r\nab\r\n");
        assert_eq!(enc(&Reply::Null, p), b"$-1\r\n");
        assert_eq!(enc(&Reply::NullArray, p), b"*-1\r\n");
        assert_eq!(
            enc(&Reply::Map(vec![(Reply::bulk("k"), Reply::Integer(1))]), p),
            b"*2\r\n$1\r\nk\r\n:1\r\n"
        );
        assert_eq!(enc(&Reply::Double(1.5), p), b"$3\r\n1.5\r\n");
        assert_eq!(
            enc(&Reply::Verbatim(Bytes::from_static(b"x")), p),
            b"$1\r\nx\r\n"
        );
    }

    #[test]
    fn resp3_encodings() {
        let p = Protocol::Resp3;
        assert_eq!(enc(&Reply::Null, p), b"_\r\n");
        assert_eq!(
            enc(&Reply::Map(vec![(Reply::bulk("k"), Reply::Integer(1))]), p),
            b"%1\r\n$1\r\nk\r\n:1\r\n"
        );
        assert_eq!(enc(&Reply::Double(-2.0), p), b",-2\r\n");
        assert_eq!(enc(&Reply::Double(f64::INFINITY), p), b",inf\r\n");
        assert_eq!(
            enc(&Reply::Verbatim(Bytes::from_static(b"x")), p),
            b"=5\r\ntxt:x\r\n"
        );
        assert_eq!(
            enc(&Reply::Set(vec![Reply::Integer(1)]), p),
            b"~1\r\n:1\r\n"
        );
        assert_eq!(
            enc(&Reply::Push(vec![Reply::text("message"), Reply::Null]), p),
            b">2\r\n$7\r\nmessage\r\n_\r\n"
        );
    }

    #[test]
    fn reply_helpers_follow_the_protocol() {
        let pairs = || vec![(Bytes::from_static(b"m"), 1.5)];
        assert_eq!(
            enc(
                &Reply::with_scores(pairs(), Protocol::Resp3),
                Protocol::Resp3
            ),
            b"*1\r\n*2\r\n$1\r\nm\r\n,1.5\r\n"
        );
        assert_eq!(
            enc(
                &Reply::with_scores(pairs(), Protocol::Resp2),
                Protocol::Resp2
            ),
            b"*2\r\n$1\r\nm\r\n$3\r\n1.5\r\n"
        );
        assert_eq!(enc(&Reply::score(None), Protocol::Resp3), b"_\r\n");
        assert_eq!(
            enc(
                &Reply::bulk_set([Bytes::from_static(b"a")]),
                Protocol::Resp3
            ),
            b"~1\r\n$1\r\na\r\n"
        );
        assert_eq!(
            enc(
                &Reply::bulk_map([(Bytes::from_static(b"f"), Bytes::from_static(b"v"))]),
                Protocol::Resp2
            ),
            b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        );
        assert_eq!(
            enc(&Reply::Push(vec![Reply::Integer(1)]), Protocol::Resp2),
            b"*1\r\n:1\r\n"
        );
    }

    #[test]
    fn doubles_like_redis() {
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(0.1), "0.1");
        assert_eq!(format_double(-1.25), "-1.25");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(1.5e-7), "1.5e-07");
        assert_eq!(format_double(123_456_789.0), "123456789");
        assert_eq!(format_double(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn vectored_encoding_matches_and_does_not_copy_large_values() {
        let big = Bytes::from(vec![7u8; VECTORED_MIN_PAYLOAD * 2]);
        let r = Reply::Array(vec![
            Reply::bulk("small"),
            Reply::Bulk(big.clone()),
            Reply::Map(vec![(Reply::bulk("k"), Reply::Bulk(big.clone()))]),
            Reply::Null,
        ]);
        for p in [Protocol::Resp2, Protocol::Resp3] {
            let mut tail = BytesMut::new();
            let mut segs = VecDeque::new();
            r.encode_vectored(p, &mut tail, &mut segs);
            assert!(
                segs.iter().any(|s| s.as_ptr() == big.as_ptr()),
                "a large value was copied"
            );
            let mut joined: Vec<u8> = segs.iter().flat_map(|s| s.iter().copied()).collect();
            joined.extend_from_slice(&tail);
            assert_eq!(joined, r.to_bytes(p).to_vec());
        }
        assert_eq!(r.vectored_copy_len(), 5 + 1);
    }

    #[test]
    fn payload_counts_nested_bulks() {
        let r = Reply::Array(vec![Reply::bulk("abc"), Reply::Null, Reply::bulk("de")]);
        assert_eq!(r.payload_len(), 5);
    }
}
