//! Waking long polls: in this process at once, on other nodes through LISTEN/NOTIFY.
//!
//! A write that makes messages visible wakes this node's waiters for the queue and, once it
//! has committed, sends a NOTIFY ([`announce`]). Every node keeps one listening connection
//! and wakes its local waiters for the named queue. Notifications can be lost while that
//! connection is down, so a waiting receive also re-checks on a bounded timer
//! ([`FALLBACK_POLL`]). A long poll that arrives while its queue is known to be empty (found
//! empty, and every message woken since leased again by this node) starts out waiting, as if
//! it had asked ([`QueueWaker`]); only while the listening connection is up, since that
//! memory relies on other nodes' wake-ups arriving.
//!
//! A node alone sends no NOTIFY: every listening node says on the channel that it is there
//! ([`PRESENCE_EVERY`]), and a node announces its writes only while it has heard another
//! one recently, or cannot tell ([`Wakers::others_may_listen`]). A send made inside a
//! caller's transaction always notifies, with the commit.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;
use tokio_postgres::AsyncMessage;
use tokio_postgres::types::Type;

use crate::local::Locals;

/// The longest a waiting receive sleeps without checking the queue again.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// How often a listening node tells the others it is there.
const PRESENCE_EVERY: Duration = Duration::from_secs(1);

/// A node not heard for this long is gone: writes are no longer announced for it.
const PRESENCE_TIMEOUT: Duration = Duration::from_millis(3_500);

/// How long after its LISTEN connection comes up a node waits before it trusts that other
/// nodes announce their writes to it: they hear its presence within milliseconds.
const TRUST_AFTER: Duration = Duration::from_millis(500);

/// Wake-ups of this process: each queue's are in its [`QueueLocal`](crate::local::QueueLocal);
/// here is what they share, whether other nodes' wake-ups arrive.
pub(crate) struct Wakers {
    queues: Arc<Locals>,
    presence: Mutex<Presence>,
    /// What is said on the channel about counts (`crate::coverage`).
    coverage: Arc<crate::coverage::Signals>,
}

#[derive(Default)]
struct Presence {
    /// Since when the LISTEN connection has been up; `None` while it is down, when other
    /// nodes' wake-ups are lost and every long poll asks the database.
    listening_since: Option<Instant>,
    /// When another node was last heard on the channel.
    peer_heard: Option<Instant>,
    /// When each other node (by origin) was last heard.
    peers: std::collections::HashMap<u64, Instant>,
}

/// The wake-ups of one queue, and what the last empty lease of it showed.
///
/// A consumer that has just been served asks again at once, and usually finds the queue
/// empty: a statement per message for nothing (0.6 of the 1.6 lease statements per message
/// at one message per receive). A long poll that arrives while its queue is known to be
/// empty waits for a wake-up before asking the database, as the receives that were already
/// waiting do.
///
/// Known empty means: a lease found nothing, and the messages made visible since (counted
/// by the wake-ups that announced them) have all been leased by this node's leases that
/// started after it. A wake-up that does not say how many messages it made visible (another
/// node's, a nack, a redrive) ends that knowledge, as do a delay or lease running out.
#[derive(Default)]
pub(crate) struct QueueWaker {
    notify: Notify,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Bumped by every wake-up.
    generation: u64,
    /// Messages the counted wake-ups made visible, in all.
    woken: u64,
    /// The generation of the last wake-up that did not count its messages.
    uncounted_at: u64,
    empty: Option<Empty>,
}

/// When a lease started: the wake-ups it may have missed are those after this.
#[derive(Clone, Copy)]
pub(crate) struct Stamp {
    generation: u64,
    woken: u64,
}

/// A lease statement found the queue empty.
#[derive(Clone, Copy)]
struct Empty {
    /// Where the wake-ups were when the statement started.
    at: Stamp,
    /// Messages leased since by leases that started later.
    leased: u64,
    /// When (store clock, ms) a delayed message or an expired lease makes something visible.
    next_wake: Option<i64>,
    /// Past this the database is asked again anyway, as by a waiting receive.
    until: Instant,
}

impl QueueWaker {
    /// Registers `notified` as a waiter, then reads where the wake-ups are: a wake-up after
    /// the read reaches the waiter, so a lease that comes back empty can rely on it.
    pub(crate) fn stamp(&self, notified: std::pin::Pin<&mut Notified<'_>>) -> Stamp {
        notified.enable();
        let s = self.state();
        Stamp {
            generation: s.generation,
            woken: s.woken,
        }
    }

    /// The waiter to register before reading [`QueueWaker::stamp`].
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Records that a lease that started at `at` found nothing visible.
    pub(crate) fn found_empty(&self, at: Stamp, next_wake: Option<i64>, now: i64) {
        let until = Instant::now()
            + sluice_core::store::long_poll_nap(FALLBACK_POLL, FALLBACK_POLL, now, next_wake);
        let mut s = self.state();
        if s.uncounted_at > at.generation
            || s.empty.is_some_and(|e| e.at.generation > at.generation)
        {
            return;
        }
        s.empty = Some(Empty {
            at,
            leased: 0,
            next_wake,
            until,
        });
    }

    /// Records that a lease that started at `at` took `n` messages: those counted since an
    /// earlier empty lease are taken. (A lease that ran alongside that empty one may have
    /// taken messages that were never counted, so it does not count.)
    pub(crate) fn leased(&self, at: Stamp, n: usize) {
        let mut s = self.state();
        if let Some(e) = s.empty.as_mut()
            && at.generation > e.at.generation
        {
            e.leased += n as u64;
        }
    }

    /// How long a long poll may wait without asking the database: `Some` while the queue is
    /// known to be empty and nothing is due yet.
    pub(crate) fn known_empty(&self, now: i64) -> Option<Duration> {
        let s = self.state();
        let e = s.empty?;
        // Every message woken since the empty lease has been leased again.
        let all_leased = s.woken - e.at.woken <= e.leased;
        let left = e.until.saturating_duration_since(Instant::now());
        let current = all_leased && !left.is_zero() && e.next_wake.is_none_or(|at| now < at);
        current.then_some(left)
    }

    /// A wake-up: `Some(n)` messages became visible, or `None` when it does not say.
    fn woke(&self, visible: Option<usize>) {
        let mut s = self.state();
        s.generation += 1;
        match visible {
            Some(n) => s.woken += n as u64,
            None => {
                s.uncounted_at = s.generation;
                s.empty = None;
            }
        }
    }

    /// Counts `n` messages a send handed to receives waiting on this node (see
    /// `crate::hot::handoff`, which wakes those receives) as woken, as the receives that take
    /// them count them as leased.
    pub(crate) fn handed(&self, n: usize) {
        self.woke(Some(n));
    }

    /// Wakes at most `n` of this process's receives waiting on the queue: one per message
    /// that became visible, so a single send does not send every waiting receive to the
    /// database only for all but one to come back empty; all of them past a handful.
    pub(crate) fn wake_some(&self, n: usize) {
        self.woke((n != usize::MAX).then_some(n));
        match sluice_core::store::receives_to_wake(n) {
            Some(k) => (0..k).for_each(|_| self.notify.notify_one()),
            None => self.notify.notify_waiters(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Wakers {
    /// The wake-ups of the queues of `queues`.
    pub(crate) fn new(queues: Arc<Locals>, coverage: Arc<crate::coverage::Signals>) -> Self {
        Wakers {
            queues,
            presence: Mutex::default(),
            coverage,
        }
    }

    /// The other nodes heard within [`PRESENCE_TIMEOUT`]; `None` when this node cannot tell:
    /// its LISTEN connection is down, or came up too recently for every other node's
    /// presence to have been heard.
    pub(crate) fn peers(&self) -> Option<Vec<u64>> {
        let mut p = self.presence();
        if p.listening_since
            .is_none_or(|t| t.elapsed() < PRESENCE_EVERY + TRUST_AFTER)
        {
            return None;
        }
        p.peers
            .retain(|_, heard| heard.elapsed() < PRESENCE_TIMEOUT);
        Some(p.peers.keys().copied().collect())
    }

    /// Whether other nodes' wake-ups arrive, so that [`QueueWaker::known_empty`] holds: the
    /// LISTEN connection is up, and has been for [`TRUST_AFTER`], by when every other node
    /// has heard this one's presence and announces its writes.
    pub(crate) fn listening(&self) -> bool {
        self.presence()
            .listening_since
            .is_some_and(|t| t.elapsed() >= TRUST_AFTER)
    }

    /// Whether another node may be listening, so that this node's writes must be announced:
    /// one was heard within [`PRESENCE_TIMEOUT`], or this node cannot tell (its own LISTEN
    /// connection is down, or came up less than that ago).
    pub(crate) fn others_may_listen(&self) -> bool {
        let p = self.presence();
        p.listening_since
            .is_none_or(|t| t.elapsed() < PRESENCE_TIMEOUT)
            || p.peer_heard.is_some_and(|t| t.elapsed() < PRESENCE_TIMEOUT)
    }

    fn presence(&self) -> std::sync::MutexGuard<'_, Presence> {
        self.presence.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn peer_heard(&self, from: u64) {
        let mut p = self.presence();
        let now = Instant::now();
        p.peer_heard = Some(now);
        p.peers.insert(from, now);
    }

    /// The LISTEN connection is down: notifications sent meanwhile are lost.
    fn lost(&self) {
        self.presence().listening_since = None;
    }

    /// The LISTEN connection is up again. Other nodes may have committed messages while it
    /// was down, unannounced here: every queue's empty memory is made stale and every
    /// waiting receive looks again, before the memory is trusted once more.
    fn listening_again(&self) {
        for local in self.queues.all() {
            local.waker.woke(None);
            local.waker.notify.notify_waiters();
        }
        self.presence().listening_since = Some(Instant::now());
    }

    /// Wakes all of this process's receives waiting on `queue`.
    pub(crate) fn wake(&self, queue: &str) {
        self.wake_some(queue, usize::MAX);
    }

    /// Wakes at most `n` of this process's receives waiting on `queue` (see
    /// [`QueueWaker::wake_some`]); a queue this node has no memory of has none waiting.
    pub(crate) fn wake_some(&self, queue: &str, n: usize) {
        if let Some(local) = self.queues.get(queue) {
            local.waker.wake_some(n);
        }
    }
}

/// What a NOTIFY carries: the sending store's origin, so it ignores its own, and the queue.
fn payload(origin: u64, queue: &str) -> String {
    format!("{origin:016x} {queue}")
}

/// The origin of the NOTIFYs that leave with a caller's own transaction
/// ([`crate::PostgresStore::send_in`]); no store has it, so every node, the sending process
/// included, wakes its receives when that transaction commits.
const CALLER_COMMIT: u64 = 0;

/// A store's origin: random, never [`CALLER_COMMIT`].
pub(crate) fn new_origin() -> u64 {
    rand::random::<u64>() | 1
}

/// The NOTIFY payload of a send made inside a caller's transaction.
pub(crate) fn caller_commit_payload(queue: &str) -> String {
    payload(CALLER_COMMIT, queue)
}

/// What a node says on the channel when it starts listening and every [`PRESENCE_EVERY`]
/// after: its origin and no queue.
fn presence(origin: u64) -> String {
    format!("{origin:016x}")
}

/// The origin and the queue (none for a presence) of a NOTIFY payload.
fn parse(payload: &str) -> Option<(u64, Option<&str>)> {
    let (from, queue) = match payload.split_once(' ') {
        Some((from, queue)) => (from, Some(queue)),
        None => (payload, None),
    };
    Some((u64::from_str_radix(from, 16).ok()?, queue))
}

/// Whether a payload shows another node listening: a presence or a wake-up of another store
/// (a caller's commit says nothing of who listens).
fn is_peer(origin: u64, payload: &str) -> bool {
    parse(payload).is_some_and(|(from, _)| from != origin && from != CALLER_COMMIT)
}

/// The queue of a NOTIFY payload, unless this store (`origin`) sent it.
fn foreign_queue(origin: u64, payload: &str) -> Option<&str> {
    parse(payload).and_then(|(from, queue)| if from == origin { None } else { queue })
}

/// The NOTIFY channel of a schema (channels are database-wide; schemas are not).
pub(crate) fn channel(schema: &str) -> String {
    format!("sluice_wake_{schema}")
}

/// Sends the NOTIFYs of committed changes, coalescing queues named while the previous batch
/// was sent. Outside the changes' own transactions on purpose: PostgreSQL serialises the
/// commits of transactions that NOTIFY, which would make every send wait for the previous
/// one's WAL flush. Ends when the store is dropped.
pub(crate) async fn announce(
    pool: deadpool_postgres::Pool,
    chan: String,
    origin: u64,
    mut queues: tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    while let Some(first) = queues.recv().await {
        let mut batch = std::collections::BTreeSet::from([first]);
        while let Ok(q) = queues.try_recv() {
            batch.insert(q);
        }
        let names: Vec<String> = batch.iter().map(|q| payload(origin, q)).collect();
        let sent = match pool.get().await {
            Ok(conn) => conn
                .execute_typed(
                    "SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q",
                    &[(&chan, Type::TEXT), (&names, Type::TEXT_ARRAY)],
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            // Other nodes' waiters find the messages at their next fallback poll.
            tracing::debug!(error = %e, "could not announce to other nodes");
        }
    }
}

/// Keeps a LISTEN connection open while `wakers` lives, reconnecting after failures. Wakes
/// for other stores' notifications only: this store's own writes woke its waiters already.
pub(crate) async fn listen(
    hosts: crate::hosts::Hosts,
    chan: String,
    origin: u64,
    wakers: Weak<Wakers>,
) {
    // Operators (and tests) tell the listening connection in `pg_stat_activity` by its name.
    let hosts = hosts.named(&chan);
    let mut backoff = Duration::from_millis(100);
    loop {
        if wakers.strong_count() == 0 {
            return;
        }
        match hosts.connect().await {
            Ok((client, mut conn)) => {
                let (tx, mut rx) = futures::channel::mpsc::unbounded();
                let driver = tokio::spawn(async move {
                    let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                    while let Some(m) = messages.next().await {
                        if tx.unbounded_send(m).is_err() {
                            break;
                        }
                    }
                });
                let listen = format!("LISTEN {}", crate::db::schema::quote_ident(&chan));
                if let Err(e) = client.batch_execute(&listen).await {
                    tracing::warn!(error = %e, "cannot LISTEN for wake-ups; retrying");
                } else {
                    backoff = Duration::from_millis(100);
                    if let Some(w) = wakers.upgrade() {
                        w.listening_again();
                    }
                    let mut tick = tokio::time::interval(PRESENCE_EVERY);
                    loop {
                        let next = tokio::select! {
                            m = rx.next() => Some(m),
                            _ = tick.tick() => None,
                        };
                        // The tick also checks now and then that the store still exists.
                        let Some(w) = wakers.upgrade() else {
                            driver.abort();
                            return;
                        };
                        match next {
                            None => {
                                // Bounded, so a connection that hangs is replaced rather
                                // than holding up the wake-ups behind it.
                                let said = tokio::time::timeout(
                                    PRESENCE_TIMEOUT,
                                    client.execute_typed(
                                        "SELECT pg_notify($1, $2)",
                                        &[(&chan, Type::TEXT), (&presence(origin), Type::TEXT)],
                                    ),
                                )
                                .await;
                                let failed = match said {
                                    Ok(Ok(_)) => None,
                                    Ok(Err(e)) => Some(e.to_string()),
                                    Err(_) => Some(format!(
                                        "no answer within {}",
                                        sluice_core::human::fmt_duration(PRESENCE_TIMEOUT)
                                    )),
                                };
                                if let Some(e) = failed {
                                    tracing::warn!(error = %e, "wake-up connection failed; reconnecting");
                                    break;
                                }
                            }
                            Some(Some(Ok(AsyncMessage::Notification(n)))) => {
                                let payload = n.payload();
                                if is_peer(origin, payload)
                                    && let Some((from, _)) = parse(payload)
                                {
                                    w.peer_heard(from);
                                }
                                let about_counts = parse(payload).is_some_and(|(from, said)| {
                                    said.is_some_and(|s| w.coverage.heard(origin, from, s))
                                });
                                if !about_counts && let Some(q) = foreign_queue(origin, payload) {
                                    w.wake(q);
                                }
                            }
                            Some(Some(Ok(_))) => {}
                            Some(Some(Err(e))) => {
                                tracing::warn!(error = %e, "wake-up connection failed; reconnecting");
                                break;
                            }
                            Some(None) => break,
                        }
                    }
                }
                driver.abort();
                if let Some(w) = wakers.upgrade() {
                    w.lost();
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "wake-up connection refused; retrying");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_and_caller_commits_are_told_apart() {
        assert!(is_peer(8, &presence(7)));
        assert!(!is_peer(7, &presence(7)));
        assert!(is_peer(7, &payload(8, "jobs")));
        assert!(!is_peer(7, "garbage"));
        assert!(!is_peer(7, &caller_commit_payload("jobs")));
        assert_eq!(
            foreign_queue(7, &presence(8)),
            None,
            "a presence wakes no queue"
        );
        let committed = caller_commit_payload("jobs");
        assert_eq!(foreign_queue(new_origin(), &committed), Some("jobs"));
        assert_ne!(new_origin(), CALLER_COMMIT);
    }

    fn stamp(w: &QueueWaker) -> Stamp {
        let notified = w.notified();
        tokio::pin!(notified);
        w.stamp(notified.as_mut())
    }

    #[test]
    fn a_queue_stays_known_empty_while_what_was_woken_is_leased() {
        let w = QueueWaker::default();
        let now = 1_000;
        assert!(w.known_empty(now).is_none(), "nothing known at first");
        let first = stamp(&w);
        w.found_empty(first, None, now);
        assert!(w.known_empty(now).is_some());
        // A send of two messages: the queue is not empty until two were leased after it.
        w.woke(Some(2));
        assert!(w.known_empty(now).is_none());
        let after = stamp(&w);
        // A lease that ran alongside the empty one does not count: it may have taken a
        // message that no wake-up counted.
        w.leased(first, 2);
        assert!(w.known_empty(now).is_none());
        w.leased(after, 1);
        assert!(w.known_empty(now).is_none());
        w.leased(after, 1);
        assert!(w.known_empty(now).is_some());
        // A wake-up that does not count its messages ends the knowledge.
        w.woke(None);
        assert!(w.known_empty(now).is_none());
        w.leased(stamp(&w), 5);
        assert!(w.known_empty(now).is_none());
    }

    #[test]
    fn wake_ups_during_an_empty_lease_are_counted() {
        let w = QueueWaker::default();
        let at = stamp(&w);
        // One message made visible while the statement ran: it may have missed it.
        w.woke(Some(1));
        w.found_empty(at, None, 0);
        assert!(w.known_empty(0).is_none());
        w.leased(stamp(&w), 1);
        assert!(w.known_empty(0).is_some());
        // An uncounted wake-up while a statement ran: its empty answer says nothing.
        let at = stamp(&w);
        w.woke(None);
        w.found_empty(at, None, 0);
        assert!(w.known_empty(0).is_none());
        // An older empty answer does not replace a newer one.
        let newer = stamp(&w);
        w.found_empty(newer, None, 0);
        w.found_empty(at, None, 0);
        assert!(w.known_empty(0).is_some());
    }

    #[test]
    fn something_due_ends_the_knowledge() {
        let w = QueueWaker::default();
        w.found_empty(stamp(&w), Some(2_000), 1_000);
        assert!(w.known_empty(1_999).is_some());
        assert!(
            w.known_empty(2_000).is_none(),
            "a delay ends or a lease runs out"
        );
    }

    #[test]
    fn a_store_ignores_its_own_notifications() {
        let p = payload(7, "jobs.dlq");
        assert_eq!(foreign_queue(7, &p), None);
        assert_eq!(foreign_queue(8, &p), Some("jobs.dlq"));
        assert_eq!(foreign_queue(8, "garbage"), None);
    }
}
