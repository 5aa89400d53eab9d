//! Small values held in their keytable entries, seen over RESP: with the value cache off, a
//! restarted drive answers GET and HGET of small values without reading a device page (INFO
//! `page_reads` stays put), counts them in INFO `entry_values`, reports its limit through
//! CONFIG GET, and a value past the limit still costs a page read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{info_field, Drive};
use redis::Commands;

#[test]
fn small_values_are_answered_from_dram_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["--value-cache-size", "0", "--entry-value-max", "48"];
    {
        let d = Drive::start(&data, &args);
        let mut c = d.conn();
        for i in 0..300 {
            let _: () = c.set(format!("s{i}"), format!("small-{i}")).unwrap();
            let _: () = c.hset(format!("h{i}"), "f", format!("field-{i}")).unwrap();
        }
        let _: () = c.set("big", "x".repeat(200)).unwrap();
        assert!(d.shutdown());
    }
    let d = Drive::start(&data, &args);
    let mut c = d.conn();
    let limit: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("entry-value-max")
        .query(&mut c)
        .unwrap();
    assert_eq!(limit, vec!["entry-value-max".to_string(), "48".to_string()]);
    // Strings, fields and the hashes' records: at least one per key written.
    assert!(info_field(&mut c, "lsm", "entry_values") >= 600);
    let before = info_field(&mut c, "ftl", "page_reads");
    for i in 0..300 {
        let s: String = c.get(format!("s{i}")).unwrap();
        assert_eq!(s, format!("small-{i}"));
        let f: String = c.hget(format!("h{i}"), "f").unwrap();
        assert_eq!(f, format!("field-{i}"));
    }
    assert_eq!(
        info_field(&mut c, "ftl", "page_reads"),
        before,
        "held values were read from the device"
    );
    let big: String = c.get("big").unwrap();
    assert_eq!(big.len(), 200);
    assert!(
        info_field(&mut c, "ftl", "page_reads") > before,
        "a value past the limit was not read from the device"
    );
}
