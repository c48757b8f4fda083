//! The work a broker does on its own, beside requests: the redrive runner, the scheduler,
//! the stats sampler and push delivery. Each runs from `Broker::serve` until shutdown and
//! goes through the store's atomic steps, so brokers sharing a database never do a step twice.

pub mod push;
pub(crate) mod redrive;
pub mod sampler;
pub(crate) mod scheduler;
