//! Fair, prioritized delivery: the key and priority a message may carry, and the weights that
//! share a queue's deliveries among its keys.
//!
//! The rule every engine follows (and the conformance suite checks):
//! - A visible message of a higher priority is delivered before any of a lower one. A message
//!   sent without a priority takes its queue's `default_priority`, as the queue has it when the
//!   message is delivered (changing the default re-ranks the messages that named none).
//! - Within one priority, deliveries go round-robin across the keys that have deliverable
//!   messages, weighted by `key_weights`: each key has a *pass*, and the key with the lowest
//!   pass delivers next, its pass then growing by [`step`] of its weight (a key of weight 3
//!   delivers three times for one of a key of weight 1). A key that had nothing deliverable and
//!   gets something starts where the next delivery of its priority is, so with K active
//!   keys of equal weight the head of a quiet key waits for at most about K deliveries, however
//!   large another key's backlog. A tie goes to the key that sorts first (the embedded engine)
//!   or to the message sent first (PostgreSQL, whose lease reads its rank index in order).
//! - Within a key, messages go by the time they became visible, as without keys. Messages sent
//!   without a key share one implicit key.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::config::RateLimit;
use crate::error::StoreError;

/// Longest key, in characters (the same rule as a FIFO group's name).
pub const MAX_KEY_CHARS: usize = crate::group::MAX_GROUP_CHARS;

/// Lowest priority.
pub const MIN_PRIORITY: u8 = 0;
/// Highest (most urgent) priority.
pub const MAX_PRIORITY: u8 = 9;
/// The priority of a queue that sets no `default_priority`.
pub const DEFAULT_PRIORITY: u8 = 4;

/// Most entries of a queue's `key_weights`.
pub const MAX_KEY_WEIGHTS: usize = 100;
/// Largest weight of a key.
pub const MAX_KEY_WEIGHT: u32 = 1000;

/// What a key's pass grows by per delivery at weight 1; at weight `w` it grows by this over
/// `w`, rounded down (every weight from 1 to 10 exactly). Small, so that a priority and a
/// pass fit one 64-bit number ([`rank`]) for thousands of years of deliveries.
pub const PASS_UNIT: u64 = 2520;

/// Bits of a [`rank`] below its priority.
pub const PASS_BITS: u32 = 56;

/// One number that sorts deliverable messages in delivery order: higher priority first, then
/// lower pass.
pub fn rank(priority: u8, pass: u64) -> i64 {
    let level = u64::from(MAX_PRIORITY.saturating_sub(priority));
    i64::try_from((level << PASS_BITS) | (pass & ((1 << PASS_BITS) - 1))).unwrap_or(i64::MAX)
}

/// The tenant, customer or account a message belongs to: 1 to 128 characters, none of them a
/// control character.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MessageKey(String);

impl MessageKey {
    /// Validates `key`.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the field `key` and its rule.
    pub fn new(key: impl Into<String>) -> Result<Self, StoreError> {
        let key = key.into();
        crate::group::check_label("key", &key)?;
        Ok(MessageKey(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for MessageKey {
    type Error = StoreError;
    fn try_from(s: String) -> Result<Self, StoreError> {
        MessageKey::new(s)
    }
}

impl From<MessageKey> for String {
    fn from(k: MessageKey) -> String {
        k.0
    }
}

impl fmt::Display for MessageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for MessageKey {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        MessageKey::new(s)
    }
}

/// Checks a priority given with a message or as a queue's default.
///
/// # Errors
/// [`StoreError::InvalidArgument`] naming `field` when `p` is above 9.
pub fn check_priority(field: &str, p: u8) -> Result<(), StoreError> {
    if p > MAX_PRIORITY {
        return Err(StoreError::invalid(format!(
            "{field} must be {MIN_PRIORITY} to {MAX_PRIORITY} (9 most urgent), got {p}"
        )));
    }
    Ok(())
}

/// Checks a queue's `key_weights`: at most 100 patterns of 1 to 128 characters (`*` any run of
/// characters, `?` any one), each weighing 1 to 1000.
///
/// # Errors
/// [`StoreError::InvalidArgument`] naming the offending pattern or weight.
pub fn check_weights(weights: &BTreeMap<String, u32>) -> Result<(), StoreError> {
    if weights.len() > MAX_KEY_WEIGHTS {
        return Err(StoreError::invalid(format!(
            "key_weights may have at most {MAX_KEY_WEIGHTS} patterns, got {}",
            weights.len()
        )));
    }
    for (pattern, w) in weights {
        if MessageKey::new(pattern.as_str()).is_err() {
            return Err(StoreError::invalid(format!(
                "key_weights pattern {pattern:?} must be 1 to {MAX_KEY_CHARS} characters \
                 without control characters"
            )));
        }
        if *w == 0 || *w > MAX_KEY_WEIGHT {
            return Err(StoreError::invalid(format!(
                "key_weights[{pattern:?}] must be 1 to {MAX_KEY_WEIGHT}, got {w}"
            )));
        }
    }
    Ok(())
}

/// The weight of `key` (`None`: the implicit key of messages sent without one) under
/// `weights`: the weight of the key's own entry, else of the longest pattern that matches it
/// (the first in sort order among patterns of one length), else 1. The implicit key weighs 1.
pub fn weight_of(weights: &BTreeMap<String, u32>, key: Option<&str>) -> u32 {
    let Some(key) = key else { return 1 };
    if let Some(w) = weights.get(key) {
        return *w;
    }
    let mut best: Option<(usize, u32)> = None;
    for (pattern, w) in weights {
        if crate::access::glob_match(pattern, key)
            && best.is_none_or(|(len, _)| pattern.len() > len)
        {
            best = Some((pattern.len(), *w));
        }
    }
    best.map_or(1, |(_, w)| w.clamp(1, MAX_KEY_WEIGHT))
}

/// Per-key limits of a queue (`key_limits`): what every key may have at once and how fast it
/// may be delivered, with overrides by key pattern. Messages without a key are one key (no
/// pattern names it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyLimits {
    /// Most messages of one key in flight at once, across all consumers (and broker nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Most deliveries of one key in any window of the period, spread by its burst as a
    /// queue's `rate_limit` is ([`crate::rate`]); on the wire `{"limit", "period_ms",
    /// "burst"}`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rate_ms")]
    pub rate_limit: Option<RateLimit>,
    /// Limits of the keys a pattern matches, in place of the ones above: a key takes its own
    /// entry, else the longest pattern that matches it (the first in sort order among
    /// patterns of one length).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, KeyLimit>,
}

/// The limits of the keys one pattern of [`KeyLimits::overrides`] matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyLimit {
    /// Most messages of one such key in flight at once; `None`: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Most deliveries of one such key per window; `None`: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rate_ms")]
    pub rate_limit: Option<RateLimit>,
}

/// A rate as the API writes it, `{"limit", "period_ms", "burst"}`, for the limits of keys
/// (the queue's own `rate_limit` has its wire type in the API crate).
mod rate_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::config::RateLimit;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RateMs {
        limit: u32,
        period_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burst: Option<u32>,
    }

    pub(super) fn serialize<S: Serializer>(r: &Option<RateLimit>, s: S) -> Result<S::Ok, S::Error> {
        r.map(|r| RateMs {
            limit: r.limit,
            period_ms: u64::try_from(r.period.as_millis()).unwrap_or(u64::MAX),
            burst: r.burst,
        })
        .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<RateLimit>, D::Error> {
        Ok(Option::<RateMs>::deserialize(d)?.map(|r| RateLimit {
            limit: r.limit,
            period: Duration::from_millis(r.period_ms),
            burst: r.burst,
        }))
    }
}

impl KeyLimits {
    /// The limit of `key` (`None`: the implicit key).
    pub fn of(&self, key: Option<&str>) -> KeyLimit {
        let default = KeyLimit {
            max_in_flight: self.max_in_flight,
            rate_limit: self.rate_limit,
        };
        let Some(key) = key else { return default };
        best_match(&self.overrides, key).copied().unwrap_or(default)
    }

    /// Whether some key has a rate limit: deliveries are then counted per key.
    pub fn rates(&self) -> bool {
        self.rate_limit.is_some() || self.overrides.values().any(|l| l.rate_limit.is_some())
    }

    /// Checks the limits and patterns: each `max_in_flight` 1 to 1,000,000, each rate as a
    /// queue's `rate_limit`, at most 100 overrides, patterns as `key_weights`'.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the field.
    pub fn validate(&self) -> Result<(), StoreError> {
        let check = |field: &str, m: Option<u32>| match m {
            Some(m) if m == 0 || m > crate::config::limits::MAX_IN_FLIGHT => {
                Err(StoreError::invalid(format!(
                    "{field} must be 1 to {}, got {m}",
                    crate::config::limits::MAX_IN_FLIGHT
                )))
            }
            _ => Ok(()),
        };
        check("key_limits.max_in_flight", self.max_in_flight)?;
        if let Some(r) = &self.rate_limit {
            r.check("key_limits.rate_limit")?;
        }
        if self.overrides.len() > MAX_KEY_WEIGHTS {
            return Err(StoreError::invalid(format!(
                "key_limits.overrides may have at most {MAX_KEY_WEIGHTS} patterns, got {}",
                self.overrides.len()
            )));
        }
        for (pattern, l) in &self.overrides {
            if MessageKey::new(pattern.as_str()).is_err() {
                return Err(StoreError::invalid(format!(
                    "key_limits.overrides pattern {pattern:?} must be 1 to {MAX_KEY_CHARS} \
                     characters without control characters"
                )));
            }
            check(
                &format!("key_limits.overrides[{pattern:?}].max_in_flight"),
                l.max_in_flight,
            )?;
            if let Some(r) = &l.rate_limit {
                r.check(&format!("key_limits.overrides[{pattern:?}].rate_limit"))?;
            }
        }
        Ok(())
    }
}

/// The entry of `map` for `key`: its own, else the longest pattern that matches it (the
/// first in sort order among patterns of one length).
fn best_match<'a, V>(map: &'a BTreeMap<String, V>, key: &str) -> Option<&'a V> {
    if let Some(v) = map.get(key) {
        return Some(v);
    }
    let mut best: Option<(usize, &V)> = None;
    for (pattern, v) in map {
        if crate::access::glob_match(pattern, key)
            && best.is_none_or(|(len, _)| pattern.len() > len)
        {
            best = Some((pattern.len(), v));
        }
    }
    best.map(|(_, v)| v)
}

/// What a key's pass grows by per delivery at weight `w`.
pub fn step(w: u32) -> u64 {
    PASS_UNIT / u64::from(w.clamp(1, MAX_KEY_WEIGHT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_group_rule() {
        assert!(MessageKey::new("tenant-42").is_ok());
        assert!(MessageKey::new("é".repeat(128)).is_ok());
        for bad in [String::new(), "x".repeat(129), "a\nb".to_string()] {
            let e = MessageKey::new(bad).unwrap_err().to_string();
            assert!(e.contains("key must"), "{e}");
        }
    }

    #[test]
    fn priorities_are_zero_to_nine() {
        assert!(check_priority("priority", 0).is_ok());
        assert!(check_priority("priority", 9).is_ok());
        let e = check_priority("priority", 10).unwrap_err().to_string();
        assert!(e.contains("priority must be 0 to 9"), "{e}");
    }

    #[test]
    fn a_key_weighs_its_own_entry_then_its_longest_pattern() {
        let w: BTreeMap<String, u32> = [("acme".into(), 7), ("a*".into(), 2), ("acm*".into(), 3)]
            .into_iter()
            .collect();
        assert_eq!(weight_of(&w, Some("acme")), 7);
        assert_eq!(weight_of(&w, Some("acmf")), 3);
        assert_eq!(weight_of(&w, Some("ab")), 2);
        assert_eq!(weight_of(&w, Some("zeta")), 1);
        assert_eq!(weight_of(&w, None), 1);
    }

    #[test]
    fn key_limits_take_the_best_override() {
        let l = KeyLimits {
            max_in_flight: Some(2),
            rate_limit: None,
            overrides: [
                (
                    "vip-*".to_owned(),
                    KeyLimit {
                        max_in_flight: Some(10),
                        rate_limit: None,
                    },
                ),
                (
                    "vip-free".to_owned(),
                    KeyLimit {
                        max_in_flight: None,
                        rate_limit: Some(RateLimit::per_second(5)),
                    },
                ),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(l.of(Some("acme")).max_in_flight, Some(2));
        assert_eq!(l.of(None).max_in_flight, Some(2), "the implicit key too");
        assert_eq!(l.of(Some("vip-1")).max_in_flight, Some(10));
        assert_eq!(l.of(Some("vip-free")).max_in_flight, None);
        assert!(l.validate().is_ok());
        let bad = KeyLimits {
            max_in_flight: Some(0),
            ..KeyLimits::default()
        };
        assert!(bad.validate().is_err());
        assert!(l.rates(), "an override's rate counts");
        assert_eq!(
            l.of(Some("vip-free")).rate_limit,
            Some(RateLimit::per_second(5))
        );
    }

    #[test]
    fn key_rates_read_and_write_milliseconds() {
        let l: KeyLimits = serde_json::from_str(
            r#"{"rate_limit": {"limit": 10, "period_ms": 60000, "burst": 2}}"#,
        )
        .unwrap();
        let r = l.rate_limit.unwrap();
        assert_eq!((r.limit, r.period.as_secs(), r.burst), (10, 60, Some(2)));
        let back = serde_json::to_value(&l).unwrap();
        assert_eq!(back["rate_limit"]["period_ms"], 60000);
        assert!(l.validate().is_ok());
        let bad: KeyLimits =
            serde_json::from_str(r#"{"rate_limit": {"limit": 10, "period_ms": 10}}"#).unwrap();
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("key_limits.rate_limit.period"), "{e}");
        assert!(
            serde_json::from_str::<KeyLimits>(r#"{"rate_limit": {"limit": 1, "period": 1}}"#)
                .is_err()
        );
    }

    #[test]
    fn weights_are_checked() {
        let bad: BTreeMap<String, u32> = [("a".into(), 0)].into_iter().collect();
        assert!(check_weights(&bad).is_err());
        let bad: BTreeMap<String, u32> = [("a".into(), 1001)].into_iter().collect();
        assert!(check_weights(&bad).is_err());
        let bad: BTreeMap<String, u32> = [(String::new(), 1)].into_iter().collect();
        assert!(check_weights(&bad).is_err());
        let many: BTreeMap<String, u32> = (0..101).map(|i| (format!("k{i}"), 1)).collect();
        assert!(check_weights(&many).is_err());
    }

    #[test]
    fn weights_step_in_proportion() {
        assert_eq!(step(1), PASS_UNIT);
        for w in 1..=10 {
            assert_eq!(step(w) * u64::from(w), PASS_UNIT);
        }
        assert!(step(1000) >= 1);
    }

    #[test]
    fn ranks_sort_by_priority_then_pass() {
        assert!(rank(9, 1 << 40) < rank(8, 0));
        assert!(rank(4, 5) < rank(4, 6));
        assert!(rank(0, 0) > 0);
    }
}
