//! Connection-level commands answered on `ls-net` itself (PING, AUTH, HELLO, CLIENT, COMMAND,
//! CONFIG, MULTI and WATCH bookkeeping, CLUSTER), and the queueing of commands inside MULTI.
//! Pub/sub is in [`super::pubsub`]; RESET, CLIENT KILL and SLOWLOG in [`super::session`].

use std::sync::atomic::Ordering;

use bytes::Bytes;
use kvproto::command::COMMANDS;
use kvproto::{Command, Protocol, Reply};

use super::auth;
use super::conn::{client_line, valid_client_name, Conn};
use super::route::{key_too_long, route_of, Route};
use super::Net;
use crate::cluster::{self, AdminOutcome};
use crate::exec::TxItem;

/// What running a connection-level command asks of the loop.
pub(super) struct Local {
    pub(super) reply: Option<Reply>,
    pub(super) close: bool,
    /// The reply comes later, through the reply queue under the connection's next sequence
    /// number (a cluster map change, answered by the saver thread once it is durable).
    pub(super) deferred: bool,
}

impl Net {
    /// Queues a request inside MULTI and returns the reply to send now: `+QUEUED`, or the
    /// error of a request Redis refuses before queueing (unknown command, wrong arity, no
    /// authentication, another node's slot), which also makes EXEC abort. A request that
    /// fails to parse otherwise is queued and answers its error inside EXEC's reply.
    pub(super) fn queue_in_multi(
        &mut self,
        id: u64,
        args: &[Bytes],
        parsed: Result<Command, kvproto::CommandError>,
    ) -> Reply {
        let Some(c) = self.conns.get_mut(&id) else {
            return Reply::ok();
        };
        let refuse = |c: &mut Conn, r: Reply| {
            c.multi_dirty = true;
            r
        };
        if let Err(e) = kvproto::command::check_arity(args) {
            if args
                .first()
                .is_some_and(|n| n.eq_ignore_ascii_case(b"exec"))
            {
                // A malformed EXEC discards the transaction at once, as Redis does.
                c.multi = None;
                c.multi_dirty = false;
                self.store.unwatch(&std::mem::take(&mut c.watched));
                let why = e.0.strip_prefix("ERR ").unwrap_or(&e.0);
                return Reply::error(format!("EXECABORT Transaction discarded because of: {why}"));
            }
            return refuse(c, Reply::error(e.to_string()));
        }
        if !c.authed {
            return refuse(c, Reply::error("NOAUTH Authentication required."));
        }
        if !c.denied.is_empty() {
            if let Some(r) = parsed
                .as_ref()
                .ok()
                .and_then(|cmd| auth::refuse(c, cmd, args))
            {
                return refuse(c, r);
            }
        }
        let item = match parsed {
            Err(e) => TxItem::Answer(Reply::error(e.to_string())),
            Ok(cmd) => match route_of(&cmd) {
                Route::Here => TxItem::Answer(match cmd {
                    Command::Ping(None) => Reply::Simple(Bytes::from_static(b"PONG")),
                    Command::Ping(Some(m)) | Command::Echo(m) => Reply::Bulk(m),
                    // EXEC forgets the watches anyway.
                    Command::Unwatch => Reply::ok(),
                    other => Reply::error(format!(
                        "ERR '{}' is not allowed inside MULTI on this drive",
                        other.name()
                    )),
                }),
                route => {
                    let mode = c.cluster_mode;
                    c.cluster_mode.asking = false;
                    let store = &self.store;
                    let redirect = self.cluster.as_ref().and_then(|g| {
                        g.check(&cmd, route == Route::Writer, mode, |k| {
                            store.kind(k).ok().flatten().is_some()
                        })
                    });
                    if let Some(r) = redirect {
                        return refuse(c, r);
                    }
                    match key_too_long(&cmd) {
                        Some(r) => TxItem::Answer(r),
                        None => TxItem::Run(cmd),
                    }
                }
            },
        };
        if let Some(q) = c.multi.as_mut() {
            q.push(item);
        }
        Reply::Simple(Bytes::from_static(b"QUEUED"))
    }

    /// Connection-level commands, answered on this thread.
    pub(super) fn local(&mut self, id: u64, cmd: Command) -> Local {
        let reply = |r: Reply| Local {
            reply: Some(r),
            close: false,
            deferred: false,
        };
        if super::pubsub::is_pubsub(&cmd) {
            let r = self.pubsub_command(id, cmd);
            return Local {
                reply: r,
                close: false,
                deferred: false,
            };
        }
        if super::session::is_session(&cmd) {
            return self.session_command(id, cmd);
        }
        let nconns = self.conns.len();
        let now = self.now;
        let Some(c) = self.conns.get_mut(&id) else {
            return Local {
                reply: None,
                close: true,
                deferred: false,
            };
        };
        match cmd {
            Command::Ping(m) if super::pubsub::in_subscribed_mode(c.proto, &c.subs) => {
                reply(super::pubsub::subscribed_pong(m))
            }
            Command::Ping(None) => reply(Reply::Simple(Bytes::from_static(b"PONG"))),
            Command::Ping(Some(m)) | Command::Echo(m) => reply(Reply::Bulk(m)),
            Command::Quit => Local {
                reply: Some(Reply::ok()),
                close: true,
                deferred: false,
            },
            Command::Select(0) => reply(Reply::ok()),
            Command::Select(_) if self.cluster.is_some() => {
                reply(Reply::error("ERR SELECT is not allowed in cluster mode"))
            }
            Command::Select(_) => reply(Reply::error("ERR DB index is out of range")),
            Command::Auth {
                username,
                password: given,
            } => reply(auth::auth(&self.cfg.users, c, username.as_deref(), &given)),
            Command::AclWhoami | Command::AclUsers | Command::AclList => {
                reply(auth::acl_command(&self.cfg.users, c, &cmd))
            }
            Command::Hello {
                protover,
                auth,
                setname,
            } => {
                let proto = match protover {
                    None => c.proto,
                    Some(2) => Protocol::Resp2,
                    Some(3) => Protocol::Resp3,
                    Some(_) => {
                        return reply(Reply::error("NOPROTO unsupported protocol version"));
                    }
                };
                if let Some((user, given)) = auth {
                    if !auth::login(&self.cfg.users, c, &user, &given) {
                        return reply(Reply::error(auth::WRONGPASS));
                    }
                }
                if !c.authed {
                    return reply(Reply::error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"));
                }
                if let Some(n) = setname {
                    if !valid_client_name(&n) {
                        return reply(Reply::error("ERR Client names cannot contain spaces, newlines or special characters."));
                    }
                    c.name = Some(n);
                }
                c.proto = proto;
                let s = |v: &'static str| Reply::Bulk(Bytes::from_static(v.as_bytes()));
                reply(Reply::Map(vec![
                    (s("server"), s("redis")),
                    (s("version"), s(crate::info::REDIS_VERSION)),
                    (
                        s("proto"),
                        Reply::Integer(if proto == Protocol::Resp3 { 3 } else { 2 }),
                    ),
                    (s("id"), Reply::Integer(c.id as i64)),
                    (
                        s("mode"),
                        s(if self.cluster.is_some() {
                            "cluster"
                        } else {
                            "standalone"
                        }),
                    ),
                    (s("role"), s("master")),
                    (s("modules"), Reply::Array(Vec::new())),
                ]))
            }
            Command::ClientSetName(n) => {
                if !valid_client_name(&n) {
                    return reply(Reply::error(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    ));
                }
                c.name = if n.is_empty() { None } else { Some(n) };
                reply(Reply::ok())
            }
            Command::ClientGetName => reply(c.name.clone().map_or(Reply::Null, Reply::Bulk)),
            Command::ClientSetInfo { attr, value } => {
                match attr.to_ascii_lowercase().as_slice() {
                    b"lib-name" => c.lib_name = Some(value),
                    b"lib-ver" => c.lib_ver = Some(value),
                    _ => {
                        return reply(Reply::error(format!(
                            "ERR Unrecognized option '{}'",
                            String::from_utf8_lossy(&attr)
                        )))
                    }
                }
                reply(Reply::ok())
            }
            Command::ClientId => reply(Reply::Integer(c.id as i64)),
            Command::ClientInfo => reply(Reply::Verbatim(Bytes::from(client_line(c, now)))),
            Command::ClientList => {
                let mut text = String::new();
                let mut ids: Vec<&u64> = self.conns.keys().collect();
                ids.sort_unstable();
                for i in ids {
                    if let Some(other) = self.conns.get(i) {
                        text.push_str(&client_line(other, now));
                    }
                }
                reply(Reply::Verbatim(Bytes::from(text)))
            }
            Command::CommandCount => reply(Reply::Integer(COMMANDS.len() as i64)),
            Command::CommandGetKeys(args) => reply(match kvproto::command::command_keys(&args) {
                Ok(keys) => Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
                Err(e) => Reply::error(e.0),
            }),
            Command::CommandList => reply(Reply::Array(
                COMMANDS
                    .iter()
                    .map(|s| Reply::Bulk(Bytes::from_static(s.name.as_bytes())))
                    .collect(),
            )),
            Command::CommandInfo(names) => {
                if names.is_empty() {
                    reply(Reply::Array(
                        COMMANDS.iter().map(|s| s.info_reply()).collect(),
                    ))
                } else {
                    reply(Reply::Array(
                        names
                            .iter()
                            .map(|n| {
                                kvproto::command::lookup(n)
                                    .map_or(Reply::NullArray, |s| s.info_reply())
                            })
                            .collect(),
                    ))
                }
            }
            Command::CommandDocs(names) => {
                let specs: Vec<_> = if names.is_empty() {
                    COMMANDS.iter().collect()
                } else {
                    names
                        .iter()
                        .filter_map(|n| kvproto::command::lookup(n))
                        .collect()
                };
                reply(Reply::Map(
                    specs
                        .into_iter()
                        .map(|s| {
                            (
                                Reply::Bulk(Bytes::from_static(s.name.as_bytes())),
                                s.docs_reply(),
                            )
                        })
                        .collect(),
                ))
            }
            Command::ConfigGet(patterns) => {
                let mut pairs = Vec::new();
                for (k, v) in &self.cfg.reported {
                    if patterns
                        .iter()
                        .any(|p| kvproto::glob::glob_match(&p.to_ascii_lowercase(), k.as_bytes()))
                    {
                        pairs.push((
                            Reply::Bulk(Bytes::copy_from_slice(k.as_bytes())),
                            Reply::Bulk(Bytes::copy_from_slice(v.as_bytes())),
                        ));
                    }
                }
                reply(Reply::Map(pairs))
            }
            Command::ConfigSet(pairs) => {
                let name = pairs
                    .first()
                    .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                    .unwrap_or_default();
                reply(Reply::error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - this drive's settings are fixed at start (flags or --config)"
                )))
            }
            Command::ConfigResetStat => {
                self.metrics.reset();
                reply(Reply::ok())
            }
            Command::Shutdown { .. } => {
                tracing::info!(clients = nconns, "SHUTDOWN received");
                self.shutdown.store(true, Ordering::Release);
                Local {
                    reply: None,
                    close: true,
                    deferred: false,
                }
            }
            Command::Cluster(args) => match &mut self.cluster {
                Some(g) => {
                    let r = g.cluster_command(&args, id, c.next_seq);
                    // The workers' copy of the slots being handed over.
                    self.store.migrations.set(g.migrating_targets());
                    match r {
                        AdminOutcome::Reply(r) => reply(r),
                        AdminOutcome::Deferred => Local {
                            reply: None,
                            close: false,
                            deferred: true,
                        },
                    }
                }
                None => reply(Reply::error(cluster::DISABLED_ERROR)),
            },
            Command::Readonly | Command::Readwrite | Command::Asking if self.cluster.is_none() => {
                reply(Reply::error(cluster::DISABLED_ERROR))
            }
            Command::Multi if c.multi.is_some() => {
                reply(Reply::error("ERR MULTI calls can not be nested"))
            }
            Command::Multi => {
                c.multi = Some(Vec::new());
                c.multi_dirty = false;
                reply(Reply::ok())
            }
            Command::Exec if c.multi.is_none() => reply(Reply::error("ERR EXEC without MULTI")),
            Command::Exec => {
                // Only a transaction with a refused command is answered here.
                c.multi = None;
                c.multi_dirty = false;
                self.store.unwatch(&std::mem::take(&mut c.watched));
                reply(Reply::error(
                    "EXECABORT Transaction discarded because of previous errors.",
                ))
            }
            Command::Discard if c.multi.is_none() => {
                reply(Reply::error("ERR DISCARD without MULTI"))
            }
            Command::Discard => {
                c.multi = None;
                c.multi_dirty = false;
                self.store.unwatch(&std::mem::take(&mut c.watched));
                reply(Reply::ok())
            }
            Command::Watch(_) if c.multi.is_some() => {
                reply(Reply::error("ERR WATCH inside MULTI is not allowed"))
            }
            Command::Watch(keys) => {
                for k in &keys {
                    c.watched.push(self.store.watch(k));
                }
                reply(Reply::ok())
            }
            Command::Unwatch => {
                self.store.unwatch(&std::mem::take(&mut c.watched));
                reply(Reply::ok())
            }
            Command::Readonly => {
                c.cluster_mode.readonly = true;
                reply(Reply::ok())
            }
            Command::Readwrite => {
                c.cluster_mode.readonly = false;
                reply(Reply::ok())
            }
            Command::Asking => {
                c.cluster_mode.asking = true;
                reply(Reply::ok())
            }
            other => reply(Reply::error(format!(
                "ERR internal: '{}' is not a connection command",
                other.name()
            ))),
        }
    }
}

/// The commands that run at once inside MULTI instead of being queued.
pub(super) fn is_transaction_control(parsed: &Result<Command, kvproto::CommandError>) -> bool {
    matches!(
        parsed,
        Ok(Command::Multi | Command::Exec | Command::Discard | Command::Watch(_) | Command::Quit)
    )
}

/// Commands a client may send before it has authenticated.
pub(super) fn allowed_before_auth(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Auth { .. } | Command::Hello { .. } | Command::Quit | Command::Reset
    )
}
