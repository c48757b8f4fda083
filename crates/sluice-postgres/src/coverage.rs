//! Totals never behind the depths they explain, on any node.
//!
//! Each node counts its hot paths (send, receive, ack) in memory and writes the counts every
//! [`FLUSH_EVERY`](crate::db::counters::FLUSH_EVERY) (`db/counters.rs`). A stats answer read
//! as one transaction would show another node's fresh sends as `visible` beside a `sent`
//! that does not have them yet. So a stats answer reads the depths first, then *covers*
//! them — makes sure every count of every change they show is written — and only then reads
//! the totals:
//! - On this node, an operation holds the counting gate (shared) from before its change
//!   commits until it has counted it ([`Inner::counting`]); a covering flush takes the gate
//!   (exclusive) before it takes the pending counts, so every change committed by then is in
//!   them ([`flush_covering`]).
//! - Other nodes are asked on the wake-up channel; each answers after a covering flush of
//!   its own ([`answer_requests`]). Asked after the depths were read, their flush covers
//!   every change those depths show. The answer waits for every node heard on the channel
//!   lately, at most [`COVER_WAIT`]: one that does not answer in time (stopped, or cut off
//!   from the database) is left out, with a log line; a stopped node's unwritten counts are
//!   lost anyway.
//!
//! A node alone, or one that cannot tell who else is there (its listening connection down),
//! covers its own counts only. Totals may be ahead of the depths (changes made after the
//! depths were read), never behind them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sluice_core::StoreError;
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::error::db;
use crate::store::Inner;

/// The longest a stats answer waits for other nodes' counts.
pub(crate) const COVER_WAIT: Duration = Duration::from_secs(1);

/// Coverage requests and answers heard on the wake-up channel.
pub(crate) struct Signals {
    /// Other nodes' requests, by token, for [`answer_requests`].
    requests: UnboundedSender<u64>,
    /// The answers this node's covers wait for: by token, the nodes that answered.
    awaited: Mutex<HashMap<u64, HashSet<u64>>>,
    /// Rung at every answer.
    answered: Notify,
}

impl Signals {
    /// New signals, and the requests to hand to [`answer_requests`].
    pub(crate) fn new() -> (Arc<Signals>, UnboundedReceiver<u64>) {
        let (requests, rx) = unbounded_channel();
        let signals = Signals {
            requests,
            awaited: Mutex::default(),
            answered: Notify::new(),
        };
        (Arc::new(signals), rx)
    }

    fn awaited(&self) -> std::sync::MutexGuard<'_, HashMap<u64, HashSet<u64>>> {
        self.awaited.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in what `from` said on the channel, when it is about coverage: a request to
    /// answer, or an answer awaited here. Whether it was (a wake-up otherwise).
    pub(crate) fn heard(&self, own: u64, from: u64, said: &str) -> bool {
        let (kind, token) = match said.split_once(' ') {
            Some((k @ (REQUEST | ANSWER), t)) => (k, u64::from_str_radix(t, 16).ok()),
            _ => return false,
        };
        let Some(token) = token else { return true };
        if from == own {
            return true;
        }
        if kind == REQUEST {
            let _ = self.requests.send(token);
        } else if let Some(who) = self.awaited().get_mut(&token) {
            who.insert(from);
            self.answered.notify_waiters();
        }
        true
    }
}

/// What starts a request, and an answer, after the sender's origin. Queue names never begin
/// with `!`, so neither is taken for a wake-up.
const REQUEST: &str = "!cover";
const ANSWER: &str = "!covered";

fn said(origin: u64, kind: &str, token: u64) -> String {
    format!("{origin:016x} {kind} {token:016x}")
}

/// Writes this node's pending counts, every change committed so far among them.
///
/// # Errors
/// The database's; the counts then stay pending.
pub(crate) async fn flush_covering(inner: &Inner) -> Result<(), StoreError> {
    let _flushing = inner.flushing.lock().await;
    let pending = {
        // Waits for operations between their commit and their count.
        let _gate = inner.counting.write().await;
        std::mem::take(&mut *inner.pending())
    };
    crate::db::counters::write_pending(inner, pending).await
}

/// Covers what a stats answer just read: this node's counts and, asked on the channel,
/// every other node's (see the module docs).
///
/// # Errors
/// The database's, for this node's own counts or the request.
pub(crate) async fn cover(inner: &Inner) -> Result<(), StoreError> {
    flush_covering(inner).await?;
    let Some(peers) = inner.wakers.peers() else {
        return Ok(());
    };
    if peers.is_empty() {
        return Ok(());
    }
    let token = rand::random::<u64>();
    inner.coverage.awaited().insert(token, HashSet::new());
    let asked = async {
        let conn = inner.conn().await?;
        conn.execute(
            "SELECT pg_notify($1, $2)",
            &[&inner.channel, &said(inner.origin, REQUEST, token)],
        )
        .await
        .map_err(|e| db(&e))?;
        Ok::<(), StoreError>(())
    };
    let out = match asked.await {
        Ok(()) => {
            let all = async {
                loop {
                    let answered = inner.coverage.answered.notified();
                    tokio::pin!(answered);
                    answered.as_mut().enable();
                    let done = inner
                        .coverage
                        .awaited()
                        .get(&token)
                        .is_some_and(|who| peers.iter().all(|p| who.contains(p)));
                    if done {
                        return;
                    }
                    answered.await;
                }
            };
            if tokio::time::timeout(COVER_WAIT, all).await.is_err() {
                tracing::debug!(
                    "another node did not write its counts within {}; stats may lag its last changes",
                    sluice_core::human::fmt_duration(COVER_WAIT)
                );
            }
            Ok(())
        }
        Err(e) => Err(e),
    };
    inner.coverage.awaited().remove(&token);
    out
}

/// Answers other nodes' requests while the store lives: a covering flush, then the answer.
pub(crate) async fn answer_requests(inner: Weak<Inner>, mut requests: UnboundedReceiver<u64>) {
    while let Some(token) = requests.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        let answered = async {
            flush_covering(&inner).await?;
            let conn = inner.conn().await?;
            conn.execute(
                "SELECT pg_notify($1, $2)",
                &[&inner.channel, &said(inner.origin, ANSWER, token)],
            )
            .await
            .map_err(|e| db(&e))?;
            Ok::<(), StoreError>(())
        };
        if let Err(e) = answered.await {
            tracing::debug!(error = %e, "could not write counts another node asked for");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_are_told_from_wake_ups() {
        let (s, mut requests) = Signals::new();
        assert!(!s.heard(1, 2, "jobs"), "a wake-up");
        assert!(s.heard(1, 2, &said(2, REQUEST, 9)[17..]));
        assert_eq!(requests.try_recv().ok(), Some(9));
        assert!(s.heard(1, 1, &said(1, REQUEST, 9)[17..]), "its own");
        assert!(requests.try_recv().is_err(), "not answered by itself");
        s.awaited().insert(9, HashSet::new());
        assert!(s.heard(1, 3, &said(3, ANSWER, 9)[17..]));
        assert!(s.awaited()[&9].contains(&3));
        assert!(s.heard(1, 3, "!cover zz"), "malformed, still not a queue");
    }
}
