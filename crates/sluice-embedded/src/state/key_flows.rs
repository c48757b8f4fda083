//! Per-key adaptive rates and breakers (`"scope": "key"`, `sluice_core::adaptive`): each key's
//! flow state and pace, the keys held out of their turns because their state admits nothing
//! now, and what of it outlives a restart.
//!
//! A key's state is made at its first delivery and learns only from the outcomes of its own
//! deliveries. A receive weighs each key by what its state would admit
//! ([`FlowState::allowance`], without changing it), then tells the states of the keys it
//! leased from. A key whose state admits nothing (its breaker open, a Retry-After holding it,
//! its pace spent) is *held*: out of its lanes' turns until the time its state names, or until
//! an outcome or an operator changes it. So a key whose upstream is down costs one look, not
//! one per receive, and never delays other keys.
//!
//! What is kept across a restart: the states of keys whose breaker is not closed or was forced
//! by an operator (in the queue catalog, written by the maintenance round once one changed, and
//! at once for an operator's order). Learned rates are not: a key starts again at
//! `min_per_min` after a restart, as after [`sluice_core::adaptive::key_idle`] without
//! deliveries, and finds its rate again in slow start. Writing 100,000 keys' rates to the
//! catalog at every step would cost more than relearning them.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_core::Timestamp;
use sluice_core::adaptive::{
    Admit, BreakerForce, BreakerState, FlowConfig, FlowEvent, FlowState, KeyAuditBudget,
    KeyFlowStats, Tally, UNTIL_CHANGED, key_room,
};
use sluice_core::rate::SlidingWindow;

use super::QueueState;

/// A key as the index names it: `None` is the implicit key.
type Key = Option<Arc<str>>;

/// One key's state.
struct KeyFlow {
    state: FlowState,
    /// Deliveries at the key's governed pace.
    pace: SlidingWindow,
    /// Its last delivery or outcome.
    touched: i64,
}

/// A key's state as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeptKeyFlow {
    /// The key; `None`: the implicit key.
    pub key: Option<String>,
    pub state: FlowState,
    /// Its last delivery or outcome.
    pub touched: i64,
}

/// The per-key flow states of one queue.
#[derive(Default)]
pub(crate) struct KeyFlows {
    flows: HashMap<Key, KeyFlow>,
    /// `(until when, key)`: the keys held out of their turns.
    held: BTreeSet<(i64, Key)>,
    held_until: HashMap<Key, i64>,
    /// Key breaker entries written to the audit log this minute.
    pub(crate) audit: KeyAuditBudget,
    /// A state worth keeping changed since the catalog was last written.
    pub(crate) dirty: bool,
}

impl KeyFlow {
    /// Whether the state is as good as forgotten at `now`: idle for `idle_ms` and not forced
    /// open. The maintenance round drops such states; until then they read as fresh ones.
    fn lapsed(&self, idle_ms: i64, now: i64) -> bool {
        self.touched.saturating_add(idle_ms) <= now && !self.state.forced_open()
    }
}

impl KeyFlows {
    /// `key`'s state, unless it lapsed at `now`.
    fn live(&self, key: &Key, idle_ms: i64, now: i64) -> Option<&KeyFlow> {
        self.flows.get(key).filter(|f| !f.lapsed(idle_ms, now))
    }

    /// How many deliveries `key`'s state admits at `now` under `cfg`, and when to look again
    /// if none (at the latest when the state lapses).
    fn room(&self, cfg: FlowConfig<'_>, key: &Key, idle_ms: i64, now: i64) -> (u32, Option<i64>) {
        match self.live(key, idle_ms, now) {
            Some(f) => {
                let (room, until) =
                    key_room(f.state.allowance(cfg, Timestamp(now)), Some(&f.pace), now);
                let lapses = (!f.state.forced_open()).then(|| f.touched.saturating_add(idle_ms));
                let until = match (until, lapses) {
                    (Some(u), Some(l)) => Some(u.min(l)),
                    (u, _) => u,
                };
                (room, until)
            }
            None => match FlowState::for_key(cfg, Timestamp(now)) {
                Some(s) => key_room(s.allowance(cfg, Timestamp(now)), None, now),
                None => (u32::MAX, None),
            },
        }
    }

    /// Whether `key` is held out of its turns.
    pub(crate) fn is_held(&self, key: &Key) -> bool {
        !self.held_until.is_empty() && self.held_until.contains_key(key)
    }

    fn hold(&mut self, key: &Key, until: i64) {
        if let Some(old) = self.held_until.insert(key.clone(), until) {
            self.held.remove(&(old, key.clone()));
        }
        self.held.insert((until, key.clone()));
    }

    /// Stops holding `key`; whether it was held.
    fn unhold(&mut self, key: &Key) -> bool {
        match self.held_until.remove(key) {
            Some(until) => {
                self.held.remove(&(until, key.clone()));
                true
            }
            None => false,
        }
    }

    /// The held keys whose time came by `now`, no longer held.
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
        out
    }

    /// When the first held key may deliver again (not counting those held until a change).
    pub(crate) fn next_release(&self) -> Option<i64> {
        self.held
            .first()
            .map(|(t, _)| *t)
            .filter(|t| *t != UNTIL_CHANGED)
    }

    /// `key`'s state, made at `now` if it has none or its state lapsed; `None` when `cfg`
    /// governs nothing.
    fn state(
        &mut self,
        cfg: FlowConfig<'_>,
        key: &Key,
        idle_ms: i64,
        now: i64,
    ) -> Option<&mut KeyFlow> {
        if self.live(key, idle_ms, now).is_none() {
            let state = FlowState::for_key(cfg, Timestamp(now))?;
            self.flows.insert(
                key.clone(),
                KeyFlow {
                    state,
                    pace: SlidingWindow::default(),
                    touched: now,
                },
            );
        }
        let f = self.flows.get_mut(key)?;
        f.touched = now;
        Some(f)
    }

    /// `n` deliveries of `key` leased at `now`.
    fn leased(
        &mut self,
        cfg: FlowConfig<'_>,
        key: &Key,
        n: u32,
        idle_ms: i64,
        now: i64,
    ) -> Vec<FlowEvent> {
        let Some(f) = self.state(cfg, key, idle_ms, now) else {
            return Vec::new();
        };
        let (admit, mut events) = f.state.admit(cfg, Timestamp(now));
        if let Admit::Paced { pace, .. } = admit {
            f.pace.record(&pace, Timestamp(now), n as usize);
        }
        events.extend(f.state.leased(cfg, n, Timestamp(now)));
        self.note(&events);
        events
    }

    /// Outcomes of `key`'s deliveries observed at `now`.
    fn observe(
        &mut self,
        cfg: FlowConfig<'_>,
        key: &Key,
        t: &Tally,
        idle_ms: i64,
        now: i64,
    ) -> Vec<FlowEvent> {
        let Some(f) = self.state(cfg, key, idle_ms, now) else {
            return Vec::new();
        };
        let events = f.state.observe(cfg, t, Timestamp(now));
        self.note(&events);
        events
    }

    /// Marks the states to keep when a breaker changed.
    fn note(&mut self, events: &[FlowEvent]) {
        if events.iter().any(|e| matches!(e, FlowEvent::Breaker(_))) {
            self.dirty = true;
        }
    }

    /// Forgets the states that lapsed at `now`.
    fn forget_idle(&mut self, idle_ms: i64, now: i64) {
        let before = self.flows.len();
        self.flows.retain(|_, f| !f.lapsed(idle_ms, now));
        if self.flows.len() != before {
            self.dirty = true;
        }
    }

    /// The states worth keeping across a restart: breakers not closed, or forced.
    pub(crate) fn kept(&self) -> Vec<KeptKeyFlow> {
        let mut out: Vec<KeptKeyFlow> = self
            .flows
            .iter()
            .filter(|(_, f)| {
                f.state.forced_open()
                    || f.state
                        .breaker_state()
                        .is_some_and(|b| b != BreakerState::Closed)
            })
            .map(|(key, f)| KeptKeyFlow {
                key: key.as_deref().map(str::to_owned),
                state: f.state.clone(),
                touched: f.touched,
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Sets the states to `kept`.
    pub(crate) fn restore(&mut self, kept: &[KeptKeyFlow]) {
        *self = KeyFlows::default();
        for k in kept {
            self.flows.insert(
                k.key.as_deref().map(Arc::from),
                KeyFlow {
                    state: k.state.clone(),
                    pace: SlidingWindow::default(),
                    touched: k.touched,
                },
            );
        }
    }

    /// Keys with a state.
    pub(crate) fn len(&self) -> usize {
        self.flows.len()
    }
}

impl QueueState {
    /// What governs `key` of this queue on its own.
    fn key_flow_config(&self, key: &Key) -> FlowConfig<'_> {
        FlowConfig::of_key(&self.config, key.as_deref())
    }

    /// How long an idle key keeps its state, in ms (`i64::MAX` when the queue does not
    /// govern keys).
    fn key_idle_ms(&self) -> i64 {
        sluice_core::adaptive::key_idle(&self.config).map_or(i64::MAX, |d| {
            i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
        })
    }

    /// Whether the queue governs its keys one by one.
    pub(crate) fn governs_keys(&self) -> bool {
        sluice_core::adaptive::governs_keys(&self.config)
    }

    /// How many deliveries `key`'s own state admits at `now` (unlimited when the queue does
    /// not govern keys).
    pub(super) fn flow_room(&self, key: &Key, now: i64) -> usize {
        if !self.governs_keys() {
            return usize::MAX;
        }
        let idle = self.key_idle_ms();
        self.key_flows
            .room(self.key_flow_config(key), key, idle, now)
            .0 as usize
    }

    /// Holds back `key`, found by a receive at `now` with no room in its own state, until
    /// that state may admit deliveries again.
    pub(crate) fn hold_for_flow(&mut self, key: &Key, now: i64) {
        if !self.governs_keys() {
            return;
        }
        let idle = self.key_idle_ms();
        let (room, until) = self
            .key_flows
            .room(self.key_flow_config(key), key, idle, now);
        if let (0, Some(until)) = (room, until) {
            self.key_flows.hold(key, until);
            if let Some(l) = &mut self.lanes {
                l.hold(key.as_ref(), true);
            }
        }
    }

    /// Puts back the keys whose state may admit deliveries again at `now`, unless another
    /// limit still holds them.
    pub(crate) fn release_flow_holds(&mut self, now: i64) {
        for key in self.key_flows.release(now) {
            self.put_back(&key);
        }
    }

    /// Puts `key` back into its lanes' turns unless a limit holds it.
    fn put_back(&mut self, key: &Key) {
        if !self.held_back(key.as_ref())
            && let Some(l) = &mut self.lanes
        {
            l.hold(key.as_ref(), false);
        }
    }

    /// `n` deliveries of each key leased at `now`: their states count them.
    pub(crate) fn key_flows_leased(
        &mut self,
        leased: &HashMap<Key, u32>,
        now: i64,
    ) -> Vec<(Key, FlowEvent)> {
        let mut out = Vec::new();
        let idle = self.key_idle_ms();
        for (key, n) in leased {
            let cfg = FlowConfig::of_key(&self.config, key.as_deref());
            for e in self.key_flows.leased(cfg, key, *n, idle, now) {
                out.push((key.clone(), e));
            }
        }
        out
    }

    /// Outcomes of `key`'s deliveries at `now`: its state learns them, and a key held until a
    /// change is looked at again.
    pub(crate) fn key_flow_observe(&mut self, key: &Key, t: &Tally, now: i64) -> Vec<FlowEvent> {
        let idle = self.key_idle_ms();
        let cfg = FlowConfig::of_key(&self.config, key.as_deref());
        let events = self.key_flows.observe(cfg, key, t, idle, now);
        if self.key_flows.unhold(key) {
            self.put_back(key);
        }
        events
    }

    /// Whether a failed delivery of `key` ending in `outcome` spends the message's attempt,
    /// as far as the key's own breaker says.
    pub(crate) fn key_counts_attempt(
        &self,
        key: &Key,
        outcome: sluice_core::adaptive::Outcome,
        now: i64,
    ) -> bool {
        self.key_flows
            .live(key, self.key_idle_ms(), now)
            .is_none_or(|f| f.state.counts_attempt(outcome))
    }

    /// An operator's order to `key`'s breaker at `now`; its state afterwards, or `None` when
    /// the queue has no per-key breaker.
    pub(crate) fn force_key_breaker(
        &mut self,
        key: &Key,
        force: BreakerForce,
        now: i64,
    ) -> Option<(KeyFlowStats, Vec<FlowEvent>)> {
        sluice_core::adaptive::key_breaker(&self.config)?;
        let idle = self.key_idle_ms();
        let cfg = FlowConfig::of_key(&self.config, key.as_deref());
        let f = self.key_flows.state(cfg, key, idle, now)?;
        let events = f.state.force(force, Timestamp(now));
        let stats = f.state.key_stats(cfg, Timestamp(now));
        self.key_flows.dirty = true;
        if self.key_flows.unhold(key) {
            self.put_back(key);
        }
        Some((stats, events))
    }

    /// `key`'s state for the keys listing at `now`: a fresh one's for a key without state.
    pub(crate) fn key_flow_stats(&self, key: &Key, now: i64) -> Option<KeyFlowStats> {
        if !self.governs_keys() {
            return None;
        }
        let cfg = self.key_flow_config(key);
        match self.key_flows.live(key, self.key_idle_ms(), now) {
            Some(f) => Some(f.state.key_stats(cfg, Timestamp(now))),
            None => {
                FlowState::for_key(cfg, Timestamp(now)).map(|s| s.key_stats(cfg, Timestamp(now)))
            }
        }
    }

    /// Forgets the states of keys idle for the queue's `key_idle_ms` at `now`; all of them
    /// when the queue no longer governs keys.
    pub(crate) fn forget_idle_key_flows(&mut self, now: i64) {
        match sluice_core::adaptive::key_idle(&self.config) {
            Some(idle) => {
                let ms = i64::try_from(idle.as_millis()).unwrap_or(i64::MAX);
                self.key_flows.forget_idle(ms, now);
            }
            None if self.key_flows.len() > 0 => {
                self.key_flows = KeyFlows {
                    held: std::mem::take(&mut self.key_flows.held),
                    held_until: std::mem::take(&mut self.key_flows.held_until),
                    ..KeyFlows::default()
                };
                self.key_flows.dirty = true;
                self.unhold_key_flows();
            }
            None => {}
        }
    }

    /// The queue's adaptive rate or breaker changed at `now`: every key starts afresh but
    /// those an operator forced open, which move into the new settings; no key stays held
    /// under the settings it had.
    pub(crate) fn reconfigure_key_flows(&mut self, now: i64) {
        if !self.governs_keys() {
            self.forget_idle_key_flows(now);
            return;
        }
        self.key_flows.flows.retain(|_, f| f.state.forced_open());
        let keys: Vec<Key> = self.key_flows.flows.keys().cloned().collect();
        for key in keys {
            let cfg = FlowConfig::of_key(&self.config, key.as_deref());
            if let Some(f) = self.key_flows.flows.get_mut(&key) {
                f.state.reconfigure(cfg, Timestamp(now));
            }
        }
        self.key_flows.dirty = true;
        self.unhold_key_flows();
    }

    /// Puts every key held by its state back into its turns (unless another limit holds it).
    fn unhold_key_flows(&mut self) {
        let held: Vec<Key> = self.key_flows.held_until.keys().cloned().collect();
        for key in held {
            self.key_flows.unhold(&key);
            self.put_back(&key);
        }
    }

    /// The keys' states for stats at `now`, on a queue that governs keys.
    pub(crate) fn key_flow_summary(
        &self,
        now: i64,
    ) -> Option<sluice_core::adaptive::KeyFlowSummary> {
        if !self.governs_keys() {
            return None;
        }
        let idle = self.key_idle_ms();
        let live = self
            .key_flows
            .flows
            .iter()
            .filter(|(_, f)| !f.lapsed(idle, now))
            .map(|(k, f)| (k.as_deref(), &f.state));
        Some(sluice_core::adaptive::KeyFlowSummary::of(
            &self.config,
            live,
            Timestamp(now),
        ))
    }

    /// The key states worth keeping across a restart.
    pub(crate) fn kept_key_flows(&self) -> Vec<KeptKeyFlow> {
        if !self.governs_keys() {
            return Vec::new();
        }
        self.key_flows.kept()
    }
}
