//! The network benchmark: `redis-benchmark` (Debian redis-tools) against the drive (`sync`,
//! and `plp`: acknowledged without a device flush per write) and against `redis-server` (in-memory, and appendonly with `appendfsync everysec`) in the same
//! run with the same client settings. SET / GET / MSET / MGET (10 keys each) with 8 KiB and
//! 100 B values, 1 and 50 connections, pipeline 1 and 16. For every run it also reads the
//! server's CPU time and resident memory from `/proc`.
//!
//! Every server runs on this machine's loopback, and so does `redis-benchmark`: client and
//! server share the same cores, which the figures include.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use kvproto::{Client, Reply};

use crate::procfs::{cpu_seconds, rss_mb};
use crate::report::Row;

/// Keys per MSET / MGET request (what `redis-benchmark -t mset` sends).
const KEYS_PER_MULTI: u32 = 10;
/// Value sizes measured, in bytes.
const VALUE_SIZES: [u32; 2] = [8192, 100];
/// (connections, pipeline) pairs measured.
const CLIENT_SETTINGS: [(u32, u32); 4] = [(1, 1), (50, 1), (1, 16), (50, 16)];
/// How long a server may take to accept clients.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Capacity of the drive's device file (sparse).
const DRIVE_CAPACITY: &str = "8GiB";

/// One workload: its name and how `redis-benchmark` runs it.
#[derive(Clone, Copy)]
enum Workload {
    Set,
    Get,
    MSet,
    MGet,
}

impl Workload {
    const ALL: [Workload; 4] = [Workload::Set, Workload::Get, Workload::MSet, Workload::MGet];

    fn name(self) -> &'static str {
        match self {
            Workload::Set => "SET",
            Workload::Get => "GET",
            Workload::MSet => "MSET",
            Workload::MGet => "MGET",
        }
    }

    fn keys_per_op(self) -> u32 {
        match self {
            Workload::Set | Workload::Get => 1,
            Workload::MSet | Workload::MGet => KEYS_PER_MULTI,
        }
    }

    /// `redis-benchmark` arguments selecting the workload.
    fn args(self) -> Vec<String> {
        match self {
            Workload::Set => vec!["-t".into(), "set".into()],
            Workload::Get => vec!["-t".into(), "get".into()],
            Workload::MSet => vec!["-t".into(), "mset".into()],
            Workload::MGet => {
                let mut a = vec!["MGET".to_string()];
                a.extend((0..KEYS_PER_MULTI).map(|_| "key:__rand_int__".to_string()));
                a
            }
        }
    }
}

/// Which server a row measures.
#[derive(Clone)]
enum System {
    /// The drive on a NAND timing model (`none`: the file at its own speed), acknowledging
    /// writes once durable (`plp`: once on the device, its cache taken as power-protected).
    Drive {
        timing: &'static str,
        plp: bool,
    },
    Redis {
        aof: bool,
    },
}

impl System {
    fn name(&self) -> String {
        match self {
            System::Drive {
                timing: "none",
                plp: false,
            } => "lightstore/file".into(),
            System::Drive {
                timing: "none",
                plp: true,
            } => "lightstore/file-plp".into(),
            System::Drive { timing, plp: false } => format!("lightstore/{timing}"),
            System::Drive { timing, plp: true } => format!("lightstore/{timing}-plp"),
            System::Redis { aof: false } => "redis".into(),
            System::Redis { aof: true } => "redis-aof-everysec".into(),
        }
    }
}

/// A server process, stopped when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        // SIGTERM first so the drive closes its engine; SIGKILL if it does not stop.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server with SIGKILL (no clean shutdown: a crash as the server sees it).
    pub(crate) fn kill_hard(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn have(bin: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The network benchmark's settings.
pub struct NetBench {
    /// Small key spaces and request counts.
    pub quick: bool,
    /// Scratch directory for the servers' data.
    pub scratch: PathBuf,
    /// The `lightstore` binary (default: next to this one).
    pub lightstore: Option<PathBuf>,
    /// Requests per run at pipeline 1 with 50 connections (other settings scale from it).
    pub requests: Option<u64>,
    /// Passes over every system (each starts the servers afresh and loads them again): each
    /// row is then the pass with the median ops/s, with the range over the passes.
    pub repeat: usize,
}

impl NetBench {
    fn keyspace(&self, value_size: u32) -> u64 {
        match (self.quick, value_size >= 4096) {
            (true, true) => 4_000,
            (true, false) => 20_000,
            (false, true) => 100_000,
            (false, false) => 1_000_000,
        }
    }

    fn requests(&self, w: Workload, connections: u32, pipeline: u32) -> u64 {
        let base = self
            .requests
            .unwrap_or(if self.quick { 20_000 } else { 200_000 });
        // One connection without pipelining is latency-bound: a tenth as many requests.
        let n = if connections == 1 && pipeline == 1 {
            base / 10
        } else {
            base
        };
        (n / u64::from(w.keys_per_op())).max(100)
    }

    fn systems(&self) -> Vec<System> {
        // plp: writes persisted to the device without a flush per acknowledgement, the
        // like-for-like of redis-server's AOF without a per-write fsync.
        let mut v = vec![
            System::Drive {
                timing: "none",
                plp: false,
            },
            System::Drive {
                timing: "none",
                plp: true,
            },
        ];
        if !self.quick {
            v.push(System::Drive {
                timing: "paper-card",
                plp: false,
            });
        }
        v.push(System::Redis { aof: false });
        v.push(System::Redis { aof: true });
        v
    }

    fn start(&self, sys: &System) -> anyhow::Result<Server> {
        let dir = self.scratch.join("net").join(sys.name().replace('/', "-"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        match sys {
            System::Drive { timing, plp } => start_drive(
                &lightstore_bin(self.lightstore.as_deref())?,
                &dir,
                timing,
                DRIVE_CAPACITY,
                if *plp { &["--durability", "plp"] } else { &[] },
                Stdio::inherit(),
            ),
            System::Redis { aof } => start_redis(&dir, *aof, Stdio::inherit()),
        }
    }

    /// Runs every system and workload, `repeat` passes with the systems interleaved (every
    /// system once per pass); a system that cannot start gives missing rows. Each row is the
    /// pass with the median ops/s ([`median_rows`]); ratios to redis-server are of those.
    ///
    /// # Errors
    /// When the scratch directory cannot be used.
    pub fn run(&self) -> anyhow::Result<Vec<Row>> {
        std::fs::create_dir_all(&self.scratch)
            .with_context(|| format!("creating {}", self.scratch.display()))?;
        let repeat = self.repeat.max(1);
        let mut passes = Vec::with_capacity(repeat);
        for pass in 0..repeat {
            if repeat > 1 {
                eprintln!("pass {} of {repeat}", pass + 1);
            }
            passes.push(self.pass()?);
        }
        let mut rows = median_rows(&passes);
        add_redis_ratios(&mut rows);
        let _ = std::fs::remove_dir_all(self.scratch.join("net"));
        Ok(rows)
    }

    /// One pass over every system and workload.
    fn pass(&self) -> anyhow::Result<Vec<Row>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut rows = Vec::new();
        let bench_ok = have("redis-benchmark");
        for sys in self.systems() {
            let name = sys.name();
            let reason = if !bench_ok {
                Some("redis-benchmark is not installed (Debian redis-tools)".to_string())
            } else if matches!(sys, System::Redis { .. }) && !have("redis-server") {
                Some("redis-server is not installed (Debian redis-server)".to_string())
            } else {
                None
            };
            let server = match reason {
                Some(r) => Err(anyhow::anyhow!(r)),
                None => self.start(&sys),
            };
            let server = match server {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{name}: {e:#}");
                    for &v in &VALUE_SIZES {
                        for &(c, p) in &CLIENT_SETTINGS {
                            for w in Workload::ALL {
                                let mut r = Row::missing(&name, w.name(), c * p, format!("{e:#}"));
                                r.value_size = Some(v);
                                r.connections = Some(c);
                                r.pipeline = Some(p);
                                rows.push(r);
                            }
                        }
                    }
                    continue;
                }
            };
            for &v in &VALUE_SIZES {
                let keyspace = self.keyspace(v);
                eprintln!("{name}: loading {keyspace} keys of {v} B");
                if let Err(e) = rt.block_on(fill(server.addr, keyspace, v)) {
                    eprintln!("{name}: loading failed: {e:#}");
                }
                for &(c, p) in &CLIENT_SETTINGS {
                    for w in Workload::ALL {
                        let n = self.requests(w, c, p);
                        let row = match run_one(&server, &name, w, v, c, p, n, keyspace) {
                            Ok(r) => r,
                            Err(e) => {
                                let mut r = Row::missing(&name, w.name(), c * p, format!("{e:#}"));
                                r.value_size = Some(v);
                                r.connections = Some(c);
                                r.pipeline = Some(p);
                                r
                            }
                        };
                        eprintln!(
                            "{name} {} {v}B c{c} P{p}: {:.0} ops/s",
                            w.name(),
                            row.ops_per_sec
                        );
                        rows.push(row);
                    }
                }
            }
            drop(server);
        }
        Ok(rows)
    }
}

/// The passes' rows as one set: for each (system, command, value size, connections,
/// pipeline), the pass with the median ops/s (the lower middle one for an even count) stands
/// for it, with its own latencies and CPU, so every figure on a row comes from one run; with
/// more than one pass the row notes how many measured it and the smallest and largest ops/s.
/// A case a pass could not measure is judged on the passes that did.
fn median_rows(passes: &[Vec<Row>]) -> Vec<Row> {
    let same = |a: &Row, b: &Row| {
        a.system == b.system
            && a.workload == b.workload
            && a.value_size == b.value_size
            && a.connections == b.connections
            && a.pipeline == b.pipeline
    };
    let Some(first) = passes.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|row| {
            let mut measured: Vec<&Row> = passes
                .iter()
                .filter_map(|p| p.iter().find(|r| same(r, row)))
                .filter(|r| r.missing.is_none())
                .collect();
            measured.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            let Some(median) = measured.get(measured.len().saturating_sub(1) / 2) else {
                return row.clone();
            };
            let mut r = (*median).clone();
            if passes.len() > 1 {
                r.repetitions = Some(measured.len() as u32);
                r.ops_range = measured
                    .first()
                    .zip(measured.last())
                    .map(|(lo, hi)| (lo.ops_per_sec, hi.ops_per_sec));
            }
            r
        })
        .collect()
}

/// The `lightstore` binary: `given`, or the one next to this executable.
pub(crate) fn lightstore_bin(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe()?;
    let p = exe.with_file_name("lightstore");
    if !p.exists() {
        bail!(
            "{} not found (build it with `cargo build --release -p firmware`, or pass --lightstore)",
            p.display()
        );
    }
    Ok(p)
}

/// Starts the drive on a fresh simulated device of `capacity` in `dir` (`timing`: a timing
/// preset; `extra`: more flags, e.g. `--ablate zero-copy`); its log goes to `stderr`.
pub(crate) fn start_drive(
    bin: &Path,
    dir: &Path,
    timing: &str,
    capacity: &str,
    extra: &[&str],
    stderr: Stdio,
) -> anyhow::Result<Server> {
    start_drive_on(bin, dir, 0, timing, capacity, extra, stderr)
}

/// As [`start_drive`], listening on 127.0.0.1:`port` (0: any free port).
pub(crate) fn start_drive_on(
    bin: &Path,
    dir: &Path,
    port: u16,
    timing: &str,
    capacity: &str,
    extra: &[&str],
    stderr: Stdio,
) -> anyhow::Result<Server> {
    let mut child = Command::new(bin)
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--device", "sim", "--capacity", capacity])
        .args(["--timing", timing, "--data-dir"])
        .arg(dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(a) = line.strip_prefix("lightstore ready on ") {
                let _ = tx.send(a.trim().to_string());
            }
        }
    });
    let addr = match rx.recv_timeout(START_TIMEOUT) {
        Ok(a) => a.parse().context("the drive printed a bad address")?,
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().ok();
            bail!("the drive did not start (exit: {status:?})");
        }
    };
    Ok(Server { child, addr })
}

/// Starts `redis-server` with its data in `dir`, AOF with `appendfsync everysec` or no
/// persistence; its log goes to `stderr`.
pub(crate) fn start_redis(dir: &Path, aof: bool, stderr: Stdio) -> anyhow::Result<Server> {
    let port = free_port()?;
    let mut cmd = Command::new("redis-server");
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
    ])
    .args(["--daemonize", "no", "--protected-mode", "yes", "--dir"])
    .arg(dir);
    if aof {
        cmd.args(["--appendonly", "yes", "--appendfsync", "everysec"]);
    } else {
        cmd.args(["--appendonly", "no"]);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("starting redis-server")?;
    let server = Server {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(server.addr) {
            use std::io::{Read, Write};
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"PING\r\n")?;
            let mut b = [0u8; 7];
            if s.read_exact(&mut b).is_ok() && &b == b"+PONG\r\n" {
                return Ok(server);
            }
        }
        if Instant::now() > deadline {
            bail!("redis-server did not answer PING");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stores every key `redis-benchmark -r keyspace` can pick (`key:%012d`), with MSET batches.
async fn fill(addr: SocketAddr, keyspace: u64, value_size: u32) -> anyhow::Result<()> {
    let mut c = Client::connect(addr).await?;
    let value = Bytes::from(vec![b'x'; value_size as usize]);
    let per_request = (256 * 1024 / u64::from(value_size)).clamp(1, 100);
    let mut next = 0;
    while next < keyspace {
        let mut batch = Vec::new();
        for _ in 0..32 {
            if next >= keyspace {
                break;
            }
            let mut args: Vec<Bytes> = vec![Bytes::from_static(b"MSET")];
            for _ in 0..per_request.min(keyspace - next) {
                args.push(Bytes::from(format!("key:{next:012}")));
                args.push(value.clone());
                next += 1;
            }
            batch.push(args);
        }
        for r in c.pipeline(&batch).await? {
            if let Reply::Error(e) = r {
                bail!("MSET failed: {}", String::from_utf8_lossy(&e));
            }
        }
    }
    Ok(())
}

/// `redis-benchmark` against `server` with `args` after its address: its standard output.
///
/// # Errors
/// When it cannot run or fails.
pub(crate) fn redis_benchmark(server: &Server, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("redis-benchmark")
        .args(["-h", &server.addr.ip().to_string()])
        .args(["-p", &server.addr.port().to_string()])
        .args(args)
        .output()
        .context("running redis-benchmark")?;
    if !out.status.success() {
        bail!(
            "redis-benchmark failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `redis-cli` against `server` with `args`: its standard output.
///
/// # Errors
/// When it cannot run.
pub(crate) fn redis_cli(server: &Server, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("redis-cli")
        .args(["-h", &server.addr.ip().to_string()])
        .args(["-p", &server.addr.port().to_string()])
        .args(args)
        .output()
        .context("running redis-cli")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The numeric field `name` of `server`'s INFO `section`.
///
/// # Errors
/// When redis-cli cannot run or the field is missing.
pub(crate) fn info_u64(server: &Server, section: &str, name: &str) -> anyhow::Result<u64> {
    redis_cli(server, &["INFO", section])?
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("INFO {section} has no {name}"))
}

/// Parses `redis-benchmark --csv` output: the last line's rps, p50 and p99 (ms).
///
/// # Errors
/// When there is no result line or a figure is not a number.
pub(crate) fn parse_csv(out: &str) -> anyhow::Result<(f64, f64, f64)> {
    let line = out
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with("\"test\""))
        .context("redis-benchmark printed no result line")?;
    let fields: Vec<&str> = line
        .split(',')
        .map(|f| f.trim().trim_matches('"'))
        .collect();
    // "test","rps","avg","min","p50","p95","p99","max": take from the end (the test name
    // of a custom command could hold a comma).
    let n = fields.len();
    if n < 8 {
        bail!("unexpected redis-benchmark line: {line}");
    }
    let num = |i: usize| -> anyhow::Result<f64> {
        fields[i]
            .parse::<f64>()
            .with_context(|| format!("bad number in `{line}`"))
    };
    Ok((num(n - 7)?, num(n - 4)?, num(n - 2)?))
}

/// What one `redis-benchmark` test reports without `--csv`, latencies in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BenchReport {
    pub(crate) rps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// The smallest latency bound of its histogram output (the percentile and the cumulative
    /// distributions) with at least 99.9% of requests at or below it: HdrHistogram buckets,
    /// so an upper bound within a bucket of the exact p99.9.
    pub(crate) p999_ms: f64,
    pub(crate) max_ms: f64,
}

/// Parses `redis-benchmark`'s full report of one test: the `Summary:` block (throughput,
/// then `avg min p50 p95 p99 max` in ms) and the `<pct>% <= <ms> milliseconds (cumulative
/// count <n>)` lines for p99.9.
///
/// # Errors
/// When the summary or the histogram lines are missing.
pub(crate) fn parse_report(out: &str) -> anyhow::Result<BenchReport> {
    let rps: f64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("throughput summary:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("redis-benchmark printed no throughput summary")?;
    let mut lines = out
        .lines()
        .skip_while(|l| !l.contains("latency summary (msec):"));
    let figures: Vec<f64> = lines
        .nth(2)
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [_avg, _min, p50_ms, _p95, p99_ms, max_ms] = figures[..] else {
        bail!("redis-benchmark printed no latency summary");
    };
    // (bound ms, requests at or below it) from both histogram listings.
    let bounds: Vec<(f64, u64)> = out
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("% <= ")?;
            let (ms, rest) = rest.split_once(" milliseconds (cumulative count ")?;
            Some((ms.parse().ok()?, rest.strip_suffix(')')?.parse().ok()?))
        })
        .collect();
    let total = bounds.iter().map(|&(_, n)| n).max().unwrap_or(0);
    if total == 0 {
        bail!("redis-benchmark printed no latency histogram");
    }
    let want = (total as f64 * 0.999).ceil() as u64;
    let p999_ms = bounds
        .iter()
        .filter(|&&(_, n)| n >= want)
        .map(|&(ms, _)| ms)
        .fold(f64::INFINITY, f64::min)
        .min(max_ms);
    Ok(BenchReport {
        rps,
        p50_ms,
        p99_ms,
        p999_ms,
        max_ms,
    })
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    server: &Server,
    system: &str,
    w: Workload,
    value_size: u32,
    connections: u32,
    pipeline: u32,
    requests: u64,
    keyspace: u64,
) -> anyhow::Result<Row> {
    let cpu0 = cpu_seconds(server.pid())?;
    let (c, p) = (connections.to_string(), pipeline.to_string());
    let (n, r, d) = (
        requests.to_string(),
        keyspace.to_string(),
        value_size.to_string(),
    );
    // The full report (not `--csv`): its histogram gives p99.9.
    let mut args = vec!["-c", &c, "-P", &p, "-n", &n, "-r", &r, "-d", &d];
    let workload = w.args();
    args.extend(workload.iter().map(String::as_str));
    let stdout = redis_benchmark(server, &args)?;
    let cpu = cpu_seconds(server.pid())? - cpu0;
    let report = parse_report(&stdout)?;
    let (rps, p50_ms, p99_ms) = (report.rps, report.p50_ms, report.p99_ms);
    let bytes_per_op = f64::from(value_size) * f64::from(w.keys_per_op());
    let mut row = Row::measured(
        system,
        w.name(),
        connections * pipeline,
        rps,
        rps * bytes_per_op / 1e6,
        p50_ms * 1000.0,
        p99_ms * 1000.0,
    );
    row.value_size = Some(value_size);
    row.connections = Some(connections);
    row.pipeline = Some(pipeline);
    row.p999_us = Some(report.p999_ms * 1000.0);
    row.max_us = Some(report.max_ms * 1000.0);
    row.cpu_s_per_mop = Some(cpu / (requests as f64 / 1e6));
    row.rss_mb = rss_mb(server.pid()).ok();
    Ok(row)
}

/// Sets `ratio_to_redis` on every measured row from the in-memory Redis row with the same
/// workload, value size and client settings.
fn add_redis_ratios(rows: &mut [Row]) {
    let same = |a: &Row, b: &Row| {
        a.workload == b.workload
            && a.value_size == b.value_size
            && a.connections == b.connections
            && a.pipeline == b.pipeline
    };
    let base: Vec<Row> = rows
        .iter()
        .filter(|r| r.system == "redis" && r.missing.is_none() && r.ops_per_sec > 0.0)
        .cloned()
        .collect();
    for r in rows.iter_mut().filter(|r| r.missing.is_none()) {
        r.ratio_to_redis = base
            .iter()
            .find(|b| same(b, r))
            .map(|b| r.ops_per_sec / b.ops_per_sec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a_row(system: &str, ops: f64) -> Row {
        let mut r = Row::measured(system, "SET", 50, ops, 0.0, ops, 0.0);
        r.value_size = Some(100);
        r.connections = Some(50);
        r.pipeline = Some(1);
        r
    }

    /// Each case's row is the median pass's (its own latency), with the range; a pass that
    /// could not measure a case leaves it to the others; one pass adds no range.
    #[test]
    fn repeated_passes_keep_the_median_run_of_each_case() {
        let mut missing = Row::missing("redis", "SET", 50, "down".into());
        missing.value_size = Some(100);
        missing.connections = Some(50);
        missing.pipeline = Some(1);
        let passes = vec![
            vec![a_row("lightstore/file-plp", 300.0), a_row("redis", 500.0)],
            vec![a_row("lightstore/file-plp", 100.0), missing],
            vec![a_row("lightstore/file-plp", 200.0), a_row("redis", 400.0)],
        ];
        let rows = median_rows(&passes);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].ops_per_sec, 200.0);
        assert_eq!(rows[0].p50_us, 200.0, "every figure from the median run");
        assert_eq!(rows[0].repetitions, Some(3));
        assert_eq!(rows[0].ops_range, Some((100.0, 300.0)));
        assert_eq!(rows[1].ops_per_sec, 400.0, "lower middle of two");
        assert_eq!(rows[1].repetitions, Some(2));
        assert_eq!(rows[1].ops_range, Some((400.0, 500.0)));
        let one = median_rows(&passes[..1]);
        assert_eq!(one[0].ops_per_sec, 300.0);
        assert_eq!((one[0].repetitions, one[0].ops_range), (None, None));
    }

    #[test]
    fn parses_redis_benchmark_csv() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"SET\",\"40000.00\",\"0.100\",\"0.050\",\"0.095\",\"0.150\",\"0.300\",\"1.000\"\n";
        let (rps, p50, p99) = parse_csv(out).unwrap_or_default();
        assert!((rps - 40_000.0).abs() < 1e-9);
        assert!((p50 - 0.095).abs() < 1e-9);
        assert!((p99 - 0.3).abs() < 1e-9);
        assert!(parse_csv("garbage").is_err());
    }

    /// redis-benchmark 7.0's report of one test (progress line and all), shortened.
    #[test]
    fn parses_redis_benchmark_full_report() {
        let out = "SET: rps=0.0 (overall: -nan) avg_msec=-nan (overall: -nan)\r====== SET ======\n\
            \x20 3000 requests completed in 0.15 seconds\n\n\
            Latency by percentile distribution:\n\
            0.000% <= 0.031 milliseconds (cumulative count 1)\n\
            50.000% <= 0.143 milliseconds (cumulative count 1609)\n\
            99.805% <= 0.791 milliseconds (cumulative count 2995)\n\
            99.902% <= 1.079 milliseconds (cumulative count 2998)\n\
            100.000% <= 2.087 milliseconds (cumulative count 3000)\n\n\
            Cumulative distribution of latencies:\n\
            99.867% <= 0.903 milliseconds (cumulative count 2996)\n\
            99.900% <= 1.007 milliseconds (cumulative count 2997)\n\
            100.000% <= 2.103 milliseconds (cumulative count 3000)\n\n\
            Summary:\n\
            \x20 throughput summary: 19736.84 requests per second\n\
            \x20 latency summary (msec):\n\
            \x20         avg       min       p50       p95       p99       max\n\
            \x20       0.147     0.024     0.143     0.255     0.343     2.087\n";
        let r = parse_report(out).expect("a report");
        assert!((r.rps - 19_736.84).abs() < 1e-6);
        assert!((r.p50_ms - 0.143).abs() < 1e-9);
        assert!((r.p99_ms - 0.343).abs() < 1e-9);
        // 2,997 of 3,000 requests: the cumulative listing's 1.007 ms beats 1.079.
        assert!((r.p999_ms - 1.007).abs() < 1e-9, "{r:?}");
        assert!((r.max_ms - 2.087).abs() < 1e-9);
        assert!(parse_report("garbage").is_err());
    }
}
