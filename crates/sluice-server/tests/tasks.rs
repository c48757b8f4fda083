//! Task status and the autoscaling hint.

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
    // Without per_worker, each worker carries one.
    let (code, v) = s.call(Method::GET, "/v1/queues/work/scaling", None).await;
    assert_eq!((code, &v["desired_workers"]), (StatusCode::OK, &json!(7)));
    for bad in ["per_worker=0", "per_worker=x", "per_worker="] {
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

#[tokio::test]
async fn progress_and_cancel_over_http_with_an_event_stream() {
    let s = common::start().await;
    s.put_queue("long", json!({})).await;
    let id = s.send("long", json!({ "task": "crunch" })).await;
    let d = s.receive("long", json!({})).await;
    let receipt = d[0]["receipt"].clone();

    let (code, v) = s
        .call(
            Method::POST,
            "/v1/queues/long/progress",
            Some(json!({ "receipt": receipt, "pct": 40, "detail": "page 4 of 10" })),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["cancel_requested"], false);
    let (_, v) = s.call(Method::GET, &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(v["progress"]["pct"], 40.0);
    assert_eq!(v["progress"]["detail"], "page 4 of 10");

    // Watch the events while the task is cancelled and then settled.
    let events = s
        .client
        .get(s.url(&format!("/v1/tasks/{id}/events")))
        .send()
        .await
        .expect("events");
    assert_eq!(events.headers()["content-type"], "text/event-stream");

    let (code, v) = s
        .call(Method::POST, &format!("/v1/tasks/{id}/cancel"), None)
        .await;
    assert_eq!(
        (code, v["status"].as_str()),
        (StatusCode::OK, Some("CANCELLED"))
    );
    let (_, v) = s
        .call(
            Method::POST,
            "/v1/queues/long/extend",
            Some(json!({ "receipt": receipt, "visibility_timeout_ms": 30000 })),
        )
        .await;
    assert_eq!(
        v["cancel_requested"], true,
        "the handler learns it at its next extension"
    );
    let (code, _) = s
        .call(
            Method::POST,
            "/v1/queues/long/ack",
            Some(json!({ "receipt": receipt, "result": 1 })),
        )
        .await;
    assert!(code.is_success());
    let (_, v) = s.call(Method::GET, &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(
        v["status"], "CANCELLED",
        "a late success does not undo CANCELLED"
    );

    // The stream carried the running status with progress, then CANCELLED, and then ended.
    let body = tokio::time::timeout(Duration::from_secs(5), events.text())
        .await
        .expect("stream ends")
        .expect("text");
    let statuses: Vec<serde_json::Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("event JSON"))
        .collect();
    assert!(
        statuses
            .first()
            .is_some_and(|v| v["progress"]["pct"] == 40.0),
        "{body}"
    );
    assert_eq!(
        statuses.last().map(|v| v["status"].clone()),
        Some(json!("CANCELLED")),
        "{body}"
    );

    let got = s
        .call(Method::POST, "/v1/tasks/00000000000000aa/cancel", None)
        .await;
    common::assert_error(&got, 404, "message_not_found");
    let bad = s
        .call(
            Method::POST,
            "/v1/queues/long/progress",
            Some(json!({ "receipt": receipt, "pct": 150 })),
        )
        .await;
    assert!(bad.0.is_client_error(), "{:?}", bad);
}
