//! `sluice serve`: open the store, apply declared queues, serve the HTTP API until SIGINT or
//! SIGTERM, then finish in-flight requests and exit 0.
//!
//! This module holds the entry point and the start-up order; its parts hold the options
//! (`args`), their merge into checked settings (`settings`), the store (`store`), TLS
//! (`tls`), connection and open-file limits (`limits`), the addresses each listener may bind
//! (`addresses`), the extra listeners (`listeners`) and the signals (`signals`).

mod addresses;
mod args;
mod limits;
mod listeners;
mod settings;
mod signals;
mod store;
mod tls;

use std::process::ExitCode;

use anyhow::Context;
use sluice_server::{Broker, ServerOptions};

pub use args::ServeArgs;
use settings::{Settings, settle};

/// The exit code of `--check-config` for settings that would not start.
const EXIT_BAD_CONFIG: u8 = 2;

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only for a person at a terminal, never into a log file or journal.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Runs the broker until a shutdown signal, or checks its settings (`--check-config`).
pub fn run(args: ServeArgs) -> ExitCode {
    init_tracing();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.check_config {
        return match rt.block_on(settle(args)) {
            Ok(settings) => {
                match serde_json::to_string_pretty(&settings.shown()) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("sluice: error: printing the settings: {e}");
                        return ExitCode::FAILURE;
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sluice: error: {e:#}");
                ExitCode::from(EXIT_BAD_CONFIG)
            }
        };
    }
    match rt.block_on(async { serve(settle(args).await?).await }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the store, applies the declared queues and serves until a shutdown signal.
async fn serve(settings: Settings) -> anyhow::Result<()> {
    let Settings {
        listen,
        addrs,
        frames,
        sqs,
        data_dir,
        sync_interval,
        min_free_disk,
        store: choice,
        node_id,
        keys,
        queues,
        push_allow_http,
        push_allow,
        tls,
        sqs_keys,
        sqs_public_url,
        connections: settings_connections,
        request_timeout,
        metrics,
        ..
    } = settings;
    let store = store::open_store(choice, &data_dir, sync_interval, min_free_disk, node_id).await?;
    store::declare_queues(store.as_ref(), &queues).await?;

    let scheme = if tls.is_some() { "https" } else { "http" };
    // Watched before anything is served, with or without TLS: SIGHUP (`systemctl reload`)
    // must never fall to its default action, which ends the process without draining.
    signals::watch_sighup(tls.clone());
    let options = ServerOptions {
        keys,
        push_allow_http,
        push_allow,
        tls: tls.clone(),
        connections: settings_connections,
        request_timeout,
        metrics,
        // Without keys the broker answers requests for loopback names and the name it was
        // told to listen on.
        hosts: vec![listen.clone()],
        ..ServerOptions::default()
    };
    if options.keys.is_empty() {
        tracing::warn!("no API keys configured: authentication is off (loopback only)");
    }
    let mut broker = Broker::new(store.clone(), options);
    if let Some(addr) = sqs {
        let sqs = listeners::SqsListener {
            addr,
            keys: sqs_keys,
            public_url: sqs_public_url,
            request_timeout,
            tls: tls.is_some(),
        };
        broker = listeners::with_sqs(broker, store, sqs, scheme).await?;
    }
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .with_context(|| format!("binding {listen}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    if let Some(frames) = frames {
        broker = listeners::with_frames(broker, frames).await?;
    }
    // On stdout, for scripts and tests that ask for port 0.
    println!("sluice listening on {scheme}://{local}");
    tracing::info!(%local, "listening");
    broker
        .serve(listener, signals::shutdown_signal())
        .await
        .context("serving")?;
    // Both engines make every write durable before answering, so nothing is left to flush;
    // dropping the broker drops the store (and releases the embedded data directory).
    tracing::info!("stopped");
    Ok(())
}
