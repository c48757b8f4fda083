//! FIFO groups in the index: each grouped message's membership, and the moves between
//! `ready` and `parked` that keep only the front of each group's line deliverable.
//!
//! A group's line in a queue (`QueueState::groups`) holds its members in every slot, ordered
//! by the place each was given when it entered the queue (its id for a send; a fresh number
//! from the same sequence for a dead-lettering, move or redrive, so it goes to the end). The
//! rule: a member may be in `ready` only while it is among the first N of its line (N being the
//! queue's `max_in_flight_per_group`); a due member further back is [`Slot::Parked`]. A member
//! among the first N that is delayed (a send delay, a retry backoff) or leased holds its place,
//! so the members behind it wait. When a member leaves the line (acknowledged, dead-lettered,
//! moved, deleted, purged) the next one moves up and, if it is due, becomes deliverable.
//!
//! Every change costs O(log n + N); nothing here scans a queue, and a message without a group
//! never reaches this code (its `Msg` says so in a bit).

use std::collections::BTreeSet;
use std::sync::Arc;

use sluice_core::{GroupName, Timestamp};

use super::{Msg, QueueState, Slot, State};
use crate::journal::record::{Qid, UpdateRecord};

/// A grouped message's membership: its group and its place in the group's line.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// The group's name, shared with the line's key.
    pub group: Arc<str>,
    /// Its place in the line.
    pub order: u64,
}

/// How many members at the front of a line of `q` may be delivered.
fn window(q: &QueueState) -> usize {
    q.config.max_in_flight_per_group.max(1) as usize
}

/// True when `key` is among the first `n` entries of `line` (whether or not it is in it).
fn in_front(line: &BTreeSet<(u64, u64)>, key: (u64, u64), n: usize) -> bool {
    line.range(..key).nth(n - 1).is_none()
}

/// Makes a parked member deliverable, and wakes the queue's long-polling receives: whatever
/// let the group move on (an ack, a dead-lettering, a move) does not wake them itself.
fn unpark(q: &mut QueueState, msgs: &mut super::IdMap<u64, Msg>, tags: &Tags, id: u64) {
    if let Some(m) = msgs.get_mut(&id)
        && m.slot() == Slot::Parked
    {
        let tag = super::tag_in(tags, m, id);
        q.take(Slot::Parked, m.at, id, tag);
        q.put(Slot::Ready, m.at, id, tag);
        m.set_slot(Slot::Ready);
        q.notify.notify_waiters();
    }
}

/// Makes a deliverable member wait for its group.
fn park(q: &mut QueueState, msgs: &mut super::IdMap<u64, Msg>, tags: &Tags, id: u64) {
    if let Some(m) = msgs.get_mut(&id)
        && m.slot() == Slot::Ready
    {
        let tag = super::tag_in(tags, m, id);
        q.take(Slot::Ready, m.at, id, tag);
        q.put(Slot::Parked, m.at, id, tag);
        m.set_slot(Slot::Parked);
    }
}

type Tags = super::IdMap<u64, super::Tag>;

/// Whether due message `id` of `q` may be delivered: it has no group, or it is at the front of
/// its group's line.
fn deliverable(q: &QueueState, members: &super::IdMap<u64, Member>, id: u64) -> bool {
    let Some(m) = members.get(&id) else {
        return true;
    };
    q.groups
        .get(&*m.group)
        .is_none_or(|line| in_front(line, (m.order, id), window(q)))
}

/// Where a due message goes when it leaves the delayed index: deliverable, or parked behind
/// the front of its group's line.
pub(super) fn due_slot(
    q: &QueueState,
    members: &super::IdMap<u64, Member>,
    m: &Msg,
    id: u64,
) -> Slot {
    if m.grouped() && !deliverable(q, members, id) {
        Slot::Parked
    } else {
        Slot::Ready
    }
}

impl State {
    /// The FIFO group of live message `id`, if it has one.
    pub fn group_of(&self, id: u64) -> Option<GroupName> {
        let m = self.members.get(&id)?;
        GroupName::new(&*m.group).ok()
    }

    /// The place a grouped message gets when update `u` brings it into another queue: a fresh
    /// number from the id sequence, so it goes to the end of its group's line there. `None`
    /// for an ungrouped message or an update within its queue (a retry keeps its place).
    pub fn place_for(&mut self, u: &UpdateRecord, now: i64) -> Option<u64> {
        let m = self.msgs.get(&u.id)?;
        (m.grouped() && m.qid != u.qid).then(|| self.draw_id(Timestamp(now)))
    }

    /// Puts message `id`, attached in queue `qid`, in its group's line at `order`.
    pub(super) fn join(&mut self, id: u64, qid: Qid, group: Arc<str>, order: u64) {
        let State {
            queues, msgs, tags, ..
        } = self;
        let Some(q) = queues.get_mut(&qid) else {
            return;
        };
        let n = window(q);
        // Members of a group share one name: the line's key.
        let group = match q.groups.get_key_value(&*group) {
            Some((k, _)) => k.clone(),
            None => group,
        };
        let line = q.groups.entry(group.clone()).or_default();
        let key = (order, id);
        line.insert(key);
        // Placed ahead of members already in the window (only a replayed or copied record
        // can be): the one it pushed out of the window waits again.
        let pushed_out = (line.len() > n && in_front(line, key, n))
            .then(|| line.iter().nth(n).map(|(_, id)| *id))
            .flatten();
        if let Some(out) = pushed_out {
            park(q, msgs, tags, out);
        }
        self.members.insert(id, Member { group, order });
    }

    /// Takes message `id` out of its group's line in queue `qid` (if it is in one). The
    /// member that moves up into the window becomes deliverable if it is due.
    pub(super) fn leave(&mut self, id: u64, qid: Qid) -> Option<Member> {
        let member = self.members.remove(&id)?;
        let State {
            queues, msgs, tags, ..
        } = self;
        let Some(q) = queues.get_mut(&qid) else {
            return Some(member);
        };
        let n = window(q);
        let key = (member.order, id);
        let Some(line) = q.groups.get_mut(&*member.group) else {
            return Some(member);
        };
        let was_in_front = in_front(line, key, n);
        if !line.remove(&key) {
            return Some(member);
        }
        let moved_up = if was_in_front {
            line.iter().nth(n - 1).map(|(_, id)| *id)
        } else {
            None
        };
        if line.is_empty() {
            q.groups.remove(&*member.group);
        }
        if let Some(next) = moved_up {
            unpark(q, msgs, tags, next);
        }
        Some(member)
    }

    /// Re-sorts every group line of queue `qid` after its `max_in_flight_per_group` changed:
    /// parked members now in front become deliverable, deliverable ones now behind wait.
    /// Leased members stay leased. Runs on a config change only, so it may visit every
    /// grouped message of the queue.
    pub fn regroup_queue(&mut self, qid: Qid) {
        let State {
            queues, msgs, tags, ..
        } = self;
        let Some(q) = queues.get_mut(&qid) else {
            return;
        };
        let n = window(q);
        let mut up = Vec::new();
        let mut down = Vec::new();
        for line in q.groups.values() {
            for (i, (_, id)) in line.iter().enumerate() {
                match msgs.get(id).map(Msg::slot) {
                    Some(Slot::Parked) if i < n => up.push(*id),
                    Some(Slot::Ready) if i >= n => down.push(*id),
                    _ => {}
                }
            }
        }
        for id in up {
            unpark(q, msgs, tags, id);
        }
        for id in down {
            park(q, msgs, tags, id);
        }
    }
}
