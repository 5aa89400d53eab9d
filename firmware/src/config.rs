//! The drive's settings: command-line flags (clap), an optional TOML file (`--config`), and
//! defaults sensible for a laptop run. A flag wins over the file, the file over the default.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde::Deserialize;

use crate::net::limits::{OutputLimit, DEFAULT_PENDING_LIMIT, DEFAULT_QUERY_BUDGET};
use crate::net::{BufferLimits, LivenessConfig};
use crate::tls::{ClientAuth, TlsError, TlsSettings};

/// Address the drive listens on by default (loopback only).
pub const DEFAULT_BIND: &str = "127.0.0.1";
/// Port the drive listens on by default (Redis's).
pub const DEFAULT_PORT: u16 = 6379;
/// Directory holding the simulated device by default.
pub const DEFAULT_DATA_DIR: &str = "data";
/// Capacity of a newly formatted simulated device (a file whose blocks are reserved at format).
pub const DEFAULT_CAPACITY: &str = "8GiB";
/// Most clients connected at once (Redis's default).
pub const DEFAULT_MAX_CLIENTS: usize = 10_000;
/// DRAM for the value cache by default: 64 MiB, about two thirds of the 100 MiB the drive
/// budgets for everything but its keytables (DESIGN.md, section 8).
pub const DEFAULT_VALUE_CACHE_SIZE: &str = "64MiB";
/// Smallest `proto-max-bulk-len` and `client-query-buffer-limit` accepted (Redis's floor).
pub const MIN_BUFFER_SETTING: usize = 1 << 20;

/// Command-line flags; every one can also be set in the `--config` file.
#[derive(Parser, Debug, Default)]
#[command(
    name = "lightstore",
    version,
    about = "LightStore network-attached key-value drive (serves the Redis protocol)"
)]
pub struct Args {
    /// TOML file with any of the settings below (flags override it).
    #[arg(long, help_heading = "Server")]
    pub config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, help_heading = "Server")]
    pub bind: Option<String>,
    /// TCP port.
    #[arg(long, help_heading = "Server")]
    pub port: Option<u16>,
    /// Directory holding the simulated device.
    #[arg(long, help_heading = "Device and durability")]
    pub data_dir: Option<PathBuf>,
    /// `sim` (a device file in the data directory) or `file:PATH` (a file or raw block device).
    #[arg(long, help_heading = "Device and durability")]
    pub device: Option<String>,
    /// Logical capacity when formatting a new device, e.g. 512MiB, 8GiB.
    #[arg(long, help_heading = "Device and durability")]
    pub capacity: Option<String>,
    /// NAND timing model: none, paper-card, or custom:READ,PROGRAM,ERASE,XFER,WXFER (ns).
    #[arg(long, help_heading = "Device and durability")]
    pub timing: Option<String>,
    /// `sync` (a write is acknowledged once durable: on the device and out of its volatile
    /// write cache) or `plp` (the drive's DRAM and the device's write cache are
    /// power-protected, as on the paper's card: a write is acknowledged once it is in the
    /// memtable and the write buffer, before its pages reach the device; SIGPWR lands the
    /// buffer, flushes the device and stops the drive; a kill -9 can lose what had not
    /// landed).
    #[arg(long, help_heading = "Device and durability")]
    pub durability: Option<String>,
    /// Password of the `default` user, sent with AUTH (none or empty: no password, and
    /// protected mode accepts only loopback clients).
    #[arg(long, help_heading = "Security")]
    pub requirepass: Option<String>,
    /// Users file in Redis's ACL file syntax (`user <name> on|off >password #sha256 nopass
    /// ~* &* +@all -@write ...`; see docs/SECURITY.md for the supported subset). Excludes
    /// `--requirepass`.
    #[arg(long, help_heading = "Security")]
    pub aclfile: Option<PathBuf>,
    /// TLS port, served beside `--port` (0 or absent: no TLS). With a TLS port, `--port 0`
    /// turns plain TCP off, as in Redis.
    #[arg(long, help_heading = "Security")]
    pub tls_port: Option<u16>,
    /// The server's certificate chain (PEM), for `--tls-port`.
    #[arg(long, help_heading = "Security")]
    pub tls_cert_file: Option<PathBuf>,
    /// The server's private key (PEM), for `--tls-port`.
    #[arg(long, help_heading = "Security")]
    pub tls_key_file: Option<PathBuf>,
    /// CA certificates (PEM) that sign client certificates.
    #[arg(long, help_heading = "Security")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Client certificates: no, optional or yes (default: yes when a CA is given, else no).
    #[arg(long, help_heading = "Security")]
    pub tls_auth_clients: Option<String>,
    /// Most clients connected at once.
    #[arg(long, help_heading = "Server")]
    pub maxclients: Option<usize>,
    /// Refuse non-loopback clients while no password is set (yes/no).
    #[arg(long, help_heading = "Security")]
    pub protected_mode: Option<String>,
    /// Redis Cluster mode: the cluster map (TOML: version, `[[node]]` id/addr/slots/replica_of;
    /// see docs/CLUSTER.md). The drive serves only its slots and rewrites this file
    /// when a newer map is pushed with `LS.CLUSTERMAP`.
    #[arg(long, help_heading = "Cluster")]
    pub cluster_config: Option<PathBuf>,
    /// This drive's node id in the cluster map (default: the node whose address is the
    /// listening address).
    #[arg(long, help_heading = "Cluster")]
    pub cluster_node_id: Option<String>,
    /// Open a device whose value log is damaged (the drive refused to start with "the value
    /// log is damaged") read-only: damaged batches are skipped, nothing on the device is
    /// written or trimmed, and every write is refused with a READONLY error, so the data
    /// can be copied off.
    #[arg(long, help_heading = "Device and durability")]
    pub recover_read_only: bool,
    /// DRAM for the value cache (hot value pages served without a device read), e.g.
    /// 64MiB; 0 turns it off.
    #[arg(long, help_heading = "Memory")]
    pub value_cache_size: Option<String>,
    /// Values of at most this many bytes are also held in their keytable entries in DRAM,
    /// so reading one never costs a device read (default 64; 0: none; at most 4096). Each
    /// held value costs its length + ~4 bytes of DRAM (INFO `entry_value_bytes`).
    #[arg(long, help_heading = "Memory")]
    pub entry_value_max: Option<usize>,
    /// Close a client idle for this many seconds (0: never, the default).
    #[arg(long, help_heading = "Server")]
    pub timeout: Option<u64>,
    /// plp mode: longest the pages of writes run on the network thread are held in DRAM
    /// before they are handed to the device together, in milliseconds (default 4; 0: at
    /// once; at most 20). Replies never wait for it; it bounds what a crash of the process
    /// (not a power cut, which plp covers) can lose, against the CPU and the pages each
    /// hand-over costs (each seals the shared page small records are packed into).
    #[arg(long, help_heading = "Device and durability")]
    pub plp_ring_after_ms: Option<u64>,
    /// SLOWLOG: log commands that take at least this many microseconds from dispatch to
    /// reply (default 10000; 0: every command; negative: none).
    #[arg(long, allow_hyphen_values = true, help_heading = "Diagnostics")]
    pub slowlog_log_slower_than: Option<i64>,
    /// SLOWLOG: entries kept (default 128).
    #[arg(long, help_heading = "Diagnostics")]
    pub slowlog_max_len: Option<usize>,
    /// LATENCY: record commands that take at least this many milliseconds from dispatch to
    /// reply (default 0: off).
    #[arg(long, help_heading = "Diagnostics")]
    pub latency_monitor_threshold: Option<u64>,
    /// TCP keepalive: first probe after this many idle seconds (default 300; 0: off).
    #[arg(long, help_heading = "Server")]
    pub tcp_keepalive: Option<u32>,
    /// Log lines on stderr: `text` (colours only on a terminal; the default) or `json` (one
    /// object per line, for a log collector).
    #[arg(long, help_heading = "Server")]
    pub log_format: Option<String>,
    /// Largest bulk argument a client may send (default 512MiB).
    #[arg(long, help_heading = "Client limits")]
    pub proto_max_bulk_len: Option<String>,
    /// Unframed bytes a client may hold; over it the client is disconnected (default 1GiB).
    #[arg(long, help_heading = "Client limits")]
    pub client_query_buffer_limit: Option<String>,
    /// Bytes of a client's requests read and not yet answered above which it is not read
    /// until replies go out (default 64MiB).
    #[arg(long, help_heading = "Client limits")]
    pub client_pending_limit: Option<String>,
    /// Drive-wide bytes of buffered requests (every client's query buffer and pending
    /// requests) above which no client is read until it frees (default 256MiB).
    #[arg(long, help_heading = "Client limits")]
    pub client_query_budget: Option<String>,
    /// Output limit of normal clients, `normal HARD SOFT SECONDS` as Redis's
    /// (default `normal 1gb 256mb 60`; 0 turns a limit off).
    #[arg(long, help_heading = "Client limits")]
    pub client_output_buffer_limit: Option<String>,
    /// Benchmarks only: turn design features off to measure what each buys (the paper's
    /// Figure 12), comma-separated: `zero-copy` (values are copied once more on each side),
    /// `lock-free-queues` (the threads' queues become mutex-and-condvar queues),
    /// `keytable-cache` (each lookup reads its keytable page from the device),
    /// `metadata-compaction` (compaction rewrites the values it keeps) and `inline-writes`
    /// (plp mode: every write goes to the writer thread, none runs on the network thread).
    #[arg(long, help_heading = "Benchmarks")]
    pub ablate: Option<String>,
    /// Something else than running the drive (none: run the drive).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands of the drive binary.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check a device offline (no drive may hold it): the manifest, every keytable page and
    /// pointer, every value-log page and checksum, the garbage counts. Nothing is written.
    /// Exits 0 when clean, 1 with the problems found, 2 when the check cannot run (the
    /// device is in use, missing, or not a LightStore device).
    Fsck(FsckArgs),
}

/// Flags of `lightstore fsck` (the device is found as the drive finds it).
#[derive(clap::Args, Debug, Default)]
pub struct FsckArgs {
    /// Directory holding the simulated device.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// `sim` (a device file in the data directory) or `file:PATH` (a file or raw block device).
    #[arg(long)]
    pub device: Option<String>,
}

/// The settings file: the same keys as the flags, in kebab or snake case.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    bind: Option<String>,
    port: Option<u16>,
    #[serde(alias = "data_dir")]
    data_dir: Option<PathBuf>,
    device: Option<String>,
    capacity: Option<String>,
    timing: Option<String>,
    durability: Option<String>,
    requirepass: Option<String>,
    aclfile: Option<PathBuf>,
    #[serde(alias = "tls_port")]
    tls_port: Option<u16>,
    #[serde(alias = "tls_cert_file")]
    tls_cert_file: Option<PathBuf>,
    #[serde(alias = "tls_key_file")]
    tls_key_file: Option<PathBuf>,
    #[serde(alias = "tls_ca_cert_file")]
    tls_ca_cert_file: Option<PathBuf>,
    #[serde(alias = "tls_auth_clients")]
    tls_auth_clients: Option<String>,
    maxclients: Option<usize>,
    #[serde(alias = "protected_mode")]
    protected_mode: Option<bool>,
    #[serde(alias = "cluster_config")]
    cluster_config: Option<PathBuf>,
    #[serde(alias = "cluster_node_id")]
    cluster_node_id: Option<String>,
    ablate: Option<String>,
    #[serde(alias = "recover_read_only")]
    recover_read_only: Option<bool>,
    #[serde(alias = "value_cache_size")]
    value_cache_size: Option<String>,
    #[serde(alias = "entry_value_max")]
    entry_value_max: Option<usize>,
    timeout: Option<u64>,
    #[serde(alias = "slowlog_log_slower_than")]
    slowlog_log_slower_than: Option<i64>,
    #[serde(alias = "slowlog_max_len")]
    slowlog_max_len: Option<usize>,
    #[serde(alias = "latency_monitor_threshold")]
    latency_monitor_threshold: Option<u64>,
    #[serde(alias = "plp_ring_after_ms")]
    plp_ring_after_ms: Option<u64>,
    #[serde(alias = "tcp_keepalive")]
    tcp_keepalive: Option<u32>,
    #[serde(alias = "proto_max_bulk_len")]
    proto_max_bulk_len: Option<String>,
    #[serde(alias = "client_query_buffer_limit")]
    client_query_buffer_limit: Option<String>,
    #[serde(alias = "client_pending_limit")]
    client_pending_limit: Option<String>,
    #[serde(alias = "client_query_budget")]
    client_query_budget: Option<String>,
    #[serde(alias = "client_output_buffer_limit")]
    client_output_buffer_limit: Option<String>,
    #[serde(alias = "log_format")]
    log_format: Option<String>,
}

/// Design features turned off for the ablation benchmark (all `false` in normal operation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)]
pub struct Ablations {
    /// Copy values once more on the way in and out (no zero copy).
    pub copy_values: bool,
    /// Mutex-and-condvar queues between the threads instead of lock-free ones.
    pub locked_queues: bool,
    /// Compaction rewrites the values of the entries it keeps.
    pub value_compaction: bool,
    /// Lookups read their keytable page from the device (bloom filters and a sparse page
    /// index stay in DRAM).
    pub uncached_keytables: bool,
    /// plp mode: every write goes through the writer thread (none runs on the network
    /// thread while the writer is idle).
    pub no_inline_writes: bool,
}

impl Ablations {
    /// Parses a comma-separated list of feature names (see `--ablate`).
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(list: &str) -> anyhow::Result<Ablations> {
        let mut a = Ablations::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "zero-copy" => a.copy_values = true,
                "lock-free-queues" => a.locked_queues = true,
                "metadata-compaction" => a.value_compaction = true,
                "keytable-cache" => a.uncached_keytables = true,
                "inline-writes" => a.no_inline_writes = true,
                other => anyhow::bail!(
                    "ablate `{other}`: use zero-copy, lock-free-queues, keytable-cache, metadata-compaction or inline-writes"
                ),
            }
        }
        Ok(a)
    }
}

/// How writes are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledged once on the device.
    Sync,
    /// Acknowledged from DRAM (power-loss-protected card).
    Plp,
}

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines; colour codes only when stderr is a terminal.
    Text,
    /// One JSON object per line (time, level, target, message, fields).
    Json,
}

/// The resolved settings of a drive.
#[derive(Debug, Clone)]
pub struct DriveConfig {
    /// Listen address.
    pub bind: String,
    /// How the drive logs.
    pub log_format: LogFormat,
    /// Listen port.
    pub port: u16,
    /// Data directory (simulated device).
    pub data_dir: PathBuf,
    /// Device spec: `sim` or `file:PATH`.
    pub device: String,
    /// Capacity of a new device, in bytes.
    pub capacity: u64,
    /// Timing model spec.
    pub timing: String,
    /// Durability mode.
    pub durability: Durability,
    /// The default user's password (`None`: no password; an empty one is none).
    pub requirepass: Option<String>,
    /// Users file (Redis ACL syntax), if any.
    pub aclfile: Option<PathBuf>,
    /// TLS port (0: no TLS).
    pub tls_port: u16,
    /// TLS files and client certificate mode (set when `tls_port` is).
    pub tls: Option<TlsSettings>,
    /// Client limit.
    pub maxclients: usize,
    /// Protected mode.
    pub protected_mode: bool,
    /// Buffer limits (query, pending, budget, output).
    pub buffers: BufferLimits,
    /// Idle timeout and TCP keepalive.
    pub liveness: LivenessConfig,
    /// Largest bulk argument (`proto-max-bulk-len`).
    pub proto_max_bulk_len: usize,
    /// Cluster map file (cluster mode), if any.
    pub cluster_config: Option<PathBuf>,
    /// This drive's node id in the cluster map, if given.
    pub cluster_node_id: Option<String>,
    /// Features turned off for the ablation benchmark.
    pub ablations: Ablations,
    /// Open the device read-only to copy data off a damaged value log.
    pub recover_read_only: bool,
    /// Value cache size in bytes (0: off).
    pub value_cache_bytes: u64,
    /// Longest value held in its keytable entry (`lsm::EngineConfig::entry_value_max`).
    pub entry_value_max: usize,
    /// `slowlog-log-slower-than` in microseconds (negative: off).
    pub slowlog_log_slower_than: i64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: usize,
    /// `latency-monitor-threshold` in milliseconds (0: off).
    pub latency_monitor_threshold: u64,
    /// `plp-ring-after-ms`: longest the network thread holds its writes' pages back.
    pub plp_ring_after: std::time::Duration,
}

impl DriveConfig {
    /// Resolves flags over the file over the defaults.
    ///
    /// # Errors
    /// An unreadable or malformed file, or a malformed value.
    pub fn resolve(args: Args) -> anyhow::Result<DriveConfig> {
        let file = match &args.config {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        let durability = match args
            .durability
            .or(file.durability)
            .unwrap_or_else(|| "sync".into())
            .as_str()
        {
            "sync" => Durability::Sync,
            "plp" => Durability::Plp,
            other => anyhow::bail!("durability `{other}`: use sync or plp"),
        };
        let protected_mode = match args.protected_mode.as_deref() {
            Some("yes") => true,
            Some("no") => false,
            Some(other) => anyhow::bail!("protected-mode `{other}`: use yes or no"),
            None => file.protected_mode.unwrap_or(true),
        };
        let capacity = args
            .capacity
            .or(file.capacity)
            .unwrap_or_else(|| DEFAULT_CAPACITY.into());
        let maxclients = args
            .maxclients
            .or(file.maxclients)
            .unwrap_or(DEFAULT_MAX_CLIENTS);
        anyhow::ensure!(maxclients > 0, "maxclients must be at least 1");
        let tls_port = args.tls_port.or(file.tls_port).unwrap_or(0);
        let ca = args.tls_ca_cert_file.or(file.tls_ca_cert_file);
        let auth_clients = match args.tls_auth_clients.or(file.tls_auth_clients) {
            Some(w) => ClientAuth::parse(&w)?,
            // Redis's default is yes, which needs a CA: without one, no client certificates.
            None if ca.is_some() => ClientAuth::Yes,
            None => ClientAuth::No,
        };
        let tls = match (
            tls_port,
            args.tls_cert_file.or(file.tls_cert_file),
            args.tls_key_file.or(file.tls_key_file),
        ) {
            (0, _, _) => None,
            (_, Some(cert_file), Some(key_file)) => Some(TlsSettings {
                cert_file,
                key_file,
                ca_cert_file: ca,
                auth_clients,
            }),
            _ => return Err(TlsError::MissingCert.into()),
        };
        let value_cache = args
            .value_cache_size
            .or(file.value_cache_size)
            .unwrap_or_else(|| DEFAULT_VALUE_CACHE_SIZE.into());
        let defaults = BufferLimits::default();
        let size =
            |flag: Option<String>, key: Option<String>, default: usize, name: &str| match flag
                .or(key)
            {
                None => Ok(default),
                Some(s) => parse_size(&s)
                    .and_then(|n| usize::try_from(n).context("too large"))
                    .with_context(|| format!("{name} `{s}`")),
            };
        let proto_max_bulk_len = size(
            args.proto_max_bulk_len,
            file.proto_max_bulk_len,
            kvproto::limits::DEFAULT_MAX_BULK_LEN,
            "proto-max-bulk-len",
        )?;
        let query_buffer = size(
            args.client_query_buffer_limit,
            file.client_query_buffer_limit,
            defaults.query_buffer,
            "client-query-buffer-limit",
        )?;
        anyhow::ensure!(
            proto_max_bulk_len >= MIN_BUFFER_SETTING && query_buffer >= MIN_BUFFER_SETTING,
            "proto-max-bulk-len and client-query-buffer-limit must be at least 1MiB"
        );
        anyhow::ensure!(
            query_buffer >= proto_max_bulk_len,
            "client-query-buffer-limit ({query_buffer}) must be at least proto-max-bulk-len \
             ({proto_max_bulk_len}): a bulk argument is buffered whole"
        );
        let pending = size(
            args.client_pending_limit,
            file.client_pending_limit,
            DEFAULT_PENDING_LIMIT,
            "client-pending-limit",
        )?;
        let budget = size(
            args.client_query_budget,
            file.client_query_budget,
            DEFAULT_QUERY_BUDGET,
            "client-query-budget",
        )?;
        anyhow::ensure!(
            pending > 0 && budget > 0,
            "client-pending-limit and client-query-budget must be above 0"
        );
        let (output, output_pubsub) = match args
            .client_output_buffer_limit
            .or(file.client_output_buffer_limit)
        {
            Some(s) => parse_output_limit(&s, (defaults.output, defaults.output_pubsub))?,
            None => (defaults.output, defaults.output_pubsub),
        };
        let log_format = match args.log_format.or(file.log_format).as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => anyhow::bail!("log-format `{other}`: use text or json"),
        };
        Ok(DriveConfig {
            log_format,
            bind: args
                .bind
                .or(file.bind)
                .unwrap_or_else(|| DEFAULT_BIND.into()),
            port: args.port.or(file.port).unwrap_or(DEFAULT_PORT),
            data_dir: args
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
            device: args.device.or(file.device).unwrap_or_else(|| "sim".into()),
            capacity: parse_size(&capacity)?,
            timing: args.timing.or(file.timing).unwrap_or_else(|| "none".into()),
            durability,
            // An empty password is no password (Redis's `requirepass ""`).
            requirepass: args
                .requirepass
                .or(file.requirepass)
                .filter(|p| !p.is_empty()),
            aclfile: args.aclfile.or(file.aclfile),
            tls_port,
            tls,
            maxclients,
            protected_mode,
            buffers: BufferLimits {
                query_buffer,
                pending,
                budget,
                output,
                output_pubsub,
            },
            liveness: LivenessConfig {
                timeout_secs: args
                    .timeout
                    .or(file.timeout)
                    .unwrap_or(crate::net::liveness::DEFAULT_TIMEOUT_SECS),
                tcp_keepalive_secs: args
                    .tcp_keepalive
                    .or(file.tcp_keepalive)
                    .unwrap_or(crate::net::liveness::DEFAULT_TCP_KEEPALIVE_SECS),
            },
            proto_max_bulk_len,
            cluster_config: args.cluster_config.or(file.cluster_config),
            cluster_node_id: args.cluster_node_id.or(file.cluster_node_id),
            ablations: Ablations::parse(&args.ablate.or(file.ablate).unwrap_or_default())?,
            recover_read_only: args.recover_read_only || file.recover_read_only.unwrap_or(false),
            value_cache_bytes: parse_size(&value_cache)?,
            entry_value_max: {
                let n = args
                    .entry_value_max
                    .or(file.entry_value_max)
                    .unwrap_or(lsm::DEFAULT_ENTRY_VALUE_MAX);
                if n > lsm::keytable::MAX_HELD_VALUE {
                    anyhow::bail!(
                        "entry-value-max {n} is above the most an entry holds ({})",
                        lsm::keytable::MAX_HELD_VALUE
                    );
                }
                n
            },
            slowlog_log_slower_than: args
                .slowlog_log_slower_than
                .or(file.slowlog_log_slower_than)
                .unwrap_or(crate::net::DEFAULT_SLOWER_THAN_USEC),
            slowlog_max_len: args
                .slowlog_max_len
                .or(file.slowlog_max_len)
                .unwrap_or(crate::net::DEFAULT_SLOWLOG_MAX_LEN),
            latency_monitor_threshold: args
                .latency_monitor_threshold
                .or(file.latency_monitor_threshold)
                .unwrap_or(0),
            plp_ring_after: {
                let ms = args.plp_ring_after_ms.or(file.plp_ring_after_ms);
                match ms {
                    None => crate::net::DEFAULT_RING_AFTER,
                    Some(ms) if ms > crate::net::MAX_RING_AFTER_MS => anyhow::bail!(
                        "plp-ring-after-ms {ms} is above {}",
                        crate::net::MAX_RING_AFTER_MS
                    ),
                    Some(ms) => std::time::Duration::from_millis(ms),
                }
            },
        })
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing the config file {}", path.display()))
}

/// Parses `client-output-buffer-limit`: one or more `CLASS HARD SOFT SECONDS` groups (sizes
/// as [`parse_size`]) for Redis's `normal` and `pubsub` classes, as Redis's setting is
/// written; a class not given keeps its value in `current` (`(normal, pubsub)`).
///
/// # Errors
/// Another class (the drive has no replicas), a missing field, or a malformed size or
/// number.
pub fn parse_output_limit(
    s: &str,
    current: (OutputLimit, OutputLimit),
) -> anyhow::Result<(OutputLimit, OutputLimit)> {
    let words: Vec<&str> = s.split_whitespace().collect();
    anyhow::ensure!(
        !words.is_empty() && words.len() % 4 == 0,
        "client-output-buffer-limit `{s}`: use `normal HARD SOFT SECONDS [pubsub HARD SOFT SECONDS]`"
    );
    let bytes =
        |w: &str| -> anyhow::Result<usize> { usize::try_from(parse_size(w)?).context("too large") };
    let (mut normal, mut pubsub) = current;
    for group in words.chunks_exact(4) {
        let [class, hard, soft, secs] = group else {
            continue;
        };
        let limit = OutputLimit {
            hard: bytes(hard).with_context(|| format!("client-output-buffer-limit `{s}`"))?,
            soft: bytes(soft).with_context(|| format!("client-output-buffer-limit `{s}`"))?,
            soft_seconds: secs
                .parse()
                .with_context(|| format!("client-output-buffer-limit `{s}`: seconds"))?,
        };
        match class.to_ascii_lowercase().as_str() {
            "normal" => normal = limit,
            "pubsub" => pubsub = limit,
            _ => anyhow::bail!(
                "client-output-buffer-limit `{s}`: this drive has the `normal` and `pubsub` client classes only"
            ),
        }
    }
    Ok((normal, pubsub))
}

/// Parses sizes like `512MiB`, `8GiB`, `1G`, `4096`.
///
/// # Errors
/// A missing number, an unknown unit, or a size above `u64`.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .with_context(|| format!("size `{s}` does not start with a number"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => anyhow::bail!("unknown size unit `{other}` in `{s}` (use KiB, MiB, GiB, TiB)"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("size `{s}` is too large"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096").ok(), Some(4096));
        assert_eq!(parse_size("512MiB").ok(), Some(512 << 20));
        assert_eq!(parse_size("8GiB").ok(), Some(8 << 30));
        assert_eq!(parse_size("1g").ok(), Some(1 << 30));
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("99999999999999TiB").is_err());
    }

    #[test]
    fn output_limits_parse_the_normal_and_pubsub_classes() {
        let d = (OutputLimit::default(), OutputLimit::pubsub_default());
        let (l, p) = parse_output_limit("normal 1gb 256mb 60", d).unwrap();
        assert_eq!(p, OutputLimit::pubsub_default());
        assert_eq!((l.hard, l.soft, l.soft_seconds), (1 << 30, 256 << 20, 60));
        assert_eq!(parse_output_limit("normal 0 0 0", d).unwrap().0.hard, 0);
        let (n, p) = parse_output_limit("pubsub 1mb 1mb 1", d).unwrap();
        assert_eq!((n, p.hard, p.soft_seconds), (d.0, 1 << 20, 1));
        assert!(parse_output_limit("replica 1mb 1mb 1", d).is_err());
        assert!(parse_output_limit("normal 1mb", d).is_err());
    }

    #[test]
    fn buffer_limits_resolve_and_are_checked() {
        let c = DriveConfig::resolve(Args {
            client_query_budget: Some("8MiB".into()),
            timeout: Some(5),
            ..Args::default()
        })
        .unwrap();
        assert_eq!(c.buffers.budget, 8 << 20);
        assert_eq!(c.buffers.query_buffer, 1 << 30);
        assert_eq!(c.liveness.timeout_secs, 5);
        assert_eq!(c.liveness.tcp_keepalive_secs, 300);
        assert!(DriveConfig::resolve(Args {
            proto_max_bulk_len: Some("2GiB".into()),
            ..Args::default()
        })
        .is_err());
    }

    #[test]
    fn plp_ring_after_defaults_and_is_bounded() {
        let c = DriveConfig::resolve(Args::default()).unwrap();
        assert_eq!(c.plp_ring_after, crate::net::DEFAULT_RING_AFTER);
        for ms in [0, crate::net::MAX_RING_AFTER_MS] {
            let c = DriveConfig::resolve(Args {
                plp_ring_after_ms: Some(ms),
                ..Args::default()
            })
            .unwrap();
            assert_eq!(c.plp_ring_after, std::time::Duration::from_millis(ms));
        }
        let err = DriveConfig::resolve(Args {
            plp_ring_after_ms: Some(crate::net::MAX_RING_AFTER_MS + 1),
            ..Args::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("plp-ring-after-ms"), "{err}");
    }

    #[test]
    fn entry_value_max_defaults_and_is_bounded() {
        let c = DriveConfig::resolve(Args::default()).unwrap();
        assert_eq!(c.entry_value_max, lsm::DEFAULT_ENTRY_VALUE_MAX);
        let c = DriveConfig::resolve(Args {
            entry_value_max: Some(0),
            ..Args::default()
        })
        .unwrap();
        assert_eq!(c.entry_value_max, 0);
        let err = DriveConfig::resolve(Args {
            entry_value_max: Some(lsm::keytable::MAX_HELD_VALUE + 1),
            ..Args::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("entry-value-max"), "{err}");
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drive.toml");
        std::fs::write(&path, "port = 7000\nmaxclients = 5\nrequirepass = \"pw\"\n").unwrap();
        let args = Args {
            config: Some(path.clone()),
            port: Some(7001),
            ..Args::default()
        };
        let c = DriveConfig::resolve(args).unwrap();
        assert_eq!(c.port, 7001);
        assert_eq!(c.maxclients, 5);
        assert_eq!(c.requirepass.as_deref(), Some("pw"));
        assert_eq!(c.bind, DEFAULT_BIND);
        std::fs::write(&path, "requirepass = \"\"\ntls-port = 6380\n").unwrap();
        let bad = DriveConfig::resolve(Args {
            config: Some(path.clone()),
            ..Args::default()
        });
        assert!(bad.is_err(), "a TLS port needs a certificate and key");
        std::fs::write(
            &path,
            "requirepass = \"\"\ntls-port = 6380\ntls-cert-file = \"c.pem\"\ntls-key-file = \"k.pem\"\ntls-ca-cert-file = \"ca.pem\"\n",
        )
        .unwrap();
        let c = DriveConfig::resolve(Args {
            config: Some(path.clone()),
            ..Args::default()
        })
        .unwrap();
        assert_eq!(c.requirepass, None, "an empty password is none");
        assert_eq!(c.tls_port, 6380);
        assert_eq!(
            c.tls.map(|t| t.auth_clients),
            Some(ClientAuth::Yes),
            "client certificates are required by default when a CA is given"
        );
        std::fs::write(&path, "prot = 1\n").unwrap();
        let bad = DriveConfig::resolve(Args {
            config: Some(path),
            ..Args::default()
        });
        assert!(bad.is_err());
    }
}
