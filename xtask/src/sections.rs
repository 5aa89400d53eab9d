//! Sections `cargo xtask bench all` appends to the harness's `report.md`: the cluster scaling
//! (`lightstore-bench cluster`) and redis-benchmark against the drive and redis-server
//! (`lightstore-bench net`), each from the JSON rows its harness run wrote.

use anyhow::Context;

use crate::run_harness;

/// Appends `section` to `out/report.md`.
fn append_to_report(out: &std::path::Path, section: &str) -> anyhow::Result<()> {
    let report = out.join("report.md");
    let mut text = std::fs::read_to_string(&report)
        .with_context(|| format!("reading {}", report.display()))?;
    text.push_str(section);
    std::fs::write(&report, text).with_context(|| format!("writing {}", report.display()))
}

/// Runs `lightstore-bench <bench> --json out/<bench>.json [--quick]` with the harness just
/// built, renders its rows with `table` and appends that to `out/report.md`.
fn harness_section(
    out: &std::path::Path,
    harness: &std::path::Path,
    bench: &str,
    quick: bool,
    extra: &[String],
    table: fn(&str, bool) -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let json = out.join(format!("{bench}.json"));
    let mut args = vec!["--json".to_string(), json.display().to_string()];
    if quick {
        args.push("--quick".into());
    }
    args.extend_from_slice(extra);
    run_harness(harness, bench, &args)?;
    let rows =
        std::fs::read_to_string(&json).with_context(|| format!("reading {}", json.display()))?;
    append_to_report(out, &table(&rows, quick)?)
}

/// The report's cluster-scaling section: `lightstore-bench cluster` (1, 2 and 4 drives as one
/// Redis Cluster, SET and GET through redis-benchmark's cluster mode); its rows go to
/// `cluster.json` beside the report and a table into `report.md`.
pub(crate) fn cluster_section(
    out: &std::path::Path,
    harness: &std::path::Path,
    quick: bool,
) -> anyhow::Result<()> {
    harness_section(out, harness, "cluster", quick, &[], cluster_table)
}

/// The report's cluster-scaling section from `lightstore-bench cluster`'s JSON rows.
///
/// # Errors
/// When the JSON is not a list of rows.
fn cluster_table(json: &str, quick: bool) -> anyhow::Result<String> {
    let rows: Vec<serde_json::Value> = serde_json::from_str(json).context("cluster.json")?;
    let num = |r: &serde_json::Value, k: &str| r.get(k).and_then(serde_json::Value::as_f64);
    let mut section = format!(
        "\n## Cluster scaling (`lightstore-bench cluster{}`)\n\n\
         1, 2 and 4 drives as one Redis Cluster on this host, SET and GET of 100-byte values \
         through redis-benchmark's cluster mode (50 connections, pipeline 16). Every drive and \
         the client share the host's cores, so this measures the cost of the cluster layer, \
         not the scaling of drives with a CPU each. One pass (no repetitions: no spread is \
         claimed).\n\n\
         | system | workload | ops/s | x one drive | drive CPU s per M ops | p50 us | p99 us |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
        if quick { " --quick" } else { "" }
    );
    for r in &rows {
        let f = |v: Option<f64>, d: usize| v.map_or_else(|| "-".into(), |x| format!("{x:.d$}"));
        section.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.get("system")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?"),
            r.get("workload")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?"),
            f(num(r, "ops_per_sec"), 0),
            f(num(r, "ratio_to_one_drive"), 2),
            f(num(r, "cpu_s_per_mop"), 2),
            f(num(r, "p50_us"), 0),
            f(num(r, "p99_us"), 0),
        ));
    }
    Ok(section)
}

/// The report's redis-benchmark section: `lightstore-bench net` (redis-benchmark SET, GET,
/// MSET and MGET against the drive, sync and plp, and against redis-server in memory and with
/// AOF everysec, on one host), appended to `out/report.md`; its rows are kept as `net.json`.
/// `repeat` passes (`bench all --repeat`), each row the median pass's.
pub(crate) fn net_section(
    out: &std::path::Path,
    harness: &std::path::Path,
    quick: bool,
    repeat: usize,
) -> anyhow::Result<()> {
    let extra = ["--repeat".to_string(), repeat.max(1).to_string()];
    harness_section(out, harness, "net", quick, &extra, net_table)
}

/// The systems of `lightstore-bench net`, in the table's column order.
const NET_SYSTEMS: [&str; 4] = [
    "lightstore/file",
    "lightstore/file-plp",
    "redis",
    "redis-aof-everysec",
];

/// The report's redis-benchmark section from `lightstore-bench net`'s JSON rows: one line per
/// (command, value size, connections, pipeline), ops/s of each system, the drive's ratios to
/// in-memory redis-server, and server CPU seconds per million operations.
///
/// # Errors
/// When the JSON is not a list of rows.
pub(crate) fn net_table(json: &str, quick: bool) -> anyhow::Result<String> {
    let rows: Vec<serde_json::Value> = serde_json::from_str(json).context("net.json")?;
    let text = |r: &serde_json::Value, k: &str| {
        r.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let num = |r: &serde_json::Value, k: &str| r.get(k).and_then(serde_json::Value::as_f64);
    let mut cases: Vec<(String, u64, u64, u64)> = Vec::new();
    for r in &rows {
        let case = (
            text(r, "workload"),
            num(r, "value_size").unwrap_or(0.0) as u64,
            num(r, "connections").unwrap_or(0.0) as u64,
            num(r, "pipeline").unwrap_or(0.0) as u64,
        );
        if !cases.contains(&case) {
            cases.push(case);
        }
    }
    let find = |case: &(String, u64, u64, u64), system: &str| {
        rows.iter().find(|r| {
            text(r, "system") == system
                && text(r, "workload") == case.0
                && num(r, "value_size").map(|v| v as u64) == Some(case.1)
                && num(r, "connections").map(|v| v as u64) == Some(case.2)
                && num(r, "pipeline").map(|v| v as u64) == Some(case.3)
        })
    };
    let f = |v: Option<f64>, d: usize| v.map_or_else(|| "-".into(), |x| format!("{x:.d$}"));
    let passes = rows
        .iter()
        .filter_map(|r| num(r, "repetitions"))
        .fold(1.0_f64, f64::max) as u64;
    let repeated = if passes > 1 {
        format!(
            " {passes} passes, the systems interleaved in each; every figure is the pass with \
             the median ops/s (ranges over the passes: `ops_range` in `net.json`)."
        )
    } else {
        " One pass: single runs on a shared host vary by up to 3x.".to_string()
    };
    let mut section = format!(
        "\n## redis-benchmark: the drive against redis-server (`lightstore-bench net{}`)\n\n\
         redis-benchmark (the `redis-benchmark` binary) against the drive (`sync`: acknowledged \
         once durable; `plp`: from DRAM) and redis-server (in memory; AOF everysec), one after \
         the other on this host. Ratios are the drive's ops/s over in-memory redis-server's; \
         CPU is the server process's CPU seconds per million operations.{repeated}\n\n\
         | command | value B | conns | pipeline | drive sync ops/s | drive plp ops/s | redis ops/s | redis AOF ops/s | sync / redis | plp / redis | CPU s/M plp | CPU s/M redis |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        if quick { " --quick" } else { "" }
    );
    let mut tails = String::from(
        "\nThe same passes' per-request latency (redis-benchmark's HdrHistogram: p99 exact, \
         p99.9 the smallest bound it prints with at least 99.9% of requests at or below it) \
         and the server's resident memory after the test, drive plp against in-memory \
         redis-server.\n\n\
         | command | value B | conns | pipeline | drive p99 us | drive p99.9 us | drive max us \
         | redis p99 us | redis p99.9 us | redis max us | drive RSS MB | redis RSS MB |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for case in &cases {
        let fig = |s: &str, k: &str| find(case, s).and_then(|r| num(r, k));
        let (plp, redis) = (NET_SYSTEMS[1], NET_SYSTEMS[2]);
        tails.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            case.0,
            case.1,
            case.2,
            case.3,
            f(fig(plp, "p99_us"), 0),
            f(fig(plp, "p999_us"), 0),
            f(fig(plp, "max_us"), 0),
            f(fig(redis, "p99_us"), 0),
            f(fig(redis, "p999_us"), 0),
            f(fig(redis, "max_us"), 0),
            f(fig(plp, "rss_mb"), 0),
            f(fig(redis, "rss_mb"), 0),
        ));
    }
    for case in &cases {
        let ops = |s: &str| find(case, s).and_then(|r| num(r, "ops_per_sec"));
        let cpu = |s: &str| find(case, s).and_then(|r| num(r, "cpu_s_per_mop"));
        let ratio = |s: &str| match (ops(s), ops(NET_SYSTEMS[2])) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        section.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            case.0,
            case.1,
            case.2,
            case.3,
            f(ops(NET_SYSTEMS[0]), 0),
            f(ops(NET_SYSTEMS[1]), 0),
            f(ops(NET_SYSTEMS[2]), 0),
            f(ops(NET_SYSTEMS[3]), 0),
            f(ratio(NET_SYSTEMS[0]), 2),
            f(ratio(NET_SYSTEMS[1]), 2),
            f(cpu(NET_SYSTEMS[1]), 1),
            f(cpu(NET_SYSTEMS[2]), 1),
        ));
    }
    section.push_str(&tails);
    Ok(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cluster section reads the rows `lightstore-bench cluster` writes (the committed run).
    #[test]
    fn the_cluster_section_tabulates_the_harness_rows() {
        let json = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../benches/results/cluster-2026-11-28/cluster-quick.json"
        ))
        .expect("the committed cluster run");
        let table = cluster_table(&json, true).expect("rows");
        assert!(table.contains("## Cluster scaling (`lightstore-bench cluster --quick`)"));
        assert!(
            table.contains("| lightstore-cluster/1 | SET | 168067 | 1.00 | 6.80 | 4159 | 13231 |"),
            "{table}"
        );
        assert!(
            table.contains("| lightstore-cluster/4 | GET | 398406 | 1.26 | 2.65 |"),
            "{table}"
        );
        assert_eq!(
            table
                .lines()
                .filter(|l| l.starts_with("| lightstore-cluster/"))
                .count(),
            6
        );
        assert!(cluster_table("{}", false).is_err());
    }

    /// The net section reads the rows `lightstore-bench net` writes (the committed run).
    #[test]
    fn the_net_section_tabulates_the_harness_rows() {
        let json = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../benches/results/net-quick-2026-11-28b/results.json"
        ))
        .expect("the committed net run");
        let table = net_table(&json, true).expect("rows");
        assert!(table.contains("`lightstore-bench net --quick`"), "{table}");
        assert!(table.contains("| SET | 8192 | 1 | 1 | 2481 |"), "{table}");
        assert_eq!(
            table.lines().filter(|l| l.starts_with("| SET |")).count(),
            16
        );
        // Two tables of 32 cases: throughput, then tails and memory.
        assert_eq!(
            table
                .lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| command"))
                .count(),
            64
        );
        assert!(net_table("{}", false).is_err());
    }
}
