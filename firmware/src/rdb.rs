//! DUMP and RESTORE payloads in Redis's format: one value serialized as in an RDB file, then
//! the RDB version (2 bytes, little-endian) and a CRC-64 (Jones, as Redis computes it) of
//! all the bytes before it.
//!
//! The drive writes the plain encodings every Redis version loads (a string, a list, a set,
//! a hash, a sorted set with binary scores), stamped with RDB version 10 (Redis 7.0's). It
//! reads those and the compact ones redis-server 7.0 and 7.2 write (listpack hashes, sorted
//! sets and sets, quicklists of listpacks or plain nodes, intsets, integer-encoded and
//! LZF-compressed strings, and the older text-scored sorted set), up to RDB version 11, so a
//! key moves between redis-server and the drive with DUMP and RESTORE, or with redis-server's
//! MIGRATE. The ziplist encodings of Redis 6 and older and streams, modules and functions are
//! refused as "Bad data format".

use thiserror::Error;

/// RDB version the drive stamps on its payloads (Redis 7.0's).
pub const RDB_VERSION: u16 = 10;

/// Newest RDB version whose payloads the drive reads (Redis 7.2's).
const MAX_RDB_VERSION: u16 = 11;

/// RDB object types.
const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
const TYPE_SET_LISTPACK: u8 = 20;

/// Quicklist node containers.
const QUICKLIST_PLAIN: u64 = 1;
const QUICKLIST_PACKED: u64 = 2;

/// Most elements a payload may announce before its bytes prove them: a length is checked
/// against the bytes left, so a forged count cannot make the drive reserve memory.
const MIN_ELEMENT_BYTES: u64 = 1;

/// A value as a DUMP payload carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum DumpValue {
    /// A string.
    String(Vec<u8>),
    /// A list, head first.
    List(Vec<Vec<u8>>),
    /// A set's members.
    Set(Vec<Vec<u8>>),
    /// A hash's fields and values.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A sorted set's members and scores.
    ZSet(Vec<(Vec<u8>, f64)>),
}

/// Why a payload cannot be restored; the texts are Redis's replies.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RdbError {
    /// Too short, a checksum that does not match, or a newer RDB version.
    #[error("ERR DUMP payload version or checksum are wrong")]
    Checksum,
    /// A type or encoding the drive does not read, or bytes that do not parse.
    #[error("ERR Bad data format")]
    BadFormat,
}

type Result<T> = std::result::Result<T, RdbError>;

/// The CRC-64 Redis puts at the end of a payload.
fn crc64(bytes: &[u8]) -> u64 {
    crc::Crc::<u64>::new(&crc::CRC_64_REDIS).checksum(bytes)
}

/// The DUMP payload of `value`.
pub fn encode(value: &DumpValue) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        DumpValue::String(s) => {
            out.push(TYPE_STRING);
            put_string(&mut out, s);
        }
        DumpValue::List(items) => {
            out.push(TYPE_LIST);
            put_len(&mut out, items.len() as u64);
            for i in items {
                put_string(&mut out, i);
            }
        }
        DumpValue::Set(members) => {
            out.push(TYPE_SET);
            put_len(&mut out, members.len() as u64);
            for m in members {
                put_string(&mut out, m);
            }
        }
        DumpValue::Hash(fields) => {
            out.push(TYPE_HASH);
            put_len(&mut out, fields.len() as u64);
            for (f, v) in fields {
                put_string(&mut out, f);
                put_string(&mut out, v);
            }
        }
        DumpValue::ZSet(members) => {
            out.push(TYPE_ZSET_2);
            put_len(&mut out, members.len() as u64);
            for (m, score) in members {
                put_string(&mut out, m);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The value a DUMP payload carries.
///
/// # Errors
/// [`RdbError::Checksum`] for a payload whose footer does not check out (Redis checks it
/// first); [`RdbError::BadFormat`] for one that does but cannot be read.
pub fn decode(payload: &[u8]) -> Result<DumpValue> {
    let Some(body_len) = payload.len().checked_sub(10) else {
        return Err(RdbError::Checksum);
    };
    let (body, footer) = payload.split_at(body_len);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..10].try_into().map_err(|_| RdbError::Checksum)?);
    if version > MAX_RDB_VERSION || crc64(&payload[..body_len + 2]) != crc {
        return Err(RdbError::Checksum);
    }
    let mut r = Reader { b: body, at: 0 };
    let kind = r.byte()?;
    let value = match kind {
        TYPE_STRING => DumpValue::String(r.string()?),
        TYPE_LIST => DumpValue::List(r.strings()?),
        TYPE_SET => DumpValue::Set(r.strings()?),
        TYPE_ZSET | TYPE_ZSET_2 => {
            let n = r.count()?;
            let mut members = Vec::new();
            for _ in 0..n {
                let m = r.string()?;
                let score = if kind == TYPE_ZSET_2 {
                    f64::from_le_bytes(r.take(8)?.try_into().map_err(|_| RdbError::BadFormat)?)
                } else {
                    r.text_score()?
                };
                members.push((m, score));
            }
            DumpValue::ZSet(members)
        }
        TYPE_HASH => {
            let n = r.count()?;
            let mut fields = Vec::new();
            for _ in 0..n {
                fields.push((r.string()?, r.string()?));
            }
            DumpValue::Hash(fields)
        }
        TYPE_SET_INTSET => DumpValue::Set(intset(&r.string()?)?),
        TYPE_SET_LISTPACK => DumpValue::Set(listpack(&r.string()?)?),
        TYPE_HASH_LISTPACK => DumpValue::Hash(pairs(listpack(&r.string()?)?)?),
        TYPE_ZSET_LISTPACK => {
            let mut members = Vec::new();
            for (m, s) in pairs(listpack(&r.string()?)?)? {
                members.push((m, parse_score(&s)?));
            }
            DumpValue::ZSet(members)
        }
        TYPE_LIST_QUICKLIST_2 => {
            let nodes = r.count()?;
            let mut items = Vec::new();
            for _ in 0..nodes {
                let container = r.len()?;
                let node = r.string()?;
                match container {
                    QUICKLIST_PLAIN => items.push(node),
                    QUICKLIST_PACKED => items.extend(listpack(&node)?),
                    _ => return Err(RdbError::BadFormat),
                }
            }
            DumpValue::List(items)
        }
        _ => return Err(RdbError::BadFormat),
    };
    if r.at != body.len() {
        return Err(RdbError::BadFormat);
    }
    Ok(value)
}

/// An RDB length: 6 bits in one byte, 14 bits in two, or a 32- or 64-bit big-endian word.
fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if let Ok(n32) = u32::try_from(n) {
        out.push(0x80);
        out.extend_from_slice(&n32.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// A length-prefixed string.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Reads a payload's body.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

/// An RDB length, or a special string encoding (`11xxxxxx`).
enum Len {
    Plain(u64),
    Encoded(u8),
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8> {
        let b = *self.b.get(self.at).ok_or(RdbError::BadFormat)?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).ok_or(RdbError::BadFormat)?;
        let s = self.b.get(self.at..end).ok_or(RdbError::BadFormat)?;
        self.at = end;
        Ok(s)
    }

    fn raw_len(&mut self) -> Result<Len> {
        let first = self.byte()?;
        Ok(match first >> 6 {
            0 => Len::Plain(u64::from(first & 0x3f)),
            1 => Len::Plain(u64::from(first & 0x3f) << 8 | u64::from(self.byte()?)),
            2 if first == 0x80 => Len::Plain(u64::from(u32::from_be_bytes(
                self.take(4)?.try_into().map_err(|_| RdbError::BadFormat)?,
            ))),
            2 if first == 0x81 => Len::Plain(u64::from_be_bytes(
                self.take(8)?.try_into().map_err(|_| RdbError::BadFormat)?,
            )),
            2 => return Err(RdbError::BadFormat),
            _ => Len::Encoded(first & 0x3f),
        })
    }

    fn len(&mut self) -> Result<u64> {
        match self.raw_len()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(RdbError::BadFormat),
        }
    }

    /// An element count, no larger than the bytes left could hold.
    fn count(&mut self) -> Result<u64> {
        let n = self.len()?;
        let left = (self.b.len() - self.at) as u64;
        if n.saturating_mul(MIN_ELEMENT_BYTES) > left {
            return Err(RdbError::BadFormat);
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<Vec<u8>> {
        match self.raw_len()? {
            Len::Plain(n) => Ok(self
                .take(usize::try_from(n).map_err(|_| RdbError::BadFormat)?)?
                .to_vec()),
            Len::Encoded(0) => Ok((self.byte()? as i8).to_string().into_bytes()),
            Len::Encoded(1) => {
                let b = self.take(2)?;
                Ok(i16::from_le_bytes([b[0], b[1]]).to_string().into_bytes())
            }
            Len::Encoded(2) => {
                let b = self.take(4)?;
                Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]])
                    .to_string()
                    .into_bytes())
            }
            Len::Encoded(3) => {
                let compressed = usize::try_from(self.len()?).map_err(|_| RdbError::BadFormat)?;
                let plain = usize::try_from(self.len()?).map_err(|_| RdbError::BadFormat)?;
                let input = self.take(compressed)?;
                lzf_decompress(input, plain)
            }
            Len::Encoded(_) => Err(RdbError::BadFormat),
        }
    }

    fn strings(&mut self) -> Result<Vec<Vec<u8>>> {
        let n = self.count()?;
        (0..n).map(|_| self.string()).collect()
    }

    /// A score of the old sorted-set type: a length byte and its text, or 253 (NaN), 254
    /// (+inf), 255 (-inf).
    fn text_score(&mut self) -> Result<f64> {
        match self.byte()? {
            253 => Err(RdbError::BadFormat),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => parse_score(self.take(usize::from(n))?),
        }
    }
}

/// A score written as text (`1.5`, `-3`, `inf`).
fn parse_score(s: &[u8]) -> Result<f64> {
    let text = std::str::from_utf8(s).map_err(|_| RdbError::BadFormat)?;
    let score = match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ => text.parse::<f64>().map_err(|_| RdbError::BadFormat)?,
    };
    if score.is_nan() {
        return Err(RdbError::BadFormat);
    }
    Ok(score)
}

/// Consecutive elements as (first, second) pairs.
fn pairs(items: Vec<Vec<u8>>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    if items.len() % 2 != 0 {
        return Err(RdbError::BadFormat);
    }
    let mut it = items.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Ok(out)
}

/// The members of an intset blob: encoding (2, 4 or 8 bytes per member), count, members,
/// all little-endian.
fn intset(blob: &[u8]) -> Result<Vec<Vec<u8>>> {
    let word = |at: usize| -> Result<u32> {
        let b = blob.get(at..at + 4).ok_or(RdbError::BadFormat)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let width = word(0)? as usize;
    let n = word(4)? as usize;
    if !matches!(width, 2 | 4 | 8) || blob.len() != 8 + width.saturating_mul(n) {
        return Err(RdbError::BadFormat);
    }
    Ok(blob[8..]
        .chunks_exact(width)
        .map(|c| {
            let v = match width {
                2 => i64::from(i16::from_le_bytes([c[0], c[1]])),
                4 => i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                _ => i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
            };
            v.to_string().into_bytes()
        })
        .collect())
}

/// The elements of a listpack blob (integers as their decimal text): a 6-byte header (total
/// bytes, element count), entries (an encoding, its data, and the entry's length written
/// backwards), and an end byte 0xFF.
fn listpack(blob: &[u8]) -> Result<Vec<Vec<u8>>> {
    let total = blob
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or(RdbError::BadFormat)?;
    if total != blob.len() || total < 7 {
        return Err(RdbError::BadFormat);
    }
    let mut at = 6;
    let mut out = Vec::new();
    let get = |from: usize, n: usize| blob.get(from..from + n).ok_or(RdbError::BadFormat);
    loop {
        let enc = *blob.get(at).ok_or(RdbError::BadFormat)?;
        if enc == 0xff {
            break;
        }
        let start = at;
        let (item, data_len): (Vec<u8>, usize) = if enc & 0x80 == 0 {
            ((enc & 0x7f).to_string().into_bytes(), 1)
        } else if enc & 0xc0 == 0x80 {
            let n = usize::from(enc & 0x3f);
            (get(at + 1, n)?.to_vec(), 1 + n)
        } else if enc & 0xe0 == 0xc0 {
            let b = get(at + 1, 1)?;
            let raw = (u16::from(enc & 0x1f) << 8 | u16::from(b[0])) as i16;
            // 13-bit two's complement.
            let v = (raw << 3) >> 3;
            (v.to_string().into_bytes(), 2)
        } else if enc & 0xf0 == 0xe0 {
            let b = get(at + 1, 1)?;
            let n = usize::from(enc & 0x0f) << 8 | usize::from(b[0]);
            (get(at + 2, n)?.to_vec(), 2 + n)
        } else {
            match enc {
                0xf0 => {
                    let b = get(at + 1, 4)?;
                    let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
                    (get(at + 5, n)?.to_vec(), 5 + n)
                }
                0xf1 => {
                    let b = get(at + 1, 2)?;
                    (i16::from_le_bytes([b[0], b[1]]).to_string().into_bytes(), 3)
                }
                0xf2 => {
                    let b = get(at + 1, 3)?;
                    let v = i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8;
                    (v.to_string().into_bytes(), 4)
                }
                0xf3 => {
                    let b = get(at + 1, 4)?;
                    (
                        i32::from_le_bytes([b[0], b[1], b[2], b[3]])
                            .to_string()
                            .into_bytes(),
                        5,
                    )
                }
                0xf4 => {
                    let b = get(at + 1, 8)?;
                    let v = i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                    (v.to_string().into_bytes(), 9)
                }
                _ => return Err(RdbError::BadFormat),
            }
        };
        let back = match data_len {
            0..=127 => 1,
            128..=16_382 => 2,
            16_383..=2_097_150 => 3,
            2_097_151..=268_435_454 => 4,
            _ => 5,
        };
        at = start + data_len + back;
        out.push(item);
    }
    if at + 1 != blob.len() {
        return Err(RdbError::BadFormat);
    }
    Ok(out)
}

/// LZF decompression (the format Redis compresses long strings with): literal runs
/// (`000lllll`, l+1 bytes follow) and back references (`lllooooo oooooooo`, with a length
/// byte more when `lll` is 7).
fn lzf_decompress(input: &[u8], len: usize) -> Result<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(len.min(input.len().saturating_mul(64)));
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            let lit = input.get(i..i + n).ok_or(RdbError::BadFormat)?;
            out.extend_from_slice(lit);
            i += n;
        } else {
            let mut n = ctrl >> 5;
            if n == 7 {
                n += usize::from(*input.get(i).ok_or(RdbError::BadFormat)?);
                i += 1;
            }
            let low = usize::from(*input.get(i).ok_or(RdbError::BadFormat)?);
            i += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            let from = out.len().checked_sub(back).ok_or(RdbError::BadFormat)?;
            for k in 0..n + 2 {
                let b = out[from + k];
                out.push(b);
            }
        }
        if out.len() > len {
            return Err(RdbError::BadFormat);
        }
    }
    if out.len() != len {
        return Err(RdbError::BadFormat);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Payloads redis-server 7.0.15 wrote with DUMP.
    const REDIS_STRING: &[u8] = b"\x00\x05hello\n\x00cr\xdfve4 \n";
    const REDIS_LIST: &[u8] = b"\x12\x01\x02\x0f\x0f\x00\x00\x00\x03\x00\x81a\x02\x81b\x02\x0c\x01\xff\n\x00\x1d\xc97:\xed\xb70@";
    const REDIS_HASH: &[u8] =
        b"\x10\r\r\x00\x00\x00\x02\x00\x81f\x02\x81v\x02\xff\n\x00 \xf1=D#T\x08\x9d";
    const REDIS_INTSET: &[u8] = b"\x0b\x0e\x02\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\x00\x03\x00\n\x00\xa5\x02\\\xe2mnM\x1b";
    const REDIS_SET: &[u8] = b"\x02\x02\x01b\x01a\n\x00u\xd9\x9d\x83^\xf8_e";
    const REDIS_ZSET: &[u8] =
        b"\x11\x0f\x0f\x00\x00\x00\x02\x00\x81m\x02\x831.5\x04\xff\n\x00I\xd9\x87`x%N\x8a";

    fn s(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|x| x.as_bytes().to_vec()).collect()
    }

    #[test]
    fn reads_what_redis_server_dumps() {
        assert_eq!(
            decode(REDIS_STRING),
            Ok(DumpValue::String(b"hello".to_vec()))
        );
        assert_eq!(
            decode(REDIS_LIST),
            Ok(DumpValue::List(s(&["a", "b", "12"])))
        );
        assert_eq!(
            decode(REDIS_HASH),
            Ok(DumpValue::Hash(vec![(b"f".to_vec(), b"v".to_vec())]))
        );
        assert_eq!(
            decode(REDIS_INTSET),
            Ok(DumpValue::Set(s(&["1", "2", "3"])))
        );
        assert_eq!(decode(REDIS_SET), Ok(DumpValue::Set(s(&["b", "a"]))));
        assert_eq!(
            decode(REDIS_ZSET),
            Ok(DumpValue::ZSet(vec![(b"m".to_vec(), 1.5)]))
        );
    }

    #[test]
    fn its_own_payloads_round_trip_and_match_redis_for_strings() {
        // A string is written exactly as redis-server writes it.
        assert_eq!(encode(&DumpValue::String(b"hello".to_vec())), REDIS_STRING);
        let long = vec![b'x'; 70_000];
        let values = [
            DumpValue::String(Vec::new()),
            DumpValue::String(long.clone()),
            DumpValue::List(vec![b"a".to_vec(), Vec::new(), long.clone()]),
            DumpValue::Set(s(&["a", "b"])),
            DumpValue::Hash(vec![(b"f".to_vec(), long), (Vec::new(), b"v".to_vec())]),
            DumpValue::ZSet(vec![
                (b"a".to_vec(), -0.5),
                (b"b".to_vec(), f64::INFINITY),
                (b"c".to_vec(), 1e300),
            ]),
        ];
        for v in values {
            assert_eq!(decode(&encode(&v)), Ok(v));
        }
    }

    #[test]
    fn damaged_or_unknown_payloads_are_refused_with_redis_errors() {
        assert_eq!(decode(b""), Err(RdbError::Checksum));
        assert_eq!(decode(b"\x00\x01"), Err(RdbError::Checksum));
        let mut bad = REDIS_STRING.to_vec();
        bad[3] ^= 1;
        assert_eq!(decode(&bad), Err(RdbError::Checksum));
        // A valid footer over a type the drive does not read (a stream).
        let mut stream = vec![21u8, 0];
        stream.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64(&stream);
        stream.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&stream), Err(RdbError::BadFormat));
        // A count far beyond the bytes that follow.
        let mut forged = vec![TYPE_LIST, 0x80, 0xff, 0xff, 0xff, 0xff];
        forged.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64(&forged);
        forged.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&forged), Err(RdbError::BadFormat));
        // A newer RDB version than the drive reads.
        let mut newer = vec![TYPE_STRING, 0];
        newer.extend_from_slice(&(MAX_RDB_VERSION + 1).to_le_bytes());
        let crc = crc64(&newer);
        newer.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&newer), Err(RdbError::Checksum));
    }

    #[test]
    fn listpack_integers_and_lzf_strings_decode() {
        // Entries: 7-bit 5, 13-bit -2, int16 1000, int24 -100000, int32, int64, a 12-bit
        // string of 70 bytes.
        let mut lp = vec![0u8; 6];
        let mut entry = |bytes: &[u8]| {
            lp.extend_from_slice(bytes);
            let n = bytes.len();
            lp.push(if n < 128 { n as u8 } else { 0 });
        };
        entry(&[5]);
        entry(&[0xc0 | 0x1f, 0xfe]);
        entry(&[0xf1, 0xe8, 0x03]);
        let v = (-100_000i32).to_le_bytes();
        entry(&[0xf2, v[0], v[1], v[2]]);
        let v = i32::MIN.to_le_bytes();
        entry(&[0xf3, v[0], v[1], v[2], v[3]]);
        let mut e = vec![0xf4];
        e.extend_from_slice(&i64::MAX.to_le_bytes());
        entry(&e);
        let mut e = vec![0xe0, 70];
        e.extend_from_slice(&[b'y'; 70]);
        entry(&e);
        lp.push(0xff);
        let total = lp.len() as u32;
        lp[..4].copy_from_slice(&total.to_le_bytes());
        lp[4..6].copy_from_slice(&7u16.to_le_bytes());
        let items = listpack(&lp).unwrap();
        assert_eq!(
            items[..6],
            s(&[
                "5",
                "-2",
                "1000",
                "-100000",
                "-2147483648",
                "9223372036854775807"
            ])[..]
        );
        assert_eq!(items[6], vec![b'y'; 70]);
        // LZF: a literal "ab", then a back reference copying 6 bytes from 2 back.
        assert_eq!(
            lzf_decompress(&[1, b'a', b'b', 4 << 5, 1], 8).unwrap(),
            b"abababab"
        );
        assert_eq!(
            lzf_decompress(&[1, b'a', b'b', 4 << 5, 9], 8),
            Err(RdbError::BadFormat)
        );
    }
}
