//! The database's shape: schema and migrations, rows and their decoding, ids, counters,
//! transactions and what they write besides rows.

pub(crate) mod catalog;
pub(crate) mod counters;
pub(crate) mod effects;
pub(crate) mod ids;
pub(crate) mod outbox;
pub(crate) mod row;
pub(crate) mod schema;
pub(crate) mod tx;
