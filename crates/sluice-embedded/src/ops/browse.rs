//! Looking at messages: `browse` a queue page by page, `get_message` (live or completed),
//! `delete_message`.

use sluice_core::store::BrowseCursor;
use sluice_core::{
    BrowsePage, BrowseRequest, BrowseState, Message, MessageId, MessageState, QueueName,
    StoreError, Timestamp,
};

use crate::core::{Inner, stored_completion};
use crate::journal::record::{Record, RemoveReason};

/// A page of a queue's messages in one state or all, after a cursor.
pub(crate) fn browse(
    inner: &Inner,
    queue: &QueueName,
    req: BrowseRequest,
) -> Result<BrowsePage, StoreError> {
    let after = match &req.cursor {
        None => None,
        Some(c) => {
            let c: BrowseCursor = c.parse()?;
            Some((c.part, c.at, c.id))
        }
    };
    let mut core = inner.lock();
    let now = inner.now();
    let qid = core.qid(queue)?;
    core.expire_with_sources(qid, now)?;
    let q = &core.state.queues[&qid];
    // Keys are (part, time, id): "all" walks in-flight, then visible, then delayed. Visible
    // messages are those deliverable and those parked behind the front of their FIFO group,
    // two indexes walked as one, in time order.
    type Index = std::collections::BTreeSet<(i64, u64)>;
    let (leased, visible, delayed): ([&Index; 1], [&Index; 2], [&Index; 1]) =
        ([&q.leased], [&q.ready, &q.parked], [&q.delayed]);
    let parts: Vec<(u8, &[&Index])> = match req.state {
        BrowseState::Visible => vec![(1, &visible)],
        BrowseState::Delayed => vec![(2, &delayed)],
        BrowseState::InFlight => vec![(0, &leased)],
        BrowseState::All => vec![(0, &leased), (1, &visible), (2, &delayed)],
    };
    let mut keys: Vec<(u8, i64, u64)> = Vec::new();
    for (tag, indexes) in parts {
        let start = match after {
            Some((t, at, id)) if t == tag => Some((at, id)),
            Some((t, _, _)) if t > tag => continue,
            _ => None,
        };
        let want = req.limit as usize + 1 - keys.len();
        let mut found: Vec<(i64, u64)> = Vec::new();
        for index in indexes {
            let range = match start {
                Some(k) => index.range((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded)),
                None => index.range(..),
            };
            found.extend(range.take(want).copied());
        }
        if indexes.len() > 1 {
            found.sort_unstable();
            found.truncate(want);
        }
        keys.extend(found.into_iter().map(|(at, id)| (tag, at, id)));
        if keys.len() > req.limit as usize {
            break;
        }
    }
    let more = keys.len() > req.limit as usize;
    let mut messages = Vec::with_capacity(keys.len());
    for (_, _, id) in keys.iter().take(req.limit as usize) {
        let m = core.state.msgs[id];
        messages.push(core.message_view(*id, &m)?);
    }
    let next_cursor = if more {
        keys.get(req.limit as usize - 1).map(|(part, at, id)| {
            BrowseCursor {
                part: *part,
                at: *at,
                id: *id,
            }
            .to_string()
        })
    } else {
        None
    };
    Ok(BrowsePage {
        messages,
        next_cursor,
    })
}

/// A live message, or a completed one still kept (with its result).
pub(crate) fn get_message(inner: &Inner, id: MessageId) -> Result<Message, StoreError> {
    let mut core = inner.lock();
    let now = inner.now();
    if let Some(m) = core.state.msgs.get(&id.0).copied() {
        core.expire(m.qid, now)?;
        if let Some(m) = core.state.msgs.get(&id.0).copied() {
            return core.message_view(id.0, &m);
        }
    }
    core.state.prune_done(now);
    let Some(d) = core.state.done.get(&id.0).copied() else {
        return Err(StoreError::MessageNotFound(id));
    };
    let kept = if d.has_result || d.has_attempts || d.held {
        stored_completion(core.log.read(d.loc)?, id.0)
    } else {
        Default::default()
    };
    Ok(Message {
        // A completed record keeps no body, attributes or trace context.
        trace: None,
        id,
        queue: core.state.queues[&d.qid].name.clone(),
        state: MessageState::Completed,
        body: None,
        attributes: Default::default(),
        enqueued_at: Timestamp(d.enqueued_at),
        entered_at: Timestamp(d.entered_at),
        visible_at: None,
        receive_count: d.receive_count,
        last_error: kept.last_error,
        attempts: sluice_core::lifecycle::completed_history(
            kept.attempts,
            Timestamp(d.at),
            d.cancelled,
            kept.holder.as_ref(),
        ),
        dedup_id: None,
        source_queue: None,
        dead_letter: None,
        result: kept.result,
        completed_at: Some(Timestamp(d.at)),
        cancelled: d.cancelled,
        progress: None,
        group: None,
        key: None,
        priority: None,
    })
}

/// Deletes a message, live or completed.
pub(crate) async fn delete_message(inner: &Inner, id: MessageId) -> Result<(), StoreError> {
    let pos = {
        let mut core = inner.lock();
        let now = inner.now();
        if !core.state.msgs.contains_key(&id.0) && !core.state.done.contains_key(&id.0) {
            return Err(StoreError::MessageNotFound(id));
        }
        core.commit(vec![Record::Remove {
            ids: vec![id.0],
            reason: RemoveReason::Deleted,
            at: now,
        }])?
    };
    inner.answerable(pos).await
}
