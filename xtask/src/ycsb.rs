//! `cargo xtask ycsb --workload a..f [--drives N]`: the real YCSB client against drives.
//!
//! Builds the release drive and the Maven project in `adapters/ycsb` (YCSB's `site.ycsb:core`
//! from Maven Central plus the LightStore binding; Maven works offline once its cache is
//! filled), starts N drives on free loopback ports with scratch data directories (N > 1: a
//! Redis Cluster map splitting the slots evenly), and for each workload loads the records
//! (`site.ycsb.Client -load`) then runs it (`-t`) with the workload files in
//! `adapters/ycsb/workloads` (the standard core-workload parameters; `site.ycsb:core` does not
//! ship them). YCSB's own summary lines are printed; the full outputs and drive logs are kept
//! in `<target>/ycsb/`. Every workload gets fresh drives. The drives are stopped and their
//! data removed however the run ends (a guard). The command fails (after running every
//! workload asked for) if YCSB reports any operation that did not return OK, a read whose data
//! did not verify (`dataintegrity=true`), or fewer operations done than asked.

use std::fs::File;
use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::have;
use anyhow::{bail, Context};

mod ceiling;
mod hosts;
mod report;
mod server_cost;

use report::{comparison, drive_table, print_table, Summary, WorkloadResult};

/// YCSB's core workloads.
const WORKLOADS: &[char] = &['a', 'b', 'c', 'd', 'e', 'f'];
/// The LightStore binding's class (MGET/MSET of per-field keys, LS.RANGE scans).
const BINDING_CLASS: &str = "site.ycsb.db.lightstore.LightStoreClient";
/// The class that sends what YCSB's stock redis binding sends (hashes and a scan index).
const REDIS_BINDING_CLASS: &str = "site.ycsb.db.lightstore.RedisHashClient";
/// Logical capacity of each scratch drive (the YCSB data is tens of MB).
const DRIVE_CAPACITY: &str = "1GiB";
/// The latency percentiles YCSB reports per operation (`<p>thPercentileLatency(us)`;
/// `99.9PercentileLatency(us)` for the fractional one).
const HDR_PERCENTILES: &str = "hdrhistogram.percentiles=50,99,99.9";
/// Hash slots in a Redis Cluster.
const SLOTS: usize = 16384;
/// How long a drive may take to print its ready line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// `cargo xtask ycsb` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct YcsbArgs {
    /// Workloads: one letter a-f, a list (a,c,e), a range (a..f) or `all`.
    #[arg(long, visible_alias = "workloads")]
    pub workload: String,
    /// Drives; more than one runs them as a Redis Cluster (slots split evenly).
    #[arg(long, default_value_t = 1)]
    pub drives: usize,
    /// Records loaded before each workload (YCSB `recordcount`).
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    /// Operations of the run phase (YCSB `operationcount`) [default: 100000, 10000 for E].
    #[arg(long)]
    pub operations: Option<u64>,
    /// With `--against both`: runs of each workload on each side, drive and redis-server in
    /// turn; the table gives the median of the paired ratios, their range, and the pair
    /// whose ratio is the median.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// YCSB client threads (each has one connection per drive).
    #[arg(long, default_value_t = 8)]
    pub threads: usize,
    /// `lightstore` (our binding) or `redis` (the stock redis binding's commands: HMSET,
    /// HGETALL/HMGET, and a sorted-set index for scans; runs against redis-server too).
    #[arg(long, default_value = "lightstore")]
    pub binding: String,
    /// `drive`, `redis-server` (in memory, no persistence) or `both` (each workload on a
    /// fresh drive, then on a fresh redis-server, and a table of the ratios). redis-server
    /// needs `--binding redis` and one drive.
    #[arg(long, default_value = "drive")]
    pub against: String,
    /// The drives' durability: `sync` (acknowledged once on the device, out of its write
    /// cache) or `plp` (acknowledged from the drive's DRAM, as on a card with power-loss
    /// protection).
    #[arg(long, default_value = "sync")]
    pub durability: String,
    /// The drives' value cache (`--value-cache-size` of the drive, e.g. 64MiB; 0: off)
    /// [default: the drive's].
    #[arg(long)]
    pub value_cache_size: Option<String>,
    /// With `--against both`: also write the comparison as Markdown to `DIR/ycsb-<tag>.md`
    /// (with the commit and the settings), e.g. under `benches/results/`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Names the report file (`ycsb-<tag>.md`) [default: the binding and durability].
    #[arg(long)]
    pub tag: Option<String>,
    /// Run against servers that are already running instead of fresh ones:
    /// `host:port,host:port,...` (more than one: a cluster, whose map the binding reads from
    /// them). One load of `--records`, then the run phase of each workload in the order
    /// given; nothing is started, stopped or flushed.
    #[arg(long)]
    pub hosts: Option<String>,
    /// A file whose first line is the servers' password (sent with AUTH; without it the
    /// binding reads `LIGHTSTORE_PASSWORD` from the environment).
    #[arg(long)]
    pub password_file: Option<PathBuf>,
    /// With `--hosts`: connect over TLS, trusting the CA in this PEM file (the drives'
    /// `--tls-port`; their certificates must name the addresses given).
    #[arg(long)]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// With `--hosts` and TLS: the client certificate chain (PEM) for drives that ask for one.
    #[arg(long, requires_all = ["tls_key_file", "tls_ca_cert_file"])]
    pub tls_cert_file: Option<PathBuf>,
    /// With `--tls-cert-file`: its private key (PKCS#8 PEM).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
}

/// Which YCSB binding runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BindingKind {
    LightStore,
    Redis,
}

/// What the binding runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Drive,
    RedisServer,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Drive => "drive",
            Target::RedisServer => "redis-server",
        }
    }
}

/// Parses `a`, `a,c,e`, `a..f`, `all` (case-insensitive, `workloada` accepted).
fn parse_workloads(spec: &str) -> anyhow::Result<Vec<char>> {
    let letter = |s: &str| -> anyhow::Result<char> {
        let s = s.trim().to_ascii_lowercase();
        let s = s.strip_prefix("workload").unwrap_or(&s);
        match s.chars().collect::<Vec<_>>()[..] {
            [c] if WORKLOADS.contains(&c) => Ok(c),
            _ => bail!("unknown workload `{s}` (a, b, c, d, e, f)"),
        }
    };
    let spec = spec.trim();
    if spec.eq_ignore_ascii_case("all") {
        return Ok(WORKLOADS.to_vec());
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        if let Some((a, b)) = part.split_once("..") {
            let (a, b) = (letter(a)?, letter(b)?);
            if a > b {
                bail!("empty workload range `{part}`");
            }
            out.extend((a..=b).filter(|c| WORKLOADS.contains(c)));
        } else {
            out.push(letter(part)?);
        }
    }
    Ok(out)
}

/// Operations of the run phase when not given: scans (E) read ~50 records each, so fewer.
/// At 10,000 operations a run lasted about a second and measured the client's JVM warming
/// up more than the servers (workload B: 0.67x redis-server at 10,000 operations, 1.02x at
/// 100,000, same build).
fn default_operations(workload: char) -> u64 {
    if workload == 'e' {
        10_000
    } else {
        100_000
    }
}

/// The workspace root (xtask lives in `<root>/xtask`).
fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t),
        None => root.join("target"),
    }
}

/// Builds the drive (`cargo build -p firmware`, release or the dev profile) and returns its
/// path. Benchmarks run the release drive; the end-to-end test runs the dev build that
/// `cargo test --workspace` has already made, so the test suite does not compile the
/// workspace a second time in release mode.
fn build_drive(root: &Path, release: bool) -> anyhow::Result<PathBuf> {
    // `cargo xtask test` names the dev drive it built with the workspace's test features:
    // building it again alone resolves features differently and recompiles dependencies.
    if let (false, Some(bin)) = (release, std::env::var_os("LIGHTSTORE_BIN")) {
        let bin = PathBuf::from(bin);
        if !bin.exists() {
            bail!("LIGHTSTORE_BIN={} does not exist", bin.display());
        }
        return Ok(bin);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(&cargo);
    build.args(["build", "-p", "firmware", "--bin", "lightstore"]);
    if release {
        build.arg("--release");
    }
    let status = build
        .current_dir(root)
        .status()
        .with_context(|| format!("running {cargo}"))?;
    if !status.success() {
        bail!("cargo build -p firmware failed ({status})");
    }
    let profile = if release { "release" } else { "debug" };
    let bin = target_dir(root).join(profile).join("lightstore");
    if !bin.exists() {
        bail!("{} not found after the build", bin.display());
    }
    Ok(bin)
}

/// The built binding: the classpath that runs `site.ycsb.Client` with it.
struct Binding {
    classpath: String,
}

fn binding_dir(root: &Path) -> PathBuf {
    root.join("adapters").join("ycsb")
}

/// Whether a previous build left every jar in Maven's local cache (then `-o` works).
fn maven_cached(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("target").join("classpath.txt")).is_ok_and(|cp| {
        let jars: Vec<&str> = cp.trim().split(':').filter(|s| !s.is_empty()).collect();
        !jars.is_empty() && jars.iter().all(|j| Path::new(j).exists())
    })
}

/// Runs `mvn -q -B ARGS` in the binding's directory: offline first when the cache has what a
/// previous build used, online (Maven Central) if that fails or on a first build.
fn maven(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    if !have("mvn") || !have("java") {
        bail!(
            "the YCSB binding needs Maven 3 and a JDK 17 (Debian: apt-get install maven \
             openjdk-17-jdk-headless)"
        );
    }
    let dir = binding_dir(root);
    if maven_cached(&dir) {
        let out = Command::new("mvn")
            .args(["-o", "-q", "-B", "-Dstyle.color=never"])
            .args(args)
            .current_dir(&dir)
            .output()
            .context("running mvn")?;
        if out.status.success() {
            return Ok(());
        }
        eprintln!("xtask: offline Maven build failed; retrying online");
    }
    let status = Command::new("mvn")
        .args(["-q", "-B", "-Dstyle.color=never"])
        .args(args)
        .current_dir(&dir)
        .status()
        .context("running mvn")?;
    if !status.success() {
        bail!(
            "mvn {} in {} failed ({status})",
            args.join(" "),
            dir.display()
        );
    }
    Ok(())
}

/// Builds the binding jar and YCSB's classpath (`mvn package`, unit tests skipped).
fn build_binding(root: &Path) -> anyhow::Result<Binding> {
    maven(root, &["package", "-DskipTests"])?;
    let dir = binding_dir(root).join("target");
    let jar = dir.join("lightstore-ycsb-binding.jar");
    let deps = std::fs::read_to_string(dir.join("classpath.txt"))
        .with_context(|| format!("reading {}", dir.join("classpath.txt").display()))?;
    if !jar.exists() {
        bail!("{} not built", jar.display());
    }
    Ok(Binding {
        classpath: format!("{}:{}", jar.display(), deps.trim()),
    })
}

/// A 40-hex-digit node id for drive `i`.
fn node_id(i: usize) -> String {
    format!("{:032x}{i:08x}", 0x7c5b_u32)
}

/// The cluster map (kvproto's TOML) for drives at `addrs`, slots split evenly in order.
fn cluster_map(addrs: &[SocketAddr]) -> String {
    let n = addrs.len();
    let mut s =
        String::from("# LightStore cluster map, written by `cargo xtask ycsb`.\nversion = 1\n");
    for (i, a) in addrs.iter().enumerate() {
        let (start, end) = (i * SLOTS / n, (i + 1) * SLOTS / n - 1);
        s.push_str(&format!(
            "\n[[node]]\nid = \"{}\"\naddr = \"{a}\"\nslots = [[{start}, {end}]]\n",
            node_id(i)
        ));
    }
    s
}

/// Distinct free loopback ports (bound together, then released for the drives to take).
fn free_addrs(n: usize) -> anyhow::Result<Vec<SocketAddr>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free loopback ports")?;
    listeners
        .iter()
        .map(|l| l.local_addr().context("finding free loopback ports"))
        .collect()
}

/// Whether process `pid` is alive.
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes scratch directories left by runs that were killed before their guard ran.
fn remove_stale_scratch(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("scratch-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !alive(pid) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// One running drive.
struct Drive {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

/// Drives started for a run; stopped (SHUTDOWN, then SIGTERM, then SIGKILL) and their data
/// removed when dropped.
struct Drives {
    drives: Vec<Drive>,
    /// Scratch directory of the started drives (none for servers already running).
    scratch: Option<PathBuf>,
    /// Servers already running (`--hosts`), used as they are and left running.
    running: Vec<SocketAddr>,
}

impl Drives {
    /// Starts `n` drives (cluster mode when `n > 1`), logs in `log_dir/<tag>-drive<i>.log`.
    fn start(
        bin: &Path,
        n: usize,
        extra: &[String],
        log_dir: &Path,
        tag: &str,
    ) -> anyhow::Result<Drives> {
        if n == 0 {
            bail!("--drives must be at least 1");
        }
        std::fs::create_dir_all(log_dir)
            .with_context(|| format!("creating {}", log_dir.display()))?;
        remove_stale_scratch(log_dir);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let scratch = log_dir.join(format!("scratch-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let mut drives = Drives {
            drives: Vec::new(),
            scratch: Some(scratch.clone()),
            running: Vec::new(),
        };
        // One drive: it picks its own port (no race). A cluster: the map needs the addresses
        // first, so free ports are found and handed over.
        let planned = if n == 1 { None } else { Some(free_addrs(n)?) };
        let map = planned.as_deref().map(cluster_map);
        for i in 0..n {
            let data = scratch.join(format!("drive-{i}"));
            std::fs::create_dir_all(&data)
                .with_context(|| format!("creating {}", data.display()))?;
            let log = log_dir.join(format!("{tag}-drive{i}.log"));
            let mut cmd = Command::new(bin);
            cmd.arg("--data-dir")
                .arg(&data)
                .args(["--capacity", DRIVE_CAPACITY])
                .args(extra);
            match (&planned, &map) {
                (Some(addrs), Some(map)) => {
                    // Each drive its own copy: a drive rewrites its file when a map is pushed.
                    let file = data.join("cluster.toml");
                    std::fs::write(&file, map)
                        .with_context(|| format!("writing {}", file.display()))?;
                    cmd.args(["--port", &addrs[i].port().to_string()])
                        .arg("--cluster-config")
                        .arg(&file)
                        .args(["--cluster-node-id", &node_id(i)]);
                }
                _ => {
                    cmd.args(["--port", "0"]);
                }
            }
            let drive = spawn_drive(cmd, &log)
                .with_context(|| format!("starting drive {i} (log: {})", log.display()))?;
            drives.drives.push(drive);
        }
        Ok(drives)
    }

    /// A fresh in-memory redis-server (no RDB, no AOF) on a free loopback port, as the
    /// baseline of `--against`: stopped like a drive (SHUTDOWN, which saves nothing here).
    fn start_redis_server(log_dir: &Path, tag: &str) -> anyhow::Result<Drives> {
        if !have("redis-server") {
            bail!(
                "--against redis-server needs redis-server (Debian: apt-get install redis-server)"
            );
        }
        std::fs::create_dir_all(log_dir)
            .with_context(|| format!("creating {}", log_dir.display()))?;
        remove_stale_scratch(log_dir);
        let scratch = log_dir.join(format!("scratch-{}-redis", std::process::id()));
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let addr = free_addrs(1)?
            .pop()
            .context("no free loopback port for redis-server")?;
        let log = log_dir.join(format!("{tag}-redis-server.log"));
        let log_file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new("redis-server")
            .args(["--bind", &addr.ip().to_string()])
            .args(["--port", &addr.port().to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&scratch)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::null())
            .spawn()
            .context("spawning redis-server")?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 7];
                if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
                    && s.read_exact(&mut buf).is_ok()
                    && &buf == b"+PONG\r\n"
                {
                    break;
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                bail!("redis-server exited ({status}):\n{}", log_tail(&log));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("redis-server did not answer PING:\n{}", log_tail(&log));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Drives {
            drives: vec![Drive { child, addr, log }],
            scratch: Some(scratch),
            running: Vec::new(),
        })
    }

    /// Servers already running, used as they are (`--hosts`).
    fn running(addrs: Vec<SocketAddr>) -> Drives {
        Drives {
            drives: Vec::new(),
            scratch: None,
            running: addrs,
        }
    }

    /// Every server's address, in order.
    fn addrs(&self) -> Vec<SocketAddr> {
        self.drives
            .iter()
            .map(|d| d.addr)
            .chain(self.running.iter().copied())
            .collect()
    }

    /// The first server's address (the redis binding talks to one).
    fn first_addr(&self) -> anyhow::Result<SocketAddr> {
        self.addrs()
            .first()
            .copied()
            .context("no server was started")
    }

    /// `host:port,host:port,...` for `lightstore.hosts`.
    fn hosts(&self) -> String {
        self.addrs()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    fn cluster(&self) -> bool {
        self.addrs().len() > 1
    }

    /// The processes this command started (none for servers already running).
    fn pids(&self) -> Vec<u32> {
        self.drives.iter().map(|d| d.child.id()).collect()
    }
}

/// Starts a drive and waits for "lightstore ready on ADDR" on its stdout.
fn spawn_drive(mut cmd: Command, log: &Path) -> anyhow::Result<Drive> {
    let log_file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .context("spawning the drive")?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        bail!("no stdout pipe");
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent {
                if let Some(addr) = line.strip_prefix("lightstore ready on ") {
                    let _ = tx.send(addr.trim().to_string());
                    sent = true;
                }
            }
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(addr) => {
                let addr: SocketAddr = match addr.parse() {
                    Ok(a) => a,
                    Err(_) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        bail!("the drive printed an unreadable address `{addr}`");
                    }
                };
                return Ok(Drive {
                    child,
                    addr,
                    log: log.to_path_buf(),
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!("the drive exited ({status}):\n{}", log_tail(log));
                }
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the drive did not get ready:\n{}", log_tail(log));
            }
        }
    }
}

/// The last lines of a drive's log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// Waits up to `limit` for `child` to exit.
fn wait_for(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Stops a drive: SHUTDOWN over RESP, then SIGTERM, then SIGKILL.
fn stop_drive(d: &mut Drive) {
    if matches!(d.child.try_wait(), Ok(Some(_))) {
        return;
    }
    if let Ok(mut s) = TcpStream::connect_timeout(&d.addr, Duration::from_secs(1)) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        if s.write_all(b"*1\r\n$8\r\nSHUTDOWN\r\n").is_ok() {
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
    }
    if wait_for(&mut d.child, Duration::from_secs(20)) {
        return;
    }
    eprintln!(
        "xtask: drive {} did not stop on SHUTDOWN; sending SIGTERM (log: {})",
        d.addr,
        d.log.display()
    );
    let _ = Command::new("kill")
        .args(["-TERM", &d.child.id().to_string()])
        .stderr(Stdio::null())
        .status();
    if wait_for(&mut d.child, Duration::from_secs(10)) {
        return;
    }
    eprintln!(
        "xtask: drive {} did not stop on SIGTERM; killing it",
        d.addr
    );
    let _ = d.child.kill();
    let _ = d.child.wait();
}

impl Drop for Drives {
    fn drop(&mut self) {
        for d in &mut self.drives {
            stop_drive(d);
        }
        if let Some(scratch) = &self.scratch {
            if let Err(e) = std::fs::remove_dir_all(scratch) {
                eprintln!("xtask: could not remove {}: {e}", scratch.display());
            }
        }
    }
}

/// YCSB's phases.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Load,
    Run,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Run => "run",
        }
    }
}

/// Settings of one workload run.
#[derive(Clone, Debug)]
struct RunSpec {
    workload: char,
    drives: usize,
    records: u64,
    operations: u64,
    threads: usize,
    binding: BindingKind,
    target: Target,
    /// Extra flags of the drives (durability, value cache).
    drive_args: Vec<String>,
    /// The servers' password (`--password-file`), if any.
    password: Option<String>,
    /// `-p` properties of the binding for TLS (`lightstore.tls.*`), if any.
    tls_properties: Vec<String>,
}

/// Runs one YCSB phase against `drives`, saving its output in `out_dir`.
fn ycsb_phase(
    root: &Path,
    binding: &Binding,
    drives: &Drives,
    spec: &RunSpec,
    phase: Phase,
    out_dir: &Path,
) -> anyhow::Result<Summary> {
    let workload_file = binding_dir(root)
        .join("workloads")
        .join(format!("workload{}", spec.workload));
    let java = match std::env::var_os("JAVA_HOME") {
        Some(h) if Path::new(&h).join("bin/java").exists() => Path::new(&h).join("bin/java"),
        _ => PathBuf::from("java"),
    };
    let mut cmd = Command::new(&java);
    cmd.arg("-cp")
        .arg(&binding.classpath)
        .arg("site.ycsb.Client")
        .arg(match phase {
            Phase::Load => "-load",
            Phase::Run => "-t",
        })
        .args([
            "-db",
            match spec.binding {
                BindingKind::LightStore => BINDING_CLASS,
                BindingKind::Redis => REDIS_BINDING_CLASS,
            },
        ])
        .arg("-P")
        .arg(&workload_file);
    match spec.binding {
        BindingKind::LightStore => {
            cmd.args(["-p", &format!("lightstore.hosts={}", drives.hosts())])
                .args(["-p", &format!("lightstore.cluster={}", drives.cluster())]);
            // The binding reads it from the environment: not on the command line.
            if let Some(pw) = &spec.password {
                cmd.env("LIGHTSTORE_PASSWORD", pw);
            }
            for prop in &spec.tls_properties {
                cmd.args(["-p", prop]);
            }
        }
        BindingKind::Redis => {
            let first = drives.first_addr()?;
            cmd.args(["-p", &format!("redis.host={}", first.ip())])
                .args(["-p", &format!("redis.port={}", first.port())]);
            // YCSB's redis binding takes it as a property only.
            if let Some(pw) = &spec.password {
                cmd.args(["-p", &format!("redis.password={pw}")]);
            }
        }
    }
    cmd.args(["-p", &format!("recordcount={}", spec.records)])
        .args(["-p", &format!("operationcount={}", spec.operations)])
        // Values derived from key and field, checked on every read ([VERIFY] lines).
        .args(["-p", "dataintegrity=true"])
        // Per-operation percentiles from YCSB's HdrHistogram (default 95,99).
        .args(["-p", HDR_PERCENTILES])
        .args(["-threads", &spec.threads.to_string()])
        // Progress every 10 s on stderr.
        .arg("-s")
        .current_dir(binding_dir(root))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {} site.ycsb.Client", java.display()))?;
    // YCSB's progress and the binding's errors pass through; its per-thread banner does not.
    let stderr = child.stderr.take();
    let forward = std::thread::spawn(move || {
        let Some(stderr) = stderr else { return };
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !line.starts_with("DBWrapper: ") {
                eprintln!("{line}");
            }
        }
    });
    let out = child
        .wait_with_output()
        .with_context(|| format!("running {} site.ycsb.Client", java.display()))?;
    let _ = forward.join();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let file = out_dir.join(format!(
        "workload{}-{}-{}-{}.txt",
        spec.workload,
        spec.target.name(),
        binding_name(spec.binding),
        phase.name()
    ));
    std::fs::write(&file, &stdout).with_context(|| format!("writing {}", file.display()))?;
    let summary = Summary::parse(&stdout);
    if !out.status.success() || summary.throughput().is_none() {
        let tail: Vec<&str> = stdout.lines().collect();
        bail!(
            "YCSB {} of workload {} failed ({}); output in {}:\n{}",
            phase.name(),
            spec.workload,
            out.status,
            file.display(),
            tail[tail.len().saturating_sub(20)..].join("\n")
        );
    }
    Ok(summary)
}

/// Fresh drives, YCSB load, YCSB run; the drives are stopped before returning.
fn run_workload(
    root: &Path,
    bin: &Path,
    binding: &Binding,
    spec: &RunSpec,
) -> anyhow::Result<WorkloadResult> {
    let out_dir = target_dir(root).join("ycsb");
    let tag = format!("workload{}-{}drive", spec.workload, spec.drives);
    let drives = match spec.target {
        Target::Drive => Drives::start(bin, spec.drives, &spec.drive_args, &out_dir, &tag)?,
        Target::RedisServer => Drives::start_redis_server(&out_dir, &tag)?,
    };
    println!(
        "== YCSB workload {} ({} binding): {} ({}), {} records, {} operations, {} threads",
        spec.workload.to_ascii_uppercase(),
        binding_name(spec.binding),
        match (spec.target, spec.drives) {
            (Target::RedisServer, _) => "redis-server".to_string(),
            (Target::Drive, 1) => "1 drive".to_string(),
            (Target::Drive, n) => format!("{n} drives, cluster mode"),
        },
        drives.hosts(),
        spec.records,
        spec.operations,
        spec.threads
    );
    let mut result = WorkloadResult {
        workload: spec.workload,
        load: Summary::default(),
        run: Summary::default(),
        problems: Vec::new(),
        server_cpu_s_per_mop: None,
        server_peak_rss_mb: None,
    };
    let pids = drives.pids();
    for phase in [Phase::Load, Phase::Run] {
        let cpu_before = server_cost::cpu_seconds(&pids);
        let summary = ycsb_phase(root, binding, &drives, spec, phase, &out_dir)?;
        if phase == Phase::Run {
            // YCSB's [OVERALL] has no count: the operations that returned OK.
            let operations = summary.operations_ok() as f64;
            result.server_cpu_s_per_mop = cpu_before
                .zip(server_cost::cpu_seconds(&pids))
                .and_then(|(a, b)| server_cost::per_million(b - a, operations));
            result.server_peak_rss_mb = server_cost::peak_rss_mb(&pids);
        }
        println!("-- {}", phase.name());
        for l in summary.printable() {
            println!("[{}], {}, {}", l.section, l.metric, l.value);
        }
        for f in summary.failures() {
            result
                .problems
                .push(format!("workload {} {}: {f}", spec.workload, phase.name()));
        }
        let (done, want) = match phase {
            Phase::Load => (
                summary.get("INSERT", "Return=OK").unwrap_or(0.0) as u64,
                spec.records,
            ),
            Phase::Run => (summary.operations_ok(), spec.operations),
        };
        if done != want {
            result.problems.push(format!(
                "workload {} {}: YCSB completed {done} of {want} operations",
                spec.workload,
                phase.name()
            ));
        }
        match phase {
            Phase::Load => result.load = summary,
            Phase::Run => result.run = summary,
        }
    }
    drop(drives);
    Ok(result)
}

fn binding_name(b: BindingKind) -> &'static str {
    match b {
        BindingKind::LightStore => "lightstore",
        BindingKind::Redis => "redis",
    }
}

/// The checked-out commit, `-dirty` when tracked files differ (the report says what it
/// measured).
fn commit_id(root: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(id)
            if git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty()) =>
        {
            format!("{id}-dirty")
        }
        Some(id) => id,
        None => "unknown".into(),
    }
}

/// The drives' settings as a report header says them.
fn drive_settings(args: &YcsbArgs) -> String {
    format!(
        "durability {}, value cache {}",
        args.durability,
        args.value_cache_size.as_deref().unwrap_or("default 64MiB")
    )
}

/// The client's load as a report header says it.
fn load_settings(args: &YcsbArgs) -> String {
    format!(
        "{} threads, {} records, {} operations per workload (E: {})",
        args.threads,
        args.records,
        args.operations.unwrap_or(default_operations('a')),
        args.operations.unwrap_or(default_operations('e')),
    )
}

/// Writes `<dir>/ycsb-<tag>.md`: a title, the header and the table.
fn write_table(
    dir: &Path,
    args: &YcsbArgs,
    binding: BindingKind,
    header: &str,
    table: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tag = args
        .tag
        .clone()
        .unwrap_or_else(|| format!("{}-{}", binding_name(binding), args.durability));
    let file = dir.join(format!("ycsb-{tag}.md"));
    std::fs::write(&file, format!("# YCSB: {tag}\n\n{header}\n\n{table}"))
        .with_context(|| format!("writing {}", file.display()))?;
    println!("written to {}", file.display());
    Ok(())
}

/// `cargo xtask ycsb`.
pub fn run(args: &YcsbArgs) -> anyhow::Result<()> {
    if args.hosts.is_some() {
        return hosts::run(args);
    }
    if args.tls_ca_cert_file.is_some() {
        bail!("--tls-ca-cert-file is for --hosts (the drives this command starts serve plain TCP)");
    }
    let workloads = parse_workloads(&args.workload)?;
    if args.drives == 0 || args.threads == 0 || args.records == 0 {
        bail!("--drives, --threads and --records must be at least 1");
    }
    let binding = match args.binding.as_str() {
        "lightstore" => BindingKind::LightStore,
        "redis" => BindingKind::Redis,
        other => bail!("--binding `{other}`: use lightstore or redis"),
    };
    let targets = match args.against.as_str() {
        "drive" => vec![Target::Drive],
        "redis-server" => vec![Target::RedisServer],
        "both" => vec![Target::Drive, Target::RedisServer],
        other => bail!("--against `{other}`: use drive, redis-server or both"),
    };
    if !matches!(args.durability.as_str(), "sync" | "plp") {
        bail!("--durability `{}`: use sync or plp", args.durability);
    }
    let mut drive_args = vec!["--durability".to_string(), args.durability.clone()];
    if let Some(size) = &args.value_cache_size {
        drive_args.extend(["--value-cache-size".to_string(), size.clone()]);
    }
    if binding == BindingKind::Redis && args.drives > 1 {
        bail!("--binding redis talks to one server: use --drives 1");
    }
    if targets.contains(&Target::RedisServer) && binding != BindingKind::Redis {
        bail!("redis-server has no LS.RANGE: use --binding redis to run against it");
    }
    let root = repo_root();
    let bin = build_drive(&root, true)?;
    let classes = build_binding(&root)?;
    let repeat = if targets.len() == 2 {
        args.repeat.max(1)
    } else {
        1
    };
    let mut results = Vec::new();
    let mut pairs: Vec<Vec<(WorkloadResult, WorkloadResult)>> = Vec::new();
    for &w in &workloads {
        let mut runs = Vec::new();
        for _ in 0..repeat {
            let mut per_target = Vec::new();
            for &target in &targets {
                let spec = RunSpec {
                    workload: w,
                    drives: args.drives,
                    records: args.records,
                    operations: args.operations.unwrap_or_else(|| default_operations(w)),
                    threads: args.threads,
                    binding,
                    target,
                    drive_args: drive_args.clone(),
                    password: None,
                    tls_properties: Vec::new(),
                };
                let r = run_workload(&root, &bin, &classes, &spec)?;
                for p in &r.problems {
                    eprintln!("xtask: {p}");
                }
                per_target.push(r);
            }
            if let [d, r] = &per_target[..] {
                runs.push((d.clone(), r.clone()));
            }
            results.extend(per_target);
        }
        if !runs.is_empty() {
            pairs.push(runs);
        }
    }
    if !pairs.is_empty() {
        let mut table = comparison(&pairs);
        // What the device does at the client's concurrency on this host, for the workloads
        // that outgrow the cache (DESIGN.md: "device-bound beyond it").
        match ceiling::random_read_iops(&target_dir(&root).join("ycsb"), args.threads) {
            Ok((iops, command)) => {
                table.push_str(&ceiling::note(iops, args.threads, &command, &pairs));
            }
            Err(e) => table.push_str(&format!("\nDevice ceiling not measured: {e:#}.\n")),
        }
        let header = format!(
            "YCSB through the {} binding: the drive ({}) against in-memory redis-server (no \
             RDB, no AOF), same client, {}, {repeat} run(s) of each side per workload, in \
             turn; commit {}.",
            binding_name(binding),
            drive_settings(args),
            load_settings(args),
            commit_id(&root),
        );
        println!("\n== {header}\n{table}");
        if let Some(dir) = &args.out {
            write_table(dir, args, binding, &header, &table)?;
        }
    } else {
        if results.len() > 1 {
            print_table(&results, args.drives);
        }
        if let Some(dir) = &args.out {
            let header = format!(
                "YCSB through the {} binding against {} ({}), {}; commit {}.",
                binding_name(binding),
                match args.drives {
                    1 => "one drive".to_string(),
                    n => format!("{n} drives in cluster mode"),
                },
                drive_settings(args),
                load_settings(args),
                commit_id(&root),
            );
            write_table(dir, args, binding, &header, &drive_table(&results))?;
        }
    }
    let problems: Vec<&String> = results.iter().flat_map(|r| &r.problems).collect();
    if !problems.is_empty() {
        bail!(
            "{} YCSB problem(s): operations failed, returned wrong data or went missing \
             (outputs and drive logs in {})",
            problems.len(),
            target_dir(&root).join("ycsb").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
