//! The contract's verbs, one module per group of calls.
//!
//! Their arguments arrive checked by `sluice_core::Checked` (batch sizes, limits, durations,
//! each message's own fields, a move's target, errors cut to their limit); what is checked
//! here needs the queue's state: existence, receipts, the queue's `max_message_bytes` for
//! bodies and results, `max_depth`, and a queue's config once a patch is laid over it.

pub(crate) mod ack;
pub(crate) mod browse;
pub(crate) mod keys;
pub(crate) mod leased;
pub(crate) mod lifecycle;
pub(crate) mod nack;
pub(crate) mod queues;
pub(crate) mod receive;
pub(crate) mod records;
pub(crate) mod redrive;
pub(crate) mod schedules;
pub(crate) mod send;
pub(crate) mod stats;
pub(crate) mod summary;
pub(crate) mod tasks;
