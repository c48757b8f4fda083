//! Conformance cases.
