//! The drive's log, written to a file or a pipe (not a terminal), is plain text: no ANSI
//! colour codes; with `--log-format json` it is one JSON object per line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

/// Runs a drive with `extra` flags until it is ready, stops it with SHUTDOWN and returns
/// its stderr.
fn log_of_a_run(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .args(["--port", "0", "--capacity", "256MiB", "--data-dir"])
        .arg(dir.path())
        .args(extra)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("lightstore ready on ").map(str::to_string))
        .expect("the drive never became ready");
    let mut s = TcpStream::connect(addr.trim()).unwrap();
    s.write_all(b"*1\r\n$8\r\nSHUTDOWN\r\n").unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(child.wait().unwrap().success());
    log
}

#[test]
fn the_log_has_no_colour_codes_when_not_on_a_terminal() {
    let log = log_of_a_run(&[]);
    assert!(log.contains("engine open"), "the log: {log}");
    assert!(!log.contains('\x1b'), "colour codes in the log: {log:?}");
}

#[test]
fn a_json_log_is_one_object_per_line() {
    let log = log_of_a_run(&["--log-format", "json"]);
    let mut messages = Vec::new();
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert!(
            v["timestamp"].is_string() && v["level"].is_string(),
            "{line}"
        );
        messages.push(
            v["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    assert!(messages.iter().any(|m| m == "engine open"), "{messages:?}");
    // A bad format is refused before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .args(["--log-format", "xml", "--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("log-format `xml`: use text or json"), "{err}");
}
