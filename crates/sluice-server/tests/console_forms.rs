//! The console reads and shows durations, rates and sizes as the command line does (`4d`,
//! `100/min`, `256KiB`), in a real browser: its `human.js` against the table that
//! `sluice_core::human` is held to, and the queue page's configuration form end to end.
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
