//! Raw RESP for tests: one command on a fresh connection, or frames on an open socket
//! (what a client library would hide: partial frames, pipelines, push frames).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Sends one command on a fresh connection and returns the first reply line (`+OK`,
/// `:3`, `$5`, `-ERR ...`).
pub fn resp_call(addr: SocketAddr, args: &[&[u8]]) -> String {
    let mut buf = bytes::BytesMut::new();
    kvproto::encode_command(args, &mut buf);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&buf).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n") {
        if s.read(&mut b).unwrap() == 0 {
            break;
        }
        out.push(b[0]);
    }
    String::from_utf8_lossy(&out).trim_end().to_string()
}

/// [`resp_call`] on a connection that first authenticates with `password` (when given).
pub fn resp_call_as(addr: SocketAddr, password: Option<&str>, args: &[&[u8]]) -> String {
    let Some(pw) = password else {
        return resp_call(addr, args);
    };
    let mut buf = bytes::BytesMut::new();
    kvproto::encode_command(&[&b"AUTH"[..], pw.as_bytes()], &mut buf);
    kvproto::encode_command(args, &mut buf);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&buf).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), "+OK", "AUTH to {addr}");
    line.clear();
    r.read_line(&mut line).unwrap();
    line.trim_end().to_string()
}

/// Sends raw bytes and reads what comes back until the server closes or `wait` passes
/// without more bytes.
pub fn exchange(s: &mut TcpStream, bytes: &[u8], wait: Duration) -> (Vec<u8>, bool) {
    s.write_all(bytes).unwrap();
    read_for(s, wait)
}

/// Reads until the peer closes (true) or nothing arrives for `wait` (false).
pub fn read_for(s: &mut TcpStream, wait: Duration) -> (Vec<u8>, bool) {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return (out, false)
            }
            Err(_) => return (out, true),
        }
    }
}

/// Sends one command as a RESP array of bulk strings.
pub fn send(s: &mut TcpStream, args: &[&[u8]]) {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    s.write_all(&out).unwrap();
}

/// Reads one RESP2/RESP3 reply (a push frame counts as one) and returns its raw bytes.
pub fn read_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    read_value(s, &mut out);
    out
}

fn read_line(s: &mut TcpStream, out: &mut Vec<u8>) -> Vec<u8> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut b).expect("a reply");
        line.push(b[0]);
    }
    out.extend_from_slice(&line);
    line.truncate(line.len() - 2);
    line
}

fn read_value(s: &mut TcpStream, out: &mut Vec<u8>) {
    let line = read_line(s, out);
    let n = || -> i64 { String::from_utf8_lossy(&line[1..]).parse().unwrap() };
    match line[0] {
        b'$' | b'=' | b'!' if n() >= 0 => {
            let mut body = vec![0u8; usize::try_from(n()).unwrap() + 2];
            s.read_exact(&mut body).unwrap();
            out.extend_from_slice(&body);
        }
        b'*' | b'~' | b'>' => (0..n().max(0)).for_each(|_| read_value(s, out)),
        b'%' | b'|' => (0..2 * n()).for_each(|_| read_value(s, out)),
        _ => {}
    }
}

/// Sends one command (words split on spaces) and reads its reply's raw bytes.
pub fn ask(s: &mut TcpStream, cmd: &str) -> Vec<u8> {
    let words: Vec<&[u8]> = cmd.split(' ').map(str::as_bytes).collect();
    send(s, &words);
    read_frame(s)
}
