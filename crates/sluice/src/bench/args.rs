//! The options of `sluice bench`.

use std::time::Duration;

use clap::Args;

use crate::client::args::parse_duration;

/// Options of `sluice bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Base URL of the broker. Only this URL is contacted.
    #[arg(
        long,
        env = "SLUICE_URL",
        default_value = "http://127.0.0.1:7878",
        value_name = "URL"
    )]
    pub(super) url: String,
    /// Address (`host:port`) of the broker's frame protocol listener (`sluice serve
    /// --frames-listen`): producers and consumers then send, receive and acknowledge over it
    /// instead of HTTP. The queue is still created and purged over `--url`.
    #[arg(long, value_name = "HOST:PORT")]
    pub(super) frames: Option<String>,
    /// API key, sent as `Authorization: Bearer`. It needs the send, consume and purge rights
    /// on the queue (an `admin` key, or `operator` + `producer` + `consumer` rights).
    #[arg(
        long,
        env = "SLUICE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub(super) token: Option<String>,
    /// CA and client certificate for an `https://` broker (its frame listener then speaks
    /// TLS too).
    #[command(flatten)]
    pub(super) tls: crate::tls_args::TlsArgs,
    /// Queue to load. Created if missing and purged at the start: use a dedicated queue.
    #[arg(long, default_value = "bench", value_name = "NAME")]
    pub(super) queue: String,
    /// Concurrent producers: each has one request in flight at a time, or with --rate up to
    /// 64 (open loop).
    #[arg(long, default_value_t = 4, value_name = "P",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(super) producers: u32,
    /// Concurrent consumers (each receives up to --batch messages, then acks them). 0 sends
    /// only.
    #[arg(long, default_value_t = 4, value_name = "C",
          value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub(super) consumers: u32,
    /// Messages per send request, most messages per receive and receipts per ack (1 – 1000).
    /// With 1 the single-message forms of send and ack are used.
    #[arg(long, default_value_t = 1, value_name = "B",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(super) batch: u32,
    /// Size of each message body in bytes (a JSON object holding the send time and padding;
    /// at least 64).
    #[arg(long, default_value_t = 1024, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(64..=16 * 1024 * 1024))]
    pub(super) body_bytes: u64,
    /// Length of the measured window, e.g. `10s`, `500ms`, `2m` [default: 10s, or 5m as an
    /// upper bound with --messages].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(super) duration: Option<Duration>,
    /// End the measured window after this many messages were sent in it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) messages: Option<u64>,
    /// Load before the measured window, not counted.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub(super) warmup: Duration,
    /// Target send rate in messages per second across all producers, paced open-loop (for
    /// latency at a fixed load). Without it producers send as fast as the broker answers.
    #[arg(long, value_name = "MSG_PER_S", value_parser = parse_rate)]
    pub(super) rate: Option<f64>,
    /// Print the report as JSON (and no progress line).
    #[arg(long)]
    pub(super) json: bool,
    /// Measure push delivery instead of consumers: serve a 204 endpoint on loopback, make it
    /// the queue's push target with --consumers as its concurrency, send --messages (default
    /// 20,000) up front while the queue is paused, then time how fast the broker pushes them
    /// all. The broker must run on this machine (the endpoint listens on 127.0.0.1).
    #[arg(long, conflicts_with_all = ["frames", "rate"])]
    pub(super) push: bool,
    /// Spread the messages over this many FIFO message groups (`g0`, `g1`, …, in turn), so
    /// that each group is delivered in order with one message in flight (over HTTP).
    #[arg(long, value_name = "N", conflicts_with = "frames",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) groups: Option<u32>,
    /// Spread the messages over this many keys (`k0`, `k1`, …, in turn): deliveries go
    /// round-robin across them (over HTTP), which measures what fair delivery costs.
    #[arg(long, value_name = "N", conflicts_with = "frames",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) keys: Option<u32>,
    /// Measure fair delivery instead of throughput: one key with --noisy-backlog messages
    /// waiting, --quiet-keys keys sending one message a second each for --duration [default
    /// 20s], --consumers consumers receiving up to --batch at a time and spending --work on
    /// each message. Run with keys, then without them (on new queues NAME-keyed and
    /// NAME-unkeyed, deleted afterwards), and report how long the quiet keys' messages waited
    /// (send → delivery).
    #[arg(long, conflicts_with_all = ["frames", "rate", "push", "groups", "keys", "messages"])]
    pub(super) noisy_neighbour: bool,
    /// Messages waiting on the noisy key when --noisy-neighbour's window starts.
    #[arg(long, default_value_t = 100_000, value_name = "N", requires = "noisy_neighbour",
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(super) noisy_backlog: u64,
    /// Keys sending one message a second each in --noisy-neighbour's window.
    #[arg(long, default_value_t = 100, value_name = "N", requires = "noisy_neighbour",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(super) quiet_keys: u32,
    /// Time a --noisy-neighbour consumer spends on each message before acknowledging it (the
    /// task's own work), e.g. `2ms`.
    #[arg(long, default_value = "2ms", value_parser = parse_duration, value_name = "DURATION",
          requires = "noisy_neighbour")]
    pub(super) work: Duration,
}

/// A rate in messages per second, with or without a `/s` or `/sec` suffix.
pub(super) fn parse_rate(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let num = s
        .strip_suffix("/s")
        .or_else(|| s.strip_suffix("/sec"))
        .unwrap_or(s);
    match num.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "\"{s}\" is not a rate; give messages per second, e.g. 5000"
        )),
    }
}
