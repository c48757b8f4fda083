//! Queues: creating, updating, reading, listing, deleting and purging them. The catalog
//! change (one journal line) and the in-memory change happen under one lock.

use std::ops::Bound;

use sluice_core::fair::KeyLimits;
use sluice_core::{
    PutQueueOutcome, QueueConfig, QueueConfigPatch, QueueInfo, QueueName, QueuePage,
    QueuePageRequest, StoreError,
};

use crate::catalog::{CatalogQueue, Change};
use crate::core::{Core, Inner};
use crate::journal::record::Record;
use crate::state::flow_config;

/// `put_queue`, or with `create_only` `create_queue`: the existence check and the write
/// happen under one lock, so of two creates of one name exactly one succeeds.
///
/// Long because every part of a put (a new dead-letter queue, the queue itself, a governed queue's
/// learned state moved to its new bounds) goes into the one catalog line written under that lock,
/// then into memory.
pub(crate) fn put(
    inner: &Inner,
    name: &QueueName,
    patch: &QueueConfigPatch,
    create_only: bool,
) -> Result<PutQueueOutcome, StoreError> {
    let mut core = inner.lock();
    let now = inner.clock.now();
    let existing = core.state.names.get(name).copied();
    if create_only && existing.is_some() {
        return Err(StoreError::queue_exists(name.as_str()));
    }
    let current = match existing {
        Some(qid) => core.state.queues[&qid].config.clone(),
        None => QueueConfig::defaults_for(name),
    };
    let config = current.apply(name, patch)?;
    let mut warnings = Vec::new();
    if config.max_receive_count == 0 && existing.is_none_or(|_| patch.max_receive_count == Some(0))
    {
        warnings.push(sluice_core::lifecycle::unlimited_attempts_warning(
            name.as_str(),
        ));
    }
    warnings.extend(config.advice(name));
    let mut new_queues = Vec::new();
    let mut next_qid = core.state.next_qid;
    if let Some(dlq) = &config.dead_letter_queue
        && !core.state.names.contains_key(dlq)
    {
        new_queues.push(CatalogQueue {
            qid: next_qid,
            name: dlq.clone(),
            config: QueueConfig::dead_letter_defaults(dlq),
            created_at: now,
            flow: None,
            key_flows: Vec::new(),
        });
        next_qid += 1;
    }
    let qid = match existing {
        Some(qid) => qid,
        None => {
            new_queues.push(CatalogQueue {
                qid: next_qid,
                name: name.clone(),
                config: config.clone(),
                created_at: now,
                flow: None,
                key_flows: Vec::new(),
            });
            next_qid += 1;
            next_qid - 1
        }
    };
    // The learned state of a governed queue, moved into its new bounds (a new part starts
    // afresh, a part switched off is dropped), written with the configuration.
    let (flow, flow_events) = match existing.map(|qid| &core.state.queues[&qid]) {
        Some(q) => {
            let mut flow = q.flow.clone();
            let cfg = flow_config(&config);
            let events = match &mut flow {
                Some(f) if cfg.is_governed() => f.reconfigure(cfg, now),
                _ => Vec::new(),
            };
            (flow.filter(|_| cfg.is_governed()), events)
        }
        None => (None, Vec::new()),
    };
    let mut changed = new_queues.clone();
    match changed.iter_mut().find(|q| q.qid == qid) {
        Some(q) => q.config = config.clone(),
        None => changed.push(CatalogQueue {
            qid,
            name: name.clone(),
            config: config.clone(),
            created_at: core.state.queues[&qid].created_at,
            flow: flow.clone(),
            key_flows: core.state.queues[&qid].kept_key_flows(),
        }),
    }
    core.catalog.append(&Change::Put {
        queues: changed,
        next_qid,
    })?;
    core.state.next_qid = next_qid;
    for q in &new_queues {
        core.state.add_queue(q);
    }
    let core = &mut *core;
    let q = core.state.queues.get_mut(&qid).expect("just ensured");
    let regroup = q.config.max_in_flight_per_group != config.max_in_flight_per_group;
    let limited_anew = config.rate_limit.is_some() && q.config.rate_limit != config.rate_limit;
    let limits_changed = q.config.key_limits != config.key_limits;
    let relane = q.config.default_priority != config.default_priority
        || q.config.key_weights != config.key_weights
        || limits_changed;
    let key_rates_anew = limits_changed && config.key_limits.as_ref().is_some_and(KeyLimits::rates);
    let reflow_keys = q.config.adaptive != config.adaptive
        || q.config.breaker != config.breaker
        || q.config.rate_limit != config.rate_limit
        || limits_changed;
    q.config = config;
    if reflow_keys {
        q.reconfigure_key_flows(now.as_millis());
    }
    if limits_changed {
        q.recount_flight(&core.state.msgs, &core.state.tags);
        q.relimit_key_rates();
    }
    if relane {
        // Messages without a priority of their own move to the new default; keys weigh anew,
        // and those at their new limits wait.
        q.relane(&core.state.msgs, &core.state.tags);
    }
    q.flow = flow;
    crate::flow::audit(&mut core.audit, q, &flow_events);
    // Written with the configuration just now.
    q.flow_dirty = false;
    q.notify.notify_waiters();
    if regroup {
        // More (or fewer) members at the front of each FIFO group's line may be delivered.
        core.state.regroup_queue(qid);
    }
    if limited_anew {
        // Replay reads every lease under the queue's configuration of now: from here on
        // its window and pace are what it holds now, not what the leases made before it
        // was limited (or under another limit) would make of them.
        let pace = core.state.rate_pace(qid);
        core.commit(vec![Record::RatePaces(vec![pace])])?;
    }
    if key_rates_anew {
        // The same for the keys' windows: replay sets them to what they are now.
        let kept = core.state.key_paces(qid);
        core.commit(vec![Record::KeyPaces(vec![kept])])?;
    }
    snapshot_if_due(core);
    Ok(PutQueueOutcome {
        queue: core.info(qid),
        created: existing.is_none(),
        warnings,
    })
}

/// One queue.
pub(crate) fn get(inner: &Inner, name: &QueueName) -> Result<QueueInfo, StoreError> {
    let core = inner.lock();
    Ok(core.info(core.qid(name)?))
}

/// Every queue, by name.
pub(crate) fn list(inner: &Inner) -> Result<Vec<QueueInfo>, StoreError> {
    let core = inner.lock();
    Ok(core
        .state
        .names
        .values()
        .map(|qid| core.info(*qid))
        .collect())
}

/// One page of queues: a range of the name map, from the prefix or just after the cursor's
/// name (whichever comes later), read for at most `limit + 1` names.
pub(crate) fn page(inner: &Inner, req: &QueuePageRequest) -> Result<QueuePage, StoreError> {
    let range = req.range()?;
    let prefix = range.prefix.as_str();
    let start = match &range.after {
        Some(after) if after.as_str() >= prefix => Bound::Excluded(after.as_str()),
        _ => Bound::Included(prefix),
    };
    let core = inner.lock();
    let found = core
        .state
        .names
        .range::<str, _>((start, Bound::Unbounded))
        .take_while(|(name, _)| name.as_str().starts_with(prefix))
        .take(range.limit + 1)
        .map(|(_, qid)| core.info(*qid))
        .collect();
    Ok(range.page(found))
}

/// For each name, whether some queue dead-letters into it: one pass over the queues in
/// memory, without copying any configuration.
pub(crate) fn dead_letter_queues_among(inner: &Inner, names: &[QueueName]) -> Vec<bool> {
    let core = inner.lock();
    let asked: std::collections::HashSet<&str> = names.iter().map(QueueName::as_str).collect();
    let mut targets = std::collections::HashSet::new();
    for q in core.state.queues.values() {
        if let Some(d) = &q.config.dead_letter_queue
            && asked.contains(d.as_str())
        {
            targets.insert(d.as_str().to_owned());
        }
    }
    names.iter().map(|n| targets.contains(n.as_str())).collect()
}

/// Deletes a queue and its messages (refused while it is another queue's dead-letter
/// queue); returns how many messages it held.
pub(crate) fn delete(inner: &Inner, name: &QueueName) -> Result<u64, StoreError> {
    let mut core = inner.lock();
    let qid = core.qid(name)?;
    if let Some(user) = core
        .state
        .queues
        .values()
        .find(|q| q.name != *name && q.config.dead_letter_queue.as_ref() == Some(name))
    {
        return Err(StoreError::dead_letter_queue_in_use(
            name.as_str(),
            user.name.as_str(),
        ));
    }
    let held = core.state.queues[&qid].depth();
    core.catalog.append(&Change::Delete { qid })?;
    let notify = core.state.queues[&qid].notify.clone();
    core.state.drop_queue(qid);
    notify.notify_waiters();
    snapshot_if_due(&mut core);
    Ok(held)
}

/// Writes a new catalog snapshot once the journal has grown to the catalog's size. The change
/// before it is already durable in the journal, so a failure here only delays the snapshot.
pub(crate) fn snapshot_if_due(core: &mut Core) {
    if !core.catalog.wants_snapshot(core.state.queues.len()) {
        return;
    }
    let cat = core.catalog();
    if let Err(e) = core.catalog.snapshot(&cat) {
        tracing::warn!(error = %e, "could not write a queue catalog snapshot; the journal keeps every change and the next change tries again");
    }
}

/// Removes every message of a queue; returns how many there were.
pub(crate) async fn purge(inner: &Inner, queue: &QueueName) -> Result<u64, StoreError> {
    let (n, pos) = {
        let mut core = inner.lock();
        let qid = core.qid(queue)?;
        let n = core.state.queues[&qid].depth();
        (n, core.commit(vec![Record::Purge { qid }])?)
    };
    inner.answerable(pos).await?;
    Ok(n)
}
