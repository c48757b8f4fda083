//! What each key of a queue holds, in the model: the numbers the keys listing and stats'
//! `active_keys` must show.

use std::collections::BTreeMap;

use sluice_core::fair::MessageKey;
use sluice_core::key_stats::KeyStats;
use sluice_core::time::Timestamp;

use super::{Model, Place};

/// The longest a delivery counts in an engine's estimate of a key's last minute: the
/// minute it was made in and the next.
const TALLY_SPAN_MS: i64 = 120_000;

impl Model {
    /// Each key of queue `q` with messages waiting or in flight (the implicit key `None`),
    /// `delivered_1m` left out: engines estimate it, [`Model::delivered_bound`] bounds it; on
    /// a queue whose breaker is per key, its breaker (open while forced), since when left out;
    /// and on a queue whose adaptive rate is per key, its rate.
    pub fn key_stats(&self, q: &str, now: i64) -> Vec<KeyStats> {
        use sluice_core::adaptive::{BreakerState, FlowConfig, FlowState, KeyFlowStats};
        let config = &self.queues[q].config;
        let per_key = sluice_core::adaptive::key_breaker(config).is_some();
        let rates = sluice_core::adaptive::key_adaptive(config).is_some();
        let flow = |key: Option<&str>| {
            (per_key || rates).then(|| {
                let forced = per_key && self.key_forced(q, key);
                // No nack here is congestion: a key's rate is a fresh state's, pinned at
                // its bounds, under the ceiling of the queue's and the key's rate limits.
                let cfg = FlowConfig::of_key(config, key);
                let rate_per_min = rates
                    .then(|| FlowState::for_key(cfg, Timestamp(now)))
                    .flatten()
                    .and_then(|s| s.key_stats(cfg, Timestamp(now)).rate_per_min);
                KeyFlowStats {
                    rate_per_min,
                    hold_until: None,
                    breaker: per_key.then_some(if forced {
                        BreakerState::Open
                    } else {
                        BreakerState::Closed
                    }),
                    breaker_since: None,
                    forced,
                }
            })
        };
        let mut by_key: BTreeMap<Option<&str>, KeyStats> = BTreeMap::new();
        for id in self.in_queue(q) {
            let m = self.live(id).expect("live");
            let k = by_key.entry(m.key.as_deref()).or_insert_with(|| KeyStats {
                key: m
                    .key
                    .as_deref()
                    .map(|k| MessageKey::new(k).expect("a kept key")),
                visible: 0,
                delayed: 0,
                in_flight: 0,
                oldest_visible_at: None,
                delivered_1m: None,
                flow: flow(m.key.as_deref()),
            });
            match (Model::state_of(m, now), m.place) {
                ("visible", Place::Waiting { at }) => {
                    k.visible += 1;
                    let at = Timestamp(at);
                    k.oldest_visible_at = Some(k.oldest_visible_at.map_or(at, |o| o.min(at)));
                }
                ("delayed", _) => k.delayed += 1,
                ("in_flight", _) => k.in_flight += 1,
                _ => {}
            }
        }
        by_key.into_values().collect()
    }

    /// An operator forces the breaker of `key` of queue `name` open or closed: the key's
    /// breaker state and whether it is forced afterwards.
    ///
    /// # Errors
    /// The code the engines must answer.
    pub fn force_key_breaker(
        &mut self,
        name: &str,
        key: Option<&str>,
        open: bool,
    ) -> Result<(sluice_core::adaptive::BreakerState, bool), sluice_core::ErrorCode> {
        use sluice_core::adaptive::BreakerState;
        let q = self
            .queues
            .get_mut(name)
            .ok_or(sluice_core::ErrorCode::QueueNotFound)?;
        if sluice_core::adaptive::key_breaker(&q.config).is_none() {
            return Err(sluice_core::ErrorCode::Conflict);
        }
        let key = key.map(str::to_owned);
        if open {
            q.forced_keys.insert(key);
            Ok((BreakerState::Open, true))
        } else {
            q.forced_keys.remove(&key);
            Ok((BreakerState::Closed, false))
        }
    }

    /// Whether `key` of queue `q` is forced open: none of its messages is delivered, and a
    /// nack of one in flight keeps its attempt.
    pub fn key_forced(&self, q: &str, key: Option<&str>) -> bool {
        self.queues
            .get(q)
            .is_some_and(|q| q.forced_keys.contains(&key.map(str::to_owned)))
    }

    /// Named keys of queue `q` with messages waiting or in flight.
    pub fn active_keys(&self, q: &str) -> u64 {
        let mut keys: Vec<&str> = self
            .in_queue(q)
            .into_iter()
            .filter_map(|id| self.live(id).and_then(|m| m.key.as_deref()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys.len() as u64
    }

    /// The most deliveries of `key` from queue `q` an engine's last-minute estimate at `now`
    /// may count: those of the last two minutes.
    pub fn delivered_bound(&self, q: &str, key: Option<&str>, now: i64) -> u64 {
        self.deliveries
            .iter()
            .filter(|d| d.at > now - TALLY_SPAN_MS && super::super::ops::queue_name(d.queue) == q)
            .filter(|d| {
                self.msgs[d.msg]
                    .as_ref()
                    .is_none_or(|m| m.key.as_deref() == key)
            })
            .count() as u64
    }
}
