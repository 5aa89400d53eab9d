//! The `paper-card` timing preset reproduces the paper's card in virtual time: about
//! 1.2 GB/s sequential read, 430 MB/s sequential write, 150K / 55K IOPS of 8 KiB random
//! read / write (LightStore, ASPLOS'19, section 6), each within 10%.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use hwftl_sim::loadgen::{self, Clock, LoadSpec, Pattern};
use hwftl_sim::{Backend, DeviceConfig, Ftl, Geometry, RamStore, TimingModel};

const QD: u32 = 128;

fn paper_card() -> Ftl {
    let mut cfg = DeviceConfig::new(Geometry::paper_card(8 << 30).unwrap());
    cfg.timing = TimingModel::PaperCard;
    cfg.queue_depth = QD;
    Ftl::format(&Backend::Ram(RamStore::new()), cfg).unwrap()
}

fn spec(pattern: Pattern, ops: u64) -> LoadSpec {
    LoadSpec {
        pattern,
        queue_depth: QD,
        ops,
        first_segment: 0,
        segments: 32,
        seed: 7,
        clock: Clock::Device,
    }
}

fn within(measured: f64, target: f64) -> bool {
    (measured - target).abs() <= 0.10 * target
}

#[test]
fn paper_card_preset_matches_the_papers_card() {
    let dev = paper_card();
    let seq_write = loadgen::run(&dev, &spec(Pattern::SeqWrite, 20_000)).unwrap();
    let rand_write = loadgen::run(
        &dev,
        &spec(Pattern::RandWrite { open_segments: 32 }, 20_000),
    )
    .unwrap();
    loadgen::prefill(&dev, 0, 4, QD).unwrap();
    let read = |pattern| LoadSpec {
        segments: 4,
        ..spec(pattern, 20_000)
    };
    let seq_read = loadgen::run(&dev, &read(Pattern::SeqRead)).unwrap();
    let rand_read = loadgen::run(&dev, &read(Pattern::RandRead)).unwrap();
    let rows = [
        ("seq write MB/s", seq_write.mb_per_sec(), 430.0),
        ("rand write IOPS", rand_write.ops_per_sec(), 55_000.0),
        ("seq read MB/s", seq_read.mb_per_sec(), 1_200.0),
        ("rand read IOPS", rand_read.ops_per_sec(), 150_000.0),
    ];
    for (name, got, want) in rows {
        println!("{name}: {got:.0} (paper {want:.0})");
    }
    for (name, got, want) in rows {
        assert!(within(got, want), "{name}: {got:.0}, paper {want:.0}");
    }
    // Latency at depth 1 is one page's service time: sense + transfer for a read.
    let qd1 = loadgen::run(
        &dev,
        &LoadSpec {
            queue_depth: 1,
            segments: 4,
            ..spec(Pattern::RandRead, 1000)
        },
    )
    .unwrap();
    let p50 = qd1.percentile_us(50.0);
    assert!((110.0..=120.0).contains(&p50), "QD1 read p50 {p50} us");
}

#[test]
fn virtual_time_is_deterministic() {
    let a = loadgen::run(
        &paper_card(),
        &spec(Pattern::RandWrite { open_segments: 32 }, 3000),
    )
    .unwrap();
    let b = loadgen::run(
        &paper_card(),
        &spec(Pattern::RandWrite { open_segments: 32 }, 3000),
    )
    .unwrap();
    assert_eq!(a.elapsed_ns, b.elapsed_ns);
    assert_eq!(a.latencies_ns, b.latencies_ns);
}
