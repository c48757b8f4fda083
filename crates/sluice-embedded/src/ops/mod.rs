//! The `Store` verbs, one module per group, each working on [`crate::core::Core`] under its
//! lock.

pub(crate) mod summary;
