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
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use hwftl_sim::loadgen::{self, Clock, LoadSpec, Pattern};
use hwftl_sim::{
    AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore, Release, TimingModel, PAGE_SIZE,
};
use lsm::{Engine, EngineConfig};

use crate::kv::{key, LocalEngine};
use crate::report::Row;
use crate::workloads::{self, Ceiling, Shape, Workload, BATCH, CLIENTS, QD};

/// Keys loaded at most per value size in `--quick` runs (small values would otherwise mean
/// millions of keys).
const QUICK_MAX_KEYS: u64 = 100_000;
/// Keys loaded at most per value size in full runs.
const MAX_KEYS: u64 = 4_000_000;
/// Bytes a stored record takes beyond its value, counted when sizing the device: the
/// 16-byte key, the record header and the packing slack of a page.
const RECORD_OVERHEAD: u64 = 64;
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
    /// Overrides the device size, in MiB (default three times the data set).
    pub device_mib: Option<u64>,
    /// Only rows whose `target/workload-size` name contains one of these (all when empty),
    /// e.g. `file/R-SET-8K`: one workload under a profiler.
    pub only: Vec<String>,
    /// plp mode: acknowledge writes once in the memtable, before their pages land, with no
    /// device flush (`EngineConfig::ack_from_dram`).
    pub plp: bool,
}

/// A backend and timing to run on.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    timing: TimingModel,
    release: Release,
    file: bool,
}

/// The io_uring O_DIRECT file backend without a timing model: the real data path.
pub(crate) const FILE: &Target = &TARGETS[1];

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

/// `8K`, `1K` or `100B`.
pub(crate) fn size_label(value_size: usize) -> String {
    match value_size {
        8192 => "8K".to_string(),
        1024 => "1K".to_string(),
        v => format!("{v}B"),
    }
}

impl LocalBench {
    pub(crate) fn data_bytes(&self) -> u64 {
        self.data_mib
            .unwrap_or(if self.quick { 64 } else { 1024 })
            .max(8)
            << 20
    }

    fn geometry(&self) -> anyhow::Result<Geometry> {
        // Data under half the device, as the targets are stated for. The data is what is
        // stored: with 100-byte values each record's key and header add a third, which
        // left the data set over the user capacity at some sizes ("the drive is full").
        let stored = [8192usize, 1024, 100]
            .iter()
            .map(|&v| self.keys(v) * (v as u64 + RECORD_OVERHEAD))
            .max()
            .unwrap_or(0)
            .max(self.data_bytes());
        Ok(Geometry::with_capacity(
            8,
            8,
            PAGES_PER_BLOCK,
            self.device_mib
                .map_or(3 * stored, |m| (m << 20).max(3 * self.data_bytes())),
        )?)
    }

    pub(crate) fn device(&self, t: &Target, tag: &str) -> anyhow::Result<Arc<Ftl>> {
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

    pub(crate) fn ceiling(&self, t: &Target) -> anyhow::Result<Ceiling> {
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

    pub(crate) fn cleanup(&self, t: &Target, tag: &str) {
        if t.file {
            let _ = std::fs::remove_file(self.scratch.join(format!("local-{tag}.img")));
        }
    }

    /// Keys loaded for values of `value_size` bytes: the data set, at least `QD`, at most
    /// the cap of the mode.
    pub(crate) fn keys(&self, value_size: usize) -> u64 {
        let cap = if self.quick { QUICK_MAX_KEYS } else { MAX_KEYS };
        (self.data_bytes() / value_size as u64).clamp(u64::from(QD), cap)
    }

    /// Runs every target and value size; returns the rows.
    ///
    /// # Errors
    /// When a device cannot be made or the engine fails.
    pub fn run(&self) -> anyhow::Result<Vec<Row>> {
        let mut rows = Vec::new();
        for t in &TARGETS {
            if !self.only.is_empty() && !self.only.iter().any(|o| Self::targets_row(t, o)) {
                continue;
            }
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
                let size = size_label(value_size);
                if !Workload::ALL
                    .iter()
                    .any(|w| self.wanted(t, &format!("{}-{size}", w.name())))
                {
                    continue;
                }
                eprintln!("local/{}: {value_size}-byte values", t.name);
                rows.extend(self.run_engine(t, value_size, &ceiling)?);
                self.cleanup(t, "engine");
            }
        }
        Ok(rows)
    }

    /// Whether filter `o` can match a row of target `t`: it names the target, or no
    /// target at all (`S-SET-8K`).
    fn targets_row(t: &Target, o: &str) -> bool {
        t.name.contains(o) || o.starts_with(&format!("{}/", t.name)) || !o.contains('/')
    }

    /// Whether the row `target/name` was asked for.
    fn wanted(&self, t: &Target, name: &str) -> bool {
        let full = format!("{}/{name}", t.name);
        self.only.is_empty() || self.only.iter().any(|o| full.contains(o.as_str()))
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
            EngineConfig {
                flush_writes: !self.plp,
                ack_from_dram: self.plp,
                ..EngineConfig::default()
            },
        )?;

        let n = self.keys(value_size);
        let system = format!(
            "lightstore-local{}/{}",
            if self.plp { "-plp" } else { "" },
            t.name
        );
        let size = size_label(value_size);
        let value: Vec<u8> = (0..value_size).map(|i| (i * 7) as u8).collect();
        let kv = LocalEngine {
            engine: &engine,
            engine_counts_writes: true,
        };
        let mut rows = Vec::new();
        for w in Workload::ALL {
            // S-SET loads the keys every other workload reads: it always runs.
            if w != Workload::SSet && !self.wanted(t, &format!("{}-{size}", w.name())) {
                continue;
            }
            let m = workloads::run(&kv, w, n, w.ops(n), &value, Shape::in_process(value_size))?;
            let name = format!("{}-{size}", w.name());
            rows.push(engine_row(
                &system,
                &name,
                QD,
                &m,
                value_size,
                ceiling.ops(w, value_size),
            ));
        }
        // Writer scaling (8 KiB): R-SET from one client thread, next to the four above.
        let one = format!("R-SET-1writer-{size}");
        if value_size == 8192 && self.wanted(t, &one) {
            let shape = Shape {
                clients: 1,
                ..Shape::in_process(value_size)
            };
            let m = workloads::run(&kv, Workload::RSet, n, n, &value, shape)?;
            let four = rows
                .iter()
                .find(|r| r.workload == format!("R-SET-{size}"))
                .map(|r| r.ops_per_sec);
            if let Some(four) = four {
                eprintln!(
                    "{system}: writers scale {:.2}x (R-SET-{size}: {CLIENTS} writers {four:.0} ops/s, 1 writer {:.0})",
                    four / m.ops_per_sec.max(1e-9),
                    m.ops_per_sec
                );
            }
            let ceiling_ops = ceiling.ops(Workload::RSet, value_size);
            rows.push(engine_row(
                &system,
                &one,
                BATCH,
                &m,
                value_size,
                ceiling_ops,
            ));
        }
        if self.wanted(t, &format!("recovery-{size}")) {
            rows.extend(recovery_rows(engine, &dev, &system, &size, n, value_size)?);
        }
        Ok(rows)
    }
}

/// A row of the engine: `m` measured with `qd` requests in flight, next to the device's
/// `ceiling_ops` for the workload.
fn engine_row(
    system: &str,
    name: &str,
    qd: u32,
    m: &workloads::Measured,
    value_size: usize,
    ceiling_ops: f64,
) -> Row {
    let mut row = Row::measured(
        system,
        name,
        qd,
        m.ops_per_sec,
        m.ops_per_sec * value_size as f64 / 1e6,
        m.p50_us,
        m.p99_us,
    );
    row.value_size = Some(value_size as u32);
    row.write_amp = m.write_amp;
    row.ratio_to_device = Some(m.ops_per_sec / ceiling_ops);
    row.engine_counters.clone_from(&m.engine_counters);
    row
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
