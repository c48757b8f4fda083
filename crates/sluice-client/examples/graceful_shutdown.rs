//! Shutdown while a 5-second task runs: it completes within the grace period, or it is
//! handed back and redelivered; never lost.
//!
//! Two workers each start a 5-second `render` task and are shut down one second into it.
//! The first has a 10-second grace period: it stops leasing, lets the task finish (SUCCESS)
//! and exits. The second has a 0.5-second grace period: it releases the unfinished task for
//! immediate redelivery without spending an attempt (PENDING again) and exits; a new worker
//! then picks it up and completes it.
//! Run against a broker (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example graceful_shutdown
//! ```
//!
//! It prints (in about 7 seconds; order may vary):
//!
//! ```text
//! grace 10s: shutdown requested while the task runs
//! grace 500ms: shutdown requested while the task runs
//! grace 500ms: worker exited after 0.5s; task is PENDING (handed back)
//! grace 500ms: a new worker finished it: SUCCESS
//! grace 10s: worker exited after 4.0s; task is SUCCESS
//! ```

mod common;

use std::time::{Duration, Instant};

use sluice_client::{Client, TaskContext, TaskStatus, Worker};

/// What one scenario saw.
#[derive(Debug)]
pub struct Case {
    /// Status right after the worker exited.
    pub after_shutdown: TaskStatus,
    /// How long the shutdown took.
    pub shutdown_took: Duration,
    /// Final status (after a new worker, when needed).
    pub last: TaskStatus,
}

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// The worker with a long grace period.
    pub finish: Case,
    /// The worker with a short grace period.
    pub release: Case,
}

fn worker(client: &Client, queue: &str, grace: Duration) -> anyhow::Result<Worker> {
    Ok(Worker::builder(client.clone(), queue)
        .poll_wait(Duration::from_millis(200))
        .shutdown_grace(grace)
        .handler("render", |_ctx: TaskContext, secs: u64| async move {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            Ok("rendered")
        })
        .build()?)
}

async fn case(client: &Client, grace: Duration) -> anyhow::Result<Case> {
    let queue = common::fresh_queue(client, "shutdown", 5, Duration::from_secs(30)).await?;
    let id = client.enqueue(&queue, "render", &5).await?;
    let running = common::spawn(worker(client, &queue, grace)?);
    common::wait_status(client, &id, TaskStatus::Started, Duration::from_secs(10)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!("grace {grace:?}: shutdown requested while the task runs");
    let t = Instant::now();
    running.stop().await?;
    let shutdown_took = t.elapsed();
    let after_shutdown = client.task_status(&id, None).await?.status;
    println!(
        "grace {grace:?}: worker exited after {:.1}s; task is {}{}",
        shutdown_took.as_secs_f64(),
        after_shutdown.as_str(),
        if after_shutdown == TaskStatus::Success {
            ""
        } else {
            " (handed back)"
        }
    );
    let mut last = after_shutdown;
    if !last.is_final() {
        let again = common::spawn(worker(client, &queue, grace)?);
        last = client.wait_for(&id, Duration::from_secs(20)).await?.status;
        again.stop().await?;
        println!(
            "grace {grace:?}: a new worker finished it: {}",
            last.as_str()
        );
    }
    Ok(Case {
        after_shutdown,
        shutdown_took,
        last,
    })
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let (finish, release) = tokio::join!(
        case(&client, Duration::from_secs(10)),
        case(&client, Duration::from_millis(500))
    );
    Ok(Report {
        finish: finish?,
        release: release?,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
