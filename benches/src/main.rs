//! `lightstore-bench`: the benchmark harness (`cargo xtask bench ...` runs it).

mod all;
mod all_report;
mod all_targets;
mod cluster;
mod device;
mod device_kv;
mod expiry;
mod extras;
mod extras_report;
mod fio;
mod footprint;
mod host_stalls;
mod kv;
mod local;
mod net;
#[cfg(feature = "peers")]
mod peers;
mod plots;
mod procfs;
mod recovery;
mod report;
mod resp;
mod small_values;
mod sweep;
mod workloads;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "lightstore-bench", about = "LightStore benchmark harness")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

/// The options of every benchmark that starts drives as processes (cluster, net, recovery).
#[derive(clap::Args)]
struct DriveRun {
    /// A smaller run (what shrinks: see the command's description).
    #[arg(long)]
    quick: bool,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Directory for the servers' data.
    #[arg(long, default_value = "target/bench/scratch")]
    scratch: PathBuf,
    /// The lightstore binary (default: next to this one).
    #[arg(long)]
    lightstore: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Bench {
    /// The append-only device on every backend and timing preset, and fio on the same file.
    Device {
        /// Small data set and op counts (about a minute).
        #[arg(long)]
        quick: bool,
        /// Write the rows as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Directory for scratch files (device images).
        #[arg(long, default_value = "target/bench/scratch")]
        scratch: PathBuf,
        /// Operations per workload (queue depth 1 runs a tenth).
        #[arg(long)]
        ops: Option<u64>,
        /// Runs per workload on the file backend, each paired with a fio run (default 5); the
        /// median run and the median of the paired ratios are reported.
        #[arg(long)]
        repeats: Option<u32>,
        /// Size of the region the workloads run on, in MiB (default 256, quick; 2048 full).
        #[arg(long)]
        region_mib: Option<u64>,
        /// Only workloads whose names contain this (repeatable), e.g. `randread`.
        #[arg(long)]
        only: Vec<String>,
        /// Only systems whose names contain this (repeatable), e.g. `file/none`.
        #[arg(long)]
        system: Vec<String>,
    },
    /// The engine in-process: the paper's Table 3 workloads next to the device ceiling.
    Local {
        /// Small data sets (about a minute).
        #[arg(long)]
        quick: bool,
        /// Write the rows as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Directory for scratch files (device images).
        #[arg(long, default_value = "target/bench/scratch")]
        scratch: PathBuf,
        /// Data set size per value size, in MiB (default 64 quick, 1024 full).
        #[arg(long)]
        data_mib: Option<u64>,
        /// Only rows whose `target/workload-size` contains this (repeatable), e.g.
        /// `file/R-SET-8K` (S-SET always runs: it loads the keys).
        #[arg(long)]
        only: Vec<String>,
        /// plp mode: writes acknowledged from DRAM, before their pages land, without a device
        /// flush (`EngineConfig::ack_from_dram`).
        #[arg(long)]
        plp: bool,
    },
    /// One, two and four drives as one Redis Cluster under `redis-benchmark --cluster` (SET
    /// and GET, 100 B, 50 connections, pipeline 16), each next to the one-drive cluster in the
    /// same run; every drive and the load generator share this host's cores. `--quick`:
    /// 200,000 requests per run instead of 1,000,000.
    Cluster {
        #[command(flatten)]
        run: DriveRun,
        /// Requests per run.
        #[arg(long)]
        requests: Option<u64>,
    },
    /// The drive over RESP next to redis-server (in-memory and AOF everysec), driven by
    /// redis-benchmark with the same settings. `--quick`: small key spaces and request counts
    /// (a few minutes).
    Net {
        #[command(flatten)]
        run: DriveRun,
        /// Requests per run with 50 connections (default 20000 quick, 200000 full).
        #[arg(long)]
        requests: Option<u64>,
        /// Passes over every system, interleaved; each row is the median pass's, with the
        /// range (single runs on a shared host vary up to 3x).
        #[arg(long, default_value_t = 1)]
        repeat: usize,
    },
    /// The drive's restart time per GiB of data, after `kill -9` (the unflushed tail is
    /// replayed) and after a clean stop, at two data sizes (8 KiB values, plp, file backend).
    /// `--quick`: 64 and 256 MiB instead of 256 MiB and 2 GiB.
    Recovery {
        #[command(flatten)]
        run: DriveRun,
    },
    /// What keys with deadlines and FLUSHALL cost the device, from the drive's INFO: bytes
    /// per `SET ... EX`, bytes written while the keys expire, the expired entries compaction
    /// drops and the space it gives back, and FLUSHALL's time and bytes. `--quick`: 50,000
    /// expiring SETs and 1,500,000 plain ones instead of 200,000 and 4,000,000.
    Expiry {
        #[command(flatten)]
        run: DriveRun,
    },
    /// Small values held in their keytable entries against none held, value cache off:
    /// GET and HGET throughput and device page reads per request after a restart.
    SmallValues {
        #[command(flatten)]
        run: DriveRun,
    },
    /// Every system side by side: the device ceiling, LightStore in-process and over RESP,
    /// RocksDB (leveled, BlobDB; WAL sync and off), fjall, Redis (in-memory, AOF everysec);
    /// writes report.md, results.json and SVG plots (with PNG copies) under --out.
    All {
        /// Small data sets (16 MiB per value size: about two minutes with the extras).
        #[arg(long)]
        quick: bool,
        /// Output directory.
        #[arg(long, default_value = "target/bench/report")]
        out: PathBuf,
        /// Scratch directory (a subdirectory of it is made and removed).
        #[arg(long, default_value = "target/bench/scratch")]
        scratch: PathBuf,
        /// Data set per value size, MiB (default 16 quick, 1024 full).
        #[arg(long)]
        data_mib: Option<u64>,
        /// The lightstore binary (default: next to this one).
        #[arg(long)]
        lightstore: Option<PathBuf>,
        /// Only systems whose names contain this (repeatable).
        #[arg(long)]
        system: Vec<String>,
        /// Skip the extras: the latency breakdown at queue depth 1, the ablation and the
        /// sustained overwrite (about a minute of a --quick run).
        #[arg(long)]
        skip_extras: bool,
        /// Passes over every (system, value size), interleaved; each row is the median pass
        /// with the min-max of ops/s (default 3, 1 with --quick). The extras run once.
        #[arg(long)]
        repeat: Option<usize>,
    },
    /// How sustained random overwrites cost as data grows (0.25x, 1x, 4x a DRAM budget, at
    /// 80% fill) and as the store fills (50%, 80%, 90%, 95% at 1x): LightStore in-process (plp)
    /// and BlobDB without a WAL (built with the `peers` feature), same cache DRAM each.
    Sweep {
        /// Only the smallest data size (a few minutes).
        #[arg(long)]
        quick: bool,
        /// Write the runs as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Directory for the systems' files.
        #[arg(long, default_value = "target/bench/scratch")]
        scratch: PathBuf,
        /// Only these systems (repeatable): lightstore-local/plp, rocksdb-blobdb/no-wal.
        #[arg(long)]
        system: Vec<String>,
    },
    /// One system's sustained random overwrite (a child of `all` and `sweep`).
    #[command(hide = true)]
    RunOverwrite {
        #[arg(long)]
        system: String,
        #[arg(long)]
        device_mib: u64,
        #[arg(long)]
        fill_percent: u64,
        /// Overwrites: this many times the device's capacity.
        #[arg(long, default_value_t = extras::OVERWRITE_TIMES)]
        times: u64,
        /// The system's cache, MiB (default: see `extras::Overwrite::cache_bytes`).
        #[arg(long)]
        cache_mib: Option<u64>,
        /// The same-space run: another system's run (its JSON) whose peak space sizes the
        /// device (instead of --device-mib) and whose keys and overwrites this run repeats.
        #[arg(long)]
        same_space_as: Option<PathBuf>,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        json: PathBuf,
    },
    /// One system at one value size (a child of `all`).
    #[command(hide = true)]
    RunOne {
        #[arg(long)]
        system: String,
        #[arg(long)]
        value_size: usize,
        #[arg(long)]
        keys: u64,
        #[arg(long)]
        cache_bytes: u64,
        #[arg(long)]
        data_mib: u64,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        json: PathBuf,
        #[arg(long)]
        addr: Option<std::net::SocketAddr>,
        #[arg(long)]
        pid: Option<u32>,
    },
}

fn emit(rows: &[report::Row], json: Option<PathBuf>) -> anyhow::Result<()> {
    report::print_table(rows);
    if let Some(path) = json {
        report::write_json(rows, &path)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Writes a benchmark's results as pretty JSON to `json`, if given.
fn write_json(value: &impl serde::Serialize, json: Option<PathBuf>) -> anyhow::Result<()> {
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_string_pretty(value)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.bench {
        Bench::Device {
            quick,
            json,
            scratch,
            ops,
            repeats,
            region_mib,
            only,
            system,
        } => {
            let bench = device::DeviceBench {
                quick,
                scratch,
                ops,
                repeats: repeats.unwrap_or(5),
                region_mib,
                only,
                systems: system,
            };
            emit(&bench.run()?, json)?;
        }
        Bench::Local {
            quick,
            json,
            scratch,
            data_mib,
            only,
            plp,
        } => {
            let bench = local::LocalBench {
                quick,
                scratch,
                data_mib,
                device_mib: None,
                only,
                plp,
            };
            emit(&bench.run()?, json)?;
        }
        Bench::Cluster { run, requests } => {
            let json = run.json;
            let bench = cluster::ClusterBench {
                quick: run.quick,
                scratch: run.scratch,
                lightstore: run.lightstore,
                requests,
            };
            let rows = bench.run()?;
            for r in &rows {
                println!(
                    "{:<22} {:<4} {:>10.0} ops/s  {:>5.2}x one drive  {:>6.2} drive CPU s/M op  p50 {:>7.0} us  p99 {:>7.0} us  ({} cores shared)",
                    r.system,
                    r.workload,
                    r.ops_per_sec,
                    r.ratio_to_one_drive.unwrap_or(0.0),
                    r.cpu_s_per_mop.unwrap_or(0.0),
                    r.p50_us,
                    r.p99_us,
                    r.host_cores.unwrap_or(0)
                );
            }
            emit(&rows, json)?;
        }
        Bench::Recovery { run } => {
            let json = run.json;
            let rows = recovery::RecoveryBench {
                quick: run.quick,
                scratch: run.scratch,
                lightstore: run.lightstore,
            }
            .run()?;
            println!(
                "{:<8} {:>9} {:>9} {:>8} {:>8} {:>10} {:>12}",
                "stop", "data MiB", "live MiB", "ready s", "s/GiB", "replayed", "keytable MiB"
            );
            for r in &rows {
                println!(
                    "{:<8} {:>9} {:>9.0} {:>8.2} {:>8.2} {:>10} {:>12.1}",
                    r.stop,
                    r.data_mib,
                    r.live_mib,
                    r.ready_s,
                    r.s_per_gib,
                    r.replayed_records,
                    r.keytable_mib
                );
            }
            write_json(&rows, json)?;
        }
        Bench::Expiry { run } => {
            let json = run.json;
            let r = expiry::ExpiryBench {
                quick: run.quick,
                scratch: run.scratch,
                lightstore: run.lightstore,
            }
            .run()?;
            println!(
                "{} SET EX ({} keys): {:.0} device bytes per SET; the expiry wrote {} bytes",
                r.expiring_sets, r.expiring_keys, r.bytes_per_expiring_set, r.expiry_device_bytes
            );
            println!(
                "after plain SETs: {} expired entries dropped, live bytes {} -> {}",
                r.expired_entries_dropped, r.live_bytes_before, r.live_bytes_after
            );
            println!(
                "FLUSHALL of {} keys: {:.3} s, {} device bytes",
                r.flushall_keys, r.flushall_s, r.flushall_device_bytes
            );
            write_json(&r, json)?;
        }
        Bench::SmallValues { run } => {
            let json = run.json;
            let rows = small_values::SmallValuesBench {
                quick: run.quick,
                scratch: run.scratch,
                lightstore: run.lightstore,
            }
            .run()?;
            small_values::print(&rows);
            write_json(&rows, json)?;
        }
        Bench::Net {
            run,
            requests,
            repeat,
        } => {
            let json = run.json;
            let bench = net::NetBench {
                quick: run.quick,
                scratch: run.scratch,
                lightstore: run.lightstore,
                requests,
                repeat,
            };
            emit(&bench.run()?, json)?;
        }
        Bench::All {
            quick,
            out,
            scratch,
            data_mib,
            lightstore,
            system,
            skip_extras,
            repeat,
        } => {
            let bench = all::AllBench {
                quick,
                scratch,
                data_mib,
                lightstore,
                only: system,
                extras: !skip_extras,
                repeat: repeat.unwrap_or(if quick { 1 } else { all::DEFAULT_REPEAT }),
            };
            let res = bench.run()?;
            for path in all_report::write_outputs(&res, &out)? {
                println!("wrote {}", path.display());
            }
            println!("bench all took {:.0} s", res.seconds);
        }
        Bench::RunOverwrite {
            system,
            device_mib,
            fill_percent,
            times,
            cache_mib,
            same_space_as,
            dir,
            json,
        } => {
            let same_space_as = match same_space_as {
                None => None,
                Some(path) => Some(serde_json::from_str(
                    &std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?,
                )?),
            };
            extras::Overwrite {
                system,
                device_mib,
                fill_percent,
                times,
                cache_bytes: cache_mib.map(|m| m << 20),
                same_space_as,
                dir,
                json,
            }
            .run()?;
        }
        Bench::Sweep {
            quick,
            json,
            scratch,
            system,
        } => {
            let runs = sweep::Sweep {
                quick,
                scratch,
                systems: system,
            }
            .run()?;
            sweep::print(&runs);
            write_json(&runs, json)?;
        }
        Bench::RunOne {
            system,
            value_size,
            keys,
            cache_bytes,
            data_mib,
            dir,
            json,
            addr,
            pid,
        } => {
            all::RunOne {
                system,
                value_size,
                keys,
                cache_bytes,
                data_mib,
                dir,
                json,
                addr,
                pid,
            }
            .run()?;
        }
    }
    Ok(())
}
