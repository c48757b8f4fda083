//! Queue configuration: every field with its default and its limits.
//!
//! A [`QueueConfig`] is always complete and valid; changes arrive as a [`QueueConfigPatch`]
//! whose unset fields keep their current (or default) value, so `PUT /v1/queues/{q}` is both
//! create and update, and a live queue can change any field.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::adaptive::{AdaptiveRate, BreakerConfig};
use crate::error::StoreError;
use crate::name::QueueName;
use crate::push::{PushPatch, PushTarget};

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// Limits, in one place so validation and docs agree.
pub mod limits {
    use super::*;

    /// Longest lease.
    pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);
    /// Most attempts before dead-lettering (0 means unlimited).
    pub const MAX_RECEIVE_COUNT: u32 = 1000;
    /// Longest backoff base or cap.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(12 * 3600);
    /// Longest delivery delay.
    pub const MAX_DELAY: Duration = Duration::from_secs(7 * 86_400);
    /// Shortest retention.
    pub const MIN_RETENTION: Duration = MINUTE;
    /// Longest retention.
    pub const MAX_RETENTION: Duration = Duration::from_secs(30 * 86_400);
    /// Largest message body allowed by any queue.
    pub const MAX_MESSAGE_BYTES: u32 = 16 * 1024 * 1024;
    /// Longest dedup window.
    pub const MAX_DEDUP_WINDOW: Duration = DAY;
    /// Largest `max_in_flight`.
    pub const MAX_IN_FLIGHT: u32 = 1_000_000;
    /// Largest `max_depth`.
    pub const MAX_DEPTH: u64 = 1_000_000_000;
    /// Longest time completed records and results are kept.
    pub const MAX_RESULT_TTL: Duration = Duration::from_secs(7 * 86_400);
    /// Most deliveries a rate limit may allow per period.
    pub const MAX_RATE_LIMIT: u32 = 1_000_000;
    /// Shortest rate-limit period.
    pub const MIN_RATE_PERIOD: Duration = Duration::from_millis(100);
    /// Longest rate-limit period.
    pub const MAX_RATE_PERIOD: Duration = DAY;
    /// Most messages in one send, receive or ack batch.
    pub const MAX_BATCH: usize = 1000;
    /// Largest total body size of one send batch.
    pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;
    /// Longest long-poll wait.
    pub const MAX_WAIT: Duration = Duration::from_secs(30);
    /// Longest `last_error` kept; longer errors are cut (with a marker) rather than refused,
    /// because a failing worker must always be able to report its failure.
    pub const MAX_ERROR_BYTES: usize = 8 * 1024;
    /// Attempts kept per message (the newest).
    pub const MAX_ATTEMPTS_KEPT: usize = 20;
    /// Most attributes per message.
    pub const MAX_ATTRIBUTES: usize = 64;
    /// Longest attribute key, in characters.
    pub const MAX_ATTRIBUTE_KEY_CHARS: usize = 256;
    /// Longest attribute value, in characters.
    pub const MAX_ATTRIBUTE_VALUE_CHARS: usize = 4096;
    /// Longest dedup id, in characters.
    pub const MAX_DEDUP_ID_CHARS: usize = 256;
    /// Largest `max_in_flight_per_group`.
    pub const MAX_IN_FLIGHT_PER_GROUP: u32 = 1000;
    /// Longest FIFO group name, in characters.
    pub const MAX_GROUP_CHARS: usize = crate::group::MAX_GROUP_CHARS;
    /// Longest consumer name (given at receive and when settling), in characters: it is kept
    /// with each of a message's last attempts.
    pub const MAX_CONSUMER_CHARS: usize = 128;
    /// Most tags on one queue.
    pub const MAX_TAGS: usize = 50;
    /// Longest tag key, in characters.
    pub const MAX_TAG_KEY_CHARS: usize = 128;
    /// Longest tag value, in characters.
    pub const MAX_TAG_VALUE_CHARS: usize = 256;
    /// Deepest nesting of arrays and objects in a JSON body or result ([`crate::json_depth`]).
    pub const MAX_JSON_DEPTH: usize = 64;
}

/// A delivery rate limit shared by all consumers of a queue: at most `limit` deliveries in
/// any window of length `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// Deliveries allowed per period.
    pub limit: u32,
    /// The window length.
    pub period: Duration,
    /// How many deliveries may go at once after a quiet spell; the rest are spread evenly,
    /// one per `period / limit` ([`crate::rate`]). `None`: a tenth of `limit`, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

impl RateLimit {
    /// `limit` per `period`, with the default burst.
    pub fn new(limit: u32, period: Duration) -> Self {
        RateLimit {
            limit,
            period,
            burst: None,
        }
    }

    /// `limit` per second.
    pub fn per_second(limit: u32) -> Self {
        RateLimit::new(limit, Duration::from_secs(1))
    }

    /// The burst in force: the one set, else a tenth of the limit (at least 1), never above
    /// the limit.
    pub fn burst(&self) -> u32 {
        self.burst
            .unwrap_or(self.limit / 10)
            .clamp(1, self.limit.max(1))
    }

    /// Checks the limit (1 to 1,000,000), the period (100 ms to a day) and the burst (1 to
    /// the limit) of the rate named `field`.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming `field` and the part out of range.
    pub fn check(&self, field: &str) -> Result<(), StoreError> {
        use limits::{MAX_RATE_LIMIT, MAX_RATE_PERIOD, MIN_RATE_PERIOD};
        if self.limit == 0 || self.limit > MAX_RATE_LIMIT {
            return Err(StoreError::invalid(format!(
                "{field}.limit must be 1 to {MAX_RATE_LIMIT}, got {}",
                self.limit
            )));
        }
        dur_range(
            &format!("{field}.period"),
            self.period,
            MIN_RATE_PERIOD,
            MAX_RATE_PERIOD,
        )?;
        if let Some(b) = self.burst
            && (b == 0 || b > self.limit)
        {
            return Err(StoreError::invalid(format!(
                "{field}.burst must be 1 to the limit ({}), got {b}",
                self.limit
            )));
        }
        Ok(())
    }

    /// The even spacing between two events at this rate.
    pub fn spacing(&self) -> Duration {
        self.period / self.limit.max(1)
    }
}

/// The complete configuration of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// Lease length of a delivery unless the receive overrides it.
    pub visibility_timeout: Duration,
    /// Deliveries before a failing message is dead-lettered; 0 means unlimited.
    pub max_receive_count: u32,
    /// Where exhausted, rejected and expired messages go; `None` only with unlimited attempts.
    pub dead_letter_queue: Option<QueueName>,
    /// First retry delay after a nack; doubles per attempt.
    pub backoff_base: Duration,
    /// Cap on the retry delay.
    pub backoff_max: Duration,
    /// Default delivery delay of a sent message.
    pub delay: Duration,
    /// How long a message may stay in this queue before it expires.
    pub retention: Duration,
    /// Largest body accepted.
    pub max_message_bytes: u32,
    /// How long a `dedup_id` is remembered.
    pub dedup_window: Duration,
    /// Delivery rate limit across all consumers.
    pub rate_limit: Option<RateLimit>,
    /// Most messages in flight across all consumers.
    pub max_in_flight: Option<u32>,
    /// Backpressure: most messages visible + delayed + in flight before sends are refused.
    pub max_depth: Option<u64>,
    /// How long completed records and results are kept.
    pub result_ttl: Duration,
    /// A paused queue accepts sends and delivers nothing.
    pub paused: bool,
    /// Where the broker delivers this queue's messages itself, if anywhere.
    #[serde(default)]
    pub push: Option<PushTarget>,
    /// How many messages of one FIFO group may be in flight at once (1–1000): the group's
    /// first this many waiting messages, in send order. Messages without a group are not
    /// limited by it. Configs stored before groups existed read as 1.
    #[serde(default = "default_in_flight_per_group")]
    pub max_in_flight_per_group: u32,
    /// How long a receive that names no wait of its own waits for a message (long polling by
    /// default, as SQS's `ReceiveMessageWaitTimeSeconds`); zero answers at once.
    #[serde(default)]
    pub receive_wait: Duration,
    /// Whether a message sent without a `dedup_id` takes the SHA-256 of its body as one, so
    /// that the same body sent twice within `dedup_window` is stored once (SQS's
    /// `ContentBasedDeduplication`).
    #[serde(default)]
    pub content_dedup: bool,
    /// Labels for the people who run the queue (owner, team, cost centre), as SQS's queue
    /// tags: at most 50, keys of 1 – 128 characters, values of at most 256.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// An adaptive delivery rate learned from congestion nacks, within its bounds and under
    /// `rate_limit` ([`crate::adaptive`]). Configs stored before it existed read as none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveRate>,
    /// A circuit breaker that stops deliveries while most calls fail
    /// ([`crate::adaptive`]). Configs stored before it existed read as none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerConfig>,
    /// The priority of messages sent without one (0 – 9, 9 most urgent). Configs stored
    /// before priorities existed read as 4.
    #[serde(default = "default_priority")]
    pub default_priority: u8,
    /// Fairness weights by key pattern (see [`crate::fair`]): a key of weight 3 is delivered
    /// three times as often as one of weight 1 while both have messages waiting. Keys no
    /// pattern matches weigh 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_weights: BTreeMap<String, u32>,
    /// What each key may have at once (see [`crate::fair::KeyLimits`]); a key at its limit
    /// waits, and never holds other keys back. Configs stored before it existed read as none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_limits: Option<crate::fair::KeyLimits>,
}

fn default_priority() -> u8 {
    crate::fair::DEFAULT_PRIORITY
}

/// The default of [`QueueConfig::max_in_flight_per_group`]: strict FIFO, one at a time.
pub const DEFAULT_IN_FLIGHT_PER_GROUP: u32 = 1;

fn default_in_flight_per_group() -> u32 {
    DEFAULT_IN_FLIGHT_PER_GROUP
}

impl QueueConfig {
    /// The defaults for a queue named `name`.
    pub fn defaults_for(name: &QueueName) -> Self {
        QueueConfig {
            visibility_timeout: 30 * SECOND,
            max_receive_count: 5,
            dead_letter_queue: Some(name.default_dlq()),
            backoff_base: SECOND,
            backoff_max: 15 * MINUTE,
            delay: Duration::ZERO,
            retention: 4 * DAY,
            max_message_bytes: 256 * 1024,
            dedup_window: 5 * MINUTE,
            rate_limit: None,
            max_in_flight: None,
            max_depth: None,
            result_ttl: HOUR,
            paused: false,
            push: None,
            max_in_flight_per_group: DEFAULT_IN_FLIGHT_PER_GROUP,
            default_priority: crate::fair::DEFAULT_PRIORITY,
            key_weights: BTreeMap::new(),
            key_limits: None,
            receive_wait: Duration::ZERO,
            content_dedup: false,
            tags: BTreeMap::new(),
            adaptive: None,
            breaker: None,
        }
    }

    /// Gives each message of a batch sent without a `dedup_id` the SHA-256 (hex) of its body
    /// as one, when the queue deduplicates by content.
    pub fn fill_content_dedup(&self, messages: &mut [crate::message::NewMessage]) {
        if !self.content_dedup {
            return;
        }
        use sha2::Digest as _;
        for m in messages.iter_mut().filter(|m| m.dedup_id.is_none()) {
            let digest = sha2::Sha256::digest(&m.body.bytes);
            let mut hex = String::with_capacity(64);
            for b in digest {
                use std::fmt::Write as _;
                let _ = write!(hex, "{b:02x}");
            }
            m.dedup_id = Some(hex);
        }
    }

    /// The configuration of an automatically created dead-letter queue: the defaults, but it
    /// keeps its messages until an operator acts (unlimited attempts, no DLQ of its own).
    pub fn dead_letter_defaults(name: &QueueName) -> Self {
        QueueConfig {
            max_receive_count: 0,
            dead_letter_queue: None,
            ..QueueConfig::defaults_for(name)
        }
    }

    /// Applies `patch` on top of `self` and validates the result for queue `name`.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the first field out of its range.
    pub fn apply(&self, name: &QueueName, patch: &QueueConfigPatch) -> Result<Self, StoreError> {
        let mut c = self.clone();
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = &patch.$f { c.$f = v.clone(); } )* };
        }
        set!(
            visibility_timeout,
            max_receive_count,
            dead_letter_queue,
            backoff_base,
            backoff_max,
            delay,
            retention,
            max_message_bytes,
            dedup_window,
            rate_limit,
            max_in_flight,
            max_depth,
            result_ttl,
            paused,
            max_in_flight_per_group,
            receive_wait,
            content_dedup,
            tags,
            adaptive,
            breaker,
            default_priority,
            key_weights,
            key_limits
        );
        if let Some(push) = &patch.push {
            c.push = push.as_ref().map(|p| p.resolve(self.push.as_ref()));
        }
        // Without a DLQ only with unlimited attempts: when the change gives only one of the
        // two, the other comes from the queue as it is, and the clash is with that state.
        let one_sided = patch.dead_letter_queue.is_some() != patch.max_receive_count.is_some();
        if one_sided && c.dead_letter_queue.is_none() && c.max_receive_count != 0 {
            return Err(StoreError::Conflict(format!(
                "\"{name}\" would have max_receive_count {} and no dead_letter_queue; set \
                 max_receive_count 0 (unlimited) with dead_letter_queue null, or name a \
                 dead-letter queue",
                c.max_receive_count
            )));
        }
        c.validate(name)?;
        Ok(c)
    }

    /// Checks every field against its limit.
    ///
    /// Long because it is one check per field of the configuration, each naming its limit and the
    /// value refused, in a list that can be read against `limits` field by field.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the field, its value and the allowed range.
    pub fn validate(&self, name: &QueueName) -> Result<(), StoreError> {
        use limits::*;
        dur_range(
            "visibility_timeout",
            self.visibility_timeout,
            Duration::ZERO,
            MAX_VISIBILITY,
        )?;
        if self.max_receive_count > MAX_RECEIVE_COUNT {
            return Err(StoreError::invalid(format!(
                "max_receive_count must be 0 (unlimited) to {MAX_RECEIVE_COUNT}, got {}",
                self.max_receive_count
            )));
        }
        match &self.dead_letter_queue {
            // Well-formed, but it names the queue the request is about: a conflict.
            Some(dlq) if dlq == name => {
                return Err(StoreError::Conflict(format!(
                    "dead_letter_queue of \"{name}\" cannot be the queue itself"
                )));
            }
            None if self.max_receive_count != 0 => {
                return Err(StoreError::invalid(format!(
                    "dead_letter_queue can be none only when max_receive_count is 0 (unlimited); \
                     \"{name}\" has max_receive_count {}",
                    self.max_receive_count
                )));
            }
            _ => {}
        }
        dur_range(
            "backoff_base",
            self.backoff_base,
            Duration::ZERO,
            MAX_BACKOFF,
        )?;
        dur_range("backoff_max", self.backoff_max, Duration::ZERO, MAX_BACKOFF)?;
        dur_range("delay", self.delay, Duration::ZERO, MAX_DELAY)?;
        dur_range("retention", self.retention, MIN_RETENTION, MAX_RETENTION)?;
        if self.max_message_bytes == 0 || self.max_message_bytes > MAX_MESSAGE_BYTES {
            return Err(StoreError::invalid(format!(
                "max_message_bytes must be 1 to {MAX_MESSAGE_BYTES}, got {}",
                self.max_message_bytes
            )));
        }
        dur_range(
            "dedup_window",
            self.dedup_window,
            Duration::ZERO,
            MAX_DEDUP_WINDOW,
        )?;
        if let Some(r) = &self.rate_limit {
            r.check("rate_limit")?;
        }
        if let Some(m) = self.max_in_flight
            && (m == 0 || m > MAX_IN_FLIGHT)
        {
            return Err(StoreError::invalid(format!(
                "max_in_flight must be 1 to {MAX_IN_FLIGHT}, got {m}"
            )));
        }
        if let Some(m) = self.max_depth
            && (m == 0 || m > MAX_DEPTH)
        {
            return Err(StoreError::invalid(format!(
                "max_depth must be 1 to {MAX_DEPTH}, got {m}"
            )));
        }
        dur_range(
            "result_ttl",
            self.result_ttl,
            Duration::ZERO,
            MAX_RESULT_TTL,
        )?;
        if let Some(p) = &self.push {
            p.validate()?;
        }
        if self.max_in_flight_per_group == 0
            || self.max_in_flight_per_group > MAX_IN_FLIGHT_PER_GROUP
        {
            return Err(StoreError::invalid(format!(
                "max_in_flight_per_group must be 1 to {MAX_IN_FLIGHT_PER_GROUP}, got {}",
                self.max_in_flight_per_group
            )));
        }
        dur_range("receive_wait", self.receive_wait, Duration::ZERO, MAX_WAIT)?;
        check_tags(&self.tags)?;
        crate::fair::check_priority("default_priority", self.default_priority)?;
        crate::fair::check_weights(&self.key_weights)?;
        if let Some(l) = &self.key_limits {
            l.validate()?;
        }
        if let Some(a) = &self.adaptive {
            a.validate()?;
        }
        if let Some(b) = &self.breaker {
            b.validate()?;
        }
        Ok(())
    }

    /// Advice about a valid configuration that may not do what its author expects: an
    /// adaptive rate whose `min_per_min` is above what `rate_limit` allows (the limit wins).
    pub fn advice(&self, name: &QueueName) -> Vec<String> {
        let mut warnings = Vec::new();
        if let (Some(a), Some(r)) = (&self.adaptive, &self.rate_limit) {
            let ceiling = crate::adaptive::ceiling_per_min(r);
            if ceiling < a.min_per_min {
                warnings.push(format!(
                    "rate_limit of \"{name}\" allows {ceiling} deliveries a minute, below \
                     adaptive.min_per_min ({}): the rate_limit wins and the adaptive rate \
                     stays at or below it",
                    a.min_per_min
                ));
            }
        }
        warnings
    }
}

/// Tags within their limits: at most [`limits::MAX_TAGS`], keys of 1 to
/// [`limits::MAX_TAG_KEY_CHARS`] characters, values of at most
/// [`limits::MAX_TAG_VALUE_CHARS`].
fn check_tags(tags: &BTreeMap<String, String>) -> Result<(), StoreError> {
    use limits::*;
    if tags.len() > MAX_TAGS {
        return Err(StoreError::invalid(format!(
            "tags: at most {MAX_TAGS} per queue, got {}",
            tags.len()
        )));
    }
    crate::text::refuse_nul_in_map("tag", tags)?;
    for (k, v) in tags {
        let chars = k.chars().count();
        if chars == 0 || chars > MAX_TAG_KEY_CHARS {
            return Err(StoreError::invalid(format!(
                "tags: a key must be 1 to {MAX_TAG_KEY_CHARS} characters, got {chars} ({k:?})"
            )));
        }
        if v.chars().count() > MAX_TAG_VALUE_CHARS {
            return Err(StoreError::invalid(format!(
                "tags: the value of {k:?} must be at most {MAX_TAG_VALUE_CHARS} characters"
            )));
        }
    }
    Ok(())
}

fn dur_range(field: &str, v: Duration, min: Duration, max: Duration) -> Result<(), StoreError> {
    if v < min || v > max {
        return Err(StoreError::invalid(format!(
            "{field} must be between {} ms and {} ms, got {} ms",
            min.as_millis(),
            max.as_millis(),
            v.as_millis()
        )));
    }
    Ok(())
}

/// A partial configuration: `None` keeps the current value. For the optional fields, the
/// outer `Option` says "change it" and the inner one is the new value (`None` clears it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct QueueConfigPatch {
    pub visibility_timeout: Option<Duration>,
    pub max_receive_count: Option<u32>,
    pub dead_letter_queue: Option<Option<QueueName>>,
    pub backoff_base: Option<Duration>,
    pub backoff_max: Option<Duration>,
    pub delay: Option<Duration>,
    pub retention: Option<Duration>,
    pub max_message_bytes: Option<u32>,
    pub dedup_window: Option<Duration>,
    pub rate_limit: Option<Option<RateLimit>>,
    pub max_in_flight: Option<Option<u32>>,
    pub max_depth: Option<Option<u64>>,
    pub result_ttl: Option<Duration>,
    pub paused: Option<bool>,
    pub push: Option<Option<PushPatch>>,
    #[serde(default)]
    pub max_in_flight_per_group: Option<u32>,
    #[serde(default)]
    pub receive_wait: Option<Duration>,
    #[serde(default)]
    pub content_dedup: Option<bool>,
    /// Replaces the tags whole.
    #[serde(default)]
    pub tags: Option<BTreeMap<String, String>>,
    /// Replaces the adaptive rate whole; `Some(None)` removes it.
    #[serde(default)]
    pub adaptive: Option<Option<AdaptiveRate>>,
    /// Replaces the breaker whole; `Some(None)` removes it.
    #[serde(default)]
    pub breaker: Option<Option<BreakerConfig>>,
    #[serde(default)]
    pub default_priority: Option<u8>,
    /// Replaces the weights whole.
    #[serde(default)]
    pub key_weights: Option<BTreeMap<String, u32>>,
    /// Replaces the per-key limits whole; `Some(None)` removes them.
    #[serde(default)]
    pub key_limits: Option<Option<crate::fair::KeyLimits>>,
}

/// A queue as the store reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    /// The queue's name.
    pub name: QueueName,
    /// Its full configuration.
    pub config: QueueConfig,
    /// When it was created.
    pub created_at: crate::time::Timestamp,
}

/// What `put_queue` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutQueueOutcome {
    /// The queue after the change.
    pub queue: QueueInfo,
    /// True when the queue did not exist before.
    pub created: bool,
    /// Advice the caller should see, e.g. unlimited attempts without a DLQ.
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> QueueName {
        QueueName::new("jobs").unwrap()
    }

    #[test]
    fn defaults_are_valid_and_match_the_spec() {
        let c = QueueConfig::defaults_for(&q());
        c.validate(&q()).unwrap();
        assert_eq!(c.visibility_timeout, Duration::from_secs(30));
        assert_eq!(c.max_receive_count, 5);
        assert_eq!(c.dead_letter_queue.unwrap().as_str(), "jobs.dlq");
        assert_eq!(c.retention, Duration::from_secs(4 * 86_400));
        assert_eq!(c.max_message_bytes, 262_144);
    }

    #[test]
    fn each_limit_is_enforced() {
        let base = QueueConfig::defaults_for(&q());
        let bad = [
            QueueConfigPatch {
                visibility_timeout: Some(Duration::from_secs(12 * 3600 + 1)),
                ..Default::default()
            },
            QueueConfigPatch {
                max_receive_count: Some(1001),
                ..Default::default()
            },
            QueueConfigPatch {
                dead_letter_queue: Some(None),
                max_receive_count: Some(3),
                ..Default::default()
            },
            QueueConfigPatch {
                backoff_max: Some(Duration::from_secs(13 * 3600)),
                ..Default::default()
            },
            QueueConfigPatch {
                delay: Some(Duration::from_secs(8 * 86_400)),
                ..Default::default()
            },
            QueueConfigPatch {
                retention: Some(Duration::from_secs(59)),
                ..Default::default()
            },
            QueueConfigPatch {
                retention: Some(Duration::from_secs(31 * 86_400)),
                ..Default::default()
            },
            QueueConfigPatch {
                max_message_bytes: Some(0),
                ..Default::default()
            },
            QueueConfigPatch {
                max_message_bytes: Some(16 * 1024 * 1024 + 1),
                ..Default::default()
            },
            QueueConfigPatch {
                dedup_window: Some(Duration::from_secs(86_401)),
                ..Default::default()
            },
            QueueConfigPatch {
                rate_limit: Some(Some(RateLimit {
                    limit: 0,
                    period: SECOND,
                    burst: None,
                })),
                ..Default::default()
            },
            QueueConfigPatch {
                max_in_flight: Some(Some(0)),
                ..Default::default()
            },
            QueueConfigPatch {
                max_depth: Some(Some(0)),
                ..Default::default()
            },
            QueueConfigPatch {
                result_ttl: Some(Duration::from_secs(8 * 86_400)),
                ..Default::default()
            },
            QueueConfigPatch {
                max_in_flight_per_group: Some(0),
                ..Default::default()
            },
            QueueConfigPatch {
                max_in_flight_per_group: Some(1001),
                ..Default::default()
            },
        ];
        for p in bad {
            let err = base
                .apply(&q(), &p)
                .expect_err(&format!("{p:?} should be refused"));
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
        }
        // Well-formed, but naming the queue itself: a conflict.
        let own = QueueConfigPatch {
            dead_letter_queue: Some(Some(q())),
            ..Default::default()
        };
        let err = base.apply(&q(), &own).expect_err("its own DLQ");
        assert_eq!(err.code(), crate::ErrorCode::Conflict);
        // No DLQ, with the queue's own limited attempts: a clash with its state.
        let no_dlq = QueueConfigPatch {
            dead_letter_queue: Some(None),
            ..Default::default()
        };
        let err = base.apply(&q(), &no_dlq).expect_err("no DLQ, 5 attempts");
        assert_eq!(err.code(), crate::ErrorCode::Conflict);
    }

    #[test]
    fn configs_stored_before_groups_read_with_one_in_flight_per_group() {
        let c = QueueConfig::defaults_for(&q());
        let mut v = serde_json::to_value(&c).unwrap();
        v.as_object_mut().unwrap().remove("max_in_flight_per_group");
        let back: QueueConfig = serde_json::from_value(v).unwrap();
        assert_eq!(back.max_in_flight_per_group, 1);
        assert_eq!(back, c);
    }

    #[test]
    fn adaptive_and_breaker_are_set_validated_cleared_and_absent_when_unset() {
        use crate::adaptive::{AdaptiveRate, BreakerConfig};
        let base = QueueConfig::defaults_for(&q());
        let v = serde_json::to_value(&base).unwrap();
        assert!(v.get("adaptive").is_none() && v.get("breaker").is_none());
        let on = QueueConfigPatch {
            adaptive: Some(Some(AdaptiveRate::new(10, 600))),
            breaker: Some(Some(BreakerConfig::default())),
            ..Default::default()
        };
        let c = base.apply(&q(), &on).unwrap();
        assert_eq!(c.adaptive, Some(AdaptiveRate::new(10, 600)));
        assert_eq!(c.breaker, Some(BreakerConfig::default()));
        let back: QueueConfig = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        // Unset in a patch: kept; null: cleared.
        let kept = c.apply(&q(), &QueueConfigPatch::default()).unwrap();
        assert_eq!(kept, c);
        let off = QueueConfigPatch {
            adaptive: Some(None),
            breaker: Some(None),
            ..Default::default()
        };
        let cleared = c.apply(&q(), &off).unwrap();
        assert_eq!((cleared.adaptive, cleared.breaker), (None, None));
        for bad in [
            QueueConfigPatch {
                adaptive: Some(Some(AdaptiveRate::new(0, 600))),
                ..Default::default()
            },
            QueueConfigPatch {
                adaptive: Some(Some(AdaptiveRate::new(700, 600))),
                ..Default::default()
            },
            QueueConfigPatch {
                breaker: Some(Some(BreakerConfig {
                    probes: 0,
                    ..Default::default()
                })),
                ..Default::default()
            },
        ] {
            let err = base.apply(&q(), &bad).expect_err("out of range");
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
        }
    }

    #[test]
    fn a_rate_limit_below_the_adaptive_minimum_is_advised_against() {
        let mut c = QueueConfig::defaults_for(&q());
        c.adaptive = Some(crate::adaptive::AdaptiveRate::new(120, 600));
        assert!(c.advice(&q()).is_empty());
        c.rate_limit = Some(RateLimit::per_second(2));
        assert!(c.advice(&q()).is_empty(), "120 a minute is not below 120");
        c.rate_limit = Some(RateLimit::per_second(1));
        let w = c.advice(&q());
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("60") && w[0].contains("min_per_min"), "{w:?}");
    }

    #[test]
    fn unlimited_attempts_may_drop_the_dlq() {
        let base = QueueConfig::defaults_for(&q());
        let p = QueueConfigPatch {
            max_receive_count: Some(0),
            dead_letter_queue: Some(None),
            ..Default::default()
        };
        assert_eq!(base.apply(&q(), &p).unwrap().dead_letter_queue, None);
    }
}
