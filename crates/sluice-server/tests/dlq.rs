//! Dead-letter browsing: each dead letter shows its reason, error, attempts and
//! source queue, and the browse filters by error text, attribute and time, page by page.

mod common;

use reqwest::Method;
use serde_json::{Value, json};

async fn walk(s: &common::TestServer, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/queues/work.dlq/messages?limit=2&{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (code, page) = s.call(Method::GET, &path, None).await;
        assert_eq!(code, 200, "{page}");
        out.extend(
            page["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .cloned(),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
}

#[tokio::test]
async fn dead_letters_carry_their_story_and_filter() {
    let s = common::start().await;
    s.put_queue("work", json!({ "max_receive_count": 1 })).await;
    for i in 0..10 {
        let tenant = if i % 2 == 0 { "a" } else { "b" };
        let (code, v) = s
            .call(
                Method::POST,
                "/v1/queues/work/messages",
                Some(json!({ "body": i, "attributes": { "tenant": tenant } })),
            )
            .await;
        assert_eq!(code, 201, "{v}");
    }
    let got = s.receive("work", json!({ "max": 10 })).await;
    for (i, d) in got.iter().enumerate() {
        let error = if i % 3 == 0 {
            "timeout after 30s"
        } else {
            "upstream 503"
        };
        let (code, v) = s
            .call(
                Method::POST,
                "/v1/queues/work/nack",
                Some(json!({ "receipt": d["receipt"], "error": error })),
            )
            .await;
        assert_eq!(
            (code.as_u16(), v["state"].as_str()),
            (200, Some("dead_lettered")),
            "{v}"
        );
    }

    let all = walk(&s, "state=all").await;
    assert_eq!(all.len(), 10);
    let first = &all[0];
    assert_eq!(first["dead_letter_reason"], "exhausted");
    assert_eq!(first["source_queue"], "work");
    assert!(first["dead_lettered_at"].is_string());
    assert_eq!(first["attempts"][0]["outcome"], "nacked");
    assert!(first["last_error"].is_string());

    let timeouts = walk(&s, "error_contains=timeout").await;
    assert_eq!(timeouts.len(), 4, "ids 0, 3, 6, 9 timed out");
    let mut seen = std::collections::HashSet::new();
    assert!(
        timeouts.iter().all(|m| seen.insert(m["id"].to_string())),
        "each once"
    );
    assert!(
        timeouts
            .iter()
            .all(|m| m["last_error"] == "timeout after 30s")
    );

    let tenant_a = walk(&s, "attribute=tenant%3Da").await;
    assert_eq!(tenant_a.len(), 5);
    assert!(tenant_a.iter().all(|m| m["attributes"]["tenant"] == "a"));

    let both = walk(&s, "attribute=tenant%3Da&error_contains=503").await;
    assert!(
        both.iter()
            .all(|m| m["attributes"]["tenant"] == "a" && m["last_error"] == "upstream 503")
    );
    assert_eq!(
        both.len()
            + walk(&s, "attribute=tenant%3Da&error_contains=timeout")
                .await
                .len(),
        5
    );

    assert!(
        walk(&s, "dead_lettered_after=2999-01-01T00:00:00Z")
            .await
            .is_empty()
    );
    assert_eq!(
        walk(&s, "dead_lettered_before=2999-01-01T00:00:00Z")
            .await
            .len(),
        10
    );

    let bad = s
        .call(
            Method::GET,
            "/v1/queues/work.dlq/messages?attribute=nokeyvalue",
            None,
        )
        .await;
    common::assert_error(&bad, 400, "invalid_argument");
    let bad = s
        .call(
            Method::GET,
            "/v1/queues/work.dlq/messages?dead_lettered_after=yesterday",
            None,
        )
        .await;
    common::assert_error(&bad, 400, "invalid_argument");
}
