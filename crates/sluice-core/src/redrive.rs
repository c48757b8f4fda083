//! Redrive jobs (SPEC §5): move dead letters back to work once their cause is fixed.
//!
//! Why a server-side job with a rate rather than a bulk move: the dependency that failed has
//! just recovered, and a DLQ can hold hours of work. Putting it all back at once re-creates the
//! overload that filled the DLQ. A job moves messages in small atomic steps, never more than
//! `rate_per_second` in any one-second window, slows down while the destination is paused or at
//! its `max_in_flight`, records its progress with every step (so a restarted broker resumes
//! without moving a message twice), and can be cancelled at any point.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::message::{Attributes, Message};
use crate::name::QueueName;
use crate::time::Timestamp;

/// A redrive job's id: 16 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RedriveId(pub u64);

impl fmt::Display for RedriveId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl FromStr for RedriveId {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        if s.len() != 16 {
            return Err(StoreError::invalid(format!(
                "redrive id \"{s}\" is not 16 hex digits"
            )));
        }
        u64::from_str_radix(s, 16)
            .map(RedriveId)
            .map_err(|_| StoreError::invalid(format!("redrive id \"{s}\" is not 16 hex digits")))
    }
}

/// Which dead letters a job moves; every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveFilter {
    /// `last_error` contains this text.
    pub error_contains: Option<String>,
    /// Every one of these attributes has exactly this value.
    pub attributes: Attributes,
    /// Dead-lettered before this time.
    pub dead_lettered_before: Option<Timestamp>,
    /// Dead-lettered at or after this time.
    pub dead_lettered_after: Option<Timestamp>,
}

impl RedriveFilter {
    /// True when `m` passes every condition. A message without dead-letter information (sent
    /// straight to the DLQ) passes time conditions only if there are none.
    pub fn matches(&self, m: &Message) -> bool {
        if let Some(needle) = &self.error_contains
            && !m
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains(needle.as_str()))
        {
            return false;
        }
        if !self
            .attributes
            .iter()
            .all(|(k, v)| m.attributes.get(k) == Some(v))
        {
            return false;
        }
        let at = m.dead_letter.as_ref().map(|d| d.at);
        let before_ok = self
            .dead_lettered_before
            .is_none_or(|b| at.is_some_and(|t| t < b));
        let after_ok = self
            .dead_lettered_after
            .is_none_or(|a| at.is_some_and(|t| t >= a));
        before_ok && after_ok
    }
}

/// What an operator asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveSpec {
    /// The dead-letter queue to move from.
    pub source: QueueName,
    /// Where to; `None` sends each message back to its own `source_queue`.
    pub destination: Option<QueueName>,
    /// Move at most this many.
    pub limit: Option<u64>,
    /// Never more than this many in any one-second window; `None` is as fast as steps go.
    pub rate_per_second: Option<u32>,
    /// Which messages.
    pub filter: RedriveFilter,
    /// Start the moved messages' attempt count afresh (default true).
    pub reset_receive_count: bool,
    /// Count what would move, move nothing.
    pub dry_run: bool,
}

impl RedriveSpec {
    /// Checks the numbers.
    ///
    /// # Errors
    /// `InvalidArgument` for a zero limit or rate, or a rate over 100,000 per second.
    pub fn validate(&self) -> Result<(), StoreError> {
        if self.limit == Some(0) {
            return Err(StoreError::invalid(
                "limit must be at least 1 (omit it for no limit)",
            ));
        }
        if let Some(r) = self.rate_per_second
            && (r == 0 || r > 100_000)
        {
            return Err(StoreError::invalid(format!(
                "rate_per_second must be 1 to 100000 (omit it for no limit), got {r}"
            )));
        }
        if self.destination.as_ref() == Some(&self.source) {
            return Err(StoreError::invalid("destination must differ from source"));
        }
        Ok(())
    }
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedriveState {
    /// Moving (or waiting for its rate or its destination).
    Running,
    /// Done: the limit was reached or no matching message is left.
    Completed,
    /// Stopped by an operator.
    Cancelled,
}

impl RedriveState {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            RedriveState::Running => "running",
            RedriveState::Completed => "completed",
            RedriveState::Cancelled => "cancelled",
        }
    }
}

/// A job and its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveJob {
    /// Its id.
    pub id: RedriveId,
    /// What was asked.
    pub spec: RedriveSpec,
    /// Where it is.
    pub state: RedriveState,
    /// Messages that matched the filter so far (for a dry run: what would move).
    pub matched: u64,
    /// Messages moved so far.
    pub moved: u64,
    /// Matching messages left in place because they have no `source_queue` and the job has no
    /// destination, or their destination queue no longer exists.
    pub skipped: u64,
    /// Why it is waiting, while it is (e.g. "destination orders is paused").
    pub blocked: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// When it finished.
    pub finished_at: Option<Timestamp>,
    /// Where the scan of the source stands (engine-specific position).
    pub cursor: Option<(i64, u64)>,
}

impl RedriveJob {
    /// A new running job.
    pub fn new(id: RedriveId, spec: RedriveSpec, now: Timestamp) -> Self {
        RedriveJob {
            id,
            spec,
            state: RedriveState::Running,
            matched: 0,
            moved: 0,
            skipped: 0,
            blocked: None,
            created_at: now,
            updated_at: now,
            finished_at: None,
            cursor: None,
        }
    }

    /// Stops a running job. Returns false (and changes nothing) when it had finished already.
    pub fn cancel(&mut self, now: Timestamp) -> bool {
        if self.state != RedriveState::Running {
            return false;
        }
        self.state = RedriveState::Cancelled;
        self.blocked = None;
        self.updated_at = now;
        self.finished_at = Some(now);
        true
    }

    /// Marks the job completed.
    pub fn finish(&mut self, now: Timestamp) {
        self.state = RedriveState::Completed;
        self.finished_at = Some(now);
    }

    /// Ends the job after a step when it is done: its `limit` reached (messages matched for a
    /// dry run, moved otherwise), or the DLQ scanned to its end (`scanned_to_end`) with
    /// nothing held back (`stopped_early`: the step stopped for its batch size or quota;
    /// `blocked`: a message could not move).
    pub fn finish_if_done(&mut self, scanned_to_end: bool, stopped_early: bool, now: Timestamp) {
        let done = if self.spec.dry_run {
            self.matched
        } else {
            self.moved
        };
        let limit_reached = self.spec.limit.is_some_and(|l| done >= l);
        if limit_reached || (scanned_to_end && !stopped_early && self.blocked.is_none()) {
            self.finish(now);
        }
    }

    /// Refuses a step of a job that is not running.
    ///
    /// # Errors
    /// `Conflict` naming the job's state.
    pub fn check_running(&self) -> Result<(), StoreError> {
        if self.state == RedriveState::Running {
            return Ok(());
        }
        Err(StoreError::Conflict(format!(
            "redrive job {} is {}; only a running job takes steps",
            self.id,
            self.state.as_str()
        )))
    }
}

/// The error for a second job on a source while `running` (a job id, or a description)
/// still runs.
pub fn already_running(running: &str, source: &QueueName) -> StoreError {
    StoreError::Conflict(format!(
        "redrive job {running} of \"{}\" is still running; wait for it or cancel it (POST /v1/redrives/{running}/cancel)",
        source.as_str()
    ))
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedriveStep {
    /// The job after the step.
    pub job: RedriveJob,
    /// Messages moved by this step.
    pub moved_now: u64,
    /// When the moves took effect (for rate accounting).
    pub at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{DeadLetter, DeadLetterReason, MessageId, MessageState};

    fn dead(error: &str, at: i64, attrs: &[(&str, &str)]) -> Message {
        Message {
            id: MessageId(1),
            queue: QueueName::new("q.dlq").unwrap(),
            state: MessageState::Visible,
            body: None,
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            enqueued_at: Timestamp(0),
            entered_at: Timestamp(0),
            visible_at: None,
            receive_count: 3,
            last_error: Some(error.into()),
            attempts: vec![],
            dedup_id: None,
            source_queue: None,
            dead_letter: Some(DeadLetter {
                reason: DeadLetterReason::Exhausted,
                at: Timestamp(at),
            }),
            result: None,
            completed_at: None,
            cancelled: false,
            progress: None,
        }
    }

    #[test]
    fn filters_combine_with_and() {
        let m = dead("upstream 503 Service Unavailable", 1000, &[("tenant", "a")]);
        assert!(RedriveFilter::default().matches(&m));
        let f = |e: Option<&str>,
                 before: Option<i64>,
                 after: Option<i64>,
                 attr: Option<(&str, &str)>| RedriveFilter {
            error_contains: e.map(str::to_string),
            attributes: attr
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            dead_lettered_before: before.map(Timestamp),
            dead_lettered_after: after.map(Timestamp),
        };
        assert!(f(Some("503"), None, None, None).matches(&m));
        assert!(!f(Some("429"), None, None, None).matches(&m));
        assert!(f(None, Some(1001), Some(1000), None).matches(&m));
        assert!(!f(None, Some(1000), None, None).matches(&m));
        assert!(!f(None, None, Some(1001), None).matches(&m));
        assert!(f(Some("503"), None, None, Some(("tenant", "a"))).matches(&m));
        assert!(!f(Some("503"), None, None, Some(("tenant", "b"))).matches(&m));
    }

    #[test]
    fn specs_are_checked() {
        let spec = |limit, rate| RedriveSpec {
            source: QueueName::new("q.dlq").unwrap(),
            destination: None,
            limit,
            rate_per_second: rate,
            filter: RedriveFilter::default(),
            reset_receive_count: true,
            dry_run: false,
        };
        assert!(spec(Some(1), Some(10)).validate().is_ok());
        assert!(spec(Some(0), None).validate().is_err());
        assert!(spec(None, Some(0)).validate().is_err());
        assert!(spec(None, Some(100_001)).validate().is_err());
        assert_eq!(
            RedriveId(255).to_string().parse::<RedriveId>().unwrap(),
            RedriveId(255)
        );
    }
}
