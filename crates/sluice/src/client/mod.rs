//! Client subcommands: every subcommand other than `serve`, `key` and `bench` is a
//! client of the HTTP API, built on the `sluice-client` crate. One module per command group:
//! `queue`, `send`, `consume` (receive, ack, nack, reject), `message`, `stats`, `task`, and
//! the operator's `dlq`, `redrive`, `audit` and `schedule`; with
//! `args` (durations, rates, sizes, queue flags), `output` (tables and JSON) and `exit`
//! (error → exit code and hint).
//!
//! Every client command takes `--url` (`SLUICE_URL`, default `http://127.0.0.1:7878`),
//! `--token` (`SLUICE_TOKEN`) and `--json` (print the broker's JSON instead of a table).
//!
//! # Exit codes
//! Scripts can test these (they are also printed by `sluice --help`):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success — including `receive` that found nothing (it prints an empty table, or `{"messages": []}`) |
//! | 1 | any other error |
//! | 2 | usage error: a bad flag or value (`--visibility 5x`), a missing argument |
//! | 3 | not found: `queue_not_found`, `message_not_found` |
//! | 4 | conflict: `receipt_stale`, `conflict` (e.g. deleting a queue that is another's DLQ) |
//! | 5 | the broker is unreachable or unavailable (connection refused, timeout, 503 `unavailable`) |
//! | 6 | auth: `unauthenticated` (401), `permission_denied` (403) |
//! | 7 | refused input: `invalid_argument`, `payload_too_large`, `idempotency_mismatch` |
//! | 8 | backpressure: `queue_full`, `rate_limited` (429) — retry later |
//!
//! Errors print `sluice: error: <message>` on stderr, and usually a `hint:` line saying what
//! to do next.

pub(crate) mod args;
mod audit;
mod confirm;
mod consume;
mod dlq;
mod exit;
mod filter;
mod governance;
mod keys;
mod message;
mod output;
mod queue;
mod redrive;
mod schedule;
mod send;
mod stats;
mod task;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use sluice_client::{Client, RetryPolicy};

pub use exit::EXIT_CODES_HELP;

/// Where the broker is and how to print: shared by every client command.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    /// The broker's base URL.
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "SLUICE_URL",
        default_value = "http://127.0.0.1:7878",
        value_name = "URL"
    )]
    pub url: String,
    /// API key secret, sent as `Authorization: Bearer`.
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "SLUICE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Print the broker's JSON answer instead of a table.
    #[arg(long, global = true, help_heading = "Connection")]
    pub json: bool,
    /// CA and client certificate for an `https://` broker.
    #[command(flatten)]
    pub tls: crate::tls_args::TlsArgs,
}

impl Conn {
    /// A client for these settings: sends carry an `Idempotency-Key`, so the few retries made
    /// while a broker restarts cannot store a message twice.
    fn client(&self) -> Result<Client, Failure> {
        let mut b = Client::builder(&self.url)
            .idempotent_sends(true)
            .user_agent(format!("sluice-cli/{}", env!("CARGO_PKG_VERSION")))
            .retry(RetryPolicy {
                max_attempts: 3,
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                max_retry_after: Duration::from_secs(5),
            });
        if let Some(t) = &self.token {
            b = b.token(t);
        }
        b = b.tls(self.tls.options().map_err(Failure::Usage)?);
        b.build().map_err(|e| Failure::Usage(e.to_string()))
    }
}

/// The client subcommands, flattened into the binary's command list.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, show, change and remove queues.
    Queue(queue::QueueArgs),
    /// Send messages: an argument, a file, or one per line of standard input.
    Send(send::SendArgs),
    /// Lease messages (and optionally acknowledge them at once).
    Receive(consume::ReceiveArgs),
    /// Acknowledge (delete) delivered messages by receipt.
    Ack(consume::AckArgs),
    /// Return a delivered message for another attempt.
    Nack(consume::NackArgs),
    /// Move a delivered message to its dead-letter queue now.
    Reject(consume::RejectArgs),
    /// Look at or delete one message by id, wherever it is.
    Message(message::MessageArgs),
    /// Queue gauges, rates and backlog trend: every queue, or one (`--watch`, `--chart`).
    Stats(stats::StatsArgs),
    /// What each key (tenant) of a queue holds: waiting, in flight, oldest, delivery rate.
    Keys(keys::KeysArgs),
    /// Task status by id.
    Task(task::TaskArgs),
    /// Browse dead-letter queues: why messages failed, grouped by error.
    Dlq(dlq::DlqArgs),
    /// Move dead letters back to work at a safe rate; list, show and cancel redrive jobs.
    Redrive(redrive::RedriveArgs),
    /// Read the audit log: operator actions and dead-letter events.
    Audit(audit::AuditArgs),
    /// Messages the broker enqueues on a cron expression or an interval.
    Schedule(schedule::ScheduleArgs),
}

/// Why a command failed, and so its exit code.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage found after parsing (exit 2).
    Usage(String),
    /// A client call failed (exit code by its error code; see the module docs).
    Api(sluice_client::Error),
    /// Some other failure (exit 1), e.g. a file that cannot be read.
    Other(String),
    /// A failure with its own exit code (e.g. one receipt of a batch ack was stale).
    Code(u8, String),
}

impl From<sluice_client::Error> for Failure {
    fn from(e: sluice_client::Error) -> Self {
        Failure::Api(e)
    }
}

/// Runs a client command and returns the process exit code, having printed any error.
pub fn run(cmd: Command) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async {
        match cmd {
            Command::Queue(a) => queue::run(a).await,
            Command::Send(a) => send::run(a).await,
            Command::Receive(a) => consume::receive(a).await,
            Command::Ack(a) => consume::ack(a).await,
            Command::Nack(a) => consume::nack(a).await,
            Command::Reject(a) => consume::reject(a).await,
            Command::Message(a) => message::run(a).await,
            Command::Stats(a) => stats::run(a).await,
            Command::Keys(a) => keys::run(a).await,
            Command::Task(a) => task::run(a).await,
            Command::Dlq(a) => dlq::run(a).await,
            Command::Redrive(a) => redrive::run(a).await,
            Command::Audit(a) => audit::run(a).await,
            Command::Schedule(a) => schedule::run(a).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => ExitCode::from(exit::report(&f)),
    }
}
