//! The two opt-in settings of a governed queue, as they appear in its JSON configuration,
//! with their limits and validation.
//!
//! Every field is an integer (shares in permille, durations in ms) so that a queue's
//! configuration stays `Eq` and serialises to stable JSON; the shares are written as decimals
//! in JSON (`"failure_share": 0.5`, `"decrease": 0.7`) because that is how people think of
//! them.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::config::RateLimit;
use crate::error::StoreError;

/// Limits of the adaptive rate and breaker settings.
pub mod limits {
    /// Highest `max_per_min`: the most a `rate_limit` allows, per second, as a rate per minute.
    pub const MAX_PER_MIN: u32 = 60 * crate::config::limits::MAX_RATE_LIMIT;
    /// Most error patterns in a congestion signal.
    pub const MAX_PATTERNS: usize = 8;
    /// Longest error pattern, in characters.
    pub const MAX_PATTERN_CHARS: usize = 128;
    /// Smallest multiplicative decrease, in permille (0.1: cut to a tenth).
    pub const MIN_DECREASE_PERMILLE: u16 = 100;
    /// Largest multiplicative decrease, in permille (0.95: cut by 5%).
    pub const MAX_DECREASE_PERMILLE: u16 = 950;
    /// Shortest window (adaptive or breaker) and probe pause, in ms.
    pub const MIN_WINDOW_MS: u64 = 100;
    /// Longest window (adaptive or breaker) and probe pause, in ms (an hour).
    pub const MAX_WINDOW_MS: u64 = 3_600_000;
    /// Largest `min_calls`.
    pub const MAX_MIN_CALLS: u32 = 10_000;
    /// Largest `probes`.
    pub const MAX_PROBES: u32 = 100;
    /// Longest `key_idle_ms`: a week.
    pub const MAX_KEY_IDLE_MS: u64 = 7 * 86_400_000;
}

/// Default quota window of an adaptive rate's dependency, in ms: a minute.
pub const DEFAULT_QUOTA_WINDOW_MS: u64 = 60_000;
/// Default multiplicative decrease on congestion, in permille: the rate is cut to 70%.
pub const DEFAULT_DECREASE_PERMILLE: u16 = 700;
/// Default share of failed calls that opens a breaker, in permille.
pub const DEFAULT_FAILURE_SHARE_PERMILLE: u16 = 500;
/// Default breaker window, in ms.
pub const DEFAULT_BREAKER_WINDOW_MS: u64 = 60_000;
/// Default number of calls a window needs before the breaker judges it.
pub const DEFAULT_MIN_CALLS: u32 = 20;
/// Default pause of an open breaker before it lets probes through, in ms.
pub const DEFAULT_PROBE_EVERY_MS: u64 = 30_000;
/// Default number of probe deliveries of a half-open breaker.
pub const DEFAULT_PROBES: u32 = 3;

/// Adaptive delivery rate: the broker finds the rate a dependency accepts by itself, within
/// `[min_per_min, max_per_min]`, from the congestion signals the queue's consumers report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptiveRate {
    /// The rate never goes below this (deliveries per minute), unless `rate_limit` is lower.
    pub min_per_min: u32,
    /// The rate never goes above this (deliveries per minute).
    pub max_per_min: u32,
    /// Which nacks count as congestion.
    #[serde(default)]
    pub signal: CongestionSignal,
    /// The window the dependency counts its quota over, in ms; `None`: a minute. The
    /// governor measures the rate the dependency accepted over this window, lets a decrease
    /// take effect for this long before deciding another, and grows in rounds of a twelfth
    /// of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u64>,
    /// The additive step of a growing round, per minute; `None`: a tenth of the rate that last
    /// congested, per quota window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub increase_per_min: Option<u32>,
    /// The multiplicative decrease on congestion, in permille (`"decrease": 0.7` in JSON);
    /// `None`: [`DEFAULT_DECREASE_PERMILLE`].
    #[serde(
        default,
        rename = "decrease",
        with = "opt_share",
        skip_serializing_if = "Option::is_none"
    )]
    pub decrease_permille: Option<u16>,
    /// Whether the queue has one rate (`queue`, the default) or each key its own (`key`).
    #[serde(default, skip_serializing_if = "FlowScope::is_queue")]
    pub scope: FlowScope,
    /// With `scope: key`, how long a key may go without deliveries before its rate is
    /// forgotten (it starts again at `min_per_min`), in ms; `None`: ten quota windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_idle_ms: Option<u64>,
}

/// What a queue's adaptive rate or breaker governs: the queue as a whole, or each key of it
/// on its own (learned only from the outcomes of that key's deliveries).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowScope {
    /// One state for the whole queue.
    #[default]
    Queue,
    /// One state per key; the queue's `rate_limit` and `key_limits` stay ceilings.
    Key,
}

impl FlowScope {
    /// Whether this is the default, queue-wide scope.
    pub fn is_queue(&self) -> bool {
        *self == FlowScope::Queue
    }
}

/// Which nacks of an adaptive queue are congestion. A nack marked as carrying the
/// dependency's Retry-After always is; `errors` adds nacks whose error contains one of the
/// patterns (case-insensitive), for consumers that report a `429` without a Retry-After.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CongestionSignal {
    /// Only nacks marked as carrying a Retry-After (`"signal": "retry_after"`).
    #[default]
    RetryAfter,
    /// Those, and nacks whose error contains one of these (`{"errors": ["429"]}`).
    Errors(Vec<String>),
}

/// Circuit breaker: when most calls over a window fail, the queue stops delivering for a
/// while instead of letting every message spend its attempts on a dependency that is down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerConfig {
    /// The share of failed calls that opens it, in permille (`"failure_share": 0.5` in JSON).
    #[serde(
        rename = "failure_share",
        with = "share",
        default = "default_failure_share"
    )]
    pub failure_share_permille: u16,
    /// The window the share is measured over, in ms.
    #[serde(default = "default_breaker_window_ms")]
    pub window_ms: u64,
    /// Fewer calls than this in the window never open it.
    #[serde(default = "default_min_calls")]
    pub min_calls: u32,
    /// How long it stays open before letting probe deliveries through, in ms.
    #[serde(default = "default_probe_every_ms")]
    pub probe_every_ms: u64,
    /// How many probe deliveries a half-open breaker lets through; all must succeed to close.
    #[serde(default = "default_probes")]
    pub probes: u32,
    /// Whether the queue has one breaker (`queue`, the default) or each key its own (`key`).
    #[serde(default, skip_serializing_if = "FlowScope::is_queue")]
    pub scope: FlowScope,
    /// With `scope: key`, how long a key may go without deliveries before its breaker is
    /// forgotten (closed and empty again, unless an operator forced it open), in ms; `None`:
    /// ten windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_idle_ms: Option<u64>,
}

fn default_failure_share() -> u16 {
    DEFAULT_FAILURE_SHARE_PERMILLE
}
fn default_breaker_window_ms() -> u64 {
    DEFAULT_BREAKER_WINDOW_MS
}
fn default_min_calls() -> u32 {
    DEFAULT_MIN_CALLS
}
fn default_probe_every_ms() -> u64 {
    DEFAULT_PROBE_EVERY_MS
}
fn default_probes() -> u32 {
    DEFAULT_PROBES
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_share_permille: DEFAULT_FAILURE_SHARE_PERMILLE,
            window_ms: DEFAULT_BREAKER_WINDOW_MS,
            min_calls: DEFAULT_MIN_CALLS,
            probe_every_ms: DEFAULT_PROBE_EVERY_MS,
            probes: DEFAULT_PROBES,
            scope: FlowScope::Queue,
            key_idle_ms: None,
        }
    }
}

impl AdaptiveRate {
    /// A setting between `min_per_min` and `max_per_min`, every other field at its default.
    pub fn new(min_per_min: u32, max_per_min: u32) -> Self {
        AdaptiveRate {
            min_per_min,
            max_per_min,
            signal: CongestionSignal::RetryAfter,
            window_ms: None,
            increase_per_min: None,
            decrease_permille: None,
            scope: FlowScope::Queue,
            key_idle_ms: None,
        }
    }

    /// With `scope: key`, how long an idle key keeps its rate.
    pub fn key_idle(&self) -> Duration {
        Duration::from_millis(
            self.key_idle_ms
                .unwrap_or_else(|| self.window_ms.unwrap_or(DEFAULT_QUOTA_WINDOW_MS) * 10),
        )
    }

    /// The dependency's quota window.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms.unwrap_or(DEFAULT_QUOTA_WINDOW_MS))
    }

    /// The multiplicative decrease, in permille.
    pub fn decrease(&self) -> u16 {
        self.decrease_permille.unwrap_or(DEFAULT_DECREASE_PERMILLE)
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the field, the rule it breaks and the value.
    pub fn validate(&self) -> Result<(), StoreError> {
        use limits::*;
        if self.min_per_min == 0 || self.min_per_min > self.max_per_min {
            return Err(StoreError::invalid(format!(
                "adaptive.min_per_min must be at least 1 and at most max_per_min ({}), got {}",
                self.max_per_min, self.min_per_min
            )));
        }
        if self.max_per_min > MAX_PER_MIN {
            return Err(StoreError::invalid(format!(
                "adaptive.max_per_min must be at most {MAX_PER_MIN}, got {}",
                self.max_per_min
            )));
        }
        if let Some(w) = self.window_ms
            && !(MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&w)
        {
            return Err(StoreError::invalid(format!(
                "adaptive.window_ms must be {MIN_WINDOW_MS} to {MAX_WINDOW_MS} ms, got {w}; \
                 leave it out for a minute"
            )));
        }
        if let Some(i) = self.increase_per_min
            && (i == 0 || i > self.max_per_min)
        {
            return Err(StoreError::invalid(format!(
                "adaptive.increase_per_min must be 1 to max_per_min ({}), got {i}; leave it out \
                 for a step that follows the rate",
                self.max_per_min
            )));
        }
        if let Some(d) = self.decrease_permille
            && !(MIN_DECREASE_PERMILLE..=MAX_DECREASE_PERMILLE).contains(&d)
        {
            return Err(StoreError::invalid(format!(
                "adaptive.decrease must be between {} and {} (the share of the rate kept on \
                 congestion), got {}",
                permille_text(MIN_DECREASE_PERMILLE),
                permille_text(MAX_DECREASE_PERMILLE),
                permille_text(d)
            )));
        }
        check_key_idle("adaptive", self.scope, self.key_idle_ms)?;
        if let CongestionSignal::Errors(patterns) = &self.signal {
            if patterns.is_empty() || patterns.len() > MAX_PATTERNS {
                return Err(StoreError::invalid(format!(
                    "adaptive.signal.errors must hold 1 to {MAX_PATTERNS} patterns, got {}; \
                     use \"signal\": \"retry_after\" to rely on Retry-After alone",
                    patterns.len()
                )));
            }
            for p in patterns {
                let chars = p.chars().count();
                if chars == 0 || chars > MAX_PATTERN_CHARS {
                    return Err(StoreError::invalid(format!(
                        "adaptive.signal.errors: each pattern must be 1 to {MAX_PATTERN_CHARS} \
                         characters, got {chars} ({p:?})"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl BreakerConfig {
    /// The window as a duration.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }

    /// The pause of an open breaker as a duration.
    pub fn probe_every(&self) -> Duration {
        Duration::from_millis(self.probe_every_ms)
    }

    /// With `scope: key`, how long an idle key keeps its breaker.
    pub fn key_idle(&self) -> Duration {
        Duration::from_millis(
            self.key_idle_ms
                .unwrap_or(self.window_ms.saturating_mul(10)),
        )
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the field, the rule it breaks and the value.
    pub fn validate(&self) -> Result<(), StoreError> {
        use limits::*;
        if self.failure_share_permille == 0 || self.failure_share_permille > 1000 {
            return Err(StoreError::invalid(format!(
                "breaker.failure_share must be over 0 and at most 1 (0.5: half the calls), got {}",
                permille_text(self.failure_share_permille)
            )));
        }
        for (field, v) in [
            ("window_ms", self.window_ms),
            ("probe_every_ms", self.probe_every_ms),
        ] {
            if !(MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&v) {
                return Err(StoreError::invalid(format!(
                    "breaker.{field} must be {MIN_WINDOW_MS} to {MAX_WINDOW_MS} ms, got {v}"
                )));
            }
        }
        if self.min_calls == 0 || self.min_calls > MAX_MIN_CALLS {
            return Err(StoreError::invalid(format!(
                "breaker.min_calls must be 1 to {MAX_MIN_CALLS}, got {}",
                self.min_calls
            )));
        }
        if self.probes == 0 || self.probes > MAX_PROBES {
            return Err(StoreError::invalid(format!(
                "breaker.probes must be 1 to {MAX_PROBES}, got {}",
                self.probes
            )));
        }
        check_key_idle("breaker", self.scope, self.key_idle_ms)
    }
}

/// A queue's `rate_limit` as a ceiling per minute for the adaptive rate, rounded up (the
/// limit itself still applies exactly; the ceiling only keeps the governor from learning a
/// rate the limit would never let through).
pub fn ceiling_per_min(limit: &RateLimit) -> u32 {
    let period_ms = u64::try_from(limit.period.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let per_min = (u64::from(limit.limit) * 60_000).div_ceil(period_ms);
    u32::try_from(per_min).unwrap_or(u32::MAX).max(1)
}

/// `key_idle_ms` is for per-key state only, and within its limits.
fn check_key_idle(part: &str, scope: FlowScope, idle: Option<u64>) -> Result<(), StoreError> {
    use limits::*;
    match (scope, idle) {
        (_, None) => Ok(()),
        (FlowScope::Queue, Some(_)) => Err(StoreError::invalid(format!(
            "{part}.key_idle_ms applies to per-key state: set \"scope\": \"key\" or leave it out"
        ))),
        (FlowScope::Key, Some(ms)) if !(MIN_WINDOW_MS..=MAX_KEY_IDLE_MS).contains(&ms) => {
            Err(StoreError::invalid(format!(
                "{part}.key_idle_ms must be {MIN_WINDOW_MS} to {MAX_KEY_IDLE_MS} ms (a week), got {ms}"
            )))
        }
        (FlowScope::Key, Some(_)) => Ok(()),
    }
}

fn permille_text(p: u16) -> String {
    format!("{}", f64::from(p) / 1000.0)
}

/// A share written as a decimal over 0 and at most 1, held in permille.
mod share {
    use super::*;

    pub(super) fn serialize<S: Serializer>(p: &u16, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(f64::from(*p) / 1000.0)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
        permille(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }

    pub(super) fn permille(x: f64) -> Result<u16, String> {
        if !x.is_finite() || x <= 0.0 || x > 1.0 {
            return Err(format!(
                "a share must be a number over 0 and at most 1 (0.5 for a half), got {x}"
            ));
        }
        let p = (x * 1000.0).round();
        if p < 1.0 {
            return Err(format!(
                "a share is kept in thousandths: it must be at least 0.001, got {x}"
            ));
        }
        // In 1..=1000 by the checks above.
        Ok(p as u16)
    }
}

/// [`share`] for an optional field.
mod opt_share {
    use super::*;

    pub(super) fn serialize<S: Serializer>(p: &Option<u16>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => super::share::serialize(p, s),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
        Option::<f64>::deserialize(d)?
            .map(|x| super::share::permille(x).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_takes_shares_as_decimals_and_durations_in_ms() {
        let b: BreakerConfig = serde_json::from_str(
            r#"{"failure_share": 0.5, "window_ms": 10000, "min_calls": 5, "probe_every_ms": 2000}"#,
        )
        .expect("breaker");
        assert_eq!(b.failure_share_permille, 500);
        assert_eq!(b.probes, DEFAULT_PROBES);
        assert_eq!(b.probe_every(), Duration::from_secs(2));
        let back = serde_json::to_value(&b).expect("json");
        assert_eq!(back["failure_share"], serde_json::json!(0.5));
        assert_eq!(back["window_ms"], serde_json::json!(10000));
        assert_eq!(
            serde_json::from_value::<BreakerConfig>(back).expect("again"),
            b
        );
        let empty: BreakerConfig = serde_json::from_str("{}").expect("defaults");
        assert_eq!(empty, BreakerConfig::default());

        let a: AdaptiveRate = serde_json::from_str(
            r#"{"min_per_min": 10, "max_per_min": 600, "signal": {"errors": ["429", "Too Many"]},
                "increase_per_min": 6, "decrease": 0.7}"#,
        )
        .expect("adaptive");
        assert_eq!(a.decrease_permille, Some(700));
        assert_eq!(
            a.signal,
            CongestionSignal::Errors(vec!["429".into(), "Too Many".into()])
        );
        let plain: AdaptiveRate = serde_json::from_str(
            r#"{"min_per_min": 10, "max_per_min": 600, "signal": "retry_after"}"#,
        )
        .expect("plain");
        assert_eq!(plain, AdaptiveRate::new(10, 600));
        assert_eq!(plain.decrease(), DEFAULT_DECREASE_PERMILLE);
        assert_eq!(
            serde_json::to_string(&plain).expect("json"),
            r#"{"min_per_min":10,"max_per_min":600,"signal":"retry_after"}"#
        );
        // Every permille survives the trip through a decimal.
        for p in 1..=1000u16 {
            let x = f64::from(p) / 1000.0;
            assert_eq!(share::permille(x), Ok(p));
        }
    }

    #[test]
    fn shares_out_of_range_are_refused_when_read() {
        for bad in ["0", "-0.5", "1.5", "0.0001"] {
            let e =
                serde_json::from_str::<BreakerConfig>(&format!(r#"{{"failure_share": {bad}}}"#))
                    .expect_err(bad)
                    .to_string();
            assert!(e.contains("share"), "{e}");
        }
    }

    #[test]
    fn validation_names_the_field_and_the_rule() {
        let bad = |r: Result<(), StoreError>, says: &str| {
            let e = r.expect_err("should be refused").to_string();
            assert!(e.contains(says), "{e}");
        };
        assert!(AdaptiveRate::new(1, 1).validate().is_ok());
        bad(AdaptiveRate::new(0, 10).validate(), "min_per_min");
        bad(
            AdaptiveRate::new(20, 10).validate(),
            "at most max_per_min (10)",
        );
        bad(
            AdaptiveRate::new(1, limits::MAX_PER_MIN + 1).validate(),
            "max_per_min",
        );
        let mut a = AdaptiveRate::new(1, 10);
        a.increase_per_min = Some(0);
        bad(a.validate(), "increase_per_min");
        let mut a = AdaptiveRate::new(1, 10);
        a.window_ms = Some(10);
        bad(a.validate(), "adaptive.window_ms must be 100");
        let mut a = AdaptiveRate::new(1, 10);
        a.decrease_permille = Some(990);
        bad(a.validate(), "between 0.1 and 0.95");
        let mut a = AdaptiveRate::new(1, 10);
        a.signal = CongestionSignal::Errors(vec![]);
        bad(a.validate(), "1 to 8 patterns");
        a.signal = CongestionSignal::Errors(vec![String::new()]);
        bad(a.validate(), "each pattern");

        assert!(BreakerConfig::default().validate().is_ok());
        let b = |f: fn(&mut BreakerConfig)| {
            let mut c = BreakerConfig::default();
            f(&mut c);
            c.validate()
        };
        bad(b(|c| c.failure_share_permille = 0), "failure_share");
        bad(b(|c| c.window_ms = 50), "breaker.window_ms must be 100");
        bad(b(|c| c.probe_every_ms = 7_200_000), "probe_every_ms");
        bad(b(|c| c.min_calls = 0), "min_calls");
        bad(b(|c| c.probes = 101), "probes");
    }

    #[test]
    fn a_rate_limit_becomes_a_ceiling_per_minute() {
        let rl = |limit, ms| RateLimit {
            limit,
            period: Duration::from_millis(ms),
            burst: None,
        };
        assert_eq!(ceiling_per_min(&rl(30, 60_000)), 30);
        assert_eq!(ceiling_per_min(&rl(10, 1_000)), 600);
        assert_eq!(ceiling_per_min(&rl(1, 86_400_000)), 1);
        assert_eq!(ceiling_per_min(&rl(7, 120_000)), 4);
    }
}
