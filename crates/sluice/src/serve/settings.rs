//! The settings `sluice serve` runs with: flags, environment, config file and defaults
//! merged and checked (a flag wins over its environment variable, which wins over the config
//! file, which wins over the default), and the form `--check-config` prints.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use sluice_server::KeyRing;

use super::addresses::{Exposure, public_url, resolve, sqs_addresses};
use super::args::ServeArgs;
use super::limits::{connection_limits, open_file_limit, request_timeout};
use super::store::{StoreChoice, parse_store, redacted};
use super::tls::tls_settings;
use crate::config::{FileConfig, QueueDecl};

const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
const DEFAULT_DATA_DIR: &str = "./sluice-data";
/// The longest relaxed-durability window accepted: past it, "durable" would mean little.
const MAX_SYNC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Everything `sluice serve` will run with, resolved from flags, environment, config file
/// and defaults, and checked; nothing opened or bound yet.
pub(super) struct Settings {
    pub(super) listen: String,
    pub(super) addrs: Vec<std::net::SocketAddr>,
    pub(super) frames: Option<(String, Vec<std::net::SocketAddr>)>,
    pub(super) sqs: Option<(String, Vec<std::net::SocketAddr>)>,
    pub(super) sqs_public_url: Option<String>,
    pub(super) data_dir: PathBuf,
    pub(super) sync_interval: Option<std::time::Duration>,
    pub(super) min_free_disk: u64,
    pub(super) store: StoreChoice,
    pub(super) node_id: Option<String>,
    pub(super) keys: KeyRing,
    pub(super) key_configs: Vec<sluice_server::ApiKeyConfig>,
    pub(super) sqs_keys: Vec<sluice_sqs::SqsKey>,
    pub(super) queues: Vec<(sluice_core::QueueName, sluice_core::QueueConfigPatch)>,
    pub(super) push_allow_http: bool,
    pub(super) push_allow: Vec<sluice_server::jobs::push::PushAllow>,
    pub(super) tls: Option<sluice_server::listen::tls::TlsConfig>,
    pub(super) allow_plaintext: bool,
    pub(super) connections: sluice_server::ConnectionLimits,
    /// How long a request may take beyond its long-poll wait before it is answered 503.
    pub(super) request_timeout: std::time::Duration,
    pub(super) metrics: sluice_server::metrics::MetricsScope,
}

impl Settings {
    /// The settings as `--check-config` prints them, secrets redacted.
    pub(super) fn shown(&self) -> serde_json::Value {
        let queues: Vec<serde_json::Value> = self
            .queues
            .iter()
            .map(|(name, patch)| {
                // As the queue would be created; on an existing queue only the fields the
                // declaration names change.
                let view = sluice_core::QueueConfig::defaults_for(name)
                    .apply(name, patch)
                    .map(|c| sluice_wire::QueueConfigView::from(&c));
                serde_json::json!({
                    "name": name.as_str(),
                    "config": view.ok(),
                })
            })
            .collect();
        let keys: Vec<serde_json::Value> = self
            .key_configs
            .iter()
            .map(|k| serde_json::json!({"name": k.name, "role": k.role, "queues": k.queues}))
            .collect();
        // Access key ids are not secret; their secrets are never shown.
        let sqs_keys: Vec<serde_json::Value> = self
            .sqs_keys
            .iter()
            .map(|k| {
                serde_json::json!({"access_key_id": k.access_key_id, "role": k.role, "queues": k.queues})
            })
            .collect();
        serde_json::json!({
            "listen": self.listen,
            "listen_addresses": self.addrs,
            "frames_listen": self.frames.as_ref().map(|(name, _)| name),
            "sqs_listen": self.sqs.as_ref().map(|(name, _)| name),
            "sqs_public_url": self.sqs_public_url,
            "store": match &self.store {
                StoreChoice::Embedded => "embedded".to_owned(),
                StoreChoice::Postgres(url) => redacted(url),
            },
            "data_dir": matches!(self.store, StoreChoice::Embedded).then_some(&self.data_dir),
            "sync_interval_ms": self.sync_interval.map(|d| d.as_millis() as u64),
            "min_free_disk": matches!(self.store, StoreChoice::Embedded).then_some(self.min_free_disk),
            "node_id": self.node_id,
            "push_allow_http": self.push_allow_http,
            "push_allow": self.push_allow.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "tls": self.tls.as_ref().map(|t| {
                let f = t.files();
                serde_json::json!({"cert": f.cert, "key": f.key, "client_ca": f.client_ca})
            }),
            "allow_plaintext": self.allow_plaintext,
            "header_read_timeout_ms": self.connections.header_read_timeout.as_millis() as u64,
            "idle_timeout_ms": self.connections.idle_timeout.as_millis() as u64,
            "write_timeout_ms": self.connections.write_timeout.as_millis() as u64,
            "request_timeout_ms": self.request_timeout.as_millis() as u64,
            "max_connections": self.connections.max_connections,
            "open_file_limit": open_file_limit(),
            "metrics_queues": self.metrics.queues,
            "metrics_max_queues": self.metrics.max_queues,
            "metrics_top_keys": self.metrics.top_keys,
            "authentication": !self.keys.is_empty(),
            "keys": keys,
            "sqs_keys": sqs_keys,
            "queues": queues,
        })
    }
}

/// Resolves and checks the settings of `args`, in the order their errors are reported.
pub(super) async fn settle(args: ServeArgs) -> anyhow::Result<Settings> {
    let file = match &args.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let tls = tls_settings(&args, &file)?;
    let listen = args
        .listen
        .clone()
        .or(file.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let data_dir = args
        .data_dir
        .clone()
        .or(file.data_dir.clone())
        .unwrap_or_else(|| DEFAULT_DATA_DIR.into());
    let keys = KeyRing::new(file.keys.clone()).context("invalid [[keys]] in the config file")?;
    let decls = file.queue_decls()?;

    let allow_plaintext = args.allow_plaintext || file.allow_plaintext.unwrap_or(false);
    let guard = Exposure {
        keys: &keys,
        tls: tls.is_some(),
        allow_plaintext,
    };
    let (addrs, frames, sqs) = listener_addresses(&args, &file, &listen, &guard).await?;
    let sqs_public_url = match args.sqs_public_url.clone().or(file.sqs_public_url.clone()) {
        Some(u) => Some(public_url(&u)?),
        None => None,
    };
    let (choice, sync_interval, min_free_disk) = storage(&args, &file)?;
    let listeners = 1 + usize::from(frames.is_some()) + usize::from(sqs.is_some());
    let connections = connection_limits(
        (
            args.header_read_timeout,
            args.idle_timeout,
            args.write_timeout,
            args.max_connections,
        ),
        &file,
        listeners,
    )?;
    let request_timeout = request_timeout(args.request_timeout, &file)?;
    let push_allow_http = args.push_allow_http || file.push_allow_http.unwrap_or(false);
    let metrics = metrics_scope(&args, &file)?;
    let push_allow = push_allow(args.push_allow, &file)?;
    // The rules the broker will push by, with the listeners it will bind (an ephemeral
    // port is not known yet: the broker adds it once bound).
    let rules = sluice_server::jobs::push::PushRules::new(push_allow_http, push_allow.clone());
    let side = frames.iter().map(|f| ("frames", &f.1));
    let side = side.chain(sqs.iter().map(|s| ("sqs", &s.1)));
    for (name, list) in std::iter::once(("http", &addrs)).chain(side) {
        for a in list.iter().filter(|a| a.port() != 0) {
            rules.add_own(name, *a);
        }
    }
    let queues = declared_queues(decls, &rules).await?;
    Ok(Settings {
        listen,
        addrs,
        frames,
        sqs,
        sqs_public_url,
        data_dir,
        sync_interval,
        min_free_disk,
        store: choice,
        node_id: args.node_id.or(file.node_id.clone()),
        keys,
        key_configs: file.keys,
        sqs_keys: file.sqs_keys,
        queues,
        push_allow_http,
        push_allow,
        tls,
        allow_plaintext,
        connections,
        request_timeout,
        metrics,
    })
}

/// A listener's address as given and the addresses it resolved to.
type Named = (String, Vec<SocketAddr>);

/// The addresses of the main listener and, when asked for, of the frame and SQS listeners,
/// each checked against what may face the network.
async fn listener_addresses(
    args: &ServeArgs,
    file: &FileConfig,
    listen: &str,
    guard: &Exposure<'_>,
) -> anyhow::Result<(Vec<SocketAddr>, Option<Named>, Option<Named>)> {
    let frames_listen = args.frames_listen.clone().or(file.frames_listen.clone());
    let addrs = resolve("--listen", listen, guard).await?;
    let frames = match frames_listen {
        Some(f) => {
            let addrs = resolve("--frames-listen", &f, guard).await?;
            Some((f, addrs))
        }
        None => None,
    };
    let sqs = match args.sqs_listen.clone().or(file.sqs_listen.clone()) {
        Some(s) => {
            let addrs = sqs_addresses(
                &s,
                !file.sqs_keys.is_empty(),
                guard.tls || guard.allow_plaintext,
            )
            .await?;
            Some((s, addrs))
        }
        None => None,
    };
    Ok((addrs, frames, sqs))
}

/// The store, its relaxed-durability window and the free disk it keeps, checked together:
/// the window is the embedded store's alone.
fn storage(
    args: &ServeArgs,
    file: &FileConfig,
) -> anyhow::Result<(StoreChoice, Option<std::time::Duration>, u64)> {
    let sync_interval = flag_or_file(
        args.sync_interval,
        file.sync_interval.as_deref(),
        "sync_interval",
        crate::client::args::parse_duration,
    )?;
    if sync_interval.is_some_and(|d| d.is_zero() || d > MAX_SYNC_INTERVAL) {
        bail!(
            "--sync-interval must be between 1ms and {} s (or absent: every answer waits for \
             its sync)",
            MAX_SYNC_INTERVAL.as_secs()
        );
    }
    let min_free_disk = flag_or_file(
        args.min_free_disk,
        file.min_free_disk.as_deref(),
        "min_free_disk",
        crate::client::args::parse_bytes,
    )?
    .unwrap_or(sluice_embedded::DEFAULT_MIN_FREE_DISK);
    let choice = parse_store(args.store.as_deref().or(file.store.as_deref()))?;
    if sync_interval.is_some() && matches!(choice, StoreChoice::Postgres(_)) {
        bail!(
            "--sync-interval is for the embedded store; on PostgreSQL the equivalent is the \
             database's own setting (synchronous_commit = off)"
        );
    }
    Ok((choice, sync_interval, min_free_disk))
}

/// Which queues get series of their own in /metrics.
fn metrics_scope(
    args: &ServeArgs,
    file: &FileConfig,
) -> anyhow::Result<sluice_server::metrics::MetricsScope> {
    let metrics = sluice_server::metrics::MetricsScope {
        queues: args
            .metrics_queues
            .clone()
            .or(file.metrics_queues.clone())
            .unwrap_or_else(|| vec!["*".to_owned()]),
        max_queues: args
            .metrics_max_queues
            .or(file.metrics_max_queues)
            .unwrap_or(sluice_server::metrics::DEFAULT_METRICS_MAX_QUEUES),
        top_keys: args
            .metrics_top_keys
            .or(file.metrics_top_keys)
            .unwrap_or(sluice_server::metrics::DEFAULT_METRICS_TOP_KEYS),
    };
    if metrics.top_keys > sluice_core::key_stats::MAX_KEYS_PAGE as usize {
        bail!(
            "--metrics-top-keys (metrics_top_keys) is {}; at most {} keys of a queue get series \
             of their own",
            metrics.top_keys,
            sluice_core::key_stats::MAX_KEYS_PAGE
        );
    }
    if metrics.queues.iter().any(|p| p.trim().is_empty()) {
        bail!(
            "--metrics-queues (metrics_queues) holds an empty pattern; give queue names or \
             patterns such as orders*"
        );
    }
    Ok(metrics)
}

/// The non-public push targets allowed: the flag's list, else the config file's.
fn push_allow(
    flag: Vec<sluice_server::jobs::push::PushAllow>,
    file: &FileConfig,
) -> anyhow::Result<Vec<sluice_server::jobs::push::PushAllow>> {
    if !flag.is_empty() {
        return Ok(flag);
    }
    file.push_allow
        .iter()
        .flatten()
        .map(|e| e.parse())
        .collect::<Result<Vec<_>, _>>()
        .context("push_allow in the config file")
}

/// The `[[queues]]` declarations as patches, each push target checked against `rules`.
async fn declared_queues(
    decls: Vec<QueueDecl>,
    rules: &sluice_server::jobs::push::PushRules,
) -> anyhow::Result<Vec<(sluice_core::QueueName, sluice_core::QueueConfigPatch)>> {
    let mut queues = Vec::with_capacity(decls.len());
    for q in decls {
        let patch = q
            .config
            .to_patch()
            .with_context(|| format!("[[queues]] {}", q.name))?;
        if let Some(Some(p)) = &patch.push {
            rules
                .check_target(&p.target)
                .await
                .with_context(|| format!("[[queues]] {}", q.name))?;
        }
        queues.push((q.name, patch));
    }
    Ok(queues)
}

/// A setting given as a flag (already parsed), else as text under `key` in the config file.
pub(super) fn flag_or_file<T>(
    flag: Option<T>,
    text: Option<&str>,
    key: &str,
    parse: fn(&str) -> Result<T, String>,
) -> anyhow::Result<Option<T>> {
    match (flag, text) {
        (Some(v), _) => Ok(Some(v)),
        (None, Some(text)) => parse(text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{key} in the config file: {e}")),
        (None, None) => Ok(None),
    }
}
