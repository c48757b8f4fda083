//! `sluice serve`: open the store, apply declared queues, serve the HTTP API until SIGINT or
//! SIGTERM, then finish in-flight requests and exit 0.
//!
//! Longer than this project's files should be: it holds the arguments and their config-file
//! and environment forms, the resolved settings `--check-config` prints, and the start-up of
//! the store and every listener. Those three are its seams for a split.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use sluice_core::Store;
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};
use sluice_postgres::{PostgresOptions, PostgresStore};
use sluice_server::{Broker, KeyRing, ServerOptions};

use crate::config::FileConfig;

const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
const DEFAULT_DATA_DIR: &str = "./sluice-data";
/// The longest relaxed-durability window accepted: past it, "durable" would mean little.
const MAX_SYNC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Options of `sluice serve`. A flag wins over its environment variable, which wins over the
/// config file, which wins over the default.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:7878]. Without API keys only a loopback
    /// address is allowed. Port 0 picks a free port (the address is printed on stdout).
    #[arg(long, env = "SLUICE_LISTEN", value_name = "ADDR")]
    listen: Option<String>,
    /// Also serve the frame protocol (send, receive and a worker's settlements over plain
    /// TCP, for clients that want the lowest cost per message) on this address [default:
    /// off]. The same API keys apply; without keys only a loopback address is allowed.
    #[arg(long, env = "SLUICE_FRAMES_LISTEN", value_name = "ADDR")]
    frames_listen: Option<String>,
    /// Also serve the Amazon SQS API (the AWS JSON and query protocols of the AWS SDKs and
    /// the AWS CLI) on this address [default: off], over the same queues. Requests are signed
    /// with the access keys of `[[sqs_keys]]` in the config file; without them only a
    /// loopback address is allowed. It serves HTTPS with --tls-cert, as the main listener
    /// does; off loopback without TLS it needs --allow-plaintext.
    #[arg(long, env = "SLUICE_SQS_LISTEN", value_name = "ADDR")]
    sqs_listen: Option<String>,
    /// The SQS listener's URL as clients reach it (e.g. `https://sqs.example.com`), the base
    /// of the queue URLs it answers [default: the scheme and `Host` of each request].
    #[arg(long, env = "SLUICE_SQS_PUBLIC_URL", value_name = "URL")]
    sqs_public_url: Option<String>,
    /// Data directory of the embedded store [default: ./sluice-data].
    #[arg(long, env = "SLUICE_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Relaxed durability (embedded store): answer writes once they are in the log file and
    /// sync at most this long after (e.g. 100ms), instead of waiting for each sync. A crash
    /// of the broker loses nothing; a crash of the machine can lose up to this long of
    /// acknowledged writes [default: off: every answer waits for its sync].
    #[arg(long, env = "SLUICE_SYNC_INTERVAL", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    sync_interval: Option<std::time::Duration>,
    /// Close a connection that has not sent a complete request head within this long: from
    /// accept for a new connection (TLS handshake included), from its first byte for a later
    /// request; on the frame listener, a frame whose bytes stop for this long [default: 10s].
    #[arg(long, env = "SLUICE_HEADER_READ_TIMEOUT", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    header_read_timeout: Option<std::time::Duration>,
    /// Close a connection with no request in progress for this long; a long poll or event
    /// stream in progress is never cut [default: 75s].
    #[arg(long, env = "SLUICE_IDLE_TIMEOUT", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    idle_timeout: Option<std::time::Duration>,
    /// Close a connection whose client has not read any of its answer for this long: an
    /// event stream, a long poll's answer or a large page that the client stopped reading
    /// [default: 30s].
    #[arg(long, env = "SLUICE_WRITE_TIMEOUT", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    write_timeout: Option<std::time::Duration>,
    /// Most open connections on each listener; past it a new connection is closed at once,
    /// logged and counted in sluice_connections_refused_total [default: 4096, less when
    /// the open-file limit needs it].
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS", value_name = "N")]
    max_connections: Option<usize>,
    /// Queues with series of their own in /metrics, as comma-separated name patterns (`*`
    /// matches any run of characters, e.g. `orders*,billing`); every queue counts in the
    /// `all_queues` totals [default: *].
    #[arg(
        long,
        env = "SLUICE_METRICS_QUEUES",
        value_name = "PATTERNS",
        value_delimiter = ','
    )]
    metrics_queues: Option<Vec<String>>,
    /// Most queues with series of their own in /metrics, the first in name order among
    /// those --metrics-queues selects [default: 1000].
    #[arg(long, env = "SLUICE_METRICS_MAX_QUEUES", value_name = "N")]
    metrics_max_queues: Option<usize>,
    /// TOML config file: `listen`, `frames_listen`, `data_dir`, `sync_interval`, `store`,
    /// `node_id`, `[[queues]]`, `[[keys]]`.
    #[arg(long, env = "SLUICE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The store: `embedded` (default; a data directory on this machine) or a PostgreSQL
    /// connection string, `postgres://user@host:5432/db[?schema=name]`, which several
    /// `sluice serve` nodes can share.
    #[arg(long, env = "SLUICE_STORE", value_name = "STORE")]
    store: Option<String>,
    /// This node's name among nodes sharing a PostgreSQL store [default: random per start].
    /// A node restarted under the same name resumes its redrive jobs at once.
    #[arg(long, env = "SLUICE_NODE_ID", value_name = "NAME")]
    node_id: Option<String>,
    /// Free space kept on the data directory's disk (embedded store), e.g. 128MiB or 1GiB:
    /// below it new messages are refused with 503 and /readyz fails, while receives, acks
    /// and nacks go on; sends are accepted again once space is freed. 0 turns the check
    /// off [default: 128MiB].
    #[arg(long, env = "SLUICE_MIN_FREE_DISK", value_name = "SIZE",
          value_parser = crate::client::args::parse_bytes)]
    min_free_disk: Option<u64>,
    /// Let queues push to plain `http` URLs on hosts that are not loopback (by default a
    /// push target must be `https`, or `http` on `localhost`, `127.0.0.0/8` or `::1`). For a
    /// network you trust, or a TLS-terminating proxy beside the broker.
    #[arg(long, env = "SLUICE_PUSH_ALLOW_HTTP")]
    push_allow_http: bool,
    /// Let queues push to these addresses although they are not public: CIDRs
    /// (10.0.0.0/8), single addresses (127.0.0.1) or host names (hooks.internal, whatever it
    /// resolves to); repeat the flag or separate with commas [default: none: push targets
    /// must resolve to public addresses, not loopback, private, link-local, multicast or
    /// cloud metadata ones]. The broker's own listeners are refused whatever this says.
    #[arg(
        long,
        env = "SLUICE_PUSH_ALLOW",
        value_name = "CIDR|HOST",
        value_delimiter = ','
    )]
    push_allow: Vec<sluice_server::push::PushAllow>,
    /// Serve TLS on both listeners with this certificate chain (PEM: the broker's
    /// certificate, then intermediates). Sent SIGHUP, the broker reads the certificate and key
    /// again for new connections; open ones are untouched.
    #[arg(long, env = "SLUICE_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "SLUICE_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Require a client certificate signed by one of these CAs (PEM) on every connection,
    /// before any API key is looked at [default: off]. Needs --tls-cert.
    #[arg(long, env = "SLUICE_TLS_CLIENT_CA", value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Accept API keys on a listener that is not loopback without TLS, because a
    /// TLS-terminating proxy in front of the broker encrypts the traffic [default: off: such
    /// a listener needs --tls-cert and --tls-key].
    #[arg(long, env = "SLUICE_ALLOW_PLAINTEXT")]
    allow_plaintext: bool,
    /// Check the flags, environment and config file without starting: print the effective
    /// settings as JSON (the store's password, key hashes, push secrets and header values
    /// redacted) and exit 0, or say what is wrong and exit 2. Neither opens the store nor
    /// binds the addresses.
    #[arg(long)]
    check_config: bool,
}

/// The exit code of `--check-config` for settings that would not start.
const EXIT_BAD_CONFIG: u8 = 2;

/// Which engine `--store` names.
enum StoreChoice {
    Embedded,
    Postgres(String),
}

fn parse_store(s: Option<&str>) -> anyhow::Result<StoreChoice> {
    match s {
        None | Some("embedded") => Ok(StoreChoice::Embedded),
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            Ok(StoreChoice::Postgres(url.to_string()))
        }
        Some(other) => bail!(
            "--store \"{other}\" is neither `embedded` nor a postgres:// connection string \
             (e.g. postgres://sluice@127.0.0.1:5432/sluice)"
        ),
    }
}

/// The connection string without its password, for logs.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

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

/// Everything `sluice serve` will run with, resolved from flags, environment, config file
/// and defaults, and checked; nothing opened or bound yet.
struct Settings {
    listen: String,
    addrs: Vec<std::net::SocketAddr>,
    frames: Option<(String, Vec<std::net::SocketAddr>)>,
    sqs: Option<(String, Vec<std::net::SocketAddr>)>,
    sqs_public_url: Option<String>,
    data_dir: PathBuf,
    sync_interval: Option<std::time::Duration>,
    min_free_disk: u64,
    store: StoreChoice,
    node_id: Option<String>,
    keys: KeyRing,
    key_configs: Vec<sluice_server::ApiKeyConfig>,
    sqs_keys: Vec<sluice_sqs::SqsKey>,
    queues: Vec<(sluice_core::QueueName, sluice_core::QueueConfigPatch)>,
    push_allow_http: bool,
    push_allow: Vec<sluice_server::push::PushAllow>,
    tls: Option<sluice_server::tls::TlsConfig>,
    allow_plaintext: bool,
    connections: sluice_server::ConnectionLimits,
    metrics: sluice_server::metrics::MetricsScope,
}

impl Settings {
    /// The settings as `--check-config` prints them, secrets redacted.
    fn shown(&self) -> serde_json::Value {
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
            "max_connections": self.connections.max_connections,
            "open_file_limit": open_file_limit(),
            "metrics_queues": self.metrics.queues,
            "metrics_max_queues": self.metrics.max_queues,
            "authentication": !self.keys.is_empty(),
            "keys": keys,
            "sqs_keys": sqs_keys,
            "queues": queues,
        })
    }
}

/// Resolves and checks the settings of `args`: a flag wins over its environment variable,
/// which wins over the config file, which wins over the default.
async fn settle(args: ServeArgs) -> anyhow::Result<Settings> {
    let file = match &args.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let tls = tls_settings(&args, &file)?;
    let listen = args
        .listen
        .or(file.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let data_dir = args
        .data_dir
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
    let frames_listen = args.frames_listen.or(file.frames_listen.clone());
    let addrs = resolve("--listen", &listen, &guard).await?;
    let frames = match frames_listen {
        Some(f) => {
            let addrs = resolve("--frames-listen", &f, &guard).await?;
            Some((f, addrs))
        }
        None => None,
    };
    let sqs = match args.sqs_listen.or(file.sqs_listen.clone()) {
        Some(s) => {
            let addrs = sqs_addresses(
                &s,
                !file.sqs_keys.is_empty(),
                tls.is_some() || allow_plaintext,
            )
            .await?;
            Some((s, addrs))
        }
        None => None,
    };
    let sqs_public_url = match args.sqs_public_url.or(file.sqs_public_url.clone()) {
        Some(u) => Some(public_url(&u)?),
        None => None,
    };

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
    let push_allow_http = args.push_allow_http || file.push_allow_http.unwrap_or(false);
    let metrics = sluice_server::metrics::MetricsScope {
        queues: args
            .metrics_queues
            .or(file.metrics_queues.clone())
            .unwrap_or_else(|| vec!["*".to_owned()]),
        max_queues: args
            .metrics_max_queues
            .or(file.metrics_max_queues)
            .unwrap_or(sluice_server::metrics::DEFAULT_METRICS_MAX_QUEUES),
    };
    if metrics.queues.iter().any(|p| p.trim().is_empty()) {
        bail!(
            "--metrics-queues (metrics_queues) holds an empty pattern; give queue names or \
             patterns such as orders*"
        );
    }
    let push_allow = if args.push_allow.is_empty() {
        file.push_allow
            .iter()
            .flatten()
            .map(|e| e.parse())
            .collect::<Result<Vec<_>, _>>()
            .context("push_allow in the config file")?
    } else {
        args.push_allow
    };
    // The rules the broker will push by, with the listeners it will bind (an ephemeral
    // port is not known yet: the broker adds it once bound).
    let rules = sluice_server::push::PushRules::new(push_allow_http, push_allow.clone());
    let side = frames.iter().map(|f| ("frames", &f.1));
    let side = side.chain(sqs.iter().map(|s| ("sqs", &s.1)));
    for (name, list) in std::iter::once(("http", &addrs)).chain(side) {
        for a in list.iter().filter(|a| a.port() != 0) {
            rules.add_own(name, *a);
        }
    }
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
        metrics,
    })
}

/// The longest header-read or idle timeout accepted.
const MAX_CONNECTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The connection limits of every listener (`listeners` of them), from flags, file and
/// defaults. Without a setting, `max_connections` is lowered so that all listeners full
/// still leave a quarter of the process's open-file limit to the store and push targets.
fn connection_limits(
    (header_flag, idle_flag, write_flag, max_flag): (
        Option<std::time::Duration>,
        Option<std::time::Duration>,
        Option<std::time::Duration>,
        Option<usize>,
    ),
    file: &FileConfig,
    listeners: usize,
) -> anyhow::Result<sluice_server::ConnectionLimits> {
    use sluice_server::connections;
    let timeout = |flag: Option<std::time::Duration>, text: Option<&str>, key: &str, default| {
        let d =
            flag_or_file(flag, text, key, crate::client::args::parse_duration)?.unwrap_or(default);
        if d.is_zero() || d > MAX_CONNECTION_TIMEOUT {
            bail!(
                "--{} ({key}) must be between 1ms and {} s",
                key.replace('_', "-"),
                MAX_CONNECTION_TIMEOUT.as_secs()
            );
        }
        Ok(d)
    };
    let header_read_timeout = timeout(
        header_flag,
        file.header_read_timeout.as_deref(),
        "header_read_timeout",
        connections::DEFAULT_HEADER_READ_TIMEOUT,
    )?;
    let idle_timeout = timeout(
        idle_flag,
        file.idle_timeout.as_deref(),
        "idle_timeout",
        connections::DEFAULT_IDLE_TIMEOUT,
    )?;
    let write_timeout = timeout(
        write_flag,
        file.write_timeout.as_deref(),
        "write_timeout",
        connections::DEFAULT_WRITE_TIMEOUT,
    )?;
    let open_files = open_file_limit();
    let max_connections = match max_flag.or(file.max_connections) {
        Some(0) => bail!("--max-connections (max_connections) must be at least 1"),
        Some(n) => {
            if let Some(limit) = open_files
                && n.saturating_mul(listeners) as u64 >= limit
            {
                tracing::warn!(
                    max_connections = n,
                    listeners,
                    open_file_limit = limit,
                    "max_connections on every listener exceeds the open-file limit: when all \
                     are full, accepts fail and the store may not open files; raise the limit \
                     (ulimit -n, LimitNOFILE=) or lower max_connections"
                );
            }
            n
        }
        None => {
            let budget = open_files.map_or(u64::MAX, |limit| limit / 4 * 3 / listeners as u64);
            connections::DEFAULT_MAX_CONNECTIONS
                .min(usize::try_from(budget.max(1)).unwrap_or(usize::MAX))
        }
    };
    Ok(sluice_server::ConnectionLimits {
        header_read_timeout,
        idle_timeout,
        write_timeout,
        max_connections,
    })
}

/// Highest soft open-file limit the broker raises itself to (Linux refuses "unlimited").
#[cfg(unix)]
const MOST_OPEN_FILES: u64 = 1 << 20;

/// The process's open-file limit (the soft one, which applies), when there is one — first
/// raised to the hard limit, as servers do: the usual soft default of 1,024 would cap
/// connections far below what the system allows a process that asks.
fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let hard = limit
            .maximum
            .unwrap_or(MOST_OPEN_FILES)
            .min(MOST_OPEN_FILES);
        match limit.current {
            Some(soft) if soft < hard => {
                let raised = Rlimit {
                    current: Some(hard),
                    maximum: limit.maximum,
                };
                match setrlimit(Resource::Nofile, raised) {
                    Ok(()) => {
                        tracing::info!(
                            from = soft,
                            to = hard,
                            "raised the open-file limit to the hard limit"
                        );
                        Some(hard)
                    }
                    Err(e) => {
                        tracing::warn!(limit = soft, error = %e, "could not raise the open-file limit; connections are capped by it");
                        Some(soft)
                    }
                }
            }
            current => current,
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// A setting given as a flag (already parsed), else as text under `key` in the config file.
fn flag_or_file<T>(
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

/// The TLS configuration the flags and file name, loaded (so a bad file fails at start-up
/// and in `--check-config`), or `None` for plain text.
fn tls_settings(
    args: &ServeArgs,
    file: &FileConfig,
) -> anyhow::Result<Option<sluice_server::tls::TlsConfig>> {
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
    let files = sluice_server::tls::TlsFiles {
        cert,
        key,
        client_ca,
    };
    Ok(Some(sluice_server::tls::TlsConfig::load(files)?))
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
        metrics,
        ..
    } = settings;
    let store: Arc<dyn Store> = match choice {
        StoreChoice::Embedded => {
            let options = EmbeddedOptions {
                sync_interval,
                min_free_disk,
                ..EmbeddedOptions::default()
            };
            let (store, report) = EmbeddedStore::open(&data_dir, options)
                .with_context(|| format!("opening data directory {}", data_dir.display()))?;
            if let Some(d) = sync_interval {
                tracing::warn!(
                    sync_interval_ms = d.as_millis() as u64,
                    "relaxed durability: writes are answered before they are synced; a machine \
                     crash can lose up to this long of acknowledged writes"
                );
            }
            tracing::info!(
                dir = %data_dir.display(),
                records = report.records,
                messages = report.messages,
                torn_bytes = report.torn_bytes,
                elapsed_ms = report.elapsed.as_millis() as u64,
                "store recovered"
            );
            Arc::new(store)
        }
        StoreChoice::Postgres(url) => {
            let options = PostgresOptions {
                node_id,
                ..PostgresOptions::default()
            };
            let store = PostgresStore::open(&url, options)
                .await
                .with_context(|| format!("opening PostgreSQL store {}", redacted(&url)))?;
            tracing::info!(
                store = %redacted(&url),
                schema = store.engine().schema(),
                node = store.engine().node_id(),
                "PostgreSQL store ready"
            );
            Arc::new(store)
        }
    };
    for (name, patch) in &queues {
        let out = store
            .put_queue(name, patch)
            .await
            .with_context(|| format!("applying [[queues]] {name}"))?;
        for w in out.warnings {
            tracing::warn!(queue = %name, "{w}");
        }
        tracing::info!(queue = %name, created = out.created, "queue declared");
    }

    let scheme = if tls.is_some() { "https" } else { "http" };
    // Watched before anything is served, with or without TLS: SIGHUP (`systemctl reload`)
    // must never fall to its default action, which ends the process without draining.
    watch_sighup(tls.clone());
    let options = ServerOptions {
        keys,
        push_allow_http,
        push_allow,
        tls: tls.clone(),
        connections: settings_connections,
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
    // Served by the broker beside its own API, with the same TLS (reloaded with it on
    // SIGHUP), connection limits and shutdown; its long polls last at most 20 s.
    if let Some((name, addrs)) = sqs {
        let listener = tokio::net::TcpListener::bind(addrs.as_slice())
            .await
            .with_context(|| format!("binding --sqs-listen {name}"))?;
        let local = listener.local_addr().context("reading the bound address")?;
        println!("sluice sqs listening on {scheme}://{local}");
        tracing::info!(%local, "SQS API listening");
        if sqs_keys.is_empty() {
            tracing::warn!(
                "no [[sqs_keys]] configured: the SQS API takes any signature (loopback only)"
            );
        }
        let options = sluice_sqs::SqsOptions {
            keys: sqs_keys,
            public_url: sqs_public_url,
            tls: tls.is_some(),
            hosts: vec![name.clone()],
            ..sluice_sqs::SqsOptions::default()
        };
        broker = broker.with_http("sqs", listener, sluice_sqs::router(store, options));
    }
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .with_context(|| format!("binding {listen}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    if let Some((name, addrs)) = frames {
        let frames = tokio::net::TcpListener::bind(addrs.as_slice())
            .await
            .with_context(|| format!("binding --frames-listen {name}"))?;
        let local = frames.local_addr().context("reading the bound address")?;
        // Before the HTTP line: a script that waits for that one finds both.
        println!("sluice frames listening on {local}");
        tracing::info!(%local, "frame protocol listening");
        broker = broker.with_frames(frames);
    }
    // On stdout, for scripts and tests that ask for port 0.
    println!("sluice listening on {scheme}://{local}");
    tracing::info!(%local, "listening");
    broker
        .serve(listener, shutdown_signal())
        .await
        .context("serving")?;
    // Both engines make every write durable before answering, so nothing is left to flush;
    // dropping the broker drops the store (and releases the embedded data directory).
    tracing::info!("stopped");
    Ok(())
}

/// The addresses of the SQS listener: off loopback only with access keys to check, and with
/// TLS (or `secure`: TLS, or a TLS-terminating proxy in front and --allow-plaintext).
async fn sqs_addresses(
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
fn public_url(url: &str) -> anyhow::Result<String> {
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
struct Exposure<'a> {
    keys: &'a KeyRing,
    tls: bool,
    allow_plaintext: bool,
}

/// The addresses `addr` (given as `flag`) names, refused when they are not loopback and no
/// API key protects them, or when keys would cross the network in clear text.
async fn resolve(
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

/// Reads the TLS certificate and key again on each SIGHUP (a reload that fails keeps the
/// configuration in use and says why); without TLS a SIGHUP only says there is nothing to
/// reload. The handler is installed before this returns.
fn watch_sighup(tls: Option<sluice_server::tls::TlsConfig>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGHUP: TLS certificates reload only on restart");
                return;
            }
        };
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                let Some(tls) = &tls else {
                    tracing::info!("SIGHUP: nothing to reload (no TLS configured)");
                    continue;
                };
                match tls.reload() {
                    Ok(()) => tracing::info!(
                        cert = %tls.files().cert.display(),
                        "SIGHUP: TLS certificate and key reloaded for new connections"
                    ),
                    Err(e) => tracing::error!(
                        error = %e,
                        "SIGHUP: TLS reload failed; still serving the previous certificate"
                    ),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = tls;
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
