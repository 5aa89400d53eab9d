//! The in-process peers of `bench all` (compiled with the `peers` feature only: RocksDB's C++
//! takes many minutes to build): RocksDB leveled and RocksDB with integrated BlobDB, each with
//! a synchronous WAL (acknowledged once fsync'd, as LightStore acknowledges once its pages are
//! flushed) or no WAL (acknowledged from the memtable: not durable); and fjall with key-value
//! separation (journal fsync'd per batch).
//!
//! RocksDB is tuned as its guides say for large values on flash: no compression (the values
//! are random), 64 MiB memtables, dynamic level sizes, a bloom filter of 10 bits per key,
//! direct I/O for reads and for flush/compaction so reads are served by the device (not the
//! OS page cache), a block cache smaller than the data set with the index and filter blocks
//! beside it (held by the table readers, RocksDB's default); BlobDB separates values of at
//! least `MIN_BLOB_SIZE` into 256 MiB blob files with blob GC on, and its LSM levels are
//! scaled down because SSTs hold only keys and blob references. Every engine gets two
//! background threads (this host has two cores).
//!
//! **Read queue depth: not matched (stated on every row).** LightStore reads a batch's keys
//! with all of them in flight at once. This RocksDB (7.8, through `rocksdb` 0.20) has no
//! `async_io` for `MultiGet` (it may still read one file's blocks in parallel through
//! `MultiRead`), and fjall reads one key after another (4 reads in flight, one per client
//! thread), where LightStore has up to 32. A pool of 32 reader threads per peer was tried on
//! 2026-11-29: RocksDB without a WAL, 8 KiB values, R-GET 23.4-23.5K/s against MultiGet's
//! 20.1-20.7K/s, but at 100 B S-GET 59K/s against 136K/s, R-GET 28K against 30K, and 40-75%
//! more CPU per read (the thread hand-offs on two cores), so it is not used.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kv::{Key, KvSession, KvUnderTest, Settled};

/// Values this long or longer go to BlobDB's blob files (the guide's threshold for mixed
/// value sizes; every value of the 1 KiB and 8 KiB runs is separated, 100 B values are not).
pub const MIN_BLOB_SIZE: u64 = 1024;
/// How long `settle` waits at most for RocksDB's compactions.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// Fails unless the options RocksDB wrote for the default column family (its newest
/// `OPTIONS-*` file in `dir`) are the ones asked for: no compression, and blob files for
/// BlobDB. A peer configured other than its row says would make the comparison a lie.
fn check_applied_options(dir: &Path, layout: RocksLayout) -> anyhow::Result<()> {
    let newest = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("OPTIONS-"))
        })
        .max()
        .with_context(|| format!("RocksDB wrote no OPTIONS file in {}", dir.display()))?;
    let text = std::fs::read_to_string(&newest)?;
    let has = |line: &str| text.lines().any(|l| l.trim() == line);
    anyhow::ensure!(
        has("compression=kNoCompression"),
        "RocksDB's default column family compresses ({}): the options did not apply",
        newest.display()
    );
    if layout == RocksLayout::Blob {
        anyhow::ensure!(
            has("enable_blob_files=true"),
            "RocksDB's default column family has no blob files ({})",
            newest.display()
        );
    }
    Ok(())
}

/// Which RocksDB layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RocksLayout {
    /// Values in the LSM tree (leveled compaction).
    Leveled,
    /// Integrated BlobDB (`enable_blob_files`).
    Blob,
}

/// RocksDB in-process.
pub struct Rocks {
    db: rocksdb::DB,
    wal: bool,
}

impl Rocks {
    /// Opens a fresh database in `dir` with `block_cache` bytes of block cache.
    ///
    /// # Errors
    /// When RocksDB cannot open it.
    pub fn open(
        dir: &Path,
        layout: RocksLayout,
        wal: bool,
        block_cache: usize,
    ) -> anyhow::Result<Rocks> {
        use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options};
        let mut o = Options::default();
        o.create_if_missing(true);
        o.increase_parallelism(2);
        o.set_max_background_jobs(2);
        o.set_compression_type(DBCompressionType::None);
        o.set_write_buffer_size(64 << 20);
        o.set_max_write_buffer_number(3);
        o.set_level_compaction_dynamic_level_bytes(true);
        o.set_bytes_per_sync(1 << 20);
        o.set_use_direct_reads(true);
        o.set_use_direct_io_for_flush_and_compaction(true);
        let mut t = BlockBasedOptions::default();
        t.set_block_cache(&Cache::new_lru_cache(block_cache)?);
        t.set_bloom_filter(10.0, false);
        // Index and filter blocks live beside the cache, held by the table readers
        // (RocksDB's default), as LightStore holds its keytables and blooms in DRAM. In the
        // cache (`cache_index_and_filter_blocks`), a cache smaller than them made every read
        // of 100 B values over 1M keys fetch its filter and index blocks from the device
        // again: 4.8K R-GET/s against 164K S-GET/s (2026-11-29, 128 MiB run).
        t.set_cache_index_and_filter_blocks(false);
        o.set_block_based_table_factory(&t);
        if layout == RocksLayout::Blob {
            o.set_enable_blob_files(true);
            o.set_min_blob_size(MIN_BLOB_SIZE);
            o.set_blob_file_size(256 << 20);
            o.set_blob_compression_type(DBCompressionType::None);
            o.set_enable_blob_gc(true);
            o.set_blob_gc_age_cutoff(0.25);
            // SSTs carry keys and blob references only: smaller files and levels.
            o.set_target_file_size_base(8 << 20);
            o.set_max_bytes_for_level_base(32 << 20);
        }
        // `DB::open` gives the default column family these options. (`open_cf` with the
        // family's name gave it `Options::default()`: Snappy compression, no blob files, the
        // default table options, so the two layouts were the same engine, compressing; found
        // from the database's OPTIONS file in the 2026-11-29 review.)
        let db = rocksdb::DB::open(&o, dir)
            .with_context(|| format!("opening RocksDB in {}", dir.display()))?;
        check_applied_options(dir, layout)?;
        Ok(Rocks { db, wal })
    }
}

struct RocksSession<'a> {
    rocks: &'a Rocks,
    wo: rocksdb::WriteOptions,
}

impl KvSession for RocksSession<'_> {
    fn put(&mut self, keys: &[Key], value: &[u8]) -> anyhow::Result<()> {
        let mut batch = rocksdb::WriteBatch::default();
        for k in keys {
            batch.put(k, value);
        }
        Ok(self.rocks.db.write_opt(batch, &self.wo)?)
    }

    /// One `MultiGet` of the batch's keys (see the module docs on queue depth).
    fn get(&mut self, keys: &[Key]) -> anyhow::Result<()> {
        for r in self.rocks.db.multi_get(keys) {
            anyhow::ensure!(r?.is_some(), "a loaded key is missing");
        }
        Ok(())
    }
}

impl KvUnderTest for Rocks {
    fn session(&self) -> anyhow::Result<Box<dyn KvSession + '_>> {
        let mut wo = rocksdb::WriteOptions::default();
        if self.wal {
            wo.set_sync(true);
        } else {
            wo.disable_wal(true);
        }
        Ok(Box::new(RocksSession { rocks: self, wo }))
    }

    /// Flushes the memtable and waits for the flushes and compactions that follow, at most
    /// [`SETTLE_LIMIT`].
    fn settle(&self) -> anyhow::Result<Settled> {
        self.db.flush()?;
        let deadline = Instant::now() + SETTLE_LIMIT;
        let busy = |p: &str| self.db.property_int_value(p).ok().flatten().unwrap_or(0) > 0;
        while busy("rocksdb.num-running-compactions")
            || busy("rocksdb.num-running-flushes")
            || busy("rocksdb.compaction-pending")
            || busy("rocksdb.mem-table-flush-pending")
        {
            if Instant::now() >= deadline {
                return Ok(Settled::LimitHit);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Settled::Done)
    }
}

/// fjall with key-value separation in-process.
pub struct Fjall {
    keyspace: fjall::Keyspace,
    partition: fjall::PartitionHandle,
    dir: PathBuf,
}

impl Fjall {
    /// Opens a fresh keyspace in `dir` with `cache` bytes of block/blob cache and one
    /// key-value-separated partition (fjall's defaults: values of 1 KiB or more go to its
    /// value log).
    ///
    /// # Errors
    /// When fjall cannot open it.
    pub fn open(dir: &Path, cache: u64) -> anyhow::Result<Fjall> {
        let keyspace = fjall::Config::new(dir)
            .cache_size(cache)
            .flush_workers(1)
            .compaction_workers(1)
            .open()
            .with_context(|| format!("opening fjall in {}", dir.display()))?;
        let partition = keyspace.open_partition(
            "bench",
            fjall::PartitionCreateOptions::default()
                .with_kv_separation(fjall::KvSeparationOptions::default())
                // No compression, as every other system here (its default is LZ4).
                .compression(fjall::CompressionType::None),
        )?;
        Ok(Fjall {
            keyspace,
            partition,
            dir: dir.to_path_buf(),
        })
    }
}

struct FjallSession<'a>(&'a Fjall);

impl KvSession for FjallSession<'_> {
    fn put(&mut self, keys: &[Key], value: &[u8]) -> anyhow::Result<()> {
        let f = self.0;
        let mut batch = f
            .keyspace
            .batch()
            .durability(Some(fjall::PersistMode::SyncData));
        for k in keys {
            batch.insert(&f.partition, &k[..], value);
        }
        Ok(batch.commit()?)
    }

    /// The batch's keys one after another (see the module docs on queue depth).
    fn get(&mut self, keys: &[Key]) -> anyhow::Result<()> {
        for k in keys {
            anyhow::ensure!(
                self.0.partition.get(k)?.is_some(),
                "a loaded key is missing"
            );
        }
        Ok(())
    }
}

impl KvUnderTest for Fjall {
    fn session(&self) -> anyhow::Result<Box<dyn KvSession + '_>> {
        Ok(Box::new(FjallSession(self)))
    }

    /// Writes the memtable out (its flush waits for that); the compactions that may follow
    /// are not waited for (fjall offers no wait for them), as each fjall row says.
    fn settle(&self) -> anyhow::Result<Settled> {
        self.partition.rotate_memtable_and_wait()?;
        Ok(Settled::Done)
    }

    /// fjall has no direct I/O: its files are dropped from the page cache before each read
    /// workload, so the workload starts from the device (what it reads again is cached).
    fn before_reads(&self) {
        crate::procfs::drop_page_cache(&self.dir);
    }
}
