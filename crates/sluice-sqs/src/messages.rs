//! Message operations: SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch) and
//! ChangeMessageVisibility(Batch), as leases, acks and extensions of Sluice's store.
//!
//! A receipt handle is the Sluice receipt of the delivery. Deleting with a receipt whose
//! lease is over succeeds without deleting (as SQS documents for standard queues: the message
//! was delivered again and the newer receipt owns it); changing its visibility is
//! `MessageNotInflight`.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_core::message::{BodyKind, NewMessage};
use sluice_core::store::{AckRequest, ReceiveRequest};
use sluice_core::{Delivery, GroupName, QueueName, Receipt, StoreError};

use crate::attributes::{self, MessageAttributeValue};
use crate::digest::{attributes_md5, md5_hex};
use crate::error::SqsError;
use crate::queue_url::queue_of_url;
use crate::trace_header;
use crate::{Call, Sqs};

/// Most entries in one batch.
const MAX_ENTRIES: usize = 10;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SendEntry {
    #[serde(default)]
    id: Option<String>,
    message_body: Option<String>,
    delay_seconds: Option<u64>,
    #[serde(default)]
    message_attributes: BTreeMap<String, MessageAttributeValue>,
    message_deduplication_id: Option<String>,
    message_group_id: Option<String>,
    /// `AWSTraceHeader` only: X-Ray trace context, kept as the message's trace context.
    #[serde(default)]
    message_system_attributes: BTreeMap<String, MessageAttributeValue>,
}

/// A checked send entry: the message and what its answer reports.
struct Prepared {
    message: NewMessage,
    body_md5: String,
    attributes_md5: Option<String>,
    /// `MD5OfMessageSystemAttributes`, when it has an `AWSTraceHeader`.
    system_md5: Option<String>,
}

/// The trace context of a send's system attributes, and their digest.
fn system_attributes(
    system: BTreeMap<String, MessageAttributeValue>,
) -> Result<(Option<sluice_core::TraceContext>, Option<String>), SqsError> {
    let mut trace = None;
    let mut typed = Vec::new();
    for (name, v) in system {
        if name != trace_header::NAME {
            return Err(SqsError::invalid_parameter(format!(
                "Message system attribute name {name:?} is invalid: the only one a send may \
                 carry is {}.",
                trace_header::NAME
            )));
        }
        let value = match (v.data_type.as_str(), v.string_value) {
            ("String", Some(s)) => s,
            _ => {
                return Err(SqsError::invalid_parameter(
                    "The message system attribute AWSTraceHeader must be of DataType String \
                     with a StringValue.",
                ));
            }
        };
        trace = Some(trace_header::parse(&value)?);
        typed.push((
            name,
            attributes::Typed {
                data_type: v.data_type,
                value: attributes::AttributeValue::Text(value),
            },
        ));
    }
    Ok((trace, attributes_md5(&typed)))
}

/// What a send must follow on its queue: a FIFO queue (`.fifo`) needs a `MessageGroupId`
/// and a `MessageDeduplicationId` unless it deduplicates by content, and takes no
/// per-message delay; a standard queue takes no `MessageDeduplicationId`.
#[derive(Clone, Copy)]
struct QueueKind {
    fifo: bool,
    content_dedup: bool,
}

impl QueueKind {
    /// The kind of `queue`; only a FIFO queue's configuration is read.
    async fn of(sqs: &Sqs, queue: &QueueName) -> Result<QueueKind, SqsError> {
        if !queue.as_str().ends_with(".fifo") {
            return Ok(QueueKind {
                fifo: false,
                content_dedup: false,
            });
        }
        let info = sqs.store.get_queue(queue).await?;
        Ok(QueueKind {
            fifo: true,
            content_dedup: info.config.content_dedup,
        })
    }

    fn check(self, entry: &SendEntry) -> Result<(), SqsError> {
        let not_for_this_queue = |what: &str| {
            SqsError::invalid_parameter(format!(
                "The request includes parameter {what} that is not valid for this queue type."
            ))
        };
        if self.fifo {
            if entry.message_group_id.is_none() {
                return Err(SqsError::missing_parameter("MessageGroupId"));
            }
            if entry.delay_seconds.is_some_and(|d| d > 0) {
                return Err(not_for_this_queue("DelaySeconds"));
            }
            if entry.message_deduplication_id.is_none() && !self.content_dedup {
                return Err(SqsError::invalid_parameter(
                    "The queue should either have ContentBasedDeduplication enabled or \
                     MessageDeduplicationId provided explicitly.",
                ));
            }
        } else if entry.message_deduplication_id.is_some() {
            return Err(not_for_this_queue("MessageDeduplicationId"));
        }
        Ok(())
    }
}

/// The sequence number a FIFO queue gives a message: its id (which grows with each send) in
/// decimal, as wide as SQS's.
pub(crate) fn sequence_number(id: &sluice_core::MessageId) -> String {
    format!("{:020}", id.0)
}

fn prepare(entry: SendEntry, kind: QueueKind) -> Result<Prepared, SqsError> {
    kind.check(&entry)?;
    let body = entry
        .message_body
        .ok_or_else(|| SqsError::missing_parameter("MessageBody"))?;
    if body.is_empty() {
        return Err(SqsError::invalid_parameter(
            "The request must contain the parameter MessageBody.",
        ));
    }
    if let Some(c) = body.chars().find(|&c| !attributes::allowed_in_text(c)) {
        return Err(SqsError::invalid_parameter(format!(
            "Invalid characters found in the message body: U+{:04X} is outside the allowed set \
             (#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF).",
            u32::from(c)
        )));
    }
    let delay = match entry.delay_seconds {
        Some(d) if d > 900 => {
            return Err(SqsError::invalid_parameter(format!(
                "Value {d} for parameter DelaySeconds is invalid. Reason: must be between 0 and 900."
            )));
        }
        d => d.map(Duration::from_secs),
    };
    let typed = attributes::typed_from_wire(entry.message_attributes)?;
    let (trace, system_md5) = system_attributes(entry.message_system_attributes)?;
    let mut stored = sluice_core::message::Attributes::new();
    attributes::to_sluice(&typed, &mut stored);
    // On a FIFO queue `MessageGroupId` is the FIFO group; on a standard queue it is the key
    // of fair delivery, as SQS fair queues use it: the group's messages may go in parallel,
    // and one group's backlog does not hold the others back.
    let (group, key) = match entry.message_group_id {
        Some(id) if kind.fifo => (
            Some(GroupName::new(id).map_err(|e| SqsError::invalid_parameter(e.to_string()))?),
            None,
        ),
        Some(id) => (
            None,
            Some(
                sluice_core::MessageKey::new(id)
                    .map_err(|e| SqsError::invalid_parameter(e.to_string()))?,
            ),
        ),
        None => (None, None),
    };
    Ok(Prepared {
        body_md5: md5_hex(body.as_bytes()),
        attributes_md5: attributes_md5(&typed),
        system_md5,
        message: NewMessage {
            trace,
            body: sluice_core::message::Body::text(body),
            attributes: stored,
            delay,
            dedup_id: entry.message_deduplication_id,
            group,
            key,
            priority: None,
        },
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SendMessage {
    queue_url: String,
    #[serde(flatten)]
    entry: SendEntry,
}

pub(crate) async fn send_message(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: SendMessage = call.input()?;
    let queue = queue_of_url(&req.queue_url)?;
    call.allow(&queue)?;
    let kind = QueueKind::of(sqs, &queue).await?;
    let p = prepare(req.entry, kind)?;
    let out = sqs.store.send(&queue, vec![p.message]).await?;
    let id = out.first().map(|o| o.id);
    let mut answer = json!({
        "MessageId": id.map(|i| i.to_string()).unwrap_or_default(),
        "MD5OfMessageBody": p.body_md5,
    });
    if let Some(md5) = p.attributes_md5 {
        answer["MD5OfMessageAttributes"] = json!(md5);
    }
    if let Some(md5) = p.system_md5 {
        answer["MD5OfMessageSystemAttributes"] = json!(md5);
    }
    if let Some(id) = id.filter(|_| kind.fifo) {
        answer["SequenceNumber"] = json!(sequence_number(&id));
    }
    Ok(answer)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SendMessageBatch {
    queue_url: String,
    entries: Vec<SendEntry>,
}

/// Checks the shape of a batch: 1 to 10 entries with distinct, well-formed ids.
fn check_batch<'a>(ids: impl ExactSizeIterator<Item = &'a str>) -> Result<(), SqsError> {
    match ids.len() {
        0 => return Err(SqsError::empty_batch()),
        n if n > MAX_ENTRIES => return Err(SqsError::too_many_entries(n)),
        _ => {}
    }
    let mut seen = HashSet::new();
    for id in ids {
        let ok = !id.is_empty()
            && id.len() <= 80
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
        if !ok {
            return Err(SqsError::bad_entry_id(id));
        }
        if !seen.insert(id) {
            return Err(SqsError::ids_not_distinct(id));
        }
    }
    Ok(())
}

/// A batch answer of entries that need no more than their id when they succeed.
fn batch_answer<'a>(outcomes: impl Iterator<Item = (&'a str, Result<(), SqsError>)>) -> Value {
    let (mut ok, mut failures) = (Vec::new(), Vec::new());
    for (id, outcome) in outcomes {
        match outcome {
            Ok(()) => ok.push(json!({ "Id": id })),
            Err(e) => failures.push(failed(id, &e)),
        }
    }
    json!({"Successful": ok, "Failed": failures})
}

fn failed(id: &str, e: &SqsError) -> Value {
    json!({"Id": id, "SenderFault": e.sender, "Code": e.code, "Message": e.message})
}

pub(crate) async fn send_message_batch(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: SendMessageBatch = call.input()?;
    let queue = queue_of_url(&req.queue_url)?;
    call.allow(&queue)?;
    let ids: Vec<String> = req
        .entries
        .iter()
        .map(|e| e.id.clone().unwrap_or_default())
        .collect();
    check_batch(ids.iter().map(String::as_str))?;
    let kind = QueueKind::of(sqs, &queue).await?;
    // Entries that pass go in one send (all or nothing); the others are reported failed.
    let (mut answers, mut messages, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    for (id, entry) in ids.into_iter().zip(req.entries) {
        match prepare(entry, kind) {
            Ok(p) => {
                answers.push((id, p.body_md5, p.attributes_md5, p.system_md5));
                messages.push(p.message);
            }
            Err(e) => failures.push(failed(&id, &e)),
        }
    }
    let mut successes = Vec::new();
    if !messages.is_empty() {
        let out = sqs.store.send(&queue, messages).await?;
        for ((id, body_md5, attributes_md5, system_md5), o) in answers.into_iter().zip(out) {
            let mut s =
                json!({"Id": id, "MessageId": o.id.to_string(), "MD5OfMessageBody": body_md5});
            if let Some(md5) = attributes_md5 {
                s["MD5OfMessageAttributes"] = json!(md5);
            }
            if let Some(md5) = system_md5 {
                s["MD5OfMessageSystemAttributes"] = json!(md5);
            }
            if kind.fifo {
                s["SequenceNumber"] = json!(sequence_number(&o.id));
            }
            successes.push(s);
        }
    }
    Ok(json!({"Successful": successes, "Failed": failures}))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ReceiveMessage {
    queue_url: String,
    max_number_of_messages: Option<u32>,
    wait_time_seconds: Option<u64>,
    visibility_timeout: Option<u64>,
    #[serde(default)]
    attribute_names: Vec<String>,
    #[serde(default)]
    message_system_attribute_names: Vec<String>,
    #[serde(default)]
    message_attribute_names: Vec<String>,
}

pub(crate) async fn receive_message(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: ReceiveMessage = call.input()?;
    let queue = queue_of_url(&req.queue_url)?;
    call.allow(&queue)?;
    let max = req.max_number_of_messages.unwrap_or(1);
    if !(1..=10).contains(&max) {
        return Err(SqsError::invalid_parameter(format!(
            "Value {max} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."
        )));
    }
    let wait = match req.wait_time_seconds {
        Some(w) => w,
        // The queue's ReceiveMessageWaitTimeSeconds.
        None => sqs
            .store
            .get_queue(&queue)
            .await?
            .config
            .receive_wait
            .as_secs()
            .min(20),
    };
    if wait > 20 {
        return Err(SqsError::invalid_parameter(format!(
            "Value {wait} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
        )));
    }
    if req.visibility_timeout.is_some_and(|v| v > 43_200) {
        return Err(SqsError::invalid_parameter(
            "Value for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200.",
        ));
    }
    let deliveries = sqs
        .store
        .receive(
            &queue,
            ReceiveRequest {
                max,
                wait: Duration::from_secs(wait),
                visibility: req.visibility_timeout.map(Duration::from_secs),
                consumer: Some("sqs".to_owned()),
            },
        )
        .await?;
    let fifo = queue.as_str().ends_with(".fifo");
    let system: Vec<String> = req
        .attribute_names
        .into_iter()
        .chain(req.message_system_attribute_names)
        .collect();
    let messages: Vec<Value> = deliveries
        .iter()
        .map(|d| message_view(d, &system, &req.message_attribute_names, fifo))
        .collect();
    if messages.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({ "Messages": messages }))
}

/// A delivery as SQS shows a message. Only FIFO queues number their messages.
fn message_view(d: &Delivery, system: &[String], wanted: &[String], fifo: bool) -> Value {
    let body = match d.body.kind {
        BodyKind::Binary => STANDARD.encode(&d.body.bytes),
        BodyKind::Json | BodyKind::Text => String::from_utf8_lossy(&d.body.bytes).into_owned(),
    };
    let mut m = json!({
        "MessageId": d.id.to_string(),
        "ReceiptHandle": d.receipt.to_string(),
        "MD5OfBody": md5_hex(body.as_bytes()),
        "Body": body,
    });
    let every = system.iter().any(|n| n == "All");
    let mut attrs = serde_json::Map::new();
    let mut put = |name: &str, value: String| {
        if every || system.iter().any(|n| n == name) {
            attrs.insert(name.to_owned(), json!(value));
        }
    };
    put("SenderId", "sluice".to_owned());
    put("SentTimestamp", d.enqueued_at.as_millis().to_string());
    put("ApproximateReceiveCount", d.receive_count.to_string());
    if let Some(g) = &d.group {
        put("MessageGroupId", g.as_str().to_owned());
        if fifo {
            put("SequenceNumber", sequence_number(&d.id));
        }
    } else if let Some(k) = &d.key {
        put("MessageGroupId", k.as_str().to_owned());
    }
    if let Some(t) = &d.trace {
        put(trace_header::NAME, trace_header::format(t));
    }
    if !attrs.is_empty() {
        m["Attributes"] = Value::Object(attrs);
    }
    let typed: Vec<_> = attributes::from_sluice(&d.attributes)
        .into_iter()
        .filter(|(name, _)| attributes::wanted(wanted, name))
        .collect();
    if let Some(md5) = attributes_md5(&typed) {
        let shown: serde_json::Map<String, Value> = typed
            .iter()
            .map(|(n, t)| {
                (
                    n.clone(),
                    serde_json::to_value(t.to_wire()).unwrap_or_default(),
                )
            })
            .collect();
        m["MessageAttributes"] = Value::Object(shown);
        m["MD5OfMessageAttributes"] = json!(md5);
    }
    m
}

/// A receipt handle as a Sluice receipt.
fn receipt(handle: &str) -> Result<Receipt, SqsError> {
    handle.parse().map_err(|_| SqsError::bad_receipt(handle))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteMessage {
    queue_url: String,
    receipt_handle: String,
}

/// Deletes messages by receipt handle in one ack of the store (one durable write for the
/// batch), an outcome per handle: a stale receipt deletes nothing and is no error, a
/// malformed one is `ReceiptHandleIsInvalid`.
async fn delete_many(
    sqs: &Sqs,
    queue: &QueueName,
    handles: &[&str],
) -> Result<Vec<Result<(), SqsError>>, SqsError> {
    let parsed: Vec<Result<Receipt, SqsError>> = handles.iter().map(|h| receipt(h)).collect();
    let acks: Vec<AckRequest> = parsed
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|&receipt| AckRequest {
            receipt,
            result: None,
        })
        .collect();
    let mut acked = if acks.is_empty() {
        Vec::new()
    } else {
        sqs.store.ack(queue, acks).await?
    }
    .into_iter();
    Ok(parsed
        .into_iter()
        .map(|p| {
            p?;
            match acked.next() {
                Some(Ok(()) | Err(StoreError::ReceiptStale | StoreError::MessageNotFound(_)))
                | None => Ok(()),
                Some(Err(e)) => Err(e.into()),
            }
        })
        .collect())
}

pub(crate) async fn delete_message(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: DeleteMessage = call.input()?;
    let queue = queue_of_url(&req.queue_url)?;
    call.allow(&queue)?;
    let mut out = delete_many(sqs, &queue, &[req.receipt_handle.as_str()]).await?;
    out.pop().unwrap_or(Ok(()))?;
    Ok(json!({}))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HandleEntry {
    id: String,
    receipt_handle: String,
    visibility_timeout: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HandleBatch {
    queue_url: String,
    entries: Vec<HandleEntry>,
}

pub(crate) async fn delete_message_batch(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: HandleBatch = call.input()?;
    let queue = queue_of_url(&req.queue_url)?;
    call.allow(&queue)?;
    check_batch(req.entries.iter().map(|e| e.id.as_str()))?;
    let handles: Vec<&str> = req
        .entries
        .iter()
        .map(|e| e.receipt_handle.as_str())
        .collect();
    let outcomes = delete_many(sqs, &queue, &handles).await?;
    Ok(batch_answer(
        req.entries.iter().map(|e| e.id.as_str()).zip(outcomes),
    ))
}

/// Sets the visibility of one in-flight message to `secs` from now.
async fn change_one(
    sqs: &Sqs,
    queue: &QueueName,
    handle: &str,
    secs: Option<u64>,
) -> Result<(), SqsError> {
    let receipt = receipt(handle)?;
    let secs = secs.ok_or_else(|| SqsError::missing_parameter("VisibilityTimeout"))?;
    if secs > 43_200 {
        return Err(SqsError::invalid_parameter(format!(
            "Value {secs} for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200."
        )));
    }
    match sqs
        .store
        .extend(queue, receipt, Duration::from_secs(secs))
        .await
    {
        Ok(_) => Ok(()),
        Err(StoreError::ReceiptStale | StoreError::MessageNotFound(_)) => {
            Err(SqsError::not_in_flight())
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ChangeVisibility {
    queue_url: String,
    receipt_handle: String,
    visibility_timeout: Option<u64>,
}

pub(crate) async fn change_message_visibility(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: ChangeVisibility = call.input()?;
    let queue = queue_of_url(&req.queue_url)?;
    call.allow(&queue)?;
    change_one(sqs, &queue, &req.receipt_handle, req.visibility_timeout).await?;
    Ok(json!({}))
}

pub(crate) async fn change_message_visibility_batch(
    sqs: &Sqs,
    call: &Call,
) -> Result<Value, SqsError> {
    let req: HandleBatch = call.input()?;
    let queue = queue_of_url(&req.queue_url)?;
    call.allow(&queue)?;
    check_batch(req.entries.iter().map(|e| e.id.as_str()))?;
    // The store has no batch extend: one at a time.
    let mut outcomes = Vec::with_capacity(req.entries.len());
    for e in &req.entries {
        outcomes.push(change_one(sqs, &queue, &e.receipt_handle, e.visibility_timeout).await);
    }
    Ok(batch_answer(
        req.entries.iter().map(|e| e.id.as_str()).zip(outcomes),
    ))
}
