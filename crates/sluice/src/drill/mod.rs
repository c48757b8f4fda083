//! `sluice drill`: a reproducible failure drill that proves a retry and DLQ setup (issue 7).
//!
//! The scenario: an enrollment system holds a seat for `--hold`; a reservation-expiry task,
//! delayed to the end of the hold, calls an upstream API to release the seat. The drill starts
//! that upstream itself (a real HTTP server on a loopback port, see [`upstream`]) with a quota,
//! random 429s and lost replies, enqueues the expiry tasks plus poison messages and undecodable
//! bodies ([`workload`]), runs a worker of the Rust SDK whose rate limiter is set from the
//! quota, takes the upstream down for `--outage` mid-run, then acts as the operator and
//! redrives the DLQ in bounded batches ([`operator`]). It samples the queue every scenario
//! minute and ends by judging four criteria ([`criteria`]) and writing a report ([`report`]).
//!
//! `--time-scale N` compresses time: every duration and rate is in scenario time and scaled,
//! so the verdict does not depend on N. Every loop is bounded by a deadline (`--deadline`, by
//! default three times the expected run plus a minute of real time).

pub mod adaptive;
pub mod broker;
pub mod criteria;
pub mod operator;
pub mod report;
pub mod scenario;
pub mod session;
pub mod tenants;
pub mod upstream;
pub mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sluice_client::Client;
use sluice_client::wire::{BrowseQuery, MessageView};

use crate::client::args::parse_duration;
use adaptive::Mode;
use broker::DrillBroker;
use scenario::{Clock, Scenario};

/// Options of `sluice drill`. Durations and rates are in scenario time.
#[derive(Debug, Clone, Args)]
pub struct DrillArgs {
    /// Run against this broker instead of starting one in-process on a temporary data dir.
    #[arg(long, value_name = "URL")]
    pub broker: Option<String>,
    /// API key for --broker (it needs the admin role, or operator + producer + consumer).
    #[arg(
        long,
        env = "SLUICE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// CA and client certificate for an `https://` --broker.
    #[command(flatten)]
    pub tls: crate::tls_args::TlsArgs,
    /// Write the timeline chart to this file (SVG; a name ending in .html gets an HTML page).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Scenario seconds per real second: 60 turns minutes into seconds; 1 is real time. The
    /// default runs the default scenario (about 205 scenario minutes) in about two minutes
    /// [default: 100; with --tenants 30, as it runs four scenarios at once].
    #[arg(long, value_name = "N")]
    pub time_scale: Option<f64>,
    /// Reservations (valid expiry tasks) [default: 10000; with --tenants 9000].
    #[arg(long, value_name = "N")]
    pub reservations: Option<u32>,
    /// How long a seat is held before its expiry task runs [default: 20m; with --tenants 5m].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub hold: Option<Duration>,
    /// Reservations are made evenly (with jitter) over this window. The default, 3 h, makes
    /// 56 expirations a minute: a system sized with headroom under the upstream's quota, as a
    /// team would size it, so retries are not stuck behind a standing backlog [default: 3h;
    /// with --tenants 1h, 150 a minute over 20 tenants].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub arrival_window: Option<Duration>,
    /// Upstream calls allowed per minute (429 with Retry-After beyond).
    #[arg(long, default_value_t = 100, value_name = "CALLS")]
    pub quota: u32,
    /// Percentage of upstream calls answered 429 at random.
    #[arg(long = "random-429", default_value_t = 2.0, value_name = "PCT")]
    pub random_429: f64,
    /// The Retry-After of those random 429s.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub random_retry_after: Duration,
    /// Percentage of applied releases whose reply is lost (the upstream answers 502).
    #[arg(long, default_value_t = 1.0, value_name = "PCT")]
    pub lost_replies: f64,
    /// Poison messages (malformed reservation ids).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub poison: u32,
    /// Raw bodies that are not a task envelope.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub undecodable: u32,
    /// How long the upstream is down (503 to every call).
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub outage: Duration,
    /// When the outage starts [default: mid-run, hold + arrival window / 2].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub outage_at: Option<Duration>,
    /// The retry budget: the queue's max_receive_count (0 = unlimited, no DLQ routing).
    #[arg(long, alias = "retry-budget", default_value_t = 3, value_name = "N")]
    pub max_receive_count: u32,
    /// First retry delay after a transient failure (the queue's backoff_base).
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub backoff_base: Duration,
    /// Cap of the retry delay (the queue's backoff_max).
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub backoff_max: Duration,
    /// Lease length of the worker's deliveries.
    #[arg(long, default_value = "2m", value_parser = parse_duration, value_name = "DURATION")]
    pub visibility: Duration,
    /// Share of the quota the worker's rate limiter is set to.
    #[arg(long, default_value_t = 0.9, value_name = "FRACTION")]
    pub worker_share: f64,
    /// Messages per redrive job. With a pause of at least a minute after each job no minute
    /// sees more moves than this: keep it under the quota.
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub redrive_batch: u64,
    /// How long the operator waits after each redrive job before the next.
    #[arg(long, default_value = "1m", value_parser = parse_duration, value_name = "DURATION")]
    pub redrive_pause: Duration,
    /// Redrive rate, messages per minute (keep it under the quota).
    #[arg(long, default_value_t = 50, value_name = "PER_MIN")]
    pub redrive_rate: u32,
    /// The operator pauses the redrive while 429s exceed this percentage of the last
    /// minute's calls.
    #[arg(long, default_value_t = 10.0, value_name = "PCT")]
    pub redrive_stop_429: f64,
    /// Seed of the random faults.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Real-time cap of the run [default: 3 x the expected run + 60 s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub deadline: Option<Duration>,
    /// The queue governs itself: adaptive delivery rate and circuit breaker on, and a worker
    /// without a rate limiter (it does not know the quota). The tuned run runs beside it as
    /// the yardstick, and four more criteria judge it.
    #[arg(long)]
    pub adaptive: bool,
    /// With --adaptive, the rate the queue starts at and never goes below (per minute).
    #[arg(long, default_value_t = 10, value_name = "PER_MIN")]
    pub adaptive_min: u32,
    /// With --adaptive, the most the queue may deliver (per minute): a bound far above any
    /// quota you expect, not the quota.
    #[arg(long, default_value_t = 1000, value_name = "PER_MIN")]
    pub adaptive_max: u32,
    /// With --adaptive, skip the tuned run beside it (criterion 8 then has no yardstick).
    #[arg(long)]
    pub no_reference: bool,
    /// Many tenants on one queue, each with its own upstream quota (N tenants, 20 by default,
    /// at least 4): the scenario runs with per-key adaptive rates and breakers
    /// (`"scope": "key"`) and with one queue-wide rate and breaker, each with and without one
    /// tenant's outage, and the two are judged side by side. Quotas come from the tenants'
    /// shares of the traffic, so it takes neither --quota nor --adaptive.
    #[arg(
        long,
        num_args = 0..=1,
        default_missing_value = "20",
        value_name = "N",
        conflicts_with_all = ["quota", "adaptive", "no_reference", "worker_share"]
    )]
    pub tenants: Option<u32>,
    /// Misconfiguration on purpose: send releases without an idempotency key (criterion 1
    /// should fail).
    #[arg(long)]
    pub no_idempotency_key: bool,
    /// Misconfiguration on purpose: retry permanent errors like transient ones; with a large
    /// --max-receive-count poison messages never reach the DLQ (criterion 2 should fail).
    #[arg(long)]
    pub retry_permanent_errors: bool,
}

/// One sample of the main queue, every scenario minute.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Scenario minute.
    pub minute: f64,
    /// Visible (the backlog).
    pub visible: u64,
    /// Delayed (not due yet, or in backoff).
    pub delayed: u64,
    /// In flight.
    pub in_flight: u64,
    /// DLQ depth.
    pub dlq: u64,
    /// A governed queue's adaptive rate and breaker.
    pub flow: adaptive::FlowSample,
}

/// Everything the run observed, for the criteria and the report.
#[derive(Debug)]
pub struct Observed {
    /// The scenario.
    pub scenario: Scenario,
    /// How the queue was set up.
    pub mode: Mode,
    /// A governed queue's breaker transitions: (scenario minute, state entered).
    pub breaker_transitions: Vec<(f64, String)>,
    /// The samples.
    pub samples: Vec<Sample>,
    /// Upstream calls: (scenario minute, kind).
    pub calls: Vec<(f64, upstream::CallKind)>,
    /// Releases applied per valid id (0 when never).
    pub applied: std::collections::HashMap<String, u32>,
    /// Repeats absorbed by the idempotency key.
    pub repeats: u64,
    /// The plan.
    pub plan: workload::Plan,
    /// The DLQ's messages at the end.
    pub dlq: Vec<MessageView>,
    /// The unprocessable queue's messages at the end.
    pub unprocessable: Vec<MessageView>,
    /// The operator's log.
    pub operator: operator::OperatorLog,
    /// Scenario minute when the work was done (None: not before the deadline).
    pub drained_at: Option<f64>,
    /// Valid reservations not yet released at recovery.
    pub pending_at_recovery: u64,
    /// Scenario minutes the run lasted.
    pub ended_at: f64,
    /// Messages the main queue sent to its DLQ over the run (poison and valid), from the
    /// broker's totals.
    pub dead_lettered: u64,
    /// Messages redriven back into the main queue over the run, from the broker's totals.
    pub redriven: u64,
    /// The queue.
    pub queue: String,
    /// Real seconds the run took.
    pub real_secs: f64,
}

impl Observed {
    /// Upstream calls of `kind`.
    pub fn calls_of(&self, kind: upstream::CallKind) -> usize {
        self.calls.iter().filter(|(_, k)| *k == kind).count()
    }
}

/// Runs `sluice drill`: exit 0 when every criterion passes, 1 when one fails or the drill
/// could not run.
pub fn run(args: DrillArgs) -> ExitCode {
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
    match rt.block_on(drill(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("sluice: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn browse_all(client: &Client, queue: &str) -> anyhow::Result<Vec<MessageView>> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..1000 {
        let page = client
            .browse(
                queue,
                &BrowseQuery {
                    limit: Some(1000),
                    cursor: cursor.take(),
                    ..BrowseQuery::default()
                },
            )
            .await
            .with_context(|| format!("browsing {queue}"))?;
        out.extend(page.messages);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(out)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

async fn drill(args: DrillArgs) -> anyhow::Result<bool> {
    let sc = Scenario::from_args(&args)?;
    // The broker stops last.
    let broker = DrillBroker::start(&args).await?;
    let (client, url) = (&broker.client, &broker.url);
    if let Some(n) = args.tenants {
        let passed = tenants::run(client, url, &sc, n, &args).await;
        broker.stop();
        return passed;
    }
    let expected_real =
        Clock::new(sc.scale).real(Duration::from_secs_f64(sc.expected_minutes() * 60.0));
    let deadline_real = args
        .deadline
        .unwrap_or(expected_real * 3 + Duration::from_secs(60));
    let (main, reference) = if !sc.adaptive {
        (
            session::run(client, url, &sc, Mode::Tuned, deadline_real).await?,
            None,
        )
    } else if sc.reference {
        // The tuned run beside it, on its own queue and upstream, as the yardstick.
        let (a, t) = tokio::join!(
            session::run(client, url, &sc, Mode::Adaptive, deadline_real),
            session::run(client, url, &sc, Mode::Tuned, deadline_real),
        );
        (a?, Some(t?))
    } else {
        (
            session::run(client, url, &sc, Mode::Adaptive, deadline_real).await?,
            None,
        )
    };
    broker.stop();

    let mut verdicts = criteria::judge(&main);
    if main.mode == Mode::Adaptive {
        verdicts.extend(adaptive::judge(&main, reference.as_ref()));
    }
    if let Some(r) = &reference {
        print!("{}", report::reference_summary(r, &criteria::judge(r)));
    }
    print!("{}", report::summary(&main, &verdicts));
    if let Some(path) = &args.report {
        let text = report::chart(
            &main,
            reference.as_ref(),
            &verdicts,
            path.extension().is_some_and(|e| e == "html"),
        );
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(verdicts.iter().all(|v| v.pass))
}
