#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use rand::{Rng, SeedableRng};

/// An engine with `cfg` on a fresh small RAM device (2 x 2 chips of 64 blocks of 64 pages).
pub(super) fn ram_engine(cfg: EngineConfig) -> Engine {
    Engine::open(crate::engine::test_device::small_ram_device(64), cfg).unwrap()
}

/// `page_bound` is an upper bound of the value-log pages a batch writes (checked on the
/// engine's value-log byte count for random batches of small, page-sized and
/// multi-page values and deletes), and a write group of a few hundred small values, or of
/// 32 values of 8 KiB, is pipelined, not written synchronously (a bound of a page per small
/// value, or of two pages per 8 KiB value, had sent every such group of the drive down the
/// synchronous path).
#[test]
fn the_page_bound_holds_and_small_values_pipeline() {
    let db = ram_engine(EngineConfig {
        memtable_bytes: 64 << 20,
        ..EngineConfig::default()
    });
    let small: Vec<Vec<u8>> = (0..800)
        .map(|i| format!("key:{i:06}").into_bytes())
        .collect();
    let value = [7u8; 100];
    let ops: Vec<WriteOp<'_>> = small.iter().map(|k| WriteOp::Put(k, &value)).collect();
    let bound = db.core.inner.lock().page_bound(&ops);
    assert!(
        bound <= PIPELINE_MAX_BATCH_PAGES,
        "800 values of 100 bytes: bound {bound}"
    );
    // A write group of the drive's 256 KiB of 8 KiB values: one packed page for the 32
    // records, not one per value (which sent it down the synchronous path).
    let big = vec![7u8; 8192];
    let ops: Vec<WriteOp<'_>> = small[..32].iter().map(|k| WriteOp::Put(k, &big)).collect();
    let bound = db.core.inner.lock().page_bound(&ops);
    assert!(
        bound <= PIPELINE_MAX_BATCH_PAGES / 2 + 8,
        "32 values of 8 KiB: bound {bound}"
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut checked = 0;
    for round in 0..300u32 {
        let n = rng.gen_range(1..200);
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("r{round}-{i}-{}", "k".repeat(rng.gen_range(0..40))).into_bytes())
            .collect();
        let values: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = match rng.gen_range(0..10) {
                    0 => rng.gen_range(8000..20_000),
                    1 => rng.gen_range(1000..8200),
                    _ => rng.gen_range(0..300),
                };
                vec![1u8; len]
            })
            .collect();
        let ops: Vec<WriteOp<'_>> = keys
            .iter()
            .zip(&values)
            .enumerate()
            .map(|(i, (k, v))| {
                if i % 7 == 3 {
                    WriteOp::Delete(k)
                } else {
                    WriteOp::Put(k, v)
                }
            })
            .collect();
        let bound = db.core.inner.lock().page_bound(&ops);
        assert!(bound >= 2);
        let (segs, writes) = (db.stats().log_segments, db.stats().total_bytes);
        db.write(&ops).unwrap();
        // A batch that opened a log segment skipped the pages left in the last one.
        if db.stats().log_segments == segs {
            let wrote = (db.stats().total_bytes - writes) / PAGE_SIZE as u64;
            assert!(
                wrote <= bound,
                "round {round}: wrote {wrote} pages, bound {bound}"
            );
            checked += 1;
        }
    }
    assert!(checked > 200, "only {checked} batches checked");
}

/// A batch acknowledged from DRAM leaves its doorbell to the caller, and only such a batch:
/// it is applied and read back before the caller rings, and `sync` lands it after. (On the
/// RAM backend the doorbell itself does nothing, so this checks the API's contract, not
/// that ringing is what hands the pages over: the file backend's tests cover the doorbell.)
#[test]
fn a_plp_batch_leaves_its_doorbell_to_the_caller() {
    for plp in [true, false] {
        let db = ram_engine(EngineConfig {
            ack_from_dram: plp,
            flush_writes: !plp,
            ..EngineConfig::default()
        });
        let value = vec![9u8; 3000];
        let mut pending = db
            .try_submit_write(&[WriteOp::Put(b"k", &value)])
            .unwrap()
            .expect("an empty pipeline takes the batch");
        let bell = pending.take_doorbell();
        assert_eq!(bell.is_some(), plp, "plp {plp}");
        db.finish_write(pending).unwrap();
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&value[..]));
        drop(bell);
        db.sync().unwrap();
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&value[..]));
    }
}

/// `try_submit_write_now` never waits: it declines (`None`) without plp, while anyone holds
/// the engine lock (maintenance does through device I/O), and while a batch that is not
/// acknowledged from DRAM is in the pipeline; otherwise it starts the batch, which finishes
/// without a device wait and reads back.
#[test]
fn try_submit_write_now_declines_rather_than_waits() {
    let value = vec![5u8; 3000];
    let ops = [WriteOp::Put(b"k", &value)];
    let durable = ram_engine(EngineConfig::default());
    assert!(durable.try_submit_write_now(&ops).unwrap().is_none());
    let db = ram_engine(EngineConfig {
        ack_from_dram: true,
        flush_writes: false,
        ..EngineConfig::default()
    });
    {
        let _held = db.core.inner.lock();
        assert!(db.try_submit_write_now(&ops).unwrap().is_none());
    }
    let mut pending = db
        .try_submit_write_now(&ops)
        .unwrap()
        .expect("a free lock and an empty pipeline take the batch");
    let bell = pending.take_doorbell();
    assert!(bell.is_some());
    db.finish_write(pending).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&value[..]));
    drop(bell);
    db.sync().unwrap();
}

/// `try_submit_write_now` declines when the device has fewer free command tags than the
/// batch's pages and the spare it keeps for client reads (a page refused for want of a tag
/// would be retried under the engine lock, on a thread that must not wait); the ordinary
/// path takes the same batch on the same device.
#[test]
fn try_submit_write_now_declines_without_free_tags_for_its_pages() {
    let g = hwftl_sim::Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 64,
        pages_per_block: 64,
        spare_blocks_per_chip: 2,
    };
    let few_tags = hwftl_sim::DeviceConfig {
        queue_depth: 64,
        ..hwftl_sim::DeviceConfig::new(g)
    };
    let dev: std::sync::Arc<dyn hwftl_sim::AppendDevice> = std::sync::Arc::new(
        hwftl_sim::Ftl::format(
            &hwftl_sim::Backend::Ram(hwftl_sim::RamStore::new()),
            few_tags,
        )
        .unwrap(),
    );
    assert_eq!(dev.free_tags(), Some(64));
    let db = Engine::open(
        dev,
        EngineConfig {
            ack_from_dram: true,
            flush_writes: false,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let value = vec![7u8; 3000];
    let ops = [WriteOp::Put(b"k", &value)];
    assert!(db.try_submit_write_now(&ops).unwrap().is_none());
    let pending = db
        .try_submit_write(&ops)
        .unwrap()
        .expect("the ordinary path takes the batch");
    db.finish_write(pending).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&value[..]));
    // A device with tags to spare takes it now.
    let roomy = ram_engine(EngineConfig {
        ack_from_dram: true,
        flush_writes: false,
        ..EngineConfig::default()
    });
    let pending = roomy
        .try_submit_write_now(&ops)
        .unwrap()
        .expect("256 free tags take a one-page batch now");
    roomy.finish_write(pending).unwrap();
}

/// plp: a device flush goes down behind every [`flush_pacing::FLUSH_PACE_PAGES`] pages
/// written (a few more while one is still on the device), none fails, and the data reads
/// back; with flushed acknowledgements none is paced (each batch flushes anyway).
#[test]
fn plp_writes_pace_device_flushes() {
    let pages = 8 * flush_pacing::FLUSH_PACE_PAGES;
    for plp in [true, false] {
        let db = ram_engine(EngineConfig {
            ack_from_dram: plp,
            flush_writes: !plp,
            ..EngineConfig::default()
        });
        let value = vec![5u8; 8000];
        for i in 0..pages {
            let key = format!("k{i:05}");
            db.write(&[WriteOp::Put(key.as_bytes(), &value)]).unwrap();
        }
        db.sync().unwrap();
        let s = db.stats();
        if plp {
            let most = (pages / flush_pacing::FLUSH_PACE_PAGES) as u64;
            assert!(
                (1..=most).contains(&s.paced_flushes),
                "{} paced flushes for {pages} pages",
                s.paced_flushes
            );
        } else {
            assert_eq!(s.paced_flushes, 0);
        }
        assert_eq!(s.paced_flush_errors, 0);
        assert_eq!(db.get(b"k00000").unwrap().as_deref(), Some(&value[..]));
    }
}

/// A durable batch dropped unfinished is finished by its drop: the batches started after it
/// are claimed, `flush` drains, and its value is there (before, every later batch waited
/// for it for ever).
#[test]
fn a_batch_dropped_unfinished_does_not_wedge_the_pipeline() {
    let db = Arc::new(ram_engine(EngineConfig::default()));
    let first = db
        .try_submit_write(&[WriteOp::Put(b"dropped", b"one")])
        .unwrap()
        .expect("an empty pipeline admits a batch");
    assert!(matches!(first.state, PendingState::OnDevice { .. }));
    let second = db
        .try_submit_write(&[WriteOp::Put(b"finished", b"two")])
        .unwrap()
        .expect("a small batch pipelines behind another");
    drop(first);
    let finisher = {
        let db = db.clone();
        std::thread::spawn(move || {
            db.finish_write(second)?;
            db.flush()
        })
    };
    let since = std::time::Instant::now();
    while !finisher.is_finished() {
        assert!(
            since.elapsed() < std::time::Duration::from_secs(20),
            "a batch behind a dropped one never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    finisher.join().unwrap().unwrap();
    assert_eq!(db.get(b"dropped").unwrap(), Some(b"one".to_vec()));
    assert_eq!(db.get(b"finished").unwrap(), Some(b"two".to_vec()));
}
