//! Growing a cluster live: a primary joins with no slots and takes its even share of the
//! slots from the others while clients keep working, with Redis Cluster's migration protocol
//! on the drives (README "Cluster mode").
//!
//! [`add_primary`] reads the map from the joining drive (which starts on a map that already
//! lists it, one version above the cluster's), pushes that map to every other drive, then,
//! source by source: marks the slots the source gives up IMPORTING on the new drive and
//! MIGRATING on the source (from then on a key of those slots that is not on the source is
//! asked of the new drive), walks the source's keys once (SCAN) and moves those of the slots
//! with the source's MIGRATE in batches (each batch leaves in one step, no write lost), then
//! pushes a map that gives the slots to the new drive, to it first, and ends the migration
//! states. A cluster with replicas is refused: the move copies keys to primaries only.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kvproto::client::{Client, ClientError, Credentials};
use kvproto::cluster::{key_slot, ClusterMap, SLOT_COUNT};
use kvproto::Reply;
use thiserror::Error;

/// Keys SCAN asks for per call.
const SCAN_COUNT: &[u8] = b"1000";
/// Keys one MIGRATE moves.
const MIGRATE_BATCH: usize = 100;
/// MIGRATE's timeout, milliseconds.
const MIGRATE_TIMEOUT_MS: &[u8] = b"10000";

/// Why a reshard stopped. Slots already handed over stay with the new drive; the migration
/// states of the slots in flight stay set (run it again, or `CLUSTER SETSLOT <slot> STABLE`).
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
    /// Version of the map in force at the end.
    pub version: u64,
    /// Wall time.
    pub took: Duration,
}

/// A connection to one drive whose unexpected replies become [`ReshardError`]s.
struct Drive {
    addr: SocketAddr,
    client: Client,
}

impl Drive {
    /// A connection, authenticated with `auth` when the drives need a password.
    async fn connect(addr: SocketAddr, auth: Option<&Credentials>) -> Result<Drive, ReshardError> {
        let mut client = Client::connect(addr)
            .await
            .map_err(|source| ReshardError::Connection { addr, source })?;
        if let Some(creds) = auth {
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
/// grow (replicas, the joining drive not in its own map or already holding slots).
pub async fn add_primary(
    joining: SocketAddr,
    auth: Option<&Credentials>,
    mut progress: impl FnMut(&str),
) -> Result<ReshardReport, ReshardError> {
    let started = Instant::now();
    let mut report = ReshardReport::default();
    let mut dst = Drive::connect(joining, auth).await?;
    let map = dst.map().await?;
    let me = map
        .nodes()
        .iter()
        .position(|n| n.addr == joining)
        .ok_or_else(|| ReshardError::Refused(format!("{joining} is not in its own map")))?;
    if map.nodes().iter().any(|n| n.replica_of.is_some()) {
        return Err(ReshardError::Refused(
            "the cluster has replicas: growing it live moves keys to primaries only".into(),
        ));
    }
    if !map.nodes()[me].slots.is_empty() {
        return Err(ReshardError::Refused(format!(
            "{joining} already holds slots: it joined before"
        )));
    }
    let my_id = map.nodes()[me].id.clone();
    for n in map.nodes().iter().filter(|n| n.addr != joining) {
        let mut d = Drive::connect(n.addr, auth).await?;
        if d.map().await?.version() < map.version() {
            d.push(&map).await?;
        }
    }
    progress(&format!("map version {} lists {joining}", map.version()));
    let mut current = map;
    let (host, port) = (joining.ip().to_string(), joining.port().to_string());
    for (source, slots) in plan(&current, me) {
        if slots.is_empty() {
            continue;
        }
        let source_spec = current.nodes()[source].clone();
        let mut src = Drive::connect(source_spec.addr, auth).await?;
        for s in &slots {
            let slot = s.to_string();
            dst.ok(&[
                b"CLUSTER",
                b"SETSLOT",
                slot.as_bytes(),
                b"IMPORTING",
                source_spec.id.as_bytes(),
            ])
            .await?;
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
            let reply = src.call(&[b"SCAN", &cursor, b"COUNT", SCAN_COUNT]).await?;
            let Reply::Array(parts) = &reply else {
                return Err(src.unexpected(&[b"SCAN"], &reply));
            };
            let (Some(Reply::Bulk(next)), Some(Reply::Array(keys))) = (parts.first(), parts.get(1))
            else {
                return Err(src.unexpected(&[b"SCAN"], &reply));
            };
            // One MIGRATE per slot (its keys must share one, as in Redis Cluster).
            let mut by_slot: std::collections::BTreeMap<u16, Vec<&Bytes>> =
                std::collections::BTreeMap::new();
            for k in keys {
                if let Reply::Bulk(key) = k {
                    let slot = key_slot(key);
                    if moving.contains(&slot) {
                        by_slot.entry(slot).or_default().push(key);
                    }
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
                args.push(b"KEYS");
                args.extend(chunk.iter().map(|k| &k[..]));
                src.ok(&args).await?;
                moved += chunk.len() as u64;
            }
            if &next[..] == b"0" {
                break;
            }
            cursor = next.clone();
        }
        // The slots now belong to the new drive: it hears first, then everyone else.
        let next = current
            .with_slots_moved(&slots, &current.nodes()[me].id)
            .map_err(|e| ReshardError::Refused(format!("the grown map: {e}")))?;
        dst.push(&next).await?;
        for n in next.nodes().iter().filter(|n| n.addr != joining) {
            Drive::connect(n.addr, auth).await?.push(&next).await?;
        }
        for s in &slots {
            let slot = s.to_string();
            src.ok(&[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"STABLE"])
                .await?;
            dst.ok(&[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"STABLE"])
                .await?;
        }
        progress(&format!(
            "{} slots and {moved} keys moved from {} (map version {})",
            slots.len(),
            source_spec.addr,
            next.version()
        ));
        report.slots += slots.len();
        report.keys += moved;
        current = next;
    }
    report.version = current.version();
    report.took = started.elapsed();
    Ok(report)
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
        let grown = map.with_slots_moved(&p[0].1, &map.nodes()[2].id).unwrap();
        assert_eq!(
            grown.nodes()[0].slots,
            vec![[0, 8191 - p[0].1.len() as u32]]
        );
        assert_eq!(grown.version(), 4);
    }
}
