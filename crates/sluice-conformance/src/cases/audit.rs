//! Records: the audit log of operator actions and dead letters.

use super::*;

/// Operator actions are appended durably, the engine adds its own dead-letter and
/// expiry events, and queries filter by queue and time.
pub async fn audit_log_records_actions_and_dead_letters(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let mut action = sluice_core::audit::AuditEvent::by_broker(e.now(), "queue.purge");
    action.actor = "ops-key".into();
    action.queue = Some("work".into());
    e.store
        .audit_append(vec![action.clone()])
        .await
        .expect("append");
    let id = e.send_text(&q, "poison").await;
    let d = e.recv_one(&q).await;
    e.store
        .reject(&q, d.receipt, fail("cannot parse"))
        .await
        .expect("reject");
    let all = |queue: Option<&str>| sluice_core::audit::AuditQuery {
        queues: queue.map(str::to_string).into_iter().collect(),
        limit: 100,
        ..Default::default()
    };
    let events = e.store.audit_query(all(Some("work"))).await.expect("query");
    assert_eq!(events.first(), Some(&action), "{events:?}");
    let dead = events
        .iter()
        .find(|x| x.action == "message.dead_lettered")
        .expect("dead-letter event");
    assert_eq!(dead.message_id.as_deref(), Some(id.to_string().as_str()));
    assert_eq!(
        dead.details.get("reason").map(String::as_str),
        Some("rejected")
    );
    assert_eq!(
        dead.details.get("last_error").map(String::as_str),
        Some("cannot parse")
    );
    assert!(
        e.store
            .audit_query(all(Some("other")))
            .await
            .expect("query")
            .is_empty()
    );
    let either = sluice_core::audit::AuditQuery {
        queues: vec!["other".into(), "work".into()],
        ..all(None)
    };
    assert_eq!(
        e.store.audit_query(either).await.expect("query"),
        events,
        "any of several queues"
    );
    let earlier = sluice_core::audit::AuditQuery {
        until: Some(Timestamp(e.now().as_millis() - 1)),
        ..all(None)
    };
    assert!(
        e.store
            .audit_query(earlier)
            .await
            .expect("query")
            .is_empty(),
        "until filters by time"
    );
    let up_to_now = sluice_core::audit::AuditQuery {
        until: Some(e.now()),
        ..all(Some("work"))
    };
    assert_eq!(
        e.store.audit_query(up_to_now).await.expect("query"),
        events,
        "until includes its own time"
    );
    let later = sluice_core::audit::AuditQuery {
        since: Some(e.now().plus(secs(1))),
        ..all(None)
    };
    assert!(
        e.store.audit_query(later).await.expect("query").is_empty(),
        "since filters by time"
    );
    let one = sluice_core::audit::AuditQuery {
        limit: 1,
        ..all(None)
    };
    assert_eq!(
        e.store.audit_query(one).await.expect("query").len(),
        1,
        "limit keeps the newest"
    );
    let e = e.restart(h).await;
    let events = e
        .store
        .audit_query(all(None))
        .await
        .expect("query after restart");
    assert!(events.contains(&action), "the audit log survives a restart");
}

/// Queries filter by action (any of several), actor and kind, together with the queue and time
/// conditions and before the limit: the newest matching entries, however many others are
/// newer.
pub async fn audit_log_filters_by_action_actor_and_kind(h: &dyn Harness) {
    use sluice_core::audit::{AuditEvent, AuditKind, AuditQuery};
    let e = env(h).await;
    let q = e
        .queue(
            "work",
            QueueConfigPatch {
                max_receive_count: Some(1),
                ..Default::default()
            },
        )
        .await;
    let by = |actor: &str, action: &str| {
        let mut a = AuditEvent::by_broker(e.now(), action);
        a.actor = actor.into();
        a.queue = Some("work".into());
        a
    };
    let purge = by("ops", "queue.purge");
    let update = by("deploy", "queue.update");
    e.store
        .audit_append(vec![purge.clone(), update.clone()])
        .await
        .expect("append");
    // Broker entries after them, newer than both.
    for n in 0..3 {
        e.send_text(&q, &format!("poison {n}")).await;
        let d = e.recv_one(&q).await;
        e.store
            .reject(&q, d.receipt, fail("cannot parse"))
            .await
            .expect("reject");
    }
    let query = |f: fn(&mut AuditQuery)| {
        let mut q = AuditQuery {
            limit: 2,
            ..Default::default()
        };
        f(&mut q);
        let store = e.store.clone();
        async move { store.audit_query(q).await.expect("query") }
    };
    let actions = |v: Vec<AuditEvent>| v.into_iter().map(|x| x.action).collect::<Vec<_>>();
    assert_eq!(
        query(|q| q.kind = Some(AuditKind::Operator)).await,
        vec![purge.clone(), update.clone()],
        "operator actions, under three newer dead letters"
    );
    assert_eq!(
        query(|q| q.actions = vec!["queue.update".into(), "queue.delete".into()]).await,
        vec![update.clone()]
    );
    assert_eq!(
        query(|q| q.actor = Some("ops".into())).await,
        vec![purge.clone()]
    );
    assert_eq!(
        actions(query(|q| q.kind = Some(AuditKind::Message)).await),
        ["message.dead_lettered", "message.dead_lettered"],
        "the newest two lifecycle entries"
    );
    assert!(
        query(|q| {
            q.kind = Some(AuditKind::Message);
            q.actor = Some("ops".into());
        })
        .await
        .is_empty(),
        "conditions hold together"
    );
    assert!(
        query(|q| {
            q.kind = Some(AuditKind::Operator);
            q.queues = vec!["other".into()];
        })
        .await
        .is_empty()
    );
    let e = e.restart(h).await;
    let after = e
        .store
        .audit_query(AuditQuery {
            actor: Some("deploy".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("query after restart");
    assert_eq!(after, vec![update], "and after a restart");
}
