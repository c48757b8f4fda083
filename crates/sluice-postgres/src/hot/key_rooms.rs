//! Per-key limits on PostgreSQL (`key_limits`, `sluice_core::fair::KeyLimits`): how many more
//! deliveries each key may have now.
//!
//! A queue with per-key limits receives under its row lock on every node (it is *limited*,
//! `crate::flow::limited`), so the deliveries in flight that a receive counts cannot change
//! under it: the limits are exact across nodes. The receive counts each key's leased rows
//! (one grouped count of the queue's leased rows), then leases only what fits: by rank,
//! stepping over the keys at their limit, and the fronts of FIFO groups the same way.
//!
//! A key's rate (`key_limits.rate_limit`) narrows its room further (`crate::hot::key_rates`),
//! and so does its own adaptive rate or breaker on a queue that governs keys one by one
//! (`crate::hot::key_flows`).
//!
//! Cost: the count reads every leased row of the queue, and a receive steps over the waiting
//! messages of the keys at their limit that come first in rank order: a page of them at most,
//! then it goes on from the first row of a key with room (a probe per waiting key).

use std::collections::HashMap;

use sluice_core::adaptive::FlowEvent;
use sluice_core::fair::KeyLimits;
use sluice_core::{QueueConfig, StoreError};
use tokio_postgres::GenericClient;

use crate::error::{corrupt, db};
use crate::hot::key_flows::KeyFlows;
use crate::hot::key_rates::KeyRates;

/// The limits of a queue without `key_limits` that governs its keys: none.
static NO_LIMITS: KeyLimits = KeyLimits {
    max_in_flight: None,
    rate_limit: None,
    overrides: std::collections::BTreeMap::new(),
};

/// Whether receives of a queue with configuration `c` go by key rooms: it has `key_limits`,
/// or governs its keys one by one.
pub(crate) fn by_rooms(c: &QueueConfig) -> bool {
    c.key_limits.is_some() || sluice_core::adaptive::governs_keys(c)
}

/// Each key's room under a queue's `key_limits`, as a receive uses it up.
pub(crate) struct Rooms<'a> {
    limits: &'a KeyLimits,
    /// Deliveries in flight per key (`""`: the implicit key), this receive's included.
    flying: HashMap<String, i64>,
    /// The keys' rates, when some key has one.
    rates: Option<KeyRates<'a>>,
    /// The keys' own adaptive rates and breakers, when the queue governs keys.
    flows: Option<KeyFlows<'a>>,
    /// Events of the keys' states, for the caller to audit.
    pub(crate) events: Vec<(String, FlowEvent)>,
}

impl<'a> Rooms<'a> {
    /// The rooms of queue `q` (configuration `cfg`, [`by_rooms`]) at `now`, with the outcomes
    /// this node `counted` for its keys handed to their states. The caller holds the queue's
    /// row lock.
    pub(crate) async fn read(
        c: &impl GenericClient,
        q: &str,
        cfg: &'a QueueConfig,
        counted: &std::collections::HashMap<String, crate::flow::Counted>,
        now: i64,
    ) -> Result<Rooms<'a>, StoreError> {
        let limits = cfg.key_limits.as_ref().unwrap_or(&NO_LIMITS);
        let (flows, events) = if sluice_core::adaptive::governs_keys(cfg) {
            let mut f = KeyFlows::read(c, q, cfg, now).await?;
            let events = f.observe(c, q, counted).await?;
            (Some(f), events)
        } else {
            (None, Vec::new())
        };
        let rates = if limits.rates() {
            Some(KeyRates::read(c, q, limits, now).await?)
        } else {
            None
        };
        let mut flying = HashMap::new();
        for r in c
            .query(
                "SELECT coalesce(fkey, ''), count(*) FROM messages
                 WHERE queue = $1 AND state = 1 GROUP BY 1
                 UNION ALL
                 SELECT '', coalesce(sum(pending), 0) FROM packs
                 WHERE queue = $1 AND state = 1",
                &[&q],
            )
            .await
            .map_err(|e| db(&e))?
        {
            let key: String = r.try_get(0).map_err(corrupt)?;
            let n: i64 = r.try_get(1).map_err(corrupt)?;
            *flying.entry(key).or_insert(0) += n;
        }
        Ok(Rooms {
            limits,
            flying,
            rates,
            flows,
            events,
        })
    }

    /// Reads what the rooms of `keys` need before [`Rooms::room`] or [`Rooms::fit`] asks
    /// about them: their rate windows and flow states.
    pub(crate) async fn load<'k>(
        &mut self,
        c: &impl GenericClient,
        q: &str,
        keys: impl IntoIterator<Item = &'k str> + Clone,
    ) -> Result<(), StoreError> {
        if let Some(r) = &mut self.rates {
            r.load(c, q, keys.clone()).await?;
        }
        if let Some(f) = &mut self.flows {
            f.load(c, q, keys).await?;
        }
        Ok(())
    }

    /// How many more deliveries `key` (`""`: the implicit key) may have in flight.
    fn flight_room(&self, key: &str) -> i64 {
        let name = (!key.is_empty()).then_some(key);
        match self.limits.of(name).max_in_flight {
            Some(max) => (i64::from(max) - self.flying.get(key).copied().unwrap_or(0)).max(0),
            None => i64::MAX,
        }
    }

    /// How many more deliveries `key` (`""`: the implicit key) may have: in flight, and by
    /// its rate once [loaded](Rooms::load).
    pub(crate) fn room(&self, key: &str) -> i64 {
        let mut room = self.flight_room(key);
        if let Some(r) = &self.rates {
            room = room.min(r.room(key));
        }
        if let Some(f) = &self.flows
            && room > 0
        {
            room = room.min(f.room(key));
        }
        room
    }

    /// Counts one more delivery of `key`.
    pub(crate) fn take(&mut self, key: &str) {
        *self.flying.entry(key.to_owned()).or_insert(0) += 1;
        if let Some(r) = &mut self.rates {
            r.take(key);
        }
        if let Some(f) = &mut self.flows {
            f.take(key);
        }
    }

    /// The keys with no room left, for a statement to step over.
    pub(crate) fn full(&self) -> Vec<String> {
        let mut full: Vec<String> = self
            .flying
            .keys()
            .filter(|k| self.flight_room(k) == 0)
            .cloned()
            .collect();
        if let Some(r) = &self.rates {
            full.extend(r.spent().cloned());
        }
        if let Some(f) = &self.flows {
            full.extend(f.spent());
        }
        full.sort_unstable();
        full.dedup();
        full
    }

    /// When a key held by its rate may deliver again, for a receive that found nothing.
    pub(crate) fn next_free(&mut self) -> Option<i64> {
        let rate = self.rates.as_mut().and_then(KeyRates::next_free);
        let flow = self.flows.as_ref().and_then(KeyFlows::next_free);
        rate.into_iter().chain(flow).min()
    }

    /// Writes the rate windows and flow states of the keys delivered in `taken` (and of those
    /// found spent) to queue `q`.
    pub(crate) async fn finish(
        &mut self,
        c: &impl GenericClient,
        q: &str,
        taken: &[crate::hot::leases::Taken],
    ) -> Result<(), StoreError> {
        if self.rates.is_none() && self.flows.is_none() {
            return Ok(());
        }
        let mut delivered: HashMap<String, i32> = HashMap::new();
        for t in taken {
            let key = t.delivery.key.as_ref().map_or("", |k| k.as_str());
            *delivered.entry(key.to_owned()).or_insert(0) += 1;
        }
        if let Some(r) = &mut self.rates {
            r.write(c, q, &delivered).await?;
        }
        if let Some(f) = &mut self.flows {
            let events = f.write(c, q, &delivered).await?;
            self.events.extend(events);
        }
        Ok(())
    }

    /// Of `candidates` (`(id, key)` in delivery order, their keys [loaded](Rooms::load)), the
    /// ids that fit, up to `n`; each taken counts in its key's room.
    pub(crate) fn fit(&mut self, candidates: &[(i64, String)], n: usize) -> Vec<i64> {
        let mut out = Vec::new();
        for (id, key) in candidates {
            if out.len() == n {
                break;
            }
            if self.room(key) > 0 {
                self.take(key);
                out.push(*id);
            }
        }
        out
    }
}
