//! `sluice message show|delete ID`: one message wherever it is, DLQs included.

use clap::{Args, Subcommand};
use serde_json::json;
use sluice_client::{BodyExt, ResultExt};

use super::output::{body_text, details, json, or_dash};
use super::{Conn, Failure};

/// `sluice message ...`.
#[derive(Debug, Args)]
pub struct MessageArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: MessageCommand,
}

#[derive(Debug, Subcommand)]
enum MessageCommand {
    /// Show a message: queue, state, body, attempts, result.
    Show {
        /// The message id (16 hex digits).
        id: String,
    },
    /// Delete a message (or completed record), whatever its state.
    Delete {
        /// The message id (16 hex digits).
        id: String,
    },
}

/// Runs a message subcommand.
pub async fn run(a: MessageArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    match a.cmd {
        MessageCommand::Show { id } => {
            let m = c.get_message(&id).await?;
            if a.conn.json {
                return json(&m);
            }
            let state = state_line(&m);
            let reason = m.dead_letter_reason.map(reason_text);
            let attrs = m
                .attributes
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut rows = vec![
                ("id", m.id.clone()),
                ("queue", m.queue.clone()),
                ("state", state),
                ("enqueued_at", m.enqueued_at.clone()),
                ("visible_at", or_dash(m.visible_at.as_ref())),
                ("receive_count", m.receive_count.to_string()),
                ("last_error", or_dash(m.last_error.as_ref())),
                (
                    "attributes",
                    if attrs.is_empty() { "-".into() } else { attrs },
                ),
                ("dedup_id", or_dash(m.dedup_id.as_ref())),
                ("source_queue", or_dash(m.source_queue.as_ref())),
                ("dead_letter_reason", or_dash(reason)),
                ("completed_at", or_dash(m.completed_at.as_ref())),
                (
                    "body",
                    m.decoded_body()
                        .map(|b| body_text(&b))
                        .unwrap_or_else(|_| "-".to_owned()),
                ),
                (
                    "result",
                    or_dash(m.decoded_result().ok().flatten().map(|b| body_text(&b))),
                ),
            ];
            for (i, at) in m.attempts.iter().enumerate() {
                let outcome = serde_json::to_value(at.outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let held = match (ran(at.started_at.as_deref(), &at.at), &at.consumer) {
                    (Some(ran), Some(c)) => format!(" (ran {ran}, {c})"),
                    (Some(ran), None) => format!(" (ran {ran})"),
                    (None, Some(c)) => format!(" ({c})"),
                    (None, None) => String::new(),
                };
                rows.push((
                    if i == 0 { "attempts" } else { "" },
                    format!("{} {outcome}{held}: {}", at.at, or_dash(at.error.as_ref())),
                ));
            }
            details(&rows);
        }
        MessageCommand::Delete { id } => {
            c.delete_message(&id).await?;
            if a.conn.json {
                return json(&json!({ "deleted": id }));
            }
            println!("deleted message {id}");
        }
    }
    Ok(())
}

/// How long a delivery ran, from its lease's start to its end: milliseconds below a second.
fn ran(started_at: Option<&str>, ended_at: &str) -> Option<String> {
    let start = sluice_core::time::parse_rfc3339("started_at", started_at?).ok()?;
    let end = sluice_core::time::parse_rfc3339("at", ended_at).ok()?;
    let ms = u64::try_from(end.as_millis() - start.as_millis()).unwrap_or(0);
    Some(if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        super::args::fmt_secs(ms / 1000)
    })
}

/// The wire form of a serde enum (`visible`, `exhausted`, ...).
fn wire_name<T: serde::Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn reason_text(r: sluice_client::wire::DeadLetterReasonView) -> String {
    wire_name(r)
}

/// `visible`, or for a dead letter `dead_lettered (exhausted, in payments.dlq)`, with its
/// state in the DLQ when that is not `visible` (someone received it from there).
fn state_line(m: &sluice_client::wire::MessageView) -> String {
    let state = wire_name(m.state);
    if !m.dead_lettered {
        return state;
    }
    let reason = m
        .dead_letter_reason
        .map_or_else(|| "unknown reason".to_owned(), reason_text);
    if state == "visible" {
        format!("dead_lettered ({reason}, in {})", m.queue)
    } else {
        format!("dead_lettered ({reason}, in {}; {state} there)", m.queue)
    }
}
