//! The circuit breaker: closed, open, half-open, over a window of time buckets.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::config::BreakerConfig;
use super::outcome::Tally;
use crate::time::Timestamp;

/// Buckets per window: the window slides by a tenth of its length.
const BUCKETS: i64 = 10;
/// Transitions kept for stats.
pub const TRANSITIONS_KEPT: usize = 20;

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Delivering; calls are counted.
    Closed,
    /// Not delivering: too many calls failed, or an operator opened it.
    Open,
    /// Letting a few probe deliveries through to see if the dependency is back.
    HalfOpen,
}

impl BreakerState {
    /// The state's name as it appears in JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Why a breaker changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerReason {
    /// The failure share over the window reached `failure_share` (closed → open).
    Failures,
    /// The pause of `probe_every` is over (open → half-open).
    PauseOver,
    /// Every probe succeeded (half-open → closed).
    ProbesSucceeded,
    /// A probe failed (half-open → open).
    ProbeFailed,
    /// An operator forced it.
    Forced,
}

impl BreakerReason {
    /// The reason's name as it appears in JSON and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerReason::Failures => "failures",
            BreakerReason::PauseOver => "pause_over",
            BreakerReason::ProbesSucceeded => "probes_succeeded",
            BreakerReason::ProbeFailed => "probe_failed",
            BreakerReason::Forced => "forced",
        }
    }
}

/// One change of a breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// When.
    pub at: Timestamp,
    /// The state it left.
    pub from: BreakerState,
    /// The state it entered.
    pub to: BreakerState,
    /// Why.
    pub reason: BreakerReason,
    /// The failure share over the window when it changed, in permille.
    pub failure_share_permille: u16,
    /// The calls in the window when it changed.
    pub calls: u32,
}

/// What an operator forces a breaker to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerForce {
    /// Open until forced closed: no probes.
    Open,
    /// Closed with an empty window; automatic from then on.
    Closed,
}

/// Calls and failures of one slice of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Bucket {
    /// `at / bucket_ms`.
    index: i64,
    calls: u32,
    failures: u32,
}

/// The breaker's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Breaker {
    pub(super) state: BreakerState,
    /// When it entered `state`.
    pub(super) since: Timestamp,
    /// Forced open by an operator: no probes until forced closed.
    pub(super) forced: bool,
    /// The bucket width the buckets were counted with.
    bucket_ms: i64,
    buckets: VecDeque<Bucket>,
    /// When an open breaker turns half-open.
    pub(super) probe_at: Option<Timestamp>,
    /// Probe deliveries a half-open breaker may still let through.
    pub(super) probes_left: u32,
    /// Probes that succeeded.
    probes_ok: u32,
    /// When it last left closed.
    not_closed_since: Option<Timestamp>,
    pub(super) opened_total: u64,
    /// Time spent open or half-open, up to the last close.
    open_ms_total: u64,
    pub(super) transitions: VecDeque<Transition>,
}

impl Breaker {
    pub(super) fn new(cfg: &BreakerConfig, now: Timestamp) -> Self {
        Breaker {
            state: BreakerState::Closed,
            since: now,
            forced: false,
            bucket_ms: bucket_ms(cfg),
            buckets: VecDeque::new(),
            probe_at: None,
            probes_left: 0,
            probes_ok: 0,
            not_closed_since: None,
            opened_total: 0,
            open_ms_total: 0,
            transitions: VecDeque::new(),
        }
    }

    /// A new configuration: a new window width starts an empty window.
    pub(super) fn reconfigure(&mut self, cfg: &BreakerConfig) {
        let width = bucket_ms(cfg);
        if width != self.bucket_ms {
            self.bucket_ms = width;
            self.buckets.clear();
        }
        if self.state == BreakerState::HalfOpen {
            self.probes_left = self
                .probes_left
                .min(cfg.probes.saturating_sub(self.probes_ok));
        }
    }

    /// True while attempts count against a message's budget: when closed.
    pub(super) fn counts_attempt(&self) -> bool {
        self.state == BreakerState::Closed
    }

    /// The time-driven transitions: an open breaker whose pause is over turns half-open; a
    /// half-open breaker whose probes have all been out for a pause without an answer lets
    /// the missing ones through again (an answer can be lost: a client gone before its ack
    /// was counted, a node that stopped before handing its outcomes over).
    pub(super) fn tick(&mut self, cfg: &BreakerConfig, now: Timestamp) -> Option<Transition> {
        let due = self.probe_at.is_some_and(|p| now >= p);
        match self.state {
            BreakerState::Open if !self.forced && due => {
                self.probes_left = cfg.probes;
                self.probes_ok = 0;
                self.probe_at = None;
                Some(self.enter(BreakerState::HalfOpen, BreakerReason::PauseOver, now))
            }
            BreakerState::HalfOpen if self.probes_left == 0 && due => {
                self.probes_left = cfg.probes.saturating_sub(self.probes_ok).max(1);
                self.probe_at = None;
                None
            }
            _ => None,
        }
    }

    /// The state, probes left and time of the next probe that [`Breaker::tick`] would leave
    /// at `now`, without ticking.
    pub(super) fn after_tick(
        &self,
        cfg: &BreakerConfig,
        now: Timestamp,
    ) -> (BreakerState, u32, Option<Timestamp>) {
        let due = self.probe_at.is_some_and(|p| now >= p);
        match self.state {
            BreakerState::Open if !self.forced && due => (BreakerState::HalfOpen, cfg.probes, None),
            BreakerState::HalfOpen if self.probes_left == 0 && due => (
                BreakerState::HalfOpen,
                cfg.probes.saturating_sub(self.probes_ok).max(1),
                None,
            ),
            s => (s, self.probes_left, self.probe_at),
        }
    }

    /// Probe deliveries leased at `now`: when the last one goes out, the pause after which
    /// they are given up for lost starts.
    pub(super) fn leased(&mut self, cfg: &BreakerConfig, n: u32, now: Timestamp) {
        if self.state == BreakerState::HalfOpen && n > 0 {
            self.probes_left = self.probes_left.saturating_sub(n);
            if self.probes_left == 0 {
                self.probe_at = Some(now.plus(cfg.probe_every()));
            }
        }
    }

    /// Outcomes observed at `now`. Congestion is a call that did not fail: the dependency
    /// answered. So is `Other`.
    pub(super) fn observe(
        &mut self,
        cfg: &BreakerConfig,
        t: &Tally,
        now: Timestamp,
    ) -> Option<Transition> {
        let answered = t.ok.saturating_add(t.other).saturating_add(t.congestion);
        match self.state {
            BreakerState::Closed => {
                let calls = answered.saturating_add(t.failures);
                if calls == 0 {
                    return None;
                }
                self.prune(now);
                let index = now.as_millis().div_euclid(self.bucket_ms);
                match self.buckets.back_mut() {
                    Some(b) if b.index == index => {
                        b.calls = b.calls.saturating_add(calls);
                        b.failures = b.failures.saturating_add(t.failures);
                    }
                    _ => self.buckets.push_back(Bucket {
                        index,
                        calls,
                        failures: t.failures,
                    }),
                }
                let (calls, failures) = self.window();
                let share_reached = u64::from(failures) * 1000
                    >= u64::from(cfg.failure_share_permille) * u64::from(calls);
                if t.failures > 0 && calls >= cfg.min_calls && share_reached {
                    return Some(self.open(cfg, BreakerReason::Failures, now));
                }
                None
            }
            BreakerState::HalfOpen => {
                if t.failures > 0 {
                    return Some(self.open(cfg, BreakerReason::ProbeFailed, now));
                }
                // Only a success or a 429 shows the dependency is back: a reject says the
                // message was wrong, and is often decided without calling the dependency.
                self.probes_ok = self
                    .probes_ok
                    .saturating_add(t.ok.saturating_add(t.congestion));
                if self.probes_ok >= cfg.probes {
                    self.probes_left = 0;
                    return Some(self.close(BreakerReason::ProbesSucceeded, now));
                }
                // A probe released or rejected lets another through.
                let outstanding = cfg
                    .probes
                    .saturating_sub(self.probes_ok)
                    .saturating_sub(self.probes_left);
                self.probes_left += t.neutral.saturating_add(t.other).min(outstanding);
                None
            }
            // Outcomes of deliveries leased before it opened say nothing new.
            BreakerState::Open => None,
        }
    }

    /// An operator's order.
    pub(super) fn force(&mut self, f: BreakerForce, now: Timestamp) -> Option<Transition> {
        match f {
            BreakerForce::Open => {
                self.forced = true;
                self.probe_at = None;
                self.probes_left = 0;
                (self.state != BreakerState::Open).then(|| {
                    self.opened_total += 1;
                    self.enter(BreakerState::Open, BreakerReason::Forced, now)
                })
            }
            BreakerForce::Closed => {
                self.forced = false;
                self.buckets.clear();
                (self.state != BreakerState::Closed).then(|| self.close(BreakerReason::Forced, now))
            }
        }
    }

    /// Calls and failures in the window (as of the last pruning).
    pub(super) fn window(&self) -> (u32, u32) {
        self.buckets.iter().fold((0u32, 0u32), |(c, f), b| {
            (c.saturating_add(b.calls), f.saturating_add(b.failures))
        })
    }

    /// Calls and failures in the window at `now`.
    pub(super) fn window_at(&self, now: Timestamp) -> (u32, u32) {
        let oldest = now.as_millis().div_euclid(self.bucket_ms) - BUCKETS + 1;
        self.buckets
            .iter()
            .filter(|b| b.index >= oldest)
            .fold((0u32, 0u32), |(c, f), b| {
                (c.saturating_add(b.calls), f.saturating_add(b.failures))
            })
    }

    /// Time spent open or half-open, up to `now`.
    pub(super) fn open_ms_total(&self, now: Timestamp) -> u64 {
        let current = self.not_closed_since.map_or(0, |s| {
            u64::try_from(now.since(s).as_millis()).unwrap_or(u64::MAX)
        });
        self.open_ms_total.saturating_add(current)
    }

    fn prune(&mut self, now: Timestamp) {
        let oldest = now.as_millis().div_euclid(self.bucket_ms) - BUCKETS + 1;
        while self.buckets.front().is_some_and(|b| b.index < oldest) {
            self.buckets.pop_front();
        }
    }

    fn open(&mut self, cfg: &BreakerConfig, reason: BreakerReason, now: Timestamp) -> Transition {
        self.opened_total += 1;
        self.probe_at = Some(now.plus(cfg.probe_every()));
        self.probes_left = 0;
        self.probes_ok = 0;
        let t = self.enter(BreakerState::Open, reason, now);
        self.buckets.clear();
        t
    }

    fn close(&mut self, reason: BreakerReason, now: Timestamp) -> Transition {
        self.open_ms_total = self.open_ms_total(now);
        self.not_closed_since = None;
        self.probe_at = None;
        self.buckets.clear();
        self.enter(BreakerState::Closed, reason, now)
    }

    fn enter(&mut self, to: BreakerState, reason: BreakerReason, now: Timestamp) -> Transition {
        let (calls, failures) = self.window();
        let t = Transition {
            at: now,
            from: self.state,
            to,
            reason,
            failure_share_permille: share_permille(failures, calls),
            calls,
        };
        if self.state == BreakerState::Closed {
            self.not_closed_since = Some(now);
        }
        self.state = to;
        self.since = now;
        self.transitions.push_back(t);
        while self.transitions.len() > TRANSITIONS_KEPT {
            self.transitions.pop_front();
        }
        t
    }
}

fn bucket_ms(cfg: &BreakerConfig) -> i64 {
    i64::try_from(cfg.window_ms / 10).unwrap_or(i64::MAX).max(1)
}

/// `failures / calls` in permille (0 without calls).
pub(super) fn share_permille(failures: u32, calls: u32) -> u16 {
    if calls == 0 {
        return 0;
    }
    u16::try_from(u64::from(failures) * 1000 / u64::from(calls)).unwrap_or(1000)
}
