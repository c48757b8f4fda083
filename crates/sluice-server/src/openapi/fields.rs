//! The schema of one field at a time: names, ranges, rates, times, attributes and the other
//! shapes the request schemas share, each built from the same limits the broker's checks use.
//! `constraints` places them on the fields of the document.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_core::config::limits;
use sluice_core::name::NAME_PATTERN;

/// How long ago, as the API reads it: `10m`, `1h30m`, `90s`, `2d`, `500ms`, or bare seconds.
pub(super) const AGO_PATTERN: &str = "^(?:[0-9]{1,9}(?:\\.[0-9]{1,3})?|(?:[0-9]{1,9}(?:\\.[0-9]{1,3})?(?:ms|s|sec|secs|m|min|mins|h|hr|hrs|d|day|days)){1,4})$";

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn name() -> Value {
    json!({"pattern": NAME_PATTERN, "minLength": 1, "maxLength": sluice_core::name::MAX_QUEUE_NAME_LEN})
}

pub(super) fn range(min: u64, max: u64) -> Value {
    json!({"minimum": min, "maximum": max})
}

/// A rate, `{"limit", "period_ms"}` (periods up to a day), or `null`.
pub(super) fn rate(description: &str, max_limit: u32, min_period_ms: u64) -> Value {
    json!({"oneOf": [{"type": "null"}, {
        "type": "object",
        "description": description,
        "required": ["limit", "period_ms"],
        "additionalProperties": false,
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": max_limit},
            "period_ms": {"type": "integer", "minimum": min_period_ms,
                "maximum": ms(limits::MAX_RATE_PERIOD)},
            "burst": {"type": ["integer", "null"], "minimum": 1, "maximum": max_limit,
                "description": "How many may go at once after a quiet spell, at most `limit` \
                    (no keyword states that); default a tenth of `limit`, at least 1."},
        },
    }]})
}

/// A queue's `key_weights`: patterns of the key rule, each weighing 1 – 1000.
pub(super) fn key_weights() -> Value {
    json!({
        "maxProperties": sluice_core::fair::MAX_KEY_WEIGHTS,
        "propertyNames": group(),
        "additionalProperties": {"type": "integer", "minimum": 1,
            "maximum": sluice_core::fair::MAX_KEY_WEIGHT},
    })
}

/// A queue's `key_limits`, or `null`.
pub(super) fn key_limits() -> Value {
    let in_flight = json!({"type": ["integer", "null"], "minimum": 1,
        "maximum": limits::MAX_IN_FLIGHT});
    let rate_limit = rate(
        "Most deliveries of one key in any window of period_ms, spread by burst.",
        limits::MAX_RATE_LIMIT,
        ms(limits::MIN_RATE_PERIOD),
    );
    json!({"oneOf": [{"type": "null"}, {
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "max_in_flight": in_flight,
            "rate_limit": rate_limit,
            "overrides": {
                "type": "object",
                "maxProperties": sluice_core::fair::MAX_KEY_WEIGHTS,
                "propertyNames": group(),
                "additionalProperties": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"max_in_flight": in_flight, "rate_limit": rate_limit},
                },
            },
        },
    }]})
}

/// An adaptive delivery rate (`sluice_core::adaptive::AdaptiveRate`), or `null`. That
/// `min_per_min` is at most `max_per_min`, and `increase_per_min` too, no keyword states.
pub(super) fn adaptive() -> Value {
    use sluice_core::adaptive::limits as a;
    let window =
        json!({"type": "integer", "minimum": a::MIN_WINDOW_MS, "maximum": a::MAX_WINDOW_MS});
    json!({"oneOf": [{"type": "null"}, {
        "type": "object",
        "description": "An adaptive delivery rate learned from congestion nacks, within \
            [min_per_min, max_per_min] and never above rate_limit; min_per_min and \
            increase_per_min must be at most max_per_min.",
        "required": ["min_per_min", "max_per_min"],
        "properties": {
            "min_per_min": {"type": "integer", "minimum": 1, "maximum": a::MAX_PER_MIN},
            "max_per_min": {"type": "integer", "minimum": 1, "maximum": a::MAX_PER_MIN},
            "signal": {"oneOf": [
                {"type": "string", "enum": ["retry_after"]},
                {"type": "object", "required": ["errors"], "additionalProperties": false,
                 "properties": {"errors": {"type": "array", "minItems": 1,
                     "maxItems": a::MAX_PATTERNS,
                     "items": {"type": "string", "minLength": 1,
                         "maxLength": a::MAX_PATTERN_CHARS}}}},
            ]},
            "window_ms": window,
            "increase_per_min": {"type": "integer", "minimum": 1, "maximum": a::MAX_PER_MIN},
            "decrease": {"type": "number",
                "minimum": f64::from(a::MIN_DECREASE_PERMILLE) / 1000.0,
                "maximum": f64::from(a::MAX_DECREASE_PERMILLE) / 1000.0},
            "scope": scope(),
            "key_idle_ms": key_idle(),
        },
    }]})
}

/// A circuit breaker (`sluice_core::adaptive::BreakerConfig`), or `null`.
pub(super) fn breaker() -> Value {
    use sluice_core::adaptive::limits as a;
    let window =
        json!({"type": "integer", "minimum": a::MIN_WINDOW_MS, "maximum": a::MAX_WINDOW_MS});
    json!({"oneOf": [{"type": "null"}, {
        "type": "object",
        "description": "A circuit breaker: it opens when failure_share of the calls in \
            window_ms fail (with at least min_calls), lets probes through every probe_every_ms.",
        "properties": {
            "failure_share": {"type": "number", "minimum": 0.001, "maximum": 1},
            "window_ms": window,
            "min_calls": {"type": "integer", "minimum": 1, "maximum": a::MAX_MIN_CALLS},
            "probe_every_ms": window,
            "probes": {"type": "integer", "minimum": 1, "maximum": a::MAX_PROBES},
            "scope": scope(),
            "key_idle_ms": key_idle(),
        },
    }]})
}

/// Whether an adaptive rate or breaker governs the queue as a whole or each key on its own.
fn scope() -> Value {
    json!({"type": "string", "enum": ["queue", "key"],
        "description": "queue (default): one state for the queue; key: one per message key, \
            learned from that key's deliveries only."})
}

/// How long an idle key keeps its own state (with `"scope": "key"` only).
fn key_idle() -> Value {
    use sluice_core::adaptive::limits as a;
    json!({"type": "integer", "minimum": a::MIN_WINDOW_MS, "maximum": a::MAX_KEY_IDLE_MS,
        "description": "With scope key: a key without deliveries or outcomes for this long \
            starts afresh (default: ten windows)."})
}

/// A point in time: RFC 3339, or how long before now.
pub(super) fn time() -> Value {
    json!({"anyOf": [{"format": "date-time"}, {"pattern": AGO_PATTERN}]})
}

pub(super) fn attributes() -> Value {
    json!({
        "maxProperties": limits::MAX_ATTRIBUTES,
        "propertyNames": {"minLength": 1, "maxLength": limits::MAX_ATTRIBUTE_KEY_CHARS},
        "additionalProperties": {"type": "string", "maxLength": limits::MAX_ATTRIBUTE_VALUE_CHARS},
    })
}

pub(super) fn dedup_id() -> Value {
    json!({"minLength": 1, "maxLength": limits::MAX_DEDUP_ID_CHARS})
}

pub(super) fn delay() -> Value {
    range(0, ms(limits::MAX_DELAY))
}

/// A FIFO group: no control characters (C0, DEL and C1, as Rust's `char::is_control`).
pub(super) fn group() -> Value {
    json!({"pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", "minLength": 1,
        "maxLength": limits::MAX_GROUP_CHARS})
}
