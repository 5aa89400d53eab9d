//! The `lightstore` binary brings up its device: formats on first start, reopens after, and
//! refuses bad flags and bad device files with a clear message.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::process::{Command, Output};

use common::Drive;

fn lightstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .args(["--port", "0"])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ftl_segments(d: &Drive) -> u64 {
    let mut c = d.conn();
    let info: String = redis::cmd("INFO").arg("ftl").query(&mut c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("segments:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn formats_on_first_start_and_reopens_after() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Drive::start(&data, &["--capacity", "1GiB"]);
    // 8 channels x 8 ways with 16-page blocks: 128 segments of 8 MiB.
    assert_eq!(ftl_segments(&d), 128);
    assert!(data.join("device.img").exists());
    assert!(d.shutdown());
    // A second start reopens the same device, whatever capacity is asked for.
    let d = Drive::start(&data, &["--capacity", "4GiB"]);
    assert_eq!(ftl_segments(&d), 128);
    assert!(d.shutdown());
}

#[test]
fn bad_flags_and_bad_device_files_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = lightstore(&["--data-dir", d, "--timing", "warp"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("unknown timing"), "{}", text(&o));
    let o = lightstore(&["--data-dir", d, "--device", "tape"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("use sim or file:PATH"), "{}", text(&o));
    let o = lightstore(&["--data-dir", d, "--capacity", "lots"]);
    assert!(!o.status.success());
    let o = lightstore(&["--data-dir", d, "--durability", "maybe"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("use sync or plp"), "{}", text(&o));
    // A formatted device file cut short.
    let img = dir.path().join("dev.img");
    let spec = format!("file:{}", img.display());
    let drive = Drive::start(dir.path(), &["--device", &spec]);
    assert!(drive.shutdown());
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(f.metadata().unwrap().len() / 2).unwrap();
    let o = lightstore(&["--device", &spec]);
    assert!(!o.status.success());
    assert!(text(&o).contains("expected"), "{}", text(&o));
}
