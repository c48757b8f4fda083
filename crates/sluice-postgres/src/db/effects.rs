//! What a transaction did besides its rows, written in it and acted on after its commit.

use std::collections::{BTreeMap, BTreeSet};

use sluice_core::adaptive::Outcome;
use sluice_core::{AuditEvent, StoreError};
use tokio_postgres::GenericClient;

use crate::db::counters::Counts;
use crate::store::Inner;

/// What a transaction did besides its rows: counters, audit entries, queues to wake, and the
/// outcomes of governed queues' leases that it ended.
#[derive(Default)]
pub(crate) struct Effects {
    /// Counter increments, written in the transaction.
    pub counts: Counts,
    /// Audit entries, written in the transaction.
    pub audit: Vec<AuditEvent>,
    /// Queues whose receives to wake once the transaction has committed.
    pub wake: BTreeSet<String>,
    /// Outcomes of leases of governed queues that the transaction ended, handed to the
    /// node's tallies once it has committed (`crate::flow`).
    pub flow: BTreeMap<String, crate::flow::Counted>,
    /// The same per key, for queues that govern keys (queue → key → outcomes).
    pub key_flow: BTreeMap<String, std::collections::HashMap<String, crate::flow::Counted>>,
}

impl Effects {
    /// Writes counters and audit entries, in the transaction.
    pub(crate) async fn write(&self, c: &impl GenericClient) -> Result<(), StoreError> {
        self.counts.flush(c).await?;
        crate::ops::records::audit_insert(c, &self.audit).await
    }

    /// Counts `n` times `outcome`, at `now`, of leases of governed queue `queue`.
    pub(crate) fn outcome(&mut self, queue: &str, outcome: Outcome, n: u32, now: i64) {
        if n > 0 {
            self.flow
                .entry(queue.to_string())
                .or_default()
                .add(outcome, n, now);
        }
    }

    /// Counts `outcome` at `now` of a lease of `key` (`None`: the implicit key) of `queue`,
    /// when its configuration `cfg` governs keys.
    pub(crate) fn key_outcome(
        &mut self,
        cfg: &sluice_core::QueueConfig,
        queue: &str,
        key: Option<&str>,
        outcome: Outcome,
        now: i64,
    ) {
        if sluice_core::adaptive::governs_keys(cfg) {
            self.key_flow
                .entry(queue.to_string())
                .or_default()
                .entry(key.unwrap_or_default().to_owned())
                .or_default()
                .add(outcome, 1, now);
        }
    }

    /// After the commit: wakes the waiters of every queue named, on every node, and hands
    /// the outcomes counted to the node's tallies.
    pub(crate) fn after_commit(&self, inner: &Inner) {
        for q in &self.wake {
            inner.wake(q);
        }
        for (q, t) in &self.flow {
            inner.flow.add(q, t);
        }
        for (q, keys) in &self.key_flow {
            inner.flow.add_keys(q, keys);
        }
    }
}
