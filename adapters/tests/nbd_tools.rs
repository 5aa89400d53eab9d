//! The block adapter driven by real NBD clients from Debian: nbdinfo and nbdcopy
//! (libnbd-bin), qemu-img and qemu-io (qemu-utils), and fio's nbd ioengine (fio). Each test
//! starts its own drive and `lightstore-nbd`, and skips with a printed reason only when its
//! tool is not installed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use common::{random_file, run, tools, Drive, Nbd};

#[test]
fn nbdinfo_lists_and_describes_exports() {
    if !tools(
        "nbdinfo_lists_and_describes_exports",
        &[("nbdinfo", "libnbd-bin")],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let nbd = Nbd::on_drive(&drive, &["disk0:64MiB", "small:1000000"]);

    let json = run(Command::new("nbdinfo").arg("--json").arg(nbd.uri("disk0")));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let export = &v["exports"][0];
    assert_eq!(export["export-size"], 64 << 20, "{json}");
    for flag in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_multi_conn",
    ] {
        assert_eq!(export[flag], true, "{flag} in {json}");
    }
    assert_eq!(export["is_read_only"], false, "{json}");
    assert_eq!(export["block_size_preferred"], 8192, "{json}");

    let size = run(Command::new("nbdinfo").arg("--size").arg(nbd.uri("small")));
    assert_eq!(size.trim(), "1000000");
    // The empty name is the first volume.
    let size = run(Command::new("nbdinfo").arg("--size").arg(nbd.uri("")));
    assert_eq!(size.trim(), (64u64 << 20).to_string());

    let list = run(Command::new("nbdinfo")
        .arg("--list")
        .arg("--json")
        .arg(nbd.uri("")));
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    let names: Vec<&str> = v["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["export-name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["disk0", "small"], "{list}");

    // An unknown export is refused with a message, and the server goes on.
    let out = Command::new("nbdinfo")
        .arg(nbd.uri("nope"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope"), "{err}");
    run(Command::new("nbdinfo").arg("--size").arg(nbd.uri("disk0")));
}

#[test]
fn nbdcopy_round_trips_random_data() {
    if !tools(
        "nbdcopy_round_trips_random_data",
        &[("nbdcopy", "libnbd-bin")],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(&dir.path().join("drive"), &[]);
    // A size that is not a multiple of the 8 KiB block: the last block is partial.
    let size = (12 << 20) + 4608;
    let nbd = Nbd::on_drive(&drive, &[&format!("odd:{size}"), "other:16MiB"]);
    let src = dir.path().join("src.bin");
    let back = dir.path().join("back.bin");
    random_file(&src, size, 7);
    // Several connections (the server offers multi-conn) and requests in flight.
    run(Command::new("nbdcopy")
        .args(["--connections=4", "--requests=16"])
        .arg(&src)
        .arg(nbd.uri("odd")));
    run(Command::new("nbdcopy").arg(nbd.uri("odd")).arg(&back));
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&back).unwrap());
    // The other volume was never written: it reads as zeroes.
    let zero = dir.path().join("zero.bin");
    run(Command::new("nbdcopy").arg(nbd.uri("other")).arg(&zero));
    let z = std::fs::read(&zero).unwrap();
    assert_eq!(z.len(), 16 << 20);
    assert!(z.iter().all(|&b| b == 0));
}

/// A sparse raw image: random runs at a few offsets (some unaligned), holes elsewhere.
fn sparse_image(path: &std::path::Path, size: u64) {
    use rand::{RngCore, SeedableRng};
    use std::io::{Seek, SeekFrom, Write};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let mut f = std::fs::File::create(path).unwrap();
    f.set_len(size).unwrap();
    for &(off, len) in &[
        (0u64, 1 << 20),
        (3 << 20, 4096),
        ((5 << 20) + 777, 100_000),
        (size - 8192, 8192),
    ] {
        let mut buf = vec![0u8; len];
        rng.fill_bytes(&mut buf);
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&buf).unwrap();
    }
}

#[test]
fn qemu_img_convert_and_compare() {
    if !tools(
        "qemu_img_convert_and_compare",
        &[("qemu-img", "qemu-utils"), ("nbdcopy", "libnbd-bin")],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(&dir.path().join("drive"), &[]);
    let size: u64 = 16 << 20;
    let nbd = Nbd::on_drive(&drive, &[&format!("disk0:{size}")]);
    let uri = nbd.uri("disk0");
    // Fill the volume with noise first, so the image's holes must be written as zeroes.
    let noise = dir.path().join("noise.bin");
    random_file(&noise, size as usize, 3);
    run(Command::new("nbdcopy").arg(&noise).arg(&uri));
    let img = dir.path().join("src.img");
    sparse_image(&img, size);
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&img)
        .arg(&uri));
    let out = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&img)
        .arg(&uri));
    assert!(out.contains("Images are identical"), "{out}");
    // And back out into a fresh file.
    let back = dir.path().join("back.img");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&uri)
        .arg(&back));
    assert!(std::fs::read(&img).unwrap() == std::fs::read(&back).unwrap());
    // A changed byte is noticed.
    run(Command::new("nbdcopy").arg(&noise).arg(&uri));
    let out = Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&img)
        .arg(&uri)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// Runs qemu-io commands against `uri`; fails on a non-zero exit or any failed check.
fn qemu_io(uri: &str, cmds: &[&str]) -> String {
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw"]);
    for c in cmds {
        cmd.arg("-c").arg(c);
    }
    cmd.arg(uri);
    let out = run(&mut cmd);
    for bad in ["failed", "error", "Error"] {
        assert!(!out.contains(bad), "qemu-io {cmds:?}:\n{out}");
    }
    out
}

#[test]
fn qemu_io_patterns_partial_writes_and_zeroes() {
    if !tools(
        "qemu_io_patterns_partial_writes_and_zeroes",
        &[("qemu-io", "qemu-utils")],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let nbd = Nbd::on_drive(&drive, &["disk0:8MiB"]);
    let uri = nbd.uri("disk0");
    qemu_io(
        &uri,
        &[
            // Whole blocks, then unaligned partial writes over them (read-modify-write).
            "write -P 0xab 0 64k",
            "read -P 0xab 0 64k",
            "write -P 0xcd 4097 3000",
            "read -P 0xab 0 4097",
            "read -P 0xcd 4097 3000",
            "read -P 0xab 7097 58439",
            // Across a block boundary, two bytes.
            "write -P 0x5a 8191 2",
            "read -P 0x5a 8191 2",
            "read -P 0xab 8193 100",
            // Never written: zeroes.
            "read -P 0 1M 1M",
            // Write zeroes and discard, whole and partial blocks.
            "write -z 16k 8k",
            "read -P 0 16k 8k",
            "write -z 24576 100",
            "read -P 0 24576 100",
            "read -P 0xab 24676 8092",
            "discard 32k 16k",
            "read -P 0 32k 16k",
            // FUA, flush, and the last block of the volume.
            "write -f -P 0x77 128k 8k",
            "flush",
            "write -P 0x33 8380416 8192",
            "read -P 0x33 8380416 8192",
        ],
    );
    // A second process sees what the first wrote.
    qemu_io(&uri, &["read -P 0x77 128k 8k", "read -P 0xcd 4097 3000"]);
    // Requests in flight at once to different sectors of the same blocks: the server's
    // read-modify-writes must not lose any of them.
    let mut cmds: Vec<String> = Vec::new();
    for i in 0..32u64 {
        cmds.push(format!(
            "aio_write -P {} {} 512",
            i + 1,
            2 * 8192 * 64 + i * 512
        ));
    }
    cmds.push("aio_flush".into());
    for i in 0..32u64 {
        cmds.push(format!("read -P {} {} 512", i + 1, 2 * 8192 * 64 + i * 512));
    }
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    qemu_io(&uri, &cmds);
    // Beyond the end is refused (qemu checks too); the server stays up.
    let out = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "read 8M 512"])
        .arg(&uri)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("failed") || text.contains("out of range") || !out.status.success(),
        "{text}"
    );
    qemu_io(&uri, &["read -P 0x33 8380416 8192"]);
}

/// Runs fio with the nbd ioengine; returns (MB/s, IOPS) of `dir` ("read" or "write").
fn fio(uri: &str, args: &[&str], dir: &str) -> (f64, f64) {
    let out = run(Command::new("fio")
        // No verify state file left in the working directory.
        .args([
            "--name=nbd",
            "--ioengine=nbd",
            "--output-format=json",
            "--verify_state_save=0",
        ])
        .arg(format!("--uri={uri}"))
        .args(args));
    let json_start = out.find('{').unwrap_or(0);
    let v: serde_json::Value = serde_json::from_str(&out[json_start..]).unwrap();
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "{out}");
    let bw_kib = job[dir]["bw"].as_f64().unwrap();
    let iops = job[dir]["iops"].as_f64().unwrap();
    (bw_kib * 1024.0 / 1e6, iops)
}

#[test]
fn fio_nbd_engine_verifies_random_and_sequential_writes() {
    if !tools(
        "fio_nbd_engine_verifies_random_and_sequential_writes",
        &[("fio", "fio")],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(dir.path(), &[]);
    let nbd = Nbd::on_drive(&drive, &["disk0:64MiB"]);
    let uri = nbd.uri("disk0");
    // 4 KiB random writes: every one is half a block, so a read-modify-write.
    let (mb, iops) = fio(
        &uri,
        &[
            "--rw=randwrite",
            "--bs=4k",
            "--size=8M",
            "--iodepth=16",
            "--verify=crc32c",
            "--do_verify=1",
        ],
        "write",
    );
    println!("fio randwrite 4k qd16 verify: {mb:.1} MB/s, {iops:.0} IOPS");
    let (mb, iops) = fio(
        &uri,
        &[
            "--rw=randwrite",
            "--bs=8k",
            "--size=16M",
            "--iodepth=16",
            "--verify=crc32c",
            "--do_verify=1",
        ],
        "write",
    );
    println!("fio randwrite 8k qd16 verify: {mb:.1} MB/s, {iops:.0} IOPS");
    let (mb, iops) = fio(
        &uri,
        &[
            "--rw=write",
            "--bs=256k",
            "--size=32M",
            "--iodepth=4",
            "--verify=crc32c",
            "--do_verify=1",
        ],
        "write",
    );
    println!("fio seq write 256k qd4 verify: {mb:.1} MB/s, {iops:.0} IOPS");
    let (mb, iops) = fio(
        &uri,
        &["--rw=read", "--bs=1M", "--size=32M", "--iodepth=4"],
        "read",
    );
    println!("fio seq read 1M qd4: {mb:.1} MB/s, {iops:.0} IOPS");
    let (mb, iops) = fio(
        &uri,
        &[
            "--rw=randread",
            "--bs=8k",
            "--size=32M",
            "--iodepth=16",
            "--number_ios=4000",
        ],
        "read",
    );
    println!("fio randread 8k qd16: {mb:.1} MB/s, {iops:.0} IOPS");
}
