//! Sluice's PostgreSQL engine: the `Store` contract on a database that several stateless
//! broker nodes share.
//!
//! Every rule holds across nodes because the database decides: leases are taken with
//! `FOR UPDATE SKIP LOCKED` and carry a token stored with the message (so a receipt is valid
//! on any node), dedup and idempotency keys are rows, rate limits and `max_in_flight` are
//! checked under a lock on the queue's row, as are a governed queue's adaptive rate and
//! breaker (one state per queue, shared in a row), a redrive job is stepped by one node at a time
//! (ownership with a heartbeat, taken over when the owner stops), stats history keeps one
//! point per queue and moment, and the audit log is a table. Long polls wake across nodes
//! through LISTEN/NOTIFY, with a bounded fallback poll.
//!
//! A write answered `Ok` has committed (with the server's `synchronous_commit`, on stable
//! storage). When the database cannot be reached every call fails with `unavailable`, which
//! the broker answers as 503 with `Retry-After`; the connection pool reconnects by itself.
//!
//! [`PostgresStore::send_in`] enqueues inside the caller's own transaction: the business
//! write and its follow-up task commit or roll back together.

mod coverage;
mod db;
mod error;
mod expiry;
mod flow;
mod hosts;
mod hot;
mod local;
mod open;
mod ops;
mod store;

pub use error::OpenError;
pub use open::PostgresOptions;
pub use store::PostgresStore;
