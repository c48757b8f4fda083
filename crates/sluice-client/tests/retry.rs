//! Retries against a stub broker that fails on purpose, and against no broker at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use sluice_client::{Client, Error, ErrorCode, OutgoingMessage, RetryPolicy, SendOptions};

#[derive(Clone, Default)]
struct Stub {
    calls: Arc<AtomicUsize>,
    keys: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

const UNAVAILABLE: &str =
    r#"{"error":{"code":"unavailable","message":"storage unavailable: disk full"}}"#;

/// Fails the first `fail` calls with `status` (and `Retry-After` when given), then answers
/// like the broker would.
async fn stub(fail: usize, status: u16, retry_after: Option<&'static str>) -> (String, Stub) {
    let st = Stub::default();
    let s = st.clone();
    let handler = move |headers: HeaderMap| {
        let s = s.clone();
        async move {
            let n = s.calls.fetch_add(1, Ordering::SeqCst);
            s.keys.lock().expect("lock").push(
                headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
            );
            let json = [("content-type", "application/json")];
            if n < fail {
                let mut resp = (
                    StatusCode::from_u16(status).expect("status"),
                    json,
                    UNAVAILABLE.to_owned(),
                )
                    .into_response();
                if let Some(ra) = retry_after {
                    resp.headers_mut()
                        .insert("retry-after", ra.parse().expect("header"));
                }
                return resp;
            }
            (
                StatusCode::CREATED,
                json,
                r#"{"id":"0000000000000001","duplicate":false}"#.to_owned(),
            )
                .into_response()
        }
    };
    let app = Router::new()
        .route("/v1/queues/{q}/messages", any(handler.clone()))
        .route(
            "/v1/queues/{q}/stats",
            get(move |h: HeaderMap| {
                let f = handler.clone();
                async move {
                    let failed = f(h).await;
                    if failed.status() != StatusCode::CREATED {
                        return failed;
                    }
                    // Stats answers with its own shape once the failures are over.
                    (
                        [("content-type", "application/json")],
                        r#"{"queue":"q","visible":1,"delayed":0,"in_flight":0,"dead_letter_depth":0,"oldest_visible_age_ms":0,"completed":0,"totals":{"sent":1,"received":0,"acked":0,"nacked":0,"dead_lettered":0,"redriven":0,"expired":0}}"#,
                    )
                        .into_response()
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), st)
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        max_retry_after: Duration::from_secs(2),
    }
}

fn client(base: &str) -> Client {
    Client::builder(base)
        .retry(policy())
        .build()
        .expect("client")
}

#[tokio::test]
async fn a_send_with_an_idempotency_key_is_retried_through_503s() {
    let (base, st) = stub(2, 503, None).await;
    let c = client(&base);
    let out = c
        .send_with(
            "q",
            OutgoingMessage::json(&1).unwrap(),
            &SendOptions::idempotent(),
        )
        .await
        .unwrap();
    assert_eq!(out.id, "0000000000000001");
    assert_eq!(st.calls.load(Ordering::SeqCst), 3);
    let keys = st.keys.lock().unwrap().clone();
    assert!(keys[0].is_some(), "the key is sent");
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "one key per logical call: {keys:?}"
    );
}

#[tokio::test]
async fn a_send_without_a_key_or_dedup_id_is_not_retried() {
    let (base, st) = stub(2, 503, None).await;
    let c = client(&base);
    let err = c.send_json("q", &1).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Unavailable));
    assert_eq!(err.status(), Some(503));
    assert!(err.to_string().contains("disk full"), "{err}");
    assert_eq!(st.calls.load(Ordering::SeqCst), 1);
    assert_eq!(st.keys.lock().unwrap()[0], None);

    // With a dedup id the same send is safe, and retried.
    let out = c
        .send("q", OutgoingMessage::json(&1).unwrap().dedup_id("d1"))
        .await
        .unwrap();
    assert_eq!(out.id, "0000000000000001");
    assert_eq!(st.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn idempotent_sends_generate_a_key_per_call() {
    let (base, st) = stub(1, 503, None).await;
    let c = Client::builder(&base)
        .retry(policy())
        .idempotent_sends(true)
        .build()
        .unwrap();
    c.send_json("q", &1).await.unwrap();
    c.send_json("q", &2).await.unwrap();
    let keys = st.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[0], keys[1], "the retry reuses its call's key");
    assert_ne!(keys[1], keys[2], "each call has its own key");
}

#[tokio::test]
async fn reads_are_retried_and_retry_after_is_honoured() {
    let (base, st) = stub(1, 429, Some("1")).await;
    let c = client(&base);
    let start = Instant::now();
    let s = c.stats("q").await.unwrap();
    assert_eq!(s.visible, 1);
    assert_eq!(st.calls.load(Ordering::SeqCst), 2);
    assert!(
        start.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        start.elapsed()
    );

    // A Retry-After beyond the policy's cap returns the error at once.
    let (base, st) = stub(5, 503, Some("60")).await;
    let err = client(&base).stats("q").await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(60)));
    assert_eq!(st.calls.load(Ordering::SeqCst), 1);

    // Retries stop after max_attempts.
    let (base, st) = stub(10, 503, None).await;
    let err = client(&base).stats("q").await.unwrap_err();
    assert!(err.is_transient());
    assert_eq!(st.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error_after_retries() {
    // Bind and drop: nothing listens on this port now.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = client(&format!("http://127.0.0.1:{port}"));
    let err = c.send_json("q", &1).await.unwrap_err();
    assert!(matches!(err, Error::Transport(_)), "{err:?}");
    assert!(err.is_connect());
    assert_eq!(err.code(), None);
    let text = err.to_string();
    assert!(text.contains("could not connect"), "{text}");
    assert!(text.contains(&port.to_string()), "{text}");
}

#[tokio::test]
async fn a_stopped_then_started_broker_is_reached_by_retries() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = Client::builder(format!("http://127.0.0.1:{port}"))
        .retry(RetryPolicy {
            max_attempts: 20,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(50),
            max_retry_after: Duration::from_secs(1),
        })
        .build()
        .unwrap();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let app = Router::new().route(
            "/healthz",
            get(|| async { ([("content-type", "application/json")], r#"{"status":"ok"}"#) }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        axum::serve(listener, app).await
    });
    assert_eq!(c.healthz().await.unwrap().status, "ok");
    late.abort();
}

#[tokio::test]
async fn bad_base_urls_are_refused() {
    assert!(matches!(
        Client::new("127.0.0.1:7878"),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        Client::new("ftp://host"),
        Err(Error::InvalidInput(_))
    ));
    assert!(Client::new("http://127.0.0.1:7878/").is_ok());
}
