//! `sluice task status ID [--wait 10s]`: where a task is.

use std::time::Duration;

use clap::{Args, Subcommand};
use sluice_client::ResultExt;

use super::args::parse_duration;
use super::output::{body_text, details, json, or_dash};
use super::{Conn, Failure};

/// `sluice task ...`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: TaskCommand,
}

#[derive(Debug, Subcommand)]
enum TaskCommand {
    /// Show a task's status: PENDING, STARTED, RETRY, SUCCESS, FAILURE, UNKNOWN or CANCELLED.
    Status {
        /// The task id (its message id: 16 hex digits).
        id: String,
        /// Wait up to this long (at most 30s) for the task to finish.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        wait: Option<Duration>,
    },
}

/// Runs a task subcommand.
pub async fn run(a: TaskArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    match a.cmd {
        TaskCommand::Status { id, wait } => {
            let t = c.task_status(&id, wait).await?;
            if a.conn.json {
                return json(&t);
            }
            details(&[
                ("id", t.id.clone()),
                ("status", t.status.as_str().to_owned()),
                ("queue", or_dash(t.queue.as_ref())),
                ("receive_count", t.receive_count.to_string()),
                (
                    "result",
                    or_dash(t.decoded_result().ok().flatten().map(|b| body_text(&b))),
                ),
                ("error", or_dash(t.error.as_ref())),
            ]);
        }
    }
    Ok(())
}
