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

pub mod criteria;
pub mod operator;
pub mod report;
pub mod scenario;
pub mod upstream;
pub mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use clap::Args;
use sluice_client::wire::{BrowseQuery, MessageView, QueueConfigRequest};
use sluice_client::{Client, RateLimiter};

use crate::client::args::parse_duration;
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
    /// default runs the default scenario (about 205 scenario minutes) in about two minutes.
    #[arg(long, default_value_t = 100.0, value_name = "N")]
    pub time_scale: f64,
    /// Reservations (valid expiry tasks).
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub reservations: u32,
    /// How long a seat is held before its expiry task runs.
    #[arg(long, default_value = "20m", value_parser = parse_duration, value_name = "DURATION")]
    pub hold: Duration,
    /// Reservations are made evenly (with jitter) over this window. The default, 3 h, makes
    /// 56 expirations a minute: a system sized with headroom under the upstream's quota, as a
    /// team would size it, so retries are not stuck behind a standing backlog.
    #[arg(long, default_value = "3h", value_parser = parse_duration, value_name = "DURATION")]
    pub arrival_window: Duration,
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
}

/// Everything the run observed, for the criteria and the report.
#[derive(Debug)]
pub struct Observed {
    /// The scenario.
    pub scenario: Scenario,
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
    // The broker and the upstream stop after the worker, so that it can hand unfinished tasks
    // back instead of waiting for a broker that is gone.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (worker_stop_tx, worker_stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };

    // The broker: given, or in-process on a temporary data dir.
    let mut _data_dir = None;
    let url = match &args.broker {
        Some(u) => u.clone(),
        None => {
            let dir = tempfile::Builder::new()
                .prefix("sluice-drill-")
                .tempdir()
                .context("creating a temporary data dir")?;
            let (store, _) = sluice_embedded::EmbeddedStore::open(
                dir.path(),
                sluice_embedded::EmbeddedOptions::default(),
            )
            .context("opening the temporary store")?;
            let store: Arc<dyn sluice_core::Store> = Arc::new(store);
            let broker = sluice_server::Broker::new(store, sluice_server::ServerOptions::default());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let rx = stop_rx.clone();
            tokio::spawn(async move {
                if let Err(e) = broker.serve(listener, stopped(rx)).await {
                    tracing::error!(error = %e, "drill broker stopped");
                }
            });
            _data_dir = Some(dir);
            format!("http://{addr}")
        }
    };
    let mut cb = Client::builder(&url)
        .idempotent_sends(true)
        .tls(args.tls.options().map_err(anyhow::Error::msg)?);
    if let Some(t) = &args.token {
        cb = cb.token(t.clone());
    }
    let client = cb.build()?;
    client
        .healthz()
        .await
        .with_context(|| format!("reaching the broker at {url}"))?;

    let clock_probe = Clock::new(sc.scale);
    let minute_real = clock_probe.real(Duration::from_secs(60));
    let upstream = upstream::Upstream::start(
        upstream::UpstreamConfig {
            quota: sc.quota_per_min,
            window: minute_real,
            random_429: sc.random_429_pct / 100.0,
            lost_every: if sc.lost_reply_pct > 0.0 {
                (100.0 / sc.lost_reply_pct).round().max(1.0) as u64
            } else {
                0
            },
            random_retry_after: clock_probe.real(sc.random_retry_after),
            seed: sc.seed,
        },
        stopped(stop_rx.clone()),
    )
    .await?;

    let queue = format!("drill-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let dlq = format!("{queue}.dlq");
    let unprocessable = format!("{queue}.unprocessable");
    client
        .put_queue(
            &queue,
            &QueueConfigRequest {
                visibility_timeout_ms: Some(ms(clock_probe.real(sc.visibility)).max(1000)),
                max_receive_count: Some(sc.max_receive_count),
                backoff_base_ms: Some(ms(clock_probe.real(sc.backoff_base))),
                backoff_max_ms: Some(ms(clock_probe.real(sc.backoff_max))),
                ..QueueConfigRequest::default()
            },
        )
        .await
        .with_context(|| format!("creating queue {queue}"))?;

    let expected_real = clock_probe.real(Duration::from_secs_f64(sc.expected_minutes() * 60.0));
    let deadline_real = args
        .deadline
        .unwrap_or(expected_real * 3 + Duration::from_secs(60));
    println!(
        "sluice drill: queue {queue} on {url}, upstream on http://{} \
         (quota {}/min, time scale {}): expect about {:.0} s, at most {:.0} s",
        upstream.addr,
        sc.quota_per_min,
        sc.scale,
        expected_real.as_secs_f64(),
        deadline_real.as_secs_f64()
    );

    // The worker, its limiter set from the quota.
    let rate_real = sc.worker_rate_real();
    let limiter = RateLimiter::new(
        (rate_real * 10.0).round().max(1.0) as u32,
        Duration::from_secs(10),
    )?;
    let concurrency = ((rate_real * 0.25).ceil() as usize).clamp(4, 64);
    let wp = workload::WorkerPlan {
        concurrency,
        limiter,
        upstream_url: upstream.url(),
        idempotency_key: !sc.no_idempotency_key,
        retry_permanent: sc.retry_permanent_errors,
        visibility: clock_probe.real(sc.visibility).max(Duration::from_secs(1)),
        poll_wait: Duration::from_millis(200),
    };
    let worker = workload::worker(client.clone(), &queue, &wp)?;

    // Go.
    let clock = Clock::new(sc.scale);
    let deadline = clock.start + deadline_real;
    let plan = workload::plan(&sc, &clock, SystemTime::now());
    let sent = workload::enqueue(&client, &queue, &plan, &clock).await?;
    println!(
        "enqueued {sent} expiry tasks: {} reservations, {} poison, {} undecodable; worker \
         concurrency {concurrency}, limiter {:.0}/min",
        plan.valid_ids.len(),
        plan.poison_ids.len(),
        plan.raw_bodies.len(),
        sc.worker_per_min()
    );
    let worker_task = tokio::spawn(worker.run_until(stopped(worker_stop_rx)));

    // The outage.
    let (o_start, o_end) = sc.outage_min();
    let up2 = upstream.clone();
    let valid: Vec<String> = plan.valid_ids.clone();
    let outage_task = tokio::spawn(async move {
        tokio::time::sleep_until(clock.instant_of(o_start).into()).await;
        up2.set_paused(true);
        tokio::time::sleep_until(clock.instant_of(o_end).into()).await;
        up2.set_paused(false);
        let b = up2.books();
        valid
            .iter()
            .filter(|id| b.applied.get(*id).copied().unwrap_or(0) == 0)
            .count() as u64
    });

    // The operator.
    let op_stop = Arc::new(AtomicBool::new(false));
    let op_task = tokio::spawn(operator::run(
        client.clone(),
        dlq.clone(),
        sc.clone(),
        clock,
        upstream.clone(),
        Arc::clone(&op_stop),
        deadline,
    ));

    // Sample every scenario minute until the work is done or the deadline passes.
    let mut samples = Vec::new();
    let mut drained_at = None;
    let mut next = clock.start;
    let mut last_print = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep_until(next.into()).await;
        next += minute_real;
        let m = clock.now_minutes();
        let st = match client.stats(&queue).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "stats");
                continue;
            }
        };
        samples.push(Sample {
            minute: m,
            visible: st.visible,
            delayed: st.delayed,
            in_flight: st.in_flight,
            dlq: st.dead_letter_depth,
        });
        let released = {
            let b = upstream.books();
            plan.valid_ids
                .iter()
                .filter(|id| b.applied.get(*id).copied().unwrap_or(0) > 0)
                .count()
        };
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            println!(
                "  minute {m:>5.0}: backlog {:>5}  delayed {:>5}  in flight {:>3}  DLQ {:>4}  released {released}/{}",
                st.visible,
                st.delayed,
                st.in_flight,
                st.dead_letter_depth,
                plan.valid_ids.len()
            );
        }
        let all_sent_due = m > sc.last_expiry_min() && m > o_end;
        if all_sent_due
            && released == plan.valid_ids.len()
            && st.visible + st.delayed + st.in_flight == 0
        {
            drained_at = Some(m);
            break;
        }
    }
    let ended_at = clock.now_minutes();
    op_stop.store(true, Ordering::Relaxed);
    let operator = op_task.await.unwrap_or_default();
    let pending_at_recovery = if outage_task.is_finished() {
        outage_task.await.unwrap_or(0)
    } else {
        outage_task.abort();
        plan.valid_ids.len() as u64
    };
    // Let settlements land, then stop the worker.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // With max_receive_count 0 there is no DLQ: nothing was dead-lettered.
    let dlq_msgs = if sc.max_receive_count == 0 {
        browse_all(&client, &dlq).await.unwrap_or_default()
    } else {
        browse_all(&client, &dlq).await?
    };
    let totals = client
        .stats(&queue)
        .await
        .with_context(|| format!("reading the totals of {queue}"))?
        .totals;
    let unprocessable_msgs = browse_all(&client, &unprocessable)
        .await
        .unwrap_or_default();
    let _ = worker_stop_tx.send(true);
    match tokio::time::timeout(Duration::from_secs(10), worker_task).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "worker"),
        Err(_) => tracing::warn!("the worker did not stop within 10 s"),
        _ => {}
    }
    let _ = stop_tx.send(true);

    let (calls, applied, repeats) = {
        let b = upstream.books();
        (
            b.calls
                .iter()
                .map(|c| (clock.minutes_at(c.at), c.kind))
                .collect(),
            b.applied.clone(),
            b.repeats,
        )
    };
    let obs = Observed {
        scenario: sc,
        samples,
        calls,
        applied,
        repeats,
        plan,
        dlq: dlq_msgs,
        unprocessable: unprocessable_msgs,
        operator,
        drained_at,
        pending_at_recovery,
        ended_at,
        dead_lettered: totals.dead_lettered,
        redriven: totals.redriven,
        queue,
        real_secs: clock.start.elapsed().as_secs_f64(),
    };
    let verdicts = criteria::judge(&obs);
    print!("{}", report::summary(&obs, &verdicts));
    if let Some(path) = &args.report {
        let text = report::chart(&obs, path.extension().is_some_and(|e| e == "html"));
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(verdicts.iter().all(|v| v.pass))
}
