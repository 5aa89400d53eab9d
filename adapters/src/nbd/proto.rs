//! The NBD wire format: constants, and parsing / encoding of handshake options, requests
//! and replies, as pure functions over byte slices (no I/O).
//!
//! What is spoken (the NBD protocol document, `doc/proto.md` of the reference
//! implementation, with its INFO extension): the fixed newstyle handshake with
//! `NBD_OPT_EXPORT_NAME`, `NBD_OPT_LIST`, `NBD_OPT_ABORT`, `NBD_OPT_INFO`, `NBD_OPT_GO`,
//! `NBD_OPT_STRUCTURED_REPLY`, `NBD_OPT_LIST_META_CONTEXT` and `NBD_OPT_SET_META_CONTEXT`
//! (one context, [`META_BASE_ALLOCATION`]); simple replies, or structured replies once
//! negotiated (`NBD_REPLY_TYPE_NONE`, `OFFSET_DATA`, `OFFSET_HOLE`, `BLOCK_STATUS`,
//! `ERROR`); TLS and extended headers are answered `NBD_REP_ERR_UNSUP`, which clients treat
//! as "not offered"; the commands READ, WRITE, DISC, FLUSH, TRIM, WRITE_ZEROES with the
//! FUA flag, and BLOCK_STATUS (with `NBD_CMD_FLAG_REQ_ONE`) once a context is set.

/// `NBDMAGIC`, the first word the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the newstyle magic, and the prefix of every option the client sends.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can omit the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: omit the 124 zero bytes.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Transmission flag: always set.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: the export is read-only.
pub const FLAG_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: `NBD_CMD_FLUSH` is supported.
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: `NBD_CMD_FLAG_FUA` is supported.
pub const FLAG_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: `NBD_CMD_TRIM` is supported.
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: `NBD_CMD_WRITE_ZEROES` is supported.
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: several connections to one export see one another's writes, and a
/// flush on one covers writes acknowledged on all.
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;

/// Option: choose an export and enter transmission (no error reply possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: abort the handshake.
pub const OPT_ABORT: u32 = 2;
/// Option: list exports.
pub const OPT_LIST: u32 = 3;
/// Option: start TLS (not offered).
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: use structured replies in transmission.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// Option: list metadata contexts.
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Option: select metadata contexts for `NBD_CMD_BLOCK_STATUS`.
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// Option reply: done.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of a list.
pub const REP_SERVER: u32 = 2;
/// Option reply: one information item of `NBD_OPT_INFO` / `NBD_OPT_GO`.
pub const REP_INFO: u32 = 3;
/// Option reply: one metadata context (id, name).
pub const REP_META_CONTEXT: u32 = 4;
/// Option error: unknown or unsupported option.
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
/// Option error: syntactically invalid option.
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
/// Option error: no such export.
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;

/// Information item: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// Information item: the export's canonical name.
pub const INFO_NAME: u16 = 1;
/// Information item: block size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Command: read.
pub const CMD_READ: u16 = 0;
/// Command: write.
pub const CMD_WRITE: u16 = 1;
/// Command: disconnect.
pub const CMD_DISC: u16 = 2;
/// Command: flush.
pub const CMD_FLUSH: u16 = 3;
/// Command: trim (discard).
pub const CMD_TRIM: u16 = 4;
/// Command: write zeroes.
pub const CMD_WRITE_ZEROES: u16 = 6;
/// Command: block status of the selected metadata contexts.
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag (WRITE_ZEROES): do not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag (BLOCK_STATUS): one extent is enough.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;

/// Structured reply flag: the last chunk of a reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Structured reply chunk: nothing (success, with `DONE`).
pub const REPLY_TYPE_NONE: u16 = 0;
/// Structured reply chunk: data at an offset.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Structured reply chunk: a range that reads as zeroes.
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// Structured reply chunk: block status descriptors of one context.
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// Structured reply chunk: an error.
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

/// The one metadata context offered: allocation (holes and zeroes).
pub const META_BASE_ALLOCATION: &str = "base:allocation";
/// Its context id.
pub const META_BASE_ALLOCATION_ID: u32 = 1;
/// `base:allocation` state: not allocated.
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` state: reads as zeroes.
pub const STATE_ZERO: u32 = 1 << 1;

/// Error: operation not permitted.
pub const EPERM: u32 = 1;
/// Error: input/output error.
pub const EIO: u32 = 5;
/// Error: invalid argument.
pub const EINVAL: u32 = 22;
/// Error: no space left.
pub const ENOSPC: u32 = 28;

/// Largest READ or WRITE payload accepted (what qemu and libnbd use by default), also
/// advertised as the maximum block size.
pub const MAX_PAYLOAD: u32 = 32 << 20;

/// Longest option data accepted; export names are at most 4096 bytes.
pub const MAX_OPTION_LEN: u32 = 64 << 10;

/// Bytes of a request header.
pub const REQUEST_LEN: usize = 28;

/// One transmission request's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Command flags.
    pub flags: u16,
    /// Command type.
    pub kind: u16,
    /// The client's handle (cookie), echoed in the reply.
    pub handle: u64,
    /// Byte offset in the export.
    pub offset: u64,
    /// Byte length.
    pub length: u32,
}

fn be_u16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_be_bytes(a)
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// Parses a request header; `None` when the magic is wrong (the stream is lost).
#[must_use]
pub fn parse_request(b: &[u8; REQUEST_LEN]) -> Option<Request> {
    if be_u32(b, 0) != REQUEST_MAGIC {
        return None;
    }
    Some(Request {
        flags: be_u16(b, 4),
        kind: be_u16(b, 6),
        handle: be_u64(b, 8),
        offset: be_u64(b, 16),
        length: be_u32(b, 24),
    })
}

/// Encodes a request header (used by tests and tools).
#[must_use]
pub fn encode_request(r: &Request) -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&r.flags.to_be_bytes());
    b[6..8].copy_from_slice(&r.kind.to_be_bytes());
    b[8..16].copy_from_slice(&r.handle.to_be_bytes());
    b[16..24].copy_from_slice(&r.offset.to_be_bytes());
    b[24..28].copy_from_slice(&r.length.to_be_bytes());
    b
}

/// Checks a request against an export of `size` bytes: the error to answer with, if any.
/// Requests past the end are `ENOSPC` for writes (as the protocol recommends) and `EINVAL`
/// otherwise; unknown commands or flags, oversized payloads, and BLOCK_STATUS without a
/// selected metadata context (`block_status` false) or of length 0 are `EINVAL`.
///
/// # Errors
/// The NBD error number to reply with.
pub fn validate(r: &Request, size: u64, block_status: bool) -> Result<(), u32> {
    let allowed = match r.kind {
        CMD_READ | CMD_WRITE | CMD_TRIM | CMD_FLUSH => CMD_FLAG_FUA,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        CMD_BLOCK_STATUS if block_status && r.length > 0 => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
        _ => return Err(EINVAL),
    };
    if r.flags & !allowed != 0 {
        return Err(EINVAL);
    }
    if r.kind == CMD_FLUSH {
        return Ok(());
    }
    if matches!(r.kind, CMD_READ | CMD_WRITE) && r.length > MAX_PAYLOAD {
        return Err(EINVAL);
    }
    match r.offset.checked_add(u64::from(r.length)) {
        Some(end) if end <= size => Ok(()),
        _ if matches!(r.kind, CMD_WRITE | CMD_WRITE_ZEROES) => Err(ENOSPC),
        _ => Err(EINVAL),
    }
}

/// A simple reply header (the data of a successful READ follows it).
#[must_use]
pub fn simple_reply(error: u32, handle: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b
}

/// A structured reply chunk header (its payload of `len` bytes follows).
#[must_use]
pub fn structured_header(flags: u16, kind: u16, handle: u64, len: u32) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// A whole `NBD_REPLY_TYPE_OFFSET_HOLE` chunk.
#[must_use]
pub fn chunk_hole(done: bool, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    let mut b = structured_header(flags, REPLY_TYPE_OFFSET_HOLE, handle, 12).to_vec();
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b
}

/// The header and offset of an `NBD_REPLY_TYPE_OFFSET_DATA` chunk carrying `len` bytes
/// (the data follows).
#[must_use]
pub fn chunk_data_head(done: bool, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    let mut b =
        structured_header(flags, REPLY_TYPE_OFFSET_DATA, handle, len.saturating_add(8)).to_vec();
    b.extend_from_slice(&offset.to_be_bytes());
    b
}

/// A final `NBD_REPLY_TYPE_NONE` chunk (success).
#[must_use]
pub fn chunk_done(handle: u64) -> [u8; 20] {
    structured_header(REPLY_FLAG_DONE, REPLY_TYPE_NONE, handle, 0)
}

/// A final `NBD_REPLY_TYPE_ERROR` chunk.
#[must_use]
pub fn chunk_error(handle: u64, error: u32, message: &str) -> Vec<u8> {
    let msg = &message.as_bytes()[..message.len().min(4096)];
    let len = u32::try_from(6 + msg.len()).unwrap_or(6);
    let mut b = structured_header(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, handle, len).to_vec();
    b.extend_from_slice(&error.to_be_bytes());
    b.extend_from_slice(&u16::try_from(msg.len()).unwrap_or(0).to_be_bytes());
    b.extend_from_slice(msg);
    b
}

/// A final `NBD_REPLY_TYPE_BLOCK_STATUS` chunk: `(length, flags)` descriptors of context
/// `id`.
#[must_use]
pub fn chunk_block_status(handle: u64, id: u32, extents: &[(u32, u32)]) -> Vec<u8> {
    let len = u32::try_from(4 + 8 * extents.len()).unwrap_or(u32::MAX);
    let mut b = structured_header(REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, handle, len).to_vec();
    b.extend_from_slice(&id.to_be_bytes());
    for (l, f) in extents {
        b.extend_from_slice(&l.to_be_bytes());
        b.extend_from_slice(&f.to_be_bytes());
    }
    b
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRequest {
    /// Export name.
    pub export: String,
    /// Queries (for LIST, none means all contexts).
    pub queries: Vec<String>,
}

/// Parses meta context option data: u32 export name length, name, u32 query count, then
/// each query as u32 length and string.
///
/// # Errors
/// A description of what is malformed.
pub fn parse_meta_request(data: &[u8]) -> Result<MetaRequest, &'static str> {
    fn take<'a>(d: &mut &'a [u8], n: usize) -> Result<&'a [u8], &'static str> {
        if d.len() < n {
            return Err("meta context data shorter than its lengths say");
        }
        let (h, t) = d.split_at(n);
        *d = t;
        Ok(h)
    }
    fn string(d: &mut &[u8]) -> Result<String, &'static str> {
        let len = usize::try_from(be_u32(take(d, 4)?, 0)).map_err(|_| "length overflows")?;
        let bytes = take(d, len)?;
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| "a string is not UTF-8")
    }
    let mut d = data;
    let export = string(&mut d)?;
    let count = be_u32(take(&mut d, 4)?, 0);
    let mut queries = Vec::new();
    for _ in 0..count {
        queries.push(string(&mut d)?);
    }
    if !d.is_empty() {
        return Err("bytes after the last query");
    }
    Ok(MetaRequest { export, queries })
}

/// `NBD_REP_META_CONTEXT` data: context id and name.
#[must_use]
pub fn rep_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut b = id.to_be_bytes().to_vec();
    b.extend_from_slice(name.as_bytes());
    b
}

/// The server's greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
#[must_use]
pub fn greeting() -> [u8; 18] {
    let mut b = [0u8; 18];
    b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// An option header the client sent: (option, data length); `None` for a wrong magic.
#[must_use]
pub fn parse_option_header(b: &[u8; 16]) -> Option<(u32, u32)> {
    (be_u64(b, 0) == IHAVEOPT).then(|| (be_u32(b, 8), be_u32(b, 12)))
}

/// An option reply.
#[must_use]
pub fn option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&reply.to_be_bytes());
    b.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// The data of an `NBD_OPT_INFO` / `NBD_OPT_GO`: the export name and the information
/// items asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name (empty: the default export).
    pub name: String,
    /// Information items requested.
    pub items: Vec<u16>,
}

/// Parses `NBD_OPT_INFO` / `NBD_OPT_GO` data: u32 name length, name, u16 count, u16 items.
///
/// # Errors
/// A description of what is malformed.
pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest, &'static str> {
    if data.len() < 6 {
        return Err("option data shorter than its fixed fields");
    }
    let name_len = usize::try_from(be_u32(data, 0)).map_err(|_| "name length overflows")?;
    let rest = &data[4..];
    if name_len.checked_add(2).is_none_or(|need| rest.len() < need) {
        return Err("name length runs past the option data");
    }
    let name = std::str::from_utf8(&rest[..name_len]).map_err(|_| "export name is not UTF-8")?;
    let count = usize::from(be_u16(rest, name_len));
    let items = &rest[name_len + 2..];
    if items.len() != 2 * count {
        return Err("information request count does not match the option length");
    }
    Ok(InfoRequest {
        name: name.to_string(),
        items: items.chunks_exact(2).map(|c| be_u16(c, 0)).collect(),
    })
}

/// `NBD_REP_INFO` data for `NBD_INFO_EXPORT`: size and transmission flags.
#[must_use]
pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(12);
    b.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b
}

/// `NBD_REP_INFO` data for `NBD_INFO_NAME`.
#[must_use]
pub fn info_name(name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + name.len());
    b.extend_from_slice(&INFO_NAME.to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b
}

/// `NBD_REP_INFO` data for `NBD_INFO_BLOCK_SIZE`: minimum, preferred, maximum.
#[must_use]
pub fn info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(14);
    b.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    b.extend_from_slice(&min.to_be_bytes());
    b.extend_from_slice(&preferred.to_be_bytes());
    b.extend_from_slice(&max.to_be_bytes());
    b
}

/// `NBD_REP_SERVER` data: one export name.
#[must_use]
pub fn rep_server(name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len());
    b.extend_from_slice(&u32::try_from(name.len()).unwrap_or(0).to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b
}

/// The reply to `NBD_OPT_EXPORT_NAME`: size, transmission flags, and 124 zero bytes unless
/// the client negotiated `NBD_FLAG_C_NO_ZEROES`.
#[must_use]
pub fn export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(134);
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        b.extend_from_slice(&[0u8; 124]);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_roundtrip_and_bad_magic() {
        let r = Request {
            flags: CMD_FLAG_FUA,
            kind: CMD_WRITE,
            handle: 0x0102_0304_0506_0708,
            offset: 1 << 40,
            length: 4096,
        };
        let b = encode_request(&r);
        assert_eq!(&b[..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(parse_request(&b), Some(r));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(parse_request(&bad), None);
    }

    fn req(kind: u16, flags: u16, offset: u64, length: u32) -> Request {
        Request {
            flags,
            kind,
            handle: 1,
            offset,
            length,
        }
    }

    fn validate3(r: &Request, size: u64) -> Result<(), u32> {
        validate(r, size, false)
    }

    #[test]
    fn block_status_and_structured_chunks() {
        let size = 1 << 20;
        let bs = req(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 4096);
        assert_eq!(validate(&bs, size, false), Err(EINVAL));
        assert_eq!(validate(&bs, size, true), Ok(()));
        assert_eq!(
            validate(&req(CMD_BLOCK_STATUS, 0, 0, 0), size, true),
            Err(EINVAL)
        );
        assert_eq!(
            validate(&req(CMD_BLOCK_STATUS, 0, size, 1), size, true),
            Err(EINVAL)
        );
        let h = chunk_hole(true, 9, 4096, 512);
        assert_eq!(h.len(), 32);
        assert_eq!(&h[..4], &STRUCTURED_REPLY_MAGIC.to_be_bytes());
        assert_eq!(&h[4..6], &REPLY_FLAG_DONE.to_be_bytes());
        assert_eq!(&h[16..20], &12u32.to_be_bytes());
        let d = chunk_data_head(false, 9, 0, 100);
        assert_eq!(&d[16..20], &108u32.to_be_bytes());
        assert_eq!(d.len(), 28);
        let e = chunk_error(9, EIO, "boom");
        assert_eq!(&e[16..20], &10u32.to_be_bytes());
        assert_eq!(e.len(), 30);
        let b = chunk_block_status(9, 1, &[(8192, STATE_HOLE | STATE_ZERO), (4096, 0)]);
        assert_eq!(&b[16..20], &20u32.to_be_bytes());
        assert_eq!(b.len(), 40);
        // Meta context requests.
        let mut m = Vec::new();
        m.extend_from_slice(&5u32.to_be_bytes());
        m.extend_from_slice(b"disk0");
        m.extend_from_slice(&1u32.to_be_bytes());
        m.extend_from_slice(&15u32.to_be_bytes());
        m.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
        assert_eq!(
            parse_meta_request(&m),
            Ok(MetaRequest {
                export: "disk0".into(),
                queries: vec![META_BASE_ALLOCATION.into()]
            })
        );
        assert!(parse_meta_request(&m[..m.len() - 1]).is_err());
        let mut long = m.clone();
        long.push(0);
        assert!(parse_meta_request(&long).is_err());
        let mut lie = m.clone();
        lie[12] = 0xff;
        assert!(parse_meta_request(&lie).is_err());
    }

    #[test]
    fn validation() {
        let size = 1 << 20;
        assert_eq!(validate3(&req(CMD_READ, 0, 0, 4096), size), Ok(()));
        assert_eq!(validate3(&req(CMD_READ, 0, size - 1, 1), size), Ok(()));
        assert_eq!(validate3(&req(CMD_READ, 0, size - 1, 2), size), Err(EINVAL));
        assert_eq!(validate3(&req(CMD_READ, 0, size, 0), size), Ok(()));
        assert_eq!(validate3(&req(CMD_READ, 0, u64::MAX, 2), size), Err(EINVAL));
        assert_eq!(validate3(&req(CMD_WRITE, 0, size, 1), size), Err(ENOSPC));
        assert_eq!(
            validate3(&req(CMD_WRITE_ZEROES, 0, u64::MAX, 1), size),
            Err(ENOSPC)
        );
        assert_eq!(
            validate3(&req(CMD_TRIM, CMD_FLAG_FUA, 0, 1 << 20), size),
            Ok(())
        );
        assert_eq!(validate3(&req(CMD_TRIM, 0, 1, 1 << 20), size), Err(EINVAL));
        assert_eq!(
            validate3(&req(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 0, 512), size),
            Ok(())
        );
        assert_eq!(
            validate3(&req(CMD_WRITE, CMD_FLAG_NO_HOLE, 0, 512), size),
            Err(EINVAL)
        );
        assert_eq!(validate3(&req(CMD_READ, 1 << 2, 0, 512), size), Err(EINVAL));
        assert_eq!(validate3(&req(5, 0, 0, 512), size), Err(EINVAL));
        assert_eq!(validate3(&req(7, 0, 0, 512), size), Err(EINVAL));
        assert_eq!(validate3(&req(CMD_FLUSH, 0, 0, 0), size), Ok(()));
        let big = 1 << 40;
        assert_eq!(validate3(&req(CMD_READ, 0, 0, MAX_PAYLOAD), big), Ok(()));
        assert_eq!(
            validate3(&req(CMD_READ, 0, 0, MAX_PAYLOAD + 1), big),
            Err(EINVAL)
        );
        assert_eq!(
            validate3(&req(CMD_WRITE, 0, 0, MAX_PAYLOAD + 1), big),
            Err(EINVAL)
        );
        assert_eq!(validate3(&req(CMD_TRIM, 0, 0, u32::MAX), big), Ok(()));
    }

    #[test]
    fn info_requests() {
        let mut d = Vec::new();
        d.extend_from_slice(&5u32.to_be_bytes());
        d.extend_from_slice(b"disk0");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        assert_eq!(
            parse_info_request(&d),
            Ok(InfoRequest {
                name: "disk0".into(),
                items: vec![INFO_NAME, INFO_BLOCK_SIZE]
            })
        );
        // Truncated, overlong, lying lengths, bad UTF-8.
        assert!(parse_info_request(&d[..d.len() - 1]).is_err());
        assert!(parse_info_request(&d[..3]).is_err());
        let mut long = d.clone();
        long.push(0);
        assert!(parse_info_request(&long).is_err());
        let mut lie = d.clone();
        lie[3] = 200;
        assert!(parse_info_request(&lie).is_err());
        let mut huge = d.clone();
        huge[0] = 0xff;
        assert!(parse_info_request(&huge).is_err());
        let mut utf = d.clone();
        utf[4] = 0xff;
        assert!(parse_info_request(&utf).is_err());
        // Empty name, no items.
        let empty = [0u8, 0, 0, 0, 0, 0];
        assert_eq!(
            parse_info_request(&empty),
            Ok(InfoRequest {
                name: String::new(),
                items: vec![]
            })
        );
    }

    #[test]
    fn encodings() {
        let g = greeting();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(&g[16..], &[0, 3]);
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(b"IHAVEOPT");
        h[8..12].copy_from_slice(&OPT_GO.to_be_bytes());
        h[12..16].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(parse_option_header(&h), Some((OPT_GO, 9)));
        h[0] = b'X';
        assert_eq!(parse_option_header(&h), None);
        let r = option_reply(OPT_LIST, REP_SERVER, &rep_server("ab"));
        assert_eq!(r.len(), 20 + 6);
        assert_eq!(&r[16..20], &6u32.to_be_bytes());
        assert_eq!(info_export(10, 3).len(), 12);
        assert_eq!(info_block_size(1, 2, 3).len(), 14);
        assert_eq!(export_name_reply(1, 1, false).len(), 134);
        assert_eq!(export_name_reply(1, 1, true).len(), 10);
        let s = simple_reply(EIO, 7);
        assert_eq!(&s[..4], &[0x67, 0x44, 0x66, 0x98]);
        assert_eq!(&s[4..8], &5u32.to_be_bytes());
    }
}
