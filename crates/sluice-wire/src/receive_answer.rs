//! The JSON answer to a receive, written straight from the deliveries.
//!
//! A receive of 100 messages of 1 KiB answers about 130 KB of JSON, and building it through
//! [`DeliveryView`](crate::DeliveryView) copied every body into a value of its own,
//! re-parsed it and then grew the answer's buffer a copy at a time: about a sixth of the
//! broker's CPU over HTTP at that size. [`to_json`] writes the same bytes as serializing
//! [`ReceiveResponse`](crate::ReceiveResponse) (a test holds them equal) into one
//! buffer sized up front. Each body takes the form [`BodyForm`] decides for `DeliveryView`
//! too: a JSON body is checked before it is written as it is, so stored bytes that are not
//! JSON (from a caller that vouched wrongly) come out in base64 and never break the answer.

use std::io::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

use crate::body::BodyForm;
use crate::settle::AckOutcome;
use sluice_core::message::{Body, Delivery};
use sluice_core::time::rfc3339;

/// Bytes of JSON around each body: ids, counts, times and field names.
const PER_MESSAGE: usize = 320;

/// The answer to a receive: `{"messages":[…]}`, with `"acked"` when the request carried acks.
pub fn to_json(deliveries: &[Delivery], acked: Option<&[AckOutcome]>) -> Vec<u8> {
    let bodies: usize = deliveries.iter().map(|d| d.body.len()).sum();
    let mut out = Vec::with_capacity(bodies + deliveries.len() * PER_MESSAGE + 64);
    out.extend_from_slice(b"{\"messages\":[");
    for (i, d) in deliveries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        delivery(&mut out, d);
    }
    out.push(b']');
    if let Some(acked) = acked {
        out.extend_from_slice(b",\"acked\":");
        json(&mut out, acked);
    }
    out.push(b'}');
    out
}

/// Writes `v` with serde_json, which cannot fail for these types.
fn json(out: &mut Vec<u8>, v: &(impl Serialize + ?Sized)) {
    if serde_json::to_writer(&mut *out, v).is_err() {
        out.extend_from_slice(b"null");
    }
}

fn delivery(out: &mut Vec<u8>, d: &Delivery) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{{\"id\":\"{}\",\"receipt\":\"{}\",", d.id, d.receipt);
    body(out, &d.body);
    out.extend_from_slice(b"\"attributes\":");
    json(out, &d.attributes);
    let _ = write!(
        out,
        ",\"receive_count\":{},\"max_receive_count\":{},\"enqueued_at\":",
        d.receive_count, d.max_receive_count
    );
    json(out, &rfc3339(d.enqueued_at));
    out.extend_from_slice(b",\"last_error\":");
    json(out, &d.last_error);
    out.extend_from_slice(b",\"lease_deadline\":");
    json(out, &rfc3339(d.lease_deadline));
    if let Some(g) = &d.group {
        out.extend_from_slice(b",\"group\":");
        json(out, g.as_str());
    }
    if let Some(k) = &d.key {
        out.extend_from_slice(b",\"key\":");
        json(out, k.as_str());
    }
    let _ = write!(out, ",\"priority\":{}", d.priority);
    if let Some(t) = &d.trace {
        out.extend_from_slice(b",\"trace\":");
        json(out, &crate::TraceView::from(t));
    }
    out.push(b'}');
}

/// The body's fields, each followed by a comma, in the form [`BodyForm`] decides (the rule
/// `DeliveryView` follows too).
fn body(out: &mut Vec<u8>, b: &Body) {
    match BodyForm::of(b) {
        BodyForm::Json(raw) => {
            out.extend_from_slice(b"\"body\":");
            out.extend_from_slice(raw.get().as_bytes());
            out.push(b',');
        }
        BodyForm::Text(text) => {
            out.extend_from_slice(b"\"body\":");
            json(out, text);
            out.extend_from_slice(b",\"body_encoding\":\"text\",");
        }
        BodyForm::Base64 => {
            out.extend_from_slice(b"\"body_base64\":");
            json(out, &STANDARD.encode(&b.bytes));
            out.push(b',');
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::{ErrorBody, ReceiveResponse};
    use sluice_core::message::{Attributes, BodyKind, MessageId};
    use sluice_core::receipt::Receipt;
    use sluice_core::time::Timestamp;

    fn body_strategy() -> impl Strategy<Value = Body> {
        prop_oneof![
            // JSON values, with and without padding around them.
            (any::<i64>(), "[a-z\"\\\\é\n ]{0,12}", any::<bool>()).prop_map(|(n, s, pad)| {
                let v = serde_json::json!({"n": n, "s": s, "list": [1, "two", null]});
                let text = if pad {
                    format!(" {v}\n")
                } else {
                    v.to_string()
                };
                Body::json(text)
            }),
            // Bytes stored as JSON that are not JSON.
            "[{}a-z\"]{0,8}".prop_map(Body::json),
            "[a-z\"\\\\é\n\u{1}]{0,16}".prop_map(Body::text),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Body::binary),
            // Text kind with bytes that are not UTF-8.
            Just(Body {
                kind: BodyKind::Text,
                bytes: Bytes::from_static(&[0xff, 0xfe]),
            }),
        ]
    }

    fn delivery_strategy() -> impl Strategy<Value = Delivery> {
        (
            any::<u64>(),
            any::<u64>(),
            body_strategy(),
            proptest::collection::btree_map("[a-z\"]{1,6}", "[a-z\\\\ ]{0,6}", 0..3),
            any::<u32>(),
            any::<u32>(),
            -1_000_000_000_000_i64..4_000_000_000_000,
            proptest::option::of("[a-z\"\n]{0,10}"),
            proptest::option::of("[a-z\"é\\ ]{1,10}"),
            (
                proptest::option::of("[a-z\"é\\ ]{1,10}"),
                0u8..10,
                proptest::option::of((
                    any::<u64>(),
                    proptest::option::of("[a-z]{1,4}=[a-z ]{0,3}[a-z]"),
                )),
            ),
        )
            .prop_map(
                |(
                    id,
                    token,
                    body,
                    attributes,
                    rc,
                    max,
                    at,
                    last_error,
                    group,
                    (key, priority, trace),
                )| {
                    let attributes: Attributes = attributes;
                    Delivery {
                        trace: trace.map(|(span, state)| {
                            sluice_core::TraceContext::new(
                                format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{:016x}-01", span | 1),
                                state,
                            )
                            .expect("valid trace context")
                        }),
                        id: MessageId(id),
                        receipt: Receipt {
                            id: MessageId(id),
                            token,
                        },
                        body,
                        attributes,
                        receive_count: rc,
                        max_receive_count: max,
                        enqueued_at: Timestamp(at),
                        last_error,
                        lease_deadline: Timestamp(at / 2),
                        group: group.map(|g| sluice_core::GroupName::new(g).expect("valid group")),
                        key: key.map(|k| sluice_core::MessageKey::new(k).expect("valid key")),
                        priority,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn writes_the_bytes_serde_writes(
            deliveries in proptest::collection::vec(delivery_strategy(), 0..5),
            acked in proptest::option::of(proptest::collection::vec(
                ("[a-zA-Z0-9_-]{1,8}", any::<bool>()), 0..3)),
        ) {
            let outcome = |(receipt, ok): (String, bool)| AckOutcome {
                receipt,
                ok,
                error: (!ok).then(|| ErrorBody {
                    code: "receipt_stale".to_owned(),
                    message: "gone".to_owned(),
                }),
            };
            let acked: Option<Vec<AckOutcome>> =
                acked.map(|v| v.into_iter().map(outcome).collect());
            let expected = serde_json::to_vec(&ReceiveResponse {
                messages: deliveries.iter().map(Into::into).collect(),
                acked: acked.clone(),
            }).unwrap();
            let written = to_json(&deliveries, acked.as_deref());
            prop_assert_eq!(String::from_utf8_lossy(&written), String::from_utf8_lossy(&expected));
        }
    }
}
