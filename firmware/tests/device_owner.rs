//! One drive per device: a second `lightstore` on the same data directory exits at once with
//! a clear message while the first keeps serving, and the lock dies with the process that
//! held it (SIGKILL included). `--recover-read-only` serves reads and refuses writes with
//! Redis's READONLY error. `lightstore fsck` refuses a device a drive holds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Drive, TEST_CAPACITY};

/// Runs a second drive on `data_dir` and returns its exit success and stderr (it must exit
/// by itself within the deadline).
fn second_drive(data_dir: &std::path::Path) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .args(["--port", "0", "--capacity", TEST_CAPACITY, "--data-dir"])
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a second drive on a device in use did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.success(), err)
}

#[test]
fn a_second_drive_on_the_same_device_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let first = Drive::start(dir.path(), &[]);
    let mut c = first.conn();
    redis::cmd("SET").arg("k").arg("v1").exec(&mut c).unwrap();

    let (ok, err) = second_drive(dir.path());
    assert!(!ok, "the second drive must fail");
    assert!(err.contains("in use"), "stderr: {err}");
    assert!(
        err.contains(&first.pid().to_string()),
        "the message names the holder: {err}"
    );

    // The first drive is untouched by the attempt.
    let v: String = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v, "v1");
    redis::cmd("SET").arg("k").arg("v2").exec(&mut c).unwrap();
    drop(c);

    // The lock goes with the process, even on SIGKILL.
    first.kill9();
    let again = Drive::start(dir.path(), &[]);
    let v: String = redis::cmd("GET").arg("k").query(&mut again.conn()).unwrap();
    assert_eq!(v, "v2");
    assert!(again.shutdown());
}

#[test]
fn fsck_refuses_a_device_a_running_drive_holds() {
    let dir = tempfile::tempdir().unwrap();
    let d = Drive::start(dir.path(), &[]);
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .exec(&mut d.conn())
        .unwrap();
    let f = common::fsck(dir.path(), &[]);
    assert_eq!(
        f.code,
        Some(2),
        "stdout: {}\nstderr: {}",
        f.stdout,
        f.stderr
    );
    assert!(f.stderr.contains("in use"), "stderr: {}", f.stderr);
    assert!(
        f.stderr.contains(&d.pid().to_string()),
        "stderr: {}",
        f.stderr
    );
    // The drive is untouched, and once it is stopped the check runs and finds it clean.
    let v: String = redis::cmd("GET").arg("k").query(&mut d.conn()).unwrap();
    assert_eq!(v, "v");
    assert!(d.shutdown());
    let f = common::fsck(dir.path(), &[]);
    assert_eq!(
        f.code,
        Some(0),
        "stdout: {}\nstderr: {}",
        f.stdout,
        f.stderr
    );
    assert!(f.stdout.contains("keys: 1 live"), "{}", f.stdout);
}

#[test]
fn recover_read_only_serves_reads_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let d = Drive::start(dir.path(), &[]);
    let mut c = d.conn();
    for i in 0..100 {
        redis::cmd("SET")
            .arg(format!("key{i}"))
            .arg(format!("value{i}"))
            .exec(&mut c)
            .unwrap();
    }
    drop(c);
    d.kill9();

    let ro = Drive::start(dir.path(), &["--recover-read-only"]);
    let mut c = ro.conn();
    for i in 0..100 {
        let v: String = redis::cmd("GET")
            .arg(format!("key{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(v, format!("value{i}"));
    }
    let e = redis::cmd("SET")
        .arg("key0")
        .arg("new")
        .exec(&mut c)
        .unwrap_err();
    assert_eq!(e.code(), Some("READONLY"), "{e}");
    let e = redis::cmd("DEL").arg("key1").exec(&mut c).unwrap_err();
    assert_eq!(e.code(), Some("READONLY"), "{e}");
    // The connection and the drive survive the refusals.
    let v: String = redis::cmd("GET").arg("key1").query(&mut c).unwrap();
    assert_eq!(v, "value1");
    drop(c);
    ro.kill9();

    // Nothing was changed: a normal start sees every key and can write again.
    let d = Drive::start(dir.path(), &[]);
    let mut c = d.conn();
    let n: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 100);
    redis::cmd("SET")
        .arg("key0")
        .arg("new")
        .exec(&mut c)
        .unwrap();
    assert!(d.shutdown());
}
