//! Sluice's default storage engine: the [`Store`](sluice_core::Store) contract on a data
//! directory on local disk.
//!
//! Layout of a data directory:
//! - `LOCK`: held by the process serving it;
//! - `queues.json` and `queues.journal`: the queue catalog, a snapshot replaced atomically and
//!   the changes since, appended;
//! - `log/NNNNNNNNNN.log`: the append-only log of checksummed records, in segments;
//! - `audit/audit-NNNNNNNNNN.jsonl`: the audit log, JSON lines, rotated by size.
//!
//! See `docs/architecture.md` for why it is built this way and what it promises.

mod audit;
mod catalog;
mod core;
mod error;
mod expiry;
mod flow;
mod journal;
mod maintenance;
mod open;
mod ops;
mod state;
mod store;

pub use error::OpenError;
pub use open::{DEFAULT_MIN_FREE_DISK, EmbeddedOptions, RecoveryReport};
pub use store::EmbeddedStore;
