//! Fuzzing of the frame protocol's codec ([`sluice_wire::frame`]): a frame's payload comes
//! off the network from any client (requests) or any broker (responses), so decoding must
//! refuse every byte string it cannot read, without panicking and without allocating more
//! than the input could hold, and every valid frame must read back as it was written.
//!
//! Property tests stand in for a coverage-guided fuzzer (stable toolchain only). Each runs a
//! few hundred cases in the ordinary suite; `SLUICE_FUZZ_CASES=N` runs N instead:
//!
//! ```sh
//! SLUICE_FUZZ_CASES=1000000 cargo test --release -p sluice-wire --test fuzz_frame
//! ```

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use sluice_core::message::{Body, BodyKind};
use sluice_wire::frame::{
    self, FrameAck, FrameDelivery, FrameError, FrameMessage, FrameReceipt, FrameTrace,
    GroupedFrameMessage, LENGTH_BYTES, Op, Reply, Request, Response, SentMessage,
    TaggedFrameDelivery, TaggedFrameMessage, TracedFrameDelivery, TracedFrameMessage,
};

/// `cases` in the ordinary suite, or `SLUICE_FUZZ_CASES` for a long run.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        // Failing inputs become unit tests; no regression files in the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn text() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        "[a-z0-9._-]{0,12}",
        any::<String>().prop_map(|s| s.chars().take(24).collect()),
    ]
}

fn body() -> impl Strategy<Value = Body> {
    (
        prop_oneof![
            Just(BodyKind::Json),
            Just(BodyKind::Text),
            Just(BodyKind::Binary)
        ],
        vec(any::<u8>(), 0..64),
    )
        .prop_map(|(kind, bytes)| Body {
            kind,
            bytes: bytes.into(),
        })
}

fn receipt() -> impl Strategy<Value = FrameReceipt> {
    (any::<u64>(), any::<u64>()).prop_map(|(id, token)| FrameReceipt { id, token })
}

fn message() -> impl Strategy<Value = FrameMessage> {
    (
        body(),
        btree_map(text(), text(), 0..3),
        any::<Option<u64>>(),
        proptest::option::of(text()),
    )
        .prop_map(|(body, attributes, delay_ms, dedup_id)| FrameMessage {
            body,
            attributes,
            delay_ms,
            dedup_id,
        })
}

fn tagged() -> impl Strategy<Value = TaggedFrameMessage> {
    (
        message(),
        proptest::option::of(text()),
        proptest::option::of(text()),
        any::<Option<u8>>(),
    )
        .prop_map(|(message, group, key, priority)| TaggedFrameMessage {
            message,
            group,
            key,
            priority,
        })
}

fn grouped() -> impl Strategy<Value = GroupedFrameMessage> {
    (message(), proptest::option::of(text()))
        .prop_map(|(message, group)| GroupedFrameMessage { message, group })
}

fn op() -> impl Strategy<Value = Op> {
    let s = || proptest::option::of(text());
    prop_oneof![
        s().prop_map(|key| Op::Hello { key }),
        (text(), vec(message(), 0..4)).prop_map(|(queue, messages)| Op::Send { queue, messages }),
        (text(), vec(grouped(), 0..4))
            .prop_map(|(queue, messages)| Op::SendGrouped { queue, messages }),
        (text(), text(), vec(grouped(), 0..3)).prop_map(|(key, queue, messages)| {
            Op::SendIdempotent {
                key,
                queue,
                messages,
            }
        }),
        (
            text(),
            any::<u32>(),
            any::<u64>(),
            any::<Option<u64>>(),
            s()
        )
            .prop_map(
                |(queue, max, wait_ms, visibility_ms, consumer)| Op::Receive {
                    queue,
                    max,
                    wait_ms,
                    visibility_ms,
                    consumer,
                }
            ),
        (s(), text(), vec(tagged(), 0..3)).prop_map(|(idempotency_key, queue, messages)| {
            Op::SendTagged {
                idempotency_key,
                queue,
                messages,
            }
        }),
        (
            text(),
            any::<u32>(),
            any::<u64>(),
            any::<Option<u64>>(),
            s()
        )
            .prop_map(
                |(queue, max, wait_ms, visibility_ms, consumer)| Op::ReceiveTagged {
                    queue,
                    max,
                    wait_ms,
                    visibility_ms,
                    consumer,
                }
            ),
        (
            s(),
            text(),
            vec((tagged(), proptest::option::of((text(), s()))), 0..3)
        )
            .prop_map(|(idempotency_key, queue, messages)| Op::SendTraced {
                idempotency_key,
                queue,
                messages: messages
                    .into_iter()
                    .map(|(message, trace)| TracedFrameMessage {
                        message,
                        trace: trace.map(|(traceparent, tracestate)| FrameTrace {
                            traceparent,
                            tracestate
                        }),
                    })
                    .collect(),
            }),
        (
            text(),
            any::<u32>(),
            any::<u64>(),
            any::<Option<u64>>(),
            s()
        )
            .prop_map(
                |(queue, max, wait_ms, visibility_ms, consumer)| Op::ReceiveTraced {
                    queue,
                    max,
                    wait_ms,
                    visibility_ms,
                    consumer,
                }
            ),
        (text(), vec(receipt(), 0..5)).prop_map(|(queue, receipts)| Op::Ack { queue, receipts }),
        (text(), vec((receipt(), proptest::option::of(body())), 0..4)).prop_map(|(queue, acks)| {
            Op::AckWithResults {
                queue,
                acks: acks
                    .into_iter()
                    .map(|(receipt, result)| FrameAck { receipt, result })
                    .collect(),
            }
        }),
        (text(), receipt(), any::<Option<u64>>(), s(), s()).prop_map(
            |(queue, receipt, delay_ms, error, consumer)| Op::Nack {
                queue,
                receipt,
                delay_ms,
                error,
                consumer,
            }
        ),
        (text(), receipt(), text(), s(), s()).prop_map(|(queue, receipt, to, error, consumer)| {
            Op::Move {
                queue,
                receipt,
                to,
                error,
                consumer,
            }
        }),
        (text(), receipt(), any::<u64>()).prop_map(|(queue, receipt, visibility_ms)| {
            Op::Extend {
                queue,
                receipt,
                visibility_ms,
            }
        }),
        // Finite percentages only: NaN is not equal to itself, which the round trip checks.
        (text(), receipt(), -1e9f64..1e9, s()).prop_map(|(queue, receipt, pct, detail)| {
            Op::Progress {
                queue,
                receipt,
                pct,
                detail,
            }
        }),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    (any::<u64>(), op()).prop_map(|(id, op)| Request { id, op })
}

fn frame_error() -> impl Strategy<Value = FrameError> {
    (text(), text(), any::<Option<u64>>()).prop_map(|(code, message, retry_after_ms)| FrameError {
        code,
        message,
        retry_after_ms,
    })
}

fn delivery() -> impl Strategy<Value = FrameDelivery> {
    (
        (
            any::<u64>(),
            receipt(),
            body(),
            btree_map(text(), text(), 0..3),
        ),
        (
            any::<u32>(),
            any::<u32>(),
            any::<i64>(),
            any::<i64>(),
            proptest::option::of(text()),
        ),
    )
        .prop_map(
            |(
                (id, receipt, body, attributes),
                (receive_count, max_receive_count, enqueued_at_ms, lease_deadline_ms, last_error),
            )| FrameDelivery {
                id,
                receipt,
                body,
                attributes,
                receive_count,
                max_receive_count,
                enqueued_at_ms,
                lease_deadline_ms,
                last_error,
            },
        )
}

fn response() -> impl Strategy<Value = Response> {
    let reply = prop_oneof![
        any::<u32>().prop_map(|version| Reply::Hello { version }),
        vec((any::<u64>(), any::<bool>()), 0..5).prop_map(|v| Reply::Sent(
            v.into_iter()
                .map(|(id, duplicate)| SentMessage { id, duplicate })
                .collect()
        )),
        vec(delivery(), 0..3).prop_map(Reply::Messages),
        vec(
            (
                delivery(),
                proptest::option::of(text()),
                proptest::option::of(text()),
                any::<u8>()
            ),
            0..3
        )
        .prop_map(|v| Reply::TaggedMessages(
            v.into_iter()
                .map(|(delivery, group, key, priority)| TaggedFrameDelivery {
                    delivery,
                    group,
                    key,
                    priority,
                })
                .collect()
        )),
        vec(
            (
                delivery(),
                any::<u8>(),
                proptest::option::of((text(), proptest::option::of(text())))
            ),
            0..3
        )
        .prop_map(|v| Reply::TracedMessages(
            v.into_iter()
                .map(|(delivery, priority, trace)| TracedFrameDelivery {
                    delivery: TaggedFrameDelivery {
                        delivery,
                        group: None,
                        key: None,
                        priority,
                    },
                    trace: trace.map(|(traceparent, tracestate)| FrameTrace {
                        traceparent,
                        tracestate
                    }),
                })
                .collect()
        )),
        vec(proptest::option::of(frame_error()), 0..4).prop_map(Reply::Acked),
        (text(), any::<bool>()).prop_map(|(queue, dead_lettered)| Reply::Nacked {
            queue,
            dead_lettered
        }),
        (any::<i64>(), any::<bool>()).prop_map(|(deadline_ms, cancel_requested)| Reply::Lease {
            deadline_ms,
            cancel_requested
        }),
    ];
    (
        any::<u64>(),
        prop_oneof![reply.prop_map(Ok), frame_error().prop_map(Err)],
    )
        .prop_map(|(id, result)| Response { id, result })
}

/// A change to a valid encoding: flip bits of one byte, cut it short, add bytes to its end,
/// or overwrite a run of it.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, mask: u8 },
    Truncate { to: usize },
    Extend { with: Vec<u8> },
    Overwrite { at: usize, with: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        any::<usize>().prop_map(|to| Mutation::Truncate { to }),
        vec(any::<u8>(), 1..16).prop_map(|with| Mutation::Extend { with }),
        (any::<usize>(), vec(any::<u8>(), 1..8))
            .prop_map(|(at, with)| Mutation::Overwrite { at, with }),
    ]
}

fn mutate(mut bytes: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let n = bytes.len().max(1);
    match m {
        Mutation::Flip { at, mask } => {
            if let Some(b) = bytes.get_mut(at % n) {
                *b ^= mask;
            }
        }
        Mutation::Truncate { to } => bytes.truncate(to % n),
        Mutation::Extend { with } => bytes.extend_from_slice(with),
        Mutation::Overwrite { at, with } => {
            for (i, w) in with.iter().enumerate() {
                if let Some(b) = bytes.get_mut((at + i) % n) {
                    *b = *w;
                }
            }
        }
    }
    bytes
}

/// The payload of one encoded frame, checking its length prefix.
fn payload_of(frame: &[u8]) -> &[u8] {
    let (prefix, payload) = frame.split_at(LENGTH_BYTES);
    let len = u32::from_le_bytes(prefix.try_into().expect("4 bytes"));
    assert_eq!(
        len as usize,
        payload.len(),
        "the prefix is the payload's length"
    );
    payload
}

/// Decodes `payload` as a request and a response; anything decoded must encode and decode
/// to itself again (the decoder reads only what the encoder writes).
fn decode_any(payload: &[u8]) {
    if let Ok(req) = frame::decode_payload::<Request>(payload) {
        let mut again = Vec::new();
        frame::encode_frame(&req, &mut again);
        let back: Request = frame::decode_payload(payload_of(&again)).expect("re-decodes");
        // NaN percentages are not equal to themselves; compare their encodings instead.
        let mut twice = Vec::new();
        frame::encode_frame(&back, &mut twice);
        assert_eq!(again, twice);
    }
    if let Ok(resp) = frame::decode_payload::<Response>(payload) {
        let mut again = Vec::new();
        frame::encode_frame(&resp, &mut again);
        let back: Response = frame::decode_payload(payload_of(&again)).expect("re-decodes");
        assert_eq!(back, resp);
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn arbitrary_payloads_are_refused_or_read(bytes in vec(any::<u8>(), 0..512)) {
        decode_any(&bytes);
    }

    #[test]
    fn valid_requests_round_trip(req in request()) {
        let mut out = vec![0xee];
        frame::encode_frame(&req, &mut out);
        // Appended after what the buffer held.
        prop_assert_eq!(out[0], 0xee);
        let back: Request = frame::decode_payload(payload_of(&out[1..])).expect("decodes");
        prop_assert_eq!(back, req);
    }

    #[test]
    fn valid_responses_round_trip(resp in response()) {
        let mut out = Vec::new();
        frame::encode_frame(&resp, &mut out);
        let back: Response = frame::decode_payload(payload_of(&out)).expect("decodes");
        prop_assert_eq!(back, resp);
    }

    #[test]
    fn mutated_requests_are_refused_or_read(req in request(), m in vec(mutation(), 1..4)) {
        let mut out = Vec::new();
        frame::encode_frame(&req, &mut out);
        let mut payload = out[LENGTH_BYTES..].to_vec();
        for m in &m {
            payload = mutate(payload, m);
        }
        decode_any(&payload);
    }

    #[test]
    fn mutated_responses_are_refused_or_read(resp in response(), m in vec(mutation(), 1..4)) {
        let mut out = Vec::new();
        frame::encode_frame(&resp, &mut out);
        let mut payload = out[LENGTH_BYTES..].to_vec();
        for m in &m {
            payload = mutate(payload, m);
        }
        decode_any(&payload);
    }
}

/// The process's peak virtual memory in KiB (Linux), which a large allocation raises at once
/// even if none of it is touched.
fn vm_peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmPeak:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A postcard varint of `v`.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// Payloads whose length fields claim up to 2^64 elements or bytes, in every place a length
/// drives an allocation (a list of messages, receipts or acks, a string, a body, an attribute
/// map), with only a few bytes after them. Decoding must fail on the missing bytes, not
/// reserve room for what the length claims: the process's peak virtual memory must not grow
/// by anything like it.
#[test]
fn huge_length_fields_allocate_nothing_like_what_they_claim() {
    let before = vm_peak_kib();
    let huge = [u64::from(u32::MAX), u64::MAX >> 1, u64::MAX, 1 << 40];
    // Request id 7, then each operation's variant index and a queue name "q" where it has one.
    let ops: [(u8, bool); 8] = [
        (0, false), // Hello: Option<String> tag, then the string length.
        (1, true),  // Send: messages.
        (3, true),  // Ack: receipts.
        (5, true),  // SendGrouped: messages.
        (6, true),  // AckWithResults: acks.
        (12, true), // SendIdempotent: its key is the first field.
        (14, true), // SendTagged: messages, after no idempotency key.
        (16, true), // SendTraced: messages, after no idempotency key.
    ];
    let mut cases = Vec::new();
    let mut responses = Vec::new();
    for &n in &huge {
        for &(variant, queue) in &ops {
            let mut p = vec![7u8, variant];
            if variant == 0 {
                p.push(1); // Some(key)
            } else if variant == 12 {
                // The key's length is the huge one.
            } else if variant == 14 || variant == 16 {
                p.extend_from_slice(&[0, 1, b'q']);
            } else if queue {
                p.extend_from_slice(&[1, b'q']);
            }
            p.extend(varint(n));
            p.extend_from_slice(&[0u8; 8]);
            cases.push(p);
        }
        // Send of one message whose body claims `n` bytes, and one whose attributes claim
        // `n` entries.
        let mut body = vec![7u8, 1, 1, b'q', 1, 2];
        body.extend(varint(n));
        body.extend_from_slice(b"abc");
        cases.push(body);
        let mut attrs = vec![7u8, 1, 1, b'q', 1, 2, 0];
        attrs.extend(varint(n));
        attrs.extend_from_slice(&[1, b'k', 1, b'v']);
        cases.push(attrs);
        // A response listing `n` deliveries (`Ok`, `Reply::Messages`), and one refusing with
        // an error code of `n` bytes.
        let mut resp = vec![7u8, 0, 2];
        resp.extend(varint(n));
        resp.extend_from_slice(&[0u8; 16]);
        responses.push(resp);
        let mut tagged = vec![7u8, 0, 6];
        tagged.extend(varint(n));
        tagged.extend_from_slice(&[0u8; 16]);
        responses.push(tagged);
        let mut refusal = vec![7u8, 1];
        refusal.extend(varint(n));
        refusal.extend_from_slice(b"invalid_argument");
        responses.push(refusal);
    }
    for p in &cases {
        assert!(
            frame::decode_payload::<Request>(p).is_err(),
            "decoded a request claiming more than it holds: {p:?}"
        );
        let _ = frame::decode_payload::<Response>(p);
    }
    for p in &responses {
        assert!(
            frame::decode_payload::<Response>(p).is_err(),
            "decoded a response claiming more than it holds: {p:?}"
        );
    }
    if let (Some(before), Some(after)) = (before, vm_peak_kib()) {
        assert!(
            after.saturating_sub(before) < 1024 * 1024,
            "peak virtual memory grew from {before} KiB to {after} KiB"
        );
    }
}
