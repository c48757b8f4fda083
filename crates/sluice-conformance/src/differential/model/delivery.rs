//! What a receive may hand out now, in the model: the messages eligible (group lines
//! considered), how many a receive takes (pause, `max_in_flight`, `rate_limit` and its pace,
//! each key's room under `key_limits`).

use std::collections::{BTreeMap, BTreeSet};

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
        ids.into_iter()
            .filter(|id| {
                let m = self.live(*id).expect("live");
                Self::state_of(m, now) == "visible" && (m.group.is_none() || allowed.contains(id))
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
                    .map(|(k, n)| n.min(self.key_room(q, k.as_deref())))
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
            // Never more than `limit` deliveries in any sliding `period`.
            let period = i64::try_from(rl.period.as_millis()).unwrap_or(i64::MAX);
            let q = &self.queues[q];
            let counted = q.rate_events.iter().filter(|t| **t + period > now).count();
            n = n.min((rl.limit as usize).saturating_sub(counted));
            // Spread evenly: `burst` at once, then one per spacing, counting from when the
            // last delivery was due.
            let burst = i64::from(rl.burst.unwrap_or(rl.limit / 10).clamp(1, rl.limit));
            let spacing = spacing_ns(&rl);
            let mut paced = if burst >= i64::from(rl.limit) {
                burst
            } else {
                0
            };
            let mut due = q.rate_due.unwrap_or(i64::MIN);
            while paced < burst
                && due.max(now * 1_000_000) + spacing - now * 1_000_000 <= burst * spacing
            {
                due = due.max(now * 1_000_000) + spacing;
                paced += 1;
            }
            n = n.min(usize::try_from(paced).unwrap_or(0));
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

    /// Deliveries of key `key` of queue `q` in flight.
    pub fn key_in_flight(&self, q: &str, key: Option<&str>) -> usize {
        self.in_queue(q)
            .iter()
            .filter_map(|id| self.live(*id))
            .filter(|m| matches!(m.place, Place::InFlight { .. }) && m.key.as_deref() == key)
            .count()
    }
}

/// The even spacing of deliveries under `rl`, in ns, rounded down (at least 1).
pub(super) fn spacing_ns(rl: &sluice_core::config::RateLimit) -> i64 {
    (i64::try_from(rl.period.as_nanos()).unwrap_or(i64::MAX) / i64::from(rl.limit.max(1))).max(1)
}
