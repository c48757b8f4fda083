//! Per-key rate limits (`key_limits.rate_limit`): each key's sliding window and pace, the keys
//! a receive stepped over for want of rate room, and how they last through a restart.
//!
//! A key's window counts its deliveries when their lease record is applied, as the queue's
//! own window does (`rate_windows`), so replay rebuilds it. A receive that finds a key at the
//! head of its turn with no rate room *holds* it: the key leaves its lanes' turns until the
//! time its window frees a place, and the next receive after that time puts it back. So a key
//! held back by its rate costs one look, not one per receive, and never delays other keys.
//! A window is forgotten once it is as good as new (its last delivery left it and its pace
//! is no longer ahead): a key's rate state lives at most one period after its last delivery.
//!
//! Compaction keeps the windows in [`Record::KeyPaces`](crate::journal::record::Record::KeyPaces),
//! which replay sets whole for its queue; so does a change of the queue's key rates, since
//! replay reads every lease under the configuration of now.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use sluice_core::Timestamp;
use sluice_core::config::RateLimit;
use sluice_core::fair::KeyLimits;
use sluice_core::rate::SlidingWindow;

use super::{QueueState, State};
use crate::journal::record::{KeyPace, KeyPaces, Lease, Qid};

/// A key as the index names it: `None` is the implicit key.
type Key = Option<Arc<str>>;

/// The rate state of one queue's keys.
#[derive(Default)]
pub(crate) struct KeyRates {
    windows: HashMap<Key, SlidingWindow>,
    /// `(from when, key)`: when each window may be forgotten.
    idle: BTreeSet<(i64, Key)>,
    /// `(until when, key)`: the keys held back by their rate.
    held: BTreeSet<(i64, Key)>,
    held_until: HashMap<Key, i64>,
}

/// The rate limit of `key` under `limits`.
fn limit_of(limits: Option<&KeyLimits>, key: &Key) -> Option<RateLimit> {
    limits.and_then(|l| l.of(key.as_deref()).rate_limit)
}

impl KeyRates {
    /// How many deliveries `key`'s rate allows at `now`.
    pub(crate) fn room(&self, key: &Key, limit: &RateLimit, now: i64) -> u32 {
        match self.windows.get(key) {
            Some(w) => w.room(limit, Timestamp(now)),
            None => SlidingWindow::default().room(limit, Timestamp(now)),
        }
    }

    /// Whether `key` is held back by its rate.
    pub(crate) fn is_held(&self, key: &Key) -> bool {
        // Most queues hold no key for its rate: no hashing then.
        !self.held_until.is_empty() && self.held_until.contains_key(key)
    }

    /// Counts `n` deliveries of `key` at `at`.
    fn record(&mut self, key: Key, limit: &RateLimit, at: i64, n: usize) {
        let w = self.windows.entry(key.clone()).or_default();
        if let Some(t) = w.idle_from(limit) {
            self.idle.remove(&(t.as_millis(), key.clone()));
        }
        w.record_within(limit, Timestamp(at), n);
        if let Some(t) = w.idle_from(limit) {
            self.idle.insert((t.as_millis(), key));
        }
    }

    /// Holds `key` back until its window frees a place after `now`; `false` when it has room.
    fn hold(&mut self, key: &Key, limit: &RateLimit, now: i64) -> bool {
        let Some(w) = self.windows.get_mut(key) else {
            return false;
        };
        let Some(until) = w.next_free(limit, Timestamp(now)) else {
            return false;
        };
        if let Some(old) = self.held_until.insert(key.clone(), until.as_millis()) {
            self.held.remove(&(old, key.clone()));
        }
        self.held.insert((until.as_millis(), key.clone()));
        true
    }

    /// The held keys whose time came by `now`, no longer held; and forgets the windows that
    /// are as good as new.
    fn release(&mut self, now: i64) -> Vec<Key> {
        let mut out = Vec::new();
        while let Some((until, _)) = self.held.first() {
            if *until > now {
                break;
            }
            let (_, key) = self.held.pop_first().expect("just looked");
            self.held_until.remove(&key);
            out.push(key);
        }
        while let Some((from, _)) = self.idle.first() {
            if *from > now {
                break;
            }
            let (_, key) = self.idle.pop_first().expect("just looked");
            if !self.held_until.contains_key(&key) {
                self.windows.remove(&key);
            }
        }
        out
    }

    /// When the first held key may deliver again.
    pub(crate) fn next_release(&self) -> Option<i64> {
        self.held.first().map(|(t, _)| *t)
    }

    /// Keys with a window.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.windows.len()
    }

    /// Sets the windows to `kept` (nothing held), indexed under `limits`.
    fn restore(&mut self, kept: &[KeyPace], limits: Option<&KeyLimits>) {
        *self = KeyRates::default();
        for p in kept {
            let key: Key = p.key.as_deref().map(Arc::from);
            let w = SlidingWindow::restore(p.events.iter().map(|t| Timestamp(*t)), p.tat);
            if let Some(t) = limit_of(limits, &key).and_then(|l| w.idle_from(&l)) {
                self.idle.insert((t.as_millis(), key.clone()));
            }
            self.windows.insert(key, w);
        }
    }

    /// The windows as [`Record::KeyPaces`](crate::journal::record::Record::KeyPaces) keeps them.
    fn kept(&self) -> Vec<KeyPace> {
        self.windows
            .iter()
            .map(|(key, w)| KeyPace {
                key: key.as_deref().map(str::to_owned),
                events: w.events().map(|t| t.as_millis()).collect(),
                tat: w.pace(),
            })
            .collect()
    }
}

impl QueueState {
    /// How many deliveries `key`'s rate allows at `now` (unlimited without one).
    pub(super) fn rate_room(&self, key: &Key, now: i64) -> usize {
        match limit_of(self.config.key_limits.as_ref(), key) {
            Some(l) => self.key_rates.room(key, &l, now) as usize,
            None => usize::MAX,
        }
    }

    /// Holds back `key`, which a receive at `now` found without rate room, until its window
    /// frees a place.
    pub(crate) fn hold_for_rate(&mut self, key: &Key, now: i64) {
        let Some(limit) = limit_of(self.config.key_limits.as_ref(), key) else {
            return;
        };
        if self.key_rates.hold(key, &limit, now)
            && let Some(l) = &mut self.lanes
        {
            l.hold(key.as_ref(), true);
        }
    }

    /// Puts back the keys whose rate allows them to deliver again at `now`, unless their
    /// `max_in_flight` still holds them.
    pub(crate) fn release_rate_holds(&mut self, now: i64) {
        for key in self.key_rates.release(now) {
            if !self.held_back(key.as_ref())
                && let Some(l) = &mut self.lanes
            {
                l.hold(key.as_ref(), false);
            }
        }
    }

    /// Indexes the key windows anew under the queue's `key_limits` of now (nothing held),
    /// after they changed.
    pub(crate) fn relimit_key_rates(&mut self) {
        let kept = self.key_rates.kept();
        self.reset_key_rates(&kept);
    }

    /// Sets the key windows to the kept ones, or forgets them when the queue has no key rates.
    pub(crate) fn reset_key_rates(&mut self, kept: &[KeyPace]) {
        let limits = self.config.key_limits.as_ref().filter(|l| l.rates());
        self.key_rates
            .restore(if limits.is_some() { kept } else { &[] }, limits);
    }
}

impl State {
    /// Counts the leases of a lease record made at `at` in their keys' windows, for a queue
    /// with key rates; `qid` is the queue of the leases.
    pub(super) fn count_in_key_windows(&mut self, qid: Qid, at: i64, leases: &[Lease]) {
        let Some(q) = self.queues.get(&qid) else {
            return;
        };
        let Some(limits) = q.config.key_limits.as_ref().filter(|l| l.rates()) else {
            return;
        };
        let mut per_key: HashMap<Key, usize> = HashMap::new();
        for l in leases {
            let Some(m) = self.msgs.get(&l.id).filter(|m| m.qid == qid) else {
                continue;
            };
            let key = m
                .tagged()
                .then(|| self.tags.get(&l.id))
                .flatten()
                .and_then(|t| t.key.clone());
            *per_key.entry(key).or_insert(0) += 1;
        }
        let limits = limits.clone();
        let q = self.queues.get_mut(&qid).expect("looked up above");
        for (key, n) in per_key {
            if let Some(limit) = limit_of(Some(&limits), &key) {
                q.key_rates.record(key, &limit, at, n);
            }
        }
    }

    /// Sets each named queue's key windows to what was kept.
    pub(super) fn restore_key_paces(&mut self, kept: &[KeyPaces]) {
        for k in kept {
            if let Some(q) = self.queues.get_mut(&k.qid) {
                q.reset_key_rates(&k.keys);
            }
        }
    }

    /// Queue `qid`'s key windows, as a record keeps them.
    pub(crate) fn key_paces(&self, qid: Qid) -> KeyPaces {
        KeyPaces {
            qid,
            keys: self
                .queues
                .get(&qid)
                .map(|q| q.key_rates.kept())
                .unwrap_or_default(),
        }
    }

    /// The key windows of the queues with key rates that hold some, for compaction to keep.
    pub(crate) fn all_key_paces(&self) -> Vec<KeyPaces> {
        self.queues
            .iter()
            .filter(|(_, q)| !q.key_rates.windows.is_empty())
            .map(|(qid, _)| self.key_paces(*qid))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_spent_key_is_held_until_its_window_frees_then_forgotten() {
        let limit = RateLimit {
            limit: 2,
            period: Duration::from_secs(10),
            burst: Some(2),
        };
        let mut r = KeyRates::default();
        let (a, b): (Key, Key) = (Some(Arc::from("a")), None);
        r.record(a.clone(), &limit, 1_000, 2);
        r.record(b.clone(), &limit, 1_000, 1);
        assert_eq!(
            (r.room(&a, &limit, 1_000), r.room(&b, &limit, 1_000)),
            (0, 1)
        );
        assert!(r.hold(&a, &limit, 1_000), "no room: held");
        assert!(!r.hold(&b, &limit, 1_000), "room left: not held");
        assert_eq!(r.next_release(), Some(11_000));
        assert!(r.release(10_999).is_empty());
        assert_eq!(r.release(11_000), vec![a.clone()]);
        assert!(!r.is_held(&a));
        assert_eq!(r.len(), 0, "both windows as good as new: forgotten");
        assert_eq!(r.room(&a, &limit, 11_000), 2);
    }
}
