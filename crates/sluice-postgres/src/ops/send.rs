//! Send: a whole batch in one multi-row insert, with dedup ids and `max_depth` checked in the
//! same transaction.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::store::validate_bodies_fit;
use sluice_core::{
    Delivery, MessageId, NewMessage, QueueConfig, QueueName, Receipt, SendOutcome, StoreError,
    Timestamp,
};
use tokio::sync::oneshot;
use tokio_postgres::GenericClient;

use crate::db::row::{attrs_json, kind_code};
use crate::error::{corrupt, db};
use crate::store::Inner;

/// Stores a batch in `c`'s transaction. Returns the outcomes and whether a message is
/// visible at once, so that the caller wakes waiting receives (on every node) once the
/// transaction has committed. The caller has checked the batch (`validate_send_batch`).
pub(crate) async fn send(
    inner: &Inner,
    c: &impl GenericClient,
    queue: &QueueName,
    messages: Vec<NewMessage>,
) -> Result<(Vec<SendOutcome>, bool), StoreError> {
    let now = inner.now();
    let q = queue.as_str();
    let cfg = crate::ops::queues::config(c, q, false).await?;
    validate_bodies_fit(&cfg, queue, &messages)?;
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
        crate::ops::queues::config(c, q, true).await?;
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
    let visible_now = insert(
        c,
        INSERT_SQL,
        q,
        now,
        fresh.iter().map(|&i| (&messages[i], ids[i], cfg.delay)),
        None,
    )
    .await?
    .visible_now;
    Ok((out, visible_now))
}

/// Whether a batch can take [`send_plain`]: nothing to check against other rows.
pub(crate) fn is_plain(cfg: &QueueConfig, messages: &[NewMessage]) -> bool {
    cfg.max_depth.is_none()
        && (cfg.dedup_window.is_zero() || messages.iter().all(|m| m.dedup_id.is_none()))
}

/// Whether a plain send of `messages` is stored as a pack. Not on queues with global limits,
/// which count and lease rows only.
fn packed(inner: &Inner, cfg: &QueueConfig, messages: &[NewMessage]) -> bool {
    let limited = cfg.rate_limit.is_some() || cfg.max_in_flight.is_some();
    !limited && crate::hot::packs::packable(inner.pack_min, cfg.delay, messages)
}

/// Plain insert statements of one queue a node runs at the same time. Two: a send waits
/// for its commit's WAL flush, and two in flight let one gather while the other flushes
/// (measured at one message per send, 4 producers and 4 consumers: 1,884 – 1,972 msg/s
/// against 1,641 – 1,677 with one). Not more for large sends: with 100 messages per send
/// and four inserts at a time, producers outran consumers and every lease then scanned a
/// longer backlog (11,479 – 13,411 msg/s against 20,554 – 23,821). One while the queue's
/// consumers on this node are behind (`Inner::backlogged`): at one message per send, 4 + 4,
/// once acks had become cheap, two in flight let producers outrun consumers into a backlog
/// of seconds; one throughout lost a fifth with 2 producers and 6 consumers.
pub(crate) const SENDS_IN_FLIGHT: usize = 2;

/// A plain send waiting for its queue's next combined write.
pub(crate) struct SendJob {
    messages: Vec<NewMessage>,
    /// The queue's default delay as the caller saw it.
    delay: Duration,
    /// Whether it is stored as a pack.
    pack: bool,
    reply: oneshot::Sender<Result<(Vec<SendOutcome>, bool), StoreError>>,
}

/// Sends a batch with no dedup ids and no `max_depth`. Plain sends of one queue that arrive
/// together are written as one statement committed on its own (see [`crate::hot::combine`]): the
/// rows of many producers in one round trip and one WAL flush. `cfg` may be a recently
/// cached copy; the insert itself checks that the queue still exists. The caller has checked
/// the batch (`validate_send_batch`).
pub(crate) async fn send_plain(
    inner: &Arc<Inner>,
    queue: &QueueName,
    cfg: &QueueConfig,
    messages: Vec<NewMessage>,
) -> Result<(Vec<SendOutcome>, bool), StoreError> {
    validate_bodies_fit(cfg, queue, &messages)?;
    let (reply, answer) = oneshot::channel();
    let job = SendJob {
        pack: packed(inner, cfg, &messages),
        messages,
        delay: cfg.delay,
        reply,
    };
    // While the queue's consumers are behind, a send's wait hides behind the backlog's: one
    // insert at a time gathers more sends per commit and leaves the database's time to the
    // leases.
    let limit = if inner.backlogged.has(queue.as_str()) {
        1
    } else {
        SENDS_IN_FLIGHT
    };
    if let Some(batch) = inner.sends.push_within(queue.as_str(), job, limit) {
        // A task of its own, so a caller that goes away does not stop the others' write.
        let (inner, queue) = (inner.clone(), queue.clone());
        tokio::spawn(async move {
            crate::hot::combine::drain(&inner.sends, queue.as_str(), batch, |jobs| {
                write_batch(&inner, &queue, jobs)
            })
            .await;
        });
    }
    answer
        .await
        .map_err(|_| StoreError::unavailable("the send was dropped before it was written"))?
}

/// Writes the plain sends of `jobs`: the large ones as packs in one statement, the others as
/// rows in another.
async fn write_batch(inner: &Arc<Inner>, queue: &QueueName, jobs: Vec<SendJob>) {
    let q = queue.as_str();
    let (packed, rows): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|j| j.pack);
    if !packed.is_empty() {
        let written = async {
            let conn = inner.conn().await?;
            let mut firsts = Vec::with_capacity(packed.len());
            for j in &packed {
                firsts.push(inner.ids.draw_run(&**conn, j.messages.len()).await?);
            }
            let packs: Vec<(i64, &[NewMessage])> = firsts
                .iter()
                .zip(&packed)
                .map(|(first, j)| (*first, j.messages.as_slice()))
                .collect();
            let stored = crate::hot::packs::insert(&conn, q, inner.now(), &packs).await?;
            let ids = firsts
                .iter()
                .zip(&packed)
                .flat_map(|(first, j)| (0..j.messages.len() as i64).map(move |i| first + i))
                .collect();
            Ok::<_, StoreError>((ids, stored, true))
        }
        .await;
        answer(inner, q, packed, written);
    }
    if !rows.is_empty() {
        let written = async {
            let total: usize = rows.iter().map(|j| j.messages.len()).sum();
            let conn = inner.conn().await?;
            let ids = inner.ids.draw(&**conn, total).await?;
            let stmt = conn.prepare_cached(INSERT_SQL).await.map_err(|e| db(&e))?;
            let mut items = Vec::with_capacity(total);
            let mut next_id = ids.iter().copied();
            for j in &rows {
                for m in &j.messages {
                    items.push((m, next_id.next().unwrap_or_default(), j.delay));
                }
            }
            let now = inner.now();
            let handoff = handoff(inner, q, now, &mut items).await;
            let inserted = insert(
                &**conn,
                &stmt,
                q,
                now,
                items.iter().copied(),
                handoff.as_ref(),
            )
            .await?;
            if let Some(h) = &handoff
                && inserted.rows > 0
            {
                hand_over(inner, queue, &items[..h.count], &inserted.leased, h);
            }
            Ok::<_, StoreError>((ids, inserted.rows, inserted.visible_now))
        }
        .await;
        answer(inner, q, rows, written);
    }
}

/// Claims messages of `items` for the receives waiting on this node for queue `q`
/// (`crate::hot::handoff`), when its config allows: moves those visible at once to the front,
/// up to as many as are waited for, and says how many and for what lease length.
async fn handoff(
    inner: &Inner,
    q: &str,
    now: i64,
    items: &mut [(&NewMessage, i64, Duration)],
) -> Option<HandOff> {
    let visible =
        |(m, _, delay): &(&NewMessage, i64, Duration)| m.delay.unwrap_or(*delay).is_zero();
    let ready = items.iter().filter(|i| visible(i)).count();
    let (lease, count) = inner
        .handoff
        .claim(q, ready, crate::hot::read_ahead::SHORTEST_LEASE)?;
    // Only a send that found receives waiting reads the config. A claim dropped here is
    // only a hint lost: such a queue's receives would not take what is held anyway.
    let cfg = inner.config(q).await.ok()?;
    if cfg.paused || cfg.rate_limit.is_some() || cfg.max_in_flight.is_some() {
        return None;
    }
    // The claimed ones first, in their order (a stable partition).
    items.sort_by_key(|i| !visible(i));
    let deadline = Timestamp(now).plus(lease).as_millis();
    Some(HandOff {
        count,
        deadline,
        at: now,
        lease,
        max_receive_count: cfg.max_receive_count,
    })
}

/// Holds the messages inserted leased for the receives waiting on this node and wakes as
/// many of them: they take the messages without a lease statement, and what none takes is
/// released after [`crate::hot::read_ahead::HOLD`].
fn hand_over(
    inner: &Arc<Inner>,
    queue: &QueueName,
    items: &[(&NewMessage, i64, Duration)],
    leased: &[(i64, i64)],
    h: &HandOff,
) {
    let tokens: HashMap<i64, i64> = leased.iter().copied().collect();
    let deliveries: Vec<Delivery> = items
        .iter()
        .filter_map(|(m, id, _)| {
            let token = *tokens.get(id)?;
            let id = MessageId(*id as u64);
            Some(Delivery {
                id,
                receipt: Receipt {
                    id,
                    token: token as u64,
                },
                body: m.body.clone(),
                attributes: m.attributes.clone(),
                receive_count: 1,
                max_receive_count: h.max_receive_count,
                enqueued_at: Timestamp(h.at),
                last_error: None,
                lease_deadline: Timestamp(h.deadline),
            })
        })
        .collect();
    let n = deliveries.len();
    let key = crate::hot::lease_combine::key(queue.as_str(), h.lease);
    crate::hot::read_ahead::hold(inner, queue, &key, deliveries);
    // Only this node's receives: on other nodes nothing became visible.
    inner.wakers.wake_some(queue.as_str(), n);
}

/// Answers each of `jobs` from one write: `(ids in the jobs' order, rows or packs stored,
/// whether a message is visible at once)`.
fn answer(
    inner: &Inner,
    q: &str,
    jobs: Vec<SendJob>,
    written: Result<(Vec<i64>, i64, bool), StoreError>,
) {
    match written {
        Ok((_, 0, _)) => {
            inner.configs.forget(q);
            for j in jobs {
                let _ = j.reply.send(Err(StoreError::QueueNotFound(q.to_string())));
            }
        }
        Ok((ids, _, visible_now)) => {
            let mut ids = ids.into_iter();
            for j in jobs {
                let out = ids
                    .by_ref()
                    .take(j.messages.len())
                    .map(|id| SendOutcome {
                        id: MessageId(id as u64),
                        duplicate: false,
                    })
                    .collect();
                let _ = j.reply.send(Ok((out, visible_now)));
            }
        }
        Err(e) => {
            for j in jobs {
                let _ = j.reply.send(Err(e.clone()));
            }
        }
    }
}

/// The insert of [`insert`]: every message of a batch, guarded by the queue's existence. The
/// first `$9` rows are inserted leased, until their `v`, for receives waiting on this node
/// (`crate::hot::handoff`). Returns how many rows it inserted, and the ids and tokens of those
/// leased.
pub(crate) const INSERT_SQL: &str = "WITH ins AS (
                 INSERT INTO messages (id, queue, state, visible_at, entered_at, enqueued_at, body,
                     body_kind, attrs, dedup_id, receive_count, token)
                 SELECT i, $1, CASE WHEN n <= $9 THEN 1 ELSE 0 END, v, $2, $2, b, k, a, d,
                     CASE WHEN n <= $9 THEN 1 ELSE 0 END,
                     CASE WHEN n <= $9 THEN (random() * 9.2e18)::bigint END
                 FROM unnest($3::bigint[], $4::bigint[], $5::bytea[], $6::int2[], $7::jsonb[],
                             $8::text[]) WITH ORDINALITY AS u(i, v, b, k, a, d, n)
                 WHERE EXISTS (SELECT 1 FROM queues WHERE name = $1)
                 RETURNING id, token
             )
             SELECT count(*), array_agg(id) FILTER (WHERE token IS NOT NULL),
                 array_agg(token) FILTER (WHERE token IS NOT NULL)
             FROM ins";

/// Messages of a batch inserted leased, for the receives waiting on this node.
struct HandOff {
    /// How many of the first messages given to [`insert`].
    count: usize,
    /// Until when (ms) they are leased.
    deadline: i64,
    /// When (ms) they were sent.
    at: i64,
    /// The lease length of the receives they are for.
    lease: Duration,
    /// The queue's `max_receives`, for their deliveries.
    max_receive_count: u32,
}

/// What [`insert`] stored: how many rows, whether one is visible at once, and the `(id,
/// token)` of each row inserted leased.
struct Inserted {
    rows: i64,
    visible_now: bool,
    leased: Vec<(i64, i64)>,
}

/// Inserts `items` (message, id, the queue's default delay) into queue `q` with `stmt`
/// ([`INSERT_SQL`]), in one statement that inserts nothing when the queue no longer exists;
/// the first of them leased as `handoff` says.
async fn insert<'a, S>(
    c: &impl GenericClient,
    stmt: &S,
    q: &str,
    now: i64,
    items: impl Iterator<Item = (&'a NewMessage, i64, Duration)>,
    handoff: Option<&HandOff>,
) -> Result<Inserted, StoreError>
where
    S: tokio_postgres::ToStatement + Sync + Send + ?Sized,
{
    let mut visible_now = false;
    let mut cols = Columns::default();
    let leased = handoff.map_or(0, |h| h.count);
    for (n, (m, id, default_delay)) in items.enumerate() {
        let visible_at = match handoff {
            Some(h) if n < leased => h.deadline,
            _ => {
                let at = Timestamp(now)
                    .plus(m.delay.unwrap_or(default_delay))
                    .as_millis();
                visible_now |= at <= now;
                at
            }
        };
        cols.ids.push(id);
        cols.visible.push(visible_at);
        cols.bodies.push(&m.body.bytes);
        cols.kinds.push(kind_code(m.body.kind));
        cols.attrs.push(attrs_json(&m.attributes));
        cols.dedup.push(m.dedup_id.as_deref());
    }
    let leased = i64::try_from(leased).unwrap_or(i64::MAX);
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
}
