//! Messages a node leased ahead of its receives while a queue is behind.
//!
//! At one message per receive a lease statement costs the database far more than the row it
//! leases: measured at B = 1, a statement took about 1.7 messages and was the largest part of
//! PostgreSQL's time, and with one lease statement per queue at a time it also capped how
//! fast a queue's consumers could go. So while a queue is behind on this node (its last lease
//! filled every receive with messages that had waited, see `crate::hot::backlog`), a small lease
//! takes up to [`READ_AHEAD`] messages more, and the next receives of the queue on this node
//! are answered from them without a statement.
//!
//! A held message is leased in the database: no other receive, on any node, can take it. It
//! is leased in the name of a consumer (the one a receive of its lease gave, `leased_by`),
//! and only a receive giving that name takes it, so every delivery's attempt names the
//! consumer that received it. It is held for at most [`HOLD`]; what nobody took by then is released (back to waiting, its
//! receive count as before, like `release`), so a node's consumers that went away delay
//! those messages by that much. A receive is handed a held message only while it is fresh,
//! so its lease has at most [`HOLD`] less to run than a lease taken by that receive itself.
//! While held, such messages count as in flight in the queue's stats. A node that stops
//! releases what it holds ([`release_all`], from `Messaging::close`); one killed holding some
//! leaves them leased until their visibility timeout runs out, as a consumer killed holding
//! them would, and a receive count spent that way counts toward
//! `max_receives`. A paused, purged or deleted queue, or a deleted message, hands out
//! nothing held.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::{Delivery, QueueName};
use tokio::time::Instant;

use crate::local::QueueLocal;
use crate::store::Inner;

/// How many messages more than its receives ask for a lease of a queue that is behind takes
/// (measured at one message per receive, 4 + 4 over HTTP: see `docs/benchmarks.md`).
pub(crate) const READ_AHEAD: u32 = 8;

/// The most messages one lease reads ahead, whatever the number of consumers it reads ahead
/// for.
pub(crate) const MOST_READ_AHEAD: u32 = 4 * READ_AHEAD;

/// How many messages a lease that reads `ahead` ([`ReadAhead::extra`]) takes when it reads
/// ahead for `readers` consumers ([`ReadAhead::readers`]): `ahead` for each, up to
/// [`MOST_READ_AHEAD`]. A receive takes only what was read ahead in its consumer's name, so
/// each consumer needs a share of its own: split `ahead` ways, the first consumer whose small
/// share ran out leased alone while the others' shares waited (measured at one message per
/// receive, four consumers naming themselves: about 2.9 index scans of the messages table
/// per message with 8 in all, 2.4 – 2.6 with 8 each; 2.45 when unnamed receives share 8).
pub(crate) fn for_readers(ahead: u32, readers: usize) -> u32 {
    let readers = u32::try_from(readers.max(1)).unwrap_or(u32::MAX);
    ahead
        .saturating_mul(readers)
        .min(MOST_READ_AHEAD.max(ahead))
}

/// How long a node holds a message it leased ahead before releasing it.
pub(crate) const HOLD: Duration = Duration::from_millis(100);

/// The shortest lease read ahead or handed off: at most a tenth of a lease is spent held.
pub(crate) const SHORTEST_LEASE: Duration = Duration::from_secs(1);

/// What is held for the receives of one lease length.
#[derive(Default)]
struct Held {
    /// The deliveries leased ahead, oldest first, with when they were leased.
    items: VecDeque<(Instant, Delivery)>,
    /// When receives last took the last of them.
    emptied: Option<Instant>,
}

/// What is held for the receives of one lease length that give one consumer name (or none).
type Key = (Duration, Option<String>);

fn key(lease: Duration, consumer: Option<&str>) -> Key {
    (lease, consumer.map(str::to_owned))
}

/// The deliveries a node leased ahead of the receives of one queue, per lease length and
/// consumer name (receives asking for different lease lengths share neither statements nor
/// messages; receives of different consumers share statements, not messages).
#[derive(Default)]
pub(crate) struct ReadAhead(Mutex<HashMap<Key, Held>>);

impl ReadAhead {
    /// How many messages a lease for `receives` receives that together ask for `wanted`,
    /// each `lease` long, takes beyond them: [`READ_AHEAD`] for small receives of a queue
    /// that is `behind`, when several receives wait for this lease or receives (of any
    /// consumer) took everything read ahead for them within [`HOLD`]; else none. Receives
    /// one at a time find no statement in their way, and reading ahead would only keep
    /// messages from other nodes.
    pub(crate) fn extra(&self, receives: usize, wanted: u32, lease: Duration, behind: bool) -> u32 {
        let small = (wanted as usize) < crate::hot::combine::LARGE_CALL && lease >= SHORTEST_LEASE;
        if !(behind && small) {
            return 0;
        }
        let in_demand = receives > 1
            || (self.map().iter()).any(|((l, _), h)| *l == lease && recently_emptied(h));
        if in_demand { READ_AHEAD } else { 0 }
    }

    /// The consumers to read ahead for, in turn, with a lease of `lease`: those of the
    /// receives the lease serves (`serving`, in their order), then those whose receives took
    /// everything held for them within [`HOLD`], so each consumer keeping up with the
    /// queue on this node finds some held. Forgets consumers whose receives have taken
    /// nothing held for a while and for whom nothing is held.
    pub(crate) fn readers<'a>(
        &self,
        lease: Duration,
        serving: impl Iterator<Item = Option<&'a str>>,
    ) -> Vec<Option<String>> {
        let mut names: Vec<Option<String>> = Vec::new();
        for c in serving {
            if !names.iter().any(|n| n.as_deref() == c) {
                names.push(c.map(str::to_owned));
            }
        }
        let mut map = self.map();
        map.retain(|_, h| !h.items.is_empty() || recently_emptied(h));
        let mut recent: Vec<&Option<String>> = (map.iter())
            .filter(|((l, c), h)| *l == lease && recently_emptied(h) && !names.contains(c))
            .map(|((_, c), _)| c)
            .collect();
        recent.sort_unstable();
        names.extend(recent.into_iter().cloned());
        names
    }

    /// Up to `max` held deliveries leased for `lease` in the name of `consumer` still fresh
    /// enough to hand out, oldest first.
    pub(crate) fn take(
        &self,
        lease: Duration,
        consumer: Option<&str>,
        max: usize,
    ) -> Vec<Delivery> {
        let mut map = self.map();
        let Some(held) = map.get_mut(&key(lease, consumer)) else {
            return Vec::new();
        };
        let now = Instant::now();
        let fresh_since = now.checked_sub(HOLD);
        let mut out = Vec::new();
        while out.len() < max {
            match held.items.front() {
                Some((at, _)) if fresh_since.is_none_or(|f| *at > f) => {
                    out.extend(held.items.pop_front().map(|(_, d)| d));
                }
                _ => break,
            }
        }
        if !out.is_empty() && held.items.is_empty() {
            held.emptied = Some(now);
        }
        out
    }

    /// Holds `deliveries`, leased just now for `lease` in the name of `consumer`.
    fn keep(&self, lease: Duration, consumer: Option<String>, deliveries: Vec<Delivery>) {
        let now = Instant::now();
        self.map()
            .entry((lease, consumer))
            .or_default()
            .items
            .extend(deliveries.into_iter().map(|d| (now, d)));
    }

    /// Removes and returns the deliveries of `key` held for [`HOLD`] or longer.
    fn expired(&self, key: &Key) -> Vec<Delivery> {
        let mut map = self.map();
        let Some(held) = map.get_mut(key) else {
            return Vec::new();
        };
        let Some(stale_at) = Instant::now().checked_sub(HOLD) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while held.items.front().is_some_and(|(at, _)| *at <= stale_at) {
            out.extend(held.items.pop_front().map(|(_, d)| d));
        }
        if held.items.is_empty() && held.emptied.is_none_or(|at| at <= stale_at) {
            map.remove(key);
        }
        out
    }

    /// Removes and returns every delivery held.
    fn take_all(&self) -> Vec<Delivery> {
        self.map()
            .drain()
            .flat_map(|(_, held)| held.items.into_iter().map(|(_, d)| d))
            .collect()
    }

    /// Forgets every delivery held, whatever its lease length: the queue's messages were
    /// purged or the queue deleted.
    pub(crate) fn clear(&self) {
        self.map().clear();
    }

    /// Forgets message `id` if it is held: it was deleted.
    pub(crate) fn forget_message(&self, id: sluice_core::MessageId) {
        for held in self.map().values_mut() {
            held.items.retain(|(_, d)| d.id != id);
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Held>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether receives took everything held within [`HOLD`].
fn recently_emptied(held: &Held) -> bool {
    held.emptied.is_some_and(|at| at.elapsed() < HOLD)
}

/// Holds `deliveries` of `queue`, leased for `lease` in the name of `consumer` just now
/// beyond what its receives asked for, and releases those still held after [`HOLD`].
pub(crate) fn hold(
    inner: &Arc<Inner>,
    queue: &Arc<QueueLocal>,
    lease: Duration,
    consumer: Option<String>,
    deliveries: Vec<Delivery>,
) {
    if deliveries.is_empty() {
        return;
    }
    let key = (lease, consumer);
    queue.read_ahead.keep(key.0, key.1.clone(), deliveries);
    let (inner, queue) = (inner.clone(), queue.clone());
    tokio::spawn(async move {
        tokio::time::sleep(HOLD).await;
        let expired = queue.read_ahead.expired(&key);
        crate::ops::nack::release_unused(&inner, &queue.name, expired).await;
    });
}

/// Releases every message this node holds, so a node that stops leaves none leased.
pub(crate) async fn release_all(inner: &Inner) {
    let held: Vec<(QueueName, Delivery)> = inner
        .locals
        .all()
        .into_iter()
        .flat_map(|local| {
            let queue = local.name.clone();
            local
                .read_ahead
                .take_all()
                .into_iter()
                .map(move |d| (queue.clone(), d))
        })
        .collect();
    for (queue, d) in held {
        crate::ops::nack::release_unused(inner, &queue, [d]).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    /// Receives of one consumer, `w1`.
    const W1: Option<&str> = Some("w1");

    #[test]
    fn only_small_receives_of_a_queue_behind_with_several_waiting_read_ahead() {
        let r = ReadAhead::default();
        assert_eq!(r.extra(3, 3, LEASE, true), READ_AHEAD);
        assert_eq!(r.extra(3, 3, LEASE, false), 0, "not behind");
        assert_eq!(r.extra(1, 1, LEASE, true), 0, "one receive at a time");
        assert_eq!(r.extra(2, 200, LEASE, true), 0, "large receives");
        let short = Duration::from_millis(500);
        assert_eq!(r.extra(3, 3, short, true), 0, "short leases");
    }

    fn delivery(id: u64) -> Delivery {
        Delivery {
            trace: None,
            id: sluice_core::MessageId(id),
            receipt: sluice_core::Receipt {
                id: sluice_core::MessageId(id),
                token: id,
            },
            body: sluice_core::Body::text("x"),
            attributes: sluice_core::Attributes::default(),
            receive_count: 1,
            max_receive_count: 5,
            enqueued_at: sluice_core::Timestamp(0),
            last_error: None,
            lease_deadline: sluice_core::Timestamp(30_000),
            group: None,
            key: None,
            priority: 4,
        }
    }

    fn ids(ds: &[Delivery]) -> Vec<u64> {
        ds.iter().map(|d| d.id.0).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn held_messages_go_out_oldest_first_while_fresh_and_expire_after_the_hold() {
        let (r, r2) = (ReadAhead::default(), ReadAhead::default());
        let key = key(LEASE, W1);
        let keep = |r: &ReadAhead, ds| r.keep(LEASE, W1.map(str::to_owned), ds);
        keep(&r, vec![delivery(1), delivery(2), delivery(3)]);
        assert_eq!(ids(&r.take(LEASE, W1, 2)), [1, 2]);
        assert_eq!(r.extra(1, 1, LEASE, true), 0, "not yet taken to the last");
        assert_eq!(ids(&r.take(LEASE, W1, 5)), [3]);
        assert_eq!(
            r.extra(1, 1, LEASE, true),
            READ_AHEAD,
            "receives took all it held: one receive reads ahead again"
        );
        keep(&r, vec![delivery(4), delivery(5)]);
        tokio::time::advance(HOLD / 2).await;
        assert!(r.expired(&key).is_empty(), "still fresh");
        tokio::time::advance(HOLD).await;
        assert!(r.take(LEASE, W1, 5).is_empty(), "held too long to hand out");
        assert_eq!(r.extra(1, 1, LEASE, true), 0, "demand long gone");
        assert_eq!(ids(&r.expired(&key)), [4, 5]);
        assert!(r.map().is_empty(), "nothing left to remember");
        keep(&r, vec![delivery(6), delivery(8)]);
        r.forget_message(sluice_core::MessageId(8));
        keep(&r2, vec![delivery(7)]);
        assert_eq!(
            ids(&r.take(LEASE, W1, 5)),
            [6],
            "a deleted message is forgotten"
        );
        keep(&r, vec![delivery(6)]);
        r.clear();
        assert!(r.take(LEASE, W1, 5).is_empty(), "forgotten with its queue");
        assert_eq!(ids(&r2.take(LEASE, W1, 5)), [7], "other queues kept");
    }

    #[test]
    fn a_lease_reads_ahead_as_much_for_each_consumer_up_to_a_bound() {
        assert_eq!(for_readers(READ_AHEAD, 1), READ_AHEAD);
        assert_eq!(for_readers(READ_AHEAD, 3), 3 * READ_AHEAD);
        assert_eq!(for_readers(READ_AHEAD, 40), MOST_READ_AHEAD);
        assert_eq!(for_readers(0, 4), 0, "no read-ahead stays none");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_reads_ahead_for_its_receives_consumers_then_for_those_recently_served() {
        let r = ReadAhead::default();
        let keep = |r: &ReadAhead, c: &str, ds| r.keep(LEASE, Some(c.to_owned()), ds);
        keep(&r, "w3", vec![delivery(1)]);
        keep(&r, "w2", vec![delivery(2)]);
        keep(&r, "w4", vec![delivery(3)]);
        assert_eq!(r.take(LEASE, Some("w3"), 1).len(), 1);
        assert_eq!(r.take(LEASE, Some("w2"), 1).len(), 1);
        let names = |serving: &[Option<&str>]| r.readers(LEASE, serving.iter().copied());
        let owned = |ns: &[Option<&str>]| -> Vec<Option<String>> {
            ns.iter().map(|n| n.map(str::to_owned)).collect()
        };
        assert_eq!(
            names(&[W1, None, W1, Some("w3")]),
            owned(&[W1, None, Some("w3"), Some("w2")]),
            "the lease's own first, then w2 (w4 still has some held)"
        );
        tokio::time::advance(HOLD).await;
        assert_eq!(names(&[W1]), owned(&[W1]), "w2 and w3 took nothing lately");
        assert_eq!(
            r.map().len(),
            1,
            "only w4, which has some held, is remembered"
        );
    }

    #[test]
    fn held_messages_go_only_to_receives_of_the_consumer_they_were_leased_for() {
        let r = ReadAhead::default();
        r.keep(LEASE, W1.map(str::to_owned), vec![delivery(1)]);
        r.keep(LEASE, None, vec![delivery(2)]);
        assert!(r.take(LEASE, Some("w2"), 5).is_empty(), "another consumer");
        assert_eq!(
            ids(&r.take(LEASE, None, 5)),
            [2],
            "a receive without a name"
        );
        assert_eq!(ids(&r.take(LEASE, W1, 5)), [1]);
    }
}
