//! `local` benchmark: the paper's Table 3 workloads (S-SET, S-GET, R-SET, R-GET, R-Mixed 9:1)
//! on the engine in-process, for 8 KiB, 1 KiB and 100 B values, on the `paper-card`
//! simulated device (released on the wall clock, so the engine's CPU time counts) and on the
//! io_uring file backend; each next to the raw device ceiling of the same backend and
//! geometry measured in the same run.
//!
//! Four client threads each issue batches of eight requests (32 in flight, the ceiling's
//! queue depth): a write batch is one atomic `write` (several batches are on the device at
//! once through the engine's write pipeline), a read batch one `multi_get` with all its page
//! reads in flight — the way the drive sees a loaded connection set. Write batches of small
//! values are longer (at least four pages of values), as the drive's engine thread gathers
//! the SETs of all connections into one group commit.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use hwftl_sim::loadgen::{self, Clock, LoadSpec, Pattern};
use hwftl_sim::{
    AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore, Release, TimingModel, PAGE_SIZE,
};
use lsm::{Engine, EngineConfig, WriteOp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::report::Row;

/// Requests in flight: `CLIENTS` threads with a batch of `BATCH` each.
const QD: u32 = CLIENTS * BATCH;
/// Client threads issuing batches concurrently.
const CLIENTS: u32 = 4;
/// Requests per client batch (a write batch is one atomic `write`, a read batch one
/// `multi_get`).
const BATCH: u32 = 8;
/// A write batch carries at least this many pages of values: the drive's engine thread
/// gathers the SETs queued from all connections into one group commit, so small values
/// share pages the way they do behind the network.
const WRITE_GROUP_PAGES: usize = 4;
/// Keys loaded at most per value size in `--quick` runs (small values would otherwise mean
/// millions of keys).
const QUICK_MAX_KEYS: u64 = 100_000;
/// Keys loaded at most per value size in full runs.
const MAX_KEYS: u64 = 4_000_000;
/// Pages per erase block (8 MiB segments on 8 x 8 chips).
const PAGES_PER_BLOCK: u32 = 16;

/// Settings of one local benchmark run.
#[derive(Debug, Clone)]
pub struct LocalBench {
    /// Small data sets (about a minute).
    pub quick: bool,
    /// Directory for device files.
    pub scratch: PathBuf,
    /// Overrides the data set size per value size, in MiB.
    pub data_mib: Option<u64>,
}

/// A backend and timing to run on.
struct Target {
    name: &'static str,
    timing: TimingModel,
    release: Release,
    file: bool,
}

const TARGETS: [Target; 2] = [
    Target {
        name: "paper-card",
        timing: TimingModel::PaperCard,
        release: Release::WallClock,
        file: false,
    },
    Target {
        name: "file",
        timing: TimingModel::None,
        release: Release::Virtual,
        file: true,
    },
];

/// Raw device figures at depth `QD`: ops/s of sequential writes and random reads.
struct Ceiling {
    write_ops: f64,
    read_ops: f64,
}

fn key(i: u64) -> [u8; 16] {
    let mut k = *b"user000000000000";
    let digits = format!("{i:012}");
    k[4..].copy_from_slice(digits.as_bytes());
    k
}

impl LocalBench {
    fn data_bytes(&self) -> u64 {
        self.data_mib
            .unwrap_or(if self.quick { 64 } else { 1024 })
            .max(8)
            << 20
    }

    fn geometry(&self) -> anyhow::Result<Geometry> {
        // Data under half the device, as the targets are stated for.
        Ok(Geometry::with_capacity(
            8,
            8,
            PAGES_PER_BLOCK,
            3 * self.data_bytes(),
        )?)
    }

    fn device(&self, t: &Target, tag: &str) -> anyhow::Result<Arc<Ftl>> {
        let mut cfg = DeviceConfig::new(self.geometry()?);
        cfg.timing = t.timing;
        cfg.release = t.release;
        let backend = if t.file {
            std::fs::create_dir_all(&self.scratch)
                .with_context(|| format!("creating {}", self.scratch.display()))?;
            Backend::File(self.scratch.join(format!("local-{tag}.img")))
        } else {
            Backend::Ram(RamStore::new())
        };
        Ok(Arc::new(Ftl::format(&backend, cfg)?))
    }

    fn ceiling(&self, t: &Target) -> anyhow::Result<Ceiling> {
        let dev = self.device(t, "ceiling")?;
        let g = dev.geometry();
        let segments = ((self.data_bytes() / g.segment_bytes()) as u32).max(1);
        let ops = (self.data_bytes() / PAGE_SIZE as u64)
            .min(u64::from(segments) * u64::from(g.pages_per_segment()));
        let spec = |pattern| LoadSpec {
            pattern,
            queue_depth: QD,
            ops,
            first_segment: 0,
            segments,
            seed: 9,
            clock: Clock::Wall,
        };
        let w = loadgen::run(dev.as_ref(), &spec(Pattern::SeqWrite))?;
        let r = loadgen::run(dev.as_ref(), &spec(Pattern::RandRead))?;
        self.cleanup(t, "ceiling");
        Ok(Ceiling {
            write_ops: w.ops_per_sec(),
            read_ops: r.ops_per_sec(),
        })
    }

    fn cleanup(&self, t: &Target, tag: &str) {
        if t.file {
            let _ = std::fs::remove_file(self.scratch.join(format!("local-{tag}.img")));
        }
    }

    /// Runs every target and value size; returns the rows.
    ///
    /// # Errors
    /// When a device cannot be made or the engine fails.
    pub fn run(&self) -> anyhow::Result<Vec<Row>> {
        let mut rows = Vec::new();
        for t in &TARGETS {
            eprintln!("local/{}: device ceiling", t.name);
            let ceiling = self.ceiling(t)?;
            rows.push(Row::measured(
                &format!("device/{}", t.name),
                "seqwrite-8K",
                QD,
                ceiling.write_ops,
                ceiling.write_ops * PAGE_SIZE as f64 / 1e6,
                0.0,
                0.0,
            ));
            rows.push(Row::measured(
                &format!("device/{}", t.name),
                "randread-8K",
                QD,
                ceiling.read_ops,
                ceiling.read_ops * PAGE_SIZE as f64 / 1e6,
                0.0,
                0.0,
            ));
            for value_size in [8192usize, 1024, 100] {
                eprintln!("local/{}: {value_size}-byte values", t.name);
                rows.extend(self.run_engine(t, value_size, &ceiling)?);
                self.cleanup(t, "engine");
            }
        }
        Ok(rows)
    }

    fn run_engine(
        &self,
        t: &Target,
        value_size: usize,
        ceiling: &Ceiling,
    ) -> anyhow::Result<Vec<Row>> {
        let dev = self.device(t, "engine")?;
        let engine = Engine::open(
            dev.clone() as Arc<dyn AppendDevice>,
            EngineConfig::default(),
        )?;

        let cap = if self.quick { QUICK_MAX_KEYS } else { MAX_KEYS };
        let n = (self.data_bytes() / value_size as u64).clamp(u64::from(QD), cap);
        let system = format!("lightstore-local/{}", t.name);
        let size = match value_size {
            8192 => "8K".to_string(),
            1024 => "1K".to_string(),
            v => format!("{v}B"),
        };
        let value: Vec<u8> = (0..value_size).map(|i| (i * 7) as u8).collect();
        let value = &value[..];
        let db = &engine;
        let put_batch = |keys: &[[u8; 16]]| -> anyhow::Result<()> {
            let ops: Vec<WriteOp<'_>> = keys.iter().map(|k| WriteOp::Put(k, value)).collect();
            Ok(db.write(&ops)?)
        };
        let get_batch = |keys: &[[u8; 16]]| -> anyhow::Result<()> {
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let got = db.multi_get(&refs)?;
            anyhow::ensure!(got.iter().all(Option::is_some), "a loaded key is missing");
            Ok(())
        };
        let wbatch = (BATCH as usize).max(WRITE_GROUP_PAGES * PAGE_SIZE / value_size) as u64;
        let rbatch = u64::from(BATCH);
        let random_keys = |rng: &mut SmallRng, len: u64| -> Vec<[u8; 16]> {
            (0..len).map(|_| key(rng.gen_range(0..n))).collect()
        };
        let write_ratio =
            |ops_s: f64| ops_s * value_size as f64 / (ceiling.write_ops * PAGE_SIZE as f64);
        let mut rows = Vec::new();
        let mut push = |name: &str, m: Measured, ratio: f64| {
            let mut row = Row::measured(
                &system,
                &format!("{name}-{size}"),
                QD,
                m.ops_per_sec,
                m.ops_per_sec * value_size as f64 / 1e6,
                m.p50_us,
                m.p99_us,
            );
            row.value_size = Some(value_size as u32);
            row.write_amp = m.write_amp;
            row.ratio_to_device = Some(ratio);
            rows.push(row);
        };
        // S-SET: keys in order (the clients take consecutive key ranges).
        let m = measure(db, n, wbatch, |_, batch| {
            let keys: Vec<[u8; 16]> = (batch * wbatch..(batch + 1) * wbatch)
                .map(|i| key(i % n))
                .collect();
            put_batch(&keys)
        })?;
        push("S-SET", m, write_ratio(m.ops_per_sec));
        // S-GET: keys in order.
        let m = measure(db, n, rbatch, |_, batch| {
            let keys: Vec<[u8; 16]> = (batch * rbatch..(batch + 1) * rbatch)
                .map(|i| key(i % n))
                .collect();
            get_batch(&keys)
        })?;
        push("S-GET", m, m.ops_per_sec / ceiling.read_ops);
        // R-SET: random overwrites of the loaded keys.
        let m = measure(db, n, wbatch, |rng, _| put_batch(&random_keys(rng, wbatch)))?;
        push("R-SET", m, write_ratio(m.ops_per_sec));
        // R-GET: random reads.
        let m = measure(db, n, rbatch, |rng, _| get_batch(&random_keys(rng, rbatch)))?;
        push("R-GET", m, m.ops_per_sec / ceiling.read_ops);
        // R-Mixed: nine read batches for every write batch.
        // Nine read batches for every write batch of the same length.
        let m = measure(db, n, rbatch, |rng, batch| {
            if batch % 10 == 9 {
                put_batch(&random_keys(rng, rbatch))
            } else {
                get_batch(&random_keys(rng, rbatch))
            }
        })?;
        // The mix's ceiling: per 10 operations, 9 page reads and one value written.
        let per_op = 0.9 / ceiling.read_ops
            + 0.1 * (value_size as f64 / PAGE_SIZE as f64) / ceiling.write_ops;
        push("R-Mixed", m, m.ops_per_sec * per_op);
        rows.extend(recovery_rows(engine, &dev, &system, &size, n, value_size)?);
        Ok(rows)
    }
}

/// Recovery time: after a crash (the engine dropped without closing: the memtable and the
/// value-log tail are replayed) and after a clean close (keytables and blooms loaded, nothing
/// replayed). Rows: `ops_per_sec` = keys recovered per second, `mb_per_sec` = data MB per
/// second of recovery, `p50_us` = the recovery time.
fn recovery_rows(
    db: Engine,
    dev: &Arc<Ftl>,
    system: &str,
    size: &str,
    keys: u64,
    value_size: usize,
) -> anyhow::Result<Vec<Row>> {
    // A few more writes so the crash leaves a tail to replay.
    let value = vec![1u8; value_size];
    for i in 0..keys.min(4096) {
        db.put(&key(i), &value)?;
    }
    let data_mb = keys as f64 * value_size as f64 / 1e6;
    let mut rows = Vec::new();
    let mut row = |name: &str, elapsed: std::time::Duration, replayed: u64| {
        let s = elapsed.as_secs_f64().max(1e-9);
        eprintln!(
            "{system} {name}-{size}: {:.1} ms for {data_mb:.0} MB ({:.2} s per GB, {replayed} records replayed)",
            s * 1e3,
            s / (data_mb / 1e3).max(1e-9)
        );
        let mut r = Row::measured(
            system,
            &format!("{name}-{size}"),
            1,
            keys as f64 / s,
            data_mb / s,
            s * 1e6,
            s * 1e6,
        );
        r.value_size = Some(value_size as u32);
        rows.push(r);
    };
    let cfg = EngineConfig::default;
    let open = |what: &str| -> anyhow::Result<(Engine, std::time::Duration)> {
        let t0 = Instant::now();
        let e = Engine::open(dev.clone() as Arc<dyn AppendDevice>, cfg())
            .with_context(|| format!("reopening after {what}"))?;
        Ok((e, t0.elapsed()))
    };
    Ok({
        // The crash: the engine's memory is dropped without a flush or a close.
        drop(db);
        let (e, took) = open("a crash")?;
        row("Recover-crash", took, e.stats().replayed_records);
        e.close()?;
        let (e, took) = open("a clean close")?;
        row("Recover-clean", took, e.stats().replayed_records);
        e.close()?;
        rows
    })
}

/// Throughput, latency of a client's batch and write amplification of one workload.
#[derive(Debug, Clone, Copy)]
struct Measured {
    ops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    write_amp: Option<f64>,
}

/// Runs `ops` operations from `CLIENTS` threads, each issuing batches of `batch_len` through
/// `f(rng, batch_number)`; batch numbers are handed out in order across the clients.
fn measure<F>(db: &Engine, ops: u64, batch_len: u64, f: F) -> anyhow::Result<Measured>
where
    F: Fn(&mut SmallRng, u64) -> anyhow::Result<()> + Sync,
{
    let batches = ops.div_ceil(batch_len);
    let next = AtomicU64::new(0);
    let before = db.stats();
    let start = Instant::now();
    let per_client: Vec<anyhow::Result<Vec<f64>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (f, next) = (&f, &next);
                scope.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(0x5eed + u64::from(c));
                    let mut lat = Vec::new();
                    loop {
                        let b = next.fetch_add(1, Ordering::Relaxed);
                        if b >= batches {
                            return Ok(lat);
                        }
                        let t0 = Instant::now();
                        f(&mut rng, b)?;
                        lat.push(t0.elapsed().as_nanos() as f64 / 1e3);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a client thread panicked")))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let after = db.stats();
    let mut lat = Vec::new();
    for l in per_client {
        lat.extend(l?);
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        lat.get(((lat.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let user = after.user_bytes_written - before.user_bytes_written;
    let device = after.device_bytes_written - before.device_bytes_written;
    Ok(Measured {
        ops_per_sec: (batches * batch_len) as f64 / secs,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        write_amp: (user > 0).then(|| device as f64 / user as f64),
    })
}
