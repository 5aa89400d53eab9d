//! Honest write outcomes (docs/ARCHITECTURE.md, *Write outcomes*): a batch is acknowledged
//! only once durable; it is reported "not applied" only when it can never be applied, and
//! "outcome unknown" when its pages reached the device but durability was not confirmed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use hwftl_sim::{Backend, DeviceConfig, Ftl, RamStore};
use lsm::{Engine, EngineConfig, EngineError};

mod common;
use common::CutDevice;

fn setup() -> (Backend, DeviceConfig) {
    let backend = Backend::Ram(RamStore::new());
    let cfg = DeviceConfig::new(common::small_geometry());
    drop(Ftl::format(&backend, cfg).unwrap());
    (backend, cfg)
}

fn sync_writes() -> EngineConfig {
    EngineConfig {
        flush_writes: true,
        ..EngineConfig::default()
    }
}

/// The FLUSH after a batch's pages fails. The pages did reach the device (durable on this
/// one once completed), so calling the write failed would be a lie: after a restart it is
/// there. It must be reported as of unknown outcome, and not be visible meanwhile.
#[test]
fn a_failed_flush_reports_the_outcome_unknown_and_the_write_may_reappear() {
    failed_flush_is_unknown(sync_writes());
}

/// The same, with the flush started by the batch's pages' completion on the poller thread
/// (the flush chain, which a cheap device's writers otherwise skip): the device refusing
/// that flush fails the batch the same way.
#[test]
fn a_failed_flush_started_by_the_pages_reports_the_outcome_unknown() {
    failed_flush_is_unknown(EngineConfig {
        cheap_flush: std::time::Duration::ZERO,
        ..sync_writes()
    });
}

fn failed_flush_is_unknown(engine: EngineConfig) {
    let (backend, cfg) = setup();
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let dev = Arc::new(CutDevice::new(ftl.clone(), Box::new(|_| false)));
    let db = Engine::open(dev.clone(), engine.clone()).unwrap();
    db.put(b"before", b"1").unwrap();
    dev.fail_next_flush();
    let err = db.put(b"key", b"value").unwrap_err();
    assert!(
        matches!(err, EngineError::OutcomeUnknown { .. }),
        "a write whose flush failed reported as {err:?}"
    );
    assert!(err.to_string().contains("outcome unknown"), "{err}");
    assert_eq!(
        db.get(b"key").unwrap(),
        None,
        "not visible before it is known durable"
    );
    ftl.power_cut();
    drop(db);
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl, engine).unwrap();
    assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(
        db.get(b"key").unwrap().as_deref(),
        Some(&b"value"[..]),
        "the write reported failed was durable after all: 'unknown' was the honest answer"
    );
    db.close().unwrap();
}

/// A page of the batch fails to program: the batch can never be whole on the device, so it
/// is reported not applied, and it is neither visible nor recovered after a cut.
#[test]
fn a_failed_page_reports_not_applied_and_the_write_never_appears() {
    let (backend, cfg) = setup();
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let dev = Arc::new(CutDevice::new(ftl.clone(), Box::new(|_| false)));
    let db = Engine::open(dev.clone(), sync_writes()).unwrap();
    db.put(b"before", b"1").unwrap();
    dev.refuse_next_write();
    let err = db.put(b"key", b"value").unwrap_err();
    assert!(
        matches!(err, EngineError::WriteNotApplied(_)),
        "a write whose page failed reported as {err:?}"
    );
    assert!(err.to_string().contains("not applied"), "{err}");
    assert_eq!(db.get(b"key").unwrap(), None);
    ftl.power_cut();
    drop(db);
    let ftl = Arc::new(Ftl::open(&backend, cfg).unwrap());
    let db = Engine::open(ftl, sync_writes()).unwrap();
    assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(
        db.get(b"key").unwrap(),
        None,
        "a write reported not applied came back"
    );
    db.close().unwrap();
}
