//! `stats`: a queue's gauges and counters, from memory.

use std::time::Duration;

use sluice_core::{QueueName, QueueStats, StoreError, Timestamp};

use crate::core::Inner;

/// A queue's gauges and counters, brought up to now (its dead-letter queue too).
pub(crate) fn stats(inner: &Inner, queue: &QueueName) -> Result<QueueStats, StoreError> {
    let mut core = inner.lock();
    let now = inner.now();
    let qid = core.qid(queue)?;
    core.expire(qid, now)?;
    let dlq = core.state.queues[&qid]
        .config
        .dead_letter_queue
        .as_ref()
        .and_then(|d| core.state.names.get(d).copied());
    let dead_letter_depth = match dlq {
        Some(d) => {
            core.expire_with_sources(d, now)?;
            core.state.queues[&d].depth()
        }
        None => 0,
    };
    let q = &core.state.queues[&qid];
    Ok(QueueStats {
        visible: q.visible(),
        delayed: q.delayed.len() as u64,
        in_flight: q.leased.len() as u64,
        dead_letter_depth,
        oldest_visible_age: q
            .oldest_visible()
            .map_or(Duration::ZERO, |at| Timestamp(now).since(Timestamp(at))),
        completed: q.completed,
        totals: q.totals,
    })
}
