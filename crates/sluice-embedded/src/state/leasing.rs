//! Leases applied to the index: each message moves to its queue's leased slot under its new
//! token, takes its key's turn, and counts as a delivery of its key.

use super::{Slot, State, tag_in};

impl State {
    /// Applies leases handed out (at `at`, when the record says): each message is leased under
    /// its new token, and counted as a delivery of its key.
    pub(super) fn apply_leases(
        &mut self,
        leases: &[crate::journal::record::Lease],
        at: Option<i64>,
    ) {
        for l in leases {
            self.holders.remove(&l.id);
            self.progress.remove(&l.id);
            self.next_token = self.next_token.max(l.token.saturating_add(1));
            // A delivery takes its key's turn (leases are applied in the order they were
            // picked, so this is the order `next_deliveries` gave).
            if let Some(m) = self.msgs.get(&l.id)
                && m.slot() == Slot::Ready
                && let Some(q) = self.queues.get_mut(&m.qid)
            {
                let tag = tag_in(&self.tags, m, l.id);
                q.serve(tag);
                // Counted while the queue delivers by key: a queue without keys or
                // priorities pays nothing per lease.
                if let Some(at) = at
                    && (tag.is_some() || q.lanes.is_some())
                {
                    q.key_counts
                        .delivered(tag.and_then(|t| t.key.as_ref()), at, 1);
                }
            }
            let Some(mut m) = self.detach(l.id) else {
                continue;
            };
            m.set_slot(Slot::Leased);
            m.at = l.deadline;
            m.set_token(l.token);
            m.set_receive_count(l.receive_count);
            self.attach(l.id, m);
            if let Some(t) = self.totals(m.qid) {
                t.received += 1;
            }
        }
    }
}
