//! The broker as a whole, as a dashboard reads it: every queue's stats a page at a time
//! (`GET /v1/stats`) and what the caller's key may do (`GET /v1/whoami`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::StatsView;

/// One queue in the overview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OverviewRow {
    /// The queue's stats, as `GET /v1/queues/{q}/stats` answers them.
    #[serde(flatten)]
    pub stats: StatsView,
    /// Where its dead letters go, if anywhere.
    pub dead_letter_queue: Option<String>,
    /// Whether deliveries are paused.
    pub paused: bool,
    /// Whether it is some queue's dead-letter queue.
    pub is_dead_letter_queue: bool,
}

/// `GET /v1/stats`: one page of the queues the caller may see, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Overview {
    /// The queues.
    pub queues: Vec<OverviewRow>,
    /// Pass this as `cursor` for the next page while more queues remain; `null` at the end.
    pub next_cursor: Option<String>,
}

/// `GET /v1/whoami`: the caller's key and what it may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WhoAmI {
    /// Whether the broker checks API keys at all.
    pub auth: bool,
    /// The key's name (`null` without authentication).
    pub name: Option<String>,
    /// The key's role; `admin` without authentication.
    pub role: String,
    /// The queue patterns the key covers (`["*"]` without authentication).
    pub queues: Vec<String>,
    /// What the role allows: any of `manage_queues`, `read_queues`, `send`, `consume`,
    /// `inspect`, `stats`, `read_tasks`, `cancel_tasks`, `redrive`.
    pub may: Vec<String>,
}
