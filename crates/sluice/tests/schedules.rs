//! Schedules through the real `sluice serve`: a `kill -9` in the middle of a run doubles no
//! firing and catches up what it missed as the schedule says; two nodes on one PostgreSQL
//! database enqueue each firing once.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use sluice_testkit::postgres;

mod common;

use common::call;

/// The `scheduled_for` times (ms) of every message of `queue`, sorted.
async fn firings(c: &reqwest::Client, url: &str, queue: &str) -> Vec<i64> {
    let mut out = Vec::new();
    loop {
        let got = call(
            c,
            reqwest::Method::POST,
            format!("{url}/v1/queues/{queue}/receive"),
            Some(json!({"max": 100, "visibility_timeout_ms": 60000})),
        )
        .await;
        let msgs = got["messages"].as_array().cloned().unwrap_or_default();
        if msgs.is_empty() {
            break;
        }
        for m in msgs {
            let t = m["attributes"]["scheduled_for"]
                .as_str()
                .expect("scheduled_for");
            let t = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .expect("RFC 3339");
            out.push(i64::try_from(t.unix_timestamp_nanos() / 1_000_000).expect("ms"));
        }
    }
    out.sort_unstable();
    out
}

async fn setup(c: &reqwest::Client, url: &str, catch_up: &str) {
    // No dedup window: a firing enqueued twice would show as two messages.
    call(
        c,
        reqwest::Method::PUT,
        format!("{url}/v1/queues/ticks"),
        Some(json!({"dedup_window_ms": 0})),
    )
    .await;
    call(
        c,
        reqwest::Method::PUT,
        format!("{url}/v1/schedules/tick"),
        Some(json!({"every_ms": 1000, "queue": "ticks", "body": 1, "catch_up": catch_up})),
    )
    .await;
}

#[tokio::test]
async fn a_kill_9_doubles_no_firing_and_catch_up_all_fills_the_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let c = reqwest::Client::new();
    let (mut first, url) = common::serve(&data, Stdio::null());
    setup(&c, &url, "all").await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let (_second, url) = common::serve(&data, Stdio::null());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = firings(&c, &url, "ticks").await;
    assert!(got.len() >= 6, "about 8 firings: {got:?}");
    for w in got.windows(2) {
        assert_eq!(
            w[1] - w[0],
            1000,
            "every second once, none doubled, none lost: {got:?}"
        );
    }
    let s = call(
        &c,
        reqwest::Method::GET,
        format!("{url}/v1/schedules/tick"),
        None,
    )
    .await;
    assert_eq!(s["fired"].as_u64(), Some(got.len() as u64), "{s}");
}

#[tokio::test]
async fn catch_up_none_skips_what_fell_due_while_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let c = reqwest::Client::new();
    let (mut first, url) = common::serve(&data, Stdio::null());
    setup(&c, &url, "none").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    // Longer down than a firing stays on time (10 s).
    tokio::time::sleep(Duration::from_millis(12_000)).await;
    let (_second, url) = common::serve(&data, Stdio::null());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let got = firings(&c, &url, "ticks").await;
    let gaps: Vec<i64> = got
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| *d > 1000)
        .collect();
    assert_eq!(gaps.len(), 1, "one gap, where the broker was down: {got:?}");
    assert!(gaps[0] >= 11_000, "{got:?}");
    let s = call(
        &c,
        reqwest::Method::GET,
        format!("{url}/v1/schedules/tick"),
        None,
    )
    .await;
    assert!(
        s["missed"].as_u64().unwrap_or(0) >= 10,
        "the gap is counted as missed: {s}"
    );
    let mut unique = got.clone();
    unique.dedup();
    assert_eq!(unique, got, "no firing twice");
}

#[tokio::test]
async fn two_nodes_on_one_database_enqueue_each_firing_once() {
    if !postgres::available().await {
        return;
    }
    let schema = postgres::unique_schema("schedules");
    let _drop = postgres::SchemaGuard::new(schema.clone());
    let store = format!("{}?schema={schema}", postgres::url());
    let (_a, url_a) = common::serve_store(&store, Stdio::null());
    let (_b, url_b) = common::serve_store(&store, Stdio::null());
    let c = reqwest::Client::new();
    setup(&c, &url_a, "none").await;
    tokio::time::sleep(Duration::from_millis(6300)).await;
    let got = firings(&c, &url_b, "ticks").await;
    assert!((5..=7).contains(&got.len()), "6 ± 1 firings: {got:?}");
    for w in got.windows(2) {
        assert_eq!(w[1] - w[0], 1000, "each firing once: {got:?}");
    }
    let s = call(
        &c,
        reqwest::Method::GET,
        format!("{url_b}/v1/schedules/tick"),
        None,
    )
    .await;
    let fired = s["fired"].as_u64().expect("fired");
    assert!(
        fired == got.len() as u64 || fired == got.len() as u64 + 1,
        "one message per firing (one more may have fired since): {s} {got:?}"
    );
}
