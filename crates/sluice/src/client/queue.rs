//! `sluice queue create|list|show|update|delete|pause|resume|purge|breaker`.

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use sluice_client::BreakerForce;
use sluice_client::wire::QueueView;

use super::args::{QueueConfigArgs, fmt_ms, fmt_rate};
use super::confirm::{confirm, messages};
use super::governance::{breaker_line, fmt_adaptive, fmt_breaker, last_transition, rate_line};
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
    /// Create a queue (and its dead-letter queue NAME.dlq). An existing queue is refused
    /// (exit 4, conflict) and left unchanged, unless --update is given.
    Create {
        /// Queue name: 1-80 of [A-Za-z0-9_.-].
        name: String,
        /// On an existing queue, apply the given settings instead of failing.
        #[arg(long)]
        update: bool,
        #[command(flatten)]
        config: Box<QueueConfigArgs>,
    },
    /// List the queues, by name (every page of the broker's listing).
    List {
        /// Only queues whose name starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
    },
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
        config: Box<QueueConfigArgs>,
    },
    /// Delete a queue and every message in it. A queue holding messages needs confirming:
    /// at a terminal it asks, otherwise pass --yes. Its dead-letter queue is kept unless
    /// --with-dlq is given.
    Delete {
        /// Queue name.
        name: String,
        /// Delete its dead-letter queue (and the messages there) too.
        #[arg(long)]
        with_dlq: bool,
        /// Do not ask; delete even when messages would be lost.
        #[arg(long, short = 'y')]
        yes: bool,
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
    /// Remove every message of the queue. A queue holding messages needs confirming: at a
    /// terminal it asks, otherwise pass --yes.
    Purge {
        /// Queue name.
        name: String,
        /// Do not ask; purge even when messages would be lost.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Force the queue's circuit breaker: `open` stops deliveries until it is forced closed
    /// (without probes, across restarts); `close` resumes them, the breaker judging again
    /// from an empty window. With --key, the breaker of that one key (a queue whose breaker
    /// has scope=key). Prints the breaker afterwards.
    Breaker {
        /// Queue name.
        name: String,
        /// `open` or `close`.
        state: BreakerAction,
        /// The message key whose own breaker to force.
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
    },
}

/// What `queue breaker` forces.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum BreakerAction {
    /// Stop deliveries until forced closed.
    Open,
    /// Resume deliveries; automatic from then on.
    #[value(alias = "closed")]
    Close,
}

/// Runs a queue subcommand.
///
/// Long because it is one arm per `sluice queue` subcommand, each the client call and its two
/// outputs (JSON or text); the dispatch reads as the list of commands.
pub async fn run(a: QueueArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let as_json = a.conn.json;
    match a.cmd {
        QueueCommand::Create {
            name,
            update,
            config,
        } => {
            let req = config.to_request();
            // Create-only is decided by the broker in one step: no check-then-act race.
            let (created, queue) = if update {
                let put = c.put_queue(&name, &req).await?;
                (put.created, put.queue)
            } else {
                (true, c.create_queue(&name, &req).await?)
            };
            if as_json {
                return json(&queue);
            }
            if created {
                eprintln!("created queue {name}");
            } else {
                eprintln!("queue {name} already existed; the given settings were applied");
            }
            warnings(&queue);
            show(&queue);
        }
        QueueCommand::List { prefix } => {
            let queues = c.list_queues_by_prefix(&prefix).await?;
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
        QueueCommand::Delete {
            name,
            with_dlq,
            yes,
        } => return delete(&c, &name, with_dlq, yes, as_json).await,
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
        QueueCommand::Purge { name, yes } => {
            let n = depth(&c, &name).await?;
            if n > 0 {
                confirm(
                    yes,
                    &format!("Purge queue {name} of {}?", messages(n)),
                    &format!("queue {name} holds {}", messages(n)),
                )?;
            }
            let p = c.purge_queue(&name).await?;
            if as_json {
                return json(&p);
            }
            println!("purged {} messages from {name}", p.purged);
        }
        QueueCommand::Breaker { name, state, key } => {
            let force = match state {
                BreakerAction::Open => BreakerForce::Open,
                BreakerAction::Close => BreakerForce::Closed,
            };
            if let Some(key) = key {
                let flow = match c.force_key_breaker(&name, &key, force).await {
                    Err(e) if e.code() == Some(sluice_client::ErrorCode::Conflict) => {
                        return Err(Failure::Code(
                            super::exit::exit_code(&e),
                            format!(
                                "{e}\n  hint: give it one with `sluice queue update {name} \
                                 --breaker scope=key`"
                            ),
                        ));
                    }
                    r => r?,
                };
                if as_json {
                    return json(&flow);
                }
                details(&[("key", key), ("breaker", super::keys::flow_line(&flow))]);
                return Ok(());
            }
            let flow = match c.force_breaker(&name, force).await {
                Err(e) if e.code() == Some(sluice_client::ErrorCode::Conflict) => {
                    return Err(Failure::Code(
                        super::exit::exit_code(&e),
                        format!(
                            "{e}\n  hint: give it one with `sluice queue update {name} --breaker`"
                        ),
                    ));
                }
                r => r?,
            };
            if as_json {
                return json(&flow);
            }
            let mut rows = Vec::new();
            if let Some(b) = &flow.breaker {
                rows.push(("breaker", breaker_line(b)));
                if let Some(t) = last_transition(b) {
                    rows.push(("last change", t));
                }
            }
            if let Some(r) = rate_line(&flow) {
                rows.push(("adaptive rate", r));
            }
            details(&rows);
        }
    }
    Ok(())
}

/// Messages a delete or purge would lose: visible + delayed + in flight.
async fn depth(c: &sluice_client::Client, name: &str) -> Result<u64, Failure> {
    let s = c.stats(name).await?;
    Ok(s.visible + s.delayed + s.in_flight)
}

/// `queue delete`: confirms when messages would be lost, deletes the queue, then its DLQ
/// (with `--with-dlq`) or says that the DLQ was kept.
async fn delete(
    c: &sluice_client::Client,
    name: &str,
    with_dlq: bool,
    yes: bool,
    as_json: bool,
) -> Result<(), Failure> {
    let q = c.get_queue(name).await?;
    let n = depth(c, name).await?;
    // The DLQ, if it exists (it may have been deleted on its own).
    let dlq = match &q.config.dead_letter_queue {
        Some(d) => match depth(c, d).await {
            Ok(m) => Some((d.clone(), m)),
            Err(Failure::Api(e)) if e.is_not_found() => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    let doomed = match (&dlq, with_dlq) {
        (Some((_, m)), true) => n + m,
        _ => n,
    };
    if doomed > 0 {
        let (question, what) = match (&dlq, with_dlq) {
            (Some((d, m)), true) => (
                format!(
                    "Delete queue {name} with {} and its dead-letter queue {d} with {}?",
                    messages(n),
                    messages(*m)
                ),
                format!(
                    "queue {name} holds {} and its dead-letter queue {d} {}",
                    messages(n),
                    messages(*m)
                ),
            ),
            _ => (
                format!("Delete queue {name} with {}?", messages(n)),
                format!("queue {name} holds {}", messages(n)),
            ),
        };
        confirm(yes, &question, &what)?;
    }
    c.delete_queue(name).await?;
    let mut deleted_dlq = None;
    match (&dlq, with_dlq) {
        (Some((d, _)), true) => {
            c.delete_queue(d).await.map_err(|e| {
                Failure::Code(
                    super::exit::exit_code(&e),
                    format!("deleted queue {name}, but not its dead-letter queue {d}: {e}"),
                )
            })?;
            deleted_dlq = Some(d.clone());
        }
        (Some((d, m)), false) => eprintln!(
            "kept its dead-letter queue {d} ({}); delete it with `sluice queue delete {d}`, \
             or next time pass --with-dlq",
            messages(*m)
        ),
        _ => {}
    }
    if as_json {
        return json(&json!({ "deleted": name, "deleted_dlq": deleted_dlq }));
    }
    println!("deleted queue {name}");
    if let Some(d) = deleted_dlq {
        println!("deleted its dead-letter queue {d}");
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
        ("adaptive", or_dash(c.adaptive.as_ref().map(fmt_adaptive))),
        ("breaker", or_dash(c.breaker.as_ref().map(fmt_breaker))),
        (
            "push",
            or_dash(c.push.as_ref().map(|p| {
                format!(
                    "{} {} (timeout {}, concurrency {}, {})",
                    serde_json::to_value(p.method)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    p.url,
                    fmt_ms(p.timeout_ms),
                    p.concurrency,
                    if p.signed { "signed" } else { "unsigned" }
                )
            })),
        ),
        // max_in_flight_per_group, short enough to keep the column's width.
        ("group_in_flight", c.max_in_flight_per_group.to_string()),
        ("receive_wait", fmt_ms(c.receive_wait_ms)),
        ("content_dedup", c.content_dedup.to_string()),
        (
            "tags",
            or_dash((!c.tags.is_empty()).then(|| {
                c.tags
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })),
        ),
    ]);
}
