//! Trace context (`sluice_core::trace`): kept with its message, unchanged, from its send to
//! every delivery and view, through retries, dead-lettering, moves, redrives and restarts; a
//! message sent without one has none.

use sluice_core::GroupName;
use sluice_core::fair::MessageKey;
use sluice_core::trace::TraceContext;

use super::*;

fn ctx(span: &str, state: Option<&str>) -> TraceContext {
    TraceContext::new(
        format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span}-01"),
        state.map(str::to_owned),
    )
    .unwrap_or_else(|e| panic!("test trace context invalid: {e}"))
}

fn body_of(d: &Delivery) -> String {
    String::from_utf8_lossy(&d.body.bytes).into_owned()
}

/// Every kind of message (plain, grouped, keyed, prioritized) keeps the context it was sent
/// with, and one sent without has none, in deliveries, browse and get; a retry, a restart,
/// dead-lettering, a redrive and a move keep it; a completed record keeps none (it keeps no
/// body either).
pub async fn trace_context_travels_with_its_message(h: &dyn Harness) {
    let e = env(h).await;
    let patch = QueueConfigPatch {
        max_receive_count: Some(2),
        ..QueueConfigPatch::default()
    };
    let q = e.queue("traced", patch).await;
    let dlq = qn("traced.dlq");
    let other = e.queue("traced-next", QueueConfigPatch::default()).await;
    let plain = ctx(
        "00f067aa0ba902b7",
        Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    );
    let grouped = ctx("00f067aa0ba902b8", None);
    let keyed = ctx("00f067aa0ba902b9", Some("k=v"));
    let ids: Vec<MessageId> = e
        .send_batch(
            &q,
            vec![
                text("plain").with_trace(plain.clone()),
                text("none"),
                text("grouped")
                    .in_group(GroupName::new("g").expect("group"))
                    .with_trace(grouped.clone()),
                text("keyed")
                    .with_key(MessageKey::new("acme").expect("key"))
                    .with_priority(5)
                    .with_trace(keyed.clone()),
            ],
        )
        .await
        .into_iter()
        .map(|o| o.id)
        .collect();
    let want = |body: &str| match body {
        "plain" => Some(plain.clone()),
        "grouped" => Some(grouped.clone()),
        "keyed" => Some(keyed.clone()),
        _ => None,
    };
    let views = e.browse(&q, BrowseState::All).await;
    assert_eq!(views.len(), 4);
    for v in &views {
        let body = String::from_utf8_lossy(&v.body.as_ref().expect("body").bytes).into_owned();
        assert_eq!(v.trace, want(&body), "browse of {body}");
    }
    let ds = e.recv(&q, 10).await;
    assert_eq!(ds.len(), 4);
    for d in &ds {
        assert_eq!(d.trace, want(&body_of(d)), "delivery of {}", body_of(d));
        assert_eq!(e.get(d.id).await.trace, want(&body_of(d)), "get");
    }
    let by_body = |name: &str| {
        ds.iter()
            .find(|d| body_of(d) == name)
            .unwrap_or_else(|| panic!("{name} delivered"))
            .clone()
    };
    // A retry, then a restart.
    e.nack(
        &q,
        by_body("plain").receipt,
        Some(Duration::ZERO),
        Some("boom"),
    )
    .await
    .expect("nack");
    e.store
        .move_message(&q, by_body("grouped").receipt, &other, fail("elsewhere"))
        .await
        .expect("move");
    e.ack(&q, by_body("keyed").receipt).await.expect("ack");
    e.ack(&q, by_body("none").receipt).await.expect("ack");
    let e = e.restart(h).await;
    let d = e.recv_one(&q).await;
    assert_eq!((body_of(&d), d.receive_count), ("plain".to_owned(), 2));
    assert_eq!(d.trace, Some(plain.clone()), "after a retry and a restart");
    let moved = e.recv_one(&other).await;
    assert_eq!(moved.trace, Some(grouped.clone()), "after a move");
    assert_eq!(e.get(ids[2]).await.trace, Some(grouped));
    // Completed: no body, no context.
    assert_eq!(e.get(ids[3]).await.trace, None, "completed record");
    // Dead-lettered on its last attempt, then redriven.
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some("boom again"))
        .await
        .expect("nack");
    let dead = e.get(ids[0]).await;
    assert_eq!(
        (dead.queue.clone(), dead.trace),
        (dlq.clone(), Some(plain.clone()))
    );
    let e = e.restart(h).await;
    assert_eq!(
        e.get(ids[0]).await.trace,
        Some(plain.clone()),
        "in the DLQ after a restart"
    );
    let job = e
        .store
        .create_redrive(super::redrive::redrive_spec(&dlq))
        .await
        .expect("create");
    let step = e.store.redrive_step(job.id, 10).await.expect("step");
    assert_eq!(step.moved_now, 1);
    let d = e.recv_one(&q).await;
    assert_eq!((d.id, d.trace), (ids[0], Some(plain)), "after a redrive");
}
