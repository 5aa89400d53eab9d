//! Tests that could not run, recorded so that they cannot pass unnoticed.
//!
//! A skip is printed and appended to the file `LIGHTSTORE_SKIP_LOG` names. `cargo xtask test`
//! sets it, lists every skip after the run, and fails the run on any skip: it installs every
//! tool the tests use, so a `tool` skip means a suite did not run; an `environment` skip (the
//! machine cannot offer it: no FUSE, no loop devices, not root) fails too unless
//! `LIGHTSTORE_ALLOW_SKIPS=environment` says this machine cannot.

use std::io::Write;
use std::process::Command;

/// Records that `what` (a test or a part of one) of `suite` (`firmware`, `adapters`) was
/// skipped, and why.
pub fn record_skip(suite: &str, kind: &str, what: &str, why: &str) {
    eprintln!("SKIPPED ({kind}) {what}: {why}");
    if let Some(path) = std::env::var_os("LIGHTSTORE_SKIP_LOG") {
        let line = format!("{kind}\t{suite}\t{what}\t{why}\n");
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// Whether `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// Whether a Debian tool is installed; records a `tool` skip for `suite` when it is not.
pub fn have_tool(suite: &str, bin: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        record_skip(
            suite,
            "tool",
            bin,
            "not installed (cargo xtask test installs it)",
        );
    }
    ok
}

/// True when every `(tool, Debian package)` is installed; otherwise records a `tool` skip of
/// `test` naming what is missing, and returns false so the test can return.
pub fn tools(suite: &str, test: &str, needed: &[(&str, &str)]) -> bool {
    let missing: Vec<String> = needed
        .iter()
        .filter(|(t, _)| !have(t))
        .map(|(t, p)| format!("{t} (Debian package {p})"))
        .collect();
    if missing.is_empty() {
        return true;
    }
    record_skip(
        suite,
        "tool",
        test,
        &format!(
            "not installed: {}; `cargo xtask test` installs them",
            missing.join(", ")
        ),
    );
    false
}
