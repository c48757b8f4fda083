//! The background maintenance task: every interval (500 ms by default) it runs expiry in
//! every queue, moves governed queues' breakers on in time and keeps their learned state,
//! syncs the audit log, and compacts the log.

use std::sync::Weak;
use std::time::Duration;

use sluice_core::StoreError;

use crate::core::{ATTRIBUTE_CHUNK, Inner};

/// One round of maintenance: expiry in every queue, an audit sync, the attributes replayed
/// dead letters still miss, then compaction (with `wait`, after any compaction running).
pub(crate) async fn round(inner: &Inner, wait: bool) -> Result<(), StoreError> {
    {
        let mut core = inner.lock();
        let now = inner.now();
        core.expire_all(now)?;
        // A catalog that cannot be written must not stop the audit sync and compaction: the
        // learned state stays marked and the next round tries again.
        if let Err(e) = core.flow_round(now) {
            tracing::warn!(error = %e, "could not keep the state of governed queues in the queue catalog; retrying next round");
        }
        core.audit.append(&[], true)?;
    }
    // After a restart, the dead letters replayed from update records learn their attributes
    // a chunk per hold of the lock.
    loop {
        {
            let mut core = inner.lock();
            if core.state.summary.fresh_mark() == 0 {
                break;
            }
            core.learn_attributes(None, ATTRIBUTE_CHUNK);
        }
        tokio::task::yield_now().await;
    }
    crate::journal::compaction::compact(inner, wait).await
}

/// Runs a round every `every` until the store is dropped.
pub(crate) async fn run(inner: Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = round(&inner, false).await {
            tracing::warn!(error = %e, "background maintenance failed; retrying");
        }
    }
}
