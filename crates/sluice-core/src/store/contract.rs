//! The [`Store`] trait: every concern of the contract in one name, for engines behind the
//! checking layer.

use super::{Checked, Inspection, Messaging, QueueAdmin, Records, Redrives, Schedules};

/// The storage engine contract: the six concerns in one trait, so the broker holds one
/// `Arc<dyn Store>` and calls any of their methods on it.
///
/// Only a [`Checked`] engine is a `Store` (the trait is sealed, and implemented for
/// `Checked<S>` whatever engine `S` is): a value that reaches the broker or the conformance
/// suite as a `Store` has passed through the shared checks, so an engine cannot skip them.
/// Engines implement the concern traits, and their `open` hands out the engine wrapped.
///
/// All methods are cancel-safe in the sense that matters for a queue: dropping the future of
/// a write either leaves the write fully applied (and durable) or not applied at all.
pub trait Store:
    QueueAdmin + Messaging + Inspection + Redrives + Records + Schedules + sealed::Sealed
{
}

impl<S> Store for Checked<S> where
    S: QueueAdmin + Messaging + Inspection + Redrives + Records + Schedules
{
}

/// Keeps [`Store`] to [`Checked`] engines.
mod sealed {
    /// Implemented by [`Checked`](super::Checked) alone.
    pub trait Sealed {}

    impl<S> Sealed for super::Checked<S> {}
}
