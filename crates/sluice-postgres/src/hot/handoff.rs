//! Sends handed straight to receives waiting on the same node.
//!
//! At one message per call, a message that a waiting receive takes costs three statements:
//! the send's insert, the receive's lease and the ack. The lease is the largest of them
//! (measured with `pg_stat_statements`, B = 1: about one lease statement per message), and
//! its database time is time the sends, which wait for their commit, do not get. So when a
//! plain send finds receives of its queue long-polling on this node, it inserts up to as
//! many messages as they wait for already leased (`state = 1`, a token, the deadline of the
//! receives' lease length, a receive counted), and after the commit holds them for those
//! receives as messages read ahead are held ([`crate::hot::read_ahead::hold`]) and wakes them.
//! A woken receive takes them without a statement.
//!
//! The count of waiting receives is a hint, never a promise: a receive that went away, or
//! woke for another message, leaves what was inserted for it held until
//! [`crate::hot::read_ahead::HOLD`] runs out, after which it is released (back to waiting, its
//! receive count as before) and delivered as usual. A paused queue hands nothing out that
//! is held; queues with `rate_limit` or `max_in_flight` never hand off, as those limits
//! count leases under the queue's row lock.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Of one queue, per lease length, how many messages the receives long-polling on this node
/// wait for (the sum of their `max`), less what sends handed them since.
#[derive(Default)]
pub(crate) struct Waiting(Mutex<Vec<(Duration, usize)>>);

/// A receive waiting for messages of a queue: counted in [`Waiting`] until dropped.
pub(crate) struct Wait<'a> {
    waiting: &'a Waiting,
    lease: Duration,
    max: usize,
}

impl Waiting {
    /// Counts a receive waiting for up to `max` messages leased for `lease`.
    pub(crate) fn enter(&self, lease: Duration, max: usize) -> Wait<'_> {
        let mut list = self.list();
        match list.iter_mut().find(|(l, _)| *l == lease) {
            Some((_, wanted)) => *wanted += max,
            None => list.push((lease, max)),
        }
        Wait {
            waiting: self,
            lease,
            max,
        }
    }

    /// Claims up to `n` messages for receives waiting with leases of at least `shortest`,
    /// all of one lease length (the one most waited for): that length and how many, or
    /// `None` when none wait.
    pub(crate) fn claim(&self, n: usize, shortest: Duration) -> Option<(Duration, usize)> {
        let mut list = self.list();
        let (lease, wanted) = list
            .iter_mut()
            .filter(|(lease, wanted)| *wanted > 0 && *lease >= shortest)
            .max_by_key(|(_, wanted)| *wanted)?;
        let k = n.min(*wanted);
        *wanted -= k;
        (k > 0).then_some((*lease, k))
    }

    /// Forgets every waiting receive (the queue was deleted).
    pub(crate) fn clear(&self) {
        self.list().clear();
    }

    fn leave(&self, lease: Duration, max: usize) {
        if let Some((_, wanted)) = self.list().iter_mut().find(|(l, _)| *l == lease) {
            // What sends claimed for this receive is already gone from the count.
            *wanted = wanted.saturating_sub(max);
        }
    }

    fn list(&self) -> MutexGuard<'_, Vec<(Duration, usize)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.waiting.leave(self.lease, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);
    const ANY: Duration = Duration::ZERO;

    #[test]
    fn sends_claim_what_waiting_receives_want_and_no_more() {
        let (w, other) = (Waiting::default(), Waiting::default());
        assert_eq!(w.claim(5, ANY), None, "nobody waits");
        let a = w.enter(LEASE, 1);
        let b = w.enter(LEASE, 3);
        let short = w.enter(Duration::from_secs(5), 1);
        assert_eq!(
            w.claim(2, Duration::from_secs(60)),
            None,
            "no lease that long waits"
        );
        assert_eq!(w.claim(2, ANY), Some((LEASE, 2)));
        assert_eq!(w.claim(5, ANY), Some((LEASE, 2)), "only what is left");
        assert_eq!(
            w.claim(5, ANY),
            Some((Duration::from_secs(5), 1)),
            "then the other lease length"
        );
        assert_eq!(w.claim(5, ANY), None, "all claimed");
        assert_eq!(other.claim(1, ANY), None);
        drop((a, b, short));
        assert_eq!(
            w.claim(1, ANY),
            None,
            "receives that left are not waited for"
        );
        let c = w.enter(LEASE, 3);
        assert_eq!(w.claim(1, ANY), Some((LEASE, 1)));
        drop(c);
        assert_eq!(
            w.claim(1, ANY),
            None,
            "a claimed receive leaving takes the rest"
        );
        let _d = w.enter(LEASE, 1);
        w.clear();
        assert_eq!(w.claim(1, ANY), None, "forgotten with its queue");
    }
}
