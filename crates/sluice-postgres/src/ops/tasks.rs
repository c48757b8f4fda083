//! Running tasks: extend a lease, record progress, cancel.

use std::time::Duration;

use sluice_core::store::LeaseState;
use sluice_core::{Message, MessageId, Progress, QueueName, Receipt, StoreError, Timestamp};
use tokio_postgres::types::Json;

use crate::db::effects::Effects;
use crate::db::row::{ROW_COLS, Row};
use crate::error::db;
use crate::expiry::expire_queue;
use crate::ops::leased::{Change, change_leased};
use crate::ops::lifecycle::end_cancelled;
use crate::store::Inner;

/// Sets the lease to end `visibility` from now.
pub(crate) async fn extend(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    visibility: Duration,
) -> Result<LeaseState, StoreError> {
    change_leased(inner, queue, &receipt, async |_, _, row, now, _| {
        let deadline = Timestamp(now).plus(visibility);
        row.visible_at = deadline.as_millis();
        Ok(Change::Row(LeaseState {
            deadline,
            cancel_requested: row.cancel_requested,
        }))
    })
    .await
}

/// Records the progress of a running task, in its row so every node's status call sees it.
pub(crate) async fn progress(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    mut progress: Progress,
) -> Result<LeaseState, StoreError> {
    change_leased(inner, queue, &receipt, async |tx, _, row, now, _| {
        progress.at = Timestamp(now);
        tx.execute(
            "UPDATE messages SET progress = $2 WHERE id = $1",
            &[&row.id, &Json(&progress)],
        )
        .await
        .map_err(|e| db(&e))?;
        Ok(Change::Done(LeaseState {
            deadline: Timestamp(row.visible_at),
            cancel_requested: row.cancel_requested,
        }))
    })
    .await
}

/// Cancels a task: a waiting one ends now, a running one is flagged.
pub(crate) async fn cancel(inner: &Inner, id: MessageId) -> Result<Message, StoreError> {
    let mut conn = inner.conn().await?;
    let fx = crate::db::tx::transaction(&mut conn, async |tx| {
        let now = inner.now();
        let mut fx = Effects::default();
        crate::hot::packs::unpack_member(tx, id.0 as i64).await?;
        let found = tx
            .query_opt(
                "SELECT queue FROM messages WHERE id = $1",
                &[&(id.0 as i64)],
            )
            .await
            .map_err(|e| db(&e))?;
        let Some(found) = found else {
            return Ok(fx);
        };
        let queue: String = found.get(0);
        let cfg = crate::db::catalog::config(tx, &queue, false).await?;
        expire_queue(tx, &queue, &cfg, now, &mut fx).await?;
        let row = tx
            .query_opt(
                &format!("SELECT {ROW_COLS} FROM messages WHERE id = $1 FOR UPDATE"),
                &[&(id.0 as i64)],
            )
            .await
            .map_err(|e| db(&e))?;
        if let Some(r) = row {
            let row = Row::from_pg(&r)?;
            let finished = row.dead_letter.is_some() || row.state == crate::db::row::DONE;
            if finished || (row.state == crate::db::row::LEASED && row.cancel_requested) {
                // A dead letter is a failed task and a completed one is done: left as is.
            } else if row.state == crate::db::row::LEASED {
                tx.execute(
                    "UPDATE messages SET cancel_requested = true WHERE id = $1",
                    &[&row.id],
                )
                .await
                .map_err(|e| db(&e))?;
            } else {
                let qcfg = if row.queue == queue {
                    cfg.clone()
                } else {
                    crate::db::catalog::config(tx, &row.queue, false).await?
                };
                end_cancelled(tx, row.id, &qcfg, now).await?;
            }
        }
        fx.write(tx).await?;
        Ok(fx)
    })
    .await?;
    fx.after_commit(inner);
    drop(conn);
    crate::ops::browse::get_message(inner, id).await
}
