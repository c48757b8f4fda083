//! `GET /v1/queues` and the overview `GET /v1/stats` a page at a time: prefix, limit and
//! cursor, a walk while other clients create and delete queues, a key that sees only some
//! queues, and the 400s.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{TestServer, assert_error, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_server::auth::hash_secret;
use sluice_server::{ApiKeyConfig, KeyRing, Role, ServerOptions};

/// A queue without a dead-letter queue, so that a name is one queue.
fn no_dlq() -> Value {
    json!({"max_receive_count": 0, "dead_letter_queue": null})
}

fn names(page: &Value) -> Vec<String> {
    page["queues"]
        .as_array()
        .unwrap_or_else(|| panic!("no queues in {page}"))
        .iter()
        .map(|q| {
            // A listing's rows have a `name`, the overview's a `queue`.
            q["name"]
                .as_str()
                .or(q["queue"].as_str())
                .expect("name")
                .to_owned()
        })
        .collect()
}

/// Every page of `GET /v1/queues?{query}`, `limit` at a time, following `next_cursor`.
async fn walk(s: &TestServer, token: Option<&str>, query: &str, limit: u32) -> Vec<Vec<String>> {
    walk_route(s, token, "/v1/queues", query, limit).await
}

/// Every page of `GET {route}?{query}`, `limit` at a time, following `next_cursor`.
async fn walk_route(
    s: &TestServer,
    token: Option<&str>,
    route: &str,
    query: &str,
    limit: u32,
) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("{route}?limit={limit}&{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (st, page) = s.call_as(token, Method::GET, &path, None).await;
        assert_eq!(st, StatusCode::OK, "{path}: {page}");
        let got = names(&page);
        assert!(got.len() <= limit as usize, "{path}: {got:?}");
        pages.push(got);
        assert!(pages.len() < 10_000, "the walk does not end");
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert_eq!(page["next_cursor"], Value::Null, "{page}");
                return pages;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_by_prefix_and_limit_with_a_cursor_only_while_more_remain() {
    let s = start().await;
    for q in ["b.2", "a.1", "b.1", "b.3", "c.1", "b-x"] {
        s.put_queue(q, no_dlq()).await;
    }
    let (st, all) = s.call(Method::GET, "/v1/queues", None).await;
    assert_eq!(st, StatusCode::OK, "{all}");
    assert_eq!(names(&all), ["a.1", "b-x", "b.1", "b.2", "b.3", "c.1"]);
    assert_eq!(all["next_cursor"], Value::Null, "all fit the default page");

    let pages = walk(&s, None, "prefix=b.", 2).await;
    assert_eq!(pages, [vec!["b.1", "b.2"], vec!["b.3"]]);
    let pages = walk(&s, None, "prefix=b.", 3).await;
    assert_eq!(
        pages,
        [vec!["b.1", "b.2", "b.3"]],
        "no cursor after a full last page"
    );
    let pages = walk(&s, None, "prefix=zzz", 3).await;
    assert_eq!(pages, [Vec::<String>::new()]);
    // An empty prefix or cursor is no prefix or cursor, as for every query parameter.
    let (st, v) = s
        .call(Method::GET, "/v1/queues?prefix=&cursor=&limit=1", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(names(&v), ["a.1"]);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_page_is_a_thousand_queues() {
    let s = start().await;
    for i in 0..1002 {
        s.store
            .put_queue(
                &sluice_core::QueueName::new(format!("q{i:04}")).expect("name"),
                &sluice_core::QueueConfigPatch {
                    max_receive_count: Some(0),
                    dead_letter_queue: Some(None),
                    ..Default::default()
                },
            )
            .await
            .expect("put");
    }
    let (st, first) = s.call(Method::GET, "/v1/queues", None).await;
    assert_eq!(st, StatusCode::OK);
    let got = names(&first);
    assert_eq!((got.len(), got[999].as_str()), (1000, "q0999"));
    let cursor = first["next_cursor"].as_str().expect("more remain");
    let (st, rest) = s
        .call(Method::GET, &format!("/v1/queues?cursor={cursor}"), None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(names(&rest), ["q1000", "q1001"]);
    assert_eq!(rest["next_cursor"], Value::Null);
    s.shutdown().await;
}

/// Pages walked while another client creates and deletes queues all around the walk's
/// position: every queue that exists throughout appears exactly once, names only increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_while_queues_come_and_go_lists_each_lasting_queue_once() {
    let s = Arc::new(start().await);
    let mut lasting = BTreeSet::new();
    for i in 0..60 {
        let name = format!("q.{i:02}");
        s.put_queue(&name, no_dlq()).await;
        lasting.insert(name);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let changes = Arc::new(AtomicUsize::new(0));
    let churn = {
        let (s, stop, changes) = (s.clone(), stop.clone(), changes.clone());
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                // Names between the lasting ones, before and after them, all over the range.
                let name = format!("q.{:02}{}", (n * 7) % 60, ["a", "-b", ".c"][n % 3]);
                s.put_queue(&name, no_dlq()).await;
                if n >= 5 {
                    let old = format!(
                        "q.{:02}{}",
                        ((n - 5) * 7) % 60,
                        ["a", "-b", ".c"][(n - 5) % 3]
                    );
                    let (st, v) = s
                        .call(Method::DELETE, &format!("/v1/queues/{old}"), None)
                        .await;
                    assert!(
                        st == StatusCode::NO_CONTENT || st == StatusCode::NOT_FOUND,
                        "{st} {v}"
                    );
                }
                changes.fetch_add(1, Ordering::SeqCst);
                n += 1;
            }
        })
    };
    let mut walks = 0;
    while walks < 3 || changes.load(Ordering::SeqCst) < 20 {
        let before = changes.load(Ordering::SeqCst);
        let walked: Vec<String> = walk(&s, None, "prefix=q.", 7).await.concat();
        for pair in walked.windows(2) {
            assert!(
                pair[0] < pair[1],
                "names only increase, none twice: {pair:?}"
            );
        }
        let seen: BTreeSet<String> = walked.into_iter().collect();
        let missing: Vec<&String> = lasting.difference(&seen).collect();
        assert!(missing.is_empty(), "lasting queues missed: {missing:?}");
        walks += 1;
        assert!(
            walks < 200,
            "the churn made only {before} changes in {walks} walks"
        );
    }
    stop.store(true, Ordering::SeqCst);
    churn.await.expect("the churning client");
    assert!(changes.load(Ordering::SeqCst) >= 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_sees_some_queues_pages_through_them_only() {
    const SECRET: &str = "sluice_orders_reader_secret";
    let keys = KeyRing::new(vec![ApiKeyConfig {
        name: "orders".to_owned(),
        role: Role::Operator,
        queues: vec!["*.eu".to_owned()],
        sha256: hash_secret(SECRET),
    }])
    .expect("keys");
    let s = common::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    let patch = sluice_core::QueueConfigPatch {
        max_receive_count: Some(0),
        dead_letter_queue: Some(None),
        ..Default::default()
    };
    let mut mine = Vec::new();
    for i in 0..20 {
        // Covered and uncovered names interleave in name order.
        for name in [format!("orders.{i:02}.eu"), format!("orders.{i:02}.us")] {
            let q = sluice_core::QueueName::new(name.clone()).expect("name");
            s.store.put_queue(&q, &patch).await.expect("put");
        }
        mine.push(format!("orders.{i:02}.eu"));
    }
    for route in ["/v1/queues", "/v1/stats"] {
        let pages = walk_route(&s, Some(SECRET), route, "", 3).await;
        assert!(
            pages[..pages.len() - 1].iter().all(|p| p.len() == 3),
            "{route}: pages are filled from further queues: {pages:?}"
        );
        assert_eq!(pages.concat(), mine, "{route}");
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_prefixes_limits_and_cursors_are_400_naming_the_parameter() {
    let s = start().await;
    s.put_queue("jobs", no_dlq()).await;
    for (query, says) in [
        ("limit=0", "limit must be 1 to 1000"),
        ("limit=1001", "limit must be 1 to 1000"),
        ("limit=ten", "limit has a bad value"),
        ("cursor=garbage", "pass next_cursor exactly"),
        ("cursor=6A6F6273", "pass next_cursor exactly"),
        ("prefix=a%20b", "prefix \"a b\" contains ' '"),
        ("page=2", "unknown query parameter \"page\""),
    ] {
        for route in ["/v1/queues", "/v1/stats"] {
            let got = s.call(Method::GET, &format!("{route}?{query}"), None).await;
            assert_error(&got, 400, "invalid_argument");
            let message = got.1["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{route}?{query}: {message}");
        }
    }
    // The cursor of a name continues after it, whether or not the queue still exists.
    let (st, v) = s
        .call(Method::GET, "/v1/queues?cursor=6a6f6273", None)
        .await;
    assert_eq!((st, names(&v)), (StatusCode::OK, vec![]), "{v}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_pages_queues_with_their_numbers_and_dead_letter_roles() {
    let s = start().await;
    for q in ["jobs.b", "jobs.a", "mail"] {
        s.put_queue(q, json!({"max_receive_count": 1})).await;
    }
    s.send("jobs.a", json!(1)).await;
    s.send("jobs.a", json!(2)).await;
    let got = s.receive("jobs.a", json!({"max": 1})).await;
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/jobs.a/reject",
            Some(json!({"receipt": got[0]["receipt"], "error": "bad input"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");

    let all = [
        "jobs.a",
        "jobs.a.dlq",
        "jobs.b",
        "jobs.b.dlq",
        "mail",
        "mail.dlq",
    ];
    let pages = walk_route(&s, None, "/v1/stats", "", 4).await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [4, 2]);
    assert_eq!(pages.concat(), all, "every queue once, by name");
    let pages = walk_route(&s, None, "/v1/stats", "prefix=jobs.", 1).await;
    assert_eq!(pages.concat(), all[..4], "a prefix narrows every page");

    let (st, v) = s.call(Method::GET, "/v1/stats?prefix=jobs.a", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let rows = v["queues"].as_array().expect("rows");
    assert_eq!(
        (
            &rows[0]["queue"],
            &rows[0]["visible"],
            &rows[0]["dead_letter_depth"],
            &rows[0]["is_dead_letter_queue"],
            &rows[0]["dead_letter_queue"],
        ),
        (
            &json!("jobs.a"),
            &json!(1),
            &json!(1),
            &json!(false),
            &json!("jobs.a.dlq")
        ),
        "{v}"
    );
    assert_eq!(
        (
            &rows[1]["queue"],
            &rows[1]["visible"],
            &rows[1]["is_dead_letter_queue"]
        ),
        (&json!("jobs.a.dlq"), &json!(1), &json!(true)),
        "{v}"
    );
    assert_eq!(v["next_cursor"], Value::Null);
    s.shutdown().await;
}
