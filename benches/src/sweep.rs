//! `sweep` benchmark: how the cost of sustained random 8 KiB overwrites grows with the data
//! size and with the fill level, for LightStore in-process in plp mode and BlobDB without a
//! WAL (the pair `bench all`'s sustained overwrite compares; BlobDB needs the `peers`
//! feature).
//!
//! Two axes around one point, the *base* (data equal to the DRAM budget, 80% of the user
//! capacity live):
//! - **data size**: 0.25x, 1x and 4x [`DRAM_BUDGET_MIB`] of live data, at 80% fill;
//! - **fill level**: 50%, 80%, 90% and 95% of the user capacity live, at 1x. (A point
//!   where a system cannot load the keys is reported with its error: LightStore's user
//!   capacity counts its whole log records, and a load of 95% measured by
//!   `stored_record_bytes` ran past it in the first runs, so 90% is there too.)
//!
//! Each point is one `run-overwrite` child (as in `bench all`): S-SET loads the keys, then
//! random overwrites of three times the device capacity, in slices; ops/s over the run and
//! write amplification after its background work, from each system's own counters (`WA`)
//! and from the block device below the file system (`WA disk`, the same meter for both).
//! Both systems get the budget as cache DRAM (LightStore's value cache, BlobDB's block
//! cache), beside their default memtables. LightStore's device is sized so its user
//! capacity at the fill level holds the data; BlobDB writes the same keys to a file system
//! with room to spare (its space amplification is not bounded by a device here; `space MiB`
//! is the most each run's files held, [`crate::footprint::SpaceMeter`]).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::extras::{self, OverwriteRun, VALUE_SIZE};

/// The DRAM budget the data sizes are measured against, MiB.
pub const DRAM_BUDGET_MIB: u64 = 512;
/// Data sizes, in quarters of the budget.
const SIZE_QUARTERS: [u64; 3] = [1, 4, 16];
/// Fill levels, percent (90 beside the 95: see the module docs).
const FILLS: [u64; 4] = [50, 80, 90, 95];
/// The fill level of the size axis.
const BASE_FILL: u64 = 80;
/// Systems swept.
pub const SWEEP_SYSTEMS: [&str; 2] = ["lightstore-local/plp", "rocksdb-blobdb/no-wal"];

/// The sweep's settings.
pub struct Sweep {
    /// Only the smallest data size (0.25x), at the three fill levels.
    pub quick: bool,
    /// Directory for the systems' files.
    pub scratch: PathBuf,
    /// Systems (empty: [`SWEEP_SYSTEMS`]).
    pub systems: Vec<String>,
}

/// One point of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRun {
    /// Live data over the DRAM budget.
    pub data_over_dram: f64,
    /// Live data, MiB.
    pub data_mib: f64,
    /// Share of LightStore's user capacity live, percent.
    pub fill_percent: u64,
    /// LightStore's device, MiB.
    pub device_mib: u64,
    /// The run (its `missing` says why a system has no figures).
    pub run: OverwriteRun,
}

impl Sweep {
    /// Runs every point for every system.
    ///
    /// # Errors
    /// When a child cannot be started or its output read.
    pub fn run(&self) -> anyhow::Result<Vec<SweepRun>> {
        let systems: Vec<String> = if self.systems.is_empty() {
            SWEEP_SYSTEMS.iter().map(|s| s.to_string()).collect()
        } else {
            self.systems.clone()
        };
        let sizes: &[u64] = if self.quick {
            &SIZE_QUARTERS[..1]
        } else {
            &SIZE_QUARTERS
        };
        // (quarters of the budget, fill): the size axis at the base fill, then the fill
        // axis at 1x (the quick run: at the smallest size), each point once.
        let fill_size = if self.quick { sizes[0] } else { 4 };
        let mut points: Vec<(u64, u64)> = sizes.iter().map(|&q| (q, BASE_FILL)).collect();
        for f in FILLS {
            if !points.contains(&(fill_size, f)) {
                points.push((fill_size, f));
            }
        }
        let mut out = Vec::new();
        for sys in &systems {
            for &(quarters, fill) in &points {
                let data = DRAM_BUDGET_MIB * quarters / 4;
                let device_mib = device_for(data << 20, fill)?;
                println!("sweep: {sys} data {data} MiB, fill {fill}%, device {device_mib} MiB");
                let run = self.one(sys, device_mib, fill)?;
                let data_mib = (run.keys * (16 + VALUE_SIZE as u64)) as f64 / f64::from(1 << 20);
                out.push(SweepRun {
                    data_over_dram: data_mib / DRAM_BUDGET_MIB as f64,
                    data_mib,
                    fill_percent: fill,
                    device_mib,
                    run,
                });
            }
        }
        Ok(out)
    }

    /// One `run-overwrite` child; a system that fails becomes a run with `missing` set.
    fn one(&self, sys: &str, device_mib: u64, fill: u64) -> anyhow::Result<OverwriteRun> {
        let dir = self.scratch.join(format!(
            "sweep-{}-{device_mib}-{fill}",
            sys.replace('/', "-")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = dir.join("run.json");
        let out = Command::new(std::env::current_exe()?)
            .arg("run-overwrite")
            .args(["--system", sys])
            .args(["--device-mib", &device_mib.to_string()])
            .args(["--fill-percent", &fill.to_string()])
            .args(["--cache-mib", &DRAM_BUDGET_MIB.to_string()])
            .arg("--dir")
            .arg(&dir)
            .arg("--json")
            .arg(&json)
            .env("RUST_LIB_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .context("starting run-overwrite")?;
        let run = if out.status.success() {
            let text = std::fs::read_to_string(&json)
                .with_context(|| format!("reading {}", json.display()))?;
            serde_json::from_str(&text)?
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let why = stderr
                .lines()
                .find_map(|l| l.strip_prefix("Error: "))
                .unwrap_or("no error line");
            OverwriteRun {
                system: sys.into(),
                missing: Some(format!("run-overwrite failed ({}): {why}", out.status)),
                ..OverwriteRun::default()
            }
        };
        let _ = std::fs::remove_dir_all(&dir);
        Ok(run)
    }
}

/// The smallest LightStore device (MiB, a multiple of 8) whose user capacity at `fill`
/// percent holds `data` bytes of 8 KiB values.
///
/// # Errors
/// When no device up to 64 GiB does.
fn device_for(data: u64, fill: u64) -> anyhow::Result<u64> {
    if fill == 0 {
        bail!("a fill level of 0%");
    }
    let record = (16 + VALUE_SIZE) as u64;
    let holds = |mib: u64| -> anyhow::Result<bool> {
        let (_, _, _, keys) = extras::overwrite_sizes(mib, fill)?;
        Ok(keys * record >= data)
    };
    // User capacity grows with the device: double, then bisect on multiples of 8 MiB.
    let (mut lo, mut hi) = (8u64, 64u64);
    while !holds(hi)? {
        lo = hi;
        hi *= 2;
        if hi > 64 << 10 {
            bail!("no device up to 64 GiB holds {data} bytes at {fill}%");
        }
    }
    while hi - lo > 8 {
        let mid = (lo + hi) / 2 / 8 * 8;
        if mid <= lo || mid >= hi {
            break;
        }
        if holds(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

/// Prints the runs as a table.
pub fn print(runs: &[SweepRun]) {
    println!(
        "{:<24} {:>9} {:>9} {:>6} {:>10} {:>12} {:>13} {:>7} {:>8} {:>6} {:>10}",
        "system",
        "data/DRAM",
        "data MiB",
        "fill%",
        "device MiB",
        "load ops/s",
        "overwrite/s",
        "WA",
        "WA disk",
        "GC seg",
        "space MiB"
    );
    for r in runs {
        match &r.run.missing {
            Some(why) => println!(
                "{:<24} {:>9.2} {:>9.0} {:>6} {:>10} missing: {why}",
                r.run.system, r.data_over_dram, r.data_mib, r.fill_percent, r.device_mib
            ),
            None => println!(
                "{:<24} {:>9.2} {:>9.0} {:>6} {:>10} {:>12.0} {:>13.0} {:>7.2} {:>8} {:>6} {:>10}",
                r.run.system,
                r.data_over_dram,
                r.data_mib,
                r.fill_percent,
                r.device_mib,
                r.run.load_ops_per_sec,
                r.run.ops_per_sec,
                r.run.final_wa,
                r.run
                    .block_wa
                    .map_or_else(|| "-".to_string(), |w| format!("{w:.2}")),
                r.run
                    .gc_segments
                    .map_or_else(|| "-".to_string(), |g| g.to_string()),
                r.run
                    .peak_footprint_bytes
                    .map_or_else(|| "-".to_string(), |b| (b >> 20).to_string())
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_hold_their_data_and_grow_with_it() {
        let record = (16 + VALUE_SIZE) as u64;
        let small = device_for(128 << 20, 80).unwrap();
        let (_, _, _, keys) = extras::overwrite_sizes(small, 80).unwrap();
        assert!(keys * record >= 128 << 20);
        assert_eq!(small % 8, 0);
        // A fuller store needs a smaller device for the same data.
        assert!(device_for(128 << 20, 95).unwrap() <= small);
        assert!(device_for(128 << 20, 50).unwrap() > small);
        assert!(device_for(512 << 20, 80).unwrap() > small);
    }
}
