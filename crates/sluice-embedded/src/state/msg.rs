//! One live message as the index keeps it: a packed struct, because it is the RAM cost of
//! every queued message.

use crate::journal::log::Loc;
use crate::journal::record::Qid;

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Waiting for `at`.
    Delayed,
    /// Ready since `at`.
    Ready,
    /// Leased until `at`.
    Leased,
    /// Due since `at`, but waiting for its FIFO group: not among the group's first
    /// `max_in_flight_per_group` members, so not deliverable yet.
    Parked,
}

/// One live message, as kept in memory: 48 bytes, plus its map slot and one index entry.
///
/// Fields are packed because this struct is the RAM cost of a queued message: the slot rides
/// in the top bits of the receive count, and only the low 32 bits of the lease token are kept
/// (a stale receipt could pass only after 2^32 further leases of the same message).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Msg {
    pub qid: Qid,
    count_slot: u32,
    token_lo: u32,
    /// Frame length of the body record, for live-byte accounting.
    pub body_len: u32,
    /// Visible-at (delayed, ready) or lease deadline (leased), in ms.
    pub at: i64,
    /// When it entered its current queue, in ms (retention).
    pub entered_at: i64,
    /// The record holding the body (and the rest of the immutable fields).
    pub body: Loc,
    /// The newest record holding the rich fields (attempts, last error, dead-letter info).
    pub aux: Loc,
}

const SLOT_SHIFT: u32 = 30;
const CANCEL_BIT: u32 = 1 << 29;
/// The message belongs to a FIFO group (its membership is in `State::members`): only such
/// messages pay for a group lookup.
const GROUP_BIT: u32 = 1 << 28;
/// Its rich fields hold failed attempts: an ack must carry them into the completed record.
/// Messages without history (the common case) are acked without reading the log.
const HISTORY_BIT: u32 = 1 << 27;
/// It entered its queue after it was sent (dead-lettered, moved, redriven): its `entered_at`
/// is not its send time, which only its base record holds. Messages still in the queue they
/// were sent to (the common case) complete without reading the log for it.
const LATER_BIT: u32 = 1 << 26;
/// It carries a key or a priority (its [`Tag`](super::lanes::Tag) is in `State::tags`):
/// only such messages pay for a tag lookup.
const TAG_BIT: u32 = 1 << 25;
const COUNT_MASK: u32 = TAG_BIT - 1;

impl Msg {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        qid: Qid,
        slot: Slot,
        receive_count: u32,
        token: u64,
        at: i64,
        entered_at: i64,
        body: Loc,
        body_len: u32,
        aux: Loc,
    ) -> Self {
        let mut m = Msg {
            qid,
            count_slot: 0,
            token_lo: token as u32,
            body_len,
            at,
            entered_at,
            body,
            aux,
        };
        m.set_receive_count(receive_count);
        m.set_slot(slot);
        m
    }

    pub fn slot(&self) -> Slot {
        match self.count_slot >> SLOT_SHIFT {
            0 => Slot::Delayed,
            1 => Slot::Ready,
            2 => Slot::Leased,
            _ => Slot::Parked,
        }
    }

    pub fn set_slot(&mut self, slot: Slot) {
        let bits = match slot {
            Slot::Delayed => 0,
            Slot::Ready => 1,
            Slot::Leased => 2,
            Slot::Parked => 3,
        };
        // The group and history marks stay; a cancellation request ends with the slot it was
        // made in.
        self.count_slot = (self.count_slot
            & (COUNT_MASK | GROUP_BIT | HISTORY_BIT | LATER_BIT | TAG_BIT))
            | (bits << SLOT_SHIFT);
    }

    pub fn receive_count(&self) -> u32 {
        self.count_slot & COUNT_MASK
    }

    pub fn set_receive_count(&mut self, n: u32) {
        self.count_slot = (self.count_slot & !COUNT_MASK) | n.min(COUNT_MASK);
    }

    /// Cancellation was requested while it ran.
    pub fn cancel_requested(&self) -> bool {
        self.count_slot & CANCEL_BIT != 0
    }

    pub fn request_cancel(&mut self) {
        self.count_slot |= CANCEL_BIT;
    }

    /// It belongs to a FIFO group.
    pub fn grouped(&self) -> bool {
        self.count_slot & GROUP_BIT != 0
    }

    /// Marks it as a member of a FIFO group.
    pub fn set_grouped(&mut self) {
        self.count_slot |= GROUP_BIT;
    }

    /// It carries a key or a priority.
    pub fn tagged(&self) -> bool {
        self.count_slot & TAG_BIT != 0
    }

    /// Marks it as carrying a key or a priority.
    pub fn set_tagged(&mut self) {
        self.count_slot |= TAG_BIT;
    }

    /// It entered its queue after its send, so `entered_at` is not its send time.
    pub fn entered_later(&self) -> bool {
        self.count_slot & LATER_BIT != 0
    }

    /// Marks it as having entered its queue after its send.
    pub fn set_entered_later(&mut self) {
        self.count_slot |= LATER_BIT;
    }

    /// Its newest rich fields record failed attempts.
    pub fn has_history(&self) -> bool {
        self.count_slot & HISTORY_BIT != 0
    }

    /// Says whether its newest rich fields record failed attempts.
    pub fn set_history(&mut self, history: bool) {
        if history {
            self.count_slot |= HISTORY_BIT;
        } else {
            self.count_slot &= !HISTORY_BIT;
        }
    }

    /// True when `token` names this message's current lease.
    pub fn holds(&self, token: u64) -> bool {
        self.slot() == Slot::Leased && self.token_lo == token as u32
    }

    pub fn set_token(&mut self, token: u64) {
        self.token_lo = token as u32;
    }

    /// The (low bits of the) current lease token, for compaction's copy of the message.
    pub fn token(&self) -> u64 {
        u64::from(self.token_lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_message_costs_48_bytes_of_struct() {
        assert_eq!(std::mem::size_of::<Msg>(), 48);
    }

    #[test]
    fn packed_fields_round_trip() {
        let loc = Loc { seg: 1, off: 2 };
        let mut m = Msg::new(3, Slot::Leased, 1000, u64::MAX, 5, 6, loc, 7, loc);
        assert_eq!((m.slot(), m.receive_count()), (Slot::Leased, 1000));
        assert!(m.holds(u64::MAX));
        m.set_slot(Slot::Ready);
        assert!(!m.holds(u64::MAX));
        m.set_receive_count(7);
        assert_eq!((m.slot(), m.receive_count()), (Slot::Ready, 7));
        m.set_grouped();
        m.set_history(true);
        m.set_slot(Slot::Parked);
        assert!(m.has_history(), "the history mark survives a slot change");
        assert_eq!((m.slot(), m.receive_count()), (Slot::Parked, 7));
        assert!(m.grouped());
        m.request_cancel();
        m.set_receive_count(u32::MAX);
        assert!(m.grouped() && m.cancel_requested() && m.slot() == Slot::Parked);
    }
}
