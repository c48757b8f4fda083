//! `sluice dlq list QUEUE`: the dead letters of a DLQ and why they failed (SPEC §5), one row
//! each or grouped by error with counts.
//!
//! The broker's browse route pages through a queue; the filters (error text, attributes,
//! time) are applied here while paging, up to `--limit` matches.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::json;
use sluice_client::Client;
use sluice_client::wire::{BrowseQuery, BrowseStateWire, DeadLetterReasonView, MessageView};

use super::args::{parse_attr, parse_duration, short_time, time_ago, time_ms};
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
}

#[derive(Debug, Args)]
struct ListArgs {
    /// The dead-letter queue, or a source queue (then its DLQ is listed).
    queue: String,
    /// Group the dead letters by their last error, with counts and reasons, largest first.
    #[arg(long, value_name = "FIELD")]
    group_by: Option<GroupBy>,
    /// Only dead letters whose last error contains this text.
    #[arg(long, value_name = "TEXT")]
    error: Option<String>,
    /// Only dead letters with this attribute value (repeat for several: all must match).
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attr)]
    attrs: Vec<(String, String)>,
    /// Only dead letters dead-lettered within this long, e.g. 30m or 1h.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    since: Option<Duration>,
    /// Most dead letters to list (or to group); the DLQ is paged until this many match.
    #[arg(long, default_value_t = 1000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    limit: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum GroupBy {
    /// The last error reported.
    Error,
}

/// Runs a dlq subcommand.
pub async fn run(a: DlqArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    match a.cmd {
        DlqCommand::List(l) => list(&c, l, a.conn.json).await,
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

struct Filter {
    error: Option<String>,
    attrs: Vec<(String, String)>,
    since_ms: Option<i64>,
}

impl Filter {
    fn matches(&self, m: &MessageView) -> bool {
        if let Some(e) = &self.error
            && !m
                .last_error
                .as_deref()
                .is_some_and(|le| le.contains(e.as_str()))
        {
            return false;
        }
        if !self
            .attrs
            .iter()
            .all(|(k, v)| m.attributes.get(k) == Some(v))
        {
            return false;
        }
        if let Some(since) = self.since_ms
            && time_ms(dead_lettered_at(m)).is_none_or(|t| t < since)
        {
            return false;
        }
        true
    }
}

/// Pages through `dlq` collecting up to `limit` matching messages; also answers whether
/// more may exist past the limit.
async fn collect(
    c: &Client,
    dlq: &str,
    filter: &Filter,
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

/// One group of `--group-by error`.
#[derive(Debug, Serialize)]
struct Group {
    error: Option<String>,
    count: u64,
    reasons: BTreeMap<&'static str, u64>,
    source_queues: BTreeMap<String, u64>,
    first_dead_lettered_at: String,
    last_dead_lettered_at: String,
}

fn group(messages: &[MessageView]) -> Vec<Group> {
    let mut groups: BTreeMap<Option<String>, Group> = BTreeMap::new();
    for m in messages {
        let at = dead_lettered_at(m).to_owned();
        let g = groups.entry(m.last_error.clone()).or_insert_with(|| Group {
            error: m.last_error.clone(),
            count: 0,
            reasons: BTreeMap::new(),
            source_queues: BTreeMap::new(),
            first_dead_lettered_at: at.clone(),
            last_dead_lettered_at: at.clone(),
        });
        g.count += 1;
        *g.reasons
            .entry(reason_str(m.dead_letter_reason))
            .or_default() += 1;
        *g.source_queues
            .entry(m.source_queue.clone().unwrap_or_else(|| "-".to_owned()))
            .or_default() += 1;
        if time_ms(&at) < time_ms(&g.first_dead_lettered_at) {
            g.first_dead_lettered_at = at.clone();
        }
        if time_ms(&at) > time_ms(&g.last_dead_lettered_at) {
            g.last_dead_lettered_at = at;
        }
    }
    let mut v: Vec<Group> = groups.into_values().collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.error.cmp(&b.error)));
    v
}

fn counts<K: std::fmt::Display>(m: &BTreeMap<K, u64>) -> String {
    let mut v: Vec<(&K, &u64)> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn list(c: &Client, l: ListArgs, as_json: bool) -> Result<(), Failure> {
    let dlq = resolve_dlq(c, &l.queue, as_json).await?;
    let filter = Filter {
        error: l.error,
        attrs: l.attrs,
        since_ms: l.since.map(|d| time_ago(d).as_millis()),
    };
    let (messages, more) = collect(c, &dlq, &filter, l.limit).await?;
    let more_note = || {
        if more {
            eprintln!(
                "showing the first {} matching dead letters of {dlq}; there are more \
                 (raise --limit)",
                l.limit
            );
        }
    };
    if l.group_by == Some(GroupBy::Error) {
        let groups = group(&messages);
        if as_json {
            return json(&json!({
                "queue": dlq,
                "total": messages.len(),
                "truncated": more,
                "groups": groups,
            }));
        }
        let mut t = Table::new(&[
            "COUNT",
            "LAST ERROR",
            "REASONS",
            "SOURCE QUEUES",
            "FIRST",
            "LAST",
        ]);
        for g in &groups {
            t.row(vec![
                g.count.to_string(),
                truncate(g.error.as_deref().unwrap_or("(no error)"), 60),
                counts(&g.reasons),
                counts(&g.source_queues),
                short_time(&g.first_dead_lettered_at),
                short_time(&g.last_dead_lettered_at),
            ]);
        }
        t.print();
        eprintln!(
            "{} dead letters in {} groups in {dlq}",
            messages.len(),
            groups.len()
        );
        more_note();
        return Ok(());
    }
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
