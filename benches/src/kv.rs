//! The one interface every key-value system under test offers the workloads: sessions that
//! put and get batches of keys, plus what the harness reads around a run (bytes written, CPU,
//! memory, background work to wait for). In-process engines (LightStore, RocksDB, fjall) and
//! RESP servers (the drive, Redis; `resp`) implement it, so the same workload code drives all.

use std::collections::BTreeMap;

use lsm::{Engine, EngineStats, WriteOp};

/// Keys are 16 bytes: `user` and twelve decimal digits, so key order is number order.
pub type Key = [u8; 16];

/// The benchmark key of number `i`.
pub fn key(i: u64) -> Key {
    let mut k = *b"user000000000000";
    let digits = format!("{:012}", i % 1_000_000_000_000);
    k[4..].copy_from_slice(digits.as_bytes());
    k
}

/// One client's handle on the system: an in-process engine reference, or a connection.
pub trait KvSession {
    /// Stores `value` under every key, as one batch (an atomic write batch in-process, a
    /// pipeline of SETs over RESP); returns once the system acknowledged all of them.
    fn put(&mut self, keys: &[Key], value: &[u8]) -> anyhow::Result<()>;
    /// Reads every key, as one batch (a multi-get in-process, a pipeline of GETs over RESP);
    /// fails if one is missing.
    fn get(&mut self, keys: &[Key]) -> anyhow::Result<()>;
    /// A command the server does no work for (PING over RESP): its round trip is the
    /// network's share of a request's latency.
    ///
    /// # Errors
    /// When the system has none (in-process engines) or the connection fails.
    fn noop(&mut self) -> anyhow::Result<()> {
        anyhow::bail!("this system has no no-op command")
    }
}

/// LightStore's own counters of the background work a run caused, by their INFO names
/// (section `lsm`), each with where the engine's stats hold it: what explains a row's
/// throughput or tail (a flush, a compaction, a garbage-collection step, a write stall)
/// beside its figures.
pub const ENGINE_COUNTERS: &[(&str, CounterOf)] = &[
    ("flushes", |s| s.flushes),
    ("compactions", |s| s.compactions),
    ("compactions_without_room_to_move", |s| {
        s.compactions_without_room_to_move
    }),
    ("gc_segments", |s| s.gc_segments),
    ("gc_bytes_moved", |s| s.gc_bytes_moved),
    ("device_flushes", |s| s.device_flushes),
    ("paced_flushes", |s| s.paced_flushes),
    ("released_segments", |s| s.released_segments),
    ("write_stall_micros", |s| s.write_stalls.stalled_micros),
    ("write_stalls_memtable", |s| s.write_stalls.memtable),
    ("write_stalls_free_segments", |s| {
        s.write_stalls.free_segments
    }),
    ("write_stalls_capacity", |s| s.write_stalls.capacity),
    ("write_stalls_l0_runs", |s| s.write_stalls.l0_runs),
    ("write_stalls_compaction_debt", |s| {
        s.write_stalls.compaction_debt
    }),
    ("maintenance_errors", |s| s.maintenance_errors),
];

/// Where an engine's stats hold one of [`ENGINE_COUNTERS`].
pub type CounterOf = fn(&EngineStats) -> u64;

/// Values of [`ENGINE_COUNTERS`] (or their growth over a run), by name.
pub type EngineCounters = BTreeMap<String, u64>;

/// [`ENGINE_COUNTERS`] from an engine's stats (the names INFO gives them).
pub fn engine_counters(s: &EngineStats) -> EngineCounters {
    ENGINE_COUNTERS
        .iter()
        .map(|(name, of)| ((*name).to_string(), of(s)))
        .collect()
}

/// How much each counter grew from `before` to `after`.
pub fn counters_delta(before: &EngineCounters, after: &EngineCounters) -> EngineCounters {
    after
        .iter()
        .map(|(k, &v)| {
            (
                k.clone(),
                v.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .collect()
}

/// A system under test.
pub trait KvUnderTest: Sync {
    /// A session for one client thread.
    ///
    /// # Errors
    /// When a connection cannot be made.
    fn session(&self) -> anyhow::Result<Box<dyn KvSession + '_>>;
    /// The process serving the requests (this one for in-process engines).
    fn pid(&self) -> u32 {
        std::process::id()
    }
    /// Bytes the serving process has written to storage so far (for write amplification):
    /// by default its `/proc/<pid>/io` count (see [`crate::procfs::io_write_bytes`]).
    ///
    /// # Errors
    /// When the counter cannot be read.
    fn written_bytes(&self) -> anyhow::Result<u64> {
        crate::procfs::io_write_bytes(self.pid())
    }
    /// CPU seconds the serving process has used so far: `getrusage` for this process,
    /// `/proc/<pid>/stat` for another.
    ///
    /// # Errors
    /// When the counter cannot be read.
    fn cpu_seconds(&self) -> anyhow::Result<f64> {
        if self.pid() == std::process::id() {
            Ok(crate::procfs::self_cpu_seconds())
        } else {
            crate::procfs::cpu_seconds(self.pid())
        }
    }
    /// Resident memory of the serving process now, in MB.
    fn rss_mb(&self) -> Option<f64> {
        crate::procfs::rss_mb(self.pid()).ok()
    }
    /// Waits until the writes so far are on storage and the background work they caused
    /// (memtable flushes, compactions) is done, so their bytes count; says whether the wait
    /// ran to the end or stopped at its limit.
    ///
    /// # Errors
    /// When the system fails.
    fn settle(&self) -> anyhow::Result<Settled> {
        Ok(Settled::Done)
    }
    /// Called before a read workload: a system that reads through the OS page cache drops its
    /// files from it here, so the workload starts from the device.
    fn before_reads(&self) {}
    /// LightStore's [`ENGINE_COUNTERS`] now: the engine's stats in-process, INFO's `lsm`
    /// section for the drive; `None` for every other system.
    fn engine_counters(&self) -> Option<EngineCounters> {
        None
    }
}

/// How a system's [`KvUnderTest::settle`] ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Settled {
    /// Its background work finished, or it has none the harness can wait for.
    #[default]
    Done,
    /// The wait stopped at its limit with background work still running: the row's figures
    /// leave that work out.
    LimitHit,
}

impl Settled {
    /// What a row's `timed_until` says after the system's own text when the wait stopped at
    /// its limit on that run.
    pub const LIMIT_HIT_NOTE: &'static str = "on this run the wait hit its limit with \
         compactions still running: their work is not in the figures";
}

/// LightStore in-process: sessions are the engine itself (it is shared by reference).
pub struct LocalEngine<'a> {
    /// The engine.
    pub engine: &'a Engine,
    /// Count written bytes as the engine does (device bytes of values, keytables, manifest
    /// and GC) rather than as the process's `/proc/self/io` does (which adds the device's
    /// own table writes).
    pub engine_counts_writes: bool,
}

struct EngineSession<'a>(&'a Engine);

impl KvSession for EngineSession<'_> {
    fn put(&mut self, keys: &[Key], value: &[u8]) -> anyhow::Result<()> {
        let ops: Vec<WriteOp<'_>> = keys.iter().map(|k| WriteOp::Put(k, value)).collect();
        Ok(self.0.write(&ops)?)
    }

    fn get(&mut self, keys: &[Key]) -> anyhow::Result<()> {
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let got = self.0.multi_get(&refs)?;
        anyhow::ensure!(got.iter().all(Option::is_some), "a loaded key is missing");
        Ok(())
    }
}

impl KvUnderTest for LocalEngine<'_> {
    fn session(&self) -> anyhow::Result<Box<dyn KvSession + '_>> {
        Ok(Box::new(EngineSession(self.engine)))
    }

    fn engine_counters(&self) -> Option<EngineCounters> {
        Some(engine_counters(&self.engine.stats()))
    }

    fn settle(&self) -> anyhow::Result<Settled> {
        self.engine.settle()?;
        Ok(Settled::Done)
    }

    fn written_bytes(&self) -> anyhow::Result<u64> {
        if self.engine_counts_writes {
            Ok(self.engine.stats().device_bytes_written)
        } else {
            crate::procfs::io_write_bytes(self.pid())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_in_number_order() {
        assert_eq!(&key(42), b"user000000000042");
        assert!(key(9) < key(10));
    }
}
