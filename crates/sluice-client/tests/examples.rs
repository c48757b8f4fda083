//! Every runnable example of `examples/`, run against a real broker started in-process (an
//! embedded store in a temp dir on an ephemeral loopback port). Each example's `run` is the
//! code `cargo run --example NAME` runs; these tests check what its doc comment promises.
// Each example declares `mod common;` (examples/common), as a standalone example must; here
// they are all in one binary, so that module is compiled once per example.
#![allow(clippy::duplicate_mod)]

mod common;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/flaky_handler.rs"]
mod flaky_handler;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/retries_exhausted_dlq.rs"]
mod retries_exhausted_dlq;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/dead_letter_alert.rs"]
mod dead_letter_alert;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/malformed_message.rs"]
mod malformed_message;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/serialization_error.rs"]
mod serialization_error;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/oversized_result.rs"]
mod oversized_result;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/broker_outage.rs"]
mod broker_outage;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/graceful_shutdown.rs"]
mod graceful_shutdown;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/rate_limited_upstream.rs"]
mod rate_limited_upstream;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/progress_and_cancel.rs"]
mod progress_and_cancel;

#[allow(dead_code, clippy::unwrap_used)]
#[path = "../examples/request_reply.rs"]
mod request_reply;

use std::time::Duration;

use sluice_client::{DecodedBody, TaskStatus};

#[tokio::test]
async fn flaky_handler_succeeds_on_retry() {
    let srv = common::start().await;
    let r = flaky_handler::run(&srv.base).await.unwrap();
    assert_eq!(r.status, TaskStatus::Success);
    assert_eq!(r.receive_count, 2);
    assert_eq!(r.result.unwrap()["attempt"], 2);
    assert_eq!(r.retries, 1);
    srv.shutdown().await;
}

#[tokio::test]
async fn retries_exhausted_end_in_the_dlq() {
    let srv = common::start().await;
    let r = retries_exhausted_dlq::run(&srv.base).await.unwrap();
    assert_eq!(r.status, TaskStatus::Failure);
    assert_eq!(r.error.as_deref(), Some("database is down"));
    assert_eq!(r.receive_count, 3);
    assert!(r.in_dlq);
    assert_eq!(r.attempts, 3);
    assert_eq!(r.dead_lettered, 1);
    srv.shutdown().await;
}

#[tokio::test]
async fn dead_letter_hook_fires_once_per_failed_task() {
    let srv = common::start().await;
    let r = dead_letter_alert::run(&srv.base).await.unwrap();
    assert!(
        r.statuses.iter().all(|s| *s == TaskStatus::Failure),
        "{r:?}"
    );
    assert_eq!(r.alerts.len(), 4, "{r:?}");
    for id in &r.ids {
        assert_eq!(r.alerts.get(id), Some(&1), "{r:?}");
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn malformed_messages_land_byte_exact_in_unprocessable() {
    let srv = common::start().await;
    let r = malformed_message::run(&srv.base).await.unwrap();
    assert_eq!(r.valid_status, TaskStatus::Success);
    assert_eq!(r.valid_result.as_deref(), Some("hello, Ada"));
    assert_eq!(r.unprocessable.len(), 2);
    let raw = r.unprocessable.iter().find(|m| m.0 == r.raw_id).unwrap();
    assert_eq!(raw.1, DecodedBody::Bytes(malformed_message::RAW.to_vec()));
    assert!(
        raw.2
            .as_deref()
            .unwrap()
            .contains("not a JSON task envelope"),
        "{raw:?}"
    );
    assert_eq!(
        (r.moved, r.retries),
        (2, 0),
        "moved on first delivery, no retries"
    );
    let unknown = r
        .unprocessable
        .iter()
        .find(|m| m.0 == r.unknown_id)
        .unwrap();
    assert!(
        unknown
            .2
            .as_deref()
            .unwrap()
            .contains("unknown task \"no_such_task\"")
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn unserializable_arguments_fail_at_the_call() {
    let srv = common::start().await;
    let r = serialization_error::run(&srv.base).await.unwrap();
    assert!(r.all_invalid_input);
    assert_eq!(r.sent, 0);
    assert!(r.errors[0].contains(".weights[1]") && r.errors[0].contains("replace it"));
    assert!(r.errors[1].contains("String keys"));
    srv.shutdown().await;
}

#[tokio::test]
async fn oversized_result_is_dropped_and_the_task_succeeds() {
    let srv = common::start().await;
    let r = oversized_result::run(&srv.base).await.unwrap();
    assert_eq!(r.status, TaskStatus::Success);
    assert!(!r.result_stored);
    assert_eq!(r.results_dropped, 1);
    srv.shutdown().await;
}

impl broker_outage::Outage for common::RestartableServer {
    async fn stop(&mut self) {
        common::RestartableServer::stop(self).await;
    }
    async fn start(&mut self) {
        self.restart().await;
    }
}

#[tokio::test]
async fn broker_outage_loses_nothing() {
    let mut srv = common::RestartableServer::start().await;
    let base = srv.base.clone();
    let r = broker_outage::run(&base, &mut srv).await.unwrap();
    assert!(
        r.statuses.iter().all(|s| *s == TaskStatus::Success),
        "{r:?}"
    );
    assert_eq!(r.distinct_runs, 40);
    assert!(r.done_at_stop < 40, "the outage happened mid-run: {r:?}");
    assert!(r.broker_errors > 0, "the worker saw the outage: {r:?}");
    srv.stop().await;
}

#[tokio::test]
async fn graceful_shutdown_finishes_or_hands_back() {
    let srv = common::start().await;
    let r = graceful_shutdown::run(&srv.base).await.unwrap();
    assert_eq!(r.finish.after_shutdown, TaskStatus::Success, "{r:?}");
    assert!(r.finish.shutdown_took >= Duration::from_secs(3), "{r:?}");
    assert_eq!(
        r.release.after_shutdown,
        TaskStatus::Pending,
        "handed back uncounted: {r:?}"
    );
    assert!(r.release.shutdown_took < Duration::from_secs(3), "{r:?}");
    assert_eq!(r.release.last, TaskStatus::Success, "{r:?}");
    srv.shutdown().await;
}

#[tokio::test]
async fn rate_limited_upstream_stays_under_quota() {
    let srv = common::start().await;
    let r = rate_limited_upstream::run(&srv.base).await.unwrap();
    assert!(
        r.statuses.iter().all(|s| *s == TaskStatus::Success),
        "{r:?}"
    );
    assert_eq!(r.over_quota, 0, "{r:?}");
    assert!(r.max_in_window <= rate_limited_upstream::QUOTA, "{r:?}");
    assert_eq!(r.requests, 21, "{r:?}");
    assert!(r.retry_gap.unwrap() >= Duration::from_millis(950), "{r:?}");
    srv.shutdown().await;
}

#[tokio::test]
async fn progress_streams_and_cancel_stops_the_handler() {
    let srv = common::start().await;
    let r = progress_and_cancel::run(&srv.base).await.unwrap();
    assert_eq!(r.a_statuses.last(), Some(&TaskStatus::Success), "{r:?}");
    assert!(r.a_progress.len() >= 3, "{r:?}");
    assert!(r.a_progress.windows(2).all(|w| w[0] <= w[1]), "{r:?}");
    assert!(r.a_progress.last().is_some_and(|p| *p >= 70.0), "{r:?}");
    assert_eq!(r.b_status, TaskStatus::Cancelled);
    assert!(r.b_epochs_run < r.b_epochs / 2, "{r:?}");
    srv.shutdown().await;
}

#[tokio::test]
async fn request_reply_returns_or_times_out() {
    let srv = common::start().await;
    let r = request_reply::run(&srv.base).await.unwrap();
    assert_eq!(r.sum, 5);
    assert!(r.is_timeout, "{r:?}");
    assert!(
        r.timeout_error.contains("did not finish within 1s"),
        "{r:?}"
    );
    assert!(r.slow_took < Duration::from_millis(2500), "{r:?}");
    srv.shutdown().await;
}
