//! Adaptive delivery rate and circuit breaker: how the broker slows a queue down when its
//! dependency is congested, and stops it when the dependency is down.
//!
//! Both are opt-in per queue and work the same for pull consumers and push targets: the
//! broker learns from how deliveries end ([`Outcome`]), not from the dependency itself.

mod config;
mod outcome;

pub use config::{
    AdaptiveRate, BreakerConfig, CongestionSignal, DEFAULT_BREAKER_WINDOW_MS,
    DEFAULT_DECREASE_PERMILLE, DEFAULT_FAILURE_SHARE_PERMILLE, DEFAULT_MIN_CALLS,
    DEFAULT_PROBE_EVERY_MS, DEFAULT_PROBES, DEFAULT_QUOTA_WINDOW_MS, ceiling_per_min, limits,
};
pub use outcome::{Outcome, Tally, classify_nack};
