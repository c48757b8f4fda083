//! The TOML configuration file of `sluice serve --config FILE`.
//!
//! Every flag has a key (`listen`, `frames_listen`, `data_dir`); a flag or its `SLUICE_*` environment variable
//! wins over the file. Queues declared in `[[queues]]` are created or updated at start-up,
//! so a deployment is reproducible; `[[keys]]` turns authentication on.
//!
//! ```toml
//! listen = "0.0.0.0:7878"
//! frames_listen = "0.0.0.0:7879"   # optional: the frame protocol
//! data_dir = "/var/lib/sluice"
//! # sync_interval = "100ms"       # relaxed durability (see `sluice serve --help`)
//! # min_free_disk = "1GiB"         # refuse new messages below this much free disk
//! # push_allow_http = true         # push targets may be plain http off loopback
//! # push_allow = ["10.0.0.0/8", "hooks.internal"]  # push targets that are not public
//! tls_cert = "/etc/sluice/tls/cert.pem"   # certificate chain; reloaded on SIGHUP
//! tls_key = "/etc/sluice/tls/key.pem"
//! # tls_client_ca = "/etc/sluice/tls/clients-ca.pem"  # require client certificates
//! # allow_plaintext = true        # keys off loopback without TLS: a TLS proxy is in front
//! # header_read_timeout = "10s"   # a request's headers (or a stalled frame), TLS included
//! # idle_timeout = "75s"          # no request in progress (long polls are in progress)
//! # write_timeout = "30s"         # an answer (event stream, page) the client stopped reading
//! # request_timeout = "10s"       # beyond a long poll's wait: then a 503 with Retry-After
//! # metrics_queues = ["orders*"]  # queues with /metrics series of their own (default all)
//! # metrics_max_queues = 1000     # at most this many of them
//! # metrics_top_keys = 5          # and of each, the keys with the most waiting
//! # max_connections = 4096        # per listener; more are closed at once
//! # or, for several broker nodes sharing one database:
//! # store = "postgres://sluice@db.internal:5432/sluice"
//!
//! [[queues]]
//! name = "orders"
//! visibility_timeout_ms = 60000
//! max_receive_count = 3
//! rate_limit = { limit = 100, period_ms = 60000 }
//!
//! [[keys]]
//! name = "checkout"
//! role = "producer"            # admin | operator | producer | consumer
//! queues = ["orders", "orders.*"]
//! sha256 = "…"                 # from `sluice key hash` / `sluice key generate`
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use sluice_core::QueueName;
use sluice_server::ApiKeyConfig;
use sluice_wire::QueueConfigRequest;

/// The file's contents.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Address to listen on.
    pub listen: Option<String>,
    /// Address of the frame protocol's listener (off when absent).
    pub frames_listen: Option<String>,
    /// Address of the SQS-compatible listener (off when absent).
    pub sqs_listen: Option<String>,
    /// The SQS listener's URL as clients reach it, the base of queue URLs.
    pub sqs_public_url: Option<String>,
    /// Data directory of the embedded store.
    pub data_dir: Option<PathBuf>,
    /// Relaxed durability of the embedded store: the longest a write may wait for its sync
    /// after it was answered (e.g. "100ms"); absent, every answer waits for its sync.
    pub sync_interval: Option<String>,
    /// The store: `embedded` (the default) or a `postgres://` connection string.
    pub store: Option<String>,
    /// This node's name among broker nodes sharing a PostgreSQL database.
    pub node_id: Option<String>,
    /// Let queues push over plain `http` to hosts that are not loopback.
    pub push_allow_http: Option<bool>,
    /// Networks (CIDRs, addresses) and host names push may call although they are not
    /// public addresses.
    pub push_allow: Option<Vec<String>>,
    /// Free space kept on the data directory's disk (e.g. "128MiB"); below it new messages
    /// are refused.
    pub min_free_disk: Option<String>,
    /// The broker's certificate chain (PEM), for TLS on both listeners.
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM).
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates must be signed by; absent, clients
    /// present none.
    pub tls_client_ca: Option<PathBuf>,
    /// Serve API keys off loopback without TLS, because a TLS-terminating proxy is in front.
    pub allow_plaintext: Option<bool>,
    /// How long a connection may take to send a complete request head (e.g. "10s").
    pub header_read_timeout: Option<String>,
    /// How long a connection may stay open with no request in progress (e.g. "75s").
    pub idle_timeout: Option<String>,
    /// How long an answer's write may make no progress before the connection closes (e.g.
    /// "30s").
    pub write_timeout: Option<String>,
    /// How long a request may take beyond its long-poll wait before it is answered 503
    /// (e.g. "10s").
    pub request_timeout: Option<String>,
    /// Most open connections on each listener.
    pub max_connections: Option<usize>,
    /// Queue name patterns with series of their own in /metrics.
    pub metrics_queues: Option<Vec<String>>,
    /// Most queues with series of their own in /metrics.
    pub metrics_max_queues: Option<usize>,
    /// Keys of each queue with series of their own in /metrics.
    pub metrics_top_keys: Option<usize>,
    /// Queues to create or update at start-up.
    #[serde(default)]
    pub queues: Vec<toml::Table>,
    /// API keys.
    #[serde(default)]
    pub keys: Vec<ApiKeyConfig>,
    /// Access keys of the SQS endpoint (SigV4).
    #[serde(default)]
    pub sqs_keys: Vec<sluice_sqs::SqsKey>,
}

/// A queue declaration: its name and the config fields of `PUT /v1/queues/{q}`.
#[derive(Debug)]
pub struct QueueDecl {
    /// The queue.
    pub name: QueueName,
    /// Its settings.
    pub config: QueueConfigRequest,
}

impl FileConfig {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
    }

    /// The `[[queues]]` declarations, checked.
    pub fn queue_decls(&self) -> anyhow::Result<Vec<QueueDecl>> {
        let mut out = Vec::new();
        for (i, table) in self.queues.iter().enumerate() {
            let mut table = table.clone();
            let Some(name) = table.remove("name") else {
                bail!("[[queues]] entry {} has no name", i + 1);
            };
            let Some(name) = name.as_str() else {
                bail!("[[queues]] entry {}: name must be a string", i + 1);
            };
            let name =
                QueueName::new(name).with_context(|| format!("[[queues]] entry {}", i + 1))?;
            let config: QueueConfigRequest = toml::Value::Table(table)
                .try_into()
                .with_context(|| format!("[[queues]] {name}"))?;
            config
                .to_patch()
                .with_context(|| format!("[[queues]] {name}"))?;
            out.push(QueueDecl { name, config });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_and_keys_parse() {
        let c: FileConfig = toml::from_str(
            r#"
            listen = "127.0.0.1:1"
            [[queues]]
            name = "orders"
            max_receive_count = 2
            rate_limit = { limit = 5, period_ms = 1000 }
            [[keys]]
            name = "k"
            role = "consumer"
            queues = ["orders.*"]
            sha256 = "00"
            "#,
        )
        .unwrap();
        let q = c.queue_decls().unwrap();
        assert_eq!(q[0].name.as_str(), "orders");
        assert_eq!(q[0].config.max_receive_count, Some(2));
        assert_eq!(c.keys[0].queues, vec!["orders.*".to_owned()]);
    }

    #[test]
    fn unknown_queue_fields_are_refused() {
        let c: FileConfig =
            toml::from_str("[[queues]]\nname = \"a\"\nvisiblity_timeout_ms = 1\n").unwrap();
        assert!(c.queue_decls().is_err());
    }
}
