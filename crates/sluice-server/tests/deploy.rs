//! The deployment files under `deploy/` against a real broker: every metric the Grafana
//! dashboard queries is one `/metrics` serves, and the KEDA scaler's URL answers the number
//! the scaler reads.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use reqwest::Method;
use serde_json::{Value, json};

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file)
}

/// The sample names a scrape may hold, from its `# TYPE` lines (a counter's samples end in
/// `_total`, a histogram's in `_bucket`, `_sum` and `_count`) and its samples.
fn served_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            match kind {
                "counter" => {
                    names.insert(format!("{}_total", name.trim_end_matches("_total")));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_owned());
                }
            }
        } else if !line.starts_with('#')
            && let Some(name) = line.split(['{', ' ']).next()
            && !name.is_empty()
        {
            names.insert(name.to_owned());
        }
    }
    names
}

/// The metric names a PromQL expression mentions: its `sluice_…` identifiers.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("sluice_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

/// Every `expr` and templating `query` string in the dashboard.
fn expressions(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    ("query", Value::String(s)) if s.contains("sluice_") => out.push(s.clone()),
                    _ => expressions(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| expressions(i, out)),
        _ => {}
    }
}

#[tokio::test]
async fn the_grafana_dashboard_queries_only_metrics_the_broker_serves() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy("grafana-dashboard.json")).expect("read the dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    expressions(&dashboard, &mut exprs);
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| metrics_in(e)).collect();
    // What an operator opens it for: backlog, dead letters, rates, age, redrive progress.
    for needed in [
        "sluice_queue_visible",
        "sluice_queue_dead_letter_depth",
        "sluice_messages_acked_total",
        "sluice_queue_oldest_visible_age_seconds",
        "sluice_messages_redriven_total",
    ] {
        assert!(
            used.contains(needed),
            "the dashboard does not show {needed}"
        );
    }

    // Push may call the loopback port the queue below pushes to.
    let s = common::start_with(sluice_server::ServerOptions {
        push_allow: vec!["127.0.0.1".parse().expect("an address")],
        ..sluice_server::ServerOptions::default()
    })
    .await;
    s.put_queue("jobs", json!({})).await;
    s.send("jobs", json!(1)).await;
    let got = s.receive("jobs", json!({ "max": 1 })).await;
    s.call(
        Method::POST,
        "/v1/queues/jobs/ack",
        Some(json!({ "receipt": got[0]["receipt"] })),
    )
    .await;
    // A queue pushing to a loopback port nobody listens on: its failed pushes fill the push
    // metrics (the pusher looks for pushed queues every second).
    s.put_queue(
        "hooks",
        json!({ "push": { "url": "http://127.0.0.1:9/hook", "timeout_ms": 500 } }),
    )
    .await;
    s.send("hooks", json!(1)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let served = loop {
        let text = s
            .client
            .get(s.url("/metrics"))
            .send()
            .await
            .expect("scrape")
            .text()
            .await
            .expect("text");
        let served = served_names(&text);
        if served.contains("sluice_push_requests_total") || std::time::Instant::now() > deadline {
            break served;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let missing: Vec<&String> = used.iter().filter(|m| !served.contains(*m)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics /metrics does not serve: {missing:?}\nserved: {served:?}"
    );
    s.shutdown().await;
}

/// The value of `key: value` in the YAML text, unquoted.
fn yaml_value<'a>(yaml: &'a str, key: &str) -> &'a str {
    yaml.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| {
            l.trim()
                .trim_start_matches("- ")
                .strip_prefix(&format!("{key}:"))
        })
        .map(|v| v.trim().trim_matches('"'))
        .unwrap_or_else(|| panic!("{key} is not in the ScaledObject"))
}

#[tokio::test]
async fn the_keda_scaler_reads_desired_workers_from_the_scaling_route() {
    let yaml =
        std::fs::read_to_string(deploy("keda-scaledobject.yaml")).expect("read the ScaledObject");
    assert_eq!(yaml_value(&yaml, "type"), "metrics-api");
    assert_eq!(yaml_value(&yaml, "format"), "json");
    assert_eq!(yaml_value(&yaml, "authMode"), "bearer");
    let target: f64 = yaml_value(&yaml, "targetValue")
        .parse()
        .expect("targetValue is a number");
    let location = yaml_value(&yaml, "valueLocation");
    let url = yaml_value(&yaml, "url");
    let path = &url[url
        .find("/v1/")
        .unwrap_or_else(|| panic!("{url} is not a broker route"))..];
    let queue = path
        .strip_prefix("/v1/queues/")
        .and_then(|p| p.split('/').next())
        .expect("the queue in the URL");
    let per_worker: u64 = path
        .split_once("per_worker=")
        .and_then(|(_, v)| v.split('&').next())
        .and_then(|v| v.parse().ok())
        .expect("per_worker in the URL");

    let s = common::start().await;
    s.put_queue(queue, json!({})).await;
    // What the scaler reads, and the replicas KEDA makes of it: ceil(value / targetValue).
    let replicas = async || {
        let (status, v) = s.call(Method::GET, path, None).await;
        assert_eq!(status, 200, "{v}");
        let value = v[location]
            .as_f64()
            .unwrap_or_else(|| panic!("{location} is not a number in {v}"));
        (value / target).ceil() as u64
    };
    assert_eq!(replicas().await, 0, "an idle queue scales to zero");
    let sent = per_worker * 2 + 1;
    for i in 0..sent {
        s.send(queue, json!(i)).await;
    }
    assert_eq!(replicas().await, sent.div_ceil(per_worker));
    let got = s.receive(queue, json!({ "max": per_worker })).await;
    assert_eq!(
        replicas().await,
        sent.div_ceil(per_worker),
        "messages in flight still need their workers"
    );
    for d in &got {
        s.call(
            Method::POST,
            &format!("/v1/queues/{queue}/ack"),
            Some(json!({ "receipt": d["receipt"] })),
        )
        .await;
    }
    assert_eq!(replicas().await, (sent - per_worker).div_ceil(per_worker));
    s.shutdown().await;
}
