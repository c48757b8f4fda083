//! A governed queue's adaptive rate and circuit breaker, as `flow` in its stats and as the
//! answer to `POST /v1/queues/{q}/breaker`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use sluice_core::adaptive::{
    BreakerForce, BreakerReason, BreakerState, BreakerStats, FlowPoint, FlowStats, RateStats,
    Transition,
};
use sluice_core::time::rfc3339;

/// Where a circuit breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BreakerStateView {
    /// Delivering; calls are counted.
    Closed,
    /// Not delivering: too many calls failed, or an operator opened it.
    Open,
    /// Letting a few probe deliveries through to see if the dependency is back.
    HalfOpen,
}

impl BreakerStateView {
    /// The state's name as it appears in JSON and metrics: `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        BreakerState::from(self).as_str()
    }
}

impl From<BreakerState> for BreakerStateView {
    fn from(s: BreakerState) -> Self {
        match s {
            BreakerState::Closed => BreakerStateView::Closed,
            BreakerState::Open => BreakerStateView::Open,
            BreakerState::HalfOpen => BreakerStateView::HalfOpen,
        }
    }
}

impl From<BreakerStateView> for BreakerState {
    fn from(s: BreakerStateView) -> Self {
        match s {
            BreakerStateView::Closed => BreakerState::Closed,
            BreakerStateView::Open => BreakerState::Open,
            BreakerStateView::HalfOpen => BreakerState::HalfOpen,
        }
    }
}

/// Why a circuit breaker changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BreakerReasonView {
    /// The failure share over the window reached `failure_share` (closed → open).
    Failures,
    /// The pause of `probe_every_ms` is over (open → half-open).
    PauseOver,
    /// Every probe succeeded (half-open → closed).
    ProbesSucceeded,
    /// A probe failed (half-open → open).
    ProbeFailed,
    /// An operator forced it.
    Forced,
}

impl BreakerReasonView {
    /// The reason's name as it appears in JSON and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerReasonView::Failures => BreakerReason::Failures,
            BreakerReasonView::PauseOver => BreakerReason::PauseOver,
            BreakerReasonView::ProbesSucceeded => BreakerReason::ProbesSucceeded,
            BreakerReasonView::ProbeFailed => BreakerReason::ProbeFailed,
            BreakerReasonView::Forced => BreakerReason::Forced,
        }
        .as_str()
    }
}

impl From<BreakerReason> for BreakerReasonView {
    fn from(r: BreakerReason) -> Self {
        match r {
            BreakerReason::Failures => BreakerReasonView::Failures,
            BreakerReason::PauseOver => BreakerReasonView::PauseOver,
            BreakerReason::ProbesSucceeded => BreakerReasonView::ProbesSucceeded,
            BreakerReason::ProbeFailed => BreakerReasonView::ProbeFailed,
            BreakerReason::Forced => BreakerReasonView::Forced,
        }
    }
}

/// A governed queue's adaptive delivery rate now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AdaptiveRateView {
    /// The governed rate now, in deliveries per minute.
    pub rate_per_min: u32,
    /// The configured lower bound, per minute.
    pub min_per_min: u32,
    /// The configured upper bound, per minute.
    pub max_per_min: u32,
    /// The queue's `rate_limit` as a rate per minute, which the rate never exceeds; absent
    /// without a `rate_limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling_per_min: Option<u32>,
    /// Nothing is delivered until then (RFC 3339): the latest Retry-After a consumer
    /// reported; absent when no hold is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<String>,
    /// Congestion signals observed.
    pub congestion_total: u64,
    /// Times the rate was cut.
    pub decreases_total: u64,
}

impl From<&RateStats> for AdaptiveRateView {
    fn from(r: &RateStats) -> Self {
        AdaptiveRateView {
            rate_per_min: r.rate_per_min,
            min_per_min: r.min_per_min,
            max_per_min: r.max_per_min,
            ceiling_per_min: r.ceiling_per_min,
            hold_until: r.hold_until.map(rfc3339),
            congestion_total: r.congestion_total,
            decreases_total: r.decreases_total,
        }
    }
}

/// One change of a breaker's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BreakerTransitionView {
    /// When (RFC 3339).
    pub at: String,
    /// The state it left.
    pub from: BreakerStateView,
    /// The state it entered.
    pub to: BreakerStateView,
    /// Why.
    pub reason: BreakerReasonView,
    /// The failed share of the calls in the window when it changed, in permille.
    pub failure_share_permille: u16,
    /// The calls in the window when it changed.
    pub calls: u32,
}

impl From<&Transition> for BreakerTransitionView {
    fn from(t: &Transition) -> Self {
        BreakerTransitionView {
            at: rfc3339(t.at),
            from: t.from.into(),
            to: t.to.into(),
            reason: t.reason.into(),
            failure_share_permille: t.failure_share_permille,
            calls: t.calls,
        }
    }
}

/// A governed queue's circuit breaker now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BreakerView {
    /// Where it stands.
    pub state: BreakerStateView,
    /// Since when (RFC 3339).
    pub since: String,
    /// True when an operator forced it open: it stays open, without probes, until forced
    /// closed.
    pub forced: bool,
    /// The failed share of the calls in the window, in permille.
    pub failure_share_permille: u16,
    /// Calls in the window.
    pub calls_in_window: u32,
    /// Times it opened.
    pub opened_total: u64,
    /// Time spent open or half-open, in ms, including the current spell.
    pub open_ms_total: u64,
    /// When an open breaker lets probes through (RFC 3339); absent when it is not open or
    /// was forced open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_probe_at: Option<String>,
    /// Probes a half-open breaker may still let through.
    pub probes_left: u32,
    /// The last transitions, oldest first.
    pub transitions: Vec<BreakerTransitionView>,
}

impl From<&BreakerStats> for BreakerView {
    fn from(b: &BreakerStats) -> Self {
        BreakerView {
            state: b.state.into(),
            since: rfc3339(b.since),
            forced: b.forced,
            failure_share_permille: b.failure_share_permille,
            calls_in_window: b.calls_in_window,
            opened_total: b.opened_total,
            open_ms_total: b.open_ms_total,
            next_probe_at: b.next_probe_at.map(rfc3339),
            probes_left: b.probes_left,
            transitions: b.transitions.iter().map(Into::into).collect(),
        }
    }
}

/// One point of a governed queue's recent history: its rate and breaker state from `at` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FlowPointView {
    /// When (RFC 3339).
    pub at: String,
    /// The adaptive rate, per minute; absent without an adaptive rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_min: Option<u32>,
    /// The breaker state; absent without a breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerStateView>,
}

impl From<&FlowPoint> for FlowPointView {
    fn from(p: &FlowPoint) -> Self {
        FlowPointView {
            at: rfc3339(p.at),
            rate_per_min: p.rate_per_min,
            breaker: p.breaker.map(Into::into),
        }
    }
}

/// A governed queue's adaptive rate and circuit breaker: `flow` in its stats, and the answer
/// to `POST /v1/queues/{q}/breaker`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FlowView {
    /// The adaptive rate; absent when the queue has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveRateView>,
    /// The circuit breaker; absent when the queue has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerView>,
    /// Changes of the rate (by a tenth or more) and of the breaker state, oldest first.
    #[serde(default)]
    pub history: Vec<FlowPointView>,
}

impl From<&FlowStats> for FlowView {
    fn from(f: &FlowStats) -> Self {
        FlowView {
            adaptive: f.adaptive.as_ref().map(Into::into),
            breaker: f.breaker.as_ref().map(Into::into),
            history: f.history.iter().map(Into::into).collect(),
        }
    }
}

/// `POST /v1/queues/{q}/breaker`: what an operator forces a queue's breaker to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerRequest {
    /// `open`: stays open, without probes, until forced `closed`; `closed`: closes with an
    /// empty window, automatic from then on.
    #[schema(value_type = String, pattern = "^(open|closed)$")]
    pub state: BreakerForce,
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::time::Timestamp;

    #[test]
    fn times_are_rfc3339_and_absent_parts_are_left_out() {
        let at = Timestamp(1_767_225_600_250);
        let stats = FlowStats {
            adaptive: Some(RateStats {
                rate_per_min: 120,
                min_per_min: 60,
                max_per_min: 600,
                ceiling_per_min: None,
                hold_until: Some(at),
                congestion_total: 3,
                decreases_total: 1,
            }),
            breaker: Some(BreakerStats {
                state: BreakerState::HalfOpen,
                since: at,
                forced: false,
                failure_share_permille: 500,
                calls_in_window: 20,
                opened_total: 1,
                open_ms_total: 30_000,
                next_probe_at: None,
                probes_left: 2,
                transitions: vec![Transition {
                    at,
                    from: BreakerState::Open,
                    to: BreakerState::HalfOpen,
                    reason: BreakerReason::PauseOver,
                    failure_share_permille: 500,
                    calls: 20,
                }],
            }),
            history: vec![FlowPoint {
                at,
                rate_per_min: Some(120),
                breaker: None,
            }],
        };
        let v = serde_json::to_value(FlowView::from(&stats)).unwrap();
        let a = &v["adaptive"];
        assert_eq!(a["hold_until"], "2026-01-01T00:00:00.25Z");
        assert!(a.get("ceiling_per_min").is_none(), "{v}");
        let b = &v["breaker"];
        assert_eq!(b["state"], "half_open");
        assert_eq!(b["since"], "2026-01-01T00:00:00.25Z");
        assert!(b.get("next_probe_at").is_none(), "{v}");
        assert_eq!(b["transitions"][0]["from"], "open");
        assert_eq!(b["transitions"][0]["reason"], "pause_over");
        assert_eq!(v["history"][0]["rate_per_min"], 120);
        assert!(v["history"][0].get("breaker").is_none(), "{v}");
        let back: FlowView = serde_json::from_value(v).unwrap();
        assert_eq!(back, FlowView::from(&stats));
        assert_eq!(BreakerStateView::HalfOpen.as_str(), "half_open");
        assert_eq!(
            BreakerReasonView::ProbesSucceeded.as_str(),
            "probes_succeeded"
        );
    }
}
