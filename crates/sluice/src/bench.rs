//! `sluice bench`: a load generator that measures a running broker over HTTP, or over the
//! frame protocol with `--frames`.
//!
//! Producers send messages (alone or in batches) to one queue while consumers receive and
//! acknowledge them; a consumer acknowledges each batch while it receives the next (one
//! acknowledgement in flight), as the SDK's worker does. Each body carries the time its send
//! started, so a consumer measures the end-to-end latency (send started → delivered to a
//! consumer); each producer also measures its send calls (request written → 2xx read).
//! Latencies go into HDR histograms (microsecond resolution, three significant digits).
//!
//! A run is a warm-up (not counted), a measured window that ends after `--duration` or after
//! `--messages` sends, and a short drain (at most 5 s) in which consumers keep receiving so
//! that the messages sent in the window are acknowledged and their latency is counted.
//! Nothing runs past warm-up + duration + drain + one request timeout.
//!
//! With `--rate` the producers are paced open-loop: every request starts at its scheduled
//! time whether or not the earlier ones were answered (up to 64 in flight per producer), so a
//! broker that slows down does not get a lighter load (no coordinated omission). Latencies
//! are measured from the request's actual start; requests that start over 2 ms behind their
//! schedule (the load generator itself could not keep up) are counted and reported.
//!
//! Only the given `--url` (and `--frames`) is ever contacted.
//!
//! Longer than this project's files should be: the load's options, its producer and consumer
//! loops for both protocols and the report live together; the protocols are its seam for a
//! split.

mod frames;
mod http;
mod push;
mod report;

use report::*;

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::client::args::parse_duration;
use anyhow::{Context, bail};
use clap::Args;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use sluice_client::frames::FrameReceipt;
use sluice_wire::{ErrorEnvelope, QueueConfigRequest};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long consumers keep draining after the measured window.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// Long-poll wait of a receive, so idle consumers neither spin nor delay the end of a run.
const RECEIVE_WAIT_MS: i64 = 200;
/// Timeout of one HTTP request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// With `--messages` and no `--duration`, the measured window still ends after this long.
const MESSAGES_TIME_LIMIT: Duration = Duration::from_secs(300);
/// With `--rate`: most send requests one producer keeps in flight; past it the producer
/// waits for an answer before starting the next.
const MAX_IN_FLIGHT_PER_PRODUCER: usize = 64;
/// With `--rate`: a request that starts this much after its scheduled time is counted late
/// (Tokio's timer has a 1 ms resolution, so slips under that are normal).
const LATE_START: Duration = Duration::from_millis(2);
/// How often an idle open-loop producer checks whether the run is over.
const STOP_CHECK: Duration = Duration::from_millis(50);
/// Largest latency the histograms hold (µs); larger values are clamped.
const MAX_LATENCY_US: u64 = 3_600_000_000;

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
    url: String,
    /// Address (`host:port`) of the broker's frame protocol listener (`sluice serve
    /// --frames-listen`): producers and consumers then send, receive and acknowledge over it
    /// instead of HTTP. The queue is still created and purged over `--url`.
    #[arg(long, value_name = "HOST:PORT")]
    frames: Option<String>,
    /// API key, sent as `Authorization: Bearer`. It needs the send, consume and purge rights
    /// on the queue (an `admin` key, or `operator` + `producer` + `consumer` rights).
    #[arg(
        long,
        env = "SLUICE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,
    /// CA and client certificate for an `https://` broker (its frame listener then speaks
    /// TLS too).
    #[command(flatten)]
    tls: crate::tls_args::TlsArgs,
    /// Queue to load. Created if missing and purged at the start: use a dedicated queue.
    #[arg(long, default_value = "bench", value_name = "NAME")]
    queue: String,
    /// Concurrent producers: each has one request in flight at a time, or with --rate up to
    /// 64 (open loop).
    #[arg(long, default_value_t = 4, value_name = "P",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    producers: u32,
    /// Concurrent consumers (each receives up to --batch messages, then acks them). 0 sends
    /// only.
    #[arg(long, default_value_t = 4, value_name = "C",
          value_parser = clap::value_parser!(u32).range(0..=1024))]
    consumers: u32,
    /// Messages per send request, most messages per receive and receipts per ack (1 – 1000).
    /// With 1 the single-message forms of send and ack are used.
    #[arg(long, default_value_t = 1, value_name = "B",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    batch: u32,
    /// Size of each message body in bytes (a JSON object holding the send time and padding;
    /// at least 64).
    #[arg(long, default_value_t = 1024, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(64..=16 * 1024 * 1024))]
    body_bytes: u64,
    /// Length of the measured window, e.g. `10s`, `500ms`, `2m` [default: 10s, or 5m as an
    /// upper bound with --messages].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    duration: Option<Duration>,
    /// End the measured window after this many messages were sent in it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    messages: Option<u64>,
    /// Load before the measured window, not counted.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    warmup: Duration,
    /// Target send rate in messages per second across all producers, paced open-loop (for
    /// latency at a fixed load). Without it producers send as fast as the broker answers.
    #[arg(long, value_name = "MSG_PER_S", value_parser = parse_rate)]
    rate: Option<f64>,
    /// Print the report as JSON (and no progress line).
    #[arg(long)]
    json: bool,
    /// Measure push delivery instead of consumers: serve a 204 endpoint on loopback, make it
    /// the queue's push target with --consumers as its concurrency, send --messages (default
    /// 20,000) up front while the queue is paused, then time how fast the broker pushes them
    /// all. The broker must run on this machine (the endpoint listens on 127.0.0.1).
    #[arg(long, conflicts_with_all = ["frames", "rate"])]
    push: bool,
    /// Spread the messages over this many FIFO message groups (`g0`, `g1`, …, in turn), so
    /// that each group is delivered in order with one message in flight (over HTTP).
    #[arg(long, value_name = "N", conflicts_with = "frames",
          value_parser = clap::value_parser!(u32).range(1..))]
    groups: Option<u32>,
}

fn parse_rate(s: &str) -> Result<f64, String> {
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

// ---------------------------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------------------------

/// What every task shares.
struct Shared {
    client: reqwest::Client,
    /// With `--frames`: the frame connections producers and consumers use instead of HTTP.
    frames: Option<frames::Pool>,
    base: String,
    queue: String,
    token: Option<String>,
    /// Identifies this run's messages, so leftovers of another run are acked but not counted.
    run: String,
    batch: u32,
    body_bytes: usize,
    epoch: Instant,
    /// Start of the measured window, µs after `epoch`.
    warm_us: u64,
    /// End of the measured window, µs after `epoch`; `u64::MAX` until it ends.
    end_us: AtomicU64,
    /// Messages the measured window may still send (`--messages`).
    budget: Option<AtomicI64>,
    stop_producers: AtomicBool,
    stop_consumers: AtomicBool,
    // Totals for the progress line and the drain (all phases).
    sent_total: AtomicU64,
    acked_total: AtomicU64,
    errors_total: AtomicU64,
    // Counted in the measured window.
    sent_measured: AtomicU64,
    acked_measured: AtomicU64,
    /// With `--groups`: how many, and the count that picks the next message's group.
    groups: Option<(u32, AtomicU64)>,
}

impl Shared {
    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The group of the next message sent, with `--groups`.
    fn next_group(&self) -> Option<String> {
        self.groups
            .as_ref()
            .map(|(n, next)| format!("g{}", next.fetch_add(1, Ordering::Relaxed) % u64::from(*n)))
    }

    fn in_window(&self, t_us: u64) -> bool {
        t_us >= self.warm_us && t_us < self.end_us.load(Ordering::Relaxed)
    }

    /// The send time stamped in a body of this run sent inside the measured window; `None`
    /// for anything else (leftovers of another run, warm-up messages, foreign bodies).
    fn stamp(&self, body: &[u8]) -> Option<u64> {
        let stamp = serde_json::from_slice::<Stamp<'_>>(body).ok()?;
        (stamp.run == self.run && self.in_window(stamp.t)).then_some(stamp.t)
    }
}

/// What one task measured.
struct TaskStats {
    send_us: Histogram<u64>,
    e2e_us: Histogram<u64>,
    errors: BTreeMap<String, u64>,
    late_starts: u64,
}

impl TaskStats {
    fn new() -> anyhow::Result<Self> {
        Ok(TaskStats {
            send_us: new_histogram()?,
            e2e_us: new_histogram()?,
            errors: BTreeMap::new(),
            late_starts: 0,
        })
    }

    fn merge(&mut self, other: TaskStats) -> anyhow::Result<()> {
        self.send_us
            .add(&other.send_us)
            .context("merging histograms")?;
        self.e2e_us
            .add(&other.e2e_us)
            .context("merging histograms")?;
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.late_starts += other.late_starts;
        Ok(())
    }
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).context("creating a latency histogram")
}

/// A failed request: an error code for the report and how long to back off.
struct Failed {
    code: String,
    retry_after: Option<Duration>,
}

impl Failed {
    fn new(code: &str, retry_after: Option<Duration>) -> Self {
        Failed {
            code: code.to_owned(),
            retry_after,
        }
    }

    /// Counts the error; returns how long to wait before the next request.
    fn count(self, shared: &Shared, errors: &mut BTreeMap<String, u64>) -> Duration {
        count_error(shared, errors, self.code);
        self.retry_after
            .unwrap_or(Duration::from_millis(10))
            .min(Duration::from_secs(1))
    }

    /// Counts the error and waits a little before the next request.
    async fn record(self, shared: &Shared, stats: &mut TaskStats) {
        let pause = self.count(shared, &mut stats.errors);
        tokio::time::sleep(pause).await;
    }
}

/// Counts one error with `code`, in the run's total and in `errors`.
fn count_error(shared: &Shared, errors: &mut BTreeMap<String, u64>, code: String) {
    shared.errors_total.fetch_add(1, Ordering::Relaxed);
    *errors.entry(code).or_default() += 1;
}

/// What an acknowledgement call did: how many receipts it settled, and the error codes of
/// those it refused (a batch ack answers per receipt).
struct Acked {
    count: u64,
    refused: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Producers
// ---------------------------------------------------------------------------------------------

/// Padding copied into bodies.
fn padding(len: usize) -> String {
    "x".repeat(len)
}

/// A body of exactly `size` bytes (when `size` leaves room for the fields) stamped with `t`.
fn stamped_body(run: &str, t_us: u64, size: usize, pad: &str) -> String {
    let head = format!(r#"{{"run":"{run}","t":{t_us},"pad":""#);
    let room = size.saturating_sub(head.len() + 2).min(pad.len());
    let mut s = String::with_capacity(head.len() + room + 2);
    s.push_str(&head);
    s.push_str(&pad[..room]);
    s.push_str("\"}");
    s
}

/// Takes up to `want` messages from the `--messages` budget of the measured window; `None`
/// when the budget is spent.
fn take_budget(shared: &Shared, want: u32, now_us: u64) -> Option<u32> {
    let Some(budget) = &shared.budget else {
        return Some(want);
    };
    if now_us < shared.warm_us {
        return Some(want);
    }
    let prev = budget.fetch_sub(i64::from(want), Ordering::Relaxed);
    if prev <= 0 {
        return None;
    }
    Some(u32::try_from(prev.min(i64::from(want))).unwrap_or(want))
}

/// What one send request did: when it started and ended (µs after the epoch) and how many
/// messages it stored.
struct SendOutcome {
    start_us: u64,
    done_us: u64,
    result: Result<u64, Failed>,
}

/// Sends `n` messages stamped with the request's start time.
async fn send_once(shared: Arc<Shared>, n: u32, pad: Arc<str>) -> SendOutcome {
    let start_us = shared.now_us();
    let result = match &shared.frames {
        Some(pool) => frames::send(&shared, pool, n, start_us, &pad).await,
        None => http::send(&shared, n, start_us, &pad).await,
    };
    SendOutcome {
        start_us,
        done_us: shared.now_us(),
        result,
    }
}

/// Counts a send; for a failure, returns how long a closed-loop producer should pause.
fn note_send(shared: &Shared, stats: &mut TaskStats, out: SendOutcome) -> Option<Duration> {
    match out.result {
        Ok(count) => {
            shared.sent_total.fetch_add(count, Ordering::Relaxed);
            if shared.in_window(out.start_us) {
                shared.sent_measured.fetch_add(count, Ordering::Relaxed);
                stats
                    .send_us
                    .saturating_record(out.done_us.saturating_sub(out.start_us).max(1));
            }
            None
        }
        Err(f) => Some(f.count(shared, &mut stats.errors)),
    }
}

async fn producer(
    shared: Arc<Shared>,
    spread: u32,
    interval: Option<Duration>,
    _alive: mpsc::Sender<()>,
) -> anyhow::Result<TaskStats> {
    let mut stats = TaskStats::new()?;
    let pad: Arc<str> = padding(shared.body_bytes).into();
    let Some(interval) = interval else {
        // Closed loop: one request at a time, as fast as the broker answers.
        while !shared.stop_producers.load(Ordering::Relaxed) {
            let Some(n) = take_budget(&shared, shared.batch, shared.now_us()) else {
                break;
            };
            let out = send_once(shared.clone(), n, pad.clone()).await;
            if let Some(pause) = note_send(&shared, &mut stats, out) {
                tokio::time::sleep(pause).await;
            }
        }
        return Ok(stats);
    };
    // Open loop: each request starts at its scheduled time whether or not the earlier ones
    // were answered (up to MAX_IN_FLIGHT_PER_PRODUCER). Producers are spread evenly over one
    // interval (`spread` of 1024).
    let mut next = Instant::now() + interval.mul_f64(f64::from(spread) / 1024.0);
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            biased;
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                note_send(&shared, &mut stats, done.context("a send task panicked")?);
            }
            () = tokio::time::sleep_until(next.min(Instant::now() + STOP_CHECK)) => {
                if shared.stop_producers.load(Ordering::Relaxed) {
                    break;
                }
                if Instant::now() < next {
                    continue;
                }
                if in_flight.len() >= MAX_IN_FLIGHT_PER_PRODUCER
                    && let Some(done) = in_flight.join_next().await
                {
                    note_send(&shared, &mut stats, done.context("a send task panicked")?);
                }
                if next.elapsed() > LATE_START {
                    stats.late_starts += 1;
                }
                next += interval;
                let Some(n) = take_budget(&shared, shared.batch, shared.now_us()) else {
                    break;
                };
                in_flight.spawn(send_once(shared.clone(), n, pad.clone()));
            }
        }
    }
    while let Some(done) = in_flight.join_next().await {
        note_send(&shared, &mut stats, done.context("a send task panicked")?);
    }
    Ok(stats)
}

// ---------------------------------------------------------------------------------------------
// Consumers
// ---------------------------------------------------------------------------------------------

/// The stamp inside a bench body (the padding is skipped).
#[derive(Deserialize)]
struct Stamp<'a> {
    run: &'a str,
    t: u64,
}

/// The receipts of one received batch, in the form of the transport that leased it.
enum Receipts {
    Http(Vec<String>),
    Frames(Vec<FrameReceipt>),
}

impl Receipts {
    fn is_empty(&self) -> bool {
        match self {
            Receipts::Http(r) => r.is_empty(),
            Receipts::Frames(r) => r.is_empty(),
        }
    }
}

/// One long-polling receive: the batch's receipts and the stamps to measure.
async fn receive(shared: &Shared) -> Result<(Receipts, Vec<u64>), Failed> {
    match &shared.frames {
        Some(pool) => frames::receive(shared, pool)
            .await
            .map(|(r, s)| (Receipts::Frames(r), s)),
        None => http::receive(shared)
            .await
            .map(|(r, s)| (Receipts::Http(r), s)),
    }
}

/// Acknowledges one batch and counts the outcome; returns how long to pause after a failed
/// call.
async fn ack(
    shared: &Shared,
    receipts: Receipts,
    errors: &mut BTreeMap<String, u64>,
) -> Option<Duration> {
    let acked = match (receipts, &shared.frames) {
        (Receipts::Frames(r), Some(pool)) => frames::ack(shared, pool, r).await,
        (Receipts::Http(r), _) => http::ack(shared, r).await,
        (Receipts::Frames(_), None) => Err(Failed::new("no_frames_listener", None)),
    };
    match acked {
        Ok(a) => {
            shared.acked_total.fetch_add(a.count, Ordering::Relaxed);
            if shared.in_window(shared.now_us()) {
                shared.acked_measured.fetch_add(a.count, Ordering::Relaxed);
            }
            for code in a.refused {
                count_error(shared, errors, code);
            }
            None
        }
        Err(f) => Some(f.count(shared, errors)),
    }
}

/// An acknowledgement in flight: it yields the pause its failure asks for and the error codes
/// it counted.
type AckTask = JoinHandle<(Option<Duration>, BTreeMap<String, u64>)>;

/// Receives batches and acknowledges each while receiving the next: at most one
/// acknowledgement in flight, whose failure pauses the consumer before its next receive.
async fn consumer(shared: Arc<Shared>) -> anyhow::Result<TaskStats> {
    let mut stats = TaskStats::new()?;
    let mut acking: Option<AckTask> = None;
    while !shared.stop_consumers.load(Ordering::Relaxed) {
        let got = receive(&shared).await;
        // The previous batch's ack ran during this receive; it finishes before the next one
        // starts, so one ack is in flight at a time.
        if let Some(pause) = settle(&mut acking, &mut stats).await? {
            tokio::time::sleep(pause).await;
        }
        let (receipts, stamps) = match got {
            Ok(got) => got,
            Err(f) => {
                f.record(&shared, &mut stats).await;
                continue;
            }
        };
        let now = shared.now_us();
        for t in stamps {
            stats.e2e_us.saturating_record(now.saturating_sub(t).max(1));
        }
        if receipts.is_empty() {
            continue;
        }
        let shared = shared.clone();
        acking = Some(tokio::spawn(async move {
            let mut errors = BTreeMap::new();
            let pause = ack(&shared, receipts, &mut errors).await;
            (pause, errors)
        }));
    }
    if let Some(pause) = settle(&mut acking, &mut stats).await? {
        tokio::time::sleep(pause).await;
    }
    Ok(stats)
}

/// Waits for the ack in flight, if any, and adds its refusals to `stats`.
async fn settle(
    acking: &mut Option<AckTask>,
    stats: &mut TaskStats,
) -> anyhow::Result<Option<Duration>> {
    let Some(task) = acking.take() else {
        return Ok(None);
    };
    let (pause, errors) = task.await.context("an acknowledgement task panicked")?;
    for (k, v) in errors {
        *stats.errors.entry(k).or_default() += v;
    }
    Ok(pause)
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/// Runs the benchmark.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(bench(args))
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    if args.push {
        return push::bench(args).await;
    }
    let base = args.url.trim_end_matches('/').to_owned();
    let parsed = reqwest::Url::parse(&base).with_context(|| {
        format!(
            "--url \"{}\" is not a URL like http://127.0.0.1:7878",
            args.url
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        bail!("--url \"{}\" must start with http:// or https://", args.url);
    }
    let concurrency = usize::try_from(args.producers + args.consumers).unwrap_or(64);
    let tls = args.tls.options().map_err(anyhow::Error::msg)?;
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(3))
        .pool_max_idle_per_host(concurrency)
        .tcp_nodelay(true);
    let client = tls
        .apply_to(client)?
        .build()
        .context("building the HTTP client")?;
    let body_bytes = usize::try_from(args.body_bytes).context("--body-bytes is too large")?;
    let run_id = format!("{:016x}", rand::random::<u64>());

    prepare(&client, &base, &args).await?;
    let frames = match &args.frames {
        Some(addr) => {
            // One broker, one TLS setting: its frame listener speaks TLS when its HTTP does.
            let tls = (parsed.scheme() == "https").then(|| tls.clone());
            let pool = frames::Pool::new(addr.clone(), tls);
            pool.check(args.token.as_deref()).await.with_context(|| {
                format!(
                    "cannot use the frame protocol at {addr}; is `sluice serve` running with \
                     --frames-listen {addr}?"
                )
            })?;
            Some(pool)
        }
        None => None,
    };

    let duration = match (args.duration, args.messages) {
        (Some(d), _) => d,
        (None, Some(_)) => MESSAGES_TIME_LIMIT,
        (None, None) => Duration::from_secs(10),
    };
    let epoch = Instant::now();
    let shared = Arc::new(Shared {
        client,
        frames,
        base: base.clone(),
        queue: args.queue.clone(),
        token: args.token.clone(),
        run: run_id,
        batch: args.batch,
        body_bytes,
        epoch,
        warm_us: u64::try_from(args.warmup.as_micros()).unwrap_or(u64::MAX),
        end_us: AtomicU64::new(u64::MAX),
        budget: args
            .messages
            .map(|n| AtomicI64::new(i64::try_from(n).unwrap_or(i64::MAX))),
        stop_producers: AtomicBool::new(false),
        stop_consumers: AtomicBool::new(false),
        sent_total: AtomicU64::new(0),
        acked_total: AtomicU64::new(0),
        errors_total: AtomicU64::new(0),
        sent_measured: AtomicU64::new(0),
        acked_measured: AtomicU64::new(0),
        groups: args.groups.map(|n| (n, AtomicU64::new(0))),
    });

    let progress = progress_bar(args.json);
    let ticker = tokio::spawn(tick(
        shared.clone(),
        progress.clone(),
        args.warmup,
        duration,
    ));

    let interval = args.rate.map(|r| {
        let per_producer = r / f64::from(args.producers);
        Duration::from_secs_f64(f64::from(args.batch) / per_producer)
    });
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let producers: Vec<JoinHandle<anyhow::Result<TaskStats>>> = (0..args.producers)
        .map(|i| {
            let spread = i * 1024 / args.producers;
            tokio::spawn(producer(shared.clone(), spread, interval, alive_tx.clone()))
        })
        .collect();
    drop(alive_tx);
    let consumers: Vec<JoinHandle<anyhow::Result<TaskStats>>> = (0..args.consumers)
        .map(|_| tokio::spawn(consumer(shared.clone())))
        .collect();

    // The measured window ends at its deadline or when every producer stopped (the
    // --messages budget is spent).
    let deadline = epoch + args.warmup + duration;
    tokio::select! {
        () = tokio::time::sleep_until(deadline) => {}
        _ = alive_rx.recv() => {}
    }
    let end = shared.now_us().max(shared.warm_us);
    shared.end_us.store(end, Ordering::Relaxed);
    shared.stop_producers.store(true, Ordering::Relaxed);
    let mut total = TaskStats::new()?;
    for p in producers {
        total.merge(p.await.context("a producer panicked")??)?;
    }
    // Drain: let the consumers acknowledge what was sent, within a bound.
    if args.consumers > 0 {
        let drain_deadline = Instant::now() + DRAIN_LIMIT;
        while Instant::now() < drain_deadline
            && shared.acked_total.load(Ordering::Relaxed)
                < shared.sent_total.load(Ordering::Relaxed)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    shared.stop_consumers.store(true, Ordering::Relaxed);
    for c in consumers {
        total.merge(c.await.context("a consumer panicked")??)?;
    }
    ticker.abort();
    progress.finish_and_clear();

    let window_us = end.saturating_sub(shared.warm_us).max(1);
    let report = Report::new(&args, &shared, &total, window_us);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        );
    } else {
        print!("{}", report.text());
    }
    if report.sent == 0 {
        bail!(
            "no message was sent successfully in the measured window (errors: {})",
            report.errors_line()
        );
    }
    Ok(())
}

/// Checks the broker answers, creates the queue if missing and purges it.
pub(crate) async fn prepare(
    client: &reqwest::Client,
    base: &str,
    args: &BenchArgs,
) -> anyhow::Result<()> {
    let auth = |r: reqwest::RequestBuilder| match &args.token {
        Some(t) => r.bearer_auth(t),
        None => r,
    };
    let health = client
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .with_context(|| {
            format!(
                "cannot reach the broker at {base}; is `sluice serve` running there? \
                 (set --url or SLUICE_URL)"
            )
        })?;
    if !health.status().is_success() {
        bail!(
            "the broker at {base} is not healthy: GET /healthz answered {}",
            health.status()
        );
    }
    let queue_url = format!("{base}/v1/queues/{}", args.queue);
    // An empty patch creates the queue with defaults and leaves an existing one as it is.
    let resp = auth(client.put(&queue_url))
        .json(&QueueConfigRequest::default())
        .send()
        .await
        .with_context(|| format!("creating queue {}", args.queue))?;
    check(resp, &format!("creating queue {}", args.queue)).await?;
    let resp = auth(client.post(format!("{queue_url}/purge")))
        .send()
        .await
        .with_context(|| format!("purging queue {}", args.queue))?;
    check(resp, &format!("purging queue {}", args.queue)).await?;
    Ok(())
}

pub(crate) async fn check(resp: reqwest::Response, what: &str) -> anyhow::Result<()> {
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let text = resp.text().await.unwrap_or_default();
    let detail = serde_json::from_str::<ErrorEnvelope>(&text)
        .map(|e| format!("{}: {}", e.error.code, e.error.message))
        .unwrap_or(text);
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        bail!("{what}: {status} {detail} (check --token / SLUICE_TOKEN)");
    }
    bail!("{what}: {status} {detail}")
}

fn progress_bar(json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
        pb.set_style(style);
    }
    pb
}

/// Updates the progress line four times a second.
async fn tick(shared: Arc<Shared>, pb: ProgressBar, warmup: Duration, duration: Duration) {
    if pb.is_hidden() {
        return;
    }
    let mut last = (0u64, 0u64, Instant::now());
    let mut every = tokio::time::interval(Duration::from_millis(250));
    loop {
        every.tick().await;
        let (sent, acked) = (
            shared.sent_total.load(Ordering::Relaxed),
            shared.acked_total.load(Ordering::Relaxed),
        );
        let now = Instant::now();
        let dt = now.duration_since(last.2).as_secs_f64().max(1e-3);
        let elapsed = now.duration_since(shared.epoch);
        let phase = if shared.stop_producers.load(Ordering::Relaxed) {
            "draining".to_owned()
        } else if elapsed < warmup {
            format!(
                "warm-up {:.1}/{:.0}s",
                elapsed.as_secs_f64(),
                warmup.as_secs_f64()
            )
        } else {
            format!(
                "measuring {:.1}/{:.0}s",
                (elapsed - warmup).as_secs_f64(),
                duration.as_secs_f64()
            )
        };
        pb.set_message(format!(
            "{phase}  sent {} ({}/s)  acked {} ({}/s)  errors {}",
            thousands(sent),
            thousands(((sent - last.0) as f64 / dt) as u64),
            thousands(acked),
            thousands(((acked - last.1) as f64 / dt) as u64),
            thousands(shared.errors_total.load(Ordering::Relaxed)),
        ));
        pb.tick();
        last = (sent, acked, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5y").is_err());
        assert!(parse_rate("0").is_err());
        assert_eq!(parse_rate("2500/s").unwrap(), 2500.0);
    }

    #[test]
    fn bodies_have_the_asked_size_and_parse() {
        let pad = padding(1024);
        for t in [0, 7, 123_456_789_012] {
            let b = stamped_body("0123456789abcdef", t, 1024, &pad);
            assert_eq!(b.len(), 1024);
            let raw = serde_json::value::RawValue::from_string(b).unwrap();
            let s: Stamp<'_> = serde_json::from_str(raw.get()).unwrap();
            assert_eq!((s.run, s.t), ("0123456789abcdef", t));
        }
    }

    #[test]
    fn numbers_print_readably() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(ms(850), "0.85ms");
        assert_eq!(ms(12_340), "12.3ms");
        assert_eq!(ms(250_000), "250ms");
    }
}
