//! Smoke run of `sluice-peerbench` with tiny counts against an in-process Sluice broker and
//! every peer that answers on this machine. A missing peer is skipped loudly; with `CI=true`
//! it fails the test.

#![allow(clippy::unwrap_used)] // a test helper: a failure should panic the test

use std::time::Instant;

const PEERS: [&str; 5] = ["rabbitmq", "nats", "postgres", "redis", "redis-everysec"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_available_system_runs_a_tiny_load() {
    let broker = sluice_testkit::InProcessBroker::start().await;
    let url = broker.url.clone();
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice-peerbench"))
        .args([
            "--messages",
            "200",
            "--warmup",
            "20",
            "--batch",
            "1,10",
            "--producers",
            "2",
            "--consumers",
            "2",
            "--timeout",
            "15",
            "--json",
            "--sluice-url",
            &url,
        ])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "sluice-peerbench failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let skipped = v["skipped"].as_array().unwrap();
    let ci = std::env::var("CI").is_ok_and(|c| c == "true");
    let mut missing = Vec::new();
    for s in skipped {
        let name = s["system"].as_str().unwrap();
        let reason = s["reason"].as_str().unwrap();
        eprintln!("\n!!!!!!!! peerbench smoke: {name} SKIPPED: {reason} !!!!!!!!\n");
        missing.push(name.to_owned());
    }
    assert!(
        !missing.iter().any(|m| m == "sluice"),
        "Sluice itself was skipped"
    );
    if ci {
        assert!(
            missing.is_empty(),
            "CI=true and peers are missing: {missing:?}"
        );
    }
    for system in std::iter::once("sluice").chain(PEERS) {
        if missing.iter().any(|m| m == system) {
            continue;
        }
        for batch in [1, 10] {
            let row = rows
                .iter()
                .find(|r| r["system"] == system && r["batch"] == batch)
                .unwrap_or_else(|| panic!("no row for {system} batch {batch}"));
            assert_eq!(row["acked"], 200, "{system} batch {batch}: {row}");
            assert_eq!(row["timed_out"], false, "{system} batch {batch}: {row}");
            assert!(row["msgs_per_s"].as_f64().unwrap() > 0.0);
            assert!(row["p99_us"].as_u64().unwrap() > 0);
        }
    }
    eprintln!("smoke run took {:?}", started.elapsed());
}
