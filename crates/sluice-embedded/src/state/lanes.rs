//! Fair, prioritized delivery order in the index: the deliverable messages of a queue sorted
//! by priority, then by key in weighted round-robin, then by visible time (the rule is
//! `sluice_core::fair`'s).
//!
//! A queue whose messages carry neither key nor priority has no lanes: its `ready` index is
//! the delivery order, as it always was, and costs nothing more. The first message with a key
//! or priority gives the queue lanes, built once from `ready`; from then on every deliverable
//! message is in `ready` (by time, for stats, browse and retention) and in its lane (for
//! delivery). The lanes go when the queue holds no such message and nothing is deliverable.
//!
//! A lane is one priority: its keys with deliverable messages, each with a pass, in a set
//! ordered by `(pass, key)`. The next delivery is the head of the key with the lowest pass in
//! the highest lane; the key's pass then grows by its step. A key that gets a deliverable
//! message when it had none starts at the lane's latest delivered pass. Every change costs
//! O(log keys + log messages of the key); a key's state lives only while it has deliverable
//! messages.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;

use sluice_core::fair;

use super::{IdMap, Msg, QueueState, Slot};

/// What a message carries beyond a plain one: its key and the priority it was sent with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tag {
    /// Shared with the lane's entry for the key.
    pub key: Option<Arc<str>>,
    pub priority: Option<u8>,
}

/// A queue's delivery order, when its messages carry keys or priorities.
#[derive(Default)]
pub(crate) struct Lanes {
    /// Lanes with deliverable messages, highest priority first.
    by_priority: BTreeMap<Reverse<u8>, Lane>,
    /// The name the implicit key goes by here: empty, which no key can be.
    implicit: Arc<str>,
}

#[derive(Default)]
struct Lane {
    /// `(pass, key)` of every key of the lane that may deliver: not the keys held at their
    /// `key_limits`, so a receive never steps over them.
    turn: BTreeSet<(u64, Arc<str>)>,
    keys: HashMap<Arc<str>, KeyLine>,
    /// The pass of the lane's latest delivery, where a newly active key starts.
    latest: u64,
}

struct KeyLine {
    pass: u64,
    /// What the pass grows by per delivery (from the key's weight).
    step: u64,
    /// The key's deliverable messages by `(visible time, id)`.
    ready: BTreeSet<(i64, u64)>,
    /// At its `key_limits`: out of the turn until a delivery of it ends.
    held: bool,
}

/// Where a message sorts: its priority and its key (`None`: the implicit key).
type Place<'a> = (u8, Option<&'a Arc<str>>);

impl Lanes {
    /// Lanes holding `ready`, all of it plain (a queue gets lanes before its first tagged
    /// message is deliverable); `held`: the implicit key is at its limit.
    fn of_plain(ready: &BTreeSet<(i64, u64)>, q_default: u8, held: bool) -> Self {
        let mut l = Lanes::default();
        if !ready.is_empty() {
            let lane = l.by_priority.entry(Reverse(q_default)).or_default();
            if !held {
                lane.turn.insert((0, l.implicit.clone()));
            }
            lane.keys.insert(
                l.implicit.clone(),
                KeyLine {
                    pass: 0,
                    step: fair::step(1),
                    ready: ready.clone(),
                    held,
                },
            );
        }
        l
    }

    /// Adds a deliverable message; `held` says whether its key is at its limit (for a key
    /// new to the lane).
    fn insert(
        &mut self,
        (priority, key): Place<'_>,
        at: i64,
        id: u64,
        weights: &Weights<'_>,
        held: bool,
    ) {
        let key = key.unwrap_or(&self.implicit);
        let lane = self.by_priority.entry(Reverse(priority)).or_default();
        let line = match lane.keys.get_mut(key) {
            Some(line) => line,
            None => {
                // Where the lane's next delivery is: among the first few, however long the
                // other keys' lines.
                let start = lane.turn.first().map_or(lane.latest, |(pass, _)| *pass);
                if !held {
                    lane.turn.insert((start, key.clone()));
                }
                lane.keys.entry(key.clone()).or_insert(KeyLine {
                    pass: start,
                    step: weights.step(key),
                    ready: BTreeSet::new(),
                    held,
                })
            }
        };
        line.ready.insert((at, id));
    }

    /// Takes `key` out of the turn of every lane (it reached its limit), or puts it back.
    pub(super) fn hold(&mut self, key: Option<&Arc<str>>, held: bool) {
        let key = key.unwrap_or(&self.implicit);
        for lane in self.by_priority.values_mut() {
            let Some(line) = lane.keys.get_mut(key) else {
                continue;
            };
            if line.held == held {
                continue;
            }
            line.held = held;
            if held {
                lane.turn.remove(&(line.pass, key.clone()));
            } else {
                // Not ahead of the lane's next delivery: a key held back catches up at the
                // pace of the others, not in a burst of its own.
                let floor = lane.turn.first().map_or(line.pass, |(pass, _)| *pass);
                line.pass = line.pass.max(floor);
                lane.turn.insert((line.pass, key.clone()));
            }
        }
    }

    fn remove(&mut self, (priority, key): Place<'_>, at: i64, id: u64) {
        let key = key.unwrap_or(&self.implicit);
        let Some(lane) = self.by_priority.get_mut(&Reverse(priority)) else {
            return;
        };
        let Some(line) = lane.keys.get_mut(key) else {
            return;
        };
        line.ready.remove(&(at, id));
        if line.ready.is_empty() {
            if !line.held {
                lane.turn.remove(&(line.pass, key.clone()));
            }
            lane.keys.remove(key);
            if lane.keys.is_empty() {
                self.by_priority.remove(&Reverse(priority));
            }
        }
    }

    /// Counts a delivery of `key`'s head: its pass moves on by its step.
    fn serve(&mut self, (priority, key): Place<'_>) {
        let key = key.unwrap_or(&self.implicit);
        let Some(lane) = self.by_priority.get_mut(&Reverse(priority)) else {
            return;
        };
        let Some(line) = lane.keys.get_mut(key) else {
            return;
        };
        lane.latest = lane.latest.max(line.pass);
        let held = !lane.turn.remove(&(line.pass, key.clone()));
        line.pass = line.pass.saturating_add(line.step);
        if !held {
            lane.turn.insert((line.pass, key.clone()));
        }
    }

    /// The next `n` deliveries, in order, without changing anything: applying their leases
    /// serves their keys in this same order. `room` says how many more deliveries a key may
    /// have now (its `key_limits`); keys held at their limits are not in the turn. Also the
    /// keys in the turn found with no room at all (their rate spent), for the caller to hold.
    pub fn pick(
        &self,
        n: usize,
        room: &dyn Fn(Option<&Arc<str>>) -> usize,
    ) -> (Vec<u64>, Vec<Option<Arc<str>>>) {
        let mut out = Vec::with_capacity(n);
        let mut starved = Vec::new();
        // What each key has taken in this pick, over all lanes (a key's room is one).
        let mut taken: HashMap<&Arc<str>, usize> = HashMap::new();
        for lane in self.by_priority.values() {
            if out.len() == n {
                break;
            }
            // Only the first `n` keys by pass can deliver within `n` deliveries: every key
            // after them waits until each of them has delivered once. A key whose room this
            // pick used up (in a higher lane) gives its place to the next.
            let mut heap = BinaryHeap::new();
            let mut heads = Vec::new();
            let mut turn = lane.turn.iter();
            let mut enter = |heap: &mut BinaryHeap<_>, heads: &mut Vec<_>| {
                if let Some((pass, key)) = turn.next() {
                    let line = &lane.keys[key];
                    heads.push((line.ready.iter(), line.step));
                    heap.push(Reverse((*pass, key, heads.len() - 1)));
                }
            };
            for _ in 0..n - out.len() {
                enter(&mut heap, &mut heads);
            }
            while out.len() < n {
                let Some(Reverse((pass, key, i))) = heap.pop() else {
                    break;
                };
                let name = (**key != *self.implicit).then_some(key);
                let used = taken.entry(key).or_insert(0);
                if *used >= room(name) {
                    if *used == 0 {
                        starved.push(name.cloned());
                    }
                    enter(&mut heap, &mut heads);
                    continue;
                }
                let (it, step) = &mut heads[i];
                let Some((_, id)) = it.next() else { continue };
                out.push(*id);
                *used += 1;
                heap.push(Reverse((pass.saturating_add(*step), key, i)));
            }
        }
        starved.sort_unstable();
        starved.dedup();
        (out, starved)
    }

    /// Keys with deliverable messages, over all priorities.
    #[cfg(test)]
    fn active_keys(&self) -> usize {
        self.by_priority.values().map(|l| l.keys.len()).sum()
    }
}

/// A queue's weights, looked up as keys become active.
struct Weights<'a>(&'a BTreeMap<String, u32>);

impl Weights<'_> {
    fn step(&self, key: &str) -> u64 {
        let key = (!key.is_empty()).then_some(key);
        fair::step(fair::weight_of(self.0, key))
    }
}

impl QueueState {
    /// Where a message of this queue with `tag` sorts.
    fn place_of<'a>(&self, tag: Option<&'a Tag>) -> Place<'a> {
        (
            tag.and_then(|t| t.priority)
                .unwrap_or(self.config.default_priority),
            tag.and_then(|t| t.key.as_ref()),
        )
    }

    /// Puts message `id`, at `at` in `slot`, into the queue's indexes (and its lane when it
    /// is deliverable and the queue has lanes). A tagged message gives the queue lanes.
    pub(super) fn put(&mut self, slot: Slot, at: i64, id: u64, tag: Option<&Tag>) {
        self.index(slot).insert((at, id));
        if let Some(t) = tag {
            self.tagged += 1;
            if let Some(k) = &t.key {
                self.key_counts.enter(k);
            }
            if self.lanes.is_none() {
                // `ready` is all plain until now, including this message if it is deliverable.
                let mut plain = std::mem::take(&mut self.ready);
                if slot == Slot::Ready {
                    plain.remove(&(at, id));
                }
                let held = self.held_back(None);
                self.lanes = Some(Lanes::of_plain(&plain, self.config.default_priority, held));
                self.ready = plain;
                if slot == Slot::Ready {
                    self.ready.insert((at, id));
                }
            }
        }
        if slot == Slot::Ready {
            let place = self.place_of(tag);
            let held = self.held_back(place.1);
            let weights = Weights(&self.config.key_weights);
            if let Some(l) = &mut self.lanes {
                l.insert(place, at, id, &weights, held);
            }
        }
        if slot == Slot::Leased && self.config.key_limits.is_some() {
            self.count_flight(tag.and_then(|t| t.key.as_ref()), true);
        }
    }

    /// Takes message `id` out of the queue's indexes (see [`QueueState::put`]).
    pub(super) fn take(&mut self, slot: Slot, at: i64, id: u64, tag: Option<&Tag>) {
        self.index(slot).remove(&(at, id));
        if let Some(t) = tag {
            self.tagged = self.tagged.saturating_sub(1);
            if let Some(k) = &t.key {
                self.key_counts.leave(k);
            }
        }
        if slot == Slot::Ready {
            let place = self.place_of(tag);
            if let Some(l) = &mut self.lanes {
                l.remove(place, at, id);
            }
        }
        if slot == Slot::Leased && self.config.key_limits.is_some() {
            self.count_flight(tag.and_then(|t| t.key.as_ref()), false);
        }
        if self.tagged == 0 && self.ready.is_empty() {
            self.lanes = None;
        }
    }

    /// Counts the delivery of deliverable message `id` in its key's turn; called before the
    /// lease takes it out of `ready`.
    pub(super) fn serve(&mut self, tag: Option<&Tag>) {
        let place = self.place_of(tag);
        if let Some(l) = &mut self.lanes {
            l.serve(place);
        }
    }

    /// The next `n` deliverable messages at `now` in delivery order, within each key's room;
    /// and the keys found with no rate room, which the caller holds back
    /// ([`QueueState::hold_for_rate`]).
    pub fn next_deliveries(&self, n: usize, now: i64) -> (Vec<u64>, Vec<Option<Arc<str>>>) {
        let rated = self
            .config
            .key_limits
            .as_ref()
            .is_some_and(sluice_core::fair::KeyLimits::rates);
        let governed = self.governs_keys();
        let room = |key: Option<&Arc<str>>| {
            let mut room = self.flight_room(key);
            if rated {
                room = room.min(self.rate_room(&key.cloned(), now));
            }
            if governed && room > 0 {
                room = room.min(self.flow_room(&key.cloned(), now));
            }
            room
        };
        match &self.lanes {
            Some(l) => l.pick(n, &room),
            None => {
                let room = room(None);
                let starved = if room == 0 && (rated || governed) && !self.ready.is_empty() {
                    vec![None]
                } else {
                    Vec::new()
                };
                let ids = self.ready.iter().take(n.min(room)).map(|(_, id)| *id);
                (ids.collect(), starved)
            }
        }
    }

    /// Whether `key` is out of its lanes' turns: at its `max_in_flight`, held back by its
    /// rate, or by its own adaptive rate or breaker.
    pub(super) fn held_back(&self, key: Option<&Arc<str>>) -> bool {
        self.flight_room(key) == 0 || self.held_for_time(key)
    }

    /// Whether `key` is held back by its rate or its own flow state (until a time, not by
    /// its deliveries in flight).
    fn held_for_time(&self, key: Option<&Arc<str>>) -> bool {
        let key = key.cloned();
        self.key_rates.is_held(&key) || self.key_flows.is_held(&key)
    }

    /// How many more deliveries `key` (`None`: the implicit key) may have in flight now under
    /// the queue's `key_limits`.
    pub(super) fn flight_room(&self, key: Option<&Arc<str>>) -> usize {
        let Some(limits) = &self.config.key_limits else {
            return usize::MAX;
        };
        let flying = self.key_flight.get(&key.cloned()).copied().unwrap_or(0);
        match limits.of(key.map(|k| &**k)).max_in_flight {
            Some(max) => (max as usize).saturating_sub(flying as usize),
            None => usize::MAX,
        }
    }

    /// Counts a delivery of `key` starting (`up`) or ending, and holds the key out of its
    /// lanes' turns while it is at its limit.
    fn count_flight(&mut self, key: Option<&Arc<str>>, up: bool) {
        let entry = self.key_flight.entry(key.cloned()).or_insert(0);
        let before = *entry;
        *entry = if up {
            before + 1
        } else {
            before.saturating_sub(1)
        };
        if *entry == 0 {
            self.key_flight.remove(&key.cloned());
        }
        if self.held_for_time(key) {
            // Out of the turn for its rate or flow: the release looks at the flight again.
            return;
        }
        let room = self.flight_room(key);
        let was_full = {
            let limits = self.config.key_limits.as_ref();
            let max = limits.and_then(|l| l.of(key.map(|k| &**k)).max_in_flight);
            max.is_some_and(|m| before >= m)
        };
        if let Some(l) = &mut self.lanes {
            match (was_full, room == 0) {
                (false, true) => l.hold(key, true),
                (true, false) => l.hold(key, false),
                _ => {}
            }
        }
    }

    /// Counts the deliveries in flight of each key again, after `key_limits` changed.
    pub(crate) fn recount_flight(&mut self, msgs: &IdMap<u64, Msg>, tags: &IdMap<u64, Tag>) {
        self.key_flight.clear();
        if self.config.key_limits.is_none() {
            return;
        }
        for (_, id) in &self.leased {
            let key = msgs
                .get(id)
                .filter(|m| m.tagged())
                .and_then(|_| tags.get(id))
                .and_then(|t| t.key.clone());
            *self.key_flight.entry(key).or_insert(0) += 1;
        }
    }

    /// Sorts the deliverable messages again after `default_priority`, `key_weights` or
    /// `key_limits` changed. Runs on a config change only, so it may visit every deliverable
    /// message.
    pub(crate) fn relane(&mut self, msgs: &IdMap<u64, Msg>, tags: &IdMap<u64, Tag>) {
        if self.lanes.is_none() {
            return;
        }
        let mut lanes = Lanes::default();
        let weights = Weights(&self.config.key_weights);
        for (at, id) in &self.ready {
            let tag = msgs
                .get(id)
                .filter(|m| m.tagged())
                .and_then(|_| tags.get(id));
            let place = self.place_of(tag);
            let held = self.held_back(place.1);
            lanes.insert(place, *at, *id, &weights, held);
        }
        self.lanes = Some(lanes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Arc<str> {
        Arc::from(k)
    }

    /// Delivers `n` from `l` as a receive and its leases would.
    fn deliver(
        l: &mut Lanes,
        places: &HashMap<u64, (u8, Option<Arc<str>>, i64)>,
        n: usize,
    ) -> Vec<u64> {
        let (ids, _) = l.pick(n, &|_| usize::MAX);
        for id in &ids {
            let (p, k, at) = &places[id];
            l.serve((*p, k.as_ref()));
            l.remove((*p, k.as_ref()), *at, *id);
        }
        ids
    }

    #[test]
    fn a_quiet_key_waits_for_one_round_not_for_a_backlog() {
        let empty = BTreeMap::new();
        let w = Weights(&empty);
        let mut l = Lanes::default();
        let mut places = HashMap::new();
        let noisy = key("noisy");
        for id in 0..1000 {
            l.insert((4, Some(&noisy)), id as i64, id, &w, false);
            places.insert(id, (4, Some(noisy.clone()), id as i64));
        }
        assert_eq!(deliver(&mut l, &places, 10).len(), 10);
        let quiet: Vec<Arc<str>> = (0..5).map(|i| key(&format!("q{i}"))).collect();
        for (i, k) in quiet.iter().enumerate() {
            let id = 10_000 + i as u64;
            l.insert((4, Some(k)), 5000, id, &w, false);
            places.insert(id, (4, Some(k.clone()), 5000));
        }
        let next = deliver(&mut l, &places, 6);
        let quiet_seen = next.iter().filter(|id| **id >= 10_000).count();
        assert_eq!(quiet_seen, 5, "{next:?}");
        assert_eq!(l.active_keys(), 1);
    }

    #[test]
    fn weights_share_deliveries_and_priorities_go_first() {
        let weights: BTreeMap<String, u32> = [("heavy".to_string(), 3)].into_iter().collect();
        let w = Weights(&weights);
        let mut l = Lanes::default();
        let mut places = HashMap::new();
        let (heavy, light) = (key("heavy"), key("light"));
        for id in 0..100u64 {
            let k = if id % 2 == 0 { &heavy } else { &light };
            l.insert((4, Some(k)), id as i64, id, &w, false);
            places.insert(id, (4, Some(k.clone()), id as i64));
        }
        l.insert((9, None), 500, 500, &w, false);
        places.insert(500, (9, None, 500));
        let got = deliver(&mut l, &places, 41);
        assert_eq!(got[0], 500, "the urgent message first");
        let heavy_n = got[1..].iter().filter(|id| *id % 2 == 0).count();
        assert_eq!(heavy_n, 30, "3 of every 4: {got:?}");
        // Within a key, by visible time.
        let heavy_ids: Vec<u64> = got[1..].iter().copied().filter(|id| id % 2 == 0).collect();
        assert!(heavy_ids.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_picked_order_is_the_served_order() {
        let empty = BTreeMap::new();
        let w = Weights(&empty);
        let mut l = Lanes::default();
        let mut places = HashMap::new();
        let keys: Vec<Arc<str>> = (0..7).map(|i| key(&format!("k{i}"))).collect();
        for id in 0..200u64 {
            let k = &keys[(id * id % 7) as usize];
            l.insert((4, Some(k)), id as i64, id, &w, false);
            places.insert(id, (4, Some(k.clone()), id as i64));
        }
        let (all, _) = l.pick(200, &|_| usize::MAX);
        let mut one_by_one = Vec::new();
        for _ in 0..200 {
            one_by_one.extend(deliver(&mut l, &places, 1));
        }
        assert_eq!(all, one_by_one);
        assert_eq!(l.active_keys(), 0);
    }
}
