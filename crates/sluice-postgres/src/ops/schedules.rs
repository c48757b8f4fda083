//! Schedules shared by every node: one row each in `schedules`.
//!
//! A step is one transaction: a conditional update moves the row on only while its
//! `last_fired` is still the step's `expected` (of two nodes stepping the same schedule, the
//! second waits for the first's row lock, re-reads the row, no longer matches and changes
//! nothing), and the firing's message is inserted in that same transaction, through the
//! insert a send uses. The message and the schedule's progress commit together or not at all.

use sluice_core::schedule::{Schedule, ScheduleName, ScheduleSpec};
use sluice_core::store::{ScheduleStep, StepOutcome};
use sluice_core::{StoreError, Timestamp};
use tokio_postgres::types::Json;

use crate::db::counters::{Counter, Counts};
use crate::db::tx::transaction;
use crate::error::{corrupt, db};
use crate::store::Inner;

const COLS: &str = "name, spec, created_at, updated_at, anchor, last_fired, fired, missed";

fn not_found(name: &ScheduleName) -> StoreError {
    StoreError::ScheduleNotFound(name.to_string())
}

fn schedule_of(r: &tokio_postgres::Row) -> Result<Schedule, StoreError> {
    let count = |i| {
        r.try_get::<_, i64>(i)
            .map(|n| u64::try_from(n).unwrap_or(0))
    };
    Ok(Schedule {
        name: ScheduleName::new(r.try_get::<_, String>(0).map_err(corrupt)?)?,
        spec: r.try_get::<_, Json<ScheduleSpec>>(1).map_err(corrupt)?.0,
        created_at: Timestamp(r.try_get(2).map_err(corrupt)?),
        updated_at: Timestamp(r.try_get(3).map_err(corrupt)?),
        anchor: Timestamp(r.try_get(4).map_err(corrupt)?),
        last_fired: r
            .try_get::<_, Option<i64>>(5)
            .map_err(corrupt)?
            .map(Timestamp),
        fired: count(6).map_err(corrupt)?,
        missed: count(7).map_err(corrupt)?,
    })
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Creates or replaces a schedule; a changed trigger re-anchors it at now.
pub(crate) async fn put(
    inner: &Inner,
    name: &ScheduleName,
    spec: ScheduleSpec,
) -> Result<(Schedule, bool), StoreError> {
    let mut conn = inner.conn().await?;
    transaction(&mut conn, async |tx| {
        let cfg = crate::db::catalog::config(tx, spec.queue.as_str(), false).await?;
        // A firing is a send: its body must fit the queue now, as a send's must.
        sluice_core::store::validate_bodies_fit(
            &cfg,
            &spec.queue,
            &[sluice_core::NewMessage::new(spec.body.clone())],
        )?;
        let now = inner.now();
        // Two nodes creating the same schedule: the primary key lets one insert.
        if let Some(row) = tx
            .query_opt(
                &format!(
                    "INSERT INTO schedules ({COLS}) VALUES ($1, $2, $3, $3, $3, NULL, 0, 0)
                     ON CONFLICT (name) DO NOTHING RETURNING {COLS}"
                ),
                &[&name.as_str(), &Json(&spec), &now],
            )
            .await
            .map_err(|e| db(&e))?
        {
            return Ok((schedule_of(&row)?, true));
        }
        let row = tx
            .query_one(
                &format!("SELECT {COLS} FROM schedules WHERE name = $1 FOR UPDATE"),
                &[&name.as_str()],
            )
            .await
            .map_err(|e| db(&e))?;
        let old = schedule_of(&row)?;
        let retrigger = old.spec.trigger != spec.trigger;
        let row = tx
            .query_one(
                &format!(
                    "UPDATE schedules SET spec = $2, updated_at = $3,
                         anchor = CASE WHEN $4 THEN $3 ELSE anchor END,
                         last_fired = CASE WHEN $4 THEN NULL ELSE last_fired END
                     WHERE name = $1 RETURNING {COLS}"
                ),
                &[&name.as_str(), &Json(&spec), &now, &retrigger],
            )
            .await
            .map_err(|e| db(&e))?;
        Ok((schedule_of(&row)?, false))
    })
    .await
}

/// One schedule.
pub(crate) async fn get(inner: &Inner, name: &ScheduleName) -> Result<Schedule, StoreError> {
    let row = inner
        .conn()
        .await?
        .query_opt(
            &format!("SELECT {COLS} FROM schedules WHERE name = $1"),
            &[&name.as_str()],
        )
        .await
        .map_err(|e| db(&e))?
        .ok_or_else(|| not_found(name))?;
    schedule_of(&row)
}

/// Every schedule, by name.
pub(crate) async fn list(inner: &Inner) -> Result<Vec<Schedule>, StoreError> {
    inner
        .conn()
        .await?
        .query(
            &format!("SELECT {COLS} FROM schedules ORDER BY name COLLATE \"C\""),
            &[],
        )
        .await
        .map_err(|e| db(&e))?
        .iter()
        .map(schedule_of)
        .collect()
}

/// Deletes a schedule; its messages stay.
pub(crate) async fn delete(inner: &Inner, name: &ScheduleName) -> Result<(), StoreError> {
    let n = inner
        .conn()
        .await?
        .execute("DELETE FROM schedules WHERE name = $1", &[&name.as_str()])
        .await
        .map_err(|e| db(&e))?;
    if n == 0 {
        return Err(not_found(name));
    }
    Ok(())
}

/// Applies one step in one transaction: the conditional update of the row, then the
/// firing's message.
pub(crate) async fn step(
    inner: &Inner,
    name: &ScheduleName,
    step: ScheduleStep,
) -> Result<StepOutcome, StoreError> {
    let mut conn = inner.conn().await?;
    let (outcome, woken) = transaction(&mut conn, async |tx| {
        let expected = step.expected.map(Timestamp::as_millis);
        let Some(row) = tx
            .query_opt(
                &format!(
                    "UPDATE schedules SET last_fired = $3, missed = missed + $4
                     WHERE name = $1 AND last_fired IS NOT DISTINCT FROM $2::bigint
                       AND NOT (spec->>'paused')::boolean AND anchor < $3
                     RETURNING {COLS}"
                ),
                &[
                    &name.as_str(),
                    &expected,
                    &step.through.as_millis(),
                    &count(step.missed),
                ],
            )
            .await
            .map_err(|e| db(&e))?
        else {
            let exists = tx
                .query_opt("SELECT 1 FROM schedules WHERE name = $1", &[&name.as_str()])
                .await
                .map_err(|e| db(&e))?
                .is_some();
            return if exists {
                Ok((StepOutcome::Stale, None))
            } else {
                Err(not_found(name))
            };
        };
        if !step.fire {
            return Ok((StepOutcome::Skipped, None));
        }
        let schedule = schedule_of(&row)?;
        let queue = &schedule.spec.queue;
        // Locked, so the queue cannot be deleted between this check and the insert.
        let column = match crate::db::catalog::config(tx, queue.as_str(), true).await {
            Ok(_) => "fired",
            Err(StoreError::QueueNotFound(_)) => "missed",
            Err(e) => return Err(e),
        };
        tx.execute(
            &format!("UPDATE schedules SET {column} = {column} + 1 WHERE name = $1"),
            &[&name.as_str()],
        )
        .await
        .map_err(|e| db(&e))?;
        if column == "missed" {
            return Ok((StepOutcome::QueueMissing, None));
        }
        let message = schedule.message(step.through, false);
        let (sent, visible) = crate::ops::send::send_in_tx(inner, tx, queue, vec![message]).await?;
        let first = sent[0];
        if !first.duplicate {
            let mut counts = Counts::default();
            counts.add(queue.as_str(), Counter::Sent, 1);
            counts.flush(tx).await?;
        }
        let woken = (visible && !first.duplicate).then(|| queue.to_string());
        Ok((StepOutcome::Fired { id: first.id }, woken))
    })
    .await?;
    if let Some(queue) = woken {
        inner.wake_some(&queue, 1);
    }
    Ok(outcome)
}
