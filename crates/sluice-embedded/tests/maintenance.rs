//! Background maintenance on deep queues: work is done a bounded step at a time.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::store::prelude::*;
use sluice_core::{
    Body, DeadLetterReason, Failure, ManualClock, NewMessage, QueueConfigPatch, QueueName,
    ReceiveRequest, Timestamp,
};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};

/// A message that entered long ago but is waiting out a retry is not at the front of any
/// index, so only the sweep of the whole queue finds it past retention. The sweep looks at
/// a bounded number of messages per pass and resumes; it must still get there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_sweep_finds_a_retried_message_behind_a_deep_queue() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::new(Timestamp(1_000_000_000));
    let (store, _) = EmbeddedStore::open(
        dir.path(),
        EmbeddedOptions {
            clock: Arc::new(clock.clone()),
            maintenance_interval: Duration::from_secs(3600),
            ..EmbeddedOptions::default()
        },
    )
    .expect("open");
    let q = QueueName::new("deep").expect("name");
    store
        .put_queue(
            &q,
            &QueueConfigPatch {
                retention: Some(Duration::from_secs(60)),
                ..Default::default()
            },
        )
        .await
        .expect("create");
    let old = store
        .send(&q, vec![NewMessage::new(Body::text("old"))])
        .await
        .expect("send")[0]
        .id;
    let got = store
        .receive(&q, ReceiveRequest::default())
        .await
        .expect("receive");
    store
        .nack(
            &q,
            got[0].receipt,
            Some(Duration::from_secs(100)),
            Failure::default(),
        )
        .await
        .expect("nack");
    // 250,000 younger messages ahead of it: more than one sweep step.
    clock.advance(Duration::from_secs(50));
    for _ in 0..250 {
        let batch = (0..1000)
            .map(|_| NewMessage::new(Body::text("young")))
            .collect();
        store.send(&q, batch).await.expect("send");
    }
    clock.advance(Duration::from_secs(20));
    for _ in 0..5 {
        store.engine().maintain().await.expect("maintain");
    }
    let m = store.get_message(old).await.expect("get");
    assert_eq!(m.queue.as_str(), "deep.dlq", "not expired: {m:?}");
    assert_eq!(
        m.dead_letter.map(|d| d.reason),
        Some(DeadLetterReason::Expired)
    );
    assert_eq!(store.stats(&q).await.expect("stats").visible, 250_000);
}
