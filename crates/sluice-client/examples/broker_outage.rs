//! The broker is stopped and started again mid-run: the worker logs, backs off, resumes by
//! itself, and every task completes; none is lost.
//!
//! 40 `resize` tasks of 100 ms run on a worker of concurrency 2. After 10 have finished the
//! broker goes away for a moment and comes back (same address, same data). Meanwhile the
//! worker's leasing fails and backs off (at most 300 ms between tries), and tasks that
//! finished during the outage keep trying to ack; receipts stay valid across the restart, so
//! their results are stored when the broker is back.
//!
//! Against `sluice serve` the example asks you to do the restart:
//!
//! ```text
//! cargo run -p sluice-client --example broker_outage
//! # when it says so: Ctrl-C the broker, then start `sluice serve` again (same --data-dir)
//! ```
//!
//! It prints (ids vary; the worker's warnings about the unreachable broker go to stderr):
//!
//! ```text
//! queue outage-9a8b7c: 40 tasks enqueued
//! 10 tasks done: stop the broker now (Ctrl-C `sluice serve`), then start it again
//! broker is down
//! broker is back
//! all 40 tasks SUCCESS (41 handler runs, 14 failed broker calls retried); none lost
//! ```
//!
//! The integration test does the stop and start itself, on the same address and data dir.

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_client::{Client, Outcome, TaskContext, TaskStatus, Worker};

/// Takes the broker away and brings it back.
pub trait Outage {
    /// Stops the broker; resolves once it is down.
    fn stop(&mut self) -> impl Future<Output = ()>;
    /// Starts it again; resolves once it answers.
    fn start(&mut self) -> impl Future<Output = ()>;
}

/// An outage done by a person: waits until the broker at the URL goes away and comes back.
pub struct ByHand {
    /// A client of the broker.
    pub client: Client,
}

impl Outage for ByHand {
    async fn stop(&mut self) {
        println!("10 tasks done: stop the broker now (Ctrl-C `sluice serve`), then start it again");
        for _ in 0..1200 {
            if self.client.healthz().await.is_err() {
                println!("broker is down");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("the broker was not stopped within 2 minutes; going on without an outage");
    }

    async fn start(&mut self) {
        while self.client.healthz().await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("broker is back");
    }
}

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// Final statuses of all tasks.
    pub statuses: Vec<TaskStatus>,
    /// Distinct tasks the handler ran.
    pub distinct_runs: usize,
    /// Handler runs in all (a task may run twice: at-least-once).
    pub runs: usize,
    /// Broker calls the worker retried.
    pub broker_errors: u64,
    /// Tasks finished when the broker was stopped.
    pub done_at_stop: u64,
}

/// Runs the scenario against the broker at `url`; `outage` takes it away and back.
pub async fn run(url: &str, outage: &mut impl Outage) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "outage", 5, Duration::from_secs(10)).await?;
    let runs: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&runs);
    let worker = Worker::builder(client.clone(), &queue)
        .concurrency(2)
        .poll_wait(Duration::from_millis(200))
        .max_backoff(Duration::from_millis(300))
        .handler("resize", move |ctx: TaskContext, n: u32| {
            let seen = Arc::clone(&seen);
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Ok(mut s) = seen.lock() {
                    s.push(ctx.id().to_owned());
                }
                Ok(n * 2)
            }
        })
        .build()?;
    let mut ids = Vec::new();
    for n in 0..40u32 {
        ids.push(client.enqueue(&queue, "resize", &n).await?);
    }
    println!("queue {queue}: {} tasks enqueued", ids.len());
    let running = common::spawn(worker);
    let metrics = running.metrics.clone();
    common::wait_until("10 tasks to finish", Duration::from_secs(20), || async {
        metrics.snapshot().completed(Outcome::Success) >= 10
    })
    .await?;
    let done_at_stop = metrics.snapshot().completed(Outcome::Success);
    outage.stop().await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    outage.start().await;
    let views = common::wait_all(&client, &ids, Duration::from_secs(30)).await?;
    running.stop().await?;
    let statuses: Vec<TaskStatus> = views.iter().map(|v| v.status).collect();
    let runs = runs
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let distinct_runs = runs.iter().collect::<HashSet<_>>().len();
    let broker_errors = metrics.snapshot().broker_errors;
    let ok = statuses
        .iter()
        .filter(|s| **s == TaskStatus::Success)
        .count();
    println!(
        "{} {ok} of {} tasks SUCCESS ({} handler runs, {broker_errors} failed broker calls retried); {}",
        if ok == ids.len() { "all" } else { "only" },
        ids.len(),
        runs.len(),
        if ok == ids.len() {
            "none lost"
        } else {
            "SOME NOT DONE"
        }
    );
    Ok(Report {
        statuses,
        distinct_runs,
        runs: runs.len(),
        broker_errors,
        done_at_stop,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let url = common::broker_url();
    let mut outage = ByHand {
        client: common::client(&url)?,
    };
    run(&url, &mut outage).await.map(drop)
}
