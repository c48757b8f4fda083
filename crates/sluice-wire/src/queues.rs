//! Queue configuration and the queue list.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use std::collections::BTreeMap;

use sluice_core::adaptive::{AdaptiveRate, BreakerConfig};
use sluice_core::config::{QueueConfig, QueueConfigPatch, QueueInfo, RateLimit};
use sluice_core::error::StoreError;
use sluice_core::push::{ClientErrorAction, PushMethod, PushPatch, PushTarget};
use sluice_core::time::rfc3339;

use crate::convert::{as_ms, millis, opt_millis, present, queue_name};

/// A delivery rate limit: at most `limit` deliveries in any window of `period_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitWire {
    /// Deliveries allowed per period (1 – 1,000,000).
    pub limit: u32,
    /// The window, in milliseconds (100 ms – 24 h).
    pub period_ms: i64,
    /// How many may go at once after a quiet spell (1 – `limit`); the rest are spread
    /// evenly, one per `period_ms / limit`. Default a tenth of `limit`, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000000)]
    pub burst: Option<u32>,
}

/// A push target as `PUT /v1/queues/{q}` takes it: the broker delivers the queue's messages
/// to `url` itself. Only `url` is required.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushTargetRequest {
    /// The endpoint: `https`, or `http` on a loopback host (`localhost`, `127.0.0.0/8`,
    /// `::1`) unless the broker is started with `--push-allow-http`. At most 2,048 bytes,
    /// no credentials in it. Its host must resolve to public addresses unless the broker's
    /// `push_allow` lists it, and never to the broker's own listeners. A new scheme, host or
    /// port drops the current header values and secret unless given again.
    #[schema(max_length = 2048, example = "https://api.example.com/hooks/release")]
    pub url: String,
    /// `POST` (default), `PUT` or `PATCH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^(POST|PUT|PATCH)$")]
    pub method: Option<PushMethodWire>,
    /// Extra request headers (at most 32; not `Host`, `Content-Length`, hop-by-hop headers
    /// or any `Sluice-*` header; values visible ASCII, at most 4,096 bytes). A value of
    /// `(redacted)`, as views show it, keeps the header's current value while the URL's
    /// scheme, host and port stay the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Request timeout, 100 ms – 5 min. Default 10 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 100, maximum = 300_000)]
    pub timeout_ms: Option<i64>,
    /// Most requests in flight from one broker node, 1 – 1,000. Default 16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub concurrency: Option<u32>,
    /// The HMAC-SHA256 signing key (16 – 512 characters): requests then carry `Sluice-Signature`.
    /// Absent keeps the current secret (views never show it) while the URL's scheme, host and
    /// port stay the same; `null` removes it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, min_length = 16, max_length = 512)]
    pub secret: Option<Option<String>>,
    /// What a 4xx answer other than 429 does: `reject` (dead-letter at once, default) or
    /// `retry` (with backoff, like a 5xx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^(reject|retry)$")]
    pub on_client_error: Option<ClientErrorActionWire>,
    /// Ignored: views carry it, so a queue's configuration read with `GET` can be written
    /// back as it is. Whether requests are signed follows `secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed: Option<bool>,
}

/// The HTTP method of push requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum PushMethodWire {
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
}

/// What a 4xx answer other than 429 does to a pushed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClientErrorActionWire {
    /// Dead-letter at once.
    Reject,
    /// Retry with backoff.
    Retry,
}

impl PushTargetRequest {
    fn to_patch(&self) -> Result<PushPatch, StoreError> {
        let mut target = PushTarget::new(self.url.clone());
        if let Some(m) = self.method {
            target.method = match m {
                PushMethodWire::Post => PushMethod::Post,
                PushMethodWire::Put => PushMethod::Put,
                PushMethodWire::Patch => PushMethod::Patch,
            };
        }
        if let Some(h) = &self.headers {
            target.headers = h.clone();
        }
        if let Some(t) = self.timeout_ms {
            target.timeout = millis("push.timeout_ms", t)?;
        }
        if let Some(c) = self.concurrency {
            target.concurrency = c;
        }
        if let Some(a) = self.on_client_error {
            target.on_client_error = match a {
                ClientErrorActionWire::Reject => ClientErrorAction::Reject,
                ClientErrorActionWire::Retry => ClientErrorAction::Retry,
            };
        }
        Ok(PushPatch {
            target,
            secret: self.secret.clone(),
        })
    }
}

/// A queue's push target as views show it: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PushTargetView {
    /// The endpoint, with every query value and any user information shown as
    /// `(redacted)` (a query may carry a token); written back as shown, it keeps the real URL.
    pub url: String,
    /// The request method.
    #[schema(value_type = String, pattern = "^(POST|PUT|PATCH)$")]
    pub method: PushMethodWire,
    /// Extra request headers, by name; their values are never shown (they often carry
    /// credentials) and read `(redacted)`, which written back keeps the current value.
    pub headers: BTreeMap<String, String>,
    /// Request timeout.
    pub timeout_ms: u64,
    /// Most requests in flight from one broker node.
    pub concurrency: u32,
    /// Whether requests are signed; the secret itself is never shown.
    pub signed: bool,
    /// What a 4xx answer other than 429 does.
    #[schema(value_type = String, pattern = "^(reject|retry)$")]
    pub on_client_error: ClientErrorActionWire,
}

impl From<&PushTarget> for PushTargetView {
    fn from(t: &PushTarget) -> Self {
        PushTargetView {
            url: t.shown_url(),
            method: match t.method {
                PushMethod::Post => PushMethodWire::Post,
                PushMethod::Put => PushMethodWire::Put,
                PushMethod::Patch => PushMethodWire::Patch,
            },
            headers: t
                .headers
                .keys()
                .map(|k| (k.clone(), sluice_core::push::REDACTED.to_owned()))
                .collect(),
            timeout_ms: as_ms(t.timeout),
            concurrency: t.concurrency,
            signed: t.secret.is_some(),
            on_client_error: match t.on_client_error {
                ClientErrorAction::Reject => ClientErrorActionWire::Reject,
                ClientErrorAction::Retry => ClientErrorActionWire::Retry,
            },
        }
    }
}

/// `PUT /v1/queues/{q}`: every field optional; an absent field keeps its current value (or
/// the default on creation). For `dead_letter_queue`, `rate_limit`, `max_in_flight` and
/// `max_depth`, an explicit `null` clears the setting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueConfigRequest {
    /// Lease length, 0 – 12 h. Default 30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility_timeout_ms: Option<i64>,
    /// Deliveries before dead-lettering, 0 (unlimited) – 1000. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_receive_count: Option<u32>,
    /// The DLQ's name, or `null` for none (only with `max_receive_count` 0).
    /// Default `<name>.dlq`, created with the queue.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub dead_letter_queue: Option<Option<String>>,
    /// First retry delay after a nack, 0 – 12 h. Default 1 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_base_ms: Option<i64>,
    /// Cap on the retry delay, 0 – 12 h. Default 15 min.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_max_ms: Option<i64>,
    /// Default delivery delay of a sent message, 0 – 7 days. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// How long a message may stay before it expires, 1 min – 30 days. Default 4 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<i64>,
    /// Largest body accepted, 1 B – 16 MiB. Default 256 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<u32>,
    /// How long a `dedup_id` is remembered, 0 – 24 h. Default 5 min.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_window_ms: Option<i64>,
    /// Most messages in flight across all consumers (1 – 1,000,000), or `null` for no limit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<u32>)]
    pub max_in_flight: Option<Option<u32>>,
    /// Backpressure: most messages visible + delayed + in flight (1 – 1,000,000,000), or
    /// `null` for no limit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<u64>)]
    pub max_depth: Option<Option<u64>>,
    /// Delivery rate limit across all consumers, or `null` for none.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<RateLimitWire>)]
    pub rate_limit: Option<Option<RateLimitWire>>,
    /// How long completed records and results are kept, 0 – 7 days. Default 1 h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_ttl_ms: Option<i64>,
    /// A paused queue accepts sends and delivers nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Deliver the queue's messages to an HTTP endpoint, or `null` to stop pushing. The
    /// object replaces the current target whole (except an absent `secret`, which is kept).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<PushTargetRequest>)]
    pub push: Option<Option<PushTargetRequest>>,
    /// How many messages of one FIFO message group may be in flight at once, 1 – 1000: the
    /// group's first this many waiting messages, in send order. Default 1 (strict order).
    /// Messages without a group are not limited by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_in_flight_per_group: Option<u32>,
    /// How long a receive that names no `wait_ms` waits for a message, 0 – 30 s (long
    /// polling by default). Default 0: answer at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_wait_ms: Option<i64>,
    /// Whether a message sent without a `dedup_id` takes the SHA-256 of its body as one, so
    /// the same body sent twice within `dedup_window_ms` is stored once. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_dedup: Option<bool>,
    /// Labels for the people who run the queue (owner, team, cost centre): at most 50, keys
    /// of 1 – 128 characters, values of at most 256. Replaces the queue's tags whole; `{}`
    /// removes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// An adaptive delivery rate learned from congestion nacks, or `null` for none:
    /// `{"min_per_min", "max_per_min", "signal": "retry_after" | {"errors": [..]},
    /// "window_ms", "increase_per_min", "decrease"}`. `rate_limit` stays a ceiling.
    /// Replaces the current setting whole.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub adaptive: Option<Option<AdaptiveRate>>,
    /// A circuit breaker, or `null` for none: `{"failure_share", "window_ms", "min_calls",
    /// "probe_every_ms", "probes", "scope", "key_idle_ms"}`. While it is open or half-open a
    /// nack does not spend the message's attempt. With `"scope": "key"` each message key has
    /// its own. Replaces the current setting whole.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub breaker: Option<Option<BreakerConfig>>,
    /// The priority of messages sent without one, 0 – 9 (9 most urgent). Default 4.
    /// Changing it re-ranks the waiting messages that named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 9)]
    pub default_priority: Option<u8>,
    /// Fairness weights by key pattern (`*` any run of characters, `?` any one), 1 – 1000
    /// each, at most 100 patterns: a key of weight 3 is delivered three times as often as one
    /// of weight 1 while both have messages waiting. A key takes its own entry, else the
    /// longest pattern that matches it, else 1. Replaces the weights whole; `{}` removes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_weights: Option<BTreeMap<String, u32>>,
    /// What each key may have at once and how fast, or `null` for no limits:
    /// `{"max_in_flight": 2, "rate_limit": {"limit": 60, "period_ms": 60000},
    /// "overrides": {"vip-*": {"max_in_flight": 10}}}` (each `max_in_flight` 1 – 1,000,000,
    /// each `rate_limit` as the queue's, `burst` included; at most 100 override patterns; a
    /// key takes its own entry whole, else the longest pattern that matches it, else the
    /// defaults; messages without a key are one key). A key at its limit waits and never
    /// holds other keys back. Replaces the setting whole.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub key_limits: Option<Option<sluice_core::fair::KeyLimits>>,
}

impl QueueConfigRequest {
    /// The core patch this request asks for. Ranges are checked by the store (which knows the
    /// current config); this refuses what cannot even be expressed (negative durations, bad
    /// queue names).
    ///
    /// # Errors
    /// `InvalidArgument` naming the field.
    pub fn to_patch(&self) -> Result<QueueConfigPatch, StoreError> {
        let rate_limit = match self.rate_limit {
            None => None,
            Some(None) => Some(None),
            Some(Some(r)) => Some(Some(RateLimit {
                limit: r.limit,
                period: millis("rate_limit.period_ms", r.period_ms)?,
                burst: r.burst,
            })),
        };
        let dead_letter_queue = match &self.dead_letter_queue {
            None => None,
            Some(None) => Some(None),
            Some(Some(n)) => Some(Some(queue_name("dead_letter_queue", n.clone())?)),
        };
        Ok(QueueConfigPatch {
            visibility_timeout: opt_millis("visibility_timeout_ms", self.visibility_timeout_ms)?,
            max_receive_count: self.max_receive_count,
            dead_letter_queue,
            backoff_base: opt_millis("backoff_base_ms", self.backoff_base_ms)?,
            backoff_max: opt_millis("backoff_max_ms", self.backoff_max_ms)?,
            delay: opt_millis("delay_ms", self.delay_ms)?,
            retention: opt_millis("retention_ms", self.retention_ms)?,
            max_message_bytes: self.max_message_bytes,
            dedup_window: opt_millis("dedup_window_ms", self.dedup_window_ms)?,
            rate_limit,
            max_in_flight: self.max_in_flight,
            max_depth: self.max_depth,
            result_ttl: opt_millis("result_ttl_ms", self.result_ttl_ms)?,
            paused: self.paused,
            push: match &self.push {
                None => None,
                Some(None) => Some(None),
                Some(Some(p)) => Some(Some(p.to_patch()?)),
            },
            max_in_flight_per_group: self.max_in_flight_per_group,
            receive_wait: opt_millis("receive_wait_ms", self.receive_wait_ms)?,
            content_dedup: self.content_dedup,
            tags: self.tags.clone(),
            adaptive: self.adaptive.clone(),
            breaker: self.breaker.clone(),
            default_priority: self.default_priority,
            key_weights: self.key_weights.clone(),
            key_limits: self.key_limits.clone(),
        })
    }
}

/// The full configuration of a queue. Its object is accepted as is by `PUT /v1/queues/{q}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueConfigView {
    /// Lease length.
    pub visibility_timeout_ms: u64,
    /// Deliveries before dead-lettering; 0 is unlimited.
    pub max_receive_count: u32,
    /// The DLQ, or `null`.
    pub dead_letter_queue: Option<String>,
    /// First retry delay.
    pub backoff_base_ms: u64,
    /// Retry delay cap.
    pub backoff_max_ms: u64,
    /// Default delivery delay.
    pub delay_ms: u64,
    /// Retention.
    pub retention_ms: u64,
    /// Largest body.
    pub max_message_bytes: u32,
    /// Dedup window.
    pub dedup_window_ms: u64,
    /// In-flight limit, or `null`.
    pub max_in_flight: Option<u32>,
    /// Depth limit, or `null`.
    pub max_depth: Option<u64>,
    /// Delivery rate limit, or `null`.
    pub rate_limit: Option<RateLimitWire>,
    /// How long completed records are kept.
    pub result_ttl_ms: u64,
    /// Paused.
    pub paused: bool,
    /// The push target, or `null` when consumers receive.
    pub push: Option<PushTargetView>,
    /// Messages of one FIFO message group that may be in flight at once (1 – 1000).
    #[serde(default = "one")]
    #[schema(minimum = 1, maximum = 1000, default = 1)]
    pub max_in_flight_per_group: u32,
    /// The wait of a receive that names none.
    #[serde(default)]
    pub receive_wait_ms: u64,
    /// Whether a body is its own dedup id when none is given.
    #[serde(default)]
    pub content_dedup: bool,
    /// The queue's tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// The adaptive delivery rate, absent when the queue has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub adaptive: Option<AdaptiveRate>,
    /// The circuit breaker, absent when the queue has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub breaker: Option<BreakerConfig>,
    /// The priority of messages sent without one (0 – 9).
    #[serde(default = "crate::receive::default_priority")]
    #[schema(minimum = 0, maximum = 9, default = 4)]
    pub default_priority: u8,
    /// Fairness weights by key pattern; keys no pattern matches weigh 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_weights: BTreeMap<String, u32>,
    /// What each key may have at once, absent when the queue has no per-key limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub key_limits: Option<sluice_core::fair::KeyLimits>,
}

/// What a view from a broker without FIFO groups means: one at a time.
fn one() -> u32 {
    sluice_core::config::DEFAULT_IN_FLIGHT_PER_GROUP
}

impl From<&QueueConfig> for QueueConfigView {
    fn from(c: &QueueConfig) -> Self {
        QueueConfigView {
            visibility_timeout_ms: as_ms(c.visibility_timeout),
            max_receive_count: c.max_receive_count,
            dead_letter_queue: c.dead_letter_queue.as_ref().map(|q| q.to_string()),
            backoff_base_ms: as_ms(c.backoff_base),
            backoff_max_ms: as_ms(c.backoff_max),
            delay_ms: as_ms(c.delay),
            retention_ms: as_ms(c.retention),
            max_message_bytes: c.max_message_bytes,
            dedup_window_ms: as_ms(c.dedup_window),
            max_in_flight: c.max_in_flight,
            max_depth: c.max_depth,
            rate_limit: c.rate_limit.map(|r| RateLimitWire {
                limit: r.limit,
                period_ms: i64::try_from(r.period.as_millis()).unwrap_or(i64::MAX),
                burst: r.burst,
            }),
            result_ttl_ms: as_ms(c.result_ttl),
            paused: c.paused,
            push: c.push.as_ref().map(PushTargetView::from),
            max_in_flight_per_group: c.max_in_flight_per_group,
            receive_wait_ms: as_ms(c.receive_wait),
            content_dedup: c.content_dedup,
            tags: c.tags.clone(),
            adaptive: c.adaptive.clone(),
            breaker: c.breaker.clone(),
            default_priority: c.default_priority,
            key_weights: c.key_weights.clone(),
            key_limits: c.key_limits.clone(),
        }
    }
}

/// A queue: its name, creation time and full configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueView {
    /// The queue's name.
    pub name: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Its configuration.
    pub config: QueueConfigView,
    /// Advice about the configuration just written (only on `PUT`), e.g. unlimited attempts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl From<&QueueInfo> for QueueView {
    fn from(q: &QueueInfo) -> Self {
        QueueView {
            name: q.name.to_string(),
            created_at: rfc3339(q.created_at),
            config: QueueConfigView::from(&q.config),
            warnings: Vec::new(),
        }
    }
}

/// `GET /v1/queues?prefix=&limit=&cursor=`: one page of the queues, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QueueListQuery {
    /// Only queues whose name starts with this (letters, digits, `_`, `.` and `-`).
    pub prefix: Option<String>,
    /// Page size, 1 – 1000. Default 1000.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page (opaque); leave it out to start at the first
    /// queue.
    pub cursor: Option<String>,
}

impl QueueListQuery {
    /// The core request, validated.
    ///
    /// # Errors
    /// `InvalidArgument` for a limit, prefix or cursor that is not valid.
    pub fn to_core(&self) -> Result<sluice_core::store::QueuePageRequest, StoreError> {
        let req = sluice_core::store::QueuePageRequest {
            prefix: self.prefix.clone().unwrap_or_default(),
            limit: self.limit.unwrap_or(sluice_core::store::DEFAULT_QUEUE_PAGE),
            cursor: self.cursor.clone(),
        };
        req.range()?;
        Ok(req)
    }
}

/// `GET /v1/queues`: one page of queues, by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueueList {
    /// The queues of this page the caller may see, in name order (bytewise).
    pub queues: Vec<QueueView>,
    /// Pass as `cursor` for the next page while more queues remain; `null` at the end.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// `POST /v1/queues/{q}/purge`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PurgeResponse {
    /// How many messages were removed.
    pub purged: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_and_negative_durations_are_refused() {
        assert!(
            serde_json::from_str::<QueueConfigRequest>(r#"{"visiblity_timeout_ms": 1}"#).is_err()
        );
        let req: QueueConfigRequest =
            serde_json::from_str(r#"{"visibility_timeout_ms": -1}"#).unwrap();
        assert!(req.to_patch().is_err());
        let req: QueueConfigRequest =
            serde_json::from_str(r#"{"dead_letter_queue": null, "max_depth": null}"#).unwrap();
        let p = req.to_patch().unwrap();
        assert_eq!(p.dead_letter_queue, Some(None));
        assert_eq!(p.max_depth, Some(None));
        assert_eq!(p.max_in_flight, None);
    }

    #[test]
    fn adaptive_and_breaker_are_set_by_object_cleared_by_null_and_shown_when_set() {
        let req: QueueConfigRequest = serde_json::from_str(
            r#"{"adaptive": {"min_per_min": 10, "max_per_min": 600, "signal": {"errors": ["429"]}},
                "breaker": {"failure_share": 0.5, "probes": 2}}"#,
        )
        .unwrap();
        let p = req.to_patch().unwrap();
        let a = p.adaptive.clone().flatten().expect("adaptive");
        assert_eq!((a.min_per_min, a.max_per_min), (10, 600));
        let b = p.breaker.clone().flatten().expect("breaker");
        assert_eq!((b.failure_share_permille, b.probes), (500, 2));
        let name = sluice_core::QueueName::new("jobs").unwrap();
        let c = QueueConfig::defaults_for(&name).apply(&name, &p).unwrap();
        let view = serde_json::to_value(QueueConfigView::from(&c)).unwrap();
        assert_eq!(view["adaptive"]["signal"]["errors"][0], "429");
        assert_eq!(view["breaker"]["failure_share"], 0.5);
        // A view is accepted back as a request.
        let again: QueueConfigRequest = serde_json::from_value(view).unwrap();
        assert_eq!(again.adaptive, Some(Some(a)));

        let off: QueueConfigRequest =
            serde_json::from_str(r#"{"adaptive": null, "breaker": null}"#).unwrap();
        let p = off.to_patch().unwrap();
        assert_eq!((p.adaptive, p.breaker), (Some(None), Some(None)));
        let plain =
            serde_json::to_value(QueueConfigView::from(&QueueConfig::defaults_for(&name))).unwrap();
        assert!(plain.get("adaptive").is_none() && plain.get("breaker").is_none());
    }
}
