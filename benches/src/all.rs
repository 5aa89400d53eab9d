//! `bench all`: the paper's workloads on every system side by side, in one run on this
//! machine — the raw device ceiling, LightStore in-process and over RESP, RocksDB (leveled
//! and BlobDB, WAL synchronous and off), fjall with key-value separation, and Redis
//! (in-memory and AOF everysec) — with `report.md`, `results.json` and plots under `--out`.
//!
//! Each (system, value size) runs in a child process of this binary (`run-one`), so every
//! system's CPU time, resident memory and bytes written are its own and a peer that fails
//! cannot take the run down: it becomes rows marked missing, with the reason. Servers are
//! started fresh for each value size and stopped (guards) however the run ends; Ctrl-C or
//! SIGTERM stops the child, the servers and removes the scratch directory.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::extras::{self, Extras};
use crate::kv::{KvUnderTest, Settled};
use crate::local::{self, LocalBench};
use crate::net::{self, Server};
use crate::report::Row;
use crate::workloads::{self, Ceiling, Shape, Workload, QD};

#[path = "all_overwrite.rs"]
mod overwrite;
#[path = "all_rows.rs"]
mod rows;
pub(crate) use rows::read_ceiling;
use rows::{add_ratios, describe_systems, device_rows, median_rows, missing_rows};

/// Value sizes measured, largest first.
pub const VALUE_SIZES: [usize; 3] = [8192, 1024, 100];
/// Data set per value size in `--quick` runs, MiB.
const QUICK_DATA_MIB: u64 = 16;
/// Passes over the systems of a full run (`--repeat`): the issue's "at least 3 repetitions
/// per row".
pub const DEFAULT_REPEAT: usize = 3;
/// Data set per value size in full runs, MiB.
const FULL_DATA_MIB: u64 = 1024;
/// Keys per value size at most, `--quick`.
const QUICK_MAX_KEYS: u64 = 16_384;
/// Keys per value size at most, full run.
const FULL_MAX_KEYS: u64 = 1_000_000;
/// The peers' block (and blob) caches are this fraction of the data set, so reads reach the
/// device.
const CACHE_FRACTION: u64 = 16;

/// The drive's value cache (its default, `--value-cache-size 64MiB`), bytes.
const DRIVE_VALUE_CACHE: u64 = 64 << 20;
/// When every RocksDB row's write clock stops.
const ROCKSDB_TIMED_UNTIL: &str =
    "a memtable flush and the compactions it triggers (waited for at most 120 s)";
/// Where every RocksDB row reads from.
const ROCKSDB_READS_FROM: &str = "device (direct I/O) behind a block cache of 1/16 of the data plus LightStore's keytable DRAM, index and filter blocks held beside it (as LightStore's keytables and blooms); one MultiGet per batch (no async_io in this RocksDB 7.8; it may still read one file's blocks in parallel through MultiRead): fewer reads in flight than LightStore's 32";

/// Set by SIGINT / SIGTERM: stop the child and the servers, clean up, exit.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

fn interrupted() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// How a system is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// An engine in the child's process.
    InProcess,
    /// The drive over RESP; `plp`: `--durability plp` (acknowledged once in its DRAM and
    /// write buffer, pages landing after), else the durable mode (`sync`).
    Drive { plp: bool },
    /// `redis-server` over RESP.
    Redis { aof: bool },
}

/// One system of the comparison.
#[derive(Debug, Clone, Copy)]
pub struct System {
    /// Row name.
    pub name: &'static str,
    access: Access,
    /// Needs the `peers` feature (RocksDB, fjall).
    peer: bool,
    /// Where its reads are served from.
    pub reads_from: &'static str,
    /// When a write workload's timed section ends (issue 18: "every system's timed section
    /// ends when its data is durable and its background work has settled, or each row says
    /// it does not").
    pub timed_until: &'static str,
}

/// Every system, LightStore first.
pub const SYSTEMS: [System; 11] = [
    System {
        name: "lightstore-local",
        access: Access::InProcess,
        peer: false,
        reads_from: "device (io_uring O_DIRECT) behind a value cache of 1/16 of the data (the peers' block cache); keytables in DRAM",
        timed_until: "its maintenance settled (no flush, compaction or GC due, the thread idle); values durable at acknowledgement",
    },
    System {
        name: PLP,
        access: Access::InProcess,
        peer: false,
        reads_from: "as lightstore-local; writes acknowledged once in the memtable, before their pages land, without a device flush (power-protected DRAM and write cache, the paper's card)",
        timed_until: "its maintenance settled (as lightstore-local); pages acknowledged from DRAM may still be landing (at most the write pipeline's bound)",
    },
    System {
        name: "lightstore-net",
        access: Access::Drive { plp: false },
        peer: false,
        reads_from: "device (io_uring O_DIRECT) behind the drive's 64 MiB value cache; keytables in DRAM",
        timed_until: "the last reply: the drive's background maintenance is not waited for (RESP has no command for it)",
    },
    System {
        name: NET_PLP,
        access: Access::Drive { plp: true },
        peer: false,
        reads_from: "as lightstore-net; writes acknowledged once in the drive's DRAM and write buffer, before their pages land (`--durability plp`: power-protected DRAM, the paper's card), the match of in-memory redis-server",
        timed_until: "the last reply: the drive's pages may still be landing and its maintenance is not waited for",
    },
    System {
        name: "rocksdb-leveled/wal-sync",
        access: Access::InProcess,
        peer: true,
        reads_from: ROCKSDB_READS_FROM,
        timed_until: ROCKSDB_TIMED_UNTIL,
    },
    System {
        name: "rocksdb-leveled/no-wal",
        access: Access::InProcess,
        peer: true,
        reads_from: ROCKSDB_READS_FROM,
        timed_until: ROCKSDB_TIMED_UNTIL,
    },
    System {
        name: "rocksdb-blobdb/wal-sync",
        access: Access::InProcess,
        peer: true,
        reads_from: ROCKSDB_READS_FROM,
        timed_until: ROCKSDB_TIMED_UNTIL,
    },
    System {
        name: "rocksdb-blobdb/no-wal",
        access: Access::InProcess,
        peer: true,
        reads_from: ROCKSDB_READS_FROM,
        timed_until: ROCKSDB_TIMED_UNTIL,
    },
    System {
        name: "fjall-kvsep",
        access: Access::InProcess,
        peer: true,
        reads_from: "OS page cache (no direct I/O in fjall; its files are dropped from the cache before each read workload); a batch's keys read one after another: 4 reads in flight, not LightStore's 32",
        timed_until: "a memtable flush; compactions that follow are not waited for (fjall has no wait for them)",
    },
    System {
        name: "redis",
        access: Access::Redis { aof: false },
        peer: false,
        reads_from: "DRAM (in-memory server, no persistence)",
        timed_until: "the last reply (nothing persisted)",
    },
    System {
        name: "redis-aof-everysec",
        access: Access::Redis { aof: true },
        peer: false,
        reads_from: "DRAM (in-memory server; AOF fsync'd every second)",
        timed_until: "the last reply; the AOF is fsync'd up to a second later",
    },
];

/// LightStore's device (in-process and the drive's): three times the data set, at least
/// 1 GiB, so the workloads' overwrites (about twice the data set) run before garbage
/// collection starts — as the peers, which have the whole file system.
fn device_mib(data_mib: u64) -> u64 {
    (3 * data_mib).max(1024)
}

/// The raw device's row name.
pub const DEVICE: &str = "device/file";

/// LightStore in-process in plp mode (`EngineConfig::ack_from_dram`, the drive's
/// `--durability plp`): a batch is acknowledged once in the memtable, before its pages land,
/// as the peers without a WAL acknowledge at their memtable insert. `lightstore-local` is the durable mode (a device flush before each
/// acknowledgement), the match of the peers with a synced WAL.
pub const PLP: &str = "lightstore-local/plp";

/// The drive over RESP in plp mode (`--durability plp`): the match of in-memory
/// redis-server, which the RESP targets are judged against. `lightstore-net` is the durable
/// mode (a device flush before each acknowledgement).
pub const NET_PLP: &str = "lightstore-net/plp";

fn system(name: &str) -> anyhow::Result<System> {
    SYSTEMS
        .into_iter()
        .find(|s| s.name == name)
        .with_context(|| format!("unknown system `{name}`"))
}

/// One latency CDF (a row's batches).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cdf {
    /// System.
    pub system: String,
    /// Workload.
    pub workload: String,
    /// Value size, bytes.
    pub value_size: u32,
    /// `[µs, fraction]` points.
    pub points: Vec<[f64; 2]>,
}

/// What a `run-one` child writes.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ChildOutput {
    rows: Vec<Row>,
    cdfs: Vec<Cdf>,
    /// LightStore-Local's keytable DRAM once its memtable is flushed (the engine's
    /// `keytable_dram_bytes`): the DRAM the peers of the same pass get on top of their cache.
    #[serde(default)]
    keytable_dram_bytes: Option<u64>,
}

/// Settings of `bench all`.
#[derive(Debug, Clone)]
pub struct AllBench {
    /// Small data sets (16 MiB per value size: about two minutes with the extras).
    pub quick: bool,
    /// Scratch directory (a subdirectory is made and removed).
    pub scratch: PathBuf,
    /// Data set per value size, MiB.
    pub data_mib: Option<u64>,
    /// The drive binary (default: next to this one).
    pub lightstore: Option<PathBuf>,
    /// Only systems whose names contain one of these.
    pub only: Vec<String>,
    /// Also run the extras: the latency breakdown, the ablation and the sustained overwrite
    /// (`crate::extras`).
    pub extras: bool,
    /// Times each (system, value size) is measured; the passes are interleaved (every system
    /// once, then every system again), so a drift of the host's disk spreads over all systems
    /// rather than landing on one. Each row is then the median run (see [`median_rows`]).
    pub repeat: usize,
}

/// Everything a finished run produced.
pub struct Results {
    /// Every row, device rows first.
    pub rows: Vec<Row>,
    /// Latency CDFs of the measured rows.
    pub cdfs: Vec<Cdf>,
    /// The device ceiling (measured before the systems; the ratios use it).
    pub ceiling: Ceiling,
    /// The random-read ceiling is fio's, which read faster than the load generator
    /// ([`read_ceiling`]).
    pub read_ceiling_from_fio: bool,
    /// The device ceiling measured again after the systems (this host's disk speed drifts).
    pub ceiling_after: Option<Ceiling>,
    /// fio's four patterns on the same file system, right after the load generator's
    /// ceiling; the reason when fio could not run.
    pub fio: Result<crate::fio::FioCeilings, String>,
    /// Keys loaded per value size.
    pub keys: Vec<(usize, u64)>,
    /// Data set per value size, MiB.
    pub data_mib: u64,
    /// Whether it was a `--quick` run.
    pub quick: bool,
    /// Whether the peers were compiled in.
    pub peers_built: bool,
    /// Wall time of the run, seconds.
    pub seconds: f64,
    /// Drive capacity used for LightStore-Net.
    pub drive_capacity: String,
    /// The extras (latency breakdown, ablation, sustained overwrite), unless skipped.
    pub extras: Option<Extras>,
    /// The commit the run measured (see [`commit_id`]).
    pub commit: String,
    /// The harness's command line, as run.
    pub command: String,
    /// The machine: cores, RAM, CPU model, kernel, and the block device under the scratch
    /// directory (see [`machine`]).
    pub machine: String,
    /// Passes over the systems (each row's repetitions, where every pass measured it).
    pub repeat: usize,
}

/// The checked-out commit (`git rev-parse`), marked `-dirty` when tracked files differ from
/// it, or `unknown` outside a git checkout: every report says what it measured.
pub fn commit_id() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(id) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{id}-dirty")
            } else {
                id
            }
        }
        None => "unknown".into(),
    }
}

/// The machine a run measured: cores, RAM, CPU model, kernel release, and the block device
/// under `scratch` (where every system's files lived).
pub fn machine(scratch: &Path) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or_else(|| "? GiB".into(), |kb| format!("{:.0} GiB", kb / 1048576.0));
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".into(), |k| k.trim().to_string());
    let disk = crate::procfs::BlockDevMeter::for_dir(scratch)
        .map_or_else(|e| format!("no block device ({e:#})"), |m| m.describe());
    format!("{cores} cores, {ram} RAM, {cpu}, Linux {kernel}, scratch on {disk}")
}

/// Removes the scratch directory of the run when dropped.
struct ScratchGuard(PathBuf);

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        if let Some(parent) = self.0.parent() {
            // Only if it is empty now (it may be the user's directory).
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Kills a child when dropped (it may already have exited).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

impl AllBench {
    fn data_mib(&self) -> u64 {
        self.data_mib
            .unwrap_or(if self.quick {
                QUICK_DATA_MIB
            } else {
                FULL_DATA_MIB
            })
            .max(8)
    }

    fn keys(&self, value_size: usize) -> u64 {
        let cap = if self.quick {
            QUICK_MAX_KEYS
        } else {
            FULL_MAX_KEYS
        };
        ((self.data_mib() << 20) / value_size as u64).clamp(u64::from(QD), cap)
    }

    fn device_mib(&self) -> u64 {
        device_mib(self.data_mib())
    }

    /// The drive's device, the same size as LightStore-Local's.
    fn drive_capacity(&self) -> String {
        format!("{}MiB", self.device_mib())
    }

    fn local(&self, scratch: &Path) -> LocalBench {
        LocalBench {
            quick: self.quick,
            scratch: scratch.to_path_buf(),
            data_mib: Some(self.data_mib()),
            device_mib: Some(self.device_mib()),
            only: Vec::new(),
            plp: false,
        }
    }

    fn selected(&self, s: &System) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| s.name.contains(o.as_str()))
    }

    /// Refuses a scratch file system without room for the largest thing a step keeps there
    /// at once (the drive's reserved device, or the local device at three times the data),
    /// plus a margin.
    fn check_space(&self) -> anyhow::Result<()> {
        let need_mib = self.device_mib() * 3 / 2 + 512;
        let free = crate::procfs::free_bytes(&self.scratch)?;
        if free < need_mib << 20 {
            bail!(
                "the scratch directory {} has {} MiB free; bench all needs {need_mib} MiB there \
                 (pass --scratch DIR on a larger file system, or a smaller --data-mib)",
                self.scratch.display(),
                free >> 20
            );
        }
        Ok(())
    }

    /// Runs every system and value size; writes nothing (see [`crate::all_report::write_outputs`]).
    ///
    /// # Errors
    /// When the scratch directory is unusable, the device ceiling cannot be measured, or the
    /// run is interrupted.
    pub fn run(&self) -> anyhow::Result<Results> {
        let started = Instant::now();
        install_signal_handlers();
        std::fs::create_dir_all(&self.scratch)
            .with_context(|| format!("creating {}", self.scratch.display()))?;
        let run_dir = self.scratch.join(format!("all-{}", std::process::id()));
        std::fs::create_dir_all(&run_dir)
            .with_context(|| format!("creating {}", run_dir.display()))?;
        let _guard = ScratchGuard(run_dir.clone());
        self.check_space()?;

        let systems: Vec<System> = SYSTEMS.into_iter().filter(|s| self.selected(s)).collect();
        let extra_steps = if self.extras {
            1 + 2 + extras::ABLATIONS.len() + extras::OVERWRITE_SYSTEMS.len() + 1
        } else {
            0
        };
        let steps = 1 + systems.len() * VALUE_SIZES.len() * self.repeat.max(1) + extra_steps;
        let multi = MultiProgress::new();
        let bar = multi.add(ProgressBar::new(steps as u64));
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let say = |msg: String| {
            if bar.is_hidden() {
                eprintln!("{msg}");
            } else {
                bar.println(msg);
            }
        };

        bar.set_message("device ceiling (io_uring O_DIRECT file, 8 KiB, depth 32)");
        let local = self.local(&run_dir);
        let ceiling = local.ceiling(local::FILE)?;
        say(format!(
            "device ceiling: {:.0} sequential 8 KiB writes/s, {:.0} random 8 KiB reads/s",
            ceiling.write_ops, ceiling.read_ops
        ));
        bar.set_message(format!(
            "fio ceilings (io_uring O_DIRECT, 8 KiB, depth {QD})"
        ));
        let fio = crate::fio::ceilings(&run_dir.join("fio-ceiling.img"), local.data_bytes(), QD);
        match &fio {
            Ok(f) => say(format!(
                "fio: {:.0} sequential writes/s, {:.0} random writes/s, {:.0} sequential \
                 reads/s, {:.0} random reads/s",
                f.seq_write.iops, f.rand_write.iops, f.seq_read.iops, f.rand_read.iops
            )),
            Err(e) => say(format!("fio ceilings missing: {e}")),
        }
        bar.inc(1);
        let (ceiling, read_ceiling_from_fio) = read_ceiling(ceiling, &fio);

        let mut rows = device_rows(&ceiling);
        let mut cdfs = Vec::new();
        let log = run_dir.join("child.log");
        let repeat = self.repeat.max(1);
        // Each (system, value size)'s passes, in the order measured, and its last failure.
        let mut passes: Vec<(usize, usize, Vec<ChildOutput>, Option<String>)> = systems
            .iter()
            .enumerate()
            .flat_map(|(i, _)| VALUE_SIZES.iter().map(move |&vs| (i, vs, Vec::new(), None)))
            .collect();
        // LightStore's keytable DRAM per value size, from the pass's LightStore-Local run:
        // the peers after it get as much again for their block cache (issue 18).
        let mut keytable_dram: std::collections::HashMap<usize, u64> =
            std::collections::HashMap::new();
        for pass in 0..repeat {
            for (i, vs, outs, failed) in &mut passes {
                let s = &systems[*i];
                interrupted()?;
                let mut label = format!("{} {}", s.name, local::size_label(*vs));
                if repeat > 1 {
                    let _ = write!(label, " (pass {} of {repeat})", pass + 1);
                }
                bar.set_message(label.clone());
                let t0 = Instant::now();
                let extra = if s.peer {
                    keytable_dram.get(vs).copied().unwrap_or(0)
                } else {
                    0
                };
                let out = self.run_system(s, *vs, &run_dir, &log, &bar, None, extra);
                interrupted()?;
                match out {
                    Ok(o) => {
                        if let Some(kt) = o.keytable_dram_bytes {
                            keytable_dram.insert(*vs, kt);
                        }
                        let summary = ops_summary(&o.rows);
                        say(format!(
                            "{label}: {} ({:.1} s)",
                            summary,
                            t0.elapsed().as_secs_f64()
                        ));
                        outs.push(o);
                    }
                    Err(e) => {
                        say(format!("{label}: missing: {e:#}"));
                        *failed = Some(format!("{e:#}"));
                    }
                }
                bar.inc(1);
            }
        }
        for (i, vs, outs, failed) in passes {
            let s = &systems[i];
            if outs.is_empty() {
                let why = failed.unwrap_or_else(|| "not measured".into());
                rows.extend(missing_rows(s, vs, &why));
                continue;
            }
            let (r, c) = median_rows(outs);
            rows.extend(r);
            cdfs.extend(c);
        }
        bar.set_message("device ceiling again (the disk's speed drifts)");
        let ceiling_after = local.ceiling(local::FILE).ok();
        let extras = if self.extras {
            Some(self.run_extras(&run_dir, &log, &bar, &say)?)
        } else {
            None
        };
        bar.finish_with_message("done");
        describe_systems(&mut rows);
        add_ratios(&mut rows, &ceiling);
        Ok(Results {
            rows,
            cdfs,
            ceiling,
            read_ceiling_from_fio,
            ceiling_after,
            fio,
            keys: VALUE_SIZES.iter().map(|&v| (v, self.keys(v))).collect(),
            data_mib: self.data_mib(),
            quick: self.quick,
            peers_built: cfg!(feature = "peers"),
            seconds: started.elapsed().as_secs_f64(),
            drive_capacity: self.drive_capacity(),
            extras,
            commit: commit_id(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine: machine(&self.scratch),
            repeat,
        })
    }

    /// Requests per figure of the latency breakdown.
    fn qd1_requests(&self) -> u64 {
        if self.quick {
            2_000
        } else {
            20_000
        }
    }

    /// The sustained overwrite's device (MiB) and its overwrites (times the device).
    fn overwrite_shape(&self) -> (u64, u64) {
        if self.quick {
            (
                extras::QUICK_OVERWRITE_DEVICE_MIB,
                extras::QUICK_OVERWRITE_TIMES,
            )
        } else {
            (extras::FULL_OVERWRITE_DEVICE_MIB, extras::OVERWRITE_TIMES)
        }
    }

    /// The latency breakdown, the ablation and the sustained overwrite, each part of it
    /// recorded as missing (with the reason) if it fails.
    fn run_extras(
        &self,
        run_dir: &Path,
        log: &Path,
        bar: &ProgressBar,
        say: &dyn Fn(String),
    ) -> anyhow::Result<Extras> {
        let t0 = Instant::now();
        let mut x = Extras {
            overwrite_device_mib: self.overwrite_shape().0,
            ..Extras::default()
        };
        interrupted()?;
        bar.set_message("latency breakdown at queue depth 1 (8 KiB GET and SET)");
        x.breakdown = self.breakdown(run_dir).map_err(|e| format!("{e:#}"));
        interrupted()?;
        match &x.breakdown {
            Ok(b) => {
                for o in &b.ops {
                    say(format!(
                        "breakdown {} (mean µs): network {:.0}, KV server {:.0}, engine {:.0}, device {:.0} (LightStore-Net {:.0})",
                        o.op,
                        o.parts_mean[0],
                        o.parts_mean[1],
                        o.parts_mean[2],
                        o.parts_mean[3],
                        o.net.mean
                    ));
                }
            }
            Err(e) => say(format!("breakdown: missing: {e}")),
        }
        bar.inc(1);

        let net = system("lightstore-net")?;
        // The baseline runs first and again last: the two bound this host's drift.
        let runs = std::iter::once((None, extras::ablation_system(None)))
            .chain(
                extras::ABLATIONS
                    .iter()
                    .map(|f| (Some(*f), extras::ablation_system(Some(f)))),
            )
            .chain(std::iter::once((None, extras::BASELINE_AGAIN.to_string())));
        for (feature, name) in runs {
            interrupted()?;
            bar.set_message(format!("{name} (LightStore-Net, 8K)"));
            let out = self.run_system(&net, extras::VALUE_SIZE, run_dir, log, bar, feature, 0);
            interrupted()?;
            match out {
                Ok(o) => {
                    let summary = ops_summary(&o.rows);
                    say(format!("{name}: {}", summary));
                    for mut r in o.rows {
                        r.system = name.clone();
                        r.reads_from = Some(net.reads_from.to_string());
                        x.ablation.push(r);
                    }
                }
                Err(e) => {
                    say(format!("{name}: missing: {e:#}"));
                    for w in Workload::ALL {
                        let mut r = Row::missing(&name, w.name(), QD, format!("{e:#}"));
                        r.value_size = Some(extras::VALUE_SIZE as u32);
                        x.ablation.push(r);
                    }
                }
            }
            bar.inc(1);
        }
        extras::add_baseline_ratios(&mut x.ablation);

        self.overwrites(&mut x, run_dir, log, bar, say)?;
        x.seconds = t0.elapsed().as_secs_f64();
        Ok(x)
    }

    /// The breakdown's four measurements, in this process (the drive in its own): the raw
    /// device, LightStore-Local, LightStore-Net and PING, at queue depth 1 with 8 KiB values.
    fn breakdown(&self, run_dir: &Path) -> anyhow::Result<extras::Breakdown> {
        let n = self.qd1_requests();
        let vs = extras::VALUE_SIZE;
        let keys = self.keys(vs);
        let value: Vec<u8> = (0..vs).map(|i| (i * 13) as u8).collect();
        let local = self.local(run_dir);
        let dev = local.device(local::FILE, "qd1")?;
        let device = extras::device_qd1(dev.as_ref(), n);
        drop(dev);
        local.cleanup(local::FILE, "qd1");
        let device = device?;

        let dev = local.device(local::FILE, "engine")?;
        let engine = lsm::Engine::open(
            dev as Arc<dyn hwftl_sim::AppendDevice>,
            lsm::EngineConfig::default(),
        )?;
        let kv = crate::kv::LocalEngine {
            engine: &engine,
            engine_counts_writes: true,
        };
        workloads::run(
            &kv,
            Workload::SSet,
            keys,
            keys,
            &value,
            Shape::in_process(vs),
        )?;
        let in_process = extras::get_set_qd1(&kv, keys, n, &value);
        engine.close()?;
        local.cleanup(local::FILE, "engine");
        let in_process = in_process?;

        let dir = run_dir.join("breakdown-drive");
        std::fs::create_dir_all(&dir)?;
        let server = net::start_drive(
            &net::lightstore_bin(self.lightstore.as_deref())?,
            &dir,
            "none",
            &self.drive_capacity(),
            &[],
            self.server_log(run_dir)?,
        )?;
        let kv = crate::resp::RespServer {
            addr: server.addr,
            pid: server.pid(),
        };
        workloads::run(&kv, Workload::SSet, keys, keys, &value, Shape::resp())?;
        let (get, _) = extras::get_set_qd1(&kv, keys, n, &value)?;
        let ping = extras::ping_qd1(&kv, n)?;
        let (_, set) = extras::get_set_qd1(&kv, keys, n, &value)?;
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(extras::breakdown(
            device,
            in_process,
            (get, set),
            ping,
            n,
            keys,
        ))
    }

    fn server_log(&self, run_dir: &Path) -> anyhow::Result<Stdio> {
        Ok(std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(run_dir.join("server.log"))?
            .into())
    }

    /// One system at one value size: its server (if any) and a `run-one` child. `ablate`:
    /// the drive's `--ablate` feature; `cache_extra`: bytes added to the peers' cache
    /// (LightStore's keytable DRAM, measured in the same pass).
    #[allow(clippy::too_many_arguments)]
    fn run_system(
        &self,
        s: &System,
        value_size: usize,
        run_dir: &Path,
        log: &Path,
        bar: &ProgressBar,
        ablate: Option<&str>,
        cache_extra: u64,
    ) -> anyhow::Result<ChildOutput> {
        if s.peer && !cfg!(feature = "peers") {
            bail!(
                "this harness was built without the `peers` feature (RocksDB, fjall); \
                 `cargo xtask bench all` builds it with them"
            );
        }
        let dir = run_dir.join(s.name.replace('/', "-"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let server_log = || self.server_log(run_dir);
        let server: Option<Server> = match s.access {
            Access::InProcess => None,
            Access::Drive { plp } => {
                let mut extra: Vec<&str> = ablate.map(|a| vec!["--ablate", a]).unwrap_or_default();
                if plp {
                    extra.extend(["--durability", "plp"]);
                }
                let log_len = std::fs::metadata(run_dir.join("server.log")).map_or(0, |m| m.len());
                match net::start_drive(
                    &net::lightstore_bin(self.lightstore.as_deref())?,
                    &dir,
                    "none",
                    &self.drive_capacity(),
                    &extra,
                    server_log()?,
                ) {
                    Ok(srv) => Some(srv),
                    Err(e) => {
                        // The drive's own reason (its `Error:` line), when it printed one.
                        let text = std::fs::read(run_dir.join("server.log")).unwrap_or_default();
                        let tail = String::from_utf8_lossy(
                            text.get(log_len as usize..).unwrap_or_default(),
                        )
                        .to_string();
                        match tail.lines().rev().find_map(|l| l.strip_prefix("Error: ")) {
                            Some(why) => bail!("the drive refused to start: {why}"),
                            None => return Err(e),
                        }
                    }
                }
            }
            Access::Redis { aof } => {
                if !net::have("redis-server") {
                    bail!("redis-server is not installed (Debian redis-server)");
                }
                Some(net::start_redis(&dir, aof, server_log()?)?)
            }
        };
        let json = dir.join("rows.json");
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("run-one")
            .env("RUST_LIB_BACKTRACE", "0")
            .args(["--system", s.name])
            .args(["--value-size", &value_size.to_string()])
            .args(["--keys", &self.keys(value_size).to_string()])
            .args([
                "--cache-bytes",
                &(self.cache_bytes(value_size) + cache_extra).to_string(),
            ])
            .args(["--data-mib", &self.data_mib().to_string()])
            .arg("--dir")
            .arg(&dir)
            .arg("--json")
            .arg(&json);
        if let Some(srv) = &server {
            cmd.args(["--addr", &srv.addr.to_string()])
                .args(["--pid", &srv.pid().to_string()]);
        }
        let res = run_child(
            cmd,
            log,
            bar,
            format!("{} {}", s.name, local::size_label(value_size)),
        );
        drop(server);
        res?;
        let text = std::fs::read_to_string(&json)
            .with_context(|| format!("reading {}", json.display()))?;
        let out: ChildOutput = serde_json::from_str(&text)?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(out)
    }

    /// The cache for values of `value_size`: a sixteenth of the keys and values loaded, at
    /// least 1 MiB (LightStore-Local's value cache; the peers get LightStore's keytable DRAM
    /// on top, measured in the same pass).
    fn cache_bytes(&self, value_size: usize) -> u64 {
        let data = self.keys(value_size) * (16 + value_size as u64);
        (data / CACHE_FRACTION).max(1 << 20)
    }
}

/// Runs a child of this binary (`cmd`) to the end, its stderr into `log`; a line `workload
/// NAME` on its stdout shows in the progress bar after `label`. Fails with the child's error
/// when it fails, and at once when the run is interrupted (the child is killed).
fn run_child(mut cmd: Command, log: &Path, bar: &ProgressBar, label: String) -> anyhow::Result<()> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(log)?;
    let mut child = ChildGuard(
        cmd.stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .context("starting the run-one child")?,
    );
    let stdout = child.0.stdout.take().context("no child stdout")?;
    let current = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (bar, current) = (bar.clone(), current.clone());
        let label = label.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(w) = line.strip_prefix("workload ") {
                    bar.set_message(format!("{label}: {w}"));
                    if let Ok(mut c) = current.lock() {
                        *c = w.to_string();
                    }
                }
            }
        })
    };
    let status = loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        if let Some(st) = child.0.try_wait()? {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = reader.join();
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        // The error the child printed, else its last lines.
        let why = text
            .lines()
            .find_map(|l| l.strip_prefix("Error: "))
            .map(str::to_string)
            .unwrap_or_else(|| {
                let last: Vec<&str> = text.lines().rev().take(3).collect();
                last.into_iter().rev().collect::<Vec<_>>().join(" | ")
            });
        let at = current.lock().map(|c| c.clone()).unwrap_or_default();
        bail!("the run failed ({status}) in {at}: {why}");
    }
    Ok(())
}

/// Settings of one `run-one` child.
#[derive(Debug, Clone)]
pub struct RunOne {
    /// System name (one of [`SYSTEMS`]).
    pub system: String,
    /// Value size, bytes.
    pub value_size: usize,
    /// Keys loaded (S-SET) and operations per workload.
    pub keys: u64,
    /// Block / blob cache of the peers, bytes.
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    pub cache_bytes: u64,
    /// Data set of the run, MiB (LightStore-Local's device is three times that).
    pub data_mib: u64,
    /// Directory for the system's files.
    pub dir: PathBuf,
    /// Where to write the rows.
    pub json: PathBuf,
    /// A RESP server's address.
    pub addr: Option<std::net::SocketAddr>,
    /// A RESP server's process.
    pub pid: Option<u32>,
}

impl RunOne {
    /// Runs the five workloads on the system and writes the rows and CDFs.
    ///
    /// # Errors
    /// When the system cannot be opened or fails.
    pub fn run(&self) -> anyhow::Result<()> {
        let s = system(&self.system)?;
        // Every system's write amplification from the same meter: the block device below
        // the scratch file system (its data lives under `dir`, a server's too).
        if let Err(e) = workloads::use_disk_meter(&self.dir) {
            eprintln!("no block-device meter: {e:#}");
        }
        let out = match s.access {
            Access::InProcess if s.name == "lightstore-local" || s.name == PLP => {
                let bench = LocalBench {
                    quick: true,
                    scratch: self.dir.clone(),
                    data_mib: Some(self.data_mib),
                    device_mib: Some(device_mib(self.data_mib)),
                    only: Vec::new(),
                    plp: false,
                };
                let dev = bench.device(local::FILE, "engine")?;
                // The same DRAM for values as the peers' block cache.
                let engine = lsm::Engine::open(
                    dev.clone() as Arc<dyn hwftl_sim::AppendDevice>,
                    lsm::EngineConfig {
                        value_cache_bytes: self.cache_bytes,
                        flush_writes: s.name != PLP,
                        ack_from_dram: s.name == PLP,
                        ..lsm::EngineConfig::default()
                    },
                )?;
                let kv = crate::kv::LocalEngine {
                    engine: &engine,
                    engine_counts_writes: false,
                };
                let beside = || crate::device_kv::DeviceReads::written(dev.clone());
                let mut out =
                    self.workloads(&kv, Shape::in_process(self.value_size), Some(&beside))?;
                // Every key in keytables (the memtable written out), untimed: the DRAM the
                // peers get on top of their cache.
                engine.flush()?;
                out.keytable_dram_bytes = Some(engine.stats().keytable_dram_bytes);
                engine.close()?;
                out
            }
            Access::InProcess => self.peer(&s)?,
            Access::Drive { .. } | Access::Redis { .. } => {
                let kv = crate::resp::RespServer {
                    addr: self.addr.context("--addr is needed for a server")?,
                    pid: self.pid.context("--pid is needed for a server")?,
                };
                self.workloads(&kv, Shape::resp(), None)?
            }
        };
        std::fs::write(&self.json, serde_json::to_string(&out)?)
            .with_context(|| format!("writing {}", self.json.display()))
    }

    #[cfg(feature = "peers")]
    fn peer(&self, s: &System) -> anyhow::Result<ChildOutput> {
        use crate::peers::{Fjall, Rocks, RocksLayout};
        let shape = Shape::in_process(self.value_size);
        let db = self.dir.join("db");
        let cache = self.cache_bytes as usize;
        let (layout, wal) = match s.name {
            "rocksdb-leveled/wal-sync" => (RocksLayout::Leveled, true),
            "rocksdb-leveled/no-wal" => (RocksLayout::Leveled, false),
            "rocksdb-blobdb/wal-sync" => (RocksLayout::Blob, true),
            "rocksdb-blobdb/no-wal" => (RocksLayout::Blob, false),
            "fjall-kvsep" => {
                return self.workloads(&Fjall::open(&db, self.cache_bytes)?, shape, None)
            }
            other => bail!("no in-process peer `{other}`"),
        };
        self.workloads(&Rocks::open(&db, layout, wal, cache)?, shape, None)
    }

    #[cfg(not(feature = "peers"))]
    fn peer(&self, s: &System) -> anyhow::Result<ChildOutput> {
        bail!("{} needs the `peers` feature", s.name)
    }

    /// Runs every workload on `kv`. With `beside` (LightStore in-process), R-GET is
    /// preceded by the same reads of the engine's own device with no engine in between
    /// (`Row::device_reads_beside`; a failure there is logged, not fatal).
    fn workloads(
        &self,
        kv: &dyn KvUnderTest,
        shape: Shape,
        beside: Option<&dyn Fn() -> anyhow::Result<crate::device_kv::DeviceReads>>,
    ) -> anyhow::Result<ChildOutput> {
        let access = system(&self.system)?.access;
        let value: Vec<u8> = (0..self.value_size)
            .map(|i| {
                (i as u64)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .rotate_left(17) as u8
            })
            .collect();
        let mut out = ChildOutput::default();
        for w in Workload::ALL {
            println!("workload {}", w.name());
            // The drive counts the value bytes it copies (INFO `value_bytes_copied`).
            let copied = || {
                self.addr
                    .filter(|_| matches!(access, Access::Drive { .. }))
                    .and_then(|a| crate::resp::info_field(a, "stats", "value_bytes_copied").ok())
            };
            let copied0 = copied();
            let ops = w.ops(self.keys);
            let device_reads_beside = match beside {
                Some(reads) if w == Workload::RGet => {
                    match reads().and_then(|d| workloads::run(&d, w, self.keys, ops, &value, shape))
                    {
                        Ok(m) => Some(m.ops_per_sec),
                        Err(e) => {
                            eprintln!("the device's reads beside R-GET failed: {e:#}");
                            None
                        }
                    }
                }
                _ => None,
            };
            let m = workloads::run(kv, w, self.keys, ops, &value, shape)?;
            let copied1 = copied();
            let batch = match w {
                Workload::SSet | Workload::RSet => shape.write_batch,
                _ => shape.read_batch,
            };
            let mut r = Row::measured(
                &self.system,
                w.name(),
                shape.clients * batch as u32,
                m.ops_per_sec,
                m.ops_per_sec * self.value_size as f64 / 1e6,
                m.p50_us,
                m.p99_us,
            );
            r.p999_us = Some(m.p999_us);
            r.max_us = Some(m.max_us);
            r.read_write_p999_us = m.read_write_p999_us;
            r.host_stalls = m.host_stalls;
            r.value_size = Some(self.value_size as u32);
            r.write_amp = m.write_amp;
            r.write_amp_disk = m.write_amp_disk;
            r.device_reads_beside = device_reads_beside;
            r.cache_bytes = match access {
                Access::InProcess => Some(self.cache_bytes),
                Access::Drive { .. } => Some(DRIVE_VALUE_CACHE),
                Access::Redis { .. } => None,
            };
            r.cpu_s_per_mop = m.cpu_s_per_mop;
            r.rss_mb = m.rss_mb;
            if m.settled == Settled::LimitHit {
                r.timed_until = Some(Settled::LIMIT_HIT_NOTE.to_string());
            }
            r.connections = Some(shape.clients);
            r.pipeline = Some(batch as u32);
            r.mean_us = Some(m.mean_us);
            if let (Some(a), Some(b)) = (copied0, copied1) {
                r.value_bytes_copied_per_op = Some(b.saturating_sub(a) as f64 / ops.max(1) as f64);
            }
            // The drive's compactions (the metadata-compaction ablation's cost).
            if let (Access::Drive { .. }, Some(c)) = (access, &m.engine_counters) {
                let n = |k: &str| c.get(k).copied().unwrap_or(0);
                r.compactions = Some((n("compactions"), n("compactions_without_room_to_move")));
            }
            r.engine_counters = m.engine_counters;
            out.cdfs.push(Cdf {
                system: self.system.clone(),
                workload: w.name().to_string(),
                value_size: self.value_size as u32,
                points: m.cdf,
            });
            out.rows.push(r);
        }
        Ok(out)
    }
}

/// "workload ops/s" of each row, for the progress log.
fn ops_summary(rows: &[Row]) -> String {
    rows.iter()
        .map(|r| format!("{} {:.0}", r.workload, r.ops_per_sec))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[path = "all_tests.rs"]
mod tests;
