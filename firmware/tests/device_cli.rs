//! The `lightstore` binary brings up its device: formats on first start, reopens after, and
//! refuses bad flags and bad device files with a clear message.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::{Command, Output};

fn lightstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lightstore"))
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

#[test]
fn formats_on_first_start_and_reopens_after() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let first = lightstore(&["--data-dir", d, "--capacity", "256MiB"]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("2 segments of 128 MiB"),
        "{}",
        text(&first)
    );
    assert!(data.join("device.img").exists());
    // A second start reopens the same device, whatever capacity is asked for.
    let second = lightstore(&["--data-dir", d, "--capacity", "1GiB"]);
    assert!(second.status.success(), "{}", text(&second));
    assert!(
        text(&second).contains("2 segments of 128 MiB"),
        "{}",
        text(&second)
    );
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
    // A formatted device file cut short.
    let img = dir.path().join("dev.img");
    let spec = format!("file:{}", img.display());
    let o = lightstore(&["--device", &spec, "--capacity", "128MiB"]);
    assert!(o.status.success(), "{}", text(&o));
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(f.metadata().unwrap().len() / 2).unwrap();
    let o = lightstore(&["--device", &spec]);
    assert!(!o.status.success());
    assert!(text(&o).contains("expected"), "{}", text(&o));
}
