//! `cargo xtask cluster up N [--replicas R] [--base-port P] [--dir D]`,
//! `cargo xtask cluster add [--dir D] [--port P]` and `cargo xtask cluster down [--dir D]`:
//! a local Redis Cluster of LightStore drives, grown live by `add` (a new primary started on
//! the map one version up, then `lightstore-cluster add` moves its share of the slots).
//!
//! `up` builds the release drive, writes the cluster map (`D/cluster.toml`: N primaries with
//! the slots split evenly, R replicas per primary on the ports after them, deterministic node
//! ids), gives each drive its own copy of the map in its data directory `D/node-<port>` (a
//! drive rewrites its copy when a newer map is pushed with `LS.CLUSTERMAP`), starts the
//! drives in the background with a pid file and a log each, waits until each answers PING
//! and prints how to connect. `down` sends SIGTERM to each drive of the pid files, waits for
//! it to flush and exit, and leaves the data. No library dependencies: the map is written
//! as TOML text here and validated by each drive when it starts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Subcommand;

/// Number of Redis Cluster hash slots.
const SLOTS: usize = 16384;
/// How long a drive may take to answer PING after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a drive may take to flush and exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(90);
/// Name of a drive's pid file in its data directory.
const PID_FILE: &str = "lightstore.pid";
/// Name of the map file, in the cluster directory and in each drive's data directory.
const MAP_FILE: &str = "cluster.toml";

/// `cargo xtask cluster ...`.
#[derive(Subcommand)]
pub enum ClusterTask {
    /// Start N primaries (and R replicas of each) on loopback.
    Up {
        /// Number of primaries.
        n: usize,
        /// Replicas per primary.
        #[arg(long, default_value_t = 0)]
        replicas: usize,
        /// Port of the first drive; the others follow.
        #[arg(long, default_value_t = 7001)]
        base_port: u16,
        /// Directory for the map, data directories, pid files and logs.
        #[arg(long, default_value = "cluster")]
        dir: PathBuf,
        /// Capacity of each drive's simulated device (reserved on disk at format).
        #[arg(long, default_value = "2GiB")]
        capacity: String,
        /// Use this drive binary instead of building the release one.
        #[arg(long)]
        lightstore: Option<PathBuf>,
    },
    /// Add a primary to a running cluster and move an even share of the slots to it, live
    /// (`lightstore-cluster add`).
    Add {
        /// The directory given to `up`.
        #[arg(long, default_value = "cluster")]
        dir: PathBuf,
        /// The new drive's port (default: one above the highest in use); its replicas take
        /// the ports after it.
        #[arg(long)]
        port: Option<u16>,
        /// Replicas of the new drive (default: as many as the cluster's first primary has).
        #[arg(long)]
        replicas: Option<usize>,
        /// Capacity of the new drive's simulated device.
        #[arg(long, default_value = "2GiB")]
        capacity: String,
        /// Use this drive binary instead of building the release one.
        #[arg(long)]
        lightstore: Option<PathBuf>,
    },
    /// Stop the drives started by `up` (data is kept).
    Down {
        /// The directory given to `up`.
        #[arg(long, default_value = "cluster")]
        dir: PathBuf,
    },
}

/// One drive of the cluster.
struct NodePlan {
    id: String,
    port: u16,
    /// Inclusive slot range (primaries).
    slots: Option<(usize, usize)>,
    /// Index of the primary in the plan (replicas).
    replica_of: Option<usize>,
}

/// A deterministic 40-hex-digit node id that ends with the port in decimal.
fn node_id(port: u16) -> String {
    format!("{:034x}{port:06}", 0x15c1u32)
}

/// The slots split evenly into `n` inclusive ranges, in order (as `kvproto::cluster::even_ranges`).
fn even_ranges(n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .map(|i| (i * SLOTS / n, (i + 1) * SLOTS / n - 1))
        .collect()
}

fn plan(n: usize, replicas: usize, base_port: u16) -> anyhow::Result<Vec<NodePlan>> {
    if n == 0 || n > SLOTS {
        bail!("the number of primaries must be between 1 and {SLOTS}");
    }
    let total = n.checked_mul(replicas + 1).context("too many drives")?;
    let last = usize::from(base_port) + total - 1;
    if base_port == 0 || last > usize::from(u16::MAX) {
        bail!("ports {base_port}..={last} do not fit in 1..=65535");
    }
    let port = |i: usize| base_port + i as u16;
    let mut nodes: Vec<NodePlan> = even_ranges(n)
        .into_iter()
        .enumerate()
        .map(|(i, r)| NodePlan {
            id: node_id(port(i)),
            port: port(i),
            slots: Some(r),
            replica_of: None,
        })
        .collect();
    for p in 0..n {
        for r in 0..replicas {
            let i = n + p * replicas + r;
            nodes.push(NodePlan {
                id: node_id(port(i)),
                port: port(i),
                slots: None,
                replica_of: Some(p),
            });
        }
    }
    Ok(nodes)
}

/// The map's TOML (the format of `kvproto::cluster`).
fn map_toml(nodes: &[NodePlan], version: u64) -> String {
    let mut s = format!(
        "# LightStore cluster map, written by `cargo xtask cluster up`.\nversion = {version}\n"
    );
    for n in nodes {
        s.push_str(&format!(
            "\n[[node]]\nid = \"{}\"\naddr = \"127.0.0.1:{}\"\n",
            n.id, n.port
        ));
        if let Some((a, b)) = n.slots {
            s.push_str(&format!("slots = [[{a}, {b}]]\n"));
        }
        if let Some(p) = n.replica_of {
            s.push_str(&format!("replica_of = \"{}\"\n", nodes[p].id));
        }
    }
    s
}

/// Whether an existing map has exactly the planned nodes (ids and ports); slots may differ
/// (maps pushed since).
fn same_shape(map: &str, nodes: &[NodePlan]) -> bool {
    map.matches("[[node]]").count() == nodes.len()
        && nodes.iter().all(|n| {
            map.contains(&format!("\"{}\"", n.id))
                && map.contains(&format!("\"127.0.0.1:{}\"", n.port))
        })
}

fn node_dir(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("node-{port}"))
}

/// Whether process `pid` is alive and is a drive (so a recycled pid is left alone).
fn is_drive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) state ...": a zombie has exited.
    let Some((comm, rest)) = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')')) else {
        return false;
    };
    comm == "lightstore" && !rest.trim_start().starts_with('Z')
}

/// The drives with a pid file under `dir`: (data dir, pid).
fn pid_files(dir: &Path) -> Vec<(PathBuf, u32)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, u32)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("node-"))
        })
        .filter_map(|p| {
            let pid = std::fs::read_to_string(p.join(PID_FILE))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((p, pid))
        })
        .collect();
    out.sort();
    out
}

/// Sends PING and waits for `+PONG`.
fn answers_ping(addr: &SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The last lines of a drive's log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// The release drive next to this workspace's target directory.
fn release_binary() -> anyhow::Result<PathBuf> {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t),
        None => {
            // xtask runs from <target>/debug/xtask.
            let exe = std::env::current_exe().context("locating xtask")?;
            exe.parent()
                .and_then(Path::parent)
                .context("locating the target directory")?
                .to_path_buf()
        }
    };
    let bin = target.join("release").join("lightstore");
    if !bin.exists() {
        bail!("{} not found after the build", bin.display());
    }
    Ok(bin)
}

/// Runs `cargo xtask cluster ...`; `cargo` builds the release drive.
pub fn run(
    task: ClusterTask,
    cargo: impl Fn(&[&str], &[String]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match task {
        ClusterTask::Up {
            n,
            replicas,
            base_port,
            dir,
            capacity,
            lightstore,
        } => {
            if already_up(&dir) {
                return Ok(());
            }
            let bin = match lightstore {
                Some(b) => b,
                None => {
                    cargo(&["build", "--release", "-p", "firmware"], &[])?;
                    release_binary()?
                }
            };
            up(&bin, n, replicas, base_port, &dir, &capacity)
        }
        ClusterTask::Add {
            dir,
            port,
            replicas,
            capacity,
            lightstore,
        } => {
            let bin = match lightstore {
                Some(b) => b,
                None => {
                    cargo(&["build", "--release", "-p", "firmware"], &[])?;
                    release_binary()?
                }
            };
            cargo(
                &[
                    "build",
                    "--release",
                    "-p",
                    "adapters",
                    "--bin",
                    "lightstore-cluster",
                ],
                &[],
            )?;
            let tool = release_binary()?.with_file_name("lightstore-cluster");
            add(&bin, &tool, &dir, port, replicas, &capacity)
        }
        ClusterTask::Down { dir } => down(&dir),
    }
}

/// The newest map among the drives' copies under `dir` (drives rewrite theirs on each push):
/// its text and version.
fn newest_map(dir: &Path) -> anyhow::Result<(String, u64)> {
    let mut best: Option<(String, u64)> = None;
    for (data, _) in pid_files(dir) {
        let Ok(text) = std::fs::read_to_string(data.join(MAP_FILE)) else {
            continue;
        };
        let Some(v) = map_version(&text) else {
            continue;
        };
        if best.as_ref().is_none_or(|(_, b)| v > *b) {
            best = Some((text, v));
        }
    }
    best.with_context(|| format!("no drive of {} has a readable map", dir.display()))
}

/// The `version = N` of a map's TOML.
fn map_version(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("version"))
        .and_then(|r| r.trim().strip_prefix('='))
        .and_then(|v| v.trim().parse().ok())
}

/// How many replicas the first primary of the map `text` has (the cluster's shape, as `up`
/// lays it out: every primary the same).
fn replicas_per_primary(text: &str) -> usize {
    let Some(first) = text.lines().find_map(|l| {
        let v = l.trim().strip_prefix("id")?.trim().strip_prefix('=')?;
        Some(v.trim().trim_matches('"').to_string())
    }) else {
        return 0;
    };
    text.lines()
        .filter(|l| {
            l.trim()
                .strip_prefix("replica_of")
                .and_then(|r| r.trim().strip_prefix('='))
                .is_some_and(|v| v.trim().trim_matches('"') == first)
        })
        .count()
}

/// `text` one version up, with a primary without slots (on `port`) and `replicas` replicas
/// of it (on the ports after it) appended.
fn map_with_node(text: &str, port: u16, replicas: usize) -> anyhow::Result<String> {
    let version = map_version(text).context("the map has no version")?;
    let mut out = String::new();
    let mut bumped = false;
    for line in text.lines() {
        if !bumped && line.trim_start().starts_with("version") {
            out.push_str(&format!("version = {}\n", version + 1));
            bumped = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    let id = node_id(port);
    out.push_str(&format!(
        "\n[[node]]\nid = \"{id}\"\naddr = \"127.0.0.1:{port}\"\n"
    ));
    for r in 1..=replicas {
        let rport = u16::try_from(usize::from(port) + r).context("no port for a replica")?;
        out.push_str(&format!(
            "\n[[node]]\nid = \"{}\"\naddr = \"127.0.0.1:{rport}\"\nreplica_of = \"{id}\"\n",
            node_id(rport)
        ));
    }
    Ok(out)
}

/// Starts a drive on `port` (and `replicas` replicas of it on the ports after it; default:
/// the cluster's shape) with the map one version up that lists them, then has
/// `lightstore-cluster add` move its share of the slots to it.
fn add(
    bin: &Path,
    tool: &Path,
    dir: &Path,
    port: Option<u16>,
    replicas: Option<usize>,
    capacity: &str,
) -> anyhow::Result<()> {
    let running: Vec<(PathBuf, u32)> = pid_files(dir)
        .into_iter()
        .filter(|(_, pid)| is_drive(*pid))
        .collect();
    if running.is_empty() {
        bail!(
            "no cluster is up in {} (`cargo xtask cluster up N --dir {}` first)",
            dir.display(),
            dir.display()
        );
    }
    let highest = running
        .iter()
        .filter_map(|(d, _)| {
            d.file_name()?
                .to_str()?
                .strip_prefix("node-")?
                .parse::<u16>()
                .ok()
        })
        .max()
        .unwrap_or(7000);
    let port = match port {
        Some(p) => p,
        None => highest
            .checked_add(1)
            .context("no port above the highest in use")?,
    };
    let (text, _) = newest_map(dir)?;
    let replicas = replicas.unwrap_or_else(|| replicas_per_primary(&text));
    let ports: Vec<u16> = (0..=replicas)
        .map(|r| u16::try_from(usize::from(port) + r).context("no port for a replica"))
        .collect::<anyhow::Result<_>>()?;
    for p in &ports {
        if TcpListener::bind(("127.0.0.1", *p)).is_err() {
            bail!("port {p} is in use: pass --port");
        }
    }
    let id = node_id(port);
    let map = map_with_node(&text, port, replicas)?;
    // The replicas first, so that the primary, once it answers, has them ready.
    for p in ports.iter().rev() {
        start_joining(bin, dir, *p, &map, capacity)?;
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    println!(
        "started 127.0.0.1:{port} ({id}) and {replicas} replica(s); moving its share of the slots"
    );
    let status = Command::new(tool)
        .args(["add", &addr.to_string()])
        .status()
        .with_context(|| format!("running {}", tool.display()))?;
    if !status.success() {
        bail!(
            "lightstore-cluster add failed ({status}); the new drive(s) keep running with the slots moved so far, and the slots it was moving stay open (`CLUSTER SETSLOT <slot> STABLE` on the drives closes them); `cargo xtask cluster down --dir {}` stops everything",
            dir.display()
        );
    }
    Ok(())
}

/// Starts the drive of a joining node on `port` with `map` (which lists it) and waits
/// until it answers.
fn start_joining(
    bin: &Path,
    dir: &Path,
    port: u16,
    map: &str,
    capacity: &str,
) -> anyhow::Result<()> {
    let id = node_id(port);
    let data = node_dir(dir, port);
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let node_map = data.join(MAP_FILE);
    std::fs::write(&node_map, map).with_context(|| format!("writing {}", node_map.display()))?;
    let log_path = data.join("lightstore.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let child = spawn_drive(bin, port, &data, &node_map, &id, capacity, log)?;
    let pid = child.id();
    std::fs::write(data.join(PID_FILE), format!("{pid}\n"))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + START_TIMEOUT;
    while !answers_ping(&addr) {
        if !is_drive(pid) || Instant::now() > deadline {
            let _ = signal(pid, "-TERM");
            bail!(
                "the new drive on port {port} did not come up (log {}):\n{}",
                log_path.display(),
                log_tail(&log_path)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Whether drives of a cluster in `dir` are running (and says so).
fn already_up(dir: &Path) -> bool {
    let running = pid_files(dir)
        .into_iter()
        .filter(|(_, pid)| is_drive(*pid))
        .count();
    if running > 0 {
        println!(
            "the cluster in {} is already up ({running} drives running); `cargo xtask cluster down --dir {}` stops it",
            dir.display(),
            dir.display()
        );
    }
    running > 0
}

fn up(
    bin: &Path,
    n: usize,
    replicas: usize,
    base_port: u16,
    dir: &Path,
    capacity: &str,
) -> anyhow::Result<()> {
    if already_up(dir) {
        return Ok(());
    }
    let nodes = plan(n, replicas, base_port)?;
    for node in &nodes {
        if TcpListener::bind(("127.0.0.1", node.port)).is_err() {
            bail!(
                "port {} is in use: stop what listens there or pass --base-port",
                node.port
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let map = map_toml(&nodes, 1);
    let map_path = dir.join(MAP_FILE);
    if map_path.exists() {
        let old = std::fs::read_to_string(&map_path)
            .with_context(|| format!("reading {}", map_path.display()))?;
        if !same_shape(&old, &nodes) {
            bail!(
                "{} holds a cluster of another shape (nodes, ports): use another --dir, or delete it for a fresh cluster",
                dir.display()
            );
        }
        println!(
            "keeping the existing map {} (drives keep their own copies; delete the directory for a fresh cluster)",
            map_path.display()
        );
    } else {
        std::fs::write(&map_path, &map)
            .with_context(|| format!("writing {}", map_path.display()))?;
    }
    let mut started: Vec<(u16, u32, PathBuf)> = Vec::new();
    for node in &nodes {
        let data = node_dir(dir, node.port);
        std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
        let node_map = data.join(MAP_FILE);
        if !node_map.exists() {
            std::fs::write(&node_map, &map)
                .with_context(|| format!("writing {}", node_map.display()))?;
        }
        let log_path = data.join("lightstore.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let child = spawn_drive(bin, node.port, &data, &node_map, &node.id, capacity, log)?;
        let pid = child.id();
        std::fs::write(data.join(PID_FILE), format!("{pid}\n"))?;
        started.push((node.port, pid, log_path));
    }
    for (port, pid, log_path) in &started {
        let addr = SocketAddr::from(([127, 0, 0, 1], *port));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if answers_ping(&addr) {
                break;
            }
            if !is_drive(*pid) || Instant::now() > deadline {
                for (_, other, _) in &started {
                    let _ = signal(*other, "-TERM");
                }
                bail!(
                    "the drive on port {port} did not come up (log {}):\n{}\nthe drives started were sent SIGTERM",
                    log_path.display(),
                    log_tail(log_path)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    println!("LightStore cluster up in {}:", dir.display());
    for node in &nodes {
        let role = match (node.slots, node.replica_of) {
            (Some((a, b)), _) => format!("primary  slots {a}-{b}"),
            (None, Some(p)) => format!("replica of 127.0.0.1:{}", nodes[p].port),
            (None, None) => "no slots".into(),
        };
        println!("  127.0.0.1:{}  {}  {role}", node.port, node.id);
    }
    println!("map: {}", map_path.display());
    println!("connect: redis-cli -c -p {base_port}");
    println!("stop:    cargo xtask cluster down --dir {}", dir.display());
    Ok(())
}

/// Starts a cluster drive in the background on 127.0.0.1:`port` with its data in `data`, its
/// map at `map`, its output in `log`, and a process group of its own (a Ctrl-C at this
/// terminal does not stop it).
fn spawn_drive(
    bin: &Path,
    port: u16,
    data: &Path,
    map: &Path,
    id: &str,
    capacity: &str,
    log: std::fs::File,
) -> anyhow::Result<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    Command::new(bin)
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .arg("--data-dir")
        .arg(data)
        .arg("--cluster-config")
        .arg(map)
        .args(["--cluster-node-id", id, "--capacity", capacity])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

fn down(dir: &Path) -> anyhow::Result<()> {
    let drives = pid_files(dir);
    if drives.is_empty() {
        println!("no cluster drives have pid files in {}", dir.display());
        return Ok(());
    }
    let mut waiting = Vec::new();
    for (data, pid) in drives {
        if is_drive(pid) && signal(pid, "-TERM") {
            waiting.push((data, pid));
        } else {
            println!("{}: not running (stale pid {pid})", data.display());
            let _ = std::fs::remove_file(data.join(PID_FILE));
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    let mut failed = 0;
    for (data, pid) in waiting {
        while is_drive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_drive(pid) {
            failed += 1;
            println!(
                "{}: pid {pid} still running after {}s (not killed; its log is {})",
                data.display(),
                STOP_TIMEOUT.as_secs(),
                data.join("lightstore.log").display()
            );
        } else {
            let _ = std::fs::remove_file(data.join(PID_FILE));
            println!("{}: stopped (pid {pid})", data.display());
        }
    }
    if failed > 0 {
        bail!("{failed} drive(s) did not stop");
    }
    println!("data kept in {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_joining_node_bumps_the_map_and_is_appended_without_slots() {
        let nodes = plan(2, 0, 7001).unwrap();
        let text = map_toml(&nodes, 5);
        assert_eq!(map_version(&text), Some(5));
        let grown = map_with_node(&text, 7003, 0).unwrap();
        assert_eq!(map_version(&grown), Some(6));
        assert_eq!(grown.matches("[[node]]").count(), 3);
        assert!(grown.ends_with("addr = \"127.0.0.1:7003\"\n"), "{grown}");
        assert!(grown.contains("slots = [[8192, 16383]]"));
        assert_eq!(replicas_per_primary(&grown), 0);
    }

    #[test]
    fn a_joining_node_brings_as_many_replicas_as_asked() {
        let nodes = plan(2, 1, 7001).unwrap();
        let text = map_toml(&nodes, 2);
        assert_eq!(replicas_per_primary(&text), 1);
        let grown = map_with_node(&text, 7005, 1).unwrap();
        assert_eq!(grown.matches("[[node]]").count(), 6);
        assert!(
            grown.ends_with(&format!(
                "addr = \"127.0.0.1:7006\"\nreplica_of = \"{}\"\n",
                node_id(7005)
            )),
            "{grown}"
        );
    }

    #[test]
    fn plan_covers_every_slot_once_and_places_replicas_after_primaries() {
        let nodes = plan(3, 2, 7001).unwrap();
        assert_eq!(nodes.len(), 9);
        assert_eq!(nodes[0].slots, Some((0, 5460)));
        assert_eq!(nodes[2].slots, Some((10922, 16383)));
        assert_eq!(nodes[3].port, 7004);
        assert_eq!(nodes[3].replica_of, Some(0));
        assert_eq!(nodes[5].replica_of, Some(1));
        assert!(nodes
            .iter()
            .all(|n| n.id.len() == 40 && n.id.ends_with(&format!("{:06}", n.port))));
        let toml = map_toml(&nodes, 1);
        assert!(toml.contains("slots = [[5461, 10921]]"));
        assert!(same_shape(&toml, &nodes));
        assert!(!same_shape(&toml, &plan(3, 1, 7001).unwrap()));
        assert!(!same_shape(&toml, &plan(3, 2, 7002).unwrap()));
        assert!(plan(0, 0, 7001).is_err());
        assert!(plan(3, 0, 65534).is_err());
    }
}
