//! TLS on the real binary: a CA, a server certificate and a client certificate are made at
//! test time (rcgen), the drive serves a TLS port beside the plain one, and clients talk to it:
//! `redis-cli --tls` (redis-tools; `cargo xtask test` installs it, a missing or TLS-less
//! redis-cli is recorded as a tool skip, which fails that run) and redis-rs over rustls.
//! Client certificates: required by default when a CA is given (a client without one is
//! refused), accepted without one under `--tls-auth-clients optional`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{have_tool, record_skip, Drive};
use lightstore_testkit::pki::{free_port, make_pki, Pki};

/// Starts a drive with a TLS port (and the plain port `plain`: 0 turns it off); returns the
/// drive and its TLS port.
fn start(dir: &Path, pki: &Pki, plain: u16, extra: &[&str]) -> (Drive, u16) {
    let tls_port = free_port();
    let mut flags = pki.server_flags(tls_port);
    flags.extend(["--port".to_string(), plain.to_string()]);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    (Drive::start(&dir.join("data"), &args), tls_port)
}

fn tls_client(port: u16, pki: &Pki, with_cert: bool) -> redis::RedisResult<redis::Connection> {
    let certs = redis::TlsCertificates {
        client_tls: with_cert.then(|| redis::ClientTlsConfig {
            client_cert: std::fs::read(&pki.client_cert).unwrap(),
            client_key: std::fs::read(&pki.client_key).unwrap(),
        }),
        root_cert: Some(std::fs::read(&pki.ca).unwrap()),
    };
    let client = redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}/"), certs)?;
    let mut c = client.get_connection()?;
    // The handshake completes on the first exchange.
    redis::cmd("PING").query::<String>(&mut c)?;
    Ok(c)
}

/// Runs redis-cli against the TLS port; `None` when redis-cli is missing or has no TLS.
fn redis_cli(port: u16, pki: &Pki, with_cert: bool, cmd: &[&str]) -> Option<(bool, String)> {
    if !have_tool("redis-cli") {
        return None;
    }
    let probe = Command::new("redis-cli")
        .args(["--tls", "--version"])
        .output()
        .ok()?;
    if !probe.status.success() {
        record_skip(
            "tool",
            "redis-cli --tls",
            "this redis-cli is built without TLS",
        );
        return None;
    }
    let mut c = Command::new("redis-cli");
    c.args(["--tls", "-h", "127.0.0.1", "-p", &port.to_string()])
        .arg("--cacert")
        .arg(&pki.ca);
    if with_cert {
        c.arg("--cert").arg(&pki.client_cert);
        c.arg("--key").arg(&pki.client_key);
    }
    let out = c.args(cmd).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), text))
}

#[test]
fn tls_serves_redis_cli_and_redis_rs_beside_plain_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let (drive, tls_port) = start(dir.path(), &pki, free_port(), &[]);

    // redis-cli --tls with a client certificate (required by default with a CA).
    if let Some((ok, out)) = redis_cli(tls_port, &pki, true, &["SET", "cli", "hello"]) {
        assert!(ok && out.contains("OK"), "redis-cli --tls SET: {out}");
        let (_, out) = redis_cli(tls_port, &pki, true, &["GET", "cli"]).unwrap();
        assert!(out.contains("hello"), "redis-cli --tls GET: {out}");
        let (_, out) = redis_cli(tls_port, &pki, false, &["PING"]).unwrap();
        assert!(
            !out.contains("PONG"),
            "no client certificate must be refused: {out}"
        );
    }

    // redis-rs over rustls: small and large values (the large ones span many TLS records and
    // socket writes), a pipeline.
    let mut c = tls_client(tls_port, &pki, true).unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query::<()>(&mut c)
        .unwrap();
    let back: Vec<u8> = redis::cmd("GET").arg("big").query(&mut c).unwrap();
    assert!(back == big, "a 3 MB value comes back whole over TLS");
    let mut p = redis::pipe();
    for i in 0..2000 {
        p.cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("v{i}"))
            .ignore();
    }
    for i in 0..2000 {
        p.cmd("GET").arg(format!("k{i}"));
    }
    let got: Vec<String> = p.query(&mut c).unwrap();
    assert_eq!(got.len(), 2000);
    assert!(got.iter().enumerate().all(|(i, v)| *v == format!("v{i}")));

    // Without a client certificate the handshake is refused.
    assert!(
        tls_client(tls_port, &pki, false).is_err(),
        "a client without a certificate must be refused"
    );

    // The plain port serves the same data.
    let mut plain = drive.conn();
    let v: String = redis::cmd("GET").arg("k7").query(&mut plain).unwrap();
    assert_eq!(v, "v7");
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-auth-clients")
        .query(&mut plain)
        .unwrap();
    assert_eq!(cfg, ["tls-auth-clients", "yes"]);
}

#[test]
fn optional_client_certificates_and_tls_only() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    // Port 0 beside a TLS port: no plain TCP; the ready line names the TLS address.
    let (drive, tls_port) = start(
        dir.path(),
        &pki,
        0,
        &["--tls-auth-clients", "optional", "--requirepass", "pw"],
    );
    assert_eq!(drive.addr.port(), tls_port);
    let e = tls_client(tls_port, &pki, false)
        .err()
        .map(|e| e.to_string());
    // PING before AUTH is refused with NOAUTH: the session itself was accepted.
    assert!(
        e.as_deref().is_some_and(|e| e.contains("NOAUTH")),
        "without a certificate, optional mode accepts the session: {e:?}"
    );
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(std::fs::read(&pki.ca).unwrap()),
    };
    let client =
        redis::Client::build_with_tls(format!("rediss://:pw@127.0.0.1:{tls_port}/"), certs)
            .unwrap();
    let mut conn = client.get_connection().unwrap();
    redis::cmd("SET")
        .arg("a")
        .arg("b")
        .query::<()>(&mut conn)
        .unwrap();
    let v: String = redis::cmd("GET").arg("a").query(&mut conn).unwrap();
    assert_eq!(v, "b");
    if let Some((ok, out)) = redis_cli(
        tls_port,
        &pki,
        false,
        &["-a", "pw", "--no-auth-warning", "GET", "a"],
    ) {
        assert!(
            ok && out.contains('b'),
            "redis-cli --tls without a certificate: {out}"
        );
    }
}

#[test]
fn tls_settings_are_checked_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lightstore"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--capacity", common::TEST_CAPACITY, "--port", "0"])
            .args(args)
            .output()
            .unwrap()
    };
    let port = free_port().to_string();
    let out = run(&["--tls-port", &port]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tls-cert-file"));
    let out = run(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        pki.server_cert.to_str().unwrap(),
        "--tls-key-file",
        pki.server_key.to_str().unwrap(),
        "--tls-auth-clients",
        "yes",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tls-ca-cert-file"),
        "client certificates without a CA are refused at start"
    );
}
