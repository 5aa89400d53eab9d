//! The adapters suites' test support: the workspace's shared `lightstore-testkit` (drives,
//! clusters, raw RESP, recorded skips) and what only these suites use (`lightstore-nbd`
//! servers and its volume commands, files of random bytes).

#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};

pub use lightstore_testkit::skips::have;
pub use lightstore_testkit::{
    cluster_specs, drive_has_cluster_mode, lightstore_bin, node_id, resp_call, resp_call_as,
    spawn_ready, Cluster, Drive, TEST_CAPACITY,
};

/// Name of these suites in the skip log.
const SUITE: &str = "adapters";

/// True when every tool is installed; otherwise records which are missing (and their Debian
/// package) and returns false, so the test can return.
pub fn tools(test: &str, needed: &[(&str, &str)]) -> bool {
    lightstore_testkit::skips::tools(SUITE, test, needed)
}

/// Records a skipped test (see `lightstore_testkit::skips`).
pub fn record_skip(kind: &str, test: &str, why: &str) {
    lightstore_testkit::skips::record_skip(SUITE, kind, test, why);
}

/// A running `lightstore-nbd`; killed on drop.
pub struct Nbd {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Nbd {
    /// Starts `lightstore-nbd` on a free port with these arguments (`--drive ...`,
    /// `--volume ...`).
    pub fn start(args: &[String]) -> Nbd {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lightstore-nbd"));
        cmd.args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn");
        let (child, addr) = spawn_ready(cmd, "lightstore-nbd ready on ", "lightstore-nbd");
        Nbd { child, addr }
    }

    /// Starts it against one drive with `volumes` (`name:SIZE`).
    pub fn on_drive(drive: &Drive, volumes: &[&str]) -> Nbd {
        let mut args = vec!["--drive".to_string(), drive.addr.to_string()];
        for v in volumes {
            args.push("--volume".into());
            args.push((*v).to_string());
        }
        Nbd::start(&args)
    }

    /// Starts `lightstore-nbd serve` against one drive: it exports every volume stored on
    /// the drive.
    pub fn serve(drive: &Drive) -> Nbd {
        Nbd::start(&[
            "serve".to_string(),
            "--drive".into(),
            drive.addr.to_string(),
        ])
    }

    /// `nbd://127.0.0.1:PORT/name`.
    pub fn uri(&self, name: &str) -> String {
        format!("nbd://{}/{name}", self.addr)
    }

    /// Whether the server process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Nbd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `lightstore-nbd ARGS` (a `volume` subcommand) to completion and returns its
/// output, whatever the exit status.
pub fn nbd_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lightstore-nbd"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("running lightstore-nbd {args:?}: {e}"))
}

/// `lightstore-nbd volume ARGS --drive ADDR`, which must succeed; returns stdout.
pub fn volume_cmd(drive: SocketAddr, args: &[&str]) -> String {
    let mut all = vec!["volume"];
    all.extend_from_slice(args);
    let addr = drive.to_string();
    all.extend_from_slice(&["--drive", &addr]);
    let out = nbd_cli(&all);
    assert!(
        out.status.success(),
        "lightstore-nbd {all:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command, panicking with its output unless it succeeds; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

/// A file of `len` pseudo-random bytes (seeded).
pub fn random_file(path: &Path, len: usize, seed: u64) {
    use rand::{RngCore, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    std::fs::write(path, data).unwrap();
}
