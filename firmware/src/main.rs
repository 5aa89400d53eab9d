//! `lightstore`: the drive binary. It opens (or formats) the device, opens the engine on it,
//! and serves the Redis protocol with a fixed set of named threads:
//!
//! | thread | does |
//! |---|---|
//! | `lightstore` (main) | start-up; then waits for the others (on SIGPWR in plp mode it flushes the device first); closes the engine on the way out |
//! | `ls-net` | network receive and reply: accept, read, frame, connection commands, write replies; hot reads from DRAM, and in plp mode each loop turn's writes while `ls-writer` is idle |
//! | `ls-engine` | reads (GET, MGET, HGET, SCAN, ...), batched into parallel device reads |
//! | `ls-writer` | every write `ls-net` does not run itself (all of them in sync mode; in plp mode those of a turn while the writer is busy), and EXEC, group-committed; the expiry sweep; blocked pops |
//! | `lsm-poller` | the engine's device poller: completions of its reads and writes |
//! | `lsm-maint` | the engine's maintenance: memtable flushes, compactions, garbage collection |
//! | `ls-clustermap` | cluster mode only: writes pushed cluster maps (fsync) off `ls-net` |
//!
//! They are joined by `crossbeam` queues (net -> engine, net -> writer, both -> net with a
//! `mio` waker). A panic on any thread ends the process (`crash`). See docs/ARCHITECTURE.md.

mod acl;
mod allocator;
mod blocking;
mod cluster;
mod collections;
mod config;
mod crash;
mod exec;
mod fsck_record;
mod info;
mod keyspace;
mod lcs;
mod migrate;
mod net;
mod object;
mod queue;
mod rdb;
mod store;
mod tls;

use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, Release, TimingModel};
use kvproto::Limits;
use lsm::{Engine, EngineConfig};

use crate::config::{Args, DriveConfig, Durability, FsckArgs};
use crate::exec::ReplySink;
use crate::info::Metrics;
use crate::net::{Net, NetConfig, WAKER};
use crate::store::Store;

/// File name of the simulated device inside the data directory.
const SIM_DEVICE_FILE: &str = "device.img";
/// Jobs that may wait in each worker queue; when one is full, `ls-net` keeps the job in its
/// connection and stops reading that client until there is room (it never waits on a queue).
const QUEUE_DEPTH: usize = 65_536;
/// Environment variable for tests: a smaller worker queue depth, so full queues are common.
const QUEUE_DEPTH_ENV: &str = "LIGHTSTORE_QUEUE_DEPTH";

/// The device file a `--device` spec names (`sim`: the one in the data directory).
fn device_path(device: &str, data_dir: &Path) -> anyhow::Result<PathBuf> {
    Ok(match device {
        "sim" => data_dir.join(SIM_DEVICE_FILE),
        d => PathBuf::from(
            d.strip_prefix("file:")
                .with_context(|| format!("--device `{d}`: use sim or file:PATH"))?,
        ),
    })
}

fn open_device(cfg: &DriveConfig) -> anyhow::Result<Arc<Ftl>> {
    let timing: TimingModel = cfg.timing.parse().map_err(anyhow::Error::msg)?;
    if cfg.device == "sim" {
        std::fs::create_dir_all(&cfg.data_dir)
            .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
    }
    let path = device_path(&cfg.device, &cfg.data_dir)?;
    let backend = Backend::File(path.clone());
    let geometry = match Ftl::probe(&backend) {
        Ok(g) => g,
        Err(_) if !path.exists() => Geometry::for_drive(cfg.capacity)?,
        Err(hwftl_sim::DeviceError::NotFormatted) => Geometry::for_drive(cfg.capacity)?,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut config = DeviceConfig::new(geometry);
    config.timing = timing;
    // A timing model delays completions on the wall clock, as the card it models would: the
    // drive then serves at that card's speed (the virtual clock is for deterministic tests).
    if timing.nand().is_some() {
        config.release = Release::WallClock;
    }
    let dev = Ftl::open_or_format(&backend, config)
        .with_context(|| format!("opening the device at {}", path.display()))?;
    tracing::info!(
        device = %dev.describe(),
        geometry = %geometry,
        capacity_mib = geometry.capacity_bytes() >> 20,
        timing = %timing,
        "device open"
    );
    Ok(Arc::new(dev))
}

/// A TLS file setting as CONFIG GET reports it (empty when unset).
fn tls_path(cfg: &DriveConfig, f: impl Fn(&tls::TlsSettings) -> Option<&PathBuf>) -> String {
    cfg.tls
        .as_ref()
        .and_then(f)
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Binds a listener on the drive's address at `port`.
fn listen(cfg: &DriveConfig, port: u16) -> anyhow::Result<mio::net::TcpListener> {
    let addr = (cfg.bind.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}:{port}", cfg.bind))?
        .next()
        .with_context(|| format!("{}:{port} resolves to no address", cfg.bind))?;
    mio::net::TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))
}

fn reported_settings(
    cfg: &DriveConfig,
    limits: &Limits,
    maxclients: usize,
) -> Vec<(String, String)> {
    let mut v = vec![
        ("bind".into(), cfg.bind.clone()),
        ("port".into(), cfg.port.to_string()),
        ("maxclients".into(), maxclients.to_string()),
        (
            "protected-mode".into(),
            if cfg.protected_mode { "yes" } else { "no" }.into(),
        ),
        (
            "requirepass".into(),
            cfg.requirepass.clone().unwrap_or_default(),
        ),
        (
            "aclfile".into(),
            cfg.aclfile
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        ),
        ("tls-port".into(), cfg.tls_port.to_string()),
        (
            "tls-cert-file".into(),
            tls_path(cfg, |t| Some(&t.cert_file)),
        ),
        ("tls-key-file".into(), tls_path(cfg, |t| Some(&t.key_file))),
        (
            "tls-ca-cert-file".into(),
            tls_path(cfg, |t| t.ca_cert_file.as_ref()),
        ),
        (
            "tls-auth-clients".into(),
            cfg.tls
                .as_ref()
                .map_or("no", |t| t.auth_clients.as_str())
                .into(),
        ),
        ("dir".into(), cfg.data_dir.display().to_string()),
        ("save".into(), String::new()),
        ("appendonly".into(), "no".into()),
        ("databases".into(), "1".into()),
        ("timeout".into(), cfg.liveness.timeout_secs.to_string()),
        (
            "tcp-keepalive".into(),
            cfg.liveness.tcp_keepalive_secs.to_string(),
        ),
        ("maxmemory".into(), "0".into()),
        ("entry-value-max".into(), cfg.entry_value_max.to_string()),
        (
            "plp-ring-after-ms".into(),
            cfg.plp_ring_after.as_millis().to_string(),
        ),
        (
            "cluster-enabled".into(),
            if cfg.cluster_config.is_some() {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
        ("proto-max-bulk-len".into(), limits.max_bulk_len.to_string()),
        (
            "client-query-buffer-limit".into(),
            cfg.buffers.query_buffer.to_string(),
        ),
        (
            "client-output-buffer-limit".into(),
            cfg.buffers.output_reported(),
        ),
        (
            "client-pending-limit".into(),
            cfg.buffers.pending.to_string(),
        ),
        ("client-query-budget".into(), cfg.buffers.budget.to_string()),
        (
            "slowlog-log-slower-than".into(),
            cfg.slowlog_log_slower_than.to_string(),
        ),
        ("slowlog-max-len".into(), cfg.slowlog_max_len.to_string()),
        (
            "latency-monitor-threshold".into(),
            cfg.latency_monitor_threshold.to_string(),
        ),
    ];
    v.push((
        "durability".into(),
        match cfg.durability {
            Durability::Sync => "sync",
            Durability::Plp => "plp",
        }
        .into(),
    ));
    v
}

/// Cluster mode: loads the map and finds this node (before the device opens, so a bad map
/// fails fast).
fn load_cluster(
    cfg: &DriveConfig,
    local: std::net::SocketAddr,
) -> anyhow::Result<Option<Arc<cluster::Cluster>>> {
    let Some(path) = &cfg.cluster_config else {
        anyhow::ensure!(
            cfg.cluster_node_id.is_none(),
            "--cluster-node-id needs --cluster-config"
        );
        return Ok(None);
    };
    let c = cluster::Cluster::load(path, cfg.cluster_node_id.as_deref(), local)
        .with_context(|| format!("cluster mode (--cluster-config {})", path.display()))?;
    let view = c.view();
    tracing::info!(
        node = view.my_id(),
        version = view.map().version(),
        nodes = view.map().nodes().len(),
        "cluster mode"
    );
    Ok(Some(Arc::new(c)))
}

fn spawn<F: FnOnce() + Send + 'static>(
    name: &str,
    f: F,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .with_context(|| format!("starting thread {name}"))
}

/// `lightstore fsck`: opens the device read-only (its owner lock taken, so a running drive
/// makes it fail at once), checks the store, prints the report. `Ok(true)` when clean.
fn run_fsck(args: &FsckArgs, top: &Args) -> anyhow::Result<bool> {
    let data_dir = args
        .data_dir
        .clone()
        .or_else(|| top.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR));
    let device = args
        .device
        .clone()
        .or_else(|| top.device.clone())
        .unwrap_or_else(|| "sim".into());
    let path = device_path(&device, &data_dir)?;
    anyhow::ensure!(path.exists(), "no device at {}", path.display());
    let backend = Backend::File(path.clone());
    let geometry = Ftl::probe(&backend).with_context(|| format!("opening {}", path.display()))?;
    let dev = Ftl::open_read_only(&backend, DeviceConfig::new(geometry))
        .with_context(|| format!("opening the device at {} read-only", path.display()))?;
    let dev = Arc::new(dev);
    println!("lightstore fsck {} ({geometry})", path.display());
    let report = Engine::fsck(
        dev.clone() as Arc<dyn AppendDevice>,
        store::engine_config(EngineConfig::default()),
    )
    .context("checking the store")?;
    println!("{report}");
    if let Ok(dev) = Arc::try_unwrap(dev) {
        dev.close().context("closing the device")?;
    }
    // Recorded for the drive's INFO; the check's outcome stands if the record cannot be
    // written.
    let record = fsck_record::FsckRecord::now(&path, report.findings.len() as u64);
    if data_dir.is_dir() {
        if let Err(e) = record.save(&data_dir) {
            eprintln!("lightstore fsck: the result is not recorded: {e}");
        }
    } else {
        eprintln!(
            "lightstore fsck: the result is not recorded: no data directory at {}",
            data_dir.display()
        );
    }
    Ok(report.is_clean())
}

/// The last `lightstore fsck` of the drive's device (see `fsck_record`), logged.
fn last_fsck(cfg: &DriveConfig) -> fsck_record::LastFsck {
    let last = device_path(&cfg.device, &cfg.data_dir)
        .map_err(|e| e.to_string())
        .and_then(|dev| fsck_record::load(&cfg.data_dir, &dev).map_err(|e| e.to_string()));
    match last {
        Ok(last) => {
            tracing::info!(last_fsck = %last, "last offline check");
            last
        }
        Err(e) => {
            tracing::warn!("the last offline check is unknown: {e}");
            fsck_record::LastFsck::Unknown
        }
    }
}

/// How often the main thread looks at the power-fail flag while the drive runs.
const POWER_FAIL_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// SIGTERM and SIGINT raise the shutdown flag; SIGPWR (a UPS daemon's or the card's
/// capacitor power-fail warning) raises `power_fail`, which [`wait_for_net`] answers.
fn watch_signals(shutdown: &Arc<AtomicBool>, power_fail: &Arc<AtomicBool>) -> anyhow::Result<()> {
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, shutdown.clone()).context("installing signal handlers")?;
    }
    signal_hook::flag::register(libc::SIGPWR, power_fail.clone())
        .context("installing signal handlers")?;
    Ok(())
}

/// Waits for the network thread to end. On the power-fail signal, in `plp` mode the
/// acknowledged writes still in DRAM are landed and the device's write cache flushed FIRST
/// ([`lsm::Engine::sync`]), before the shutdown flag is raised and the queues drain; then
/// the drive stops as on SIGTERM.
fn wait_for_net(
    net_thread: std::thread::JoinHandle<()>,
    power_fail: &AtomicBool,
    shutdown: &AtomicBool,
    store: &Store,
    plp: bool,
) {
    while !net_thread.is_finished() {
        if power_fail.swap(false, Ordering::AcqRel) {
            if plp {
                let started = std::time::Instant::now();
                match store.engine().sync() {
                    Ok(()) => tracing::warn!(
                        flush_ms = started.elapsed().as_millis() as u64,
                        "power-fail signal: acknowledged writes landed, device write cache \
                         flushed; stopping"
                    ),
                    Err(e) => tracing::error!(
                        "power-fail signal: making acknowledged writes durable failed: {e}; \
                         stopping"
                    ),
                }
            } else {
                tracing::warn!("power-fail signal; stopping");
            }
            shutdown.store(true, Ordering::Release);
        }
        std::thread::sleep(POWER_FAIL_POLL);
    }
    let _ = net_thread.join();
}

/// Sends log lines to stderr in `format` (`RUST_LOG` filters them; default `info`).
fn init_logging(format: config::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colour codes only on a terminal: a log file stays plain text.
        config::LogFormat::Text => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        config::LogFormat::Json => lines.json().with_current_span(false).init(),
    }
}

fn main() -> anyhow::Result<()> {
    allocator::tune();
    let mut args = Args::parse();
    if let Some(config::Command::Fsck(f)) = args.command.take() {
        init_logging(config::LogFormat::Text);
        let code = match run_fsck(&f, &args) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("lightstore fsck: {e:#}");
                2
            }
        };
        std::process::exit(code);
    }
    // Settings first (a bad one is an error on stderr, before any log line), then the log
    // in the format they ask for.
    let cfg = DriveConfig::resolve(args)?;
    init_logging(cfg.log_format);
    crash::install();
    // Before anything opens files: the clients' descriptors must fit.
    let fds = net::limits::fit_open_files(cfg.maxclients).map_err(anyhow::Error::msg)?;
    tracing::info!(
        maxclients = fds.maxclients,
        open_files_limit = fds.nofile,
        "client limit"
    );
    let users = Arc::new(
        acl::Users::load(cfg.requirepass.as_deref(), cfg.aclfile.as_deref())
            .context("loading the users")?,
    );
    let tls_config = cfg
        .tls
        .as_ref()
        .map(tls::server_config)
        .transpose()
        .context("setting up TLS")?;
    // Bind before the (possibly long) recovery so a port clash fails fast. With a TLS port,
    // port 0 turns plain TCP off (Redis's meaning); without one it asks for any free port.
    let listener = if cfg.port == 0 && cfg.tls_port != 0 {
        None
    } else {
        Some(listen(&cfg, cfg.port)?)
    };
    let tls_listener = if cfg.tls_port == 0 {
        None
    } else {
        Some(listen(&cfg, cfg.tls_port)?)
    };
    let tls_local = tls_listener
        .as_ref()
        .map(mio::net::TcpListener::local_addr)
        .transpose()
        .context("reading the TLS listening address")?;
    let local = match (&listener, tls_local) {
        (Some(l), _) => l.local_addr().context("reading the listening address")?,
        (None, Some(a)) => a,
        (None, None) => anyhow::bail!("no port to listen on"),
    };
    let cluster = load_cluster(&cfg, local)?;
    let dev = open_device(&cfg)?;
    let started = std::time::Instant::now();
    let engine = Engine::open(
        dev.clone() as Arc<dyn AppendDevice>,
        store::engine_config(EngineConfig {
            // plp: the device's write cache is power-protected; no flush per batch.
            flush_writes: cfg.durability == Durability::Sync,
            // plp: the drive's DRAM is power-protected too: acknowledged once in the
            // memtable and the landing buffer (SIGPWR lands it: `wait_for_net`).
            ack_from_dram: cfg.durability == Durability::Plp,
            compaction_moves_values: cfg.ablations.value_compaction,
            uncached_keytables: cfg.ablations.uncached_keytables,
            read_only_recovery: cfg.recover_read_only,
            value_cache_bytes: cfg.value_cache_bytes,
            entry_value_max: cfg.entry_value_max,
            ..EngineConfig::default()
        }),
    )
    .context("opening the engine")?;
    let store = Arc::new(Store::open(engine).context("loading the expiry index")?);
    tracing::info!(
        recovery_ms = started.elapsed().as_millis() as u64,
        replayed = store.engine().stats().replayed_records,
        "engine open"
    );

    let shutdown = Arc::new(AtomicBool::new(false));
    let power_fail = Arc::new(AtomicBool::new(false));
    watch_signals(&shutdown, &power_fail)?;
    let mut metrics = Metrics::new(local.port(), store.engine().read_copy_counter());
    metrics.last_fsck = last_fsck(&cfg);
    let metrics = Arc::new(metrics);
    metrics
        .cluster_enabled
        .store(cluster.is_some(), std::sync::atomic::Ordering::Relaxed);
    let poll = mio::Poll::new().context("creating the poll")?;
    let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER).context("creating the waker")?);
    let ablate = cfg.ablations;
    if ablate != config::Ablations::default() {
        tracing::warn!(
            ?ablate,
            "design features turned off for an ablation benchmark"
        );
    }
    let kind = if ablate.locked_queues {
        queue::QueueKind::Locked
    } else {
        queue::QueueKind::LockFree
    };
    let depth = std::env::var(QUEUE_DEPTH_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&d| d > 0)
        .unwrap_or(QUEUE_DEPTH);
    let (engine_tx, engine_rx) = queue::bounded(kind, depth);
    let (writer_tx, writer_rx) = queue::bounded(kind, depth);
    let (reply_tx, reply_rx) = queue::unbounded(kind);
    let sink = ReplySink {
        tx: reply_tx,
        waker,
        woken: Arc::new(AtomicBool::new(false)),
        copy_values: ablate.copy_values.then(|| metrics.clone()),
    };
    let limits = Limits {
        max_bulk_len: cfg.proto_max_bulk_len,
        ..Limits::default()
    };
    let block_handles = blocking::BlockHandles::default();
    let net_cfg = NetConfig {
        users,
        tls: tls_config,
        maxclients: fds.maxclients,
        protected_mode: cfg.protected_mode,
        buffers: cfg.buffers,
        liveness: cfg.liveness,
        limits,
        reported: reported_settings(&cfg, &limits, fds.maxclients),
        cluster,
        copy_values: ablate.copy_values,
        // Not with keytable lookups on the device (an ablation): building a group there
        // would read pages on the network thread.
        inline_writes: cfg.durability == Durability::Plp
            && !ablate.no_inline_writes
            && !ablate.copy_values
            && !ablate.uncached_keytables,
        slowlog_slower_than_usec: cfg.slowlog_log_slower_than,
        slowlog_max_len: cfg.slowlog_max_len,
        latency_monitor_threshold_ms: cfg.latency_monitor_threshold,
        ring_after: cfg.plp_ring_after,
        block_handles: block_handles.clone(),
    };
    let net = Net::new(
        poll,
        listener,
        tls_listener,
        engine_tx,
        writer_tx,
        reply_rx,
        store.clone(),
        metrics.clone(),
        shutdown.clone(),
        net_cfg,
        sink.clone(),
    )
    .context("starting the network loop")?;

    let engine_thread = {
        let (store, metrics, sink) = (store.clone(), metrics.clone(), sink.clone());
        spawn("ls-engine", move || {
            exec::engine_loop(&store, &metrics, &engine_rx, &sink);
        })?
    };
    let writer_thread = {
        let (store, metrics) = (store.clone(), metrics.clone());
        spawn("ls-writer", move || {
            exec::writer_loop(&store, &metrics, &writer_rx, &sink, &block_handles);
        })?
    };
    let net_thread = spawn("ls-net", move || {
        if let Err(e) = net.run() {
            tracing::error!("network loop failed: {e}");
        }
    })?;
    if let Some(a) = tls_local {
        tracing::info!(%a, "ready to accept TLS connections");
        println!("lightstore tls ready on {a}");
    }
    crash::start_fault_if_asked();
    tracing::info!(%local, "ready to accept connections");
    // Printed for scripts and tests waiting for the drive (with the real port for --port 0;
    // the TLS address when plain TCP is off).
    println!("lightstore ready on {local}");

    wait_for_net(
        net_thread,
        &power_fail,
        &shutdown,
        &store,
        cfg.durability == Durability::Plp,
    );
    tracing::info!("shutting down: finishing queued writes");
    // The network thread dropped the queue senders: the workers drain and stop.
    let _ = engine_thread.join();
    let _ = writer_thread.join();
    let store = Arc::try_unwrap(store)
        .map_err(|_| anyhow::anyhow!("the store is still in use at shutdown"))?;
    store
        .into_engine()
        .close()
        .context("flushing the engine at shutdown")?;
    if let Ok(dev) = Arc::try_unwrap(dev) {
        dev.close().context("closing the device")?;
    }
    tracing::info!("bye");
    Ok(())
}
