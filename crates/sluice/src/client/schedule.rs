//! `sluice schedule`: messages the broker enqueues on a cron expression or an interval —
//! `put`, `list`, `show`, `pause`, `resume`, `delete` and `trigger`.

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use sluice_client::wire::{CatchUpWire, ScheduleRequest, ScheduleView};

use super::args::{parse_attr, short_time};
use super::output::{Table, details, json as print_json, or_dash};
use super::{Conn, Failure};

/// `sluice schedule ...`.
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: ScheduleCommand,
}

#[derive(Debug, Subcommand)]
enum ScheduleCommand {
    /// Create a schedule or replace it: `--cron` (with `--tz`) or `--every`.
    Put(PutArgs),
    /// List every schedule with its next firing.
    List,
    /// Show one schedule, its progress and its next five firings.
    Show {
        /// The schedule's name.
        name: String,
    },
    /// Stop a schedule firing until it is resumed.
    Pause {
        /// The schedule's name.
        name: String,
    },
    /// Resume a paused schedule; what it missed is handled by its --catch-up.
    Resume {
        /// The schedule's name.
        name: String,
    },
    /// Delete a schedule; the messages it enqueued stay.
    Delete {
        /// The schedule's name.
        name: String,
    },
    /// Send the schedule's message now, once, besides its firings.
    Trigger {
        /// The schedule's name.
        name: String,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CatchUpArg {
    /// Skip missed firings.
    None,
    /// Enqueue the latest missed firing once.
    One,
    /// Enqueue every missed firing (the latest 1,000 at most).
    All,
}

#[derive(Debug, Args)]
struct PutArgs {
    /// The schedule's name (letters, digits, '_', '.', '-').
    name: String,
    /// The queue each firing is sent to.
    #[arg(long, short)]
    queue: String,
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with
    /// seconds first, e.g. "*/5 * * * *".
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    cron: Option<String>,
    /// The IANA time zone the cron expression is read in (default UTC), e.g. Europe/Berlin.
    #[arg(long = "tz", requires = "cron", value_name = "ZONE")]
    timezone: Option<String>,
    /// Fire at this interval instead, e.g. 30s, 5m, 1h (at least 1s).
    #[arg(long, value_parser = sluice_core::human::parse_duration)]
    every: Option<std::time::Duration>,
    /// The body of each message, as JSON (quote a string: '"sweep"').
    #[arg(long, default_value = "{}")]
    body: String,
    /// An attribute of each message (repeatable).
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attr)]
    attrs: Vec<(String, String)>,
    /// The key of each message (the tenant it runs for; 1 – 128 characters): fair delivery
    /// and per-key limits treat it as any message of that key.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// The priority of each message, 0 – 9 (9 most urgent) [default: the queue's
    /// default-priority].
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u8).range(0..=9))]
    priority: Option<u8>,
    /// What to do with firings missed while no broker ran or the schedule was paused.
    #[arg(long, value_enum, default_value = "none")]
    catch_up: CatchUpArg,
    /// Create it paused.
    #[arg(long)]
    paused: bool,
}

impl PutArgs {
    fn request(&self) -> Result<ScheduleRequest, Failure> {
        let body = serde_json::value::RawValue::from_string(self.body.clone()).map_err(|e| {
            Failure::Usage(format!(
                "--body must be JSON ({e}); quote a string, e.g. --body '\"sweep\"'"
            ))
        })?;
        Ok(ScheduleRequest {
            cron: self.cron.clone(),
            timezone: self.timezone.clone(),
            every_ms: self.every.map(|d| d.as_millis() as u64),
            queue: self.queue.clone(),
            body: Some(body),
            body_base64: None,
            attributes: (!self.attrs.is_empty()).then(|| self.attrs.iter().cloned().collect()),
            key: self.key.clone(),
            priority: self.priority,
            catch_up: Some(match self.catch_up {
                CatchUpArg::None => CatchUpWire::None,
                CatchUpArg::One => CatchUpWire::One,
                CatchUpArg::All => CatchUpWire::All,
            }),
            paused: Some(self.paused),
        })
    }
}

fn trigger(s: &ScheduleView) -> String {
    match (&s.cron, s.every_ms) {
        (Some(c), _) => format!("cron {c} ({})", s.timezone.as_deref().unwrap_or("UTC")),
        (None, Some(ms)) => format!(
            "every {}",
            sluice_core::human::fmt_duration(std::time::Duration::from_millis(ms))
        ),
        (None, None) => "-".to_owned(),
    }
}

fn show(s: &ScheduleView) {
    details(&[
        ("name", s.name.clone()),
        ("trigger", trigger(s)),
        ("queue", s.queue.clone()),
        ("key", or_dash(s.key.clone())),
        ("priority", or_dash(s.priority.map(|p| p.to_string()))),
        ("catch up", format!("{:?}", s.catch_up).to_lowercase()),
        ("paused", s.paused.to_string()),
        (
            "last fired",
            or_dash(s.last_fired.as_deref().map(short_time)),
        ),
        ("fired", s.fired.to_string()),
        ("missed", s.missed.to_string()),
        ("created", short_time(&s.created_at)),
        (
            "next",
            if s.next.is_empty() {
                "-".to_owned()
            } else {
                s.next
                    .iter()
                    .map(|t| short_time(t))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
    ]);
}

/// Runs `sluice schedule ...`.
pub async fn run(a: ScheduleArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let as_json = a.conn.json;
    let one = |s: ScheduleView| {
        if as_json {
            print_json(&s)
        } else {
            show(&s);
            Ok(())
        }
    };
    match a.cmd {
        ScheduleCommand::Put(p) => one(c.put_schedule(&p.name, &p.request()?).await?),
        ScheduleCommand::List => {
            let all = c.list_schedules().await?;
            if as_json {
                return print_json(&json!({ "schedules": all }));
            }
            let mut t = Table::new(&[
                "NAME", "TRIGGER", "QUEUE", "STATE", "FIRED", "MISSED", "NEXT",
            ]);
            for s in &all {
                t.row(vec![
                    s.name.clone(),
                    trigger(s),
                    s.queue.clone(),
                    if s.paused { "paused" } else { "active" }.to_owned(),
                    s.fired.to_string(),
                    s.missed.to_string(),
                    or_dash(s.next.first().map(|t| short_time(t))),
                ]);
            }
            t.print();
            if all.is_empty() {
                eprintln!(
                    "no schedules; create one with `sluice schedule put NAME --queue Q --every 5m`"
                );
            }
            Ok(())
        }
        ScheduleCommand::Show { name } => one(c.get_schedule(&name).await?),
        ScheduleCommand::Pause { name } => one(c.pause_schedule(&name).await?),
        ScheduleCommand::Resume { name } => one(c.resume_schedule(&name).await?),
        ScheduleCommand::Delete { name } => {
            c.delete_schedule(&name).await?;
            if as_json {
                return print_json(&json!({ "deleted": name }));
            }
            println!("deleted schedule {name}; the messages it enqueued stay");
            Ok(())
        }
        ScheduleCommand::Trigger { name } => {
            let sent = c.trigger_schedule(&name).await?;
            if as_json {
                return print_json(&sent);
            }
            println!("sent {} for schedule {name}", sent.id);
            Ok(())
        }
    }
}
