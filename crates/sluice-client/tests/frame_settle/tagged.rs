//! Keys and priorities over frames (`SendTagged`, `ReceiveTagged`): what goes in comes back
//! out, in priority order, under the HTTP API's rules; and the worker over frames tells each
//! task its key and priority.

use super::*;
use sluice_client::frames::TaggedFrameMessage;

fn tagged(
    text: &str,
    group: Option<&str>,
    key: Option<&str>,
    priority: Option<u8>,
) -> TaggedFrameMessage {
    TaggedFrameMessage {
        message: FrameMessage::new(Body::text(text)),
        group: group.map(str::to_owned),
        key: key.map(str::to_owned),
        priority,
    }
}

#[tokio::test]
async fn tagged_frames_carry_group_key_and_priority_both_ways() {
    on_both_engines(|s| async move {
        let mut conn = queue_and_connection(&s, "fair").await;
        assert!(conn.broker_version() >= 2);
        let sent = conn
            .send_tagged(
                None,
                "fair",
                vec![
                    tagged("low", Some("g"), Some("acme"), Some(2)),
                    tagged("plain", None, None, None),
                    tagged("urgent", None, Some("globex"), Some(9)),
                ],
            )
            .await
            .unwrap();
        assert_eq!(sent.len(), 3);

        let options = ReceiveOptions::new(10, Duration::ZERO);
        let got = conn.receive_tagged("fair", &options).await.unwrap();
        let seen: Vec<(u64, Option<&str>, Option<&str>, u8)> = got
            .iter()
            .map(|d| {
                (
                    d.delivery.id,
                    d.group.as_deref(),
                    d.key.as_deref(),
                    d.priority,
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (sent[2].id, None, Some("globex"), 9),
                // Without a priority of its own it is delivered at the queue's default.
                (sent[1].id, None, None, 4),
                (sent[0].id, Some("g"), Some("acme"), 2),
            ],
            "priority order, each with what it was sent with (a grouped message last: on \
             PostgreSQL group fronts go after ranked ungrouped messages)"
        );
        let view = s
            .client
            .get_message(&format!("{:016x}", sent[0].id))
            .await
            .unwrap();
        assert_eq!(view.key.as_deref(), Some("acme"));
        assert_eq!(view.priority, Some(2));

        // The HTTP API's refusals, each naming the message.
        for bad in [
            tagged("x", None, Some(""), None),
            tagged("x", None, Some("tab\tkey"), None),
            tagged("x", None, None, Some(10)),
        ] {
            let e = conn
                .send_tagged(None, "fair", vec![tagged("ok", None, None, None), bad])
                .await
                .unwrap_err();
            assert_eq!(code(e), "invalid_argument");
        }
        assert_eq!(s.client.stats("fair").await.unwrap().in_flight, 3);
        assert_eq!(
            s.client.stats("fair").await.unwrap().visible,
            0,
            "nothing of a refused batch stored"
        );
    })
    .await;
}

#[tokio::test]
async fn a_tagged_send_under_an_idempotency_key_is_stored_once() {
    on_both_engines(|s| async move {
        let mut conn = queue_and_connection(&s, "once").await;
        let batch = || vec![tagged("a", None, Some("acme"), Some(7))];
        let first = conn
            .send_tagged(Some("order-1"), "once", batch())
            .await
            .unwrap();
        let again = conn
            .send_tagged(Some("order-1"), "once", batch())
            .await
            .unwrap();
        assert_eq!(first, again);
        let other = conn
            .send_tagged(
                Some("order-1"),
                "once",
                vec![tagged("a", None, Some("acme"), Some(8))],
            )
            .await
            .unwrap_err();
        assert_eq!(code(other), "idempotency_mismatch");
        // The same key on the untagged idempotent send is another request.
        let untagged = conn
            .send_idempotent(
                "order-1",
                "once",
                vec![GroupedFrameMessage {
                    message: FrameMessage::new(Body::text("a")),
                    group: None,
                }],
            )
            .await
            .unwrap_err();
        assert_eq!(code(untagged), "idempotency_mismatch");
        assert_eq!(s.client.stats("once").await.unwrap().visible, 1);
    })
    .await;
}

#[tokio::test]
async fn the_worker_over_frames_tells_each_task_its_key_and_priority() {
    on_both_engines(|s| async move {
        s.client
            .put_queue("tenants", &QueueConfigRequest::default())
            .await
            .unwrap();
        let send = |tenant: &'static str, priority: u8| {
            sluice_client::TaskEnvelope::new("note", &tenant)
                .unwrap()
                .to_message()
                .unwrap()
                .key(tenant)
                .priority(priority)
        };
        s.client
            .send_batch("tenants", vec![send("acme", 1), send("globex", 8)])
            .await
            .unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let worker = Worker::builder(s.client.clone(), "tenants")
            .frames(FramePool::new(s.frames.to_string(), None))
            .concurrency(1)
            .poll_wait(Duration::from_millis(50))
            .handler("note", move |ctx: TaskContext, tenant: String| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push((
                        tenant,
                        ctx.key().map(str::to_owned),
                        ctx.priority(),
                    ));
                    Ok(())
                }
            })
            .build()
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(worker.run_until(async {
            let _ = stopped.await;
        }));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while seen.lock().unwrap().len() < 2 {
            assert!(tokio::time::Instant::now() < deadline, "tasks not run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stop.send(());
        run.await.unwrap().unwrap();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(
            seen,
            vec![
                ("acme".to_owned(), Some("acme".to_owned()), 1),
                ("globex".to_owned(), Some("globex".to_owned()), 8),
            ]
        );
    })
    .await;
}
