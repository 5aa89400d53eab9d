//! Blocked clients: the writer thread's table of BLPOP, BRPOP, BLMOVE and BRPOPLPUSH
//! commands waiting for a list to have an item, and BZPOPMIN and BZPOPMAX waiting for a
//! sorted set.
//!
//! **Where a wait lives.** A blocking command is a write, so it goes to `ls-writer` like
//! LPOP. There it is first run as its non-blocking twin against the write group being
//! built (so it sees every earlier write, its own group's included); if every list it names
//! is empty it is *parked* here instead of answered: no reply is sent, and `ls-net`, which
//! saw it leave as a blocking command, runs nothing more of that connection until its reply
//! comes (Redis: a blocked client's later commands wait). Nothing else waits: the writer
//! goes on with other clients' commands.
//!
//! **Who wakes it.** After each command (or EXEC) the writer applied, the keys it wrote that
//! someone waits on are *ready*; for each, while the key holds the type its oldest waiter
//! waits for (a list, a sorted set: the drive keeps no empty collection) and has
//! waiters, the oldest waiter's command is run again, non-blocking, in the same write group
//! (Redis 7.2 re-executes a served command the same way): so the push and the pops it
//! serves are one atomic group commit, the pusher is answered first (its reply is earlier
//! in the group) and waiters are served in the order they blocked. A served BLMOVE writes
//! its destination, which may make that key ready in turn. A waiter blocked on several keys
//! leaves every key's queue once served.
//!
//! **Timeouts** are kept in a deadline-ordered set; the writer looks at it every turn and
//! sleeps no longer than the next deadline, answering a timed-out waiter with Redis's nil
//! (a null array, BLMOVE's too: Redis answers every timed-out list wait so).
//!
//! **A client that leaves.** `ls-net` holds a [`BlockHandle`] for each blocking command it
//! sent and cancels it when the connection closes (the peer's end of stream or reset,
//! CLIENT KILL, the output limit, shutdown). A cancelled waiter is never
//! served, so no item is popped for a client that is gone; at its next turn the writer
//! answers it nil (so a half-closed connection still gets the replies it is owed and then
//! closes) and drops it. A command that arrives cancelled pops nothing either. The one
//! window left is Redis's own: a client that goes between being served and reading its
//! reply loses that item (Redis has written it into a socket the peer then resets).
//!
//! **CLIENT UNBLOCK.** `ls-net` ends a parked command's wait through the same handle (nil,
//! or `-UNBLOCKED` with ERROR). The handle's state decides who ends a wait: the writer
//! *claims* a waiter before running its command again (and releases it if the command
//! still finds nothing), a timeout claims it too, and an unblock or a cancellation only
//! takes a waiter that is waiting. So CLIENT UNBLOCK answers 1 exactly when the client gets
//! nil or the error, never when it got an item.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use foldhash::{HashMap, HashMapExt};
use kvproto::command::Collection;
use kvproto::Reply;

/// A waiter's state in its [`BlockHandle`].
const WAITING: u8 = 0;
/// Its client went: never served, answered nil.
const CANCELLED: u8 = 1;
/// `CLIENT UNBLOCK id TIMEOUT`: answered nil, as if it timed out.
const UNBLOCKED_TIMEOUT: u8 = 2;
/// `CLIENT UNBLOCK id ERROR`: answered Redis's `-UNBLOCKED` error.
const UNBLOCKED_ERROR: u8 = 3;
/// The writer is running it again (between [`BlockHandle::claim`] and its answer or
/// [`BlockHandle::release`]): it cannot be unblocked meanwhile.
const SERVING: u8 = 4;

/// The error a waiter unblocked with `CLIENT UNBLOCK id ERROR` gets.
pub const UNBLOCKED_ERROR_TEXT: &str = "UNBLOCKED client unblocked via CLIENT UNBLOCK";

/// A parked command's state, shared by `ls-net` (which cancels it when its connection
/// closes, and unblocks it for CLIENT UNBLOCK) and the writer (which serves only a waiting
/// command, claiming it first, so that a waiter is either served or unblocked, never both).
#[derive(Debug)]
pub struct BlockHandle {
    state: AtomicU8,
    /// The table's count of cancellations and unblocks not yet pruned.
    to_prune: Arc<AtomicUsize>,
}

impl BlockHandle {
    fn leave(&self, to: u8) -> bool {
        let left = self
            .state
            .compare_exchange(WAITING, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if left {
            self.to_prune.fetch_add(1, Ordering::Release);
        }
        left
    }

    /// Cancels the wait: the command will never be served (it is answered nil).
    pub fn cancel(&self) {
        self.leave(CANCELLED);
    }

    /// `CLIENT UNBLOCK`: ends the wait with nil (`error` false) or Redis's `-UNBLOCKED`
    /// error. False when the command no longer waits (served, being served, or already
    /// ended).
    pub fn unblock(&self, error: bool) -> bool {
        self.leave(if error {
            UNBLOCKED_ERROR
        } else {
            UNBLOCKED_TIMEOUT
        })
    }

    /// Whether it still waits (not cancelled or unblocked).
    #[must_use]
    pub fn is_waiting(&self) -> bool {
        matches!(self.state.load(Ordering::Acquire), WAITING | SERVING)
    }

    /// The writer takes a waiting command to run it again; false when it no longer waits.
    pub fn claim(&self) -> bool {
        self.state
            .compare_exchange(WAITING, SERVING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The command it claimed found nothing after all: it waits again.
    pub fn release(&self) {
        let _ = self
            .state
            .compare_exchange(SERVING, WAITING, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The reply of a command that left the wait without being served.
    pub fn ended_reply(&self) -> Reply {
        if self.state.load(Ordering::Acquire) == UNBLOCKED_ERROR {
            Reply::error(UNBLOCKED_ERROR_TEXT)
        } else {
            Reply::NullArray
        }
    }
}

/// Makes the handles of one drive's parked commands (they all report to its table).
#[derive(Clone, Debug, Default)]
pub struct BlockHandles {
    to_prune: Arc<AtomicUsize>,
}

impl BlockHandles {
    /// A handle for a command about to be sent to the writer.
    #[must_use]
    pub fn handle(&self) -> Arc<BlockHandle> {
        Arc::new(BlockHandle {
            state: AtomicU8::new(WAITING),
            to_prune: self.to_prune.clone(),
        })
    }
}

/// One parked command.
struct Waiter {
    conn: u64,
    seq: u64,
    cmd: Collection,
    /// When it times out (ms since the epoch); `None`: never.
    deadline: Option<u64>,
    handle: Arc<BlockHandle>,
}

impl Waiter {
    /// The keys it waits on (BLPOP's, BZPOPMIN's, BLMPOP's and BZMPOP's keys, BLMOVE's
    /// source).
    fn keys(&self) -> Vec<Bytes> {
        match &self.cmd {
            Collection::BPop { keys, .. }
            | Collection::BZPop { keys, .. }
            | Collection::MPop { keys, .. }
            | Collection::ZMPop { keys, .. } => keys.clone(),
            Collection::BLMove { src, .. } => vec![src.clone()],
            _ => Vec::new(),
        }
    }
}

/// A waiter's command, to run again when one of its keys is ready.
pub struct Wakeup {
    /// Its id in the table (pass to [`Blocked::served`] once answered).
    pub id: u64,
    /// The blocking command.
    pub cmd: Collection,
    /// Its state: [`BlockHandle::claim`] it before running the command.
    pub handle: Arc<BlockHandle>,
}

/// The table of parked commands (owned by the writer thread).
pub struct Blocked {
    next_id: u64,
    waiters: HashMap<u64, Waiter>,
    /// Waiter ids per key, in the order they blocked.
    by_key: HashMap<Bytes, VecDeque<u64>>,
    /// (deadline, id) of the waiters that time out.
    deadlines: BTreeSet<(u64, u64)>,
    to_prune: Arc<AtomicUsize>,
}

impl Blocked {
    /// An empty table for the commands whose handles `handles` makes.
    #[must_use]
    pub fn new(handles: &BlockHandles) -> Blocked {
        Blocked {
            next_id: 0,
            waiters: HashMap::new(),
            by_key: HashMap::new(),
            deadlines: BTreeSet::new(),
            to_prune: handles.to_prune.clone(),
        }
    }

    /// How many commands wait (INFO `blocked_clients`).
    #[must_use]
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Whether nothing waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Whether some command waits on `key`.
    #[must_use]
    pub fn waits_on(&self, key: &[u8]) -> bool {
        self.by_key.contains_key(key)
    }

    /// Parks `cmd` (a blocking command that found nothing) of request `seq` on `conn`;
    /// `now_ms`: the time its timeout counts from. A command whose handle is cancelled
    /// (already, or later) is answered nil by the next [`Blocked::expire`].
    pub fn park(
        &mut self,
        conn: u64,
        seq: u64,
        cmd: Collection,
        handle: Arc<BlockHandle>,
        now_ms: u64,
    ) {
        let deadline = match cmd.block_timeout_ms() {
            Some(0) | None => None,
            Some(ms) => Some(now_ms.saturating_add(ms)),
        };
        let id = self.next_id;
        self.next_id += 1;
        let w = Waiter {
            conn,
            seq,
            cmd,
            deadline,
            handle,
        };
        for k in w.keys() {
            let q = self.by_key.entry(k).or_default();
            // BLPOP k k: one place in the queue is enough.
            if q.back() != Some(&id) {
                q.push_back(id);
            }
        }
        if let Some(d) = deadline {
            self.deadlines.insert((d, id));
        }
        self.waiters.insert(id, w);
    }

    /// The ids of the waiters on `key`, in the order they blocked.
    #[must_use]
    pub fn queue(&self, key: &[u8]) -> Vec<u64> {
        self.by_key
            .get(key)
            .map(|q| q.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Waiter `id`'s command, unless it left, was cancelled or unblocked (such a waiter is
    /// never served: [`Blocked::expire`] answers it).
    #[must_use]
    pub fn wakeup(&self, id: u64) -> Option<Wakeup> {
        let w = self.waiters.get(&id)?;
        w.handle.is_waiting().then(|| Wakeup {
            id,
            cmd: w.cmd.clone(),
            handle: w.handle.clone(),
        })
    }

    /// Takes waiter `id` out of the table once it has its answer; its (connection,
    /// sequence number) for the reply.
    pub fn served(&mut self, id: u64) -> Option<(u64, u64)> {
        self.remove(id).map(|w| (w.conn, w.seq))
    }

    /// The earliest deadline (ms since the epoch), if any waiter has one.
    #[must_use]
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|&(d, _)| d)
    }

    /// Answers Redis's nil to every waiter whose deadline is at or before `now_ms` and to
    /// every cancelled one (its client went: if it only half-closed, the nil lets its
    /// connection finish; if it is gone, the reply is dropped), and to every one CLIENT
    /// UNBLOCK ended (nil, or the `-UNBLOCKED` error); the replies to send, as
    /// (connection, sequence, reply). Redis answers a null array to every timed-out list or
    /// sorted-set wait, BLMOVE's too.
    pub fn expire(&mut self, now_ms: u64) -> Vec<(u64, u64, Reply)> {
        let mut out = Vec::new();
        if self.to_prune.swap(0, Ordering::AcqRel) > 0 {
            let gone: Vec<u64> = self
                .waiters
                .iter()
                .filter(|(_, w)| !w.handle.is_waiting())
                .map(|(&id, _)| id)
                .collect();
            for id in gone {
                if let Some(w) = self.remove(id) {
                    out.push((w.conn, w.seq, w.handle.ended_reply()));
                }
            }
        }
        while let Some(&(d, id)) = self.deadlines.first() {
            if d > now_ms {
                break;
            }
            if let Some(w) = self.remove(id) {
                // Claimed, so a CLIENT UNBLOCK racing the timeout cannot also win; one
                // that won first is answered as it asked.
                let reply = if w.handle.claim() {
                    Reply::NullArray
                } else {
                    w.handle.ended_reply()
                };
                out.push((w.conn, w.seq, reply));
            }
        }
        out
    }

    fn remove(&mut self, id: u64) -> Option<Waiter> {
        let w = self.waiters.remove(&id)?;
        for k in w.keys() {
            self.unlink(&k, id);
        }
        if let Some(d) = w.deadline {
            self.deadlines.remove(&(d, id));
        }
        Some(w)
    }

    fn unlink(&mut self, key: &[u8], id: u64) {
        if let Some(q) = self.by_key.get_mut(key) {
            q.retain(|&x| x != id);
            if q.is_empty() {
                self.by_key.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bpop(keys: &[&str], timeout_ms: u64) -> Collection {
        Collection::BPop {
            keys: keys.iter().map(|k| Bytes::from(k.to_string())).collect(),
            left: true,
            timeout_ms,
        }
    }

    fn table() -> (Blocked, BlockHandles) {
        let handles = BlockHandles::default();
        (Blocked::new(&handles), handles)
    }

    #[test]
    fn waiters_are_woken_in_the_order_they_blocked_and_leave_every_key() {
        let (mut b, h) = table();
        b.park(1, 10, bpop(&["a", "b"], 0), h.handle(), 0);
        b.park(2, 20, bpop(&["b"], 0), h.handle(), 0);
        assert_eq!(b.queue(b"b"), vec![0, 1]);
        let first = b.wakeup(b.queue(b"b")[0]).unwrap();
        assert_eq!(b.served(first.id), Some((1, 10)));
        assert!(!b.waits_on(b"a"), "served through b, it left a's queue too");
        let second = b.wakeup(b.queue(b"b")[0]).unwrap();
        assert_eq!(b.served(second.id), Some((2, 20)));
        assert!(b.is_empty() && b.queue(b"b").is_empty());
    }

    #[test]
    fn a_cancelled_waiter_is_never_woken_and_is_answered_nil() {
        let (mut b, h) = table();
        let gone = h.handle();
        b.park(1, 7, bpop(&["q"], 0), gone.clone(), 0);
        b.park(2, 1, bpop(&["q"], 0), h.handle(), 0);
        gone.cancel();
        gone.cancel();
        let ids = b.queue(b"q");
        assert!(b.wakeup(ids[0]).is_none(), "cancelled: never served");
        let live = b.wakeup(ids[1]).unwrap();
        assert_eq!(b.served(live.id), Some((2, 1)));
        assert_eq!(b.expire(0), vec![(1, 7, Reply::NullArray)]);
        assert!(b.is_empty() && !b.waits_on(b"q"));
        // Cancelled before it was parked: answered at the next turn all the same.
        let early = h.handle();
        early.cancel();
        b.park(4, 3, bpop(&["s"], 0), early, 0);
        assert_eq!(b.expire(0), vec![(4, 3, Reply::NullArray)]);
        assert!(b.is_empty());
    }

    #[test]
    fn timeouts_answer_nil_in_deadline_order_and_zero_waits_for_ever() {
        let (mut b, h) = table();
        b.park(1, 1, bpop(&["a"], 500), h.handle(), 1000);
        b.park(2, 1, bpop(&["a"], 0), h.handle(), 1000);
        let mv = Collection::BLMove {
            src: Bytes::from_static(b"a"),
            dst: Bytes::from_static(b"d"),
            from_left: true,
            to_left: true,
            timeout_ms: 100,
            name: "blmove",
        };
        b.park(3, 1, mv, h.handle(), 1000);
        assert_eq!(b.next_deadline(), Some(1100));
        assert!(b.expire(1099).is_empty());
        let out = b.expire(1500);
        let shapes: Vec<(u64, Reply)> = out.into_iter().map(|(c, _, r)| (c, r)).collect();
        assert_eq!(shapes, vec![(3, Reply::NullArray), (1, Reply::NullArray)]);
        assert_eq!(b.next_deadline(), None);
        assert!(b.waits_on(b"a"), "the one without a timeout still waits");
    }
}
