//! `keys`: what each key of a queue holds, counted from its messages in memory.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::key_stats::{self, KeyStats, KeysPage, KeysRequest};
use sluice_core::{MessageKey, QueueName, StoreError, Timestamp};

use crate::core::Inner;
use crate::state::Slot;

/// One page of queue `queue`'s keys, brought up to now. Visits every message of the queue
/// under the lock: a few milliseconds per hundred thousand messages.
pub(crate) fn keys(
    inner: &Inner,
    queue: &QueueName,
    req: &KeysRequest,
) -> Result<KeysPage, StoreError> {
    let mut core = inner.lock();
    let now = inner.now();
    let qid = core.qid(queue)?;
    core.expire(qid, now)?;
    let state = &core.state;
    let q = &state.queues[&qid];
    let mut by_key: HashMap<Option<Arc<str>>, KeyStats> = HashMap::new();
    for id in q.ids() {
        let Some(m) = state.msgs.get(&id) else {
            continue;
        };
        let key = state.tag_of(m, id).and_then(|t| t.key.clone());
        let k = by_key.entry(key).or_insert_with_key(|key| KeyStats {
            key: key.as_deref().and_then(|k| MessageKey::new(k).ok()),
            visible: 0,
            delayed: 0,
            in_flight: 0,
            oldest_visible_at: None,
            delivered_1m: None,
            flow: None,
        });
        match m.slot() {
            Slot::Ready | Slot::Parked => {
                k.visible += 1;
                let at = Timestamp(m.at);
                k.oldest_visible_at = Some(k.oldest_visible_at.map_or(at, |o| o.min(at)));
            }
            Slot::Delayed => k.delayed += 1,
            Slot::Leased => k.in_flight += 1,
        }
    }
    let counts = &q.key_counts;
    // Deliveries without a key are counted only while the queue delivers by key, as on
    // PostgreSQL: on a queue that has not, in this minute or the last, they are not known.
    let named = by_key.keys().any(Option::is_some);
    let implicit = counts.implicit.last_minute(now) > 0 || named || q.lanes.is_some();
    let all = by_key
        .into_iter()
        .map(|(key, mut k)| {
            k.flow = q.key_flow_stats(&key, now);
            k.delivered_1m = match &key {
                None => implicit.then(|| counts.implicit.last_minute(now)),
                Some(name) => Some(counts.get(name).map_or(0, |e| e.delivered.last_minute(now))),
            };
            k
        })
        .collect();
    Ok(key_stats::page(all, req))
}
