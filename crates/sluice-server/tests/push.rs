//! Push delivery against a real HTTP endpoint started by the test: acks, Retry-After,
//! backoff, dead-lettering, timeouts, signatures, rate limits and the target rules.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use reqwest::Method;
use serde_json::{Value, json};
use sluice_server::ServerOptions;

const SECRET: &str = "whsec_0123456789abcdef";

/// One request the endpoint saw.
#[derive(Clone, Debug)]
struct Call {
    at: Instant,
    headers: HeaderMap,
    body: Bytes,
}

/// A local endpoint that answers from the body's `"answer"`: `ok` → 204, `throttle` → 429
/// with `Retry-After: 2` on the first call then 200, `fail` → 500, `missing` → 404, `slow` →
/// waits 2 s then 200.
#[derive(Clone, Default)]
struct Endpoint {
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Endpoint {
    async fn start(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let me = me.clone();
                async move { me.answer(headers, body).await }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", l.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(l, app).await });
        url
    }

    async fn answer(&self, headers: HeaderMap, body: Bytes) -> axum::response::Response {
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let seen = {
            let mut calls = self.calls.lock().expect("lock");
            calls.push(Call {
                at: Instant::now(),
                headers: headers.clone(),
                body: body.clone(),
            });
            calls.iter().filter(|c| c.body == body).count()
        };
        match v["answer"].as_str() {
            Some("throttle") if seen == 1 => (
                StatusCode::TOO_MANY_REQUESTS,
                [("Retry-After", "2")],
                "slow down",
            )
                .into_response(),
            Some("fail") => {
                (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded").into_response()
            }
            Some("missing") => (StatusCode::NOT_FOUND, "no such reservation").into_response(),
            Some("slow") => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                StatusCode::OK.into_response()
            }
            _ => StatusCode::NO_CONTENT.into_response(),
        }
    }

    fn calls_with(&self, body: &Value) -> Vec<Call> {
        let b = serde_json::to_vec(body).expect("as expected");
        self.calls
            .lock()
            .expect("as expected")
            .iter()
            .filter(|c| c.body == b)
            .cloned()
            .collect()
    }

    fn count(&self) -> usize {
        self.calls.lock().expect("lock").len()
    }
}

async fn until<F: AsyncFnMut() -> bool>(what: &str, mut f: F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn message(s: &common::TestServer, id: &str) -> Value {
    let (code, v) = s
        .call(Method::GET, &format!("/v1/messages/{id}"), None)
        .await;
    assert_eq!(code, 200, "{v}");
    v
}

#[tokio::test]
async fn pushed_messages_are_acked_signed_and_carry_their_metadata() {
    let s = common::start().await;
    let ep = Endpoint::default();
    let url = ep.start().await;
    let v = s
        .put_queue(
            "hooks",
            json!({"push": {"url": url, "secret": SECRET, "headers": {"Authorization": "Bearer t0k"}}}),
        )
        .await;
    assert_eq!(v["config"]["push"]["signed"], true);
    assert_eq!(
        v["config"]["push"]["headers"]["Authorization"], "(redacted)",
        "header values are never shown: {v}"
    );
    assert!(v["config"]["push"].get("secret").is_none(), "{v}");
    let body = json!({"answer": "ok", "reservation": 17});
    let (code, sent) = s
        .call(
            Method::POST,
            "/v1/queues/hooks/messages",
            Some(json!({"body": body, "attributes": {"city": "Zürich"}})),
        )
        .await;
    assert_eq!(code, 201, "{sent}");
    let id = sent["id"].as_str().expect("as expected").to_owned();
    until("the message to be acked", async || {
        message(&s, &id).await["state"] == "completed"
    })
    .await;
    let calls = ep.calls_with(&body);
    assert_eq!(calls.len(), 1, "pushed once");
    let c = &calls[0];
    let h = |n: &str| {
        c.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(h("sluice-message-id"), id);
    assert_eq!(h("sluice-queue"), "hooks");
    assert_eq!(h("sluice-receive-count"), "1");
    assert_eq!(h("authorization"), "Bearer t0k");
    assert_eq!(h("content-type"), "application/json");
    let attrs: Value = serde_json::from_str(&h("sluice-attributes")).expect("as expected");
    assert_eq!(attrs, json!({"city": "Zürich"}));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("as expected")
        .as_secs() as i64;
    let sig = h("sluice-signature");
    assert!(
        sluice_server::push::signature::verify(SECRET.as_bytes(), &sig, &c.body, now, 300),
        "the signature verifies: {sig}"
    );
    assert!(!sluice_server::push::signature::verify(
        b"not the secret at all",
        &sig,
        &c.body,
        now,
        300
    ));

    // Written back as read, the configuration keeps its secret.
    let (_, q) = s.call(Method::GET, "/v1/queues/hooks", None).await;
    s.put_queue("hooks", q["config"].clone()).await;
    let (_, q) = s.call(Method::GET, "/v1/queues/hooks", None).await;
    assert_eq!(q["config"]["push"]["signed"], true, "{q}");
    // …and its header values: the next call still carries the token.
    let again = json!({"answer": "ok", "reservation": 18});
    let id = s.send("hooks", again.clone()).await;
    until("the second message to be acked", async || {
        message(&s, &id).await["state"] == "completed"
    })
    .await;
    let auth = ep.calls_with(&again)[0]
        .headers
        .get("authorization")
        .cloned();
    assert_eq!(
        auth.as_ref().and_then(|v| v.to_str().ok()),
        Some("Bearer t0k")
    );

    // Per-target figures in /metrics.
    let text = s
        .client
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("as expected")
        .text()
        .await
        .expect("as expected");
    assert!(
        text.lines()
            .any(|l| l.starts_with("sluice_push_requests_total{")
                && l.contains("queue=\"hooks\"")
                && l.contains("outcome=\"delivered\"")
                && l.ends_with(" 2")),
        "{text}"
    );
    assert!(
        text.contains("sluice_push_duration_seconds_count{queue=\"hooks\"} 2"),
        "{text}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn answers_decide_ack_delay_retry_and_dead_letter() {
    let s = common::start().await;
    let ep = Endpoint::default();
    let url = ep.start().await;
    s.put_queue(
        "hooks",
        json!({"max_receive_count": 3, "backoff_base_ms": 100, "backoff_max_ms": 100,
               "push": {"url": url, "timeout_ms": 300}}),
    )
    .await;
    let throttle = json!({"answer": "throttle"});
    let fail = json!({"answer": "fail"});
    let missing = json!({"answer": "missing"});
    let slow = json!({"answer": "slow"});
    let mut ids = Vec::new();
    for b in [&throttle, &fail, &missing, &slow] {
        ids.push(s.send("hooks", b.clone()).await);
    }
    let [throttled, failed, rejected, timed_out] = [&ids[0], &ids[1], &ids[2], &ids[3]];

    // 429 with Retry-After: 2 s later it is pushed again and then acked.
    until("the throttled message to complete", async || {
        message(&s, throttled).await["state"] == "completed"
    })
    .await;
    let calls = ep.calls_with(&throttle);
    assert_eq!(calls.len(), 2);
    let gap = calls[1].at - calls[0].at;
    assert!(
        gap >= Duration::from_millis(1900),
        "Retry-After honoured: {gap:?}"
    );

    // 500: retried with backoff, dead-lettered after its three attempts.
    until("the failing message to be dead-lettered", async || {
        message(&s, failed).await["queue"] == "hooks.dlq"
    })
    .await;
    let m = message(&s, failed).await;
    assert_eq!(m["receive_count"], 3, "{m}");
    assert!(
        m["last_error"]
            .as_str()
            .expect("as expected")
            .contains("500"),
        "{m}"
    );
    assert!(
        m["last_error"]
            .as_str()
            .expect("as expected")
            .contains("upstream exploded"),
        "{m}"
    );
    assert_eq!(ep.calls_with(&fail).len(), 3);

    // 404: rejected at once.
    until("the rejected message to be dead-lettered", async || {
        message(&s, rejected).await["queue"] == "hooks.dlq"
    })
    .await;
    let m = message(&s, rejected).await;
    assert_eq!(m["receive_count"], 1, "{m}");
    assert_eq!(ep.calls_with(&missing).len(), 1);

    // No answer within 300 ms: a failed attempt, retried, then dead-lettered.
    until("the slow message to be dead-lettered", async || {
        message(&s, timed_out).await["queue"] == "hooks.dlq"
    })
    .await;
    let m = message(&s, timed_out).await;
    assert!(
        m["last_error"]
            .as_str()
            .expect("as expected")
            .contains("no answer within 300 ms"),
        "{m}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn the_rate_limit_caps_push_calls_per_window() {
    let s = common::start().await;
    let ep = Endpoint::default();
    let url = ep.start().await;
    s.put_queue(
        "paced",
        json!({"paused": true, "rate_limit": {"limit": 5, "period_ms": 1000},
                                "push": {"url": url}}),
    )
    .await;
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/queues/paced/messages",
            Some(
                json!({"messages": (0..15).map(|i| json!({"body": {"n": i}})).collect::<Vec<_>>()}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    s.put_queue("paced", json!({"paused": false})).await;
    until("all fifteen to be pushed", async || ep.count() >= 15).await;
    let times: Vec<Instant> = ep
        .calls
        .lock()
        .expect("lock")
        .iter()
        .map(|c| c.at)
        .collect();
    for (i, t) in times.iter().enumerate() {
        let in_window = times[i..]
            .iter()
            .filter(|u| u.duration_since(*t) < Duration::from_millis(950))
            .count();
        assert!(
            in_window <= 5,
            "at most 5 calls in any second: {in_window} after call {i}"
        );
    }
    s.shutdown().await;
}

#[tokio::test]
async fn targets_must_be_https_or_loopback_unless_allowed() {
    let s = common::start().await;
    let (code, v) = s
        .call(
            Method::PUT,
            "/v1/queues/hooks",
            Some(json!({"push": {"url": "http://example.com/hook"}})),
        )
        .await;
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .expect("as expected")
            .contains("--push-allow-http"),
        "{v}"
    );
    for bad in [
        json!({"url": "ftp://example.com/"}),
        json!({"url": "https://user:pw@example.com/"}),
        json!({"url": "https://example.com/", "timeout_ms": 5}),
        json!({"url": "https://example.com/", "secret": "short"}),
        json!({"url": "https://example.com/", "headers": {"Sluice-Queue": "x"}}),
        json!({"url": "https://example.com/", "method": "GET"}),
    ] {
        let (code, v) = s
            .call(Method::PUT, "/v1/queues/hooks", Some(json!({"push": bad})))
            .await;
        assert_eq!(code, 400, "{bad} → {v}");
    }
    s.put_queue(
        "hooks",
        json!({"push": {"url": "https://example.com/hook"}}),
    )
    .await;
    let v = s.put_queue("hooks", json!({"push": null})).await;
    assert_eq!(v["config"]["push"], Value::Null);
    s.shutdown().await;

    let s = common::start_with(ServerOptions {
        push_allow_http: true,
        ..ServerOptions::default()
    })
    .await;
    s.put_queue(
        "hooks",
        json!({"paused": true, "push": {"url": "http://example.com/hook"}}),
    )
    .await;
    s.shutdown().await;
}
