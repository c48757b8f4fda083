//! Schedules (`Schedules`): the store keeps each schedule and applies each step atomically.
//! When a schedule fires is the broker's scheduler's business; these cases drive the steps
//! by hand.

use super::*;
use sluice_core::schedule::{CatchUp, Schedule, ScheduleName, ScheduleSpec, TriggerSpec};
use sluice_core::store::{ScheduleStep, StepOutcome};
use sluice_core::time::rfc3339;

fn sn(name: &str) -> ScheduleName {
    ScheduleName::new(name).unwrap_or_else(|e| panic!("schedule name {name:?} invalid: {e}"))
}

fn every(queue: &QueueName, every_ms: u64) -> ScheduleSpec {
    ScheduleSpec {
        trigger: TriggerSpec::Every { every_ms },
        queue: queue.clone(),
        body: Body::json(r#"{"report":"daily"}"#),
        attributes: attrs(&[("tenant", "t1")]),
        key: None,
        priority: None,
        catch_up: CatchUp::None,
        paused: false,
    }
}

fn fire(expected: Option<Timestamp>, through: Timestamp) -> ScheduleStep {
    ScheduleStep {
        expected,
        through,
        fire: true,
        missed: 0,
    }
}

async fn put(e: &Env, name: &str, spec: ScheduleSpec) -> (Schedule, bool) {
    e.store
        .put_schedule(&sn(name), spec.clone())
        .await
        .unwrap_or_else(|err| panic!("put_schedule({name}, {spec:?}) failed: {err:?}"))
}

async fn get(e: &Env, name: &str) -> Schedule {
    e.store
        .get_schedule(&sn(name))
        .await
        .unwrap_or_else(|err| panic!("get_schedule({name}) failed: {err:?}"))
}

async fn step(e: &Env, name: &str, s: ScheduleStep) -> StepOutcome {
    e.store
        .step_schedule(&sn(name), s)
        .await
        .unwrap_or_else(|err| panic!("step_schedule({name}, {s:?}) failed: {err:?}"))
}

async fn depth(e: &Env, q: &QueueName) -> u64 {
    let s = e.stats(q).await;
    s.visible + s.delayed + s.in_flight
}

/// Put creates (anchored at now, not fired), get and list answer it (list by name), a second
/// put replaces the spec and says so, delete removes it; unknown names are `not_found`.
pub async fn schedule_put_get_list_delete(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    let t0 = e.now();
    let (s, created) = put(&e, "nightly", every(&q, 60_000)).await;
    assert!(created, "the first put creates");
    assert_eq!(s.name, sn("nightly"));
    assert_eq!(s.spec, every(&q, 60_000));
    assert_eq!((s.created_at, s.updated_at, s.anchor), (t0, t0, t0));
    assert_eq!((s.last_fired, s.fired, s.missed), (None, 0, 0));
    assert_eq!(get(&e, "nightly").await, s);
    put(&e, "a-first", every(&q, 5_000)).await;
    let names: Vec<String> = e
        .store
        .list_schedules()
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.name.to_string())
        .collect();
    assert_eq!(names, vec!["a-first", "nightly"], "listed by name");

    e.advance(secs(5));
    let mut paused = every(&q, 60_000);
    paused.paused = true;
    let (s2, created) = put(&e, "nightly", paused.clone()).await;
    assert!(!created, "a second put replaces");
    assert_eq!(s2.spec, paused);
    assert_eq!((s2.created_at, s2.updated_at), (t0, e.now()));

    e.store
        .delete_schedule(&sn("nightly"))
        .await
        .expect("delete");
    assert_code(
        e.store.get_schedule(&sn("nightly")).await,
        ErrorCode::NotFound,
        "get of a deleted schedule",
    );
    assert_code(
        e.store.delete_schedule(&sn("nightly")).await,
        ErrorCode::NotFound,
        "delete of a deleted schedule",
    );
    assert_code(
        e.store
            .step_schedule(&sn("nightly"), fire(None, e.now()))
            .await,
        ErrorCode::NotFound,
        "step of a deleted schedule",
    );
    assert_eq!(e.store.list_schedules().await.expect("list").len(), 1);
}

/// A put that keeps the trigger keeps the schedule's progress and counts; one that changes
/// it re-anchors the schedule at now and forgets `last_fired`, keeping the counts.
pub async fn schedule_changed_trigger_reanchors(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    let (s, _) = put(&e, "tick", every(&q, 1_000)).await;
    e.advance(secs(1));
    let t1 = e.now();
    step(&e, "tick", fire(None, t1)).await;
    e.advance(secs(1));
    let mut other_body = every(&q, 1_000);
    other_body.body = Body::text("changed");
    other_body.catch_up = CatchUp::All;
    let (kept, _) = put(&e, "tick", other_body).await;
    assert_eq!(
        (kept.anchor, kept.last_fired, kept.fired),
        (s.anchor, Some(t1), 1),
        "same trigger: progress kept"
    );
    e.advance(secs(1));
    let (moved, _) = put(&e, "tick", every(&q, 2_000)).await;
    assert_eq!(
        (
            moved.anchor,
            moved.last_fired,
            moved.fired,
            moved.created_at
        ),
        (e.now(), None, 1, s.created_at),
        "new trigger: re-anchored at now, counts kept"
    );
    assert_eq!(get(&e, "tick").await, moved);
}

/// A schedule needs its queue; a bad spec is refused before it reaches the engine.
pub async fn schedule_bad_specs_and_unknown_queue_are_refused(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    assert_code(
        e.store
            .put_schedule(&sn("s"), every(&qn("nowhere"), 60_000))
            .await,
        ErrorCode::QueueNotFound,
        "a schedule for a missing queue",
    );
    let mut bad = Vec::new();
    bad.push(every(&q, 10));
    let mut cron = every(&q, 0);
    cron.trigger = TriggerSpec::Cron {
        expr: "not a cron".into(),
        timezone: "UTC".into(),
    };
    bad.push(cron.clone());
    cron.trigger = TriggerSpec::Cron {
        expr: "*/5 * * * *".into(),
        timezone: "Mars/Olympus".into(),
    };
    bad.push(cron);
    let mut reserved = every(&q, 60_000);
    reserved.attributes = attrs(&[("schedule", "mine")]);
    bad.push(reserved);
    for spec in bad {
        assert_code(
            e.store.put_schedule(&sn("s"), spec.clone()).await,
            ErrorCode::InvalidArgument,
            &format!("put_schedule({spec:?})"),
        );
    }
    let mut good = every(&q, 60_000);
    good.trigger = TriggerSpec::Cron {
        expr: "*/5 * * * *".into(),
        timezone: "Europe/Berlin".into(),
    };
    put(&e, "s", good).await;
    let t = e.now();
    assert_code(
        e.store.step_schedule(&sn("s"), fire(Some(t), t)).await,
        ErrorCode::InvalidArgument,
        "a step that does not move forward",
    );
    assert!(e.store.list_schedules().await.expect("list").len() == 1);
}

/// A fire step enqueues exactly `Schedule::message` of the firing (body, attributes with
/// `schedule` and `scheduled_for`, visible at once) and moves `last_fired`, `fired` and
/// `missed` in the same step.
pub async fn schedule_fire_step_enqueues_the_firing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    let (s, _) = put(&e, "nightly", every(&q, 60_000)).await;
    e.advance(secs(60));
    let at = e.now();
    let out = step(
        &e,
        "nightly",
        ScheduleStep {
            missed: 2,
            ..fire(None, at)
        },
    )
    .await;
    let StepOutcome::Fired { id } = out else {
        panic!("a fire step answers Fired, got {out:?}");
    };
    let after = get(&e, "nightly").await;
    assert_eq!(
        (after.last_fired, after.fired, after.missed),
        (Some(at), 1, 2)
    );
    assert_eq!(
        after.updated_at, s.updated_at,
        "a step is not a change of spec"
    );
    let expected = s.message(at, false);
    let m = e.store.get_message(id).await.expect("the firing's message");
    assert_eq!(m.queue, q);
    assert_eq!(m.state, MessageState::Visible, "visible at once");
    assert_eq!(m.body, Some(expected.body.clone()));
    assert_eq!(m.attributes, expected.attributes);
    assert_eq!(
        m.attributes.get("schedule").map(String::as_str),
        Some("nightly")
    );
    assert_eq!(m.attributes.get("scheduled_for"), Some(&rfc3339(at)));
    assert_eq!(m.attributes.get("tenant").map(String::as_str), Some("t1"));
    let ds = e.recv(&q, 10).await;
    assert_eq!(ids_of(&ds), [id].into(), "a receiver gets the firing");
    assert_eq!(e.stats(&q).await.totals.sent, 1, "counted as sent");
}

/// Two nodes step the same schedule from the same `last_fired`: one applies, the other is
/// `Stale` and enqueues nothing; a step computed from an outdated `last_fired` is stale too.
pub async fn schedule_stale_step_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    put(&e, "tick", every(&q, 1_000)).await;
    e.advance(secs(1));
    let t1 = e.now();
    let tick = sn("tick");
    let (a, b) = tokio::join!(
        e.store.step_schedule(&tick, fire(None, t1)),
        e.store.step_schedule(&tick, fire(None, t1)),
    );
    let mut outcomes = [a.expect("step a"), b.expect("step b")];
    outcomes.sort_by_key(|o| matches!(o, StepOutcome::Stale));
    assert!(
        matches!(outcomes[0], StepOutcome::Fired { .. }) && outcomes[1] == StepOutcome::Stale,
        "one step applies, the other is stale: {outcomes:?}"
    );
    assert_eq!(depth(&e, &q).await, 1, "one message");
    e.advance(secs(1));
    assert_eq!(
        step(&e, "tick", fire(None, e.now())).await,
        StepOutcome::Stale,
        "computed before the first firing"
    );
    let s = get(&e, "tick").await;
    assert_eq!((s.last_fired, s.fired, s.missed), (Some(t1), 1, 0));
    assert_eq!(depth(&e, &q).await, 1);
}

/// A skip step moves `last_fired` and counts what it skipped, enqueuing nothing.
pub async fn schedule_skip_step_counts_missed(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    put(&e, "tick", every(&q, 1_000)).await;
    e.advance(secs(30));
    let at = e.now();
    let out = step(
        &e,
        "tick",
        ScheduleStep {
            expected: None,
            through: at,
            fire: false,
            missed: 30,
        },
    )
    .await;
    assert_eq!(out, StepOutcome::Skipped);
    let s = get(&e, "tick").await;
    assert_eq!((s.last_fired, s.fired, s.missed), (Some(at), 0, 30));
    assert_eq!(depth(&e, &q).await, 0);
}

/// A firing into a queue deleted since is counted as missed (with what the step skipped)
/// and the schedule moves on; it comes back once the queue exists again.
pub async fn schedule_step_for_a_deleted_queue_is_missed(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    put(&e, "tick", every(&q, 1_000)).await;
    e.store.delete_queue(&q).await.expect("delete queue");
    e.advance(secs(3));
    let t1 = e.now();
    let out = step(
        &e,
        "tick",
        ScheduleStep {
            missed: 2,
            ..fire(None, t1)
        },
    )
    .await;
    assert_eq!(out, StepOutcome::QueueMissing);
    let s = get(&e, "tick").await;
    assert_eq!((s.last_fired, s.fired, s.missed), (Some(t1), 0, 3));
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    e.advance(secs(1));
    let out = step(&e, "tick", fire(Some(t1), e.now())).await;
    assert!(matches!(out, StepOutcome::Fired { .. }), "got {out:?}");
    assert_eq!(depth(&e, &q).await, 1);
}

/// A full queue (`max_depth`) refuses the step with `queue_full` and changes nothing; once
/// there is room, the same step applies.
pub async fn schedule_full_queue_refuses_the_step(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "reports",
            QueueConfigPatch {
                max_depth: Some(Some(1)),
                ..QueueConfigPatch::default()
            },
        )
        .await;
    put(&e, "tick", every(&q, 1_000)).await;
    e.send_text(&q, "filler").await;
    e.advance(secs(1));
    let t1 = e.now();
    assert_code(
        e.store.step_schedule(&sn("tick"), fire(None, t1)).await,
        ErrorCode::QueueFull,
        "a firing into a full queue",
    );
    let s = get(&e, "tick").await;
    assert_eq!((s.last_fired, s.fired, s.missed), (None, 0, 0));
    assert_eq!(depth(&e, &q).await, 1);
    e.store.purge(&q).await.expect("purge");
    assert!(matches!(
        step(&e, "tick", fire(None, t1)).await,
        StepOutcome::Fired { .. }
    ));
    assert_eq!(depth(&e, &q).await, 1);
}

/// A firing whose message the queue's dedup window already holds (its dedup id was sent
/// before) counts as fired and answers the first message; a step worked out before a pause,
/// or for a trigger replaced since, is stale and enqueues nothing.
pub async fn schedule_duplicate_firing_answers_the_first(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    put(&e, "tick", every(&q, 1_000)).await;
    e.advance(secs(1));
    let t1 = e.now();
    let first = e
        .send(
            &q,
            NewMessage {
                dedup_id: Some(format!("schedule:tick:at:{}", t1.as_millis())),
                ..text("sent before")
            },
        )
        .await
        .id;
    assert_eq!(
        step(&e, "tick", fire(None, t1)).await,
        StepOutcome::Fired { id: first },
        "the first message's id"
    );
    let s = get(&e, "tick").await;
    assert_eq!((s.last_fired, s.fired), (Some(t1), 1));
    assert_eq!(depth(&e, &q).await, 1, "enqueued once");

    // Paused after the scheduler read it: the step it worked out does nothing.
    e.advance(secs(1));
    let t2 = e.now();
    let mut paused = every(&q, 1_000);
    paused.paused = true;
    put(&e, "tick", paused).await;
    assert_eq!(
        step(&e, "tick", fire(Some(t1), t2)).await,
        StepOutcome::Stale
    );
    // Replaced by another trigger: a time of the old one is at or before the new anchor.
    put(&e, "tick", every(&q, 5_000)).await;
    assert_eq!(step(&e, "tick", fire(None, t2)).await, StepOutcome::Stale);
    assert_eq!(depth(&e, &q).await, 1, "nothing more enqueued");
}

/// Schedules survive a restart with every field, and so does a firing with its progress;
/// stepping goes on where it stopped, and a deletion survives too.
pub async fn schedule_survives_restart(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    put(&e, "gone", every(&q, 1_000)).await;
    put(&e, "tick", every(&q, 1_000)).await;
    e.advance(secs(2));
    let t1 = e.now();
    let StepOutcome::Fired { id } = step(
        &e,
        "tick",
        ScheduleStep {
            missed: 1,
            ..fire(None, t1)
        },
    )
    .await
    else {
        panic!("fired");
    };
    e.store.delete_schedule(&sn("gone")).await.expect("delete");
    let before = e.store.list_schedules().await.expect("list");
    let e = e.restart(h).await;
    assert_eq!(e.store.list_schedules().await.expect("list"), before);
    let m = e.store.get_message(id).await.expect("the firing survives");
    assert_eq!(m.attributes.get("scheduled_for"), Some(&rfc3339(t1)));
    assert_eq!(
        step(&e, "tick", fire(None, t1)).await,
        StepOutcome::Stale,
        "the firing's progress survived with it"
    );
    e.advance(secs(1));
    let t2 = e.now();
    assert!(matches!(
        step(&e, "tick", fire(Some(t1), t2)).await,
        StepOutcome::Fired { .. }
    ));
    let e = e.restart(h).await;
    let s = get(&e, "tick").await;
    assert_eq!((s.last_fired, s.fired, s.missed), (Some(t2), 2, 1));
    assert_eq!(depth(&e, &q).await, 2);
}

/// A schedule's `key` and `priority` are those of every message it enqueues: the message
/// shows them, before and after a restart, and a firing at priority 9 is delivered ahead of an
/// older message at the queue's default; a priority out of range is refused at put.
pub async fn schedule_firings_carry_key_and_priority(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("reports", QueueConfigPatch::default()).await;
    let older = e.send_text(&q, "older").await;
    let acme = sluice_core::MessageKey::new("acme").expect("a valid key");
    let spec = ScheduleSpec {
        key: Some(acme.clone()),
        priority: Some(9),
        ..every(&q, 60_000)
    };
    let (s, _) = put(&e, "tenant-sync", spec.clone()).await;
    assert_eq!(s.spec, spec);
    e.advance(secs(60));
    let StepOutcome::Fired { id } = step(&e, "tenant-sync", fire(None, e.now())).await else {
        panic!("a fire step answers Fired");
    };
    let m = e.store.get_message(id).await.expect("the firing's message");
    assert_eq!((m.key.as_ref(), m.priority), (Some(&acme), Some(9)));

    let e = e.restart(h).await;
    let m = e
        .store
        .get_message(id)
        .await
        .expect("the firing after a restart");
    assert_eq!(
        (m.key.as_ref(), m.priority),
        (Some(&acme), Some(9)),
        "after a restart"
    );
    let ds = e.recv(&q, 1).await;
    assert_eq!(
        ds[0].id, id,
        "priority 9 goes before the older message at 4"
    );
    assert_eq!((ds[0].key.as_ref(), ds[0].priority), (Some(&acme), 9));
    assert_eq!(e.recv(&q, 1).await[0].id, older);

    let bad = ScheduleSpec {
        priority: Some(10),
        ..every(&q, 60_000)
    };
    assert_code(
        e.store.put_schedule(&sn("too-urgent"), bad).await,
        ErrorCode::InvalidArgument,
        "a priority above 9",
    );
}
