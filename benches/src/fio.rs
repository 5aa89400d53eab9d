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
#[derive(Debug, Clone, Copy)]
pub struct FioResult {
    /// I/Os per second.
    pub iops: f64,
    /// Bytes per second.
    pub bytes_per_sec: f64,
    /// Median total latency (submission to completion), microseconds.
    pub p50_us: f64,
    /// 99th percentile total latency, microseconds.
    pub p99_us: f64,
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
    })
}
