//! Task status (SPEC §6) and the autoscaling hint.

mod common;

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn status_follows_the_lifecycle_and_carries_the_result() {
    let s = common::start().await;
    s.put_queue("jobs", json!({ "max_receive_count": 1 })).await;
    let id = s
        .send(
            "jobs",
            json!({ "task": "add", "args": [1, 2], "kwargs": {} }),
        )
        .await;
    let status = |v: &serde_json::Value| v["status"].as_str().unwrap_or_default().to_string();

    let (_, v) = s.call(Method::GET, &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(status(&v), "PENDING");
    assert_eq!(v["queue"], "jobs");

    let d = s.receive("jobs", json!({})).await;
    let (_, v) = s.call(Method::GET, &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(status(&v), "STARTED");

    let receipt = d[0]["receipt"].clone();
    let (code, _) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/ack",
            Some(json!({ "receipt": receipt, "result": { "sum": 3 } })),
        )
        .await;
    assert!(code.is_success());
    let (_, v) = s.call(Method::GET, &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(status(&v), "SUCCESS");
    assert_eq!(v["result"], json!({ "sum": 3 }));

    let failing = s.send("jobs", json!({ "task": "boom" })).await;
    let d = s.receive("jobs", json!({})).await;
    s.call(
        Method::POST,
        "/v1/queues/jobs/nack",
        Some(json!({ "receipt": d[0]["receipt"], "error": "upstream said no" })),
    )
    .await;
    let (_, v) = s
        .call(Method::GET, &format!("/v1/tasks/{failing}"), None)
        .await;
    assert_eq!(status(&v), "FAILURE");
    assert_eq!(v["error"], "upstream said no");
    assert_eq!(v["queue"], "jobs.dlq");

    let (code, v) = s
        .call(Method::GET, "/v1/tasks/00000000000000ff", None)
        .await;
    assert_eq!((code, status(&v)), (StatusCode::OK, "UNKNOWN".to_string()));
}

#[tokio::test]
async fn wait_ms_returns_as_soon_as_the_task_is_final() {
    let s = std::sync::Arc::new(common::start().await);
    s.put_queue("rpc", json!({})).await;
    let id = s.send("rpc", json!({ "task": "echo" })).await;
    let worker = {
        let s = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let d = s.receive("rpc", json!({})).await;
            s.call(
                Method::POST,
                "/v1/queues/rpc/ack",
                Some(json!({ "receipt": d[0]["receipt"], "result": "pong" })),
            )
            .await;
        })
    };
    let start = Instant::now();
    let (code, v) = s
        .call(Method::GET, &format!("/v1/tasks/{id}?wait_ms=10000"), None)
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["status"], "SUCCESS");
    assert_eq!(v["result"], "pong");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the long poll did not return at completion"
    );
    worker.await.expect("worker");

    let (code, v) = s
        .call(Method::GET, &format!("/v1/tasks/{id}?wait_ms=30001"), None)
        .await;
    common::assert_error(&(code, v), 400, "invalid_argument");
}

#[tokio::test]
async fn scaling_hint_counts_backlog_and_running_work() {
    let s = common::start().await;
    s.put_queue("work", json!({})).await;
    for i in 0..7 {
        s.send("work", json!(i)).await;
    }
    s.receive("work", json!({ "max": 2 })).await;
    let (code, v) = s
        .call(Method::GET, "/v1/queues/work/scaling?per_worker=3", None)
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        v,
        json!({ "desired_workers": 3, "backlog": 5, "in_flight": 2 })
    );
    for bad in ["per_worker=0", "per_worker=x", ""] {
        let got = s
            .call(Method::GET, &format!("/v1/queues/work/scaling?{bad}"), None)
            .await;
        common::assert_error(&got, 400, "invalid_argument");
    }
    let got = s
        .call(Method::GET, "/v1/queues/nope/scaling?per_worker=1", None)
        .await;
    common::assert_error(&got, 404, "queue_not_found");
}
