//! Redrive at an upstream's per-minute quota, and a guarded redrive that pauses itself when
//! what it moved fails again — on a real broker with its own redrive runner.

mod common;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

/// `n` messages dead-lettered from `queue` (one attempt allowed) with `error`.
async fn dead_letters(s: &common::TestServer, queue: &str, n: usize, error: &str) {
    s.put_queue(queue, json!({"max_receive_count": 1})).await;
    let msgs: Vec<Value> = (0..n).map(|i| json!({"body": i})).collect();
    let (code, v) = s
        .call(
            Method::POST,
            &format!("/v1/queues/{queue}/messages"),
            Some(json!({"messages": msgs})),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let got = s
        .receive(queue, json!({"max": n, "visibility_timeout_ms": 60_000}))
        .await;
    assert_eq!(got.len(), n);
    for m in got {
        let (code, v) = s
            .call(
                Method::POST,
                &format!("/v1/queues/{queue}/reject"),
                Some(json!({"receipt": m["receipt"], "error": error})),
            )
            .await;
        assert_eq!(code, 200, "{v}");
    }
}

async fn job(s: &common::TestServer, id: &str) -> Value {
    let (code, v) = s
        .call(Method::GET, &format!("/v1/redrives/{id}"), None)
        .await;
    assert_eq!(code, 200, "{v}");
    v
}

/// Polls the job until `done` says so, or fails after `limit`.
async fn wait_job(
    s: &common::TestServer,
    id: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let j = job(s, id).await;
        if done(&j) {
            return j;
        }
        assert!(Instant::now() < deadline, "gave up waiting: {j}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// When each message of `queue` arrived there, in ms, sorted.
async fn arrivals(s: &common::TestServer, queue: &str) -> Vec<i64> {
    let (code, page) = s
        .call(
            Method::GET,
            &format!("/v1/queues/{queue}/messages?state=all&limit=1000"),
            None,
        )
        .await;
    assert_eq!(code, 200, "{page}");
    let mut at: Vec<i64> = page["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let t = time::OffsetDateTime::parse(
                m["entered_at"].as_str().expect("entered_at"),
                &time::format_description::well_known::Rfc3339,
            )
            .expect("RFC 3339");
            (t.unix_timestamp_nanos() / 1_000_000) as i64
        })
        .collect();
    at.sort_unstable();
    at
}

/// The quota's period: a minute in production, a third of one here so that the test takes
/// 40 s rather than two minutes. The runner paces by `period / limit` whatever the period, so
/// the rules checked are the same: at most `limit` in any sliding period, evenly spread.
const PERIOD_MS: i64 = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_at_50_a_period_spreads_its_moves_and_never_passes_the_quota() {
    let s = common::start().await;
    dead_letters(&s, "payments", 100, "upstream 429").await;
    let rate = json!({"limit": 50, "period_ms": PERIOD_MS});
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/redrives",
            Some(json!({"source": "payments.dlq", "rate": rate})),
        )
        .await;
    assert_eq!(code, 202, "{v}");
    assert_eq!(v["rate"], rate);
    let id = v["id"].as_str().expect("id").to_owned();
    let done = wait_job(&s, &id, Duration::from_secs(60), |j| {
        j["state"] == "completed"
    })
    .await;
    assert_eq!(done["moved"], 100, "{done}");

    let at = arrivals(&s, "payments").await;
    assert_eq!(at.len(), 100);
    // More than 50 in some sliding period would need 51 arrivals within one period.
    for w in at.windows(51) {
        assert!(
            w[50] - w[0] >= PERIOD_MS,
            "51 moves within {} ms",
            w[50] - w[0]
        );
    }
    // Evenly spread: never 6 in a twelfth of the period (5 gaps of a fiftieth on average).
    for w in at.windows(6) {
        assert!(
            w[5] - w[0] >= PERIOD_MS / 12,
            "6 moves within {} ms",
            w[5] - w[0]
        );
    }
    // 99 gaps of a fiftieth of the period.
    let span = at[99] - at[0];
    let expected = PERIOD_MS * 99 / 50;
    assert!(
        (expected..=expected + PERIOD_MS / 10).contains(&span),
        "100 moves at 50 a period took {span} ms, expected about {expected}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_redrive_pauses_when_what_it_moved_fails_again_and_resumes() {
    let s = common::start().await;
    dead_letters(&s, "orders", 40, "upstream 429 Too Many Requests").await;
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/redrives",
            Some(json!({
                "source": "orders.dlq",
                "rate": {"limit": 20, "period_ms": 1000},
                "pause_if_failing": {"percent": 50, "window": 10, "error_contains": "429"},
            })),
        )
        .await;
    assert_eq!(code, 202, "{v}");
    assert_eq!(
        v["pause_if_failing"],
        json!({"percent": 50, "window": 10, "error_contains": "429"})
    );
    let id = v["id"].as_str().expect("id").to_owned();

    // The upstream still answers 429: every moved message fails again.
    let failing = common::consumer(
        &s,
        "orders",
        "nack",
        |m| json!({"receipt": m["receipt"], "error": "upstream 429 again"}),
    );
    let paused = wait_job(&s, &id, Duration::from_secs(30), |j| j["state"] == "paused").await;
    failing.abort();
    let reason = paused["paused_reason"].as_str().expect("reason");
    assert!(
        reason.contains("guard") && reason.contains("429"),
        "{paused}"
    );
    let moved = paused["moved"].as_u64().expect("moved");
    assert!(
        (10..40).contains(&moved),
        "paused before moving it all: {paused}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        job(&s, &id).await["moved"],
        moved,
        "a paused job moves nothing"
    );

    // The audit log of the source queue shows the job's start and its pause, with the reason.
    let (_, log) = s.call(Method::GET, "/v1/audit?queue=orders", None).await;
    let actions: Vec<&str> = log["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"redrive.create"), "{log}");
    let pause = log["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["action"] == "redrive.pause")
        .unwrap_or_else(|| panic!("no pause entry: {log}"));
    assert_eq!(pause["queue"], "orders.dlq");
    assert_eq!(pause["details"]["reason"], reason, "{pause}");

    // The upstream recovered: resumed, the job moves the rest and they are acknowledged.
    let (code, v) = s
        .call(Method::POST, &format!("/v1/redrives/{id}/resume"), None)
        .await;
    assert_eq!(
        (code.as_u16(), v["state"].as_str()),
        (200, Some("running")),
        "{v}"
    );
    let healthy = common::consumer(&s, "orders", "ack", |m| json!({"receipt": m["receipt"]}));
    let done = wait_job(&s, &id, Duration::from_secs(30), |j| {
        j["state"] == "completed"
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.stats("orders").await["totals"]["acked"] != 40 {
        assert!(Instant::now() < deadline, "{}", s.stats("orders").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    healthy.abort();
    assert_eq!(s.stats("orders").await["dead_letter_depth"], 0, "{done}");
    let (_, log) = s.call(Method::GET, "/v1/audit?queue=orders", None).await;
    for action in ["redrive.resume", "redrive.progress", "redrive.finish"] {
        assert!(
            log["entries"]
                .as_array()
                .expect("entries")
                .iter()
                .any(|e| e["action"] == action),
            "{action} missing: {log}"
        );
    }
}

#[tokio::test]
async fn audit_pages_say_when_more_exist_and_continue_without_gaps() {
    let s = common::start().await;
    s.put_queue("paged", json!({})).await;
    // Seven config changes, some within the same millisecond.
    for i in 0..7 {
        s.put_queue("paged", json!({"delay_ms": i})).await;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut path = "/v1/audit?queue=paged&limit=3".to_owned();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (code, page) = s.call(Method::GET, &path, None).await;
        assert_eq!(code, 200, "{page}");
        pages += 1;
        let mut entries: Vec<String> = page["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["details"].to_string())
            .collect();
        entries.append(&mut seen);
        seen = entries;
        if page["more"] != true {
            assert!(page["next_cursor"].is_null(), "{page}");
            break;
        }
        cursor = Some(page["next_cursor"].as_str().expect("cursor").to_owned());
        assert!(pages < 10, "paging does not end");
    }
    assert_eq!(seen.len(), 8, "every entry once: {seen:?}");
    assert_eq!(pages, 3);
    let (code, v) = s.call(Method::GET, "/v1/audit?cursor=nonsense", None).await;
    common::assert_error(&(code, v), 400, "invalid_argument");
}

/// A job limited to 5 of the 20 dead letters its filter matches, beside 10 it excludes: it
/// will move 5 in all, whatever it matched so far; while it is paused, neither the DLQ nor
/// its source queue reads an ETA, and once it is resumed and done the rest stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_reads_what_it_will_move_within_its_limit_and_filter() {
    let s = common::start().await;
    dead_letters(&s, "partner", 20, "upstream 503").await;
    dead_letters(&s, "partner", 10, "bad input").await;
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/redrives",
            Some(json!({
                "source": "partner.dlq",
                "filter": {"error_contains": "503"},
                "limit": 5,
                "rate": {"limit": 1, "period_ms": 60_000},
            })),
        )
        .await;
    assert_eq!(code, 202, "{v}");
    assert_eq!(v["to_move"], 5, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    let (code, v) = s
        .call(
            Method::POST,
            &format!("/v1/redrives/{id}/pause"),
            Some(json!({"reason": "checking"})),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    let j = job(&s, &id).await;
    assert_eq!(j["state"], "paused");
    assert_eq!(j["to_move"], 5, "{j}");
    let (_, listed) = s.call(Method::GET, "/v1/redrives", None).await;
    assert_eq!(listed["redrives"][0]["to_move"], 5, "{listed}");
    // Paused: nothing leaves the DLQ, so no ETA on its row or as its source's dead letters.
    let dlq = s.stats("partner.dlq").await;
    assert_eq!(dlq["backlog_trend"]["eta_ms"], Value::Null, "{dlq}");
    let source = s.stats("partner").await;
    assert_eq!(source["dlq_trend"]["eta_ms"], Value::Null, "{source}");
    let (_, overview) = s.call(Method::GET, "/v1/stats", None).await;
    for row in overview["queues"].as_array().expect("rows") {
        assert_eq!(row["backlog_trend"]["eta_ms"], Value::Null, "{row}");
        assert_eq!(row["dlq_trend"]["eta_ms"], Value::Null, "{row}");
    }

    // Cancelled, it reads what it moved; a new job without pacing moves its 5 and stops,
    // leaving the other matches and what its filter excludes.
    let (code, v) = s
        .call(Method::POST, &format!("/v1/redrives/{id}/cancel"), None)
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v.get("to_move"),
        None,
        "a finished job has moved what it moved: {v}"
    );
    let first = v["moved"].as_u64().expect("moved");
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/redrives",
            Some(json!({
                "source": "partner.dlq",
                "filter": {"error_contains": "503"},
                "limit": 5,
            })),
        )
        .await;
    assert_eq!(code, 202, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    let done = wait_job(&s, &id, Duration::from_secs(30), |j| {
        j["state"] == "completed"
    })
    .await;
    assert_eq!(done["moved"], 5, "{done}");
    assert_eq!(s.stats("partner.dlq").await["visible"], 30 - first - 5);
}
