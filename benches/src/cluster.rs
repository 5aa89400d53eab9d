//! `cluster` benchmark: one, two and four drives on loopback as one Redis Cluster (a map that
//! splits the 16384 slots evenly), driven by `redis-benchmark --cluster` (plain
//! `redis-benchmark` for the one drive: it refuses `--cluster` with one node) with SET then GET of
//! 100-byte values over a key space of 100,000, 50 connections, pipeline 16; every figure
//! next to the one-drive cluster's of the same run, with the drives' CPU seconds per million
//! operations (all drives together).
//!
//! What it measures on a small host: every drive and `redis-benchmark` share the host's
//! cores (two here), so N drives do not get N times the CPU. The figures show what the
//! cluster protocol costs (slot routing, one connection per drive per client, replies from
//! N servers) and how the drives share the cores, not how separate machines would scale;
//! each row states the host's core count.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use kvproto::cluster::{even_ranges, ClusterMap, NodeSpec};

use crate::net::{free_port, lightstore_bin, parse_csv, start_drive_on, Server};
use crate::procfs::cpu_seconds;
use crate::report::Row;

/// Cluster sizes measured.
const SIZES: [usize; 3] = [1, 2, 4];
/// Value size, bytes.
const VALUE_SIZE: u32 = 100;
/// Keys `redis-benchmark -r` picks from.
const KEYSPACE: u64 = 100_000;
/// Connections and pipeline depth.
const CONNECTIONS: u32 = 50;
const PIPELINE: u32 = 16;
/// Each drive's device file (sparse).
const DRIVE_CAPACITY: &str = "2GiB";

/// The cluster benchmark's settings.
pub struct ClusterBench {
    /// Fewer requests (about a minute).
    pub quick: bool,
    /// Scratch directory for the drives' data.
    pub scratch: PathBuf,
    /// The `lightstore` binary (default: next to this one).
    pub lightstore: Option<PathBuf>,
    /// Requests per run (default 200,000 quick, 1,000,000 full).
    pub requests: Option<u64>,
}

/// Node id of drive `i`: 40 hex digits.
fn node_id(i: usize) -> String {
    format!("{:040x}", 0xc100 + i)
}

/// N drives serving one map, stopped when dropped.
struct Cluster {
    drives: Vec<Server>,
}

impl Cluster {
    fn start(bin: &Path, dir: &Path, n: usize) -> anyhow::Result<Cluster> {
        let ports = (0..n)
            .map(|_| free_port())
            .collect::<anyhow::Result<Vec<u16>>>()?;
        let nodes: Vec<NodeSpec> = even_ranges(n)
            .into_iter()
            .enumerate()
            .map(|(i, (a, b))| NodeSpec {
                id: node_id(i),
                addr: ([127, 0, 0, 1], ports[i]).into(),
                slots: vec![[u32::from(a), u32::from(b)]],
                replica_of: None,
            })
            .collect();
        let map = ClusterMap::new(1, nodes).context("the benchmark's cluster map")?;
        let mut drives = Vec::with_capacity(n);
        for (i, &port) in ports.iter().enumerate() {
            let home = dir.join(format!("drive-{i}"));
            std::fs::create_dir_all(&home)
                .with_context(|| format!("creating {}", home.display()))?;
            let map_path = home.join("cluster.toml");
            std::fs::write(&map_path, map.to_toml())
                .with_context(|| format!("writing {}", map_path.display()))?;
            let id = node_id(i);
            let map_arg = map_path.to_string_lossy().into_owned();
            let extra = [
                "--durability",
                "plp",
                "--cluster-config",
                &map_arg,
                "--cluster-node-id",
                &id,
            ];
            drives.push(start_drive_on(
                bin,
                &home,
                port,
                "none",
                DRIVE_CAPACITY,
                &extra,
                Stdio::inherit(),
            )?);
        }
        Ok(Cluster { drives })
    }

    fn cpu_seconds(&self) -> anyhow::Result<f64> {
        self.drives.iter().map(|d| cpu_seconds(d.pid())).sum()
    }
}

impl ClusterBench {
    fn requests(&self) -> u64 {
        self.requests
            .unwrap_or(if self.quick { 200_000 } else { 1_000_000 })
    }

    /// Runs every cluster size; returns the rows (`system` = `lightstore-cluster/N`).
    ///
    /// # Errors
    /// When a drive cannot start or `redis-benchmark` fails.
    pub fn run(&self) -> anyhow::Result<Vec<Row>> {
        if !crate::net::have("redis-benchmark") {
            bail!("redis-benchmark is not installed (Debian redis-tools)");
        }
        let bin = lightstore_bin(self.lightstore.as_deref())?;
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        let mut rows = Vec::new();
        for n in SIZES {
            let dir = self.scratch.join("cluster").join(n.to_string());
            let _ = std::fs::remove_dir_all(&dir);
            let cluster = Cluster::start(&bin, &dir, n)?;
            let system = format!("lightstore-cluster/{n}");
            for test in ["set", "get"] {
                let row = self.run_one(&cluster, &system, test, cores)?;
                eprintln!(
                    "{system} {}: {:.0} ops/s, {:.2} drive CPU s per million ops",
                    row.workload,
                    row.ops_per_sec,
                    row.cpu_s_per_mop.unwrap_or(0.0)
                );
                rows.push(row);
            }
            drop(cluster);
            let _ = std::fs::remove_dir_all(&dir);
        }
        let one = |w: &str| {
            rows.iter()
                .find(|r| r.system == "lightstore-cluster/1" && r.workload == w)
                .map(|r| r.ops_per_sec)
        };
        let ratios: Vec<Option<f64>> = rows
            .iter()
            .map(|r| one(&r.workload).map(|base| r.ops_per_sec / base))
            .collect();
        for (r, ratio) in rows.iter_mut().zip(ratios) {
            r.ratio_to_one_drive = ratio;
        }
        Ok(rows)
    }

    fn run_one(
        &self,
        cluster: &Cluster,
        system: &str,
        test: &str,
        cores: usize,
    ) -> anyhow::Result<Row> {
        let first = cluster.drives.first().context("no drive")?;
        let requests = self.requests();
        let cpu0 = cluster.cpu_seconds()?;
        let mut bench = Command::new("redis-benchmark");
        // redis-benchmark refuses `--cluster` with one node: the one drive (which owns
        // every slot) is driven as a plain server.
        if cluster.drives.len() > 1 {
            bench.arg("--cluster");
        }
        let out = bench
            .args(["-h", &first.addr.ip().to_string()])
            .args(["-p", &first.addr.port().to_string()])
            .args(["-c", &CONNECTIONS.to_string(), "-P", &PIPELINE.to_string()])
            .args(["-n", &requests.to_string(), "-r", &KEYSPACE.to_string()])
            .args(["-d", &VALUE_SIZE.to_string(), "--csv", "-t", test])
            .output()
            .context("running redis-benchmark --cluster")?;
        let cpu = cluster.cpu_seconds()? - cpu0;
        if !out.status.success() {
            bail!(
                "redis-benchmark --cluster failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let (rps, p50_ms, p99_ms) = parse_csv(&String::from_utf8_lossy(&out.stdout))?;
        let mut row = Row::measured(
            system,
            &test.to_uppercase(),
            CONNECTIONS * PIPELINE,
            rps,
            rps * f64::from(VALUE_SIZE) / 1e6,
            p50_ms * 1000.0,
            p99_ms * 1000.0,
        );
        row.value_size = Some(VALUE_SIZE);
        row.connections = Some(CONNECTIONS);
        row.pipeline = Some(PIPELINE);
        row.cpu_s_per_mop = Some(cpu / (requests as f64 / 1e6));
        row.host_cores = Some(cores as u32);
        Ok(row)
    }
}
