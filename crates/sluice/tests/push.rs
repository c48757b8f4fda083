//! Push delivery through the real `sluice serve`: a `kill -9` in the middle of pushing loses
//! nothing (the leases run out and the messages are pushed again), two nodes on one
//! PostgreSQL database push each message once, and push never calls the broker's own SQS
//! listener. The endpoints listen on loopback, which each broker here allows explicitly.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use sluice_testkit::postgres;

mod common;

use common::call;

/// The flags that let push call the tests' endpoints on 127.0.0.1.
const ALLOW: &[&str] = &["--push-allow", "127.0.0.1"];

/// A local endpoint that counts each message id it is called with, answering 204 after
/// `delay`.
#[derive(Clone)]
struct Endpoint {
    seen: Arc<Mutex<HashMap<String, u32>>>,
    delay: Duration,
}

impl Endpoint {
    async fn start(delay: Duration) -> (Self, String) {
        let me = Endpoint {
            seen: Arc::default(),
            delay,
        };
        let ep = me.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap| {
                let ep = ep.clone();
                async move {
                    tokio::time::sleep(ep.delay).await;
                    let id = headers
                        .get("sluice-message-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    *ep.seen.lock().expect("lock").entry(id).or_default() += 1;
                    StatusCode::NO_CONTENT
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", l.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(l, app).await });
        (me, url)
    }

    fn seen(&self) -> HashMap<String, u32> {
        self.seen.lock().expect("lock").clone()
    }
}

/// Sends `n` messages to `queue` in one batch and returns their ids.
async fn send(c: &reqwest::Client, url: &str, queue: &str, n: usize) -> Vec<String> {
    let msgs: Vec<Value> = (0..n).map(|i| json!({"body": {"n": i}})).collect();
    let v = call(
        c,
        reqwest::Method::POST,
        format!("{url}/v1/queues/{queue}/messages"),
        Some(json!({"messages": msgs})),
    )
    .await;
    v["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|i| i.as_str().expect("id").to_owned())
        .collect()
}

async fn settled(c: &reqwest::Client, url: &str, queue: &str) -> bool {
    let s = call(
        c,
        reqwest::Method::GET,
        format!("{url}/v1/queues/{queue}/stats"),
        None,
    )
    .await;
    s["visible"] == 0 && s["in_flight"] == 0 && s["delayed"] == 0
}

#[tokio::test]
async fn a_kill_9_mid_push_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let c = reqwest::Client::new();
    let (ep, hook) = Endpoint::start(Duration::from_millis(200)).await;
    let (mut first, url) = common::serve_and(&data, Stdio::null(), ALLOW);
    call(
        &c,
        reqwest::Method::PUT,
        format!("{url}/v1/queues/hooks"),
        Some(json!({"paused": true, "push": {"url": hook, "timeout_ms": 1000, "concurrency": 8}})),
    )
    .await;
    let ids = send(&c, &url, "hooks", 100).await;
    call(
        &c,
        reqwest::Method::PUT,
        format!("{url}/v1/queues/hooks"),
        Some(json!({"paused": false})),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while ep.seen().len() < 20 {
        assert!(Instant::now() < deadline, "pushing began");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    let before = ep.seen().len();
    assert!(before < 100, "killed in the middle: {before} pushed");

    let (_second, url) = common::serve_and(&data, Stdio::null(), ALLOW);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(ep.seen().len() == 100 && settled(&c, &url, "hooks").await) {
        assert!(
            Instant::now() < deadline,
            "every message pushed after the restart: {} of 100",
            ep.seen().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = ep.seen();
    let want: HashSet<&String> = ids.iter().collect();
    let got: HashSet<&String> = seen.keys().collect();
    assert_eq!(got, want, "every message pushed, none other");
    let twice = seen.values().filter(|n| **n > 1).count();
    assert!(
        twice <= 8,
        "only what was in flight at the kill is pushed again: {twice}"
    );
    let dlq = call(
        &c,
        reqwest::Method::GET,
        format!("{url}/v1/queues/hooks.dlq/stats"),
        None,
    )
    .await;
    assert_eq!(dlq["visible"], 0, "{dlq}");
}

#[tokio::test]
async fn two_nodes_on_one_database_push_each_message_once() {
    if !postgres::available().await {
        return;
    }
    let schema = postgres::unique_schema("push");
    let _drop = postgres::SchemaGuard::new(schema.clone());
    let store = format!("{}?schema={schema}", postgres::url());
    let (_a, url_a) = common::serve_store_and(&store, Stdio::null(), ALLOW);
    let (_b, url_b) = common::serve_store_and(&store, Stdio::null(), ALLOW);
    let c = reqwest::Client::new();
    let (ep, hook) = Endpoint::start(Duration::from_millis(2)).await;
    call(
        &c,
        reqwest::Method::PUT,
        format!("{url_a}/v1/queues/hooks"),
        Some(json!({"push": {"url": hook, "concurrency": 4}})),
    )
    .await;
    let ids = send(&c, &url_b, "hooks", 200).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(ep.seen().len() == 200 && settled(&c, &url_a, "hooks").await) {
        assert!(
            Instant::now() < deadline,
            "all pushed: {} of 200",
            ep.seen().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = ep.seen();
    assert_eq!(seen.len(), ids.len());
    assert!(seen.values().all(|n| *n == 1), "each message pushed once");
}

#[tokio::test]
async fn push_never_calls_the_brokers_own_sqs_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Loopback allowed as a whole: the broker's own listeners are refused all the same.
    let (_broker, url, sqs) = common::serve_with_sqs_and(
        &dir.path().join("data"),
        Stdio::null(),
        &["--push-allow", "127.0.0.0/8,::1,localhost"],
    );
    let c = reqwest::Client::new();
    call(
        &c,
        reqwest::Method::PUT,
        format!("{url}/v1/queues/billing2"),
        None,
    )
    .await;
    let sqs_port = sqs
        .rsplit(':')
        .next()
        .expect("a port")
        .trim_end_matches('/');
    for target in [
        format!("{sqs}/?Action=DeleteQueue&QueueUrl={sqs}/000000000000/billing2"),
        format!("http://localhost:{sqs_port}/"),
    ] {
        let resp = c
            .put(format!("{url}/v1/queues/orders-work"))
            .json(&json!({"push": {"url": target, "headers": {"X-Amz-Target": "AmazonSQS.PurgeQueue"}}}))
            .send()
            .await
            .expect("an answer");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{target}");
        let v: Value = resp.json().await.expect("JSON");
        let m = v["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("own sqs listener"), "{target}: {m}");
    }
    let q = call(
        &c,
        reqwest::Method::GET,
        format!("{url}/v1/queues/billing2"),
        None,
    )
    .await;
    assert_eq!(q["name"], "billing2", "not deleted: {q}");
}
