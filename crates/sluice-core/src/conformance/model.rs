//! Reference model for property tests.
