//! Redis Cluster hash slots and the cluster map shared by the drives and the adapters.
//!
//! This module owns the one implementation of the key -> slot function (CRC16/XMODEM of the
//! key, or of its `{hash tag}`, modulo 16384, exactly as Redis Cluster computes it) and the
//! cluster map: which node serves which slots, which nodes replicate which primary, and the
//! map's version. Drives load the map from a TOML file (`--cluster-config`) and accept newer
//! versions at run time; the adapters' router reads the same file, so clients and drives agree
//! on placement by construction.
//!
//! The TOML form:
//!
//! ```toml
//! version = 1
//!
//! [[node]]
//! id = "3f1c0000000000000000000000000000000000a1"   # 40 hex digits, like Redis node ids
//! addr = "127.0.0.1:7001"
//! slots = [[0, 8191]]                                # inclusive ranges
//!
//! [[node]]
//! id = "3f1c0000000000000000000000000000000000a2"
//! addr = "127.0.0.1:7002"
//! replica_of = "3f1c0000000000000000000000000000000000a1"
//! ```

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// Length of a node id (hex digits), as Redis prints them.
pub const NODE_ID_LEN: usize = 40;

/// The CRC16 Redis Cluster uses (CCITT polynomial 0x1021, XMODEM variant: init 0, no reflection).
const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The part of `key` that is hashed: the bytes between the first `{` and the next `}` when that
/// is non-empty, otherwise the whole key (Redis Cluster's hash-tag rule).
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The hash slot of `key` (0..16384), honouring hash tags.
pub fn key_slot(key: &[u8]) -> u16 {
    CRC16.checksum(hash_tag(key)) & (SLOT_COUNT - 1)
}

/// Why a cluster map was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MapError {
    /// The TOML text did not parse into a map.
    #[error("the cluster map is not valid TOML: {0}")]
    Syntax(String),
    /// A node id is not 40 hex digits, or appears twice.
    #[error("bad node id {0:?}: ids are 40 hex digits and unique")]
    BadNodeId(String),
    /// A slot range is reversed or reaches past slot 16383.
    #[error("node {id}: slot range {start}-{end} is not within 0-16383")]
    BadRange {
        /// The node.
        id: String,
        /// First slot given.
        start: u32,
        /// Last slot given.
        end: u32,
    },
    /// Two primaries claim the same slot.
    #[error("slot {slot} is claimed by both {first} and {second}")]
    SlotTwice {
        /// The slot.
        slot: u16,
        /// The first claimant.
        first: String,
        /// The second claimant.
        second: String,
    },
    /// Slots were given to a node that is not a primary of the map.
    #[error("node {0} is not a primary in the cluster map")]
    NotAPrimary(String),
    /// A replica names a primary that is not in the map, is itself a replica, or has slots.
    #[error("node {id}: replica_of {primary:?} is not a primary in the map, or the replica also has slots")]
    BadReplica {
        /// The replica.
        id: String,
        /// The primary it names.
        primary: String,
    },
}

/// Why a map pushed with `LS.CLUSTERMAP <version> <toml>` was refused (see
/// [`ClusterMap::from_push`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PushError {
    /// The version argument is not a decimal `u64`.
    #[error("value is not an integer or out of range")]
    BadVersion,
    /// The pushed map is not newer than the current one.
    #[error("cluster map version {given} is not newer than this drive's version {current}")]
    NotNewer {
        /// The version pushed.
        given: u64,
        /// The version in force.
        current: u64,
    },
    /// The map text is not UTF-8.
    #[error("the cluster map text is not UTF-8")]
    NotUtf8,
    /// The map text is not a valid map.
    #[error("invalid cluster map: {0}")]
    Map(#[from] MapError),
    /// The version argument and the version in the map text differ.
    #[error("LS.CLUSTERMAP says version {given} but the map text says version {text}")]
    VersionMismatch {
        /// The version argument.
        given: u64,
        /// The `version` in the text.
        text: u64,
    },
}

/// One node of the cluster map, as written in the TOML file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Node id: 40 hex digits.
    pub id: String,
    /// Address clients connect to.
    pub addr: SocketAddr,
    /// Inclusive slot ranges this node serves as primary (empty for replicas).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<[u32; 2]>,
    /// The primary this node replicates, if it is a replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_of: Option<String>,
}

/// The map as written in the TOML file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    version: u64,
    #[serde(default, rename = "node")]
    nodes: Vec<NodeSpec>,
}

/// A validated cluster map: nodes, slot owners and replicas, with a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMap {
    version: u64,
    nodes: Vec<NodeSpec>,
    /// Index into `nodes` of each slot's primary.
    owner: Vec<Option<u16>>,
    /// Indexes of each node's replicas (empty for replicas and for primaries without any).
    replicas: Vec<Vec<u16>>,
}

impl ClusterMap {
    /// Parses and validates a map from its TOML text.
    ///
    /// # Errors
    /// [`MapError`] for text that does not parse or a map that is inconsistent (bad ids or
    /// addresses, out-of-range or doubly-claimed slots, replicas of unknown primaries).
    pub fn from_toml(text: &str) -> Result<ClusterMap, MapError> {
        let file: MapFile = toml::from_str(text).map_err(|e| MapError::Syntax(e.to_string()))?;
        ClusterMap::new(file.version, file.nodes)
    }

    /// Parses the arguments of `LS.CLUSTERMAP <version> <toml>` against the version in
    /// force: the version argument (decimal, no sign), then the text, which must be a valid
    /// map of exactly that version, newer than `current`. Whether the map covers every slot
    /// and names the drive is the drive's check.
    ///
    /// # Errors
    /// [`PushError`], checked in that order: version argument, newer, UTF-8, map, version
    /// match.
    pub fn from_push(version: &[u8], text: &[u8], current: u64) -> Result<ClusterMap, PushError> {
        let given = std::str::from_utf8(version)
            .ok()
            .filter(|s| !s.starts_with('+'))
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(PushError::BadVersion)?;
        if given <= current {
            return Err(PushError::NotNewer { given, current });
        }
        let text = std::str::from_utf8(text).map_err(|_| PushError::NotUtf8)?;
        let map = ClusterMap::from_toml(text)?;
        if map.version() != given {
            return Err(PushError::VersionMismatch {
                given,
                text: map.version(),
            });
        }
        Ok(map)
    }

    /// Builds and validates a map from its parts.
    ///
    /// # Errors
    /// As [`ClusterMap::from_toml`], except syntax.
    pub fn new(version: u64, nodes: Vec<NodeSpec>) -> Result<ClusterMap, MapError> {
        let mut index: HashMap<&str, u16> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let valid = n.id.len() == NODE_ID_LEN && n.id.bytes().all(|b| b.is_ascii_hexdigit());
            let i = u16::try_from(i).map_err(|_| MapError::BadNodeId(n.id.clone()))?;
            if !valid || index.insert(n.id.as_str(), i).is_some() {
                return Err(MapError::BadNodeId(n.id.clone()));
            }
        }
        let mut owner = vec![None; usize::from(SLOT_COUNT)];
        let mut replicas = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            let i16 = u16::try_from(i).map_err(|_| MapError::BadNodeId(n.id.clone()))?;
            if let Some(p) = &n.replica_of {
                let bad = || MapError::BadReplica {
                    id: n.id.clone(),
                    primary: p.clone(),
                };
                let &pi = index.get(p.as_str()).ok_or_else(bad)?;
                if !n.slots.is_empty() || nodes[usize::from(pi)].replica_of.is_some() || pi == i16 {
                    return Err(bad());
                }
                replicas[usize::from(pi)].push(i16);
                continue;
            }
            for &[start, end] in &n.slots {
                if start > end || end >= u32::from(SLOT_COUNT) {
                    return Err(MapError::BadRange {
                        id: n.id.clone(),
                        start,
                        end,
                    });
                }
                for slot in start..=end {
                    let cell = &mut owner[slot as usize];
                    if let Some(prev) = *cell {
                        return Err(MapError::SlotTwice {
                            slot: slot as u16,
                            first: nodes[usize::from(prev)].id.clone(),
                            second: n.id.clone(),
                        });
                    }
                    *cell = Some(i16);
                }
            }
        }
        Ok(ClusterMap {
            version,
            nodes,
            owner,
            replicas,
        })
    }

    /// The map one version newer, with `slots` served by the primary `to` (each taken from
    /// whoever served it): `CLUSTER SETSLOT slot NODE id` on a drive, and the last step of a
    /// slot move.
    ///
    /// # Errors
    /// [`MapError::NotAPrimary`] when `to` is not a primary of this map.
    pub fn with_slots_moved(&self, slots: &[u16], to: &str) -> Result<ClusterMap, MapError> {
        let target = self
            .nodes
            .iter()
            .position(|n| n.id == to && n.replica_of.is_none())
            .ok_or_else(|| MapError::NotAPrimary(to.to_owned()))?;
        let moving: HashSet<u16> = slots.iter().copied().collect();
        let mut nodes = self.nodes.clone();
        for (i, n) in nodes.iter_mut().enumerate() {
            if n.replica_of.is_none() {
                let added = if i == target { slots } else { &[] };
                n.slots = slot_ranges(&n.slots, &moving, added);
            }
        }
        ClusterMap::new(self.version + 1, nodes)
    }

    /// The map's TOML text (parses back to an equal map).
    pub fn to_toml(&self) -> String {
        let file = MapFile {
            version: self.version,
            nodes: self.nodes.clone(),
        };
        // Serializing plain strings, integers and arrays cannot fail.
        toml::to_string(&file).unwrap_or_default()
    }

    /// The map's version; a drive only accepts a newer one.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// All nodes, in file order.
    pub fn nodes(&self) -> &[NodeSpec] {
        &self.nodes
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The primary serving `slot`, if any.
    pub fn owner(&self, slot: u16) -> Option<&NodeSpec> {
        let i = (*self.owner.get(usize::from(slot))?)?;
        self.nodes.get(usize::from(i))
    }

    /// The replicas of the primary with id `primary`, in file order.
    pub fn replicas_of(&self, primary: &str) -> Vec<&NodeSpec> {
        let Some(i) = self.nodes.iter().position(|n| n.id == primary) else {
            return Vec::new();
        };
        self.replicas[i]
            .iter()
            .filter_map(|&r| self.nodes.get(usize::from(r)))
            .collect()
    }

    /// The primary a node replicates, or the node itself when it is a primary.
    pub fn primary_of<'a>(&'a self, node: &'a NodeSpec) -> Option<&'a NodeSpec> {
        match &node.replica_of {
            Some(p) => self.node(p),
            None => Some(node),
        }
    }

    /// The slots `node_id` serves as primary, as maximal inclusive ranges in slot order.
    pub fn slot_ranges(&self, node_id: &str) -> Vec<(u16, u16)> {
        let Some(i) = self.nodes.iter().position(|n| n.id == node_id) else {
            return Vec::new();
        };
        let mut out: Vec<(u16, u16)> = Vec::new();
        for slot in 0..SLOT_COUNT {
            if self.owner[usize::from(slot)].map(usize::from) == Some(i) {
                match out.last_mut() {
                    Some(last) if last.1 + 1 == slot => last.1 = slot,
                    _ => out.push((slot, slot)),
                }
            }
        }
        out
    }

    /// How many slots have a primary (16384 means every key has a home).
    pub fn slots_assigned(&self) -> usize {
        self.owner.iter().filter(|o| o.is_some()).count()
    }
}

/// `owned` without the slots in `gone` and with `added`, as sorted inclusive ranges.
fn slot_ranges(owned: &[[u32; 2]], gone: &HashSet<u16>, added: &[u16]) -> Vec<[u32; 2]> {
    let mut all: Vec<u16> = owned
        .iter()
        .flat_map(|&[a, b]| a..=b)
        .filter_map(|s| u16::try_from(s).ok())
        .filter(|s| !gone.contains(s))
        .chain(added.iter().copied())
        .collect();
    all.sort_unstable();
    all.dedup();
    let mut out: Vec<[u32; 2]> = Vec::new();
    for s in all.into_iter().map(u32::from) {
        match out.last_mut() {
            Some(last) if last[1] + 1 == s => last[1] = s,
            _ => out.push([s, s]),
        }
    }
    out
}

/// Splits the 16384 slots evenly into `n` inclusive ranges, in order (`n` clamped to 1..=16384).
pub fn even_ranges(n: usize) -> Vec<(u16, u16)> {
    let n = n.clamp(1, usize::from(SLOT_COUNT));
    let total = usize::from(SLOT_COUNT);
    (0..n)
        .map(|i| {
            let start = i * total / n;
            let end = (i + 1) * total / n - 1;
            // Both are below 16384.
            (start as u16, end as u16)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_slots_change_owner_and_ranges_stay_sorted_and_merged() {
        let id = |n: u8| format!("{n:040x}");
        let node = |n: u8, slots: Vec<[u32; 2]>, replica_of: Option<String>| NodeSpec {
            id: id(n),
            addr: format!("127.0.0.1:{}", 7000 + u16::from(n))
                .parse()
                .unwrap(),
            slots,
            replica_of,
        };
        let map = ClusterMap::new(
            7,
            vec![
                node(1, vec![[0, 8191]], None),
                node(2, vec![[8192, 16383]], None),
                node(3, vec![], Some(id(1))),
            ],
        )
        .unwrap();
        let next = map
            .with_slots_moved(&[0, 1, 2, 10, 8190, 8191], &id(2))
            .unwrap();
        assert_eq!(next.version(), 8);
        assert_eq!(next.nodes()[0].slots, vec![[3, 9], [11, 8189]]);
        assert_eq!(next.nodes()[1].slots, vec![[0, 2], [10, 10], [8190, 16383]]);
        assert_eq!(next.owner(10).map(|n| n.id.clone()), Some(id(2)));
        assert_eq!(next.slots_assigned(), 16384);
        // Back again: the original ranges, two versions on.
        let back = next
            .with_slots_moved(&[0, 1, 2, 10, 8190, 8191], &id(1))
            .unwrap();
        assert_eq!(back.nodes()[0].slots, vec![[0, 8191]]);
        assert_eq!(back.version(), 9);
        // Only a primary of the map can take slots.
        assert_eq!(
            map.with_slots_moved(&[5], &id(3)),
            Err(MapError::NotAPrimary(id(3)))
        );
        assert_eq!(
            map.with_slots_moved(&[5], &id(9)),
            Err(MapError::NotAPrimary(id(9)))
        );
    }

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT` on redis-server 7.
        assert_eq!(key_slot(b"123456789"), 0x31C3 & 0x3FFF);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"{user1000}.followers"),
            key_slot(b"{user1000}.following")
        );
        // Empty tag: the whole key is hashed.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        // Only the first { and the next } count.
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"{"), b"{");
    }

    fn id(n: u8) -> String {
        format!("{:040x}", n)
    }

    fn two_nodes() -> String {
        format!(
            "version = 7\n\
             [[node]]\nid = \"{a}\"\naddr = \"127.0.0.1:7001\"\nslots = [[0, 8191]]\n\
             [[node]]\nid = \"{b}\"\naddr = \"127.0.0.1:7002\"\nslots = [[8192, 16000], [16001, 16383]]\n\
             [[node]]\nid = \"{c}\"\naddr = \"127.0.0.1:7003\"\nreplica_of = \"{a}\"\n",
            a = id(1),
            b = id(2),
            c = id(3)
        )
    }

    #[test]
    fn parses_and_answers() -> Result<(), MapError> {
        let map = ClusterMap::from_toml(&two_nodes())?;
        assert_eq!(map.version(), 7);
        assert_eq!(map.slots_assigned(), 16384);
        assert_eq!(map.owner(0).map(|n| n.id.clone()), Some(id(1)));
        assert_eq!(map.owner(16383).map(|n| n.id.clone()), Some(id(2)));
        assert_eq!(map.slot_ranges(&id(2)), vec![(8192, 16383)]);
        let reps: Vec<_> = map
            .replicas_of(&id(1))
            .iter()
            .map(|n| n.id.clone())
            .collect();
        assert_eq!(reps, vec![id(3)]);
        let replica = map.node(&id(3)).cloned();
        let primary = replica
            .as_ref()
            .and_then(|r| map.primary_of(r))
            .map(|n| n.id.clone());
        assert_eq!(primary, Some(id(1)));
        assert_eq!(ClusterMap::from_toml(&map.to_toml())?, map);
        Ok(())
    }

    #[test]
    fn refuses_inconsistent_maps() {
        let dup = two_nodes().replace("[[8192, 16000]", "[[8191, 16000]");
        assert!(matches!(
            ClusterMap::from_toml(&dup),
            Err(MapError::SlotTwice { slot: 8191, .. })
        ));
        let far = two_nodes().replace("16383]]", "16384]]");
        assert!(matches!(
            ClusterMap::from_toml(&far),
            Err(MapError::BadRange { .. })
        ));
        let bad_id = two_nodes().replace(&id(2), "xyz");
        assert!(matches!(
            ClusterMap::from_toml(&bad_id),
            Err(MapError::BadNodeId(_))
        ));
        let orphan = two_nodes().replace(
            &format!("replica_of = \"{}\"", id(1)),
            &format!("replica_of = \"{}\"", id(9)),
        );
        assert!(matches!(
            ClusterMap::from_toml(&orphan),
            Err(MapError::BadReplica { .. })
        ));
        assert!(matches!(
            ClusterMap::from_toml("version = "),
            Err(MapError::Syntax(_))
        ));
        let addr = two_nodes().replace("127.0.0.1:7002", "localhost");
        assert!(matches!(
            ClusterMap::from_toml(&addr),
            Err(MapError::Syntax(_))
        ));
    }

    #[test]
    fn even_split_covers_all_slots() {
        for n in [1, 2, 3, 4, 7] {
            let r = even_ranges(n);
            assert_eq!(r.len(), n);
            assert_eq!(r[0].0, 0);
            assert_eq!(r[n - 1].1, 16383);
            for w in r.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
        }
    }
}
