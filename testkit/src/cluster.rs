//! Drives in cluster mode for a test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use kvproto::cluster::{even_ranges, ClusterMap, NodeSpec};

use crate::{lightstore_bin, resp_call_as, Drive};

/// Node id of the `i`th drive of a test cluster.
pub fn node_id(i: usize) -> String {
    format!("{:040x}", 0xad_0000 + i)
}

/// Whether this build of the drive has cluster mode (`--cluster-config`).
pub fn drive_has_cluster_mode() -> bool {
    let out = Command::new(lightstore_bin())
        .arg("--help")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("--cluster-config")
}

/// The node specs of a test cluster on `addrs`: `primaries` primaries splitting the slots
/// evenly, then `replicas` replicas of the first primary.
pub fn cluster_specs(primaries: usize, replicas: usize, addrs: &[SocketAddr]) -> Vec<NodeSpec> {
    let mut out: Vec<NodeSpec> = even_ranges(primaries)
        .into_iter()
        .enumerate()
        .map(|(i, (a, b))| NodeSpec {
            id: node_id(i),
            addr: addrs[i],
            slots: vec![[u32::from(a), u32::from(b)]],
            replica_of: None,
        })
        .collect();
    for r in 0..replicas {
        out.push(NodeSpec {
            id: node_id(primaries + r),
            addr: addrs[primaries + r],
            slots: Vec::new(),
            replica_of: Some(node_id(0)),
        });
    }
    out
}

/// Drives in cluster mode on free ports (see [`cluster_specs`]). The drives start on a map
/// with placeholder addresses (version 1), then get the map with their real addresses
/// (version 2), which is also written to `map_path` for routers.
pub struct Cluster {
    /// Holds every drive's data directory (`node-<i>`) and `router-map.toml`.
    pub dir: tempfile::TempDir,
    /// The drives, primaries first.
    pub drives: Vec<Drive>,
    /// The map in force (version 2).
    pub map: ClusterMap,
    /// The map's file, for routers.
    pub map_path: PathBuf,
    /// The drives' `requirepass`, if any.
    pub password: Option<String>,
}

impl Cluster {
    /// Starts `primaries` primaries and `replicas` replicas of the first.
    pub fn start(primaries: usize, replicas: usize) -> Cluster {
        Cluster::start_with(primaries, replicas, None)
    }

    /// [`Cluster::start`] with every drive requiring `password` (`--requirepass`).
    pub fn start_with(primaries: usize, replicas: usize, password: Option<&str>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let total = primaries + replicas;
        let placeholders: Vec<SocketAddr> = (0..total)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 1 + u16::try_from(i).unwrap())))
            .collect();
        let v1 = ClusterMap::new(1, cluster_specs(primaries, replicas, &placeholders))
            .unwrap()
            .to_toml();
        let drives: Vec<Drive> = (0..total)
            .map(|i| {
                let home = dir.path().join(format!("node-{i}"));
                std::fs::create_dir_all(&home).unwrap();
                let map = home.join("cluster.toml");
                std::fs::write(&map, &v1).unwrap();
                let id = node_id(i);
                let mut args = vec![
                    "--cluster-config",
                    map.to_str().unwrap(),
                    "--cluster-node-id",
                    &id,
                ];
                if let Some(pw) = password {
                    args.extend(["--requirepass", pw]);
                }
                Drive::start(&home.join("data"), &args)
            })
            .collect();
        let addrs: Vec<SocketAddr> = drives.iter().map(|d| d.addr).collect();
        let map = ClusterMap::new(2, cluster_specs(primaries, replicas, &addrs)).unwrap();
        let map_path = dir.path().join("router-map.toml");
        std::fs::write(&map_path, map.to_toml()).unwrap();
        let c = Cluster {
            dir,
            drives,
            map,
            map_path,
            password: password.map(str::to_string),
        };
        c.push(&c.map);
        c
    }

    /// Pushes `map` to every drive (`LS.CLUSTERMAP`).
    pub fn push(&self, map: &ClusterMap) {
        let text = map.to_toml();
        let version = map.version().to_string();
        for d in &self.drives {
            let r = resp_call_as(
                d.addr,
                self.password.as_deref(),
                &[b"LS.CLUSTERMAP", version.as_bytes(), text.as_bytes()],
            );
            assert_eq!(r, "+OK", "pushing map version {version} to {}", d.addr);
        }
    }
}
