//! `GET /v1/queues/{q}/keys`: what each key of a queue holds.

use serde::{Deserialize, Serialize};
use sluice_core::key_stats::{KeyOrder, KeyStats, KeysPage, KeysRequest};
use sluice_core::{QueueConfig, StoreError, Timestamp};
use utoipa::{IntoParams, ToSchema};

/// `GET /v1/queues/{q}/keys?order=&limit=&cursor=`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct KeysQuery {
    /// `backlog` (default: most waiting first), `in_flight` (most in flight first), `oldest`
    /// (longest-waiting visible message first) or `breaker` (keys whose own breaker is open
    /// first, then half-open ones, each by backlog).
    #[param(inline)]
    pub order: Option<KeyOrderView>,
    /// Page size, 1 – 1000. Default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page, of a listing in the same order (a cursor of
    /// another order starts at the first key).
    #[param(pattern = r"^[bfok]\.-?[0-9]{1,18}\.(-|([0-9a-f]{2}){1,512})$")]
    pub cursor: Option<String>,
}

/// What a keys listing is ordered by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyOrderView {
    /// Most messages waiting (visible and delayed) first.
    #[default]
    Backlog,
    /// Most deliveries in flight first.
    InFlight,
    /// The longest-waiting visible message first; keys with nothing visible last.
    Oldest,
    /// Keys whose own breaker is open first, then half-open ones, each by backlog.
    Breaker,
}

impl From<KeyOrderView> for KeyOrder {
    fn from(o: KeyOrderView) -> Self {
        match o {
            KeyOrderView::Backlog => KeyOrder::Backlog,
            KeyOrderView::InFlight => KeyOrder::InFlight,
            KeyOrderView::Oldest => KeyOrder::Oldest,
            KeyOrderView::Breaker => KeyOrder::Breaker,
        }
    }
}

impl KeysQuery {
    /// The store's request.
    ///
    /// # Errors
    /// `InvalidArgument` for a limit out of range or a malformed cursor.
    pub fn to_core(&self) -> Result<KeysRequest, StoreError> {
        let limit = self.limit.unwrap_or(100);
        let req = KeysRequest {
            order: self.order.unwrap_or_default().into(),
            limit,
            after: self.cursor.as_deref().map(str::parse).transpose()?,
        };
        sluice_core::key_stats::validate(&req)?;
        Ok(req)
    }
}

/// One page of a queue's keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KeysResponse {
    /// The keys, in the order asked.
    pub keys: Vec<KeyView>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Named keys with messages waiting or in flight (the implicit key not counted).
    pub active_keys: u64,
}

/// What one key holds, and the limits the queue sets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KeyView {
    /// The key; `null` for the messages sent without one, which share one implicit key.
    #[schema(min_length = 1, max_length = 128)]
    pub key: Option<String>,
    /// Visible and delayed messages.
    pub backlog: u64,
    /// Ready to be received now (or due and waiting for their FIFO group).
    pub visible: u64,
    /// Waiting for a delay or backoff.
    pub delayed: u64,
    /// Deliveries in flight.
    pub in_flight: u64,
    /// How long its longest-waiting visible message has been ready (0 when none is).
    pub oldest_visible_age_ms: u64,
    /// Deliveries in the last minute, estimated from per-minute counts (between this
    /// minute's count and the last two minutes' together); absent where they are not counted
    /// (on PostgreSQL, messages without a key on a queue that has not delivered by key in the
    /// last two minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_1m: Option<u64>,
    /// Its weight in the round-robin (`key_weights`; 1 unless a pattern says otherwise).
    pub weight: u32,
    /// Its most deliveries in flight at once under `key_limits`; absent when unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Its most deliveries per period under `key_limits`; absent when unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<crate::queues::RateLimitWire>,
    /// Its own adaptive rate and breaker, on a queue whose `adaptive` or `breaker` has
    /// `"scope": "key"`; absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<KeyFlowView>,
}

/// A key's own adaptive rate and breaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KeyFlowView {
    /// Its governed rate, per minute (with a per-key adaptive rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_min: Option<u32>,
    /// Its deliveries are held until then (RFC 3339): its dependency's Retry-After.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<String>,
    /// Its breaker: `closed`, `open` or `half_open` (with a per-key breaker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub breaker: Option<sluice_core::adaptive::BreakerState>,
    /// Since when the breaker is in that state (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_since: Option<String>,
    /// Whether an operator forced the breaker open.
    #[serde(default)]
    pub forced: bool,
}

impl From<&sluice_core::adaptive::KeyFlowStats> for KeyFlowView {
    fn from(f: &sluice_core::adaptive::KeyFlowStats) -> Self {
        KeyFlowView {
            rate_per_min: f.rate_per_min,
            hold_until: f.hold_until.map(sluice_core::time::rfc3339),
            breaker: f.breaker,
            breaker_since: f.breaker_since.map(sluice_core::time::rfc3339),
            forced: f.forced,
        }
    }
}

impl KeysResponse {
    /// The page `page` of a queue configured with `cfg`, at `now`.
    pub fn new(page: &KeysPage, cfg: &QueueConfig, now: Timestamp) -> Self {
        KeysResponse {
            keys: page
                .keys
                .iter()
                .map(|k| KeyView::new(k, cfg, now))
                .collect(),
            next_cursor: page.next.as_ref().map(ToString::to_string),
            active_keys: page.active_keys,
        }
    }
}

impl KeyView {
    /// The view of `k` in a queue configured with `cfg`, at `now`.
    pub fn new(k: &KeyStats, cfg: &QueueConfig, now: Timestamp) -> Self {
        let name = k.key.as_ref().map(|k| k.as_str());
        KeyView {
            key: name.map(str::to_owned),
            backlog: k.backlog(),
            visible: k.visible,
            delayed: k.delayed,
            in_flight: k.in_flight,
            oldest_visible_age_ms: k.oldest_visible_at.map_or(0, |at| {
                u64::try_from(now.since(at).as_millis()).unwrap_or(u64::MAX)
            }),
            delivered_1m: k.delivered_1m,
            weight: sluice_core::fair::weight_of(&cfg.key_weights, name),
            max_in_flight: cfg
                .key_limits
                .as_ref()
                .and_then(|l| l.of(name).max_in_flight),
            rate_limit: cfg
                .key_limits
                .as_ref()
                .and_then(|l| l.of(name).rate_limit)
                .map(|r| crate::queues::RateLimitWire {
                    limit: r.limit,
                    period_ms: i64::try_from(r.period.as_millis()).unwrap_or(i64::MAX),
                    burst: r.burst,
                }),
            flow: k.flow.as_ref().map(KeyFlowView::from),
        }
    }
}
