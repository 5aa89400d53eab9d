//! Growing a cluster live: a primary joins with no slots and takes its even share of the
//! slots from the others while clients keep working, with Redis Cluster's migration protocol
//! on the drives (docs/CLUSTER.md).
//!
//! [`add_primary`] reads the map from the joining drive (which starts on a map that already
//! lists it, one version above the cluster's), pushes that map to every other drive, then,
//! source by source: marks the slots the source gives up IMPORTING on the new drive and
//! MIGRATING on the source (from then on a key of those slots that is not on the source is
//! asked of the new drive), walks the source's keys once (SCAN) and moves those of the slots
//! with the source's MIGRATE in batches (each batch leaves in one step, no write lost), then
//! pushes a map that gives the slots to the new drive, to it first, and ends the migration
//! states.
//!
//! Replication is client-side (the router writes a slot's primary and its replicas), so a
//! move carries the replicas along explicitly: the new drive's replicas (listed in its map)
//! are marked IMPORTING too; each MIGRATE copies its keys to them before the new drive gets
//! them (MIGRATE's `REPLICA` option, in the same stall of the source), and the router sends
//! a write that an `-ASK` sends to the new drive to its replicas too. Once the map gives
//! the slots away, the source's replicas lose what they kept of them (SCAN and DEL on a
//! replication connection, which a drive allows for slots it no longer serves).

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kvproto::client::{Client, ClientError, Credentials};
use kvproto::cluster::{key_slot, ClusterMap, SLOT_COUNT};
use kvproto::Reply;
use kvproto::TlsClient;
use thiserror::Error;

/// Keys SCAN asks for per call.
const SCAN_COUNT: &[u8] = b"1000";
/// Keys one MIGRATE moves.
const MIGRATE_BATCH: usize = 100;
/// Names [`key_in`] tries (a set of one slot needs ~16K on average).
const FENCE_TRIES: u32 = 1 << 20;
/// MIGRATE's timeout, milliseconds.
const MIGRATE_TIMEOUT_MS: &[u8] = b"10000";

/// Why a reshard stopped. It cannot be resumed: slots already handed over stay with the new
/// drive (and [`add_primary`] refuses a drive that holds slots). The slots in flight keep
/// their migration states and their keys where they are, so clients still find every key
/// (through `-ASK`). To end one, move its remaining keys with MIGRATE and give the slot with
/// `CLUSTER SETSLOT <slot> NODE <new id>` to every drive, as `redis-cli --cluster reshard`
/// does (`STABLE` alone would strand the keys already on the new drive). If the stop came
/// before a source's replicas were cleaned, they keep copies of that source's moved slots,
/// which no client reads (they count in DBSIZE).
#[derive(Debug, Error)]
pub enum ReshardError {
    /// A drive could not be reached or dropped the connection.
    #[error("{addr}: {source}")]
    Connection {
        /// The drive.
        addr: SocketAddr,
        /// What failed.
        #[source]
        source: ClientError,
    },
    /// A drive answered something the protocol does not expect.
    #[error("{addr}: {command} answered {reply}")]
    Unexpected {
        /// The drive.
        addr: SocketAddr,
        /// The command sent (its first words).
        command: String,
        /// What it answered.
        reply: String,
    },
    /// The map cannot be grown this way.
    #[error("{0}")]
    Refused(String),
}

/// What [`add_primary`] did.
#[derive(Debug, Default, Clone)]
pub struct ReshardReport {
    /// Slots the new drive took over.
    pub slots: usize,
    /// Keys moved.
    pub keys: u64,
    /// Keys the sources' replicas dropped once their slots were gone.
    pub replica_keys_dropped: u64,
    /// Version of the map in force at the end.
    pub version: u64,
    /// Wall time.
    pub took: Duration,
}

/// How the tool reaches the drives: their password and TLS settings, if any.
#[derive(Debug, Clone, Copy, Default)]
pub struct Access<'a> {
    /// Sent with AUTH on every connection (and passed on in MIGRATE).
    pub auth: Option<&'a Credentials>,
    /// TLS settings (drives serving `--tls-port`).
    pub tls: Option<&'a TlsClient>,
}

/// A connection to one drive whose unexpected replies become [`ReshardError`]s.
struct Drive {
    addr: SocketAddr,
    client: Client,
}

impl Drive {
    /// A connection (over TLS with `access.tls`), authenticated with `access.auth` when the
    /// drives need a password.
    async fn connect(addr: SocketAddr, access: Access<'_>) -> Result<Drive, ReshardError> {
        let mut client = Client::connect_with(addr, access.tls)
            .await
            .map_err(|source| ReshardError::Connection { addr, source })?;
        if let Some(creds) = access.auth {
            client
                .auth(creds)
                .await
                .map_err(|source| ReshardError::Connection { addr, source })?;
        }
        Ok(Drive { addr, client })
    }

    async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, ReshardError> {
        self.client
            .call(args)
            .await
            .map_err(|source| ReshardError::Connection {
                addr: self.addr,
                source,
            })
    }

    /// A call whose reply must be `+OK` (MIGRATE: or `+NOKEY`, its keys went meanwhile).
    async fn ok(&mut self, args: &[&[u8]]) -> Result<(), ReshardError> {
        match self.call(args).await? {
            Reply::Simple(s) if &s[..] == b"OK" || &s[..] == b"NOKEY" => Ok(()),
            other => Err(self.unexpected(args, &other)),
        }
    }

    fn unexpected(&self, args: &[&[u8]], reply: &Reply) -> ReshardError {
        ReshardError::Unexpected {
            addr: self.addr,
            // The first words only: never a MIGRATE's AUTH password.
            command: args
                .iter()
                .take(6)
                .map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            reply: format!("{reply:?}"),
        }
    }

    async fn map(&mut self) -> Result<ClusterMap, ReshardError> {
        let reply = self.call(&[b"LS.CLUSTERMAP"]).await?;
        let text = match &reply {
            Reply::Bulk(b) | Reply::Verbatim(b) | Reply::Simple(b) => {
                String::from_utf8_lossy(b).into_owned()
            }
            other => return Err(self.unexpected(&[b"LS.CLUSTERMAP"], other)),
        };
        ClusterMap::from_toml(&text)
            .map_err(|e| ReshardError::Refused(format!("{}: its map: {e}", self.addr)))
    }

    /// One SCAN step: the next cursor and the keys.
    async fn scan(&mut self, cursor: &Bytes) -> Result<(Bytes, Vec<Bytes>), ReshardError> {
        let reply = self.call(&[b"SCAN", cursor, b"COUNT", SCAN_COUNT]).await?;
        if let Reply::Array(parts) = &reply {
            if let (Some(Reply::Bulk(next)), Some(Reply::Array(keys))) =
                (parts.first(), parts.get(1))
            {
                let keys: Option<Vec<Bytes>> = keys
                    .iter()
                    .map(|k| match k {
                        Reply::Bulk(k) => Some(k.clone()),
                        _ => None,
                    })
                    .collect();
                if let Some(keys) = keys {
                    return Ok((next.clone(), keys));
                }
            }
        }
        Err(self.unexpected(&[b"SCAN"], &reply))
    }

    async fn push(&mut self, map: &ClusterMap) -> Result<(), ReshardError> {
        let version = map.version().to_string();
        let text = map.to_toml();
        self.ok(&[b"LS.CLUSTERMAP", version.as_bytes(), text.as_bytes()])
            .await
    }
}

/// The slots each primary gives up so that `joining` ends with an even share: the last ones
/// each source holds, in proportion to what it holds. (source index, slots).
fn plan(map: &ClusterMap, joining: usize) -> Vec<(usize, Vec<u16>)> {
    let primaries: Vec<usize> = map
        .nodes()
        .iter()
        .enumerate()
        .filter(|(i, n)| *i != joining && n.replica_of.is_none())
        .map(|(i, _)| i)
        .collect();
    let share = usize::from(SLOT_COUNT) / (primaries.len() + 1);
    let mut out = Vec::new();
    let mut given = 0;
    for (k, &i) in primaries.iter().enumerate() {
        let owned: Vec<u16> = map.nodes()[i]
            .slots
            .iter()
            .flat_map(|&[a, b]| a..=b)
            .filter_map(|s| u16::try_from(s).ok())
            .collect();
        let part = if k + 1 == primaries.len() {
            share.saturating_sub(given)
        } else {
            owned.len() * share / usize::from(SLOT_COUNT)
        }
        .min(owned.len());
        given += part;
        out.push((i, owned[owned.len() - part..].to_vec()));
    }
    out
}

/// Adds the drive at `joining` (started on a map that lists it as a primary with no slots,
/// one version above the cluster's) and moves its even share of the slots to it while
/// clients keep working; `progress` hears of each step.
///
/// # Errors
/// [`ReshardError`]: a drive unreachable or answering out of protocol, or a map this cannot
/// grow (the joining drive not in its own map, already holding slots, or a replica).
pub async fn add_primary(
    joining: SocketAddr,
    access: Access<'_>,
    mut progress: impl FnMut(&str),
) -> Result<ReshardReport, ReshardError> {
    let auth = access.auth;
    let started = Instant::now();
    let mut report = ReshardReport::default();
    let mut dst = Drive::connect(joining, access).await?;
    let map = dst.map().await?;
    let me = map
        .nodes()
        .iter()
        .position(|n| n.addr == joining)
        .ok_or_else(|| ReshardError::Refused(format!("{joining} is not in its own map")))?;
    if map.nodes()[me].replica_of.is_some() {
        return Err(ReshardError::Refused(format!(
            "{joining} is a replica in its map: add its primary"
        )));
    }
    if !map.nodes()[me].slots.is_empty() {
        return Err(ReshardError::Refused(format!(
            "{joining} already holds slots: it joined before"
        )));
    }
    let my_id = map.nodes()[me].id.clone();
    let my_replicas: Vec<SocketAddr> = map.replicas_of(&my_id).iter().map(|n| n.addr).collect();
    for n in map.nodes().iter().filter(|n| n.addr != joining) {
        let mut d = Drive::connect(n.addr, access).await?;
        if d.map().await?.version() < map.version() {
            d.push(&map).await?;
        }
    }
    progress(&format!("map version {} lists {joining}", map.version()));
    let mut current = map;
    let (host, port) = (joining.ip().to_string(), joining.port().to_string());
    let replica_hosts: Vec<(String, String)> = my_replicas
        .iter()
        .map(|a| (a.ip().to_string(), a.port().to_string()))
        .collect();
    for (source, slots) in plan(&current, me) {
        if slots.is_empty() {
            continue;
        }
        let source_spec = current.nodes()[source].clone();
        let source_replicas: Vec<SocketAddr> = current
            .replicas_of(&source_spec.id)
            .iter()
            .map(|n| n.addr)
            .collect();
        if source_replicas.len() > my_replicas.len() {
            progress(&format!(
                "{} has {} replica(s) and {joining} {}: its slots keep fewer copies",
                source_spec.addr,
                source_replicas.len(),
                my_replicas.len()
            ));
        }
        let mut src = Drive::connect(source_spec.addr, access).await?;
        let mut dst_replicas = Vec::with_capacity(my_replicas.len());
        for addr in &my_replicas {
            dst_replicas.push(Drive::connect(*addr, access).await?);
        }
        for s in &slots {
            let slot = s.to_string();
            let importing: [&[u8]; 5] = [
                b"CLUSTER",
                b"SETSLOT",
                slot.as_bytes(),
                b"IMPORTING",
                source_spec.id.as_bytes(),
            ];
            // The replicas first: they must take the asked writes once keys arrive.
            for r in &mut dst_replicas {
                r.ok(&importing).await?;
            }
            dst.ok(&importing).await?;
            src.ok(&[
                b"CLUSTER",
                b"SETSLOT",
                slot.as_bytes(),
                b"MIGRATING",
                my_id.as_bytes(),
            ])
            .await?;
        }
        let moving: HashSet<u16> = slots.iter().copied().collect();
        let mut cursor = Bytes::from_static(b"0");
        let mut moved = 0u64;
        loop {
            let (next, keys) = src.scan(&cursor).await?;
            // One MIGRATE per slot (its keys must share one, as in Redis Cluster).
            let mut by_slot: BTreeMap<u16, Vec<&Bytes>> = BTreeMap::new();
            for key in &keys {
                let slot = key_slot(key);
                if moving.contains(&slot) {
                    by_slot.entry(slot).or_default().push(key);
                }
            }
            for chunk in by_slot.values().flat_map(|ks| ks.chunks(MIGRATE_BATCH)) {
                let mut args: Vec<&[u8]> = vec![
                    b"MIGRATE",
                    host.as_bytes(),
                    port.as_bytes(),
                    b"",
                    b"0",
                    MIGRATE_TIMEOUT_MS,
                ];
                // The source authenticates to the new drive as the tool does.
                match auth {
                    Some(Credentials {
                        user: Some(u),
                        password,
                    }) => args.extend([&b"AUTH2"[..], u.as_bytes(), password.as_bytes()]),
                    Some(Credentials {
                        user: None,
                        password,
                    }) => args.extend([&b"AUTH"[..], password.as_bytes()]),
                    None => {}
                }
                for r in &replica_hosts {
                    args.extend([&b"REPLICA"[..], r.0.as_bytes(), r.1.as_bytes()]);
                }
                args.push(b"KEYS");
                args.extend(chunk.iter().map(|k| &k[..]));
                src.ok(&args).await?;
                moved += chunk.len() as u64;
            }
            if &next[..] == b"0" {
                break;
            }
            cursor = next;
        }
        // The slots now belong to the new drive. Its replicas hear first: from then on they
        // serve the slots as their primary's, so they take whatever it takes (while only
        // importing, a replica refuses a multi-key write whose keys it does not all hold,
        // which the new drive, once it owns the slots, accepts). Then the new drive, so a
        // router that learns the map from anyone finds it ready, then everyone else.
        let next = current
            .with_slots_moved(&slots, &current.nodes()[me].id)
            .map_err(|e| ReshardError::Refused(format!("the grown map: {e}")))?;
        for r in &mut dst_replicas {
            r.push(&next).await?;
        }
        dst.push(&next).await?;
        // The other primaries before any other replica: an old replica that refused a write
        // of the slots (MOVED) while its primary still took it through -ASK would make the
        // router retry a write already applied, and count it twice.
        let others: Vec<&kvproto::cluster::NodeSpec> = next
            .nodes()
            .iter()
            .filter(|n| n.addr != joining && !my_replicas.contains(&n.addr))
            .collect();
        let (primaries, replicas): (Vec<_>, Vec<_>) =
            others.into_iter().partition(|n| n.replica_of.is_none());
        for n in primaries.into_iter().chain(replicas) {
            Drive::connect(n.addr, access).await?.push(&next).await?;
        }
        for s in &slots {
            let slot = s.to_string();
            let stable: [&[u8]; 4] = [b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"STABLE"];
            src.ok(&stable).await?;
            dst.ok(&stable).await?;
            for r in &mut dst_replicas {
                r.ok(&stable).await?;
            }
        }
        // Every drive now refuses writes of these slots on the source's replicas, so what
        // they kept of them can be dropped for good.
        let mut dropped = 0;
        for addr in &source_replicas {
            dropped += drop_slots(*addr, access, &moving).await?;
        }
        progress(&format!(
            "{} slots and {moved} keys moved from {} (map version {}){}",
            slots.len(),
            source_spec.addr,
            next.version(),
            if source_replicas.is_empty() {
                String::new()
            } else {
                format!("; its replicas dropped {dropped} keys of them")
            }
        ));
        report.slots += slots.len();
        report.keys += moved;
        report.replica_keys_dropped += dropped;
        current = next;
    }
    report.version = current.version();
    report.took = started.elapsed();
    Ok(report)
}

/// The keys of `slots` on the drive at `addr` (a replica whose primary gave them away),
/// found with SCAN and deleted on a replication connection: how many it deleted.
async fn drop_slots(
    addr: SocketAddr,
    access: Access<'_>,
    slots: &HashSet<u16>,
) -> Result<u64, ReshardError> {
    let mut d = Drive::connect(addr, access).await?;
    d.ok(&[b"LS.REPLICA"]).await?;
    let mut dropped_by_fence = 0;
    // A fence first: one DEL through the drive's writer. A write the drive accepted with the
    // old map was queued to its writer before the push's reply left, so once this DEL is
    // answered every such write is applied and the SCAN below finds it.
    if let Some(fence) = key_in(slots) {
        match d.call(&[b"DEL", &fence]).await? {
            Reply::Integer(n) => dropped_by_fence = u64::try_from(n).unwrap_or(0),
            other => return Err(d.unexpected(&[b"DEL"], &other)),
        }
    }
    let mut cursor = Bytes::from_static(b"0");
    let mut dropped = dropped_by_fence;
    loop {
        let (next, keys) = d.scan(&cursor).await?;
        // One DEL per slot (a drive in cluster mode refuses one across slots).
        let mut by_slot: BTreeMap<u16, Vec<&[u8]>> = BTreeMap::new();
        for k in &keys {
            let slot = key_slot(k);
            if slots.contains(&slot) {
                by_slot.entry(slot).or_default().push(k);
            }
        }
        for chunk in by_slot.values().flat_map(|ks| ks.chunks(MIGRATE_BATCH)) {
            let mut args: Vec<&[u8]> = vec![b"DEL"];
            args.extend_from_slice(chunk);
            match d.call(&args).await? {
                Reply::Integer(n) => dropped += u64::try_from(n).unwrap_or(0),
                other => return Err(d.unexpected(&[b"DEL"], &other)),
            }
        }
        if &next[..] == b"0" {
            return Ok(dropped);
        }
        cursor = next;
    }
}

/// A key that hashes to one of `slots` (`{ls-fence-N}`, the first N that does), if any.
fn key_in(slots: &HashSet<u16>) -> Option<Bytes> {
    (0..FENCE_TRIES)
        .map(|n| Bytes::from(format!("{{ls-fence-{n}}}")))
        .find(|k| slots.contains(&key_slot(k)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kvproto::cluster::NodeSpec;

    fn node(i: usize, slots: Vec<[u32; 2]>) -> NodeSpec {
        NodeSpec {
            id: format!("{:040x}", i + 1),
            addr: format!("127.0.0.1:{}", 7001 + i).parse().unwrap(),
            slots,
            replica_of: None,
        }
    }

    #[test]
    fn the_plan_gives_the_newcomer_an_even_share_from_everyone() {
        let map = ClusterMap::new(
            3,
            vec![
                node(0, vec![[0, 8191]]),
                node(1, vec![[8192, 16383]]),
                node(2, vec![]),
            ],
        )
        .unwrap();
        let p = plan(&map, 2);
        let total: usize = p.iter().map(|(_, s)| s.len()).sum();
        assert_eq!(total, 16384 / 3);
        assert_eq!(p[0].1.last(), Some(&8191));
        assert_eq!(p[1].1.last(), Some(&16383));
        let one: HashSet<u16> = [p[1].1[0]].into_iter().collect();
        let fence = key_in(&one).unwrap();
        assert!(one.contains(&key_slot(&fence)));
        assert_eq!(key_in(&HashSet::new()), None);
        let grown = map.with_slots_moved(&p[0].1, &map.nodes()[2].id).unwrap();
        assert_eq!(
            grown.nodes()[0].slots,
            vec![[0, 8191 - p[0].1.len() as u32]]
        );
        assert_eq!(grown.version(), 4);
    }
}
