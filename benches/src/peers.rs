//! The in-process peers of `bench all` (compiled with the `peers` feature only: RocksDB's C++
//! takes many minutes to build): RocksDB leveled and RocksDB with integrated BlobDB, each with
//! a synchronous WAL (acknowledged once fsync'd, as LightStore acknowledges once its pages are
//! flushed) or no WAL (acknowledged from the memtable: not durable); and fjall with key-value
//! separation (journal fsync'd per batch).
//!
//! RocksDB is tuned as its guides say for large values on flash: no compression (the values
//! are random), 64 MiB memtables, dynamic level sizes, a bloom filter of 10 bits per key,
//! direct I/O for reads and for flush/compaction so reads are served by the device (not the
//! OS page cache), a block cache smaller than the data set; BlobDB separates values of at
//! least `MIN_BLOB_SIZE` into 256 MiB blob files with blob GC on, and its LSM levels are
//! scaled down because SSTs hold only keys and blob references. Every engine gets two
//! background threads (this host has two cores).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kv::{Key, KvSession, KvUnderTest};

/// Values this long or longer go to BlobDB's blob files (the guide's threshold for mixed
/// value sizes; every value of the 1 KiB and 8 KiB runs is separated, 100 B values are not).
pub const MIN_BLOB_SIZE: u64 = 1024;
/// How long `settle` waits at most for RocksDB's compactions.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

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
        t.set_cache_index_and_filter_blocks(true);
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
        let db = rocksdb::DB::open_cf(&o, dir, [rocksdb::DEFAULT_COLUMN_FAMILY_NAME])
            .with_context(|| format!("opening RocksDB in {}", dir.display()))?;
        Ok(Rocks { db, wal })
    }
}

struct RocksSession<'a> {
    db: &'a rocksdb::DB,
    wo: rocksdb::WriteOptions,
}

impl KvSession for RocksSession<'_> {
    fn put(&mut self, keys: &[Key], value: &[u8]) -> anyhow::Result<()> {
        let mut batch = rocksdb::WriteBatch::default();
        for k in keys {
            batch.put(k, value);
        }
        Ok(self.db.write_opt(batch, &self.wo)?)
    }

    fn get(&mut self, keys: &[Key]) -> anyhow::Result<()> {
        let cf = self
            .db
            .cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
            .context("no default column family")?;
        for r in self.db.batched_multi_get_cf(cf, keys, false) {
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
        Ok(Box::new(RocksSession { db: &self.db, wo }))
    }

    /// Flushes the memtable and waits for the flushes and compactions that follow.
    fn settle(&self) -> anyhow::Result<()> {
        self.db.flush()?;
        let deadline = Instant::now() + SETTLE_LIMIT;
        let busy = |p: &str| self.db.property_int_value(p).ok().flatten().unwrap_or(0) > 0;
        while Instant::now() < deadline
            && (busy("rocksdb.num-running-compactions")
                || busy("rocksdb.num-running-flushes")
                || busy("rocksdb.compaction-pending")
                || busy("rocksdb.mem-table-flush-pending"))
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
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
                .with_kv_separation(fjall::KvSeparationOptions::default()),
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

    /// Writes the memtable out (its flush waits for that).
    fn settle(&self) -> anyhow::Result<()> {
        Ok(self.partition.rotate_memtable_and_wait()?)
    }

    /// fjall has no direct I/O: its files are dropped from the page cache before each read
    /// workload, so the workload starts from the device (what it reads again is cached).
    fn before_reads(&self) {
        crate::procfs::drop_page_cache(&self.dir);
    }
}
