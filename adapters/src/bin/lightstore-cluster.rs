//! `lightstore-cluster`: operations on a cluster of LightStore drives.
//!
//! ```text
//! lightstore-cluster add 127.0.0.1:7004
//! ```
//!
//! With `requirepass` on the drives, the password comes from `--password-file`, the
//! `LIGHTSTORE_PASSWORD` environment variable or `--password` (and `--user` for an ACL
//! user), as for `lightstore-nbd`; the drives' MIGRATE passes it on to the new drive. With
//! TLS flags the tool refuses to start: the drives' MIGRATE connects to the new drive over
//! plain TCP, so a cluster whose drives serve TLS only cannot grow live (docs/SECURITY.md).
//!
//! `add ADDR` grows the cluster by the drive at ADDR, which must be running on a map that
//! lists it as a primary with no slots, one version above the cluster's (`cargo xtask cluster
//! add` starts it so): the map goes to every drive, then the new drive takes an even share of
//! every primary's slots while clients keep working (see `adapters::reshard`). It prints each
//! step and a summary, and exits 1 with the reason when a step fails; what that leaves and
//! how to end it is in `adapters::reshard::ReshardError`'s documentation.

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
    /// Password and TLS (the drives' MIGRATE passes the password on to the new drive).
    #[command(flatten)]
    access: adapters::access::AccessArgs,
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
    let (auth, tls) = match (cli.access.credentials(), cli.access.tls()) {
        (Ok(a), Ok(t)) => (a, t),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("lightstore-cluster: {e}");
            return ExitCode::FAILURE;
        }
    };
    if tls.is_some() {
        // Refused before anything moves: each MIGRATE would time out half-way through.
        eprintln!(
            "lightstore-cluster: growing a cluster over TLS is not supported: the drives' \
             MIGRATE connects to each other over plain TCP (docs/SECURITY.md)"
        );
        return ExitCode::FAILURE;
    }
    match cli.task {
        Task::Add { addr } => {
            let done = runtime.block_on(adapters::reshard::add_primary(
                addr,
                adapters::reshard::Access {
                    auth: auth.as_ref(),
                    tls: tls.as_ref(),
                },
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
