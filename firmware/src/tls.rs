//! TLS settings: the server certificate and key, the CA that signs client certificates and
//! whether clients must present one (`tls-auth-clients`), turned into a `rustls` server
//! configuration at start (ring as the crypto provider; TLS 1.2 and 1.3).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// Whether TLS clients must present a certificate signed by the CA (Redis's
/// `tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    No,
    /// A certificate is asked for; a client without one is accepted, one with a bad one is
    /// refused.
    Optional,
    /// A certificate signed by the CA is required.
    Yes,
}

impl ClientAuth {
    /// Parses `no`, `optional` or `yes`.
    ///
    /// # Errors
    /// Any other word.
    pub fn parse(s: &str) -> Result<ClientAuth, TlsError> {
        match s {
            "no" => Ok(ClientAuth::No),
            "optional" => Ok(ClientAuth::Optional),
            "yes" => Ok(ClientAuth::Yes),
            other => Err(TlsError::ClientAuth(other.to_string())),
        }
    }

    /// The word CONFIG GET reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::No => "no",
            ClientAuth::Optional => "optional",
            ClientAuth::Yes => "yes",
        }
    }
}

/// The TLS settings of a drive.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// Server certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Server private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// CA certificates that sign client certificates (PEM).
    pub ca_cert_file: Option<PathBuf>,
    /// Client certificates.
    pub auth_clients: ClientAuth,
}

/// A TLS setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {why}")]
    Pem {
        /// Which setting.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A bad `tls-auth-clients` word.
    #[error("tls-auth-clients `{0}`: use no, optional or yes")]
    ClientAuth(String),
    /// Client certificates asked for without a CA to check them.
    #[error("tls-auth-clients {0} needs tls-ca-cert-file (the CA that signs client certificates)")]
    NoCa(&'static str),
    /// A TLS port without a certificate or key.
    #[error("tls-port needs tls-cert-file and tls-key-file")]
    MissingCert,
    /// rustls refused the certificate, key or CA.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built from the CA.
    #[error("TLS client verifier from {path}: {why}")]
    Verifier {
        /// The CA file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

fn pem_error(what: &'static str, path: &Path, why: impl ToString) -> TlsError {
    TlsError::Pem {
        what,
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    kvproto::tls::pem_certificates(path).map_err(|e| pem_error(what, path, e))
}

/// Builds the rustls server configuration.
///
/// # Errors
/// Unreadable or unusable files, or client certificates asked for without a CA.
pub fn server_config(s: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certs("tls-cert-file", &s.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&s.key_file)
        .map_err(|e| pem_error("tls-key-file", &s.key_file, e))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match (s.auth_clients, &s.ca_cert_file) {
        (ClientAuth::No, _) => builder.with_no_client_auth(),
        (mode, None) => return Err(TlsError::NoCa(mode.as_str())),
        (mode, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for c in read_certs("tls-ca-cert-file", ca)? {
                roots.add(c)?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if mode == ClientAuth::Optional {
                v.allow_unauthenticated()
            } else {
                v
            };
            let verifier = v.build().map_err(|e| TlsError::Verifier {
                path: ca.clone(),
                why: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    Ok(Arc::new(builder.with_single_cert(certs, key)?))
}
