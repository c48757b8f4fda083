//! Sluice's core: the queue model, the lifecycle rules and the engine-agnostic [`Store`]
//! contract that every storage engine implements.
//!
//! Nothing here touches a disk or a network, and nothing here knows HTTP. Engines
//! (`sluice-embedded`, `sluice-postgres`) implement the contract's concern traits and are
//! served through its checking layer ([`store::Checked`]); `sluice-wire` puts these types on
//! the wire for the server and the SDKs; `sluice-conformance` checks an engine against the
//! contract's rules.
//!
//! Features: `store` (default) compiles the contract's traits, its checking layer and their
//! `async-trait` dependency. A caller of the API (the Rust SDK) turns it off: it needs the
//! model, not the engine contract.

pub mod access;
pub mod adaptive;
pub mod audit;
pub mod backoff;
pub mod config;
pub mod error;
pub mod fair;
pub mod group;
pub mod human;
pub mod json_depth;
pub mod key_stats;
pub mod lifecycle;
pub mod message;
pub mod name;
pub mod push;
pub mod rate;
#[cfg(feature = "store")]
pub mod reading;
pub mod receipt;
pub mod redrive;
pub mod schedule;
pub mod stats;
pub mod store;
pub mod summary;
pub mod task;
pub mod text;
pub mod time;
pub mod trace;
pub mod trend;

pub use audit::{AuditEvent, AuditQuery};
pub use config::{PutQueueOutcome, QueueConfig, QueueConfigPatch, QueueInfo, RateLimit};
pub use error::{ErrorCode, StoreError};
pub use fair::MessageKey;
pub use group::GroupName;
pub use message::{
    Attempt, AttemptOutcome, Attributes, Body, BodyKind, DeadLetter, DeadLetterReason, Delivery,
    Holder, Message, MessageId, MessageState, NewMessage, Progress,
};
pub use name::QueueName;
pub use push::{PushTarget, PushVerdict};
pub use receipt::Receipt;
pub use redrive::{
    RedriveControl, RedriveFilter, RedriveGuard, RedriveId, RedriveJob, RedriveSpec, RedriveState,
    RedriveStep,
};
pub use stats::{QueueStats, Totals};
pub use store::{
    AckRequest, BrowsePage, BrowseRequest, BrowseState, Failure, IDEMPOTENCY_TTL,
    IdempotentResponse, LeaseState, NackOutcome, QueuePage, QueuePageRequest, ReceiveRequest,
    SendOutcome,
};
#[cfg(feature = "store")]
pub use store::{Checked, Store};
pub use task::TaskStatus;
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
pub use trace::TraceContext;
