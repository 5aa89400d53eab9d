//! The outputs of `bench all` under `--out`: `results.json` (every row, every documented
//! key), `latency-cdf.json`, `report.md` (ratios first, then throughput, every row, and how it
//! was measured) and SVG plots.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::all::{Results, DEVICE, NET_PLP, PLP, SYSTEMS, VALUE_SIZES};
use crate::all_targets::{target_lines, targets};
use crate::local::size_label;
use crate::plots;
use crate::report::{to_full_json, Row};
use crate::workloads::{Workload, BATCH, CLIENTS, MIXED_MIN_OPS, QD, ZIPF_MIN_OPS};

/// How `peers.rs` configures RocksDB (kept next to the report that states it).
const ROCKSDB_CONFIG: &str = "tuned as its guides say for large values on flash: no \
    compression (values are random), 64 MiB memtables (3), dynamic level sizes, bloom filter 10 \
    bits/key, index and filter blocks in the block cache, `use_direct_reads` and \
    `use_direct_io_for_flush_and_compaction`, 2 background jobs (2 cores), bytes_per_sync 1 MiB. \
    BlobDB: `enable_blob_files`, `min_blob_size` 1024 (the 8 KiB and 1 KiB values are separated, \
    100 B values stay in the LSM tree), 256 MiB blob files, blob GC on (age cutoff 0.25), and, \
    since SSTs then hold only keys and blob references, 8 MiB target SST files and a 32 MiB L1.";
/// How `peers.rs` configures fjall.
const FJALL_CONFIG: &str = "fjall 2 with key-value separation (`with_kv_separation`, default \
    threshold 1 KiB: 8 KiB and 1 KiB values go to its value log, 100 B stay in the tree; value \
    GC is manual in fjall and is not run), no compression, one flush and one compaction worker, \
    cache 1/16 of the data set; every batch is committed with `PersistMode::SyncData` (fsync'd \
    journal, durable when acknowledged).";

/// The peers LightStore-Local is compared with in the headline table, in order.
const IN_PROCESS_PEERS: [(&str, &str); 5] = [
    ("rocksdb-leveled/wal-sync", "RocksDB (WAL sync)"),
    ("rocksdb-leveled/no-wal", "RocksDB (no WAL)"),
    ("rocksdb-blobdb/wal-sync", "BlobDB (WAL sync)"),
    ("rocksdb-blobdb/no-wal", "BlobDB (no WAL)"),
    ("fjall-kvsep", "fjall"),
];
/// The servers LightStore-Net is compared with.
/// The servers LightStore-Net is compared with, each with the drive's mode it is paired with:
/// in-memory Redis (acknowledged from DRAM) with the plp drive, Redis with its AOF (fsync'd
/// every second) with the durable drive (which flushes before every acknowledgement, so the
/// pair favours Redis).
const SERVER_PEERS: [(&str, &str, &str); 2] = [
    ("redis", "Redis", NET_PLP),
    ("redis-aof-everysec", "Redis AOF", "lightstore-net"),
];

pub(crate) fn find<'a>(rows: &'a [Row], system: &str, w: Workload, vs: usize) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.system == system
            && r.workload == w.name()
            && r.value_size == Some(vs as u32)
            && r.missing.is_none()
    })
}

pub(crate) fn ops(rows: &[Row], system: &str, w: Workload, vs: usize) -> Option<f64> {
    find(rows, system, w, vs).map(|r| r.ops_per_sec)
}

pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Operations per second fio allows for workload `w` with values of `vs` bytes, on the
/// workload's own access pattern (issue 18): S-SET sequential writes, R-SET random writes
/// (as a client issues them; the engine itself appends), S-GET sequential reads, R-GET and
/// Z-GET random reads, R-Mixed nine random reads per random write. Writes are bytes at the
/// pattern's rate, reads a page each, as [`crate::workloads::Ceiling::ops`] counts them.
fn fio_ops(f: &crate::fio::FioCeilings, w: Workload, vs: usize) -> f64 {
    let pages_per_value = vs as f64 / 8192.0;
    match w {
        Workload::SSet => f.seq_write.iops / pages_per_value,
        Workload::RSet => f.rand_write.iops / pages_per_value,
        Workload::SGet => f.seq_read.iops,
        Workload::RGet | Workload::ZGet => f.rand_read.iops,
        Workload::RMixed => {
            1.0 / (0.9 / f.rand_read.iops + 0.1 * pages_per_value / f.rand_write.iops)
        }
    }
}

/// `system`'s ops/s for `w` over what fio allows for the workload's own pattern.
pub(crate) fn vs_fio(res: &Results, system: &str, w: Workload, vs: usize) -> Option<f64> {
    let f = res.fio.as_ref().ok()?;
    let fio = fio_ops(f, w, vs);
    ops(&res.rows, system, w, vs)
        .filter(|_| fio > 0.0)
        .map(|o| o / fio)
}

pub(crate) fn fmt_ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_string(), |x| format!("{x:.2}x"))
}

/// A row's ops/s: the median pass, and the min-max over its passes when it had several.
fn fmt_ops(r: &Row) -> String {
    match r.ops_range {
        Some((lo, hi)) => format!("{:.0} ({lo:.0}–{hi:.0})", r.ops_per_sec),
        None => format!("{:.0}", r.ops_per_sec),
    }
}

pub(crate) fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "—".to_string(), |x| format!("{x:.digits$}"))
}

/// A row's p99.9, with its reads' and writes' own where it has both (R-Mixed).
fn fmt_p999(r: &Row) -> String {
    let all = r.p999_us.map_or_else(|| "—".to_string(), fmt_lat);
    match r.read_write_p999_us {
        Some((get, set)) => format!("{all} (GET {}, SET {})", fmt_lat(get), fmt_lat(set)),
        None => all,
    }
}

fn fmt_lat(x: f64) -> String {
    if x > 0.0 {
        format!("{x:.0}")
    } else {
        "—".to_string()
    }
}

/// Writes every output; returns the files written.
///
/// # Errors
/// When `out` cannot be written.
pub fn write_outputs(res: &Results, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = Vec::new();
    let mut all_rows = res.rows.clone();
    if let Some(x) = &res.extras {
        all_rows.extend(crate::extras_report::rows(x));
    }
    let mut json = to_full_json(&all_rows)?;
    // The device rows have no latency of their own (ceilings, not runs).
    if let Some(arr) = json.as_array_mut() {
        for v in arr.iter_mut() {
            if v.get("system").and_then(|s| s.as_str()) == Some(DEVICE) {
                if let Some(o) = v.as_object_mut() {
                    for k in ["p50_us", "p99_us", "p999_us", "max_us"] {
                        o.insert(k.into(), serde_json::Value::Null);
                    }
                }
            }
        }
    }
    let path = out.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
    written.push(path);
    // What the run was: commit, command, machine (issue 18: "the git commit, the machine
    // and the exact command in the results").
    let path = out.join("run.json");
    let run = serde_json::json!({
        "commit": res.commit,
        "command": res.command,
        "machine": res.machine,
        "quick": res.quick,
        "repeat": res.repeat,
        "data_mib": res.data_mib,
        "keys": res.keys,
        "seconds": res.seconds,
        "peers_built": res.peers_built,
        "drive_capacity": res.drive_capacity,
        "backend": "io_uring O_DIRECT files on the scratch file system (LightStore's device, the ceilings); the peers' own files (direct I/O for RocksDB)",
    });
    std::fs::write(&path, serde_json::to_string_pretty(&run)?)?;
    written.push(path);
    let path = out.join("ceilings.json");
    let ceilings = serde_json::json!({
        "load_generator": {
            "seq_write_ops": res.ceiling.write_ops,
            "rand_read_ops": res.ceiling.read_ops,
        },
        "fio": match &res.fio {
            Ok(f) => serde_json::to_value(f)?,
            Err(why) => serde_json::json!({ "missing": why }),
        },
    });
    std::fs::write(&path, serde_json::to_string_pretty(&ceilings)?)?;
    written.push(path);
    let path = out.join("latency-cdf.json");
    std::fs::write(&path, serde_json::to_string(&res.cdfs)?)?;
    written.push(path);

    // Colour index: the system's place in the full list, the same in every plot.
    let all: Vec<&str> = std::iter::once(DEVICE)
        .chain(SYSTEMS.iter().map(|s| s.name))
        .collect();
    let color = |name: &str| all.iter().position(|s| *s == name).unwrap_or(all.len());
    let systems: Vec<(String, usize)> = all
        .iter()
        .filter(|s| {
            res.rows
                .iter()
                .any(|r| r.system == **s && r.missing.is_none())
        })
        .map(|s| (s.to_string(), color(s)))
        .collect();
    let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
    let mut plot_files = Vec::new();
    for &vs in &VALUE_SIZES {
        let path = out.join(format!("throughput-{}.svg", size_label(vs)));
        plots::grouped_bars(
            &path,
            &format!("Throughput, {} values (ops/s)", size_label(vs)),
            "ops/s",
            &names,
            &systems,
            |s, w| Workload::from_name(w).and_then(|w| ops(&res.rows, s, w, vs)),
        )?;
        plot_files.push(path);
    }
    // One chart per workload at 8 KiB: every system's bar, the targets as lines.
    for w in Workload::ALL {
        let bars: Vec<(String, usize, f64)> = all
            .iter()
            .filter_map(|s| Some((s.to_string(), color(s), ops(&res.rows, s, w, 8192)?)))
            .filter(|b| b.2 > 0.0)
            .collect();
        let path = out.join(format!("workload-{}-8K.svg", w.name()));
        plots::workload_bars(
            &path,
            &format!(
                "{}, 8 KiB values: ops/s, and the targets (DESIGN.md section 8)",
                w.name()
            ),
            &bars,
            &target_lines(res, w),
        )?;
        if bars.is_empty() {
            continue;
        }
        plot_files.push(path);
    }
    for w in Workload::ALL {
        let series: Vec<(String, usize, Vec<[f64; 2]>)> = res
            .cdfs
            .iter()
            .filter(|c| c.workload == w.name() && c.value_size == 8192)
            .map(|c| (c.system.clone(), color(&c.system), c.points.clone()))
            .collect();
        let path = out.join(format!("latency-cdf-{}-8K.svg", w.name()));
        plots::cdfs(
            &path,
            &format!(
                "{} latency CDF, 8 KiB values ({QD} requests in flight)",
                w.name()
            ),
            &series,
        )?;
        plot_files.push(path);
    }
    if let Some(x) = &res.extras {
        plot_files.extend(crate::extras_report::write_plots(x, out)?);
    }
    let pngs = plots::png_copies(&plot_files);
    if let Err(why) = &pngs {
        eprintln!("{why}");
    }
    let path = out.join("report.md");
    std::fs::write(&path, markdown(res, &plot_files, pngs.as_ref().err()))?;
    written.push(path);
    written.extend(plot_files);
    written.extend(pngs.unwrap_or_default());
    Ok(written)
}

/// What the host-stall probe saw during a row: stalls, the longest, the guest's steal time.
pub(crate) fn fmt_stalls(r: Option<&Row>) -> String {
    match r.and_then(|r| r.host_stalls) {
        Some(h) => {
            let steal = h
                .steal_share
                .map_or_else(String::new, |s| format!(", steal {:.0}%", s * 100.0));
            let longest = if h.count > 0 {
                format!(", longest {:.0} ms", h.longest_ms)
            } else {
                String::new()
            };
            format!("{}{longest}{steal}", h.count)
        }
        None => "—".to_string(),
    }
}

/// The device's ceilings from the load generator and from fio, side by side (issue 18).
fn ceilings_section(res: &Results) -> String {
    let mut m = String::from("## Device ceilings: the load generator and fio\n\n");
    let f = match &res.fio {
        Ok(f) => f,
        Err(why) => {
            let _ = writeln!(
                m,
                "fio could not run ({why}): only the load generator's figures above.\n"
            );
            return m;
        }
    };
    let _ = writeln!(
        m,
        "Both on the scratch file system, io_uring, O_DIRECT, 8 KiB blocks, {} in flight, one \
         after the other before the systems ran. The \"vs device\" ratios and the targets use \
         the load generator for writes (the append-only device's own path, as the engine \
         drives it: it programs erased space) and the higher of the two for random reads (a \
         read needs nothing of the device's own; this run: {}); {} is the figure anyone can \
         reproduce: `fio --ioengine=io_uring --direct=1 --bs=8k \
         --iodepth={} --rw=PATTERN --size={} --number_ios={}` on a fresh file, after a first \
         sequential write over it (not reported: first writes convert the file's extents). \
         The last column is fio's own job thread (user and system time) per I/O: what the \
         kernel's path for one such I/O costs the thread that submits and reaps it on this \
         host, against which the servers' CPU per operation can be weighed.\n",
        f.iodepth,
        if res.read_ceiling_from_fio {
            "fio's"
        } else {
            "the load generator's"
        },
        f.version,
        f.iodepth,
        f.region_bytes,
        f.region_bytes / 8192
    );
    m.push_str(
        "| pattern | the workloads it bounds | load generator (ops/s) | fio (IOPS) | fio MB/s \
         | fio p50 us | fio p99 us | fio CPU us per I/O |\n|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let rows = [
        (
            "sequential write",
            "S-SET; every write of an append-only engine (R-SET too)",
            Some(res.ceiling.write_ops),
            f.seq_write,
        ),
        (
            "random write",
            "R-SET as a client issues it",
            None,
            f.rand_write,
        ),
        ("sequential read", "S-GET", None, f.seq_read),
        (
            "random read",
            "R-GET, Z-GET",
            Some(res.ceiling.read_ops),
            f.rand_read,
        ),
    ];
    for (pattern, bounds, ours, r) in rows {
        let _ = writeln!(
            m,
            "| {pattern} | {bounds} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            fmt_opt(ours, 0),
            r.iops,
            r.bytes_per_sec / 1e6,
            r.p50_us,
            r.p99_us,
            fmt_opt(r.cpu_us_per_io, 1)
        );
    }
    m.push('\n');
    m
}

fn markdown(res: &Results, plots: &[PathBuf], no_png: Option<&String>) -> String {
    let rows = &res.rows;
    let mut m = String::new();
    let mode = if res.quick { "--quick" } else { "full" };
    let _ = writeln!(m, "# LightStore benchmark: every system side by side\n");
    let _ = writeln!(
        m,
        "`cargo xtask bench all{}` at commit `{}`: {} on one machine ({}), {:.0} s. \
         Data set per value size: {} MiB{}; keys loaded: {}. Device ceiling (io_uring O_DIRECT \
         file on the scratch file system, 8 KiB, depth {QD}): {:.0} sequential writes/s \
         ({:.0} MB/s), {:.0} random reads/s{}.{}\n",
        if res.quick { " --quick" } else { "" },
        res.commit,
        if res.repeat > 1 {
            format!(
                "{} interleaved passes over every system (each row is its median pass, every \
                 figure on it from that pass, with the min–max of ops/s over the passes in \
                 brackets; ratios and targets use the medians; the extras ran once)",
                res.repeat
            )
        } else {
            "one pass over every system (one repetition per row: no spread)".to_string()
        },
        res.machine,
        res.seconds,
        res.data_mib,
        if res.quick {
            " (quick: small, so the peers' memtables, caches and the OS page cache cover much \
             of it — read the quick figures as a smoke test, not as the comparison)"
        } else {
            ""
        },
        res.keys
            .iter()
            .map(|(v, k)| format!("{k} of {}", size_label(*v)))
            .collect::<Vec<_>>()
            .join(", "),
        res.ceiling.write_ops,
        res.ceiling.write_ops * hwftl_sim::PAGE_SIZE as f64 / 1e6,
        res.ceiling.read_ops,
        if res.read_ceiling_from_fio {
            " (fio's, which read faster than the load generator: see the ceilings section)"
        } else {
            ""
        },
        if res.peers_built {
            ""
        } else {
            " Built without the `peers` feature: the RocksDB and fjall rows are missing."
        }
    );
    if let Some(after) = &res.ceiling_after {
        let _ = writeln!(
            m,
            "Measured again after every system: {:.0} writes/s, {:.0} reads/s. This host's disk \
             (a virtual disk shared with other work) drifts by large factors within a run, so \
             rows measured minutes apart are not strictly comparable; the ratios use the first \
             measurement.\n",
            after.write_ops, after.read_ops
        );
    }
    let _ = writeln!(m, "Harness command: `{}`.\n", res.command);
    let _ = writeln!(
        m,
        "## Verdict: the targets (DESIGN.md section 8, 8 KiB values)\n"
    );
    let _ = writeln!(m, "| target | goal | this run | met |\n|---|---|---|---|");
    for t in targets(res) {
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {met} |",
            t.what,
            t.goal,
            if t.latency {
                fmt_opt(t.got, 1) + " ms"
            } else {
                fmt_ratio(t.got)
            }
        );
    }
    let _ = writeln!(
        m,
        "\nPairs are matched on durability: the device-ceiling targets use plp mode (neither \
         side flushes the device's write cache per write: the paper's capacitor-backed card); \
         the RocksDB targets use the durable mode against the WAL-sync configurations (both \
         acknowledge a write only once it is durable), except the no-WAL line, plp against no \
         WAL; the RESP targets use the drive in plp mode against in-memory Redis (both \
         acknowledge from DRAM; the drive's pages then land on the device). How each \
         figure was measured follows.\n"
    );

    m.push_str(&ceilings_section(res));
    let _ = writeln!(
        m,
        "Mode: {mode}. Every row: {CLIENTS} clients x {BATCH} requests in flight = {QD} \
        (in-process: {CLIENTS} threads, each a batch of {BATCH} — small-value write batches are \
        longer, at least four pages of values, for every in-process engine alike; over RESP: \
        {CLIENTS} connections each pipelining {BATCH}). Latencies are per operation, each \
        recorded with the latency of the batch it was sent in (see *Every row*).\n"
    );

    let _ = writeln!(
        m,
        "## Ratios: LightStore over each peer (ops/s, same workload and value size)\n"
    );
    let _ = writeln!(
        m,
        "Above 1 means LightStore is faster. In-process peers are compared with \
         LightStore-Local on a matching pair: peers with a synced WAL with the durable mode \
         (`lightstore-local`: a device flush before each acknowledgement), peers without a WAL \
         with plp mode (`lightstore-local/plp`: acknowledged once in the memtable, before its pages land, as a peer without a WAL at its memtable insert); servers \
         with LightStore-Net: in-memory Redis with the drive in plp mode (`lightstore-net/plp`, \
         both acknowledge from DRAM; the drive's pages then land on the device), Redis with an \
         AOF fsync'd every second with the durable drive (`lightstore-net`, a device flush \
         before each acknowledgement: a pair that favours Redis). \"vs device\" is ops/s over what the raw device allows for the \
         workload: writes as the load generator measured them (not flushed, so the durable \
         column pays a flush the ceiling does not), random reads the faster of the load \
         generator and fio; \"vs fio\" over what fio allows for the \
         workload's own pattern (S-SET sequential writes, R-SET random writes, S-GET \
         sequential reads, R-GET and Z-GET random reads, R-Mixed nine random reads per random \
         write; see the ceilings section). For 1 KiB and 100 B values both ceilings are still \
         the 8 KiB figures at depth {QD}: writes count value bytes at the 8 KiB page rate \
         (every engine here writes whole pages or larger), reads one page each; no ceiling \
         was measured at smaller blocks or at the small-value write batches' depth.\n"
    );
    for &vs in &VALUE_SIZES {
        let _ = writeln!(m, "### {} values\n", size_label(vs));
        let mut head =
            String::from("| workload | Local vs device | Local plp vs device | Local plp vs fio |");
        let mut sep = String::from("|---|---|---|---|");
        for (p, label) in IN_PROCESS_PEERS {
            let local = if p.ends_with("/no-wal") {
                "Local plp"
            } else {
                "Local"
            };
            let _ = write!(head, " {local} ÷ {label} |");
            sep.push_str("---|");
        }
        head.push_str(" Net vs device | Net plp vs device |");
        sep.push_str("---|---|");
        for (_, label, mine) in SERVER_PEERS {
            let net = if mine == NET_PLP { "Net plp" } else { "Net" };
            let _ = write!(head, " {net} ÷ {label} |");
            sep.push_str("---|");
        }
        let _ = writeln!(m, "{head}\n{sep}");
        for w in Workload::ALL {
            let ls = ops(rows, "lightstore-local", w, vs);
            let plp = ops(rows, PLP, w, vs);
            let dev = |s| find(rows, s, w, vs).and_then(|r| r.ratio_to_device);
            let _ = write!(
                m,
                "| {} | {} | {} | {} |",
                w.name(),
                fmt_ratio(dev("lightstore-local")),
                fmt_ratio(dev(PLP)),
                fmt_ratio(vs_fio(res, PLP, w, vs))
            );
            for (p, _) in IN_PROCESS_PEERS {
                let mine = if p.ends_with("/no-wal") { plp } else { ls };
                let _ = write!(m, " {} |", fmt_ratio(ratio(mine, ops(rows, p, w, vs))));
            }
            let _ = write!(
                m,
                " {} | {} |",
                fmt_ratio(dev("lightstore-net")),
                fmt_ratio(dev(NET_PLP))
            );
            for (p, _, mine) in SERVER_PEERS {
                let _ = write!(
                    m,
                    " {} |",
                    fmt_ratio(ratio(ops(rows, mine, w, vs), ops(rows, p, w, vs)))
                );
            }
            m.push('\n');
        }
        m.push('\n');
    }

    let _ = writeln!(m, "## Throughput (ops/s)\n");
    for &vs in &VALUE_SIZES {
        let _ = writeln!(m, "### {} values\n", size_label(vs));
        let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        let _ = writeln!(
            m,
            "| system | {} | reads from | writes timed until |",
            names.join(" | ")
        );
        let _ = writeln!(m, "|---|{}---|---|", "---|".repeat(names.len()));
        let names = std::iter::once(DEVICE).chain(SYSTEMS.iter().map(|s| s.name));
        for s in names {
            let mut line = format!("| {s} |");
            let mut from = String::new();
            let mut until = String::new();
            let mut limit_hit = Vec::new();
            for w in Workload::ALL {
                let r = rows.iter().find(|r| {
                    r.system == s && r.workload == w.name() && r.value_size == Some(vs as u32)
                });
                let cell = match r {
                    Some(r) if r.missing.is_none() => fmt_ops(r),
                    Some(_) => "missing".to_string(),
                    None => "—".to_string(),
                };
                if let Some(f) = r.and_then(|r| r.reads_from.clone()) {
                    from = f;
                }
                if let Some(t) = r.and_then(|r| r.timed_until.clone()) {
                    match t.strip_suffix(crate::kv::Settled::LIMIT_HIT_NOTE) {
                        Some(system_note) => {
                            until = system_note.trim_end_matches("; ").to_string();
                            limit_hit.push(w.name());
                        }
                        None => until = t,
                    }
                }
                let _ = write!(line, " {cell} |");
            }
            if !limit_hit.is_empty() {
                let _ = write!(
                    until,
                    " — **the wait hit its limit on {}**: compactions were still running \
                     when the clock stopped",
                    limit_hit.join(", ")
                );
            }
            let _ = writeln!(m, "{line} {from} | {until} |");
        }
        m.push('\n');
    }

    let _ = writeln!(m, "## Every row\n");
    let _ = writeln!(
        m,
        "c x P: clients (threads or connections) x requests each keeps in flight. WA: bytes \
         written to storage / user bytes (16-byte keys + values), including the flushes and \
         compactions the writes left. CPU: CPU seconds per million operations of the serving \
         process. RSS: its resident memory after the workload, MB. Latencies are per \
         operation, from the harness's own HdrHistogram (3 significant digits) for every row, \
         in-process and over RESP: each operation of a batch (a multi-get or write batch \
         in-process, a pipeline over RESP) is recorded with the batch's latency. WA disk: \
         bytes that reached the block device below the file system (after `syncfs`, from \
         `/sys/dev/block/*/stat`), the same meter for every system, file-system journal \
         and metadata included; WA proc: the serving process's own `/proc/<pid>/io` count. \
         A WA below 1 means writes that never reached storage: overwrites absorbed in a \
         memtable (the peers without a WAL), or data the meter did not see. Cache: the DRAM \
         the system was given to cache data (the peers: a sixteenth of the data plus \
         LightStore's keytable DRAM measured in the same pass; LightStore: its value cache, \
         with its keytables in DRAM besides). R-Mixed's p99.9 also gives its GETs' and \
         its SETs' own, each from its own histogram. Host stalls: how often the harness's \
         probe (a real-time thread sleeping 1 ms at a time) woke 5 ms or more late during \
         the workload, the longest, and the guest's steal time from `/proc/stat`: time the \
         host did not run this machine, which every thread of every system waits out and \
         which sets a p99.9 alone when it meets {QD} operations in flight.\n"
    );
    let _ = writeln!(
        m,
        "| system | workload | value | c x P | ops/s | MB/s | p50 µs | p99 µs | p99.9 µs | max µs | WA disk | WA proc | cache MiB | CPU s/Mop | RSS MB | vs device | vs LightStore | host stalls |"
    );
    let _ = writeln!(
        m,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows
        .iter()
        .filter(|r| r.system != DEVICE && r.missing.is_none())
    {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {}x{} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.system,
            r.workload,
            r.value_size
                .map_or_else(String::new, |v| size_label(v as usize)),
            r.connections.unwrap_or(0),
            r.pipeline.unwrap_or(0),
            fmt_ops(r),
            r.mb_per_sec,
            fmt_lat(r.p50_us),
            fmt_lat(r.p99_us),
            fmt_p999(r),
            r.max_us.map_or_else(|| "—".to_string(), fmt_lat),
            fmt_opt(r.write_amp_disk, 2),
            fmt_opt(r.write_amp, 2),
            fmt_opt(r.cache_bytes.map(|b| b as f64 / 1048576.0), 0),
            fmt_opt(r.cpu_s_per_mop, 2),
            fmt_opt(r.rss_mb, 0),
            fmt_ratio(r.ratio_to_device),
            fmt_ratio(r.ratio_to_lightstore),
            fmt_stalls(Some(r)),
        );
    }
    let missing: Vec<&Row> = rows.iter().filter(|r| r.missing.is_some()).collect();
    if !missing.is_empty() {
        let _ = writeln!(m, "\n## Missing rows\n");
        let mut seen: Vec<(String, String)> = Vec::new();
        for r in missing {
            let why = r.missing.clone().unwrap_or_default();
            if !seen.iter().any(|(s, w)| *s == r.system && *w == why) {
                let _ = writeln!(m, "- `{}`: {why}", r.system);
                seen.push((r.system.clone(), why));
            }
        }
    }

    m.push('\n');
    match &res.extras {
        Some(x) => m.push_str(&crate::extras_report::markdown(x, res.quick)),
        None => {
            let _ = writeln!(
                m,
                "## Extras\n\nSkipped (`--skip-extras`): no latency breakdown, ablation or \
                 sustained overwrite in this run.\n"
            );
        }
    }
    let _ = writeln!(m, "\n## How it was measured\n");
    let _ = writeln!(m, "{}", methodology(res));
    let _ = writeln!(m, "## Plots\n");
    match no_png {
        None => {
            let _ = writeln!(
                m,
                "Each plot is an SVG (below) with a PNG copy of the same name beside it.\n"
            );
        }
        Some(why) => {
            let _ = writeln!(m, "SVG only: {why}.\n");
        }
    }
    for p in plots {
        if let Some(name) = p.file_name().and_then(|n| n.to_str()) {
            let _ = writeln!(m, "![{name}]({name})\n");
        }
    }
    m
}

fn methodology(res: &Results) -> String {
    format!(
        "- **Workloads** (the paper's Table 3): S-SET writes every key in order (it is also \
         the load), S-GET reads them in order, R-SET overwrites random keys, R-GET reads random \
         keys, R-Mixed issues nine random read batches for each random write batch. Keys are \
         16 bytes; every value is the same pseudo-random byte pattern, which a compressor \
         would shrink across keys, so no system here compresses (RocksDB's options are \
         checked at open, fjall's compression is off). Each workload does as many operations as there \
         are keys, R-Mixed at least {MIXED_MIN_OPS} (its p99.9, a target, then rests on more \
         than one stall of the {QD} operations in flight) and Z-GET at least {ZIPF_MIN_OPS} \
         (it measures a hot set served from each system's cache: one pass over 16,384 keys \
         makes a fifth of its reads a key's first, a miss every cache pays once). Each \
         workload draws its random keys from a stream of its own (since the run after \
         `1cfa13e`; before, R-GET read back R-SET's keys in the order R-SET wrote them, and \
         R-Mixed R-GET's).\n\
         - **Device ceiling** (`{DEVICE}`): the append-only device on its io_uring O_DIRECT \
         file backend, no engine, same scratch file system, 8 KiB pages at depth {QD} (the \
         backend sends adjacent pages started together down as one vectored write or read of \
         up to 512 KiB, so the ceiling can pass fio's 8 KiB figure). Per \
         workload it gives the ops/s the device alone allows: writes as bytes at the \
         sequential write rate (LightStore appends, so R-SET's ceiling is S-SET's), reads one \
         page each, R-Mixed 9 reads + 1 value write per 10 operations.\n\
         - **LightStore-Local**: the engine in-process on its own device file (three times the \
         data set), flushing the device's write cache before it acknowledges a batch. \
         **LightStore-Net**: the drive (`lightstore --device sim --timing none`, durability \
         sync, device of {}) over RESP on loopback.\n\
         - **RocksDB** (`rocksdb` crate, in-process, on the same file system): {} WAL sync = \
         `WriteOptions::set_sync(true)` (durable when acknowledged); no WAL = \
         `disable_wal(true)` (acknowledged from the memtable: not durable). Block cache \
         1/16 of the keys and values loaded (at least 1 MiB).\n\
         - **fjall** (in-process): {}\n\
         - **Redis** (`redis-server` from Debian, {}): in-memory (`--save ''`, no AOF) and \
         `appendonly yes`, `appendfsync everysec`, with the same load generator and \
         connections as LightStore-Net.\n\
         - **Where reads come from**: LightStore reads values from the device with O_DIRECT \
         (keytables are in DRAM); RocksDB uses direct reads, so its reads reach the device \
         unless its block cache holds them; fjall has no direct I/O: its files are dropped \
         from the page cache before each read workload, and what a workload reads twice is \
         then cached; Redis serves from DRAM.\n\
         - **Write amplification**: bytes the serving process sent to storage \
         (`/proc/<pid>/io` `write_bytes` less `cancelled_write_bytes`; direct I/O counts when \
         issued, buffered writes when a page turns dirty) over user bytes, measured from the \
         start of the workload until its background work (RocksDB memtable flush and \
         compactions, fjall memtable flush) is done. LightStore's includes its device's table \
         writes; Redis in-memory writes nothing.\n\
         - **CPU**: in-process systems: the child process's `getrusage` user+system time \
         (every thread: clients, engine, background work) over the workload; servers: the \
         server process's `/proc/<pid>/stat` utime+stime (10 ms ticks), clients excluded. \
         **RSS**: VmRSS of that process after the workload.\n\
         - Each (system, value size) runs in a fresh child process of the harness, with a \
         fresh server where there is one; client and server share this machine's cores.\n",
        res.drive_capacity,
        ROCKSDB_CONFIG,
        FJALL_CONFIG,
        redis_version(),
    )
}

fn redis_version() -> String {
    std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let t = String::from_utf8_lossy(&o.stdout).to_string();
            t.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(str::to_string))
        })
        .map_or_else(|| "not installed".into(), |v| format!("version {v}"))
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::fio::{FioCeilings, FioResult};
    use crate::workloads::Ceiling;

    pub(crate) fn results(fio: Result<FioCeilings, String>) -> Results {
        Results {
            rows: Vec::new(),
            cdfs: Vec::new(),
            ceiling: Ceiling {
                write_ops: 90_000.0,
                read_ops: 70_000.0,
            },
            read_ceiling_from_fio: false,
            ceiling_after: None,
            fio,
            keys: Vec::new(),
            data_mib: 256,
            quick: false,
            peers_built: false,
            seconds: 1.0,
            drive_capacity: String::new(),
            extras: None,
            commit: "abc".into(),
            command: "lightstore-bench all".into(),
            machine: "2 cores".into(),
            repeat: 1,
        }
    }

    pub(crate) fn fio(iops: f64) -> FioResult {
        FioResult {
            iops,
            bytes_per_sec: iops * 8192.0,
            p50_us: 300.0,
            p99_us: 900.0,
            cpu_us_per_io: Some(8.0),
        }
    }

    #[test]
    fn the_ceilings_table_puts_fio_beside_the_load_generator() {
        let f = FioCeilings {
            version: "fio-3.33".into(),
            iodepth: 32,
            region_bytes: 256 << 20,
            seq_write: fio(95_000.0),
            rand_write: fio(60_000.0),
            seq_read: fio(110_000.0),
            rand_read: fio(72_000.0),
        };
        let m = ceilings_section(&results(Ok(f)));
        assert!(
            m.contains("| sequential write | S-SET; every write of an append-only engine (R-SET too) | 90000 | 95000 | 778 | 300 | 900 | 8.0 |"),
            "{m}"
        );
        assert!(
            m.contains("| random write | R-SET as a client issues it | — | 60000 |"),
            "{m}"
        );
        assert!(
            m.contains("| random read | R-GET, Z-GET | 70000 | 72000 |"),
            "{m}"
        );
        assert!(
            m.contains("fio-3.33") && m.contains("--number_ios=32768"),
            "{m}"
        );
        let m = ceilings_section(&results(Err("fio is not installed".into())));
        assert!(
            m.contains("fio could not run (fio is not installed)"),
            "{m}"
        );
        assert!(!m.contains("| pattern |"), "{m}");
    }

    /// The read workloads are held to the faster of the two random-read figures; writes
    /// keep the load generator's, whatever fio says.
    #[test]
    fn reads_are_held_to_the_faster_random_read_ceiling() {
        let loadgen = Ceiling {
            write_ops: 30_000.0,
            read_ops: 40_000.0,
        };
        let with = |rand_read: f64| -> Result<FioCeilings, String> {
            Ok(FioCeilings {
                version: "fio-3.33".into(),
                iodepth: 32,
                region_bytes: 256 << 20,
                seq_write: fio(90_000.0),
                rand_write: fio(60_000.0),
                seq_read: fio(110_000.0),
                rand_read: fio(rand_read),
            })
        };
        let (c, from_fio) = crate::all::read_ceiling(loadgen, &with(55_000.0));
        assert!(from_fio);
        assert_eq!((c.write_ops, c.read_ops), (30_000.0, 55_000.0));
        let (c, from_fio) = crate::all::read_ceiling(loadgen, &with(35_000.0));
        assert!(!from_fio);
        assert_eq!((c.write_ops, c.read_ops), (30_000.0, 40_000.0));
        let (c, from_fio) = crate::all::read_ceiling(loadgen, &Err("no fio".into()));
        assert!(!from_fio);
        assert_eq!(c.read_ops, 40_000.0);
        let mut r = results(with(55_000.0));
        r.read_ceiling_from_fio = true;
        assert!(ceilings_section(&r)
            .contains("(a read needs nothing of the device's own; this run: fio's)"));
    }

    /// "vs fio" divides by fio's figure for the workload's own pattern: S-SET by sequential
    /// writes, R-SET by random writes (bytes, so eight 1 KiB values per page), R-GET by
    /// random reads; without fio the column says so with a dash.
    #[test]
    fn vs_fio_uses_each_workloads_own_pattern() {
        let f = FioCeilings {
            version: "fio-3.33".into(),
            iodepth: 32,
            region_bytes: 256 << 20,
            seq_write: fio(100_000.0),
            rand_write: fio(50_000.0),
            seq_read: fio(110_000.0),
            rand_read: fio(80_000.0),
        };
        let mut res = results(Ok(f));
        let row = |w: Workload, vs: u32, ops: f64| {
            let mut r = Row::missing(PLP, w.name(), 32, String::new());
            r.missing = None;
            r.value_size = Some(vs);
            r.ops_per_sec = ops;
            r
        };
        res.rows = vec![
            row(Workload::SSet, 8192, 75_000.0),
            row(Workload::RSet, 8192, 75_000.0),
            row(Workload::RSet, 1024, 200_000.0),
            row(Workload::RGet, 8192, 60_000.0),
        ];
        let r = |w, vs| vs_fio(&res, PLP, w, vs).map(|x| (x * 1000.0).round() / 1000.0);
        assert_eq!(r(Workload::SSet, 8192), Some(0.75));
        assert_eq!(r(Workload::RSet, 8192), Some(1.5));
        assert_eq!(r(Workload::RSet, 1024), Some(0.5));
        assert_eq!(r(Workload::RGet, 8192), Some(0.75));
        assert_eq!(r(Workload::SGet, 8192), None, "no row");
        let no_fio = results(Err("fio is not installed".into()));
        assert_eq!(vs_fio(&no_fio, PLP, Workload::SSet, 8192), None);
    }
}
