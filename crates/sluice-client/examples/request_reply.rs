//! Request/reply on top of the queue: `call` enqueues a task and waits for its result; a
//! slow handler makes it fail with a clear timeout error.
//!
//! `client.call(queue, "add", &(2, 3), 5 s)` returns `5` as soon as a worker has run it (the
//! wait is a long poll on the broker, not a busy loop). `client.call(queue, "slow", &(), 1 s)`
//! gives up after one second with [`sluice_client::Error::TaskTimeout`]; the task itself goes
//! on. Run against a broker (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example request_reply
//! ```
//!
//! It prints (the time varies):
//!
//! ```text
//! add(2, 3) = 5 in 12 ms
//! slow(): task 0000000000000091 did not finish within 1s (it is STARTED); it is still queued or running: wait longer, look it up later with task_status, or cancel it
//! ```

mod common;

use std::time::{Duration, Instant};

use sluice_client::{Error, TaskContext, Worker};

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// What `add(2, 3)` returned.
    pub sum: i64,
    /// How long that call took.
    pub took: Duration,
    /// The error of the slow call.
    pub timeout_error: String,
    /// Whether it was [`Error::TaskTimeout`].
    pub is_timeout: bool,
    /// How long the slow call took.
    pub slow_took: Duration,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "rpc", 5, Duration::from_secs(30)).await?;
    let worker = Worker::builder(client.clone(), &queue)
        .poll_wait(Duration::from_millis(200))
        .shutdown_grace(Duration::from_millis(100))
        .handler("add", |_ctx: TaskContext, (a, b): (i64, i64)| async move {
            Ok(a + b)
        })
        .handler("slow", |_ctx: TaskContext, ()| async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok("finally")
        })
        .build()?;
    let running = common::spawn(worker);
    let t = Instant::now();
    let sum: i64 = client
        .call(&queue, "add", &(2, 3), Duration::from_secs(5))
        .await?;
    let took = t.elapsed();
    println!("add(2, 3) = {sum} in {} ms", took.as_millis());
    let t = Instant::now();
    let slow: Result<String, Error> = client
        .call(&queue, "slow", &(), Duration::from_secs(1))
        .await;
    let slow_took = t.elapsed();
    let (timeout_error, is_timeout) = match slow {
        Ok(v) => (format!("unexpectedly answered {v:?}"), false),
        Err(e) => {
            println!("slow(): {e}");
            (e.to_string(), matches!(e, Error::TaskTimeout { .. }))
        }
    };
    running.stop().await?;
    Ok(Report {
        sum,
        took,
        timeout_error,
        is_timeout,
        slow_took,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
