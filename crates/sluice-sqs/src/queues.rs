//! Queue operations: CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, Get/SetQueueAttributes
//! and PurgeQueue, on the same queues as Sluice's own API.
//!
//! A queue created through SQS gets SQS's defaults: no dead-letter queue and unlimited
//! receives until a `RedrivePolicy` says otherwise, a 1 MiB message limit, four days'
//! retention. Its attributes map onto the queue's Sluice settings, so either API may change
//! them and both see the change.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use sluice_core::{
    QueueConfig, QueueConfigPatch, QueueInfo, QueueName, QueuePageRequest, StoreError,
};

use crate::error::SqsError;
use crate::queue_url::{check_sqs_name, queue_of_arn, queue_of_url};
use crate::{Call, Sqs};

/// SQS's defaults for a queue it creates.
fn sqs_defaults() -> QueueConfigPatch {
    QueueConfigPatch {
        max_receive_count: Some(0),
        dead_letter_queue: Some(None),
        max_message_bytes: Some(1_048_576),
        retention: Some(Duration::from_secs(345_600)),
        ..QueueConfigPatch::default()
    }
}

/// Reads `Attributes` of CreateQueue or SetQueueAttributes into `patch`, over what it sets.
fn patch_of(
    attributes: &BTreeMap<String, String>,
    name: &QueueName,
    mut patch: QueueConfigPatch,
) -> Result<QueueConfigPatch, SqsError> {
    for (key, value) in attributes {
        let secs = |min: u64, max: u64| -> Result<u64, SqsError> {
            value
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|v| (min..=max).contains(v))
                .ok_or_else(|| {
                    SqsError::invalid_parameter(format!(
                        "Invalid value for the parameter {key}: {value:?} (from {min} to {max})."
                    ))
                })
        };
        match key.as_str() {
            "VisibilityTimeout" => {
                patch.visibility_timeout = Some(Duration::from_secs(secs(0, 43_200)?));
            }
            "DelaySeconds" => patch.delay = Some(Duration::from_secs(secs(0, 900)?)),
            "MessageRetentionPeriod" => {
                patch.retention = Some(Duration::from_secs(secs(60, 1_209_600)?));
            }
            "MaximumMessageSize" => {
                let bytes = secs(1024, 1_048_576)?;
                patch.max_message_bytes = Some(u32::try_from(bytes).unwrap_or(u32::MAX));
            }
            "RedrivePolicy" => {
                let (dlq, max) = redrive_policy(value)?;
                patch.dead_letter_queue = Some(dlq);
                patch.max_receive_count = Some(max);
            }
            "ReceiveMessageWaitTimeSeconds" => {
                patch.receive_wait = Some(Duration::from_secs(secs(0, 20)?));
            }
            "ContentBasedDeduplication" if name.as_str().ends_with(".fifo") => {
                patch.content_dedup = Some(match value.trim().to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(SqsError::invalid_parameter(format!(
                            "Invalid value for the parameter ContentBasedDeduplication: \
                             {value:?} (true or false)."
                        )));
                    }
                });
            }
            "FifoQueue" => {
                let fifo = value.eq_ignore_ascii_case("true");
                if fifo != name.as_str().ends_with(".fifo") {
                    return Err(SqsError::invalid_parameter(
                        "The name of a FIFO queue can only include alphanumeric characters, \
                         hyphens, or underscores, must end with .fifo suffix; and a queue whose \
                         name ends with .fifo is a FIFO queue.",
                    ));
                }
            }
            other => return Err(SqsError::invalid_attribute(other)),
        }
    }
    Ok(patch)
}

/// `{"deadLetterTargetArn": "...", "maxReceiveCount": N}` (a number or its text); an empty
/// policy removes the dead-letter queue.
fn redrive_policy(value: &str) -> Result<(Option<QueueName>, u32), SqsError> {
    if value.trim().is_empty() {
        return Ok((None, 0));
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Policy {
        dead_letter_target_arn: String,
        max_receive_count: Value,
    }
    let bad = |why: String| {
        SqsError::invalid_parameter(format!(
            "Value {value} for parameter RedrivePolicy is invalid. Reason: {why}"
        ))
    };
    let p: Policy = serde_json::from_str(value).map_err(|e| bad(e.to_string()))?;
    let max = match &p.max_receive_count {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|n| (1..=1000).contains(n))
    .ok_or_else(|| bad("maxReceiveCount must be 1 to 1000.".to_owned()))?;
    let dlq = queue_of_arn(&p.dead_letter_target_arn)?;
    Ok((Some(dlq), u32::try_from(max).unwrap_or(1000)))
}

/// The attributes of a queue, by SQS name.
async fn attributes_of(
    sqs: &Sqs,
    info: &QueueInfo,
) -> Result<BTreeMap<&'static str, String>, SqsError> {
    let c: &QueueConfig = &info.config;
    let stats = sqs.store.stats(&info.name).await?;
    let created = (info.created_at.as_millis() / 1000).to_string();
    let mut out = BTreeMap::from([
        (
            "VisibilityTimeout",
            c.visibility_timeout.as_secs().to_string(),
        ),
        ("DelaySeconds", c.delay.as_secs().to_string()),
        ("MessageRetentionPeriod", c.retention.as_secs().to_string()),
        ("MaximumMessageSize", c.max_message_bytes.to_string()),
        (
            "ReceiveMessageWaitTimeSeconds",
            // Sluice allows up to 30 s; SQS clients accept at most 20.
            c.receive_wait.as_secs().min(20).to_string(),
        ),
        ("ApproximateNumberOfMessages", stats.visible.to_string()),
        (
            "ApproximateNumberOfMessagesNotVisible",
            stats.in_flight.to_string(),
        ),
        (
            "ApproximateNumberOfMessagesDelayed",
            stats.delayed.to_string(),
        ),
        ("CreatedTimestamp", created.clone()),
        ("LastModifiedTimestamp", created),
        ("QueueArn", sqs.identity.arn(info.name.as_str())),
    ]);
    if let Some(dlq) = c
        .dead_letter_queue
        .as_ref()
        .filter(|_| c.max_receive_count > 0)
    {
        let policy = json!({
            "deadLetterTargetArn": sqs.identity.arn(dlq.as_str()),
            "maxReceiveCount": c.max_receive_count,
        });
        out.insert("RedrivePolicy", policy.to_string());
    }
    if info.name.as_str().ends_with(".fifo") {
        out.insert("FifoQueue", "true".to_owned());
        out.insert("ContentBasedDeduplication", c.content_dedup.to_string());
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateQueue {
    queue_name: String,
    #[serde(default)]
    attributes: BTreeMap<String, String>,
    /// Lower-case in SQS's model.
    #[serde(default, rename = "tags")]
    tags: BTreeMap<String, String>,
}

/// A redrive policy makes its target receive another queue's failures, so the key must also
/// manage the target.
fn allow_dead_letter_target(call: &Call, patch: &QueueConfigPatch) -> Result<(), SqsError> {
    match &patch.dead_letter_queue {
        Some(Some(dlq)) => call.allow(dlq),
        _ => Ok(()),
    }
}

pub(crate) async fn create_queue(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: CreateQueue = call.input()?;
    let name = check_sqs_name(&req.queue_name)?;
    call.allow(&name)?;
    let mut patch = patch_of(&req.attributes, &name, sqs_defaults())?;
    allow_dead_letter_target(call, &patch)?;
    if !req.tags.is_empty() {
        patch.tags = Some(req.tags.clone());
    }
    match sqs.store.get_queue(&name).await {
        Ok(info) => {
            // Creating a queue that exists is fine when every attribute given matches.
            let current = attributes_of(sqs, &info).await?;
            let same = req.attributes.iter().all(|(k, v)| {
                current.get(k.as_str()).is_some_and(|c| {
                    c == v
                        || (k == "RedrivePolicy"
                            && redrive_policy(v).ok() == redrive_policy(c).ok())
                })
            });
            if !same {
                return Err(SqsError::name_exists(name.as_str()));
            }
        }
        Err(StoreError::QueueNotFound(_)) => match sqs.store.create_queue(&name, &patch).await {
            Ok(_) => {
                let given = req.attributes.keys().cloned().collect::<Vec<_>>().join(",");
                call.audit(sqs, "queue.create", &name, vec![("attributes", given)])
                    .await;
            }
            Err(StoreError::QueueExists(_)) => {}
            Err(e) => return Err(e.into()),
        },
        Err(e) => return Err(e.into()),
    }
    Ok(json!({ "QueueUrl": call.url(sqs, name.as_str()) }))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct QueueNameInput {
    queue_name: String,
}

pub(crate) async fn get_queue_url(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: QueueNameInput = call.input()?;
    let name = QueueName::new(req.queue_name).map_err(|_| SqsError::no_queue())?;
    call.allow(&name)?;
    sqs.store.get_queue(&name).await?;
    Ok(json!({ "QueueUrl": call.url(sqs, name.as_str()) }))
}

/// One page of `names` (sorted), after `token`: the page and the token of the next, given
/// only when the caller pages (`max` given) and more remain.
fn page(
    mut names: Vec<String>,
    max: Option<u32>,
    token: Option<&str>,
) -> Result<(Vec<String>, Option<String>), SqsError> {
    if max.is_some_and(|m| !(1..=1000).contains(&m)) {
        return Err(SqsError::invalid_parameter(
            "Value for parameter MaxResults is invalid. Reason: must be between 1 and 1000.",
        ));
    }
    names.sort();
    names.retain(|n| token.is_none_or(|t| n.as_str() > t));
    let size = max.unwrap_or(1000) as usize;
    let next = (max.is_some() && names.len() > size).then(|| names[size - 1].clone());
    names.truncate(size);
    Ok((names, next))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListQueues {
    queue_name_prefix: Option<String>,
    max_results: Option<u32>,
    next_token: Option<String>,
}

/// Queues `ListQueues` examines at most for one answer when the key sees only some of them.
const LIST_SCAN_LIMIT: usize = 10_000;

/// `ListQueues`: a page of Sluice's paged listing. Without `MaxResults` SQS answers at most
/// 1000 queues and no `NextToken`; with it, `NextToken` while more remain. The token is the
/// listing's cursor.
pub(crate) async fn list_queues(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: ListQueues = call.input()?;
    if req.max_results.is_some_and(|m| !(1..=1000).contains(&m)) {
        return Err(SqsError::invalid_parameter(
            "Value for parameter MaxResults is invalid. Reason: must be between 1 and 1000.",
        ));
    }
    let prefix = req.queue_name_prefix.unwrap_or_default();
    // A prefix no queue name can start with matches nothing, as in SQS (Sluice's own API
    // refuses it instead).
    let nameable = prefix.len() <= sluice_core::name::MAX_QUEUE_NAME_LEN
        && prefix.chars().all(sluice_core::name::is_name_char);
    if !nameable {
        return Ok(json!({ "QueueUrls": [] }));
    }
    let want = req
        .max_results
        .unwrap_or(sluice_core::store::DEFAULT_QUEUE_PAGE) as usize;
    let mut names = Vec::new();
    let mut cursor = req.next_token.filter(|t| !t.is_empty());
    let mut examined = 0usize;
    loop {
        let page = sqs
            .store
            .list_queues_page(QueuePageRequest {
                prefix: prefix.clone(),
                limit: u32::try_from(want - names.len()).unwrap_or(1).max(1),
                cursor: cursor.clone(),
            })
            .await
            .map_err(|e| match e {
                StoreError::InvalidArgument(_) => SqsError::invalid_parameter(
                    "Value for parameter NextToken is invalid. Reason: pass NextToken exactly \
                     as the previous ListQueues answer returned it.",
                ),
                other => other.into(),
            })?;
        examined += page.queues.len();
        names.extend(
            page.queues
                .into_iter()
                .map(|q| String::from(q.name))
                .filter(|n| call.may(n)),
        );
        cursor = page.next_cursor;
        if names.len() >= want || cursor.is_none() || examined >= LIST_SCAN_LIMIT {
            break;
        }
    }
    let urls: Vec<String> = names.iter().map(|n| call.url(sqs, n)).collect();
    let mut out = json!({ "QueueUrls": urls });
    if let Some(t) = cursor.filter(|_| req.max_results.is_some()) {
        out["NextToken"] = json!(t);
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct QueueUrlInput {
    queue_url: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListDeadLetterSourceQueues {
    queue_url: String,
    max_results: Option<u32>,
    next_token: Option<String>,
}

/// The queues whose dead-letter queue this one is (`queueUrls`, lower-case, as SQS spells it).
pub(crate) async fn list_dead_letter_source_queues(
    sqs: &Sqs,
    call: &Call,
) -> Result<Value, SqsError> {
    let req: ListDeadLetterSourceQueues = call.input()?;
    let dlq = queue_of_url(&req.queue_url)?;
    call.allow(&dlq)?;
    let all = sqs.store.list_queues().await?;
    if !all.iter().any(|q| q.name == dlq) {
        return Err(SqsError::no_queue());
    }
    let names: Vec<String> = all
        .into_iter()
        .filter(|q| {
            q.config.dead_letter_queue.as_ref() == Some(&dlq) && q.config.max_receive_count > 0
        })
        .map(|q| q.name.as_str().to_owned())
        .filter(|n| call.may(n))
        .collect();
    let (names, next) = page(names, req.max_results, req.next_token.as_deref())?;
    let urls: Vec<String> = names.iter().map(|n| call.url(sqs, n)).collect();
    let mut out = json!({ "queueUrls": urls });
    if let Some(t) = next {
        out["NextToken"] = json!(t);
    }
    Ok(out)
}

pub(crate) async fn delete_queue(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: QueueUrlInput = call.input()?;
    let name = queue_of_url(&req.queue_url)?;
    call.allow(&name)?;
    let dropped = sqs.store.delete_queue(&name).await?;
    call.audit(
        sqs,
        "queue.delete",
        &name,
        vec![("dropped", dropped.to_string())],
    )
    .await;
    Ok(json!({}))
}

pub(crate) async fn purge_queue(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: QueueUrlInput = call.input()?;
    let name = queue_of_url(&req.queue_url)?;
    call.allow(&name)?;
    let purged = sqs.store.purge(&name).await?;
    call.audit(
        sqs,
        "queue.purge",
        &name,
        vec![("purged", purged.to_string())],
    )
    .await;
    Ok(json!({}))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetQueueAttributes {
    queue_url: String,
    #[serde(default)]
    attribute_names: Vec<String>,
}

pub(crate) async fn get_queue_attributes(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: GetQueueAttributes = call.input()?;
    let name = queue_of_url(&req.queue_url)?;
    call.allow(&name)?;
    let info = sqs.store.get_queue(&name).await?;
    let all = attributes_of(sqs, &info).await?;
    let every = req.attribute_names.iter().any(|n| n == "All");
    let mut out = serde_json::Map::new();
    for (k, v) in &all {
        if every || req.attribute_names.iter().any(|n| n == k) {
            out.insert((*k).to_owned(), json!(v));
        }
    }
    if out.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({ "Attributes": out }))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SetQueueAttributes {
    queue_url: String,
    attributes: BTreeMap<String, String>,
}

pub(crate) async fn set_queue_attributes(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: SetQueueAttributes = call.input()?;
    let name = queue_of_url(&req.queue_url)?;
    call.allow(&name)?;
    let patch = patch_of(&req.attributes, &name, QueueConfigPatch::default())?;
    allow_dead_letter_target(call, &patch)?;
    sqs.store.get_queue(&name).await?;
    sqs.store.put_queue(&name, &patch).await?;
    let details = req
        .attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    call.audit(sqs, "queue.update", &name, details).await;
    Ok(json!({}))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TagQueue {
    queue_url: String,
    tags: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UntagQueue {
    queue_url: String,
    tag_keys: Vec<String>,
}

/// Adds or replaces tags. The queue's tags are read and written back whole, so two tag
/// changes to one queue at the same instant may lose one of them.
pub(crate) async fn tag_queue(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: TagQueue = call.input()?;
    let name = queue_of_url(&req.queue_url)?;
    call.allow(&name)?;
    let mut tags = sqs.store.get_queue(&name).await?.config.tags;
    let changed: Vec<String> = req.tags.keys().cloned().collect();
    tags.extend(req.tags);
    set_tags(sqs, &name, tags).await?;
    call.audit(sqs, "queue.tag", &name, vec![("keys", changed.join(","))])
        .await;
    Ok(json!({}))
}

/// Removes tags; keys the queue does not have are no error.
pub(crate) async fn untag_queue(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: UntagQueue = call.input()?;
    let name = queue_of_url(&req.queue_url)?;
    call.allow(&name)?;
    let mut tags = sqs.store.get_queue(&name).await?.config.tags;
    for key in &req.tag_keys {
        tags.remove(key);
    }
    set_tags(sqs, &name, tags).await?;
    call.audit(
        sqs,
        "queue.untag",
        &name,
        vec![("keys", req.tag_keys.join(","))],
    )
    .await;
    Ok(json!({}))
}

async fn set_tags(
    sqs: &Sqs,
    name: &QueueName,
    tags: BTreeMap<String, String>,
) -> Result<(), SqsError> {
    let patch = QueueConfigPatch {
        tags: Some(tags),
        ..QueueConfigPatch::default()
    };
    sqs.store.put_queue(name, &patch).await?;
    Ok(())
}

pub(crate) async fn list_queue_tags(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: QueueUrlInput = call.input()?;
    let name = queue_of_url(&req.queue_url)?;
    call.allow(&name)?;
    let tags = sqs.store.get_queue(&name).await?.config.tags;
    if tags.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({ "Tags": tags }))
}
