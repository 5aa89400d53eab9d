//! `recovery` benchmark: how long the drive takes to serve again, per GiB of data, after
//! `kill -9` (its memtable's writes are then replayed from the value log: the unflushed
//! tail) and after a clean stop (SHUTDOWN closes the engine: nothing to replay), at two data
//! sizes, so the cost's growth shows: keytables are read whole (O(keytables)), the log only
//! from the last checkpoint (O(tail)).
//!
//! The drive runs on its own device file (`--device sim`, the file backend through io_uring,
//! O_DIRECT) with plp durability; keys are loaded with `redis-benchmark` (8 KiB values,
//! random keys); the time measured is from the process's start to its "ready" line (the
//! listening socket is bound first, so this is engine open, expiry index and the rest of the
//! start-up). The figures the drive reports about itself come from INFO (`live_bytes`,
//! `replayed_records`, `keytable_dram_bytes`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use serde::Serialize;

use crate::net::{info_u64, lightstore_bin, redis_benchmark, start_drive_on, Server};

/// Value size of the load, bytes.
const VALUE_SIZE: u64 = 8192;

/// The recovery benchmark's settings.
pub struct RecoveryBench {
    /// Smaller data sets (about a minute).
    pub quick: bool,
    /// Directory for the drives' data.
    pub scratch: PathBuf,
    /// The lightstore binary (default: next to this one).
    pub lightstore: Option<PathBuf>,
}

/// One restart.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryRow {
    /// `kill -9` or `clean`.
    pub stop: String,
    /// Data loaded, MiB (requested).
    pub data_mib: u64,
    /// Live bytes after the restart (INFO `live_bytes`), MiB.
    pub live_mib: f64,
    /// Seconds from the process's start to its ready line.
    pub ready_s: f64,
    /// Seconds per GiB of live data.
    pub s_per_gib: f64,
    /// Value-log records replayed at the open (INFO `replayed_records`).
    pub replayed_records: u64,
    /// DRAM of the keytables loaded (INFO `keytable_dram_bytes`), MiB.
    pub keytable_mib: f64,
}

impl RecoveryBench {
    /// Loads each data size, kills the drive, restarts it, stops it cleanly, restarts it.
    ///
    /// # Errors
    /// When the drive or redis-benchmark fails.
    pub fn run(&self) -> anyhow::Result<Vec<RecoveryRow>> {
        let bin = lightstore_bin(self.lightstore.as_deref())?;
        let sizes: &[u64] = if self.quick { &[64, 256] } else { &[256, 2048] };
        let mut rows = Vec::new();
        for &mib in sizes {
            let dir = self.scratch.join(format!("recovery-{mib}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            let capacity = format!("{}MiB", (mib * 3).max(1024));
            let extra = ["--durability", "plp"];
            let start = |dir: &std::path::Path| -> anyhow::Result<(Server, f64)> {
                let t = Instant::now();
                let s = start_drive_on(&bin, dir, 0, "none", &capacity, &extra, Stdio::null())?;
                Ok((s, t.elapsed().as_secs_f64()))
            };
            let (drive, _) = start(&dir)?;
            load(&drive, mib)?;
            drive.kill_hard();
            let (drive, secs) = start(&dir)?;
            rows.push(row(&drive, "kill -9", mib, secs)?);
            drop(drive);
            let (drive, secs) = start(&dir)?;
            rows.push(row(&drive, "clean", mib, secs)?);
            drop(drive);
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(rows)
    }
}

/// Writes about `mib` MiB of 8 KiB values under random keys (`redis-benchmark -r`: some keys
/// repeat, so a little less is live).
fn load(drive: &Server, mib: u64) -> anyhow::Result<()> {
    let n = (mib << 20) / VALUE_SIZE;
    let (requests, keys, size) = (n.to_string(), (n * 2).to_string(), VALUE_SIZE.to_string());
    redis_benchmark(
        drive,
        &[
            "-c", "50", "-P", "16", "-t", "set", "-q", "-n", &requests, "-r", &keys, "-d", &size,
        ],
    )?;
    Ok(())
}

/// The row of a restarted drive, from its INFO.
fn row(drive: &Server, stop: &str, mib: u64, ready_s: f64) -> anyhow::Result<RecoveryRow> {
    let field = |name: &str| info_u64(drive, "lsm", name);
    let live = field("live_bytes")? as f64;
    Ok(RecoveryRow {
        stop: stop.into(),
        data_mib: mib,
        live_mib: live / 1048576.0,
        ready_s,
        s_per_gib: ready_s / (live / 1073741824.0).max(1e-9),
        replayed_records: field("replayed_records")?,
        keytable_mib: field("keytable_dram_bytes")? as f64 / 1048576.0,
    })
}
