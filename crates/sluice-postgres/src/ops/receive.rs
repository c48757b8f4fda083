//! Deliveries: receive (with long poll and global limits), ack, and the receipt-checked
//! changes (nack, reject, move, release, extend, progress), plus cancel.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::lifecycle::{self, AfterFailure};
use sluice_core::message::clip_error;
use sluice_core::rate::SlidingWindow;
use sluice_core::store::{
    LeaseState, long_poll_nap, validate_nack_delay, validate_receive, validate_visibility,
};
use sluice_core::{
    Attempt, AttemptOutcome, Attributes, Body, DeadLetterReason, Delivery, Failure, Message,
    MessageId, MessageState, NackOutcome, Progress, QueueConfig, QueueName, Receipt,
    ReceiveRequest, StoreError, Timestamp,
};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Json;

use crate::db::counters::Counter;
use crate::db::effects::Effects;
use crate::db::row::{ROW_COLS, Row, WAITING, kind_of, write_back};
use crate::db::tx::transaction;
use crate::error::{corrupt, db, pool};
use crate::expiry::expire_queue;
use crate::hot::backlog::ScanFrom;
use crate::hot::wake::FALLBACK_POLL;
use crate::ops::lifecycle::{dead_letter, end_cancelled};
use crate::store::Inner;

pub(crate) enum Attempted {
    Got(Vec<Delivery>),
    Empty { next_wake: Option<i64> },
}

/// Leases up to `req.max` messages, waiting up to `req.wait` for the first.
pub(crate) async fn receive(
    inner: &Arc<Inner>,
    queue: &QueueName,
    req: ReceiveRequest,
) -> Result<Vec<Delivery>, StoreError> {
    validate_receive(&req)?;
    let until = tokio::time::Instant::now() + req.wait;
    let waker = inner.wakers.of(queue.as_str());
    // Only a long poll may skip the database: it would wait anyway, and a receive that
    // does not wait must see what is committed. And only while other nodes' wake-ups
    // arrive: the memory relies on them. A receive woken by its timer asks: that timer is
    // the bound on a missed wake-up.
    let mut may_skip = !req.wait.is_zero();
    loop {
        let notified = waker.notified();
        tokio::pin!(notified);
        let stamp = waker.stamp(notified.as_mut());
        let nap = match (may_skip && inner.wakers.listening())
            .then(|| waker.known_empty(inner.now()))
            .flatten()
        {
            Some(nap) => nap,
            None => match try_receive(inner, queue, &req).await? {
                Attempted::Got(out) => {
                    waker.leased(stamp, out.len());
                    inner.tally(queue.as_str(), Counter::Received, out.len() as i64);
                    return Ok(out);
                }
                Attempted::Empty { next_wake } => {
                    let now = inner.now();
                    waker.found_empty(stamp, next_wake, now);
                    long_poll_nap(FALLBACK_POLL, FALLBACK_POLL, now, next_wake)
                }
            },
        };
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(Vec::new());
        }
        // Sends on this node may hand this receive their messages while it waits. Only a
        // hint for them: a config that cannot be read now does not end the long poll.
        let lease = match req.visibility {
            Some(lease) => Some(lease),
            None => (inner.config(queue.as_str()).await.ok()).map(|c| c.visibility_timeout),
        };
        let _waiting = lease.map(|l| inner.handoff.enter(queue.as_str(), l, req.max as usize));
        may_skip = tokio::select! {
            () = &mut notified => !req.wait.is_zero(),
            () = tokio::time::sleep(nap.min(left)) => false,
        };
    }
}

/// One attempt to lease. Leases run on connections whose commits do not wait for the WAL
/// flush: a lease lost in a database crash only makes the message visible again (at least
/// once still holds) and its receipt stale; sends, acks and every other change still commit
/// synchronously. A queue without global limits takes the short way: one statement
/// ([`lease_fast`]), shared by the receives of the queue that arrive together.
async fn try_receive(
    inner: &Arc<Inner>,
    queue: &QueueName,
    req: &ReceiveRequest,
) -> Result<Attempted, StoreError> {
    let q = queue.as_str();
    let cfg = inner.config(q).await?;
    if cfg.rate_limit.is_none() && cfg.max_in_flight.is_none() {
        // Receives of one queue arriving together share one statement.
        return crate::hot::lease_combine::lease(inner, queue, &cfg, req).await;
    }
    let mut conn = inner.lease_pool.get().await.map_err(|e| pool(&e))?;
    let (outcome, fx) = transaction(&mut conn, async |tx| {
        // Global limits: receives of this queue take turns on its row, on every node.
        let cfg = crate::ops::queues::config(tx, q, true).await?;
        let now = inner.now();
        let mut fx = Effects::default();
        expire_queue(tx, q, &cfg, now, &mut fx).await?;
        let outcome = lease(tx, LEASE_SQL, q, &cfg, req, now).await?;
        fx.write(tx).await?;
        Ok((outcome, fx))
    })
    .await?;
    fx.wake(inner);
    Ok(outcome)
}

/// The lease of a queue without global limits, for up to `max` messages leased for `vis`:
/// [`FAST_LEASE_SQL`], one statement committed on its own; only when something is due to
/// expire does it expire that in a transaction and lease again for what is left, so a lease
/// that just ran out is delivered by this very receive.
pub(crate) async fn lease_fast(
    inner: &Inner,
    conn: &mut deadpool_postgres::Object,
    q: &str,
    cfg: &QueueConfig,
    max: u32,
    vis: Duration,
) -> Result<Attempted, StoreError> {
    if cfg.paused {
        return Ok(Attempted::Empty { next_wake: None });
    }
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
    let packs_first = inner.pack_min > 0 && max as usize >= inner.pack_min;
    if packs_first {
        let packs = crate::hot::packs::lease(inner, conn, q, cfg, now, max, deadline).await?;
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
        let lapsed_after = inner.lapse_checks.after(q, now);
        let from = inner.backlogged.start(q);
        let run = async |from: ScanFrom, n: i64| {
            let (after_at, after_id) = from.unwrap_or(crate::hot::backlog::HEAD);
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
                ],
            )
            .await
            .map_err(|e| db(&e))
        };
        let mut rows = run(from, n).await?;
        inner.lapse_checks.checked(q, now);
        let (after_cursor, last) = leased_keys(&rows)?;
        inner.backlogged.leased(q, from, last);
        if from.is_some() && (after_cursor as i64) < n {
            // Fewer after the cursor than wanted: the rest, and whether the queue is empty,
            // from the head.
            let more = run(None, n - after_cursor as i64).await?;
            inner.backlogged.leased(q, None, leased_keys(&more)?.1);
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
        if first
            .try_get::<_, Option<i64>>(0)
            .map_err(corrupt)?
            .is_some()
        {
            got.extend(deliveries(&rows, cfg, deadline)?);
            let left = max.saturating_sub(u32::try_from(got.len()).unwrap_or(u32::MAX));
            if later && left > 0 {
                // The rows older than the packs are taken: packs fill what is left.
                let packs =
                    crate::hot::packs::lease(inner, conn, q, cfg, now, left, deadline).await?;
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
    if got.is_empty()
        && let Some(pack) = unfit
    {
        // Nothing else is waiting and the oldest pack is larger than this receive: its
        // members become rows, of which this receive takes its share.
        let made = crate::hot::packs::unpack_waiting(&***conn, pack).await?;
        inner.wake_some(q, made);
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
    fx.wake(inner);
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
    Ok(match lease(&***conn, &stmt, q, cfg, &rest, now).await? {
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

/// The lease both receive statements share: up to `$3` waiting messages of queue `$1`
/// (visible at `$2`), skipping rows other receivers hold, leased until `$4`.
macro_rules! lease_ctes {
    () => {
        lease_ctes!("")
    };
    ($after:literal) => {
        concat!(
            "WITH picked AS (
             SELECT id, visible_at AS was FROM messages
             WHERE queue = $1 AND state = 0 AND visible_at <= $2",
            $after,
            "
             ORDER BY visible_at, id LIMIT $3
             FOR UPDATE SKIP LOCKED
         ), leased AS (
             UPDATE messages m SET state = 1, receive_count = m.receive_count + 1,
                 token = (random() * 9.2e18)::bigint, visible_at = $4, progress = NULL
             FROM picked WHERE m.id = picked.id
             RETURNING m.id, m.token, m.body, m.body_kind, m.attrs, m.receive_count,
                 m.enqueued_at, m.last_error, picked.was
         )"
        )
    };
}

/// The common receive in one statement, for a queue without global limits: the lease of
/// rows after `($6, $7)` in `(visible_at, id)` order (see `crate::hot::backlog`; from the head
/// with [`crate::hot::backlog::HEAD`]) in columns 0 – 8, no rows when nothing was leased;
/// whether anything is due to expire (a lease that ran out at `$2`, looked for after `$8`
/// as `crate::hot::lapse_checks` explains, or a message that entered before the retention cutoff `$5`:
/// column 9); and, when nothing was leased, when the queue next changes by itself (column
/// 10) and the oldest waiting pack (column 11), which this receive may unpack. Always at
/// least one row.
const FAST_LEASE_SQL: &str = concat!(
    lease_ctes!(" AND (visible_at, id) > ($6, $7)"),
    ", due AS (
         SELECT EXISTS (SELECT 1 FROM messages
                        WHERE queue = $1 AND state = 1 AND visible_at <= $2 AND visible_at > $8)
             OR EXISTS (SELECT 1 FROM messages
                        WHERE queue = $1 AND state = 0 AND entered_at <= $5)
             OR EXISTS (SELECT 1 FROM packs
                        WHERE queue = $1 AND state = 1 AND visible_at <= $2)
             OR EXISTS (SELECT 1 FROM packs
                        WHERE queue = $1 AND state = 0 AND visible_at <= $5) AS due
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
         END AS pack
     FROM due LEFT JOIN leased ON true"
);

/// The lease of [`lease`], on its own.
const LEASE_SQL: &str = concat!(lease_ctes!(), " SELECT * FROM leased");

async fn lease<S>(
    tx: &impl GenericClient,
    stmt: &S,
    q: &str,
    cfg: &QueueConfig,
    req: &ReceiveRequest,
    now: i64,
) -> Result<Attempted, StoreError>
where
    S: tokio_postgres::ToStatement + Sync + Send + ?Sized,
{
    if cfg.paused {
        return Ok(Attempted::Empty { next_wake: None });
    }
    let mut n = i64::from(req.max);
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
        let mut window = SlidingWindow::default();
        for r in tx
            .query(
                "SELECT at, n FROM rate_events WHERE queue = $1 ORDER BY at",
                &[&q],
            )
            .await
            .map_err(|e| db(&e))?
        {
            let n: i32 = r.get(1);
            window.record(Timestamp(r.get(0)), usize::try_from(n).unwrap_or(0));
        }
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
    let rows = tx
        .query(stmt, &[&q, &now, &n, &deadline])
        .await
        .map_err(|e| db(&e))?;
    if rows.is_empty() {
        return Ok(Attempted::Empty {
            next_wake: next_due(tx, q, now).await?,
        });
    }
    let out = deliveries(&rows, cfg, deadline)?;
    let got = i32::try_from(out.len()).unwrap_or(i32::MAX);
    // Counted by the caller once the lease has committed.
    if cfg.rate_limit.is_some() {
        tx.execute(
            "INSERT INTO rate_events (queue, at, n) VALUES ($1, $2, $3)",
            &[&q, &now, &got],
        )
        .await
        .map_err(|e| db(&e))?;
    }
    Ok(Attempted::Got(out))
}

/// The deliveries of leased rows (columns as [`LEASE_SQL`] returns them), oldest first.
fn deliveries(
    rows: &[tokio_postgres::Row],
    cfg: &QueueConfig,
    deadline: i64,
) -> Result<Vec<Delivery>, StoreError> {
    let mut out: Vec<(i64, Delivery)> = Vec::with_capacity(rows.len());
    for r in rows {
        let id: i64 = r.try_get(0).map_err(corrupt)?;
        let token: i64 = r.try_get(1).map_err(corrupt)?;
        let body: Option<Vec<u8>> = r.try_get(2).map_err(corrupt)?;
        let kind: i16 = r.try_get(3).map_err(corrupt)?;
        let attrs: Option<Json<Attributes>> = r.try_get(4).map_err(corrupt)?;
        let count: i32 = r.try_get(5).map_err(corrupt)?;
        let was: i64 = r.try_get(8).map_err(corrupt)?;
        out.push((
            was,
            Delivery {
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
            },
        ));
    }
    out.sort_by_key(|(was, d)| (*was, d.id));
    Ok(out.into_iter().map(|(_, d)| d).collect())
}

/// When the queue next changes by itself: a delay ends or a lease runs out.
async fn next_due(tx: &impl GenericClient, q: &str, now: i64) -> Result<Option<i64>, StoreError> {
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

/// A receipt-checked change, in one transaction: reads the queue's config and the leased
/// row, lets `f` change it, writes it back with the effects and wakes whom `f` named.
async fn with_lease<T>(
    inner: &Inner,
    queue: &QueueName,
    receipt: &Receipt,
    f: impl AsyncFnOnce(
        &tokio_postgres::Transaction<'_>,
        &QueueConfig,
        &mut Row,
        i64,
        &mut Effects,
    ) -> Result<Change<T>, StoreError>,
) -> Result<T, StoreError> {
    let q = queue.as_str();
    let mut conn = inner.conn().await?;
    let (out, fx) = crate::db::tx::transaction(&mut conn, async |tx| {
        let cfg = crate::ops::queues::config(tx, q, false).await?;
        let now = inner.now();
        if crate::hot::packs::is_pack_token(receipt.token as i64) {
            crate::hot::packs::unpack_member(tx, receipt.id.0 as i64).await?;
        }
        let row = tx
            .query_opt(
                &format!("SELECT {ROW_COLS} FROM messages WHERE id = $1 FOR UPDATE"),
                &[&(receipt.id.0 as i64)],
            )
            .await
            .map_err(|e| db(&e))?;
        let mut row = match row {
            Some(r) => Row::from_pg(&r)?,
            None => return Err(StoreError::ReceiptStale),
        };
        if row.queue != q || !row.holds(receipt.token, now) {
            return Err(StoreError::ReceiptStale);
        }
        let mut fx = Effects::default();
        let out = match f(tx, &cfg, &mut row, now, &mut fx).await? {
            Change::Row(out) => {
                write_back(tx, std::slice::from_ref(&row)).await?;
                out
            }
            Change::Done(out) => out,
        };
        fx.write(tx).await?;
        Ok((out, fx))
    })
    .await?;
    fx.wake(inner);
    Ok(out)
}

/// What a receipt-checked change did with the row.
enum Change<T> {
    /// Changed it in memory: write it back.
    Row(T),
    /// Wrote what it needed itself.
    Done(T),
}

fn apply_failure(row: &mut Row, now: i64, outcome: AttemptOutcome, failure: &Failure) {
    let attempt = Attempt {
        at: Timestamp(now),
        outcome,
        error: failure.error.clone().map(clip_error),
        consumer: failure.consumer.clone(),
    };
    if attempt.error.is_some() {
        row.last_error.clone_from(&attempt.error);
    }
    lifecycle::record_attempt(&mut row.attempts, attempt);
}

/// Returns a message for another attempt, or dead-letters it when its attempts are used up.
pub(crate) async fn nack(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    delay: Option<Duration>,
    failure: Failure,
) -> Result<NackOutcome, StoreError> {
    validate_nack_delay(delay)?;
    with_lease(inner, queue, &receipt, async |tx, cfg, row, now, fx| {
        if row.cancel_requested {
            end_cancelled(tx, row.id, cfg, now).await?;
            return Ok(Change::Done(NackOutcome {
                state: Some(MessageState::Completed),
                queue: queue.clone(),
            }));
        }
        apply_failure(row, now, AttemptOutcome::Nacked, &failure);
        fx.counts.add(queue.as_str(), Counter::Nacked, 1);
        match lifecycle::after_nack(cfg, row.receive_count, delay) {
            AfterFailure::Retry(d) => {
                row.state = WAITING;
                row.visible_at = Timestamp(now).plus(d).as_millis();
                row.token = None;
                if d.is_zero() {
                    fx.wake.insert(queue.to_string());
                }
                Ok(Change::Row(NackOutcome {
                    state: Some(if d.is_zero() {
                        MessageState::Visible
                    } else {
                        MessageState::Delayed
                    }),
                    queue: queue.clone(),
                }))
            }
            AfterFailure::DeadLetter(reason) => {
                dead_letter(tx, row, cfg, reason, now, fx).await?;
                Ok(Change::Row(NackOutcome {
                    state: None,
                    queue: QueueName::new(row.queue.clone()).map_err(corrupt)?,
                }))
            }
        }
    })
    .await
}

/// Dead-letters a message now.
pub(crate) async fn reject(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    failure: Failure,
) -> Result<QueueName, StoreError> {
    with_lease(inner, queue, &receipt, async |tx, cfg, row, now, fx| {
        if row.cancel_requested {
            end_cancelled(tx, row.id, cfg, now).await?;
            return Ok(Change::Done(queue.clone()));
        }
        apply_failure(row, now, AttemptOutcome::Rejected, &failure);
        dead_letter(tx, row, cfg, DeadLetterReason::Rejected, now, fx).await?;
        Ok(Change::Row(
            QueueName::new(row.queue.clone()).map_err(corrupt)?,
        ))
    })
    .await
}

/// Moves a leased message to queue `to` as a fresh visible message there.
pub(crate) async fn move_to(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    to: &QueueName,
    failure: Failure,
) -> Result<(), StoreError> {
    sluice_core::store::validate_move(queue, to)?;
    with_lease(inner, queue, &receipt, async |tx, cfg, row, now, fx| {
        crate::ops::queues::config(tx, to.as_str(), false).await?;
        if row.cancel_requested {
            end_cancelled(tx, row.id, cfg, now).await?;
            return Ok(Change::Done(()));
        }
        apply_failure(row, now, AttemptOutcome::Moved, &failure);
        row.source_queue = Some(queue.to_string());
        row.dead_letter = None;
        row.queue = to.to_string();
        row.state = WAITING;
        row.visible_at = now;
        row.entered_at = now;
        row.receive_count = 0;
        row.token = None;
        fx.wake.insert(to.to_string());
        Ok(Change::Row(()))
    })
    .await
}

/// Hands a delivery back without counting it as an attempt.
pub(crate) async fn release(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
) -> Result<(), StoreError> {
    with_lease(inner, queue, &receipt, async |tx, cfg, row, now, fx| {
        if row.cancel_requested {
            end_cancelled(tx, row.id, cfg, now).await?;
            return Ok(Change::Done(()));
        }
        row.state = WAITING;
        row.visible_at = now;
        row.receive_count = row.receive_count.saturating_sub(1);
        row.token = None;
        fx.wake.insert(queue.to_string());
        Ok(Change::Row(()))
    })
    .await
}

/// Releases `deliveries` of `queue` that no receive took, one by one; one that cannot be
/// released returns when its lease runs out.
pub(crate) async fn release_unused(
    inner: &Inner,
    queue: &QueueName,
    deliveries: impl IntoIterator<Item = Delivery>,
) {
    for d in deliveries {
        if let Err(e) = release(inner, queue, d.receipt).await {
            tracing::debug!(error = %e, %queue, id = %d.id, "could not release a message no receive took; it returns when its lease runs out");
        }
    }
}

/// Sets the lease to end `visibility` from now.
pub(crate) async fn extend(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    visibility: Duration,
) -> Result<LeaseState, StoreError> {
    validate_visibility(visibility)?;
    with_lease(inner, queue, &receipt, async |_, _, row, now, _| {
        let deadline = Timestamp(now).plus(visibility);
        row.visible_at = deadline.as_millis();
        Ok(Change::Row(LeaseState {
            deadline,
            cancel_requested: row.cancel_requested,
        }))
    })
    .await
}

/// Records the progress of a running task, in its row so every node's status call sees it.
pub(crate) async fn progress(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    mut progress: Progress,
) -> Result<LeaseState, StoreError> {
    progress.validate()?;
    with_lease(inner, queue, &receipt, async |tx, _, row, now, _| {
        progress.at = Timestamp(now);
        tx.execute(
            "UPDATE messages SET progress = $2 WHERE id = $1",
            &[&row.id, &Json(&progress)],
        )
        .await
        .map_err(|e| db(&e))?;
        Ok(Change::Done(LeaseState {
            deadline: Timestamp(row.visible_at),
            cancel_requested: row.cancel_requested,
        }))
    })
    .await
}

/// Cancels a task: a waiting one ends now, a running one is flagged.
pub(crate) async fn cancel(inner: &Inner, id: MessageId) -> Result<Message, StoreError> {
    let mut conn = inner.conn().await?;
    let fx = crate::db::tx::transaction(&mut conn, async |tx| {
        let now = inner.now();
        let mut fx = Effects::default();
        crate::hot::packs::unpack_member(tx, id.0 as i64).await?;
        let found = tx
            .query_opt(
                "SELECT queue FROM messages WHERE id = $1",
                &[&(id.0 as i64)],
            )
            .await
            .map_err(|e| db(&e))?;
        let Some(found) = found else {
            return Ok(fx);
        };
        let queue: String = found.get(0);
        let cfg = crate::ops::queues::config(tx, &queue, false).await?;
        expire_queue(tx, &queue, &cfg, now, &mut fx).await?;
        let row = tx
            .query_opt(
                &format!("SELECT {ROW_COLS} FROM messages WHERE id = $1 FOR UPDATE"),
                &[&(id.0 as i64)],
            )
            .await
            .map_err(|e| db(&e))?;
        if let Some(r) = row {
            let row = Row::from_pg(&r)?;
            let finished = row.dead_letter.is_some() || row.state == crate::db::row::DONE;
            if finished || (row.state == crate::db::row::LEASED && row.cancel_requested) {
                // A dead letter is a failed task and a completed one is done: left as is.
            } else if row.state == crate::db::row::LEASED {
                tx.execute(
                    "UPDATE messages SET cancel_requested = true WHERE id = $1",
                    &[&row.id],
                )
                .await
                .map_err(|e| db(&e))?;
            } else {
                let qcfg = if row.queue == queue {
                    cfg.clone()
                } else {
                    crate::ops::queues::config(tx, &row.queue, false).await?
                };
                end_cancelled(tx, row.id, &qcfg, now).await?;
            }
        }
        fx.write(tx).await?;
        Ok(fx)
    })
    .await?;
    fx.wake(inner);
    drop(conn);
    crate::ops::browse::get(inner, id).await
}
