//! Parsers for human-written values: durations (`500ms`, `30s`, `5m`, `2h`, `4d`, `1h30m`),
//! rates (`100/min`, `10/s`, `5/h`, `1000/60s`) and sizes (`256KiB`, `1MiB`, `4096`), and
//! the queue configuration flags shared by `queue create` and `queue update`.

use std::time::Duration;

use clap::Args;
use sluice_core::adaptive::{AdaptiveRate, BreakerConfig};
use sluice_core::{Clock, SystemClock, Timestamp};
use sluice_wire::{
    ClientErrorActionWire, PushMethodWire, PushTargetRequest, QueueConfigRequest, RateLimitWire,
};

use sluice_core::config::RateLimit;
use sluice_core::human;
pub use sluice_core::human::{fmt_ms, parse_bytes, parse_duration, parse_size};

use super::governance::{parse_adaptive, parse_breaker};

/// Parses a rate (`100/min`, `10/s`, `1000/60s`) as the console does ([`human::parse_rate`]).
pub fn parse_rate(s: &str) -> Result<RateLimitWire, String> {
    let rate = human::parse_rate(s)?;
    // A period past i64 milliseconds is out of every range the broker takes; it says so.
    Ok(RateLimitWire {
        limit: rate.limit,
        period_ms: i64::try_from(rate.period.as_millis()).unwrap_or(i64::MAX),
        burst: None,
    })
}

/// Formats a rate limit back: `100/min`, `10/s`, `7/1.5s`.
pub fn fmt_rate(r: &RateLimitWire) -> String {
    human::fmt_rate(&RateLimit {
        limit: r.limit,
        period: Duration::from_millis(u64::try_from(r.period_ms).unwrap_or(0)),
        burst: None,
    })
}

/// The most messages per second a redrive job may move (the broker's limit).
pub const MAX_REDRIVE_RATE: u32 = 100_000;

/// Parses a redrive rate (`50/min`, `10/s`, `1000/h`, `1000/60s`): at most that many in any
/// sliding period, spread evenly. Refuses rates above the broker's limit.
pub fn parse_redrive_rate(s: &str) -> Result<RateLimitWire, String> {
    let r = parse_rate(s)?;
    if r.period_ms <= 0 || r.limit == 0 {
        return Err(format!(
            "\"{s}\" moves nothing; write it like 50/min, 10/s or 1000/h"
        ));
    }
    let per_sec = f64::from(r.limit) * 1000.0 / r.period_ms as f64;
    if per_sec > f64::from(MAX_REDRIVE_RATE) {
        return Err(format!(
            "\"{s}\" is {per_sec:.0} per second; a redrive moves at most {MAX_REDRIVE_RATE} per \
             second"
        ));
    }
    Ok(r)
}

/// Parses a share in percent: `10%` or `10`, 1 to 100.
pub fn parse_percent(s: &str) -> Result<u8, String> {
    let n = s.trim().trim_end_matches('%').trim();
    match n.parse::<u8>() {
        Ok(p) if (1..=100).contains(&p) => Ok(p),
        _ => Err(format!(
            "\"{s}\" is not a share; write a whole percent from 1% to 100%, like 10%"
        )),
    }
}

/// Parses a point in time: an RFC 3339 time (`2026-01-01T10:00:00Z`) as it is, or a
/// duration meaning that long ago (`1h` = one hour ago). Answers it as RFC 3339 (UTC).
pub fn parse_time(s: &str) -> Result<String, String> {
    sluice_core::human::parse_time("the time", s, SystemClock.now())
        .map(sluice_wire::rfc3339)
        .map_err(|e| e.to_string())
}

/// The time `ago` before now.
pub fn time_ago(ago: Duration) -> Timestamp {
    let now = SystemClock.now().as_millis();
    Timestamp(now.saturating_sub(i64::try_from(ago.as_millis()).unwrap_or(i64::MAX)))
}

/// An RFC 3339 time as milliseconds since the epoch (`None` if it is not one).
pub fn time_ms(s: &str) -> Option<i64> {
    sluice_wire::parse_rfc3339("time", s)
        .ok()
        .map(|t| t.as_millis())
}

/// An RFC 3339 time shortened for a table: `2026-01-01 10:00:05Z` (whole seconds, UTC).
pub fn short_time(s: &str) -> String {
    match time_ms(s) {
        Some(ms) => {
            let full = sluice_wire::rfc3339(Timestamp(ms - ms.rem_euclid(1000)));
            full.replacen('T', " ", 1)
        }
        None => s.to_owned(),
    }
}

/// Whole seconds compactly, to two units: `42s`, `5m10s`, `3h2m`, `2d4h`.
pub fn fmt_secs(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Parses `key=value` (an attribute filter).
pub fn parse_attr(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!(
            "\"{s}\" is not an attribute filter; write it like key=value"
        )),
    }
}

/// A value that `none` clears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting<T> {
    /// Remove the limit.
    Clear,
    /// Set it.
    Set(T),
}

impl<T> Setting<T> {
    fn into_option(self) -> Option<T> {
        match self {
            Setting::Clear => None,
            Setting::Set(v) => Some(v),
        }
    }
}

fn clearable<T>(
    parse: impl Fn(&str) -> Result<T, String>,
) -> impl Fn(&str) -> Result<Setting<T>, String> {
    move |s: &str| {
        if s.trim().eq_ignore_ascii_case("none") {
            Ok(Setting::Clear)
        } else {
            parse(s).map(Setting::Set)
        }
    }
}

fn parse_rate_setting(s: &str) -> Result<Setting<RateLimitWire>, String> {
    clearable(parse_rate)(s)
}

fn parse_u32_setting(s: &str) -> Result<Setting<u32>, String> {
    clearable(|v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|_| format!("\"{v}\" is not a whole number (or `none`)"))
    })(s)
}

fn parse_u64_setting(s: &str) -> Result<Setting<u64>, String> {
    clearable(|v: &str| {
        v.trim()
            .parse::<u64>()
            .map_err(|_| format!("\"{v}\" is not a whole number (or `none`)"))
    })(s)
}

/// Every field of a queue's configuration; an absent flag keeps the current value
/// (or the default, on creation).
#[derive(Debug, Clone, Default, Args)]
pub struct QueueConfigArgs {
    /// Lease length of a delivery, e.g. 30s (0 – 12h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub visibility: Option<Duration>,
    /// Deliveries before a message is dead-lettered; 0 = unlimited, no DLQ routing.
    #[arg(long, value_name = "N")]
    pub max_receive_count: Option<u32>,
    /// The dead-letter queue's name [default on creation: NAME.dlq].
    #[arg(long, value_name = "NAME", conflicts_with = "no_dlq")]
    pub dlq: Option<String>,
    /// No dead-letter queue (needs --max-receive-count 0).
    #[arg(long)]
    pub no_dlq: bool,
    /// First retry delay after a nack, e.g. 1s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub backoff_base: Option<Duration>,
    /// Cap on the retry delay, e.g. 15m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub backoff_max: Option<Duration>,
    /// Default delivery delay of a sent message, e.g. 0s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub delay: Option<Duration>,
    /// How long a message may wait before it expires, e.g. 4d (1m – 30d).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retention: Option<Duration>,
    /// Largest body accepted, e.g. 256KiB, 1MiB or 4096.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_message_bytes: Option<u32>,
    /// How long a dedup id is remembered, e.g. 5m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub dedup_window: Option<Duration>,
    /// Deliveries per period across all consumers, e.g. 100/min, 10/s, 1000/60s; `none`
    /// removes the limit.
    #[arg(long, value_name = "RATE", value_parser = parse_rate_setting)]
    pub rate_limit: Option<Setting<RateLimitWire>>,
    /// Most messages in flight across all consumers; `none` removes the limit.
    #[arg(long, value_name = "N", value_parser = parse_u32_setting)]
    pub max_in_flight: Option<Setting<u32>>,
    /// Backpressure: most messages visible + delayed + in flight; `none` removes the limit.
    #[arg(long, value_name = "N", value_parser = parse_u64_setting)]
    pub max_depth: Option<Setting<u64>>,
    /// How long completed records and results are kept, e.g. 1h.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub result_ttl: Option<Duration>,
    /// Pause deliveries (`--paused=false` resumes).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub paused: Option<bool>,
    /// Messages of one FIFO message group that may be in flight at once (1 – 1000;
    /// default 1: strict send order).
    #[arg(long, value_name = "N")]
    pub max_in_flight_per_group: Option<u32>,
    /// How long a receive that names no wait waits for a message, e.g. 20s (0 – 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub receive_wait: Option<Duration>,
    /// A message sent without a dedup id is deduplicated by its body (its SHA-256)
    /// (`--content-dedup=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub content_dedup: Option<bool>,
    /// A tag, `KEY=VALUE` (repeatable): the queue's tags become exactly those given.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_tag, conflicts_with = "no_tags")]
    pub tag: Vec<(String, String)>,
    /// Remove every tag of the queue.
    #[arg(long)]
    pub no_tags: bool,
    /// The priority of messages sent without one, 0 – 9 (9 most urgent) [default: 4].
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u8).range(0..=9))]
    pub default_priority: Option<u8>,
    /// A fairness weight, `PATTERN=WEIGHT` (repeatable; `*` matches any run of characters,
    /// weights 1 – 1000): the queue's key weights become exactly those given.
    #[arg(
        long,
        value_name = "PATTERN=WEIGHT",
        value_parser = parse_weight,
        conflicts_with = "no_key_weights"
    )]
    pub key_weight: Vec<(String, u32)>,
    /// Remove every key weight of the queue (every key weighs 1).
    #[arg(long)]
    pub no_key_weights: bool,
    /// Most messages of one key in flight at once (1 – 1,000,000): the queue's key limits
    /// become exactly this and `--key-rate` (per-pattern overrides are set with the HTTP API).
    #[arg(long, value_name = "N", conflicts_with = "no_key_limits",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub key_max_in_flight: Option<u32>,
    /// Most deliveries of one key per period, e.g. 100/min or 10/s, spread evenly after a
    /// burst of a tenth: the queue's key limits become exactly this and `--key-max-in-flight`.
    #[arg(long, value_name = "RATE", conflicts_with = "no_key_limits", value_parser = parse_rate)]
    pub key_rate: Option<RateLimitWire>,
    /// Remove the queue's per-key limits.
    #[arg(long)]
    pub no_key_limits: bool,
    /// Deliver the queue's messages to this endpoint (https, or http on loopback; a public
    /// address unless the broker's push_allow lists it); `none` stops pushing. The target is replaced whole: give its other --push-* flags with it.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,
    /// Push request timeout, e.g. 10s (100ms – 5m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "push")]
    pub push_timeout: Option<Duration>,
    /// Most push requests in flight per broker node (1 – 1000) [default: 16].
    #[arg(long, value_name = "N", requires = "push")]
    pub push_concurrency: Option<u32>,
    /// The HMAC-SHA256 key push requests are signed with (16 – 512 bytes); `none` removes
    /// it. Without the flag the current key is kept.
    #[arg(long, value_name = "SECRET", requires = "push")]
    pub push_secret: Option<String>,
    /// An extra push request header, `Name: value` (repeatable).
    #[arg(long, value_name = "HEADER", requires = "push", value_parser = parse_header)]
    pub push_header: Vec<(String, String)>,
    /// Push request method: POST (default), PUT or PATCH.
    #[arg(long, value_name = "METHOD", requires = "push", value_parser = parse_method)]
    pub push_method: Option<PushMethodWire>,
    /// What a 4xx answer other than 429 does: `reject` (dead-letter, default) or `retry`.
    #[arg(long, value_name = "ACTION", requires = "push", value_parser = parse_client_error)]
    pub push_on_client_error: Option<ClientErrorActionWire>,
    /// An adaptive delivery rate, learned from congestion nacks (Retry-After, or errors
    /// matching `signal`), per minute: `min=60,max=6000[,signal=retry_after|errors:429;503]
    /// [,window=60s][,increase=N][,decrease=0.7]` (quote it in a shell: `;` separates the
    /// error patterns). Replaces the current setting whole.
    #[arg(long, value_name = "SETTINGS", value_parser = parse_adaptive, conflicts_with = "no_adaptive")]
    pub adaptive: Option<AdaptiveRate>,
    /// Remove the adaptive rate.
    #[arg(long)]
    pub no_adaptive: bool,
    /// A circuit breaker: `[share=0.5][,window=60s][,min_calls=20][,probe_every=30s]
    /// [,probes=3]`; a bare --breaker takes the defaults. Replaces the current setting whole.
    #[arg(
        long,
        value_name = "SETTINGS",
        num_args = 0..=1,
        default_missing_value = "",
        value_parser = parse_breaker,
        conflicts_with = "no_breaker"
    )]
    pub breaker: Option<BreakerConfig>,
    /// Remove the circuit breaker.
    #[arg(long)]
    pub no_breaker: bool,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once(':')
        .ok_or_else(|| format!("\"{s}\" is not a header: write it as `Name: value`"))?;
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

fn parse_tag(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| {
        format!("\"{s}\" is not a tag: write it as KEY=VALUE, e.g. team=payments")
    })?;
    Ok((k.to_owned(), v.to_owned()))
}

fn parse_method(s: &str) -> Result<PushMethodWire, String> {
    match s.to_ascii_uppercase().as_str() {
        "POST" => Ok(PushMethodWire::Post),
        "PUT" => Ok(PushMethodWire::Put),
        "PATCH" => Ok(PushMethodWire::Patch),
        _ => Err(format!("\"{s}\" is not a push method: POST, PUT or PATCH")),
    }
}

fn parse_client_error(s: &str) -> Result<ClientErrorActionWire, String> {
    match s {
        "reject" => Ok(ClientErrorActionWire::Reject),
        "retry" => Ok(ClientErrorActionWire::Retry),
        _ => Err(format!("\"{s}\" is not an action: reject or retry")),
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl QueueConfigArgs {
    /// The request these flags ask for.
    pub fn to_request(&self) -> QueueConfigRequest {
        QueueConfigRequest {
            visibility_timeout_ms: self.visibility.map(ms),
            max_receive_count: self.max_receive_count,
            dead_letter_queue: if self.no_dlq {
                Some(None)
            } else {
                self.dlq.clone().map(Some)
            },
            backoff_base_ms: self.backoff_base.map(ms),
            backoff_max_ms: self.backoff_max.map(ms),
            delay_ms: self.delay.map(ms),
            retention_ms: self.retention.map(ms),
            max_message_bytes: self.max_message_bytes,
            dedup_window_ms: self.dedup_window.map(ms),
            max_in_flight: self.max_in_flight.map(Setting::into_option),
            max_depth: self.max_depth.map(Setting::into_option),
            rate_limit: self.rate_limit.map(Setting::into_option),
            result_ttl_ms: self.result_ttl.map(ms),
            paused: self.paused,
            push: self.push.as_ref().map(|url| {
                (!url.trim().eq_ignore_ascii_case("none")).then(|| PushTargetRequest {
                    url: url.clone(),
                    method: self.push_method,
                    headers: (!self.push_header.is_empty())
                        .then(|| self.push_header.iter().cloned().collect()),
                    timeout_ms: self.push_timeout.map(ms),
                    concurrency: self.push_concurrency,
                    secret: self
                        .push_secret
                        .as_ref()
                        .map(|s| (!s.eq_ignore_ascii_case("none")).then(|| s.clone())),
                    on_client_error: self.push_on_client_error,
                    signed: None,
                })
            }),
            max_in_flight_per_group: self.max_in_flight_per_group,
            receive_wait_ms: self.receive_wait.map(ms),
            content_dedup: self.content_dedup,
            tags: if self.no_tags {
                Some(Default::default())
            } else {
                (!self.tag.is_empty()).then(|| self.tag.iter().cloned().collect())
            },
            adaptive: if self.no_adaptive {
                Some(None)
            } else {
                self.adaptive.clone().map(Some)
            },
            breaker: if self.no_breaker {
                Some(None)
            } else {
                self.breaker.clone().map(Some)
            },
            default_priority: self.default_priority,
            key_weights: if self.no_key_weights {
                Some(Default::default())
            } else {
                (!self.key_weight.is_empty()).then(|| self.key_weight.iter().cloned().collect())
            },
            key_limits: if self.no_key_limits {
                Some(None)
            } else if self.key_max_in_flight.is_some() || self.key_rate.is_some() {
                Some(Some(sluice_core::fair::KeyLimits {
                    max_in_flight: self.key_max_in_flight,
                    rate_limit: self.key_rate.map(|r| RateLimit {
                        limit: r.limit,
                        period: Duration::from_millis(u64::try_from(r.period_ms).unwrap_or(0)),
                        burst: None,
                    }),
                    ..Default::default()
                }))
            } else {
                None
            },
        }
    }
}

/// A `PATTERN=WEIGHT` of `--key-weight`.
fn parse_weight(s: &str) -> Result<(String, u32), String> {
    let (pattern, w) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("\"{s}\" is not a key weight; write it as PATTERN=WEIGHT"))?;
    let w = w
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("the weight in \"{s}\" is not a whole number from 1 to 1000"))?;
    Ok((pattern.to_owned(), w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        // The parser itself is sluice-core's `human::parse_duration`, tested there.
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(fmt_ms(30_000), "30s");
        assert_eq!(fmt_ms(5_400_000), "1h30m");
        assert_eq!(fmt_ms(1500), "1.5s");
        assert_eq!(fmt_ms(345_600_000), "4d");
    }

    #[test]
    fn rates() {
        // The parser is sluice-core's `human::parse_rate`, held to `human_values.json` there.
        let r = |s| parse_rate(s).unwrap();
        assert_eq!((r("100/min").limit, r("100/min").period_ms), (100, 60_000));
        assert_eq!(fmt_rate(&r("7/1500ms")), "7/1.5s");
    }

    #[test]
    fn redrive_rates() {
        let rate = |s| parse_redrive_rate(s).map(|r| (r.limit, r.period_ms));
        assert_eq!(rate("10/s"), Ok((10, 1000)));
        assert_eq!(rate("50/min"), Ok((50, 60_000)));
        assert_eq!(rate("30/min"), Ok((30, 60_000)), "below 1/s is fine");
        assert_eq!(rate("1000/h"), Ok((1000, 3_600_000)));
        assert!(rate("0/min").is_err());
        assert!(rate("200000/s").is_err());
        assert!(rate("fast").is_err());
        assert_eq!(parse_percent("10%"), Ok(10));
        assert_eq!(parse_percent("100"), Ok(100));
        assert!(parse_percent("0%").is_err());
        assert!(parse_percent("150%").is_err());
        assert!(parse_percent("a lot").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(
            parse_time("2026-01-01T10:00:00Z").unwrap(),
            "2026-01-01T10:00:00Z"
        );
        let ago = parse_time("1h").unwrap();
        let ms = time_ms(&ago).unwrap();
        let expect = SystemClock.now().as_millis() - 3_600_000;
        assert!((ms - expect).abs() < 5_000, "{ago}");
        assert!(parse_time("yesterday").is_err());
        assert_eq!(
            short_time("2026-01-01T10:00:05.250Z"),
            "2026-01-01 10:00:05Z"
        );
        assert_eq!(fmt_secs(42), "42s");
        assert_eq!(fmt_secs(310), "5m10s");
        assert_eq!(fmt_secs(3 * 3600 + 120), "3h2m");
        assert_eq!(parse_attr("k=v=w"), Ok(("k".into(), "v=w".into())));
        assert!(parse_attr("=v").is_err());
    }
}
