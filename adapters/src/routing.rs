//! Cluster routing: which drive serves a key, and talking to it.
//!
//! This module owns the client side of the cluster map: a [`Router`] holds the map (from a
//! `--cluster-config` TOML file, or one drive that owns every slot), a small pool of
//! [`kvproto::Client`] connections per drive, and the rules for each operation:
//!
//! - keys are placed with [`kvproto::cluster::key_slot`] (CRC16, hash tags), the function the
//!   drives use; multi-key operations are split per slot (a drive in cluster mode refuses
//!   multi-key commands across slots with `-CROSSSLOT`) and sent to each owner as one
//!   pipeline, all owners at once;
//! - writes (`set`, `mset`, `del`, [`Router::write`]) go to the slot's primary and to every
//!   replica of it (replica connections first send [`REPLICA_COMMAND`], which lets them
//!   write the primary's slots), and succeed only when every one of them acknowledged;
//! - reads (`get`, `mget`, `range`) go to the primary; when its connection fails (refused,
//!   reset, closed or timed out) they are retried on its replicas in map order, and a
//!   primary that failed is skipped for [`RouterConfig::down_for`] before it is tried again;
//! - a `-MOVED` reply means the router's map is stale: the router rereads its map file (if
//!   it has one) and, failing a newer map there, asks the drive the redirect names for the
//!   map it holds (`LS.CLUSTERMAP`), and retries with a newer map; otherwise the operation
//!   fails with [`RouteError::StaleMap`] (a map file) or [`RouteError::Moved`];
//! - a slot being moved between drives (README "Cluster mode") answers `-ASK` for keys
//!   already on the drive taking it over, and `-TRYAGAIN` for a multi-key command whose keys
//!   are split between the two: the router sends an asked request again after `ASKING` to
//!   the named drive, and a split MGET/MSET/DEL/UNLINK/EXISTS again one key at a time,
//!   following the ASKs, then joins the replies. Replicas of a slot in migration are
//!   written as before (the move itself does not copy keys to the target's replicas).
//!
//! Every operation is idempotent (plain SET/MSET/DEL/GET/MGET/LS.RANGE), so retrying one
//! on a fresh connection or after a map reload cannot apply anything twice.

use std::collections::BTreeMap;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kvproto::cluster::{key_slot, ClusterMap, MapError, NodeSpec, SLOT_COUNT};
use kvproto::{Client, ClientError, Credentials, Reply};
use parking_lot::{Mutex, RwLock};

/// The command a router sends first on every connection to a replica drive: it lets that
/// connection write (and read) the slots of the replica's primary.
pub const REPLICA_COMMAND: &str = "LS.REPLICA";

/// Most pairs one `LS.RANGE` may ask for (the drive's limit).
pub const RANGE_MAX_COUNT: u32 = 10_000;

/// Most keys the router puts in one MGET / MSET / DEL command; longer groups are split.
const MAX_KEYS_PER_COMMAND: usize = 1024;

/// Node id used for the single node of [`Router::single`].
const SINGLE_NODE_ID: &str = "0000000000000000000000000000000000000000";

/// Why a routed operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The cluster map file could not be read.
    #[error("cannot read the cluster map {path}: {source}")]
    MapRead {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The cluster map file is not a valid map.
    #[error("cluster map {path}: {source}")]
    MapInvalid {
        /// The file.
        path: PathBuf,
        /// Why the map was refused.
        source: MapError,
    },
    /// No primary serves the key's slot in the current map.
    #[error("slot {slot} has no primary in cluster map version {version}")]
    NoOwner {
        /// The slot.
        slot: u16,
        /// The map's version.
        version: u64,
    },
    /// The connection to a drive failed: refused, reset, closed, or not speaking RESP.
    #[error("drive {addr}: {source}")]
    Connection {
        /// The drive.
        addr: SocketAddr,
        /// What failed.
        source: ClientError,
    },
    /// A drive did not answer within [`RouterConfig::timeout`].
    #[error("drive {addr} did not answer within {timeout:?}")]
    Timeout {
        /// The drive.
        addr: SocketAddr,
        /// The limit.
        timeout: Duration,
    },
    /// A drive answered with an error reply.
    #[error("drive {addr} answered {command} with an error: {message}")]
    Server {
        /// The drive.
        addr: SocketAddr,
        /// The command.
        command: String,
        /// The error text, with its code (`ERR ...`).
        message: String,
    },
    /// A drive answered with a reply of the wrong shape.
    #[error("drive {addr} answered {command} with an unexpected reply: {reply}")]
    Unexpected {
        /// The drive.
        addr: SocketAddr,
        /// The command.
        command: String,
        /// The reply, debug-printed.
        reply: String,
    },
    /// A drive redirected a slot (`-MOVED`) and the router has no map file to reread.
    #[error(
        "drive {addr} says slot {slot} moved to {to} (router map version {version}); \
         the router was not given a cluster map file to reload"
    )]
    Moved {
        /// The drive that redirected.
        addr: SocketAddr,
        /// The slot.
        slot: u16,
        /// Where the drive says the slot is now (`host:port`).
        to: String,
        /// The router's map version.
        version: u64,
    },
    /// A drive redirected a slot and rereading the map file did not give a newer map, or
    /// redirects kept coming after [`RouterConfig::max_redirects`] reloads.
    #[error(
        "drive {addr} says slot {slot} moved to {to}, but the cluster map {path} \
         (version {version}) still places it there: the map file is stale"
    )]
    StaleMap {
        /// The drive that redirected.
        addr: SocketAddr,
        /// The slot.
        slot: u16,
        /// Where the drive says the slot is now.
        to: String,
        /// The map file.
        path: PathBuf,
        /// The version the file holds.
        version: u64,
    },
    /// A primary and all its replicas failed for a read.
    #[error("slot {slot}: primary {primary} and its {replicas} replica(s) are all unreachable; last error: {last}")]
    Unavailable {
        /// A slot of the failed group.
        slot: u16,
        /// The primary.
        primary: SocketAddr,
        /// How many replicas were tried.
        replicas: usize,
        /// The last failure.
        last: Box<RouteError>,
    },
    /// A write reached the primary but a replica (or the primary) did not acknowledge it.
    #[error("write to slot {slot} not acknowledged by {addr} (a replica: {replica}): {source}")]
    WriteFailed {
        /// A slot of the failed group.
        slot: u16,
        /// The drive that failed.
        addr: SocketAddr,
        /// Whether it is a replica.
        replica: bool,
        /// Its failure.
        source: Box<RouteError>,
    },
    /// The caller's request is not valid (e.g. a range count of zero).
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl RouteError {
    /// Whether the error says the drive itself is unreachable (so a replica may answer).
    #[must_use]
    pub fn is_node_failure(&self) -> bool {
        matches!(self, Self::Connection { .. } | Self::Timeout { .. })
    }
}

/// Tuning of a [`Router`].
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// Longest wait for one exchange with a drive (connect, or a pipeline's replies).
    pub timeout: Duration,
    /// Idle connections kept per drive.
    pub max_idle: usize,
    /// How long a primary that failed is skipped by reads (they go to replicas directly).
    pub down_for: Duration,
    /// How many times one operation rereads the map file after `-MOVED`.
    pub max_redirects: usize,
    /// Sent with `AUTH` on every new connection (drives with `--requirepass`).
    pub auth: Option<Credentials>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            max_idle: 64,
            down_for: Duration::from_secs(1),
            max_redirects: 3,
            auth: None,
        }
    }
}

/// Connections to one drive, in one mode (plain, or replica-writing).
#[derive(Debug)]
struct Pool {
    addr: SocketAddr,
    replica: bool,
    idle: Mutex<Vec<Client>>,
    down_until: Mutex<Option<Instant>>,
}

impl Pool {
    fn new(addr: SocketAddr, replica: bool) -> Self {
        Self {
            addr,
            replica,
            idle: Mutex::new(Vec::new()),
            down_until: Mutex::new(None),
        }
    }

    fn is_down(&self) -> bool {
        self.down_until.lock().is_some_and(|t| Instant::now() < t)
    }

    fn mark(&self, failed: bool, cfg: &RouterConfig) {
        *self.down_until.lock() = failed.then(|| Instant::now() + cfg.down_for);
    }

    async fn connect(&self, cfg: &RouterConfig) -> Result<Client, RouteError> {
        let addr = self.addr;
        let connected = tokio::time::timeout(cfg.timeout, Client::connect(addr)).await;
        let mut client = match connected {
            Err(_) => {
                return Err(RouteError::Timeout {
                    addr,
                    timeout: cfg.timeout,
                })
            }
            Ok(Err(source)) => return Err(RouteError::Connection { addr, source }),
            Ok(Ok(c)) => c,
        };
        if let Some(creds) = &cfg.auth {
            tokio::time::timeout(cfg.timeout, client.auth(creds))
                .await
                .map_err(|_| RouteError::Timeout {
                    addr,
                    timeout: cfg.timeout,
                })?
                .map_err(|source| match source {
                    ClientError::Auth(message) => RouteError::Server {
                        addr,
                        command: "AUTH".into(),
                        message,
                    },
                    source => RouteError::Connection { addr, source },
                })?;
        }
        if self.replica {
            let reply = tokio::time::timeout(cfg.timeout, client.call(&[REPLICA_COMMAND]))
                .await
                .map_err(|_| RouteError::Timeout {
                    addr,
                    timeout: cfg.timeout,
                })?
                .map_err(|source| RouteError::Connection { addr, source })?;
            if let Reply::Error(e) = reply {
                return Err(RouteError::Server {
                    addr,
                    command: REPLICA_COMMAND.to_string(),
                    message: String::from_utf8_lossy(&e).into_owned(),
                });
            }
        }
        Ok(client)
    }

    async fn run(
        &self,
        mut client: Client,
        requests: &[Vec<Bytes>],
        cfg: &RouterConfig,
    ) -> Result<Vec<Reply>, RouteError> {
        let addr = self.addr;
        match tokio::time::timeout(cfg.timeout, client.pipeline(requests)).await {
            // The connection may still owe replies: drop it.
            Err(_) => Err(RouteError::Timeout {
                addr,
                timeout: cfg.timeout,
            }),
            Ok(Err(source)) => Err(RouteError::Connection { addr, source }),
            Ok(Ok(replies)) => {
                let mut idle = self.idle.lock();
                if idle.len() < cfg.max_idle {
                    idle.push(client);
                }
                Ok(replies)
            }
        }
    }

    /// Sends `requests` as one pipeline and returns their replies in order. A pooled
    /// connection that fails is retried once on a fresh one (the drive may have restarted).
    async fn exchange(
        &self,
        requests: &[Vec<Bytes>],
        cfg: &RouterConfig,
    ) -> Result<Vec<Reply>, RouteError> {
        let pooled = self.idle.lock().pop();
        if let Some(client) = pooled {
            match self.run(client, requests, cfg).await {
                Ok(r) => return Ok(r),
                Err(e) if e.is_node_failure() => self.idle.lock().clear(),
                Err(e) => return Err(e),
            }
        }
        let result = match self.connect(cfg).await {
            Ok(client) => self.run(client, requests, cfg).await,
            Err(e) => Err(e),
        };
        self.mark(matches!(&result, Err(e) if e.is_node_failure()), cfg);
        result
    }
}

/// Polls every future to completion, concurrently on the calling task, and returns their
/// outputs in order.
pub(crate) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (fut, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Keys of one operation that go to one primary: per command, the slot and the indexes of
/// its keys in the caller's list.
#[derive(Debug)]
struct NodePlan {
    /// Index of the primary in the map's node list.
    node: usize,
    /// One entry per command: (slot, key indexes).
    commands: Vec<(u16, Vec<usize>)>,
}

/// A parsed `-MOVED slot host:port` (or `-ASK`) reply.
fn parse_redirect(message: &[u8]) -> Option<(u16, String)> {
    let text = std::str::from_utf8(message).ok()?;
    let mut words = text.split_ascii_whitespace();
    let kind = words.next()?;
    if kind != "MOVED" && kind != "ASK" {
        return None;
    }
    let slot = words.next()?.parse().ok()?;
    let to = words.next()?.to_string();
    Some((slot, to))
}

/// A multi-key request as one request per key (MSET: per pair), for a slot whose keys are
/// split between two drives during a move; `None` for a command the router does not split.
fn split_per_key(req: &[Bytes]) -> Option<Vec<Vec<Bytes>>> {
    let (name, args) = req.split_first()?;
    let upper = name.to_ascii_uppercase();
    let step = match upper.as_slice() {
        b"MGET" | b"EXISTS" | b"DEL" | b"UNLINK" => 1,
        b"MSET" => 2,
        _ => return None,
    };
    Some(
        args.chunks(step)
            .map(|part| {
                let mut r = Vec::with_capacity(1 + step);
                r.push(name.clone());
                r.extend_from_slice(part);
                r
            })
            .collect(),
    )
}

/// The reply the whole request would have had, from its per-key replies
/// ([`split_per_key`]); the first error stands for the whole.
fn join_per_key(req: &[Bytes], parts: Vec<Reply>) -> Option<Reply> {
    if let Some(e) = parts.iter().find(|r| matches!(r, Reply::Error(_))) {
        return Some(e.clone());
    }
    let upper = req.first()?.to_ascii_uppercase();
    Some(match upper.as_slice() {
        b"MGET" => Reply::Array(
            parts
                .into_iter()
                .map(|r| match r {
                    Reply::Array(mut one) if one.len() == 1 => one.pop().unwrap_or(Reply::Null),
                    other => other,
                })
                .collect(),
        ),
        b"MSET" => parts.into_iter().next().unwrap_or(Reply::Null),
        _ => Reply::Integer(
            parts
                .iter()
                .map(|r| match r {
                    Reply::Integer(n) => *n,
                    _ => 0,
                })
                .sum(),
        ),
    })
}

/// Checks one reply for a redirect or an error.
fn check(reply: &Reply, addr: SocketAddr, command: &[u8], version: u64) -> Result<(), RouteError> {
    if let Reply::Error(e) = reply {
        if let Some((slot, to)) = parse_redirect(e) {
            return Err(RouteError::Moved {
                addr,
                slot,
                to,
                version,
            });
        }
        return Err(RouteError::Server {
            addr,
            command: String::from_utf8_lossy(command).into_owned(),
            message: String::from_utf8_lossy(e).into_owned(),
        });
    }
    Ok(())
}

fn unexpected(addr: SocketAddr, command: &str, reply: &Reply) -> RouteError {
    RouteError::Unexpected {
        addr,
        command: command.to_string(),
        reply: format!("{reply:?}"),
    }
}

/// A bulk value or null, as GET/MGET items are.
fn bulk_or_null(
    reply: Reply,
    addr: SocketAddr,
    command: &str,
) -> Result<Option<Bytes>, RouteError> {
    match reply {
        Reply::Bulk(b) | Reply::Simple(b) | Reply::Verbatim(b) => Ok(Some(b)),
        Reply::Null | Reply::NullArray => Ok(None),
        other => Err(unexpected(addr, command, &other)),
    }
}

/// Routes keys to drives by hash slot; see the module documentation.
#[derive(Debug)]
pub struct Router {
    map: RwLock<Arc<ClusterMap>>,
    map_path: Option<PathBuf>,
    /// One drive, not in cluster mode: no per-slot split of multi-key commands.
    single: bool,
    pools: Mutex<std::collections::HashMap<(SocketAddr, bool), Arc<Pool>>>,
    cfg: RouterConfig,
}

impl Router {
    /// A router for one drive that is not in cluster mode: it owns every slot, and
    /// multi-key commands are not split per slot.
    ///
    /// # Errors
    /// [`RouteError::Invalid`] if the one-node map does not validate (it always does).
    pub fn single(addr: SocketAddr, cfg: RouterConfig) -> Result<Self, RouteError> {
        let node = NodeSpec {
            id: SINGLE_NODE_ID.to_string(),
            addr,
            slots: vec![[0, u32::from(SLOT_COUNT) - 1]],
            replica_of: None,
        };
        let map = ClusterMap::new(0, vec![node]).map_err(|e| RouteError::Invalid(e.to_string()))?;
        Ok(Self::build(map, None, true, cfg))
    }

    /// A router over a cluster map (no file to reload on `-MOVED`).
    #[must_use]
    pub fn from_map(map: ClusterMap, cfg: RouterConfig) -> Self {
        Self::build(map, None, false, cfg)
    }

    /// A router over the cluster map in `path` (the TOML a drive's `--cluster-config`
    /// reads); on `-MOVED` it rereads the file.
    ///
    /// # Errors
    /// [`RouteError::MapRead`] / [`RouteError::MapInvalid`] when the file cannot be read or
    /// is not a valid map.
    pub fn from_file(path: &Path, cfg: RouterConfig) -> Result<Self, RouteError> {
        let map = read_map(path)?;
        Ok(Self::build(map, Some(path.to_path_buf()), false, cfg))
    }

    fn build(map: ClusterMap, map_path: Option<PathBuf>, single: bool, cfg: RouterConfig) -> Self {
        Self {
            map: RwLock::new(Arc::new(map)),
            map_path,
            single,
            pools: Mutex::new(std::collections::HashMap::new()),
            cfg,
        }
    }

    /// The map in use.
    #[must_use]
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.read().clone()
    }

    /// Rereads the map file and adopts it if its version is newer; returns whether it did.
    ///
    /// # Errors
    /// As [`Router::from_file`]; `Ok(false)` when the router has no map file.
    pub fn reload(&self) -> Result<bool, RouteError> {
        let Some(path) = &self.map_path else {
            return Ok(false);
        };
        let fresh = read_map(path)?;
        let mut current = self.map.write();
        if fresh.version() > current.version() {
            tracing::info!(
                from = current.version(),
                to = fresh.version(),
                "cluster map reloaded"
            );
            *current = Arc::new(fresh);
            return Ok(true);
        }
        Ok(false)
    }

    /// Sends PING to every node of the map; returns each node's address and outcome.
    pub async fn ping_all(&self) -> Vec<(SocketAddr, Result<(), RouteError>)> {
        let map = self.map();
        let version = map.version();
        let futures: Vec<_> = map
            .nodes()
            .iter()
            .map(|n| async move {
                let replica = n.replica_of.is_some();
                let r = self
                    .pool(n.addr, replica)
                    .exchange(&[vec![Bytes::from_static(b"PING")]], &self.cfg)
                    .await
                    .and_then(|replies| match replies.first() {
                        Some(r) => check(r, n.addr, b"PING", version),
                        None => Ok(()),
                    });
                (n.addr, r)
            })
            .collect();
        join_all(futures).await
    }

    fn pool(&self, addr: SocketAddr, replica: bool) -> Arc<Pool> {
        self.pools
            .lock()
            .entry((addr, replica))
            .or_insert_with(|| Arc::new(Pool::new(addr, replica)))
            .clone()
    }

    /// Groups keys by primary and, within one, by slot (one command per slot, split at
    /// [`MAX_KEYS_PER_COMMAND`]).
    fn plan<'k>(
        &self,
        map: &ClusterMap,
        keys: impl Iterator<Item = &'k [u8]>,
    ) -> Result<Vec<NodePlan>, RouteError> {
        let mut by_node: BTreeMap<usize, BTreeMap<u16, Vec<usize>>> = BTreeMap::new();
        for (i, key) in keys.enumerate() {
            let slot = key_slot(key);
            let owner = map.owner(slot).ok_or(RouteError::NoOwner {
                slot,
                version: map.version(),
            })?;
            let node = map
                .nodes()
                .iter()
                .position(|n| n.id == owner.id)
                .unwrap_or_default();
            let group = if self.single { 0 } else { slot };
            by_node
                .entry(node)
                .or_default()
                .entry(group)
                .or_default()
                .push(i);
        }
        Ok(by_node
            .into_iter()
            .map(|(node, slots)| NodePlan {
                node,
                commands: slots
                    .into_iter()
                    .flat_map(|(slot, idx)| {
                        idx.chunks(MAX_KEYS_PER_COMMAND)
                            .map(|c| (slot, c.to_vec()))
                            .collect::<Vec<_>>()
                    })
                    .collect(),
            })
            .collect())
    }

    /// Reads from the primary, or from its replicas when the primary is unreachable.
    /// Sends `name` with each command's keys (one command per slot) to every planned drive
    /// at once, reading from the primary with fail-over; per plan, the replies in command
    /// order.
    async fn read_keyed(
        &self,
        map: &ClusterMap,
        plans: &[NodePlan],
        name: &'static [u8],
        keys: &[Bytes],
    ) -> Vec<Result<Vec<Reply>, RouteError>> {
        let futures: Vec<_> = plans
            .iter()
            .map(|plan| async move {
                let requests: Vec<Vec<Bytes>> = plan
                    .commands
                    .iter()
                    .map(|(_, idx)| {
                        let mut cmd = Vec::with_capacity(idx.len() + 1);
                        cmd.push(Bytes::from_static(name));
                        cmd.extend(idx.iter().map(|&i| keys[i].clone()));
                        cmd
                    })
                    .collect();
                let slot = plan.commands.first().map_or(0, |c| c.0);
                self.read_from(map, plan.node, slot, &requests).await
            })
            .collect();
        join_all(futures).await
    }

    async fn read_from(
        &self,
        map: &ClusterMap,
        node: usize,
        slot: u16,
        requests: &[Vec<Bytes>],
    ) -> Result<Vec<Reply>, RouteError> {
        let Some(primary) = map.nodes().get(node) else {
            return Err(RouteError::NoOwner {
                slot,
                version: map.version(),
            });
        };
        let replicas = map.replicas_of(&primary.id);
        let pool = self.pool(primary.addr, false);
        let mut last = None;
        // A primary marked down is skipped while a replica can stand in, and tried last.
        let skip_primary = pool.is_down() && !replicas.is_empty();
        let mut order: Vec<(SocketAddr, bool)> = Vec::with_capacity(replicas.len() + 1);
        if !skip_primary {
            order.push((primary.addr, false));
        }
        order.extend(replicas.iter().map(|r| (r.addr, true)));
        if skip_primary {
            order.push((primary.addr, false));
        }
        for (addr, replica) in order {
            match self.pool(addr, replica).exchange(requests, &self.cfg).await {
                Ok(r) => {
                    if replica {
                        tracing::debug!(primary = %primary.addr, replica = %addr, "read failed over");
                        return Ok(r);
                    }
                    return self.follow_redirects(addr, requests, r).await;
                }
                Err(e) if e.is_node_failure() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(RouteError::Unavailable {
            slot,
            primary: primary.addr,
            replicas: replicas.len(),
            last: Box::new(last.unwrap_or(RouteError::NoOwner {
                slot,
                version: map.version(),
            })),
        })
    }

    /// Follows the redirects of a slot being moved between drives (see README "Cluster
    /// mode"): a multi-key request refused with `-TRYAGAIN` (its keys are split between the
    /// two drives) is sent again from `source` one key at a time and its replies joined, and
    /// every `-ASK` is followed ([`Router::follow_asks`]).
    async fn follow_redirects(
        &self,
        source: SocketAddr,
        requests: &[Vec<Bytes>],
        mut replies: Vec<Reply>,
    ) -> Result<Vec<Reply>, RouteError> {
        for (i, req) in requests.iter().enumerate() {
            let retry =
                matches!(replies.get(i), Some(Reply::Error(e)) if e.starts_with(b"TRYAGAIN"));
            let Some(parts) = retry.then(|| split_per_key(req)).flatten() else {
                continue;
            };
            let got = self.pool(source, false).exchange(&parts, &self.cfg).await?;
            let got = self.follow_asks(&parts, got).await?;
            if let (Some(joined), Some(slot)) = (join_per_key(req, got), replies.get_mut(i)) {
                *slot = joined;
            }
        }
        self.follow_asks(requests, replies).await
    }

    /// Follows `-ASK` replies (a slot being moved between drives, see README "Cluster
    /// mode"): each such request is sent again, after `ASKING`, to the drive the redirect
    /// names, and that reply takes the redirect's place. `-MOVED` and other errors are left
    /// for the caller. The map is not reloaded: an ASK is about one key, for now.
    async fn follow_asks(
        &self,
        requests: &[Vec<Bytes>],
        mut replies: Vec<Reply>,
    ) -> Result<Vec<Reply>, RouteError> {
        for (i, req) in requests.iter().enumerate() {
            let to = match replies.get(i) {
                Some(Reply::Error(e)) if e.starts_with(b"ASK ") => {
                    parse_redirect(e).and_then(|(_, to)| to.parse::<SocketAddr>().ok())
                }
                _ => None,
            };
            let Some(to) = to else {
                continue;
            };
            let asked = vec![vec![Bytes::from_static(b"ASKING")], req.clone()];
            let mut got = self.pool(to, false).exchange(&asked, &self.cfg).await?;
            if let (Some(r), Some(slot)) = (got.pop(), replies.get_mut(i)) {
                *slot = r;
            }
        }
        Ok(replies)
    }

    /// Writes to the primary and every replica; all must acknowledge.
    async fn write_to(
        &self,
        map: &ClusterMap,
        node: usize,
        slot: u16,
        requests: &[Vec<Bytes>],
    ) -> Result<Vec<Reply>, RouteError> {
        let Some(primary) = map.nodes().get(node) else {
            return Err(RouteError::NoOwner {
                slot,
                version: map.version(),
            });
        };
        let mut targets = vec![(primary.addr, false)];
        targets.extend(map.replicas_of(&primary.id).iter().map(|r| (r.addr, true)));
        let futures: Vec<_> = targets
            .iter()
            .map(|&(addr, replica)| async move {
                let pool = self.pool(addr, replica);
                let mut replies = pool.exchange(requests, &self.cfg).await?;
                if !replica {
                    replies = self.follow_redirects(addr, requests, replies).await?;
                }
                for (reply, req) in replies.iter().zip(requests) {
                    check(
                        reply,
                        addr,
                        req.first().map_or(&b""[..], |c| &c[..]),
                        map.version(),
                    )?;
                }
                Ok::<_, RouteError>(replies)
            })
            .collect();
        let mut primary_replies = None;
        for ((addr, replica), result) in targets.iter().zip(join_all(futures).await) {
            match result {
                Ok(r) if !replica => primary_replies = Some(r),
                Ok(_) => {}
                // A redirect is reported as such, so the caller can reload the map.
                Err(e @ RouteError::Moved { .. }) => return Err(e),
                Err(e) => {
                    return Err(RouteError::WriteFailed {
                        slot,
                        addr: *addr,
                        replica: *replica,
                        source: Box::new(e),
                    })
                }
            }
        }
        Ok(primary_replies.unwrap_or_default())
    }

    /// Decides whether a failed attempt is retried: after `-MOVED`, when a newer map is
    /// found, first in the map file (reread), then on the drive the redirect names (the
    /// drives hold the map: `LS.CLUSTERMAP`), so a router follows a cluster that grew
    /// without anyone editing its file.
    async fn retry_after(
        &self,
        err: RouteError,
        used: u64,
        attempt: usize,
    ) -> Result<(), RouteError> {
        let RouteError::Moved { addr, slot, to, .. } = err else {
            return Err(err);
        };
        // Another operation may have reloaded already.
        let mut newer = self.reload()? || self.map().version() > used;
        if !newer {
            if let Ok(drive) = to.parse::<SocketAddr>() {
                newer = self.fetch_map(drive).await;
            }
        }
        if newer && attempt < self.cfg.max_redirects {
            return Ok(());
        }
        match &self.map_path {
            Some(path) => Err(RouteError::StaleMap {
                addr,
                slot,
                to,
                path: path.clone(),
                version: self.map().version(),
            }),
            None => Err(RouteError::Moved {
                addr,
                slot,
                to,
                version: used,
            }),
        }
    }

    /// Asks `drive` for the map it holds and adopts it if it is newer than the router's;
    /// returns whether it did. A drive that cannot answer, or answers something that is not
    /// a valid map, changes nothing.
    async fn fetch_map(&self, drive: SocketAddr) -> bool {
        let request = [vec![Bytes::from_static(b"LS.CLUSTERMAP")]];
        let Ok(replies) = self.pool(drive, false).exchange(&request, &self.cfg).await else {
            return false;
        };
        let Some(Reply::Bulk(text) | Reply::Verbatim(text)) = replies.first() else {
            return false;
        };
        let Ok(fresh) = std::str::from_utf8(text)
            .map_err(|_| ())
            .and_then(|t| ClusterMap::from_toml(t).map_err(|_| ()))
        else {
            return false;
        };
        let mut current = self.map.write();
        if fresh.version() > current.version() {
            tracing::info!(
                from = current.version(),
                to = fresh.version(),
                %drive,
                "cluster map fetched from a drive"
            );
            *current = Arc::new(fresh);
            return true;
        }
        false
    }

    /// GET: the value of `key`, or `None`.
    ///
    /// # Errors
    /// [`RouteError`]: the slot has no primary, the primary and its replicas are
    /// unreachable, the drive answered with an error, or a redirect could not be followed.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, RouteError> {
        let keys = [Bytes::copy_from_slice(key)];
        Ok(self.mget(&keys).await?.into_iter().next().flatten())
    }

    /// MGET across slots and drives: one value (or `None`) per key, in order.
    ///
    /// # Errors
    /// As [`Router::get`].
    pub async fn mget(&self, keys: &[Bytes]) -> Result<Vec<Option<Bytes>>, RouteError> {
        let mut attempt = 0;
        loop {
            let map = self.map();
            match self.mget_once(&map, keys).await {
                Err(e) => self.retry_after(e, map.version(), attempt).await?,
                ok => return ok,
            }
            attempt += 1;
        }
    }

    async fn mget_once(
        &self,
        map: &ClusterMap,
        keys: &[Bytes],
    ) -> Result<Vec<Option<Bytes>>, RouteError> {
        let plans = self.plan(map, keys.iter().map(|k| &k[..]))?;
        let results = self.read_keyed(map, &plans, b"MGET", keys).await;
        let mut out = vec![None; keys.len()];
        for (plan, result) in plans.iter().zip(results) {
            let replies = result?;
            let addr = map.nodes().get(plan.node).map_or(unspecified(), |n| n.addr);
            if replies.len() != plan.commands.len() {
                return Err(RouteError::Invalid(format!(
                    "drive {addr} sent {} replies for {} commands",
                    replies.len(),
                    plan.commands.len()
                )));
            }
            for ((_, idx), reply) in plan.commands.iter().zip(replies) {
                check(&reply, addr, b"MGET", map.version())?;
                let Reply::Array(items) = reply else {
                    return Err(unexpected(addr, "MGET", &reply));
                };
                if items.len() != idx.len() {
                    return Err(unexpected(addr, "MGET", &Reply::Array(items)));
                }
                for (&i, item) in idx.iter().zip(items) {
                    out[i] = bulk_or_null(item, addr, "MGET")?;
                }
            }
        }
        Ok(out)
    }

    /// EXISTS across slots and drives: how many of `keys` exist (answered from the drives'
    /// DRAM key tables, no value is read).
    ///
    /// # Errors
    /// As [`Router::get`].
    pub async fn exists(&self, keys: &[Bytes]) -> Result<u64, RouteError> {
        let mut attempt = 0;
        loop {
            let map = self.map();
            match self.exists_once(&map, keys).await {
                Err(e) => self.retry_after(e, map.version(), attempt).await?,
                ok => return ok,
            }
            attempt += 1;
        }
    }

    async fn exists_once(&self, map: &ClusterMap, keys: &[Bytes]) -> Result<u64, RouteError> {
        let plans = self.plan(map, keys.iter().map(|k| &k[..]))?;
        let results = self.read_keyed(map, &plans, b"EXISTS", keys).await;
        let mut total = 0u64;
        for (plan, result) in plans.iter().zip(results) {
            let addr = map.nodes().get(plan.node).map_or(unspecified(), |n| n.addr);
            for reply in result? {
                check(&reply, addr, b"EXISTS", map.version())?;
                match reply {
                    Reply::Integer(n) => total += u64::try_from(n).unwrap_or(0),
                    other => return Err(unexpected(addr, "EXISTS", &other)),
                }
            }
        }
        Ok(total)
    }

    /// Which of `keys` exist, one flag per key in order: one single-key `EXISTS` per key,
    /// all of one drive's sent as one pipeline (one round trip per drive, every drive at
    /// once; answered from the drives' DRAM key tables, no value is read).
    ///
    /// # Errors
    /// As [`Router::get`].
    pub async fn exists_each(&self, keys: &[Bytes]) -> Result<Vec<bool>, RouteError> {
        let mut attempt = 0;
        loop {
            let map = self.map();
            match self.exists_each_once(&map, keys).await {
                Err(e) => self.retry_after(e, map.version(), attempt).await?,
                ok => return ok,
            }
            attempt += 1;
        }
    }

    async fn exists_each_once(
        &self,
        map: &ClusterMap,
        keys: &[Bytes],
    ) -> Result<Vec<bool>, RouteError> {
        let plans = self.plan(map, keys.iter().map(|k| &k[..]))?;
        let futures: Vec<_> = plans
            .iter()
            .map(|plan| async move {
                let idx: Vec<usize> = plan
                    .commands
                    .iter()
                    .flat_map(|(_, idx)| idx.iter().copied())
                    .collect();
                let requests: Vec<Vec<Bytes>> = idx
                    .iter()
                    .map(|&i| vec![Bytes::from_static(b"EXISTS"), keys[i].clone()])
                    .collect();
                let slot = plan.commands.first().map_or(0, |c| c.0);
                let replies = self.read_from(map, plan.node, slot, &requests).await?;
                Ok::<_, RouteError>((plan.node, idx, replies))
            })
            .collect();
        let mut out = vec![false; keys.len()];
        for result in join_all(futures).await {
            let (node, idx, replies) = result?;
            let addr = map.nodes().get(node).map_or(unspecified(), |n| n.addr);
            if replies.len() != idx.len() {
                return Err(RouteError::Invalid(format!(
                    "drive {addr} sent {} replies for {} commands",
                    replies.len(),
                    idx.len()
                )));
            }
            for (i, reply) in idx.into_iter().zip(replies) {
                check(&reply, addr, b"EXISTS", map.version())?;
                match reply {
                    Reply::Integer(n) => out[i] = n > 0,
                    other => return Err(unexpected(addr, "EXISTS", &other)),
                }
            }
        }
        Ok(out)
    }

    /// Every string key matching the glob `pattern` on the drives: `SCAN 0 MATCH pattern
    /// COUNT n` until the cursor returns to 0, on every primary at once (keys only, from
    /// the drives' key tables), each drive contributing only keys of slots it serves in the
    /// router's map. A key written or deleted during the scan may or may not be listed.
    ///
    /// # Errors
    /// As [`Router::get`]; a cursor lost because the drive restarted mid-scan is a
    /// [`RouteError::Server`] error (scan again).
    pub async fn scan_keys(&self, pattern: &[u8]) -> Result<Vec<Bytes>, RouteError> {
        let map = self.map();
        let targets: Vec<(usize, u16)> = if self.single {
            vec![(0, 0)]
        } else {
            map.nodes()
                .iter()
                .enumerate()
                .filter(|(_, n)| n.replica_of.is_none() && !n.slots.is_empty())
                .map(|(i, n)| (i, map.slot_ranges(&n.id).first().map_or(0, |r| r.0)))
                .collect()
        };
        let futures: Vec<_> = targets
            .iter()
            .map(|&(node, slot)| {
                let map = &map;
                async move {
                    let addr = map.nodes().get(node).map_or(unspecified(), |n| n.addr);
                    let mut cursor = Bytes::from_static(b"0");
                    let mut keys = Vec::new();
                    loop {
                        let request = vec![vec![
                            Bytes::from_static(b"SCAN"),
                            cursor.clone(),
                            Bytes::from_static(b"MATCH"),
                            Bytes::copy_from_slice(pattern),
                            Bytes::from_static(b"COUNT"),
                            Bytes::from_static(b"10000"),
                        ]];
                        let reply = self
                            .read_from(map, node, slot, &request)
                            .await?
                            .into_iter()
                            .next()
                            .unwrap_or(Reply::Null);
                        check(&reply, addr, b"SCAN", map.version())?;
                        let Reply::Array(mut parts) = reply else {
                            return Err(unexpected(addr, "SCAN", &reply));
                        };
                        let (Some(Reply::Array(page)), Some(Reply::Bulk(next))) =
                            (parts.pop(), parts.pop())
                        else {
                            return Err(unexpected(addr, "SCAN", &Reply::Array(parts)));
                        };
                        for k in page {
                            match k {
                                Reply::Bulk(k) => keys.push(k),
                                other => return Err(unexpected(addr, "SCAN", &other)),
                            }
                        }
                        if &next[..] == b"0" {
                            break;
                        }
                        cursor = next;
                    }
                    Ok::<_, RouteError>((node, keys))
                }
            })
            .collect();
        let mut out = Vec::new();
        for result in join_all(futures).await {
            let (node, keys) = result?;
            match map.nodes().get(node) {
                Some(n) if !self.single => out.extend(
                    keys.into_iter()
                        .filter(|k| map.owner(key_slot(k)).is_some_and(|o| o.id == n.id)),
                ),
                _ => out.extend(keys),
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// SET `key` to `value` on its primary and every replica.
    ///
    /// # Errors
    /// As [`Router::write`].
    pub async fn set(&self, key: Bytes, value: Bytes) -> Result<(), RouteError> {
        self.write(&[(key, value)], &[]).await.map(|_| ())
    }

    /// `SET key value NX` on the key's primary and every replica: whether the primary
    /// stored it (false: the key existed there). The primary's answer decides; a replica
    /// that already had the key keeps its value.
    ///
    /// # Errors
    /// As [`Router::write`].
    pub async fn set_nx(&self, key: Bytes, value: Bytes) -> Result<bool, RouteError> {
        let mut attempt = 0;
        loop {
            let map = self.map();
            let result = async {
                let plans = self.plan(&map, std::iter::once(&key[..]))?;
                let Some(plan) = plans.first() else {
                    return Ok(false);
                };
                let slot = plan.commands.first().map_or(0, |c| c.0);
                let request = vec![vec![
                    Bytes::from_static(b"SET"),
                    key.clone(),
                    value.clone(),
                    Bytes::from_static(b"NX"),
                ]];
                let replies = self.write_to(&map, plan.node, slot, &request).await?;
                let addr = map.nodes().get(plan.node).map_or(unspecified(), |n| n.addr);
                match replies.into_iter().next() {
                    Some(Reply::Simple(_)) => Ok(true),
                    Some(Reply::Null) => Ok(false),
                    Some(other) => Err(unexpected(addr, "SET", &other)),
                    None => Err(unexpected(addr, "SET", &Reply::Null)),
                }
            }
            .await;
            match result {
                Err(e) => self.retry_after(e, map.version(), attempt).await?,
                ok => return ok,
            }
            attempt += 1;
        }
    }

    /// MSET across slots and drives (one MSET per slot), on every primary and replica.
    ///
    /// # Errors
    /// As [`Router::write`].
    pub async fn mset(&self, pairs: &[(Bytes, Bytes)]) -> Result<(), RouteError> {
        self.write(pairs, &[]).await.map(|_| ())
    }

    /// DEL across slots and drives; returns how many keys existed (on the primaries).
    ///
    /// # Errors
    /// As [`Router::write`].
    pub async fn del(&self, keys: &[Bytes]) -> Result<u64, RouteError> {
        self.write(&[], keys).await
    }

    /// Sets `puts` and deletes `dels` (disjoint keys), grouped per slot, on every primary
    /// and each of its replicas; returns how many of `dels` existed on the primaries. It
    /// succeeds only when every drive acknowledged; not atomic across slots.
    ///
    /// # Errors
    /// [`RouteError::NoOwner`] for a slot without a primary; [`RouteError::WriteFailed`]
    /// when a primary or replica failed or refused (the write may have reached the others);
    /// [`RouteError::Moved`] / [`RouteError::StaleMap`] for a redirect that could not be
    /// followed.
    pub async fn write(&self, puts: &[(Bytes, Bytes)], dels: &[Bytes]) -> Result<u64, RouteError> {
        let mut attempt = 0;
        loop {
            let map = self.map();
            match self.write_once(&map, puts, dels).await {
                Err(e) => self.retry_after(e, map.version(), attempt).await?,
                ok => return ok,
            }
            attempt += 1;
        }
    }

    async fn write_once(
        &self,
        map: &ClusterMap,
        puts: &[(Bytes, Bytes)],
        dels: &[Bytes],
    ) -> Result<u64, RouteError> {
        let n_puts = puts.len();
        let keys = puts
            .iter()
            .map(|(k, _)| &k[..])
            .chain(dels.iter().map(|k| &k[..]));
        let plans = self.plan(map, keys)?;
        let futures: Vec<_> = plans
            .iter()
            .map(|plan| async move {
                let mut requests = Vec::new();
                let mut is_del = Vec::new();
                for (_, idx) in &plan.commands {
                    let (p, d): (Vec<usize>, Vec<usize>) = idx.iter().partition(|&&i| i < n_puts);
                    if !p.is_empty() {
                        let mut cmd = Vec::with_capacity(2 * p.len() + 1);
                        cmd.push(Bytes::from_static(b"MSET"));
                        for i in p {
                            cmd.push(puts[i].0.clone());
                            cmd.push(puts[i].1.clone());
                        }
                        requests.push(cmd);
                        is_del.push(false);
                    }
                    if !d.is_empty() {
                        let mut cmd = Vec::with_capacity(d.len() + 1);
                        cmd.push(Bytes::from_static(b"DEL"));
                        cmd.extend(d.iter().map(|&i| dels[i - n_puts].clone()));
                        requests.push(cmd);
                        is_del.push(true);
                    }
                }
                let slot = plan.commands.first().map_or(0, |c| c.0);
                let replies = self.write_to(map, plan.node, slot, &requests).await?;
                let addr = map.nodes().get(plan.node).map_or(unspecified(), |n| n.addr);
                let mut deleted = 0u64;
                for (reply, del) in replies.iter().zip(is_del) {
                    match (reply, del) {
                        (Reply::Integer(n), true) => deleted += u64::try_from(*n).unwrap_or(0),
                        (Reply::Simple(_), false) => {}
                        (other, true) => return Err(unexpected(addr, "DEL", other)),
                        (other, false) => return Err(unexpected(addr, "MSET", other)),
                    }
                }
                Ok::<_, RouteError>(deleted)
            })
            .collect();
        let mut deleted = 0;
        for result in join_all(futures).await {
            deleted += result?;
        }
        Ok(deleted)
    }

    /// Ordered range read (`LS.RANGE`): string keys `k` with `start <= k < end` in byte
    /// order (`end` empty: no upper bound) with their values, at most `count` pairs. When
    /// `start` and `end` begin with the same `{hash tag}` (so every key between them has
    /// it), or there is one drive, one drive answers; otherwise every primary is asked and
    /// the answers merged, each drive contributing only keys of slots it serves in the
    /// router's map (drives do not redirect range reads). A reply may hold fewer than
    /// `count` pairs while more exist (a drive caps a reply's bytes): continue from the last
    /// key plus a zero byte; an empty reply means no key is left in the range.
    ///
    /// # Errors
    /// [`RouteError::Invalid`] for a count of 0 or above [`RANGE_MAX_COUNT`]; otherwise as
    /// [`Router::get`].
    pub async fn range(
        &self,
        start: &[u8],
        end: &[u8],
        count: u32,
    ) -> Result<Vec<(Bytes, Bytes)>, RouteError> {
        if count == 0 || count > RANGE_MAX_COUNT {
            return Err(RouteError::Invalid(format!(
                "range count {count} is not within 1..={RANGE_MAX_COUNT}"
            )));
        }
        let mut attempt = 0;
        loop {
            let map = self.map();
            match self.range_once(&map, start, end, count).await {
                Err(e) => self.retry_after(e, map.version(), attempt).await?,
                ok => return ok,
            }
            attempt += 1;
        }
    }

    async fn range_once(
        &self,
        map: &ClusterMap,
        start: &[u8],
        end: &[u8],
        count: u32,
    ) -> Result<Vec<(Bytes, Bytes)>, RouteError> {
        let targets: Vec<(usize, u16)> = match one_slot_range(start, end) {
            Some(slot) if !self.single => {
                let owner = map.owner(slot).ok_or(RouteError::NoOwner {
                    slot,
                    version: map.version(),
                })?;
                let node = map
                    .nodes()
                    .iter()
                    .position(|n| n.id == owner.id)
                    .unwrap_or_default();
                vec![(node, slot)]
            }
            _ if self.single => vec![(0, 0)],
            _ => map
                .nodes()
                .iter()
                .enumerate()
                .filter(|(_, n)| n.replica_of.is_none() && !n.slots.is_empty())
                .map(|(i, n)| {
                    let slot = map.slot_ranges(&n.id).first().map_or(0, |r| r.0);
                    (i, slot)
                })
                .collect(),
        };
        let mut from = Bytes::copy_from_slice(start);
        loop {
            let request = vec![vec![
                Bytes::from_static(b"LS.RANGE"),
                from.clone(),
                Bytes::copy_from_slice(end),
                Bytes::from_static(b"COUNT"),
                Bytes::from(count.to_string()),
            ]];
            let futures: Vec<_> = targets
                .iter()
                .map(|&(node, slot)| {
                    let request = &request;
                    async move { self.read_from(map, node, slot, request).await }
                })
                .collect();
            let mut runs: Vec<Vec<(Bytes, Bytes)>> = Vec::new();
            // Keys past the smallest last key a drive returned may be missing from that
            // drive's page (it may have been cut short), so the merge stops there.
            let mut cut: Option<Bytes> = None;
            for (&(node, _), result) in targets.iter().zip(join_all(futures).await) {
                let spec = map.nodes().get(node);
                let addr = spec.map_or(unspecified(), |n| n.addr);
                let reply = result?.into_iter().next().unwrap_or(Reply::Null);
                let pairs = range_pairs(reply, addr, map.version())?;
                if let Some((last, _)) = pairs.last() {
                    if cut.as_ref().is_none_or(|c| last < c) {
                        cut = Some(last.clone());
                    }
                }
                // LS.RANGE is not redirected: a drive returns what it stores, which after a
                // map change may include slots it no longer serves. Keep what it owns.
                let owned: Vec<(Bytes, Bytes)> = match spec {
                    Some(n) if !self.single => pairs
                        .into_iter()
                        .filter(|(k, _)| map.owner(key_slot(k)).is_some_and(|o| o.id == n.id))
                        .collect(),
                    _ => pairs,
                };
                runs.push(owned);
            }
            let Some(cut) = cut else {
                return Ok(Vec::new());
            };
            let mut merged: Vec<(Bytes, Bytes)> = runs.into_iter().flatten().collect();
            merged.sort_by(|a, b| a.0.cmp(&b.0));
            merged.retain(|(k, _)| *k <= cut);
            merged.truncate(usize::try_from(count).unwrap_or(usize::MAX));
            if !merged.is_empty() {
                return Ok(merged);
            }
            // Everything up to the cut was filtered out: go on after it, so an empty
            // answer keeps meaning "nothing left".
            let mut next = cut.to_vec();
            next.push(0);
            from = Bytes::from(next);
        }
    }
}

/// The slot of every key in `[start, end)` when they all share one hash tag: both bounds
/// begin with the same bytes up to and including a `{tag}`, so every key between them does.
fn one_slot_range(start: &[u8], end: &[u8]) -> Option<u16> {
    let open = start.iter().position(|&b| b == b'{')?;
    let len = start[open + 1..].iter().position(|&b| b == b'}')?;
    if len == 0 {
        return None;
    }
    let prefix = &start[..open + len + 2];
    end.starts_with(prefix).then(|| key_slot(start))
}

/// The pairs of an `LS.RANGE` reply.
fn range_pairs(
    reply: Reply,
    addr: SocketAddr,
    version: u64,
) -> Result<Vec<(Bytes, Bytes)>, RouteError> {
    check(&reply, addr, b"LS.RANGE", version)?;
    let Reply::Array(items) = reply else {
        return Err(unexpected(addr, "LS.RANGE", &reply));
    };
    if items.len() % 2 != 0 {
        return Err(unexpected(addr, "LS.RANGE", &Reply::Array(items)));
    }
    let mut pairs = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        match (k, v) {
            (Reply::Bulk(k), Reply::Bulk(v)) => pairs.push((k, v)),
            (k, _) => return Err(unexpected(addr, "LS.RANGE", &k)),
        }
    }
    Ok(pairs)
}

fn unspecified() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

/// Reads and validates a map file.
fn read_map(path: &Path) -> Result<ClusterMap, RouteError> {
    let text = std::fs::read_to_string(path).map_err(|source| RouteError::MapRead {
        path: path.to_path_buf(),
        source,
    })?;
    ClusterMap::from_toml(&text).map_err(|source| RouteError::MapInvalid {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> String {
        format!("{n:040x}")
    }

    fn map3() -> ClusterMap {
        let text = format!(
            "version = 1\n\
             [[node]]\nid = \"{a}\"\naddr = \"127.0.0.1:7001\"\nslots = [[0, 8191]]\n\
             [[node]]\nid = \"{b}\"\naddr = \"127.0.0.1:7002\"\nslots = [[8192, 16383]]\n\
             [[node]]\nid = \"{c}\"\naddr = \"127.0.0.1:7003\"\nreplica_of = \"{a}\"\n",
            a = id(1),
            b = id(2),
            c = id(3)
        );
        ClusterMap::from_toml(&text).unwrap()
    }

    #[test]
    fn plans_group_by_owner_and_slot() {
        let router = Router::from_map(map3(), RouterConfig::default());
        let map = router.map();
        let keys: Vec<&[u8]> = vec![b"foo", b"bar", b"{foo}x", b"{bar}y", b"zzz"];
        let plans = router.plan(&map, keys.iter().copied()).unwrap();
        // foo: 12182 (node b), bar: 5061 (node a).
        type Commands = Vec<(u16, Vec<usize>)>;
        let by_node: Vec<(usize, Commands)> =
            plans.into_iter().map(|p| (p.node, p.commands)).collect();
        let zzz = key_slot(b"zzz");
        let mut expect_a = vec![(5061u16, vec![1usize, 3])];
        let mut expect_b = vec![(12182u16, vec![0usize, 2])];
        if zzz < 8192 {
            expect_a.push((zzz, vec![4]));
            expect_a.sort();
        } else {
            expect_b.push((zzz, vec![4]));
            expect_b.sort();
        }
        assert_eq!(by_node, vec![(0, expect_a), (1, expect_b)]);
    }

    #[test]
    fn single_drive_is_one_command() {
        let router =
            Router::single("127.0.0.1:6379".parse().unwrap(), RouterConfig::default()).unwrap();
        let map = router.map();
        assert_eq!(map.slots_assigned(), usize::from(SLOT_COUNT));
        let keys: Vec<&[u8]> = vec![b"foo", b"bar", b"baz"];
        let plans = router.plan(&map, keys.iter().copied()).unwrap();
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].commands, vec![(0, vec![0, 1, 2])]);
    }

    #[test]
    fn long_groups_are_split() {
        let router =
            Router::single("127.0.0.1:6379".parse().unwrap(), RouterConfig::default()).unwrap();
        let map = router.map();
        let keys: Vec<Vec<u8>> = (0..2500).map(|i| format!("k{i}").into_bytes()).collect();
        let plans = router.plan(&map, keys.iter().map(|k| &k[..])).unwrap();
        let sizes: Vec<usize> = plans[0].commands.iter().map(|c| c.1.len()).collect();
        assert_eq!(sizes, vec![1024, 1024, 452]);
    }

    #[test]
    fn redirects_parse() {
        assert_eq!(
            parse_redirect(b"MOVED 3999 127.0.0.1:6381"),
            Some((3999, "127.0.0.1:6381".to_string()))
        );
        assert_eq!(parse_redirect(b"ASK 1 h:2"), Some((1, "h:2".to_string())));
        assert_eq!(parse_redirect(b"ERR MOVED"), None);
        assert_eq!(parse_redirect(b"MOVED x y"), None);
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let moved = Reply::error("MOVED 5 127.0.0.1:2");
        assert!(matches!(
            check(&moved, addr, b"GET", 1),
            Err(RouteError::Moved { slot: 5, .. })
        ));
        assert!(matches!(
            check(&Reply::error("ERR nope"), addr, b"GET", 1),
            Err(RouteError::Server { .. })
        ));
    }

    #[tokio::test]
    async fn unreachable_drive_is_a_clear_error() {
        // A port nothing listens on: bind, note the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let router = Router::single(addr, RouterConfig::default()).unwrap();
        let err = router.get(b"k").await.unwrap_err();
        assert!(matches!(err, RouteError::Unavailable { .. }), "{err}");
        assert!(err.to_string().contains(&addr.to_string()), "{err}");
        let err = router
            .set(Bytes::from("k"), Bytes::from("v"))
            .await
            .unwrap_err();
        assert!(matches!(err, RouteError::WriteFailed { .. }), "{err}");
        assert!(router.range(b"a", b"b", 0).await.is_err());
    }

    #[test]
    fn one_slot_ranges() {
        assert_eq!(
            one_slot_range(b"{v:a:01}\x00", b"{v:a:01}\xff"),
            Some(key_slot(b"v:a:01"))
        );
        assert_eq!(one_slot_range(b"x{t}1", b"x{t}"), Some(key_slot(b"t")));
        // Keys between "a{t}" and "b{t}" (e.g. "aa") need not carry the tag.
        assert_eq!(one_slot_range(b"a{t}", b"b{t}"), None);
        assert_eq!(one_slot_range(b"{t}1", b""), None);
        assert_eq!(one_slot_range(b"{}1", b"{}2"), None);
        assert_eq!(one_slot_range(b"abc", b"abd"), None);
    }

    #[tokio::test]
    async fn join_all_keeps_order() {
        let futs: Vec<_> = (0..5u64)
            .map(|i| async move {
                tokio::time::sleep(Duration::from_millis(10 * (5 - i))).await;
                i
            })
            .collect();
        assert_eq!(join_all(futs).await, vec![0, 1, 2, 3, 4]);
    }
}
