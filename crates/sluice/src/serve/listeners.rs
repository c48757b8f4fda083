//! Binding the listeners beside the main one: the SQS API and the frame protocol. Each says
//! on stdout where it listens, for scripts and tests that ask for port 0.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use sluice_core::Store;
use sluice_server::Broker;

/// How the SQS API is reached and whom it lets in.
pub(super) struct SqsListener {
    /// The address as given, and what it resolved to.
    pub(super) addr: (String, Vec<SocketAddr>),
    pub(super) keys: Vec<sluice_sqs::SqsKey>,
    pub(super) public_url: Option<String>,
    pub(super) tls: bool,
    /// How long an action may take beyond a receive's longest wait.
    pub(super) request_timeout: std::time::Duration,
}

/// Binds the SQS listener and has the broker serve the SQS API on it, beside its own API,
/// with the same TLS (reloaded with it on SIGHUP), connection limits and shutdown; its long
/// polls last at most 20 s.
pub(super) async fn with_sqs(
    broker: Broker,
    store: Arc<dyn Store>,
    sqs: SqsListener,
    scheme: &str,
) -> anyhow::Result<Broker> {
    let (name, addrs) = sqs.addr;
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .with_context(|| format!("binding --sqs-listen {name}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    println!("sluice sqs listening on {scheme}://{local}");
    tracing::info!(%local, "SQS API listening");
    if sqs.keys.is_empty() {
        tracing::warn!(
            "no [[sqs_keys]] configured: the SQS API takes any signature (loopback only)"
        );
    }
    let options = sluice_sqs::SqsOptions {
        keys: sqs.keys,
        public_url: sqs.public_url,
        tls: sqs.tls,
        hosts: vec![name.clone()],
        request_timeout: sqs.request_timeout,
        ..sluice_sqs::SqsOptions::default()
    };
    Ok(broker.with_http("sqs", listener, sluice_sqs::router(store, options)))
}

/// Binds the frame listener and has the broker serve the frame protocol on it.
pub(super) async fn with_frames(
    broker: Broker,
    (name, addrs): (String, Vec<SocketAddr>),
) -> anyhow::Result<Broker> {
    let frames = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .with_context(|| format!("binding --frames-listen {name}"))?;
    let local = frames.local_addr().context("reading the bound address")?;
    // Before the HTTP line: a script that waits for that one finds both.
    println!("sluice frames listening on {local}");
    tracing::info!(%local, "frame protocol listening");
    Ok(broker.with_frames(frames))
}
