//! Per-key rate limits on PostgreSQL (`key_limits.rate_limit`): each key's sliding window and
//! pace (`sluice_core::rate`), shared by every node.
//!
//! A queue with key rates is *limited*: its receives take turns on its row on every node, so
//! the windows a receive reads cannot change under it, and the limits are exact across nodes.
//! A key's window is its rows of `key_rate_events` (one per lease that delivered it) and its
//! row of `key_paces` (the pace, and until when the key has no room). A receive reads the keys
//! held now (one index range), and the windows of the keys it is about to deliver (those of a
//! page of candidates); it writes an event per key it delivered and the pace of each key it
//! delivered or found spent, which is then held until its window frees a place, and stepped
//! over by later receives without being read. A key's rows go once its window is as good as
//! new (the background round), so a key's rate state lives at most a period past its last
//! delivery.

use std::collections::{HashMap, HashSet};

use sluice_core::config::RateLimit;
use sluice_core::fair::KeyLimits;
use sluice_core::rate::SlidingWindow;
use sluice_core::{StoreError, Timestamp};
use tokio_postgres::GenericClient;

use crate::error::{corrupt, db};

/// The rates of one queue's keys, as a receive under the queue's row lock uses them up.
pub(crate) struct KeyRates<'a> {
    limits: &'a KeyLimits,
    now: i64,
    /// Keys without room until a time after `now` (`""`: the implicit key).
    held: HashMap<String, i64>,
    /// The windows read, of keys not held.
    windows: HashMap<String, SlidingWindow>,
    /// Deliveries this receive gave each key.
    taken: HashMap<String, u32>,
    /// Keys read and found without room: held from this receive on.
    spent: HashSet<String>,
}

impl<'a> KeyRates<'a> {
    /// The keys of queue `q` held at `now`. The caller holds the queue's row lock.
    pub(crate) async fn read(
        c: &impl GenericClient,
        q: &str,
        limits: &'a KeyLimits,
        now: i64,
    ) -> Result<KeyRates<'a>, StoreError> {
        let held = held_keys(
            c,
            "SELECT fkey, held_until FROM key_paces WHERE queue = $1 AND held_until > $2",
            q,
            now,
        )
        .await?;
        Ok(KeyRates {
            limits,
            now,
            held,
            windows: HashMap::new(),
            taken: HashMap::new(),
            spent: HashSet::new(),
        })
    }

    fn limit(&self, key: &str) -> Option<RateLimit> {
        self.limits.of((!key.is_empty()).then_some(key)).rate_limit
    }

    /// Reads the windows of `keys` that have a rate and are neither held nor read yet; those
    /// found without room are spent.
    pub(crate) async fn load<'k>(
        &mut self,
        c: &impl GenericClient,
        q: &str,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Result<(), StoreError> {
        let mut want: Vec<&str> = keys
            .into_iter()
            .filter(|k| {
                !self.held.contains_key(*k)
                    && !self.windows.contains_key(*k)
                    && self.limit(k).is_some()
            })
            .collect();
        want.sort_unstable();
        want.dedup();
        if want.is_empty() {
            return Ok(());
        }
        let mut events: HashMap<String, Vec<Timestamp>> = HashMap::new();
        for r in c
            .query(
                "SELECT fkey, at, n FROM key_rate_events WHERE queue = $1 AND fkey = ANY($2)
                 ORDER BY fkey, at",
                &[&q, &want],
            )
            .await
            .map_err(|e| db(&e))?
        {
            let n: i32 = r.try_get(2).map_err(corrupt)?;
            events
                .entry(r.try_get(0).map_err(corrupt)?)
                .or_default()
                .extend(std::iter::repeat_n(
                    Timestamp(r.try_get(1).map_err(corrupt)?),
                    usize::try_from(n).unwrap_or(0),
                ));
        }
        let mut paces: HashMap<String, Option<i64>> = HashMap::new();
        for r in c
            .query(
                "SELECT fkey, tat FROM key_paces WHERE queue = $1 AND fkey = ANY($2)",
                &[&q, &want],
            )
            .await
            .map_err(|e| db(&e))?
        {
            paces.insert(
                r.try_get(0).map_err(corrupt)?,
                r.try_get(1).map_err(corrupt)?,
            );
        }
        for key in want {
            let w = SlidingWindow::restore(
                events.remove(key).unwrap_or_default(),
                paces.get(key).copied().flatten(),
            );
            let limit = self.limit(key).expect("only keys with a rate are read");
            if w.room(&limit, Timestamp(self.now)) == 0 {
                self.spent.insert(key.to_owned());
            }
            self.windows.insert(key.to_owned(), w);
        }
        Ok(())
    }

    /// How many more deliveries `key`'s rate allows in this receive (its window read first).
    pub(crate) fn room(&self, key: &str) -> i64 {
        let Some(limit) = self.limit(key) else {
            return i64::MAX;
        };
        if self.held.contains_key(key) {
            return 0;
        }
        let Some(w) = self.windows.get(key) else {
            return 0;
        };
        let taken = self.taken.get(key).copied().unwrap_or(0);
        i64::from(w.room(&limit, Timestamp(self.now)).saturating_sub(taken))
    }

    /// Counts one more delivery of `key`.
    pub(crate) fn take(&mut self, key: &str) {
        *self.taken.entry(key.to_owned()).or_insert(0) += 1;
    }

    /// The keys without room: held, or read and found spent.
    pub(crate) fn spent(&self) -> impl Iterator<Item = &String> {
        self.held.keys().chain(&self.spent)
    }

    /// When the first held key may deliver again.
    pub(crate) fn next_free(&mut self) -> Option<i64> {
        let now = Timestamp(self.now);
        let spent: Vec<String> = self.spent.iter().cloned().collect();
        let frees = spent.into_iter().filter_map(|k| {
            let limit = self.limit(&k)?;
            self.windows.get_mut(&k)?.next_free(&limit, now)
        });
        let frees: Vec<i64> = frees.map(Timestamp::as_millis).collect();
        self.held.values().copied().chain(frees).min()
    }

    /// Writes what this receive did to queue `q`'s key windows: an event for each key in
    /// `delivered` (key → deliveries actually leased), and the pace of each key delivered or
    /// found spent, held until its window frees a place when it has no room left.
    pub(crate) async fn write(
        &mut self,
        c: &impl GenericClient,
        q: &str,
        delivered: &HashMap<String, i32>,
    ) -> Result<(), StoreError> {
        let now = Timestamp(self.now);
        let mut keys = Vec::new();
        let (mut tats, mut helds, mut idles) = (Vec::new(), Vec::new(), Vec::new());
        let (mut ev_keys, mut ev_ns) = (Vec::new(), Vec::new());
        let mut longest = 0;
        let touched: HashSet<&String> = delivered.keys().chain(&self.spent).collect();
        for key in touched {
            let (Some(limit), Some(w)) = (self.limit(key), self.windows.get_mut(key)) else {
                continue;
            };
            if let Some(n) = delivered.get(key).copied().filter(|n| *n > 0) {
                w.record(&limit, now, usize::try_from(n).unwrap_or(0));
                ev_keys.push(key.clone());
                ev_ns.push(n);
                longest = longest.max(i64::try_from(limit.period.as_millis()).unwrap_or(0));
            }
            keys.push(key.clone());
            tats.push(w.pace());
            helds.push(w.next_free(&limit, now).map(Timestamp::as_millis));
            idles.push(w.idle_from(&limit).map_or(self.now, Timestamp::as_millis));
        }
        if keys.is_empty() {
            return Ok(());
        }
        c.execute(
            "WITH gone AS (
                 DELETE FROM key_rate_events
                 WHERE queue = $1 AND fkey = ANY($3) AND at <= $2::bigint - $9::bigint
             ), ev AS (
                 INSERT INTO key_rate_events (queue, fkey, at, n)
                 SELECT $1, k, $2, n FROM unnest($3::text[], $4::int[]) AS u(k, n)
             )
             INSERT INTO key_paces (queue, fkey, tat, held_until, idle_from)
             SELECT $1, k, t, h, i
             FROM unnest($5::text[], $6::bigint[], $7::bigint[], $8::bigint[]) AS u(k, t, h, i)
             ON CONFLICT (queue, fkey) DO UPDATE SET tat = EXCLUDED.tat,
                 held_until = EXCLUDED.held_until, idle_from = EXCLUDED.idle_from",
            &[
                &q, &self.now, &ev_keys, &ev_ns, &keys, &tats, &helds, &idles, &longest,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
        Ok(())
    }
}

/// The keys of queue `q` that `sql` (`$1` the queue, `$2` now; columns key and until when)
/// finds held at `now`, with until when.
pub(crate) async fn held_keys(
    c: &impl GenericClient,
    sql: &str,
    q: &str,
    now: i64,
) -> Result<HashMap<String, i64>, StoreError> {
    let mut held = HashMap::new();
    for r in c.query(sql, &[&q, &now]).await.map_err(|e| db(&e))? {
        held.insert(
            r.try_get(0).map_err(corrupt)?,
            r.try_get(1).map_err(corrupt)?,
        );
    }
    Ok(held)
}

/// After queue `q`'s `key_limits` changed: its key windows go when it has no key rates left
/// (a rate set again starts afresh), and no key stays held under the limit it had.
pub(crate) async fn reconfigure(
    c: &impl GenericClient,
    q: &str,
    limits: Option<&KeyLimits>,
) -> Result<(), StoreError> {
    let statements: &[&str] = if limits.is_some_and(KeyLimits::rates) {
        &["UPDATE key_paces SET held_until = NULL WHERE queue = $1 AND held_until IS NOT NULL"]
    } else {
        &[
            "DELETE FROM key_rate_events WHERE queue = $1",
            "DELETE FROM key_paces WHERE queue = $1",
        ]
    };
    for sql in statements {
        c.execute(*sql, &[&q]).await.map_err(|e| db(&e))?;
    }
    Ok(())
}

/// Forgets up to `most` key windows that are as good as new at `now`, with their events.
pub(crate) async fn prune(c: &impl GenericClient, now: i64, most: i64) -> Result<(), StoreError> {
    c.execute(
        "WITH idle AS (
             DELETE FROM key_paces WHERE ctid IN
                 (SELECT ctid FROM key_paces WHERE idle_from <= $1 LIMIT $2)
             RETURNING queue, fkey
         )
         DELETE FROM key_rate_events e USING idle
         WHERE e.queue = idle.queue AND e.fkey = idle.fkey",
        &[&now, &most],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}
