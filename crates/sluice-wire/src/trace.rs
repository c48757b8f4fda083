//! Trace context on the wire: the `trace` object of sends, deliveries and message views.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use sluice_core::error::StoreError;
use sluice_core::trace::TraceContext;

/// W3C trace context: the producer's `traceparent` and `tracestate`, kept with the message and
/// handed to every consumer of it unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceView {
    /// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, lowercase (W3C Trace Context).
    // Its pattern is `sluice_core::trace::TRACEPARENT_PATTERN`, set with the other rules.
    #[schema(
        min_length = 55,
        max_length = 256,
        example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    )]
    pub traceparent: String,
    /// Vendor entries, `key=value` separated by commas (at most 32, 512 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 512)]
    pub tracestate: Option<String>,
}

impl TraceView {
    /// The core context, checked.
    ///
    /// # Errors
    /// `InvalidArgument` saying which rule of W3C Trace Context it breaks.
    pub fn into_context(self) -> Result<TraceContext, StoreError> {
        TraceContext::new(self.traceparent, self.tracestate)
    }
}

impl From<&TraceContext> for TraceView {
    fn from(t: &TraceContext) -> Self {
        TraceView {
            traceparent: t.traceparent().to_owned(),
            tracestate: t.tracestate().map(str::to_owned),
        }
    }
}
