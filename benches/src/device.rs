//! `device` benchmark: 8 KiB random and sequential reads and writes on every backend and
//! timing preset of the append-only device, and `fio` (io_uring, O_DIRECT) on the same bytes
//! of the same file in the same run — the ceiling the file backend is held to.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use hwftl_sim::loadgen::{self, Clock, LoadReport, LoadSpec, Pattern};
use hwftl_sim::{
    AppendDevice, Backend, Command, DeviceConfig, Ftl, Geometry, RamStore, Release, SegmentId,
    TimingModel, PAGE_SIZE,
};

use crate::fio::{self, FioJob};
use crate::report::Row;

/// Pages per erase block of the benchmark device (8 MiB segments on 8 x 8 chips).
const PAGES_PER_BLOCK: u32 = 16;

/// Settings of one device benchmark run.
#[derive(Debug, Clone)]
pub struct DeviceBench {
    /// Small region and op counts (about a minute).
    pub quick: bool,
    /// Directory for the device file.
    pub scratch: PathBuf,
    /// Overrides the number of operations per workload (queue depth 1 runs a tenth).
    pub ops: Option<u64>,
    /// Runs of each workload (device and fio alternate); the median run is reported.
    pub repeats: u32,
    /// Overrides the size of the region the workloads run on, in MiB.
    pub region_mib: Option<u64>,
    /// Runs only the workloads whose names contain one of these.
    pub only: Vec<String>,
    /// Runs only the systems whose names contain one of these (fio runs with the file backend).
    pub systems: Vec<String>,
}

struct Workload {
    name: &'static str,
    pattern: Pattern,
    qd: u32,
    fio_rw: &'static str,
}

const READS: [Workload; 3] = [
    Workload {
        name: "randread-qd1",
        pattern: Pattern::RandRead,
        qd: 1,
        fio_rw: "randread",
    },
    Workload {
        name: "randread-qd32",
        pattern: Pattern::RandRead,
        qd: 32,
        fio_rw: "randread",
    },
    Workload {
        name: "seqread-qd32",
        pattern: Pattern::SeqRead,
        qd: 32,
        fio_rw: "read",
    },
];

const WRITES: [Workload; 2] = [
    Workload {
        name: "randwrite-qd32",
        pattern: Pattern::RandWrite { open_segments: 32 },
        qd: 32,
        fio_rw: "randwrite",
    },
    Workload {
        name: "seqwrite-qd32",
        pattern: Pattern::SeqWrite,
        qd: 32,
        fio_rw: "write",
    },
];

impl DeviceBench {
    fn region_bytes(&self) -> u64 {
        if let Some(mib) = self.region_mib {
            return mib.max(8) << 20;
        }
        if self.quick {
            256 << 20
        } else {
            2 << 30
        }
    }

    fn ops(&self, qd: u32) -> u64 {
        let base = self
            .ops
            .unwrap_or(if self.quick { 50_000 } else { 200_000 });
        let region_pages = self.region_bytes() / PAGE_SIZE as u64;
        let n = if qd == 1 { (base / 10).max(100) } else { base };
        n.min(region_pages)
    }

    fn geometry(&self) -> anyhow::Result<Geometry> {
        // The region is the whole device (plus the spare blocks): a write run can only land
        // on the blocks fio writes to, in the same state.
        Ok(Geometry::with_capacity(
            8,
            8,
            PAGES_PER_BLOCK,
            self.region_bytes(),
        )?)
    }

    fn region_segments(&self, g: &Geometry) -> u32 {
        (self.region_bytes() / g.segment_bytes()) as u32
    }

    /// Runs every backend and preset, and fio; returns the rows.
    ///
    /// # Errors
    /// When a device cannot be created or a run fails (fio failing only makes its rows
    /// missing).
    pub fn run(&self) -> anyhow::Result<Vec<Row>> {
        std::fs::create_dir_all(&self.scratch)
            .with_context(|| format!("creating {}", self.scratch.display()))?;
        // The region, its spare blocks (2%, at least one per chip) and the metadata.
        check_free_space(&self.scratch, self.region_bytes() * 51 / 50 + (64 << 20))?;
        let mut rows = Vec::new();
        let want = |label: &str| selected(&self.systems, label);
        for (timing, release, label) in [
            (TimingModel::None, Release::Virtual, "hwftl-ram/none"),
            (
                TimingModel::PaperCard,
                Release::Virtual,
                "hwftl-ram/paper-card",
            ),
        ] {
            if !want(label) {
                continue;
            }
            let dev = self.device(&Backend::Ram(RamStore::new()), timing, release)?;
            let clock = if timing == TimingModel::None {
                Clock::Wall
            } else {
                Clock::Device
            };
            rows.extend(self.run_device(&dev, label, clock, None)?);
        }
        let path = self.scratch.join("device-bench.img");
        let file = Backend::File(path.clone());
        if want("hwftl-file/none") || want("hwftl-file/paper-card") {
            self.precondition(&file, &path)?;
        }
        if want("hwftl-file/none") {
            let dev = self.device(&file, TimingModel::None, Release::Virtual)?;
            rows.extend(self.run_device(&dev, "hwftl-file/none", Clock::Wall, Some(&path))?);
        }
        if want("hwftl-file/paper-card") {
            let dev = self.device(&file, TimingModel::PaperCard, Release::WallClock)?;
            rows.extend(self.run_device(&dev, "hwftl-file/paper-card", Clock::Wall, None)?);
        }
        let _ = std::fs::remove_file(&path);
        Ok(rows)
    }

    /// Creates the device file and writes every byte of it once; the devices formatted on it
    /// afterwards erase it in place and keep its blocks. A new file's blocks are new to the
    /// virtual disk under it as well: this host's disk is mounted with `discard`, so the first
    /// write of each block costs the host an allocation that fio, writing where the region
    /// was just filled, never pays. Without this the first random-write run on the device
    /// (which a trim moves to blocks never written) measured 0.61x fio, the next ones
    /// 0.78-1.01x.
    fn precondition(&self, backend: &Backend, path: &Path) -> anyhow::Result<()> {
        use std::io::Write;
        self.device(backend, TimingModel::None, Release::Virtual)?
            .close()?;
        let len = std::fs::metadata(path)
            .with_context(|| format!("stat {}", path.display()))?
            .len();
        eprintln!("preconditioning {} ({} MiB)", path.display(), len >> 20);
        let mut f = std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?,
        );
        // Not zeroes: a virtual disk may store a block of zeroes as a hole.
        let chunk = vec![0xa5u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }

    fn device(
        &self,
        backend: &Backend,
        timing: TimingModel,
        release: Release,
    ) -> anyhow::Result<Ftl> {
        let mut cfg = DeviceConfig::new(self.geometry()?);
        cfg.timing = timing;
        cfg.release = release;
        Ok(Ftl::format(backend, cfg)?)
    }

    fn spec(&self, w: &Workload, segments: u32) -> LoadSpec {
        LoadSpec {
            pattern: w.pattern,
            queue_depth: w.qd,
            ops: self.ops(w.qd),
            first_segment: 0,
            segments,
            seed: 42,
            clock: Clock::Wall,
        }
    }

    /// Reads first (on a fresh device the region is one contiguous extent of the file, which
    /// fio then reads too), then writes; with `fio_file`, fio runs each workload on the same
    /// bytes right after the device did.
    fn run_device(
        &self,
        dev: &Ftl,
        system: &str,
        clock: Clock,
        fio_file: Option<&Path>,
    ) -> anyhow::Result<Vec<Row>> {
        let g = dev.geometry();
        let segments = self.region_segments(&g);
        let mut rows = Vec::new();
        eprintln!("{system}: filling {} MiB", self.region_bytes() >> 20);
        loadgen::prefill(dev, 0, segments, 32)?;
        let extent = region_extent(dev, segments);
        // Writes: a trimmed segment is mapped again to the least-worn free blocks, which may
        // be a spare, so fio writes over every block of the device (the region and the
        // spares, 2% more) and the two write the same bytes of the file.
        let write_extent = extent.map(|(start, _)| {
            let blocks = u64::from(g.blocks_per_chip);
            (start, blocks * g.segment_bytes())
        });
        let fio_ok = fio_file.map(|_| fio::available());
        for w in READS.iter().chain(&WRITES) {
            if !selected(&self.only, w.name) {
                continue;
            }
            let spec = LoadSpec {
                clock,
                ..self.spec(w, segments)
            };
            let is_write = matches!(w.pattern, Pattern::SeqWrite | Pattern::RandWrite { .. });
            let mut ours = Vec::new();
            let mut theirs = Vec::new();
            // Repeats only serve the pairing with fio.
            let repeats = if fio_file.is_some() {
                self.repeats.max(1)
            } else {
                1
            };
            for _ in 0..repeats {
                // A write run starts on erased space: the device trims the region itself.
                let r = loadgen::run(dev, &spec)?;
                ours.push(row(system, w, &r));
                let (Some(file), Some(ok)) = (fio_file, &fio_ok) else {
                    continue;
                };
                let fio_extent = if is_write { write_extent } else { extent };
                if is_write {
                    // fio writes into erased space too, as the device just did.
                    trim(dev, segments)?;
                    if let Some((off, len)) = fio_extent {
                        punch(file, off, len)?;
                    }
                }
                theirs.push(fio_row(file, w, spec.ops, fio_extent, ok));
                if is_write {
                    if let Some((off, len)) = fio_extent {
                        punch(file, off, len)?;
                    }
                }
            }
            // Each device run is compared with the fio run right after it (the disk's speed
            // drifts); the median of those ratios is the row's ratio.
            let mut ratios: Vec<f64> = ours
                .iter()
                .zip(&theirs)
                .filter(|(_, f)| f.missing.is_none() && f.ops_per_sec > 0.0)
                .map(|(o, f)| o.ops_per_sec / f.ops_per_sec)
                .collect();
            if ratios.len() > 1 {
                eprintln!(
                    "{system} {}: ratios to fio, in run order {ratios:.2?}",
                    w.name
                );
            }
            ratios.sort_by(f64::total_cmp);
            let mut mine = median(ours);
            if let Some(r) = mine.as_mut() {
                r.ratio_to_fio = ratios.get(ratios.len() / 2).copied();
            }
            rows.extend(mine);
            rows.extend(median(theirs));
            if is_write {
                // Leave the region written for whatever runs next.
                loadgen::prefill(dev, 0, segments, 32)?;
            }
        }
        Ok(rows)
    }
}

fn selected(filters: &[String], name: &str) -> bool {
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

/// The run with the median ops/s (a missing run counts as zero).
fn median(mut runs: Vec<Row>) -> Option<Row> {
    runs.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    let mid = runs.len() / 2;
    runs.into_iter().nth(mid)
}

fn trim(dev: &Ftl, segments: u32) -> anyhow::Result<()> {
    for s in 0..segments {
        dev.execute(Command::Trim {
            segment: SegmentId(s),
        })?
        .result?;
    }
    Ok(())
}

/// The file byte range holding segments `0..segments`, when it is one contiguous run.
fn region_extent(dev: &Ftl, segments: u32) -> Option<(u64, u64)> {
    let (start, seg_len) = dev.segment_extent(SegmentId(0))?;
    for s in 1..segments {
        let (off, _) = dev.segment_extent(SegmentId(s))?;
        if off != start + u64::from(s) * seg_len {
            return None;
        }
    }
    Some((start, u64::from(segments) * seg_len))
}

/// Erases a range of the file the way the device's erase does (zero the range, keeping its
/// blocks allocated; punch a hole where the file system cannot), so fio writes into the same
/// kind of space as the device.
fn punch(file: &Path, offset: u64, len: u64) -> anyhow::Result<()> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
        bail!("range too large to erase");
    };
    for mode in [
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    ] {
        // SAFETY: plain syscall on an open descriptor; no memory is passed.
        let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, off, n) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
            bail!("erasing a range of {}: {err}", file.display());
        }
    }
    bail!(
        "{} supports neither zeroing nor punching a range",
        file.display()
    )
}

fn check_free_space(dir: &Path, need: u64) -> anyhow::Result<()> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    let mut st: libc::statvfs = unsafe_zeroed_statvfs();
    // SAFETY: `c` is a valid NUL-terminated path and `st` a valid out-pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Ok(());
    }
    // The field types differ between platforms (u32 on some, u64 here).
    #[allow(clippy::useless_conversion)]
    let free = u64::from(st.f_bavail) * u64::from(st.f_frsize);
    if free < need {
        bail!(
            "{} has {} MiB free; the device benchmark needs {} MiB",
            dir.display(),
            free >> 20,
            need >> 20
        );
    }
    Ok(())
}

fn unsafe_zeroed_statvfs() -> libc::statvfs {
    // SAFETY: statvfs is a plain C struct of integers, for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

fn row(system: &str, w: &Workload, r: &LoadReport) -> Row {
    Row::measured(
        system,
        w.name,
        w.qd,
        r.ops_per_sec(),
        r.mb_per_sec(),
        r.percentile_us(50.0),
        r.percentile_us(99.0),
    )
}

fn fio_row(
    file: &Path,
    w: &Workload,
    ops: u64,
    extent: Option<(u64, u64)>,
    available: &anyhow::Result<String>,
) -> Row {
    if let Err(e) = available {
        return Row::missing("fio", w.name, w.qd, format!("{e:#}"));
    }
    let Some((offset, size)) = extent else {
        return Row::missing(
            "fio",
            w.name,
            w.qd,
            "the device region is not one contiguous extent of the file".into(),
        );
    };
    let job = FioJob {
        rw: w.fio_rw,
        iodepth: w.qd,
        ios: ops,
        offset,
        size,
    };
    match fio::run(file, &job) {
        Ok(f) => Row::measured(
            "fio",
            w.name,
            w.qd,
            f.iops,
            f.bytes_per_sec / 1e6,
            f.p50_us,
            f.p99_us,
        ),
        Err(e) => Row::missing("fio", w.name, w.qd, format!("{e:#}")),
    }
}
