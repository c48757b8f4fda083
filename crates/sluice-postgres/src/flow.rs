//! Governed queues (`adaptive` and `breaker`, see `sluice_core::adaptive`) on PostgreSQL: one
//! state per queue in `queue_flow`, shared by every node on the database.
//!
//! - **Every write** of a queue's state holds the lock of the queue's row in `queues`, which
//!   the receives of a governed queue take anyway: receives of such a queue take turns on
//!   every node, as those of a queue with `rate_limit` or `max_in_flight` do.
//! - **Receives** ([`receive`]), in their transaction: the outcomes this node counted for the
//!   queue are observed, then `admit` says how many may go; the lease takes at most that
//!   (`Shut`: none, and a long poll asks again at its `until`; `Probe`: at most its `n`;
//!   `Paced`: at most what its pace allows over the queue's recent deliveries, a sliding
//!   window kept in the row beside the state), then `leased`, and the row is written back
//!   when it changed.
//! - **Outcomes** (ack, nack, reject, lease expiry, release, move) are counted per node in
//!   memory, a [`Tally`] per queue ([`Pending`]), once the change that ended the lease has
//!   committed. They reach the shared state with the node's next receive of the queue, or at
//!   the latest with the node's flush every [`FLUSH_EVERY`] ([`run`]). A node sees its own
//!   outcomes at once; another node's within [`FLUSH_EVERY`] (plus the time the flush
//!   takes), so a breaker fed by several nodes opens that much later than on the embedded
//!   engine, and a few more deliveries may go out meanwhile. Outcomes counted by a node that
//!   stops before its flush are lost: a few calls the breaker's window does not see.
//! - **Nacks** ask `counts_attempt` of the stored state with this node's pending outcomes
//!   applied to a copy, without a lock ([`counts_attempt`]).
//! - **Time**: the maintenance round ticks the governed queues whose state a tick changes
//!   (an open breaker turning half-open while nobody receives), reading only the rows of
//!   `queue_flow` ([`tick_all`]).
//!
//! A queue that is not governed pays nothing: it has no row, and the hot paths decide from
//! the configuration they already hold, without a query.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::Duration;

use sluice_core::adaptive::{
    Admit, BreakerForce, FlowConfig, FlowEvent, FlowState, FlowStats, KeyAuditBudget, Outcome,
    Tally,
};
use sluice_core::rate::SlidingWindow;
use sluice_core::{QueueConfig, QueueName, ReceiveRequest, StoreError, Timestamp};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Json;

use crate::db::effects::Effects;
use crate::error::{corrupt, db};
use crate::hot::key_flows::{KeyFlows, KeyTurn};
use crate::hot::leases::{Attempted, LEASE_SQL, Takers, take_leases_limited};
use crate::local::QueueLocal;
use crate::store::Inner;

/// How often a node hands the outcomes it counted to the shared state of their queues.
/// Short, since a breaker fed by other nodes reacts this much later; a flush costs nothing
/// while no governed queue had outcomes on this node.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// What governs a queue with configuration `c` as a whole (its parts of `scope: queue`).
pub(crate) fn flow_config(c: &QueueConfig) -> FlowConfig<'_> {
    FlowConfig::of_queue(c)
}

/// Whether a queue with configuration `c` is governed, as a whole or key by key.
pub(crate) fn governed(c: &QueueConfig) -> bool {
    c.adaptive.is_some() || c.breaker.is_some()
}

/// Whether a queue's receives must take turns on its row: global limits, or a governed
/// queue. Such a queue's messages are leased as rows only (never in packs, never handed
/// over by a send).
pub(crate) fn limited(c: &QueueConfig) -> bool {
    c.rate_limit.is_some() || c.max_in_flight.is_some() || c.key_limits.is_some() || governed(c)
}

/// Outcomes counted before they are observed: a [`Tally`], with the longest Retry-After
/// among them kept as the time it ends, so that outcomes observed later still hold
/// deliveries until the time the dependency named, not that much after the observation.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counted {
    tally: Tally,
    /// When the longest Retry-After ends (ms).
    hold_until: Option<i64>,
}

impl Counted {
    /// `n` times `outcome`, at `now`.
    pub(crate) fn of(outcome: Outcome, n: u32, now: i64) -> Self {
        let mut c = Counted::default();
        c.add(outcome, n, now);
        c
    }

    /// Counts `n` more `outcome`s, at `now`.
    pub(crate) fn add(&mut self, outcome: Outcome, n: u32, now: i64) {
        if n == 0 {
            return;
        }
        self.tally.add(outcome, n);
        if let Outcome::Congestion {
            retry_after: Some(d),
        } = outcome
        {
            let until = now.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            self.hold_until = self.hold_until.max(Some(until));
        }
    }

    /// Adds `other`'s counts to these.
    pub(crate) fn merge(&mut self, other: &Counted) {
        self.tally.merge(&other.tally);
        self.hold_until = self.hold_until.max(other.hold_until);
    }

    /// True when nothing was counted.
    pub(crate) fn is_empty(&self) -> bool {
        self.tally.is_empty()
    }

    /// The tally to observe at `now`: its longest Retry-After is what is left of it.
    pub(crate) fn at(&self, now: i64) -> Tally {
        let mut t = self.tally;
        if let Some(h) = self.hold_until {
            let left = u64::try_from(h.saturating_sub(now)).unwrap_or(0);
            t.longest_retry_after = Some(Duration::from_millis(left));
        }
        t
    }
}

/// What this node counted and keeps per governed queue, not yet handed to the shared state.
#[derive(Default)]
struct Counts {
    /// Per queue.
    queues: HashMap<String, Counted>,
    /// Per queue that governs keys, per key (`""`: the implicit key).
    keys: HashMap<String, HashMap<String, Counted>>,
    /// Per queue, this node's allowance of key breaker audit entries.
    budgets: HashMap<String, KeyAuditBudget>,
}

/// The outcomes this node counted, per governed queue (and per key of a queue that governs
/// keys), not yet handed to the shared state.
#[derive(Default)]
pub(crate) struct Pending(Mutex<Counts>);

impl Pending {
    /// Counts `c` for `queue`.
    pub(crate) fn add(&self, queue: &str, c: &Counted) {
        if c.is_empty() {
            return;
        }
        let mut map = self.map();
        match map.queues.get_mut(queue) {
            Some(mine) => mine.merge(c),
            None => {
                map.queues.insert(queue.to_string(), *c);
            }
        }
    }

    /// Counts `counted` (key → outcomes) for the keys of `queue`.
    pub(crate) fn add_keys(&self, queue: &str, counted: &HashMap<String, Counted>) {
        if counted.is_empty() {
            return;
        }
        let mut map = self.map();
        let keys = map.keys.entry(queue.to_string()).or_default();
        for (key, c) in counted {
            keys.entry(key.clone()).or_default().merge(c);
        }
    }

    /// Takes what was counted for `queue`.
    pub(crate) fn take(&self, queue: &str) -> Option<Counted> {
        self.map().queues.remove(queue)
    }

    /// Takes what was counted for the keys of `queue`.
    pub(crate) fn take_keys(&self, queue: &str) -> HashMap<String, Counted> {
        self.map().keys.remove(queue).unwrap_or_default()
    }

    /// What was counted for `queue`, left counted.
    pub(crate) fn peek(&self, queue: &str) -> Option<Counted> {
        self.map().queues.get(queue).copied()
    }

    /// Whether anything was counted for the keys of `queue`.
    pub(crate) fn has_keys(&self, queue: &str) -> bool {
        self.map().keys.contains_key(queue)
    }

    /// What was counted for `key` of `queue`, left counted.
    pub(crate) fn peek_key(&self, queue: &str, key: &str) -> Option<Counted> {
        self.map().keys.get(queue).and_then(|k| k.get(key)).copied()
    }

    /// The audit entries of `events` of `queue`'s keys at `now`, within this node's
    /// allowance for the queue (with an entry saying how many the last minute left out).
    pub(crate) fn key_audits(
        &self,
        queue: &str,
        now: i64,
        events: &[(String, FlowEvent)],
    ) -> Vec<sluice_core::AuditEvent> {
        let mut map = self.map();
        let budget = map.budgets.entry(queue.to_string()).or_default();
        budget.entries(
            queue,
            Timestamp(now),
            events
                .iter()
                .map(|(k, e)| ((!k.is_empty()).then_some(k.as_str()), *e)),
        )
    }

    /// The queues with outcomes counted.
    fn queues(&self) -> Vec<String> {
        let map = self.map();
        let mut out: Vec<String> = map.queues.keys().chain(map.keys.keys()).cloned().collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn map(&self) -> MutexGuard<'_, Counts> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a receive or flush took of this node's counts, to count again if its transaction
/// fails.
#[derive(Default)]
pub(crate) struct Taken {
    /// The queue's outcomes.
    pub(crate) queue: Option<Counted>,
    /// Its keys' outcomes.
    pub(crate) keys: HashMap<String, Counted>,
}

impl Taken {
    /// Counts again what was taken for `q`.
    pub(crate) fn give_back(self, inner: &Inner, q: &str) {
        if let Some(t) = self.queue {
            inner.flow.add(q, &t);
        }
        inner.flow.add_keys(q, &self.keys);
    }
}

/// Writes `events` of queue `q`'s keys to the audit log with the transaction (within this
/// node's allowance), and wakes the queue's receives once it has committed.
pub(crate) fn audit_keys(
    inner: &Inner,
    fx: &mut Effects,
    q: &str,
    now: i64,
    events: &[(String, FlowEvent)],
) {
    fx.audit.extend(inner.flow.key_audits(q, now, events));
    if !events.is_empty() {
        fx.wake.insert(q.to_string());
    }
}

/// Recent deliveries at the governed pace: `(at, n)`, oldest first.
type Pace = Vec<(i64, u32)>;

/// A governed queue's row: its state and recent paced deliveries, and both as read, so that
/// it is written only when it changed.
struct Shared {
    state: FlowState,
    pace: Pace,
    stored: Option<(FlowState, Pace)>,
}

impl Shared {
    /// The row of queue `q`, governed by `fc`; a fresh state when it has none yet; `None`
    /// when `fc` governs nothing.
    async fn load(
        c: &impl GenericClient,
        q: &str,
        fc: FlowConfig<'_>,
        now: Timestamp,
    ) -> Result<Option<Shared>, StoreError> {
        if !fc.is_governed() {
            return Ok(None);
        }
        let row = c
            .query_opt("SELECT state, pace FROM queue_flow WHERE queue = $1", &[&q])
            .await
            .map_err(|e| db(&e))?;
        Ok(match row {
            Some(r) => {
                let state: Json<FlowState> = r.try_get(0).map_err(corrupt)?;
                let pace: Json<Pace> = r.try_get(1).map_err(corrupt)?;
                Some(Shared {
                    state: state.0.clone(),
                    pace: pace.0.clone(),
                    stored: Some((state.0, pace.0)),
                })
            }
            None => FlowState::new(fc, now).map(|state| Shared {
                state,
                pace: Vec::new(),
                stored: None,
            }),
        })
    }

    /// Writes the row back when it changed.
    async fn save(&self, c: &impl GenericClient, q: &str, now: i64) -> Result<(), StoreError> {
        if let Some((state, pace)) = &self.stored
            && *state == self.state
            && *pace == self.pace
        {
            return Ok(());
        }
        c.execute(
            "INSERT INTO queue_flow (queue, state, pace, updated_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (queue) DO UPDATE SET state = EXCLUDED.state, pace = EXCLUDED.pace,
                 updated_at = EXCLUDED.updated_at",
            &[&q, &Json(&self.state), &Json(&self.pace), &now],
        )
        .await
        .map_err(|e| db(&e))?;
        Ok(())
    }
}

/// Writes `events` of queue `q` to the audit log with the transaction, and wakes its waiting
/// receives on every node once it has committed (a breaker that closed or turned half-open
/// lets deliveries through).
fn audit(fx: &mut Effects, q: &str, events: &[FlowEvent]) {
    if events.is_empty() {
        return;
    }
    fx.audit.extend(events.iter().map(|e| e.audit(q)));
    fx.wake.insert(q.to_string());
}

/// The receive of a governed queue, in the caller's transaction, which holds the lock of the
/// queue's row and has expired what was due (its lease expiries counted in `fx`). The
/// outcomes this node counted for the queue and its keys are taken into `taken`, for the
/// caller to count again if the transaction fails.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn receive(
    tx: &tokio_postgres::Transaction<'_>,
    inner: &Inner,
    local: &QueueLocal,
    cfg: &QueueConfig,
    req: &ReceiveRequest,
    now: i64,
    fx: &mut Effects,
    taken: &mut Taken,
) -> Result<Attempted, StoreError> {
    let q = local.name.as_str();
    let mut turn = KeyTurn::default();
    // Lease expiries of this transaction, handed over with the node's counts.
    let expired = fx.key_flow.remove(q).unwrap_or_default();
    if sluice_core::adaptive::governs_keys(cfg) {
        taken.keys = inner.flow.take_keys(q);
        turn.counted = taken.keys.clone();
        for (key, c) in &expired {
            turn.counted.entry(key.clone()).or_default().merge(c);
        }
    }
    let outcome = receive_governed(tx, inner, local, cfg, req, now, fx, taken, &mut turn).await?;
    if turn.consumed {
        audit_keys(inner, fx, q, now, &turn.events);
    } else {
        // Not handed to the keys' states (nothing was leased by key): counted again, for the
        // next receive or flush.
        inner.flow.add_keys(q, &std::mem::take(&mut taken.keys));
        if !expired.is_empty() {
            fx.key_flow.insert(q.to_string(), expired);
        }
    }
    Ok(outcome)
}

/// [`receive`], with what the keys' states are handed and give in `turn`.
#[allow(clippy::too_many_arguments)]
async fn receive_governed(
    tx: &tokio_postgres::Transaction<'_>,
    inner: &Inner,
    local: &QueueLocal,
    cfg: &QueueConfig,
    req: &ReceiveRequest,
    now: i64,
    fx: &mut Effects,
    taken: &mut Taken,
    turn: &mut KeyTurn,
) -> Result<Attempted, StoreError> {
    let q = local.name.as_str();
    let fc = flow_config(cfg);
    let at = Timestamp(now);
    let takers = Takers::All(req.consumer.as_deref());
    let Some(mut sh) = Shared::load(tx, q, fc, at).await? else {
        return Ok(
            take_leases_limited(tx, LEASE_SQL, local, cfg, req, now, takers, turn)
                .await?
                .untagged(),
        );
    };
    taken.queue = inner.flow.take(q);
    let mut counted = taken.queue.unwrap_or_default();
    if let Some(expired) = fx.flow.remove(q) {
        counted.merge(&expired);
    }
    let mut events = if counted.is_empty() {
        Vec::new()
    } else {
        sh.state.observe(fc, &counted.at(now), at)
    };
    let outcome = if cfg.paused {
        Attempted::Empty { next_wake: None }
    } else {
        let (admit, ev) = sh.state.admit(fc, at);
        events.extend(ev);
        let mut paced = false;
        let allowed = match admit {
            Admit::Shut { until } => Err(until.map(Timestamp::as_millis)),
            Admit::Probe { n } => Ok(n),
            Admit::Paced { pace, .. } => {
                let period = i64::try_from(pace.period.as_millis()).unwrap_or(i64::MAX);
                sh.pace.retain(|(t, _)| t.saturating_add(period) > now);
                let mut window = SlidingWindow::default();
                // The pace's burst is its whole limit: the window alone spaces deliveries,
                // and it is rebuilt from the deliveries that still count.
                for (t, n) in &sh.pace {
                    window.record(&pace, Timestamp(*t), *n as usize);
                }
                match window.available(&pace, at) {
                    0 => Err(window.next_free(&pace, at).map(Timestamp::as_millis)),
                    n => {
                        paced = true;
                        Ok(n)
                    }
                }
            }
            Admit::Free => {
                sh.pace.clear();
                Ok(u32::MAX)
            }
        };
        match allowed {
            Err(next_wake) => Attempted::Empty { next_wake },
            Ok(n) => {
                let capped = ReceiveRequest {
                    max: req.max.min(n),
                    wait: req.wait,
                    visibility: req.visibility,
                    consumer: req.consumer.clone(),
                };
                let outcome =
                    take_leases_limited(tx, LEASE_SQL, local, cfg, &capped, now, takers, turn)
                        .await?
                        .untagged();
                if let Attempted::Got(out) = &outcome {
                    let n = u32::try_from(out.len()).unwrap_or(u32::MAX);
                    events.extend(sh.state.leased(fc, n, at));
                    if paced {
                        sh.pace.push((now, n));
                    }
                }
                outcome
            }
        }
    };
    sh.save(tx, q, now).await?;
    audit(fx, q, &events);
    Ok(outcome)
}

/// Runs `f` on queue `q`'s shared state in a transaction of its own under the lock of the
/// queue's row, after observing the outcomes this node counted for it; writes the state back
/// when it changed and its events to the audit log. `None` when the queue is not governed.
async fn locked<T>(
    inner: &Inner,
    q: &str,
    f: impl FnOnce(
        &QueueConfig,
        &mut FlowState,
        Timestamp,
        &mut Vec<FlowEvent>,
    ) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let mut conn = inner.conn().await?;
    let mut taken = Taken::default();
    let done = crate::db::tx::transaction(&mut conn, async |tx| {
        let cfg = crate::db::catalog::config(tx, q, true).await?;
        // Taken under the lock: a receive of the queue waiting for it then finds them
        // observed, never taken and not yet written.
        taken.queue = inner.flow.take(q);
        taken.keys = inner.flow.take_keys(q);
        let now = Timestamp(inner.now());
        let mut fx = Effects::default();
        if !taken.keys.is_empty() && sluice_core::adaptive::governs_keys(&cfg) {
            let mut keys = KeyFlows::read(tx, q, &cfg, now.as_millis()).await?;
            let mut events = keys.observe(tx, q, &taken.keys).await?;
            events.extend(keys.write(tx, q, &HashMap::new()).await?);
            audit_keys(inner, &mut fx, q, now.as_millis(), &events);
        }
        let fc = flow_config(&cfg);
        let out = match Shared::load(tx, q, fc, now).await? {
            Some(mut sh) => {
                let mut events = match &taken.queue {
                    Some(t) => sh.state.observe(fc, &t.at(now.as_millis()), now),
                    None => Vec::new(),
                };
                let out = f(&cfg, &mut sh.state, now, &mut events)?;
                sh.save(tx, q, now.as_millis()).await?;
                audit(&mut fx, q, &events);
                Some(out)
            }
            // Not governed as a whole (any more): what was counted has nowhere to go.
            None => None,
        };
        fx.write(tx).await?;
        Ok((out, fx))
    })
    .await;
    match done {
        Ok((out, fx)) => {
            fx.after_commit(inner);
            Ok(out)
        }
        Err(e) => {
            if !matches!(e, StoreError::QueueNotFound(_)) {
                taken.give_back(inner, q);
            }
            Err(e)
        }
    }
}

/// Hands the outcomes this node counted for `q` (and its keys) to their shared state, if it
/// counted any.
pub(crate) async fn flush_queue(inner: &Inner, q: &str) -> Result<(), StoreError> {
    if inner.flow.peek(q).is_none() && !inner.flow.has_keys(q) {
        return Ok(());
    }
    match locked(inner, q, |_, _, _, _| Ok(())).await {
        Ok(_) => Ok(()),
        Err(StoreError::QueueNotFound(_)) => {
            // Deleted: what was counted has nowhere to go.
            inner.flow.take(q);
            inner.flow.take_keys(q);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Hands every outcome this node counted to the shared state of its queue; what cannot be
/// written stays counted for the next flush.
pub(crate) async fn flush(inner: &Inner) -> Result<(), StoreError> {
    let mut failed = None;
    for q in inner.flow.queues() {
        if let Err(e) = flush_queue(inner, &q).await {
            failed.get_or_insert(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Flushes this node's outcomes every [`FLUSH_EVERY`] while the store lives.
pub(crate) async fn run(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = flush(&inner).await {
            tracing::debug!(error = %e, "could not hand outcomes of governed queues to their state; will retry");
        }
    }
}

/// The maintenance round's part: time-driven transitions of governed queues (an open breaker
/// turns half-open while nobody receives). Reads the rows of `queue_flow` only, and locks a
/// queue only when a tick changes its state. A row that cannot be read is skipped with a
/// warning: one queue's damaged state does not stop the others' breakers.
pub(crate) async fn tick_all(inner: &Inner) -> Result<(), StoreError> {
    let now = Timestamp(inner.now());
    let rows = {
        let conn = inner.conn().await?;
        conn.query(
            "SELECT f.queue, f.state, q.config FROM queue_flow f JOIN queues q ON q.name = f.queue",
            &[],
        )
        .await
        .map_err(|e| db(&e))?
    };
    for r in &rows {
        let Some((q, mut state, cfg)) = flow_row(r, "its breaker is not ticked") else {
            continue;
        };
        if state.tick(flow_config(&cfg), now).is_empty() {
            continue;
        }
        let ticked = locked(inner, &q, |cfg, state, now, events| {
            events.extend(state.tick(flow_config(cfg), now));
            Ok(())
        })
        .await;
        match ticked {
            Ok(_) | Err(StoreError::QueueNotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A row of `queue_flow` joined with its queue's configuration (`queue`, `state`, `config`), or
/// `None` with a warning saying what is `skipped` when it cannot be read: one queue's damaged
/// state does not fail the others'.
fn flow_row(r: &tokio_postgres::Row, skipped: &str) -> Option<(String, FlowState, QueueConfig)> {
    let read = || -> Result<_, StoreError> {
        let q: String = r.try_get(0).map_err(corrupt)?;
        let state: Json<FlowState> = r.try_get(1).map_err(corrupt)?;
        let cfg: Json<QueueConfig> = r.try_get(2).map_err(corrupt)?;
        Ok((q, state.0, cfg.0))
    };
    match read() {
        Ok(row) => Some(row),
        Err(e) => {
            let queue = r.try_get::<_, String>(0).unwrap_or_default();
            tracing::warn!(%queue, error = %e, "a governed queue's state could not be read; {skipped}");
            None
        }
    }
}

/// An operator forces queue `queue`'s breaker open or closed; the state afterwards.
pub(crate) async fn force(
    inner: &Inner,
    queue: &QueueName,
    to: BreakerForce,
) -> Result<FlowStats, StoreError> {
    let no_breaker = || StoreError::NoBreaker(queue.to_string());
    let forced = locked(inner, queue.as_str(), |cfg, state, now, events| {
        if flow_config(cfg).breaker.is_none() {
            return Err(no_breaker());
        }
        events.extend(state.force(to, now));
        Ok(state.stats(flow_config(cfg), now))
    })
    .await?;
    forced.ok_or_else(no_breaker)
}

/// Whether a failed delivery of `key` of governed queue `q` ending in `outcome` spends the
/// message's attempt: never for congestion, and not while the queue's or the key's breaker is
/// open or half-open, as the
/// stored state says with this node's outcomes not
/// yet handed over applied. Read without a lock, so outcomes that a flush of this node is
/// writing at that very moment (taken, not yet committed) are not seen: the answer may be a
/// few milliseconds late, as on another node.
pub(crate) async fn counts_attempt(
    c: &impl GenericClient,
    inner: &Inner,
    q: &str,
    cfg: &QueueConfig,
    key: Option<&str>,
    outcome: Outcome,
    now: i64,
) -> Result<bool, StoreError> {
    if matches!(outcome, Outcome::Congestion { .. }) {
        return Ok(false);
    }
    if sluice_core::adaptive::governs_keys(cfg) {
        let key = key.unwrap_or_default();
        let pending = inner.flow.peek_key(q, key);
        let by_key =
            crate::hot::key_flows::counts_attempt(c, q, cfg, key, pending.as_ref(), outcome, now)
                .await?;
        if !by_key {
            return Ok(false);
        }
    }
    let fc = flow_config(cfg);
    let at = Timestamp(now);
    let Some(mut sh) = Shared::load(c, q, fc, at).await? else {
        return Ok(true);
    };
    if let Some(t) = inner.flow.peek(q) {
        sh.state.observe(fc, &t.at(now), at);
    }
    Ok(sh.state.counts_attempt(outcome))
}

/// Queue `q`'s configuration became `cfg` (from `was`), in the caller's transaction, which
/// holds the lock of the queue's row: the learned state moves into the new bounds (a part
/// switched on starts afresh, a part switched off is dropped), a queue governed from now on
/// gets its row, and one no longer governed loses it.
pub(crate) async fn reconfigure(
    c: &impl GenericClient,
    q: &str,
    was: Option<&QueueConfig>,
    cfg: &QueueConfig,
    now: i64,
    fx: &mut Effects,
) -> Result<(), StoreError> {
    let fc = flow_config(cfg);
    if !fc.is_governed() {
        if was.is_some_and(governed) {
            c.execute("DELETE FROM queue_flow WHERE queue = $1", &[&q])
                .await
                .map_err(|e| db(&e))?;
        }
        return Ok(());
    }
    let at = Timestamp(now);
    let Some(mut sh) = Shared::load(c, q, fc, at).await? else {
        return Ok(());
    };
    // A queue governed from now on starts afresh, even over a row left behind (by a node of
    // an earlier version that deleted the queue without it).
    let events = if was.is_some_and(governed) && sh.stored.is_some() {
        sh.state.reconfigure(fc, at)
    } else {
        if let Some(fresh) = FlowState::new(fc, at) {
            sh.state = fresh;
        }
        Vec::new()
    };
    sh.save(c, q, now).await?;
    audit(fx, q, &events);
    Ok(())
}

/// Queue `q`'s adaptive rate and breaker as stored, when `cfg` governs it.
pub(crate) async fn stats(
    c: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    now: i64,
) -> Result<Option<FlowStats>, StoreError> {
    let fc = flow_config(cfg);
    let at = Timestamp(now);
    Ok(Shared::load(c, q, fc, at)
        .await?
        .map(|sh| sh.state.stats(fc, at)))
}

/// [`stats`] of every governed queue among `names`, in one query.
pub(crate) async fn stats_many(
    c: &impl GenericClient,
    names: &[&str],
    now: i64,
) -> Result<HashMap<String, FlowStats>, StoreError> {
    let rows = c
        .query(
            "SELECT f.queue, f.state, q.config FROM queue_flow f JOIN queues q ON q.name = f.queue
             WHERE f.queue = ANY($1)",
            &[&names],
        )
        .await
        .map_err(|e| db(&e))?;
    let at = Timestamp(now);
    let mut out = HashMap::with_capacity(rows.len());
    for r in &rows {
        let Some((q, state, cfg)) = flow_row(r, "its flow is left out of stats") else {
            continue;
        };
        let fc = flow_config(&cfg);
        if fc.is_governed() {
            out.insert(q, state.stats(fc, at));
        }
    }
    Ok(out)
}
