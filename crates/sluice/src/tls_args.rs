//! The TLS flags of every command that talks to a broker: which CA to trust for an
//! `https://` broker with a private certificate, and which client certificate to present to
//! one that requires it (`sluice serve --tls-client-ca`).

use std::path::PathBuf;

use clap::Args;
use sluice_client::TlsOptions;

/// TLS settings of a connection to a broker.
#[derive(Debug, Clone, Default, Args)]
pub struct TlsArgs {
    /// CA certificate(s) (PEM) to trust besides the public roots, for a broker whose
    /// certificate a private CA signed (or a self-signed one).
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "SLUICE_CA_CERT",
        value_name = "FILE"
    )]
    pub ca_cert: Option<PathBuf>,
    /// Client certificate chain (PEM) for a broker that requires one; needs --client-key.
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "SLUICE_CLIENT_CERT",
        value_name = "FILE"
    )]
    pub client_cert: Option<PathBuf>,
    /// The private key (PEM) of --client-cert.
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "SLUICE_CLIENT_KEY",
        value_name = "FILE"
    )]
    pub client_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The client's TLS options, with each file read and checked.
    ///
    /// # Errors
    /// A file that cannot be read or holds no certificate or key, or a client certificate
    /// given without its key (or the other way round).
    pub fn options(&self) -> Result<TlsOptions, String> {
        let mut tls = TlsOptions::default();
        if let Some(ca) = &self.ca_cert {
            tls = tls
                .ca_cert_file(ca)
                .map_err(|e| format!("--ca-cert: {e}"))?;
        }
        match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                tls = tls
                    .client_cert_files(cert, key)
                    .map_err(|e| format!("--client-cert: {e}"))?;
            }
            (None, None) => {}
            (Some(_), None) => return Err("--client-cert needs --client-key as well".into()),
            (None, Some(_)) => return Err("--client-key needs --client-cert as well".into()),
        }
        Ok(tls)
    }
}
