//! TLS settings of a client: CA certificates to trust besides the public roots (a private CA,
//! or a broker's self-signed certificate) and a client certificate for brokers that require
//! one (`sluice serve --tls-client-ca`). The same settings serve HTTP ([`crate::Client`]) and
//! the frame protocol ([`crate::frames::FrameConnection::connect_tls`]).
//!
//! ```no_run
//! # fn f() -> Result<(), sluice_client::Error> {
//! use sluice_client::{Client, TlsOptions};
//! let tls = TlsOptions::default().ca_cert_file("/etc/sluice/ca.pem")?;
//! let client = Client::builder("https://broker.internal:7878").tls(tls).build()?;
//! # let _ = client; Ok(()) }
//! ```

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

/// Extra trust and an optional client certificate; the default trusts the public web roots
/// only and presents no certificate.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    ca: Vec<CertificateDer<'static>>,
    identity: Option<Identity>,
}

/// A client certificate chain and its key, as PEM.
#[derive(Clone)]
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key_pem: Vec<u8>,
    cert_pem: Vec<u8>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("Identity")
            .field("certificates", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl TlsOptions {
    /// Trusts the CA certificates of a PEM text as well.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the text holds no certificate or bad PEM.
    pub fn ca_cert_pem(mut self, pem: &[u8], origin: &str) -> Result<Self> {
        self.ca.extend(certs(pem, origin)?);
        Ok(self)
    }

    /// Trusts the CA certificates of a PEM file as well.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the file cannot be read or holds no certificate.
    pub fn ca_cert_file(self, path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let pem = read(path, "CA certificate")?;
        self.ca_cert_pem(&pem, &path.display().to_string())
    }

    /// Presents this client certificate chain and key (PEM files) to brokers that ask.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when a file cannot be read, or holds no certificate or key.
    pub fn client_cert_files(
        mut self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let cert_pem = read(cert, "client certificate")?;
        let key_pem = read(key, "client key")?;
        let chain = certs(&cert_pem, &cert.display().to_string())?;
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            Error::InvalidInput(format!(
                "client key {}: no usable PEM private key ({e:?}); give the key of the client \
                 certificate, as PKCS#8, PKCS#1 or SEC1 PEM",
                key.display()
            ))
        })?;
        self.identity = Some(Identity {
            chain,
            key_pem,
            cert_pem,
        });
        Ok(self)
    }

    /// True when these options add nothing to the defaults.
    pub fn is_default(&self) -> bool {
        self.ca.is_empty() && self.identity.is_none()
    }

    /// Adds these settings to a `reqwest` client under construction (what [`crate::Client`]
    /// does), for callers that make their own HTTP requests to a broker.
    ///
    /// # Errors
    /// [`Error::Transport`] when reqwest refuses a certificate or the key.
    pub fn apply_to(&self, mut b: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder> {
        for der in &self.ca {
            let cert = reqwest::Certificate::from_der(der).map_err(Error::Transport)?;
            b = b.add_root_certificate(cert);
        }
        if let Some(id) = &self.identity {
            let mut pem = id.cert_pem.clone();
            pem.push(b'\n');
            pem.extend_from_slice(&id.key_pem);
            b = b.identity(reqwest::Identity::from_pem(&pem).map_err(Error::Transport)?);
        }
        Ok(b)
    }

    /// A rustls client configuration with these settings, for the frame protocol.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when a certificate or the key is refused by rustls.
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for der in &self.ca {
            roots
                .add(der.clone())
                .map_err(|e| Error::InvalidInput(format!("CA certificate refused: {e}")))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::InvalidInput(format!("TLS settings: {e}")))?
            .with_root_certificates(roots);
        let config = match &self.identity {
            Some(id) => {
                let key = PrivateKeyDer::from_pem_slice(&id.key_pem)
                    .map_err(|e| Error::InvalidInput(format!("client key: {e:?}")))?;
                builder
                    .with_client_auth_cert(id.chain.clone(), key)
                    .map_err(|e| Error::InvalidInput(format!("client certificate: {e}")))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::InvalidInput(format!("{what} {}: cannot be read ({e})", path.display()))
    })
}

fn certs(pem: &[u8], origin: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::InvalidInput(format!("{origin}: not valid PEM ({e:?})")))?;
    if certs.is_empty() {
        return Err(Error::InvalidInput(format!(
            "{origin}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        )));
    }
    Ok(certs)
}
