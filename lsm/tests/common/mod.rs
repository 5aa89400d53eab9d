//! Helpers shared by the engine's integration tests.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hwftl_sim::{
    AppendDevice, Backend, Command, Completion, DeviceConfig, DeviceError, DeviceStats, Ftl,
    Geometry, Rejected, SegmentId, SegmentInfo, Tag, Wait,
};

/// 2 x 2 chips of 64 blocks of 16 pages (2 spares per chip): 62 segments of 64 pages
/// (512 KiB), small enough for garbage collection to run after a few MiB of writes.
pub fn small_geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 64,
        pages_per_block: 16,
        spare_blocks_per_chip: 2,
    }
}

/// A freshly formatted RAM device on [`small_geometry`], closed again.
pub fn formatted_ram() -> (Backend, DeviceConfig) {
    let backend = Backend::Ram(hwftl_sim::RamStore::new());
    let cfg = DeviceConfig::new(small_geometry());
    drop(Ftl::format(&backend, cfg).unwrap());
    (backend, cfg)
}

/// The engine on the device `backend` holds, opened (again).
pub fn open_engine(backend: &Backend, cfg: DeviceConfig, ecfg: &lsm::EngineConfig) -> lsm::Engine {
    lsm::Engine::open(Arc::new(Ftl::open(backend, cfg).unwrap()), ecfg.clone()).unwrap()
}

/// Runs the offline check on the device as it is now (opened read-only; nothing may hold it),
/// asserts it is clean and wrote nothing, and returns its report.
pub fn assert_fsck_clean(
    backend: &Backend,
    cfg: DeviceConfig,
    ecfg: lsm::EngineConfig,
) -> lsm::FsckReport {
    let ro = Arc::new(Ftl::open_read_only(backend, cfg).unwrap());
    let report = lsm::Engine::fsck(ro.clone(), ecfg).unwrap();
    assert!(report.is_clean(), "fsck:\n{report}");
    let s = ro.stats();
    assert_eq!(
        (s.writes, s.trims, s.table_writes),
        (0, 0, 0),
        "fsck changed the device (writes, trims, table writes)"
    );
    report
}

/// Decides, before each command reaches the device, whether the power goes first.
pub type CutBefore = Box<dyn Fn(&Command) -> bool + Send + Sync>;

/// A device that cuts its own power (everything not yet completed is lost) when `cut_before`
/// says so for the command about to be submitted, and can refuse the next page write as a
/// failed program; otherwise it passes commands through.
pub struct CutDevice {
    inner: Arc<Ftl>,
    cut_before: CutBefore,
    refuse_write: AtomicBool,
    fail_flush: AtomicBool,
}

impl CutDevice {
    /// Wraps `inner`.
    pub fn new(inner: Arc<Ftl>, cut_before: CutBefore) -> Self {
        CutDevice {
            inner,
            cut_before,
            refuse_write: AtomicBool::new(false),
            fail_flush: AtomicBool::new(false),
        }
    }

    /// The next `Flush` command fails with an I/O error, as a disk's FLUSH CACHE may; the
    /// pages written before it stay as they are (on this device, durable once completed
    /// unless it models a volatile write cache).
    pub fn fail_next_flush(&self) {
        self.fail_flush.store(true, Ordering::SeqCst);
    }

    /// The next `Write` command is refused with `ProgramFailed` (the device is unchanged):
    /// the batch it belongs to fails and leaves a hole in the value log.
    pub fn refuse_next_write(&self) {
        self.refuse_write.store(true, Ordering::SeqCst);
    }

    fn check(&self, cmd: &Command) -> Result<(), Rejected> {
        if (self.cut_before)(cmd) {
            self.inner.power_cut();
        }
        if matches!(cmd, Command::Flush) && self.fail_flush.swap(false, Ordering::SeqCst) {
            let error = DeviceError::Io {
                context: "FLUSH".into(),
                source: std::io::Error::other("injected flush failure"),
            };
            return Err(Rejected { error, buf: None });
        }
        if let Command::Write { lba, .. } = cmd {
            if self.refuse_write.swap(false, Ordering::SeqCst) {
                let pps = u64::from(self.inner.geometry().pages_per_segment());
                let segment = SegmentId(u32::try_from(lba.0 / pps).unwrap_or(u32::MAX));
                let error = DeviceError::ProgramFailed {
                    lba: *lba,
                    segment,
                    chip: 0,
                    block: 0,
                };
                return Err(Rejected { error, buf: None });
            }
        }
        Ok(())
    }
}

impl AppendDevice for CutDevice {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn submit(&self, cmd: Command) -> Result<Tag, Rejected> {
        self.check(&cmd)?;
        self.inner.submit(cmd)
    }
    fn submit_many(&self, cmds: Vec<Command>) -> Vec<Result<Tag, Rejected>> {
        cmds.into_iter().map(|c| self.submit(c)).collect()
    }
    fn submit_and_reap(
        &self,
        cmds: Vec<Command>,
        out: &mut Vec<Completion>,
        max: usize,
        wait: Wait,
    ) -> (Vec<Result<Tag, Rejected>>, hwftl_sim::Result<usize>) {
        let tags = self.submit_many(cmds);
        (tags, self.inner.reap(out, max, wait))
    }
    fn reap(&self, out: &mut Vec<Completion>, max: usize, wait: Wait) -> hwftl_sim::Result<usize> {
        self.inner.reap(out, max, wait)
    }
    fn execute(&self, cmd: Command) -> Result<Completion, Rejected> {
        self.check(&cmd)?;
        self.inner.execute(cmd)
    }
    fn segment_info(&self, segment: SegmentId) -> hwftl_sim::Result<SegmentInfo> {
        self.inner.segment_info(segment)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
}

/// Where a key's record is in the value log: the packed page holding it, as the manifest's
/// log segments and their pages say (the first record of `key` found).
pub struct RecordAt {
    /// The device segment and the page within it.
    pub segment: SegmentId,
    pub page: u32,
    /// Raw pages that follow the packed page.
    pub raw_after: u32,
    /// The record.
    pub record: lsm::vlog_format::Record,
}

/// Finds `key`'s record by reading the value-log segments the manifest lists, page by page.
/// Panics when there is none.
pub fn record_of(dev: &dyn AppendDevice, key: &[u8]) -> RecordAt {
    use lsm::vlog_format::{check_page, parse_records};
    let (_, snap) = lsm::manifest::ManifestStore::load(dev).unwrap();
    for m in snap.unwrap().log_segs {
        let segment = SegmentId(m.segment);
        let wp = dev.segment_info(segment).unwrap().write_pointer;
        for page in 0..wp {
            let Ok(c) = dev.execute(Command::Read {
                lba: dev.geometry().lba(segment, page),
                buf: hwftl_sim::PageBuf::for_read(),
            }) else {
                continue;
            };
            let Ok(Some(buf)) = c.into_buf() else {
                continue;
            };
            let Ok(info) = check_page(&buf, m.log_seg, page) else {
                continue;
            };
            let recs = parse_records(&buf, &info).unwrap();
            if let Some(record) = recs.into_iter().find(|r| r.key == key) {
                return RecordAt {
                    segment,
                    page,
                    raw_after: info.raw_after,
                    record,
                };
            }
        }
    }
    panic!("no record of the key")
}

/// Prints a note (a seed, how to rerun) when the test fails while it is alive: a panic in
/// the test's thread, or one propagated from a joined worker, drops it while panicking.
pub struct FailureNote {
    note: String,
    armed: bool,
}

impl FailureNote {
    /// Arms the note.
    pub fn new(note: String) -> Self {
        FailureNote { note, armed: true }
    }

    /// The work it guarded succeeded: nothing to print.
    pub fn passed(mut self) {
        self.armed = false;
    }
}

impl Drop for FailureNote {
    fn drop(&mut self) {
        if self.armed && std::thread::panicking() {
            eprintln!("{}", self.note);
        }
    }
}

/// The LBA of page `page` of the oldest log segment in the device's manifest (the pages the
/// first writes to a fresh engine land in).
pub fn first_log_page(ftl: &Ftl, page: u32) -> hwftl_sim::Lba {
    let (_, snap) = lsm::manifest::ManifestStore::load(ftl).unwrap();
    let (_, segment) = snap
        .unwrap()
        .log_segs
        .iter()
        .map(|m| (m.log_seg, m.segment))
        .min()
        .unwrap();
    ftl.geometry().lba(SegmentId(segment), page)
}

/// `len` bytes of the 256-byte period `byte(0..=255)`, copied a period at a time (a byte at
/// a time cost seconds per case in a debug build: values reach hundreds of KiB).
pub fn repeat_period(len: usize, byte: impl Fn(u8) -> u8) -> Vec<u8> {
    let period: Vec<u8> = (0..=255u8).map(byte).collect();
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let n = (len - v.len()).min(period.len());
        v.extend_from_slice(&period[..n]);
    }
    v
}

/// A value of `len` bytes for version `version` of key number `key`: a stamp (key, version,
/// block) at the head of every 512-byte block over a fill byte of the pair, so a value of
/// another key or version, or a misplaced page, cannot compare equal. (Stamping every 8
/// bytes cost a third of a suite's time in a debug build.)
pub fn stamped_value(key: u32, version: u32, len: usize) -> Vec<u8> {
    let fill = (key as u8) ^ (version as u8).rotate_left(3) ^ 0x5a;
    let mut v = vec![fill; len];
    for (i, block) in v.chunks_mut(512).enumerate() {
        let stamp = (u64::from(key) << 40 | u64::from(version) << 16 | i as u64).to_le_bytes();
        let n = block.len().min(stamp.len());
        block[..n].copy_from_slice(&stamp[..n]);
    }
    v
}
