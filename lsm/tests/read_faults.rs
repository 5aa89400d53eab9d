//! A value whose page fails its checksum is reported, never returned: the read fails with
//! `Corrupt`, the other values still read, and the failure is counted
//! (`EngineStats::read_checksum_failures`, INFO `read_checksum_failures`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, EngineError};

use common::small_geometry;

#[test]
fn a_corrupt_value_page_fails_the_read_and_is_counted() {
    let ftl = Arc::new(
        Ftl::format(
            &Backend::Ram(RamStore::new()),
            DeviceConfig::new(small_geometry()),
        )
        .unwrap(),
    );
    let db = Engine::open(
        ftl.clone() as Arc<dyn AppendDevice>,
        EngineConfig::default(),
    )
    .unwrap();
    // One batch each: the small value is packed in the log's first page; the 8 KiB value
    // takes a packed page for its record, then a raw page of its own; "other" comes after.
    let big = vec![0x5a; 8192];
    db.put(b"small", &[7u8; 100]).unwrap();
    db.put(b"big", &big).unwrap();
    db.put(b"other", b"still here").unwrap();
    db.flush().unwrap();
    let lba = |page| common::first_log_page(&ftl, page);
    assert_eq!(db.stats().read_checksum_failures, 0);

    // The raw page of the 8 KiB value: its checksum (kept with the pointer) fails.
    ftl.corrupt_page(lba(2), 4000).unwrap();
    match db.get(b"big") {
        Err(EngineError::Corrupt(why)) => assert!(why.contains("checksum"), "{why}"),
        other => panic!("a corrupt raw value read as {other:?}"),
    }
    assert_eq!(db.stats().read_checksum_failures, 1);

    // The packed page of the small value: the page's own checksum fails.
    ftl.corrupt_page(lba(0), 200).unwrap();
    assert!(matches!(db.get(b"small"), Err(EngineError::Corrupt(_))));
    assert!(matches!(
        db.multi_get(&[b"other", b"small"]),
        Err(EngineError::Corrupt(_))
    ));
    assert_eq!(db.stats().read_checksum_failures, 3);

    // Everything else reads, and the engine goes on.
    assert_eq!(
        db.get(b"other").unwrap().as_deref(),
        Some(&b"still here"[..])
    );
    db.put(b"after", b"ok").unwrap();
    assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"ok"[..]));
    assert_eq!(db.stats().read_unreadable_pages, 0);
}
