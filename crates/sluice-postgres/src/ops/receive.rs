//! Receive: leases up to `max` messages for a client, long-polling for the first, on the
//! short combined path for queues without global limits and in a transaction under the
//! queue's row lock for the others (governed queues among them, `crate::flow`).

use std::sync::Arc;

use sluice_core::store::long_poll_nap;
use sluice_core::{Delivery, QueueName, ReceiveRequest, StoreError};

use crate::db::counters::Counter;
use crate::db::effects::Effects;
use crate::db::tx::transaction;
use crate::error::pool;
use crate::expiry::expire_queue;
use crate::hot::leases::{Attempted, LEASE_SQL, Takers, take_leases_limited};
use crate::hot::wake::FALLBACK_POLL;
use crate::local::QueueLocal;
use crate::store::Inner;

/// One lease attempt, counted: the counting gate is held from before the leases commit until
/// they are counted (`crate::coverage`), never while a long poll waits.
async fn counted_receive(
    inner: &Arc<Inner>,
    local: &Arc<crate::local::QueueLocal>,
    req: &ReceiveRequest,
) -> Result<Attempted, StoreError> {
    let _counting = inner.counting.read().await;
    let attempted = receive_once(inner, local, req).await?;
    if let Attempted::Got(out) = &attempted {
        inner.tally(local.name.as_str(), Counter::Received, out.len() as i64);
    }
    Ok(attempted)
}

/// Leases up to `req.max` messages, waiting up to `req.wait` for the first.
pub(crate) async fn receive(
    inner: &Arc<Inner>,
    queue: &QueueName,
    req: ReceiveRequest,
) -> Result<Vec<Delivery>, StoreError> {
    let until = tokio::time::Instant::now() + req.wait;
    // Only a long poll may skip the database: it would wait anyway, and a receive that
    // does not wait must see what is committed. And only while other nodes' wake-ups
    // arrive: the memory relies on them. A receive woken by its timer asks: that timer is
    // the bound on a missed wake-up.
    let mut may_skip = !req.wait.is_zero();
    loop {
        // Looked up again after each wait: a queue deleted meanwhile has new memories.
        let local = inner.locals.of(queue);
        let waker = &local.waker;
        let notified = waker.notified();
        tokio::pin!(notified);
        let stamp = waker.stamp(notified.as_mut());
        let nap = match (may_skip && inner.wakers.listening())
            .then(|| waker.known_empty(inner.now()))
            .flatten()
        {
            Some(nap) => nap,
            None => match counted_receive(inner, &local, &req).await? {
                Attempted::Got(out) => {
                    waker.leased(stamp, out.len());
                    return Ok(out);
                }
                Attempted::Empty { next_wake } => {
                    let now = inner.now();
                    waker.found_empty(stamp, next_wake, now);
                    long_poll_nap(FALLBACK_POLL, FALLBACK_POLL, now, next_wake)
                }
            },
        };
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(Vec::new());
        }
        // Sends on this node may hand this receive their messages while it waits. Only a
        // hint for them: a config that cannot be read now does not end the long poll.
        let lease = match req.visibility {
            Some(lease) => Some(lease),
            None => (inner.config(&local).await.ok()).map(|c| c.visibility_timeout),
        };
        let waiting = lease.map(|l| {
            local
                .handoff
                .enter(l, req.consumer.clone(), req.max as usize)
        });
        let handed = async {
            match &waiting {
                Some(w) => w.handed().await,
                None => std::future::pending().await,
            }
        };
        may_skip = tokio::select! {
            () = &mut notified => !req.wait.is_zero(),
            // Held for this consumer's receives on this node: taken without a statement.
            () = handed => false,
            () = tokio::time::sleep(nap.min(left)) => false,
        };
    }
}

/// One attempt to receive. Leases run on connections whose commits do not wait for the WAL
/// flush: a lease lost in a database crash only makes the message visible again (at least
/// once still holds) and its receipt stale; sends, acks and every other change still commit
/// synchronously. A queue without global limits takes the short way: one statement
/// ([`take_leases`](crate::hot::leases::take_leases)), shared by the receives of the queue
/// that arrive together.
async fn receive_once(
    inner: &Arc<Inner>,
    queue: &Arc<QueueLocal>,
    req: &ReceiveRequest,
) -> Result<Attempted, StoreError> {
    let q = queue.name.as_str();
    let cfg = inner.config(queue).await?;
    if !crate::flow::limited(&cfg) && !queue.ordered() {
        // Receives of one queue arriving together share one statement.
        let got = crate::hot::lease_combine::receive_combined(inner, queue, &cfg, req).await?;
        // Unless the statement found keys or priorities: then by rank, below.
        if !queue.ordered() {
            return Ok(got);
        }
    }
    if !crate::flow::limited(&cfg) {
        // Keys and priorities alone need no turn on the queue's row.
        return crate::hot::rank_receive::receive_ranked(inner, queue, &cfg, req).await;
    }
    let mut conn = inner.lease_pool.get().await.map_err(|e| pool(&e))?;
    // The outcomes this node counted for a governed queue, taken into the transaction.
    let mut taken = crate::flow::Taken::default();
    let done = transaction(&mut conn, async |tx| {
        // Global limits or a governed queue: receives of this queue take turns on its row, on
        // every node, so that what they count is exact.
        let cfg = crate::db::catalog::config(tx, q, true).await?;
        let now = inner.now();
        let mut fx = Effects::default();
        expire_queue(tx, q, &cfg, now, &mut fx).await?;
        let outcome = if crate::flow::governed(&cfg) {
            crate::flow::receive(tx, inner, queue, &cfg, req, now, &mut fx, &mut taken).await?
        } else {
            let takers = Takers::All(req.consumer.as_deref());
            let mut turn = crate::hot::key_flows::KeyTurn::default();
            take_leases_limited(tx, LEASE_SQL, queue, &cfg, req, now, takers, &mut turn)
                .await?
                .untagged()
        };
        fx.write(tx).await?;
        Ok((outcome, fx))
    })
    .await;
    let (outcome, fx) = match done {
        Ok(done) => done,
        Err(e) => {
            // Counted again, for the next receive or flush.
            taken.give_back(inner, q);
            return Err(e);
        }
    };
    fx.after_commit(inner);
    Ok(outcome)
}
