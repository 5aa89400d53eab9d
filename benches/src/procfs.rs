//! What the benchmarks read about processes and file systems: CPU time, resident memory and
//! bytes written from `/proc`, this process's CPU time (`getrusage`), free space (`statvfs`),
//! and dropping a directory's files from the page cache (`posix_fadvise`).

use std::path::Path;

use anyhow::Context;

/// Clock ticks per second of `/proc/<pid>/stat` times (Linux's fixed `USER_HZ`).
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) the process has used so far (10 ms ticks).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unexpected /proc/pid/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; here, after `pid (comm)`, 12 and 13.
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok((utime + stime) / USER_HZ)
}

/// CPU seconds (user + system) of every thread of this process so far (`getrusage`, µs).
pub fn self_cpu_seconds() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `u` is a valid, writable rusage; getrusage only writes it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: getrusage succeeded, so it filled the struct (and it started zeroed).
    let u = unsafe { u.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Resident memory of the process in MB.
pub fn rss_mb(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmRSS")?
        .parse()?;
    Ok(kb * 1024.0 / 1e6)
}

/// Bytes the process has caused to be sent to storage (`/proc/<pid>/io`: `write_bytes` less
/// `cancelled_write_bytes`, i.e. dirty page-cache pages truncated before writeback). Direct
/// I/O counts when issued, buffered writes when a page turns dirty.
pub fn io_write_bytes(pid: u32) -> anyhow::Result<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .with_context(|| format!("reading /proc/{pid}/io"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .with_context(|| format!("no {name} in /proc/{pid}/io"))?
            .parse()
            .with_context(|| format!("bad {name} in /proc/{pid}/io"))
    };
    let written = field("write_bytes:")?;
    let cancelled = field("cancelled_write_bytes:")?;
    Ok(written.saturating_sub(cancelled))
}

/// Bytes free for an unprivileged user on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> anyhow::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    // SAFETY: statvfs succeeded and filled the struct.
    let st = unsafe { st.assume_init() };
    Ok(st.f_bavail * st.f_frsize)
}

/// Asks the kernel to drop the page-cache pages of every file under `dir` (clean pages go
/// at once; the files are fdatasync'd first so dirty ones do too). Best effort.
#[cfg_attr(not(feature = "peers"), allow(dead_code))]
pub fn drop_page_cache(dir: &Path) {
    use std::os::fd::AsRawFd;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            drop_page_cache(&p);
            continue;
        }
        if let Ok(f) = std::fs::File::open(&p) {
            let _ = f.sync_data();
            // SAFETY: the descriptor is open for the duration of the call.
            unsafe {
                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

/// The block device below the file system holding `dir`, as the kernel counts its writes:
/// `/sys/dev/block/MAJOR:MINOR/stat` of the device (or partition) `dir`'s file system is on.
/// The same meter for every system (LightStore's file device, RocksDB's files): what reached
/// the disk, file-system journal and metadata included.
#[derive(Debug)]
pub struct BlockDevMeter {
    stat: std::path::PathBuf,
    /// An open file in the measured file system (for `syncfs`).
    anchor: std::fs::File,
}

impl BlockDevMeter {
    /// The meter of the file system holding `dir`, or why there is none (no block device
    /// behind it: tmpfs, overlay, a network file system).
    ///
    /// # Errors
    /// When `dir` cannot be opened, or its device has no statistics in `/sys`.
    pub fn for_dir(dir: &Path) -> anyhow::Result<BlockDevMeter> {
        use std::os::unix::fs::MetadataExt;
        let anchor =
            std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        let dev = anchor.metadata()?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let stat = std::path::PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"));
        let meter = BlockDevMeter { stat, anchor };
        meter
            .read()
            .with_context(|| format!("{} has no block device statistics", dir.display()))?;
        Ok(meter)
    }

    /// Bytes written to the device so far (sectors written, field 7 of its `stat`, times
    /// 512), after `syncfs` has sent the file system's dirty data and journal to it.
    ///
    /// # Errors
    /// When the statistics cannot be read.
    pub fn written_bytes(&self) -> anyhow::Result<u64> {
        use std::os::fd::AsRawFd;
        // SAFETY: `anchor` is an open file descriptor for the call's duration.
        unsafe { libc::syncfs(self.anchor.as_raw_fd()) };
        self.read()
    }

    /// Which statistics file it reads, and the device's name where `/sys` gives one.
    pub fn describe(&self) -> String {
        let name = self
            .stat
            .parent()
            .and_then(|d| std::fs::read_to_string(d.join("uevent")).ok())
            .and_then(|u| {
                u.lines()
                    .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))
            });
        match name {
            Some(n) => format!("/dev/{n} ({})", self.stat.display()),
            None => self.stat.display().to_string(),
        }
    }

    fn read(&self) -> anyhow::Result<u64> {
        let s = std::fs::read_to_string(&self.stat)
            .with_context(|| format!("reading {}", self.stat.display()))?;
        let sectors: u64 = s
            .split_whitespace()
            .nth(6)
            .with_context(|| format!("no write sectors in {}", self.stat.display()))?
            .parse()
            .with_context(|| format!("bad write sectors in {}", self.stat.display()))?;
        Ok(sectors * 512)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_cpu_rss_and_io() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).is_ok_and(|s| s >= 0.0));
        assert!(rss_mb(pid).is_ok_and(|m| m > 0.0));
        assert!(self_cpu_seconds() >= 0.0);
        // /proc/<pid>/io needs task accounting in the kernel; most have it.
        if std::path::Path::new(&format!("/proc/{pid}/io")).exists() {
            assert!(io_write_bytes(pid).is_ok());
        }
        assert!(free_bytes(Path::new(".")).is_ok_and(|b| b > 0));
    }

    /// The benchmarks' scratch directories live in the workspace, on a disk: the meter must
    /// see a file written there reach it.
    #[test]
    fn the_block_device_meter_sees_a_file_written_under_its_directory() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let meter = BlockDevMeter::for_dir(dir.path()).unwrap();
        assert!(meter.describe().contains("/stat"), "{}", meter.describe());
        let before = meter.written_bytes().unwrap();
        let chunk = vec![0x5au8; 1 << 20];
        let mut f = std::fs::File::create(dir.path().join("data")).unwrap();
        for _ in 0..16 {
            std::io::Write::write_all(&mut f, &chunk).unwrap();
        }
        drop(f);
        let after = meter.written_bytes().unwrap();
        assert!(
            after - before >= 16 << 20,
            "{} bytes reached the device for a 16 MiB file",
            after - before
        );
        // No block device behind /proc: an error, not a figure.
        assert!(BlockDevMeter::for_dir(Path::new("/proc")).is_err());
    }
}
