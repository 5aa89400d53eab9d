//! The files an operator installs from `deploy/`: the sample settings file documents every
//! setting the drive has and starts a drive as it stands; the systemd unit passes
//! `systemd-analyze verify`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{have_tool, Drive};

fn deploy(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("deploy")
        .join(name)
}

/// Every long flag of `lightstore --help` (but `--config`, `--help`, `--version`).
fn flags() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let mut flags: Vec<String> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .filter_map(|l| l.split([' ', '\t']).next())
        .filter(|f| !matches!(*f, "config" | "help" | "version"))
        .map(str::to_string)
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

/// Whether a line is `key = value` (a setting, not prose that happens to hold ` = `).
fn is_setting(line: &str) -> bool {
    line.split_once(" = ").is_some_and(|(k, _)| {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '-')
    })
}

#[test]
fn the_sample_settings_document_every_flag_and_start_a_drive() {
    let sample = std::fs::read_to_string(deploy("lightstore.toml")).unwrap();
    let flags = flags();
    assert!(flags.len() > 30, "{flags:?}");
    for f in &flags {
        let set = sample.lines().any(|l| {
            let kv = l.trim_start_matches(['#', ' ']);
            is_setting(kv) && kv.starts_with(&format!("{f} ="))
        });
        assert!(set, "deploy/lightstore.toml does not document `{f}`");
    }
    // As shipped (its data-dir replaced: a test cannot write /var/lib), it starts a drive.
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("lightstore.toml");
    std::fs::write(
        &settings,
        sample.replace(
            "data-dir = \"/var/lib/lightstore\"",
            &format!("data-dir = {:?}", dir.path().join("data")),
        ),
    )
    .unwrap();
    let drive = Drive::start(
        &dir.path().join("data"),
        &["--config", settings.to_str().unwrap()],
    );
    let pong: String = redis::cmd("PING").query(&mut drive.conn()).unwrap();
    assert_eq!(pong, "PONG");
    // Every commented key, set to its documented value, is accepted too.
    let all: String = sample
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(kv) if is_setting(kv) && !kv.starts_with("cluster-") => kv,
            _ => l,
        })
        .filter(|l| {
            !l.starts_with("data-dir") && !l.starts_with("aclfile") && !l.starts_with("tls-")
        })
        .collect::<Vec<_>>()
        .join("\n");
    let every = dir.path().join("every.toml");
    std::fs::write(
        &every,
        format!("{all}\ndata-dir = {:?}\n", dir.path().join("d2")),
    )
    .unwrap();
    let drive = Drive::start(
        &dir.path().join("d2"),
        &["--config", every.to_str().unwrap()],
    );
    let pong: String = redis::cmd("PING").query(&mut drive.conn()).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn the_systemd_unit_verifies() {
    if !have_tool("systemd-analyze") {
        return;
    }
    let unit = std::fs::read_to_string(deploy("lightstore.service")).unwrap();
    assert!(unit
        .contains("ExecStart=/usr/local/bin/lightstore --config /etc/lightstore/lightstore.toml"));
    // systemd-analyze checks that ExecStart's binary exists: point it at the one built.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lightstore.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/local/bin/lightstore",
            env!("CARGO_BIN_EXE_lightstore"),
        ),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !said.contains(path.to_str().unwrap()),
        "systemd-analyze verify: {said}"
    );
}
