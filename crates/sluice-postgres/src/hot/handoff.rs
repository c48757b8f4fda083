//! Sends handed straight to receives waiting on the same node.
//!
//! At one message per call, a message that a waiting receive takes costs three statements:
//! the send's insert, the receive's lease and the ack. The lease is the largest of them
//! (measured with `pg_stat_statements`, B = 1: about one lease statement per message), and
//! its database time is time the sends, which wait for their commit, do not get. So when a
//! plain send finds receives of its queue long-polling on this node, it inserts up to as
//! many messages as they wait for already leased (`state = 1`, a token, the deadline of the
//! receives' lease length, a receive counted, the receives' consumer name as the holder),
//! and after the commit holds them for those receives as messages read ahead are held
//! ([`crate::hot::read_ahead::hold`]) and wakes them. A woken receive of that consumer takes
//! them without a statement. Receives are counted per lease length and consumer name, and a
//! send hands off to one of them: the receives that take its messages are those it leased
//! them for.
//!
//! The count of waiting receives is a hint, never a promise: a receive that went away, or
//! woke for another message, leaves what was inserted for it held until
//! [`crate::hot::read_ahead::HOLD`] runs out, after which it is released (back to waiting, its
//! receive count as before) and delivered as usual. A paused queue hands nothing out that
//! is held; queues with `rate_limit` or `max_in_flight` never hand off, as those limits
//! count leases under the queue's row lock.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

/// Of one queue, per lease length and consumer name (or none), how many messages the
/// receives long-polling on this node wait for (the sum of their `max`), less what sends
/// handed them since.
#[derive(Default)]
pub(crate) struct Waiting(Mutex<Vec<Receives>>);

/// The receives of one lease length and consumer name waiting.
struct Receives {
    lease: Duration,
    consumer: Option<String>,
    wanted: usize,
    /// Wakes them when messages are handed to them: only they can take those.
    handed: Arc<Notify>,
}

/// A receive waiting for messages of a queue: counted in [`Waiting`] until dropped.
pub(crate) struct Wait<'a> {
    waiting: &'a Waiting,
    lease: Duration,
    consumer: Option<String>,
    max: usize,
    handed: Arc<Notify>,
}

impl Wait<'_> {
    /// Returns once messages were handed to the receives this one waits with (or were
    /// before it started waiting, and nobody took that wake-up).
    pub(crate) async fn handed(&self) {
        self.handed.notified().await;
    }
}

/// Messages a send claimed for waiting receives: their lease length, the name those
/// receives gave, and how many.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) lease: Duration,
    pub(crate) consumer: Option<String>,
    pub(crate) count: usize,
}

impl Waiting {
    /// Counts a receive of `consumer` waiting for up to `max` messages leased for `lease`.
    pub(crate) fn enter(&self, lease: Duration, consumer: Option<String>, max: usize) -> Wait<'_> {
        let mut list = self.list();
        let handed = match list
            .iter_mut()
            .find(|r| r.lease == lease && r.consumer == consumer)
        {
            Some(r) => {
                r.wanted += max;
                r.handed.clone()
            }
            None => {
                let handed = Arc::new(Notify::new());
                list.push(Receives {
                    lease,
                    consumer: consumer.clone(),
                    wanted: max,
                    handed: handed.clone(),
                });
                handed
            }
        };
        Wait {
            waiting: self,
            lease,
            consumer,
            max,
            handed,
        }
    }

    /// Claims up to `n` messages for receives waiting with leases of at least `shortest`,
    /// all of one lease length and consumer (those most waited for), or `None` when none
    /// wait.
    pub(crate) fn claim(&self, n: usize, shortest: Duration) -> Option<Claim> {
        let mut list = self.list();
        let r = list
            .iter_mut()
            .filter(|r| r.wanted > 0 && r.lease >= shortest)
            .max_by_key(|r| r.wanted)?;
        let k = n.min(r.wanted);
        r.wanted -= k;
        (k > 0).then(|| Claim {
            lease: r.lease,
            consumer: r.consumer.clone(),
            count: k,
        })
    }

    /// Wakes up to `n` receives of `consumer` waiting with leases of `lease`: `n` messages
    /// were handed to them.
    pub(crate) fn wake(&self, lease: Duration, consumer: Option<&str>, n: usize) {
        let list = self.list();
        if let Some(r) = list
            .iter()
            .find(|r| r.lease == lease && r.consumer.as_deref() == consumer)
        {
            (0..n).for_each(|_| r.handed.notify_one());
        }
    }

    /// Forgets every waiting receive (the queue was deleted).
    pub(crate) fn clear(&self) {
        self.list().clear();
    }

    fn leave(&self, lease: Duration, consumer: &Option<String>, max: usize) {
        let mut list = self.list();
        if let Some(i) = list
            .iter()
            .position(|r| r.lease == lease && r.consumer == *consumer)
        {
            // What sends claimed for this receive is already gone from the count.
            let wanted = &mut list[i].wanted;
            *wanted = wanted.saturating_sub(max);
            if *wanted == 0 {
                // Consumers come and go: their names are not kept once nobody waits.
                list.swap_remove(i);
            }
        }
    }

    fn list(&self) -> MutexGuard<'_, Vec<Receives>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.waiting.leave(self.lease, &self.consumer, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);
    const ANY: Duration = Duration::ZERO;

    fn claim(lease: Duration, consumer: Option<&str>, count: usize) -> Option<Claim> {
        Some(Claim {
            lease,
            consumer: consumer.map(str::to_owned),
            count,
        })
    }

    #[test]
    fn sends_claim_what_waiting_receives_want_and_no_more() {
        let (w, other) = (Waiting::default(), Waiting::default());
        assert_eq!(w.claim(5, ANY), None, "nobody waits");
        let a = w.enter(LEASE, None, 1);
        let b = w.enter(LEASE, None, 3);
        let short = w.enter(Duration::from_secs(5), None, 1);
        assert_eq!(
            w.claim(2, Duration::from_secs(60)),
            None,
            "no lease that long waits"
        );
        assert_eq!(w.claim(2, ANY), claim(LEASE, None, 2));
        assert_eq!(w.claim(5, ANY), claim(LEASE, None, 2), "only what is left");
        assert_eq!(
            w.claim(5, ANY),
            claim(Duration::from_secs(5), None, 1),
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
        let c = w.enter(LEASE, None, 3);
        assert_eq!(w.claim(1, ANY), claim(LEASE, None, 1));
        drop(c);
        assert_eq!(
            w.claim(1, ANY),
            None,
            "a claimed receive leaving takes the rest"
        );
        let _d = w.enter(LEASE, None, 1);
        w.clear();
        assert_eq!(w.claim(1, ANY), None, "forgotten with its queue");
    }

    #[test]
    fn a_claim_is_for_the_receives_of_one_consumer() {
        let w = Waiting::default();
        let a = w.enter(LEASE, Some("w1".into()), 1);
        let b = w.enter(LEASE, Some("w2".into()), 2);
        let c = w.enter(LEASE, Some("w1".into()), 2);
        assert_eq!(
            w.claim(5, ANY),
            claim(LEASE, Some("w1"), 3),
            "most waited for"
        );
        assert_eq!(w.claim(5, ANY), claim(LEASE, Some("w2"), 2));
        assert_eq!(w.claim(5, ANY), None);
        drop((a, b, c));
        assert!(w.list().is_empty(), "names forgotten once nobody waits");
    }

    #[tokio::test]
    async fn handing_off_wakes_the_receives_it_is_for() {
        let w = Waiting::default();
        let a = w.enter(LEASE, Some("w1".into()), 1);
        let b = w.enter(LEASE, Some("w2".into()), 1);
        w.wake(LEASE, Some("w1"), 1);
        let woken = tokio::time::timeout(Duration::from_millis(50), a.handed()).await;
        assert!(woken.is_ok(), "w1's receive is woken");
        let woken = tokio::time::timeout(Duration::from_millis(50), b.handed()).await;
        assert!(woken.is_err(), "w2's is not");
    }
}
