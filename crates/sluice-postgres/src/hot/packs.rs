//! Packs: a large plain send kept as one row until its members need rows of their own.
//!
//! The database pays per row and per index entry far more than per byte, so a message per row
//! caps a queue at the rows it can insert, lease and ack, however large the batches. A send of
//! at least [`PostgresOptions::pack_min`](crate::PostgresOptions::pack_min) messages, all
//! visible at once and without dedup ids, is therefore stored as one `packs` row holding every
//! member's body; a receive with room for all its members leases it with one row lock, and acks
//! mark members done in that row.
//!
//! Anything that needs a member on its own first *unpacks* the pack: a nack, a reject, a move,
//! an extension, progress, a cancel, an ack with a result, a lease that ran out, retention, a
//! receive too small for it, a lookup or deletion by id, browse, purge, a redrive or a queue
//! with global limits. Unpacking turns the pack into ordinary message rows in the states its
//! members are in (same ids, same lease token, completed records for members acked), in one
//! statement under the pack's row lock, and the ordinary paths take over. Packs thus change how
//! messages are stored, never what an operation answers.
//!
//! A pack's lease token is negative and a row lease's is not, so an ack knows which receipts
//! may name pack members without asking the database.

use std::collections::HashMap;

use bytes::Bytes;
use deadpool_postgres::ClientWrapper;
use sluice_core::{
    Attributes, Body, Delivery, MessageId, NewMessage, QueueConfig, QueueName, Receipt, StoreError,
    Timestamp,
};
use tokio_postgres::GenericClient;
use tokio_postgres::types::{Json, Type};

use crate::db::row::{attrs_json, kind_code, kind_of};
use crate::error::{corrupt, db};
use crate::hot::leases::{Taken, Takers};
use crate::local::QueueLocal;

/// Whether a send of `messages` to a queue whose default delay is `delay` is kept as a pack.
pub(crate) fn packable(
    pack_min: usize,
    delay: std::time::Duration,
    messages: &[NewMessage],
) -> bool {
    pack_min > 0
        && messages.len() >= pack_min
        && messages
            .iter()
            .all(|m| m.dedup_id.is_none() && m.delay.unwrap_or(delay).is_zero())
}

/// Whether `token` is a pack's lease token.
pub(crate) fn is_pack_token(token: i64) -> bool {
    token < 0
}

/// Inserts packs of queue `$1` sent at `$2`: first ids `$3`, sizes `$4`, where each starts in
/// the flattened members `$5` (1-based), whether it has attributes `$6`; members' bodies `$7`,
/// kinds `$8`, attributes `$9`. Nothing when the queue no longer exists.
const INSERT_SQL: &str = "WITH ins AS (
         INSERT INTO packs (id, queue, n, pending, state, visible_at, enqueued_at, done, bodies,
                            kinds, attrs)
         SELECT u.i, $1, u.n, u.n, 0, $2, $2, array_fill(0::bigint, ARRAY[u.n]),
             $7[u.s : u.s + u.n - 1], $8[u.s : u.s + u.n - 1],
             CASE WHEN u.a THEN $9[u.s : u.s + u.n - 1] END
         FROM unnest($3::bigint[], $4::int4[], $5::int4[], $6::bool[]) AS u(i, n, s, a)
         WHERE EXISTS (SELECT 1 FROM queues WHERE name = $1)
         RETURNING 1
     )
     SELECT count(*) FROM ins";

/// Stores each of `packs` (first id, members) as one pack of queue `q`. Returns how many it
/// stored: none when the queue no longer exists.
pub(crate) async fn insert(
    c: &ClientWrapper,
    queue: &QueueName,
    now: i64,
    packs: &[(i64, &[NewMessage])],
) -> Result<i64, StoreError> {
    let q = queue.as_str();
    let (mut ids, mut ns, mut starts, mut has_attrs) = (vec![], vec![], vec![], vec![]);
    let (mut bodies, mut kinds, mut attrs) = (vec![], vec![], vec![]);
    for (first, members) in packs {
        ids.push(*first);
        ns.push(i32::try_from(members.len()).unwrap_or(i32::MAX));
        starts.push(i32::try_from(bodies.len() + 1).unwrap_or(i32::MAX));
        has_attrs.push(members.iter().any(|m| !m.attributes.is_empty()));
        for m in *members {
            bodies.push(m.body.bytes.as_ref());
            kinds.push(kind_code(m.body.kind));
            attrs.push(attrs_json(&m.attributes));
        }
    }
    let stmt = c
        .prepare_typed_cached(
            INSERT_SQL,
            &[
                Type::TEXT,
                Type::INT8,
                Type::INT8_ARRAY,
                Type::INT4_ARRAY,
                Type::INT4_ARRAY,
                Type::BOOL_ARRAY,
                Type::BYTEA_ARRAY,
                Type::INT2_ARRAY,
                Type::JSONB_ARRAY,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    let rows = c
        .query(
            &stmt,
            &[
                &q, &now, &ids, &ns, &starts, &has_attrs, &bodies, &kinds, &attrs,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    rows.first()
        .map_or(Ok(0), |r| r.try_get(0))
        .map_err(corrupt)
}

/// Leases waiting packs of queue `$1` (visible at `$2`) whose members fit in `$3` messages, until
/// `$4`, oldest first, locking at most `$5` packs to choose from. Packs newer than the oldest
/// waiting message row without a group wait for it, so rows and packs leave in about the order
/// they became visible (a grouped row may wait behind its line's front, so none holds packs
/// back). Each pack keeps its lease's start (`$2`) and the names of its members' places among
/// the members leased (oldest pack first) in `$8` (`crate::hot::leases::Takers::param`: one
/// name kept for every member, or a slice of one per place). Columns 0 – 8 are the leased
/// packs (none leased: nulls; 8 the names kept); `due` (9) says whether something is due to
/// expire (a pack lease ran out, or a pack passed the retention cutoff `$6`, or the same of a
/// message row, whose lapsed leases are looked for after `$7` as `crate::hot::lapse_checks`
/// explains); `unfit` (10) names the oldest pack seen when none fit; `later` (11) says whether
/// visible packs wait behind the oldest message row; `rows_visible` (12) whether a message row
/// without a group is visible, or the queue holds grouped ones (their lease decides whether
/// one may go) or keys and priorities (then no pack is leased here: the queue's receives rank
/// its messages, packs unpacked, `crate::hot::ranks`); and when nothing was leased, `next_due` (13) says when the queue next changes
/// by itself. Always at least one row.
const LEASE_SQL: &str = concat!(
    "WITH head AS (
         SELECT visible_at FROM messages
         WHERE queue = $1 AND state = 0 AND grp IS NULL AND rank IS NULL
         ORDER BY visible_at, id LIMIT 1
     ), seen AS (
         SELECT id, n, visible_at FROM packs
         WHERE queue = $1 AND state = 0 AND visible_at <= least($2, (SELECT visible_at FROM head))
             AND NOT ",
    ordered_sql!(),
    "
         ORDER BY visible_at, id LIMIT $5
         FOR UPDATE SKIP LOCKED
     ), fit AS (
         SELECT id, was, run - n AS placed FROM (
             SELECT id, n, visible_at AS was, sum(n) OVER (ORDER BY visible_at, id) AS run
             FROM seen
         ) s WHERE run <= $3
     ), leased AS (
         UPDATE packs p SET state = 1, token = -1 - (random() * 9.2e18)::bigint, visible_at = $4,
             leased_at = $2,
             leased_by = CASE WHEN cardinality($8::text[]) = 1 THEN $8::text[]
                              ELSE ($8::text[])[fit.placed + 1 : fit.placed + p.n] END
         FROM fit WHERE p.id = fit.id
         RETURNING p.id, p.token, p.n, p.bodies, p.kinds, p.attrs, p.enqueued_at, fit.was,
             p.leased_by
     )
     SELECT leased.*,
         EXISTS (SELECT 1 FROM packs WHERE queue = $1 AND state = 1 AND visible_at <= $2)
             OR EXISTS (SELECT 1 FROM packs WHERE queue = $1 AND state = 0 AND visible_at <= $6)
             OR EXISTS (SELECT 1 FROM messages WHERE queue = $1 AND state = 1 AND visible_at <= $2
                        AND visible_at > $7)
             OR EXISTS (SELECT 1 FROM messages WHERE queue = $1 AND state = 0 AND entered_at <= $6)
             AS due,
         CASE WHEN leased.id IS NULL THEN (SELECT id FROM seen ORDER BY visible_at, id LIMIT 1) END
             AS unfit,
         EXISTS (SELECT 1 FROM packs WHERE queue = $1 AND state = 0 AND visible_at <= $2
                 AND visible_at > (SELECT visible_at FROM head)) AS later,
         coalesce((SELECT visible_at FROM head) <= $2, false)
             OR EXISTS (SELECT 1 FROM messages WHERE queue = $1 AND grp IS NOT NULL
                        AND state < 2)
             OR ",
    ordered_sql!(),
    " AS rows_visible,
         CASE WHEN leased.id IS NULL THEN least(
             (SELECT visible_at FROM head WHERE visible_at > $2),
             (SELECT min(visible_at) FROM messages
              WHERE queue = $1 AND state = 1 AND visible_at > $7),
             (SELECT min(visible_at) FROM packs WHERE queue = $1 AND state = 1))
         END AS next_due
     FROM (SELECT 1) one LEFT JOIN leased ON true"
);

/// What one pack lease found.
pub(crate) struct Leased {
    /// The members leased, oldest pack first, each with the name it was leased for.
    pub deliveries: Vec<Taken>,
    /// Whether a pack lease ran out or a pack passed retention: expire before trusting the
    /// queue's state.
    pub due: bool,
    /// When nothing fit: the oldest waiting pack, too large for this receive.
    pub unfit: Option<i64>,
    /// Whether visible packs wait behind older message rows.
    pub later: bool,
    /// Whether a message row is visible: when not, there is no need to lease rows.
    pub rows_visible: bool,
    /// When nothing was leased: when the queue next changes by itself.
    pub next_due: Option<i64>,
}

/// Leases whole packs of `queue` for up to `max` messages until `deadline`, for `takers`,
/// choosing among as many as packs of the size last seen (before any, of `pack_min`) need.
///
/// Long because the rows of `LEASE_SQL` are read here column by column, the flags from every row
/// and each leased pack unrolled into its members, so every column number is checked against the
/// statement in one place.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn lease_from_packs(
    pack_min: usize,
    queue: &QueueLocal,
    c: &ClientWrapper,
    cfg: &QueueConfig,
    now: i64,
    max: u32,
    deadline: i64,
    takers: Takers<'_>,
) -> Result<Leased, StoreError> {
    let q = queue.name.as_str();
    let cutoff = crate::expiry::retention_cutoff(cfg, now);
    let choose = queue.pack_sizes.choose(max, pack_min);
    let max = i64::from(max);
    let stmt = c
        .prepare_typed_cached(
            LEASE_SQL,
            &[
                Type::TEXT,
                Type::INT8,
                Type::INT8,
                Type::INT8,
                Type::INT8,
                Type::INT8,
                Type::INT8,
                Type::TEXT_ARRAY,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    let lapsed_after = queue.lapse_checks.after(now);
    let names = takers.param();
    let rows = c
        .query(
            &stmt,
            &[
                &q,
                &now,
                &max,
                &deadline,
                &choose,
                &cutoff,
                &lapsed_after,
                &names,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    queue.lapse_checks.checked(now);
    let mut out = Leased {
        deliveries: Vec::new(),
        due: false,
        unfit: None,
        later: false,
        rows_visible: false,
        next_due: None,
    };
    let mut packs = Vec::with_capacity(rows.len());
    for r in &rows {
        out.due |= r.try_get::<_, bool>(9).map_err(corrupt)?;
        out.unfit = out.unfit.or(r.try_get(10).map_err(corrupt)?);
        out.later |= r.try_get::<_, bool>(11).map_err(corrupt)?;
        out.rows_visible |= r.try_get::<_, bool>(12).map_err(corrupt)?;
        out.next_due = out.next_due.or(r.try_get(13).map_err(corrupt)?);
        let Some(id) = r.try_get::<_, Option<i64>>(0).map_err(corrupt)? else {
            continue;
        };
        let was: i64 = r.try_get(7).map_err(corrupt)?;
        packs.push((was, id, r));
    }
    packs.sort_by_key(|(was, id, _)| (*was, *id));
    let mut sizes = Vec::with_capacity(packs.len());
    for (_, id, r) in packs {
        let token: i64 = r.try_get(1).map_err(corrupt)?;
        let bodies: Vec<Option<Vec<u8>>> = r.try_get(3).map_err(corrupt)?;
        let kinds: Vec<i16> = r.try_get(4).map_err(corrupt)?;
        let attrs: Option<Vec<Option<Json<Attributes>>>> = r.try_get(5).map_err(corrupt)?;
        let enqueued_at: i64 = r.try_get(6).map_err(corrupt)?;
        let names: Vec<Option<String>> = r
            .try_get::<_, Option<_>>(8)
            .map_err(corrupt)?
            .unwrap_or_default();
        sizes.push(bodies.len());
        let mut attrs = attrs.map(Vec::into_iter);
        for (i, (body, kind)) in bodies.into_iter().zip(kinds).enumerate() {
            let member = MessageId((id + i as i64) as u64);
            // One name kept for every member, or each member's own.
            let by = match names.as_slice() {
                [one] => one.clone(),
                each => each.get(i).cloned().flatten(),
            };
            let delivery = Delivery {
                trace: None,
                id: member,
                receipt: Receipt {
                    id: member,
                    token: token as u64,
                },
                body: Body {
                    kind: kind_of(kind),
                    bytes: Bytes::from(body.unwrap_or_default()),
                },
                attributes: attrs
                    .as_mut()
                    .and_then(Iterator::next)
                    .flatten()
                    .map(|a| a.0)
                    .unwrap_or_default(),
                receive_count: 1,
                max_receive_count: cfg.max_receive_count,
                enqueued_at: Timestamp(enqueued_at),
                last_error: None,
                lease_deadline: Timestamp(deadline),
                group: None,
                key: None,
                priority: cfg.default_priority,
            };
            out.deliveries.push(Taken { delivery, by });
        }
    }
    queue.pack_sizes.leased(sizes);
    Ok(out)
}

/// In [`ACK_SQL`]: the statement names every member of pack `p` and every one is pending.
macro_rules! whole {
    () => {
        "(h.all_named AND p.pending = p.n)"
    };
}

/// In [`ACK_SQL`]: the members named (a group naming them all lists none).
macro_rules! named {
    () => {
        "coalesce(h.mids, ARRAY(SELECT generate_series(p.id, p.id + p.n - 1)))"
    };
}

/// In [`ACK_SQL`]: the members named that are still pending.
macro_rules! newly {
    () => {
        concat!(
            "ARRAY(SELECT m FROM unnest(",
            named!(),
            ") m WHERE p.done[m - p.id + 1] = 0)"
        )
    };
}

/// In [`ACK_SQL`]: this statement acks the pack's last pending members.
macro_rules! finishing {
    () => {
        concat!(whole!(), " OR p.pending = cardinality(", newly!(), ")")
    };
}

/// Acks members of leased packs of queue `$1` at `$4`, each keeping a record until `$5` (-1:
/// no record). A pack's lease has a token of its own, so the receipts come grouped by token
/// (`$6` tokens, `$7` lowest and `$8` highest id named, `$9` how many ids), and the pack is
/// looked up once per group, by its lowest id. A group naming every member of its pack, with
/// every member pending (the usual ack of a whole receive), marks them all without listing
/// them; any other group's members are picked out of the receipts (`$2` ids with `$3`
/// tokens). A member acked before, a wrong token or a lease that ran out acks nothing. In
/// `SET` the columns are the row as it was, so `acked_now` lists the members this statement
/// acked (those still pending; NULL when it acked the whole pack), and a pack whose last
/// pending members these are becomes a completed record at once (bodies dropped), pruned at
/// its `keep_until` like completed rows. `SET` and `WHERE` see the row as it is when locked,
/// so a concurrent ack of the same pack is never counted twice. Receipts are distinct.
const ACK_SQL: &str = concat!(
    "WITH grp AS (
         SELECT * FROM unnest($6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[])
             AS g(token, first, last, named)
     ), found AS (
         SELECT p.id AS pid, p.n, g.token,
             g.first = p.id AND g.last = p.id + p.n - 1 AND g.named = p.n AS all_named
         FROM grp g
         CROSS JOIN LATERAL (
             SELECT id, n FROM packs WHERE id <= g.first ORDER BY id DESC LIMIT 1
         ) p
         WHERE g.first < p.id + p.n
     ), hit AS (
         SELECT pid, token, all_named,
             CASE WHEN NOT all_named THEN ARRAY(
                 SELECT a.mid FROM unnest($2::bigint[], $3::bigint[]) AS a(mid, token)
                 WHERE a.token = f.token AND a.mid >= f.pid AND a.mid < f.pid + f.n
             ) END AS mids
         FROM found f
     )
     UPDATE packs p SET
         acked_now = CASE WHEN ",
    whole!(),
    " THEN NULL ELSE ",
    newly!(),
    " END,
         done = CASE WHEN ",
    whole!(),
    " THEN array_fill($5::bigint, ARRAY[p.n])
             ELSE ARRAY(SELECT CASE WHEN d = 0 AND m.mid IS NOT NULL THEN $5 ELSE d END
                        FROM unnest(p.done) WITH ORDINALITY AS u(d, o)
                        LEFT JOIN unnest(",
    named!(),
    ") AS m(mid) ON m.mid = p.id + u.o - 1
                        ORDER BY u.o) END,
         pending = CASE WHEN ",
    whole!(),
    " THEN 0
             ELSE p.pending - cardinality(",
    newly!(),
    ") END,
         state = CASE WHEN ",
    finishing!(),
    " THEN 2 ELSE 1 END,
         token = CASE WHEN ",
    finishing!(),
    " THEN NULL ELSE p.token END,
         bodies = CASE WHEN ",
    finishing!(),
    " THEN NULL ELSE p.bodies END,
         attrs = CASE WHEN ",
    finishing!(),
    " THEN NULL ELSE p.attrs END,
         acked_at = $4,
         keep_until = CASE WHEN ",
    finishing!(),
    " THEN greatest(p.keep_until, nullif($5, -1), $4)
             ELSE greatest(p.keep_until, nullif($5, -1)) END
     FROM hit h
     WHERE p.id = h.pid AND p.queue = $1 AND p.state = 1 AND p.token = h.token
           AND p.visible_at > $4
     RETURNING p.id, p.n, p.acked_now"
);

/// Acks the receipts `(member id, token)` that name members of leased packs of queue `q`.
/// Returns the members acked; the others are for the message rows (a pack unpacked meanwhile)
/// or stale. Receipts are distinct.
pub(crate) async fn ack_in_packs(
    c: &ClientWrapper,
    queue: &QueueName,
    ids: &[i64],
    tokens: &[i64],
    now: i64,
    keep: Option<i64>,
) -> Result<Vec<i64>, StoreError> {
    let q = queue.as_str();
    let keep = keep.unwrap_or(-1);
    // Per token: lowest and highest id named, and how many.
    let mut groups: HashMap<i64, (i64, i64, i64)> = HashMap::new();
    for (&id, &token) in ids.iter().zip(tokens) {
        let g = groups.entry(token).or_insert((id, id, 0));
        g.0 = g.0.min(id);
        g.1 = g.1.max(id);
        g.2 += 1;
    }
    let (mut g_tokens, mut g_first, mut g_last, mut g_named) = (vec![], vec![], vec![], vec![]);
    for (token, (first, last, named)) in groups {
        g_tokens.push(token);
        g_first.push(first);
        g_last.push(last);
        g_named.push(named);
    }
    let stmt = c
        .prepare_typed_cached(
            ACK_SQL,
            &[
                Type::TEXT,
                Type::INT8_ARRAY,
                Type::INT8_ARRAY,
                Type::INT8,
                Type::INT8,
                Type::INT8_ARRAY,
                Type::INT8_ARRAY,
                Type::INT8_ARRAY,
                Type::INT8_ARRAY,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    let rows = c
        .query(
            &stmt,
            &[
                &q, &ids, &tokens, &now, &keep, &g_tokens, &g_first, &g_last, &g_named,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    let mut acked = Vec::with_capacity(ids.len());
    for r in &rows {
        let first: i64 = r.try_get(0).map_err(corrupt)?;
        let n: i32 = r.try_get(1).map_err(corrupt)?;
        match r.try_get::<_, Option<Vec<i64>>>(2).map_err(corrupt)? {
            Some(members) => acked.extend(members),
            // The whole pack.
            None => acked.extend(first..first + i64::from(n)),
        }
    }
    Ok(acked)
}

/// Turns the packs `WHERE` selects (a condition on `packs`, parameters from `$1`) into message
/// rows: waiting members waiting, leased members leased under the pack's token, members acked
/// with a record completed records, members acked without one nothing; the leased and acked
/// ones keep the pack's lease start and their own receiver's name (a waiting pack was never
/// leased and has neither). Returns the packs unpacked and the rows made.
macro_rules! unpack_sql {
    ($where:literal) => {
        concat!(
            "WITH p AS (
                 DELETE FROM packs WHERE ",
            $where,
            " RETURNING id, queue, state, visible_at, enqueued_at, token, done, bodies, kinds,
                     attrs, acked_at, leased_at, leased_by
             ), rows AS (
                 INSERT INTO messages (id, queue, state, visible_at, entered_at, enqueued_at,
                     receive_count, token, body, body_kind, attrs, keep_until, leased_at,
                     leased_by)
                 SELECT p.id + u.o - 1, p.queue,
                     CASE WHEN u.d <> 0 THEN 2 WHEN p.state = 0 THEN 0 ELSE 1 END,
                     CASE WHEN u.d <> 0 THEN p.acked_at ELSE p.visible_at END,
                     p.enqueued_at, p.enqueued_at,
                     CASE WHEN p.state = 0 THEN 0 ELSE 1 END,
                     CASE WHEN u.d = 0 AND p.state = 1 THEN p.token END,
                     CASE WHEN u.d = 0 THEN u.b END, coalesce(u.k, 0),
                     CASE WHEN u.d = 0 THEN u.a END,
                     CASE WHEN u.d <> 0 THEN u.d END,
                     p.leased_at,
                     CASE WHEN cardinality(p.leased_by) = 1 THEN p.leased_by[1]
                          ELSE p.leased_by[u.o] END
                 FROM p CROSS JOIN LATERAL
                     unnest(p.done, p.bodies, p.kinds, p.attrs) WITH ORDINALITY AS u(d, b, k, a, o)
                 WHERE u.d <> -1
                 RETURNING 1
             )
             SELECT (SELECT count(*) FROM p), (SELECT count(*) FROM rows)"
        )
    };
}

/// Unpacks the pack holding message `id`, if one does.
pub(crate) async fn unpack_member(c: &impl GenericClient, id: i64) -> Result<(), StoreError> {
    c.execute(
        unpack_sql!(
            "id = (SELECT id FROM (SELECT id, n FROM packs WHERE id <= $1
                                   ORDER BY id DESC LIMIT 1) last
                   WHERE $1 < last.id + last.n)"
        ),
        &[&id],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}

/// Unpacks every pack of queue `q` except completed ones.
pub(crate) async fn unpack_queue(
    c: &impl GenericClient,
    queue: &QueueName,
) -> Result<(), StoreError> {
    let q = queue.as_str();
    c.execute(unpack_sql!("queue = $1 AND state < 2"), &[&q])
        .await
        .map_err(|e| db(&e))?;
    Ok(())
}

/// Unpacks the pack `id` if it still waits, for a receive too small for it; not when
/// another call holds it (it is being leased).
/// Returns how many members became rows.
pub(crate) async fn unpack_waiting(c: &impl GenericClient, id: i64) -> Result<usize, StoreError> {
    let r = c
        .query_one(
            unpack_sql!(
                "id IN (SELECT id FROM packs WHERE id = $1 AND state = 0 FOR UPDATE SKIP LOCKED)"
            ),
            &[&id],
        )
        .await
        .map_err(|e| db(&e))?;
    Ok(usize::try_from(r.try_get::<_, i64>(1).map_err(corrupt)?).unwrap_or(0))
}

/// Unpacks the packs of queue `q` that expiry must see as rows: those whose lease ran out at
/// `$2`, those past the retention cutoff `$3` — and all of them when the queue has global
/// limits or is governed (`$4`), which count and lease rows only. Skips packs other calls
/// hold.
pub(crate) async fn unpack_due(
    c: &impl GenericClient,
    q: &str,
    cfg: &QueueConfig,
    now: i64,
    cutoff: i64,
) -> Result<(), StoreError> {
    let limited = crate::flow::limited(cfg);
    c.execute(
        unpack_sql!(
            "id IN (SELECT id FROM packs
                    WHERE queue = $1 AND ((state = 1 AND (visible_at <= $2 OR $4))
                                          OR (state = 0 AND (visible_at <= $3 OR $4)))
                    FOR UPDATE SKIP LOCKED)"
        ),
        &[&q, &now, &cutoff, &limited],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}

/// The members of queue `$1`'s packs at `$2`, for its stats: visible, in flight, completed
/// records still kept, and when the oldest visible pack became visible. (Packs are never
/// delayed.)
pub(crate) const STATS_SQL: &str = "SELECT
         coalesce(sum(pending) FILTER (WHERE state = 0 AND visible_at <= $2), 0)::bigint,
         coalesce(sum(pending) FILTER (WHERE state = 1), 0)::bigint,
         coalesce(sum((SELECT count(*) FROM unnest(done) d WHERE d > $2)), 0)::bigint,
         min(visible_at) FILTER (WHERE state = 0 AND visible_at <= $2)
     FROM packs WHERE queue = $1";

/// [`STATS_SQL`] for every queue of `$1` at once, one row per queue that has packs.
pub(crate) const STATS_MANY_SQL: &str = "SELECT queue,
         coalesce(sum(pending) FILTER (WHERE state = 0 AND visible_at <= $2), 0)::bigint,
         coalesce(sum(pending) FILTER (WHERE state = 1), 0)::bigint,
         coalesce(sum((SELECT count(*) FROM unnest(done) d WHERE d > $2)), 0)::bigint,
         min(visible_at) FILTER (WHERE state = 0 AND visible_at <= $2)
     FROM packs WHERE queue = ANY($1) GROUP BY queue";

/// [`DEPTH_SQL`] for every queue of `$1` at once: one row (name, depth) per name.
pub(crate) const DEPTH_MANY_SQL: &str = "SELECT q,
         (SELECT count(*) FROM messages WHERE queue = q AND state < 2)
         + (SELECT coalesce(sum(pending), 0) FROM packs WHERE queue = q AND state < 2)
     FROM unnest($1::text[]) AS q";

/// Messages of queue `$1` not yet acked, rows and pack members together.
pub(crate) const DEPTH_SQL: &str =
    "SELECT (SELECT count(*) FROM messages WHERE queue = $1 AND state < 2)
         + (SELECT coalesce(sum(pending), 0) FROM packs WHERE queue = $1 AND state < 2)";

/// Messages of queue `$1` leased now, rows and pack members together.
pub(crate) const IN_FLIGHT_SQL: &str =
    "SELECT (SELECT count(*) FROM messages WHERE queue = $1 AND state = 1)
         + (SELECT coalesce(sum(pending), 0) FROM packs WHERE queue = $1 AND state = 1)";
