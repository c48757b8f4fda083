//! Push delivery against a real HTTP endpoint started by the test: acks, Retry-After,
//! backoff, dead-lettering, timeouts, signatures, rate limits and the target rules (which
//! addresses push may call, and what a target shows and keeps).
//!
//! The endpoints listen on loopback, which push calls only when `push_allow` lists it: each
//! broker here allows exactly what its test pushes to.

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
    uri: axum::http::Uri,
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
            axum::routing::post(
                move |uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
                    let me = me.clone();
                    async move { me.answer(uri, headers, body).await }
                },
            ),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", l.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(l, app).await });
        url
    }

    async fn answer(
        &self,
        uri: axum::http::Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> axum::response::Response {
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let seen = {
            let mut calls = self.calls.lock().expect("lock");
            calls.push(Call {
                at: Instant::now(),
                uri,
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

/// Options of a broker whose push may call these networks or host names.
fn allowing(entries: &[&str]) -> ServerOptions {
    ServerOptions {
        push_allow: entries
            .iter()
            .map(|e| e.parse().expect("a push_allow entry"))
            .collect(),
        ..ServerOptions::default()
    }
}

/// A broker whose push may call the test's endpoints on 127.0.0.1.
async fn start() -> common::TestServer {
    common::start_with(allowing(&["127.0.0.1"])).await
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
    let s = start().await;
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
        sluice_server::jobs::push::signature::verify(SECRET.as_bytes(), &sig, &c.body, now, 300),
        "the signature verifies: {sig}"
    );
    assert!(!sluice_server::jobs::push::signature::verify(
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
    let s = start().await;
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
    let s = start().await;
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

/// Sets `queue`'s configuration in the store directly, past the checks `PUT` makes: a target
/// that passed them when it was set and resolves elsewhere now (a name re-pointed, DNS
/// rebinding) is what push meets at connect time.
async fn store_config(s: &common::TestServer, queue: &str, config: Value) {
    let req: sluice_wire::QueueConfigRequest =
        serde_json::from_value(config).expect("a queue configuration");
    let patch = req.to_patch().expect("a valid change");
    let name = sluice_core::QueueName::new(queue).expect("a queue name");
    s.store.put_queue(&name, &patch).await.expect("stored");
}

/// The `last_error` of message `id` once it is dead-lettered into `dlq`.
async fn dead_lettered(s: &common::TestServer, id: &str, dlq: &str) -> String {
    until("the message to be dead-lettered", async || {
        message(s, id).await["queue"] == dlq
    })
    .await;
    message(s, id).await["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn refused(s: &common::TestServer, queue: &str, url: &str) -> String {
    let got = s
        .call(
            Method::PUT,
            &format!("/v1/queues/{queue}"),
            Some(json!({"push": {"url": url}})),
        )
        .await;
    common::assert_error(&got, 400, "invalid_argument");
    got.1["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn push_never_calls_the_brokers_own_listeners_even_when_allowed() {
    let s = common::start_with(allowing(&["127.0.0.0/8", "::1", "localhost"])).await;
    s.put_queue("billing", json!({})).await;
    s.send("billing", json!({"invoice": 1})).await;
    let port = s.base.rsplit(':').next().expect("a port").to_owned();
    let purge = format!("{}/v1/queues/billing/purge", s.base);
    for (url, listener) in [
        (purge.clone(), "own http listener"),
        (
            format!("http://localhost:{port}/v1/queues/billing/purge"),
            "own http listener",
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/v1/queues/billing/purge"),
            "own http listener",
        ),
        (
            format!("http://{}/", s.broker_frames()),
            "own frames listener",
        ),
    ] {
        let e = refused(&s, "orders-work", &url).await;
        assert!(e.contains(listener), "{url}: {e}");
    }

    // Set past those checks, it is refused on connecting: nothing reaches the listener.
    store_config(
        &s,
        "orders-work",
        json!({"max_receive_count": 1, "push": {
            "url": format!("http://localhost:{port}/v1/queues/billing/purge")}}),
    )
    .await;
    let id = s.send("orders-work", json!({"order": 1})).await;
    let e = dead_lettered(&s, &id, "orders-work.dlq").await;
    assert!(e.contains("own http listener"), "{e}");
    assert_eq!(
        s.stats("billing").await["visible"],
        1,
        "billing was not purged"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn targets_that_are_not_public_are_refused_unless_push_allow_lists_them() {
    let ep = Endpoint::default();
    let url = ep.start().await;
    let s = common::start().await;
    let e = refused(&s, "hooks", &url).await;
    for says in [
        "127.0.0.1",
        "loopback",
        "push_allow",
        "--push-allow 127.0.0.1/32",
    ] {
        assert!(e.contains(says), "the error says {says}: {e}");
    }
    for (bad, kind) in [
        ("https://10.1.2.3/hook", "private"),
        ("https://192.168.0.1/hook", "private"),
        ("https://[fd00::1]/hook", "unique local"),
        ("https://169.254.169.254/latest/meta-data", "cloud metadata"),
        ("https://[fe80::1]/hook", "link-local"),
        ("https://[::ffff:127.0.0.1]/hook", "loopback"),
        ("https://0.0.0.0/hook", "unspecified"),
        ("https://224.0.0.1/hook", "multicast"),
        ("https://localhost/hook", "loopback"),
    ] {
        let e = refused(&s, "hooks", bad).await;
        assert!(e.contains(kind), "{bad}: {e}");
    }
    s.shutdown().await;

    // Listed by address, or by the name the URL uses, it is pushed to.
    for (entry, host) in [("127.0.0.1/32", "127.0.0.1"), ("localhost", "localhost")] {
        let s = common::start_with(allowing(&[entry])).await;
        let url = url.replace("127.0.0.1", host);
        s.put_queue("hooks", json!({"push": {"url": url}})).await;
        let body = json!({"answer": "ok", "entry": entry});
        let id = s.send("hooks", body.clone()).await;
        until("the message to be pushed", async || {
            message(&s, &id).await["state"] == "completed"
        })
        .await;
        assert_eq!(ep.calls_with(&body).len(), 1, "{entry}");
        s.shutdown().await;
    }
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused_when_connecting() {
    let ep = Endpoint::default();
    let url = ep.start().await.replace("127.0.0.1", "localhost");
    let s = common::start().await;
    store_config(
        &s,
        "hooks",
        json!({"max_receive_count": 1, "push": {"url": url}}),
    )
    .await;
    let id = s.send("hooks", json!({"answer": "ok"})).await;
    let e = dead_lettered(&s, &id, "hooks.dlq").await;
    assert!(
        e.contains("localhost resolves to an address that is refused"),
        "{e}"
    );
    assert!(e.contains("loopback"), "{e}");
    assert_eq!(ep.count(), 0, "nothing reached the endpoint");
    s.shutdown().await;
}

#[tokio::test]
async fn a_redirect_is_an_answer_never_followed() {
    let s = start().await;
    s.put_queue("billing", json!({})).await;
    s.send("billing", json!({"invoice": 1})).await;
    // An allowed endpoint that sends the push on to the broker's own purge.
    let purge = format!("{}/v1/queues/billing/purge", s.base);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let purge = purge.clone();
            async move { (StatusCode::TEMPORARY_REDIRECT, [("Location", purge)]) }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", l.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(l, app).await });
    s.put_queue(
        "hooks",
        json!({"max_receive_count": 1, "push": {"url": url}}),
    )
    .await;
    let id = s.send("hooks", json!({"order": 1})).await;
    let e = dead_lettered(&s, &id, "hooks.dlq").await;
    assert!(e.contains("307"), "{e}");
    assert_eq!(
        s.stats("billing").await["visible"],
        1,
        "billing was not purged"
    );
    s.shutdown().await;
}

const ADMIN: &str = "sluice_admin_secret";
const OPERATOR: &str = "sluice_operator_secret";
const CONSUMER: &str = "sluice_consumer_secret";

/// A broker with an admin, an operator and a consumer key for `hooks*`, whose push may call
/// 127.0.0.1.
async fn start_with_keys() -> common::TestServer {
    use sluice_server::auth::hash_secret;
    use sluice_server::{ApiKeyConfig, KeyRing, Role};
    let key = |name: &str, role, secret: &str| ApiKeyConfig {
        name: name.to_owned(),
        role,
        queues: vec!["hooks*".to_owned()],
        sha256: hash_secret(secret),
    };
    let keys = KeyRing::new(vec![
        key("admin", Role::Admin, ADMIN),
        key("ops", Role::Operator, OPERATOR),
        key("worker", Role::Consumer, CONSUMER),
    ])
    .expect("keys");
    common::start_with(ServerOptions {
        keys,
        ..allowing(&["127.0.0.1"])
    })
    .await
}

async fn put_as(s: &common::TestServer, token: &str, queue: &str, config: Value) -> Value {
    let (code, v) = s
        .call_as(
            Some(token),
            Method::PUT,
            &format!("/v1/queues/{queue}"),
            Some(config),
        )
        .await;
    assert!(code.is_success(), "PUT {queue}: {code} {v}");
    v
}

async fn pushed(s: &common::TestServer, ep: &Endpoint, queue: &str, body: &Value) -> Call {
    let (code, v) = s
        .call_as(
            Some(ADMIN),
            Method::POST,
            &format!("/v1/queues/{queue}/messages"),
            Some(json!({ "body": body })),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    until("the message to be pushed", async || {
        !ep.calls_with(body).is_empty()
    })
    .await;
    ep.calls_with(body)[0].clone()
}

#[tokio::test]
async fn a_new_origin_gets_none_of_the_hidden_credentials() {
    let s = start_with_keys().await;
    let (first, second) = (Endpoint::default(), Endpoint::default());
    let (a, b) = (first.start().await, second.start().await);
    // Paused until re-pointed, so only the new target is ever pushed to.
    put_as(
        &s,
        ADMIN,
        "hooks",
        json!({"paused": true, "push": {"url": a, "secret": SECRET,
                                         "headers": {"Authorization": "Bearer t0k"}}}),
    )
    .await;
    // The operator re-points the queue with the header as views show it and no secret:
    // neither comes along.
    let v = put_as(
        &s,
        OPERATOR,
        "hooks",
        json!({"push": {"url": b, "headers": {"Authorization": "(redacted)"}}}),
    )
    .await;
    assert_eq!(v["config"]["push"]["signed"], false, "{v}");
    assert_eq!(v["config"]["push"]["headers"], json!({}), "{v}");
    put_as(&s, OPERATOR, "hooks", json!({"paused": false})).await;
    let call = pushed(&s, &second, "hooks", &json!({"answer": "ok", "n": 1})).await;
    assert!(call.headers.get("authorization").is_none(), "{call:?}");
    assert!(call.headers.get("sluice-signature").is_none(), "{call:?}");
    assert_eq!(first.count(), 0);

    // Given again in the same change, they are the new target's.
    let v = put_as(
        &s,
        ADMIN,
        "hooks",
        json!({"push": {"url": b, "secret": SECRET, "headers": {"Authorization": "Bearer b"}}}),
    )
    .await;
    assert_eq!(v["config"]["push"]["signed"], true, "{v}");
    assert_eq!(
        v["config"]["push"]["headers"]["Authorization"],
        "(redacted)"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_query_token_is_delivered_and_never_shown() {
    let s = start_with_keys().await;
    let ep = Endpoint::default();
    let url = format!("{}?token=s3cret-query-value", ep.start().await);
    let v = put_as(&s, ADMIN, "hooks", json!({"push": {"url": url}})).await;
    let shown = v["config"]["push"]["url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(shown.ends_with("/hook?token=(redacted)"), "{v}");
    for (token, path) in [
        (CONSUMER, "/v1/queues/hooks"),
        (CONSUMER, "/v1/queues"),
        (OPERATOR, "/v1/queues/hooks"),
        (ADMIN, "/v1/audit"),
    ] {
        let (code, v) = s.call_as(Some(token), Method::GET, path, None).await;
        assert_eq!(code, 200, "{path}: {v}");
        assert!(!v.to_string().contains("s3cret"), "{path} shows it: {v}");
    }

    // Written back as read, the configuration keeps the real URL.
    let (_, q) = s
        .call_as(Some(OPERATOR), Method::GET, "/v1/queues/hooks", None)
        .await;
    put_as(&s, OPERATOR, "hooks", q["config"].clone()).await;
    let call = pushed(&s, &ep, "hooks", &json!({"answer": "ok"})).await;
    assert_eq!(call.uri.query(), Some("token=s3cret-query-value"));
    // The placeholder anywhere else is not a value to push with.
    let other = shown.replace("/hook?", "/other?");
    let got = s
        .call_as(
            Some(OPERATOR),
            Method::PUT,
            "/v1/queues/hooks",
            Some(json!({"push": {"url": other}})),
        )
        .await;
    common::assert_error(&got, 400, "invalid_argument");
    s.shutdown().await;
}
