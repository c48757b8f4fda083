//! Queue administration through the client against a real broker.

mod common;

use sluice_client::wire::{
    BreakerReasonView, BreakerStateView, QueueConfigRequest, QueueListQuery, RateLimitWire,
};
use sluice_client::{BreakerForce, Error, ErrorCode, OutgoingMessage};

#[tokio::test]
async fn create_show_update_list_pause_resume_purge_delete() {
    let srv = common::start().await;
    let c = &srv.client;

    let put = c
        .put_queue(
            "jobs",
            &QueueConfigRequest {
                visibility_timeout_ms: Some(10_000),
                max_receive_count: Some(3),
                rate_limit: Some(Some(RateLimitWire {
                    limit: 100,
                    period_ms: 60_000,
                    burst: None,
                })),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(put.created);
    assert_eq!(put.queue.config.visibility_timeout_ms, 10_000);
    assert_eq!(
        put.queue.config.dead_letter_queue.as_deref(),
        Some("jobs.dlq")
    );

    let again = c
        .put_queue(
            "jobs",
            &QueueConfigRequest {
                max_depth: Some(Some(50)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!again.created, "a second PUT updates");
    assert_eq!(again.queue.config.max_depth, Some(50));
    assert_eq!(again.queue.config.max_receive_count, 3, "unset fields kept");

    let got = c.get_queue("jobs").await.unwrap();
    assert_eq!(got.config, again.queue.config);

    let names: Vec<String> = c
        .list_queues()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert!(names.contains(&"jobs".to_owned()) && names.contains(&"jobs.dlq".to_owned()));

    assert!(c.pause_queue("jobs").await.unwrap().config.paused);
    assert!(!c.resume_queue("jobs").await.unwrap().config.paused);

    for i in 0..3 {
        c.send("jobs", OutgoingMessage::json(&i).unwrap())
            .await
            .unwrap();
    }
    assert_eq!(c.purge_queue("jobs").await.unwrap().purged, 3);
    assert_eq!(c.stats("jobs").await.unwrap().visible, 0);

    c.delete_queue("jobs").await.unwrap();
    let err = c.get_queue("jobs").await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::QueueNotFound), "{err}");
    assert_eq!(err.status(), Some(404));
    assert!(err.is_not_found());
    srv.shutdown().await;
}

#[tokio::test]
async fn errors_keep_the_brokers_code_and_message() {
    let srv = common::start().await;
    let c = &srv.client;
    let err = c.pause_queue("missing").await.unwrap_err();
    match &err {
        Error::Api {
            status,
            code,
            message,
            ..
        } => {
            assert_eq!(*status, 404);
            assert_eq!(*code, ErrorCode::QueueNotFound);
            assert!(message.contains("missing"), "{message}");
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    let err = c.delete_queue("missing").await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::QueueNotFound));

    let err = c
        .put_queue(
            "bad",
            &QueueConfigRequest {
                visibility_timeout_ms: Some(100 * 3_600_000),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument));
    assert_eq!(err.status(), Some(400));

    // A bad name never reaches the broker.
    let err = c.get_queue("a/b").await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    srv.shutdown().await;
}

#[tokio::test]
async fn create_queue_refuses_an_existing_queue() {
    let srv = common::start().await;
    let c = &srv.client;
    let three = QueueConfigRequest {
        max_receive_count: Some(3),
        ..Default::default()
    };
    let q = c.create_queue("orders", &three).await.expect("create");
    assert_eq!(q.config.max_receive_count, 3);
    let nine = QueueConfigRequest {
        max_receive_count: Some(9),
        ..Default::default()
    };
    let err = c.create_queue("orders", &nine).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Conflict), "{err:?}");
    assert_eq!(err.status(), Some(409));
    let q = c.get_queue("orders").await.expect("get");
    assert_eq!(q.config.max_receive_count, 3, "left unchanged");
    srv.shutdown().await;
}

#[tokio::test]
async fn listings_follow_the_cursor_or_answer_one_page() {
    let srv = common::start().await;
    let c = &srv.client;
    let no_dlq = QueueConfigRequest {
        max_receive_count: Some(0),
        dead_letter_queue: Some(None),
        ..Default::default()
    };
    for name in ["b.2", "a.1", "b.1", "b.3", "c.1"] {
        c.create_queue(name, &no_dlq).await.expect("create");
    }
    let names = |qs: Vec<sluice_client::wire::QueueView>| -> Vec<String> {
        qs.into_iter().map(|q| q.name).collect()
    };
    assert_eq!(
        names(c.list_queues().await.unwrap()),
        ["a.1", "b.1", "b.2", "b.3", "c.1"]
    );
    assert_eq!(
        names(c.list_queues_by_prefix("b.").await.unwrap()),
        ["b.1", "b.2", "b.3"]
    );

    let mut query = QueueListQuery {
        prefix: Some("b.".into()),
        limit: Some(2),
        cursor: None,
    };
    let first = c.list_queues_page(&query).await.unwrap();
    assert_eq!(names(first.queues), ["b.1", "b.2"]);
    query.cursor = Some(first.next_cursor.expect("more remain"));
    let second = c.list_queues_page(&query).await.unwrap();
    assert_eq!(names(second.queues), ["b.3"]);
    assert_eq!(second.next_cursor, None, "the last page has no cursor");

    query.cursor = Some("garbage".into());
    let err = c.list_queues_page(&query).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err:?}");
    assert!(err.to_string().contains("next_cursor"), "{err}");
    let err = c.list_queues_by_prefix("a b").await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err:?}");
    srv.shutdown().await;
}

/// A governed queue shows its adaptive rate and breaker in its stats; forcing the breaker
/// answers the same view, and a queue without a breaker says so.
#[tokio::test]
async fn force_breaker_answers_the_flow_view_and_stats_show_it() {
    let srv = common::start().await;
    let c = &srv.client;
    let governed: QueueConfigRequest = serde_json::from_value(serde_json::json!({
        "adaptive": {"min_per_min": 60, "max_per_min": 6000},
        "breaker": {"failure_share": 0.5, "min_calls": 10},
    }))
    .unwrap();
    c.create_queue("calls", &governed).await.expect("create");
    c.create_queue("plain", &QueueConfigRequest::default())
        .await
        .expect("create");

    let flow = c.stats("calls").await.unwrap().flow.expect("governed");
    let rate = flow.adaptive.as_ref().expect("adaptive");
    assert_eq!(
        (rate.rate_per_min, rate.min_per_min, rate.max_per_min),
        (60, 60, 6000)
    );
    let breaker = flow.breaker.as_ref().expect("breaker");
    assert_eq!(breaker.state, BreakerStateView::Closed);
    assert!(
        sluice_client::wire::parse_rfc3339("since", &breaker.since).is_ok(),
        "{breaker:?}"
    );
    assert!(c.stats("plain").await.unwrap().flow.is_none());

    let open = c.force_breaker("calls", BreakerForce::Open).await.unwrap();
    let b = open.breaker.expect("breaker");
    assert_eq!(
        (b.state, b.forced, b.opened_total),
        (BreakerStateView::Open, true, 1)
    );
    let last = b.transitions.last().expect("a transition");
    assert_eq!(
        (last.from, last.to),
        (BreakerStateView::Closed, BreakerStateView::Open)
    );
    assert_eq!(last.reason, BreakerReasonView::Forced);
    let shown = c
        .stats("calls")
        .await
        .unwrap()
        .flow
        .unwrap()
        .breaker
        .unwrap();
    assert_eq!((shown.state, shown.forced), (BreakerStateView::Open, true));

    let closed = c
        .force_breaker("calls", BreakerForce::Closed)
        .await
        .unwrap();
    let b = closed.breaker.expect("breaker");
    assert_eq!((b.state, b.forced), (BreakerStateView::Closed, false));

    let err = c
        .force_breaker("plain", BreakerForce::Open)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Conflict), "{err:?}");
    let err = c
        .force_breaker("nope", BreakerForce::Open)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::QueueNotFound), "{err:?}");
    srv.shutdown().await;
}
