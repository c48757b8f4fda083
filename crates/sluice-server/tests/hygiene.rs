//! The API's edges: routing errors with their own codes, query strings with defaults and
//! errors that name the parameter, times typed as "how long ago", dead letters shown as
//! such, messages without debug formatting, and create-only PUT with `If-None-Match: *`.

mod common;

use common::{assert_error, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn message(got: &(StatusCode, Value)) -> String {
    got.1["error"]["message"].as_str().unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_errors_have_their_own_codes_and_405_lists_the_methods() {
    let s = start().await;
    let got = s.call(Method::GET, "/v1/nothing", None).await;
    assert_error(&got, 404, "not_found");
    assert!(message(&got).contains("no such route"), "{}", got.1);

    let resp = s
        .client
        .request(Method::PATCH, s.url("/v1/queues/jobs"))
        .send()
        .await
        .expect("request");
    let allow = resp
        .headers()
        .get(reqwest::header::ALLOW)
        .map(|v| v.to_str().unwrap_or("").to_owned())
        .unwrap_or_default();
    let got = common::parse(resp).await;
    assert_error(&got, 405, "method_not_allowed");
    for m in ["GET", "PUT", "DELETE"] {
        assert!(allow.contains(m), "Allow header {allow:?} lacks {m}");
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_defaults_per_worker_to_one_and_names_a_bad_parameter() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    for n in 0..3 {
        s.send("jobs", json!(n)).await;
    }
    let (st, v) = s.call(Method::GET, "/v1/queues/jobs/scaling", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["desired_workers"], 3, "per_worker defaults to 1: {v}");
    let (st, v) = s
        .call(Method::GET, "/v1/queues/jobs/scaling?per_worker=2", None)
        .await;
    assert_eq!((st, &v["desired_workers"]), (StatusCode::OK, &json!(2)));

    let got = s
        .call(Method::GET, "/v1/queues/jobs/scaling?per_worker=lots", None)
        .await;
    assert_error(&got, 400, "invalid_argument");
    let m = message(&got);
    assert!(m.contains("per_worker") && m.contains("\"lots\""), "{m}");
    assert!(!m.contains("Failed to deserialize"), "raw parser text: {m}");

    let got = s
        .call(Method::GET, "/v1/queues/jobs/scaling?workers=2", None)
        .await;
    assert_error(&got, 400, "invalid_argument");
    let m = message(&got);
    assert!(
        m.contains("unknown query parameter \"workers\"") && m.contains("per_worker"),
        "{m}"
    );

    let doc = s.call(Method::GET, "/openapi.json", None).await.1;
    let params = &doc["paths"]["/v1/queues/{q}/scaling"]["get"]["parameters"];
    let per_worker = params
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "per_worker")
        .expect("per_worker documented");
    assert_eq!(per_worker["in"], "query");
    assert_eq!(per_worker["required"], false);
    assert_eq!(per_worker["schema"]["default"], 1, "{per_worker}");

    // Every query parameter is documented in the query, and the optional ones as optional.
    for (path, names) in [
        ("/v1/queues/{q}/stats/history", vec!["since"]),
        ("/v1/audit", vec!["queue", "since", "limit"]),
        ("/v1/tasks/{id}", vec!["wait_ms"]),
        ("/v1/queues/{q}/messages", vec!["state", "limit", "cursor"]),
    ] {
        let params = doc["paths"][path]["get"]["parameters"]
            .as_array()
            .expect("parameters")
            .clone();
        for name in names {
            let p = params
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{path} {name} undocumented"));
            assert_eq!(p["in"], "query", "{path}: {p}");
            assert_eq!(p["required"], false, "{path}: {p}");
        }
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_in_queries_read_as_rfc3339_or_how_long_ago() {
    let s = start().await;
    s.put_queue("jobs", json!({"max_receive_count": 1})).await;
    s.send("jobs", json!("x")).await;
    let got = s.receive("jobs", json!({})).await;
    let receipt = got[0]["receipt"].as_str().expect("receipt");
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/reject",
            Some(json!({"receipt": receipt, "error": "bad"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK);

    for since in ["10m", "1h", "90s", "2d", "2026-01-01T00:00:00Z"] {
        let (st, v) = s
            .call(
                Method::GET,
                &format!("/v1/queues/jobs/stats/history?since={since}"),
                None,
            )
            .await;
        assert_eq!(st, StatusCode::OK, "history since={since}: {v}");
        let (st, v) = s
            .call(Method::GET, &format!("/v1/audit?since={since}"), None)
            .await;
        assert_eq!(st, StatusCode::OK, "audit since={since}: {v}");
    }
    // The dead letter of a moment ago is after "1h" ago and not before it.
    let page = |q: &str| {
        let path = format!("/v1/queues/jobs.dlq/messages?{q}");
        let s = &s;
        async move { s.call(Method::GET, &path, None).await }
    };
    let (st, v) = page("dead_lettered_after=1h").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["messages"].as_array().map(Vec::len), Some(1), "{v}");
    let (_, v) = page("dead_lettered_before=1h").await;
    assert_eq!(v["messages"].as_array().map(Vec::len), Some(0), "{v}");

    let got = s
        .call(
            Method::GET,
            "/v1/queues/jobs/stats/history?since=yesterday",
            None,
        )
        .await;
    assert_error(&got, 400, "invalid_argument");
    let m = message(&got);
    assert!(
        m.contains("since") && m.contains("RFC 3339") && m.contains("10m"),
        "{m}"
    );
    let got = page("dead_lettered_after=soon").await;
    assert_error(&got, 400, "invalid_argument");
    assert!(message(&got).contains("dead_lettered_after"), "{}", got.1);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_reads_as_dead_lettered() {
    let s = start().await;
    s.put_queue("tmpq", json!({"max_receive_count": 1})).await;
    let id = s.send("tmpq", json!("x")).await;
    let (_, v) = s
        .call(Method::GET, &format!("/v1/messages/{id}"), None)
        .await;
    assert_eq!(v["dead_lettered"], false, "{v}");
    let got = s.receive("tmpq", json!({})).await;
    let receipt = got[0]["receipt"].as_str().expect("receipt");
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/queues/tmpq/nack",
            Some(json!({"receipt": receipt, "error": "boom"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let (st, v) = s
        .call(Method::GET, &format!("/v1/messages/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["queue"], "tmpq.dlq", "{v}");
    assert_eq!(v["dead_lettered"], true, "{v}");
    assert_eq!(v["dead_letter_reason"], "exhausted", "{v}");
    assert_eq!(v["state"], "visible", "state stays what it was: {v}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_name_queues_without_debug_formatting() {
    let s = start().await;
    s.put_queue("tmpq", json!({})).await;
    let got = s.call(Method::DELETE, "/v1/queues/tmpq.dlq", None).await;
    assert_error(&got, 409, "conflict");
    assert!(
        message(&got).contains("queue \"tmpq.dlq\" is the dead-letter queue of \"tmpq\""),
        "{}",
        got.1
    );
    let got = s.call(Method::GET, "/v1/queues/nope/stats", None).await;
    assert_error(&got, 404, "queue_not_found");
    assert!(
        message(&got).starts_with("queue \"nope\" does not exist"),
        "{}",
        got.1
    );
    let got = s
        .call(
            Method::PUT,
            "/v1/queues/tmpq",
            Some(json!({"dead_letter_queue": "tmpq"})),
        )
        .await;
    assert_error(&got, 409, "conflict");
    let got = s.call(Method::GET, "/v1/messages/zz", None).await;
    assert_error(&got, 400, "invalid_argument");
    s.shutdown().await;
}

async fn put_create_only(s: &common::TestServer, name: &str, body: Value) -> (StatusCode, Value) {
    let resp = s
        .client
        .put(s.url(&format!("/v1/queues/{name}")))
        .header(reqwest::header::IF_NONE_MATCH, "*")
        .json(&body)
        .send()
        .await
        .expect("request");
    common::parse(resp).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_with_if_none_match_only_creates() {
    let s = start().await;
    let (st, v) = put_create_only(&s, "orders", json!({"max_receive_count": 3})).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["config"]["max_receive_count"], 3);

    let got = put_create_only(&s, "orders", json!({"max_receive_count": 7})).await;
    assert_error(&got, 409, "conflict");
    let m = message(&got);
    assert!(
        m.contains("queue \"orders\" already exists") && m.contains("without If-None-Match"),
        "{m}"
    );
    let (_, v) = s.call(Method::GET, "/v1/queues/orders", None).await;
    assert_eq!(
        v["config"]["max_receive_count"], 3,
        "a refused create changes nothing"
    );

    // Without the header, PUT still creates or updates.
    let v = s.put_queue("orders", json!({"max_receive_count": 7})).await;
    assert_eq!(v["config"]["max_receive_count"], 7);

    // Of many creates of one name at once, exactly one wins.
    let all = futures_join(&s, "race").await;
    let created = all.iter().filter(|st| **st == StatusCode::CREATED).count();
    let conflicts = all.iter().filter(|st| **st == StatusCode::CONFLICT).count();
    assert_eq!((created, conflicts), (1, all.len() - 1), "{all:?}");

    let doc = s.call(Method::GET, "/openapi.json", None).await.1;
    let put = &doc["paths"]["/v1/queues/{q}"]["put"];
    assert!(
        put["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .any(|p| p["name"] == "If-None-Match" && p["in"] == "header"),
        "{put}"
    );
    assert!(put["responses"]["409"].is_object(), "{put}");
    s.shutdown().await;
}

async fn futures_join(s: &common::TestServer, name: &str) -> Vec<StatusCode> {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = s.client.clone();
        let url = s.url(&format!("/v1/queues/{name}"));
        tasks.push(tokio::spawn(async move {
            client
                .put(url)
                .header(reqwest::header::IF_NONE_MATCH, "*")
                .send()
                .await
                .expect("request")
                .status()
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}
