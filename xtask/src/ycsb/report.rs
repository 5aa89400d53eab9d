//! YCSB's output as the harness reads it ([`Summary`]: the `[SECTION], metric, value`
//! lines of one phase) and the tables made of it: the runs on the drives, and the drive
//! against redis-server, workload by workload, with repeated runs' median and range.

/// One line of YCSB's summary: `[SECTION], metric, value`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Line {
    pub(super) section: String,
    pub(super) metric: String,
    pub(super) value: String,
}

/// YCSB's summary of one phase.
#[derive(Clone, Debug, Default)]
pub(super) struct Summary {
    pub(super) lines: Vec<Line>,
}

impl Summary {
    /// Picks the `[SECTION], metric, value` lines out of YCSB's stdout.
    pub(super) fn parse(stdout: &str) -> Summary {
        let lines = stdout
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix('[')?;
                let (section, rest) = rest.split_once("], ")?;
                let (metric, value) = rest.split_once(", ")?;
                Some(Line {
                    section: section.to_string(),
                    metric: metric.to_string(),
                    value: value.trim().to_string(),
                })
            })
            .collect();
        Summary { lines }
    }

    pub(super) fn get(&self, section: &str, metric: &str) -> Option<f64> {
        self.lines
            .iter()
            .find(|l| l.section == section && l.metric == metric)
            .and_then(|l| l.value.parse().ok())
    }

    pub(super) fn throughput(&self) -> Option<f64> {
        self.get("OVERALL", "Throughput(ops/sec)")
    }

    /// Operations that did not return OK (`SECTION Return=STATUS: count`), including reads
    /// whose data did not verify, and the `-FAILED` sections YCSB keeps for failed calls.
    pub(super) fn failures(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter(|l| {
                (l.metric.starts_with("Return=") && l.metric != "Return=OK")
                    || (l.section.ends_with("-FAILED") && l.metric == "Operations")
            })
            .map(|l| format!("[{}] {}: {}", l.section, l.metric, l.value))
            .collect()
    }

    /// Operations YCSB counted as done (a read-modify-write is measured as itself and as its
    /// read and update).
    pub(super) fn operations_ok(&self) -> u64 {
        let ok = |s: &str| self.get(s, "Return=OK").unwrap_or(0.0) as u64;
        ["READ", "UPDATE", "INSERT", "SCAN", "DELETE"]
            .iter()
            .map(|s| ok(s))
            .sum::<u64>()
            .saturating_sub(self.get("READ-MODIFY-WRITE", "Operations").unwrap_or(0.0) as u64)
    }

    /// The lines worth printing: all but the JVM's GC counters and the per-thread cleanup.
    pub(super) fn printable(&self) -> impl Iterator<Item = &Line> {
        self.lines
            .iter()
            .filter(|l| !l.section.starts_with("TOTAL_GC") && l.section != "CLEANUP")
    }
}

/// Everything one workload run produced.
#[derive(Clone, Debug)]
pub(super) struct WorkloadResult {
    pub(super) workload: char,
    pub(super) load: Summary,
    pub(super) run: Summary,
    /// Operations that failed or returned wrong data, or went missing (empty: all good).
    pub(super) problems: Vec<String>,
    /// The servers' CPU seconds (user + system) per million operations of the run phase
    /// (`None` for servers this command did not start).
    pub(super) server_cpu_s_per_mop: Option<f64>,
    /// The servers' peak resident memory (`VmHWM`, MB) over load and run.
    pub(super) server_peak_rss_mb: Option<f64>,
}

pub(super) fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

/// A table of the runs: throughput and average latencies.
pub(super) fn print_table(results: &[WorkloadResult], drives: usize) {
    println!(
        "\n== YCSB on {drives} drive{}: ops/s and average latency (us)",
        if drives == 1 { "" } else { "s" }
    );
    println!(
        "{:<9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "workload", "load ops/s", "run ops/s", "READ", "UPDATE", "INSERT", "SCAN"
    );
    for r in results {
        let avg = |op: &str| fmt_opt(r.run.get(op, "AverageLatency(us)"), 0);
        println!(
            "{:<9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}{}",
            r.workload.to_ascii_uppercase(),
            fmt_opt(r.load.throughput(), 0),
            fmt_opt(r.run.throughput(), 0),
            avg("READ"),
            avg("UPDATE"),
            avg("INSERT"),
            avg("SCAN"),
            if r.problems.is_empty() {
                ""
            } else {
                "  (errors)"
            }
        );
    }
}

/// The 99th-percentile latency (us) of an operation in a run.
pub(super) fn p99(s: &Summary, op: &str) -> Option<f64> {
    s.get(op, "99thPercentileLatency(us)")
}

/// The 99.9th-percentile latency (us) of an operation in a run (YCSB names a fractional
/// percentile without a suffix).
fn p999(s: &Summary, op: &str) -> Option<f64> {
    s.get(op, "99.9PercentileLatency(us)")
}

/// A run's reads: READ, or SCAN for workload E.
fn read_op(s: &Summary) -> &'static str {
    if s.get("READ", "Operations").is_some() {
        "READ"
    } else {
        "SCAN"
    }
}

/// A run's writes: UPDATE, or INSERT for workloads D and E.
fn write_op(s: &Summary) -> &'static str {
    if s.get("UPDATE", "Operations").is_some() {
        "UPDATE"
    } else {
        "INSERT"
    }
}

/// Runs against the drives alone (`--against drive`), as a Markdown table: throughput,
/// per-operation p99 and p99.9 of reads and writes, and what the servers cost.
pub(super) fn drive_table(results: &[WorkloadResult]) -> String {
    let mut out = String::from(
        "| workload | load ops/s | run ops/s | p99 read us | p99.9 read us | p99 write us \
         | p99.9 write us | server CPU s/M ops | server peak RSS MB |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let (rd, wr) = (read_op(&r.run), write_op(&r.run));
        out.push_str(&format!(
            "| {}{} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.workload.to_ascii_uppercase(),
            if r.problems.is_empty() {
                ""
            } else {
                " (errors)"
            },
            fmt_opt(r.load.throughput(), 0),
            fmt_opt(r.run.throughput(), 0),
            fmt_opt(p99(&r.run, rd), 0),
            fmt_opt(p999(&r.run, rd), 0),
            fmt_opt(p99(&r.run, wr), 0),
            fmt_opt(p999(&r.run, wr), 0),
            fmt_opt(r.server_cpu_s_per_mop, 1),
            fmt_opt(r.server_peak_rss_mb, 0),
        ));
    }
    out
}

/// The drive against redis-server, workload by workload (`--against both`), as a Markdown
/// table.
pub(super) fn comparison(workloads: &[Vec<(WorkloadResult, WorkloadResult)>]) -> String {
    let mut out = String::new();
    let mut tails = String::from(
        "\nThe same median runs' tails and costs: per-operation p99.9 (YCSB's HdrHistogram), \
         server CPU seconds per million operations of the run phase, and the server's peak \
         resident memory (`VmHWM`) over load and run.\n\n\
         | workload | drive p99.9 read us | redis p99.9 read us | drive p99.9 write us \
         | redis p99.9 write us | drive CPU s/M | redis CPU s/M | drive peak RSS MB \
         | redis peak RSS MB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    out.push_str(
        "| workload | drive ops/s | redis ops/s | ratio | ratio range | drive p99 read us | redis p99 read us \
         | drive p99 write us | redis p99 write us |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let ratio_of = |(d, r): &(WorkloadResult, WorkloadResult)| match (
        d.run.throughput(),
        r.run.throughput(),
    ) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    for runs in workloads {
        // The run whose ratio is the median (a run without one sorts last); its figures
        // stand for the workload.
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&a, &b| {
            let key = |i: usize| ratio_of(&runs[i]).unwrap_or(f64::INFINITY);
            key(a).total_cmp(&key(b))
        });
        let Some(&mid) = order.get((order.len().saturating_sub(1)) / 2) else {
            continue;
        };
        let (d, r) = &runs[mid];
        let ratio = ratio_of(&runs[mid]);
        let ratios: Vec<f64> = runs.iter().filter_map(ratio_of).collect();
        let range = match (
            ratios.iter().copied().reduce(f64::min),
            ratios.iter().copied().reduce(f64::max),
        ) {
            (Some(lo), Some(hi)) if ratios.len() > 1 => format!("{lo:.2}-{hi:.2}"),
            _ => "-".into(),
        };
        let problems = runs
            .iter()
            .any(|(d, r)| !d.problems.is_empty() || !r.problems.is_empty());
        // Reads: READ (or SCAN for E); writes: UPDATE (or INSERT for D and E).
        let rd = |s: &Summary| p99(s, read_op(s));
        let wr = |s: &Summary| p99(s, write_op(s));
        let rd9 = |s: &Summary| p999(s, read_op(s));
        let wr9 = |s: &Summary| p999(s, write_op(s));
        tails.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            d.workload.to_ascii_uppercase(),
            fmt_opt(rd9(&d.run), 0),
            fmt_opt(rd9(&r.run), 0),
            fmt_opt(wr9(&d.run), 0),
            fmt_opt(wr9(&r.run), 0),
            fmt_opt(d.server_cpu_s_per_mop, 1),
            fmt_opt(r.server_cpu_s_per_mop, 1),
            fmt_opt(d.server_peak_rss_mb, 0),
            fmt_opt(r.server_peak_rss_mb, 0),
        ));
        out.push_str(&format!(
            "| {}{} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            d.workload.to_ascii_uppercase(),
            if problems { " (errors)" } else { "" },
            fmt_opt(d.run.throughput(), 0),
            fmt_opt(r.run.throughput(), 0),
            fmt_opt(ratio, 2),
            range,
            fmt_opt(rd(&d.run), 0),
            fmt_opt(rd(&r.run), 0),
            fmt_opt(wr(&d.run), 0),
            fmt_opt(wr(&r.run), 0),
        ));
    }
    out.push_str(&tails);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(ops: f64) -> WorkloadResult {
        WorkloadResult {
            workload: 'a',
            load: Summary::default(),
            run: Summary::parse(&format!(
                "[OVERALL], Throughput(ops/sec), {ops}\n[READ], Operations, 100\n\
                 [READ], 99thPercentileLatency(us), {}\n[READ], 99.9PercentileLatency(us), {}\n",
                ops as u64 / 10,
                ops as u64 / 5
            )),
            problems: Vec::new(),
            server_cpu_s_per_mop: None,
            server_peak_rss_mb: None,
        }
    }

    #[test]
    fn repeated_runs_report_the_median_pair_and_the_range() {
        let runs = vec![
            (result(500.0), result(1000.0)),
            (result(900.0), result(1000.0)),
            (result(700.0), result(1000.0)),
        ];
        let table = comparison(&[runs]);
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| A ")).collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert!(
            rows[0].starts_with("| A | 700 | 1000 | 0.70 | 0.50-0.90 | 70 | 100 |"),
            "{table}"
        );
        // The tails of the same (median) pair; no server cost was measured here.
        assert!(
            rows[1].starts_with("| A | 140 | 200 | - | - | - |"),
            "{table}"
        );
        // One run: no range.
        let one = comparison(&[vec![(result(800.0), result(1000.0))]]);
        assert!(one.contains("| 0.80 | - |"), "{one}");
    }

    #[test]
    fn drive_only_runs_make_a_table_with_tails_and_costs() {
        let mut r = result(900.0);
        r.server_cpu_s_per_mop = Some(12.34);
        r.server_peak_rss_mb = Some(81.0);
        let table = drive_table(&[r]);
        let row = table.lines().last().unwrap_or_default();
        assert_eq!(
            row, "| A | - | 900 | 90 | 180 | - | - | 12.3 | 81 |",
            "{table}"
        );
    }
}
