//! W3C trace context carried by a message from its producer to every consumer of it.
//!
//! A producer that traces its work sends the `traceparent` (and optionally `tracestate`) of
//! the span that enqueued a message; the broker keeps both with the message, unchanged,
//! through retries, dead-lettering, moves and redrives, and hands them to every consumer, so
//! that the consumer's span joins the producer's trace. A message sent without context has
//! none: the broker never invents one for a client that did not ask.
//!
//! The rules are those of W3C Trace Context (Level 1): `traceparent` is
//! `version-trace_id-parent_id-flags` in lowercase hex (`00-` + 32 + `-` + 16 + `-` + 2
//! digits), neither id all zeros, version `ff` invalid; a later version may append fields
//! (printable ASCII) after a `-`. `tracestate` is a list of 1 to 32 `key=value` members
//! separated by commas (with optional spaces or tabs around them), at most 512 characters:
//! a key is 1 to 256 of `a-z 0-9 _ - * / @`, a value 1 to 256 printable ASCII characters
//! without `,` or `=`, not ending in a space. [`TRACEPARENT_PATTERN`] and
//! [`TRACESTATE_PATTERN`] say the same as regular expressions, for the API's schema.

use crate::error::StoreError;

/// Longest `traceparent` kept: version 00 is 55 characters; later versions may be longer.
pub const MAX_TRACEPARENT_CHARS: usize = 256;
/// Longest `tracestate` kept.
pub const MAX_TRACESTATE_CHARS: usize = 512;
/// Most list members of a `tracestate`.
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The rule of a `traceparent` as a regular expression (ECMA-262, with lookaheads), as the
/// OpenAPI document states it: exactly what [`TraceContext::new`] accepts.
pub const TRACEPARENT_PATTERN: &str = "^(?:00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\
     |(?!00|ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\
     (?:-[\\x20-\\x7e]*)?)$";

/// The rule of a `tracestate` as a regular expression, as the OpenAPI document states it
/// (its length limit aside): exactly what [`TraceContext::new`] accepts.
pub const TRACESTATE_PATTERN: &str = "^[a-z0-9_*/@-]{1,256}=[\\x20-\\x2b\\x2d-\\x3c\\x3e-\\x7e]{0,255}\
     [\\x21-\\x2b\\x2d-\\x3c\\x3e-\\x7e](?:[ \\t]*,[ \\t]*[a-z0-9_*/@-]{1,256}=\
     [\\x20-\\x2b\\x2d-\\x3c\\x3e-\\x7e]{0,255}[\\x21-\\x2b\\x2d-\\x3c\\x3e-\\x7e]){0,31}$";

/// The trace context of a message: its producer's `traceparent` and `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// A context from a `traceparent` and an optional `tracestate` (an empty one is none).
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] saying which rule either breaks.
    pub fn new(traceparent: String, tracestate: Option<String>) -> Result<Self, StoreError> {
        check_traceparent(&traceparent)?;
        if let Some(s) = &tracestate {
            check_tracestate(s)?;
        }
        Ok(TraceContext {
            traceparent,
            tracestate,
        })
    }

    /// A context from the two HTTP headers as a propagator reads them: an invalid
    /// `traceparent` is no context at all, and an invalid `tracestate` is dropped, as W3C
    /// Trace Context asks of a receiver (a malformed header from some library on the way must
    /// not cost the producer its message).
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let parent = traceparent?.trim();
        check_traceparent(parent).ok()?;
        // A header's list may hold empty members and spaces around them: kept without.
        let state = tracestate
            .map(|s| {
                s.split(',')
                    .map(|m| m.trim_matches([' ', '\t']))
                    .filter(|m| !m.is_empty())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .filter(|s| !s.is_empty() && check_tracestate(s).is_ok());
        Some(TraceContext {
            traceparent: parent.to_owned(),
            tracestate: state,
        })
    }

    /// The `traceparent` as sent.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` as sent, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The id of the producer's span: 16 lowercase hex digits.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the producer sampled its span (flag bit 0).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|f| f & 1 == 1)
    }
}

impl std::fmt::Display for TraceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.traceparent)
    }
}

fn lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn check_traceparent(p: &str) -> Result<(), StoreError> {
    let bad = |why: &str| {
        Err(StoreError::invalid(format!(
            "traceparent {p:?} is not W3C trace context: {why} (expected \
             00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, lowercase)"
        )))
    };
    if p.len() > MAX_TRACEPARENT_CHARS {
        return bad(&format!("longer than {MAX_TRACEPARENT_CHARS} characters"));
    }
    if !p.bytes().all(|c| (0x20..=0x7e).contains(&c)) {
        return bad("it holds characters other than printable ASCII");
    }
    if p.len() < 55 {
        return bad("too short");
    }
    let b = p.as_bytes();
    if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return bad("its fields are not where they belong");
    }
    let (version, trace, span, flags) = (&p[..2], &p[3..35], &p[36..52], &p[53..55]);
    if ![version, trace, span, flags].into_iter().all(lower_hex) {
        return bad("a field is not lowercase hex");
    }
    if version == "ff" {
        return bad("version ff is invalid");
    }
    if version == "00" && p.len() != 55 {
        return bad("version 00 is exactly 55 characters");
    }
    if p.len() > 55 && b[55] != b'-' {
        return bad("a later version's extra fields follow a '-'");
    }
    if trace.bytes().all(|c| c == b'0') {
        return bad("the trace id is all zeros");
    }
    if span.bytes().all(|c| c == b'0') {
        return bad("the span id is all zeros");
    }
    Ok(())
}

fn check_tracestate(s: &str) -> Result<(), StoreError> {
    let bad = |why: String| {
        Err(StoreError::invalid(format!(
            "tracestate is not W3C trace context: {why}"
        )))
    };
    if s.len() > MAX_TRACESTATE_CHARS {
        return bad(format!("longer than {MAX_TRACESTATE_CHARS} characters"));
    }
    let members: Vec<&str> = s.split(',').collect();
    if members.len() > MAX_TRACESTATE_MEMBERS {
        return bad(format!(
            "{} list members, at most {MAX_TRACESTATE_MEMBERS}",
            members.len()
        ));
    }
    let last = members.len() - 1;
    for (i, raw) in members.into_iter().enumerate() {
        // Spaces and tabs may surround the commas, not the list.
        let m = raw
            .trim_start_matches(|c| i > 0 && (c == ' ' || c == '\t'))
            .trim_end_matches(|c| i < last && (c == ' ' || c == '\t'));
        let Some((key, value)) = m.split_once('=') else {
            return bad(format!("member {m:?} is not key=value"));
        };
        let key_ok = !key.is_empty()
            && key.len() <= 256
            && key
                .bytes()
                .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/' | b'@'));
        if !key_ok {
            return bad(format!("key {key:?} must be 1 to 256 of a-z 0-9 _ - * / @"));
        }
        let value_ok = !value.is_empty()
            && value.len() <= 256
            && value
                .bytes()
                .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
            && !value.ends_with(' ');
        if !value_ok {
            return bad(format!(
                "the value of {key:?} must be 1 to 256 printable ASCII characters, \
                 without ',' or '=' and not ending in a space"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_example_is_kept_as_sent() {
        let t = TraceContext::new(
            PARENT.into(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into()),
        )
        .unwrap();
        assert_eq!(t.traceparent(), PARENT);
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id(), "00f067aa0ba902b7");
        assert!(t.sampled());
        assert_eq!(
            t.tracestate(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
    }

    #[test]
    fn malformed_traceparents_are_refused_with_the_rule() {
        for (p, why) in [
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "too short",
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "lowercase hex",
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version ff",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "trace id is all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "span id is all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                "exactly 55",
            ),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
                "follow a '-'",
            ),
            (
                "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "where they belong",
            ),
        ] {
            let e = TraceContext::new(p.into(), None).unwrap_err().to_string();
            assert!(e.contains(why), "{p}: {e}");
        }
        // A later version may carry more fields.
        let later = format!("{}-cafe", PARENT.replacen("00", "01", 1));
        assert!(TraceContext::new(later, None).is_ok());
    }

    #[test]
    fn malformed_tracestates_are_refused() {
        for s in ["novalue", "UPPER=1", "k=has,=", &"k=v,".repeat(33)] {
            assert!(
                TraceContext::new(PARENT.into(), Some(s.into())).is_err(),
                "{s}"
            );
        }
        assert!(TraceContext::new(PARENT.into(), Some("  ".into())).is_err());
        assert!(TraceContext::new(PARENT.into(), Some("a=1, b=2\t,c=3".into())).is_ok());
        assert!(TraceContext::new(PARENT.into(), Some(" a=1".into())).is_err());
    }

    #[test]
    fn headers_follow_the_receiver_rules() {
        assert_eq!(
            TraceContext::from_headers(Some("garbage"), Some("a=b")),
            None
        );
        let t = TraceContext::from_headers(Some(PARENT), Some("BAD")).unwrap();
        assert_eq!((t.traceparent(), t.tracestate()), (PARENT, None));
        let t = TraceContext::from_headers(Some(PARENT), Some("a=b")).unwrap();
        assert_eq!(t.tracestate(), Some("a=b"));
        let t = TraceContext::from_headers(Some(PARENT), Some(" a=b ,, c=d ")).unwrap();
        assert_eq!(t.tracestate(), Some("a=b,c=d"));
        let t = TraceContext::from_headers(Some(PARENT), Some("  ")).unwrap();
        assert_eq!(t.tracestate(), None);
        assert!(
            !TraceContext::new(PARENT.replace("-01", "-00"), None)
                .unwrap()
                .sampled()
        );
    }
}
