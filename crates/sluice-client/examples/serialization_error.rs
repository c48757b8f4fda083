//! Arguments that JSON cannot represent fail at the `enqueue` call, with guidance, and
//! nothing reaches the broker.
//!
//! Two enqueues fail: one with a NaN inside a struct (serde_json would silently send `null`),
//! one with a map whose keys are tuples (JSON keys are strings). The queue's `sent` total stays
//! 0. Run against a broker (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example serialization_error
//! ```
//!
//! It prints:
//!
//! ```text
//! enqueue refused: the arguments of task "score" cannot be serialized as JSON: the value at .weights[1] is NaN, which JSON cannot represent (serde_json would silently send null); replace it with a finite number, None/null, or a string such as "NaN"
//! enqueue refused: the arguments of task "route" cannot be serialized as JSON: key must be a string; JSON object keys are strings: use a map with String keys (e.g. convert the keys with to_string()), or send the entries as a list of [key, value] pairs
//! queue serialization-1b2c3d: 0 messages sent
//! ```

mod common;

use std::collections::BTreeMap;

use serde::Serialize;

/// Arguments of task `score`.
#[derive(Debug, Serialize)]
pub struct Score {
    /// Weights; one is NaN.
    pub weights: Vec<f64>,
}

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// The error messages.
    pub errors: Vec<String>,
    /// Whether every error was `invalid_argument` raised before sending.
    pub all_invalid_input: bool,
    /// The queue's `sent` total afterwards.
    pub sent: u64,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(
        &client,
        "serialization",
        5,
        std::time::Duration::from_secs(30),
    )
    .await?;
    let mut errors = Vec::new();
    let mut all_invalid_input = true;
    let nan = Score {
        weights: vec![0.5, f64::NAN],
    };
    let mut routes = BTreeMap::new();
    routes.insert((1, 2), "a to b");
    for r in [
        client.enqueue(&queue, "score", &nan).await,
        client.enqueue(&queue, "route", &routes).await,
    ] {
        match r {
            Ok(id) => println!("unexpectedly enqueued {id}"),
            Err(e) => {
                all_invalid_input &= matches!(e, sluice_client::Error::InvalidInput(_));
                println!("enqueue refused: {e}");
                errors.push(e.to_string());
            }
        }
    }
    let sent = client.stats(&queue).await?.totals.sent;
    println!("queue {queue}: {sent} messages sent");
    Ok(Report {
        errors,
        all_invalid_input,
        sent,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
