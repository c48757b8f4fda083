//! The engine-agnostic conformance suite: every rule of SPEC §2 and the operations of §4 as
//! tests, written once against [`Store`](crate::Store) and run against every engine.
//!
//! An engine's test crate implements [`Harness`] and expands [`conformance_suite!`](crate::conformance_suite):
//!
//! ```ignore
//! sluice_core::conformance_suite!(my_engine_tests::harness);
//! ```
//!
//! Stores evaluate time lazily: a test advances the [`ManualClock`] and the next call on the
//! store sees delays, leases and retention as of the new time.

use std::sync::Arc;

use async_trait::async_trait;

use crate::store::Store;
use crate::time::ManualClock;

pub mod cases;
pub mod model;

/// How the suite gets stores of the engine under test.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// A fresh, empty store reading time from `clock`.
    async fn open(&self, clock: ManualClock) -> Arc<dyn Store>;

    /// The same data opened again, as after a broker restart. The caller has dropped every
    /// handle to the previous store first.
    async fn reopen(&self, clock: ManualClock) -> Arc<dyn Store>;
}
