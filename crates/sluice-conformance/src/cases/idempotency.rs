//! Idempotency: remembered responses and their limits.

use super::*;

pub(super) fn remembered(
    status: u16,
    body: &str,
    at: Timestamp,
) -> sluice_core::store::IdempotentResponse {
    sluice_core::store::IdempotentResponse {
        fingerprint: [status as u8; 32],
        status,
        body: bytes::Bytes::from(body.to_string()),
        created_at: at,
    }
}

/// A response is remembered under its key, the first writer wins, and it is kept
/// for 24 hours, across a restart.
pub async fn idempotency_first_writer_wins_for_a_day_across_restart(h: &dyn Harness) {
    let e = env(h).await;
    let key = "caller|POST /v1/queues/q/messages|k-1";
    assert_eq!(
        e.store.idempotency_get(key).await.expect("get"),
        None,
        "unknown key"
    );
    let first = remembered(201, r#"{"id":"1"}"#, e.now());
    assert_eq!(
        e.store
            .idempotency_put(key, first.clone())
            .await
            .expect("put"),
        None,
        "first put stores"
    );
    let second = remembered(201, r#"{"id":"2"}"#, e.now());
    assert_eq!(
        e.store
            .idempotency_put(key, second)
            .await
            .expect("second put"),
        Some(first.clone()),
        "a second put under the same key keeps and returns the first response"
    );
    assert_eq!(
        e.store.idempotency_get(key).await.expect("get"),
        Some(first.clone())
    );
    assert_eq!(
        e.store.idempotency_get("other").await.expect("get"),
        None,
        "keys are independent"
    );

    e.advance(Duration::from_secs(23 * 3600));
    let e = e.restart(h).await;
    assert_eq!(
        e.store
            .idempotency_get(key)
            .await
            .expect("get after restart"),
        Some(first),
        "remembered responses survive a restart"
    );
    e.advance(Duration::from_secs(3600));
    assert_eq!(
        e.store.idempotency_get(key).await.expect("get"),
        None,
        "forgotten after 24 h"
    );
    let third = remembered(200, "{}", e.now());
    assert_eq!(
        e.store
            .idempotency_put(key, third.clone())
            .await
            .expect("put"),
        None,
        "the key is free again"
    );
    assert_eq!(
        e.store.idempotency_get(key).await.expect("get"),
        Some(third)
    );
}

/// Oversized keys and responses are refused with `invalid_argument`.
pub async fn idempotency_limits(h: &dyn Harness) {
    let e = env(h).await;
    let big_key = "k".repeat(sluice_core::store::MAX_IDEMPOTENCY_KEY_BYTES + 1);
    assert_code(
        e.store
            .idempotency_put(&big_key, remembered(200, "{}", e.now()))
            .await,
        ErrorCode::InvalidArgument,
        "oversized idempotency key",
    );
    let big_body = "x".repeat(sluice_core::store::MAX_IDEMPOTENT_RESPONSE_BYTES + 1);
    assert_code(
        e.store
            .idempotency_put("k", remembered(200, &big_body, e.now()))
            .await,
        ErrorCode::InvalidArgument,
        "oversized remembered response",
    );
    assert_eq!(
        e.store.idempotency_get("k").await.expect("get"),
        None,
        "nothing stored"
    );
}

fn claim(fingerprint: u8, token: u64, lease: Duration) -> sluice_core::store::IdempotencyClaim {
    sluice_core::store::IdempotencyClaim {
        fingerprint: [fingerprint; 32],
        token,
        lease,
    }
}

/// A claim holds a key for one request: others see it pending (with the holder's
/// fingerprint and lease end) until the holder answers, releases, or its lease runs out;
/// the holder's own token renews it; an answer ends any claim and is what every later
/// claim finds; `get` never sees a claim.
///
/// Kept whole: one key goes through its whole life on one clock (claimed, renewed, released, run
/// out, taken over, answered, forgotten), each step starting from the holder and time the last one
/// left.
pub async fn idempotency_claim_holds_a_key_for_one_request(h: &dyn Harness) {
    use sluice_core::store::ClaimOutcome::{Answered, Claimed, Pending};
    let e = env(h).await;
    let key = "caller|POST /v1/queues/q/messages|k-claim";
    let lease = secs(60);
    let t0 = e.now();
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(1, 1, lease))
            .await
            .expect("claim"),
        Claimed,
        "a free key is claimed"
    );
    let pending = |fingerprint: u8, until: Timestamp| Pending {
        fingerprint: [fingerprint; 32],
        until,
    };
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(1, 2, lease))
            .await
            .expect("claim"),
        pending(1, t0.plus(lease)),
        "another token finds it pending until the lease ends"
    );
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(9, 3, lease))
            .await
            .expect("claim"),
        pending(1, t0.plus(lease)),
        "a request with another fingerprint sees the holder's"
    );
    assert_eq!(
        e.store.idempotency_get(key).await.expect("get"),
        None,
        "a claim is not an answer"
    );

    e.advance(secs(30));
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(1, 1, lease))
            .await
            .expect("renew"),
        Claimed,
        "the holder's token renews its claim"
    );
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(1, 2, lease))
            .await
            .expect("claim"),
        pending(1, e.now().plus(lease)),
        "renewed from now"
    );
    assert!(
        !e.store.idempotency_release(key, 2).await.expect("release"),
        "another token cannot release it"
    );
    assert!(
        e.store.idempotency_release(key, 1).await.expect("release"),
        "the holder releases it"
    );
    assert!(
        !e.store.idempotency_release(key, 1).await.expect("release"),
        "released once"
    );
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(1, 2, lease))
            .await
            .expect("claim"),
        Claimed,
        "a released key is free"
    );

    e.advance(lease - ms(1));
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(1, 3, lease))
            .await
            .expect("claim"),
        pending(1, e.now().plus(ms(1))),
        "held until the lease ends"
    );
    e.advance(ms(1));
    assert!(
        !e.store.idempotency_release(key, 2).await.expect("release"),
        "a claim that ran out is not released: it is free already"
    );
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(7, 3, lease))
            .await
            .expect("take over"),
        Claimed,
        "a claim whose lease ran out is taken over, by any request"
    );
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(1, 2, lease))
            .await
            .expect("claim"),
        pending(7, e.now().plus(lease)),
        "the old holder lost it"
    );

    let answer = remembered(201, r#"{"id":"1"}"#, e.now());
    assert_eq!(
        e.store
            .idempotency_put(key, answer.clone())
            .await
            .expect("answer"),
        None,
        "an answer is stored over a claim"
    );
    for token in [3, 4] {
        assert_eq!(
            e.store
                .idempotency_claim(key, claim(1, token, lease))
                .await
                .expect("claim"),
            Answered(answer.clone()),
            "an answered key gives its answer, to its holder's token too"
        );
    }
    assert!(
        !e.store.idempotency_release(key, 3).await.expect("release"),
        "an answer is not released"
    );
    assert_eq!(
        e.store.idempotency_get(key).await.expect("get"),
        Some(answer.clone())
    );

    // A put by a request that holds no claim (or lost it) also ends a claim.
    let other = "caller|POST /v1/queues/q/messages|k-other";
    assert_eq!(
        e.store
            .idempotency_claim(other, claim(1, 5, lease))
            .await
            .expect("claim"),
        Claimed
    );
    let late = remembered(200, "{}", e.now());
    assert_eq!(
        e.store
            .idempotency_put(other, late.clone())
            .await
            .expect("put"),
        None
    );
    assert!(
        !e.store
            .idempotency_release(other, 5)
            .await
            .expect("release")
    );
    assert_eq!(
        e.store
            .idempotency_claim(other, claim(1, 6, lease))
            .await
            .expect("claim"),
        Answered(late)
    );

    e.advance(sluice_core::store::IDEMPOTENCY_TTL);
    assert_eq!(
        e.store
            .idempotency_claim(key, claim(2, 8, lease))
            .await
            .expect("claim"),
        Claimed,
        "a forgotten answer leaves the key free"
    );
    assert_eq!(e.store.idempotency_get(key).await.expect("get"), None);
    assert_eq!(
        e.store
            .idempotency_put(key, answer.clone())
            .await
            .expect("answer"),
        None
    );

    for bad in [
        ms(0),
        sluice_core::store::MAX_IDEMPOTENCY_CLAIM_LEASE + ms(1),
    ] {
        assert_code(
            e.store.idempotency_claim("k", claim(1, 1, bad)).await,
            ErrorCode::InvalidArgument,
            "a lease out of range",
        );
    }
    let big_key = "k".repeat(sluice_core::store::MAX_IDEMPOTENCY_KEY_BYTES + 1);
    assert_code(
        e.store
            .idempotency_claim(&big_key, claim(1, 1, lease))
            .await,
        ErrorCode::InvalidArgument,
        "an oversized key",
    );
    assert_code(
        e.store.idempotency_release("", 1).await,
        ErrorCode::InvalidArgument,
        "an empty key",
    );
}

/// Of many requests claiming one free key at once, exactly one holds it; the others see
/// its claim pending, then its answer.
pub async fn idempotency_concurrent_claims_have_one_winner(h: &dyn Harness) {
    use sluice_core::store::ClaimOutcome::{Answered, Claimed, Pending};
    let e = env(h).await;
    for round in 0..5 {
        let key = format!("caller|POST /v1/queues/q/messages|race-{round}");
        let tries = (1..=16u64).map(|token| {
            let store = e.store.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let out = store
                    .idempotency_claim(&key, claim(1, token, secs(60)))
                    .await
                    .expect("claim");
                (token, out)
            })
        });
        let mut winners = Vec::new();
        for t in tries {
            let (token, out) = t.await.expect("task");
            match out {
                Claimed => winners.push(token),
                Pending { fingerprint, .. } => assert_eq!(fingerprint, [1; 32]),
                Answered(a) => panic!("nothing was answered yet, got {a:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one claim wins");
        let answer = remembered(201, &format!("{{\"round\":{round}}}"), e.now());
        assert_eq!(
            e.store
                .idempotency_put(&key, answer.clone())
                .await
                .expect("answer"),
            None
        );
        for token in 1..=16u64 {
            assert_eq!(
                e.store
                    .idempotency_claim(&key, claim(1, token, secs(60)))
                    .await
                    .expect("claim"),
                Answered(answer.clone())
            );
        }
    }
}
