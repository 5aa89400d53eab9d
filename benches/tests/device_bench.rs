//! Smoke test of `lightstore-bench device`: every system and workload gets a row, fio's rows
//! carry figures or the reason they are missing, and the JSON has the documented fields.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Command;

#[test]
fn device_bench_writes_a_row_for_every_system_and_workload() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("device.json");
    let out = Command::new(env!("CARGO_BIN_EXE_lightstore-bench"))
        .args([
            "device",
            "--quick",
            "--ops",
            "400",
            "--repeats",
            "1",
            "--region-mib",
            "64",
        ])
        .arg("--scratch")
        .arg(dir.path().join("scratch"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let systems = [
        "hwftl-ram/none",
        "hwftl-ram/paper-card",
        "hwftl-file/none",
        "hwftl-file/paper-card",
        "fio",
    ];
    let workloads = [
        "randread-qd1",
        "randread-qd32",
        "seqread-qd32",
        "randwrite-qd32",
        "seqwrite-qd32",
    ];
    for s in systems {
        for w in workloads {
            let row = rows
                .iter()
                .find(|r| r["system"] == s && r["workload"] == w)
                .unwrap_or_else(|| panic!("no row for {s} {w}"));
            for field in ["ops_per_sec", "mb_per_sec", "p50_us", "p99_us"] {
                assert!(row[field].is_number(), "{s} {w}: {field}");
            }
            match row.get("missing") {
                Some(why) => {
                    assert_eq!(s, "fio", "only fio may be missing: {row}");
                    eprintln!("fio row missing: {why}");
                }
                None => assert!(row["ops_per_sec"].as_f64().unwrap() > 0.0, "{row}"),
            }
        }
    }
    // The scratch device file is removed after the run.
    assert!(!dir.path().join("scratch/device-bench.img").exists());
}
