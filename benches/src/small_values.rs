//! `small-values` benchmark: what holding small values in their keytable entries
//! (`--entry-value-max`, 64 B by default) saves reads of them, against the same drive holding
//! none (`--entry-value-max 0`), in the same run.
//!
//! Each drive: plp, the paper card's NAND timing (a page read costs what flash costs), the
//! value cache off (so every value not held is read from the device), its own device file.
//! 1. Load through `redis-benchmark`: `SET key:<rand> <32 B>` and `HSET h:<rand> f <16 B>`.
//! 2. Restart the drive (a clean stop), so what is read comes from the keytables and the
//!    replayed log, not from anything the load left in DRAM.
//! 3. `GET key:<rand>` and `HGET h:<rand> f` through `redis-benchmark` (50 clients, no
//!    pipelining): requests per second, p50/p99, and the device page reads per request from
//!    the drive's INFO `page_reads` (a count, so it does not swing with the host).

use std::path::PathBuf;
use std::process::Stdio;

use serde::Serialize;

use crate::net::{info_u64, lightstore_bin, parse_csv, redis_benchmark, start_drive_on, Server};

/// The small-values benchmark's settings.
pub struct SmallValuesBench {
    /// Smaller loads (about a minute).
    pub quick: bool,
    /// Directory for the drives' data.
    pub scratch: PathBuf,
    /// The lightstore binary (default: next to this one).
    pub lightstore: Option<PathBuf>,
}

/// One read workload on one drive.
#[derive(Debug, Clone, Serialize)]
pub struct SmallValuesRow {
    /// `held` (entry-value-max 64) or `not-held` (0).
    pub drive: String,
    /// `GET 32 B` or `HGET 16 B`.
    pub workload: String,
    /// Requests sent.
    pub requests: u64,
    /// Requests per second (redis-benchmark).
    pub rps: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Device page reads per request.
    pub page_reads_per_request: f64,
    /// The drive's INFO `entry_values` and `entry_value_bytes` after the restart.
    pub entry_values: u64,
    /// Bytes of those values.
    pub entry_value_bytes: u64,
    /// The drive's INFO `keytable_dram_bytes` after the restart.
    pub keytable_dram_bytes: u64,
}

impl SmallValuesBench {
    /// Runs both drives.
    ///
    /// # Errors
    /// When a drive or redis-benchmark fails.
    pub fn run(&self) -> anyhow::Result<Vec<SmallValuesRow>> {
        let bin = lightstore_bin(self.lightstore.as_deref())?;
        let (keys, reads) = if self.quick {
            (50_000u64, 50_000u64)
        } else {
            (400_000, 200_000)
        };
        let mut rows = Vec::new();
        for (name, max) in [("held", "64"), ("not-held", "0")] {
            let dir = self.scratch.join(format!("small-values-{name}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            let extra = [
                "--durability",
                "plp",
                "--value-cache-size",
                "0",
                "--entry-value-max",
                max,
            ];
            let start = || -> anyhow::Result<Server> {
                start_drive_on(&bin, &dir, 0, "paper-card", "4GiB", &extra, Stdio::null())
            };
            let drive = start()?;
            let n = keys.to_string();
            let load = |cmd: &[&str]| -> anyhow::Result<()> {
                let mut args = vec!["-c", "20", "-P", "16", "-q", "-n", &n, "-r", &n];
                args.extend(cmd);
                redis_benchmark(&drive, &args).map(|_| ())
            };
            load(&["SET", "key:__rand_int__", &"v".repeat(32)])?;
            load(&["HSET", "h:__rand_int__", "f", &"w".repeat(16)])?;
            drop(drive);
            let drive = start()?;
            let info = |field: &str| info_u64(&drive, "everything", field);
            let (entry_values, entry_value_bytes, keytable_dram_bytes) = (
                info("entry_values")?,
                info("entry_value_bytes")?,
                info("keytable_dram_bytes")?,
            );
            for (workload, cmd) in [
                ("GET 32 B", vec!["GET", "key:__rand_int__"]),
                ("HGET 16 B", vec!["HGET", "h:__rand_int__", "f"]),
            ] {
                let before = info("page_reads")?;
                let r = reads.to_string();
                let mut args = vec!["-c", "50", "-n", &r, "-r", &n, "--csv"];
                args.extend(cmd);
                let (rps, p50_ms, p99_ms) = parse_csv(&redis_benchmark(&drive, &args)?)?;
                let after = info("page_reads")?;
                rows.push(SmallValuesRow {
                    drive: name.into(),
                    workload: workload.into(),
                    requests: reads,
                    rps,
                    p50_ms,
                    p99_ms,
                    page_reads_per_request: after.saturating_sub(before) as f64 / reads as f64,
                    entry_values,
                    entry_value_bytes,
                    keytable_dram_bytes,
                });
            }
            drop(drive);
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(rows)
    }
}

/// Prints the rows as a table.
pub fn print(rows: &[SmallValuesRow]) {
    println!(
        "{:<10} {:<10} {:>10} {:>8} {:>8} {:>12} {:>12}",
        "drive", "workload", "req/s", "p50 ms", "p99 ms", "reads/req", "held values"
    );
    for r in rows {
        println!(
            "{:<10} {:<10} {:>10.0} {:>8.3} {:>8.3} {:>12.3} {:>12}",
            r.drive,
            r.workload,
            r.rps,
            r.p50_ms,
            r.p99_ms,
            r.page_reads_per_request,
            r.entry_values
        );
    }
}
