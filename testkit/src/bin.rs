//! Finding the `lightstore` binary a test runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The `lightstore` drive binary of this build.
///
/// `cargo xtask test` builds every test target first and names the drive it built in
/// `LIGHTSTORE_BIN`, which is used as it is. Otherwise (`cargo test -p adapters`, say) the
/// first caller runs `cargo build -p firmware --bin lightstore` into the same target
/// directory and profile as the running test binary (a no-op when it is up to date).
/// Suites that have the binary at compile time (`env!("CARGO_BIN_EXE_lightstore")` in
/// `firmware/tests`) pass it to [`crate::Drive::start_bin`] instead.
pub fn lightstore_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("LIGHTSTORE_BIN").map(PathBuf::from) {
            assert!(
                bin.exists(),
                "LIGHTSTORE_BIN={} does not exist",
                bin.display()
            );
            return bin;
        }
        // target/<profile>/deps/<this test> -> target/<profile>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
        let target_dir = profile_dir.parent().unwrap().to_path_buf();
        let profile = profile_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "firmware", "--bin", "lightstore"])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target_dir);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let out = cmd.output().expect("running cargo build for the drive");
        let bin = profile_dir.join("lightstore");
        assert!(
            out.status.success() && bin.exists(),
            "building the lightstore drive failed ({}); {}:\n{}",
            out.status,
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
    .clone()
}
