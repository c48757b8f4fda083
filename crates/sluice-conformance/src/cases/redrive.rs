//! Redrive jobs: moving dead letters back.

use super::*;

pub(super) fn redrive_spec(source: &QueueName) -> sluice_core::redrive::RedriveSpec {
    sluice_core::redrive::RedriveSpec {
        source: source.clone(),
        destination: None,
        limit: None,
        rate: None,
        filter: sluice_core::redrive::RedriveFilter::default(),
        reset_receive_count: true,
        dry_run: false,
        guard: None,
    }
}

/// Rejects every visible message of `q` with the errors given in turn; returns their ids.
pub(super) async fn dead_letter_all(e: &Env, q: &QueueName, errors: &[&str]) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for err in errors {
        let d = e.recv_one(q).await;
        e.store
            .reject(q, d.receipt, fail(err))
            .await
            .expect("reject");
        ids.push(d.id);
    }
    ids
}

/// A redrive moves dead letters back to their source queue, keeping id, body,
/// attributes, attempts and source_queue, and resetting the attempt count.
pub async fn redrive_moves_dead_letters_back(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    for i in 0..5 {
        e.send(
            &q,
            NewMessage {
                attributes: attrs(&[("n", &i.to_string())]),
                ..text(&format!("m{i}"))
            },
        )
        .await;
    }
    let ids = dead_letter_all(&e, &q, &["e1", "e2", "e3", "e4", "e5"]).await;
    assert_eq!(e.stats(&q).await.dead_letter_depth, 5);
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("create");
    assert_eq!(job.state, sluice_core::redrive::RedriveState::Running);
    let step = e.store.redrive_step(job.id, 1000).await.expect("step");
    assert_eq!(step.moved_now, 5);
    assert_eq!(
        step.job.state,
        sluice_core::redrive::RedriveState::Completed,
        "nothing left: done"
    );
    assert_eq!((step.job.moved, step.job.matched), (5, 5));
    for id in &ids {
        let m = e.get(*id).await;
        assert_eq!(m.queue, q, "back in its source queue");
        assert_eq!(m.state, MessageState::Visible);
        assert_eq!(m.receive_count, 0, "attempt count starts afresh");
        assert!(m.dead_letter.is_none());
        assert_eq!(m.source_queue.as_ref(), Some(&q), "source_queue is kept");
        assert!(!m.attempts.is_empty(), "attempt history is kept");
        assert!(m.attributes.contains_key("n"));
    }
    assert_eq!(e.stats(&q).await.totals.redriven, 5);
    assert_eq!(e.stats(&q).await.dead_letter_depth, 0);
    let again = e.store.redrive_step(job.id, 10).await;
    assert_code(again, ErrorCode::Conflict, "a finished job takes no steps");
    assert_eq!(e.store.list_redrives().await.expect("list").len(), 1);
    assert_code(
        e.store
            .get_redrive(sluice_core::redrive::RedriveId(7))
            .await,
        ErrorCode::MessageNotFound,
        "unknown job",
    );
}

/// Filters, limits and dry runs move exactly what they say.
pub async fn redrive_filter_limit_and_dry_run(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    for i in 0..6 {
        e.send_text(&q, &format!("m{i}")).await;
    }
    dead_letter_all(
        &e,
        &q,
        &[
            "timeout",
            "503 unavailable",
            "timeout",
            "bad input",
            "timeout",
            "503",
        ],
    )
    .await;
    let mut spec = redrive_spec(&dlq);
    spec.filter.error_contains = Some("timeout".into());
    spec.dry_run = true;
    let job = e.store.create_redrive(spec.clone()).await.expect("dry run");
    let step = e.store.redrive_step(job.id, 1000).await.expect("step");
    assert_eq!(
        (step.job.matched, step.job.moved, step.moved_now),
        (3, 0, 0)
    );
    assert_eq!(
        step.job.state,
        sluice_core::redrive::RedriveState::Completed
    );
    assert_eq!(
        e.stats(&q).await.dead_letter_depth,
        6,
        "a dry run moves nothing"
    );

    spec.dry_run = false;
    spec.limit = Some(2);
    let job = e.store.create_redrive(spec).await.expect("limited");
    let step = e.store.redrive_step(job.id, 1000).await.expect("step");
    assert_eq!(
        (step.job.moved, step.job.state),
        (2, sluice_core::redrive::RedriveState::Completed)
    );
    assert_eq!(e.stats(&q).await.visible, 2);
    assert_eq!(e.stats(&q).await.dead_letter_depth, 4);

    // A named destination, one step at a time.
    let other = e.queue("other", QueueConfigPatch::default()).await;
    let mut spec = redrive_spec(&dlq);
    spec.destination = Some(other.clone());
    let job = e.store.create_redrive(spec).await.expect("to other");
    let s1 = e.store.redrive_step(job.id, 3).await.expect("step");
    assert_eq!(
        (s1.moved_now, s1.job.state),
        (3, sluice_core::redrive::RedriveState::Running)
    );
    let s2 = e.store.redrive_step(job.id, 3).await.expect("step");
    assert_eq!(
        (s2.job.moved, s2.job.state),
        (4, sluice_core::redrive::RedriveState::Completed)
    );
    assert_eq!(e.stats(&other).await.visible, 4);
}

/// At most one running job per source; a cancelled job stops and frees the source.
pub async fn redrive_one_job_per_source_and_cancel(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    for i in 0..3 {
        e.send_text(&q, &format!("m{i}")).await;
    }
    dead_letter_all(&e, &q, &["a", "b", "c"]).await;
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("first");
    assert_code(
        e.store.create_redrive(redrive_spec(&dlq)).await,
        ErrorCode::Conflict,
        "second job on the same source",
    );
    let c = e
        .store
        .control_redrive(job.id, sluice_core::redrive::RedriveControl::Cancel)
        .await
        .expect("cancel");
    assert_eq!(c.state, sluice_core::redrive::RedriveState::Cancelled);
    assert_code(
        e.store.redrive_step(job.id, 10).await,
        ErrorCode::Conflict,
        "a cancelled job takes no steps",
    );
    assert_eq!(
        e.stats(&q).await.dead_letter_depth,
        3,
        "cancel moved nothing"
    );
    e.store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("the source is free again");
    assert_code(
        e.store.create_redrive(redrive_spec(&qn("nope"))).await,
        ErrorCode::QueueNotFound,
        "unknown source",
    );
    let mut bad = redrive_spec(&dlq);
    bad.rate = Some(RateLimit {
        limit: 0,
        period: Duration::from_secs(60),
        burst: None,
    });
    assert_code(
        e.store.create_redrive(bad).await,
        ErrorCode::InvalidArgument,
        "zero rate",
    );
}

/// A paused destination holds the job (blocked, still running) instead of piling up.
pub async fn redrive_waits_for_a_paused_destination(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    e.send_text(&q, "m").await;
    dead_letter_all(&e, &q, &["x"]).await;
    e.queue(
        "work",
        QueueConfigPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("create");
    let s = e.store.redrive_step(job.id, 10).await.expect("step");
    assert_eq!(
        (s.moved_now, s.job.state),
        (0, sluice_core::redrive::RedriveState::Running)
    );
    assert!(
        s.job
            .blocked
            .as_deref()
            .is_some_and(|b| b.contains("paused")),
        "{:?}",
        s.job.blocked
    );
    e.queue(
        "work",
        QueueConfigPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await;
    let s = e.store.redrive_step(job.id, 10).await.expect("step");
    assert_eq!(
        (s.moved_now, s.job.state, s.job.blocked),
        (1, sluice_core::redrive::RedriveState::Completed, None)
    );
}

/// A job's progress survives a restart, and the resumed job moves each message once.
pub async fn redrive_resumes_after_restart(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    for i in 0..5 {
        e.send_text(&q, &format!("m{i}")).await;
    }
    let ids = dead_letter_all(&e, &q, &["a", "b", "c", "d", "e"]).await;
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("create");
    e.store.redrive_step(job.id, 2).await.expect("step");
    let e = e.restart(h).await;
    let j = e.store.get_redrive(job.id).await.expect("job survives");
    assert_eq!(
        (j.moved, j.state),
        (2, sluice_core::redrive::RedriveState::Running)
    );
    let s = e.store.redrive_step(job.id, 1000).await.expect("resume");
    assert_eq!(
        (s.moved_now, s.job.moved, s.job.state),
        (3, 5, sluice_core::redrive::RedriveState::Completed)
    );
    for id in ids {
        assert_eq!(e.get(id).await.queue, q);
    }
    assert_eq!(
        e.stats(&q).await.totals.redriven,
        5,
        "each message moved exactly once"
    );
}
