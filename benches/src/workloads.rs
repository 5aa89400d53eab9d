//! The paper's Table 3 workloads — S-SET, S-GET, R-SET, R-GET, R-Mixed (9 reads : 1 write)
//! — and Z-GET (random gets with YCSB's scrambled Zipfian key choice, theta 0.99: a hot set,
//! as caches see), defined once for every system behind [`KvUnderTest`], with the closed-loop runner that
//! measures them (client threads each issuing batches; throughput, per-operation latency
//! percentiles and CDF from an HdrHistogram, write amplification, CPU per operation, resident
//! memory), and the device ceiling each workload is held to.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use hwftl_sim::PAGE_SIZE;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::kv::{key, Key, KvSession, KvUnderTest, Settled};

/// Client threads (or connections) issuing batches concurrently.
pub const CLIENTS: u32 = 4;
/// Requests per client batch.
pub const BATCH: u32 = 8;
/// Requests in flight: `CLIENTS` batches of `BATCH`.
pub const QD: u32 = CLIENTS * BATCH;
/// An in-process write batch carries at least this many pages of values: the drive's writer
/// thread gathers the SETs queued from all connections into one group commit, so small
/// values share pages the way they do behind the network.
const WRITE_GROUP_PAGES: usize = 4;
/// R-Mixed runs at least this many operations, whatever the key count: its p99.9 is a
/// target, and over 16,384 operations (8 KiB values on the default data set) it is the 16th
/// slowest, so that one stop of 32 operations in flight (a host stall, one device flush)
/// would set it alone.
pub const MIXED_MIN_OPS: u64 = 131_072;
/// Z-GET runs at least this many operations, whatever the key count: it measures a hot set
/// served from each system's cache, and one pass over 16,384 keys (8 KiB values on the
/// default data set) makes a fifth of its reads the first read of a key (about 3,500
/// distinct keys in 16,384 draws), a miss every cache pays once, over a run of a quarter of
/// a second; over 131,072 draws that share is 6%. Every system runs the same count.
pub const ZIPF_MIN_OPS: u64 = 131_072;
/// Points kept of each latency CDF.
const CDF_POINTS: usize = 200;

/// One of the paper's workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Sequential puts of every key (also the load).
    SSet,
    /// Sequential gets.
    SGet,
    /// Random overwrites.
    RSet,
    /// Random gets.
    RGet,
    /// Nine random get batches for every random put batch.
    RMixed,
    /// Random gets, keys drawn from a scrambled Zipfian distribution (theta
    /// [`ZIPF_THETA`]): a few keys take most reads.
    ZGet,
}

/// The Zipfian skew of Z-GET (YCSB's default).
pub const ZIPF_THETA: f64 = 0.99;

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record synthetic
/// databases"): rank `r` (0 = hottest) with probability proportional to `1 / (r + 1)^theta`,
/// then scrambled by a hash over the key space so the hot keys are spread out (YCSB's
/// `ScrambledZipfianGenerator`).
#[derive(Debug, Clone, Copy)]
pub struct Zipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl Zipf {
    /// A generator over `0..n` (computes the zeta constant: O(n) once).
    pub fn new(n: u64, theta: f64) -> Zipf {
        let n = n.max(2);
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let (zetan, zeta2) = (zeta(n), zeta(2));
        Zipf {
            n,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    /// The next rank (0 = hottest).
    pub fn rank(&self, rng: &mut SmallRng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        ((self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.n - 1)
    }

    /// The next key: a rank scrambled over `0..n` (FNV-1a of the rank).
    pub fn key(&self, rng: &mut SmallRng) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.rank(rng).to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h % self.n
    }
}

impl Workload {
    /// Every workload, in the order they run (S-SET first: it loads the keys).
    pub const ALL: [Workload; 6] = [
        Workload::SSet,
        Workload::SGet,
        Workload::RSet,
        Workload::RGet,
        Workload::RMixed,
        Workload::ZGet,
    ];

    /// The paper's name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::SSet => "S-SET",
            Workload::SGet => "S-GET",
            Workload::RSet => "R-SET",
            Workload::RGet => "R-GET",
            Workload::RMixed => "R-Mixed",
            Workload::ZGet => "Z-GET",
        }
    }

    /// The workload of this name.
    pub fn from_name(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Operations a run of the workload makes on a data set of `keys` keys: one per key,
    /// and at least [`MIXED_MIN_OPS`] for R-Mixed and [`ZIPF_MIN_OPS`] for Z-GET.
    pub fn ops(self, keys: u64) -> u64 {
        match self {
            Workload::RMixed => keys.max(MIXED_MIN_OPS),
            Workload::ZGet => keys.max(ZIPF_MIN_OPS),
            _ => keys,
        }
    }

    /// The clients' seed for a run of this workload on a shape seeded with `seed`: each
    /// workload draws its keys from a stream of its own. With one seed for all, client `c`
    /// drew the same keys in the same order in R-SET, R-GET and R-Mixed (one key per draw
    /// whatever the batch length), so R-GET read back exactly what R-SET had just written,
    /// in order, and found the newest of it in every cache that writes fill (LightStore's
    /// value cache, RocksDB's memtables), and R-Mixed read what R-GET had just read.
    pub fn seed(self, seed: u64) -> u64 {
        let index = Workload::ALL.iter().position(|&w| w == self).unwrap_or(0) as u64;
        seed.wrapping_add(index.wrapping_mul(0x0123_4567_89ab_cdef))
    }

    /// Whether it reads.
    pub fn reads(self) -> bool {
        !matches!(self, Workload::SSet | Workload::RSet)
    }
}

/// How the clients issue requests.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Client threads (connections over RESP).
    pub clients: u32,
    /// Keys per read batch.
    pub read_batch: u64,
    /// Keys per write batch (R-Mixed's writes use `read_batch`).
    pub write_batch: u64,
    /// Added to the clients' random seeds, so runs that follow one another (the sustained
    /// overwrite's slices) pick different keys (each workload adds its own besides:
    /// [`Workload::seed`]).
    pub seed: u64,
}

impl Shape {
    /// In-process: `CLIENTS` threads with batches of `BATCH`; write batches of small values
    /// carry at least `WRITE_GROUP_PAGES` pages of values (one atomic write batch).
    pub fn in_process(value_size: usize) -> Shape {
        Shape {
            clients: CLIENTS,
            read_batch: u64::from(BATCH),
            write_batch: (BATCH as usize).max(WRITE_GROUP_PAGES * PAGE_SIZE / value_size.max(1))
                as u64,
            seed: 0,
        }
    }

    /// Over RESP: `CLIENTS` connections, each pipelining `BATCH` requests (the server groups
    /// writes of all connections itself).
    pub fn resp() -> Shape {
        Shape {
            clients: CLIENTS,
            read_batch: u64::from(BATCH),
            write_batch: u64::from(BATCH),
            seed: 0,
        }
    }

    /// Queue depth 1: one client, one request at a time (the latency breakdown).
    pub fn qd1() -> Shape {
        Shape {
            clients: 1,
            read_batch: 1,
            write_batch: 1,
            seed: 0,
        }
    }

    /// The same shape with the clients' seeds moved by `seed`.
    pub fn with_seed(self, seed: u64) -> Shape {
        Shape { seed, ..self }
    }
}

/// What one workload measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Mean latency of an operation, µs.
    pub mean_us: f64,
    /// Latency percentiles of an operation, µs: each operation of a batch is recorded with the
    /// batch's latency (they are submitted together and the batch returns when the last is
    /// done), in an HdrHistogram of 3 significant digits.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// The slowest operation, µs.
    pub max_us: f64,
    /// Bytes written to storage over user bytes (keys + values), counting the background
    /// work the writes left (waited for after the timed part); `None` for read workloads.
    pub write_amp: Option<f64>,
    /// Bytes that reached the block device below the file system over user bytes, from the
    /// meter [`use_disk_meter`] set up (`None` without one, and for read workloads).
    pub write_amp_disk: Option<f64>,
    /// CPU seconds of the serving process per million operations (the timed part and, for
    /// writes, the background work waited for after it).
    pub cpu_s_per_mop: Option<f64>,
    /// Resident memory of the serving process after the workload, MB.
    pub rss_mb: Option<f64>,
    /// How much LightStore's [`crate::kv::ENGINE_COUNTERS`] grew over the workload (its
    /// background work included); `None` for other systems.
    pub engine_counters: Option<crate::kv::EngineCounters>,
    /// Latency CDF: `[µs, fraction of operations at or below]`, at most `CDF_POINTS` points.
    pub cdf: Vec<[f64; 2]>,
    /// Whether the wait for the writes' background work ran to its end.
    pub settled: Settled,
    /// The 99.9th percentile of the read operations and of the write operations, µs, when
    /// the workload had both (R-Mixed); each from its own histogram.
    pub read_write_p999_us: Option<(f64, f64)>,
    /// What the host-stall probe saw during the workload (see [`crate::host_stalls`]).
    pub host_stalls: Option<crate::host_stalls::HostStalls>,
}

/// Runs workload `w` on a system loaded with keys `0..keys` (S-SET loads them): `ops`
/// operations of `value`-sized puts and gets, issued as `shape` says.
///
/// # Errors
/// When the system fails or a loaded key is missing.
pub fn run(
    kv: &dyn KvUnderTest,
    w: Workload,
    keys: u64,
    ops: u64,
    value: &[u8],
    shape: Shape,
) -> anyhow::Result<Measured> {
    let n = keys.max(1);
    let (rb, wb) = (shape.read_batch, shape.write_batch);
    let random = |rng: &mut SmallRng, len: u64| -> Vec<Key> {
        (0..len).map(|_| key(rng.gen_range(0..n))).collect()
    };
    let zipf = (w == Workload::ZGet).then(|| Zipf::new(n, ZIPF_THETA));
    let skewed = |rng: &mut SmallRng, len: u64| -> Vec<Key> {
        let z = zipf.as_ref();
        (0..len).map(|_| key(z.map_or(0, |z| z.key(rng)))).collect()
    };
    let in_order = |batch: u64, len: u64| -> Vec<Key> {
        (batch * len..(batch + 1) * len)
            .map(|i| key(i % n))
            .collect()
    };
    if w.reads() {
        kv.before_reads();
    }
    let batch_len = match w {
        Workload::SSet | Workload::RSet => wb,
        _ => rb,
    };
    measure(
        kv,
        ops,
        batch_len,
        shape.clients,
        w.seed(shape.seed),
        value.len(),
        |s, rng, b| {
            match w {
                Workload::SSet => s.put(&in_order(b, wb), value).map(|()| wb),
                Workload::SGet => s.get(&in_order(b, rb)).map(|()| 0),
                Workload::RSet => s.put(&random(rng, wb), value).map(|()| wb),
                Workload::RGet => s.get(&random(rng, rb)).map(|()| 0),
                // Nine read batches for every write batch of the same length.
                Workload::RMixed if b % 10 == 9 => s.put(&random(rng, rb), value).map(|()| rb),
                Workload::RMixed => s.get(&random(rng, rb)).map(|()| 0),
                Workload::ZGet => s.get(&skewed(rng, rb)).map(|()| 0),
            }
        },
    )
}

/// Round trips of the session's no-op command (PING over RESP) at queue depth 1: `ops` of
/// them from one client, measured as the workloads are.
///
/// # Errors
/// When the system has no no-op command or fails.
pub fn noop_qd1(kv: &dyn KvUnderTest, ops: u64) -> anyhow::Result<Measured> {
    measure(kv, ops, 1, 1, 0, 0, |s, _, _| s.noop().map(|()| 0))
}

/// Client `c`'s random stream in a run seeded with `seed`.
fn client_rng(seed: u64, c: u32) -> SmallRng {
    SmallRng::seed_from_u64(
        0x5eed_u64
            .wrapping_add(seed.wrapping_mul(0x9e37_79b9))
            .wrapping_add(u64::from(c)),
    )
}

/// Runs `ops` operations from `clients` threads, each with its own session issuing batches
/// of `batch_len` through `f(session, rng, batch_number)` (which returns the keys it put);
/// batch numbers are handed out in order across the clients. Client `c` seeds its random
/// keys with `seed + c`.
#[allow(clippy::too_many_arguments)]
fn measure<F>(
    kv: &dyn KvUnderTest,
    ops: u64,
    batch_len: u64,
    clients: u32,
    seed: u64,
    value_len: usize,
    f: F,
) -> anyhow::Result<Measured>
where
    F: Fn(&mut dyn KvSession, &mut SmallRng, u64) -> anyhow::Result<u64> + Sync,
{
    let batches = ops.div_ceil(batch_len.max(1));
    let next = AtomicU64::new(0);
    let put_keys = AtomicU64::new(0);
    let written0 = kv.written_bytes().ok();
    let disk0 = disk_written_bytes();
    let cpu0 = kv.cpu_seconds().ok();
    let counters0 = kv.engine_counters();
    let probe = crate::host_stalls::StallProbe::start();
    let start = Instant::now();
    // Per client: the latencies of its read batches and of its write batches.
    type Latencies = (Histogram<u64>, Histogram<u64>);
    let per_client: Vec<anyhow::Result<Latencies>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (f, next, put_keys) = (&f, &next, &put_keys);
                scope.spawn(move || {
                    let mut session = kv.session()?;
                    let mut rng = client_rng(seed, c);
                    // Nanoseconds; they grow to fit whatever is recorded.
                    let mut reads = Histogram::<u64>::new(LATENCY_DIGITS)?;
                    let mut writes = Histogram::<u64>::new(LATENCY_DIGITS)?;
                    loop {
                        let b = next.fetch_add(1, Ordering::Relaxed);
                        if b >= batches {
                            return Ok((reads, writes));
                        }
                        let t0 = Instant::now();
                        let put = f(session.as_mut(), &mut rng, b)?;
                        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        let lat = if put > 0 { &mut writes } else { &mut reads };
                        lat.record_n(ns.max(1), batch_len.max(1))?;
                        put_keys.fetch_add(put, Ordering::Relaxed);
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
    let put_keys = put_keys.load(Ordering::Relaxed);
    // The clock stops once the writes' background work (flushes, compactions) has settled:
    // every system pays for the work its writes caused, in the same timed section.
    let settled = if put_keys > 0 {
        kv.settle()?
    } else {
        Settled::Done
    };
    let secs = start.elapsed().as_secs_f64();
    let host_stalls = probe.finish();
    let engine_counters = counters0
        .zip(kv.engine_counters())
        .map(|(a, b)| crate::kv::counters_delta(&a, &b));
    let mut lat = Histogram::<u64>::new(LATENCY_DIGITS)?;
    let mut reads = Histogram::<u64>::new(LATENCY_DIGITS)?;
    let mut writes = Histogram::<u64>::new(LATENCY_DIGITS)?;
    for l in per_client {
        let (r, w) = l?;
        reads.add(&r)?;
        writes.add(&w)?;
    }
    lat.add(&reads)?;
    lat.add(&writes)?;
    let p999 = |h: &Histogram<u64>| h.value_at_quantile(0.999) as f64 / 1e3;
    let read_write_p999_us =
        (!reads.is_empty() && !writes.is_empty()).then(|| (p999(&reads), p999(&writes)));
    let written1 = kv.written_bytes().ok();
    let disk1 = disk_written_bytes();
    let cpu1 = kv.cpu_seconds().ok();
    let pct = |q: f64| lat.value_at_quantile(q) as f64 / 1e3;
    let done = batches * batch_len;
    let user = put_keys * (std::mem::size_of::<Key>() + value_len) as u64;
    let write_amp = match (written0, written1) {
        (Some(a), Some(b)) if user > 0 => Some(b.saturating_sub(a) as f64 / user as f64),
        _ => None,
    };
    let write_amp_disk = match (disk0, disk1) {
        (Some(a), Some(b)) if user > 0 => Some(b.saturating_sub(a) as f64 / user as f64),
        _ => None,
    };
    let cpu_s_per_mop = match (cpu0, cpu1) {
        (Some(a), Some(b)) if done > 0 => Some((b - a).max(0.0) / (done as f64 / 1e6)),
        _ => None,
    };
    let empty = lat.is_empty();
    Ok(Measured {
        ops_per_sec: done as f64 / secs.max(1e-9),
        mean_us: if empty { 0.0 } else { lat.mean() / 1e3 },
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        max_us: lat.max() as f64 / 1e3,
        write_amp,
        write_amp_disk,
        cpu_s_per_mop,
        rss_mb: kv.rss_mb(),
        engine_counters,
        cdf: cdf(&lat),
        settled,
        read_write_p999_us,
        host_stalls,
    })
}

/// The block-device meter of this process's runs (see [`use_disk_meter`]).
static DISK_METER: std::sync::OnceLock<crate::procfs::BlockDevMeter> = std::sync::OnceLock::new();

/// Meters every later run's writes on the block device below the file system holding `dir`
/// (the data of the system under test), so every system's write amplification comes from
/// the same meter (issue 18). Without one the runs report the process meter only.
///
/// # Errors
/// When `dir` has no block device behind it (tmpfs, overlay).
pub fn use_disk_meter(dir: &std::path::Path) -> anyhow::Result<()> {
    let meter = crate::procfs::BlockDevMeter::for_dir(dir)?;
    let _ = DISK_METER.set(meter);
    Ok(())
}

/// Bytes written to the metered block device so far (after `syncfs`), if metered.
fn disk_written_bytes() -> Option<u64> {
    DISK_METER.get().and_then(|m| m.written_bytes().ok())
}

/// Significant decimal digits of the latency histograms (0.1% resolution).
const LATENCY_DIGITS: u8 = 3;

/// At most `CDF_POINTS` points of the histogram's CDF (`[µs, fraction at or below]`), at
/// evenly spaced fractions, ending with the slowest operation.
fn cdf(lat: &Histogram<u64>) -> Vec<[f64; 2]> {
    if lat.is_empty() {
        return Vec::new();
    }
    (1..=CDF_POINTS)
        .map(|i| {
            let q = i as f64 / CDF_POINTS as f64;
            [lat.value_at_quantile(q) as f64 / 1e3, q]
        })
        .collect()
}

/// The raw device's figures at depth `QD` on the same backend: 8 KiB pages per second of
/// sequential writes and of random reads.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Ceiling {
    /// Sequential 8 KiB writes per second.
    pub write_ops: f64,
    /// Random 8 KiB reads per second.
    pub read_ops: f64,
}

impl Ceiling {
    /// Operations per second the device alone allows for workload `w` with values of
    /// `value_size` bytes: writes are bytes at the sequential write rate (the engine appends,
    /// so R-SET has the same ceiling as S-SET), reads one page each (Z-GET too: the
    /// device-bound figure, which a cache of the hot keys can pass), and the mix per ten
    /// operations nine page reads and one value written.
    pub fn ops(&self, w: Workload, value_size: usize) -> f64 {
        let pages_per_value = value_size as f64 / PAGE_SIZE as f64;
        match w {
            Workload::SSet | Workload::RSet => self.write_ops / pages_per_value,
            Workload::SGet | Workload::RGet | Workload::ZGet => self.read_ops,
            Workload::RMixed => {
                1.0 / (0.9 / self.read_ops + 0.1 * pages_per_value / self.write_ops)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_ends_at_one_and_is_bounded() {
        let mut h = Histogram::<u64>::new(LATENCY_DIGITS).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let c = cdf(&h);
        assert!(c.len() <= CDF_POINTS);
        assert_eq!(c.last().map(|p| p[1]), Some(1.0));
        // The last point is the slowest operation (within the histogram's 0.1%).
        assert!((c.last().unwrap()[0] - 1000.0).abs() <= 1.0, "{c:?}");
        assert!(c
            .windows(2)
            .all(|w| w[0][0] <= w[1][0] && w[0][1] < w[1][1]));
        assert!(cdf(&Histogram::<u64>::new(LATENCY_DIGITS).unwrap()).is_empty());
    }

    #[test]
    fn a_batch_counts_once_per_operation() {
        // 99 fast single-key batches and one slow batch of 100 keys: half the operations
        // are slow, so the median is the slow one's latency (a per-batch count would say fast).
        let mut h = Histogram::<u64>::new(LATENCY_DIGITS).unwrap();
        h.record_n(10_000, 1).unwrap();
        for _ in 0..98 {
            h.record_n(10_000, 1).unwrap();
        }
        h.record_n(5_000_000, 100).unwrap();
        assert_eq!(h.len(), 199);
        assert!(h.value_at_quantile(0.6) >= 4_990_000);
        assert!(h.value_at_quantile(0.4) <= 10_010);
    }

    #[test]
    fn ceiling_matches_the_local_benchmark_ratios() {
        let c = Ceiling {
            write_ops: 50_000.0,
            read_ops: 100_000.0,
        };
        assert!((c.ops(Workload::SSet, 8192) - 50_000.0).abs() < 1e-6);
        assert!((c.ops(Workload::RSet, 100) - 50_000.0 * 8192.0 / 100.0).abs() < 1e-3);
        assert!((c.ops(Workload::RGet, 100) - 100_000.0).abs() < 1e-6);
        let per_op = 0.9 / 100_000.0 + 0.1 / 50_000.0;
        assert!((c.ops(Workload::RMixed, 8192) - 1.0 / per_op).abs() < 1e-3);
        assert_eq!(Workload::from_name("R-Mixed"), Some(Workload::RMixed));
    }

    #[test]
    fn zipf_draws_a_hot_set() {
        let z = Zipf::new(100_000, ZIPF_THETA);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..200_000 {
            let k = z.key(&mut rng);
            assert!(k < 100_000);
            *counts.entry(k).or_insert(0u32) += 1;
        }
        let mut c: Vec<u32> = counts.into_values().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        let top: u32 = c.iter().take(1000).sum();
        // Theta 0.99 over 100,000 keys: the hottest 1% of keys take about half the draws.
        assert!(
            top > 80_000 && top < 140_000,
            "top 1,000 keys: {top} of 200,000"
        );
        assert!(c.len() > 10_000, "only {} distinct keys", c.len());
    }

    #[test]
    fn a_zipfian_run_outlasts_its_first_reads() {
        // The default data set's 8 KiB keys: one pass would make a fifth of the reads a
        // key's first (ZIPF_MIN_OPS' reason); the run it gets makes that share small.
        let keys = 16_384;
        let ops = Workload::ZGet.ops(keys);
        assert_eq!(ops, ZIPF_MIN_OPS);
        let share = |n: u64| {
            let z = Zipf::new(keys, ZIPF_THETA);
            let mut rng = SmallRng::seed_from_u64(7);
            let mut seen = std::collections::HashSet::new();
            let first = (0..n).filter(|_| seen.insert(z.key(&mut rng))).count();
            first as f64 / n as f64
        };
        let (one_pass, run) = (share(keys), share(ops));
        assert!(one_pass > 0.15, "one pass: {one_pass:.3} first reads");
        assert!(run < 0.08, "the run: {run:.3} first reads");
        // Larger data sets run one pass, as every other read workload.
        assert_eq!(Workload::ZGet.ops(1 << 20), 1 << 20);
        assert_eq!(Workload::RGet.ops(keys), keys);
    }

    #[test]
    fn each_workload_draws_keys_of_its_own() {
        let n = 16_384u64;
        // Client 0's first 2,000 keys in a run of `w`, as `measure` seeds them.
        let keys = |w: Workload, seed: u64| -> std::collections::HashSet<u64> {
            let mut rng = client_rng(w.seed(seed), 0);
            (0..2_000).map(|_| rng.gen_range(0..n)).collect()
        };
        let (set, get, mixed) = (
            keys(Workload::RSet, 0),
            keys(Workload::RGet, 0),
            keys(Workload::RMixed, 0),
        );
        // Independent draws of 2,000 from 16,384 share about 220 keys; the same stream
        // would share all of them.
        for (a, b, what) in [(&set, &get, "R-SET/R-GET"), (&get, &mixed, "R-GET/R-Mixed")] {
            let shared = a.intersection(b).count();
            assert!(shared < 400, "{what}: {shared} of {} keys shared", a.len());
        }
        // The overwrite's slices (seeds 1, 2, ...) differ from each other and from seed 0.
        let seeds: std::collections::HashSet<u64> = Workload::ALL
            .iter()
            .flat_map(|&w| (0..4).map(move |s| w.seed(s)))
            .collect();
        assert_eq!(seeds.len(), Workload::ALL.len() * 4);
    }
}
