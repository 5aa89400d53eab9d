//! Test support shared by every suite that runs the real binaries (`firmware/tests`,
//! `adapters/tests`): one place for the drive binary, ports, data directories, readiness,
//! teardown and recorded skips.
//!
//! - [`Drive`] starts `lightstore` on a free port and a scratch data directory and waits for
//!   its `lightstore ready on ADDR` line; it is killed on drop.
//! - [`Cluster`] starts drives in cluster mode (primaries splitting the slots, replicas of the
//!   first) and pushes them the map with their real addresses.
//! - [`RedisServer`] starts an in-memory redis-server for differential tests.
//! - [`resp`] speaks raw RESP (one command on a fresh connection, or frames on a socket).
//! - [`pki`] writes a throwaway CA, server and client certificate for TLS tests.
//! - [`skips`] records a test that could not run, so `cargo xtask test` can fail on it.
//!
//! Everything here panics on failure: it is for tests, where a panic names what broke.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bin;
mod cluster;
mod drive;
pub mod pki;
mod redis_server;
pub mod resp;
pub mod skips;

pub use bin::lightstore_bin;
pub use cluster::{cluster_specs, drive_has_cluster_mode, node_id, Cluster};
pub use drive::{spawn_ready, Drive, READY_TIMEOUT, TEST_CAPACITY};
pub use redis_server::RedisServer;
pub use resp::{resp_call, resp_call_as};
