//! A test cluster of real drives and a raw RESP connection that decodes RESP2 and RESP3
//! replies whole: what `tests/cluster.rs` and `tests/cluster_migration.rs` share.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use kvproto::cluster::{ClusterMap, NodeSpec};
pub use lightstore_testkit::{cluster_specs, node_id};

use super::Drive;

/// A reply, decoded from RESP2 or RESP3.
#[derive(Debug, Clone, PartialEq)]
pub enum R {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Arr(Vec<R>),
    Map(Vec<(R, R)>),
}

impl R {
    pub fn text(&self) -> String {
        match self {
            R::Simple(s) | R::Err(s) => s.clone(),
            R::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            R::Int(i) => i.to_string(),
            other => panic!("not text: {other:?}"),
        }
    }

    pub fn items(&self) -> &[R] {
        match self {
            R::Arr(v) => v,
            other => panic!("not an array: {other:?}"),
        }
    }

    /// A map's value (RESP3 map or RESP2 flat array of pairs).
    pub fn get(&self, key: &str) -> R {
        match self {
            R::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| k.text() == key)
                .map(|(_, v)| v.clone()),
            R::Arr(flat) => flat
                .chunks(2)
                .find(|p| p[0].text() == key)
                .map(|p| p[1].clone()),
            _ => None,
        }
        .unwrap_or_else(|| panic!("no {key} in {self:?}"))
    }
}

/// A raw RESP connection that reads exactly one reply per request.
pub struct Raw {
    pub r: BufReader<TcpStream>,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Raw {
            r: BufReader::new(s),
        }
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.r.get_mut().write_all(&out).unwrap();
    }

    pub fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        assert!(l.ends_with("\r\n"), "truncated reply line {l:?}");
        l.truncate(l.len() - 2);
        l
    }

    pub fn read(&mut self) -> R {
        let l = self.line();
        let (t, rest) = l.split_at(1);
        let n = || rest.parse::<i64>().unwrap();
        match t {
            "+" => R::Simple(rest.into()),
            "-" => R::Err(rest.into()),
            ":" => R::Int(n()),
            "_" => R::Nil,
            "$" | "=" if n() < 0 => R::Nil,
            "$" | "=" => {
                let mut b = vec![0u8; n() as usize + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(b.len() - 2);
                if t == "=" {
                    b.drain(..4); // "txt:"
                }
                R::Bulk(b)
            }
            "*" | "~" if n() < 0 => R::Nil,
            "*" | "~" => R::Arr((0..n()).map(|_| self.read()).collect()),
            "%" => R::Map((0..n()).map(|_| (self.read(), self.read())).collect()),
            other => panic!("unexpected reply type {other:?} in {l:?}"),
        }
    }

    pub fn call(&mut self, args: &[&str]) -> R {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a);
        self.read()
    }
}

/// One drive of a test cluster.
pub struct Node {
    pub drive: Drive,
    pub map_path: PathBuf,
    pub data: PathBuf,
}

/// A cluster of drives started with `--port 0`: they start on a map with placeholder
/// addresses (version 1), then the map with their real addresses (version 2) is pushed.
pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    /// The node specs of the current map.
    pub specs: Vec<NodeSpec>,
}

pub fn map_text(version: u64, specs: &[NodeSpec]) -> String {
    ClusterMap::new(version, specs.to_vec()).unwrap().to_toml()
}

impl TestCluster {
    pub fn start(primaries: usize, replicas_of_first: usize, extra: &[&str]) -> TestCluster {
        let dir = tempfile::tempdir().unwrap();
        let total = primaries + replicas_of_first;
        let placeholders: Vec<SocketAddr> = (0..total)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 1 + i as u16)))
            .collect();
        let v1 = map_text(
            1,
            &cluster_specs(primaries, replicas_of_first, &placeholders),
        );
        let nodes: Vec<Node> = (0..total)
            .map(|i| {
                let home = dir.path().join(format!("node-{i}"));
                std::fs::create_dir_all(&home).unwrap();
                let map_path = home.join("cluster.toml");
                std::fs::write(&map_path, &v1).unwrap();
                let data = home.join("data");
                let node_id = node_id(i);
                let mut args = vec![
                    "--cluster-config",
                    map_path.to_str().unwrap(),
                    "--cluster-node-id",
                    &node_id,
                ];
                args.extend_from_slice(extra);
                let drive = Drive::start(&data, &args);
                Node {
                    drive,
                    map_path,
                    data,
                }
            })
            .collect();
        let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.drive.addr).collect();
        let specs = cluster_specs(primaries, replicas_of_first, &addrs);
        let mut c = TestCluster { dir, nodes, specs };
        c.push(2, &c.specs.clone(), extra);
        c
    }

    pub fn raw(&self, i: usize) -> Raw {
        Raw::connect(self.nodes[i].drive.addr)
    }

    /// Pushes a map to every drive; `extra` tells whether they need AUTH.
    pub fn push(&mut self, version: u64, specs: &[NodeSpec], extra: &[&str]) {
        let text = map_text(version, specs);
        for i in 0..self.nodes.len() {
            let mut c = self.raw(i);
            if let Some(p) = extra.iter().position(|a| *a == "--requirepass") {
                assert_eq!(c.call(&["AUTH", extra[p + 1]]), R::Simple("OK".into()));
            }
            let r = c.call(&["LS.CLUSTERMAP", &version.to_string(), &text]);
            assert_eq!(r, R::Simple("OK".into()), "push to node {i}");
        }
        self.specs = specs.to_vec();
    }

    pub fn addr(&self, i: usize) -> String {
        self.nodes[i].drive.addr.to_string()
    }
}

pub fn ok() -> R {
    R::Simple("OK".into())
}

pub fn bulk(s: &str) -> R {
    R::Bulk(s.as_bytes().to_vec())
}

pub fn err(s: &str) -> R {
    R::Err(s.into())
}

pub fn field(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .to_string()
}

impl Raw {
    /// A request with binary arguments.
    pub fn call_bytes(&mut self, args: &[&[u8]]) -> R {
        self.send(args);
        self.read()
    }
}
