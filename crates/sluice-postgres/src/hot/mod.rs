//! The hot-path machinery behind receive, ack and send: combining calls into shared
//! statements, packs, reading ahead, hand-off, wake-ups and what a node remembers per queue
//! to make those choices.

/// In a statement about queue `$1`: whether the queue holds messages with keys or priorities,
/// or ranked ones. Its receives then go by rank (`ranks`), and the plain leases take nothing.
/// Two probes of small partial indexes, which find nothing in a plain queue.
macro_rules! ordered_sql {
    () => {
        "(EXISTS (SELECT 1 FROM messages WHERE queue = $1 AND state < 2
                  AND (fkey IS NOT NULL OR prio IS NOT NULL))
          OR EXISTS (SELECT 1 FROM messages WHERE queue = $1 AND state = 0
                     AND rank IS NOT NULL))"
    };
}

/// In a lease statement: the name of place `$place` (1-based) among the messages it leases,
/// from `$takers` (`leases::Takers::param`: one name for all, or one per place).
macro_rules! holder_of {
    ($takers:literal, $place:literal) => {
        concat!(
            "CASE WHEN cardinality(",
            $takers,
            "::text[]) = 1 THEN (",
            $takers,
            "::text[])[1] ELSE (",
            $takers,
            "::text[])[",
            $place,
            "] END"
        )
    };
}

/// The `leased` CTE every lease of message rows ends with: the rows of `picked` leased at
/// `$2` until `$4`, each for the name of its place among them (oldest first) in `$takers`
/// (`leases::Takers::param`), returning the columns `leases::deliveries` reads (the holder's
/// name in column 9; the key, priority and rank the row had in 10 – 12), `$returning`
/// besides, and last the trace context (read by name).
macro_rules! leased_cte {
    ($takers:literal, $returning:literal) => {
        concat!(
            "placed AS (
             SELECT id, was, rank, row_number() OVER (ORDER BY was, id) AS place FROM picked
         ), leased AS (
             UPDATE messages m SET state = 1, receive_count = m.receive_count + 1,
                 token = (random() * 9.2e18)::bigint, visible_at = $4, progress = NULL,
                 rank = NULL, leased_at = $2, leased_by = ",
            holder_of!($takers, "placed.place"),
            "
             FROM placed WHERE m.id = placed.id
             RETURNING m.id, m.token, m.body, m.body_kind, m.attrs, m.receive_count,
                 m.enqueued_at, m.last_error, placed.was, m.leased_by, m.fkey, m.prio,
                 placed.rank",
            $returning,
            ", m.traceparent, m.tracestate
         )"
        )
    };
}

pub(crate) mod ack_combine;
pub(crate) mod backlog;
pub(crate) mod combine;
pub(crate) mod handoff;
pub(crate) mod key_flows;
pub(crate) mod key_rates;
pub(crate) mod key_rooms;
pub(crate) mod lapse_checks;
pub(crate) mod lease_combine;
pub(crate) mod leases;
pub(crate) mod memo;
pub(crate) mod pack_sizes;
pub(crate) mod packs;
pub(crate) mod rank_receive;
pub(crate) mod ranks;
pub(crate) mod read_ahead;
pub(crate) mod send_combine;
pub(crate) mod wake;
