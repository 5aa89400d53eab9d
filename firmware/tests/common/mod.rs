//! The firmware suites' test support: the workspace's shared `lightstore-testkit` (drives,
//! redis-server, raw RESP, recorded skips) with this crate's drive binary, and what only
//! these suites use (`lightstore fsck` runs, INFO fields).

#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::io::Read;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod cluster;
pub mod compare;
pub mod script;

pub use lightstore_testkit::resp::{ask, exchange, read_for, read_frame, send};
pub use lightstore_testkit::{RedisServer, TEST_CAPACITY};

/// Name of these suites in the skip log.
const SUITE: &str = "firmware";

/// A running drive of this build (`lightstore_testkit::Drive` started on the binary cargo
/// built for these tests); killed on drop.
pub struct Drive(lightstore_testkit::Drive);

impl Drive {
    /// Starts a drive on `data_dir` with extra flags (`--port 0` unless they give a port);
    /// waits until it accepts clients.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Drive {
        Drive::start_with_env(data_dir, extra, &[])
    }

    /// [`Drive::start`] with extra environment variables for the drive.
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Drive {
        Drive(lightstore_testkit::Drive::start_bin(
            Path::new(env!("CARGO_BIN_EXE_lightstore")),
            data_dir,
            extra,
            env,
        ))
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(self) {
        self.0.kill9();
    }

    /// SHUTDOWN through the protocol; waits for a clean exit and returns its success.
    pub fn shutdown(self) -> bool {
        self.0.shutdown()
    }

    /// Waits for the process to exit on its own (after SIGTERM, say).
    pub fn wait_exit(self) -> bool {
        self.0.wait_exit()
    }
}

impl Deref for Drive {
    type Target = lightstore_testkit::Drive;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Drive {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// Whether a Debian tool is installed; records a skip when it is not.
pub fn have_tool(bin: &str) -> bool {
    lightstore_testkit::skips::have_tool(SUITE, bin)
}

/// Records a skipped test part (see `lightstore_testkit::skips`).
pub fn record_skip(kind: &str, what: &str, why: &str) {
    lightstore_testkit::skips::record_skip(SUITE, kind, what, why);
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

/// Increments `key` by one `n` times through WATCH / GET / MULTI SET / EXEC, retrying each
/// increment whose EXEC another client's write aborted (optimistic locking, as a client
/// library does it).
pub fn watch_increments(c: &mut redis::Connection, key: &str, n: i64) {
    let mut done = 0;
    while done < n {
        let _: () = redis::cmd("WATCH").arg(key).query(c).unwrap();
        let v: Option<i64> = redis::cmd("GET").arg(key).query(c).unwrap();
        let r: Option<(String,)> = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(key)
            .arg(v.unwrap_or(0) + 1)
            .query(c)
            .unwrap();
        if r.is_some() {
            done += 1;
        }
    }
}
