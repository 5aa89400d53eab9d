//! A `lightstore` drive process for a test: started on a free port, ready when it says so,
//! killed on drop.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Capacity of test devices (files reserved at format: keep them small).
pub const TEST_CAPACITY: &str = "1GiB";

/// Longest wait for a process's readiness line (a debug build recovering a device can be
/// slow on a loaded 2-core host).
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest wait for a drive to exit after SHUTDOWN or a signal.
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts `cmd` with stdout piped, waits for a line `<prefix>ADDR`, and returns the child
/// and ADDR (the rest of stdout is drained by a thread; stderr is inherited, so a failing
/// test shows the process's log).
///
/// # Panics
/// The process cannot start or does not print the line within [`READY_TIMEOUT`].
pub fn spawn_ready(mut cmd: Command, prefix: &'static str, what: &str) -> (Child, SocketAddr) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(a) = line.strip_prefix(prefix) {
                let _ = tx.send(a.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(a) => (child, a.parse().unwrap()),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().ok();
            panic!("{what} did not become ready (exit: {status:?})");
        }
    }
}

/// A running drive; killed (SIGKILL) on drop.
pub struct Drive {
    /// The process.
    pub child: Child,
    /// Where it accepts clients.
    pub addr: SocketAddr,
    /// Its data directory.
    pub data_dir: PathBuf,
}

impl Drive {
    /// Starts [`crate::lightstore_bin`] on `data_dir` with extra flags; see
    /// [`Drive::start_bin`].
    pub fn start(data_dir: &Path, extra: &[&str]) -> Drive {
        Drive::start_bin(&crate::lightstore_bin(), data_dir, extra, &[])
    }

    /// Starts the drive binary `bin` on `data_dir` with extra flags and environment
    /// variables: `--port 0` and `--capacity` [`TEST_CAPACITY`] unless `extra` gives them,
    /// `RUST_LOG=warn` (`error` in cluster mode, where drives start on placeholder
    /// addresses and warn about them) unless `env` sets it. Waits until it accepts clients.
    pub fn start_bin(bin: &Path, data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Drive {
        let mut cmd = Command::new(bin);
        if !extra.contains(&"--port") {
            cmd.args(["--port", "0"]);
        }
        if !extra.contains(&"--capacity") {
            cmd.args(["--capacity", TEST_CAPACITY]);
        }
        let log = if extra.contains(&"--cluster-config") {
            "error"
        } else {
            "warn"
        };
        cmd.arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", log)
            .envs(env.iter().copied());
        let (child, addr) = spawn_ready(cmd, "lightstore ready on ", "lightstore");
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

    /// A raw TCP connection (20 s read timeout).
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait for the process to be gone (the drive stays usable as a value).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(mut self) {
        self.kill();
    }

    /// SHUTDOWN through the protocol; waits for a clean exit and returns its success.
    pub fn shutdown(self) -> bool {
        let mut s = self.raw();
        let _ = s.write_all(b"*1\r\n$8\r\nSHUTDOWN\r\n");
        self.wait_exit()
    }

    /// Waits for the process to exit on its own (after SIGTERM, say) and returns whether
    /// it exited with success.
    pub fn wait_exit(mut self) -> bool {
        let deadline = Instant::now() + EXIT_TIMEOUT;
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
        self.kill();
    }
}
