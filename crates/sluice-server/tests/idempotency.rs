//! `Idempotency-Key`: replay of the first response, no second effect, 422 for a
//! different request under the same key, scoping per route and caller.

mod common;

use reqwest::StatusCode;
use serde_json::{Value, json};

async fn post(
    s: &common::TestServer,
    path: &str,
    key: Option<&str>,
    body: Value,
) -> (StatusCode, Value, bool) {
    let mut req = s.client.post(s.url(path)).json(&body);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.expect("request");
    let replayed = resp.headers().get("idempotent-replayed").is_some();
    let (status, v) = common::parse(resp).await;
    (status, v, replayed)
}

#[tokio::test]
async fn a_repeated_send_replays_the_first_response_and_stores_once() {
    let s = common::start().await;
    s.put_queue("jobs", json!({})).await;
    let body = json!({ "messages": [{ "body": 1 }, { "body": 2 }] });
    let first = post(&s, "/v1/queues/jobs/messages", Some("k-1"), body.clone()).await;
    assert_eq!(first.0, StatusCode::CREATED, "{}", first.1);
    assert!(!first.2, "a first answer is not a replay");
    for _ in 0..3 {
        let again = post(&s, "/v1/queues/jobs/messages", Some("k-1"), body.clone()).await;
        assert_eq!(
            (again.0, &again.1),
            (first.0, &first.1),
            "the replay differs"
        );
        assert!(again.2, "a replay is marked Idempotent-Replayed");
    }
    assert_eq!(
        s.stats("jobs").await["totals"]["sent"],
        2,
        "the batch was stored once"
    );
}

#[tokio::test]
async fn the_same_key_with_another_request_is_422() {
    let s = common::start().await;
    s.put_queue("jobs", json!({})).await;
    post(
        &s,
        "/v1/queues/jobs/messages",
        Some("k"),
        json!({ "body": "a" }),
    )
    .await;
    let (status, v, _) = post(
        &s,
        "/v1/queues/jobs/messages",
        Some("k"),
        json!({ "body": "b" }),
    )
    .await;
    common::assert_error(&(status, v), 422, "idempotency_mismatch");
    assert_eq!(s.stats("jobs").await["totals"]["sent"], 1);
}

#[tokio::test]
async fn keys_are_scoped_to_the_route() {
    let s = common::start().await;
    s.put_queue("a", json!({})).await;
    s.put_queue("b", json!({})).await;
    let body = json!({ "body": "x" });
    let ra = post(&s, "/v1/queues/a/messages", Some("same"), body.clone()).await;
    let rb = post(&s, "/v1/queues/b/messages", Some("same"), body).await;
    assert_eq!((ra.0, rb.0), (StatusCode::CREATED, StatusCode::CREATED));
    assert_ne!(ra.1["id"], rb.1["id"], "two routes, two effects");
    assert!(!rb.2);
}

#[tokio::test]
async fn a_replayed_receive_returns_the_same_leases() {
    let s = common::start().await;
    s.put_queue("jobs", json!({})).await;
    for i in 0..3 {
        s.send("jobs", json!(i)).await;
    }
    let req = json!({ "max": 2 });
    let first = post(&s, "/v1/queues/jobs/receive", Some("r-1"), req.clone()).await;
    let again = post(&s, "/v1/queues/jobs/receive", Some("r-1"), req).await;
    assert_eq!(
        first.1, again.1,
        "the lost answer is recovered, not a second lease"
    );
    assert_eq!(s.stats("jobs").await["in_flight"], 2);
}

#[tokio::test]
async fn failures_that_ask_for_a_retry_are_not_remembered() {
    let s = common::start().await;
    s.put_queue("small", json!({ "max_depth": 1 })).await;
    s.send("small", json!("fills it")).await;
    let full = post(
        &s,
        "/v1/queues/small/messages",
        Some("k"),
        json!({ "body": 2 }),
    )
    .await;
    assert_eq!(full.0, StatusCode::TOO_MANY_REQUESTS, "{}", full.1);
    // Make room; the same key now runs the request for real.
    s.call(reqwest::Method::POST, "/v1/queues/small/purge", None)
        .await;
    let retry = post(
        &s,
        "/v1/queues/small/messages",
        Some("k"),
        json!({ "body": 2 }),
    )
    .await;
    assert_eq!(retry.0, StatusCode::CREATED, "{}", retry.1);
    assert!(!retry.2);
}

#[tokio::test]
async fn bad_keys_are_refused() {
    let s = common::start().await;
    s.put_queue("jobs", json!({})).await;
    let long = "k".repeat(256);
    for key in [long.as_str(), "has space", ""] {
        let (status, v, _) = post(
            &s,
            "/v1/queues/jobs/messages",
            Some(key),
            json!({ "body": 1 }),
        )
        .await;
        common::assert_error(&(status, v), 400, "invalid_argument");
    }
    assert_eq!(s.stats("jobs").await["totals"]["sent"], 0);
}

#[tokio::test]
async fn concurrent_duplicates_have_one_effect() {
    let s = std::sync::Arc::new(common::start().await);
    s.put_queue("jobs", json!({})).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            post(
                &s,
                "/v1/queues/jobs/messages",
                Some("race"),
                json!({ "body": "once" }),
            )
            .await
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let (status, v, _) = t.await.expect("task");
        assert_eq!(status, StatusCode::CREATED);
        ids.insert(v["id"].to_string());
    }
    assert_eq!(ids.len(), 1, "all eight got the same answer");
    assert_eq!(s.stats("jobs").await["totals"]["sent"], 1);
}

/// A broker with API keys: `shop` may send to `jobs`, `worker` may only consume.
async fn keyed() -> common::TestServer {
    use sluice_server::auth::hash_secret;
    use sluice_server::{ApiKeyConfig, KeyRing, Role, ServerOptions};
    let key = |name: &str, role, secret: &str| ApiKeyConfig {
        name: name.to_owned(),
        role,
        queues: vec!["*".to_owned()],
        sha256: hash_secret(secret),
    };
    let keys = KeyRing::new(vec![
        key("admin", Role::Admin, "admin-secret"),
        key("shop", Role::Producer, "shop-secret"),
        key("worker", Role::Consumer, "worker-secret"),
    ])
    .expect("keys");
    let s = common::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    let (st, v) = s
        .call_as(
            Some("admin-secret"),
            reqwest::Method::PUT,
            "/v1/queues/jobs",
            Some(json!({})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    s
}

async fn post_as(
    s: &common::TestServer,
    token: Option<&str>,
    key: &str,
    body: Value,
) -> (StatusCode, Value, bool) {
    let mut req = s
        .client
        .post(s.url("/v1/queues/jobs/messages"))
        .header("Idempotency-Key", key)
        .json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("request");
    let replayed = resp.headers().get("idempotent-replayed").is_some();
    let (status, v) = common::parse(resp).await;
    (status, v, replayed)
}

#[tokio::test]
async fn refusals_for_want_of_a_key_or_a_role_are_never_remembered() {
    let s = keyed().await;
    let body = json!({ "body": 1 });
    for token in [None, Some("no-such-secret"), Some("worker-secret")] {
        let want = if token == Some("worker-secret") {
            (403, "permission_denied")
        } else {
            (401, "unauthenticated")
        };
        for attempt in 0..2 {
            let (status, v, replayed) = post_as(&s, token, "same-key", body.clone()).await;
            common::assert_error(&(status, v), want.0, want.1);
            assert!(
                !replayed,
                "attempt {attempt} with {token:?}: a refusal is answered afresh, not replayed"
            );
        }
    }
    // The key still runs the request for a caller allowed to make it, and is then kept.
    let first = post_as(&s, Some("shop-secret"), "same-key", body.clone()).await;
    assert_eq!(first.0, StatusCode::CREATED, "{}", first.1);
    assert!(!first.2);
    let again = post_as(&s, Some("shop-secret"), "same-key", body).await;
    assert_eq!((again.0, &again.1, again.2), (first.0, &first.1, true));
    let (_, stats) = s
        .call_as(
            Some("admin-secret"),
            reqwest::Method::GET,
            "/v1/queues/jobs/stats",
            None,
        )
        .await;
    assert_eq!(stats["totals"]["sent"], 1);
}
