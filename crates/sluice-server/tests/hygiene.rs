//! The API's edges: routing errors with their own codes.

mod common;

use common::{assert_error, start};
use reqwest::{Method, StatusCode};
use serde_json::Value;

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
