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
//! - a slot being moved between drives (docs/CLUSTER.md) answers `-ASK` for keys
//!   already on the drive taking it over, and `-TRYAGAIN` for a multi-key command whose keys
//!   are split between the two: the router sends an asked request again after `ASKING` to
//!   the named drive, and a split MGET/MSET/DEL/UNLINK/EXISTS again one key at a time,
//!   following the ASKs, then joins the replies. A write the target takes this way goes to
//!   the target's replicas too (the source's MIGRATE copies each key it moves to them),
//!   so a slot moves with its replicas (`redirect`).
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
use kvproto::{Client, ClientError, Credentials, Reply, TlsClient};
use parking_lot::{Mutex, RwLock};

mod ranges;
mod redirect;

use redirect::parse_redirect;

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
    /// A write was redirected with `-ASK` to a drive that the router's map, even fetched
    /// anew from that drive, does not list: its replicas cannot be known, so they cannot
    /// be written.
    #[error("drive {addr} was named by an -ASK redirect but cluster map version {version} does not list it")]
    UnknownAskTarget {
        /// The drive the redirect named.
        addr: SocketAddr,
        /// The router's map version.
        version: u64,
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
    /// Connect over TLS with these settings (drives with `--tls-port`); `None`: plain TCP.
    pub tls: Option<TlsClient>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            max_idle: 64,
            down_for: Duration::from_secs(1),
            max_redirects: 3,
            auth: None,
            tls: None,
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
        let connected =
            tokio::time::timeout(cfg.timeout, Client::connect_with(addr, cfg.tls.as_ref())).await;
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
                    return self.follow_redirects(addr, requests, r, false).await;
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
                    replies = self.follow_redirects(addr, requests, replies, true).await?;
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
