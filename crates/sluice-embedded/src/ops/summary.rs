//! Summaries of a queue (`summarize`): counts by error, reason, source, key or attribute, with
//! filters, answered from the summary index in memory ([`crate::state::summary`]); attributes
//! the index does not keep are read from the log a chunk per hold of the lock. A message's key
//! comes from the queue state's tags, so a grouping by key, or a key filter, walks the queue's
//! messages in memory.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::message::{DeadLetterReason, MessageId};
use sluice_core::summary::{GroupBy, Summary, SummaryGroup, SummaryRequest};
use sluice_core::{QueueName, RedriveFilter, StoreError, Timestamp};

use crate::core::{ATTRIBUTE_CHUNK, Core, Inner};
use crate::journal::record::Qid;
use crate::state::summary::{Agg, Attrs, Entry};

/// A key while grouping: shared text, or the text of a reason.
type Key = Option<Arc<str>>;

/// A message still to be looked at: id, time, key under a grouping that is not by attribute.
type Candidate = (u64, i64, Key);

fn reason_key(r: Option<DeadLetterReason>) -> Key {
    r.map(|r| Arc::from(r.as_str()))
}

/// The key message `id` was sent with.
fn message_key(core: &Core, id: u64) -> Key {
    let m = core.state.msgs.get(&id)?;
    core.state.tag_of(m, id)?.key.clone()
}

/// Whether message `id` passes the filter's key condition.
fn key_passes(core: &Core, f: &RedriveFilter, id: u64) -> bool {
    f.key
        .as_ref()
        .is_none_or(|want| message_key(core, id).as_deref() == Some(want.as_str()))
}

fn needs_attributes(req: &SummaryRequest) -> bool {
    matches!(req.group_by, GroupBy::Attribute(_)) || !req.filter.attributes.is_empty()
}

/// Answers a summary of `queue`.
pub(crate) async fn summarize(
    inner: &Inner,
    queue: &QueueName,
    req: &SummaryRequest,
) -> Result<Summary, StoreError> {
    let (qid, mut groups, unread) = {
        let mut core = inner.lock();
        let now = inner.clock.now().as_millis();
        let qid = core.qid(queue)?;
        core.expire_with_sources(qid, now)?;
        if !needs_attributes(req) {
            return Ok(without_attributes(&mut core, qid, req));
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
                let Some(attrs) = core.read_attributes(qid, *id)? else {
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
        for (&id, e) in q
            .entries
            .iter()
            .filter(|&(&id, e)| passes(&req.filter, e) && key_passes(core, &req.filter, id))
        {
            let key = entry_key(core, &req.group_by, id, e);
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
        unread.extend(plain_candidates(core, qid, req));
    }
    (groups, unread)
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
fn without_attributes(core: &mut Core, qid: Qid, req: &SummaryRequest) -> Summary {
    if req.filter == RedriveFilter::default() && req.group_by != GroupBy::Key {
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

/// Whether an indexed message passes the filter's conditions other than attributes.
fn passes(f: &RedriveFilter, e: &Entry) -> bool {
    f.error_contains.as_ref().is_none_or(|needle| {
        e.error
            .as_deref()
            .is_some_and(|t| t.contains(needle.as_str()))
    }) && f
        .error_is
        .as_deref()
        .is_none_or(|want| e.error.as_deref() == Some(want))
        && f.reason.is_none_or(|want| e.reason == Some(want))
        && f.source_queue
            .as_ref()
            .is_none_or(|want| e.source.as_deref() == Some(want.as_str()))
        && time_ok(f, e.reason.map(|_| e.at))
}

/// Whether plain messages (no error, no dead-letter information, no source) pass them.
fn plain_pass(f: &RedriveFilter) -> bool {
    f.error_contains.is_none()
        && f.error_is.is_none()
        && f.reason.is_none()
        && f.source_queue.is_none()
        && time_ok(f, None)
}

/// The messages passing the filter's error and time conditions, each with its time and its
/// key under the request's grouping.
fn candidates(core: &Core, qid: Qid, req: &SummaryRequest) -> Vec<Candidate> {
    let mut out = Vec::new();
    if let Some(q) = core.state.summary.queues.get(&qid) {
        out.extend(
            q.entries
                .iter()
                .filter(|&(&id, e)| passes(&req.filter, e) && key_passes(core, &req.filter, id))
                .map(|(&id, e)| (id, e.at, entry_key(core, &req.group_by, id, e))),
        );
    }
    if plain_count(core, qid) > 0 && plain_pass(&req.filter) {
        out.extend(plain_candidates(core, qid, req));
    }
    out
}

/// The plain messages passing the filter's key condition, each with its time and its key
/// under the request's grouping (plain messages have no error, reason or source).
fn plain_candidates(core: &Core, qid: Qid, req: &SummaryRequest) -> Vec<Candidate> {
    plain_messages(core, qid)
        .into_iter()
        .filter(|&(id, _)| key_passes(core, &req.filter, id))
        .map(|(id, at)| {
            let key = match req.group_by {
                GroupBy::Key => message_key(core, id),
                _ => None,
            };
            (id, at, key)
        })
        .collect()
}

fn entry_key(core: &Core, by: &GroupBy, id: u64, e: &Entry) -> Key {
    match by {
        GroupBy::Error => e.error.clone(),
        GroupBy::Reason => reason_key(e.reason),
        GroupBy::Source => e.source.clone(),
        GroupBy::Key => message_key(core, id),
        GroupBy::Attribute(_) => None,
    }
}

/// Messages of the queue that are not indexed.
fn plain_count(core: &Core, qid: Qid) -> u64 {
    let depth = core.state.queues.get(&qid).map_or(0, |q| q.depth());
    depth.saturating_sub(core.state.summary.len(qid) as u64)
}

/// The plain messages of the queue with the time each was sent. Most never left the queue
/// they were sent to, so that is when they entered it; one that was moved here without
/// dead-letter information (a redrive of a message sent straight to a DLQ) has its send time
/// read from its record.
fn plain_messages(core: &Core, qid: Qid) -> Vec<(u64, i64)> {
    let Some(q) = core.state.queues.get(&qid) else {
        return Vec::new();
    };
    q.ids()
        .filter(|id| !core.state.summary.is_indexed(qid, *id))
        .filter_map(|id| {
            let m = core.state.msgs.get(&id)?;
            if !m.entered_later() {
                return Some((id, m.entered_at));
            }
            match core.load(id, m) {
                Ok((rec, _)) => Some((id, rec.enqueued_at)),
                Err(e) => {
                    tracing::warn!(id, error = %e, "could not read a message's send time for a summary; counting it by when it entered its queue");
                    Some((id, m.entered_at))
                }
            }
        })
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
            GroupBy::Key | GroupBy::Attribute(_) => false,
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
            GroupBy::Key | GroupBy::Attribute(_) => {}
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
