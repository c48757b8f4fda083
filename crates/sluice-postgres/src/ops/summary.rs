//! Queue summaries: one `GROUP BY` over the queue's message rows.
//!
//! Dead letters are found through the partial index `messages_dead_letters` (migration 4) on
//! `(queue, dl_reason, source_queue, dl_at, id)`: grouping by reason or source, and the time
//! filters, read only that index (an index-only scan while the visibility map is current);
//! grouping by error or an attribute reads the queue's dead-letter rows and no others. Rows
//! without dead-letter information are read only when the queue has some (two index counts
//! tell). A queue's packs (plain batch sends: no error, reason or source) are made rows
//! first, as a browse does.

use tokio_postgres::types::ToSql;

use sluice_core::summary::{GroupBy, Summary, SummaryGroup, SummaryRequest};
use sluice_core::{MessageId, QueueName, StoreError, Timestamp};

use crate::db::effects::Effects;
use crate::error::{corrupt, db};
use crate::expiry::expire_with_sources;
use crate::store::Inner;

/// Counts the queue's messages by the request's key.
///
/// Long because the statement is assembled from the request (grouping key, the dead letters,
/// the other rows only when the queue holds some) and its placeholders `$1` to `$10` are bound
/// here too, beside their use.
pub(crate) async fn summarize(
    inner: &Inner,
    queue: &QueueName,
    req: SummaryRequest,
) -> Result<Summary, StoreError> {
    let q = queue.as_str();
    let attributes = crate::db::row::attrs_json(&req.filter.attributes);
    let attr_name = match &req.group_by {
        GroupBy::Attribute(name) => Some(name.clone()),
        _ => None,
    };
    let key = match &req.group_by {
        GroupBy::Error => "last_error",
        GroupBy::Reason => "dl_reason",
        GroupBy::Source => "source_queue",
        GroupBy::Key => "fkey",
        GroupBy::Attribute(_) => "attrs ->> $10",
    };
    let filters = "($2::text IS NULL OR strpos(last_error, $2) > 0)
               AND ($3::jsonb IS NULL OR attrs @> $3)
               AND ($4::bigint IS NULL OR dl_at < $4)
               AND ($5::bigint IS NULL OR dl_at >= $5)
               AND ($6::text IS NULL OR last_error = $6)
               AND ($7::text IS NULL OR dl_reason = $7)
               AND ($8::text IS NULL OR source_queue = $8)
               AND ($9::text IS NULL OR fkey = $9)";
    let dead = format!(
        "SELECT {key} AS k, dl_at AS at, id FROM messages
         WHERE queue = $1 AND dl_at IS NOT NULL AND state < 2 AND {filters}"
    );
    // Messages without dead-letter information count at their send time; a time filter
    // leaves none of them.
    let others = format!(
        "SELECT {key} AS k, enqueued_at AS at, id FROM messages
         WHERE queue = $1 AND dl_at IS NULL AND state < 2 AND {filters}"
    );
    let reason = req.filter.reason.map(|r| r.as_str());
    let source = req.filter.source_queue.as_ref().map(|q| q.as_str());
    let before = req.filter.dead_lettered_before.map(|t| t.as_millis());
    let after = req.filter.dead_lettered_after.map(|t| t.as_millis());
    let key_filter = req.filter.key.as_ref().map(|k| k.as_str());
    let mut conn = inner.conn().await?;
    let (rows, fx) = crate::db::tx::transaction(&mut conn, async |tx| {
        let cfg = crate::db::catalog::config(tx, q, false).await?;
        let mut fx = Effects::default();
        expire_with_sources(tx, q, &cfg, inner.now(), &mut fx).await?;
        crate::hot::packs::unpack_queue(tx, queue).await?;
        // Rows without dead-letter information have no index of their own (one would cost
        // every send): they are read only when the queue has some, which a count of each
        // kind of row, both from indexes, tells.
        let counts = tx
            .query_one(
                "SELECT (SELECT count(*) FROM messages WHERE queue = $1 AND state = 0)
                      + (SELECT count(*) FROM messages WHERE queue = $1 AND state = 1),
                        (SELECT count(*) FROM messages
                         WHERE queue = $1 AND dl_at IS NOT NULL AND state < 2)",
                &[&q],
            )
            .await
            .map_err(|e| db(&e))?;
        let (all, dead_letters): (i64, i64) = (counts.get(0), counts.get(1));
        let with_others = all > dead_letters && before.is_none() && after.is_none();
        let union = if with_others {
            format!("{dead} UNION ALL {others}")
        } else {
            dead.clone()
        };
        let sql = format!(
            "WITH g AS (
                 SELECT k, count(*) AS n, min(at) AS first, max(at) AS last, min(id) AS sample
                 FROM ({union}) u GROUP BY k
             )
             SELECT k, n, first, last, sample, count(*) OVER (), (sum(n) OVER ())::bigint
             FROM g ORDER BY n DESC, k COLLATE \"C\" ASC NULLS LAST LIMIT {}",
            req.limit
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &q,
            &req.filter.error_contains,
            &attributes,
            &before,
            &after,
            &req.filter.error_is,
            &reason,
            &source,
            &key_filter,
        ];
        if let Some(name) = &attr_name {
            params.push(name);
        }
        let rows = tx.query(&sql, &params).await.map_err(|e| db(&e))?;
        fx.write(tx).await?;
        Ok((rows, fx))
    })
    .await?;
    fx.after_commit(inner);
    let mut out = Summary {
        total: 0,
        group_count: 0,
        groups: Vec::with_capacity(rows.len()),
    };
    for r in &rows {
        let count: i64 = r.try_get(1).map_err(corrupt)?;
        let first: i64 = r.try_get(2).map_err(corrupt)?;
        let last: i64 = r.try_get(3).map_err(corrupt)?;
        let sample: i64 = r.try_get(4).map_err(corrupt)?;
        let groups: i64 = r.try_get(5).map_err(corrupt)?;
        let total: i64 = r.try_get(6).map_err(corrupt)?;
        out.total = u64::try_from(total).unwrap_or(0);
        out.group_count = u64::try_from(groups).unwrap_or(0);
        out.groups.push(SummaryGroup {
            key: r.try_get(0).map_err(corrupt)?,
            count: u64::try_from(count).unwrap_or(0),
            first_at: Timestamp(first),
            last_at: Timestamp(last),
            sample_id: MessageId(sample as u64),
        });
    }
    Ok(out)
}
