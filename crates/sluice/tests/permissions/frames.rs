//! The frame protocol's operations: the table, and the test that tries each with every key.

use std::collections::BTreeSet;

use serde::Deserialize;
use sluice_core::message::Body;
use sluice_server::auth::Action::{self, *};
use sluice_wire::frame::{
    self, FrameAck, FrameError, FrameMessage, FrameReceipt, FrameTrace, GroupedFrameMessage, Op,
    Reply, Request, Response, TaggedFrameMessage, TracedFrameMessage,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Reach::{self, *};
use crate::{Broker, Expect, Fixture, cases};

/// What an op needs and reaches, by its name. A `match` without a wildcard, so that a new
/// variant of `Op` does not build until the table says who may use it.
pub fn rule(op: &Op) -> (&'static str, &'static [Action], Reach<()>) {
    match op {
        // Authenticates the connection: any key.
        Op::Hello { .. } => ("Hello", &[], Global),
        Op::Send { .. } => ("Send", &[Send], Queue),
        Op::SendGrouped { .. } => ("SendGrouped", &[Send], Queue),
        Op::SendIdempotent { .. } => ("SendIdempotent", &[Send], Queue),
        Op::SendTagged { .. } => ("SendTagged", &[Send], Queue),
        Op::SendTraced { .. } => ("SendTraced", &[Send], Queue),
        Op::Receive { .. } => ("Receive", &[Consume], Queue),
        Op::ReceiveTagged { .. } => ("ReceiveTagged", &[Consume], Queue),
        Op::ReceiveTraced { .. } => ("ReceiveTraced", &[Consume], Queue),
        Op::Ack { .. } => ("Ack", &[Consume], Queue),
        Op::AckWithResults { .. } => ("AckWithResults", &[Consume], Queue),
        Op::Nack { .. } => ("Nack", &[Consume], Queue),
        Op::NackRetryAfter { .. } => ("NackRetryAfter", &[Consume], Queue),
        Op::Reject { .. } => ("Reject", &[Consume], Queue),
        Op::Release { .. } => ("Release", &[Consume], Queue),
        // Both queues: the one it leaves and `to`.
        Op::Move { .. } => ("Move", &[Consume], Queue),
        Op::Extend { .. } => ("Extend", &[Consume], Queue),
        Op::Progress { .. } => ("Progress", &[Consume], Queue),
    }
}

fn receipt(f: &Fixture) -> FrameReceipt {
    sluice_wire::parse_receipt(&f.receipt)
        .expect("a receipt")
        .into()
}

fn message() -> FrameMessage {
    FrameMessage::new(Body::json("1"))
}

/// One request of every op on the case's fixture `f` (`home` is inside the patterns), with
/// where it names the queue in question when an op is listed in more than one form.
pub fn requests(f: &Fixture, home: &Fixture) -> Vec<(Op, &'static str)> {
    let queue = f.queue.clone();
    let grouped = || {
        vec![GroupedFrameMessage {
            message: message(),
            group: Some("g".to_owned()),
        }]
    };
    vec![
        // The runner puts the case's key in.
        (Op::Hello { key: None }, ""),
        (
            Op::Send {
                queue: queue.clone(),
                messages: vec![message()],
            },
            "",
        ),
        (
            Op::SendGrouped {
                queue: queue.clone(),
                messages: grouped(),
            },
            "",
        ),
        (
            Op::SendIdempotent {
                key: "matrix".to_owned(),
                queue: queue.clone(),
                messages: grouped(),
            },
            "",
        ),
        (
            Op::SendTagged {
                idempotency_key: Some("matrix-tagged".to_owned()),
                queue: queue.clone(),
                messages: vec![TaggedFrameMessage {
                    key: Some("tenant".to_owned()),
                    priority: Some(7),
                    ..message().into()
                }],
            },
            "",
        ),
        (
            Op::SendTraced {
                idempotency_key: Some("matrix-traced".to_owned()),
                queue: queue.clone(),
                messages: vec![TracedFrameMessage {
                    message: message().into(),
                    trace: Some(FrameTrace {
                        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                            .to_owned(),
                        tracestate: None,
                    }),
                }],
            },
            "",
        ),
        (
            Op::Receive {
                queue: queue.clone(),
                max: 1,
                wait_ms: 0,
                visibility_ms: None,
                consumer: None,
            },
            "",
        ),
        (
            Op::ReceiveTraced {
                queue: queue.clone(),
                max: 1,
                wait_ms: 0,
                visibility_ms: None,
                consumer: None,
            },
            "",
        ),
        (
            Op::ReceiveTagged {
                queue: queue.clone(),
                max: 1,
                wait_ms: 0,
                visibility_ms: None,
                consumer: None,
            },
            "",
        ),
        (
            Op::Ack {
                queue: queue.clone(),
                receipts: vec![receipt(f)],
            },
            "",
        ),
        (
            Op::AckWithResults {
                queue: queue.clone(),
                acks: vec![FrameAck {
                    receipt: receipt(f),
                    result: None,
                }],
            },
            "",
        ),
        (
            Op::Nack {
                queue: queue.clone(),
                receipt: receipt(f),
                delay_ms: None,
                error: None,
                consumer: None,
            },
            "",
        ),
        (
            Op::NackRetryAfter {
                queue: queue.clone(),
                receipt: receipt(f),
                retry_after_ms: 1000,
                error: None,
                consumer: None,
            },
            "",
        ),
        (
            Op::Reject {
                queue: queue.clone(),
                receipt: receipt(f),
                error: None,
                consumer: None,
            },
            "",
        ),
        (
            Op::Release {
                queue: queue.clone(),
                receipt: receipt(f),
            },
            "",
        ),
        (
            Op::Move {
                queue: queue.clone(),
                receipt: receipt(f),
                to: f.dlq.clone(),
                error: None,
                consumer: None,
            },
            "",
        ),
        (
            Op::Move {
                queue: home.queue.clone(),
                receipt: receipt(home),
                to: queue.clone(),
                error: None,
                consumer: None,
            },
            "naming it as `to`",
        ),
        (
            Op::Extend {
                queue: queue.clone(),
                receipt: receipt(f),
                visibility_ms: 30_000,
            },
            "",
        ),
        (
            Op::Progress {
                queue,
                receipt: receipt(f),
                pct: 50.0,
                detail: None,
            },
            "",
        ),
    ]
}

/// The names of `Op`'s variants, as its `Deserialize` derive lists them: a deserializer that
/// only notes the variants it is asked for.
pub fn variant_names() -> &'static [&'static str] {
    #[derive(Debug)]
    struct Noted;
    impl std::fmt::Display for Noted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("noted")
        }
    }
    impl std::error::Error for Noted {}
    impl serde::de::Error for Noted {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Noted
        }
    }
    struct Variants(Option<&'static [&'static str]>);
    impl<'de> serde::Deserializer<'de> for &mut Variants {
        type Error = Noted;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Noted> {
            Err(Noted)
        }
        fn deserialize_enum<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Noted> {
            self.0 = Some(variants);
            Err(Noted)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map struct
            identifier ignored_any
        }
    }
    let mut v = Variants(None);
    let _ = Op::deserialize(&mut v);
    v.0.expect("Op deserializes as an enum")
}

/// A fixture of nothing, for listing the ops.
pub fn blank() -> Fixture {
    Fixture {
        queue: "q".into(),
        dlq: "q.dlq".into(),
        receipt: sluice_core::Receipt {
            id: sluice_core::MessageId(1),
            token: 1,
        }
        .to_string(),
        message: String::new(),
        job: String::new(),
        schedule: String::new(),
    }
}

/// One frame connection.
struct Conn {
    tcp: tokio::net::TcpStream,
    next: u64,
}

impl Conn {
    async fn open(b: &Broker) -> Conn {
        Conn {
            tcp: tokio::net::TcpStream::connect(b.frames)
                .await
                .expect("connect"),
            next: 0,
        }
    }

    async fn call(&mut self, op: Op) -> Result<Reply, FrameError> {
        self.next += 1;
        let mut out = Vec::new();
        frame::encode_frame(&Request { id: self.next, op }, &mut out);
        self.tcp.write_all(&out).await.expect("write a frame");
        let mut len = [0; frame::LENGTH_BYTES];
        self.tcp.read_exact(&mut len).await.expect("an answer");
        let mut payload = vec![0; u32::from_le_bytes(len) as usize];
        self.tcp.read_exact(&mut payload).await.expect("an answer");
        let r: Response = frame::decode_payload(&payload).expect("an answer that decodes");
        assert_eq!(r.id, self.next, "answers come in order");
        r.result
    }
}

fn code(r: &Result<Reply, FrameError>) -> Option<&str> {
    r.as_ref().err().map(|e| e.code.as_str())
}

/// Every frame op × every key × a queue inside and outside its patterns, and on a connection
/// without a key or with a wrong one.
pub async fn run(b: &Broker) {
    let empty = blank();
    let listed: BTreeSet<&str> = requests(&empty, &empty)
        .iter()
        .map(|(op, _)| rule(op).0)
        .collect();
    let variants: BTreeSet<&str> = variant_names().iter().copied().collect();
    assert_eq!(
        listed, variants,
        "every variant of Op needs a request in requests() of tests/permissions/frames.rs"
    );

    let keys = crate::keys();
    let mut conns = Vec::new();
    for key in &keys {
        let mut c = Conn::open(b).await;
        let hello = c
            .call(Op::Hello {
                key: Some(key.secret()),
            })
            .await;
        assert!(hello.is_ok(), "Hello as {}: {hello:?}", key.name());
        conns.push(c);
    }
    let mut anonymous = Conn::open(b).await;
    let mut impostor = Conn::open(b).await;
    let hello = impostor
        .call(Op::Hello {
            key: Some("not a key".into()),
        })
        .await;
    assert_eq!(code(&hello), Some("unauthenticated"), "{hello:?}");

    let count = requests(&empty, &empty).len();
    for i in 0..count {
        let fx = b.fixtures().await;
        let sample = |f: &Fixture| requests(f, &fx.inside).swap_remove(i);
        let (op, form) = sample(&fx.inside);
        let (name, needs, reach) = rule(&op);
        let what = if form.is_empty() {
            name.to_owned()
        } else {
            format!("{name} ({form})")
        };
        for conn in [&mut anonymous, &mut impostor] {
            let got = conn.call(op.clone()).await;
            assert_eq!(
                code(&got),
                Some("unauthenticated"),
                "{what} without a key: {got:?}"
            );
        }
        for (key, side, expect) in cases(needs, reach) {
            let (mut op, _) = sample(fx.on(side));
            if let Op::Hello { key: k } = &mut op {
                *k = Some(key.secret());
            }
            let at = keys
                .iter()
                .position(|k| k.name() == key.name())
                .expect("a key of the matrix");
            let got = conns[at].call(op).await;
            let case = format!("{what} as {} on {side:?}", key.name());
            match expect {
                Expect::Refused => assert_eq!(
                    code(&got),
                    Some("permission_denied"),
                    "{case} must be refused: {got:?}"
                ),
                Expect::Allowed => assert!(
                    !matches!(code(&got), Some("permission_denied" | "unauthenticated")),
                    "{case} must be allowed: {got:?}"
                ),
                Expect::Unknown(()) => unreachable!("frames name no ids"),
            }
            // No answer to a scoped key names a queue outside its patterns (`billing-*`).
            if key.scoped && expect == Expect::Allowed {
                let text = format!("{got:?}");
                assert!(!text.contains("billing"), "{case}: {text}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_frame_op_by_every_role_inside_and_outside_its_patterns() {
    let b = Broker::start().await;
    run(&b).await;
    b.stop().await;
}
