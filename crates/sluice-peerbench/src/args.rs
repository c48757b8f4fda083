//! The command line: the systems known, the options, and the checks they must pass before
//! anything runs.

use std::path::PathBuf;

use anyhow::bail;
use clap::Parser;

use crate::load;

/// Systems in their default order.
pub(crate) const ALL: [&str; 10] = [
    "sluice",
    "sluice-frames",
    "sluice-relaxed",
    "sluice-postgres",
    "sluice-postgres-frames",
    "rabbitmq",
    "nats",
    "postgres",
    "redis",
    "redis-everysec",
];

/// Command-line options.
#[derive(Debug, Parser)]
#[command(version, about)]
pub(crate) struct Args {
    /// Messages counted per system and batch size.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) messages: u64,
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1,100", value_delimiter = ',')]
    pub(crate) batch: Vec<usize>,
    /// What pads each 1 KiB body after its send time and number: `filler` (one repeated
    /// letter, very compressible) or `random` (fresh random letters and digits, next to
    /// incompressible; costs the tool about a microsecond per body).
    #[arg(long, value_enum, default_value_t = load::Fill::Filler)]
    pub(crate) body: load::Fill,
    /// Concurrent producers.
    #[arg(long, default_value_t = 4)]
    pub(crate) producers: usize,
    /// Concurrent consumers.
    #[arg(long, default_value_t = 4)]
    pub(crate) consumers: usize,
    /// Messages sent and acked before the measured phase, not counted.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) warmup: u64,
    /// Systems to run, comma-separated, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sluice,sluice-frames,sluice-relaxed,sluice-postgres,sluice-postgres-frames,rabbitmq,nats,postgres,redis,redis-everysec"
    )]
    pub(crate) systems: Vec<String>,
    /// Times each system runs per batch size (alternating); the median run is reported.
    #[arg(long, default_value_t = 1)]
    pub(crate) rounds: usize,
    /// Longest one phase (warm-up or measured) of one system may take, in seconds.
    #[arg(long, default_value_t = 120)]
    pub(crate) timeout: u64,
    /// A running Sluice broker; without it the `sluice` binary is started on a temporary
    /// data directory and an ephemeral port.
    #[arg(long, value_name = "URL")]
    pub(crate) sluice_url: Option<String>,
    /// The frame listener (`host:port`) of the broker of --sluice-url, for the
    /// `sluice-frames` row (started with `sluice serve --frames-listen`).
    #[arg(long, value_name = "ADDR")]
    pub(crate) sluice_frames: Option<String>,
    /// A running broker with relaxed durability (`sluice serve --sync-interval 1s
    /// --frames-listen …`) for the `sluice-relaxed` row, with its frame listener in
    /// --sluice-relaxed-frames; without it the tool starts one.
    #[arg(long, value_name = "URL", requires = "sluice_relaxed_frames")]
    pub(crate) sluice_relaxed_url: Option<String>,
    /// The frame listener of --sluice-relaxed-url.
    #[arg(long, value_name = "ADDR", requires = "sluice_relaxed_url")]
    pub(crate) sluice_relaxed_frames: Option<String>,
    /// A running Sluice broker on the PostgreSQL engine for the `sluice-postgres` row; without
    /// it the `sluice` binary is started with `--store` on the database of `--pg-*`.
    #[arg(long, value_name = "URL")]
    pub(crate) sluice_pg_url: Option<String>,
    /// The frame listener of --sluice-pg-url, for the `sluice-postgres-frames` row.
    #[arg(long, value_name = "ADDR", requires = "sluice_pg_url")]
    pub(crate) sluice_pg_frames: Option<String>,
    /// The `sluice` binary to start when --sluice-url is not given.
    #[arg(long, default_value = "target/release/sluice")]
    pub(crate) sluice_bin: PathBuf,
    /// RabbitMQ URL.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub(crate) rabbitmq_url: String,
    /// NATS URL (JetStream must be on).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    pub(crate) nats_url: String,
    /// PostgreSQL host.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) pg_host: String,
    /// PostgreSQL port.
    #[arg(long, default_value_t = 5432)]
    pub(crate) pg_port: u16,
    /// PostgreSQL user of the `sluice-postgres` broker (the `postgres` peer tries `postgres`,
    /// then `root`).
    #[arg(long, default_value = "postgres")]
    pub(crate) pg_user: String,
    /// PostgreSQL database (schemas `peerbench` and `peerbench_sluice` are created in it and
    /// dropped afterwards).
    #[arg(long, default_value = "test")]
    pub(crate) pg_db: String,
    /// Redis URL.
    #[arg(long, default_value = "redis://127.0.0.1:6379/")]
    pub(crate) redis_url: String,
    /// How Sluice consumers acknowledge: `separate` (an ack request of their own while they
    /// receive, as the worker SDK's ack batcher does) or `in-receive` (the last batch's
    /// receipts ride on the next receive: one request per batch fewer, but each receive then
    /// waits for its acks' sync).
    #[arg(long, value_enum, default_value_t = SluiceAcks::Separate)]
    pub(crate) sluice_acks: SluiceAcks,
    /// Print the results as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write an SVG bar chart of throughput per system and batch size to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
    /// Sluice alone under a backlog, instead of the side-by-side run: for each of these
    /// queue depths (e.g. 1000000,10000000) fill a fresh broker, measure throughput at each
    /// --batch on top of the backlog, kill it, and measure recovery time and RAM per queued
    /// message. Needs about 2.4 KB of free disk per queued message; the data is deleted
    /// afterwards.
    #[arg(long, value_delimiter = ',', value_name = "N,…")]
    pub(crate) backlog: Vec<u64>,
    /// Where the backlog mode puts its data directories (default: the system's temporary
    /// directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) backlog_dir: Option<PathBuf>,
    /// Longest the backlog mode may take to fill one depth, or to recover it, in seconds.
    #[arg(long, default_value_t = 1800)]
    pub(crate) fill_timeout: u64,
    /// Run nothing: print the table (and write --svg) from the `--json` output of an
    /// earlier run.
    #[arg(long, value_name = "JSON_FILE")]
    pub(crate) replot: Option<PathBuf>,
}

/// How the Sluice rows' consumers acknowledge (`--sluice-acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SluiceAcks {
    /// An ack request of their own, in flight while the next receive runs.
    Separate,
    /// Within the next receive (its `ack` field).
    InReceive,
}

impl Args {
    /// Refuses unknown systems and counts out of range, before anything starts.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        for s in &self.systems {
            if !ALL.contains(&s.as_str()) {
                bail!("unknown system {s:?}; known: {}", ALL.join(", "));
            }
        }
        if self.batch.iter().any(|b| *b == 0 || *b > 1000) {
            bail!("batch sizes must be 1 – 1000");
        }
        if self.producers == 0 || self.consumers == 0 || self.messages == 0 {
            bail!("--producers, --consumers and --messages must be at least 1");
        }
        Ok(())
    }
}
