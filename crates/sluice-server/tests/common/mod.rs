//! A real broker on an ephemeral loopback port over an embedded store in a temp dir, and a
//! small JSON client for it.
#![allow(dead_code)]

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_server::ServerOptions;
use sluice_testkit::InProcessBroker;

pub struct TestServer {
    pub base: String,
    /// The store behind the broker, for tests that set up history or inspect directly.
    pub store: Arc<dyn sluice_core::Store>,
    pub client: reqwest::Client,
    broker: InProcessBroker,
}

pub async fn start() -> TestServer {
    start_with(ServerOptions::default()).await
}

pub async fn start_with(options: ServerOptions) -> TestServer {
    let broker = InProcessBroker::start_with(options).await;
    TestServer {
        base: broker.url.clone(),
        store: broker.store(),
        client: reqwest::Client::new(),
        broker,
    }
}

impl TestServer {
    /// The address of the broker's frame-protocol listener.
    pub fn broker_frames(&self) -> std::net::SocketAddr {
        self.broker.frames
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends `body` as JSON (or nothing) and returns the status and the parsed JSON answer
    /// (`Value::Null` for an empty answer).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call_as(None, method, path, body).await
    }

    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.client.request(method, self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        parse(resp).await
    }

    pub async fn put_queue(&self, name: &str, config: Value) -> Value {
        let (s, v) = self
            .call(Method::PUT, &format!("/v1/queues/{name}"), Some(config))
            .await;
        assert!(s.is_success(), "PUT {name}: {s} {v}");
        v
    }

    pub async fn send(&self, queue: &str, body: Value) -> String {
        let (s, v) = self
            .call(
                Method::POST,
                &format!("/v1/queues/{queue}/messages"),
                Some(json!({ "body": body })),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "send: {v}");
        v["id"].as_str().expect("id").to_owned()
    }

    pub async fn receive(&self, queue: &str, req: Value) -> Vec<Value> {
        let (s, v) = self
            .call(
                Method::POST,
                &format!("/v1/queues/{queue}/receive"),
                Some(req),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "receive: {v}");
        v["messages"].as_array().expect("messages").clone()
    }

    pub async fn stats(&self, queue: &str) -> Value {
        let (s, v) = self
            .call(Method::GET, &format!("/v1/queues/{queue}/stats"), None)
            .await;
        assert_eq!(s, StatusCode::OK, "stats: {v}");
        v
    }

    /// Stops the server gracefully and waits for it.
    pub async fn shutdown(self) {
        let TestServer { store, broker, .. } = self;
        drop(store);
        broker.shutdown().await;
    }
}

/// A consumer of `queue` running until aborted: it receives up to 10 at a time and settles
/// each delivery with `settle` (`"ack"`, `"nack"`, …) and the body `body` gives for it.
pub fn consumer(
    s: &TestServer,
    queue: &str,
    settle: &'static str,
    body: impl Fn(&Value) -> Value + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let client = s.client.clone();
    let base = format!("{}/v1/queues/{queue}", s.base);
    tokio::spawn(async move {
        loop {
            for m in receive_raw(&client, &base, json!({"max": 10, "wait_ms": 200})).await {
                client
                    .post(format!("{base}/{settle}"))
                    .json(&body(&m))
                    .send()
                    .await
                    .expect("settle");
            }
        }
    })
}

/// One receive from the queue at `base` (`…/v1/queues/{q}`) with a client of its own.
pub async fn receive_raw(client: &reqwest::Client, base: &str, req: Value) -> Vec<Value> {
    let r: Value = client
        .post(format!("{base}/receive"))
        .json(&req)
        .send()
        .await
        .expect("receive")
        .json()
        .await
        .expect("json");
    r["messages"].as_array().expect("messages").clone()
}

pub async fn parse(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let bytes = resp.bytes().await.expect("body");
    if bytes.is_empty() {
        return (status, Value::Null);
    }
    assert!(
        is_json,
        "{status}: answer is not JSON: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    (status, serde_json::from_slice(&bytes).expect("JSON answer"))
}

/// Asserts that an error message a person reads has no Rust debug formatting in it: names
/// print as they are (in plain quotes), never as `QueueName("jobs")` or `Some(..)`.
pub fn assert_plain_message(message: &str) {
    for bad in ["(\"", "Some(", "\\\""] {
        assert!(
            !message.contains(bad),
            "debug formatting ({bad}) in an error message: {message}"
        );
    }
}

/// Asserts an error answer: status, envelope and code, and a message without debug
/// formatting.
pub fn assert_error(got: &(StatusCode, Value), status: u16, code: &str) {
    if let Some(m) = got.1["error"]["message"].as_str() {
        assert_plain_message(m);
    }
    assert_eq!(
        got.0.as_u16(),
        status,
        "expected {status} {code}, got {} {}",
        got.0,
        got.1
    );
    assert_eq!(got.1["error"]["code"], code, "wrong code in {}", got.1);
    assert!(
        got.1["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "no message in {}",
        got.1
    );
}
