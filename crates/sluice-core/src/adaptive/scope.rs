//! Per-key governing (`"scope": "key"`): which parts of a queue's configuration govern the
//! queue as a whole and which govern each key, and what a key's state shows.
//!
//! A queue may govern its rate per key and keep one breaker, or the other way round: each
//! part ([`AdaptiveRate`], [`BreakerConfig`]) has its own scope. A key's state is a
//! [`FlowState`] made by [`FlowState::for_key`]: the same rules, learned only from the
//! outcomes of that key's deliveries, without the history a queue keeps for its charts.
//! The queue's `rate_limit` and the key's `key_limits.rate_limit` are the key's ceilings.
//!
//! A key's state is forgotten once the key has had no delivery and no outcome for
//! [`key_idle`] (ten quota windows by default), unless an operator forced its breaker open:
//! the key starts again at `min_per_min`, in slow start, which doubles its rate each round
//! (a twelfth of the quota window) until the dependency pushes back. Starting afresh rather
//! than at a remembered rate is deliberate: a key idle that long may come back to a quota
//! that changed, and slow start finds the old rate again within a few rounds while never
//! opening with a burst the dependency might no longer take.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::breaker::BreakerState;
use super::config::{AdaptiveRate, BreakerConfig, FlowScope, ceiling_per_min};
use super::state::{Admit, FlowConfig, FlowState};
use crate::config::QueueConfig;
use crate::rate::SlidingWindow;
use crate::time::Timestamp;

impl<'a> FlowConfig<'a> {
    /// What governs queue `c` as a whole: its parts of `scope: queue`.
    pub fn of_queue(c: &'a QueueConfig) -> Self {
        FlowConfig {
            adaptive: c.adaptive.as_ref().filter(|a| a.scope == FlowScope::Queue),
            breaker: c.breaker.as_ref().filter(|b| b.scope == FlowScope::Queue),
            ceiling_per_min: c.rate_limit.as_ref().map(ceiling_per_min),
        }
    }

    /// What governs `key` (`None`: the implicit key) of queue `c` on its own: the parts of
    /// `scope: key`, under the lower of the queue's `rate_limit` and the key's own.
    pub fn of_key(c: &'a QueueConfig, key: Option<&str>) -> Self {
        let queue = c.rate_limit.as_ref().map(ceiling_per_min);
        let own = c
            .key_limits
            .as_ref()
            .and_then(|l| l.of(key).rate_limit)
            .map(|r| ceiling_per_min(&r));
        FlowConfig {
            adaptive: key_adaptive(c),
            breaker: key_breaker(c),
            ceiling_per_min: match (queue, own) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// Queue `c`'s adaptive rate, when each key has its own.
pub fn key_adaptive(c: &QueueConfig) -> Option<&AdaptiveRate> {
    c.adaptive.as_ref().filter(|a| a.scope == FlowScope::Key)
}

/// Queue `c`'s breaker, when each key has its own.
pub fn key_breaker(c: &QueueConfig) -> Option<&BreakerConfig> {
    c.breaker.as_ref().filter(|b| b.scope == FlowScope::Key)
}

/// Whether queue `c` governs its keys one by one.
pub fn governs_keys(c: &QueueConfig) -> bool {
    key_adaptive(c).is_some() || key_breaker(c).is_some()
}

/// How long a key of queue `c` keeps its state without deliveries or outcomes: the longer
/// of its parts' `key_idle_ms`. `None` when no part is per key.
pub fn key_idle(c: &QueueConfig) -> Option<Duration> {
    let a = key_adaptive(c).map(AdaptiveRate::key_idle);
    let b = key_breaker(c).map(BreakerConfig::key_idle);
    a.max(b)
}

/// A key held "until something changes" ([`key_room`]): an operator's order, or the answer
/// of an outstanding probe.
pub const UNTIL_CHANGED: i64 = i64::MAX;

/// How many deliveries a key's state admits at `now` (ms), given what it `admit`s
/// ([`FlowState::allowance`]) and its recent deliveries at its governed pace (`None`: none
/// yet); with none, until when (ms, [`UNTIL_CHANGED`] when only a change frees it).
pub fn key_room(admit: Admit, pace: Option<&SlidingWindow>, now: i64) -> (u32, Option<i64>) {
    match admit {
        Admit::Shut { until } => (0, Some(until.map_or(UNTIL_CHANGED, Timestamp::as_millis))),
        Admit::Probe { n } => (n, None),
        Admit::Paced { pace: p, .. } => {
            let fresh = SlidingWindow::default();
            let w = pace.unwrap_or(&fresh);
            match w.room(&p, Timestamp(now)) {
                0 => {
                    let free = w.clone().next_free(&p, Timestamp(now));
                    (0, Some(free.map_or(now + 1, Timestamp::as_millis)))
                }
                n => (n, None),
            }
        }
        Admit::Free => (u32::MAX, None),
    }
}

/// How many keys' learned rates a queue's stats name ([`KeyFlowSummary::top_rates`]).
pub const TOP_KEY_RATES: usize = 10;

/// The keys of a queue that governs keys one by one, for stats and /metrics: how many have a
/// state of their own, by breaker state, and the keys with the highest learned rates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFlowSummary {
    /// Keys with a state of their own (each key starts one at its first delivery and
    /// forgets it after `key_idle_ms`).
    pub keys: u64,
    /// Of those, keys whose breaker is open (a pause that is over still counts until the
    /// key's next delivery turns it half-open).
    pub open: u64,
    /// Keys whose breaker is half-open.
    pub half_open: u64,
    /// The keys with the highest learned rates (per minute), highest first, at most
    /// [`TOP_KEY_RATES`]; `None` is the implicit key.
    pub top_rates: Vec<(Option<String>, u32)>,
}

impl KeyFlowSummary {
    /// Counts `states` (key, state) of the keys of queue `c` at `now`.
    pub fn of<'k>(
        c: &QueueConfig,
        states: impl IntoIterator<Item = (Option<&'k str>, &'k FlowState)>,
        now: Timestamp,
    ) -> Self {
        let mut out = KeyFlowSummary::default();
        let mut rates = Vec::new();
        for (key, state) in states {
            let s = state.key_stats(FlowConfig::of_key(c, key), now);
            out.keys += 1;
            match s.breaker {
                Some(BreakerState::Open) => out.open += 1,
                Some(BreakerState::HalfOpen) => out.half_open += 1,
                _ => {}
            }
            if let Some(r) = s.rate_per_min {
                rates.push((key.map(str::to_owned), r));
            }
        }
        rates.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        rates.truncate(TOP_KEY_RATES);
        out.top_rates = rates;
        out
    }
}

/// A key's governed rate and breaker, for the keys listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFlowStats {
    /// The key's governed rate, per minute (with a per-key adaptive rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_min: Option<u32>,
    /// Deliveries of the key are held until then (its dependency's Retry-After).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<Timestamp>,
    /// The key's breaker (with a per-key breaker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerState>,
    /// Since when the breaker is in that state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_since: Option<Timestamp>,
    /// Whether an operator forced the breaker open.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
}

impl FlowState {
    /// The state of a key starting to be governed at `now` by `cfg` (its parts of
    /// `scope: key`): kept lean, without the history a queue's state keeps for its charts,
    /// since a queue may govern 100,000 keys.
    pub fn for_key(cfg: FlowConfig<'_>, now: Timestamp) -> Option<Self> {
        let mut s = FlowState::new(cfg, now)?;
        s.make_lean();
        Some(s)
    }

    /// What the keys listing shows of a key's state at `now`.
    pub fn key_stats(&self, cfg: FlowConfig<'_>, now: Timestamp) -> KeyFlowStats {
        let s = self.stats(cfg, now);
        KeyFlowStats {
            rate_per_min: s.adaptive.as_ref().map(|a| a.rate_per_min),
            hold_until: s.adaptive.and_then(|a| a.hold_until),
            breaker: s.breaker.as_ref().map(|b| b.state),
            breaker_since: s.breaker.as_ref().map(|b| b.since),
            forced: s.breaker.is_some_and(|b| b.forced),
        }
    }
}
