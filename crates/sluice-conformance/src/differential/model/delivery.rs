//! What a receive may hand out now, in the model: the messages eligible (group lines and keys
//! forced open considered), how many a receive takes (pause, `max_in_flight`, `rate_limit` and
//! its pace, each key's room under `key_limits`).

use std::collections::{BTreeMap, BTreeSet};

use sluice_core::config::RateLimit;

use super::{Model, Place};

impl Model {
    /// The messages of `q` a receive may hand out now, the group lines considered.
    pub fn eligible(&self, q: &str, now: i64) -> BTreeSet<usize> {
        let per_group = self.queues[q].config.max_in_flight_per_group as usize;
        let mut lines: BTreeMap<&str, Vec<(u64, usize)>> = BTreeMap::new();
        let ids = self.in_queue(q);
        for id in &ids {
            let m = self.live(*id).expect("live");
            if let Some(g) = &m.group {
                lines.entry(g).or_default().push((m.entry, *id));
            }
        }
        let mut allowed = BTreeSet::new();
        for line in lines.values_mut() {
            line.sort_unstable();
            allowed.extend(line.iter().take(per_group).map(|(_, id)| *id));
        }
        // A key whose breaker an operator forced open is delivered nothing.
        ids.into_iter()
            .filter(|id| {
                let m = self.live(*id).expect("live");
                Self::state_of(m, now) == "visible"
                    && (m.group.is_none() || allowed.contains(id))
                    && !self.key_forced(q, m.key.as_deref())
            })
            .collect()
    }

    /// How many messages a receive of `max` returns from `q` now.
    pub fn receive_count_now(&self, q: &str, max: u32, now: i64) -> usize {
        let cfg = &self.queues[q].config;
        if cfg.paused {
            return 0;
        }
        let eligible = self.eligible(q, now);
        let deliverable = match &cfg.key_limits {
            // Each key at most its room: its limit less what it has in flight.
            Some(_) => {
                let mut by_key: BTreeMap<Option<String>, usize> = BTreeMap::new();
                for id in &eligible {
                    *by_key
                        .entry(self.live(*id).expect("live").key.clone())
                        .or_default() += 1;
                }
                by_key
                    .into_iter()
                    .map(|(k, n)| {
                        n.min(self.key_room(q, k.as_deref()))
                            .min(self.key_rate_room(q, k.as_deref(), now))
                    })
                    .sum()
            }
            None => eligible.len(),
        };
        let mut n = (max as usize).min(deliverable);
        if let Some(cap) = cfg.max_in_flight {
            let flying = self
                .in_queue(q)
                .iter()
                .filter(|id| matches!(self.live(**id).expect("live").place, Place::InFlight { .. }))
                .count();
            n = n.min((cap as usize).saturating_sub(flying));
        }
        if let Some(rl) = cfg.rate_limit {
            let q = &self.queues[q];
            n = n.min(rate_room(&rl, &q.rate_events, q.rate_due, now));
        }
        n
    }

    /// How many more deliveries key `key` (`None`: the implicit key) of queue `q` may have
    /// under its `key_limits`.
    pub fn key_room(&self, q: &str, key: Option<&str>) -> usize {
        let Some(limits) = &self.queues[q].config.key_limits else {
            return usize::MAX;
        };
        let Some(max) = limits.of(key).max_in_flight else {
            return usize::MAX;
        };
        (max as usize).saturating_sub(self.key_in_flight(q, key))
    }

    /// How many more deliveries key `key` of queue `q` may have at `now` under the rate its
    /// `key_limits` give it.
    pub fn key_rate_room(&self, q: &str, key: Option<&str>, now: i64) -> usize {
        let q = &self.queues[q];
        let Some(rl) = q
            .config
            .key_limits
            .as_ref()
            .and_then(|l| l.of(key).rate_limit)
        else {
            return usize::MAX;
        };
        match q.key_rates.get(&key.map(str::to_owned)) {
            Some((events, due)) => rate_room(&rl, events, *due, now),
            None => rate_room(&rl, &[], None, now),
        }
    }

    /// Deliveries of key `key` of queue `q` within the last period of its rate at `now`.
    pub fn key_rate_count(&self, q: &str, key: Option<&str>, now: i64) -> Option<(usize, u32)> {
        let q = &self.queues[q];
        let rl = q.config.key_limits.as_ref()?.of(key).rate_limit?;
        let period = i64::try_from(rl.period.as_millis()).unwrap_or(i64::MAX);
        let (events, _) = q.key_rates.get(&key.map(str::to_owned))?;
        Some((
            events.iter().filter(|t| **t + period > now).count(),
            rl.limit,
        ))
    }

    /// Deliveries of key `key` of queue `q` in flight.
    pub fn key_in_flight(&self, q: &str, key: Option<&str>) -> usize {
        self.in_queue(q)
            .iter()
            .filter_map(|id| self.live(*id))
            .filter(|m| matches!(m.place, Place::InFlight { .. }) && m.key.as_deref() == key)
            .count()
    }
}

/// How many deliveries `rl` allows at `now` after the deliveries at `events` (ms) with the
/// pace due at `due` (ns): never more than `limit` in any sliding `period`, and spread
/// evenly, `burst` at once, then one per spacing, counting from when the last delivery was
/// due.
fn rate_room(rl: &RateLimit, events: &[i64], due: Option<i64>, now: i64) -> usize {
    let period = i64::try_from(rl.period.as_millis()).unwrap_or(i64::MAX);
    let counted = events.iter().filter(|t| **t + period > now).count();
    let window = (rl.limit as usize).saturating_sub(counted);
    let burst = i64::from(rl.burst());
    let spacing = spacing_ns(rl);
    let mut paced = if burst >= i64::from(rl.limit) {
        burst
    } else {
        0
    };
    let mut due = due.unwrap_or(i64::MIN);
    while paced < burst && due.max(now * 1_000_000) + spacing - now * 1_000_000 <= burst * spacing {
        due = due.max(now * 1_000_000) + spacing;
        paced += 1;
    }
    window.min(usize::try_from(paced).unwrap_or(0))
}

/// Counts a delivery at `now` in a window `events` and pace `due` under `rl`.
pub(super) fn count_delivery(
    rl: &RateLimit,
    events: &mut Vec<i64>,
    due: &mut Option<i64>,
    now: i64,
) {
    events.push(now);
    if rl.burst() < rl.limit {
        *due = Some(due.unwrap_or(i64::MIN).max(now * 1_000_000) + spacing_ns(rl));
    }
}

/// The even spacing of deliveries under `rl`, in ns, rounded down (at least 1).
pub(super) fn spacing_ns(rl: &RateLimit) -> i64 {
    (i64::try_from(rl.period.as_nanos()).unwrap_or(i64::MAX) / i64::from(rl.limit.max(1))).max(1)
}
