//! Fuzzing of the cursors clients send back over HTTP: the audit log's (`GET /v1/audit`,
//! parsed by the broker itself), the queue listing's and the browse page's. Whatever a client
//! sends, the broker answers 200 or 400 — never a 5xx (a panic in a handler), and promptly.
//!
//! Property tests stand in for a coverage-guided fuzzer (stable toolchain only). Each runs a
//! few hundred cases in the ordinary suite; `SLUICE_FUZZ_CASES=N` runs N instead:
//!
//! ```sh
//! SLUICE_FUZZ_CASES=20000 cargo test --release -p sluice-server --test fuzz_cursors
//! ```

mod common;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use reqwest::Method;
use serde_json::json;

/// Longest one answer may take.
const BOUND: Duration = Duration::from_secs(10);

/// `cases` in the ordinary suite, or `SLUICE_FUZZ_CASES` for a long run.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Cursors: anything, near misses of each real form, and numbers at their limits.
fn cursor() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just(u64::MAX.to_string()),
        Just(usize::MAX.to_string()),
        Just("99999999999999999999999".to_owned()),
        "[+-]?[0-9]{0,4}",
    ];
    prop_oneof![
        any::<String>(),
        (number.clone(), number.clone()).prop_map(|(a, b)| format!("{a}.{b}")),
        (0u8..5, number.clone(), "[0-9a-fA-F+]{0,18}").prop_map(|(p, a, b)| format!("{p}.{a}.{b}")),
        "[0-9a-f]{0,12}",
        "[0-9a-zA-Z.+-]{0,24}",
    ]
}

/// Percent-encodes `s` for a query string.
fn encoded(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[test]
fn cursors_are_answered_200_or_400() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let s = rt.block_on(async {
        let s = common::start().await;
        s.put_queue("jobs", json!({})).await;
        for i in 0..3 {
            s.send("jobs", json!({ "n": i })).await;
        }
        // Audit entries sharing their milliseconds, so cursors land among them.
        for _ in 0..3 {
            s.call(Method::POST, "/v1/queues/jobs/pause", None).await;
            s.call(Method::POST, "/v1/queues/jobs/resume", None).await;
        }
        s
    });
    let mut runner = TestRunner::new(config(300));
    let result = runner.run(&cursor(), |c| {
        let c = encoded(&c);
        for path in [
            format!("/v1/audit?limit=2&cursor={c}"),
            format!("/v1/queues?limit=1&cursor={c}"),
            format!("/v1/queues/jobs/messages?limit=1&cursor={c}"),
        ] {
            let status = rt.block_on(async {
                tokio::time::timeout(BOUND, s.call(Method::GET, &path, None))
                    .await
                    .map(|(status, _)| status)
            });
            let status = status.map_err(|_| TestCaseError::fail(format!("{path}: no answer")))?;
            prop_assert!(
                status == 200 || status == 400,
                "{}: answered {}",
                path,
                status
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    rt.block_on(s.shutdown());
}

/// Found by the target above: an audit cursor whose count of entries already shown is
/// `usize::MAX` overflowed the page's arithmetic (a panic, answered 500), and a large one
/// made the handler count to it, one by one. Both are answered at once now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_cursor_with_a_huge_count_is_answered() {
    let s = common::start().await;
    s.put_queue("jobs", json!({})).await;
    s.call(Method::POST, "/v1/queues/jobs/pause", None).await;
    for cursor in [
        format!("0.{}", usize::MAX),
        format!("9223372036854775807.{}", usize::MAX),
        format!("9223372036854775807.{}", u64::MAX / 2),
        format!("-9223372036854775808.{}", usize::MAX - 1),
    ] {
        let path = format!("/v1/audit?limit=1&cursor={cursor}");
        let (status, body) = tokio::time::timeout(BOUND, s.call(Method::GET, &path, None))
            .await
            .unwrap_or_else(|_| panic!("{path}: no answer within {BOUND:?}"));
        assert_eq!(status, 200, "{path}: {body}");
    }
    s.shutdown().await;
}
