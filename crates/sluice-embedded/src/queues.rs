//! Creating and updating queues: the catalogue write behind `put_queue` and
//! `create_queue`.

use sluice_core::{PutQueueOutcome, QueueConfig, QueueConfigPatch, QueueName, StoreError};

use crate::catalog::{self, CatalogQueue};
use crate::engine::Inner;

/// `put_queue`, or with `create_only` `create_queue`: the existence check and the write
/// happen under one lock, so of two creates of one name exactly one succeeds.
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
        warnings.push(format!(
                "max_receive_count is 0: messages of \"{name}\" are retried without limit and never dead-lettered by count"
            ));
    }
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
            });
            next_qid += 1;
            next_qid - 1
        }
    };
    let mut cat = core.catalog();
    cat.next_qid = next_qid;
    cat.queues.extend(new_queues.iter().cloned());
    if let Some(q) = cat.queues.iter_mut().find(|q| q.qid == qid) {
        q.config = config.clone();
    }
    catalog::store(&inner.dir, &cat)?;
    core.state.next_qid = next_qid;
    for q in &new_queues {
        core.state.add_queue(q);
    }
    let q = core.state.queues.get_mut(&qid).expect("just ensured");
    q.config = config;
    q.notify.notify_waiters();
    Ok(PutQueueOutcome {
        queue: core.info(qid),
        created: existing.is_none(),
        warnings,
    })
}
