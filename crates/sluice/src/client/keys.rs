//! `sluice keys QUEUE [--order backlog|in_flight|oldest|breaker] [--limit N] [--cursor C]`:
//! what each key (tenant, customer, account) of a queue holds — waiting, in flight, its oldest
//! visible message's age, deliveries in the last minute — with its weight and limits, and, on
//! a queue that governs keys one by one, its own learned rate and breaker; most waiting first.
//! Messages sent without a key are listed as `(no key)`.

use clap::Args;
use sluice_client::wire::{KeyFlowView, KeyOrderView, KeysQuery};

use super::args::fmt_ms;
use super::output::{Table, json};
use super::{Conn, Failure};

/// `sluice keys`.
#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue.
    queue: String,
    /// Most waiting first (backlog), most in flight first (in_flight), the longest-waiting
    /// visible message first (oldest), or keys whose own breaker is open first (breaker).
    #[arg(long, default_value = "backlog",
          value_parser = ["backlog", "in_flight", "oldest", "breaker"])]
    order: String,
    /// At most this many keys.
    #[arg(long, default_value_t = 20, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    limit: u32,
    /// The next page: the cursor the previous one's notice gave.
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
}

/// Runs `sluice keys`.
pub async fn run(a: KeysArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let order = match a.order.as_str() {
        "in_flight" => KeyOrderView::InFlight,
        "oldest" => KeyOrderView::Oldest,
        "breaker" => KeyOrderView::Breaker,
        _ => KeyOrderView::Backlog,
    };
    let page = c
        .keys(
            &a.queue,
            &KeysQuery {
                order: Some(order),
                limit: Some(a.limit),
                cursor: a.cursor.clone(),
            },
        )
        .await?;
    if a.conn.json {
        return json(&page);
    }
    // The learned rate and breaker of each key, on a queue that governs keys.
    let governed = page.keys.iter().any(|k| k.flow.is_some());
    let mut head = vec![
        "KEY",
        "BACKLOG",
        "VISIBLE",
        "IN FLIGHT",
        "OLDEST",
        "DELIVERED/MIN",
        "WEIGHT",
        "MAX IN FLIGHT",
        "RATE",
    ];
    if governed {
        head.extend(["LEARNED", "BREAKER"]);
    }
    let mut t = Table::new(&head);
    for k in &page.keys {
        let mut row = vec![
            k.key.clone().unwrap_or_else(|| "(no key)".to_owned()),
            k.backlog.to_string(),
            k.visible.to_string(),
            k.in_flight.to_string(),
            if k.visible == 0 {
                "-".to_owned()
            } else {
                fmt_ms(k.oldest_visible_age_ms)
            },
            k.delivered_1m
                .map_or_else(|| "-".to_owned(), |d| d.to_string()),
            k.weight.to_string(),
            k.max_in_flight
                .map_or_else(|| "-".to_owned(), |m| m.to_string()),
            k.rate_limit
                .as_ref()
                .map_or_else(|| "-".to_owned(), super::args::fmt_rate),
        ];
        if governed {
            let f = k.flow.as_ref();
            row.push(
                f.and_then(|f| f.rate_per_min)
                    .map_or_else(|| "-".to_owned(), |r| format!("{r}/min")),
            );
            row.push(f.map_or_else(|| "-".to_owned(), breaker_cell));
        }
        t.row(row);
    }
    t.print();
    if page.keys.is_empty() {
        eprintln!("no key of {} has messages waiting or in flight", a.queue);
    }
    eprintln!("{} active keys", page.active_keys);
    if let Some(cursor) = &page.next_cursor {
        eprintln!("more keys follow: add --cursor {cursor} for the next page");
    }
    Ok(())
}

/// A key's breaker in a table cell: `open (forced)`, `half_open`, `closed`, or `-`.
fn breaker_cell(f: &KeyFlowView) -> String {
    match (f.breaker, f.forced) {
        (Some(b), true) => format!("{} (forced)", b.as_str()),
        (Some(b), false) => b.as_str().to_owned(),
        (None, _) => "-".to_owned(),
    }
}

/// A key's rate and breaker on one line, for `queue breaker --key`.
pub fn flow_line(f: &KeyFlowView) -> String {
    let mut s = breaker_cell(f);
    if let Some(since) = &f.breaker_since {
        s.push_str(&format!(" since {}", super::args::short_time(since)));
    }
    if let Some(r) = f.rate_per_min {
        s.push_str(&format!("; learned rate {r}/min"));
    }
    if let Some(h) = &f.hold_until {
        s.push_str(&format!(", held until {}", super::args::short_time(h)));
    }
    s
}
