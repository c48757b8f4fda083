//! Redrives in the console: a DLQ's group drilled into and redriven at a chosen rate, and what
//! a redrive leaves behind and why, in the dry run before the confirmation and on the job's
//! page.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_group_is_drilled_into_and_redriven_at_the_chosen_rate() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue("payments", json!({"max_receive_count": 1}))
        .await;
    dead_letters(&s, "payments", 6, "upstream timeout after 30s").await;
    dead_letters(&s, "payments", 4, "HTTP 429 Too Many Requests").await;

    b.client
        .goto(&s.url("/#/dlq/payments.dlq"))
        .await
        .expect("open");
    b.text_when("#groups", |t| t.contains("HTTP 429")).await;
    b.screenshot("dlq.png").await;
    b.click("tr[data-group='HTTP 429 Too Many Requests'] button.show")
        .await;
    b.text_when("#messages tbody", |t| t.contains("HTTP 429"))
        .await;
    assert_eq!(b.count("#messages tbody tr").await, 4);

    // Redrive the 429s at 120 a minute: a dry run counts them first.
    b.click("tr[data-group='HTTP 429 Too Many Requests'] button.redrive")
        .await;
    let rate = b.client.find(Locator::Css("#rate")).await.expect("rate");
    rate.clear().await.expect("clear");
    rate.send_keys("120").await.expect("type");
    b.client
        .find(Locator::Css("#rate-unit option[value='60000']"))
        .await
        .expect("per minute")
        .click()
        .await
        .expect("choose");
    b.client
        .find(Locator::Css("#guard"))
        .await
        .expect("guard")
        .send_keys("50")
        .await
        .expect("type");
    b.click("#dry-run").await;
    let count = b.text_when("#dry-run-count", |t| t.contains("match")).await;
    assert_eq!(count, "Dry run: 4 messages match.");
    b.screenshot("redrive-confirm.png").await;
    let started = Instant::now();
    b.click("#confirm").await;
    b.text_when("#redrive-state", |t| t.contains("completed"))
        .await;
    let took = started.elapsed();
    b.screenshot("redrive.png").await;

    let (_, jobs) = s.call(Method::GET, "/v1/redrives", None).await;
    let job = jobs["redrives"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["dry_run"] == false)
        .expect("the redrive")
        .clone();
    assert_eq!(job["moved"], 4, "{job}");
    assert_eq!(job["rate"], json!({"limit": 120, "period_ms": 60000}));
    assert_eq!(job["pause_if_failing"]["percent"], 50);
    assert_eq!(
        job["filter"]["error_is"], "HTTP 429 Too Many Requests",
        "a group is its exact error, not every error containing it"
    );
    // Four moves spaced 0.5 s apart take at least 1.5 s.
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert_eq!(s.stats("payments").await["visible"], 4);
    assert_eq!(
        s.stats("payments.dlq").await["visible"],
        6,
        "the timeouts stay"
    );

    // Any filter, not only a group: the timeouts dead-lettered in the last hour.
    b.client
        .goto(&s.url("/#/dlq/payments.dlq"))
        .await
        .expect("open");
    b.text_when("#groups", |t| t.contains("timeout")).await;
    // Grouped by reason: the group's messages are listed, not only a sample.
    b.click("#group-by option[value='reason']").await;
    b.text_when("#groups", |t| t.contains("rejected")).await;
    b.click("tr[data-group='rejected'] button.show").await;
    b.text_when("#messages tbody", |t| t.contains("timeout"))
        .await;
    assert_eq!(b.count("#messages tbody tr").await, 6);
    for (field, value) in [("#f-error", "timeout"), ("#f-after", "1h")] {
        b.client
            .find(Locator::Css(field))
            .await
            .expect("filter field")
            .send_keys(value)
            .await
            .expect("type");
    }
    b.click("#filter-show").await;
    b.text_when("#messages tbody", |t| t.contains("timeout"))
        .await;
    assert_eq!(b.count("#messages tbody tr").await, 6);
    b.click("#filter-redrive").await;
    b.click("#dry-run").await;
    let count = b.text_when("#dry-run-count", |t| t.contains("match")).await;
    assert_eq!(
        count, "Dry run: 6 messages match.",
        "a relative time works in a redrive too"
    );
    b.close().await;
    s.shutdown().await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_dead_letters_are_grouped_by_key_and_redriven_alone() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue("tenants", json!({"max_receive_count": 1}))
        .await;
    let msgs: Vec<Value> = ["acme", "acme", "acme", "globex"]
        .iter()
        .map(|k| json!({"body": {"tenant": k}, "key": k}))
        .collect();
    reject_sent(&s, "tenants", msgs, "account suspended").await;

    b.client
        .goto(&s.url("/#/dlq/tenants.dlq"))
        .await
        .expect("open");
    b.text_when("#groups", |t| t.contains("account suspended"))
        .await;
    b.click("#group-by option[value='key']").await;
    b.text_when("#groups", |t| t.contains("globex")).await;
    b.click("tr[data-group='acme'] button.show").await;
    b.text_when("#messages tbody", |t| t.contains("account suspended"))
        .await;
    assert_eq!(b.count("#messages tbody tr").await, 3);
    b.click("tr[data-group='acme'] button.redrive").await;
    b.click("#dry-run").await;
    let count = b.text_when("#dry-run-count", |t| t.contains("match")).await;
    assert_eq!(count, "Dry run: 3 messages match.");
    b.screenshot("dlq-by-key.png").await;
    b.close().await;
    s.shutdown().await;
}
