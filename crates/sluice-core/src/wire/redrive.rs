//! The rate and guard of a redrive job on the wire.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{RateLimitWire, millis};
use crate::config::RateLimit;
use crate::error::StoreError;
use crate::redrive::RedriveGuard;

/// The rate of a job: `{"limit": 50, "period_ms": 60000}` is 50 a minute.
pub(super) fn rate_to_core(r: &RateLimitWire) -> Result<RateLimit, StoreError> {
    Ok(RateLimit {
        limit: r.limit,
        period: millis("rate.period_ms", r.period_ms)?,
    })
}

/// The wire form of a job's rate.
pub(super) fn rate_to_wire(r: &RateLimit) -> RateLimitWire {
    RateLimitWire {
        limit: r.limit,
        period_ms: i64::try_from(r.period.as_millis()).unwrap_or(i64::MAX),
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
