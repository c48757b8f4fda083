//! Message rows: reading them into the model of `sluice-core` and writing changed ones back.
//!
//! Lifecycle changes other than the hot send/receive/ack paths load the rows they touch
//! (`FOR UPDATE`), decide with the same rules as every engine (`sluice_core::lifecycle`) and
//! write the rows back in one batched statement.

use sluice_core::{
    Attempt, Attributes, Body, BodyKind, DeadLetter, DeadLetterReason, GroupName, Holder, Message,
    MessageId, MessageState, Progress, QueueName, StoreError, Timestamp, TraceContext,
};
use tokio_postgres::Row as PgRow;
use tokio_postgres::types::Json;

use crate::error::corrupt;

/// Row states as stored.
pub(crate) const WAITING: i16 = 0;
/// Leased: `visible_at` is the lease deadline.
pub(crate) const LEASED: i16 = 1;
/// A completed record, kept for the queue's `result_ttl`.
pub(crate) const DONE: i16 = 2;

/// The columns [`Row::from_pg`] reads, in order.
pub(crate) const ROW_COLS: &str = "id, queue, state, visible_at, entered_at, enqueued_at, \
    receive_count, token, last_error, attempts, source_queue, dl_reason, dl_at, cancel_requested, \
    grp, leased_at, leased_by, fkey";

/// [`ROW_COLS`] and the columns a full [`Message`] view needs besides.
pub(crate) const FULL_COLS: &str = "id, queue, state, visible_at, entered_at, enqueued_at, \
    receive_count, token, last_error, attempts, source_queue, dl_reason, dl_at, cancel_requested, \
    grp, leased_at, leased_by, fkey, body, body_kind, attrs, dedup_id, progress, result, \
    result_kind, prio, traceparent, tracestate";

/// The lifecycle fields of one message row.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub id: i64,
    pub queue: String,
    pub state: i16,
    pub visible_at: i64,
    pub entered_at: i64,
    pub enqueued_at: i64,
    pub receive_count: u32,
    pub token: Option<i64>,
    pub last_error: Option<String>,
    pub attempts: Vec<Attempt>,
    pub source_queue: Option<String>,
    pub dead_letter: Option<DeadLetter>,
    pub cancel_requested: bool,
    /// The FIFO group the message was sent with.
    pub grp: Option<String>,
    /// The lease it is under (leased), or the one its ack ended (completed); nothing for a
    /// waiting message.
    pub holder: Holder,
    /// The key the message was sent with.
    pub fkey: Option<String>,
}

impl Row {
    /// Reads the [`ROW_COLS`] of `r`.
    pub(crate) fn from_pg(r: &PgRow) -> Result<Row, StoreError> {
        let attempts: Option<Json<Vec<Attempt>>> = r.try_get(9).map_err(corrupt)?;
        let reason: Option<String> = r.try_get(11).map_err(corrupt)?;
        let dl_at: Option<i64> = r.try_get(12).map_err(corrupt)?;
        let dead_letter = match (reason, dl_at) {
            (Some(reason), Some(at)) => Some(DeadLetter {
                reason: parse_reason(&reason)?,
                at: Timestamp(at),
            }),
            _ => None,
        };
        let count: i32 = r.try_get(6).map_err(corrupt)?;
        Ok(Row {
            id: r.try_get(0).map_err(corrupt)?,
            queue: r.try_get(1).map_err(corrupt)?,
            state: r.try_get(2).map_err(corrupt)?,
            visible_at: r.try_get(3).map_err(corrupt)?,
            entered_at: r.try_get(4).map_err(corrupt)?,
            enqueued_at: r.try_get(5).map_err(corrupt)?,
            receive_count: u32::try_from(count).unwrap_or(0),
            token: r.try_get(7).map_err(corrupt)?,
            last_error: r.try_get(8).map_err(corrupt)?,
            attempts: attempts.map(|j| j.0).unwrap_or_default(),
            source_queue: r.try_get(10).map_err(corrupt)?,
            dead_letter,
            cancel_requested: r.try_get(13).map_err(corrupt)?,
            grp: r.try_get(14).map_err(corrupt)?,
            holder: Holder {
                started_at: r
                    .try_get::<_, Option<i64>>(15)
                    .map_err(corrupt)?
                    .map(Timestamp),
                consumer: r.try_get(16).map_err(corrupt)?,
            },
            fkey: r.try_get(17).map_err(corrupt)?,
        })
    }

    /// The state a reader sees at `now`.
    pub(crate) fn view_state(&self, now: i64) -> MessageState {
        match self.state {
            LEASED => MessageState::InFlight,
            DONE => MessageState::Completed,
            _ if self.visible_at <= now => MessageState::Visible,
            _ => MessageState::Delayed,
        }
    }

    /// Whether `token` names this row's current lease at `now`.
    pub(crate) fn holds(&self, token: u64, now: i64) -> bool {
        self.state == LEASED && self.token == Some(token as i64) && self.visible_at > now
    }
}

fn parse_reason(s: &str) -> Result<DeadLetterReason, StoreError> {
    Ok(match s {
        "exhausted" => DeadLetterReason::Exhausted,
        "lease_expired" => DeadLetterReason::LeaseExpired,
        "rejected" => DeadLetterReason::Rejected,
        "expired" => DeadLetterReason::Expired,
        other => return Err(corrupt(format!("dead-letter reason \"{other}\""))),
    })
}

/// A body kind as stored.
pub(crate) fn kind_code(k: BodyKind) -> i16 {
    match k {
        BodyKind::Json => 0,
        BodyKind::Text => 1,
        BodyKind::Binary => 2,
    }
}

/// A stored body kind.
pub(crate) fn kind_of(code: i16) -> BodyKind {
    match code {
        0 => BodyKind::Json,
        1 => BodyKind::Text,
        _ => BodyKind::Binary,
    }
}

/// Attributes as stored: `NULL` for none.
pub(crate) fn attrs_json(a: &Attributes) -> Option<serde_json::Value> {
    if a.is_empty() {
        None
    } else {
        serde_json::to_value(a).ok()
    }
}

/// The trace context in columns `col` (`traceparent`) and `col + 1` (`tracestate`) of `r`.
pub(crate) fn trace_of(r: &PgRow, col: usize) -> Result<Option<TraceContext>, StoreError> {
    let parent: Option<String> = r.try_get(col).map_err(corrupt)?;
    let Some(parent) = parent else {
        return Ok(None);
    };
    let state: Option<String> = r.try_get(col + 1).map_err(corrupt)?;
    TraceContext::new(parent, state).map(Some).map_err(corrupt)
}

/// Reads the [`FULL_COLS`] of `r` into the message view.
pub(crate) fn message_of(r: &PgRow, now: i64) -> Result<Message, StoreError> {
    let row = Row::from_pg(r)?;
    let body: Option<Vec<u8>> = r.try_get(18).map_err(corrupt)?;
    let kind: i16 = r.try_get(19).map_err(corrupt)?;
    let attrs: Option<Json<Attributes>> = r.try_get(20).map_err(corrupt)?;
    let dedup_id: Option<String> = r.try_get(21).map_err(corrupt)?;
    let progress: Option<Json<Progress>> = r.try_get(22).map_err(corrupt)?;
    let result: Option<Vec<u8>> = r.try_get(23).map_err(corrupt)?;
    let result_kind: Option<i16> = r.try_get(24).map_err(corrupt)?;
    let key = row.fkey.clone();
    let prio: Option<i16> = r.try_get(25).map_err(corrupt)?;
    let queue = QueueName::new(row.queue.clone()).map_err(corrupt)?;
    let state = row.view_state(now);
    let done = state == MessageState::Completed;
    let trace = trace_of(r, 26)?.filter(|_| !done);
    Ok(Message {
        trace,
        id: MessageId(row.id as u64),
        queue,
        state,
        body: body.map(|b| Body {
            kind: kind_of(kind),
            bytes: b.into(),
        }),
        attributes: attrs.map(|a| a.0).unwrap_or_default(),
        enqueued_at: Timestamp(row.enqueued_at),
        entered_at: Timestamp(row.entered_at),
        visible_at: (!done).then_some(Timestamp(row.visible_at)),
        receive_count: row.receive_count,
        last_error: row.last_error,
        attempts: if done {
            sluice_core::lifecycle::completed_history(
                row.attempts,
                Timestamp(row.visible_at),
                row.cancel_requested,
                Some(&row.holder),
            )
        } else {
            row.attempts
        },
        dedup_id,
        source_queue: row.source_queue.and_then(|s| QueueName::new(s).ok()),
        dead_letter: row.dead_letter,
        result: result.map(|b| Body {
            kind: kind_of(result_kind.unwrap_or(2)),
            bytes: b.into(),
        }),
        completed_at: done.then_some(Timestamp(row.visible_at)),
        cancelled: row.cancel_requested,
        progress: if done { None } else { progress.map(|p| p.0) },
        // A completed record keeps what tells its history (times, attempts, result), not
        // what only routed the message (body, attributes, dedup id, group), on every engine.
        group: row
            .grp
            .filter(|_| !done)
            .and_then(|g| GroupName::new(g).ok()),
        key: key
            .filter(|_| !done)
            .and_then(|k| sluice_core::MessageKey::new(k).ok()),
        priority: prio.filter(|_| !done).and_then(|p| u8::try_from(p).ok()),
    })
}

/// Writes the lifecycle fields of `rows` back, in one statement. A row that waits again
/// (`WAITING`) loses its lease's holder; any other keeps the one it has. Every row loses its
/// rank: it is ranked again when it is deliverable again (`crate::hot::ranks`).
pub(crate) async fn write_back(
    tx: &impl tokio_postgres::GenericClient,
    rows: &[Row],
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    let queues: Vec<&str> = rows.iter().map(|r| r.queue.as_str()).collect();
    let states: Vec<i16> = rows.iter().map(|r| r.state).collect();
    let visible: Vec<i64> = rows.iter().map(|r| r.visible_at).collect();
    let entered: Vec<i64> = rows.iter().map(|r| r.entered_at).collect();
    let counts: Vec<i32> = rows
        .iter()
        .map(|r| i32::try_from(r.receive_count).unwrap_or(i32::MAX))
        .collect();
    let tokens: Vec<Option<i64>> = rows.iter().map(|r| r.token).collect();
    let errors: Vec<Option<&str>> = rows.iter().map(|r| r.last_error.as_deref()).collect();
    let attempts: Vec<Option<serde_json::Value>> = rows
        .iter()
        .map(|r| {
            (!r.attempts.is_empty())
                .then(|| serde_json::to_value(&r.attempts).ok())
                .flatten()
        })
        .collect();
    let sources: Vec<Option<&str>> = rows.iter().map(|r| r.source_queue.as_deref()).collect();
    let reasons: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.dead_letter.as_ref().map(|d| d.reason.as_str()))
        .collect();
    let dl_at: Vec<Option<i64>> = rows
        .iter()
        .map(|r| r.dead_letter.as_ref().map(|d| d.at.0))
        .collect();
    let cancel: Vec<bool> = rows.iter().map(|r| r.cancel_requested).collect();
    if rows.iter().any(|r| r.grp.is_some()) {
        lock_lines_entered(tx, &ids, &queues).await?;
    }
    tx.execute(
        "UPDATE messages m SET queue = u.queue, state = u.state, visible_at = u.visible_at,
             entered_at = u.entered_at, receive_count = u.receive_count, token = u.token,
             last_error = u.last_error, attempts = u.attempts, source_queue = u.source_queue,
             dl_reason = u.dl_reason, dl_at = u.dl_at, cancel_requested = u.cancel_requested,
             progress = CASE WHEN u.state = 1 THEN m.progress END, rank = NULL,
             leased_at = CASE WHEN u.state <> 0 THEN m.leased_at END,
             leased_by = CASE WHEN u.state <> 0 THEN m.leased_by END
         FROM unnest($1::bigint[], $2::text[], $3::int2[], $4::bigint[], $5::bigint[],
                     $6::int4[], $7::bigint[], $8::text[], $9::jsonb[], $10::text[],
                     $11::text[], $12::bigint[], $13::bool[])
              AS u(id, queue, state, visible_at, entered_at, receive_count, token, last_error,
                   attempts, source_queue, dl_reason, dl_at, cancel_requested)
         WHERE m.id = ANY($1) AND m.id = u.id",
        &[
            &ids, &queues, &states, &visible, &entered, &counts, &tokens, &errors, &attempts,
            &sources, &reasons, &dl_at, &cancel,
        ],
    )
    .await
    .map_err(|e| crate::error::db(&e))?;
    Ok(())
}

/// The statement that takes, in a stable order, the advisory lock of every `(queue, group)`
/// listed (`$1` queues, `$2` groups) for the rest of the transaction. Every transaction that
/// gives a message a place in a group's line holds that line's lock while it does, so the
/// places of one line are taken in the order their transactions commit.
pub(crate) const LOCK_LINES_SQL: &str = "SELECT count(pg_advisory_xact_lock(k)) FROM (
         SELECT DISTINCT hashtextextended(q || chr(10) || g, 7) AS k
         FROM unnest($1::text[], $2::text[]) AS u(q, g) ORDER BY k) AS keys";

/// Gives the grouped rows among `ids` that move to another queue (`queues`, the same order)
/// their places at the end of their lines there, under the lines' locks: one draw from
/// `group_lines`, the rows in the order of their old places, so members that move together
/// keep their order.
async fn lock_lines_entered(
    tx: &impl tokio_postgres::GenericClient,
    ids: &[i64],
    queues: &[&str],
) -> Result<(), StoreError> {
    let moving = tx
        .query(
            "SELECT u.queue, m.grp, m.id FROM messages m
             JOIN unnest($1::bigint[], $2::text[]) AS u(id, queue) ON m.id = u.id
             WHERE m.id = ANY($1) AND m.grp IS NOT NULL AND m.queue <> u.queue
             ORDER BY m.line, m.id",
            &[&ids, &queues],
        )
        .await
        .map_err(|e| crate::error::db(&e))?;
    if moving.is_empty() {
        return Ok(());
    }
    let qs: Vec<String> = moving.iter().map(|r| r.get(0)).collect();
    let gs: Vec<String> = moving.iter().map(|r| r.get(1)).collect();
    let moved: Vec<i64> = moving.iter().map(|r| r.get(2)).collect();
    tx.query_one(LOCK_LINES_SQL, &[&qs, &gs])
        .await
        .map_err(|e| crate::error::db(&e))?;
    // Drawn under the locks: a line's places follow its commits.
    let base: i64 = tx
        .query_one("SELECT nextval('group_lines')", &[])
        .await
        .map_err(|e| crate::error::db(&e))?
        .try_get(0)
        .map_err(crate::error::corrupt)?;
    tx.execute(
        "UPDATE messages m SET line = $2::bigint * 1048576 + u.n
         FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, n)
         WHERE m.id = ANY($1) AND m.id = u.id",
        &[&moved, &base],
    )
    .await
    .map_err(|e| crate::error::db(&e))?;
    Ok(())
}
