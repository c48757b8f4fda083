//! Pausing, resuming and cancelling redrive jobs, and the messages a step reports moved.

use super::*;
use sluice_core::redrive::{RedriveControl, RedriveState};

/// A paused job takes no steps and keeps its source until it is resumed or cancelled; the
/// pause and its reason survive a restart; each step names the messages it moved.
///
/// Kept whole: one job lives its whole life (step, pause, restart, resume, completion, controls
/// once finished), then a second on the same source is cancelled while paused; each step starts
/// where the last left it.
pub async fn redrive_pause_resume_and_cancel(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    for i in 0..4 {
        e.send_text(&q, &format!("m{i}")).await;
    }
    let ids = dead_letter_all(&e, &q, &["a", "b", "c", "d"]).await;
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("create");
    let first = e.store.redrive_step(job.id, 1).await.expect("step");
    assert_eq!(first.moved_ids.len(), 1, "{first:?}");
    assert!(ids.contains(&first.moved_ids[0]), "{first:?}");
    assert_eq!(e.get(first.moved_ids[0]).await.queue, q);

    let pause = RedriveControl::Pause {
        reason: "upstream answers 429".into(),
    };
    let paused = e
        .store
        .control_redrive(job.id, pause.clone())
        .await
        .expect("pause");
    assert_eq!(paused.state, RedriveState::Paused);
    assert_eq!(
        paused.paused_reason.as_deref(),
        Some("upstream answers 429")
    );
    let again = e
        .store
        .control_redrive(job.id, pause.clone())
        .await
        .expect("pausing twice changes nothing");
    assert_eq!(again, paused);
    assert_code(
        e.store.redrive_step(job.id, 10).await,
        ErrorCode::Conflict,
        "a paused job takes no steps",
    );
    assert_code(
        e.store.create_redrive(redrive_spec(&dlq)).await,
        ErrorCode::Conflict,
        "a paused job keeps its source",
    );

    let e = e.restart(h).await;
    let j = e.store.get_redrive(job.id).await.expect("job survives");
    assert_eq!(
        (j.state, j.paused_reason.as_deref(), j.moved),
        (RedriveState::Paused, Some("upstream answers 429"), 1)
    );
    let resumed = e
        .store
        .control_redrive(job.id, RedriveControl::Resume)
        .await
        .expect("resume");
    assert_eq!(
        (resumed.state, resumed.paused_reason),
        (RedriveState::Running, None)
    );
    let rest = e.store.redrive_step(job.id, 10).await.expect("step");
    assert_eq!(rest.moved_ids.len(), 3);
    assert_eq!(rest.job.state, RedriveState::Completed);
    let mut moved: Vec<MessageId> = first
        .moved_ids
        .iter()
        .chain(&rest.moved_ids)
        .copied()
        .collect();
    moved.sort();
    let mut all = ids.clone();
    all.sort();
    assert_eq!(moved, all, "each message moved once");

    assert_code(
        e.store.control_redrive(job.id, pause).await,
        ErrorCode::Conflict,
        "a finished job cannot be paused",
    );
    assert_code(
        e.store
            .control_redrive(job.id, RedriveControl::Resume)
            .await,
        ErrorCode::Conflict,
        "a finished job cannot be resumed",
    );
    let done = e
        .store
        .control_redrive(job.id, RedriveControl::Cancel)
        .await
        .expect("cancelling a finished job changes nothing");
    assert_eq!(done.state, RedriveState::Completed);
    assert_code(
        e.store
            .control_redrive(
                sluice_core::redrive::RedriveId(0xdead),
                RedriveControl::Resume,
            )
            .await,
        ErrorCode::MessageNotFound,
        "unknown job",
    );

    // Cancelling a paused job ends it and frees the source.
    e.send_text(&q, "late").await;
    dead_letter_all(&e, &q, &["e"]).await;
    let second = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("the source is free after completion");
    e.store
        .control_redrive(
            second.id,
            RedriveControl::Pause {
                reason: "by hand".into(),
            },
        )
        .await
        .expect("pause");
    let cancelled = e
        .store
        .control_redrive(second.id, RedriveControl::Cancel)
        .await
        .expect("cancel");
    assert_eq!(cancelled.state, RedriveState::Cancelled);
    assert!(cancelled.finished_at.is_some());
    e.store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("the source is free after a cancel");
}
