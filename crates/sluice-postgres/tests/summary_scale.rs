//! The summary of a DLQ of 1,000,000 dead letters on PostgreSQL, timed. Ignored by default
//! (it writes a million rows); run it to reproduce `docs/benchmarks.md`:
//!
//! ```sh
//! cargo test --release -p sluice-postgres --test summary_scale -- --ignored --nocapture
//! ```
//!
//! The rows are written with one `INSERT … SELECT` (as dead-lettering would leave them:
//! reason, time, error, source queue, attempts, a 200-byte body, an attribute; dead-lettered
//! within the last minutes, so retention leaves them alone), since a
//! million rejects through the API would take most of an hour and measure something else.
//! `SLUICE_SUMMARY_N` changes the count (default 1,000,000).

mod common;

use std::time::Instant;

use sluice_core::store::prelude::*;
use sluice_core::summary::{GroupBy, SummaryRequest};
use sluice_core::{QueueName, RedriveFilter};
use sluice_postgres::PostgresOptions;

fn req(group_by: GroupBy) -> SummaryRequest {
    SummaryRequest {
        group_by,
        filter: RedriveFilter::default(),
        limit: 100,
    }
}

async fn timed(store: &dyn Store, dlq: &QueueName, what: &str, r: SummaryRequest) {
    let mut took = Vec::new();
    let mut last = None;
    for _ in 0..2 {
        let t = Instant::now();
        last = Some(store.summarize(dlq, r.clone()).await.expect("summary"));
        took.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let s = last.expect("ran");
    println!(
        "{what:<40} {:>8.1} ms, then {:>8.1} ms  total {} in {} groups",
        took[0], took[1], s.total, s.group_count
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes a million rows; run with --release --ignored"]
async fn summary_of_a_million_dead_letters() {
    let n: i64 = std::env::var("SLUICE_SUMMARY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let Some(nodes) = common::nodes("summary_scale", PostgresOptions::default()).await else {
        return;
    };
    let store = &nodes.a;
    common::created(store, "work").await;
    let dlq = common::q("work.dlq");
    let db = nodes.db().await;
    let t = Instant::now();
    db.execute(
        "INSERT INTO messages (id, queue, state, visible_at, entered_at, enqueued_at,
                               receive_count, body, body_kind, attrs, last_error, attempts,
                               source_queue, dl_reason, dl_at)
         SELECT 1000000000000 + g, 'work.dlq', 0, t0 + g, t0 + g, t0 - 60000 + g, 3,
                convert_to(repeat('x', 200), 'UTF8'), 1,
                jsonb_build_object('tenant', 't' || (g % 10)),
                CASE WHEN g % 3 = 2 THEN 'HTTP 429 Too Many Requests'
                     ELSE 'upstream timeout after 30s' END,
                jsonb_build_array(jsonb_build_object('at', t0 + g,
                    'outcome', 'nacked', 'error', 'upstream timeout after 30s')),
                'work',
                CASE WHEN g % 3 = 2 THEN 'rejected' ELSE 'exhausted' END,
                t0 + g
         FROM generate_series(1, $1::bigint) AS g,
              (SELECT (extract(epoch FROM now()) * 1000)::bigint - $1::bigint AS t0) AS base",
        &[&n],
    )
    .await
    .expect("insert");
    db.batch_execute("ANALYZE messages").await.expect("analyze");
    println!(
        "wrote {n} dead-letter rows in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    for pass in ["before VACUUM", "after VACUUM"] {
        if pass == "after VACUUM" {
            db.batch_execute("VACUUM ANALYZE messages")
                .await
                .expect("vacuum");
        }
        println!("-- {pass}");
        // The plan of the dead-letter part of a summary by reason.
        for row in db
            .query(
                "EXPLAIN SELECT dl_reason, count(*), min(dl_at), max(dl_at), min(id)
                 FROM messages WHERE queue = 'work.dlq' AND dl_at IS NOT NULL AND state < 2
                 GROUP BY 1",
                &[],
            )
            .await
            .expect("explain")
        {
            println!("   {}", row.get::<_, String>(0));
        }
        for (what, r) in [
            ("group by error", req(GroupBy::Error)),
            ("group by reason", req(GroupBy::Reason)),
            ("group by source", req(GroupBy::Source)),
        ] {
            timed(store, &dlq, what, r).await;
        }
        let mut r = req(GroupBy::Reason);
        r.filter.error_contains = Some("429".into());
        timed(store, &dlq, "group by reason, error contains 429", r).await;
        timed(
            store,
            &dlq,
            "group by attribute:tenant",
            req(GroupBy::Attribute("tenant".into())),
        )
        .await;
    }
}
