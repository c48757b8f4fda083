//! `stats`: a queue's gauges and counters, from memory.

use std::time::Duration;

use sluice_core::adaptive::{FlowState, FlowStats};
use sluice_core::{QueueName, QueueStats, StoreError, Timestamp};

use crate::core::{Core, Inner};
use crate::journal::record::Qid;
use crate::state::flow_config;

/// A queue's gauges and counters, brought up to now (its dead-letter queue too).
pub(crate) fn stats(inner: &Inner, queue: &QueueName) -> Result<QueueStats, StoreError> {
    let mut core = inner.lock();
    let now = inner.now();
    let qid = core.qid(queue)?;
    core.expire(qid, now)?;
    if let Some(d) = dead_letter_queue(&core, qid) {
        core.expire_with_sources(d, now)?;
    }
    Ok(snapshot(&core, qid, now))
}

/// Several queues' gauges and counters under one lock: each queue asked is brought up to now,
/// and its dead-letter queue's depth read as it stands (the queue-by-queue [`stats`] also
/// expires every other source of that DLQ, a pass over every queue).
pub(crate) fn stats_many(
    inner: &Inner,
    queues: &[QueueName],
) -> Result<Vec<Option<QueueStats>>, StoreError> {
    let mut core = inner.lock();
    let now = inner.now();
    let mut out = Vec::with_capacity(queues.len());
    for name in queues {
        let Some(qid) = core.state.names.get(name).copied() else {
            out.push(None);
            continue;
        };
        core.expire(qid, now)?;
        out.push(Some(snapshot(&core, qid, now)));
    }
    Ok(out)
}

fn dead_letter_queue(core: &Core, qid: Qid) -> Option<Qid> {
    let dlq = core.state.queues[&qid].config.dead_letter_queue.as_ref()?;
    core.state.names.get(dlq).copied()
}

/// The numbers of queue `qid` as they stand.
fn snapshot(core: &Core, qid: Qid, now: i64) -> QueueStats {
    let q = &core.state.queues[&qid];
    QueueStats {
        visible: q.visible(),
        delayed: q.delayed.len() as u64,
        in_flight: q.leased.len() as u64,
        dead_letter_depth: dead_letter_queue(core, qid)
            .map_or(0, |d| core.state.queues[&d].depth()),
        oldest_visible_age: q
            .oldest_visible()
            .map_or(Duration::ZERO, |at| Timestamp(now).since(Timestamp(at))),
        completed: q.completed,
        totals: q.totals,
        flow: flow_stats(q, Timestamp(now)),
        active_keys: q.key_counts.active(),
        key_flows: q.key_flow_summary(now),
    }
}

/// The adaptive rate and breaker of a governed queue as they stand: a queue governed but not
/// yet used shows the state it would start from.
fn flow_stats(q: &crate::state::QueueState, now: Timestamp) -> Option<FlowStats> {
    let cfg = flow_config(&q.config);
    match &q.flow {
        Some(f) if cfg.is_governed() => Some(f.stats(cfg, now)),
        _ => FlowState::new(cfg, now).map(|f| f.stats(cfg, now)),
    }
}
