//! The drive's log, written to a file or a pipe (not a terminal), is plain text: no ANSI
//! colour codes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

#[test]
fn the_log_has_no_colour_codes_when_not_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .args(["--port", "0", "--capacity", "256MiB", "--data-dir"])
        .arg(dir.path())
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
    assert!(log.contains("engine open"), "the log: {log}");
    assert!(!log.contains('\x1b'), "colour codes in the log: {log:?}");
}
