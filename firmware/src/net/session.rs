//! Connection commands on `ls-net` that reach past the calling connection's own fields:
//! RESET, CLIENT KILL (which closes other connections), CLIENT NO-EVICT / NO-TOUCH, CLIENT
//! PAUSE / UNPAUSE (commands wait in their connection's backlog, in order, until the pause
//! ends), and the SLOWLOG and LATENCY commands.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kvproto::{ClientKill, ClientKillFilters, ClientType, Command, Protocol, Reply};

use super::conn::{local_addr, Conn};
use super::local::Local;
use super::Net;
use crate::cluster::ConnMode;
use crate::exec::TxItem;

/// A CLIENT PAUSE in force.
#[derive(Debug)]
pub(super) struct Pause {
    /// When it ends.
    until: Instant,
    /// ALL (every command waits) or WRITE (commands that write, PUBLISH, and EXEC of a
    /// transaction that writes wait).
    all: bool,
    /// Connections with a command waiting for the end.
    waiting: Vec<u64>,
}

/// Whether `cmd` is served by [`Net::session_command`].
pub(super) fn is_session(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Reset
            | Command::ClientKill(_)
            | Command::ClientNoEvict(_)
            | Command::ClientNoTouch(_)
            | Command::ClientPause { .. }
            | Command::ClientUnpause
            | Command::ClientUnblock { .. }
            | Command::SlowlogGet(_)
            | Command::SlowlogLen
            | Command::SlowlogReset
            | Command::LatencyLatest
            | Command::LatencyHistory(_)
            | Command::LatencyReset(_)
    )
}

/// Whether connection `c` (not the caller when `me` says so) matches CLIENT KILL's filters.
fn matches(c: &Conn, f: &ClientKillFilters, me: u64) -> bool {
    if f.skipme && c.id == me {
        return false;
    }
    if f.id.is_some_and(|id| id != c.id) {
        return false;
    }
    let subscribed = c.subs.count() > 0;
    match f.kind {
        None => {}
        Some(ClientType::Normal) if !subscribed => {}
        Some(ClientType::PubSub) if subscribed => {}
        Some(_) => return false,
    }
    if f.addr
        .as_ref()
        .is_some_and(|a| a.as_ref() != c.peer.to_string().as_bytes())
    {
        return false;
    }
    if f.laddr
        .as_ref()
        .is_some_and(|a| a.as_ref() != local_addr(c).as_bytes())
    {
        return false;
    }
    if f.user
        .as_ref()
        .is_some_and(|u| u.as_ref() != c.user.as_bytes())
    {
        return false;
    }
    true
}

impl Net {
    /// RESET, CLIENT KILL / NO-EVICT / NO-TOUCH and SLOWLOG for connection `id`.
    pub(super) fn session_command(&mut self, id: u64, cmd: Command) -> Local {
        let reply = |r: Reply| Local {
            reply: Some(r),
            close: false,
            deferred: false,
        };
        match cmd {
            Command::Reset => {
                self.unsubscribe_all(id);
                let Some(c) = self.conns.get_mut(&id) else {
                    return reply(Reply::ok());
                };
                c.multi = None;
                c.multi_dirty = false;
                self.store.unwatch(&std::mem::take(&mut c.watched));
                c.proto = Protocol::Resp2;
                let user = self.cfg.users.default_user();
                c.authed = self.cfg.users.open_by_default();
                c.denied = user.denied();
                c.user = user.name.clone();
                c.all_channels = user.all_channels();
                c.name = None;
                c.cluster_mode = ConnMode::default();
                c.no_evict = false;
                c.no_touch = false;
                reply(Reply::Simple(Bytes::from_static(b"RESET")))
            }
            Command::ClientNoEvict(on) => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.no_evict = on;
                }
                reply(Reply::ok())
            }
            Command::ClientNoTouch(on) => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.no_touch = on;
                }
                reply(Reply::ok())
            }
            Command::ClientKill(kill) => self.client_kill(id, &kill),
            Command::ClientPause { millis, all } => {
                let until = self.now + Duration::from_millis(millis);
                match self.pause.as_mut() {
                    // A second pause keeps the later end and the stricter mode.
                    Some(p) => {
                        p.until = p.until.max(until);
                        p.all |= all;
                    }
                    None => {
                        self.pause = Some(Pause {
                            until,
                            all,
                            waiting: Vec::new(),
                        });
                    }
                }
                reply(Reply::ok())
            }
            Command::ClientUnpause => {
                self.end_pause();
                reply(Reply::ok())
            }
            Command::ClientUnblock { id: target, error } => {
                // Only a client parked in a blocking command (not one held by CLIENT PAUSE).
                let ended = u64::try_from(target)
                    .ok()
                    .and_then(|t| self.conns.get(&t))
                    .and_then(|c| c.blocked.as_ref())
                    .is_some_and(|(_, h)| h.unblock(error));
                reply(Reply::Integer(i64::from(ended)))
            }
            Command::SlowlogGet(count) => reply(self.slowlog.get(count)),
            Command::SlowlogLen => reply(Reply::Integer(
                i64::try_from(self.slowlog.len()).unwrap_or(i64::MAX),
            )),
            Command::SlowlogReset => {
                self.slowlog.reset();
                reply(Reply::ok())
            }
            Command::LatencyLatest => reply(self.latency.latest()),
            Command::LatencyHistory(event) => reply(self.latency.history(&event)),
            Command::LatencyReset(events) => reply(self.latency.reset(&events)),
            other => reply(Reply::error(format!(
                "ERR internal: '{}' is not a session command",
                other.name()
            ))),
        }
    }

    /// Whether connection `id`'s next command, `cmd`, must wait for the CLIENT PAUSE in force
    /// (then the connection is remembered and resumed when it ends).
    pub(super) fn paused(&mut self, id: u64, cmd: &Command) -> bool {
        let Some(p) = self.pause.as_mut() else {
            return false;
        };
        if self.now >= p.until {
            return false;
        }
        let waits = p.all
            || cmd.is_write()
            || matches!(cmd, Command::Publish { .. })
            || (matches!(cmd, Command::Exec)
                && self.conns.get(&id).is_some_and(|c| {
                    c.multi.as_ref().is_some_and(|q| {
                        q.iter()
                            .any(|item| matches!(item, TxItem::Run(cmd) if cmd.is_write()))
                    })
                }));
        if waits && !p.waiting.contains(&id) {
            p.waiting.push(id);
        }
        waits
    }

    /// When the pause should end, if one is in force (the poll wakes for it).
    pub(super) fn pause_deadline(&self) -> Option<Instant> {
        self.pause.as_ref().map(|p| p.until)
    }

    /// Ends the pause once its time has passed (each loop turn).
    pub(super) fn end_pause_if_due(&mut self) {
        if self.pause.as_ref().is_some_and(|p| self.now >= p.until) {
            self.end_pause();
        }
    }

    /// Ends the pause and runs the commands that waited for it, connection by connection
    /// in the order they started waiting.
    fn end_pause(&mut self) {
        if let Some(p) = self.pause.take() {
            for id in p.waiting {
                self.resume(id);
            }
        }
    }

    /// CLIENT KILL: closes the matching connections at once (the caller, if it matches,
    /// after this reply, as Redis does).
    fn client_kill(&mut self, id: u64, kill: &ClientKill) -> Local {
        let reply = |r: Reply, close: bool| Local {
            reply: Some(r),
            close,
            deferred: false,
        };
        let filters = match kill {
            ClientKill::Addr(addr) => ClientKillFilters {
                id: None,
                kind: None,
                addr: Some(addr.clone()),
                laddr: None,
                user: None,
                // The old form may kill the caller.
                skipme: false,
            },
            ClientKill::Filters(f) => {
                if let Some(u) = &f.user {
                    if !self
                        .cfg
                        .users
                        .iter()
                        .any(|x| x.name.as_bytes() == u.as_ref())
                    {
                        return reply(
                            Reply::error(format!(
                                "ERR No such user '{}'",
                                String::from_utf8_lossy(u)
                            )),
                            false,
                        );
                    }
                }
                f.clone()
            }
        };
        let mut victims: Vec<u64> = self
            .conns
            .values()
            .filter(|c| matches(c, &filters, id))
            .map(|c| c.id)
            .collect();
        victims.sort_unstable();
        let killed = victims.len();
        let mut close_me = false;
        for v in victims {
            if v == id {
                close_me = true;
            } else {
                tracing::debug!(client = v, by = id, "CLIENT KILL");
                self.close(v);
            }
        }
        match kill {
            ClientKill::Addr(_) if killed == 0 => reply(Reply::error("ERR No such client"), false),
            ClientKill::Addr(_) => reply(Reply::ok(), close_me),
            ClientKill::Filters(_) => reply(
                Reply::Integer(i64::try_from(killed).unwrap_or(i64::MAX)),
                close_me,
            ),
        }
    }
}
