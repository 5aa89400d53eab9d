//! Criterion micro-benchmarks of the hot paths (`cargo bench -p lightstore-benches`): RESP
//! request parsing and reply encoding (kvproto), keytable search and bloom probe, compaction
//! merge (lsm's public API), and the device's page-buffer pool (alloc/free).
//!
//! Not part of `cargo test`: bench targets are built by `cargo bench` (and by clippy's
//! `--all-targets`, so they must compile cleanly).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kvproto::{encode_command, Command, Limits, Protocol, Reply, RequestParser};
use lsm::keytable::{KeyTable, KeyTableBuilder, Slot};
use lsm::vlog_format::{ValueLoc, ValuePtr};

fn key(i: u64) -> Vec<u8> {
    format!("user{i:012}").into_bytes()
}

fn slot(i: u64) -> Slot {
    Slot::value(ValuePtr {
        log_seg: (i / 1000) as u32,
        loc: ValueLoc::Inline {
            page: (i % 1000) as u32,
            offset: 0,
        },
        len: 100,
    })
}

/// A run of keys `first, first + step, ...` (`n` of them).
fn run(id: u64, first: u64, step: u64, n: u64) -> KeyTable {
    let mut b = KeyTableBuilder::new(id);
    for i in 0..n {
        let k = first + i * step;
        b.push(&key(k), &slot(k), None);
    }
    b.finish(0.01)
}

fn resp(c: &mut Criterion) {
    let mut g = c.benchmark_group("resp");
    // 64 pipelined SETs of 100-byte values, as one receive buffer.
    let value = vec![b'x'; 100];
    let mut wire = BytesMut::new();
    for i in 0..64 {
        encode_command(&[&b"SET"[..], &key(i), &value], &mut wire);
    }
    let wire = wire.freeze();
    g.throughput(Throughput::Elements(64));
    g.bench_function("parse 64 pipelined SET 100B", |b| {
        b.iter_batched(
            || BytesMut::from(&wire[..]),
            |mut buf| {
                let mut p = RequestParser::new(Limits::default());
                let mut n = 0;
                while let Some(args) = p.parse(&mut buf).unwrap() {
                    black_box(Command::parse(&args).unwrap());
                    n += 1;
                }
                assert_eq!(n, 64);
            },
            BatchSize::SmallInput,
        );
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode GET request", |b| {
        let mut out = BytesMut::with_capacity(64);
        let k = key(7);
        b.iter(|| {
            out.clear();
            encode_command(&[&b"GET"[..], &k[..]], &mut out);
            black_box(out.len())
        });
    });
    let bulk = Reply::Bulk(Bytes::from(vec![b'v'; 8192]));
    g.bench_function("encode 8 KiB bulk reply", |b| {
        let mut out = BytesMut::with_capacity(9000);
        b.iter(|| {
            out.clear();
            bulk.encode(Protocol::Resp2, &mut out);
            black_box(out.len())
        });
    });
    g.finish();
}

fn keytable(c: &mut Criterion) {
    let n = 100_000u64;
    // Even keys only, so odd ones are absent.
    let t = run(1, 0, 2, n);
    let mut g = c.benchmark_group("keytable");
    g.throughput(Throughput::Elements(1));
    let mut i = 0u64;
    g.bench_function("seek (binary search, 100K keys)", |b| {
        b.iter(|| {
            i = (i + 7919) % (2 * n);
            black_box(t.seek(&key(i)))
        });
    });
    let mut i = 0u64;
    g.bench_function("get hit (bloom + search)", |b| {
        b.iter(|| {
            i = (i + 7919) % n;
            black_box(t.get(&key(2 * i)))
        });
    });
    // An absent key: the bloom filter answers alone (but for its 1% false positives).
    let mut i = 0u64;
    g.bench_function("bloom probe (absent key)", |b| {
        b.iter(|| {
            i = (i + 7919) % n;
            black_box(t.get(&key(2 * i + 1)))
        });
    });
    g.finish();
}

fn compaction(c: &mut Criterion) {
    let n = 50_000u64;
    // A newer run overwriting every other key of an older one.
    let older = Arc::new(run(1, 0, 1, n));
    let newer = Arc::new(run(2, 0, 2, n / 2));
    let runs = [newer, older];
    let mut g = c.benchmark_group("compaction");
    g.throughput(Throughput::Elements(n + n / 2));
    g.sample_size(20);
    let spec = lsm::merge::OutputSpec {
        ids: 3..100,
        target_bytes: lsm::DEFAULT_KEYTABLE_BYTES,
        bottom: true,
        fp_rate: 0.01,
        expiry: None,
    };
    g.bench_function("merge 2 runs (75K entries)", |b| {
        b.iter(|| {
            let sources = runs.iter().map(|r| lsm::merge::run_source(r, 0)).collect();
            let (out, dead, _) = lsm::merge::compact(sources, &spec);
            black_box((out.len(), dead.len()))
        });
    });
    g.finish();
}

fn buffers(c: &mut Criterion) {
    let mut g = c.benchmark_group("page buffers");
    g.throughput(Throughput::Elements(1));
    g.bench_function("alloc + free (pool)", |b| {
        b.iter(|| black_box(hwftl_sim::PageBuf::for_read()));
    });
    g.finish();
}

criterion_group!(hot_paths, resp, keytable, compaction, buffers);
criterion_main!(hot_paths);
