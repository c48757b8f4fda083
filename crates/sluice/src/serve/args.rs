//! The options of `sluice serve` as flags and environment variables.

use std::path::PathBuf;

use clap::Args;

/// Options of `sluice serve`. A flag wins over its environment variable, which wins over the
/// config file, which wins over the default.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:7878]. Without API keys only a loopback
    /// address is allowed. Port 0 picks a free port (the address is printed on stdout).
    #[arg(long, env = "SLUICE_LISTEN", value_name = "ADDR")]
    pub(super) listen: Option<String>,
    /// Also serve the frame protocol (send, receive and a worker's settlements over plain
    /// TCP, for clients that want the lowest cost per message) on this address [default:
    /// off]. The same API keys apply; without keys only a loopback address is allowed.
    #[arg(long, env = "SLUICE_FRAMES_LISTEN", value_name = "ADDR")]
    pub(super) frames_listen: Option<String>,
    /// Also serve the Amazon SQS API (the AWS JSON and query protocols of the AWS SDKs and
    /// the AWS CLI) on this address [default: off], over the same queues. Requests are signed
    /// with the access keys of `[[sqs_keys]]` in the config file; without them only a
    /// loopback address is allowed. It serves HTTPS with --tls-cert, as the main listener
    /// does; off loopback without TLS it needs --allow-plaintext.
    #[arg(long, env = "SLUICE_SQS_LISTEN", value_name = "ADDR")]
    pub(super) sqs_listen: Option<String>,
    /// The SQS listener's URL as clients reach it (e.g. `https://sqs.example.com`), the base
    /// of the queue URLs it answers [default: the scheme and `Host` of each request].
    #[arg(long, env = "SLUICE_SQS_PUBLIC_URL", value_name = "URL")]
    pub(super) sqs_public_url: Option<String>,
    /// Data directory of the embedded store [default: ./sluice-data].
    #[arg(long, env = "SLUICE_DATA_DIR", value_name = "DIR")]
    pub(super) data_dir: Option<PathBuf>,
    /// Relaxed durability (embedded store): answer writes once they are in the log file and
    /// sync at most this long after (e.g. 100ms), instead of waiting for each sync. A crash
    /// of the broker loses nothing; a crash of the machine can lose up to this long of
    /// acknowledged writes [default: off: every answer waits for its sync].
    #[arg(long, env = "SLUICE_SYNC_INTERVAL", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    pub(super) sync_interval: Option<std::time::Duration>,
    /// Close a connection that has not sent a complete request head within this long: from
    /// accept for a new connection (TLS handshake included), from its first byte for a later
    /// request; on the frame listener, a frame whose bytes stop for this long [default: 10s].
    #[arg(long, env = "SLUICE_HEADER_READ_TIMEOUT", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    pub(super) header_read_timeout: Option<std::time::Duration>,
    /// Close a connection with no request in progress for this long; a long poll or event
    /// stream in progress is never cut [default: 75s].
    #[arg(long, env = "SLUICE_IDLE_TIMEOUT", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    pub(super) idle_timeout: Option<std::time::Duration>,
    /// Close a connection whose client has not read any of its answer for this long: an
    /// event stream, a long poll's answer or a large page that the client stopped reading
    /// [default: 30s].
    #[arg(long, env = "SLUICE_WRITE_TIMEOUT", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    pub(super) write_timeout: Option<std::time::Duration>,
    /// Answer 503 with Retry-After to a request not answered within this long beyond its
    /// own long-poll wait (a store that cannot commit or cannot be reached), on every
    /// listener; a write so answered may or may not have been applied, and a retry with the
    /// same idempotency key or dedup id is safe [default: 10s].
    #[arg(long, env = "SLUICE_REQUEST_TIMEOUT", value_name = "DURATION",
          value_parser = crate::client::args::parse_duration)]
    pub(super) request_timeout: Option<std::time::Duration>,
    /// Most open connections on each listener; past it a new connection is closed at once,
    /// logged and counted in sluice_connections_refused_total [default: 4096, less when
    /// the open-file limit needs it].
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS", value_name = "N")]
    pub(super) max_connections: Option<usize>,
    /// Queues with series of their own in /metrics, as comma-separated name patterns (`*`
    /// matches any run of characters, e.g. `orders*,billing`); every queue counts in the
    /// `all_queues` totals [default: *].
    #[arg(
        long,
        env = "SLUICE_METRICS_QUEUES",
        value_name = "PATTERNS",
        value_delimiter = ','
    )]
    pub(super) metrics_queues: Option<Vec<String>>,
    /// Most queues with series of their own in /metrics, the first in name order among
    /// those --metrics-queues selects [default: 1000].
    #[arg(long, env = "SLUICE_METRICS_MAX_QUEUES", value_name = "N")]
    pub(super) metrics_max_queues: Option<usize>,
    /// Keys of each queue with series of their own in /metrics, the most waiting first
    /// (0: none) [default: 5].
    #[arg(long, env = "SLUICE_METRICS_TOP_KEYS", value_name = "N")]
    pub(super) metrics_top_keys: Option<usize>,
    /// TOML config file: `listen`, `frames_listen`, `data_dir`, `sync_interval`, `store`,
    /// `node_id`, `[[queues]]`, `[[keys]]`.
    #[arg(long, env = "SLUICE_CONFIG", value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// The store: `embedded` (default; a data directory on this machine) or a PostgreSQL
    /// connection string, `postgres://user@host:5432/db[?schema=name]`, which several
    /// `sluice serve` nodes can share.
    #[arg(long, env = "SLUICE_STORE", value_name = "STORE")]
    pub(super) store: Option<String>,
    /// This node's name among nodes sharing a PostgreSQL store [default: random per start].
    /// A node restarted under the same name resumes its redrive jobs at once.
    #[arg(long, env = "SLUICE_NODE_ID", value_name = "NAME")]
    pub(super) node_id: Option<String>,
    /// Free space kept on the data directory's disk (embedded store), e.g. 128MiB or 1GiB:
    /// below it new messages are refused with 503 and /readyz fails, while receives, acks
    /// and nacks go on; sends are accepted again once space is freed. 0 turns the check
    /// off [default: 128MiB].
    #[arg(long, env = "SLUICE_MIN_FREE_DISK", value_name = "SIZE",
          value_parser = crate::client::args::parse_bytes)]
    pub(super) min_free_disk: Option<u64>,
    /// Let queues push to plain `http` URLs on hosts that are not loopback (by default a
    /// push target must be `https`, or `http` on `localhost`, `127.0.0.0/8` or `::1`). For a
    /// network you trust, or a TLS-terminating proxy beside the broker.
    #[arg(long, env = "SLUICE_PUSH_ALLOW_HTTP")]
    pub(super) push_allow_http: bool,
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
    pub(super) push_allow: Vec<sluice_server::jobs::push::PushAllow>,
    /// Serve TLS on both listeners with this certificate chain (PEM: the broker's
    /// certificate, then intermediates). Sent SIGHUP, the broker reads the certificate and key
    /// again for new connections; open ones are untouched.
    #[arg(long, env = "SLUICE_TLS_CERT", value_name = "FILE")]
    pub(super) tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "SLUICE_TLS_KEY", value_name = "FILE")]
    pub(super) tls_key: Option<PathBuf>,
    /// Require a client certificate signed by one of these CAs (PEM) on every connection,
    /// before any API key is looked at [default: off]. Needs --tls-cert.
    #[arg(long, env = "SLUICE_TLS_CLIENT_CA", value_name = "FILE")]
    pub(super) tls_client_ca: Option<PathBuf>,
    /// Accept API keys on a listener that is not loopback without TLS, because a
    /// TLS-terminating proxy in front of the broker encrypts the traffic [default: off: such
    /// a listener needs --tls-cert and --tls-key].
    #[arg(long, env = "SLUICE_ALLOW_PLAINTEXT")]
    pub(super) allow_plaintext: bool,
    /// Check the flags, environment and config file without starting: print the effective
    /// settings as JSON (the store's password, key hashes, push secrets and header values
    /// redacted) and exit 0, or say what is wrong and exit 2. Neither opens the store nor
    /// binds the addresses.
    #[arg(long)]
    pub(super) check_config: bool,
}
