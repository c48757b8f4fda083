//! The audit log over HTTP: every operator action of this test is recorded with the
//! key that did it, next to the broker's own dead-letter events.

mod common;

use reqwest::Method;
use serde_json::{Value, json};
use sluice_server::auth::hash_secret;
use sluice_server::{ApiKeyConfig, KeyRing, Role, ServerOptions};

const OPS: &str = "ops_secret_for_the_audit_test";
const WORKER: &str = "worker_secret_for_the_audit_test";

#[tokio::test]
async fn every_operator_action_is_in_the_audit_log() {
    let keys = KeyRing::new(vec![
        ApiKeyConfig {
            name: "ops".into(),
            role: Role::Operator,
            queues: vec!["*".into()],
            sha256: hash_secret(OPS),
        },
        ApiKeyConfig {
            name: "worker".into(),
            role: Role::Consumer,
            queues: vec!["*".into()],
            sha256: hash_secret(WORKER),
        },
    ])
    .expect("keys");
    let s = common::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    let ops = |m: Method, path: &str, body: Option<Value>| {
        let path = path.to_string();
        let s = &s;
        async move {
            let (code, v) = s.call_as(Some(OPS), m, &path, body).await;
            assert!(code.is_success(), "{path}: {code} {v}");
            v
        }
    };
    ops(
        Method::PUT,
        "/v1/queues/jobs",
        Some(json!({ "max_receive_count": 3 })),
    )
    .await;
    ops(
        Method::PUT,
        "/v1/queues/jobs",
        Some(json!({ "visibility_timeout_ms": 60000 })),
    )
    .await;
    ops(Method::POST, "/v1/queues/jobs/pause", None).await;
    ops(Method::POST, "/v1/queues/jobs/resume", None).await;
    // A message to delete and one dead-lettered by a consumer.
    s.store
        .send(
            &sluice_core::QueueName::new("jobs").unwrap(),
            vec![
                sluice_core::NewMessage::new(sluice_core::Body::json("1")),
                sluice_core::NewMessage::new(sluice_core::Body::json("2")),
            ],
        )
        .await
        .expect("send");
    let (_, got) = s
        .call_as(
            Some(WORKER),
            Method::POST,
            "/v1/queues/jobs/receive",
            Some(json!({ "max": 1 })),
        )
        .await;
    let d = &got["messages"][0];
    s.call_as(
        Some(WORKER),
        Method::POST,
        "/v1/queues/jobs/reject",
        Some(json!({ "receipt": d["receipt"], "error": "bad payload" })),
    )
    .await;
    let browse = ops(Method::GET, "/v1/queues/jobs/messages?state=visible", None).await;
    let victim = browse["messages"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    ops(Method::DELETE, &format!("/v1/messages/{victim}"), None).await;
    let job = ops(
        Method::POST,
        "/v1/redrives",
        Some(json!({ "source": "jobs.dlq", "rate_per_second": 1 })),
    )
    .await;
    ops(
        Method::POST,
        &format!(
            "/v1/redrives/{}/cancel",
            job["id"].as_str().expect("job id")
        ),
        None,
    )
    .await;
    ops(Method::POST, "/v1/queues/jobs/purge", None).await;

    let log = ops(Method::GET, "/v1/audit?queue=jobs", None).await;
    let entries = log["entries"].as_array().expect("entries");
    let actions: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap_or(""),
                e["action"].as_str().unwrap_or(""),
            )
        })
        .collect();
    for expected in [
        ("ops", "queue.create"),
        ("ops", "queue.update"),
        ("ops", "queue.pause"),
        ("ops", "queue.resume"),
        ("ops", "message.delete"),
        ("ops", "queue.purge"),
        ("sluice", "message.dead_lettered"),
    ] {
        assert!(
            actions.contains(&expected),
            "{expected:?} missing from {actions:?}"
        );
    }
    let dlq_log = ops(Method::GET, "/v1/audit?queue=jobs.dlq", None).await;
    let dlq_actions: Vec<&str> = dlq_log["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(
        dlq_actions.contains(&"redrive.create") && dlq_actions.contains(&"redrive.cancel"),
        "{dlq_actions:?}"
    );
    let dead = entries
        .iter()
        .find(|e| e["action"] == "message.dead_lettered")
        .expect("dead letter");
    assert_eq!(dead["details"]["reason"], "rejected");
    assert_eq!(dead["details"]["last_error"], "bad payload");
    let refused = s
        .call_as(Some(WORKER), Method::GET, "/v1/audit", None)
        .await;
    common::assert_error(&refused, 403, "permission_denied");
}
