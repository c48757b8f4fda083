//! Ack statements of one queue combined: acks that arrive while an earlier ack of the queue is
//! being committed share the next statement and its commit (see [`crate::hot::combine`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use sluice_core::{QueueName, StoreError, Timestamp};
use tokio::sync::oneshot;
use tokio_postgres::types::Type;

use crate::error::{db, pool};
use crate::store::Inner;

/// How many ack statements of one queue a node commits at a time; acks arriving beyond them
/// gather for the next. One: an ack's wait is mostly its commit, during which the next
/// acks gather. (With 100 receipts per ack, four at a time measured no faster.)
pub(crate) const ACKS_IN_FLIGHT: usize = 1;

/// The receipts of one ack call waiting for their queue's next statement.
pub(crate) struct AckJob {
    /// The receipts' message ids.
    pub(crate) ids: Vec<i64>,
    /// The receipts' lease tokens.
    pub(crate) tokens: Vec<i64>,
    /// Per receipt, the result to keep, if any.
    pub(crate) results: Vec<Option<Bytes>>,
    /// Per receipt, the kind of its result.
    pub(crate) kinds: Vec<Option<i16>>,
    /// Per receipt: `Some(acked)` when acked, `None` when stale.
    pub(crate) reply: oneshot::Sender<Result<Vec<Option<Acked>>, StoreError>>,
}

/// What an ack found of a message it acked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acked {
    /// A cancel was requested: the task's end is neutral.
    pub(crate) cancelled: bool,
    /// The message's key, for a queue that governs keys.
    pub(crate) key: Option<String>,
}

/// Writes `jobs` in as few statements as receipts named twice allow.
pub(crate) async fn write_acks(
    inner: &Inner,
    queue: &QueueName,
    ttl: Duration,
    mut jobs: Vec<AckJob>,
) {
    while !jobs.is_empty() {
        let mut named = HashSet::new();
        let (first, later): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|j| {
            j.ids.iter().all(|id| !named.contains(id)) && {
                named.extend(j.ids.iter().copied());
                true
            }
        });
        let done = ack_statement(inner, queue, ttl, &first).await;
        for j in first {
            let answer = done
                .as_ref()
                .map_err(Clone::clone)
                .map(|acked| j.ids.iter().map(|id| acked.get(id).cloned()).collect());
            let _ = j.reply.send(answer);
        }
        jobs = later;
    }
}

/// One ack statement, committed on its own, for every receipt of `jobs`: the acked ids, each
/// with whether it had a cancel requested and its key.
async fn ack_statement(
    inner: &Inner,
    queue: &QueueName,
    ttl: Duration,
    jobs: &[AckJob],
) -> Result<HashMap<i64, Acked>, StoreError> {
    let q = queue.as_str();
    let conn = inner.ack_pool.get().await.map_err(|e| pool(&e))?;
    let now = inner.now();
    let keep = Timestamp(now).plus(ttl).as_millis();
    // Receipts of pack leases first: most are acked in their packs; the others name members
    // unpacked since (or are stale) and go on to the rows.
    let (mut pack_ids, mut pack_tokens) = (vec![], vec![]);
    for j in jobs {
        for (id, token) in j.ids.iter().zip(&j.tokens) {
            if crate::hot::packs::is_pack_token(*token) {
                pack_ids.push(*id);
                pack_tokens.push(*token);
            }
        }
    }
    let mut acked = HashMap::new();
    if !pack_ids.is_empty() {
        let kept = (!ttl.is_zero()).then_some(keep);
        for id in crate::hot::packs::ack_in_packs(&conn, queue, &pack_ids, &pack_tokens, now, kept)
            .await?
        {
            acked.insert(
                id,
                Acked {
                    cancelled: false,
                    key: None,
                },
            );
        }
    }
    let (mut ids, mut tokens, mut results, mut kinds) = (vec![], vec![], vec![], vec![]);
    for j in jobs {
        for (i, id) in j.ids.iter().enumerate() {
            if acked.contains_key(id) {
                continue;
            }
            ids.push(*id);
            tokens.push(j.tokens[i]);
            results.push(j.results[i].as_deref());
            kinds.push(j.kinds[i]);
        }
    }
    if ids.is_empty() {
        return Ok(acked);
    }
    let keep_none = ttl.is_zero();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
        [&q, &ids, &tokens, &results, &kinds, &now, &keep];
    let rows = if ids.len() <= SMALL_ACK {
        // Planned once per connection: see [`SMALL_ACK_COMPLETE_SQL`].
        let sql = if keep_none {
            SMALL_ACK_DELETE_SQL
        } else {
            SMALL_ACK_COMPLETE_SQL
        };
        let stmt = conn
            .prepare_typed_cached(sql, &ACK_TYPES)
            .await
            .map_err(|e| db(&e))?;
        conn.query(&stmt, &params).await.map_err(|e| db(&e))?
    } else {
        // Planned for each call, knowing its receipts, on a connection of the main pool:
        // planning costs little per receipt here. Typed parameters send it in one round
        // trip (parse, bind, execute) where an untyped one asks the server for the types
        // first. The ack connection is not needed for it and goes back first.
        drop(conn);
        let sql = if keep_none {
            ACK_DELETE_SQL
        } else {
            ACK_COMPLETE_SQL
        };
        let typed: Vec<_> = params.into_iter().zip(ACK_TYPES).collect();
        inner
            .conn()
            .await?
            .query_typed(sql, &typed)
            .await
            .map_err(|e| db(&e))?
    };
    acked.extend(rows.iter().map(|r| {
        let acked = Acked {
            cancelled: r.get(1),
            key: r.get(2),
        };
        (r.get::<_, i64>(0), acked)
    }));
    Ok(acked)
}

/// Up to this many row receipts, an ack statement is planned once per connection; more are
/// planned for each call.
///
/// PostgreSQL plans a statement with a few receipts anew on every call unless told not to
/// (it estimates the custom plan cheaper), and that planning costs more than running it: at
/// one message per ack (4 producers, 4 consumers) planning was half the ack's database time.
/// A plan made once cannot know how many receipts it gets, and the small form
/// ([`SMALL_ACK_COMPLETE_SQL`]) pairs each row with its receipt by a linear search, cheap only
/// for short lists.
const SMALL_ACK: usize = 32;

/// The parameter types of every ack statement.
const ACK_TYPES: [Type; 7] = [
    Type::TEXT,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::BYTEA_ARRAY,
    Type::INT2_ARRAY,
    Type::INT8,
    Type::INT8,
];

/// The columns an ack that keeps a completed record sets, with the receipt's result and its
/// kind as given. The attempts that failed before (and the last error) stay with the record.
macro_rules! complete_set {
    ($result:literal, $kind:literal) => {
        concat!(
            "UPDATE messages m SET state = 2, visible_at = $6, keep_until = $7,
             token = NULL, body = NULL, attrs = NULL, progress = NULL,
             source_queue = NULL, dl_reason = NULL, dl_at = NULL, dedup_id = NULL,
             result = CASE WHEN m.cancel_requested THEN NULL ELSE ",
            $result,
            " END,
             result_kind = CASE WHEN m.cancel_requested THEN NULL ELSE ",
            $kind,
            " END"
        )
    };
}

/// In the small ack statements: the rows of receipts `$2` (ids) / `$3` (tokens) of queue
/// `$1` leased until after `$6`. Written so that the plan made once, whatever the table's
/// statistics said then, finds them by the primary key: `state` is compared as an `int`, so
/// the partial indexes on `state` do not apply, and the ack connections do not scan tables
/// sequentially (`Inner::ack_pool`). Without that, a plan made while the table looked empty
/// would scan every leased message of the queue, or the whole table, for every ack.
macro_rules! small_ack_where {
    () => {
        " WHERE m.id = ANY($2) AND m.queue = $1 AND m.state::int = 1
               AND m.token = $3[array_position($2, m.id)]
               AND m.visible_at > $6"
    };
}

/// [`ACK_DELETE_SQL`] for at most [`SMALL_ACK`] receipts, planned once per connection.
const SMALL_ACK_DELETE_SQL: &str = concat!(
    "DELETE FROM messages m",
    small_ack_where!(),
    " RETURNING m.id, m.cancel_requested, m.fkey"
);

/// [`ACK_COMPLETE_SQL`] for at most [`SMALL_ACK`] receipts, planned once per connection.
const SMALL_ACK_COMPLETE_SQL: &str = concat!(
    complete_set!(
        "$4[array_position($2, m.id)]",
        "$5[array_position($2, m.id)]"
    ),
    small_ack_where!(),
    " RETURNING m.id, m.cancel_requested, m.fkey"
);

/// An ack of a queue without `result_ttl`: the rows go at once. `$1` queue, `$2` ids, `$3`
/// tokens, `$4`/`$5` results and their kinds (unused here), `$6` now, `$7` keep-until.
const ACK_DELETE_SQL: &str = "DELETE FROM messages m
     USING unnest($2::bigint[], $3::bigint[], $4::bytea[], $5::int2[]) AS a(id, token, result, kind)
     WHERE m.id = ANY($2) AND m.id = a.id AND m.queue = $1 AND m.state = 1
           AND m.token = a.token
           AND m.visible_at > $6 AND $7::bigint IS NOT NULL
     RETURNING m.id, m.cancel_requested, m.fkey";

/// An ack that keeps a completed record (and its result) until `$7`; parameters as
/// [`ACK_DELETE_SQL`].
const ACK_COMPLETE_SQL: &str = concat!(
    complete_set!("a.result", "a.kind"),
    " FROM unnest($2::bigint[], $3::bigint[], $4::bytea[], $5::int2[]) AS a(id, token, result, kind)
     WHERE m.id = ANY($2) AND m.id = a.id AND m.queue = $1 AND m.state = 1
           AND m.token = a.token
           AND m.visible_at > $6
     RETURNING m.id, m.cancel_requested, m.fkey"
);
