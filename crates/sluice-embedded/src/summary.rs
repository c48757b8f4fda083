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
//! summary that asks for it. Filtered summaries walk the same entries.
//!
//! Indexed messages keep their attributes too (keys and values shared within a queue), so a
//! filter on, or a grouping by, an attribute is answered from memory. A message that becomes
//! indexed through an update (its first failure, its dead-lettering) learns them from its
//! record: right after the commit on the live path, and in the background after a restart
//! (the update records replayed do not carry attributes). Until then, and for messages whose
//! attributes are too large to keep ([`KEEP_ATTRIBUTE_BYTES`]) or plain messages, a summary
//! reads them from the log, 4,096 messages per hold of the lock, so other calls go on in
//! between.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use sluice_core::message::{DeadLetterReason, MessageId};
use sluice_core::summary::{GroupBy, Summary, SummaryGroup, SummaryRequest};
use sluice_core::{Attributes, QueueName, RedriveFilter, StoreError, Timestamp};

use crate::engine::{Core, Inner};
use crate::journal::record::{Qid, Record, Rich};

/// Attribute bytes (keys and values) of one message up to which the index keeps them in
/// memory: enough for the tenant, upstream and trace ids attributes usually carry, while a
/// message with kilobytes of attributes does not multiply the index's memory.
pub(crate) const KEEP_ATTRIBUTE_BYTES: usize = 1024;

/// An indexed message's attributes, as far as the index knows them.
#[derive(Debug, Clone)]
enum Attrs {
    /// Not read yet: the message became indexed by an update, which does not carry them.
    Missing,
    /// Larger than [`KEEP_ATTRIBUTE_BYTES`]: read from the log when a summary needs them.
    InLog,
    /// Kept, as `(key, value)` pairs sharing the queue's copies of each text.
    Kept(Box<[(Arc<str>, Arc<str>)]>),
}

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
    attrs: Attrs,
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
    /// One copy of each attribute key and value kept by the entries.
    strings: HashSet<Arc<str>>,
}

impl QueueIndex {
    /// The shared copy of `s` when some message of this queue already has it.
    fn intern(groups: &Groups<Arc<str>>, s: &str) -> Arc<str> {
        groups
            .by_key
            .get_key_value(s)
            .map_or_else(|| Arc::from(s), |(k, _)| k.clone())
    }

    /// The attributes as this queue keeps them.
    fn keep(&mut self, attributes: &Attributes) -> Attrs {
        let bytes: usize = attributes.iter().map(|(k, v)| k.len() + v.len()).sum();
        if bytes > KEEP_ATTRIBUTE_BYTES {
            return Attrs::InLog;
        }
        let mut share = |s: &str| match self.strings.get(s) {
            Some(a) => a.clone(),
            None => {
                let a: Arc<str> = Arc::from(s);
                self.strings.insert(a.clone());
                a
            }
        };
        Attrs::Kept(
            attributes
                .iter()
                .map(|(k, v)| (share(k), share(v)))
                .collect(),
        )
    }

    /// Attributes kept by another queue's index (a message moving), shared with this one's.
    fn adopt(&mut self, attrs: Attrs) -> Attrs {
        let Attrs::Kept(pairs) = attrs else {
            return attrs;
        };
        let mut share = |a: &Arc<str>| match self.strings.get(a) {
            Some(mine) => mine.clone(),
            None => {
                self.strings.insert(a.clone());
                a.clone()
            }
        };
        Attrs::Kept(pairs.iter().map(|(k, v)| (share(k), share(v))).collect())
    }

    /// Drops this queue's copy of each text that only `pairs` (about to go) still holds.
    fn release(&mut self, pairs: &[(Arc<str>, Arc<str>)]) {
        let all = || pairs.iter().flat_map(|(k, v)| [k, v]);
        for s in all() {
            let held = all().filter(|x| Arc::ptr_eq(x, s)).count();
            if Arc::strong_count(s) == held + 1 {
                self.strings.remove(s);
            }
        }
    }

    fn insert(&mut self, id: u64, rich: &Rich, enqueued_at: i64, attrs: Attrs) {
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
            attrs,
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
        if let Attrs::Kept(pairs) = &e.attrs {
            self.release(pairs);
        }
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
    /// Messages indexed with their attributes [`Attrs::Missing`], newest last (some may have
    /// left or learned them since).
    fresh: Vec<(Qid, u64)>,
}

fn indexed(rich: &Rich) -> bool {
    rich.last_error.is_some() || rich.source_queue.is_some() || rich.dead_letter.is_some()
}

impl SummaryIndex {
    /// A full message record (a send, or compaction's copy) was applied to queue `qid`.
    pub fn on_message(
        &mut self,
        qid: Qid,
        id: u64,
        rich: &Rich,
        enqueued_at: i64,
        attributes: &Attributes,
    ) {
        if indexed(rich) {
            let q = self.queues.entry(qid).or_default();
            let attrs = q.keep(attributes);
            q.insert(id, rich, enqueued_at, attrs);
        }
    }

    /// An update moved message `id` from queue `from` (where it entered at `entered_at`) to
    /// queue `to` (possibly the same) with these rich fields.
    pub fn on_update(&mut self, from: Qid, to: Qid, id: u64, rich: &Rich, entered_at: i64) {
        // A message never indexed has never left the queue it was sent to (a move or
        // dead-lettering sets its source queue), so it entered that queue when it was sent.
        let (enqueued_at, attrs) = match self.remove(from, id) {
            Some(e) => (e.enqueued_at, e.attrs),
            None => (entered_at, Attrs::Missing),
        };
        if !indexed(rich) {
            return;
        }
        if matches!(attrs, Attrs::Missing) {
            self.fresh.push((to, id));
        }
        let q = self.queues.entry(to).or_default();
        let attrs = q.adopt(attrs);
        q.insert(id, rich, enqueued_at, attrs);
    }

    /// Message `id` of queue `qid` has these attributes (read from its record).
    fn learn(&mut self, qid: Qid, id: u64, attributes: &Attributes) {
        let Some(q) = self.queues.get_mut(&qid) else {
            return;
        };
        if q.entries
            .get(&id)
            .is_some_and(|e| matches!(e.attrs, Attrs::Missing))
        {
            let attrs = q.keep(attributes);
            if let Some(e) = q.entries.get_mut(&id) {
                e.attrs = attrs;
            }
        }
    }

    /// How many messages were indexed without their attributes so far (a mark for
    /// [`learn_since`]).
    pub fn fresh_mark(&self) -> usize {
        self.fresh.len()
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
        self.fresh.retain(|(q, _)| *q != qid);
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

/// A message still to be looked at: id, time, key under a grouping that is not by attribute.
type Candidate = (u64, i64, Key);

fn reason_key(r: Option<DeadLetterReason>) -> Key {
    r.map(|r| Arc::from(r.as_str()))
}

/// Messages whose attributes are read from the log under one hold of the lock: a read takes
/// a few microseconds, so reading many lets other calls in between chunks instead of
/// stalling the broker for their whole length.
pub(crate) const ATTRIBUTE_CHUNK: usize = 4096;

fn needs_attributes(req: &SummaryRequest) -> bool {
    matches!(req.group_by, GroupBy::Attribute(_)) || !req.filter.attributes.is_empty()
}

/// Answers a summary of `queue`.
pub(crate) async fn answer(
    inner: &Inner,
    queue: &QueueName,
    req: &SummaryRequest,
) -> Result<Summary, StoreError> {
    let (qid, mut groups, unread) = {
        let mut core = inner.lock();
        let now = inner.clock.now().as_millis();
        let qid = core.qid(queue)?;
        core.maintain_with_sources(qid, now)?;
        if !needs_attributes(req) {
            return Ok(summarize(&mut core, qid, req));
        }
        let (groups, unread) = from_kept_attributes(&core, qid, req);
        (qid, groups, unread)
    };
    // The rest have their attributes in the log only: read them a chunk at a time, and let
    // the index keep what it was missing. A message that left the queue meanwhile is not
    // counted.
    for chunk in unread.chunks(ATTRIBUTE_CHUNK) {
        {
            let mut core = inner.lock();
            for (id, at, key) in chunk {
                let Some(attrs) = read_attributes(&core, qid, *id)? else {
                    continue;
                };
                core.state.summary.learn(qid, *id, &attrs);
                let get = |k: &str| attrs.get(k).map(String::as_str);
                if let Some(key) = attribute_match(req, get, key) {
                    add(&mut groups, key, *at, *id);
                }
            }
        }
        tokio::task::yield_now().await;
    }
    Ok(finish(
        groups.iter().map(|(k, a)| (k.as_deref(), *a)).collect(),
        req.limit,
    ))
}

/// With `get` looking up one message's attributes: `None` if the message fails the
/// request's attribute filter, else its key under the request's grouping (`key` when the
/// grouping is not by attribute).
fn attribute_match<'a>(
    req: &SummaryRequest,
    get: impl Fn(&str) -> Option<&'a str>,
    key: &Key,
) -> Option<Key> {
    if !req
        .filter
        .attributes
        .iter()
        .all(|(k, v)| get(k) == Some(v.as_str()))
    {
        return None;
    }
    Some(match &req.group_by {
        GroupBy::Attribute(name) => get(name).map(Arc::from),
        _ => key.clone(),
    })
}

/// Groups the messages passing the filter whose attributes the index keeps; returns the
/// groups and the other candidates (id, time, key) whose attributes must be read.
fn from_kept_attributes(
    core: &Core,
    qid: Qid,
    req: &SummaryRequest,
) -> (HashMap<Key, Agg>, Vec<Candidate>) {
    let mut groups: HashMap<Key, Agg> = HashMap::new();
    let mut unread = Vec::new();
    if let Some(q) = core.state.summary.queues.get(&qid) {
        for (&id, e) in q.entries.iter().filter(|(_, e)| passes(&req.filter, e)) {
            let key = entry_key(&req.group_by, e);
            let Attrs::Kept(pairs) = &e.attrs else {
                unread.push((id, e.at, key));
                continue;
            };
            let find = |k: &str| pairs.iter().find(|(pk, _)| &**pk == k).map(|(_, v)| v);
            // Grouping by attribute takes the shared copy rather than a new one per message.
            let matched =
                attribute_match(req, |k| find(k).map(|v| &**v), &None).map(|_| {
                    match &req.group_by {
                        GroupBy::Attribute(name) => find(name).cloned(),
                        _ => key,
                    }
                });
            if let Some(key) = matched {
                add(&mut groups, key, e.at, id);
            }
        }
    }
    if plain_count(core, qid) > 0 && plain_pass(&req.filter) {
        unread.extend(
            plain_messages(core, qid)
                .into_iter()
                .map(|(id, at)| (id, at, None)),
        );
    }
    (groups, unread)
}

/// The attributes of message `id` if it is still in queue `qid`, read from its record.
fn read_attributes(core: &Core, qid: Qid, id: u64) -> Result<Option<Attributes>, StoreError> {
    let Some(m) = core.state.msgs.get(&id).filter(|m| m.qid == qid) else {
        return Ok(None);
    };
    match core.log.read_sized(m.body, Some(m.body_len))? {
        Record::Message(rec) => Ok(Some(rec.attributes)),
        _ => Err(StoreError::unavailable(
            "log record is not a message (index out of step)",
        )),
    }
}

/// Reads the attributes of the messages indexed without them since `mark` (this commit's),
/// or of up to `limit` of the oldest still missing when `mark` is `None` (the background
/// pass after a restart). Returns how many it read.
pub(crate) fn learn_since(core: &mut Core, mark: Option<usize>, limit: usize) -> usize {
    let fresh = &mut core.state.summary.fresh;
    let batch: Vec<(Qid, u64)> = match mark {
        Some(m) if m < fresh.len() => fresh.split_off(m),
        Some(_) => return 0,
        None => {
            let n = fresh.len().min(limit);
            fresh.drain(..n).collect()
        }
    };
    let mut read = 0;
    for (qid, id) in batch {
        let missing = core.state.summary.queues.get(&qid).is_some_and(|q| {
            q.entries
                .get(&id)
                .is_some_and(|e| matches!(e.attrs, Attrs::Missing))
        });
        if !missing {
            continue;
        }
        match read_attributes(core, qid, id) {
            Ok(Some(attrs)) => {
                core.state.summary.learn(qid, id, &attrs);
                read += 1;
            }
            Ok(None) => {}
            // The next summary that needs them reads them again.
            Err(e) => tracing::debug!(error = %e, "could not read a dead letter's attributes"),
        }
    }
    read
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
    if req.filter == RedriveFilter::default() {
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

/// Whether a dead-letter time passes the filter's time conditions (`None`: never
/// dead-lettered, which passes only when there are none).
fn time_ok(f: &RedriveFilter, dead_lettered: Option<i64>) -> bool {
    f.dead_lettered_before
        .is_none_or(|b| dead_lettered.is_some_and(|t| t < b.as_millis()))
        && f.dead_lettered_after
            .is_none_or(|a| dead_lettered.is_some_and(|t| t >= a.as_millis()))
}

/// Whether an indexed message passes the filter's error and time conditions.
fn passes(f: &RedriveFilter, e: &Entry) -> bool {
    f.error_contains.as_ref().is_none_or(|needle| {
        e.error
            .as_deref()
            .is_some_and(|t| t.contains(needle.as_str()))
    }) && time_ok(f, e.reason.map(|_| e.at))
}

/// Whether plain messages (no error, no dead-letter time, no source) pass them.
fn plain_pass(f: &RedriveFilter) -> bool {
    f.error_contains.is_none() && time_ok(f, None)
}

/// The messages passing the filter's error and time conditions, each with its time and its
/// key under the request's grouping.
fn candidates(core: &Core, qid: Qid, req: &SummaryRequest) -> Vec<Candidate> {
    let mut out = Vec::new();
    if let Some(q) = core.state.summary.queues.get(&qid) {
        out.extend(
            q.entries
                .iter()
                .filter(|(_, e)| passes(&req.filter, e))
                .map(|(&id, e)| (id, e.at, entry_key(&req.group_by, e))),
        );
    }
    if plain_count(core, qid) > 0 && plain_pass(&req.filter) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> Rich {
        Rich {
            last_error: Some("boom".into()),
            ..Rich::default()
        }
    }

    fn attributes(pairs: &[(&str, &str)]) -> Attributes {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn strings(idx: &SummaryIndex, qid: Qid) -> Vec<String> {
        let mut v: Vec<String> = idx.queues[&qid]
            .strings
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_queue_keeps_one_copy_of_each_text_while_a_message_holds_it() {
        let mut idx = SummaryIndex::default();
        idx.on_message(1, 10, &failed(), 0, &attributes(&[("x", "x"), ("t", "v")]));
        idx.on_message(1, 11, &failed(), 0, &attributes(&[("t", "w")]));
        assert_eq!(strings(&idx, 1), ["t", "v", "w", "x"]);
        idx.remove(1, 10);
        assert_eq!(
            strings(&idx, 1),
            ["t", "w"],
            "a key equal to its value goes too"
        );
        idx.on_update(1, 2, 11, &failed(), 0);
        assert!(
            !idx.queues.contains_key(&1),
            "the last message left queue 1"
        );
        assert_eq!(strings(&idx, 2), ["t", "w"], "moved with its attributes");
        assert_eq!(idx.fresh_mark(), 0, "nothing to read: they were known");
    }

    #[test]
    fn a_message_indexed_by_an_update_learns_its_attributes_later() {
        let mut idx = SummaryIndex::default();
        idx.on_update(1, 2, 7, &failed(), 5);
        assert_eq!(idx.fresh_mark(), 1);
        assert!(matches!(idx.queues[&2].entries[&7].attrs, Attrs::Missing));
        idx.learn(2, 7, &attributes(&[("tenant", "a")]));
        assert!(matches!(idx.queues[&2].entries[&7].attrs, Attrs::Kept(_)));
        let big = "z".repeat(KEEP_ATTRIBUTE_BYTES + 1);
        idx.on_message(2, 8, &failed(), 0, &attributes(&[("blob", &big)]));
        assert!(matches!(idx.queues[&2].entries[&8].attrs, Attrs::InLog));
        assert_eq!(
            strings(&idx, 2),
            ["a", "tenant"],
            "large attributes stay in the log"
        );
    }
}
