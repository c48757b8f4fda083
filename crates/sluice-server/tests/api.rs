//! Every route of the v1 API against a real broker over the embedded engine.
//!
//! Over 1,000 lines: it ends with the check that the OpenAPI document lists every route and
//! nothing else, which belongs with the tests of those routes; other areas have their own
//! files (`dlq.rs`, `summary.rs`, `console.rs` …).

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::{assert_error, parse, start};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_routes_create_update_list_pause_purge_delete() {
    let s = start().await;
    let (st, v) = s.call(Method::PUT, "/v1/queues/jobs", None).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["name"], "jobs");
    assert_eq!(v["config"]["visibility_timeout_ms"], 30_000);
    assert_eq!(v["config"]["dead_letter_queue"], "jobs.dlq");
    assert_eq!(v["config"]["rate_limit"], Value::Null);
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'));

    let (st, v) = s
        .call(
            Method::PUT,
            "/v1/queues/jobs",
            Some(json!({"max_receive_count": 3, "rate_limit": {"limit": 10, "period_ms": 1000}, "max_depth": 50})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["config"]["max_receive_count"], 3);
    assert_eq!(
        v["config"]["rate_limit"],
        json!({"limit": 10, "period_ms": 1000})
    );
    // The full config object is accepted back as is; null clears optional settings.
    let mut config = v["config"].clone();
    config["max_depth"] = Value::Null;
    let (st, v) = s.call(Method::PUT, "/v1/queues/jobs", Some(config)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["config"]["max_depth"], Value::Null);
    assert_eq!(v["config"]["max_receive_count"], 3);

    let (st, v) = s.call(Method::GET, "/v1/queues/jobs", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["config"]["max_receive_count"], 3);
    let (st, v) = s.call(Method::GET, "/v1/queues", None).await;
    assert_eq!(st, StatusCode::OK);
    let names: Vec<_> = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("jobs"), json!("jobs.dlq")]);
    assert_error(
        &s.call(Method::GET, "/v1/queues/nope", None).await,
        404,
        "queue_not_found",
    );

    // Unlimited attempts warn.
    let (st, v) = s
        .call(
            Method::PUT,
            "/v1/queues/forever",
            Some(json!({"max_receive_count": 0, "dead_letter_queue": null})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert!(!v["warnings"].as_array().unwrap().is_empty(), "{v}");

    // Pause: sends accepted, nothing delivered; resume delivers.
    let (st, v) = s.call(Method::POST, "/v1/queues/jobs/pause", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["config"]["paused"], true);
    s.send("jobs", json!(1)).await;
    s.send("jobs", json!(2)).await;
    assert!(s.receive("jobs", json!({})).await.is_empty());
    let (st, v) = s.call(Method::POST, "/v1/queues/jobs/resume", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["config"]["paused"], false);
    assert_eq!(s.receive("jobs", json!({})).await.len(), 1);
    assert_error(
        &s.call(Method::POST, "/v1/queues/nope/pause", None).await,
        404,
        "queue_not_found",
    );
    assert_error(
        &s.call(Method::POST, "/v1/queues/nope/resume", None).await,
        404,
        "queue_not_found",
    );
    assert_error(
        &s.call(Method::GET, "/v1/queues/nope", None).await,
        404,
        "queue_not_found",
    );

    let (st, v) = s.call(Method::POST, "/v1/queues/jobs/purge", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["purged"], 2);
    assert_error(
        &s.call(Method::POST, "/v1/queues/nope/purge", None).await,
        404,
        "queue_not_found",
    );

    // A DLQ in use cannot be deleted.
    assert_error(
        &s.call(Method::DELETE, "/v1/queues/jobs.dlq", None).await,
        409,
        "conflict",
    );
    let (st, _) = s.call(Method::DELETE, "/v1/queues/jobs", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_error(
        &s.call(Method::DELETE, "/v1/queues/jobs", None).await,
        404,
        "queue_not_found",
    );
    let (st, _) = s.call(Method::DELETE, "/v1/queues/jobs.dlq", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_receive_extend_ack_get_delete_browse_stats() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages",
            Some(json!({"body": {"n": 1}, "attributes": {"k": "v"}, "dedup_id": "d1"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(v["duplicate"], false);
    // Dedup: same id, nothing stored.
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages",
            Some(json!({"body": {"n": 2}, "dedup_id": "d1"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["duplicate"], true);

    let (st, m) = s
        .call(Method::GET, &format!("/v1/messages/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(m["state"], "visible");
    assert_eq!(m["queue"], "jobs");
    assert_eq!(m["dedup_id"], "d1");
    let (st, page) = s
        .call(
            Method::GET,
            "/v1/queues/jobs/messages?state=visible&limit=10",
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(page["messages"].as_array().unwrap().len(), 1);
    assert_eq!(page["next_cursor"], Value::Null);

    let got = s
        .receive(
            "jobs",
            json!({"max": 10, "visibility_timeout_ms": 10_000, "consumer": "w1"}),
        )
        .await;
    assert_eq!(got.len(), 1);
    let d = &got[0];
    assert_eq!(d["id"], id.as_str());
    assert_eq!(d["body"], json!({"n": 1}));
    assert_eq!(d["attributes"], json!({"k": "v"}));
    assert_eq!(d["receive_count"], 1);
    assert_eq!(d["max_receive_count"], 5);
    assert_eq!(d["last_error"], Value::Null);
    let receipt = d["receipt"].as_str().unwrap().to_owned();
    let (st, page) = s
        .call(
            Method::GET,
            "/v1/queues/jobs/messages?state=in_flight",
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(page["messages"][0]["state"], "in_flight");

    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/extend",
            Some(json!({"receipt": receipt, "visibility_timeout_ms": 60_000})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(v["lease_deadline"].as_str().unwrap().ends_with('Z'));

    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/ack",
            Some(json!({"receipt": receipt, "result": {"ok": true}})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "completed");
    // Single-receipt forms answer 409 for a stale receipt.
    let stale = Some(json!({"receipt": receipt}));
    assert_error(
        &s.call(Method::POST, "/v1/queues/jobs/ack", stale.clone())
            .await,
        409,
        "receipt_stale",
    );
    assert_error(
        &s.call(Method::POST, "/v1/queues/jobs/nack", stale.clone())
            .await,
        409,
        "receipt_stale",
    );
    assert_error(
        &s.call(Method::POST, "/v1/queues/jobs/reject", stale.clone())
            .await,
        409,
        "receipt_stale",
    );
    assert_error(
        &s.call(
            Method::POST,
            "/v1/queues/jobs/move",
            Some(json!({"receipt": receipt, "to": "jobs.dlq"})),
        )
        .await,
        409,
        "receipt_stale",
    );
    assert_error(
        &s.call(
            Method::POST,
            "/v1/queues/jobs/extend",
            Some(json!({"receipt": receipt, "visibility_timeout_ms": 1})),
        )
        .await,
        409,
        "receipt_stale",
    );

    let (st, m) = s
        .call(Method::GET, &format!("/v1/messages/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(m["state"], "completed");
    assert_eq!(m["result"], json!({"ok": true}));
    assert!(m["completed_at"].is_string());

    let stats = s.stats("jobs").await;
    assert_eq!(stats["totals"]["sent"], 1);
    assert_eq!(stats["totals"]["received"], 1);
    assert_eq!(stats["totals"]["acked"], 1);
    assert_eq!(stats["visible"], 0);
    assert_eq!(stats["completed"], 1);

    let (st, _) = s
        .call(Method::DELETE, &format!("/v1/messages/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_error(
        &s.call(Method::GET, &format!("/v1/messages/{id}"), None)
            .await,
        404,
        "message_not_found",
    );
    assert_error(
        &s.call(Method::DELETE, &format!("/v1/messages/{id}"), None)
            .await,
        404,
        "message_not_found",
    );
    assert_error(
        &s.call(Method::GET, "/v1/queues/nope/stats", None).await,
        404,
        "queue_not_found",
    );
    assert_error(
        &s.call(Method::GET, "/v1/queues/nope/messages", None).await,
        404,
        "queue_not_found",
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_send_and_ack_with_per_receipt_outcomes() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages",
            Some(json!({"messages": [{"body": 1}, {"body_base64": "AAE="}, {"body": "three", "delay_ms": 0}]})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["ids"].as_array().unwrap().len(), 3);
    let got = s.receive("jobs", json!({"max": 3})).await;
    assert_eq!(got.len(), 3);
    let r: Vec<String> = got
        .iter()
        .map(|d| d["receipt"].as_str().unwrap().to_owned())
        .collect();
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/ack",
            Some(json!({"receipts": [r[0], "garbage"]})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["acked"], 1);
    assert_eq!(v["results"][0]["ok"], true);
    assert_eq!(v["results"][1]["ok"], false);
    assert_eq!(v["results"][1]["error"]["code"], "invalid_argument");
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/ack",
            Some(json!({"acks": [{"receipt": r[0]}, {"receipt": r[1], "result": [1, 2]}, {"receipt": r[2], "result_base64": "/w=="}]})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["acked"], 2);
    assert_eq!(v["results"][0]["error"]["code"], "receipt_stale");
    assert_eq!(v["results"][1]["ok"], true);
    let id2 = got[2]["id"].as_str().unwrap();
    let (_, m) = s
        .call(Method::GET, &format!("/v1/messages/{id2}"), None)
        .await;
    assert_eq!(m["result_base64"], "/w==");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_acknowledges_the_previous_batch_first() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages",
            Some(json!({"messages": [{"body": 1}, {"body": 2}, {"body": 3}]})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let first = s.receive("jobs", json!({"max": 2})).await;
    let r: Vec<String> = first
        .iter()
        .map(|d| d["receipt"].as_str().unwrap().to_owned())
        .collect();

    // The two receipts are settled, a malformed one gets its own outcome, and the last
    // message is leased in the same answer.
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/receive",
            Some(json!({"max": 5, "ack": [r[0], "garbage", r[1]]})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let acked = v["acked"].as_array().unwrap();
    assert_eq!(acked.len(), 3);
    assert_eq!(acked[0]["receipt"], r[0].as_str());
    assert_eq!(acked[0]["ok"], true);
    assert_eq!(acked[1]["error"]["code"], "invalid_argument");
    assert_eq!(acked[2]["ok"], true);
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    assert_eq!(v["messages"][0]["body"], 3);
    let stats = s.stats("jobs").await;
    assert_eq!(stats["totals"]["acked"], 2);
    assert_eq!(stats["in_flight"], 1);

    // Acking the same receipts again reports them stale; without `ack` there is no `acked`.
    let (_, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/receive",
            Some(json!({"ack": [r[0]]})),
        )
        .await;
    assert_eq!(v["acked"][0]["error"]["code"], "receipt_stale");
    let (_, v) = s
        .call(Method::POST, "/v1/queues/jobs/receive", Some(json!({})))
        .await;
    assert!(v.get("acked").is_none(), "{v}");

    // Over the batch limit is a 400 that changes nothing.
    let many: Vec<&str> = std::iter::repeat_n(r[0].as_str(), 1001).collect();
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/receive",
            Some(json!({"ack": many})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["code"], "invalid_argument");
    s.shutdown().await;
}

/// With `max_in_flight` 1 the next message can only be leased once the ack in the same
/// request has freed the slot: the ack is applied first even where its sync overlaps the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_in_a_receive_frees_its_slot_for_that_receive() {
    let s = start().await;
    s.put_queue("jobs", json!({"max_in_flight": 1})).await;
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages",
            Some(json!({"messages": [{"body": 1}, {"body": 2}, {"body": 3}]})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let mut got = s.receive("jobs", json!({"max": 5})).await;
    assert_eq!(got.len(), 1, "max_in_flight 1 leases one");
    for expected in [2, 3] {
        let receipt = got[0]["receipt"].as_str().unwrap().to_owned();
        let (st, v) = s
            .call(
                Method::POST,
                "/v1/queues/jobs/receive",
                Some(json!({"max": 5, "ack": [receipt]})),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(v["acked"][0]["ok"], true, "{v}");
        got = v["messages"].as_array().unwrap().clone();
        assert_eq!(got.len(), 1, "{v}");
        assert_eq!(got[0]["body"], expected);
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_reject_move() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    s.put_queue("other", json!({})).await;
    s.put_queue(
        "nodlq",
        json!({"max_receive_count": 0, "dead_letter_queue": null}),
    )
    .await;
    for i in 0..3 {
        s.send("jobs", json!(i)).await;
    }
    let got = s.receive("jobs", json!({"max": 3})).await;
    let r = |i: usize| got[i]["receipt"].as_str().unwrap().to_owned();
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/nack",
            Some(json!({"receipt": r(0), "delay_ms": 60_000, "error": "boom"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"state": "delayed", "queue": "jobs"}));
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/reject",
            Some(json!({"receipt": r(1), "error": "poison"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"state": "dead_lettered", "queue": "jobs.dlq"}));
    assert_error(
        &s.call(
            Method::POST,
            "/v1/queues/jobs/move",
            Some(json!({"receipt": r(2), "to": "missing"})),
        )
        .await,
        404,
        "queue_not_found",
    );
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/move",
            Some(json!({"receipt": r(2), "to": "other", "error": "bad"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"state": "visible", "queue": "other"}));
    let moved = s.receive("other", json!({})).await;
    assert_eq!(moved[0]["body"], json!(2));

    let (_, m) = s
        .call(
            Method::GET,
            &format!("/v1/messages/{}", got[0]["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(m["state"], "delayed");
    assert_eq!(m["last_error"], "boom");
    assert_eq!(m["attempts"][0]["outcome"], "nacked");
    assert!(m["visible_at"].is_string());
    let (_, dlq) = s
        .call(Method::GET, "/v1/queues/jobs.dlq/messages", None)
        .await;
    assert_eq!(dlq["messages"][0]["dead_letter_reason"], "rejected");
    assert_eq!(dlq["messages"][0]["source_queue"], "jobs");

    // Reject without a DLQ is a conflict.
    s.send("nodlq", json!("x")).await;
    let got = s.receive("nodlq", json!({})).await;
    assert_error(
        &s.call(
            Method::POST,
            "/v1/queues/nodlq/reject",
            Some(json!({"receipt": got[0]["receipt"]})),
        )
        .await,
        409,
        "conflict",
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_send_receive_nack_backoff_dead_letter() {
    let s = start().await;
    s.put_queue(
        "work",
        json!({"max_receive_count": 2, "backoff_base_ms": 50, "backoff_max_ms": 100, "visibility_timeout_ms": 5000}),
    )
    .await;
    let id = s.send("work", json!({"task": "t"})).await;

    let got = s.receive("work", json!({})).await;
    assert_eq!(got[0]["receive_count"], 1);
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/work/nack",
            Some(json!({"receipt": got[0]["receipt"], "error": "first"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // Full jitter may draw zero, which makes it visible at once.
    assert!(v["state"] == "delayed" || v["state"] == "visible", "{v}");
    assert_eq!(v["queue"], "work");

    // Backoff is at most 100 ms: a long poll gets it back well within a second.
    let started = Instant::now();
    let got = s.receive("work", json!({"wait_ms": 2000})).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(got[0]["receive_count"], 2);
    assert_eq!(got[0]["last_error"], "first");
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/work/nack",
            Some(json!({"receipt": got[0]["receipt"], "error": "second"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"state": "dead_lettered", "queue": "work.dlq"}));

    let (_, page) = s
        .call(Method::GET, "/v1/queues/work.dlq/messages?state=all", None)
        .await;
    let m = &page["messages"][0];
    assert_eq!(m["id"], id.as_str());
    assert_eq!(m["dead_letter_reason"], "exhausted");
    assert_eq!(m["source_queue"], "work");
    assert_eq!(m["last_error"], "second");
    assert_eq!(m["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(m["body"], json!({"task": "t"}));
    let stats = s.stats("work").await;
    assert_eq!(stats["dead_letter_depth"], 1);
    assert_eq!(stats["totals"]["dead_lettered"], 1);
    assert_eq!(stats["totals"]["nacked"], 2);
    assert_eq!(stats["visible"], 0);
    let (_, m) = s
        .call(Method::GET, &format!("/v1/messages/{id}"), None)
        .await;
    assert_eq!(m["queue"], "work.dlq");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_makes_a_message_visible_again() {
    let s = start().await;
    s.put_queue("jobs", json!({"max_receive_count": 5})).await;
    s.send("jobs", json!("x")).await;
    let first = s
        .receive("jobs", json!({"visibility_timeout_ms": 100}))
        .await;
    let again = s.receive("jobs", json!({"wait_ms": 2000})).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0]["receive_count"], 2);
    assert_ne!(first[0]["receipt"], again[0]["receipt"]);
    assert_error(
        &s.call(
            Method::POST,
            "/v1/queues/jobs/ack",
            Some(json!({"receipt": first[0]["receipt"]})),
        )
        .await,
        409,
        "receipt_stale",
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_wakes_on_send() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    // An empty queue answers after wait_ms with nothing.
    let started = Instant::now();
    assert!(s.receive("jobs", json!({"wait_ms": 300})).await.is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );

    let client = s.client.clone();
    let url = s.url("/v1/queues/jobs/receive");
    let poll = tokio::spawn(async move {
        let resp = client
            .post(url)
            .json(&json!({"wait_ms": 5000}))
            .send()
            .await
            .expect("poll");
        (parse(resp).await, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent_at = Instant::now();
    s.send("jobs", json!("wake")).await;
    let ((st, v), done_at) = poll.await.expect("join");
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["messages"][0]["body"], "wake");
    assert!(
        done_at.duration_since(sent_at) < Duration::from_secs(1),
        "{:?}",
        done_at - sent_at
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_without_wait_ms_waits_as_the_queue_says() {
    let s = start().await;
    let q = s
        .put_queue("polled", json!({"receive_wait_ms": 5000}))
        .await;
    assert_eq!(q["config"]["receive_wait_ms"], 5000);
    let client = s.client.clone();
    let url = s.url("/v1/queues/polled/receive");
    // No body at all: the queue's receive_wait holds the receive until the send.
    let poll =
        tokio::spawn(async move { parse(client.post(url).send().await.expect("poll")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.send("polled", json!("arrived")).await;
    let (st, v) = poll.await.expect("join");
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["messages"][0]["body"], "arrived", "{v}");
    // An explicit wait_ms of 0 answers at once, whatever the queue says.
    assert!(s.receive("polled", json!({"wait_ms": 0})).await.is_empty());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_long_polls_and_stops() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    let client = s.client.clone();
    let url = s.url("/v1/queues/jobs/receive");
    let poll = tokio::spawn(async move {
        let resp = client
            .post(url)
            .json(&json!({"wait_ms": 20_000}))
            .send()
            .await
            .expect("poll");
        parse(resp).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    s.shutdown().await;
    let (st, v) = poll.await.expect("join");
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["messages"], json!([]));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[derive(Deserialize)]
struct Wire {
    body: Option<Box<RawValue>>,
    body_base64: Option<String>,
    body_encoding: Option<String>,
}

#[derive(Deserialize)]
struct Deliveries {
    messages: Vec<Wire>,
}

async fn receive_raw(s: &common::TestServer, q: &str) -> Wire {
    let resp = s
        .client
        .post(s.url(&format!("/v1/queues/{q}/receive")))
        .send()
        .await
        .expect("receive");
    assert_eq!(resp.status(), StatusCode::OK);
    let mut d: Deliveries =
        serde_json::from_slice(&resp.bytes().await.expect("bytes")).expect("json");
    assert_eq!(d.messages.len(), 1);
    d.messages.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_round_trip_byte_exact() {
    let s = start().await;
    s.put_queue("b", json!({})).await;
    let url = s.url("/v1/queues/b/messages");

    // JSON: the exact text, spacing and number forms included.
    let json_body = r#"{"z": 1.50,  "a": [1e3, 18446744073709551617, "é\u00e9🦀"], "n": null}"#;
    let req = format!(r#"{{"body": {json_body}}}"#);
    let resp = s
        .client
        .post(&url)
        .header("content-type", "application/json")
        .body(req)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let w = receive_raw(&s, "b").await;
    assert_eq!(w.body.unwrap().get(), json_body);
    assert!(w.body_encoding.is_none() && w.body_base64.is_none());

    // A JSON string stays a JSON string, without an encoding marker.
    s.send("b", json!("plain")).await;
    let w = receive_raw(&s, "b").await;
    assert_eq!(w.body.unwrap().get(), r#""plain""#);
    assert!(w.body_encoding.is_none());

    // Text: comes back as a string marked "text".
    let text = "héllo\n\t\"wörld\" 🦀 \u{0}";
    let resp = s
        .client
        .post(&url)
        .header("content-type", "text/plain; charset=utf-8")
        .body(text)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let w = receive_raw(&s, "b").await;
    let back: String = serde_json::from_str(w.body.unwrap().get()).unwrap();
    assert_eq!(back, text);
    assert_eq!(w.body_encoding.as_deref(), Some("text"));

    // Binary, including invalid UTF-8, via octet-stream and via base64.
    let mut bin: Vec<u8> = (0..=255u8).collect();
    bin.extend_from_slice(&[0xff, 0xfe, 0xc3, 0x28, 0x00]);
    let resp = s
        .client
        .post(&url)
        .header("content-type", "application/octet-stream")
        .body(bin.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let w = receive_raw(&s, "b").await;
    assert_eq!(STANDARD.decode(w.body_base64.unwrap()).unwrap(), bin);
    assert!(w.body.is_none());

    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/b/messages",
            Some(json!({"body_base64": STANDARD.encode(&bin)})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let w = receive_raw(&s, "b").await;
    assert_eq!(STANDARD.decode(w.body_base64.unwrap()).unwrap(), bin);

    // The empty binary body is a body too; get-by-id shows the same form.
    let resp = s
        .client
        .post(&url)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let (_, m) = s
        .call(
            Method::GET,
            &format!("/v1/messages/{}", v["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(
        STANDARD.decode(m["body_base64"].as_str().unwrap()).unwrap(),
        bin
    );
    let w = receive_raw(&s, "b").await;
    assert_eq!(w.body_base64.as_deref(), Some(""));

    // Raw sends take their options in the query string.
    let resp = s
        .client
        .post(format!("{url}?delay_ms=60000&dedup_id=raw1"))
        .header("content-type", "text/plain")
        .body("later")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(s.stats("b").await["delayed"], 1);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_429_with_retry_after() {
    let s = start().await;
    s.put_queue("small", json!({"max_depth": 1})).await;
    s.send("small", json!(1)).await;
    let resp = s
        .client
        .post(s.url("/v1/queues/small/messages"))
        .json(&json!({"body": 2}))
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("retry-after").is_some());
    assert_error(&parse(resp).await, 429, "queue_full");
    assert_eq!(s.stats("small").await["visible"], 1);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_body_is_413_in_the_envelope() {
    let s = start().await;
    s.put_queue("big", json!({"max_message_bytes": 16_777_216}))
        .await;
    let huge = vec![b'a'; 25 * 1024 * 1024];
    let resp = s
        .client
        .post(s.url("/v1/queues/big/messages"))
        .header("content-type", "application/octet-stream")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_error(&parse(resp).await, 413, "payload_too_large");
    // 16 MiB exactly is accepted as one binary message.
    let max = vec![7u8; 16 * 1024 * 1024];
    let resp = s
        .client
        .post(s.url("/v1/queues/big/messages"))
        .header("content-type", "application/octet-stream")
        .body(max)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(s.stats("big").await["visible"], 1);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_routing_errors_and_openapi() {
    let s = start().await;
    let (st, v) = s.call(Method::GET, "/healthz", None).await;
    assert_eq!((st, v), (StatusCode::OK, json!({"status": "ok"})));
    let (st, v) = s.call(Method::GET, "/readyz", None).await;
    assert_eq!((st, v), (StatusCode::OK, json!({"status": "ready"})));
    assert_error(
        &s.call(Method::GET, "/v2/nothing", None).await,
        404,
        "not_found",
    );
    assert_error(
        &s.call(Method::DELETE, "/v1/queues/x/receive", None).await,
        405,
        "method_not_allowed",
    );

    let (st, doc) = s.call(Method::GET, "/openapi.json", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    let expected = [
        ("/v1/queues", vec!["get"]),
        ("/v1/queues/{q}", vec!["put", "get", "delete"]),
        ("/v1/queues/{q}/pause", vec!["post"]),
        ("/v1/queues/{q}/resume", vec!["post"]),
        ("/v1/queues/{q}/breaker", vec!["post"]),
        ("/v1/queues/{q}/purge", vec!["post"]),
        ("/v1/queues/{q}/messages", vec!["post", "get"]),
        ("/v1/queues/{q}/receive", vec!["post"]),
        ("/v1/queues/{q}/ack", vec!["post"]),
        ("/v1/queues/{q}/nack", vec!["post"]),
        ("/v1/queues/{q}/reject", vec!["post"]),
        ("/v1/queues/{q}/release", vec!["post"]),
        ("/v1/queues/{q}/move", vec!["post"]),
        ("/v1/queues/{q}/extend", vec!["post"]),
        ("/v1/queues/{q}/stats", vec!["get"]),
        ("/v1/queues/{q}/keys", vec!["get"]),
        ("/v1/queues/{q}/keys/{key}/breaker", vec!["post"]),
        ("/v1/queues/{q}/summary", vec!["get"]),
        ("/v1/messages/{id}", vec!["get", "delete"]),
        ("/v1/tasks/{id}", vec!["get"]),
        ("/v1/tasks/{id}/cancel", vec!["post"]),
        ("/v1/tasks/{id}/events", vec!["get"]),
        ("/v1/queues/{q}/progress", vec!["post"]),
        ("/v1/queues/{q}/stats/history", vec!["get"]),
        ("/v1/redrives", vec!["post", "get"]),
        ("/v1/redrives/{id}", vec!["get"]),
        ("/v1/redrives/{id}/cancel", vec!["post"]),
        ("/v1/redrives/{id}/pause", vec!["post"]),
        ("/v1/redrives/{id}/resume", vec!["post"]),
        ("/v1/audit", vec!["get"]),
        ("/v1/schedules", vec!["get"]),
        ("/v1/schedules/{name}", vec!["put", "get", "delete"]),
        ("/v1/schedules/{name}/pause", vec!["post"]),
        ("/v1/schedules/{name}/resume", vec!["post"]),
        ("/v1/schedules/{name}/trigger", vec!["post"]),
        ("/v1/queues/{q}/scaling", vec!["get"]),
        ("/v1/stats", vec!["get"]),
        ("/v1/whoami", vec!["get"]),
        ("/healthz", vec!["get"]),
        ("/readyz", vec!["get"]),
        ("/openapi.json", vec!["get"]),
        ("/metrics", vec!["get"]),
    ];
    let count = expected.len();
    for (path, methods) in expected {
        let item = paths
            .get(path)
            .unwrap_or_else(|| panic!("{path} missing from /openapi.json"));
        for m in methods {
            assert!(
                item.get(m).is_some(),
                "{m} {path} missing from /openapi.json"
            );
        }
    }
    assert_eq!(
        paths.len(),
        count,
        "unexpected paths: {:?}",
        paths.keys().collect::<Vec<_>>()
    );
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "QueueConfigRequest",
        "QueueView",
        "SendRequest",
        "SendResponse",
        "SendBatchResponse",
        "ReceiveRequest",
        "ReceiveResponse",
        "AckRequest",
        "AckBatchResponse",
        "NackRequest",
        "BreakerRequest",
        "RejectRequest",
        "MoveRequest",
        "ExtendRequest",
        "BrowseResponse",
        "MessageView",
        "StatsView",
        "ErrorEnvelope",
    ] {
        assert!(schemas.contains_key(name), "schema {name} missing");
    }
    s.shutdown().await;
}

/// The request deadline counts beyond a long poll's own wait: a receive that waits longer
/// than `request_timeout` is answered when its wait ends, not cut at the deadline. (A request
/// past its deadline is a 503 with `Retry-After`: the layer's own tests and the PostgreSQL
/// blackhole test in the `sluice` crate show it.)
#[tokio::test]
async fn a_long_poll_may_wait_past_the_request_timeout() {
    let s = common::start_with(sluice_server::ServerOptions {
        request_timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    s.put_queue("slow", json!({})).await;
    let started = Instant::now();
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/slow/receive",
            Some(json!({ "wait_ms": 1500 })),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["messages"], json!([]), "{v}");
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "answered after {:?}, before its wait ended",
        started.elapsed()
    );
    let id = s.send("slow", json!("after")).await;
    assert!(!id.is_empty());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nack_carries_the_dependencys_retry_after_as_its_wait() {
    let s = start().await;
    s.put_queue("calls", json!({})).await;
    s.send("calls", json!(1)).await;
    let got = s.receive("calls", json!({})).await;
    let receipt = got[0]["receipt"].clone();
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/calls/nack",
            Some(json!({"receipt": receipt, "delay_ms": 1, "retry_after_ms": 30_000})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not both"), "{v}");
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/calls/nack",
            Some(json!({"receipt": receipt, "retry_after_ms": 30_000, "error": "HTTP 429"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"state": "delayed", "queue": "calls"}));
    let (_, m) = s
        .call(
            Method::GET,
            &format!("/v1/messages/{}", got[0]["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(
        (&m["state"], &m["last_error"]),
        (&json!("delayed"), &json!("HTTP 429"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_forces_a_breaker_open_and_closed() {
    let s = start().await;
    s.put_queue("calls", json!({"breaker": {"probe_every_ms": 100}}))
        .await;
    s.put_queue("plain", json!({})).await;
    s.send("calls", json!(1)).await;
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/calls/breaker",
            Some(json!({"state": "open"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["breaker"]["state"], &v["breaker"]["forced"]),
        (&json!("open"), &json!(true)),
        "{v}"
    );
    let since = v["breaker"]["since"].as_str().expect("since is a string");
    assert!(
        sluice_core::time::parse_rfc3339("since", since).is_ok(),
        "{v}"
    );
    assert_eq!(v["breaker"]["transitions"][0]["reason"], "forced", "{v}");
    // Forced open: no probes, however long it stays open.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (_, got) = s
        .call(
            Method::POST,
            "/v1/queues/calls/receive",
            Some(json!({"max": 1})),
        )
        .await;
    assert_eq!(got["messages"], json!([]), "nothing while forced open");
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/calls/breaker",
            Some(json!({"state": "closed"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["breaker"]["state"], "closed", "{v}");
    assert_eq!(s.receive("calls", json!({"max": 1})).await.len(), 1);
    let (_, audit) = s.call(Method::GET, "/v1/audit?queue=calls", None).await;
    let forced: Vec<_> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "queue.breaker.force")
        .map(|e| e["details"]["state"].clone())
        .collect();
    assert_eq!(forced, [json!("open"), json!("closed")], "{audit}");

    // A governance that cannot work is refused with what to write instead, never stored.
    for (config, names) in [
        (
            json!({"adaptive": {"min_per_min": 600, "max_per_min": 60}}),
            "min_per_min",
        ),
        (json!({"breaker": {"failure_share": 1.5}}), "failure_share"),
        (json!({"breaker": {"window_ms": 0}}), "window_ms"),
        (json!({"adaptive": {"signal": "sometimes"}}), "signal"),
    ] {
        let got = s
            .call(Method::PUT, "/v1/queues/governed", Some(config.clone()))
            .await;
        assert_error(&got, 400, "invalid_argument");
        let message = got.1["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{config}: {message}");
    }
    let (st, _) = s.call(Method::GET, "/v1/queues/governed", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "nothing refused was stored");

    for (path, state, status, code) in [
        ("/v1/queues/plain/breaker", "open", 409, "conflict"),
        ("/v1/queues/missing/breaker", "open", 404, "queue_not_found"),
        ("/v1/queues/calls/breaker", "ajar", 400, "invalid_argument"),
    ] {
        let got = s
            .call(Method::POST, path, Some(json!({ "state": state })))
            .await;
        assert_error(&got, status, code);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_breaker_is_forced_through_its_path_and_a_bad_key_is_a_400() {
    let s = start().await;
    s.put_queue("tenants", json!({"breaker": {"scope": "key"}}))
        .await;
    s.put_queue("whole", json!({"breaker": {}})).await;
    // The key is one percent-encoded path segment: a slash and a space in it are the key's.
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/tenants/keys/acme%2Feu%20west/breaker",
            Some(json!({"state": "open"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["breaker"], &v["forced"]),
        (&json!("open"), &json!(true)),
        "{v}"
    );
    let (_, audit) = s.call(Method::GET, "/v1/audit?queue=tenants", None).await;
    let forced = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["action"] == "key.breaker.force")
        .unwrap_or_else(|| panic!("audited: {audit}"));
    assert_eq!(forced["details"]["key"], "acme/eu west", "{forced}");

    let long = "k".repeat(129);
    for (path, status, code) in [
        // A control character, and a key over 128 characters: refused, never stored.
        (
            "/v1/queues/tenants/keys/a%01b/breaker".to_owned(),
            400,
            "invalid_argument",
        ),
        (
            format!("/v1/queues/tenants/keys/{long}/breaker"),
            400,
            "invalid_argument",
        ),
        // A queue whose breaker is queue-wide has no key breakers.
        (
            "/v1/queues/whole/keys/acme/breaker".to_owned(),
            409,
            "conflict",
        ),
        (
            "/v1/queues/missing/keys/acme/breaker".to_owned(),
            404,
            "queue_not_found",
        ),
    ] {
        let got = s
            .call(Method::POST, &path, Some(json!({"state": "open"})))
            .await;
        assert_error(&got, status, code);
    }
}
