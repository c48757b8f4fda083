//! `/metrics` in the Prometheus text format.
//!
//! Gauges and event counters are read from the store at scrape time, so every broker node
//! reports the same queue-level truth. The two histograms are observed by this node as it
//! serves: queue wait (enqueue to first delivery) at receive, and processing time (delivery to
//! acknowledgement) at ack, for acks of deliveries this node handed out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sluice_core::{Clock, Delivery, MessageId, QueueName, Store, SystemClock};

/// Labels of every per-queue series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// The queue.
    pub queue: String,
}

/// Labels of the series of one key of a queue; the implicit key (messages sent without one) is
/// `key=""`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyLabel {
    /// The queue.
    pub queue: String,
    /// The key.
    pub key: String,
}

/// Labels of the breaker state set: one series per state, 1 for the current one.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BreakerStateLabel {
    /// The queue.
    pub queue: String,
    /// `closed`, `open` or `half_open`.
    pub state: &'static str,
}

/// Labels of the push request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabel {
    /// The queue whose target was called.
    pub queue: String,
    /// How the request ended (see [`PushOutcome`](crate::jobs::push::PushOutcome)).
    pub outcome: &'static str,
}

/// Labels of the connection series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    /// The listener: `http`, `frames` or `sqs`.
    pub listener: &'static str,
}

/// Deliveries remembered for processing-time observations; beyond this the oldest are
/// forgotten (their acks are then not observed).
const REMEMBERED_DELIVERIES: usize = 100_000;

fn seconds_histogram() -> Histogram {
    // 1 ms to about 4.6 hours.
    Histogram::new(exponential_buckets(0.001, 2.0, 24))
}

/// Which queues get series of their own in `/metrics` (gauges, counters and histograms);
/// totals over every queue are always there. With thousands of queues a scrape of every
/// queue's series is megabytes that a monitoring system must store; this keeps it bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsScope {
    /// Queue name patterns (`*` matches any run of characters, e.g. `orders*`).
    pub queues: Vec<String>,
    /// Most queues with series of their own, the first in name order among those matching.
    pub max_queues: usize,
    /// Keys of each such queue with series of their own (`sluice_key_*`), the most waiting
    /// first; 0 for none. A queue without keys costs nothing more; a queue with keys costs a
    /// keys listing per scrape.
    pub top_keys: usize,
}

/// Default [`MetricsScope::max_queues`].
pub const DEFAULT_METRICS_MAX_QUEUES: usize = 1_000;
/// Default [`MetricsScope::top_keys`].
pub const DEFAULT_METRICS_TOP_KEYS: usize = 5;

impl Default for MetricsScope {
    fn default() -> Self {
        MetricsScope {
            queues: vec!["*".to_owned()],
            max_queues: DEFAULT_METRICS_MAX_QUEUES,
            top_keys: DEFAULT_METRICS_TOP_KEYS,
        }
    }
}

impl MetricsScope {
    /// True when `queue` matches one of the patterns.
    pub fn selects(&self, queue: &str) -> bool {
        self.queues
            .iter()
            .any(|p| crate::auth::glob_match(p, queue))
    }
}

/// The histograms this node observes.
pub struct Metrics {
    scope: MetricsScope,
    /// The queues with histograms of their own (at most `scope.max_queues`, the first to
    /// have traffic on this node among those the patterns select).
    histogram_queues: std::sync::RwLock<std::collections::HashSet<String>>,
    queue_wait: Family<QueueLabel, Histogram>,
    processing: Family<QueueLabel, Histogram>,
    /// When each delivery this node handed out left it; ids are unique across queues.
    leased: Mutex<HashMap<MessageId, Instant>>,
    push_requests: Family<PushLabel, Counter>,
    push_latency: Family<QueueLabel, Histogram>,
    connections_open: Family<ListenerLabel, Gauge>,
    connections_refused: Family<ListenerLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(MetricsScope::default())
    }
}

impl Metrics {
    /// Metrics with series for the queues `scope` selects.
    pub fn new(scope: MetricsScope) -> Self {
        Metrics {
            scope,
            histogram_queues: std::sync::RwLock::default(),
            queue_wait: Family::new_with_constructor(seconds_histogram),
            processing: Family::new_with_constructor(seconds_histogram),
            leased: Mutex::new(HashMap::new()),
            push_requests: Family::default(),
            // 250 µs to about 2 minutes.
            push_latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.00025, 2.0, 20))
            }),
            connections_open: Family::default(),
            connections_refused: Family::default(),
        }
    }

    /// Observes deliveries just handed out. One lookup of the queue's series and one clock
    /// reading per call, not per message: a receive of a hundred pays for one.
    pub fn delivered(&self, queue: &QueueName, deliveries: &[Delivery]) {
        if deliveries.is_empty() {
            return;
        }
        if self.histograms_for(queue) {
            let now = SystemClock.now();
            let label = QueueLabel {
                queue: queue.to_string(),
            };
            let wait = self.queue_wait.get_or_create(&label);
            for d in deliveries.iter().filter(|d| d.receive_count == 1) {
                wait.observe(now.since(d.enqueued_at).as_secs_f64());
            }
        }
        let handed_out = Instant::now();
        let mut leased = self.leased.lock().unwrap_or_else(|p| p.into_inner());
        if leased.len() + deliveries.len() > REMEMBERED_DELIVERIES {
            leased.clear();
        }
        leased.extend(deliveries.iter().map(|d| (d.id, handed_out)));
    }

    /// True when `queue` has (or may now get) histograms of its own.
    fn histograms_for(&self, queue: &QueueName) -> bool {
        if !self.scope.selects(queue.as_str()) {
            return false;
        }
        // Every receive and ack asks: a shared read answers the queues already known, and only
        // a queue's first observation takes the write lock.
        let known = self
            .histogram_queues
            .read()
            .unwrap_or_else(|p| p.into_inner());
        if known.contains(queue.as_str()) {
            return true;
        }
        drop(known);
        let mut known = self
            .histogram_queues
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if known.contains(queue.as_str()) {
            return true;
        }
        if known.len() >= self.scope.max_queues {
            return false;
        }
        known.insert(queue.to_string());
        true
    }

    /// Observes the acknowledgements that took, on `queue`, of deliveries this node handed
    /// out; others are not observed.
    pub fn acked(&self, queue: &QueueName, ids: impl IntoIterator<Item = MessageId>) {
        let since: Vec<Instant> = {
            let mut leased = self.leased.lock().unwrap_or_else(|p| p.into_inner());
            ids.into_iter()
                .filter_map(|id| leased.remove(&id))
                .collect()
        };
        if since.is_empty() || !self.histograms_for(queue) {
            return;
        }
        let processing = self.processing.get_or_create(&QueueLabel {
            queue: queue.to_string(),
        });
        for t in since {
            processing.observe(t.elapsed().as_secs_f64());
        }
    }

    /// Counts one push request to `queue`'s target and observes how long it took.
    pub fn pushed(&self, queue: &QueueName, outcome: crate::jobs::push::PushOutcome, seconds: f64) {
        let q = queue.to_string();
        self.push_requests
            .get_or_create(&PushLabel {
                queue: q.clone(),
                outcome: outcome.as_str(),
            })
            .inc();
        self.push_latency
            .get_or_create(&QueueLabel { queue: q })
            .observe(seconds);
    }

    /// Push requests to `queue`'s target this node made that ended with `outcome`.
    pub fn push_count(&self, queue: &QueueName, outcome: crate::jobs::push::PushOutcome) -> u64 {
        self.push_requests
            .get_or_create(&PushLabel {
                queue: queue.to_string(),
                outcome: outcome.as_str(),
            })
            .get()
    }

    /// The admission gate of the listener named `listener`, of at most `max` connections,
    /// reporting its open and refused connections on `/metrics` (both series appear at 0
    /// from the start).
    pub fn gate(&self, listener: &'static str, max: usize) -> crate::listen::connections::Gate {
        let label = ListenerLabel { listener };
        let open = self.connections_open.get_or_create(&label).clone();
        let refused = self.connections_refused.get_or_create(&label).clone();
        crate::listen::connections::Gate::new(listener, max, open, refused)
    }

    /// Forgets a delivery that ended another way (nack, reject, move).
    pub fn settled(&self, id: MessageId) {
        self.leased
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Renders every metric in the Prometheus text format: totals over every queue, and series
    /// of their own for the queues the scope selects.
    ///
    /// # Errors
    /// The store's error when queues cannot be listed.
    pub async fn render(&self, store: &dyn Store) -> Result<String, sluice_core::StoreError> {
        self.render_for(store, &crate::auth::Caller::anybody())
            .await
    }

    /// [`Metrics::render`] as `caller` may see it: a key that does not cover every queue gets
    /// the series of the queues it covers, and totals (`sluice_queues`, `all_queues_*`) over
    /// those alone, as every listing is filtered; the node's connection series stay.
    ///
    /// # Errors
    /// The store's error when queues cannot be listed.
    pub async fn render_for(
        &self,
        store: &dyn Store,
        caller: &crate::auth::Caller,
    ) -> Result<String, sluice_core::StoreError> {
        let out = self.render_queues(store, &|q| caller.sees(q)).await?;
        Ok(if caller.covers_all() {
            out
        } else {
            only_seen(&out, &|q| caller.sees(q))
        })
    }

    // Long because the registry is built afresh for each scrape: every family is registered with
    // its help text, and the one walk over the queues' stats fills them, so the families stay
    // locals of that walk.
    async fn render_queues(
        &self,
        store: &dyn Store,
        sees: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<String, sluice_core::StoreError> {
        let mut registry = Registry::with_prefix("sluice");
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let f = Family::<QueueLabel, Gauge>::default();
            registry.register(name, help, f.clone());
            f
        };
        let visible = gauge(
            &mut registry,
            "queue_visible",
            "Messages ready to be received (the backlog)",
        );
        let delayed = gauge(
            &mut registry,
            "queue_delayed",
            "Messages waiting for a delay or retry backoff",
        );
        let in_flight = gauge(
            &mut registry,
            "queue_in_flight",
            "Messages leased to consumers",
        );
        let dlq = gauge(
            &mut registry,
            "queue_dead_letter_depth",
            "Messages in the queue's dead-letter queue",
        );
        let age = Family::<QueueLabel, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "queue_oldest_visible_age_seconds",
            "How long the longest-waiting visible message has been ready",
            age.clone(),
        );
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let f = Family::<QueueLabel, Counter>::default();
            registry.register(name, help, f.clone());
            f
        };
        let sent = counter(&mut registry, "messages_sent", "Messages stored by send");
        let received = counter(&mut registry, "messages_received", "Deliveries");
        let acked = counter(&mut registry, "messages_acked", "Acknowledgements");
        let nacked = counter(&mut registry, "messages_nacked", "Nacks");
        let dead = counter(
            &mut registry,
            "messages_dead_lettered",
            "Messages sent to the dead-letter queue",
        );
        let redriven = counter(
            &mut registry,
            "messages_redriven",
            "Messages redriven into the queue",
        );
        let expired = counter(
            &mut registry,
            "messages_expired",
            "Messages that outlived retention",
        );
        registry.register(
            "queue_wait_seconds",
            "Time from enqueue to first delivery, as observed by this broker node",
            self.queue_wait.clone(),
        );
        registry.register(
            "processing_seconds",
            "Time from delivery to acknowledgement, as observed by this broker node",
            self.processing.clone(),
        );
        registry.register(
            "push_requests",
            "Push requests to queues' targets made by this broker node, by outcome",
            self.push_requests.clone(),
        );
        registry.register(
            "push_duration_seconds",
            "Time from sending a push request to its answer (or its failure), as observed by this broker node",
            self.push_latency.clone(),
        );
        registry.register(
            "connections_open",
            "Connections open on each listener of this broker node",
            self.connections_open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections this broker node closed at once because the listener had max_connections open",
            self.connections_refused.clone(),
        );
        let all = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::<i64>::default();
            registry.register(name, help, g.clone());
            g
        };
        let queues = all(&mut registry, "queues", "Queues on the broker");
        let without_series = all(
            &mut registry,
            "queues_without_series",
            "Queues left out of the per-queue series by metrics_queues or metrics_max_queues (they count in the all_queues totals)",
        );
        let all_visible = all(
            &mut registry,
            "all_queues_visible",
            "Visible messages over every queue",
        );
        let all_delayed = all(
            &mut registry,
            "all_queues_delayed",
            "Delayed messages over every queue",
        );
        let all_in_flight = all(
            &mut registry,
            "all_queues_in_flight",
            "Leased messages over every queue",
        );
        let oldest = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "all_queues_oldest_visible_age_seconds",
            "The longest any visible message of any queue has been ready",
            oldest.clone(),
        );
        let total = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::<u64>::default();
            registry.register(name, help, c.clone());
            c
        };
        let totals = [
            total(
                &mut registry,
                "all_queues_messages_sent",
                "Messages stored by send, over every queue",
            ),
            total(
                &mut registry,
                "all_queues_messages_acked",
                "Acknowledgements, over every queue",
            ),
            total(
                &mut registry,
                "all_queues_messages_dead_lettered",
                "Messages dead-lettered, over every queue",
            ),
        ];
        let active_keys = gauge(
            &mut registry,
            "queue_active_keys",
            "Keys with messages waiting or in flight (messages without a key not counted)",
        );
        let governed = FlowFamilies::register(&mut registry);
        let keyed_families = KeyFamilies::register(&mut registry);
        let mut keyed: Vec<QueueName> = Vec::new();
        let (mut count, mut shown, mut left_out) = (0i64, 0usize, 0i64);
        let mut oldest_age = 0f64;
        let mut walk = crate::walk::StatsWalk::new(store);
        while let Some(page) = walk.next_page().await? {
            for (q, s) in page {
                if !sees(q.name.as_str()) {
                    continue;
                }
                count += 1;
                all_visible.inc_by(i64::try_from(s.visible).unwrap_or(i64::MAX));
                all_delayed.inc_by(i64::try_from(s.delayed).unwrap_or(i64::MAX));
                all_in_flight.inc_by(i64::try_from(s.in_flight).unwrap_or(i64::MAX));
                oldest_age = oldest_age.max(s.oldest_visible_age.as_secs_f64());
                for (c, v) in
                    totals
                        .iter()
                        .zip([s.totals.sent, s.totals.acked, s.totals.dead_lettered])
                {
                    c.inc_by(v);
                }
                if shown >= self.scope.max_queues || !self.scope.selects(q.name.as_str()) {
                    left_out += 1;
                    continue;
                }
                shown += 1;
                let l = QueueLabel {
                    queue: q.name.to_string(),
                };
                let set = |f: &Family<QueueLabel, Gauge>, v: u64| {
                    f.get_or_create(&l)
                        .set(i64::try_from(v).unwrap_or(i64::MAX));
                };
                set(&visible, s.visible);
                set(&delayed, s.delayed);
                set(&in_flight, s.in_flight);
                set(&dlq, s.dead_letter_depth);
                set(&active_keys, s.active_keys);
                if s.active_keys > 0 && self.scope.top_keys > 0 {
                    keyed.push(q.name.clone());
                }
                age.get_or_create(&l)
                    .set(s.oldest_visible_age.as_secs_f64());
                let t = s.totals;
                for (f, v) in [
                    (&sent, t.sent),
                    (&received, t.received),
                    (&acked, t.acked),
                    (&nacked, t.nacked),
                    (&dead, t.dead_lettered),
                    (&redriven, t.redriven),
                    (&expired, t.expired),
                ] {
                    f.get_or_create(&l).inc_by(v);
                }
                if let Some(flow) = &s.flow {
                    governed.observe(&l, flow);
                }
                if let Some(k) = &s.key_flows {
                    let breakers = sluice_core::adaptive::key_breaker(&q.config).is_some();
                    governed.observe_keys(&l, k, breakers, self.scope.top_keys);
                }
            }
        }
        for q in &keyed {
            keyed_families.observe(store, q, self.scope.top_keys).await;
        }
        queues.set(count);
        without_series.set(left_out);
        oldest.set(oldest_age);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).map_err(|e| {
            sluice_core::StoreError::unavailable(format!("cannot render metrics: {e}"))
        })?;
        Ok(out)
    }
}

/// The lines of `text` (the Prometheus text format) without the samples of queues `sees`
/// refuses: those of the histograms and counters this node keeps for every queue it served.
/// Queue names hold no quote, comma or brace, so a `queue="…"` label is read off as it is.
fn only_seen(text: &str, sees: &dyn Fn(&str) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if queue_label(line).is_none_or(sees) {
            out.push_str(line);
        }
    }
    out
}

/// The value of the `queue` label of a sample line, if it has one.
fn queue_label(line: &str) -> Option<&str> {
    if line.starts_with('#') {
        return None;
    }
    let open = line.find('{')?;
    let close = open + line[open..].find('}')?;
    line[open + 1..close].split(',').find_map(|pair| {
        pair.trim()
            .strip_prefix("queue=\"")
            .and_then(|v| v.strip_suffix('"'))
    })
}

/// The series of the keys with the most waiting of each queue with keys.
struct KeyFamilies {
    backlog: Family<KeyLabel, Gauge>,
    in_flight: Family<KeyLabel, Gauge>,
    oldest: Family<KeyLabel, Gauge<f64, AtomicU64>>,
    delivered: Family<KeyLabel, Gauge>,
}

impl KeyFamilies {
    fn register(registry: &mut Registry) -> Self {
        let f = KeyFamilies {
            backlog: Family::default(),
            in_flight: Family::default(),
            oldest: Family::default(),
            delivered: Family::default(),
        };
        registry.register(
            "key_backlog",
            "Visible and delayed messages of a key, for the keys with the most waiting (metrics_top_keys)",
            f.backlog.clone(),
        );
        registry.register(
            "key_in_flight",
            "Deliveries of a key in flight, for the keys with the most waiting",
            f.in_flight.clone(),
        );
        registry.register(
            "key_oldest_visible_age_seconds",
            "How long a key's longest-waiting visible message has been ready",
            f.oldest.clone(),
        );
        registry.register(
            "key_delivered_last_minute",
            "A key's deliveries in the last minute, estimated from per-minute counts",
            f.delivered.clone(),
        );
        f
    }

    /// The `top` keys of queue `q` with the most waiting. A queue gone since its stats were
    /// read, or a store that does not answer, leaves its keys out of this scrape.
    async fn observe(&self, store: &dyn Store, q: &QueueName, top: usize) {
        let req = sluice_core::key_stats::KeysRequest {
            order: sluice_core::key_stats::KeyOrder::Backlog,
            limit: u32::try_from(top).unwrap_or(u32::MAX),
            after: None,
        };
        let page = match store.keys(q, req).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(queue = %q, error = %e, "keys of a queue left out of /metrics");
                return;
            }
        };
        let now = sluice_core::SystemClock.now();
        for k in &page.keys {
            let l = KeyLabel {
                queue: q.to_string(),
                key: k
                    .key
                    .as_ref()
                    .map(|k| k.as_str().to_owned())
                    .unwrap_or_default(),
            };
            let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            self.backlog.get_or_create(&l).set(int(k.backlog()));
            self.in_flight.get_or_create(&l).set(int(k.in_flight));
            let age = k
                .oldest_visible_at
                .map_or(0.0, |at| now.since(at).as_secs_f64());
            self.oldest.get_or_create(&l).set(age);
            if let Some(d) = k.delivered_1m {
                self.delivered.get_or_create(&l).set(int(d));
            }
        }
    }
}

/// The series of governed queues: their adaptive rate and circuit breaker, and the keys' own
/// of queues that govern keys one by one.
struct FlowFamilies {
    key_breakers: Family<BreakerStateLabel, Gauge>,
    key_rate: Family<KeyLabel, Gauge>,
    rate: Family<QueueLabel, Gauge>,
    congestion: Family<QueueLabel, Counter>,
    decreases: Family<QueueLabel, Counter>,
    breaker_state: Family<BreakerStateLabel, Gauge>,
    opened: Family<QueueLabel, Counter>,
    open_seconds: Family<QueueLabel, Counter<f64, AtomicU64>>,
}

impl FlowFamilies {
    fn register(registry: &mut Registry) -> Self {
        let f = FlowFamilies {
            key_breakers: Family::default(),
            key_rate: Family::default(),
            rate: Family::default(),
            congestion: Family::default(),
            decreases: Family::default(),
            breaker_state: Family::default(),
            opened: Family::default(),
            open_seconds: Family::default(),
        };
        registry.register(
            "queue_adaptive_rate_per_min",
            "The adaptive delivery rate a governed queue is delivered at now, per minute",
            f.rate.clone(),
        );
        registry.register(
            "queue_adaptive_congestion",
            "Congestion signals (Retry-After or matching nacks) a governed queue observed",
            f.congestion.clone(),
        );
        registry.register(
            "queue_adaptive_decreases",
            "Times a governed queue's adaptive rate was cut",
            f.decreases.clone(),
        );
        registry.register(
            "queue_breaker_state",
            "A queue's circuit breaker state: 1 for the current state (closed, open or half_open), 0 for the others",
            f.breaker_state.clone(),
        );
        registry.register(
            "queue_breaker_opened",
            "Times a queue's circuit breaker opened",
            f.opened.clone(),
        );
        registry.register(
            "queue_breaker_open_seconds",
            "Time a queue's circuit breaker spent open or half-open",
            f.open_seconds.clone(),
        );
        registry.register(
            "queue_keys_breaker",
            "Keys of a queue with per-key breakers (scope key) whose breaker is in each state (closed, open, half_open)",
            f.key_breakers.clone(),
        );
        registry.register(
            "key_adaptive_rate_per_min",
            "The learned rate of a key of a queue with per-key adaptive rates (scope key), for the keys with the highest rates",
            f.key_rate.clone(),
        );
        f
    }

    /// The series of the keys of one queue that governs keys, from its stats: its keys by
    /// breaker state, and the `top` keys' learned rates.
    fn observe_keys(
        &self,
        l: &QueueLabel,
        k: &sluice_core::adaptive::KeyFlowSummary,
        breakers: bool,
        top: usize,
    ) {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        if breakers {
            let closed = k.keys.saturating_sub(k.open + k.half_open);
            for (state, n) in [
                ("closed", closed),
                ("open", k.open),
                ("half_open", k.half_open),
            ] {
                let label = BreakerStateLabel {
                    queue: l.queue.clone(),
                    state,
                };
                self.key_breakers.get_or_create(&label).set(int(n));
            }
        }
        for (key, rate) in k.top_rates.iter().take(top) {
            let label = KeyLabel {
                queue: l.queue.clone(),
                key: key.clone().unwrap_or_default(),
            };
            self.key_rate.get_or_create(&label).set(i64::from(*rate));
        }
    }

    /// The series of one queue, from its stats.
    fn observe(&self, l: &QueueLabel, flow: &sluice_core::adaptive::FlowStats) {
        use sluice_core::adaptive::BreakerState;
        if let Some(a) = &flow.adaptive {
            self.rate.get_or_create(l).set(i64::from(a.rate_per_min));
            self.congestion.get_or_create(l).inc_by(a.congestion_total);
            self.decreases.get_or_create(l).inc_by(a.decreases_total);
        }
        if let Some(b) = &flow.breaker {
            for state in [
                BreakerState::Closed,
                BreakerState::Open,
                BreakerState::HalfOpen,
            ] {
                let label = BreakerStateLabel {
                    queue: l.queue.clone(),
                    state: state.as_str(),
                };
                self.breaker_state
                    .get_or_create(&label)
                    .set(i64::from(b.state == state));
            }
            self.opened.get_or_create(l).inc_by(b.opened_total);
            // Milliseconds to seconds: exact enough for any time a breaker can stay open.
            #[allow(clippy::cast_precision_loss)]
            let seconds = b.open_ms_total as f64 / 1000.0;
            self.open_seconds.get_or_create(l).inc_by(seconds);
        }
    }
}
