//! The console's forms in a real browser: durations, rates and sizes read and shown as the
//! command line does (`4d`, `100/min`, `256KiB`: its `human.js` against the table that
//! `sluice_core::human` is held to, and the queue page's configuration form end to end), and
//! the audit log's page with its filters and pages.
//!
//! Without Chromium and ChromeDriver these tests say so loudly and pass, unless `CI=true`.

mod common;

use fantoccini::Locator;
use reqwest::Method;
use serde_json::{Value, json};
use sluice_testkit::browser::browser;

/// The table of typed values and what each reads as, shared with `sluice_core::human`.
const TABLE: &str = include_str!("../../sluice-core/tests/human_values.json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_values_as_the_command_line_does() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    b.client.goto(&s.url("/")).await.expect("open");
    b.text_when("#who", |t| !t.is_empty()).await;
    let table: Value = serde_json::from_str(TABLE).expect("the table is JSON");
    // Each case as the console reads it: the value, or the message it refuses with.
    let got = b
        .client
        .execute_async(
            "const [table, done] = arguments;
             import('/console/human.js').then((h) => {
               const read = (parse, cases) => cases.map(([input]) => {
                 try { return [input, parse(input)]; } catch (e) { return [input, e.message]; }
               });
               const shown = (fmt, cases) => cases.map(([value]) => [value, fmt(value)]);
               done({
                 durations: read(h.parseDuration, table.durations),
                 rates: read(h.parseRate, table.rates),
                 sizes: read(h.parseSize, table.sizes),
                 formatted_durations: shown(h.fmtMs, table.formatted_durations),
                 formatted_rates: shown(h.fmtRate, table.formatted_rates),
                 formatted_sizes: shown(h.fmtSize, table.formatted_sizes),
               });
             }, (e) => done(String(e)));",
            vec![table.clone()],
        )
        .await
        .expect("script");
    for part in [
        "durations",
        "rates",
        "sizes",
        "formatted_durations",
        "formatted_rates",
        "formatted_sizes",
    ] {
        let want = table[part].as_array().expect("cases");
        let got = got[part]
            .as_array()
            .unwrap_or_else(|| panic!("{part}: {got}"));
        assert_eq!(got.len(), want.len(), "{part}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g, w, "{part}: the console reads {} differently", w[0]);
        }
    }
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_form_takes_durations_rates_and_sizes() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    let (code, v) = s
        .call(
            Method::PUT,
            "/v1/queues/partner",
            Some(json!({"visibility_timeout_ms": 30_000, "retention_ms": 345_600_000})),
        )
        .await;
    assert!(code.is_success(), "{v}");
    b.client
        .goto(&s.url("/#/queues/partner"))
        .await
        .expect("open");
    let value = |name: &'static str| {
        let client = b.client.clone();
        async move {
            client
                .find(Locator::Css(&format!("input[name='{name}']")))
                .await
                .expect("field")
                .prop("value")
                .await
                .expect("value")
                .unwrap_or_default()
        }
    };
    b.text_when("#config", |t| !t.is_empty()).await;
    // Shown as the command line shows them.
    assert_eq!(value("retention_ms").await, "4d");
    assert_eq!(value("visibility_timeout_ms").await, "30s");
    assert_eq!(value("max_message_bytes").await, "256KiB");

    let set = |name: &'static str, text: &'static str| {
        let client = b.client.clone();
        async move {
            let field = client
                .find(Locator::Css(&format!("input[name='{name}']")))
                .await
                .expect("field");
            field.clear().await.expect("clear");
            field.send_keys(text).await.expect("type");
        }
    };
    // What is not a duration is refused in the page, with the command line's message, and
    // nothing is sent.
    set("retention_ms", "4 weeks").await;
    b.click("button[form='config']").await;
    let err = b.text_when("#config-out .error", |t| !t.is_empty()).await;
    assert_eq!(
        err,
        "Retention: \"4 weeks\" is not a duration; write it like 500ms, 30s, 5m, 2h, 4d or 1h30m"
    );
    b.screenshot("config-form.png").await;
    let (_, q) = s.call(Method::GET, "/v1/queues/partner", None).await;
    assert_eq!(q["config"]["retention_ms"], 345_600_000);

    set("retention_ms", "96h").await;
    set("rate_limit", "100/min").await;
    set("visibility_timeout_ms", "1m30s").await;
    set("max_message_bytes", "1MiB").await;
    b.click("button[form='config']").await;
    b.text_when("#config-out .ok", |t| t == "Saved.").await;
    let (_, q) = s.call(Method::GET, "/v1/queues/partner", None).await;
    assert_eq!(q["config"]["retention_ms"], 345_600_000);
    assert_eq!(
        q["config"]["rate_limit"],
        json!({"limit": 100, "period_ms": 60_000})
    );
    assert_eq!(q["config"]["visibility_timeout_ms"], 90_000);
    assert_eq!(q["config"]["max_message_bytes"], 1_048_576);
    // Shown back as the broker holds them.
    assert_eq!(value("retention_ms").await, "4d");
    assert_eq!(value("rate_limit").await, "100/min");
    assert_eq!(value("visibility_timeout_ms").await, "1m30s");
    assert_eq!(value("max_message_bytes").await, "1MiB");
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_page_filters_by_kind_actor_and_action_a_page_at_a_time() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    // An operator's actions, and a dead letter the broker records.
    let put = |name: String, body: Value| {
        let s = &s;
        async move {
            let (code, v) = s
                .call(Method::PUT, &format!("/v1/queues/{name}"), Some(body))
                .await;
            assert!(code.is_success(), "{v}");
        }
    };
    put("orders".into(), json!({"max_receive_count": 1})).await;
    let (_, v) = s
        .call(
            Method::POST,
            "/v1/queues/orders/messages",
            Some(json!({"body": 1})),
        )
        .await;
    let id = v["id"].as_str().expect("id").to_owned();
    let (_, got) = s
        .call(Method::POST, "/v1/queues/orders/receive", Some(json!({})))
        .await;
    let receipt = got["messages"][0]["receipt"].as_str().expect("receipt");
    s.call(
        Method::POST,
        "/v1/queues/orders/reject",
        Some(json!({"receipt": receipt, "error": "bad input"})),
    )
    .await;
    s.call(Method::POST, "/v1/queues/orders/purge", None).await;

    b.client.goto(&s.url("/#/audit")).await.expect("open");
    let all = b
        .text_when("#audit tbody", |t| t.contains("queue.purge"))
        .await;
    assert!(all.contains("message.dead_lettered"), "{all}");
    // Newest first.
    let first = b.text_when("#audit tbody tr", |_| true).await;
    assert!(first.contains("queue.purge"), "{first}");

    let kind = b
        .client
        .find(Locator::Css("#audit-kind option[value='message']"))
        .await
        .expect("kind");
    kind.click().await.expect("choose");
    b.click("#audit-filter button[type='submit']").await;
    let messages = b
        .text_when("#audit tbody", |t| !t.contains("queue.purge"))
        .await;
    assert!(messages.contains("message.dead_lettered"), "{messages}");
    assert!(messages.contains(&id), "the dead letter's id: {messages}");
    assert!(messages.contains("orders"), "{messages}");

    // Operators' purges only.
    b.client
        .find(Locator::Css("#audit-kind option[value='operator']"))
        .await
        .expect("kind")
        .click()
        .await
        .expect("choose");
    b.client
        .find(Locator::Css("#audit-action"))
        .await
        .expect("action")
        .send_keys("queue.purge")
        .await
        .expect("type");
    b.click("#audit-filter button[type='submit']").await;
    b.text_when("#audit tbody", |t| !t.contains("queue.create"))
        .await;
    assert_eq!(b.count("#audit tbody tr").await, 1);
    b.screenshot("audit.png").await;

    // A hundred entries a page, then the older ones on request.
    for i in 0..120 {
        put(format!("q{i}"), json!({})).await;
    }
    let action = b
        .client
        .find(Locator::Css("#audit-action"))
        .await
        .expect("action");
    action.clear().await.expect("clear");
    action.send_keys("queue.create").await.expect("type");
    b.click("#audit-filter button[type='submit']").await;
    b.text_when("#audit tbody", |t| t.contains("q119")).await;
    assert_eq!(b.count("#audit tbody tr").await, 100);
    b.click("#audit-older").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while b.count("#audit tbody tr").await < 121 {
        assert!(
            std::time::Instant::now() < deadline,
            "the older entries did not come"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        b.count("#audit tbody tr").await,
        121,
        "120 queues and orders"
    );
    assert_eq!(b.count("#audit-older[hidden]").await, 1, "nothing older");

    // What the broker refuses shows its reason.
    b.client
        .find(Locator::Css("#audit-since"))
        .await
        .expect("since")
        .send_keys("yesterday")
        .await
        .expect("type");
    b.click("#audit-filter button[type='submit']").await;
    let err = b.text_when("#audit-out .error", |t| !t.is_empty()).await;
    assert!(err.contains("since"), "{err}");
    b.close().await;
    s.shutdown().await;
}
