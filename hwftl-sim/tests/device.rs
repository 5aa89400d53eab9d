//! Behaviour of the append-only device through its public interface, on the RAM backend:
//! the append-only rule, errors, tables across reopen and power cut, bad blocks, wear.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use hwftl_sim::{
    AppendDevice, Backend, Command, DeviceConfig, DeviceError, FaultTarget, Ftl, Geometry, Lba,
    PageBuf, RamStore, SegmentId, SegmentState, Wait,
};

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 12,
        pages_per_block: 4,
        spare_blocks_per_chip: 2,
    }
}

fn page(tag: u64) -> PageBuf {
    let mut p = PageBuf::zeroed();
    for (i, chunk) in p.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&(tag.wrapping_mul(0x9e37_79b9) ^ i as u64).to_le_bytes());
    }
    p
}

fn fresh() -> (RamStore, Ftl) {
    let store = RamStore::new();
    let dev = Ftl::format(&Backend::Ram(store.clone()), DeviceConfig::new(geometry())).unwrap();
    (store, dev)
}

fn reopen(store: &RamStore) -> Ftl {
    Ftl::open(&Backend::Ram(store.clone()), DeviceConfig::new(geometry())).unwrap()
}

fn write(dev: &Ftl, lba: u64, tag: u64) -> Result<(), DeviceError> {
    dev.execute(Command::Write {
        lba: Lba(lba),
        buf: page(tag),
    })?
    .result
}

fn read(dev: &Ftl, lba: u64) -> Result<PageBuf, DeviceError> {
    let c = dev.execute(Command::Read {
        lba: Lba(lba),
        buf: PageBuf::zeroed(),
    })?;
    Ok(c.into_buf()?.expect("read returns its buffer"))
}

fn trim(dev: &Ftl, seg: u32) -> Result<(), DeviceError> {
    dev.execute(Command::Trim {
        segment: SegmentId(seg),
    })?
    .result
}

#[test]
fn append_only_rule_is_enforced_and_nothing_written_is_lost() {
    let (_s, dev) = fresh();
    let g = dev.geometry();
    for i in 0..3 {
        write(&dev, i, i).unwrap();
    }
    // Ahead of the write pointer, behind it (overwrite), and into another segment's middle.
    for bad in [5u64, 1, g.segment_start(SegmentId(1)).0 + 2] {
        match write(&dev, bad, 99) {
            Err(DeviceError::NotAtWritePointer { write_pointer, .. }) => {
                assert!(write_pointer == 3 || write_pointer == 0)
            }
            other => panic!("write at {bad} gave {other:?}"),
        }
    }
    for i in 0..3 {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
    // Fill the segment, then one more is refused.
    for i in 3..u64::from(g.pages_per_segment()) {
        write(&dev, i, i).unwrap();
    }
    let c = dev
        .execute(Command::Append {
            segment: SegmentId(0),
            buf: page(0),
        })
        .unwrap_err();
    assert!(matches!(c.error, DeviceError::SegmentFull { .. }), "{c:?}");
    assert!(c.buf.is_some(), "a refused command hands its buffer back");
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::Full
    );
}

#[test]
fn append_returns_the_address_it_got() {
    let (_s, dev) = fresh();
    let g = dev.geometry();
    for i in 0..5u64 {
        let c = dev
            .execute(Command::Append {
                segment: SegmentId(2),
                buf: page(i),
            })
            .unwrap();
        assert_eq!(c.lba, Some(g.lba(SegmentId(2), i as u32)));
    }
    assert_eq!(read(&dev, g.lba(SegmentId(2), 4).0).unwrap(), page(4));
}

#[test]
fn bad_reads_and_addresses_give_typed_errors() {
    let (_s, dev) = fresh();
    let g = dev.geometry();
    assert!(matches!(read(&dev, 0), Err(DeviceError::Unwritten { .. })));
    write(&dev, 0, 1).unwrap();
    assert!(matches!(read(&dev, 1), Err(DeviceError::Unwritten { .. })));
    assert!(matches!(
        read(&dev, g.lbas()),
        Err(DeviceError::OutOfRange { .. })
    ));
    assert!(matches!(
        write(&dev, g.lbas() + 7, 1),
        Err(DeviceError::OutOfRange { .. })
    ));
    assert!(matches!(
        trim(&dev, g.segments()),
        Err(DeviceError::SegmentOutOfRange { .. })
    ));
    trim(&dev, 0).unwrap();
    assert!(matches!(read(&dev, 0), Err(DeviceError::Unwritten { .. })));
    // A trimmed segment starts again at page 0.
    write(&dev, 0, 2).unwrap();
    assert_eq!(read(&dev, 0).unwrap(), page(2));
    // Error messages say what happened.
    let msg = write(&dev, 3, 0).unwrap_err().to_string();
    assert!(msg.contains("append-only"), "{msg}");
}

#[test]
fn queue_full_hands_the_buffer_back_and_trim_of_a_busy_segment_is_refused() {
    let store = RamStore::new();
    let mut cfg = DeviceConfig::new(geometry());
    cfg.queue_depth = 4;
    let dev = Ftl::format(&Backend::Ram(store), cfg).unwrap();
    for i in 0..4u64 {
        dev.submit(Command::Append {
            segment: SegmentId(0),
            buf: page(i),
        })
        .unwrap();
    }
    let r = dev
        .submit(Command::Append {
            segment: SegmentId(0),
            buf: page(9),
        })
        .unwrap_err();
    assert!(matches!(r.error, DeviceError::QueueFull { depth: 4 }));
    assert_eq!(r.buf, Some(page(9)));
    assert_eq!(dev.in_flight(), 4);
    let t = dev.submit(Command::Trim {
        segment: SegmentId(0),
    });
    // Queue is full, so the trim cannot even get a tag; drain one and retry.
    assert!(t.is_err());
    let mut out = Vec::new();
    assert_eq!(dev.reap(&mut out, 1, Wait::Block).unwrap(), 1);
    let t = dev
        .submit(Command::Trim {
            segment: SegmentId(0),
        })
        .unwrap_err();
    assert!(matches!(
        t.error,
        DeviceError::SegmentBusy { in_flight: 3, .. }
    ));
    while dev.in_flight() > 0 {
        dev.reap(&mut out, 16, Wait::Block).unwrap();
    }
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(|c| c.result.is_ok()));
    // Nothing in flight: a blocking reap returns at once.
    assert_eq!(dev.reap(&mut out, 1, Wait::Block).unwrap(), 0);
}

#[test]
fn tables_and_data_survive_a_clean_reopen() {
    let (store, dev) = fresh();
    let g = dev.geometry();
    for i in 0..6 {
        write(&dev, i, i).unwrap();
    }
    let s3 = g.segment_start(SegmentId(3)).0;
    write(&dev, s3, 33).unwrap();
    trim(&dev, 3).unwrap();
    let before = dev.stats();
    dev.close().unwrap();
    let dev = reopen(&store);
    for i in 0..6 {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
    assert_eq!(dev.segment_info(SegmentId(0)).unwrap().write_pointer, 6);
    assert_eq!(
        dev.segment_info(SegmentId(3)).unwrap().state,
        SegmentState::Free
    );
    let after = dev.stats();
    assert_eq!((after.pe_min, after.pe_max), (before.pe_min, before.pe_max));
    // The next write continues at the write pointer.
    write(&dev, 6, 6).unwrap();
    assert!(matches!(
        write(&dev, 5, 5),
        Err(DeviceError::NotAtWritePointer { .. })
    ));
}

#[test]
fn power_cut_keeps_completed_writes_and_loses_the_rest() {
    let (store, dev) = fresh();
    let g = dev.geometry();
    for i in 0..5 {
        write(&dev, i, i).unwrap();
    }
    // Five more submitted but never reaped: in flight at the cut.
    for i in 5..10u64 {
        dev.submit(Command::Write {
            lba: Lba(i),
            buf: page(i),
        })
        .unwrap();
    }
    // Segment 1 opened and trimmed before the cut stays trimmed.
    let s1 = g.segment_start(SegmentId(1)).0;
    write(&dev, s1, 7).unwrap();
    trim(&dev, 1).unwrap();
    dev.power_cut();
    assert!(matches!(read(&dev, 0), Err(DeviceError::PoweredOff)));
    drop(dev);

    let dev = reopen(&store);
    for i in 0..5 {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
    for i in 5..10 {
        assert!(matches!(read(&dev, i), Err(DeviceError::Unwritten { .. })));
    }
    let info = dev.segment_info(SegmentId(0)).unwrap();
    assert_eq!(info.write_pointer, 5);
    assert_eq!(
        dev.segment_info(SegmentId(1)).unwrap().state,
        SegmentState::Free
    );
    write(&dev, 5, 55).unwrap();
    assert_eq!(read(&dev, 5).unwrap(), page(55));
}

#[test]
fn power_cut_with_holes_marks_the_lost_pages_unwritten() {
    let (store, dev) = fresh();
    // Pages 0..3 submitted and never delivered; page 3 delivered (execute waits for its own
    // completion only). The cut loses 0..3 and keeps 3: holes below the write pointer.
    for i in 0..3u64 {
        dev.submit(Command::Write {
            lba: Lba(i),
            buf: page(i),
        })
        .unwrap();
    }
    write(&dev, 3, 3).unwrap();
    dev.power_cut();
    drop(dev);
    let dev = reopen(&store);
    for i in 0..3u64 {
        let r = read(&dev, i);
        assert!(matches!(r, Err(DeviceError::Unwritten { .. })), "{r:?}");
    }
    assert_eq!(read(&dev, 3).unwrap(), page(3));
    assert_eq!(dev.segment_info(SegmentId(0)).unwrap().write_pointer, 4);
    // Holes are remembered until the segment is trimmed, across a clean close too.
    dev.close().unwrap();
    let dev = reopen(&store);
    assert!(matches!(read(&dev, 1), Err(DeviceError::Unwritten { .. })));
    trim(&dev, 0).unwrap();
    write(&dev, 0, 9).unwrap();
    assert_eq!(read(&dev, 0).unwrap(), page(9));
}

#[test]
fn a_failed_program_retires_the_block_and_closes_the_segment() {
    let (store, dev) = fresh();
    let g = dev.geometry();
    for i in 0..3 {
        write(&dev, i, i).unwrap();
    }
    dev.faults().fail_next_program(FaultTarget::Lba(Lba(3)));
    let err = write(&dev, 3, 3).unwrap_err();
    let (chip, block) = match err {
        DeviceError::ProgramFailed { chip, block, .. } => (chip, block),
        other => panic!("{other:?}"),
    };
    assert_eq!(chip, 3);
    assert_eq!(dev.stats().bad_blocks, 1);
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::ReadOnly
    );
    assert!(matches!(
        write(&dev, 3, 3),
        Err(DeviceError::SegmentReadOnly { .. })
    ));
    // What was written before stays readable, across a power cut too.
    dev.power_cut();
    drop(dev);
    let dev = reopen(&store);
    for i in 0..3 {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
    assert!(matches!(read(&dev, 3), Err(DeviceError::Unwritten { .. })));
    assert_eq!(dev.stats().bad_blocks, 1);
    // After TRIM, the bad block is never allocated again: open every segment, fill it, trim it,
    // several rounds, and check the retired block's page is never the one a write lands on.
    trim(&dev, 0).unwrap();
    for round in 0..3 {
        for seg in 0..g.segments() {
            for o in 0..g.pages_per_segment() {
                write(&dev, g.lba(SegmentId(seg), o).0, u64::from(o + round)).unwrap();
            }
        }
        for seg in 0..g.segments() {
            trim(&dev, seg).unwrap();
        }
    }
    assert_eq!(dev.stats().bad_blocks, 1);
    let _ = block;
}

#[test]
fn a_failed_erase_retires_the_block_but_frees_the_segment() {
    let (_s, dev) = fresh();
    write(&dev, 0, 0).unwrap();
    dev.faults()
        .fail_next_erase(FaultTarget::Segment(SegmentId(0)));
    let err = trim(&dev, 0).unwrap_err();
    assert!(
        matches!(err, DeviceError::EraseFailed { chip: 0, .. }),
        "{err}"
    );
    assert_eq!(dev.stats().bad_blocks, 1);
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::Free
    );
    assert!(matches!(read(&dev, 0), Err(DeviceError::Unwritten { .. })));
    write(&dev, 0, 1).unwrap();
    assert_eq!(read(&dev, 0).unwrap(), page(1));
}

#[test]
fn spares_run_out_with_a_clear_error() {
    let (_s, dev) = fresh();
    let g = dev.geometry();
    // Retire every block of chip 0 but what the logical segments need, minus one.
    for _ in 0..=g.spare_blocks_per_chip {
        write(&dev, 0, 0).unwrap();
        dev.faults()
            .fail_next_erase(FaultTarget::Segment(SegmentId(0)));
        assert!(trim(&dev, 0).is_err());
    }
    // Now chip 0 has one block fewer than there are segments: the last segment cannot open.
    for seg in 0..g.segments() - 1 {
        write(&dev, g.segment_start(SegmentId(seg)).0, 1).unwrap();
    }
    let last = g.segment_start(SegmentId(g.segments() - 1)).0;
    let err = write(&dev, last, 1).unwrap_err();
    assert!(
        matches!(err, DeviceError::NoSpareBlocks { chip: 0, .. }),
        "{err}"
    );
    // Everything stored stays readable.
    for seg in 0..g.segments() - 1 {
        assert_eq!(
            read(&dev, g.segment_start(SegmentId(seg)).0).unwrap(),
            page(1)
        );
    }
}

#[test]
fn a_failed_read_reports_and_the_next_read_works() {
    let (_s, dev) = fresh();
    write(&dev, 0, 4).unwrap();
    dev.faults().fail_next_read(FaultTarget::Any);
    assert!(matches!(read(&dev, 0), Err(DeviceError::ReadFailed { .. })));
    assert_eq!(read(&dev, 0).unwrap(), page(4));
}

#[test]
fn a_corrupted_page_reads_back_different() {
    let (_s, dev) = fresh();
    write(&dev, 0, 4).unwrap();
    dev.corrupt_page(Lba(0), 100).unwrap();
    let got = read(&dev, 0).unwrap();
    assert_ne!(got, page(4));
    assert_eq!(got[100] ^ page(4)[100], 1);
}

#[test]
fn wear_stays_level_over_many_cycles() {
    let (_s, dev) = fresh();
    let g = dev.geometry();
    // 200 cycles of open/write/trim on only three hot segments: least-worn-first allocation
    // spreads them over every block of each chip.
    for cycle in 0..200u32 {
        let seg = 1 + cycle % 3;
        write(&dev, g.segment_start(SegmentId(seg)).0, 2).unwrap();
        trim(&dev, seg).unwrap();
    }
    let s = dev.stats();
    assert!(s.pe_max - s.pe_min <= 1, "pe {}..{}", s.pe_min, s.pe_max);
    assert_eq!(s.pe_max, 200u32.div_ceil(g.blocks_per_chip));

    // With a segment of cold data pinned, the other blocks still share the cycles evenly:
    // 120 more cycles over the 11 remaining blocks of each chip.
    for o in 0..g.pages_per_segment() {
        write(&dev, u64::from(o), 1).unwrap();
    }
    let before = dev.stats().pe_max;
    for cycle in 0..120u32 {
        let seg = 1 + cycle % 3;
        write(&dev, g.segment_start(SegmentId(seg)).0, 2).unwrap();
        trim(&dev, seg).unwrap();
    }
    let s = dev.stats();
    assert!(
        s.pe_max <= before + 120u32.div_ceil(g.blocks_per_chip - 1) + 1,
        "pe_max {} (was {before})",
        s.pe_max
    );
}

#[test]
fn geometry_mismatch_and_unformatted_media_are_refused() {
    let (store, dev) = fresh();
    dev.close().unwrap();
    let mut other = geometry();
    other.pages_per_block = 8;
    let err = Ftl::open(&Backend::Ram(store.clone()), DeviceConfig::new(other))
        .err()
        .unwrap();
    assert!(matches!(err, DeviceError::GeometryMismatch { .. }), "{err}");
    let err = Ftl::open(
        &Backend::Ram(RamStore::new()),
        DeviceConfig::new(geometry()),
    )
    .err()
    .unwrap();
    assert!(matches!(err, DeviceError::NotFormatted), "{err}");
    assert_eq!(Ftl::probe(&Backend::Ram(store)).unwrap(), geometry());
}

#[test]
fn many_threads_submit_while_one_polls() {
    let (_s, dev) = fresh();
    let dev = std::sync::Arc::new(dev);
    let g = dev.geometry();
    let writers: Vec<_> = (0..4u32)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                for _ in 0..g.pages_per_segment() {
                    loop {
                        match dev.submit(Command::Append {
                            segment: SegmentId(t),
                            buf: page(u64::from(t)),
                        }) {
                            Ok(_) => break,
                            Err(r) if matches!(r.error, DeviceError::QueueFull { .. }) => {
                                std::thread::yield_now()
                            }
                            Err(r) => panic!("{r:?}"),
                        }
                    }
                }
            })
        })
        .collect();
    let total = 4 * g.pages_per_segment() as usize;
    let mut out = Vec::new();
    while out.len() < total {
        dev.reap(&mut out, 64, Wait::Spin).unwrap();
    }
    for w in writers {
        w.join().unwrap();
    }
    assert!(out.iter().all(|c| c.result.is_ok()));
    for t in 0..4u32 {
        let info = dev.segment_info(SegmentId(t)).unwrap();
        assert_eq!(info.state, SegmentState::Full);
        assert_eq!(
            read(&dev, g.lba(SegmentId(t), 7).0).unwrap(),
            page(u64::from(t))
        );
    }
}

#[test]
fn execute_many_runs_more_commands_than_the_queue_holds_beside_other_users() {
    let store = RamStore::new();
    let mut cfg = DeviceConfig::new(geometry());
    cfg.queue_depth = 4;
    let dev = std::sync::Arc::new(Ftl::format(&Backend::Ram(store), cfg).unwrap());
    let g = dev.geometry();
    let pps = u64::from(g.pages_per_segment());
    let writes: Vec<Command> = (0..pps)
        .map(|i| Command::Write {
            lba: Lba(i),
            buf: page(i),
        })
        .collect();
    assert!(dev
        .execute_many(writes)
        .iter()
        .all(|r| r.as_ref().unwrap().result.is_ok()));
    // Readers with execute_many, while a writer appends through submit/reap.
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    let reads: Vec<Command> = (0..pps)
                        .map(|i| Command::Read {
                            lba: Lba(i),
                            buf: PageBuf::zeroed(),
                        })
                        .collect();
                    for (i, r) in dev.execute_many(reads).into_iter().enumerate() {
                        let buf = r.unwrap().into_buf().unwrap().unwrap();
                        assert_eq!(buf, page(i as u64));
                    }
                }
            })
        })
        .collect();
    let mut out = Vec::new();
    for i in 0..pps {
        loop {
            match dev.submit(Command::Append {
                segment: SegmentId(1),
                buf: page(100 + i),
            }) {
                Ok(_) => break,
                Err(r) if matches!(r.error, DeviceError::QueueFull { .. }) => {
                    dev.reap(&mut out, 4, Wait::NoWait).unwrap();
                    std::thread::yield_now();
                }
                Err(r) => panic!("{r:?}"),
            }
        }
    }
    while out.len() < pps as usize {
        dev.reap(&mut out, 4, Wait::Block).unwrap();
    }
    for r in readers {
        r.join().unwrap();
    }
    assert!(out.iter().all(|c| c.result.is_ok()));
}
