//! Runs `fio` (io_uring engine, O_DIRECT) on a byte range of a file and reads its JSON output.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::Value;

/// One fio job.
#[derive(Debug, Clone, Copy)]
pub struct FioJob<'a> {
    /// `randread`, `randwrite`, `read` or `write`.
    pub rw: &'a str,
    /// Commands in flight.
    pub iodepth: u32,
    /// I/Os to issue.
    pub ios: u64,
    /// Byte offset of the region in the file.
    pub offset: u64,
    /// Bytes in the region.
    pub size: u64,
}

/// What fio measured.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct FioResult {
    /// I/Os per second.
    pub iops: f64,
    /// Bytes per second.
    pub bytes_per_sec: f64,
    /// Median total latency (submission to completion), microseconds.
    pub p50_us: f64,
    /// 99th percentile total latency, microseconds.
    pub p99_us: f64,
    /// fio's own CPU (its job thread, user and system) per I/O, microseconds: what the
    /// kernel's path for one such I/O costs the thread that submits and reaps it (`None`
    /// when fio's JSON lacks the figures).
    pub cpu_us_per_io: Option<f64>,
}

/// Checks that fio can run; the error says why not.
///
/// # Errors
/// When `fio --version` cannot be run.
pub fn available() -> anyhow::Result<String> {
    let out = Command::new("fio")
        .arg("--version")
        .output()
        .context("fio is not installed (Debian package `fio`; `cargo xtask bench` installs it)")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs one job on `file` with 8 KiB blocks.
///
/// # Errors
/// When fio fails or its output cannot be read.
pub fn run(file: &Path, job: &FioJob<'_>) -> anyhow::Result<FioResult> {
    let out = Command::new("fio")
        .arg("--name=ceiling")
        .arg(format!("--filename={}", file.display()))
        .arg("--ioengine=io_uring")
        .arg("--direct=1")
        .arg("--bs=8k")
        .arg(format!("--rw={}", job.rw))
        .arg(format!("--iodepth={}", job.iodepth))
        .arg(format!("--offset={}", job.offset))
        .arg(format!("--size={}", job.size))
        .arg(format!("--number_ios={}", job.ios))
        .arg("--norandommap")
        .arg("--randrepeat=1")
        .arg("--thread")
        .arg("--lat_percentiles=1")
        .arg("--output-format=json")
        .output()
        .context("running fio")?;
    if !out.status.success() {
        bail!(
            "fio failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON document.
    let start = text.find('{').context("fio printed no JSON")?;
    let v: Value = serde_json::from_str(&text[start..]).context("parsing fio JSON")?;
    let job_v = &v["jobs"][0];
    let side = if job.rw.contains("read") {
        &job_v["read"]
    } else {
        &job_v["write"]
    };
    // Total latency (submission to completion), as the device rows measure it.
    let pct = |p: &str| side["lat_ns"]["percentile"][p].as_f64().unwrap_or(0.0) / 1e3;
    Ok(FioResult {
        iops: side["iops"].as_f64().context("fio JSON has no iops")?,
        bytes_per_sec: side["bw_bytes"].as_f64().unwrap_or(0.0),
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
        cpu_us_per_io: cpu_us_per_io(job_v, side),
    })
}

/// fio's job thread CPU per I/O in microseconds, from its JSON: `usr_cpu` and `sys_cpu` are
/// percentages of the job's runtime (`job_runtime`, milliseconds), `total_ios` the I/Os.
fn cpu_us_per_io(job: &Value, side: &Value) -> Option<f64> {
    let percent = job["usr_cpu"].as_f64()? + job["sys_cpu"].as_f64()?;
    let runtime_s = job["job_runtime"].as_f64()? / 1e3;
    let ios = side["total_ios"].as_f64().filter(|&n| n > 0.0)?;
    Some(percent / 100.0 * runtime_s / ios * 1e6)
}

/// fio's figure for each of the four access patterns the workloads make, at 8 KiB and one
/// queue depth, on one file (issue 18: the ceilings come from fio in the same run, beside the
/// harness's own load generator).
#[derive(Debug, Clone, serde::Serialize)]
pub struct FioCeilings {
    /// `fio --version`.
    pub version: String,
    /// Commands in flight.
    pub iodepth: u32,
    /// Bytes of the region each pattern covers.
    pub region_bytes: u64,
    /// Sequential writes (S-SET's pattern, and an append-only engine's for every write).
    pub seq_write: FioResult,
    /// Random writes (R-SET's pattern as a client issues it).
    pub rand_write: FioResult,
    /// Sequential reads (S-GET's).
    pub seq_read: FioResult,
    /// Random reads (R-GET's and Z-GET's).
    pub rand_read: FioResult,
}

/// The four patterns, in the order they run (after a first sequential write over the whole
/// region, so every pattern runs on written blocks).
pub const PATTERNS: [&str; 4] = ["write", "randwrite", "read", "randread"];

/// Runs fio's four patterns over a fresh file of `region_bytes` at `path` (fio lays it out;
/// removed after), each over as many 8 KiB I/Os as the region holds.
///
/// # Errors
/// fio missing or failing (the file cannot be made, say): the reason, for the report.
pub fn ceilings(path: &Path, region_bytes: u64, iodepth: u32) -> Result<FioCeilings, String> {
    let version = available().map_err(|e| format!("{e:#}"))?;
    // fio lays the file out (fallocate) before its first job, outside the timed part.
    let _ = std::fs::remove_file(path);
    let mut results = Vec::with_capacity(PATTERNS.len());
    // A first sequential pass, not reported: writing a laid-out file's blocks for the first
    // time converts its extents (metadata writes: 9K against 60K writes/s on this host), and
    // no engine's steady state writes there.
    for rw in std::iter::once("write").chain(PATTERNS) {
        let job = FioJob {
            rw,
            iodepth,
            ios: (region_bytes / 8192).max(1),
            offset: 0,
            size: region_bytes,
        };
        match run(path, &job) {
            Ok(r) => results.push(r),
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(format!("fio {rw}: {e:#}"));
            }
        }
    }
    let _ = std::fs::remove_file(path);
    Ok(FioCeilings {
        version,
        iodepth,
        region_bytes,
        seq_write: results[1],
        rand_write: results[2],
        seq_read: results[3],
        rand_read: results[4],
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn cpu_per_io_is_the_jobs_cpu_time_over_its_ios() {
        // 40% of 2 s over 100,000 I/Os: 8 us each.
        let job: Value = serde_json::json!({
            "usr_cpu": 5.0, "sys_cpu": 35.0, "job_runtime": 2000,
        });
        let side: Value = serde_json::json!({ "total_ios": 100_000 });
        let got = cpu_us_per_io(&job, &side).unwrap();
        assert!((got - 8.0).abs() < 1e-9, "{got}");
        // Missing figures or no I/O: none, not a division by zero.
        assert_eq!(cpu_us_per_io(&serde_json::json!({}), &side), None);
        let none: Value = serde_json::json!({ "total_ios": 0 });
        assert_eq!(cpu_us_per_io(&job, &none), None);
    }

    #[test]
    fn the_four_patterns_run_on_a_small_file() {
        if let Err(e) = available() {
            // `cargo xtask test` installs fio, and fails on a skip for a missing tool.
            eprintln!("SKIPPED (tool) fio ceilings: {e:#}");
            if let Some(log) = std::env::var_os("LIGHTSTORE_SKIP_LOG") {
                use std::io::Write as _;
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .and_then(|mut f| writeln!(f, "tool\tbenches\tfio ceilings\t{e}"));
            }
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fio.img");
        let c = ceilings(&path, 8 << 20, 8).unwrap();
        for (name, r) in [
            ("write", c.seq_write),
            ("randwrite", c.rand_write),
            ("read", c.seq_read),
            ("randread", c.rand_read),
        ] {
            assert!(r.iops > 0.0, "{name}: {r:?}");
            assert!(
                r.bytes_per_sec > r.iops * 8000.0,
                "{name}: 8 KiB blocks: {r:?}"
            );
            assert!(r.p99_us >= r.p50_us, "{name}: {r:?}");
            // Every I/O costs its submitter some CPU, and far less than a second.
            let cpu = r.cpu_us_per_io.expect("fio reports its CPU");
            assert!(cpu > 0.0 && cpu < 1e6, "{name}: {r:?}");
        }
        assert!(!path.exists(), "the scratch file is removed");
        // A place fio cannot write (under a file): the reason, not a panic.
        std::fs::write(dir.path().join("a-file"), b"x").unwrap();
        let err = ceilings(&dir.path().join("a-file/fio.img"), 8 << 20, 8).unwrap_err();
        assert!(err.starts_with("fio write:"), "{err}");
    }
}
