//! The TLS settings of every listener, from flags and config file.

use anyhow::bail;

use super::args::ServeArgs;
use crate::config::FileConfig;

/// The TLS configuration the flags and file name, loaded (so a bad file fails at start-up
/// and in `--check-config`), or `None` for plain text.
pub(super) fn tls_settings(
    args: &ServeArgs,
    file: &FileConfig,
) -> anyhow::Result<Option<sluice_server::listen::tls::TlsConfig>> {
    let cert = args.tls_cert.clone().or(file.tls_cert.clone());
    let key = args.tls_key.clone().or(file.tls_key.clone());
    let client_ca = args.tls_client_ca.clone().or(file.tls_client_ca.clone());
    let (cert, key) = match (cert, key) {
        (Some(cert), Some(key)) => (cert, key),
        (None, None) if client_ca.is_none() => return Ok(None),
        (None, None) => bail!(
            "--tls-client-ca (tls_client_ca) needs --tls-cert and --tls-key: client \
             certificates are checked during a TLS handshake"
        ),
        (Some(_), None) => bail!("--tls-cert (tls_cert) needs --tls-key (tls_key) as well"),
        (None, Some(_)) => bail!("--tls-key (tls_key) needs --tls-cert (tls_cert) as well"),
    };
    let files = sluice_server::listen::tls::TlsFiles {
        cert,
        key,
        client_ca,
    };
    Ok(Some(sluice_server::listen::tls::TlsConfig::load(files)?))
}
