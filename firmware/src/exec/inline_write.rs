//! Writes the network thread runs itself in plp mode while the writer is idle
//! ([`try_write_now`]), with the argument why that is safe beside `ls-writer`.

use std::sync::atomic::Ordering;

use foldhash::{HashMap, HashMapExt};
use kvproto::{Command, Protocol, Reply};

use super::groups::{touch_group_keys, GroupKeys};
use super::{apply_noting_keys, group_replies};
use crate::info::Metrics;
use crate::store::{now_ms, Store, WriteGroup};

/// Whether `cmd` may run on the network thread ([`try_write_now`]): writes that need no
/// value read (building their group takes DRAM lookups only: types, existence, small held
/// records such as a hash's header) and that can serve no blocked client. Not INCR, APPEND,
/// SETRANGE, GETDEL, GETEX or SET ... GET (they read the old value, which may be on the
/// device), not DEL (a large collection's records are walked), not sorted sets (a ZADD may
/// serve a BZPOPMIN) nor lists and sets (pushes serve blocked pops), not transactions,
/// FLUSHALL, MIGRATE, RESTORE, COPY or RENAME.
fn writes_inline(cmd: &Command) -> bool {
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
    )
}

/// Runs a write on the calling thread (the network thread) when the drive acknowledges from
/// DRAM (plp) and `ls-writer` is idle, as redis-server runs every command on its one thread:
/// no hand-off to the writer and back, so the reply costs no thread wake-ups (at one client,
/// SET's server CPU was ~37 us/op on the writer alone, most of it waking and sleeping).
/// Returns the reply and the engine's doorbell for the write's pages, which the caller drops
/// (rings) once the reply is on its way; `None`: the command goes to the writer as before.
///
/// Why it is safe to run here, beside the writer (the concurrency argument):
/// - **Exclusion.** The writer holds `Store::writer_gate` whenever it has anything to do (a
///   job, a group in flight, an expiry sweep, blocked clients' timeouts) and lets go only
///   while it waits for a job with nothing in flight; this runs only under a successful
///   `try_lock`, so the two never build or submit groups at the same time, and the writer's
///   in-flight bookkeeping (`InFlightGroups`) is empty whenever this runs.
/// - **Order.** The caller runs it only for a connection with nothing in flight (its replies
///   stay in order) and with the writer's queue empty; a job queued by another connection
///   after the queue was seen empty is not yet acknowledged, so the two writes are
///   concurrent and either order is one Redis could have produced.
/// - **No waiting.** [`WriteGroup::try_submit_now`] starts the group only when the engine
///   admits it at once into the pipeline, acknowledged from DRAM, with nothing ahead that
///   its finish would wait for; otherwise the group is dropped unstarted (nothing of it was
///   applied: a group only buffers until it is submitted) and the writer runs the command.
/// - **Same effects.** The group is applied, WATCHed keys are touched and the reply is
///   built exactly as the writer's `finish_oldest` does; no command that can serve a
///   blocked client runs here, nor any while a client is blocked; slots being handed over
///   (cluster) leave writes to the writer.
pub fn try_write_now(
    store: &Store,
    metrics: &Metrics,
    cmd: &Command,
    proto: Protocol,
) -> Option<(Reply, Option<lsm::Doorbell>)> {
    if !writes_inline(cmd) || store.migrations.any() {
        return None;
    }
    let _writer_idle = store.writer_gate.try_lock()?;
    // Blocked clients are the writer's (its count changes only under the gate): none of
    // these commands serves one, but a client blocked on a key is left to the writer's
    // ordering all the same.
    if metrics.blocked_clients.load(Ordering::Relaxed) > 0 {
        return None;
    }
    let mut group = WriteGroup::new(store);
    group.fix_clock(now_ms());
    let mut group_keys: GroupKeys = HashMap::new();
    let reply = apply_noting_keys(&mut group, &mut group_keys, cmd, proto);
    let (doorbell, result) = match group.try_submit_now() {
        Ok(None) => return None,
        Ok(Some(mut commit)) => (commit.take_doorbell(), commit.finish(store)),
        Err(e) => (None, Err(e)),
    };
    touch_group_keys(store, &group_keys);
    let done = group_replies(metrics, result, vec![(0, 0, reply)]).pop()?;
    Some((done.reply, doorbell))
}
