//! What the state keeps beside its index of live messages: completed records, responses
//! remembered under idempotency keys, and who holds each lease since when.

use sluice_core::Timestamp;

use crate::journal::log::Loc;
use crate::journal::record::{Hold, Qid};

use super::{Slot, State};

/// A completed (acknowledged) message, kept for the queue's `result_ttl`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Done {
    pub qid: Qid,
    pub receive_count: u32,
    pub at: i64,
    pub keep_until: i64,
    /// The ack or complete record (the latter holds the result).
    pub loc: Loc,
    pub len: u32,
    pub has_result: bool,
    /// The record holds the attempts that failed before it completed.
    pub has_attempts: bool,
    /// The record holds the lease its acknowledged delivery ran under (a [`Record::Held`]).
    pub held: bool,
    pub cancelled: bool,
    /// When the message was sent and entered the queue it completed in, in ms. Completion
    /// records written before they were kept read as completed at both.
    pub enqueued_at: i64,
    pub entered_at: i64,
}

/// When a lease began and the name its receiver gave: one name shared by the messages of a
/// receive.
#[derive(Debug, Clone)]
pub(crate) struct LeaseHolder {
    pub at: i64,
    pub consumer: Option<std::sync::Arc<str>>,
}

impl LeaseHolder {
    pub(crate) fn holder(&self) -> sluice_core::Holder {
        sluice_core::Holder {
            started_at: Some(Timestamp(self.at)),
            consumer: self.consumer.as_deref().map(str::to_owned),
        }
    }
}

/// A response remembered under an idempotency key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remembered {
    pub until: i64,
    pub loc: Loc,
    pub len: u32,
}

impl State {
    /// The leases a [`crate::journal::record::Record::Held`] ends or carries: a completed
    /// record keeps its acknowledged delivery's lease in its record (marked `held`), a
    /// compaction copy of a leased message gets its holder back.
    pub(super) fn apply_holds(&mut self, holds: &[Hold]) {
        for h in holds {
            let Some((at, consumer)) = &h.lease else {
                continue;
            };
            if let Some(d) = self.done.get_mut(&h.id) {
                d.held = true;
            } else if self
                .msgs
                .get(&h.id)
                .is_some_and(|m| m.slot() == Slot::Leased)
            {
                let holder = LeaseHolder {
                    at: *at,
                    consumer: consumer.as_deref().map(std::sync::Arc::from),
                };
                self.holders.insert(h.id, holder);
            }
        }
    }
}
