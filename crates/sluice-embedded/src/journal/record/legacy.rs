//! Records in the forms earlier versions wrote: read at recovery, never written.
//!
//! The log encodes records with postcard, which is compact because it is not
//! self-describing: a struct that gains a field no longer reads its old bytes. So a record
//! whose shape changes keeps its old form here, frozen, under its old variant index, and the
//! new form goes to a new variant. Redrive jobs now travel as JSON inside their record (see
//! `JsonJob`), so fields they gain from now on need no new variant.

use serde::{Deserialize, Serialize};
use sluice_core::message::Attributes;
use sluice_core::{
    QueueName, RateLimit, RedriveFilter, RedriveId, RedriveJob, RedriveSpec, RedriveState,
    Timestamp,
};

/// A redrive job as written before rates per period, guards and pauses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobV1 {
    pub id: RedriveId,
    pub spec: SpecV1,
    pub state: StateV1,
    pub matched: u64,
    pub moved: u64,
    pub skipped: u64,
    pub blocked: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub cursor: Option<(i64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SpecV1 {
    pub source: QueueName,
    pub destination: Option<QueueName>,
    pub limit: Option<u64>,
    pub rate_per_second: Option<u32>,
    pub filter: FilterV1,
    pub reset_receive_count: bool,
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FilterV1 {
    pub error_contains: Option<String>,
    pub attributes: Attributes,
    pub dead_lettered_before: Option<Timestamp>,
    pub dead_lettered_after: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) enum StateV1 {
    Running,
    Completed,
    Cancelled,
}

impl From<JobV1> for RedriveJob {
    fn from(j: JobV1) -> Self {
        let f = j.spec.filter;
        RedriveJob {
            id: j.id,
            spec: RedriveSpec {
                source: j.spec.source,
                destination: j.spec.destination,
                limit: j.spec.limit,
                rate: j.spec.rate_per_second.map(RateLimit::per_second),
                filter: RedriveFilter {
                    error_contains: f.error_contains,
                    attributes: f.attributes,
                    dead_lettered_before: f.dead_lettered_before,
                    dead_lettered_after: f.dead_lettered_after,
                    ..RedriveFilter::default()
                },
                reset_receive_count: j.spec.reset_receive_count,
                dry_run: j.spec.dry_run,
                guard: None,
            },
            state: match j.state {
                StateV1::Running => RedriveState::Running,
                StateV1::Completed => RedriveState::Completed,
                StateV1::Cancelled => RedriveState::Cancelled,
            },
            matched: j.matched,
            moved: j.moved,
            skipped: j.skipped,
            blocked: j.blocked,
            created_at: j.created_at,
            updated_at: j.updated_at,
            finished_at: j.finished_at,
            cursor: j.cursor,
            paused_reason: None,
            skips: Default::default(),
        }
    }
}
