//! Which thread answers a command, and the checks made before a command leaves `ls-net`
//! (key length, the zero-copy ablation's extra copy).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use kvproto::{Command, Reply};

use crate::info::Metrics;

/// Which thread answers a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Answered on `ls-net`.
    Here,
    /// `ls-engine`.
    Engine,
    /// `ls-writer`.
    Writer,
    /// The cluster map saver (`LS.CLUSTERMAP` pushes: the file is written and synced off
    /// `ls-net`). Never returned by [`route_of`].
    Admin,
}

/// Longest key a client may use (the engine keeps 64 bytes more for the type tag and
/// sub-key framing of `keyspace`).
pub const MAX_KEY_BYTES: usize = 64 << 10;

/// The thread that answers `cmd`.
pub(super) fn route_of(cmd: &Command) -> Route {
    match cmd {
        Command::Get(_)
        | Command::MGet(_)
        | Command::Strlen(_)
        | Command::Exists(_)
        | Command::GetRange { .. }
        | Command::HGet { .. }
        | Command::HMGet { .. }
        | Command::HGetAll(_)
        | Command::HLen(_)
        | Command::HExists { .. }
        | Command::ZScore { .. }
        | Command::ZCard(_)
        | Command::ZRangeByScore { .. }
        | Command::Scan { .. }
        | Command::Range { .. }
        | Command::DbSize
        | Command::RandomKey
        | Command::Ttl { .. }
        | Command::Type(_)
        | Command::Keys(_)
        | Command::KeysInSlot { .. }
        | Command::Info(_) => Route::Engine,
        Command::Set { .. }
        | Command::MSet(_)
        | Command::Del(_)
        | Command::IncrBy { .. }
        | Command::FlushAll
        | Command::HSet { .. }
        | Command::HDel { .. }
        | Command::ZAdd { .. }
        | Command::ZRem { .. }
        | Command::Expire { .. }
        | Command::Persist(_)
        | Command::GetEx { .. }
        | Command::SetNx { .. }
        | Command::GetDel(_)
        | Command::Append { .. }
        | Command::SetRange { .. }
        | Command::MSetNx(_)
        | Command::IncrByFloat { .. }
        | Command::Copy { .. }
        | Command::Dump(_)
        | Command::Restore { .. }
        | Command::Migrate(_)
        | Command::Rename { .. } => Route::Writer,
        Command::Collection(_) if cmd.is_write() => Route::Writer,
        Command::Collection(_) => Route::Engine,
        _ => Route::Here,
    }
}

/// The error for a command with a key over [`MAX_KEY_BYTES`], if it has one.
pub(super) fn key_too_long(cmd: &Command) -> Option<Reply> {
    cmd.keys()
        .iter()
        .find(|k| k.len() > MAX_KEY_BYTES)
        .map(|k| {
            Reply::error(format!(
                "ERR key of {} bytes is longer than the drive's limit of {MAX_KEY_BYTES} bytes",
                k.len()
            ))
        })
}

/// The zero-copy ablation: SET and MSET values copied into fresh buffers (counted).
pub(super) fn copy_values(cmd: &mut Command, metrics: &Metrics) {
    let mut copied = 0usize;
    let mut copy = |v: &mut Bytes| {
        *v = Bytes::copy_from_slice(v);
        copied += v.len();
    };
    match cmd {
        Command::Set { value, .. } => copy(value),
        Command::MSet(pairs) => pairs.iter_mut().for_each(|(_, v)| copy(v)),
        _ => {}
    }
    metrics
        .value_bytes_copied
        .fetch_add(copied as u64, Ordering::Relaxed);
}
