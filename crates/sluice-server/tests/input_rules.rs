//! How the API reads input the OpenAPI document allows: integral numbers in integer fields,
//! empty query values, lengths in characters, query options beside a JSON send, and the
//! requests that conflict with what they name (409, not 400).

mod common;

use common::{assert_error, start};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integral_numbers_fill_integer_fields_and_fractions_do_not() {
    let s = start().await;
    let (st, v) = s
        .call(
            Method::PUT,
            "/v1/queues/jobs",
            Some(json!({"visibility_timeout_ms": 45000.0, "max_receive_count": 3e0})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["config"]["visibility_timeout_ms"], 45_000);
    assert_eq!(v["config"]["max_receive_count"], 3);
    let bad = s
        .call(
            Method::PUT,
            "/v1/queues/jobs",
            Some(json!({"visibility_timeout_ms": 45000.5})),
        )
        .await;
    assert_error(&bad, 400, "invalid_argument");
    // A float inside the message body is the body's own business and is kept as sent.
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages",
            Some(json!({"body": {"price": 2.0}, "delay_ms": 0.0})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let got = s.receive("jobs", json!({"max": 1})).await;
    assert_eq!(got[0]["body"], json!({"price": 2.0}));
    assert_eq!(got[0]["body"].to_string(), "{\"price\":2.0}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_query_text_is_no_filter_but_an_empty_number_is_refused() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    let (st, v) = s.call(Method::GET, "/v1/audit?queue=&since=", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["entries"][0]["action"], "queue.create", "{v}");
    assert!(
        v["entries"][0].get("message_id").is_none(),
        "absent, not null: {v}"
    );
    let (st, v) = s
        .call(
            Method::GET,
            "/v1/queues/jobs/summary?group_by=&attribute=&reason=",
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let bad = s.call(Method::GET, "/v1/audit?limit=", None).await;
    assert_error(&bad, 400, "invalid_argument");
    let bad = s
        .call(Method::GET, "/v1/queues/jobs/summary?limit=", None)
        .await;
    assert_error(&bad, 400, "invalid_argument");
    for limit in [0, 10_001] {
        let bad = s
            .call(Method::GET, &format!("/v1/audit?limit={limit}"), None)
            .await;
        assert_error(&bad, 400, "invalid_argument");
    }
    // Longer ago than 1970 is 1970.
    let (st, v) = s
        .call(
            Method::GET,
            "/v1/queues/jobs/messages?state=all&dead_lettered_after=999999999d999999999d",
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lengths_are_characters_not_bytes() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    let dedup: String = "é".repeat(256);
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages",
            Some(json!({"body": 1, "dedup_id": dedup, "attributes": {"ключ": "я".repeat(4096)}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let bad = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages",
            Some(json!({"body": 1, "dedup_id": "é".repeat(257)})),
        )
        .await;
    assert_error(&bad, 400, "invalid_argument");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_options_are_defaults_for_a_json_send() {
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages?delay_ms=60000",
            Some(json!({"messages": [{"body": 1}, {"body": 2, "delay_ms": 0}]})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let got = s.receive("jobs", json!({"max": 10})).await;
    assert_eq!(
        got.len(),
        1,
        "the first waits for the query's delay: {got:?}"
    );
    assert_eq!(got[0]["body"], 2);
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages?group=g1",
            Some(json!({"body": 3})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let got = s.receive("jobs", json!({"max": 10})).await;
    assert_eq!(
        (&got[0]["body"], &got[0]["group"]),
        (&json!(3), &json!("g1"))
    );
    let bad = s
        .call(
            Method::POST,
            "/v1/queues/jobs/messages?delay_ms=-1",
            Some(json!({"body": 1})),
        )
        .await;
    assert_error(&bad, 400, "invalid_argument");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_its_own_resource_is_a_conflict() {
    let s = start().await;
    let own_dlq = s
        .call(
            Method::PUT,
            "/v1/queues/jobs",
            Some(json!({"dead_letter_queue": "jobs"})),
        )
        .await;
    assert_error(&own_dlq, 409, "conflict");
    s.put_queue("jobs", json!({})).await;
    // No DLQ while the queue's attempts are limited: a clash with its state when the request
    // gives one side, bad input when it gives both.
    let no_dlq = s
        .call(
            Method::PUT,
            "/v1/queues/jobs",
            Some(json!({"dead_letter_queue": null})),
        )
        .await;
    assert_error(&no_dlq, 409, "conflict");
    let both = s
        .call(
            Method::PUT,
            "/v1/queues/jobs",
            Some(json!({"dead_letter_queue": null, "max_receive_count": 3})),
        )
        .await;
    assert_error(&both, 400, "invalid_argument");
    let (st, v) = s
        .call(
            Method::PUT,
            "/v1/queues/open",
            Some(json!({"dead_letter_queue": null, "max_receive_count": 0})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    s.send("jobs", json!(1)).await;
    let d = s.receive("jobs", json!({"max": 1})).await;
    let into_itself = s
        .call(
            Method::POST,
            "/v1/queues/jobs/move",
            Some(json!({"receipt": d[0]["receipt"], "to": "jobs"})),
        )
        .await;
    assert_error(&into_itself, 409, "conflict");
    let redrive = s
        .call(
            Method::POST,
            "/v1/redrives",
            Some(json!({"source": "jobs.dlq", "destination": "jobs.dlq"})),
        )
        .await;
    assert_error(&redrive, 409, "conflict");
    // A rate faster than the fastest is the fastest, not an error.
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/redrives",
            Some(json!({"source": "jobs.dlq", "rate": {"limit": 4_000_000_000u32, "period_ms": 1}, "dry_run": true})),
        )
        .await;
    assert!(st.is_success(), "{st} {v}");
    assert_eq!(
        v["rate"],
        json!({"limit": 100_000, "period_ms": 1000}),
        "{v}"
    );
    let zero = s
        .call(
            Method::POST,
            "/v1/redrives",
            Some(json!({"source": "jobs.dlq", "rate": {"limit": 5, "period_ms": 0}})),
        )
        .await;
    assert_error(&zero, 400, "invalid_argument");
}

/// A JSON request body as text, so that bodies nested deeper than `serde_json::Value` can
/// hold are sent as written.
async fn raw_json(
    s: &common::TestServer,
    method: Method,
    path: &str,
    text: String,
) -> (StatusCode, serde_json::Value) {
    let resp = s
        .client
        .request(method, s.url(path))
        .header("content-type", "application/json")
        .body(text)
        .send()
        .await
        .expect("request");
    common::parse(resp).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nested_past_the_limit_is_refused_on_every_path_that_keeps_it() {
    use sluice_core::config::limits::MAX_JSON_DEPTH;
    let nested = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    let deep = nested(MAX_JSON_DEPTH + 1);
    let refused = |got: &(StatusCode, serde_json::Value)| {
        assert_error(got, 400, "invalid_argument");
        let msg = got.1["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(&MAX_JSON_DEPTH.to_string()), "{msg}");
    };
    let s = start().await;
    s.put_queue("jobs", json!({})).await;
    let send = "/v1/queues/jobs/messages";

    // Sends, one message or a batch, just past the limit or far past it.
    for levels in [MAX_JSON_DEPTH + 1, 100_000] {
        let body = nested(levels);
        refused(&raw_json(&s, Method::POST, send, format!("{{\"body\": {body}}}")).await);
        let batch = format!("{{\"messages\": [{{\"body\": 1}}, {{\"body\": {body}}}]}}");
        refused(&raw_json(&s, Method::POST, send, batch).await);
    }
    // Brackets in strings are text, not nesting.
    let wide = format!("{{\"body\": {{\"s\": \"{}\"}}}}", "[".repeat(1000));
    assert_eq!(
        raw_json(&s, Method::POST, send, wide).await.0,
        StatusCode::CREATED
    );
    let at_limit = format!("{{\"body\": {}}}", nested(MAX_JSON_DEPTH));
    assert_eq!(
        raw_json(&s, Method::POST, send, at_limit).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        s.stats("jobs").await["totals"]["sent"],
        2,
        "nothing else stored"
    );

    // Results: the single form is refused; in a batch, that ack alone.
    let got = s.receive("jobs", json!({"max": 2})).await;
    let (r0, r1) = (&got[0]["receipt"], &got[1]["receipt"]);
    let ack = "/v1/queues/jobs/ack";
    refused(
        &raw_json(
            &s,
            Method::POST,
            ack,
            format!("{{\"receipt\": {r0}, \"result\": {deep}}}"),
        )
        .await,
    );
    let batch = format!(
        "{{\"acks\": [{{\"receipt\": {r0}, \"result\": {}}}, {{\"receipt\": {r1}, \"result\": {deep}}}]}}",
        nested(MAX_JSON_DEPTH)
    );
    let (st, v) = raw_json(&s, Method::POST, ack, batch).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["results"][0]["ok"], true, "{v}");
    assert_eq!(v["results"][1]["ok"], false, "{v}");
    assert_eq!(v["results"][1]["error"]["code"], "invalid_argument", "{v}");

    // A schedule's body is a message body.
    let schedule = format!("{{\"cron\": \"0 9 * * *\", \"queue\": \"jobs\", \"body\": {deep}}}");
    refused(&raw_json(&s, Method::PUT, "/v1/schedules/nightly", schedule).await);
    let (st, _) = s.call(Method::GET, "/v1/schedules/nightly", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "the schedule was not stored");
}
