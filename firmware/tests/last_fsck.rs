//! The drive reports its device's last offline check: `lightstore fsck` records its outcome
//! in the data directory (`last-fsck`), and INFO's lsm section shows it (`last_fsck`,
//! `last_fsck_time`, `last_fsck_problems`) from the next start on: `never` before any check
//! of that device, `unknown` for a record that cannot be read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{info_value, Drive};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// (`last_fsck`, `last_fsck_time`, `last_fsck_problems`) of a running drive.
fn last_fsck(d: &Drive) -> (String, u64, u64) {
    let mut c = d.conn();
    let n = |c: &mut redis::Connection, f| info_value(c, "lsm", f).parse::<u64>().unwrap();
    (
        info_value(&mut c, "lsm", "last_fsck"),
        n(&mut c, "last_fsck_time"),
        n(&mut c, "last_fsck_problems"),
    )
}

#[test]
fn info_shows_the_last_fsck_of_the_drives_device() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Drive::start(&data, &[]);
    assert_eq!(last_fsck(&d), ("never".into(), 0, 0));
    let mut c = d.conn();
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(vec![i as u8; 3000])
            .query(&mut c)
            .unwrap();
    }
    drop(c);
    assert!(d.shutdown());

    let before = now();
    let f = common::fsck(&data, &[]);
    assert_eq!(f.code, Some(0), "{}\n{}", f.stdout, f.stderr);
    let after = now();
    assert!(data.join("last-fsck").exists());
    let d = Drive::start(&data, &[]);
    let (status, time, problems) = last_fsck(&d);
    assert_eq!((status.as_str(), problems), ("clean", 0));
    assert!(
        (before..=after).contains(&time),
        "{time} not in {before}..={after}"
    );
    assert!(d.shutdown());

    // A record that cannot be read: reported as unknown, the drive still starts.
    std::fs::write(data.join("last-fsck"), "garbage\n").unwrap();
    let d = Drive::start(&data, &[]);
    assert_eq!(last_fsck(&d), ("unknown".into(), 0, 0));
    assert!(d.shutdown());
}

#[test]
fn a_record_of_another_device_is_not_shown() {
    let dir = tempfile::tempdir().unwrap();
    let one = format!("file:{}", dir.path().join("one.img").display());
    let two = format!("file:{}", dir.path().join("two.img").display());
    let d = Drive::start(dir.path(), &["--device", &one]);
    assert!(d.shutdown());
    let f = common::fsck(dir.path(), &["--device", &one]);
    assert_eq!(f.code, Some(0), "{}\n{}", f.stdout, f.stderr);
    let d = Drive::start(dir.path(), &["--device", &one]);
    assert_eq!(last_fsck(&d).0, "clean");
    assert!(d.shutdown());
    // The same data directory with another device: no check of that one.
    let d = Drive::start(dir.path(), &["--device", &two]);
    assert_eq!(last_fsck(&d), ("never".into(), 0, 0));
    assert!(d.shutdown());
}
