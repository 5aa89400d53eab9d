//! The sustained overwrite of `bench all`'s extras: one `run-overwrite` child per system of
//! [`extras::OVERWRITE_SYSTEMS`], then the same-space run ([`extras::SAME_SPACE_SYSTEM`]) when
//! BlobDB held more space than LightStore's device.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use indicatif::ProgressBar;

use super::{interrupted, run_child, AllBench};
use crate::extras::{self, Extras, OverwriteRun};

impl AllBench {
    /// Runs every sustained overwrite into `x.overwrite`, one progress step each and one for
    /// the same-space run (run or not).
    ///
    /// # Errors
    /// When the run is interrupted or a file of the run directory cannot be written.
    pub(super) fn overwrites(
        &self,
        x: &mut Extras,
        run_dir: &Path,
        log: &Path,
        bar: &ProgressBar,
        say: &dyn Fn(String),
    ) -> anyhow::Result<()> {
        for sys in extras::OVERWRITE_SYSTEMS {
            interrupted()?;
            bar.set_message(format!(
                "sustained overwrite: {sys} ({} MiB device, {}x overwritten)",
                x.overwrite_device_mib,
                self.overwrite_shape().1
            ));
            let t = Instant::now();
            let run = self.run_overwrite(sys, None, run_dir, log, bar);
            interrupted()?;
            x.overwrite.push(overwrite_outcome(sys, run, t, say));
            bar.inc(1);
        }
        // The same workload in the space BlobDB held, when it held more than LightStore's
        // device: LightStore plp on a device of BlobDB's peak space, with its keys and
        // overwrites (see `extras::SAME_SPACE_SYSTEM`).
        let mine = x
            .overwrite
            .iter()
            .find(|o| o.system == "lightstore-local/plp" && o.missing.is_none())
            .and_then(|o| o.peak_footprint_bytes)
            .unwrap_or(0);
        let blobdb = extras::blobdb_run(&x.overwrite).filter(|o| {
            o.peak_footprint_bytes
                .is_some_and(|b| extras::held_more_space(b, mine))
        });
        if let Some(peer) = blobdb {
            interrupted()?;
            bar.set_message(format!(
                "sustained overwrite: lightstore-local/plp in BlobDB's space ({} MiB)",
                peer.peak_footprint_bytes.unwrap_or(0) >> 20
            ));
            let peer_json = run_dir.join("overwrite-peer.json");
            std::fs::write(&peer_json, serde_json::to_string(peer)?)?;
            let t = Instant::now();
            let run =
                self.run_overwrite("lightstore-local/plp", Some(&peer_json), run_dir, log, bar);
            interrupted()?;
            x.overwrite
                .push(overwrite_outcome(extras::SAME_SPACE_SYSTEM, run, t, say));
        }
        bar.inc(1);
        Ok(())
    }

    /// One system's sustained overwrite in a `run-overwrite` child; `same_space_as`: the
    /// JSON of the run whose space, keys and overwrites it repeats (the same-space run).
    fn run_overwrite(
        &self,
        sys: &str,
        same_space_as: Option<&Path>,
        run_dir: &Path,
        log: &Path,
        bar: &ProgressBar,
    ) -> anyhow::Result<OverwriteRun> {
        if sys.starts_with("rocksdb") && !cfg!(feature = "peers") {
            bail!(
                "this harness was built without the `peers` feature (RocksDB, fjall); `cargo xtask bench all` builds it with them"
            );
        }
        let name = if same_space_as.is_some() {
            extras::SAME_SPACE_SYSTEM
        } else {
            sys
        };
        let dir = run_dir.join(format!("overwrite-{}", name.replace(['/', '@'], "-")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = dir.join("run.json");
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("run-overwrite")
            .env("RUST_LIB_BACKTRACE", "0")
            .args(["--system", sys])
            .args(["--times", &self.overwrite_shape().1.to_string()])
            .args(["--fill-percent", &extras::FILL_PERCENT.to_string()])
            .args(["--device-mib", &self.overwrite_shape().0.to_string()]);
        if let Some(peer) = same_space_as {
            cmd.arg("--same-space-as").arg(peer);
        }
        cmd.arg("--dir").arg(&dir).arg("--json").arg(&json);
        run_child(cmd, log, bar, format!("overwrite {sys}"))?;
        let text = std::fs::read_to_string(&json)
            .with_context(|| format!("reading {}", json.display()))?;
        let run: OverwriteRun = serde_json::from_str(&text)?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(run)
    }
}

/// A sustained-overwrite child's outcome as a run (a failure becomes a run with `missing`),
/// said on the progress bar's log.
fn overwrite_outcome(
    sys: &str,
    run: anyhow::Result<OverwriteRun>,
    started: Instant,
    say: &dyn Fn(String),
) -> OverwriteRun {
    let run = run.unwrap_or_else(|e| OverwriteRun {
        system: sys.to_string(),
        missing: Some(format!("{e:#}")),
        ..OverwriteRun::default()
    });
    match &run.missing {
        None => say(format!(
            "overwrite {sys}: {:.0} ops/s, final WA {:.2}, peak space {} MiB ({:.1} s)",
            run.ops_per_sec,
            run.final_wa,
            run.peak_footprint_bytes.unwrap_or(0) >> 20,
            started.elapsed().as_secs_f64()
        )),
        Some(e) => say(format!("overwrite {sys}: missing: {e}")),
    }
    run
}
