//! Receives of one queue combined: those that arrive while earlier leases of the queue are
//! being taken share the next lease statement (see [`crate::hot::combine`]), which leases for all
//! of them at once and hands each its share, oldest messages first. Receives of different
//! consumers share statements too: the lease names, for each message it takes, the consumer
//! of the receive whose share it falls in (see [`Takers`]), and each receive is handed
//! messages leased in its consumer's name.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use sluice_core::{Delivery, QueueConfig, ReceiveRequest, StoreError};
use tokio::sync::oneshot;

use crate::error::pool;
use crate::hot::leases::{Attempted, Taken, Takers, take_leases};
use crate::local::QueueLocal;
use crate::store::Inner;

/// Lease statements of one queue a node runs at the same time. One: a lease commits without
/// waiting for the WAL flush, so it is short, and receives arriving meanwhile share the
/// next statement instead of each running its own (measured at one message per receive:
/// 2.50 transactions per message instead of 2.94).
pub(crate) const LEASES_IN_FLIGHT: usize = 1;

/// Lease statements of one queue a node runs at the same time for large receives
/// ([`crate::hot::combine::LARGE_CALL`] messages or more): a lease of a hundred rows spends its
/// time on rows, and one at a time capped a queue at the rows one statement leases per
/// statement time (measured, 100 messages per receive, 4 + 4: 20,554 – 23,821 msg/s with
/// four, 9,616 – 11,733 with one, 13,213 – 15,472 with two).
pub(crate) const LARGE_LEASES_IN_FLIGHT: usize = 4;

/// Lease statements of one queue a node runs at the same time for large receives served by
/// packs: a pack is one row, so such a lease is short again, and receives woken together
/// (a send wakes every waiting receive once it is large) share a statement instead of each
/// running its own that finds nothing (measured, 100 messages per send and receive, 4 + 4,
/// frames, 300,000 messages: 69,012 – 70,116 msg/s with one, 67,940 – 71,203 with two,
/// 58,127 – 66,120 with four; one runs the fewest statements, a third of four's).
pub(crate) const PACKED_LEASES_IN_FLIGHT: usize = 1;

/// How long (ms) the newest message a lease took must have waited for the queue's consumers
/// to count as behind: above the wait of a queue that keeps up (a few milliseconds), well
/// below that of a growing backlog (seconds). A queue held near this wait by its nodes
/// reading ahead runs with about this much end-to-end latency (measured at one message per
/// receive, 4 + 4: p50 8 – 24 ms with 25, about 100 ms with 100, at the same throughput).
const BACKLOG_AGE_MS: i64 = 25;

/// A receive waiting for its queue's next combined lease.
pub(crate) struct LeaseJob {
    max: u32,
    /// The name the receive gave, recorded as its leases' holder.
    consumer: Option<String>,
    reply: oneshot::Sender<Result<Attempted, StoreError>>,
}

/// One attempt to receive up to `req.max` messages of a queue without global limits: from
/// what this node holds for the queue, else from the queue's next combined lease.
pub(crate) async fn receive_combined(
    inner: &Arc<Inner>,
    queue: &Arc<QueueLocal>,
    cfg: &QueueConfig,
    req: &ReceiveRequest,
) -> Result<Attempted, StoreError> {
    // Receives asking for different lease lengths share neither statements nor the messages
    // held for them.
    let vis = req.visibility.unwrap_or(cfg.visibility_timeout);
    if !cfg.paused {
        let held = queue
            .read_ahead
            .take(vis, req.consumer.as_deref(), req.max as usize);
        if !held.is_empty() {
            return Ok(Attempted::Got(held));
        }
    }
    let (reply, answer) = oneshot::channel();
    let job = LeaseJob {
        max: req.max,
        consumer: req.consumer.clone(),
        reply,
    };
    let packed = queue.served_by_packs();
    let lane = queue.leases.of(req.max as usize, packed);
    if let Some(jobs) = lane.push(vis, job) {
        // A task of its own: a receive that goes away (a long poll ended by its client) must
        // not stop the lease the others wait for.
        let (inner, queue, max) = (inner.clone(), queue.clone(), req.max as usize);
        tokio::spawn(async move {
            let lane = queue.leases.of(max, packed);
            crate::hot::combine::drain(lane, &queue.name, vis, jobs, |jobs| {
                serve_combined(&inner, &queue, vis, jobs)
            })
            .await;
        });
    }
    answer
        .await
        .map_err(|_| StoreError::unavailable("the receive was dropped before it was served"))?
}

/// Takes the leases of the receives `jobs` gathered for `vis` in one statement and hands
/// each its share, holding what was read ahead for the next ones.
///
/// Long because the places named in the one lease statement (each receive's consumer, then the
/// read-ahead) are laid out at the top and undone at the bottom, where each receive takes its share
/// and the rest is held.
async fn serve_combined(
    inner: &Arc<Inner>,
    queue: &Arc<QueueLocal>,
    vis: Duration,
    jobs: Vec<LeaseJob>,
) {
    let total = jobs.iter().fold(0u32, |n, j| n.saturating_add(j.max));
    let leased = async {
        let cfg = inner.config(queue).await?;
        // What this node holds for each receive's consumer goes first.
        let shares: Vec<Vec<Delivery>> = jobs
            .iter()
            .map(|j| {
                if cfg.paused {
                    Vec::new()
                } else {
                    let held = &queue.read_ahead;
                    held.take(vis, j.consumer.as_deref(), j.max as usize)
                }
            })
            .collect();
        // The lease's places, in the receives' order: each one's consumer for as many
        // messages as it still wants.
        let mut takers: Vec<Option<String>> = Vec::new();
        for (j, share) in jobs.iter().zip(&shares) {
            let wanted = (j.max as usize).saturating_sub(share.len());
            takers.extend(std::iter::repeat_n(j.consumer.clone(), wanted));
        }
        if takers.is_empty() {
            return Ok::<_, StoreError>((shares, Attempted::Got(Vec::new())));
        }
        let want = u32::try_from(takers.len()).unwrap_or(u32::MAX);
        let mut conn = inner.lease_pool.get().await.map_err(|e| pool(&e))?;
        let behind = queue.backlog.has();
        let mut ahead = queue.read_ahead.extra(jobs.len(), total, vis, behind);
        if ahead > 0 {
            // Read ahead for the consumers keeping up with the queue here, in turn.
            let serving = jobs.iter().map(|j| j.consumer.as_deref());
            let names = queue.read_ahead.readers(vis, serving);
            ahead = crate::hot::read_ahead::for_readers(ahead, names.len());
            takers.extend(names.iter().cycle().take(ahead as usize).cloned());
        }
        let got = take_leases(
            inner,
            queue,
            &mut conn,
            &cfg,
            want + ahead,
            vis,
            Takers::Each(&takers),
        )
        .await?;
        Ok((shares, got))
    }
    .await;
    let (shares, got) = match leased {
        Ok((shares, Attempted::Empty { next_wake })) if shares.iter().all(Vec::is_empty) => {
            queue.backlog.mark(false);
            for j in jobs {
                let _ = j.reply.send(Ok(Attempted::Empty { next_wake }));
            }
            return;
        }
        Ok((shares, Attempted::Empty { .. })) => (shares, Vec::new()),
        Ok((shares, Attempted::Got(got))) => (shares, got),
        Err(e) => {
            for j in jobs {
                let _ = j.reply.send(Err(e.clone()));
            }
            return;
        }
    };
    let delivered = || (shares.iter().flatten()).chain(got.iter().map(|t: &Taken| &t.delivery));
    // Behind: every receive filled, and even the newest message leased had waited.
    let newest = delivered().map(|d| d.enqueued_at.as_millis()).max();
    let waited = newest.is_some_and(|t| inner.now() - t >= BACKLOG_AGE_MS);
    queue
        .backlog
        .mark(delivered().count() >= total as usize && waited);
    if total as usize >= crate::hot::combine::LARGE_CALL {
        let packs = delivered().any(|d| crate::hot::packs::is_pack_token(d.receipt.token as i64));
        queue.mark_served_by_packs(packs);
    }
    // Each receive takes, oldest first, what was leased in its consumer's name.
    let mut by_name: HashMap<Option<String>, VecDeque<Delivery>> = HashMap::new();
    for t in got {
        by_name.entry(t.by).or_default().push_back(t.delivery);
    }
    let mut answers = Vec::with_capacity(jobs.len());
    for (j, mut share) in jobs.into_iter().zip(shares) {
        if let Some(leased) = by_name.get_mut(&j.consumer) {
            let n = (j.max as usize)
                .saturating_sub(share.len())
                .min(leased.len());
            share.extend(leased.drain(..n));
        }
        answers.push((j.reply, share));
    }
    // What is left was read ahead: held for the next receives of its consumer.
    for (consumer, ahead) in by_name {
        if !ahead.is_empty() {
            crate::hot::read_ahead::hold(inner, queue, vis, consumer, ahead.into());
        }
    }
    for (reply, share) in answers {
        // A receive left without messages: those leased took the queue's last ones, so it
        // waits for the next wake-up.
        let answer = if share.is_empty() {
            Attempted::Empty { next_wake: None }
        } else {
            Attempted::Got(share)
        };
        if let Err(Ok(Attempted::Got(unwanted))) = reply.send(Ok(answer)) {
            // The receive went away meanwhile: its messages go back at once rather than
            // when their leases run out.
            crate::ops::nack::release_unused(inner, &queue.name, unwanted).await;
        }
    }
}
