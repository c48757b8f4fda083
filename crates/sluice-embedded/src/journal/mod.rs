//! The journal: the append-only log on disk and what is written to it.
//!
//! Every change is a [`record::Record`] appended to the [`log`] before it is applied in
//! memory; [`recovery`] replays the log into the in-memory state at start-up, and
//! [`compaction`] copies live records forward so old segments can be deleted.

pub(crate) mod compaction;
#[cfg(test)]
mod fuzz_tests;
pub(crate) mod log;
pub(crate) mod record;
pub(crate) mod recovery;
pub(crate) mod space;
