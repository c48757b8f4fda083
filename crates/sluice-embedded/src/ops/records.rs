//! What the broker keeps beside messages: stats history points, the audit log and
//! idempotency responses.

use std::collections::BTreeMap;

use sluice_core::store::{IDEMPOTENCY_TTL, IdempotentResponse};
use sluice_core::{QueueName, StoreError, Timestamp};

use crate::core::{Core, Inner};
use crate::journal::record::{Qid, Record};

/// Keeps stats history points (one record per sample time); points not newer than a queue's
/// last are skipped.
pub(crate) async fn record_stats(
    inner: &Inner,
    samples: Vec<(QueueName, sluice_core::stats::StatsSample)>,
) -> Result<(), StoreError> {
    let pos = {
        let mut core = inner.lock();
        let mut by_time: BTreeMap<i64, Vec<(Qid, sluice_core::stats::StatsSample)>> =
            BTreeMap::new();
        for (name, sample) in samples {
            let Some(qid) = core.state.names.get(&name).copied() else {
                continue;
            };
            let q = &core.state.queues[&qid];
            if q.history
                .back()
                .is_some_and(|last| !sample.worth_storing_after(last))
            {
                continue;
            }
            by_time
                .entry(sample.at.as_millis())
                .or_default()
                .push((qid, sample));
        }
        let records: Vec<Record> = by_time
            .into_iter()
            .map(|(at, entries)| Record::Samples { at, entries })
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        core.commit(records)?
    };
    inner.answerable(pos).await
}

/// A queue's history points since `since`, oldest first, after the latest one before it.
pub(crate) fn stats_history(
    inner: &Inner,
    queue: &QueueName,
    since: Timestamp,
) -> Result<Vec<sluice_core::stats::StatsSample>, StoreError> {
    let core = inner.lock();
    let qid = core.qid(queue)?;
    let history = &core.state.queues[&qid].history;
    // From the latest point before `since`: it holds the numbers at `since`.
    let from = history.partition_point(|s| s.at < since).saturating_sub(1);
    Ok(history.range(from..).copied().collect())
}

/// Writes operator audit events, synced before the answer.
pub(crate) fn audit_append(
    inner: &Inner,
    events: Vec<sluice_core::AuditEvent>,
) -> Result<(), StoreError> {
    inner.lock().audit.append(&events, true)
}

/// Audit events matching the query.
pub(crate) fn audit_query(
    inner: &Inner,
    query: sluice_core::AuditQuery,
) -> Result<Vec<sluice_core::AuditEvent>, StoreError> {
    // Unsynced broker events are in the file already; reading sees them.
    inner.lock().audit.query(&query)
}

/// The response kept under an idempotency key, if any.
pub(crate) fn idempotency_get(
    inner: &Inner,
    key: &str,
) -> Result<Option<IdempotentResponse>, StoreError> {
    let mut core = inner.lock();
    core.state.prune_idempotent(inner.now());
    remembered(&core, key)
}

/// Keeps a response under an idempotency key unless one is kept already (returned then).
pub(crate) async fn idempotency_put(
    inner: &Inner,
    key: &str,
    response: IdempotentResponse,
) -> Result<Option<IdempotentResponse>, StoreError> {
    let pos = {
        let mut core = inner.lock();
        let now = inner.now();
        core.state.prune_idempotent(now);
        if let Some(kept) = remembered(&core, key)? {
            return Ok(Some(kept));
        }
        let until = Timestamp(now).plus(IDEMPOTENCY_TTL).as_millis();
        core.commit(vec![Record::Idempotent {
            key: key.to_string(),
            until,
            response,
        }])?
    };
    inner.answerable(pos).await?;
    Ok(None)
}

/// The response kept under an idempotency key, read back from the log.
fn remembered(core: &Core, key: &str) -> Result<Option<IdempotentResponse>, StoreError> {
    let Some(r) = core.state.idem.get(key) else {
        return Ok(None);
    };
    match core.log.read(r.loc)? {
        Record::Idempotent { response, .. } => Ok(Some(response)),
        _ => Err(StoreError::unavailable(
            "log record is not an idempotency response (index out of step)",
        )),
    }
}
