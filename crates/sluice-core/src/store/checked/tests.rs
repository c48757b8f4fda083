//! `Checked` refuses what the shared checks refuse without calling the engine, passes
//! everything else through unchanged, and answers the ack-overlap question from the hints.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;

use super::Checked;
use crate::audit::{AuditEvent, AuditQuery};
use crate::config::limits::{MAX_BATCH, MAX_ERROR_BYTES};
use crate::config::{PutQueueOutcome, QueueConfigPatch, QueueInfo};
use crate::error::{ErrorCode, StoreError};
use crate::message::{Body, Delivery, Message, MessageId, NewMessage, Progress};
use crate::name::QueueName;
use crate::receipt::Receipt;
use crate::redrive::RedriveStep;
use crate::redrive::{RedriveControl, RedriveFilter, RedriveId, RedriveJob, RedriveSpec};
use crate::schedule::{Schedule, ScheduleName, ScheduleSpec};
use crate::stats::{QueueStats, StatsSample};
use crate::store::prelude::*;
use crate::store::{
    AckOverlap, AckRequest, BrowsePage, BrowseRequest, BrowseState, ClaimOutcome, Failure, Hints,
    IdempotencyClaim, IdempotentResponse, LeaseState, NackOutcome, QueuePage, QueuePageRequest,
    ReceiveRequest, ScheduleStep, SendOutcome, StepOutcome,
};
use crate::summary::{GroupBy, Summary, SummaryRequest};
use crate::time::Timestamp;

/// An engine that counts the calls reaching it, keeps the last failure it was given and
/// answers every call with the same error.
#[derive(Default)]
struct Probe {
    calls: AtomicUsize,
    failure: Mutex<Option<Failure>>,
    overlap: AckOverlap,
}

fn reached() -> StoreError {
    StoreError::unavailable("reached the engine")
}

impl Probe {
    fn call<T>(&self) -> Result<T, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(reached())
    }

    fn failed<T>(&self, failure: Failure) -> Result<T, StoreError> {
        *self.failure.lock().expect("probe lock") = Some(failure);
        self.call()
    }
}

#[async_trait]
impl QueueAdmin for Probe {
    async fn put_queue(
        &self,
        _: &QueueName,
        _: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        self.call()
    }
    async fn create_queue(
        &self,
        _: &QueueName,
        _: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        self.call()
    }
    async fn get_queue(&self, _: &QueueName) -> Result<QueueInfo, StoreError> {
        self.call()
    }
    async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError> {
        self.call()
    }
    async fn list_queues_page(&self, _: QueuePageRequest) -> Result<QueuePage, StoreError> {
        self.call()
    }
    async fn delete_queue(&self, _: &QueueName) -> Result<u64, StoreError> {
        self.call()
    }
    async fn force_breaker(
        &self,
        _: &QueueName,
        _: crate::adaptive::BreakerForce,
    ) -> Result<crate::adaptive::FlowStats, StoreError> {
        self.call()?;
        Err(StoreError::Conflict("no breaker".into()))
    }
    async fn force_key_breaker(
        &self,
        _: &QueueName,
        _: Option<&crate::MessageKey>,
        _: crate::adaptive::BreakerForce,
    ) -> Result<crate::adaptive::KeyFlowStats, StoreError> {
        self.call()?;
        Err(StoreError::Conflict("no breaker".into()))
    }
    async fn purge(&self, _: &QueueName) -> Result<u64, StoreError> {
        self.call()
    }
}

#[async_trait]
impl Messaging for Probe {
    async fn send(
        &self,
        _: &QueueName,
        _: Vec<NewMessage>,
    ) -> Result<Vec<SendOutcome>, StoreError> {
        self.call()
    }
    async fn receive(&self, _: &QueueName, _: ReceiveRequest) -> Result<Vec<Delivery>, StoreError> {
        self.call()
    }
    async fn ack(
        &self,
        _: &QueueName,
        _: Vec<AckRequest>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.call()
    }
    async fn nack(
        &self,
        _: &QueueName,
        _: Receipt,
        _: Option<Duration>,
        f: Failure,
    ) -> Result<NackOutcome, StoreError> {
        self.failed(f)
    }
    async fn reject(&self, _: &QueueName, _: Receipt, f: Failure) -> Result<QueueName, StoreError> {
        self.failed(f)
    }
    async fn move_message(
        &self,
        _: &QueueName,
        _: Receipt,
        _: &QueueName,
        f: Failure,
    ) -> Result<(), StoreError> {
        self.failed(f)
    }
    async fn release(&self, _: &QueueName, _: Receipt) -> Result<(), StoreError> {
        self.call()
    }
    async fn extend(
        &self,
        _: &QueueName,
        _: Receipt,
        _: Duration,
    ) -> Result<LeaseState, StoreError> {
        self.call()
    }
    async fn progress(
        &self,
        _: &QueueName,
        _: Receipt,
        _: Progress,
    ) -> Result<LeaseState, StoreError> {
        self.call()
    }
    async fn cancel(&self, _: MessageId) -> Result<Message, StoreError> {
        self.call()
    }
    fn hints(&self) -> Hints {
        Hints {
            ack_overlap: self.overlap,
            groups: false,
        }
    }
    async fn lease_may_overlap_ack(&self, _: &QueueName) -> bool {
        self.calls.fetch_add(1, Ordering::SeqCst);
        true
    }
}

#[async_trait]
impl Inspection for Probe {
    async fn stats(&self, _: &QueueName) -> Result<QueueStats, StoreError> {
        self.call()
    }
    async fn browse(&self, _: &QueueName, _: BrowseRequest) -> Result<BrowsePage, StoreError> {
        self.call()
    }
    async fn keys(
        &self,
        _: &QueueName,
        _: crate::key_stats::KeysRequest,
    ) -> Result<crate::key_stats::KeysPage, StoreError> {
        self.call()
    }
    async fn get_message(&self, _: MessageId) -> Result<Message, StoreError> {
        self.call()
    }
    async fn delete_message(&self, _: MessageId) -> Result<(), StoreError> {
        self.call()
    }
    async fn summarize(&self, _: &QueueName, _: SummaryRequest) -> Result<Summary, StoreError> {
        self.call()
    }
}

#[async_trait]
impl Redrives for Probe {
    async fn create_redrive(&self, _: RedriveSpec) -> Result<RedriveJob, StoreError> {
        self.call()
    }
    async fn get_redrive(&self, _: RedriveId) -> Result<RedriveJob, StoreError> {
        self.call()
    }
    async fn list_redrives(&self) -> Result<Vec<RedriveJob>, StoreError> {
        self.call()
    }
    async fn control_redrive(
        &self,
        _: RedriveId,
        _: RedriveControl,
    ) -> Result<RedriveJob, StoreError> {
        self.call()
    }
    async fn redrive_step(&self, _: RedriveId, _: u32) -> Result<RedriveStep, StoreError> {
        self.call()
    }
}

#[async_trait]
impl Records for Probe {
    async fn record_stats(&self, _: Vec<(QueueName, StatsSample)>) -> Result<(), StoreError> {
        self.call()
    }
    async fn stats_history(
        &self,
        _: &QueueName,
        _: Timestamp,
    ) -> Result<Vec<StatsSample>, StoreError> {
        self.call()
    }
    async fn audit_append(&self, _: Vec<AuditEvent>) -> Result<(), StoreError> {
        self.call()
    }
    async fn audit_query(&self, _: AuditQuery) -> Result<Vec<AuditEvent>, StoreError> {
        self.call()
    }
    async fn idempotency_get(&self, _: &str) -> Result<Option<IdempotentResponse>, StoreError> {
        self.call()
    }
    async fn idempotency_put(
        &self,
        _: &str,
        _: IdempotentResponse,
    ) -> Result<Option<IdempotentResponse>, StoreError> {
        self.call()
    }
    async fn idempotency_claim(
        &self,
        _: &str,
        _: IdempotencyClaim,
    ) -> Result<ClaimOutcome, StoreError> {
        self.call()
    }
    async fn idempotency_release(&self, _: &str, _: u64) -> Result<bool, StoreError> {
        self.call()
    }
}

#[async_trait]
impl Schedules for Probe {
    async fn put_schedule(
        &self,
        _: &ScheduleName,
        _: ScheduleSpec,
    ) -> Result<(Schedule, bool), StoreError> {
        self.call()
    }
    async fn get_schedule(&self, _: &ScheduleName) -> Result<Schedule, StoreError> {
        self.call()
    }
    async fn list_schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.call()
    }
    async fn delete_schedule(&self, _: &ScheduleName) -> Result<(), StoreError> {
        self.call()
    }
    async fn step_schedule(
        &self,
        _: &ScheduleName,
        _: ScheduleStep,
    ) -> Result<StepOutcome, StoreError> {
        self.call()
    }
}

/// The probe's futures never wait: one poll answers them.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a probe call waited"),
    }
}

fn q(name: &str) -> QueueName {
    QueueName::new(name).expect("valid name")
}

fn receipt() -> Receipt {
    Receipt {
        id: MessageId(1),
        token: 1,
    }
}

/// The store as the broker holds it.
fn store(overlap: AckOverlap) -> (std::sync::Arc<Checked<Probe>>, std::sync::Arc<dyn Store>) {
    let checked = std::sync::Arc::new(Checked::new(Probe {
        overlap,
        ..Probe::default()
    }));
    (checked.clone(), checked)
}

fn calls(c: &Checked<Probe>) -> usize {
    c.engine().calls.load(Ordering::SeqCst)
}

/// Asserts that `out` is the refusal `code` and that the engine was not called.
#[track_caller]
fn refused<T: std::fmt::Debug>(c: &Checked<Probe>, out: Result<T, StoreError>, code: ErrorCode) {
    let e = out.expect_err("refused");
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(calls(c), 0, "a refused call reached the engine: {e}");
}

/// Asserts that `out` came from the engine.
#[track_caller]
fn passed<T: std::fmt::Debug>(out: Result<T, StoreError>) {
    assert_eq!(out.expect_err("the probe answers an error"), reached());
}

fn spec(limit: Option<u64>) -> RedriveSpec {
    RedriveSpec {
        source: q("jobs.dlq"),
        destination: None,
        limit,
        rate: None,
        filter: RedriveFilter::default(),
        reset_receive_count: true,
        dry_run: false,
        guard: None,
    }
}

fn idem(body: usize) -> IdempotentResponse {
    IdempotentResponse {
        fingerprint: [0; 32],
        status: 200,
        body: vec![b'x'; body].into(),
        created_at: Timestamp(0),
    }
}

// Kept whole: one refusal per shared check against one probe engine whose call count must stay at
// zero throughout; the list reads as the catalogue of checks `Checked` makes.
#[test]
fn each_shared_check_refuses_before_the_engine() {
    use ErrorCode::{InvalidArgument, PayloadTooLarge};
    let (c, s) = store(AckOverlap::Never);
    let jobs = q("jobs");
    let text = || NewMessage::new(Body::text("x"));
    refused(&c, now(s.send(&jobs, vec![])), InvalidArgument);
    refused(
        &c,
        now(s.send(&jobs, vec![text(); MAX_BATCH + 1])),
        InvalidArgument,
    );
    let big = || NewMessage::new(Body::binary(vec![0; 4 * 1024 * 1024 + 1]));
    refused(
        &c,
        now(s.send(&jobs, vec![big(), big(), big(), big()])),
        PayloadTooLarge,
    );
    let mut empty_dedup = text();
    empty_dedup.dedup_id = Some(String::new());
    refused(
        &c,
        now(s.send(&jobs, vec![text(), empty_dedup])),
        InvalidArgument,
    );
    let recv = |max, wait, visibility: Option<u64>| ReceiveRequest {
        max,
        wait: Duration::from_secs(wait),
        visibility: visibility.map(Duration::from_secs),
        consumer: None,
    };
    refused(&c, now(s.receive(&jobs, recv(0, 0, None))), InvalidArgument);
    refused(
        &c,
        now(s.receive(&jobs, recv(1001, 0, None))),
        InvalidArgument,
    );
    refused(
        &c,
        now(s.receive(&jobs, recv(1, 31, None))),
        InvalidArgument,
    );
    refused(
        &c,
        now(s.receive(&jobs, recv(1, 0, Some(12 * 3600 + 1)))),
        InvalidArgument,
    );
    refused(&c, now(s.ack(&jobs, vec![])), InvalidArgument);
    let week = Duration::from_secs(7 * 24 * 3600 + 1);
    let f = Failure::default;
    refused(
        &c,
        now(s.nack(&jobs, receipt(), Some(week), f())),
        InvalidArgument,
    );
    refused(
        &c,
        now(s.move_message(&jobs, receipt(), &jobs, f())),
        ErrorCode::Conflict,
    );
    let half_day = Duration::from_secs(12 * 3600 + 1);
    refused(
        &c,
        now(s.extend(&jobs, receipt(), half_day)),
        InvalidArgument,
    );
    let progress = Progress {
        pct: 101.0,
        detail: None,
        at: Timestamp(0),
    };
    refused(
        &c,
        now(s.progress(&jobs, receipt(), progress)),
        InvalidArgument,
    );
    let browse = BrowseRequest {
        state: BrowseState::All,
        limit: 0,
        cursor: None,
    };
    refused(&c, now(s.browse(&jobs, browse)), InvalidArgument);
    let keys = crate::key_stats::KeysRequest {
        limit: 0,
        ..Default::default()
    };
    refused(&c, now(s.keys(&jobs, keys)), InvalidArgument);
    for page in [
        QueuePageRequest {
            limit: 1001,
            ..QueuePageRequest::default()
        },
        QueuePageRequest {
            prefix: "a/b".into(),
            ..QueuePageRequest::default()
        },
        QueuePageRequest {
            cursor: Some("not a cursor".into()),
            ..QueuePageRequest::default()
        },
    ] {
        refused(&c, now(s.list_queues_page(page)), InvalidArgument);
    }
    let summary = SummaryRequest {
        group_by: GroupBy::Error,
        filter: RedriveFilter::default(),
        limit: 0,
    };
    refused(&c, now(s.summarize(&jobs, summary)), InvalidArgument);
    refused(&c, now(s.create_redrive(spec(Some(0)))), InvalidArgument);
    refused(&c, now(s.idempotency_put("", idem(1))), InvalidArgument);
    refused(
        &c,
        now(s.idempotency_put("k", idem(1024 * 1024 + 1))),
        InvalidArgument,
    );
    let long_key = "k".repeat(crate::store::MAX_IDEMPOTENCY_KEY_BYTES + 1);
    refused(
        &c,
        now(s.idempotency_claim("", claim(60_000))),
        InvalidArgument,
    );
    refused(
        &c,
        now(s.idempotency_claim(&long_key, claim(60_000))),
        InvalidArgument,
    );
    refused(&c, now(s.idempotency_claim("k", claim(0))), InvalidArgument);
    refused(
        &c,
        now(s.idempotency_claim("k", claim(3_600_001))),
        InvalidArgument,
    );
    refused(&c, now(s.idempotency_release("", 1)), InvalidArgument);
    refused(
        &c,
        now(s.idempotency_release(&long_key, 1)),
        InvalidArgument,
    );
}

fn claim(lease_ms: u64) -> IdempotencyClaim {
    IdempotencyClaim {
        fingerprint: [0; 32],
        token: 1,
        lease: Duration::from_millis(lease_ms),
    }
}

#[test]
fn calls_that_pass_the_checks_reach_the_engine_once_each() {
    let (c, s) = store(AckOverlap::Never);
    let (jobs, other) = (q("jobs"), q("other"));
    let f = Failure::default;
    passed(now(s.send(&jobs, vec![NewMessage::new(Body::text("x"))])));
    passed(now(s.receive(&jobs, ReceiveRequest::default())));
    let ack = AckRequest {
        receipt: receipt(),
        result: None,
    };
    passed(now(s.ack(&jobs, vec![ack])));
    passed(now(s.nack(&jobs, receipt(), Some(Duration::ZERO), f())));
    passed(now(s.reject(&jobs, receipt(), f())));
    passed(now(s.move_message(&jobs, receipt(), &other, f())));
    passed(now(s.release(&jobs, receipt())));
    passed(now(s.extend(&jobs, receipt(), Duration::from_secs(30))));
    passed(now(s.create_redrive(spec(Some(1)))));
    passed(now(s.idempotency_put("k", idem(1))));
    passed(now(s.get_queue(&jobs)));
    passed(now(s.stats(&jobs)));
    passed(now(s.list_redrives()));
    passed(now(s.idempotency_get("k")));
    passed(now(s.list_queues_page(QueuePageRequest::default())));
    passed(now(s.idempotency_claim("k", claim(3_600_000))));
    passed(now(s.idempotency_release("k", 1)));
    assert_eq!(calls(&c), 17);
}

#[test]
fn a_long_error_reaches_the_engine_cut_to_its_limit() {
    let (c, s) = store(AckOverlap::Never);
    let failure = || Failure {
        error: Some("e".repeat(MAX_ERROR_BYTES * 2)),
        consumer: Some("w1".into()),
        retry_after: false,
    };
    let kept = || {
        c.engine()
            .failure
            .lock()
            .expect("probe lock")
            .take()
            .expect("the engine got the failure")
    };
    let jobs = q("jobs");
    passed(now(s.nack(&jobs, receipt(), None, failure())));
    let f = kept();
    assert!(f.error.as_ref().is_some_and(|e| e.len() <= MAX_ERROR_BYTES));
    assert_eq!(f.consumer.as_deref(), Some("w1"));
    passed(now(s.reject(&jobs, receipt(), failure())));
    assert!(kept().error.is_some_and(|e| e.len() <= MAX_ERROR_BYTES));
    passed(now(s.move_message(
        &jobs,
        receipt(),
        &q("other"),
        failure(),
    )));
    assert!(kept().error.is_some_and(|e| e.len() <= MAX_ERROR_BYTES));
    let short = Failure {
        error: Some("upstream 503".into()),
        consumer: None,
        retry_after: false,
    };
    passed(now(s.nack(&jobs, receipt(), None, short.clone())));
    assert_eq!(kept(), short, "a short error is kept as it is");
}

#[test]
fn a_retry_after_nack_needs_its_delay() {
    let (c, s) = store(AckOverlap::Never);
    let jobs = q("jobs");
    let congested = Failure {
        retry_after: true,
        ..Failure::default()
    };
    let e = now(s.nack(&jobs, receipt(), None, congested.clone())).expect_err("no delay");
    assert_eq!(e.code(), crate::error::ErrorCode::InvalidArgument, "{e}");
    assert_eq!(calls(&c), 0, "refused before the engine");
    passed(now(s.nack(
        &jobs,
        receipt(),
        Some(Duration::from_secs(5)),
        congested,
    )));
}

#[test]
fn ack_overlap_is_answered_from_the_hints_and_per_queue_only_by_the_engine() {
    let jobs = q("jobs");
    for (overlap, answer, asked) in [
        (AckOverlap::Never, false, 0),
        (AckOverlap::Always, true, 0),
        (AckOverlap::PerQueue, true, 1),
    ] {
        let (c, s) = store(overlap);
        assert_eq!(s.hints().ack_overlap, overlap);
        assert_eq!(now(s.lease_may_overlap_ack(&jobs)), answer, "{overlap:?}");
        assert_eq!(calls(&c), asked, "{overlap:?}");
    }
}

#[test]
fn a_consumer_name_is_at_most_128_characters() {
    use crate::config::limits::MAX_CONSUMER_CHARS;
    let jobs = q("jobs");
    let named = |n: usize| Some("é".repeat(n));
    let receive = |n| ReceiveRequest {
        consumer: named(n),
        ..ReceiveRequest::default()
    };
    let failure = |n| Failure {
        error: Some("upstream 503".into()),
        consumer: named(n),
        retry_after: false,
    };
    let (c, s) = store(AckOverlap::Never);
    refused(
        &c,
        now(s.receive(&jobs, receive(MAX_CONSUMER_CHARS + 1))),
        ErrorCode::InvalidArgument,
    );
    refused(
        &c,
        now(s.nack(&jobs, receipt(), None, failure(MAX_CONSUMER_CHARS + 1))),
        ErrorCode::InvalidArgument,
    );
    refused(
        &c,
        now(s.reject(&jobs, receipt(), failure(MAX_CONSUMER_CHARS + 1))),
        ErrorCode::InvalidArgument,
    );
    let e = now(s.receive(&jobs, receive(MAX_CONSUMER_CHARS + 1))).expect_err("refused");
    assert!(
        e.to_string()
            .contains("consumer must be at most 128 characters"),
        "{e}"
    );
    // Characters, not bytes: 128 two-byte characters pass.
    passed(now(s.receive(&jobs, receive(MAX_CONSUMER_CHARS))));
    passed(now(s.nack(
        &jobs,
        receipt(),
        None,
        failure(MAX_CONSUMER_CHARS),
    )));
}
