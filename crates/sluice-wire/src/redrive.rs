//! Redrive jobs: moving dead letters back, with a guard and a pace.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use sluice_core::config::RateLimit;
use sluice_core::error::StoreError;
use sluice_core::name::QueueName;
use sluice_core::time::rfc3339;

use crate::browse::DeadLetterReasonView;
use crate::convert::millis;
use crate::queues::RateLimitWire;
use sluice_core::redrive::RedriveGuard;

/// The message filter of a redrive job; every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveFilterView {
    /// `last_error` contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_contains: Option<String>,
    /// `last_error` is exactly this text (one group of a summary by error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_is: Option<String>,
    /// Dead-lettered for this reason (one group of a summary by reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<DeadLetterReasonView>,
    /// Dead-lettered or moved from this queue (one group of a summary by source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_queue: Option<String>,
    /// Sent with this key (one group of a summary by key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Every one of these attributes has exactly this value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    /// Dead-lettered before this time: RFC 3339, or how long ago (`10m`, `1h`, `2d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_lettered_before: Option<String>,
    /// Dead-lettered at or after this time: RFC 3339, or how long ago (`10m`, `1h`, `2d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_lettered_after: Option<String>,
}

impl RedriveFilterView {
    /// The core filter, with times made absolute now (a job keeps the moments it was given).
    ///
    /// # Errors
    /// `InvalidArgument` for a time that is neither RFC 3339 nor a duration.
    pub fn to_core(&self) -> Result<sluice_core::redrive::RedriveFilter, StoreError> {
        use sluice_core::Clock as _;
        let now = sluice_core::SystemClock.now();
        let parse_time = |field: &str, s: &str| sluice_core::human::parse_time(field, s, now);
        Ok(sluice_core::redrive::RedriveFilter {
            error_contains: self.error_contains.clone(),
            error_is: self.error_is.clone(),
            reason: self.reason.map(Into::into),
            source_queue: self
                .source_queue
                .as_deref()
                .map(|q| {
                    QueueName::new(q)
                        .map_err(|e| StoreError::invalid(format!("filter.source_queue: {e}")))
                })
                .transpose()?,
            key: self
                .key
                .as_deref()
                .map(|k| {
                    sluice_core::fair::MessageKey::new(k)
                        .map_err(|e| StoreError::invalid(format!("filter.key: {e}")))
                })
                .transpose()?,
            attributes: self.attributes.clone(),
            dead_lettered_before: self
                .dead_lettered_before
                .as_deref()
                .map(|s| parse_time("filter.dead_lettered_before", s))
                .transpose()?,
            dead_lettered_after: self
                .dead_lettered_after
                .as_deref()
                .map(|s| parse_time("filter.dead_lettered_after", s))
                .transpose()?,
        })
    }
}

impl From<&sluice_core::redrive::RedriveFilter> for RedriveFilterView {
    fn from(f: &sluice_core::redrive::RedriveFilter) -> Self {
        RedriveFilterView {
            error_contains: f.error_contains.clone(),
            error_is: f.error_is.clone(),
            reason: f.reason.map(Into::into),
            source_queue: f.source_queue.as_ref().map(|q| q.as_str().to_owned()),
            key: f.key.as_ref().map(|k| k.as_str().to_owned()),
            attributes: f.attributes.clone(),
            dead_lettered_before: f.dead_lettered_before.map(rfc3339),
            dead_lettered_after: f.dead_lettered_after.map(rfc3339),
        }
    }
}

/// `POST /v1/redrives`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveRequest {
    /// The dead-letter queue to move from.
    pub source: String,
    /// Where to; absent sends each message back to its own `source_queue`.
    #[serde(default)]
    pub destination: Option<String>,
    /// Move at most this many.
    #[serde(default)]
    pub limit: Option<u64>,
    /// Never more than `limit` moves in any sliding `period_ms`, spread evenly: e.g.
    /// `{"limit": 50, "period_ms": 60000}` for 50 a minute (a faster rate than 100,000 a
    /// second is taken as 100,000 a second).
    #[serde(default)]
    pub rate: Option<RateLimitWire>,
    /// The same as `rate` with a period of one second (1 to 100000); give one or the other.
    #[serde(default)]
    pub rate_per_second: Option<u32>,
    /// Which messages.
    #[serde(default)]
    pub filter: Option<RedriveFilterView>,
    /// Pause the job when too many of the messages it moved fail again.
    #[serde(default)]
    pub pause_if_failing: Option<RedriveGuardView>,
    /// Start the moved messages' attempt count afresh (default true).
    #[serde(default)]
    pub reset_receive_count: Option<bool>,
    /// Count what would move, move nothing (default false).
    #[serde(default)]
    pub dry_run: Option<bool>,
}

impl RedriveRequest {
    /// The core spec.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad queue name, time or number.
    pub fn to_core(&self) -> Result<sluice_core::redrive::RedriveSpec, StoreError> {
        let spec = sluice_core::redrive::RedriveSpec {
            source: QueueName::new(self.source.clone())?,
            destination: self.destination.clone().map(QueueName::new).transpose()?,
            limit: self.limit,
            rate: match (&self.rate, self.rate_per_second) {
                (Some(_), Some(_)) => {
                    return Err(StoreError::invalid(
                        "give either rate or rate_per_second, not both",
                    ));
                }
                (Some(r), None) => Some(rate_to_core(r)?),
                (None, r) => r.map(RateLimit::per_second),
            },
            filter: self
                .filter
                .as_ref()
                .map(RedriveFilterView::to_core)
                .transpose()?
                .unwrap_or_default(),
            reset_receive_count: self.reset_receive_count.unwrap_or(true),
            dry_run: self.dry_run.unwrap_or(false),
            guard: self.pause_if_failing.as_ref().map(Into::into),
        };
        spec.validate()?;
        Ok(spec)
    }
}

/// A redrive job and its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RedriveView {
    /// Job id.
    pub id: String,
    /// `running`, `paused`, `completed` or `cancelled`.
    pub state: String,
    /// Why it is paused, while it is (by an operator, or by its guard with the failures seen).
    #[serde(default)]
    pub paused_reason: Option<String>,
    /// The dead-letter queue it moves from.
    pub source: String,
    /// Where to (absent: each message's `source_queue`).
    pub destination: Option<String>,
    /// Messages that matched so far (for a dry run: what would move).
    pub matched: u64,
    /// Messages moved so far.
    pub moved: u64,
    /// How many it will move in all, as far as is known now: what it moved, plus its source's
    /// messages that match its filter, within its limit. Given while it runs or is paused;
    /// once it has finished `moved` is the answer, and for a dry run `matched` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_move: Option<u64>,
    /// Matching messages left in place: no `source_queue` and no destination, or their
    /// destination no longer exists.
    pub skipped: u64,
    /// For a dry run: what it would move, matches with a queue to go to within the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_move: Option<u64>,
    /// What its scan passed without moving, by reason.
    #[serde(default)]
    pub skips: RedriveSkipsView,
    /// Why it leaves dead letters where they are, one sentence per reason, each saying what
    /// to do about it.
    #[serde(default)]
    pub skip_reasons: Vec<String>,
    /// Why it is waiting, while it is.
    pub blocked: Option<String>,
    /// The limit asked for.
    pub limit: Option<u64>,
    /// The rate asked for.
    #[serde(default)]
    pub rate: Option<RateLimitWire>,
    /// The rate asked for, when it is a whole number per second.
    pub rate_per_second: Option<u32>,
    /// The filter asked for.
    pub filter: RedriveFilterView,
    /// The guard asked for.
    #[serde(default)]
    pub pause_if_failing: Option<RedriveGuardView>,
    /// Whether attempt counts start afresh.
    pub reset_receive_count: bool,
    /// A dry run moves nothing.
    pub dry_run: bool,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it finished.
    pub finished_at: Option<String>,
}

impl From<&sluice_core::redrive::RedriveJob> for RedriveView {
    fn from(j: &sluice_core::redrive::RedriveJob) -> Self {
        RedriveView {
            id: j.id.to_string(),
            state: j.state.as_str().to_string(),
            paused_reason: j.paused_reason.clone(),
            source: j.spec.source.to_string(),
            destination: j.spec.destination.as_ref().map(|d| d.to_string()),
            matched: j.matched,
            moved: j.moved,
            to_move: None,
            skipped: j.skipped,
            would_move: j.spec.dry_run.then(|| j.would_move()),
            skips: RedriveSkipsView::from(&j.skips),
            skip_reasons: j.skip_reasons(),
            blocked: j.blocked.clone(),
            limit: j.spec.limit,
            rate: j.spec.rate.as_ref().map(rate_to_wire),
            rate_per_second: j
                .spec
                .rate
                .filter(|r| r.period == Duration::from_secs(1))
                .map(|r| r.limit),
            filter: RedriveFilterView::from(&j.spec.filter),
            pause_if_failing: j.spec.guard.as_ref().map(RedriveGuardView::from),
            reset_receive_count: j.spec.reset_receive_count,
            dry_run: j.spec.dry_run,
            created_at: rfc3339(j.created_at),
            updated_at: rfc3339(j.updated_at),
            finished_at: j.finished_at.map(rfc3339),
        }
    }
}

/// What a redrive's scan passed without moving, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RedriveSkipsView {
    /// Dead letters its filter left out.
    pub filtered: u64,
    /// Matching dead letters with no source queue recorded and no destination named.
    pub no_destination: u64,
    /// Matching dead letters whose destination queue does not exist.
    pub missing_destination: u64,
    /// Those missing queues, in the order met (at most 8).
    pub missing_queues: Vec<String>,
}

impl From<&sluice_core::redrive::RedriveSkips> for RedriveSkipsView {
    fn from(s: &sluice_core::redrive::RedriveSkips) -> Self {
        RedriveSkipsView {
            filtered: s.filtered,
            no_destination: s.no_destination,
            missing_destination: s.missing_destination,
            missing_queues: s.missing_queues.iter().map(ToString::to_string).collect(),
        }
    }
}

/// `GET /v1/redrives`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RedriveList {
    /// Running jobs and the most recent finished ones, newest first.
    pub redrives: Vec<RedriveView>,
}

/// The rate of a job: `{"limit": 50, "period_ms": 60000}` is 50 a minute. A rate faster
/// than the fastest a job may go is that fastest rate: each field is in its range, and a
/// combination of the two is not refused.
pub(super) fn rate_to_core(r: &RateLimitWire) -> Result<RateLimit, StoreError> {
    use sluice_core::redrive::MAX_RATE_PER_SECOND;
    let period = millis("rate.period_ms", r.period_ms)?;
    // A zero period is out of range, not fast: the job's checks refuse it.
    if !period.is_zero()
        && u128::from(r.limit) * 1000 > u128::from(MAX_RATE_PER_SECOND) * period.as_millis()
    {
        return Ok(RateLimit::per_second(MAX_RATE_PER_SECOND));
    }
    Ok(RateLimit {
        limit: r.limit,
        period,
        burst: r.burst,
    })
}

/// The wire form of a job's rate.
pub(super) fn rate_to_wire(r: &RateLimit) -> RateLimitWire {
    RateLimitWire {
        limit: r.limit,
        period_ms: i64::try_from(r.period.as_millis()).unwrap_or(i64::MAX),
        burst: r.burst,
    }
}

/// `pause_if_failing` of a redrive job: it pauses itself when more than `percent` % of the
/// last `window` messages it moved failed again (nacked, rejected, dead-lettered, or moved
/// away), counting only errors that contain `error_contains` when given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveGuardView {
    /// The share of failures that pauses the job, in percent (1 – 100).
    pub percent: u8,
    /// How many of the latest outcomes are judged (1 – 10,000; default 20). The job never
    /// pauses before it has seen this many.
    #[serde(default)]
    pub window: Option<u32>,
    /// Count only failures whose error contains this text, e.g. `429`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_contains: Option<String>,
}

impl From<&RedriveGuardView> for RedriveGuard {
    fn from(g: &RedriveGuardView) -> Self {
        RedriveGuard {
            percent: g.percent,
            window: g.window.unwrap_or(RedriveGuard::DEFAULT_WINDOW),
            error_contains: g.error_contains.clone(),
        }
    }
}

impl From<&RedriveGuard> for RedriveGuardView {
    fn from(g: &RedriveGuard) -> Self {
        RedriveGuardView {
            percent: g.percent,
            window: Some(g.window),
            error_contains: g.error_contains.clone(),
        }
    }
}
