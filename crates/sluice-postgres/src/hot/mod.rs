//! The hot-path machinery behind receive, ack and send: combining calls into shared
//! statements, packs, reading ahead, hand-off, wake-ups and what a node remembers per queue
//! to make those choices.

pub(crate) mod ack_combine;
pub(crate) mod backlog;
pub(crate) mod combine;
pub(crate) mod handoff;
pub(crate) mod lapse_checks;
pub(crate) mod lease_combine;
pub(crate) mod leases;
pub(crate) mod memo;
pub(crate) mod pack_sizes;
pub(crate) mod packs;
pub(crate) mod read_ahead;
pub(crate) mod send_combine;
pub(crate) mod wake;
