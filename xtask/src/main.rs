//! `cargo xtask`: the project's tasks.
//!
//! - `cargo xtask test [ARGS]`: installs the Debian tools the tests use when they are missing
//!   (`apt-get update` first), then runs every test of the workspace (`cargo test --workspace`).
//! - `cargo xtask bench device [--quick] [--json PATH]`: the device benchmark (needs fio).
//! - `cargo xtask bench local [--quick] [--json PATH]`: the engine in-process (Table 3).
//! - `cargo xtask bench net [--quick] [--json PATH]`: the drive over RESP next to Redis.
//! - `cargo xtask lint`: rustfmt check and clippy with warnings as errors.

use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

/// Debian packages the tests and benchmarks use, with a binary that shows each is installed.
const DEBIAN_TOOLS: &[(&str, &str)] = &[
    ("fio", "fio"),
    ("redis-cli", "redis-tools"),
    ("redis-benchmark", "redis-tools"),
    ("redis-server", "redis-server"),
];

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install missing test tools, then run every test of the workspace.
    Test {
        /// Passed to `cargo test` (e.g. a test name filter, or `-- --nocapture`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run a benchmark (release build).
    Bench {
        /// Which benchmark: device, local, net.
        which: String,
        /// Passed to the harness (`--quick`, `--json PATH`, ...).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// rustfmt check and clippy (warnings are errors).
    Lint,
}

fn have(binary: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {binary} >/dev/null 2>&1"))
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs the missing Debian tools. Failing to install is reported, not fatal: the tests
/// that need a tool say so and skip.
fn ensure_debian_tools() {
    let missing: Vec<&str> = DEBIAN_TOOLS
        .iter()
        .filter(|(bin, _)| !have(bin))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return;
    }
    if !have("apt-get") {
        eprintln!("xtask: apt-get not found; cannot install {missing:?}");
        return;
    }
    let sudo = if nix_is_root() {
        vec![]
    } else {
        vec!["sudo", "-n"]
    };
    eprintln!("xtask: installing {missing:?} from Debian");
    let run = |args: &[&str]| {
        let mut argv: Vec<&str> = sudo.clone();
        argv.extend_from_slice(args);
        Command::new(argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !run(&["apt-get", "update", "-qq"]) {
        eprintln!("xtask: apt-get update failed");
    }
    let mut install = vec!["apt-get", "install", "-y", "-qq", "--no-install-recommends"];
    install.extend(missing.iter());
    if !run(&install) {
        eprintln!("xtask: could not install {missing:?}; tests needing them will skip");
    }
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn cargo(args: &[&str], extra: &[String]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(args)
        .args(extra)
        .status()
        .with_context(|| format!("running {cargo}"))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.task {
        Task::Test { args } => {
            ensure_debian_tools();
            cargo(&["test", "--workspace"], &args)
        }
        Task::Bench { which, args } => {
            ensure_debian_tools();
            match which.as_str() {
                "device" | "local" => cargo(
                    &[
                        "run",
                        "--release",
                        "-p",
                        "lightstore-benches",
                        "--",
                        which.as_str(),
                    ],
                    &args,
                ),
                "net" => {
                    // The drive binary the benchmark starts, next to the harness.
                    cargo(&["build", "--release", "-p", "firmware"], &[])?;
                    cargo(
                        &["run", "--release", "-p", "lightstore-benches", "--", "net"],
                        &args,
                    )
                }
                other => bail!("unknown benchmark `{other}` (available: device, local, net)"),
            }
        }
        Task::Lint => {
            cargo(&["fmt", "--all", "--", "--check"], &[])?;
            cargo(
                &[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ],
                &[],
            )
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}
