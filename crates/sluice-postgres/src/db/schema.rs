//! The database schema and its versioned migrations.
//!
//! Every node runs [`migrate`] at start-up. The migrations run in one transaction under a
//! transaction-scoped advisory lock, so several nodes starting at once apply each version
//! exactly once: the first takes the lock and migrates, the others wait and then find
//! nothing left to do.

use tokio_postgres::Client;

use crate::error::OpenError;

/// The migrations, in order. A released migration is never edited: a change is a new entry.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, V1),
    (2, V2),
    (3, V3),
    (4, V4),
    (5, V5),
    (6, V6),
    (7, V7),
    (8, V8),
    (9, V9),
    (10, V10),
    (11, V11),
    (12, V12),
    (13, V13),
    (14, V14),
    (15, V15),
    (16, V16),
    (17, V17),
];

/// Version 1: queues, messages, counters, dedup and idempotency keys, rate windows, redrive
/// jobs, stats history and the audit table.
const V1: &str = r#"
CREATE TABLE queues (
    name        text PRIMARY KEY,
    config      jsonb NOT NULL,
    dlq         text,
    created_at  bigint NOT NULL
);
CREATE INDEX queues_dlq ON queues (dlq);

-- One row per message. state: 0 waiting (visible when visible_at <= now, else delayed),
-- 1 leased (visible_at is the lease deadline), 2 completed (a record kept for result_ttl).
CREATE TABLE messages (
    id                bigint PRIMARY KEY,
    queue             text NOT NULL,
    state             smallint NOT NULL,
    visible_at        bigint NOT NULL,
    entered_at        bigint NOT NULL,
    enqueued_at       bigint NOT NULL,
    receive_count     integer NOT NULL DEFAULT 0,
    token             bigint,
    body              bytea,
    body_kind         smallint NOT NULL DEFAULT 0,
    attrs             jsonb,
    dedup_id          text,
    last_error        text,
    attempts          jsonb,
    source_queue      text,
    dl_reason         text,
    dl_at             bigint,
    cancel_requested  boolean NOT NULL DEFAULT false,
    progress          jsonb,
    result            bytea,
    result_kind       smallint,
    keep_until        bigint
);
CREATE INDEX messages_waiting ON messages (queue, visible_at, id) WHERE state = 0;
CREATE INDEX messages_leased ON messages (queue, visible_at, id) WHERE state = 1;
CREATE INDEX messages_entered ON messages (queue, entered_at) WHERE state = 0;
CREATE INDEX messages_done ON messages (keep_until) WHERE state = 2;

-- Event counters, one row per queue and connection (backend pid mod 256), so concurrent
-- writers never wait on one another's commits; a queue's totals are the sum of its rows.
CREATE TABLE counters (
    queue          text NOT NULL,
    shard          smallint NOT NULL,
    sent           bigint NOT NULL DEFAULT 0,
    received       bigint NOT NULL DEFAULT 0,
    acked          bigint NOT NULL DEFAULT 0,
    nacked         bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    redriven       bigint NOT NULL DEFAULT 0,
    expired        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, shard)
);

CREATE TABLE dedup (
    queue       text NOT NULL,
    dedup_id    text NOT NULL,
    message_id  bigint NOT NULL,
    until       bigint NOT NULL,
    PRIMARY KEY (queue, dedup_id)
);
CREATE INDEX dedup_until ON dedup (until);

CREATE TABLE idempotency (
    key          text PRIMARY KEY,
    fingerprint  bytea NOT NULL,
    status       integer NOT NULL,
    body         bytea NOT NULL,
    created_at   bigint NOT NULL,
    until        bigint NOT NULL
);
CREATE INDEX idempotency_until ON idempotency (until);

-- Deliveries of rate-limited queues, for a sliding window shared by every node.
CREATE TABLE rate_events (
    queue  text NOT NULL,
    at     bigint NOT NULL,
    n      integer NOT NULL
);
CREATE INDEX rate_events_queue ON rate_events (queue, at);

CREATE TABLE redrives (
    id           bigint PRIMARY KEY,
    source       text NOT NULL,
    running      boolean NOT NULL,
    job          jsonb NOT NULL,
    owner        text,
    owner_until  bigint,
    created_at   bigint NOT NULL
);
CREATE UNIQUE INDEX redrives_one_running ON redrives (source) WHERE running;

CREATE TABLE stats_history (
    queue   text NOT NULL,
    at      bigint NOT NULL,
    sample  jsonb NOT NULL,
    PRIMARY KEY (queue, at)
);

CREATE TABLE audit (
    seq    bigserial PRIMARY KEY,
    at     bigint NOT NULL,
    queue  text,
    event  jsonb NOT NULL
);
CREATE INDEX audit_queue ON audit (queue, seq);

-- Message and job ids: each node takes a block of ids at a time.
CREATE SEQUENCE id_blocks;
"#;

/// Version 2: packs. A plain send of many messages is kept as one row until something needs
/// its members one by one (see `crate::hot::packs`).
const V2: &str = r#"
-- Members are the messages id .. id + n - 1, each visible at once when sent.
-- state: 0 waiting (never received), 1 leased for its first delivery (token, visible_at the
-- deadline), 2 completed (every member acked; a record kept until keep_until).
-- done, per member: 0 not acked, -1 acked without a record, else the record's keep-until;
-- acked_at: the latest ack, the completion time its records show.
CREATE TABLE packs (
    id           bigint PRIMARY KEY,
    queue        text NOT NULL,
    n            integer NOT NULL,
    pending      integer NOT NULL,
    state        smallint NOT NULL,
    visible_at   bigint NOT NULL,
    enqueued_at  bigint NOT NULL,
    token        bigint,
    done         bigint[] NOT NULL,
    acked_now    bigint[],
    acked_at     bigint,
    keep_until   bigint,
    bodies       bytea[],
    kinds        smallint[] NOT NULL,
    attrs        jsonb[]
);
-- The bodies are stored out of line uncompressed: a lease or an ack rewrites the small row only.
ALTER TABLE packs ALTER COLUMN bodies SET STORAGE EXTERNAL;
CREATE INDEX packs_waiting ON packs (queue, visible_at, id) WHERE state = 0;
CREATE INDEX packs_leased ON packs (queue, visible_at) WHERE state = 1;
CREATE INDEX packs_done ON packs (keep_until) WHERE state = 2;
"#;

/// Version 3: pack bodies compressed with LZ4 where the server can (PostgreSQL 14 or newer,
/// built with lz4; elsewhere they stay uncompressed out of line, as in version 2). A pack's
/// bodies are compressed as one value, so messages of one batch that share their structure
/// compress together; LZ4 gives up fast on bytes that do not compress (pglz would not, so
/// it is not used). A pack that compresses to about 2 KB is stored inline and its bodies
/// never reach the TOAST table. Packs already stored keep their form.
const V3: &str = r#"
DO $$
BEGIN
    EXECUTE 'ALTER TABLE packs ALTER COLUMN bodies SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE packs ALTER COLUMN bodies SET STORAGE EXTENDED';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    NULL;
END
$$;
"#;

/// Version 4: an index of the dead letters still queued, for queue summaries (grouping by
/// reason or source and filtering by dead-letter time read only the index). It is partial on
/// `dl_at IS NOT NULL`, so a send, a lease or an ack of an ordinary message never touches it.
/// Creating it on a large existing table holds writes to `messages` while it builds.
const V4: &str = r#"
CREATE INDEX messages_dead_letters ON messages (queue, dl_reason, source_queue, dl_at, id)
    WHERE dl_at IS NOT NULL AND state < 2;
"#;

/// Version 5: schedules, one row each. `spec` holds what the schedule enqueues and when;
/// `last_fired` is the time of its latest firing, moved by each step under the row's lock
/// in the transaction that inserts the firing's message.
const V5: &str = r#"
CREATE TABLE schedules (
    name        text PRIMARY KEY,
    spec        jsonb NOT NULL,
    created_at  bigint NOT NULL,
    updated_at  bigint NOT NULL,
    anchor      bigint NOT NULL,
    last_fired  bigint,
    fired       bigint NOT NULL DEFAULT 0,
    missed      bigint NOT NULL DEFAULT 0
);
"#;

/// Version 6: FIFO message groups. `grp` is the group a message was sent with; `line` its place
/// in its group's line within its queue, taken when it entered the queue (a send, or the
/// dead-lettering, move or redrive that brought it) from `group_lines` while the transaction
/// holds the advisory lock of that queue and group, so within a group the places follow the
/// commits. `messages_groups` holds the members of every line (waiting or leased) and
/// nothing for messages without a group. `messages_plain` holds the waiting messages without
/// a group, so that the common lease never steps over a backlog of grouped ones (which wait
/// for their lines and are leased through `messages_groups`); it costs a send of a message
/// row one more index entry.
const V6: &str = r#"
ALTER TABLE messages ADD COLUMN grp text, ADD COLUMN line bigint;
CREATE INDEX messages_groups ON messages (queue, grp, line) WHERE grp IS NOT NULL AND state < 2;
CREATE INDEX messages_plain ON messages (queue, visible_at, id) WHERE state = 0 AND grp IS NULL;
CREATE SEQUENCE group_lines;
"#;

/// Version 7: queue names in bytewise order, for paged listings. The primary key orders
/// names by the database's collation, which need not be bytewise; a page is a range of this
/// index, so its cost does not grow with the number of queues and both engines list in the
/// same order.
const V7: &str = r#"
CREATE INDEX queues_name_bytes ON queues ((name COLLATE "C"));
"#;

/// Version 8: governed queues (`adaptive`, `breaker`). One row per governed queue, shared by
/// every node: `state` is the governor's and the breaker's state (`FlowState` as JSON), `pace`
/// the recent deliveries at the governed pace (`[[at, n], ...]`, a sliding window like
/// `rate_events`, kept here because every receive of the queue reads and writes this row
/// anyway). Written under the lock of the queue's row in `queues`; deleted with the queue,
/// or when its configuration stops governing it.
const V8: &str = r#"
CREATE TABLE queue_flow (
    queue       text PRIMARY KEY,
    state       jsonb NOT NULL,
    pace        jsonb NOT NULL DEFAULT '[]',
    updated_at  bigint NOT NULL
);
"#;

/// Version 9: claims on idempotency keys, so that a key has one effect across nodes. A row
/// with `claim` set is a request's claim, not an answer: `claim` is the holder's token and
/// `claim_until` the end of its lease; `status` is 0, `body` empty, and `until` its
/// `created_at`, so that a node of an earlier version, which reads only `until`, never
/// takes a claim for an answer (it replaces it with its own answer, or forgets it). An answer
/// has both columns NULL.
const V9: &str = r#"
ALTER TABLE idempotency ADD COLUMN claim bigint, ADD COLUMN claim_until bigint;
"#;

/// Version 10: the lease a delivery runs under, for the attempt it ends as. `leased_at` is
/// when the lease was granted and `leased_by` the name its receive gave (NULL for none); a
/// lease sets both, a message waiting again has neither, and a completed record keeps those
/// of the lease its ack ended (its acknowledged attempt shows them). A leased or completed
/// pack keeps the start of its one lease and, in `leased_by`, the name of each member's
/// receive, or one name for every member; unpacking copies them to the member rows. Rows and
/// packs leased before this version have NULLs: their attempts show neither. Adding nullable
/// columns without a default rewrites nothing; a node of an earlier version leaves them as
/// they are, so a lease it grants names the holder of an earlier one or nobody.
const V10: &str = r#"
ALTER TABLE messages ADD COLUMN leased_at bigint, ADD COLUMN leased_by text;
ALTER TABLE packs ADD COLUMN leased_at bigint, ADD COLUMN leased_by text[];
"#;

/// Version 11: keys and priorities (`sluice_core::fair`). `fkey` is the key a message was sent
/// with and `prio` its own priority (NULL: the queue's default). `rank` orders the deliverable
/// messages of a queue that holds keys or priorities: priority in its top bits, then the pass
/// of its key's round-robin (`sluice_core::fair::rank`). A receive of such a queue ranks the
/// messages that became deliverable since the last one, under the queue's row lock, and leases
/// by rank; a lease, and every lifecycle change written back, clears it. `messages_tagged`
/// says whether a queue holds keys or priorities at all (a plain queue's receive asks it, and
/// finds nothing); `messages_ranked` is the order of the ranked messages, `messages_key_ranks`
/// each key's last rank. `messages_plain` now holds only unranked rows, so the common lease
/// and the ranking both start from the oldest unranked waiting row; in a queue without keys or
/// priorities that is every waiting row without a group, as before. Rebuilding it holds writes
/// to `messages` while it builds.
const V11: &str = r#"
ALTER TABLE messages ADD COLUMN fkey text, ADD COLUMN prio smallint, ADD COLUMN rank bigint;
CREATE INDEX messages_tagged ON messages (queue)
    WHERE (fkey IS NOT NULL OR prio IS NOT NULL) AND state < 2;
CREATE INDEX messages_ranked ON messages (queue, rank, id) WHERE state = 0 AND rank IS NOT NULL;
CREATE INDEX messages_key_ranks ON messages (queue, (coalesce(fkey, '')), rank)
    WHERE state = 0 AND rank IS NOT NULL;
DROP INDEX IF EXISTS messages_plain;
CREATE INDEX messages_plain ON messages (queue, visible_at, id)
    WHERE state = 0 AND grp IS NULL AND rank IS NULL;
"#;

/// Version 12: the pace of each rate-limited queue (`sluice_core::rate`): the theoretical
/// arrival time of its next delivery, in ns, moved on by every lease under the queue's row
/// lock with the `rate_events` row of that lease. A queue without a row has not been paced
/// yet: its first deliveries may go as one burst.
const V12: &str = r#"
CREATE TABLE rate_paces (
    queue  text PRIMARY KEY,
    tat    bigint NOT NULL
);
"#;

/// Version 13: deliveries per key and minute (`sluice_core::key_stats::MinuteTally`) of
/// queues that deliver by key, added to by the lease by rank, for the keys listing's rates:
/// a row per connection shard (backend pid mod 16), as `counters` has, so that receives
/// running at once do not wait on each other's count. Rows older than the minute before are
/// pruned by the background round.
const V13: &str = r#"
CREATE TABLE key_tallies (
    queue   text NOT NULL,
    fkey    text NOT NULL,
    minute  bigint NOT NULL,
    shard   smallint NOT NULL,
    n       bigint NOT NULL,
    PRIMARY KEY (queue, fkey, minute, shard)
);
CREATE INDEX key_tallies_minute ON key_tallies (minute);
"#;

/// Version 14: per-key rate limits (`key_limits.rate_limit`, `sluice_core::rate`). Each key's
/// sliding window is its rows of `key_rate_events` (deliveries of one lease) and its row of
/// `key_paces`: the pace's arrival time of its next delivery (ns), until when it has no room
/// (`held_until`, so that receives step over it without reading its window), and from when its
/// window is as good as new (`idle_from`, when the background round forgets both).
const V14: &str = r#"
CREATE TABLE key_rate_events (
    queue  text NOT NULL,
    fkey   text NOT NULL,
    at     bigint NOT NULL,
    n      integer NOT NULL
);
CREATE INDEX key_rate_events_key ON key_rate_events (queue, fkey, at);
CREATE TABLE key_paces (
    queue       text NOT NULL,
    fkey        text NOT NULL,
    tat         bigint,
    held_until  bigint,
    idle_from   bigint NOT NULL,
    PRIMARY KEY (queue, fkey)
);
CREATE INDEX key_paces_held ON key_paces (queue, held_until) WHERE held_until IS NOT NULL;
CREATE INDEX key_paces_idle ON key_paces (idle_from);
"#;

/// Version 15: per-key adaptive rates and breakers (`"scope": "key"`, `sluice_core::adaptive`).
/// Each governed key's flow state (`state`, JSON), its recent deliveries at its governed pace
/// (`pace`, JSON), until when its state admits nothing (`held_until`, so that receives step
/// over it without reading it; `i64::MAX` until something changes it), and when it lapses
/// unless used again (`lapses_at`: its last delivery or outcome plus the queue's
/// `key_idle_ms`; NULL while an operator forces it open), when the background round forgets it.
/// Beside the JSON, what stats count of it: its breaker's state (`breaker`: 0 closed, 1 open,
/// 2 half-open) and its learned rate per minute (`rate_per_min`), NULL without that part.
const V15: &str = r#"
CREATE TABLE key_flow (
    queue         text NOT NULL,
    fkey          text NOT NULL,
    state         jsonb NOT NULL,
    pace          jsonb NOT NULL,
    held_until    bigint,
    lapses_at     bigint,
    breaker       smallint,
    rate_per_min  integer,
    PRIMARY KEY (queue, fkey)
);
CREATE INDEX key_flow_held ON key_flow (queue, held_until) WHERE held_until IS NOT NULL;
CREATE INDEX key_flow_lapses ON key_flow (lapses_at) WHERE lapses_at IS NOT NULL;
CREATE INDEX key_flow_rates ON key_flow (queue, rate_per_min DESC, fkey)
    WHERE rate_per_min IS NOT NULL;
"#;

/// Version 16: the row readiness probes write, so that `/readyz` commits what a send would
/// (a transaction that writes nothing does not wait for a synchronous standby).
const V16: &str = r#"
CREATE TABLE readiness (
    id         smallint PRIMARY KEY,
    checked_at timestamptz NOT NULL
);
INSERT INTO readiness VALUES (1, now());
"#;

/// Version 17: the W3C trace context a message was sent with (null for most: a message sent
/// without one has none).
const V17: &str = r#"
ALTER TABLE messages ADD COLUMN traceparent text, ADD COLUMN tracestate text;
"#;

/// How many ids one `nextval` of `id_blocks` reserves.
pub(crate) const ID_BLOCK: i64 = 1024;

/// Creates `schema` if needed and applies the migrations it lacks.
///
/// # Errors
/// [`OpenError::Database`] when a statement fails; the schema is left as it was.
pub(crate) async fn migrate(client: &mut Client, schema: &str) -> Result<i32, OpenError> {
    let tx = client.transaction().await?;
    // One lock per schema name; two nodes migrating the same schema queue up here.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('sluice-migrate:' || $1))",
        &[&schema],
    )
    .await?;
    let ident = quote_ident(schema);
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {ident};
         CREATE TABLE IF NOT EXISTS {ident}.migrations (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await?;
    let row = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {ident}.migrations"),
            &[],
        )
        .await?;
    let current: i32 = row.get(0);
    let newest = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > newest {
        return Err(OpenError::TooNew {
            schema: schema.to_string(),
            found: current,
            known: newest,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.batch_execute(&format!("SET LOCAL search_path TO {ident}; {sql}"))
            .await?;
        tx.execute(
            &format!("INSERT INTO {ident}.migrations (version) VALUES ($1)"),
            &[version],
        )
        .await?;
        tracing::info!(schema, version, "applied migration");
    }
    tx.commit().await?;
    Ok(newest)
}

/// `name` as a quoted SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
