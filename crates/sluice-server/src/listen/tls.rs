//! TLS for every listener (HTTP, frames and SQS): a certificate chain and key read from PEM files,
//! reloaded on request (the binary does it on SIGHUP) without touching open connections, and
//! optional client-certificate authentication.
//!
//! A reload builds a whole new configuration and swaps it in: connections accepted after the
//! swap present the new certificate, connections already open keep the session they have.
//! A reload that fails (a missing file, a key that does not match) keeps the old one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

/// Where the certificate, key and optional client CA are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM): the broker's certificate first, then intermediates.
    pub cert: PathBuf,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by one of these CAs (PEM).
    pub client_ca: Option<PathBuf>,
}

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed.
    #[error("{what} {path}: {reason}")]
    File {
        /// Which file: "certificate", "key" or "client CA".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// The files were read but do not make a configuration (e.g. a key that does not match
    /// the certificate).
    #[error("TLS configuration from {cert} and {key}: {reason}")]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        reason: String,
    },
}

/// The live TLS configuration of a broker: cheap to clone, shared by both listeners, swapped
/// whole by [`TlsConfig::reload`].
#[derive(Clone)]
pub struct TlsConfig {
    files: Arc<TlsFiles>,
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Reads the files and builds the configuration.
    ///
    /// # Errors
    /// A file is missing, unreadable or holds no certificate / key, or the key does not
    /// match the certificate.
    pub fn load(files: TlsFiles) -> Result<TlsConfig, TlsError> {
        let config = build(&files)?;
        Ok(TlsConfig {
            files: Arc::new(files),
            current: Arc::new(RwLock::new(Arc::new(config))),
        })
    }

    /// Reads the files again and, when they make a configuration, serves new connections
    /// with it; open connections are untouched.
    ///
    /// # Errors
    /// As [`TlsConfig::load`]; the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = Arc::new(build(&self.files)?);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    /// The files this configuration is read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// An acceptor with the configuration in use now.
    pub fn acceptor(&self) -> TlsAcceptor {
        let config = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        TlsAcceptor::from(config)
    }
}

fn file_error(what: &'static str, path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::File {
        what,
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The certificates of a PEM file, refused when it holds none.
fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, pem_reason(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, pem_reason(&e)))?;
    if certs.is_empty() {
        return Err(file_error(
            what,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

fn pem_reason(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => format!("cannot be read ({io})"),
        other => format!("is not valid PEM ({other:?})"),
    }
}

fn build(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let chain = read_certs("certificate", &files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        file_error(
            "key",
            &files.key,
            match e {
                rustls::pki_types::pem::Error::NoItemsFound => {
                    "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".to_owned()
                }
                other => pem_reason(&other),
            },
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error(files, &e))?;
    let builder = match &files.client_ca {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs("client CA", path)? {
                roots
                    .add(cert)
                    .map_err(|e| file_error("client CA", path, e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| file_error("client CA", path, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|e| config_error(files, &e))
}

fn config_error(files: &TlsFiles, e: &rustls::Error) -> TlsError {
    TlsError::Config {
        cert: files.cert.clone(),
        key: files.key.clone(),
        reason: e.to_string(),
    }
}
