//! `ack`: completes leased messages, keeping results for the queue's `result_ttl`.

use sluice_core::adaptive::Outcome;
use sluice_core::store::AckOverlap;
use sluice_core::{AckRequest, QueueName, StoreError};

use crate::core::Inner;
use crate::journal::record::{Acked, Hold, Record};
use crate::state::LeaseHolder;

/// A lease may be granted while an ack of the same queue is under way, on every queue: `ack`
/// decides and appends under the state lock before its one await (durability).
pub(crate) const ACK_OVERLAP: AckOverlap = AckOverlap::Always;

/// Acknowledges leases; each receipt gets its own answer (stale, duplicate, or result too
/// large for the queue). The batch's size was checked by `Checked`.
pub(crate) async fn ack(
    inner: &Inner,
    queue: &QueueName,
    acks: Vec<AckRequest>,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let (out, pos) = {
        let mut core = inner.lock();
        let now = inner.now();
        let qid = core.qid(queue)?;
        core.expire(qid, now)?;
        let cfg = core.state.queues[&qid].config.clone();
        let keep_until = now + cfg.result_ttl.as_millis() as i64;
        let mut seen = std::collections::HashSet::new();
        let mut plain = Vec::new();
        let mut plain_times = Vec::new();
        let mut plain_holds = Vec::new();
        let mut records = Vec::new();
        let mut out = Vec::with_capacity(acks.len());
        let mut outcomes = crate::flow::Outcomes::of(&core.state.queues[&qid]);
        for a in acks {
            let m = match core.leased(qid, &a.receipt) {
                Ok(m) if seen.insert(a.receipt.id) => m,
                Ok(_) | Err(_) => {
                    out.push(Err(StoreError::ReceiptStale));
                    continue;
                }
            };
            let acked = Acked {
                id: a.receipt.id.0,
                qid,
                receive_count: m.receive_count(),
                at: now,
                keep_until,
                cancelled: m.cancel_requested(),
            };
            let result = match a.result {
                Some(result) if result.len() > cfg.max_message_bytes as usize => {
                    seen.remove(&a.receipt.id);
                    out.push(Err(StoreError::result_too_large(
                        result.len(),
                        queue.as_str(),
                        cfg.max_message_bytes,
                    )));
                    continue;
                }
                Some(result) if !acked.cancelled => Some(result),
                _ => None,
            };
            // Plain acks share one record; the rest say more (a result, the attempts
            // history) and get their own.
            outcomes.add(
                || core.key_arc(&m, acked.id),
                if acked.cancelled {
                    Outcome::Neutral
                } else {
                    Outcome::Success
                },
            );
            let times = core.times(&acked, &m)?;
            // A completed record that is kept shows the delivery that completed it: when its
            // lease began and who received it.
            let hold = times
                .and_then(|_| core.state.holders.get(&acked.id))
                .map(LeaseHolder::holder)
                .and_then(|h| Hold::of_lease(acked.id, Some(&h)));
            match core.completion(acked, &m, result)? {
                Some(rec) => records.push(Record::held(
                    Record::timed(rec, times.into_iter().collect()),
                    hold.into_iter().collect(),
                )),
                None => {
                    plain.push(acked);
                    plain_times.extend(times);
                    plain_holds.extend(hold);
                }
            }
            out.push(Ok(()));
        }
        if !plain.is_empty() {
            records.push(Record::held(
                Record::timed(Record::Ack(plain), plain_times),
                plain_holds,
            ));
        }
        let pos = if records.is_empty() {
            None
        } else {
            Some(core.commit(records)?)
        };
        core.flow_settle(qid, outcomes, now);
        // A slot freed under an in-flight cap: waiting receives may take the next.
        if cfg.max_in_flight.is_some() || cfg.key_limits.is_some() {
            core.state.queues[&qid].notify.notify_waiters();
        }
        (out, pos)
    };
    if let Some(pos) = pos {
        inner.answerable(pos).await?;
    }
    Ok(out)
}
