//! A result larger than the queue's cap is dropped with a warning; the task still succeeds.
//!
//! Task `render` returns a 5 MiB string. The queue keeps results of at most
//! `max_message_bytes` (256 KiB by default), so the worker logs a warning ("result is over the
//! size cap and was dropped; the task still succeeds") and acks without a result: the task is
//! `SUCCESS` with no result. Run against a broker (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example oversized_result
//! ```
//!
//! It prints (the warning goes to stderr with the worker's log):
//!
//! ```text
//! queue oversized-4e5f60: task 0000000000000060 enqueued (its result will be 5 MiB; the cap is 262144 bytes)
//! WARN sluice.task{...}: result is over the size cap and was dropped; the task still succeeds bytes=5242882 cap=262144
//! task 0000000000000060: SUCCESS, result dropped (none stored); 1 result dropped by the worker
//! ```

mod common;

use std::time::Duration;

use sluice_client::{ResultExt, TaskContext, TaskStatus, Worker};

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// The final status.
    pub status: TaskStatus,
    /// Whether a result was stored.
    pub result_stored: bool,
    /// Results the worker dropped.
    pub results_dropped: u64,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "oversized", 5, Duration::from_secs(30)).await?;
    let cap = client.get_queue(&queue).await?.config.max_message_bytes;
    let worker = Worker::builder(client.clone(), &queue)
        .poll_wait(Duration::from_millis(200))
        .handler("render", |_ctx: TaskContext, mib: usize| async move {
            Ok("x".repeat(mib * 1024 * 1024))
        })
        .build()?;
    let running = common::spawn(worker);
    let id = client.enqueue(&queue, "render", &5).await?;
    println!(
        "queue {queue}: task {id} enqueued (its result will be 5 MiB; the cap is {cap} bytes)"
    );
    let view = client.wait_for(&id, Duration::from_secs(20)).await?;
    let result_stored = view.decoded_result()?.is_some();
    let results_dropped = running.metrics.snapshot().results_dropped;
    println!(
        "task {id}: {}, result {}; {results_dropped} result dropped by the worker",
        view.status.as_str(),
        if result_stored {
            "stored"
        } else {
            "dropped (none stored)"
        }
    );
    running.stop().await?;
    Ok(Report {
        status: view.status,
        result_stored,
        results_dropped,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
