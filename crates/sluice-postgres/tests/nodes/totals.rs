//! One stats answer is one reading on any node: its totals are never behind the depths they
//! explain, however recently another node sent, received or acked (each node counts its hot
//! paths in memory and writes them every 250 ms).

use super::*;

#[tokio::test]
async fn stats_through_either_node_count_every_change_their_depths_show() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "totals").await;
    // The nodes hear each other within a second of opening.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let (mut sent, mut received, mut acked) = (0u64, 0u64, 0u64);
    for round in 0..8 {
        let (here, there) = if round % 2 == 0 {
            (&n.a, &n.b)
        } else {
            (&n.b, &n.a)
        };
        here.send(
            &work,
            (0..10).map(|i| msg(&format!("{round}.{i}"))).collect(),
        )
        .await
        .expect("send");
        sent += 10;
        let s = there.stats(&work).await.expect("stats");
        assert_eq!(
            (s.totals.sent, s.visible + s.in_flight),
            (sent, sent - acked),
            "round {round}: sent through one node, read through the other"
        );
        let ds = here.receive(&work, recv(5)).await.expect("receive");
        received += ds.len() as u64;
        let s = there.stats(&work).await.expect("stats");
        assert_eq!(
            (s.totals.received, s.in_flight),
            (received, ds.len() as u64),
            "round {round}: received"
        );
        let acks = ds
            .iter()
            .map(|d| AckRequest {
                receipt: d.receipt,
                result: None,
            })
            .collect();
        for r in here.ack(&work, acks).await.expect("ack") {
            r.expect("acked");
        }
        acked += ds.len() as u64;
        let s = there.stats(&work).await.expect("stats");
        assert_eq!(
            (s.totals.acked, s.in_flight),
            (acked, 0),
            "round {round}: acked"
        );
    }
}
