//! Writes the network thread runs itself in plp mode while the writer is idle: one group per
//! turn of its loop ([`try_write_batch_now`]), with the argument why that is safe beside
//! `ls-writer`.

use std::sync::atomic::Ordering;

use foldhash::{HashMap, HashMapExt};
use kvproto::command::Collection;
use kvproto::{Command, Protocol};

use super::groups::{touch_group_keys, GroupKeys, GroupReplies};
use super::{apply_noting_keys, group_replies, Done};
use crate::info::Metrics;
use crate::store::{now_ms, Store, WriteGroup};

/// Whether `cmd` may run on the network thread ([`try_write_batch_now`]): writes that need
/// no value read (building their group takes DRAM lookups only: types, existence, small
/// records held in their keytable entries such as a hash's or a sorted set's header and a
/// member's score). Not INCR, APPEND, SETRANGE, GETDEL, GETEX or SET ... GET (they read the
/// old value, which may be on the device), not DEL (a large collection's records are
/// walked), not list pushes (a list's records are read to find its ends), not transactions,
/// FLUSHALL, MIGRATE, RESTORE, COPY or RENAME. ZADD could serve a client blocked in
/// BZPOPMIN: a group runs here only while no client is blocked (checked under the writer's
/// gate, which the writer holds while it parks one), so a BZPOPMIN is either parked before
/// and the group goes to the writer, or runs after the ZADD and finds the member.
#[must_use]
pub fn writes_inline(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Set { get: false, .. }
            | Command::MSet(_)
            | Command::SetNx { .. }
            | Command::MSetNx(_)
            | Command::HSet { .. }
            | Command::HDel { .. }
            | Command::Expire { .. }
            | Command::Persist(_)
            | Command::ZAdd { .. }
            | Command::Collection(Collection::SAdd { .. })
    )
}

/// One write the network thread gathered this turn for [`try_write_batch_now`].
pub struct InlineWrite {
    /// Connection id.
    pub conn: u64,
    /// The request's number on its connection.
    pub seq: u64,
    /// The connection's protocol.
    pub proto: Protocol,
    /// The command ([`writes_inline`] holds for it).
    pub cmd: Command,
}

/// Runs the writes the network thread gathered in one turn of its loop as one group, on the
/// calling thread, when the drive acknowledges from DRAM (plp) and `ls-writer` is idle, as
/// redis-server runs every command on its one thread: no hand-off to the writer and back, so
/// the replies cost no thread wake-ups, and one group commit packs every client's write of
/// the turn into shared pages as the writer's would. Returns the replies, in `writes`' order,
/// and the engine's doorbell for the group's pages, which the caller drops (rings) once the
/// replies are on their way; `None`: nothing ran, and every write goes to the writer as
/// before, in the same order.
///
/// Why it is safe to run here, beside the writer (the concurrency argument):
/// - **Exclusion.** The writer holds `Store::writer_gate` whenever it has anything to do (a
///   job, a group in flight, an expiry sweep) and lets go only while it waits for a job
///   with nothing in flight (also while clients are blocked: then this declines, below);
///   this runs only under a successful
///   `try_lock`, so the two never build or submit groups at the same time, and the writer's
///   in-flight bookkeeping (`InFlightGroups`) is empty whenever this runs: the applied state
///   this group reads is the whole state.
/// - **Order.** The caller gathers a connection's writes only while nothing else of that
///   connection is in flight, and runs nothing more of it until this has answered or handed
///   the writes to the writer (in order, ahead of anything later of that connection): so no
///   reply of a connection overtakes another. Writes of different connections in one group
///   are concurrent (none was acknowledged before the others were sent), so running them in
///   the order gathered is an order Redis could have produced; so is running a group before
///   or after a job another connection queued for the writer meanwhile.
/// - **No waiting.** [`WriteGroup::try_submit_now`] starts the group only when the engine
///   admits it at once into the pipeline, acknowledged from DRAM, with nothing ahead that
///   its finish would wait for; otherwise the group is dropped unstarted (nothing of it was
///   applied: a group only buffers until it is submitted, and the expired keys it purged are
///   uncounted again) and the writer runs the commands.
/// - **Same effects.** The group is applied, WATCHed keys are touched and the replies are
///   built exactly as the writer's `finish_oldest` does; no command that can serve a
///   blocked client runs here, nor any while a client is blocked; slots being handed over
///   (cluster) leave writes to the writer.
#[must_use]
pub fn try_write_batch_now(
    store: &Store,
    metrics: &Metrics,
    writes: &[InlineWrite],
) -> Option<(Vec<Done>, Option<lsm::Doorbell>)> {
    if writes.is_empty() || store.migrations.any() {
        return None;
    }
    let _writer_idle = store.writer_gate.try_lock()?;
    // Blocked clients are the writer's (its count changes only under the gate): none of
    // these commands serves one, but a client blocked on a key is left to the writer's
    // ordering all the same.
    if metrics.blocked_clients.load(Ordering::Relaxed) > 0 {
        return None;
    }
    // Only holders of the gate count expired keys, so this group's purges are the
    // difference, taken back if the group does not start.
    let expired_before = store.counters.expired_keys.load(Ordering::Relaxed);
    let mut group = WriteGroup::new(store);
    group.fix_clock(now_ms());
    let mut group_keys: GroupKeys = HashMap::new();
    let pending: GroupReplies = writes
        .iter()
        .map(|w| {
            let reply = apply_noting_keys(&mut group, &mut group_keys, &w.cmd, w.proto);
            (w.conn, w.seq, reply)
        })
        .collect();
    let (doorbell, result) = match group.try_submit_now() {
        Ok(None) => {
            let purged = store.counters.expired_keys.load(Ordering::Relaxed) - expired_before;
            store
                .counters
                .expired_keys
                .fetch_sub(purged, Ordering::Relaxed);
            return None;
        }
        Ok(Some(mut commit)) => (commit.take_doorbell(), commit.finish(store)),
        Err(e) => (None, Err(e)),
    };
    touch_group_keys(store, &group_keys);
    Some((group_replies(metrics, result, pending), doorbell))
}
