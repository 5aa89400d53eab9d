//! Redis Cluster mode against real drives and real clients: CLUSTER subcommands in Redis 7's
//! formats, MOVED / CROSSSLOT / hash tags on a raw socket, replicas (READONLY, LS.REPLICA),
//! the redis-rs cluster client, `redis-cli -c`, `redis-benchmark --cluster`, pushing a newer
//! map (LS.CLUSTERMAP) with restart, bad input, and maps refused at start. Slots moving
//! between drives: `cluster_migration.rs`; the test cluster and raw connection both use:
//! `common/cluster.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::path::Path;
use std::process::Command;

use common::cluster::{bulk, err, field, map_text, node_id, ok, Raw, TestCluster, R};
use common::{have_tool, Drive};
use kvproto::cluster::{key_slot, ClusterMap};
use redis::Commands;

// "b" hashes to slot 3300 (first of three primaries), "c" to 7365 (second), "foo" to 12182
// (third): with three primaries the ranges are 0-5460, 5461-10921, 10922-16383.

#[test]
fn cluster_commands_redirection_and_replicas() {
    let c = TestCluster::start(3, 1, &[]);
    assert_eq!(key_slot(b"b"), 3300);
    assert_eq!(key_slot(b"c"), 7365);
    assert_eq!(key_slot(b"foo"), 12182);
    let mut n0 = c.raw(0);

    // CLUSTER INFO / MYID / KEYSLOT.
    let info = n0.call(&["CLUSTER", "INFO"]).text();
    assert_eq!(field(&info, "cluster_state"), "ok");
    assert_eq!(field(&info, "cluster_slots_assigned"), "16384");
    assert_eq!(field(&info, "cluster_known_nodes"), "4");
    assert_eq!(field(&info, "cluster_size"), "3");
    assert_eq!(field(&info, "cluster_current_epoch"), "2");
    assert_eq!(field(&info, "cluster_my_epoch"), "2");
    assert_eq!(n0.call(&["CLUSTER", "MYID"]), bulk(&node_id(0)));
    assert_eq!(c.raw(3).call(&["cluster", "myid"]), bulk(&node_id(3)));
    assert_eq!(n0.call(&["CLUSTER", "KEYSLOT", "foo"]), R::Int(12182));
    assert_eq!(
        n0.call(&["CLUSTER", "KEYSLOT", "{user1000}.following"]),
        R::Int(i64::from(key_slot(b"user1000")))
    );

    // CLUSTER SLOTS: [start, end, [ip, port, id, {}], replicas...], RESP2 then RESP3.
    let slots = n0.call(&["CLUSTER", "SLOTS"]);
    let slots = slots.items();
    assert_eq!(slots.len(), 3);
    let first = slots[0].items();
    assert_eq!(first[0], R::Int(0));
    assert_eq!(first[1], R::Int(5460));
    let port0 = i64::from(c.nodes[0].drive.addr.port());
    assert_eq!(
        first[2],
        R::Arr(vec![
            bulk("127.0.0.1"),
            R::Int(port0),
            bulk(&node_id(0)),
            R::Arr(vec![])
        ])
    );
    assert_eq!(
        first[3].items()[2],
        bulk(&node_id(3)),
        "the replica follows"
    );
    assert_eq!(slots[2].items()[..2], [R::Int(10922), R::Int(16383)]);
    let mut r3 = c.raw(0);
    assert!(matches!(r3.call(&["HELLO", "3"]), R::Map(_)));
    let slots3 = r3.call(&["CLUSTER", "SLOTS"]);
    assert_eq!(slots3.items()[0].items()[2].items()[3], R::Map(vec![]));

    // CLUSTER SHARDS (RESP2 flat maps).
    let shards = n0.call(&["CLUSTER", "SHARDS"]);
    assert_eq!(shards.items().len(), 3);
    let s0 = &shards.items()[0];
    assert_eq!(s0.get("slots"), R::Arr(vec![R::Int(0), R::Int(5460)]));
    let members = s0.get("nodes");
    assert_eq!(members.items().len(), 2);
    assert_eq!(members.items()[0].get("id"), bulk(&node_id(0)));
    assert_eq!(members.items()[0].get("role"), bulk("master"));
    assert_eq!(members.items()[0].get("port"), R::Int(port0));
    assert_eq!(members.items()[1].get("role"), bulk("replica"));
    assert_eq!(members.items()[1].get("health"), bulk("online"));

    // CLUSTER NODES: one line per node, this one flagged myself.
    let nodes = c.raw(1).call(&["CLUSTER", "NODES"]).text();
    let lines: Vec<&str> = nodes.lines().collect();
    assert_eq!(lines.len(), 4, "{nodes}");
    let port1 = c.nodes[1].drive.addr.port();
    assert!(
        lines[1].starts_with(&format!(
            "{} 127.0.0.1:{port1}@{} myself,master - 0 ",
            node_id(1),
            u32::from(port1) + 10_000
        )),
        "{nodes}"
    );
    assert!(lines[1].ends_with(" 2 connected 5461-10921"), "{nodes}");
    assert!(lines[0].contains(" master - ") && lines[0].ends_with(" connected 0-5460"));
    assert!(
        lines[3].contains(&format!(" slave {} ", node_id(0))),
        "{nodes}"
    );
    let replicas = n0.call(&["CLUSTER", "REPLICAS", &node_id(0)]);
    assert_eq!(replicas.items().len(), 1);
    assert!(replicas.items()[0].text().starts_with(&node_id(3)));

    // INFO, HELLO and CONFIG GET say cluster.
    let info = n0.call(&["INFO", "cluster"]).text();
    assert_eq!(field(&info, "cluster_enabled"), "1");
    assert_eq!(
        field(&n0.call(&["INFO", "server"]).text(), "redis_mode"),
        "cluster"
    );
    assert_eq!(r3.call(&["HELLO", "3"]).get("mode"), bulk("cluster"));
    assert_eq!(
        n0.call(&["CONFIG", "GET", "cluster-enabled"]),
        R::Arr(vec![bulk("cluster-enabled"), bulk("yes")])
    );

    // MOVED for foreign keys, with the owner's address.
    assert_eq!(
        n0.call(&["GET", "foo"]),
        err(&format!("MOVED 12182 {}", c.addr(2)))
    );
    assert_eq!(
        n0.call(&["SET", "c", "1"]),
        err(&format!("MOVED 7365 {}", c.addr(1)))
    );
    assert_eq!(n0.call(&["SET", "b", "here"]), ok());
    assert_eq!(n0.call(&["GET", "b"]), bulk("here"));
    // CROSSSLOT before anything runs: neither key is written.
    let cross = err("CROSSSLOT Keys in request don't hash to the same slot");
    assert_eq!(n0.call(&["MSET", "b", "x", "f", "y"]), cross);
    assert_eq!(n0.call(&["MSET", "b", "x", "foo", "y"]), cross);
    assert_eq!(n0.call(&["GET", "b"]), bulk("here"));
    assert_eq!(n0.call(&["MGET", "b", "foo"]), cross);
    assert_eq!(n0.call(&["DEL", "b", "c"]), cross);
    assert_eq!(n0.call(&["EXISTS", "b", "foo"]), cross);
    // Hash tags keep keys together.
    assert_eq!(key_slot(b"{b}one"), 3300);
    assert_eq!(n0.call(&["MSET", "{b}one", "1", "{b}two", "2"]), ok());
    assert_eq!(
        n0.call(&["MGET", "{b}one", "{b}two", "b"]),
        R::Arr(vec![bulk("1"), bulk("2"), bulk("here")])
    );
    assert_eq!(n0.call(&["DEL", "{b}one", "{b}two"]), R::Int(2));
    assert_eq!(
        n0.call(&["HSET", "{foo}h", "f", "v"]),
        err(&format!("MOVED 12182 {}", c.addr(2)))
    );
    // Keyless commands are served.
    assert_eq!(n0.call(&["PING"]), R::Simple("PONG".into()));
    assert_eq!(n0.call(&["DBSIZE"]), R::Int(1));
    assert_eq!(n0.call(&["SELECT", "0"]), ok());
    assert_eq!(
        n0.call(&["SELECT", "1"]),
        err("ERR SELECT is not allowed in cluster mode")
    );

    // The replica: MOVED unless READONLY (reads) or LS.REPLICA (reads and writes).
    let primary = c.addr(0);
    let mut rep = c.raw(3);
    assert_eq!(
        rep.call(&["GET", "b"]),
        err(&format!("MOVED 3300 {primary}"))
    );
    assert_eq!(rep.call(&["READONLY"]), ok());
    assert_eq!(rep.call(&["GET", "b"]), R::Nil);
    assert_eq!(
        rep.call(&["SET", "b", "x"]),
        err(&format!("MOVED 3300 {primary}"))
    );
    assert_eq!(
        rep.call(&["GET", "foo"]),
        err(&format!("MOVED 12182 {}", c.addr(2)))
    );
    assert_eq!(rep.call(&["READWRITE"]), ok());
    assert_eq!(
        rep.call(&["GET", "b"]),
        err(&format!("MOVED 3300 {primary}"))
    );
    let mut writer = c.raw(3);
    assert_eq!(writer.call(&["LS.REPLICA"]), ok());
    assert_eq!(writer.call(&["SET", "b", "replicated"]), ok());
    assert_eq!(writer.call(&["MSET", "{b}1", "1", "{b}2", "2"]), ok());
    assert_eq!(writer.call(&["GET", "b"]), bulk("replicated"));
    assert_eq!(
        writer.call(&["SET", "c", "x"]),
        err(&format!("MOVED 7365 {}", c.addr(1)))
    );
    assert_eq!(rep.call(&["READONLY"]), ok());
    assert_eq!(rep.call(&["GET", "b"]), bulk("replicated"));
    // A primary accepts LS.REPLICA too (a no-op there).
    assert_eq!(n0.call(&["ls.replica"]), ok());
    assert_eq!(n0.call(&["GET", "b"]), bulk("here"));
}

#[test]
fn unmodified_cluster_clients() {
    let c = TestCluster::start(3, 0, &[]);

    // redis-rs cluster client.
    let seeds = vec![format!("redis://{}/", c.addr(1))];
    let client = redis::cluster::ClusterClient::new(seeds).unwrap();
    let mut con = client.get_connection().unwrap();
    for i in 0..300 {
        let _: () = con.set(format!("rs:{i}"), format!("v{i}")).unwrap();
    }
    for i in (0..300).step_by(7) {
        let v: String = con.get(format!("rs:{i}")).unwrap();
        assert_eq!(v, format!("v{i}"));
    }
    let _: () = redis::cmd("MSET")
        .arg("{tag}a")
        .arg("1")
        .arg("{tag}b")
        .arg("2")
        .query(&mut con)
        .unwrap();
    let got: Vec<String> = con.mget(&["{tag}a", "{tag}b"]).unwrap();
    assert_eq!(got, vec!["1".to_string(), "2".to_string()]);
    // Every primary holds its share, and only keys of its own slots.
    let mut total = 0;
    for i in 0..3 {
        let mut raw = c.raw(i);
        let n = match raw.call(&["DBSIZE"]) {
            R::Int(n) => n,
            other => panic!("{other:?}"),
        };
        assert!(n > 50, "node {i} holds {n} keys");
        total += n;
    }
    assert_eq!(total, 302);

    if have_tool("redis-cli") {
        let cli = |args: &[&str]| {
            let out = Command::new("redis-cli")
                .args(["-c", "-h", "127.0.0.1", "-p"])
                .arg(c.nodes[0].drive.addr.port().to_string())
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        for k in ["b", "c", "foo", "cli:1", "cli:2", "cli:3"] {
            assert_eq!(cli(&["SET", k, &format!("val-{k}")]), "OK");
        }
        for k in ["b", "c", "foo", "cli:1", "cli:2", "cli:3"] {
            assert_eq!(cli(&["GET", k]), format!("val-{k}"));
        }
        // The values landed on the owners.
        assert_eq!(c.raw(2).call(&["GET", "foo"]), bulk("val-foo"));
        assert_eq!(c.raw(1).call(&["GET", "c"]), bulk("val-c"));
    }

    if have_tool("redis-benchmark") {
        let out = Command::new("redis-benchmark")
            .args(["--cluster", "-h", "127.0.0.1", "-p"])
            .arg(c.nodes[2].drive.addr.port().to_string())
            .args(["-t", "set,get", "-n", "2000", "-c", "20", "-q"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "redis-benchmark: {stdout}\n{stderr}");
        assert!(
            stdout.contains("SET:") && stdout.contains("GET:"),
            "{stdout}\n{stderr}"
        );
        assert!(stdout.contains("requests per second"), "{stdout}");
        eprintln!("redis-benchmark --cluster: {stdout}");
        assert!(
            !stderr.contains("Error") && !stderr.contains("MOVED"),
            "{stderr}"
        );
        let info = c.raw(0).call(&["INFO", "stats"]).text();
        let done: u64 = field(&info, "total_commands_processed").parse().unwrap();
        assert!(done > 500, "node 0 served {done} commands");
    }
}

#[test]
fn map_push_moves_slots_refuses_stale_maps_and_survives_restart() {
    let mut c = TestCluster::start(2, 0, &[]);
    let (a, b) = (c.addr(0), c.addr(1));
    // Version 2: node 0 has 0-8191 ("b", 3300), node 1 has 8192-16383 ("foo", 12182).
    let mut a0 = c.raw(0);
    assert_eq!(a0.call(&["SET", "b", "on-a"]), ok());
    assert_eq!(c.raw(1).call(&["SET", "foo", "on-b"]), ok());
    let rs = redis::cluster::ClusterClient::new(vec![format!("redis://{a}/")]).unwrap();
    let mut rs = rs.get_connection().unwrap();
    assert_eq!(rs.get::<_, String>("b").unwrap(), "on-a");

    // Version 3 swaps the halves.
    let mut swapped = c.specs.clone();
    swapped[0].slots = vec![[8192, 16383]];
    swapped[1].slots = vec![[0, 8191]];
    c.push(3, &swapped, &[]);
    assert_eq!(a0.call(&["GET", "b"]), err(&format!("MOVED 3300 {b}")));
    let mut b1 = c.raw(1);
    assert_eq!(b1.call(&["GET", "foo"]), err(&format!("MOVED 12182 {a}")));
    assert_eq!(b1.call(&["GET", "b"]), R::Nil, "data does not migrate");
    assert_eq!(b1.call(&["SET", "b", "on-b-now"]), ok());
    // An unmodified client follows MOVED and refreshes its slots.
    assert_eq!(rs.get::<_, String>("b").unwrap(), "on-b-now");
    let info = a0.call(&["CLUSTER", "INFO"]).text();
    assert_eq!(field(&info, "cluster_current_epoch"), "3");

    // Older, equal and inconsistent versions are refused; the map stays at 3.
    let v2 = map_text(2, &c.specs);
    assert_eq!(
        a0.call(&["LS.CLUSTERMAP", "2", &v2]),
        err("ERR cluster map version 2 is not newer than this drive's version 3")
    );
    let v3 = map_text(3, &c.specs);
    assert!(a0
        .call(&["LS.CLUSTERMAP", "3", &v3])
        .text()
        .contains("not newer"));
    assert_eq!(
        a0.call(&["LS.CLUSTERMAP", "4", &v3]),
        err("ERR LS.CLUSTERMAP says version 4 but the map text says version 3")
    );
    let current = a0.call(&["LS.CLUSTERMAP"]).text();
    assert_eq!(ClusterMap::from_toml(&current).unwrap().version(), 3);

    // Written back to the map file, atomically; a restart keeps it.
    let saved = std::fs::read_to_string(&c.nodes[0].map_path).unwrap();
    assert_eq!(ClusterMap::from_toml(&saved).unwrap().version(), 3);
    let leftovers: Vec<_> = std::fs::read_dir(c.nodes[0].map_path.parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    drop(a0);
    let node = c.nodes.remove(0);
    let port = node.drive.addr.port().to_string();
    assert!(node.drive.shutdown());
    let restarted = Drive::start(
        &node.data,
        &[
            "--port",
            &port,
            "--cluster-config",
            node.map_path.to_str().unwrap(),
        ],
    );
    // Found by its address this time (no --cluster-node-id).
    let mut a0 = Raw::connect(restarted.addr);
    assert_eq!(a0.call(&["CLUSTER", "MYID"]), bulk(&node_id(0)));
    let info = a0.call(&["CLUSTER", "INFO"]).text();
    assert_eq!(field(&info, "cluster_current_epoch"), "3");
    assert_eq!(a0.call(&["GET", "b"]), err(&format!("MOVED 3300 {b}")));
    assert_eq!(a0.call(&["GET", "foo"]), R::Nil);
    assert_eq!(a0.call(&["SET", "foo", "on-a-now"]), ok());
    assert_eq!(rs.get::<_, String>("foo").unwrap(), "on-a-now");
}

#[test]
fn bad_input_gets_errors_and_the_drive_keeps_serving() {
    let c = TestCluster::start(1, 0, &["--requirepass", "pw"]);
    let mut n = c.raw(0);
    let text = map_text(5, &c.specs);
    let noauth = err("NOAUTH Authentication required.");
    assert_eq!(n.call(&["LS.CLUSTERMAP", "5", &text]), noauth);
    assert_eq!(n.call(&["LS.REPLICA"]), noauth);
    assert_eq!(n.call(&["CLUSTER", "INFO"]), noauth);
    assert_eq!(n.call(&["AUTH", "pw"]), ok());

    let arity = |name: &str| {
        err(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ))
    };
    assert_eq!(n.call(&["CLUSTER"]), arity("cluster"));
    assert_eq!(n.call(&["CLUSTER", "KEYSLOT"]), arity("cluster|keyslot"));
    assert_eq!(
        n.call(&["CLUSTER", "KEYSLOT", "a", "b"]),
        arity("cluster|keyslot")
    );
    assert_eq!(n.call(&["CLUSTER", "INFO", "x"]), arity("cluster|info"));
    assert_eq!(n.call(&["CLUSTER", "slots", "x"]), arity("cluster|slots"));
    assert_eq!(
        n.call(&["CLUSTER", "Bogus"]),
        err("ERR unknown subcommand 'Bogus'. Try CLUSTER HELP.")
    );
    assert_eq!(
        n.call(&["CLUSTER", "ADDSLOTS", "1"]),
        err("ERR unknown subcommand 'ADDSLOTS'. Try CLUSTER HELP.")
    );
    assert_eq!(
        n.call(&["CLUSTER", "REPLICAS", "nope"]),
        err("ERR Unknown node nope")
    );
    assert!(!n.call(&["CLUSTER", "HELP"]).items().is_empty());
    assert_eq!(n.call(&["READONLY", "x"]), arity("readonly"));
    assert_eq!(n.call(&["LS.REPLICA", "x"]), arity("ls.replica"));
    assert_eq!(n.call(&["LS.CLUSTERMAP", "5"]), arity("ls.clustermap"));
    assert_eq!(
        n.call(&["LS.CLUSTERMAP", "five", &text]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        n.call(&["LS.CLUSTERMAP", "-5", &text]),
        err("ERR value is not an integer or out of range")
    );
    let garbage = n
        .call(&["LS.CLUSTERMAP", "5", "version = [[[ not toml"])
        .text();
    assert!(
        garbage.starts_with("ERR invalid cluster map: "),
        "{garbage}"
    );
    let overlap = format!(
        "version = 5\n[[node]]\nid = \"{}\"\naddr = \"127.0.0.1:9\"\nslots = [[0, 16383]]\n\
         [[node]]\nid = \"{}\"\naddr = \"127.0.0.1:10\"\nslots = [[100, 200]]\n",
        node_id(0),
        node_id(1)
    );
    assert_eq!(
        n.call(&["LS.CLUSTERMAP", "5", &overlap]).text(),
        format!(
            "ERR invalid cluster map: slot 100 is claimed by both {} and {}",
            node_id(0),
            node_id(1)
        )
    );
    let mut holes = c.specs.clone();
    holes[0].slots = vec![[0, 16000]];
    assert_eq!(
        n.call(&["LS.CLUSTERMAP", "5", &map_text(5, &holes)]).text(),
        "ERR the cluster map leaves 383 of the 16384 slots without a primary (the first is slot 16001); every slot must be assigned"
    );
    let mut stranger = c.specs.clone();
    stranger[0].id = node_id(7);
    assert_eq!(
        n.call(&["LS.CLUSTERMAP", "5", &map_text(5, &stranger)])
            .text(),
        format!("ERR node id \"{}\" is not in the cluster map", node_id(0))
    );
    n.send(&[b"LS.CLUSTERMAP", b"5", b"version = 5\n\xff\xfe"]);
    assert_eq!(n.read(), err("ERR the cluster map text is not UTF-8"));

    // Nothing changed, and the drive serves on.
    let info = n.call(&["CLUSTER", "INFO"]).text();
    assert_eq!(field(&info, "cluster_current_epoch"), "2");
    assert_eq!(n.call(&["PING"]), R::Simple("PONG".into()));
    assert_eq!(n.call(&["SET", "k", "v"]), ok());
    assert_eq!(n.call(&["GET", "k"]), bulk("v"));
    assert_eq!(n.call(&["LS.CLUSTERMAP", "5", &text]), ok());

    // Without --cluster-config: Redis's "cluster support disabled".
    let dir = tempfile::tempdir().unwrap();
    let plain = Drive::start(&dir.path().join("data"), &[]);
    let mut p = Raw::connect(plain.addr);
    let disabled = err("ERR This instance has cluster support disabled");
    assert_eq!(p.call(&["CLUSTER", "INFO"]), disabled);
    assert_eq!(p.call(&["CLUSTER", "SLOTS"]), disabled);
    assert_eq!(p.call(&["READONLY"]), disabled);
    assert_eq!(p.call(&["LS.REPLICA"]), disabled);
    assert_eq!(p.call(&["LS.CLUSTERMAP", "5", &text]), disabled);
    assert_eq!(
        field(&p.call(&["INFO", "cluster"]).text(), "cluster_enabled"),
        "0"
    );
    assert_eq!(p.call(&["SET", "foo", "1"]), ok());
    assert_eq!(p.call(&["GET", "foo"]), bulk("1"));
}

/// Runs the drive with `args` and expects it to refuse to start with `want` in its errors.
fn refused(data: &Path, args: &[&str], want: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .args([
            "--port",
            "0",
            "--capacity",
            common::TEST_CAPACITY,
            "--data-dir",
        ])
        .arg(data)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with {args:?}");
    assert!(
        stderr.contains(want),
        "{args:?}: wanted {want:?} in {stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("ready"),
        "{args:?}"
    );
}

#[test]
fn bad_maps_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let node = |i: usize, slots: &str| {
        format!(
            "[[node]]\nid = \"{}\"\naddr = \"127.0.0.1:{}\"\nslots = {slots}\n",
            node_id(i),
            7001 + i
        )
    };
    let overlap = write(
        "overlap.toml",
        &format!(
            "version = 1\n{}{}",
            node(0, "[[0, 9000]]"),
            node(1, "[[8000, 16383]]")
        ),
    );
    refused(
        &data,
        &[
            "--cluster-config",
            &overlap,
            "--cluster-node-id",
            &node_id(0),
        ],
        "slot 8000 is claimed by both",
    );
    let holes = write(
        "holes.toml",
        &format!(
            "version = 1\n{}{}",
            node(0, "[[0, 8000]]"),
            node(1, "[[9000, 16383]]")
        ),
    );
    refused(
        &data,
        &["--cluster-config", &holes, "--cluster-node-id", &node_id(0)],
        "leaves 999 of the 16384 slots without a primary (the first is slot 8001)",
    );
    let good = write(
        "good.toml",
        &format!(
            "version = 1\n{}{}",
            node(0, "[[0, 8191]]"),
            node(1, "[[8192, 16383]]")
        ),
    );
    refused(
        &data,
        &["--cluster-config", &good, "--cluster-node-id", &node_id(5)],
        "is not in the cluster map",
    );
    refused(
        &data,
        &["--cluster-config", &good],
        "no node of the cluster map has the address 127.0.0.1:",
    );
    refused(
        &data,
        &["--cluster-config", "/nonexistent/cluster.toml"],
        "cannot read the cluster map",
    );
    refused(
        &data,
        &["--cluster-node-id", &node_id(0)],
        "--cluster-node-id needs --cluster-config",
    );
    let cfg = write(
        "drive.toml",
        &format!(
            "cluster-config = \"{holes}\"\ncluster-node-id = \"{}\"\n",
            node_id(0)
        ),
    );
    refused(&data, &["--config", &cfg], "without a primary");
    assert!(!data.exists(), "a refused start touches no device");
}
