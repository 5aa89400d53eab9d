//! The test runner of `cargo xtask test`: every test binary of the workspace, several at a
//! time, longest first.
//!
//! `cargo test` runs one test binary after another, and the longest suites (the crash and
//! fault matrices, the YCSB end-to-end test) are each one test that keeps about one core
//! busy: on a 2-core host half of the machine idles for most of the run. This runner asks
//! cargo for the built test binaries (`cargo test --no-run --message-format=json`) and runs
//! them from a queue on `jobs` workers (default: the host's cores). Each binary runs as
//! `cargo test` would run it: in its package's directory, with `CARGO_MANIFEST_DIR` and
//! `CARGO_PKG_NAME` set, the test harness's own threads inside. Its output is buffered and
//! printed whole when it ends, so the log reads binary by binary; a failure does not stop
//! the others, and the run fails at the end naming every binary that failed.
//!
//! The queue is ordered by each binary's duration in the previous run on this machine
//! (`target/test-durations.tsv`), and on a fresh clone by [`SLOW_SUITES`]: the longest suite
//! must start first, or it ends alone on one core at the end of the run.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The jobs that take longest on a 2-core host (`package/target`, or a cargo job's label),
/// longest first, with their measured seconds: the order a fresh clone starts them in. Later
/// runs order by the durations they record, so a stale entry costs only one run's balance.
const SLOW_SUITES: &[(&str, u64)] = &[
    ("lsm/crash_concurrent", 265),
    ("xtask/xtask", 228),
    ("firmware/crash", 150),
    ("lsm/crash", 107),
    ("lsm/gc", 104),
    ("lsm/failed_layout", 89),
    ("lsm/value_cache", 49),
    ("firmware/server", 45),
    ("firmware/differential", 38),
];

/// Where the durations of the last run are kept (under the target directory).
const DURATIONS_FILE: &str = "test-durations.tsv";

/// One job of the run: a test binary, or a cargo command (the doc tests).
#[derive(Clone, Debug)]
pub(crate) struct Job {
    /// `package/target` for a test binary, a label for a cargo command.
    pub(crate) name: String,
    program: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
    env: Vec<(String, String)>,
}

impl Job {
    /// A cargo command run from `dir` as one job (it waits for cargo's build lock like any
    /// cargo command, so it may start later than it is picked).
    pub(crate) fn cargo(name: &str, dir: &Path, args: &[&str]) -> Job {
        Job {
            name: name.to_string(),
            program: PathBuf::from(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())),
            args: args.iter().map(|a| (*a).to_string()).collect(),
            dir: dir.to_path_buf(),
            env: Vec::new(),
        }
    }
}

/// Builds every test target of the workspace (`cargo test --workspace --no-run`) and returns
/// one job per test binary, as cargo reported them.
///
/// # Errors
/// When the build fails, or cargo's report cannot be read.
pub(crate) fn build_test_binaries(root: &Path) -> anyhow::Result<Vec<Job>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .current_dir(root)
        .args(["test", "--workspace", "--no-run"])
        .args(["--message-format", "json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {cargo}"))?;
    if !out.status.success() {
        bail!("cargo test --workspace --no-run failed ({})", out.status);
    }
    let mut jobs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let Some(job) = test_binary(&msg) {
            jobs.push(job);
        }
    }
    if jobs.is_empty() {
        bail!("cargo reported no test binary");
    }
    Ok(jobs)
}

/// The job for one of cargo's `compiler-artifact` messages, when it is a test binary.
fn test_binary(msg: &serde_json::Value) -> Option<Job> {
    if msg.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    if !msg.get("profile")?.get("test")?.as_bool()? {
        return None;
    }
    let exe = msg.get("executable")?.as_str()?;
    let manifest = Path::new(msg.get("manifest_path")?.as_str()?);
    let dir = manifest.parent()?.to_path_buf();
    let target = msg.get("target")?.get("name")?.as_str()?;
    // `path+file:///.../lsm#0.1.0` or `file:///.../lsm#name@0.1.0`: the package is the
    // directory's name unless the id names it.
    let id = msg.get("package_id")?.as_str()?;
    let package = id
        .rsplit_once('#')
        .and_then(|(_, v)| v.split_once('@').map(|(n, _)| n.to_string()))
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))?;
    Some(Job {
        name: format!("{package}/{target}"),
        program: PathBuf::from(exe),
        args: Vec::new(),
        env: vec![
            (
                "CARGO_MANIFEST_DIR".into(),
                dir.to_string_lossy().into_owned(),
            ),
            ("CARGO_PKG_NAME".into(), package),
        ],
        dir,
    })
}

/// Orders `jobs` longest first: by the durations recorded in `target`, else by
/// [`SLOW_SUITES`], the rest by name.
pub(crate) fn order(jobs: &mut [Job], target: &Path) {
    let recorded = read_durations(&target.join(DURATIONS_FILE));
    let guess = |name: &str| -> u64 {
        recorded.get(name).copied().unwrap_or_else(|| {
            SLOW_SUITES
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |s| s.1)
        })
    };
    jobs.sort_by(|a, b| {
        guess(&b.name)
            .cmp(&guess(&a.name))
            .then_with(|| a.name.cmp(&b.name))
    });
}

fn read_durations(path: &Path) -> HashMap<String, u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, secs) = l.split_once('\t')?;
            Some((name.to_string(), secs.trim().parse().ok()?))
        })
        .collect()
}

/// How one job ended.
struct Outcome {
    name: String,
    passed: bool,
    took: Duration,
}

/// Runs `jobs` in order on `workers` threads, each with the extra environment `env`, prints
/// each one's output when it ends, records the durations under `target` and fails when any
/// job failed.
///
/// # Errors
/// Naming every job that failed or could not start.
pub(crate) fn run(
    jobs: Vec<Job>,
    workers: usize,
    env: &[(&str, &Path)],
    target: &Path,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let total = jobs.len();
    let queue = Arc::new(Mutex::new(jobs.into_iter()));
    let env: Vec<(String, PathBuf)> = env
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.to_path_buf()))
        .collect();
    let (done_tx, done_rx) = mpsc::channel::<Outcome>();
    let print = Arc::new(Mutex::new(()));
    let mut threads = Vec::new();
    for _ in 0..workers.max(1) {
        let queue = queue.clone();
        let done_tx = done_tx.clone();
        let env = env.clone();
        let print = print.clone();
        threads.push(std::thread::spawn(move || loop {
            let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
            let Some(job) = next else { break };
            let outcome = run_one(&job, &env, &print);
            if done_tx.send(outcome).is_err() {
                break;
            }
        }));
    }
    drop(done_tx);
    let mut outcomes: Vec<Outcome> = done_rx.iter().collect();
    for t in threads {
        let _ = t.join();
    }
    outcomes.sort_by_key(|o| std::cmp::Reverse(o.took));
    let text: String = outcomes
        .iter()
        .map(|o| format!("{}\t{}\n", o.name, o.took.as_secs()))
        .collect();
    let _ = std::fs::write(target.join(DURATIONS_FILE), text);
    eprintln!(
        "xtask: {total} test job(s) on {workers} worker(s) in {:.0} s; the longest:",
        started.elapsed().as_secs_f64()
    );
    for o in outcomes.iter().take(8) {
        eprintln!("  {:>5.0} s  {}", o.took.as_secs_f64(), o.name);
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.passed)
        .map(|o| o.name.as_str())
        .collect();
    if outcomes.len() < total {
        bail!("{} test job(s) did not report", total - outcomes.len());
    }
    if !failed.is_empty() {
        bail!("test job(s) failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Runs one job with its output captured, then prints the output under a header.
fn run_one(job: &Job, env: &[(String, PathBuf)], print: &Mutex<()>) -> Outcome {
    let started = Instant::now();
    let result = Command::new(&job.program)
        .args(&job.args)
        .current_dir(&job.dir)
        .envs(job.env.iter().map(|(k, v)| (k, v)))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(collect);
    let took = started.elapsed();
    let _guard = print.lock();
    match result {
        Ok((status, out)) => {
            let verdict = if status.success() { "ok" } else { "FAILED" };
            eprintln!(
                "\n===== {} ({verdict}, {:.1} s) =====",
                job.name,
                took.as_secs_f64()
            );
            eprint!("{}", String::from_utf8_lossy(&out));
            Outcome {
                name: job.name.clone(),
                passed: status.success(),
                took,
            }
        }
        Err(e) => {
            eprintln!("\n===== {} (could not run: {e}) =====", job.name);
            Outcome {
                name: job.name.clone(),
                passed: false,
                took,
            }
        }
    }
}

/// Waits for `child`, with its stdout and stderr interleaved in one buffer as they came
/// (stderr is read on a thread of its own so that neither pipe can fill and block it).
fn collect(mut child: std::process::Child) -> std::io::Result<(std::process::ExitStatus, Vec<u8>)> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let mut readers = Vec::new();
    let pipes: [Option<Box<dyn std::io::Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ];
    for mut pipe in pipes.into_iter().flatten() {
        let out = out.clone();
        readers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Ok(mut o) = out.lock() {
                            o.extend_from_slice(&buf[..n]);
                        }
                    }
                }
            }
        }));
    }
    let status = child.wait()?;
    for r in readers {
        let _ = r.join();
    }
    let bytes = out.lock().map(|o| o.clone()).unwrap_or_default();
    Ok((status, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> Job {
        Job::cargo(name, Path::new("."), &[])
    }

    #[test]
    fn a_cargo_test_artifact_becomes_a_job_in_its_package_directory() {
        let msg: serde_json::Value = serde_json::from_str(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/lsm#0.1.0",
            "manifest_path":"/w/lsm/Cargo.toml","target":{"kind":["test"],"name":"crash"},
            "profile":{"test":true},"executable":"/w/target/debug/deps/crash-1"}"#,
        )
        .unwrap();
        let j = test_binary(&msg).unwrap();
        assert_eq!(j.name, "lsm/crash");
        assert_eq!(j.dir, Path::new("/w/lsm"));
        assert_eq!(j.program, Path::new("/w/target/debug/deps/crash-1"));
        let named: serde_json::Value = serde_json::from_str(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/benches#lightstore-benches@0.1.0",
            "manifest_path":"/w/benches/Cargo.toml","target":{"kind":["lib"],"name":"lightstore_benches"},
            "profile":{"test":true},"executable":"/w/target/debug/deps/x-2"}"#,
        )
        .unwrap();
        assert_eq!(
            test_binary(&named).unwrap().name,
            "lightstore-benches/lightstore_benches"
        );
    }

    #[test]
    fn artifacts_that_are_not_test_binaries_are_not_jobs() {
        for text in [
            r#"{"reason":"compiler-artifact","package_id":"p#1","manifest_path":"/w/a/Cargo.toml",
               "target":{"name":"a"},"profile":{"test":false},"executable":"/w/a"}"#,
            r#"{"reason":"compiler-artifact","package_id":"p#1","manifest_path":"/w/a/Cargo.toml",
               "target":{"name":"a"},"profile":{"test":true},"executable":null}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ] {
            let msg: serde_json::Value = serde_json::from_str(text).unwrap();
            assert!(test_binary(&msg).is_none(), "{text}");
        }
    }

    #[test]
    fn recorded_durations_order_the_queue_before_the_built_in_list() {
        let dir = std::env::temp_dir().join(format!("xtask-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut jobs = vec![job("b/quick"), job("lsm/crash_concurrent"), job("a/quick")];
        order(&mut jobs, &dir);
        let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["lsm/crash_concurrent", "a/quick", "b/quick"]);
        std::fs::write(dir.join(DURATIONS_FILE), "b/quick\t900\na/quick\t3\n").unwrap();
        order(&mut jobs, &dir);
        let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["b/quick", "lsm/crash_concurrent", "a/quick"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failing_job_fails_the_run_and_the_others_still_run() {
        let dir = std::env::temp_dir().join(format!("xtask-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("ran");
        let sh = |name: &str, script: &str| Job {
            name: name.into(),
            program: PathBuf::from("sh"),
            args: vec!["-c".into(), script.into()],
            dir: dir.clone(),
            env: Vec::new(),
        };
        let jobs = vec![
            sh("fails", "exit 3"),
            sh("writes", &format!("echo x > {}", marker.display())),
        ];
        let err = run(jobs, 1, &[], &dir).unwrap_err().to_string();
        assert!(err.contains("fails") && !err.contains("writes"), "{err}");
        assert!(marker.exists(), "the job after a failure still ran");
        assert!(read_durations(&dir.join(DURATIONS_FILE)).contains_key("writes"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
