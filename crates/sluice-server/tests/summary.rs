//! `GET /v1/queues/{q}/summary`: the whole DLQ counted by error, reason, source, key or attribute,
//! with the browse's filters; bad input is a 400 that says what is allowed.

mod common;

use reqwest::Method;
use serde_json::{Value, json};

async fn summary(s: &common::TestServer, query: &str) -> Value {
    let (code, v) = s
        .call(
            Method::GET,
            &format!("/v1/queues/work.dlq/summary?{query}"),
            None,
        )
        .await;
    assert_eq!(code, 200, "{query}: {v}");
    v
}

fn counts(v: &Value) -> Vec<(Value, u64)> {
    v["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| (g["key"].clone(), g["count"].as_u64().expect("count")))
        .collect()
}

#[tokio::test]
async fn summary_counts_groups_and_filters() {
    let s = common::start().await;
    s.put_queue("work", json!({ "max_receive_count": 1 })).await;
    for i in 0..9 {
        let tenant = if i % 3 == 0 { "a" } else { "b" };
        let (code, v) = s
            .call(
                Method::POST,
                "/v1/queues/work/messages",
                Some(json!({ "body": i, "attributes": { "tenant": tenant, "region": "eu" } })),
            )
            .await;
        assert_eq!(code, 201, "{v}");
    }
    for (i, d) in s
        .receive("work", json!({ "max": 9 }))
        .await
        .iter()
        .enumerate()
    {
        let (route, error) = if i < 6 {
            ("nack", "upstream 503")
        } else {
            ("reject", "bad input")
        };
        let (code, v) = s
            .call(
                Method::POST,
                &format!("/v1/queues/work/{route}"),
                Some(json!({ "receipt": d["receipt"], "error": error })),
            )
            .await;
        assert!(code.is_success(), "{v}");
    }

    let v = summary(&s, "group_by=error").await;
    assert_eq!(v["queue"], "work.dlq");
    assert_eq!(v["group_by"], "error");
    assert_eq!(
        (v["total"].as_u64(), v["group_count"].as_u64()),
        (Some(9), Some(2))
    );
    assert_eq!(v["more_groups"], false);
    assert_eq!(
        counts(&v),
        [(json!("upstream 503"), 6), (json!("bad input"), 3)]
    );
    let g = &v["groups"][0];
    assert!(
        g["first_at"].as_str().expect("first_at").ends_with('Z'),
        "{g}"
    );
    assert!(
        g["last_at"].as_str().expect("last_at").ends_with('Z'),
        "{g}"
    );
    let sample = g["sample_id"].as_str().expect("sample_id");
    let (code, m) = s
        .call(Method::GET, &format!("/v1/messages/{sample}"), None)
        .await;
    assert_eq!(code, 200, "{m}");
    assert_eq!(
        m["last_error"], "upstream 503",
        "the sample is of its group"
    );

    // group_by defaults to error.
    assert_eq!(counts(&summary(&s, "").await), counts(&v));
    assert_eq!(
        counts(&summary(&s, "group_by=reason").await),
        [(json!("exhausted"), 6), (json!("rejected"), 3)]
    );
    assert_eq!(
        counts(&summary(&s, "group_by=source").await),
        [(json!("work"), 9)]
    );
    assert_eq!(
        counts(&summary(&s, "group_by=attribute:tenant").await),
        [(json!("b"), 6), (json!("a"), 3)]
    );

    // The browse's filters; attribute may repeat (all must match).
    assert_eq!(
        counts(&summary(&s, "group_by=reason&error_contains=503").await),
        [(json!("exhausted"), 6)]
    );
    let v = summary(
        &s,
        "group_by=error&attribute=tenant%3Da&attribute=region%3Deu",
    )
    .await;
    assert_eq!(v["total"], 3, "{v}");
    assert_eq!(
        summary(&s, "attribute=tenant%3Da&attribute=region%3Dus").await["total"],
        0
    );
    assert_eq!(
        summary(&s, "dead_lettered_after=2000-01-01T00:00:00Z").await["total"],
        9
    );
    assert_eq!(
        summary(&s, "dead_lettered_before=2000-01-01T00:00:00Z").await["total"],
        0
    );

    // The limit cuts the groups answered, not the counts.
    let v = summary(&s, "group_by=error&limit=1").await;
    assert_eq!(counts(&v), [(json!("upstream 503"), 6)]);
    assert_eq!(
        (v["total"].as_u64(), v["group_count"].as_u64()),
        (Some(9), Some(2))
    );
    assert_eq!(v["more_groups"], true);

    // An empty queue.
    let (code, v) = s.call(Method::GET, "/v1/queues/work/summary", None).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        (v["total"].as_u64(), v["groups"].as_array().map(Vec::len)),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn summary_refuses_bad_input_with_what_is_allowed() {
    let s = common::start().await;
    s.put_queue("work", json!({})).await;
    let bad = |query: &'static str, says: &'static str| (query, says);
    for (query, says) in [
        bad(
            "group_by=colour",
            "error, reason, source, key or attribute:NAME",
        ),
        bad("group_by=attribute:", "attribute's name"),
        bad("limit=0", "1 to 1000"),
        bad("limit=1001", "1 to 1000"),
        bad("limit=many", "1 to 1000"),
        bad("group_by=error&group_by=reason", "given twice"),
        bad("colour=red", "expected group_by"),
        bad("attribute=tenant", "key=value"),
        bad("dead_lettered_after=yesterday", "RFC 3339"),
    ] {
        let got = s
            .call(
                Method::GET,
                &format!("/v1/queues/work.dlq/summary?{query}"),
                None,
            )
            .await;
        common::assert_error(&got, 400, "invalid_argument");
        let message = got.1["error"]["message"].as_str().expect("message");
        assert!(message.contains(says), "{query}: {message}");
    }
    common::assert_error(
        &s.call(Method::GET, "/v1/queues/nope/summary", None).await,
        404,
        "queue_not_found",
    );
    common::assert_error(
        &s.call(Method::GET, "/v1/queues/bad%20name/summary", None)
            .await,
        400,
        "invalid_argument",
    );
}
