//! `sluice bench` end to end against a live `sluice serve`: a bounded run over HTTP and one
//! over the frame protocol, each of which must send its budget, acknowledge all of it and
//! measure latencies (also spread over FIFO groups); a push run whose backlog all reaches the
//! bench's endpoint; a noisy-neighbour comparison whose quiet keys are all delivered with keys
//! and none without; and a frame address with nothing behind it fails before the run.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

mod common;

/// Runs `sluice bench --url URL ARGS`.
fn bench(url: &str, args: &[&str]) -> Output {
    Command::new(common::BIN)
        .args(["bench", "--url", url])
        .args(args)
        .env_remove("SLUICE_URL")
        .env_remove("SLUICE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run sluice bench")
}

/// The JSON report of a run that must have succeeded.
fn json_report(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

/// A run of 3,000 messages in batches of 10, all of it measured; returns its JSON report.
fn bounded_run(url: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "--queue",
        "loaded",
        "--producers",
        "2",
        "--consumers",
        "2",
        "--batch",
        "10",
        "--body-bytes",
        "256",
        "--messages",
        "3000",
        "--warmup",
        "0s",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = bench(url, &args);
    assert!(
        out.status.success(),
        "sluice bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

fn assert_complete(report: &Value, transport: &str) {
    assert_eq!(report["transport"], transport, "{report:#}");
    assert_eq!(
        report["sent"], 3000,
        "every budgeted message sent: {report:#}"
    );
    assert_eq!(
        report["unacked_at_end"], 0,
        "every message acknowledged: {report:#}"
    );
    assert_eq!(report["errors"], serde_json::json!({}), "{report:#}");
    // Every message was sent in the window, so each delivery measured its latency (a
    // message redelivered after a slow ack would be measured twice, never less).
    let e2e = report["end_to_end_latency_us"]["count"]
        .as_u64()
        .expect("a sample count");
    assert!(e2e >= 3000, "end-to-end samples: {report:#}");
    let sends = report["send_latency_us"]["count"].as_u64();
    assert!(sends.is_some_and(|n| n >= 300), "send samples: {report:#}");
}

#[test]
fn bench_measures_a_broker_over_http_and_over_frames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_child, url, frames) =
        common::serve_with_frames(&dir.path().join("data"), Stdio::null(), &[]);

    let http = bounded_run(&url, &[]);
    assert_complete(&http, "http");
    assert_eq!(http["frames"], Value::Null);

    let over_frames = bounded_run(&url, &["--frames", &frames]);
    assert_complete(&over_frames, "frames");
    assert_eq!(over_frames["frames"], frames.as_str());

    // Spread over FIFO groups, the same budget completes.
    let grouped = bounded_run(&url, &["--groups", "20"]);
    assert_complete(&grouped, "http");
}

#[test]
fn bench_push_times_a_backlog_pushed_to_its_own_endpoint() {
    // The bench's endpoint listens on 127.0.0.1, which push calls only when allowed.
    let broker = common::broker_and(&["--push-allow", "127.0.0.1"]);
    let out = bench(
        &broker.url,
        &[
            "--push",
            "--queue",
            "pushed",
            "--consumers",
            "8",
            "--messages",
            "500",
            "--json",
        ],
    );
    let report = json_report(&out);
    assert_eq!(report["mode"], "push", "{report}");
    assert_eq!(report["messages"], 500, "{report}");
    assert!(
        report["pushed_per_s"].as_f64().is_some_and(|r| r > 0.0),
        "{report}"
    );
}

#[test]
fn noisy_neighbour_measures_quiet_keys_with_and_without_keys() {
    let broker = common::broker();
    // A backlog far larger than two consumers working 20 ms a message get through in the
    // window: without keys no quiet message can be delivered, with keys every one is.
    let out = bench(
        &broker.url,
        &[
            "--noisy-neighbour",
            "--queue",
            "nn",
            "--noisy-backlog",
            "2000",
            "--quiet-keys",
            "5",
            "--consumers",
            "2",
            "--work",
            "20ms",
            "--duration",
            "2s",
            "--json",
        ],
    );
    let report = json_report(&out);
    let runs = report.as_array().expect("one outcome per mode");
    assert_eq!(runs.len(), 2, "{report:#}");
    let (keyed, unkeyed) = (&runs[0], &runs[1]);
    assert_eq!(
        (&keyed["mode"], &unkeyed["mode"]),
        (&"keyed".into(), &"unkeyed".into())
    );
    let sent = keyed["quiet_sent"].as_u64().expect("a count");
    assert!(sent >= 5, "{report:#}");
    assert_eq!(keyed["quiet_delivered"], sent, "{report:#}");
    assert_eq!(keyed["quiet_undelivered"], 0, "{report:#}");
    assert_eq!(unkeyed["quiet_delivered"], 0, "{report:#}");
    assert!(
        unkeyed["wait_p50_ms"].as_f64() > keyed["wait_max_ms"].as_f64(),
        "{report:#}"
    );
    // Its queues are gone afterwards.
    let listed = Command::new(common::BIN)
        .args(["queue", "list", "--url", &broker.url])
        .env_remove("SLUICE_TOKEN")
        .output()
        .expect("run sluice queue list");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        !listed.contains("nn-keyed") && !listed.contains("nn-unkeyed"),
        "{listed}"
    );
}

#[test]
fn a_frame_address_without_a_listener_fails_before_the_run() {
    let broker = common::broker();
    // A port that was just free: nothing listens there.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let out = bench(
        &broker.url,
        &["--frames", &free, "--messages", "10", "--json"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("--frames-listen {free}")),
        "the error says what to check: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "no report for a run that did not start"
    );
}
