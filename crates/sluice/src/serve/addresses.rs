//! The addresses each listener may bind: looked up, and refused off loopback when no key
//! protects them or keys would cross the network in clear text.

use anyhow::{Context, bail};
use sluice_server::KeyRing;

/// The addresses of the SQS listener: off loopback only with access keys to check, and with
/// TLS (or `secure`: TLS, or a TLS-terminating proxy in front and --allow-plaintext).
pub(super) async fn sqs_addresses(
    addr: &str,
    keys: bool,
    secure: bool,
) -> anyhow::Result<Vec<std::net::SocketAddr>> {
    let (addrs, public) = lookup("--sqs-listen", addr).await?;
    let Some(public) = public else {
        return Ok(addrs);
    };
    if !keys {
        bail!(
            "refusing to serve the SQS API on {addr} ({public}) without [[sqs_keys]]: it would \
             take any signature, loopback only, e.g. 127.0.0.1:9324. Add [[sqs_keys]] \
             (access_key_id, secret_access_key, role, queues) to the config file"
        );
    }
    if !secure {
        bail!(
            "refusing to serve the SQS API on {addr} ({public}) in plain HTTP: give --tls-cert \
             and --tls-key (tls_cert, tls_key), or put a TLS-terminating proxy in front and give \
             --allow-plaintext (allow_plaintext = true)"
        );
    }
    Ok(addrs)
}

/// A public base URL as given: `http://` or `https://` and a host, without a query; the
/// trailing slash dropped.
pub(super) fn public_url(url: &str) -> anyhow::Result<String> {
    let parsed = reqwest::Url::parse(url).ok().filter(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.host_str().is_some()
            && u.query().is_none()
            && u.fragment().is_none()
    });
    if parsed.is_none() {
        bail!(
            "--sqs-public-url (sqs_public_url) must be an http:// or https:// URL with a host \
             and no query, e.g. https://sqs.example.com; got {url:?}"
        );
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// The addresses `addr` (given as `flag`) names, and the first that is not loopback.
async fn lookup(
    flag: &str,
    addr: &str,
) -> anyhow::Result<(Vec<std::net::SocketAddr>, Option<std::net::SocketAddr>)> {
    let addrs: Vec<_> = tokio::net::lookup_host(addr)
        .await
        .with_context(|| format!("{flag} \"{addr}\" is not a host:port address"))?
        .collect();
    if addrs.is_empty() {
        bail!("{flag} \"{addr}\" resolves to no address");
    }
    let public = addrs.iter().find(|a| !a.ip().is_loopback()).copied();
    Ok((addrs, public))
}

/// What decides whether a listener may face the network.
pub(super) struct Exposure<'a> {
    pub(super) keys: &'a KeyRing,
    pub(super) tls: bool,
    pub(super) allow_plaintext: bool,
}

/// The addresses `addr` (given as `flag`) names, refused when they are not loopback and no
/// API key protects them, or when keys would cross the network in clear text.
pub(super) async fn resolve(
    flag: &str,
    addr: &str,
    guard: &Exposure<'_>,
) -> anyhow::Result<Vec<std::net::SocketAddr>> {
    let (addrs, public) = lookup(flag, addr).await?;
    let Some(public) = public else {
        return Ok(addrs);
    };
    if guard.keys.is_empty() {
        bail!(
            "refusing to listen on {addr} ({public}) without API keys: anyone who can reach it \
             could read and delete every message. Add [[keys]] to the config file (see \
             `sluice key generate`) or listen on a loopback address such as 127.0.0.1:7878"
        );
    }
    if !guard.tls && !guard.allow_plaintext {
        bail!(
            "refusing to listen on {addr} ({public}) without TLS: API keys and message bodies \
             would cross the network in clear text. Give --tls-cert and --tls-key (tls_cert, \
             tls_key), or --allow-plaintext (allow_plaintext = true) when a TLS-terminating \
             proxy in front of the broker encrypts the traffic"
        );
    }
    Ok(addrs)
}
