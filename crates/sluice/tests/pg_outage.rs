//! A broker on PostgreSQL loses its database mid-load and gets it back.
//!
//! The broker reaches the database through the test kit's fault proxy; its `Drop` fault closes
//! every connection and refuses new ones, as a database restart or a network partition would,
//! without disturbing the shared server. Meanwhile the broker answers 503 with `Retry-After`;
//! afterwards it serves again by itself, and every send it acknowledged is there.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_testkit::faults::Fault;
use sluice_testkit::postgres;

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outage_answers_503_and_loses_no_acknowledged_send() {
    if !postgres::available().await {
        return;
    }
    let schema = postgres::unique_schema("outage");
    // Dropped also when an assertion fails, so a failed run leaves no schema behind.
    let _schema = postgres::SchemaGuard::new(schema.clone());
    let (proxy, store) = common::pg::proxied_store(&schema).await;
    let (_child, url) = common::serve_store(&store, Stdio::null());
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let created = c
        .put(format!("{url}/v1/queues/orders"))
        .json(&json!({}))
        .send()
        .await
        .expect("create");
    assert!(created.status().is_success());

    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (c, url, stop) = (c.clone(), url.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut acked, mut unavailable, mut n) = (BTreeSet::new(), 0, 0u64);
            let mut retry_after_seen = true;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let resp = c
                    .post(format!("{url}/v1/queues/orders/messages"))
                    .json(&json!({"body": {"order": n}}))
                    .send()
                    .await
                    .expect("the broker itself stays up");
                match resp.status().as_u16() {
                    201 => {
                        acked.insert(n);
                    }
                    503 => {
                        unavailable += 1;
                        retry_after_seen &= resp.headers().contains_key("retry-after");
                        let body: Value = resp.json().await.expect("error JSON");
                        assert_eq!(body["error"]["code"], "unavailable", "{body}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    s => panic!("unexpected status {s}"),
                }
            }
            (acked, unavailable, retry_after_seen, n)
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.set(Fault::Drop);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ready_during = c
        .get(format!("{url}/readyz"))
        .send()
        .await
        .expect("readyz")
        .status()
        .as_u16();
    proxy.set(Fault::None);
    let restored = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let (acked, unavailable, retry_after_seen, attempted) = producer.await.expect("producer");
    assert_eq!(ready_during, 503, "readyz reports the lost database");
    assert!(unavailable > 0, "sends during the outage answered 503");
    assert!(retry_after_seen, "every 503 carried Retry-After");

    // After the restore the broker serves again by itself; everything acknowledged is there.
    let mut received = BTreeSet::new();
    loop {
        let resp = c
            .post(format!("{url}/v1/queues/orders/receive"))
            .json(&json!({"max": 1000}))
            .send()
            .await
            .expect("receive");
        assert_eq!(resp.status(), 200, "the broker recovered by itself");
        let got: Value = resp.json().await.expect("JSON");
        let msgs = got["messages"].as_array().expect("messages").clone();
        if msgs.is_empty() {
            break;
        }
        for m in msgs {
            received.insert(m["body"]["order"].as_u64().expect("order"));
        }
    }
    let lost: Vec<&u64> = acked.difference(&received).take(5).collect();
    assert!(lost.is_empty(), "acknowledged sends lost: {lost:?}");
    let again = c
        .post(format!("{url}/v1/queues/orders/messages"))
        .json(&json!({"body": {"order": attempted + 1}}))
        .send()
        .await
        .expect("send");
    assert_eq!(again.status(), 201, "sends succeed again after the restore");
    eprintln!(
        "{} sends acknowledged, {unavailable} answered 503 during a 3 s outage, all acknowledged \
         present; serving again {:?} after the restore",
        acked.len(),
        restored.elapsed()
    );
}
