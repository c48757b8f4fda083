//! Bytes that are not a task envelope land byte-exact in the unprocessable queue.
//!
//! Three messages go in: raw non-JSON bytes, an envelope naming a task nobody handles, and
//! then a valid `greet` task. The worker moves the first two atomically to
//! `<queue>.unprocessable` (which it creates) with the decode error, no retries, and runs the
//! valid one normally. Run against a broker (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example malformed_message
//! ```
//!
//! It prints (ids vary):
//!
//! ```text
//! queue malformed-77a0b3: sent 10 raw bytes, an unknown task, and a valid task
//! valid task 0000000000000052: SUCCESS, result "hello, Ada"
//! malformed-77a0b3.unprocessable holds 2 messages:
//!   0000000000000050: [ff, 00, 6e, 6f, 74, 20, 6a, 73, 6f, 6e] (byte-exact) — the body is 10 bytes of binary data, not a JSON task envelope
//!   0000000000000051: {"task":"no_such_task","args":[],"kwargs":{}} — unknown task "no_such_task": no handler is registered under that name (this worker runs greet)
//! ```

mod common;

use std::time::Duration;

use sluice_client::wire::{BrowseQuery, BrowseStateWire};
use sluice_client::{BodyExt, DecodedBody, Outcome, ResultExt, TaskContext, TaskStatus, Worker};

/// The raw bytes sent.
pub const RAW: &[u8] = &[0xff, 0x00, b'n', b'o', b't', b' ', b'j', b's', b'o', b'n'];

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// Id of the raw message.
    pub raw_id: String,
    /// Id of the unknown-task message.
    pub unknown_id: String,
    /// Status of the valid task.
    pub valid_status: TaskStatus,
    /// Result of the valid task.
    pub valid_result: Option<String>,
    /// The unprocessable queue's messages: id, body, last error.
    pub unprocessable: Vec<(String, DecodedBody, Option<String>)>,
    /// Retries the worker made (none: bad messages are not retried).
    pub retries: u64,
    /// Messages the worker moved aside.
    pub moved: u64,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "malformed", 5, Duration::from_secs(10)).await?;
    let raw_id = client.send_raw(&queue, RAW.to_vec()).await?.id;
    let unknown_id = client.enqueue(&queue, "no_such_task", &()).await?;
    let valid_id = client.enqueue(&queue, "greet", &"Ada").await?;
    println!(
        "queue {queue}: sent {} raw bytes, an unknown task, and a valid task",
        RAW.len()
    );
    let worker = Worker::builder(client.clone(), &queue)
        .poll_wait(Duration::from_millis(200))
        .handler("greet", |_ctx: TaskContext, name: String| async move {
            Ok(format!("hello, {name}"))
        })
        .build()?;
    let running = common::spawn(worker);
    let view = client.wait_for(&valid_id, Duration::from_secs(20)).await?;
    let valid_result = view
        .decoded_result()?
        .map(|b| b.json::<String>())
        .transpose()?;
    println!(
        "valid task {valid_id}: {}, result {:?}",
        view.status.as_str(),
        valid_result.as_deref().unwrap_or("")
    );
    let unp = format!("{queue}.unprocessable");
    common::wait_until(
        "both bad messages to be moved",
        Duration::from_secs(10),
        || async { client.stats(&unp).await.is_ok_and(|s| s.visible >= 2) },
    )
    .await?;
    let m = running.metrics.snapshot();
    running.stop().await?;
    let page = client
        .browse(
            &unp,
            &BrowseQuery {
                state: Some(BrowseStateWire::All),
                ..BrowseQuery::default()
            },
        )
        .await?;
    println!("{unp} holds {} messages:", page.messages.len());
    let mut unprocessable = Vec::new();
    for msg in &page.messages {
        let body = msg.decoded_body()?;
        let shown = match &body {
            DecodedBody::Bytes(b) if b == RAW => format!("{:02x?} (byte-exact)", b),
            DecodedBody::Bytes(b) => format!("{:02x?} (CHANGED)", b),
            DecodedBody::Json(t) | DecodedBody::Text(t) => t.clone(),
        };
        println!(
            "  {}: {shown} — {}",
            msg.id,
            msg.last_error.as_deref().unwrap_or("")
        );
        unprocessable.push((msg.id.clone(), body, msg.last_error.clone()));
    }
    Ok(Report {
        raw_id,
        unknown_id,
        valid_status: view.status,
        valid_result,
        unprocessable,
        retries: m.retries(),
        moved: m.completed(Outcome::Unprocessable),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
