//! Ack: each receipt on its own, results kept with the completed record. Acks of one queue
//! are combined across requests (see [`crate::hot::ack_combine`]).
//!
//! An ack waits for its WAL flush, and a database pays per statement and commit far more
//! than per row; consumers acking one message each therefore share statements. A receipt
//! named by two calls of one write would be acked once but answered twice, so such a call
//! waits for the next statement, where it is answered `receipt_stale` as it would be alone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sluice_core::adaptive::Outcome;
use sluice_core::{AckRequest, QueueName, StoreError};
use tokio::sync::oneshot;

use crate::db::counters::Counter;
use crate::db::row::kind_code;
use crate::hot::ack_combine::{AckJob, write_acks};
use crate::store::Inner;

/// Acknowledges a batch; each receipt on its own.
pub(crate) async fn ack(
    inner: &Arc<Inner>,
    queue: &QueueName,
    acks: Vec<AckRequest>,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let q = queue.as_str();
    let local = inner.locals.of(queue);
    let cfg = inner.config(&local).await?;
    let mut out: Vec<Option<Result<(), StoreError>>> = Vec::with_capacity(acks.len());
    let mut seen = HashSet::new();
    let mut slots = Vec::new();
    let (mut ids, mut tokens, mut results, mut kinds) = (vec![], vec![], vec![], vec![]);
    for (i, a) in acks.into_iter().enumerate() {
        // The same refusal as the embedded engine's ack: the text is part of the answer.
        if let Some(r) = &a.result
            && r.len() > cfg.max_message_bytes as usize
        {
            out.push(Some(Err(StoreError::result_too_large(
                r.len(),
                queue.as_str(),
                cfg.max_message_bytes,
            ))));
            continue;
        }
        if !seen.insert(a.receipt.id) {
            out.push(Some(Err(StoreError::ReceiptStale)));
            continue;
        }
        out.push(None);
        slots.push(i);
        ids.push(a.receipt.id.0 as i64);
        tokens.push(a.receipt.token as i64);
        kinds.push(a.result.as_ref().map(|b| kind_code(b.kind)));
        results.push(a.result.map(|b| b.bytes));
    }
    // A result is kept in the member's own row: its pack becomes rows first, once per lease
    // (the receipts of one pack lease share its token).
    let mut with_result: HashMap<i64, i64> = HashMap::new();
    for ((id, token), result) in ids.iter().zip(&tokens).zip(&results) {
        if crate::hot::packs::is_pack_token(*token) && result.is_some() {
            with_result.entry(*token).or_insert(*id);
        }
    }
    if !with_result.is_empty() {
        let conn = inner.conn().await?;
        for id in with_result.into_values() {
            crate::hot::packs::unpack_member(&**conn, id).await?;
        }
    }
    if !ids.is_empty() {
        // From before the acks commit until they are counted (`crate::coverage`).
        let _counting = inner.counting.read().await;
        let (reply, answer) = oneshot::channel();
        let job = AckJob {
            ids,
            tokens,
            results,
            kinds,
            reply,
        };
        // Acks keeping records for different lengths of time do not share a statement.
        let ttl = cfg.result_ttl;
        if let Some(jobs) = local.acks.push(ttl, job) {
            // A task of its own, so a caller that goes away does not stop the others' ack.
            let (inner, local) = (inner.clone(), local.clone());
            tokio::spawn(async move {
                crate::hot::combine::drain(&local.acks, &local.name, ttl, jobs, |jobs| {
                    write_acks(&inner, &local.name, ttl, jobs)
                })
                .await;
            });
        }
        let done = answer
            .await
            .map_err(|_| StoreError::unavailable("the ack was dropped before it was written"))??;
        let (mut acked, mut cancelled_n) = (0, 0);
        let by_key = sluice_core::adaptive::governs_keys(&cfg);
        let mut keys: HashMap<String, crate::flow::Counted> = HashMap::new();
        let now = inner.now();
        for (slot, done) in slots.into_iter().zip(done) {
            if let Some(done) = done {
                acked += i64::from(!done.cancelled);
                cancelled_n += u32::from(done.cancelled);
                out[slot] = Some(Ok(()));
                if by_key {
                    let outcome = if done.cancelled {
                        Outcome::Neutral
                    } else {
                        Outcome::Success
                    };
                    keys.entry(done.key.unwrap_or_default())
                        .or_default()
                        .add(outcome, 1, now);
                }
            }
        }
        inner.tally(q, Counter::Acked, acked);
        if crate::flow::governed(&cfg) {
            // Successes (a cancelled task's end is neutral), for the next receive or flush.
            let ok = u32::try_from(acked).unwrap_or(u32::MAX);
            let mut c = crate::flow::Counted::of(Outcome::Success, ok, now);
            c.add(Outcome::Neutral, cancelled_n, now);
            inner.flow.add(q, &c);
            inner.flow.add_keys(q, &keys);
        }
        if local.grouped() {
            // Members left their groups' lines: the next ones may go.
            inner.wake(q);
        }
    }
    Ok(out
        .into_iter()
        .map(|o| o.unwrap_or(Err(StoreError::ReceiptStale)))
        .collect())
}

/// Whether a lease of `queue` may be taken before an ack answered earlier is visible to it:
/// the ack commits on its own connection, so a lease may not see it yet, and a queue's
/// `max_in_flight`, or a group's line (the next member waits for the ack), makes a lease
/// depend on it; so does a governed queue's breaker (a probe's success closes it), which
/// counts the ack only once it has committed. An unknown queue fails in both.
pub(crate) async fn may_overlap_lease(inner: &Inner, queue: &QueueName) -> bool {
    let local = inner.locals.of(queue);
    !local.grouped()
        && inner
            .config(&local)
            .await
            .is_ok_and(|cfg| cfg.max_in_flight.is_none() && !crate::flow::governed(&cfg))
}
