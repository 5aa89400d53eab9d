//! Replays a committed seed corpus through a fuzz target's check on the stable toolchain
//! (included with `#[path]` by the replay tests of the crates whose parsers are fuzzed).

#![allow(clippy::unwrap_used, clippy::panic, dead_code)]

use std::path::{Path, PathBuf};

/// The seed directory of fuzz target `target`, from a crate directory one level below the
/// workspace root.
pub fn corpus_dir(manifest_dir: &str, target: &str) -> PathBuf {
    Path::new(manifest_dir).join("../fuzz/corpus").join(target)
}

/// Runs `check` on every seed of `target` (at least 10 must exist), naming the seeds that fail.
pub fn replay(manifest_dir: &str, target: &str, check: fn(&[u8])) {
    let dir = corpus_dir(manifest_dir, target);
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    seeds.sort();
    assert!(
        seeds.len() >= 10,
        "only {} seeds in {}",
        seeds.len(),
        dir.display()
    );
    let mut failed = Vec::new();
    for path in &seeds {
        let data = std::fs::read(path).unwrap();
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "seeds failing their checks: {failed:#?}");
}
