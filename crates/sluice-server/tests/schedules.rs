//! Schedules over HTTP against a real broker: the API, and real firings on the wall clock.

mod common;

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn a_schedule_is_created_read_paused_triggered_and_deleted() {
    let s = common::start().await;
    s.put_queue("sweeps", json!({})).await;
    let put = json!({"cron": "30 2 * * *", "timezone": "Europe/Berlin", "queue": "sweeps",
                     "body": {"task": "expire"}, "attributes": {"team": "enrol"}, "catch_up": "one"});
    let (code, v) = s
        .call(Method::PUT, "/v1/schedules/nightly", Some(put.clone()))
        .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["cron"], "30 2 * * *");
    assert_eq!(v["timezone"], "Europe/Berlin");
    assert_eq!(v["catch_up"], "one");
    assert_eq!(v["fired"], 0);
    let next = v["next"].as_array().expect("next firings");
    assert_eq!(next.len(), 5, "{v}");
    for t in next {
        let t = t.as_str().expect("a time");
        assert!(
            t.ends_with("T00:30:00Z") || t.ends_with("T01:30:00Z"),
            "02:30 in Berlin is 00:30 or 01:30 UTC: {t}"
        );
    }
    let (code, _) = s
        .call(Method::PUT, "/v1/schedules/nightly", Some(put))
        .await;
    assert_eq!(code, 200, "a second put replaces");

    let (code, v) = s.call(Method::GET, "/v1/schedules", None).await;
    assert_eq!(code, 200);
    assert_eq!(v["schedules"][0]["name"], "nightly");

    let (code, v) = s
        .call(Method::POST, "/v1/schedules/nightly/pause", None)
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["paused"], true);
    assert_eq!(v["next"], json!([]), "a paused schedule has no next firing");
    let (_, v) = s
        .call(Method::POST, "/v1/schedules/nightly/resume", None)
        .await;
    assert_eq!(v["paused"], false);

    // Triggered by hand: one message now, with the schedule's attributes.
    let (code, v) = s
        .call(Method::POST, "/v1/schedules/nightly/trigger", None)
        .await;
    assert_eq!(code, 200, "{v}");
    let got = s.receive("sweeps", json!({"max": 10})).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["id"], v["id"]);
    assert_eq!(got[0]["body"], json!({"task": "expire"}));
    assert_eq!(got[0]["attributes"]["schedule"], "nightly");
    assert_eq!(got[0]["attributes"]["team"], "enrol");
    assert_eq!(got[0]["attributes"]["scheduled_for"], v["scheduled_for"]);

    let (code, _) = s.call(Method::DELETE, "/v1/schedules/nightly", None).await;
    assert_eq!(code, 204);
    let (code, v) = s.call(Method::GET, "/v1/schedules/nightly", None).await;
    assert_eq!(code, 404, "{v}");
    assert_eq!(v["error"]["code"], "not_found");
    s.shutdown().await;
}

#[tokio::test]
async fn bad_schedules_are_refused_with_what_to_write() {
    let s = common::start().await;
    s.put_queue("q", json!({})).await;
    for (body, says) in [
        (
            json!({"cron": "every day", "queue": "q", "body": 1}),
            "*/5 * * * *",
        ),
        (
            json!({"cron": "0 9 * * *", "timezone": "Mars/Olympus", "queue": "q", "body": 1}),
            "IANA",
        ),
        (json!({"every_ms": 10, "queue": "q", "body": 1}), "every_ms"),
        (
            json!({"cron": "* * * * *", "every_ms": 60000, "queue": "q", "body": 1}),
            "not both",
        ),
        (json!({"queue": "q", "body": 1}), "missing trigger"),
        (json!({"every_ms": 60000, "queue": "q"}), "missing body"),
        (
            json!({"every_ms": 60000, "queue": "q", "body": 1, "attributes": {"schedule": "x"}}),
            "schedule",
        ),
    ] {
        let (code, v) = s
            .call(Method::PUT, "/v1/schedules/x", Some(body.clone()))
            .await;
        assert_eq!(code, 400, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{body}: {msg}");
    }
    let (code, v) = s
        .call(
            Method::PUT,
            "/v1/schedules/x",
            Some(json!({"every_ms": 60000, "queue": "nope", "body": 1})),
        )
        .await;
    assert_eq!(
        (code.as_u16(), v["error"]["code"].as_str()),
        (404, Some("queue_not_found"))
    );
    let (code, _) = s.call(Method::GET, "/v1/schedules/a..b%20c", None).await;
    assert_eq!(code, 400, "a name a schedule cannot have");
    s.shutdown().await;
}

#[tokio::test]
async fn an_interval_of_one_second_fires_once_a_second() {
    let s = common::start().await;
    s.put_queue("ticks", json!({"dedup_window_ms": 0})).await;
    let (code, v) = s
        .call(
            Method::PUT,
            "/v1/schedules/tick",
            Some(json!({"every_ms": 1000, "queue": "ticks", "body": {"tick": true}})),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    tokio::time::sleep(Duration::from_millis(10_300)).await;
    let (_, v) = s.call(Method::GET, "/v1/schedules/tick", None).await;
    let fired = v["fired"].as_u64().expect("fired");
    assert!((9..=11).contains(&fired), "10 ± 1 firings in 10 s: {v}");
    let got = s.receive("ticks", json!({"max": 100})).await;
    assert_eq!(got.len() as u64, fired, "one message per firing");
    let mut times: Vec<&str> = got
        .iter()
        .map(|m| {
            m["attributes"]["scheduled_for"]
                .as_str()
                .expect("scheduled_for")
        })
        .collect();
    times.sort_unstable();
    times.dedup();
    assert_eq!(times.len() as u64, fired, "no firing twice");
    s.shutdown().await;
}

#[tokio::test]
async fn a_schedule_needs_a_key_that_may_manage_and_send_and_reading_one_may_browse() {
    use sluice_server::{ApiKeyConfig, KeyRing, Role, ServerOptions};
    let key = |name: &str, role, queues: &[&str]| ApiKeyConfig {
        name: name.into(),
        role,
        queues: queues.iter().map(|q| (*q).to_owned()).collect(),
        sha256: sluice_server::auth::hash_secret(name),
    };
    let keys = KeyRing::new(vec![
        key("admin", Role::Admin, &["*"]),
        key("admin-eu", Role::Admin, &["eu.*"]),
        key("operator", Role::Operator, &["*"]),
        key("producer", Role::Producer, &["*"]),
    ])
    .expect("keys");
    let s = common::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    for q in ["us.sweeps", "eu.sweeps"] {
        let (code, _) = s
            .call_as(
                Some("admin"),
                Method::PUT,
                &format!("/v1/queues/{q}"),
                Some(json!({})),
            )
            .await;
        assert!(code.is_success());
    }
    let spec = json!({"every_ms": 60000, "queue": "us.sweeps", "body": {"secret": 1}});
    for who in ["operator", "producer", "admin-eu"] {
        let (code, v) = s
            .call_as(
                Some(who),
                Method::PUT,
                "/v1/schedules/us",
                Some(spec.clone()),
            )
            .await;
        assert_eq!(code, 403, "{who}: {v}");
    }
    let (code, v) = s
        .call_as(Some("admin"), Method::PUT, "/v1/schedules/us", Some(spec))
        .await;
    assert_eq!(code, 201, "{v}");
    let (code, _) = s
        .call_as(Some("operator"), Method::GET, "/v1/schedules/us", None)
        .await;
    assert_eq!(code, 200, "an operator reads it");
    let (code, _) = s
        .call_as(Some("producer"), Method::GET, "/v1/schedules/us", None)
        .await;
    assert_eq!(code, 403, "a producer may not read bodies");
    let (code, _) = s
        .call_as(
            Some("operator"),
            Method::POST,
            "/v1/schedules/us/trigger",
            None,
        )
        .await;
    assert_eq!(code, 403, "an operator may not send");
    // A key of other queues neither sees it nor replaces it.
    let (code, v) = s
        .call_as(Some("admin-eu"), Method::GET, "/v1/schedules/us", None)
        .await;
    assert_eq!(code, 404, "{v}");
    let (code, v) = s
        .call_as(
            Some("admin-eu"),
            Method::PUT,
            "/v1/schedules/us",
            Some(json!({"every_ms": 60000, "queue": "eu.sweeps", "body": 1})),
        )
        .await;
    assert_eq!(code, 404, "{v}");
    let (_, v) = s
        .call_as(Some("admin-eu"), Method::GET, "/v1/schedules", None)
        .await;
    assert_eq!(v["schedules"], json!([]));
    s.shutdown().await;
}

#[tokio::test]
async fn a_body_larger_than_the_queue_takes_is_refused() {
    let s = common::start().await;
    s.put_queue("small", json!({"max_message_bytes": 1024}))
        .await;
    let (code, v) = s
        .call(
            Method::PUT,
            "/v1/schedules/big",
            Some(json!({"every_ms": 60000, "queue": "small", "body": "x".repeat(2000)})),
        )
        .await;
    assert_eq!(code, 413, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("max_message_bytes"),
        "{v}"
    );
    s.shutdown().await;
}
