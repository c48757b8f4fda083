//! Tasks: cancelling and reporting progress.

use super::*;

/// Cancelling a waiting task removes it at once and it ends CANCELLED.
pub async fn cancel_waiting_task_removes_it(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("tasks", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "t").await;
    let later = e.send(&q, delayed("later", secs(60))).await.id;
    let m = e.store.cancel(id).await.expect("cancel");
    assert!(m.cancelled, "the cancelled task reads as cancelled");
    assert_eq!(
        sluice_core::task::TaskStatus::of(&m),
        sluice_core::task::TaskStatus::Cancelled
    );
    e.store.cancel(later).await.expect("cancel delayed");
    e.advance(secs(61));
    e.recv_none(&q, "cancelled tasks are never delivered").await;
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed, s.in_flight), (0, 0, 0));
    assert_eq!(
        s.totals.acked, 0,
        "a cancellation is not an acknowledgement"
    );
    assert!(
        e.get(id).await.cancelled,
        "CANCELLED is kept like a completed record"
    );
    assert_code(
        e.store.cancel(MessageId(42)).await,
        ErrorCode::MessageNotFound,
        "cancel of an unknown id",
    );
}

/// A running task is flagged; its handler learns it at its next extension or
/// progress report; a late success does not undo it.
pub async fn cancel_running_task_is_cooperative_and_sticky(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("tasks", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "long").await;
    let d = e.recv_one(&q).await;
    let before = e
        .store
        .extend(&q, d.receipt, secs(30))
        .await
        .expect("extend");
    assert!(!before.cancel_requested);
    let m = e.store.cancel(id).await.expect("cancel");
    assert!(
        m.cancelled && m.state == MessageState::InFlight,
        "still running, flagged: {m:?}"
    );
    let after = e
        .store
        .extend(&q, d.receipt, secs(30))
        .await
        .expect("extend after cancel");
    assert!(
        after.cancel_requested,
        "the handler is told at its next extension"
    );
    let p = sluice_core::message::Progress {
        pct: 50.0,
        detail: None,
        at: e.now(),
    };
    assert!(
        e.store
            .progress(&q, d.receipt, p)
            .await
            .expect("progress")
            .cancel_requested
    );
    e.ack(&q, d.receipt).await.expect("a late ack is accepted");
    let m = e.get(id).await;
    assert_eq!(m.state, MessageState::Completed);
    assert!(m.cancelled, "a late success does not undo CANCELLED");

    // A cancelled task that fails is not retried or dead-lettered either.
    let id2 = e.send_text(&q, "fails").await;
    let d2 = e.recv_one(&q).await;
    e.store.cancel(id2).await.expect("cancel");
    e.nack(&q, d2.receipt, None, Some("boom"))
        .await
        .expect("nack");
    e.recv_none(&q, "a cancelled task is not retried").await;
    assert!(e.get(id2).await.cancelled);
    assert_eq!(e.stats(&q).await.dead_letter_depth, 0);

    // Nor when its lease just runs out.
    let id3 = e.send_text(&q, "abandoned").await;
    e.recv_one(&q).await;
    e.store.cancel(id3).await.expect("cancel");
    e.advance(secs(31));
    e.recv_none(&q, "an abandoned cancelled task is not redelivered")
        .await;
    assert_eq!(e.get(id3).await.state, MessageState::Completed);
}

/// A finished task is left as it is by a cancel.
pub async fn cancel_finished_task_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "tasks",
            QueueConfigPatch {
                max_receive_count: Some(1),
                ..Default::default()
            },
        )
        .await;
    let ok = e.send_text(&q, "ok").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack");
    let m = e.store.cancel(ok).await.expect("cancel");
    assert!(!m.cancelled);
    assert_eq!(
        sluice_core::task::TaskStatus::of(&m),
        sluice_core::task::TaskStatus::Success
    );
    let bad = e.send_text(&q, "bad").await;
    let d = e.recv_one(&q).await;
    e.nack(&q, d.receipt, None, Some("no")).await.expect("nack");
    let m = e.store.cancel(bad).await.expect("cancel");
    assert!(!m.cancelled);
    assert_eq!(
        sluice_core::task::TaskStatus::of(&m),
        sluice_core::task::TaskStatus::Failure
    );
}

/// Progress is reported with the lease's receipt, shown with the message, and refused for a
/// stale receipt or a bad percentage.
pub async fn progress_is_reported_and_validated(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("tasks", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "t").await;
    let d = e.recv_one(&q).await;
    let p = sluice_core::message::Progress {
        pct: 42.5,
        detail: Some("page 3".into()),
        at: e.now(),
    };
    let lease = e.store.progress(&q, d.receipt, p).await.expect("progress");
    assert_eq!(
        lease.deadline, d.lease_deadline,
        "progress does not extend the lease"
    );
    let m = e.get(id).await;
    let got = m.progress.expect("progress shown");
    assert_eq!((got.pct, got.detail.as_deref()), (42.5, Some("page 3")));
    for pct in [-1.0, 100.5, f64::NAN] {
        let bad = sluice_core::message::Progress {
            pct,
            detail: None,
            at: e.now(),
        };
        assert_code(
            e.store.progress(&q, d.receipt, bad).await,
            ErrorCode::InvalidArgument,
            "bad pct",
        );
    }
    e.ack(&q, d.receipt).await.expect("ack");
    let late = sluice_core::message::Progress {
        pct: 99.0,
        detail: None,
        at: e.now(),
    };
    assert_code(
        e.store.progress(&q, d.receipt, late).await,
        ErrorCode::ReceiptStale,
        "progress after ack",
    );
}
