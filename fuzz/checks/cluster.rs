//! Property checks of the cluster-map parsers: `ClusterMap::from_toml` (the map file) and
//! `ClusterMap::from_push` (the arguments of `LS.CLUSTERMAP <version> <toml>`).
//!
//! This module owns the properties; it is shared, by `#[path]`, between the fuzz target
//! `fuzz/fuzz_targets/cluster_map.rs` and the seed replay in `kvproto/tests/fuzz_corpus.rs`.
//! A check panics when a property fails.

#![allow(dead_code, clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use kvproto::cluster::{ClusterMap, SLOT_COUNT};

/// The version in force a push is checked against.
const CURRENT_VERSION: u64 = 1;

/// Cluster-map properties for one fuzz input. The whole input is a map file's text; split
/// at its first newline it is also a push (`LS.CLUSTERMAP <first line> <rest>`). No panic;
/// a map that parses round-trips through `to_toml` to an equal map and answers every
/// query consistently; a push accepted has the version asked for, newer than the current
/// one, and is the map its text parses to.
pub fn check_cluster_map(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(map) = ClusterMap::from_toml(text) {
            check_map(&map);
        }
    }
    let (version, text) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    if let Ok(map) = ClusterMap::from_push(version, text, CURRENT_VERSION) {
        assert!(
            map.version() > CURRENT_VERSION,
            "a push not newer was accepted"
        );
        assert_eq!(
            std::str::from_utf8(version)
                .ok()
                .and_then(|v| v.parse().ok()),
            Some(map.version()),
            "accepted map's version is not the version argument"
        );
        let text = std::str::from_utf8(text).expect("an accepted push is UTF-8");
        assert_eq!(ClusterMap::from_toml(text).as_ref(), Ok(&map));
        check_map(&map);
    }
}

/// A valid map round-trips and its queries agree with one another.
fn check_map(map: &ClusterMap) {
    let text = map.to_toml();
    let back = ClusterMap::from_toml(&text);
    assert_eq!(
        back.as_ref(),
        Ok(map),
        "to_toml does not round-trip:\n{text}"
    );
    let mut owned = 0;
    for n in map.nodes() {
        assert_eq!(map.node(&n.id), Some(n));
        let primary = map.primary_of(n).expect("a node's primary is in the map");
        assert!(primary.replica_of.is_none(), "primary_of gave a replica");
        for r in map.replicas_of(&n.id) {
            assert_eq!(r.replica_of.as_deref(), Some(n.id.as_str()));
        }
        for (start, end) in map.slot_ranges(&n.id) {
            assert!(start <= end && end < SLOT_COUNT);
            for s in start..=end {
                assert_eq!(map.owner(s).map(|o| &o.id), Some(&n.id));
            }
            owned += usize::from(end - start) + 1;
        }
    }
    assert_eq!(
        owned,
        map.slots_assigned(),
        "slot ranges and owners disagree"
    );
    assert!(map.owner(SLOT_COUNT).is_none());
}
