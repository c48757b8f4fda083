//! The origin guard of the HTTP API on a keyless broker, as a browser's requests reach it:
//! hosts other than loopback names and the name it listens on are refused, reads included
//! (DNS rebinding); writes that the browser marks as coming from another origin, or whose
//! `Referer` names one, are refused; reads from other sites (a link to the console) pass.

mod common;

use reqwest::{Method, StatusCode};
use serde_json::json;
use sluice_server::ServerOptions;

/// Sends `method path` with `headers` and returns the status and JSON answer.
async fn send(
    s: &common::TestServer,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, serde_json::Value) {
    let mut req = s.client.request(method, s.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    common::parse(req.send().await.expect("request")).await
}

async fn paused(s: &common::TestServer) -> bool {
    let (_, q) = s.call(Method::GET, "/v1/queues/payments", None).await;
    q["config"]["paused"].as_bool().expect("paused")
}

#[tokio::test]
async fn a_keyless_broker_answers_its_own_names_and_refuses_other_origins_writes() {
    let s = common::start_with(ServerOptions {
        hosts: vec!["broker.internal:7878".to_owned()],
        ..ServerOptions::default()
    })
    .await;
    s.put_queue("payments", json!({})).await;
    let port = s.base.rsplit(':').next().expect("a port").to_owned();

    let evil = format!("evil.example:{port}");
    let got = send(&s, Method::GET, "/v1/queues", &[("host", &evil)]).await;
    common::assert_error(&got, 403, "permission_denied");
    let message = got.1["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("evil.example") && message.contains("[[keys]]"),
        "{message}"
    );
    for host in [
        format!("broker.internal:{port}"),
        format!("localhost:{port}"),
    ] {
        let got = send(&s, Method::GET, "/v1/queues", &[("host", &host)]).await;
        assert_eq!(got.0, StatusCode::OK, "{host}: {}", got.1);
    }

    // Another port of the same host is another origin, which the browser calls same-site;
    // a page that sends no Origin still names itself in Referer.
    let other = "http://127.0.0.1:1";
    for headers in [
        &[("sec-fetch-site", "same-site")][..],
        &[("sec-fetch-site", "cross-site")][..],
        &[("referer", other)][..],
        &[("origin", other)][..],
    ] {
        let got = send(&s, Method::POST, "/v1/queues/payments/pause", headers).await;
        common::assert_error(&got, 403, "permission_denied");
    }
    assert!(!paused(&s).await, "no refused write was carried out");

    // A link from another site still opens a page; the console's own writes go through.
    let got = send(
        &s,
        Method::GET,
        "/v1/queues/payments",
        &[("sec-fetch-site", "cross-site"), ("referer", other)],
    )
    .await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.1);
    let own = s.base.clone();
    let got = send(
        &s,
        Method::POST,
        "/v1/queues/payments/pause",
        &[
            ("sec-fetch-site", "same-origin"),
            ("origin", &own),
            ("referer", &format!("{own}/#/queues/payments")),
        ],
    )
    .await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.1);
    assert!(paused(&s).await);
    s.shutdown().await;
}
