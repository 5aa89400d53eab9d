//! `lightstore-nbd`: an NBD server whose volumes live on LightStore drives, and the tool
//! that manages the volumes stored on them.
//!
//! ```text
//! lightstore-nbd volume create disk0 --size 10G [--block-size 8K] --drive 127.0.0.1:6379
//! lightstore-nbd volume list [--json] --drive 127.0.0.1:6379
//! lightstore-nbd volume resize disk0 --size 20G [--allow-shrink] --drive 127.0.0.1:6379
//! lightstore-nbd volume delete disk0 --drive 127.0.0.1:6379
//! lightstore-nbd volume orphans [--delete] --drive 127.0.0.1:6379
//! lightstore-nbd serve --drive 127.0.0.1:6379 [--listen 127.0.0.1:10809]
//! lightstore-nbd --drive 127.0.0.1:6379 --volume scratch:1GiB      # command-line volumes
//! ```
//!
//! `serve` exports every volume stored on the drive(s), read at each handshake, so volumes
//! created later are exported at once and any number of adapters can serve the same
//! drives. With `--volume` the adapter exports the volumes given instead (nothing is stored
//! about them; their blocks are keyed by name). `--cluster-config FILE` replaces `--drive`
//! for a cluster. Either prints `lightstore-nbd ready on ADDR` once it listens
//! (`--listen 127.0.0.1:0` picks a free port), then serves until killed. Nothing is cached
//! in the server: every acknowledged write is on the drive(s), so stopping it at any time
//! loses nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use adapters::nbd::server::ExportSource;
use adapters::nbd::volumes::{Catalog, VolumeRecord};
use adapters::nbd::{parse_size, BlockStore, NbdServer, Volume};
use adapters::routing::{Router, RouterConfig};
use clap::{Parser, Subcommand};

/// NBD block adapter over LightStore drives.
#[derive(Parser, Debug)]
#[command(
    name = "lightstore-nbd",
    version,
    about = "NBD server exporting volumes whose blocks are keys on LightStore drives, and their management"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Address to listen on for NBD clients (serving only).
    #[arg(long, global = true, default_value = "127.0.0.1:10809")]
    listen: String,
    /// Without a subcommand: a volume to export, NAME:SIZE (e.g. disk0:1GiB), not stored
    /// on the drive; repeat for more. The first is the default export (empty name).
    #[arg(long = "volume")]
    volumes: Vec<String>,
    /// One drive (not in cluster mode) that stores every block.
    #[arg(long, global = true)]
    drive: Option<String>,
    /// A cluster map (the TOML the drives' --cluster-config reads); reread on -MOVED.
    #[arg(long, global = true)]
    cluster_config: Option<PathBuf>,
    /// Seconds to wait for a drive before treating it as down.
    #[arg(long, global = true, default_value_t = 30)]
    timeout: u64,
    /// Password and TLS for the drives.
    #[command(flatten)]
    access: adapters::access::AccessArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Export every volume stored on the drive(s), by name.
    Serve,
    /// Manage the volumes stored on the drive(s).
    #[command(subcommand)]
    Volume(VolumeCmd),
}

#[derive(Subcommand, Debug)]
enum VolumeCmd {
    /// Create a volume (it reads as zeroes; nothing but its record is written).
    Create {
        /// 1 to 64 of A-Z a-z 0-9 . _ -
        name: String,
        /// Size, with an optional K/M/G/T suffix (binary).
        #[arg(long)]
        size: String,
        /// Bytes per block (one key each): a power of two from 4K to 64K.
        #[arg(long, default_value = "8K")]
        block_size: String,
    },
    /// List the volumes.
    List {
        /// One JSON object: {"volumes": [{name, size, block_size, created, generation, key_id}]}.
        #[arg(long)]
        json: bool,
    },
    /// Change a volume's size.
    Resize {
        /// The volume.
        name: String,
        /// The new size.
        #[arg(long)]
        size: String,
        /// Allow a smaller size: the blocks past the new end are deleted.
        #[arg(long)]
        allow_shrink: bool,
    },
    /// Delete a volume and every one of its blocks.
    Delete {
        /// The volume.
        name: String,
    },
    /// List block keys of stored volumes that no record names (left by an adapter that
    /// wrote to a volume after it was deleted); exit status 1 when there are any.
    Orphans {
        /// Delete them.
        #[arg(long)]
        delete: bool,
    },
}

async fn connect(args: &Args) -> Result<Router, String> {
    let cfg = RouterConfig {
        timeout: Duration::from_secs(args.timeout.max(1)),
        auth: args.access.credentials()?,
        tls: args.access.tls()?,
        ..RouterConfig::default()
    };
    let router = match (&args.drive, &args.cluster_config) {
        (Some(_), Some(_)) => return Err("give --drive or --cluster-config, not both".into()),
        (Some(drive), None) => {
            let addr: SocketAddr = tokio::net::lookup_host(drive.as_str())
                .await
                .map_err(|e| format!("--drive {drive}: {e}"))?
                .next()
                .ok_or_else(|| format!("--drive {drive}: no address"))?;
            Router::single(addr, cfg).map_err(|e| e.to_string())?
        }
        (None, Some(path)) => Router::from_file(path, cfg).map_err(|e| e.to_string())?,
        (None, None) => return Err("give --drive ADDR or --cluster-config FILE".into()),
    };
    let single = args.drive.is_some();
    for (addr, result) in router.ping_all().await {
        match result {
            Ok(()) => {}
            Err(e) if single => return Err(format!("cannot reach the drive: {e}")),
            Err(e) => tracing::warn!(%addr, "drive not reachable at start: {e}"),
        }
    }
    Ok(router)
}

async fn serve(args: &Args, router: Arc<Router>, exports: ExportSource) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("listening socket: {e}"))?;
    let server = Arc::new(NbdServer::new(BlockStore::new(router), exports));
    println!("lightstore-nbd ready on {local}");
    server
        .serve(listener)
        .await
        .map_err(|e| format!("serving: {e}"))
}

/// `1.5 GiB`-style size.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS` UTC (proleptic Gregorian calendar).
fn utc(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Days since 1970-01-01 to a civil date, counting in 400-year eras from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn print_list(records: &[VolumeRecord], json: bool) -> Result<(), String> {
    if json {
        let vols: Vec<serde_json::Value> = records
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name,
                    "size": r.size,
                    "block_size": r.block_size,
                    "created": r.created,
                    "generation": format!("{:016x}", r.generation),
                    "key_id": r.key_id(),
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&serde_json::json!({ "volumes": vols }))
            .map_err(|e| format!("encoding JSON: {e}"))?;
        println!("{text}");
        return Ok(());
    }
    if records.is_empty() {
        println!("no volumes");
        return Ok(());
    }
    let width = records
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<width$}  {:>10}  {:>16}  {:>6}  {:<19}  GENERATION",
        "NAME", "SIZE", "BYTES", "BLOCK", "CREATED (UTC)"
    );
    for r in records {
        println!(
            "{:<width$}  {:>10}  {:>16}  {:>6}  {:<19}  {:016x}",
            r.name,
            human(r.size),
            r.size,
            r.block_size,
            utc(r.created),
            r.generation
        );
    }
    Ok(())
}

async fn volume_cmd(cmd: &VolumeCmd, catalog: &Catalog) -> Result<(), String> {
    let size_arg = |s: &str| parse_size(s).map_err(|e| e.to_string());
    match cmd {
        VolumeCmd::Create {
            name,
            size,
            block_size,
        } => {
            let rec = catalog
                .create(name, size_arg(size)?, size_arg(block_size)?)
                .await
                .map_err(|e| e.to_string())?;
            println!(
                "created volume {}: {} ({} bytes), {}-byte blocks, key id {}",
                rec.name,
                human(rec.size),
                rec.size,
                rec.block_size,
                rec.key_id()
            );
        }
        VolumeCmd::List { json } => {
            let records = catalog.list().await.map_err(|e| e.to_string())?;
            print_list(&records, *json)?;
        }
        VolumeCmd::Resize {
            name,
            size,
            allow_shrink,
        } => {
            let (old, new, deleted) = catalog
                .resize(name, size_arg(size)?, *allow_shrink)
                .await
                .map_err(|e| e.to_string())?;
            println!(
                "resized volume {name} from {} ({} bytes) to {} ({} bytes); {deleted} blocks past the end deleted",
                human(old.size),
                old.size,
                human(new.size),
                new.size
            );
        }
        VolumeCmd::Delete { name } => {
            let deleted = catalog.delete(name).await.map_err(|e| e.to_string())?;
            println!("deleted volume {name} and its {deleted} stored blocks");
        }
        VolumeCmd::Orphans { delete: true } => {
            let deleted = catalog.delete_orphans().await.map_err(|e| e.to_string())?;
            println!("deleted {deleted} orphaned block keys");
        }
        VolumeCmd::Orphans { delete: false } => {
            let orphans = catalog.orphans().await.map_err(|e| e.to_string())?;
            if orphans.is_empty() {
                println!("no orphaned block keys");
            } else {
                for (id, keys) in &orphans {
                    println!("{id}  {} block keys", keys.len());
                }
                return Err(format!(
                    "{} key ids have block keys but no volume record; `volume orphans --delete` removes them",
                    orphans.len()
                ));
            }
        }
    }
    Ok(())
}

async fn run(args: Args) -> Result<(), String> {
    match &args.command {
        None => {
            if args.volumes.is_empty() {
                return Err("give --volume NAME:SIZE to export command-line volumes, or `serve` to export the volumes stored on the drive (`volume create` makes one)".into());
            }
            let mut volumes = Vec::new();
            for spec in &args.volumes {
                volumes.push(Volume::parse(spec).map_err(|e| e.to_string())?);
            }
            Volume::check_unique(&volumes).map_err(|e| e.to_string())?;
            let router = Arc::new(connect(&args).await?);
            for v in &volumes {
                tracing::info!(name = %v.name, size = v.size, "exporting volume");
            }
            serve(&args, router, ExportSource::Fixed(volumes)).await
        }
        Some(_) if !args.volumes.is_empty() => {
            Err("--volume is for command-line volumes, without a subcommand".into())
        }
        Some(Cmd::Serve) => {
            let router = Arc::new(connect(&args).await?);
            let catalog = Catalog::new(router.clone());
            match catalog.list().await {
                Ok(v) if v.is_empty() => tracing::warn!(
                    "no volume is stored on the drive(s) yet; `lightstore-nbd volume create` makes one"
                ),
                Ok(v) => {
                    for r in v {
                        tracing::info!(name = %r.name, size = r.size, "volume on the drive");
                    }
                }
                Err(e) => return Err(format!("reading the volumes: {e}")),
            }
            serve(&args, router, ExportSource::Stored(catalog)).await
        }
        Some(Cmd::Volume(cmd)) => {
            let router = Arc::new(connect(&args).await?);
            volume_cmd(cmd, &Catalog::new(router)).await
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a log file stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lightstore-nbd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lightstore-nbd: {e}");
            ExitCode::FAILURE
        }
    }
}
