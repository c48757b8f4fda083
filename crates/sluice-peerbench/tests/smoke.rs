//! Smoke run of `sluice-peerbench` with tiny counts against an in-process Sluice broker and
//! every peer that answers on this machine. A missing peer is skipped loudly; with `CI=true`
//! it fails the test.

#![allow(clippy::unwrap_used)] // a test helper: a failure should panic the test

use std::time::{Duration, Instant};

const PEERS: [&str; 7] = [
    "sluice-postgres",
    "sluice-postgres-frames",
    "rabbitmq",
    "nats",
    "postgres",
    "redis",
    "redis-everysec",
];

/// A broker on the PostgreSQL engine, served in-process on ephemeral ports (HTTP, frames),
/// in a schema of its own; `None` (the `sluice-postgres` rows are then skipped) when the
/// database is missing.
async fn broker_on_postgres() -> Option<(
    String,
    String,
    sluice_testkit::postgres::SchemaGuard,
    tokio::sync::oneshot::Sender<()>,
)> {
    if !sluice_testkit::postgres::available().await {
        return None;
    }
    let schema = sluice_testkit::postgres::unique_schema("smoke");
    // Dropped with the run's result, also when an assertion fails.
    let guard = sluice_testkit::postgres::SchemaGuard::new(schema.clone());
    let store = sluice_postgres::PostgresStore::open(
        &sluice_testkit::postgres::url(),
        sluice_postgres::PostgresOptions {
            schema: schema.clone(),
            pool_size: 8,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let frames = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let frames_addr = frames.local_addr().unwrap().to_string();
    let broker = sluice_server::Broker::new(
        std::sync::Arc::new(store),
        sluice_server::ServerOptions::default(),
    )
    .with_frames(frames);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(broker.serve(listener, async {
        let _ = stopped.await;
    }));
    Some((url, frames_addr, guard, stop))
}

/// Runs the tool with 200 messages at batch 1 and 10, 2 + 2, JSON output, and `extra`.
async fn tiny_run(extra: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice-peerbench"))
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
        ])
        .args(extra)
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_available_system_runs_a_tiny_load() {
    let broker = sluice_testkit::InProcessBroker::start().await;
    let url = broker.url.clone();
    let frames = broker.frames.to_string();
    let relaxed = sluice_testkit::InProcessBroker::start_relaxed(Duration::from_secs(1)).await;
    let relaxed_frames = relaxed.frames.to_string();
    let on_pg = broker_on_postgres().await;
    let (pg_url, pg_frames) = on_pg.as_ref().map_or_else(
        || ("http://127.0.0.1:9".to_owned(), "127.0.0.1:9".to_owned()),
        |(u, f, _, _)| (u.clone(), f.clone()),
    );
    let started = Instant::now();
    let out = tiny_run(&[
        "--sluice-url",
        &url,
        "--sluice-frames",
        &frames,
        "--sluice-relaxed-url",
        &relaxed.url,
        "--sluice-relaxed-frames",
        &relaxed_frames,
        "--sluice-pg-url",
        &pg_url,
        "--sluice-pg-frames",
        &pg_frames,
    ])
    .await;
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
        !missing
            .iter()
            .any(|m| m == "sluice" || m == "sluice-frames"),
        "Sluice itself was skipped"
    );
    if ci {
        assert!(
            missing.is_empty(),
            "CI=true and peers are missing: {missing:?}"
        );
    }
    for system in ["sluice", "sluice-frames", "sluice-relaxed"]
        .into_iter()
        .chain(PEERS)
    {
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
    if let Some((_, _, guard, stop)) = on_pg {
        let _ = stop.send(());
        drop(guard);
    }
    eprintln!("smoke run took {:?}", started.elapsed());
}

/// Consumers that ack within their next receive count every message once, at both batch
/// sizes, including the last ones, which go in an ack of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_consumers_that_ack_within_the_receive_finish_the_count() {
    let broker = sluice_testkit::InProcessBroker::start().await;
    let out = tiny_run(&[
        "--systems",
        "sluice",
        "--sluice-acks",
        "in-receive",
        "--sluice-url",
        &broker.url,
    ])
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice-peerbench failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for batch in [1, 10] {
        let row = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["system"] == "sluice" && r["batch"] == batch)
            .unwrap_or_else(|| panic!("no row for batch {batch}: {v}"));
        assert_eq!(row["acked"], 200, "batch {batch}: {row}");
        assert_eq!(row["errors"], 0, "batch {batch}: {row}");
        assert_eq!(row["timed_out"], false, "batch {batch}: {row}");
        assert!(
            row["settings"]
                .as_str()
                .is_some_and(|s| s.contains("within their next receive")),
            "{row}"
        );
    }
}
