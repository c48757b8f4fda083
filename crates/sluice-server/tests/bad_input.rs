//! Bad input gets a clear 4xx with the right code, changes nothing, and the server stays up.

mod common;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// One bad request.
struct Case {
    what: &'static str,
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    headers: Vec<(&'static str, HeaderValue)>,
    status: u16,
    code: &'static str,
}

fn case(
    what: &'static str,
    method: Method,
    path: &str,
    body: &str,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        what,
        method,
        path: path.to_owned(),
        content_type: (!body.is_empty()).then_some("application/json"),
        body: body.as_bytes().to_vec(),
        headers: Vec::new(),
        status,
        code,
    }
}

fn raw(
    what: &'static str,
    path: &str,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        what,
        method: Method::POST,
        path: path.to_owned(),
        content_type,
        body,
        headers: Vec::new(),
        status,
        code,
    }
}

fn cases(stale: &str) -> Vec<Case> {
    use Method as M;
    let q = "/v1/queues/jobs";
    let send = "/v1/queues/jobs/messages";
    let recv = "/v1/queues/jobs/receive";
    let ack = "/v1/queues/jobs/ack";
    let big_batch = format!(
        r#"{{"messages": [{}]}}"#,
        vec![r#"{"body": 1}"#; 1001].join(",")
    );
    let long_name = format!("/v1/queues/{}", "a".repeat(81));
    let too_big = format!(r#"{{"body": "{}"}}"#, "x".repeat(2000));
    let mut v = vec![
        // Queue configuration.
        case("malformed JSON", M::PUT, q, "{", 400, "invalid_argument"),
        case(
            "wrong type for a duration",
            M::PUT,
            q,
            r#"{"visibility_timeout_ms": "30s"}"#,
            400,
            "invalid_argument",
        ),
        case(
            "unknown field",
            M::PUT,
            q,
            r#"{"visiblity_timeout_ms": 1}"#,
            400,
            "invalid_argument",
        ),
        case(
            "negative duration",
            M::PUT,
            q,
            r#"{"visibility_timeout_ms": -1}"#,
            400,
            "invalid_argument",
        ),
        case(
            "huge duration",
            M::PUT,
            q,
            r#"{"visibility_timeout_ms": 999999999999}"#,
            400,
            "invalid_argument",
        ),
        case(
            "duration past i64",
            M::PUT,
            q,
            r#"{"retention_ms": 100000000000000000000000}"#,
            400,
            "invalid_argument",
        ),
        case(
            "fractional count",
            M::PUT,
            q,
            r#"{"max_receive_count": 1.5}"#,
            400,
            "invalid_argument",
        ),
        case(
            "count over the limit",
            M::PUT,
            q,
            r#"{"max_receive_count": 1001}"#,
            400,
            "invalid_argument",
        ),
        case(
            "retention under a minute",
            M::PUT,
            q,
            r#"{"retention_ms": 1000}"#,
            400,
            "invalid_argument",
        ),
        case(
            "bad DLQ name",
            M::PUT,
            q,
            r#"{"dead_letter_queue": "x y"}"#,
            400,
            "invalid_argument",
        ),
        case(
            "DLQ is itself",
            M::PUT,
            q,
            r#"{"dead_letter_queue": "jobs"}"#,
            409,
            "conflict",
        ),
        case(
            "rate limit without period",
            M::PUT,
            q,
            r#"{"rate_limit": {"limit": 5}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "rate limit of zero",
            M::PUT,
            q,
            r#"{"rate_limit": {"limit": 0, "period_ms": 1000}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "array instead of object",
            M::PUT,
            q,
            "[]",
            400,
            "invalid_argument",
        ),
        case(
            "no DLQ with attempts limited",
            M::PUT,
            "/v1/queues/fresh",
            r#"{"dead_letter_queue": null, "max_receive_count": 5}"#,
            400,
            "invalid_argument",
        ),
        case(
            "no DLQ while the queue's attempts are limited",
            M::PUT,
            "/v1/queues/fresh",
            r#"{"dead_letter_queue": null}"#,
            409,
            "conflict",
        ),
        case(
            "invalid queue name",
            M::PUT,
            "/v1/queues/bad%20name",
            "{}",
            400,
            "invalid_argument",
        ),
        case(
            "queue name too long",
            M::PUT,
            &long_name,
            "{}",
            400,
            "invalid_argument",
        ),
        case(
            "non-ASCII queue name",
            M::GET,
            "/v1/queues/%C3%BC",
            "",
            400,
            "invalid_argument",
        ),
        // Send.
        case(
            "send malformed JSON",
            M::POST,
            send,
            r#"{"body": }"#,
            400,
            "invalid_argument",
        ),
        case(
            "send without body",
            M::POST,
            send,
            r#"{"attributes": {}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send empty object",
            M::POST,
            send,
            "{}",
            400,
            "invalid_argument",
        ),
        case(
            "send both body forms",
            M::POST,
            send,
            r#"{"body": 1, "body_base64": "AA=="}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send bad base64",
            M::POST,
            send,
            r#"{"body_base64": "!!!not base64"}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send non-string attribute",
            M::POST,
            send,
            r#"{"body": 1, "attributes": {"a": 1}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send negative delay",
            M::POST,
            send,
            r#"{"body": 1, "delay_ms": -5}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send delay over 7 days",
            M::POST,
            send,
            r#"{"body": 1, "delay_ms": 604800001}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send unknown field",
            M::POST,
            send,
            r#"{"body": 1, "urgency": 9}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send priority out of range",
            M::POST,
            send,
            r#"{"body": 1, "priority": 10}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send key too long",
            M::POST,
            send,
            &format!(r#"{{"body": 1, "key": "{}"}}"#, "k".repeat(129)),
            400,
            "invalid_argument",
        ),
        case(
            "send empty key in a batch",
            M::POST,
            send,
            r#"{"messages": [{"body": 1, "key": ""}]}"#,
            400,
            "invalid_argument",
        ),
        case(
            "queue default_priority out of range",
            M::PUT,
            q,
            r#"{"default_priority": 12}"#,
            400,
            "invalid_argument",
        ),
        case(
            "queue key_limits of 0 in flight",
            M::PUT,
            q,
            r#"{"key_limits": {"max_in_flight": 0}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "queue key_limits with a field it does not have",
            M::PUT,
            q,
            r#"{"key_limits": {"max_in_flight": 1, "weight": 2}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "queue key_limits with a rate of limit 0",
            M::PUT,
            q,
            r#"{"key_limits": {"rate_limit": {"limit": 0, "period_ms": 1000}}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "queue key_limits with a rate period in seconds",
            M::PUT,
            q,
            r#"{"key_limits": {"rate_limit": {"limit": 1, "period": 1}}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "queue key_limits override with a burst above its limit",
            M::PUT,
            q,
            r#"{"key_limits": {"overrides": {"vip-*": {"rate_limit": {"limit": 2, "period_ms": 1000, "burst": 3}}}}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "queue key weight of 0",
            M::PUT,
            q,
            r#"{"key_weights": {"gold-*": 0}}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send empty dedup id",
            M::POST,
            send,
            r#"{"body": 1, "dedup_id": ""}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send body over max_message_bytes",
            M::POST,
            send,
            &too_big,
            413,
            "payload_too_large",
        ),
        case(
            "send empty batch",
            M::POST,
            send,
            r#"{"messages": []}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send batch of 1001",
            M::POST,
            send,
            &big_batch,
            400,
            "invalid_argument",
        ),
        case(
            "send batch with top-level body",
            M::POST,
            send,
            r#"{"messages": [{"body": 1}], "body": 2}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send batch item without body",
            M::POST,
            send,
            r#"{"messages": [{"body": 1}, {}]}"#,
            400,
            "invalid_argument",
        ),
        case(
            "send to an unknown queue",
            M::POST,
            "/v1/queues/nope/messages",
            r#"{"body": 1}"#,
            404,
            "queue_not_found",
        ),
        case(
            "send JSON null document",
            M::POST,
            send,
            "null",
            400,
            "invalid_argument",
        ),
        raw(
            "send octet-stream over max_message_bytes",
            send,
            Some("application/octet-stream"),
            vec![0; 1025],
            413,
            "payload_too_large",
        ),
        raw(
            "send text/plain with invalid UTF-8",
            send,
            Some("text/plain"),
            vec![0xff, 0xfe, 0x41],
            400,
            "invalid_argument",
        ),
        raw(
            "send text/plain in latin-1",
            send,
            Some("text/plain; charset=iso-8859-1"),
            b"abc".to_vec(),
            400,
            "invalid_argument",
        ),
        raw(
            "send wrong content type",
            send,
            Some("application/xml"),
            b"<a/>".to_vec(),
            400,
            "invalid_argument",
        ),
        raw(
            "send without content type",
            send,
            None,
            br#"{"body": 1}"#.to_vec(),
            400,
            "invalid_argument",
        ),
        raw(
            "send form-encoded",
            send,
            Some("application/x-www-form-urlencoded"),
            b"body=1".to_vec(),
            400,
            "invalid_argument",
        ),
        case(
            "send JSON with a bad query default",
            M::POST,
            "/v1/queues/jobs/messages?delay_ms=604800001",
            r#"{"body": 1}"#,
            400,
            "invalid_argument",
        ),
        raw(
            "raw send with negative delay",
            "/v1/queues/jobs/messages?delay_ms=-1",
            Some("text/plain"),
            b"x".to_vec(),
            400,
            "invalid_argument",
        ),
        raw(
            "raw send with unknown query",
            "/v1/queues/jobs/messages?urgency=1",
            Some("text/plain"),
            b"x".to_vec(),
            400,
            "invalid_argument",
        ),
        // Receive.
        case(
            "receive max 0",
            M::POST,
            recv,
            r#"{"max": 0}"#,
            400,
            "invalid_argument",
        ),
        case(
            "receive max 1001",
            M::POST,
            recv,
            r#"{"max": 1001}"#,
            400,
            "invalid_argument",
        ),
        case(
            "receive wait over 30 s",
            M::POST,
            recv,
            r#"{"wait_ms": 30001}"#,
            400,
            "invalid_argument",
        ),
        case(
            "receive negative wait",
            M::POST,
            recv,
            r#"{"wait_ms": -5}"#,
            400,
            "invalid_argument",
        ),
        case(
            "receive visibility over 12 h",
            M::POST,
            recv,
            r#"{"visibility_timeout_ms": 43200001}"#,
            400,
            "invalid_argument",
        ),
        case(
            "receive max as string",
            M::POST,
            recv,
            r#"{"max": "1"}"#,
            400,
            "invalid_argument",
        ),
        case(
            "receive unknown field",
            M::POST,
            recv,
            r#"{"maxx": 1}"#,
            400,
            "invalid_argument",
        ),
        case(
            "receive from an unknown queue",
            M::POST,
            "/v1/queues/nope/receive",
            "{}",
            404,
            "queue_not_found",
        ),
        // Ack and friends.
        case(
            "ack stale receipt",
            M::POST,
            ack,
            &format!(r#"{{"receipt": "{stale}"}}"#),
            409,
            "receipt_stale",
        ),
        case(
            "ack malformed receipt",
            M::POST,
            ack,
            r#"{"receipt": "abc"}"#,
            400,
            "invalid_argument",
        ),
        case(
            "ack receipt as number",
            M::POST,
            ack,
            r#"{"receipt": 12}"#,
            400,
            "invalid_argument",
        ),
        case(
            "ack without receipt",
            M::POST,
            ack,
            "{}",
            400,
            "invalid_argument",
        ),
        case(
            "ack mixing forms",
            M::POST,
            ack,
            &format!(r#"{{"receipt": "{stale}", "receipts": ["{stale}"]}}"#),
            400,
            "invalid_argument",
        ),
        case(
            "ack empty batch",
            M::POST,
            ack,
            r#"{"receipts": []}"#,
            400,
            "invalid_argument",
        ),
        case(
            "ack result in both forms",
            M::POST,
            ack,
            &format!(r#"{{"receipt": "{stale}", "result": 1, "result_base64": "AA=="}}"#),
            400,
            "invalid_argument",
        ),
        raw(
            "ack as text/plain",
            ack,
            Some("text/plain"),
            format!(r#"{{"receipt": "{stale}"}}"#).into_bytes(),
            400,
            "invalid_argument",
        ),
        case(
            "ack on an unknown queue",
            M::POST,
            "/v1/queues/nope/ack",
            &format!(r#"{{"receipt": "{stale}"}}"#),
            404,
            "queue_not_found",
        ),
        case(
            "nack stale receipt",
            M::POST,
            "/v1/queues/jobs/nack",
            &format!(r#"{{"receipt": "{stale}"}}"#),
            409,
            "receipt_stale",
        ),
        case(
            "nack negative delay",
            M::POST,
            "/v1/queues/jobs/nack",
            &format!(r#"{{"receipt": "{stale}", "delay_ms": -1}}"#),
            400,
            "invalid_argument",
        ),
        case(
            "nack error as object",
            M::POST,
            "/v1/queues/jobs/nack",
            &format!(r#"{{"receipt": "{stale}", "error": {{}}}}"#),
            400,
            "invalid_argument",
        ),
        case(
            "reject stale receipt",
            M::POST,
            "/v1/queues/jobs/reject",
            &format!(r#"{{"receipt": "{stale}"}}"#),
            409,
            "receipt_stale",
        ),
        case(
            "move to an invalid name",
            M::POST,
            "/v1/queues/jobs/move",
            &format!(r#"{{"receipt": "{stale}", "to": "a/b"}}"#),
            400,
            "invalid_argument",
        ),
        case(
            "move without destination",
            M::POST,
            "/v1/queues/jobs/move",
            &format!(r#"{{"receipt": "{stale}"}}"#),
            400,
            "invalid_argument",
        ),
        case(
            "extend over 12 h",
            M::POST,
            "/v1/queues/jobs/extend",
            &format!(r#"{{"receipt": "{stale}", "visibility_timeout_ms": 43200001}}"#),
            400,
            "invalid_argument",
        ),
        case(
            "extend without duration",
            M::POST,
            "/v1/queues/jobs/extend",
            &format!(r#"{{"receipt": "{stale}"}}"#),
            400,
            "invalid_argument",
        ),
        case(
            "extend stale receipt",
            M::POST,
            "/v1/queues/jobs/extend",
            &format!(r#"{{"receipt": "{stale}", "visibility_timeout_ms": 1000}}"#),
            409,
            "receipt_stale",
        ),
        // Browse, messages, stats.
        case(
            "browse unknown state",
            M::GET,
            "/v1/queues/jobs/messages?state=bogus",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "browse limit 0",
            M::GET,
            "/v1/queues/jobs/messages?limit=0",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "browse limit not a number",
            M::GET,
            "/v1/queues/jobs/messages?limit=abc",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "browse unknown parameter",
            M::GET,
            "/v1/queues/jobs/messages?sort=asc",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "browse garbage cursor",
            M::GET,
            "/v1/queues/jobs/messages?cursor=zzz",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "message id not hex",
            M::GET,
            "/v1/messages/xyz",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "unknown message",
            M::GET,
            "/v1/messages/00000000000000ff",
            "",
            404,
            "message_not_found",
        ),
        case(
            "delete unknown message",
            M::DELETE,
            "/v1/messages/00000000000000ff",
            "",
            404,
            "message_not_found",
        ),
        case(
            "stats of an unknown queue",
            M::GET,
            "/v1/queues/nope/stats",
            "",
            404,
            "queue_not_found",
        ),
        case(
            "delete an unknown queue",
            M::DELETE,
            "/v1/queues/nope",
            "",
            404,
            "queue_not_found",
        ),
        case(
            "delete a DLQ in use",
            M::DELETE,
            "/v1/queues/jobs.dlq",
            "",
            409,
            "conflict",
        ),
        // Routing.
        case("unknown route", M::GET, "/v1/nothing", "", 404, "not_found"),
        case("wrong method", M::PATCH, q, "{}", 405, "method_not_allowed"),
        // Query strings: a wrong value or an unknown parameter is named.
        case(
            "per_worker not a number",
            M::GET,
            "/v1/queues/jobs/scaling?per_worker=lots",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "unknown query parameter",
            M::GET,
            "/v1/queues/jobs/scaling?per_worker=1&workers=2",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "since neither a time nor a duration",
            M::GET,
            "/v1/queues/jobs/stats/history?since=yesterday",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "audit since neither a time nor a duration",
            M::GET,
            "/v1/audit?since=soon",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "If-None-Match other than *",
            M::PUT,
            q,
            "{}",
            400,
            "invalid_argument",
        ),
    ];
    // Header abuse.
    let mut huge = case(
        "huge Authorization header",
        M::GET,
        q,
        "",
        400,
        "invalid_argument",
    );
    huge.headers.push((
        "authorization",
        HeaderValue::from_str(&format!("Bearer {}", "k".repeat(16 * 1024))).expect("header"),
    ));
    v.push(huge);
    let mut binary = case(
        "non-UTF-8 Authorization header",
        M::GET,
        q,
        "",
        400,
        "invalid_argument",
    );
    binary.headers.push((
        "authorization",
        HeaderValue::from_bytes(b"Bearer \xff\xfe").expect("header"),
    ));
    v.push(binary);
    let mut bad_ct = case(
        "unparseable content type",
        M::PUT,
        q,
        "{}",
        400,
        "invalid_argument",
    );
    bad_ct.content_type = Some("???");
    v.push(bad_ct);
    for c in &mut v {
        if c.what == "If-None-Match other than *" {
            c.headers
                .push(("if-none-match", HeaderValue::from_static("\"v1\"")));
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_are_refused_and_change_nothing() {
    let s = common::start().await;
    s.put_queue("jobs", json!({"max_message_bytes": 1024}))
        .await;
    // A receipt that was valid once.
    s.send("jobs", json!("done")).await;
    let got = s.receive("jobs", json!({})).await;
    let stale = got[0]["receipt"].as_str().unwrap().to_owned();
    let (st, _) = s
        .call(
            Method::POST,
            "/v1/queues/jobs/ack",
            Some(json!({"receipt": stale})),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    s.send("jobs", json!("waiting")).await;

    // Everything but what moves with the clock by itself: the age of the oldest message,
    // and the rates and trends (a young queue's are over its age, so the same counts give a
    // lower rate a moment later).
    let counters = |mut v: Value| {
        for moving in [
            "oldest_visible_age_ms",
            "rates",
            "rates_5m",
            "rates_15m",
            "backlog_trend",
            "dlq_trend",
            "backlog_slope_per_sec",
            "drain_eta_ms",
        ] {
            v[moving] = Value::Null;
        }
        v
    };
    let before_stats = counters(s.stats("jobs").await);
    let before_queues = s.call(Method::GET, "/v1/queues", None).await.1;
    let before_page = s
        .call(Method::GET, "/v1/queues/jobs/messages?state=all", None)
        .await
        .1;

    let cases = cases(&stale);
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let mut req = s.client.request(c.method.clone(), s.url(&c.path));
        if let Some(ct) = c.content_type {
            req = req.header(reqwest::header::CONTENT_TYPE, ct);
        }
        for (k, val) in &c.headers {
            req = req.header(HeaderName::from_static(k), val.clone());
        }
        if !c.body.is_empty() {
            req = req.body(c.body.clone());
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", c.what));
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let code = parsed["error"]["code"].as_str().unwrap_or("<none>");
        let message = parsed["error"]["message"].as_str().unwrap_or("");
        common::assert_plain_message(message);
        if status.as_u16() != c.status || code != c.code || message.is_empty() {
            failures.push(format!(
                "{}: expected {} {}, got {} {}",
                c.what,
                c.status,
                c.code,
                status,
                text.chars().take(300).collect::<String>()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    // Nothing changed, and the server still answers.
    assert_eq!(counters(s.stats("jobs").await), before_stats);
    assert_eq!(
        s.call(Method::GET, "/v1/queues", None).await.1,
        before_queues
    );
    assert_eq!(
        s.call(Method::GET, "/v1/queues/jobs/messages?state=all", None)
            .await
            .1,
        before_page
    );
    assert_eq!(
        s.call(Method::GET, "/healthz", None).await.0,
        StatusCode::OK
    );
    let got = s.receive("jobs", json!({})).await;
    assert_eq!(got[0]["body"], "waiting");
    s.shutdown().await;
}
