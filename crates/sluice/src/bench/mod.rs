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
//!
//! This module holds the entry point and the run's phases; its parts hold the options
//! (`args`), what the tasks share and measure (`state`), the producers (`producer`) and
//! consumers (`consumer`), the two protocols (`http`, `frames`), the queue's preparation
//! (`prepare`), the progress line (`progress`), the report (`report`), the push mode
//! (`push`) and the noisy-neighbour comparison (`noisy`).

mod args;
mod consumer;
mod frames;
mod http;
mod noisy;
mod prepare;
mod producer;
mod progress;
mod push;
mod report;
mod state;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use sluice_client::TlsOptions;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use args::BenchArgs;
use prepare::prepare;
use report::Report;
use state::{Shared, TaskStats};

/// How long consumers keep draining after the measured window.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// Long-poll wait of a receive, so idle consumers neither spin nor delay the end of a run.
const RECEIVE_WAIT_MS: i64 = 200;
/// Timeout of one HTTP request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// With `--messages` and no `--duration`, the measured window still ends after this long.
const MESSAGES_TIME_LIMIT: Duration = Duration::from_secs(300);

/// A producer's or consumer's task, yielding what it measured.
type Task = JoinHandle<anyhow::Result<TaskStats>>;

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
    let (base, https, tls, client) = http_client(&args)?;
    if args.noisy_neighbour {
        return noisy::bench(args, base, client).await;
    }
    let body_bytes = usize::try_from(args.body_bytes).context("--body-bytes is too large")?;
    let run_id = format!("{:016x}", rand::random::<u64>());

    prepare(&client, &base, &args).await?;
    let frames = match &args.frames {
        // One broker, one TLS setting: its frame listener speaks TLS when its HTTP does.
        Some(addr) => Some(connect_frames(addr, https.then(|| tls.clone()), &args).await?),
        None => None,
    };

    let duration = match (args.duration, args.messages) {
        (Some(d), _) => d,
        (None, Some(_)) => MESSAGES_TIME_LIMIT,
        (None, None) => Duration::from_secs(10),
    };
    let shared = Arc::new(shared_state(
        &args, client, frames, base, run_id, body_bytes,
    ));

    let progress = progress::progress_bar(args.json);
    let ticker = tokio::spawn(progress::tick(
        shared.clone(),
        progress.clone(),
        args.warmup,
        duration,
    ));
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let producers = spawn_producers(&shared, &args, alive_tx);
    let consumers: Vec<Task> = (0..args.consumers)
        .map(|_| tokio::spawn(consumer::consumer(shared.clone())))
        .collect();

    // The measured window ends at its deadline or when every producer stopped (the
    // --messages budget is spent).
    let deadline = shared.epoch + args.warmup + duration;
    tokio::select! {
        () = tokio::time::sleep_until(deadline) => {}
        _ = alive_rx.recv() => {}
    }
    let end = shared.now_us().max(shared.warm_us);
    shared.end_us.store(end, Ordering::Relaxed);
    let total = stop_and_collect(&shared, producers, consumers).await?;
    ticker.abort();
    progress.finish_and_clear();

    let window_us = end.saturating_sub(shared.warm_us).max(1);
    print_report(&Report::new(&args, &shared, &total, window_us), args.json)
}

/// The broker's base URL (checked), whether it is `https`, its TLS options and the HTTP
/// client every task shares.
fn http_client(args: &BenchArgs) -> anyhow::Result<(String, bool, TlsOptions, reqwest::Client)> {
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
    Ok((base, parsed.scheme() == "https", tls, client))
}

/// A pool of frame connections to `addr`, checked with one request before the run.
async fn connect_frames(
    addr: &str,
    tls: Option<TlsOptions>,
    args: &BenchArgs,
) -> anyhow::Result<frames::Pool> {
    let pool = frames::Pool::new(addr.to_owned(), tls);
    pool.check(args.token.as_deref()).await.with_context(|| {
        format!(
            "cannot use the frame protocol at {addr}; is `sluice serve` running with \
             --frames-listen {addr}?"
        )
    })?;
    Ok(pool)
}

/// The state of a run starting now.
fn shared_state(
    args: &BenchArgs,
    client: reqwest::Client,
    frames: Option<frames::Pool>,
    base: String,
    run: String,
    body_bytes: usize,
) -> Shared {
    Shared {
        client,
        frames,
        base,
        queue: args.queue.clone(),
        token: args.token.clone(),
        run,
        batch: args.batch,
        body_bytes,
        epoch: Instant::now(),
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
        keys: args.keys.map(|n| (n, AtomicU64::new(0))),
    }
}

/// Starts the producers, spread evenly over one send interval with `--rate`; each holds a
/// clone of `alive` until it stops, so the channel closes when all have.
fn spawn_producers(shared: &Arc<Shared>, args: &BenchArgs, alive: mpsc::Sender<()>) -> Vec<Task> {
    let interval = args.rate.map(|r| {
        let per_producer = r / f64::from(args.producers);
        Duration::from_secs_f64(f64::from(args.batch) / per_producer)
    });
    (0..args.producers)
        .map(|i| {
            let spread = i * 1024 / args.producers;
            tokio::spawn(producer::producer(
                shared.clone(),
                spread,
                interval,
                alive.clone(),
            ))
        })
        .collect()
}

/// Stops the producers, lets the consumers drain what was sent (within a bound), stops them
/// and adds up what every task measured.
async fn stop_and_collect(
    shared: &Shared,
    producers: Vec<Task>,
    consumers: Vec<Task>,
) -> anyhow::Result<TaskStats> {
    shared.stop_producers.store(true, Ordering::Relaxed);
    let mut total = TaskStats::new()?;
    for p in producers {
        total.merge(p.await.context("a producer panicked")??)?;
    }
    if !consumers.is_empty() {
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
    Ok(total)
}

/// Prints the report as text or JSON; a run that sent nothing fails.
fn print_report(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).context("encoding the report")?
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

#[cfg(test)]
mod tests {
    use super::args::parse_rate;
    use super::consumer::Stamp;
    use super::producer::{padding, stamped_body};
    use super::report::{ms, thousands};
    use crate::client::args::parse_duration;
    use std::time::Duration;

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
