//! RESP wire codec, the typed [`Command`] enum, reply encoding and an async RESP client.
//!
//! Shared by the drive (`firmware`), the adapters and the benchmarks:
//!
//! - [`request`]: the server-side request framer. It enforces [`Limits`] from the headers,
//!   before it buffers anything, and hands each argument out as a [`bytes::Bytes`] view of
//!   the socket buffer (no copy).
//! - [`command`]: `Command::parse` turns framed arguments into a typed command with the
//!   error texts Redis 7 uses; [`command::COMMANDS`] is the command table behind `COMMAND`.
//! - [`reply`]: the reply tree and its RESP2 / RESP3 encoding.
//! - [`client`]: a small tokio client that decodes replies with the `redis-protocol` crate,
//!   over TCP or TLS ([`tls`], rustls).
//! - [`cluster`]: hash slots (CRC16, hash tags) and the cluster map shared by drives and adapters.
//! - [`glob`]: Redis-style glob matching (`SCAN MATCH`, `CONFIG GET`).

pub mod client;
pub mod cluster;
pub mod command;
pub mod glob;
pub mod limits;
pub mod reply;
pub mod request;
pub mod tls;

pub use client::{Client, ClientError, Credentials, PASSWORD_ENV};
pub use command::types::{LexBound, ScanOf, SetOp, ZRangeBy};
pub use command::{
    ClientKill, ClientKillFilters, ClientType, Command, CommandError, CommandSpec, Expire,
    ExpireCondition, ScoreBound, SetCondition, TtlKind, ZAddOptions,
};
pub use limits::Limits;
pub use reply::{Protocol, Reply, VECTORED_MIN_PAYLOAD};
pub use request::{encode_command, ProtocolError, RequestParser};
pub use tls::{TlsClient, TlsClientError};
