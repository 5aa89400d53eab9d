//! The io_uring file backend (O_DIRECT): data and tables across reopen and power cut, bad
//! files and tables, and a raw block device (a loop device) where the host allows one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use hwftl_sim::{
    AppendDevice, Backend, Command, DeviceConfig, DeviceError, Ftl, Geometry, Lba, PageBuf,
    SegmentId, SegmentState,
};

fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 10,
        pages_per_block: 8,
        spare_blocks_per_chip: 1,
    }
}

fn cfg() -> DeviceConfig {
    DeviceConfig::new(geometry())
}

fn page(tag: u64) -> PageBuf {
    let mut p = PageBuf::zeroed();
    for (i, chunk) in p.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&(tag.rotate_left(17) ^ i as u64).to_le_bytes());
    }
    p
}

fn write(dev: &Ftl, lba: u64, buf: PageBuf) -> Result<(), DeviceError> {
    dev.execute(Command::Write { lba: Lba(lba), buf })?.result
}

fn read(dev: &Ftl, lba: u64) -> Result<PageBuf, DeviceError> {
    let c = dev.execute(Command::Read {
        lba: Lba(lba),
        buf: PageBuf::zeroed(),
    })?;
    Ok(c.into_buf()?.expect("buffer"))
}

fn device_file(dir: &tempfile::TempDir) -> Backend {
    Backend::File(dir.path().join("device.img"))
}

fn poke(path: &Path, offset: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn read_after_write_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let backend = device_file(&dir);
    let dev = Ftl::format(&backend, cfg()).unwrap();
    let g = dev.geometry();
    let s2 = g.segment_start(SegmentId(2)).0;
    for i in 0..40u64 {
        write(&dev, i, page(i)).unwrap();
    }
    write(&dev, s2, page(200)).unwrap();
    // A page of zeroes is data too (the scrambler tells it from erased flash).
    write(&dev, s2 + 1, PageBuf::zeroed()).unwrap();
    dev.execute(Command::Flush).unwrap().result.unwrap();
    dev.close().unwrap();

    let dev = Ftl::open(&backend, cfg()).unwrap();
    for i in 0..40u64 {
        assert_eq!(read(&dev, i).unwrap(), page(i), "lba {i}");
    }
    assert_eq!(read(&dev, s2).unwrap(), page(200));
    assert_eq!(read(&dev, s2 + 1).unwrap(), PageBuf::zeroed());
    assert_eq!(dev.segment_info(SegmentId(1)).unwrap().write_pointer, 8);
    assert!(dev.describe().contains("io_uring"));
}

#[test]
fn power_cut_recovers_write_pointers_by_scanning() {
    let dir = tempfile::tempdir().unwrap();
    let backend = device_file(&dir);
    let dev = Ftl::format(&backend, cfg()).unwrap();
    let g = dev.geometry();
    let pps = u64::from(g.pages_per_segment());
    for i in 0..(pps + 3) {
        write(&dev, i, page(i)).unwrap();
    }
    write(&dev, g.segment_start(SegmentId(3)).0, PageBuf::zeroed()).unwrap();
    dev.execute(Command::Trim {
        segment: SegmentId(1),
    })
    .unwrap()
    .result
    .unwrap();
    write(&dev, pps, page(7)).unwrap();
    dev.power_cut();
    drop(dev);

    let dev = Ftl::open(&backend, cfg()).unwrap();
    for i in 0..pps {
        assert_eq!(read(&dev, i).unwrap(), page(i));
    }
    assert_eq!(
        dev.segment_info(SegmentId(0)).unwrap().state,
        SegmentState::Full
    );
    assert_eq!(dev.segment_info(SegmentId(1)).unwrap().write_pointer, 1);
    assert_eq!(read(&dev, pps).unwrap(), page(7));
    assert!(matches!(
        read(&dev, pps + 1),
        Err(DeviceError::Unwritten { .. })
    ));
    let s3 = dev.segment_info(SegmentId(3)).unwrap();
    assert_eq!(s3.write_pointer, 1, "a zero page is recovered as written");
    write(&dev, pps + 1, page(8)).unwrap();
}

#[test]
fn a_file_of_the_wrong_size_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let backend = device_file(&dir);
    Ftl::format(&backend, cfg()).unwrap().close().unwrap();
    let Backend::File(path) = &backend else {
        unreachable!()
    };
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - 8192).unwrap();
    let err = Ftl::open(&backend, cfg()).err().unwrap();
    assert!(
        matches!(err, DeviceError::WrongSize { expected, actual, .. } if expected == len && actual == len - 8192),
        "{err}"
    );
    assert!(err.to_string().contains("expected"), "{err}");
}

#[test]
fn a_bad_table_copy_falls_back_and_two_bad_copies_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let backend = device_file(&dir);
    let Backend::File(path) = backend.clone() else {
        unreachable!()
    };
    let dev = Ftl::format(&backend, cfg()).unwrap();
    write(&dev, 0, page(1)).unwrap();
    dev.close().unwrap();
    // Layout: 8 KiB superblock, then two 8 KiB table slots for this small geometry.
    poke(&path, 8192 + 40, &[0xff; 16]);
    let dev = Ftl::open(&backend, cfg()).unwrap();
    assert_eq!(read(&dev, 0).unwrap(), page(1));
    dev.close().unwrap();
    poke(&path, 8192 + 40, &[0xff; 16]);
    poke(&path, 16384 + 40, &[0xff; 16]);
    let err = Ftl::open(&backend, cfg()).err().unwrap();
    assert!(matches!(err, DeviceError::TableCorrupt(_)), "{err}");
    // A bad superblock is refused too.
    poke(&path, 20, &[0x55; 4]);
    let err = Ftl::open(&backend, cfg()).err().unwrap();
    assert!(matches!(err, DeviceError::TableCorrupt(_)), "{err}");
}

#[test]
fn unformatted_and_mismatched_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.img");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let err = Ftl::open(&Backend::File(path.clone()), cfg())
        .err()
        .unwrap();
    assert!(matches!(err, DeviceError::NotFormatted), "{err}");
    let backend = device_file(&dir);
    Ftl::format(&backend, cfg()).unwrap().close().unwrap();
    let mut other = geometry();
    other.channels = 4;
    let err = Ftl::open(&backend, DeviceConfig::new(other)).err().unwrap();
    assert!(matches!(err, DeviceError::GeometryMismatch { .. }), "{err}");
    let missing = Backend::File(dir.path().join("missing.img"));
    assert!(matches!(
        Ftl::open(&missing, cfg()),
        Err(DeviceError::Io { .. })
    ));
    // open_or_format creates what is missing.
    let dev = Ftl::open_or_format(&missing, cfg()).unwrap();
    write(&dev, 0, page(3)).unwrap();
}

#[test]
fn trimmed_pages_stay_unwritten_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let backend = device_file(&dir);
    let dev = Ftl::format(&backend, cfg()).unwrap();
    for i in 0..5 {
        write(&dev, i, page(i)).unwrap();
    }
    dev.execute(Command::Trim {
        segment: SegmentId(0),
    })
    .unwrap()
    .result
    .unwrap();
    dev.power_cut();
    drop(dev);
    let dev = Ftl::open(&backend, cfg()).unwrap();
    assert!(matches!(read(&dev, 0), Err(DeviceError::Unwritten { .. })));
    assert_eq!(dev.stats().pe_max, 1);
}

fn losetup(file: &Path) -> Option<PathBuf> {
    let out = Process::new("losetup")
        .args(["--find", "--show"])
        .arg(file)
        .output()
        .ok()?;
    if !out.status.success() {
        // No loop devices in this machine or container: an environment skip, listed by
        // `cargo xtask test` (LIGHTSTORE_SKIP_LOG) after the run.
        let why = format!(
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        eprintln!("SKIPPED (environment) the block device test: {why}");
        if let Some(path) = std::env::var_os("LIGHTSTORE_SKIP_LOG") {
            use std::io::Write as _;
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| writeln!(f, "environment\thwftl-sim\tblock device test\t{why}"));
        }
        return None;
    }
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

#[test]
fn raw_block_device_through_a_loop_device() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("loop.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let Some(loopdev) = losetup(&img) else {
        return;
    };
    let backend = Backend::File(loopdev.clone());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let dev = Ftl::format(&backend, cfg()).unwrap();
        assert!(dev.describe().contains("block device"));
        for i in 0..10 {
            write(&dev, i, page(i)).unwrap();
        }
        dev.close().unwrap();
        let dev = Ftl::open(&backend, cfg()).unwrap();
        for i in 0..10 {
            assert_eq!(read(&dev, i).unwrap(), page(i));
        }
        dev.execute(Command::Trim {
            segment: SegmentId(0),
        })
        .unwrap()
        .result
        .unwrap();
        assert!(matches!(read(&dev, 0), Err(DeviceError::Unwritten { .. })));
    }));
    let _ = Process::new("losetup").arg("-d").arg(&loopdev).status();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A new device file has every block reserved (no ENOSPC mid-write, no block allocation on
/// a program), and an erase zeroes pages without giving their blocks back.
#[test]
fn device_files_are_preallocated_and_erase_keeps_blocks() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let dev = Ftl::format(&Backend::File(path.clone()), cfg()).unwrap();
    let allocated = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(
        allocated(&path) >= len,
        "{} of {len} bytes allocated",
        allocated(&path)
    );
    let per_seg = u64::from(geometry().pages_per_segment());
    for p in 0..per_seg {
        let c = dev
            .execute(Command::Append {
                segment: SegmentId(1),
                buf: page(p),
            })
            .unwrap();
        c.result.unwrap();
    }
    dev.execute(Command::Trim {
        segment: SegmentId(1),
    })
    .unwrap()
    .result
    .unwrap();
    assert!(allocated(&path) >= len, "an erase gave blocks back");
    let r = dev.execute(Command::Read {
        lba: Lba(per_seg),
        buf: PageBuf::zeroed(),
    });
    assert!(
        matches!(&r, Err(rej) if matches!(rej.error, DeviceError::Unwritten { .. })),
        "an erased page must not read as data: {r:?}"
    );
}

/// Formatting a file that already has the device's size erases it in place: every page is
/// erased afterwards (the recovery scan finds nothing), and the file keeps its blocks.
#[test]
fn formatting_an_existing_device_file_erases_it_in_place() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let backend = Backend::File(path.clone());
    Ftl::format(&backend, cfg()).unwrap().close().unwrap();
    // Every byte written (as a benchmark's preconditioning does), with the metadata too.
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&vec![0xa5; usize::try_from(len).unwrap()], 0)
        .unwrap();
    f.sync_all().unwrap();
    let inode = std::fs::metadata(&path).unwrap().ino();
    let dev = Ftl::format(&backend, cfg()).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), len);
    assert_eq!(meta.ino(), inode);
    assert!(meta.blocks() * 512 >= len, "the format gave blocks back");
    for lba in [0, 1, u64::from(geometry().pages_per_segment())] {
        assert!(matches!(
            read(&dev, lba),
            Err(DeviceError::Unwritten { .. })
        ));
    }
    write(&dev, 0, page(7)).unwrap();
    // After a power cut, the recovery scan must see only the one page written since.
    dev.power_cut();
    drop(dev);
    let dev = Ftl::open(&backend, cfg()).unwrap();
    assert_eq!(read(&dev, 0).unwrap().as_ref(), page(7).as_ref());
    assert_eq!(dev.segment_info(SegmentId(0)).unwrap().write_pointer, 1);
    assert!(matches!(read(&dev, 1), Err(DeviceError::Unwritten { .. })));
}

/// `Ftl::open_read_only` (for `lightstore fsck`): after an unclean stop it recovers the write
/// pointers in memory, serves reads, refuses writes, appends and trims, holds the owner lock
/// like a drive, and leaves the file byte for byte as it was.
#[test]
fn a_read_only_open_changes_nothing_and_holds_the_owner_lock() {
    let dir = tempfile::tempdir().unwrap();
    let backend = device_file(&dir);
    let dev = Ftl::format(&backend, cfg()).unwrap();
    for i in 0..5 {
        write(&dev, i, page(i)).unwrap();
    }
    dev.power_cut();
    drop(dev);
    let Backend::File(path) = &backend else {
        unreachable!()
    };
    let before = std::fs::read(path).unwrap();

    let ro = Ftl::open_read_only(&backend, cfg()).unwrap();
    assert_eq!(ro.segment_info(SegmentId(0)).unwrap().write_pointer, 5);
    assert_eq!(&read(&ro, 3).unwrap()[..], &page(3)[..]);
    let refused = |cmd: Command| match ro.execute(cmd) {
        Err(r) => r.error,
        Ok(c) => c.result.err().unwrap(),
    };
    assert!(matches!(
        refused(Command::Write {
            lba: Lba(5),
            buf: page(5)
        }),
        DeviceError::ReadOnlyDevice { .. }
    ));
    assert!(matches!(
        refused(Command::Append {
            segment: SegmentId(1),
            buf: page(6)
        }),
        DeviceError::ReadOnlyDevice { .. }
    ));
    assert!(matches!(
        refused(Command::Trim {
            segment: SegmentId(0)
        }),
        DeviceError::ReadOnlyDevice { .. }
    ));
    assert!(matches!(
        Ftl::open(&backend, cfg()),
        Err(DeviceError::InUse { .. })
    ));
    assert_eq!(ro.stats().table_writes, 0);
    ro.close().unwrap();
    assert!(
        std::fs::read(path).unwrap() == before,
        "the read-only open changed the file"
    );

    // A writable open afterwards recovers as if the read-only one never happened.
    let dev = Ftl::open(&backend, cfg()).unwrap();
    assert_eq!(dev.segment_info(SegmentId(0)).unwrap().write_pointer, 5);
    write(&dev, 5, page(5)).unwrap();
    dev.close().unwrap();
}

#[test]
fn a_read_only_open_does_not_record_a_segment_full_when_it_reads_it() {
    // A segment whose last page reached the file, but whose "full" mark the cut lost (the
    // completion was never processed): the tables say open, the scan finds it full. Reads
    // of it on a read-only open must not write the tables to record it full.
    let dir = tempfile::tempdir().unwrap();
    let backend = device_file(&dir);
    let dev = Ftl::format(&backend, cfg()).unwrap();
    let pps = u64::from(dev.geometry().pages_per_segment());
    for i in 0..pps - 1 {
        write(&dev, i, page(i)).unwrap();
    }
    dev.submit(Command::Write {
        lba: Lba(pps - 1),
        buf: page(pps - 1),
    })
    .unwrap();
    dev.power_cut();
    drop(dev);
    let Backend::File(path) = &backend else {
        unreachable!()
    };
    let before = std::fs::read(path).unwrap();

    let ro = Ftl::open_read_only(&backend, cfg()).unwrap();
    assert_eq!(
        ro.segment_info(SegmentId(0)).unwrap().write_pointer,
        pps as u32,
        "the last page did not reach the file before the cut"
    );
    for i in 0..pps {
        assert_eq!(&read(&ro, i).unwrap()[..], &page(i)[..]);
    }
    assert_eq!(
        ro.stats().table_writes,
        0,
        "a read-only open wrote the tables"
    );
    ro.close().unwrap();
    assert!(
        std::fs::read(path).unwrap() == before,
        "the read-only open changed the file"
    );
}
