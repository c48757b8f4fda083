//! Keys and priorities (`sluice_core::fair`): higher priority first, round-robin across keys
//! weighted by `key_weights`, by visible time within a key; both carried by deliveries and
//! views, through retries, dead-lettering, redrives and restarts.

use std::collections::BTreeMap;

use sluice_core::fair::MessageKey;

use super::*;

fn key(k: &str) -> MessageKey {
    MessageKey::new(k).unwrap_or_else(|e| panic!("test key {k:?} invalid: {e}"))
}

/// A text message under key `k`.
fn keyed(s: &str, k: &str) -> NewMessage {
    text(s).with_key(key(k))
}

/// Receives one message at a time until the queue has nothing visible (at most `max`),
/// returning them in the order delivered.
async fn drain_one_by_one(e: &Env, q: &QueueName, max: usize) -> Vec<Delivery> {
    let mut out = Vec::new();
    while out.len() < max {
        let mut ds = e.recv(q, 1).await;
        match ds.pop() {
            Some(d) => out.push(d),
            None => break,
        }
    }
    out
}

fn bodies(ds: &[Delivery]) -> Vec<String> {
    ds.iter()
        .map(|d| String::from_utf8_lossy(&d.body.bytes).into_owned())
        .collect()
}

/// A message of a higher priority goes before any of a lower one, whenever it was sent;
/// a message without one takes the queue's `default_priority`, as the queue has it when the
/// message is delivered. Deliveries carry the priority they went at; views the one sent.
pub async fn priority_orders_deliveries(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("urgent", QueueConfigPatch::default()).await;
    let out = e
        .send_batch(
            &q,
            vec![
                text("p0").with_priority(0),
                text("default"),
                text("p9").with_priority(9),
                text("p7").with_priority(7),
                text("p9-later").with_priority(9),
            ],
        )
        .await;
    let ds = drain_one_by_one(&e, &q, 10).await;
    assert_eq!(
        bodies(&ds),
        ["p9", "p9-later", "p7", "default", "p0"],
        "higher priority first, by visible time within one"
    );
    let prios: Vec<u8> = ds.iter().map(|d| d.priority).collect();
    assert_eq!(prios, [9, 9, 7, 4, 0], "deliveries carry their priority");
    assert_eq!(e.get(out[2].id).await.priority, Some(9));
    assert_eq!(e.get(out[1].id).await.priority, None, "none named");

    // The default re-ranks the messages that named none, waiting ones included.
    let q2 = e.queue("urgent2", QueueConfigPatch::default()).await;
    e.send_batch(
        &q2,
        vec![
            text("plain"),
            text("p6").with_priority(6),
            text("p3").with_priority(3),
        ],
    )
    .await;
    let raise = QueueConfigPatch {
        default_priority: Some(8),
        ..QueueConfigPatch::default()
    };
    e.store
        .put_queue(&q2, &raise)
        .await
        .expect("raise the default");
    let ds = drain_one_by_one(&e, &q2, 10).await;
    assert_eq!(bodies(&ds), ["plain", "p6", "p3"]);
    assert_eq!(ds[0].priority, 8);
}

/// One key's backlog does not hold the others back: with K keys active, a quiet key's
/// message waits for about K deliveries, not for the backlog. Messages without a key share
/// one implicit key.
pub async fn a_quiet_key_is_not_starved_by_a_backlog(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("tenants", QueueConfigPatch::default()).await;
    let noisy: Vec<NewMessage> = (0..200).map(|i| keyed(&format!("n{i}"), "noisy")).collect();
    e.send_batch(&q, noisy).await;
    for d in drain_one_by_one(&e, &q, 3).await {
        assert_eq!(d.key, Some(key("noisy")));
    }
    e.advance(ms(10));
    let quiet = ["q1", "q2", "q3", "q4"];
    for k in quiet {
        e.send(&q, keyed(&format!("from-{k}"), k)).await;
    }
    e.send(&q, text("unkeyed")).await;
    // Six keys active (noisy, four quiet ones, the implicit key): each quiet message within
    // about one round of them.
    let next = drain_one_by_one(&e, &q, 7).await;
    let names = bodies(&next);
    for k in quiet {
        assert!(
            names.contains(&format!("from-{k}")),
            "{k}'s message waited behind the backlog: next deliveries {names:?}"
        );
    }
    assert!(names.contains(&"unkeyed".to_owned()), "{names:?}");
    let quiet_key = next.iter().find(|d| d.key == Some(key("q1"))).expect("q1");
    assert_eq!(
        e.get(quiet_key.id).await.key,
        Some(key("q1")),
        "views carry the key"
    );
    // The backlog goes on, in send order.
    let rest = drain_one_by_one(&e, &q, 300).await;
    let noisy_rest: Vec<String> = bodies(&rest);
    assert_eq!(noisy_rest.len() + next.len() + 3, 205);
    let numbers: Vec<u32> = bodies(&next)
        .iter()
        .chain(&noisy_rest)
        .filter_map(|b| b.strip_prefix('n').and_then(|n| n.parse().ok()))
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "by time within a key"
    );
}

/// `key_weights` shares deliveries in proportion while both keys have messages waiting;
/// keys no pattern matches weigh 1.
pub async fn key_weights_share_deliveries(h: &dyn Harness) {
    let e = env(h).await;
    let weights = QueueConfigPatch {
        key_weights: Some(BTreeMap::from([("gold-*".to_owned(), 3)])),
        ..QueueConfigPatch::default()
    };
    let q = e.queue("weighted", weights).await;
    let mut batch = Vec::new();
    for i in 0..40 {
        batch.push(keyed(&format!("g{i}"), "gold-1"));
        batch.push(keyed(&format!("b{i}"), "basic"));
    }
    e.send_batch(&q, batch).await;
    let first = drain_one_by_one(&e, &q, 40).await;
    let gold = first
        .iter()
        .filter(|d| d.key == Some(key("gold-1")))
        .count();
    assert!(
        (29..=31).contains(&gold),
        "gold-1 weighs 3, basic 1: {gold} of the first 40 were gold-1"
    );
    assert_eq!(e.stats(&q).await.visible, 40);
}

/// A retried message goes to the back of its key's line; a dead-lettered, redriven or
/// restarted message keeps its key and priority.
pub async fn keys_and_priorities_outlive_retries_dead_letters_and_restarts(h: &dyn Harness) {
    let e = env(h).await;
    let patch = QueueConfigPatch {
        max_receive_count: Some(2),
        ..QueueConfigPatch::default()
    };
    let q = e.queue("kept", patch).await;
    let dlq = qn("kept.dlq");
    let a = e.send(&q, keyed("a1", "acme").with_priority(6)).await.id;
    e.send(&q, keyed("a2", "acme").with_priority(6)).await;
    e.send(&q, text("low").with_priority(1)).await;
    let d = e.recv_one(&q).await;
    assert_eq!((d.id, d.priority), (a, 6));
    e.advance(ms(5));
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some("boom"))
        .await
        .expect("nack");
    // a1 is visible again after a2 became visible: a2 first within the key.
    let d = e.recv_one(&q).await;
    assert_eq!(String::from_utf8_lossy(&d.body.bytes), "a2");
    let e = e.restart(h).await;
    let d = e.recv_one(&q).await;
    assert_eq!(d.id, a, "after a restart, priority 6 still before 1");
    assert_eq!(d.key, Some(key("acme")));
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some("boom again"))
        .await
        .expect("nack");
    let dead = e.get(a).await;
    assert_eq!(dead.queue, dlq, "dead-lettered on its last attempt");
    assert_eq!((dead.key, dead.priority), (Some(key("acme")), Some(6)));
    let job = e
        .store
        .create_redrive(super::redrive::redrive_spec(&dlq))
        .await
        .expect("create");
    let step = e.store.redrive_step(job.id, 10).await.expect("step");
    assert_eq!(step.moved_now, 1);
    let back = e.get(a).await;
    assert_eq!(back.queue, q);
    assert_eq!((back.key, back.priority), (Some(key("acme")), Some(6)));
    let d = e.recv_one(&q).await;
    assert_eq!(
        (d.id, d.priority),
        (a, 6),
        "redriven, it goes before priority 1"
    );
}

/// `key_limits` caps each key's deliveries in flight (overrides by pattern); a key at its
/// limit waits without holding the others back, an ack or a lease that runs out gives its
/// room back, and a restart counts the leases it finds.
pub async fn key_limits_hold_a_key_not_the_others(h: &dyn Harness) {
    let e = env(h).await;
    let limits = sluice_core::fair::KeyLimits {
        max_in_flight: Some(2),
        rate_limit: None,
        overrides: BTreeMap::from([(
            "vip-*".to_owned(),
            sluice_core::fair::KeyLimit {
                max_in_flight: Some(4),
                rate_limit: None,
            },
        )]),
    };
    let q = e
        .queue(
            "quota",
            QueueConfigPatch {
                key_limits: Some(Some(limits)),
                visibility_timeout: Some(secs(60)),
                ..QueueConfigPatch::default()
            },
        )
        .await;
    let mut batch = Vec::new();
    for i in 0..10 {
        batch.push(keyed(&format!("a{i}"), "acme"));
        batch.push(keyed(&format!("v{i}"), "vip-1").with_priority(9));
    }
    batch.push(text("plain-1"));
    batch.push(text("plain-2"));
    batch.push(text("plain-3"));
    e.send_batch(&q, batch).await;
    let first = e.recv(&q, 50).await;
    let count = |ds: &[Delivery], k: Option<&str>| {
        ds.iter()
            .filter(|d| d.key.as_ref().map(MessageKey::as_str) == k)
            .count()
    };
    assert_eq!(
        (
            count(&first, Some("acme")),
            count(&first, Some("vip-1")),
            count(&first, None)
        ),
        (2, 4, 2),
        "each key up to its limit, the urgent vip key held at 4 without blocking the rest"
    );
    e.recv_none(&q, "every key at its limit").await;
    let acme = first
        .iter()
        .find(|d| d.key == Some(key("acme")))
        .expect("an acme delivery");
    e.ack(&q, acme.receipt).await.expect("ack");
    let next = e.recv(&q, 50).await;
    assert_eq!(
        (next.len(), count(&next, Some("acme"))),
        (1, 1),
        "an ack gives its key one place back"
    );
    let e = e.restart(h).await;
    e.recv_none(&q, "a restart counts the leases it finds")
        .await;
    // Past the leases and the retry backoff after them.
    e.advance(secs(120));
    let after = e.recv(&q, 50).await;
    assert_eq!(
        (
            count(&after, Some("acme")),
            count(&after, Some("vip-1")),
            count(&after, None)
        ),
        (2, 4, 2),
        "leases that ran out give their places back"
    );
    // Lifting the limit lets the rest go.
    e.store
        .put_queue(
            &q,
            &QueueConfigPatch {
                key_limits: Some(None),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .expect("lift");
    assert_eq!(
        e.recv(&q, 50).await.len(),
        22 - 8,
        "22 left after the ack, 8 in flight: the other 14 go"
    );
}

/// A key at its limit whose long backlog ranks ahead of another key's message does not hide
/// it: the other key's message is delivered, once, and nothing more of the held key.
pub async fn a_held_keys_backlog_does_not_hide_another_key(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "held",
            QueueConfigPatch {
                key_limits: Some(Some(sluice_core::fair::KeyLimits {
                    max_in_flight: Some(1),
                    rate_limit: None,
                    overrides: BTreeMap::new(),
                })),
                // The noisy key's messages go 2 passes apart, the quiet key's 2,520: the quiet
                // key's second message ranks behind about 1,260 of the noisy key's.
                key_weights: Some(BTreeMap::from([("noisy".to_owned(), 1000)])),
                visibility_timeout: Some(secs(600)),
                ..QueueConfigPatch::default()
            },
        )
        .await;
    for part in 0..3 {
        e.send_batch(
            &q,
            (0..500)
                .map(|i| keyed(&format!("n{}", part * 500 + i), "noisy"))
                .collect(),
        )
        .await;
    }
    e.send_batch(&q, vec![keyed("q1", "quiet"), keyed("q2", "quiet")])
        .await;
    let first = e.recv(&q, 10).await;
    let mut got = bodies(&first);
    got.sort();
    assert_eq!(got, ["n0", "q1"], "each key up to its limit of one");
    let q1 = first
        .iter()
        .find(|d| d.key == Some(key("quiet")))
        .expect("the quiet key's delivery");
    e.ack(&q, q1.receipt).await.expect("ack");
    let next = e.recv(&q, 10).await;
    assert_eq!(
        bodies(&next),
        ["q2"],
        "the quiet key's second message, behind the held key's backlog"
    );
    e.recv_none(&q, "both keys at their limit").await;
}

/// Keys, priorities and the settings that rank them are checked: a key of 1 – 128
/// characters without control characters, a priority and a default of 0 – 9, weights of
/// 1 – 1000.
pub async fn keys_and_priorities_are_checked(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("checked", QueueConfigPatch::default()).await;
    assert_code(
        e.store
            .send(&q, vec![keyed("fine", "k"), text("x").with_priority(10)])
            .await,
        ErrorCode::InvalidArgument,
        "priority 10",
    );
    assert!(MessageKey::new("k".repeat(129)).is_err());
    assert!(MessageKey::new("a\u{7}").is_err());
    for bad in [
        QueueConfigPatch {
            default_priority: Some(10),
            ..QueueConfigPatch::default()
        },
        QueueConfigPatch {
            key_weights: Some(BTreeMap::from([("k".to_owned(), 0)])),
            ..QueueConfigPatch::default()
        },
        QueueConfigPatch {
            key_weights: Some(BTreeMap::from([("k".to_owned(), 1001)])),
            ..QueueConfigPatch::default()
        },
    ] {
        assert_code(
            e.store.put_queue(&q, &bad).await,
            ErrorCode::InvalidArgument,
            "bad ranking setting",
        );
    }
    assert_eq!(e.stats(&q).await.visible, 0, "nothing stored");
}
