//! Log records: every change to the store is one of these, appended to the log before it is
//! applied in memory. Replaying the log through the same `apply` code rebuilds the state.
//!
//! Framing on disk: `[payload length: u32 LE][crc32c of payload: u32 LE][payload]`, the payload
//! being the postcard encoding of a [`Record`]. The checksum catches torn and rotten writes.

use serde::{Deserialize, Serialize};
use sluice_core::message::{Attempt, Attributes, Body, DeadLetter};
use sluice_core::stats::Totals;
use sluice_core::store::IdempotentResponse;
use sluice_core::trace::TraceContext;

mod held;
mod legacy;
pub(crate) use held::Hold;
use held::{VARIANT_HELD, Written, attempts_v1, unwrap_read};
pub(crate) use legacy::JobV1;

/// Bytes of the frame header.
pub(crate) const HEADER: usize = 8;
/// Largest payload accepted when reading; anything larger is corruption.
pub(crate) const MAX_PAYLOAD: usize = 64 * 1024 * 1024;

/// A queue id: queues are named by a number in the log so a rename-free delete/recreate of a
/// name never mixes old and new messages.
pub(crate) type Qid = u32;

/// Why a full message record was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Origin {
    /// A send.
    Send,
    /// A copy written by compaction; changes nothing observable.
    Relocate,
}

/// The complete state of one message, body included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MessageRecord {
    pub origin: Origin,
    pub id: u64,
    pub qid: Qid,
    pub body: Body,
    pub attributes: Attributes,
    pub enqueued_at: i64,
    pub entered_at: i64,
    /// When it becomes visible (if not leased).
    pub visible_at: i64,
    pub receive_count: u32,
    /// `(token, deadline)` of the current lease.
    pub lease: Option<(u64, i64)>,
    pub rich: Rich,
    pub dedup: Option<(String, i64)>,
    /// Its trace context: moved into the [`Record::Traced`] around the record when it is
    /// written (so a message without one keeps the record's older layout), and back by
    /// [`Record::into_base`].
    #[serde(skip)]
    pub trace: Option<TraceContext>,
}

/// The mutable fields too large to keep in memory per message: read from the log on demand.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rich {
    pub last_error: Option<String>,
    #[serde(with = "attempts_v1")]
    pub attempts: Vec<Attempt>,
    pub source_queue: Option<String>,
    pub dead_letter: Option<DeadLetter>,
}

/// What caused an [`UpdateRecord`], for the event counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum UpdateEvent {
    /// Nacked, retried later.
    Nack,
    /// Nacked on the last attempt: dead-lettered from `from`.
    NackExhausted { from: Qid },
    /// Lease ran out, visible again.
    LeaseExpired,
    /// Lease ran out on the last attempt: dead-lettered from `from`.
    LeaseExhausted { from: Qid },
    /// Rejected: dead-lettered from `from`.
    Rejected { from: Qid },
    /// Outlived retention in `from`: dead-lettered.
    Expired { from: Qid },
    /// Moved by a consumer from `from`.
    Moved { from: Qid },
    /// Redriven out of a DLQ.
    Redriven,
    /// Handed back by its consumer without counting the attempt.
    Released,
}

/// A change of a message's state that keeps its body where it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UpdateRecord {
    pub event: UpdateEvent,
    pub id: u64,
    pub qid: Qid,
    pub visible_at: i64,
    pub entered_at: i64,
    pub receive_count: u32,
    pub rich: Rich,
}

/// One lease handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub id: u64,
    pub receive_count: u32,
    pub token: u64,
    pub deadline: i64,
}

/// One acknowledged message, with what its completed record needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Acked {
    pub id: u64,
    pub qid: Qid,
    pub receive_count: u32,
    pub at: i64,
    /// When the completed record is forgotten; `at` itself for `result_ttl` 0.
    pub keep_until: i64,
    /// The task was cancelled: it ends CANCELLED whatever its handler reported.
    pub cancelled: bool,
}

/// Why messages were removed without being acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RemoveReason {
    Deleted,
    /// Expired in a queue without a dead-letter queue (typically a DLQ).
    Expired,
}

/// Per-queue totals and id counters as of this point of the log; replay overwrites with them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    pub next_id: u64,
    pub next_token: u64,
    pub totals: Vec<(Qid, Totals)>,
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Record {
    Message(MessageRecord),
    Update(UpdateRecord),
    Lease(Vec<Lease>),
    Extend {
        id: u64,
        token: u64,
        deadline: i64,
    },
    Ack(Vec<Acked>),
    /// An acknowledgement with a result to keep.
    Complete {
        acked: Acked,
        result: Body,
    },
    /// Completed records copied forward by compaction: kept, not counted again.
    Kept {
        acked: Vec<Acked>,
        /// The result of each, where it has one (same order).
        results: Vec<Option<Body>>,
    },
    Remove {
        ids: Vec<u64>,
        reason: RemoveReason,
        at: i64,
    },
    Purge {
        qid: Qid,
    },
    Dedup {
        qid: Qid,
        key: String,
        id: u64,
        until: i64,
    },
    Checkpoint(Checkpoint),
    /// A redrive job's state with the moves of one step, as written before jobs travelled as
    /// JSON (read, never written; see `legacy`).
    RedriveV1 {
        job: JobV1,
        moves: Vec<UpdateRecord>,
    },
    /// History points of queues' stats, all taken at `at`.
    Samples {
        at: i64,
        entries: Vec<(Qid, sluice_core::stats::StatsSample)>,
    },
    /// Cancellation requested for a running task.
    Cancel {
        id: u64,
    },
    /// A response remembered under an idempotency key until `until`.
    Idempotent {
        key: String,
        until: i64,
        response: IdempotentResponse,
    },
    /// Lease tokens below `upto` may be handed out. Made durable before the first token of
    /// its block is used, so recovery can start past every token a consumer may hold even
    /// when a crash lost the newest lease records (leases are not waited for; see
    /// `docs/architecture.md`).
    Tokens {
        upto: u64,
    },
    /// A redrive job's state, with the moves of one step: one record, so a step and its
    /// progress are durable together or not at all.
    Redrive {
        job: JsonJob,
        moves: Vec<UpdateRecord>,
    },
    /// A schedule as it now is: created, changed, or stepped without a message.
    Schedule {
        schedule: JsonSchedule,
    },
    /// A schedule deleted (the messages it enqueued stay).
    ScheduleDeleted {
        name: String,
    },
    /// A schedule's firing: the message it enqueues and the schedule's progress in one
    /// record, so the two are durable together or not at all. The record is the message's
    /// base record (its body is read from here), like a [`Record::Message`].
    Firing {
        message: MessageRecord,
        schedule: JsonSchedule,
    },
    /// The base record of a message in a FIFO group: its send, or a compaction copy of it.
    /// Ungrouped messages keep [`Record::Message`], so a store that never sees a group writes
    /// nothing an older version could not read.
    Grouped {
        message: MessageRecord,
        group: GroupTag,
    },
    /// An update that brings a grouped message into another queue (dead-lettering, a move):
    /// `order` is its new place, at the end of its group's line there.
    Regrouped {
        update: UpdateRecord,
        order: u64,
    },
    /// A redrive step that moves grouped messages: a [`Record::Redrive`] with the new place
    /// of each grouped message it moves, as `(id, order)`.
    RedriveGrouped {
        job: JsonJob,
        moves: Vec<UpdateRecord>,
        orders: Vec<(u64, u64)>,
    },
    /// An acknowledgement of a message whose earlier attempts failed: its completed record
    /// keeps them, and its result if it has one. Messages without such history keep
    /// [`Record::Ack`] and [`Record::Complete`].
    Finished(Completion),
    /// Compaction copies of [`Record::Finished`]: kept, not counted again.
    KeptFinished {
        finished: Vec<Completion>,
    },
    /// A completion record ([`Record::Ack`], [`Record::Complete`], [`Record::Finished`] or a
    /// compaction copy of one) with the send time and queue entry time of each message it
    /// completes, which the completed record keeps. Completion records written before it
    /// existed stand alone.
    Timed {
        record: Box<Record>,
        times: Vec<Times>,
    },
    /// Leases handed out at `at` to the consumer that named itself `consumer`: a
    /// [`Record::Lease`] that also says when and to whom, for the attempt each delivery ends
    /// as.
    Leased {
        at: i64,
        consumer: Option<String>,
        leases: Vec<Lease>,
    },
    /// A record with what it adds about its messages' deliveries: the lease starts of the
    /// attempts it keeps, and the lease it ends or carries (see `held`). Written by
    /// `encode_into` whenever the record has such things; read back by `decode_frame`, which
    /// puts the starts back into the attempts and keeps the wrapper only for leases.
    Held {
        record: Box<Record>,
        holds: Vec<Hold>,
    },
    /// The recent deliveries (times, ms) of rate-limited queues, as their sliding windows
    /// hold them: written by compaction, which may drop the lease records they were counted
    /// from; replay sets each queue's window to it, so a restart forgets no delivery that
    /// still counts against `rate_limit`.
    RateWindows(Vec<(Qid, Vec<i64>)>),
    /// The base record of a message with a key or a priority (its send, or a compaction copy
    /// of it), and its FIFO group if it has one. Messages without either keep
    /// [`Record::Message`] and [`Record::Grouped`], so a store that never sees a key or a
    /// priority writes nothing an older version could not read.
    Tagged {
        message: MessageRecord,
        tag: TagRecord,
    },
    /// A [`Record::RateWindows`] with each queue's pace (its theoretical arrival time of the
    /// next delivery, ns; see `sluice_core::rate`), which replay sets as it finds it.
    RatePaces(Vec<RatePace>),
    /// The windows and paces of the keys of queues with per-key rate limits
    /// (`key_limits.rate_limit`): replay sets each queue's key windows to its entry, whole.
    /// Written by compaction, and when a queue's key rates are set or changed.
    KeyPaces(Vec<KeyPaces>),
    /// The base record of a message with a trace context (its send, or a compaction copy of
    /// it), with its group, key and priority if it has them. Messages without one keep the
    /// other base records, so a store that never sees a trace context writes nothing an
    /// older version could not read.
    Traced {
        message: MessageRecord,
        tag: TagRecord,
        trace: TraceRecord,
    },
}

/// A trace context as a [`Record::Traced`] keeps it (checked at send).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TraceRecord {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceRecord {
    fn of(t: &TraceContext) -> Self {
        TraceRecord {
            traceparent: t.traceparent().to_owned(),
            tracestate: t.tracestate().map(str::to_owned),
        }
    }

    /// The context again; `None` only for a record no send could have written.
    fn context(&self) -> Option<TraceContext> {
        TraceContext::new(self.traceparent.clone(), self.tracestate.clone()).ok()
    }
}

/// One queue's key windows, as a [`Record::KeyPaces`] keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyPaces {
    pub qid: Qid,
    pub keys: Vec<KeyPace>,
}

/// One key's rate window and pace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyPace {
    /// The key; `None`: the implicit key of messages sent without one.
    pub key: Option<String>,
    /// Delivery times (ms) that may still count.
    pub events: Vec<i64>,
    /// The pace's arrival time of the next delivery (ns), once one was paced.
    pub tat: Option<i64>,
}

/// One queue's rate window and pace, as a [`Record::RatePaces`] keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RatePace {
    pub qid: Qid,
    /// Delivery times (ms) that still count.
    pub events: Vec<i64>,
    /// The pace's arrival time of the next delivery (ns), once one was paced.
    pub tat: Option<i64>,
}

/// What a [`Record::Tagged`] message carries besides its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TagRecord {
    pub group: Option<GroupTag>,
    /// Its key (checked at send).
    pub key: Option<String>,
    /// The priority it was sent with (checked at send).
    pub priority: Option<u8>,
}

impl TagRecord {
    /// The tag of a firing's message: the key and priority its schedule gives it (a
    /// [`Record::Firing`] carries the schedule as it was when it fired, so replay finds them
    /// there), or `None` when it gives neither.
    pub(crate) fn of_firing(s: &sluice_core::schedule::Schedule) -> Option<TagRecord> {
        (s.spec.key.is_some() || s.spec.priority.is_some()).then(|| TagRecord {
            group: None,
            key: s.spec.key.as_ref().map(|k| k.as_str().to_owned()),
            priority: s.spec.priority,
        })
    }
}

/// When a completed message was sent and entered the queue it completed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Times {
    pub id: u64,
    pub enqueued_at: i64,
    pub entered_at: i64,
}

impl Record {
    /// `record` with the times of the messages it completes, or as it is when it keeps none
    /// (a queue without `result_ttl` keeps no completed records).
    pub(crate) fn timed(record: Record, times: Vec<Times>) -> Record {
        if times.is_empty() {
            return record;
        }
        Record::Timed {
            record: Box::new(record),
            times,
        }
    }
}

/// A completed message with its attempts history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Completion {
    pub acked: Acked,
    pub result: Option<Body>,
    /// The attempts that failed before it completed, oldest first.
    #[serde(with = "attempts_v1")]
    pub attempts: Vec<Attempt>,
    /// The last error a consumer reported (a lease that ran out reports none, so it can
    /// differ from the newest attempt's).
    pub last_error: Option<String>,
}

/// A message's FIFO group as its base record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GroupTag {
    /// The group's name (checked at send).
    pub name: String,
    /// Its place in the group's line in its queue: drawn from the id sequence when it entered
    /// the queue (its own id for a send), so later arrivals always come after it.
    pub order: u64,
}

impl Record {
    /// The base record of a message: the plainest form that keeps its group, key and
    /// priority.
    pub(crate) fn base(
        mut message: MessageRecord,
        group: Option<GroupTag>,
        key: Option<&str>,
        priority: Option<u8>,
    ) -> Record {
        if let Some(t) = message.trace.take() {
            let trace = TraceRecord::of(&t);
            return Record::Traced {
                message,
                tag: TagRecord {
                    group,
                    key: key.map(str::to_owned),
                    priority,
                },
                trace,
            };
        }
        match (group, key, priority) {
            (None, None, None) => Record::Message(message),
            (Some(group), None, None) => Record::Grouped { message, group },
            (group, key, priority) => Record::Tagged {
                message,
                tag: TagRecord {
                    group,
                    key: key.map(str::to_owned),
                    priority,
                },
            },
        }
    }

    /// A redrive record of `job` and the moves of its step.
    pub(crate) fn redrive(job: sluice_core::RedriveJob, moves: Vec<UpdateRecord>) -> Record {
        Record::Redrive {
            job: JsonJob(job),
            moves,
        }
    }

    /// A redrive record whose moves give grouped messages new places (`(id, order)`); a
    /// plain [`Record::redrive`] when none does.
    pub(crate) fn redrive_grouped(
        job: sluice_core::RedriveJob,
        moves: Vec<UpdateRecord>,
        orders: Vec<(u64, u64)>,
    ) -> Record {
        if orders.is_empty() {
            return Record::redrive(job, moves);
        }
        Record::RedriveGrouped {
            job: JsonJob(job),
            moves,
            orders,
        }
    }

    /// The message record of a base record (a send, a firing, a grouped send or a copy), with
    /// its trace context if it has one.
    pub(crate) fn into_base(self) -> Option<MessageRecord> {
        match self {
            Record::Traced {
                mut message, trace, ..
            } => {
                message.trace = trace.context();
                Some(message)
            }
            Record::Message(m)
            | Record::Firing { message: m, .. }
            | Record::Grouped { message: m, .. }
            | Record::Tagged { message: m, .. } => Some(m),
            Record::Held { record, .. } => record.into_base(),
            _ => None,
        }
    }

    /// The ids of the messages whose base record or update this is (see [`message_ids_in`]).
    fn message_ids(&self) -> Vec<u64> {
        match self {
            Record::Message(m)
            | Record::Firing { message: m, .. }
            | Record::Grouped { message: m, .. }
            | Record::Tagged { message: m, .. }
            | Record::Traced { message: m, .. } => {
                vec![m.id]
            }
            Record::Update(u) | Record::Regrouped { update: u, .. } => vec![u.id],
            Record::Redrive { moves, .. }
            | Record::RedriveV1 { moves, .. }
            | Record::RedriveGrouped { moves, .. } => moves.iter().map(|u| u.id).collect(),
            Record::Held { record, .. } => record.message_ids(),
            _ => Vec::new(),
        }
    }

    /// The rich fields record `self` holds for message `id`, when it is a record that holds
    /// them (a base record, an update, a redrive step that moved it).
    pub(crate) fn into_rich(self, id: u64) -> Option<Rich> {
        match self {
            Record::Update(u) | Record::Regrouped { update: u, .. } => Some(u.rich),
            Record::Message(r)
            | Record::Firing { message: r, .. }
            | Record::Grouped { message: r, .. }
            | Record::Tagged { message: r, .. }
            | Record::Traced { message: r, .. } => Some(r.rich),
            Record::Redrive { moves, .. }
            | Record::RedriveV1 { moves, .. }
            | Record::RedriveGrouped { moves, .. } => {
                moves.into_iter().find(|u| u.id == id).map(|u| u.rich)
            }
            Record::Held { record, .. } => record.into_rich(id),
            _ => None,
        }
    }
}

/// A redrive job inside a log record, as JSON text: a job's fields can grow (with serde
/// defaults) without a new record variant, which postcard's fixed layout would need.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonJob(pub sluice_core::RedriveJob);

impl Serialize for JsonJob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(&self.0).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for JsonJob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text)
            .map(JsonJob)
            .map_err(serde::de::Error::custom)
    }
}

/// A schedule inside a log record, as JSON text, for the same reason as [`JsonJob`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonSchedule(pub sluice_core::schedule::Schedule);

impl Serialize for JsonSchedule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(&self.0).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for JsonSchedule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text)
            .map(JsonSchedule)
            .map_err(serde::de::Error::custom)
    }
}

/// Encodes `rec` as a frame appended to `out`. Returns the frame length.
pub(crate) fn encode_into(rec: &Record, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER]);
    // Encoding into a Vec cannot fail for these types: every field is serializable.
    let out_vec = std::mem::take(out);
    let mut out_vec =
        postcard::to_extend(&Written::of(rec), out_vec).unwrap_or_else(|_| unreachable_encoding());
    let payload_len = out_vec.len() - start - HEADER;
    let crc = crc32c::crc32c(&out_vec[start + HEADER..]);
    out_vec[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    out_vec[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    *out = out_vec;
    HEADER + payload_len
}

#[cold]
fn unreachable_encoding() -> Vec<u8> {
    panic!("postcard failed to encode a log record into memory")
}

/// The ids of the messages whose base record or newest update may be in `segment` (a whole,
/// closed segment): those of full message records, updates and redrive moves. Reads only
/// the first fields of each record, without checksums; compaction checks every id against
/// the index anyway.
pub(crate) fn message_ids_in(segment: &[u8]) -> Vec<u64> {
    // The leading fields of `MessageRecord` and `UpdateRecord`, in their order.
    #[derive(Deserialize)]
    struct MessageHead {
        _origin: Origin,
        id: u64,
    }
    #[derive(Deserialize)]
    struct UpdateHead {
        _event: UpdateEvent,
        id: u64,
    }
    let mut out = Vec::new();
    let mut off = 0;
    while off + HEADER <= segment.len() {
        let len = u32::from_le_bytes([
            segment[off],
            segment[off + 1],
            segment[off + 2],
            segment[off + 3],
        ]) as usize;
        let end = off + HEADER + len;
        if len == 0 || end > segment.len() {
            break;
        }
        let payload = &segment[off + HEADER..end];
        // postcard writes an enum's variant index first, as a varint.
        match postcard::take_from_bytes::<u32>(payload) {
            // A firing's, a grouped, a tagged and a traced message's first field is its message
            // record.
            Ok((
                VARIANT_MESSAGE | VARIANT_FIRING | VARIANT_GROUPED | VARIANT_TAGGED
                | VARIANT_TRACED,
                rest,
            )) => {
                if let Ok((h, _)) = postcard::take_from_bytes::<MessageHead>(rest) {
                    out.push(h.id);
                }
            }
            // A regrouped update's first field is its update record.
            Ok((VARIANT_UPDATE | VARIANT_REGROUPED, rest)) => {
                if let Ok((h, _)) = postcard::take_from_bytes::<UpdateHead>(rest) {
                    out.push(h.id);
                }
            }
            // A wrapped record: whatever it wraps.
            Ok((VARIANT_HELD, _)) => {
                if let Ok(Record::Held { record, .. }) = postcard::from_bytes(payload) {
                    out.extend(record.message_ids());
                }
            }
            Ok((VARIANT_REDRIVE_V1 | VARIANT_REDRIVE | VARIANT_REDRIVE_GROUPED, _)) => {
                if let Ok(
                    Record::Redrive { moves, .. }
                    | Record::RedriveV1 { moves, .. }
                    | Record::RedriveGrouped { moves, .. },
                ) = postcard::from_bytes(payload)
                {
                    out.extend(moves.iter().map(|u| u.id));
                }
            }
            _ => {}
        }
        off = end;
    }
    out
}

/// Variant indexes of [`Record`] that [`message_ids_in`] reads (checked by a test).
const VARIANT_MESSAGE: u32 = 0;
const VARIANT_UPDATE: u32 = 1;
const VARIANT_REDRIVE_V1: u32 = 11;
const VARIANT_REDRIVE: u32 = 16;
const VARIANT_FIRING: u32 = 19;
const VARIANT_GROUPED: u32 = 20;
const VARIANT_REGROUPED: u32 = 21;
const VARIANT_REDRIVE_GROUPED: u32 = 22;
const VARIANT_TAGGED: u32 = 29;
const VARIANT_TRACED: u32 = 32;

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// Fewer bytes than the frame claims.
    Truncated,
    /// Length out of range.
    BadLength(u32),
    /// Checksum mismatch.
    Checksum,
    /// Checksum fine but the payload does not decode (a bug or an incompatible version).
    Decode(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Truncated => f.write_str("record is cut short"),
            FrameError::BadLength(n) => write!(f, "record length {n} is out of range"),
            FrameError::Checksum => f.write_str("checksum mismatch"),
            FrameError::Decode(e) => write!(f, "record does not decode: {e}"),
        }
    }
}

/// Decodes the frame at the start of `buf`. Returns the record and the frame length.
pub(crate) fn decode_frame(buf: &[u8]) -> Result<(Record, usize), FrameError> {
    if buf.len() < HEADER {
        return Err(FrameError::Truncated);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if len == 0 || len as usize > MAX_PAYLOAD {
        return Err(FrameError::BadLength(len));
    }
    let end = HEADER + len as usize;
    if buf.len() < end {
        return Err(FrameError::Truncated);
    }
    let payload = &buf[HEADER..end];
    if crc32c::crc32c(payload) != crc {
        return Err(FrameError::Checksum);
    }
    let rec = postcard::from_bytes(payload).map_err(|e| FrameError::Decode(e.to_string()))?;
    Ok((unwrap_read(rec), end))
}

#[cfg(test)]
mod tests;
