//! Conformance cases: one `pub async fn <case>(h: &dyn Harness)` per rule or operation.
//!
//! Over 1,000 lines: the original cases are here; newer ones live in `cases/` by concern, and
//! these move there in one restructuring.
//!
//! Every case opens its own store on a fresh [`ManualClock`] and moves virtual time with
//! `clock.advance`; only the long-poll cases measure real time. Where SPEC leaves a choice,
//! the case says which one it pins and why.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Harness;

mod redrive_control;
pub use redrive_control::*;

use super::model::{Model, Op, Place, ops_strategy};
use crate::config::{QueueConfig, QueueConfigPatch, RateLimit, limits};
use crate::error::{ErrorCode, StoreError};
use crate::message::{
    AttemptOutcome, Attributes, Body, BodyKind, DeadLetterReason, Delivery, Message, MessageId,
    MessageState, NewMessage,
};
use crate::name::QueueName;
use crate::receipt::Receipt;
use crate::stats::QueueStats;
use crate::store::{
    AckRequest, BrowseRequest, BrowseState, Failure, NackOutcome, ReceiveRequest, SendOutcome,
    Store,
};
use crate::time::{Clock, ManualClock, Timestamp};

mod create_only;
pub use create_only::queue_create_only_refuses_an_existing_queue;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

mod summary;
pub use summary::{
    summary_by_attribute_through_restart_and_redrive, summary_counts_every_dead_letter,
    summary_groups_filters_and_limits,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn qn(name: &str) -> QueueName {
    QueueName::new(name).unwrap_or_else(|e| panic!("test queue name {name:?} invalid: {e}"))
}

fn text(s: &str) -> NewMessage {
    NewMessage::new(Body::text(s))
}

fn delayed(s: &str, d: Duration) -> NewMessage {
    NewMessage {
        delay: Some(d),
        ..text(s)
    }
}

fn dedup(s: &str, id: &str) -> NewMessage {
    NewMessage {
        dedup_id: Some(id.to_owned()),
        ..text(s)
    }
}

fn fail(e: &str) -> Failure {
    Failure {
        error: Some(e.to_owned()),
        consumer: None,
    }
}

fn attrs(pairs: &[(&str, &str)]) -> Attributes {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[track_caller]
fn assert_code<T: Debug>(r: Result<T, StoreError>, code: ErrorCode, what: &str) {
    match r {
        Ok(v) => panic!("{what}: expected error `{code}`, got Ok({v:?})"),
        Err(e) => assert_eq!(e.code(), code, "{what}: expected `{code}`, got {e:?}"),
    }
}

fn ids_of(ds: &[Delivery]) -> BTreeSet<MessageId> {
    ds.iter().map(|d| d.id).collect()
}

struct Env {
    clock: ManualClock,
    store: Arc<dyn Store>,
}

async fn env(h: &dyn Harness) -> Env {
    let clock = ManualClock::default();
    let store = h.open(clock.clone()).await;
    Env { clock, store }
}

impl Env {
    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    async fn queue(&self, name: &str, patch: QueueConfigPatch) -> QueueName {
        let q = qn(name);
        self.store
            .put_queue(&q, &patch)
            .await
            .unwrap_or_else(|e| panic!("put_queue({name}, {patch:?}) failed: {e:?}"));
        q
    }

    async fn send_batch(&self, q: &QueueName, msgs: Vec<NewMessage>) -> Vec<SendOutcome> {
        let n = msgs.len();
        let out = self
            .store
            .send(q, msgs)
            .await
            .unwrap_or_else(|e| panic!("send of {n} message(s) to {q} failed: {e:?}"));
        assert_eq!(
            out.len(),
            n,
            "send to {q} must return one outcome per message"
        );
        out
    }

    async fn send(&self, q: &QueueName, m: NewMessage) -> SendOutcome {
        self.send_batch(q, vec![m]).await[0]
    }

    async fn send_text(&self, q: &QueueName, s: &str) -> MessageId {
        let o = self.send(q, text(s)).await;
        assert!(!o.duplicate, "a send without dedup_id is never a duplicate");
        o.id
    }

    async fn recv_with(&self, q: &QueueName, max: u32, vis: Option<Duration>) -> Vec<Delivery> {
        let req = ReceiveRequest {
            max,
            wait: Duration::ZERO,
            visibility: vis,
            consumer: None,
        };
        let ds = self
            .store
            .receive(q, req)
            .await
            .unwrap_or_else(|e| panic!("receive(max {max}) from {q} failed: {e:?}"));
        assert!(
            ds.len() <= max as usize,
            "receive(max {max}) from {q} returned {}",
            ds.len()
        );
        let ids = ids_of(&ds);
        assert_eq!(
            ids.len(),
            ds.len(),
            "one receive returned the same id twice: {ds:?}"
        );
        ds
    }

    async fn recv(&self, q: &QueueName, max: u32) -> Vec<Delivery> {
        self.recv_with(q, max, None).await
    }

    async fn recv_one(&self, q: &QueueName) -> Delivery {
        let mut ds = self.recv(q, 1).await;
        assert_eq!(
            ds.len(),
            1,
            "expected one message to be receivable from {q} at {:?}",
            self.now()
        );
        ds.remove(0)
    }

    async fn recv_none(&self, q: &QueueName, why: &str) {
        let ds = self.recv(q, 10).await;
        assert!(
            ds.is_empty(),
            "{why}: expected nothing receivable from {q}, got {:?}",
            ids_of(&ds)
        );
    }

    async fn ack(&self, q: &QueueName, r: Receipt) -> Result<(), StoreError> {
        let mut out = self
            .store
            .ack(
                q,
                vec![AckRequest {
                    receipt: r,
                    result: None,
                }],
            )
            .await
            .unwrap_or_else(|e| panic!("ack call on {q} failed as a whole: {e:?}"));
        assert_eq!(out.len(), 1, "ack of one receipt must return one outcome");
        out.remove(0)
    }

    async fn nack(
        &self,
        q: &QueueName,
        r: Receipt,
        delay: Option<Duration>,
        err: Option<&str>,
    ) -> Result<NackOutcome, StoreError> {
        let f = Failure {
            error: err.map(str::to_owned),
            consumer: None,
        };
        self.store.nack(q, r, delay, f).await
    }

    async fn stats(&self, q: &QueueName) -> QueueStats {
        self.store
            .stats(q)
            .await
            .unwrap_or_else(|e| panic!("stats({q}) failed: {e:?}"))
    }

    async fn get(&self, id: MessageId) -> Message {
        self.store
            .get_message(id)
            .await
            .unwrap_or_else(|e| panic!("get_message({id}) failed: {e:?}"))
    }

    async fn gone(&self, id: MessageId, why: &str) {
        assert_code(
            self.store.get_message(id).await,
            ErrorCode::MessageNotFound,
            why,
        );
    }

    /// Walks every page; returns the pages.
    async fn browse_pages(
        &self,
        q: &QueueName,
        state: BrowseState,
        limit: u32,
    ) -> Vec<Vec<Message>> {
        let mut pages = Vec::new();
        let mut cursor = None;
        loop {
            let req = BrowseRequest {
                state,
                limit,
                cursor: cursor.clone(),
            };
            let page = self.store.browse(q, req).await.unwrap_or_else(|e| {
                panic!("browse({q}, {state:?}, cursor {cursor:?}) failed: {e:?}")
            });
            assert!(
                page.messages.len() <= limit as usize,
                "browse page of {q} holds {} messages, more than limit {limit}",
                page.messages.len()
            );
            pages.push(page.messages);
            match page.next_cursor {
                Some(c) => {
                    assert!(pages.len() < 10_000, "browse of {q} never ends");
                    assert_ne!(
                        Some(&c),
                        cursor.as_ref(),
                        "browse cursor of {q} did not move"
                    );
                    cursor = Some(c);
                }
                None => break,
            }
        }
        pages
    }

    async fn browse(&self, q: &QueueName, state: BrowseState) -> Vec<Message> {
        let msgs: Vec<Message> = self
            .browse_pages(q, state, 100)
            .await
            .into_iter()
            .flatten()
            .collect();
        let ids: BTreeSet<MessageId> = msgs.iter().map(|m| m.id).collect();
        assert_eq!(
            ids.len(),
            msgs.len(),
            "browse({q}, {state:?}) lists an id twice"
        );
        msgs
    }

    async fn browse_ids(&self, q: &QueueName, state: BrowseState) -> BTreeSet<MessageId> {
        self.browse(q, state).await.iter().map(|m| m.id).collect()
    }
}

fn unlimited() -> QueueConfigPatch {
    QueueConfigPatch {
        max_receive_count: Some(0),
        dead_letter_queue: Some(None),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------------------------

/// `put_queue` creates a queue with the defaults of SPEC §3 overlaid by the patch, creates its
/// dead-letter queue (`<name>.dlq` or the named one) with the DLQ defaults, and is idempotent.
pub async fn queue_put_creates_with_defaults_and_dlq(h: &dyn Harness) {
    let e = env(h).await;
    let q = qn("jobs");
    let out = e
        .store
        .put_queue(&q, &QueueConfigPatch::default())
        .await
        .expect("put_queue(jobs)");
    assert!(out.created, "first put_queue must report created");
    assert_eq!(out.queue.name, q);
    assert_eq!(
        out.queue.config,
        QueueConfig::defaults_for(&q),
        "defaults of SPEC §3"
    );
    assert_eq!(
        out.queue.created_at,
        e.now(),
        "created_at is the store clock's now"
    );

    let dlq = e
        .store
        .get_queue(&qn("jobs.dlq"))
        .await
        .expect("jobs.dlq must be created with jobs");
    assert_eq!(
        dlq.config,
        QueueConfig::dead_letter_defaults(&qn("jobs.dlq")),
        "an automatically created DLQ has the DLQ defaults"
    );

    let patch = QueueConfigPatch {
        visibility_timeout: Some(secs(10)),
        max_receive_count: Some(3),
        dead_letter_queue: Some(Some(qn("emails-failed"))),
        max_in_flight: Some(Some(7)),
        rate_limit: Some(Some(RateLimit {
            limit: 5,
            period: secs(1),
        })),
        ..Default::default()
    };
    let q2 = qn("emails");
    let out = e
        .store
        .put_queue(&q2, &patch)
        .await
        .expect("put_queue(emails)");
    assert!(out.created);
    let want = QueueConfig::defaults_for(&q2)
        .apply(&q2, &patch)
        .expect("valid patch");
    assert_eq!(
        out.queue.config, want,
        "the patch is overlaid on the defaults"
    );
    e.store
        .get_queue(&qn("emails-failed"))
        .await
        .expect("a named dead_letter_queue that does not exist is created with the queue");

    e.advance(secs(5));
    let again = e
        .store
        .put_queue(&q2, &patch)
        .await
        .expect("second put_queue(emails)");
    assert!(
        !again.created,
        "a second put of the same queue is an update"
    );
    assert_eq!(
        again.queue.config, want,
        "putting the same patch again changes nothing"
    );
    assert_eq!(
        again.queue.created_at, out.queue.created_at,
        "created_at does not move on update"
    );
}

/// An update changes only the fields in the patch; `created_at` stays.
pub async fn queue_update_changes_only_named_fields(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("orders", QueueConfigPatch::default()).await;
    let created = e.store.get_queue(&q).await.expect("get_queue").created_at;
    e.advance(secs(3));
    let out = e
        .store
        .put_queue(
            &q,
            &QueueConfigPatch {
                visibility_timeout: Some(secs(45)),
                ..Default::default()
            },
        )
        .await
        .expect("update visibility");
    assert!(!out.created);
    assert_eq!(out.queue.config.visibility_timeout, secs(45));
    assert_eq!(
        out.queue.config.max_receive_count, 5,
        "untouched field keeps its value"
    );
    let out = e
        .store
        .put_queue(
            &q,
            &QueueConfigPatch {
                max_receive_count: Some(9),
                max_depth: Some(Some(100)),
                ..Default::default()
            },
        )
        .await
        .expect("update max_receive_count");
    assert_eq!(
        out.queue.config.visibility_timeout,
        secs(45),
        "earlier update is kept"
    );
    assert_eq!(out.queue.config.max_receive_count, 9);
    assert_eq!(out.queue.config.max_depth, Some(100));
    let out = e
        .store
        .put_queue(
            &q,
            &QueueConfigPatch {
                max_depth: Some(None),
                ..Default::default()
            },
        )
        .await
        .expect("clear max_depth");
    assert_eq!(
        out.queue.config.max_depth, None,
        "Some(None) clears an optional field"
    );
    let got = e.store.get_queue(&q).await.expect("get_queue");
    assert_eq!(
        got.config, out.queue.config,
        "get_queue shows the updated config"
    );
    assert_eq!(
        got.created_at, created,
        "created_at does not change on update"
    );
}

/// `get_queue`, `list_queues` (by name) and `delete_queue` (which deletes the messages).
pub async fn queue_get_list_delete(h: &dyn Harness) {
    let e = env(h).await;
    assert!(
        e.store.list_queues().await.expect("list_queues").is_empty(),
        "a fresh store has no queues"
    );
    let b = e.queue("b-queue", QueueConfigPatch::default()).await;
    let a = e.queue("a-queue", QueueConfigPatch::default()).await;
    let names: Vec<String> = e
        .store
        .list_queues()
        .await
        .expect("list")
        .iter()
        .map(|i| i.name.to_string())
        .collect();
    assert_eq!(
        names,
        ["a-queue", "a-queue.dlq", "b-queue", "b-queue.dlq"],
        "list_queues lists every queue (DLQs too), by name"
    );
    assert_eq!(e.store.get_queue(&b).await.expect("get b").name, b);

    let id = e.send_text(&a, "doomed").await;
    e.store.delete_queue(&a).await.expect("delete a-queue");
    assert_code(
        e.store.get_queue(&a).await,
        ErrorCode::QueueNotFound,
        "get_queue after delete",
    );
    e.gone(id, "a deleted queue's messages are deleted with it")
        .await;
    let names: Vec<String> = e
        .store
        .list_queues()
        .await
        .expect("list")
        .iter()
        .map(|i| i.name.to_string())
        .collect();
    assert!(
        !names.contains(&"a-queue".to_owned()),
        "deleted queue still listed: {names:?}"
    );
    assert!(names.contains(&"b-queue".to_owned()));
    assert_code(
        e.store.delete_queue(&a).await,
        ErrorCode::QueueNotFound,
        "second delete",
    );

    let out = e
        .store
        .put_queue(&a, &QueueConfigPatch::default())
        .await
        .expect("recreate");
    assert!(out.created, "a deleted queue can be created again");
    assert_eq!(
        e.stats(&a).await.visible,
        0,
        "a recreated queue starts empty"
    );
}

/// A queue named as another queue's `dead_letter_queue` cannot be deleted (`Conflict`).
pub async fn queue_delete_refused_while_used_as_dlq(h: &dyn Harness) {
    let e = env(h).await;
    let src = e.queue("src", QueueConfigPatch::default()).await;
    let src_dlq = qn("src.dlq");
    assert_code(
        e.store.delete_queue(&src_dlq).await,
        ErrorCode::Conflict,
        "delete src.dlq in use",
    );
    e.store
        .get_queue(&src_dlq)
        .await
        .expect("a refused delete leaves the DLQ in place");

    let shared = Some(Some(qn("shared")));
    let a = e
        .queue(
            "a",
            QueueConfigPatch {
                dead_letter_queue: shared.clone(),
                ..Default::default()
            },
        )
        .await;
    let b = e
        .queue(
            "b",
            QueueConfigPatch {
                dead_letter_queue: shared,
                ..Default::default()
            },
        )
        .await;
    assert_code(
        e.store.delete_queue(&qn("shared")).await,
        ErrorCode::Conflict,
        "shared DLQ used by a and b",
    );
    e.store.delete_queue(&a).await.expect("delete a");
    assert_code(
        e.store.delete_queue(&qn("shared")).await,
        ErrorCode::Conflict,
        "shared DLQ still used by b",
    );
    e.store.delete_queue(&b).await.expect("delete b");
    e.store
        .delete_queue(&qn("shared"))
        .await
        .expect("an unused DLQ can be deleted");

    // Pointing src elsewhere frees src.dlq.
    e.queue(
        "src",
        QueueConfigPatch {
            dead_letter_queue: Some(Some(qn("other-dlq"))),
            ..Default::default()
        },
    )
    .await;
    e.store
        .delete_queue(&src_dlq)
        .await
        .expect("src.dlq is no longer anyone's DLQ");
    let _ = src;
}

/// Every field can be changed on a live queue: a new visibility timeout applies to the next
/// receive, a pause applies at once.
pub async fn queue_config_change_is_live(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("live", QueueConfigPatch::default()).await;
    e.send_text(&q, "one").await;
    e.send_text(&q, "two").await;
    e.queue(
        "live",
        QueueConfigPatch {
            visibility_timeout: Some(secs(5)),
            ..Default::default()
        },
    )
    .await;
    let d = e.recv_one(&q).await;
    assert_eq!(
        d.lease_deadline,
        e.now().plus(secs(5)),
        "the updated visibility_timeout applies"
    );
    e.queue(
        "live",
        QueueConfigPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    e.recv_none(&q, "queue paused by update").await;
    e.advance(secs(5));
    e.recv_none(&q, "still paused after the lease ran out")
        .await;
    e.queue(
        "live",
        QueueConfigPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        e.recv(&q, 10).await.len(),
        2,
        "both messages deliverable after resume"
    );
}

// ---------------------------------------------------------------------------------------------
// Send
// ---------------------------------------------------------------------------------------------

/// A sent message comes back byte-exact, in the form it was sent, with its attributes and
/// system fields.
pub async fn send_single_round_trips_body_and_attributes(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("rt", QueueConfigPatch::default()).await;
    let t0 = e.now();
    let bodies = [
        Body::json(r#"{"n":1,"s":"é"}"#),
        Body::text("plain text"),
        Body::binary(vec![0u8, 255, 1, 2, 0xc3, 0x28]),
    ];
    let mut ids = Vec::new();
    for (i, b) in bodies.iter().enumerate() {
        let m = NewMessage {
            attributes: attrs(&[("k", "v"), ("n", &i.to_string())]),
            ..NewMessage::new(b.clone())
        };
        let o = e.send(&q, m).await;
        assert!(!o.duplicate);
        ids.push(o.id);
    }
    assert_eq!(
        ids.iter().collect::<BTreeSet<_>>().len(),
        3,
        "ids are unique"
    );
    e.advance(secs(2));
    let ds = e.recv(&q, 10).await;
    assert_eq!(ds.len(), 3, "all three are receivable");
    for d in &ds {
        let i = ids
            .iter()
            .position(|x| *x == d.id)
            .expect("delivered id was sent");
        assert_eq!(
            d.body, bodies[i],
            "body of message {i} must round-trip byte-exact with its kind"
        );
        assert_eq!(d.attributes, attrs(&[("k", "v"), ("n", &i.to_string())]));
        assert_eq!(d.receive_count, 1);
        assert_eq!(d.max_receive_count, 5);
        assert_eq!(d.enqueued_at, t0, "enqueued_at is the send time");
        assert_eq!(d.last_error, None);
        assert_eq!(
            d.lease_deadline,
            e.now().plus(secs(30)),
            "default visibility is 30 s"
        );
        let m = e.get(d.id).await;
        assert_eq!(m.queue, q);
        assert_eq!(m.state, MessageState::InFlight);
        assert_eq!(m.body.as_ref(), Some(&bodies[i]));
        assert_eq!(
            m.body.as_ref().map(|b| b.kind),
            Some([BodyKind::Json, BodyKind::Text, BodyKind::Binary][i])
        );
    }
}

/// A batch returns one id per message, in order, all stored.
pub async fn send_batch_returns_ids_in_order(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("batch", QueueConfigPatch::default()).await;
    let out = e
        .send_batch(&q, vec![text("m0"), text("m1"), text("m2")])
        .await;
    let ids: BTreeSet<MessageId> = out.iter().map(|o| o.id).collect();
    assert_eq!(ids.len(), 3, "batch ids are distinct: {out:?}");
    for (i, o) in out.iter().enumerate() {
        assert!(!o.duplicate);
        let m = e.get(o.id).await;
        assert_eq!(
            m.body,
            Some(Body::text(format!("m{i}"))),
            "outcome {i} names message m{i}"
        );
        assert_eq!(m.state, MessageState::Visible);
    }
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.totals.sent), (3, 3));
}

/// A batch holds 1–1000 messages; 0 or 1001 is `InvalidArgument` and stores nothing.
pub async fn send_batch_size_limits(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("limits", QueueConfigPatch::default()).await;
    assert_code(
        e.store.send(&q, vec![]).await,
        ErrorCode::InvalidArgument,
        "empty batch",
    );
    let too_many: Vec<NewMessage> = (0..=limits::MAX_BATCH)
        .map(|i| text(&i.to_string()))
        .collect();
    assert_code(
        e.store.send(&q, too_many).await,
        ErrorCode::InvalidArgument,
        "1001-message batch",
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.totals.sent),
        (0, 0),
        "refused batches store nothing"
    );
    let max: Vec<NewMessage> = (0..limits::MAX_BATCH)
        .map(|i| text(&i.to_string()))
        .collect();
    let out = e.send_batch(&q, max).await;
    assert_eq!(out.iter().map(|o| o.id).collect::<HashSet<_>>().len(), 1000);
    assert_eq!(
        e.stats(&q).await.visible,
        1000,
        "a 1000-message batch is accepted"
    );
}

/// A body over `max_message_bytes` is `PayloadTooLarge`; a batch with one such body, or over
/// 16 MiB in all, stores nothing.
pub async fn send_payload_too_large_is_all_or_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "small",
            QueueConfigPatch {
                max_message_bytes: Some(100),
                ..Default::default()
            },
        )
        .await;
    e.send(&q, NewMessage::new(Body::binary(vec![7u8; 100])))
        .await;
    assert_code(
        e.store
            .send(&q, vec![NewMessage::new(Body::binary(vec![7u8; 101]))])
            .await,
        ErrorCode::PayloadTooLarge,
        "101-byte body on a 100-byte queue",
    );
    assert_code(
        e.store
            .send(
                &q,
                vec![
                    text("ok"),
                    text("ok too"),
                    NewMessage::new(Body::binary(vec![1u8; 101])),
                ],
            )
            .await,
        ErrorCode::PayloadTooLarge,
        "batch with one oversized body",
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.totals.sent),
        (1, 1),
        "only the 100-byte message is stored"
    );

    let big = e
        .queue(
            "big",
            QueueConfigPatch {
                max_message_bytes: Some(limits::MAX_MESSAGE_BYTES),
                ..Default::default()
            },
        )
        .await;
    let half = limits::MAX_BATCH_BYTES / 2 + 1;
    assert_code(
        e.store
            .send(
                &big,
                vec![
                    NewMessage::new(Body::binary(vec![0u8; half])),
                    NewMessage::new(Body::binary(vec![0u8; half])),
                ],
            )
            .await,
        ErrorCode::PayloadTooLarge,
        "batch over 16 MiB in all",
    );
    assert_eq!(
        e.stats(&big).await.visible,
        0,
        "an oversized batch stores nothing"
    );
}

/// Bad attributes, dedup ids or delays are `InvalidArgument` and the batch stores nothing.
pub async fn send_invalid_message_is_all_or_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("strict", QueueConfigPatch::default()).await;
    let bad_attr = NewMessage {
        attributes: attrs(&[("", "empty key")]),
        ..text("x")
    };
    assert_code(
        e.store.send(&q, vec![text("fine"), bad_attr]).await,
        ErrorCode::InvalidArgument,
        "empty attribute key",
    );
    let bad_delay = delayed("late", limits::MAX_DELAY + secs(1));
    assert_code(
        e.store.send(&q, vec![text("fine"), bad_delay]).await,
        ErrorCode::InvalidArgument,
        "delay over 7 days",
    );
    assert_code(
        e.store.send(&q, vec![dedup("x", "")]).await,
        ErrorCode::InvalidArgument,
        "empty dedup_id",
    );
    let many: Attributes = (0..=limits::MAX_ATTRIBUTES)
        .map(|i| (format!("k{i}"), "v".to_owned()))
        .collect();
    assert_code(
        e.store
            .send(
                &q,
                vec![NewMessage {
                    attributes: many,
                    ..text("x")
                }],
            )
            .await,
        ErrorCode::InvalidArgument,
        "65 attributes",
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.totals.sent),
        (0, 0, 0),
        "refused sends store nothing"
    );
    e.send(&q, delayed("max delay", limits::MAX_DELAY)).await;
    assert_eq!(
        e.stats(&q).await.delayed,
        1,
        "a delay of exactly 7 days is allowed"
    );
}

/// A delayed message is not receivable until its delay has passed (visible at `t0 + delay`).
pub async fn send_delay_hides_message_until_due(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("later", QueueConfigPatch::default()).await;
    let t0 = e.now();
    let id = e.send(&q, delayed("soon", secs(5))).await.id;
    e.recv_none(&q, "delay not over").await;
    let m = e.get(id).await;
    assert_eq!(m.state, MessageState::Delayed);
    assert_eq!(
        m.visible_at,
        Some(t0.plus(secs(5))),
        "visible_at of a delayed message"
    );
    assert_eq!(
        e.browse_ids(&q, BrowseState::Delayed).await,
        BTreeSet::from([id])
    );
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed), (0, 1));
    e.advance(ms(4_999));
    e.recv_none(&q, "1 ms before the delay ends").await;
    e.advance(ms(1));
    let d = e.recv_one(&q).await;
    assert_eq!(d.id, id, "receivable exactly when the delay ends");
}

/// The queue's `delay` applies to messages sent without one; an explicit delay (even zero)
/// overrides it.
pub async fn send_uses_queue_default_delay(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "slow",
            QueueConfigPatch {
                delay: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let deferred = e.send_text(&q, "default delay").await;
    let now_id = e
        .send(&q, delayed("explicit zero", Duration::ZERO))
        .await
        .id;
    let ds = e.recv(&q, 10).await;
    assert_eq!(
        ids_of(&ds),
        BTreeSet::from([now_id]),
        "only the explicit-zero message is visible"
    );
    e.advance(ms(9_999));
    e.recv_none(&q, "queue default delay not over").await;
    e.advance(ms(1));
    assert_eq!(e.recv_one(&q).await.id, deferred);
}

// ---------------------------------------------------------------------------------------------
// Dedup
// ---------------------------------------------------------------------------------------------

/// Inside `dedup_window` (counted from the first send) a repeated `dedup_id` returns the first
/// id with `duplicate = true` and stores nothing, even after the first was acked; after the
/// window a new message is stored.
pub async fn dedup_within_window_returns_first_id(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "dd",
            QueueConfigPatch {
                dedup_window: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let first = e.send(&q, dedup("A", "order-1")).await;
    assert!(!first.duplicate);
    let second = e.send(&q, dedup("B", "order-1")).await;
    assert_eq!(
        second,
        crate::store::SendOutcome {
            id: first.id,
            duplicate: true
        },
        "same dedup_id"
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.totals.sent),
        (1, 1),
        "a duplicate stores nothing"
    );
    let d = e.recv_one(&q).await;
    assert_eq!(d.body, Body::text("A"), "the first body is kept");
    e.ack(&q, d.receipt).await.expect("ack");
    e.advance(secs(30));
    let third = e.send(&q, dedup("C", "order-1")).await;
    assert_eq!(
        (third.id, third.duplicate),
        (first.id, true),
        "still inside the window after ack"
    );
    assert_eq!(e.stats(&q).await.visible, 0);
    e.advance(ms(30_001));
    let fourth = e.send(&q, dedup("D", "order-1")).await;
    assert!(
        !fourth.duplicate,
        "after the window the dedup_id is forgotten"
    );
    assert_ne!(fourth.id, first.id);
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.totals.sent), (1, 2));
}

/// Dedup inside one batch, per queue, and off with a zero window.
pub async fn dedup_within_batch_per_queue_and_disabled(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("dd1", QueueConfigPatch::default()).await;
    let out = e
        .send_batch(
            &q,
            vec![dedup("1", "y"), dedup("2", "y"), dedup("3", "z"), text("4")],
        )
        .await;
    assert!(
        !out[0].duplicate && !out[2].duplicate && !out[3].duplicate,
        "{out:?}"
    );
    assert_eq!(
        (out[1].id, out[1].duplicate),
        (out[0].id, true),
        "repeat within one batch: {out:?}"
    );
    assert_ne!(out[2].id, out[0].id);
    assert_eq!(
        e.stats(&q).await.visible,
        3,
        "three distinct messages stored"
    );
    assert_eq!(e.get(out[0].id).await.dedup_id.as_deref(), Some("y"));

    let other = e.queue("dd2", QueueConfigPatch::default()).await;
    let o = e.send(&other, dedup("1", "y")).await;
    assert!(!o.duplicate, "dedup ids are per queue");
    assert_ne!(o.id, out[0].id);

    let off = e
        .queue(
            "dd3",
            QueueConfigPatch {
                dedup_window: Some(Duration::ZERO),
                ..Default::default()
            },
        )
        .await;
    let a = e.send(&off, dedup("1", "k")).await;
    let b = e.send(&off, dedup("2", "k")).await;
    assert!(
        !a.duplicate && !b.duplicate && a.id != b.id,
        "a zero dedup_window disables dedup"
    );
    assert_eq!(e.stats(&off).await.visible, 2);
}

// ---------------------------------------------------------------------------------------------
// Receive
// ---------------------------------------------------------------------------------------------

/// Rule 1: receive increments `receive_count` and leases until `now + visibility`; a leased
/// message is not delivered again while the lease lasts.
pub async fn receive_increments_count_and_leases(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("r", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    assert_eq!(e.get(id).await.receive_count, 0);
    let t0 = e.now();
    let d = e.recv_one(&q).await;
    assert_eq!((d.id, d.receive_count), (id, 1));
    assert_eq!(d.lease_deadline, t0.plus(secs(30)));
    let m = e.get(id).await;
    assert_eq!(
        (m.state, m.receive_count, m.visible_at),
        (MessageState::InFlight, 1, Some(t0.plus(secs(30))))
    );
    e.advance(ms(29_999));
    e.recv_none(&q, "leased until t0+30s").await;
    e.advance(ms(1));
    let d2 = e.recv_one(&q).await;
    assert_eq!(
        (d2.id, d2.receive_count),
        (id, 2),
        "second delivery counts 2"
    );
    assert_ne!(d2.receipt, d.receipt, "each delivery gets its own receipt");
    assert_eq!(d2.lease_deadline, e.now().plus(secs(30)));
}

/// A receive's `visibility` overrides the queue's `visibility_timeout`.
pub async fn receive_visibility_override(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("rv", QueueConfigPatch::default()).await;
    e.send_text(&q, "x").await;
    let t0 = e.now();
    let ds = e.recv_with(&q, 1, Some(secs(5))).await;
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].lease_deadline, t0.plus(secs(5)), "override of 5 s");
    e.advance(ms(4_999));
    e.recv_none(&q, "override lease not over").await;
    e.advance(ms(1));
    let d = e.recv_with(&q, 1, Some(secs(12 * 3600))).await;
    assert_eq!(d.len(), 1, "visible again when the 5 s lease ends");
    assert_eq!(
        d[0].lease_deadline,
        e.now().plus(secs(12 * 3600)),
        "12 h is allowed"
    );
}

/// A receive returns up to `max` distinct messages: all it can when fewer are visible.
pub async fn receive_respects_max(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("rm", QueueConfigPatch::default()).await;
    let sent: BTreeSet<MessageId> = e
        .send_batch(&q, (0..5).map(|i| text(&i.to_string())).collect())
        .await
        .iter()
        .map(|o| o.id)
        .collect();
    let a = e.recv(&q, 3).await;
    assert_eq!(a.len(), 3, "max 3 of 5 visible");
    let b = e.recv(&q, 3).await;
    assert_eq!(b.len(), 2, "the remaining 2");
    e.recv_none(&q, "all leased").await;
    let all: BTreeSet<MessageId> = ids_of(&a).union(&ids_of(&b)).copied().collect();
    assert_eq!(all, sent, "each message delivered once");
    assert_eq!(e.stats(&q).await.in_flight, 5);
}

// ---------------------------------------------------------------------------------------------
// Ack
// ---------------------------------------------------------------------------------------------

/// Ack removes the message; `get_message` shows a Completed record with the result (and no
/// body) until `result_ttl` after the ack, then `MessageNotFound`.
pub async fn ack_completes_and_keeps_result_for_result_ttl(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ack",
            QueueConfigPatch {
                result_ttl: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "work").await;
    let d = e.recv_one(&q).await;
    e.advance(secs(1));
    let acked_at = e.now();
    let out = e
        .store
        .ack(
            &q,
            vec![AckRequest {
                receipt: d.receipt,
                result: Some(Body::json(r#"{"ok":true}"#)),
            }],
        )
        .await
        .expect("ack call");
    assert_eq!(out, vec![Ok(())]);
    let m = e.get(id).await;
    assert_eq!(m.state, MessageState::Completed);
    assert_eq!(
        m.result,
        Some(Body::json(r#"{"ok":true}"#)),
        "result kept with the record"
    );
    assert_eq!(m.completed_at, Some(acked_at));
    assert_eq!(m.body, None, "a completed record has no body");
    assert_eq!(m.queue, q);
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight, s.completed, s.totals.acked),
        (0, 0, 1, 1)
    );
    e.advance(secs(30));
    e.recv_none(&q, "acked message is gone from the queue")
        .await;
    assert!(e.browse_ids(&q, BrowseState::Visible).await.is_empty());
    e.advance(ms(29_999));
    assert_eq!(
        e.get(id).await.state,
        MessageState::Completed,
        "kept for result_ttl after the ack"
    );
    e.advance(ms(2));
    e.gone(id, "completed record after result_ttl").await;
    assert_eq!(e.stats(&q).await.completed, 0);
}

/// A result over `max_message_bytes` fails its own receipt with `PayloadTooLarge` and changes
/// nothing: the lease still holds and can be acked afterwards. The other receipts of the batch
/// are acked.
pub async fn ack_result_over_max_message_bytes_fails_only_its_receipt(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ackbig",
            QueueConfigPatch {
                max_message_bytes: Some(100),
                result_ttl: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let big_id = e.send_text(&q, "big result").await;
    let small_id = e.send_text(&q, "small result").await;
    let first = e.recv_one(&q).await;
    let second = e.recv_one(&q).await;
    let (big, small) = if first.id == big_id {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(small.id, small_id);
    let out = e
        .store
        .ack(
            &q,
            vec![
                AckRequest {
                    receipt: big.receipt,
                    result: Some(Body::text("x".repeat(101))),
                },
                AckRequest {
                    receipt: small.receipt,
                    result: Some(Body::text("ok")),
                },
            ],
        )
        .await
        .expect("ack call");
    assert_eq!(out.len(), 2);
    assert!(
        matches!(out[0], Err(StoreError::PayloadTooLarge(_))),
        "oversized result: {:?}",
        out[0]
    );
    assert_eq!(out[1], Ok(()), "the other receipt is acked");
    assert_eq!(e.get(small_id).await.state, MessageState::Completed);
    assert_eq!(
        e.get(big_id).await.state,
        MessageState::InFlight,
        "the refused ack changed nothing"
    );
    let again = e
        .store
        .ack(
            &q,
            vec![AckRequest {
                receipt: big.receipt,
                result: None,
            }],
        )
        .await
        .expect("ack call");
    assert_eq!(again, vec![Ok(())], "the lease still held");
}

/// With `result_ttl` 0 no completed record is kept.
pub async fn ack_with_zero_result_ttl_keeps_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ack0",
            QueueConfigPatch {
                result_ttl: Some(Duration::ZERO),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "work").await;
    let d = e.recv_one(&q).await;
    e.store
        .ack(
            &q,
            vec![AckRequest {
                receipt: d.receipt,
                result: Some(Body::text("r")),
            }],
        )
        .await
        .expect("ack call")[0]
        .clone()
        .expect("ack");
    e.gone(id, "result_ttl 0 keeps no record").await;
    assert_eq!(e.stats(&q).await.totals.acked, 1);
}

/// A batch ack of many receipts (engines may take another path for long ones): each
/// receipt succeeds or fails on its own and each result stays with its own message; with
/// `result_ttl` 0 no record stays at all.
pub async fn long_ack_batch_pairs_each_receipt(h: &dyn Harness) {
    let e = env(h).await;
    for (name, ttl) in [("ackl", None), ("ackl0", Some(Duration::ZERO))] {
        let patch = QueueConfigPatch {
            result_ttl: ttl,
            ..QueueConfigPatch::default()
        };
        let q = e.queue(name, patch).await;
        e.send_batch(&q, (0..40).map(|i| text(&i.to_string())).collect())
            .await;
        let ds = e.recv(&q, 40).await;
        assert_eq!(ds.len(), 40);
        e.ack(&q, ds[7].receipt).await.expect("ack one first");
        let reqs = ds
            .iter()
            .enumerate()
            .map(|(i, d)| AckRequest {
                receipt: d.receipt,
                result: (i % 2 == 0).then(|| Body::text(format!("r{}", d.id.0))),
            })
            .collect();
        let out = e.store.ack(&q, reqs).await.expect("batch ack call");
        assert_eq!(out.len(), 40);
        for (i, (o, d)) in out.iter().zip(&ds).enumerate() {
            if i == 7 {
                assert_code(o.clone(), ErrorCode::ReceiptStale, "receipt acked before");
            } else {
                assert_eq!(*o, Ok(()), "{name}: receipt {i}");
            }
            if ttl.is_some() {
                e.gone(d.id, "result_ttl 0 keeps no record").await;
            } else if i != 7 {
                let want = (i % 2 == 0).then(|| Body::text(format!("r{}", d.id.0)));
                assert_eq!(e.get(d.id).await.result, want, "result of receipt {i}");
            }
        }
        let s = e.stats(&q).await;
        assert_eq!((s.in_flight, s.totals.acked), (0, 40), "{name}");
    }
}

/// A batch ack answers per receipt: good ones succeed, a stale one fails alone.
pub async fn ack_batch_reports_each_receipt(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("ackb", QueueConfigPatch::default()).await;
    e.send_batch(&q, vec![text("1"), text("2"), text("3")])
        .await;
    let ds = e.recv(&q, 3).await;
    assert_eq!(ds.len(), 3);
    e.ack(&q, ds[0].receipt).await.expect("ack first");
    let out = e
        .store
        .ack(
            &q,
            vec![
                AckRequest {
                    receipt: ds[1].receipt,
                    result: Some(Body::text("r1")),
                },
                AckRequest {
                    receipt: ds[0].receipt,
                    result: None,
                },
                AckRequest {
                    receipt: ds[2].receipt,
                    result: Some(Body::text("r2")),
                },
            ],
        )
        .await
        .expect("batch ack call");
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], Ok(()));
    assert_code(
        out[1].clone(),
        ErrorCode::ReceiptStale,
        "already-acked receipt in a batch",
    );
    assert_eq!(out[2], Ok(()));
    assert_eq!(
        e.get(ds[1].id).await.result,
        Some(Body::text("r1")),
        "each ack keeps its own result"
    );
    assert_eq!(e.get(ds[2].id).await.result, Some(Body::text("r2")));
    let s = e.stats(&q).await;
    assert_eq!((s.in_flight, s.totals.acked), (0, 3));
}

// ---------------------------------------------------------------------------------------------
// Nack
// ---------------------------------------------------------------------------------------------

/// Rule 2: a nack with a delay makes the message visible after exactly that delay, and stores
/// the error as `last_error` and in `attempts`.
pub async fn nack_with_explicit_delay(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("nd", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    let t = e.now();
    let out = e
        .store
        .nack(
            &q,
            d.receipt,
            Some(secs(7)),
            Failure {
                error: Some("boom".into()),
                consumer: Some("w1".into()),
            },
        )
        .await
        .expect("nack");
    assert_eq!(
        out,
        NackOutcome {
            state: Some(MessageState::Delayed),
            queue: q.clone()
        }
    );
    let m = e.get(id).await;
    assert_eq!(
        (m.state, m.visible_at),
        (MessageState::Delayed, Some(t.plus(secs(7))))
    );
    assert_eq!(m.last_error.as_deref(), Some("boom"));
    let last = m.attempts.last().expect("the nack is recorded in attempts");
    assert_eq!(last.outcome, AttemptOutcome::Nacked);
    assert_eq!(last.error.as_deref(), Some("boom"));
    assert_eq!(last.consumer.as_deref(), Some("w1"));
    assert_eq!(last.at, t);
    let s = e.stats(&q).await;
    assert_eq!((s.delayed, s.in_flight, s.totals.nacked), (1, 0, 1));
    e.advance(ms(6_999));
    e.recv_none(&q, "nack delay not over").await;
    e.advance(ms(1));
    let d2 = e.recv_one(&q).await;
    assert_eq!((d2.id, d2.receive_count), (id, 2));
    assert_eq!(
        d2.last_error.as_deref(),
        Some("boom"),
        "the delivery carries last_error"
    );
}

/// A nack with a zero delay makes the message visible at once.
pub async fn nack_with_zero_delay_is_visible_at_once(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("nz", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    let out = e
        .nack(&q, d.receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    assert_eq!(
        out,
        NackOutcome {
            state: Some(MessageState::Visible),
            queue: q.clone()
        }
    );
    let d2 = e.recv_one(&q).await;
    assert_eq!((d2.id, d2.receive_count), (id, 2));
}

/// Rule 2: without a delay the retry waits a jittered backoff of at most
/// `min(backoff_max, backoff_base * 2^(receive_count-1))`, and the jitter spreads retries.
pub async fn nack_backoff_stays_under_capped_ceiling(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "nb",
            QueueConfigPatch {
                backoff_base: Some(secs(10)),
                backoff_max: Some(secs(25)),
                max_receive_count: Some(10),
                visibility_timeout: Some(secs(600)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..20).map(|i| text(&i.to_string())).collect())
        .await;
    // Ceilings after the 1st, 2nd and 3rd delivery: 10 s, 20 s, min(25 s, 40 s).
    for (round, ceiling) in [(1u32, secs(10)), (2, secs(20)), (3, secs(25))] {
        let ds = e.recv(&q, 20).await;
        assert_eq!(
            ds.len(),
            20,
            "round {round}: all 20 are visible again after the ceiling"
        );
        let t = e.now();
        for d in &ds {
            assert_eq!(d.receive_count, round);
            let out = e
                .nack(&q, d.receipt, None, Some("transient"))
                .await
                .expect("nack");
            assert!(
                matches!(
                    out.state,
                    Some(MessageState::Visible | MessageState::Delayed)
                ) && out.queue == q,
                "round {round}: nack below max_receive_count retries in the same queue, got {out:?}"
            );
        }
        for m in e.browse(&q, BrowseState::Delayed).await {
            let at = m.visible_at.expect("a delayed message has visible_at");
            assert!(
                at <= t.plus(ceiling),
                "round {round}: retry of {} at +{:?}, beyond the ceiling {ceiling:?}",
                m.id,
                at.since(t)
            );
        }
        if round == 1 {
            e.advance(ceiling / 2);
            assert!(
                e.stats(&q).await.visible >= 1,
                "full jitter: of 20 retries at least one is due within half the ceiling"
            );
            e.advance(ceiling / 2);
        } else {
            e.advance(ceiling);
        }
        let s = e.stats(&q).await;
        assert_eq!(
            (s.visible, s.delayed),
            (20, 0),
            "round {round}: all due by the ceiling {ceiling:?}"
        );
    }
}

/// Rules 2 and 10: a nack on the last attempt dead-letters (reason `exhausted`) keeping id,
/// body, attributes, `last_error`, `attempts` and `source_queue`.
pub async fn nack_on_last_attempt_dead_letters(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "nl",
            QueueConfigPatch {
                max_receive_count: Some(2),
                ..Default::default()
            },
        )
        .await;
    let dlq = qn("nl.dlq");
    let body = Body::json(r#"{"task":"t"}"#);
    let id = e
        .send(
            &q,
            NewMessage {
                attributes: attrs(&[("tenant", "7")]),
                ..NewMessage::new(body.clone())
            },
        )
        .await
        .id;
    let d = e.recv_one(&q).await;
    let out = e
        .nack(&q, d.receipt, Some(Duration::ZERO), Some("e1"))
        .await
        .expect("nack 1");
    assert_eq!(
        out.state,
        Some(MessageState::Visible),
        "first nack of 2 retries"
    );
    let d = e.recv_one(&q).await;
    assert_eq!(d.receive_count, 2);
    let out = e
        .nack(&q, d.receipt, Some(Duration::ZERO), Some("e2"))
        .await
        .expect("nack 2");
    assert_eq!(
        out,
        NackOutcome {
            state: None,
            queue: dlq.clone()
        },
        "nack on the last attempt dead-letters"
    );
    let t = e.now();

    let m = e.get(id).await;
    assert_eq!(m.queue, dlq, "the message is in the DLQ");
    assert_eq!(
        m.state,
        MessageState::Visible,
        "a dead letter is an ordinary visible message of the DLQ"
    );
    let dl = m.dead_letter.clone().expect("dead_letter set in the DLQ");
    assert_eq!((dl.reason, dl.at), (DeadLetterReason::Exhausted, t));
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.body.as_ref(), Some(&body));
    assert_eq!(m.attributes, attrs(&[("tenant", "7")]));
    assert_eq!(m.last_error.as_deref(), Some("e2"));
    let errs: Vec<_> = m
        .attempts
        .iter()
        .map(|a| (a.outcome, a.error.as_deref()))
        .collect();
    assert_eq!(
        errs,
        [
            (AttemptOutcome::Nacked, Some("e1")),
            (AttemptOutcome::Nacked, Some("e2"))
        ]
    );

    e.recv_none(&q, "dead-lettered message is not in the source")
        .await;
    assert_eq!(
        e.browse_ids(&dlq, BrowseState::Visible).await,
        BTreeSet::from([id])
    );
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.in_flight, s.dead_letter_depth), (0, 0, 1));
    assert_eq!((s.totals.nacked, s.totals.dead_lettered), (2, 1));
    let dd = e.recv_one(&dlq).await;
    assert_eq!(
        (dd.id, &dd.body),
        (id, &body),
        "the DLQ delivers it like any queue"
    );
}

// ---------------------------------------------------------------------------------------------
// Lease expiry
// ---------------------------------------------------------------------------------------------

/// Rule 3: an expired lease below the limit makes the message visible again at once.
pub async fn lease_expiry_makes_message_visible_again(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "le",
            QueueConfigPatch {
                max_receive_count: Some(3),
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    e.advance(secs(10));
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight, s.delayed),
        (1, 0, 0),
        "visible at once when the lease ends"
    );
    assert_eq!(e.get(id).await.state, MessageState::Visible);
    let d2 = e.recv_one(&q).await;
    assert_eq!((d2.id, d2.receive_count), (id, 2));
    assert_ne!(d2.receipt, d.receipt);
    let m = e.get(id).await;
    assert!(
        m.attempts
            .iter()
            .any(|a| a.outcome == AttemptOutcome::LeaseExpired),
        "the expired lease is recorded in attempts: {:?}",
        m.attempts
    );
}

/// Rule 3: an expired lease on the last attempt dead-letters (reason `lease_expired`), seen by
/// any call (here `get_message` first).
pub async fn lease_expiry_on_last_attempt_dead_letters(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "lx",
            QueueConfigPatch {
                max_receive_count: Some(2),
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let dlq = qn("lx.dlq");
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some("e1"))
        .await
        .expect("nack");
    let d = e.recv_one(&q).await;
    assert_eq!(d.receive_count, 2);
    e.advance(secs(10));
    let m = e.get(id).await;
    assert_eq!(
        m.queue, dlq,
        "lease ran out on the last attempt: message belongs to the DLQ"
    );
    assert_eq!(
        m.dead_letter.as_ref().map(|d| d.reason),
        Some(DeadLetterReason::LeaseExpired)
    );
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.last_error.as_deref(), Some("e1"), "last_error is kept");
    assert_eq!(m.body, Some(Body::text("x")));
    e.recv_none(&q, "not redelivered from the source").await;
    let s = e.stats(&q).await;
    assert_eq!(
        (
            s.visible,
            s.in_flight,
            s.dead_letter_depth,
            s.totals.dead_lettered
        ),
        (0, 0, 1, 1)
    );
    assert_eq!(
        e.browse_ids(&dlq, BrowseState::All).await,
        BTreeSet::from([id])
    );
    assert_code(
        e.ack(&q, d.receipt).await,
        ErrorCode::ReceiptStale,
        "receipt of the expired last lease",
    );
}

// ---------------------------------------------------------------------------------------------
// Reject, move, extend
// ---------------------------------------------------------------------------------------------

/// Rule 4: reject dead-letters now (reason `rejected`) on the first attempt of five, into the
/// configured DLQ, which it returns.
pub async fn reject_dead_letters_whatever_the_count(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "rj",
            QueueConfigPatch {
                dead_letter_queue: Some(Some(qn("poison"))),
                ..Default::default()
            },
        )
        .await;
    let id = e
        .send(
            &q,
            NewMessage {
                attributes: attrs(&[("a", "b")]),
                ..text("bad")
            },
        )
        .await
        .id;
    let d = e.recv_one(&q).await;
    assert_eq!(d.receive_count, 1);
    let to = e
        .store
        .reject(&q, d.receipt, fail("unparseable"))
        .await
        .expect("reject");
    assert_eq!(to, qn("poison"), "reject returns the DLQ");
    let m = e.get(id).await;
    assert_eq!(m.queue, qn("poison"));
    assert_eq!(
        m.dead_letter.as_ref().map(|d| d.reason),
        Some(DeadLetterReason::Rejected)
    );
    assert_eq!(m.last_error.as_deref(), Some("unparseable"));
    assert_eq!(
        m.attempts.last().map(|a| a.outcome),
        Some(AttemptOutcome::Rejected)
    );
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.attributes, attrs(&[("a", "b")]));
    e.recv_none(&q, "rejected message left the source").await;
    let s = e.stats(&q).await;
    assert_eq!(
        (s.in_flight, s.dead_letter_depth, s.totals.dead_lettered),
        (0, 1, 1)
    );
}

/// Reject on a queue without a DLQ (unlimited attempts, no `dead_letter_queue`) is `Conflict`
/// and leaves the lease as it was.
pub async fn reject_without_dlq_is_conflict(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("nodlq", unlimited()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    assert_code(
        e.store.reject(&q, d.receipt, fail("no")).await,
        ErrorCode::Conflict,
        "reject without DLQ",
    );
    let m = e.get(id).await;
    assert_eq!(
        (m.queue, m.state, m.dead_letter),
        (q.clone(), MessageState::InFlight, None)
    );
    e.ack(&q, d.receipt)
        .await
        .expect("the receipt is still valid after the refused reject");
}

/// Rule 5: move puts the leased message in the target queue as a visible message, same id,
/// body and attributes, `source_queue` set, gone from the source.
pub async fn move_puts_message_in_target_queue(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let un = e.queue("work.unprocessable", unlimited()).await;
    let id = e
        .send(
            &q,
            NewMessage {
                attributes: attrs(&[("x", "1")]),
                ..text("%%garbage")
            },
        )
        .await
        .id;
    let d = e.recv_one(&q).await;
    e.store
        .move_message(&q, d.receipt, &un, fail("cannot decode"))
        .await
        .expect("move");
    let m = e.get(id).await;
    assert_eq!(
        (m.queue.clone(), m.state),
        (un.clone(), MessageState::Visible),
        "moved and visible"
    );
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.body, Some(Body::text("%%garbage")));
    assert_eq!(m.attributes, attrs(&[("x", "1")]));
    assert_eq!(m.last_error.as_deref(), Some("cannot decode"));
    assert_eq!(
        m.attempts.last().map(|a| a.outcome),
        Some(AttemptOutcome::Moved)
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight, s.dead_letter_depth),
        (0, 0, 0),
        "gone from the source, not dead-lettered"
    );
    e.recv_none(&q, "moved message left the source").await;
    assert_eq!(
        e.browse_ids(&un, BrowseState::Visible).await,
        BTreeSet::from([id])
    );
    assert_code(
        e.ack(&q, d.receipt).await,
        ErrorCode::ReceiptStale,
        "receipt after move",
    );
    let d2 = e.recv_one(&un).await;
    assert_eq!((d2.id, d2.body), (id, Body::text("%%garbage")));
}

/// Move to a queue that does not exist is `QueueNotFound`, and to the message's own queue
/// `InvalidArgument`; neither changes anything.
pub async fn move_to_unknown_queue_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("mv", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    assert_code(
        e.store.move_message(&q, d.receipt, &q, fail("x")).await,
        ErrorCode::InvalidArgument,
        "move to the own queue",
    );
    assert_code(
        e.store
            .move_message(&q, d.receipt, &qn("nowhere"), fail("x"))
            .await,
        ErrorCode::QueueNotFound,
        "move to unknown queue",
    );
    let m = e.get(id).await;
    assert_eq!(
        (m.queue.clone(), m.state, m.last_error),
        (q.clone(), MessageState::InFlight, None)
    );
    assert_code(
        e.store.get_queue(&qn("nowhere")).await,
        ErrorCode::QueueNotFound,
        "move does not create queues",
    );
    e.ack(&q, d.receipt)
        .await
        .expect("receipt still valid after the refused move");
}

/// Extend sets the lease to end `visibility` from now; the message is not redelivered before.
pub async fn extend_moves_lease_deadline(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ex",
            QueueConfigPatch {
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "x").await;
    let t0 = e.now();
    let d = e.recv_one(&q).await;
    e.advance(secs(5));
    let deadline = e
        .store
        .extend(&q, d.receipt, secs(20))
        .await
        .expect("extend")
        .deadline;
    assert_eq!(
        deadline,
        t0.plus(secs(25)),
        "extend returns now + visibility"
    );
    assert_eq!(e.get(id).await.visible_at, Some(t0.plus(secs(25))));
    assert_code(
        e.store
            .extend(&q, d.receipt, limits::MAX_VISIBILITY + secs(1))
            .await,
        ErrorCode::InvalidArgument,
        "extend over 12 h",
    );
    assert_eq!(
        e.get(id).await.visible_at,
        Some(t0.plus(secs(25))),
        "a refused extend changes nothing"
    );
    e.advance(ms(19_999)); // t0 + 24.999 s
    e.recv_none(&q, "extended lease not over").await;
    assert_eq!(e.get(id).await.state, MessageState::InFlight);
    e.advance(ms(1));
    let d2 = e.recv_one(&q).await;
    assert_eq!(
        (d2.id, d2.receive_count),
        (id, 2),
        "visible when the extended lease ends"
    );
}

// ---------------------------------------------------------------------------------------------
// Receipts
// ---------------------------------------------------------------------------------------------

/// Rule 6: after the lease expired and the message was delivered again, the old receipt fails
/// with `ReceiptStale` for every operation and changes nothing.
pub async fn stale_receipt_after_redelivery_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "st",
            QueueConfigPatch {
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let other = e.queue("st-other", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let r1 = e.recv_one(&q).await.receipt;
    e.advance(secs(10));
    let d2 = e.recv_one(&q).await;
    let deadline = d2.lease_deadline;
    assert_eq!(d2.receive_count, 2);

    assert_code(
        e.ack(&q, r1).await,
        ErrorCode::ReceiptStale,
        "ack with old receipt",
    );
    assert_code(
        e.nack(&q, r1, Some(Duration::ZERO), Some("x")).await,
        ErrorCode::ReceiptStale,
        "nack with old receipt",
    );
    assert_code(
        e.store.reject(&q, r1, fail("x")).await,
        ErrorCode::ReceiptStale,
        "reject with old receipt",
    );
    assert_code(
        e.store.move_message(&q, r1, &other, fail("x")).await,
        ErrorCode::ReceiptStale,
        "move with old receipt",
    );
    assert_code(
        e.store.extend(&q, r1, secs(100)).await,
        ErrorCode::ReceiptStale,
        "extend with old receipt",
    );

    let m = e.get(id).await;
    assert_eq!(
        (m.queue.clone(), m.state, m.receive_count),
        (q.clone(), MessageState::InFlight, 2)
    );
    assert_eq!(
        m.visible_at,
        Some(deadline),
        "stale extend did not move the lease"
    );
    assert_eq!(m.last_error, None, "stale nack/reject/move stored no error");
    assert!(
        m.attempts
            .iter()
            .all(|a| a.outcome == AttemptOutcome::LeaseExpired),
        "stale calls record no attempts: {:?}",
        m.attempts
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (
            s.in_flight,
            s.dead_letter_depth,
            s.totals.acked,
            s.totals.nacked,
            s.totals.dead_lettered
        ),
        (1, 0, 0, 0, 0)
    );
    assert_eq!(e.stats(&other).await.visible, 0, "stale move moved nothing");
    e.ack(&q, d2.receipt)
        .await
        .expect("the current receipt still works");
}

/// Rule 6: after an ack (message gone) or a nack (delivery over) the receipt is stale.
pub async fn stale_receipt_after_ack_or_nack_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("sa", QueueConfigPatch::default()).await;
    let other = e.queue("sa-other", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let r = e.recv_one(&q).await.receipt;
    e.ack(&q, r).await.expect("ack");
    assert_code(e.ack(&q, r).await, ErrorCode::ReceiptStale, "second ack");
    assert_code(
        e.nack(&q, r, None, Some("x")).await,
        ErrorCode::ReceiptStale,
        "nack after ack",
    );
    assert_code(
        e.store.reject(&q, r, fail("x")).await,
        ErrorCode::ReceiptStale,
        "reject after ack",
    );
    assert_code(
        e.store.move_message(&q, r, &other, fail("x")).await,
        ErrorCode::ReceiptStale,
        "move after ack",
    );
    assert_code(
        e.store.extend(&q, r, secs(5)).await,
        ErrorCode::ReceiptStale,
        "extend after ack",
    );
    assert_eq!(e.get(id).await.state, MessageState::Completed);
    let s = e.stats(&q).await;
    assert_eq!(
        (
            s.totals.acked,
            s.totals.nacked,
            s.totals.dead_lettered,
            s.dead_letter_depth
        ),
        (1, 0, 0, 0)
    );
    assert_eq!(e.stats(&other).await.visible, 0);

    let id2 = e.send_text(&q, "y").await;
    let r2 = e.recv_one(&q).await.receipt;
    e.nack(&q, r2, Some(secs(5)), None).await.expect("nack");
    assert_code(
        e.ack(&q, r2).await,
        ErrorCode::ReceiptStale,
        "ack after nack",
    );
    assert_code(
        e.store.extend(&q, r2, secs(60)).await,
        ErrorCode::ReceiptStale,
        "extend after nack",
    );
    assert_code(
        e.nack(&q, r2, None, None).await,
        ErrorCode::ReceiptStale,
        "second nack",
    );
    let m = e.get(id2).await;
    assert_eq!(
        (m.state, m.receive_count),
        (MessageState::Delayed, 1),
        "stale calls left it delayed"
    );
    assert_eq!(e.stats(&q).await.totals.nacked, 1);
}

/// A receipt used on another queue, or with an altered token or id, is `ReceiptStale`.
pub async fn foreign_and_forged_receipts_are_stale(h: &dyn Harness) {
    let e = env(h).await;
    let a = e.queue("qa", QueueConfigPatch::default()).await;
    let b = e.queue("qb", QueueConfigPatch::default()).await;
    let id = e.send_text(&a, "x").await;
    let d = e.recv_one(&a).await;
    let r = d.receipt;
    assert_code(
        e.ack(&b, r).await,
        ErrorCode::ReceiptStale,
        "ack on the wrong queue",
    );
    assert_code(
        e.nack(&b, r, None, None).await,
        ErrorCode::ReceiptStale,
        "nack on the wrong queue",
    );
    assert_code(
        e.store.reject(&b, r, fail("x")).await,
        ErrorCode::ReceiptStale,
        "reject on the wrong queue",
    );
    assert_code(
        e.store.extend(&b, r, secs(5)).await,
        ErrorCode::ReceiptStale,
        "extend on the wrong queue",
    );
    assert_code(
        e.store.move_message(&b, r, &a, fail("x")).await,
        ErrorCode::ReceiptStale,
        "move from the wrong queue",
    );
    let forged = Receipt {
        id: r.id,
        token: r.token ^ (1 << 63) ^ 1,
    };
    assert_code(
        e.ack(&a, forged).await,
        ErrorCode::ReceiptStale,
        "altered token",
    );
    assert_code(
        e.store.extend(&a, forged, secs(5)).await,
        ErrorCode::ReceiptStale,
        "extend with altered token",
    );
    let unknown = Receipt {
        id: MessageId(r.id.0 ^ 0xffff_0000_0000),
        token: r.token,
    };
    assert_code(
        e.ack(&a, unknown).await,
        ErrorCode::ReceiptStale,
        "receipt of a message that never existed",
    );
    let m = e.get(id).await;
    assert_eq!(
        (m.queue, m.state, m.visible_at),
        (a.clone(), MessageState::InFlight, Some(d.lease_deadline))
    );
    assert_eq!(e.stats(&b).await.visible, 0);
    e.ack(&a, r)
        .await
        .expect("the real receipt on its own queue works");
}

// ---------------------------------------------------------------------------------------------
// Concurrency and long polling
// ---------------------------------------------------------------------------------------------

/// Rule 7: 8 consumers receiving, nacking and acking 500 messages concurrently never hold the
/// same message at once, and every message is acked exactly once.
pub async fn never_leased_to_two_consumers_at_once(h: &dyn Harness) {
    const N: usize = 500;
    let e = env(h).await;
    let q = e
        .queue(
            "conc",
            QueueConfigPatch {
                visibility_timeout: Some(secs(600)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..N).map(|i| text(&i.to_string())).collect())
        .await;

    #[derive(Default)]
    struct Shared {
        live: HashSet<MessageId>,
        nacked: HashSet<MessageId>,
        acked: HashSet<MessageId>,
        deliveries: u64,
        violations: Vec<String>,
    }
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = Arc::clone(&e.store);
        let q = q.clone();
        let shared = Arc::clone(&shared);
        tasks.push(tokio::spawn(async move {
            loop {
                if shared.lock().expect("lock").acked.len() >= N {
                    return;
                }
                let req = ReceiveRequest {
                    max: 7,
                    consumer: Some(format!("w{w}")),
                    ..Default::default()
                };
                let ds = store.receive(&q, req).await.expect("concurrent receive");
                if ds.is_empty() {
                    // The rest are leased by other workers; the outer timeout catches a stall.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                for d in ds {
                    let first_time = {
                        let mut s = shared.lock().expect("lock");
                        s.deliveries += 1;
                        if !s.live.insert(d.id) {
                            s.violations.push(format!(
                                "{} leased to worker {w} while another lease was live",
                                d.id
                            ));
                        }
                        !s.nacked.contains(&d.id)
                    };
                    // Every third message is nacked once, so messages come back while others are leased.
                    let nack = first_time && d.id.0 % 3 == 0;
                    {
                        let mut s = shared.lock().expect("lock");
                        s.live.remove(&d.id);
                        if nack {
                            s.nacked.insert(d.id);
                        }
                    }
                    if nack {
                        store
                            .nack(&q, d.receipt, Some(Duration::ZERO), Failure::default())
                            .await
                            .expect("nack of a live lease");
                    } else {
                        let out = store
                            .ack(
                                &q,
                                vec![AckRequest {
                                    receipt: d.receipt,
                                    result: None,
                                }],
                            )
                            .await
                            .expect("ack call");
                        assert_eq!(out, vec![Ok(())], "worker {w}: ack of live lease {}", d.id);
                        let mut s = shared.lock().expect("lock");
                        if !s.acked.insert(d.id) {
                            s.violations.push(format!("{} acked twice", d.id));
                        }
                    }
                }
            }
        }));
    }
    let all = futures::future::join_all(tasks);
    let results = tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("500 messages should be consumed by 8 workers within 20 s");
    for r in results {
        r.expect("worker task panicked");
    }
    let (deliveries, nacked) = {
        let s = shared.lock().expect("lock");
        assert!(
            s.violations.is_empty(),
            "rule 7 violated: {:?}",
            &s.violations[..s.violations.len().min(10)]
        );
        assert_eq!(s.acked.len(), N, "every message acked");
        (s.deliveries, s.nacked.len() as u64)
    };
    let stats = e.stats(&q).await;
    assert_eq!((stats.visible, stats.in_flight, stats.delayed), (0, 0, 0));
    assert_eq!(stats.totals.acked, N as u64);
    assert_eq!(
        stats.totals.received, deliveries,
        "received counts every delivery"
    );
    assert_eq!(stats.totals.nacked, nacked);
}

/// A long poll returns soon after a concurrent send (real time, well under the 5 s wait).
pub async fn long_poll_wakes_on_send(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("lp", QueueConfigPatch::default()).await;
    let store = Arc::clone(&e.store);
    let q2 = q.clone();
    let start = Instant::now();
    let waiter = tokio::spawn(async move {
        store
            .receive(
                &q2,
                ReceiveRequest {
                    max: 1,
                    wait: secs(5),
                    ..Default::default()
                },
            )
            .await
    });
    tokio::time::sleep(ms(150)).await;
    let id = e.send_text(&q, "wake up").await;
    let ds = tokio::time::timeout(secs(4), waiter)
        .await
        .expect("long poll did not return within 4 s of a send")
        .expect("receive task")
        .expect("receive");
    let took = start.elapsed();
    assert_eq!(
        ids_of(&ds),
        BTreeSet::from([id]),
        "the long poll delivers the new message"
    );
    assert!(
        took < secs(2),
        "long poll woke {took:?} after start; a send must wake it promptly"
    );
}

/// A long poll on an empty queue returns empty after its wait (real time), and does not return
/// a message that is delayed or in a paused queue.
pub async fn long_poll_times_out_empty(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("lpe", QueueConfigPatch::default()).await;
    let req = || ReceiveRequest {
        max: 1,
        wait: ms(200),
        ..Default::default()
    };
    let start = Instant::now();
    let ds = tokio::time::timeout(secs(3), e.store.receive(&q, req()))
        .await
        .expect("a 200 ms long poll must return (does the engine wait on the virtual clock?)")
        .expect("receive");
    let took = start.elapsed();
    assert!(ds.is_empty());
    assert!(
        took >= ms(150),
        "long poll returned after {took:?}, before its 200 ms wait"
    );
    assert!(took < secs(2), "long poll of 200 ms took {took:?}");

    e.send(&q, delayed("not yet", secs(60))).await;
    let ds = tokio::time::timeout(secs(3), e.store.receive(&q, req()))
        .await
        .expect("returns")
        .expect("receive");
    assert!(
        ds.is_empty(),
        "a delayed message is not delivered by a long poll"
    );

    let p = e
        .queue(
            "lpp",
            QueueConfigPatch {
                paused: Some(true),
                ..Default::default()
            },
        )
        .await;
    e.send_text(&p, "held").await;
    let ds = tokio::time::timeout(secs(3), e.store.receive(&p, req()))
        .await
        .expect("returns")
        .expect("receive");
    assert!(
        ds.is_empty(),
        "a paused queue delivers nothing, even to a long poll"
    );
}

// ---------------------------------------------------------------------------------------------
// Flow control
// ---------------------------------------------------------------------------------------------

/// A paused queue accepts sends and delivers nothing; leases already out can still be acked;
/// resume delivers.
pub async fn pause_holds_deliveries(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("pz", QueueConfigPatch::default()).await;
    e.send_text(&q, "before").await;
    let d = e.recv_one(&q).await;
    let out = e
        .store
        .put_queue(
            &q,
            &QueueConfigPatch {
                paused: Some(true),
                ..Default::default()
            },
        )
        .await
        .expect("pause");
    assert!(out.queue.config.paused);
    let id = e.send_text(&q, "during").await;
    e.recv_none(&q, "paused").await;
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight),
        (1, 1),
        "a paused queue still holds its messages"
    );
    assert_eq!(
        e.browse_ids(&q, BrowseState::Visible).await,
        BTreeSet::from([id])
    );
    e.ack(&q, d.receipt).await.expect("ack on a paused queue");
    e.advance(secs(60));
    e.recv_none(&q, "still paused later").await;
    e.queue(
        "pz",
        QueueConfigPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(e.recv_one(&q).await.id, id, "resume delivers");
}

/// `rate_limit` 3 per 10 s: never more than 3 deliveries in any 10 s window (a sliding
/// window), and deliveries resume as the window slides.
pub async fn rate_limit_bounds_deliveries_per_window(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "rl",
            QueueConfigPatch {
                rate_limit: Some(Some(RateLimit {
                    limit: 3,
                    period: secs(10),
                })),
                visibility_timeout: Some(secs(3600)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..12).map(|i| text(&i.to_string())).collect())
        .await;
    assert_eq!(e.recv(&q, 2).await.len(), 2, "t=0: 2 of 3 allowed");
    e.advance(secs(5));
    assert_eq!(
        e.recv(&q, 10).await.len(),
        1,
        "t=5s: only 1 left in the window"
    );
    e.recv_none(&q, "t=5s: limit of 3 per 10 s reached").await;
    e.advance(ms(4_999));
    e.recv_none(&q, "t=9.999s: still 3 in the last 10 s").await;
    e.advance(ms(2)); // t = 10.001 s: the 2 from t=0 left the window, the 1 from t=5 s did not
    let n = e.recv(&q, 10).await.len();
    assert!(
        n <= 2,
        "t=10.001s: {n} deliveries, but one from t=5s is still in the window (limit 3)"
    );
    assert_eq!(n, 2, "t=10.001s: two slots freed by the t=0 deliveries");
    e.recv_none(&q, "t=10.001s: window full again").await;
    e.advance(secs(5)); // t = 15.001 s
    assert_eq!(
        e.recv(&q, 10).await.len(),
        1,
        "t=15.001s: the t=5s slot is free"
    );
    e.advance(secs(30));
    assert_eq!(
        e.recv(&q, 10).await.len(),
        3,
        "after a quiet window the full limit is available"
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.in_flight, s.visible),
        (9, 3),
        "rate-limited receives lease only what they return"
    );
}

/// `max_in_flight` 2: never more than 2 leased; ack, nack and lease expiry free slots.
pub async fn max_in_flight_bounds_leases(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "mif",
            QueueConfigPatch {
                max_in_flight: Some(Some(2)),
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..5).map(|i| text(&i.to_string())).collect())
        .await;
    let ds = e.recv(&q, 5).await;
    assert_eq!(ds.len(), 2, "max_in_flight 2 with 5 visible");
    e.recv_none(&q, "2 in flight already").await;
    assert_eq!(e.stats(&q).await.in_flight, 2);
    e.ack(&q, ds[0].receipt).await.expect("ack");
    let more = e.recv(&q, 5).await;
    assert_eq!(more.len(), 1, "ack frees one slot");
    assert_eq!(e.stats(&q).await.in_flight, 2);
    e.nack(&q, ds[1].receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    assert_eq!(e.recv(&q, 5).await.len(), 1, "nack frees one slot");
    e.recv_none(&q, "full again").await;
    e.advance(secs(10));
    assert_eq!(
        e.recv(&q, 5).await.len(),
        2,
        "expired leases free their slots"
    );
    let s = e.stats(&q).await;
    assert_eq!((s.in_flight, s.visible), (2, 2));
}

/// A lease the engine lets overlap an ack (`lease_may_overlap_ack`) still sees that ack
/// where it matters: with `max_in_flight` 1, the slot the ack frees is leased at once. Without
/// `max_in_flight` the overlap is allowed or not, and either way both succeed.
pub async fn lease_overlapping_an_ack_sees_it(h: &dyn Harness) {
    let e = env(h).await;
    for limit in [Some(1), None] {
        let name = if limit.is_some() { "ovl1" } else { "ovl" };
        let q = e
            .queue(
                name,
                QueueConfigPatch {
                    max_in_flight: Some(limit),
                    ..Default::default()
                },
            )
            .await;
        e.send_batch(&q, vec![text("a"), text("b")]).await;
        let first = e.recv(&q, 1).await;
        assert_eq!(first.len(), 1);
        let ack = vec![AckRequest {
            receipt: first[0].receipt,
            result: None,
        }];
        let next = if e.store.lease_may_overlap_ack(&q).await {
            // As the broker does: the ack is polled once, then the lease runs beside it.
            let mut acking = e.store.ack(&q, ack);
            let early = futures::poll!(acking.as_mut());
            let next = e.recv(&q, 5).await;
            let outcome = match early {
                std::task::Poll::Ready(r) => r,
                std::task::Poll::Pending => acking.await,
            };
            assert!(
                matches!(outcome.as_deref(), Ok([Ok(())])),
                "overlapped ack on {q}: {outcome:?}"
            );
            next
        } else {
            let outcome = e.store.ack(&q, ack).await;
            assert!(matches!(outcome.as_deref(), Ok([Ok(())])), "{outcome:?}");
            e.recv(&q, 5).await
        };
        assert_eq!(
            next.len(),
            1,
            "{q} (max_in_flight {limit:?}): the lease after the ack takes the other message"
        );
        assert_ne!(next[0].id, first[0].id);
    }
}

/// `max_depth` 3 counts visible + delayed + in flight; sends beyond it are refused with
/// `QueueFull` (with a retry hint), all or nothing; dead letters and acks free room.
pub async fn max_depth_refuses_sends(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "md",
            QueueConfigPatch {
                max_depth: Some(Some(3)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, vec![text("1"), text("2")]).await;
    let err = e
        .store
        .send(&q, vec![text("3"), text("4")])
        .await
        .expect_err("2 + 2 > 3 must be refused");
    assert_eq!(err.code(), ErrorCode::QueueFull, "got {err:?}");
    assert!(
        err.retry_after().is_some(),
        "QueueFull carries a retry hint"
    );
    assert_eq!(
        e.stats(&q).await.visible,
        2,
        "a refused batch stores nothing"
    );
    e.send(&q, delayed("3", secs(60))).await;
    assert_code(
        e.store.send(&q, vec![text("4")]).await,
        ErrorCode::QueueFull,
        "delayed messages count toward depth",
    );
    let d = e.recv_one(&q).await;
    assert_code(
        e.store.send(&q, vec![text("4")]).await,
        ErrorCode::QueueFull,
        "in-flight messages count toward depth",
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.in_flight, s.totals.sent),
        (1, 1, 1, 3)
    );
    e.store
        .reject(&q, d.receipt, fail("x"))
        .await
        .expect("reject");
    e.send_text(&q, "4").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack");
    e.send_text(&q, "5").await;
    assert_code(
        e.store.send(&q, vec![text("6")]).await,
        ErrorCode::QueueFull,
        "full again",
    );
}

// ---------------------------------------------------------------------------------------------
// Retention
// ---------------------------------------------------------------------------------------------

/// Rule 8: a message older than `retention` is dead-lettered with reason `expired`; in the DLQ
/// it is dropped when it outlives the DLQ's retention.
pub async fn retention_dead_letters_expired_messages(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ret",
            QueueConfigPatch {
                retention: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let dlq = e
        .queue(
            "ret.dlq",
            QueueConfigPatch {
                retention: Some(secs(600)),
                ..Default::default()
            },
        )
        .await;
    let old = e.send_text(&q, "old").await;
    e.advance(secs(30));
    let young = e.send_text(&q, "young").await;
    e.advance(secs(31)); // old is 61 s old, young 31 s
    let m = e.get(old).await;
    assert_eq!(m.queue, dlq, "a message past retention moves to the DLQ");
    assert_eq!(
        m.dead_letter.as_ref().map(|d| d.reason),
        Some(DeadLetterReason::Expired)
    );
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.body, Some(Body::text("old")));
    let y = e.get(young).await;
    assert_eq!(
        (y.queue, y.state),
        (q.clone(), MessageState::Visible),
        "a younger message stays"
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.dead_letter_depth, s.totals.expired),
        (1, 1, 1)
    );
    assert_eq!(ids_of(&e.recv(&q, 10).await), BTreeSet::from([young]));
    assert_eq!(
        e.browse_ids(&dlq, BrowseState::Visible).await,
        BTreeSet::from([old])
    );
    e.advance(secs(601));
    e.gone(old, "a DLQ drops its own expired messages").await;
    assert!(!e.browse_ids(&dlq, BrowseState::All).await.contains(&old));
}

/// Rule 8: a queue without a DLQ drops messages that outlive retention.
pub async fn retention_drops_expired_messages_without_dlq(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ret0",
            QueueConfigPatch {
                retention: Some(secs(60)),
                ..unlimited()
            },
        )
        .await;
    let id = e.send_text(&q, "x").await;
    e.advance(secs(59));
    assert_eq!(e.get(id).await.state, MessageState::Visible);
    e.advance(secs(2));
    e.gone(id, "expired message of a queue without DLQ is dropped")
        .await;
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.totals.expired), (0, 1));
    e.recv_none(&q, "expired").await;
}

// ---------------------------------------------------------------------------------------------
// Browse, get, delete, purge
// ---------------------------------------------------------------------------------------------

/// Paging with limit 2 over 5 messages covers each exactly once, full pages first, in
/// delivery order; browsing leases nothing.
pub async fn browse_pages_cover_each_message_once(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("br", QueueConfigPatch::default()).await;
    let mut sent = Vec::new();
    for i in 0..5 {
        sent.push(e.send_text(&q, &format!("m{i}")).await);
        e.advance(ms(1));
    }
    for state in [BrowseState::Visible, BrowseState::All] {
        let pages = e.browse_pages(&q, state, 2).await;
        let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        let nonempty: Vec<usize> = sizes.iter().copied().filter(|n| *n > 0).collect();
        assert_eq!(nonempty, [2, 2, 1], "{state:?}: page sizes {sizes:?}");
        assert!(
            sizes[..sizes.len() - 1].iter().all(|n| *n == 2),
            "{state:?}: only the last page may be short: {sizes:?}"
        );
        let ids: Vec<MessageId> = pages.iter().flatten().map(|m| m.id).collect();
        assert_eq!(
            ids, sent,
            "{state:?}: each message once, oldest (first visible) first"
        );
        for m in pages.iter().flatten() {
            assert_eq!((m.state, m.receive_count), (MessageState::Visible, 0));
            assert!(m.body.is_some(), "browse shows bodies");
        }
    }
    let d = e.recv(&q, 5).await;
    assert_eq!(d.len(), 5, "browsing leased nothing");
    assert_eq!(
        d.iter().map(|d| d.id).collect::<Vec<_>>(),
        sent,
        "receive delivers oldest visible first"
    );
}

/// Browse filters by state: Visible, Delayed, InFlight, and All (their union).
pub async fn browse_filters_by_state(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("bf", QueueConfigPatch::default()).await;
    let vis: BTreeSet<MessageId> = e
        .send_batch(&q, (0..4).map(|i| text(&i.to_string())).collect())
        .await
        .iter()
        .map(|o| o.id)
        .collect();
    let del = e.send(&q, delayed("later", secs(60))).await.id;
    let leased = ids_of(&e.recv(&q, 2).await);
    let visible: BTreeSet<MessageId> = vis.difference(&leased).copied().collect();
    assert_eq!(e.browse_ids(&q, BrowseState::Visible).await, visible);
    assert_eq!(
        e.browse_ids(&q, BrowseState::Delayed).await,
        BTreeSet::from([del])
    );
    assert_eq!(e.browse_ids(&q, BrowseState::InFlight).await, leased);
    let mut all = vis.clone();
    all.insert(del);
    assert_eq!(e.browse_ids(&q, BrowseState::All).await, all);
    for (state, want) in [
        (BrowseState::Visible, MessageState::Visible),
        (BrowseState::Delayed, MessageState::Delayed),
        (BrowseState::InFlight, MessageState::InFlight),
    ] {
        for m in e.browse(&q, state).await {
            assert_eq!(
                m.state, want,
                "browse {state:?} listed {} as {:?}",
                m.id, m.state
            );
            assert_eq!(m.queue, q);
        }
    }
    e.advance(secs(60));
    assert!(
        e.browse_ids(&q, BrowseState::Delayed).await.is_empty(),
        "delay over"
    );
    assert!(e.browse_ids(&q, BrowseState::Visible).await.contains(&del));
}

/// A garbage cursor or an out-of-range limit is `InvalidArgument`.
pub async fn browse_rejects_bad_cursor_and_limit(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("bc", QueueConfigPatch::default()).await;
    e.send_batch(&q, vec![text("a"), text("b"), text("c")])
        .await;
    let req = |limit, cursor: Option<&str>| BrowseRequest {
        state: BrowseState::All,
        limit,
        cursor: cursor.map(str::to_owned),
    };
    assert_code(
        e.store.browse(&q, req(2, Some("garbage!!"))).await,
        ErrorCode::InvalidArgument,
        "garbage cursor",
    );
    assert_code(
        e.store.browse(&q, req(2, Some(""))).await,
        ErrorCode::InvalidArgument,
        "empty cursor",
    );
    assert_code(
        e.store.browse(&q, req(0, None)).await,
        ErrorCode::InvalidArgument,
        "limit 0",
    );
    assert_code(
        e.store.browse(&q, req(1001, None)).await,
        ErrorCode::InvalidArgument,
        "limit 1001",
    );
    let page = e
        .store
        .browse(&q, req(1000, None))
        .await
        .expect("limit 1000 is allowed");
    assert_eq!(page.messages.len(), 3);
}

/// `get_message` finds a message in any queue, including a DLQ, and reports its fields.
pub async fn get_message_finds_message_anywhere(h: &dyn Harness) {
    let e = env(h).await;
    let a = e.queue("ga", QueueConfigPatch::default()).await;
    let b = e.queue("gb", QueueConfigPatch::default()).await;
    assert_code(
        e.store.get_message(MessageId(0x00de_adbe_efde_adbe)).await,
        ErrorCode::MessageNotFound,
        "unknown id",
    );
    let t0 = e.now();
    let ia = e
        .send(
            &a,
            NewMessage {
                attributes: attrs(&[("k", "v")]),
                ..dedup("in a", "dd-1")
            },
        )
        .await
        .id;
    let ib = e.send_text(&b, "in b").await;
    let m = e.get(ia).await;
    assert_eq!(
        (m.id, m.queue.clone(), m.state),
        (ia, a.clone(), MessageState::Visible)
    );
    assert_eq!(m.body, Some(Body::text("in a")));
    assert_eq!(m.attributes, attrs(&[("k", "v")]));
    assert_eq!((m.enqueued_at, m.receive_count), (t0, 0));
    assert_eq!(m.dedup_id.as_deref(), Some("dd-1"));
    assert_eq!(
        (m.source_queue, m.dead_letter, m.last_error),
        (None, None, None)
    );
    assert_eq!(e.get(ib).await.queue, b);
    let d = e.recv_one(&b).await;
    e.store
        .reject(&b, d.receipt, fail("no"))
        .await
        .expect("reject");
    let m = e.get(ib).await;
    assert_eq!(m.queue, qn("gb.dlq"), "found in the DLQ");
    assert!(m.dead_letter.is_some());
}

/// `delete_message` removes a message in any state; its receipt goes stale.
pub async fn delete_message_removes_it(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("del", QueueConfigPatch::default()).await;
    let a = e.send_text(&q, "a").await;
    e.store.delete_message(a).await.expect("delete visible");
    e.gone(a, "deleted").await;
    assert_code(
        e.store.delete_message(a).await,
        ErrorCode::MessageNotFound,
        "second delete",
    );
    assert_code(
        e.store
            .delete_message(MessageId(0x0bad_0bad_0bad_0bad))
            .await,
        ErrorCode::MessageNotFound,
        "unknown",
    );
    let b = e.send_text(&q, "b").await;
    let d = e.recv_one(&q).await;
    assert_eq!(d.id, b);
    e.store.delete_message(b).await.expect("delete in flight");
    assert_code(
        e.ack(&q, d.receipt).await,
        ErrorCode::ReceiptStale,
        "receipt of a deleted message",
    );
    let c = e.send(&q, delayed("c", secs(30))).await.id;
    e.store.delete_message(c).await.expect("delete delayed");
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed, s.in_flight), (0, 0, 0));
    e.advance(secs(30));
    e.recv_none(&q, "deleted messages do not come back").await;

    let x = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    e.store
        .reject(&q, d.receipt, fail("r"))
        .await
        .expect("reject");
    e.store
        .delete_message(x)
        .await
        .expect("delete from the DLQ");
    e.gone(x, "deleted from DLQ").await;
    assert_eq!(e.stats(&q).await.dead_letter_depth, 0);

    let y = e.send_text(&q, "y").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack");
    e.store
        .delete_message(y)
        .await
        .expect("delete a completed record");
    e.gone(y, "completed record deleted").await;
}

/// Purge removes every message (visible, delayed, in flight), returns how many, keeps
/// completed records and leaves the DLQ alone.
pub async fn purge_empties_queue(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("pg", QueueConfigPatch::default()).await;
    let done = e.send_text(&q, "done").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack");
    e.send_text(&q, "poison").await;
    let d = e.recv_one(&q).await;
    e.store
        .reject(&q, d.receipt, fail("x"))
        .await
        .expect("reject");
    e.send_batch(&q, (0..4).map(|i| text(&i.to_string())).collect())
        .await;
    e.send(&q, delayed("later", secs(60))).await;
    let leased = e.recv_one(&q).await;
    assert_eq!(
        e.store.purge(&q).await.expect("purge"),
        5,
        "3 visible + 1 delayed + 1 in flight"
    );
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed, s.in_flight), (0, 0, 0));
    assert_eq!(s.dead_letter_depth, 1, "purge leaves the DLQ alone");
    assert_code(
        e.ack(&q, leased.receipt).await,
        ErrorCode::ReceiptStale,
        "receipt of a purged message",
    );
    assert_eq!(
        e.get(done).await.state,
        MessageState::Completed,
        "purge keeps completed records"
    );
    e.advance(secs(120));
    e.recv_none(&q, "purged delayed message does not come back")
        .await;
    assert_eq!(
        e.store.purge(&q).await.expect("purge"),
        0,
        "purging an empty queue removes nothing"
    );
}

// ---------------------------------------------------------------------------------------------
// Stats
// ---------------------------------------------------------------------------------------------

/// Gauges: visible, delayed, in_flight, dead_letter_depth and oldest_visible_age (measured
/// from when the message became visible, not from its send).
pub async fn stats_gauges(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("sg", QueueConfigPatch::default()).await;
    let s = e.stats(&q).await;
    assert_eq!(
        (
            s.visible,
            s.delayed,
            s.in_flight,
            s.dead_letter_depth,
            s.completed
        ),
        (0, 0, 0, 0, 0)
    );
    assert_eq!(s.oldest_visible_age, Duration::ZERO);
    assert_eq!(s.totals, crate::stats::Totals::default());

    e.send(&q, delayed("b", secs(5))).await;
    e.send(&q, delayed("c", secs(60))).await;
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.oldest_visible_age),
        (0, 2, Duration::ZERO)
    );
    e.advance(secs(8));
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed), (1, 1));
    assert_eq!(
        s.oldest_visible_age,
        secs(3),
        "b has been visible since t0+5s"
    );
    e.send_text(&q, "a").await;
    e.advance(secs(1));
    assert_eq!(
        e.stats(&q).await.oldest_visible_age,
        secs(4),
        "the oldest visible counts"
    );
    let ds = e.recv(&q, 10).await;
    assert_eq!(ds.len(), 2);
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.in_flight, s.oldest_visible_age),
        (0, 1, 2, Duration::ZERO)
    );
    e.nack(&q, ds[0].receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    e.advance(secs(2));
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight, s.oldest_visible_age),
        (1, 1, secs(2))
    );
    e.store
        .reject(&q, ds[1].receipt, fail("x"))
        .await
        .expect("reject");
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.in_flight, s.dead_letter_depth),
        (1, 1, 0, 1)
    );
}

/// Totals: sent (not duplicates), received, acked, nacked (including the dead-lettering one),
/// dead_lettered (reject, exhausted nack, expired last lease).
pub async fn stats_totals(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "stt",
            QueueConfigPatch {
                max_receive_count: Some(2),
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, vec![text("1"), text("2"), text("3"), text("4")])
        .await;
    e.send(&q, dedup("5", "d")).await;
    assert!(e.send(&q, dedup("5 again", "d")).await.duplicate);
    let ds = e.recv(&q, 5).await;
    assert_eq!(ds.len(), 5);
    e.ack(&q, ds[0].receipt).await.expect("ack");
    e.nack(&q, ds[1].receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    e.store
        .reject(&q, ds[2].receipt, fail("x"))
        .await
        .expect("reject");
    e.advance(secs(10)); // ds[3], ds[4] leases run out (attempt 1 of 2)
    let again = e.recv(&q, 5).await;
    assert_eq!(
        ids_of(&again),
        BTreeSet::from([ds[1].id, ds[3].id, ds[4].id])
    );
    let two = again
        .iter()
        .find(|d| d.id == ds[1].id)
        .expect("nacked one redelivered");
    let out = e
        .nack(&q, two.receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    assert_eq!(out.state, None, "second nack of 2 dead-letters");
    e.advance(secs(10)); // ds[3], ds[4] run out on their last attempt
    let s = e.stats(&q).await;
    let t = s.totals;
    assert_eq!(t.sent, 5, "duplicates are not counted as sent");
    assert_eq!(t.received, 8, "5 first deliveries + 3 redeliveries");
    assert_eq!(t.acked, 1);
    assert_eq!(t.nacked, 2, "nacks including the one that dead-lettered");
    assert_eq!(
        t.dead_lettered, 4,
        "reject + exhausted nack + 2 expired last leases"
    );
    assert_eq!((t.expired, t.redriven), (0, 0));
    assert_eq!(
        (s.visible, s.delayed, s.in_flight, s.dead_letter_depth),
        (0, 0, 0, 4)
    );
}

// ---------------------------------------------------------------------------------------------
// Restart
// ---------------------------------------------------------------------------------------------

/// After a restart: queue configs, messages (visible, delayed, leased, dead-lettered), leases
/// with their deadlines and receipts, the dedup window and the counters are all still there,
/// and new ids do not collide with old ones.
pub async fn restart_keeps_messages_leases_dedup_counters_and_config(h: &dyn Harness) {
    let clock = ManualClock::default();
    let store = h.open(clock.clone()).await;
    let e = Env {
        clock: clock.clone(),
        store,
    };
    let patch = QueueConfigPatch {
        visibility_timeout: Some(secs(60)),
        max_receive_count: Some(7),
        rate_limit: Some(Some(RateLimit {
            limit: 1000,
            period: secs(1),
        })),
        max_in_flight: Some(Some(100)),
        dedup_window: Some(secs(300)),
        ..Default::default()
    };
    let q = e.queue("durable", patch).await;
    let t0 = e.now();
    let a = e.send_text(&q, "A").await;
    let b = e.send(&q, delayed("B", secs(30))).await.id;
    let c = e.send(&q, dedup("C", "d1")).await.id;
    let d = e.send_text(&q, "D").await;
    let x = e.send_text(&q, "X").await;
    let ds = e.recv(&q, 10).await;
    assert_eq!(ids_of(&ds), BTreeSet::from([a, c, d, x]));
    let rec = |id| ds.iter().find(|dl| dl.id == id).expect("delivered").receipt;
    let (ra, rc) = (rec(a), rec(c));
    e.nack(&q, rec(d), Some(Duration::ZERO), Some("retry me"))
        .await
        .expect("nack d");
    e.store
        .reject(&q, rec(x), fail("poison"))
        .await
        .expect("reject x");
    let configs_before = e.store.list_queues().await.expect("list");
    let stats_before = e.stats(&q).await;
    let x_before = e.get(x).await;
    let Env { store, .. } = e;
    drop(store);

    let store = h.reopen(clock.clone()).await;
    let e = Env { clock, store };
    assert_eq!(
        e.store.list_queues().await.expect("list"),
        configs_before,
        "queues and configs survive"
    );
    assert_eq!(e.stats(&q).await, stats_before, "gauges and totals survive");
    assert_eq!(
        e.get(x).await,
        x_before,
        "the dead letter survives unchanged"
    );
    let dup = e.send(&q, dedup("C again", "d1")).await;
    assert_eq!(
        (dup.id, dup.duplicate),
        (c, true),
        "the dedup window survives"
    );
    let fresh = e.send_text(&q, "after restart").await;
    assert!(
        ![a, b, c, d, x].contains(&fresh),
        "new id {fresh} collides with an id from before the restart"
    );
    e.ack(&q, ra)
        .await
        .expect("a receipt from before the restart is still valid");

    e.advance(ms(29_999));
    assert_eq!(
        ids_of(&e.recv(&q, 10).await),
        BTreeSet::from([d, fresh]),
        "t0+29.999s: B still delayed, C leased"
    );
    e.advance(ms(1));
    assert_eq!(
        ids_of(&e.recv(&q, 10).await),
        BTreeSet::from([b]),
        "t0+30s: B's delay over"
    );
    e.advance(secs(29));
    e.recv_none(&q, "t0+59s: C's lease (to t0+60s) still honoured")
        .await;
    assert_eq!(e.get(c).await.visible_at, Some(t0.plus(secs(60))));
    e.advance(secs(1));
    let again = e.recv(&q, 10).await;
    assert_eq!(
        ids_of(&again),
        BTreeSet::from([c]),
        "t0+60s: C's lease ran out"
    );
    assert_eq!(again[0].receive_count, 2);
    assert_code(
        e.ack(&q, rc).await,
        ErrorCode::ReceiptStale,
        "C's old receipt after redelivery",
    );
    let dd = e.get(d).await;
    assert_eq!(
        (dd.receive_count, dd.last_error.as_deref()),
        (2, Some("retry me"))
    );
}

// ---------------------------------------------------------------------------------------------
// Unlimited attempts, errors
// ---------------------------------------------------------------------------------------------

/// Rule 9: `max_receive_count` 0 never dead-letters, on nack or lease expiry, with or without
/// a DLQ configured; creating it without a DLQ warns. Attempts keep the newest 20.
pub async fn unlimited_receive_count_never_dead_letters(h: &dyn Harness) {
    let e = env(h).await;
    let q = qn("forever");
    let out = e
        .store
        .put_queue(&q, &unlimited())
        .await
        .expect("put unlimited");
    assert!(
        !out.warnings.is_empty(),
        "unlimited attempts without a DLQ is warned about at creation"
    );
    assert_eq!(out.queue.config.dead_letter_queue, None);
    let id = e.send_text(&q, "x").await;
    for i in 1..=25u32 {
        let d = e.recv_one(&q).await;
        assert_eq!(d.receive_count, i);
        assert_eq!(d.max_receive_count, 0);
        let out = e
            .nack(&q, d.receipt, Some(Duration::ZERO), Some(&format!("e{i}")))
            .await
            .expect("nack");
        assert_eq!(
            out,
            NackOutcome {
                state: Some(MessageState::Visible),
                queue: q.clone()
            },
            "nack {i}"
        );
    }
    for _ in 0..3 {
        e.recv_with(&q, 1, Some(secs(1))).await;
        e.advance(secs(1));
    }
    let m = e.get(id).await;
    assert_eq!(
        (m.queue.clone(), m.state, m.receive_count),
        (q.clone(), MessageState::Visible, 28)
    );
    assert_eq!(
        m.attempts.len(),
        limits::MAX_ATTEMPTS_KEPT,
        "attempts keep the newest 20"
    );
    let nacks: Vec<_> = m
        .attempts
        .iter()
        .filter_map(|a| a.error.as_deref())
        .collect();
    assert_eq!(
        nacks.first().copied(),
        Some("e9"),
        "oldest kept nack after 25 nacks + 3 expiries"
    );
    assert_eq!(nacks.last().copied(), Some("e25"));
    assert_eq!(m.last_error.as_deref(), Some("e25"));
    assert_eq!(e.stats(&q).await.totals.dead_lettered, 0);

    let with_dlq = e
        .queue(
            "forever2",
            QueueConfigPatch {
                max_receive_count: Some(0),
                ..Default::default()
            },
        )
        .await;
    let id2 = e.send_text(&with_dlq, "y").await;
    for i in 1..=12u32 {
        let d = e.recv_one(&with_dlq).await;
        assert_eq!(d.receive_count, i);
        let out = e
            .nack(&with_dlq, d.receipt, Some(Duration::ZERO), None)
            .await
            .expect("nack");
        assert_eq!(
            out.state,
            Some(MessageState::Visible),
            "nack {i} with a DLQ configured but unlimited attempts"
        );
    }
    assert_eq!(e.get(id2).await.queue, with_dlq);
    assert_eq!(e.stats(&with_dlq).await.dead_letter_depth, 0);
}

/// An error longer than the limit is cut with a marker, not refused.
pub async fn long_error_is_clipped_not_refused(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("le2", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    let long = "é".repeat(10_000);
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some(&long))
        .await
        .expect("a long error is accepted");
    let m = e.get(id).await;
    let le = m.last_error.expect("last_error kept");
    assert!(
        le.len() <= limits::MAX_ERROR_BYTES,
        "last_error is {} bytes",
        le.len()
    );
    assert!(le.ends_with("[truncated]"), "clipped errors carry a marker");
    let d = e.recv_one(&q).await;
    e.store
        .reject(&q, d.receipt, fail(&long))
        .await
        .expect("reject with a long error is accepted");
    let m = e.get(id).await;
    assert!(
        m.last_error
            .is_some_and(|l| l.len() <= limits::MAX_ERROR_BYTES)
    );
}

/// Every operation naming an unknown queue is `QueueNotFound` and changes nothing.
pub async fn unknown_queue_is_queue_not_found(h: &dyn Harness) {
    let e = env(h).await;
    let real = e.queue("real", QueueConfigPatch::default()).await;
    let ghost = qn("ghost");
    let id = e.send_text(&real, "x").await;
    let d = e.recv_one(&real).await;
    let r = d.receipt;
    let nf = ErrorCode::QueueNotFound;
    assert_code(e.store.get_queue(&ghost).await, nf, "get_queue");
    assert_code(e.store.delete_queue(&ghost).await, nf, "delete_queue");
    assert_code(e.store.send(&ghost, vec![text("x")]).await, nf, "send");
    assert_code(
        e.store.receive(&ghost, ReceiveRequest::default()).await,
        nf,
        "receive",
    );
    assert_code(
        e.store
            .ack(
                &ghost,
                vec![AckRequest {
                    receipt: r,
                    result: None,
                }],
            )
            .await,
        nf,
        "ack",
    );
    assert_code(
        e.store.nack(&ghost, r, None, Failure::default()).await,
        nf,
        "nack",
    );
    assert_code(
        e.store.reject(&ghost, r, Failure::default()).await,
        nf,
        "reject",
    );
    assert_code(
        e.store
            .move_message(&ghost, r, &real, Failure::default())
            .await,
        nf,
        "move from unknown",
    );
    assert_code(e.store.extend(&ghost, r, secs(5)).await, nf, "extend");
    assert_code(
        e.store
            .browse(
                &ghost,
                BrowseRequest {
                    state: BrowseState::All,
                    limit: 10,
                    cursor: None,
                },
            )
            .await,
        nf,
        "browse",
    );
    assert_code(e.store.purge(&ghost).await, nf, "purge");
    assert_code(e.store.stats(&ghost).await, nf, "stats");
    let long_poll = tokio::time::timeout(
        secs(3),
        e.store.receive(
            &ghost,
            ReceiveRequest {
                wait: secs(5),
                ..Default::default()
            },
        ),
    )
    .await
    .expect("a long poll on an unknown queue fails at once");
    assert_code(long_poll, nf, "long-poll receive");
    assert_code(
        e.store.get_queue(&ghost).await,
        nf,
        "no operation created the queue",
    );
    let m = e.get(id).await;
    assert_eq!((m.queue, m.state), (real.clone(), MessageState::InFlight));
    e.ack(&real, r)
        .await
        .expect("receipt untouched by the calls on the unknown queue");
}

/// Out-of-range values are `InvalidArgument` and change nothing.
pub async fn bad_input_is_invalid_argument(h: &dyn Harness) {
    let e = env(h).await;
    let inv = ErrorCode::InvalidArgument;
    let bad = QueueConfigPatch {
        visibility_timeout: Some(limits::MAX_VISIBILITY + secs(1)),
        ..Default::default()
    };
    assert_code(
        e.store.put_queue(&qn("nope"), &bad).await,
        inv,
        "create with visibility over 12 h",
    );
    assert_code(
        e.store.get_queue(&qn("nope")).await,
        ErrorCode::QueueNotFound,
        "refused create made nothing",
    );
    assert_code(
        e.store.get_queue(&qn("nope.dlq")).await,
        ErrorCode::QueueNotFound,
        "refused create made no DLQ",
    );
    let q = e.queue("ok", QueueConfigPatch::default()).await;
    let before = e.store.get_queue(&q).await.expect("get");
    assert_code(
        e.store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    retention: Some(secs(59)),
                    ..Default::default()
                },
            )
            .await,
        inv,
        "update with retention under 1 min",
    );
    assert_code(
        e.store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    dead_letter_queue: Some(None),
                    ..Default::default()
                },
            )
            .await,
        inv,
        "no DLQ with limited attempts",
    );
    assert_eq!(
        e.store.get_queue(&q).await.expect("get"),
        before,
        "refused updates change nothing"
    );

    let rr = |max, wait, vis| ReceiveRequest {
        max,
        wait,
        visibility: vis,
        consumer: None,
    };
    e.send_text(&q, "x").await;
    assert_code(
        e.store.receive(&q, rr(0, Duration::ZERO, None)).await,
        inv,
        "receive max 0",
    );
    assert_code(
        e.store.receive(&q, rr(1001, Duration::ZERO, None)).await,
        inv,
        "receive max 1001",
    );
    assert_code(
        e.store
            .receive(
                &q,
                rr(1, Duration::ZERO, Some(limits::MAX_VISIBILITY + ms(1))),
            )
            .await,
        inv,
        "visibility over 12 h",
    );
    let start = Instant::now();
    assert_code(
        e.store.receive(&q, rr(1, secs(31), None)).await,
        inv,
        "wait over 30 s",
    );
    assert!(
        start.elapsed() < secs(2),
        "an invalid receive is refused without waiting"
    );
    assert_eq!(
        e.stats(&q).await.in_flight,
        0,
        "refused receives leased nothing"
    );

    let d = e.recv_one(&q).await;
    assert_code(
        e.nack(&q, d.receipt, Some(limits::MAX_DELAY + secs(1)), None)
            .await,
        inv,
        "nack delay over 7 days",
    );
    assert_code(
        e.store
            .extend(&q, d.receipt, limits::MAX_VISIBILITY + secs(1))
            .await,
        inv,
        "extend over 12 h",
    );
    let m = e.get(d.id).await;
    assert_eq!(
        (m.state, m.visible_at),
        (MessageState::InFlight, Some(d.lease_deadline)),
        "refused calls changed nothing"
    );
    assert_code(e.store.ack(&q, vec![]).await, inv, "ack of an empty batch");
    let many: Vec<AckRequest> = (0..=limits::MAX_BATCH)
        .map(|_| AckRequest {
            receipt: d.receipt,
            result: None,
        })
        .collect();
    assert_code(e.store.ack(&q, many).await, inv, "ack of 1001 receipts");
    e.ack(&q, d.receipt)
        .await
        .expect("the lease survived every refused call");
}

/// Invalid queue names and garbage receipts are refused when parsed; a receipt survives a
/// round trip through its string form.
pub async fn invalid_names_and_receipts_fail_to_parse(h: &dyn Harness) {
    for bad in ["", "has space", "slash/y", "ünicode", &"a".repeat(81)] {
        let err = QueueName::new(bad).expect_err("invalid queue name accepted");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad:?}");
    }
    for bad in [
        "",
        "garbage",
        "!!!!!!!!!!!!!!!!!!!!!!",
        "AAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        let err = bad.parse::<Receipt>().expect_err("garbage receipt parsed");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad:?}");
    }
    let e = env(h).await;
    let q = e.queue("rcpt", QueueConfigPatch::default()).await;
    e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    let wire = d.receipt.to_string();
    let back: Receipt = wire
        .parse()
        .expect("a receipt parses back from its string form");
    assert_eq!(back, d.receipt);
    e.ack(&q, back).await.expect("ack with the parsed receipt");
}

// ---------------------------------------------------------------------------------------------
// Model-based
// ---------------------------------------------------------------------------------------------

const MODEL_QUEUE: &str = "model";
const MODEL_DLQ: &str = "model.dlq";
const MODEL_MRC: u32 = 3;
const MODEL_VIS_MS: u64 = 10_000;

/// Random sequences of send, receive, ack, nack, reject, extend and clock moves (valid, stale
/// and forged receipts) against a fresh store each, checking after every step that the store
/// agrees with the reference model on which ids are visible, delayed, in flight and
/// dead-lettered, on receive counts, and that stale receipts are refused.
///
/// `SLUICE_MODEL_CASES` sets the number of sequences (default 64) and `SLUICE_MODEL_SEED`
/// (a number) draws other sequences than the default deterministic ones.
pub async fn model_equivalence(h: &dyn Harness) {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    let cases: usize = std::env::var("SLUICE_MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let sequences: Vec<Vec<Op>> = {
        // Deterministic by default so a failure reproduces; SLUICE_MODEL_SEED explores others.
        let mut runner = match std::env::var("SLUICE_MODEL_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(seed) => {
                let mut bytes = [0u8; 32];
                bytes[..8].copy_from_slice(&seed.to_le_bytes());
                TestRunner::new_with_rng(
                    Config::default(),
                    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
                )
            }
            None => TestRunner::deterministic(),
        };
        let strat = ops_strategy(40);
        (0..cases)
            .map(|_| {
                strat
                    .new_tree(&mut runner)
                    .expect("generate a sequence")
                    .current()
            })
            .collect()
    };
    for (n, ops) in sequences.iter().enumerate() {
        if let Err(msg) = run_model_sequence(h, ops).await {
            let listing: Vec<String> = ops
                .iter()
                .enumerate()
                .map(|(i, op)| format!("  {i:2}: {op:?}"))
                .collect();
            panic!(
                "model_equivalence sequence {n} (SLUICE_MODEL_SEED={}) failed: {msg}\nsequence:\n{}",
                std::env::var("SLUICE_MODEL_SEED").unwrap_or_else(|_| "unset".into()),
                listing.join("\n")
            );
        }
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

async fn run_model_sequence(h: &dyn Harness, ops: &[Op]) -> Result<(), String> {
    let e = env(h).await;
    let q = qn(MODEL_QUEUE);
    let dlq = qn(MODEL_DLQ);
    e.store
        .put_queue(
            &q,
            &QueueConfigPatch {
                max_receive_count: Some(MODEL_MRC),
                visibility_timeout: Some(ms(MODEL_VIS_MS)),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("put_queue: {e:?}"))?;
    let mut model = Model::new(MODEL_MRC, ms(MODEL_VIS_MS));
    let mut sent = 0u32;
    for (i, op) in ops.iter().enumerate() {
        let at = |s: String| format!("step {i} ({op:?}): {s}");
        let now = e.now();
        model.settle(now);
        match op {
            Op::Send { delay_ms } => {
                sent += 1;
                let m = NewMessage {
                    delay: delay_ms.map(ms),
                    ..text(&format!("m{sent}"))
                };
                let out = e
                    .store
                    .send(&q, vec![m])
                    .await
                    .map_err(|err| at(format!("send: {err:?}")))?;
                ensure!(
                    out.len() == 1 && !out[0].duplicate,
                    "{}",
                    at(format!("send outcome {out:?}"))
                );
                ensure!(
                    !model.msgs.contains_key(&out[0].id),
                    "{}",
                    at(format!("id {} reused", out[0].id))
                );
                model.on_send(out[0].id, ms(delay_ms.unwrap_or(0)), now);
            }
            Op::Receive { max, visibility_ms } => {
                let vis = visibility_ms.map(ms);
                let req = ReceiveRequest {
                    max: *max,
                    wait: Duration::ZERO,
                    visibility: vis,
                    consumer: None,
                };
                let ds = e
                    .store
                    .receive(&q, req)
                    .await
                    .map_err(|err| at(format!("receive: {err:?}")))?;
                let want = (*max as usize).min(model.visible().len());
                ensure!(
                    ds.len() == want,
                    "{}",
                    at(format!(
                        "receive returned {} messages, model has {} visible",
                        ds.len(),
                        model.visible().len()
                    ))
                );
                let until = now.plus(vis.unwrap_or(ms(MODEL_VIS_MS)));
                for d in ds {
                    ensure!(
                        d.lease_deadline == until,
                        "{}",
                        at(format!(
                            "lease_deadline {:?}, want {until:?}",
                            d.lease_deadline
                        ))
                    );
                    let rc = model.on_receive(d.id, d.receipt, until).map_err(&at)?;
                    ensure!(
                        d.receive_count == rc,
                        "{}",
                        at(format!(
                            "{} receive_count {}, model {rc}",
                            d.id, d.receive_count
                        ))
                    );
                }
            }
            Op::Ack { pick } => {
                let Some(r) = model.pick(*pick) else { continue };
                let live = model.is_live(&r);
                let res = e
                    .store
                    .ack(
                        &q,
                        vec![AckRequest {
                            receipt: r,
                            result: None,
                        }],
                    )
                    .await
                    .map_err(|err| at(format!("ack call: {err:?}")))?;
                ensure!(res.len() == 1, "{}", at(format!("ack outcomes {res:?}")));
                check_receipt_outcome(&res[0], live).map_err(&at)?;
                if live {
                    model.on_ack(&r);
                }
            }
            Op::Nack { pick, delay_ms } => {
                let Some(r) = model.pick(*pick) else { continue };
                let live = model.is_live(&r);
                let res = e
                    .store
                    .nack(&q, r, Some(ms(*delay_ms)), fail("model"))
                    .await;
                check_receipt_outcome(&res, live).map_err(&at)?;
                if live {
                    let dead = model.on_nack(&r, ms(*delay_ms), now);
                    let want = if dead {
                        NackOutcome {
                            state: None,
                            queue: dlq.clone(),
                        }
                    } else if *delay_ms == 0 {
                        NackOutcome {
                            state: Some(MessageState::Visible),
                            queue: q.clone(),
                        }
                    } else {
                        NackOutcome {
                            state: Some(MessageState::Delayed),
                            queue: q.clone(),
                        }
                    };
                    ensure!(
                        res.as_ref().ok() == Some(&want),
                        "{}",
                        at(format!("nack returned {res:?}, want {want:?}"))
                    );
                }
            }
            Op::Reject { pick } => {
                let Some(r) = model.pick(*pick) else { continue };
                let live = model.is_live(&r);
                let res = e.store.reject(&q, r, fail("model")).await;
                check_receipt_outcome(&res, live).map_err(&at)?;
                if live {
                    ensure!(
                        res.as_ref().ok() == Some(&dlq),
                        "{}",
                        at(format!("reject returned {res:?}"))
                    );
                    model.on_reject(&r);
                }
            }
            Op::Extend {
                pick,
                visibility_ms,
            } => {
                let Some(r) = model.pick(*pick) else { continue };
                let live = model.is_live(&r);
                let res = e.store.extend(&q, r, ms(*visibility_ms)).await;
                check_receipt_outcome(&res, live).map_err(&at)?;
                if live {
                    let until = now.plus(ms(*visibility_ms));
                    ensure!(
                        res.as_ref().ok().map(|l| l.deadline) == Some(until),
                        "{}",
                        at(format!("extend returned {res:?}, want {until:?}"))
                    );
                    model.on_extend(&r, until);
                }
            }
            Op::Advance { ms: n } => e.advance(ms(*n)),
        }
        model.settle(e.now());
        compare_with_model(&e, &q, &dlq, &model)
            .await
            .map_err(&at)?;
    }
    Ok(())
}

fn check_receipt_outcome<T: Debug>(res: &Result<T, StoreError>, live: bool) -> Result<(), String> {
    match (res, live) {
        (Ok(_), true) => Ok(()),
        (Err(e), false) if e.code() == ErrorCode::ReceiptStale => Ok(()),
        (other, true) => Err(format!("live receipt refused: {other:?}")),
        (other, false) => Err(format!(
            "stale receipt not refused with receipt_stale: {other:?}"
        )),
    }
}

async fn compare_with_model(
    e: &Env,
    q: &QueueName,
    dlq: &QueueName,
    model: &Model,
) -> Result<(), String> {
    let s = e
        .store
        .stats(q)
        .await
        .map_err(|err| format!("stats: {err:?}"))?;
    let counts = (s.visible, s.delayed, s.in_flight, s.dead_letter_depth);
    let want = (
        model.visible().len() as u64,
        model.delayed().len() as u64,
        model.in_flight().len() as u64,
        model.dead().len() as u64,
    );
    ensure!(
        counts == want,
        "stats (visible, delayed, in_flight, dead_letter_depth) = {counts:?}, model {want:?}"
    );
    for (state, want) in [
        (BrowseState::Visible, model.visible()),
        (BrowseState::Delayed, model.delayed()),
        (BrowseState::InFlight, model.in_flight()),
    ] {
        let msgs = browse_quiet(e, q, state).await?;
        let got: BTreeSet<MessageId> = msgs.iter().map(|m| m.id).collect();
        ensure!(
            got == want,
            "browse {state:?}: store {got:?}, model {want:?}"
        );
        for m in &msgs {
            let mm = model.msgs[&m.id];
            ensure!(
                m.receive_count == mm.receive_count,
                "{}: receive_count {} in store, {} in model",
                m.id,
                m.receive_count,
                mm.receive_count
            );
            match mm.place {
                Place::Delayed { until } | Place::InFlight { until, .. } => ensure!(
                    m.visible_at == Some(until),
                    "{}: visible_at {:?}, model {until:?}",
                    m.id,
                    m.visible_at
                ),
                _ => {}
            }
        }
    }
    let dead: BTreeSet<MessageId> = browse_quiet(e, dlq, BrowseState::All)
        .await?
        .iter()
        .map(|m| m.id)
        .collect();
    ensure!(
        dead == model.dead(),
        "DLQ holds {dead:?}, model {:?}",
        model.dead()
    );
    Ok(())
}

async fn browse_quiet(e: &Env, q: &QueueName, state: BrowseState) -> Result<Vec<Message>, String> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..1000 {
        let page = e
            .store
            .browse(
                q,
                BrowseRequest {
                    state,
                    limit: 7,
                    cursor: cursor.take(),
                },
            )
            .await
            .map_err(|err| format!("browse {q} {state:?}: {err:?}"))?;
        out.extend(page.messages);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(out),
        }
    }
    Err(format!("browse {q} {state:?} did not end"))
}

fn remembered(status: u16, body: &str, at: Timestamp) -> crate::store::IdempotentResponse {
    crate::store::IdempotentResponse {
        fingerprint: [status as u8; 32],
        status,
        body: bytes::Bytes::from(body.to_string()),
        created_at: at,
    }
}

/// SPEC §7: a response is remembered under its key, the first writer wins, and it is kept
/// for 24 hours, across a restart.
pub async fn idempotency_first_writer_wins_for_a_day_across_restart(h: &dyn Harness) {
    let clock = ManualClock::default();
    let store = h.open(clock.clone()).await;
    let key = "caller|POST /v1/queues/q/messages|k-1";
    assert_eq!(
        store.idempotency_get(key).await.expect("get"),
        None,
        "unknown key"
    );
    let first = remembered(201, r#"{"id":"1"}"#, clock.now());
    assert_eq!(
        store
            .idempotency_put(key, first.clone())
            .await
            .expect("put"),
        None,
        "first put stores"
    );
    let second = remembered(201, r#"{"id":"2"}"#, clock.now());
    assert_eq!(
        store
            .idempotency_put(key, second)
            .await
            .expect("second put"),
        Some(first.clone()),
        "a second put under the same key keeps and returns the first response"
    );
    assert_eq!(
        store.idempotency_get(key).await.expect("get"),
        Some(first.clone())
    );
    assert_eq!(
        store.idempotency_get("other").await.expect("get"),
        None,
        "keys are independent"
    );

    drop(store);
    clock.advance(Duration::from_secs(23 * 3600));
    let store = h.reopen(clock.clone()).await;
    assert_eq!(
        store.idempotency_get(key).await.expect("get after restart"),
        Some(first),
        "remembered responses survive a restart"
    );
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        store.idempotency_get(key).await.expect("get"),
        None,
        "forgotten after 24 h"
    );
    let third = remembered(200, "{}", clock.now());
    assert_eq!(
        store
            .idempotency_put(key, third.clone())
            .await
            .expect("put"),
        None,
        "the key is free again"
    );
    assert_eq!(store.idempotency_get(key).await.expect("get"), Some(third));
}

/// Oversized keys and responses are refused with `invalid_argument`.
pub async fn idempotency_limits(h: &dyn Harness) {
    let e = env(h).await;
    let big_key = "k".repeat(crate::store::MAX_IDEMPOTENCY_KEY_BYTES + 1);
    assert_code(
        e.store
            .idempotency_put(&big_key, remembered(200, "{}", e.now()))
            .await,
        ErrorCode::InvalidArgument,
        "oversized idempotency key",
    );
    let big_body = "x".repeat(crate::store::MAX_IDEMPOTENT_RESPONSE_BYTES + 1);
    assert_code(
        e.store
            .idempotency_put("k", remembered(200, &big_body, e.now()))
            .await,
        ErrorCode::InvalidArgument,
        "oversized remembered response",
    );
    assert_eq!(
        e.store.idempotency_get("k").await.expect("get"),
        None,
        "nothing stored"
    );
}

/// SPEC §6: cancelling a waiting task removes it at once and it ends CANCELLED.
pub async fn cancel_waiting_task_removes_it(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("tasks", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "t").await;
    let later = e.send(&q, delayed("later", secs(60))).await.id;
    let m = e.store.cancel(id).await.expect("cancel");
    assert!(m.cancelled, "the cancelled task reads as cancelled");
    assert_eq!(
        crate::task::TaskStatus::of(&m),
        crate::task::TaskStatus::Cancelled
    );
    e.store.cancel(later).await.expect("cancel delayed");
    e.advance(secs(61));
    e.recv_none(&q, "cancelled tasks are never delivered").await;
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed, s.in_flight), (0, 0, 0));
    assert_eq!(
        s.totals.acked, 0,
        "a cancellation is not an acknowledgement"
    );
    assert!(
        e.get(id).await.cancelled,
        "CANCELLED is kept like a completed record"
    );
    assert_code(
        e.store.cancel(MessageId(42)).await,
        ErrorCode::MessageNotFound,
        "cancel of an unknown id",
    );
}

/// SPEC §6: a running task is flagged; its handler learns it at its next extension or
/// progress report; a late success does not undo it.
pub async fn cancel_running_task_is_cooperative_and_sticky(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("tasks", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "long").await;
    let d = e.recv_one(&q).await;
    let before = e
        .store
        .extend(&q, d.receipt, secs(30))
        .await
        .expect("extend");
    assert!(!before.cancel_requested);
    let m = e.store.cancel(id).await.expect("cancel");
    assert!(
        m.cancelled && m.state == MessageState::InFlight,
        "still running, flagged: {m:?}"
    );
    let after = e
        .store
        .extend(&q, d.receipt, secs(30))
        .await
        .expect("extend after cancel");
    assert!(
        after.cancel_requested,
        "the handler is told at its next extension"
    );
    let p = crate::message::Progress {
        pct: 50.0,
        detail: None,
        at: e.now(),
    };
    assert!(
        e.store
            .progress(&q, d.receipt, p)
            .await
            .expect("progress")
            .cancel_requested
    );
    e.ack(&q, d.receipt).await.expect("a late ack is accepted");
    let m = e.get(id).await;
    assert_eq!(m.state, MessageState::Completed);
    assert!(m.cancelled, "a late success does not undo CANCELLED");

    // A cancelled task that fails is not retried or dead-lettered either.
    let id2 = e.send_text(&q, "fails").await;
    let d2 = e.recv_one(&q).await;
    e.store.cancel(id2).await.expect("cancel");
    e.nack(&q, d2.receipt, None, Some("boom"))
        .await
        .expect("nack");
    e.recv_none(&q, "a cancelled task is not retried").await;
    assert!(e.get(id2).await.cancelled);
    assert_eq!(e.stats(&q).await.dead_letter_depth, 0);

    // Nor when its lease just runs out.
    let id3 = e.send_text(&q, "abandoned").await;
    e.recv_one(&q).await;
    e.store.cancel(id3).await.expect("cancel");
    e.advance(secs(31));
    e.recv_none(&q, "an abandoned cancelled task is not redelivered")
        .await;
    assert_eq!(e.get(id3).await.state, MessageState::Completed);
}

/// A finished task is left as it is by a cancel.
pub async fn cancel_finished_task_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "tasks",
            QueueConfigPatch {
                max_receive_count: Some(1),
                ..Default::default()
            },
        )
        .await;
    let ok = e.send_text(&q, "ok").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack");
    let m = e.store.cancel(ok).await.expect("cancel");
    assert!(!m.cancelled);
    assert_eq!(
        crate::task::TaskStatus::of(&m),
        crate::task::TaskStatus::Success
    );
    let bad = e.send_text(&q, "bad").await;
    let d = e.recv_one(&q).await;
    e.nack(&q, d.receipt, None, Some("no")).await.expect("nack");
    let m = e.store.cancel(bad).await.expect("cancel");
    assert!(!m.cancelled);
    assert_eq!(
        crate::task::TaskStatus::of(&m),
        crate::task::TaskStatus::Failure
    );
}

/// Progress is reported with the lease's receipt, shown with the message, and refused for a
/// stale receipt or a bad percentage.
pub async fn progress_is_reported_and_validated(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("tasks", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "t").await;
    let d = e.recv_one(&q).await;
    let p = crate::message::Progress {
        pct: 42.5,
        detail: Some("page 3".into()),
        at: e.now(),
    };
    let lease = e.store.progress(&q, d.receipt, p).await.expect("progress");
    assert_eq!(
        lease.deadline, d.lease_deadline,
        "progress does not extend the lease"
    );
    let m = e.get(id).await;
    let got = m.progress.expect("progress shown");
    assert_eq!((got.pct, got.detail.as_deref()), (42.5, Some("page 3")));
    for pct in [-1.0, 100.5, f64::NAN] {
        let bad = crate::message::Progress {
            pct,
            detail: None,
            at: e.now(),
        };
        assert_code(
            e.store.progress(&q, d.receipt, bad).await,
            ErrorCode::InvalidArgument,
            "bad pct",
        );
    }
    e.ack(&q, d.receipt).await.expect("ack");
    let late = crate::message::Progress {
        pct: 99.0,
        detail: None,
        at: e.now(),
    };
    assert_code(
        e.store.progress(&q, d.receipt, late).await,
        ErrorCode::ReceiptStale,
        "progress after ack",
    );
}

fn redrive_spec(source: &QueueName) -> crate::redrive::RedriveSpec {
    crate::redrive::RedriveSpec {
        source: source.clone(),
        destination: None,
        limit: None,
        rate: None,
        filter: crate::redrive::RedriveFilter::default(),
        reset_receive_count: true,
        dry_run: false,
        guard: None,
    }
}

/// Rejects every visible message of `q` with the errors given in turn; returns their ids.
async fn dead_letter_all(e: &Env, q: &QueueName, errors: &[&str]) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for err in errors {
        let d = e.recv_one(q).await;
        e.store
            .reject(q, d.receipt, fail(err))
            .await
            .expect("reject");
        ids.push(d.id);
    }
    ids
}

/// SPEC §5: a redrive moves dead letters back to their source queue, keeping id, body,
/// attributes, attempts and source_queue, and resetting the attempt count.
pub async fn redrive_moves_dead_letters_back(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let dlq = qn("work.dlq");
    for i in 0..5 {
        e.send(
            &q,
            NewMessage {
                attributes: attrs(&[("n", &i.to_string())]),
                ..text(&format!("m{i}"))
            },
        )
        .await;
    }
    let ids = dead_letter_all(&e, &q, &["e1", "e2", "e3", "e4", "e5"]).await;
    assert_eq!(e.stats(&q).await.dead_letter_depth, 5);
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("create");
    assert_eq!(job.state, crate::redrive::RedriveState::Running);
    let step = e.store.redrive_step(job.id, 1000).await.expect("step");
    assert_eq!(step.moved_now, 5);
    assert_eq!(
        step.job.state,
        crate::redrive::RedriveState::Completed,
        "nothing left: done"
    );
    assert_eq!((step.job.moved, step.job.matched), (5, 5));
    for id in &ids {
        let m = e.get(*id).await;
        assert_eq!(m.queue, q, "back in its source queue");
        assert_eq!(m.state, MessageState::Visible);
        assert_eq!(m.receive_count, 0, "attempt count starts afresh");
        assert!(m.dead_letter.is_none());
        assert_eq!(m.source_queue.as_ref(), Some(&q), "source_queue is kept");
        assert!(!m.attempts.is_empty(), "attempt history is kept");
        assert!(m.attributes.contains_key("n"));
    }
    assert_eq!(e.stats(&q).await.totals.redriven, 5);
    assert_eq!(e.stats(&q).await.dead_letter_depth, 0);
    let again = e.store.redrive_step(job.id, 10).await;
    assert_code(again, ErrorCode::Conflict, "a finished job takes no steps");
    assert_eq!(e.store.list_redrives().await.expect("list").len(), 1);
    assert_code(
        e.store.get_redrive(crate::redrive::RedriveId(7)).await,
        ErrorCode::MessageNotFound,
        "unknown job",
    );
}

/// Filters, limits and dry runs move exactly what they say.
pub async fn redrive_filter_limit_and_dry_run(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let dlq = qn("work.dlq");
    for i in 0..6 {
        e.send_text(&q, &format!("m{i}")).await;
    }
    dead_letter_all(
        &e,
        &q,
        &[
            "timeout",
            "503 unavailable",
            "timeout",
            "bad input",
            "timeout",
            "503",
        ],
    )
    .await;
    let mut spec = redrive_spec(&dlq);
    spec.filter.error_contains = Some("timeout".into());
    spec.dry_run = true;
    let job = e.store.create_redrive(spec.clone()).await.expect("dry run");
    let step = e.store.redrive_step(job.id, 1000).await.expect("step");
    assert_eq!(
        (step.job.matched, step.job.moved, step.moved_now),
        (3, 0, 0)
    );
    assert_eq!(step.job.state, crate::redrive::RedriveState::Completed);
    assert_eq!(
        e.stats(&q).await.dead_letter_depth,
        6,
        "a dry run moves nothing"
    );

    spec.dry_run = false;
    spec.limit = Some(2);
    let job = e.store.create_redrive(spec).await.expect("limited");
    let step = e.store.redrive_step(job.id, 1000).await.expect("step");
    assert_eq!(
        (step.job.moved, step.job.state),
        (2, crate::redrive::RedriveState::Completed)
    );
    assert_eq!(e.stats(&q).await.visible, 2);
    assert_eq!(e.stats(&q).await.dead_letter_depth, 4);

    // A named destination, one step at a time.
    let other = e.queue("other", QueueConfigPatch::default()).await;
    let mut spec = redrive_spec(&dlq);
    spec.destination = Some(other.clone());
    let job = e.store.create_redrive(spec).await.expect("to other");
    let s1 = e.store.redrive_step(job.id, 3).await.expect("step");
    assert_eq!(
        (s1.moved_now, s1.job.state),
        (3, crate::redrive::RedriveState::Running)
    );
    let s2 = e.store.redrive_step(job.id, 3).await.expect("step");
    assert_eq!(
        (s2.job.moved, s2.job.state),
        (4, crate::redrive::RedriveState::Completed)
    );
    assert_eq!(e.stats(&other).await.visible, 4);
}

/// At most one running job per source; a cancelled job stops and frees the source.
pub async fn redrive_one_job_per_source_and_cancel(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let dlq = qn("work.dlq");
    for i in 0..3 {
        e.send_text(&q, &format!("m{i}")).await;
    }
    dead_letter_all(&e, &q, &["a", "b", "c"]).await;
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("first");
    assert_code(
        e.store.create_redrive(redrive_spec(&dlq)).await,
        ErrorCode::Conflict,
        "second job on the same source",
    );
    let c = e
        .store
        .control_redrive(job.id, crate::redrive::RedriveControl::Cancel)
        .await
        .expect("cancel");
    assert_eq!(c.state, crate::redrive::RedriveState::Cancelled);
    assert_code(
        e.store.redrive_step(job.id, 10).await,
        ErrorCode::Conflict,
        "a cancelled job takes no steps",
    );
    assert_eq!(
        e.stats(&q).await.dead_letter_depth,
        3,
        "cancel moved nothing"
    );
    e.store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("the source is free again");
    assert_code(
        e.store.create_redrive(redrive_spec(&qn("nope"))).await,
        ErrorCode::QueueNotFound,
        "unknown source",
    );
    let mut bad = redrive_spec(&dlq);
    bad.rate = Some(RateLimit {
        limit: 0,
        period: Duration::from_secs(60),
    });
    assert_code(
        e.store.create_redrive(bad).await,
        ErrorCode::InvalidArgument,
        "zero rate",
    );
}

/// A paused destination holds the job (blocked, still running) instead of piling up.
pub async fn redrive_waits_for_a_paused_destination(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let dlq = qn("work.dlq");
    e.send_text(&q, "m").await;
    dead_letter_all(&e, &q, &["x"]).await;
    e.queue(
        "work",
        QueueConfigPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("create");
    let s = e.store.redrive_step(job.id, 10).await.expect("step");
    assert_eq!(
        (s.moved_now, s.job.state),
        (0, crate::redrive::RedriveState::Running)
    );
    assert!(
        s.job
            .blocked
            .as_deref()
            .is_some_and(|b| b.contains("paused")),
        "{:?}",
        s.job.blocked
    );
    e.queue(
        "work",
        QueueConfigPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await;
    let s = e.store.redrive_step(job.id, 10).await.expect("step");
    assert_eq!(
        (s.moved_now, s.job.state, s.job.blocked),
        (1, crate::redrive::RedriveState::Completed, None)
    );
}

/// A job's progress survives a restart, and the resumed job moves each message once.
pub async fn redrive_resumes_after_restart(h: &dyn Harness) {
    let clock = ManualClock::default();
    let store = h.open(clock.clone()).await;
    let e = Env {
        clock: clock.clone(),
        store,
    };
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let dlq = qn("work.dlq");
    for i in 0..5 {
        e.send_text(&q, &format!("m{i}")).await;
    }
    let ids = dead_letter_all(&e, &q, &["a", "b", "c", "d", "e"]).await;
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("create");
    e.store.redrive_step(job.id, 2).await.expect("step");
    drop(e);
    let store = h.reopen(clock.clone()).await;
    let e = Env { clock, store };
    let j = e.store.get_redrive(job.id).await.expect("job survives");
    assert_eq!(
        (j.moved, j.state),
        (2, crate::redrive::RedriveState::Running)
    );
    let s = e.store.redrive_step(job.id, 1000).await.expect("resume");
    assert_eq!(
        (s.moved_now, s.job.moved, s.job.state),
        (3, 5, crate::redrive::RedriveState::Completed)
    );
    for id in ids {
        assert_eq!(e.get(id).await.queue, q);
    }
    assert_eq!(
        e.stats(&q).await.totals.redriven,
        5,
        "each message moved exactly once"
    );
}

/// SPEC §5: stats history points are stored once per queue and time, kept 24 h, and survive
/// a restart.
pub async fn stats_history_is_stored_once_and_kept_a_day(h: &dyn Harness) {
    use crate::stats::{HISTORY_KEPT, SAMPLE_INTERVAL, StatsSample};
    let clock = ManualClock::default();
    let store = h.open(clock.clone()).await;
    let e = Env {
        clock: clock.clone(),
        store,
    };
    let q = e.queue("work", QueueConfigPatch::default()).await;
    e.send_text(&q, "a").await;
    let t0 = StatsSample::slot(e.now());
    let s0 = StatsSample::of(&e.stats(&q).await, t0);
    e.store
        .record_stats(vec![(q.clone(), s0)])
        .await
        .expect("record");
    let mut other = s0;
    other.visible = 999;
    e.store
        .record_stats(vec![(q.clone(), other)])
        .await
        .expect("a second node's sample of the same moment");
    e.send_text(&q, "b").await;
    let t1 = t0.plus(SAMPLE_INTERVAL);
    let s1 = StatsSample::of(&e.stats(&q).await, t1);
    e.store
        .record_stats(vec![(q.clone(), s1), (qn("ghost"), s1)])
        .await
        .expect("unknown queues are skipped");
    let h0 = e.store.stats_history(&q, t0).await.expect("history");
    assert_eq!(h0, vec![s0, s1], "one point per time, the first one kept");
    assert_eq!(e.store.stats_history(&q, t1).await.expect("since").len(), 1);
    assert_eq!((h0[0].visible, h0[1].visible, h0[1].totals.sent), (1, 2, 2));

    drop(e);
    let store = h.reopen(clock.clone()).await;
    let e = Env { clock, store };
    assert_eq!(
        e.store.stats_history(&q, t0).await.expect("history"),
        vec![s0, s1],
        "history survives a restart"
    );
    let late = t0.plus(HISTORY_KEPT).plus(SAMPLE_INTERVAL);
    let s2 = StatsSample { at: late, ..s1 };
    e.store
        .record_stats(vec![(q.clone(), s2)])
        .await
        .expect("record");
    let h = e.store.stats_history(&q, t0).await.expect("history");
    assert_eq!(
        h.first().map(|s| s.at),
        Some(t1),
        "points older than a day are forgotten"
    );
    assert_code(
        e.store.stats_history(&qn("ghost"), t0).await,
        ErrorCode::QueueNotFound,
        "unknown queue",
    );
}

/// SPEC §7: operator actions are appended durably, the engine adds its own dead-letter and
/// expiry events, and queries filter by queue and time.
pub async fn audit_log_records_actions_and_dead_letters(h: &dyn Harness) {
    let clock = ManualClock::default();
    let store = h.open(clock.clone()).await;
    let e = Env {
        clock: clock.clone(),
        store,
    };
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let mut action = crate::audit::AuditEvent::by_broker(e.now(), "queue.purge");
    action.actor = "ops-key".into();
    action.queue = Some("work".into());
    e.store
        .audit_append(vec![action.clone()])
        .await
        .expect("append");
    let id = e.send_text(&q, "poison").await;
    let d = e.recv_one(&q).await;
    e.store
        .reject(&q, d.receipt, fail("cannot parse"))
        .await
        .expect("reject");
    let all = |queue: Option<&str>| crate::audit::AuditQuery {
        queues: queue.map(str::to_string).into_iter().collect(),
        since: None,
        until: None,
        limit: 100,
    };
    let events = e.store.audit_query(all(Some("work"))).await.expect("query");
    assert_eq!(events.first(), Some(&action), "{events:?}");
    let dead = events
        .iter()
        .find(|x| x.action == "message.dead_lettered")
        .expect("dead-letter event");
    assert_eq!(dead.message_id.as_deref(), Some(id.to_string().as_str()));
    assert_eq!(
        dead.details.get("reason").map(String::as_str),
        Some("rejected")
    );
    assert_eq!(
        dead.details.get("last_error").map(String::as_str),
        Some("cannot parse")
    );
    assert!(
        e.store
            .audit_query(all(Some("other")))
            .await
            .expect("query")
            .is_empty()
    );
    let either = crate::audit::AuditQuery {
        queues: vec!["other".into(), "work".into()],
        ..all(None)
    };
    assert_eq!(
        e.store.audit_query(either).await.expect("query"),
        events,
        "any of several queues"
    );
    let earlier = crate::audit::AuditQuery {
        until: Some(Timestamp(e.now().as_millis() - 1)),
        ..all(None)
    };
    assert!(
        e.store
            .audit_query(earlier)
            .await
            .expect("query")
            .is_empty(),
        "until filters by time"
    );
    let up_to_now = crate::audit::AuditQuery {
        until: Some(e.now()),
        ..all(Some("work"))
    };
    assert_eq!(
        e.store.audit_query(up_to_now).await.expect("query"),
        events,
        "until includes its own time"
    );
    let later = crate::audit::AuditQuery {
        since: Some(e.now().plus(secs(1))),
        ..all(None)
    };
    assert!(
        e.store.audit_query(later).await.expect("query").is_empty(),
        "since filters by time"
    );
    let one = crate::audit::AuditQuery {
        limit: 1,
        ..all(None)
    };
    assert_eq!(
        e.store.audit_query(one).await.expect("query").len(),
        1,
        "limit keeps the newest"
    );
    drop(e);
    let store = h.reopen(clock.clone()).await;
    let events = store
        .audit_query(all(None))
        .await
        .expect("query after restart");
    assert!(events.contains(&action), "the audit log survives a restart");
}

/// A released delivery is visible again at once and its attempt does not count: even on
/// the last attempt it is not dead-lettered.
pub async fn release_hands_back_without_counting(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "work",
            QueueConfigPatch {
                max_receive_count: Some(1),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "t").await;
    let d = e.recv_one(&q).await;
    e.store.release(&q, d.receipt).await.expect("release");
    let m = e.get(id).await;
    assert_eq!(
        (m.state, m.receive_count),
        (MessageState::Visible, 0),
        "back, uncounted"
    );
    assert_eq!(
        e.stats(&q).await.dead_letter_depth,
        0,
        "not dead-lettered on its last attempt"
    );
    assert_code(
        e.store.release(&q, d.receipt).await,
        ErrorCode::ReceiptStale,
        "release twice",
    );
    let d2 = e.recv_one(&q).await;
    assert_eq!(d2.receive_count, 1, "the next delivery is attempt 1 again");
}
