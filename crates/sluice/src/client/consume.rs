//! `sluice receive`, `ack`, `nack`, `reject`.
//!
//! `receive` that finds nothing is not an error: it exits 0 and prints an empty table (just
//! the header; `{"messages": []}` with `--json`), and says so on stderr.

use std::time::Duration;

use clap::Args;
use sluice_client::wire::{FailureResponse, FailureState, ReceiveResponse};
use sluice_client::{BodyExt, ErrorCode, NackOptions, ReceiveOptions};

use super::args::parse_duration;
use super::exit::code_of;
use super::output::{Table, body_text, json, truncate};
use super::{Conn, Failure};

/// `sluice receive`.
#[derive(Debug, Args)]
pub struct ReceiveArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue.
    queue: String,
    /// Most messages to lease (1 – 1000).
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    max: u32,
    /// Long poll: wait up to this long for a first message (at most 30s).
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = parse_duration)]
    wait: Duration,
    /// Lease length of these deliveries [default: the queue's visibility].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    visibility: Option<Duration>,
    /// Acknowledge every received message at once (print, then delete).
    #[arg(long)]
    ack: bool,
}

/// Runs `sluice receive`.
pub async fn receive(a: ReceiveArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let opts = ReceiveOptions {
        max: a.max,
        wait: a.wait,
        visibility: a.visibility,
        consumer: Some("sluice-cli".to_owned()),
    };
    let got = c.receive(&a.queue, &opts).await?;
    let n = got.len();
    let receipts: Vec<String> = got.iter().map(|d| d.receipt.clone()).collect();
    if a.conn.json {
        json(&ReceiveResponse {
            messages: got,
            acked: None,
        })?;
    } else {
        let mut t = Table::new(&["ID", "RECEIPT", "RECEIVES", "ATTRIBUTES", "BODY"]);
        for d in &got {
            let body = d
                .decoded_body()
                .map(|b| body_text(&b))
                .unwrap_or_else(|e| format!("<{e}>"));
            let attrs = d
                .attributes
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            t.row(vec![
                d.id.clone(),
                d.receipt.clone(),
                format!("{}/{}", d.receive_count, max_label(d.max_receive_count)),
                if attrs.is_empty() { "-".into() } else { attrs },
                truncate(&body, 80),
            ]);
        }
        t.print();
        if n == 0 {
            eprintln!("no messages ready in {}", a.queue);
        }
    }
    if a.ack && !receipts.is_empty() {
        let out = c.ack_batch(&a.queue, &receipts).await?;
        if let Some(bad) = out.results.iter().find(|r| !r.ok) {
            let (code, msg) = outcome_error(bad.error.as_ref());
            return Err(Failure::Code(
                code,
                format!(
                    "acknowledged {} of {n}; receipt {} failed: {msg}",
                    out.acked, bad.receipt
                ),
            ));
        }
        if !a.conn.json {
            eprintln!("acknowledged {n}");
        }
    }
    Ok(())
}

fn max_label(max: u32) -> String {
    if max == 0 {
        "∞".to_owned()
    } else {
        max.to_string()
    }
}

fn outcome_error(e: Option<&sluice_client::wire::ErrorBody>) -> (u8, String) {
    match e {
        Some(e) => (
            ErrorCode::parse(&e.code).map(code_of).unwrap_or(1),
            format!("{} ({})", e.message, e.code),
        ),
        None => (1, "no reason given".to_owned()),
    }
}

/// `sluice ack`.
#[derive(Debug, Args)]
pub struct AckArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue.
    queue: String,
    /// Receipts from `sluice receive`; several are acknowledged in one request.
    #[arg(required = true, value_name = "RECEIPT")]
    receipts: Vec<String>,
}

/// Runs `sluice ack`. With several receipts, each gets its own outcome; the exit code is
/// that of the first failure (e.g. 4 for a stale receipt).
pub async fn ack(a: AckArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    if let [receipt] = a.receipts.as_slice() {
        let out = c.ack(&a.queue, receipt).await?;
        if a.conn.json {
            return json(&out);
        }
        println!("acknowledged {}", out.id);
        return Ok(());
    }
    let out = c.ack_batch(&a.queue, &a.receipts).await?;
    if a.conn.json {
        json(&out)?;
    } else {
        let mut t = Table::new(&["RECEIPT", "RESULT"]);
        for r in &out.results {
            let result = if r.ok {
                "acknowledged".to_owned()
            } else {
                r.error
                    .as_ref()
                    .map(|e| e.code.clone())
                    .unwrap_or_else(|| "failed".to_owned())
            };
            t.row(vec![r.receipt.clone(), result]);
        }
        t.print();
    }
    match out.results.iter().find(|r| !r.ok) {
        Some(bad) => {
            let (code, msg) = outcome_error(bad.error.as_ref());
            Err(Failure::Code(
                code,
                format!(
                    "acknowledged {} of {}; receipt {} failed: {msg}",
                    out.acked,
                    out.results.len(),
                    bad.receipt
                ),
            ))
        }
        None => Ok(()),
    }
}

/// `sluice nack`.
#[derive(Debug, Args)]
pub struct NackArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue.
    queue: String,
    /// The receipt from `sluice receive`.
    receipt: String,
    /// Retry after this delay instead of the queue's backoff, e.g. 5s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    delay: Option<Duration>,
    /// The error to record as last_error.
    #[arg(long, value_name = "TEXT")]
    error: Option<String>,
}

/// Runs `sluice nack`.
pub async fn nack(a: NackArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let out = c
        .nack(
            &a.queue,
            &a.receipt,
            &NackOptions {
                delay: a.delay,
                error: a.error.clone(),
                consumer: Some("sluice-cli".to_owned()),
                ..NackOptions::default()
            },
        )
        .await?;
    settled(&a.conn, &out)
}

/// `sluice reject`.
#[derive(Debug, Args)]
pub struct RejectArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue.
    queue: String,
    /// The receipt from `sluice receive`.
    receipt: String,
    /// Why it cannot be processed (kept as last_error).
    #[arg(long, value_name = "TEXT")]
    error: Option<String>,
}

/// Runs `sluice reject`.
pub async fn reject(a: RejectArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let out = c.reject(&a.queue, &a.receipt, a.error.as_deref()).await?;
    settled(&a.conn, &out)
}

fn settled(conn: &Conn, out: &FailureResponse) -> Result<(), Failure> {
    if conn.json {
        return json(out);
    }
    let state = match out.state {
        FailureState::Visible => "visible again",
        FailureState::Delayed => "waiting for its retry delay",
        FailureState::DeadLettered => "dead-lettered",
    };
    println!("message is {state} in {}", out.queue);
    Ok(())
}
