//! Unit tests of `all` (the median pass, ratios on matching pairs).

use super::*;

/// The median pass stands for each workload, with its own latency and CDF, the spread
/// over the passes beside it; a pass missing a workload does not count for it.
#[test]
fn repeated_passes_become_their_median_rows() {
    let pass = |get: f64, set: Option<f64>| {
        let row = |w: &str, ops: f64| {
            let mut r = Row::measured("lightstore-local", w, QD, ops, 0.0, ops / 100.0, 0.0);
            r.value_size = Some(8192);
            r
        };
        let mut rows = vec![row("R-GET", get)];
        rows.push(match set {
            Some(ops) => row("R-SET", ops),
            None => {
                let mut r = Row::missing("lightstore-local", "R-SET", QD, "failed".into());
                r.value_size = Some(8192);
                r
            }
        });
        let cdfs = vec![Cdf {
            system: "lightstore-local".into(),
            workload: "R-GET".into(),
            value_size: 8192,
            points: vec![[get, 1.0]],
        }];
        ChildOutput {
            rows,
            cdfs,
            keytable_dram_bytes: None,
        }
    };
    let (rows, cdfs) = median_rows(vec![
        pass(300.0, Some(10.0)),
        pass(100.0, None),
        pass(200.0, Some(30.0)),
    ]);
    assert_eq!(rows.len(), 2);
    let get = &rows[0];
    assert_eq!(get.ops_per_sec, 200.0);
    assert_eq!(get.p50_us, 2.0, "the figures come from the median pass");
    assert_eq!(get.repetitions, Some(3));
    assert_eq!(get.ops_range, Some((100.0, 300.0)));
    assert_eq!(cdfs.len(), 1);
    assert_eq!(cdfs[0].points, vec![[200.0, 1.0]]);
    // Two passes measured R-SET: the lower middle one stands for it.
    let set = &rows[1];
    assert_eq!(set.ops_per_sec, 10.0);
    assert_eq!(set.repetitions, Some(2));
    assert_eq!(set.ops_range, Some((10.0, 30.0)));
    assert!(set.missing.is_none());
    // One pass: no spread is claimed.
    let (one, _) = median_rows(vec![pass(100.0, Some(1.0))]);
    assert_eq!(one[0].repetitions, None);
    assert_eq!(one[0].ops_range, None);
}

#[test]
fn ratios_compare_like_access_paths() {
    let c = Ceiling {
        write_ops: 10_000.0,
        read_ops: 20_000.0,
    };
    let row = |sys: &str, ops: f64| {
        let mut r = Row::measured(sys, "R-GET", QD, ops, 0.0, 0.0, 0.0);
        r.value_size = Some(8192);
        r
    };
    let mut rows = vec![
        row("lightstore-local", 10_000.0),
        row("lightstore-net", 5_000.0),
        row("rocksdb-blobdb/wal-sync", 5_000.0),
        row("redis", 20_000.0),
        row(PLP, 20_000.0),
        row("rocksdb-leveled/no-wal", 10_000.0),
        row(super::NET_PLP, 10_000.0),
        row("redis-aof-everysec", 10_000.0),
    ];
    add_ratios(&mut rows, &c);
    assert_eq!(rows[0].ratio_to_device, Some(0.5));
    assert_eq!(rows[2].ratio_to_lightstore, Some(0.5));
    // In-memory Redis against the drive in plp mode (both acknowledge from DRAM), Redis
    // with its AOF against the durable drive.
    assert_eq!(rows[3].ratio_to_lightstore, Some(2.0));
    assert_eq!(rows[7].ratio_to_lightstore, Some(2.0));
    // Peers without a WAL are compared with LightStore without a flush per write.
    assert_eq!(rows[5].ratio_to_lightstore, Some(0.5));
    assert!(device_rows(&c)
        .iter()
        .all(|r| r.ratio_to_device == Some(1.0)));
}
