//! `sluice drill` end to end: a small, fast scenario passes every criterion, and a
//! misconfigured one (no idempotency key) fails criterion 1 — so the drill can really fail.

use std::process::Command;
use std::time::{Duration, Instant};

/// A small scenario: 400 reservations over 4 scenario minutes, a 4-minute outage, at 120x.
const SMALL: &[&str] = &[
    "drill",
    "--reservations",
    "400",
    "--poison",
    "10",
    "--undecodable",
    "5",
    "--hold",
    "2m",
    "--arrival-window",
    "4m",
    "--outage",
    "4m",
    "--max-receive-count",
    "2",
    "--time-scale",
    "120",
    "--deadline",
    "40s",
];

fn drill(extra: &[&str]) -> (i32, String) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(SMALL)
        .args(extra)
        .output()
        .expect("run sluice drill");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "the drill took {:?}",
        start.elapsed()
    );
    (
        out.status.code().unwrap_or(-1),
        format!("{stdout}\n--- stderr ---\n{stderr}"),
    )
}

#[test]
fn small_drill_passes_and_writes_a_report() {
    let dir = tempfile::tempdir().expect("temp dir");
    let report = dir.path().join("drill.svg");
    let report_arg = report.to_str().expect("utf-8 path");
    let (code, out) = drill(&["--report", report_arg]);
    assert_eq!(code, 0, "{out}");
    for n in 1..=4 {
        assert!(
            out.contains(&format!("PASS {n}. ")),
            "criterion {n}:\n{out}"
        );
    }
    assert!(out.contains("drill PASSED"), "{out}");
    let svg = std::fs::read_to_string(&report).expect("report written");
    assert!(svg.starts_with("<svg") && svg.contains("outage") && svg.contains("DLQ depth"));
}

#[test]
fn without_idempotency_key_criterion_1_fails() {
    let (code, out) = drill(&["--no-idempotency-key"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("FAIL 1. "), "{out}");
    assert!(out.contains("PASS 2. "), "{out}");
    assert!(out.contains("drill FAILED"), "{out}");
}
