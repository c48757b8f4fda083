//! Time passing in the index: delayed messages whose time has come become visible. The one
//! change made without a record, since it follows from the stored `visible_at`.

use super::{Slot, State, groups, tag_in};
use crate::journal::record::Qid;

impl State {
    /// Makes delayed messages whose time has come visible: deliverable, or parked behind the
    /// front of their FIFO group's line. Returns how many became deliverable.
    pub fn promote(&mut self, qid: Qid, now: i64) -> usize {
        let State {
            queues,
            msgs,
            members,
            tags,
            ..
        } = self;
        let Some(q) = queues.get_mut(&qid) else {
            return 0;
        };
        let mut n = 0;
        while let Some(&(at, id)) = q.delayed.first() {
            if at > now {
                break;
            }
            let Some(m) = msgs.get_mut(&id) else {
                q.delayed.pop_first();
                continue;
            };
            let tag = tag_in(tags, m, id);
            q.take(Slot::Delayed, at, id, tag);
            // A grouped message behind the front of its line waits for its group.
            let slot = groups::due_slot(q, members, m, id);
            m.set_slot(slot);
            q.put(slot, at, id, tag);
            if slot == Slot::Ready {
                n += 1;
            }
        }
        n
    }
}
