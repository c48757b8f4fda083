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

    /// The audit entry of this event of `key` (`None`: the implicit key) of `queue`, when a
    /// key's event is audited: a breaker transition, as `key.breaker` with the key among its
    /// details. A key's rate changes are not audited (a queue may govern 100,000 keys); the
    /// keys listing shows each key's rate.
    pub fn audit_key(&self, queue: &str, key: Option<&str>) -> Option<AuditEvent> {
        let FlowEvent::Breaker(_) = self else {
            return None;
        };
        let mut e = self.audit(queue);
        e.action = "key.breaker".into();
        e.details
            .insert("key".into(), key.unwrap_or_default().to_owned());
        Some(e)
    }
}

/// Most audit entries of key breaker transitions per queue per minute; the rest are counted
/// and said in one `key.breaker_suppressed` entry when the minute is over, so a storm of
/// keys opening at once cannot flood the audit log.
pub const KEY_AUDITS_PER_MIN: u32 = 60;

/// A queue's allowance of key breaker audit entries ([`KEY_AUDITS_PER_MIN`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyAuditBudget {
    minute: i64,
    used: u32,
    suppressed: u64,
}

impl KeyAuditBudget {
    /// Of `events` of `queue`'s keys at `now` (`(key, event)`), the audit entries to write:
    /// the first [`KEY_AUDITS_PER_MIN`] of each minute, then one entry saying how many of the
    /// last minute were left out.
    pub fn entries<'k>(
        &mut self,
        queue: &str,
        now: Timestamp,
        events: impl IntoIterator<Item = (Option<&'k str>, FlowEvent)>,
    ) -> Vec<AuditEvent> {
        let mut out = Vec::new();
        let minute = now.as_millis().div_euclid(60_000);
        if minute != self.minute {
            if self.suppressed > 0 {
                let mut e = AuditEvent::by_broker(now, "key.breaker_suppressed");
                e.queue = Some(queue.to_owned());
                e.details
                    .insert("suppressed".into(), self.suppressed.to_string());
                e.details
                    .insert("per_min".into(), KEY_AUDITS_PER_MIN.to_string());
                out.push(e);
            }
            *self = KeyAuditBudget {
                minute,
                used: 0,
                suppressed: 0,
            };
        }
        for (key, event) in events {
            let Some(e) = event.audit_key(queue, key) else {
                continue;
            };
            if self.used < KEY_AUDITS_PER_MIN {
                self.used += 1;
                out.push(e);
            } else {
                self.suppressed += 1;
            }
        }
        out
    }
}
