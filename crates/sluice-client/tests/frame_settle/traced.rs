//! Trace context over frames (`SendTraced`, `ReceiveTraced`, protocol version 3): what goes in
//! comes back out, across the HTTP API both ways, under the HTTP API's rules; and the worker
//! over frames tells each task its trace context.

use super::*;
use sluice_client::frames::{FrameTrace, TaggedFrameMessage, TracedFrameMessage};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn traced(text: &str, trace: Option<(&str, Option<&str>)>) -> TracedFrameMessage {
    TracedFrameMessage {
        message: TaggedFrameMessage::from(FrameMessage::new(Body::text(text))),
        trace: trace.map(|(p, s)| FrameTrace {
            traceparent: p.to_owned(),
            tracestate: s.map(str::to_owned),
        }),
    }
}

#[tokio::test]
async fn traced_frames_carry_trace_context_both_ways() {
    on_both_engines(|s| async move {
        let mut conn = queue_and_connection(&s, "traced").await;
        assert!(conn.broker_version() >= 3);
        let sent = conn
            .send_traced(
                None,
                "traced",
                vec![
                    traced("with", Some((PARENT, Some("rojo=1")))),
                    traced("without", None),
                ],
            )
            .await
            .unwrap();
        // Sent over HTTP with context, received over frames with it.
        s.client
            .send(
                "traced",
                sluice_client::OutgoingMessage::text("http").trace(PARENT, None),
            )
            .await
            .unwrap();
        let options = ReceiveOptions::new(10, Duration::ZERO);
        let got = conn.receive_traced("traced", &options).await.unwrap();
        let seen: Vec<Option<(String, Option<String>)>> = got
            .iter()
            .map(|d| d.trace.clone().map(|t| (t.traceparent, t.tracestate)))
            .collect();
        assert_eq!(
            seen,
            vec![
                Some((PARENT.to_owned(), Some("rojo=1".to_owned()))),
                None,
                Some((PARENT.to_owned(), None)),
            ]
        );
        // Sent over frames, seen over HTTP.
        let view = s
            .client
            .get_message(&format!("{:016x}", sent[0].id))
            .await
            .unwrap();
        assert_eq!(view.trace.map(|t| t.traceparent).as_deref(), Some(PARENT));
        // The HTTP API's refusal, naming the message; nothing of the batch stored.
        let e = conn
            .send_traced(
                None,
                "traced",
                vec![traced("ok", None), traced("bad", Some(("00-nope", None)))],
            )
            .await
            .unwrap_err();
        assert_eq!(code(e), "invalid_argument");
        assert_eq!(s.client.stats("traced").await.unwrap().visible, 0);
    })
    .await;
}

#[tokio::test]
async fn the_worker_over_frames_tells_each_task_its_trace_context() {
    on_both_engines(|s| async move {
        s.client
            .put_queue("traced-work", &QueueConfigRequest::default())
            .await
            .unwrap();
        let task = sluice_client::TaskEnvelope::new("note", &"x")
            .unwrap()
            .to_message()
            .unwrap()
            .trace(PARENT, Some("rojo=1".to_owned()));
        s.client.send("traced-work", task).await.unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let worker = Worker::builder(s.client.clone(), "traced-work")
            .frames(FramePool::new(s.frames.to_string(), None))
            .concurrency(1)
            .poll_wait(Duration::from_millis(50))
            .handler("note", move |ctx: TaskContext, _: String| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(ctx.trace().cloned());
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
        while seen.lock().unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "task not run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stop.send(());
        run.await.unwrap().unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![Some(sluice_wire::TraceView {
                traceparent: PARENT.to_owned(),
                tracestate: Some("rojo=1".to_owned()),
            })]
        );
    })
    .await;
}
