//! The extra studies of `bench all` (skipped with `--skip-extras`), built from the harness's
//! own pieces (the workloads runner, `KvUnderTest`, the RESP client, the device load
//! generator, the child-process runner):
//!
//! - **Latency breakdown at queue depth 1** (the paper's Figure 10): GET and SET of 8 KiB
//!   values split into network, KV server, engine and device, every part from a measurement
//!   of the same run (see [`split`] for how each part is derived).
//! - **Ablation** (Figure 12): LightStore-Net with one design feature turned off at a time
//!   (`lightstore --ablate NAME`) against the baseline drive, on the same data and load.
//! - **Sustained random overwrite**: LightStore-Local at 80% of its user capacity and
//!   RocksDB BlobDB on the same data, overwriting three times the device's capacity (once
//!   with `--quick`), with throughput and write amplification sampled over time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use hwftl_sim::loadgen::{self, Clock, LoadSpec, Pattern};
use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};
use serde::{Deserialize, Serialize};

use crate::kv::{KvSession, KvUnderTest};
use crate::report::Row;
use crate::workloads::{self, Measured, Shape, Workload};

/// Value size of every extra study.
pub const VALUE_SIZE: usize = 8192;
/// Design features the ablation turns off, one at a time (`lightstore --ablate NAME`).
pub const ABLATIONS: [&str; 4] = [
    "zero-copy",
    "keytable-cache",
    "lock-free-queues",
    "metadata-compaction",
];
/// The baseline's second run, after the ablations.
pub const BASELINE_AGAIN: &str = "ablation/baseline-again";
/// Share of the engine's user capacity that is live during the sustained overwrite, percent.
pub const FILL_PERCENT: u64 = 80;
/// Overwrites in the sustained run: this many times the device's capacity.
pub const OVERWRITE_TIMES: u64 = 3;
/// Overwrites in `--quick`'s sustained run: once the device's capacity (at 80% full that
/// already has garbage collection run), to keep the smoke test near a minute.
pub const QUICK_OVERWRITE_TIMES: u64 = 1;
/// Samples of the sustained run (one every 5% of it).
pub const SLICES: u64 = 20;
/// The sustained run's device in `--quick` runs, MiB: the smallest whose drive geometry
/// (32 segments of 8 MiB) leaves the engine room to collect garbage (at 64 MiB it has 8
/// segments and a user capacity below the data).
pub const QUICK_OVERWRITE_DEVICE_MIB: u64 = 256;
/// The sustained run's device in full runs, MiB.
pub const FULL_OVERWRITE_DEVICE_MIB: u64 = 1024;
/// Systems of the sustained overwrite: LightStore durable (a device flush before each
/// acknowledgement), LightStore in plp mode (acknowledged at device completion: the pair of
/// BlobDB without a WAL, neither flushing per write), and BlobDB without a WAL.
pub const OVERWRITE_SYSTEMS: [&str; 3] = [
    "lightstore-local",
    "lightstore-local/plp",
    "rocksdb-blobdb/no-wal",
];

/// The extra run of LightStore plp on a device as large as the space BlobDB's run held at
/// its peak, with BlobDB's keys and overwrites: the same workload in the same space. (At the
/// configured device BlobDB, bounded by nothing but the file system, holds more than the
/// device LightStore gets; in a file system of that device's size it runs out of space.)
pub const SAME_SPACE_SYSTEM: &str = "lightstore-local/plp@blobdb-space";

/// A mean and a median, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Lat {
    /// Mean, µs.
    pub mean: f64,
    /// Median, µs.
    pub p50: f64,
}

impl Lat {
    fn of(m: &Measured) -> Lat {
        Lat {
            mean: m.mean_us,
            p50: m.p50_us,
        }
    }
}

/// The four parts, in the order they are stacked: network, KV server, engine, device.
pub const PARTS: [&str; 4] = ["network", "KV server", "engine", "device"];

/// The breakdown of one operation (GET or SET).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpBreakdown {
    /// `GET` or `SET`.
    pub op: String,
    /// Raw device 8 KiB read (GET) or write (SET) at queue depth 1.
    pub device: Lat,
    /// LightStore-Local at queue depth 1.
    pub local: Lat,
    /// LightStore-Net at queue depth 1.
    pub net: Lat,
    /// PING round trip to the drive at queue depth 1.
    pub ping: Lat,
    /// Mean of each part of [`PARTS`], µs.
    pub parts_mean: [f64; 4],
    /// Median of each part of [`PARTS`], µs.
    pub parts_p50: [f64; 4],
    /// Parts that came out negative (noise) and were clamped at 0.
    pub notes: Vec<String>,
}

/// The parts of one statistic: device = the raw device; engine = LightStore-Local less the
/// device; network = the PING round trip; KV server = LightStore-Net less engine, device and
/// network. A negative engine or KV-server part (measurement noise) is clamped at 0 and
/// named in the returned notes.
pub fn split(device: f64, local: f64, net: f64, ping: f64, stat: &str) -> ([f64; 4], Vec<String>) {
    let mut notes = Vec::new();
    let mut engine = local - device;
    if engine < 0.0 {
        notes.push(format!(
            "{stat}: LightStore-Local ({local:.1} µs) came out below the raw device \
             ({device:.1} µs), so the engine part ({engine:.1} µs) is shown as 0"
        ));
        engine = 0.0;
    }
    let network = ping.max(0.0);
    let mut server = net - engine - device - network;
    if server < 0.0 {
        notes.push(format!(
            "{stat}: LightStore-Net ({net:.1} µs) came out below engine + device + network \
             ({:.1} µs), so the KV-server part ({server:.1} µs) is shown as 0",
            engine + device + network
        ));
        server = 0.0;
    }
    ([network, server, engine, device.max(0.0)], notes)
}

impl OpBreakdown {
    fn new(op: &str, device: Lat, local: Lat, net: Lat, ping: Lat) -> OpBreakdown {
        let (parts_mean, mut notes) = split(device.mean, local.mean, net.mean, ping.mean, "mean");
        let (parts_p50, n2) = split(device.p50, local.p50, net.p50, ping.p50, "p50");
        notes.extend(n2);
        OpBreakdown {
            op: op.into(),
            device,
            local,
            net,
            ping,
            parts_mean,
            parts_p50,
            notes,
        }
    }
}

/// The latency breakdown at queue depth 1.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Breakdown {
    /// GET, then SET.
    pub ops: Vec<OpBreakdown>,
    /// Requests measured per figure.
    pub requests: u64,
    /// Keys loaded (8 KiB values) before the GETs and SETs.
    pub keys: u64,
}

/// One sample of the sustained overwrite.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sample {
    /// Share of the overwrites done, percent.
    pub percent: f64,
    /// Seconds since the overwrites started.
    pub seconds: f64,
    /// Overwrites per second during the slice.
    pub ops_per_sec: f64,
    /// Write amplification during the slice.
    pub wa_slice: f64,
    /// Write amplification from the start of the overwrites.
    pub wa_cumulative: f64,
    /// 99th percentile batch latency in the slice, µs.
    pub p99_us: f64,
}

/// One system's sustained overwrite.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OverwriteRun {
    /// System.
    pub system: String,
    /// LightStore's device capacity (the overwrite volume is three times it), bytes.
    pub capacity_bytes: u64,
    /// LightStore's user capacity on it, bytes.
    pub user_capacity_bytes: u64,
    /// LightStore's segment (erase unit of garbage collection), bytes; 0 in runs made
    /// before it was recorded (512 KiB then).
    #[serde(default)]
    pub segment_bytes: u64,
    /// Keys live (8 KiB values).
    pub keys: u64,
    /// Overwrites done.
    pub overwrites: u64,
    /// Loading the keys, ops/s.
    pub load_ops_per_sec: f64,
    /// Overwrites per second over the whole run.
    pub ops_per_sec: f64,
    /// Samples every 5% of the run.
    pub samples: Vec<Sample>,
    /// Write amplification of the whole run, after its background work settled.
    pub final_wa: f64,
    /// Where the write figures come from.
    pub wa_source: String,
    /// Write amplification of the same run as the block device below the file system saw
    /// it (bytes written to the device over user bytes, journal and metadata included, after
    /// the background work settled): one meter for every system
    /// ([`crate::procfs::BlockDevMeter`]). `None` in runs made before it was measured.
    #[serde(default)]
    pub block_wa: Option<f64>,
    /// Which device that was, or why there is no such figure.
    #[serde(default)]
    pub block_meter: Option<String>,
    /// The most space the run's files held on the file system, bytes
    /// ([`crate::footprint::SpaceMeter`]: LightStore's device file at its length, BlobDB's
    /// files as written); `None` in runs made before it was measured.
    #[serde(default)]
    pub peak_footprint_bytes: Option<u64>,
    /// The system whose peak footprint this run's device was sized to, with its keys and
    /// overwrites ([`SAME_SPACE_SYSTEM`]); `None` for the runs at the configured device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sized_like: Option<String>,
    /// Garbage-collected segments (LightStore).
    pub gc_segments: Option<u64>,
    /// How much LightStore's [`crate::kv::ENGINE_COUNTERS`] grew over the overwrites (GC,
    /// compactions, write stalls); `None` for other systems and in older runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_counters: Option<crate::kv::EngineCounters>,
    /// Why the run has no figures.
    pub missing: Option<String>,
}

impl OverwriteRun {
    /// The overwrites as a multiple of the device's capacity (3 in full runs, 1 in quick).
    pub fn times_the_device(&self) -> f64 {
        (self.overwrites * VALUE_SIZE as u64) as f64 / (self.capacity_bytes.max(1)) as f64
    }
}

/// Everything the extras measured.
#[derive(Debug, Clone)]
pub struct Extras {
    /// The latency breakdown, or why it is missing.
    pub breakdown: Result<Breakdown, String>,
    /// The ablation rows (`ablation/baseline` and `ablation/without-NAME`).
    pub ablation: Vec<Row>,
    /// The sustained overwrite, LightStore first.
    pub overwrite: Vec<OverwriteRun>,
    /// The sustained run's device, MiB.
    pub overwrite_device_mib: u64,
    /// Seconds the extras took.
    pub seconds: f64,
}

impl Default for Extras {
    fn default() -> Self {
        Extras {
            breakdown: Err("not run".into()),
            ablation: Vec::new(),
            overwrite: Vec::new(),
            overwrite_device_mib: 0,
            seconds: 0.0,
        }
    }
}

/// The ablation row name of `feature` turned off.
pub fn ablation_system(feature: Option<&str>) -> String {
    feature.map_or_else(
        || "ablation/baseline".to_string(),
        |f| format!("ablation/without-{f}"),
    )
}

/// Sets `ratio_to_lightstore` of every measured ablation row to its ops/s over the mean of
/// the two baseline runs' (first and last) in the same workload, or the one that ran.
pub fn add_baseline_ratios(rows: &mut [Row]) {
    let base = |w: &str, rows: &[Row]| -> Option<f64> {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| {
                (r.system == ablation_system(None) || r.system == BASELINE_AGAIN)
                    && r.workload == w
                    && r.missing.is_none()
                    && r.ops_per_sec > 0.0
            })
            .map(|r| r.ops_per_sec)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let bases: Vec<Option<f64>> = rows.iter().map(|r| base(&r.workload, rows)).collect();
    for (r, b) in rows.iter_mut().zip(bases) {
        if r.missing.is_none() {
            r.ratio_to_lightstore = b.map(|b| r.ops_per_sec / b);
        }
    }
}

/// The raw device at queue depth 1: 8 KiB sequential writes (the engine appends) filling
/// whole segments (at least `ops`), then `ops` random reads of the pages written.
///
/// # Errors
/// When the device fails.
pub fn device_qd1(dev: &dyn AppendDevice, ops: u64) -> anyhow::Result<(Lat, Lat)> {
    let g = dev.geometry();
    let per_segment = u64::from(g.pages_per_segment());
    let segments =
        (ops.div_ceil(per_segment) as u32).clamp(1, g.segments().saturating_sub(1).max(1));
    // The writes fill the region, so every page the reads pick holds data.
    let fill = u64::from(segments) * per_segment;
    let spec = |pattern, ops| LoadSpec {
        pattern,
        queue_depth: 1,
        ops,
        first_segment: 0,
        segments,
        seed: 11,
        clock: Clock::Wall,
    };
    let lat = |r: &loadgen::LoadReport| Lat {
        mean: r.latencies_ns.iter().sum::<u64>() as f64 / r.latencies_ns.len().max(1) as f64 / 1e3,
        p50: r.percentile_us(50.0),
    };
    let w = loadgen::run(dev, &spec(Pattern::SeqWrite, fill))?;
    let r = loadgen::run(dev, &spec(Pattern::RandRead, ops))?;
    Ok((lat(&r), lat(&w)))
}

/// GET and SET latency at queue depth 1 on a loaded system: `(get, set)`.
///
/// # Errors
/// When the system fails.
pub fn get_set_qd1(
    kv: &dyn KvUnderTest,
    keys: u64,
    ops: u64,
    value: &[u8],
) -> anyhow::Result<(Lat, Lat)> {
    let g = workloads::run(kv, Workload::RGet, keys, ops, value, Shape::qd1())?;
    let s = workloads::run(kv, Workload::RSet, keys, ops, value, Shape::qd1())?;
    Ok((Lat::of(&g), Lat::of(&s)))
}

/// Assembles the breakdown from the four measurements.
pub fn breakdown(
    device: (Lat, Lat),
    local: (Lat, Lat),
    net: (Lat, Lat),
    ping: Lat,
    requests: u64,
    keys: u64,
) -> Breakdown {
    Breakdown {
        ops: vec![
            OpBreakdown::new("GET", device.0, local.0, net.0, ping),
            OpBreakdown::new("SET", device.1, local.1, net.1, ping),
        ],
        requests,
        keys,
    }
}

/// Ping latency at queue depth 1.
///
/// # Errors
/// When the server fails.
pub fn ping_qd1(kv: &dyn KvUnderTest, ops: u64) -> anyhow::Result<Lat> {
    Ok(Lat::of(&workloads::noop_qd1(kv, ops)?))
}

/// A system whose `settle` does nothing: the sustained overwrite's slices follow one another
/// without a forced flush between them (the background work runs as it would).
struct NoSettle<'a>(&'a dyn KvUnderTest);

impl KvUnderTest for NoSettle<'_> {
    fn session(&self) -> anyhow::Result<Box<dyn KvSession + '_>> {
        self.0.session()
    }
    fn pid(&self) -> u32 {
        self.0.pid()
    }
    fn written_bytes(&self) -> anyhow::Result<u64> {
        self.0.written_bytes()
    }
    fn cpu_seconds(&self) -> anyhow::Result<f64> {
        self.0.cpu_seconds()
    }
    fn rss_mb(&self) -> Option<f64> {
        self.0.rss_mb()
    }
    fn engine_counters(&self) -> Option<crate::kv::EngineCounters> {
        self.0.engine_counters()
    }
}

/// The sustained run's sizes: LightStore's device geometry of `device_mib` (the one a
/// drive formats for that capacity, [`Geometry::for_drive`]: 8 MiB segments at 1 GiB), its
/// capacity, the engine's user capacity on it and the keys that fill `fill_percent` of that
/// ([`FILL_PERCENT`] in `bench all`).
/// Runs before 2026-11-28 used 512 KiB segments (2 x 2 chips), a geometry no drive formats:
/// at 1 GiB the manifest then listed 2,048 segments and its writes (one per segment opened
/// or released) took 32 s of an 85 s run.
///
/// # Errors
/// When the geometry is invalid.
pub fn overwrite_sizes(
    device_mib: u64,
    fill_percent: u64,
) -> anyhow::Result<(Geometry, u64, u64, u64)> {
    let g = Geometry::for_drive(device_mib << 20)?;
    let dev = Arc::new(Ftl::format(
        &Backend::Ram(RamStore::new()),
        DeviceConfig::new(g),
    )?);
    let engine = lsm::Engine::open(dev as Arc<dyn AppendDevice>, lsm::EngineConfig::default())?;
    let user = engine.stats().user_capacity_bytes;
    engine.close()?;
    let record = lsm::vlog_format::stored_record_bytes(16, VALUE_SIZE);
    let keys = user * fill_percent / 100 / record;
    Ok((g, g.capacity_bytes(), user, keys))
}

/// BlobDB's sustained overwrite among `runs`, if it ran.
pub fn blobdb_run(runs: &[OverwriteRun]) -> Option<&OverwriteRun> {
    runs.iter()
        .find(|o| o.system.starts_with("rocksdb") && o.missing.is_none())
}

/// Whether a run that held `peer` bytes at its peak held more space than one that held
/// `mine` (by more than 5%, the meter's and the device file's slack): then the two did not
/// run at the same fill, and the same-space run ([`SAME_SPACE_SYSTEM`]) is the comparison.
pub fn held_more_space(peer: u64, mine: u64) -> bool {
    peer > mine + mine / 20
}

/// The device, MiB, of the same-space run ([`SAME_SPACE_SYSTEM`]): the largest whose file
/// (capacity, the FTL's spare blocks and a few pages of its own) is no larger than
/// `peak_bytes`, the space BlobDB's run held at its peak.
pub fn same_space_device_mib(peak_bytes: u64) -> u64 {
    let mut mib = (peak_bytes >> 20).max(1);
    while mib > 1 {
        match Geometry::for_drive(mib << 20) {
            // A MiB beside the pages for the file's own header and tail.
            Ok(g) if g.physical_pages() * hwftl_sim::PAGE_SIZE as u64 + (1 << 20) <= peak_bytes => {
                break
            }
            _ => mib -= mib / 100 + 1,
        }
    }
    mib
}

/// One system's sustained overwrite (a child of `bench all`: `run-overwrite`).
#[derive(Debug, Clone)]
pub struct Overwrite {
    /// One of [`OVERWRITE_SYSTEMS`].
    pub system: String,
    /// LightStore's device, MiB.
    pub device_mib: u64,
    /// Share of the user capacity the keys fill, percent.
    pub fill_percent: u64,
    /// Overwrites: this many times the device's capacity.
    pub times: u64,
    /// DRAM for the system's cache (LightStore's value cache, BlobDB's block cache), bytes;
    /// `None`: none for LightStore (the engine's default), a sixteenth of the data for
    /// BlobDB (`bench all`'s sustained run).
    pub cache_bytes: Option<u64>,
    /// The same-space run ([`SAME_SPACE_SYSTEM`]): another system's run (BlobDB's) whose
    /// peak space sizes the device ([`same_space_device_mib`], instead of `device_mib`) and
    /// whose keys and overwrites this run repeats (instead of `fill_percent` and `times`).
    pub same_space_as: Option<OverwriteRun>,
    /// Directory for the system's files.
    pub dir: PathBuf,
    /// Where to write the [`OverwriteRun`].
    pub json: PathBuf,
}

impl Overwrite {
    /// Loads the keys, overwrites `times` times the device capacity in `SLICES` slices and
    /// writes the run.
    ///
    /// # Errors
    /// When the system fails.
    pub fn run(&self) -> anyhow::Result<()> {
        let device_mib = match &self.same_space_as {
            None => self.device_mib,
            Some(peer) => {
                anyhow::ensure!(
                    self.system == "lightstore-local/plp",
                    "the same-space run is LightStore plp's, not {}'s",
                    self.system
                );
                let space = peer.peak_footprint_bytes.with_context(|| {
                    format!(
                        "{}'s run has no peak space to size a device to",
                        peer.system
                    )
                })?;
                same_space_device_mib(space)
            }
        };
        let (g, capacity, user_capacity, keys) = overwrite_sizes(device_mib, self.fill_percent)?;
        let mut run = OverwriteRun {
            system: self.system.clone(),
            capacity_bytes: capacity,
            user_capacity_bytes: user_capacity,
            segment_bytes: g.segment_bytes(),
            keys,
            overwrites: self.times * capacity / VALUE_SIZE as u64,
            ..OverwriteRun::default()
        };
        if let Some(peer) = &self.same_space_as {
            run.keys = peer.keys;
            run.overwrites = peer.overwrites;
            run.sized_like = Some(peer.system.clone());
        }
        std::fs::create_dir_all(&self.dir)?;
        let space = crate::footprint::SpaceMeter::start(self.dir.clone())?;
        let meter = match crate::procfs::BlockDevMeter::for_dir(&self.dir) {
            Ok(m) => {
                run.block_meter = Some(m.describe());
                Some(m)
            }
            Err(e) => {
                run.block_meter = Some(format!("none: {e:#}"));
                None
            }
        };
        match self.system.as_str() {
            sys @ ("lightstore-local" | "lightstore-local/plp") => {
                let dev = Arc::new(Ftl::format(
                    &Backend::File(self.dir.join("overwrite.img")),
                    DeviceConfig::new(g),
                )?);
                let cfg = lsm::EngineConfig {
                    flush_writes: sys == "lightstore-local",
                    ack_from_dram: sys == "lightstore-local/plp",
                    value_cache_bytes: self.cache_bytes.unwrap_or(0),
                    ..lsm::EngineConfig::default()
                };
                let engine = lsm::Engine::open(dev as Arc<dyn AppendDevice>, cfg)?;
                anyhow::ensure!(
                    engine.stats().user_capacity_bytes == user_capacity,
                    "the file device's user capacity differs from the sizing device's"
                );
                let kv = crate::kv::LocalEngine {
                    engine: &engine,
                    engine_counts_writes: true,
                };
                run.wa_source = "EngineStats: device_bytes_written / user_bytes_written".into();
                sustained(&kv, &mut run, meter.as_ref(), &|| {
                    let s = engine.stats();
                    Ok((s.device_bytes_written, Some(s.user_bytes_written)))
                })?;
                run.gc_segments = Some(engine.stats().gc_segments);
                engine.close()?;
            }
            "rocksdb-blobdb/no-wal" => self.blobdb(&mut run, meter.as_ref())?,
            other => bail!("no sustained-overwrite system `{other}`"),
        }
        run.peak_footprint_bytes = Some(space.peak());
        if self.same_space_as.is_some() {
            run.system = SAME_SPACE_SYSTEM.into();
        }
        std::fs::write(&self.json, serde_json::to_string(&run)?)
            .with_context(|| format!("writing {}", self.json.display()))
    }

    #[cfg(feature = "peers")]
    fn blobdb(
        &self,
        run: &mut OverwriteRun,
        meter: Option<&crate::procfs::BlockDevMeter>,
    ) -> anyhow::Result<()> {
        use crate::peers::{Rocks, RocksLayout};
        let data = run.keys * (16 + VALUE_SIZE as u64);
        let cache = self.cache_bytes.unwrap_or((data / 16).max(1 << 20)) as usize;
        let db = Rocks::open(&self.dir.join("db"), RocksLayout::Blob, false, cache)?;
        run.wa_source = "/proc/self/io write_bytes - cancelled_write_bytes of the process \
                         (RocksDB in-process) / user bytes (16-byte keys + values)"
            .into();
        sustained(&db, run, meter, &|| Ok((db.written_bytes()?, None)))
    }

    #[cfg(not(feature = "peers"))]
    fn blobdb(
        &self,
        _run: &mut OverwriteRun,
        _meter: Option<&crate::procfs::BlockDevMeter>,
    ) -> anyhow::Result<()> {
        bail!("{} needs the `peers` feature", self.system)
    }
}

/// Bytes written so far and, where the system counts them itself, user bytes so far.
type Counters<'a> = dyn Fn() -> anyhow::Result<(u64, Option<u64>)> + 'a;

/// Loads `run.keys` keys (S-SET), then overwrites random keys `run.overwrites` times in
/// `SLICES` slices, sampling throughput and write amplification after each.
fn sustained(
    kv: &dyn KvUnderTest,
    run: &mut OverwriteRun,
    meter: Option<&crate::procfs::BlockDevMeter>,
    counters: &Counters<'_>,
) -> anyhow::Result<()> {
    let value: Vec<u8> = (0..VALUE_SIZE)
        .map(|i| {
            (i as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(23) as u8
        })
        .collect();
    let shape = Shape::in_process(VALUE_SIZE);
    let record = (16 + VALUE_SIZE) as u64;
    println!("workload load");
    let m = workloads::run(kv, Workload::SSet, run.keys, run.keys, &value, shape)?;
    run.load_ops_per_sec = m.ops_per_sec;
    let (d0, u0) = counters()?;
    let engine0 = kv.engine_counters();
    let block0 = meter
        .map(crate::procfs::BlockDevMeter::written_bytes)
        .transpose()?;
    let (mut dp, mut up) = (d0, u0.unwrap_or(0));
    let mut mine = 0u64;
    let user = |u: Option<u64>, mine: u64| u.map_or(mine, |u| u);
    let started = Instant::now();
    let quiet = NoSettle(kv);
    for i in 0..SLICES {
        let ops = run.overwrites * (i + 1) / SLICES - run.overwrites * i / SLICES;
        println!("workload overwrite {}%", (i + 1) * 100 / SLICES);
        let m = workloads::run(
            &quiet,
            Workload::RSet,
            run.keys,
            ops,
            &value,
            shape.with_seed(i + 1),
        )?;
        // The runner rounds up to whole batches.
        mine += ops.div_ceil(shape.write_batch) * shape.write_batch * record;
        let (d, u) = counters()?;
        let u = user(u, mine);
        let ratio = |a: u64, b: u64| a as f64 / (b.max(1)) as f64;
        run.samples.push(Sample {
            percent: ((i + 1) * 100 / SLICES) as f64,
            seconds: started.elapsed().as_secs_f64(),
            ops_per_sec: m.ops_per_sec,
            wa_slice: ratio(d.saturating_sub(dp), u.saturating_sub(up)),
            wa_cumulative: ratio(d.saturating_sub(d0), u.saturating_sub(u0.unwrap_or(0))),
            p99_us: m.p99_us,
        });
        (dp, up) = (d, u);
    }
    let secs = started.elapsed().as_secs_f64();
    kv.settle()?;
    let (d, u) = counters()?;
    let u = user(u, mine);
    let user_bytes = u.saturating_sub(u0.unwrap_or(0)).max(1) as f64;
    run.final_wa = d.saturating_sub(d0) as f64 / user_bytes;
    run.engine_counters = engine0
        .zip(kv.engine_counters())
        .map(|(a, b)| crate::kv::counters_delta(&a, &b));
    if let (Some(m), Some(b0)) = (meter, block0) {
        run.block_wa = Some(m.written_bytes()?.saturating_sub(b0) as f64 / user_bytes);
    }
    run.ops_per_sec = run.overwrites as f64 / secs.max(1e-9);
    Ok(())
}

/// Rows of the extras for `results.json`: `qd1/*` (the four measurements) and
/// `breakdown/*` (the parts) with workload GET or SET; the ablation rows; `overwrite/*` rows,
/// one per sample (`overwrite-8K@NN%`: the slice's ops/s, cumulative WA) and a final one
/// (`overwrite-8K`: ops/s over the run, WA after the background work).
pub fn rows(x: &Extras) -> Vec<Row> {
    let mut rows = Vec::new();
    let lat_row = |system: &str, workload: &str, l: Lat| {
        let mut r = Row::measured(system, workload, 1, 0.0, 0.0, l.p50, 0.0);
        if l.mean > 0.0 {
            r.ops_per_sec = 1e6 / l.mean;
            r.mb_per_sec = r.ops_per_sec * VALUE_SIZE as f64 / 1e6;
        }
        r.mean_us = Some(l.mean);
        r.value_size = Some(VALUE_SIZE as u32);
        r.connections = Some(1);
        r.pipeline = Some(1);
        r
    };
    match &x.breakdown {
        Ok(b) => {
            for o in &b.ops {
                rows.push(lat_row("qd1/device", &o.op, o.device));
                rows.push(lat_row("qd1/lightstore-local", &o.op, o.local));
                rows.push(lat_row("qd1/lightstore-net", &o.op, o.net));
                rows.push(lat_row("qd1/ping", &o.op, o.ping));
                for (i, part) in PARTS.iter().enumerate() {
                    let mut r = lat_row(
                        &format!("breakdown/{}", part.replace(' ', "-").to_lowercase()),
                        &o.op,
                        Lat {
                            mean: o.parts_mean[i],
                            p50: o.parts_p50[i],
                        },
                    );
                    // A part is not a rate.
                    r.ops_per_sec = 0.0;
                    r.mb_per_sec = 0.0;
                    rows.push(r);
                }
            }
        }
        Err(why) => {
            for op in ["GET", "SET"] {
                let mut r = Row::missing("breakdown", op, 1, why.clone());
                r.value_size = Some(VALUE_SIZE as u32);
                rows.push(r);
            }
        }
    }
    rows.extend(x.ablation.iter().cloned());
    for o in &x.overwrite {
        let system = format!("overwrite/{}", o.system);
        if let Some(why) = &o.missing {
            let mut r = Row::missing(&system, "overwrite-8K", workloads::QD, why.clone());
            r.value_size = Some(VALUE_SIZE as u32);
            rows.push(r);
            continue;
        }
        let mb = |ops: f64| ops * VALUE_SIZE as f64 / 1e6;
        for s in &o.samples {
            let mut r = Row::measured(
                &system,
                &format!("overwrite-8K@{:02.0}%", s.percent),
                workloads::QD,
                s.ops_per_sec,
                mb(s.ops_per_sec),
                0.0,
                s.p99_us,
            );
            r.write_amp = Some(s.wa_cumulative);
            r.value_size = Some(VALUE_SIZE as u32);
            rows.push(r);
        }
        let mut r = Row::measured(
            &system,
            "overwrite-8K",
            workloads::QD,
            o.ops_per_sec,
            mb(o.ops_per_sec),
            0.0,
            0.0,
        );
        r.write_amp = Some(o.final_wa);
        r.value_size = Some(VALUE_SIZE as u32);
        rows.push(r);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_space_device_fits_in_the_space() {
        for peak_mib in [300u64, 2309, 4000] {
            let peak = peak_mib << 20;
            let mib = same_space_device_mib(peak);
            let file = |mib: u64| {
                Geometry::for_drive(mib << 20).unwrap().physical_pages()
                    * hwftl_sim::PAGE_SIZE as u64
            };
            assert!(
                file(mib) + (1 << 20) <= peak,
                "{mib} MiB does not fit in {peak_mib} MiB"
            );
            assert!(
                mib * 100 >= peak_mib * 90,
                "{mib} MiB wastes {peak_mib} MiB"
            );
        }
    }

    #[test]
    fn parts_add_up_and_clamp_with_a_note() {
        let (p, notes) = split(100.0, 130.0, 200.0, 40.0, "mean");
        assert_eq!(p, [40.0, 30.0, 30.0, 100.0]);
        assert!(notes.is_empty());
        assert!((p.iter().sum::<f64>() - 200.0).abs() < 1e-9);
        // Local faster than the device: engine 0; Net below the others: server 0.
        let (p, notes) = split(100.0, 90.0, 120.0, 40.0, "p50");
        assert_eq!(p, [40.0, 0.0, 0.0, 100.0]);
        assert_eq!(notes.len(), 2);
    }

    #[test]
    fn rows_name_every_part_and_sample() {
        let l = |m| Lat { mean: m, p50: m };
        let x = Extras {
            breakdown: Ok(breakdown(
                (l(100.0), l(50.0)),
                (l(120.0), l(80.0)),
                (l(200.0), l(150.0)),
                l(30.0),
                10,
                10,
            )),
            overwrite: vec![OverwriteRun {
                system: "lightstore-local".into(),
                samples: vec![Sample {
                    percent: 5.0,
                    wa_cumulative: 1.5,
                    ..Sample::default()
                }],
                final_wa: 1.7,
                ..OverwriteRun::default()
            }],
            ..Extras::default()
        };
        let rows = rows(&x);
        assert!(rows
            .iter()
            .any(|r| r.system == "breakdown/kv-server" && r.workload == "GET"));
        assert!(rows
            .iter()
            .any(|r| r.system == "overwrite/lightstore-local" && r.workload == "overwrite-8K@05%"));
        let fin = rows
            .iter()
            .find(|r| r.workload == "overwrite-8K")
            .and_then(|r| r.write_amp);
        assert_eq!(fin, Some(1.7));
        assert_eq!(
            ablation_system(Some("zero-copy")),
            "ablation/without-zero-copy"
        );
    }

    #[test]
    fn ablation_ratios_use_the_mean_baseline() {
        let row = |s: &str, ops: f64| Row::measured(s, "R-SET", 32, ops, 0.0, 0.0, 0.0);
        let mut rows = vec![
            row("ablation/baseline", 100.0),
            row("ablation/without-zero-copy", 75.0),
            row(BASELINE_AGAIN, 50.0),
            Row::missing("ablation/without-keytable-cache", "R-SET", 32, "no".into()),
        ];
        add_baseline_ratios(&mut rows);
        assert_eq!(rows[1].ratio_to_lightstore, Some(1.0));
        assert_eq!(rows[0].ratio_to_lightstore, Some(100.0 / 75.0));
        assert_eq!(rows[3].ratio_to_lightstore, None);
    }
}
