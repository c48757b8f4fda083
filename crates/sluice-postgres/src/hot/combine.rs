//! Group commit at the broker: calls on one queue that arrive while earlier ones are being
//! written are written together, in one statement and one commit.
//!
//! A database pays mostly per statement and per commit, not per row: a hundred rows in one
//! insert cost little more than one. A node serving many producers of one message each
//! therefore turns them into a few multi-row statements. Nothing waits on purpose: a call
//! that finds the queue idle is written at once, and only calls arriving while the
//! combiner's limit of writes of their queue are under way are gathered into the next.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use futures::FutureExt as _;
use sluice_core::QueueName;

/// From this many messages a call is large: the database's time per row then outweighs its
/// time per statement, so large calls of a queue have lanes of their own ([`Lanes`]).
pub(crate) const LARGE_CALL: usize = 16;

/// Small calls and large ones, combined apart: small calls of a queue share few statements,
/// while large calls may run more statements at once, as their time is spent on rows. Large
/// calls served by packs (one row each, see `crate::hot::packs`) have a lane of their own: their
/// statements are short again.
pub(crate) struct Lanes<K, J> {
    small: Combiner<K, J>,
    large: Combiner<K, J>,
    packed: Combiner<K, J>,
}

impl<K, J> Lanes<K, J> {
    /// Lanes running at most `small` statements of a queue at a time for small calls, `large`
    /// for large ones and `packed` for large ones served by packs.
    pub(crate) fn new(small: usize, large: usize, packed: usize) -> Self {
        Lanes {
            small: Combiner::new(small),
            large: Combiner::new(large),
            packed: Combiner::new(packed),
        }
    }

    /// The combiner of a call for `messages` messages, on a queue whose large calls are
    /// served by packs or not.
    pub(crate) fn of(&self, messages: usize, packed: bool) -> &Combiner<K, J> {
        match (messages >= LARGE_CALL, packed) {
            (false, _) => &self.small,
            (true, false) => &self.large,
            (true, true) => &self.packed,
        }
    }
}

/// Calls of one queue waiting to be written, per key: calls of different keys (lease
/// lengths, kept-record times) never share a statement.
pub(crate) struct Combiner<K, J> {
    lanes: Mutex<HashMap<K, Lane<J>>>,
    /// Writes of one queue run at the same time; calls arriving beyond them gather.
    limit: usize,
}

struct Lane<J> {
    jobs: Vec<J>,
    flushing: usize,
}

impl<K, J> Combiner<K, J> {
    /// A combiner running at most `limit` writes of a queue at a time (at least one).
    pub(crate) fn new(limit: usize) -> Self {
        Combiner {
            lanes: Mutex::new(HashMap::new()),
            limit: limit.max(1),
        }
    }
}

impl<K: Hash + Eq + Copy, J> Combiner<K, J> {
    fn lanes(&self) -> std::sync::MutexGuard<'_, HashMap<K, Lane<J>>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `job` to the waiting calls of `key`. Returns the calls to write now when the
    /// caller is to start a write (it must then call [`Combiner::next`] when that write is
    /// done); `None` when a running write will take the job.
    pub(crate) fn push(&self, key: K, job: J) -> Option<Vec<J>> {
        self.push_within(key, job, self.limit)
    }

    /// As [`Combiner::push`], starting a write only while fewer than `limit` (at least one,
    /// at most the combiner's own limit) of `key` are under way.
    pub(crate) fn push_within(&self, key: K, job: J, limit: usize) -> Option<Vec<J>> {
        let limit = limit.clamp(1, self.limit);
        let mut lanes = self.lanes();
        let lane = lanes.entry(key).or_insert_with(|| Lane {
            jobs: Vec::new(),
            flushing: 0,
        });
        lane.jobs.push(job);
        if lane.flushing < limit {
            lane.flushing += 1;
            Some(std::mem::take(&mut lane.jobs))
        } else {
            None
        }
    }

    /// After a write of `key`: the calls that gathered meanwhile, to write next, or `None`
    /// when there are none (the write ends).
    pub(crate) fn next(&self, key: K) -> Option<Vec<J>> {
        let mut lanes = self.lanes();
        let lane = lanes.get_mut(&key)?;
        if !lane.jobs.is_empty() {
            return Some(std::mem::take(&mut lane.jobs));
        }
        lane.flushing = lane.flushing.saturating_sub(1);
        if lane.flushing == 0 {
            lanes.remove(&key);
        }
        None
    }
}

/// Writes `jobs` with `write`, then the calls of `key` that gathered meanwhile, until none
/// is left. A panic in one write fails only its calls (their answers are dropped); the
/// queue's next calls are still written.
pub(crate) async fn drain<K: Hash + Eq + Copy, J, Fut>(
    combiner: &Combiner<K, J>,
    queue: &QueueName,
    key: K,
    mut jobs: Vec<J>,
    mut write: impl FnMut(Vec<J>) -> Fut,
) where
    Fut: Future<Output = ()>,
{
    loop {
        if AssertUnwindSafe(write(jobs)).catch_unwind().await.is_err() {
            tracing::error!(%queue, "a combined write failed unexpectedly");
        }
        match combiner.next(key) {
            Some(more) => jobs = more,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_queues_write_at_once_and_busy_ones_gather() {
        const LIMIT: usize = 2;
        let c = Combiner::new(LIMIT);
        // Up to the limit, callers write their own call at once.
        for i in 0..LIMIT {
            assert_eq!(c.push("q", i), Some(vec![i]));
        }
        // Beyond that, calls gather for the next write of that queue only.
        assert_eq!(c.push("q", 10), None);
        assert_eq!(c.push("q", 11), None);
        assert_eq!(c.push("other", 20), Some(vec![20]));
        assert_eq!(c.next("q"), Some(vec![10, 11]));
        // Writers end one by one once nothing gathers; then the queue is idle again.
        for _ in 0..LIMIT {
            assert_eq!(c.next("q"), None);
        }
        assert_eq!(c.push("q", 30), Some(vec![30]));
        assert_eq!(c.next("q"), None);
        assert_eq!(c.next("other"), None);
        assert!(c.lanes().is_empty());
    }

    #[test]
    fn a_lower_limit_gathers_sooner() {
        let c = Combiner::new(2);
        assert_eq!(c.push_within("q", 1, 1), Some(vec![1]));
        assert_eq!(c.push_within("q", 2, 1), None, "one write at a time");
        assert_eq!(
            c.push("q", 3),
            Some(vec![2, 3]),
            "the full limit allows a second"
        );
        assert_eq!(
            c.push_within("q", 4, 5),
            None,
            "never beyond the combiner's own"
        );
        assert_eq!(c.next("q"), Some(vec![4]));
        assert_eq!(c.next("q"), None);
        assert_eq!(c.next("q"), None);
        assert!(c.lanes().is_empty());
    }

    #[test]
    fn large_calls_have_lanes_of_their_own() {
        let lanes = Lanes::new(1, 2, 1);
        assert_eq!(lanes.of(1, false).push("q", 1), Some(vec![1]));
        assert_eq!(
            lanes.of(1, true).push("q", 2),
            None,
            "one small write at a time"
        );
        // Large calls do not wait behind small ones, and run two at a time.
        assert_eq!(lanes.of(LARGE_CALL, false).push("q", 100), Some(vec![100]));
        assert_eq!(
            lanes.of(LARGE_CALL + 5, false).push("q", 101),
            Some(vec![101])
        );
        assert_eq!(lanes.of(LARGE_CALL, false).push("q", 102), None);
        // Large calls served by packs have their own lane and limit.
        assert_eq!(lanes.of(LARGE_CALL, true).push("q", 200), Some(vec![200]));
        assert_eq!(lanes.of(LARGE_CALL, true).push("q", 201), None);
        assert_eq!(lanes.of(1, false).next("q"), Some(vec![2]));
        assert_eq!(lanes.of(LARGE_CALL, false).next("q"), Some(vec![102]));
        assert_eq!(lanes.of(LARGE_CALL, true).next("q"), Some(vec![201]));
    }
}
