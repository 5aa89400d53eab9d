//! Redis Cluster mode (`--cluster-config FILE`): which slots this drive serves, the `CLUSTER`
//! subcommands, `-MOVED` / `-CROSSSLOT` redirection, and the admin commands `LS.CLUSTERMAP`
//! (push a newer map without a restart) and `LS.REPLICA` (a replication client's connection).
//!
//! The map itself — its TOML form, validation and the one key -> slot function — is
//! [`kvproto::cluster`]; this module owns what a drive does with it:
//!
//! - [`Cluster`]: the map file, this drive's node id, and the current [`View`] behind a lock
//!   (`RwLock<Arc<View>>`): a push builds a whole new view and swaps the `Arc`, so every thread
//!   sees either the old map or the new one, never a mix.
//! - [`View`]: one version of the map plus a per-slot role table (16384 bytes) so the hot-path
//!   check is a key hash and one array read, with no allocation ([`View::check`]).
//! - [`Gate`]: the network thread's handle. It keeps the view it last loaded. A push is
//!   validated, written to the map file (fsync) and swapped in on the `ls-clustermap` thread
//!   ([`Gate::with_saver`]), never on `ls-net`; its reply comes back like a worker's, after the
//!   file is durable, and the gate reloads the view before it delivers that reply
//!   ([`Gate::refresh`]), so the pushing client's next command sees the new map.
//!
//! Rules, as Redis Cluster's: a command's keys must all hash to one slot (else `-CROSSSLOT`,
//! checked before anything runs); a slot this node serves as primary is served; a slot of the
//! primary this node replicates is served to a `READONLY` connection for reads and to an
//! `LS.REPLICA` connection (the adapters' client-side replication) for reads and writes;
//! everything else is `-MOVED slot ip:port` to the slot's primary. Keyless commands (PING,
//! INFO, SCAN, DBSIZE, FLUSHALL, ...) are not redirected and see only what this drive stores.
//!
//! `LS.RANGE` (an ordered range read, not a key) is exempt from MOVED and returns what this
//! drive stores in the range, which after a map change can include keys of slots that moved
//! away (nothing migrates data). It is not filtered here: a filtered page could come back short
//! or empty while later keys exist, breaking the "continue from the last key" contract. A
//! caller that merges ranges from several drives drops each key whose `key_slot` the queried
//! shard does not own in its map. (A drive-side filter would look up the slot's role in the
//! [`View`] from [`Cluster::view`] on the engine thread, with a reply that also carries the
//! last key scanned.)

use std::collections::HashMap;
use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kvproto::cluster::{key_slot, ClusterMap, MapError, NodeSpec, PushError, SLOT_COUNT};
use kvproto::{Command, Reply};
use parking_lot::{Mutex, RwLock};

use crate::exec::{Done, ReplySink};

/// Redis's reply to cluster commands on a drive started without `--cluster-config`.
pub const DISABLED_ERROR: &str = "ERR This instance has cluster support disabled";
/// Redis's reply to a multi-key command whose keys hash to different slots.
pub const CROSSSLOT_ERROR: &str = "CROSSSLOT Keys in request don't hash to the same slot";
/// Redis's reply for a key whose slot has no primary.
pub const UNBOUND_ERROR: &str = "CLUSTERDOWN Hash slot not served";

/// Why a cluster map was not loaded or not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The map file could not be read.
    #[error("cannot read the cluster map {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The map is not valid (syntax, ids, ranges, overlaps, replicas).
    #[error("invalid cluster map: {0}")]
    Map(#[from] MapError),
    /// Some slots have no primary.
    #[error(
        "the cluster map leaves {count} of the 16384 slots without a primary (the first is slot {first}); every slot must be assigned"
    )]
    Unassigned {
        /// Slots without a primary.
        count: usize,
        /// The lowest of them.
        first: u16,
    },
    /// This drive's node id is not in the map.
    #[error("node id {0:?} is not in the cluster map")]
    UnknownNode(String),
    /// No node id was given and no node of the map has the listening address.
    #[error("no node of the cluster map has the address {0}: give --cluster-node-id")]
    NoNodeAt(SocketAddr),
    /// A map pushed with `LS.CLUSTERMAP` was refused.
    #[error(transparent)]
    Push(#[from] PushError),
    /// The accepted map could not be written back to the map file.
    #[error("cannot save the cluster map to {path}: {source}")]
    Save {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// What this drive does for one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// No primary (not reachable with a validated map: those are refused; kept for safety).
    Unassigned,
    /// Another shard's slot: MOVED.
    Foreign,
    /// This drive is the slot's primary.
    Primary,
    /// This drive replicates the slot's primary.
    Replica,
}

/// A connection's cluster flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnMode {
    /// `READONLY`: reads of the replicated primary's slots are served here.
    pub readonly: bool,
    /// `LS.REPLICA`: reads and writes of the replicated primary's slots are served here.
    pub replication: bool,
    /// `ASKING` came just before: the next command may touch a slot this drive imports.
    pub asking: bool,
}

/// The slot a command's keys hash to.
enum Slot {
    /// The command has no keys.
    None,
    /// Every key hashes to this slot.
    One(u16),
    /// Keys hash to different slots.
    Cross,
}

/// The slots this drive is handing over and where they go, shared with the worker threads:
/// `ls-net` checks a command before handing it over, but a key can move (MIGRATE, on
/// `ls-writer`) between that check and the command's turn on a worker, so the workers look
/// again when the command runs (see [`Migrations::redirect`]).
#[derive(Debug, Default)]
pub struct Migrations {
    /// Whether any slot is being handed over (the common case reads only this).
    any: std::sync::atomic::AtomicBool,
    targets: parking_lot::RwLock<HashMap<u16, SocketAddr>>,
}

impl Migrations {
    /// Replaces the table (from the network thread, after CLUSTER SETSLOT).
    pub fn set(&self, targets: HashMap<u16, SocketAddr>) {
        let any = !targets.is_empty();
        *self.targets.write() = targets;
        self.any.store(any, Ordering::Release);
    }

    /// Whether any slot is being handed over.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// The redirect `cmd` gets when it runs, if one of its keys' slot is being handed
    /// over: `-ASK` when none of its keys is here (any more), `-TRYAGAIN` when some are;
    /// `None` (run it) when all are, and always for MIGRATE. `exists` sees the state the
    /// command would run on.
    pub fn redirect(&self, cmd: &Command, exists: impl Fn(&[u8]) -> bool) -> Option<Reply> {
        if !self.any.load(Ordering::Acquire) || matches!(cmd, Command::Migrate(_)) {
            return None;
        }
        let Slot::One(slot) = command_slot(cmd) else {
            return None;
        };
        let to = *self.targets.read().get(&slot)?;
        let keys = cmd.keys();
        let here = keys.iter().filter(|k| exists(k)).count();
        if here == keys.len() {
            None
        } else if here > 0 {
            Some(Reply::error(TRYAGAIN_ERROR))
        } else {
            Some(Reply::error(format!("ASK {slot} {}", endpoint(&to))))
        }
    }
}

/// Redis's reply to a multi-key command over a slot in migration whose keys are split.
const TRYAGAIN_ERROR: &str = "TRYAGAIN Multiple keys request during rehashing of slot";

fn same_slot<'a>(mut keys: impl Iterator<Item = &'a [u8]>) -> Slot {
    let Some(first) = keys.next() else {
        return Slot::None;
    };
    let slot = key_slot(first);
    if keys.all(|k| key_slot(k) == slot) {
        Slot::One(slot)
    } else {
        Slot::Cross
    }
}

/// The slot of `cmd`'s keys, without allocating for the commands the drive serves (any other
/// command falls back to [`Command::keys`], which allocates only when it has keys).
fn command_slot(cmd: &Command) -> Slot {
    match cmd {
        Command::Get(k)
        | Command::Strlen(k)
        | Command::HGetAll(k)
        | Command::HLen(k)
        | Command::ZCard(k)
        | Command::Set { key: k, .. }
        | Command::GetRange { key: k, .. }
        | Command::IncrBy { key: k, .. }
        | Command::HSet { key: k, .. }
        | Command::HGet { key: k, .. }
        | Command::HMGet { key: k, .. }
        | Command::HDel { key: k, .. }
        | Command::HExists { key: k, .. }
        | Command::ZAdd { key: k, .. }
        | Command::ZRem { key: k, .. }
        | Command::ZScore { key: k, .. }
        | Command::ZRangeByScore { key: k, .. } => Slot::One(key_slot(k)),
        Command::MGet(ks) | Command::Del(ks) | Command::Exists(ks) => {
            same_slot(ks.iter().map(|k| &k[..]))
        }
        Command::MSet(pairs) => same_slot(pairs.iter().map(|(k, _)| &k[..])),
        // A key range, not keys: exempt (see the module docs).
        Command::Range { .. } => Slot::None,
        other => same_slot(other.keys().into_iter()),
    }
}

/// `ip:port` as Redis prints node addresses (no brackets around IPv6).
fn endpoint(addr: &SocketAddr) -> String {
    format!("{}:{}", addr.ip(), addr.port())
}

fn wrong_args(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn bulk(s: impl Into<String>) -> Reply {
    Reply::Bulk(Bytes::from(s.into()))
}

fn text(s: &'static str) -> Reply {
    Reply::Bulk(Bytes::from_static(s.as_bytes()))
}

/// One version of the cluster map as this drive sees it.
pub struct View {
    map: ClusterMap,
    /// Index of this drive in `map.nodes()`.
    me: usize,
    /// What this drive does for each slot.
    roles: Box<[Role]>,
    /// Maximal runs of slots with one primary: (first, last, node index), in slot order.
    runs: Vec<(u16, u16, usize)>,
}

impl fmt::Debug for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("version", &self.map.version())
            .field("me", &self.my_id())
            .field("runs", &self.runs)
            .finish_non_exhaustive()
    }
}

impl View {
    /// Builds the view of `map` for node `my_id`.
    ///
    /// # Errors
    /// The node is not in the map, or some slot has no primary.
    pub fn new(map: ClusterMap, my_id: &str) -> Result<View, ClusterError> {
        let me = map
            .nodes()
            .iter()
            .position(|n| n.id == my_id)
            .ok_or_else(|| ClusterError::UnknownNode(my_id.to_owned()))?;
        let assigned = map.slots_assigned();
        if assigned < usize::from(SLOT_COUNT) {
            let first = (0..SLOT_COUNT)
                .find(|&s| map.owner(s).is_none())
                .unwrap_or(0);
            return Err(ClusterError::Unassigned {
                count: usize::from(SLOT_COUNT) - assigned,
                first,
            });
        }
        let (roles, runs) = {
            let nodes = map.nodes();
            let index: HashMap<&str, usize> = nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.id.as_str(), i))
                .collect();
            let my_primary = nodes[me].replica_of.as_deref();
            let mut roles = vec![Role::Unassigned; usize::from(SLOT_COUNT)].into_boxed_slice();
            let mut runs: Vec<(u16, u16, usize)> = Vec::new();
            for slot in 0..SLOT_COUNT {
                let owner = map
                    .owner(slot)
                    .and_then(|n| index.get(n.id.as_str()).copied());
                roles[usize::from(slot)] = match owner {
                    None => Role::Unassigned,
                    Some(o) if o == me => Role::Primary,
                    Some(o) if Some(nodes[o].id.as_str()) == my_primary => Role::Replica,
                    Some(_) => Role::Foreign,
                };
                if let Some(o) = owner {
                    match runs.last_mut() {
                        Some((_, last, n)) if *n == o && *last + 1 == slot => *last = slot,
                        _ => runs.push((slot, slot, o)),
                    }
                }
            }
            (roles, runs)
        };
        Ok(View {
            map,
            me,
            roles,
            runs,
        })
    }

    /// The map this view was built from.
    pub fn map(&self) -> &ClusterMap {
        &self.map
    }

    /// This drive's node id.
    pub fn my_id(&self) -> &str {
        self.map.nodes().get(self.me).map_or("", |n| n.id.as_str())
    }

    fn role(&self, slot: u16) -> Role {
        self.roles
            .get(usize::from(slot))
            .copied()
            .unwrap_or(Role::Unassigned)
    }

    /// The redirection `cmd` gets on a connection in `mode`, or `None` when it runs here.
    /// `write` says whether the command writes. No allocation unless it redirects.
    ///
    /// One exception to Redis's rules: on a replication connection (`LS.REPLICA`) a DEL or
    /// UNLINK of another shard's slot runs here. It is how a reshard removes what a replica
    /// kept of a slot its primary gave away (replication is client-side, so no primary
    /// tells it); such keys are read by no one, and deleting them is all it allows. A slot
    /// this drive is importing is not another shard's for this rule ([`Gate::check`]).
    #[inline]
    pub fn check(&self, cmd: &Command, write: bool, mode: ConnMode) -> Option<Reply> {
        let slot = match command_slot(cmd) {
            Slot::None => return None,
            Slot::Cross => return Some(Reply::error(CROSSSLOT_ERROR)),
            Slot::One(s) => s,
        };
        match self.role(slot) {
            Role::Primary => None,
            Role::Replica if mode.replication || (mode.readonly && !write) => None,
            Role::Foreign if mode.replication && matches!(cmd, Command::Del(_)) => None,
            Role::Unassigned => Some(Reply::error(UNBOUND_ERROR)),
            Role::Replica | Role::Foreign => Some(self.moved(slot)),
        }
    }

    fn moved(&self, slot: u16) -> Reply {
        match self.map.owner(slot) {
            Some(n) => Reply::error(format!("MOVED {slot} {}", endpoint(&n.addr))),
            None => Reply::error(UNBOUND_ERROR),
        }
    }

    /// Answers `CLUSTER <args>` (`args` without the word CLUSTER).
    pub fn cluster_command(&self, args: &[Bytes]) -> Reply {
        let Some(sub) = args.first() else {
            return wrong_args("cluster");
        };
        let lower = sub.to_ascii_lowercase();
        let rest = &args[1..];
        let name = String::from_utf8_lossy(&lower);
        let want = |n: usize| rest.len() == n;
        match lower.as_slice() {
            b"info" | b"slots" | b"shards" | b"nodes" | b"myid" | b"help" if !want(0) => {
                wrong_args(&format!("cluster|{name}"))
            }
            b"keyslot" | b"replicas" | b"slaves" if !want(1) => {
                wrong_args(&format!("cluster|{name}"))
            }
            b"info" => Reply::Verbatim(Bytes::from(self.info_text())),
            b"slots" => self.slots(),
            b"shards" => self.shards(),
            b"nodes" => Reply::Verbatim(Bytes::from(self.nodes_text())),
            b"myid" => bulk(self.my_id()),
            b"keyslot" => Reply::Integer(i64::from(key_slot(&rest[0]))),
            b"replicas" | b"slaves" => self.replicas(&rest[0]),
            b"help" => help(),
            _ => Reply::error(format!(
                "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
                String::from_utf8_lossy(&sub[..sub.len().min(128)])
            )),
        }
    }

    /// `CLUSTER INFO`: the map is static, so every assigned slot is ok and the epochs are the
    /// map's version.
    fn info_text(&self) -> String {
        let assigned = self.map.slots_assigned();
        let size = self
            .map
            .nodes()
            .iter()
            .filter(|n| n.replica_of.is_none() && !self.map.slot_ranges(&n.id).is_empty())
            .count();
        let v = self.map.version();
        format!(
            "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\n\
             cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\n\
             cluster_size:{size}\r\ncluster_current_epoch:{v}\r\ncluster_my_epoch:{v}\r\n\
             cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
             total_cluster_links_buffer_limit_exceeded:0\r\n",
            if assigned == usize::from(SLOT_COUNT) {
                "ok"
            } else {
                "fail"
            },
            self.map.nodes().len(),
        )
    }

    /// A node as `CLUSTER SLOTS` lists it: ip, port, id, metadata (none).
    fn slots_node(n: &NodeSpec) -> Reply {
        Reply::Array(vec![
            bulk(n.addr.ip().to_string()),
            Reply::Integer(i64::from(n.addr.port())),
            bulk(n.id.clone()),
            Reply::Map(Vec::new()),
        ])
    }

    /// `CLUSTER SLOTS`: one entry per run of slots, with the primary then its replicas.
    fn slots(&self) -> Reply {
        let nodes = self.map.nodes();
        Reply::Array(
            self.runs
                .iter()
                .filter_map(|&(first, last, o)| {
                    let p = nodes.get(o)?;
                    let mut e = vec![
                        Reply::Integer(i64::from(first)),
                        Reply::Integer(i64::from(last)),
                        Self::slots_node(p),
                    ];
                    e.extend(
                        self.map
                            .replicas_of(&p.id)
                            .into_iter()
                            .map(Self::slots_node),
                    );
                    Some(Reply::Array(e))
                })
                .collect(),
        )
    }

    /// A node as `CLUSTER SHARDS` lists it.
    fn shards_node(n: &NodeSpec, role: &'static str) -> Reply {
        let ip = n.addr.ip().to_string();
        Reply::Map(vec![
            (text("id"), bulk(n.id.clone())),
            (text("port"), Reply::Integer(i64::from(n.addr.port()))),
            (text("ip"), bulk(ip.clone())),
            (text("endpoint"), bulk(ip)),
            (text("role"), text(role)),
            (text("replication-offset"), Reply::Integer(0)),
            (text("health"), text("online")),
        ])
    }

    /// `CLUSTER SHARDS`: one entry per primary, its slot ranges and its nodes.
    fn shards(&self) -> Reply {
        let nodes = self.map.nodes();
        Reply::Array(
            nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.replica_of.is_none())
                .map(|(i, p)| {
                    let slots = self
                        .runs
                        .iter()
                        .filter(|r| r.2 == i)
                        .flat_map(|&(a, b, _)| {
                            [Reply::Integer(i64::from(a)), Reply::Integer(i64::from(b))]
                        })
                        .collect();
                    let mut members = vec![Self::shards_node(p, "master")];
                    members.extend(
                        self.map
                            .replicas_of(&p.id)
                            .into_iter()
                            .map(|r| Self::shards_node(r, "replica")),
                    );
                    Reply::Map(vec![
                        (text("slots"), Reply::Array(slots)),
                        (text("nodes"), Reply::Array(members)),
                    ])
                })
                .collect(),
        )
    }

    /// One `CLUSTER NODES` line (without the newline).
    fn node_line(&self, i: usize, n: &NodeSpec, now_ms: u128) -> String {
        use std::fmt::Write as _;
        let role = if n.replica_of.is_some() {
            "slave"
        } else {
            "master"
        };
        let flags = if i == self.me {
            format!("myself,{role}")
        } else {
            role.to_owned()
        };
        let mut line = format!(
            "{} {}@{} {flags} {} 0 {now_ms} {} connected",
            n.id,
            endpoint(&n.addr),
            u32::from(n.addr.port()) + 10_000,
            n.replica_of.as_deref().unwrap_or("-"),
            self.map.version(),
        );
        for &(a, b, _) in self.runs.iter().filter(|r| r.2 == i) {
            if a == b {
                let _ = write!(line, " {a}");
            } else {
                let _ = write!(line, " {a}-{b}");
            }
        }
        line
    }

    /// `CLUSTER NODES`: a line per node, in map order.
    fn nodes_text(&self) -> String {
        self.nodes_text_marked("")
    }

    /// `CLUSTER NODES` with `marks` (this drive's open slots, as Redis writes them:
    /// ` [slot->-id]` migrating, ` [slot-<-id]` importing) at the end of its own line.
    fn nodes_text_marked(&self, marks: &str) -> String {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut s = String::new();
        for (i, n) in self.map.nodes().iter().enumerate() {
            s.push_str(&self.node_line(i, n, now_ms));
            if i == self.me {
                s.push_str(marks);
            }
            s.push('\n');
        }
        s
    }

    /// `CLUSTER REPLICAS id`: the replicas' `CLUSTER NODES` lines.
    fn replicas(&self, id: &[u8]) -> Reply {
        let id = String::from_utf8_lossy(id);
        let Some(node) = self.map.node(&id) else {
            return Reply::error(format!("ERR Unknown node {id}"));
        };
        if node.replica_of.is_some() {
            return Reply::error("ERR The specified node is not a master");
        }
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Reply::Array(
            self.map
                .nodes()
                .iter()
                .enumerate()
                .filter(|(_, n)| n.replica_of.as_deref() == Some(&*id))
                .map(|(i, n)| bulk(self.node_line(i, n, now_ms)))
                .collect(),
        )
    }
}

fn help() -> Reply {
    const LINES: &[&str] = &[
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MYID",
        "    Return the node id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "REPLICAS <node-id>",
        "    Return <node-id> replicas.",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
        "HELP",
        "    Prints this help.",
        "(This drive's map is set by the operator: --cluster-config, LS.CLUSTERMAP <version> <toml>.)",
    ];
    Reply::Array(
        LINES
            .iter()
            .map(|l| Reply::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
    )
}

/// Writes `text` to `path` atomically: a temporary file in the same directory, synced, then
/// renamed over `path`, then the directory synced.
fn save_atomic(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().map_or_else(
        || "cluster.toml".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The cluster state shared by the drive's threads: the map file, this node's id and the
/// current view.
#[derive(Debug)]
pub struct Cluster {
    path: PathBuf,
    my_id: String,
    current: RwLock<Arc<View>>,
    /// Serialises pushes (validate, save, swap).
    push_lock: Mutex<()>,
}

impl Cluster {
    /// Loads the map at `path` and finds this node: `node_id` when given, otherwise the node
    /// whose address is `local` (the listening address; with an unspecified bind address,
    /// the node with the same port).
    ///
    /// # Errors
    /// An unreadable or invalid map, a map that leaves slots unassigned, an unknown node id,
    /// or no node at `local`.
    pub fn load(
        path: &Path,
        node_id: Option<&str>,
        local: SocketAddr,
    ) -> Result<Cluster, ClusterError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let map = ClusterMap::from_toml(&text)?;
        let my_id = match node_id {
            Some(id) => id.to_owned(),
            None => map
                .nodes()
                .iter()
                .find(|n| {
                    n.addr == local
                        || (local.ip().is_unspecified() && n.addr.port() == local.port())
                })
                .map(|n| n.id.clone())
                .ok_or(ClusterError::NoNodeAt(local))?,
        };
        let view = View::new(map, &my_id)?;
        if let Some(me) = view.map.node(&my_id) {
            if me.addr != local && !local.ip().is_unspecified() {
                tracing::warn!(
                    map_addr = %me.addr,
                    %local,
                    "this node's address in the cluster map is not the listening address: clients redirected to it go to {}",
                    me.addr
                );
            }
        }
        Ok(Cluster {
            path: path.to_path_buf(),
            my_id,
            current: RwLock::new(Arc::new(view)),
            push_lock: Mutex::new(()),
        })
    }

    /// The current view (any thread).
    pub fn view(&self) -> Arc<View> {
        self.current.read().clone()
    }

    /// `LS.CLUSTERMAP <version> <toml>`: accepts a newer map, saves it to the map file, then
    /// swaps it in.
    fn push(&self, version: &[u8], text: &[u8]) -> Result<Arc<View>, ClusterError> {
        let _one_at_a_time = self.push_lock.lock();
        let map = ClusterMap::from_push(version, text, self.view().map.version())?;
        let given = map.version();
        let view = Arc::new(View::new(map, &self.my_id)?);
        save_atomic(&self.path, text).map_err(|source| ClusterError::Save {
            path: self.path.clone(),
            source,
        })?;
        *self.current.write() = view.clone();
        tracing::info!(version = given, "cluster map updated");
        Ok(view)
    }
}

impl Cluster {
    /// `CLUSTER SETSLOT slot NODE id` when the map gives the slot to another node: the map
    /// one version newer with the slot served by `to`, saved to the map file, then swapped
    /// in. Nothing changes when the map already gives it to `to`.
    fn move_slot(&self, slot: u16, to: &str) -> Result<Arc<View>, ClusterError> {
        let _one_at_a_time = self.push_lock.lock();
        let current = self.view();
        if current.map.owner(slot).is_some_and(|n| n.id == to) {
            return Ok(current);
        }
        let map = current.map.with_slots_moved(&[slot], to)?;
        let version = map.version();
        let text = map.to_toml();
        let view = Arc::new(View::new(map, &self.my_id)?);
        save_atomic(&self.path, text.as_bytes()).map_err(|source| ClusterError::Save {
            path: self.path.clone(),
            source,
        })?;
        *self.current.write() = view.clone();
        tracing::info!(
            version,
            slot,
            node = to,
            "cluster map updated by CLUSTER SETSLOT NODE"
        );
        Ok(view)
    }
}

/// The admin commands of cluster mode (not in kvproto's command table: the network thread
/// recognises them by name when `Command::parse` does not know them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin {
    /// `LS.CLUSTERMAP` (the current map's TOML) and `LS.CLUSTERMAP <version> <toml>` (push).
    ClusterMap,
    /// `LS.REPLICA`: this connection is a replication client.
    Replica,
}

impl Admin {
    /// The admin command a request names, if any.
    pub fn of(args: &[Bytes]) -> Option<Admin> {
        let name = args.first()?;
        if name.eq_ignore_ascii_case(b"ls.clustermap") {
            Some(Admin::ClusterMap)
        } else if name.eq_ignore_ascii_case(b"ls.replica") {
            Some(Admin::Replica)
        } else {
            None
        }
    }
}

/// What an admin command asks of the network thread.
#[derive(Debug)]
pub enum AdminOutcome {
    /// Send this reply now.
    Reply(Reply),
    /// The push went to the saver thread: its reply comes through the reply queue with the
    /// connection's sequence number.
    Deferred,
}

/// Pushes that may wait for the saver thread; more are refused with an error.
const SAVER_QUEUE: usize = 16;

/// A map change handed to the saver thread, answered to connection `conn` under `seq`.
struct PushJob {
    conn: u64,
    seq: u64,
    change: MapChange,
}

/// What a [`PushJob`] changes.
enum MapChange {
    /// `LS.CLUSTERMAP <version> <toml>`.
    Push { version: Bytes, text: Bytes },
    /// `CLUSTER SETSLOT slot NODE id` (see [`Cluster::move_slot`]).
    MoveSlot { slot: u16, to: String },
}

impl MapChange {
    fn run(&self, cluster: &Cluster) -> Result<Arc<View>, ClusterError> {
        match self {
            MapChange::Push { version, text } => cluster.push(version, text),
            MapChange::MoveSlot { slot, to } => cluster.move_slot(*slot, to),
        }
    }
}

/// The saver thread's handle.
struct Saver {
    tx: crossbeam_channel::Sender<PushJob>,
    /// Pushes the saver has finished (each one swapped the view before its reply).
    done: Arc<AtomicU64>,
    /// `done` when the gate last reloaded its view.
    seen: u64,
}

impl fmt::Debug for Saver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Saver").field("seen", &self.seen).finish()
    }
}

/// The network thread's handle on the cluster state.
#[derive(Debug)]
pub struct Gate {
    shared: Arc<Cluster>,
    /// The current view (reloaded after each push, before its reply goes out).
    view: Arc<View>,
    /// The thread that writes pushed maps (none: pushes run on the caller, as in unit tests).
    saver: Option<Saver>,
    /// Slots this drive is handing over (`CLUSTER SETSLOT slot MIGRATING node`): the node
    /// id they go to.
    migrating: HashMap<u16, String>,
    /// Slots this drive is taking over (`CLUSTER SETSLOT slot IMPORTING node`): the node id
    /// they come from.
    importing: HashMap<u16, String>,
    /// `CLUSTER SETSLOT slot NODE id` whose map change is being saved: the slot's migration
    /// state ends once the map in force gives it to `id` (not before: until then this
    /// drive may still own the slot, and a key missing here must still be asked for there).
    ending: HashMap<u16, String>,
}

impl Gate {
    /// A handle on `shared` that runs pushes on the calling thread.
    pub fn new(shared: Arc<Cluster>) -> Gate {
        let view = shared.view();
        Gate {
            shared,
            view,
            saver: None,
            migrating: HashMap::new(),
            importing: HashMap::new(),
            ending: HashMap::new(),
        }
    }

    /// A handle on `shared` whose pushes run on a thread of their own (`ls-clustermap`),
    /// which answers through `sink`.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn with_saver(shared: Arc<Cluster>, sink: ReplySink) -> std::io::Result<Gate> {
        let (tx, rx) = crossbeam_channel::bounded::<PushJob>(SAVER_QUEUE);
        let done = Arc::new(AtomicU64::new(0));
        let (cluster, finished) = (shared.clone(), done.clone());
        std::thread::Builder::new()
            .name("ls-clustermap".into())
            .spawn(move || {
                for job in rx {
                    let reply = match job.change.run(&cluster) {
                        Ok(_) => Reply::ok(),
                        Err(e) => Reply::error(format!("ERR {e}")),
                    };
                    finished.fetch_add(1, Ordering::Release);
                    sink.send_all(vec![Done {
                        conn: job.conn,
                        seq: job.seq,
                        reply,
                    }]);
                }
            })?;
        let mut gate = Gate::new(shared);
        gate.saver = Some(Saver { tx, done, seen: 0 });
        Ok(gate)
    }

    /// Reloads the view if a push finished since the last call (the network thread calls it
    /// after taking replies off the queue and before running anything after them). True when it did (the
    /// migration state may have changed with it).
    pub fn refresh(&mut self) -> bool {
        if let Some(s) = &mut self.saver {
            let done = s.done.load(Ordering::Acquire);
            if done != s.seen {
                s.seen = done;
                self.view = self.shared.view();
                self.end_migrations();
                return true;
            }
        }
        false
    }

    /// Ends the migration state of the slots whose `SETSLOT NODE` is now in the map.
    fn end_migrations(&mut self) {
        let view = &self.view;
        let done: Vec<u16> = self
            .ending
            .iter()
            .filter(|(slot, id)| view.map.owner(**slot).is_some_and(|n| &n.id == *id))
            .map(|(slot, _)| *slot)
            .collect();
        for slot in done {
            self.ending.remove(&slot);
            self.migrating.remove(&slot);
            self.importing.remove(&slot);
        }
    }

    /// This drive's open slots as `CLUSTER NODES` marks them, in slot order.
    fn open_slot_marks(&self) -> String {
        use std::fmt::Write as _;
        let mut open: Vec<(u16, &str, &String)> = self
            .migrating
            .iter()
            .map(|(s, id)| (*s, "->-", id))
            .chain(self.importing.iter().map(|(s, id)| (*s, "-<-", id)))
            .collect();
        open.sort_unstable();
        let mut out = String::new();
        for (slot, arrow, id) in open {
            let _ = write!(out, " [{slot}{arrow}{id}]");
        }
        out
    }

    /// See [`View::check`], with a slot being migrated as Redis Cluster serves one: on the
    /// drive handing it over (MIGRATING), a command whose keys all exist here runs here, one
    /// with none of them gets `-ASK` to the drive taking it over, one with some gets
    /// `-TRYAGAIN`; on the drive taking it over (IMPORTING), a command right after ASKING
    /// (or RESTORE-ASKING) runs here, a multi-key one with keys missing gets `-TRYAGAIN`.
    /// `exists` says whether a key exists on this drive (a DRAM lookup).
    #[inline]
    pub fn check(
        &self,
        cmd: &Command,
        write: bool,
        mode: ConnMode,
        exists: impl Fn(&[u8]) -> bool,
    ) -> Option<Reply> {
        if self.migrating.is_empty() && self.importing.is_empty() {
            return self.view.check(cmd, write, mode);
        }
        if let Slot::One(slot) = command_slot(cmd) {
            // MIGRATE runs here while its slot is open, whatever exists (as in Redis: it is
            // how keys leave).
            if matches!(cmd, Command::Migrate(_))
                && (self.migrating.contains_key(&slot) || self.importing.contains_key(&slot))
            {
                return None;
            }
            let primary = self.view.role(slot) == Role::Primary;
            if let (true, Some(to)) = (primary, self.migrating.get(&slot)) {
                let keys = cmd.keys();
                let here = keys.iter().filter(|k| exists(k)).count();
                if here == keys.len() {
                    return None;
                }
                if here > 0 {
                    return Some(Reply::error(TRYAGAIN_ERROR));
                }
                if let Some(n) = self.view.map.node(to) {
                    return Some(Reply::error(format!("ASK {slot} {}", endpoint(&n.addr))));
                }
            }
            let asked = mode.asking || matches!(cmd, Command::Restore { asking: true, .. });
            // Importing matters while the map gives the slot to another shard: once it
            // gives it to this drive (or, on a replica, to its primary), the slot is served
            // as any other, whatever SETSLOT STABLE has not closed yet.
            if self.view.role(slot) == Role::Foreign && self.importing.contains_key(&slot) {
                if !asked {
                    // Keys arriving here are not a replica's leftovers (see View::check).
                    if matches!(cmd, Command::Del(_)) {
                        return Some(self.view.moved(slot));
                    }
                    return self.view.check(cmd, write, mode);
                }
                let keys = cmd.keys();
                if keys.len() > 1 && !keys.iter().all(|k| exists(k)) {
                    return Some(Reply::error(TRYAGAIN_ERROR));
                }
                return None;
            }
        }
        self.view.check(cmd, write, mode)
    }

    /// See [`View::cluster_command`]; `CLUSTER SETSLOT` is answered here (it changes this
    /// drive's migration state, which outlives map pushes but not a restart, and with NODE
    /// the map), and so is `CLUSTER NODES` (which shows the migration state). `conn` and
    /// `seq` name the reply of a map change the saver thread answers.
    pub fn cluster_command(&mut self, args: &[Bytes], conn: u64, seq: u64) -> AdminOutcome {
        match args.first() {
            Some(s) if s.eq_ignore_ascii_case(b"setslot") => self.set_slot(&args[1..], conn, seq),
            Some(s) if s.eq_ignore_ascii_case(b"nodes") && args.len() == 1 => {
                AdminOutcome::Reply(Reply::Verbatim(Bytes::from(
                    self.view.nodes_text_marked(&self.open_slot_marks()),
                )))
            }
            _ => AdminOutcome::Reply(self.view.cluster_command(args)),
        }
    }

    /// The slots this drive hands over and the addresses of the drives taking them.
    pub fn migrating_targets(&self) -> HashMap<u16, SocketAddr> {
        self.migrating
            .iter()
            .filter_map(|(slot, id)| Some((*slot, self.view.map.node(id)?.addr)))
            .collect()
    }

    /// `CLUSTER SETSLOT slot MIGRATING node | IMPORTING node | STABLE | NODE node`. NODE
    /// gives the slot to that node in this drive's map (one version newer, saved before the
    /// reply, by the saver thread when there is one) and then ends the slot's migration,
    /// as `redis-cli --cluster reshard` expects of every primary it tells. Unlike Redis, the
    /// drive does not refuse NODE while it still holds keys of the slot (counting them is a
    /// walk of the keyspace, too slow for the network thread): the migration tool moves
    /// them first.
    fn set_slot(&mut self, rest: &[Bytes], conn: u64, seq: u64) -> AdminOutcome {
        if rest.len() < 2 {
            return AdminOutcome::Reply(wrong_args("cluster|setslot"));
        }
        let slot = match std::str::from_utf8(&rest[0])
            .ok()
            .and_then(|t| t.parse::<u16>().ok())
            .filter(|s| *s < SLOT_COUNT)
        {
            Some(s) => s,
            None => return AdminOutcome::Reply(Reply::error("ERR Invalid or out of range slot")),
        };
        let action = rest[1].to_ascii_lowercase();
        let node = |id: &Bytes| -> Result<String, Reply> {
            let id = String::from_utf8_lossy(id).into_owned();
            match self.view.map.node(&id) {
                Some(n) if n.replica_of.is_some() => {
                    Err(Reply::error("ERR Target node is not a master"))
                }
                Some(_) => Ok(id),
                None => Err(Reply::error(format!("ERR I don't know about node {id}"))),
            }
        };
        let primary = self.view.role(slot) == Role::Primary;
        let outcome = match (action.as_slice(), rest.get(2), rest.len()) {
            (b"migrating", Some(_), 3) if !primary => Err(Reply::error(format!(
                "ERR I'm not the owner of hash slot {slot}"
            ))),
            (b"migrating", Some(id), 3) => node(id).map(|id| {
                self.ending.remove(&slot);
                self.migrating.insert(slot, id);
                Reply::ok()
            }),
            (b"importing", Some(_), 3) if primary => Err(Reply::error(format!(
                "ERR I'm already the owner of hash slot {slot}"
            ))),
            (b"importing", Some(id), 3) => node(id).map(|id| {
                self.ending.remove(&slot);
                self.importing.insert(slot, id);
                Reply::ok()
            }),
            (b"stable", None, 2) => {
                self.ending.remove(&slot);
                self.migrating.remove(&slot);
                self.importing.remove(&slot);
                Ok(Reply::ok())
            }
            (b"node", Some(id), 3) => match node(id) {
                Ok(id) => return self.give_slot(slot, id, conn, seq),
                Err(r) => Err(r),
            },
            _ => Err(Reply::error(
                "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP",
            )),
        };
        AdminOutcome::Reply(outcome.unwrap_or_else(|r| r))
    }

    /// `CLUSTER SETSLOT slot NODE id`: the map change (see [`Cluster::move_slot`]), then
    /// the end of the slot's migration.
    fn give_slot(&mut self, slot: u16, id: String, conn: u64, seq: u64) -> AdminOutcome {
        self.ending.insert(slot, id.clone());
        if self.view.map.owner(slot).is_some_and(|n| n.id == id) {
            self.end_migrations();
            return AdminOutcome::Reply(Reply::ok());
        }
        let change = MapChange::MoveSlot { slot, to: id };
        let reply = match &self.saver {
            Some(s) => {
                return match s.tx.try_send(PushJob { conn, seq, change }) {
                    Ok(()) => AdminOutcome::Deferred,
                    Err(_) => AdminOutcome::Reply(Reply::error(
                        "ERR too many cluster map changes in progress; try again",
                    )),
                };
            }
            None => match change.run(&self.shared) {
                Ok(view) => {
                    self.view = view;
                    self.end_migrations();
                    Reply::ok()
                }
                Err(e) => Reply::error(format!("ERR {e}")),
            },
        };
        AdminOutcome::Reply(reply)
    }

    /// Runs an admin command for connection `conn` in `mode`; `seq` numbers its reply
    /// when it is deferred (a push, with a saver thread).
    pub fn admin(
        &mut self,
        admin: Admin,
        args: &[Bytes],
        mode: &mut ConnMode,
        conn: u64,
        seq: u64,
    ) -> AdminOutcome {
        let reply = match admin {
            Admin::Replica if args.len() != 1 => wrong_args("ls.replica"),
            Admin::Replica => {
                mode.replication = true;
                Reply::ok()
            }
            Admin::ClusterMap => match args {
                [_] => bulk(self.view.map.to_toml()),
                [_, version, text] => match &self.saver {
                    Some(s) => {
                        let job = PushJob {
                            conn,
                            seq,
                            change: MapChange::Push {
                                version: version.clone(),
                                text: text.clone(),
                            },
                        };
                        return match s.tx.try_send(job) {
                            Ok(()) => AdminOutcome::Deferred,
                            Err(_) => AdminOutcome::Reply(Reply::error(
                                "ERR too many cluster map pushes in progress; try again",
                            )),
                        };
                    }
                    None => match self.shared.push(version, text) {
                        Ok(view) => {
                            self.view = view;
                            Reply::ok()
                        }
                        Err(e) => Reply::error(format!("ERR {e}")),
                    },
                },
                _ => wrong_args("ls.clustermap"),
            },
        };
        AdminOutcome::Reply(reply)
    }
}

#[cfg(test)]
mod tests;
