//! How the adapters' command lines reach drives that require a password or TLS: the flags
//! `lightstore-nbd` and `lightstore-cluster` share, resolved into the credentials and TLS
//! settings the router and the reshard tool use.

use std::path::PathBuf;

use kvproto::{Credentials, TlsClient};

/// Password and TLS flags (global on each subcommand).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AccessArgs {
    /// A file whose first line is the drives' password (sent with AUTH on every
    /// connection). Without it the password comes from the LIGHTSTORE_PASSWORD environment
    /// variable, then from --password.
    #[arg(long, global = true)]
    pub password_file: Option<PathBuf>,
    /// The drives' password (visible to other users in `ps`: prefer --password-file or
    /// LIGHTSTORE_PASSWORD).
    #[arg(long, global = true)]
    pub password: Option<String>,
    /// ACL user to AUTH as (default: the default user).
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Connect over TLS, trusting the CA certificates in this PEM file (the drives serve
    /// TLS on their `--tls-port`; their certificates must name the addresses used).
    #[arg(long, global = true)]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// This client's certificate chain (PEM), for drives that ask for client certificates.
    #[arg(long, global = true, requires_all = ["tls_key_file", "tls_ca_cert_file"])]
    pub tls_cert_file: Option<PathBuf>,
    /// This client's private key (PEM), with --tls-cert-file.
    #[arg(long, global = true, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
}

impl AccessArgs {
    /// The credentials to send, if any.
    ///
    /// # Errors
    /// The password file cannot be read or is empty (the message says which).
    pub fn credentials(&self) -> Result<Option<Credentials>, String> {
        Credentials::from_sources(
            self.user.clone(),
            self.password_file.as_deref(),
            self.password.clone(),
        )
        .map_err(|e| format!("reading the password: {e}"))
    }

    /// The TLS settings, if any.
    ///
    /// # Errors
    /// A PEM file is missing or unusable (the message says which).
    pub fn tls(&self) -> Result<Option<TlsClient>, String> {
        TlsClient::from_flags(
            self.tls_ca_cert_file.as_deref(),
            self.tls_cert_file.as_deref(),
            self.tls_key_file.as_deref(),
        )
        .map_err(|e| e.to_string())
    }
}
