//! Slots moving between real drives while real clients keep using them: Redis Cluster's
//! migration protocol by hand (IMPORTING / MIGRATING, `-ASK`, `-TRYAGAIN`, ASKING), a
//! write still on its way to the device when its slot starts migrating, and `redis-cli
//! --cluster reshard` with redis-rs's, redis-py's and Jedis's cluster clients writing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cluster::{bulk, err, node_id, ok, Raw, TestCluster, R};
use common::{have_tool, record_skip};
use kvproto::cluster::{key_slot, ClusterMap};
use redis::Commands;

/// One slot moves from node 0 to node 1 while clients keep using it, with Redis Cluster's
/// migration protocol: IMPORTING / MIGRATING states, `-ASK` for keys already moved or new,
/// `-TRYAGAIN` for split multi-key requests, ASKING on the importing drive, the keys moved
/// one by one (WATCH + DUMP on the source, RESTORE-ASKING on the target, MULTI/DEL/EXEC on
/// the source, so a write in between is never lost), then the new map pushed and the
/// states cleared. A redis-rs cluster client reads and writes across the whole move.
#[test]
fn a_slot_moves_live_with_ask_redirects() {
    let c = TestCluster::start(2, 0, &[]);
    let (a, b) = (c.addr(0), c.addr(1));
    // "b" hashes to slot 3300, owned by node 0 (0-8191); "{b}..." keys share the slot.
    let slot = key_slot(b"b");
    assert_eq!(slot, 3300);
    let keys: Vec<String> = std::iter::once("b".to_string())
        .chain((0..40).map(|i| format!("{{b}}{i}")))
        .collect();
    let mut n0 = c.raw(0);
    let mut n1 = c.raw(1);
    for k in &keys {
        assert_eq!(n0.call(&["SET", k, &format!("v-{k}")]), ok());
    }
    assert_eq!(n0.call(&["RPUSH", "{b}list", "x", "y"]), R::Int(2));
    assert_eq!(
        n0.call(&["CLUSTER", "COUNTKEYSINSLOT", "3300"]),
        R::Int(keys.len() as i64 + 1)
    );
    assert_eq!(n1.call(&["CLUSTER", "COUNTKEYSINSLOT", "3300"]), R::Int(0));
    assert_eq!(
        n0.call(&["CLUSTER", "GETKEYSINSLOT", "3300", "5"])
            .items()
            .len(),
        5
    );
    assert_eq!(
        n0.call(&["CLUSTER", "GETKEYSINSLOT", "16384", "5"]),
        err("ERR Invalid slot or number of keys")
    );
    assert_eq!(
        n0.call(&["CLUSTER", "COUNTKEYSINSLOT", "-1"]),
        err("ERR Invalid slot")
    );

    // The states, with Redis's refusals.
    let (id0, id1) = (node_id(0), node_id(1));
    assert_eq!(
        n0.call(&["CLUSTER", "SETSLOT", "3300", "IMPORTING", &id1]),
        err("ERR I'm already the owner of hash slot 3300")
    );
    assert_eq!(
        n1.call(&["CLUSTER", "SETSLOT", "3300", "MIGRATING", &id0]),
        err("ERR I'm not the owner of hash slot 3300")
    );
    assert_eq!(
        n1.call(&["CLUSTER", "SETSLOT", "3300", "IMPORTING", "nobody"]),
        err("ERR I don't know about node nobody")
    );
    assert_eq!(
        n1.call(&["CLUSTER", "SETSLOT", "99999", "IMPORTING", &id0]),
        err("ERR Invalid or out of range slot")
    );
    assert_eq!(
        n1.call(&["CLUSTER", "SETSLOT", "3300", "IMPORTING", &id0]),
        ok()
    );
    assert_eq!(
        n0.call(&["CLUSTER", "SETSLOT", "3300", "MIGRATING", &id1]),
        ok()
    );

    // Source: keys it has are served; missing ones are asked of the target.
    assert_eq!(n0.call(&["GET", "b"]), bulk("v-b"));
    let ask = err(&format!("ASK 3300 {b}"));
    assert_eq!(n0.call(&["GET", "{b}new"]), ask);
    assert_eq!(n0.call(&["SET", "{b}new", "1"]), ask);
    assert_eq!(
        n0.call(&["MGET", "{b}0", "{b}new"]),
        err("TRYAGAIN Multiple keys request during rehashing of slot")
    );
    // Target: only right after ASKING, for one command.
    let moved = err(&format!("MOVED 3300 {a}"));
    assert_eq!(n1.call(&["GET", "{b}new"]), moved);
    assert_eq!(n1.call(&["ASKING"]), ok());
    assert_eq!(n1.call(&["SET", "{b}new", "on-target"]), ok());
    assert_eq!(n1.call(&["GET", "{b}new"]), moved);
    assert_eq!(n1.call(&["ASKING"]), ok());
    assert_eq!(n1.call(&["GET", "{b}new"]), bulk("on-target"));

    // A cluster client follows the redirects while the keys move.
    let client = redis::cluster::ClusterClient::new(vec![format!("redis://{a}/")]).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut all: Vec<String> = keys.clone();
    all.push("{b}list".into());
    // The first half moves key by key by hand, the rest with one MIGRATE on the source.
    let half = all.len() / 2;
    for (i, k) in all.iter().enumerate().take(half) {
        // WATCH, DUMP, RESTORE-ASKING, then DEL inside MULTI: EXEC aborts if a client
        // wrote the key since the DUMP, and the move is tried again.
        let mut first = true;
        let mut retried = false;
        loop {
            assert_eq!(n0.call(&["WATCH", k]), ok());
            let payload = match n0.call(&["DUMP", k]) {
                R::Bulk(p) => p,
                other => panic!("DUMP {k}: {other:?}"),
            };
            let restored =
                n1.call_bytes(&[b"RESTORE-ASKING", k.as_bytes(), b"0", &payload, b"REPLACE"]);
            assert_eq!(restored, ok(), "RESTORE-ASKING {k}");
            if i == 3 && first {
                // A write to the key between the DUMP and the DEL: the move starts over.
                let _: () = con.set(k, "changed").unwrap();
            }
            first = false;
            assert_eq!(n0.call(&["MULTI"]), ok());
            assert_eq!(n0.call(&["DEL", k]), R::Simple("QUEUED".into()));
            match n0.call(&["EXEC"]) {
                R::Arr(v) => {
                    assert_eq!(v, vec![R::Int(1)]);
                    break;
                }
                R::Nil if i == 3 => {
                    retried = true;
                    continue;
                }
                other => panic!("EXEC for {k}: {other:?}"),
            }
        }
        if i == 3 {
            assert!(
                retried,
                "the write between DUMP and DEL aborted the first EXEC"
            );
            let v: String = con.get(k).unwrap();
            assert_eq!(v, "changed", "the write is on the target, not lost");
        }
        // Every key reads through the cluster client, moved or not.
        for (j, k) in keys.iter().enumerate().step_by(5) {
            let v: String = con.get(k).unwrap();
            let want = if j == 3 {
                "changed".to_string()
            } else {
                format!("v-{k}")
            };
            assert_eq!(v, want, "{k} during the move");
        }
    }
    let mut migrate: Vec<&str> = vec!["MIGRATE", "127.0.0.1", "0", "", "0", "5000", "KEYS"];
    let port = c.nodes[1].drive.addr.port().to_string();
    migrate[2] = &port;
    migrate.extend(all[half..].iter().map(String::as_str));
    assert_eq!(n0.call(&migrate), ok());
    for k in &keys {
        let v: String = con.get(k).unwrap();
        let want = if k == &keys[3] {
            "changed".to_string()
        } else {
            format!("v-{k}")
        };
        assert_eq!(v, want, "{k} after MIGRATE");
    }
    // New keys written during the move went to the target.
    let _: () = con.set("{b}client", "c").unwrap();
    assert_eq!(n1.call(&["ASKING"]), ok());
    assert_eq!(n1.call(&["GET", "{b}client"]), bulk("c"));
    assert_eq!(n0.call(&["CLUSTER", "COUNTKEYSINSLOT", "3300"]), R::Int(0));

    // SETSLOT NODE gives the slot to node 1 in each drive's map (target first, as
    // redis-cli does); the states end.
    for n in [&mut n1, &mut n0] {
        assert_eq!(n.call(&["CLUSTER", "SETSLOT", "3300", "NODE", &id1]), ok());
    }
    for node in &c.nodes {
        let saved = ClusterMap::from_toml(&std::fs::read_to_string(&node.map_path).unwrap());
        let saved = saved.unwrap();
        assert_eq!(
            saved.version(),
            3,
            "each drive's map is one version newer, saved"
        );
        assert_eq!(saved.owner(3300).unwrap().id, id1);
        assert_eq!(saved.owner(3301).unwrap().id, id0);
    }
    assert_eq!(n0.call(&["GET", "b"]), err(&format!("MOVED 3300 {b}")));
    assert_eq!(n1.call(&["GET", "b"]), bulk("v-b"));
    assert_eq!(
        n1.call(&["CLUSTER", "COUNTKEYSINSLOT", "3300"]),
        R::Int(all.len() as i64 + 2)
    );
    let fresh = redis::cluster::ClusterClient::new(vec![format!("redis://{a}/")]).unwrap();
    let mut con = fresh.get_connection().unwrap();
    let list: Vec<String> = con.lrange("{b}list", 0, -1).unwrap();
    assert_eq!(list, vec!["x".to_string(), "y".to_string()]);
    let v: String = con.get("{b}new").unwrap();
    assert_eq!(v, "on-target");
    if have_tool("redis-cli") {
        let out = Command::new("redis-cli")
            .args(["-c", "-h", "127.0.0.1", "-p"])
            .arg(c.nodes[0].drive.addr.port().to_string())
            .args(["GET", "{b}7"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "v-{b}7");
    }
}

/// A reshard empties a slot by looping GETKEYSINSLOT + MIGRATE until no key is left, then
/// gives the slot away; a write the drive let through just before the slot started
/// migrating may still be on its way to the device (durable mode applies it once its pages
/// land). GETKEYSINSLOT and COUNTKEYSINSLOT must count it, or the reshard ends with an
/// acknowledged key left behind on a drive that no longer serves its slot (CI caught Jedis
/// reading such a key back as nil). Page programs take 400 ms, so the SET is held at the
/// device while COUNTKEYSINSLOT asks. A transaction queued before the slot started migrating
/// whose key is absent is redirected at EXEC, not run here.
#[test]
fn a_write_on_its_way_to_the_device_is_seen_by_a_slot_migration() {
    // Page programs of 400 ms; reads, erases and transfers of microseconds.
    let c = TestCluster::start(
        2,
        0,
        &["--timing", "custom:20000,400000000,20000,1000,1000"],
    );
    // Slot 3300, served by node 0.
    let key = "{b}held";
    let slot = key_slot(key.as_bytes()).to_string();
    let mut writer = c.raw(0);
    let mut tx = c.raw(0);
    let mut admin = c.raw(0);
    assert_eq!(
        admin.call(&["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        R::Int(0)
    );
    assert_eq!(tx.call(&["MULTI"]), ok());
    assert_eq!(tx.call(&["SET", "{b}tx", "v"]), R::Simple("QUEUED".into()));
    writer.send(&[b"SET", key.as_bytes(), b"v"]);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        admin.call(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &node_id(1)]),
        ok()
    );
    let t = std::time::Instant::now();
    assert_eq!(
        admin.call(&["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        R::Int(1)
    );
    assert_eq!(
        admin.call(&["CLUSTER", "GETKEYSINSLOT", &slot, "10"]),
        R::Arr(vec![bulk(key)])
    );
    eprintln!("COUNTKEYSINSLOT waited {:?} for the write", t.elapsed());
    assert_eq!(writer.read(), ok());
    assert_eq!(admin.call(&["GET", key]), bulk("v"));
    match tx.call(&["EXEC"]) {
        R::Err(e) => assert!(e.starts_with("ASK 3300 "), "EXEC: {e}"),
        other => panic!("EXEC over a key that is not here ran: {other:?}"),
    }
    assert_eq!(
        admin.call(&["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        R::Int(1)
    );
}

/// redis-py's `RedisCluster` writing `py:{i}` until the file in `argv[3]` exists; prints how
/// many writes were acknowledged.
/// Builds the Jedis cluster probe (`adapters/jedis-probe`, Maven: Jedis from Maven Central,
/// cached in `~/.m2` after the first build) and returns the `java -cp` class path that runs
/// it; `None` (a recorded tool skip, which fails `cargo xtask test`) without Maven or a JDK.
fn jedis_probe() -> Option<String> {
    if !have_tool("mvn") || !have_tool("java") {
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/jedis-probe");
    let out = Command::new("mvn")
        .args(["-q", "-B", "-Dstyle.color=never", "package"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the Jedis probe:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let deps = std::fs::read_to_string(dir.join("target/classpath.txt")).unwrap();
    Some(format!(
        "{}:{}",
        dir.join("target/jedis-probe.jar").display(),
        deps.trim()
    ))
}

const REDIS_PY_CLUSTER_WRITER: &str = r#"
import os, sys
from redis.cluster import RedisCluster
r = RedisCluster(host=sys.argv[1], port=int(sys.argv[2]))
i = 0
while not os.path.exists(sys.argv[3]) or i < 10:
    r.set(f"py:{i}", i)
    i += 1
print(i)
"#;

/// `redis-cli --cluster reshard` moves slots between drives as it does between Redis
/// nodes (SETSLOT IMPORTING/MIGRATING, GETKEYSINSLOT, MIGRATE, SETSLOT NODE to every
/// primary) while redis-rs's, redis-py's and Jedis's cluster clients keep writing; `redis-cli
/// --cluster check` then finds the drives agreeing, no open slot, every slot covered, and
/// every acknowledged write reads back.
#[test]
fn redis_cli_reshard_moves_slots_while_a_client_writes() {
    if !have_tool("redis-cli") {
        return;
    }
    let python = "/usr/bin/python3";
    let have_py = Command::new(python)
        .args(["-c", "import redis.cluster"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_py {
        record_skip(
            "tool",
            "python3-redis",
            "Debian's python3-redis is not installed (cargo xtask test installs it)",
        );
        return;
    }
    let Some(jedis_cp) = jedis_probe() else {
        return;
    };
    let c = TestCluster::start(2, 0, &[]);
    let (a, b) = (c.addr(0), c.addr(1));
    let stop_file = c.dir.path().join("stop-py");
    let jedis_stop = c.dir.path().join("stop-jedis");
    let jedis = Command::new("java")
        .arg("-cp")
        .arg(&jedis_cp)
        .arg("lightstore.probe.ClusterWriter")
        .arg("127.0.0.1")
        .arg(c.nodes[0].drive.addr.port().to_string())
        .arg(&jedis_stop)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let py = Command::new(python)
        .arg("-c")
        .arg(REDIS_PY_CLUSTER_WRITER)
        .arg("127.0.0.1")
        .arg(c.nodes[0].drive.addr.port().to_string())
        .arg(&stop_file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = redis::cluster::ClusterClient::new(vec![format!("redis://{a}/")]).unwrap();
    let mut con = client.get_connection().unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        let _: () = con.set(k, format!("v-{k}")).unwrap();
    }
    // A writer through the whole move: every write it saw acknowledged must read back.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let client = client.clone();
        std::thread::spawn(move || {
            let mut con = client.get_connection().unwrap();
            let mut acked = Vec::new();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let k = format!("live:{i}");
                let r: redis::RedisResult<()> = con.set(&k, i);
                r.unwrap_or_else(|e| panic!("SET {k} during the reshard: {e}"));
                acked.push(k);
                i += 1;
            }
            acked
        })
    };
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli").args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "redis-cli {args:?}:\n{text}");
        text
    };
    let (id0, id1) = (node_id(0), node_id(1));
    let moved = cli(&[
        "--cluster",
        "reshard",
        &a,
        "--cluster-from",
        &id0,
        "--cluster-to",
        &id1,
        "--cluster-slots",
        "300",
        "--cluster-yes",
    ]);
    assert!(!moved.contains("ERR"), "reshard:\n{moved}");
    stop.store(true, std::sync::atomic::Ordering::Release);
    let acked = writer.join().unwrap();
    assert!(!acked.is_empty());
    std::fs::write(&stop_file, b"").unwrap();
    let py = py.wait_with_output().unwrap();
    assert!(
        py.status.success(),
        "redis-py's RedisCluster during the reshard:\n{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let py_acked: u64 = String::from_utf8_lossy(&py.stdout).trim().parse().unwrap();
    // Jedis's cluster client wrote through the move too, and read every key back itself.
    std::fs::write(&jedis_stop, b"").unwrap();
    let jedis = jedis.wait_with_output().unwrap();
    assert!(
        jedis.status.success(),
        "Jedis's JedisCluster during the reshard:\n{}",
        String::from_utf8_lossy(&jedis.stderr)
    );
    let jedis_acked: u64 = String::from_utf8_lossy(&jedis.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(jedis_acked >= 10);
    eprintln!(
        "during the reshard: redis-rs {} writes, redis-py {py_acked}, Jedis {jedis_acked}",
        acked.len()
    );

    let check = cli(&["--cluster", "check", &b]);
    for want in [
        "[OK] All nodes agree about slots configuration.",
        "[OK] All 16384 slots covered.",
    ] {
        assert!(check.contains(want), "check lacks {want:?}:\n{check}");
    }
    // An open slot (a migration never ended) would be a warning.
    assert!(!check.contains("[WARNING]"), "check:\n{check}");
    // Node 0's first 300 slots are node 1's now, in both drives' saved maps.
    for node in &c.nodes {
        let saved = ClusterMap::from_toml(&std::fs::read_to_string(&node.map_path).unwrap());
        let saved = saved.unwrap();
        assert_eq!(saved.owner(0).unwrap().id, id1);
        assert_eq!(saved.owner(299).unwrap().id, id1);
        assert_eq!(saved.owner(300).unwrap().id, id0);
    }
    let fresh = redis::cluster::ClusterClient::new(vec![format!("redis://{b}/")]).unwrap();
    let mut con = fresh.get_connection().unwrap();
    for k in &keys {
        let v: String = con.get(k).unwrap();
        assert_eq!(v, format!("v-{k}"), "{k} after the reshard");
    }
    for (i, k) in acked.iter().enumerate() {
        let v: u64 = con.get(k).unwrap();
        assert_eq!(v, i as u64, "{k}, acknowledged during the reshard");
    }
    for i in 0..py_acked {
        let v: u64 = con.get(format!("py:{i}")).unwrap();
        assert_eq!(v, i, "py:{i}, acknowledged to redis-py during the reshard");
    }
    for i in 0..jedis_acked {
        let v: u64 = con.get(format!("jedis:{i}")).unwrap();
        assert_eq!(v, i, "jedis:{i}, acknowledged to Jedis during the reshard");
    }
    // Each key lives on the drive the map names, and only there.
    let (mut n0, mut n1) = (c.raw(0), c.raw(1));
    let count =
        |n: &mut Raw, slot: u16| match n.call(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]) {
            R::Int(v) => v,
            other => panic!("COUNTKEYSINSLOT: {other:?}"),
        };
    let mut on_moved_slots = 0;
    for k in keys.iter().chain(acked.iter()) {
        let slot = key_slot(k.as_bytes());
        if slot < 300 {
            on_moved_slots += 1;
            assert_eq!(count(&mut n0, slot), 0, "slot {slot} left on node 0");
            assert!(count(&mut n1, slot) > 0, "slot {slot} on node 1");
        }
    }
    assert!(on_moved_slots > 0, "some keys were in the moved slots");
}
