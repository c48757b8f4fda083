//! The audit log as the API shows it (`GET /v1/audit`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntryView {
    /// When (RFC 3339).
    pub at: String,
    /// Who: an API key's name, `anonymous`, or `sluice` for the broker itself.
    pub actor: String,
    /// What, e.g. `queue.purge`, `redrive.create`, `message.dead_lettered`.
    pub action: String,
    /// The queue concerned, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The message concerned, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Further keys.
    pub details: BTreeMap<String, String>,
    /// `ok`, or what went wrong.
    pub outcome: String,
}

/// `GET /v1/audit`: a page of entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditList {
    /// The entries, oldest first.
    pub entries: Vec<AuditEntryView>,
    /// Older entries match too: ask again with `cursor` = `next_cursor`.
    #[serde(default)]
    pub more: bool,
    /// The cursor of the page before this one, when `more`.
    #[serde(default)]
    pub next_cursor: Option<String>,
}
