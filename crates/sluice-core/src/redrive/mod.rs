//! Redrive jobs: move dead letters back to work once their cause is fixed.
//!
//! Why a server-side job with a rate rather than a bulk move: the dependency that failed has
//! just recovered, and a DLQ can hold hours of work. Putting it all back at once re-creates the
//! overload that filled the DLQ. A job moves messages in small atomic steps, never more than
//! its rate (`limit` per `period`, such as the upstream's quota of 50 a minute) in any sliding
//! period and spread evenly within it, slows down while the destination is paused or at its
//! `max_in_flight`, records its progress with every step (so a restarted broker resumes
//! without moving a message twice), and can be paused, resumed and cancelled at any point.
//!
//! A guard (`pause_if_failing`) watches what becomes of the messages a job moved: when too
//! many of them fail again (nacked, rejected, dead-lettered once more, or failing with an
//! error that contains a given text such as `429`), the upstream has not recovered, and the
//! job pauses itself with the reason rather than burn the rest of the DLQ's attempts.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::config::RateLimit;
use crate::error::StoreError;
use crate::message::{Attributes, DeadLetterReason, Message, MessageId};
use crate::name::QueueName;
use crate::time::Timestamp;

mod skips;
pub use skips::{MISSING_NAMED, RedriveSkips};

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
        crate::message::parse_hex16(s, "redrive id").map(RedriveId)
    }
}

/// Which dead letters a job moves; every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveFilter {
    /// `last_error` contains this text.
    pub error_contains: Option<String>,
    /// `last_error` is exactly this text: one group of a summary by error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_is: Option<String>,
    /// Dead-lettered for this reason: one group of a summary by reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<DeadLetterReason>,
    /// Dead-lettered or moved from this queue: one group of a summary by source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_queue: Option<QueueName>,
    /// Sent with this key: one group of a summary by key (messages without a key are not
    /// selected by any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<crate::fair::MessageKey>,
    /// Every one of these attributes has exactly this value.
    pub attributes: Attributes,
    /// Dead-lettered before this time.
    pub dead_lettered_before: Option<Timestamp>,
    /// Dead-lettered at or after this time.
    pub dead_lettered_after: Option<Timestamp>,
}

impl RedriveFilter {
    /// Checks the filter's texts ([`crate::text`]).
    ///
    /// # Errors
    /// `InvalidArgument` for a text holding U+0000.
    pub fn validate(&self) -> Result<(), StoreError> {
        if let Some(t) = &self.error_contains {
            crate::text::refuse_nul("filter.error_contains", t)?;
        }
        if let Some(t) = &self.error_is {
            crate::text::refuse_nul("filter.error_is", t)?;
        }
        crate::text::refuse_nul_in_map("filter attribute", &self.attributes)
    }

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
        if self
            .error_is
            .as_deref()
            .is_some_and(|e| m.last_error.as_deref() != Some(e))
        {
            return false;
        }
        if self
            .reason
            .is_some_and(|r| m.dead_letter.as_ref().map(|d| d.reason) != Some(r))
        {
            return false;
        }
        if self
            .source_queue
            .as_ref()
            .is_some_and(|q| m.source_queue.as_ref() != Some(q))
        {
            return false;
        }
        if self.key.as_ref().is_some_and(|k| m.key.as_ref() != Some(k)) {
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
#[serde(from = "SpecRepr")]
pub struct RedriveSpec {
    /// The dead-letter queue to move from.
    pub source: QueueName,
    /// Where to; `None` sends each message back to its own `source_queue`.
    pub destination: Option<QueueName>,
    /// Move at most this many.
    pub limit: Option<u64>,
    /// Never more than `limit` moves in any sliding `period`; `None` is as fast as steps go.
    pub rate: Option<RateLimit>,
    /// Which messages.
    pub filter: RedriveFilter,
    /// Start the moved messages' attempt count afresh (default true).
    pub reset_receive_count: bool,
    /// Count what would move, move nothing.
    pub dry_run: bool,
    /// Pause the job when too many of the messages it moved fail again.
    pub guard: Option<RedriveGuard>,
}

/// The stored form of a spec, which jobs written before rates per period were stored in:
/// their `rate_per_second` reads as a rate per second.
#[derive(Deserialize)]
struct SpecRepr {
    source: QueueName,
    destination: Option<QueueName>,
    limit: Option<u64>,
    #[serde(default)]
    rate: Option<RateLimit>,
    #[serde(default)]
    rate_per_second: Option<u32>,
    filter: RedriveFilter,
    reset_receive_count: bool,
    dry_run: bool,
    #[serde(default)]
    guard: Option<RedriveGuard>,
}

impl From<SpecRepr> for RedriveSpec {
    fn from(r: SpecRepr) -> Self {
        RedriveSpec {
            source: r.source,
            destination: r.destination,
            limit: r.limit,
            rate: r.rate.or(r.rate_per_second.map(RateLimit::per_second)),
            filter: r.filter,
            reset_receive_count: r.reset_receive_count,
            dry_run: r.dry_run,
            guard: r.guard,
        }
    }
}

/// When a job pauses itself: more than `percent` % of the last `window` outcomes of the
/// messages it moved were failures (only failures whose error contains `error_contains`,
/// when given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveGuard {
    /// The share of failures that pauses the job, in percent (1 to 100; pausing needs more
    /// than this).
    pub percent: u8,
    /// How many of the latest outcomes are judged; the job never pauses before it has seen
    /// this many (1 to 10,000; default 20).
    pub window: u32,
    /// Count only failures whose error contains this text (e.g. `429`).
    pub error_contains: Option<String>,
}

impl RedriveGuard {
    /// The window used when none is given.
    pub const DEFAULT_WINDOW: u32 = 20;

    /// Whether `failed` failures among `outcomes` (a full window) pause the job.
    pub fn trips(&self, failed: usize, outcomes: usize) -> bool {
        outcomes >= self.window as usize && failed * 100 > usize::from(self.percent) * outcomes
    }
}

/// The fastest rate a job may ask for.
pub const MAX_RATE_PER_SECOND: u32 = 100_000;

impl RedriveSpec {
    /// Every queue the job names: its source, its destination and its filter's source
    /// queue. A job belongs to each of them, so a key sees or controls it only when it covers
    /// all of them (a job naming a queue outside the key would reveal that queue).
    pub fn queues(&self) -> impl Iterator<Item = &QueueName> {
        std::iter::once(&self.source)
            .chain(&self.destination)
            .chain(&self.filter.source_queue)
    }

    /// Checks the numbers.
    ///
    /// # Errors
    /// `InvalidArgument` for a zero limit, a rate out of range, or a guard out of range.
    pub fn validate(&self) -> Result<(), StoreError> {
        self.filter.validate()?;
        if let Some(t) = self.guard.as_ref().and_then(|g| g.error_contains.as_ref()) {
            crate::text::refuse_nul("pause_if_failing.error_contains", t)?;
        }
        if self.limit == Some(0) {
            return Err(StoreError::invalid(
                "limit must be at least 1 (omit it for no limit)",
            ));
        }
        if let Some(r) = &self.rate {
            let period_ms = r.period.as_millis();
            if r.limit == 0 || !(1..=86_400_000).contains(&period_ms) {
                return Err(StoreError::invalid(format!(
                    "rate must allow at least 1 message per period of 1 ms to 24 h (e.g. 50 per 60000 ms), got {} per {period_ms} ms",
                    r.limit
                )));
            }
            if u128::from(r.limit) * 1000 > u128::from(MAX_RATE_PER_SECOND) * period_ms {
                return Err(StoreError::invalid(format!(
                    "rate must be at most {MAX_RATE_PER_SECOND} per second (omit it for no limit), got {} per {period_ms} ms",
                    r.limit
                )));
            }
        }
        if let Some(g) = &self.guard {
            if !(1..=100).contains(&g.percent) {
                return Err(StoreError::invalid(format!(
                    "pause_if_failing.percent must be 1 to 100, got {}",
                    g.percent
                )));
            }
            if !(1..=10_000).contains(&g.window) {
                return Err(StoreError::invalid(format!(
                    "pause_if_failing.window must be 1 to 10000 outcomes, got {}",
                    g.window
                )));
            }
        }
        if self.destination.as_ref() == Some(&self.source) {
            // Well-formed, but it names the source twice: a conflict, not bad input.
            return Err(StoreError::Conflict(
                "destination must differ from source".to_owned(),
            ));
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
    /// Waiting to be resumed: paused by an operator or by its guard. It still holds its
    /// source, so no second job can start there meanwhile.
    Paused,
}

impl RedriveState {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            RedriveState::Running => "running",
            RedriveState::Completed => "completed",
            RedriveState::Cancelled => "cancelled",
            RedriveState::Paused => "paused",
        }
    }

    /// Running or paused: the job holds its source.
    pub fn is_active(self) -> bool {
        matches!(self, RedriveState::Running | RedriveState::Paused)
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
    /// Messages that matched the filter so far, the skipped ones among them (for a dry run,
    /// [`RedriveJob::would_move`] says what would move).
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
    /// Why it is paused, while it is.
    #[serde(default)]
    pub paused_reason: Option<String>,
    /// What its scan passed without moving, by reason ([`RedriveJob::skip_reasons`]).
    #[serde(default)]
    pub skips: RedriveSkips,
}

/// What an operator (or a job's guard) does to a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveControl {
    /// Stop for good.
    Cancel,
    /// Stop moving until resumed, saying why.
    Pause {
        /// Shown in the job and the audit log.
        reason: String,
    },
    /// Go on after a pause.
    Resume,
}

impl RedriveControl {
    /// The verb, for messages and the audit log.
    pub fn as_str(&self) -> &'static str {
        match self {
            RedriveControl::Cancel => "cancel",
            RedriveControl::Pause { .. } => "pause",
            RedriveControl::Resume => "resume",
        }
    }
}

/// Why a step stopped at destination `dest`, which holds `max` leased messages, its
/// `max_in_flight`: moving more would only make them wait there (the job's `blocked`).
pub fn blocked_at_max_in_flight(dest: &str, max: u32) -> String {
    format!("destination \"{dest}\" is at its max_in_flight ({max})")
}

impl RedriveJob {
    /// What the job will still move, given the `matching` messages still in its source:
    /// those, within what is left of its limit.
    pub fn left_to_move(&self, matching: u64) -> u64 {
        self.spec
            .limit
            .map_or(matching, |l| l.saturating_sub(self.moved).min(matching))
    }

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
            paused_reason: None,
            skips: RedriveSkips::default(),
        }
    }

    /// Applies `control`. Returns whether the job changed: cancelling a finished job, pausing a
    /// paused one or resuming a running one changes nothing and is not an error.
    ///
    /// # Errors
    /// `Conflict` for pausing or resuming a finished job.
    pub fn control(
        &mut self,
        control: &RedriveControl,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let next = match (control, self.state) {
            (RedriveControl::Cancel, s) if s.is_active() => RedriveState::Cancelled,
            (RedriveControl::Cancel, _)
            | (RedriveControl::Pause { .. }, RedriveState::Paused)
            | (RedriveControl::Resume, RedriveState::Running) => return Ok(false),
            (RedriveControl::Pause { .. }, RedriveState::Running) => RedriveState::Paused,
            (RedriveControl::Resume, RedriveState::Paused) => RedriveState::Running,
            (c, s) => {
                return Err(StoreError::Conflict(format!(
                    "redrive job {} is {}; only an active job can {}",
                    self.id,
                    s.as_str(),
                    c.as_str()
                )));
            }
        };
        self.state = next;
        self.blocked = None;
        self.updated_at = now;
        self.paused_reason = match control {
            RedriveControl::Pause { reason } => Some(reason.clone()),
            _ => None,
        };
        if next == RedriveState::Cancelled {
            self.finished_at = Some(now);
        }
        Ok(true)
    }

    /// Marks the job completed.
    pub fn finish(&mut self, now: Timestamp) {
        self.state = RedriveState::Completed;
        self.finished_at = Some(now);
    }

    /// Ends the job after a step when it is done: its `limit` of moves reached, or the DLQ
    /// scanned to its end (`scanned_to_end`) with nothing held back (`stopped_early`: the step stopped for its batch size or quota;
    /// `blocked`: a message could not move).
    pub fn finish_if_done(&mut self, scanned_to_end: bool, stopped_early: bool, now: Timestamp) {
        // A dry run counts past its limit, to say how many lie beyond it.
        let limit_reached = !self.spec.dry_run && self.spec.limit.is_some_and(|l| self.moved >= l);
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
    StoreError::RedriveRunning {
        running: running.to_owned(),
        queue: source.as_str().to_owned(),
    }
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
    /// The messages this step moved (none for a dry run), for the job's guard.
    pub moved_ids: Vec<MessageId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{DeadLetter, DeadLetterReason, MessageId, MessageState};

    fn dead(error: &str, at: i64, attrs: &[(&str, &str)]) -> Message {
        Message {
            trace: None,
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
            group: None,
            key: None,
            priority: None,
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
            ..RedriveFilter::default()
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
    fn one_summary_group_is_selected_exactly() {
        let mut m = dead("upstream 503", 1000, &[]);
        m.source_queue = Some(QueueName::new("orders").unwrap());
        let is = |f: RedriveFilter| f.matches(&m);
        let error_is = |e: &str| RedriveFilter {
            error_is: Some(e.into()),
            ..RedriveFilter::default()
        };
        assert!(is(error_is("upstream 503")));
        assert!(!is(error_is("503")), "a part of the error is another group");
        let reason = |r| RedriveFilter {
            reason: Some(r),
            ..RedriveFilter::default()
        };
        assert!(is(reason(DeadLetterReason::Exhausted)));
        assert!(!is(reason(DeadLetterReason::Rejected)));
        let source = |q: &str| RedriveFilter {
            source_queue: Some(QueueName::new(q).unwrap()),
            ..RedriveFilter::default()
        };
        assert!(is(source("orders")));
        assert!(!is(source("billing")));
        m.dead_letter = None;
        assert!(
            !reason(DeadLetterReason::Exhausted).matches(&m),
            "no reason is no group"
        );
    }

    #[test]
    fn specs_are_checked() {
        let spec = |limit, rate: Option<(u32, u64)>| RedriveSpec {
            source: QueueName::new("q.dlq").unwrap(),
            destination: None,
            limit,
            rate: rate.map(|(limit, ms)| RateLimit {
                limit,
                period: std::time::Duration::from_millis(ms),
                burst: None,
            }),
            filter: RedriveFilter::default(),
            reset_receive_count: true,
            dry_run: false,
            guard: None,
        };
        assert!(spec(Some(1), Some((10, 1000))).validate().is_ok());
        assert!(spec(None, Some((50, 60_000))).validate().is_ok(), "50/min");
        assert!(spec(None, Some((1, 3_600_000))).validate().is_ok(), "1/h");
        assert!(spec(Some(0), None).validate().is_err());
        assert!(spec(None, Some((0, 1000))).validate().is_err());
        assert!(spec(None, Some((100_001, 1000))).validate().is_err());
        assert!(spec(None, Some((1, 0))).validate().is_err());
        let guarded = |percent, window| RedriveSpec {
            guard: Some(RedriveGuard {
                percent,
                window,
                error_contains: None,
            }),
            ..spec(None, None)
        };
        assert!(guarded(10, 20).validate().is_ok());
        assert!(guarded(0, 20).validate().is_err());
        assert!(guarded(101, 20).validate().is_err());
        assert!(guarded(10, 0).validate().is_err());
        assert_eq!(
            RedriveId(255).to_string().parse::<RedriveId>().unwrap(),
            RedriveId(255)
        );
    }

    #[test]
    fn a_spec_stored_with_a_rate_per_second_reads_as_a_rate_per_second() {
        let old = r#"{"source":"q.dlq","destination":null,"limit":null,"rate_per_second":5,
            "filter":{"error_contains":null,"attributes":{},"dead_lettered_before":null,
            "dead_lettered_after":null},"reset_receive_count":true,"dry_run":false}"#;
        let spec: RedriveSpec = serde_json::from_str(old).unwrap();
        assert_eq!(spec.rate, Some(RateLimit::per_second(5)));
        assert_eq!(spec.guard, None);
        let again: RedriveSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn controls_move_between_states() {
        let spec = RedriveSpec {
            source: QueueName::new("q.dlq").unwrap(),
            destination: None,
            limit: None,
            rate: None,
            filter: RedriveFilter::default(),
            reset_receive_count: true,
            dry_run: false,
            guard: None,
        };
        let mut job = RedriveJob::new(RedriveId(1), spec, Timestamp(0));
        let pause = RedriveControl::Pause {
            reason: "upstream 429".into(),
        };
        assert!(job.control(&pause, Timestamp(1)).unwrap());
        assert_eq!(job.state, RedriveState::Paused);
        assert_eq!(job.paused_reason.as_deref(), Some("upstream 429"));
        assert!(
            !job.control(&pause, Timestamp(2)).unwrap(),
            "already paused"
        );
        assert!(job.control(&RedriveControl::Resume, Timestamp(3)).unwrap());
        assert_eq!(
            (job.state, job.paused_reason.as_deref()),
            (RedriveState::Running, None)
        );
        assert!(!job.control(&RedriveControl::Resume, Timestamp(4)).unwrap());
        job.control(&pause, Timestamp(5)).unwrap();
        assert!(job.control(&RedriveControl::Cancel, Timestamp(6)).unwrap());
        assert_eq!(job.finished_at, Some(Timestamp(6)));
        assert!(!job.control(&RedriveControl::Cancel, Timestamp(7)).unwrap());
        assert!(job.control(&RedriveControl::Resume, Timestamp(8)).is_err());
        assert!(job.control(&pause, Timestamp(8)).is_err());
    }

    #[test]
    fn a_guard_trips_only_on_a_full_window_over_its_share() {
        let g = RedriveGuard {
            percent: 10,
            window: 20,
            error_contains: None,
        };
        assert!(!g.trips(19, 19), "the window is not full");
        assert!(!g.trips(2, 20), "10 % is not more than 10 %");
        assert!(g.trips(3, 20));
    }
}
