//! Test harness: builds and starts real `lightstore` drives and `lightstore-nbd` servers on
//! free ports and scratch directories, and finds the Debian tools the tests drive.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

/// Capacity of test devices (reserved at format: keep them small).
pub const TEST_CAPACITY: &str = "1GiB";

/// The `lightstore` drive binary of this build, built on first use.
///
/// `cargo xtask test` builds every test target first and names the drive it built in
/// `LIGHTSTORE_BIN`, which is used as it is. Otherwise (`cargo test -p adapters`) the first
/// caller runs `cargo build -p firmware --bin lightstore` into the same target directory
/// and profile as this test binary (a no-op when it is up to date).
pub fn lightstore_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("LIGHTSTORE_BIN").map(PathBuf::from) {
            assert!(
                bin.exists(),
                "LIGHTSTORE_BIN={} does not exist",
                bin.display()
            );
            return bin;
        }
        // target/<profile>/deps/<this test> -> target/<profile>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
        let target_dir = profile_dir.parent().unwrap().to_path_buf();
        let profile = profile_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "firmware", "--bin", "lightstore"])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target_dir);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let out = cmd.output().expect("running cargo build for the drive");
        let bin = profile_dir.join("lightstore");
        assert!(
            out.status.success() && bin.exists(),
            "building the lightstore drive failed ({}); {}:\n{}",
            out.status,
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
    .clone()
}

/// Starts `cmd` with stdout piped, waits for a line `<prefix>ADDR`, and returns the child
/// and ADDR.
fn spawn_ready(mut cmd: Command, prefix: &'static str, what: &str) -> (Child, SocketAddr) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(a) = line.strip_prefix(prefix) {
                let _ = tx.send(a.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(a) => (child, a.parse().unwrap()),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().ok();
            panic!("{what} did not become ready (exit: {status:?})");
        }
    }
}

/// A running drive; killed on drop.
pub struct Drive {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drive {
    /// Starts a drive on `data_dir` with extra flags.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Drive {
        let mut cmd = Command::new(lightstore_bin());
        cmd.args(["--port", "0", "--capacity", TEST_CAPACITY])
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            // Cluster drives start on placeholder addresses and warn about them.
            .env(
                "RUST_LOG",
                if extra.contains(&"--cluster-config") {
                    "error"
                } else {
                    "warn"
                },
            );
        let (child, addr) = spawn_ready(cmd, "lightstore ready on ", "lightstore");
        Drive { child, addr }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Drive {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `lightstore-nbd`; killed on drop.
pub struct Nbd {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Nbd {
    /// Starts `lightstore-nbd` on a free port with these arguments (`--drive ...`,
    /// `--volume ...`).
    pub fn start(args: &[String]) -> Nbd {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lightstore-nbd"));
        cmd.args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn");
        let (child, addr) = spawn_ready(cmd, "lightstore-nbd ready on ", "lightstore-nbd");
        Nbd { child, addr }
    }

    /// Starts it against one drive with `volumes` (`name:SIZE`).
    pub fn on_drive(drive: &Drive, volumes: &[&str]) -> Nbd {
        let mut args = vec!["--drive".to_string(), drive.addr.to_string()];
        for v in volumes {
            args.push("--volume".into());
            args.push((*v).to_string());
        }
        Nbd::start(&args)
    }

    /// Starts `lightstore-nbd serve` against one drive: it exports every volume stored on
    /// the drive.
    pub fn serve(drive: &Drive) -> Nbd {
        Nbd::start(&[
            "serve".to_string(),
            "--drive".into(),
            drive.addr.to_string(),
        ])
    }

    /// `nbd://127.0.0.1:PORT/name`.
    pub fn uri(&self, name: &str) -> String {
        format!("nbd://{}/{name}", self.addr)
    }

    /// Whether the server process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Nbd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `lightstore-nbd ARGS` (a `volume` subcommand) to completion and returns its
/// output, whatever the exit status.
pub fn nbd_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lightstore-nbd"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("running lightstore-nbd {args:?}: {e}"))
}

/// `lightstore-nbd volume ARGS --drive ADDR`, which must succeed; returns stdout.
pub fn volume_cmd(drive: SocketAddr, args: &[&str]) -> String {
    let mut all = vec!["volume"];
    all.extend_from_slice(args);
    let addr = drive.to_string();
    all.extend_from_slice(&["--drive", &addr]);
    let out = nbd_cli(&all);
    assert!(
        out.status.success(),
        "lightstore-nbd {all:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// True when every tool is installed; otherwise prints which are missing (and their Debian
/// package) and returns false, so the test can skip.
pub fn tools(test: &str, needed: &[(&str, &str)]) -> bool {
    let missing: Vec<String> = needed
        .iter()
        .filter(|(t, _)| !have(t))
        .map(|(t, p)| format!("{t} (Debian package {p})"))
        .collect();
    if missing.is_empty() {
        return true;
    }
    record_skip(
        "tool",
        test,
        &format!(
            "not installed: {}; `cargo xtask test` installs them",
            missing.join(", ")
        ),
    );
    false
}

/// Records a skipped test: printed, and appended to the file `LIGHTSTORE_SKIP_LOG` names
/// (`cargo xtask test` sets it, lists every skip after the run, and fails the run on a
/// `tool` skip). `kind`: `tool` (something installable is missing) or `environment` (the
/// machine cannot offer it: no FUSE, no loop devices, not root).
pub fn record_skip(kind: &str, test: &str, why: &str) {
    eprintln!("SKIPPED ({kind}) {test}: {why}");
    if let Some(path) = std::env::var_os("LIGHTSTORE_SKIP_LOG") {
        use std::io::Write as _;
        let line = format!("{kind}\tadapters\t{test}\t{why}\n");
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// Runs a command, panicking with its output unless it succeeds; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

/// A file of `len` pseudo-random bytes (seeded).
pub fn random_file(path: &Path, len: usize, seed: u64) {
    use rand::{RngCore, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    std::fs::write(path, data).unwrap();
}

/// Node id of the `i`th drive of a test cluster.
pub fn node_id(i: usize) -> String {
    format!("{:040x}", 0xad_0000 + i)
}

/// Whether this build of the drive has cluster mode (`--cluster-config`).
pub fn drive_has_cluster_mode() -> bool {
    let out = Command::new(lightstore_bin())
        .arg("--help")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("--cluster-config")
}

/// Sends one command on a fresh connection and returns the first reply line.
pub fn resp_call(addr: SocketAddr, args: &[&[u8]]) -> String {
    use std::io::{Read, Write};
    let mut buf = bytes::BytesMut::new();
    kvproto::encode_command(args, &mut buf);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&buf).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n") {
        if s.read(&mut b).unwrap() == 0 {
            break;
        }
        out.push(b[0]);
    }
    String::from_utf8_lossy(&out).trim_end().to_string()
}

/// Drives in cluster mode on free ports: `primaries` primaries splitting the slots evenly,
/// and `replicas` replicas of the first primary. The drives start on a map with placeholder
/// addresses (version 1), then get the map with their real addresses (version 2), which is
/// also written to `map_path` for routers.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub drives: Vec<Drive>,
    pub map: kvproto::cluster::ClusterMap,
    pub map_path: PathBuf,
    /// The drives' `requirepass`, if any.
    pub password: Option<String>,
}

/// The node specs of a test cluster on `addrs`.
pub fn cluster_specs(
    primaries: usize,
    replicas: usize,
    addrs: &[SocketAddr],
) -> Vec<kvproto::cluster::NodeSpec> {
    use kvproto::cluster::{even_ranges, NodeSpec};
    let mut out: Vec<NodeSpec> = even_ranges(primaries)
        .into_iter()
        .enumerate()
        .map(|(i, (a, b))| NodeSpec {
            id: node_id(i),
            addr: addrs[i],
            slots: vec![[u32::from(a), u32::from(b)]],
            replica_of: None,
        })
        .collect();
    for r in 0..replicas {
        out.push(NodeSpec {
            id: node_id(primaries + r),
            addr: addrs[primaries + r],
            slots: Vec::new(),
            replica_of: Some(node_id(0)),
        });
    }
    out
}

/// [`resp_call`] on a connection that first authenticates with `password` (when given).
pub fn resp_call_as(addr: SocketAddr, password: Option<&str>, args: &[&[u8]]) -> String {
    use std::io::{BufRead, BufReader, Write};
    let Some(pw) = password else {
        return resp_call(addr, args);
    };
    let mut buf = bytes::BytesMut::new();
    kvproto::encode_command(&[&b"AUTH"[..], pw.as_bytes()], &mut buf);
    kvproto::encode_command(args, &mut buf);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&buf).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), "+OK", "AUTH to {addr}");
    line.clear();
    r.read_line(&mut line).unwrap();
    line.trim_end().to_string()
}

impl Cluster {
    pub fn start(primaries: usize, replicas: usize) -> Cluster {
        Cluster::start_with(primaries, replicas, None)
    }

    /// [`Cluster::start`] with every drive requiring `password` (`--requirepass`).
    pub fn start_with(primaries: usize, replicas: usize, password: Option<&str>) -> Cluster {
        use kvproto::cluster::ClusterMap;
        let dir = tempfile::tempdir().unwrap();
        let total = primaries + replicas;
        let placeholders: Vec<SocketAddr> = (0..total)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 1 + i as u16)))
            .collect();
        let v1 = ClusterMap::new(1, cluster_specs(primaries, replicas, &placeholders))
            .unwrap()
            .to_toml();
        let drives: Vec<Drive> = (0..total)
            .map(|i| {
                let home = dir.path().join(format!("node-{i}"));
                std::fs::create_dir_all(&home).unwrap();
                let map = home.join("cluster.toml");
                std::fs::write(&map, &v1).unwrap();
                let id = node_id(i);
                let mut args = vec![
                    "--cluster-config",
                    map.to_str().unwrap(),
                    "--cluster-node-id",
                    &id,
                ];
                if let Some(pw) = password {
                    args.extend(["--requirepass", pw]);
                }
                Drive::start(&home.join("data"), &args)
            })
            .collect();
        let addrs: Vec<SocketAddr> = drives.iter().map(|d| d.addr).collect();
        let map = ClusterMap::new(2, cluster_specs(primaries, replicas, &addrs)).unwrap();
        let map_path = dir.path().join("router-map.toml");
        std::fs::write(&map_path, map.to_toml()).unwrap();
        let c = Cluster {
            dir,
            drives,
            map,
            map_path,
            password: password.map(str::to_string),
        };
        c.push(&c.map);
        c
    }

    /// Pushes `map` to every drive still running.
    pub fn push(&self, map: &kvproto::cluster::ClusterMap) {
        let text = map.to_toml();
        let version = map.version().to_string();
        for d in &self.drives {
            let r = resp_call_as(
                d.addr,
                self.password.as_deref(),
                &[b"LS.CLUSTERMAP", version.as_bytes(), text.as_bytes()],
            );
            assert_eq!(r, "+OK", "pushing map version {version} to {}", d.addr);
        }
    }
}
