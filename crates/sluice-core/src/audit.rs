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
            actor: BROKER_ACTOR.to_string(),
            action: action.to_string(),
            queue: None,
            message_id: None,
            details: BTreeMap::new(),
            outcome: "ok".to_string(),
        }
    }
}

/// The actor of the entries the broker writes itself.
pub const BROKER_ACTOR: &str = "sluice";

/// What kind of entry, by who wrote it and what about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// An action taken by a key or a person: a configuration change, a purge, a delete, a
    /// redrive, a cancel (every actor but the broker).
    Operator,
    /// The broker's record of a message's lifecycle: dead letters, expiries (`message.*` by
    /// the broker).
    Message,
    /// The broker's other records: adaptive rate and breaker changes, schedule firings it
    /// missed, redrive jobs it ran.
    Broker,
}

impl AuditKind {
    /// The kind's name in queries and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::Operator => "operator",
            AuditKind::Message => "message",
            AuditKind::Broker => "broker",
        }
    }
}

impl AuditEvent {
    /// Its kind: who wrote it, and what about.
    pub fn kind(&self) -> AuditKind {
        if self.actor != BROKER_ACTOR {
            AuditKind::Operator
        } else if self.action.starts_with("message.") {
            AuditKind::Message
        } else {
            AuditKind::Broker
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
    /// Only these actions (`queue.purge`, `message.dead_lettered`, …); empty for any.
    pub actions: Vec<String>,
    /// Only entries by this actor (an API key's name, `sqs:<access key id>`, `sluice`).
    pub actor: Option<String>,
    /// Only entries of this kind.
    pub kind: Option<AuditKind>,
    /// At most this many, the newest.
    pub limit: usize,
}

impl AuditQuery {
    /// True when `e` passes every condition.
    pub fn matches(&self, e: &AuditEvent) -> bool {
        (self.queues.is_empty() || e.queue.as_ref().is_some_and(|q| self.queues.contains(q)))
            && self.since.is_none_or(|s| e.at >= s)
            && self.until.is_none_or(|u| e.at <= u)
            && (self.actions.is_empty() || self.actions.contains(&e.action))
            && self.actor.as_ref().is_none_or(|a| *a == e.actor)
            && self.kind.is_none_or(|k| k == e.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_actor_then_the_action() {
        let mut e = AuditEvent::by_broker(Timestamp(1), "message.dead_lettered");
        assert_eq!(e.kind(), AuditKind::Message);
        e.action = "queue.rate_adapted".into();
        assert_eq!(e.kind(), AuditKind::Broker);
        e.actor = "ops".into();
        e.action = "message.delete".into();
        assert_eq!(e.kind(), AuditKind::Operator);
        for k in [AuditKind::Operator, AuditKind::Message, AuditKind::Broker] {
            let named = serde_json::to_string(&k).expect("json");
            assert_eq!(named, format!("\"{}\"", k.as_str()));
        }
    }

    #[test]
    fn every_condition_must_hold() {
        let mut e = AuditEvent::by_broker(Timestamp(5), "queue.purge");
        e.actor = "ops".into();
        e.queue = Some("work".into());
        let q = |f: fn(&mut AuditQuery)| {
            let mut q = AuditQuery::default();
            f(&mut q);
            q.matches(&e)
        };
        assert!(q(|_| {}));
        assert!(q(
            |q| q.actions = vec!["queue.delete".into(), "queue.purge".into()]
        ));
        assert!(!q(|q| q.actions = vec!["queue.delete".into()]));
        assert!(q(|q| q.actor = Some("ops".into())));
        assert!(!q(|q| q.actor = Some("sluice".into())));
        assert!(q(|q| q.kind = Some(AuditKind::Operator)));
        assert!(!q(|q| q.kind = Some(AuditKind::Message)));
        assert!(!q(|q| {
            q.kind = Some(AuditKind::Operator);
            q.queues = vec!["other".into()];
        }));
    }
}
