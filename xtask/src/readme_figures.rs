//! The benchmark figures the README and docs/ quote against the committed results they
//! cite: each figure quoted from a `benches/results/<run>/` folder is recomputed from that
//! run's JSON, rounded as the text writes it, and must appear in README.md or a file of
//! docs/ verbatim. A re-run that changes a figure, or an edit of the text, that leaves them
//! disagreeing fails the test
//! (issue 18: "README's numbers come from the latest report, a check fails if they
//! disagree").

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::Value;

    fn root() -> PathBuf {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        here.parent().unwrap_or(here).to_path_buf()
    }

    fn json(rel: &str) -> Value {
        let path = root().join(rel);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn num(v: &Value, key: &str) -> f64 {
        v.get(key)
            .and_then(Value::as_f64)
            .unwrap_or_else(|| panic!("no number `{key}` in {v}"))
    }

    /// The first row of `rows` whose string fields match `want`.
    fn row<'a>(rows: &'a Value, want: &[(&str, &str)]) -> &'a Value {
        rows.as_array()
            .and_then(|a| {
                a.iter().find(|r| {
                    want.iter()
                        .all(|(k, v)| r.get(*k).and_then(Value::as_str) == Some(*v))
                })
            })
            .unwrap_or_else(|| panic!("no row {want:?}"))
    }

    /// `n` with a thousands separator, as the README writes counts.
    fn thousands(n: f64) -> String {
        let s = format!("{:.0}", n);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    }

    #[test]
    fn readme_figures_match_the_committed_results() {
        let mut readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
        let mut docs: Vec<_> = std::fs::read_dir(root().join("docs"))
            .expect("docs/")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        for d in docs {
            readme.push_str(&std::fs::read_to_string(&d).expect("a doc"));
        }
        let mut wanted: Vec<String> = Vec::new();

        // Expiry.
        let e = json("benches/results/expiry-2026-11-28/results.json");
        wanted.push(format!(
            "`benches/results/expiry-2026-11-28`: {:.1} B per SET EX, {} B while {} keys expired, \
             all {} expired entries dropped, FLUSHALL of {:.1}M keys in {:.3} s writing {} KiB",
            num(&e, "bytes_per_expiring_set"),
            num(&e, "expiry_device_bytes"),
            thousands(num(&e, "expiring_keys")),
            thousands(num(&e, "expired_entries_dropped")),
            num(&e, "flushall_keys") / 1e6,
            num(&e, "flushall_s"),
            num(&e, "flushall_device_bytes") / 1024.0,
        ));

        // Small values.
        let s = json("benches/results/small-values-2026-11-28/results.json");
        let get = |drive: &str| row(&s, &[("drive", drive), ("workload", "GET 32 B")]);
        wanted.push(format!(
            "`benches/results/small-values-2026-11-28`: {:.0}K against {:.0}K GET/s, {:.0} against \
             {:.2} page reads per GET",
            num(get("held"), "rps") / 1e3,
            num(get("not-held"), "rps") / 1e3,
            num(get("held"), "page_reads_per_request"),
            num(get("not-held"), "page_reads_per_request"),
        ));

        // Recovery, 2 GiB.
        let r = json("benches/results/recovery-2026-11-28/recovery.json");
        let at = |stop: &str| {
            r.as_array()
                .and_then(|a| {
                    a.iter().find(|x| {
                        x.get("stop").and_then(Value::as_str) == Some(stop)
                            && x.get("data_mib").and_then(Value::as_u64) == Some(2048)
                    })
                })
                .unwrap_or_else(|| panic!("no 2 GiB row after {stop}"))
        };
        wanted.push(format!(
            "`benches/results/recovery-2026-11-28`: {:.2} s after `kill -9` and {:.2} s after a \
             clean stop with {:.1} GiB live",
            num(at("kill -9"), "ready_s"),
            num(at("clean"), "ready_s"),
            num(at("kill -9"), "live_mib") / 1024.0,
        ));

        // Writer scaling: four writers over one, R-SET 8 KiB.
        let scale = |file: &str, system: &str| {
            let l = json(&format!("benches/results/local-2026-11-30/{file}"));
            let ops = |w: &str| {
                num(
                    row(&l, &[("system", system), ("workload", w)]),
                    "ops_per_sec",
                )
            };
            ops("R-SET-8K") / ops("R-SET-1writer-8K")
        };
        wanted.push(format!(
            "Writer scaling in `benches/results/local-2026-11-30`: durable {:.2}x (paper-card)\n\
             and {:.2}x (file) four writers over one (target 1.5x: met); plp {:.2}x and {:.2}x",
            scale("durable.json", "lightstore-local/paper-card"),
            scale("durable.json", "lightstore-local/file"),
            scale("plp.json", "lightstore-local-plp/paper-card"),
            scale("plp.json", "lightstore-local-plp/file"),
        ));

        // Cluster scaling.
        let c = json("benches/results/cluster-2026-11-28/cluster-quick.json");
        let ratio = |sys: &str, w: &str| {
            num(
                row(&c, &[("system", sys), ("workload", w)]),
                "ratio_to_one_drive",
            )
        };
        wanted.push(format!(
            "SET {:.2}x with 2 drives and {:.2}x with 4; GET\n  {:.2}x with 2 and {:.2}x with 4",
            ratio("lightstore-cluster/2", "SET"),
            ratio("lightstore-cluster/4", "SET"),
            ratio("lightstore-cluster/2", "GET"),
            ratio("lightstore-cluster/4", "GET"),
        ));

        // The latest full report's verdicts at 8 KiB (its median rows).
        let full = "benches/results/full-2026-12-02-85fdce1-epyc";
        let f = json(&format!("{full}/results.json"));
        let at = |system: &str, workload: &str, size: u64| {
            f.as_array()
                .and_then(|a| {
                    a.iter().find(|r| {
                        r.get("system").and_then(Value::as_str) == Some(system)
                            && r.get("workload").and_then(Value::as_str) == Some(workload)
                            && r.get("value_size").and_then(Value::as_u64) == Some(size)
                    })
                })
                .unwrap_or_else(|| panic!("no row {system} {workload} {size} in {full}"))
        };
        let plp = "lightstore-local/plp";
        let device = |w: &str| num(at(plp, w, 8192), "ratio_to_device");
        let over = |a: (&str, &str, u64), b: (&str, &str, u64)| {
            num(at(a.0, a.1, a.2), "ops_per_sec") / num(at(b.0, b.1, b.2), "ops_per_sec")
        };
        let no_wal = |size| {
            over(
                (plp, "R-SET", size),
                ("rocksdb-leveled/no-wal", "R-SET", size),
            )
        };
        wanted.push(format!(
            "`{full}`, 8 KiB: plp S-SET {:.2}x the device, plp R-SET {:.2}x at WA {:.2}, S-GET \
             {:.2}x, R-GET {:.2}x; durable R-SET {:.2}x RocksDB with a synced WAL; plp R-SET \
             {:.2}x, {:.2}x and {:.2}x RocksDB without a WAL at 8 KiB, 1 KiB and 100 B",
            device("S-SET"),
            device("R-SET"),
            num(at(plp, "R-SET", 8192), "write_amp"),
            device("S-GET"),
            device("R-GET"),
            over(
                ("lightstore-local", "R-SET", 8192),
                ("rocksdb-leveled/wal-sync", "R-SET", 8192)
            ),
            no_wal(8192),
            no_wal(1024),
            no_wal(100),
        ));

        // Its sustained overwrite: LightStore plp over BlobDB (no WAL) at the 1 GiB device
        // and in the space BlobDB held.
        let ow = |system: &str| {
            num(
                at(&format!("overwrite/{system}"), "overwrite-8K", 8192),
                "ops_per_sec",
            )
        };
        let blobdb = ow("rocksdb-blobdb/no-wal");
        wanted.push(format!(
            "`{full}`'s sustained overwrite: plp {:.2}x BlobDB without a WAL at 1 GiB, {:.2}x \
             in the space BlobDB held",
            ow(plp) / blobdb,
            ow("lightstore-local/plp@blobdb-space") / blobdb,
        ));

        let missing: Vec<&String> = wanted
            .iter()
            .filter(|w| !readme.contains(w.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "README.md and docs/ disagree with the committed results; they should say:\n{}",
            missing
                .iter()
                .map(|m| format!("  {m}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(123585.0), "123,585");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_000_000.0), "1,000,000");
    }
}
