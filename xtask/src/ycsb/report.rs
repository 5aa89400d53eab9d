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

/// The drive against redis-server, workload by workload (`--against both`), as a Markdown
/// table.
pub(super) fn comparison(workloads: &[Vec<(WorkloadResult, WorkloadResult)>]) -> String {
    let mut out = String::new();
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
        let rd = |s: &Summary| p99(s, "READ").or_else(|| p99(s, "SCAN"));
        let wr = |s: &Summary| p99(s, "UPDATE").or_else(|| p99(s, "INSERT"));
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
                "[OVERALL], Throughput(ops/sec), {ops}\n[READ], 99thPercentileLatency(us), {}\n",
                ops as u64 / 10
            )),
            problems: Vec::new(),
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
        let row = table.lines().last().unwrap();
        assert!(
            row.starts_with("| A | 700 | 1000 | 0.70 | 0.50-0.90 | 70 | 100 |"),
            "{row}"
        );
        // One run: no range.
        let one = comparison(&[vec![(result(800.0), result(1000.0))]]);
        assert!(one.lines().last().unwrap().contains("| 0.80 | - |"));
    }
}
