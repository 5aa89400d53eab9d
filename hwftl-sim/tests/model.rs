//! Property test: random appends, reads, trims, flushes, unreaped submissions, clean reopens
//! and power cuts on the RAM backend, checked against a simple model of what each page must
//! hold; with and without a volatile write cache.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};

use hwftl_sim::{
    AppendDevice, Backend, Command, DeviceConfig, DeviceError, Ftl, Geometry, Lba, PageBuf,
    RamStore, SegmentId, Wait,
};
use proptest::prelude::*;

const SEGMENTS: u32 = 4;

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 1,
        blocks_per_chip: SEGMENTS + 1,
        pages_per_block: 3,
        spare_blocks_per_chip: 1,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Append(u32),
    SubmitOnly(u32),
    ReapAll,
    Read(u32, u32),
    Trim(u32),
    Flush,
    PowerCut,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SEGMENTS).prop_map(Op::Append),
        2 => (0..SEGMENTS).prop_map(Op::SubmitOnly),
        1 => Just(Op::ReapAll),
        4 => (0..SEGMENTS, 0..6u32).prop_map(|(s, o)| Op::Read(s, o)),
        1 => (0..SEGMENTS).prop_map(Op::Trim),
        1 => Just(Op::Flush),
        1 => Just(Op::PowerCut),
        1 => Just(Op::Reopen),
    ]
}

/// What the model knows of a segment.
#[derive(Debug, Default, Clone)]
struct Seg {
    wp: u32,
    /// offset -> data tag, for completed writes.
    written: BTreeMap<u32, u64>,
    /// offset -> data tag, for submitted writes not yet delivered.
    pending: BTreeMap<u32, u64>,
    /// Offsets of completed writes still in the volatile write cache (cache on only).
    unflushed: BTreeSet<u32>,
}

fn page(tag: u64) -> PageBuf {
    PageBuf::from_slice(&tag.to_le_bytes().repeat(16))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn device_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        check(ops, false)?;
    }

    #[test]
    fn device_with_a_volatile_cache_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        check(ops, true)?;
    }
}

fn check(ops: Vec<Op>, volatile: bool) -> Result<(), TestCaseError> {
    let g = geometry();
    let pps = g.pages_per_segment();
    let store = RamStore::new();
    let backend = Backend::Ram(store.clone());
    let cfg = DeviceConfig {
        volatile_cache: volatile,
        ..DeviceConfig::new(g)
    };
    let mut dev = Ftl::format(&backend, cfg).unwrap();
    let mut model: Vec<Seg> = vec![Seg::default(); SEGMENTS as usize];
    let mut next_tag = 1u64;
    for op in ops {
        match op {
            Op::Append(s) | Op::SubmitOnly(s) => {
                let m = &mut model[s as usize];
                let tag = next_tag;
                next_tag += 1;
                let cmd = Command::Append {
                    segment: SegmentId(s),
                    buf: page(tag),
                };
                let sync = matches!(op, Op::Append(_));
                let result = if sync {
                    dev.execute(cmd).map(|c| c.result.map(|()| c.lba))
                } else {
                    dev.submit(cmd).map(|_| Ok(None))
                };
                if m.wp == pps {
                    let err = match result {
                        Err(r) => r.error,
                        Ok(Err(e)) => e,
                        Ok(Ok(_)) => panic!("append to a full segment"),
                    };
                    prop_assert!(matches!(err, DeviceError::SegmentFull { .. }), "{err}");
                } else {
                    let lba = result.unwrap().unwrap();
                    if sync {
                        prop_assert_eq!(lba, Some(g.lba(SegmentId(s), m.wp)));
                        m.written.insert(m.wp, tag);
                        if volatile {
                            m.unflushed.insert(m.wp);
                        }
                    } else {
                        m.pending.insert(m.wp, tag);
                    }
                    m.wp += 1;
                }
            }
            Op::ReapAll => {
                let mut out = Vec::new();
                while dev.in_flight() > 0 {
                    dev.reap(&mut out, 64, Wait::Block).unwrap();
                }
                for c in out {
                    c.result.unwrap();
                    let (seg, off) = g.locate(c.lba.unwrap()).unwrap();
                    let m = &mut model[seg.0 as usize];
                    let tag = m.pending.remove(&off).unwrap();
                    m.written.insert(off, tag);
                    if volatile {
                        m.unflushed.insert(off);
                    }
                }
            }
            Op::Read(s, o) => {
                let lba = g.lba(SegmentId(s), o % pps);
                let got = dev.execute(Command::Read {
                    lba,
                    buf: PageBuf::zeroed(),
                });
                let m = &model[s as usize];
                let off = o % pps;
                match m.written.get(&off).or(m.pending.get(&off)) {
                    Some(tag) => {
                        let buf = got.unwrap().into_buf().unwrap().unwrap();
                        prop_assert_eq!(buf, page(*tag));
                    }
                    None => {
                        let err = match got {
                            Err(r) => r.error,
                            Ok(c) => c.result.unwrap_err(),
                        };
                        prop_assert!(matches!(err, DeviceError::Unwritten { .. }), "{err}");
                    }
                }
            }
            Op::Trim(s) => {
                let m = &mut model[s as usize];
                let r = dev.execute(Command::Trim {
                    segment: SegmentId(s),
                });
                if m.pending.is_empty() {
                    r.unwrap().result.unwrap();
                    *m = Seg::default();
                } else {
                    let err = r.unwrap_err().error;
                    prop_assert!(matches!(err, DeviceError::SegmentBusy { .. }), "{err}");
                }
            }
            Op::Flush => {
                dev.execute(Command::Flush).unwrap().result.unwrap();
                // Covers every write delivered before it, not those still pending.
                for m in model.iter_mut() {
                    m.unflushed.clear();
                }
            }
            Op::PowerCut => {
                dev.power_cut();
                drop(dev);
                dev = Ftl::open(&backend, cfg).unwrap();
                for m in model.iter_mut() {
                    m.pending.clear();
                    // Lost from the volatile write cache: as if never written.
                    for off in std::mem::take(&mut m.unflushed) {
                        m.written.remove(&off);
                    }
                    // Full segments are trusted; others recover to just past the last
                    // completed page.
                    if m.written.len() as u32 != pps {
                        m.wp = m.written.keys().next_back().map_or(0, |o| o + 1);
                    }
                }
            }
            Op::Reopen => {
                dev.close().unwrap();
                dev = Ftl::open(&backend, cfg).unwrap();
                for m in model.iter_mut() {
                    let pending = std::mem::take(&mut m.pending);
                    m.written.extend(pending);
                    // A clean close flushes the cache.
                    m.unflushed.clear();
                }
            }
        }
        for (s, m) in model.iter().enumerate() {
            prop_assert_eq!(
                dev.segment_info(SegmentId(s as u32)).unwrap().write_pointer,
                m.wp
            );
        }
    }
    let _ = Lba(0);
    Ok(())
}
