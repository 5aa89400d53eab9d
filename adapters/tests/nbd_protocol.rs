//! `lightstore-nbd` over raw sockets against a real drive: requests out of bounds,
//! oversized, with unknown commands or flags; partial blocks and the volume's partial last
//! block; pipelining; DISC; clients that break the protocol or vanish mid-request; many
//! connections writing different sectors of the same blocks at once; structured replies
//! (hole and data chunks, error chunks) and `base:allocation` block status.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use adapters::nbd::proto::{self, Request};
use common::{Drive, Nbd};

/// A minimal synchronous NBD client.
struct Conn {
    s: TcpStream,
    size: u64,
}

impl Conn {
    /// Fixed newstyle with NO_ZEROES, then NBD_OPT_EXPORT_NAME.
    fn open(addr: SocketAddr, export: &str) -> Conn {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).unwrap();
        assert_eq!(greeting, proto::greeting());
        s.write_all(&3u32.to_be_bytes()).unwrap();
        let mut opt = proto::IHAVEOPT.to_be_bytes().to_vec();
        opt.extend_from_slice(&proto::OPT_EXPORT_NAME.to_be_bytes());
        opt.extend_from_slice(&(export.len() as u32).to_be_bytes());
        opt.extend_from_slice(export.as_bytes());
        s.write_all(&opt).unwrap();
        let mut r = [0u8; 10];
        s.read_exact(&mut r).unwrap();
        let size = u64::from_be_bytes(r[..8].try_into().unwrap());
        Conn { s, size }
    }

    fn send(&mut self, kind: u16, flags: u16, handle: u64, offset: u64, length: u32, data: &[u8]) {
        let h = proto::encode_request(&Request {
            flags,
            kind,
            handle,
            offset,
            length,
        });
        self.s.write_all(&h).unwrap();
        self.s.write_all(data).unwrap();
    }

    /// Reads a simple reply: (error, handle).
    fn reply(&mut self) -> (u32, u64) {
        let mut r = [0u8; 16];
        self.s.read_exact(&mut r).unwrap();
        assert_eq!(&r[..4], &proto::SIMPLE_REPLY_MAGIC.to_be_bytes());
        (
            u32::from_be_bytes(r[4..8].try_into().unwrap()),
            u64::from_be_bytes(r[8..16].try_into().unwrap()),
        )
    }

    fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.send(proto::CMD_READ, 0, 1, offset, len, &[]);
        let (err, handle) = self.reply();
        assert_eq!(handle, 1);
        if err != 0 {
            return Err(err);
        }
        let mut d = vec![0u8; len as usize];
        self.s.read_exact(&mut d).unwrap();
        Ok(d)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> u32 {
        self.send(proto::CMD_WRITE, 0, 2, offset, data.len() as u32, data);
        let (err, handle) = self.reply();
        assert_eq!(handle, 2);
        err
    }

    fn simple(&mut self, kind: u16, flags: u16, offset: u64, len: u32) -> u32 {
        self.send(kind, flags, 3, offset, len, &[]);
        let (err, handle) = self.reply();
        assert_eq!(handle, 3);
        err
    }

    /// True when the server closed the connection.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8) | 1)
        .collect()
}

#[test]
fn bad_requests_get_errors_and_the_connection_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    // 122 whole blocks and a last block of 576 bytes.
    let nbd = Nbd::on_drive(&drive, &["v:1000000", "big:1GiB"]);
    let mut c = Conn::open(nbd.addr, "v");
    assert_eq!(c.size, 1_000_000);

    assert_eq!(c.read(999_000, 2000), Err(proto::EINVAL));
    assert_eq!(c.read(1_000_000, 0), Ok(vec![]));
    assert_eq!(c.read(u64::MAX - 1, 10), Err(proto::EINVAL));
    assert_eq!(c.write(999_999, b"xy"), proto::ENOSPC);
    assert_eq!(
        c.simple(proto::CMD_WRITE_ZEROES, 0, 999_999, 2),
        proto::ENOSPC
    );
    assert_eq!(c.simple(proto::CMD_TRIM, 0, 0, 1_000_001), proto::EINVAL);
    // Unknown commands (CACHE, BLOCK_STATUS, 99) and flags not offered (DF).
    for kind in [5, 7, 99] {
        assert_eq!(c.simple(kind, 0, 0, 512), proto::EINVAL, "command {kind}");
    }
    assert_eq!(c.simple(proto::CMD_READ, 1 << 2, 0, 512), proto::EINVAL);
    // The connection is still in step: never-written bytes read as zeroes.
    assert_eq!(c.read(0, 16).unwrap(), vec![0u8; 16]);

    let mut b = Conn::open(nbd.addr, "big");
    // Oversized READ, and an oversized WRITE whose payload is skipped.
    assert_eq!(b.read(0, proto::MAX_PAYLOAD + 1), Err(proto::EINVAL));
    let huge = vec![7u8; proto::MAX_PAYLOAD as usize + 8192];
    assert_eq!(b.write(0, &huge), proto::EINVAL);
    assert_eq!(b.read(0, 8192).unwrap(), vec![0u8; 8192]);
    // The largest accepted WRITE and READ.
    let max = pattern(3, proto::MAX_PAYLOAD as usize);
    assert_eq!(b.write(4096, &max), 0);
    assert!(b.read(4096, proto::MAX_PAYLOAD).unwrap() == max);

    // Partial blocks: across the boundary of blocks 0 and 1.
    let p = pattern(9, 100);
    assert_eq!(c.write(8150, &p), 0);
    let back = c.read(0, 16384).unwrap();
    assert!(back[..8150].iter().all(|&x| x == 0));
    assert_eq!(&back[8150..8250], &p[..]);
    assert!(back[8250..].iter().all(|&x| x == 0));
    // The volume's partial last block.
    let tail = pattern(4, 576);
    assert_eq!(c.write(999_424, &tail), 0);
    assert_eq!(c.read(999_424, 576).unwrap(), tail);
    // FUA and FLUSH.
    let fua = pattern(5, 8192);
    c.send(proto::CMD_WRITE, proto::CMD_FLAG_FUA, 4, 16384, 8192, &fua);
    assert_eq!(c.reply(), (0, 4));
    assert_eq!(c.simple(proto::CMD_FLUSH, 0, 0, 0), 0);
    // WRITE_ZEROES over part of two blocks, TRIM of whole blocks.
    assert_eq!(
        c.simple(proto::CMD_WRITE_ZEROES, proto::CMD_FLAG_NO_HOLE, 8160, 60),
        0
    );
    let back = c.read(8150, 100).unwrap();
    assert_eq!(&back[..10], &p[..10]);
    assert!(back[10..70].iter().all(|&x| x == 0));
    assert_eq!(&back[70..], &p[70..]);
    assert_eq!(c.simple(proto::CMD_TRIM, 0, 16384, 8192), 0);
    assert_eq!(c.read(16384, 8192).unwrap(), vec![0u8; 8192]);
    // A TRIM of the whole 1 GiB volume (131072 blocks) is quick: only stored keys cost.
    let t = std::time::Instant::now();
    assert_eq!(b.simple(proto::CMD_TRIM, 0, 0, 1 << 30), 0);
    println!("TRIM of 1 GiB: {:?}", t.elapsed());
    assert_eq!(b.read(4096, 8192).unwrap(), vec![0u8; 8192]);

    // Pipelined: 64 writes in one go, answered (in any order) with their handles.
    let mut batch = Vec::new();
    for i in 0..64u64 {
        let h = proto::encode_request(&Request {
            flags: 0,
            kind: proto::CMD_WRITE,
            handle: 1000 + i,
            offset: i * 8192 + 1,
            length: 512,
        });
        batch.extend_from_slice(&h);
        batch.extend_from_slice(&pattern(i as u8, 512));
    }
    b.s.write_all(&batch).unwrap();
    let mut handles: Vec<u64> = (0..64)
        .map(|_| b.reply())
        .map(|(e, h)| {
            assert_eq!(e, 0);
            h
        })
        .collect();
    handles.sort_unstable();
    assert_eq!(handles, (1000..1064).collect::<Vec<_>>());
    for i in 0..64u64 {
        assert_eq!(b.read(i * 8192 + 1, 512).unwrap(), pattern(i as u8, 512));
    }
}

#[test]
fn disc_answers_requests_in_flight_first() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let nbd = Nbd::on_drive(&drive, &["v:16MiB"]);
    let mut c = Conn::open(nbd.addr, "v");
    let mut batch = Vec::new();
    for i in 0..32u64 {
        batch.extend_from_slice(&proto::encode_request(&Request {
            flags: 0,
            kind: proto::CMD_WRITE,
            handle: i,
            offset: i * 65536,
            length: 65536,
        }));
        batch.extend_from_slice(&pattern(i as u8, 65536));
    }
    batch.extend_from_slice(&proto::encode_request(&Request {
        flags: 0,
        kind: proto::CMD_DISC,
        handle: 99,
        offset: 0,
        length: 0,
    }));
    c.s.write_all(&batch).unwrap();
    for _ in 0..32 {
        assert_eq!(c.reply().0, 0);
    }
    assert!(c.closed(), "the server closes after DISC");
    let mut c = Conn::open(nbd.addr, "v");
    for i in 0..32u64 {
        assert_eq!(c.read(i * 65536, 65536).unwrap(), pattern(i as u8, 65536));
    }
}

#[test]
fn misbehaving_clients_do_not_take_the_server_down() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let mut nbd = Nbd::on_drive(&drive, &["v:16MiB"]);
    let addr = nbd.addr;

    // Not NBD at all.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    // Gone before the greeting is even read, and mid-option.
    drop(TcpStream::connect(addr).unwrap());
    let mut s = TcpStream::connect(addr).unwrap();
    s.read_exact(&mut g).unwrap();
    s.write_all(&1u32.to_be_bytes()).unwrap();
    s.write_all(&proto::IHAVEOPT.to_be_bytes()[..5]).unwrap();
    drop(s);

    // A WRITE whose payload never fully arrives.
    let mut c = Conn::open(addr, "v");
    c.send(proto::CMD_WRITE, 0, 1, 0, 65536, &[0xee; 1000]);
    drop(c);
    // Half a request header.
    let mut c = Conn::open(addr, "v");
    c.s.write_all(&[0x25, 0x60, 0x95]).unwrap();
    drop(c);
    // A request with a wrong magic: the server hangs up on this connection.
    let mut c = Conn::open(addr, "v");
    c.s.write_all(&[0u8; 28]).unwrap();
    assert!(c.closed());
    // Reads in flight, and the client leaves without reading the replies.
    let mut c = Conn::open(addr, "v");
    for i in 0..16 {
        c.send(proto::CMD_READ, 0, i, 0, 1 << 20, &[]);
    }
    drop(c);
    // Writes in flight, and the client leaves.
    let mut c = Conn::open(addr, "v");
    for i in 0..16u64 {
        c.send(
            proto::CMD_WRITE,
            0,
            i,
            (1 << 20) + i * 8192,
            8192,
            &[0x5a; 8192],
        );
    }
    drop(c);

    std::thread::sleep(Duration::from_millis(300));
    assert!(nbd.alive(), "lightstore-nbd died");
    let mut c = Conn::open(addr, "v");
    // The truncated WRITE was never applied.
    assert_eq!(c.read(0, 65536).unwrap(), vec![0u8; 65536]);
    assert_eq!(c.write(0, b"still here"), 0);
    assert_eq!(c.read(0, 10).unwrap(), b"still here");
}

#[test]
fn many_connections_write_sectors_of_the_same_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let nbd = Nbd::on_drive(&drive, &["v:16MiB"]);
    let addr = nbd.addr;
    const BLOCKS: u64 = 24;
    const WRITERS: u64 = 8;
    // Writer w owns bytes [w*1024, (w+1)*1024) of every block; all pipeline their writes,
    // so every block sees eight read-modify-writes at once from eight connections.
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Conn::open(addr, "v");
                let mut batch = Vec::new();
                for b in 0..BLOCKS {
                    batch.extend_from_slice(&proto::encode_request(&Request {
                        flags: 0,
                        kind: proto::CMD_WRITE,
                        handle: b,
                        offset: b * 8192 + w * 1024,
                        length: 1024,
                    }));
                    batch.extend_from_slice(&pattern((w * 31 + b) as u8, 1024));
                }
                c.s.write_all(&batch).unwrap();
                for _ in 0..BLOCKS {
                    assert_eq!(c.reply().0, 0);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = Conn::open(addr, "v");
    let all = c.read(0, (BLOCKS * 8192) as u32).unwrap();
    for b in 0..BLOCKS {
        for w in 0..WRITERS {
            let at = (b * 8192 + w * 1024) as usize;
            assert!(
                all[at..at + 1024] == pattern((w * 31 + b) as u8, 1024)[..],
                "block {b}, writer {w} lost its write"
            );
        }
    }
}

/// A drive with ACL users: `lightstore-nbd --user` authenticates as that user.
#[test]
fn the_adapter_authenticates_as_an_acl_user() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("users.acl");
    std::fs::write(&acl, "user default off\nuser blk on >blk-pw ~* &* +@all\n").unwrap();
    let drive = Drive::start(
        &dir.path().join("data"),
        &["--aclfile", acl.to_str().unwrap()],
    );
    let file = dir.path().join("password");
    std::fs::write(&file, "blk-pw\n").unwrap();
    let nbd = Nbd::start(&[
        "--drive".into(),
        drive.addr.to_string(),
        "--volume".into(),
        "v:1MiB".into(),
        "--user".into(),
        "blk".into(),
        "--password-file".into(),
        file.display().to_string(),
    ]);
    let mut c = Conn::open(nbd.addr, "v");
    let data = pattern(5, 8192);
    assert_eq!(c.write(0, &data), 0);
    assert!(c.read(0, 8192).unwrap() == data);
}

/// A drive with a password: `lightstore-nbd` reads it from `--password-file` and sends AUTH
/// on every connection; without it the adapter refuses to start (it pings the drive first).
#[test]
fn the_adapter_authenticates_with_a_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(&dir.path().join("data"), &["--requirepass", "blockpw"]);
    let file = dir.path().join("password");
    std::fs::write(&file, "blockpw\n").unwrap();
    let nbd = Nbd::start(&[
        "--drive".into(),
        drive.addr.to_string(),
        "--volume".into(),
        "v:1MiB".into(),
        "--password-file".into(),
        file.display().to_string(),
    ]);
    let mut c = Conn::open(nbd.addr, "v");
    let data = pattern(9, 8192);
    assert_eq!(c.write(8192, &data), 0);
    assert!(c.read(8192, 8192).unwrap() == data);

    // Without the password the adapter stops at its first ping, naming the refusal.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lightstore-nbd"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--drive",
            &drive.addr.to_string(),
        ])
        .args(["--volume", "v:1MiB"])
        .env_remove("LIGHTSTORE_PASSWORD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("NOAUTH"), "{err}");
    assert!(!err.contains("blockpw"));
}

/// Reads one structured reply chunk: (flags, type, handle, payload).
fn chunk(s: &mut TcpStream) -> (u16, u16, u64, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    assert_eq!(&h[..4], &proto::STRUCTURED_REPLY_MAGIC.to_be_bytes());
    let flags = u16::from_be_bytes(h[4..6].try_into().unwrap());
    let kind = u16::from_be_bytes(h[6..8].try_into().unwrap());
    let handle = u64::from_be_bytes(h[8..16].try_into().unwrap());
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
    let mut d = vec![0u8; len as usize];
    s.read_exact(&mut d).unwrap();
    (flags, kind, handle, d)
}

/// Sends one option and reads option replies up to and including the first that is not
/// `NBD_REP_META_CONTEXT` / `NBD_REP_INFO`: (type, data) of each.
fn negotiate(s: &mut TcpStream, option: u32, data: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut b = proto::IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).unwrap();
    let mut out = Vec::new();
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        assert_eq!(&h[..8], &proto::OPT_REPLY_MAGIC.to_be_bytes());
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d).unwrap();
        out.push((kind, d));
        if kind != proto::REP_META_CONTEXT && kind != proto::REP_INFO {
            return out;
        }
    }
}

#[test]
fn structured_replies_block_status_and_error_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let nbd = Nbd::on_drive(&drive, &["v:1MiB"]);
    let mut s = TcpStream::connect(nbd.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let r = negotiate(&mut s, proto::OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(r, [(proto::REP_ACK, vec![])]);
    let mut meta = 1u32.to_be_bytes().to_vec();
    meta.extend_from_slice(b"v");
    meta.extend_from_slice(&1u32.to_be_bytes());
    meta.extend_from_slice(&15u32.to_be_bytes());
    meta.extend_from_slice(proto::META_BASE_ALLOCATION.as_bytes());
    let r = negotiate(&mut s, proto::OPT_SET_META_CONTEXT, &meta);
    assert_eq!(
        r,
        [
            (
                proto::REP_META_CONTEXT,
                proto::rep_meta_context(
                    proto::META_BASE_ALLOCATION_ID,
                    proto::META_BASE_ALLOCATION
                )
            ),
            (proto::REP_ACK, vec![])
        ]
    );
    let mut go = 1u32.to_be_bytes().to_vec();
    go.extend_from_slice(b"v");
    go.extend_from_slice(&0u16.to_be_bytes());
    let r = negotiate(&mut s, proto::OPT_GO, &go);
    assert_eq!(r.last().unwrap().0, proto::REP_ACK);

    let send = |s: &mut TcpStream, kind: u16, flags: u16, handle: u64, offset: u64, len: u32| {
        let h = proto::encode_request(&Request {
            flags,
            kind,
            handle,
            offset,
            length: len,
        });
        s.write_all(&h).unwrap();
    };
    // A write of block 1: answered with a NONE chunk.
    send(&mut s, proto::CMD_WRITE, 0, 7, 8192, 8192);
    s.write_all(&pattern(9, 8192)).unwrap();
    assert_eq!(
        chunk(&mut s),
        (proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_NONE, 7, vec![])
    );
    // A read of blocks 0-2 from the middle of block 0: hole, data, hole.
    send(&mut s, proto::CMD_READ, 0, 8, 100, 3 * 8192 - 200);
    let (f, k, h, d) = chunk(&mut s);
    assert_eq!((f, k, h), (0, proto::REPLY_TYPE_OFFSET_HOLE, 8));
    assert_eq!(
        d,
        [&100u64.to_be_bytes()[..], &8092u32.to_be_bytes()].concat()
    );
    let (f, k, h, d) = chunk(&mut s);
    assert_eq!((f, k, h), (0, proto::REPLY_TYPE_OFFSET_DATA, 8));
    assert_eq!(&d[..8], &8192u64.to_be_bytes());
    assert!(d[8..] == pattern(9, 8192)[..]);
    let (f, k, _, d) = chunk(&mut s);
    assert_eq!(
        (f, k),
        (proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_OFFSET_HOLE)
    );
    assert_eq!(
        d,
        [&16384u64.to_be_bytes()[..], &8092u32.to_be_bytes()].concat()
    );
    // Block status of blocks 0-3: hole, data, two holes merged.
    let bs = |extents: &[(u32, u32)]| {
        let mut b = proto::META_BASE_ALLOCATION_ID.to_be_bytes().to_vec();
        for (l, f) in extents {
            b.extend_from_slice(&l.to_be_bytes());
            b.extend_from_slice(&f.to_be_bytes());
        }
        b
    };
    let hole = proto::STATE_HOLE | proto::STATE_ZERO;
    send(&mut s, proto::CMD_BLOCK_STATUS, 0, 9, 0, 4 * 8192);
    assert_eq!(
        chunk(&mut s),
        (
            proto::REPLY_FLAG_DONE,
            proto::REPLY_TYPE_BLOCK_STATUS,
            9,
            bs(&[(8192, hole), (8192, 0), (16384, hole)])
        )
    );
    send(
        &mut s,
        proto::CMD_BLOCK_STATUS,
        proto::CMD_FLAG_REQ_ONE,
        10,
        8192 + 5,
        (1 << 20) - 8192 - 5,
    );
    let (_, k, _, d) = chunk(&mut s);
    assert_eq!(k, proto::REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(d, bs(&[(8192 - 5, 0)]));
    // Errors are ERROR chunks: out of range, an empty block status.
    for (kind, offset, len) in [
        (proto::CMD_READ, 1 << 20, 1),
        (proto::CMD_BLOCK_STATUS, 0, 0),
    ] {
        send(&mut s, kind, 0, 11, offset, len);
        let (f, k, h, d) = chunk(&mut s);
        assert_eq!(
            (f, k, h),
            (proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_ERROR, 11)
        );
        assert_eq!(&d[..4], &proto::EINVAL.to_be_bytes());
    }
    // TRIM gives the block back as a hole.
    send(&mut s, proto::CMD_TRIM, 0, 12, 8192, 8192);
    assert_eq!(chunk(&mut s).1, proto::REPLY_TYPE_NONE);
    send(&mut s, proto::CMD_BLOCK_STATUS, 0, 13, 0, 1 << 20);
    assert_eq!(chunk(&mut s).3, bs(&[(1 << 20, hole)]));
    send(&mut s, proto::CMD_DISC, 0, 14, 0, 0);
}
