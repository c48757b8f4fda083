//! What a governed queue reports to the audit log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::breaker::Transition;
use crate::audit::AuditEvent;
use crate::time::Timestamp;

/// Why the adaptive rate changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateReason {
    /// Rounds in which the rate held deliveries back without congestion.
    Growth,
    /// Congestion.
    Congestion,
    /// New bounds (`min_per_min`, `max_per_min` or `rate_limit` changed).
    Config,
    /// Rounds in which the queue had less work than its rate: a rate far above what the
    /// dependency accepted comes down.
    Unused,
}

impl RateReason {
    /// The reason's name as it appears in JSON and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            RateReason::Growth => "growth",
            RateReason::Congestion => "congestion",
            RateReason::Config => "config",
            RateReason::Unused => "unused",
        }
    }
}

/// A change worth an audit entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowEvent {
    /// The rate moved by a quarter or more since the last such event, or onto a bound.
    RateAdapted {
        /// When.
        at: Timestamp,
        /// The rate of the last such event, per minute.
        from_per_min: u32,
        /// The rate now, per minute.
        to_per_min: u32,
        /// Why.
        reason: RateReason,
        /// The longest Retry-After of the congestion that cut it, in ms.
        retry_after_ms: Option<u64>,
    },
    /// The breaker changed state.
    Breaker(Transition),
}

impl FlowEvent {
    /// The audit entry of this event on `queue`, by the broker: `queue.rate_adapted` or
    /// `queue.breaker`.
    pub fn audit(&self, queue: &str) -> AuditEvent {
        let mut details = BTreeMap::new();
        let (at, action) = match self {
            FlowEvent::RateAdapted {
                at,
                from_per_min,
                to_per_min,
                reason,
                retry_after_ms,
            } => {
                details.insert("from_per_min".into(), from_per_min.to_string());
                details.insert("to_per_min".into(), to_per_min.to_string());
                details.insert("reason".into(), reason.as_str().into());
                if let Some(ms) = retry_after_ms {
                    details.insert("retry_after_ms".into(), ms.to_string());
                }
                (*at, "queue.rate_adapted")
            }
            FlowEvent::Breaker(t) => {
                details.insert("from".into(), t.from.as_str().into());
                details.insert("to".into(), t.to.as_str().into());
                details.insert("reason".into(), t.reason.as_str().into());
                details.insert(
                    "failure_share".into(),
                    format!("{}", f64::from(t.failure_share_permille) / 1000.0),
                );
                details.insert("calls".into(), t.calls.to_string());
                (t.at, "queue.breaker")
            }
        };
        let mut e = AuditEvent::by_broker(at, action);
        e.queue = Some(queue.to_owned());
        e.details = details;
        e
    }
}
