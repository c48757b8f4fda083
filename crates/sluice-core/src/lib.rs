//! Sluice's core: the queue model, the lifecycle rules and the engine-agnostic [`Store`]
//! contract that every storage engine implements.
//!
//! Nothing here touches a disk or a network. Engines (`sluice-embedded`, `sluice-postgres`)
//! implement [`Store`]; the HTTP server and the SDKs speak in these types; the conformance
//! suite (feature `conformance`) checks an engine against SPEC's rules.

pub mod audit;
pub mod backoff;
pub mod config;
pub mod error;
pub mod frame;
pub mod human;
pub mod lifecycle;
pub mod message;
pub mod name;
pub mod rate;
pub mod receipt;
pub mod receive_answer;
pub mod redrive;
pub mod stats;
pub mod store;
pub mod summary;
pub mod task;
pub mod time;
pub mod trend;
pub mod wire;
mod wire_summary;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use audit::{AuditEvent, AuditQuery};
pub use config::{PutQueueOutcome, QueueConfig, QueueConfigPatch, QueueInfo, RateLimit};
pub use error::{ErrorCode, StoreError};
pub use message::{
    Attempt, AttemptOutcome, Attributes, Body, BodyKind, DeadLetter, DeadLetterReason, Delivery,
    Message, MessageId, MessageState, NewMessage, Progress,
};
pub use name::QueueName;
pub use receipt::Receipt;
pub use redrive::{
    RedriveControl, RedriveFilter, RedriveGuard, RedriveId, RedriveJob, RedriveSpec, RedriveState,
    RedriveStep,
};
pub use stats::{QueueStats, Totals};
pub use store::{
    AckRequest, BrowsePage, BrowseRequest, BrowseState, Failure, IDEMPOTENCY_TTL,
    IdempotentResponse, LeaseState, NackOutcome, ReceiveRequest, SendOutcome, Store,
};
pub use task::TaskStatus;
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
