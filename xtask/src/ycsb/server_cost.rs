//! What the servers under a YCSB run cost, read from `/proc`: CPU seconds (user + system,
//! `/proc/<pid>/stat`) and peak resident memory (`VmHWM` of `/proc/<pid>/status`), summed
//! over the servers a run started (one drive, a cluster's drives, or redis-server).

/// Clock ticks per second of `/proc/<pid>/stat` times (Linux's fixed `USER_HZ`).
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) the processes have used so far, in 10 ms ticks; `None` when
/// there is no process or one of them cannot be read (servers this command did not start).
pub(super) fn cpu_seconds(pids: &[u32]) -> Option<f64> {
    sum_over(pids, one_cpu_seconds)
}

/// `one` summed over `pids`; `None` without a process or when one cannot be read.
fn sum_over(pids: &[u32], one: fn(u32) -> Option<f64>) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|&pid| one(pid)).sum()
}

fn one_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after `pid (comm)`: comm is in parentheses and may hold spaces.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// The processes' peak resident memory (`VmHWM`) in MB, summed; `None` as for
/// [`cpu_seconds`].
pub(super) fn peak_rss_mb(pids: &[u32]) -> Option<f64> {
    sum_over(pids, one_peak_rss_mb)
}

fn one_peak_rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024.0 / 1e6)
}

/// Server CPU seconds per million operations.
pub(super) fn per_million(cpu_seconds: f64, operations: f64) -> Option<f64> {
    (operations > 0.0).then(|| cpu_seconds / operations * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_a_peak_rss() {
        let me = std::process::id();
        let busy: u64 = (0..2_000_000u64).fold(0, |a, x| a.wrapping_add(x * x));
        assert!(busy > 0);
        assert!(cpu_seconds(&[me]).is_some_and(|s| s >= 0.0));
        assert!(peak_rss_mb(&[me]).is_some_and(|mb| mb > 1.0));
        assert_eq!(cpu_seconds(&[]), None);
        assert_eq!(peak_rss_mb(&[u32::MAX]), None);
        assert_eq!(per_million(2.0, 1e6), Some(2.0));
        assert_eq!(per_million(2.0, 0.0), None);
    }
}
