//! `AWSTraceHeader`, SQS's system attribute for X-Ray trace context, as the W3C trace context
//! every Sluice message carries: an X-Ray trace id `1-<8 hex time>-<24 hex>` is the 32 hex
//! digits of a W3C trace id, the `Parent` segment is its span id and `Sampled=1` its sampled
//! flag (the mapping OpenTelemetry's X-Ray propagator uses). So a message sent over SQS with
//! X-Ray context is traced over Sluice's own API too, and the other way round.

use sluice_core::trace::TraceContext;

use crate::error::SqsError;

/// The system attribute's name.
pub(crate) const NAME: &str = "AWSTraceHeader";

/// The trace context of an `AWSTraceHeader` value.
///
/// # Errors
/// `InvalidParameterValue` when it is not an X-Ray header with a `Root` and a `Parent`.
pub(crate) fn parse(value: &str) -> Result<TraceContext, SqsError> {
    let bad = || {
        SqsError::invalid_parameter(format!(
            "Value {value:?} for the message system attribute AWSTraceHeader is invalid: \
             expected an X-Ray trace header such as \
             Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
        ))
    };
    let (mut root, mut parent, mut sampled) = (None, None, false);
    for field in value.split(';').map(str::trim).filter(|f| !f.is_empty()) {
        match field.split_once('=') {
            Some(("Root", r)) => root = Some(r),
            Some(("Parent", p)) => parent = Some(p),
            Some(("Sampled", s)) => sampled = s == "1",
            // Lineage and other fields are not carried.
            _ => {}
        }
    }
    let (root, parent) = root.zip(parent).ok_or_else(bad)?;
    let trace = match root.split('-').collect::<Vec<_>>()[..] {
        ["1", time, rest] if time.len() == 8 && rest.len() == 24 => format!("{time}{rest}"),
        _ => return Err(bad()),
    };
    let flags = if sampled { "01" } else { "00" };
    TraceContext::new(
        format!(
            "00-{}-{}-{flags}",
            trace.to_ascii_lowercase(),
            parent.to_ascii_lowercase()
        ),
        None,
    )
    .map_err(|_| bad())
}

/// The `AWSTraceHeader` value of a trace context.
pub(crate) fn format(t: &TraceContext) -> String {
    let id = t.trace_id();
    format!(
        "Root=1-{}-{};Parent={};Sampled={}",
        &id[..8],
        &id[8..],
        t.parent_id(),
        u8::from(t.sampled())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn an_xray_header_is_w3c_trace_context_and_back() {
        let t = parse(XRAY).unwrap();
        assert_eq!(
            t.traceparent(),
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
        );
        assert_eq!(format(&t), XRAY);
        let unsampled = parse("Parent=53995c3f42cd8ad8;Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0;Lineage=a:1")
            .unwrap();
        assert!(!unsampled.sampled());
    }

    #[test]
    fn malformed_headers_are_refused() {
        for v in [
            "",
            "Root=1-5759e988-bd862e3fe1be46a994272793",
            "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
            "Root=1-5759e98-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=xyz",
            "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
        ] {
            assert!(parse(v).is_err(), "{v}");
        }
    }
}
