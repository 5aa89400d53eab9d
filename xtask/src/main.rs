//! `cargo xtask`: the project's tasks.
//!
//! - `cargo xtask test [--jobs N] [ARGS]`: installs the Debian tools the tests use when they
//!   are missing (`apt-get update` first), builds every test target of the workspace and runs
//!   the test binaries N at a time, longest first (see `testrun`), with the doc tests as one
//!   more job. With ARGS it is plain `cargo test --workspace ARGS`. The fuzz
//!   targets run in `cargo xtask fuzz` (their seed corpora are replayed by the stable tests).
//! - `cargo xtask fuzz [--seconds N] [--target NAME]`: the cargo-fuzz targets of `fuzz/`
//!   (nightly; cargo-fuzz installed if missing), each for N seconds (see `fuzz`).
//! - `cargo xtask bench device [--quick] [--json PATH]`: the device benchmark (needs fio).
//! - `cargo xtask bench local [--quick] [--json PATH]`: the engine in-process (Table 3).
//! - `cargo xtask bench net [--quick] [--json PATH]`: the drive over RESP next to Redis.
//! - `cargo xtask bench recovery [--quick] [--json PATH]`: the drive's restart time per GiB
//!   after `kill -9` and after a clean stop.
//! - `cargo xtask bench expiry [--quick] [--json PATH]`: device bytes of keys with deadlines
//!   (per SET EX, while they expire) and of FLUSHALL, and what compaction gives back.
//! - `cargo xtask bench small-values [--quick] [--json PATH]`: GET/HGET of small values held
//!   in their keytable entries against none held (value cache off): requests per second and
//!   device page reads per request.
//! - `cargo xtask bench sweep [--quick] [--json PATH]`: sustained overwrites of LightStore
//!   and BlobDB as data grows (0.25x, 1x, 4x a DRAM budget) and as the store fills (50%,
//!   80%, 90%, 95%).
//! - `cargo xtask bench all [--quick] [--out DIR]`: every system side by side (RocksDB, fjall,
//!   Redis, the device), with a report and plots.
//! - `cargo xtask lint`: rustfmt check, clippy and rustdoc (its broken links too) with
//!   warnings as errors.
//! - `cargo xtask cluster up N [--replicas R]` / `cargo xtask cluster down`: a local Redis
//!   Cluster of drives (see `cluster`).
//! - `cargo xtask ycsb --workload a..f [--drives N]`: the YCSB client with the LightStore
//!   binding (`adapters/ycsb`) against fresh drives (see `ycsb`).

mod cluster;
mod fuzz;
mod readme_figures;
mod sections;
mod testrun;
mod ycsb;

use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

/// Debian packages the tests and benchmarks use, with a binary that shows each is installed.
const DEBIAN_TOOLS: &[(&str, &str)] = &[
    ("fio", "fio"),
    ("redis-cli", "redis-tools"),
    ("redis-benchmark", "redis-tools"),
    ("redis-server", "redis-server"),
    // The block adapter's tests (adapters/tests): real NBD clients, and ext4 through FUSE.
    ("nbdinfo", "libnbd-bin"),
    ("nbdcopy", "libnbd-bin"),
    ("qemu-img", "qemu-utils"),
    ("qemu-io", "qemu-utils"),
    ("nbdfuse", "nbdfuse"),
    ("fusermount3", "fuse3"),
    // The YCSB end-to-end test: the binding builds with Maven and runs on a JDK.
    ("java", "default-jdk-headless"),
    ("mvn", "maven"),
    // `firmware/tests/deploy_files.rs` checks the sample systemd unit.
    ("systemd-analyze", "systemd"),
];

/// Python modules from Debian the tests use (Debian's `/usr/bin/python3`), with their
/// package: `firmware/tests/protocol.rs` drives the drive with redis-py.
const DEBIAN_PYTHON_MODULES: &[(&str, &str)] = &[("redis", "python3-redis")];

/// Set to `environment` to accept skips for what the machine cannot offer (FUSE, loop
/// devices) instead of failing the run (see [`check_skips`]).
const ALLOW_SKIPS_ENV: &str = "LIGHTSTORE_ALLOW_SKIPS";

/// Where the tests record what they skipped (see [`check_skips`]).
const SKIP_LOG_ENV: &str = "LIGHTSTORE_SKIP_LOG";

/// Records a skipped test in the skip log (`kind`: `tool` or `environment`), as the test
/// crates' helpers do.
#[cfg(test)]
pub(crate) fn record_skip(kind: &str, what: &str, why: &str) {
    eprintln!("SKIPPED ({kind}) {what}: {why}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        use std::io::Write as _;
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{kind}\txtask\t{what}\t{why}"));
    }
}

/// Lists what the tests skipped (cargo hides a passing test's output, so a skip would
/// otherwise look green) and fails when a test skipped for a missing tool: `cargo xtask
/// test` installs every tool, so such a skip means a suite did not run. Skips for what the
/// machine cannot offer (no FUSE, no loop devices) are listed and allowed.
fn check_skips(log: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        eprintln!("xtask: no test skipped");
        return Ok(());
    }
    eprintln!("xtask: {} test part(s) skipped:", lines.len());
    for l in &lines {
        eprintln!("  {}", l.replace('\t', " | "));
    }
    let tools = lines.iter().filter(|l| l.starts_with("tool\t")).count();
    if tools > 0 {
        bail!("{tools} test part(s) skipped for a missing tool: they did not run");
    }
    // A skip is a test that did not run: what the machine cannot offer (no FUSE, no loop
    // devices) fails the run too, unless the developer says so for this machine.
    if std::env::var(ALLOW_SKIPS_ENV).as_deref() != Ok("environment") {
        bail!(
            "{} test part(s) skipped for what this machine lacks: they did not run \
             ({ALLOW_SKIPS_ENV}=environment accepts that on a machine that cannot offer it)",
            lines.len()
        );
    }
    Ok(())
}

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
        /// Test binaries run at once (default: the host's cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Passed to `cargo test` (e.g. a test name filter, or `-- --nocapture`); with
        /// ARGS the binaries run one at a time through `cargo test`.
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
    /// rustfmt check, clippy and rustdoc (warnings are errors).
    Lint,
    /// A local Redis Cluster of drives: `up N [--replicas R]`, `down`.
    Cluster {
        #[command(subcommand)]
        task: cluster::ClusterTask,
    },
    /// YCSB workloads A-F through the LightStore binding against 1 or N fresh drives.
    Ycsb(Box<ycsb::YcsbArgs>),
    /// Run the cargo-fuzz targets (nightly) for a bounded time each; fails on any crash.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Only this target (framer, command, cluster_map, nbd).
        #[arg(long)]
        target: Option<String>,
    },
}

/// Whether `binary` is on the PATH.
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
    let mut missing: Vec<&str> = DEBIAN_TOOLS
        .iter()
        .filter(|(bin, _)| !have(bin))
        .map(|(_, pkg)| *pkg)
        .collect();
    missing.extend(
        DEBIAN_PYTHON_MODULES
            .iter()
            .filter(|(module, _)| !have_python_module(module))
            .map(|(_, pkg)| *pkg),
    );
    missing.dedup();
    apt_install(&missing);
}

/// Whether Debian's Python 3 (`/usr/bin/python3`, not a virtualenv's) imports `module`.
fn have_python_module(module: &str) -> bool {
    Command::new("/usr/bin/python3")
        .args(["-c", &format!("import {module}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs Debian packages (`apt-get update` first); failing is reported, not fatal.
fn apt_install(missing: &[&str]) {
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

/// The drive binary the adapters' tests start (see `adapters/tests/common`).
const DRIVE_BIN_ENV: &str = "LIGHTSTORE_BIN";

fn cargo(args: &[&str], extra: &[String]) -> anyhow::Result<()> {
    cargo_env(args, extra, &[])
}

/// [`cargo`] with environment variables for it and the tests it runs.
fn cargo_env(
    args: &[&str],
    extra: &[String],
    env: &[(&str, &std::path::Path)],
) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(args)
        .args(extra)
        .envs(env.iter().copied())
        .status()
        .with_context(|| format!("running {cargo}"))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// `cargo xtask bench all`: builds the drive and the harness with the `peers` feature
/// (RocksDB, fjall) in a target directory of their own (`target/bench-peers`: the default
/// build, its lock and `cargo test` never compile the peers), then runs the harness. Debian's
/// `librocksdb-dev` is linked when present (installed if missing), which spares the many
/// minutes of RocksDB's C++ build; bindgen needs libclang (`libclang-dev`).
/// `cargo xtask bench all`'s own flags (not passed to the harness): `--ycsb` runs the YCSB
/// section with `--quick` too, `--skip-ycsb` leaves it out of a full run, `--skip-cluster`
/// leaves out the cluster-scaling section, `--skip-net` the redis-benchmark section.
const YCSB_FLAG: &str = "--ycsb";
const SKIP_YCSB_FLAG: &str = "--skip-ycsb";
const SKIP_CLUSTER_FLAG: &str = "--skip-cluster";
/// Leaves out the redis-benchmark section (`lightstore-bench net`).
const SKIP_NET_FLAG: &str = "--skip-net";

fn bench_all(args: &[String]) -> anyhow::Result<()> {
    let with_ycsb = args.iter().any(|a| a == YCSB_FLAG);
    let skip_ycsb = args.iter().any(|a| a == SKIP_YCSB_FLAG);
    let skip_cluster = args.iter().any(|a| a == SKIP_CLUSTER_FLAG);
    let skip_net = args.iter().any(|a| a == SKIP_NET_FLAG);
    let args: Vec<String> = args
        .iter()
        .filter(|a| {
            *a != YCSB_FLAG
                && *a != SKIP_YCSB_FLAG
                && *a != SKIP_CLUSTER_FLAG
                && *a != SKIP_NET_FLAG
        })
        .cloned()
        .collect();
    let quick = args.iter().any(|a| a == "--quick");
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map_or_else(
            || std::path::PathBuf::from("target/bench/report"),
            std::path::PathBuf::from,
        );
    let harness = build_peers_harness()?;
    run_harness(&harness, "all", &args)?;
    if !skip_ycsb && (!quick || with_ycsb) {
        ycsb_section(&out, quick)?;
    }
    if !skip_cluster {
        sections::cluster_section(&out, &harness, quick)?;
    }
    if !skip_net {
        let repeat = args
            .iter()
            .position(|a| a == "--repeat")
            .and_then(|i| args.get(i + 1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        sections::net_section(&out, &harness, quick, repeat)?;
    }
    Ok(())
}

/// Builds the drive and the benchmark harness with the `peers` feature (RocksDB from Debian's
/// library, fjall) into `target/bench-peers`, installing the Debian packages that needs, and
/// returns the harness's path (`bench all`, `bench sweep`).
fn build_peers_harness() -> anyhow::Result<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("no workspace root")?
        .to_path_buf();
    let header = std::path::Path::new("/usr/include/rocksdb/c.h");
    let llvm = std::path::Path::new("/usr/lib/llvm-14/lib");
    let mut missing = Vec::new();
    if !header.exists() {
        missing.push("librocksdb-dev");
    }
    if !llvm.join("libclang.so").exists() {
        missing.push("libclang-dev");
    }
    // The report's PNG copies of its SVG plots.
    if !have("rsvg-convert") {
        missing.push("librsvg2-bin");
    }
    apt_install(&missing);
    let target = root.join("target").join("bench-peers");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(&cargo);
    build
        .current_dir(&root)
        .args(["build", "--release", "-p", "firmware"])
        .args(["-p", "lightstore-benches", "--features"])
        .arg("lightstore-benches/peers")
        .arg("--target-dir")
        .arg(&target);
    if header.exists() {
        build
            .env("ROCKSDB_LIB_DIR", "/usr/lib/x86_64-linux-gnu")
            .env("ROCKSDB_INCLUDE_DIR", "/usr/include");
    }
    if std::env::var_os("LIBCLANG_PATH").is_none() && llvm.exists() {
        build.env("LIBCLANG_PATH", llvm);
    }
    if !build.status().context("running cargo build")?.success() {
        bail!("building the harness with the peers failed");
    }
    Ok(target.join("release").join("lightstore-bench"))
}

/// Runs `lightstore-bench <bench> <args>` (the harness at `harness`) to its end.
///
/// # Errors
/// When it cannot start or fails.
pub(crate) fn run_harness(
    harness: &std::path::Path,
    bench: &str,
    args: &[String],
) -> anyhow::Result<()> {
    let status = Command::new(harness)
        .arg(bench)
        .args(args)
        .status()
        .with_context(|| format!("running lightstore-bench {bench}"))?;
    if !status.success() {
        bail!("lightstore-bench {bench} failed ({status})");
    }
    Ok(())
}

/// The report's YCSB section: workloads A-F through YCSB's stock redis binding against the
/// drive (plp) and redis-server (in memory) in turn (`cargo xtask ycsb --binding redis
/// --against both`), at two data sizes: one inside the drive's value cache (its default,
/// 64 MiB) and one more than four times its cache (a 4 MiB cache); a full run does each
/// workload three times on each side, in turn (the median ratio and its range). Each table
/// is written as `ycsb-<tag>.md` beside the report and appended to `report.md`.
fn ycsb_section(out: &std::path::Path, quick: bool) -> anyhow::Result<()> {
    // Records of ten 100-byte fields: ~1.1 KB each.
    let (small, large, large_cache) = if quick {
        (1_000, 4_000, "1MiB")
    } else {
        (5_000, 20_000, "4MiB")
    };
    let mut section = String::from(
        "\n## YCSB through its stock redis binding (`cargo xtask ycsb --binding redis --against both`) and through ours (`--binding lightstore --against drive`)\n\n\
         Our binding (`adapters/ycsb`) scans with the drive's `LS.RANGE`, which redis-server does \
         not have, so it runs against the drive alone (one run per workload); the stock binding \
         runs against both in turn.\n",
    );
    for (binding, against, records, cache, tag) in [
        ("redis", "both", small, None, "redis-binding-plp-fits-cache"),
        (
            "redis",
            "both",
            large,
            Some(large_cache),
            "redis-binding-plp-4x-cache",
        ),
        (
            "lightstore",
            "drive",
            small,
            None,
            "lightstore-binding-plp-fits-cache",
        ),
    ] {
        let args = ycsb::YcsbArgs {
            workload: "all".into(),
            drives: 1,
            records,
            operations: quick.then_some(2_000),
            repeat: if quick { 1 } else { 3 },
            threads: 4,
            binding: binding.into(),
            against: against.into(),
            durability: "plp".into(),
            value_cache_size: cache.map(String::from),
            out: Some(out.to_path_buf()),
            tag: Some(tag.into()),
            hosts: None,
            password_file: None,
            tls_ca_cert_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        };
        ycsb::run(&args).with_context(|| format!("YCSB, {records} records"))?;
        let file = out.join(format!("ycsb-{tag}.md"));
        let table = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        section.push('\n');
        section.push_str(&table.replacen("# YCSB", "### YCSB", 1));
    }
    let report = out.join("report.md");
    let mut text = std::fs::read_to_string(&report)
        .with_context(|| format!("reading {}", report.display()))?;
    text.push_str(&section);
    std::fs::write(&report, text).with_context(|| format!("writing {}", report.display()))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.task {
        Task::Test {
            jobs: jobs_flag,
            args,
        } => {
            ensure_debian_tools();
            let log = std::env::current_dir()?
                .join("target")
                .join("test-skips.log");
            let _ = std::fs::create_dir_all(log.parent().unwrap_or(std::path::Path::new(".")));
            let _ = std::fs::remove_file(&log);
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .context("no workspace root")?
                .to_path_buf();
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| root.join("target"), std::path::PathBuf::from);
            // The adapters' and xtask's tests start the drive binary that `cargo test
            // --workspace` built with the workspace's test features (LIGHTSTORE_BIN) instead
            // of building it again alone, which resolves features differently and rebuilt half
            // the dependency tree (minutes on two cores).
            let drive = std::path::absolute(target.join("debug").join("lightstore"))?;
            let env = [
                (SKIP_LOG_ENV, log.as_path()),
                (DRIVE_BIN_ENV, drive.as_path()),
            ];
            if !args.is_empty() {
                // A filter or harness flags: plain `cargo test`, one binary at a time.
                cargo(&["test", "--workspace", "--no-run"], &[])?;
                let tested = cargo_env(&["test", "--workspace"], &args, &env);
                let skips = check_skips(&log);
                tested?;
                return skips;
            }
            let mut jobs = testrun::build_test_binaries(&root)?;
            jobs.push(testrun::Job::cargo(
                "doc tests",
                &root,
                &["test", "--workspace", "--doc"],
            ));
            testrun::order(&mut jobs, &target);
            let workers = jobs_flag.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
            });
            let tested = testrun::run(jobs, workers, &env, &target);
            let skips = check_skips(&log);
            tested?;
            skips?;
            // The fuzz targets themselves (nightly, ASan: a cold build of their own dependency
            // tree costs several CPU-minutes) run in `cargo xtask fuzz`; the committed seed
            // corpora are replayed through the same checks by the stable tests above
            // (`kvproto/tests/fuzz_corpus.rs`, `adapters/tests/fuzz_corpus.rs`).
            Ok(())
        }
        Task::Fuzz { seconds, target } => match target {
            Some(t) => {
                let Some(&t) = fuzz::TARGETS.iter().find(|&&n| n == t) else {
                    bail!(
                        "unknown fuzz target `{t}` (available: {})",
                        fuzz::TARGETS.join(", ")
                    );
                };
                fuzz::run(seconds, &[t])
            }
            None => fuzz::run(seconds, fuzz::TARGETS),
        },
        Task::Bench { which, args } => {
            ensure_debian_tools();
            match which.as_str() {
                "device" | "local" | "net" | "cluster" | "recovery" | "expiry" | "small-values" => {
                    if matches!(
                        which.as_str(),
                        "net" | "cluster" | "recovery" | "expiry" | "small-values"
                    ) {
                        // The drive binary the benchmark starts, next to the harness.
                        cargo(&["build", "--release", "-p", "firmware"], &[])?;
                    }
                    cargo(
                        &[
                            "run",
                            "--release",
                            "-p",
                            "lightstore-benches",
                            "--",
                            which.as_str(),
                        ],
                        &args,
                    )
                }
                "all" => bench_all(&args),
                "sweep" => run_harness(&build_peers_harness()?, "sweep", &args),
                other => bail!(
                    "unknown benchmark `{other}` (available: device, local, net, cluster, recovery, expiry, small-values, sweep, all)"
                ),
            }
        }
        Task::Cluster { task } => cluster::run(task, cargo),
        Task::Ycsb(args) => ycsb::run(&args),
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
            )?;
            // Public docs that link to private or missing items are warnings to rustdoc.
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["doc", "--workspace", "--no-deps"])
                .env("RUSTDOCFLAGS", "-D warnings")
                .status()
                .context("running cargo doc")?;
            if !status.success() {
                bail!("cargo doc failed: {status}");
            }
            Ok(())
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
