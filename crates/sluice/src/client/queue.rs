//! `sluice queue create|list|show|update|delete|pause|resume|purge`.

use clap::{Args, Subcommand};
use serde_json::json;
use sluice_client::wire::QueueView;

use super::args::{QueueConfigArgs, fmt_ms, fmt_rate};
use super::output::{Table, details, json, or_dash};
use super::{Conn, Failure};

/// `sluice queue ...`.
#[derive(Debug, Args)]
pub struct QueueArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: QueueCommand,
}

#[derive(Debug, Subcommand)]
enum QueueCommand {
    /// Create a queue (and its dead-letter queue NAME.dlq). On an existing queue, the given
    /// settings are applied.
    Create {
        /// Queue name: 1-80 of [A-Za-z0-9_.-].
        name: String,
        #[command(flatten)]
        config: QueueConfigArgs,
    },
    /// List the queues.
    List,
    /// Show a queue's configuration.
    Show {
        /// Queue name.
        name: String,
    },
    /// Change settings of an existing queue; unset flags keep their value.
    Update {
        /// Queue name.
        name: String,
        #[command(flatten)]
        config: QueueConfigArgs,
    },
    /// Delete a queue and every message in it.
    Delete {
        /// Queue name.
        name: String,
    },
    /// Stop deliveries (sends are still accepted).
    Pause {
        /// Queue name.
        name: String,
    },
    /// Resume deliveries.
    Resume {
        /// Queue name.
        name: String,
    },
    /// Remove every message of the queue.
    Purge {
        /// Queue name.
        name: String,
    },
}

/// Runs a queue subcommand.
pub async fn run(a: QueueArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let as_json = a.conn.json;
    match a.cmd {
        QueueCommand::Create { name, config } => {
            let put = c.put_queue(&name, &config.to_request()).await?;
            if as_json {
                return json(&put.queue);
            }
            if put.created {
                eprintln!("created queue {name}");
            } else {
                eprintln!("queue {name} already existed; the given settings were applied");
            }
            warnings(&put.queue);
            show(&put.queue);
        }
        QueueCommand::List => {
            let queues = c.list_queues().await?;
            if as_json {
                return json(&json!({ "queues": queues }));
            }
            let mut t = Table::new(&[
                "NAME",
                "VISIBILITY",
                "MAX RECEIVES",
                "DLQ",
                "RATE LIMIT",
                "PAUSED",
                "CREATED",
            ]);
            for q in &queues {
                t.row(vec![
                    q.name.clone(),
                    fmt_ms(q.config.visibility_timeout_ms),
                    q.config.max_receive_count.to_string(),
                    or_dash(q.config.dead_letter_queue.as_ref()),
                    or_dash(q.config.rate_limit.as_ref().map(fmt_rate)),
                    if q.config.paused { "yes" } else { "no" }.to_owned(),
                    q.created_at.clone(),
                ]);
            }
            t.print();
        }
        QueueCommand::Show { name } => {
            let q = c.get_queue(&name).await?;
            if as_json {
                return json(&q);
            }
            show(&q);
        }
        QueueCommand::Update { name, config } => {
            let req = config.to_request();
            if req == Default::default() {
                return Err(Failure::Usage(
                    "nothing to change: give at least one setting, e.g. --visibility 60s \
                     (see `sluice queue update --help`)"
                        .to_owned(),
                ));
            }
            // PUT would create a missing queue; an update of a typo must not.
            c.get_queue(&name).await?;
            let put = c.put_queue(&name, &req).await?;
            if as_json {
                return json(&put.queue);
            }
            eprintln!("updated queue {name}");
            warnings(&put.queue);
            show(&put.queue);
        }
        QueueCommand::Delete { name } => {
            c.delete_queue(&name).await?;
            if as_json {
                return json(&json!({ "deleted": name }));
            }
            println!("deleted queue {name}");
        }
        QueueCommand::Pause { name } => {
            let q = c.pause_queue(&name).await?;
            if as_json {
                return json(&q);
            }
            println!("paused queue {name}: it accepts sends and delivers nothing");
        }
        QueueCommand::Resume { name } => {
            let q = c.resume_queue(&name).await?;
            if as_json {
                return json(&q);
            }
            println!("resumed queue {name}");
        }
        QueueCommand::Purge { name } => {
            let p = c.purge_queue(&name).await?;
            if as_json {
                return json(&p);
            }
            println!("purged {} messages from {name}", p.purged);
        }
    }
    Ok(())
}

fn warnings(q: &QueueView) {
    for w in &q.warnings {
        eprintln!("warning: {w}");
    }
}

fn show(q: &QueueView) {
    let c = &q.config;
    details(&[
        ("name", q.name.clone()),
        ("created_at", q.created_at.clone()),
        ("visibility", fmt_ms(c.visibility_timeout_ms)),
        ("max_receive_count", c.max_receive_count.to_string()),
        ("dlq", or_dash(c.dead_letter_queue.as_ref())),
        ("backoff_base", fmt_ms(c.backoff_base_ms)),
        ("backoff_max", fmt_ms(c.backoff_max_ms)),
        ("delay", fmt_ms(c.delay_ms)),
        ("retention", fmt_ms(c.retention_ms)),
        ("max_message_bytes", c.max_message_bytes.to_string()),
        ("dedup_window", fmt_ms(c.dedup_window_ms)),
        ("rate_limit", or_dash(c.rate_limit.as_ref().map(fmt_rate))),
        ("max_in_flight", or_dash(c.max_in_flight)),
        ("max_depth", or_dash(c.max_depth)),
        ("result_ttl", fmt_ms(c.result_ttl_ms)),
        ("paused", c.paused.to_string()),
    ]);
}
