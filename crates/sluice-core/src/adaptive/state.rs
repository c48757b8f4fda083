//! A governed queue's state: the governor, the breaker and their recent history, with what
//! an engine asks of them (admit, leased, observe, force).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::breaker::{Breaker, BreakerForce, BreakerState, share_permille};
use super::config::{AdaptiveRate, BreakerConfig};
use super::events::{FlowEvent, RateReason};
use super::governor::{Governor, Step, per_min};
use super::outcome::{Outcome, Tally};
use super::stats::{BreakerStats, FlowPoint, FlowStats, RateStats};
use crate::config::RateLimit;
use crate::time::Timestamp;

/// History points kept: about an hour of a governor at work.
pub const HISTORY_KEPT: usize = 240;

/// What governs a queue, borrowed from its configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowConfig<'a> {
    /// The adaptive rate, if the queue has one.
    pub adaptive: Option<&'a AdaptiveRate>,
    /// The breaker, if the queue has one.
    pub breaker: Option<&'a BreakerConfig>,
    /// The queue's `rate_limit` as a rate per minute ([`super::ceiling_per_min`]).
    pub ceiling_per_min: Option<u32>,
}

impl FlowConfig<'_> {
    /// Whether there is anything to govern.
    pub fn is_governed(&self) -> bool {
        self.adaptive.is_some() || self.breaker.is_some()
    }
}

/// What may be leased now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Nothing: the breaker is open, or a Retry-After holds deliveries. `until` is when to
    /// ask again; `None` means until something changes (forced open, or probes outstanding).
    Shut {
        /// When to ask again.
        until: Option<Timestamp>,
    },
    /// A half-open breaker's probes: at most `n` deliveries, not paced.
    Probe {
        /// Deliveries allowed.
        n: u32,
    },
    /// As many as `pace` allows over the queue's recent deliveries (a sliding window of the
    /// governed rate, [`crate::rate::SlidingWindow`]).
    Paced {
        /// The governed rate, per minute.
        per_min: u32,
        /// The window that paces it.
        pace: RateLimit,
    },
    /// No limit from here (a breaker alone, closed).
    Free,
}

/// The governor, the breaker and their history: what an engine keeps per governed queue and
/// persists (as JSON) when it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    governor: Option<Governor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    breaker: Option<Breaker>,
    #[serde(default)]
    history: VecDeque<FlowPoint>,
    /// A key's state ([`FlowState::for_key`]): no history, no breaker transitions kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    lean: bool,
}

impl FlowState {
    /// The state of a queue starting to be governed at `now`; `None` when `cfg` governs
    /// nothing.
    pub fn new(cfg: FlowConfig<'_>, now: Timestamp) -> Option<Self> {
        if !cfg.is_governed() {
            return None;
        }
        let mut s = FlowState {
            governor: cfg
                .adaptive
                .map(|a| Governor::new(a, cfg.ceiling_per_min, now)),
            breaker: cfg.breaker.map(|b| Breaker::new(b, now)),
            history: VecDeque::new(),
            lean: false,
        };
        s.note(now, false);
        Some(s)
    }

    /// The queue's configuration changed: parts switched on start afresh, parts switched off
    /// are dropped, and the rate moves into new bounds.
    pub fn reconfigure(&mut self, cfg: FlowConfig<'_>, now: Timestamp) -> Vec<FlowEvent> {
        let mut events = Vec::new();
        match (cfg.adaptive, self.governor.as_mut()) {
            (None, _) => self.governor = None,
            (Some(a), None) => self.governor = Some(Governor::new(a, cfg.ceiling_per_min, now)),
            (Some(_), Some(g)) => {
                let step = g.reconfigure(cfg, now);
                push_step(&mut events, step, now, None);
            }
        }
        match (cfg.breaker, self.breaker.as_mut()) {
            (None, _) => self.breaker = None,
            (Some(b), None) => self.breaker = Some(Breaker::new(b, now)),
            (Some(c), Some(b)) => b.reconfigure(c),
        }
        self.note(now, !events.is_empty());
        events
    }

    /// Time-driven transitions: an open breaker whose pause is over turns half-open.
    /// [`FlowState::admit`] and [`FlowState::observe`] do this themselves.
    pub fn tick(&mut self, cfg: FlowConfig<'_>, now: Timestamp) -> Vec<FlowEvent> {
        let mut events = Vec::new();
        if let (Some(c), Some(b)) = (cfg.breaker, self.breaker.as_mut())
            && let Some(t) = b.tick(c, now)
        {
            events.push(FlowEvent::Breaker(t));
            self.note(now, false);
        }
        events
    }

    /// What may be leased at `now`. Call before leasing; lease at most that, then call
    /// [`FlowState::leased`].
    pub fn admit(&mut self, cfg: FlowConfig<'_>, now: Timestamp) -> (Admit, Vec<FlowEvent>) {
        let events = self.tick(cfg, now);
        (self.allowance(cfg, now), events)
    }

    /// What [`FlowState::admit`] would answer at `now`, without changing anything: for an
    /// engine that weighs many keys before leasing from a few of them.
    pub fn allowance(&self, cfg: FlowConfig<'_>, now: Timestamp) -> Admit {
        let held = self
            .governor
            .as_ref()
            .filter(|_| cfg.adaptive.is_some())
            .and_then(|g| g.held(now));
        if let (Some(c), Some(b)) = (cfg.breaker, self.breaker.as_ref()) {
            let (state, probes_left, probe_at) = b.after_tick(c, now);
            match state {
                BreakerState::Open => return Admit::Shut { until: probe_at },
                BreakerState::HalfOpen => {
                    return match (held, probes_left) {
                        (Some(h), _) => Admit::Shut { until: Some(h) },
                        (None, 0) => Admit::Shut { until: probe_at },
                        (None, n) => Admit::Probe { n },
                    };
                }
                BreakerState::Closed => {}
            }
        }
        match (cfg.adaptive, self.governor.as_ref()) {
            (Some(_), Some(_)) if held.is_some() => Admit::Shut { until: held },
            (Some(_), Some(g)) => Admit::Paced {
                per_min: g.per_min(),
                pace: g.pace(),
            },
            _ => Admit::Free,
        }
    }

    /// `n` deliveries were leased at `now` after [`FlowState::admit`]: probes are used up,
    /// and a round of the governor may end and grow the rate.
    pub fn leased(&mut self, cfg: FlowConfig<'_>, n: u32, now: Timestamp) -> Vec<FlowEvent> {
        let mut events = Vec::new();
        if n == 0 {
            return events;
        }
        if let (Some(c), Some(b)) = (cfg.breaker, self.breaker.as_mut()) {
            b.leased(c, n, now);
        }
        if let Some(g) = self.governor.as_mut() {
            let step = g.leased(cfg, n, now);
            push_step(&mut events, step, now, None);
        }
        self.note(now, !events.is_empty());
        events
    }

    /// Outcomes of deliveries observed at `now` (counted since the last call).
    pub fn observe(
        &mut self,
        cfg: FlowConfig<'_>,
        tally: &Tally,
        now: Timestamp,
    ) -> Vec<FlowEvent> {
        let mut events = self.tick(cfg, now);
        if tally.is_empty() {
            return events;
        }
        let mut rate_event = false;
        if let Some(g) = self.governor.as_mut() {
            let step = g.observe(cfg, tally, now);
            let ms = tally
                .longest_retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            rate_event = step.is_some();
            push_step(&mut events, step, now, ms);
        }
        if let (Some(c), Some(b)) = (cfg.breaker, self.breaker.as_mut())
            && let Some(t) = b.observe(c, tally, now)
        {
            if t.to == BreakerState::Open
                && let (Some(a), Some(g)) = (cfg.adaptive, self.governor.as_mut())
            {
                g.outage(a);
            }
            events.push(FlowEvent::Breaker(t));
        }
        self.note(now, rate_event);
        events
    }

    /// Whether a failed delivery ending in `outcome` spends the message's attempt: not while
    /// the breaker is open or half-open, and never for congestion (the dependency asked the
    /// broker to slow down; the message did nothing wrong, and the rate is the broker's to
    /// govern). Ask before observing the failure.
    pub fn counts_attempt(&self, outcome: Outcome) -> bool {
        !matches!(outcome, Outcome::Congestion { .. })
            && self.breaker.as_ref().is_none_or(Breaker::counts_attempt)
    }

    /// Whether there is a breaker to force.
    pub fn has_breaker(&self) -> bool {
        self.breaker.is_some()
    }

    /// An operator forces the breaker open (sticky, no probes) or closed (an empty window,
    /// automatic from then on). Without a breaker nothing happens.
    pub fn force(&mut self, f: BreakerForce, now: Timestamp) -> Vec<FlowEvent> {
        let mut events = Vec::new();
        if let Some(t) = self.breaker.as_mut().and_then(|b| b.force(f, now)) {
            events.push(FlowEvent::Breaker(t));
            self.note(now, false);
        }
        events
    }

    /// The state for stats at `now`.
    pub fn stats(&self, cfg: FlowConfig<'_>, now: Timestamp) -> FlowStats {
        let adaptive = match (cfg.adaptive, self.governor.as_ref()) {
            (Some(a), Some(g)) => Some(RateStats {
                rate_per_min: g.per_min(),
                min_per_min: a.min_per_min,
                max_per_min: a.max_per_min,
                ceiling_per_min: cfg.ceiling_per_min,
                hold_until: g.held(now),
                congestion_total: g.congestion_total,
                decreases_total: g.decreases_total,
            }),
            _ => None,
        };
        let breaker = self.breaker.as_ref().map(|b| {
            let (calls, failures) = b.window_at(now);
            BreakerStats {
                state: b.state,
                since: b.since,
                forced: b.forced,
                failure_share_permille: share_permille(failures, calls),
                calls_in_window: calls,
                opened_total: b.opened_total,
                open_ms_total: b.open_ms_total(now),
                next_probe_at: b.probe_at,
                probes_left: b.probes_left,
                transitions: b.transitions.iter().copied().collect(),
            }
        });
        FlowStats {
            adaptive,
            breaker,
            history: self.history.iter().copied().collect(),
        }
    }

    /// Adds a history point when the breaker changed state, the rate moved by a tenth or
    /// more since the last point, or a rate event was reported.
    fn note(&mut self, now: Timestamp, rate_event: bool) {
        if self.lean {
            // Dropped, not cleared: a cleared queue would keep its memory.
            if let Some(b) = self.breaker.as_mut().filter(|b| !b.transitions.is_empty()) {
                b.transitions = VecDeque::new();
            }
            return;
        }
        let point = FlowPoint {
            at: now,
            rate_per_min: self.governor.as_ref().map(Governor::per_min),
            breaker: self.breaker.as_ref().map(|b| b.state),
        };
        let changed = match self.history.back() {
            None => true,
            Some(last) => {
                let moved = match (last.rate_per_min, point.rate_per_min) {
                    (Some(a), Some(b)) => a.abs_diff(b).saturating_mul(10) >= a.max(1),
                    (a, b) => a != b,
                };
                last.breaker != point.breaker || moved || rate_event
            }
        };
        if changed {
            self.history.push_back(point);
            while self.history.len() > HISTORY_KEPT {
                self.history.pop_front();
            }
        }
    }

    /// Keeps no history from now on ([`FlowState::for_key`]).
    pub(super) fn make_lean(&mut self) {
        self.lean = true;
        self.history.clear();
        self.note(Timestamp(0), false);
    }

    /// Where the breaker stands, if there is one (a pause that is over still reads `Open`
    /// until the next call that ticks).
    pub fn breaker_state(&self) -> Option<BreakerState> {
        self.breaker.as_ref().map(|b| b.state)
    }

    /// The governed rate per minute, if there is an adaptive rate.
    pub fn rate_per_min(&self) -> Option<u32> {
        self.governor.as_ref().map(Governor::per_min)
    }

    /// When the breaker, forced open by an operator, must be kept whatever else is forgotten.
    pub fn forced_open(&self) -> bool {
        self.breaker.as_ref().is_some_and(|b| b.forced)
    }

    /// The governed rate in thousandths per minute, for tests.
    #[cfg(test)]
    pub(super) fn rate_mpm(&self) -> Option<u64> {
        self.governor.as_ref().map(|g| g.rate_mpm)
    }

    /// The hold, for tests.
    #[cfg(test)]
    pub(super) fn hold_until(&self) -> Option<Timestamp> {
        self.governor.as_ref().and_then(|g| g.hold_until)
    }
}

fn push_step(events: &mut Vec<FlowEvent>, step: Option<Step>, at: Timestamp, ms: Option<u64>) {
    if let Some(s) = step {
        events.push(FlowEvent::RateAdapted {
            at,
            from_per_min: per_min(s.from_mpm),
            to_per_min: per_min(s.to_mpm),
            reason: s.reason,
            retry_after_ms: (s.reason == RateReason::Congestion).then_some(ms).flatten(),
        });
    }
}
