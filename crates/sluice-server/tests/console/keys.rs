//! A queue's keys in the console: the tenants with the most waiting, with what each has in
//! flight, its weight and its limit; no keys section on a queue without keys.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_with_keys_lists_its_tenants_with_the_most_waiting_first() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue(
        "tenants",
        json!({"key_weights": {"vip-*": 4}, "key_limits": {"max_in_flight": 3}}),
    )
    .await;
    s.put_queue("plain", json!({})).await;
    s.send("plain", json!(1)).await;
    for (key, n) in [("acme", 12), ("vip-globex", 3), ("initech", 1)] {
        for i in 0..n {
            let (code, v) = s
                .call(
                    Method::POST,
                    "/v1/queues/tenants/messages",
                    Some(json!({"body": i, "key": key})),
                )
                .await;
            assert_eq!(code, 201, "{v}");
        }
    }
    s.send("tenants", json!("no key")).await;
    assert_eq!(s.receive("tenants", json!({"max": 4})).await.len(), 4);

    b.client
        .goto(&s.url("/#/queues/tenants"))
        .await
        .expect("open the queue");
    let count = b.text_when("#keys-count", |t| !t.is_empty()).await;
    assert!(count.starts_with("3 active keys"), "{count}");
    assert_eq!(
        b.count("#keys tbody tr").await,
        4,
        "three tenants and no key"
    );
    let first = b.text_when("#keys tbody tr", |_| true).await;
    let cells: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(cells[0], "acme", "most waiting first: {first}");
    let table = b.text_when("#keys", |t| t.contains("vip-globex")).await;
    let vip = table
        .lines()
        .find(|l| l.starts_with("vip-globex"))
        .unwrap_or_else(|| panic!("{table}"));
    let vip: Vec<&str> = vip.split_whitespace().collect();
    assert_eq!(
        vip[vip.len() - 2..],
        ["4", "3"],
        "weight and limit: {vip:?}"
    );
    assert!(table.contains("(no key)"), "{table}");
    let card = b
        .text_when("[data-stat=active_keys]", |t| !t.is_empty())
        .await;
    assert!(card.contains('3'), "{card}");
    b.screenshot("queue-keys.png").await;

    b.client
        .goto(&s.url("/#/queues/plain"))
        .await
        .expect("open the plain queue");
    b.text_when("[data-stat=visible]", |t| t.contains('1'))
        .await;
    assert_eq!(b.count("#keys").await, 0, "no keys section without keys");
    b.close().await;
    s.shutdown().await;
}

/// On a queue with per-key breakers, the keys whose breaker is open come first, each key with
/// its learned rate and breaker state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_with_per_key_breakers_lists_the_open_keys_first() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue(
        "partner",
        json!({"breaker": {"scope": "key"},
               "adaptive": {"min_per_min": 60, "max_per_min": 600, "scope": "key"}}),
    )
    .await;
    for (key, n) in [("busy", 8), ("down", 1)] {
        for i in 0..n {
            let (code, v) = s
                .call(
                    Method::POST,
                    "/v1/queues/partner/messages",
                    Some(json!({"body": i, "key": key})),
                )
                .await;
            assert_eq!(code, 201, "{v}");
        }
    }
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/queues/partner/keys/down/breaker",
            Some(json!({"state": "open"})),
        )
        .await;
    assert_eq!(code, 200, "{v}");

    b.client
        .goto(&s.url("/#/queues/partner"))
        .await
        .expect("open the queue");
    let count = b
        .text_when("#keys-count", |t| t.contains("open breaker"))
        .await;
    assert!(count.contains("1 with an open breaker"), "{count}");
    let first = b.text_when("#keys tbody tr", |_| true).await;
    assert!(
        first.starts_with("down") && first.contains("open (forced)"),
        "the open key first, though busy has more waiting: {first}"
    );
    let table = b.text_when("#keys", |t| t.contains("busy")).await;
    let busy = table
        .lines()
        .find(|l| l.starts_with("busy"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        busy.contains("60 / min") && busy.ends_with("closed"),
        "{busy}"
    );
    b.screenshot("queue-key-breakers.png").await;
    b.close().await;
    s.shutdown().await;
}
