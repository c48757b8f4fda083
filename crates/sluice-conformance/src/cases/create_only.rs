//! `create_queue`: a put that only creates.

use super::{ErrorCode, Harness, QueueConfig, QueueConfigPatch, assert_code, env, qn, secs};

/// `create_queue` creates a queue (and its DLQ) like `put_queue`, refuses an existing queue
/// with `conflict` and leaves it unchanged, and of two creates of one name at once exactly
/// one succeeds.
pub async fn queue_create_only_refuses_an_existing_queue(h: &dyn Harness) {
    let e = env(h).await;
    let q = qn("orders");
    let first = QueueConfigPatch {
        visibility_timeout: Some(secs(10)),
        ..Default::default()
    };
    let out = e
        .store
        .create_queue(&q, &first)
        .await
        .expect("create_queue(orders)");
    assert!(out.created, "a create that succeeds reports created");
    assert_eq!(
        out.queue.config,
        QueueConfig::defaults_for(&q)
            .apply(&q, &first)
            .expect("valid patch")
    );
    e.store
        .get_queue(&qn("orders.dlq"))
        .await
        .expect("create_queue creates the DLQ as put_queue does");

    let second = QueueConfigPatch {
        visibility_timeout: Some(secs(20)),
        ..Default::default()
    };
    let again = e.store.create_queue(&q, &second).await;
    assert_code(
        again,
        ErrorCode::Conflict,
        "create_queue of an existing queue",
    );
    let now = e.store.get_queue(&q).await.expect("get_queue");
    assert_eq!(
        now.config.visibility_timeout,
        secs(10),
        "a refused create changes nothing"
    );
    assert_code(
        e.store
            .create_queue(&qn("orders.dlq"), &QueueConfigPatch::default())
            .await,
        ErrorCode::Conflict,
        "create_queue of a DLQ created with its queue",
    );
    let updated = e
        .store
        .put_queue(&q, &second)
        .await
        .expect("put_queue still updates");
    assert!(!updated.created);
    assert_eq!(updated.queue.config.visibility_timeout, secs(20));

    for round in 0..5 {
        let name = qn(&format!("race-{round}"));
        let create = || {
            let (store, name) = (e.store.clone(), name.clone());
            tokio::spawn(async move {
                store
                    .create_queue(&name, &QueueConfigPatch::default())
                    .await
            })
        };
        let (a, b) = (create(), create());
        let (a, b) = (a.await.expect("task"), b.await.expect("task"));
        let won = [&a, &b].iter().filter(|r| r.is_ok()).count();
        assert_eq!(
            won, 1,
            "round {round}: exactly one create wins: {a:?} {b:?}"
        );
        for r in [a, b] {
            if let Err(err) = r {
                assert_eq!(err.code(), ErrorCode::Conflict, "the loser is a conflict");
            }
        }
    }
}

/// A new queue's name is dot-separated parts: `put_queue` and `create_queue` refuse names
/// that start or end with `.` or hold `..` (also as a named DLQ that would be created), with
/// the rule in the error; addressing such a name that no queue has is `queue_not_found`.
pub async fn new_queue_names_are_dot_separated(h: &dyn Harness) {
    let e = env(h).await;
    for bad in [".", "..", "...", "a..b", ".hidden", "trailing."] {
        let name = qn(bad);
        let put = e.store.put_queue(&name, &QueueConfigPatch::default()).await;
        let Err(err) = put else {
            panic!("put_queue({bad:?}) was accepted");
        };
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad:?}: {err}");
        assert!(
            err.to_string().contains("no '..'"),
            "the rule is stated: {err}"
        );
        assert_code(
            e.store
                .create_queue(&name, &QueueConfigPatch::default())
                .await,
            ErrorCode::InvalidArgument,
            "create_queue of a name the rule refuses",
        );
        assert_code(
            e.store.get_queue(&name).await,
            ErrorCode::QueueNotFound,
            "addressing a name no queue has",
        );
    }
    let with_dlq = QueueConfigPatch {
        dead_letter_queue: Some(Some(qn("..dead"))),
        max_receive_count: Some(3),
        ..Default::default()
    };
    assert_code(
        e.store.put_queue(&qn("named-dlq"), &with_dlq).await,
        ErrorCode::InvalidArgument,
        "a named DLQ that would be created follows the rule too",
    );
    e.store
        .put_queue(&qn("orders.v2"), &QueueConfigPatch::default())
        .await
        .expect("dots between parts are fine");
}
