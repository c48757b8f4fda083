//! The summary of a DLQ of 1,000,000 dead letters, timed. Ignored by default (building the
//! DLQ takes a while); run it in release mode to reproduce `docs/benchmarks.md`:
//!
//! ```sh
//! cargo test --release -p sluice-embedded --test summary_scale -- --ignored --nocapture
//! ```
//!
//! `SLUICE_SUMMARY_N` changes the number of dead letters (default 1,000,000). The time taken
//! to build the DLQ (send, receive and reject each message) is printed too: it is the cost of
//! dead-lettering, which keeps the summary index up to date.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::store::prelude::*;
use sluice_core::summary::{GroupBy, SummaryRequest};
use sluice_core::{
    Body, Checked, Failure, NewMessage, QueueConfigPatch, QueueName, ReceiveRequest, RedriveFilter,
    SystemClock,
};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};

fn options() -> EmbeddedOptions {
    EmbeddedOptions {
        clock: Arc::new(SystemClock),
        maintenance_interval: Duration::from_secs(3600),
        // Building the DLQ is not what is measured: no sync per reject.
        sync_interval: Some(Duration::from_millis(100)),
        ..EmbeddedOptions::default()
    }
}

fn req(group_by: GroupBy) -> SummaryRequest {
    SummaryRequest {
        group_by,
        filter: RedriveFilter::default(),
        limit: 100,
    }
}

async fn timed(store: &Checked<EmbeddedStore>, dlq: &QueueName, what: &str, r: SummaryRequest) {
    // The first call after removals recounts the stale groups; the second does not.
    let mut took = Vec::new();
    let mut last = None;
    for _ in 0..2 {
        let t = Instant::now();
        last = Some(store.summarize(dlq, r.clone()).await.expect("summary"));
        took.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let s = last.expect("ran");
    println!(
        "{what:<44} {:>9.1} ms, then {:>9.1} ms  total {} in {} groups",
        took[0], took[1], s.total, s.group_count
    );
}

/// The first call on a queue after a start runs its maintenance (a retention sweep of the
/// whole queue, as any call would); timed apart so the summaries measure themselves.
async fn settle(store: &Checked<EmbeddedStore>, dlq: &QueueName) {
    let t = Instant::now();
    store.stats(dlq).await.expect("stats");
    println!(
        "first call on the queue (maintenance sweep)  {:>9.1} ms",
        t.elapsed().as_secs_f64() * 1000.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "builds a DLQ of a million dead letters; run with --release --ignored"]
async fn summary_of_a_million_dead_letters() {
    let n: usize = std::env::var("SLUICE_SUMMARY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, _) = EmbeddedStore::open(dir.path(), options()).expect("open");
    let q = QueueName::new("work").expect("name");
    let dlq = QueueName::new("work.dlq").expect("name");
    store
        .put_queue(&q, &QueueConfigPatch::default())
        .await
        .expect("queue");
    let build = Instant::now();
    let body = Body::text("x".repeat(200));
    let mut done = 0usize;
    while done < n {
        let batch = (n - done).min(1000);
        let msgs = (0..batch)
            .map(|i| NewMessage {
                attributes: [("tenant".to_owned(), format!("t{}", (done + i) % 10))].into(),
                ..NewMessage::new(body.clone())
            })
            .collect();
        store.send(&q, msgs).await.expect("send");
        let got = store
            .receive(
                &q,
                ReceiveRequest {
                    max: batch as u32,
                    ..ReceiveRequest::default()
                },
            )
            .await
            .expect("receive");
        for (i, d) in got.into_iter().enumerate() {
            let error = if (done + i) % 3 == 2 {
                "HTTP 429 Too Many Requests"
            } else {
                "upstream timeout after 30s"
            };
            store
                .reject(
                    &q,
                    d.receipt,
                    Failure {
                        error: Some(error.to_owned()),
                        consumer: None,
                        retry_after: false,
                    },
                )
                .await
                .expect("reject");
        }
        done += batch;
    }
    println!(
        "built {n} dead letters in {:.1} s",
        build.elapsed().as_secs_f64()
    );
    settle(&store, &dlq).await;
    timed(&store, &dlq, "group by error", req(GroupBy::Error)).await;
    timed(&store, &dlq, "group by reason", req(GroupBy::Reason)).await;
    timed(&store, &dlq, "group by source", req(GroupBy::Source)).await;
    let mut filtered = req(GroupBy::Reason);
    filtered.filter.error_contains = Some("429".into());
    timed(
        &store,
        &dlq,
        "group by reason, error contains 429",
        filtered,
    )
    .await;
    // A redrive-like removal of the oldest dead letters leaves every group's first behind.
    let page = store
        .browse(
            &dlq,
            sluice_core::BrowseRequest {
                state: sluice_core::BrowseState::All,
                limit: 1000,
                cursor: None,
            },
        )
        .await
        .expect("browse");
    for m in page.messages.iter().take(100) {
        store.delete_message(m.id).await.expect("delete");
    }
    timed(
        &store,
        &dlq,
        "group by error, after deletes (recount)",
        req(GroupBy::Error),
    )
    .await;
    timed(
        &store,
        &dlq,
        "group by attribute:tenant",
        req(GroupBy::Attribute("tenant".into())),
    )
    .await;
    let mut by_tenant = req(GroupBy::Error);
    by_tenant.filter.attributes = [("tenant".to_owned(), "t3".to_owned())].into();
    timed(
        &store,
        &dlq,
        "group by error, attribute tenant=t3",
        by_tenant,
    )
    .await;
    drop(store);
    let t = Instant::now();
    let (store, _) = EmbeddedStore::open(dir.path(), options()).expect("reopen");
    println!(
        "reopened (index rebuilt) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    settle(&store, &dlq).await;
    timed(
        &store,
        &dlq,
        "group by error, after restart",
        req(GroupBy::Error),
    )
    .await;
    // Replayed dead letters learn their attributes in the background; a summary that comes
    // first reads what is still missing from the log.
    timed(
        &store,
        &dlq,
        "group by attribute:tenant, after restart",
        req(GroupBy::Attribute("tenant".into())),
    )
    .await;
}
