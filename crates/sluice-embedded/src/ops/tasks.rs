//! Running tasks: `extend` a lease, report `progress` (kept in memory only), `cancel`.

use std::time::Duration;

use sluice_core::store::LeaseState;
use sluice_core::{Message, MessageId, Progress, QueueName, Receipt, StoreError, Timestamp};

use crate::core::Inner;
use crate::journal::record::Record;
use crate::state::Slot;

/// Moves a lease's deadline to `visibility` from now.
pub(crate) async fn extend(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    visibility: Duration,
) -> Result<LeaseState, StoreError> {
    inner
        .with_lease(queue, &receipt, |_, _, m, now| {
            let deadline = Timestamp(now).plus(visibility);
            Ok((
                vec![Record::Extend {
                    id: receipt.id.0,
                    token: receipt.token,
                    deadline: deadline.as_millis(),
                }],
                LeaseState {
                    deadline,
                    cancel_requested: m.cancel_requested(),
                },
            ))
        })
        .await
}

/// Records a running task's progress (in memory: advisory).
pub(crate) fn progress(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    mut progress: Progress,
) -> Result<LeaseState, StoreError> {
    let mut core = inner.lock();
    let now = inner.now();
    let qid = core.qid(queue)?;
    core.expire(qid, now)?;
    let m = core.leased(qid, &receipt)?;
    progress.at = Timestamp(now);
    core.state.progress.insert(receipt.id.0, progress);
    Ok(LeaseState {
        deadline: Timestamp(m.at),
        cancel_requested: m.cancel_requested(),
    })
}

/// Requests a task's cancellation: a leased task ends when its handler reports; a waiting
/// one ends now.
pub(crate) async fn cancel(inner: &Inner, id: MessageId) -> Result<Message, StoreError> {
    let pos = {
        let mut core = inner.lock();
        let now = inner.now();
        if let Some(m) = core.state.msgs.get(&id.0).copied() {
            core.expire(m.qid, now)?;
        }
        match core.state.msgs.get(&id.0).copied() {
            // A dead letter is a finished (failed) task: left as it is.
            Some(m) if core.load(id.0, &m)?.1.dead_letter.is_some() => None,
            Some(m) if m.slot() == Slot::Leased && m.cancel_requested() => None,
            Some(m) if m.slot() == Slot::Leased => {
                Some(core.commit(vec![Record::Cancel { id: id.0 }])?)
            }
            Some(m) => {
                let rec = core.end_cancelled(m.qid, id.0, &m, now)?;
                Some(core.commit(vec![rec])?)
            }
            None => None,
        }
    };
    if let Some(pos) = pos {
        inner.answerable(pos).await?;
    }
    super::browse::get_message(inner, id)
}
