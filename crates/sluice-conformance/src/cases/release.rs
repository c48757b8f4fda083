//! Release: handing a delivery back without counting the attempt.

use super::*;

/// A released delivery is visible again at once and its attempt does not count: even on
/// the last attempt it is not dead-lettered.
pub async fn release_hands_back_without_counting(h: &dyn Harness) {
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
    let id = e.send_text(&q, "t").await;
    let d = e.recv_one(&q).await;
    e.store.release(&q, d.receipt).await.expect("release");
    let m = e.get(id).await;
    assert_eq!(
        (m.state, m.receive_count),
        (MessageState::Visible, 0),
        "back, uncounted"
    );
    assert_eq!(
        e.stats(&q).await.dead_letter_depth,
        0,
        "not dead-lettered on its last attempt"
    );
    assert_code(
        e.store.release(&q, d.receipt).await,
        ErrorCode::ReceiptStale,
        "release twice",
    );
    let d2 = e.recv_one(&q).await;
    assert_eq!(d2.receive_count, 1, "the next delivery is attempt 1 again");
}
