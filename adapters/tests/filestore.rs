//! The file store: ext4 on a volume stored on the drive (`lightstore-nbd volume create`,
//! exported by `lightstore-nbd serve`), mounted without the kernel nbd
//! module. `nbdfuse` (Debian package nbdfuse) exposes the NBD export as a file in a FUSE
//! mount, `losetup` puts a loop device on that file, and the loop device is formatted with
//! `mkfs.ext4` and mounted. Files are written, the file system is unmounted and mounted
//! again, then everything is torn down and rebuilt on a fresh `lightstore-nbd` process over
//! the same drive, checked with `e2fsck`, and mounted a third time.
//!
//! Needs root, /dev/fuse and loop devices; skips with the exact reason where the machine
//! cannot provide one of them. Every mount, loop device and process is released on every
//! path (a guard with Drop).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{have, Drive, Nbd};

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// One nbdfuse + loop device + mount stack; torn down in reverse order on drop.
struct Stack {
    nbdfuse: Option<Child>,
    fuse_dir: PathBuf,
    fuse_mounted: bool,
    loop_dev: Option<String>,
    mount_dir: PathBuf,
    mounted: bool,
}

impl Stack {
    fn new(fuse_dir: &Path, mount_dir: &Path) -> Stack {
        std::fs::create_dir_all(fuse_dir).unwrap();
        std::fs::create_dir_all(mount_dir).unwrap();
        Stack {
            nbdfuse: None,
            fuse_dir: fuse_dir.to_path_buf(),
            fuse_mounted: false,
            loop_dev: None,
            mount_dir: mount_dir.to_path_buf(),
            mounted: false,
        }
    }

    /// Starts nbdfuse on `uri`; `Err(reason)` when the FUSE mount cannot be made here.
    fn fuse(&mut self, uri: &str, pidfile: &Path) -> Result<PathBuf, String> {
        let _ = std::fs::remove_file(pidfile);
        let child = Command::new("nbdfuse")
            .arg("-P")
            .arg(pidfile)
            .arg(self.fuse_dir.join("disk"))
            .arg(uri)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start nbdfuse: {e}"))?;
        self.nbdfuse = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        // nbdfuse writes its pid file once the FUSE file system is ready.
        while !pidfile.exists() {
            if let Some(child) = self.nbdfuse.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let child = self.nbdfuse.take().unwrap();
                    let err = text(&child.wait_with_output().unwrap());
                    return Err(format!("nbdfuse exited ({status}) before mounting: {err}"));
                }
            }
            if Instant::now() > deadline {
                return Err("nbdfuse did not mount within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.fuse_mounted = true;
        Ok(self.fuse_dir.join("disk"))
    }

    /// Attaches a loop device to `file`; `Err(reason)` when no loop device can be had.
    fn attach(&mut self, file: &Path) -> Result<String, String> {
        let o = output(Command::new("losetup").args(["-f", "--show"]).arg(file));
        if !o.status.success() {
            return Err(format!(
                "losetup -f --show {}: {}",
                file.display(),
                text(&o)
            ));
        }
        let dev = String::from_utf8_lossy(&o.stdout).trim().to_string();
        self.loop_dev = Some(dev.clone());
        Ok(dev)
    }

    fn mount(&mut self, dev: &str) {
        let o = output(Command::new("mount").arg(dev).arg(&self.mount_dir));
        assert!(o.status.success(), "mount {dev}: {}", text(&o));
        self.mounted = true;
    }

    fn umount(&mut self) {
        let o = output(Command::new("umount").arg(&self.mount_dir));
        assert!(o.status.success(), "umount: {}", text(&o));
        self.mounted = false;
    }

    /// Releases everything, in reverse order; quiet, for drop and for the happy path.
    fn teardown(&mut self) {
        if self.mounted {
            let ok = Command::new("umount").arg(&self.mount_dir).status();
            if !ok.is_ok_and(|s| s.success()) {
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.mount_dir)
                    .status();
            }
            self.mounted = false;
        }
        if let Some(dev) = self.loop_dev.take() {
            let _ = Command::new("losetup").args(["-d", &dev]).status();
        }
        if self.fuse_mounted {
            let ok = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.fuse_dir)
                .status();
            if !ok.is_ok_and(|s| s.success()) {
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.fuse_dir)
                    .status();
            }
            self.fuse_mounted = false;
        }
        if let Some(mut child) = self.nbdfuse.take() {
            // After the unmount nbdfuse exits by itself; make sure.
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Why this machine cannot run the test, if it cannot: a missing tool (`tool`: `cargo xtask
/// test` installs them) or what the machine cannot offer (`environment`).
fn missing_prerequisite() -> Option<(&'static str, String)> {
    for (tool, pkg) in [
        ("nbdfuse", "nbdfuse"),
        ("fusermount3", "fuse3"),
        ("losetup", "mount"),
        ("mkfs.ext4", "e2fsprogs"),
        ("e2fsck", "e2fsprogs"),
        ("mount", "mount"),
        ("umount", "mount"),
    ] {
        if !have(tool)
            && !Path::new("/usr/sbin").join(tool).exists()
            && !Path::new("/sbin").join(tool).exists()
        {
            return Some((
                "tool",
                format!("{tool} is not installed (Debian package {pkg})"),
            ));
        }
    }
    let env = |why: &str| Some(("environment", why.to_string()));
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return env("not running as root (mounting and losetup need it)");
    }
    if !Path::new("/dev/fuse").exists() {
        return env("/dev/fuse does not exist (no FUSE in this kernel or container)");
    }
    if !Path::new("/dev/loop-control").exists() {
        return env("/dev/loop-control does not exist (no loop devices here)");
    }
    None
}

fn files() -> Vec<(String, Vec<u8>)> {
    use rand::{RngCore, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
    let mut big = vec![0u8; 3 << 20];
    rng.fill_bytes(&mut big);
    let mut out = vec![
        ("hello.txt".to_string(), b"hello, block adapter\n".to_vec()),
        ("big.bin".to_string(), big),
    ];
    for i in 0..40 {
        let mut small = vec![0u8; 100 + i * 97];
        rng.fill_bytes(&mut small);
        out.push((format!("dir/f{i:02}"), small));
    }
    out
}

fn check_files(root: &Path, expect: &[(String, Vec<u8>)]) {
    for (name, data) in expect {
        let got = std::fs::read(root.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == *data, "{name} differs after remount");
    }
}

#[test]
fn ext4_on_a_volume_survives_remounts() {
    if let Some((kind, why)) = missing_prerequisite() {
        common::record_skip(kind, "ext4_on_a_volume_survives_remounts", &why);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drive = Drive::start(&dir.path().join("drive"), &[]);
    let expect = files();
    // A volume stored on the drive, exported by `serve`.
    common::volume_cmd(drive.addr, &["create", "fs", "--size", "64MiB"]);
    {
        let nbd = Nbd::serve(&drive);
        let uri = nbd.uri("fs");
        let mut stack = Stack::new(&dir.path().join("fuse"), &dir.path().join("mnt"));
        let file = match stack.fuse(&uri, &dir.path().join("nbdfuse.pid")) {
            Ok(f) => f,
            Err(why) => {
                common::record_skip("environment", "ext4_on_a_volume_survives_remounts", &why);
                return;
            }
        };
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 64 << 20);
        let dev = match stack.attach(&file) {
            Ok(d) => d,
            Err(why) => {
                common::record_skip("environment", "ext4_on_a_volume_survives_remounts", &why);
                return;
            }
        };
        let o = output(
            Command::new("mkfs.ext4")
                .args(["-q", "-F", "-L", "lightstore"])
                .arg(&dev),
        );
        assert!(o.status.success(), "mkfs.ext4 {dev}: {}", text(&o));
        stack.mount(&dev);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir_all(mnt.join("dir")).unwrap();
        for (name, data) in &expect {
            std::fs::write(mnt.join(name), data).unwrap();
        }
        stack.umount();
        stack.mount(&dev);
        check_files(&mnt, &expect);
        // Delete one file (ext4 discards nothing by default; the data path sees writes).
        std::fs::remove_file(mnt.join("dir/f00")).unwrap();
        stack.umount();
        stack.teardown();
    }
    // A fresh adapter process over the same drive: everything, the volume's size
    // included, came from the drive.
    let nbd = Nbd::serve(&drive);
    let uri = nbd.uri("fs");
    let mut stack = Stack::new(&dir.path().join("fuse"), &dir.path().join("mnt"));
    let file = stack.fuse(&uri, &dir.path().join("nbdfuse2.pid")).unwrap();
    let dev = stack.attach(&file).unwrap();
    let o = output(Command::new("e2fsck").args(["-f", "-n"]).arg(&dev));
    assert!(o.status.success(), "e2fsck -f -n {dev}: {}", text(&o));
    stack.mount(&dev);
    let mnt = dir.path().join("mnt");
    assert!(!mnt.join("dir/f00").exists());
    let kept: Vec<_> = expect.into_iter().filter(|(n, _)| n != "dir/f00").collect();
    check_files(&mnt, &kept);
    stack.umount();
    stack.teardown();
}
