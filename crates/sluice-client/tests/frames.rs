//! The frame protocol against a real broker: the same messages, rules and errors as the HTTP
//! API, over one TCP connection.

mod common;

use std::time::Duration;

use sluice_client::frames::{Body, FrameClientError, FrameConnection, FrameMessage, FrameReceipt};
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{OutgoingMessage, ReceiveOptions};
use sluice_core::BodyKind;
use sluice_server::{ApiKeyConfig, KeyRing, Role, ServerOptions};
use sluice_testkit::InProcessBroker;
use sluice_wire::frame::{self, Op, Reply, Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn queue(srv: &common::TestServer, name: &str, config: QueueConfigRequest) {
    srv.client
        .put_queue(name, &config)
        .await
        .expect("put queue");
}

fn refused(e: FrameClientError) -> String {
    match e {
        FrameClientError::Refused(e) => e.code,
        other => panic!("expected a refusal, got {other}"),
    }
}

#[tokio::test]
async fn messages_sent_as_frames_are_received_acked_and_gone() {
    let srv = common::start().await;
    queue(&srv, "q", QueueConfigRequest::default()).await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();

    let mut with_attrs = FrameMessage::new(Body::binary(vec![0u8, 255, 7]));
    with_attrs.attributes.insert("tenant".into(), "acme".into());
    let sent = conn
        .send(
            "q",
            vec![
                with_attrs,
                FrameMessage::new(Body::json(r#"{"n":2}"#)),
                FrameMessage::new(Body::text("three")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|s| !s.duplicate));

    let got = conn.receive("q", 10, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 3);
    let ids: Vec<u64> = got.iter().map(|d| d.id).collect();
    assert_eq!(ids, sent.iter().map(|s| s.id).collect::<Vec<_>>());
    assert_eq!(got[0].body, Body::binary(vec![0u8, 255, 7]));
    assert_eq!(got[0].attributes["tenant"], "acme");
    assert_eq!(got[1].body, Body::json(r#"{"n":2}"#));
    assert_eq!(got[2].body, Body::text("three"));
    assert!(got.iter().all(|d| d.receive_count == 1));

    let outcomes = conn
        .ack("q", got.iter().map(|d| d.receipt).collect())
        .await
        .unwrap();
    assert_eq!(outcomes, vec![None, None, None]);
    // Acked twice: the second is stale, per receipt, and the connection goes on.
    let again = conn.ack("q", vec![got[0].receipt]).await.unwrap();
    assert_eq!(
        again[0].as_ref().map(|e| e.code.as_str()),
        Some("receipt_stale")
    );
    assert!(
        conn.receive("q", 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn http_and_frames_see_the_same_messages() {
    let srv = common::start().await;
    queue(&srv, "q", QueueConfigRequest::default()).await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();

    // Sent over frames as JSON, received over HTTP as that JSON.
    conn.send(
        "q",
        vec![FrameMessage::new(Body::json(r#"{"job":"resize"}"#))],
    )
    .await
    .unwrap();
    let over_http = srv
        .client
        .receive("q", &ReceiveOptions::new(1, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(over_http.len(), 1);
    assert_eq!(
        over_http[0].body.as_ref().map(|b| b.get()),
        Some(r#"{"job":"resize"}"#)
    );

    // Sent over HTTP, received over frames; the HTTP receipt's lease is not disturbed.
    srv.client
        .send(
            "q",
            OutgoingMessage::json(&serde_json::json!({"job": "crop"})).unwrap(),
        )
        .await
        .unwrap();
    let got = conn.receive("q", 1, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, Body::json(r#"{"job":"crop"}"#));
    srv.shutdown().await;
}

#[tokio::test]
async fn refusals_carry_the_http_error_codes_and_keep_the_connection() {
    let srv = common::start().await;
    queue(&srv, "q", QueueConfigRequest::default()).await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();

    let e = conn.receive("nope", 1, Duration::ZERO).await.unwrap_err();
    assert_eq!(refused(e), "queue_not_found");
    let e = conn.receive("q", 0, Duration::ZERO).await.unwrap_err();
    assert_eq!(refused(e), "invalid_argument");
    let e = conn
        .receive("bad name!", 1, Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(refused(e), "invalid_argument");
    let e = conn.send("q", vec![]).await.unwrap_err();
    assert_eq!(refused(e), "invalid_argument");
    let e = conn
        .send("q", vec![FrameMessage::new(Body::json("{not json"))])
        .await
        .unwrap_err();
    assert_eq!(refused(e), "invalid_argument");
    let e = conn
        .send(
            "q",
            vec![FrameMessage::new(Body {
                kind: BodyKind::Text,
                bytes: vec![0xffu8].into(),
            })],
        )
        .await
        .unwrap_err();
    assert_eq!(refused(e), "invalid_argument");
    let e = conn
        .nack("q", FrameReceipt { id: 1, token: 1 }, None, None)
        .await
        .unwrap_err();
    assert!(["receipt_stale", "message_not_found"].contains(&refused(e).as_str()));

    // Still usable after every refusal.
    conn.send("q", vec![FrameMessage::new(Body::binary(vec![1u8]))])
        .await
        .unwrap();
    assert_eq!(conn.receive("q", 1, Duration::ZERO).await.unwrap().len(), 1);
    srv.shutdown().await;
}

#[tokio::test]
async fn a_nack_retries_then_dead_letters() {
    let srv = common::start().await;
    queue(
        &srv,
        "q",
        QueueConfigRequest {
            max_receive_count: Some(2),
            ..QueueConfigRequest::default()
        },
    )
    .await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();
    conn.send("q", vec![FrameMessage::new(Body::text("flaky"))])
        .await
        .unwrap();

    let first = conn.receive("q", 1, Duration::ZERO).await.unwrap();
    let (queue_now, dead) = conn
        .nack(
            "q",
            first[0].receipt,
            Some(Duration::ZERO),
            Some("timeout".into()),
        )
        .await
        .unwrap();
    assert_eq!((queue_now.as_str(), dead), ("q", false));

    let second = conn.receive("q", 1, Duration::from_secs(2)).await.unwrap();
    assert_eq!(second[0].receive_count, 2);
    assert_eq!(second[0].last_error.as_deref(), Some("timeout"));
    let (queue_now, dead) = conn
        .nack("q", second[0].receipt, None, Some("timeout again".into()))
        .await
        .unwrap();
    assert_eq!((queue_now.as_str(), dead), ("q.dlq", true));
    let in_dlq = conn.receive("q.dlq", 1, Duration::ZERO).await.unwrap();
    assert_eq!(in_dlq[0].body, Body::text("flaky"));
    srv.shutdown().await;
}

#[tokio::test]
async fn a_nack_with_the_dependencys_retry_after_waits_that_long() {
    let srv = common::start().await;
    queue(&srv, "q", QueueConfigRequest::default()).await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();
    conn.send("q", vec![FrameMessage::new(Body::text("call"))])
        .await
        .unwrap();
    let got = conn.receive("q", 1, Duration::ZERO).await.unwrap();
    let (queue_now, dead) = conn
        .nack_retry_after(
            "q",
            got[0].receipt,
            Duration::from_millis(300),
            Some("HTTP 429".into()),
            None,
        )
        .await
        .unwrap();
    assert_eq!((queue_now.as_str(), dead), ("q", false));
    assert!(
        conn.receive("q", 1, Duration::ZERO)
            .await
            .unwrap()
            .is_empty(),
        "it waits the dependency's Retry-After"
    );
    let again = conn.receive("q", 1, Duration::from_secs(5)).await.unwrap();
    assert_eq!(again[0].last_error.as_deref(), Some("HTTP 429"));
    srv.shutdown().await;
}

/// Writes raw bytes as one frame and reads the broker's answer.
async fn raw_call(tcp: &mut tokio::net::TcpStream, payload: &[u8]) -> Response {
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(payload);
    tcp.write_all(&out).await.expect("write a frame");
    let len = tcp.read_u32_le().await.expect("an answer's length") as usize;
    let mut buf = vec![0; len];
    tcp.read_exact(&mut buf).await.expect("an answer");
    frame::decode_payload(&buf).expect("an answer that decodes")
}

#[tokio::test]
async fn garbage_is_refused_and_pipelined_requests_are_answered_in_order() {
    let srv = common::start().await;
    queue(&srv, "q", QueueConfigRequest::default()).await;
    let mut tcp = tokio::net::TcpStream::connect(srv.frames).await.unwrap();

    let answer = raw_call(&mut tcp, &[0xff, 0xff, 0xff, 0xff]).await;
    assert_eq!(answer.id, 0);
    assert_eq!(answer.result.unwrap_err().code, "invalid_argument");

    // Three requests in one write; three answers, in order.
    let mut out = Vec::new();
    for id in 10..13 {
        let op = Op::Send {
            queue: "q".into(),
            messages: vec![FrameMessage::new(Body::binary(vec![id as u8]))],
        };
        frame::encode_frame(&Request { id, op }, &mut out);
    }
    tcp.write_all(&out).await.unwrap();
    for id in 10..13 {
        let len = tcp.read_u32_le().await.unwrap() as usize;
        let mut buf = vec![0; len];
        tcp.read_exact(&mut buf).await.unwrap();
        let r: Response = frame::decode_payload(&buf).unwrap();
        assert_eq!(r.id, id);
        assert!(matches!(r.result, Ok(Reply::Sent(ref s)) if s.len() == 1));
    }

    // A frame larger than the broker reads is refused and the connection closed.
    tcp.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
    let len = tcp.read_u32_le().await.unwrap() as usize;
    let mut buf = vec![0; len];
    tcp.read_exact(&mut buf).await.unwrap();
    let r: Response = frame::decode_payload(&buf).unwrap();
    assert_eq!(r.result.unwrap_err().code, "payload_too_large");
    assert_eq!(tcp.read(&mut [0u8; 1]).await.unwrap(), 0, "closed after");
    srv.shutdown().await;
}

const WORKER: &str = "worker-secret-0123456789";
const SHOP: &str = "shop-secret-0123456789";
const ADMIN: &str = "admin-secret-0123456789";

fn key(name: &str, role: Role, queue: &str, secret: &str) -> ApiKeyConfig {
    ApiKeyConfig {
        name: name.to_owned(),
        role,
        queues: vec![queue.to_owned()],
        sha256: sluice_server::auth::hash_secret(secret),
    }
}

#[tokio::test]
async fn api_keys_apply_to_frame_connections() {
    let keys = KeyRing::new(vec![
        key("shop", Role::Producer, "orders", SHOP),
        key("worker", Role::Consumer, "orders", WORKER),
        key("admin", Role::Admin, "*", ADMIN),
    ])
    .unwrap();
    let broker = InProcessBroker::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    let admin = sluice_client::Client::builder(&broker.url)
        .token(ADMIN)
        .build()
        .unwrap();
    for q in ["orders", "billing"] {
        admin
            .put_queue(q, &QueueConfigRequest::default())
            .await
            .unwrap();
    }

    // No key, and a wrong key: refused.
    let e = FrameConnection::connect(broker.frames, None)
        .await
        .err()
        .unwrap();
    assert_eq!(refused(e), "unauthenticated");
    let e = FrameConnection::connect(broker.frames, Some("wrong"))
        .await
        .err()
        .unwrap();
    assert_eq!(refused(e), "unauthenticated");
    // A request before Hello on a raw connection: refused.
    let mut tcp = tokio::net::TcpStream::connect(broker.frames).await.unwrap();
    let mut out = Vec::new();
    let op = Op::Receive {
        queue: "orders".into(),
        max: 1,
        wait_ms: 0,
        visibility_ms: None,
        consumer: None,
    };
    frame::encode_frame(&Request { id: 5, op }, &mut out);
    let answer = raw_call(&mut tcp, &out[4..]).await;
    assert_eq!(answer.result.unwrap_err().code, "unauthenticated");

    // Roles and queue patterns, as over HTTP.
    let mut shop = FrameConnection::connect(broker.frames, Some(SHOP))
        .await
        .unwrap();
    shop.send("orders", vec![FrameMessage::new(Body::text("o-1"))])
        .await
        .unwrap();
    let e = shop.receive("orders", 1, Duration::ZERO).await.unwrap_err();
    assert_eq!(refused(e), "permission_denied");
    let e = shop
        .send("billing", vec![FrameMessage::new(Body::text("b-1"))])
        .await
        .unwrap_err();
    assert_eq!(refused(e), "permission_denied");
    let mut worker = FrameConnection::connect(broker.frames, Some(WORKER))
        .await
        .unwrap();
    let got = worker.receive("orders", 1, Duration::ZERO).await.unwrap();
    assert_eq!(got[0].body, Body::text("o-1"));
    // A move needs the consume right on both queues; a producer may not settle.
    let e = worker
        .move_message("orders", got[0].receipt, "billing", None)
        .await
        .unwrap_err();
    assert_eq!(refused(e), "permission_denied");
    let e = shop.release("orders", got[0].receipt).await.unwrap_err();
    assert_eq!(refused(e), "permission_denied");
    worker
        .ack_with_results(
            "orders",
            vec![sluice_client::frames::FrameAck {
                receipt: got[0].receipt,
                result: Some(Body::json("1")),
            }],
        )
        .await
        .unwrap();
    // Idempotency keys are each API key's own: the same key from another caller is another
    // send, not a replay of the first one's answer.
    let batch = || {
        vec![sluice_client::frames::GroupedFrameMessage {
            message: FrameMessage::new(Body::text("o-2")),
            group: None,
        }]
    };
    let first = shop.send_idempotent("k", "orders", batch()).await.unwrap();
    let mut admin_frames = FrameConnection::connect(broker.frames, Some(ADMIN))
        .await
        .unwrap();
    let other = admin_frames
        .send_idempotent("k", "orders", batch())
        .await
        .unwrap();
    assert_ne!(first[0].id, other[0].id);
    assert_eq!(
        shop.send_idempotent("k", "orders", batch()).await.unwrap(),
        first
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_long_poll_over_frames_ends_when_the_broker_stops() {
    let mut srv = common::RestartableServer::start().await;
    let client = sluice_client::Client::builder(&srv.base).build().unwrap();
    client
        .put_queue("q", &QueueConfigRequest::default())
        .await
        .unwrap();
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();
    let poll = tokio::spawn(async move {
        let r = conn.receive("q", 1, Duration::from_secs(20)).await;
        (r, conn)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    srv.stop().await;
    let (r, _) = poll.await.unwrap();
    assert!(
        r.unwrap().is_empty(),
        "the long poll answers empty at shutdown"
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    // After a restart, a new connection works and sees what was durable.
    srv.restart().await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();
    conn.send("q", vec![FrameMessage::new(Body::text("after"))])
        .await
        .unwrap();
    assert_eq!(conn.receive("q", 1, Duration::ZERO).await.unwrap().len(), 1);
}

#[tokio::test]
async fn answers_go_out_even_when_the_client_stops_mid_frame() {
    let srv = common::start().await;
    queue(&srv, "q", QueueConfigRequest::default()).await;
    let mut tcp = tokio::net::TcpStream::connect(srv.frames).await.unwrap();
    // Two whole requests, then the first bytes of a third, then the client stops writing.
    let mut out = Vec::new();
    for id in 1..3 {
        let op = Op::Send {
            queue: "q".into(),
            messages: vec![FrameMessage::new(Body::binary(vec![id as u8]))],
        };
        frame::encode_frame(&Request { id, op }, &mut out);
    }
    out.extend_from_slice(&[9, 0]);
    tcp.write_all(&out).await.unwrap();
    tcp.shutdown().await.unwrap();
    for id in 1..3 {
        let len = tcp.read_u32_le().await.unwrap() as usize;
        let mut buf = vec![0; len];
        tcp.read_exact(&mut buf).await.unwrap();
        let r: Response = frame::decode_payload(&buf).unwrap();
        assert_eq!(r.id, id);
        assert!(r.result.is_ok(), "{r:?}");
    }
    assert_eq!(tcp.read(&mut [0u8; 1]).await.unwrap(), 0, "then closed");
    srv.shutdown().await;
}

#[tokio::test]
async fn a_call_dropped_before_its_answer_leaves_the_connection_refusing_calls() {
    let srv = common::start().await;
    queue(&srv, "q", QueueConfigRequest::default()).await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();
    let poll = conn.receive("q", 1, Duration::from_secs(5));
    assert!(
        tokio::time::timeout(Duration::from_millis(100), poll)
            .await
            .is_err(),
        "the long poll was cut short by the timeout"
    );
    // The long poll's answer is still to come on this connection: no later call may take it.
    match conn.receive("q", 1, Duration::ZERO).await {
        Err(FrameClientError::Io(e)) => assert!(e.to_string().contains("open a new connection")),
        other => panic!("expected the connection to refuse, got {other:?}"),
    }
    // A new connection works.
    let mut fresh = FrameConnection::connect(srv.frames, None).await.unwrap();
    assert!(
        fresh
            .receive("q", 1, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn queue_limits_hold_over_frames() {
    use sluice_client::wire::RateLimitWire;

    let srv = common::start().await;
    queue(
        &srv,
        "small",
        QueueConfigRequest {
            max_message_bytes: Some(8),
            max_depth: Some(Some(1)),
            ..QueueConfigRequest::default()
        },
    )
    .await;
    queue(
        &srv,
        "slow",
        QueueConfigRequest {
            rate_limit: Some(Some(RateLimitWire {
                limit: 1,
                period_ms: 60_000,
                burst: None,
            })),
            ..QueueConfigRequest::default()
        },
    )
    .await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();

    // Over the queue's max_message_bytes: payload_too_large, nothing stored.
    let e = conn
        .send("small", vec![FrameMessage::new(Body::binary(vec![0u8; 9]))])
        .await
        .unwrap_err();
    assert_eq!(refused(e), "payload_too_large");
    // Over max_depth: queue_full, with when to retry.
    conn.send("small", vec![FrameMessage::new(Body::binary(vec![1u8]))])
        .await
        .unwrap();
    match conn
        .send("small", vec![FrameMessage::new(Body::binary(vec![2u8]))])
        .await
    {
        Err(FrameClientError::Refused(e)) => {
            assert_eq!(e.code, "queue_full");
            assert!(e.retry_after_ms.is_some_and(|ms| ms > 0), "{e:?}");
        }
        other => panic!("expected queue_full, got {other:?}"),
    }
    let e = conn
        .send("small", vec![FrameMessage::new(Body::binary(vec![3u8]))])
        .await
        .unwrap_err();
    assert!(e.is_transient(), "queue_full is worth retrying later");

    // rate_limit caps deliveries per window, whatever the receive asks for.
    let three = (0..3)
        .map(|i| FrameMessage::new(Body::binary(vec![i as u8])))
        .collect();
    conn.send("slow", three).await.unwrap();
    assert_eq!(
        conn.receive("slow", 10, Duration::ZERO)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        conn.receive("slow", 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    srv.shutdown().await;
}

/// Grouped sends over frames (`SendGrouped`) and over HTTP (`OutgoingMessage::group`) land in
/// the same FIFO group: one in flight at a time, in send order.
#[tokio::test]
async fn grouped_sends_over_frames_and_http_share_their_group() {
    let srv = common::start().await;
    queue(&srv, "fifo", QueueConfigRequest::default()).await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();
    let grouped = |text: &str, group: Option<&str>| frame::GroupedFrameMessage {
        message: FrameMessage::new(Body::text(text)),
        group: group.map(str::to_owned),
    };
    let sent = conn
        .send_grouped(
            "fifo",
            vec![
                grouped("a1", Some("a")),
                grouped("u", None),
                grouped("a2", Some("a")),
            ],
        )
        .await
        .unwrap();
    let a3 = srv
        .client
        .send("fifo", OutgoingMessage::text("a3").group("a"))
        .await
        .unwrap();
    let got = conn.receive("fifo", 10, Duration::ZERO).await.unwrap();
    let ids: Vec<u64> = got.iter().map(|d| d.id).collect();
    assert_eq!(
        ids,
        vec![sent[0].id, sent[1].id],
        "a1 and the ungrouped one"
    );
    conn.ack("fifo", vec![got[0].receipt]).await.unwrap();
    let got = srv
        .client
        .receive("fifo", &ReceiveOptions::new(10, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].group.as_deref(), Some("a"));
    srv.client.ack("fifo", &got[0].receipt).await.unwrap();
    let view = srv.client.get_message(&a3.id).await.unwrap();
    assert_eq!(view.group.as_deref(), Some("a"));
    let bad = conn
        .send_grouped("fifo", vec![grouped("x", Some(""))])
        .await
        .unwrap_err();
    assert_eq!(refused(bad), "invalid_argument");
}

#[tokio::test]
async fn before_hello_only_a_small_frame_is_read() {
    let keys = KeyRing::new(vec![key("shop", Role::Producer, "orders", SHOP)]).unwrap();
    let broker = InProcessBroker::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    // A frame of the stated size is read (and refused for want of Hello); the connection
    // goes on, and Hello with a key then opens it to frames of any size up to the limit.
    let mut tcp = tokio::net::TcpStream::connect(broker.frames).await.unwrap();
    let answer = raw_call(&mut tcp, &[0xff; frame::MAX_FRAME_BEFORE_HELLO]).await;
    assert_eq!(answer.result.unwrap_err().code, "invalid_argument");
    let mut hello = Vec::new();
    frame::encode_frame(
        &Request {
            id: 1,
            op: Op::Hello {
                key: Some(SHOP.into()),
            },
        },
        &mut hello,
    );
    let answer = raw_call(&mut tcp, &hello[4..]).await;
    assert!(matches!(answer.result, Ok(Reply::Hello { .. })));
    let big = Op::Send {
        queue: "orders".into(),
        messages: vec![FrameMessage::new(Body::binary(vec![7u8; 64 * 1024]))],
    };
    let mut out = Vec::new();
    frame::encode_frame(&Request { id: 2, op: big }, &mut out);
    let answer = raw_call(&mut tcp, &out[4..]).await;
    assert_eq!(answer.id, 2);
    assert_eq!(answer.result.unwrap_err().code, "queue_not_found");

    // A larger announcement before Hello: refused with a frame saying why, then closed,
    // without waiting for (or making room for) the bytes announced.
    for announced in [frame::MAX_FRAME_BEFORE_HELLO + 1, 24 << 20] {
        let mut tcp = tokio::net::TcpStream::connect(broker.frames).await.unwrap();
        tcp.write_all(&(announced as u32).to_le_bytes())
            .await
            .unwrap();
        tcp.write_all(&[0]).await.unwrap();
        let len = tcp.read_u32_le().await.unwrap() as usize;
        let mut buf = vec![0; len];
        tcp.read_exact(&mut buf).await.unwrap();
        let r: Response = frame::decode_payload(&buf).unwrap();
        let e = r.result.unwrap_err();
        assert_eq!(e.code, "unauthenticated");
        assert!(
            e.message.contains("Hello")
                && e.message
                    .contains(&frame::MAX_FRAME_BEFORE_HELLO.to_string()),
            "{}",
            e.message
        );
        assert_eq!(tcp.read(&mut [0u8; 1]).await.unwrap(), 0, "closed after");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn json_nested_past_the_limit_is_refused_as_a_body_or_a_result() {
    use sluice_core::config::limits::MAX_JSON_DEPTH;
    let nested = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    let srv = common::start().await;
    queue(&srv, "q", QueueConfigRequest::default()).await;
    let mut conn = FrameConnection::connect(srv.frames, None).await.unwrap();
    for levels in [MAX_JSON_DEPTH + 1, 100_000] {
        let e = conn
            .send("q", vec![FrameMessage::new(Body::json(nested(levels)))])
            .await
            .unwrap_err();
        match e {
            FrameClientError::Refused(e) => {
                assert_eq!(e.code, "invalid_argument");
                assert!(
                    e.message.contains(&MAX_JSON_DEPTH.to_string()),
                    "{}",
                    e.message
                );
            }
            other => panic!("expected a refusal, got {other}"),
        }
    }
    // At the limit: stored, and a result at the limit is kept; one past it is that ack's
    // own refusal, and the delivery stays leased.
    conn.send(
        "q",
        vec![
            FrameMessage::new(Body::json(nested(MAX_JSON_DEPTH))),
            FrameMessage::new(Body::text("two")),
        ],
    )
    .await
    .unwrap();
    let got = conn.receive("q", 2, Duration::ZERO).await.unwrap();
    assert_eq!(got[0].body, Body::json(nested(MAX_JSON_DEPTH)));
    let outcomes = conn
        .ack_with_results(
            "q",
            vec![
                sluice_client::frames::FrameAck {
                    receipt: got[0].receipt,
                    result: Some(Body::json(nested(MAX_JSON_DEPTH))),
                },
                sluice_client::frames::FrameAck {
                    receipt: got[1].receipt,
                    result: Some(Body::json(nested(MAX_JSON_DEPTH + 1))),
                },
            ],
        )
        .await
        .unwrap();
    assert_eq!(outcomes[0], None);
    assert_eq!(
        outcomes[1].as_ref().map(|e| e.code.as_str()),
        Some("invalid_argument")
    );
    conn.ack("q", vec![got[1].receipt]).await.unwrap();
    srv.shutdown().await;
}
