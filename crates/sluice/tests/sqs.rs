//! The SQS-compatible endpoint (`sluice serve --sqs-listen`) with the clients teams already
//! run: boto3 and the AWS CLI over the AWS JSON protocol, against the real broker, on the
//! same queues as Sluice's own API (`tests/sqs/boto3_suite.py`).
//!
//! boto3 and the AWS CLI come from the Python venv (`python/.venv`, extra `api`, installed by `.ci/run`) or
//! `$SLUICE_PYTHON`. Without it the test skips with a loud message on a developer's machine
//! and fails when `CI=true`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// True when the interpreter has boto3 and httpx; otherwise skips loudly, or fails on CI.
fn have_boto3() -> bool {
    let ok = Command::new(python())
        .args(["-c", "import boto3, httpx, awscli"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return true;
    }
    let msg = "the SQS endpoint's test needs Python with boto3, httpx and the AWS CLI (awscli): \
               install them with \
               python3 -m pip install -e 'python[api]' into python/.venv (as .ci/run does), or \
               set SLUICE_PYTHON to an interpreter that has them";
    common::skip_or_fail(msg);
    false
}

#[test]
fn boto3_works_against_the_sqs_endpoint() {
    if !have_boto3() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, url, sqs) = common::serve_with_sqs(&dir.path().join("data"), Stdio::null());
    run_suite("boto3_suite.py", &sqs, &url);
}

/// Runs the Python suite `name` of `tests/sqs` against the endpoint `sqs` (and the broker's
/// own API at `url`); fails the test with its output when it fails.
fn run_suite(name: &str, sqs: &str, url: &str) {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sqs")
        .join(name);
    let out = Command::new(python())
        .arg(&suite)
        .env("SQS_URL", sqs)
        .env("SLUICE_URL", url)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    assert!(
        out.status.success(),
        "{name} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn signed_requests_are_checked_against_sqs_keys() {
    if !have_boto3() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        r#"
[[sqs_keys]]
access_key_id = "AKIAADMIN0000000"
secret_access_key = "admin-secret-0123456789"
role = "admin"

[[sqs_keys]]
access_key_id = "AKIAPRODUCER0000"
secret_access_key = "producer-secret-0123456789"
role = "producer"
queues = ["orders-*"]
"#,
    )
    .expect("write the config");
    let (_broker, url, sqs) = common::serve_with_sqs_and(
        &dir.path().join("data"),
        Stdio::null(),
        &["--config", config.to_str().expect("UTF-8 path")],
    );
    run_suite("signed_suite.py", &sqs, &url);
    // Secrets are never shown by --check-config.
    let shown = common::sluice()
        .args(["serve", "--check-config", "--config"])
        .arg(&config)
        .output()
        .expect("sluice serve --check-config");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success() && text.contains("AKIAPRODUCER0000"),
        "{text}"
    );
    assert!(!text.contains("producer-secret"), "{text}");
}

#[test]
fn the_sqs_listener_stays_on_loopback() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = common::sluice()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--sqs-listen",
            "0.0.0.0:0",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .expect("run sluice serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback only"), "{err}");
}
