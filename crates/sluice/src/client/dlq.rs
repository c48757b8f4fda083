//! `sluice dlq list QUEUE`: the dead letters of a DLQ and why they failed, one row
//! each; `sluice dlq summary QUEUE` (and `dlq list --group-by`): all of them counted by error,
//! reason, source queue, key or attribute.
//!
//! A listing pages through the broker's browse route, applying the filters here, up to
//! `--limit` matches. A summary is counted by the broker over the whole queue, however large.

use clap::{Args, Subcommand};
use serde_json::json;
use sluice_client::Client;
use sluice_client::wire::{
    BrowseQuery, BrowseStateWire, DeadLetterReasonView, MessageView, SummaryView,
};

use super::args::short_time;
use super::filter::DlqFilterArgs;
use super::output::{Table, json, or_dash, truncate};
use super::{Conn, Failure};

/// `sluice dlq ...`.
#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: DlqCommand,
}

#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// List dead letters with their reason, last error, attempts and source queue.
    List(ListArgs),
    /// Count every dead letter of a DLQ by error, reason, source queue, key or attribute.
    Summary(SummaryArgs),
}

#[derive(Debug, Args)]
struct ListArgs {
    /// The dead-letter queue, or a source queue (then its DLQ is listed).
    queue: String,
    /// Count every dead letter by this key instead of listing them (as `dlq summary`):
    /// error, reason, source, key or attribute:NAME.
    #[arg(long, value_name = "KEY", value_parser = parse_group_by)]
    group_by: Option<String>,
    #[command(flatten)]
    filter: DlqFilterArgs,
    /// Most dead letters to list; the DLQ is paged until this many match. With --group-by,
    /// the most groups to show (at most 1000).
    #[arg(long, default_value_t = 1000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    limit: u64,
}

#[derive(Debug, Args)]
struct SummaryArgs {
    /// The dead-letter queue, or a source queue (then its DLQ is counted).
    queue: String,
    /// What to count by: error (the last error), reason (exhausted, rejected, lease_expired,
    /// expired), source (the queue it failed in), key (the key it was sent with) or
    /// attribute:NAME.
    #[arg(long, default_value = "error", value_name = "KEY", value_parser = parse_group_by)]
    group_by: String,
    #[command(flatten)]
    filter: DlqFilterArgs,
    /// Most groups to show, largest first (1 to 1000); the counts cover every dead letter.
    #[arg(long, default_value_t = 100, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    limit: u32,
}

/// Checks a grouping the way the broker does, so a typo is a usage error.
fn parse_group_by(s: &str) -> Result<String, String> {
    s.parse::<sluice_core::summary::GroupBy>()
        .map(|g| g.to_string())
        .map_err(|e| e.to_string())
}

/// Runs a dlq subcommand.
pub async fn run(a: DlqArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    match a.cmd {
        DlqCommand::List(l) => list(&c, l, a.conn.json).await,
        DlqCommand::Summary(sa) => {
            let dlq = resolve_dlq(&c, &sa.queue, a.conn.json).await?;
            let query = sa.filter.summary_query(&sa.group_by, sa.limit);
            let s = c.summary(&dlq, &query).await?;
            print_summary(&s, a.conn.json)
        }
    }
}

/// The DLQ `name` stands for: `name` itself when it is some queue's DLQ (or has no DLQ of its
/// own), else its `dead_letter_queue`. Says so on stderr when it picks the DLQ of a source.
pub async fn resolve_dlq(c: &Client, name: &str, quiet: bool) -> Result<String, Failure> {
    let queues = c.list_queues().await?;
    if queues
        .iter()
        .any(|q| q.config.dead_letter_queue.as_deref() == Some(name))
    {
        return Ok(name.to_owned());
    }
    // Not listed (or scoped out of the list): ask for it, which also says "not found".
    let q = match queues.into_iter().find(|q| q.name == name) {
        Some(q) => q,
        None => c.get_queue(name).await?,
    };
    match q.config.dead_letter_queue {
        Some(dlq) => {
            if !quiet {
                eprintln!("{name} is a source queue; using its dead-letter queue {dlq}");
            }
            Ok(dlq)
        }
        None => Ok(name.to_owned()),
    }
}

/// A dead letter's reason as the API spells it.
pub fn reason_str(r: Option<DeadLetterReasonView>) -> &'static str {
    match r {
        Some(DeadLetterReasonView::Exhausted) => "exhausted",
        Some(DeadLetterReasonView::LeaseExpired) => "lease_expired",
        Some(DeadLetterReasonView::Rejected) => "rejected",
        Some(DeadLetterReasonView::Expired) => "expired",
        None => "-",
    }
}

/// When the message entered the DLQ: its dead-lettering time, else when it entered the queue.
fn dead_lettered_at(m: &MessageView) -> &str {
    m.dead_lettered_at.as_deref().unwrap_or(&m.entered_at)
}

/// Pages through `dlq` collecting up to `limit` matching messages; also answers whether
/// more may exist past the limit.
async fn collect(
    c: &Client,
    dlq: &str,
    filter: &DlqFilterArgs,
    limit: u64,
) -> Result<(Vec<MessageView>, bool), Failure> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = c
            .browse(
                dlq,
                &BrowseQuery {
                    state: Some(BrowseStateWire::All),
                    limit: Some(1000),
                    cursor,
                    ..Default::default()
                },
            )
            .await?;
        for m in page.messages {
            if filter.matches(&m) {
                if out.len() as u64 == limit {
                    return Ok((out, true));
                }
                out.push(m);
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok((out, false)),
        }
    }
}

/// What a summary key stands for when a message has none.
fn none_key(group_by: &str) -> String {
    match group_by {
        "error" => "(no error)".to_owned(),
        "reason" => "(not dead-lettered)".to_owned(),
        "source" => "(no source queue)".to_owned(),
        other => format!("(no {})", other.trim_start_matches("attribute:")),
    }
}

/// Prints a summary as a table (KEY, COUNT, FIRST, LAST, SAMPLE) with a footer on stderr,
/// or as the broker's JSON.
fn print_summary(s: &SummaryView, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return json(s);
    }
    let mut t = Table::new(&["KEY", "COUNT", "FIRST", "LAST", "SAMPLE"]);
    for g in &s.groups {
        let key = match g.key.as_deref() {
            None => none_key(&s.group_by),
            Some("") => "\"\"".to_owned(),
            Some(k) => truncate(&k.replace('\n', " "), 60),
        };
        t.row(vec![
            key,
            g.count.to_string(),
            short_time(&g.first_at),
            short_time(&g.last_at),
            g.sample_id.clone(),
        ]);
    }
    t.print();
    eprintln!(
        "{} messages in {} groups by {} in {}",
        s.total, s.group_count, s.group_by, s.queue
    );
    if s.more_groups {
        eprintln!(
            "showing the largest {} of {} groups (raise --limit, up to 1000)",
            s.groups.len(),
            s.group_count
        );
    }
    Ok(())
}

async fn list(c: &Client, l: ListArgs, as_json: bool) -> Result<(), Failure> {
    let dlq = resolve_dlq(c, &l.queue, as_json).await?;
    if let Some(group_by) = &l.group_by {
        let limit = u32::try_from(l.limit.min(1000)).unwrap_or(1000);
        let s = c
            .summary(&dlq, &l.filter.summary_query(group_by, limit))
            .await?;
        return print_summary(&s, as_json);
    }
    let (messages, more) = collect(c, &dlq, &l.filter, l.limit).await?;
    let more_note = || {
        if more {
            eprintln!(
                "showing the first {} matching dead letters of {dlq}; there are more \
                 (raise --limit)",
                l.limit
            );
        }
    };
    if as_json {
        return json(&json!({
            "queue": dlq,
            "messages": messages,
            "truncated": more,
        }));
    }
    let mut t = Table::new(&[
        "ID",
        "REASON",
        "LAST ERROR",
        "ATTEMPTS",
        "SOURCE",
        "DEAD-LETTERED",
    ]);
    for m in &messages {
        let attempts = (m.receive_count as usize).max(m.attempts.len());
        t.row(vec![
            m.id.clone(),
            reason_str(m.dead_letter_reason).to_owned(),
            truncate(&or_dash(m.last_error.as_ref()).replace('\n', " "), 50),
            attempts.to_string(),
            or_dash(m.source_queue.as_ref()),
            short_time(dead_lettered_at(m)),
        ]);
    }
    t.print();
    if messages.is_empty() {
        eprintln!("no dead letters in {dlq} match");
    }
    more_note();
    Ok(())
}
