//! The host-stall meter: how long the machine under the benchmark did not run at all while a
//! workload ran.
//!
//! On a virtual machine the host may stop the guest's CPUs (its own scheduler, a CPU quota on
//! the VM, work of the VM monitor's I/O thread). Every thread of every system stops together
//! then, and a batch in flight takes that long longer: with 32 operations in flight, one
//! 20 ms stop in a run of 16,384 operations is the run's p99.9. So that a row's tail can be
//! read for what it is, each workload runs beside a probe: a thread at real-time priority
//! (`SCHED_FIFO`, so no thread of the guest keeps it from running) that sleeps
//! [`PROBE_TICK`] in a loop. A wake-up later than [`STALL_MIN`] after the last one is a stall
//! of the probe's CPU, which only the host (or a guest without real-time scheduling, which
//! [`HostStalls::realtime`] reports) can cause. Beside it, the guest's `steal` time from
//! `/proc/stat`: time the hypervisor says it ran something else on the guest's CPUs.
//!
//! The probe costs about a thousand wake-ups a second on one CPU.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the probe sleeps between looks at the clock.
pub const PROBE_TICK: Duration = Duration::from_millis(1);

/// A wake-up this much later than the previous one counts as a stall.
pub const STALL_MIN: Duration = Duration::from_millis(5);

/// The real-time priority the probe asks for (the lowest `SCHED_FIFO` one: above every
/// ordinary thread, which is all it needs).
const PROBE_PRIORITY: i32 = 1;

/// What the probe saw over one workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostStalls {
    /// Stalls of at least [`STALL_MIN`].
    pub count: u32,
    /// The longest, ms.
    pub longest_ms: f64,
    /// All of them together, ms.
    pub total_ms: f64,
    /// The guest's steal time over the workload, as a share of its CPUs' time (`None` where
    /// `/proc/stat` has no steal field).
    pub steal_share: Option<f64>,
    /// Whether the probe ran at real-time priority. Without it (no privilege), a busy guest
    /// can delay the probe too, and a stall may be the guest's own.
    pub realtime: bool,
}

/// The running probe of one workload.
#[derive(Debug)]
pub struct StallProbe {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(Vec<Duration>, bool)>>,
    started: Instant,
    steal0: Option<u64>,
}

impl StallProbe {
    /// Starts the probe thread. A probe that cannot start (no thread) measures nothing:
    /// [`StallProbe::finish`] then returns `None`.
    pub fn start() -> StallProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("stall-probe".into())
            .spawn(move || probe(&flag))
            .ok();
        StallProbe {
            stop,
            thread,
            started: Instant::now(),
            steal0: steal_ticks(),
        }
    }

    /// Stops the probe and returns what it saw.
    pub fn finish(mut self) -> Option<HostStalls> {
        self.stop.store(true, Ordering::Relaxed);
        let (stalls, realtime) = self.thread.take()?.join().ok()?;
        let wall = self.started.elapsed().as_secs_f64();
        let steal_share = match (self.steal0, steal_ticks()) {
            (Some(a), Some(b)) if wall > 0.0 => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                Some(b.saturating_sub(a) as f64 / clock_ticks_per_sec() / (wall * cpus as f64))
            }
            _ => None,
        };
        let ms = |d: &Duration| d.as_secs_f64() * 1e3;
        Some(HostStalls {
            count: u32::try_from(stalls.len()).unwrap_or(u32::MAX),
            longest_ms: stalls.iter().map(ms).fold(0.0, f64::max),
            total_ms: stalls.iter().map(ms).fold(0.0, |a, b| a + b),
            steal_share,
            realtime,
        })
    }
}

impl Drop for StallProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The probe thread: real-time priority if it can have it, then a sleep loop noting every
/// wake-up that came [`STALL_MIN`] or more late.
fn probe(stop: &AtomicBool) -> (Vec<Duration>, bool) {
    let param = libc::sched_param {
        sched_priority: PROBE_PRIORITY,
    };
    // SAFETY: `param` is a valid `sched_param` for the call; pid 0 is the calling thread.
    let realtime = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0;
    let mut log = StallLog::new(Instant::now());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(PROBE_TICK);
        log.woke(Instant::now());
    }
    (log.stalls, realtime)
}

/// The probe's wake-ups: each one [`PROBE_TICK`] after the last, or late by a stall.
#[derive(Debug)]
struct StallLog {
    last: Instant,
    stalls: Vec<Duration>,
}

impl StallLog {
    fn new(now: Instant) -> StallLog {
        StallLog {
            last: now,
            stalls: Vec::new(),
        }
    }

    /// A wake-up at `now`: lateness of [`STALL_MIN`] or more is a stall.
    fn woke(&mut self, now: Instant) {
        let late = now.duration_since(self.last).saturating_sub(PROBE_TICK);
        if late >= STALL_MIN {
            self.stalls.push(late);
        }
        self.last = now;
    }
}

/// The `steal` field of `/proc/stat`'s `cpu` line (all CPUs), in clock ticks.
fn steal_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_steal(&stat)
}

fn parse_steal(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    // cpu user nice system idle iowait irq softirq steal ...
    line.split_whitespace().nth(8)?.parse().ok()
}

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_number_of_the_cpu_line() {
        let stat = "cpu  6917203 76759 2106863 3744251 1019804 0 458864 368496 0 0\n\
                    cpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_steal(stat), Some(368_496));
        assert_eq!(parse_steal("cpu0 1 2 3\n"), None);
        assert_eq!(parse_steal("cpu  1 2 3\n"), None);
    }

    #[test]
    fn a_late_wake_up_is_a_stall_and_a_punctual_one_is_not() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut log = StallLog::new(t0);
        // Punctual, a little late (under STALL_MIN), then 21 ms after the last: a 20 ms stall.
        for at in [1, 2, 3, 8, 29, 30] {
            log.woke(t0 + ms(at));
        }
        assert_eq!(log.stalls, vec![ms(20)]);
    }

    #[test]
    fn the_probe_starts_and_reports() {
        let p = StallProbe::start();
        std::thread::sleep(Duration::from_millis(20));
        let s = p.finish().expect("the probe thread ran and was joined");
        assert!(s.longest_ms <= s.total_ms + 1e-9, "{s:?}");
        assert_eq!(s.count == 0, s.total_ms == 0.0, "{s:?}");
    }
}
