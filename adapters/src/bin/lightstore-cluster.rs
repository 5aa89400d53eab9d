//! `lightstore-cluster`: operations on a cluster of LightStore drives.
//!
//! ```text
//! lightstore-cluster add 127.0.0.1:7004
//! ```
//!
//! With `requirepass` on the drives, the password comes from `--password-file`, the
//! `LIGHTSTORE_PASSWORD` environment variable or `--password` (and `--user` for an ACL
//! user), as for `lightstore-nbd`; the drives' MIGRATE passes it on to the new drive.
//!
//! `add ADDR` grows the cluster by the drive at ADDR, which must be running on a map that
//! lists it as a primary with no slots, one version above the cluster's (`cargo xtask cluster
//! add` starts it so): the map goes to every drive, then the new drive takes an even share of
//! every primary's slots while clients keep working (see `adapters::reshard`). It prints each
//! step and a summary, and exits 1 with the reason when a step fails (slots already handed
//! over stay with the new drive; run it again to finish).

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "lightstore-cluster",
    about = "Operations on a cluster of LightStore drives"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
    /// A file whose first line is the drives' password (sent with AUTH, and by the drives'
    /// MIGRATE to the new drive). Without it the password comes from the LIGHTSTORE_PASSWORD
    /// environment variable, then from --password.
    #[arg(long, global = true)]
    password_file: Option<std::path::PathBuf>,
    /// The drives' password (visible to other users in `ps`: prefer --password-file or
    /// LIGHTSTORE_PASSWORD).
    #[arg(long, global = true)]
    password: Option<String>,
    /// ACL user to AUTH as (default: the default user).
    #[arg(long, global = true)]
    user: Option<String>,
}

#[derive(Subcommand)]
enum Task {
    /// Move an even share of the slots to a new primary (already started on a map that
    /// lists it), live.
    Add {
        /// The new drive's address, as in its map.
        addr: SocketAddr,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lightstore-cluster: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let auth = match kvproto::Credentials::from_sources(
        cli.user.clone(),
        cli.password_file.as_deref(),
        cli.password.clone(),
    ) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("lightstore-cluster: reading the password: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.task {
        Task::Add { addr } => {
            let done = runtime.block_on(adapters::reshard::add_primary(
                addr,
                auth.as_ref(),
                |step| {
                    println!("{step}");
                },
            ));
            match done {
                Ok(r) => {
                    println!(
                        "{addr} joined: {} slots and {} keys moved in {:.1} s; the old replicas dropped {} keys of them; map version {}",
                        r.slots,
                        r.keys,
                        r.took.as_secs_f64(),
                        r.replica_keys_dropped,
                        r.version
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("lightstore-cluster add {addr}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
