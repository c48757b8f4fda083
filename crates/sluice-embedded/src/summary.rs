//! The summary index: per queue, the keys of every message that has any (a last error, a
//! source queue or dead-letter information), and per key of each grouping (error, reason,
//! source) the count, earliest and latest time and smallest id, kept up to date as records
//! are applied — live and during replay, so recovery rebuilds it with the rest of the state.
//!
//! Messages without any of these keys (a plain send, the usual message of a working queue)
//! are not indexed: a send, receive or ack of such a message costs at most one look-up in a
//! map that is empty while no queue holds such messages. Those messages are the `null` group
//! of every grouping: their count is the queue's depth less the indexed ones, and their times
//! come from a walk of the queue's in-memory index when the queue has any (never the log).
//!
//! Counts are exact at all times. A group's earliest or latest time or smallest id can be left
//! behind by a removal (a redrive takes the oldest first); the group is then marked stale and
//! the grouping is recomputed from the queue's indexed entries, in memory, on the next
//! summary that asks for it. Filtered summaries walk the same entries. Only a filter on, or a
//! grouping by, an attribute reads the messages' records from the log, since attributes are
//! not kept in memory; it does so 4,096 messages per hold of the lock, so other calls go on
//! in between.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use sluice_core::message::{DeadLetterReason, MessageId};
use sluice_core::summary::{GroupBy, Summary, SummaryGroup, SummaryRequest};
use sluice_core::{QueueName, StoreError, Timestamp};

use crate::engine::{Core, Inner};
use crate::record::{Qid, Rich};

/// One indexed message: its keys and its time.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    error: Option<Arc<str>>,
    source: Option<Arc<str>>,
    reason: Option<DeadLetterReason>,
    /// When it was dead-lettered, else when it was first sent (ms).
    at: i64,
    /// When it was first sent (ms), carried over as it moves between queues.
    enqueued_at: i64,
}

/// A group's aggregate.
#[derive(Debug, Clone, Copy)]
struct Agg {
    count: u64,
    first: i64,
    last: i64,
    min_id: u64,
    /// A removal took its first, last or smallest id: those need a recount.
    stale: bool,
}

impl Agg {
    fn new(at: i64, id: u64) -> Self {
        Agg {
            count: 1,
            first: at,
            last: at,
            min_id: id,
            stale: false,
        }
    }

    fn add(&mut self, at: i64, id: u64) {
        self.count += 1;
        self.first = self.first.min(at);
        self.last = self.last.max(at);
        self.min_id = self.min_id.min(id);
    }
}

/// The groups of one grouping: by value, and the `null` group.
#[derive(Debug)]
struct Groups<K> {
    by_key: HashMap<K, Agg>,
    none: Option<Agg>,
}

impl<K> Default for Groups<K> {
    fn default() -> Self {
        Groups {
            by_key: HashMap::new(),
            none: None,
        }
    }
}

impl<K: Hash + Eq + Clone> Groups<K> {
    fn slot(&mut self, key: Option<&K>) -> Option<&mut Agg> {
        match key {
            Some(k) => self.by_key.get_mut(k),
            None => self.none.as_mut(),
        }
    }

    fn add(&mut self, key: Option<&K>, at: i64, id: u64) {
        if let Some(a) = self.slot(key) {
            a.add(at, id);
            return;
        }
        match key {
            Some(k) => {
                self.by_key.insert(k.clone(), Agg::new(at, id));
            }
            None => self.none = Some(Agg::new(at, id)),
        }
    }

    fn remove(&mut self, key: Option<&K>, at: i64, id: u64) {
        let Some(a) = self.slot(key) else { return };
        a.count -= 1;
        if a.count == 0 {
            match key {
                Some(k) => {
                    self.by_key.remove(k);
                }
                None => self.none = None,
            }
        } else if at == a.first || at == a.last || id == a.min_id {
            a.stale = true;
        }
    }

    fn stale(&self) -> bool {
        self.none.is_some_and(|a| a.stale) || self.by_key.values().any(|a| a.stale)
    }

    fn clear(&mut self) {
        self.by_key.clear();
        self.none = None;
    }
}

/// One queue's indexed messages and their groups.
#[derive(Debug, Default)]
struct QueueIndex {
    entries: HashMap<u64, Entry>,
    errors: Groups<Arc<str>>,
    reasons: Groups<DeadLetterReason>,
    sources: Groups<Arc<str>>,
}

impl QueueIndex {
    /// The shared copy of `s` when some message of this queue already has it.
    fn intern(groups: &Groups<Arc<str>>, s: &str) -> Arc<str> {
        groups
            .by_key
            .get_key_value(s)
            .map_or_else(|| Arc::from(s), |(k, _)| k.clone())
    }

    fn insert(&mut self, id: u64, rich: &Rich, enqueued_at: i64) {
        let error = rich
            .last_error
            .as_deref()
            .map(|e| Self::intern(&self.errors, e));
        let source = rich
            .source_queue
            .as_deref()
            .map(|s| Self::intern(&self.sources, s));
        let e = Entry {
            error,
            source,
            reason: rich.dead_letter.as_ref().map(|d| d.reason),
            at: rich
                .dead_letter
                .as_ref()
                .map_or(enqueued_at, |d| d.at.as_millis()),
            enqueued_at,
        };
        self.errors.add(e.error.as_ref(), e.at, id);
        self.reasons.add(e.reason.as_ref(), e.at, id);
        self.sources.add(e.source.as_ref(), e.at, id);
        self.entries.insert(id, e);
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.entries.remove(&id)?;
        self.errors.remove(e.error.as_ref(), e.at, id);
        self.reasons.remove(e.reason.as_ref(), e.at, id);
        self.sources.remove(e.source.as_ref(), e.at, id);
        Some(e)
    }

    /// Recounts a grouping's aggregates from the entries.
    fn recount(&mut self, by: &GroupBy) {
        match by {
            GroupBy::Error => {
                self.errors.clear();
                for (id, e) in &self.entries {
                    self.errors.add(e.error.as_ref(), e.at, *id);
                }
            }
            GroupBy::Reason => {
                self.reasons.clear();
                for (id, e) in &self.entries {
                    self.reasons.add(e.reason.as_ref(), e.at, *id);
                }
            }
            GroupBy::Source => {
                self.sources.clear();
                for (id, e) in &self.entries {
                    self.sources.add(e.source.as_ref(), e.at, *id);
                }
            }
            GroupBy::Attribute(_) => {}
        }
    }
}

/// The summary index of every queue.
#[derive(Debug, Default)]
pub(crate) struct SummaryIndex {
    queues: HashMap<Qid, QueueIndex>,
}

fn indexed(rich: &Rich) -> bool {
    rich.last_error.is_some() || rich.source_queue.is_some() || rich.dead_letter.is_some()
}

impl SummaryIndex {
    /// A full message record (a send, or compaction's copy) was applied to queue `qid`.
    pub fn on_message(&mut self, qid: Qid, id: u64, rich: &Rich, enqueued_at: i64) {
        if indexed(rich) {
            self.queues
                .entry(qid)
                .or_default()
                .insert(id, rich, enqueued_at);
        }
    }

    /// An update moved message `id` from queue `from` (where it entered at `entered_at`) to
    /// queue `to` (possibly the same) with these rich fields.
    pub fn on_update(&mut self, from: Qid, to: Qid, id: u64, rich: &Rich, entered_at: i64) {
        // A message never indexed has never left the queue it was sent to (a move or
        // dead-lettering sets its source queue), so it entered that queue when it was sent.
        let enqueued_at = self.remove(from, id).map_or(entered_at, |e| e.enqueued_at);
        self.on_message(to, id, rich, enqueued_at);
    }

    /// Message `id` left queue `qid` (acknowledged, deleted, purged, expired).
    pub fn remove(&mut self, qid: Qid, id: u64) -> Option<Entry> {
        if self.queues.is_empty() {
            return None;
        }
        let q = self.queues.get_mut(&qid)?;
        let e = q.remove(id);
        if q.entries.is_empty() {
            self.queues.remove(&qid);
        }
        e
    }

    /// Queue `qid` is gone.
    pub fn drop_queue(&mut self, qid: Qid) {
        self.queues.remove(&qid);
    }

    /// Messages of queue `qid` in the index.
    pub fn len(&self, qid: Qid) -> usize {
        self.queues.get(&qid).map_or(0, |q| q.entries.len())
    }

    fn is_indexed(&self, qid: Qid, id: u64) -> bool {
        self.queues
            .get(&qid)
            .is_some_and(|q| q.entries.contains_key(&id))
    }
}

/// A key while grouping: shared text, or the text of a reason.
type Key = Option<Arc<str>>;

fn reason_key(r: Option<DeadLetterReason>) -> Key {
    r.map(|r| Arc::from(r.as_str()))
}

/// Messages whose attributes are read under one hold of the lock: reading them from the log
/// takes a few microseconds each, so a summary by attribute of a large queue lets other
/// calls in between chunks instead of stalling the broker for its whole length.
const ATTRIBUTE_CHUNK: usize = 4096;

fn needs_attributes(req: &SummaryRequest) -> bool {
    matches!(req.group_by, GroupBy::Attribute(_)) || !req.filter.attributes.is_empty()
}

/// Answers a summary of `queue`.
pub(crate) async fn answer(
    inner: &Inner,
    queue: &QueueName,
    req: &SummaryRequest,
) -> Result<Summary, StoreError> {
    let candidates = {
        let mut core = inner.lock();
        let now = inner.clock.now().as_millis();
        let qid = core.qid(queue)?;
        core.maintain_with_sources(qid, now)?;
        if !needs_attributes(req) {
            return Ok(summarize(&mut core, qid, req));
        }
        candidates(&core, qid, req)
    };
    // Attributes live in the log: read them a chunk at a time. A message that left the
    // queue meanwhile is not counted.
    let mut groups: HashMap<Key, Agg> = HashMap::new();
    for chunk in candidates.chunks(ATTRIBUTE_CHUNK) {
        {
            let core = inner.lock();
            for (id, at, key) in chunk {
                let Some(attrs) = attributes(&core, *id)? else {
                    continue;
                };
                if !req
                    .filter
                    .attributes
                    .iter()
                    .all(|(k, v)| attrs.get(k) == Some(v))
                {
                    continue;
                }
                let key = match &req.group_by {
                    GroupBy::Attribute(name) => attrs.get(name).map(|v| Arc::from(v.as_str())),
                    _ => key.clone(),
                };
                add(&mut groups, key, *at, *id);
            }
        }
        tokio::task::yield_now().await;
    }
    Ok(finish(
        groups.iter().map(|(k, a)| (k.as_deref(), *a)).collect(),
        req.limit,
    ))
}

fn add(groups: &mut HashMap<Key, Agg>, key: Key, at: i64, id: u64) {
    match groups.get_mut(&key) {
        Some(a) => a.add(at, id),
        None => {
            groups.insert(key, Agg::new(at, id));
        }
    }
}

/// A summary that needs no attributes, answered under the lock (queue brought up to date).
fn summarize(core: &mut Core, qid: Qid, req: &SummaryRequest) -> Summary {
    if req.filter == sluice_core::RedriveFilter::default() {
        let plain = plain_count(core, qid);
        return from_aggregates(core, qid, req, plain);
    }
    let mut groups: HashMap<Key, Agg> = HashMap::new();
    for (id, at, key) in candidates(core, qid, req) {
        add(&mut groups, key, at, id);
    }
    finish(
        groups.iter().map(|(k, a)| (k.as_deref(), *a)).collect(),
        req.limit,
    )
}

/// The messages passing the filter's error and time conditions, each with its time and its
/// key under the request's grouping (`None` for an attribute grouping, decided later).
fn candidates(core: &Core, qid: Qid, req: &SummaryRequest) -> Vec<(u64, i64, Key)> {
    let f = &req.filter;
    let time_ok = |dead_lettered: Option<i64>| {
        f.dead_lettered_before
            .is_none_or(|b| dead_lettered.is_some_and(|t| t < b.as_millis()))
            && f.dead_lettered_after
                .is_none_or(|a| dead_lettered.is_some_and(|t| t >= a.as_millis()))
    };
    let mut out = Vec::new();
    if let Some(q) = core.state.summary.queues.get(&qid) {
        for (&id, e) in &q.entries {
            if let Some(needle) = &f.error_contains
                && !e
                    .error
                    .as_deref()
                    .is_some_and(|t| t.contains(needle.as_str()))
            {
                continue;
            }
            if !time_ok(e.reason.map(|_| e.at)) {
                continue;
            }
            out.push((id, e.at, entry_key(&req.group_by, e)));
        }
    }
    // Plain messages: no error, no dead-letter time, no source.
    if plain_count(core, qid) > 0 && f.error_contains.is_none() && time_ok(None) {
        out.extend(
            plain_messages(core, qid)
                .into_iter()
                .map(|(id, at)| (id, at, None)),
        );
    }
    out
}

fn entry_key(by: &GroupBy, e: &Entry) -> Key {
    match by {
        GroupBy::Error => e.error.clone(),
        GroupBy::Reason => reason_key(e.reason),
        GroupBy::Source => e.source.clone(),
        GroupBy::Attribute(_) => None,
    }
}

/// The attributes of live message `id`, read from its record (`None` if it is gone).
fn attributes(core: &Core, id: u64) -> Result<Option<sluice_core::Attributes>, StoreError> {
    let Some(m) = core.state.msgs.get(&id).copied() else {
        return Ok(None);
    };
    Ok(Some(core.load(id, &m)?.0.attributes))
}

/// Messages of the queue that are not indexed.
fn plain_count(core: &Core, qid: Qid) -> u64 {
    let depth = core.state.queues.get(&qid).map_or(0, |q| q.depth());
    depth.saturating_sub(core.state.summary.len(qid) as u64)
}

/// The plain messages of the queue with the time each entered it (for them, when sent).
fn plain_messages(core: &Core, qid: Qid) -> Vec<(u64, i64)> {
    let Some(q) = core.state.queues.get(&qid) else {
        return Vec::new();
    };
    q.ids()
        .filter(|id| !core.state.summary.is_indexed(qid, *id))
        .filter_map(|id| core.state.msgs.get(&id).map(|m| (id, m.entered_at)))
        .collect()
}

/// An unfiltered summary by error, reason or source, from the maintained aggregates.
fn from_aggregates(core: &mut Core, qid: Qid, req: &SummaryRequest, plain: u64) -> Summary {
    let plain_agg = if plain > 0 {
        let mut a: Option<Agg> = None;
        for (id, at) in plain_messages(core, qid) {
            match a.as_mut() {
                Some(a) => a.add(at, id),
                None => a = Some(Agg::new(at, id)),
            }
        }
        a
    } else {
        None
    };
    let mut list: Vec<(Option<&str>, Agg)> = Vec::new();
    if let Some(q) = core.state.summary.queues.get_mut(&qid) {
        let stale = match &req.group_by {
            GroupBy::Error => q.errors.stale(),
            GroupBy::Reason => q.reasons.stale(),
            GroupBy::Source => q.sources.stale(),
            GroupBy::Attribute(_) => false,
        };
        if stale {
            q.recount(&req.group_by);
        }
    }
    let mut none = plain_agg;
    let mut merge_none = |a: Option<Agg>| {
        if let Some(a) = a {
            match none.as_mut() {
                Some(n) => {
                    n.count += a.count;
                    n.first = n.first.min(a.first);
                    n.last = n.last.max(a.last);
                    n.min_id = n.min_id.min(a.min_id);
                }
                None => none = Some(a),
            }
        }
    };
    if let Some(q) = core.state.summary.queues.get(&qid) {
        match &req.group_by {
            GroupBy::Error => {
                merge_none(q.errors.none);
                list.extend(q.errors.by_key.iter().map(|(k, a)| (Some(&**k), *a)));
            }
            GroupBy::Reason => {
                merge_none(q.reasons.none);
                list.extend(q.reasons.by_key.iter().map(|(k, a)| (Some(k.as_str()), *a)));
            }
            GroupBy::Source => {
                merge_none(q.sources.none);
                list.extend(q.sources.by_key.iter().map(|(k, a)| (Some(&**k), *a)));
            }
            GroupBy::Attribute(_) => {}
        }
    }
    if let Some(n) = none {
        list.push((None, n));
    }
    finish(list, req.limit)
}

/// Orders the groups, keeps the first `limit` and makes them owned.
fn finish(mut list: Vec<(Option<&str>, Agg)>, limit: u32) -> Summary {
    let total = list.iter().map(|(_, a)| a.count).sum();
    let group_count = list.len() as u64;
    let order = |a: &(Option<&str>, Agg), b: &(Option<&str>, Agg)| {
        b.1.count.cmp(&a.1.count).then_with(|| match (a.0, b.0) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        })
    };
    let limit = limit as usize;
    if list.len() > limit {
        list.select_nth_unstable_by(limit, order);
        list.truncate(limit);
    }
    list.sort_by(order);
    Summary {
        total,
        group_count,
        groups: list
            .into_iter()
            .map(|(k, a)| SummaryGroup {
                key: k.map(str::to_owned),
                count: a.count,
                first_at: Timestamp(a.first),
                last_at: Timestamp(a.last),
                sample_id: MessageId(a.min_id),
            })
            .collect(),
    }
}
