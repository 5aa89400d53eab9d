//! The device's random-read ceiling beside a YCSB comparison: DESIGN.md asks YCSB to be
//! "device-bound" once the working set outgrows the value cache, so the report says what the
//! device does at the client's concurrency on this host, measured with fio in the same run.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};

use super::report::WorkloadResult;

/// Size of fio's file (larger than any page cache effect matters with direct I/O).
const FIO_FILE: &str = "512m";
/// Seconds fio reads for.
const FIO_SECONDS: u32 = 8;

/// fio's 8 KiB random reads at queue depth `depth` (io_uring, O_DIRECT) on a file in `dir`,
/// on the file system the drives use: IOPS, and the command line run.
///
/// # Errors
/// fio is missing, fails, or prints something that is not its JSON.
pub(super) fn random_read_iops(dir: &Path, depth: usize) -> anyhow::Result<(f64, String)> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("fio-ceiling.img");
    let args = [
        "--name=ceiling".to_string(),
        format!("--filename={}", file.display()),
        format!("--size={FIO_FILE}"),
        "--rw=randread".into(),
        "--bs=8k".into(),
        format!("--iodepth={depth}"),
        "--ioengine=io_uring".into(),
        "--direct=1".into(),
        format!("--runtime={FIO_SECONDS}"),
        "--time_based".into(),
        "--output-format=json".into(),
    ];
    let out = Command::new("fio")
        .args(&args)
        .output()
        .context("running fio (Debian: apt-get install fio)")?;
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let iops = parse_iops(&String::from_utf8_lossy(&out.stdout))?;
    Ok((iops, format!("fio {}", args.join(" "))))
}

/// The read IOPS of fio's JSON output (its first job).
fn parse_iops(json: &str) -> anyhow::Result<f64> {
    // fio may print notes before the JSON object.
    let start = json.find('{').context("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&json[start..]).context("fio's JSON")?;
    v.pointer("/jobs/0/read/iops")
        .and_then(serde_json::Value::as_f64)
        .context("fio's JSON has no jobs[0].read.iops")
}

/// The paragraph under the comparison: the ceiling, and the median of each workload's
/// drive runs over it.
pub(super) fn note(
    iops: f64,
    depth: usize,
    command: &str,
    workloads: &[Vec<(WorkloadResult, WorkloadResult)>],
) -> String {
    let mut per: Vec<String> = Vec::new();
    for runs in workloads {
        let mut drive: Vec<(char, f64)> = runs
            .iter()
            .filter_map(|(d, _)| d.run.throughput().map(|t| (d.workload, t)))
            .collect();
        drive.sort_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((w, t)) = drive.get(drive.len().saturating_sub(1) / 2) {
            per.push(format!("{} {:.2}", w.to_ascii_uppercase(), t / iops));
        }
    }
    format!(
        "\nDevice ceiling in the same run: {iops:.0} random 8 KiB reads per second at queue \
         depth {depth} (the client's threads), `{command}`. The drive's median ops/s over it: \
         {}. An operation may need no device read (the value cache, values held in DRAM) or \
         several (a record's fields in different pages), so this says how far from the device \
         a workload runs, not a target met.\n",
        per.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ycsb::report::Summary;

    fn result(w: char, ops: f64) -> WorkloadResult {
        WorkloadResult {
            workload: w,
            load: Summary::default(),
            run: Summary::parse(&format!("[OVERALL], Throughput(ops/sec), {ops}\n")),
            problems: Vec::new(),
            server_cpu_s_per_mop: None,
            server_peak_rss_mb: None,
        }
    }

    #[test]
    fn fio_json_and_the_note() {
        let json = "note: both iodepth >= 1 and synchronous I/O engine are selected\n\
                    {\"jobs\": [{\"read\": {\"iops\": 51234.5}}]}";
        assert_eq!(parse_iops(json).unwrap(), 51234.5);
        assert!(parse_iops("no json").is_err());
        let runs = vec![
            vec![
                (result('c', 20_000.0), result('c', 40_000.0)),
                (result('c', 10_000.0), result('c', 40_000.0)),
                (result('c', 30_000.0), result('c', 40_000.0)),
            ],
            vec![(result('a', 5_000.0), result('a', 40_000.0))],
        ];
        let n = note(40_000.0, 4, "fio ...", &runs);
        assert!(
            n.contains("40000 random 8 KiB reads per second at queue depth 4"),
            "{n}"
        );
        assert!(n.contains("C 0.50, A 0.12"), "{n}");
    }
}
