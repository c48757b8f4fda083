//! Transactional enqueue: a send inside the caller's own PostgreSQL transaction.
//!
//! The outbox pattern without an outbox: the business write and the task that follows it
//! commit or roll back together, so there is never a task for a write that did not happen, nor
//! a write whose task was lost.

use sluice_core::{NewMessage, QueueName, SendOutcome, StoreError};
use tokio_postgres::Transaction;

use crate::error::db;
use crate::store::PostgresStore;

impl PostgresStore {
    /// Sends `messages` to `queue` inside `tx`, a transaction the caller opened on its own
    /// connection to the same database. Nothing is visible to consumers until `tx` commits;
    /// if it rolls back, nothing was sent. Consumers on every node are woken at the commit.
    ///
    /// The caller's `search_path` is left as it was. The same rules as [`Messaging::send`]
    /// apply (dedup ids, `max_depth`, sizes). This call is the engine's own, beside the
    /// contract, so it runs the shared batch check (`validate_send_batch`) itself rather
    /// than through `Checked`.
    ///
    /// [`Messaging::send`]: sluice_core::store::Messaging::send
    ///
    /// # Errors
    /// As [`Messaging::send`]; a failed statement also aborts the caller's transaction, as any
    /// failed statement in PostgreSQL does.
    pub async fn send_in(
        &self,
        tx: &Transaction<'_>,
        queue: &QueueName,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<SendOutcome>, StoreError> {
        sluice_core::store::validate_send_batch(&messages)?;
        let saved: String = tx
            .query_one("SELECT current_setting('search_path')", &[])
            .await
            .map_err(|e| db(&e))?
            .get(0);
        tx.execute(
            "SELECT set_config('search_path', $1, true)",
            &[&crate::db::schema::quote_ident(&self.inner.schema)],
        )
        .await
        .map_err(|e| db(&e))?;
        let out = crate::ops::send::send_in_tx(&self.inner, tx, queue, messages).await;
        // Counted in the caller's transaction: a rollback takes the count back too.
        if let Ok((sent, _)) = &out {
            let mut counts = crate::db::counters::Counts::default();
            let fresh = sent.iter().filter(|o| !o.duplicate).count();
            counts.add(
                queue.as_str(),
                crate::db::counters::Counter::Sent,
                fresh as i64,
            );
            counts.flush(tx).await?;
        }
        // Waiting receives wake when the caller commits: the NOTIFY leaves with the commit.
        if let Ok((_, true)) = &out {
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[
                    &self.inner.channel,
                    &crate::hot::wake::caller_commit_payload(queue.as_str()),
                ],
            )
            .await
            .map_err(|e| db(&e))?;
        }
        let restored = tx
            .execute("SELECT set_config('search_path', $1, true)", &[&saved])
            .await;
        // A failed send aborted the transaction, which then fails the restore too: report
        // what went wrong first.
        let (outcomes, _) = out?;
        restored.map_err(|e| db(&e))?;
        Ok(outcomes)
    }
}
