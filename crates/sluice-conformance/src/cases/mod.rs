//! Conformance cases: one `pub async fn <case>(h: &dyn Harness)` per rule or operation.
//!
//! This module holds the helpers every case uses; the cases live in one file per concern
//! (queues, send, receive, ack, nack, redrive, records, …), each re-exported here so the suite
//! names a case `cases::<case>` wherever it is defined.
//!
//! Every case opens its own store on a fresh [`ManualClock`] and moves virtual time with
//! `clock.advance`; only the long-poll cases measure real time. Where the contract leaves a choice,
//! the case says which one it pins and why.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Harness;

mod redrive_control;
pub use redrive_control::*;

use crate::model::{Model, Op, Place, ops_strategy};
use sluice_core::config::{QueueConfig, QueueConfigPatch, RateLimit, limits};
use sluice_core::error::{ErrorCode, StoreError};
use sluice_core::message::{
    AttemptOutcome, Attributes, Body, BodyKind, DeadLetterReason, Delivery, Message, MessageId,
    MessageState, NewMessage,
};
use sluice_core::name::QueueName;
use sluice_core::receipt::Receipt;
use sluice_core::stats::QueueStats;
use sluice_core::store::{
    AckRequest, BrowseRequest, BrowseState, Failure, NackOutcome, ReceiveRequest, SendOutcome,
    Store,
};
use sluice_core::time::{Clock, ManualClock, Timestamp};

mod create_only;
pub use create_only::{
    new_queue_names_are_dot_separated, queue_create_only_refuses_an_existing_queue,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

mod schedules;
pub use schedules::{
    schedule_bad_specs_and_unknown_queue_are_refused, schedule_changed_trigger_reanchors,
    schedule_duplicate_firing_answers_the_first, schedule_fire_step_enqueues_the_firing,
    schedule_firings_carry_key_and_priority, schedule_full_queue_refuses_the_step,
    schedule_put_get_list_delete, schedule_skip_step_counts_missed,
    schedule_stale_step_changes_nothing, schedule_step_for_a_deleted_queue_is_missed,
    schedule_survives_restart,
};

mod summary;
pub use summary::{
    summary_and_redrive_by_key, summary_by_attribute_through_restart_and_redrive,
    summary_counts_every_dead_letter, summary_group_filters_select_exactly_one_group,
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
        retry_after: false,
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

/// A store of the engine under test and the clock it reads, kept together so that a case can
/// move time and restart the store on the same clock.
struct Env {
    clock: ManualClock,
    store: Arc<dyn Store>,
}

/// A fresh, empty store on a fresh clock: where every case starts.
async fn env(h: &dyn Harness) -> Env {
    let clock = ManualClock::default();
    let store = h.open(clock.clone()).await;
    Env { clock, store }
}

impl Env {
    /// The same data opened again on the same clock, as after a broker restart.
    async fn restart(self, h: &dyn Harness) -> Env {
        let Env { clock, store } = self;
        // The harness reopens only once every handle to the previous store is gone.
        drop(store);
        let store = h.reopen(clock.clone()).await;
        Env { clock, store }
    }

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

    /// A queue with the default configuration, and the name of the DLQ created with it.
    async fn queue_and_dlq(&self, name: &str) -> (QueueName, QueueName) {
        let q = self.queue(name, QueueConfigPatch::default()).await;
        (q, qn(&format!("{name}.dlq")))
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

    /// Receives the one visible message as consumer `consumer` (lease `vis`, else the
    /// queue's).
    async fn recv_as(
        &self,
        q: &QueueName,
        consumer: Option<&str>,
        vis: Option<Duration>,
    ) -> Delivery {
        let req = ReceiveRequest {
            max: 1,
            wait: Duration::ZERO,
            visibility: vis,
            consumer: consumer.map(str::to_owned),
        };
        let mut ds = self.store.receive(q, req).await.expect("receive");
        assert_eq!(ds.len(), 1, "one message is visible in {q}");
        ds.remove(0)
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
            retry_after: false,
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

mod queues;
pub use queues::*;
mod queue_listing;
pub use queue_listing::*;
mod send;
pub use send::*;
mod dedup;
pub use dedup::*;
mod receive;
pub use receive::*;
mod ack;
pub use ack::*;
mod nack;
pub use nack::*;
mod lease_expiry;
pub use lease_expiry::*;
mod reject_move_extend;
pub use reject_move_extend::*;
mod receipts;
pub use receipts::*;
mod long_polling;
pub use long_polling::*;
mod delivery_caps;
pub use delivery_caps::*;
mod retention;
pub use retention::*;
mod browse;
pub use browse::*;
mod stats;
pub use stats::*;
mod readings;
pub use readings::*;
mod fairness;
pub use fairness::*;
mod trace;
pub use trace::*;
mod key_flows;
pub use key_flows::*;
mod key_rates;
pub use key_rates::*;
mod key_stats;
pub use key_stats::*;
mod restart;
pub use restart::*;
mod errors;
pub use errors::*;
mod model_based;
pub use model_based::*;
mod idempotency;
pub use idempotency::*;
mod tasks;
pub use tasks::*;
mod redrive;
pub use redrive::*;
mod audit;
pub use audit::*;
mod release;
pub use release::*;
mod groups;
pub use groups::*;
mod adaptive;
pub use adaptive::*;
