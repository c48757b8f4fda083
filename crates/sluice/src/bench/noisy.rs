//! `sluice bench --noisy-neighbour`: how long a quiet tenant's task waits behind a noisy
//! tenant's backlog, with keys and without.
//!
//! One key (`noisy`) has `--noisy-backlog` messages waiting when the measured window starts;
//! `--quiet-keys` keys (`quiet-0`, `quiet-1`, …) each send one message a second through the
//! window; `--consumers` consumers receive up to `--batch` messages at a time, spend `--work`
//! on each (the task's own time, simulated) and acknowledge them. The run is made twice, on two
//! new queues named after `--queue` (`NAME-keyed`, `NAME-unkeyed`, deleted afterwards with
//! their dead-letter queues): first with every message carrying its key, then with none, so
//! the second is the same load on a queue that delivers by visible time alone.
//!
//! A quiet message's wait is from its send to its delivery to a consumer. Quiet messages still
//! undelivered a second after the window ends count with the time they had waited by then, a
//! lower bound, and the report says how many there were. Nothing runs past the window plus
//! that second and one request timeout in each run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;
use sluice_client::{Client, OutgoingMessage, ReceiveOptions};
use tokio::sync::Mutex;

use super::args::BenchArgs;

/// The attribute holding a quiet message's send time (µs since the Unix epoch).
const SENT_AT: &str = "sent_us";
/// How long after the window the consumers may still deliver the last quiet messages.
const GRACE: Duration = Duration::from_secs(1);
/// Messages per send while filling the noisy backlog: a tenant's application enqueuing its
/// tasks a few at a time. Below the PostgreSQL engine's pack threshold (10), so the backlog is
/// rows, as single sends are; large plain batches there are packs, which a receive of one
/// takes after single rows, and would hide the wait this measures.
const FILL_BATCH: u64 = 8;
/// Sends in flight while filling the noisy backlog.
const FILL_SENDERS: usize = 16;

/// What one run measured.
#[derive(Debug, Serialize)]
struct Outcome {
    /// `keyed` or `unkeyed`.
    mode: &'static str,
    quiet_sent: u64,
    quiet_delivered: u64,
    /// Quiet messages still waiting when the window ended (their wait counts as a lower bound).
    quiet_undelivered: u64,
    wait_p50_ms: f64,
    wait_p99_ms: f64,
    wait_max_ms: f64,
    /// Messages of the noisy key delivered in the window.
    noisy_delivered: u64,
}

/// What the consumers and the quiet producer share in one run.
struct Run {
    client: Client,
    queue: String,
    keyed: bool,
    pending: Mutex<Pending>,
    waits: Mutex<Histogram<u64>>,
    noisy_delivered: AtomicU64,
    stop: AtomicBool,
}

/// Quiet messages in flight between the producer and the consumers.
#[derive(Default)]
struct Pending {
    /// Sent and not yet delivered: id → send time (µs).
    waiting: HashMap<String, u64>,
    /// Delivered before the producer had its send's answer.
    early: HashSet<String>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Runs the comparison and prints its report.
pub(super) async fn bench(
    args: BenchArgs,
    base: String,
    http: reqwest::Client,
) -> anyhow::Result<()> {
    let mut client = Client::builder(base.clone())
        .tls(args.tls.options().map_err(anyhow::Error::msg)?)
        .build()
        .context("building the client")?;
    if let Some(t) = &args.token {
        client = client.with_token(t.clone());
    }
    super::prepare::check_health(&http, &base).await?;
    let mut outcomes = Vec::new();
    for keyed in [true, false] {
        let queue = format!("{}-{}", args.queue, mode(keyed));
        client
            .put_queue(&queue, &sluice_wire::QueueConfigRequest::default())
            .await
            .with_context(|| format!("creating queue {queue}"))?;
        client
            .purge_queue(&queue)
            .await
            .with_context(|| format!("purging queue {queue}"))?;
        let outcome = one_run(&args, client.clone(), &queue, keyed).await;
        // The queue and the dead-letter queue its creation made.
        for q in [queue.clone(), format!("{queue}.dlq")] {
            client
                .delete_queue(&q)
                .await
                .with_context(|| format!("deleting queue {q}"))?;
        }
        outcomes.push(outcome?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcomes)?);
        return Ok(());
    }
    println!(
        "noisy neighbour: {} waiting on one key, {} quiet keys at 1/s, {} consumers, \
         batch {}, {:?} of work a message",
        args.noisy_backlog, args.quiet_keys, args.consumers, args.batch, args.work
    );
    println!(
        "{:<9} {:>8} {:>10} {:>12} {:>10} {:>10} {:>10} {:>15}",
        "mode",
        "quiet",
        "delivered",
        "undelivered",
        "p50 ms",
        "p99 ms",
        "max ms",
        "noisy delivered"
    );
    for o in &outcomes {
        // An undelivered message's wait is a lower bound, and so is any figure it reaches.
        let floor = if o.quiet_undelivered > 0 { "≥" } else { "" };
        println!(
            "{:<9} {:>8} {:>10} {:>12} {:>10.1} {:>10} {:>10} {:>15}",
            o.mode,
            o.quiet_sent,
            o.quiet_delivered,
            o.quiet_undelivered,
            o.wait_p50_ms,
            format!("{floor}{:.1}", o.wait_p99_ms),
            format!("{floor}{:.1}", o.wait_max_ms),
            o.noisy_delivered
        );
    }
    Ok(())
}

fn mode(keyed: bool) -> &'static str {
    if keyed { "keyed" } else { "unkeyed" }
}

async fn one_run(
    args: &BenchArgs,
    client: Client,
    queue: &str,
    keyed: bool,
) -> anyhow::Result<Outcome> {
    let mode = mode(keyed);
    if !args.json {
        eprintln!(
            "{mode}: filling the noisy key's backlog ({} messages)",
            args.noisy_backlog
        );
    }
    fill(&client, queue, args.noisy_backlog, keyed).await?;
    let run = Arc::new(Run {
        client,
        queue: queue.to_owned(),
        keyed,
        pending: Mutex::new(Pending::default()),
        waits: Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3).context("histogram")?),
        noisy_delivered: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let consumers: Vec<_> = (0..args.consumers.max(1))
        .map(|_| tokio::spawn(consume(run.clone(), args.batch, args.work)))
        .collect();
    let window = args.duration.unwrap_or(Duration::from_secs(20));
    if !args.json {
        eprintln!("{mode}: {window:?} of quiet sends");
    }
    let quiet_sent = quiet(&run, args.quiet_keys, window).await?;
    // The last quiet sends get a moment to be delivered, so a message sent just before the
    // end is not counted as left behind.
    let grace = tokio::time::Instant::now() + GRACE;
    while tokio::time::Instant::now() < grace && !run.pending.lock().await.waiting.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    run.stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.await.context("a consumer panicked")??;
    }
    let end = now_us();
    let mut waits = run.waits.lock().await;
    let undelivered = {
        let pending = run.pending.lock().await;
        for sent in pending.waiting.values() {
            waits.record(end.saturating_sub(*sent).max(1))?;
        }
        pending.waiting.len() as u64
    };
    let ms = |us: u64| us as f64 / 1000.0;
    Ok(Outcome {
        mode,
        quiet_sent,
        quiet_delivered: quiet_sent - undelivered,
        quiet_undelivered: undelivered,
        wait_p50_ms: ms(waits.value_at_quantile(0.5)),
        wait_p99_ms: ms(waits.value_at_quantile(0.99)),
        wait_max_ms: ms(waits.max()),
        noisy_delivered: run.noisy_delivered.load(Ordering::Relaxed),
    })
}

/// Sends `n` messages of the noisy key (or without a key), [`FILL_SENDERS`] sends in flight.
async fn fill(client: &Client, queue: &str, n: u64, keyed: bool) -> anyhow::Result<()> {
    let batches: Vec<u64> = (0..n.div_ceil(FILL_BATCH)).collect();
    let mut tasks = Vec::new();
    for part in batches.chunks(batches.len().div_ceil(FILL_SENDERS).max(1)) {
        let (client, queue, part) = (client.clone(), queue.to_owned(), part.to_vec());
        tasks.push(tokio::spawn(async move {
            for b in part {
                let count = FILL_BATCH.min(n - b * FILL_BATCH);
                let msgs = (0..count)
                    .map(|i| {
                        let m = OutgoingMessage::json(&(b * FILL_BATCH + i))?;
                        Ok(if keyed { m.key("noisy") } else { m })
                    })
                    .collect::<Result<Vec<_>, sluice_client::Error>>()?;
                client
                    .send_batch(&queue, msgs)
                    .await
                    .context("filling the noisy key's backlog")?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await.context("a filling task panicked")??;
    }
    Ok(())
}

/// Sends one message a second for each of `keys` quiet keys, spread evenly, until `window`
/// ends. Returns how many were sent.
async fn quiet(run: &Run, keys: u32, window: Duration) -> anyhow::Result<u64> {
    let every = Duration::from_secs(1) / keys.max(1);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = tokio::time::Instant::now() + window;
    let mut sent = 0u64;
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        let key = format!("quiet-{}", sent % u64::from(keys.max(1)));
        let at = now_us();
        let mut m = OutgoingMessage::json(&sent)?.attribute(SENT_AT, at.to_string());
        if run.keyed {
            m = m.key(key);
        }
        let r = run
            .client
            .send(&run.queue, m)
            .await
            .context("sending a quiet key's message")?;
        let mut pending = run.pending.lock().await;
        if !pending.early.remove(&r.id) {
            pending.waiting.insert(r.id.clone(), at);
        }
        sent += 1;
    }
    Ok(sent)
}

/// Receives, works and acknowledges until the run stops.
async fn consume(run: Arc<Run>, batch: u32, work: Duration) -> anyhow::Result<()> {
    let opts = ReceiveOptions::new(batch, Duration::from_millis(200));
    while !run.stop.load(Ordering::Relaxed) {
        let got = run
            .client
            .receive(&run.queue, &opts)
            .await
            .context("receiving")?;
        let now = now_us();
        let mut receipts = Vec::with_capacity(got.len());
        for d in got {
            match d
                .attributes
                .get(SENT_AT)
                .and_then(|s| s.parse::<u64>().ok())
            {
                Some(sent) => {
                    let mut pending = run.pending.lock().await;
                    if pending.waiting.remove(&d.id).is_none() {
                        pending.early.insert(d.id.clone());
                    }
                    drop(pending);
                    run.waits
                        .lock()
                        .await
                        .record(now.saturating_sub(sent).max(1))?;
                }
                None => {
                    run.noisy_delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
            receipts.push(d.receipt);
        }
        if receipts.is_empty() {
            continue;
        }
        tokio::time::sleep(work * u32::try_from(receipts.len()).unwrap_or(u32::MAX)).await;
        run.client
            .ack_batch(&run.queue, &receipts)
            .await
            .context("acknowledging")?;
    }
    Ok(())
}
