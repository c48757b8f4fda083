//! Waking long polls: in this process at once, on other nodes through LISTEN/NOTIFY.
//!
//! A write that makes messages visible wakes this node's waiters for the queue and, once it
//! has committed, sends a NOTIFY ([`announce`]). Every node keeps one listening connection
//! and wakes its local waiters for the named queue. Notifications can be lost while that
//! connection is down, so a waiting receive also re-checks on a bounded timer
//! ([`FALLBACK_POLL`]). A long poll that arrives while nothing was woken since its queue was
//! last found empty starts out waiting, as if it had asked ([`QueueWaker`]); only while the
//! listening connection is up, since that memory relies on other nodes' wake-ups arriving.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, NoTls};

/// The longest a waiting receive sleeps without checking the queue again.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// Per-queue wake-ups of this process.
#[derive(Default)]
pub(crate) struct Wakers {
    queues: Mutex<HashMap<String, Arc<QueueWaker>>>,
    /// The LISTEN connection is up: other nodes' writes reach this node as wake-ups, so a
    /// queue's known-empty memory can be trusted. While it is down, every long poll asks.
    listening: AtomicBool,
}

/// The wake-ups of one queue, and what the last empty lease of it showed.
///
/// A consumer that has just been served asks again at once, and usually finds the queue
/// empty: a statement per message for nothing (0.6 of the 1.6 lease statements per message
/// at one message per receive). A long poll that arrives while nothing has changed since an
/// empty lease of its queue waits for a wake-up before asking the database, as the receives
/// that were already waiting do.
#[derive(Default)]
pub(crate) struct QueueWaker {
    notify: Notify,
    /// Bumped by every wake-up: a lease result stays current while this has not moved.
    generation: AtomicU64,
    empty: Mutex<Option<Empty>>,
}

/// A lease statement found the queue empty.
#[derive(Clone, Copy)]
struct Empty {
    /// The wake-up generation read before the statement ran.
    generation: u64,
    /// When (store clock, ms) a delayed message or an expired lease makes something visible.
    next_wake: Option<i64>,
    /// Past this the database is asked again anyway, as by a waiting receive.
    until: Instant,
}

impl QueueWaker {
    /// Registers `notified` as a waiter, then reads the generation: a wake-up after the read
    /// reaches the waiter, so a lease that comes back empty can rely on it.
    pub(crate) fn generation(&self, notified: std::pin::Pin<&mut Notified<'_>>) -> u64 {
        notified.enable();
        self.generation.load(Ordering::Acquire)
    }

    /// The waiter to register before reading [`QueueWaker::generation`].
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Records that a lease that started at `generation` found nothing visible.
    pub(crate) fn found_empty(&self, generation: u64, next_wake: Option<i64>, now: i64) {
        let until = Instant::now()
            + sluice_core::store::long_poll_nap(FALLBACK_POLL, FALLBACK_POLL, now, next_wake);
        let mut e = self.empty.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none_or(|e| e.generation <= generation) {
            *e = Some(Empty {
                generation,
                next_wake,
                until,
            });
        }
    }

    /// How long a long poll that read `generation` may wait without asking the database:
    /// `Some` while nothing was woken since an empty lease and nothing is due yet.
    pub(crate) fn known_empty(&self, generation: u64, now: i64) -> Option<Duration> {
        let e = (*self.empty.lock().unwrap_or_else(|p| p.into_inner()))?;
        let left = e.until.saturating_duration_since(Instant::now());
        let current =
            e.generation == generation && !left.is_zero() && e.next_wake.is_none_or(|at| now < at);
        current.then_some(left)
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl Wakers {
    /// The wake-ups of `queue`.
    pub(crate) fn of(&self, queue: &str) -> Arc<QueueWaker> {
        let mut map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(queue.to_string()).or_default().clone()
    }

    /// Whether other nodes' wake-ups arrive, so that [`QueueWaker::known_empty`] holds.
    pub(crate) fn listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    /// The LISTEN connection is down: notifications sent meanwhile are lost.
    fn lost(&self) {
        self.listening.store(false, Ordering::Release);
    }

    /// The LISTEN connection is up again. Other nodes may have committed messages while it
    /// was down, unannounced here: every queue's empty memory is made stale and every
    /// waiting receive looks again, before the memory is trusted once more.
    fn listening_again(&self) {
        let map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        for w in map.values() {
            w.bump();
            w.notify.notify_waiters();
        }
        drop(map);
        self.listening.store(true, Ordering::Release);
    }

    /// Wakes all of this process's receives waiting on `queue`.
    pub(crate) fn wake(&self, queue: &str) {
        self.wake_some(queue, usize::MAX);
    }

    /// Wakes at most `n` of this process's receives waiting on `queue`: one per message that
    /// became visible, so a single send does not send every waiting receive to the
    /// database only for all but one to come back empty; all of them past a handful.
    pub(crate) fn wake_some(&self, queue: &str, n: usize) {
        let map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = map.get(queue) {
            w.bump();
            match sluice_core::store::receives_to_wake(n) {
                Some(k) => (0..k).for_each(|_| w.notify.notify_one()),
                None => w.notify.notify_waiters(),
            }
        }
    }
}

/// What a NOTIFY carries: the sending store's origin, so it ignores its own, and the queue.
fn payload(origin: u64, queue: &str) -> String {
    format!("{origin:016x} {queue}")
}

/// The queue of a NOTIFY payload, unless this store (`origin`) sent it.
fn foreign_queue(origin: u64, payload: &str) -> Option<&str> {
    let (from, queue) = payload.split_once(' ')?;
    (u64::from_str_radix(from, 16).ok() != Some(origin)).then_some(queue)
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
    config: tokio_postgres::Config,
    chan: String,
    origin: u64,
    wakers: Weak<Wakers>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if wakers.strong_count() == 0 {
            return;
        }
        match config.connect(NoTls).await {
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
                let listen = format!("LISTEN {}", crate::schema::quote_ident(&chan));
                if let Err(e) = client.batch_execute(&listen).await {
                    tracing::warn!(error = %e, "cannot LISTEN for wake-ups; retrying");
                } else {
                    backoff = Duration::from_millis(100);
                    if let Some(w) = wakers.upgrade() {
                        w.listening_again();
                    }
                    loop {
                        // Check now and then that the store still exists.
                        let next = tokio::time::timeout(Duration::from_secs(5), rx.next()).await;
                        let Some(w) = wakers.upgrade() else {
                            driver.abort();
                            return;
                        };
                        match next {
                            Err(_) => continue,
                            Ok(Some(Ok(AsyncMessage::Notification(n)))) => {
                                if let Some(q) = foreign_queue(origin, n.payload()) {
                                    w.wake(q);
                                }
                            }
                            Ok(Some(Ok(_))) => {}
                            Ok(Some(Err(e))) => {
                                tracing::warn!(error = %e, "wake-up connection failed; reconnecting");
                                break;
                            }
                            Ok(None) => break,
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
    fn a_store_ignores_its_own_notifications() {
        let p = payload(7, "jobs.dlq");
        assert_eq!(foreign_queue(7, &p), None);
        assert_eq!(foreign_queue(8, &p), Some("jobs.dlq"));
        assert_eq!(foreign_queue(8, "garbage"), None);
    }
}
