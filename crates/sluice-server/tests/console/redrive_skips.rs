//! The console says what a redrive leaves behind and why: in the dry run before the
//! confirmation, and on the job's page.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_whose_queue_is_gone_says_why_nothing_would_move() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue("s8", json!({"max_receive_count": 1})).await;
    dead_letters(&s, "s8", 3, "HTTP 503").await;
    let (code, v) = s.call(Method::DELETE, "/v1/queues/s8", None).await;
    assert!(code.is_success(), "{code} {v}");

    b.client.goto(&s.url("/#/dlq/s8.dlq")).await.expect("open");
    b.text_when("#groups", |t| t.contains("HTTP 503")).await;
    b.click("tr[data-group='HTTP 503'] button.redrive").await;
    b.click("#dry-run").await;
    let count = b.text_when("#dry-run-count", |t| t.contains("match")).await;
    assert_eq!(count, "Dry run: 3 messages match. 0 would move.");
    let why = b.text_when("#dry-run-skips", |t| !t.is_empty()).await;
    assert!(
        why.contains("3 would stay: their queue \"s8\" no longer exists"),
        "{why}"
    );
    assert_eq!(b.count("#confirm").await, 0, "nothing to confirm");
    b.screenshot("redrive-dry-run-skips.png").await;

    // A job started anyway ends without moving, and its page says why.
    let (code, job) = s
        .call(
            Method::POST,
            "/v1/redrives",
            Some(json!({"source": "s8.dlq"})),
        )
        .await;
    assert_eq!(code.as_u16(), 202, "{job}");
    let id = job["id"].as_str().expect("id").to_owned();
    b.client
        .goto(&s.url(&format!("/#/redrives/{id}")))
        .await
        .expect("open the job");
    b.text_when("#redrive-state", |t| t.contains("completed"))
        .await;
    let why = b.text_when("#redrive-skips", |t| !t.is_empty()).await;
    assert!(
        why.contains("3 stayed: their queue \"s8\" no longer exists"),
        "{why}"
    );
    b.screenshot("redrive-skips.png").await;
    b.close().await;
    s.shutdown().await;
}
