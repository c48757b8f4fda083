//! Fair, prioritized delivery on PostgreSQL: the rank that orders a queue's deliverable
//! messages once it holds keys or priorities (`sluice_core::fair` states the rule).
//!
//! A message's rank is its priority (top bits) and its pass in its key's round-robin
//! (`sluice_core::fair::rank`). A send ranks the messages it makes deliverable; a message
//! that becomes deliverable later (a delay, a retry, a lease that ran out) is ranked by the
//! first receive after that, which first ranks the rows that became deliverable since, oldest
//! first. Receives run side by side, each ranking the fresh rows it locks (the others skip
//! them), unless the queue has limits to count (`key_limits`, `max_in_flight`, a rate
//! limit, a governed queue): then they take turns on the queue's row, on every node. A
//! key's next pass is its last ranked row's plus its step; a key with no ranked row starts at
//! the lowest rank of its priority (where the next delivery is), or at 0 when the priority has
//! none. Then the lease takes the lowest ranks. A lease clears a row's rank, and so does every
//! lifecycle change written back (a nack, a release, a move, a dead-lettering, a redrive): the
//! message is ranked again when it is deliverable again, at the end of its key's line. Packs
//! hold only plain messages; a queue with ranks unpacks its visible ones before ranking.
//!
//! Costs: a probe per priority and per key among the rows being ranked, an update of those
//! rows, and a lease by the rank index; the ranking is paid once per message.

use std::collections::HashMap;

use sluice_core::fair;
use sluice_core::{QueueConfig, StoreError};
use tokio_postgres::GenericClient;

use crate::error::{corrupt, db};
use crate::hot::key_rooms::Rooms;
use crate::hot::leases::{Taken, Takers, deliveries};

/// Most rows one receive ranks; any left are ranked by the next.
const RANK_BATCH: i64 = 10_000;
/// Rows a receive ranks at least (and eight times what it leases, up to [`RANK_BATCH`]):
/// enough to keep ranking ahead of the sends, few enough that receives running side by side
/// share the ranking rather than one of them ranking everything while the others wait.
const RANK_FLOOR: i64 = 256;

/// Whether queue `$1` holds messages with keys or priorities, or ranked ones.
const ORDERED_SQL: &str = concat!("SELECT ", ordered_sql!());

/// Whether queue `q` holds messages with keys or priorities, or ranked ones: its receives then
/// go by rank.
pub(crate) async fn holds_ranks(c: &impl GenericClient, q: &str) -> Result<bool, StoreError> {
    c.query_one(ORDERED_SQL, &[&q])
        .await
        .map_err(|e| db(&e))?
        .try_get(0)
        .map_err(corrupt)
}

/// Leases up to `n` messages of queue `q` by rank until `deadline`, for `takers`, after
/// ranking what became deliverable (after turning the queue's visible packs into rows, with
/// `unpack`). With `rooms` the caller holds the queue's row lock; without, receives run side
/// by side, each ranking and leasing the rows it locks.
/// With `rooms` (the queue has `key_limits`), only what fits each key's room, stepping over
/// the keys at their limit.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn lease_ranked(
    tx: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    now: i64,
    n: i64,
    deadline: i64,
    takers: Takers<'_>,
    rooms: Option<&mut Rooms<'_>>,
    unpack: bool,
) -> Result<Vec<Taken>, StoreError> {
    if unpack {
        unpack_visible(tx, q, now).await?;
    }
    rank_fresh(tx, q, cfg, now, (n * 8).clamp(RANK_FLOOR, RANK_BATCH)).await?;
    let names = takers.param();
    let Some(rooms) = rooms else {
        let rows = tx
            .query(RANKED_LEASE_SQL, &[&q, &now, &n, &deadline, &names])
            .await
            .map_err(|e| db(&e))?;
        return deliveries(&rows, cfg, deadline, None, 9, 10);
    };
    let want = usize::try_from(n).unwrap_or(0);
    let mut full = rooms.full();
    let mut ids = Vec::new();
    let mut after = (i64::MIN, i64::MIN);
    while ids.len() < want {
        let rows = tx
            .query(
                CANDIDATES_SQL,
                &[&q, &full, &after.0, &after.1, &CANDIDATES],
            )
            .await
            .map_err(|e| db(&e))?;
        let Some(last) = rows.first() else { break };
        after = (
            last.try_get(2).map_err(corrupt)?,
            last.try_get(3).map_err(corrupt)?,
        );
        let scanned: i64 = last.try_get(4).map_err(corrupt)?;
        let mut page = Vec::with_capacity(rows.len());
        for r in &rows {
            if let Some(id) = r.try_get::<_, Option<i64>>(0).map_err(corrupt)? {
                page.push((id, r.try_get::<_, String>(1).map_err(corrupt)?));
            }
        }
        rooms
            .load(tx, q, page.iter().map(|(_, k)| k.as_str()))
            .await?;
        let fitted = rooms.fit(&page, want - ids.len());
        let none_fit = fitted.is_empty();
        ids.extend(fitted);
        if scanned < CANDIDATES {
            break;
        }
        full = rooms.full();
        if none_fit {
            // A whole page of keys at their limit: the rows behind may be theirs for a long
            // way (one key's backlog, ranked closer together than a lighter key's). Go on from
            // the first row of a key with room instead of reading the rest of theirs.
            match first_rank_with_room(tx, q, &full, after.0).await? {
                Some(rank) if rank > after.0 => after = (rank, i64::MIN),
                Some(_) => {}
                None => break,
            }
        }
    }
    lease_ids(tx, cfg, now, &ids, deadline, takers).await
}

/// Rows one look of a lease within key rooms reads.
const CANDIDATES: i64 = 256;

/// The next `$5` waiting ranked rows of queue `$1` after `($3, $4)` in rank order, as
/// `(id, key)` of those whose key is not in `$2`, each with the rank and id of the last row
/// read and how many were read; one row of NULL candidates when every row read was of a key
/// in `$2`, none when there was nothing to read. The read is bounded, so a long run of rows of
/// keys at their limit costs a page, not the run.
const CANDIDATES_SQL: &str = "
    WITH scanned AS MATERIALIZED (
        SELECT id, coalesce(fkey, '') AS k, rank FROM messages
        WHERE queue = $1 AND state = 0 AND rank IS NOT NULL AND (rank, id) > ($3, $4)
        ORDER BY rank, id LIMIT $5
    ), last AS (
        SELECT rank, id, count(*) OVER () AS n FROM scanned
        ORDER BY rank DESC, id DESC LIMIT 1
    )
    SELECT s.id, s.k, l.rank, l.id, l.n
    FROM last l LEFT JOIN scanned s ON s.k <> ALL($2)
    ORDER BY s.rank, s.id";

/// The lowest rank at or after `from` among the waiting ranked rows of queue `q` whose key is
/// not in `full`; `None` when there is none. One probe per key with such rows (a skip scan of
/// `messages_key_ranks`), so it costs what the number of waiting keys costs, not what the
/// backlogs of the keys in `full` do.
async fn first_rank_with_room(
    tx: &impl GenericClient,
    q: &str,
    full: &[String],
    from: i64,
) -> Result<Option<i64>, StoreError> {
    tx.query_one(
        "WITH RECURSIVE keys(k) AS (
             (SELECT coalesce(fkey, '') FROM messages
              WHERE queue = $1 AND state = 0 AND rank IS NOT NULL
              ORDER BY coalesce(fkey, '') LIMIT 1)
             UNION ALL
             SELECT (SELECT coalesce(fkey, '') FROM messages
                     WHERE queue = $1 AND state = 0 AND rank IS NOT NULL
                         AND coalesce(fkey, '') > keys.k
                     ORDER BY coalesce(fkey, '') LIMIT 1)
             FROM keys WHERE keys.k IS NOT NULL
         )
         SELECT min((SELECT rank FROM messages
                     WHERE queue = $1 AND state = 0 AND rank IS NOT NULL
                         AND coalesce(fkey, '') = keys.k AND rank >= $3
                     ORDER BY rank LIMIT 1))
         FROM keys WHERE keys.k IS NOT NULL AND keys.k <> ALL($2)",
        &[&q, &full, &from],
    )
    .await
    .map_err(|e| db(&e))?
    .try_get(0)
    .map_err(corrupt)
}

/// Leases the waiting rows `ids` (chosen under the queue's row lock) until `deadline` for
/// `takers`.
pub(crate) async fn lease_ids(
    tx: &impl GenericClient,
    cfg: &QueueConfig,
    now: i64,
    ids: &[i64],
    deadline: i64,
    takers: Takers<'_>,
) -> Result<Vec<Taken>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let names = takers.param();
    let rows = tx
        .query(IDS_LEASE_SQL, &[&ids, &now, &names, &deadline])
        .await
        .map_err(|e| db(&e))?;
    deliveries(&rows, cfg, deadline, Some(13), 9, 10)
}

/// The lease of the waiting rows `$1` at `$2`, until `$4`, for `$3`. Columns as
/// `crate::hot::leases::LEASE_SQL`'s, and the group (13).
const IDS_LEASE_SQL: &str = concat!(
    "WITH picked AS (
         SELECT id, visible_at AS was, rank FROM messages
         WHERE id = ANY($1) AND state = 0
         FOR UPDATE SKIP LOCKED
     ), ",
    leased_cte!("$3", ", m.grp"),
    " SELECT * FROM leased"
);

/// The lease by rank: up to `$3` ranked messages of queue `$1`, lowest rank first (a tie to
/// the message sent first: the order `messages_ranked` holds, so the lease reads no more of it
/// than it takes), leased until `$4` for `$5`. Columns as `crate::hot::leases::LEASE_SQL`'s.
const RANKED_LEASE_SQL: &str = concat!(
    "WITH picked AS (
         SELECT id, visible_at AS was, rank FROM messages
         WHERE queue = $1 AND state = 0 AND rank IS NOT NULL
         ORDER BY rank, id LIMIT $3
         FOR UPDATE SKIP LOCKED
     ), ",
    leased_cte!("$5", ""),
    " SELECT * FROM leased"
);

/// Turns the visible packs of queue `q` into message rows, so that their members are ranked
/// with the rest.
async fn unpack_visible(tx: &impl GenericClient, q: &str, now: i64) -> Result<(), StoreError> {
    let packs = tx
        .query(
            "SELECT id FROM packs WHERE queue = $1 AND state = 0 AND visible_at <= $2
             ORDER BY visible_at, id",
            &[&q, &now],
        )
        .await
        .map_err(|e| db(&e))?;
    for p in packs {
        crate::hot::packs::unpack_waiting(tx, p.try_get(0).map_err(corrupt)?).await?;
    }
    Ok(())
}

/// Ranks up to `most` deliverable rows of queue `q` that have no rank yet, oldest first.
async fn rank_fresh(
    tx: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    now: i64,
    most: i64,
) -> Result<(), StoreError> {
    // Rows another receive is ranking are left to it, so that two receives never wait on
    // each other's rows (nor deadlock over them).
    let fresh = tx
        .query(
            "SELECT id, coalesce(fkey, ''), prio FROM messages
             WHERE queue = $1 AND state = 0 AND grp IS NULL AND rank IS NULL
                 AND visible_at <= $2
             ORDER BY visible_at, id LIMIT $3
             FOR UPDATE SKIP LOCKED",
            &[&q, &now, &most],
        )
        .await
        .map_err(|e| db(&e))?;
    if fresh.is_empty() {
        return Ok(());
    }
    let mut rows = Vec::with_capacity(fresh.len());
    for r in &fresh {
        let id: i64 = r.try_get(0).map_err(corrupt)?;
        let key: String = r.try_get(1).map_err(corrupt)?;
        let prio: Option<i16> = r.try_get(2).map_err(corrupt)?;
        let prio = prio
            .and_then(|p| u8::try_from(p).ok())
            .unwrap_or(cfg.default_priority);
        rows.push((id, key, prio));
    }
    let ranks = ranks_of(tx, q, cfg, &rows).await?;
    let ids: Vec<i64> = rows.iter().map(|(id, ..)| *id).collect();
    tx.execute(
        "UPDATE messages m SET rank = u.r
         FROM unnest($1::bigint[], $2::bigint[]) AS u(i, r)
         WHERE m.id = u.i AND m.state = 0 AND m.rank IS NULL",
        &[&ids, &ranks],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}

/// The ranks of `rows` (`(id, key, priority)`, `""` the implicit key), deliverable now and in
/// the order they became so, in queue `q`: each key goes on from its last ranked row, a key
/// with none starts where its priority's next delivery is. Ranks given by sends running at
/// once may tie (the key, then the id, breaks a tie): the order within a priority is fair, not
/// exact, across concurrent sends.
pub(crate) async fn ranks_of(
    c: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    rows: &[(i64, String, u8)],
) -> Result<Vec<i64>, StoreError> {
    // Where each priority's next delivery is, and each key's last ranked pass. Each as the
    // first row of an index walk (`ORDER BY rank … LIMIT 1`), not as `min`/`max`: before the
    // table's statistics know its keys (a new table, minutes of autovacuum away), an
    // aggregate was planned over another index of the queue, reading its whole backlog.
    let mut levels: Vec<i64> = rows.iter().map(|(_, _, p)| level(*p)).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut starts: HashMap<i64, u64> = HashMap::new();
    for r in c
        .query(
            "SELECT u.l, (SELECT rank FROM messages
                          WHERE queue = $1 AND state = 0 AND rank IS NOT NULL
                              AND rank >= u.l * $3 AND rank < (u.l + 1) * $3
                          ORDER BY rank LIMIT 1)
             FROM unnest($2::bigint[]) AS u(l)",
            &[&q, &levels, &LEVEL_SPAN],
        )
        .await
        .map_err(|e| db(&e))?
    {
        let l: i64 = r.try_get(0).map_err(corrupt)?;
        let min: Option<i64> = r.try_get(1).map_err(corrupt)?;
        starts.insert(l, min.map_or(0, pass_of));
    }
    let mut pairs: Vec<(i64, &str)> = rows
        .iter()
        .map(|(_, k, p)| (level(*p), k.as_str()))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let (pl, pk): (Vec<i64>, Vec<&str>) = pairs.iter().copied().unzip();
    let mut next: HashMap<(i64, String), u64> = HashMap::new();
    let weights = &cfg.key_weights;
    let step_of =
        |key: &str| fair::step(fair::weight_of(weights, (!key.is_empty()).then_some(key)));
    for r in c
        .query(
            "SELECT u.l, u.k, (SELECT rank FROM messages
                               WHERE queue = $1 AND state = 0 AND rank IS NOT NULL
                                   AND coalesce(fkey, '') = u.k
                                   AND rank >= u.l * $4 AND rank < (u.l + 1) * $4
                               ORDER BY rank DESC LIMIT 1)
             FROM unnest($2::bigint[], $3::text[]) AS u(l, k)",
            &[&q, &pl, &pk, &LEVEL_SPAN],
        )
        .await
        .map_err(|e| db(&e))?
    {
        let l: i64 = r.try_get(0).map_err(corrupt)?;
        let k: String = r.try_get(1).map_err(corrupt)?;
        let last: Option<i64> = r.try_get(2).map_err(corrupt)?;
        let pass = match last {
            Some(rank) => pass_of(rank).saturating_add(step_of(&k)),
            None => starts.get(&l).copied().unwrap_or(0),
        };
        next.insert((l, k), pass);
    }
    let mut ranks = Vec::with_capacity(rows.len());
    for (_, key, prio) in rows {
        let l = level(*prio);
        let step = step_of(key);
        let pass = next.entry((l, key.clone())).or_insert(0);
        ranks.push(fair::rank(*prio, *pass));
        *pass = pass.saturating_add(step);
    }
    Ok(ranks)
}

/// Ranks of one priority span this much: the priority's level times it, plus a pass.
const LEVEL_SPAN: i64 = 1 << fair::PASS_BITS;

/// The level of priority `p`: ranks of level `l` lie in `[l · LEVEL_SPAN, (l + 1) · LEVEL_SPAN)`.
fn level(p: u8) -> i64 {
    i64::from(fair::MAX_PRIORITY.saturating_sub(p))
}

/// The pass within a rank.
fn pass_of(rank: i64) -> u64 {
    u64::try_from(rank).unwrap_or(0) & ((1 << fair::PASS_BITS) - 1)
}

/// Adds the deliveries `taken` at `now` to their keys' tallies of the minute (`key_tallies`,
/// read by the keys listing): one row per key delivered.
pub(crate) async fn tally(
    tx: &impl GenericClient,
    q: &str,
    now: i64,
    taken: &[Taken],
) -> Result<(), StoreError> {
    let mut per_key: HashMap<&str, i64> = HashMap::new();
    for t in taken {
        let key = t.delivery.key.as_ref().map_or("", |k| k.as_str());
        *per_key.entry(key).or_insert(0) += 1;
    }
    let (keys, counts): (Vec<&str>, Vec<i64>) = per_key.into_iter().unzip();
    let minute = sluice_core::key_stats::MinuteTally::minute_of(now);
    tx.execute(
        "INSERT INTO key_tallies (queue, fkey, minute, shard, n)
         SELECT $1, k, $2, (pg_backend_pid() % 16)::smallint, c
         FROM unnest($3::text[], $4::bigint[]) AS u(k, c)
         ON CONFLICT (queue, fkey, minute, shard) DO UPDATE SET n = key_tallies.n + EXCLUDED.n",
        &[&q, &minute, &keys, &counts],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}

/// Takes the ranks of queue `q`'s waiting messages away, so that its next receive ranks them
/// anew: after its `default_priority` or `key_weights` changed.
pub(crate) async fn rerank(c: &impl GenericClient, q: &str) -> Result<(), StoreError> {
    c.execute(
        "UPDATE messages SET rank = NULL WHERE queue = $1 AND state = 0 AND rank IS NOT NULL",
        &[&q],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}
