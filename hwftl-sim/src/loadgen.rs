//! A closed-loop load generator for any [`AppendDevice`]: keeps a fixed number of 8 KiB
//! commands in flight (sequential or random, read or write) and reports throughput and
//! latency. The device benchmark and the timing-model tests both measure with it.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::buffer::PageBuf;
use crate::device::{AppendDevice, Command, Completion, Wait};
use crate::error::{DeviceError, Result};
use crate::geometry::{Lba, SegmentId, PAGE_SIZE};

/// What kind of I/O to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Appends filling the region's segments one after another.
    SeqWrite,
    /// Appends spread at random over this many open segments of the region at once.
    RandWrite {
        /// Segments open at the same time.
        open_segments: u32,
    },
    /// Reads of the region's pages in LBA order (wrapping).
    SeqRead,
    /// Reads of uniformly random pages of the region.
    RandRead,
}

/// Which clock measures elapsed time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The device's own clock ([`crate::DeviceStats::clock_ns`]): virtual time under a
    /// timing model with virtual release.
    Device,
    /// The wall clock.
    Wall,
}

/// One load run.
#[derive(Debug, Clone, Copy)]
pub struct LoadSpec {
    /// The I/O pattern.
    pub pattern: Pattern,
    /// Commands kept in flight.
    pub queue_depth: u32,
    /// Commands to complete.
    pub ops: u64,
    /// First segment of the region used.
    pub first_segment: u32,
    /// Segments in the region. Writes trim the region first; reads expect it written
    /// (see [`prefill`]).
    pub segments: u32,
    /// Seed of the random pattern.
    pub seed: u64,
    /// Clock used for elapsed time.
    pub clock: Clock,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Commands completed.
    pub ops: u64,
    /// Elapsed time on the chosen clock, nanoseconds.
    pub elapsed_ns: u64,
    /// Per-command service times, sorted ascending.
    pub latencies_ns: Vec<u64>,
}

impl LoadReport {
    /// Commands per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 * 1e9 / self.elapsed_ns.max(1) as f64
    }

    /// Megabytes (10^6 bytes) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.ops_per_sec() * PAGE_SIZE as f64 / 1e6
    }

    /// Latency percentile `p` (0..=100) in microseconds.
    pub fn percentile_us(&self, p: f64) -> f64 {
        if self.latencies_ns.is_empty() {
            return 0.0;
        }
        let last = self.latencies_ns.len() - 1;
        let i = ((p / 100.0) * last as f64).round() as usize;
        self.latencies_ns[i.min(last)] as f64 / 1e3
    }
}

fn io_error(msg: String) -> DeviceError {
    DeviceError::io("load generator", std::io::Error::other(msg))
}

/// Trims the region and fills it completely with sequential appends at queue depth `qd`.
///
/// # Errors
/// As [`run`]: a queue depth of 0, a region past the device, or the first device error met.
pub fn prefill(dev: &dyn AppendDevice, first_segment: u32, segments: u32, qd: u32) -> Result<()> {
    let pages = u64::from(dev.geometry().pages_per_segment()) * u64::from(segments);
    run(
        dev,
        &LoadSpec {
            pattern: Pattern::SeqWrite,
            queue_depth: qd,
            ops: pages,
            first_segment,
            segments,
            seed: 0,
            clock: Clock::Wall,
        },
    )
    .map(|_| ())
}

/// The region's segments, `first_segment..end`, checked against the device.
fn region(dev: &dyn AppendDevice, spec: &LoadSpec) -> Result<std::ops::Range<u32>> {
    if spec.segments == 0 {
        return Err(io_error("the region has no segments".into()));
    }
    let g = dev.geometry();
    match spec.first_segment.checked_add(spec.segments) {
        Some(end) => {
            g.check_segment(SegmentId(end - 1))?;
            Ok(spec.first_segment..end)
        }
        // The region ends past any segment a device can have.
        None => Err(DeviceError::SegmentOutOfRange {
            segment: SegmentId(u32::MAX),
            segments: g.segments(),
        }),
    }
}

fn trim_region(dev: &dyn AppendDevice, region: std::ops::Range<u32>) -> Result<()> {
    for s in region {
        dev.execute(Command::Trim {
            segment: SegmentId(s),
        })?
        .result?;
    }
    Ok(())
}

/// Runs one closed-loop load and measures it.
///
/// # Errors
/// `SegmentOutOfRange` for a region past the device (or past `u32::MAX`), an empty region, a
/// queue depth of 0, a write pattern asking for more pages than the region holds, or the
/// first device error met.
pub fn run(dev: &dyn AppendDevice, spec: &LoadSpec) -> Result<LoadReport> {
    let g = dev.geometry();
    let region = region(dev, spec)?;
    if spec.queue_depth == 0 {
        // Nothing could ever be in flight: the loop would wait forever.
        return Err(io_error("the queue depth must be at least 1".into()));
    }
    let pps = u64::from(g.pages_per_segment());
    let region_pages = pps * u64::from(spec.segments);
    let writes = matches!(spec.pattern, Pattern::SeqWrite | Pattern::RandWrite { .. });
    if writes {
        if spec.ops > region_pages {
            return Err(io_error(format!(
                "{} writes do not fit in {} pages",
                spec.ops, region_pages
            )));
        }
        trim_region(dev, region.clone())?;
    }
    let mut rng = SmallRng::seed_from_u64(spec.seed);
    let open = match spec.pattern {
        Pattern::RandWrite { open_segments } => open_segments.clamp(1, spec.segments),
        _ => 1,
    };
    // Random writes: `open` cursors, each walking its own share of the region's segments.
    let mut cursors: Vec<(u32, u32)> = (0..open).map(|i| (spec.first_segment + i, 0)).collect();
    // No overflow: `open <= segments` and the region ends at or below `u32::MAX`.
    let mut next_segment = spec.first_segment + open;
    let mut seq_cursor = 0u64;
    let mut bufs: Vec<PageBuf> = (0..spec.queue_depth)
        .map(|i| {
            let mut p = PageBuf::zeroed();
            p[..8].copy_from_slice(&u64::from(i).to_le_bytes());
            p[PAGE_SIZE - 8..].copy_from_slice(&spec.seed.to_le_bytes());
            p
        })
        .collect();
    // One latency per op, but a huge op count (a long read run) must not reserve it all up
    // front (or truncate on a 32-bit target).
    let mut latencies =
        Vec::with_capacity(usize::try_from(spec.ops).map_or(1 << 20, |n| n.min(1 << 20)));
    let mut issued = 0u64;
    let mut done = 0u64;
    let mut out: Vec<Completion> = Vec::with_capacity(spec.queue_depth as usize);
    let clock0 = (dev.stats().clock_ns, std::time::Instant::now());
    // Under a virtual clock completions are taken one at a time, so every new command starts
    // at the time the one it replaces finished; on the wall clock, whatever is ready.
    let reap_max = match spec.clock {
        Clock::Device => 1,
        Clock::Wall => spec.queue_depth as usize,
    };
    let mut batch = Vec::with_capacity(spec.queue_depth as usize);
    while done < spec.ops {
        while issued + (batch.len() as u64) < spec.ops
            && (issued + batch.len() as u64 - done) < u64::from(spec.queue_depth)
        {
            let Some(buf) = bufs.pop() else { break };
            let cmd = match spec.pattern {
                Pattern::SeqWrite => {
                    let seg = spec.first_segment + (seq_cursor / pps) as u32;
                    seq_cursor += 1;
                    Command::Append {
                        segment: SegmentId(seg),
                        buf,
                    }
                }
                Pattern::RandWrite { .. } => {
                    let i = rng.gen_range(0..cursors.len());
                    let seg = cursors[i].0;
                    cursors[i].1 += 1;
                    if u64::from(cursors[i].1) == pps {
                        if next_segment < region.end {
                            cursors[i] = (next_segment, 0);
                            next_segment += 1;
                        } else {
                            cursors.swap_remove(i);
                        }
                    }
                    Command::Append {
                        segment: SegmentId(seg),
                        buf,
                    }
                }
                Pattern::SeqRead => {
                    let off = seq_cursor % region_pages;
                    seq_cursor += 1;
                    Command::Read {
                        lba: Lba(g.segment_start(SegmentId(spec.first_segment)).0 + off),
                        buf,
                    }
                }
                Pattern::RandRead => {
                    let off = rng.gen_range(0..region_pages);
                    Command::Read {
                        lba: Lba(g.segment_start(SegmentId(spec.first_segment)).0 + off),
                        buf,
                    }
                }
            };
            batch.push(cmd);
        }
        out.clear();
        let (submitted, reaped) =
            dev.submit_and_reap(std::mem::take(&mut batch), &mut out, reap_max, Wait::Block);
        for result in submitted {
            match result {
                Ok(_) => issued += 1,
                Err(r) => return Err(r.error),
            }
        }
        reaped?;
        for c in out.drain(..) {
            latencies.push(c.latency_ns);
            done += 1;
            let buf = c.buf;
            c.result?;
            bufs.extend(buf);
        }
    }
    let elapsed_ns = match spec.clock {
        Clock::Device => dev.stats().clock_ns.saturating_sub(clock0.0),
        Clock::Wall => u64::try_from(clock0.1.elapsed().as_nanos()).unwrap_or(u64::MAX),
    };
    latencies.sort_unstable();
    Ok(LoadReport {
        ops: done,
        elapsed_ns,
        latencies_ns: latencies,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{Backend, DeviceConfig, Ftl, Geometry, RamStore};

    fn device() -> Ftl {
        let g = Geometry {
            channels: 2,
            ways: 2,
            blocks_per_chip: 8,
            pages_per_block: 4,
            spare_blocks_per_chip: 1,
        };
        Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap()
    }

    fn spec(pattern: Pattern) -> LoadSpec {
        LoadSpec {
            pattern,
            queue_depth: 4,
            ops: 16,
            first_segment: 0,
            segments: 2,
            seed: 1,
            clock: Clock::Wall,
        }
    }

    #[test]
    fn queue_depth_zero_is_refused() {
        let dev = Arc::new(device());
        let (tx, rx) = std::sync::mpsc::channel();
        for pattern in [Pattern::SeqWrite, Pattern::RandRead] {
            let (dev, tx) = (dev.clone(), tx.clone());
            std::thread::spawn(move || {
                let spec = LoadSpec {
                    queue_depth: 0,
                    ..spec(pattern)
                };
                let _ = tx.send(run(dev.as_ref(), &spec).map(|r| r.ops));
            });
            let result = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("a queue depth of 0 must be refused, not wait forever");
            assert!(result.is_err(), "{pattern:?}: {result:?}");
        }
        assert!(prefill(dev.as_ref(), 0, 1, 0).is_err());
    }

    #[test]
    fn region_past_u32_max_is_refused_without_overflow() {
        let dev = device();
        let far = LoadSpec {
            first_segment: u32::MAX,
            segments: 2,
            ..spec(Pattern::SeqWrite)
        };
        let err = run(&dev, &far).unwrap_err();
        assert!(
            matches!(err, DeviceError::SegmentOutOfRange { .. }),
            "{err}"
        );
        let err = prefill(&dev, u32::MAX - 1, u32::MAX, 1).unwrap_err();
        assert!(
            matches!(err, DeviceError::SegmentOutOfRange { .. }),
            "{err}"
        );
        // A valid region still runs.
        assert_eq!(run(&dev, &spec(Pattern::SeqWrite)).unwrap().ops, 16);
    }
}
