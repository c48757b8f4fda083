//! Trace context over HTTP: the W3C `traceparent`/`tracestate` headers and the `trace` field
//! of sends, carried to deliveries, browse and `GET /v1/messages/{id}`; an invalid header is
//! ignored as W3C Trace Context asks of a receiver, an invalid field is a 400.

mod common;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use common::{TestServer, assert_error, parse, start};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

/// POSTs `body` to the queue's messages with `headers` and the content type `content_type`.
async fn post(
    s: &TestServer,
    queue: &str,
    headers: &[(&str, &str)],
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let mut req = s
        .client
        .post(s.url(&format!("/v1/queues/{queue}/messages")))
        .header("content-type", content_type)
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    parse(req.send().await.expect("send")).await
}

async fn post_json(
    s: &TestServer,
    queue: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, Value) {
    post(
        s,
        queue,
        headers,
        "application/json",
        body.to_string().into_bytes(),
    )
    .await
}

/// Each delivery's body (as text) and its trace.
fn traces(ds: &[Value]) -> Vec<(String, Value)> {
    ds.iter()
        .map(|d| (d["body"].to_string(), d["trace"].clone()))
        .collect()
}

#[tokio::test]
async fn headers_and_fields_carry_trace_context_to_every_consumer() {
    let s = start().await;
    s.put_queue("t", json!({})).await;
    let state = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
    // Headers on a single JSON send, and on a raw one.
    let (st, v) = post_json(
        &s,
        "t",
        &[("traceparent", PARENT), ("tracestate", state)],
        json!({"body": 1}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let first = v["id"].as_str().expect("id").to_owned();
    let (st, _) = post(
        &s,
        "t",
        &[("traceparent", OTHER)],
        "text/plain",
        b"raw".to_vec(),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED);
    // A batch: per-message fields, the header for those without one.
    let (st, v) = post_json(
        &s,
        "t",
        &[("traceparent", PARENT)],
        json!({"messages": [
            {"body": 3, "trace": {"traceparent": OTHER}},
            {"body": 4},
        ]}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    // No context: none comes back. An invalid header is ignored, not refused; an invalid
    // tracestate beside a valid traceparent is dropped.
    s.send("t", json!(5)).await;
    let (st, _) = post_json(
        &s,
        "t",
        &[("traceparent", "00-garbage")],
        json!({"body": 6}),
    )
    .await;
    assert_eq!(
        st,
        StatusCode::CREATED,
        "an invalid header costs no message"
    );
    let (st, _) = post_json(
        &s,
        "t",
        &[("traceparent", OTHER), ("tracestate", "NOT VALID")],
        json!({"body": 7}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED);

    let ds = s.receive("t", json!({"max": 10})).await;
    let with_state = json!({"traceparent": PARENT, "tracestate": state});
    assert_eq!(
        traces(&ds),
        vec![
            ("1".to_owned(), with_state.clone()),
            ("\"raw\"".to_owned(), json!({"traceparent": OTHER})),
            ("3".to_owned(), json!({"traceparent": OTHER})),
            ("4".to_owned(), json!({"traceparent": PARENT})),
            ("5".to_owned(), Value::Null),
            ("6".to_owned(), Value::Null),
            ("7".to_owned(), json!({"traceparent": OTHER})),
        ]
    );
    assert!(
        ds[4].as_object().is_some_and(|o| !o.contains_key("trace")),
        "absent, not null, without context: {}",
        ds[4]
    );
    let (st, m) = s
        .call(Method::GET, &format!("/v1/messages/{first}"), None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(m["trace"], with_state);
    let (st, page) = s
        .call(Method::GET, "/v1/queues/t/messages?state=in_flight", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{page}");
    let browsed: Vec<&Value> = page["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["trace"] == with_state)
        .collect();
    assert_eq!(browsed.len(), 1, "browse shows the context: {page}");
    s.shutdown().await;
}

#[tokio::test]
async fn an_invalid_trace_field_is_refused_with_the_rule() {
    let s = start().await;
    s.put_queue("t", json!({})).await;
    for (trace, why) in [
        (json!({"traceparent": "00-abc"}), "too short"),
        (json!({"traceparent": PARENT.to_uppercase()}), "lowercase"),
        (
            json!({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}),
            "all zeros",
        ),
        (
            json!({"traceparent": PARENT, "tracestate": "no-equals"}),
            "key=value",
        ),
        (
            json!({"traceparent": PARENT, "baggage": "x"}),
            "unknown field",
        ),
    ] {
        let got = post_json(&s, "t", &[], json!({"body": 1, "trace": trace})).await;
        assert_error(&got, 400, "invalid_argument");
        assert!(got.1.to_string().contains(why), "{trace}: {}", got.1);
        let batch = post_json(
            &s,
            "t",
            &[],
            json!({"messages": [{"body": 1, "trace": trace}]}),
        )
        .await;
        assert_error(&batch, 400, "invalid_argument");
    }
    let beside = post_json(
        &s,
        "t",
        &[],
        json!({"messages": [{"body": 1}], "trace": {"traceparent": PARENT}}),
    )
    .await;
    assert_error(&beside, 400, "invalid_argument");
    assert_eq!(s.stats("t").await["visible"], 0, "nothing stored");
    s.shutdown().await;
}
