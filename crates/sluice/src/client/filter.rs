//! The dead-letter filter flags shared by `dlq list`, `dlq summary` and `redrive`: one set of
//! names, so what narrows a listing narrows the summary and the redrive the same way.
//!
//! `redrive`'s earlier spellings (`--filter-error`, `--after`) are kept as hidden aliases, so
//! scripts written against them keep working.

use std::collections::BTreeMap;

use clap::Args;
use sluice_client::wire::{DeadLetterReasonView, MessageView, RedriveFilterView, SummaryQuery};

use super::args::{parse_attr, parse_time, time_ms};

/// Which dead letters: every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct DlqFilterArgs {
    /// Only dead letters whose last error contains this text.
    #[arg(long, value_name = "TEXT", alias = "filter-error")]
    pub error: Option<String>,
    /// Only dead letters whose last error is exactly this text (one group of `dlq summary`).
    #[arg(long, value_name = "TEXT")]
    pub error_is: Option<String>,
    /// Only dead letters dead-lettered for this reason: exhausted, lease_expired, rejected or
    /// expired.
    #[arg(long, value_name = "REASON", value_parser = parse_reason)]
    pub reason: Option<DeadLetterReasonView>,
    /// Only dead letters that came from this queue.
    #[arg(long, value_name = "QUEUE")]
    pub source_queue: Option<String>,
    /// Only dead letters sent with this key (one group of `dlq summary --by key`).
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Only dead letters with this attribute value (repeat for several: all must match).
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attr)]
    pub attrs: Vec<(String, String)>,
    /// Only dead letters dead-lettered at or after this time: how long ago (e.g. 30m, 2h) or
    /// an RFC 3339 time.
    #[arg(long, value_name = "DURATION|TIME", value_parser = parse_time, alias = "after")]
    pub since: Option<String>,
    /// Only dead letters dead-lettered before this time: how long ago (e.g. 10m) or an
    /// RFC 3339 time.
    #[arg(long, value_name = "DURATION|TIME", value_parser = parse_time)]
    pub before: Option<String>,
}

impl DlqFilterArgs {
    /// The filter as a redrive job takes it; `None` when no flag was given.
    pub fn redrive_filter(&self) -> Option<RedriveFilterView> {
        let f = RedriveFilterView {
            error_contains: self.error.clone(),
            error_is: self.error_is.clone(),
            reason: self.reason,
            source_queue: self.source_queue.clone(),
            key: self.key.clone(),
            attributes: self.attrs.iter().cloned().collect::<BTreeMap<_, _>>(),
            dead_lettered_before: self.before.clone(),
            dead_lettered_after: self.since.clone(),
        };
        (f != RedriveFilterView::default()).then_some(f)
    }

    /// A summary query with this filter.
    pub fn summary_query(&self, group_by: &str, limit: u32) -> SummaryQuery {
        SummaryQuery {
            group_by: Some(group_by.to_owned()),
            limit: Some(limit),
            error_contains: self.error.clone(),
            error_is: self.error_is.clone(),
            reason: self.reason.map(|r| reason_text(r).to_owned()),
            source_queue: self.source_queue.clone(),
            key: self.key.clone(),
            attribute: self.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            dead_lettered_before: self.before.clone(),
            dead_lettered_after: self.since.clone(),
        }
    }

    /// True when `m` passes every condition (the broker's rule: a time condition needs the
    /// message to have been dead-lettered).
    pub fn matches(&self, m: &MessageView) -> bool {
        if let Some(e) = &self.error
            && !m
                .last_error
                .as_deref()
                .is_some_and(|le| le.contains(e.as_str()))
        {
            return false;
        }
        if self
            .error_is
            .as_deref()
            .is_some_and(|e| m.last_error.as_deref() != Some(e))
            || self.reason.is_some_and(|r| m.dead_letter_reason != Some(r))
            || self
                .source_queue
                .as_deref()
                .is_some_and(|q| m.source_queue.as_deref() != Some(q))
            || self
                .key
                .as_deref()
                .is_some_and(|k| m.key.as_deref() != Some(k))
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
        let at = m.dead_lettered_at.as_deref().and_then(time_ms);
        let since_ok = self
            .since
            .as_deref()
            .and_then(time_ms)
            .is_none_or(|s| at.is_some_and(|t| t >= s));
        let before_ok = self
            .before
            .as_deref()
            .and_then(time_ms)
            .is_none_or(|b| at.is_some_and(|t| t < b));
        since_ok && before_ok
    }
}

/// The wire text of a reason.
pub fn reason_text(r: DeadLetterReasonView) -> &'static str {
    sluice_core::message::DeadLetterReason::from(r).as_str()
}

fn parse_reason(s: &str) -> Result<DeadLetterReasonView, String> {
    s.parse::<sluice_core::message::DeadLetterReason>()
        .map(Into::into)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        f: DlqFilterArgs,
    }

    fn parse(args: &[&str]) -> DlqFilterArgs {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .expect("parses")
            .f
    }

    #[test]
    fn old_redrive_spellings_mean_the_same() {
        let new = parse(&["--error", "503", "--since", "2026-01-01T00:00:00Z"]);
        let old = parse(&["--filter-error", "503", "--after", "2026-01-01T00:00:00Z"]);
        assert_eq!(new, old);
        assert_eq!(new.error.as_deref(), Some("503"));
    }

    #[test]
    fn the_summary_query_carries_every_condition() {
        let f = parse(&[
            "--attr",
            "a=1",
            "--attr",
            "b=2",
            "--before",
            "2026-01-01T00:00:00Z",
        ]);
        let q = f.summary_query("reason", 10);
        assert_eq!(q.attribute, ["a=1", "b=2"]);
        assert_eq!(
            q.dead_lettered_before.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(q.to_core().expect("valid").filter.attributes.len(), 2);
        assert!(DlqFilterArgs::default().redrive_filter().is_none());
    }
}
