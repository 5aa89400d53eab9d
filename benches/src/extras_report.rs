//! The extras' part of `bench all`'s outputs: report sections (latency breakdown, ablation,
//! sustained overwrite), their SVG plots, and rows for `results.json`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::extras::{self, Extras, OverwriteRun, PARTS, VALUE_SIZE};
use crate::plots;
use crate::report::Row;
use crate::workloads::{Workload, BATCH, CLIENTS};

/// The engine issue's sustained-overwrite throughput target: this many times RocksDB
/// BlobDB's ops/s at the same durability.
const OVERWRITE_VS_BLOBDB: f64 = 1.5;

/// DESIGN.md section 8: sustained random overwrite at 80% full.
const WA_TARGET: f64 = 2.5;
/// BlobDB's memtables in `peers` (3 of 64 MiB).
const BLOBDB_MEMTABLES: u64 = 3 * (64 << 20);

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "—".to_string(), |x| format!("{x:.digits$}"))
}

/// Writes the extras' plots under `out`; returns the files.
///
/// # Errors
/// When a file cannot be written.
pub fn write_plots(x: &Extras, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if let Ok(b) = &x.breakdown {
        let bars: Vec<(String, Vec<f64>)> = b
            .ops
            .iter()
            .flat_map(|o| {
                [
                    (format!("{} mean", o.op), o.parts_mean.to_vec()),
                    (format!("{} p50", o.op), o.parts_p50.to_vec()),
                ]
            })
            .collect();
        let path = out.join("latency-breakdown-qd1-8K.svg");
        plots::stacked_bars(
            &path,
            "Latency at queue depth 1, 8 KiB values, over RESP (µs)",
            "µs",
            &PARTS,
            &bars,
        )?;
        files.push(path);
    }
    let series: Vec<String> = x
        .ablation
        .iter()
        .filter(|r| r.missing.is_none())
        .map(|r| r.system.clone())
        .fold(Vec::new(), |mut v, s| {
            if !v.contains(&s) {
                v.push(s);
            }
            v
        });
    if !series.is_empty() {
        let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        let path = out.join("ablation-8K.svg");
        plots::grouped_bars_linear(
            &path,
            "Ablation: LightStore-Net with one feature off, ops/s over the mean baseline (8 KiB)",
            "ratio to baseline",
            &names,
            &series,
            Some(1.0),
            |s, w| {
                x.ablation
                    .iter()
                    .find(|r| r.system == s && r.workload == w && r.missing.is_none())
                    .and_then(|r| r.ratio_to_lightstore)
            },
        )?;
        files.push(path);
    }
    let ran: Vec<&OverwriteRun> = x.overwrite.iter().filter(|o| o.missing.is_none()).collect();
    if !ran.is_empty() {
        let wa: Vec<(String, Vec<[f64; 2]>)> = ran
            .iter()
            .map(|o| {
                let pts = o.samples.iter().map(|s| [s.percent, s.wa_slice]).collect();
                (format!("{} (per 5%)", o.system), pts)
            })
            .chain(ran.iter().map(|o| {
                (
                    format!("{} (cumulative)", o.system),
                    o.samples
                        .iter()
                        .map(|s| [s.percent, s.wa_cumulative])
                        .collect(),
                )
            }))
            .collect();
        let path = out.join("overwrite-wa-8K.svg");
        plots::lines(
            &path,
            &format!(
                "Write amplification over a sustained random overwrite ({:.0}x the {} MiB device, 8 KiB)",
                ran.first().map_or(0.0, |o| o.times_the_device()),
                x.overwrite_device_mib
            ),
            "overwrites done, % of the run",
            "write amplification",
            &wa,
            Some((WA_TARGET, "DESIGN target (<= 2.5)")),
        )?;
        files.push(path);
        let tput: Vec<(String, Vec<[f64; 2]>)> = ran
            .iter()
            .map(|o| {
                (
                    o.system.clone(),
                    o.samples
                        .iter()
                        .map(|s| [s.percent, s.ops_per_sec])
                        .collect(),
                )
            })
            .collect();
        let path = out.join("overwrite-throughput-8K.svg");
        plots::lines(
            &path,
            "Throughput over a sustained random overwrite (ops/s per 5% slice, 8 KiB)",
            "overwrites done, % of the run",
            "ops/s",
            &tput,
            None,
        )?;
        files.push(path);
    }
    Ok(files)
}

/// The report sections of the extras.
pub fn markdown(x: &Extras, quick: bool) -> String {
    let mut m = String::new();
    let _ = writeln!(
        m,
        "## Latency breakdown at queue depth 1 (8 KiB values, the paper's Figure 10)\n"
    );
    match &x.breakdown {
        Ok(b) => {
            let _ = writeln!(
                m,
                "One request at a time, {} requests per figure, {} keys of 8 KiB loaded; all four \
                 measurements in this run, one after another. Parts, µs (mean / p50):\n",
                b.requests, b.keys
            );
            let _ = writeln!(
                m,
                "| op | network | KV server | engine | device | sum of parts | LightStore-Net measured |\n|---|---|---|---|---|---|---|"
            );
            for o in &b.ops {
                let cell = |i: usize| format!("{:.1} / {:.1}", o.parts_mean[i], o.parts_p50[i]);
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} | {:.1} / {:.1} | {:.1} / {:.1} |",
                    o.op,
                    cell(0),
                    cell(1),
                    cell(2),
                    cell(3),
                    o.parts_mean.iter().sum::<f64>(),
                    o.parts_p50.iter().sum::<f64>(),
                    o.net.mean,
                    o.net.p50
                );
            }
            let _ = writeln!(
                m,
                "\nThe measurements, µs (mean / p50):\n\n| op | raw device | LightStore-Local | \
                 LightStore-Net | PING to the drive |\n|---|---|---|---|---|"
            );
            for o in &b.ops {
                let l = |l: extras::Lat| format!("{:.1} / {:.1}", l.mean, l.p50);
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} |",
                    o.op,
                    l(o.device),
                    l(o.local),
                    l(o.net),
                    l(o.ping)
                );
            }
            let _ = writeln!(
                m,
                "\nHow each part is derived (each statistic separately, mean and p50):\n\n\
                 - **device** = the raw device (`hwftl-sim` on the io_uring O_DIRECT file, no \
                 engine; the device-ceiling code at queue depth 1): an 8 KiB random page read \
                 for GET, an 8 KiB sequential page append for SET.\n\
                 - **engine** = LightStore-Local at queue depth 1 (one client thread, one key \
                 per `multi_get` / `write`, the engine in this process on its own device file) \
                 minus device. For SET it includes the device write-cache flush the engine \
                 issues before it acknowledges a batch, which the raw append does not.\n\
                 - **network** = the round trip of `PING` to the drive at queue depth 1 over the \
                 same client (`kvproto`, one connection; the drive does no work for it): \
                 loopback, both sides' socket calls and RESP encoding/parsing of a tiny \
                 command. The 8 KiB value's own transfer and parsing are therefore counted in \
                 KV server.\n\
                 - **KV server** = LightStore-Net at queue depth 1 (the drive over RESP, one \
                 connection, no pipelining) minus engine, device and network: the drive's \
                 connection, parsing, queueing and reply work for the request plus moving the \
                 8 KiB value.\n\
                 - A part that comes out negative (the measurements are separate runs and \
                 this host's disk drifts) is shown as 0, with a note below; the parts then add \
                 up to more than LightStore-Net's own figure. Percentiles do not add, so the \
                 p50 split is indicative only.\n"
            );
            let notes: Vec<&String> = b.ops.iter().flat_map(|o| o.notes.iter()).collect();
            if notes.is_empty() {
                let _ = writeln!(m, "No part came out negative in this run.\n");
            } else {
                for (o, n) in b
                    .ops
                    .iter()
                    .flat_map(|o| o.notes.iter().map(move |n| (o, n)))
                {
                    let _ = writeln!(m, "- Note ({}): {n}", o.op);
                }
                m.push('\n');
            }
        }
        Err(why) => {
            let _ = writeln!(m, "Missing: {why}\n");
        }
    }

    let _ = writeln!(
        m,
        "## Ablation (LightStore-Net, 8 KiB values, the paper's Figure 12)\n"
    );
    let _ = writeln!(
        m,
        "The drive started with `--ablate NAME` (one feature off at a time) and without \
         (baseline, run first and again last), each on a fresh device with the same data and \
         load as LightStore-Net above ({CLIENTS} connections x {BATCH} pipelined; S-SET loads the keys, then S-GET, \
         R-SET, R-GET, R-Mixed), one after another. Ratio = ops/s over the mean of the two baseline runs' in \
         the same workload (the two baselines' own ratios show how far this host drifts between \
         runs). WA = the drive process's `/proc/<pid>/io` bytes written over user \
         bytes. Copied = the drive's INFO `value_bytes_copied` over the workload's operations. \
         Compactions = those the drive ran during the workload (in brackets: how many left \
         the values in place for lack of free segments, INFO \
         `compactions_without_room_to_move`; only the metadata-compaction ablation moves \
         values). \
         The rows run a few seconds apart on a disk whose speed drifts, so differences of a \
         few percent are noise.\n"
    );
    let _ = writeln!(
        m,
        "| configuration | workload | ops/s | ratio to baseline | p50 µs | p99 µs | WA | CPU s/Mop | value bytes copied/op | compactions |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut missing = Vec::new();
    for r in &x.ablation {
        if let Some(why) = &r.missing {
            if !missing
                .iter()
                .any(|(s, _): &(String, String)| *s == r.system)
            {
                missing.push((r.system.clone(), why.clone()));
            }
            continue;
        }
        let _ = writeln!(
            m,
            "| {} | {} | {:.0} | {} | {:.0} | {:.0} | {} | {} | {} | {} |",
            r.system,
            r.workload,
            r.ops_per_sec,
            opt(r.ratio_to_lightstore, 2),
            r.p50_us,
            r.p99_us,
            opt(r.write_amp, 2),
            opt(r.cpu_s_per_mop, 2),
            opt(r.value_bytes_copied_per_op, 0),
            r.compactions
                .map_or_else(|| "—".to_string(), |(n, kept)| format!("{n} ({kept})"))
        );
    }
    for (s, why) in &missing {
        let _ = writeln!(m, "| {s} | — | missing: {why} | | | | | | | |");
    }
    let _ = writeln!(
        m,
        "\nWhat each ablation turns off: `zero-copy` — values are copied once more on the way \
         in and out of the drive (counted in `value_bytes_copied`); `lock-free-queues` — the \
         threads' queues become mutex-and-condvar queues instead of crossbeam's; \
         `metadata-compaction` — compaction rewrites the values of the entries it keeps, as an \
         LSM tree without key-value separation does (shows in WA when compactions run: with \
         small data sets few do); `keytable-cache` — each lookup that passes a run's bloom \
         filter reads that run's keytable page from the device (found with a sparse page \
         index kept in DRAM) instead of searching the cached keytable.\n"
    );

    let _ = writeln!(
        m,
        "## Sustained random overwrite at 80% of the user capacity (8 KiB values)\n"
    );
    let first = x.overwrite.iter().find(|o| o.missing.is_none());
    if let Some(o) = first {
        let _ = writeln!(
            m,
            "LightStore-Local (the engine in-process, io_uring O_DIRECT device file; durable: a \
             device flush before each acknowledgement, and `/plp`: acknowledged at device \
             completion, as a power-protected card allows) on a {} \
             MiB device ({} MiB capacity, {}: the geometry a drive formats for that capacity), user capacity {} MiB (the engine \
             keeps 20% over-provisioning); {} keys of 8 KiB = {:.0} MiB live ({}% of the user \
             capacity); then {} random overwrites = {:.0}x the device capacity ({:.0} MiB), in \
             20 slices of 5%, {CLIENTS} client threads x {BATCH}-key write batches. RocksDB \
             BlobDB (no WAL: its WAL would add one more copy of every value; direct I/O, \
             tuned as above, blob GC on with age cutoff 0.25, block cache 1/16 of the data) \
             gets the same keys, values and overwrites in its own directory. WA per slice and \
             cumulative from the start of the overwrites (the load excluded); LightStore's \
             from `EngineStats` (device bytes written / user bytes written), BlobDB's from \
             the process's `/proc/self/io` over user bytes (16-byte keys + values). The final \
             WA is taken after each system's background work settled (BlobDB: memtable \
             flushed and compactions done). *WA below the file system* is one meter for both: \
             the sectors the block device holding the run's directory wrote (its \
             `/sys/dev/block/MAJOR:MINOR/stat`, after `syncfs`), file-system journal and \
             metadata included, over the same user bytes; the machine is otherwise idle, so \
             little else writes to that device during a run. *Peak space* is one meter for \
             both too: the most the run's files held on the file system, sampled every {} ms \
             (per file the larger of its length and its allocated blocks: LightStore's \
             device file counts whole, whatever it wrote). BlobDB is bounded by nothing but \
             the file system, so when it held more than LightStore's device, the row \
             `{}` gives LightStore plp a device no larger than BlobDB's peak, with \
             BlobDB's keys and overwrites: the same workload in the same space, the row the \
             throughput target is judged on.{}\n",
            x.overwrite_device_mib,
            o.capacity_bytes >> 20,
            match o.segment_bytes {
                0 => "2 x 2 chips, 512 KiB segments".to_string(),
                b => format!("8 x 8 chips, {} KiB segments", b >> 10),
            },
            o.user_capacity_bytes >> 20,
            o.keys,
            (o.keys * VALUE_SIZE as u64) as f64 / 1048576.0,
            extras::FILL_PERCENT,
            o.overwrites,
            o.times_the_device(),
            (o.overwrites * VALUE_SIZE as u64) as f64 / 1048576.0,
            crate::footprint::SAMPLE_EVERY.as_millis(),
            extras::SAME_SPACE_SYSTEM,
            if quick {
                " Quick: a small device (few, large segments: write amplification is higher than at 1 GiB) overwritten once; the full run uses 1 GiB, overwritten three times."
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        m,
        "| system | device MiB | load ops/s | overwrite ops/s | final WA | WA below the file system | WA target | met | peak space MiB | ÷ BlobDB (no WAL) ops/s | GC segments |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let blobdb_run = extras::blobdb_run(&x.overwrite);
    let blobdb = blobdb_run.map(|o| o.ops_per_sec);
    let blobdb_space = blobdb_run.and_then(|o| o.peak_footprint_bytes);
    for o in &x.overwrite {
        if let Some(why) = &o.missing {
            let _ = writeln!(m, "| {} | missing: {why} | | | | | | | | | |", o.system);
            continue;
        }
        let lightstore = o.system.starts_with("lightstore");
        let (target, met) = if lightstore {
            (
                format!("<= {WA_TARGET}"),
                if o.final_wa <= WA_TARGET {
                    "yes"
                } else {
                    "**no**"
                },
            )
        } else {
            ("(peer)".to_string(), "—")
        };
        let ratio = match (lightstore, blobdb) {
            (true, Some(b)) if b > 0.0 => overwrite_ratio(o, o.ops_per_sec / b, blobdb_space),
            _ => "—".into(),
        };
        let _ = writeln!(
            m,
            "| {} | {} | {:.0} | {:.0} | {:.2} | {} | {target} | {met} | {} | {ratio} | {} |",
            o.system,
            if lightstore {
                (o.capacity_bytes >> 20).to_string()
            } else {
                "— (files)".to_string()
            },
            o.load_ops_per_sec,
            o.ops_per_sec,
            o.final_wa,
            o.block_wa
                .map_or_else(|| "—".to_string(), |w| format!("{w:.2}")),
            o.peak_footprint_bytes
                .map_or_else(|| "—".to_string(), |b| (b >> 20).to_string()),
            o.gc_segments
                .map_or_else(|| "—".to_string(), |g| g.to_string())
        );
    }
    let ran: Vec<&OverwriteRun> = x.overwrite.iter().filter(|o| o.missing.is_none()).collect();
    if let Some(o) = ran.iter().find(|o| o.system.starts_with("rocksdb")) {
        let live = o.keys * (16 + VALUE_SIZE as u64);
        if live < BLOBDB_MEMTABLES {
            let _ = writeln!(
                m,
                "\n**Caveat:** the live data ({} MiB) is smaller than BlobDB's memtables \
                 (3 x 64 MiB), so most of its overwrites die in the memtable before a flush and \
                 its write amplification here is not a steady state; only a run whose live data \
                 is several times that (the full run's 1 GiB device) compares GC with GC.",
                live >> 20
            );
        } else if o.final_wa < 1.0 || o.block_wa.is_some_and(|w| w < 1.0) {
            // Not a faulty meter: the block device's own count agrees. An overwrite of a key
            // still in a memtable replaces it there and is never written.
            let window = (BLOBDB_MEMTABLES / (16 + VALUE_SIZE as u64)) as f64;
            let absorbed = 1.0 - (-window / o.keys.max(1) as f64).exp();
            let _ = writeln!(
                m,
                "
**Why BlobDB's WA is below 1:** an overwrite of a key that is still in one of \
                 its memtables (3 x 64 MiB, about {window:.0} values) replaces the value there, \
                 and a flush writes only the newest; with {} keys overwritten uniformly, about \
                 {:.0}% of the writes are replaced before a flush (1 - e^(-{window:.0}/{})). \
                 The block device's count below the file system agrees with the process's. \
                 LightStore writes every value to its log at once, so its WA cannot go below 1.",
                o.keys,
                absorbed * 100.0,
                o.keys
            );
        }
    }
    if !ran.is_empty() {
        let mut head = String::from("\n| done | ");
        let mut sep = String::from("|---|");
        for o in &ran {
            let _ = write!(
                head,
                "{0} ops/s | {0} WA (slice) | {0} WA (cumulative) | ",
                o.system
            );
            sep.push_str("---|---|---|");
        }
        let _ = writeln!(m, "{}\n{sep}", head.trim_end());
        let n = ran.iter().map(|o| o.samples.len()).max().unwrap_or(0);
        for i in 0..n {
            let pct = ran
                .iter()
                .find_map(|o| o.samples.get(i))
                .map_or(0.0, |s| s.percent);
            let _ = write!(m, "| {pct:.0}% |");
            for o in &ran {
                match o.samples.get(i) {
                    Some(s) => {
                        let _ = write!(
                            m,
                            " {:.0} | {:.2} | {:.2} |",
                            s.ops_per_sec, s.wa_slice, s.wa_cumulative
                        );
                    }
                    None => m.push_str(" — | — | — |"),
                }
            }
            m.push('\n');
        }
        m.push('\n');
    }
    let _ = writeln!(m, "The extras took {:.0} s of this run.\n", x.seconds);
    m
}

/// The ratio cell of one LightStore row of the sustained overwrite: `r` is its ops/s over
/// BlobDB's (no WAL). The throughput target (>= 1.5x BlobDB at the same durability) is
/// judged on a plp row (neither it nor BlobDB without a WAL flushes the device per write),
/// and only where both held the same space: at the configured device BlobDB, bounded by
/// nothing but the file system, may hold several times the device LightStore has, which is
/// not the same fill; the same-space run ([`extras::SAME_SPACE_SYSTEM`]) is then the one
/// that compares like with like.
fn overwrite_ratio(o: &OverwriteRun, r: f64, blobdb_space: Option<u64>) -> String {
    if !o.system.contains("/plp") {
        return format!("{r:.2}x (durable vs not durable)");
    }
    let mine = o.peak_footprint_bytes.unwrap_or(o.capacity_bytes);
    let verdict = if r >= OVERWRITE_VS_BLOBDB {
        "met"
    } else {
        "**not met**"
    };
    match blobdb_space {
        Some(b) if o.sized_like.is_some() => format!(
            "{r:.2}x (same durability, same keys and overwrites, {} MiB against BlobDB's {} \
             MiB; target >= {OVERWRITE_VS_BLOBDB}x: {verdict})",
            mine >> 20,
            b >> 20
        ),
        Some(b) if extras::held_more_space(b, mine) => format!(
            "{r:.2}x (same durability; BlobDB held {:.2}x this space: not the same fill, see \
             the same-space row)",
            b as f64 / mine.max(1) as f64
        ),
        _ => format!("{r:.2}x (same durability; target >= {OVERWRITE_VS_BLOBDB}x: {verdict})"),
    }
}

/// The extras' rows for `results.json`.
pub fn rows(x: &Extras) -> Vec<Row> {
    extras::rows(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(system: &str, mib: u64, ops: f64, space_mib: u64) -> OverwriteRun {
        OverwriteRun {
            system: system.into(),
            capacity_bytes: mib << 20,
            keys: 80_000,
            overwrites: 393_216,
            ops_per_sec: ops,
            final_wa: 1.5,
            peak_footprint_bytes: Some(space_mib << 20),
            ..OverwriteRun::default()
        }
    }

    #[test]
    fn the_throughput_target_is_judged_in_the_same_space() {
        let mut same = run(extras::SAME_SPACE_SYSTEM, 2200, 66_000.0, 2260);
        same.sized_like = Some("rocksdb-blobdb/no-wal".into());
        let x = Extras {
            overwrite: vec![
                run("lightstore-local", 1024, 18_000.0, 1056),
                run("lightstore-local/plp", 1024, 27_000.0, 1056),
                run("rocksdb-blobdb/no-wal", 0, 60_000.0, 2309),
                same,
            ],
            overwrite_device_mib: 1024,
            ..Extras::default()
        };
        let md = markdown(&x, false);
        let line = |sys: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| {sys} |")))
                .unwrap_or_else(|| panic!("no row of {sys} in\n{md}"))
                .to_string()
        };
        let plp = line("lightstore-local/plp");
        assert!(
            plp.contains("0.45x") && plp.contains("BlobDB held 2.19x this space"),
            "{plp}"
        );
        assert!(!plp.contains("not met"), "{plp}");
        let same = line(extras::SAME_SPACE_SYSTEM);
        assert!(
            same.contains("1.10x") && same.contains("**not met**"),
            "{same}"
        );
        assert!(
            same.contains("2260 MiB against BlobDB's 2309 MiB"),
            "{same}"
        );
        assert!(line("lightstore-local").contains("durable vs not durable"));

        // BlobDB within the device's space: the configured device's plp row is judged.
        let mut x = x;
        x.overwrite[2].peak_footprint_bytes = Some(1000 << 20);
        x.overwrite.pop();
        let md = markdown(&x, false);
        let plp = md
            .lines()
            .find(|l| l.starts_with("| lightstore-local/plp |"))
            .unwrap_or_default();
        assert!(
            plp.contains("0.45x (same durability; target >= 1.5x: **not met**)"),
            "{plp}"
        );
    }
}
