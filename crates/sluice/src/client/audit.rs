//! `sluice audit [--queue Q] [--since 1h] [--action A]... [--actor K] [--operator | --kind K]
//! [--limit N] [--cursor C]`: the broker's audit log — operator actions (config changes,
//! purge, delete, redrive) and dead-letter / expiry events, with who did them. `--queue Q`
//! shows Q's DLQ's entries too; `--operator` leaves out what the broker recorded itself; when
//! older entries exist than the page shows, a notice says how to see them.

use clap::Args;
use sluice_client::ops::AuditQuery;

use super::args::{parse_time, short_time};
use super::output::{Table, json, or_dash, truncate};
use super::{Conn, Failure};

/// `sluice audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    conn: Conn,
    /// Only this queue's entries and its DLQ's.
    #[arg(long, value_name = "QUEUE")]
    queue: Option<String>,
    /// Only entries since this time: how long ago (e.g. 1h, 30m) or an RFC 3339 time.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    since: Option<String>,
    /// Only entries of this action (repeat, or comma-separate, for several), e.g.
    /// `queue.purge`.
    #[arg(long = "action", value_name = "ACTION", value_delimiter = ',')]
    actions: Vec<String>,
    /// Only entries by this actor: an API key's name, or `sluice` for the broker itself.
    #[arg(long, value_name = "NAME")]
    actor: Option<String>,
    /// Only actions taken by a key or a person (the same as --kind operator).
    #[arg(long, conflicts_with = "kind")]
    operator: bool,
    /// Only entries of this kind: operator (actions taken by a key or a person), message (dead
    /// letters and expiries) or broker (the broker's other records).
    #[arg(long, value_name = "KIND", value_parser = ["operator", "message", "broker"])]
    kind: Option<String>,
    /// At most this many entries, the newest.
    #[arg(long, default_value_t = 100, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    limit: u64,
    /// The page before an earlier one: the cursor its notice gave.
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
}

/// Runs `sluice audit`.
pub async fn run(a: AuditArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let list = c
        .audit(&AuditQuery {
            queue: a.queue.clone(),
            since: a.since.clone(),
            actions: a.actions.clone(),
            actor: a.actor.clone(),
            kind: if a.operator {
                Some("operator".to_owned())
            } else {
                a.kind.clone()
            },
            limit: usize::try_from(a.limit).ok(),
            cursor: a.cursor.clone(),
        })
        .await?;
    if a.conn.json {
        return json(&list);
    }
    let mut t = Table::new(&[
        "TIME", "ACTOR", "ACTION", "QUEUE", "MESSAGE", "OUTCOME", "DETAILS",
    ]);
    for e in &list.entries {
        let details = e
            .details
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        t.row(vec![
            short_time(&e.at),
            e.actor.clone(),
            e.action.clone(),
            or_dash(e.queue.as_ref()),
            or_dash(e.message_id.as_ref()),
            e.outcome.clone(),
            if details.is_empty() {
                "-".to_owned()
            } else {
                truncate(&details, 100)
            },
        ]);
    }
    t.print();
    if list.entries.is_empty() {
        eprintln!("no audit entries match");
    }
    if let Some(cursor) = list.next_cursor.as_deref().filter(|_| list.more) {
        eprintln!(
            "{} entries shown; older ones exist: add --cursor {cursor} to see the page before",
            list.entries.len()
        );
    }
    Ok(())
}
