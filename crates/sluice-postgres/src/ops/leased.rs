//! Receipt-checked changes of a leased message: the one transaction that nack, reject, move,
//! release, extend and progress share.

use sluice_core::{QueueConfig, QueueName, Receipt, StoreError};

use crate::db::effects::Effects;
use crate::db::row::{ROW_COLS, Row, write_back};
use crate::error::db;
use crate::store::Inner;

/// A receipt-checked change, in one transaction: reads the queue's config and the leased
/// row, lets `f` change it, writes it back with the effects and wakes whom `f` named.
pub(crate) async fn change_leased<T>(
    inner: &Inner,
    queue: &QueueName,
    receipt: &Receipt,
    f: impl AsyncFnOnce(
        &tokio_postgres::Transaction<'_>,
        &QueueConfig,
        &mut Row,
        i64,
        &mut Effects,
    ) -> Result<Change<T>, StoreError>,
) -> Result<T, StoreError> {
    let q = queue.as_str();
    let mut conn = inner.conn().await?;
    let (out, fx) = crate::db::tx::transaction(&mut conn, async |tx| {
        let cfg = crate::db::catalog::config(tx, q, false).await?;
        let now = inner.now();
        if crate::hot::packs::is_pack_token(receipt.token as i64) {
            crate::hot::packs::unpack_member(tx, receipt.id.0 as i64).await?;
        }
        let row = tx
            .query_opt(
                &format!("SELECT {ROW_COLS} FROM messages WHERE id = $1 FOR UPDATE"),
                &[&(receipt.id.0 as i64)],
            )
            .await
            .map_err(|e| db(&e))?;
        let mut row = match row {
            Some(r) => Row::from_pg(&r)?,
            None => return Err(StoreError::ReceiptStale),
        };
        if row.queue != q || !row.holds(receipt.token, now) {
            return Err(StoreError::ReceiptStale);
        }
        let mut fx = Effects::default();
        let out = match f(tx, &cfg, &mut row, now, &mut fx).await? {
            Change::Row(out) => {
                write_back(tx, std::slice::from_ref(&row)).await?;
                out
            }
            Change::Done(out) => out,
        };
        fx.write(tx).await?;
        Ok((out, fx))
    })
    .await?;
    fx.after_commit(inner);
    Ok(out)
}

/// What a receipt-checked change did with the row.
pub(crate) enum Change<T> {
    /// Changed it in memory: write it back.
    Row(T),
    /// Wrote what it needed itself.
    Done(T),
}
