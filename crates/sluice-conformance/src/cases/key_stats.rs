//! The keys listing and stats' `active_keys` (`sluice_core::key_stats`): each key's visible,
//! delayed and in-flight messages, its oldest visible message and its deliveries, in each
//! order and page by page; a key gone once it has nothing left; the same after a restart.

use sluice_core::fair::MessageKey;
use sluice_core::key_stats::{KeyOrder, KeyStats, KeysPage, KeysRequest};

use super::*;

fn keyed(s: &str, k: &str) -> NewMessage {
    text(s).with_key(MessageKey::new(k).unwrap_or_else(|e| panic!("test key {k:?}: {e}")))
}

async fn keys(e: &Env, q: &QueueName, order: KeyOrder, limit: u32) -> KeysPage {
    e.store
        .keys(
            q,
            KeysRequest {
                order,
                limit,
                after: None,
            },
        )
        .await
        .expect("keys")
}

fn names(p: &KeysPage) -> Vec<Option<&str>> {
    p.keys
        .iter()
        .map(|k| k.key.as_ref().map(MessageKey::as_str))
        .collect()
}

/// `(visible, delayed, in_flight)` of the key named `name` (`None`: the implicit key).
fn counts(p: &KeysPage, name: Option<&str>) -> (u64, u64, u64) {
    let k: &KeyStats = p
        .keys
        .iter()
        .find(|k| k.key.as_ref().map(MessageKey::as_str) == name)
        .unwrap_or_else(|| panic!("{name:?} not listed in {p:?}"));
    (k.visible, k.delayed, k.in_flight)
}

/// Each key's numbers, in every order and a page at a time; deliveries counted per key; a
/// key that has nothing left is not listed and not counted active; a restart lists the same.
pub async fn keys_listing_counts_each_key(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("tenants", QueueConfigPatch::default()).await;
    let t0 = e.clock.now();
    e.send(&q, keyed("a1", "acme")).await;
    e.send(&q, keyed("a2", "acme")).await;
    e.send(
        &q,
        delayed("a3", secs(30)).with_key(MessageKey::new("acme").expect("key")),
    )
    .await;
    e.advance(ms(5));
    e.send(&q, text("p1")).await;
    e.send(&q, text("p2")).await;
    e.advance(ms(5));
    e.send(&q, keyed("g1", "globex")).await;
    assert_eq!(
        e.stats(&q).await.active_keys,
        2,
        "the implicit key is not counted"
    );

    let by_backlog = keys(&e, &q, KeyOrder::Backlog, 10).await;
    assert_eq!(names(&by_backlog), [Some("acme"), None, Some("globex")]);
    assert_eq!(counts(&by_backlog, Some("acme")), (2, 1, 0));
    assert_eq!(counts(&by_backlog, None), (2, 0, 0));
    assert_eq!(by_backlog.active_keys, 2);
    assert_eq!(by_backlog.keys[0].oldest_visible_at, Some(t0));
    let by_age = keys(&e, &q, KeyOrder::Oldest, 10).await;
    assert_eq!(names(&by_age), [Some("acme"), None, Some("globex")]);

    // One key a page: each once, in order, and the last page says so.
    let mut walked = Vec::new();
    let mut req = KeysRequest {
        order: KeyOrder::Backlog,
        limit: 1,
        after: None,
    };
    loop {
        let page = e.store.keys(&q, req.clone()).await.expect("page");
        walked.extend(page.keys.iter().map(|k| k.key.clone()));
        match page.next {
            Some(c) => req.after = Some(c.to_string().parse().expect("cursor")),
            None => break,
        }
        assert!(walked.len() <= 3, "pages do not end: {walked:?}");
    }
    assert_eq!(
        walked,
        by_backlog
            .keys
            .iter()
            .map(|k| k.key.clone())
            .collect::<Vec<_>>()
    );

    // Everything visible delivered: in flight per key, and counted as delivered.
    let ds = e.recv(&q, 10).await;
    assert_eq!(ds.len(), 5);
    let flying = keys(&e, &q, KeyOrder::InFlight, 10).await;
    assert_eq!(
        names(&flying),
        [None, Some("acme"), Some("globex")],
        "a tie goes to the implicit key, then by key"
    );
    assert_eq!(counts(&flying, Some("acme")), (0, 1, 2));
    assert_eq!(counts(&flying, Some("globex")), (0, 0, 1));
    assert_eq!(
        flying.keys[1].delivered_1m,
        Some(2),
        "delivered this minute"
    );
    assert_eq!(flying.keys[2].delivered_1m, Some(1));

    // globex acked: gone from the listing and from active_keys.
    for d in ds
        .iter()
        .filter(|d| d.key.as_ref().map(MessageKey::as_str) == Some("globex"))
    {
        e.ack(&q, d.receipt).await.expect("ack");
    }
    let after = keys(&e, &q, KeyOrder::Backlog, 10).await;
    assert_eq!(names(&after), [Some("acme"), None]);
    assert_eq!(after.active_keys, 1);
    assert_eq!(e.stats(&q).await.active_keys, 1);

    let e = e.restart(h).await;
    let again = keys(&e, &q, KeyOrder::Backlog, 10).await;
    assert_eq!(names(&again), [Some("acme"), None]);
    assert_eq!(
        counts(&again, Some("acme")),
        (0, 1, 2),
        "leases outlive the restart"
    );
    assert_eq!(e.stats(&q).await.active_keys, 1);

    // Refusals: an unknown queue, a limit out of range. A cursor of another order starts over.
    let missing = e.store.keys(&qn("nope"), KeysRequest::default()).await;
    assert_code(missing, ErrorCode::QueueNotFound, "keys of a missing queue");
    let zero = KeysRequest {
        limit: 0,
        ..KeysRequest::default()
    };
    assert_code(
        e.store.keys(&q, zero).await,
        ErrorCode::InvalidArgument,
        "limit 0",
    );
    let mixed = KeysRequest {
        order: KeyOrder::Oldest,
        limit: 1,
        after: Some("b.3.-".parse().expect("cursor")),
    };
    let over = e.store.keys(&q, mixed).await.expect("keys");
    assert_eq!(
        names(&over),
        [None],
        "from the first key: nothing visible in either, so the implicit key first"
    );
}
