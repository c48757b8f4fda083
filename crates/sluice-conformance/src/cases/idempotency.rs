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
