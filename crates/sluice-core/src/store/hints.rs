//! [`Hints`]: what an engine tells its callers about how it works, as data fixed when it is
//! opened, so that callers schedule their work without asking per call.

/// Facts about an engine that callers may use to do less waiting, never rules of the
/// contract: a caller that ignores them stays correct. Read once, when the engine is wrapped
/// in [`Checked`](super::Checked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// When a receive that carries acks may lease while those acks are still being made
    /// durable (see [`Messaging::lease_may_overlap_ack`](super::Messaging::lease_may_overlap_ack)).
    pub ack_overlap: AckOverlap,
    /// The engine keeps FIFO message groups ([`crate::group`]): it accepts a message's
    /// `group` and a queue's `max_in_flight_per_group` other than 1. An engine without them
    /// refuses both with `InvalidArgument` rather than ignore them.
    pub groups: bool,
}

/// Whether a lease may be taken while an ack of the same queue, polled once, is still being
/// made durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AckOverlap {
    /// Never: the acks finish before the lease starts. Always correct; the default.
    #[default]
    Never,
    /// On every queue: the engine's ack applies its change before its future first waits
    /// (the embedded engine decides under its state lock and only then waits for the sync),
    /// so a lease that starts after the ack was polled once already sees it.
    Always,
    /// Decided per queue by the engine's
    /// [`Messaging::lease_may_overlap_ack`](super::Messaging::lease_may_overlap_ack), because
    /// the answer depends on the queue's state. The PostgreSQL engine's ack becomes visible
    /// only at its commit, on another connection, so a lease may not see it yet; that
    /// matters only to a queue with `max_in_flight`, and the engine reads that setting from
    /// the queue's config it keeps in memory, which a caller does not have at hand.
    PerQueue,
}
