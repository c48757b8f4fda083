//! What a transaction did besides its rows, written in it and acted on after its commit.

use std::collections::BTreeSet;

use sluice_core::{AuditEvent, StoreError};
use tokio_postgres::GenericClient;

use crate::db::counters::Counts;
use crate::store::Inner;

/// What a transaction did besides its rows: counters, audit entries, queues to wake.
#[derive(Default)]
pub(crate) struct Effects {
    /// Counter increments, written in the transaction.
    pub counts: Counts,
    /// Audit entries, written in the transaction.
    pub audit: Vec<AuditEvent>,
    /// Queues whose receives to wake once the transaction has committed.
    pub wake: BTreeSet<String>,
}

impl Effects {
    /// Writes counters and audit entries, in the transaction.
    pub(crate) async fn write(&self, c: &impl GenericClient) -> Result<(), StoreError> {
        self.counts.flush(c).await?;
        crate::ops::records::audit_insert(c, &self.audit).await
    }

    /// Wakes the waiters of every queue named, on every node, after the commit.
    pub(crate) fn wake(&self, inner: &Inner) {
        for q in &self.wake {
            inner.wake(q);
        }
    }
}
