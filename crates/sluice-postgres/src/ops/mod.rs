//! The `Store` verbs, one module per group of calls.

pub(crate) mod ack;
pub(crate) mod browse;
pub(crate) mod leased;
pub(crate) mod lifecycle;
pub(crate) mod nack;
pub(crate) mod queues;
pub(crate) mod receive;
pub(crate) mod records;
pub(crate) mod redrive;
pub(crate) mod send;
pub(crate) mod stats;
pub(crate) mod summary;
pub(crate) mod tasks;
