//! The in-memory index of the store: where every message is, without its body.
//!
//! The state changes only by applying log records (`apply`), both live and during replay, so
//! what a restart rebuilds is exactly what was served. Bodies, attributes and attempt histories
//! stay on disk; a message costs one compact [`Msg`] plus two ordered-index entries in RAM.
//! The one change made without a record is time passing: a delayed message whose time has come
//! becomes visible (`promote`), because that follows from the stored `visible_at`.
//!
//! Each queue's part is a [`QueueState`]; the [`summary`] index of messages with errors,
//! sources or dead-letter information is kept beside it and changed in the same `apply`, and
//! so are the lines of FIFO groups ([`groups`]).

mod due;
mod groups;
mod kept;
mod key_counts;
mod key_flows;
mod key_rates;
mod lanes;
mod leasing;
mod msg;
mod queue;
mod rate_windows;
pub(crate) mod summary;
mod tags;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use sluice_core::stats::Totals;
use sluice_core::{QueueName, Timestamp};

use crate::catalog::CatalogQueue;
use crate::journal::log::Loc;
use crate::journal::record::{
    GroupTag, MessageRecord, Qid, Record, RemoveReason, TagRecord, UpdateEvent,
};
pub(crate) use groups::Member;
pub(crate) use kept::{Done, LeaseHolder, Remembered};
pub(crate) use key_flows::KeptKeyFlow;
pub(crate) use lanes::Tag;
pub(crate) use msg::{Msg, Slot};
pub(crate) use queue::{DedupEntry, QueueState, flow_config};
use tags::tag_in;

/// A map keyed by numbers the engine assigns itself (message ids, queue and segment
/// numbers): hashed with FxHash, several times cheaper per lookup than the default SipHash,
/// whose resistance to chosen keys these keys do not need.
pub(crate) type IdMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

/// The whole in-memory state.
pub(crate) struct State {
    pub queues: IdMap<Qid, QueueState>,
    pub names: BTreeMap<QueueName, Qid>,
    pub next_qid: Qid,
    pub msgs: IdMap<u64, Msg>,
    /// The FIFO group membership of grouped live messages (those whose `Msg` is marked).
    pub members: IdMap<u64, Member>,
    /// The key and priority of live messages that carry one (those whose `Msg` is marked).
    pub tags: IdMap<u64, Tag>,
    pub done: IdMap<u64, Done>,
    /// Completed records by the time they are forgotten, one line per `result_ttl` (in ms):
    /// within a line that is ack order, so a push and a pop are O(1), while queues with
    /// different `result_ttl`s do not hold back each other's records.
    pub done_order: BTreeMap<i64, VecDeque<(i64, u64)>>,
    pub next_id: u64,
    pub next_token: u64,
    /// Tokens below this are covered by a durable [`Record::Tokens`] reservation.
    pub token_limit: u64,
    /// Bytes of live records per segment, to pick segments worth compacting.
    pub live: IdMap<u32, u64>,
    /// Which segment holds the history points taken at each time, for compaction.
    pub history_segs: BTreeMap<i64, u32>,
    /// Redrive jobs, running and recently finished.
    pub jobs: BTreeMap<u64, sluice_core::RedriveJob>,
    /// When each leased message's lease began and who received it (leases recorded before
    /// lease starts were kept have none).
    pub holders: IdMap<u64, LeaseHolder>,
    /// The last progress of running tasks; advisory, so kept in memory only.
    pub progress: IdMap<u64, sluice_core::Progress>,
    /// The keys of messages with errors, sources or dead-letter information, for summaries.
    pub summary: summary::SummaryIndex,
    /// Schedules by name, each as of its latest record.
    pub schedules: BTreeMap<String, sluice_core::schedule::Schedule>,
    /// Responses remembered under idempotency keys (the responses stay on disk).
    pub idem: HashMap<String, Remembered>,
    pub idem_order: VecDeque<(i64, String)>,
    /// During replay, the queues that no longer exist but whose records the log still holds.
    /// A message's base record names the queue it was *sent* to; it may since have moved
    /// (dead-lettered, moved, redriven) into a queue that exists, so its record is followed in
    /// a stand-in queue until the end of replay, when what is still in one is dropped with it.
    /// `None` once replay is over.
    replay_ghosts: Option<BTreeSet<Qid>>,
}

impl State {
    /// An empty state holding the catalog's queues.
    pub fn new(queues: &[CatalogQueue], next_qid: Qid) -> Self {
        let mut s = State {
            queues: IdMap::default(),
            names: BTreeMap::new(),
            next_qid,
            msgs: IdMap::default(),
            members: IdMap::default(),
            tags: IdMap::default(),
            done: IdMap::default(),
            done_order: BTreeMap::new(),
            next_id: 1,
            next_token: 1,
            token_limit: 0,
            live: IdMap::default(),
            idem: HashMap::new(),
            idem_order: VecDeque::new(),
            progress: IdMap::default(),
            holders: IdMap::default(),
            summary: Default::default(),
            jobs: BTreeMap::new(),
            schedules: BTreeMap::new(),
            history_segs: BTreeMap::new(),
            replay_ghosts: Some(BTreeSet::new()),
        };
        for q in queues {
            s.add_queue(q);
        }
        s
    }

    /// Adds a queue from the catalog.
    pub fn add_queue(&mut self, q: &CatalogQueue) {
        self.names.insert(q.name.clone(), q.qid);
        self.queues.insert(q.qid, QueueState::new(q));
    }

    /// Drops a queue and everything in it.
    pub fn drop_queue(&mut self, qid: Qid) {
        self.summary.drop_queue(qid);
        if let Some(q) = self.queues.remove(&qid) {
            if self.names.get(&q.name) == Some(&qid) {
                self.names.remove(&q.name);
            }
            for id in q.ids() {
                self.members.remove(&id);
                self.tags.remove(&id);
                self.holders.remove(&id);
                if let Some(m) = self.msgs.remove(&id) {
                    self.unaccount(&m);
                }
            }
        }
        let gone: Vec<u64> = self
            .done
            .iter()
            .filter(|(_, d)| d.qid == qid)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.forget_done(id);
        }
    }

    /// Draws a fresh message id: time-ordered (milliseconds in the high bits) so ids stay
    /// unique even across a wiped data directory, and strictly increasing.
    pub fn draw_id(&mut self, now: Timestamp) -> u64 {
        let floor = u64::try_from(now.as_millis()).unwrap_or(0) << 22;
        let id = self.next_id.max(floor);
        self.next_id = id + 1;
        id
    }

    /// Draws a lease token. The caller has reserved it first ([`State::reserve_tokens`]).
    pub fn draw_token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }

    /// The reservation record to write (and wait for) before drawing `n` more tokens, when
    /// the durable reservation does not cover them yet.
    pub fn reserve_tokens(&self, n: u64) -> Option<Record> {
        (self.next_token + n > self.token_limit).then(|| Record::Tokens {
            upto: self.next_token + n + TOKEN_BLOCK,
        })
    }

    /// Ends replay: skips every token that was reserved, so a token handed out before a
    /// crash whose lease record was lost is never handed out again.
    ///
    /// Then drops the stand-ins of deleted queues with whatever is still in them: the
    /// messages that were in a queue when it was deleted. Those that had left it first are
    /// in the queue they moved to.
    pub fn finish_replay(&mut self) {
        self.next_token = self.next_token.max(self.token_limit);
        for qid in self.replay_ghosts.take().unwrap_or_default() {
            self.drop_queue(qid);
        }
    }

    /// During replay, makes sure a record naming a deleted queue has a stand-in queue to
    /// land in (see `replay_ghosts`). Live, every record names a queue that exists.
    fn ghost_for(&mut self, qid: Qid) {
        let Some(ghosts) = self.replay_ghosts.as_mut() else {
            return;
        };
        if self.queues.contains_key(&qid) {
            return;
        }
        ghosts.insert(qid);
        // Never entered in `names`: the stand-in cannot be reached by name.
        let name = QueueName::new(format!("deleted-{qid}")).expect("a valid queue name");
        let stand_in = CatalogQueue {
            qid,
            name: name.clone(),
            config: sluice_core::QueueConfig::defaults_for(&name),
            created_at: Timestamp(0),
            flow: None,
            key_flows: Vec::new(),
        };
        self.queues.insert(qid, QueueState::new(&stand_in));
    }

    // Live bytes count body records only: update records are small and their segment is
    // compacted along with whatever else is in it.
    fn account(&mut self, m: &Msg) {
        *self.live.entry(m.body.seg).or_default() += u64::from(m.body_len);
    }

    fn unaccount(&mut self, m: &Msg) {
        sub_live(&mut self.live, m.body, m.body_len);
    }

    /// Takes a message out of its queue's indexes (it stays in `msgs`).
    fn detach(&mut self, id: u64) -> Option<Msg> {
        let m = *self.msgs.get(&id)?;
        if let Some(q) = self.queues.get_mut(&m.qid) {
            q.take(m.slot(), m.at, id, tag_in(&self.tags, &m, id));
        }
        Some(m)
    }

    fn attach(&mut self, id: u64, m: Msg) {
        if let Some(q) = self.queues.get_mut(&m.qid) {
            q.put(m.slot(), m.at, id, tag_in(&self.tags, &m, id));
            self.msgs.insert(id, m);
        } else {
            self.msgs.remove(&id);
        }
    }

    /// Removes a message entirely.
    pub fn remove(&mut self, id: u64) -> Option<Msg> {
        self.progress.remove(&id);
        self.holders.remove(&id);
        let m = self.detach(id)?;
        self.msgs.remove(&id);
        if m.tagged() {
            self.tags.remove(&id);
        }
        if m.grouped() {
            self.leave(id, m.qid);
        }
        self.unaccount(&m);
        self.summary.remove(m.qid, id);
        Some(m)
    }

    fn totals(&mut self, qid: Qid) -> Option<&mut Totals> {
        self.queues.get_mut(&qid).map(|q| &mut q.totals)
    }

    /// Applies one record found at `loc`.
    ///
    /// Long because it is one arm per journal record kind, the old forms kept for replay included;
    /// the match is exhaustive, so no new kind of record can be written without saying here how
    /// replay applies it.
    pub fn apply(&mut self, rec: &Record, loc: Loc, len: u32) {
        match rec {
            Record::Message(m) => self.apply_message(m, loc, len, None, None),
            Record::Grouped { message, group } => {
                self.apply_message(message, loc, len, Some(group), None);
            }
            Record::Tagged { message, tag } | Record::Traced { message, tag, .. } => {
                self.apply_message(message, loc, len, tag.group.as_ref(), Some(tag));
            }
            Record::Firing { message, schedule } => {
                let tag = TagRecord::of_firing(&schedule.0);
                self.apply_message(message, loc, len, None, tag.as_ref());
                self.schedules
                    .insert(schedule.0.name.to_string(), schedule.0.clone());
            }
            Record::Schedule { schedule } => {
                self.schedules
                    .insert(schedule.0.name.to_string(), schedule.0.clone());
            }
            Record::ScheduleDeleted { name } => {
                self.schedules.remove(name);
            }
            Record::Update(u) => self.apply_update(u, loc, None),
            Record::Regrouped { update, order } => self.apply_update(update, loc, Some(*order)),
            Record::Redrive { job, moves } => self.apply_redrive(job.0.clone(), moves, loc, &[]),
            Record::RedriveV1 { job, moves } => {
                self.apply_redrive(job.clone().into(), moves, loc, &[]);
            }
            Record::RedriveGrouped { job, moves, orders } => {
                self.apply_redrive(job.0.clone(), moves, loc, orders);
            }
            Record::Leased {
                at,
                consumer,
                leases,
            } => {
                self.apply_leases(leases, Some(*at));
                self.count_in_rate_windows(*at, leases);
                let holder = LeaseHolder {
                    at: *at,
                    consumer: consumer.as_deref().map(std::sync::Arc::from),
                };
                for l in leases {
                    if self.msgs.get(&l.id).is_some_and(|m| m.holds(l.token)) {
                        self.holders.insert(l.id, holder.clone());
                    }
                }
            }
            Record::Held { record, holds } => {
                self.apply(record, loc, len);
                self.apply_holds(holds);
            }
            // Leases recorded before their time was kept: not counted as deliveries per key.
            Record::Lease(leases) => self.apply_leases(leases, None),
            Record::RateWindows(windows) => self.restore_rate_windows(windows),
            Record::RatePaces(paces) => self.restore_rate_paces(paces),
            Record::KeyPaces(kept) => self.restore_key_paces(kept),
            Record::Extend {
                id,
                token,
                deadline,
            } => {
                if self.msgs.get(id).is_some_and(|m| m.holds(*token))
                    && let Some(mut m) = self.detach(*id)
                {
                    m.at = *deadline;
                    self.attach(*id, m);
                }
            }
            Record::Ack(acks) => {
                // Each completed record accounts for its share of the batch record.
                let share = len / u32::try_from(acks.len().max(1)).unwrap_or(u32::MAX);
                for a in acks {
                    self.complete(a, loc, share.max(1), (false, false), true);
                }
            }
            Record::Complete { acked, .. } => self.complete(acked, loc, len, (true, false), true),
            Record::Timed { record, times } => {
                self.apply(record, loc, len);
                for t in times {
                    if let Some(d) = self.done.get_mut(&t.id) {
                        d.enqueued_at = t.enqueued_at;
                        d.entered_at = t.entered_at;
                    }
                }
            }
            Record::Finished(f) => {
                self.complete(&f.acked, loc, len, (f.result.is_some(), true), true);
            }
            Record::Kept { acked, results } => {
                let share = len / u32::try_from(acked.len().max(1)).unwrap_or(u32::MAX);
                for (a, r) in acked.iter().zip(results) {
                    // Counted when first acknowledged.
                    self.complete(a, loc, share.max(1), (r.is_some(), false), false);
                }
            }
            Record::KeptFinished { finished } => {
                let share = len / u32::try_from(finished.len().max(1)).unwrap_or(u32::MAX);
                for f in finished {
                    let held = (f.result.is_some(), true);
                    self.complete(&f.acked, loc, share.max(1), held, false);
                }
            }
            Record::Remove { ids, reason, .. } => {
                for id in ids {
                    if let Some(m) = self.remove(*id) {
                        if *reason == RemoveReason::Expired
                            && let Some(t) = self.totals(m.qid)
                        {
                            t.expired += 1;
                        }
                    } else {
                        self.forget_done(*id);
                    }
                }
            }
            Record::Purge { qid } => {
                let ids: Vec<u64> = match self.queues.get(qid) {
                    Some(q) => q.ids().collect(),
                    None => return,
                };
                for id in ids {
                    self.remove(id);
                }
            }
            Record::Dedup {
                qid,
                key,
                id,
                until,
            } => {
                if let Some(q) = self.queues.get_mut(qid) {
                    q.register_dedup(
                        key.clone(),
                        DedupEntry {
                            id: *id,
                            until: *until,
                            seg: loc.seg,
                        },
                    );
                }
            }
            Record::Samples { at, entries } => {
                let keep_from =
                    at.saturating_sub(sluice_core::stats::HISTORY_KEPT.as_millis() as i64);
                for (qid, sample) in entries {
                    if let Some(q) = self.queues.get_mut(qid) {
                        if q.history.back().is_none_or(|last| last.at < sample.at) {
                            q.history.push_back(*sample);
                        }
                        while q
                            .history
                            .front()
                            .is_some_and(|s| s.at.as_millis() < keep_from)
                        {
                            q.history.pop_front();
                        }
                    }
                }
                self.history_segs.insert(*at, loc.seg);
                self.history_segs.retain(|t, _| *t >= keep_from);
            }
            Record::Cancel { id } => {
                if let Some(m) = self.msgs.get_mut(id) {
                    m.request_cancel();
                }
            }
            Record::Idempotent {
                key,
                until,
                response,
            } => {
                let created_at = response.created_at.as_millis();
                // First writer wins while its entry is kept; an entry that had run out when
                // this one was written is replaced. A compaction copy of the kept entry (the
                // same end) moves it to where the copy is.
                if self
                    .idem
                    .get(key)
                    .is_some_and(|r| r.until > created_at && r.until != *until)
                {
                    return;
                }
                if let Some(old) = self.idem.insert(
                    key.clone(),
                    Remembered {
                        until: *until,
                        loc,
                        len,
                    },
                ) {
                    sub_live(&mut self.live, old.loc, old.len);
                }
                *self.live.entry(loc.seg).or_default() += u64::from(len);
                self.idem_order.push_back((*until, key.clone()));
            }
            Record::Tokens { upto } => {
                self.token_limit = self.token_limit.max(*upto);
            }
            Record::Checkpoint(c) => {
                self.next_id = self.next_id.max(c.next_id);
                self.next_token = self.next_token.max(c.next_token);
                for (qid, totals) in &c.totals {
                    if let Some(t) = self.totals(*qid) {
                        *t = *totals;
                    }
                }
            }
        }
    }

    /// Applies a full message record (a send, a firing's message, a compaction copy), with
    /// its FIFO group if it has one.
    fn apply_message(
        &mut self,
        m: &MessageRecord,
        loc: Loc,
        len: u32,
        group: Option<&GroupTag>,
        tag: Option<&TagRecord>,
    ) {
        // Saturating: a record that passed its checksum may still hold any number (a bug,
        // an incompatible version), and replay must not panic on it.
        self.next_id = self.next_id.max(m.id.saturating_add(1));
        if let Some(g) = group {
            self.next_id = self.next_id.max(g.order.saturating_add(1));
        }
        if let Some((token, _)) = m.lease {
            self.next_token = self.next_token.max(token.saturating_add(1));
        }
        self.ghost_for(m.qid);
        if !self.queues.contains_key(&m.qid) {
            return;
        }
        // A compaction copy of a grouped message keeps its place in its group's line.
        let mut in_line = false;
        if let Some(old) = self.detach(m.id) {
            self.msgs.remove(&m.id);
            if old.grouped() {
                in_line = old.qid == m.qid
                    && group.is_some_and(|g| {
                        self.members
                            .get(&m.id)
                            .is_some_and(|p| p.order == g.order && *p.group == *g.name)
                    });
                if !in_line {
                    self.leave(m.id, old.qid);
                }
            }
            self.unaccount(&old);
            self.summary.remove(old.qid, m.id);
            self.tags.remove(&m.id);
        }
        self.summary
            .on_message(m.qid, m.id, &m.rich, m.enqueued_at, &m.attributes);
        let (slot, at, token) = match m.lease {
            Some((token, deadline)) => (Slot::Leased, deadline, token),
            None => (Slot::Delayed, m.visible_at, 0),
        };
        let mut msg = Msg::new(
            m.qid,
            slot,
            m.receive_count,
            token,
            at,
            m.entered_at,
            loc,
            len,
            loc,
        );
        if group.is_some() {
            msg.set_grouped();
        }
        self.keep_tag(&mut msg, m.id, tag);
        if m.entered_at != m.enqueued_at {
            msg.set_entered_later();
        }
        msg.set_history(!m.rich.attempts.is_empty());
        self.account(&msg);
        self.attach(m.id, msg);
        if let Some(g) = group
            && !in_line
        {
            self.join(m.id, m.qid, std::sync::Arc::from(g.name.as_str()), g.order);
        }
        let q = self.queues.get_mut(&m.qid).expect("checked above");
        if m.origin == crate::journal::record::Origin::Send {
            q.totals.sent += 1;
        }
        if m.origin == crate::journal::record::Origin::Send
            && let Some((key, until)) = &m.dedup
            && *until > m.enqueued_at
        {
            q.register_dedup(
                key.clone(),
                DedupEntry {
                    id: m.id,
                    until: *until,
                    seg: loc.seg,
                },
            );
        }
    }

    /// Applies a redrive step; `orders` gives the new place of each grouped message it
    /// moves, in the order of `moves`.
    fn apply_redrive(
        &mut self,
        job: sluice_core::RedriveJob,
        moves: &[crate::journal::record::UpdateRecord],
        loc: Loc,
        orders: &[(u64, u64)],
    ) {
        let mut orders = orders.iter().peekable();
        for u in moves {
            let order = orders.next_if(|(id, _)| *id == u.id).map(|(_, o)| *o);
            self.apply_update(u, loc, order);
        }
        self.next_id = self.next_id.max(job.id.0.saturating_add(1));
        self.jobs.insert(job.id.0, job);
    }

    /// Applies an update; `order` is the new place in its group's line of a grouped message
    /// that it brings into another queue.
    fn apply_update(
        &mut self,
        u: &crate::journal::record::UpdateRecord,
        loc: Loc,
        order: Option<u64>,
    ) {
        self.progress.remove(&u.id);
        self.holders.remove(&u.id);
        self.count_update(u.event, u.qid);
        if let Some(o) = order {
            self.next_id = self.next_id.max(o.saturating_add(1));
        }
        let Some(old) = self.detach(u.id) else { return };
        self.ghost_for(u.qid);
        let mut msg = old;
        msg.qid = u.qid;
        msg.set_slot(Slot::Delayed);
        msg.set_receive_count(u.receive_count);
        msg.at = u.visible_at;
        if u.entered_at != msg.entered_at {
            msg.set_entered_later();
        }
        msg.entered_at = u.entered_at;
        msg.aux = loc;
        msg.set_history(!u.rich.attempts.is_empty());
        self.msgs.insert(u.id, msg);
        self.summary
            .on_update(old.qid, u.qid, u.id, &u.rich, old.entered_at);
        // A grouped message that changes queue (or place) leaves its line and joins the
        // line of its group where it now is; a retry in its queue keeps its place.
        let rejoin = if old.grouped()
            && (old.qid != u.qid
                || order.is_some_and(|o| self.members.get(&u.id).is_some_and(|p| p.order != o)))
        {
            self.leave(u.id, old.qid)
        } else {
            None
        };
        if self.queues.contains_key(&u.qid) {
            self.attach(u.id, msg);
            if let Some(p) = rejoin {
                self.join(u.id, u.qid, p.group, order.unwrap_or(p.order));
            }
        } else {
            self.remove(u.id);
        }
    }

    fn complete(
        &mut self,
        a: &crate::journal::record::Acked,
        loc: Loc,
        len: u32,
        (has_result, has_attempts): (bool, bool),
        count: bool,
    ) {
        self.remove(a.id);
        if count
            && !a.cancelled
            && let Some(t) = self.totals(a.qid)
        {
            t.acked += 1;
        }
        if a.keep_until > a.at && self.queues.contains_key(&a.qid) {
            self.forget_done(a.id);
            self.done.insert(
                a.id,
                Done {
                    qid: a.qid,
                    receive_count: a.receive_count,
                    at: a.at,
                    keep_until: a.keep_until,
                    loc,
                    len,
                    has_result,
                    has_attempts,
                    held: false,
                    cancelled: a.cancelled,
                    enqueued_at: a.at,
                    entered_at: a.at,
                },
            );
            if let Some(q) = self.queues.get_mut(&a.qid) {
                q.completed += 1;
            }
            *self.live.entry(loc.seg).or_default() += u64::from(len);
            self.done_order
                .entry(a.keep_until.saturating_sub(a.at))
                .or_default()
                .push_back((a.keep_until, a.id));
        }
    }

    fn count_update(&mut self, event: UpdateEvent, qid: Qid) {
        let (who, f): (Qid, fn(&mut Totals)) = match event {
            UpdateEvent::Nack => (qid, |t| t.nacked += 1),
            UpdateEvent::NackExhausted { from } => (from, |t| {
                t.nacked += 1;
                t.dead_lettered += 1;
            }),
            UpdateEvent::LeaseExpired | UpdateEvent::Moved { .. } | UpdateEvent::Released => return,
            UpdateEvent::LeaseExhausted { from } | UpdateEvent::Rejected { from } => {
                (from, |t| t.dead_lettered += 1)
            }
            UpdateEvent::Expired { from } => (from, |t| {
                t.expired += 1;
                t.dead_lettered += 1;
            }),
            UpdateEvent::Redriven => (qid, |t| t.redriven += 1),
        };
        if let Some(t) = self.totals(who) {
            f(t);
        }
    }

    /// Forgets idempotency responses past their time.
    pub fn prune_idempotent(&mut self, now: i64) {
        while let Some((until, _)) = self.idem_order.front() {
            if *until > now {
                break;
            }
            if let Some((until, key)) = self.idem_order.pop_front()
                && self.idem.get(&key).is_some_and(|r| r.until == until)
                && let Some(r) = self.idem.remove(&key)
            {
                sub_live(&mut self.live, r.loc, r.len);
            }
        }
    }

    /// Forgets completed records past their `result_ttl`.
    pub fn prune_done(&mut self, now: i64) {
        // Each time, the line whose next record is due first.
        while let Some((&ttl, &(until, id))) = self
            .done_order
            .iter()
            .filter_map(|(ttl, line)| line.front().map(|f| (ttl, f)))
            .min_by_key(|(_, (until, _))| *until)
        {
            // Past the cap the oldest records go early: RAM stays bounded at any ack rate.
            if until > now && self.done.len() <= MAX_COMPLETED {
                break;
            }
            if let Some(line) = self.done_order.get_mut(&ttl) {
                line.pop_front();
                if line.is_empty() {
                    self.done_order.remove(&ttl);
                }
            }
            if self.done.get(&id).is_some_and(|d| d.keep_until == until) {
                self.forget_done(id);
            }
        }
    }

    /// Forgets one completed record, with its share of live bytes and its queue's count.
    fn forget_done(&mut self, id: u64) -> Option<Done> {
        let d = self.done.remove(&id)?;
        sub_live(&mut self.live, d.loc, d.len);
        if let Some(q) = self.queues.get_mut(&d.qid) {
            q.completed = q.completed.saturating_sub(1);
        }
        Some(d)
    }
}

/// Lease tokens reserved per [`Record::Tokens`]: one waited sync per this many leases, and
/// the most tokens a restart skips.
pub(crate) const TOKEN_BLOCK: u64 = 1 << 16;

/// Most completed records kept in memory (about 50 MB); beyond it the oldest are forgotten
/// before their `result_ttl`, so a high ack rate cannot exhaust RAM.
pub(crate) const MAX_COMPLETED: usize = 1_000_000;

fn sub_live(live: &mut IdMap<u32, u64>, loc: Loc, len: u32) {
    if let Some(v) = live.get_mut(&loc.seg) {
        *v = v.saturating_sub(u64::from(len));
    }
}
