//! `cargo xtask ycsb --hosts ...`: YCSB against servers that are already running, as a user
//! runs it against a deployment: one load, then the run phase of each workload in turn.
//!
//! Nothing is started, stopped or flushed. The records of the load stay for every workload
//! (YCSB's own advice is to load once and run A, B, C, F and D on the same data; D and E
//! insert records past the loaded ones, which later workloads may read).

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{bail, Context};

use super::report::{print_table, WorkloadResult};
use super::{
    binding_name, build_binding, default_operations, parse_workloads, repo_root, target_dir,
    ycsb_phase, BindingKind, Drives, Phase, RunSpec, Target, YcsbArgs,
};

/// How long a server may take to answer the PING that checks it is there.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Parses `host:port,host:port,...` (names are resolved; the first address of each is used).
fn parse_hosts(spec: &str) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out = Vec::new();
    for h in spec.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let addr = h
            .to_socket_addrs()
            .with_context(|| format!("--hosts: `{h}` is not host:port"))?
            .next()
            .with_context(|| format!("--hosts: `{h}` resolves to no address"))?;
        out.push(addr);
    }
    if out.is_empty() {
        bail!("--hosts: no server given (host:port,host:port,...)");
    }
    Ok(out)
}

/// The first line of `path` (a password file), without its line end.
fn read_password(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the password file {}", path.display()))?;
    let pw = text.lines().next().unwrap_or_default().to_string();
    if pw.is_empty() {
        bail!("the password file {} is empty", path.display());
    }
    Ok(pw)
}

/// Checks that `addr` answers PING (after AUTH with `password`), with a clear error if not.
fn ping(addr: SocketAddr, password: Option<&str>) -> anyhow::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, PING_TIMEOUT)
        .with_context(|| format!("{addr} is not reachable"))?;
    s.set_read_timeout(Some(PING_TIMEOUT))?;
    let mut req = Vec::new();
    if let Some(pw) = password {
        req.extend_from_slice(format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{pw}\r\n", pw.len()).as_bytes());
    }
    req.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    s.write_all(&req)?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    if password.is_some() {
        r.read_line(&mut line)?;
        if line.trim_end() != "+OK" {
            bail!("{addr} refused AUTH: {}", line.trim_end());
        }
        line.clear();
    }
    r.read_line(&mut line)?;
    if line.trim_end() != "+PONG" {
        bail!(
            "{addr} answered PING with `{}` (a password is given with --password-file)",
            line.trim_end()
        );
    }
    Ok(())
}

/// Runs `args`' workloads against `args.hosts`.
pub(super) fn run(args: &YcsbArgs) -> anyhow::Result<()> {
    let spec = args.hosts.as_deref().unwrap_or_default();
    let addrs = parse_hosts(spec)?;
    let workloads = parse_workloads(&args.workload)?;
    if args.threads == 0 || args.records == 0 {
        bail!("--threads and --records must be at least 1");
    }
    if args.against != "drive" {
        bail!("--hosts runs against the servers given: leave --against out");
    }
    let binding = match args.binding.as_str() {
        "lightstore" => BindingKind::LightStore,
        "redis" => BindingKind::Redis,
        other => bail!("--binding `{other}`: use lightstore or redis"),
    };
    if binding == BindingKind::Redis && addrs.len() > 1 {
        bail!("--binding redis talks to one server: give one host");
    }
    let password = match &args.password_file {
        Some(path) => Some(read_password(path)?),
        None => None,
    };
    let check_with = password.clone().or_else(|| {
        std::env::var("LIGHTSTORE_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty())
    });
    let mut tls_properties = Vec::new();
    if let Some(ca) = &args.tls_ca_cert_file {
        if binding != BindingKind::LightStore {
            bail!("TLS is for --binding lightstore (the stock redis binding has no TLS setting)");
        }
        tls_properties.push(format!("lightstore.tls.ca={}", ca.display()));
        if let (Some(c), Some(k)) = (&args.tls_cert_file, &args.tls_key_file) {
            tls_properties.push(format!("lightstore.tls.cert={}", c.display()));
            tls_properties.push(format!("lightstore.tls.key={}", k.display()));
        }
    } else {
        // Over TLS the binding's own start-up PING is the check (this one speaks plain TCP).
        for &a in &addrs {
            ping(a, check_with.as_deref())?;
        }
    }
    let root = repo_root();
    let classes = build_binding(&root)?;
    let out_dir = target_dir(&root).join("ycsb");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let servers = Drives::running(addrs.clone());
    let spec_for = |workload: char| RunSpec {
        workload,
        drives: addrs.len(),
        records: args.records,
        operations: args
            .operations
            .unwrap_or_else(|| default_operations(workload)),
        threads: args.threads,
        binding,
        target: Target::Drive,
        drive_args: Vec::new(),
        password: password.clone(),
        tls_properties: tls_properties.clone(),
    };
    println!(
        "== YCSB ({} binding) against {} ({}): one load of {} records, then {} run(s), {} threads",
        binding_name(binding),
        servers.hosts(),
        if addrs.len() > 1 {
            "cluster"
        } else {
            "one server"
        },
        args.records,
        workloads.len(),
        args.threads
    );
    // The first workload's file describes the records (every core workload has the same).
    let first = workloads.first().copied().unwrap_or('a');
    let load = ycsb_phase(
        &root,
        &classes,
        &servers,
        &spec_for(first),
        Phase::Load,
        &out_dir,
    )?;
    let loaded = load.get("INSERT", "Return=OK").unwrap_or(0.0) as u64;
    let mut problems: Vec<String> = load
        .failures()
        .into_iter()
        .map(|f| format!("load: {f}"))
        .collect();
    if loaded != args.records {
        problems.push(format!(
            "load: YCSB completed {loaded} of {} inserts",
            args.records
        ));
    }
    let mut results = Vec::new();
    for (i, &w) in workloads.iter().enumerate() {
        let spec = spec_for(w);
        let run = ycsb_phase(&root, &classes, &servers, &spec, Phase::Run, &out_dir)?;
        let mut result = WorkloadResult {
            workload: w,
            load: if i == 0 {
                load.clone()
            } else {
                Default::default()
            },
            run,
            problems: Vec::new(),
            server_cpu_s_per_mop: None,
            server_peak_rss_mb: None,
        };
        for f in result.run.failures() {
            result.problems.push(format!("workload {w} run: {f}"));
        }
        let done = result.run.operations_ok();
        if done != spec.operations {
            result.problems.push(format!(
                "workload {w} run: YCSB completed {done} of {} operations",
                spec.operations
            ));
        }
        results.push(result);
    }
    print_table(&results, addrs.len());
    problems.extend(results.iter().flat_map(|r| r.problems.iter().cloned()));
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("xtask: {p}");
        }
        bail!(
            "{} YCSB problem(s) against {} (outputs in {})",
            problems.len(),
            servers.hosts(),
            out_dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_and_resolve() {
        let a = parse_hosts("127.0.0.1:7001, localhost:7002").unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].port(), 7001);
        assert_eq!(a[1].port(), 7002);
        assert!(parse_hosts("").is_err());
        assert!(parse_hosts("127.0.0.1").is_err());
    }
}
