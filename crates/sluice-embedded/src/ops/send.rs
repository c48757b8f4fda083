//! `send`: dedup, depth limit and one message record per new message (with its FIFO group,
//! if it has one), in one commit.

use std::time::Duration;

use sluice_core::store::validate_bodies_fit;
use sluice_core::{MessageId, NewMessage, QueueName, SendOutcome, StoreError, Timestamp};

use crate::core::Inner;
use crate::journal::record::{GroupTag, MessageRecord, Origin, Record, Rich};

/// Sends a batch: duplicates (by dedup id, within the window or the batch) are answered
/// with the first id.
pub(crate) async fn send(
    inner: &Inner,
    queue: &QueueName,
    mut messages: Vec<NewMessage>,
) -> Result<Vec<SendOutcome>, StoreError> {
    let (out, pos, notify) = {
        let mut core = inner.lock();
        let now = inner.now();
        let qid = core.qid(queue)?;
        core.log.admit_growth()?;
        core.expire(qid, now)?;
        let cfg = core.state.queues[&qid].config.clone();
        validate_bodies_fit(&cfg, queue, &messages)?;
        cfg.fill_content_dedup(&mut messages);
        let mut out = Vec::with_capacity(messages.len());
        let mut records = Vec::with_capacity(messages.len());
        // Dedup ids seen earlier in this batch count as already sent.
        let mut batch_dedup: std::collections::HashMap<&str, u64> = Default::default();
        let dedup_on = !cfg.dedup_window.is_zero();
        let dedup_until = now + cfg.dedup_window.as_millis() as i64;
        for m in &messages {
            let key = m.dedup_id.as_deref().filter(|_| dedup_on);
            if let Some(key) = key {
                let hit = core.state.queues[&qid]
                    .dedup_hit(key, now)
                    .or_else(|| batch_dedup.get(key).copied());
                if let Some(id) = hit {
                    out.push(SendOutcome {
                        id: MessageId(id),
                        duplicate: true,
                    });
                    continue;
                }
            }
            let id = core.state.draw_id(Timestamp(now));
            if let Some(key) = key {
                batch_dedup.insert(key, id);
            }
            out.push(SendOutcome {
                id: MessageId(id),
                duplicate: false,
            });
            let visible_at = Timestamp(now)
                .plus(m.delay.unwrap_or(cfg.delay))
                .as_millis();
            let message = MessageRecord {
                origin: Origin::Send,
                id,
                qid,
                body: m.body.clone(),
                attributes: m.attributes.clone(),
                enqueued_at: now,
                entered_at: now,
                visible_at,
                receive_count: 0,
                lease: None,
                rich: Rich::default(),
                // The message keeps the id it was sent with; without a window it dedups
                // nothing (replay registers no entry whose window ends at its send).
                dedup: m.dedup_id.as_ref().map(|k| (k.to_string(), dedup_until)),
                trace: m.trace.clone(),
            };
            // A grouped message's place in its group's line is its id: send order.
            let group = m.group.as_ref().map(|g| GroupTag {
                name: g.as_str().to_string(),
                order: id,
            });
            records.push(Record::base(
                message,
                group,
                m.key.as_ref().map(|k| k.as_str()),
                m.priority,
            ));
        }
        // A send that stores nothing (its messages all duplicates) is answered as such, even
        // by a queue over its max_depth (lowered below its depth).
        if let Some(max) = cfg.max_depth
            && !records.is_empty()
            && core.state.queues[&qid].depth() + records.len() as u64 > max
        {
            return Err(StoreError::QueueFull {
                queue: queue.to_string(),
                max_depth: max,
                retry_after: Duration::from_secs(1),
            });
        }
        let pos = if records.is_empty() {
            None
        } else {
            Some(core.commit(records)?)
        };
        core.state.promote(qid, now);
        (out, pos, core.state.queues[&qid].notify.clone())
    };
    notify.notify_waiters();
    if let Some(pos) = pos {
        inner.answerable(pos).await?;
    }
    Ok(out)
}
