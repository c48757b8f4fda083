//! `GET /v1/audit`: read the audit log, newest first in pages. Operator role.
//!
//! A page is the newest `limit` entries that match, oldest first; when older ones exist the
//! answer says so (`more`) and gives `next_cursor`, which asks for the page before. The cursor
//! holds the oldest time shown and how many entries of that same millisecond were shown, so
//! entries sharing a millisecond across two pages are neither lost nor repeated.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use sluice_core::audit::AuditKind;
use sluice_core::{AuditQuery, Clock, QueueName, SystemClock};
use sluice_wire::{AuditEntryView, AuditList, ErrorEnvelope, rfc3339};
use utoipa::IntoParams;

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::ApiQuery;

/// Query of `GET /v1/audit`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// Only this queue's entries, and those of its dead-letter queue.
    pub queue: Option<String>,
    /// Only entries at or after this time: RFC 3339 (`2026-01-01T10:00:00Z`), or how long ago
    /// (`10m`, `1h`, `90s`, `2d`).
    pub since: Option<String>,
    /// Only these actions, comma-separated (`queue.purge,queue.delete`).
    pub action: Option<String>,
    /// Only entries by this actor: an API key's name, `sqs:<access key id>`, `anonymous`, or
    /// `sluice` for the broker itself.
    pub actor: Option<String>,
    /// Only entries of this kind: `operator` (actions taken by a key or a person),
    /// `message` (the broker's record of dead letters and expiries) or `broker` (its other
    /// records: adaptive rate and breaker changes, redrive jobs, missed schedule firings).
    #[param(value_type = Option<String>, pattern = "^(operator|message|broker)$")]
    #[serde(default, deserialize_with = "empty_is_none")]
    pub kind: Option<AuditKind>,
    /// At most this many, the newest (default 100, at most 10000).
    #[param(default = 100, minimum = 1, maximum = 10_000)]
    pub limit: Option<usize>,
    /// The page before an earlier answer: its `next_cursor`.
    pub cursor: Option<String>,
}

/// A kind, where an empty `?kind=` counts as not given, as for every query parameter.
fn empty_is_none<'de, D>(d: D) -> Result<Option<AuditKind>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let named: Option<String> = Option::deserialize(d)?;
    named
        .filter(|k| !k.is_empty())
        .map(|k| AuditKind::deserialize(serde::de::value::StrDeserializer::new(&k)))
        .transpose()
}

/// Where a page ends: entries at or before `until` ms, less the `shown` newest of those at
/// exactly `until`.
fn parse_cursor(s: &str) -> Result<(i64, usize), ApiError> {
    s.split_once('.')
        .and_then(|(t, n)| Some((t.parse().ok()?, n.parse().ok()?)))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "cursor \"{s}\" is not one this broker gave; pass the next_cursor of an earlier answer"
            ))
        })
}

/// The newest audit entries, optionally of one queue and since a time.
#[utoipa::path(
    get, path = "/v1/audit", tag = "redrives",
    params(AuditParams),
    responses(
        (status = 200, description = "The entries, oldest first", body = AuditList),
        (status = 400, description = "invalid_argument", body = ErrorEnvelope),
    )
)]
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<AuditParams>,
) -> Result<Json<AuditList>, ApiError> {
    let mut queues = Vec::new();
    if let Some(q) = &p.queue {
        let name = QueueName::new(q.clone())?;
        caller.allow_also(&name)?;
        // A queue's story includes its DLQ's: the redrives out of it, its expiries.
        if let Ok(info) = st.store.get_queue(&name).await
            && let Some(dlq) = info.config.dead_letter_queue
        {
            queues.push(dlq.to_string());
        }
        queues.push(name.to_string());
    }
    let (until, shown) = p.cursor.as_deref().map(parse_cursor).transpose()?.unzip();
    let shown = shown.unwrap_or(0);
    let limit = p.limit.unwrap_or(100);
    if !(1..=10_000).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit must be 1 to 10000 entries, got {limit}"
        )));
    }
    let actions = p
        .action
        .as_deref()
        .map(|a| {
            a.split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let query = AuditQuery {
        queues,
        actions,
        actor: p.actor.clone(),
        kind: p.kind,
        since: p
            .since
            .as_deref()
            .map(|s| sluice_core::human::parse_time("since", s, SystemClock.now()))
            .transpose()?,
        until: until.map(sluice_core::Timestamp),
        // Saturating: `shown` comes from the client's cursor, and may be any number.
        limit: limit.saturating_add(shown).saturating_add(1),
    };
    let mut entries = st.store.audit_query(query).await?;
    // Drop what the page after this one showed already: the newest entries at `until`, at
    // most `shown` of them (stopping at the first other one, however large `shown` is).
    let mut dropped = 0;
    while dropped < shown
        && entries
            .last()
            .is_some_and(|e| Some(e.at.as_millis()) == until)
    {
        entries.pop();
        dropped += 1;
    }
    let more = entries.len() > limit;
    let entries = entries.split_off(entries.len().saturating_sub(limit));
    let next_cursor = more.then(|| {
        let oldest = entries[0].at.as_millis();
        let same = entries
            .iter()
            .filter(|e| e.at.as_millis() == oldest)
            .count();
        let carried = if Some(oldest) == until { shown } else { 0 };
        format!("{oldest}.{}", same.saturating_add(carried))
    });
    Ok(Json(AuditList {
        entries: entries
            .into_iter()
            .filter(|e| e.queue.as_deref().is_none_or(|q| caller.sees(q)))
            .map(|e| AuditEntryView {
                at: rfc3339(e.at),
                actor: e.actor,
                action: e.action,
                queue: e.queue,
                message_id: e.message_id,
                details: e.details,
                outcome: e.outcome,
            })
            .collect(),
        more,
        next_cursor,
    }))
}
