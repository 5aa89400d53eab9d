//! `cargo xtask fuzz`: the cargo-fuzz targets of `fuzz/`, each run for a bounded time.
//!
//! This module owns running the fuzzers. The targets (`fuzz/fuzz_targets/`) check the
//! properties in `fuzz/checks/` (the same code replays the seed corpus on stable in
//! `kvproto/tests/fuzz_corpus.rs` and `adapters/tests/fuzz_corpus.rs`). A run builds the
//! fuzz crate once with nightly (debug assertions and overflow checks on, AddressSanitizer)
//! in `<target>/fuzz`, then runs each target for the given seconds on its committed seeds
//! (`fuzz/corpus/<target>`, read only) and a scratch corpus the run grows
//! (`fuzz/corpus-run/<target>`, ignored by git). libFuzzer's output goes to
//! `<target>/fuzz/logs/<target>.log`; a crash fails the run, naming the reproducer that
//! libFuzzer saved under `fuzz/artifacts/<target>/`. cargo-fuzz is installed with
//! `cargo install --locked cargo-fuzz` when missing; if that, or the nightly toolchain,
//! is unavailable the command fails (it never skips).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// The fuzz targets, in the order they run.
pub const TARGETS: &[&str] = &["framer", "command", "cluster_map", "nbd"];

/// Longest one input may take before libFuzzer reports it as a hang (seconds).
const INPUT_TIMEOUT_SECS: u64 = 10;

/// `cargo` through rustup (so `+nightly` works), without the toolchain pin of the
/// stable cargo that runs xtask.
fn rustup_cargo() -> Command {
    let mut c = Command::new("cargo");
    c.env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC")
        .env_remove("CARGO");
    c
}

/// Whether `cmd` runs and succeeds (output discarded).
fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Makes sure the nightly toolchain and cargo-fuzz are there, installing what is missing.
fn ensure_tools() -> anyhow::Result<()> {
    if !succeeds(rustup_cargo().args(["+nightly", "--version"])) {
        eprintln!("xtask: installing the nightly toolchain (cargo-fuzz needs it)");
        let ok = Command::new("rustup")
            .args(["toolchain", "install", "nightly", "--profile", "minimal"])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            bail!("the nightly toolchain is missing and `rustup toolchain install nightly` failed: the fuzz targets cannot run");
        }
    }
    if !succeeds(rustup_cargo().args(["fuzz", "--version"])) {
        eprintln!("xtask: installing cargo-fuzz (cargo install --locked cargo-fuzz)");
        let ok = rustup_cargo()
            .args(["install", "--locked", "cargo-fuzz"])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            bail!("cargo-fuzz is missing and `cargo install --locked cargo-fuzz` failed: the fuzz targets cannot run");
        }
    }
    Ok(())
}

/// The workspace root (the parent of xtask's manifest directory).
fn root() -> anyhow::Result<PathBuf> {
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("no workspace root")?
        .to_path_buf())
}

/// The last line of `log` starting with `prefix`, if any.
fn last_line_with(log: &str, prefix: &str) -> Option<String> {
    log.lines()
        .rev()
        .find(|l| l.starts_with(prefix))
        .map(str::to_owned)
}

/// Builds the fuzz crate, then runs each of `targets` for `seconds`; fails when any target
/// crashes (a panic, a sanitizer report, a hang or running out of memory).
pub fn run(seconds: u64, targets: &[&str]) -> anyhow::Result<()> {
    ensure_tools()?;
    let root = root()?;
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("fuzz");
    let logs = target_dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let started = std::time::Instant::now();
    let built = rustup_cargo()
        .current_dir(&root)
        .args([
            "+nightly",
            "fuzz",
            "build",
            "--debug-assertions",
            "--target-dir",
        ])
        .arg(&target_dir)
        .status()
        .context("running cargo +nightly fuzz build")?;
    if !built.success() {
        bail!("building the fuzz targets failed ({built})");
    }
    eprintln!(
        "xtask: fuzz targets built in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let mut failed = Vec::new();
    for &t in targets {
        let scratch = root.join("fuzz").join("corpus-run").join(t);
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let log_path = logs.join(format!("{t}.log"));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        eprintln!(
            "xtask: fuzzing {t} for {seconds} s (log: {})",
            log_path.display()
        );
        let status = rustup_cargo()
            .current_dir(&root)
            .args([
                "+nightly",
                "fuzz",
                "run",
                "--debug-assertions",
                "--target-dir",
            ])
            .arg(&target_dir)
            .arg(t)
            .arg(&scratch)
            .arg(root.join("fuzz").join("corpus").join(t))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-timeout={INPUT_TIMEOUT_SECS}"))
            .arg("-print_final_stats=1")
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .with_context(|| format!("running cargo +nightly fuzz run {t}"))?;
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if status.success() {
            let done = last_line_with(&text, "Done ").unwrap_or_else(|| "done".into());
            let cov = last_line_with(&text, "stat::number_of_executed_units")
                .map(|l| format!(" ({})", l.trim()))
                .unwrap_or_default();
            eprintln!("xtask: {t}: {done}{cov}");
        } else {
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            for l in tail.iter().rev() {
                eprintln!("  {l}");
            }
            let artifact = last_line_with(&text, "artifact_prefix=")
                .or_else(|| {
                    text.lines()
                        .rev()
                        .find(|l| l.contains("Test unit written to"))
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            eprintln!("xtask: {t} FAILED ({status}) {artifact}");
            failed.push(t);
        }
    }
    if !failed.is_empty() {
        bail!(
            "fuzz target(s) {} found a crash; reproduce with `cd fuzz && cargo +nightly fuzz run -a <target> artifacts/<target>/<file>`, logs in {}",
            failed.join(", "),
            logs.display()
        );
    }
    Ok(())
}
