//! The record of the last `lightstore fsck`: a small text file, `last-fsck`, in the data
//! directory. `lightstore fsck` writes it when a check ran to its end (clean or not); the
//! drive reads it when it starts (a check and a running drive exclude each other through the
//! device's owner lock, so it cannot change while the drive runs), logs it and shows it in
//! INFO's lsm section (`last_fsck`, `last_fsck_time`, `last_fsck_problems`).
//!
//! The file holds `key=value` lines: `time` (Unix seconds when the check ended), `device`
//! (the checked device's path, canonical) and `problems` (the findings). A record for
//! another device than the drive's (the data directory reused with another `--device`)
//! counts as no record. It is replaced whole (a temporary file renamed over it), so a crash
//! leaves the old record or the new one.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Name of the record in the data directory.
pub const FILE: &str = "last-fsck";

/// What went wrong reading or writing the record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file could not be read, written or renamed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a record (a line or a field is missing or malformed).
    #[error("{path}: not an fsck record: {why}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// One completed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsckRecord {
    /// When it ended, in Unix seconds.
    pub unix_secs: u64,
    /// The device it checked (canonical path).
    pub device: PathBuf,
    /// Problems it found (0: clean).
    pub problems: u64,
}

/// The last check, as the drive reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastFsck {
    /// No check of this device is recorded.
    Never,
    /// The last check of this device.
    Ran(FsckRecord),
    /// A record is there but cannot be read (see the drive's log).
    Unknown,
}

impl LastFsck {
    /// The INFO value of `last_fsck`: `never`, `clean`, `problems` or `unknown`.
    pub fn status(&self) -> &'static str {
        match self {
            LastFsck::Never => "never",
            LastFsck::Ran(r) if r.problems == 0 => "clean",
            LastFsck::Ran(_) => "problems",
            LastFsck::Unknown => "unknown",
        }
    }

    /// When the check ended (Unix seconds; 0 when none is known).
    pub fn unix_secs(&self) -> u64 {
        match self {
            LastFsck::Ran(r) => r.unix_secs,
            _ => 0,
        }
    }

    /// Problems the check found (0 when none is known).
    pub fn problems(&self) -> u64 {
        match self {
            LastFsck::Ran(r) => r.problems,
            _ => 0,
        }
    }
}

impl fmt::Display for LastFsck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LastFsck::Ran(r) => write!(
                f,
                "{} ({} problems) at {} (Unix time)",
                self.status(),
                r.problems,
                r.unix_secs
            ),
            other => f.write_str(other.status()),
        }
    }
}

/// `path` made canonical when it exists (so `data/x` and `./data/x` name one device).
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

impl FsckRecord {
    /// A record of a check of `device` that ended now with `problems` findings.
    pub fn now(device: &Path, problems: u64) -> FsckRecord {
        FsckRecord {
            unix_secs: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            device: canonical(device),
            problems,
        }
    }

    fn encode(&self) -> String {
        format!(
            "# The last `lightstore fsck` of the device (shown in the drive's INFO).\n\
             time={}\ndevice={}\nproblems={}\n",
            self.unix_secs,
            self.device.display(),
            self.problems
        )
    }

    fn decode(path: &Path, text: &str) -> Result<FsckRecord, RecordError> {
        let malformed = |why: String| RecordError::Malformed {
            path: path.to_path_buf(),
            why,
        };
        let field = |name: &str| -> Result<&str, RecordError> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
                .ok_or_else(|| malformed(format!("no `{name}` line")))
        };
        let number = |name: &str| -> Result<u64, RecordError> {
            let v = field(name)?;
            v.trim()
                .parse()
                .map_err(|_| malformed(format!("`{name}` is not a number: {v}")))
        };
        Ok(FsckRecord {
            unix_secs: number("time")?,
            device: PathBuf::from(field("device")?),
            problems: number("problems")?,
        })
    }

    /// Writes the record into `data_dir`, replacing the previous one whole: a temporary file,
    /// synced, renamed over it, the directory synced.
    ///
    /// # Errors
    /// `Io` when the directory is missing or a step fails.
    pub fn save(&self, data_dir: &Path) -> Result<(), RecordError> {
        let path = data_dir.join(FILE);
        let tmp = data_dir.join(format!("{FILE}.tmp"));
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| RecordError::Io { path: p, source }
        };
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(self.encode().as_bytes()).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        std::fs::File::open(data_dir)
            .and_then(|d| d.sync_all())
            .map_err(io(data_dir))?;
        Ok(())
    }
}

/// The last check of `device` recorded in `data_dir`.
///
/// # Errors
/// `Io` (other than a missing file) or `Malformed`: the record is there but unusable.
pub fn load(data_dir: &Path, device: &Path) -> Result<LastFsck, RecordError> {
    let path = data_dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LastFsck::Never),
        Err(source) => return Err(RecordError::Io { path, source }),
    };
    let record = FsckRecord::decode(&path, &text)?;
    Ok(if record.device == canonical(device) {
        LastFsck::Ran(record)
    } else {
        LastFsck::Never
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_record_round_trips_and_belongs_to_its_device() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("device.img");
        std::fs::write(&dev, b"").unwrap();
        assert_eq!(load(dir.path(), &dev).unwrap(), LastFsck::Never);
        let r = FsckRecord::now(&dev, 3);
        r.save(dir.path()).unwrap();
        let last = load(dir.path(), &dir.path().join(".").join("device.img")).unwrap();
        assert_eq!(last, LastFsck::Ran(r.clone()));
        assert_eq!((last.status(), last.problems()), ("problems", 3));
        assert!(last.unix_secs() > 0);
        // Another device: no record of it.
        let other = dir.path().join("other.img");
        assert_eq!(load(dir.path(), &other).unwrap(), LastFsck::Never);
        FsckRecord::now(&dev, 0).save(dir.path()).unwrap();
        assert_eq!(load(dir.path(), &dev).unwrap().status(), "clean");
        assert!(!dir.path().join("last-fsck.tmp").exists());
    }

    #[test]
    fn a_malformed_record_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("device.img");
        std::fs::write(dir.path().join(FILE), "time=soon\ndevice=x\nproblems=0\n").unwrap();
        assert!(matches!(
            load(dir.path(), &dev),
            Err(RecordError::Malformed { .. })
        ));
        std::fs::write(dir.path().join(FILE), "device=x\n").unwrap();
        assert!(matches!(
            load(dir.path(), &dev),
            Err(RecordError::Malformed { .. })
        ));
    }
}
