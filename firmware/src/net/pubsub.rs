//! Pub/sub on `ls-net`: who is subscribed to which channel and pattern, the SUBSCRIBE family,
//! PUBLISH and PUBSUB, and RESP2's subscribed-mode rules.
//!
//! Subscriptions live on the network thread because the connections do: PUBLISH appends the
//! message to each receiver's output in the same loop turn (no other thread, no queue), and
//! the receivers are written at the end of the turn. A message goes after the replies of
//! every command the receiver had sent before the PUBLISH ran (held back while some are
//! still in flight, which only RESP3 allows a subscriber) and before the replies of the
//! commands it sends later, as redis-server orders them; two messages keep the order of
//! their PUBLISHes. A slow subscriber
//! is bounded by the `pubsub` class of `client-output-buffer-limit` (Redis's `32mb 8mb 60`).
//!
//! PUBLISH reaches the clients of this drive only, also in cluster mode (drives do not talk
//! to each other): a publisher that wants every subscriber of a cluster publishes on each
//! drive.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use kvproto::glob::glob_match;
use kvproto::{Command, Protocol, Reply};

use super::Net;
use crate::acl;

/// A connection's subscriptions.
#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    /// Channels (SUBSCRIBE).
    pub(super) channels: BTreeSet<Bytes>,
    /// Patterns (PSUBSCRIBE).
    pub(super) patterns: BTreeSet<Bytes>,
}

impl Subscriptions {
    /// Channels and patterns together (the count subscription replies carry).
    pub(super) fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }
}

/// The drive's subscriptions: for each channel and pattern, its subscribers in the order
/// they subscribed.
#[derive(Debug, Default)]
pub(super) struct PubSub {
    channels: HashMap<Bytes, Vec<u64>>,
    patterns: HashMap<Bytes, Vec<u64>>,
}

/// One copy of a published message: to which connection, and through which pattern (`None`:
/// a channel subscription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Delivery {
    pub(super) conn: u64,
    pub(super) pattern: Option<Bytes>,
}

fn add(map: &mut HashMap<Bytes, Vec<u64>>, name: &Bytes, id: u64) {
    map.entry(name.clone()).or_default().push(id);
}

fn remove(map: &mut HashMap<Bytes, Vec<u64>>, name: &[u8], id: u64) {
    if let Some(ids) = map.get_mut(name) {
        ids.retain(|&x| x != id);
        if ids.is_empty() {
            map.remove(name);
        }
    }
}

impl PubSub {
    /// Every copy PUBLISH to `channel` makes: its channel's subscribers first, then, per
    /// matching pattern, that pattern's subscribers (a client matching two patterns gets
    /// two copies, as in Redis).
    pub(super) fn receivers(&self, channel: &[u8]) -> Vec<Delivery> {
        let mut out: Vec<Delivery> = self
            .channels
            .get(channel)
            .into_iter()
            .flatten()
            .map(|&conn| Delivery {
                conn,
                pattern: None,
            })
            .collect();
        for (pattern, ids) in &self.patterns {
            if glob_match(pattern, channel) {
                out.extend(ids.iter().map(|&conn| Delivery {
                    conn,
                    pattern: Some(pattern.clone()),
                }));
            }
        }
        out
    }

    /// Drops every subscription of a closing connection.
    pub(super) fn forget(&mut self, id: u64, subs: &Subscriptions) {
        for ch in &subs.channels {
            remove(&mut self.channels, ch, id);
        }
        for p in &subs.patterns {
            remove(&mut self.patterns, p, id);
        }
    }

    /// Channels with at least one subscriber (PUBSUB CHANNELS), sorted.
    pub(super) fn active_channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut v: Vec<Bytes> = self
            .channels
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob_match(p, c)))
            .cloned()
            .collect();
        v.sort_unstable();
        v
    }

    /// Subscribers of a channel (PUBSUB NUMSUB; patterns do not count, as in Redis).
    pub(super) fn numsub(&self, channel: &[u8]) -> usize {
        self.channels.get(channel).map_or(0, Vec::len)
    }

    /// Patterns with at least one subscriber (PUBSUB NUMPAT).
    pub(super) fn numpat(&self) -> usize {
        self.patterns.len()
    }

    /// Channels with at least one subscriber (INFO `pubsub_channels`).
    pub(super) fn numchannels(&self) -> usize {
        self.channels.len()
    }
}

/// `[kind, name, count]` as a push (`>` in RESP3, an array in RESP2).
fn confirmation(kind: &'static str, name: Option<Bytes>, count: usize) -> Reply {
    Reply::Push(vec![
        Reply::text(kind),
        name.map_or(Reply::Null, Reply::Bulk),
        Reply::Integer(i64::try_from(count).unwrap_or(i64::MAX)),
    ])
}

/// The message a receiver gets.
fn message(d: &Delivery, channel: &Bytes, payload: &Bytes) -> Reply {
    match &d.pattern {
        None => Reply::Push(vec![
            Reply::text("message"),
            Reply::Bulk(channel.clone()),
            Reply::Bulk(payload.clone()),
        ]),
        Some(p) => Reply::Push(vec![
            Reply::text("pmessage"),
            Reply::Bulk(p.clone()),
            Reply::Bulk(channel.clone()),
            Reply::Bulk(payload.clone()),
        ]),
    }
}

/// Whether `cmd` is served by [`Net::pubsub_command`].
pub(super) fn is_pubsub(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Subscribe(_)
            | Command::Unsubscribe(_)
            | Command::PSubscribe(_)
            | Command::PUnsubscribe(_)
            | Command::Publish { .. }
            | Command::PubSubChannels(_)
            | Command::PubSubNumSub(_)
            | Command::PubSubNumPat
    )
}

/// Commands a RESP2 connection in subscribed mode may run (by table name).
const ALLOWED_WHEN_SUBSCRIBED: &[&str] = &[
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "ping",
    "quit",
    "reset",
];

/// RESP2's subscribed mode: the error for a request other than (P)SUBSCRIBE,
/// (P)UNSUBSCRIBE, PING, QUIT and RESET (after the unknown-command and arity checks, which
/// Redis makes first and the caller's parse reports).
pub(super) fn refused_when_subscribed(args: &[Bytes]) -> Option<Reply> {
    kvproto::command::check_arity(args).ok()?;
    let spec = kvproto::command::lookup(args.first()?)?;
    if ALLOWED_WHEN_SUBSCRIBED.contains(&spec.name) {
        return None;
    }
    let name = match args.get(1) {
        Some(sub) if matches!(spec.group, "connection" | "server" | "pubsub" | "cluster") => {
            let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
            if [
                "client", "config", "command", "acl", "cluster", "pubsub", "slowlog",
            ]
            .contains(&spec.name)
            {
                format!("{}|{sub}", spec.name)
            } else {
                spec.name.to_owned()
            }
        }
        _ => spec.name.to_owned(),
    };
    Some(Reply::error(format!(
        "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    )))
}

/// PING's answer in RESP2's subscribed mode: `["pong", message]`.
pub(super) fn subscribed_pong(message: Option<Bytes>) -> Reply {
    Reply::Array(vec![
        Reply::text("pong"),
        Reply::Bulk(message.unwrap_or_default()),
    ])
}

impl Net {
    /// SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH and PUBSUB for connection
    /// `id`. Subscription replies (one push per channel or pattern) go straight into the
    /// connection's output; the returned reply, if any, follows them.
    pub(super) fn pubsub_command(&mut self, id: u64, cmd: Command) -> Option<Reply> {
        let c = self.conns.get_mut(&id)?;
        let needs_channels = matches!(
            cmd,
            Command::Subscribe(_) | Command::PSubscribe(_) | Command::Publish { .. }
        );
        if needs_channels && !c.all_channels {
            return Some(Reply::error(acl::NOPERM_CHANNEL));
        }
        match cmd {
            Command::Subscribe(channels) => {
                for ch in channels {
                    if c.subs.channels.insert(ch.clone()) {
                        add(&mut self.pubsub.channels, &ch, id);
                    }
                    c.out.push(
                        &confirmation("subscribe", Some(ch), c.subs.count()),
                        c.proto,
                    );
                }
                self.count_pubsub();
                None
            }
            Command::PSubscribe(patterns) => {
                for p in patterns {
                    if c.subs.patterns.insert(p.clone()) {
                        add(&mut self.pubsub.patterns, &p, id);
                    }
                    c.out.push(
                        &confirmation("psubscribe", Some(p), c.subs.count()),
                        c.proto,
                    );
                }
                self.count_pubsub();
                None
            }
            Command::Unsubscribe(channels) => {
                let channels = if channels.is_empty() {
                    c.subs.channels.iter().cloned().collect()
                } else {
                    channels
                };
                if channels.is_empty() {
                    c.out
                        .push(&confirmation("unsubscribe", None, c.subs.count()), c.proto);
                }
                for ch in channels {
                    if c.subs.channels.remove(&ch) {
                        remove(&mut self.pubsub.channels, &ch, id);
                    }
                    c.out.push(
                        &confirmation("unsubscribe", Some(ch), c.subs.count()),
                        c.proto,
                    );
                }
                self.count_pubsub();
                None
            }
            Command::PUnsubscribe(patterns) => {
                let patterns = if patterns.is_empty() {
                    c.subs.patterns.iter().cloned().collect()
                } else {
                    patterns
                };
                if patterns.is_empty() {
                    c.out
                        .push(&confirmation("punsubscribe", None, c.subs.count()), c.proto);
                }
                for p in patterns {
                    if c.subs.patterns.remove(&p) {
                        remove(&mut self.pubsub.patterns, &p, id);
                    }
                    c.out.push(
                        &confirmation("punsubscribe", Some(p), c.subs.count()),
                        c.proto,
                    );
                }
                self.count_pubsub();
                None
            }
            Command::Publish {
                channel,
                message: payload,
            } => {
                let receivers = self.pubsub.receivers(&channel);
                for d in &receivers {
                    if let Some(r) = self.conns.get_mut(&d.conn) {
                        r.deliver_push(message(d, &channel, &payload));
                        if d.conn != id {
                            self.to_flush.push(d.conn);
                        }
                    }
                }
                Some(Reply::Integer(
                    i64::try_from(receivers.len()).unwrap_or(i64::MAX),
                ))
            }
            Command::PubSubChannels(pattern) => Some(Reply::Array(
                self.pubsub
                    .active_channels(pattern.as_deref())
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            )),
            Command::PubSubNumSub(channels) => {
                let mut items = Vec::with_capacity(channels.len() * 2);
                for ch in channels {
                    let n = self.pubsub.numsub(&ch);
                    items.push(Reply::Bulk(ch));
                    items.push(Reply::Integer(i64::try_from(n).unwrap_or(i64::MAX)));
                }
                Some(Reply::Array(items))
            }
            Command::PubSubNumPat => Some(Reply::Integer(
                i64::try_from(self.pubsub.numpat()).unwrap_or(i64::MAX),
            )),
            other => Some(Reply::error(format!(
                "ERR internal: '{}' is not a pub/sub command",
                other.name()
            ))),
        }
    }

    /// Drops every subscription of connection `id` without replies (RESET, close).
    pub(super) fn unsubscribe_all(&mut self, id: u64) {
        if let Some(c) = self.conns.get_mut(&id) {
            let subs = std::mem::take(&mut c.subs);
            self.pubsub.forget(id, &subs);
            self.count_pubsub();
        }
    }

    /// INFO `pubsub_channels` / `pubsub_patterns`.
    fn count_pubsub(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.metrics
            .pubsub_channels
            .store(self.pubsub.numchannels() as u64, Relaxed);
        self.metrics
            .pubsub_patterns
            .store(self.pubsub.numpat() as u64, Relaxed);
    }
}

/// Whether a connection is in RESP2's subscribed mode.
pub(super) fn in_subscribed_mode(proto: Protocol, subs: &Subscriptions) -> bool {
    proto == Protocol::Resp2 && subs.count() > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn receivers_are_channel_subscribers_then_pattern_matches() {
        let mut ps = PubSub::default();
        add(&mut ps.channels, &b("news"), 7);
        add(&mut ps.channels, &b("news"), 3);
        add(&mut ps.patterns, &b("n*"), 7);
        add(&mut ps.patterns, &b("x*"), 9);
        let r = ps.receivers(b"news");
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].conn, r[1].conn), (7, 3));
        assert_eq!(r[2].pattern.as_deref(), Some(&b"n*"[..]));
        assert!(ps.receivers(b"other").is_empty());
        let mut subs = Subscriptions::default();
        subs.channels.insert(b("news"));
        subs.patterns.insert(b("n*"));
        ps.forget(7, &subs);
        assert_eq!(ps.receivers(b"news").len(), 1);
        assert_eq!(ps.numpat(), 1);
        assert_eq!(ps.active_channels(Some(b"n?ws")), vec![b("news")]);
        assert_eq!(ps.numsub(b"news"), 1);
    }

    #[test]
    fn subscribed_mode_allows_only_the_subscription_commands() {
        let args = |v: &[&'static str]| v.iter().map(|s| b(s)).collect::<Vec<_>>();
        assert!(refused_when_subscribed(&args(&["PING"])).is_none());
        assert!(refused_when_subscribed(&args(&["psubscribe", "a*"])).is_none());
        // Arity and unknown commands are the parser's errors.
        assert!(refused_when_subscribed(&args(&["get"])).is_none());
        assert!(refused_when_subscribed(&args(&["nosuch"])).is_none());
        let e = refused_when_subscribed(&args(&["GET", "k"]));
        assert_eq!(
            e,
            Some(Reply::error("ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"))
        );
        let e = refused_when_subscribed(&args(&["client", "ID"]));
        assert!(
            matches!(e, Some(Reply::Error(t)) if t.starts_with(b"ERR Can't execute 'client|id'"))
        );
    }
}
