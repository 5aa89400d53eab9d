//! The volatile write cache of the RAM backend ([`DeviceConfig::volatile_cache`]): a power cut
//! loses every completed program not covered by a completed FLUSH, and recovery treats the
//! lost pages exactly like programs that never happened. With the option off, a completed
//! write survives a cut without any flush.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use hwftl_sim::{
    AppendDevice, Backend, Command, DeviceConfig, DeviceError, Ftl, Geometry, Lba, PageBuf,
    RamStore, SegmentId, SegmentState, Wait,
};

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 8,
        pages_per_block: 4,
        spare_blocks_per_chip: 1,
    }
}

fn cfg(volatile_cache: bool) -> DeviceConfig {
    DeviceConfig {
        volatile_cache,
        ..DeviceConfig::new(geometry())
    }
}

fn page(tag: u64) -> PageBuf {
    PageBuf::from_slice(&tag.to_le_bytes().repeat(64))
}

fn fresh(volatile_cache: bool) -> (RamStore, Ftl) {
    let store = RamStore::new();
    let dev = Ftl::format(&Backend::Ram(store.clone()), cfg(volatile_cache)).unwrap();
    (store, dev)
}

/// Cuts the power and opens the store again with the same configuration.
fn cut_and_reopen(dev: Ftl, store: &RamStore) -> Ftl {
    let volatile_cache = dev.config().volatile_cache;
    dev.power_cut();
    drop(dev);
    Ftl::open(&Backend::Ram(store.clone()), cfg(volatile_cache)).unwrap()
}

fn write(dev: &Ftl, lba: u64) {
    dev.execute(Command::Write {
        lba: Lba(lba),
        buf: page(lba),
    })
    .unwrap()
    .result
    .unwrap();
}

fn submit_write(dev: &Ftl, lba: u64) {
    dev.submit(Command::Write {
        lba: Lba(lba),
        buf: page(lba),
    })
    .unwrap();
}

fn flush(dev: &Ftl) {
    dev.execute(Command::Flush).unwrap().result.unwrap();
}

fn read(dev: &Ftl, lba: u64) -> Result<PageBuf, DeviceError> {
    let c = dev
        .execute(Command::Read {
            lba: Lba(lba),
            buf: PageBuf::zeroed(),
        })
        .map_err(|r| r.error)?;
    Ok(c.into_buf()?.expect("a read returns its buffer"))
}

fn assert_unwritten(dev: &Ftl, lba: u64) {
    let r = read(dev, lba);
    assert!(
        matches!(r, Err(DeviceError::Unwritten { lba: l }) if l == Lba(lba)),
        "LBA {lba}: {r:?}"
    );
}

fn reap_all(dev: &Ftl) {
    let mut out = Vec::new();
    while dev.in_flight() > 0 {
        dev.reap(&mut out, 64, Wait::Block).unwrap();
    }
    for c in out {
        c.result.unwrap();
    }
}

#[test]
fn completed_writes_without_a_flush_are_lost_at_a_power_cut() {
    let (store, dev) = fresh(true);
    for i in 0..6 {
        write(&dev, i);
    }
    // Readable until the cut: the cache serves them.
    assert_eq!(read(&dev, 5).unwrap(), page(5));
    let dev = cut_and_reopen(dev, &store);
    for i in 0..6 {
        assert_unwritten(&dev, i);
    }
    let info = dev.segment_info(SegmentId(0)).unwrap();
    assert_eq!((info.state, info.write_pointer), (SegmentState::Open, 0));
    assert_eq!(store.resident_bytes(), 0, "lost pages read as erased");
    // The segment takes writes again from its first page.
    write(&dev, 0);
    assert_eq!(read(&dev, 0).unwrap(), page(0));
}

#[test]
fn exactly_the_flushed_writes_survive_a_power_cut() {
    let (store, dev) = fresh(true);
    for i in 0..5 {
        write(&dev, i);
    }
    flush(&dev);
    for i in 5..9 {
        write(&dev, i);
    }
    let dev = cut_and_reopen(dev, &store);
    for i in 0..5 {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
    for i in 5..9 {
        assert_unwritten(&dev, i);
    }
    assert_eq!(dev.segment_info(SegmentId(0)).unwrap().write_pointer, 5);
    assert_eq!(dev.stats().flushes, 0, "counters start over");
    // What survived is durable for good: a second cut keeps it.
    let dev = cut_and_reopen(dev, &store);
    for i in 0..5 {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
}

#[test]
fn a_flush_covers_only_writes_delivered_before_its_submission() {
    let (store, dev) = fresh(true);
    write(&dev, 0);
    // Pages 1..4 are submitted (and done on the media) but delivered after the flush.
    for i in 1..4 {
        submit_write(&dev, i);
    }
    flush(&dev);
    reap_all(&dev);
    let dev = cut_and_reopen(dev, &store);
    assert_eq!(read(&dev, 0).unwrap(), page(0));
    for i in 1..4 {
        assert_unwritten(&dev, i);
    }
    assert_eq!(dev.segment_info(SegmentId(0)).unwrap().write_pointer, 1);
}

#[test]
fn a_flush_cut_before_its_completion_covers_nothing() {
    let (store, dev) = fresh(true);
    for i in 0..3 {
        write(&dev, i);
    }
    dev.submit(Command::Flush).unwrap();
    let dev = cut_and_reopen(dev, &store);
    for i in 0..3 {
        assert_unwritten(&dev, i);
    }
}

#[test]
fn unflushed_pages_below_a_flushed_one_become_holes() {
    let (store, dev) = fresh(true);
    for i in 0..3 {
        submit_write(&dev, i);
    }
    // Page 3 is delivered first and flushed; 0..3 are delivered after the flush.
    write(&dev, 3);
    flush(&dev);
    reap_all(&dev);
    let dev = cut_and_reopen(dev, &store);
    for i in 0..3 {
        assert_unwritten(&dev, i);
    }
    assert_eq!(read(&dev, 3).unwrap(), page(3));
    assert_eq!(dev.segment_info(SegmentId(0)).unwrap().write_pointer, 4);
}

#[test]
fn a_full_segment_that_lost_pages_is_open_again() {
    let (store, dev) = fresh(true);
    let pages = dev.geometry().pages_per_segment();
    for i in 0..10u32 {
        write(&dev, u64::from(i));
    }
    flush(&dev);
    for i in 10..pages {
        write(&dev, u64::from(i));
    }
    // The FTL records the segment as full (in memory: its tables on the media say so from
    // the next table write on, and recovery's scan finds it full meanwhile).
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::Full
    );
    let dev = cut_and_reopen(dev, &store);
    let info = dev.segment_info(SegmentId(0)).unwrap();
    assert_eq!((info.state, info.write_pointer), (SegmentState::Open, 10));
    for i in 0..10 {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
    for i in 10..pages {
        assert_unwritten(&dev, u64::from(i));
    }
    // The lost tail is written again, and this time flushed: full for good.
    for i in 10..pages {
        write(&dev, u64::from(i));
    }
    flush(&dev);
    let dev = cut_and_reopen(dev, &store);
    let info = dev.segment_info(SegmentId(0)).unwrap();
    assert_eq!(
        (info.state, info.write_pointer),
        (SegmentState::Full, pages)
    );
    for i in 0..pages {
        assert_eq!(read(&dev, u64::from(i)).unwrap(), page(u64::from(i)));
    }
}

#[test]
fn trim_and_segment_opening_are_durable_without_a_flush() {
    let (store, dev) = fresh(true);
    let g = dev.geometry();
    let s1 = g.segment_start(SegmentId(1)).0;
    write(&dev, s1);
    flush(&dev);
    dev.execute(Command::Trim {
        segment: SegmentId(1),
    })
    .unwrap()
    .result
    .unwrap();
    // Opening segment 2 persists the tables; its page stays in the cache.
    let s2 = g.segment_start(SegmentId(2)).0;
    write(&dev, s2);
    let dev = cut_and_reopen(dev, &store);
    let info1 = dev.segment_info(SegmentId(1)).unwrap();
    assert_eq!(info1.state, SegmentState::Free);
    assert_unwritten(&dev, s1);
    let info2 = dev.segment_info(SegmentId(2)).unwrap();
    assert_eq!((info2.state, info2.write_pointer), (SegmentState::Open, 0));
    assert_unwritten(&dev, s2);
}

#[test]
fn a_trimmed_and_rewritten_segment_keeps_its_flushed_pages() {
    // Pages trimmed while still in the cache, their blocks reused by later writes: the cut
    // keeps exactly what was flushed last. Every segment is written, trimmed and rewritten a
    // few times, so that blocks are reused.
    let (store, dev) = fresh(true);
    let g = dev.geometry();
    for _ in 0..3 {
        for s in 0..g.segments() {
            let first = g.segment_start(SegmentId(s)).0;
            write(&dev, first);
            write(&dev, first + 1);
            dev.execute(Command::Trim {
                segment: SegmentId(s),
            })
            .unwrap()
            .result
            .unwrap();
        }
    }
    for s in 0..g.segments() {
        write(&dev, g.segment_start(SegmentId(s)).0);
    }
    flush(&dev);
    let dev = cut_and_reopen(dev, &store);
    for s in 0..g.segments() {
        let first = g.segment_start(SegmentId(s)).0;
        assert_eq!(read(&dev, first).unwrap(), page(first));
        assert_unwritten(&dev, first + 1);
        assert_eq!(dev.segment_info(SegmentId(s)).unwrap().write_pointer, 1);
    }
}

#[test]
fn a_clean_close_flushes_the_cache() {
    let (store, dev) = fresh(true);
    for i in 0..4 {
        write(&dev, i);
    }
    dev.close().unwrap();
    let dev = Ftl::open(&Backend::Ram(store.clone()), cfg(true)).unwrap();
    // Cut at once: what the close made durable stays.
    let dev = cut_and_reopen(dev, &store);
    for i in 0..4 {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
    assert_eq!(dev.segment_info(SegmentId(0)).unwrap().write_pointer, 4);
}

#[test]
fn without_the_cache_completed_writes_survive_without_a_flush() {
    assert!(
        !DeviceConfig::new(geometry()).volatile_cache,
        "off by default"
    );
    let (store, dev) = fresh(false);
    let pages = dev.geometry().pages_per_segment();
    for i in 0..pages + 3 {
        write(&dev, u64::from(i));
    }
    submit_write(&dev, u64::from(pages + 3));
    let dev = cut_and_reopen(dev, &store);
    for i in 0..pages + 3 {
        assert_eq!(read(&dev, u64::from(i)).unwrap(), page(u64::from(i)));
    }
    // Only the write in flight at the cut is lost.
    assert_unwritten(&dev, u64::from(pages + 3));
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::Full
    );
    assert_eq!(dev.segment_info(SegmentId(1)).unwrap().write_pointer, 3);
}

/// A segment filled whole costs no table write of its own: the full record rides on the next
/// table write (the next segment's opening), and a stop before that leaves it to recovery's
/// scan, which finds the segment full, on either cache setting.
#[test]
fn a_filled_segment_costs_no_table_write_and_recovery_finds_it_full() {
    for volatile_cache in [false, true] {
        let (store, dev) = fresh(volatile_cache);
        let pages = u64::from(dev.geometry().pages_per_segment());
        write(&dev, 0);
        let opened = dev.stats().table_writes;
        for i in 1..pages {
            write(&dev, i);
        }
        flush(&dev);
        assert_eq!(
            dev.segment_info(SegmentId(0)).unwrap().state,
            SegmentState::Full
        );
        assert_eq!(dev.stats().table_writes, opened, "filling wrote the tables");
        let dev = cut_and_reopen(dev, &store);
        let info = dev.segment_info(SegmentId(0)).unwrap();
        assert_eq!(
            (info.state, info.write_pointer),
            (SegmentState::Full, dev.geometry().pages_per_segment())
        );
        for i in 0..pages {
            assert_eq!(read(&dev, i).unwrap(), page(i));
        }
        // The next segment's opening records the first as full on the media.
        write(&dev, pages);
        assert_eq!(dev.stats().table_writes, 2, "the open's and the opening's");
        let dev = cut_and_reopen(dev, &store);
        assert_eq!(
            dev.segment_info(SegmentId(0)).unwrap().state,
            SegmentState::Full
        );
    }
}
