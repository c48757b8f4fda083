//! `receive`: long-polls a queue and leases what is visible. The one write that may wait is
//! a token reservation, so receipts stay unique across crashes.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::store::long_poll_nap;
use sluice_core::{Delivery, MessageId, QueueName, Receipt, ReceiveRequest, StoreError, Timestamp};
use tokio::sync::Notify;

use sluice_core::adaptive::Admit;

use crate::core::Inner;
use crate::journal::record::{Lease, Record};

/// Leases up to `req.max` visible messages, waiting up to `req.wait` for some.
pub(crate) async fn receive(
    inner: &Inner,
    queue: &QueueName,
    req: ReceiveRequest,
) -> Result<Vec<Delivery>, StoreError> {
    let until = tokio::time::Instant::now() + req.wait;
    let notify = notifier(inner, queue)?;
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match try_receive(inner, queue, &req)? {
            Attempted::Got(out, wait) => {
                match wait {
                    Some((pos, true)) => inner.durable(pos).await?,
                    Some((pos, false)) => inner.answerable(pos).await?,
                    None => {}
                }
                return Ok(out);
            }
            Attempted::Empty { next_wake } => {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return Ok(Vec::new());
                }
                // Re-check at the next due time (delay over, lease end, rate window),
                // and at least every second so a moved clock is noticed.
                let nap = long_poll_nap(left, Duration::from_secs(1), inner.now(), next_wake);
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep(nap) => {}
                }
            }
        }
    }
}

/// What one look at the queue found.
enum Attempted {
    /// Deliveries, and the log position to wait for before handing them out, if any; `true`
    /// when that position holds a token reservation, which is waited for even under relaxed
    /// durability (receipts must stay unambiguous after any crash).
    Got(Vec<Delivery>, Option<(u64, bool)>),
    Empty {
        next_wake: Option<i64>,
    },
}

/// One look at the queue under the lock: lease what may be leased now.
///
/// Long because each limit (pause, `max_in_flight`, `rate_limit`, breaker and adaptive pace)
/// narrows how many may go, and exactly that many are then charged to the same windows and leased,
/// all under one lock hold.
fn try_receive(
    inner: &Inner,
    queue: &QueueName,
    req: &ReceiveRequest,
) -> Result<Attempted, StoreError> {
    let mut core = inner.lock();
    let now = inner.now();
    let qid = core.qid(queue)?;
    core.expire(qid, now)?;
    let core = &mut *core;
    let q = core.state.queues.get_mut(&qid).expect("queue exists");
    q.release_rate_holds(now);
    q.release_flow_holds(now);
    let next_wake = [
        q.delayed.first().map(|e| e.0),
        q.leased.first().map(|e| e.0),
    ]
    .into_iter()
    .flatten()
    .min();
    if q.config.paused {
        return Ok(Attempted::Empty { next_wake: None });
    }
    let mut n = req.max as usize;
    if let Some(mif) = q.config.max_in_flight {
        n = n.min((mif as usize).saturating_sub(q.leased.len()));
    }
    if let Some(rl) = q.config.rate_limit {
        let avail = q.window.available(&rl, Timestamp(now)) as usize;
        if avail == 0 {
            let free = q
                .window
                .next_free(&rl, Timestamp(now))
                .map(|t| t.as_millis());
            return Ok(Attempted::Empty {
                next_wake: [next_wake, free].into_iter().flatten().min(),
            });
        }
        n = n.min(avail);
    }
    // A governed queue: the breaker and the adaptive rate say how many more may go now.
    let mut paced = None;
    if let Some((flow, cfg)) = q.govern(Timestamp(now)) {
        let (admit, events) = flow.admit(cfg, Timestamp(now));
        crate::flow::audit(&mut core.audit, q, &events);
        match admit {
            Admit::Shut { until } => {
                return Ok(Attempted::Empty {
                    next_wake: [next_wake, until.map(Timestamp::as_millis)]
                        .into_iter()
                        .flatten()
                        .min(),
                });
            }
            Admit::Probe { n: probes } => n = n.min(probes as usize),
            Admit::Paced { pace, .. } => {
                let avail = q.flow_pace.available(&pace, Timestamp(now)) as usize;
                if avail == 0 {
                    let free = q
                        .flow_pace
                        .next_free(&pace, Timestamp(now))
                        .map(|t| t.as_millis());
                    return Ok(Attempted::Empty {
                        next_wake: [next_wake, free].into_iter().flatten().min(),
                    });
                }
                n = n.min(avail);
                paced = Some(pace);
            }
            Admit::Free => {}
        }
    }
    let (ids, starved) = q.next_deliveries(n, now);
    for key in &starved {
        q.hold_for_rate(key, now);
        q.hold_for_flow(key, now);
    }
    let default_priority = q.config.default_priority;
    let governs_keys = q.governs_keys();
    if ids.is_empty() {
        return Ok(Attempted::Empty {
            next_wake: [
                next_wake,
                q.key_rates.next_release(),
                q.key_flows.next_release(),
            ]
            .into_iter()
            .flatten()
            .min(),
        });
    }
    let vis = req.visibility.unwrap_or(q.config.visibility_timeout);
    let max_receive_count = q.config.max_receive_count;
    // The rate window counts these leases when their record is applied (`state/rate_windows.rs`),
    // as replay does.
    if let Some(pace) = &paced {
        q.flow_pace.record(pace, Timestamp(now), ids.len());
    }
    if let Some((flow, cfg)) = q.govern(Timestamp(now)) {
        let leased = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        let events = flow.leased(cfg, leased, Timestamp(now));
        crate::flow::audit(&mut core.audit, q, &events);
    }
    let deadline = Timestamp(now).plus(vis).as_millis();
    // Tokens must never be handed out twice, crash or not: their reservation is the one
    // part of a receive that is waited for (once per `TOKEN_BLOCK` leases).
    let reservation = core.state.reserve_tokens(ids.len() as u64);
    let mut leases = Vec::with_capacity(ids.len());
    let mut out = Vec::with_capacity(ids.len());
    // The newest records the deliveries depend on (their send, the nack or move that made
    // them visible here): nobody is shown a change that a crash could still take back.
    let mut depends = 0;
    let mut per_key: std::collections::HashMap<crate::flow::Key, u32> = Default::default();
    for id in ids {
        let m = core.state.msgs[&id];
        if governs_keys {
            *per_key.entry(core.key_arc(&m, id)).or_insert(0) += 1;
        }
        depends = depends
            .max(core.log.position_of(m.body))
            .max(core.log.position_of(m.aux));
        let token = core.state.draw_token();
        let (rec, rich) = core.load(id, &m)?;
        let receive_count = m.receive_count() + 1;
        leases.push(Lease {
            id,
            receive_count,
            token,
            deadline,
        });
        out.push(Delivery {
            trace: rec.trace,
            id: MessageId(id),
            receipt: Receipt {
                id: MessageId(id),
                token,
            },
            body: rec.body,
            attributes: rec.attributes,
            receive_count,
            max_receive_count,
            enqueued_at: Timestamp(rec.enqueued_at),
            last_error: rich.last_error,
            lease_deadline: Timestamp(deadline),
            group: if m.grouped() {
                core.state.group_of(id)
            } else {
                None
            },
            key: core.state.key_of(&m, id),
            priority: core.state.priority_of(&m, id, default_priority),
        });
    }
    if governs_keys {
        let q = core.state.queues.get_mut(&qid).expect("queue exists");
        let events = q.key_flows_leased(&per_key, now);
        crate::flow::audit_keys(&mut core.audit, q, events, now);
    }
    let reserved = reservation.is_some();
    let mut records: Vec<Record> = reservation.into_iter().collect();
    records.push(Record::Leased {
        at: now,
        consumer: req.consumer.clone(),
        leases,
    });
    let pos = core.commit(records)?;
    // The lease itself is not waited for: it becomes durable with the next group commit
    // (at the latest with this consumer's ack, which comes after it in the log), and a
    // lease lost in a crash only makes the message visible again early. See "Which
    // writes wait" in docs/architecture.md.
    let wait = if reserved { pos } else { depends };
    Ok(Attempted::Got(out, (wait > 0).then_some((wait, reserved))))
}

/// What wakes receivers waiting on `queue`.
fn notifier(inner: &Inner, queue: &QueueName) -> Result<Arc<Notify>, StoreError> {
    let core = inner.lock();
    let qid = core.qid(queue)?;
    Ok(core.state.queues[&qid].notify.clone())
}
