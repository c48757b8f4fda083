//! What a governed queue shows in stats, /metrics and the console: integers only.

use serde::{Deserialize, Serialize};

use super::breaker::{BreakerState, Transition};
use crate::time::Timestamp;

/// One point of the recent history: the rate and the breaker state from `at` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowPoint {
    /// When.
    pub at: Timestamp,
    /// The adaptive rate, per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_min: Option<u32>,
    /// The breaker state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerState>,
}

/// The adaptive rate, for stats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateStats {
    /// The governed rate now, per minute.
    pub rate_per_min: u32,
    /// The configured bounds.
    pub min_per_min: u32,
    /// The configured bounds.
    pub max_per_min: u32,
    /// The `rate_limit` ceiling, per minute.
    pub ceiling_per_min: Option<u32>,
    /// Deliveries are held until then (a Retry-After), if later than now.
    pub hold_until: Option<Timestamp>,
    /// Congestion signals observed.
    pub congestion_total: u64,
    /// Decreases made.
    pub decreases_total: u64,
}

/// The breaker, for stats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerStats {
    /// Where it stands.
    pub state: BreakerState,
    /// Since when.
    pub since: Timestamp,
    /// Whether an operator forced it open.
    pub forced: bool,
    /// The failed share of the calls in the window, in permille.
    pub failure_share_permille: u16,
    /// Calls in the window.
    pub calls_in_window: u32,
    /// Times it opened.
    pub opened_total: u64,
    /// Time spent open or half-open, in ms.
    pub open_ms_total: u64,
    /// When an open breaker lets probes through.
    pub next_probe_at: Option<Timestamp>,
    /// Probes a half-open breaker may still let through.
    pub probes_left: u32,
    /// The last transitions, oldest first.
    pub transitions: Vec<Transition>,
}

/// A governed queue's state for stats, /metrics and the console: integers only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowStats {
    /// The adaptive rate, if the queue has one.
    pub adaptive: Option<RateStats>,
    /// The breaker, if the queue has one.
    pub breaker: Option<BreakerStats>,
    /// Changes of rate (a tenth or more) and breaker state, oldest first.
    pub history: Vec<FlowPoint>,
}
