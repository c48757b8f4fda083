//! `sluice send QUEUE [BODY]`: one message from an argument or a file, or one message per
//! line of standard input, sent 100 per request.
//!
//! A body's form is chosen so it comes back as it went: text that parses as JSON is sent as
//! JSON, other UTF-8 text as text, anything else (or anything with `--raw`) as bytes,
//! byte-exact. `--text` forces text. Text that starts as JSON does (`{`, `[` or `"`) but does
//! not parse is refused rather than sent as text: it is a JSON body cut short or mistyped far
//! more often than text. Text with `--attr`, and text lines from standard input, go inside the
//! JSON API, which cannot mark text: they come back as JSON strings. Empty standard-input
//! lines are skipped; errors name the input line.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sluice_client::OutgoingMessage;
use sluice_client::wire::SendBatchResponse;

use super::args::parse_duration;
use super::output::json;
use super::{Conn, Failure};

/// Messages per request when sending standard-input lines.
const LINES_PER_BATCH: usize = 100;

/// `sluice send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue.
    queue: String,
    /// The body; `-` (or no BODY with standard input not a terminal) sends one message per
    /// line of standard input.
    #[arg(conflicts_with = "file", allow_hyphen_values = true)]
    body: Option<String>,
    /// Send this file's bytes as one message (binary-safe).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// A string attribute, `key=value`; repeatable.
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attr)]
    attrs: Vec<(String, String)>,
    /// Delay delivery, e.g. 10s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    delay: Option<Duration>,
    /// Dedup id: a second send with it inside the queue's dedup window stores nothing.
    #[arg(long, value_name = "ID")]
    dedup_id: Option<String>,
    /// FIFO message group: messages of one group are delivered in send order, at most the
    /// queue's max-in-flight-per-group at a time (1 – 128 characters). With standard-input
    /// lines, every line goes to this group, in line order.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// The key the message belongs to (a tenant, customer or account; 1 – 128 characters):
    /// deliveries go round-robin across a queue's keys.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// Priority 0 – 9 (9 most urgent) [default: the queue's default-priority].
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u8).range(0..=9))]
    priority: Option<u8>,
    /// Send the body as bytes, even if it is text or JSON.
    #[arg(long, conflicts_with = "text")]
    raw: bool,
    /// Send the body as text, even if it parses as JSON.
    #[arg(long)]
    text: bool,
}

fn parse_attr(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("\"{s}\" is not an attribute; write it as key=value"))
}

/// The first character of `text` when it starts as a JSON object, array or string does.
/// Numbers and words that do not parse (`12abc`, `true story`) read as ordinary text.
fn json_start(text: &str) -> Option<char> {
    text.trim_start()
        .chars()
        .next()
        .filter(|c| matches!(c, '{' | '[' | '"'))
}

/// Where a body came from, for errors: the argument or file, or a line of standard input.
#[derive(Debug, Clone, Copy)]
enum Origin {
    Single,
    Line(usize),
}

impl Origin {
    fn prefix(self) -> String {
        match self {
            Origin::Single => String::new(),
            Origin::Line(n) => format!("input line {n}: "),
        }
    }
}

impl SendArgs {
    /// The message for one body.
    fn message(&self, bytes: Vec<u8>, origin: Origin) -> Result<OutgoingMessage, Failure> {
        let mut m = if self.raw {
            OutgoingMessage::bytes(bytes)
        } else {
            match String::from_utf8(bytes) {
                Ok(text) if self.text => OutgoingMessage::text(text),
                Ok(text) => match serde_json::from_str::<serde::de::IgnoredAny>(&text) {
                    Ok(_) => OutgoingMessage::json_text(text.trim().to_owned())?,
                    Err(e) => match json_start(&text) {
                        Some(c) => {
                            return Err(Failure::Code(
                                7,
                                format!(
                                    "{}the body starts with '{c}' as JSON does but is not JSON \
                                     ({e}); fix it, or give --text to send it as text",
                                    origin.prefix()
                                ),
                            ));
                        }
                        None => OutgoingMessage::text(text),
                    },
                },
                Err(_) if self.text => {
                    return Err(Failure::Usage(
                        "--text needs UTF-8 input; use --raw to send bytes".to_owned(),
                    ));
                }
                Err(e) => OutgoingMessage::bytes(e.into_bytes()),
            }
        };
        for (k, v) in &self.attrs {
            m = m.attribute(k, v);
        }
        if let Some(d) = self.delay {
            m = m.delay(d);
        }
        if let Some(id) = &self.dedup_id {
            m = m.dedup_id(id);
        }
        if let Some(g) = &self.group {
            m = m.group(g);
        }
        if let Some(k) = &self.key {
            m = m.key(k);
        }
        if let Some(p) = self.priority {
            m = m.priority(p);
        }
        Ok(m)
    }
}

/// Runs `sluice send`.
pub async fn run(a: SendArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let single = match (&a.file, a.body.as_deref()) {
        (Some(path), _) => Some(
            std::fs::read(path)
                .map_err(|e| Failure::Other(format!("cannot read {}: {e}", path.display())))?,
        ),
        (None, Some("-")) => None,
        (None, Some(body)) => Some(body.as_bytes().to_vec()),
        (None, None) if std::io::stdin().is_terminal() => {
            return Err(Failure::Usage(
                "no message: give a BODY, --file PATH, or pipe one message per line on \
                 standard input"
                    .to_owned(),
            ));
        }
        (None, None) => None,
    };
    if let Some(bytes) = single {
        let out = c.send(&a.queue, a.message(bytes, Origin::Single)?).await?;
        if a.conn.json {
            return json(&out);
        }
        println!("{}", out.id);
        if out.duplicate {
            eprintln!("(a duplicate: a message with this dedup id was already sent)");
        }
        return Ok(());
    }

    if a.dedup_id.is_some() {
        return Err(Failure::Usage(
            "--dedup-id applies to one message; it cannot be given to every line of \
             standard input"
                .to_owned(),
        ));
    }
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| Failure::Other(format!("cannot read standard input: {e}")))?;
    let lines: Vec<(usize, Vec<u8>)> = input
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(Failure::Usage(
            "standard input held no lines to send".to_owned(),
        ));
    }
    let mut all = SendBatchResponse {
        ids: Vec::new(),
        duplicates: Vec::new(),
    };
    for chunk in lines.chunks(LINES_PER_BATCH) {
        let msgs = chunk
            .iter()
            .map(|(n, l)| a.message(l.clone(), Origin::Line(*n)))
            .collect::<Result<Vec<_>, _>>()?;
        let out = match c.send_batch(&a.queue, msgs).await {
            Ok(out) => out,
            Err(e) => {
                let e = by_line(e, chunk);
                if !all.ids.is_empty() {
                    eprintln!(
                        "sluice: {} messages were sent before the failure (ids above)",
                        all.ids.len()
                    );
                }
                return Err(e.into());
            }
        };
        if !a.conn.json {
            for id in &out.ids {
                println!("{id}");
            }
        }
        all.ids.extend(out.ids);
        all.duplicates.extend(out.duplicates);
    }
    if a.conn.json {
        return json(&all);
    }
    eprintln!("sent {} messages to {}", all.ids.len(), a.queue);
    Ok(())
}

/// The broker names a message of a batch by its index (`message 7 is …`); a send of
/// standard-input lines names it by its input line instead.
fn by_line(e: sluice_client::Error, chunk: &[(usize, Vec<u8>)]) -> sluice_client::Error {
    let sluice_client::Error::Api {
        status,
        code,
        message,
        retry_after,
    } = e
    else {
        return e;
    };
    let line = message
        .strip_prefix("message ")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(i, rest)| Some((chunk.get(i.parse::<usize>().ok()?)?.0, rest)));
    let message = match line {
        Some((n, rest)) => format!("input line {n} {rest}"),
        None => message,
    };
    sluice_client::Error::Api {
        status,
        code,
        message,
        retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_told_from_text_by_its_first_character() {
        for json in ["{\"a\": 1", "  [1, 2", "\"unterminated"] {
            assert!(json_start(json).is_some(), "{json}");
        }
        for text in ["plain words", "12abc", "true story", ""] {
            assert_eq!(json_start(text), None, "{text}");
        }
    }

    #[test]
    fn batch_errors_name_the_input_line() {
        let chunk = vec![(3, b"a".to_vec()), (7, b"b".to_vec())];
        let e = sluice_client::Error::Api {
            status: 413,
            code: sluice_client::ErrorCode::PayloadTooLarge,
            message: "message 1 is 9 bytes; queue \"q\" accepts at most 8".into(),
            retry_after: None,
        };
        let got = by_line(e, &chunk).to_string();
        assert!(got.starts_with("input line 7 is 9 bytes"), "{got}");
    }
}
