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

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use sluice_core::Attributes;
use sluice_core::message::DeadLetterReason;
use sluice_core::summary::GroupBy;

use crate::journal::record::{Qid, Rich};

/// Attribute bytes (keys and values) of one message up to which the index keeps them in
/// memory: enough for the tenant, upstream and trace ids attributes usually carry, while a
/// message with kilobytes of attributes does not multiply the index's memory.
pub(crate) const KEEP_ATTRIBUTE_BYTES: usize = 1024;

/// An indexed message's attributes, as far as the index knows them.
#[derive(Debug, Clone)]
pub(crate) enum Attrs {
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
    pub error: Option<Arc<str>>,
    pub source: Option<Arc<str>>,
    pub reason: Option<DeadLetterReason>,
    /// When it was dead-lettered, else when it was first sent (ms).
    pub at: i64,
    /// When it was first sent (ms), carried over as it moves between queues.
    enqueued_at: i64,
    pub attrs: Attrs,
}

/// A group's aggregate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Agg {
    pub count: u64,
    pub first: i64,
    pub last: i64,
    pub min_id: u64,
    /// A removal took its first, last or smallest id: those need a recount.
    stale: bool,
}

impl Agg {
    pub fn new(at: i64, id: u64) -> Self {
        Agg {
            count: 1,
            first: at,
            last: at,
            min_id: id,
            stale: false,
        }
    }

    pub fn add(&mut self, at: i64, id: u64) {
        self.count += 1;
        self.first = self.first.min(at);
        self.last = self.last.max(at);
        self.min_id = self.min_id.min(id);
    }
}

/// The groups of one grouping: by value, and the `null` group.
#[derive(Debug)]
pub(crate) struct Groups<K> {
    pub by_key: HashMap<K, Agg>,
    pub none: Option<Agg>,
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

    pub fn stale(&self) -> bool {
        self.none.is_some_and(|a| a.stale) || self.by_key.values().any(|a| a.stale)
    }

    fn clear(&mut self) {
        self.by_key.clear();
        self.none = None;
    }
}

/// One queue's indexed messages and their groups.
#[derive(Debug, Default)]
pub(crate) struct QueueIndex {
    pub entries: HashMap<u64, Entry>,
    pub errors: Groups<Arc<str>>,
    pub reasons: Groups<DeadLetterReason>,
    pub sources: Groups<Arc<str>>,
    /// One copy of each attribute key and value kept by the entries, with how many times
    /// the entries use it: the copy goes when the count does. (Counted, not read off the
    /// `Arc`'s own count, which a summary's temporary clones would raise.)
    strings: HashMap<Arc<str>, u32>,
}

impl QueueIndex {
    /// The shared copy of `s` when some message of this queue already has it.
    fn intern(groups: &Groups<Arc<str>>, s: &str) -> Arc<str> {
        groups
            .by_key
            .get_key_value(s)
            .map_or_else(|| Arc::from(s), |(k, _)| k.clone())
    }

    /// This queue's copy of `s`, counted once more.
    fn share(strings: &mut HashMap<Arc<str>, u32>, s: &str) -> Arc<str> {
        if let Some((a, n)) = strings.get_key_value(s) {
            let a = a.clone();
            let n = *n + 1;
            strings.insert(a.clone(), n);
            return a;
        }
        let a: Arc<str> = Arc::from(s);
        strings.insert(a.clone(), 1);
        a
    }

    /// The attributes as this queue keeps them.
    fn keep(&mut self, attributes: &Attributes) -> Attrs {
        let bytes: usize = attributes.iter().map(|(k, v)| k.len() + v.len()).sum();
        if bytes > KEEP_ATTRIBUTE_BYTES {
            return Attrs::InLog;
        }
        let strings = &mut self.strings;
        Attrs::Kept(
            attributes
                .iter()
                .map(|(k, v)| (Self::share(strings, k), Self::share(strings, v)))
                .collect(),
        )
    }

    /// Attributes kept by another queue's index (a message moving), as this queue keeps them.
    fn adopt(&mut self, attrs: Attrs) -> Attrs {
        let Attrs::Kept(pairs) = attrs else {
            return attrs;
        };
        let strings = &mut self.strings;
        Attrs::Kept(
            pairs
                .iter()
                .map(|(k, v)| (Self::share(strings, k), Self::share(strings, v)))
                .collect(),
        )
    }

    /// Counts each text of `pairs` (about to go) once less, dropping copies no entry uses.
    fn unshare(&mut self, pairs: &[(Arc<str>, Arc<str>)]) {
        for s in pairs.iter().flat_map(|(k, v)| [k, v]) {
            if let Some(n) = self.strings.get_mut(s) {
                *n -= 1;
                if *n == 0 {
                    self.strings.remove(s);
                }
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
            self.unshare(pairs);
        }
        Some(e)
    }

    /// Recounts a grouping's aggregates from the entries.
    pub fn recount(&mut self, by: &GroupBy) {
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
            GroupBy::Key | GroupBy::Attribute(_) => {}
        }
    }
}

/// The summary index of every queue.
#[derive(Debug, Default)]
pub(crate) struct SummaryIndex {
    pub queues: HashMap<Qid, QueueIndex>,
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
        let (enqueued_at, attrs, listed) = match self.remove(from, id) {
            Some(e) => (e.enqueued_at, e.attrs, true),
            None => (entered_at, Attrs::Missing, false),
        };
        if !indexed(rich) {
            return;
        }
        // Listed once per queue it is missing them in: a replay of many nacks of one
        // message must not list it once per nack.
        if matches!(attrs, Attrs::Missing) && !(listed && from == to) {
            self.fresh.push((to, id));
        }
        let q = self.queues.entry(to).or_default();
        let attrs = q.adopt(attrs);
        q.insert(id, rich, enqueued_at, attrs);
    }

    /// Message `id` of queue `qid` has these attributes (read from its record).
    pub fn learn(&mut self, qid: Qid, id: u64, attributes: &Attributes) {
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
    /// [`SummaryIndex::take_fresh`]).
    pub fn fresh_mark(&self) -> usize {
        self.fresh.len()
    }

    /// Takes the messages indexed without their attributes since `mark`, or up to `limit` of
    /// the oldest when `mark` is `None`; some may have left or learned them since.
    pub fn take_fresh(&mut self, mark: Option<usize>, limit: usize) -> Vec<(Qid, u64)> {
        let fresh = &mut self.fresh;
        match mark {
            Some(m) if m < fresh.len() => fresh.split_off(m),
            Some(_) => Vec::new(),
            None => {
                let n = fresh.len().min(limit);
                fresh.drain(..n).collect()
            }
        }
    }

    /// Whether message `id` of queue `qid` is indexed and its attributes are not known yet.
    pub fn missing_attributes(&self, qid: Qid, id: u64) -> bool {
        self.queues.get(&qid).is_some_and(|q| {
            q.entries
                .get(&id)
                .is_some_and(|e| matches!(e.attrs, Attrs::Missing))
        })
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

    pub fn is_indexed(&self, qid: Qid, id: u64) -> bool {
        self.queues
            .get(&qid)
            .is_some_and(|q| q.entries.contains_key(&id))
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
            .keys()
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
    fn texts_used_by_two_queues_and_held_by_a_summary_still_go_with_their_last_message() {
        let mut idx = SummaryIndex::default();
        idx.on_message(1, 10, &failed(), 0, &attributes(&[("t", "acme")]));
        idx.on_message(2, 20, &failed(), 0, &attributes(&[("t", "acme")]));
        idx.on_message(2, 21, &failed(), 0, &attributes(&[("t", "other")]));
        idx.on_update(1, 2, 10, &failed(), 0);
        // A summary grouping by `t` holds its own handle on "acme" meanwhile.
        let held = match &idx.queues[&2].entries[&10].attrs {
            Attrs::Kept(pairs) => pairs[0].1.clone(),
            other => panic!("kept: {other:?}"),
        };
        idx.remove(2, 10);
        idx.remove(2, 20);
        assert_eq!(
            strings(&idx, 2),
            ["other", "t"],
            "acme went with its last message"
        );
        assert_eq!(&*held, "acme");
    }

    #[test]
    fn a_replay_of_many_updates_lists_a_message_once_per_queue() {
        let mut idx = SummaryIndex::default();
        for _ in 0..3 {
            idx.on_update(1, 1, 7, &failed(), 5);
        }
        assert_eq!(idx.fresh_mark(), 1, "three nacks, one listing");
        idx.on_update(1, 2, 7, &failed(), 5);
        assert_eq!(
            idx.take_fresh(None, 10),
            [(1, 7), (2, 7)],
            "dead-lettered into queue 2: listed there too"
        );
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
