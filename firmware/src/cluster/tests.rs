//! Tests of the parent module.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use kvproto::cluster::even_ranges;

fn id(n: usize) -> String {
    format!("{:040x}", n + 1)
}

/// Three primaries with even ranges and one replica of the first.
fn map(version: u64) -> ClusterMap {
    let mut nodes: Vec<NodeSpec> = even_ranges(3)
        .into_iter()
        .enumerate()
        .map(|(i, (a, b))| NodeSpec {
            id: id(i),
            addr: format!("127.0.0.1:{}", 7001 + i).parse().unwrap(),
            slots: vec![[u32::from(a), u32::from(b)]],
            replica_of: None,
        })
        .collect();
    nodes.push(NodeSpec {
        id: id(3),
        addr: "127.0.0.1:7004".parse().unwrap(),
        slots: Vec::new(),
        replica_of: Some(id(0)),
    });
    ClusterMap::new(version, nodes).unwrap()
}

fn args(a: &[&str]) -> Vec<Bytes> {
    a.iter()
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect()
}

fn cmd(a: &[&str]) -> Command {
    Command::parse(&args(a)).unwrap()
}

fn err_text(r: Option<Reply>) -> String {
    match r {
        Some(Reply::Error(e)) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("not an error: {other:?}"),
    }
}

#[test]
fn command_slots_agree_with_command_keys() {
    let samples: &[&[&str]] = &[
        &["GET", "a"],
        &["SET", "{t}x", "v", "EX", "10"],
        &["MGET", "{t}a", "{t}b"],
        &["MGET", "a", "b"],
        &["MSET", "{t}a", "1", "{t}b", "2"],
        &["DEL", "a"],
        &["EXISTS", "a", "b", "c"],
        &["STRLEN", "k"],
        &["GETRANGE", "k", "0", "1"],
        &["INCR", "k"],
        &["HSET", "h", "f", "v"],
        &["HGET", "h", "f"],
        &["HMGET", "h", "f", "g"],
        &["HGETALL", "h"],
        &["HDEL", "h", "f"],
        &["HLEN", "h"],
        &["HEXISTS", "h", "f"],
        &["ZADD", "z", "1", "m"],
        &["ZREM", "z", "m"],
        &["ZSCORE", "z", "m"],
        &["ZCARD", "z"],
        &["ZRANGEBYSCORE", "z", "0", "1"],
        &["PING"],
        &["DBSIZE"],
        &["SCAN", "0"],
    ];
    for a in samples {
        let c = cmd(a);
        let keys = c.keys();
        let want = match keys.split_first() {
            None => None,
            Some((first, rest)) => {
                let s = key_slot(first);
                Some(rest.iter().all(|k| key_slot(k) == s).then_some(s))
            }
        };
        let got = match command_slot(&c) {
            Slot::None => None,
            Slot::One(s) => Some(Some(s)),
            Slot::Cross => Some(None),
        };
        assert_eq!(got, want, "{a:?}");
    }
    assert!(matches!(
        command_slot(&cmd(&["LS.RANGE", "a", "z"])),
        Slot::None
    ));
}

#[test]
fn primaries_serve_their_slots_and_redirect_the_rest() {
    let m = map(1);
    let v = View::new(m, &id(0)).unwrap();
    let plain = ConnMode::default();
    // "b" is slot 3300 (first node), "c" 7365 (second), "foo" 12182 (third).
    assert!(v.check(&cmd(&["GET", "b"]), false, plain).is_none());
    assert_eq!(
        err_text(v.check(&cmd(&["GET", "c"]), false, plain)),
        "MOVED 7365 127.0.0.1:7002"
    );
    assert_eq!(
        err_text(v.check(&cmd(&["SET", "foo", "1"]), true, plain)),
        "MOVED 12182 127.0.0.1:7003"
    );
    assert_eq!(
        err_text(v.check(&cmd(&["MGET", "b", "c"]), false, plain)),
        CROSSSLOT_ERROR
    );
    // Cross-slot is refused even when every key is foreign.
    assert_eq!(
        err_text(v.check(&cmd(&["DEL", "foo", "c"]), true, plain)),
        CROSSSLOT_ERROR
    );
    assert!(v
        .check(&cmd(&["MSET", "{b}1", "x", "{b}2", "y"]), true, plain)
        .is_none());
    assert!(v.check(&cmd(&["PING"]), false, plain).is_none());
    assert_eq!(v.role(3300), Role::Primary);
    assert_eq!(v.role(7365), Role::Foreign);
}

/// A slot in migration: the source serves the keys it has, asks for the rest and
/// refuses split multi-key requests; the target serves only after ASKING (or
/// RESTORE-ASKING); STABLE ends both.
#[test]
fn slots_in_migration_ask_and_try_again() {
    let dir = tempfile::tempdir().unwrap();
    let gate = |me: usize| {
        let path = dir.path().join(format!("map-{me}.toml"));
        std::fs::write(&path, map(1).to_toml()).unwrap();
        let local = format!("127.0.0.1:{}", 7001 + me).parse().unwrap();
        Gate::new(Arc::new(
            Cluster::load(&path, Some(&id(me)), local).unwrap(),
        ))
    };
    let (mut src, mut dst) = (gate(0), gate(1));
    let setslot = |g: &mut Gate, a: &[&str]| {
        let mut all = vec!["SETSLOT"];
        all.extend_from_slice(a);
        match g.cluster_command(&args(&all), 1, 0) {
            AdminOutcome::Reply(r) => r,
            AdminOutcome::Deferred => panic!("no saver thread here"),
        }
    };
    let nodes = |g: &mut Gate| match g.cluster_command(&args(&["NODES"]), 1, 0) {
        AdminOutcome::Reply(Reply::Verbatim(t)) => String::from_utf8(t.to_vec()).unwrap(),
        _ => panic!("CLUSTER NODES is text"),
    };
    assert_eq!(
        setslot(&mut src, &["3300", "MIGRATING", &id(1)]),
        Reply::ok()
    );
    assert_eq!(
        setslot(&mut dst, &["3300", "IMPORTING", &id(0)]),
        Reply::ok()
    );
    // CLUSTER NODES shows the open slots on the drive's own line, as Redis does.
    let line = |text: String, me: usize| {
        text.lines()
            .find(|l| l.starts_with(&id(me)))
            .unwrap()
            .to_owned()
    };
    assert!(line(nodes(&mut src), 0).ends_with(&format!(" [3300->-{}]", id(1))));
    assert!(line(nodes(&mut dst), 1).ends_with(&format!(" [3300-<-{}]", id(0))));
    assert!(!line(nodes(&mut src), 1).contains('['));
    let here = |k: &[u8]| k == b"{b}here";
    let plain = ConnMode::default();
    let asking = ConnMode {
        asking: true,
        ..ConnMode::default()
    };
    assert!(src
        .check(&cmd(&["GET", "{b}here"]), false, plain, here)
        .is_none());
    assert_eq!(
        err_text(src.check(&cmd(&["SET", "{b}gone", "1"]), true, plain, here)),
        "ASK 3300 127.0.0.1:7002"
    );
    assert_eq!(
        err_text(src.check(&cmd(&["MGET", "{b}here", "{b}gone"]), false, plain, here)),
        TRYAGAIN_ERROR
    );
    // Other slots are untouched.
    let other = cmd(&["GET", "a"]);
    assert_eq!(
        src.check(&other, false, plain, here),
        src.view.check(&other, false, plain)
    );
    assert_eq!(
        err_text(dst.check(&cmd(&["GET", "{b}gone"]), false, plain, here)),
        "MOVED 3300 127.0.0.1:7001"
    );
    assert!(dst
        .check(&cmd(&["GET", "{b}gone"]), false, asking, here)
        .is_none());
    let restore = cmd(&["RESTORE-ASKING", "{b}gone", "0", "payload"]);
    assert!(dst.check(&restore, true, plain, here).is_none());
    assert_eq!(
        err_text(dst.check(&cmd(&["MGET", "{b}here", "{b}gone"]), false, asking, here)),
        TRYAGAIN_ERROR
    );
    assert_eq!(setslot(&mut src, &["3300", "STABLE"]), Reply::ok());
    assert_eq!(setslot(&mut dst, &["3300", "STABLE"]), Reply::ok());
    assert!(src
        .check(&cmd(&["GET", "{b}gone"]), false, plain, here)
        .is_none());
    assert_eq!(
        err_text(dst.check(&cmd(&["GET", "{b}gone"]), false, asking, here)),
        "MOVED 3300 127.0.0.1:7001"
    );
    assert_eq!(
        err_text(Some(setslot(&mut src, &["3300", "BOGUS"]))),
        "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP"
    );
    assert_eq!(
        err_text(Some(setslot(&mut src, &["x", "STABLE"]))),
        "ERR Invalid or out of range slot"
    );

    // The end of a move as redis-cli --cluster reshard makes it: NODE to the target,
    // then to the source. Each drive's map gives the slot to the target (one version
    // newer, saved), and the slot's migration ends.
    assert_eq!(
        setslot(&mut src, &["3300", "MIGRATING", &id(1)]),
        Reply::ok()
    );
    assert_eq!(
        setslot(&mut dst, &["3300", "IMPORTING", &id(0)]),
        Reply::ok()
    );
    for g in [&mut dst, &mut src] {
        assert_eq!(setslot(g, &["3300", "NODE", &id(1)]), Reply::ok());
        assert_eq!(g.view.map().owner(3300).unwrap().id, id(1));
        assert_eq!(g.view.map().owner(3299).unwrap().id, id(0));
        assert_eq!(g.view.map().version(), 2);
        assert!(g.migrating.is_empty() && g.importing.is_empty());
        assert!(!nodes(g).contains('['));
    }
    let saved = |me: usize| {
        let text = std::fs::read_to_string(dir.path().join(format!("map-{me}.toml")));
        ClusterMap::from_toml(&text.unwrap()).unwrap()
    };
    assert_eq!(saved(0), *src.view.map());
    assert_eq!(saved(1), *dst.view.map());
    assert_eq!(
        err_text(src.check(&cmd(&["GET", "{b}gone"]), false, plain, here)),
        "MOVED 3300 127.0.0.1:7002"
    );
    assert!(dst
        .check(&cmd(&["GET", "{b}gone"]), false, plain, here)
        .is_none());
    // Again: nothing changes. To a replica or an unknown node: refused.
    assert_eq!(setslot(&mut src, &["3300", "NODE", &id(1)]), Reply::ok());
    assert_eq!(src.view.map().version(), 2);
    assert_eq!(
        err_text(Some(setslot(&mut src, &["3300", "NODE", &id(3)]))),
        "ERR Target node is not a master"
    );
    assert!(err_text(Some(setslot(&mut src, &["3300", "NODE", &id(9)])))
        .starts_with("ERR I don't know about node"));
}

#[test]
fn replicas_serve_readonly_reads_and_replication_clients() {
    let v = View::new(map(1), &id(3)).unwrap();
    let get = cmd(&["GET", "b"]);
    let set = cmd(&["SET", "b", "1"]);
    let plain = ConnMode::default();
    let readonly = ConnMode {
        readonly: true,
        ..ConnMode::default()
    };
    let replication = ConnMode {
        replication: true,
        ..ConnMode::default()
    };
    assert_eq!(
        err_text(v.check(&get, false, plain)),
        "MOVED 3300 127.0.0.1:7001"
    );
    assert!(v.check(&get, false, readonly).is_none());
    assert_eq!(
        err_text(v.check(&set, true, readonly)),
        "MOVED 3300 127.0.0.1:7001"
    );
    assert!(v.check(&set, true, replication).is_none());
    assert!(v.check(&get, false, replication).is_none());
    // Another shard's slot stays MOVED for a replication client, but for its deletes
    // (what a reshard clears of a slot the primary gave away).
    assert_eq!(
        err_text(v.check(&cmd(&["SET", "c", "1"]), true, replication)),
        "MOVED 7365 127.0.0.1:7002"
    );
    assert!(v
        .check(&cmd(&["DEL", "c", "{c}x"]), true, replication)
        .is_none());
    assert_eq!(
        err_text(v.check(&cmd(&["DEL", "c"]), true, plain)),
        "MOVED 7365 127.0.0.1:7002"
    );
    // Not while the slot is being imported here: those keys are arriving.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("map.toml");
    std::fs::write(&path, map(1).to_toml()).unwrap();
    let local = "127.0.0.1:7004".parse().unwrap();
    let mut gate = Gate::new(Arc::new(Cluster::load(&path, Some(&id(3)), local).unwrap()));
    assert!(matches!(
        gate.set_slot(&args(&["7365", "IMPORTING", &id(1)]), 0, 0),
        AdminOutcome::Reply(Reply::Simple(_))
    ));
    assert_eq!(
        err_text(gate.check(&cmd(&["DEL", "c"]), true, replication, |_| true)),
        "MOVED 7365 127.0.0.1:7002"
    );
}

#[test]
fn maps_without_this_node_or_with_holes_are_refused() {
    assert!(matches!(
        View::new(map(1), &id(9)),
        Err(ClusterError::UnknownNode(_))
    ));
    let holes = ClusterMap::new(
        1,
        vec![NodeSpec {
            id: id(0),
            addr: "127.0.0.1:7001".parse().unwrap(),
            slots: vec![[0, 100], [200, 16383]],
            replica_of: None,
        }],
    )
    .unwrap();
    let e = View::new(holes, &id(0)).unwrap_err();
    assert!(matches!(
        e,
        ClusterError::Unassigned {
            count: 99,
            first: 101
        }
    ));
}

#[test]
fn cluster_subcommands_answer_and_refuse_bad_arity() {
    let v = View::new(map(4), &id(0)).unwrap();
    let Reply::Verbatim(info) = v.cluster_command(&args(&["INFO"])) else {
        panic!()
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    assert!(info.contains("cluster_state:ok\r\n"));
    assert!(info.contains("cluster_known_nodes:4\r\n"));
    assert!(info.contains("cluster_size:3\r\n"));
    assert!(info.contains("cluster_current_epoch:4\r\n"));
    let Reply::Verbatim(nodes) = v.cluster_command(&args(&["nodes"])) else {
        panic!()
    };
    let nodes = String::from_utf8_lossy(&nodes).into_owned();
    let first = nodes.lines().next().unwrap();
    assert!(first.starts_with(&format!(
        "{} 127.0.0.1:7001@17001 myself,master - 0 ",
        id(0)
    )));
    assert!(first.ends_with(" 4 connected 0-5460"), "{first}");
    let last = nodes.lines().nth(3).unwrap();
    assert!(last.contains(&format!(" slave {} ", id(0))), "{last}");
    assert!(last.ends_with(" connected"), "{last}");
    let Reply::Array(slots) = v.cluster_command(&args(&["SLOTS"])) else {
        panic!()
    };
    assert_eq!(slots.len(), 3);
    let Reply::Array(first) = &slots[0] else {
        panic!()
    };
    assert_eq!(first.len(), 4, "primary and one replica");
    assert_eq!(
        v.cluster_command(&args(&["KEYSLOT", "foo"])),
        Reply::Integer(12182)
    );
    assert_eq!(
        v.cluster_command(&args(&["keyslot"])),
        Reply::error("ERR wrong number of arguments for 'cluster|keyslot' command")
    );
    assert_eq!(
        v.cluster_command(&args(&["bogus"])),
        Reply::error("ERR unknown subcommand 'bogus'. Try CLUSTER HELP.")
    );
    assert_eq!(
        v.cluster_command(&args(&["MYID"])),
        Reply::Bulk(Bytes::from(id(0)))
    );
}

#[test]
fn pushes_must_be_newer_valid_and_are_saved() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("map.toml");
    std::fs::write(&path, map(1).to_toml()).unwrap();
    let shared = Arc::new(Cluster::load(&path, None, "127.0.0.1:7002".parse().unwrap()).unwrap());
    let mut gate = Gate::new(shared.clone());
    assert_eq!(gate.view.my_id(), id(1));
    let mut mode = ConnMode::default();
    let push = |gate: &mut Gate, mode: &mut ConnMode, v: &str, text: &str| match gate.admin(
        Admin::ClusterMap,
        &args(&["LS.CLUSTERMAP", v, text]),
        mode,
        1,
        0,
    ) {
        AdminOutcome::Reply(r) => r,
        AdminOutcome::Deferred => panic!("no saver thread here"),
    };
    let same = map(1).to_toml();
    assert!(push(&mut gate, &mut mode, "1", &same).is_error());
    let two = map(2).to_toml();
    assert!(push(&mut gate, &mut mode, "3", &two).is_error());
    assert!(push(&mut gate, &mut mode, "x", &two).is_error());
    assert!(push(&mut gate, &mut mode, "2", "version = 2\n[[node]]\n").is_error());
    assert_eq!(shared.view().map().version(), 1);
    assert_eq!(push(&mut gate, &mut mode, "2", &two), Reply::ok());
    assert_eq!(shared.view().map().version(), 2);
    assert_eq!(gate.view.map().version(), 2);
    let saved = ClusterMap::from_toml(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved.version(), 2);
    assert_eq!(Admin::of(&args(&["ls.Replica"])), Some(Admin::Replica));
    assert!(matches!(
        gate.admin(Admin::Replica, &args(&["LS.REPLICA"]), &mut mode, 1, 0),
        AdminOutcome::Reply(r) if r == Reply::ok()
    ));
    assert!(mode.replication);
}
