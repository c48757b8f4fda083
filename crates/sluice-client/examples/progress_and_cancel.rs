//! A long task reports progress that a client watches as server-sent events; a second one is
//! cancelled mid-run, stops cooperatively and ends `CANCELLED`.
//!
//! Task `train` runs epochs of 150 ms and reports progress after each through its context.
//! The client follows the first task's event stream until it ends (`SUCCESS`). It cancels
//! the second once it is 20 % done; the handler hears of the cancel in the answer to its next
//! progress report (or lease extension), returns [`sluice_client::TaskError::cancelled`], and
//! the task stays `CANCELLED` (sticky). Run against a broker (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example progress_and_cancel
//! ```
//!
//! It prints (in about 2 seconds; ids vary, A's and B's lines interleave, and A's stream may
//! skip a step since the broker samples progress every 200 ms; a finished task's record keeps
//! its result, not its progress, so A's last line has none):
//!
//! ```text
//! queue train-0f1e2d: task A 0000000000000080 (10 epochs), task B 0000000000000081 (40 epochs)
//! A: PENDING
//! A: STARTED 10% epoch 1/10
//! A: STARTED 20% epoch 2/10
//! ...
//! B: cancelling at 20%
//! B: handler stopped after epoch 9 of 40
//! B: CANCELLED
//! A: STARTED 90% epoch 9/10
//! A: SUCCESS
//! ```

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use sluice_client::{Outcome, TaskContext, TaskError, TaskStatus, Worker};

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// Progress percentages seen on task A's event stream, in order.
    pub a_progress: Vec<f64>,
    /// Statuses seen on task A's event stream, in order.
    pub a_statuses: Vec<TaskStatus>,
    /// Task B's final status.
    pub b_status: TaskStatus,
    /// Epochs task B ran before it stopped.
    pub b_epochs_run: u32,
    /// Task B's epochs in all.
    pub b_epochs: u32,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "train", 5, Duration::from_secs(2)).await?;
    let epochs_run: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let seen = Arc::clone(&epochs_run);
    let worker = Worker::builder(client.clone(), &queue)
        .concurrency(2)
        .poll_wait(Duration::from_millis(200))
        .handler("train", move |ctx: TaskContext, epochs: u32| {
            let seen = Arc::clone(&seen);
            async move {
                for i in 1..=epochs {
                    if ctx.is_cancelled() {
                        return Err(TaskError::cancelled());
                    }
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    if let Ok(mut s) = seen.lock() {
                        s.insert(ctx.id().to_owned(), i);
                    }
                    let pct = f64::from(i) * 100.0 / f64::from(epochs);
                    // Progress is informative: a failed report does not fail the task.
                    let _ = ctx
                        .progress(pct, Some(&format!("epoch {i}/{epochs}")))
                        .await;
                }
                Ok(epochs)
            }
        })
        .build()?;
    let b_epochs = 40;
    let a = client.enqueue(&queue, "train", &10u32).await?;
    let b = client.enqueue(&queue, "train", &b_epochs).await?;
    println!("queue {queue}: task A {a} (10 epochs), task B {b} ({b_epochs} epochs)");
    let running = common::spawn(worker);

    let watch_a = async {
        let mut events = client.task_events(&a).await?;
        let (mut pcts, mut statuses) = (Vec::new(), Vec::new());
        while let Some(view) = events.next().await {
            let view = view?;
            let p = view.progress.as_ref();
            println!(
                "A: {}{}",
                view.status.as_str(),
                p.map(|p| format!(" {:.0}% {}", p.pct, p.detail.as_deref().unwrap_or("")))
                    .unwrap_or_default()
            );
            if let Some(p) = p {
                pcts.push(p.pct);
            }
            statuses.push(view.status);
        }
        anyhow::Ok((pcts, statuses))
    };
    let cancel_b = async {
        common::wait_until("task B to reach 20%", Duration::from_secs(20), || async {
            client
                .task_status(&b, None)
                .await
                .is_ok_and(|v| v.progress.is_some_and(|p| p.pct >= 20.0))
        })
        .await?;
        println!("B: cancelling at 20%");
        client.cancel(&b).await?;
        let metrics = running.metrics.clone();
        common::wait_until("B's handler to stop", Duration::from_secs(10), || async {
            metrics.snapshot().completed(Outcome::Cancelled) >= 1
        })
        .await?;
        let run = epochs_run
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .get(&b)
            .copied()
            .unwrap_or(0);
        println!("B: handler stopped after epoch {run} of {b_epochs}");
        let view = client.wait_for(&b, Duration::from_secs(10)).await?;
        println!("B: {}", view.status.as_str());
        anyhow::Ok((view.status, run))
    };
    let (a_res, b_res) = tokio::join!(watch_a, cancel_b);
    running.stop().await?;
    let (a_progress, a_statuses) = a_res?;
    let (b_status, b_epochs_run) = b_res?;
    Ok(Report {
        a_progress,
        a_statuses,
        b_status,
        b_epochs_run,
        b_epochs,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
