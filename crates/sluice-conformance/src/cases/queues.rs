//! Queues: creating, configuring, listing and deleting queues.

use super::*;

/// `put_queue` creates a queue with the defaults overlaid by the patch, creates its
/// dead-letter queue (`<name>.dlq` or the named one) with the DLQ defaults, and is idempotent.
pub async fn queue_put_creates_with_defaults_and_dlq(h: &dyn Harness) {
    let e = env(h).await;
    let q = qn("jobs");
    let out = e
        .store
        .put_queue(&q, &QueueConfigPatch::default())
        .await
        .expect("put_queue(jobs)");
    assert!(out.created, "first put_queue must report created");
    assert_eq!(out.queue.name, q);
    assert_eq!(out.queue.config, QueueConfig::defaults_for(&q), "defaults");
    assert_eq!(
        out.queue.created_at,
        e.now(),
        "created_at is the store clock's now"
    );

    let dlq = e
        .store
        .get_queue(&qn("jobs.dlq"))
        .await
        .expect("jobs.dlq must be created with jobs");
    assert_eq!(
        dlq.config,
        QueueConfig::dead_letter_defaults(&qn("jobs.dlq")),
        "an automatically created DLQ has the DLQ defaults"
    );

    let patch = QueueConfigPatch {
        visibility_timeout: Some(secs(10)),
        max_receive_count: Some(3),
        dead_letter_queue: Some(Some(qn("emails-failed"))),
        max_in_flight: Some(Some(7)),
        rate_limit: Some(Some(RateLimit {
            limit: 5,
            period: secs(1),
            burst: None,
        })),
        ..Default::default()
    };
    let q2 = qn("emails");
    let out = e
        .store
        .put_queue(&q2, &patch)
        .await
        .expect("put_queue(emails)");
    assert!(out.created);
    let want = QueueConfig::defaults_for(&q2)
        .apply(&q2, &patch)
        .expect("valid patch");
    assert_eq!(
        out.queue.config, want,
        "the patch is overlaid on the defaults"
    );
    e.store
        .get_queue(&qn("emails-failed"))
        .await
        .expect("a named dead_letter_queue that does not exist is created with the queue");

    e.advance(secs(5));
    let again = e
        .store
        .put_queue(&q2, &patch)
        .await
        .expect("second put_queue(emails)");
    assert!(
        !again.created,
        "a second put of the same queue is an update"
    );
    assert_eq!(
        again.queue.config, want,
        "putting the same patch again changes nothing"
    );
    assert_eq!(
        again.queue.created_at, out.queue.created_at,
        "created_at does not move on update"
    );
}

/// An update changes only the fields in the patch; `created_at` stays.
pub async fn queue_update_changes_only_named_fields(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("orders", QueueConfigPatch::default()).await;
    let created = e.store.get_queue(&q).await.expect("get_queue").created_at;
    e.advance(secs(3));
    let out = e
        .store
        .put_queue(
            &q,
            &QueueConfigPatch {
                visibility_timeout: Some(secs(45)),
                ..Default::default()
            },
        )
        .await
        .expect("update visibility");
    assert!(!out.created);
    assert_eq!(out.queue.config.visibility_timeout, secs(45));
    assert_eq!(
        out.queue.config.max_receive_count, 5,
        "untouched field keeps its value"
    );
    let out = e
        .store
        .put_queue(
            &q,
            &QueueConfigPatch {
                max_receive_count: Some(9),
                max_depth: Some(Some(100)),
                ..Default::default()
            },
        )
        .await
        .expect("update max_receive_count");
    assert_eq!(
        out.queue.config.visibility_timeout,
        secs(45),
        "earlier update is kept"
    );
    assert_eq!(out.queue.config.max_receive_count, 9);
    assert_eq!(out.queue.config.max_depth, Some(100));
    let out = e
        .store
        .put_queue(
            &q,
            &QueueConfigPatch {
                max_depth: Some(None),
                ..Default::default()
            },
        )
        .await
        .expect("clear max_depth");
    assert_eq!(
        out.queue.config.max_depth, None,
        "Some(None) clears an optional field"
    );
    let got = e.store.get_queue(&q).await.expect("get_queue");
    assert_eq!(
        got.config, out.queue.config,
        "get_queue shows the updated config"
    );
    assert_eq!(
        got.created_at, created,
        "created_at does not change on update"
    );
}

/// `get_queue`, `list_queues` (by name) and `delete_queue` (which deletes the messages).
pub async fn queue_get_list_delete(h: &dyn Harness) {
    let e = env(h).await;
    assert!(
        e.store.list_queues().await.expect("list_queues").is_empty(),
        "a fresh store has no queues"
    );
    let b = e.queue("b-queue", QueueConfigPatch::default()).await;
    let a = e.queue("a-queue", QueueConfigPatch::default()).await;
    let names: Vec<String> = e
        .store
        .list_queues()
        .await
        .expect("list")
        .iter()
        .map(|i| i.name.to_string())
        .collect();
    assert_eq!(
        names,
        ["a-queue", "a-queue.dlq", "b-queue", "b-queue.dlq"],
        "list_queues lists every queue (DLQs too), by name"
    );
    assert_eq!(e.store.get_queue(&b).await.expect("get b").name, b);

    let id = e.send_text(&a, "doomed").await;
    e.store.delete_queue(&a).await.expect("delete a-queue");
    assert_code(
        e.store.get_queue(&a).await,
        ErrorCode::QueueNotFound,
        "get_queue after delete",
    );
    e.gone(id, "a deleted queue's messages are deleted with it")
        .await;
    let names: Vec<String> = e
        .store
        .list_queues()
        .await
        .expect("list")
        .iter()
        .map(|i| i.name.to_string())
        .collect();
    assert!(
        !names.contains(&"a-queue".to_owned()),
        "deleted queue still listed: {names:?}"
    );
    assert!(names.contains(&"b-queue".to_owned()));
    assert_code(
        e.store.delete_queue(&a).await,
        ErrorCode::QueueNotFound,
        "second delete",
    );

    let out = e
        .store
        .put_queue(&a, &QueueConfigPatch::default())
        .await
        .expect("recreate");
    assert!(out.created, "a deleted queue can be created again");
    assert_eq!(
        e.stats(&a).await.visible,
        0,
        "a recreated queue starts empty"
    );
}

/// A queue named as another queue's `dead_letter_queue` cannot be deleted (`Conflict`).
pub async fn queue_delete_refused_while_used_as_dlq(h: &dyn Harness) {
    let e = env(h).await;
    let (src, src_dlq) = e.queue_and_dlq("src").await;
    assert_code(
        e.store.delete_queue(&src_dlq).await,
        ErrorCode::Conflict,
        "delete src.dlq in use",
    );
    e.store
        .get_queue(&src_dlq)
        .await
        .expect("a refused delete leaves the DLQ in place");

    let shared = Some(Some(qn("shared")));
    let a = e
        .queue(
            "a",
            QueueConfigPatch {
                dead_letter_queue: shared.clone(),
                ..Default::default()
            },
        )
        .await;
    let b = e
        .queue(
            "b",
            QueueConfigPatch {
                dead_letter_queue: shared,
                ..Default::default()
            },
        )
        .await;
    assert_code(
        e.store.delete_queue(&qn("shared")).await,
        ErrorCode::Conflict,
        "shared DLQ used by a and b",
    );
    e.store.delete_queue(&a).await.expect("delete a");
    assert_code(
        e.store.delete_queue(&qn("shared")).await,
        ErrorCode::Conflict,
        "shared DLQ still used by b",
    );
    e.store.delete_queue(&b).await.expect("delete b");
    e.store
        .delete_queue(&qn("shared"))
        .await
        .expect("an unused DLQ can be deleted");

    // Pointing src elsewhere frees src.dlq.
    e.queue(
        "src",
        QueueConfigPatch {
            dead_letter_queue: Some(Some(qn("other-dlq"))),
            ..Default::default()
        },
    )
    .await;
    e.store
        .delete_queue(&src_dlq)
        .await
        .expect("src.dlq is no longer anyone's DLQ");
    let _ = src;
}

/// Every field can be changed on a live queue: a new visibility timeout applies to the next
/// receive, a pause applies at once.
pub async fn queue_config_change_is_live(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("live", QueueConfigPatch::default()).await;
    e.send_text(&q, "one").await;
    e.send_text(&q, "two").await;
    e.queue(
        "live",
        QueueConfigPatch {
            visibility_timeout: Some(secs(5)),
            ..Default::default()
        },
    )
    .await;
    let d = e.recv_one(&q).await;
    assert_eq!(
        d.lease_deadline,
        e.now().plus(secs(5)),
        "the updated visibility_timeout applies"
    );
    e.queue(
        "live",
        QueueConfigPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await;
    e.recv_none(&q, "queue paused by update").await;
    e.advance(secs(5));
    e.recv_none(&q, "still paused after the lease ran out")
        .await;
    e.queue(
        "live",
        QueueConfigPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        e.recv(&q, 10).await.len(),
        2,
        "both messages deliverable after resume"
    );
}
