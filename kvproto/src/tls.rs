//! TLS for [`crate::Client`]: the drive's `tls-port` speaks TLS 1.2/1.3 (rustls); a client
//! trusts the CA that signed the drive's certificate and, when the drive asks for client
//! certificates (`tls-auth-clients`), presents its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// Why TLS settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsClientError {
    /// A PEM file is missing, unreadable or holds nothing usable.
    #[error("{what} {path}: {why}")]
    Pem {
        /// Which setting named the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A client certificate without its key, or the other way round.
    #[error("a client certificate needs both --tls-cert-file and --tls-key-file")]
    HalfIdentity,
    /// rustls refused the settings.
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
}

/// TLS settings of a client: the CA it trusts and, optionally, its own certificate.
#[derive(Clone)]
pub struct TlsClient {
    pub(crate) config: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient").finish_non_exhaustive()
    }
}

fn pem_error(what: &'static str, path: &Path, why: impl ToString) -> TlsClientError {
    TlsClientError::Pem {
        what,
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// The certificates of a PEM file (the drive's and the clients' loaders share it).
///
/// # Errors
/// The file cannot be read, is not PEM, or holds no CERTIFICATE section (the reason as
/// text).
pub fn pem_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no CERTIFICATE section".into());
    }
    Ok(certs)
}

fn read_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsClientError> {
    pem_certificates(path).map_err(|e| pem_error(what, path, e))
}

impl TlsClient {
    /// Trusts the CA certificates in `ca_file` (PEM); with `identity` (certificate chain and
    /// private key, PEM), presents that certificate when the server asks for one.
    ///
    /// # Errors
    /// [`TlsClientError`]: a file missing or not PEM, or a key rustls refuses.
    pub fn from_files(
        ca_file: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> Result<TlsClient, TlsClientError> {
        let mut roots = RootCertStore::empty();
        for cert in read_certs("tls-ca-cert-file", ca_file)? {
            roots
                .add(cert)
                .map_err(|e| pem_error("tls-ca-cert-file", ca_file, e))?;
        }
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert_file, key_file)) => {
                let chain = read_certs("tls-cert-file", cert_file)?;
                let key = PrivateKeyDer::from_pem_file(key_file)
                    .map_err(|e| pem_error("tls-key-file", key_file, e))?;
                builder.with_client_auth_cert(chain, key)?
            }
        };
        Ok(TlsClient {
            config: Arc::new(config),
        })
    }

    /// [`TlsClient::from_files`] from the optional flags adapters take: `None` without a
    /// CA file.
    ///
    /// # Errors
    /// As [`TlsClient::from_files`]; [`TlsClientError::HalfIdentity`] for a certificate
    /// without a key or a key without a certificate.
    pub fn from_flags(
        ca_file: Option<&Path>,
        cert_file: Option<&Path>,
        key_file: Option<&Path>,
    ) -> Result<Option<TlsClient>, TlsClientError> {
        let identity = match (cert_file, key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err(TlsClientError::HalfIdentity),
        };
        match ca_file {
            Some(ca) => TlsClient::from_files(ca, identity).map(Some),
            None if identity.is_some() => Err(pem_error(
                "tls-ca-cert-file",
                Path::new(""),
                "a client certificate is sent over TLS: give the CA that signed the drive's",
            )),
            None => Ok(None),
        }
    }
}
