//! What the broker keeps beside messages: stats history points, the audit log and
//! idempotency responses.

use std::collections::{BTreeMap, HashMap};

use sluice_core::store::{ClaimOutcome, IDEMPOTENCY_TTL, IdempotencyClaim, IdempotentResponse};
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
        let pos = core.commit(vec![Record::Idempotent {
            key: key.to_string(),
            until,
            response,
        }])?;
        // Answered: a pending claim on the key, whoever holds it, is over.
        core.claims.remove(key);
        pos
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

/// A pending claim on an idempotency key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim {
    fingerprint: [u8; 32],
    token: u64,
    /// When it runs out, in ms since the epoch.
    until: i64,
}

/// Pending claims by key. Kept in memory: the embedded engine serves one process, so every
/// request holding a claim ends with it, and a restart that forgot them loses nothing a
/// claim protects (as a claim released by a failed request).
#[derive(Debug, Default)]
pub(crate) struct Claims(HashMap<String, Claim>);

/// Claims past this many are swept of the ones that ran out (claims of requests that died
/// without releasing them; answered and released ones are removed at once).
const CLAIMS_SWEEP_AT: usize = 1024;

impl Claims {
    fn remove(&mut self, key: &str) -> Option<Claim> {
        self.0.remove(key)
    }
}

/// Claims an idempotency key for a request, under the state lock: its answer, another
/// request's live claim, or the key for `claim.token`.
pub(crate) fn idempotency_claim(
    inner: &Inner,
    key: &str,
    claim: IdempotencyClaim,
) -> Result<ClaimOutcome, StoreError> {
    let mut core = inner.lock();
    let now = inner.now();
    core.state.prune_idempotent(now);
    if let Some(kept) = remembered(&core, key)? {
        return Ok(ClaimOutcome::Answered(kept));
    }
    let claims = &mut core.claims.0;
    if claims.len() >= CLAIMS_SWEEP_AT {
        claims.retain(|_, c| c.until > now);
    }
    if let Some(held) = claims.get(key)
        && held.token != claim.token
        && held.until > now
    {
        return Ok(ClaimOutcome::Pending {
            fingerprint: held.fingerprint,
            until: Timestamp(held.until),
        });
    }
    let lease = i64::try_from(claim.lease.as_millis()).unwrap_or(i64::MAX);
    claims.insert(
        key.to_string(),
        Claim {
            fingerprint: claim.fingerprint,
            token: claim.token,
            until: now.saturating_add(lease),
        },
    );
    Ok(ClaimOutcome::Claimed)
}

/// Releases `token`'s claim on `key`, if it holds one.
pub(crate) fn idempotency_release(inner: &Inner, key: &str, token: u64) -> bool {
    let mut core = inner.lock();
    let now = inner.now();
    match core.claims.0.get(key) {
        Some(c) if c.token == token && c.until > now => {
            core.claims.remove(key);
            true
        }
        _ => false,
    }
}
