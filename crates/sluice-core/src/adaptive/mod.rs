//! Adaptive delivery rate and circuit breaker: how the broker slows a queue down when its
//! dependency is congested, and stops it when the dependency is down.
//!
//! Both are opt-in per queue and work the same for pull consumers and push targets: the
//! broker learns from how deliveries end ([`Outcome`]), not from the dependency itself.
//! Everything here is pure: time is passed in, nothing is read from a clock or stored, so
//! every engine decides the same way and the rules can be tested in virtual time.
//!
//! # Adaptive rate
//!
//! The queue is delivered at a governed rate between `min_per_min` and `max_per_min`, and
//! never above the queue's `rate_limit` (as a rate per minute), which stays a ceiling and
//! wins over `min_per_min` when lower.
//!
//! - **Congestion** is a nack marked as carrying the dependency's Retry-After, or, with an
//!   `errors` signal, a nack whose error contains one of its patterns ([`classify_nack`]).
//! - **Holds.** Every Retry-After is honoured: nothing is delivered until the latest time any
//!   of them named. A hold never shortens.
//! - **Rounds.** The rate grows at most once per round, a twelfth of the dependency's quota
//!   window (`window_ms`, a minute by default: rounds of 5 s). A round grows the rate only
//!   when it was the rate that held deliveries back (the round leased at least two thirds
//!   of what the rate allotted it, holds excluded), when at most one congestion signal came
//!   in it, and when no hold is on. So a queue fed more slowly than its rate does not drift
//!   up to `max_per_min` and then flood the dependency after an outage.
//! - **Slow start.** The rate starts at `min_per_min` and doubles each growing round until
//!   the first decrease.
//! - **Additive increase.** After that, each growing round adds a step: below the rate of
//!   the last decrease, a quarter of the gap at least, so the rate returns fast to where it
//!   was; beyond it, a tenth of that rate per quota window (or `increase_per_min` per round),
//!   the step doubling every half window up to half the rate a window (so the rate is never
//!   far ahead of what the dependency counted over its window when the first refusals come),
//!   and a dependency that now takes more is found within minutes.
//! - **Multiplicative decrease.** The rate is cut to `decrease` (70%) of itself when at least
//!   4 of the last 32 outcomes were congestion; fewer (a dependency shedding a little load
//!   at random) only hold deliveries for their Retry-After. The first cut, which ends slow
//!   start, is taken from the rate the dependency accepted over its last quota window if
//!   that is lower and the rate was what held deliveries back: the last doublings of slow
//!   start reach the dependency faster than its window fills. (A queue fed more slowly than
//!   its rate learns nothing of the dependency from what it accepted: it is cut from its
//!   rate, and returns to it, so that random 429s never pull it under its own traffic.) For
//!   a quota window after a cut, calls made before it still count at the dependency, so
//!   only a rate grown beyond the one cut is cut again.
//!
//! Every time span is a fraction of the quota window and every hold comes from the
//! dependency, so the governor behaves the same on a clock run a hundred times faster with
//! rates a hundred times higher. Deliveries are paced evenly in small bursts
//! ([`Admit::Paced`]).
//!
//! # Circuit breaker
//!
//! - **Closed**: deliveries flow and calls are counted over a window (`window_ms`, in ten
//!   buckets). When the window holds at least `min_calls` calls and the failed share reaches
//!   `failure_share`, it opens. Failures are transient ones (nacks, lease expiries);
//!   congestion and rejects are calls the dependency answered.
//! - **Open**: nothing is delivered for `probe_every_ms`, then it turns half-open.
//! - **Half-open**: `probes` deliveries go through. When they have all succeeded (a success
//!   or a 429: the dependency is up) it closes; a transient failure opens it again for
//!   another pause. A probe released or rejected (a reject says the message was wrong, often
//!   without a call) lets another through.
//! - While open or half-open, a nack does not spend the message's attempt
//!   ([`FlowState::counts_attempt`], [`crate::lifecycle::after_nack_counted`]): an outage
//!   does not dead-letter valid messages. Rejects still dead-letter at once, and a message
//!   that fails while the breaker is closed still spends its attempts. A congestion nack
//!   never spends one: the pace is the broker's to govern.
//! - An operator can force it open (it stays open, without probes, until forced closed) or
//!   closed (an empty window, automatic from then on).
//!
//! # Use by an engine
//!
//! Per governed queue ([`FlowConfig::is_governed`]), keep one [`FlowState`], made by
//! [`FlowState::new`] and told of configuration changes by [`FlowState::reconfigure`].
//! Under the queue's lock:
//!
//! 1. Before leasing, [`FlowState::admit`], and lease at most what it allows: nothing while
//!    [`Admit::Shut`] (wake again at `until`), at most `n` for [`Admit::Probe`], as many as
//!    `pace` allows over the queue's recent deliveries for [`Admit::Paced`] (still within
//!    `rate_limit` and `max_in_flight`).
//! 2. After leasing, [`FlowState::leased`] with the number leased.
//! 3. When a lease ends (ack, nack, reject, expiry, release, move), its [`Outcome`]: count
//!    outcomes in a [`Tally`] and hand it to [`FlowState::observe`], at once or merged from
//!    several and flushed periodically. For a nack, ask [`FlowState::counts_attempt`]
//!    *before* observing it, and settle it with [`crate::lifecycle::after_nack_counted`].
//! 4. Periodically, [`FlowState::tick`], so that an open breaker turns half-open (and is
//!    audited) even while nobody receives.
//!
//! Every call that changes state returns the [`FlowEvent`]s to write to the audit log
//! ([`FlowEvent::audit`]). The state is `serde` JSON, to persist when it changed (a
//! transition, a forced state, an audited rate step) rather than on every call; losing the
//! changes in between only loses a few rounds of learning.

mod breaker;
mod config;
mod events;
mod governor;
mod outcome;
#[cfg(test)]
mod quota_tests;
mod scope;
mod state;
mod stats;
#[cfg(test)]
mod tests;

pub use breaker::{BreakerForce, BreakerReason, BreakerState, TRANSITIONS_KEPT, Transition};
pub use config::{
    AdaptiveRate, BreakerConfig, CongestionSignal, DEFAULT_BREAKER_WINDOW_MS,
    DEFAULT_DECREASE_PERMILLE, DEFAULT_FAILURE_SHARE_PERMILLE, DEFAULT_MIN_CALLS,
    DEFAULT_PROBE_EVERY_MS, DEFAULT_PROBES, DEFAULT_QUOTA_WINDOW_MS, FlowScope, ceiling_per_min,
    limits,
};
pub use events::{FlowEvent, KEY_AUDITS_PER_MIN, KeyAuditBudget, RateReason};
pub use governor::{DECREASE_SIGNALS, RECENT_OUTCOMES, ROUNDS_PER_WINDOW};
pub use outcome::{Outcome, Tally, classify_nack};
pub use scope::{
    KeyFlowStats, KeyFlowSummary, TOP_KEY_RATES, UNTIL_CHANGED, governs_keys, key_adaptive,
    key_breaker, key_idle, key_room,
};
pub use state::{Admit, FlowConfig, FlowState, HISTORY_KEPT};
pub use stats::{BreakerStats, FlowPoint, FlowStats, RateStats};
