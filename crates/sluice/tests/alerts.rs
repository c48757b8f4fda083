//! The alerting rules shipped in `docs/prometheus-alerts.yml`, checked by Prometheus's own
//! `promtool`: the file loads (`check rules`), each rule fires on the series it is written
//! for and stays quiet otherwise (`test rules`), and every metric a rule reads is one a real
//! broker exports.
//!
//! `promtool` comes from Debian's `prometheus` package (installed by `.ci/run`) or
//! `$SLUICE_PROMTOOL`. Without it the test skips with a loud message on a developer's machine
//! and fails when `CI=true`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/prometheus-alerts.yml")
}

fn promtool() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_PROMTOOL") {
        return Some(PathBuf::from(p));
    }
    ["/usr/bin/promtool", "/usr/local/bin/promtool"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Unit tests in promtool's format: series over time, and the alerts expected at moments.
const RULE_TESTS: &str = r#"
rule_files:
  - RULES
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # A listener full from minute 10: three connections refused a minute.
      - series: 'sluice_connections_refused_total{instance="broker:7878", listener="frames"}'
        values: '0x10 3+3x10'
      - series: 'sluice_connections_refused_total{instance="broker:7878", listener="http"}'
        values: '0x20'
      # A queue dead-lettering two messages a minute.
      - series: 'sluice_messages_dead_lettered_total{queue="payments"}'
        values: '0+2x30'
      - series: 'sluice_messages_dead_lettered_total{queue="emails"}'
        values: '0x30'
      # A breaker open (or half-open) from minute 5 on; another open for 3 min only.
      - series: 'sluice_queue_breaker_state{queue="calls", state="closed"}'
        values: '1x4 0x20'
      - series: 'sluice_queue_breaker_state{queue="calls", state="open"}'
        values: '0x4 1x20'
      - series: 'sluice_queue_breaker_state{queue="hooks", state="closed"}'
        values: '1x4 0x2 1x20'
    alert_rule_test:
      - eval_time: 8m
        alertname: SluiceBreakerOpen
        exp_alerts: []
      - eval_time: 12m
        alertname: SluiceBreakerOpen
        exp_alerts:
          - exp_labels:
              severity: page
              queue: calls
            exp_annotations:
              summary: 'calls: circuit breaker open for more than 5 min'
              description: '`sluice stats calls` shows its transitions and whether it was forced. Once the dependency is back it closes by itself after its probes; a forced breaker needs `sluice queue breaker calls close`.'
      - eval_time: 5m
        alertname: SluiceConnectionsRefused
        exp_alerts: []
      - eval_time: 15m
        alertname: SluiceConnectionsRefused
        exp_alerts:
          - exp_labels:
              severity: ticket
              instance: broker:7878
              listener: frames
            exp_annotations:
              summary: 'broker:7878: 15 connections refused on the frames listener in 5 min'
              description: 'sluice_connections_open shows who holds them. Raise the open-file limit and max_connections, add a broker node, or find the client that holds connections it does not use (docs/connections.md).'
      - eval_time: 25m
        alertname: SluiceDeadLetterQueueGrowing
        exp_alerts:
          - exp_labels:
              severity: page
              queue: payments
            exp_annotations:
              summary: 'payments: 30 messages dead-lettered in 15 min'
              description: 'See why with `sluice dlq list payments.dlq --group-by error`; once the cause is fixed, redrive with `sluice redrive payments.dlq --rate 10/s`.'
"#;

#[test]
fn the_shipped_alert_rules_load_fire_and_read_real_metrics() {
    let Some(tool) = promtool() else {
        common::skip_or_fail(
            "the alert rules test needs promtool: install Debian's prometheus package \
             (apt-get install --no-install-recommends prometheus) or set SLUICE_PROMTOOL",
        );
        return;
    };
    let rules = rules_file();
    let out = Command::new(&tool)
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool check rules:\n{}",
        text(&out)
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let tests = dir.path().join("alerts-test.yml");
    let rules_path = rules.to_str().expect("a UTF-8 path");
    std::fs::write(&tests, RULE_TESTS.replace("RULES", rules_path)).expect("write the tests");
    let out = Command::new(&tool)
        .arg("test")
        .arg("rules")
        .arg(&tests)
        .output()
        .expect("run promtool");
    assert!(out.status.success(), "promtool test rules:\n{}", text(&out));

    // Every metric a rule reads is exported by a broker that has seen some traffic, with a
    // governed queue.
    let broker = common::broker();
    let exported = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            let c = reqwest::Client::new();
            common::call(
                &c,
                reqwest::Method::PUT,
                format!("{}/v1/queues/jobs", broker.url),
                Some(serde_json::json!({
                    "adaptive": {"min_per_min": 60, "max_per_min": 600},
                    "breaker": {},
                })),
            )
            .await;
            common::call(
                &c,
                reqwest::Method::POST,
                format!("{}/v1/queues/jobs/messages", broker.url),
                Some(serde_json::json!({"body": 1})),
            )
            .await;
            c.get(format!("{}/metrics", broker.url))
                .send()
                .await
                .expect("scrape")
                .text()
                .await
                .expect("metrics")
        });
    let names: BTreeSet<&str> = exported
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let rules_text = std::fs::read_to_string(&rules).expect("read the rules");
    let read: BTreeSet<&str> = rules_text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .flat_map(|e| e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| w.starts_with("sluice_"))
        .collect();
    assert!(!read.is_empty(), "the rules read no sluice_ metric");
    let missing: Vec<_> = read.difference(&names).collect();
    assert!(
        missing.is_empty(),
        "rules read metrics the broker does not export: {missing:?}"
    );
}
