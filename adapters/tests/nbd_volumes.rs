//! Volumes stored on the drive, and sparse volumes seen through real NBD clients:
//! `lightstore-nbd volume create|list|resize|delete` against a real drive, two `serve`
//! adapters exporting the same volumes, `nbdinfo --map` and `qemu-img map` reading
//! `base:allocation` block status, sparse copies with `nbdcopy` and `qemu-img convert`, and
//! the drive's own key count and key list after a delete (redis-cli). Each test starts its
//! own drive and adapters, and records a skip when a tool is not installed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use common::{nbd_cli, random_file, resp_call, run, tools, volume_cmd, Drive, Nbd};

/// The drive's key count (DBSIZE).
fn dbsize(drive: &Drive) -> u64 {
    let r = resp_call(drive.addr, &[b"DBSIZE"]);
    r.strip_prefix(':').unwrap().parse().unwrap()
}

/// Every key on the drive (`redis-cli --scan`), lossily printed.
fn keys(drive: &Drive) -> Vec<String> {
    let out = run(Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p"])
        .arg(drive.addr.port().to_string())
        .arg("--scan"));
    out.lines().map(str::to_string).collect()
}

/// `volume list --json` as (name, size, block size, key id).
fn list(drive: &Drive) -> Vec<(String, u64, u64, String)> {
    let out = volume_cmd(drive.addr, &["list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["size"].as_u64().unwrap(),
                e["block_size"].as_u64().unwrap(),
                e["key_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Runs qemu-io commands against `uri`; fails on a non-zero exit or a failed check.
fn qemu_io(uri: &str, cmds: &[&str]) -> String {
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw"]);
    for c in cmds {
        cmd.arg("-c").arg(c);
    }
    cmd.arg(uri);
    let out = run(&mut cmd);
    for bad in ["failed", "error", "Error", "Pattern verification"] {
        assert!(!out.contains(bad), "qemu-io {cmds:?}:\n{out}");
    }
    out
}

/// `nbdinfo --map --json`: (offset, length, type) of each extent.
fn nbdinfo_map(uri: &str) -> Vec<(u64, u64, u64)> {
    let out = run(Command::new("nbdinfo").args(["--map", "--json"]).arg(uri));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|e| {
            (
                e["offset"].as_u64().unwrap(),
                e["length"].as_u64().unwrap(),
                e["type"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn volume_lifecycle_is_shared_by_adapters_and_leaves_no_keys() {
    if !tools(
        "volume_lifecycle_is_shared_by_adapters_and_leaves_no_keys",
        &[
            ("nbdinfo", "libnbd-bin"),
            ("qemu-io", "qemu-utils"),
            ("redis-cli", "redis-tools"),
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    // A key of someone else's that nothing here may touch.
    assert_eq!(resp_call(drive.addr, &[b"SET", b"user:1", b"x"]), "+OK");

    let out = volume_cmd(drive.addr, &["create", "disk0", "--size", "16M"]);
    assert!(out.contains("created volume disk0"), "{out}");
    volume_cmd(
        drive.addr,
        &["create", "small", "--size", "1000000", "--block-size", "4K"],
    );
    // Refused: the same name again, a bad name, a bad block size, no such volume.
    for (args, want) in [
        (&["create", "disk0", "--size", "1M"][..], "already exists"),
        (&["create", "a:b", "--size", "1M"][..], "must be 1 to 64"),
        (
            &["create", "x", "--size", "1M", "--block-size", "3000"][..],
            "block size",
        ),
        (&["delete", "nope"][..], "no volume named"),
        (&["resize", "nope", "--size", "1M"][..], "no volume named"),
    ] {
        let addr = drive.addr.to_string();
        let mut all = vec!["volume"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--drive", &addr]);
        let o = nbd_cli(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
    }
    let vols = list(&drive);
    let names: Vec<&str> = vols.iter().map(|v| v.0.as_str()).collect();
    assert_eq!(names, ["disk0", "small"]);
    assert_eq!((vols[0].1, vols[0].2), (16 << 20, 8192));
    assert_eq!((vols[1].1, vols[1].2), (1_000_000, 4096));
    let table = volume_cmd(drive.addr, &["list"]);
    assert!(
        table.starts_with("NAME") && table.contains("16.0 MiB"),
        "{table}"
    );

    // Two adapters export the same volumes; what one writes the other reads.
    let a = Nbd::serve(&drive);
    let b = Nbd::serve(&drive);
    let listed = run(Command::new("nbdinfo")
        .args(["--list", "--json"])
        .arg(b.uri("")));
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let exported: Vec<&str> = v["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["export-name"].as_str().unwrap())
        .collect();
    assert_eq!(exported, ["disk0", "small"], "{listed}");
    let info = run(Command::new("nbdinfo").arg("--json").arg(b.uri("small")));
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(v["exports"][0]["export-size"], 1_000_000, "{info}");
    assert_eq!(v["exports"][0]["block_size_preferred"], 4096, "{info}");
    qemu_io(
        &a.uri("disk0"),
        &[
            "write -P 0xab 0 64k",
            "write -P 0xcd 15M 1M",
            "write -P 0x11 8000 300",
        ],
    );
    qemu_io(&a.uri("small"), &["write -P 0x22 999000 1000"]);
    qemu_io(
        &b.uri("disk0"),
        &[
            "read -P 0xab 0 8000",
            "read -P 0x11 8000 300",
            "read -P 0xcd 15M 1M",
        ],
    );
    qemu_io(&b.uri("small"), &["read -P 0x22 999000 1000"]);
    // A volume created now is exported at once (read at each handshake).
    volume_cmd(drive.addr, &["create", "late", "--size", "1M"]);
    let size = run(Command::new("nbdinfo").arg("--size").arg(b.uri("late")));
    assert_eq!(size.trim(), (1 << 20).to_string());

    // Grow: new connections see the new size, the new space reads as zeroes.
    volume_cmd(drive.addr, &["resize", "disk0", "--size", "32M"]);
    let size = run(Command::new("nbdinfo").arg("--size").arg(a.uri("disk0")));
    assert_eq!(size.trim(), (32u64 << 20).to_string());
    qemu_io(
        &b.uri("disk0"),
        &["read -P 0 16M 16M", "read -P 0xcd 15M 1M"],
    );
    // Shrink needs --allow-shrink, then deletes the blocks past the end and zeroes the
    // rest of the last block: grown again, that space reads as zeroes.
    let addr = drive.addr.to_string();
    let o = nbd_cli(&[
        "volume", "resize", "disk0", "--size", "10000", "--drive", &addr,
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--allow-shrink"));
    let before = dbsize(&drive);
    let out = volume_cmd(
        drive.addr,
        &["resize", "disk0", "--size", "10000", "--allow-shrink"],
    );
    // 64k at 0 is 8 blocks, block 0 and 1 stay, 1 MiB at 15M is 128 blocks: 134 go.
    assert!(out.contains("134 blocks past the end deleted"), "{out}");
    assert_eq!(dbsize(&drive), before - 134);
    volume_cmd(drive.addr, &["resize", "disk0", "--size", "16M"]);
    qemu_io(
        &a.uri("disk0"),
        &[
            "read -P 0xab 0 8000",
            "read -P 0x11 8000 300",
            "read -P 0xab 8300 1700",
            "read -P 0 10000 6374",
            "read -P 0 16k 16368k",
        ],
    );

    // Delete removes every block key and the record; other keys stay.
    let id = list(&drive)[0].3.clone();
    assert!(keys(&drive)
        .iter()
        .any(|k| k.starts_with(&format!("{{v:{id}:"))));
    let out = volume_cmd(drive.addr, &["delete", "disk0"]);
    assert!(
        out.contains("deleted volume disk0 and its 2 stored blocks"),
        "{out}"
    );
    volume_cmd(drive.addr, &["delete", "small"]);
    volume_cmd(drive.addr, &["delete", "late"]);
    assert_eq!(keys(&drive), ["user:1"]);
    assert_eq!(dbsize(&drive), 1);
    assert!(volume_cmd(drive.addr, &["orphans"]).contains("no orphaned block keys"));
    // A block written under an id no record names (as an adapter that still had a deleted
    // volume open would): listed, exit status 1, and deleted on request.
    let mut ghost = b"{v:ghost@00000000000000ab:00000000}".to_vec();
    ghost.extend_from_slice(&7u64.to_be_bytes());
    assert_eq!(resp_call(drive.addr, &[b"SET", &ghost, b"x"]), "+OK");
    let o = nbd_cli(&["volume", "orphans", "--drive", &addr]);
    assert!(!o.status.success());
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(
        listed.contains("ghost@00000000000000ab  1 block keys"),
        "{listed}"
    );
    let out = volume_cmd(drive.addr, &["orphans", "--delete"]);
    assert!(out.contains("deleted 1 orphaned block keys"), "{out}");
    assert_eq!(keys(&drive), ["user:1"]);
    assert!(list(&drive).is_empty());
    let o = Command::new("nbdinfo")
        .arg(a.uri("disk0"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    // A damaged record is reported by name, never guessed around.
    assert_eq!(
        resp_call(
            drive.addr,
            &[b"SET", b"{ls-vol}zz", b"lightstore-volume 1\nname zz\n"]
        ),
        "+OK"
    );
    let o = nbd_cli(&["volume", "list", "--drive", &addr]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("\"zz\"") && err.contains("unusable"),
        "{err}"
    );
    assert_eq!(resp_call(drive.addr, &[b"DEL", b"{ls-vol}zz"]), ":1");
    // The same name again is a new, empty volume.
    volume_cmd(drive.addr, &["create", "disk0", "--size", "16M"]);
    qemu_io(&a.uri("disk0"), &["read -P 0 0 16M"]);
    assert_ne!(list(&drive)[0].3, id);
}

#[test]
fn block_status_maps_holes_and_data() {
    if !tools(
        "block_status_maps_holes_and_data",
        &[
            ("nbdinfo", "libnbd-bin"),
            ("qemu-io", "qemu-utils"),
            ("qemu-img", "qemu-utils"),
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    volume_cmd(drive.addr, &["create", "sparse", "--size", "64M"]);
    let nbd = Nbd::serve(&drive);
    let uri = nbd.uri("sparse");
    // Never written: one hole.
    assert_eq!(nbdinfo_map(&uri), [(0, 64 << 20, 3)]);
    qemu_io(
        &uri,
        &[
            "write -P 0xab 0 64k",
            "write -P 0xcd 10M 8k",
            // Part of one block: the whole block is data.
            "write -P 0x11 20000000 100",
            // Discard and write-zeroes give holes back.
            "discard 16k 8k",
            "write -z 48k 16k",
            // All-zero data is stored as a hole too.
            "write -P 0 10M 8k",
            "write -P 0x5a 60M 2M",
        ],
    );
    let b = 8192;
    let z = 20_000_000 / b * b;
    let want = vec![
        (0, 16 << 10, 0),
        (16 << 10, 8 << 10, 3),
        (24 << 10, 24 << 10, 0),
        (48 << 10, z - (48 << 10), 3),
        (z, b, 0),
        (z + b, (60 << 20) - z - b, 3),
        (60 << 20, 2 << 20, 0),
        (62 << 20, 2 << 20, 3),
    ];
    assert_eq!(nbdinfo_map(&uri), want);
    // qemu-img map: the same data extents (it merges the holes).
    let out = run(Command::new("qemu-img")
        .args(["map", "--output=json", "-f", "raw"])
        .arg(&uri));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let data: Vec<(u64, u64)> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["data"] == true)
        .map(|e| (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap()))
        .collect();
    let want_data: Vec<(u64, u64)> = want
        .iter()
        .filter(|w| w.2 == 0)
        .map(|w| (w.0, w.1))
        .collect();
    assert_eq!(data, want_data, "{out}");
    for e in v.as_array().unwrap() {
        if e["data"] == false {
            assert_eq!(e["zero"], true, "{out}");
        }
    }
    // Reads through structured replies (holes sent as OFFSET_HOLE) return the right bytes.
    qemu_io(
        &uri,
        &[
            "read -P 0xab 0 16k",
            "read -P 0 16k 8k",
            "read -P 0xab 24k 24k",
            "read -P 0 48k 16k",
            "read -P 0x11 20000000 100",
            "read -P 0x5a 60M 2M",
            "read -P 0 62M 2M",
        ],
    );
}

/// Bytes the file occupies on disk.
fn allocated(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn sparse_volumes_copy_sparsely() {
    if !tools(
        "sparse_volumes_copy_sparsely",
        &[
            ("nbdcopy", "libnbd-bin"),
            ("qemu-io", "qemu-utils"),
            ("qemu-img", "qemu-utils"),
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(&dir.path().join("drive"), &[]);
    let size: u64 = 256 << 20;
    volume_cmd(drive.addr, &["create", "vm", "--size", "256M"]);
    let nbd = Nbd::serve(&drive);
    let uri = nbd.uri("vm");
    // A few blocks of random data at scattered offsets: 1.1 MiB of 256.
    let chunk = dir.path().join("chunk.bin");
    random_file(&chunk, 1 << 20, 5);
    let from_file = format!("write -s {} 0 1M", chunk.display());
    qemu_io(
        &uri,
        &[
            &from_file,
            "write -P 0x42 100M 64k",
            "write -P 0x43 209719296 8k",
            "write -P 0x44 255M 1M",
        ],
    );
    let written: u64 = (1 << 20) + (64 << 10) + (16 << 10) + (1 << 20);
    // nbdcopy --sparse into a file: holes stay holes.
    let copy = dir.path().join("copy.img");
    run(Command::new("nbdcopy")
        .arg("--sparse=8192")
        .arg(&uri)
        .arg(&copy));
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), size);
    let got = allocated(&copy);
    assert!(
        got <= written + (1 << 20),
        "nbdcopy wrote {got} bytes for {written} of data"
    );
    let out = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&copy)
        .arg(&uri));
    assert!(out.contains("Images are identical"), "{out}");
    // qemu-img convert too (it reads block status and skips the holes).
    let conv = dir.path().join("conv.img");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&uri)
        .arg(&conv));
    let got = allocated(&conv);
    assert!(
        got <= written + (1 << 20),
        "qemu-img convert wrote {got} bytes for {written} of data"
    );
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&conv).unwrap());
    // And back into a second volume: only the data becomes keys.
    volume_cmd(drive.addr, &["create", "vm2", "--size", "256M"]);
    let before = resp_call(drive.addr, &[b"DBSIZE"]);
    run(Command::new("nbdcopy").arg(&copy).arg(nbd.uri("vm2")));
    let after = resp_call(drive.addr, &[b"DBSIZE"]);
    let keys = |r: &str| r.strip_prefix(':').unwrap().parse::<u64>().unwrap();
    // 128 + 8 + 2 (8 KiB at 200 MiB + 4096 spans two blocks) + 128 blocks.
    assert_eq!(keys(&after) - keys(&before), 128 + 8 + 2 + 128);
    let out = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&copy)
        .arg(nbd.uri("vm2")));
    assert!(out.contains("Images are identical"), "{out}");
}

#[test]
fn volumes_on_a_cluster() {
    if !common::drive_has_cluster_mode() {
        common::record_skip(
            "environment",
            "volumes_on_a_cluster",
            "the drive has no cluster mode",
        );
        return;
    }
    if !tools("volumes_on_a_cluster", &[("qemu-io", "qemu-utils")]) {
        return;
    }
    let cluster = common::Cluster::start(2, 0);
    let map = cluster.map_path.to_str().unwrap().to_string();
    let cli = |args: &[&str]| {
        let mut all = vec!["volume"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--cluster-config", &map]);
        let o = nbd_cli(&all);
        assert!(o.status.success(), "{all:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    cli(&["create", "c0", "--size", "16M"]);
    assert!(cli(&["list"]).contains("c0"));
    let nbd = Nbd::start(&["serve".into(), "--cluster-config".into(), map.clone()]);
    // 8 MiB: four extents, spread over both drives.
    qemu_io(
        &nbd.uri("c0"),
        &["write -P 0x61 0 8M", "read -P 0x61 0 8M", "read -P 0 8M 8M"],
    );
    let total = |c: &common::Cluster| -> Vec<u64> {
        c.drives
            .iter()
            .map(|d| {
                resp_call(d.addr, &[b"DBSIZE"])
                    .strip_prefix(':')
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect()
    };
    let counts = total(&cluster);
    // Every block and the record, wherever their slots put them.
    assert_eq!(counts.iter().sum::<u64>(), 1024 + 1, "{counts:?}");
    let out = cli(&["delete", "c0"]);
    assert!(out.contains("1024 stored blocks"), "{out}");
    assert_eq!(total(&cluster), [0, 0]);
}
