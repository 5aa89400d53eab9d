//! `expiry` benchmark: what keys with deadlines and FLUSHALL cost the device, counted from
//! the drive's own INFO (`device_bytes_written`, `live_bytes`, `expired_entries_dropped`),
//! so the figures are counts, not timings that swing with the host.
//!
//! Three phases on one drive (plp, its own device file), then a fourth on a fresh one:
//! 1. `SET key:<rand> <100 B> EX 2` through `redis-benchmark`: device bytes per SET.
//! 2. Waiting until every key has expired and the writer's sweep has let it go (DBSIZE 0,
//!    `expired_keys` still): device bytes the expiry cost (a delete per key before deadlines
//!    moved into the keytable entries, none since).
//! 3. After compaction's grace, plain SETs until compactions run: the expired entries they
//!    dropped, and the live bytes left (the expired values' space is garbage again).
//! 4. FLUSHALL after a load of plain SETs: its time and device bytes (a delete per key
//!    before `Engine::clear`, a manifest write since).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::net::{info_u64, lightstore_bin, redis_benchmark, redis_cli, start_drive_on, Server};

/// Seconds a key of phase 1 lives.
const TTL_S: u64 = 2;
/// Compaction's grace after a deadline (`lsm::merge::EXPIRY_GRACE_MS`), and a margin.
const GRACE: Duration = Duration::from_secs(12);

/// The expiry benchmark's settings.
pub struct ExpiryBench {
    /// Smaller loads (about a minute).
    pub quick: bool,
    /// Directory for the drives' data.
    pub scratch: PathBuf,
    /// The lightstore binary (default: next to this one).
    pub lightstore: Option<PathBuf>,
}

/// What the run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ExpiryReport {
    /// SETs with a deadline sent, and the distinct keys they made.
    pub expiring_sets: u64,
    /// Keys the drive held after them.
    pub expiring_keys: u64,
    /// Device bytes per SET with a deadline.
    pub bytes_per_expiring_set: f64,
    /// Device bytes written while the keys expired and the sweep let them go.
    pub expiry_device_bytes: u64,
    /// Entries compaction dropped because they had expired, after the plain SETs.
    pub expired_entries_dropped: u64,
    /// Live bytes before the plain SETs (the expired values still counted) and after.
    pub live_bytes_before: u64,
    /// Live bytes after the plain SETs.
    pub live_bytes_after: u64,
    /// Keys FLUSHALL deleted.
    pub flushall_keys: u64,
    /// Seconds FLUSHALL took (one call).
    pub flushall_s: f64,
    /// Device bytes FLUSHALL wrote.
    pub flushall_device_bytes: u64,
}

impl ExpiryBench {
    /// Runs the four phases.
    ///
    /// # Errors
    /// When the drive, redis-benchmark or redis-cli fails, or the keys never expire.
    pub fn run(&self) -> anyhow::Result<ExpiryReport> {
        let bin = lightstore_bin(self.lightstore.as_deref())?;
        let (n, plain) = if self.quick {
            (50_000u64, 1_500_000u64)
        } else {
            (200_000, 4_000_000)
        };
        let start = |name: &str| -> anyhow::Result<Server> {
            let dir = self.scratch.join(name);
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            let extra = ["--durability", "plp"];
            start_drive_on(&bin, &dir, 0, "none", "4GiB", &extra, Stdio::null())
        };
        let drive = start("expiry")?;
        let w0 = info(&drive, "device_bytes_written")?;
        let value = "v".repeat(100);
        let ttl = TTL_S.to_string();
        bench(&drive, n, &["SET", "key:__rand_int__", &value, "EX", &ttl])?;
        let expiring_keys = dbsize(&drive)?;
        let w1 = info(&drive, "device_bytes_written")?;
        // Every key expired and let go: DBSIZE 0 and `expired_keys` still for two seconds.
        let waited = Instant::now();
        let mut last = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let e = info(&drive, "expired_keys")?;
            if e == last && dbsize(&drive)? == 0 {
                break;
            }
            last = e;
            if waited.elapsed() > Duration::from_secs(300) {
                bail!("the keys did not expire within 300 s");
            }
        }
        let w2 = info(&drive, "device_bytes_written")?;
        let live_bytes_before = info(&drive, "live_bytes")?;
        std::thread::sleep(GRACE.saturating_sub(waited.elapsed()));
        bench(&drive, plain, &["SET", "plain:__rand_int__", &value])?;
        let report_dropped = info(&drive, "expired_entries_dropped")?;
        let live_bytes_after = info(&drive, "live_bytes")?;
        drop(drive);
        let drive = start("flushall")?;
        bench(&drive, plain, &["SET", "key:__rand_int__", &value])?;
        let flushall_keys = dbsize(&drive)?;
        // The load's flushes and compactions done first: FLUSHALL's bytes are its own.
        let w3 = settled_bytes(&drive)?;
        let t = Instant::now();
        redis_cli(&drive, &["FLUSHALL"])?;
        let flushall_s = t.elapsed().as_secs_f64();
        let w4 = info(&drive, "device_bytes_written")?;
        drop(drive);
        for name in ["expiry", "flushall"] {
            let _ = std::fs::remove_dir_all(self.scratch.join(name));
        }
        Ok(ExpiryReport {
            expiring_sets: n,
            expiring_keys,
            bytes_per_expiring_set: (w1 - w0) as f64 / n as f64,
            expiry_device_bytes: w2 - w1,
            expired_entries_dropped: report_dropped,
            live_bytes_before,
            live_bytes_after,
            flushall_keys,
            flushall_s,
            flushall_device_bytes: w4 - w3,
        })
    }
}

/// `redis-benchmark` sending `n` of `command` (keys drawn from `n` values), 20
/// connections, pipeline 16.
fn bench(drive: &Server, n: u64, command: &[&str]) -> anyhow::Result<()> {
    let n = n.to_string();
    let mut args = vec!["-c", "20", "-P", "16", "-q", "-n", &n, "-r", &n];
    args.extend(command);
    redis_benchmark(drive, &args)?;
    Ok(())
}

/// The drive's device bytes written once they stop growing (its maintenance after a load
/// done: still for a second), at most 60 s on.
fn settled_bytes(drive: &Server) -> anyhow::Result<u64> {
    let mut last = info(drive, "device_bytes_written")?;
    for _ in 0..60 {
        std::thread::sleep(Duration::from_secs(1));
        let now = info(drive, "device_bytes_written")?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

fn dbsize(drive: &Server) -> anyhow::Result<u64> {
    redis_cli(drive, &["DBSIZE"])?
        .trim()
        .parse()
        .context("DBSIZE is not a number")
}

/// A numeric INFO field of the drive.
fn info(drive: &Server, name: &str) -> anyhow::Result<u64> {
    info_u64(drive, "everything", name)
}
