//! The `on_dead_letter` hook fires exactly once per task that fails for good.
//!
//! Three `import` tasks always fail (transient, 2 attempts allowed) and one `parse` task fails
//! permanently (dead-lettered at once). The hook "pages" for each; the first page fails
//! ("pager unreachable"), which is logged and changes nothing. Run against a broker
//! (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example dead_letter_alert
//! ```
//!
//! It prints (ids and order vary, an alert may come before the "enqueued" line; the hook
//! failure is logged on stderr):
//!
//! ```text
//! queue alerts-5d01e2: 4 failing tasks enqueued
//! ALERT task 0000000000000040: source file missing
//! ALERT task 0000000000000041: malformed header
//! ALERT task 0000000000000042: source file missing
//! ALERT task 0000000000000043: source file missing
//! 4 tasks FAILURE, 4 alerts, each task alerted exactly once
//! ```

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_client::{TaskContext, TaskError, TaskStatus, Worker};

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// The tasks enqueued.
    pub ids: Vec<String>,
    /// Their final statuses.
    pub statuses: Vec<TaskStatus>,
    /// Hook calls per task id.
    pub alerts: HashMap<String, u32>,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "alerts", 2, Duration::from_secs(10)).await?;
    let alerts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let seen = Arc::clone(&alerts);
    let worker = Worker::builder(client.clone(), &queue)
        .poll_wait(Duration::from_millis(200))
        .handler("import", |_ctx: TaskContext, _file: String| async move {
            Err::<(), _>(TaskError::transient("source file missing"))
        })
        .handler("parse", |_ctx: TaskContext, _file: String| async move {
            Err::<(), _>(TaskError::permanent("malformed header"))
        })
        .on_dead_letter(move |task_id, error| {
            let seen = Arc::clone(&seen);
            async move {
                println!("ALERT task {task_id}: {error}");
                let first = {
                    let mut m = seen.lock().map_err(|_| "poisoned")?;
                    let first = m.is_empty();
                    *m.entry(task_id).or_default() += 1;
                    first
                };
                if first {
                    return Err("pager unreachable".into());
                }
                Ok(())
            }
        })
        .build()?;
    let running = common::spawn(worker);
    let mut ids = Vec::new();
    for (task, file) in [
        ("import", "a.csv"),
        ("parse", "b.csv"),
        ("import", "c.csv"),
        ("import", "d.csv"),
    ] {
        ids.push(client.enqueue(&queue, task, &file).await?);
    }
    println!("queue {queue}: {} failing tasks enqueued", ids.len());
    let views = common::wait_all(&client, &ids, Duration::from_secs(20)).await?;
    // Give a duplicate alert, if there were one, the time to show up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await?;
    let alerts = alerts
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let statuses: Vec<TaskStatus> = views.iter().map(|v| v.status).collect();
    let once = ids.iter().all(|id| alerts.get(id) == Some(&1));
    println!(
        "{} tasks {}, {} alerts, {}",
        statuses
            .iter()
            .filter(|s| **s == TaskStatus::Failure)
            .count(),
        TaskStatus::Failure.as_str(),
        alerts.values().sum::<u32>(),
        if once {
            "each task alerted exactly once"
        } else {
            "NOT each task alerted exactly once"
        }
    );
    Ok(Report {
        ids,
        statuses,
        alerts,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
