//! Taking leases: the statements that lease waiting messages to receives, rows and packs.
//!
//! Leases run on connections whose commits do not wait for the WAL flush: a lease lost in a
//! database crash only makes the message visible again (at least once still holds) and its
//! receipt stale.

use std::time::Duration;

use sluice_core::rate::SlidingWindow;
use sluice_core::{
    Attributes, Body, Delivery, GroupName, MessageId, MessageKey, QueueConfig, Receipt,
    ReceiveRequest, StoreError, Timestamp,
};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Json;

use crate::db::effects::Effects;
use crate::db::row::kind_of;
use crate::db::tx::transaction;
use crate::error::{corrupt, db};
use crate::expiry::expire_queue;
use crate::hot::backlog::ScanFrom;
use crate::hot::key_flows::KeyTurn;
use crate::hot::key_rooms::{Rooms, by_rooms};
use crate::local::QueueLocal;
use crate::store::Inner;

/// What one attempt to take leases found.
pub(crate) enum Attempted<T = Delivery> {
    /// Messages leased.
    Got(Vec<T>),
    /// None; when the queue next changes by itself, if known.
    Empty { next_wake: Option<i64> },
}

impl Attempted<Taken> {
    /// The deliveries, without whom they were leased for.
    pub(crate) fn untagged(self) -> Attempted {
        match self {
            Attempted::Got(got) => Attempted::Got(got.into_iter().map(|t| t.delivery).collect()),
            Attempted::Empty { next_wake } => Attempted::Empty { next_wake },
        }
    }
}

/// A message leased, and the name its lease was taken for (`leased_by`, as stored).
pub(crate) struct Taken {
    pub(crate) delivery: Delivery,
    pub(crate) by: Option<String>,
}

/// Whom the messages a lease takes are for, by their places among them (oldest first, as
/// each statement returns them): one consumer's name, or none, for all of them; or a name
/// per place, when receives of several consumers share the lease. Each lease statement
/// records the name of its message's place as the lease's holder (`leased_by`), so a
/// delivery's attempt names its receiver whichever receives its statement served.
#[derive(Clone, Copy)]
pub(crate) enum Takers<'a> {
    /// The same name (or none) for every place.
    All(Option<&'a str>),
    /// A name per place; a statement takes at most as many messages.
    Each(&'a [Option<String>]),
}

impl<'a> Takers<'a> {
    /// The places left once `n` messages are leased: those of the next statement.
    pub(crate) fn after(self, n: usize) -> Takers<'a> {
        match self {
            Takers::All(name) => Takers::All(name),
            Takers::Each(names) => Takers::Each(names.get(n..).unwrap_or_default()),
        }
    }

    /// The parameter of a lease statement ([`holder_of!`]): one name when every place has
    /// the same, else the name of each place.
    pub(crate) fn param(self) -> Vec<Option<&'a str>> {
        match self {
            Takers::All(name) => vec![name],
            Takers::Each(names) => match names.split_first() {
                None => vec![None],
                Some((first, rest)) if rest.iter().all(|n| n == first) => vec![first.as_deref()],
                Some(_) => names.iter().map(Option::as_deref).collect(),
            },
        }
    }
}

/// The lease of a queue without global limits, for up to `max` messages leased for `vis`,
/// in the names of `takers` (at least `max` places): [`FAST_LEASE_SQL`], one statement
/// committed on its own; only when something is due to expire does it expire that in a
/// transaction and lease again for what is left, so a lease that just ran out is delivered
/// by this very receive. Each statement leases for the places after those leased before it.
///
/// Long because the sources of one receive (packs, rows after the backlog cursor, FIFO group
/// fronts, an oversized pack unpacked, expiry then a second lease) go in order, and the flags each
/// leaves decide the next.
pub(crate) async fn take_leases(
    inner: &Inner,
    queue: &QueueLocal,
    conn: &mut deadpool_postgres::Object,
    cfg: &QueueConfig,
    max: u32,
    vis: Duration,
    takers: Takers<'_>,
) -> Result<Attempted<Taken>, StoreError> {
    if cfg.paused {
        return Ok(Attempted::Empty { next_wake: None });
    }
    let q = queue.name.as_str();
    let now = inner.now();
    let cutoff = crate::expiry::retention_cutoff(cfg, now);
    let deadline = Timestamp(now).plus(vis).as_millis();
    let mut got = Vec::new();
    let mut due = false;
    // The oldest waiting pack, when it is too large for this receive.
    let mut unfit = None;
    // Whether packs wait behind the rows this receive leases.
    let mut later = false;
    // Whether message rows may be visible: a pack lease says.
    let mut rows_visible = true;
    let mut next_wake = None;
    // Whether the queue holds messages of FIFO groups: the fast lease leaves them.
    let mut grouped = false;
    let packs_first = inner.pack_min > 0 && max as usize >= inner.pack_min;
    if packs_first {
        let packs = crate::hot::packs::lease_from_packs(
            inner.pack_min,
            queue,
            conn,
            cfg,
            now,
            max,
            deadline,
            takers,
        )
        .await?;
        got = packs.deliveries;
        due = packs.due;
        unfit = packs.unfit;
        later = packs.later;
        rows_visible = packs.rows_visible;
        next_wake = packs.next_due;
    }
    let left = max.saturating_sub(u32::try_from(got.len()).unwrap_or(u32::MAX));
    if left > 0 && rows_visible {
        let stmt = conn
            .prepare_cached(FAST_LEASE_SQL)
            .await
            .map_err(|e| db(&e))?;
        let n = i64::from(left);
        let lapsed_after = queue.lapse_checks.after(now);
        let from = queue.backlog.start();
        let before = got.len();
        let run = async |from: ScanFrom, n: i64, leased: usize| {
            let (after_at, after_id) = from.unwrap_or(crate::hot::backlog::HEAD);
            let names = takers.after(before + leased).param();
            conn.query(
                &stmt,
                &[
                    &q,
                    &now,
                    &n,
                    &deadline,
                    &cutoff,
                    &after_at,
                    &after_id,
                    &lapsed_after,
                    &names,
                ],
            )
            .await
            .map_err(|e| db(&e))
        };
        let mut rows = run(from, n, 0).await?;
        queue.lapse_checks.checked(now);
        let (after_cursor, last) = leased_keys(&rows)?;
        queue.backlog.leased(from, last);
        if from.is_some() && (after_cursor as i64) < n {
            // Fewer after the cursor than wanted: the rest, and whether the queue is empty,
            // from the head.
            let more = run(None, n - after_cursor as i64, after_cursor).await?;
            queue.backlog.leased(None, leased_keys(&more)?.1);
            if let Some(r) = more.first() {
                due |= r.try_get::<_, bool>(9).map_err(corrupt)?;
            }
            rows = if after_cursor == 0 {
                more
            } else {
                rows.into_iter()
                    .chain(more.into_iter().filter(|r| leased_row(r).unwrap_or(false)))
                    .collect()
            };
        }
        let Some(first) = rows.first() else {
            return Err(StoreError::unavailable(
                "the lease statement returned no row",
            ));
        };
        due |= first.try_get::<_, bool>(9).map_err(corrupt)?;
        grouped = first.try_get::<_, bool>(12).map_err(corrupt)?;
        if first.try_get::<_, bool>(14).map_err(corrupt)? {
            // Keys or priorities: this statement leased nothing, and the receive goes by rank
            // in a transaction (`crate::ops::receive`).
            queue.mark_ordered();
            return Ok(Attempted::Empty {
                next_wake: Some(now),
            });
        }
        if first
            .try_get::<_, Option<i64>>(0)
            .map_err(corrupt)?
            .is_some()
        {
            got.extend(deliveries(&rows, cfg, deadline, None, 13, 15)?);
            let left = max.saturating_sub(u32::try_from(got.len()).unwrap_or(u32::MAX));
            if later && left > 0 {
                // The rows older than the packs are taken: packs fill what is left.
                let packs = crate::hot::packs::lease_from_packs(
                    inner.pack_min,
                    queue,
                    conn,
                    cfg,
                    now,
                    left,
                    deadline,
                    takers.after(got.len()),
                )
                .await?;
                got.extend(packs.deliveries);
                due |= packs.due;
            }
        } else {
            next_wake = first.try_get(10).map_err(corrupt)?;
            if !packs_first {
                // Not asked of the packs: the oldest waiting one, locked or not.
                unfit = first.try_get(11).map_err(corrupt)?;
            }
        }
    }
    if grouped {
        queue.mark_grouped();
        let left = max.saturating_sub(u32::try_from(got.len()).unwrap_or(u32::MAX));
        if left > 0 {
            let stmt = conn
                .prepare_cached(GROUP_LEASE_SQL)
                .await
                .map_err(|e| db(&e))?;
            let takers = takers.after(got.len());
            got.extend(
                lease_fronts(&***conn, &stmt, queue, cfg, now, left, deadline, takers).await?,
            );
        }
    }
    if got.is_empty()
        && let Some(pack) = unfit
    {
        // Nothing else is waiting and the oldest pack is larger than this receive: its
        // members become rows, of which this receive takes its share.
        let made = crate::hot::packs::unpack_waiting(&***conn, pack).await?;
        inner.wake_local(queue, made);
        due = true;
    }
    if !due {
        return Ok(if got.is_empty() {
            Attempted::Empty { next_wake }
        } else {
            Attempted::Got(got)
        });
    }
    // A lease ran out or a message expired: expire, then lease again for what is left,
    // so a lease that just ran out is delivered by this very receive.
    let fx = transaction(conn, async |tx| {
        let mut fx = Effects::default();
        expire_queue(tx, q, cfg, now, &mut fx).await?;
        fx.write(tx).await?;
        Ok(fx)
    })
    .await?;
    fx.after_commit(inner);
    let left = max.saturating_sub(u32::try_from(got.len()).unwrap_or(u32::MAX));
    if left == 0 {
        return Ok(Attempted::Got(got));
    }
    let rest = ReceiveRequest {
        max: left,
        visibility: Some(vis),
        ..ReceiveRequest::default()
    };
    let stmt = conn.prepare_cached(LEASE_SQL).await.map_err(|e| db(&e))?;
    let takers = takers.after(got.len());
    // Not limited (`by_rooms` is false here): no key states to hand over.
    let mut none = KeyTurn::default();
    let more = take_leases_limited(&***conn, &stmt, queue, cfg, &rest, now, takers, &mut none);
    Ok(match more.await? {
        Attempted::Got(more) => {
            got.extend(more);
            Attempted::Got(got)
        }
        empty if got.is_empty() => empty,
        Attempted::Empty { .. } => Attempted::Got(got),
    })
}

/// Whether a row of [`FAST_LEASE_SQL`] carries a leased message (column 0 set).
fn leased_row(r: &tokio_postgres::Row) -> Result<bool, StoreError> {
    Ok(r.try_get::<_, Option<i64>>(0).map_err(corrupt)?.is_some())
}

/// How many messages rows of [`FAST_LEASE_SQL`] leased, and the greatest `(visible_at
/// before the lease, id)` among them: where the next lease after a cursor starts.
fn leased_keys(rows: &[tokio_postgres::Row]) -> Result<(usize, Option<(i64, i64)>), StoreError> {
    let (mut n, mut last) = (0, None);
    for r in rows {
        if let Some(id) = r.try_get::<_, Option<i64>>(0).map_err(corrupt)? {
            let was: i64 = r.try_get(8).map_err(corrupt)?;
            n += 1;
            last = last.max(Some((was, id)));
        }
    }
    Ok((n, last))
}

/// The lease both receive statements share: up to `$3` waiting messages without a group or
/// rank of queue `$1` (visible at `$2`), skipping rows other receivers hold, leased until `$4`
/// for `$takers`.
macro_rules! lease_ctes {
    ($takers:literal) => {
        lease_ctes!($takers, "")
    };
    ($takers:literal, $($after:expr),+) => {
        concat!(
            "WITH picked AS (
             SELECT id, visible_at AS was, rank FROM messages
             WHERE queue = $1 AND state = 0 AND visible_at <= $2 AND grp IS NULL
                 AND rank IS NULL",
            $($after),+,
            "
             ORDER BY visible_at, id LIMIT $3
             FOR UPDATE SKIP LOCKED
         ), ",
            leased_cte!($takers, ""),
        )
    };
}

/// The common receive in one statement, for a queue without global limits: the lease of
/// rows after `($6, $7)` in `(visible_at, id)` order (see `crate::hot::backlog`; from the
/// head with [`crate::hot::backlog::HEAD`]) in columns 0 – 8, no rows when nothing was
/// leased; whether anything is due to expire (a lease that ran out at `$2`, looked for
/// after `$8` as `crate::hot::lapse_checks` explains, or a message that entered before the
/// retention cutoff `$5`: column 9); and, when nothing was leased, when the queue next
/// changes by itself (column 10) and the oldest waiting pack (column 11), which this
/// receive may unpack; whether messages of FIFO groups are in the queue (column 12), which
/// this lease leaves to [`GROUP_LEASE_SQL`]; the name each leased row was leased for,
/// from `$9` (column 13); whether the queue holds keys or priorities (column 14: then this
/// statement leases nothing, and the receive goes by rank, `crate::hot::ranks`); and the key,
/// priority and rank of each leased row (columns 15 – 17). Always at least one row.
const FAST_LEASE_SQL: &str = concat!(
    lease_ctes!(
        "$9",
        " AND (visible_at, id) > ($6, $7) AND NOT ",
        ordered_sql!()
    ),
    ", due AS (
         SELECT EXISTS (SELECT 1 FROM messages
                        WHERE queue = $1 AND state = 1 AND visible_at <= $2 AND visible_at > $8)
             OR EXISTS (SELECT 1 FROM messages
                        WHERE queue = $1 AND state = 0 AND entered_at <= $5)
             OR EXISTS (SELECT 1 FROM packs
                        WHERE queue = $1 AND state = 1 AND visible_at <= $2)
             OR EXISTS (SELECT 1 FROM packs
                        WHERE queue = $1 AND state = 0 AND visible_at <= $5) AS due,
             EXISTS (SELECT 1 FROM messages
                     WHERE queue = $1 AND grp IS NOT NULL AND state < 2) AS grouped,
             ",
    ordered_sql!(),
    " AS ordered
     )
     SELECT leased.id, leased.token, leased.body, leased.body_kind, leased.attrs,
         leased.receive_count, leased.enqueued_at, leased.last_error, leased.was,
         due.due,
         CASE WHEN leased.id IS NULL THEN least(
             (SELECT min(visible_at) FROM messages
              WHERE queue = $1 AND state = 0 AND visible_at > $2),
             (SELECT min(visible_at) FROM messages
              WHERE queue = $1 AND state = 1 AND visible_at > $8),
             (SELECT min(visible_at) FROM packs WHERE queue = $1 AND state = 1))
         END AS next_due,
         CASE WHEN leased.id IS NULL THEN
             (SELECT id FROM packs WHERE queue = $1 AND state = 0 AND visible_at <= $2
              ORDER BY visible_at, id LIMIT 1)
         END AS pack,
         due.grouped,
         leased.leased_by,
         due.ordered,
         leased.fkey, leased.prio, leased.rank, leased.traceparent, leased.tracestate
     FROM due LEFT JOIN leased ON true"
);

/// The lease of [`take_leases_limited`], on its own, for the names `$5`.
pub(crate) const LEASE_SQL: &str = concat!(lease_ctes!("$5"), " SELECT * FROM leased");

/// Leases up to `req.max` messages of queue `q` with `stmt` ([`LEASE_SQL`]) in `tx` for
/// `takers` (as many places), within the queue's global limits (`max_in_flight`,
/// `rate_limit`), which the caller holds the queue's row lock for.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn take_leases_limited<S>(
    tx: &impl GenericClient,
    stmt: &S,
    local: &QueueLocal,
    cfg: &QueueConfig,
    req: &ReceiveRequest,
    now: i64,
    takers: Takers<'_>,
    turn: &mut KeyTurn,
) -> Result<Attempted<Taken>, StoreError>
where
    S: tokio_postgres::ToStatement + Sync + Send + ?Sized,
{
    let q = local.name.as_str();
    if cfg.paused {
        return Ok(Attempted::Empty { next_wake: None });
    }
    let mut n = i64::from(req.max);
    // The rate limit's pace before this lease, which the lease moves on.
    let mut paced_from = None;
    if let Some(mif) = cfg.max_in_flight {
        let row = tx
            .query_one(crate::hot::packs::IN_FLIGHT_SQL, &[&q])
            .await
            .map_err(|e| db(&e))?;
        n = n.min((i64::from(mif) - row.get::<_, i64>(0)).max(0));
    }
    if let Some(rl) = cfg.rate_limit {
        let period = i64::try_from(rl.period.as_millis()).unwrap_or(i64::MAX);
        tx.execute(
            "DELETE FROM rate_events WHERE queue = $1 AND at <= $2",
            &[&q, &(now - period)],
        )
        .await
        .map_err(|e| db(&e))?;
        let mut events = Vec::new();
        for r in tx
            .query(
                "SELECT at, n FROM rate_events WHERE queue = $1 ORDER BY at",
                &[&q],
            )
            .await
            .map_err(|e| db(&e))?
        {
            let n: i32 = r.get(1);
            events.extend(std::iter::repeat_n(
                Timestamp(r.get(0)),
                usize::try_from(n).unwrap_or(0),
            ));
        }
        let tat: Option<i64> = tx
            .query_opt("SELECT tat FROM rate_paces WHERE queue = $1", &[&q])
            .await
            .map_err(|e| db(&e))?
            .map(|r| r.get(0));
        paced_from = tat;
        let mut window = SlidingWindow::restore(events, tat);
        let avail = window.available(&rl, Timestamp(now));
        if avail == 0 {
            let free = window.next_free(&rl, Timestamp(now)).map(|t| t.as_millis());
            let due = next_due(tx, q, now).await?;
            return Ok(Attempted::Empty {
                next_wake: [due, free].into_iter().flatten().min(),
            });
        }
        n = n.min(i64::from(avail));
    }
    if n == 0 {
        return Ok(Attempted::Empty {
            next_wake: next_due(tx, q, now).await?,
        });
    }
    let vis = req.visibility.unwrap_or(cfg.visibility_timeout);
    let deadline = Timestamp(now).plus(vis).as_millis();
    let ordered = crate::hot::ranks::holds_ranks(tx, q).await?;
    local.set_ordered(ordered);
    // Per-key limits and key states: what each key has in flight, exact under the row lock.
    let mut rooms = if by_rooms(cfg) {
        turn.consumed = sluice_core::adaptive::governs_keys(cfg);
        Some(Rooms::read(tx, q, cfg, &turn.counted, now).await?)
    } else {
        None
    };
    let mut out = if ordered {
        let rooms = rooms.as_mut();
        crate::hot::ranks::lease_ranked(tx, q, cfg, now, n, deadline, takers, rooms, true).await?
    } else {
        // Only the implicit key's messages are here: its room caps the lease.
        if let Some(r) = rooms.as_mut() {
            r.load(tx, q, [""]).await?;
        }
        let n = rooms.as_ref().map_or(n, |r| n.min(r.room("")));
        let names = takers.param();
        let rows = tx
            .query(stmt, &[&q, &now, &n, &deadline, &names])
            .await
            .map_err(|e| db(&e))?;
        let got = deliveries(&rows, cfg, deadline, None, 9, 10)?;
        if let Some(r) = rooms.as_mut() {
            got.iter().for_each(|_| r.take(""));
        }
        got
    };
    let left = u32::try_from(n).unwrap_or(u32::MAX) - u32::try_from(out.len()).unwrap_or(0);
    if left > 0 {
        let takers = takers.after(out.len());
        out.extend(match rooms.as_mut() {
            Some(r) => fronts_within(tx, local, cfg, now, left, deadline, takers, r).await?,
            None => {
                lease_fronts(tx, GROUP_LEASE_SQL, local, cfg, now, left, deadline, takers).await?
            }
        });
    }
    if out.iter().any(|t| t.delivery.group.is_some()) {
        local.mark_grouped();
    }
    if let Some(r) = rooms.as_mut() {
        r.finish(tx, q, &out).await?;
        turn.events.append(&mut r.events);
    }
    if out.is_empty() {
        let rate_free = rooms.as_mut().and_then(Rooms::next_free);
        return Ok(Attempted::Empty {
            next_wake: [next_due(tx, q, now).await?, rate_free]
                .into_iter()
                .flatten()
                .min(),
        });
    }
    if ordered {
        crate::hot::ranks::tally(tx, q, now, &out).await?;
    }
    let got = i32::try_from(out.len()).unwrap_or(i32::MAX);
    // Counted by the caller once the lease has committed.
    if let Some(rl) = cfg.rate_limit {
        // The window's event and the pace, moved on by these deliveries (`sluice_core::rate`).
        let mut pace = SlidingWindow::restore([], paced_from);
        pace.record(&rl, Timestamp(now), out.len());
        // A limit that does not spread (its burst is its limit) keeps no pace.
        tx.execute(
            "WITH ev AS (INSERT INTO rate_events (queue, at, n) VALUES ($1, $2, $3))
             INSERT INTO rate_paces (queue, tat) SELECT $1, $4::bigint WHERE $4::bigint IS NOT NULL
             ON CONFLICT (queue) DO UPDATE SET tat = EXCLUDED.tat",
            &[&q, &now, &got, &pace.pace()],
        )
        .await
        .map_err(|e| db(&e))?;
    }
    Ok(Attempted::Got(out))
}

/// The lease of messages of FIFO groups: up to `$3` of queue `$1` visible at `$2`, leased
/// until `$4`, each among the first `$5` members of its group's line. The groups take turns:
/// a walk along the index of lines (a skip scan, two index probes per group whatever the
/// lines' lengths) starts after group `$6` and stops once it has found twice `$3` fronts
/// that may go (some may be held by leases running at the same time, which are skipped), so
/// a lease costs about as many probes as the groups it passes, not all of them. A line's front can only leave it, never gain a member
/// ahead of it (places are taken at the end, in commit order), so a row seen at the front in
/// this statement's snapshot is at the front when it is leased. Leased for the names `$7`.
/// Columns as [`LEASE_SQL`]'s, and the group (13).
pub(crate) const GROUP_LEASE_SQL: &str = concat!(
    "WITH RECURSIVE lines AS (
         (SELECT grp FROM messages WHERE queue = $1 AND grp IS NOT NULL AND grp > $6
              AND state < 2
          ORDER BY grp LIMIT 1)
         UNION ALL
         SELECT (SELECT m.grp FROM messages m
                 WHERE m.queue = $1 AND m.grp IS NOT NULL AND m.grp > l.grp AND m.state < 2
                 ORDER BY m.grp LIMIT 1)
         FROM lines l WHERE l.grp IS NOT NULL
     ), fronts AS (
         SELECT f.id FROM lines l CROSS JOIN LATERAL (
             SELECT m.id, m.state, m.visible_at FROM messages m
             WHERE m.queue = $1 AND m.grp IS NOT NULL AND m.grp = l.grp AND m.state < 2
             ORDER BY m.line LIMIT $5) f
         WHERE l.grp IS NOT NULL AND f.state = 0 AND f.visible_at <= $2
         LIMIT $3::bigint * 2 + 16
     ), picked AS (
         SELECT id, visible_at AS was, rank FROM messages
         WHERE id IN (SELECT id FROM fronts) AND state = 0 AND visible_at <= $2
         ORDER BY visible_at, id LIMIT $3
         FOR UPDATE SKIP LOCKED
     ), ",
    leased_cte!("$7", ", m.grp"),
    " SELECT * FROM leased"
);

/// The fronts of queue `$1`'s group lines that may go at `$2` (the first `$4` of each line),
/// as `(id, key)` oldest first, stepping over the keys `$5`: at most `$3` · 2 + 16 of them.
const FRONTS_SQL: &str = "WITH RECURSIVE lines AS (
         (SELECT grp FROM messages WHERE queue = $1 AND grp IS NOT NULL AND state < 2
          ORDER BY grp LIMIT 1)
         UNION ALL
         SELECT (SELECT m.grp FROM messages m
                 WHERE m.queue = $1 AND m.grp IS NOT NULL AND m.grp > l.grp AND m.state < 2
                 ORDER BY m.grp LIMIT 1)
         FROM lines l WHERE l.grp IS NOT NULL
     ), fronts AS (
         SELECT f.id, f.k, f.visible_at FROM lines l CROSS JOIN LATERAL (
             SELECT m.id, m.state, m.visible_at, coalesce(m.fkey, '') AS k FROM messages m
             WHERE m.queue = $1 AND m.grp IS NOT NULL AND m.grp = l.grp AND m.state < 2
             ORDER BY m.line LIMIT $4) f
         WHERE l.grp IS NOT NULL AND f.state = 0 AND f.visible_at <= $2
             AND f.k <> ALL($5)
         LIMIT $3::bigint * 2 + 16
     )
     SELECT id, k FROM fronts ORDER BY visible_at, id";

/// Leases up to `max` fronts of `queue`'s group lines that fit the keys' `rooms`, until
/// `deadline`, for `takers`. Every group is looked at from the first: the turn kept by
/// [`lease_fronts`] is for queues without key limits.
#[allow(clippy::too_many_arguments)]
async fn fronts_within(
    c: &impl GenericClient,
    queue: &QueueLocal,
    cfg: &QueueConfig,
    now: i64,
    max: u32,
    deadline: i64,
    takers: Takers<'_>,
    rooms: &mut Rooms<'_>,
) -> Result<Vec<Taken>, StoreError> {
    let q = queue.name.as_str();
    let per_group = i64::from(cfg.max_in_flight_per_group);
    let full = rooms.full();
    let rows = c
        .query(FRONTS_SQL, &[&q, &now, &i64::from(max), &per_group, &full])
        .await
        .map_err(|e| db(&e))?;
    let mut candidates = Vec::with_capacity(rows.len());
    for r in &rows {
        candidates.push((
            r.try_get::<_, i64>(0).map_err(corrupt)?,
            r.try_get::<_, String>(1).map_err(corrupt)?,
        ));
    }
    rooms
        .load(c, q, candidates.iter().map(|(_, k)| k.as_str()))
        .await?;
    let ids = rooms.fit(&candidates, max as usize);
    crate::hot::ranks::lease_ids(c, cfg, now, &ids, deadline, takers).await
}

/// Leases up to `max` messages at the fronts of `queue`'s group lines with `stmt`
/// ([`GROUP_LEASE_SQL`]), until `deadline`, for `takers`: the walk starts after the group
/// this node last leased from and, when it reaches the last group short of `max`, goes
/// round once more from the first.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn lease_fronts<S>(
    c: &impl GenericClient,
    stmt: &S,
    queue: &QueueLocal,
    cfg: &QueueConfig,
    now: i64,
    max: u32,
    deadline: i64,
    takers: Takers<'_>,
) -> Result<Vec<Taken>, StoreError>
where
    S: tokio_postgres::ToStatement + Sync + Send + ?Sized,
{
    let q = queue.name.as_str();
    let per_group = i64::from(cfg.max_in_flight_per_group);
    let after = queue.group_turn();
    let mut out = Vec::new();
    for from in [Some(after.clone()), (!after.is_empty()).then(String::new)]
        .into_iter()
        .flatten()
    {
        let want = i64::from(max) - out.len() as i64;
        if want <= 0 {
            break;
        }
        let names = takers.after(out.len()).param();
        let rows = c
            .query(
                stmt,
                &[&q, &now, &want, &deadline, &per_group, &from, &names],
            )
            .await
            .map_err(|e| db(&e))?;
        out.extend(deliveries(&rows, cfg, deadline, Some(13), 9, 10)?);
    }
    if let Some(last) = out.iter().filter_map(|t| t.delivery.group.as_ref()).max() {
        queue.set_group_turn(last.as_str());
    }
    Ok(out)
}

/// The deliveries of leased rows (columns as [`LEASE_SQL`] returns them, the group in
/// column `group` when the lease returns one, the holder's name in column `by`, the key,
/// priority and rank from column `tag` on, the trace context by name), in delivery order: by
/// rank, then oldest first.
pub(crate) fn deliveries(
    rows: &[tokio_postgres::Row],
    cfg: &QueueConfig,
    deadline: i64,
    group: Option<usize>,
    by: usize,
    tag: usize,
) -> Result<Vec<Taken>, StoreError> {
    type Order = (Option<i64>, Option<String>, i64);
    let mut out: Vec<(Order, Taken)> = Vec::with_capacity(rows.len());
    let trace_col = rows
        .first()
        .and_then(|r| r.columns().iter().position(|c| c.name() == "traceparent"));
    for r in rows {
        let id: i64 = r.try_get(0).map_err(corrupt)?;
        let token: i64 = r.try_get(1).map_err(corrupt)?;
        let body: Option<Vec<u8>> = r.try_get(2).map_err(corrupt)?;
        let kind: i16 = r.try_get(3).map_err(corrupt)?;
        let attrs: Option<Json<Attributes>> = r.try_get(4).map_err(corrupt)?;
        let count: i32 = r.try_get(5).map_err(corrupt)?;
        let was: i64 = r.try_get(8).map_err(corrupt)?;
        let grp: Option<String> = match group {
            Some(col) => r.try_get(col).map_err(corrupt)?,
            None => None,
        };
        let key: Option<String> = r.try_get(tag).map_err(corrupt)?;
        let prio: Option<i16> = r.try_get(tag + 1).map_err(corrupt)?;
        let rank: Option<i64> = r.try_get(tag + 2).map_err(corrupt)?;
        let trace = match trace_col {
            Some(col) => crate::db::row::trace_of(r, col)?,
            None => None,
        };
        let delivery = Delivery {
            trace,
            id: MessageId(id as u64),
            receipt: Receipt {
                id: MessageId(id as u64),
                token: token as u64,
            },
            body: Body {
                kind: kind_of(kind),
                bytes: body.unwrap_or_default().into(),
            },
            attributes: attrs.map(|a| a.0).unwrap_or_default(),
            receive_count: u32::try_from(count).unwrap_or(0),
            max_receive_count: cfg.max_receive_count,
            enqueued_at: Timestamp(r.try_get(6).map_err(corrupt)?),
            last_error: r.try_get(7).map_err(corrupt)?,
            lease_deadline: Timestamp(deadline),
            group: grp.and_then(|g| GroupName::new(g).ok()),
            key: key.as_deref().and_then(|k| MessageKey::new(k).ok()),
            priority: prio
                .and_then(|p| u8::try_from(p).ok())
                .unwrap_or(cfg.default_priority),
        };
        let by = r.try_get(by).map_err(corrupt)?;
        out.push(((rank, key, was), Taken { delivery, by }));
    }
    out.sort_by(|(a, t), (b, u)| (a, t.delivery.id).cmp(&(b, u.delivery.id)));
    Ok(out.into_iter().map(|(_, t)| t).collect())
}

/// When the queue next changes by itself: a delay ends or a lease runs out.
pub(crate) async fn next_due(
    tx: &impl GenericClient,
    q: &str,
    now: i64,
) -> Result<Option<i64>, StoreError> {
    let r = tx
        .query_one(
            "SELECT least(
                 (SELECT min(visible_at) FROM messages WHERE queue = $1 AND state = 0 AND visible_at > $2),
                 (SELECT min(visible_at) FROM messages WHERE queue = $1 AND state = 1),
                 (SELECT min(visible_at) FROM packs WHERE queue = $1 AND state = 1))",
            &[&q, &now],
        )
        .await
        .map_err(|e| db(&e))?;
    r.try_get(0).map_err(corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_names_one_holder_for_all_or_one_per_place_after_those_leased() {
        let each: Vec<Option<String>> = ["w1", "w1", "w2"]
            .iter()
            .map(|n| Some((*n).to_owned()))
            .collect();
        let takers = Takers::Each(&each);
        assert_eq!(takers.param(), [Some("w1"), Some("w1"), Some("w2")]);
        assert_eq!(takers.after(1).param(), [Some("w1"), Some("w2")]);
        assert_eq!(takers.after(2).param(), [Some("w2")], "one name left");
        assert_eq!(takers.after(5).param(), [None], "no place left");
        let same = vec![None, None];
        assert_eq!(Takers::Each(&same).param(), [None], "the same for all");
        assert_eq!(Takers::All(Some("w3")).after(7).param(), [Some("w3")]);
    }
}
