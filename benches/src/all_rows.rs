//! The report's rows: the device's own, the medians of a system's passes, the rows of a
//! system that could not run, and each row's ratios to the device and to LightStore.

use super::*;

/// Says on each row where its system reads from and, for the write workloads, when its
/// timed section ends (the system's text, then the run's own note if its settle stopped at
/// the limit: [`Settled::LIMIT_HIT_NOTE`](crate::kv::Settled::LIMIT_HIT_NOTE)).
pub(super) fn describe_systems(rows: &mut [Row]) {
    for r in rows {
        let Ok(s) = system(&r.system) else { continue };
        r.reads_from = Some(s.reads_from.to_string());
        if Workload::from_name(&r.workload)
            .is_some_and(|w| matches!(w, Workload::SSet | Workload::RSet | Workload::RMixed))
        {
            r.timed_until = Some(match r.timed_until.take() {
                Some(note) => format!("{}; {note}", s.timed_until),
                None => s.timed_until.to_string(),
            });
        }
    }
}

/// The ceiling the read workloads are held to: the higher of the load generator's random
/// reads and fio's, and whether it is fio's. A write is bounded by what the append-only
/// device itself must do (program erased space, which the load generator does as the engine
/// does), but a random read needs nothing of the device's own: the engine reads a page as
/// fio does (on the waiting thread's own io_uring ring, `hwftl_sim`'s caller ring), and the
/// load generator's single thread on the shared ring can fall below both. A ratio over the
/// lower figure would pass 1.0 without meaning anything.
pub(crate) fn read_ceiling(
    mut ceiling: Ceiling,
    fio: &Result<crate::fio::FioCeilings, String>,
) -> (Ceiling, bool) {
    match fio {
        Ok(f) if f.rand_read.iops > ceiling.read_ops => {
            ceiling.read_ops = f.rand_read.iops;
            (ceiling, true)
        }
        _ => (ceiling, false),
    }
}

/// The device rows: the raw figures, and per workload and value size the operations per
/// second the device alone allows (`Ceiling::ops`).
pub(super) fn device_rows(c: &Ceiling) -> Vec<Row> {
    let page = hwftl_sim::PAGE_SIZE as f64;
    let mut rows = vec![
        Row::measured(
            DEVICE,
            "seqwrite-8K",
            QD,
            c.write_ops,
            c.write_ops * page / 1e6,
            0.0,
            0.0,
        ),
        Row::measured(
            DEVICE,
            "randread-8K",
            QD,
            c.read_ops,
            c.read_ops * page / 1e6,
            0.0,
            0.0,
        ),
    ];
    for &vs in &VALUE_SIZES {
        for w in Workload::ALL {
            let ops = c.ops(w, vs);
            let mut r = Row::measured(DEVICE, w.name(), QD, ops, ops * vs as f64 / 1e6, 0.0, 0.0);
            r.value_size = Some(vs as u32);
            rows.push(r);
        }
    }
    for r in &mut rows {
        r.reads_from = Some("device (io_uring O_DIRECT, no engine)".into());
        r.ratio_to_device = Some(1.0);
        r.value_size = r.value_size.or(Some(8192));
    }
    rows
}

/// One (system, value size)'s passes as one set of rows: for each workload, the pass with
/// the median ops/s (the lower of the two middle ones for an even count) stands for it, with
/// its own latencies, write amplification, CPU and latency CDF, so every figure on a row
/// comes from one real run; the row notes how many passes measured it and the smallest and
/// largest ops/s among them. A workload a pass lacks (a missing row) is judged on the passes
/// that have it.
pub(super) fn median_rows(passes: Vec<ChildOutput>) -> (Vec<Row>, Vec<Cdf>) {
    let n = passes.len();
    let mut rows = Vec::new();
    let mut cdfs = Vec::new();
    let Some(first) = passes.first() else {
        return (rows, cdfs);
    };
    for row in &first.rows {
        let same = |r: &&Row| r.workload == row.workload && r.value_size == row.value_size;
        let mut measured: Vec<(usize, &Row)> = passes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.rows.iter().find(same).map(|r| (i, r)))
            .filter(|(_, r)| r.missing.is_none())
            .collect();
        if measured.is_empty() {
            rows.push(row.clone());
            continue;
        }
        measured.sort_by(|a, b| a.1.ops_per_sec.total_cmp(&b.1.ops_per_sec));
        let lo = measured.first().map_or(0.0, |m| m.1.ops_per_sec);
        let hi = measured.last().map_or(0.0, |m| m.1.ops_per_sec);
        let Some(&(pass, median)) = measured.get((measured.len() - 1) / 2) else {
            continue;
        };
        let mut r = median.clone();
        if n > 1 {
            r.repetitions = Some(measured.len() as u32);
            r.ops_range = Some((lo, hi));
        }
        rows.push(r);
        let cdf = passes.get(pass).and_then(|p| {
            p.cdfs
                .iter()
                .find(|c| c.workload == row.workload && Some(c.value_size) == row.value_size)
        });
        cdfs.extend(cdf.cloned());
    }
    (rows, cdfs)
}

pub(super) fn missing_rows(s: &System, value_size: usize, reason: &str) -> Vec<Row> {
    Workload::ALL
        .iter()
        .map(|w| {
            let mut r = Row::missing(s.name, w.name(), QD, reason.to_string());
            r.value_size = Some(value_size as u32);
            r
        })
        .collect()
}

/// `ratio_to_device` (ops/s over what the device alone allows for the workload) and
/// `ratio_to_lightstore` (ops/s over LightStore on the same access path: in-process peers
/// against LightStore-Local, servers against LightStore-Net).
pub(super) fn add_ratios(rows: &mut [Row], c: &Ceiling) {
    let ls: Vec<Row> = rows
        .iter()
        .filter(|r| r.system.starts_with("lightstore-") && r.missing.is_none())
        .cloned()
        .collect();
    for r in rows.iter_mut() {
        if r.missing.is_some() || r.system == DEVICE {
            continue;
        }
        let (Some(w), Some(vs)) = (Workload::from_name(&r.workload), r.value_size) else {
            continue;
        };
        r.ratio_to_device = Some(r.ops_per_sec / c.ops(w, vs as usize));
        let base = match system(&r.system).map(|s| s.access) {
            // Durable against durable, acknowledged-without-flush against the same.
            Ok(Access::InProcess) if r.system.ends_with("/no-wal") => PLP,
            Ok(Access::InProcess) => "lightstore-local",
            // In-memory Redis acknowledges from DRAM: against the drive in plp mode; the
            // AOF server and the drive's own modes against the durable drive.
            Ok(Access::Redis { aof: false }) => super::NET_PLP,
            Ok(_) => "lightstore-net",
            Err(_) => continue,
        };
        r.ratio_to_lightstore = ls
            .iter()
            .find(|b| b.system == base && b.workload == r.workload && b.value_size == r.value_size)
            .filter(|b| b.ops_per_sec > 0.0)
            .map(|b| r.ops_per_sec / b.ops_per_sec);
    }
}
