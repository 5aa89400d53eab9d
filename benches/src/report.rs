//! Result rows shared by every benchmark: a printed table and a JSON file.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;

/// One measured (or missing) configuration.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Row {
    /// What was measured, e.g. `hwftl-file/none` or `fio`.
    pub system: String,
    /// The workload, e.g. `randread-qd32`.
    pub workload: String,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Megabytes (10^6 bytes) per second.
    pub mb_per_sec: f64,
    /// Median latency in microseconds.
    pub p50_us: f64,
    /// 99th percentile latency in microseconds.
    pub p99_us: f64,
    /// Mean latency in microseconds (the latency breakdown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_us: Option<f64>,
    /// Value bytes the drive copied per operation (INFO `value_bytes_copied`; the ablation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_bytes_copied_per_op: Option<f64>,
    /// Compactions the drive ran during the workload, and how many of them left the values
    /// in place for lack of free segments (INFO `compactions`,
    /// `compactions_without_room_to_move`; the ablation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compactions: Option<(u64, u64)>,
    /// 99.9th percentile latency in microseconds (`bench all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999_us: Option<f64>,
    /// The slowest operation's latency in microseconds (`bench all`'s in-process rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_us: Option<f64>,
    /// The 99.9th percentile of the reads and of the writes, µs, each from its own
    /// histogram, for a workload that has both (R-Mixed; `bench all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_write_p999_us: Option<(f64, f64)>,
    /// How long the host stopped the machine during the workload, from the harness's
    /// probe ([`crate::host_stalls`]; `bench all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_stalls: Option<crate::host_stalls::HostStalls>,
    /// Commands in flight.
    pub queue_depth: u32,
    /// Ratio of ops/s to fio's on the same bytes (device benchmark, file backend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_fio: Option<f64>,
    /// Value size in bytes (engine benchmarks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_size: Option<u32>,
    /// Device bytes written / user bytes written (engine benchmarks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_amp: Option<f64>,
    /// Ratio to the raw device ceiling of the same backend measured in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_device: Option<f64>,
    /// Random page reads per second of the system's own device, read right before the
    /// workload by the same clients in the same batches with no engine in between
    /// ([`crate::device_kv::DeviceReads`]; LightStore in-process R-GET, `bench all`): a
    /// ceiling measured beside the row, where the run's ceiling may be many minutes old on a
    /// disk whose speed drifts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_reads_beside: Option<f64>,
    /// Client connections (network benchmark), or client threads (in-process, `bench all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
    /// Requests each connection (or client thread) keeps in flight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<u32>,
    /// Server CPU seconds (user + system) per million requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_mop: Option<f64>,
    /// Server resident memory after the run, in MB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_mb: Option<f64>,
    /// LightStore's background work during the run, by INFO name
    /// ([`crate::kv::ENGINE_COUNTERS`]: flushes, compactions, GC, device flushes, stall
    /// time); absent for other systems.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_counters: Option<crate::kv::EngineCounters>,
    /// Ratio of ops/s to in-memory Redis with the same client settings, in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_redis: Option<f64>,
    /// Ratio of ops/s to LightStore on the same access path (in-process or RESP), same
    /// workload and value size, in the same run (`bench all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_lightstore: Option<f64>,
    /// Where reads are served from: the device, or a cache in front of it (`bench all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads_from: Option<String>,
    /// How many times the row was measured (`bench all --repeat`): the row is then the run
    /// with the median ops/s, every other figure from that same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetitions: Option<u32>,
    /// The smallest and largest ops/s over the repetitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_range: Option<(f64, f64)>,
    /// Why the row has no figures (a peer that could not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// ops/s over the one-drive cluster's for the same workload (`cluster`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_one_drive: Option<f64>,
    /// The host's cores, which every server and the load generator share (`cluster`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_cores: Option<u32>,
    /// Bytes that reached the block device below the file system (after `syncfs`, from
    /// `/sys/dev/block/*/stat`) over user bytes: the same meter for every system (`bench
    /// all`; see [`crate::procfs::BlockDevMeter`]). `write_amp` is the serving process's own
    /// `/proc/<pid>/io` count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_amp_disk: Option<f64>,
    /// DRAM the system was given to cache data, bytes: the peers' block (and blob) cache,
    /// LightStore's value cache (`bench all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_bytes: Option<u64>,
    /// When the timed section of a write workload ends for this system: after its
    /// background work settled, or at the last acknowledgement (`bench all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed_until: Option<String>,
}

impl Row {
    /// A row for a system that could not be measured, with the reason.
    pub fn missing(system: &str, workload: &str, queue_depth: u32, reason: String) -> Row {
        Row {
            system: system.into(),
            workload: workload.into(),
            queue_depth,
            missing: Some(reason),
            ..Row::default()
        }
    }

    /// A measured row; the optional ratios start empty.
    pub fn measured(
        system: &str,
        workload: &str,
        queue_depth: u32,
        ops_per_sec: f64,
        mb_per_sec: f64,
        p50_us: f64,
        p99_us: f64,
    ) -> Row {
        Row {
            system: system.into(),
            workload: workload.into(),
            ops_per_sec,
            mb_per_sec,
            p50_us,
            p99_us,
            queue_depth,
            ..Row::default()
        }
    }
}

/// Prints rows as an aligned table (the network layout when rows carry connections).
pub fn print_table(rows: &[Row]) {
    if rows.iter().any(|r| r.connections.is_some()) {
        print_net_table(rows);
        return;
    }
    let opt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
    println!(
        "{:<28} {:<16} {:>4} {:>11} {:>9} {:>9} {:>9} {:>7} {:>7} {:>6}",
        "system", "workload", "qd", "ops/s", "MB/s", "p50 us", "p99 us", "vs fio", "vs dev", "WA"
    );
    for r in rows {
        if let Some(why) = &r.missing {
            println!(
                "{:<28} {:<16} {:>4} missing: {why}",
                r.system, r.workload, r.queue_depth
            );
            continue;
        }
        println!(
            "{:<28} {:<16} {:>4} {:>11.0} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>7} {:>6}",
            r.system,
            r.workload,
            r.queue_depth,
            r.ops_per_sec,
            r.mb_per_sec,
            r.p50_us,
            r.p99_us,
            opt(r.ratio_to_fio),
            opt(r.ratio_to_device),
            opt(r.write_amp)
        );
    }
}

fn print_net_table(rows: &[Row]) {
    let opt = |x: Option<f64>, p: usize| x.map_or_else(|| "-".to_string(), |x| format!("{x:.p$}"));
    println!(
        "{:<22} {:<12} {:>5} {:>3} {:>3} {:>10} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}",
        "system",
        "workload",
        "value",
        "c",
        "P",
        "ops/s",
        "MB/s",
        "p50 us",
        "p99 us",
        "CPU s/M",
        "RSS MB",
        "vs redis"
    );
    for r in rows {
        let (c, p) = (r.connections.unwrap_or(0), r.pipeline.unwrap_or(0));
        let v = r.value_size.unwrap_or(0);
        if let Some(why) = &r.missing {
            println!(
                "{:<22} {:<12} {v:>5} {c:>3} {p:>3} missing: {why}",
                r.system, r.workload
            );
            continue;
        }
        println!(
            "{:<22} {:<12} {v:>5} {c:>3} {p:>3} {:>10.0} {:>8.1} {:>8.0} {:>8.0} {:>8} {:>7} {:>7}",
            r.system,
            r.workload,
            r.ops_per_sec,
            r.mb_per_sec,
            r.p50_us,
            r.p99_us,
            opt(r.cpu_s_per_mop, 1),
            opt(r.rss_mb, 0),
            opt(r.ratio_to_redis, 2)
        );
    }
}

/// Writes rows as a JSON array.
///
/// # Errors
/// When the file cannot be written.
pub fn write_json(rows: &[Row], path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(rows)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Keys every row of `bench all`'s `results.json` carries (`null` where a figure does not
/// apply, e.g. write amplification of a read workload).
pub const ALL_KEYS: [&str; 28] = [
    "system",
    "workload",
    "value_size",
    "ops_per_sec",
    "mb_per_sec",
    "p50_us",
    "p99_us",
    "p999_us",
    "max_us",
    "read_write_p999_us",
    "host_stalls",
    "write_amp",
    "write_amp_disk",
    "cache_bytes",
    "timed_until",
    "cpu_s_per_mop",
    "rss_mb",
    "ratio_to_device",
    "ratio_to_lightstore",
    "queue_depth",
    "connections",
    "pipeline",
    "reads_from",
    "ratio_to_redis",
    "mean_us",
    "value_bytes_copied_per_op",
    "compactions",
    "missing",
];

/// Rows as JSON objects that all carry [`ALL_KEYS`].
///
/// # Errors
/// When a row cannot be serialized (never for finite figures).
pub fn to_full_json(rows: &[Row]) -> anyhow::Result<serde_json::Value> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mut v = serde_json::to_value(r)?;
        if let Some(obj) = v.as_object_mut() {
            for k in ALL_KEYS {
                obj.entry(k).or_insert(serde_json::Value::Null);
            }
        }
        out.push(v);
    }
    Ok(serde_json::Value::Array(out))
}
