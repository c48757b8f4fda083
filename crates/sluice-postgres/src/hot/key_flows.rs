//! Per-key adaptive rates and breakers on PostgreSQL (`"scope": "key"`,
//! `sluice_core::adaptive`): each governed key's flow state in `key_flow`, shared by every node.
//!
//! A queue that governs keys is *limited* (`crate::flow::limited`): its receives take turns on
//! its row on every node, so the states a receive reads cannot change under it. A receive reads
//! the keys held now (one index range: keys whose state admits nothing until a time, stepped
//! over without being read), hands the outcomes this node counted for the queue's keys to their
//! states, reads the states of the keys of the page of candidates it is about to deliver, and
//! leases within each key's room; then it writes back the states of the keys it delivered or
//! found without room (held from then on until their state may admit again).
//!
//! Outcomes reach a key's state with this node's next receive of the queue, or at the latest
//! with its flush (`crate::flow::FLUSH_EVERY`), as the queue-wide state's do. A key's row
//! lapses at its last delivery or outcome plus the queue's `key_idle_ms` (never while forced
//! open): a lapsed row reads as a fresh state, and the background round deletes it.

use std::collections::HashMap;

use sluice_core::adaptive::{
    self, BreakerForce, FlowConfig, FlowEvent, FlowState, KeyFlowStats, UNTIL_CHANGED, key_room,
};
use sluice_core::rate::SlidingWindow;
use sluice_core::{QueueConfig, StoreError, Timestamp};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Json;

use crate::error::{corrupt, db};

/// What a receive of a queue that governs keys hands to its keys' states, and what they give
/// back.
#[derive(Default)]
pub(crate) struct KeyTurn {
    /// Outcomes counted for the queue's keys (key → outcomes), to hand over.
    pub(crate) counted: HashMap<String, crate::flow::Counted>,
    /// Whether they were handed over (the receive read the keys' states).
    pub(crate) consumed: bool,
    /// Events of the keys' states.
    pub(crate) events: Vec<(String, FlowEvent)>,
}

/// Recent deliveries at a key's governed pace: `(at, n)`, oldest first.
type Pace = Vec<(i64, u32)>;

/// One key's row as read, and what this receive made of it.
struct Row {
    state: FlowState,
    pace: Pace,
    /// Changed since read: to be written back.
    changed: bool,
    /// Until when the key is to be held after this receive (`None`: not held).
    held_until: Option<i64>,
}

/// How long a key of queue `cfg` keeps its state without use, in ms.
fn idle_ms(cfg: &QueueConfig) -> i64 {
    adaptive::key_idle(cfg).map_or(i64::MAX, |d| {
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    })
}

/// The pace window of `pace`'s deliveries that still count under `limit` at `now`.
fn window(pace: &mut Pace, limit: &sluice_core::config::RateLimit, now: i64) -> SlidingWindow {
    let period = i64::try_from(limit.period.as_millis()).unwrap_or(i64::MAX);
    pace.retain(|(t, _)| t.saturating_add(period) > now);
    let mut w = SlidingWindow::default();
    for (t, n) in pace.iter() {
        w.record(limit, Timestamp(*t), *n as usize);
    }
    w
}

/// The flow states of one queue's keys, as a receive under the queue's row lock uses them.
pub(crate) struct KeyFlows<'a> {
    cfg: &'a QueueConfig,
    now: i64,
    /// Keys held until a time after `now` (`""`: the implicit key).
    held: HashMap<String, i64>,
    /// The states read (or made), of keys not held.
    rows: HashMap<String, Row>,
    /// Deliveries this receive gave each key.
    taken: HashMap<String, u32>,
}

impl<'a> KeyFlows<'a> {
    /// The keys of queue `q` held at `now`. The caller holds the queue's row lock.
    pub(crate) async fn read(
        c: &impl GenericClient,
        q: &str,
        cfg: &'a QueueConfig,
        now: i64,
    ) -> Result<KeyFlows<'a>, StoreError> {
        let held = crate::hot::key_rates::held_keys(
            c,
            "SELECT fkey, held_until FROM key_flow WHERE queue = $1 AND held_until > $2
             AND coalesce(lapses_at > $2, true)",
            q,
            now,
        )
        .await?;
        Ok(KeyFlows {
            cfg,
            now,
            held,
            rows: HashMap::new(),
            taken: HashMap::new(),
        })
    }

    fn flow_config(&self, key: &str) -> FlowConfig<'a> {
        FlowConfig::of_key(self.cfg, (!key.is_empty()).then_some(key))
    }

    /// Reads the states of `keys` that are neither held nor read yet (a lapsed or missing row
    /// is a fresh state).
    pub(crate) async fn load<'k>(
        &mut self,
        c: &impl GenericClient,
        q: &str,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Result<(), StoreError> {
        let mut want: Vec<&str> = keys
            .into_iter()
            .filter(|k| !self.held.contains_key(*k) && !self.rows.contains_key(*k))
            .collect();
        want.sort_unstable();
        want.dedup();
        if want.is_empty() {
            return Ok(());
        }
        let mut read = read_rows(c, q, &want, self.now).await?;
        for key in want {
            let row = match read.remove(key) {
                Some((state, pace)) => Row {
                    state,
                    pace,
                    changed: false,
                    held_until: None,
                },
                None => {
                    let Some(state) =
                        FlowState::for_key(self.flow_config(key), Timestamp(self.now))
                    else {
                        continue;
                    };
                    // Written only once the key is delivered or an outcome of it arrives, as
                    // the embedded engine makes a key's state.
                    Row {
                        state,
                        pace: Vec::new(),
                        changed: false,
                        held_until: None,
                    }
                }
            };
            self.rows.insert(key.to_owned(), row);
        }
        Ok(())
    }

    /// Hands `counted` (key → outcomes this node counted) to the keys' states; the keys held
    /// are looked at again. Returns the events.
    pub(crate) async fn observe(
        &mut self,
        c: &impl GenericClient,
        q: &str,
        counted: &HashMap<String, crate::flow::Counted>,
    ) -> Result<Vec<(String, FlowEvent)>, StoreError> {
        for key in counted.keys() {
            self.held.remove(key);
        }
        self.load(c, q, counted.keys().map(String::as_str)).await?;
        let mut events = Vec::new();
        for (key, t) in counted {
            let cfg = self.flow_config(key);
            let Some(row) = self.rows.get_mut(key) else {
                continue;
            };
            for e in row.state.observe(cfg, &t.at(self.now), Timestamp(self.now)) {
                events.push((key.clone(), e));
            }
            row.changed = true;
        }
        Ok(events)
    }

    /// How many more deliveries `key`'s state admits in this receive, and until when it
    /// admits none (its state read first).
    fn room_until(&self, key: &str) -> (i64, Option<i64>) {
        if let Some(until) = self.held.get(key) {
            return (0, Some(*until));
        }
        let Some(row) = self.rows.get(key) else {
            return (0, None);
        };
        let cfg = self.flow_config(key);
        let admit = row.state.allowance(cfg, Timestamp(self.now));
        let mut pace = row.pace.clone();
        let w = match admit {
            adaptive::Admit::Paced { pace: p, .. } => Some(window(&mut pace, &p, self.now)),
            _ => None,
        };
        let (room, until) = key_room(admit, w.as_ref(), self.now);
        let taken = self.taken.get(key).copied().unwrap_or(0);
        let left = i64::from(room).saturating_sub(i64::from(taken));
        (left.max(0), if left > 0 { None } else { until })
    }

    /// How many more deliveries `key`'s state admits in this receive.
    pub(crate) fn room(&self, key: &str) -> i64 {
        self.room_until(key).0
    }

    /// Counts one more delivery of `key`.
    pub(crate) fn take(&mut self, key: &str) {
        *self.taken.entry(key.to_owned()).or_insert(0) += 1;
    }

    /// The keys without room: held, or read and found without room.
    pub(crate) fn spent(&self) -> Vec<String> {
        let mut out: Vec<String> = self.held.keys().cloned().collect();
        out.extend(
            self.rows
                .keys()
                .filter(|k| self.room_until(k).0 == 0)
                .cloned(),
        );
        out
    }

    /// When the first key without room may deliver again.
    pub(crate) fn next_free(&self) -> Option<i64> {
        let read = self.rows.keys().filter_map(|k| match self.room_until(k) {
            (0, until) => until,
            _ => None,
        });
        self.held
            .values()
            .copied()
            .chain(read)
            .filter(|t| *t != UNTIL_CHANGED)
            .min()
    }

    /// Writes what this receive did to queue `q`'s key states: each key in `delivered` (key →
    /// deliveries leased) counts them, each key found without room is held; every state
    /// changed is written back. Returns the events.
    pub(crate) async fn write(
        &mut self,
        c: &impl GenericClient,
        q: &str,
        delivered: &HashMap<String, i32>,
    ) -> Result<Vec<(String, FlowEvent)>, StoreError> {
        let now = self.now;
        let mut events = Vec::new();
        for (key, n) in delivered {
            let cfg = self.flow_config(key);
            let Some(row) = self.rows.get_mut(key) else {
                continue;
            };
            let n = u32::try_from(*n).unwrap_or(0);
            let (admit, ev) = row.state.admit(cfg, Timestamp(now));
            events.extend(ev.into_iter().map(|e| (key.clone(), e)));
            if let adaptive::Admit::Paced { pace, .. } = admit {
                window(&mut row.pace, &pace, now);
                row.pace.push((now, n));
            }
            events.extend(
                row.state
                    .leased(cfg, n, Timestamp(now))
                    .into_iter()
                    .map(|e| (key.clone(), e)),
            );
            row.changed = true;
        }
        self.taken.clear();
        let holds: Vec<(String, Option<i64>)> = self
            .rows
            .keys()
            .map(|k| (k.clone(), self.room_until(k)))
            .map(|(k, (room, until))| (k, if room == 0 { until } else { None }))
            .collect();
        for (key, until) in holds {
            let row = self.rows.get_mut(&key).expect("listed above");
            if row.held_until != until {
                row.held_until = until;
                row.changed = true;
            }
        }
        let idle = idle_ms(self.cfg);
        let changed: Vec<(&String, &Row)> = self.rows.iter().filter(|(_, r)| r.changed).collect();
        save(c, q, &changed, idle, now).await?;
        Ok(events)
    }
}

/// The rows of `keys` of queue `q` that have not lapsed at `now`.
async fn read_rows(
    c: &impl GenericClient,
    q: &str,
    keys: &[&str],
    now: i64,
) -> Result<HashMap<String, (FlowState, Pace)>, StoreError> {
    let mut out = HashMap::new();
    for r in c
        .query(
            "SELECT fkey, state, pace FROM key_flow WHERE queue = $1 AND fkey = ANY($2)
             AND coalesce(lapses_at > $3, true)",
            &[&q, &keys, &now],
        )
        .await
        .map_err(|e| db(&e))?
    {
        let state: Json<FlowState> = r.try_get(1).map_err(corrupt)?;
        let pace: Json<Pace> = r.try_get(2).map_err(corrupt)?;
        out.insert(r.try_get(0).map_err(corrupt)?, (state.0, pace.0));
    }
    Ok(out)
}

/// Writes `rows` of queue `q` at `now`; each lapses `idle` ms from now unless forced open.
async fn save(
    c: &impl GenericClient,
    q: &str,
    rows: &[(&String, &Row)],
    idle: i64,
    now: i64,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut keys = Vec::with_capacity(rows.len());
    let (mut states, mut paces) = (Vec::new(), Vec::new());
    let (mut helds, mut lapses, mut breakers, mut rates) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (key, row) in rows {
        keys.push(key.as_str());
        states.push(Json(&row.state));
        paces.push(Json(&row.pace));
        helds.push(row.held_until);
        lapses.push((!row.state.forced_open()).then(|| now.saturating_add(idle)));
        breakers.push(row.state.breaker_state().map(breaker_code));
        rates.push(
            row.state
                .rate_per_min()
                .map(|r| i32::try_from(r).unwrap_or(i32::MAX)),
        );
    }
    c.execute(
        "INSERT INTO key_flow (queue, fkey, state, pace, held_until, lapses_at, breaker,
                               rate_per_min)
         SELECT $1, k, s, p, h, l, b, r
         FROM unnest($2::text[], $3::jsonb[], $4::jsonb[], $5::bigint[], $6::bigint[],
                     $7::int2[], $8::int4[]) AS u(k, s, p, h, l, b, r)
         ON CONFLICT (queue, fkey) DO UPDATE SET state = EXCLUDED.state, pace = EXCLUDED.pace,
             held_until = EXCLUDED.held_until, lapses_at = EXCLUDED.lapses_at,
             breaker = EXCLUDED.breaker, rate_per_min = EXCLUDED.rate_per_min",
        &[
            &q, &keys, &states, &paces, &helds, &lapses, &breakers, &rates,
        ],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}

/// A breaker state as the `breaker` column keeps it.
fn breaker_code(s: adaptive::BreakerState) -> i16 {
    match s {
        adaptive::BreakerState::Closed => 0,
        adaptive::BreakerState::Open => 1,
        adaptive::BreakerState::HalfOpen => 2,
    }
}

/// An operator's order to `key`'s breaker of queue `q` (`cfg`) at `now`, in the caller's
/// transaction, which holds the queue's row lock: the key's state afterwards and the events.
/// `None` when the queue has no per-key breaker.
pub(crate) async fn force(
    c: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    key: &str,
    to: BreakerForce,
    now: i64,
) -> Result<Option<(KeyFlowStats, Vec<FlowEvent>)>, StoreError> {
    if adaptive::key_breaker(cfg).is_none() {
        return Ok(None);
    }
    let mut flows = KeyFlows::read(c, q, cfg, now).await?;
    flows.held.remove(key);
    flows.load(c, q, [key]).await?;
    let fc = flows.flow_config(key);
    let Some(row) = flows.rows.get_mut(key) else {
        return Ok(None);
    };
    let events = row.state.force(to, Timestamp(now));
    let stats = row.state.key_stats(fc, Timestamp(now));
    row.changed = true;
    row.held_until = None;
    let rows: Vec<(&String, &Row)> = flows.rows.iter().collect();
    save(c, q, &rows, idle_ms(cfg), now).await?;
    Ok(Some((stats, events)))
}

/// An operator forces the breaker of `key` (`None`: the implicit key) of `queue` open or
/// closed; the key's state afterwards.
pub(crate) async fn force_key(
    inner: &crate::store::Inner,
    queue: &sluice_core::QueueName,
    key: Option<&sluice_core::MessageKey>,
    to: BreakerForce,
) -> Result<KeyFlowStats, StoreError> {
    let q = queue.as_str();
    let key = key.map_or("", |k| k.as_str());
    let mut conn = inner.conn().await?;
    let (stats, fx) = crate::db::tx::transaction(&mut conn, async |tx| {
        let cfg = crate::db::catalog::config(tx, q, true).await?;
        let now = inner.now();
        let Some((stats, events)) = force(tx, q, &cfg, key, to, now).await? else {
            return Err(StoreError::NoKeyBreaker(q.to_string()));
        };
        let mut fx = crate::db::effects::Effects::default();
        let events: Vec<(String, FlowEvent)> =
            events.into_iter().map(|e| (key.to_owned(), e)).collect();
        crate::flow::audit_keys(inner, &mut fx, q, now, &events);
        fx.wake.insert(q.to_string());
        fx.write(tx).await?;
        Ok((stats, fx))
    })
    .await?;
    fx.after_commit(inner);
    Ok(stats)
}

/// Whether a failed delivery of `key` of queue `q` ending in `outcome` spends the message's
/// attempt, as the key's stored state says with this node's outcomes not yet handed over
/// (`pending`) applied; read without a lock, as the queue-wide state's.
pub(crate) async fn counts_attempt(
    c: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    key: &str,
    pending: Option<&crate::flow::Counted>,
    outcome: adaptive::Outcome,
    now: i64,
) -> Result<bool, StoreError> {
    let Some((mut state, _)) = read_rows(c, q, &[key], now).await?.remove(key) else {
        return Ok(true);
    };
    if let Some(t) = pending {
        let fc = FlowConfig::of_key(cfg, (!key.is_empty()).then_some(key));
        state.observe(fc, &t.at(now), Timestamp(now));
    }
    Ok(state.counts_attempt(outcome))
}

/// Each of `keys` of queue `q` (`cfg`): its state for the keys listing at `now` (a fresh
/// state's for a key without one).
pub(crate) async fn stats(
    c: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    keys: &[&str],
    now: i64,
) -> Result<HashMap<String, KeyFlowStats>, StoreError> {
    let mut read = read_rows(c, q, keys, now).await?;
    let at = Timestamp(now);
    let mut out = HashMap::new();
    for key in keys {
        let fc = FlowConfig::of_key(cfg, (!key.is_empty()).then_some(*key));
        let state = match read.remove(*key) {
            Some((s, _)) => Some(s),
            None => FlowState::for_key(fc, at),
        };
        if let Some(s) = state {
            out.insert((*key).to_owned(), s.key_stats(fc, at));
        }
    }
    Ok(out)
}

/// After queue `q`'s adaptive rate, breaker or limits changed (to `cfg`, at `now`): every key starts
/// afresh but those an operator forced open, which move into the new settings (all go when
/// the queue no longer governs keys); no key stays held under the settings it had.
pub(crate) async fn reconfigure(
    c: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    now: i64,
) -> Result<(), StoreError> {
    if !adaptive::governs_keys(cfg) {
        c.execute("DELETE FROM key_flow WHERE queue = $1", &[&q])
            .await
            .map_err(|e| db(&e))?;
        return Ok(());
    }
    c.execute(
        "DELETE FROM key_flow WHERE queue = $1 AND lapses_at IS NOT NULL",
        &[&q],
    )
    .await
    .map_err(|e| db(&e))?;
    let mut forced = HashMap::new();
    for r in c
        .query("SELECT fkey, state FROM key_flow WHERE queue = $1", &[&q])
        .await
        .map_err(|e| db(&e))?
    {
        let state: Json<FlowState> = r.try_get(1).map_err(corrupt)?;
        forced.insert(r.try_get::<_, String>(0).map_err(corrupt)?, state.0);
    }
    let mut rows = Vec::new();
    for (key, mut state) in forced {
        let fc = FlowConfig::of_key(cfg, (!key.is_empty()).then_some(key.as_str()));
        state.reconfigure(fc, Timestamp(now));
        rows.push((
            key,
            Row {
                state,
                pace: Vec::new(),
                changed: true,
                held_until: None,
            },
        ));
    }
    let refs: Vec<(&String, &Row)> = rows.iter().map(|(k, r)| (k, r)).collect();
    save(c, q, &refs, idle_ms(cfg), now).await
}

/// Forgets up to `most` key states that lapsed at `now`.
pub(crate) async fn prune(c: &impl GenericClient, now: i64, most: i64) -> Result<(), StoreError> {
    c.execute(
        "DELETE FROM key_flow WHERE ctid IN
             (SELECT ctid FROM key_flow WHERE lapses_at <= $1 LIMIT $2)",
        &[&now, &most],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}

/// The key states of each of `names` that governs keys, for stats at `now`: counted by the
/// database from the narrow `breaker` and `rate_per_min` columns every write keeps beside the
/// JSON (one grouped count over the queues' live rows, and the top rates of each by an index),
/// so a queue governing 100,000 keys costs a scan of small columns, not of its states.
pub(crate) async fn summaries(
    c: &impl GenericClient,
    names: &[&str],
    now: i64,
) -> Result<HashMap<String, adaptive::KeyFlowSummary>, StoreError> {
    let governed: Vec<String> = c
        .query(
            "SELECT name FROM queues WHERE name = ANY($1)
             AND (config->'adaptive'->>'scope' = 'key' OR config->'breaker'->>'scope' = 'key')",
            &[&names],
        )
        .await
        .map_err(|e| db(&e))?
        .iter()
        .map(|r| r.try_get(0).map_err(corrupt))
        .collect::<Result<_, _>>()?;
    if governed.is_empty() {
        return Ok(HashMap::new());
    }
    let mut out: HashMap<String, adaptive::KeyFlowSummary> = governed
        .iter()
        .map(|q| (q.clone(), adaptive::KeyFlowSummary::default()))
        .collect();
    let count = |r: &tokio_postgres::Row, i: usize| -> Result<u64, StoreError> {
        Ok(u64::try_from(r.try_get::<_, i64>(i).map_err(corrupt)?).unwrap_or(0))
    };
    for r in c
        .query(
            "SELECT queue, count(*), count(*) FILTER (WHERE breaker = 1),
                    count(*) FILTER (WHERE breaker = 2)
             FROM key_flow WHERE queue = ANY($1) AND coalesce(lapses_at > $2, true)
             GROUP BY queue",
            &[&governed, &now],
        )
        .await
        .map_err(|e| db(&e))?
    {
        let q: String = r.try_get(0).map_err(corrupt)?;
        if let Some(s) = out.get_mut(&q) {
            (s.keys, s.open, s.half_open) = (count(&r, 1)?, count(&r, 2)?, count(&r, 3)?);
        }
    }
    let top = i64::try_from(adaptive::TOP_KEY_RATES).unwrap_or(10);
    for r in c
        .query(
            "SELECT g.q, t.fkey, t.rate_per_min FROM unnest($1::text[]) AS g(q)
             CROSS JOIN LATERAL (
                 SELECT fkey, rate_per_min FROM key_flow
                 WHERE queue = g.q AND rate_per_min IS NOT NULL
                     AND coalesce(lapses_at > $2, true)
                 ORDER BY rate_per_min DESC, fkey LIMIT $3
             ) t",
            &[&governed, &now, &top],
        )
        .await
        .map_err(|e| db(&e))?
    {
        let q: String = r.try_get(0).map_err(corrupt)?;
        let key: String = r.try_get(1).map_err(corrupt)?;
        let rate: i32 = r.try_get(2).map_err(corrupt)?;
        if let Some(s) = out.get_mut(&q) {
            s.top_rates.push((
                (!key.is_empty()).then_some(key),
                u32::try_from(rate).unwrap_or(0),
            ));
        }
    }
    Ok(out)
}
