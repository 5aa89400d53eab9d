//! Client-side adapters over LightStore drives.
//!
//! - [`access`]: the password and TLS flags the binaries share.
//! - [`routing`]: the cluster router: hash slots (the drives' own `kvproto::cluster`
//!   function), per-drive connection pools, writes to every replica, reads with fail-over,
//!   `-MOVED` handling, and `-ASK` / `-TRYAGAIN` while a slot moves.
//! - [`reshard`]: growing a cluster live: a new primary takes its share of the slots (the
//!   `lightstore-cluster add` binary, which `cargo xtask cluster add` runs).
//! - [`nbd`]: the block adapter behind the `lightstore-nbd` binary: an NBD server whose
//!   volumes are stored as 8 KiB blocks, one key each, through the router.
//!
//! The YCSB binding (Java) lives beside this crate in `adapters/ycsb/`.

pub mod access;
pub mod nbd;
pub mod reshard;
pub mod routing;
