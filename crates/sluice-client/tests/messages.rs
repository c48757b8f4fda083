//! Sending, receiving, settling and inspecting through the client against a real broker.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_client::wire::{BrowseQuery, BrowseStateWire, FailureState, QueueConfigRequest};
use sluice_client::{
    BodyExt, DecodedBody, Error, ErrorCode, NackOptions, OutgoingMessage, ReceiveOptions,
    ResultExt, SendOptions,
};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Job {
    name: String,
    weight: f64,
}

async fn queue(c: &sluice_client::Client, name: &str) {
    c.put_queue(name, &QueueConfigRequest::default())
        .await
        .expect("put queue");
}

fn one() -> ReceiveOptions {
    ReceiveOptions::new(1, Duration::ZERO)
}

#[tokio::test]
async fn bodies_round_trip_in_their_form() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    let job = Job {
        name: "resize".into(),
        weight: 1.5,
    };
    let a = c.send_json("q", &job).await.unwrap();
    let b = c
        .send("q", OutgoingMessage::text("plain words"))
        .await
        .unwrap();
    let bin = vec![0u8, 159, 146, 150, 255, 10];
    let d = c.send_raw("q", bin.clone()).await.unwrap();
    let e = c
        .send(
            "q",
            OutgoingMessage::json_text(r#"{"b": 1,  "a": [1.50]}"#)
                .unwrap()
                .attribute("tenant", "acme"),
        )
        .await
        .unwrap();
    assert!(!a.duplicate);

    let got = c
        .receive("q", &ReceiveOptions::new(10, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(got.len(), 4);
    let by_id: BTreeMap<_, _> = got.iter().map(|d| (d.id.clone(), d)).collect();
    assert_eq!(by_id[&a.id].body_json::<Job>().unwrap(), job);
    assert_eq!(
        by_id[&b.id].decoded_body().unwrap(),
        DecodedBody::Text("plain words".into())
    );
    assert_eq!(
        by_id[&d.id].decoded_body().unwrap(),
        DecodedBody::Bytes(bin)
    );
    assert_eq!(
        by_id[&e.id].decoded_body().unwrap(),
        DecodedBody::Json(r#"{"b": 1,  "a": [1.50]}"#.into()),
        "JSON text is kept exactly"
    );
    assert_eq!(by_id[&e.id].attributes["tenant"], "acme");
    srv.shutdown().await;
}

#[tokio::test]
async fn batch_send_dedup_and_options() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    let batch = vec![
        OutgoingMessage::json(&1).unwrap().dedup_id("one"),
        OutgoingMessage::text("two").attribute("k", "v"),
        OutgoingMessage::bytes(vec![1u8, 2, 3]),
        OutgoingMessage::json(&4)
            .unwrap()
            .delay(Duration::from_secs(60)),
    ];
    let out = c.send_batch("q", batch).await.unwrap();
    assert_eq!(out.ids.len(), 4);
    assert_eq!(out.duplicates, vec![false; 4]);
    let dup = c
        .send_with(
            "q",
            OutgoingMessage::json(&1).unwrap().dedup_id("one"),
            &SendOptions::idempotent(),
        )
        .await
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.id, out.ids[0]);
    let stats = c.stats("q").await.unwrap();
    assert_eq!((stats.visible, stats.delayed), (3, 1));
    assert!(matches!(
        c.send_batch("q", Vec::new()).await,
        Err(Error::InvalidInput(_))
    ));
    srv.shutdown().await;
}

#[tokio::test]
async fn values_json_cannot_hold_fail_before_reaching_the_broker() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    let nan = Job {
        name: "x".into(),
        weight: f64::NAN,
    };
    let err = c.send_json("q", &nan).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument));
    let msg = err.to_string();
    assert!(msg.contains(".weight") && msg.contains("finite"), "{msg}");

    let mut keyed = BTreeMap::new();
    keyed.insert(vec![1, 2], "value");
    let err = c.send_json("q", &keyed).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert!(err.to_string().contains("String keys"), "{err}");

    let err = OutgoingMessage::json_text("{not json").unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)));

    // Nothing reached the broker.
    assert_eq!(c.stats("q").await.unwrap().totals.sent, 0);
    srv.shutdown().await;
}

#[tokio::test]
async fn ack_single_and_batch_with_per_receipt_outcomes() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    for i in 0..3 {
        c.send_json("q", &i).await.unwrap();
    }
    let got = c
        .receive("q", &ReceiveOptions::new(3, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(got.len(), 3);
    let acked = c
        .ack_with_result("q", &got[0].receipt, &serde_json::json!({"ok": true}))
        .await
        .unwrap();
    assert_eq!(acked.id, got[0].id);

    // The same receipt again is stale: the broker's code comes through.
    let err = c.ack("q", &got[0].receipt).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::ReceiptStale), "{err}");
    assert_eq!(err.status(), Some(409));

    let batch = c
        .ack_batch("q", &[&got[1].receipt, &got[0].receipt, &got[2].receipt])
        .await
        .unwrap();
    assert_eq!(batch.acked, 2);
    assert!(batch.results[0].ok && !batch.results[1].ok && batch.results[2].ok);
    assert_eq!(
        batch.results[1].error.as_ref().map(|e| e.code.as_str()),
        Some("receipt_stale")
    );

    // The completed record keeps the result.
    let m = c.get_message(&got[0].id).await.unwrap();
    assert_eq!(
        m.decoded_result().unwrap(),
        Some(DecodedBody::Json(r#"{"ok":true}"#.into()))
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn ack_and_receive_settles_one_batch_and_takes_the_next() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    for i in 0..4 {
        c.send_json("q", &i).await.unwrap();
    }
    let two = ReceiveOptions::new(2, Duration::ZERO);
    let first = c.receive("q", &two).await.unwrap();
    let receipts: Vec<String> = first.iter().map(|d| d.receipt.clone()).collect();
    let (acked, next) = c.ack_and_receive("q", &receipts, &two).await.unwrap();
    assert_eq!(acked.len(), 2);
    assert!(acked.iter().all(|o| o.ok), "{acked:?}");
    assert_eq!(next.len(), 2);
    assert!(next.iter().all(|d| first.iter().all(|f| f.id != d.id)));

    // A stale receipt is an outcome, not an error; no receipts is a plain receive.
    let (acked, none) = c.ack_and_receive("q", &receipts, &two).await.unwrap();
    assert_eq!(
        acked[0].error.as_ref().map(|e| e.code.as_str()),
        Some("receipt_stale")
    );
    assert!(none.is_empty());
    let (acked, _) = c.ack_and_receive("q", &[], &two).await.unwrap();
    assert!(acked.is_empty());
    let stats = c.stats("q").await.unwrap();
    assert_eq!(stats.totals.acked, 2);
    assert_eq!(stats.in_flight, 2);
    srv.shutdown().await;
}

#[tokio::test]
async fn nack_reject_move_extend() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    queue(c, "other").await;
    let id = c.send_json("q", &"work").await.unwrap().id;

    let d = c.receive("q", &one()).await.unwrap().remove(0);
    let ext = c
        .extend("q", &d.receipt, Duration::from_secs(120))
        .await
        .unwrap();
    assert!(!ext.lease_deadline.is_empty());
    let n = c
        .nack(
            "q",
            &d.receipt,
            &NackOptions {
                delay: Some(Duration::ZERO),
                error: Some("flaky upstream".into()),
                ..NackOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(n.state, FailureState::Visible);
    let err = c
        .nack("q", &d.receipt, &NackOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::ReceiptStale));

    let d = c.receive("q", &one()).await.unwrap().remove(0);
    assert_eq!(d.receive_count, 2);
    assert_eq!(d.last_error.as_deref(), Some("flaky upstream"));
    let moved = c
        .move_message("q", &d.receipt, "other", Some("wrong queue"))
        .await
        .unwrap();
    assert_eq!(moved.queue, "other");

    let d = c.receive("other", &one()).await.unwrap().remove(0);
    assert_eq!(d.id, id);
    let r = c.reject("other", &d.receipt, Some("poison")).await.unwrap();
    assert_eq!(r.state, FailureState::DeadLettered);
    assert_eq!(r.queue, "other.dlq");

    let m = c.get_message(&id).await.unwrap();
    assert_eq!(m.queue, "other.dlq");
    assert_eq!(m.last_error.as_deref(), Some("poison"));
    srv.shutdown().await;
}

#[tokio::test]
async fn long_poll_receive_waits_for_a_send() {
    let srv = common::start().await;
    let c = srv.client.clone();
    queue(&c, "q").await;
    // The client's own timeout is shorter than the wait: the wait must be added to it.
    let short = sluice_client::Client::builder(&srv.base)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let start = Instant::now();
    let empty = short
        .receive("q", &ReceiveOptions::new(1, Duration::from_millis(600)))
        .await
        .unwrap();
    assert!(empty.is_empty());
    assert!(start.elapsed() >= Duration::from_millis(550));

    let sender = c.clone();
    let send = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sender.send_json("q", &"late").await.unwrap()
    });
    let start = Instant::now();
    let got = short
        .receive("q", &ReceiveOptions::new(1, Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert!(start.elapsed() < Duration::from_secs(3));
    assert_eq!(got[0].id, send.await.unwrap().id);
    srv.shutdown().await;
}

#[tokio::test]
async fn browse_get_delete_stats_health() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(c.send_json("q", &i).await.unwrap().id);
    }
    let page = c
        .browse(
            "q",
            &BrowseQuery {
                state: Some(BrowseStateWire::Visible),
                limit: Some(3),
                cursor: None,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.messages.len(), 3);
    let cursor = page.next_cursor.clone().expect("a second page");
    let rest = c
        .browse(
            "q",
            &BrowseQuery {
                state: Some(BrowseStateWire::Visible),
                limit: Some(3),
                cursor: Some(cursor),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(rest.messages.len(), 2);
    assert_eq!(rest.messages[0].decoded_body().unwrap().as_bytes(), b"3");

    let m = c.get_message(&ids[0]).await.unwrap();
    assert_eq!(m.queue, "q");
    c.delete_message(&ids[0]).await.unwrap();
    let err = c.get_message(&ids[0]).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::MessageNotFound));
    let err = c.delete_message(&ids[0]).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::MessageNotFound));
    assert!(matches!(
        c.get_message("nothex").await,
        Err(Error::InvalidInput(_))
    ));

    let s = c.stats("q").await.unwrap();
    assert_eq!(s.visible, 4);
    assert_eq!(s.totals.sent, 5);
    assert_eq!(c.healthz().await.unwrap().status, "ok");
    assert_eq!(c.readyz().await.unwrap().status, "ready");
    srv.shutdown().await;
}

#[tokio::test]
async fn task_status_and_scaling() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    let id = c
        .send_json("q", &serde_json::json!({"task": "add", "args": [1, 2]}))
        .await
        .unwrap()
        .id;
    match c.task_status(&id, None).await {
        Ok(t) => {
            assert_eq!(t.id, id);
            assert_eq!(t.status.as_str(), "PENDING");
            let d = c.receive("q", &one()).await.unwrap().remove(0);
            c.ack_with_result("q", &d.receipt, &3).await.unwrap();
            let t = c
                .task_status(&id, Some(Duration::from_millis(100)))
                .await
                .unwrap();
            assert_eq!(t.status.as_str(), "SUCCESS");
            assert_eq!(
                t.decoded_result().unwrap(),
                Some(DecodedBody::Json("3".into()))
            );
        }
        Err(e) if e.status() == Some(404) && e.code() == Some(ErrorCode::InvalidArgument) => {
            eprintln!("note: GET /v1/tasks/{{id}} is not served yet; skipping ({e})");
        }
        Err(e) => panic!("task status: {e}"),
    }
    match c.scaling("q", 10).await {
        Ok(s) => assert_eq!(s.backlog + s.in_flight, 0),
        Err(e) if e.status() == Some(404) && e.code() == Some(ErrorCode::InvalidArgument) => {
            eprintln!("note: GET /v1/queues/{{q}}/scaling is not served yet; skipping ({e})");
        }
        Err(e) => panic!("scaling: {e}"),
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn summary_counts_the_whole_dlq() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q").await;
    for i in 0..5 {
        c.send_json("q", &i).await.unwrap();
    }
    let got = c
        .receive("q", &ReceiveOptions::new(5, Duration::ZERO))
        .await
        .unwrap();
    for (i, d) in got.iter().enumerate() {
        let error = if i < 3 { "timeout" } else { "bad input" };
        c.reject("q", &d.receipt, Some(error)).await.unwrap();
    }
    let s = c
        .summary("q.dlq", &sluice_client::wire::SummaryQuery::default())
        .await
        .unwrap();
    assert_eq!((s.total, s.group_count, s.more_groups), (5, 2, false));
    let groups: Vec<_> = s
        .groups
        .iter()
        .map(|g| (g.key.as_deref(), g.count))
        .collect();
    assert_eq!(groups, [(Some("timeout"), 3), (Some("bad input"), 2)]);
    let s = c
        .summary(
            "q.dlq",
            &sluice_client::wire::SummaryQuery {
                group_by: Some("reason".into()),
                error_contains: Some("bad".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(s.groups[0].key.as_deref(), Some("rejected"));
    assert_eq!(s.total, 2);
    let err = c
        .summary(
            "q.dlq",
            &sluice_client::wire::SummaryQuery {
                group_by: Some("colour".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument));
    let err = c.summary("nope", &Default::default()).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::QueueNotFound));
}
