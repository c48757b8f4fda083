//! API keys: each role allowed and refused, queue-pattern scoping, 401 versus 403.

mod common;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_server::auth::hash_secret;
use sluice_server::{ApiKeyConfig, KeyRing, Role, ServerOptions};

const ADMIN: &str = "sluice_admin_secret";
const OPERATOR: &str = "sluice_operator_secret";
const PRODUCER: &str = "sluice_producer_secret";
const CONSUMER: &str = "sluice_consumer_secret";

fn key(name: &str, role: Role, queues: &[&str], secret: &str) -> ApiKeyConfig {
    ApiKeyConfig {
        name: name.to_owned(),
        role,
        queues: queues.iter().map(|q| (*q).to_owned()).collect(),
        sha256: hash_secret(secret),
    }
}

async fn server() -> common::TestServer {
    let keys = KeyRing::new(vec![
        key("admin", Role::Admin, &["*"], ADMIN),
        key("ops", Role::Operator, &["orders", "orders.*"], OPERATOR),
        key("shop", Role::Producer, &["orders", "orders.*"], PRODUCER),
        key("worker", Role::Consumer, &["orders", "orders.*"], CONSUMER),
    ])
    .expect("keys");
    let s = common::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    for q in ["orders", "billing"] {
        let (st, v) = s
            .call_as(
                Some(ADMIN),
                Method::PUT,
                &format!("/v1/queues/{q}"),
                Some(json!({})),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_unknown_or_malformed_credentials_are_401() {
    let s = server().await;
    common::assert_error(
        &s.call(Method::GET, "/v1/queues", None).await,
        401,
        "unauthenticated",
    );
    common::assert_error(
        &s.call_as(Some("nope"), Method::GET, "/v1/queues", None)
            .await,
        401,
        "unauthenticated",
    );
    let resp = s
        .client
        .get(s.url("/v1/queues/orders"))
        .header("authorization", format!("Basic {ADMIN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers().get("www-authenticate").unwrap(), "Bearer");
    common::assert_error(&common::parse(resp).await, 401, "unauthenticated");
    // 401 comes before any look at the body or the queue.
    common::assert_error(
        &s.call(
            Method::POST,
            "/v1/queues/nope/messages",
            Some(json!({"bad": 1})),
        )
        .await,
        401,
        "unauthenticated",
    );
    // Health and the API description need no key.
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        assert_eq!(
            s.call(Method::GET, path, None).await.0,
            StatusCode::OK,
            "{path}"
        );
    }
    s.shutdown().await;
}

/// Runs one request as `token` and checks its status.
async fn expect(
    s: &common::TestServer,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    status: u16,
) -> Value {
    let (st, v) = s.call_as(Some(token), method.clone(), path, body).await;
    assert_eq!(st.as_u16(), status, "{token} {method} {path}: {v}");
    if status == 403 {
        assert_eq!(v["error"]["code"], "permission_denied");
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_and_patterns() {
    let s = server().await;
    let send = Some(json!({"body": {"x": 1}}));

    // Producer: send, read queue and stats, in its queues only.
    let v = expect(
        &s,
        PRODUCER,
        Method::POST,
        "/v1/queues/orders/messages",
        send.clone(),
        201,
    )
    .await;
    let id = v["id"].as_str().unwrap().to_owned();
    expect(
        &s,
        PRODUCER,
        Method::POST,
        "/v1/queues/billing/messages",
        send.clone(),
        403,
    )
    .await;
    expect(&s, PRODUCER, Method::GET, "/v1/queues/orders", None, 200).await;
    expect(
        &s,
        PRODUCER,
        Method::GET,
        "/v1/queues/orders/stats",
        None,
        200,
    )
    .await;
    expect(
        &s,
        PRODUCER,
        Method::POST,
        "/v1/queues/orders/receive",
        None,
        403,
    )
    .await;
    expect(
        &s,
        PRODUCER,
        Method::PUT,
        "/v1/queues/orders",
        Some(json!({})),
        403,
    )
    .await;
    expect(
        &s,
        PRODUCER,
        Method::GET,
        "/v1/queues/orders/messages",
        None,
        403,
    )
    .await;
    expect(
        &s,
        PRODUCER,
        Method::GET,
        &format!("/v1/messages/{id}"),
        None,
        403,
    )
    .await;

    // Consumer: receive and settle, read the queue; no send, stats, browse or admin.
    let v = expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/orders/receive",
        Some(json!({})),
        200,
    )
    .await;
    let receipt = v["messages"][0]["receipt"].as_str().unwrap().to_owned();
    expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/orders/extend",
        Some(json!({"receipt": receipt, "visibility_timeout_ms": 30000})),
        200,
    )
    .await;
    expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/orders/move",
        Some(json!({"receipt": receipt, "to": "billing"})),
        403,
    )
    .await;
    expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/orders/nack",
        Some(json!({"receipt": receipt, "delay_ms": 0})),
        200,
    )
    .await;
    let v = expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/orders/receive",
        Some(json!({"wait_ms": 1000})),
        200,
    )
    .await;
    let receipt = v["messages"][0]["receipt"].as_str().unwrap().to_owned();
    expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/orders/ack",
        Some(json!({"receipt": receipt})),
        200,
    )
    .await;
    expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/orders/reject",
        Some(json!({"receipt": receipt})),
        409,
    )
    .await;
    expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/billing/receive",
        None,
        403,
    )
    .await;
    expect(
        &s,
        CONSUMER,
        Method::POST,
        "/v1/queues/orders/messages",
        send.clone(),
        403,
    )
    .await;
    expect(&s, CONSUMER, Method::GET, "/v1/queues/orders", None, 200).await;
    expect(&s, CONSUMER, Method::GET, "/v1/queues/billing", None, 403).await;
    expect(
        &s,
        CONSUMER,
        Method::GET,
        "/v1/queues/orders/stats",
        None,
        403,
    )
    .await;
    expect(&s, CONSUMER, Method::DELETE, "/v1/queues/orders", None, 403).await;

    // Operator: administration, browse, messages, stats; not send or receive.
    expect(
        &s,
        OPERATOR,
        Method::PUT,
        "/v1/queues/orders.eu",
        Some(json!({"max_receive_count": 2})),
        201,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::PUT,
        "/v1/queues/billing",
        Some(json!({})),
        403,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::PUT,
        "/v1/queues/orders",
        Some(json!({"dead_letter_queue": "billing"})),
        403,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::POST,
        "/v1/queues/orders/pause",
        None,
        200,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::POST,
        "/v1/queues/orders/resume",
        None,
        200,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::GET,
        "/v1/queues/orders/messages?state=all",
        None,
        200,
    )
    .await;
    // A summary shows errors, as a browse does: the same roles may read it.
    expect(
        &s,
        OPERATOR,
        Method::GET,
        "/v1/queues/orders.dlq/summary?group_by=error",
        None,
        200,
    )
    .await;
    expect(
        &s,
        PRODUCER,
        Method::GET,
        "/v1/queues/orders.dlq/summary",
        None,
        403,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::GET,
        &format!("/v1/messages/{id}"),
        None,
        200,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::GET,
        "/v1/queues/orders/stats",
        None,
        200,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::POST,
        "/v1/queues/orders/messages",
        send.clone(),
        403,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::POST,
        "/v1/queues/orders/receive",
        None,
        403,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::POST,
        "/v1/queues/billing/purge",
        None,
        403,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::POST,
        "/v1/queues/orders/purge",
        None,
        200,
    )
    .await;
    let v = expect(&s, OPERATOR, Method::GET, "/v1/queues", None, 200).await;
    let names: Vec<&str> = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["orders", "orders.dlq", "orders.eu", "orders.eu.dlq"]
    );

    // A message in a queue outside the key's patterns answers as if it did not exist: its id
    // reveals neither the queue nor that it is there.
    let v = expect(
        &s,
        ADMIN,
        Method::POST,
        "/v1/queues/billing/messages",
        send.clone(),
        201,
    )
    .await;
    let billing_id = v["id"].as_str().unwrap().to_owned();
    for method in [Method::GET, Method::DELETE] {
        let v = expect(
            &s,
            OPERATOR,
            method,
            &format!("/v1/messages/{billing_id}"),
            None,
            404,
        )
        .await;
        assert_eq!(v["error"]["code"], "message_not_found", "{v}");
        assert!(!v.to_string().contains("billing"), "{v}");
    }
    expect(
        &s,
        CONSUMER,
        Method::GET,
        &format!("/v1/messages/{billing_id}"),
        None,
        403,
    )
    .await;

    // Admin: everything, everywhere.
    expect(
        &s,
        ADMIN,
        Method::GET,
        &format!("/v1/messages/{billing_id}"),
        None,
        200,
    )
    .await;
    expect(
        &s,
        ADMIN,
        Method::POST,
        "/v1/queues/billing/receive",
        None,
        200,
    )
    .await;
    expect(
        &s,
        ADMIN,
        Method::GET,
        "/v1/queues/billing/stats",
        None,
        200,
    )
    .await;
    expect(
        &s,
        ADMIN,
        Method::DELETE,
        &format!("/v1/messages/{billing_id}"),
        None,
        204,
    )
    .await;
    expect(
        &s,
        OPERATOR,
        Method::DELETE,
        "/v1/queues/orders.eu",
        None,
        204,
    )
    .await;
    let v = expect(&s, ADMIN, Method::GET, "/v1/queues", None, 200).await;
    assert_eq!(v["queues"].as_array().unwrap().len(), 5);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_needs_the_operator_role_and_the_queue_pattern() {
    let s = server().await;
    let body = json!({ "source": "orders.dlq", "rate_per_second": 10 });
    for who in [CONSUMER, PRODUCER] {
        let got = s
            .call_as(Some(who), Method::POST, "/v1/redrives", Some(body.clone()))
            .await;
        common::assert_error(&got, 403, "permission_denied");
        let got = s
            .call_as(Some(who), Method::GET, "/v1/redrives", None)
            .await;
        common::assert_error(&got, 403, "permission_denied");
    }
    let got = s
        .call_as(
            Some(OPERATOR),
            Method::POST,
            "/v1/redrives",
            Some(json!({ "source": "billing.dlq" })),
        )
        .await;
    common::assert_error(&got, 403, "permission_denied");
    // Without destination each message goes back to its own source queue, which may be
    // outside the key's patterns: a scoped key must name a destination or a covered source.
    let got = s
        .call_as(Some(OPERATOR), Method::POST, "/v1/redrives", Some(body))
        .await;
    common::assert_error(&got, 403, "permission_denied");
    assert!(
        got.1["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("destination")),
        "{}",
        got.1
    );
    let to_billing = json!({ "source": "orders.dlq", "filter": {"source_queue": "billing"} });
    let got = s
        .call_as(
            Some(OPERATOR),
            Method::POST,
            "/v1/redrives",
            Some(to_billing),
        )
        .await;
    common::assert_error(&got, 403, "permission_denied");
    let to_orders = json!({
        "source": "orders.dlq", "rate_per_second": 10, "filter": {"source_queue": "orders"}
    });
    let (status, job) = s
        .call_as(
            Some(OPERATOR),
            Method::POST,
            "/v1/redrives",
            Some(to_orders),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let id = job["id"].as_str().expect("id");
    let (status, v) = s
        .call_as(
            Some(OPERATOR),
            Method::POST,
            &format!("/v1/redrives/{id}/cancel"),
            None,
        )
        .await;
    // The DLQ is empty, so the runner may finish the job before the cancel arrives; a
    // cancel of a finished job answers it as it is. Either way the operator may cancel.
    assert_eq!(status, StatusCode::OK, "{v}");
    assert!(
        matches!(v["state"].as_str(), Some("cancelled" | "completed")),
        "{v}"
    );
}

/// A dead letter of `billing` that landed in `orders.dlq` (the admin pointed `billing` at it):
/// a redrive by a key scoped to `orders*` must not move it back into `billing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_redrive_never_writes_outside_its_patterns() {
    let s = server().await;
    let (st, v) = s
        .call_as(
            Some(ADMIN),
            Method::PUT,
            "/v1/queues/billing",
            Some(json!({"dead_letter_queue": "orders.dlq", "max_receive_count": 1})),
        )
        .await;
    assert!(st.is_success(), "{v}");
    let (st, v) = s
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/v1/queues/billing/messages",
            Some(json!({"body": 1})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (_, got) = s
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/v1/queues/billing/receive",
            None,
        )
        .await;
    let receipt = got["messages"][0]["receipt"].as_str().expect("a delivery");
    let (st, v) = s
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/v1/queues/billing/reject",
            Some(json!({"receipt": receipt})),
        )
        .await;
    assert!(st.is_success(), "{v}");
    let got = s
        .call_as(
            Some(OPERATOR),
            Method::POST,
            "/v1/redrives",
            Some(json!({"source": "orders.dlq"})),
        )
        .await;
    common::assert_error(&got, 403, "permission_denied");
    let (_, billing) = s
        .call_as(Some(ADMIN), Method::GET, "/v1/queues/billing/stats", None)
        .await;
    assert_eq!(billing["visible"], 0, "{billing}");
    let (_, dlq) = s
        .call_as(
            Some(ADMIN),
            Method::GET,
            "/v1/queues/orders.dlq/stats",
            None,
        )
        .await;
    assert_eq!(dlq["visible"], 1, "{dlq}");
    s.shutdown().await;
}

/// Ids of messages, tasks and redrive jobs in queues outside a key's patterns answer as ids
/// that do not exist, and `/metrics` shows a scoped key only the queues it covers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_queues_stay_hidden_behind_ids_and_metrics() {
    let s = server().await;
    let (_, v) = s
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/v1/queues/billing/messages",
            Some(json!({"body": 1})),
        )
        .await;
    let id = v["id"].as_str().expect("id").to_owned();
    // Tasks: an unknown task, as for an id never used.
    let v = expect(
        &s,
        PRODUCER,
        Method::GET,
        &format!("/v1/tasks/{id}"),
        None,
        200,
    )
    .await;
    assert_eq!(v["status"], "UNKNOWN", "{v}");
    assert!(!v.to_string().contains("billing"), "{v}");
    let v = expect(
        &s,
        PRODUCER,
        Method::POST,
        &format!("/v1/tasks/{id}/cancel"),
        None,
        404,
    )
    .await;
    assert!(!v.to_string().contains("billing"), "{v}");
    let events = s
        .client
        .get(s.url(&format!("/v1/tasks/{id}/events")))
        .bearer_auth(PRODUCER)
        .send()
        .await
        .expect("events");
    assert_eq!(events.status(), StatusCode::OK);
    let text = events.text().await.expect("the stream ends at unknown");
    assert!(text.contains("\"UNKNOWN\""), "{text}");
    assert!(!text.contains("billing"), "{text}");
    // The message is still there for a key that covers its queue.
    let v = expect(
        &s,
        ADMIN,
        Method::GET,
        &format!("/v1/tasks/{id}"),
        None,
        200,
    )
    .await;
    assert_eq!(v["status"], "PENDING", "{v}");

    // Redrive jobs.
    let (st, job) = s
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/v1/redrives",
            Some(json!({"source": "billing.dlq", "dry_run": true})),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{job}");
    let job = job["id"].as_str().expect("job id").to_owned();
    for (method, path) in [
        (Method::GET, format!("/v1/redrives/{job}")),
        (Method::POST, format!("/v1/redrives/{job}/cancel")),
        (Method::POST, format!("/v1/redrives/{job}/pause")),
    ] {
        let v = expect(&s, OPERATOR, method, &path, None, 404).await;
        assert_eq!(v["error"]["code"], "message_not_found", "{path}: {v}");
        assert!(!v.to_string().contains("billing"), "{path}: {v}");
    }

    // Metrics: only the covered queues, and totals over them alone.
    let scrape = |token: &'static str| {
        let req = s.client.get(s.url("/metrics")).bearer_auth(token);
        async move {
            let resp = req.send().await.expect("scrape");
            assert_eq!(resp.status(), StatusCode::OK);
            resp.text().await.expect("text")
        }
    };
    let all = scrape(ADMIN).await;
    assert!(all.contains("queue=\"billing\""), "{all}");
    for token in [OPERATOR, PRODUCER] {
        let text = scrape(token).await;
        assert!(text.contains("queue=\"orders\""), "{text}");
        assert!(!text.contains("billing"), "{text}");
        let queues = text
            .lines()
            .find_map(|l| l.strip_prefix("sluice_queues "))
            .expect("sluice_queues");
        // orders and orders.dlq.
        assert_eq!(queues.trim(), "2", "{text}");
    }
    s.shutdown().await;
}

/// A new queue's default dead-letter queue is created with it, so a key must cover that one
/// too: a key scoped to `jobs` alone creates `jobs` only without a DLQ, or with one it covers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_queue_creates_no_dead_letter_queue_outside_the_patterns() {
    const JOBS: &str = "sluice_jobs_operator";
    let keys = KeyRing::new(vec![
        key("admin", Role::Admin, &["*"], ADMIN),
        key("jobs-ops", Role::Operator, &["jobs", "jobs-failed"], JOBS),
    ])
    .expect("keys");
    let s = common::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    let got = s
        .call_as(Some(JOBS), Method::PUT, "/v1/queues/jobs", Some(json!({})))
        .await;
    common::assert_error(&got, 403, "permission_denied");
    assert!(got.1.to_string().contains("jobs.dlq"), "{}", got.1);
    let (_, all) = s
        .call_as(Some(ADMIN), Method::GET, "/v1/queues", None)
        .await;
    assert_eq!(all["queues"].as_array().map(Vec::len), Some(0), "{all}");

    let (st, v) = s
        .call_as(
            Some(JOBS),
            Method::PUT,
            "/v1/queues/jobs",
            Some(json!({"dead_letter_queue": "jobs-failed"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    // Updating the queue it has creates nothing.
    let (st, v) = s
        .call_as(
            Some(JOBS),
            Method::PUT,
            "/v1/queues/jobs",
            Some(json!({"max_receive_count": 3})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (_, all) = s
        .call_as(Some(ADMIN), Method::GET, "/v1/queues", None)
        .await;
    let names: Vec<&str> = all["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert_eq!(names, ["jobs", "jobs-failed"], "{all}");
    s.shutdown().await;
}
