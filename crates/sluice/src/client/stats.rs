//! `sluice stats QUEUE`: backlog, in flight, DLQ depth and totals.

use clap::Args;

use super::args::fmt_ms;
use super::output::{details, json};
use super::{Conn, Failure};

/// `sluice stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue.
    queue: String,
}

/// Runs `sluice stats`.
pub async fn run(a: StatsArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let s = c.stats(&a.queue).await?;
    if a.conn.json {
        return json(&s);
    }
    let t = &s.totals;
    details(&[
        ("queue", s.queue.clone()),
        ("visible", s.visible.to_string()),
        ("delayed", s.delayed.to_string()),
        ("in_flight", s.in_flight.to_string()),
        ("dead_letter_depth", s.dead_letter_depth.to_string()),
        ("oldest_visible_age", fmt_ms(s.oldest_visible_age_ms)),
        ("completed", s.completed.to_string()),
        ("sent", t.sent.to_string()),
        ("received", t.received.to_string()),
        ("acked", t.acked.to_string()),
        ("nacked", t.nacked.to_string()),
        ("dead_lettered", t.dead_lettered.to_string()),
        ("redriven", t.redriven.to_string()),
        ("expired", t.expired.to_string()),
    ]);
    Ok(())
}
