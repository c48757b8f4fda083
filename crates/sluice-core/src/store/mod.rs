//! The `Store` contract: everything the broker asks of a storage engine, and the requests,
//! outcomes and limits it speaks in.
//!
//! The contract is split by concern, one trait each: [`QueueAdmin`] (queues), [`Messaging`]
//! (send, receive, settle, running tasks), [`Inspection`] (browse, stats, summaries),
//! [`Redrives`] (redrive jobs), [`Records`] (stats history, audit log, idempotent
//! responses) and [`Schedules`] (schedules and their steps). Every engine (embedded,
//! PostgreSQL) implements all six with the same
//! observable behaviour, which the `sluice-conformance` suite checks. A call that returns
//! `Ok` for a write has reached stable storage.
//!
//! [`Checked`] runs the checks that need no state (batch sizes, limits, durations, each
//! message's own fields) once for every engine and then calls the engine; [`Store`] names all
//! six concerns together and is implemented only by `Checked` engines, so whatever holds a
//! `dyn Store` goes through those checks. Callers that name a concrete engine type import the
//! concern traits with [`prelude`].
//!
//! The traits are behind the default feature `store`: the data types here are also what
//! callers of the HTTP API see (through `sluice-wire`), and they need no engine contract.

use std::time::Duration;

use crate::error::StoreError;
use crate::message::{Body, Message, MessageId, MessageState};
use crate::name::QueueName;
use crate::receipt::Receipt;

#[cfg(feature = "store")]
mod admin;
#[cfg(feature = "store")]
mod checked;
#[cfg(feature = "store")]
mod contract;
#[cfg(feature = "store")]
mod hints;
#[cfg(feature = "store")]
mod inspection;
#[cfg(feature = "store")]
mod messaging;
mod queue_page;
#[cfg(feature = "store")]
mod records;
#[cfg(feature = "store")]
mod redrives;
#[cfg(feature = "store")]
mod schedules;

#[cfg(feature = "store")]
pub use admin::QueueAdmin;
#[cfg(feature = "store")]
pub use checked::Checked;
#[cfg(feature = "store")]
pub use contract::Store;
#[cfg(feature = "store")]
pub use hints::{AckOverlap, Hints};
#[cfg(feature = "store")]
pub use inspection::Inspection;
#[cfg(feature = "store")]
pub use messaging::Messaging;
pub use queue_page::{
    DEFAULT_QUEUE_PAGE, MAX_QUEUE_PAGE, QUEUE_CURSOR_PATTERN, QueuePage, QueuePageRequest,
    QueueRange, queue_cursor,
};
#[cfg(feature = "store")]
pub use records::Records;
#[cfg(feature = "store")]
pub use redrives::Redrives;
#[cfg(feature = "store")]
pub use schedules::{ScheduleStep, Schedules, StepOutcome};

/// The contract's traits, for callers that name a concrete store type (such as
/// `Checked<EmbeddedStore>`): its methods are callable once their concern trait is in scope.
/// A `dyn Store` needs no import.
#[cfg(feature = "store")]
pub mod prelude {
    pub use super::{Inspection, Messaging, QueueAdmin, Records, Redrives, Schedules, Store};
}

/// What one message of a send became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOutcome {
    /// Its id (for a duplicate: the first message's id).
    pub id: MessageId,
    /// True when a send with the same `dedup_id` inside the window already stored it.
    pub duplicate: bool,
}

/// A lease request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveRequest {
    /// Most messages to lease (1–1000).
    pub max: u32,
    /// Long-poll: how long to wait for a first message when none is ready (0–30 s).
    pub wait: Duration,
    /// Lease length; `None` takes the queue's `visibility_timeout`.
    pub visibility: Option<Duration>,
    /// Who is receiving, recorded in attempt history.
    pub consumer: Option<String>,
}

impl Default for ReceiveRequest {
    fn default() -> Self {
        ReceiveRequest {
            max: 1,
            wait: Duration::ZERO,
            visibility: None,
            consumer: None,
        }
    }
}

/// One acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckRequest {
    /// The delivery being acknowledged.
    pub receipt: Receipt,
    /// A result to keep with the completed record for the queue's `result_ttl`.
    pub result: Option<Body>,
}

/// How a failed delivery is reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failure {
    /// The error, stored as `last_error` and in the attempt history.
    pub error: Option<String>,
    /// The consumer reporting it.
    pub consumer: Option<String>,
    /// The nack's delay is the dependency's own Retry-After (a 429 or 503 that said how long
    /// to wait): a sign of congestion that a queue with an adaptive rate slows down for.
    /// Only meaningful on a nack that carries a delay.
    pub retry_after: bool,
}

/// Where a nacked message went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NackOutcome {
    /// `Visible`, `Delayed`, or `None` when it was dead-lettered.
    pub state: Option<MessageState>,
    /// The queue it is in now (the DLQ when dead-lettered).
    pub queue: QueueName,
}

/// A lease after an extension or a progress report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseState {
    /// When the lease ends unless extended again.
    pub deadline: crate::time::Timestamp,
    /// The task was cancelled: the handler should stop and settle it (cooperative).
    pub cancel_requested: bool,
}

/// Which messages a browse lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrowseState {
    /// Only visible ones, in delivery order.
    Visible,
    /// Only delayed ones, soonest first.
    Delayed,
    /// Only leased ones, soonest lease end first.
    InFlight,
    /// All of them: in flight, then visible in delivery order, then delayed.
    All,
}

/// A page request for browsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowseRequest {
    /// Which states.
    pub state: BrowseState,
    /// Page size (1–1000).
    pub limit: u32,
    /// Where the previous page ended.
    pub cursor: Option<String>,
}

/// One page of a browse.
#[derive(Debug, Clone, PartialEq)]
pub struct BrowsePage {
    /// The messages.
    pub messages: Vec<Message>,
    /// Pass this to get the next page; `None` at the end.
    pub next_cursor: Option<String>,
}

/// How long a response stays remembered under its idempotency key.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// Longest idempotency key a store accepts (the server's full key: caller, route and the
/// client's `Idempotency-Key`).
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 1024;

/// Largest response body a store remembers for an idempotency key.
pub const MAX_IDEMPOTENT_RESPONSE_BYTES: usize = 1024 * 1024;

/// A response remembered under an idempotency key, replayed for a repeated request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdempotentResponse {
    /// A digest of the first request, so a reuse of the key with a different request is
    /// told apart (`idempotency_mismatch`).
    pub fingerprint: [u8; 32],
    /// The HTTP status answered.
    pub status: u16,
    /// The response body answered.
    pub body: bytes::Bytes,
    /// When it was stored.
    pub created_at: crate::time::Timestamp,
}

/// How long the broker's claim on an idempotency key holds while its request runs
/// ([`IdempotencyClaim::lease`]): a claim still unanswered after this is taken to belong to a
/// request that died, and another request with the key may take it over.
pub const IDEMPOTENCY_CLAIM_LEASE: Duration = Duration::from_secs(60);

/// Longest lease a claim on an idempotency key may ask for.
pub const MAX_IDEMPOTENCY_CLAIM_LEASE: Duration = Duration::from_secs(3600);

/// A request's claim on an idempotency key
/// ([`Records::idempotency_claim`](crate::store::Records::idempotency_claim)): the request
/// that holds the claim is the only one that runs; every other request with the key waits for
/// its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencyClaim {
    /// A digest of the request (as [`IdempotentResponse::fingerprint`]), so a request with the
    /// same key and another body is told apart while the first one still runs.
    pub fingerprint: [u8; 32],
    /// The claimant's token, chosen at random for each request: only the holder's token
    /// renews or releases a claim.
    pub token: u64,
    /// How long the claim holds without an answer before another request may take it over
    /// (more than zero, at most [`MAX_IDEMPOTENCY_CLAIM_LEASE`]).
    pub lease: Duration,
}

/// What [`Records::idempotency_claim`](crate::store::Records::idempotency_claim) found
/// under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The key was free (never used, its answer forgotten, its claim released or run out) or
    /// already held by this token: the caller holds it now, until the lease ends. It runs the
    /// request, then stores the answer (`idempotency_put`) or gives the key up
    /// (`idempotency_release`).
    Claimed,
    /// Another request holds the key and has not answered yet.
    Pending {
        /// The holder's request digest.
        fingerprint: [u8; 32],
        /// When the holder's claim runs out unless answered or renewed.
        until: crate::time::Timestamp,
    },
    /// The key's answer, kept for [`IDEMPOTENCY_TTL`].
    Answered(IdempotentResponse),
}

/// Checks an idempotency key against the limits (run by `Checked`).
///
/// # Errors
/// `InvalidArgument` naming the limit.
pub fn validate_idempotency_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(StoreError::invalid(format!(
            "idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes, got {}",
            key.len()
        )));
    }
    crate::text::refuse_nul("idempotency key", key)
}

/// Checks a claim on an idempotency key against the limits (run by `Checked`).
///
/// # Errors
/// `InvalidArgument` naming the limit.
pub fn validate_claim(key: &str, claim: &IdempotencyClaim) -> Result<(), StoreError> {
    validate_idempotency_key(key)?;
    if claim.lease < Duration::from_millis(1) || claim.lease > MAX_IDEMPOTENCY_CLAIM_LEASE {
        return Err(StoreError::invalid(format!(
            "an idempotency claim's lease must be 1 ms to {} s, got {} ms",
            MAX_IDEMPOTENCY_CLAIM_LEASE.as_secs(),
            claim.lease.as_millis()
        )));
    }
    Ok(())
}

/// Checks an idempotency key and response against the limits (run by `Checked`).
///
/// # Errors
/// `InvalidArgument` naming the limit.
pub fn validate_idempotent(key: &str, response: &IdempotentResponse) -> Result<(), StoreError> {
    validate_idempotency_key(key)?;
    if response.body.len() > MAX_IDEMPOTENT_RESPONSE_BYTES {
        return Err(StoreError::invalid(format!(
            "a response of {} bytes is too large to remember for an idempotency key (limit {MAX_IDEMPOTENT_RESPONSE_BYTES})",
            response.body.len()
        )));
    }
    Ok(())
}

/// Checks a receive request against the limits (run by `Checked`, so every engine refuses
/// the same inputs).
///
/// # Errors
/// `InvalidArgument` naming the field.
pub fn validate_receive(req: &ReceiveRequest) -> Result<(), StoreError> {
    use crate::config::limits::*;
    if req.max == 0 || req.max as usize > MAX_BATCH {
        return Err(StoreError::invalid(format!(
            "max must be 1 to {MAX_BATCH}, got {}",
            req.max
        )));
    }
    if req.wait > MAX_WAIT {
        return Err(StoreError::invalid(format!(
            "wait must be at most {} ms, got {} ms",
            MAX_WAIT.as_millis(),
            req.wait.as_millis()
        )));
    }
    if let Some(v) = req.visibility {
        validate_visibility(v)?;
    }
    if let Some(c) = &req.consumer {
        validate_consumer(c)?;
    }
    Ok(())
}

/// Checks a consumer name, given at receive or when settling: storable text of at most
/// [`MAX_CONSUMER_CHARS`](crate::config::limits::MAX_CONSUMER_CHARS) characters.
///
/// # Errors
/// `InvalidArgument` naming `consumer`.
pub fn validate_consumer(c: &str) -> Result<(), StoreError> {
    use crate::config::limits::MAX_CONSUMER_CHARS;
    crate::text::refuse_nul("consumer", c)?;
    let chars = c.chars().count();
    if chars > MAX_CONSUMER_CHARS {
        return Err(StoreError::invalid(format!(
            "consumer must be at most {MAX_CONSUMER_CHARS} characters long, got {chars}"
        )));
    }
    Ok(())
}

/// Checks a lease length (run by `Checked`).
///
/// # Errors
/// `InvalidArgument` over 12 h.
pub fn validate_visibility(v: Duration) -> Result<(), StoreError> {
    use crate::config::limits::MAX_VISIBILITY;
    if v > MAX_VISIBILITY {
        return Err(StoreError::invalid(format!(
            "visibility timeout must be at most {} ms, got {} ms",
            MAX_VISIBILITY.as_millis(),
            v.as_millis()
        )));
    }
    Ok(())
}

/// Checks a page size (run by `Checked`).
///
/// # Errors
/// `InvalidArgument` outside 1–1000.
pub fn validate_limit(limit: u32) -> Result<(), StoreError> {
    if limit == 0 || limit as usize > crate::config::limits::MAX_BATCH {
        return Err(StoreError::invalid(format!(
            "limit must be 1 to 1000, got {limit}"
        )));
    }
    Ok(())
}

/// Checks a send batch against the limits that do not depend on the queue: 1–1000 messages,
/// 16 MiB of bodies, and each message's own fields (run by `Checked`, and by an engine's
/// own entry points beside the contract).
///
/// # Errors
/// `InvalidArgument` or `PayloadTooLarge` naming the limit.
pub fn validate_send_batch(messages: &[crate::message::NewMessage]) -> Result<(), StoreError> {
    use crate::config::limits::{MAX_BATCH, MAX_BATCH_BYTES};
    if messages.is_empty() || messages.len() > MAX_BATCH {
        return Err(StoreError::invalid(format!(
            "a send batch holds 1 to {MAX_BATCH} messages, got {}",
            messages.len()
        )));
    }
    // One body over what any queue accepts is named as such, not as an oversized batch.
    let most = crate::config::limits::MAX_MESSAGE_BYTES as usize;
    if let Some((i, m)) = messages
        .iter()
        .enumerate()
        .find(|(_, m)| m.body.len() > most)
    {
        return Err(StoreError::PayloadTooLarge(format!(
            "{} is {} bytes; no queue accepts a body over {most} bytes (the largest \
             max_message_bytes)",
            batch_member(i, messages.len()),
            m.body.len()
        )));
    }
    let total: usize = messages.iter().map(|m| m.body.len()).sum();
    if total > MAX_BATCH_BYTES {
        return Err(StoreError::PayloadTooLarge(format!(
            "a send batch may hold at most {MAX_BATCH_BYTES} bytes of bodies, got {total}; split it"
        )));
    }
    messages
        .iter()
        .try_for_each(crate::message::NewMessage::validate)
}

/// How an error names message `i` of a batch of `len`: by its index (`message 3`, which
/// clients of a batch map back to their input), or as "the message" when it is alone.
fn batch_member(i: usize, len: usize) -> String {
    if len == 1 {
        "the message".to_owned()
    } else {
        format!("message {i}")
    }
}

/// Checks that every body of a batch fits the queue's `max_message_bytes`. Run by the engine,
/// against the config it reads in the same step as the send.
///
/// # Errors
/// `PayloadTooLarge` naming the first message that does not.
pub fn validate_bodies_fit(
    cfg: &crate::config::QueueConfig,
    queue: &crate::name::QueueName,
    messages: &[crate::message::NewMessage],
) -> Result<(), StoreError> {
    for (i, m) in messages.iter().enumerate() {
        if m.body.len() > cfg.max_message_bytes as usize {
            return Err(StoreError::PayloadTooLarge(format!(
                "{} is {} bytes; queue \"{queue}\" accepts at most {} (max_message_bytes)",
                batch_member(i, messages.len()),
                m.body.len(),
                cfg.max_message_bytes
            )));
        }
    }
    Ok(())
}

/// Checks the size of an ack batch (1–1000 receipts; run by `Checked`).
///
/// # Errors
/// `InvalidArgument` outside that range.
pub fn validate_ack_batch(len: usize) -> Result<(), StoreError> {
    use crate::config::limits::MAX_BATCH;
    if len == 0 || len > MAX_BATCH {
        return Err(StoreError::invalid(format!(
            "an ack batch holds 1 to {MAX_BATCH} receipts, got {len}"
        )));
    }
    Ok(())
}

/// Checks the results of an ack batch: a JSON result may nest at most
/// [`MAX_JSON_DEPTH`](crate::config::limits::MAX_JSON_DEPTH) levels (run by `Checked`; the
/// broker checks each result on its own first, so that one bad result is that ack's outcome).
///
/// # Errors
/// `InvalidArgument` naming the first ack whose result nests too deeply.
pub fn validate_ack_results(acks: &[AckRequest]) -> Result<(), StoreError> {
    for (i, a) in acks.iter().enumerate() {
        if let Some(r) = &a.result
            && r.kind == crate::message::BodyKind::Json
        {
            crate::json_depth::check("result", &r.bytes)
                .map_err(|e| StoreError::invalid(format!("acks[{i}]: {e}")))?;
        }
    }
    Ok(())
}

/// Checks the delay of a nack (run by `Checked`).
///
/// # Errors
/// `InvalidArgument` over 7 days.
pub fn validate_nack_delay(delay: Option<Duration>) -> Result<(), StoreError> {
    use crate::config::limits::MAX_DELAY;
    match delay {
        Some(d) if d > MAX_DELAY => Err(StoreError::invalid(format!(
            "delay must be at most {} ms, got {} ms",
            MAX_DELAY.as_millis(),
            d.as_millis()
        ))),
        _ => Ok(()),
    }
}

/// Checks the target of a move: a message cannot move to its own queue (run by `Checked`).
///
/// # Errors
/// `Conflict` (the message is already there) naming the queue, pointing to nack instead.
pub fn validate_move(from: &QueueName, to: &QueueName) -> Result<(), StoreError> {
    if to == from {
        return Err(StoreError::Conflict(format!(
            "cannot move a message of \"{from}\" to the same queue; nack it instead"
        )));
    }
    Ok(())
}

/// Where a browse page ended: the part of the walk (0 in flight, 1 visible, 2 delayed), then
/// the message's time in that part and its id. Engines hand it out as an opaque string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrowseCursor {
    /// The part of the walk.
    pub part: u8,
    /// The message's time in that part (lease end or due time), ms.
    pub at: i64,
    /// The message's id.
    pub id: u64,
}

impl std::fmt::Display for BrowseCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{:x}", self.part, self.at, self.id)
    }
}

impl std::str::FromStr for BrowseCursor {
    type Err = StoreError;
    fn from_str(c: &str) -> Result<Self, StoreError> {
        let bad = || StoreError::bad_cursor("");
        let mut parts = c.splitn(3, '.');
        let (Some(part), Some(at), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let part: u8 = part.parse().map_err(|_| bad())?;
        if part > 2 {
            return Err(bad());
        }
        Ok(BrowseCursor {
            part,
            at: at.parse().map_err(|_| bad())?,
            id: u64::from_str_radix(id, 16).map_err(|_| bad())?,
        })
    }
}

/// How many waiting receives a change that made `visible` messages visible wakes: one per
/// message (`Some(n)`), so one message does not wake every waiting consumer only for all but
/// one to find nothing, or every one (`None`) past a handful of messages.
pub fn receives_to_wake(visible: usize) -> Option<usize> {
    const ONE_BY_ONE: usize = 16;
    (visible <= ONE_BY_ONE).then_some(visible)
}

/// How long a long-polling receive that found nothing sleeps before looking again: until the
/// queue next changes by itself (`next_wake`, ms) or the wait ends, and at most `poll`, so
/// a moved clock or a missed wake-up is noticed.
pub fn long_poll_nap(left: Duration, poll: Duration, now: i64, next_wake: Option<i64>) -> Duration {
    let mut nap = left.min(poll);
    if let Some(at) = next_wake {
        let wait = u64::try_from(at - now).unwrap_or(0).max(1);
        nap = nap.min(Duration::from_millis(wait));
    }
    nap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_messages_wake_one_receive_each_and_many_wake_all() {
        assert_eq!(receives_to_wake(0), Some(0));
        assert_eq!(receives_to_wake(1), Some(1));
        assert_eq!(receives_to_wake(16), Some(16));
        assert_eq!(receives_to_wake(17), None);
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let c = BrowseCursor {
            part: 2,
            at: -5,
            id: 0xabc,
        };
        assert_eq!(c.to_string().parse::<BrowseCursor>().unwrap(), c);
        for bad in ["", "3.1.1", "1.x.1", "1.1.zz", "1.1"] {
            assert!(bad.parse::<BrowseCursor>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_nap_ends_at_the_next_change_but_never_after_the_poll() {
        let s = Duration::from_secs;
        assert_eq!(long_poll_nap(s(20), s(1), 0, None), s(1));
        assert_eq!(
            long_poll_nap(s(20), s(1), 0, Some(300)),
            Duration::from_millis(300)
        );
        assert_eq!(
            long_poll_nap(s(20), s(1), 500, Some(300)),
            Duration::from_millis(1)
        );
        assert_eq!(
            long_poll_nap(Duration::from_millis(50), s(1), 0, None),
            Duration::from_millis(50)
        );
    }
}
