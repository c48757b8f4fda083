//! How far back a lease looks for leases that ran out.
//!
//! Every lease statement also asks whether a lease of its queue ran out, so that the receive
//! expires it and delivers the message at once rather than at the next maintenance round.
//! That question walks the `messages_leased` index from its oldest deadline, and every row
//! acked since the last vacuum leaves a dead entry there, with a deadline that soon passes.
//! Under load those are tens of thousands: measured at B = 1 with 4 producers and 8
//! consumers, 180 index pages and 0.85 ms for an answer of "no", in every lease, about a
//! third of the lease statement's time.
//!
//! A lease that ran out before this node's previous check of the queue was already seen by
//! that check (and expired), so each check looks only at deadlines after the previous one,
//! less [`MARGIN_MS`] for leases committed late or stamped by another node's clock. Should a
//! lease still slip past (a node whose clock is further behind, an expiry pass that skipped a row
//! another call held), each node's background expiry ends every lapsed lease within its
//! interval and wakes the queue's receives: the message is delivered a little later, never
//! lost.

use crate::hot::memo::Memo;

/// How far before the previous check a check starts, in ms.
pub(crate) const MARGIN_MS: i64 = 1_000;

/// Of one queue, when (store clock, ms) this node last asked whether a lease ran out.
#[derive(Default)]
pub(crate) struct LapseChecks(Memo<i64>);

impl LapseChecks {
    /// The deadline after which a check at `now` looks for lapsed leases (those
    /// at or before it are left to maintenance); before any check, every deadline. A clock
    /// that went back moves the start back with it.
    pub(crate) fn after(&self, now: i64) -> i64 {
        self.0
            .get()
            .map_or(i64::MIN, |last| last.min(now).saturating_sub(MARGIN_MS))
    }

    /// Notes that a lease checked for lapsed leases at `now`.
    pub(crate) fn checked(&self, now: i64) {
        self.0.set(now);
    }

    /// Forgets the checks (the queue was deleted).
    pub(crate) fn clear(&self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_looks_back_to_the_previous_one_less_the_margin() {
        let (checks, other) = (LapseChecks::default(), LapseChecks::default());
        assert_eq!(checks.after(10_000), i64::MIN, "first check: everything");
        checks.checked(10_000);
        assert_eq!(checks.after(12_000), 10_000 - MARGIN_MS);
        assert_eq!(other.after(12_000), i64::MIN);
        // A clock set back: the check starts before the time it now reads.
        assert_eq!(checks.after(5_000), 5_000 - MARGIN_MS);
        checks.clear();
        assert_eq!(checks.after(12_000), i64::MIN);
    }
}
