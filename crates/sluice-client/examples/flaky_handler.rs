//! A handler that fails once and succeeds on the retry.
//!
//! The handler of task `charge` answers a transient error on its first attempt ("upstream
//! timed out"); the worker nacks, the queue's backoff (50 – 200 ms here) applies, and the
//! second attempt succeeds. Run against a broker (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example flaky_handler
//! ```
//!
//! It prints (ids and queue suffix vary; the worker's log lines go to stderr):
//!
//! ```text
//! queue flaky-3f2a1c: task 000000000000002a enqueued
//! attempt 1: failing with a transient error
//! attempt 2: succeeding
//! task 000000000000002a: SUCCESS after 2 attempts, result {"charged":42,"attempt":2}
//! worker metrics: 1 success, 1 retry
//! ```

mod common;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_client::{Outcome, ResultExt, TaskContext, TaskError, TaskStatus, Worker};

/// The arguments of task `charge`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Charge {
    /// Amount in cents.
    pub amount: u64,
}

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// The final status.
    pub status: TaskStatus,
    /// Deliveries it took.
    pub receive_count: u32,
    /// The stored result.
    pub result: Option<serde_json::Value>,
    /// Retries the worker counted.
    pub retries: u64,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "flaky", 5, Duration::from_secs(10)).await?;
    let worker = Worker::builder(client.clone(), &queue)
        .poll_wait(Duration::from_millis(200))
        .handler("charge", |ctx: TaskContext, c: Charge| async move {
            if ctx.attempt() == 1 {
                println!("attempt 1: failing with a transient error");
                return Err(TaskError::transient("upstream timed out"));
            }
            println!("attempt {}: succeeding", ctx.attempt());
            Ok(serde_json::json!({"charged": c.amount, "attempt": ctx.attempt()}))
        })
        .build()?;
    let running = common::spawn(worker);
    let id = client
        .enqueue(&queue, "charge", &Charge { amount: 42 })
        .await?;
    println!("queue {queue}: task {id} enqueued");
    let view = client.wait_for(&id, Duration::from_secs(20)).await?;
    let result = view.decoded_result()?.map(|b| b.json()).transpose()?;
    println!(
        "task {id}: {} after {} attempts, result {}",
        view.status.as_str(),
        view.receive_count,
        result.as_ref().map(ToString::to_string).unwrap_or_default()
    );
    let m = running.metrics.snapshot();
    println!(
        "worker metrics: {} success, {} retry",
        m.completed(Outcome::Success),
        m.retries()
    );
    running.stop().await?;
    Ok(Report {
        status: view.status,
        receive_count: view.receive_count,
        result,
        retries: m.retries(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
