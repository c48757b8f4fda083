//! The audit log: an append-only record of operator actions (config changes, purge,
//! delete, redrive, cancel) and of dead-letter and expiry events, with actor, queue, message
//! id and details. It answers "who changed this queue" and "why did these messages leave".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// When it happened (ms since the epoch).
    pub at: Timestamp,
    /// Who: the API key's name, `anonymous` without keys, or `sluice` for the broker itself.
    pub actor: String,
    /// What, e.g. `queue.update`, `queue.purge`, `message.dead_lettered`, `redrive.create`.
    pub action: String,
    /// The queue concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The message concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Further keys: the reason of a dead letter, the fields of a config change, a job id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, String>,
    /// `ok`, or what went wrong.
    pub outcome: String,
}

impl AuditEvent {
    /// An event by the broker itself (dead letters, expiry).
    pub fn by_broker(at: Timestamp, action: &str) -> Self {
        AuditEvent {
            at,
            actor: "sluice".to_string(),
            action: action.to_string(),
            queue: None,
            message_id: None,
            details: BTreeMap::new(),
            outcome: "ok".to_string(),
        }
    }
}

/// Which entries to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only entries of these queues (a queue and its DLQ, say); empty for every entry.
    pub queues: Vec<String>,
    /// Only those at or after this time.
    pub since: Option<Timestamp>,
    /// Only those at or before this time (to page back from an earlier answer).
    pub until: Option<Timestamp>,
    /// At most this many, the newest.
    pub limit: usize,
}

impl AuditQuery {
    /// True when `e` passes the queue and time conditions.
    pub fn matches(&self, e: &AuditEvent) -> bool {
        (self.queues.is_empty() || e.queue.as_ref().is_some_and(|q| self.queues.contains(q)))
            && self.since.is_none_or(|s| e.at >= s)
            && self.until.is_none_or(|u| e.at <= u)
    }
}
