//! Send: a whole batch in one multi-row insert, with dedup ids and `max_depth` checked in the
//! same transaction.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::store::validate_bodies_fit;
use sluice_core::{
    MessageId, NewMessage, QueueConfig, QueueName, SendOutcome, StoreError, Timestamp, TraceContext,
};
use tokio_postgres::GenericClient;

use crate::db::row::{attrs_json, kind_code};
use crate::db::tx::transaction;
use crate::error::{corrupt, db};
use crate::store::Inner;

/// Sends a batch: a plain one (nothing to check against other rows) combined with other
/// sends of the queue, any other in a transaction of its own; then counts and wakes.
pub(crate) async fn send(
    inner: &Arc<Inner>,
    queue: &QueueName,
    mut messages: Vec<NewMessage>,
) -> Result<Vec<SendOutcome>, StoreError> {
    let local = inner.locals.of(queue);
    let cfg = inner.config(&local).await?;
    cfg.fill_content_dedup(&mut messages);
    // From before the batch commits until it is counted (`crate::coverage`).
    let _counting = inner.counting.read().await;
    let messages_grouped = messages.iter().any(|m| m.group.is_some());
    let messages_tagged = messages.iter().any(is_tagged);
    let (out, wake) = if is_plain(&cfg, &messages) {
        crate::hot::send_combine::send_combined(inner, &local, &cfg, messages).await?
    } else {
        let mut conn = inner.conn().await?;
        transaction(&mut conn, async |tx| {
            send_in_tx(inner, tx, queue, messages).await
        })
        .await?
    };
    let fresh = out.iter().filter(|o| !o.duplicate).count();
    inner.tally(
        queue.as_str(),
        crate::db::counters::Counter::Sent,
        fresh as i64,
    );
    if wake {
        inner.wake_local(&local, fresh);
    }
    if messages_grouped {
        local.mark_grouped();
    }
    if messages_tagged {
        local.mark_ordered();
    }
    Ok(out)
}

/// Stores a batch in `c`'s transaction. Returns the outcomes and whether a message is
/// visible at once, so that the caller wakes waiting receives (on every node) once the
/// transaction has committed. The batch has been checked (`validate_send_batch`: by
/// `Checked` for a send, by [`PostgresStore::send_in`](crate::PostgresStore::send_in) itself).
///
/// Long because the dedup claims, each message's outcome, the `max_depth` check under the queue's
/// row lock and the insert belong to the caller's one transaction and share the ids drawn at its
/// start.
pub(crate) async fn send_in_tx(
    inner: &Inner,
    c: &impl GenericClient,
    queue: &QueueName,
    mut messages: Vec<NewMessage>,
) -> Result<(Vec<SendOutcome>, bool), StoreError> {
    let now = inner.now();
    let q = queue.as_str();
    let cfg = crate::db::catalog::config(c, q, false).await?;
    validate_bodies_fit(&cfg, queue, &messages)?;
    cfg.fill_content_dedup(&mut messages);
    let ids = inner.ids.draw(c, messages.len()).await?;
    // Dedup: claim each key in the table; a key another send holds inside its window keeps
    // that send's id. Keys repeated inside this batch count as already sent.
    let dedup_on = !cfg.dedup_window.is_zero();
    let mut first_in_batch: HashMap<&str, usize> = HashMap::new();
    let mut dup_of: Vec<Option<usize>> = vec![None; messages.len()];
    let mut claim_keys: Vec<&str> = Vec::new();
    let mut claim_ids: Vec<i64> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let Some(key) = m.dedup_id.as_deref().filter(|_| dedup_on) else {
            continue;
        };
        match first_in_batch.get(key) {
            Some(first) => dup_of[i] = Some(*first),
            None => {
                first_in_batch.insert(key, i);
                claim_keys.push(key);
                claim_ids.push(ids[i]);
            }
        }
    }
    let mut existing: HashMap<String, i64> = HashMap::new();
    if !claim_keys.is_empty() {
        let until = Timestamp(now).plus(cfg.dedup_window).as_millis();
        let claimed = c
            .query(
                "INSERT INTO dedup AS d (queue, dedup_id, message_id, until)
                 SELECT $1, k, i, $4 FROM unnest($2::text[], $3::bigint[]) AS u(k, i)
                 ON CONFLICT (queue, dedup_id) DO UPDATE
                     SET message_id = EXCLUDED.message_id, until = EXCLUDED.until
                     WHERE d.until <= $5
                 RETURNING dedup_id",
                &[&q, &claim_keys, &claim_ids, &until, &now],
            )
            .await
            .map_err(|e| db(&e))?;
        if claimed.len() < claim_keys.len() {
            let claimed: std::collections::HashSet<String> =
                claimed.iter().map(|r| r.get::<_, String>(0)).collect();
            let held: Vec<&str> = claim_keys
                .iter()
                .copied()
                .filter(|k| !claimed.contains(*k))
                .collect();
            for r in c
                .query(
                    "SELECT dedup_id, message_id FROM dedup WHERE queue = $1 AND dedup_id = ANY($2)",
                    &[&q, &held],
                )
                .await
                .map_err(|e| db(&e))?
            {
                existing.insert(r.get(0), r.get(1));
            }
        }
    }
    let mut out = Vec::with_capacity(messages.len());
    let mut fresh: Vec<usize> = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let key = m.dedup_id.as_deref().filter(|_| dedup_on);
        let prior = match (dup_of[i], key) {
            (Some(first), _) => existing
                .get(key.unwrap_or_default())
                .copied()
                .or(Some(ids[first])),
            (None, Some(k)) => existing.get(k).copied(),
            (None, None) => None,
        };
        match prior {
            Some(id) => out.push(SendOutcome {
                id: MessageId(id as u64),
                duplicate: true,
            }),
            None => {
                fresh.push(i);
                out.push(SendOutcome {
                    id: MessageId(ids[i] as u64),
                    duplicate: false,
                });
            }
        }
    }
    if fresh.is_empty() {
        return Ok((out, false));
    }
    if let Some(max) = cfg.max_depth {
        // Under the queue's row lock, so nodes sending at once cannot overshoot together.
        crate::db::catalog::config(c, q, true).await?;
        let row = c
            .query_one(crate::hot::packs::DEPTH_SQL, &[&q])
            .await
            .map_err(|e| db(&e))?;
        let depth = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
        if depth + fresh.len() as u64 > max {
            return Err(StoreError::QueueFull {
                queue: q.to_string(),
                max_depth: max,
                retry_after: Duration::from_secs(1),
            });
        }
    }
    let items = fresh.iter().map(|&i| (&messages[i], ids[i], cfg.delay));
    let visible_now = if fresh
        .iter()
        .any(|&i| messages[i].group.is_some() || own_row(&messages[i]))
    {
        insert_grouped(c, queue, &cfg, now, items).await?.1
    } else {
        insert(c, INSERT_SQL, queue, now, items, None)
            .await?
            .visible_now
    };
    Ok((out, visible_now))
}

/// Whether a batch can take
/// [`send_combined`](crate::hot::send_combine::send_combined): nothing to check against
/// other rows, and no message joins a group's line (packs, combined sends and hand-offs
/// keep no lines). Messages with keys or priorities may: a combined write that holds any is
/// ranked as it is stored, neither packed nor handed off.
pub(crate) fn is_plain(cfg: &QueueConfig, messages: &[NewMessage]) -> bool {
    cfg.max_depth.is_none()
        && messages.iter().all(|m| m.group.is_none())
        && (cfg.dedup_window.is_zero() || messages.iter().all(|m| m.dedup_id.is_none()))
}

/// Whether `m` carries a key or a priority: stored as a row of its own, ranked on delivery.
pub(crate) fn is_tagged(m: &NewMessage) -> bool {
    m.key.is_some() || m.priority.is_some()
}

/// Whether `m` is stored as a row of its own by [`insert_grouped`] (never packed nor handed
/// off, whose rows keep no group line, key, priority or trace context): tagged or traced.
pub(crate) fn own_row(m: &NewMessage) -> bool {
    is_tagged(m) || m.trace.is_some()
}

/// The insert of [`insert`]: every message of a batch, guarded by the queue's existence. The
/// first `$9` rows are inserted leased, at `$2` until their `v`, for receives of consumer
/// `$10` waiting on this node (`crate::hot::handoff`). Returns how many rows it inserted, and
/// the ids and tokens of those leased.
pub(crate) const INSERT_SQL: &str = "WITH ins AS (
                 INSERT INTO messages (id, queue, state, visible_at, entered_at, enqueued_at, body,
                     body_kind, attrs, dedup_id, receive_count, token, leased_at, leased_by)
                 SELECT i, $1, CASE WHEN n <= $9 THEN 1 ELSE 0 END, v, $2, $2, b, k, a, d,
                     CASE WHEN n <= $9 THEN 1 ELSE 0 END,
                     CASE WHEN n <= $9 THEN (random() * 9.2e18)::bigint END,
                     CASE WHEN n <= $9 THEN $2::bigint END,
                     CASE WHEN n <= $9 THEN $10::text END
                 FROM unnest($3::bigint[], $4::bigint[], $5::bytea[], $6::int2[], $7::jsonb[],
                             $8::text[]) WITH ORDINALITY AS u(i, v, b, k, a, d, n)
                 WHERE EXISTS (SELECT 1 FROM queues WHERE name = $1)
                 RETURNING id, token
             )
             SELECT count(*), array_agg(id) FILTER (WHERE token IS NOT NULL),
                 array_agg(token) FILTER (WHERE token IS NOT NULL)
             FROM ins";

/// Messages of a batch inserted leased, for the receives waiting on this node.
pub(crate) struct HandOff {
    /// How many of the first messages given to [`insert`].
    pub(crate) count: usize,
    /// Until when (ms) they are leased.
    pub(crate) deadline: i64,
    /// When (ms) they were sent.
    pub(crate) at: i64,
    /// The lease length of the receives they are for.
    pub(crate) lease: Duration,
    /// The name those receives gave, recorded as the leases' holder.
    pub(crate) consumer: Option<String>,
    /// The queue's `max_receives`, for their deliveries.
    pub(crate) max_receive_count: u32,
    /// The queue's `default_priority`: the priority of their deliveries (a hand-off is only
    /// of plain messages).
    pub(crate) default_priority: u8,
}

/// What [`insert`] stored: how many rows, whether one is visible at once, and the `(id,
/// token)` of each row inserted leased.
pub(crate) struct Inserted {
    /// Rows inserted: none when the queue no longer exists.
    pub(crate) rows: i64,
    /// Whether a message inserted is visible at once.
    pub(crate) visible_now: bool,
    /// The `(id, token)` of each row inserted leased.
    pub(crate) leased: Vec<(i64, i64)>,
}

/// Inserts `items` (message, id, the queue's default delay) into queue `q` with `stmt`
/// ([`INSERT_SQL`]), in one statement that inserts nothing when the queue no longer exists;
/// the first of them leased as `handoff` says.
pub(crate) async fn insert<'a, S>(
    c: &impl GenericClient,
    stmt: &S,
    queue: &QueueName,
    now: i64,
    items: impl Iterator<Item = (&'a NewMessage, i64, Duration)>,
    handoff: Option<&HandOff>,
) -> Result<Inserted, StoreError>
where
    S: tokio_postgres::ToStatement + Sync + Send + ?Sized,
{
    let q = queue.as_str();
    let leased = handoff.map_or(0, |h| h.count);
    let (cols, visible_now) = Columns::of(now, items, |n| match handoff {
        Some(h) if n < leased => Some(h.deadline),
        _ => None,
    });
    let leased = i64::try_from(leased).unwrap_or(i64::MAX);
    let holder = handoff.and_then(|h| h.consumer.as_deref());
    let row = c
        .query_one(
            stmt,
            &[
                &q,
                &now,
                &cols.ids,
                &cols.visible,
                &cols.bodies,
                &cols.kinds,
                &cols.attrs,
                &cols.dedup,
                &leased,
                &holder,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    let ids: Option<Vec<i64>> = row.try_get(1).map_err(corrupt)?;
    let tokens: Option<Vec<i64>> = row.try_get(2).map_err(corrupt)?;
    Ok(Inserted {
        rows: row.try_get(0).map_err(corrupt)?,
        visible_now,
        leased: ids
            .unwrap_or_default()
            .into_iter()
            .zip(tokens.unwrap_or_default())
            .collect(),
    })
}

/// The insert's columns, one array each.
#[derive(Default)]
struct Columns<'a> {
    ids: Vec<i64>,
    visible: Vec<i64>,
    bodies: Vec<&'a [u8]>,
    kinds: Vec<i16>,
    attrs: Vec<Option<serde_json::Value>>,
    dedup: Vec<Option<&'a str>>,
    groups: Vec<Option<&'a str>>,
    keys: Vec<Option<&'a str>>,
    prios: Vec<Option<i16>>,
    traceparents: Vec<Option<&'a str>>,
    tracestates: Vec<Option<&'a str>>,
}

impl<'a> Columns<'a> {
    /// The columns of `items` sent at `now`, each visible when `leased_until` says (for the
    /// `n`th item: `Some(deadline)` inserts it leased) or after its delay; and whether one
    /// is visible at once.
    fn of(
        now: i64,
        items: impl Iterator<Item = (&'a NewMessage, i64, Duration)>,
        leased_until: impl Fn(usize) -> Option<i64>,
    ) -> (Self, bool) {
        let mut cols = Columns::default();
        let mut visible_now = false;
        for (n, (m, id, default_delay)) in items.enumerate() {
            let visible_at = leased_until(n).unwrap_or_else(|| {
                let at = Timestamp(now)
                    .plus(m.delay.unwrap_or(default_delay))
                    .as_millis();
                visible_now |= at <= now;
                at
            });
            cols.ids.push(id);
            cols.visible.push(visible_at);
            cols.bodies.push(&m.body.bytes);
            cols.kinds.push(kind_code(m.body.kind));
            cols.attrs.push(attrs_json(&m.attributes));
            cols.dedup.push(m.dedup_id.as_deref());
            cols.groups.push(m.group.as_ref().map(|g| g.as_str()));
            cols.keys.push(m.key.as_ref().map(|k| k.as_str()));
            cols.prios.push(m.priority.map(i16::from));
            cols.traceparents
                .push(m.trace.as_ref().map(TraceContext::traceparent));
            cols.tracestates
                .push(m.trace.as_ref().and_then(TraceContext::tracestate));
        }
        (cols, visible_now)
    }
}

/// The insert of a batch in which messages join their groups' lines, carry keys or
/// priorities or trace context: as [`INSERT_SQL`] without hand-offs, with each message's group
/// (`$9`), key (`$11`), priority (`$12`), rank (`$13`, `crate::hot::ranks`) and trace context
/// (`$14`, `$15`) and, for a grouped one, its place: `$10` · 2^20 plus its position in the
/// batch.
const GROUPED_INSERT_SQL: &str = "INSERT INTO messages (id, queue, state, visible_at,
                 entered_at, enqueued_at, body, body_kind, attrs, dedup_id, grp, line, fkey, prio,
                 rank, traceparent, tracestate)
             SELECT i, $1, 0, v, $2, $2, b, k, a, d, g,
                 CASE WHEN g IS NOT NULL THEN $10::bigint * 1048576 + n END, fk, p, r, tp, ts
             FROM unnest($3::bigint[], $4::bigint[], $5::bytea[], $6::int2[], $7::jsonb[],
                         $8::text[], $9::text[], $11::text[], $12::int2[], $13::int8[],
                         $14::text[], $15::text[])
                  WITH ORDINALITY AS u(i, v, b, k, a, d, g, fk, p, r, tp, ts, n)
             WHERE EXISTS (SELECT 1 FROM queues WHERE name = $1)";

/// Inserts `items` into queue `queue` as [`insert`] does, with their keys and priorities, the
/// grouped ones at the end of their groups' lines: the transaction takes the lock of each line
/// first and holds it to its commit. Returns how many rows it inserted (none when the queue no
/// longer exists) and whether a message is visible at once.
pub(crate) async fn insert_grouped<'a>(
    c: &impl GenericClient,
    queue: &QueueName,
    cfg: &QueueConfig,
    now: i64,
    items: impl Iterator<Item = (&'a NewMessage, i64, Duration)>,
) -> Result<(u64, bool), StoreError> {
    let q = queue.as_str();
    let (cols, visible_now) = Columns::of(now, items, |_| None);
    // With keys or priorities in the batch, its messages without a group that are deliverable
    // at once are ranked as they are stored, so a receive finds them in order without ranking
    // them itself. (A batch with neither leaves them to the receives of a queue that has
    // ranks, and a queue without any out of ranking altogether.)
    let tagged = cols.keys.iter().any(Option::is_some) || cols.prios.iter().any(Option::is_some);
    let deliverable: Vec<usize> = (0..cols.ids.len())
        .filter(|&i| tagged && cols.groups[i].is_none() && cols.visible[i] <= now)
        .collect();
    let mut ranks: Vec<Option<i64>> = vec![None; cols.ids.len()];
    if !deliverable.is_empty() {
        let rows: Vec<(i64, String, u8)> = deliverable
            .iter()
            .map(|&i| {
                let prio = cols.prios[i]
                    .and_then(|p| u8::try_from(p).ok())
                    .unwrap_or(cfg.default_priority);
                (cols.ids[i], cols.keys[i].unwrap_or("").to_owned(), prio)
            })
            .collect();
        let got = crate::hot::ranks::ranks_of(c, q, cfg, &rows).await?;
        for (&i, r) in deliverable.iter().zip(got) {
            ranks[i] = Some(r);
        }
    }
    let mut lines: Vec<&str> = cols.groups.iter().flatten().copied().collect();
    lines.sort_unstable();
    lines.dedup();
    let base: i64 = if lines.is_empty() {
        0
    } else {
        let queues = vec![q; lines.len()];
        c.query_one(crate::db::row::LOCK_LINES_SQL, &[&queues, &lines])
            .await
            .map_err(|e| db(&e))?;
        // Taken under the locks: a line's places follow its commits.
        c.query_one("SELECT nextval('group_lines')", &[])
            .await
            .map_err(|e| db(&e))?
            .try_get(0)
            .map_err(corrupt)?
    };
    let rows = c
        .execute(
            GROUPED_INSERT_SQL,
            &[
                &q,
                &now,
                &cols.ids,
                &cols.visible,
                &cols.bodies,
                &cols.kinds,
                &cols.attrs,
                &cols.dedup,
                &cols.groups,
                &base,
                &cols.keys,
                &cols.prios,
                &ranks,
                &cols.traceparents,
                &cols.tracestates,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    Ok((rows, visible_now))
}
