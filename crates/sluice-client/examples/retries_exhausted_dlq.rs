//! A handler that always fails: after `max_receive_count` attempts the task is in the DLQ.
//!
//! Task `sync` always answers a transient error ("database is down"). The queue allows 3
//! attempts; after the third the worker's nack dead-letters the task: its status is `FAILURE`
//! with the error, and it sits in `<queue>.dlq` with its attempt history. Run against a broker
//! (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example retries_exhausted_dlq
//! ```
//!
//! It prints (ids vary):
//!
//! ```text
//! queue dlq-demo-0c11aa (max 3 attempts): task 0000000000000031 enqueued
//! attempt 1 of 3: database is down
//! attempt 2 of 3: database is down
//! attempt 3 of 3: database is down
//! task 0000000000000031: FAILURE after 3 attempts, error "database is down"
//! in dlq-demo-0c11aa.dlq: 0000000000000031 (3 attempts recorded)
//! ```

mod common;

use std::time::Duration;

use sluice_client::wire::{BrowseQuery, BrowseStateWire};
use sluice_client::{TaskContext, TaskError, TaskStatus, Worker};

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// The final status.
    pub status: TaskStatus,
    /// Its error.
    pub error: Option<String>,
    /// Deliveries made.
    pub receive_count: u32,
    /// Whether the DLQ holds it.
    pub in_dlq: bool,
    /// Attempts recorded in its history.
    pub attempts: usize,
    /// Tasks the worker counted as dead-lettered.
    pub dead_lettered: u64,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "dlq-demo", 3, Duration::from_secs(10)).await?;
    let worker = Worker::builder(client.clone(), &queue)
        .poll_wait(Duration::from_millis(200))
        .handler("sync", |ctx: TaskContext, ()| async move {
            println!(
                "attempt {} of {}: database is down",
                ctx.attempt(),
                ctx.max_attempts()
            );
            Err::<(), _>(TaskError::transient("database is down"))
        })
        .build()?;
    let running = common::spawn(worker);
    let id = client.enqueue(&queue, "sync", &()).await?;
    println!("queue {queue} (max 3 attempts): task {id} enqueued");
    let view = client.wait_for(&id, Duration::from_secs(20)).await?;
    println!(
        "task {id}: {} after {} attempts, error {:?}",
        view.status.as_str(),
        view.receive_count,
        view.error.as_deref().unwrap_or("")
    );
    let dlq = format!("{queue}.dlq");
    let page = client
        .browse(
            &dlq,
            &BrowseQuery {
                state: Some(BrowseStateWire::All),
                ..BrowseQuery::default()
            },
        )
        .await?;
    let found = page.messages.iter().find(|m| m.id == id);
    let attempts = found.map_or(0, |m| m.attempts.len());
    if found.is_some() {
        println!("in {dlq}: {id} ({attempts} attempts recorded)");
    }
    let dead_lettered = running.metrics.snapshot().dead_lettered;
    running.stop().await?;
    Ok(Report {
        status: view.status,
        error: view.error,
        receive_count: view.receive_count,
        in_dlq: found.is_some(),
        attempts,
        dead_lettered,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
