//! Starts the real `lightstore` binary on a free port and a scratch data directory.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running drive; killed on drop.
pub struct Drive {
    pub child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
}

/// Capacity of test devices (files reserved at format: keep them small).
pub const TEST_CAPACITY: &str = "1GiB";

impl Drive {
    /// Starts a drive on `data_dir` with extra flags (`--port 0` unless they give a port);
    /// waits until it accepts clients.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Drive {
        Drive::start_with_env(data_dir, extra, &[])
    }

    /// [`Drive::start`] with extra environment variables for the drive.
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Drive {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lightstore"));
        cmd.envs(env.iter().copied());
        if !extra.contains(&"--port") {
            cmd.args(["--port", "0"]);
        }
        if !extra.contains(&"--capacity") {
            cmd.args(["--capacity", TEST_CAPACITY]);
        }
        let mut child = cmd
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting lightstore");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref() {
                let Ok(line) = line else { break };
                if let Some(a) = line.strip_prefix("lightstore ready on ") {
                    let _ = tx.send(a.trim().to_string());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                panic!("lightstore did not become ready (exit: {status:?})");
            }
        };
        Drive {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
        }
    }

    /// A redis-rs client for this drive.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://{}/", self.addr)).unwrap()
    }

    /// A synchronous redis-rs connection.
    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().unwrap()
    }

    /// A raw TCP connection.
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SHUTDOWN through the protocol; waits for a clean exit and returns its success.
    pub fn shutdown(mut self) -> bool {
        let mut s = self.raw();
        let _ = s.write_all(b"*1\r\n$8\r\nSHUTDOWN\r\n");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.success();
            }
            assert!(
                Instant::now() < deadline,
                "drive did not exit after SHUTDOWN"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit on its own (after SIGTERM, say).
    pub fn wait_exit(mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.success();
            }
            assert!(Instant::now() < deadline, "drive did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Drive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

/// Whether a Debian tool is installed; prints why a test skips when it is not.
pub fn have_tool(bin: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        record_skip("tool", bin, "not installed (cargo xtask test installs it)");
    }
    ok
}

/// Records a skipped test part: printed, and appended to the file `LIGHTSTORE_SKIP_LOG`
/// names (`cargo xtask test` sets it, lists every skip after the run, and fails the run on
/// a `tool` skip: a tool it installs must not be missing). `kind`: `tool` (something
/// installable is missing) or `environment` (the machine cannot offer it: no FUSE, no loop
/// devices).
pub fn record_skip(kind: &str, what: &str, why: &str) {
    eprintln!("SKIPPED ({kind}) {what}: {why}");
    if let Some(path) = std::env::var_os("LIGHTSTORE_SKIP_LOG") {
        let line = format!("{kind}\tfirmware\t{what}\t{why}\n");
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// What `lightstore fsck` did: its exit code, stdout and stderr.
pub struct FsckRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `lightstore fsck --data-dir DATA_DIR EXTRA...` to its end (at most two minutes).
pub fn fsck(data_dir: &Path, extra: &[&str]) -> FsckRun {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .arg("fsck")
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting lightstore fsck");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let mut stderr = String::new();
    let _ = err.read_to_string(&mut stderr);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("lightstore fsck did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    FsckRun {
        code: status.code(),
        stdout: reader.join().unwrap(),
        stderr,
    }
}

/// The value of `field` in INFO's `section` (panics when it is missing).
pub fn info_value(con: &mut redis::Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {text}"))
        .trim()
        .to_string()
}

/// One numeric field of an INFO section (panics when missing: the test names it).
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> u64 {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO has no {field}: {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// An in-memory redis-server (no snapshots, no AOF) with extra flags on a free loopback port,
/// for differential tests; killed on drop.
pub struct RedisServer {
    pub child: Child,
    pub port: u16,
}

impl RedisServer {
    /// Starts it in `dir` and waits until it accepts clients.
    pub fn start(dir: &Path, extra: &[&str]) -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (cargo xtask test installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return RedisServer { child, port };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server did not start");
    }

    /// A raw socket to it (10 s read timeout).
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// A redis-rs connection to it.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
            let mut body = vec![0u8; n() as usize + 2];
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
