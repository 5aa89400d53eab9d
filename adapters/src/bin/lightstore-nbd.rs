//! `lightstore-nbd`: an NBD server whose volumes live on LightStore drives.
//!
//! ```text
//! lightstore-nbd --drive 127.0.0.1:6379 --volume disk0:1GiB [--volume disk1:64MiB] \
//!                [--listen 127.0.0.1:10809]
//! lightstore-nbd --cluster-config cluster.toml --volume disk0:1GiB
//! ```
//!
//! Prints `lightstore-nbd ready on ADDR` once it listens (`--listen 127.0.0.1:0` picks a
//! free port), then serves until killed. Nothing is cached in the server: every
//! acknowledged write is on the drive(s), so stopping it at any time loses nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use adapters::nbd::{BlockStore, NbdServer, Volume};
use adapters::routing::{Router, RouterConfig};
use clap::Parser;
use kvproto::Credentials;

/// NBD block adapter over LightStore drives.
#[derive(Parser, Debug)]
#[command(
    name = "lightstore-nbd",
    version,
    about = "NBD server exporting volumes whose 8 KiB blocks are keys on LightStore drives"
)]
struct Args {
    /// Address to listen on for NBD clients.
    #[arg(long, default_value = "127.0.0.1:10809")]
    listen: String,
    /// A volume to export, NAME:SIZE (e.g. disk0:1GiB); repeat for more. The first is the
    /// default export (empty name).
    #[arg(long = "volume", required = true)]
    volumes: Vec<String>,
    /// One drive (not in cluster mode) that stores every block.
    #[arg(
        long,
        conflicts_with = "cluster_config",
        required_unless_present = "cluster_config"
    )]
    drive: Option<String>,
    /// A cluster map (the TOML the drives' --cluster-config reads); reread on -MOVED.
    #[arg(long)]
    cluster_config: Option<PathBuf>,
    /// Seconds to wait for a drive before treating it as down.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// A file whose first line is the drives' password (sent with AUTH on every
    /// connection). Without it the password comes from the LIGHTSTORE_PASSWORD environment
    /// variable, then from --password.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// The drives' password (visible to other users in `ps`: prefer --password-file or
    /// LIGHTSTORE_PASSWORD).
    #[arg(long)]
    password: Option<String>,
    /// ACL user to AUTH as (default: the default user).
    #[arg(long)]
    user: Option<String>,
}

async fn run(args: Args) -> Result<(), String> {
    let mut volumes = Vec::new();
    for spec in &args.volumes {
        volumes.push(Volume::parse(spec).map_err(|e| e.to_string())?);
    }
    Volume::check_unique(&volumes).map_err(|e| e.to_string())?;
    let auth = Credentials::from_sources(
        args.user.clone(),
        args.password_file.as_deref(),
        args.password.clone(),
    )
    .map_err(|e| format!("reading the password: {e}"))?;
    let cfg = RouterConfig {
        timeout: Duration::from_secs(args.timeout.max(1)),
        auth,
        ..RouterConfig::default()
    };
    let router = match (&args.drive, &args.cluster_config) {
        (Some(drive), _) => {
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
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("listening socket: {e}"))?;
    for v in &volumes {
        tracing::info!(name = %v.name, size = v.size, "exporting volume");
    }
    let server = Arc::new(NbdServer::new(BlockStore::new(Arc::new(router), volumes)));
    println!("lightstore-nbd ready on {local}");
    server
        .serve(listener)
        .await
        .map_err(|e| format!("serving: {e}"))
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
