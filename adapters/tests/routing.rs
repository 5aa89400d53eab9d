//! The router against real drives: one drive without cluster mode; a cluster of two
//! primaries and a replica (placement by slot checked on each drive, replication, range
//! merge, fail-over of reads when the primary is killed, writes refused while it is down);
//! `-MOVED` with a stale map file (reloaded) and without one (a clear error); and the block
//! adapter on the cluster, read back after its primary is killed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use adapters::routing::{RouteError, Router, RouterConfig};
use bytes::Bytes;
use common::{drive_has_cluster_mode, resp_call, Cluster, Drive};
use kvproto::cluster::{key_slot, ClusterMap, NodeSpec};

fn cfg() -> RouterConfig {
    RouterConfig {
        timeout: Duration::from_secs(10),
        ..RouterConfig::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn kv(i: usize) -> (Bytes, Bytes) {
    (
        Bytes::from(format!("key:{i:05}")),
        Bytes::from(format!("value {i} {}", "x".repeat(i % 50))),
    )
}

#[test]
fn router_on_one_drive() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let router = Router::single(drive.addr, cfg()).unwrap();
    rt().block_on(async {
        let pairs: Vec<(Bytes, Bytes)> = (0..300).map(kv).collect();
        router.mset(&pairs).await.unwrap();
        let keys: Vec<Bytes> = pairs.iter().map(|p| p.0.clone()).collect();
        let got = router.mget(&keys).await.unwrap();
        for (g, (_, v)) in got.iter().zip(&pairs) {
            assert_eq!(g.as_ref(), Some(v));
        }
        assert_eq!(router.get(b"nope").await.unwrap(), None);
        router
            .set(Bytes::from("k"), Bytes::from("v"))
            .await
            .unwrap();
        assert_eq!(router.get(b"k").await.unwrap(), Some(Bytes::from("v")));
        assert_eq!(router.exists(&keys[..10]).await.unwrap(), 10);
        // Per-key existence, and SET NX.
        let probe = [keys[0].clone(), Bytes::from("nope"), keys[5].clone()];
        assert_eq!(
            router.exists_each(&probe).await.unwrap(),
            [true, false, true]
        );
        assert!(!router
            .set_nx(Bytes::from("k"), Bytes::from("w"))
            .await
            .unwrap());
        assert_eq!(router.get(b"k").await.unwrap(), Some(Bytes::from("v")));
        assert!(router
            .set_nx(Bytes::from("fresh"), Bytes::from("w"))
            .await
            .unwrap());
        assert_eq!(router.get(b"fresh").await.unwrap(), Some(Bytes::from("w")));
        // Keys by glob, on every drive.
        let found = router.scan_keys(b"key:0001*").await.unwrap();
        assert_eq!(found.len(), 10);
        assert_eq!(found[0], keys[10]);
        // Ordered range reads, with continuation.
        let page = router.range(b"key:00100", b"key:00200", 30).await.unwrap();
        assert_eq!(page.len(), 30);
        assert_eq!(page[0], pairs[100]);
        assert_eq!(page[29], pairs[129]);
        let mut next = page[29].0.to_vec();
        next.push(0);
        let page = router.range(&next, b"key:00200", 10_000).await.unwrap();
        assert_eq!(page.len(), 70);
        assert_eq!(page.last().unwrap(), &pairs[199]);
        assert!(router.range(b"key:1", b"", 10).await.unwrap().is_empty());
        // Mixed writes; DEL counts what existed.
        let n = router
            .write(&[kv(1000)], &[keys[0].clone(), Bytes::from("missing")])
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(router.get(&keys[0]).await.unwrap(), None);
        assert_eq!(router.del(&keys[1..3]).await.unwrap(), 2);
        // A drive error is reported as such.
        let err = router
            .range(b"a", b"b", 0)
            .await
            .expect_err("count 0 is refused");
        assert!(matches!(err, RouteError::Invalid(_)), "{err}");
    });
}

/// A drive with a password: the router sends AUTH on every connection it opens; without
/// the password (or with a wrong one) every call fails with the drive's error, named.
#[test]
fn router_authenticates_to_a_drive_with_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &["--requirepass", "s3cret pw"]);
    let with = |password: Option<&str>| RouterConfig {
        auth: password.map(|p| kvproto::Credentials {
            user: None,
            password: p.into(),
        }),
        ..cfg()
    };
    rt().block_on(async {
        let router = Router::single(drive.addr, with(Some("s3cret pw"))).unwrap();
        let pairs: Vec<(Bytes, Bytes)> = (0..50).map(kv).collect();
        router.mset(&pairs).await.unwrap();
        assert_eq!(
            router.get(&pairs[7].0).await.unwrap(),
            Some(pairs[7].1.clone())
        );

        for wrong in [None, Some("wrong")] {
            let router = Router::single(drive.addr, with(wrong)).unwrap();
            let err = router.get(&pairs[7].0).await.expect_err("refused");
            let text = err.to_string();
            assert!(
                text.contains("NOAUTH") || text.contains("WRONGPASS") || text.contains("AUTH"),
                "{wrong:?}: {text}"
            );
        }
    });
    // The password is never shown.
    let creds = kvproto::Credentials {
        user: Some("app".into()),
        password: "s3cret pw".into(),
    };
    assert!(!format!("{creds:?}").contains("s3cret"));
}

/// A drive with ACL users: the router authenticates as a named user (`AUTH user pass`); a
/// read-only user's writes come back as the drive's NOPERM error.
#[test]
fn router_authenticates_as_an_acl_user() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("users.acl");
    std::fs::write(
        &acl,
        "user default off\nuser app on >app-pw ~* &* +@all\nuser ro on >ro-pw ~* &* +@all -@write\n",
    )
    .unwrap();
    let drive = Drive::start(
        &dir.path().join("data"),
        &["--aclfile", acl.to_str().unwrap()],
    );
    let with = |user: &str, password: &str| RouterConfig {
        auth: Some(kvproto::Credentials {
            user: Some(user.into()),
            password: password.into(),
        }),
        ..cfg()
    };
    rt().block_on(async {
        let app = Router::single(drive.addr, with("app", "app-pw")).unwrap();
        let pairs: Vec<(Bytes, Bytes)> = (0..10).map(kv).collect();
        app.mset(&pairs).await.unwrap();
        let ro = Router::single(drive.addr, with("ro", "ro-pw")).unwrap();
        assert_eq!(ro.get(&pairs[3].0).await.unwrap(), Some(pairs[3].1.clone()));
        let err = ro.mset(&pairs).await.expect_err("read-only");
        assert!(err.to_string().contains("NOPERM"), "{err}");
        let wrong = Router::single(drive.addr, with("app", "nope")).unwrap();
        let err = wrong.get(&pairs[3].0).await.expect_err("refused");
        assert!(err.to_string().contains("WRONGPASS"), "{err}");
    });
}

/// Keys owned by primary `p` of `map` among the first `n` test keys.
fn owned_by(map: &ClusterMap, p: usize, n: usize) -> Vec<(Bytes, Bytes)> {
    (0..n)
        .map(kv)
        .filter(|(k, _)| map.owner(key_slot(k)).unwrap().id == map.nodes()[p].id)
        .collect()
}

#[test]
fn router_on_a_cluster_replicates_and_fails_over() {
    if !drive_has_cluster_mode() {
        common::record_skip(
            "tool",
            "router_on_a_cluster_replicates_and_fails_over",
            "this build of lightstore has no --cluster-config",
        );
        return;
    }
    // Two primaries, one replica of the first.
    let mut cluster = Cluster::start(2, 1);
    let router = Router::from_file(&cluster.map_path, cfg()).unwrap();
    let map = cluster.map.clone();
    let rt = rt();
    let pairs: Vec<(Bytes, Bytes)> = (0..400).map(kv).collect();
    let keys: Vec<Bytes> = pairs.iter().map(|p| p.0.clone()).collect();
    rt.block_on(router.mset(&pairs)).unwrap();

    // Each key is on its primary (and, for the first, on the replica), and nowhere else.
    for (p, drive) in [(0usize, 0usize), (1, 1), (0, 2)] {
        let mine = owned_by(&map, p, 400);
        assert!(mine.len() > 100, "{} keys on primary {p}", mine.len());
        let got = rt.block_on(async {
            let mut c = kvproto::Client::connect(cluster.drives[drive].addr)
                .await
                .unwrap();
            if drive == 2 {
                c.call(&["LS.REPLICA"]).await.unwrap();
            }
            let mut out = Vec::new();
            for (k, _) in &mine {
                out.push(c.call(&[&b"GET"[..], k]).await.unwrap());
            }
            out
        });
        for ((k, v), r) in mine.iter().zip(got) {
            assert_eq!(r, kvproto::Reply::Bulk(v.clone()), "{k:?} on drive {drive}");
        }
    }
    let other = owned_by(&map, 1, 400);
    let r = resp_call(cluster.drives[0].addr, &[b"GET", &other[0].0]);
    assert!(r.starts_with("-MOVED"), "{r}");

    // A range over both primaries comes back merged, in order, complete.
    let all = rt.block_on(async {
        let mut out = Vec::new();
        let mut from = b"key:".to_vec();
        loop {
            let page = router.range(&from, b"key:~", 64).await.unwrap();
            let Some(last) = page.last() else { break };
            from = last.0.to_vec();
            from.push(0);
            out.extend(page);
        }
        out
    });
    assert_eq!(all, pairs);

    // Kill the first primary: reads of its keys come from the replica, unchanged.
    cluster.drives[0].kill();
    let got = rt.block_on(router.mget(&keys)).unwrap();
    for (g, (_, v)) in got.iter().zip(&pairs) {
        assert_eq!(g.as_ref(), Some(v));
    }
    let first_key = owned_by(&map, 0, 400)[0].clone();
    assert_eq!(
        rt.block_on(router.get(&first_key.0)).unwrap(),
        Some(first_key.1.clone())
    );
    // Writes to its slots are refused (not every copy can acknowledge); the others go on.
    let err = rt
        .block_on(router.set(first_key.0.clone(), Bytes::from("new")))
        .unwrap_err();
    assert!(
        matches!(err, RouteError::WriteFailed { replica: false, .. }),
        "{err}"
    );
    let second = owned_by(&map, 1, 400)[0].clone();
    rt.block_on(router.set(second.0.clone(), Bytes::from("new")))
        .unwrap();
    assert_eq!(
        rt.block_on(router.get(&second.0)).unwrap(),
        Some(Bytes::from("new"))
    );
    // Kill the replica too: a clear error naming the primary, never wrong data.
    cluster.drives[2].kill();
    let err = rt.block_on(router.get(&first_key.0)).unwrap_err();
    assert!(
        matches!(err, RouteError::Unavailable { replicas: 1, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&cluster.drives[0].addr.to_string()),
        "{err}"
    );
}

#[test]
fn moved_reloads_the_map_file_or_fails_clearly() {
    if !drive_has_cluster_mode() {
        common::record_skip(
            "tool",
            "moved_reloads_the_map_file_or_fails_clearly",
            "this build of lightstore has no --cluster-config",
        );
        return;
    }
    let cluster = Cluster::start(2, 0);
    let rt = rt();
    // A stale map: the first drive owns everything (version 1).
    let stale_specs: Vec<NodeSpec> = cluster
        .map
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, n)| NodeSpec {
            slots: if i == 0 { vec![[0, 16383]] } else { Vec::new() },
            ..n.clone()
        })
        .collect();
    // A map the drives cannot better (its version is above theirs) but wrong: the redirect
    // is reported.
    let wrong = ClusterMap::new(99, stale_specs.clone()).unwrap();
    let path = cluster.dir.path().join("stale.toml");
    std::fs::write(&path, wrong.to_toml()).unwrap();
    let router = Router::from_file(&path, cfg()).unwrap();
    let key = owned_by(&cluster.map, 1, 400)[0].clone();
    let err = rt
        .block_on(router.set(key.0.clone(), key.1.clone()))
        .unwrap_err();
    assert!(matches!(err, RouteError::StaleMap { .. }), "{err}");
    let fixed = Router::from_map(wrong.clone(), cfg());
    let err = rt.block_on(fixed.get(&key.0)).unwrap_err();
    assert!(matches!(err, RouteError::Moved { .. }), "{err}");
    assert!(
        err.to_string().contains("MOVED") || err.to_string().contains("moved"),
        "{err}"
    );
    // A stale map (version 1, older than the drives'): the drive the redirect names hands
    // over its map, with or without a file.
    let stale = ClusterMap::new(1, stale_specs).unwrap();
    std::fs::write(&path, stale.to_toml()).unwrap();
    let router = Router::from_file(&path, cfg()).unwrap();
    rt.block_on(router.set(key.0.clone(), key.1.clone()))
        .unwrap();
    assert_eq!(router.map().version(), 2);
    let from_map = Router::from_map(stale, cfg());
    assert_eq!(
        rt.block_on(from_map.get(&key.0)).unwrap(),
        Some(key.1.clone())
    );
    assert_eq!(from_map.map().version(), 2);
    assert_eq!(
        rt.block_on(router.get(&key.0)).unwrap(),
        Some(key.1.clone())
    );
    let r = resp_call(cluster.drives[1].addr, &[b"GET", &key.0]);
    assert!(r.starts_with('$'), "{r}");
}

#[test]
fn block_adapter_on_a_cluster_survives_a_primary_loss_for_reads() {
    if !drive_has_cluster_mode() {
        common::record_skip(
            "tool",
            "block_adapter_on_a_cluster_survives_a_primary_loss_for_reads",
            "this build of lightstore has no --cluster-config",
        );
        return;
    }
    if !common::tools(
        "block_adapter_on_a_cluster_survives_a_primary_loss_for_reads",
        &[("nbdcopy", "libnbd-bin")],
    ) {
        return;
    }
    let mut cluster = Cluster::start(2, 1);
    let nbd = common::Nbd::start(&[
        "--cluster-config".into(),
        cluster.map_path.to_str().unwrap().into(),
        "--volume".into(),
        "vol:24MiB".into(),
        "--timeout".into(),
        "10".into(),
    ]);
    let src = cluster.dir.path().join("src.bin");
    common::random_file(&src, 24 << 20, 21);
    common::run(
        std::process::Command::new("nbdcopy")
            .arg(&src)
            .arg(nbd.uri("vol")),
    );
    let back = cluster.dir.path().join("back.bin");
    common::run(
        std::process::Command::new("nbdcopy")
            .arg(nbd.uri("vol"))
            .arg(&back),
    );
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&back).unwrap());
    // Extents spread over both primaries.
    let router = Arc::new(Router::from_file(&cluster.map_path, cfg()).unwrap());
    let owners: std::collections::HashSet<String> = (0..12u64)
        .map(|e| {
            let key = adapters::nbd::layout::block_key("vol", e * 256);
            router.map().owner(key_slot(&key)).unwrap().id.clone()
        })
        .collect();
    assert_eq!(owners.len(), 2);
    cluster.drives[0].kill();
    let again = cluster.dir.path().join("again.bin");
    common::run(
        std::process::Command::new("nbdcopy")
            .arg(nbd.uri("vol"))
            .arg(&again),
    );
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&again).unwrap());
}

/// While a slot moves between drives (IMPORTING / MIGRATING, some keys moved), the router
/// follows `-ASK`: reads find moved and unmoved keys alike, and a new key in the slot is
/// written to the drive taking the slot over.
#[test]
fn the_router_follows_ask_while_a_slot_moves() {
    use kvproto::client::Client;
    use kvproto::Reply;
    if !drive_has_cluster_mode() {
        common::record_skip(
            "tool",
            "the_router_follows_ask_while_a_slot_moves",
            "this build of lightstore has no --cluster-config",
        );
        return;
    }
    let cluster = Cluster::start(2, 0);
    let router = Router::from_file(&cluster.map_path, cfg()).unwrap();
    let slot = key_slot(b"{b}");
    assert_eq!(
        cluster.map.owner(slot).map(|n| n.addr),
        Some(cluster.drives[0].addr),
        "the test's slot starts on drive 0"
    );
    let (src, dst) = (cluster.drives[0].addr, cluster.drives[1].addr);
    let keys: Vec<Bytes> = (0..20).map(|i| Bytes::from(format!("{{b}}{i}"))).collect();
    rt().block_on(async {
        for k in &keys {
            router.set(k.clone(), k.clone()).await.unwrap();
        }
        let mut s = Client::connect(src).await.unwrap();
        let mut d = Client::connect(dst).await.unwrap();
        let slot_text = slot.to_string();
        let ok = Reply::Simple(Bytes::from_static(b"OK"));
        let imp = d
            .call(&[
                &b"CLUSTER"[..],
                b"SETSLOT",
                slot_text.as_bytes(),
                b"IMPORTING",
                common::node_id(0).as_bytes(),
            ])
            .await
            .unwrap();
        assert_eq!(imp, ok);
        let mig = s
            .call(&[
                &b"CLUSTER"[..],
                b"SETSLOT",
                slot_text.as_bytes(),
                b"MIGRATING",
                common::node_id(1).as_bytes(),
            ])
            .await
            .unwrap();
        assert_eq!(mig, ok);
        // Half the keys move.
        for k in keys.iter().step_by(2) {
            let Reply::Bulk(payload) = s.call(&[&b"DUMP"[..], k]).await.unwrap() else {
                panic!("DUMP {k:?}");
            };
            let r = d
                .call(&[&b"RESTORE-ASKING"[..], k, b"0", &payload])
                .await
                .unwrap();
            assert_eq!(r, ok);
            assert_eq!(s.call(&[&b"DEL"[..], k]).await.unwrap(), Reply::Integer(1));
        }
        // Every key reads through the router, one at a time and in one MGET per drive.
        for k in &keys {
            assert_eq!(router.get(k).await.unwrap().as_ref(), Some(k), "{k:?}");
        }
        let got = router.mget(&keys).await.unwrap();
        assert!(got.iter().zip(&keys).all(|(g, k)| g.as_ref() == Some(k)));
        // Writes and deletes over keys on both drives (split after TRYAGAIN).
        let pairs: Vec<(Bytes, Bytes)> = keys[..4]
            .iter()
            .map(|k| (k.clone(), Bytes::from_static(b"w")))
            .collect();
        router.mset(&pairs).await.unwrap();
        let got = router.mget(&keys[..4]).await.unwrap();
        assert!(
            got.iter().all(|g| g.as_deref() == Some(&b"w"[..])),
            "{got:?}"
        );
        assert_eq!(router.del(&keys[..2]).await.unwrap(), 2);
        assert_eq!(router.exists(&keys[..4]).await.unwrap(), 2);
        for k in &keys[..2] {
            router.set(k.clone(), k.clone()).await.unwrap();
        }
        // A new key goes to the target.
        router
            .set(Bytes::from_static(b"{b}new"), Bytes::from_static(b"n"))
            .await
            .unwrap();
        let on_src = s.call(&[&b"GET"[..], b"{b}new"]).await.unwrap();
        assert!(
            matches!(on_src, Reply::Error(ref e) if e.starts_with(b"ASK ")),
            "{on_src:?}"
        );
        // Keys that exist nowhere, several at once: the source asks for all of them, the
        // target (not holding them all) answers TRYAGAIN, and one key at a time both take
        // them (as NBD writes of fresh blocks and their EXISTS probes do).
        let fresh: Vec<(Bytes, Bytes)> = (0..3)
            .map(|i| {
                (
                    Bytes::from(format!("{{b}}fresh{i}")),
                    Bytes::from_static(b"f"),
                )
            })
            .collect();
        let fresh_keys: Vec<Bytes> = fresh.iter().map(|p| p.0.clone()).collect();
        assert_eq!(router.exists(&fresh_keys).await.unwrap(), 0);
        let none = router.mget(&fresh_keys).await.unwrap();
        assert!(none.iter().all(Option::is_none), "{none:?}");
        router.mset(&fresh).await.unwrap();
        assert_eq!(router.exists(&fresh_keys).await.unwrap(), 3);
        let count = d
            .call(&[&b"CLUSTER"[..], b"COUNTKEYSINSLOT", slot_text.as_bytes()])
            .await
            .unwrap();
        // The ten moved, {b}1 (deleted from the source and written again: a new key goes to
        // the target), {b}new and the three fresh keys.
        assert_eq!(count, Reply::Integer(15));
        assert_eq!(
            router.get(b"{b}new").await.unwrap(),
            Some(Bytes::from_static(b"n"))
        );
    });
}

/// A third drive joins a cluster of two while a client keeps writing and reading back:
/// `reshard::add_primary` moves its share of the slots (MIGRATE on the sources), every write
/// reads back through the router (which follows -ASK, splits -TRYAGAIN, and fetches the new
/// map from a drive on -MOVED), and the keys end on their new owners. This test found the
/// MIGRATE read that a signal interrupted (EINTR), now read again.
#[test]
fn a_new_drive_takes_its_share_while_clients_work() {
    grow_a_cluster_of_two(None, true, false);
}

/// As above in a cluster with a replica (of the first primary), the new drive joining with
/// a replica of its own: the moved slots arrive on the new replica (MIGRATE's REPLICA
/// option for keys that move, the router's asked writes for keys written meanwhile), the
/// old replica drops them, and every replica ends holding exactly its primary's keys with
/// its primary's values.
#[test]
fn a_new_drive_and_its_replica_take_their_share_with_the_replicas() {
    grow_a_cluster_of_two(None, true, true);
}

/// As above on drives that require a password: the reshard authenticates, and the sources'
/// MIGRATE passes the password on to the new drive.
#[test]
fn a_new_drive_joins_a_cluster_with_a_password() {
    grow_a_cluster_of_two(Some("s3cret pass"), false, false);
}

/// Starts two drives (requiring `password`, if given) holding 3,000 keys, a third on a map
/// that lists it, and moves its share of the slots to it with `reshard::add_primary`, with
/// a client writing and reading back throughout when `writer`; then checks every key and
/// where each lives. With `replicas`, the first primary has a replica and so has the
/// newcomer, and each replica is checked against its primary.
fn grow_a_cluster_of_two(password: Option<&str>, writer: bool, replicas: bool) {
    use kvproto::cluster::ClusterMap;
    use kvproto::Credentials;
    if !drive_has_cluster_mode() {
        common::record_skip(
            "tool",
            "grow_a_cluster_of_two",
            "this build of lightstore has no --cluster-config",
        );
        return;
    }
    let cluster = Cluster::start_with(2, usize::from(replicas), password);
    let auth = password.map(|p| Credentials {
        user: None,
        password: p.to_string(),
    });
    let cfg = || RouterConfig {
        auth: auth.clone(),
        ..cfg()
    };
    let main_rt = rt();
    let router = Router::from_file(&cluster.map_path, cfg()).unwrap();
    let pairs: Vec<(Bytes, Bytes)> = (0..3000).map(kv).collect();
    main_rt.block_on(router.mset(&pairs)).unwrap();
    // The newcomer starts on a map that lists it (a placeholder address), then learns its
    // own address in the next version.
    let home = cluster.dir.path().join("node-new");
    std::fs::create_dir_all(&home).unwrap();
    let with_new = |version: u64, addr: std::net::SocketAddr, replica: std::net::SocketAddr| {
        let mut nodes = cluster.map.nodes().to_vec();
        nodes.push(NodeSpec {
            id: common::node_id(9),
            addr,
            slots: Vec::new(),
            replica_of: None,
        });
        if replicas {
            nodes.push(NodeSpec {
                id: common::node_id(10),
                addr: replica,
                slots: Vec::new(),
                replica_of: Some(common::node_id(9)),
            });
        }
        ClusterMap::new(version, nodes).unwrap()
    };
    let placeholder = with_new(
        3,
        "127.0.0.1:9".parse().unwrap(),
        "127.0.0.1:10".parse().unwrap(),
    );
    let start = |home: &std::path::Path, id: usize| {
        let map_file = home.join("cluster.toml");
        std::fs::write(&map_file, placeholder.to_toml()).unwrap();
        let id = common::node_id(id);
        let mut args = vec![
            "--cluster-config",
            map_file.to_str().unwrap(),
            "--cluster-node-id",
            &id,
        ];
        if let Some(pw) = password {
            args.extend(["--requirepass", pw]);
        }
        Drive::start(&home.join("data"), &args)
    };
    let map_file = home.join("cluster.toml");
    let newcomer = start(&home, 9);
    let new_replica = replicas.then(|| {
        let home = cluster.dir.path().join("node-new-replica");
        std::fs::create_dir_all(&home).unwrap();
        start(&home, 10)
    });
    let real = with_new(
        4,
        newcomer.addr,
        new_replica.as_ref().map_or(newcomer.addr, |d| d.addr),
    );
    for addr in std::iter::once(newcomer.addr).chain(new_replica.as_ref().map(|d| d.addr)) {
        let r = common::resp_call_as(
            addr,
            password,
            &[b"LS.CLUSTERMAP", b"4", real.to_toml().as_bytes()],
        );
        assert_eq!(r, "+OK");
    }
    // A writer that reads back runs through the move.
    let router = Arc::new(router);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = writer.then(|| {
        let (router, stop, pairs) = (router.clone(), stop.clone(), pairs.clone());
        std::thread::spawn(move || {
            let rt = rt();
            let mut round = 0u64;
            let mut created = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (k, _) = &pairs[(round as usize * 7) % pairs.len()];
                let v = Bytes::from(format!("round {round}"));
                // Deletes too (a block adapter's trims), on every drive the key lives on.
                if round % 4 == 0 {
                    assert_eq!(rt.block_on(router.del(std::slice::from_ref(k))).unwrap(), 1);
                }
                rt.block_on(router.set(k.clone(), v.clone())).unwrap();
                assert_eq!(rt.block_on(router.get(k)).unwrap(), Some(v));
                // New keys, two in one slot at once (a block adapter's fresh blocks): the
                // drives answer TRYAGAIN while a slot moves and its replica imports.
                let tag = round % 64;
                let two = [
                    Bytes::from(format!("{{t{tag}}}a{round}")),
                    Bytes::from(format!("{{t{tag}}}b{round}")),
                ];
                let puts: Vec<(Bytes, Bytes)> =
                    two.iter().map(|k| (k.clone(), k.clone())).collect();
                rt.block_on(router.mset(&puts)).unwrap();
                created.extend(two);
                round += 1;
            }
            created
        })
    });
    let mut steps = Vec::new();
    let report = main_rt
        .block_on(adapters::reshard::add_primary(
            newcomer.addr,
            adapters::reshard::Access {
                auth: auth.as_ref(),
                tls: None,
            },
            |s| {
                steps.push(s.to_string());
            },
        ))
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let created = worker.map(|w| w.join().unwrap()).unwrap_or_default();
    assert!(!created.is_empty() || !writer);
    assert_eq!(report.slots, 16384 / 3, "{steps:?}");
    assert!(report.keys > 500, "{report:?}");
    assert_eq!(report.version, 6);
    if replicas {
        assert!(report.replica_keys_dropped > 200, "{report:?}");
    }
    // The drive rewrote its map file with each push.
    let map = ClusterMap::from_toml(&std::fs::read_to_string(&map_file).unwrap()).unwrap();
    assert_eq!(map.version(), 6);
    let fresh = Router::from_map(map.clone(), cfg());
    let keys: Vec<Bytes> = pairs.iter().map(|p| p.0.clone()).chain(created).collect();
    let got = main_rt.block_on(fresh.mget(&keys)).unwrap();
    assert!(got.iter().all(Option::is_some), "every key is still there");
    // Each drive holds exactly the keys of its slots.
    for (i, addr) in [
        cluster.drives[0].addr,
        cluster.drives[1].addr,
        newcomer.addr,
    ]
    .iter()
    .enumerate()
    {
        let n: usize = common::resp_call_as(*addr, password, &[b"DBSIZE"])
            .trim_start_matches(':')
            .parse()
            .unwrap();
        let owned = keys
            .iter()
            .filter(|k| map.owner(key_slot(k)).map(|o| o.addr) == Some(*addr))
            .count();
        assert_eq!(n, owned, "drive {i} holds the keys of its slots");
    }
    // Each replica holds exactly its primary's keys, with its primary's values.
    let replica_of = [
        (
            cluster.drives.get(2).map(|d| d.addr),
            cluster.drives[0].addr,
        ),
        (new_replica.as_ref().map(|d| d.addr), newcomer.addr),
    ];
    for (replica, primary) in replica_of {
        let Some(replica) = replica else {
            continue;
        };
        let owned: Vec<&Bytes> = keys
            .iter()
            .filter(|k| map.owner(key_slot(k)).map(|o| o.addr) == Some(primary))
            .collect();
        let n: usize = common::resp_call_as(replica, password, &[b"DBSIZE"])
            .trim_start_matches(':')
            .parse()
            .unwrap();
        assert_eq!(n, owned.len(), "replica {replica} holds its primary's keys");
        main_rt.block_on(async {
            let mut on_primary = kvproto::Client::connect(primary).await.unwrap();
            let mut on_replica = kvproto::Client::connect(replica).await.unwrap();
            if let Some(a) = &auth {
                on_primary.auth(a).await.unwrap();
                on_replica.auth(a).await.unwrap();
            }
            on_replica.call(&[b"LS.REPLICA"]).await.unwrap();
            for k in owned {
                let want = on_primary.call(&[&b"GET"[..], k]).await.unwrap();
                let got = on_replica.call(&[&b"GET"[..], k]).await.unwrap();
                assert!(matches!(want, kvproto::Reply::Bulk(_)), "{k:?}: {want:?}");
                assert_eq!(got, want, "{k:?} on replica {replica}");
            }
        });
    }
}
