//! The receive of a queue with keys or priorities and no limits to count: no turn on the
//! queue's row, so receives on every node run side by side, each ranking the fresh rows it
//! locks and leasing by rank the rows no other holds (`crate::hot::ranks`).
//!
//! Its chores are asked first in one statement: whether a lease ran out since this node's
//! previous look (`crate::hot::lapse_checks`), whether a message outlived retention, and
//! whether the queue has packs (and, until this node has seen them, FIFO groups: a node just
//! started leases group fronts sent before it). Only then does it run the expiry pass or
//! unpack: without them a receive is the probe, the ranking of fresh rows (a probe when there
//! are none), the lease and the count of its keys' deliveries.

use std::sync::Arc;

use sluice_core::{QueueConfig, ReceiveRequest, StoreError, Timestamp};

use crate::db::effects::Effects;
use crate::db::tx::transaction;
use crate::error::{corrupt, db, pool};
use crate::expiry::expire_queue;
use crate::hot::leases::{Attempted, GROUP_LEASE_SQL, Takers, lease_fronts, next_due};
use crate::local::QueueLocal;
use crate::store::Inner;

/// Whether queue `$1` has a lease that ran out at `$2` after `$3`, a waiting message that
/// entered it at or before `$4` (past retention), or packs; and, when `$5`, messages of FIFO
/// groups.
const CHORES_SQL: &str = "SELECT
        EXISTS (SELECT 1 FROM messages WHERE queue = $1 AND state = 1
                    AND visible_at <= $2 AND visible_at > $3),
        EXISTS (SELECT 1 FROM messages WHERE queue = $1 AND state = 0 AND entered_at <= $4),
        EXISTS (SELECT 1 FROM packs WHERE queue = $1 AND state < 2),
        CASE WHEN $5 THEN EXISTS (SELECT 1 FROM messages
                                  WHERE queue = $1 AND grp IS NOT NULL AND state < 2)
             ELSE false END";

/// Leases up to `req.max` messages of `queue` (configured `cfg`, which has no global limits
/// and is not governed) by rank.
pub(crate) async fn receive_ranked(
    inner: &Arc<Inner>,
    queue: &Arc<QueueLocal>,
    cfg: &QueueConfig,
    req: &ReceiveRequest,
) -> Result<Attempted, StoreError> {
    if cfg.paused {
        return Ok(Attempted::Empty { next_wake: None });
    }
    let q = queue.name.as_str();
    let mut conn = inner.lease_pool.get().await.map_err(|e| pool(&e))?;
    let (outcome, fx) = transaction(&mut conn, async |tx| {
        let now = inner.now();
        let mut fx = Effects::default();
        let cutoff = crate::expiry::retention_cutoff(cfg, now);
        let after = queue.lapse_checks.after(now);
        // A node that has not seen the queue's groups (one just started) asks whether it has
        // any, once: its messages sent before are leased by their group's rules too.
        let ask_groups = !queue.grouped();
        let chores = tx
            .query_one(CHORES_SQL, &[&q, &now, &after, &cutoff, &ask_groups])
            .await
            .map_err(|e| db(&e))?;
        let flag = |i: usize| -> Result<bool, StoreError> { chores.try_get(i).map_err(corrupt) };
        let (lapsed, overdue, packs) = (flag(0)?, flag(1)?, flag(2)?);
        if flag(3)? {
            queue.mark_grouped();
        }
        queue.lapse_checks.checked(now);
        if lapsed || overdue || packs {
            expire_queue(tx, q, cfg, now, &mut fx).await?;
        }
        let vis = req.visibility.unwrap_or(cfg.visibility_timeout);
        let deadline = Timestamp(now).plus(vis).as_millis();
        let takers = Takers::All(req.consumer.as_deref());
        let n = i64::from(req.max);
        let mut out =
            crate::hot::ranks::lease_ranked(tx, q, cfg, now, n, deadline, takers, None, packs)
                .await?;
        let left = req.max - u32::try_from(out.len()).unwrap_or(req.max);
        if left > 0 && queue.grouped() {
            let takers = takers.after(out.len());
            out.extend(
                lease_fronts(tx, GROUP_LEASE_SQL, queue, cfg, now, left, deadline, takers).await?,
            );
        }
        let outcome = if out.is_empty() {
            // Nothing ranked: the queue may have stopped holding keys and priorities, and
            // its receives may take the short way again.
            queue.set_ordered(crate::hot::ranks::holds_ranks(tx, q).await?);
            Attempted::Empty {
                next_wake: next_due(tx, q, now).await?,
            }
        } else {
            crate::hot::ranks::tally(tx, q, now, &out).await?;
            Attempted::Got(out)
        };
        fx.write(tx).await?;
        Ok((outcome, fx))
    })
    .await?;
    fx.after_commit(inner);
    Ok(outcome.untagged())
}
