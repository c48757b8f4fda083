//! Queue statistics: gauges, totals, rates, trends, history and scaling hints.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use sluice_core::name::QueueName;
use sluice_core::stats::Totals;
use sluice_core::time::rfc3339;

use crate::convert::as_ms;
use crate::flow::FlowView;
use sluice_core::stats::QueueStats;
use sluice_core::trend::{DepthTrend, Rates, Trend};

/// Event totals since the queue was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TotalsView {
    /// Messages stored by send.
    pub sent: u64,
    /// Deliveries.
    pub received: u64,
    /// Acknowledgements.
    pub acked: u64,
    /// Nacks.
    pub nacked: u64,
    /// Messages sent to the DLQ.
    pub dead_lettered: u64,
    /// Messages redriven into this queue.
    pub redriven: u64,
    /// Messages that outlived retention.
    pub expired: u64,
}

impl From<&Totals> for TotalsView {
    fn from(t: &Totals) -> Self {
        TotalsView {
            sent: t.sent,
            received: t.received,
            acked: t.acked,
            nacked: t.nacked,
            dead_lettered: t.dead_lettered,
            redriven: t.redriven,
            expired: t.expired,
        }
    }
}

/// Query of `GET /v1/queues/{q}/scaling`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ScalingQuery {
    /// How many waiting or running tasks one worker should carry (1 to 1000000; default 1).
    #[serde(default = "one")]
    #[param(default = 1, minimum = 1, maximum = 1_000_000)]
    pub per_worker: u64,
}

impl Default for ScalingQuery {
    fn default() -> Self {
        ScalingQuery { per_worker: one() }
    }
}

pub(crate) fn one() -> u64 {
    1
}

/// `GET /v1/queues/{q}/scaling`: how many workers the queue wants, for KEDA-style and Ray
/// Serve autoscalers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScalingView {
    /// `ceil((backlog + in_flight) / per_worker)`; 0 when the queue is idle.
    pub desired_workers: u64,
    /// Visible messages.
    pub backlog: u64,
    /// Leased messages.
    pub in_flight: u64,
}

/// One point of a queue's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SampleView {
    /// When it was taken (RFC 3339).
    pub at: String,
    /// Visible messages.
    pub visible: u64,
    /// Delayed messages.
    pub delayed: u64,
    /// Leased messages.
    pub in_flight: u64,
    /// Messages in its DLQ.
    pub dead_letter_depth: u64,
    /// Age of the longest-waiting visible message.
    pub oldest_visible_age_ms: u64,
    /// Event totals at that time.
    pub totals: TotalsView,
}

impl From<&sluice_core::stats::StatsSample> for SampleView {
    fn from(s: &sluice_core::stats::StatsSample) -> Self {
        SampleView {
            at: rfc3339(s.at),
            visible: s.visible,
            delayed: s.delayed,
            in_flight: s.in_flight,
            dead_letter_depth: s.dead_letter_depth,
            oldest_visible_age_ms: s.oldest_visible_age_ms,
            totals: TotalsView::from(&s.totals),
        }
    }
}

/// Query of `GET /v1/queues/{q}/stats/history`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Points at or after this time: RFC 3339 (`2026-01-01T10:00:00Z`), or how long ago
    /// (`10m`, `1h`, `90s`, `2d`); default: one hour ago.
    #[param(min_length = 1)]
    pub since: Option<String>,
}

/// `GET /v1/queues/{q}/stats/history`: a point every 10 s, kept for 24 h.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HistoryView {
    /// The queue.
    pub queue: String,
    /// Time between points.
    pub interval_ms: u64,
    /// The points, oldest first.
    pub samples: Vec<SampleView>,
}

/// `GET /v1/queues/{q}/stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatsView {
    /// The queue.
    pub queue: String,
    /// Ready to be received now.
    pub visible: u64,
    /// Waiting for a delay or backoff.
    pub delayed: u64,
    /// Leased.
    pub in_flight: u64,
    /// Messages in this queue's DLQ.
    pub dead_letter_depth: u64,
    /// How long the longest-waiting visible message has been ready.
    pub oldest_visible_age_ms: u64,
    /// Completed records kept for `result_ttl`.
    pub completed: u64,
    /// Event totals.
    pub totals: TotalsView,
    /// Events per second over the last minute, counted from the queue's creation when it is
    /// younger.
    #[serde(default)]
    pub rates: RatesView,
    /// Events per second over the last five minutes.
    #[serde(default)]
    pub rates_5m: RatesView,
    /// Events per second over the last fifteen minutes.
    #[serde(default)]
    pub rates_15m: RatesView,
    /// Where the backlog (visible + delayed + in flight) is heading.
    #[serde(default)]
    pub backlog_trend: TrendView,
    /// Where the DLQ depth is heading; its ETA is the time to empty it while a redrive (or
    /// anything else) takes messages out.
    #[serde(default)]
    pub dlq_trend: TrendView,
    /// Deprecated, dropped in 0.2: `backlog_trend.slope`, which it equals.
    #[serde(default)]
    pub backlog_slope_per_sec: f64,
    /// Deprecated, dropped in 0.2: `backlog_trend.eta_ms`, which it equals.
    #[serde(default)]
    pub drain_eta_ms: Option<u64>,
    /// A governed queue's adaptive rate, circuit breaker and their recent history; absent
    /// for a queue that is not governed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowView>,
    /// Named keys with messages waiting or in flight (messages sent without a key are not
    /// counted as a key); `GET /v1/queues/{q}/keys` lists them.
    #[serde(default)]
    pub active_keys: u64,
    /// On a queue that governs keys one by one (`"scope": "key"`): how many keys have a state
    /// of their own, how many of those have their breaker open or half-open, and the keys with
    /// the highest learned rates; absent for other queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_flows: Option<KeyFlowsView>,
}

/// The keys of a queue that governs keys one by one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyFlowsView {
    /// Keys with a state of their own.
    pub keys: u64,
    /// Keys whose breaker is open.
    pub open: u64,
    /// Keys whose breaker is half-open.
    pub half_open: u64,
    /// The keys with the highest learned rates, highest first (at most 10).
    pub top_rates: Vec<KeyRateView>,
}

/// One key's learned rate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyRateView {
    /// The key; `null` for messages sent without one.
    pub key: Option<String>,
    /// Its learned rate, per minute.
    pub rate_per_min: u32,
}

impl From<&sluice_core::adaptive::KeyFlowSummary> for KeyFlowsView {
    fn from(s: &sluice_core::adaptive::KeyFlowSummary) -> Self {
        KeyFlowsView {
            keys: s.keys,
            open: s.open,
            half_open: s.half_open,
            top_rates: s
                .top_rates
                .iter()
                .map(|(key, r)| KeyRateView {
                    key: key.clone(),
                    rate_per_min: *r,
                })
                .collect(),
        }
    }
}

/// Events per second over one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RatesView {
    /// Sends per second.
    pub sent: f64,
    /// Deliveries per second.
    pub received: f64,
    /// Acknowledgements per second.
    pub acked: f64,
    /// Nacks per second.
    pub nacked: f64,
    /// Dead-letterings per second.
    pub dead_lettered: f64,
    /// Messages redriven into the queue per second.
    #[serde(default)]
    pub redriven: f64,
    /// Expiries per second.
    #[serde(default)]
    pub expired: f64,
}

impl From<&Rates> for RatesView {
    fn from(r: &Rates) -> Self {
        RatesView {
            sent: r.sent,
            received: r.received,
            acked: r.acked,
            nacked: r.nacked,
            dead_lettered: r.dead_lettered,
            redriven: r.redriven,
            expired: r.expired,
        }
    }
}

/// Where one depth is heading (every reading is defined in docs/readings.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TrendView {
    /// `rising`, `falling` or `flat`: the sign of `change_1m`, flat when it is at most one
    /// message or 5 % of the events through the depth in that minute.
    pub direction: String,
    /// The depth's change over the last minute (a queue younger than that: since creation).
    #[serde(default)]
    pub change_1m: i64,
    /// That change per second.
    #[serde(default)]
    pub slope: f64,
    /// Deprecated, dropped in 0.2: `slope`, which it equals.
    #[serde(default)]
    pub slope_1m: f64,
    /// The change over the last five minutes, per second.
    pub slope_5m: f64,
    /// While messages are being taken out: how long until none is left at the rate they
    /// leave at (at most a delivery cap's rate); `null` otherwise, and while paused or
    /// stalled.
    pub eta_ms: Option<u64>,
    /// Messages are visible and nothing has left for this long (10 s or more) while no
    /// delivery cap holds them: consumers are gone or stuck. `null` otherwise.
    #[serde(default)]
    pub stalled_for_ms: Option<u64>,
}

impl Default for TrendView {
    fn default() -> Self {
        TrendView::from(&DepthTrend::default())
    }
}

impl From<&DepthTrend> for TrendView {
    fn from(f: &DepthTrend) -> Self {
        TrendView {
            direction: f.direction.as_str().to_owned(),
            change_1m: f.change_1m,
            slope: f.slope,
            slope_1m: f.slope,
            slope_5m: f.slope_5m,
            eta_ms: f.eta.map(as_ms),
            stalled_for_ms: f.stalled_for.map(as_ms),
        }
    }
}

impl StatsView {
    /// The view of `stats` and its `trend` for `queue`.
    pub fn with_trend(queue: &QueueName, stats: &QueueStats, trend: &Trend) -> Self {
        let [m1, m5, m15] = &trend.rates;
        StatsView {
            rates: RatesView::from(m1),
            rates_5m: RatesView::from(m5),
            rates_15m: RatesView::from(m15),
            backlog_trend: TrendView::from(&trend.backlog),
            dlq_trend: TrendView::from(&trend.dead_letters),
            backlog_slope_per_sec: trend.backlog.slope,
            drain_eta_ms: trend.backlog.eta.map(as_ms),
            ..StatsView::new(queue, stats)
        }
    }

    /// The view of `stats` for `queue`, without a trend.
    pub fn new(queue: &QueueName, stats: &QueueStats) -> Self {
        StatsView {
            queue: queue.to_string(),
            visible: stats.visible,
            delayed: stats.delayed,
            in_flight: stats.in_flight,
            dead_letter_depth: stats.dead_letter_depth,
            oldest_visible_age_ms: as_ms(stats.oldest_visible_age),
            completed: stats.completed,
            totals: TotalsView::from(&stats.totals),
            rates: RatesView::default(),
            rates_5m: RatesView::default(),
            rates_15m: RatesView::default(),
            backlog_trend: TrendView::default(),
            dlq_trend: TrendView::default(),
            backlog_slope_per_sec: 0.0,
            drain_eta_ms: None,
            flow: stats.flow.as_ref().map(FlowView::from),
            active_keys: stats.active_keys,
            key_flows: stats.key_flows.as_ref().map(KeyFlowsView::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::adaptive::{BreakerConfig, FlowConfig, FlowState};
    use sluice_core::time::Timestamp;

    #[test]
    fn flow_is_shown_only_for_governed_queues() {
        let q = QueueName::new("jobs").unwrap();
        let plain = serde_json::to_value(StatsView::new(&q, &QueueStats::default())).unwrap();
        assert!(plain.get("flow").is_none());
        let breaker = BreakerConfig::default();
        let cfg = FlowConfig {
            breaker: Some(&breaker),
            ..FlowConfig::default()
        };
        let now = Timestamp(1_000_000);
        let stats = QueueStats {
            flow: FlowState::new(cfg, now).map(|f| f.stats(cfg, now)),
            ..QueueStats::default()
        };
        let view = serde_json::to_value(StatsView::new(&q, &stats)).unwrap();
        assert_eq!(view["flow"]["breaker"]["state"], "closed");
        let back: StatsView = serde_json::from_value(view).unwrap();
        assert_eq!(back.flow, stats.flow.as_ref().map(FlowView::from));
    }
}
