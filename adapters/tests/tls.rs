//! The adapters over TLS: a drive that serves TLS only (plain TCP off), requires client
//! certificates and a password; the router, `lightstore-nbd volume` and `lightstore-nbd
//! serve` reach it with the CA, a client certificate and the password, and fail clearly
//! without them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use adapters::routing::{Router, RouterConfig};
use bytes::Bytes;
use common::{nbd_cli, tools, Drive, Nbd};
use kvproto::{Credentials, TlsClient};
use lightstore_testkit::pki::{free_port, make_pki, Pki};

const PASSWORD: &str = "tls and a password";

/// A drive serving TLS only on a free port, requiring client certificates and `PASSWORD`.
fn tls_drive(dir: &std::path::Path, pki: &Pki) -> Drive {
    let mut flags = pki.server_flags(free_port());
    flags.extend(
        [
            "--port",
            "0",
            "--tls-auth-clients",
            "yes",
            "--requirepass",
            PASSWORD,
        ]
        .map(String::from),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Drive::start(&dir.join("data"), &flags)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_router_talks_tls_with_a_client_certificate_and_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let drive = tls_drive(dir.path(), &pki);
    let tls = TlsClient::from_files(&pki.ca, Some((&pki.client_cert, &pki.client_key))).unwrap();
    let auth = Some(Credentials {
        user: None,
        password: PASSWORD.into(),
    });
    let cfg = |tls: Option<TlsClient>, auth: Option<Credentials>| RouterConfig {
        timeout: Duration::from_secs(10),
        tls,
        auth,
        ..RouterConfig::default()
    };
    let rt = rt();
    let router = Router::single(drive.addr, cfg(Some(tls.clone()), auth.clone())).unwrap();
    let pairs: Vec<(Bytes, Bytes)> = (0..200)
        .map(|i| (Bytes::from(format!("k{i}")), Bytes::from(format!("v{i}"))))
        .collect();
    rt.block_on(router.mset(&pairs)).unwrap();
    let keys: Vec<Bytes> = pairs.iter().map(|p| p.0.clone()).collect();
    let got = rt.block_on(router.mget(&keys)).unwrap();
    assert!(got
        .iter()
        .zip(&pairs)
        .all(|(g, p)| g.as_ref() == Some(&p.1)));
    // Without a client certificate, without TLS, or without the password: a clear error.
    let no_cert = TlsClient::from_files(&pki.ca, None).unwrap();
    for (what, cfg) in [
        ("no client certificate", cfg(Some(no_cert), auth.clone())),
        ("plain TCP to the TLS port", cfg(None, auth.clone())),
        ("no password", cfg(Some(tls.clone()), None)),
    ] {
        let r = Router::single(drive.addr, cfg).unwrap();
        let err = rt.block_on(r.get(b"k1"));
        assert!(err.is_err(), "{what}: {err:?}");
    }
    // A CA that did not sign the drive's certificate: the handshake fails.
    let other = tempfile::tempdir().unwrap();
    let stranger = make_pki(other.path());
    let wrong_ca =
        TlsClient::from_files(&stranger.ca, Some((&pki.client_cert, &pki.client_key))).unwrap();
    let r = Router::single(drive.addr, cfg(Some(wrong_ca), auth)).unwrap();
    let err = rt.block_on(r.get(b"k1")).unwrap_err().to_string();
    assert!(
        err.contains("certificate") || err.contains("Unknown"),
        "{err}"
    );
}

#[test]
fn the_block_adapter_serves_a_volume_from_a_tls_drive() {
    if !tools(
        "the_block_adapter_serves_a_volume_from_a_tls_drive",
        &[("nbdcopy", "libnbd-bin"), ("nbdinfo", "libnbd-bin")],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let drive = tls_drive(dir.path(), &pki);
    let pw = dir.path().join("password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let addr = drive.addr.to_string();
    let access = [
        "--drive",
        addr.as_str(),
        "--password-file",
        pw.to_str().unwrap(),
        "--tls-ca-cert-file",
        pki.ca.to_str().unwrap(),
        "--tls-cert-file",
        pki.client_cert.to_str().unwrap(),
        "--tls-key-file",
        pki.client_key.to_str().unwrap(),
    ];
    let mut create = vec!["volume", "create", "disk0", "--size", "4MiB"];
    create.extend_from_slice(&access);
    let out = nbd_cli(&create);
    assert!(out.status.success(), "{out:?}");
    // Without TLS the same command fails, saying so.
    let out = nbd_cli(&[
        "volume",
        "list",
        "--drive",
        &addr,
        "--password-file",
        pw.to_str().unwrap(),
    ]);
    assert!(
        !out.status.success(),
        "plain TCP to a TLS-only drive: {out:?}"
    );
    let mut serve = vec!["serve".to_string()];
    serve.extend(access.iter().map(|a| (*a).to_string()));
    let nbd = Nbd::start(&serve);
    let data: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
    let src = dir.path().join("src.img");
    std::fs::write(&src, &data).unwrap();
    let uri = nbd.uri("disk0");
    common::run(std::process::Command::new("nbdcopy").arg(&src).arg(&uri));
    let back = dir.path().join("back.img");
    common::run(std::process::Command::new("nbdcopy").arg(&uri).arg(&back));
    assert_eq!(std::fs::read(&back).unwrap(), data, "the volume reads back");
}
