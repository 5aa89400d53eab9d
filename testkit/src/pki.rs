//! A throwaway PKI for TLS tests (rcgen): a CA, a server certificate for `localhost` and
//! `127.0.0.1`, and a client certificate, as PEM files.

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// PEM files of a test PKI.
pub struct Pki {
    /// The CA certificate (clients trust it; the drive checks client certificates with it).
    pub ca: PathBuf,
    /// The server's certificate, for `localhost` and `127.0.0.1`.
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
    /// A client certificate the CA signed.
    pub client_cert: PathBuf,
    /// Its private key.
    pub client_key: PathBuf,
}

impl Pki {
    /// The drive's flags for a TLS port on `tls_port` with this PKI's server certificate,
    /// checking client certificates against its CA.
    pub fn server_flags(&self, tls_port: u16) -> Vec<String> {
        let path = |p: &Path| p.to_str().unwrap().to_string();
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(&self.server_cert),
            "--tls-key-file".into(),
            path(&self.server_key),
            "--tls-ca-cert-file".into(),
            path(&self.ca),
        ]
    }
}

/// Writes a fresh PKI into `dir`.
pub fn make_pki(dir: &Path) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "lightstore test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();

    let server_key = KeyPair::generate().unwrap();
    let mut sp = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    sp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server = sp.signed_by(&server_key, &ca, &ca_key).unwrap();

    let client_key = KeyPair::generate().unwrap();
    let mut cp = CertificateParams::new(vec!["client".into()]).unwrap();
    cp.distinguished_name.push(DnType::CommonName, "client");
    cp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client = cp.signed_by(&client_key, &ca, &ca_key).unwrap();

    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    Pki {
        ca: write("ca.pem", ca.pem()),
        server_cert: write("server.pem", server.pem()),
        server_key: write("server.key", server_key.serialize_pem()),
        client_cert: write("client.pem", client.pem()),
        client_key: write("client.key", client_key.serialize_pem()),
    }
}

/// A free loopback port (bound, then released for a server to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
