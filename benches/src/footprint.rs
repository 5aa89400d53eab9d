//! The space a system's files hold on the file system during a run: the sustained
//! overwrite's space meter. One meter for every system: it walks the system's directory
//! every [`SAMPLE_EVERY`] and sums, per file, the larger of its length and the blocks the
//! file system allocated to it (a preallocated or sparse device file counts at its length,
//! the space it reserves; a log file at what it wrote). The peak is what a device would
//! have to hold for the run to finish, which is what "80% full" means for a system that
//! is not bounded by a device of its own (RocksDB on a file system).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the meter walks the directory. Files live for seconds (RocksDB's blob and
/// table files, deleted after a compaction or a blob GC), so a peak between two samples
/// is at most one sample's worth of writes above the figure.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Bytes the files under `dir` hold now (see the module docs). Entries that vanish during
/// the walk (a file deleted by a compaction) count as nothing.
pub fn held_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => held_bytes(&e.path()),
            Ok(m) => m.len().max(m.blocks() * 512),
            Err(_) => 0,
        })
        .sum()
}

/// A thread sampling [`held_bytes`] of one directory until [`SpaceMeter::peak`].
pub struct SpaceMeter {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl SpaceMeter {
    /// Starts sampling `dir`.
    ///
    /// # Errors
    /// When the thread cannot be spawned.
    pub fn start(dir: PathBuf) -> std::io::Result<SpaceMeter> {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak));
        let thread = std::thread::Builder::new()
            .name("space-meter".into())
            .spawn(move || loop {
                p.fetch_max(held_bytes(&dir), Ordering::Relaxed);
                if s.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(SAMPLE_EVERY);
            })?;
        Ok(SpaceMeter {
            stop,
            peak,
            thread: Some(thread),
        })
    }

    /// Stops sampling (after one last sample) and returns the most the directory held.
    pub fn peak(mut self) -> u64 {
        self.finish();
        self.peak.load(Ordering::Relaxed)
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SpaceMeter {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sparse_files_at_their_length_and_nested_files() {
        let dir = std::env::temp_dir().join(format!("space-meter-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("db")).unwrap();
        let sparse = std::fs::File::create(dir.join("device.img")).unwrap();
        sparse.set_len(1 << 20).unwrap();
        std::fs::write(dir.join("db").join("000001.blob"), vec![7u8; 12_288]).unwrap();
        let meter = SpaceMeter::start(dir.clone()).unwrap();
        std::fs::write(dir.join("db").join("000002.blob"), vec![7u8; 4096]).unwrap();
        std::thread::sleep(SAMPLE_EVERY * 3);
        std::fs::remove_file(dir.join("db").join("000002.blob")).unwrap();
        let now = held_bytes(&dir);
        assert_eq!(now, (1 << 20) + 12_288);
        assert_eq!(meter.peak(), now + 4096, "the deleted file's peak is kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
