//! Tests of the parent module.

use super::*;

#[test]
fn workload_specs() {
    assert_eq!(parse_workloads("a").unwrap(), vec!['a']);
    assert_eq!(parse_workloads("E").unwrap(), vec!['e']);
    assert_eq!(parse_workloads("workloadc").unwrap(), vec!['c']);
    assert_eq!(parse_workloads("a..f").unwrap(), WORKLOADS.to_vec());
    assert_eq!(parse_workloads("all").unwrap(), WORKLOADS.to_vec());
    assert_eq!(parse_workloads("a,c..d").unwrap(), vec!['a', 'c', 'd']);
    assert!(parse_workloads("g").is_err());
    assert!(parse_workloads("f..a").is_err());
    assert!(parse_workloads("").is_err());
}

#[test]
fn summary_lines() {
    let out = "Loading workload...\n\
               [OVERALL], RunTime(ms), 3059\n\
               [OVERALL], Throughput(ops/sec), 3269.04\n\
               [TOTAL_GCS_G1_Young_Generation], Count, 3\n\
               [READ], Operations, 60\n\
               [READ], AverageLatency(us), 833.3\n\
               [READ], Return=OK, 60\n\
               [READ-MODIFY-WRITE], Operations, 10\n\
               [UPDATE], Return=OK, 10\n\
               [INSERT], Return=OK, 5\n\
               [CLEANUP], Operations, 4\n\
               [VERIFY], Return=OK, 60\n";
    let s = Summary::parse(out);
    assert_eq!(s.throughput(), Some(3269.04));
    assert_eq!(s.get("READ", "AverageLatency(us)"), Some(833.3));
    assert_eq!(s.operations_ok(), 65);
    assert!(s.failures().is_empty());
    assert_eq!(s.printable().count(), 9);
    let bad = Summary::parse(
        "[VERIFY], Return=UNEXPECTED_STATE, 3\n[INSERT-FAILED], Operations, 2\n\
         [INSERT], Return=ERROR, 2\n",
    );
    assert_eq!(bad.failures().len(), 3);
}

#[test]
fn cluster_map_covers_every_slot_once() {
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|i| SocketAddr::from(([127, 0, 0, 1], 7000 + i)))
        .collect();
    let map = cluster_map(&addrs);
    assert!(map.contains("slots = [[0, 5460]]"));
    assert!(map.contains("slots = [[5461, 10921]]"));
    assert!(map.contains("slots = [[10922, 16383]]"));
    assert!(map.contains("addr = \"127.0.0.1:7002\""));
    assert_eq!(node_id(2).len(), 40);
    assert_ne!(node_id(1), node_id(2));
}

/// Runs the binding's JUnit suite, including `LiveDriveTest` against `hosts`.
fn java_tests_against(root: &Path, hosts: &str) -> anyhow::Result<()> {
    maven(root, &["test", &format!("-Dlightstore.it.hosts={hosts}")])
}

/// YCSB A-F through the binding on one drive and on a three-drive cluster, plus the
/// binding's own tests against both (CRUD and scans checked against a model).
/// End to end (issue: "YCSB A-F against 1 and 3 drives in the test suite at a small
/// record count"): the dev-profile drive and the Maven binding (Maven Central on the
/// first run), about two minutes on 2 cores once built. Skipped, with the reason printed,
/// only where Java or Maven is missing.
#[test]
fn ycsb_end_to_end() {
    if !have("java") || !have("mvn") {
        crate::record_skip("tool", "ycsb_end_to_end", "java or mvn is not installed");
        return;
    }
    let root = repo_root();
    let bin = build_drive(&root, false).unwrap();
    let binding = build_binding(&root).unwrap();
    let out_dir = target_dir(&root).join("ycsb");
    // Every workload runs even after one fails, so one run shows all that is wrong.
    let mut problems: Vec<String> = Vec::new();
    for drives in [1, 3] {
        {
            let tag = format!("javatest-{drives}drive");
            let d = Drives::start(&bin, drives, &[], &out_dir, &tag).unwrap();
            java_tests_against(&root, &d.hosts()).unwrap();
        }
        let mut results = Vec::new();
        for &w in WORKLOADS {
            let spec = RunSpec {
                workload: w,
                drives,
                records: 1_000,
                operations: 1_000,
                threads: 4,
                binding: BindingKind::LightStore,
                target: Target::Drive,
                drive_args: Vec::new(),
                password: None,
                tls_properties: Vec::new(),
            };
            let r = run_workload(&root, &bin, &binding, &spec).unwrap();
            let mut check = |ok: bool, what: String| {
                if !ok {
                    problems.push(format!("{drives} drive(s), workload {w}: {what}"));
                }
            };
            for p in &r.problems {
                check(false, p.clone());
            }
            let loaded = r.load.get("INSERT", "Return=OK");
            check(
                loaded == Some(1_000.0),
                format!("loaded {loaded:?} records"),
            );
            let done = r.run.operations_ok();
            check(done == 1_000, format!("{done} operations done"));
            let verified = r.run.get("VERIFY", "Return=OK").unwrap_or(0.0);
            let reads = r.run.get("READ", "Return=OK").unwrap_or(0.0);
            check(
                verified == reads,
                format!("{verified} of {reads} reads verified"),
            );
            let expect = match w {
                'a' | 'b' => &["READ", "UPDATE"][..],
                'c' => &["READ"],
                'd' => &["READ", "INSERT"],
                'e' => &["SCAN", "INSERT"],
                _ => &["READ", "READ-MODIFY-WRITE"],
            };
            for op in expect {
                let n = r.run.get(op, "Operations").unwrap_or(0.0);
                check(n > 0.0, format!("no {op} ran"));
            }
            // The tails and costs the report's tables carry.
            check(
                r.run.get(expect[0], "99.9PercentileLatency(us)").is_some(),
                format!("no p99.9 of {}", expect[0]),
            );
            check(
                r.server_cpu_s_per_mop.is_some(),
                "no server CPU per operation".into(),
            );
            check(
                r.server_peak_rss_mb.is_some_and(|mb| mb > 1.0),
                format!("server peak RSS {:?} MB", r.server_peak_rss_mb),
            );
            results.push(r);
        }
        print_table(&results, drives);
    }
    // The stock redis binding's commands, against the drive and against redis-server:
    // every operation OK and every read verified on both.
    for target in [Target::Drive, Target::RedisServer] {
        for w in ['a', 'e'] {
            let spec = RunSpec {
                workload: w,
                drives: 1,
                records: 1_000,
                operations: 1_000,
                threads: 4,
                binding: BindingKind::Redis,
                target,
                drive_args: Vec::new(),
                password: None,
                tls_properties: Vec::new(),
            };
            let r = run_workload(&root, &bin, &binding, &spec).unwrap();
            let who = format!("redis binding on {}, workload {w}", target.name());
            problems.extend(r.problems.iter().map(|p| format!("{who}: {p}")));
            let verified = r.run.get("VERIFY", "Return=OK").unwrap_or(0.0);
            let reads = r.run.get("READ", "Return=OK").unwrap_or(0.0)
                + r.run.get("SCAN", "Return=OK").unwrap_or(0.0);
            if r.run.operations_ok() != 1_000 || (w != 'e' && verified != reads) {
                problems.push(format!(
                    "{who}: {} operations done, {verified} of {reads} reads verified",
                    r.run.operations_ok()
                ));
            }
        }
    }
    // As a user runs it against a deployment: a drive already running that requires a
    // password, one load and several runs (`--hosts`, `--password-file`).
    {
        let d = Drives::start(
            &bin,
            1,
            &["--requirepass".to_string(), "ycsb pass".to_string()],
            &out_dir,
            "hosts",
        )
        .unwrap();
        let pw = out_dir.join("hosts-password");
        std::fs::write(&pw, "ycsb pass\n").unwrap();
        let args = hosts_args("a,c,d", 500, &d.hosts(), Some(pw.clone()));
        if let Err(e) = run(&args) {
            problems.push(format!("--hosts with a password: {e:#}"));
        }
        // Without the password it stops before running anything, saying why.
        let refused = run(&YcsbArgs {
            password_file: None,
            ..args
        });
        match refused {
            Err(e) if format!("{e:#}").contains("NOAUTH") => {}
            other => problems.push(format!("--hosts without the password: {other:?}")),
        }
    }
    // Over TLS: a drive serving TLS only, asking for client certificates and a password.
    {
        let pki_dir = out_dir.join("hosts-pki");
        std::fs::create_dir_all(&pki_dir).unwrap();
        let pki = lightstore_testkit::pki::make_pki(&pki_dir);
        let mut extra = pki.server_flags(lightstore_testkit::pki::free_port());
        extra.extend(["--tls-auth-clients", "yes", "--requirepass", "ycsb pass"].map(String::from));
        let d = Drives::start(&bin, 1, &extra, &out_dir, "hosts-tls").unwrap();
        let pw = out_dir.join("hosts-password");
        let args = YcsbArgs {
            operations: Some(300),
            tls_ca_cert_file: Some(pki.ca.clone()),
            tls_cert_file: Some(pki.client_cert.clone()),
            tls_key_file: Some(pki.client_key.clone()),
            ..hosts_args("a,e", 500, &d.hosts(), Some(pw))
        };
        if let Err(e) = run(&args) {
            problems.push(format!("--hosts over TLS with a client certificate: {e:#}"));
        }
        // Without the client certificate the drive refuses the handshake.
        let refused = run(&YcsbArgs {
            tls_cert_file: None,
            tls_key_file: None,
            ..args
        });
        if refused.is_ok() {
            problems.push("--hosts over TLS without a client certificate ran".into());
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `cargo xtask ycsb --hosts HOSTS --workload W --records R --operations R --threads 2`
/// through our binding, with a password file.
fn hosts_args(
    workload: &str,
    records: u64,
    hosts: &str,
    password_file: Option<std::path::PathBuf>,
) -> YcsbArgs {
    YcsbArgs {
        workload: workload.into(),
        drives: 1,
        records,
        operations: Some(records),
        repeat: 1,
        threads: 2,
        binding: "lightstore".into(),
        against: "drive".into(),
        durability: "sync".into(),
        value_cache_size: None,
        out: None,
        tag: None,
        hosts: Some(hosts.into()),
        password_file,
        tls_ca_cert_file: None,
        tls_cert_file: None,
        tls_key_file: None,
    }
}
