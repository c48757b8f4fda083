//! Waking long polls: in this process at once, on other nodes through LISTEN/NOTIFY.
//!
//! A write that makes messages visible notifies the queue's channel inside its transaction,
//! so the notification leaves when (and only when) the write commits. Every node keeps one
//! listening connection and wakes its local waiters for the named queue. Notifications can
//! be lost while that connection is down, so a waiting receive also re-checks on a bounded
//! timer ([`FALLBACK_POLL`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, NoTls};

/// The longest a waiting receive sleeps without checking the queue again.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// Per-queue wake-ups of this process.
#[derive(Default)]
pub(crate) struct Wakers {
    queues: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Wakers {
    /// The notifier receives of `queue` wait on.
    pub(crate) fn of(&self, queue: &str) -> Arc<Notify> {
        let mut map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(queue.to_string()).or_default().clone()
    }

    /// Wakes this process's receives waiting on `queue`.
    pub(crate) fn wake(&self, queue: &str) {
        let map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get(queue) {
            n.notify_waiters();
        }
    }

    /// Wakes at most `n` of this process's receives waiting on `queue`: one per message that
    /// became visible, so a single send does not send every waiting receive to the
    /// database only for all but one to come back empty.
    pub(crate) fn wake_some(&self, queue: &str, n: usize) {
        let map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(notify) = map.get(queue) {
            match sluice_core::store::receives_to_wake(n) {
                Some(k) => (0..k).for_each(|_| notify.notify_one()),
                None => notify.notify_waiters(),
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
                .execute(
                    "SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q",
                    &[&chan, &names],
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
